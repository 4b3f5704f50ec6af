//! `bw write|read --peer perftest`: rdmaprobe as the client or the server of an unmodified
//! `ib_write_bw` or `ib_read_bw` (Debian 12's perftest 6.06, or 6.28 and later with their
//! negotiation), one backend per run (a perftest server serves one connection), `-q` QPs driven
//! from one thread as perftest does.
//! perftest's exchange (`crate::oob::perftest`) in its order for these tests (`write_bw.c`,
//! `read_bw.c`): the opening (version, cycle buffer, cache line, MTU), the key message once per
//! QP, the QPs connected, once more per QP, once more for QP 0; then the client runs while the
//! server waits in one more key message for the client's end; both exchange their bandwidth
//! reports (`xchg_bw_reports`) and close (`ctx_close_connection`: the key message, then the
//! connection's end, perftest 6.06's "done" before it).
//!
//! The server of these one-sided tests is passive and measures nothing; perftest's server
//! prints the report its client sends. So rdmaprobe as the client measures as it always does
//! and sends the figures of its run as perftest computes them (which perftest's server prints
//! as its own result), and rdmaprobe as the server shows the report perftest's client sent (in
//! the output and `params.peer_tool.report`).

use super::{client_result, Setup};
use crate::backend::setup::{AnyEnd, HalfEnd};
use crate::backend::{BackendKind, OpKind};
use crate::oob::perftest::{BwReport, Key, Opening};
use crate::oob::QpInfo;
use crate::probe::check::{counters, diag};
use crate::probe::measure::lat::perftest::{
    gid_form, gid_types_match, negotiation, opening, our_key, out_reads, their_info,
};
use crate::probe::measure::session;
use crate::probe::report::{Report, Role, Runs};
use crate::probe::{Backends, BwPlan, Observer, PeerSpec, Plan, ProbeError, Sizes, INTERRUPTED};
use crate::scenario::bw::{summarize, BwParams, BwSummary};
use crate::scenario::runner::bw_side;
use serde_json::json;
use std::time::Duration;

/// What a perftest peer cannot do with rdmaprobe's bandwidth test in this version, refused
/// before anything is opened (exit 2).
fn refuse(plan: &Plan, b: &BwPlan) -> Result<(), ProbeError> {
    let no = |what: String| Err(ProbeError::Usage(format!("--peer perftest: {what}")));
    if !matches!(b.op, OpKind::Write | OpKind::Read | OpKind::Send) {
        return no(format!(
            "{} against ib_*_bw is not in this version; bw write, read and send (without immediates) against \
             ib_write_bw, ib_read_bw and ib_send_bw are",
            match b.op {
                OpKind::SendImm => "--send-with-imm".to_string(),
                OpKind::WriteImm => "--write-with-imm".to_string(),
                op => format!("bw {}", op.cli_name()),
            }
        ));
    }
    if b.iters < 5 {
        return no(format!(
            "-n {}: perftest's bandwidth tests take 5 or more (\"Iteration num should be between 5 and ...\")",
            b.iters
        ));
    }
    if plan.transport != crate::backend::Transport::Rc {
        return no("perftest's default connection, RC, only in this version (no -c)".into());
    }
    if b.threads != 1 {
        return no("perftest drives its QPs from one thread: no --threads (-q gives the QPs)".into());
    }
    if b.bidirectional || b.duration.is_some() || b.run_infinitely || b.events {
        return no("-b, -D, --run-infinitely and -e are not in this version".into());
    }
    if plan.backends == Backends::All {
        return no(
            "a perftest server serves one connection: one backend per run (--backend verbs, wr or direct; \
                   harness/perftest-peer.sh runs each in turn)"
                .into(),
        );
    }
    Ok(())
}

/// This side connected to perftest: its ends (one per QP), the key messages, what the opening
/// settled.
struct Link {
    ends: Vec<AnyEnd>,
    infos: Vec<QpInfo>,
    mine: Vec<Key>,
    theirs: Vec<Key>,
    /// The bytes perftest's buffer holds from each address it gave (and this side's).
    room: u64,
    opening: Opening,
}

/// The bytes of this side's buffer per QP for `size` against a cycle buffer of `cycle`: two
/// halves of `room` (the peer writes or reads the second from its start), where perftest's
/// WRITE client goes up to a cycle buffer past the address given (it advances by the message
/// rounded up to the cache line, wrapping within the cycle buffer), whole pages.
fn buffer_len(size: u32, cycle: u32, base: usize) -> (usize, u64) {
    let room = u64::from(size.max(cycle));
    ((2 * room as usize).max(base).next_multiple_of(4096), room)
}

/// The outstanding READs this side's QPs may issue against a responder that takes `peer` at
/// once: the largest power of two not above it (a device keeps a power of two: mlx5 and rxe
/// round a value up, which would exceed the peer's), at least 1, at most 128.
fn initiator_depth(peer: u32) -> u8 {
    let p = peer.clamp(1, 128);
    (1u32 << (31 - p.leading_zeros())) as u8
}

/// perftest's exchange for a bandwidth test on `tcp`: the opening, `b.qps` QPs of `kind` made
/// and connected between the key messages as perftest's `main` does (module text).
fn connect(
    tcp: &mut crate::oob::Peer,
    (plan, b, set): (&Plan, &BwPlan, &mut Setup),
    (kind, size): (BackendKind, u32),
    warnings: &mut Vec<String>,
) -> Result<Link, ProbeError> {
    let mut ours = negotiation(&set.dev, (b.op, true), (size, b.iters, b.qps), b.gbits)?;
    if b.sizes == Sizes::All {
        // perftest's -a: its test_method RUN_ALL (1), its size MAX_SIZE (8 MiB, this side's largest)
        ours.fields[0] = 1;
    }
    let opening = opening(tcp, plan, &mut set.dev, &ours, warnings)?;
    let (len, room) = buffer_len(size, opening.cycle_buffer, set.buf_len);
    let depth = out_reads(&set.dev, b.op)?;
    let dev = &set.dev;
    let (mut halves, mut infos, mut mine) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..b.qps {
        let half = HalfEnd::new(dev, kind, b.op, len, set.mode)?;
        let info = half.info(dev)?;
        mine.push(our_key(&info, gid_form(dev), depth));
        infos.push(info);
        halves.push(half);
    }
    let mut theirs: Vec<Key> = Vec::new();
    for k in &mine {
        let t = tcp.perftest_keys(k)?;
        // perftest sends one key per QP, then the first again after connecting: a QP named
        // twice is a perftest with fewer QPs
        if theirs.iter().any(|p| p.qpn == t.qpn) {
            return Err(ProbeError::Invalid(format!(
                "perftest has fewer QPs than this side's -q {}: it does not exchange -q; give both sides the same",
                b.qps
            )));
        }
        theirs.push(t);
    }
    gid_types_match(&mine[0], &theirs[0])?;
    let client = !matches!(plan.peer, PeerSpec::Listen { .. });
    if client && b.op == OpKind::Read && theirs[0].out_reads < depth {
        // perftest's responder takes its own -o at once: this side's initiator goes no further
        // (perftest does the same with this side's out_reads). Devices keep a power of two
        // (mlx5 and rxe round up): the largest not above the peer's
        let cap = initiator_depth(theirs[0].out_reads);
        set.dev.opts_mut().path.max_rd_atomic = Some(cap);
        warnings.push(format!(
            "perftest's QPs answer {} READs at once (its -o): this side's issue at most {cap} (the power of two \
             within it; its device takes {depth})",
            theirs[0].out_reads
        ));
    }
    let dev = &set.dev;
    let mut ends = Vec::new();
    for (half, t) in halves.into_iter().zip(&theirs) {
        ends.push(half.connect(dev, b.op, &their_info(t, room, b.op))?);
    }
    if b.op == OpKind::Send {
        // send_bw.c: one more for QP 0 right after connecting, before the one per QP
        tcp.perftest_keys(&mine[0])?;
    }
    for (k, t) in mine.iter().zip(&theirs) {
        let again = tcp.perftest_keys(k)?;
        if again != *t {
            return Err(ProbeError::Invalid(format!(
                "perftest described its QP twice, differently ({t:?}, then {again:?}): a perftest with more QPs \
                 than this side's -q {} does so; it does not exchange -q: give both sides the same",
                b.qps
            )));
        }
    }
    if b.op != OpKind::Send {
        // perftest's additional hand-shake "after moving qp to RTR": then its client posts
        // (SEND's is made before each size, after the server's receives are posted)
        tcp.perftest_keys(&mine[0])?;
    }
    Ok(Link {
        ends,
        infos,
        mine,
        theirs,
        room,
        opening,
    })
}

/// The report perftest's client would make of rdmaprobe's run (`print_report_bw`): the average
/// from the first post to the last completion and the message rate; the peak as perftest
/// defines it (0 where rdmaprobe has none: several QPs, or a run too long to trace, said in the
/// header); MB/s of 2^20 bytes, or Gb/s of 125000000 bytes with --report-gbits.
fn report_of(s: &BwSummary, size: u32, gbits: bool) -> BwReport {
    let unit = |mib_s: f64| if gbits { mib_s * 1_048_576.0 / 125e6 } else { mib_s };
    BwReport {
        size: u64::from(size),
        iters: s.messages,
        bw_peak: s.bw_peak_perftest_mib_s.map_or(0.0, unit),
        bw_avg: unit(s.bw_avg_mib_s),
        msg_rate: s.msg_rate_mpps,
    }
}

/// Runs `bw` against a perftest peer: connects (or waits for it), speaks its exchange; the
/// client runs the test and sends its figures as perftest's report, the server waits for the
/// client's end and takes its report; both close as perftest does.
pub(in crate::probe) fn run(plan: &Plan, b: &BwPlan, obs: &mut dyn Observer) -> Result<Report, ProbeError> {
    refuse(plan, b)?;
    let mut set = Setup::open(plan, b, obs)?;
    let &[kind] = &set.kinds[..] else {
        return Err(ProbeError::Usage("--peer perftest: one backend per run".into()));
    };
    let sizes = set.sizes.clone();
    // the buffers and the negotiation: the largest size (-a: 8 MiB, perftest's MAX_SIZE);
    // perftest's report is of the last
    let size = sizes.iter().copied().max().unwrap_or(8);
    let last = sizes.last().copied().unwrap_or(size);
    let before = counters::sample(&set.dev);
    let (cal, env) = session::calibrate(&set.dev, true)?;
    let mut warnings = set.warnings(plan, b, env.warnings())?;
    let server = matches!(plan.peer, PeerSpec::Listen { .. });
    let mut tcp = session::tcp_peer(plan, obs)?.ok_or_else(|| ProbeError::Invalid("no peer".into()))?;
    let mut link = connect(&mut tcp, (plan, b, &mut set), (kind, size), &mut warnings)?;
    let peer_addr = crate::oob::Rendezvous::peer_name(&tcp);
    let role = if server {
        Role::Server(peer_addr.clone())
    } else {
        Role::Client(peer_addr.clone())
    };
    let mut report = new_report(plan, b, &set, (kind, size), &link, role, (env, cal, warnings));
    obs.started(&report);
    let mine = each_size(
        &mut tcp,
        &mut link,
        (plan, b, &set, &before),
        (kind, server),
        &mut report,
    )?;
    if b.op == OpKind::Send {
        close_send(&mut tcp, plan, b, &link.mine[0])?;
        report.params["peer_tool"]["report_sent"] = serde_json::Value::Null;
        report.params["peer_tool"]["report"] = serde_json::Value::Null;
    } else {
        let theirs = end_one_sided(
            &mut tcp,
            (plan, b, sizes.len()),
            &link.mine[0],
            mine.unwrap_or_default(),
        )?;
        report.params["peer_tool"]["report_sent"] = json!(mine);
        report.params["peer_tool"]["report"] = json!(server.then_some(theirs));
        if server {
            check_report(&theirs, last, b.iters.saturating_mul(b.qps))?;
        }
    }
    // the rows once perftest's end is seen: those of a run whose peer was given another -n or
    // -a are not figures
    for i in 0..report.runs.len() {
        obs.finished(&report, i);
    }
    report.counters = counters::CounterDelta::since(before, &set.dev);
    Ok(report)
}

/// This side's part at each size in turn (one with `-s`; with `-a` 2 B to 8 MiB, as perftest's
/// `RUN_ALL`): the client runs and records each (perftest's WRITE and READ clients go from one
/// size to the next with nothing between; its SEND exchanges the key message before and after
/// each size); SEND's server posts its receives before the key (perftest's client posts as soon
/// as it has it) and takes the client's messages (`params.peer_tool.received`, one per size).
/// Returns the client's report of its last size, as perftest's client sends it.
fn each_size(
    tcp: &mut crate::oob::Peer,
    link: &mut Link,
    (plan, b, set, before): (&Plan, &BwPlan, &Setup, &Option<(&'static str, crate::model::Counters)>),
    (kind, server): (BackendKind, bool),
    report: &mut Report,
) -> Result<Option<BwReport>, ProbeError> {
    let send = b.op == OpKind::Send;
    let bundle = |ends: &[AnyEnd], e: crate::scenario::ScenarioError| {
        let states = ends.iter().map(|e| e.describe()).collect();
        diag::failed(diag::Bundle::of(plan, &set.dev, before, states), e.into())
    };
    let mut ends = vec![std::mem::take(&mut link.ends)];
    let (mut mine, mut received) = (None, Vec::new());
    for &size in &set.sizes {
        let posted = if send && server {
            let depth = crate::scenario::bw::recv_depth(b.rx_depth, b.tx_depth);
            crate::scenario::bw::perftest::prime(&mut ends[0], depth, b.iters)?
        } else {
            Vec::new()
        };
        if send {
            tcp.perftest_keys(&link.mine[0])
                .map_err(|e| crate::probe::measure::lat::perftest::went_on(e, size))?;
        }
        if !server {
            let p = params(plan, b, set, size);
            let out = bw_side(&mut ends, &p, true, &report.clock, &INTERRUPTED).map_err(|e| bundle(&ends[0], e))?;
            let r = client_result(b, kind, &p, summarize(&out, size, b.cq_mod, report.clock.hz));
            mine = Some(report_of(&r.summary, size, b.gbits));
            if let Runs::Bw(v) = &mut report.runs {
                v.push(r);
            }
        } else if send {
            let limits = ((size, b.iters), plan.stall);
            let got = crate::scenario::bw::perftest::serve(&mut ends[0], &posted, limits.0, limits.1, &INTERRUPTED)
                .map_err(|e| bundle(&ends[0], e))?;
            received.push(received_report(&got, size, b.gbits, report.clock.hz));
        }
        if send && b.sizes == Sizes::All {
            tcp.perftest_keys(&link.mine[0])?;
        }
    }
    link.ends = ends.pop().unwrap_or_default();
    if send && server {
        report.params["peer_tool"]["received"] = json!(received);
    }
    Ok(mine)
}

/// The end of WRITE and READ (`write_bw.c`, `read_bw.c`): the server waits in one more key
/// message for the client's run (`-n` messages per QP and size of up to 10 ms each beyond the
/// out-of-band timeout and the stall deadline), both exchange their reports (`mine`: the
/// server's is zeros, as perftest's passive server's) and close. Returns the peer's report.
fn end_one_sided(
    tcp: &mut crate::oob::Peer,
    (plan, b, sizes): (&Plan, &BwPlan, usize),
    key: &Key,
    mine: BwReport,
) -> Result<BwReport, ProbeError> {
    let messages = b.iters.saturating_mul(b.qps).saturating_mul(sizes as u64);
    let run = Duration::from_millis(messages.saturating_mul(10).min(u64::MAX / 2));
    tcp.set_timeout(plan.oob_timeout + plan.stall + run)?;
    tcp.perftest_keys(key).map_err(|e| match e {
        e @ crate::oob::OobError::Timeout { .. } => e.into(),
        e => ended_before_closing(e),
    })?;
    tcp.set_timeout(plan.oob_timeout)?;
    let theirs = tcp.perftest_bw_reports(&mine)?;
    tcp.perftest_keys(key)?;
    // no "done" of this side's: perftest reads none (6.06 writes its own and closes)
    if let Some(what) = tcp.perftest_await_end(plan.stall)? {
        return Err(ProbeError::Invalid(format!(
            "perftest did not end its test after its closing key message ({what})"
        )));
    }
    Ok(theirs)
}

/// The end of SEND (`send_bw.c`): no reports exchanged (each side prints its own); the closing
/// (`ctx_close_connection`: the key message, then perftest's end) when both are done: perftest's server
/// once it took its `-n` per QP, its client once its sends completed (and it computed its
/// report). Not within the stall deadline and 2 us a message, or the connection closed: the
/// peer was given a larger `-n` (a smaller one stalls the run first).
fn close_send(tcp: &mut crate::oob::Peer, plan: &Plan, b: &BwPlan, key: &Key) -> Result<(), ProbeError> {
    let n = b.iters.saturating_mul(b.qps);
    let wait = plan.stall + Duration::from_micros(n.saturating_mul(2).min(u64::MAX / 2));
    tcp.set_timeout(wait)?;
    let larger_n = |what: String| {
        ProbeError::Invalid(format!(
            "perftest did not end its test within {wait:?} of this side's end after -n {} messages per QP ({what}): \
             was it given a larger -n (perftest 6.06 does not exchange it: give both sides the same)?",
            b.iters
        ))
    };
    match tcp.perftest_keys(key) {
        Err(crate::oob::OobError::Timeout { .. }) => return Err(larger_n("no closing from it".into())),
        Err(e) => return Err(ended_before_closing(e)),
        Ok(_) => {}
    };
    // no "done" of this side's: perftest reads none (6.06 writes its own and closes), and a
    // perftest server waiting for the next key of its -a would take it for one and end as if
    // all went well
    // the key message perftest's SEND exchanges after each size of its -a is its closing's:
    // its end must follow
    match tcp.perftest_await_end(plan.stall)? {
        None => Ok(()),
        Some(what) => Err(ProbeError::Invalid(format!(
            "perftest did not end its test after its closing key message ({what}): was it given -a (perftest 6.06 \
             does not exchange it: give it to both or neither)?"
        ))),
    }
}

/// perftest's connection ended (closed, reset) where its closing key message was due: its
/// process exited before its report. Its own output says why; one cause seen on this project's
/// emulated guests is perftest's clock check (`get_cpu_mhz`: a linear fit of its cycle counter
/// against `gettimeofday` with r^2 under 0.9 gives "Can't produce a report" and exit 1), which
/// no flag of perftest turns off.
fn ended_before_closing(e: crate::oob::OobError) -> ProbeError {
    ProbeError::Invalid(format!(
        "perftest ended before its closing key message ({e}): its process exited without its report; its own \
         output says why (a failed completion, or its clock check: \"Correlation coefficient r^2 ... < 0.9\" \
         then \"Can't produce a report\", seen under emulation)"
    ))
}

/// This side's figures of what it received, as perftest's `ib_send_bw` server computes its
/// report (`print_report_bw` with no peak: the messages over the time from the first poll that
/// found receives to the last message), in the run's unit.
fn received_report(r: &crate::scenario::bw::perftest::Received, size: u32, gbits: bool, hz: f64) -> BwReport {
    let secs = r.last.saturating_sub(r.first) as f64 / hz;
    let per_s = |x: f64| if secs > 0.0 { x / secs } else { 0.0 };
    let bytes = per_s(r.messages as f64 * f64::from(size));
    BwReport {
        size: u64::from(size),
        iters: r.messages,
        bw_peak: 0.0,
        bw_avg: if gbits { bytes / 125e6 } else { bytes / 1_048_576.0 },
        msg_rate: per_s(r.messages as f64) / 1e6,
    }
}

/// A perftest client's report that does not describe the run this side was given is an error
/// naming both (perftest 6.06 exchanges neither -s nor -n: a client given others ran another
/// test into this side's buffer).
fn check_report(r: &BwReport, size: u32, messages: u64) -> Result<(), ProbeError> {
    if r.size != u64::from(size) || r.iters != messages {
        return Err(ProbeError::Invalid(format!(
            "perftest's client reported {} messages of {} B, this side was given {messages} of {size} B \
             (-n x -q, -s; with -a the last size): perftest 6.06 does not exchange them; give both sides the same \
             (-a to both or neither)",
            r.iters, r.size
        )));
    }
    Ok(())
}

/// The run's parameters: the plan's, between two processes (no resizing).
fn params(plan: &Plan, b: &BwPlan, set: &Setup, size: u32) -> BwParams {
    BwParams {
        op: b.op,
        size,
        iters: b.iters,
        tx_depth: b.tx_depth,
        rx_depth: b.rx_depth,
        postlist: b.postlist,
        cq_mod: b.cq_mod,
        inline: b.op.carries_payload() && size <= set.inline_limit,
        bidirectional: false,
        stall: plan.stall,
        window: b.window,
        min_duration: Duration::ZERO,
        no_peak: b.no_peak,
        unreliable: false,
    }
}

/// The report before the run: a bandwidth run's params, the QPs as exchanged, and the peer.
fn new_report(
    plan: &Plan,
    b: &BwPlan,
    set: &Setup,
    (kind, size): (BackendKind, u32),
    link: &Link,
    role: Role,
    (env, clock, warnings): (crate::report::env::Fingerprint, crate::clock::Calibration, Vec<String>),
) -> Report {
    let server = matches!(role, Role::Server(_));
    let shown = |q: &QpInfo, vaddr: u64| QpInfo {
        addr: vaddr,
        len: link.room,
        ..*q
    };
    let qps: Vec<serde_json::Value> = (link.infos.iter().zip(&link.mine).zip(&link.theirs))
        .map(|((info, mine), theirs)| {
            let remote = their_info(theirs, link.room, b.op);
            session::qp_addrs_json(
                kind.as_str(),
                &shown(info, mine.vaddr),
                &shown(&remote, theirs.vaddr),
                session::psn_lid_gid_unused(false, &set.dev, kind),
            )
        })
        .collect();
    let o = &link.opening;
    let program = match b.op {
        OpKind::Read => "ib_read_bw",
        OpKind::Send => "ib_send_bw",
        _ => "ib_write_bw",
    };
    let peer_tool = json!({
            "name": "perftest", "version": o.version, "program": program, "cycle_buffer": o.cycle_buffer,
            "cache_line": o.cache_line, "mtu": o.mtu, "peer_mtu": o.peer_mtu,
            "peer_qpns": link.theirs.iter().map(|k| k.qpn).collect::<Vec<_>>(),
            "peer_out_reads": link.theirs[0].out_reads,
            "timed": if server { 0 } else { b.iters * b.qps },
            "negotiated": o.negotiated.is_some(),
            "describe": describe(o, (program, b, size), server),
    });
    let mut params = json!({
        "scenario": "bw", "window_ms": b.window.as_micros() as f64 / 1e3, "min_duration_ms": 0,
        "inline_limit": set.inline_limit, "port_active_mtu_bytes": session::active_mtu(&set.dev),
        "model_exec": set.dev.is_model().then_some("after_post"), "op": b.op.as_str(), "iters": b.iters,
        "tx_depth": b.tx_depth, "rx_depth": serde_json::Value::Null, "postlist": b.postlist, "cq_mod": b.cq_mod,
        "qps_per_thread": b.qps, "threads": 1, "bidirectional": false, "backends": [kind.as_str()],
        "db_mode": set.mode.as_str(), "loopback": false, "path": crate::probe::report::path_json(&plan.path),
        "huge_pages": plan.huge_pages, "mr_per_qp": true, "run_infinitely": false, "duration_s": null,
        "events": false, "transport": plan.transport.as_str(), "rdma_cm": null, "qps": qps,
        "role": role.as_str(),
        "peer": match &role { Role::Loopback => None, Role::Client(p) | Role::Server(p) => Some(p.clone()) },
    });
    params["peer_tool"] = peer_tool;
    Report {
        plan: plan.clone(),
        role,
        device: set.dev.name(),
        provider: set.dev.provider(),
        is_model: set.dev.is_model(),
        backends: vec![kind],
        env,
        clock,
        warnings,
        params,
        runs: Runs::Bw(Vec::new()),
        intervals: Vec::new(),
        short_runs: Vec::new(),
        end_error: None,
        counters: None,
        regions: link
            .ends
            .iter()
            .enumerate()
            .map(|(j, e)| crate::probe::Region {
                name: format!("{}.t0.q{j}", kind.as_str()),
                placement: e.placement(),
            })
            .collect(),
    }
}

/// The header's line about the peer.
fn describe(o: &Opening, (program, b, size): (&str, &BwPlan, u32), server: bool) -> String {
    let what = if server && b.op == OpKind::Send {
        "the server, took the client's SENDs (each checked to be -s long) and times them as perftest's server \
         does (from the first poll that found receives to the last message); ib_send_bw exchanges no report: \
         perftest's client prints its own"
            .to_string()
    } else if server {
        "the server, measured nothing (perftest's client posts, the device answers); perftest's report follows \
         the run"
            .to_string()
    } else if b.op == OpKind::Send {
        "the client, measured its run as the table says; ib_send_bw exchanges no report: perftest's server prints \
         its own (from its first receive to its last)"
            .to_string()
    } else {
        format!(
            "the client, measured its run as the table says and sent perftest its figures as perftest computes \
             them (peak, average, message rate; the peak as 0 where the table has none{}), which perftest's \
             server prints",
            if b.qps > 1 {
                ": rdmaprobe takes perftest's peak of one QP only"
            } else {
                ": -N, or a run too long to trace"
            }
        )
    };
    let flags = if o.negotiated.is_some() {
        "it negotiated -s, -n and -q with this side"
    } else {
        "it does not exchange -s, -n and -q: give both sides the same"
    };
    let sizes = if b.sizes == Sizes::All {
        format!("each size from 2 B to {size} B in turn (-a)")
    } else {
        format!("{size} B")
    };
    format!(
        "perftest {} ({program}, {} QP(s), {} messages of {sizes} per QP; {flags}); this side, {what}",
        o.version, b.qps, b.iters
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_initiator_depth_is_the_power_of_two_within_the_peers() {
        let got: Vec<u8> = [0, 1, 2, 3, 5, 6, 8, 15, 16, 1000]
            .into_iter()
            .map(initiator_depth)
            .collect();
        assert_eq!(got, [1, 1, 2, 2, 4, 4, 8, 8, 16, 128]);
    }

    #[test]
    fn the_buffer_holds_a_cycle_buffer_past_the_address_given() {
        // perftest's WRITE client goes up to a cycle buffer past the address this side gave
        assert_eq!(buffer_len(64, 4096, 4096), (8192, 4096));
        assert_eq!(buffer_len(65536, 4096, 4096), (131072, 65536));
        // never below what the run's own sizes take
        assert_eq!(buffer_len(8, 4096, 16384), (16384, 4096));
    }

    #[test]
    fn perftests_report_of_a_run_is_in_its_units() {
        let s = BwSummary {
            messages: 5000,
            bytes: 5000 * 65536,
            seconds: 0.01,
            msg_rate_mpps: 0.5,
            bw_avg_mib_s: 31250.0,
            bw_avg_gbit_s: 262.144,
            bw_peak_perftest_mib_s: Some(40000.0),
            bw_peak_perftest_missing: None,
            bw_peak_window_mib_s: 0.0,
            bw_min_window_mib_s: 0.0,
            window_ms: 1.0,
            window_step_mib_s: 0.0,
            window_requested_ms: 1.0,
            window_mib_s: Vec::new(),
            messages_received: None,
            event_waits: None,
            cpu_pct: None,
            steal_ms: None,
            longest_turn_ms: None,
            longest_turn_at_ms: None,
            involuntary_switches: None,
            empty_windows: 0,
            empty_windows_within_a_turn: 0,
            long_turns_overflowed: false,
        };
        let r = report_of(&s, 65536, false);
        assert_eq!(
            (r.size, r.iters, r.bw_peak, r.bw_avg, r.msg_rate),
            (65536, 5000, 40000.0, 31250.0, 0.5)
        );
        // Gb/s as perftest's format_factor: 125000000 bytes per second
        let g = report_of(&s, 65536, true);
        assert!((g.bw_avg - 31250.0 * 1_048_576.0 / 125e6).abs() < 1e-9);
        assert!((g.bw_peak - 40000.0 * 1_048_576.0 / 125e6).abs() < 1e-9);
        // no peak (several QPs): 0, as the header says
        let none = BwSummary {
            bw_peak_perftest_mib_s: None,
            ..s
        };
        assert_eq!(report_of(&none, 65536, false).bw_peak, 0.0);
    }

    #[test]
    fn write_read_and_send_are_taken_and_the_rest_refused_by_name() {
        use crate::probe::{PeerTool, Scenario};
        let plan = |b: &BwPlan| Plan {
            peer_tool: PeerTool::Perftest,
            backends: Backends::Only(BackendKind::Direct),
            ..Plan::loopback(Scenario::Bw(b.clone()))
        };
        for op in [OpKind::Write, OpKind::Read, OpKind::Send] {
            let b = BwPlan::new(op, 4096);
            assert!(refuse(&plan(&b), &b).is_ok(), "{op:?}");
        }
        let refused = |b: &BwPlan| match refuse(&plan(b), b) {
            Err(ProbeError::Usage(m)) => m,
            other => panic!("{other:?}"),
        };
        for (op, named) in [
            (OpKind::SendImm, "--send-with-imm"),
            (OpKind::WriteImm, "--write-with-imm"),
            (OpKind::FetchAdd, "bw atomic"),
        ] {
            let m = refused(&BwPlan::new(op, 8));
            assert!(m.contains(named) && m.contains("not in this version"), "{op:?}: {m}");
        }
        // perftest's bandwidth tests take -n of 5 or more
        let mut few = BwPlan::new(OpKind::Write, 4096);
        few.iters = 4;
        assert!(refused(&few).contains("-n 4"));
        few.iters = 5;
        assert!(refuse(&plan(&few), &few).is_ok());
        let mut b = BwPlan::new(OpKind::Send, 4096);
        b.sizes = Sizes::All;
        assert!(refuse(&plan(&b), &b).is_ok(), "send -a");
    }

    #[test]
    fn the_receivers_figures_are_perftests_servers() {
        use crate::scenario::bw::perftest::Received;
        // 1000 messages of 64 KiB over 1e9 ticks at 1 GHz: 1 s
        let r = Received {
            messages: 1000,
            first: 5_000_000_000,
            last: 6_000_000_000,
        };
        let mb = received_report(&r, 65536, false, 1e9);
        assert_eq!((mb.size, mb.iters, mb.bw_peak), (65536, 1000, 0.0));
        assert!((mb.bw_avg - 62.5).abs() < 1e-9, "{}", mb.bw_avg);
        assert!((mb.msg_rate - 0.001).abs() < 1e-12, "{}", mb.msg_rate);
        // Gb/s as perftest's format_factor: 125000000 bytes per second
        let gb = received_report(&r, 65536, true, 1e9);
        assert!((gb.bw_avg - 65_536_000.0 / 125e6).abs() < 1e-9, "{}", gb.bw_avg);
        // no time between the first and the last: no figure, not infinity
        let none = Received { last: r.first, ..r };
        assert_eq!(received_report(&none, 65536, false, 1e9).bw_avg, 0.0);
    }

    /// perftest exiting before its closing key message (here: a peer that closes the connection
    /// at once) is told from a perftest still running (one that never answers: a larger -n).
    #[test]
    fn a_perftest_that_exits_before_its_closing_is_not_taken_for_a_larger_n() {
        use crate::probe::Scenario;
        let key = Key {
            lid: 0,
            out_reads: 1,
            qpn: 0xab,
            psn: 0x1ba694,
            rkey: 2,
            vaddr: 0x1000,
            srqn: 0,
            gid: None,
        };
        let b = BwPlan::new(OpKind::Send, 4096);
        let plan = Plan {
            stall: Duration::from_secs(1),
            ..Plan::loopback(Scenario::Bw(b.clone()))
        };
        for exits in [true, false] {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
            let port = l.local_addr().expect("its address").port();
            let peer = std::thread::spawn(move || {
                let (s, _) = l.accept().expect("rdmaprobe's connection");
                if !exits {
                    std::thread::sleep(Duration::from_secs(3));
                }
                drop(s);
            });
            let mut tcp = crate::oob::Peer::connect("127.0.0.1", port, Duration::from_secs(5)).expect("connected");
            let e = close_send(&mut tcp, &plan, &b, &key)
                .expect_err("no closing came")
                .to_string();
            drop(tcp);
            peer.join().expect("the peer's thread");
            if exits {
                assert!(e.contains("perftest ended before its closing key message"), "{e}");
                assert!(e.contains("Can't produce a report") && !e.contains("larger -n"), "{e}");
            } else {
                assert!(
                    e.contains("was it given a larger -n") && e.contains("no closing from it"),
                    "{e}"
                );
            }
        }
    }

    #[test]
    fn a_client_report_of_another_size_or_count_is_an_error() {
        let r = BwReport {
            size: 65536,
            iters: 5000,
            ..Default::default()
        };
        assert!(check_report(&r, 65536, 5000).is_ok());
        for (size, n) in [(4096, 5000), (65536, 20000)] {
            let e = check_report(&r, size, n).expect_err("a mismatch").to_string();
            assert!(e.contains("give both sides the same"), "{e}");
        }
    }
}
