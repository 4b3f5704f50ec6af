//! A bandwidth measurement from plan to report: set-up, the peer, every thread's QPs, the sizes.

use super::session;
use crate::backend::setup::{AnyEnd, Dev, HalfEnd, INLINE};
use crate::backend::BackendKind;
use crate::mlx5::sq::DbMode;
use crate::model::{ExecMode, ModelConfig};
use crate::oob::{Hello, Rendezvous};
use crate::probe::report::{Report, Role, Runs};
use crate::probe::{BwPlan, Observer, PeerSpec, Plan, ProbeError, INTERRUPTED};
use crate::scenario::bw::{summarize, BwParams};
use crate::scenario::runner::{bw_resized, bw_side, run_bw_with, BwResult, BW_RESIZES, MAX_BW_ITERS};
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Every backend's threads' QPs, connected to the peer's.
type Ends = Vec<Vec<Vec<AnyEnd>>>;

/// Memory a QP takes besides its message buffer (queues, completion queue, model0's objects),
/// bytes: a bound above what model0 measured (about 220 KiB per verbs QP).
pub const QP_OVERHEAD_BYTES: u64 = 256 * 1024;

/// Runs a bandwidth plan (see [`crate::probe::run`]).
pub(in crate::probe) fn run(
    plan: &Plan,
    b: &BwPlan,
    peer: Option<&mut (dyn Rendezvous + '_)>,
    obs: &mut dyn Observer,
) -> Result<Report, ProbeError> {
    let network = plan.peer != PeerSpec::Loopback;
    let op = b.op;
    if b.postlist > b.tx_depth || b.cq_mod > b.tx_depth {
        return Err(ProbeError::Usage(format!(
            "--post-list ({}) and --cq-mod ({}) must not exceed --tx-depth ({})",
            b.postlist, b.cq_mod, b.tx_depth
        )));
    }
    if network && plan.transport == crate::backend::Transport::Uc && op.needs_recv() {
        return Err(ProbeError::Usage(
            "bw -c UC with a receiving operation runs with --loopback only in this version (the receiver cannot know \
             how many of the messages it did not drop will come)"
                .into(),
        ));
    }
    let mut sizes = b.sizes.list(op);
    let buf_len = session::buffer_len(&sizes);
    // as suite runs it: the model executes after the post call (the same figures in both)
    let model = ModelConfig {
        wire_delay_ns: None,
        exec: ExecMode::AfterPost,
        ..Default::default()
    };
    let dev = session::open_device(plan, model, obs)?;
    let kinds = session::backends(&dev, plan.backends)?;
    // -e: after the polling backends, each verbs backend again, waiting for completion events
    if b.events && plan.backends == crate::probe::Backends::Only(BackendKind::Direct) {
        return Err(ProbeError::Usage(
            "-e/--events: completion events are libibverbs' completion channel: --backend verbs, wr or all".into(),
        ));
    }
    let rows = session::event_rows(&dev, &kinds, b.events, network)?;
    let mode = session::direct_mode(plan.db_mode);
    for s in &sizes {
        dev.check_size(*s)?;
    }
    check_memory(b.iters, b.threads, b.qps, b.bidirectional, buf_len)?;
    if let Some(n) = session::check_open_files(&dev, b.threads.saturating_mul(b.qps), || {
        format!("-q {} x --threads {}", b.qps, b.threads)
    })? {
        obs.note(&n);
    }
    let inline_limit = b.inline_size.unwrap_or(INLINE);
    if inline_limit > INLINE && op.carries_payload() {
        return Err(ProbeError::Usage(format!(
            "-I {inline_limit} exceeds the QPs' max_inline_data {INLINE} (what bandwidth QPs are made with)"
        )));
    }
    let before = crate::probe::check::counters::sample(&dev);
    let (cal, env) = session::calibrate(&dev, true)?;
    let mut warnings = env.warnings();
    if let Some(n) = session::ud_checks(&dev, plan, &mut sizes, matches!(b.sizes, crate::probe::Sizes::All))? {
        warnings.push(n);
    }
    if b.events && dev.is_model() {
        warnings.push(
            "-e on model0: the model executes each WQE in the poster's thread right after the post, so completions \
             are mostly there before any wait (the JSON's summary.event_waits counts the waits); on a NIC or rxe \
             the threads block for the events"
                .into(),
        );
    }
    // client and server: the handshake, then every thread's QPs of every backend connected
    let mut tcp = None;
    let mut net: Option<(&mut dyn Rendezvous, Ends)> = None;
    // -R: the connections through the CM, kept until the run ends
    let mut cm = None;
    if network {
        let rdv: &mut dyn Rendezvous = match peer {
            Some(p) => p,
            None => tcp.insert(session::tcp_peer(plan, obs)?.ok_or_else(|| ProbeError::Invalid("no peer".into()))?),
        };
        let mut hello = hello(b, &sizes, &kinds, mode, inline_limit, buf_len);
        hello.params.insert("transport".into(), plan.transport.as_str().into());
        hello.params.insert("rdma_cm".into(), plan.rdma_cm.to_string());
        hello.params.insert(
            "path_mtu".into(),
            plan.path.mtu.map_or("active".into(), |m| m.to_string()),
        );
        let (ends, link) = connect(
            &mut session::Phase::new(rdv, plan.oob_timeout),
            &hello,
            (plan, b),
            &dev,
            &rows,
            buf_len,
            mode,
        )?;
        net = Some((rdv, ends));
        cm = link;
    }
    let role = match (&net, &plan.peer) {
        (None, _) => Role::Loopback,
        (Some((p, _)), PeerSpec::Listen { .. }) => Role::Server(p.peer_name()),
        (Some((p, _)), _) => Role::Client(p.peer_name()),
    };
    let params = json!({
        "scenario": "bw", "window_ms": b.window.as_micros() as f64 / 1e3, "min_duration_ms": b.min_duration.as_millis() as u64,
        "inline_limit": inline_limit, "model_exec": dev.is_model().then_some("after_post"), "op": op.as_str(), "iters": b.iters,
        "tx_depth": b.tx_depth, "postlist": b.postlist, "cq_mod": b.cq_mod, "qps_per_thread": b.qps, "threads": b.threads,
        "bidirectional": b.bidirectional, "backends": kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
        "db_mode": mode.as_str(), "loopback": !network, "path": crate::probe::report::path_json(&plan.path),
        "huge_pages": plan.huge_pages, "mr_per_qp": true, "run_infinitely": b.run_infinitely,
        "duration_s": b.duration.map(|d| d.as_secs_f64()), "events": b.events,
        "transport": plan.transport.as_str(),
        "rdma_cm": cm.as_ref().map(|c| c.json()),
        "peer": match &role { Role::Loopback => None, Role::Client(p) | Role::Server(p) => Some(p.clone()) },
    });
    let client = !matches!(role, Role::Server(_));
    let mut report = Report {
        plan: plan.clone(),
        role,
        device: dev.name(),
        provider: dev.provider(),
        is_model: dev.is_model(),
        backends: kinds.clone(),
        env,
        clock: cal,
        warnings,
        params,
        runs: Runs::Bw(Vec::new()),
        intervals: Vec::new(),
        short_runs: Vec::new(),
        end_error: None,
        counters: None,
    };
    obs.started(&report);
    // --run-infinitely: rounds until stopped, each backend's messages carried from its last
    // round
    let mut iters = vec![b.iters; rows.len()];
    // --run-infinitely between two processes: a stop agreed after a run; a second stop that cut
    // the exchange short (the end is then not clean)
    let (mut stopping, mut unclean) = (false, false);
    // client/server with -D or --run-infinitely: the runs are sized by the client
    let sized = network && (b.duration.is_some() || b.run_infinitely);
    // client/server --run-infinitely: a stop ends the run under way first (the peer would
    // wait for messages that do not come), then both ends
    let never = AtomicBool::new(false);
    let intr = if network && b.run_infinitely {
        &never
    } else {
        &INTERRUPTED
    };
    'rounds: loop {
        for &size in &sizes {
            // a count sized for one size is not another's: each size starts from -n (only
            // --run-infinitely's rounds, of one size, carry theirs)
            if !b.run_infinitely {
                iters = vec![b.iters; rows.len()];
            }
            for (ki, (k, ev)) in rows.iter().enumerate() {
                let p = BwParams {
                    op,
                    size,
                    iters: iters[ki],
                    tx_depth: b.tx_depth,
                    postlist: b.postlist,
                    cq_mod: b.cq_mod,
                    inline: op.carries_payload() && size <= inline_limit,
                    bidirectional: b.bidirectional,
                    stall: plan.stall,
                    window: b.window,
                    // both ends of a client/server run must agree on the iterations: no resizing
                    min_duration: if network { Duration::ZERO } else { b.min_duration },
                    no_peak: b.no_peak,
                    unreliable: plan.transport != crate::backend::Transport::Rc,
                };
                let r = match net.as_mut() {
                    None => match run_bw_with(
                        &dev,
                        (*k, *ev),
                        &p,
                        (b.threads as usize, b.qps as usize),
                        buf_len,
                        mode,
                        &report.clock,
                        &INTERRUPTED,
                    ) {
                        Ok(r) => r,
                        // stopping is how an endless run ends: the rounds measured stand (none,
                        // when it is stopped during its first run)
                        Err(_) if b.run_infinitely && INTERRUPTED.load(Ordering::Relaxed) => break 'rounds,
                        Err(e) => {
                            return Err(crate::probe::check::diag::failed(
                                bundle(plan, &dev, &before, Vec::new()),
                                e.into(),
                            ))
                        }
                    },
                    Some((rdv, all)) => {
                        let mut p = p;
                        let mut resizes = 0;
                        let out = loop {
                            let out = match bw_side(&mut all[ki], &p, client, &report.clock, intr) {
                                Ok(o) => o,
                                Err(e) => {
                                    let e = session::fail(&mut **rdv, e.into());
                                    let states = all.iter().flatten().flatten().map(|e| e.describe()).collect();
                                    return Err(crate::probe::check::diag::failed(
                                        bundle(plan, &dev, &before, states),
                                        e,
                                    ));
                                }
                            };
                            // -D, --run-infinitely: the client sizes the runs to last at least D (a
                            // run too short is run again with more messages, as in one process) and
                            // tells the server (both ends run the same messages)
                            if !sized {
                                break out;
                            }
                            let took = summarize(&out, size, b.cq_mod, report.clock.hz).seconds;
                            let word = (client, p.iters, took, resizes);
                            match resize(&mut **rdv, word, (plan, b), buf_len) {
                                Ok(Next::Again(n)) => {
                                    p.iters = n;
                                    resizes += 1;
                                }
                                Ok(Next::Stands) => break out,
                                Ok(Next::Stop) => {
                                    stopping = true;
                                    break out;
                                }
                                // a second stop while the peer's word was awaited: what was
                                // measured stands, the run ends (said as its unclean end)
                                Err(e) if b.run_infinitely && INTERRUPTED.load(Ordering::Relaxed) => {
                                    report.end_error = Some(e.to_string());
                                    unclean = true;
                                    break 'rounds;
                                }
                                Err(e) => return Err(session::fail(&mut **rdv, e)),
                            }
                        };
                        iters[ki] = p.iters;
                        if !client {
                            if stopping {
                                break 'rounds;
                            }
                            continue;
                        }
                        let mut r = client_result(b, *k, &p, summarize(&out, size, b.cq_mod, report.clock.hz));
                        r.completion = ev.then(|| "events".into());
                        r
                    }
                };
                let s = &r.summary;
                if s.seconds * 1e3 < b.min_duration.as_millis() as f64 {
                    report
                        .short_runs
                        .push(format!("{size} B {} ({:.1} ms)", k.as_str(), s.seconds * 1e3));
                }
                iters[ki] = r.iters;
                if let Runs::Bw(v) = &mut report.runs {
                    v.push(r);
                }
                obs.finished(&report, report.runs.len() - 1);
                if stopping {
                    break 'rounds;
                }
            }
        }
        // between two processes a stop is agreed after a run (above): a side that ended the round
        // on its own stop would leave the other in the next
        if !b.run_infinitely || (!network && INTERRUPTED.load(Ordering::Relaxed)) {
            break;
        }
    }
    if let Some(dir) = &plan.diag {
        let states = net
            .iter()
            .flat_map(|(_, all)| all.iter().flatten().flatten().map(|e| e.describe()))
            .collect();
        match crate::probe::check::diag::write(dir, &bundle(plan, &dev, &before, states)) {
            Ok(()) => obs.note(&format!("diagnostics written to {}", dir.display())),
            Err(why) => obs.note(&format!("diagnostics not written to {}: {why}", dir.display())),
        }
    }
    report.counters = crate::probe::check::counters::CounterDelta::since(before, &dev);
    if let (Some((rdv, _)), false) = (net, unclean) {
        // the figures were measured: a peer that fails or vanishes at the end is recorded, and
        // the caller still gets them
        report.end_error = session::end(rdv, plan, b.run_infinitely).err().map(|e| e.to_string());
    }
    Ok(report)
}

/// Refuses (exit 2, naming -n and -q) a bandwidth run whose samples, and per QP pair its two
/// buffers and its queues (measured on model0: about 220 KiB per verbs QP, 70 KiB per direct QP,
/// with 4 KiB messages), would not fit in memory.
pub(in crate::probe) fn check_memory(
    iters: u64,
    threads: u64,
    qps: u64,
    bidirectional: bool,
    buf_len: usize,
) -> Result<(), ProbeError> {
    let pairs = threads.saturating_mul(qps);
    let per_pair = (2 * buf_len as u64).saturating_add(2 * QP_OVERHEAD_BYTES);
    session::check_memory(
        iters
            .saturating_mul(pairs)
            .saturating_mul(if bidirectional { 2 } else { 1 })
            .saturating_mul(session::BW_SAMPLE_BYTES)
            .saturating_add(pairs.saturating_mul(per_pair)),
        || {
            format!(
                "-n {iters} x {threads} thread(s) x {qps} QP(s) ({} B per message; {} KiB of buffers and queues per QP pair)",
                session::BW_SAMPLE_BYTES,
                per_pair / 1024
            )
        },
    )
}

/// The diagnostics bundle of this run.
fn bundle<'a>(
    plan: &'a Plan,
    dev: &'a Dev,
    before: &Option<(&'static str, crate::model::Counters)>,
    qp_states: Vec<String>,
) -> crate::probe::check::diag::Bundle<'a> {
    crate::probe::check::diag::Bundle {
        plan,
        dev,
        qp_states,
        before: before.clone(),
        error: None,
    }
}

/// A client's result of one size and backend, from its threads' summaries.
fn client_result(b: &BwPlan, k: BackendKind, p: &BwParams, summary: crate::scenario::bw::BwSummary) -> BwResult {
    BwResult {
        scenario: "bw".into(),
        backend: k.as_str().into(),
        op: b.op.cli_name().into(),
        verb: b.op.as_str().into(),
        size: p.size,
        threads: b.threads as usize,
        qps_per_thread: b.qps as usize,
        tx_depth: b.tx_depth,
        postlist: b.postlist,
        cq_mod: b.cq_mod,
        bidirectional: b.bidirectional,
        inline: p.inline,
        iters: p.iters,
        min_duration_ms: 0.0,
        summary,
        completion: None,
    }
}

/// Each side's word after a run sized by the client (-D, --run-infinitely between two
/// processes): the client's, run again with `iters` messages per QP (`again`) or the run stands;
/// both sides', whether this side stops (--run-infinitely: a stop ends both after the run).
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Resize {
    again: bool,
    iters: u64,
    stop: bool,
}

/// What follows a sized run.
enum Next {
    /// It is run again with this many messages per QP.
    Again(u64),
    /// It stands.
    Stands,
    /// It stands, and the run ends (--run-infinitely: a stop on either side).
    Stop,
}

/// After a run of `iters` that took `took` s (the `resizes`-th resize): the client decides
/// whether it is run again with more messages (-D's minimum not reached) and tells the server,
/// which checks what it is told; both check the memory the new count needs. The server waits
/// while the client's run goes on (a one-sided operation's server has nothing to do): its
/// deadline covers a run of twice the minimum. With --run-infinitely each side also says
/// whether it stops (a stop ends both after this run), and a stop does not cut this wait short.
fn resize(
    rdv: &mut dyn Rendezvous,
    (client, iters, took, resizes): (bool, u64, f64, u32),
    (plan, b): (&Plan, &BwPlan),
    buf_len: usize,
) -> Result<Next, ProbeError> {
    let next = match client && resizes < BW_RESIZES {
        true => bw_resized(iters, took, b.min_duration.as_secs_f64()),
        false => None,
    };
    let stop = b.run_infinitely && INTERRUPTED.load(Ordering::Relaxed);
    let mine = Resize {
        again: next.is_some() && !stop,
        iters: next.unwrap_or(iters),
        stop,
    };
    let _hold = b.run_infinitely.then(crate::signals::hold);
    rdv.set_timeout(plan.oob_timeout + plan.stall + b.min_duration.mul_f64(2.0))?;
    let theirs: Resize = session::exchange_checked(rdv, &mine)?;
    rdv.set_timeout(plan.oob_timeout)?;
    if b.run_infinitely && (mine.stop || theirs.stop) {
        return Ok(Next::Stop);
    }
    let word = if client { mine } else { theirs };
    if !word.again {
        return Ok(Next::Stands);
    }
    if !client && (word.iters <= iters || word.iters > MAX_BW_ITERS || resizes >= BW_RESIZES) {
        return Err(ProbeError::Invalid(format!(
            "the client {} asked for a run of {} messages per QP after one of {iters} (resize {}): refused \
             (a resize grows the run, up to {MAX_BW_ITERS} messages, at most {BW_RESIZES} times)",
            rdv.peer_name(),
            word.iters,
            resizes + 1
        )));
    }
    check_memory(word.iters, b.threads, b.qps, b.bidirectional, buf_len)?;
    Ok(Next::Again(word.iters))
}

/// The parameters both ends of a bandwidth run must share.
fn hello(b: &BwPlan, sizes: &[u32], kinds: &[BackendKind], mode: DbMode, inline_limit: u32, buf_len: usize) -> Hello {
    let own = [
        ("iters", b.iters.to_string()),
        ("tx_depth", b.tx_depth.to_string()),
        ("postlist", b.postlist.to_string()),
        ("cq_mod", b.cq_mod.to_string()),
        ("qps", b.qps.to_string()),
        ("threads", b.threads.to_string()),
        ("bidirectional", b.bidirectional.to_string()),
        (
            "duration_s",
            b.duration.map_or("none".into(), |d| d.as_secs_f64().to_string()),
        ),
        ("run_infinitely", b.run_infinitely.to_string()),
        ("events", b.events.to_string()),
    ];
    session::hello("bw", b.op, sizes, own, kinds, mode, inline_limit, buf_len)
}

/// The handshake, then every thread's QPs of every backend exchanged and connected (-R: through
/// the connection manager), then the barrier.
fn connect(
    rdv: &mut dyn Rendezvous,
    hello: &Hello,
    (plan, b): (&Plan, &BwPlan),
    dev: &Dev,
    rows: &[(BackendKind, bool)],
    buf_len: usize,
    mode: DbMode,
) -> Result<(Ends, Option<super::cm::CmLink>), ProbeError> {
    rdv.agree(hello)?;
    let mut cm = if plan.rdma_cm {
        Some(super::cm::CmLink::open(rdv, plan, dev)?)
    } else {
        None
    };
    let mut all = Vec::new();
    for &(k, ev) in rows {
        let mut threads = Vec::new();
        for _ in 0..b.threads {
            let mut ends = Vec::new();
            for _ in 0..b.qps {
                let half = if ev {
                    HalfEnd::with_events(dev, k, b.op, buf_len)?
                } else {
                    HalfEnd::new(dev, k, b.op, buf_len, mode)?
                };
                let theirs = session::exchange_qp(rdv, &half.info(dev)?)?;
                ends.push(match &mut cm {
                    Some(link) => link.connect(rdv, half, (dev, b.op), &theirs, plan.device.gid_index)?,
                    None => half.connect(dev, b.op, &theirs)?,
                });
            }
            threads.push(ends);
        }
        all.push(threads);
    }
    // neither side posts before the other's QPs are connected
    let connected: usize = all.iter().flatten().map(|t| t.len()).sum();
    rdv.barrier(connected as u32)?;
    Ok((all, cm))
}
