//! `lat write|send|read|atomic --peer perftest`: rdmaprobe as the client or the server of an
//! unmodified `ib_write_lat`, `ib_send_lat`, `ib_read_lat` or `ib_atomic_lat` (Debian 12's
//! perftest 6.06, or 6.28 and later with their negotiation), one backend per run (a perftest
//! server serves one connection).
//! perftest's exchange (`crate::oob::perftest`) in its order for each test (its `main`s'
//! `ctx_hand_shake` calls): version, cycle buffer, cache line, MTU; then the key message
//! - WRITE, READ, atomics: twice before the QP is connected, twice after;
//! - SEND: once before, twice after, once more after the receives are posted;
//!
//! then the test on perftest's conventions (`crate::scenario::lat::perftest`), and its closing
//! (`ctx_close_connection`: the key message once more, then its end), which `ib_write_lat` does
//! not have. The server of READ and atomics runs nothing: it goes to the closing at once and
//! waits there for the client's end.

use super::{check, open};
use crate::backend::setup::{AnyEnd, Dev, HalfEnd, INLINE};
use crate::backend::{BackendKind, OpKind};
use crate::clock::Calibration;
use crate::mlx5::sq::DbMode;
use crate::model::Counters;
use crate::oob::perftest::{Key, Negotiation, Opening};
use crate::oob::{Peer, QpInfo};
use crate::probe::check::{counters, diag};
use crate::probe::measure::session;
use crate::probe::report::{Region, Report, Role, Runs};
use crate::probe::{Backends, LatPlan, Observer, PeerSpec, Plan, ProbeError, Scenario, Sizes, INTERRUPTED};
use crate::scenario::lat::LatParams;
use crate::scenario::runner::{figures_ns, finish, Blocks, LatResult};
use serde_json::json;

/// What a perftest peer cannot do with rdmaprobe in this version, refused before anything is
/// opened (exit 2).
fn refuse(plan: &Plan, l: &LatPlan) -> Result<(), ProbeError> {
    let no = |what: &str| Err(ProbeError::Usage(format!("--peer perftest: {what}")));
    if matches!(l.op, OpKind::WriteImm | OpKind::SendImm) {
        return no("--write-with-imm and --send-with-imm are not in this version");
    }
    if plan.transport != crate::backend::Transport::Rc
        && !(plan.transport == crate::backend::Transport::Ud && l.op == OpKind::Send)
    {
        return no("RC, or UD for send, only in this version (perftest's -c UC is not)");
    }
    if l.iters < 2 {
        return no(
            "-n 1: a ping-pong's follower times the round trips after the first message each way: give -n 2 or more",
        );
    }
    if l.sizes == Sizes::All && l.op.is_atomic() {
        return no("-a: perftest's atomic test moves 8 bytes and refuses -a (\"Message size cannot be changed\")");
    }
    if l.events || l.duration.is_some() || l.intervals {
        return no("-e, -D and --hdr are not in this version");
    }
    if l.anatomy {
        return no("--anatomy: perftest does not stamp its turnaround (nor send one): rdmaprobe on both ends");
    }
    if plan.backends == Backends::All {
        return no(
            "a perftest server serves one connection: one backend per run (--backend verbs, wr or direct; \
             harness/perftest-peer.sh runs each in turn)",
        );
    }
    Ok(())
}

/// The key message describing this side's QP `info` (its buffer's second half is where the
/// peer writes or reads) in the form the GID index calls for; `out_reads`: the READs and atomics
/// this side's QP takes at once as their responder (perftest's peer sets its own initiator
/// depth to it; 1 for WRITE and SEND, as perftest sends).
pub(in crate::probe) fn our_key(info: &QpInfo, gid: bool, out_reads: u32) -> Key {
    Key {
        lid: info.lid,
        out_reads,
        qpn: info.qpn,
        psn: info.psn,
        rkey: info.rkey,
        vaddr: info.addr + info.len / 2,
        srqn: 0,
        gid: gid.then_some(info.gid),
    }
}

/// The peer's QP and buffer as rdmaprobe's ends take them for `op`: a WRITE or an atomic goes
/// to `addr + len / 2`, so the buffer is described as starting `room` bytes before the address
/// perftest gave, with `room` bytes after it (perftest's `BUFF_SIZE(size, cycle_buffer)`); a
/// READ reads from `addr`, so there it starts at the address given.
pub(in crate::probe) fn their_info(k: &Key, room: u64, op: OpKind) -> QpInfo {
    QpInfo {
        qpn: k.qpn,
        psn: k.psn,
        lid: k.lid,
        gid: k.gid.unwrap_or([0; 16]),
        addr: if op == OpKind::Read {
            k.vaddr
        } else {
            k.vaddr.wrapping_sub(room)
        },
        rkey: k.rkey,
        len: 2 * room,
    }
}

/// perftest's opening exchanges (version, cycle buffer, cache line, MTU) with this side's page
/// size as its cycle buffer (perftest's `sysconf`; both keep the larger), a 64-byte cache line
/// and its path MTU; a smaller MTU of the peer's is taken for this side's QPs (said in
/// `warnings`).
pub(in crate::probe) fn opening(
    tcp: &mut crate::oob::Peer,
    plan: &Plan,
    dev: &mut Dev,
    mine: &Negotiation,
    warnings: &mut Vec<String>,
) -> Result<Opening, ProbeError> {
    let ours_mtu = plan.path.mtu.or(session::active_mtu(dev)).unwrap_or(4096).min(4096);
    // SAFETY: sysconf only reads a value of the system; it takes no pointer
    let page = u32::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let opening = tcp.perftest_open((page, 64, ours_mtu), mine)?;
    if opening.mtu < ours_mtu {
        dev.opts_mut().path.mtu = Some(opening.mtu);
        warnings.push(format!(
            "path MTU {} B: perftest's ({} B) is smaller than this side's and both use the smaller",
            opening.mtu, opening.peer_mtu
        ));
    }
    Ok(opening)
}

/// Whether this side's keys carry the GID: perftest uses the GID form when its GID index is
/// set (RoCE, or -x), as this side does.
pub(in crate::probe) fn gid_form(dev: &Dev) -> bool {
    dev.verbs_parts().and_then(|(_, _, g)| g).is_some()
}

/// The key's `out_reads` for `op`: the READs and atomics this side's QPs answer at once (the
/// device's `max_qp_rd_atom`, model0's own limit) for READ and atomics, 1 otherwise, as
/// perftest sends.
pub(in crate::probe) fn out_reads(dev: &Dev, op: OpKind) -> Result<u32, ProbeError> {
    if op.carries_payload() {
        return Ok(1);
    }
    rd_atom(dev)
}

/// The READs and atomics this side's QPs take at once: the device's limit (up to 16, as
/// rdmaprobe's QPs are made), model0's own.
fn rd_atom(dev: &Dev) -> Result<u32, ProbeError> {
    Ok(match dev.verbs_parts() {
        Some((ctx, _, _)) => u32::from(crate::backend::setup::rd_atomic(ctx)?),
        None => u32::from(crate::backend::setup::MAX_RD_ATOMIC),
    })
}

/// What this side tells a perftest of 6.28 or later in its negotiation: the test as perftest's
/// own parameters would say it (`op`; latency or bandwidth: `bw`; -s, -n, -q; --report_gbits),
/// perftest's defaults for the rest (by iterations, its default -D, RC, no -R), the READs and
/// atomics its QPs take at once, and no mlx5dv capability (rdmaprobe's QPs use no enhanced
/// reorder, so perftest turns its own off).
pub(in crate::probe) fn negotiation(
    dev: &Dev,
    (op, bw): (OpKind, bool),
    (size, iters, qps): (u32, u64, u64),
    gbits: bool,
) -> Result<Negotiation, ProbeError> {
    // perftest's VerbType and AtomicType (a test other than atomics leaves it 0: its zeroed struct)
    let verb = match op {
        OpKind::Send => 0,
        OpKind::SendImm => 1,
        OpKind::Write => 2,
        OpKind::WriteImm => 3,
        OpKind::Read => 4,
        OpKind::FetchAdd | OpKind::CmpSwap => 5,
    };
    let atomic = u64::from(op == OpKind::FetchAdd);
    let mut fields = [0u64; 17];
    fields[2] = verb;
    fields[3] = u64::from(bw);
    fields[4] = atomic;
    // report_fmt: GBS 0, MBS 1
    fields[6] = u64::from(!gbits);
    fields[7] = u64::from(size);
    fields[8] = iters;
    fields[10] = qps;
    fields[11] = u64::from(crate::oob::perftest::DEF_DURATION);
    Ok(Negotiation {
        fields,
        max_qp_rd_atom: rd_atom(dev)?,
        mlx5dv_comp_mask: 0,
    })
}

/// perftest's own check after the first key message (`ctx_check_gid_compatibility`): both GIDs
/// IPv4-mapped (RoCE v2 over IPv4) or neither; perftest stops otherwise, and so does this side,
/// naming both.
pub(in crate::probe) fn gid_types_match(mine: &Key, theirs: &Key) -> Result<(), ProbeError> {
    let kind = |k: &Key| crate::oob::perftest::v4_mapped(&k.gid.unwrap_or([0; 16]));
    if kind(mine) == kind(theirs) {
        return Ok(());
    }
    let say = |v4: bool| {
        if v4 {
            "IPv4-mapped (RoCE v2 over IPv4)"
        } else {
            "not IPv4-mapped"
        }
    };
    Err(ProbeError::Invalid(format!(
        "the GID types differ, as perftest checks them: this side's GID is {}, perftest's {}: give both sides a \
         GID of the same IP version (-x)",
        say(kind(mine)),
        say(kind(theirs))
    )))
}

/// This side connected to perftest: the end, both key messages, what the opening settled.
struct Link {
    end: AnyEnd,
    info: QpInfo,
    mine: Key,
    theirs: Key,
    remote: QpInfo,
    /// The bytes perftest's buffer holds from the address it gave.
    room: u64,
    opening: Opening,
}

/// perftest's exchange for a latency test of `op` on `tcp`, this side's QP made (`kind` on
/// `dev`, its buffer for `size`) and connected between the key messages as perftest's `main`
/// does (module text); for SEND the receives are posted before the last one. A smaller MTU of
/// the peer's is taken, and a responder depth for READs and atomics smaller than this side's
/// initiator depth is said (both in `warnings`).
fn connect(
    tcp: &mut crate::oob::Peer,
    (plan, dev): (&Plan, &mut Dev),
    (kind, op, size, mode): (BackendKind, OpKind, u32, DbMode),
    (iters, all): (u64, bool),
    warnings: &mut Vec<String>,
) -> Result<Link, ProbeError> {
    let mut mine = negotiation(dev, (op, false), (size, iters, 1), false)?;
    if all {
        // perftest's -a: its test_method RUN_ALL (1), its size MAX_SIZE, the largest of -a
        // (over UD the MTU: perftest clamps its size to it before it negotiates)
        mine.fields[0] = 1;
    }
    if plan.transport == crate::backend::Transport::Ud {
        // perftest's connection_type: RC 0, UC 1, UD 2
        mine.fields[1] = 2;
    }
    let opening = opening(tcp, plan, dev, &mine, warnings)?;
    let half = HalfEnd::new(dev, kind, op, session::buffer_len(&[size]), mode)?;
    let info = half.info(dev)?;
    let depth = out_reads(dev, op)?;
    let mine = our_key(&info, gid_form(dev), depth);
    let theirs = tcp.perftest_keys(&mine)?;
    gid_types_match(&mine, &theirs)?;
    if op != OpKind::Send {
        let again = tcp.perftest_keys(&mine)?;
        if again != theirs {
            return Err(ProbeError::Peer(format!(
                "perftest described its QP twice, differently ({theirs:?}, then {again:?})"
            )));
        }
    }
    if !op.carries_payload() && theirs.out_reads < depth {
        warnings.push(format!(
            "perftest's QP answers {} READs or atomics at once, this side's issues up to {depth}: one at a time \
             here, as a latency test posts, within both",
            theirs.out_reads
        ));
    }
    let room = u64::from(size.max(opening.cycle_buffer));
    let remote = their_info(&theirs, room, op);
    let mut end = half.connect(dev, op, &remote)?;
    // after connecting: perftest's two more hand-shakes; the last tells its peer this side's QP
    // takes its messages (in RTS, the buffer zeroed, for SEND the receives posted)
    tcp.perftest_keys(&mine)?;
    tcp.perftest_keys(&mine)?;
    if op == OpKind::Send {
        crate::scenario::lat::perftest::prime(&mut end).map_err(ProbeError::from)?;
        tcp.perftest_keys(&mine)?;
    }
    Ok(Link {
        end,
        info,
        mine,
        theirs,
        remote,
        room,
        opening,
    })
}

/// The end of perftest's test, and what it says of the peer's -n. A ping-pong's two ends finish
/// together, so perftest's end must come within the stall deadline of this side's: a perftest
/// given a larger -n is still waiting for a message (or for the answer to one), and that is an
/// error naming -n, not a run. `ib_write_lat` has no closing exchange: its end is its process
/// closing the connection. The others close with `ctx_close_connection`: the key message once
/// more, then perftest's end: 6.06 writes "done" with its NUL and closes the connection, 6.17
/// and later close it; neither reads anything after the key, so this side writes nothing and
/// waits for that end within the stall deadline (a perftest that sends another key instead, or
/// waits for one, has more to run: its -a). perftest ends after its report, which sorts its samples (and with -U or -H prints
/// a line each): its end may take the stall deadline and 2 us a sample. The server of READ and
/// atomics waits here for the client's whole run: up to `-n` iterations of 1 ms each beyond the
/// out-of-band timeout and the stall deadline.
fn close(tcp: &mut crate::oob::Peer, plan: &Plan, l: &LatPlan, mine: &Key) -> Result<(), ProbeError> {
    let ping_pong = matches!(l.op, OpKind::Write | OpKind::Send);
    let end = plan.stall + std::time::Duration::from_micros(l.iters.saturating_mul(2).min(u64::MAX / 2));
    let larger_n = || {
        ProbeError::Invalid(format!(
            "perftest did not end its test within {end:?} of this side's end after -n {} messages: was it given a \
             larger -n{} (perftest 6.06 does not exchange -n or -a: give both sides the same), or is it still printing \
             its report (-U, -H: a larger --stall-secs gives it longer)?",
            l.iters,
            if l.sizes == Sizes::All { "" } else { " or -a" }
        ))
    };
    if l.op == OpKind::Write {
        return match tcp.perftest_await_close(end)? {
            true => Ok(()),
            false => Err(larger_n()),
        };
    }
    let run = std::time::Duration::from_millis(l.iters.min(u64::MAX / 2));
    tcp.set_timeout(if ping_pong {
        end
    } else {
        plan.oob_timeout + plan.stall + run
    })?;
    match tcp.perftest_keys(mine) {
        Err(crate::oob::OobError::Timeout { .. }) if ping_pong => return Err(larger_n()),
        r => r?,
    };
    // no "done" of this side's: perftest reads none (6.06 writes its own and closes), and a
    // perftest server waiting for the next key of its -a would take it for one and end as if
    // all went well
    // the key message perftest's SEND exchanges between two sizes of its -a is its closing's:
    // its end must follow
    match tcp.perftest_await_end(plan.stall)? {
        None => Ok(()),
        Some(what) => Err(ProbeError::Invalid(format!(
            "perftest did not end its test after its closing key message ({what}): was it given -a, or a larger -n \
             (perftest 6.06 does not exchange them: give -a to both or neither, and the same -n)?"
        ))),
    }
}

/// Runs `lat` against a perftest peer: connects (or waits for it), speaks its exchange, runs
/// its test and returns this side's rows (both sides of a ping-pong time their own round trips,
/// as perftest's two ends do; the server of READ and atomics has none).
pub(in crate::probe) fn run(plan: &Plan, l: &LatPlan, obs: &mut dyn Observer) -> Result<Report, ProbeError> {
    refuse(plan, l)?;
    let mut l = l.clone();
    // perftest's latency tests have no warm-up: every one of -n iterations is measured
    l.warmup = 0;
    l.blocks = 1;
    let mut sizes = check(plan, &l, obs)?;
    let all = l.sizes == Sizes::All;
    let (mut dev, kinds) = open(plan, &l, &sizes, obs)?;
    // UD: -a up to the MTU, as perftest's (said in a warning); a -s above it is refused below
    let ud_note = session::ud_checks(&dev, plan, &mut sizes, all)?;
    if let (Some(_), Sizes::One(s)) = (&ud_note, l.sizes) {
        // perftest 6.06 clamps a UD size to the MTU with -a only: a -s above it it refuses
        // (the sizes are the MTU now)
        let mtu = sizes.iter().copied().max().unwrap_or(0);
        return Err(ProbeError::Usage(format!(
            "--peer perftest: -c UD -s {s}: above the port's MTU ({mtu} bytes on {}), which perftest refuses over \
             UD (\"Max message size in UD cannot be greater than MTU\"): give -s {mtu} or less",
            dev.name()
        )));
    }
    // the buffers hold the largest (with -a perftest's MAX_SIZE, 8 MiB: its buffers' too)
    let size = sizes.iter().copied().max().unwrap_or(8);
    let &[kind] = &kinds[..] else {
        return Err(ProbeError::Usage("--peer perftest: one backend per run".into()));
    };
    let mode = session::direct_mode(plan.db_mode);
    let before = counters::sample(&dev);
    let (cal, env) = session::calibrate(&dev, true)?;
    let mut warnings = env.warnings();
    warnings.extend(ud_note);
    let server = matches!(plan.peer, PeerSpec::Listen { .. });
    let mut tcp = session::tcp_peer(plan, obs)?.ok_or_else(|| ProbeError::Invalid("no peer".into()))?;
    let mut link = connect(
        &mut tcp,
        (plan, &mut dev),
        (kind, l.op, size, mode),
        (l.iters, all),
        &mut warnings,
    )?;
    let inline_limit = l.inline_size.unwrap_or(INLINE);
    let peer_addr = crate::oob::Rendezvous::peer_name(&tcp);
    let role = if server {
        Role::Server(peer_addr.clone())
    } else {
        Role::Client(peer_addr.clone())
    };
    let mut params = params(plan, &l, &dev, (kind, mode, inline_limit), &link);
    params["role"] = role.as_str().into();
    params["peer"] = peer_addr.into();
    params["peer_tool"] = peer_json(&link.opening, (l.op, server), &link.theirs, l.iters);
    let region = Region {
        name: kind.as_str().into(),
        placement: link.end.placement(),
    };
    let mut report = Report {
        plan: Plan {
            scenario: Scenario::Lat(l.clone()),
            ..plan.clone()
        },
        role,
        device: dev.name(),
        provider: dev.provider(),
        is_model: dev.is_model(),
        backends: vec![kind],
        env,
        clock: cal,
        warnings,
        params,
        runs: Runs::Lat(Vec::new()),
        intervals: Vec::new(),
        short_runs: Vec::new(),
        end_error: None,
        counters: None,
        regions: vec![region],
    };
    obs.started(&report);
    let sides = (kind, server, inline_limit);
    let rows = each_size(
        &mut tcp,
        &mut link,
        (plan, &l, &dev, &before),
        sides,
        &sizes,
        &report.clock,
    )?;
    // perftest's end first: the rows of a run whose peer was given another -n are not figures
    close(&mut tcp, plan, &l, &link.mine)?;
    for (i, r) in rows.into_iter().enumerate() {
        if let Runs::Lat(v) = &mut report.runs {
            v.push(r);
        }
        obs.finished(&report, i);
    }
    report.counters = counters::CounterDelta::since(before, &dev);
    Ok(report)
}

/// Runs perftest's test at each size in turn (one with `-s`, 2 B to 8 MiB with `-a`) on the one
/// connection and returns this side's rows (none for the passive server of READ and atomics).
fn each_size(
    tcp: &mut Peer,
    link: &mut Link,
    (plan, l, dev, before): (&Plan, &LatPlan, &Dev, &Option<(&'static str, Counters)>),
    (kind, server, inline_limit): (BackendKind, bool, u32),
    sizes: &[u32],
    clock: &Calibration,
) -> Result<Vec<LatResult>, ProbeError> {
    // UD: each receive's length counts the 40-byte GRH area before the message
    let grh = if plan.transport == crate::backend::Transport::Ud {
        40
    } else {
        0
    };
    let mut rows = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        let p = LatParams {
            op: l.op,
            size,
            iters: l.iters,
            warmup: 0,
            inline: l.op.carries_payload() && size <= inline_limit,
            stall: plan.stall,
            anatomy: false,
        };
        if i > 0 && l.op == OpKind::Send {
            // perftest's -a: before each size after the first, its receives posted, a key
            // exchange (this side's receives, of the largest size, are still posted: each one
            // taken was posted again); a perftest without -a ends here instead
            tcp.perftest_keys(&link.mine).map_err(|e| went_on(e, size))?;
        }
        if crate::scenario::lat::perftest::timed(l.op, server, l.iters) == 0 {
            continue;
        }
        let end = &mut link.end;
        let samples = crate::scenario::lat::perftest::side(end, (server, grh), &p, &INTERRUPTED).map_err(|e| {
            diag::failed(
                diag::Bundle::of(plan, dev, before, vec![end.describe()]),
                ProbeError::from(e),
            )
        })?;
        let mut blocks = Blocks::default();
        blocks.add(figures_ns(&p, &samples.rtt, clock));
        rows.push(finish(kind, &p, &samples, blocks, clock)?);
    }
    Ok(rows)
}

/// A key exchange before size `size` of this side's `-a` that failed: a perftest without `-a`
/// ends where this side goes on (its closing "done", or the connection closed).
pub(in crate::probe) fn went_on(e: crate::oob::OobError, size: u32) -> ProbeError {
    ProbeError::Invalid(format!(
        "perftest ended where this side's -a goes on to {size} B ({e}): was it given no -a (perftest 6.06 does \
         not exchange it: give -a to both or neither)?"
    ))
}

/// The JSON's `params` as a latency run's (the role, the peer and `peer_tool` set after).
fn params(
    plan: &Plan,
    l: &LatPlan,
    dev: &Dev,
    (kind, mode, inline_limit): (BackendKind, DbMode, u32),
    k: &Link,
) -> serde_json::Value {
    // the addresses as exchanged: where each side lets the other write
    let shown = |q: &QpInfo, vaddr: u64, len: u64| QpInfo { addr: vaddr, len, ..*q };
    let qps = vec![session::qp_addrs_json(
        kind.as_str(),
        &shown(&k.info, k.mine.vaddr, k.info.len / 2),
        &shown(&k.remote, k.theirs.vaddr, k.room),
        session::psn_lid_gid_unused(false, dev, kind),
    )];
    json!({
        "scenario": "lat", "op": l.op.as_str(), "iters": l.iters, "warmup": 0, "blocks": 1, "events": false,
        "backends": [kind.as_str()], "db_mode": mode.as_str(), "inline_limit": inline_limit,
        "port_active_mtu_bytes": session::active_mtu(dev), "loopback": false,
        "model_delay_ns": l.model_delay_ns, "qp_max_inline_data": INLINE, "qp_max_inline_data_source": "requested",
        "model_exec": dev.is_model().then_some("after_post"), "duration_s": null,
        "path": crate::probe::report::path_json(&dev.path()), "huge_pages": plan.huge_pages, "mr_per_qp": true,
        "transport": plan.transport.as_str(), "rdma_cm": null, "qps": qps, "rows_from": null,
    })
}

/// The JSON's `params.peer_tool`: which perftest, what the exchange settled, how its samples
/// relate to this side's.
fn peer_json(o: &Opening, (op, server): (OpKind, bool), theirs: &Key, iters: u64) -> serde_json::Value {
    json!({
        "name": "perftest",
        "version": o.version,
        "program": program(op),
        "cycle_buffer": o.cycle_buffer,
        "cache_line": o.cache_line,
        "mtu": o.mtu,
        "peer_mtu": o.peer_mtu,
        "peer_qpn": theirs.qpn,
        "peer_out_reads": theirs.out_reads,
        "timed": crate::scenario::lat::perftest::timed(op, server, iters),
        "negotiated": o.negotiated.is_some(),
        "describe": describe(o, (op, server), iters),
    })
}

/// The perftest program of `op`'s latency test.
fn program(op: OpKind) -> &'static str {
    match op {
        OpKind::Write => "ib_write_lat",
        OpKind::Send => "ib_send_lat",
        OpKind::Read => "ib_read_lat",
        _ => "ib_atomic_lat",
    }
}

/// The header's line about the peer.
fn describe(o: &Opening, (op, server): (OpKind, bool), iters: u64) -> String {
    use crate::scenario::lat::perftest::{leads, timed};
    let name = if op.is_atomic() {
        "atomic".to_string()
    } else {
        op.as_str().to_uppercase()
    };
    let conventions = if op.carries_payload() {
        format!(
            "the {} sends the first {name}, {iters} each way, no warm-up",
            if leads(op, true) { "server" } else { "client" }
        )
    } else {
        format!("the client's {iters} {name}s one at a time, the server passive, no warm-up")
    };
    let side = if server { "server" } else { "client" };
    let n = timed(op, server, iters);
    let lead = leads(op, server);
    let what = if n == 0 {
        "nothing: the device answers READs and atomics; it waited for the client's end".to_string()
    } else if !op.carries_payload() {
        format!("{n} round trips")
    } else if lead {
        format!(
            "{n} round trips (its opening {name}'s answer waits for perftest's loop to start, which first measures \
             the CPU clock: not a round trip, not in the table)"
        )
    } else {
        format!("{n} round trips (its last {name} has no answer)")
    };
    let flags = if o.negotiated.is_some() {
        "it negotiated -s and -n with this side"
    } else {
        "it does not exchange -s, -a, -n and -c: give both sides the same"
    };
    format!(
        "perftest {} ({}, its conventions: {conventions}; {flags}); this side, the {side}, timed {what}",
        o.version,
        program(op)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_point_at_the_second_half_and_back() {
        let info = QpInfo {
            qpn: 0x12,
            psn: 0x34,
            lid: 1,
            gid: [7; 16],
            addr: 0x10_0000,
            rkey: 9,
            len: 8192,
        };
        let k = our_key(&info, false, 1);
        assert_eq!(k.vaddr, 0x10_0000 + 4096);
        assert_eq!(k.gid, None);
        assert_eq!(our_key(&info, true, 1).gid, Some([7; 16]));
        assert_eq!(our_key(&info, false, 16).out_reads, 16);
        // the peer's address is where rdmaprobe's end writes, or an atomic goes: addr + len / 2
        for op in [OpKind::Write, OpKind::FetchAdd, OpKind::CmpSwap] {
            let r = their_info(&k, 4096, op);
            assert_eq!(r.addr + r.len / 2, k.vaddr);
        }
        // and a READ reads from addr, with room for the size after it
        let r = their_info(&k, 4096, OpKind::Read);
        assert_eq!((r.addr, r.len / 2), (k.vaddr, 4096));
        assert_eq!((r.qpn, r.psn, r.rkey), (0x12, 0x34, 9));
    }

    #[test]
    fn gid_types_are_checked_as_perftest_checks_them() {
        let key = |gid: Option<[u8; 16]>| Key {
            lid: 0,
            out_reads: 1,
            qpn: 1,
            psn: 1,
            rkey: 1,
            vaddr: 0,
            srqn: 0,
            gid,
        };
        let mut v4 = [0u8; 16];
        v4[10..].copy_from_slice(&[0xff, 0xff, 192, 0, 2, 1]);
        let mut v6 = [0u8; 16];
        v6[..2].copy_from_slice(&[0xfe, 0x80]);
        assert!(gid_types_match(&key(Some(v4)), &key(Some(v4))).is_ok());
        assert!(gid_types_match(&key(Some(v6)), &key(None)).is_ok());
        let e = gid_types_match(&key(Some(v4)), &key(Some(v6)))
            .expect_err("types differ")
            .to_string();
        assert!(
            e.contains("this side's GID is IPv4-mapped (RoCE v2 over IPv4), perftest's not"),
            "{e}"
        );
    }

    #[test]
    fn the_negotiation_struct_holds_the_device_attributes_as_libibverbs_lays_them_out() {
        use crate::oob::perftest::NEGOTIATION_BYTES;
        // perftest's struct: the attributes at 80, the mlx5dv mask right after them at 312
        assert_eq!(std::mem::size_of::<crate::sys::ibv_device_attr>(), 312 - 80);
        assert_eq!(
            std::mem::offset_of!(crate::sys::ibv_device_attr, max_qp_rd_atom),
            crate::oob::perftest::negotiate_offsets().1
        );
        assert_eq!(NEGOTIATION_BYTES, 320);
    }

    #[test]
    fn every_latency_test_of_perftest_is_taken_and_what_it_cannot_do_is_refused_by_name() {
        use crate::probe::{Backends, PeerTool, Scenario};
        let plan = |l: &LatPlan| Plan {
            peer_tool: PeerTool::Perftest,
            backends: Backends::Only(BackendKind::Direct),
            ..Plan::loopback(Scenario::Lat(l.clone()))
        };
        for op in [
            OpKind::Write,
            OpKind::Send,
            OpKind::Read,
            OpKind::FetchAdd,
            OpKind::CmpSwap,
        ] {
            let l = LatPlan::new(op, 8);
            assert!(refuse(&plan(&l), &l).is_ok(), "{op:?}");
        }
        let refused = |l: &LatPlan, p: &Plan| match refuse(p, l) {
            Err(ProbeError::Usage(m)) => m,
            other => panic!("{other:?}"),
        };
        let l = LatPlan::new(OpKind::SendImm, 8);
        assert!(refused(&l, &plan(&l)).contains("--send-with-imm"));
        let mut l = LatPlan::new(OpKind::Send, 8);
        l.sizes = Sizes::All;
        assert!(refuse(&plan(&l), &l).is_ok(), "send -a");
        let mut atomic = LatPlan::new(OpKind::FetchAdd, 8);
        atomic.sizes = Sizes::All;
        assert!(refused(&atomic, &plan(&atomic)).contains("refuses -a"));
        l.sizes = Sizes::One(8);
        // UD for send only; UC not
        use crate::backend::Transport;
        let over = |t: Transport, l: &LatPlan| Plan {
            transport: t,
            ..plan(l)
        };
        assert!(refuse(&over(Transport::Ud, &l), &l).is_ok());
        let w = LatPlan::new(OpKind::Write, 8);
        assert!(refuse(&over(Transport::Ud, &w), &w)
            .unwrap_err()
            .to_string()
            .contains("UD for send"));
        assert!(refuse(&over(Transport::Uc, &l), &l)
            .unwrap_err()
            .to_string()
            .contains("-c UC"));
        l.iters = 1;
        assert!(refused(&l, &plan(&l)).contains("-n 2 or more"));
        l.iters = 1000;
        let all = Plan {
            backends: Backends::All,
            ..plan(&l)
        };
        assert!(refused(&l, &all).contains("one backend per run"));
    }
}
