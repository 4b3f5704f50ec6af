//! Shared set-up for device tests: which device to use (from the environment) and a connected
//! pair of RC QPs on it.
#![allow(dead_code)]

pub mod direct;

use rdmaprobe::verbs::device::pick_gid_index;
use rdmaprobe::verbs::{ConnectOpts, Context, Cq, Granted, Mr, MrAccess, Pd, PortInfo, Qp, QpCaps};
use std::time::Duration;

/// How long any single completion may take (Soft-RoCE under emulation is slow, not this slow).
pub const DEADLINE: Duration = Duration::from_secs(10);

/// The device under test, from `RDMAPROBE_TEST_DEVICE`. Device tests are `#[ignore]`d; when they
/// are run explicitly without the variable they fail, rather than pass having tested nothing.
pub fn device() -> String {
    match std::env::var("RDMAPROBE_TEST_DEVICE") {
        Ok(d) if !d.is_empty() => d,
        _ => panic!(
            "device tests need RDMAPROBE_TEST_DEVICE (e.g. rxe0 or mlx5_0), and RDMAPROBE_TEST_GID_INDEX on RoCE; \
             harness/softroce.sh runs them on Soft-RoCE"
        ),
    }
}

/// The port under test (`RDMAPROBE_TEST_PORT`, default 1).
pub fn port() -> u8 {
    std::env::var("RDMAPROBE_TEST_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(1)
}

/// The GID index: `RDMAPROBE_TEST_GID_INDEX`, else picked from the table on RoCE, else none.
pub fn gid_index(ctx: &Context, port: &PortInfo) -> Option<u8> {
    if let Some(i) = std::env::var("RDMAPROBE_TEST_GID_INDEX")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return Some(i);
    }
    if port.is_ethernet() {
        let gids = ctx.gids(port.port, 8).expect("query GIDs");
        return pick_gid_index(&gids).map(|i| i as u8);
    }
    None
}

/// One side of a pair: its CQ (send and receive), MR and QP.
pub struct Side {
    pub cq: Cq,
    pub mr: Mr,
    pub qp: Qp,
}

/// Two RC QPs on one device, connected to each other.
pub struct Pair {
    pub ctx: Context,
    pub pd: Pd,
    pub port: PortInfo,
    pub a: Side,
    pub b: Side,
    pub granted: Vec<Granted>,
}

/// Size of each side's MR.
pub const MR_LEN: usize = 64 * 1024;

pub fn access_all() -> MrAccess {
    MrAccess::LOCAL_WRITE | MrAccess::REMOTE_WRITE | MrAccess::REMOTE_READ | MrAccess::REMOTE_ATOMIC
}

impl Pair {
    /// A connected pair; `extended` creates the QPs with the `ibv_wr_*` API.
    pub fn new(extended: bool, tweak: impl Fn(&mut ConnectOpts)) -> Pair {
        let ctx = Context::open(&device()).expect("open device");
        let port = ctx.query_port(port()).expect("query port");
        let gid = gid_index(&ctx, &port);
        let pd = Pd::new(&ctx).expect("alloc PD");
        let caps = QpCaps {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: 64,
        };
        let mk = || {
            let cq = Cq::new(&ctx, 256).expect("create CQ");
            let mr = Mr::new(&pd, MR_LEN, access_all(), false).expect("register MR");
            let qp = Qp::new_rc(&pd, &cq, &cq, caps, extended).expect("create QP");
            Side { cq, mr, qp }
        };
        let mut a = mk();
        let mut b = mk();
        let mut opts = ConnectOpts {
            port: port.port,
            gid_index: gid,
            access: access_all(),
            ..Default::default()
        };
        tweak(&mut opts);
        let ea = a.qp.endpoint(&port, gid).expect("endpoint a");
        let eb = b.qp.endpoint(&port, gid).expect("endpoint b");
        let granted = a.qp.connect(&port, &opts, &eb).expect("connect a->b");
        b.qp.connect(&port, &opts, &ea).expect("connect b->a");
        Pair {
            ctx,
            pd,
            port,
            a,
            b,
            granted,
        }
    }
}
