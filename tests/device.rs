//! Device tests: real verbs on a real device (Soft-RoCE `rxe0` in CI's guest, or a ConnectX).
//! All are `#[ignore]`d; run them with `--ignored` and `RDMAPROBE_TEST_DEVICE=<dev>` (and
//! `RDMAPROBE_TEST_GID_INDEX` on RoCE). Without the variable they fail rather than pass.

mod common;

use common::{device, Pair, Side, DEADLINE};
use rdmaprobe::sys;
use rdmaprobe::verbs::device::GidType;
use rdmaprobe::verbs::{
    Completion, ConnectOpts, Context, Cq, Kind, Mr, MrAccess, Op, Pd, Qp, QpCaps, SendFlags, VerbsError, WrBatch,
};

const NEEDS: &str = "needs an RDMA device: RDMAPROBE_TEST_DEVICE (harness/softroce.sh runs these)";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Api {
    /// `ibv_post_send`
    PostSend,
    /// `ibv_wr_start` .. `ibv_wr_complete`
    Wr,
}

fn post(side: &mut Side, api: Api, wr_id: u64, op: Op, off: usize, len: usize, flags: SendFlags) {
    let Side { qp, mr, .. } = side;
    let sge = mr.sge(off, len).expect("sge");
    match api {
        Api::PostSend => qp.post_send(wr_id, op, &[sge], flags).expect("ibv_post_send"),
        Api::Wr => qp
            .wr_post(&[WrBatch {
                wr_id,
                op,
                sges: &[sge],
                flags,
            }])
            .expect("ibv_wr_complete"),
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn do_send_recv(api: Api, inline: bool, imm: Option<u32>) {
    let mut p = Pair::new(api == Api::Wr, |_| {});
    let len = if inline { 48 } else { 4000 };
    let data = pattern(len, 7);
    p.a.mr.write(0, &data).unwrap();
    {
        let Side { qp, mr, .. } = &mut p.b;
        qp.post_recv(77, &[mr.sge(1024, 8192).unwrap()]).expect("post_recv");
    }
    let op = match imm {
        Some(v) => Op::SendImm(v),
        None => Op::Send,
    };
    post(
        &mut p.a,
        api,
        5,
        op,
        0,
        len,
        SendFlags {
            signaled: true,
            inline,
            ..Default::default()
        },
    );
    let s = p.a.cq.wait_ok(DEADLINE).expect("send completion");
    assert_eq!(s.wr_id, 5);
    assert_eq!(s.opcode, sys::IBV_WC_SEND);
    let r = p.b.cq.wait_ok(DEADLINE).expect("recv completion");
    assert_eq!(r.wr_id, 77);
    assert_eq!(r.byte_len as usize, len);
    assert_eq!(r.qp_num, p.b.qp.qpn());
    assert_eq!(r.imm, imm);
    let mut got = vec![0u8; len];
    p.b.mr.read(1024, &mut got).unwrap();
    assert_eq!(got, data);
}

fn do_write(api: Api, with_imm: bool) {
    let mut p = Pair::new(api == Api::Wr, |_| {});
    let len = 12_000; // several MTUs
    let data = pattern(len, 3);
    p.a.mr.write(100, &data).unwrap();
    let remote = p.b.mr.remote(2048);
    if with_imm {
        let Side { qp, mr, .. } = &mut p.b;
        qp.post_recv(9, &[mr.sge(0, 16).unwrap()]).unwrap();
    }
    let op = if with_imm {
        Op::WriteImm(remote, 0xfeed_beef)
    } else {
        Op::Write(remote)
    };
    post(&mut p.a, api, 11, op, 100, len, SendFlags::SIGNALED);
    let c = p.a.cq.wait_ok(DEADLINE).expect("write completion");
    assert_eq!((c.wr_id, c.opcode), (11, sys::IBV_WC_RDMA_WRITE));
    if with_imm {
        let r = p.b.cq.wait_ok(DEADLINE).expect("write-with-imm receive completion");
        assert_eq!(r.imm, Some(0xfeed_beef));
        assert_eq!(r.opcode, sys::IBV_WC_RECV_RDMA_WITH_IMM);
        assert_eq!(r.byte_len as usize, len);
    }
    let mut got = vec![0u8; len];
    p.b.mr.read(2048, &mut got).unwrap();
    assert_eq!(got, data);
    // Bytes around the target are untouched.
    let mut edge = [0u8; 2];
    p.b.mr.read(2047, &mut edge[..1]).unwrap();
    p.b.mr.read(2048 + len, &mut edge[1..]).unwrap();
    assert_eq!(edge, [0, 0]);
}

fn do_read(api: Api) {
    let mut p = Pair::new(api == Api::Wr, |_| {});
    let len = 9_000;
    let data = pattern(len, 11);
    p.b.mr.write(512, &data).unwrap();
    let remote = p.b.mr.remote(512);
    post(&mut p.a, api, 21, Op::Read(remote), 4096, len, SendFlags::SIGNALED);
    let c = p.a.cq.wait_ok(DEADLINE).expect("read completion");
    assert_eq!((c.wr_id, c.opcode), (21, sys::IBV_WC_RDMA_READ));
    let mut got = vec![0u8; len];
    p.a.mr.read(4096, &mut got).unwrap();
    assert_eq!(got, data);
}

fn do_fetch_add(api: Api) {
    let mut p = Pair::new(api == Api::Wr, |_| {});
    p.b.mr.write(64, &1000u64.to_ne_bytes()).unwrap();
    let remote = p.b.mr.remote(64);
    for (i, expect_old) in [(0u64, 1000u64), (1, 1007)] {
        post(
            &mut p.a,
            api,
            30 + i,
            Op::FetchAdd { remote, add: 7 },
            8 * i as usize,
            8,
            SendFlags::SIGNALED,
        );
        let c = p.a.cq.wait_ok(DEADLINE).expect("fetch-add completion");
        assert_eq!(c.opcode, sys::IBV_WC_FETCH_ADD);
        assert_eq!(p.a.mr.read_u64(8 * i as usize).unwrap(), expect_old);
    }
    assert_eq!(p.b.mr.read_u64(64).unwrap(), 1014);
}

fn do_cmp_swap(api: Api) {
    let mut p = Pair::new(api == Api::Wr, |_| {});
    p.b.mr.write(128, &42u64.to_ne_bytes()).unwrap();
    let remote = p.b.mr.remote(128);
    // Matching compare: swapped.
    post(
        &mut p.a,
        api,
        40,
        Op::CmpSwap {
            remote,
            compare: 42,
            swap: 99,
        },
        0,
        8,
        SendFlags::SIGNALED,
    );
    let c = p.a.cq.wait_ok(DEADLINE).expect("cas completion");
    assert_eq!(c.opcode, sys::IBV_WC_COMP_SWAP);
    assert_eq!(p.a.mr.read_u64(0).unwrap(), 42);
    assert_eq!(p.b.mr.read_u64(128).unwrap(), 99);
    // Mismatching compare: not swapped, old value returned.
    post(
        &mut p.a,
        api,
        41,
        Op::CmpSwap {
            remote,
            compare: 42,
            swap: 5,
        },
        8,
        8,
        SendFlags::SIGNALED,
    );
    p.a.cq.wait_ok(DEADLINE).expect("cas completion");
    assert_eq!(p.a.mr.read_u64(8).unwrap(), 99);
    assert_eq!(p.b.mr.read_u64(128).unwrap(), 99);
}

macro_rules! both_apis {
    ($($name:ident => $body:expr;)*) => {
        mod post_send {
            use super::*;
            $( #[test] #[ignore = "needs an RDMA device: RDMAPROBE_TEST_DEVICE"] fn $name() { let api = Api::PostSend; $body(api) } )*
        }
        mod wr_api {
            use super::*;
            $( #[test] #[ignore = "needs an RDMA device: RDMAPROBE_TEST_DEVICE"] fn $name() { let api = Api::Wr; $body(api) } )*
        }
    };
}

both_apis! {
    send_recv => |api| do_send_recv(api, false, None);
    send_recv_inline => |api| do_send_recv(api, true, None);
    send_with_imm => |api| do_send_recv(api, false, Some(0x0102_0304));
    rdma_write => |api| do_write(api, false);
    rdma_write_with_imm => |api| do_write(api, true);
    rdma_read => do_read;
    fetch_and_add => do_fetch_add;
    compare_and_swap => do_cmp_swap;
}

#[test]
#[ignore = "needs an RDMA device: RDMAPROBE_TEST_DEVICE"]
fn device_port_and_gids() {
    let _ = NEEDS;
    let ctx = Context::open(&device()).expect("open");
    let info = ctx.query().expect("query device");
    assert_eq!(info.name, device());
    assert!(info.phys_port_cnt >= 1);
    assert_ne!(info.provider, "unknown", "provider library not found by dladdr");
    let port = ctx.query_port(common::port()).expect("query port");
    assert!(port.is_active(), "port {} is {}", port.port, port.state);
    assert!(port.active_mtu >= 256);
    let gids = ctx.gids(port.port, 8).expect("gids");
    assert!(!gids.is_empty(), "no GID entries");
    if port.is_ethernet() {
        let v2: Vec<_> = gids.iter().filter(|g| g.gid_type == GidType::RoceV2).collect();
        assert!(!v2.is_empty(), "RoCE port without RoCE v2 GIDs: {gids:?}");
        let pick = common::gid_index(&ctx, &port).expect("a GID index");
        let e = gids
            .iter()
            .find(|g| g.index == pick as u32)
            .expect("picked index exists");
        assert!(e.ipv4().is_some(), "picked GID {} is not IPv4-mapped", e.gid);
    }
    // A port the device does not have is an error naming the port, not a panic.
    let bad = ctx.query_port(info.phys_port_cnt + 1);
    match bad {
        Err(VerbsError::Verb { verb, ctx, .. }) => {
            assert_eq!(verb, "ibv_query_port");
            assert_eq!(ctx.port, Some(info.phys_port_cnt + 1));
        }
        Err(e) => panic!("unexpected error kind: {e}"),
        Ok(p) => panic!("port {} should not exist, got {p:?}", info.phys_port_cnt + 1),
    }
}

#[test]
#[ignore = "needs an RDMA device: RDMAPROBE_TEST_DEVICE"]
fn connect_reaches_rts_and_reports_grants() {
    let p = Pair::new(false, |_| {});
    assert_eq!(p.a.qp.state().unwrap(), "RTS");
    assert_eq!(p.b.qp.state().unwrap(), "RTS");
    // What the driver granted at creation covers the request; any difference is in `granted`.
    let g = p.a.qp.granted_caps();
    let r = p.a.qp.requested_caps();
    assert!(g.max_send_wr >= r.max_send_wr && g.max_recv_wr >= r.max_recv_wr);
    assert!(g.max_inline_data >= r.max_inline_data);
    for d in &p.granted {
        assert_ne!(d.requested, d.granted, "{d:?}");
    }
    eprintln!("granted differently on {}: {:?}", p.ctx.name(), p.granted);
}

#[test]
#[ignore = "needs an RDMA device: RDMAPROBE_TEST_DEVICE"]
fn roce_connect_without_gid_index_is_refused() {
    let ctx = Context::open(&device()).unwrap();
    let port = ctx.query_port(common::port()).unwrap();
    if !port.is_ethernet() {
        eprintln!("InfiniBand port: LID addressing needs no GID; nothing to refuse");
        return;
    }
    let pd = Pd::new(&ctx).unwrap();
    let cq = Cq::new(&ctx, 16).unwrap();
    let mut qp = Qp::new_rc(&pd, &cq, &cq, QpCaps::default(), false).unwrap();
    let me = qp.endpoint(&port, None).unwrap();
    let opts = ConnectOpts {
        gid_index: None,
        ..Default::default()
    };
    let e = qp.connect(&port, &opts, &me).unwrap_err();
    assert!(e.to_string().contains("GID index is required"), "{e}");
}

#[test]
#[ignore = "needs an RDMA device: RDMAPROBE_TEST_DEVICE"]
fn write_to_wrong_rkey_is_remote_access_error() {
    for api in [Api::PostSend, Api::Wr] {
        let mut p = Pair::new(api == Api::Wr, |_| {});
        let mut remote = p.b.mr.remote(0);
        remote.rkey ^= 0x00ff_ff00;
        post(&mut p.a, api, 99, Op::Write(remote), 0, 64, SendFlags::SIGNALED);
        let c: Vec<Completion> = p.a.cq.wait(1, DEADLINE).expect("a completion");
        let e = c[0].check(p.ctx.name()).unwrap_err();
        assert_eq!(e.wc_status(), Some(sys::IBV_WC_REM_ACCESS_ERR), "{api:?}: {e}");
        let s = e.to_string();
        assert!(s.contains("remote access error") && s.contains("wr_id 99"), "{s}");
        assert!(s.contains(&format!("QP {:#x}", p.a.qp.qpn())), "{s}");
        assert_eq!(p.a.qp.state().unwrap(), "ERR");
    }
}

#[test]
#[ignore = "needs an RDMA device: RDMAPROBE_TEST_DEVICE"]
fn send_without_receive_is_rnr_retry_exceeded() {
    let mut p = Pair::new(false, |o| {
        o.rnr_retry = 0;
        o.min_rnr_timer = 1;
    });
    post(&mut p.a, Api::PostSend, 3, Op::Send, 0, 32, SendFlags::SIGNALED);
    let c = p.a.cq.wait(1, DEADLINE).expect("a completion");
    let e = c[0].check(p.ctx.name()).unwrap_err();
    assert_eq!(e.wc_status(), Some(sys::IBV_WC_RNR_RETRY_EXC_ERR), "{e}");
    assert!(e.to_string().contains("RNR retry counter exceeded"), "{e}");
}

#[test]
#[ignore = "needs an RDMA device: RDMAPROBE_TEST_DEVICE"]
fn oversize_inline_and_out_of_range_sge_are_refused_before_the_verb() {
    let mut p = Pair::new(false, |_| {});
    let max_inline = p.a.qp.granted_caps().max_inline_data as usize;
    let Side { qp, mr, .. } = &mut p.a;
    let sge = mr.sge(0, max_inline + 1).unwrap();
    let e = qp
        .post_send(
            1,
            Op::Send,
            &[sge],
            SendFlags {
                inline: true,
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(e.to_string().contains("max_inline_data"), "{e}");
    assert!(mr.sge(common::MR_LEN - 4, 8).is_err());
}

/// Builds one full set of resources and drops the handles in `order` (indices into
/// [ctx, pd, cq_a, cq_b, mr, qp_a, qp_b]); returns the ledger for inspection.
fn build_and_drop(order: [usize; 7]) -> std::sync::Arc<rdmaprobe::verbs::Ledger> {
    let ctx = Context::open(&device()).unwrap();
    let ledger = ctx.ledger();
    let pd = Pd::new(&ctx).unwrap();
    let cq_a = Cq::new(&ctx, 16).unwrap();
    let cq_b = Cq::new(&ctx, 16).unwrap();
    let mr = Mr::new(&pd, 8192, MrAccess::LOCAL_WRITE, false).unwrap();
    let qp_a = Qp::new_rc(&pd, &cq_a, &cq_b, QpCaps::default(), false).unwrap();
    let qp_b = Qp::new_rc(&pd, &cq_b, &cq_a, QpCaps::default(), true).unwrap();
    assert_eq!(ledger.live_total(), 7);
    let mut slots: Vec<Option<Box<dyn std::any::Any>>> = vec![
        Some(Box::new(ctx)),
        Some(Box::new(pd)),
        Some(Box::new(cq_a)),
        Some(Box::new(cq_b)),
        Some(Box::new(mr)),
        Some(Box::new(qp_a)),
        Some(Box::new(qp_b)),
    ];
    for (step, i) in order.iter().enumerate() {
        drop(slots[*i].take());
        // The parent of anything still held stays alive: the context lives while any handle does.
        let held = slots.iter().filter(|s| s.is_some()).count();
        if held > 0 {
            assert_eq!(ledger.live(Kind::Context), 1, "after step {step}");
        }
    }
    ledger
}

#[test]
#[ignore = "needs an RDMA device: RDMAPROBE_TEST_DEVICE"]
fn teardown_in_any_order_leaks_nothing() {
    let orders = [
        [6, 5, 4, 3, 2, 1, 0], // children first (reverse creation)
        [0, 1, 2, 3, 4, 5, 6], // parents' handles first
        [2, 0, 5, 1, 4, 6, 3],
        [4, 3, 0, 6, 1, 2, 5],
    ];
    for order in orders {
        let ledger = build_and_drop(order);
        assert_eq!(ledger.live_total(), 0, "order {order:?} leaked");
        assert!(ledger.failures().is_empty(), "order {order:?}: {:?}", ledger.failures());
        assert_eq!(ledger.created_count(Kind::Qp), 2);
        assert_eq!(ledger.created_count(Kind::Cq), 2);
    }
    // A connected pair with work outstanding in the receive queue tears down cleanly too.
    let ledger = {
        let mut p = Pair::new(true, |_| {});
        let Side { qp, mr, .. } = &mut p.b;
        qp.post_recv(1, &[mr.sge(0, 64).unwrap()]).unwrap();
        p.ctx.ledger()
    };
    assert_eq!(ledger.live_total(), 0);
    assert!(ledger.failures().is_empty(), "{:?}", ledger.failures());
}

#[test]
#[ignore = "needs an RDMA device: RDMAPROBE_TEST_DEVICE"]
fn thread_domain_parent_pd_or_typed_refusal() {
    let ctx = Context::open(&device()).unwrap();
    let ledger = ctx.ledger();
    {
        let pd = Pd::new(&ctx).unwrap();
        match pd.with_thread_domain() {
            Ok(parent) => {
                let cq = Cq::new(&ctx, 16).unwrap();
                let qp = Qp::new_rc(&parent, &cq, &cq, QpCaps::default(), false).expect("QP in a parent domain");
                assert!(qp.qpn() > 0);
            }
            Err(VerbsError::Verb { verb, source, ctx: c }) => {
                // Providers without thread domains refuse with a typed error naming the verb.
                assert!(verb == "ibv_alloc_td" || verb == "ibv_alloc_parent_domain", "{verb}");
                assert_eq!(c.device, device());
                let e = source.raw_os_error();
                assert!(
                    matches!(e, Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) | Some(libc::EINVAL)),
                    "{verb}: {source}"
                );
                eprintln!("{}: {verb} unsupported ({source})", device());
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    drop(ctx);
    assert_eq!(ledger.live_total(), 0);
    assert!(ledger.failures().is_empty(), "{:?}", ledger.failures());
}

/// On mlx5: a WRITE through the direct path (our WQE, our doorbell, our CQE polling) between two
/// QPs, data checked. On any other device: the direct backend refuses with a message naming the
/// provider, and creates nothing.
#[test]
#[ignore = "needs an RDMA device: RDMAPROBE_TEST_DEVICE"]
fn direct_path_writes_on_mlx5_and_refuses_elsewhere() {
    use rdmaprobe::mlx5::seg::DataSeg;
    use rdmaprobe::mlx5::sq::DbMode;
    use rdmaprobe::mlx5::wqe::{Payload, Wqe};
    use rdmaprobe::verbs::direct::DirectQp;

    let ctx = Context::open(&device()).unwrap();
    let ledger = ctx.ledger();
    let pd = Pd::new(&ctx).unwrap();
    let caps = QpCaps {
        max_send_wr: 64,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    if !ctx.is_mlx5() {
        let before = ledger.live_total();
        let e = DirectQp::new(&pd, caps, 64, DbMode::Bf).err().expect("refusal");
        let s = e.to_string();
        assert!(s.contains("the direct backend needs an mlx5 device"), "{s}");
        assert!(s.contains(&format!("{} uses the", device())), "{s}");
        assert_eq!(ledger.live_total(), before, "a refused direct QP created resources");
        return;
    }
    let port = ctx.query_port(common::port()).unwrap();
    let gid = common::gid_index(&ctx, &port);
    let mut a = DirectQp::new(&pd, caps, 64, DbMode::Bf).expect("direct QP a");
    let mut b = DirectQp::new(&pd, caps, 64, DbMode::Bf).expect("direct QP b");
    let opts = ConnectOpts {
        port: port.port,
        gid_index: gid,
        access: common::access_all(),
        ..Default::default()
    };
    let (ea, eb) = (a.endpoint(&port, gid).unwrap(), b.endpoint(&port, gid).unwrap());
    a.connect(&port, &opts, &eb).unwrap();
    b.connect(&port, &opts, &ea).unwrap();
    let src = Mr::new(&pd, 4096, MrAccess::LOCAL_WRITE, false).unwrap();
    let dst = Mr::new(&pd, 4096, common::access_all(), false).unwrap();
    let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
    src.write(0, &data).unwrap();
    let sge = [DataSeg::new(src.addr(), src.lkey(), data.len() as u32)];
    let idx =
        a.sq.post_and_ring(&Wqe::write(dst.addr() + 64, dst.rkey(), Payload::Gather(&sge)).signaled())
            .unwrap();
    let deadline = std::time::Instant::now() + DEADLINE;
    let mut out = [rdmaprobe::mlx5::cq::Cqe::default(); 4];
    loop {
        // model0 through libmlx5: nothing watches its doorbells; it executes when asked
        if device() == rdmaprobe::uverbs::IBDEV {
            rdmaprobe::uverbs::progress();
        }
        let n = a.cq.poll(&mut out).unwrap_or_else(|e| panic!("{e}"));
        if n > 0 {
            assert_eq!(out[0].wqe_counter, idx);
            a.sq.retire(out[0].wqe_counter);
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no CQE from the direct WRITE");
    }
    let mut got = vec![0u8; data.len()];
    dst.read(64, &mut got).unwrap();
    assert_eq!(got, data);
    drop(b);
}

/// The key-value workload on the device (issue 27; small): HERD's requests as inline UC WRITEs
/// into the region, responses as inline UD SEND_WITH_IMM, every GET's value checked, both
/// verbs backends and, on an mlx5 device, the direct path's ends on its QPs taken over with
/// mlx5dv; uniform and Zipf keys with half of them PUTs; verbs stepped in one thread, wr and
/// direct with a thread per client and worker.
#[test]
#[ignore = "needs an RDMA device: RDMAPROBE_TEST_DEVICE"]
fn kv_requests_over_uc_and_responses_over_ud() {
    use rdmaprobe::backend::kv::verbs::loopback;
    use rdmaprobe::backend::setup::Dev;
    use rdmaprobe::backend::BackendKind;
    use rdmaprobe::scenario::kv::engine::Shape;
    use rdmaprobe::scenario::kv::keys::KeyDist;
    use rdmaprobe::scenario::kv::op::Layout;
    use rdmaprobe::scenario::kv::run::{self, KvParams};
    use rdmaprobe::scenario::kv::threads::{self, Threads};
    let gid = std::env::var("RDMAPROBE_TEST_GID_INDEX")
        .ok()
        .and_then(|v| v.parse().ok());
    let model = rdmaprobe::model::ModelConfig::default();
    let (dev, _) = Dev::open(Some(&device()), common::port(), gid, model).expect("open the device");
    let layout = Layout {
        workers: 2,
        clients: 2,
        window: 8,
    };
    // the direct path's ends on an mlx5 device (a ConnectX; model0 through libmlx5): its own WQEs
    // on the QPs taken over with mlx5dv
    let mlx5 = dev.supports(BackendKind::Direct).is_ok();
    let mut kinds = vec![(BackendKind::Verbs, false), (BackendKind::Wr, true)];
    if mlx5 {
        kinds.push((BackendKind::Direct, true));
    }
    for (kind, zipf) in kinds {
        let dist = if zipf {
            KeyDist::zipf(1024, 0.99).unwrap()
        } else {
            KeyDist::Uniform
        };
        let shape = Shape {
            layout,
            keys: 1024,
            update_pct: 50,
            val_len: 32,
            dist,
        };
        let p = KvParams {
            shape,
            postlist: 8,
            requests: 300,
            stall: DEADLINE,
            deadline: 4 * DEADLINE,
            threads: if kind != BackendKind::Verbs {
                Threads::PerRole
            } else {
                Threads::One
            },
        };
        // verbs in one thread, wr and direct with a thread per client and worker
        let r = if kind == BackendKind::Direct {
            let mut paths =
                rdmaprobe::backend::kv::direct::nic_loopback(&dev, layout).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
            threads::loopback(&mut paths.clients, &mut paths.workers, &p)
        } else {
            let mut paths = loopback(&dev, kind, layout).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
            match p.threads {
                Threads::One => run::loopback(&mut paths.clients, &mut paths.workers, &p),
                Threads::PerRole => threads::loopback(&mut paths.clients, &mut paths.workers, &p),
            }
        }
        .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        for c in &r.clients {
            assert_eq!((c.issued, c.answered), (300, 300), "{kind:?}");
            assert_eq!(c.get_hits + c.get_misses + c.puts, 300, "{kind:?}");
        }
        let puts: u64 = r.clients.iter().map(|c| c.puts).sum();
        assert!((200..400).contains(&puts), "{kind:?}: {puts} PUTs of 600 at 50 %");
    }
}
