//! A latency measurement from plan to report: set-up, the peer, the sizes, the blocks.

use super::report::{Report, Role, Runs};
use super::session::{self, end_params};
use super::{LatPlan, Observer, PeerSpec, Plan, ProbeError, Scenario, Sizes, INTERRUPTED};
use crate::backend::setup::{AnyEnd, Dev, HalfEnd, INLINE};
use crate::backend::{BackendKind, OpKind};
use crate::clock::Calibration;
use crate::mlx5::sq::DbMode;
use crate::model::{ExecMode, ModelConfig};
use crate::oob::{Hello, Rendezvous};
use crate::report::{Hist, Interval};
use crate::scenario::lat::{LatParams, LatSamples, PingState};
use crate::scenario::runner::{figures_ns, finish, lat_side, run_blocks, AnyPair, Blocks, LatPair, LatResult, Length};
use serde_json::json;

/// Each backend's end, connected to the peer's.
type Ends = Vec<(BackendKind, AnyEnd)>;

/// Fewer iterations per latency block than this get a warning.
pub const MIN_BLOCK: u64 = 100;
/// Fewer iterations per latency block than this: the blocks are lowered until each has this many.
pub const MIN_BLOCK_FLOOR: u64 = 10;

/// Runs a latency plan (see [`super::run`]).
pub(super) fn run(
    plan: &Plan,
    l: &LatPlan,
    peer: Option<&mut (dyn Rendezvous + '_)>,
    obs: &mut dyn Observer,
) -> Result<Report, ProbeError> {
    let mut l = l.clone();
    let network = plan.peer != PeerSpec::Loopback;
    if network && (l.duration.is_some() || l.intervals) {
        return Err(ProbeError::Usage(
            "-D and --hdr are available with --loopback only in this version (both ends must run the same iterations)"
                .into(),
        ));
    }
    let op = l.op;
    if op == OpKind::FetchAdd && !matches!(l.sizes, Sizes::One(2) | Sizes::One(8)) {
        obs.note("atomics move 8 bytes; -s/-a ignored");
    }
    let sizes = l.sizes.list(op);
    let buf_len = session::buffer_len(&sizes);
    // the model executes a WQE after the post call returns: the post column is the post alone
    let model = ModelConfig {
        wire_delay_ns: l.model_delay_ns,
        exec: ExecMode::AfterPost,
        ..Default::default()
    };
    let dev = session::open_device(plan, model, obs)?;
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
    for s in &sizes {
        dev.check_size(*s)?;
    }
    // every sample is kept: the memory they take is checked before the run, not met after it
    let backends = kinds.len() as u64;
    match l.duration {
        None => session::check_memory(
            l.iters
                .saturating_mul(backends)
                .saturating_mul(session::LAT_SAMPLE_BYTES),
            || {
                format!(
                    "-n {} ({backends} backend(s), {} B per iteration)",
                    l.iters,
                    session::LAT_SAMPLE_BYTES
                )
            },
        )?,
        Some(d) => session::check_memory(
            (d.as_nanos() / u128::from(session::FASTEST_ITERATION_NS)).min(u128::from(u64::MAX)) as u64
                * session::LAT_SAMPLE_BYTES,
            || {
                format!(
                    "-D {} (up to one iteration per {} ns, {} B each)",
                    d.as_secs(),
                    session::FASTEST_ITERATION_NS,
                    session::LAT_SAMPLE_BYTES
                )
            },
        )?,
    }
    let mode = session::direct_mode(plan.db_mode);
    let before = super::counters::sample(&dev);
    let (cal, env) = session::calibrate(&dev, true)?;
    let mut warnings = env.warnings();
    settle(plan, &mut l, &mut warnings, obs)?;
    let mut pairs = Vec::new();
    let max_inline = if network {
        INLINE
    } else {
        for k in &kinds {
            pairs.push(LatPair::new(*k, AnyPair::new(&dev, *k, op, buf_len, mode)?));
        }
        pairs.iter().map(|p| p.pair.max_inline()).min().unwrap_or(0)
    };
    let inline_limit = match l.inline_size {
        Some(i) if i > max_inline && matches!(op, OpKind::Write | OpKind::Send) => {
            return Err(ProbeError::Usage(format!(
                "-I {i} exceeds the QPs' max_inline_data {max_inline}"
            )))
        }
        Some(i) => i,
        None => max_inline,
    };
    let mut tcp = None;
    let mut net: Option<(&mut dyn Rendezvous, Ends)> = None;
    if network {
        let rdv: &mut dyn Rendezvous = match peer {
            Some(p) => p,
            None => tcp.insert(session::tcp_peer(plan, obs)?.ok_or_else(|| ProbeError::Invalid("no peer".into()))?),
        };
        let hello = hello(&l, &sizes, &kinds, mode, inline_limit, buf_len);
        let ends = connect(
            &mut session::Phase::new(rdv, plan.oob_timeout),
            &hello,
            &dev,
            &kinds,
            op,
            buf_len,
            mode,
        )?;
        net = Some((rdv, ends));
    }
    let role = match (&net, &plan.peer) {
        (None, _) => Role::Loopback,
        (Some((p, _)), PeerSpec::Listen { .. }) => Role::Server(p.peer_name()),
        (Some((p, _)), _) => Role::Client(p.peer_name()),
    };
    let params = json!({
        "scenario": "lat", "op": op.as_str(), "iters": l.iters, "warmup": l.warmup, "blocks": l.blocks,
        "backends": kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>(), "db_mode": mode.as_str(),
        "inline_limit": inline_limit, "loopback": !network, "model_delay_ns": l.model_delay_ns,
        // what the QPs were granted (in process: read from them; client/server: asked for)
        "qp_max_inline_data": max_inline, "qp_max_inline_data_source": if network { "requested" } else { "granted" },
        "model_exec": dev.is_model().then_some("after_post"),
        "duration_s": l.duration.map(|d| d.as_secs()),
        "peer": match &role { Role::Loopback => None, Role::Client(p) | Role::Server(p) => Some(p.clone()) },
    });
    let mut report = Report {
        plan: Plan {
            scenario: Scenario::Lat(l.clone()),
            ..plan.clone()
        },
        role,
        device: dev.name(),
        provider: dev.provider(),
        is_model: dev.is_model(),
        backends: kinds.clone(),
        env,
        clock: cal,
        warnings,
        params,
        runs: Runs::Lat(Vec::new()),
        intervals: Vec::new(),
        short_runs: Vec::new(),
        end_error: None,
        counters: None,
    };
    obs.started(&report);
    let client = !matches!(report.role, Role::Server(_));
    let run_start = std::time::Instant::now();
    // ping-pong state per backend across sizes (marker numbering, receives posted once)
    let mut states = vec![PingState::default(); kinds.len()];
    for size in sizes {
        let p = LatParams {
            op,
            size,
            iters: l.iters,
            warmup: l.warmup,
            inline: matches!(op, OpKind::Write | OpKind::Send) && size <= inline_limit,
            stall: plan.stall,
        };
        let rs = match net.as_mut() {
            None => {
                let len = match l.duration {
                    Some(time) => Length::Duration { time, block: 1000 },
                    None => Length::Iterations {
                        iters: l.iters,
                        blocks: l.blocks,
                    },
                };
                // interval times from the start of the whole run (several sizes follow each other)
                let t_base = run_start.elapsed().as_secs_f64();
                let intervals = &mut report.intervals;
                let mut on_block = |k: BackendKind, v: &[f64], t0: f64, t1: f64| {
                    if l.intervals {
                        let mut h = Hist::new();
                        v.iter().for_each(|&x| h.record(x));
                        intervals.push(Interval {
                            tag: format!("{}-{}-{}", k.as_str(), op.as_str(), size),
                            start_s: t_base + t0,
                            duration_s: t1 - t0,
                            hist: h,
                        });
                    }
                };
                match run_blocks(&mut pairs, &p, len, &report.clock, &INTERRUPTED, &mut on_block) {
                    Ok(rs) => rs,
                    Err(e) => {
                        let states = pairs.iter().flat_map(|p| p.pair.describe()).collect();
                        return Err(super::diag::failed(
                            super::diag::Bundle {
                                plan,
                                dev: &dev,
                                qp_states: states,
                                before: before.clone(),
                                error: None,
                            },
                            e.into(),
                        ));
                    }
                }
            }
            Some((rdv, ends)) => match run_network(ends, &mut states, &p, l.blocks, client, &report.clock) {
                Ok(rs) => rs,
                Err(e) => {
                    let e = session::fail(&mut **rdv, e);
                    let states = ends.iter().map(|(_, e)| e.describe()).collect();
                    return Err(super::diag::failed(
                        super::diag::Bundle {
                            plan,
                            dev: &dev,
                            qp_states: states,
                            before: before.clone(),
                            error: None,
                        },
                        e,
                    ));
                }
            },
        };
        for r in rs {
            if let Runs::Lat(v) = &mut report.runs {
                v.push(r);
            }
            obs.finished(&report, report.runs.len() - 1);
        }
    }
    if let Some(dir) = &plan.diag {
        let states = pairs
            .iter()
            .flat_map(|p| p.pair.describe())
            .chain(net.iter().flat_map(|(_, ends)| ends.iter().map(|(_, e)| e.describe())))
            .collect();
        let b = super::diag::Bundle {
            plan,
            dev: &dev,
            qp_states: states,
            before: before.clone(),
            error: None,
        };
        match super::diag::write(dir, &b) {
            Ok(()) => obs.note(&format!("diagnostics written to {}", dir.display())),
            Err(why) => obs.note(&format!("diagnostics not written to {}: {why}", dir.display())),
        }
    }
    report.counters = super::counters::CounterDelta::since(before, &dev);
    if let Some((rdv, _)) = net {
        // the figures were measured: a peer that fails or vanishes at the end is recorded, and
        // the caller still gets them
        report.end_error = session::end(rdv, plan).err().map(|e| e.to_string());
    }
    Ok(report)
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
    if l.duration.is_none() && per_block < MIN_BLOCK_FLOOR {
        // a block's first iterations follow the hand-over to the measuring threads: blocks of a
        // few iterations would weigh them in the figures; fewer blocks, said so
        let blocks = (l.iters / MIN_BLOCK_FLOOR).max(1);
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
    Hello::new(
        [
            ("scenario", "lat".to_string()),
            ("op", l.op.as_str().to_string()),
            (
                "sizes",
                sizes.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(","),
            ),
            ("iters", l.iters.to_string()),
            ("warmup", l.warmup.to_string()),
            ("blocks", l.blocks.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .chain(end_params(kinds, mode, inline_limit, buf_len))
        .collect(),
    )
}

/// The handshake, then for each backend this side's QP and buffer exchanged with the peer's and
/// connected, then the barrier.
fn connect(
    rdv: &mut dyn Rendezvous,
    hello: &Hello,
    dev: &Dev,
    kinds: &[BackendKind],
    op: OpKind,
    buf_len: usize,
    mode: DbMode,
) -> Result<Vec<(BackendKind, AnyEnd)>, ProbeError> {
    rdv.agree(hello)?;
    let mut ends = Vec::new();
    for k in kinds {
        let half = HalfEnd::new(dev, *k, op, buf_len, mode)?;
        let theirs = session::exchange_qp(rdv, &half.info(dev)?)?;
        ends.push((*k, half.connect(dev, op, &theirs)?));
    }
    // neither side posts before the other's QPs are connected
    rdv.barrier(ends.len() as u32)?;
    Ok(ends)
}

/// Runs the blocks of one size on connected ends; the client returns the results.
fn run_network(
    ends: &mut [(BackendKind, AnyEnd)],
    states: &mut [PingState],
    p: &LatParams,
    blocks: u64,
    client: bool,
    cal: &Calibration,
) -> Result<Vec<LatResult>, ProbeError> {
    let blocks = blocks.clamp(1, p.iters.max(1));
    let mut all: Vec<(LatSamples, Blocks)> = ends
        .iter()
        .map(|_| (LatSamples::default(), Blocks::default()))
        .collect();
    for b in 0..blocks {
        let iters = p.iters / blocks + u64::from(b < p.iters % blocks);
        let warmup = if b == 0 { p.warmup } else { 0 };
        // the backends' order rotates from block to block, the same on both ends
        let n = ends.len();
        for j in 0..n {
            let i = (j + b as usize) % n;
            let end = &mut ends[i].1;
            if let Some(s) = lat_side(end, client, p, iters, warmup, &mut states[i], &INTERRUPTED)? {
                all[i].1.add(figures_ns(p, &s.rtt, cal));
                all[i].0.rtt.extend(s.rtt);
                all[i].0.post.extend(s.post);
                all[i].0.wait.extend(s.wait);
            }
        }
    }
    if !client {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for ((k, _), (s, m)) in ends.iter().zip(all) {
        out.push(finish(*k, p, &s, m, cal)?);
    }
    Ok(out)
}
