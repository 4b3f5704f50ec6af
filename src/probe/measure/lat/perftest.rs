//! `lat write --peer perftest`: rdmaprobe as the client or the server of an unmodified
//! `ib_write_lat` (perftest before 6.28: Debian 12's 6.06), one backend per run (a perftest
//! server serves one connection). perftest's exchange (`crate::oob::perftest`) in its order for
//! a WRITE latency test: version, cycle buffer, cache line, MTU; then the key message four times
//! (twice before the QP is connected, twice after: perftest's `ctx_hand_shake` calls), then the
//! ping-pong on perftest's conventions (`crate::scenario::lat::perftest`); no closing exchange.

use super::{check, open};
use crate::backend::setup::{AnyEnd, Dev, HalfEnd, INLINE};
use crate::backend::{BackendKind, OpKind};
use crate::mlx5::sq::DbMode;
use crate::oob::perftest::{Key, Opening};
use crate::oob::QpInfo;
use crate::probe::check::{counters, diag};
use crate::probe::measure::session;
use crate::probe::report::{Region, Report, Role, Runs};
use crate::probe::{Backends, LatPlan, Observer, PeerSpec, Plan, ProbeError, Scenario, Sizes, INTERRUPTED};
use crate::scenario::lat::LatParams;
use crate::scenario::runner::{figures_ns, finish, Blocks};
use serde_json::json;

/// What a perftest peer cannot do with rdmaprobe in this version, refused before anything is
/// opened (exit 2).
fn refuse(plan: &Plan, l: &LatPlan) -> Result<(), ProbeError> {
    let no = |what: &str| Err(ProbeError::Usage(format!("--peer perftest: {what}")));
    if l.op != OpKind::Write {
        return no(&format!(
            "lat {} against ib_{}_lat is not in this version; lat write against ib_write_lat is",
            l.op.cli_name(),
            l.op.cli_name()
        ));
    }
    if plan.transport != crate::backend::Transport::Rc {
        return no("ib_write_lat's default connection, RC, only in this version (no -c)");
    }
    if l.iters < 2 {
        return no("-n 1: each side times the round trips after the first WRITE each way: give -n 2 or more");
    }
    if !matches!(l.sizes, Sizes::One(_)) {
        return no("one size (-s) in this version, not -a");
    }
    if l.events || l.duration.is_some() || l.intervals {
        return no("-e, -D and --hdr are not in this version");
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
/// peer writes) in the form the GID index calls for.
fn our_key(info: &QpInfo, gid: bool) -> Key {
    Key {
        lid: info.lid,
        out_reads: 1,
        qpn: info.qpn,
        psn: info.psn,
        rkey: info.rkey,
        vaddr: info.addr + info.len / 2,
        srqn: 0,
        gid: gid.then_some(info.gid),
    }
}

/// The peer's QP and buffer as rdmaprobe's ends take them: a WRITE goes to `addr + len / 2`,
/// so the buffer is described as starting `room` bytes before the address perftest gave, with
/// `room` bytes after it (perftest's `BUFF_SIZE(size, cycle_buffer)`).
fn their_info(k: &Key, room: u64) -> QpInfo {
    QpInfo {
        qpn: k.qpn,
        psn: k.psn,
        lid: k.lid,
        gid: k.gid.unwrap_or([0; 16]),
        addr: k.vaddr.wrapping_sub(room),
        rkey: k.rkey,
        len: 2 * room,
    }
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

/// perftest's exchange for a WRITE latency test on `tcp`, this side's QP made (`kind` on
/// `dev`, its buffer for `size`) and connected between the second and third key messages; a
/// smaller MTU of the peer's is taken (said in `warnings`).
fn connect(
    tcp: &mut crate::oob::Peer,
    (plan, dev): (&Plan, &mut Dev),
    (kind, size, mode): (BackendKind, u32, DbMode),
    warnings: &mut Vec<String>,
) -> Result<Link, ProbeError> {
    let ours_mtu = plan.path.mtu.or(session::active_mtu(dev)).unwrap_or(4096).min(4096);
    // perftest's cycle buffer is the page size (sysconf); both sides keep the larger
    // SAFETY: sysconf only reads a value of the system; it takes no pointer
    let page = u32::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let opening = tcp.perftest_open(page, 64, ours_mtu)?;
    if opening.mtu < ours_mtu {
        dev.opts_mut().path.mtu = Some(opening.mtu);
        warnings.push(format!(
            "path MTU {} B: perftest's ({} B) is smaller than this side's and both use the smaller",
            opening.mtu, opening.peer_mtu
        ));
    }
    let half = HalfEnd::new(dev, kind, OpKind::Write, session::buffer_len(&[size]), mode)?;
    let info = half.info(dev)?;
    // perftest uses the GID form when its GID index is set (RoCE, or -x), as this side does
    let gid = dev.verbs_parts().and_then(|(_, _, g)| g).is_some();
    let mine = our_key(&info, gid);
    let theirs = tcp.perftest_keys(&mine)?;
    let again = tcp.perftest_keys(&mine)?;
    if again != theirs {
        return Err(ProbeError::Peer(format!(
            "perftest described its QP twice, differently ({theirs:?}, then {again:?})"
        )));
    }
    let room = u64::from(size.max(opening.cycle_buffer));
    let remote = their_info(&theirs, room);
    let end = half.connect(dev, OpKind::Write, &remote)?;
    // after connecting: perftest's two more hand-shakes; the last tells its peer this side's QP
    // takes its WRITEs (in RTS, the buffer zeroed)
    tcp.perftest_keys(&mine)?;
    tcp.perftest_keys(&mine)?;
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

/// Runs `lat write` against a perftest peer: connects (or waits for it), speaks its exchange,
/// runs its ping-pong and returns this side's rows (both sides time their own round trips, as
/// perftest's two ends do).
pub(in crate::probe) fn run(plan: &Plan, l: &LatPlan, obs: &mut dyn Observer) -> Result<Report, ProbeError> {
    refuse(plan, l)?;
    let mut l = l.clone();
    // perftest's latency tests have no warm-up: every one of -n iterations is measured
    l.warmup = 0;
    l.blocks = 1;
    let sizes = check(plan, &l, obs)?;
    let size = sizes[0];
    let (mut dev, kinds) = open(plan, &l, &sizes, obs)?;
    let &[kind] = &kinds[..] else {
        return Err(ProbeError::Usage("--peer perftest: one backend per run".into()));
    };
    let mode = session::direct_mode(plan.db_mode);
    let before = counters::sample(&dev);
    let (cal, env) = session::calibrate(&dev, true)?;
    let mut warnings = env.warnings();
    let server = matches!(plan.peer, PeerSpec::Listen { .. });
    let mut tcp = session::tcp_peer(plan, obs)?.ok_or_else(|| ProbeError::Invalid("no peer".into()))?;
    let mut link = connect(&mut tcp, (plan, &mut dev), (kind, size, mode), &mut warnings)?;
    let inline_limit = l.inline_size.unwrap_or(INLINE);
    let p = LatParams {
        op: OpKind::Write,
        size,
        iters: l.iters,
        warmup: 0,
        inline: size <= inline_limit,
        stall: plan.stall,
    };
    let peer_addr = crate::oob::Rendezvous::peer_name(&tcp);
    let role = if server {
        Role::Server(peer_addr.clone())
    } else {
        Role::Client(peer_addr.clone())
    };
    let mut params = params(plan, &l, &dev, (kind, mode, inline_limit), &link);
    params["role"] = role.as_str().into();
    params["peer"] = peer_addr.into();
    params["peer_tool"] = peer_json(&link.opening, server, &link.theirs, l.iters);
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
    let end = &mut link.end;
    let samples = crate::scenario::lat::perftest::write_side(end, server, &p, &INTERRUPTED).map_err(|e| {
        diag::failed(
            diag::Bundle::of(plan, &dev, &before, vec![end.describe()]),
            ProbeError::from(e),
        )
    })?;
    let mut blocks = Blocks::default();
    blocks.add(figures_ns(&p, &samples.rtt, &report.clock));
    let r = finish(kind, &p, &samples, blocks, &report.clock)?;
    if let Runs::Lat(v) = &mut report.runs {
        v.push(r);
    }
    obs.finished(&report, 0);
    report.counters = counters::CounterDelta::since(before, &dev);
    Ok(report)
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
        "scenario": "lat", "op": "write", "iters": l.iters, "warmup": 0, "blocks": 1, "events": false,
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
fn peer_json(o: &Opening, server: bool, theirs: &Key, iters: u64) -> serde_json::Value {
    json!({
        "name": "perftest",
        "version": o.version,
        "program": "ib_write_lat",
        "cycle_buffer": o.cycle_buffer,
        "cache_line": o.cache_line,
        "mtu": o.mtu,
        "peer_mtu": o.peer_mtu,
        "peer_qpn": theirs.qpn,
        "describe": describe(o, server, iters),
    })
}

/// The header's line about the peer.
fn describe(o: &Opening, server: bool, iters: u64) -> String {
    format!(
        "perftest {} (ib_write_lat, its conventions: the server writes first, {iters} WRITEs each way, no warm-up; \
         it does not exchange -s and -n: a peer given others stalls the run); \
         this side, the {}, timed {} round trips ({})",
        o.version,
        if server { "server" } else { "client" },
        iters - 1,
        if server {
            "its opening WRITE's answer waits for the client's start: not a round trip, not in the table"
        } else {
            "its last WRITE has no answer"
        }
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
        let k = our_key(&info, false);
        assert_eq!(k.vaddr, 0x10_0000 + 4096);
        assert_eq!(k.gid, None);
        assert_eq!(our_key(&info, true).gid, Some([7; 16]));
        // the peer's address is where rdmaprobe's end writes: addr + len / 2
        let r = their_info(&k, 4096);
        assert_eq!(r.addr + r.len / 2, k.vaddr);
        assert_eq!((r.qpn, r.psn, r.rkey), (0x12, 0x34, 9));
    }
}
