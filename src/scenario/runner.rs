//! Runs a latency scenario over one or several backends, interleaved in blocks so machine drift
//! cancels out, and turns the samples into results.

use super::lat::{self, LatParams, LatSamples, PingState};
use super::ScenarioError;
use crate::backend::direct::DirectEnd;
use crate::backend::setup::{self, Dev, SetupError};
use crate::backend::verbs::VerbsEnd;
use crate::backend::{BackendKind, OpKind};
use crate::clock::Calibration;
use crate::mlx5::sq::DbMode;
use crate::model::DirectModelQp;
use crate::report::{Hist, Stats};
use crate::verbs::direct::DirectQp;
use std::sync::atomic::AtomicBool;

/// A connected pair of any backend (each arm runs with static dispatch).
pub enum AnyPair {
    /// verbs or wr.
    Verbs(Box<(VerbsEnd, VerbsEnd)>),
    /// direct on model0.
    Model(Box<(DirectEnd<DirectModelQp>, DirectEnd<DirectModelQp>)>),
    /// direct on mlx5.
    Mlx5(Box<(DirectEnd<DirectQp>, DirectEnd<DirectQp>)>),
}

impl AnyPair {
    /// Builds the pair for `kind` on `dev`.
    pub fn new(dev: &Dev, kind: BackendKind, op: OpKind, buf_len: usize, mode: DbMode) -> Result<Self, SetupError> {
        dev.supports(kind)?;
        Ok(match (dev, kind) {
            (Dev::Model(m), BackendKind::Direct) => AnyPair::Model(Box::new(setup::model_pair_with(
                m,
                op,
                buf_len,
                mode,
                m.opts.transport,
            )?)),
            (_, BackendKind::Direct) => AnyPair::Mlx5(Box::new(setup::mlx5_pair(dev, op, buf_len, mode)?)),
            _ => AnyPair::Verbs(Box::new(setup::verbs_pair(dev, kind, op, buf_len)?)),
        })
    }

    /// Both QPs' states as the device reads them back.
    pub fn describe(&self) -> [String; 2] {
        use crate::backend::Backend;
        match self {
            AnyPair::Verbs(p) => [p.0.describe_qp(), p.1.describe_qp()],
            AnyPair::Model(p) => [p.0.describe_qp(), p.1.describe_qp()],
            AnyPair::Mlx5(p) => [p.0.describe_qp(), p.1.describe_qp()],
        }
    }

    /// Largest inline payload of the pair's QPs.
    pub fn max_inline(&self) -> u32 {
        use crate::backend::Backend;
        match self {
            AnyPair::Verbs(p) => p.0.max_inline().min(p.1.max_inline()),
            AnyPair::Model(p) => p.0.max_inline().min(p.1.max_inline()),
            AnyPair::Mlx5(p) => p.0.max_inline().min(p.1.max_inline()),
        }
    }

    fn run(
        &mut self,
        p: &LatParams,
        iters: u64,
        warmup: u64,
        st: &mut PingState,
        intr: &AtomicBool,
    ) -> Result<LatSamples, ScenarioError> {
        match self {
            AnyPair::Verbs(b) => lat::run(&mut b.0, &mut b.1, p, iters, warmup, st, intr),
            AnyPair::Model(b) => lat::run(&mut b.0, &mut b.1, p, iters, warmup, st, intr),
            AnyPair::Mlx5(b) => lat::run(&mut b.0, &mut b.1, p, iters, warmup, st, intr),
        }
    }
}

/// A backend's pair with the state its ping-pongs carry from one block and size to the next
/// (marker numbering; the receives a SEND ping-pong keeps posted are posted once per pair).
pub struct LatPair {
    /// The backend.
    pub kind: BackendKind,
    /// Its two connected ends.
    pub pair: AnyPair,
    /// Its ends wait for completion events (`-e`) instead of polling.
    pub events: bool,
    state: PingState,
}

impl LatPair {
    /// A pair of `kind` that has not run yet.
    pub fn new(kind: BackendKind, pair: AnyPair) -> Self {
        LatPair {
            kind,
            pair,
            events: false,
            state: PingState::default(),
        }
    }

    /// A pair of `kind` whose ends wait for completion events (`-e`): verbs and wr.
    pub fn with_events(dev: &Dev, kind: BackendKind, op: OpKind, buf_len: usize) -> Result<Self, SetupError> {
        if kind == BackendKind::Direct {
            return Err(setup::no_events_on_direct());
        }
        Ok(LatPair {
            kind,
            pair: AnyPair::Verbs(Box::new(setup::verbs_pair_with(dev, kind, op, buf_len, true)?)),
            events: true,
            state: PingState::default(),
        })
    }

    /// The pair's name in tables, tags and results: the backend's, `-e` added for events.
    pub fn label(&self) -> String {
        if self.events {
            format!("{}-e", self.kind.as_str())
        } else {
            self.kind.as_str().to_string()
        }
    }
}

/// One backend's result for one operation and size (schema 2: units in the field names).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct LatResult {
    /// `lat`.
    pub scenario: String,
    /// Backend name.
    pub backend: String,
    /// Operation as the command line names it (`write`, `send`, `read`, `atomic`).
    pub op: String,
    /// The verb (`write`, `send`, `read`, `fetch_add`, `cmp_swap`).
    pub verb: String,
    /// Message size.
    #[serde(rename = "size_bytes")]
    pub size: u32,
    /// Inline or not.
    pub inline: bool,
    /// `one_way` (half the round trip) or `round_trip`.
    pub figure: String,
    /// Measured iterations.
    pub iterations: u64,
    /// The figure's statistics, ns.
    #[serde(rename = "latency_ns")]
    pub latency: Stats,
    /// The post call's statistics, ns.
    #[serde(rename = "post_ns")]
    pub post: Stats,
    /// From the end of the post to the response, ns.
    #[serde(rename = "completion_wait_ns")]
    pub completion_wait: Stats,
    /// The median of the figure in each block, ns (for statistics across blocks).
    pub block_medians_ns: Vec<f64>,
    /// The 99th percentile of the figure in each block, ns (the p99 verdict's interval; absent
    /// in files written before it was recorded).
    #[serde(default)]
    pub block_p99_ns: Vec<f64>,
    /// The figure's HdrHistogram (V2, deflate, base64), ns.
    #[serde(rename = "histogram_ns")]
    pub histogram: String,
    /// The post call's HdrHistogram, ns.
    #[serde(rename = "post_histogram_ns")]
    pub post_histogram: String,
    /// The post median is at or below the timer's own overhead: not a real measurement.
    pub post_below_overhead: bool,
    /// `events`: the ends waited for completion events (`-e`: `ibv_req_notify_cq`,
    /// `ibv_get_cq_event`) instead of polling; absent: polling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion: Option<String>,
}

/// Each block's median and 99th percentile of the figure: the samples of the statistics across
/// blocks (`compare`'s intervals, the summary's uncertainty).
#[derive(Debug, Clone, Default)]
pub struct Blocks {
    /// Per-block medians, ns.
    pub medians: Vec<f64>,
    /// Per-block 99th percentiles, ns.
    pub p99s: Vec<f64>,
}

impl Blocks {
    /// Adds one block: its figures in ns, in any order.
    pub fn add(&mut self, mut figures: Vec<f64>) {
        figures.sort_by(|a, b| a.total_cmp(b));
        self.medians.push(crate::report::percentile(&figures, 0.5));
        self.p99s.push(crate::report::percentile(&figures, 0.99));
    }
}

/// The figure of each sample in ns: half the round trip where the figure is one-way.
pub fn figures_ns(p: &LatParams, rtt: &[u64], cal: &Calibration) -> Vec<f64> {
    let half = if lat::one_way(p.op) { 2.0 } else { 1.0 };
    rtt.iter().map(|&t| cal.to_ns(t) / half).collect()
}

/// Turns one backend's samples into its result.
pub fn finish(
    kind: BackendKind,
    p: &LatParams,
    s: &LatSamples,
    blocks: Blocks,
    cal: &Calibration,
) -> Result<LatResult, ScenarioError> {
    let fig = figures_ns(p, &s.rtt, cal);
    let post: Vec<f64> = s.post.iter().map(|&t| cal.to_ns(t)).collect();
    let wait: Vec<f64> = s.wait.iter().map(|&t| cal.to_ns(t)).collect();
    let (mut h, mut hp) = (Hist::new(), Hist::new());
    fig.iter().for_each(|&v| h.record(v));
    post.iter().for_each(|&v| hp.record(v));
    let empty = || ScenarioError::Invalid("no samples".into());
    let post_stats = Stats::of(&post).ok_or_else(empty)?;
    Ok(LatResult {
        scenario: "lat".into(),
        backend: kind.as_str().into(),
        op: p.op.cli_name().into(),
        verb: p.op.as_str().into(),
        size: p.size,
        inline: p.inline,
        figure: if lat::one_way(p.op) { "one_way" } else { "round_trip" }.into(),
        iterations: fig.len() as u64,
        latency: Stats::of(&fig).ok_or_else(empty)?,
        post: post_stats,
        completion_wait: Stats::of(&wait).ok_or_else(empty)?,
        block_medians_ns: blocks.medians,
        block_p99_ns: blocks.p99s,
        histogram: h.encode(),
        post_histogram: hp.encode(),
        post_below_overhead: post_stats.p50 <= cal.overhead_ns(),
        completion: None,
    })
}

/// One side's block on a connected end (the other side runs in another process): the client's
/// samples, or `None` for the server.
pub fn lat_side(
    end: &mut crate::backend::setup::AnyEnd,
    client: bool,
    p: &LatParams,
    iters: u64,
    warmup: u64,
    st: &mut PingState,
    intr: &AtomicBool,
) -> Result<Option<LatSamples>, ScenarioError> {
    use crate::backend::setup::AnyEnd;
    let flags = lat::Flags {
        failed: AtomicBool::new(false),
        interrupt: intr,
    };
    let total = warmup + iters;
    let (first, prime) = st.take(total);
    // client and server processes on different CPUs (on one machine they would share CPU 0)
    if client {
        lat::pin(0);
    } else {
        lat::pin_from_end(0);
    }
    macro_rules! side {
        ($b:expr) => {
            if client {
                lat::client_loop($b, p, first, total, warmup, prime, &flags).map(Some)
            } else {
                lat::server_loop($b, p, first, total, prime, &flags).map(|()| None)
            }
        };
    }
    match end {
        AnyEnd::Verbs(b) => side!(&mut **b),
        AnyEnd::Model(b) => side!(&mut **b),
        AnyEnd::Mlx5(b) => side!(&mut **b),
    }
}

/// [`PingState::prime`] on an end of any backend.
pub fn lat_prime(
    end: &mut crate::backend::setup::AnyEnd,
    op: OpKind,
    st: &mut PingState,
) -> Result<(), crate::backend::BackendError> {
    use crate::backend::setup::AnyEnd;
    match end {
        AnyEnd::Verbs(b) => st.prime(&mut **b, op),
        AnyEnd::Model(b) => st.prime(&mut **b, op),
        AnyEnd::Mlx5(b) => st.prime(&mut **b, op),
    }
}

/// How long a run lasts.
#[derive(Debug, Clone, Copy)]
pub enum Length {
    /// This many measured iterations per backend, in this many blocks.
    Iterations {
        /// Iterations per backend.
        iters: u64,
        /// Blocks they are split into.
        blocks: u64,
    },
    /// Blocks of this many iterations until the time has passed.
    Duration {
        /// How long.
        time: std::time::Duration,
        /// Iterations per block.
        block: u64,
    },
}

/// Runs `p` on every pair, `blocks` interleaved blocks each (warm-up before the first block),
/// and summarises.
pub fn run_interleaved(
    pairs: &mut [LatPair],
    p: &LatParams,
    blocks: u64,
    cal: &Calibration,
    intr: &AtomicBool,
) -> Result<Vec<LatResult>, ScenarioError> {
    run_blocks(
        pairs,
        p,
        Length::Iterations { iters: p.iters, blocks },
        cal,
        intr,
        &mut |_, _, _, _| {},
    )
}

/// Called after each block: the pair's label (the backend, `-e` for events), the block's
/// figures (ns), its start and end (seconds).
pub type OnBlock<'a> = dyn FnMut(&str, &[f64], f64, f64) + 'a;

/// As [`run_interleaved`], for a number of iterations or a duration, calling `on_block` with
/// each block's backend, figures (ns) and start and end (seconds since the run began).
pub fn run_blocks(
    pairs: &mut [LatPair],
    p: &LatParams,
    len: Length,
    cal: &Calibration,
    intr: &AtomicBool,
    on_block: &mut OnBlock<'_>,
) -> Result<Vec<LatResult>, ScenarioError> {
    let mut all: Vec<(LatSamples, Blocks)> = pairs
        .iter()
        .map(|_| (LatSamples::default(), Blocks::default()))
        .collect();
    // every sample is kept: the room for them is taken now, not found missing at the end
    if let Length::Iterations { iters, .. } = len {
        for (s, _) in &mut all {
            let n = iters as usize;
            s.rtt
                .try_reserve_exact(n)
                .and_then(|()| s.post.try_reserve_exact(n))
                .and_then(|()| s.wait.try_reserve_exact(n))
                .map_err(|e| {
                    ScenarioError::Invalid(format!("-n {iters}: no memory for the samples ({e}): lower -n"))
                })?;
        }
    }
    let t_run = crate::clock::start();
    let started = std::time::Instant::now();
    let mut b = 0u64;
    let n = pairs.len();
    loop {
        let iters = match len {
            Length::Iterations { iters, blocks } => {
                let blocks = blocks.clamp(1, iters.max(1));
                if b >= blocks {
                    break;
                }
                iters / blocks + u64::from(b < iters % blocks)
            }
            Length::Duration { time, block } => {
                if b > 0 && started.elapsed() >= time {
                    break;
                }
                block.max(1)
            }
        };
        let warmup = if b == 0 { p.warmup } else { 0 };
        // the backends' order rotates from block to block, so none always runs first (after a
        // pause) or always after the same other backend
        for j in 0..n {
            let i = (j + b as usize) % n;
            let lp = &mut pairs[i];
            let t0 = crate::clock::start();
            let s = lp.pair.run(p, iters, warmup, &mut lp.state, intr)?;
            let t1 = crate::clock::stop();
            let v = figures_ns(p, &s.rtt, cal);
            on_block(
                &lp.label(),
                &v,
                cal.to_ns(t0 - t_run) / 1e9,
                cal.to_ns(t1 - t_run) / 1e9,
            );
            all[i].1.add(v);
            all[i].0.rtt.extend(s.rtt);
            all[i].0.post.extend(s.post);
            all[i].0.wait.extend(s.wait);
        }
        b += 1;
    }
    let mut out = Vec::new();
    for (lp, (s, blocks)) in pairs.iter().zip(all) {
        let mut r = finish(lp.kind, p, &s, blocks, cal)?;
        if lp.events {
            r.completion = Some("events".into());
        }
        out.push(r);
    }
    Ok(out)
}

/// One backend's bandwidth result for one operation and size.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct BwResult {
    /// `bw`.
    pub scenario: String,
    /// Backend name.
    pub backend: String,
    /// Operation as the command line names it.
    pub op: String,
    /// The verb.
    pub verb: String,
    /// Message size.
    #[serde(rename = "size_bytes")]
    pub size: u32,
    /// Threads.
    pub threads: usize,
    /// QPs per thread.
    pub qps_per_thread: usize,
    /// Outstanding operations per QP.
    pub tx_depth: u32,
    /// Operations per doorbell.
    pub postlist: u32,
    /// A completion every this many operations.
    pub cq_mod: u32,
    /// Both directions.
    pub bidirectional: bool,
    /// Inline payloads.
    pub inline: bool,
    /// Messages per QP and direction in the reported run.
    pub iters: u64,
    /// The shortest run reported, ms: a shorter first run only sized the reported one (0: none).
    pub min_duration_ms: f64,
    /// The figures.
    pub summary: crate::scenario::bw::BwSummary,
    /// `events`: the ends waited for completion events when nothing moved (`-e`); absent:
    /// polling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion: Option<String>,
}

fn build<B>(
    threads: usize,
    qps: usize,
    mut mk: impl FnMut() -> Result<(B, B), SetupError>,
) -> Result<Vec<Vec<(B, B)>>, SetupError> {
    (0..threads).map(|_| (0..qps).map(|_| mk()).collect()).collect()
}

/// The most messages per QP a run is sized up to.
pub const MAX_BW_ITERS: u64 = 1_000_000_000;

/// How many times a bandwidth run too short for its minimum is run again, at most.
pub const BW_RESIZES: u32 = 6;

/// The messages per QP of the next run when a run of `iters` took `took` seconds, shorter than
/// `min` (a fifth over the minimum; a short first run is slower per message, so a few rounds may
/// be needed); `None` when it was long enough (or cannot grow).
pub fn bw_resized(iters: u64, took: f64, min: f64) -> Option<u64> {
    if min <= 0.0 || took >= min || iters >= MAX_BW_ITERS {
        return None;
    }
    let scale = (min * 1.2 / took.max(1e-9)).clamp(1.2, 1e6);
    Some(((iters as f64 * scale).ceil() as u64).min(MAX_BW_ITERS))
}

/// Builds `threads` x `qps` pairs of `kind` on `dev` and runs the bandwidth scenario; an
/// in-process run shorter than `p.min_duration` is run again with more messages.
#[allow(clippy::too_many_arguments)]
pub fn run_bw(
    dev: &Dev,
    kind: BackendKind,
    p: &crate::scenario::bw::BwParams,
    threads: usize,
    qps: usize,
    buf_len: usize,
    mode: DbMode,
    cal: &Calibration,
    intr: &AtomicBool,
) -> Result<BwResult, RunError> {
    run_bw_with(dev, (kind, false), p, (threads, qps), buf_len, mode, cal, intr)
}

/// As [`run_bw`]; with `events` (the verbs and wr backends, `-e`) the ends wait for completion
/// events when a turn moves nothing, and the result says so (`completion`).
#[allow(clippy::too_many_arguments)]
pub fn run_bw_with(
    dev: &Dev,
    (kind, events): (BackendKind, bool),
    p: &crate::scenario::bw::BwParams,
    (threads, qps): (usize, usize),
    buf_len: usize,
    mode: DbMode,
    cal: &Calibration,
    intr: &AtomicBool,
) -> Result<BwResult, RunError> {
    use crate::scenario::bw;
    if events && kind == BackendKind::Direct {
        return Err(setup::no_events_on_direct().into());
    }
    dev.supports(kind).map_err(SetupError::from)?;
    let once = |p: &bw::BwParams| -> Result<Vec<bw::ThreadResult>, RunError> {
        // fresh pairs for every run: a run leaves receives posted on its pairs
        let grid = bw::Grid::new(cal.to_ticks(p.window.as_nanos() as f64));
        Ok(match (dev, kind) {
            (Dev::Model(m), BackendKind::Direct) => {
                let mut t = build(threads, qps, || {
                    setup::model_pair_with(m, p.op, buf_len, mode, m.opts.transport)
                })?;
                bw::run(&mut t, p, &grid, intr)?
            }
            (_, BackendKind::Direct) => {
                let mut t = build(threads, qps, || setup::mlx5_pair(dev, p.op, buf_len, mode))?;
                bw::run(&mut t, p, &grid, intr)?
            }
            _ => {
                let mut t = build(threads, qps, || {
                    setup::verbs_pair_with(dev, kind, p.op, buf_len, events)
                })?;
                bw::run(&mut t, p, &grid, intr)?
            }
        })
    };
    let mut p = *p;
    let mut rs = once(&p)?;
    let min = p.min_duration.as_secs_f64();
    // too short to mean anything: the run sizes the next one (a fifth over the minimum; a
    // short first run is slower per message, so a few rounds may be needed)
    for _ in 0..BW_RESIZES {
        let took = bw::summarize(&rs, p.size, p.cq_mod, cal.hz).seconds;
        let Some(n) = bw_resized(p.iters, took, min) else {
            break;
        };
        p.iters = n;
        rs = once(&p)?;
    }
    Ok(BwResult {
        scenario: "bw".into(),
        backend: kind.as_str().into(),
        op: p.op.cli_name().into(),
        verb: p.op.as_str().into(),
        size: p.size,
        threads,
        qps_per_thread: qps,
        tx_depth: p.tx_depth,
        postlist: p.postlist,
        cq_mod: p.cq_mod,
        bidirectional: p.bidirectional,
        inline: p.inline,
        iters: p.iters,
        min_duration_ms: min * 1e3,
        summary: bw::summarize(&rs, p.size, p.cq_mod, cal.hz),
        completion: events.then(|| "events".into()),
    })
}

/// A run that failed while setting up or while measuring.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Device, QP or memory set-up.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The measurement.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
}

/// The post cost of one configuration: blocks of post calls timed as a whole.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PostCostResult {
    /// `post_cost`.
    pub scenario: String,
    /// Backend name.
    pub backend: String,
    /// Doorbell mode (direct only).
    pub db_mode: Option<String>,
    /// Operation (`write`, `send`, `read`).
    pub op: String,
    /// The verb (the same names here).
    pub verb: String,
    /// Message size.
    #[serde(rename = "size_bytes")]
    pub size: u32,
    /// WQEs per call.
    pub postlist: u32,
    /// Inline payload.
    pub inline: bool,
    /// A completion every this many WQEs (and on each block's last call).
    pub cq_mod: u32,
    /// Post calls in each timed block.
    pub calls_per_block: u32,
    /// WQEs in each timed block.
    pub wqes_per_block: u32,
    /// Per WQE, ns: statistics over the blocks (each block's time, less the timer's cost, over
    /// its WQEs).
    pub per_wqe_ns: Stats,
    /// Per WQE, median, in TSC ticks (the counter's unit, not core cycles).
    pub per_wqe_ticks_p50: f64,
    /// Per post call, ns: statistics over the blocks (block time over its calls).
    pub call_ns: Stats,
    /// Each block's per-WQE figure, ns, in the order measured (`compare`'s samples).
    pub block_per_wqe_ns: Vec<f64>,
    /// HdrHistogram of the per-call figure of each block, ns.
    #[serde(rename = "call_histogram_ns")]
    pub call_histogram: String,
    /// The counter's step, ns: one block is resolved to this, one WQE to this over the block's WQEs.
    pub tsc_step_ns: f64,
    /// The timer's own cost taken off every block, ns (the median empty timed region).
    pub timer_overhead_ns: f64,
    /// The median block, less the timer's own overhead, is within 4 steps of the counter: not a
    /// resolved measurement.
    pub below_overhead: bool,
}

/// Runs the post-cost scenario for one backend (and doorbell mode) on `dev`.
pub fn run_post_cost(
    dev: &Dev,
    kind: BackendKind,
    p: &crate::scenario::post_cost::PostCostParams,
    mode: DbMode,
    cal: &Calibration,
) -> Result<PostCostResult, RunError> {
    use crate::scenario::post_cost;
    let buf = (2 * (p.size as usize).max(64)).next_multiple_of(4096);
    let mut pair = AnyPair::new(dev, kind, p.op, buf, mode)?;
    // on the process's persistent worker for the first CPU, pinned, as every measurement runs
    let mut res = None;
    crate::workers::run(
        vec![crate::workers::Placed {
            cpu: crate::workers::cpu_from_start(0),
            job: Box::new(|| {
                res = Some(match &mut pair {
                    AnyPair::Verbs(b) => post_cost::run(&mut b.0, &mut b.1, p),
                    AnyPair::Model(b) => post_cost::run(&mut b.0, &mut b.1, p),
                    AnyPair::Mlx5(b) => post_cost::run(&mut b.0, &mut b.1, p),
                })
            }),
        }],
        p.stall,
    )
    .map_err(ScenarioError::from)?;
    let s = res.unwrap_or(Err(ScenarioError::PeerFailed {
        side: "post-cost thread",
    }))?;
    let over = cal.overhead.median_cycles;
    let block_ns: Vec<f64> = s
        .block_ticks
        .iter()
        .map(|&t| cal.to_ns(t.saturating_sub(over)))
        .collect();
    let per: Vec<f64> = block_ns.iter().map(|&v| v / f64::from(s.wqes_per_block)).collect();
    let call: Vec<f64> = block_ns.iter().map(|&v| v / f64::from(s.calls_per_block)).collect();
    let mut h = Hist::new();
    call.iter().for_each(|&v| h.record(v));
    let empty = || ScenarioError::Invalid("no samples".into());
    let per_stats = Stats::of(&per).ok_or_else(empty)?;
    let raw: Vec<f64> = s.block_ticks.iter().map(|&t| cal.to_ns(t)).collect();
    let raw_p50 = Stats::of(&raw).ok_or_else(empty)?.p50;
    Ok(PostCostResult {
        scenario: "post_cost".into(),
        backend: kind.as_str().into(),
        db_mode: (kind == BackendKind::Direct).then(|| mode.as_str().to_string()),
        op: p.op.cli_name().into(),
        verb: p.op.as_str().into(),
        size: p.size,
        postlist: p.postlist,
        inline: p.inline,
        cq_mod: p.cq_mod,
        calls_per_block: s.calls_per_block,
        wqes_per_block: s.wqes_per_block,
        per_wqe_ticks_p50: per_stats.p50 * cal.hz / 1e9,
        per_wqe_ns: per_stats,
        call_ns: Stats::of(&call).ok_or_else(empty)?,
        block_per_wqe_ns: per,
        call_histogram: h.encode(),
        tsc_step_ns: cal.to_ns(tsc_step()),
        timer_overhead_ns: cal.overhead_ns(),
        // the block less the timer within a few of the counter's steps: not resolved
        below_overhead: raw_p50 - cal.overhead_ns() < 4.0 * cal.to_ns(tsc_step()),
    })
}

/// The TSC's step in ticks, measured once per process.
pub fn tsc_step() -> u64 {
    static STEP: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *STEP.get_or_init(crate::clock::tsc_step_ticks)
}

/// One side of a bandwidth run between two processes: each thread (pinned: a client's from the
/// first CPU up, a server's from the last down) drives its ends in the side's role; all ends of
/// one backend.
pub fn bw_side(
    threads: &mut [Vec<crate::backend::setup::AnyEnd>],
    p: &crate::scenario::bw::BwParams,
    client: bool,
    cal: &Calibration,
    intr: &AtomicBool,
) -> Result<Vec<crate::scenario::bw::ThreadResult>, ScenarioError> {
    use crate::backend::setup::AnyEnd;
    use crate::scenario::bw;
    bw::check(p)?;
    let grid = bw::Grid::new(cal.to_ticks(p.window.as_nanos() as f64));
    let grid = &grid;
    // perftest's peak is defined for one stream of posts and completions
    let trace_peak = client && threads.len() == 1 && threads[0].len() == 1 && !p.bidirectional && !p.no_peak;
    let (rc, rs) = bw::roles(p);
    let role = if client { rc } else { rs };
    let mut out: Vec<Option<Result<bw::ThreadResult, ScenarioError>>> = threads.iter().map(|_| None).collect();
    let jobs = threads
        .iter_mut()
        .zip(out.iter_mut())
        .enumerate()
        .map(|(i, (ends, slot))| crate::workers::Placed {
            cpu: if client {
                crate::workers::cpu_from_start(i)
            } else {
                crate::workers::cpu_from_end(i)
            },
            job: Box::new(move || {
                macro_rules! go {
                    ($v:ident) => {{
                        let e: Result<Vec<_>, _> = ends
                            .iter_mut()
                            .map(|x| match x {
                                AnyEnd::$v(b) => Ok((&mut **b, role)),
                                _ => Err(ScenarioError::Invalid(
                                    "ends of one thread differ in backend".into(),
                                )),
                            })
                            .collect();
                        e.and_then(|mut e| bw::drive_ends(&mut e, p, grid, trace_peak, intr))
                    }};
                }
                *slot = Some(match ends.first() {
                    Some(AnyEnd::Verbs(_)) => go!(Verbs),
                    Some(AnyEnd::Model(_)) => go!(Model),
                    Some(AnyEnd::Mlx5(_)) => go!(Mlx5),
                    None => Ok(bw::ThreadResult::default()),
                });
            }),
        })
        .collect();
    crate::workers::run(jobs, p.stall)?;
    out.into_iter()
        .map(|r| r.unwrap_or(Err(ScenarioError::PeerFailed { side: "bw thread" })))
        .collect()
}
