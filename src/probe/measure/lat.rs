//! A latency measurement from plan to report: set-up, the peer, the sizes, the blocks.

use super::session;
use crate::backend::setup::NicClock;
use crate::backend::setup::{AnyEnd, Dev, HalfEnd, INLINE};
use crate::backend::{BackendKind, OpKind};
use crate::clock::Calibration;
use crate::mlx5::sq::DbMode;
use crate::model::{ExecMode, ModelConfig};
use crate::oob::{Hello, Rendezvous};
use crate::probe::check::{counters, diag};
use crate::probe::report::{Region, Report, Role, Runs};
use crate::probe::{LatPlan, Observer, PeerSpec, Plan, ProbeError, Scenario, Sizes, INTERRUPTED};
use crate::report::{Hist, Interval};
use crate::scenario::lat::{LatParams, LatSamples, PingState};
use crate::scenario::runner::{
    figures_ns, finish, lat_side, nic_anatomy_net, responder_ticks, run_blocks_nic, AnyPair, Blocks, LatPair,
    LatResult, Length, MapSummary, RunMap,
};
use crate::scenario::ScenarioError;
use serde_json::json;

pub(in crate::probe) mod perftest;
mod turnaround;

/// Each backend's end, connected to the peer's.
type Ends = Vec<(BackendKind, AnyEnd)>;

/// Fewer iterations per latency block than this get a warning.
pub const MIN_BLOCK: u64 = 100;
/// Fewer iterations per latency block than this: the blocks are lowered until each has this many.
pub const MIN_BLOCK_FLOOR: u64 = 10;

/// Runs a latency plan (see [`crate::probe::run`]).
pub(in crate::probe) fn run(
    plan: &Plan,
    l: &LatPlan,
    peer: Option<&mut (dyn Rendezvous + '_)>,
    obs: &mut dyn Observer,
) -> Result<Report, ProbeError> {
    let mut l = l.clone();
    let mut sizes = check(plan, &l, obs)?;
    let (dev, kinds) = open(plan, &l, &sizes, obs)?;
    let mode = session::direct_mode(plan.db_mode);
    let before = counters::sample(&dev);
    let (cal, env) = session::calibrate(&dev, true)?;
    let mut warnings = env.warnings();
    if let Some(n) = session::ud_checks(&dev, plan, &mut sizes, matches!(l.sizes, crate::probe::Sizes::All))? {
        warnings.push(n);
    }
    session::event_rows(&dev, &kinds, l.events, plan.peer != PeerSpec::Loopback)?;
    if l.events && dev.is_model() && !l.op.needs_recv() {
        warnings.push(format!(
            "-e on model0: the model executes the {} in the poster's thread right after the post, so its completion is \
             there before the wait and no event is waited for (on a NIC it is)",
            l.op.cli_name().to_uppercase()
        ));
    }
    settle(plan, &mut l, &mut warnings, obs)?;
    let mut tcp = None;
    let mut sides = Sides::make(plan, &l, &dev, &kinds, &sizes, mode, peer, &mut tcp, obs)?;
    let mut report = new_report(plan, &l, &dev, &kinds, mode, &sides, env, cal, warnings);
    obs.started(&report);
    let run = Run {
        plan,
        l: &l,
        dev: &dev,
        before: &before,
    };
    run.sizes(&sizes, &mut sides, &mut report, obs)?;
    run.diag(&sides, obs);
    report.counters = counters::CounterDelta::since(before.clone(), &dev);
    if let Some((rdv, _)) = sides.net {
        // the figures were measured: a peer that fails or vanishes at the end is recorded, and
        // the caller still gets them
        report.end_error = share_rows(&mut *rdv, &mut report, obs)
            .and_then(|_| session::end(rdv, plan, false))
            .err()
            .map(|e| e.to_string());
    }
    Ok(report)
}

/// Client and server: the client's rows (it times the round trips) sent to the server, which
/// prints them as its table, as perftest's server prints one; the client hears the server's
/// (empty) message. A failure leaves the ends out of step: the caller records it.
fn share_rows(rdv: &mut dyn Rendezvous, report: &mut Report, obs: &mut dyn Observer) -> Result<(), ProbeError> {
    let mine = match &report.runs {
        Runs::Lat(rs) if !matches!(report.role, Role::Server(_)) => rs.clone(),
        _ => Vec::new(),
    };
    let theirs: serde_json::Value = rdv.exchange(&json!({ "lat_rows": mine }))?;
    if !matches!(report.role, Role::Server(_)) {
        return Ok(());
    }
    let rows: Vec<LatResult> = serde_json::from_value(theirs["lat_rows"].clone())
        .map_err(|e| ProbeError::Invalid(format!("the client's rows cannot be read: {e}")))?;
    report.runs = Runs::Lat(rows);
    for i in 0..report.runs.len() {
        obs.finished(report, i);
    }
    Ok(())
}

/// What the plan asks that cannot work, refused before anything is opened; the sizes.
fn check(plan: &Plan, l: &LatPlan, obs: &mut dyn Observer) -> Result<Vec<u32>, ProbeError> {
    if plan.peer != PeerSpec::Loopback && (l.duration.is_some() || l.intervals) {
        return Err(ProbeError::Usage(
            "-D and --hdr are available with --loopback only in this version (both ends must run the same iterations)"
                .into(),
        ));
    }
    if l.events {
        if l.op == OpKind::Write {
            return Err(ProbeError::Usage(
                "-e/--events: a WRITE ping-pong watches memory, not the CQ (no completion to wait for); \
                 use --write-with-imm, or send"
                    .into(),
            ));
        }
        if plan.backends == crate::probe::Backends::Only(BackendKind::Direct) {
            return Err(ProbeError::Usage(
                "-e/--events: completion events are libibverbs' completion channel: --backend verbs, wr or all".into(),
            ));
        }
    }
    if l.anatomy && !l.op.carries_payload() {
        return Err(ProbeError::Usage(format!(
            "--anatomy splits a round trip at the server's turnaround: the responder of {} is the far NIC, \
             with no software turn to stamp (write and send have one); its client side is split without it: \
             the post call (the table's post p50) and the wait for the completion (the JSON's completion_wait_ns)",
            if l.op == OpKind::Read { "a READ" } else { "an atomic" }
        )));
    }
    if matches!(l.op, OpKind::FetchAdd | OpKind::CmpSwap) && !matches!(l.sizes, Sizes::One(2) | Sizes::One(8)) {
        obs.note("atomics move 8 bytes; -s/-a ignored");
    }
    Ok(l.sizes.list(l.op))
}

/// The device (model0 executing after the post call: the post column is the post alone) and
/// the backends that run on it, the sizes and the samples' memory checked against it.
fn open(
    plan: &Plan,
    l: &LatPlan,
    sizes: &[u32],
    obs: &mut dyn Observer,
) -> Result<(Dev, Vec<BackendKind>), ProbeError> {
    let model = ModelConfig {
        wire_delay_ns: l.model_delay_ns,
        exec: ExecMode::AfterPost,
        ..Default::default()
    };
    let mut dev = session::open_device(plan, model, obs)?;
    // --anatomy: the verbs and wr ends' receive completions carry the NIC clock where the
    // device has one (a WRITE ping-pong has none to carry it)
    dev.opts_mut().timestamps = l.anatomy && l.op.needs_recv() && dev.nic_clock().is_ok();
    if l.model_delay_ns.is_some() && !dev.is_model() {
        return Err(ProbeError::Usage(format!(
            "--model-delay-ns applies to model0 only (device is {})",
            dev.name()
        )));
    }
    let kinds = session::backends(&dev, plan.backends)?;
    if kinds.is_empty() {
        return Err(ProbeError::Invalid(format!("no backend can run on {}", dev.name())));
    }
    for s in sizes {
        dev.check_size(*s)?;
    }
    check_memory(l, kinds.len() as u64)?;
    Ok((dev, kinds))
}

/// Every sample is kept: the memory they take is checked before the run, not met after it.
fn check_memory(l: &LatPlan, backends: u64) -> Result<(), ProbeError> {
    // --anatomy: the server's turnaround, 8 B an iteration (and the one received between
    // processes, 8 more); both ends' timestamps (the client's doorbell and reply completion,
    // the server's reply and request completion), 32 B; the server's responders, 8 B; the NIC
    // split's six components while they are summarised, 48 B
    let b = session::LAT_SAMPLE_BYTES + if l.anatomy { 8 + 8 + 32 + 8 + 48 } else { 0 };
    let need = (samples_bytes(l.iters, l.duration, backends) / session::LAT_SAMPLE_BYTES).saturating_mul(b);
    match l.duration {
        None => session::check_memory(need, || {
            format!("-n {} ({backends} backend(s), {b} B per iteration)", l.iters)
        }),
        Some(d) => session::check_memory(need, || {
            format!(
                "-D {} (up to one iteration per {} ns, {b} B each)",
                d.as_secs(),
                session::FASTEST_ITERATION_NS
            )
        }),
    }
}

/// The bytes a latency run's samples take: `iters` iterations of each of `backends`, or with a
/// `duration` as many iterations as it holds at the fastest (the backends share the time).
pub(in crate::probe) fn samples_bytes(iters: u64, duration: Option<std::time::Duration>, backends: u64) -> u64 {
    let b = session::LAT_SAMPLE_BYTES;
    match duration {
        None => iters.saturating_mul(backends).saturating_mul(b),
        Some(d) => {
            let n = d.as_nanos() / u128::from(session::FASTEST_ITERATION_NS);
            u64::try_from(n).unwrap_or(u64::MAX).saturating_mul(b)
        }
    }
}

/// The two sides of the measurement: both in this process (a pair per backend), or this side's
/// ends connected to the peer's; with the inline limits they were made with.
struct Sides<'a> {
    pairs: Vec<LatPair>,
    net: Option<(&'a mut dyn Rendezvous, Ends)>,
    /// The network ends' ping-pong states, their receives posted before the barrier.
    net_states: Vec<PingState>,
    /// -e: which network ends wait for completion events (after the polling ones).
    net_events: Vec<bool>,
    /// -R: the connections through the CM (kept as long as the ends).
    cm: Option<super::cm::CmLink>,
    max_inline: u32,
    inline_limit: u32,
    /// Every QP's numbers (and client/server the addresses exchanged), the JSON's `qps`.
    qps: Vec<serde_json::Value>,
}

impl<'a> Sides<'a> {
    #[allow(clippy::too_many_arguments)]
    fn make(
        plan: &Plan,
        l: &LatPlan,
        dev: &Dev,
        kinds: &[BackendKind],
        sizes: &[u32],
        mode: DbMode,
        peer: Option<&'a mut (dyn Rendezvous + '_)>,
        tcp: &'a mut Option<crate::oob::Peer>,
        obs: &mut dyn Observer,
    ) -> Result<Self, ProbeError> {
        let network = plan.peer != PeerSpec::Loopback;
        let buf_len = session::buffer_len(sizes);
        let (pairs, max_inline) = match network {
            true => (Vec::new(), INLINE),
            false => in_process_pairs(l, dev, kinds, buf_len, mode)?,
        };
        let inline_limit = match l.inline_size {
            Some(i) if i > max_inline && l.op.carries_payload() => {
                return Err(ProbeError::Usage(format!(
                    "-I {i} exceeds the QPs' max_inline_data {max_inline}"
                )))
            }
            Some(i) => i,
            None => max_inline,
        };
        let mut sides = Sides {
            pairs,
            net: None,
            net_states: Vec::new(),
            net_events: Vec::new(),
            cm: None,
            max_inline,
            inline_limit,
            qps: Vec::new(),
        };
        for p in &sides.pairs {
            sides.qps.push(session::qp_pair_json(&p.label(), p.pair.qpns()));
        }
        if network {
            let rdv: &'a mut dyn Rendezvous = match peer {
                Some(p) => p,
                None => tcp.insert(session::tcp_peer(plan, obs)?.ok_or_else(|| ProbeError::Invalid("no peer".into()))?),
            };
            let mut hello = hello(l, sizes, kinds, mode, inline_limit, buf_len);
            session::connection_params(&mut hello, plan);
            let mut phase = session::Phase::new(rdv, plan.oob_timeout);
            let (ends, states, cm, qps) =
                connect(&mut phase, &hello, (plan, dev), kinds, (l.op, l.events), buf_len, mode)?;
            sides.qps = qps;
            sides.net_events = (0..ends.len()).map(|i| i >= kinds.len()).collect();
            sides.net = Some((rdv, ends));
            sides.net_states = states;
            sides.cm = cm;
        }
        Ok(sides)
    }

    /// This side's buffers: both ends of each pair in this process (`direct.A`, `direct.B`), or
    /// each backend's end connected to the peer (`direct`).
    fn regions(&self) -> Vec<Region> {
        let pairs = self.pairs.iter().flat_map(|p| {
            let [a, b] = p.pair.placements();
            let l = p.label();
            [(format!("{l}.A"), a), (format!("{l}.B"), b)]
        });
        let net = self.net.iter().flat_map(|(_, ends)| {
            ends.iter()
                .zip(&self.net_events)
                .map(|((k, e), ev)| (format!("{}{}", k.as_str(), if *ev { "-e" } else { "" }), e.placement()))
        });
        pairs
            .chain(net)
            .map(|(name, placement)| Region { name, placement })
            .collect()
    }

    /// The QPs' states as the device reads them back.
    fn describe(&self) -> Vec<String> {
        self.pairs
            .iter()
            .flat_map(|p| p.pair.describe())
            .chain(
                self.net
                    .iter()
                    .flat_map(|(_, ends)| ends.iter().map(|(_, e)| e.describe())),
            )
            .collect()
    }
}

/// Both ends in this process: a pair per backend, and with -e beside each verbs backend polling
/// the same waiting for completion events; the least max_inline_data their QPs were granted.
fn in_process_pairs(
    l: &LatPlan,
    dev: &Dev,
    kinds: &[BackendKind],
    buf_len: usize,
    mode: DbMode,
) -> Result<(Vec<LatPair>, u32), ProbeError> {
    let mut pairs = Vec::new();
    for k in kinds {
        pairs.push(LatPair::new(*k, AnyPair::new(dev, *k, l.op, buf_len, mode)?));
    }
    for (k, _) in session::event_rows(dev, kinds, l.events, false)?.iter().filter(|r| r.1) {
        pairs.push(LatPair::with_events(dev, *k, l.op, buf_len)?);
    }
    let max_inline = pairs.iter().map(|p| p.pair.max_inline()).min().unwrap_or(0);
    Ok((pairs, max_inline))
}

/// The report before the runs: what runs, on what, against whom.
#[allow(clippy::too_many_arguments)]
fn new_report(
    plan: &Plan,
    l: &LatPlan,
    dev: &Dev,
    kinds: &[BackendKind],
    mode: DbMode,
    sides: &Sides<'_>,
    env: crate::report::env::Fingerprint,
    cal: crate::clock::Calibration,
    warnings: Vec<String>,
) -> Report {
    let network = sides.net.is_some();
    let role = match (&sides.net, &plan.peer) {
        (None, _) => Role::Loopback,
        (Some((p, _)), PeerSpec::Listen { .. }) => Role::Server(p.peer_name()),
        (Some((p, _)), _) => Role::Client(p.peer_name()),
    };
    let params = json!({
        "scenario": "lat", "op": l.op.as_str(), "iters": l.iters, "warmup": l.warmup, "blocks": l.blocks, "events": l.events, "anatomy": l.anatomy,
        "backends": kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>(), "db_mode": mode.as_str(),
        "inline_limit": sides.inline_limit, "port_active_mtu_bytes": session::active_mtu(dev), "loopback": !network, "model_delay_ns": l.model_delay_ns,
        // what the QPs were granted (in process: read from them; client/server: asked for)
        "qp_max_inline_data": sides.max_inline, "qp_max_inline_data_source": if network { "requested" } else { "granted" },
        "model_exec": dev.is_model().then_some("after_post"),
        "duration_s": l.duration.map(|d| d.as_secs_f64()),
        "path": crate::probe::report::path_json(&plan.path), "huge_pages": plan.huge_pages, "mr_per_qp": true,
        "transport": plan.transport.as_str(),
        "rdma_cm": sides.cm.as_ref().map(|c| c.json()),
        "qps": sides.qps,
        "role": role.as_str(),
        // a server's rows are the client's, sent over at the end (see `share_rows`)
        "rows_from": matches!(role, Role::Server(_)).then_some("client"),
        "peer": match &role { Role::Loopback => None, Role::Client(p) | Role::Server(p) => Some(p.clone()) },
    });
    Report {
        plan: Plan {
            scenario: Scenario::Lat(l.clone()),
            ..plan.clone()
        },
        role,
        device: dev.name(),
        provider: dev.provider(),
        is_model: dev.is_model(),
        backends: kinds.to_vec(),
        env,
        clock: cal,
        warnings,
        params,
        runs: Runs::Lat(Vec::new()),
        intervals: Vec::new(),
        short_runs: Vec::new(),
        end_error: None,
        counters: None,
        regions: sides.regions(),
    }
}

/// One latency measurement under way.
struct Run<'r> {
    plan: &'r Plan,
    l: &'r LatPlan,
    dev: &'r Dev,
    before: &'r Option<(&'static str, crate::model::Counters)>,
}

impl Run<'_> {
    /// Every size, in interleaved blocks; each result into the report as it comes. A failure
    /// writes the diagnostics bundle while the QPs still exist.
    fn sizes(
        &self,
        sizes: &[u32],
        sides: &mut Sides<'_>,
        report: &mut Report,
        obs: &mut dyn Observer,
    ) -> Result<(), ProbeError> {
        let client = !matches!(report.role, Role::Server(_));
        let run_start = std::time::Instant::now();
        // ping-pong state per backend across sizes (marker numbering, receives posted once)
        let mut states = if sides.net.is_some() {
            // one per network end (with -e, the event-waiting ones too), receives primed
            std::mem::take(&mut sides.net_states)
        } else {
            vec![PingState::default(); report.backends.len()]
        };
        for &size in sizes {
            let p = self.params(size, sides.inline_limit);
            let rs = match sides.net.as_mut() {
                None => {
                    let t_base = run_start.elapsed().as_secs_f64();
                    match self.in_process(&mut sides.pairs, &p, t_base, report) {
                        Ok(rs) => rs,
                        Err(e) => return Err(self.failed(sides.describe(), e.into())),
                    }
                }
                Some((rdv, ends)) => {
                    let nic = self.dev.nic_clock();
                    let cal = &report.clock;
                    match run_network(&mut **rdv, ends, &mut states, &p, self.l.blocks, client, cal, &nic) {
                        Ok(mut rs) => {
                            // -e: the ends after the polling ones wait for completion events
                            for (r, ev) in rs.iter_mut().zip(&sides.net_events) {
                                if *ev {
                                    r.completion = Some("events".into());
                                }
                            }
                            rs
                        }
                        Err(e) => {
                            let e = session::fail(&mut **rdv, e);
                            return Err(self.failed(ends.iter().map(|(_, e)| e.describe()).collect(), e));
                        }
                    }
                }
            };
            for r in rs {
                if let Runs::Lat(v) = &mut report.runs {
                    v.push(r);
                }
                obs.finished(report, report.runs.len() - 1);
            }
        }
        Ok(())
    }

    /// The scenario's parameters at `size` (inline up to `inline_limit`).
    fn params(&self, size: u32, inline_limit: u32) -> LatParams {
        LatParams {
            op: self.l.op,
            size,
            iters: self.l.iters,
            warmup: self.l.warmup,
            inline: self.l.op.carries_payload() && size <= inline_limit,
            stall: self.plan.stall,
            anatomy: self.l.anatomy,
        }
    }

    /// One size with both ends in this process: interleaved blocks, an interval per block and
    /// backend when asked (their times from the start of the whole run).
    fn in_process(
        &self,
        pairs: &mut [LatPair],
        p: &LatParams,
        t_base: f64,
        report: &mut Report,
    ) -> Result<Vec<LatResult>, ScenarioError> {
        let len = match self.l.duration {
            Some(time) => Length::Duration { time, block: 1000 },
            None => Length::Iterations {
                iters: self.l.iters,
                blocks: self.l.blocks,
            },
        };
        let (keep, op, size) = (self.l.intervals, p.op, p.size);
        let intervals = &mut report.intervals;
        let mut on_block = |k: &str, v: &[f64], t0: f64, t1: f64| {
            if keep {
                let mut h = Hist::new();
                v.iter().for_each(|&x| h.record(x));
                intervals.push(Interval {
                    tag: format!("{k}-{}-{}", op.as_str(), size),
                    start_s: t_base + t0,
                    duration_s: t1 - t0,
                    hist: h,
                });
            }
        };
        let nic = self.dev.nic_clock();
        run_blocks_nic(pairs, p, len, &report.clock, &INTERRUPTED, &mut on_block, &nic)
    }

    /// The diagnostics bundle of a failure, written; the error that names it.
    fn failed(&self, qp_states: Vec<String>, e: ProbeError) -> ProbeError {
        diag::failed(diag::Bundle::of(self.plan, self.dev, self.before, qp_states), e)
    }

    /// The bundle of a good run, when asked for.
    fn diag(&self, sides: &Sides<'_>, obs: &mut dyn Observer) {
        if let Some(dir) = &self.plan.diag {
            diag::write_noted(
                dir,
                &diag::Bundle::of(self.plan, self.dev, self.before, sides.describe()),
                obs,
            );
        }
    }
}

/// Blocks too short to measure are lowered (said to the observer and in the warnings); blocks
/// below [`MIN_BLOCK`] iterations are warned about; a model0 wire delay is bounded by the stall
/// deadline and recorded.
fn settle(plan: &Plan, l: &mut LatPlan, warnings: &mut Vec<String>, obs: &mut dyn Observer) -> Result<(), ProbeError> {
    if let Some(d) = l.model_delay_ns {
        if d.saturating_mul(2) >= plan.stall.as_nanos().min(u64::MAX as u128) as u64 {
            return Err(ProbeError::Usage(format!(
                "--model-delay-ns {d} must stay below half the stall deadline (--stall-secs {})",
                plan.stall.as_secs()
            )));
        }
        warnings.push(format!(
            "model0 adds a wire delay of {d} ns to every message in each direction (one-way figures +{d} ns, round trips +{} ns)",
            2 * d
        ));
    }
    let per_block = l.iters / l.blocks.max(1);
    let blocks = (l.iters / MIN_BLOCK_FLOOR).max(1);
    if l.duration.is_none() && per_block < MIN_BLOCK_FLOOR && blocks < l.blocks {
        // a block's first iterations follow the hand-over to the measuring threads: blocks of a
        // few iterations would weigh them in the figures; fewer blocks, said so (one block is
        // as few as there are)
        let msg = format!(
            "--blocks {} lowered to {blocks}: -n {} allows at least {MIN_BLOCK_FLOOR} iterations per block",
            l.blocks, l.iters
        );
        obs.note(&msg);
        warnings.push(msg);
        l.blocks = blocks;
    }
    let per_block = l.iters / l.blocks.max(1);
    if l.duration.is_none() && per_block < MIN_BLOCK {
        warnings.push(format!(
            "{per_block} iterations per block (-n {} / --blocks {}): a block's first iterations follow the hand-over \
             to the measuring threads, and per-block statistics (compare's intervals) rest on few samples; \
             use at least {MIN_BLOCK} per block",
            l.iters, l.blocks
        ));
    }
    Ok(())
}

/// The parameters both ends of a latency run must share.
fn hello(l: &LatPlan, sizes: &[u32], kinds: &[BackendKind], mode: DbMode, inline_limit: u32, buf_len: usize) -> Hello {
    let own = [
        ("iters", l.iters.to_string()),
        ("warmup", l.warmup.to_string()),
        ("blocks", l.blocks.to_string()),
        ("events", l.events.to_string()),
        ("anatomy", l.anatomy.to_string()),
    ];
    session::hello("lat", l.op, sizes, own, kinds, mode, inline_limit, buf_len)
}

/// The handshake, then for each backend this side's QP and buffer exchanged with the peer's and
/// connected (-R: through the connection manager), its receives posted (a SEND ping-pong), then
/// the barrier.
#[allow(clippy::type_complexity)]
fn connect(
    rdv: &mut dyn Rendezvous,
    hello: &Hello,
    (plan, dev): (&Plan, &Dev),
    kinds: &[BackendKind],
    (op, events): (OpKind, bool),
    buf_len: usize,
    mode: DbMode,
) -> Result<(Ends, Vec<PingState>, Option<super::cm::CmLink>, Vec<serde_json::Value>), ProbeError> {
    rdv.agree(hello)?;
    let mut cm = if plan.rdma_cm {
        Some(super::cm::CmLink::open(rdv, plan, dev)?)
    } else {
        None
    };
    // -e: after the polling ends, each verbs backend's again, waiting for completion events
    let (mut ends, mut qps) = (Vec::new(), Vec::new());
    for (k, ev) in session::event_rows(dev, kinds, events, true)? {
        let half = if ev {
            HalfEnd::with_events(dev, k, op, buf_len)?
        } else {
            HalfEnd::new(dev, k, op, buf_len, mode)?
        };
        let mine = half.info(dev)?;
        let theirs = session::exchange_qp(rdv, &mine)?;
        let label = format!("{}{}", k.as_str(), if ev { "-e" } else { "" });
        let unused = session::psn_lid_gid_unused(cm.is_some(), dev, k);
        qps.push(session::qp_addrs_json(&label, &mine, &theirs, unused));
        let end = match &mut cm {
            Some(link) => link.connect(rdv, half, (dev, op), &theirs, plan.device.gid_index)?,
            None => half.connect(dev, op, &theirs)?,
        };
        ends.push((k, end));
    }
    // receives first: on UC and UD a message that finds none is dropped, not retried
    let mut states = vec![PingState::default(); ends.len()];
    for ((_, e), st) in ends.iter_mut().zip(&mut states) {
        crate::scenario::runner::lat_prime(e, op, st).map_err(crate::backend::setup::SetupError::from)?;
    }
    // neither side posts before the other's QPs are connected and its receives posted
    rdv.barrier(ends.len() as u32)?;
    Ok((ends, states, cm, qps))
}

/// Runs the blocks of one size on connected ends; the client returns the results. With
/// `--anatomy` the server's turnarounds (and where its completions carry its NIC clock, its
/// responders on its own map of it) come to it after the blocks.
#[allow(clippy::too_many_arguments)]
fn run_network(
    rdv: &mut dyn Rendezvous,
    ends: &mut [(BackendKind, AnyEnd)],
    states: &mut [PingState],
    p: &LatParams,
    blocks: u64,
    client: bool,
    cal: &Calibration,
    nic: &Result<NicClock<'_>, String>,
) -> Result<Vec<LatResult>, ProbeError> {
    let blocks = blocks.clamp(1, p.iters.max(1));
    // the samples' room reserved up front, as in one process: a -n the memory check let through
    // must not fail by growing them
    let mut all: Vec<(LatSamples, Blocks)> = crate::scenario::runner::sample_room(
        ends.len(),
        crate::scenario::runner::Length::Iterations { iters: p.iters, blocks },
        // with --anatomy each end's timestamps (the client's turnarounds come in one piece from
        // the server, after the blocks, in room of their own)
        p.anatomy,
    )?;
    // a ping-pong without receives has no NIC split: no pairs (and no barrier, on both ends)
    let split = p.anatomy && p.op.needs_recv();
    let mut map = RunMap::start(split, nic);
    // neither end posts before both have their first pairs (the server's would otherwise delay
    // the first round trips)
    if split {
        rdv.barrier(ends.len() as u32)?;
    }
    for b in 0..blocks {
        let iters = p.iters / blocks + u64::from(b < p.iters % blocks);
        let warmup = if b == 0 { p.warmup } else { 0 };
        // the client before its rounds of blocks but the first (it posts next: no one waits on
        // it); the server maps before and after only, a pair there would delay the next request
        if client && b > 0 {
            map.between(nic);
        }
        // the backends' order rotates from block to block, the same on both ends
        let n = ends.len();
        for j in 0..n {
            let i = (j + b as usize) % n;
            let end = &mut ends[i].1;
            let s = lat_side(end, client, p, iters, warmup, &mut states[i], &INTERRUPTED)?;
            if client {
                all[i].1.add(figures_ns(p, &s.rtt, cal));
            }
            all[i].0.extend(s);
        }
    }
    let map = if p.anatomy {
        map.finish(nic, cal)
    } else {
        Err(String::new())
    };
    let theirs = exchange_anatomy(rdv, &mut all, p, client, cal, &map)?;
    if !client {
        return Ok(Vec::new());
    }
    client_results(ends, all, p, cal, theirs, &map)
}

/// The client's results of one size: each backend's, with `--anatomy` its NIC split from the
/// server's responders (`theirs`) and this side's NIC clock `map`, or why there is none.
fn client_results(
    ends: &[(BackendKind, AnyEnd)],
    all: Vec<(LatSamples, Blocks)>,
    p: &LatParams,
    cal: &Calibration,
    theirs: Option<Responders>,
    map: &Result<crate::verbs::nic_clock::NicClockMap, String>,
) -> Result<Vec<LatResult>, ProbeError> {
    let mut out = Vec::new();
    let mut resp = theirs.map(|(r, m)| (r.into_iter(), m));
    for ((k, _), (s, m)) in ends.iter().zip(all) {
        let mut r = finish(*k, p, &s, m, cal)?;
        if let (Some(a), Some((rs, sm))) = (r.anatomy.as_mut(), resp.as_mut()) {
            let theirs = rs.next().unwrap_or_else(|| Err("no responders".into()));
            match nic_anatomy_net(p.op, &s, theirs, *sm, map, cal) {
                Ok(n) => a.nic = Some(n),
                Err(why) => a.nic_absent = Some(why),
            }
        }
        out.push(r);
    }
    Ok(out)
}

/// The server's responders per backend (or why it has none) and its map of its NIC clock.
type Responders = (Vec<Result<Vec<f64>, String>>, Option<MapSummary>);

/// With `--anatomy`, after the blocks: the server sends each backend's turnarounds and its
/// responders on its NIC clock's `map` (or why it has none); the client takes the turnarounds
/// into its samples and returns the responders.
fn exchange_anatomy(
    rdv: &mut dyn Rendezvous,
    all: &mut [(LatSamples, Blocks)],
    p: &LatParams,
    client: bool,
    cal: &Calibration,
    map: &Result<crate::verbs::nic_clock::NicClockMap, String>,
) -> Result<Option<Responders>, ProbeError> {
    if !p.anatomy {
        return Ok(None);
    }
    if !client {
        let rows: Vec<Vec<u64>> = all.iter_mut().map(|(s, _)| std::mem::take(&mut s.turnaround)).collect();
        let resp: Vec<Result<Vec<i64>, String>> = all
            .iter()
            .map(|(s, _)| {
                let m = map.as_ref().map_err(Clone::clone)?;
                Ok(responder_ticks(s, m)?.iter().map(|&t| t.round() as i64).collect())
            })
            .collect();
        turnaround::send(rdv, &rows, &resp, map.as_ref().ok().map(|m| m.fit), cal.hz)?;
        return Ok(None);
    }
    let want: Vec<usize> = all.iter().map(|(s, _)| s.rtt.len()).collect();
    let got = turnaround::receive(rdv, &want, cal.hz)?;
    for ((s, _), t) in all.iter_mut().zip(got.rows) {
        s.turnaround = t;
    }
    Ok(Some((got.responders, got.server_map)))
}
