//! The direct path on a ConnectX: the same operation checks as on model0
//! (`tests/common/direct.rs`), through `mlx5dv_init_obj` queues. `#[ignore]`d; run on a machine
//! with an mlx5 device:
//! `RDMAPROBE_TEST_DEVICE=mlx5_0 [RDMAPROBE_TEST_GID_INDEX=3] cargo test --test hw_mlx5 -- --ignored`.
//! On a device that is not mlx5 they fail (they never pass having tested nothing).

mod common;

use common::direct::{self, End, Mem};
use rdmaprobe::mlx5::sq::{DbMode, NoHook};
use rdmaprobe::verbs::direct::DirectQp;
use rdmaprobe::verbs::{ConnectOpts, Context, Mr, Pd, QpCaps};

struct Side {
    q: DirectQp,
    mr: Mr,
}

fn mem(mr: &Mr) -> Mem {
    Mem {
        addr: mr.addr(),
        lkey: mr.lkey(),
        rkey: mr.rkey(),
        len: mr.len(),
    }
}

fn with_pair(mode: DbMode, f: impl FnOnce(End<'_, NoHook>, End<'_, NoHook>)) {
    let ctx = Context::open(&common::device()).expect("open device");
    assert!(
        ctx.is_mlx5(),
        "{} is not an mlx5 device: these tests need a ConnectX",
        ctx.name()
    );
    let port = ctx.query_port(common::port()).expect("port");
    let gid = common::gid_index(&ctx, &port);
    let pd = Pd::new(&ctx).unwrap();
    let caps = QpCaps {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 128,
    };
    let mk = || Side {
        q: DirectQp::new(&pd, caps, 256, mode).expect("direct QP"),
        mr: Mr::new(&pd, 1 << 16, common::access_all(), false).expect("MR"),
    };
    let (mut a, mut b) = (mk(), mk());
    let opts = ConnectOpts {
        port: port.port,
        gid_index: gid,
        access: common::access_all(),
        ..Default::default()
    };
    let (ea, eb) = (a.q.endpoint(&port, gid).unwrap(), b.q.endpoint(&port, gid).unwrap());
    a.q.connect(&port, &opts, &eb).unwrap();
    b.q.connect(&port, &opts, &ea).unwrap();
    let (ma, mb) = (mem(&a.mr), mem(&b.mr));
    f(
        End {
            sq: &mut a.q.sq,
            rq: &mut a.q.rq,
            cq: &mut a.q.cq,
            mem: ma,
        },
        End {
            sq: &mut b.q.sq,
            rq: &mut b.q.rq,
            cq: &mut b.q.cq,
            mem: mb,
        },
    );
}

#[test]
#[ignore = "needs a ConnectX: RDMAPROBE_TEST_DEVICE=mlx5_0"]
fn send_recv_each_doorbell_mode() {
    for mode in [DbMode::Bf, DbMode::BfNoFence, DbMode::Db] {
        with_pair(mode, direct::send_recv);
    }
}

#[test]
#[ignore = "needs a ConnectX: RDMAPROBE_TEST_DEVICE=mlx5_0"]
fn write_and_write_with_immediate() {
    with_pair(DbMode::Bf, direct::write);
}

#[test]
#[ignore = "needs a ConnectX: RDMAPROBE_TEST_DEVICE=mlx5_0"]
fn read_and_atomics() {
    // the kernel advertises IBV_ATOMIC_HCA only when the device works on host-order words
    let ctx = Context::open(&common::device()).expect("open device");
    let big = ctx.query().expect("query").atomic_cap != "hca";
    with_pair(DbMode::Bf, |a, b| direct::read_and_atomics(a, b, big));
}

#[test]
#[ignore = "needs a ConnectX: RDMAPROBE_TEST_DEVICE=mlx5_0"]
fn bad_rkey_is_remote_access() {
    with_pair(DbMode::Db, direct::bad_rkey);
}
