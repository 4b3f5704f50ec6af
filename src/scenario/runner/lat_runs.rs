//! Latency runs: each backend's pair with the state its ping-pongs carry, the backends
//! interleaved in blocks (their order rotated from block to block), for a number of iterations
//! or a duration, and each backend's samples turned into its result; one side of a client/server
//! run.

use super::AnyPair;
use crate::backend::setup::{self, Dev, SetupError};
use crate::backend::{BackendKind, OpKind};
use crate::clock::Calibration;
use crate::report::{Hist, Stats};
use crate::scenario::lat::{self, LatParams, LatSamples, PingState};
use crate::scenario::ScenarioError;
use crate::verbs::nic_clock::NicClockMap;
use std::sync::atomic::AtomicBool;

pub use super::nic_anatomy::{nic_anatomy, nic_anatomy_net, responder_ticks, MapSummary, NicAnatomy, RunMap};

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
    /// The client thread's CPU time over its blocks, percent of their length (100: on a CPU
    /// throughout, as a polling thread; less: descheduled, or blocked for events); perftest's
    /// --cpu_util. Absent in files written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_pct: Option<f64>,
    /// `events`: the ends waited for completion events (`-e`: `ibv_req_notify_cq`,
    /// `ibv_get_cq_event`) instead of polling; absent: polling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion: Option<String>,
    /// perftest's figures of the same run, as `ib_*_lat` computes them: from each post to the
    /// next (the loop's whole turn, its bookkeeping after the response included), halved where
    /// the figure is one-way; absent in files written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub perftest_ns: Option<PerftestLat>,
    /// `--anatomy`: each round trip split at the server's turnaround; absent without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anatomy: Option<Anatomy>,
}

/// `--anatomy`: the round trip of every sample split at the server's turnaround (t1 the
/// client's post, t2 the server seeing the request, t3 its reply's post returned, t4 the
/// client seeing the reply: turnaround t3 - t2, the rest (t4 - t1) - (t3 - t2)), each end on
/// its own calibrated TSC. Round trips, never halved.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Anatomy {
    /// t4 - t1 of each sample, ns.
    pub round_trip_ns: Stats,
    /// t3 - t2: the server's software between the request and its reply (its reaping of send
    /// completions and the reply's post call included), ns.
    pub turnaround_ns: Stats,
    /// The round trip less the turnaround, sample by sample: the client's post call, both
    /// messages through the NICs and the wire (on model0: the model executing them) and each
    /// end's polling until it saw its message, ns.
    pub rest_ns: Stats,
    /// Samples whose turnaround exceeded their round trip (impossible on one clock: the two
    /// ends' timestamps did not share one, two hosts or an emulated guest's CPUs); their rest
    /// is counted as 0.
    pub turnaround_over_round_trip: u64,
    /// One timestamp's cost (the calibration's measured overhead), ns. The server's stamps lie
    /// on each round trip of an `--anatomy` run: t2's between the request and the reply; t3's
    /// too on model0, which executes the reply in the server's thread after its post (measured
    /// there: 50-80 ns more a round trip than without `--anatomy`, docs/anatomy.md).
    pub stamp_overhead_ns: f64,
    /// The round trips split at the NICs' completion timestamps (both ends in one process on a
    /// device whose completions carry its clock); absent: see `nic_absent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic: Option<NicAnatomy>,
    /// Why there is no NIC split (no timestamps on the device, a WRITE ping-pong, the NIC
    /// clock's rate not the stated one ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic_absent: Option<String>,
}

impl Anatomy {
    /// From the round trips and the turnarounds paired with them (ticks of `cal`'s TSC);
    /// `Ok(None)` without turnarounds, an error when they do not pair.
    pub fn of(rtt: &[u64], turnaround: &[u64], cal: &Calibration) -> Result<Option<Self>, ScenarioError> {
        if turnaround.is_empty() {
            return Ok(None);
        }
        if turnaround.len() != rtt.len() {
            return Err(ScenarioError::Invalid(format!(
                "the server's turnarounds ({}) do not pair with the client's round trips ({})",
                turnaround.len(),
                rtt.len()
            )));
        }
        let ns = |v: &[u64]| -> Vec<f64> { v.iter().map(|&t| cal.to_ns(t)).collect() };
        let rest: Vec<u64> = rtt.iter().zip(turnaround).map(|(&r, &t)| r.saturating_sub(t)).collect();
        let over = rtt.iter().zip(turnaround).filter(|(r, t)| t > r).count() as u64;
        let stats = |v: &[u64]| Stats::of(&ns(v)).ok_or_else(|| ScenarioError::Invalid("no samples".into()));
        Ok(Some(Anatomy {
            round_trip_ns: stats(rtt)?,
            turnaround_ns: stats(turnaround)?,
            rest_ns: stats(&rest)?,
            turnaround_over_round_trip: over,
            stamp_overhead_ns: cal.overhead_ns(),
            nic: None,
            nic_absent: None,
        }))
    }
}

/// perftest's latency figures (`ib_*_lat`'s `t_typical` and `t_avg`) of a run, from the time
/// between consecutive posts within each block, halved for a one-way figure, ns.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PerftestLat {
    /// The median as perftest takes it (`get_median`): of the sorted samples without the two
    /// largest, the middle one, or the mean of the two middle ones when their count is even.
    pub typical: f64,
    /// The mean of the same samples (`t_avg`).
    pub avg: f64,
    /// Those samples: the periods (one fewer per block than the measured iterations) without
    /// perftest's two largest (`LAT_MEASURE_TAIL`).
    pub samples: u64,
}

/// The largest samples perftest leaves out of its latency figures (`LAT_MEASURE_TAIL`).
const PERFTEST_TAIL: usize = 2;

impl PerftestLat {
    /// From post-to-post periods (ticks), as perftest's `print_report_lat`: sorted, the two
    /// largest left out, its median rule and the mean, halved when `one_way`; `None` when no
    /// sample is left.
    pub fn of(period: &[u64], one_way: bool, cal: &Calibration) -> Option<Self> {
        let half = if one_way { 2.0 } else { 1.0 };
        let mut v = period.to_vec();
        v.sort_unstable();
        v.truncate(v.len().saturating_sub(PERFTEST_TAIL));
        let n = v.len();
        if n == 0 {
            return None;
        }
        // perftest's get_median(n): (n - 1) odd, i.e. n even, takes the two middle samples
        // in whole ticks, as perftest's cycles_t
        let median = if n % 2 == 0 {
            (v[n / 2] + v[n / 2 - 1]) / 2
        } else {
            v[n / 2]
        } as f64;
        let ns = |t: f64| cal.to_ns(1) * t / half;
        Some(PerftestLat {
            typical: ns(median),
            avg: ns(v.iter().map(|&t| t as f64).sum::<f64>() / n as f64),
            samples: n as u64,
        })
    }
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
        cpu_pct: (s.wall_ticks > 0).then(|| 100.0 * s.cpu_ns as f64 / cal.to_ns(s.wall_ticks)),
        completion: None,
        perftest_ns: PerftestLat::of(&s.period, lat::one_way(p.op), cal),
        anatomy: Anatomy::of(&s.rtt, &s.turnaround, cal)?,
    })
}

/// One side's block on a connected end (the other side runs in another process): the client's
/// samples, or the server's: its turnarounds alone (`--anatomy`; none without).
pub fn lat_side(
    end: &mut crate::backend::setup::AnyEnd,
    client: bool,
    p: &LatParams,
    iters: u64,
    warmup: u64,
    st: &mut PingState,
    intr: &AtomicBool,
) -> Result<LatSamples, ScenarioError> {
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
                lat::client_loop($b, p, first, total, warmup, prime, &flags)
            } else {
                let mut s = lat::server_loop($b, p, (first, total, prime), st.carried(), &flags)?;
                s.drop_server_warmup(warmup);
                Ok(s)
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
    let none = Err("no NIC clock was given to the run".to_string());
    run_blocks_nic(pairs, p, len, cal, intr, on_block, &none)
}

/// As [`run_blocks`], with the NIC clock of the pairs' device (or why there is none): with
/// `--anatomy` it is mapped to the TSC over the run (pairs before and after the blocks) and
/// the round trips are split at the NICs' completion timestamps too.
pub fn run_blocks_nic(
    pairs: &mut [LatPair],
    p: &LatParams,
    len: Length,
    cal: &Calibration,
    intr: &AtomicBool,
    on_block: &mut OnBlock<'_>,
    nic: &Result<setup::NicClock<'_>, String>,
) -> Result<Vec<LatResult>, ScenarioError> {
    let mut map = RunMap::start(p.anatomy && p.op.needs_recv(), nic);
    let mut all = sample_room(pairs.len(), len, p.anatomy)?;
    let t_run = crate::clock::start();
    let started = std::time::Instant::now();
    let mut b = 0u64;
    let n = pairs.len();
    while let Some(iters) = block_iters(len, b, started) {
        if b > 0 {
            map.between(nic);
        }
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
            keep(&mut all[i], s, v);
        }
        b += 1;
    }
    let map = map.finish(nic, cal);
    lat_results(pairs, all, p, cal, &map)
}

/// Each of `pairs` pairs' samples and blocks, none yet: with a number of iterations every
/// sample is kept, so the room for them is taken now, not found missing at the end (with
/// `anatomy` the server's turnarounds' and both ends' timestamps too).
pub fn sample_room(pairs: usize, len: Length, anatomy: bool) -> Result<Vec<(LatSamples, Blocks)>, ScenarioError> {
    let mut all: Vec<(LatSamples, Blocks)> = (0..pairs).map(|_| (LatSamples::default(), Blocks::default())).collect();
    if let Length::Iterations { iters, .. } = len {
        for (s, _) in &mut all {
            let n = iters as usize;
            s.rtt
                .try_reserve_exact(n)
                .and_then(|()| s.post.try_reserve_exact(n))
                .and_then(|()| s.wait.try_reserve_exact(n))
                .and_then(|()| s.period.try_reserve_exact(n))
                .and_then(|()| s.turnaround.try_reserve_exact(if anatomy { n } else { 0 }))
                .and_then(|()| s.posted.try_reserve_exact(if anatomy { n } else { 0 }))
                .and_then(|()| s.nic_reply.try_reserve_exact(if anatomy { n } else { 0 }))
                .and_then(|()| s.replied.try_reserve_exact(if anatomy { n } else { 0 }))
                .and_then(|()| s.nic_request.try_reserve_exact(if anatomy { n } else { 0 }))
                .map_err(|e| {
                    ScenarioError::Invalid(format!("-n {iters}: no memory for the samples ({e}): lower -n"))
                })?;
        }
    }
    Ok(all)
}

/// The iterations of block `b` (counted from 0) of a run of length `len` that started at
/// `started`; `None`: the run is over. The iterations are split as evenly as they go (the
/// first blocks take the remainder, one each); a timed run has at least one block.
fn block_iters(len: Length, b: u64, started: std::time::Instant) -> Option<u64> {
    match len {
        Length::Iterations { iters, blocks } => {
            let blocks = blocks.clamp(1, iters.max(1));
            (b < blocks).then(|| iters / blocks + u64::from(b < iters % blocks))
        }
        Length::Duration { time, block } => (b == 0 || started.elapsed() < time).then(|| block.max(1)),
    }
}

/// Adds a block's samples `s` (its figures `v`, ns) to a pair's.
fn keep((all, blocks): &mut (LatSamples, Blocks), s: LatSamples, v: Vec<f64>) {
    blocks.add(v);
    all.extend(s);
}

/// Each pair's result from its samples and blocks (`-e` pairs say they waited for events); with
/// `--anatomy` its NIC split on the NIC clock `map`, or why there is none.
fn lat_results(
    pairs: &[LatPair],
    all: Vec<(LatSamples, Blocks)>,
    p: &LatParams,
    cal: &Calibration,
    map: &Result<NicClockMap, String>,
) -> Result<Vec<LatResult>, ScenarioError> {
    let mut out = Vec::new();
    for (lp, (s, blocks)) in pairs.iter().zip(all) {
        let mut r = finish(lp.kind, p, &s, blocks, cal)?;
        if let Some(a) = r.anatomy.as_mut() {
            match nic_anatomy(p.op, &s, map, cal) {
                Ok(n) => a.nic = Some(n),
                Err(why) => a.nic_absent = Some(why),
            }
        }
        if lp.events {
            r.completion = Some("events".into());
        }
        out.push(r);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::PerftestLat;
    use crate::clock::Calibration;

    #[test]
    fn perftests_figures_are_the_median_and_mean_of_the_periods_halved_for_one_way() {
        // a tick is 1 ns
        let cal = Calibration::stated(1e9);
        // perftest drops the two largest, then its median: 5 left, the third (one-way: halved)
        let p = PerftestLat::of(&[700, 100, 500, 300, 9000, 200, 400], true, &cal).unwrap();
        assert_eq!((p.typical, p.avg, p.samples), (150.0, 150.0, 5));
        // 4 left: the mean of the two middle ones; a round trip is not halved
        let p = PerftestLat::of(&[400, 100, 8000, 300, 200, 9000], false, &cal).unwrap();
        assert_eq!((p.typical, p.avg, p.samples), (250.0, 250.0, 4));
        // skewed: the median is not the mean; an odd sum of the middle two is truncated
        let p = PerftestLat::of(&[100, 201, 300, 1000, 9000, 9000], false, &cal).unwrap();
        assert_eq!((p.typical, p.avg, p.samples), (250.0, 400.25, 4));
        // two samples or fewer leave none
        assert_eq!(PerftestLat::of(&[100, 200], true, &cal), None);
        assert_eq!(PerftestLat::of(&[], true, &cal), None);
    }
}
