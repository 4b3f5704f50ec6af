//! The differential oracle: the direct path against the provider that runs on ConnectX.
//!
//! Random work requests (every RC opcode rdmaprobe builds; 0..=4 gather entries of 0..=2 KiB,
//! zero-length ones included; inline or not; signalled or not; fence; solicited; immediates)
//! are posted through the machine's libmlx5 (`ibv_post_send`, and `ibv_wr_*`) on one model0 QP
//! and through the direct path's builders on a second QP of the same geometry, over several
//! wraps of the rings. After each post the two WQEs are compared field by field (the control
//! segment's fields, then every following byte), and so are the doorbell records and what each
//! side stored into its BlueFlame register. model0 then executes both and the completions are
//! drained. The CQEs of the libmlx5 QP are decoded twice, by libmlx5's `ibv_poll_cq` and by the
//! direct path's CQ code (a second view of the same ring), good and error ones, and must agree;
//! with the `ibv_wr_*` API, libmlx5 polls an extended CQ (`ibv_create_cq_ex`) and its
//! `ibv_wc_read_completion_ts` must give the direct path's timestamp of every CQE.
//!
//! Differences that are legitimate are listed in `allowed`, each with the rdma-core source line
//! that makes it so; a mutation of any field the direct path writes fails the comparison (the
//! test checks its own comparator on every pair).
//!
//! Runs on model0 through rdmaprobe's user-space uverbs device (`src/uverbs`): no hardware.

use rdmaprobe::mlx5::cq::{Cq as DirectCq, CqConfig, Cqe};
use rdmaprobe::mlx5::seg::DataSeg;
use rdmaprobe::mlx5::sq::{DbMode, NoHook, Prepared, Sq, SqConfig};
use rdmaprobe::mlx5::wqe::{Payload, Wqe};
use rdmaprobe::model::clock::{HCA_CORE_CLOCK_KHZ, TIMESTAMP_MASK};
use rdmaprobe::sys;
use rdmaprobe::verbs::{ConnectOpts, Context, Cq, Mr, MrAccess, Op, Pd, Qp, QpCaps, SendFlags, TsCompletion, WrBatch};
use std::time::{Duration, Instant};

/// model0 through libibverbs and libmlx5, or `None` (with the reason printed) where this host's
/// libibverbs cannot reach it (a kernel that lists RDMA devices): these tests need it.
fn model0() -> Option<Context> {
    if let Err(why) = rdmaprobe::uverbs::status() {
        eprintln!("SKIPPED: model0 is not reachable through libibverbs here: {why}");
        return None;
    }
    Some(Context::open("model0").expect("model0 through libibverbs and libmlx5"))
}

const CAPS: QpCaps = QpCaps {
    max_send_wr: 64,
    max_recv_wr: 256,
    max_send_sge: 4,
    max_recv_sge: 4,
    max_inline_data: 128,
};
const WRS: usize = 1500;

/// What mlx5dv says about a QP's send ring and register, or a CQ's ring.
struct RawQp {
    buf: *mut u8,
    wqe_cnt: u32,
    dbrec: *mut u32,
    bf: *mut u8,
    bf_size: u32,
}

fn raw_qp(qp: &Qp) -> RawQp {
    let mut dv = sys::mlx5dv_qp::default();
    let mut obj = sys::mlx5dv_obj::default();
    obj.qp.in_ = qp.as_ptr();
    obj.qp.out = &mut dv;
    // SAFETY: a live QP of an mlx5 device (model0 through libmlx5); `out` is a valid local.
    let rc = unsafe { sys::mlx5dv_init_obj(&mut obj, sys::MLX5DV_OBJ_QP as u64) };
    assert_eq!(rc, 0, "mlx5dv_init_obj(QP)");
    assert_eq!(dv.sq.stride, 64);
    RawQp {
        buf: dv.sq.buf.cast(),
        wqe_cnt: dv.sq.wqe_cnt,
        dbrec: dv.dbrec,
        bf: dv.bf.reg.cast(),
        bf_size: dv.bf.size,
    }
}

fn raw_cq(cq: &Cq, dbrec: *mut u32) -> DirectCq {
    let mut dv = sys::mlx5dv_cq::default();
    let mut obj = sys::mlx5dv_obj::default();
    obj.cq.in_ = cq.as_ptr();
    obj.cq.out = &mut dv;
    // SAFETY: a live CQ of an mlx5 device; `out` is a valid local.
    let rc = unsafe { sys::mlx5dv_init_obj(&mut obj, sys::MLX5DV_OBJ_CQ as u64) };
    assert_eq!(rc, 0, "mlx5dv_init_obj(CQ)");
    let cfg = CqConfig {
        buf: dv.buf.cast(),
        cqe_cnt: dv.cqe_cnt,
        cqe_size: dv.cqe_size,
        // the caller's record: the libmlx5 CQ's own one when the direct path owns the CQ, a
        // private word for a second view that must not move libmlx5's consumer index
        dbrec: if dbrec.is_null() { dv.dbrec } else { dbrec },
        cqn: dv.cqn,
    };
    // SAFETY: the CQ's ring from mlx5dv, alive while `cq` is (the test keeps both).
    unsafe { DirectCq::new(cfg) }.expect("direct view of the CQ")
}

/// The `len` bytes of the WQE at WQEBB `start` of a ring, following its wrap.
fn wqe_bytes(r: &RawQp, start: u32, len: usize) -> Vec<u8> {
    let ring = r.wqe_cnt as usize * 64;
    let off = (start & (r.wqe_cnt - 1)) as usize * 64;
    (0..len)
        // SAFETY: inside the ring (index taken modulo its size).
        .map(|i| unsafe { *r.buf.add((off + i) % ring) })
        .collect()
}

fn pi(r: &RawQp) -> u32 {
    // SAFETY: the send counter of the QP's doorbell record.
    u32::from_be(unsafe { std::ptr::read_volatile(r.dbrec.add(1)) })
}

/// What one post stored into the BlueFlame register: `(offset, bytes)` of the non-zero span
/// written since the register was cleared (both halves looked at).
fn reg_written(r: &RawQp) -> Vec<(usize, Vec<u8>)> {
    let mut out = Vec::new();
    for half in 0..2 {
        // SAFETY: the register's two halves, `bf_size` bytes each, in a mapped UAR page.
        let b: Vec<u8> = (0..r.bf_size as usize)
            .map(|i| unsafe { std::ptr::read_volatile(r.bf.add(half * r.bf_size as usize + i)) })
            .collect();
        if let Some(end) = b.iter().rposition(|&x| x != 0) {
            out.push((half * r.bf_size as usize, b[..(end + 1).next_multiple_of(8)].to_vec()));
        }
    }
    out
}

fn clear_reg(r: &RawQp) {
    for i in 0..2 * r.bf_size as usize {
        // SAFETY: the register's two halves in a mapped UAR page (plain memory on model0).
        unsafe { std::ptr::write_volatile(r.bf.add(i), 0) };
    }
}

/// One work request, as both sides build it.
#[derive(Clone, Debug)]
struct Req {
    op: u8,                    // 0 WRITE, 1 WRITE_IMM, 2 SEND, 3 SEND_IMM, 4 READ, 5 FETCH_ADD, 6 CMP_SWAP
    sges: Vec<(usize, usize)>, // (offset in the local MR, length)
    remote_off: usize,
    inline: bool,
    signaled: bool,
    fence: bool,
    solicited: bool,
    imm: u32,
    add: u64,
    swap: u64,
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn random_req(r: &mut Rng, max_inline: usize, n: usize) -> Req {
    let op = r.below(7) as u8;
    let atomic = op >= 5;
    let mut sges = Vec::new();
    if atomic {
        sges.push((8 * r.below(512) as usize, 8));
    } else {
        for _ in 0..1 + r.below(4) {
            // zero-length entries a quarter of the time, else up to 2 KiB
            let len = if r.below(4) == 0 { 0 } else { 1 + r.below(2048) as usize };
            sges.push((r.below(8192) as usize, len));
        }
    }
    let total: usize = sges.iter().map(|s| s.1).sum();
    let inline = op <= 3 && total <= max_inline && r.below(2) == 0;
    Req {
        op,
        sges,
        remote_off: if atomic {
            8 * r.below(512) as usize
        } else {
            r.below(8192) as usize
        },
        inline,
        // every 8th signalled at least, so the rings drain
        signaled: n % 8 == 7 || r.below(3) == 0,
        fence: r.below(8) == 0,
        solicited: (op == 1 || op == 2 || op == 3) && r.below(4) == 0,
        imm: r.next() as u32,
        add: r.next(),
        swap: r.next(),
    }
}

/// The direct path's WQE for `q`.
fn direct_wqe<'a>(q: &Req, segs: &'a [DataSeg], inl: &'a [u8], remote: (u64, u32)) -> Wqe<'a> {
    let payload = if q.inline {
        Payload::Inline(inl)
    } else {
        Payload::Gather(segs)
    };
    let mut w = match q.op {
        0 => Wqe::write(remote.0, remote.1, payload),
        1 => Wqe::write_imm(remote.0, remote.1, q.imm, payload),
        2 => Wqe::send(payload),
        3 => Wqe::send_imm(q.imm, payload),
        4 => Wqe::read(remote.0, remote.1, segs),
        5 => Wqe::atomic_fa(remote.0, remote.1, q.add, segs),
        _ => Wqe::atomic_cs(remote.0, remote.1, q.add, q.swap, segs),
    };
    if q.signaled {
        w = w.signaled();
    }
    if q.fence {
        w = w.fence();
    }
    if q.solicited {
        w = w.solicited();
    }
    w
}

/// The legitimate differences: byte ranges of a WQE that libmlx5 leaves unwritten (stale ring
/// contents) where the direct path writes zeros, for request `r`, with the rdma-core source that
/// makes it so.
fn allowed(r: &Req, api_wr: bool) -> Vec<(std::ops::Range<usize>, &'static str)> {
    let mut v = Vec::new();
    if api_wr && r.op != 1 && r.op != 3 {
        v.push((
            12..16,
            "ibv_wr_*: ctrl.imm is written only by the builders with an immediate or an rkey to \
             invalidate (providers/mlx5/qp.c, rdma-core 44: _common_wqe_init_op 1236-1288 leaves \
             it; mlx5_send_wr_send_imm 1403, _mlx5_send_wr_rdma_imm 1509 set it); the NIC reads \
             it only for those opcodes",
        ));
    }
    if r.inline {
        let total: usize = r.sges.iter().map(|s| s.1).sum();
        let start = if r.op <= 1 { 32 } else { 16 } + 4;
        if total > 0 {
            v.push((
                start + total..(start + total).next_multiple_of(16),
                "inline padding: libmlx5 copies exactly the payload after the inline header \
                 (providers/mlx5/qp.c set_data_inl_seg / mlx5_send_wr_set_inline_data); the \
                 bytes up to the 16-byte boundary keep what the ring held",
            ));
        }
    }
    if r.op == 5 {
        // ctrl 16 B, remote address 16 B, then the atomic segment: swap_add, compare
        v.push((
            40..48,
            "FETCH_AND_ADD: libmlx5 writes only swap_add, not compare (providers/mlx5/qp.c \
             _set_atomic_seg, rdma-core 44: lines 239-244); the NIC ignores compare for it",
        ));
    }
    v
}

/// Field-by-field differences between libmlx5's WQE `a` (QP `qa`) and the direct path's `b`
/// (QP `qb`), as `field: libmlx5 vs direct` lines; bytes in `skip` are not compared.
fn diff_wqe(a: &[u8], qa: u32, b: &[u8], qb: u32, skip: &[std::ops::Range<usize>]) -> Vec<String> {
    let mut d = Vec::new();
    let be32 = |x: &[u8], o: usize| u32::from_be_bytes(x[o..o + 4].try_into().unwrap());
    let (ds_a, ds_b) = (be32(a, 4) & 0x3f, be32(b, 4) & 0x3f);
    let fields: [(&str, u32, u32); 5] = [
        ("ctrl.opmod_idx_opcode", be32(a, 0), be32(b, 0)),
        ("ctrl.ds", ds_a, ds_b),
        ("ctrl.signature", a[8] as u32, b[8] as u32),
        ("ctrl.fm_ce_se", a[11] as u32, b[11] as u32),
        ("ctrl.imm", be32(a, 12), be32(b, 12)),
    ];
    let imm_skipped = skip.iter().any(|r| r.contains(&12));
    for (name, x, y) in fields {
        if x != y && !(name == "ctrl.imm" && imm_skipped) {
            d.push(format!("{name}: {x:#x} vs {y:#x}"));
        }
    }
    if be32(a, 4) >> 8 != qa || be32(b, 4) >> 8 != qb {
        d.push(format!(
            "ctrl.qpn: {:#x} vs {:#x} (QPs {qa:#x}, {qb:#x})",
            be32(a, 4) >> 8,
            be32(b, 4) >> 8
        ));
    }
    if a[9..11] != b[9..11] {
        d.push(format!(
            "ctrl.dci_stream_channel_id: {:?} vs {:?}",
            &a[9..11],
            &b[9..11]
        ));
    }
    let n = (ds_a.min(ds_b) as usize * 16).min(a.len()).min(b.len());
    for seg in (16..n).step_by(16) {
        let differs = (seg..seg + 16).any(|i| a[i] != b[i] && !skip.iter().any(|r| r.contains(&i)));
        if differs {
            d.push(format!(
                "segment at byte {seg}: {:02x?} vs {:02x?}",
                &a[seg..seg + 16],
                &b[seg..seg + 16]
            ));
        }
    }
    d
}

/// The comparator fails on a mutation of any byte the direct path wrote (a check of the check):
/// every field of every builder, the DS count included.
fn comparator_sees_every_byte(a: &[u8], qa: u32, b: &[u8], qb: u32, skip: &[std::ops::Range<usize>]) {
    let ds = (u32::from_be_bytes(b[4..8].try_into().unwrap()) & 0x3f) as usize * 16;
    let compared = |i: &usize| !(4..7).contains(i) && !skip.iter().any(|r| r.contains(i));
    for i in (0..ds.min(b.len())).filter(compared) {
        let mut m = b.to_vec();
        m[i] ^= 0x01;
        assert!(
            !diff_wqe(a, qa, &m, qb, skip).is_empty(),
            "a mutation of byte {i} of the direct WQE went unnoticed"
        );
    }
}

struct Side {
    qp: Qp,
    cq: Cq,
}

fn connect(ctx: &Context, a: &mut Qp, b: &mut Qp) {
    let port = ctx.query_port(1).unwrap();
    let opts = ConnectOpts {
        port: 1,
        gid_index: None,
        access: MrAccess::LOCAL_WRITE | MrAccess::REMOTE_WRITE | MrAccess::REMOTE_READ | MrAccess::REMOTE_ATOMIC,
        ..Default::default()
    };
    let (ea, eb) = (a.endpoint(&port, None).unwrap(), b.endpoint(&port, None).unwrap());
    a.connect(&port, &opts, &eb).unwrap();
    b.connect(&port, &opts, &ea).unwrap();
}

/// Up to `wc.len()` completions of A's CQ as libmlx5 reports them, with the completion
/// timestamp when the CQ has them (`ibv_start_poll`/`ibv_wc_read_completion_ts`), else by
/// `ibv_poll_cq`.
fn poll_a(cq: &Cq, wc: &mut [sys::ibv_wc]) -> Vec<(rdmaprobe::verbs::Completion, Option<u64>)> {
    if cq.has_timestamps() {
        let mut out = Vec::new();
        cq.poll_ts(&mut out, wc.len()).expect("ibv_start_poll on A's CQ");
        return out.into_iter().map(|t| (t.c, Some(t.timestamp))).collect();
    }
    let n = cq.poll_raw(wc).unwrap();
    wc[..n]
        .iter()
        .map(|w| (rdmaprobe::verbs::Completion::from_wc(w), None))
        .collect()
}

fn run(api_wr: bool, seed: u64) {
    let Some(ctx) = model0() else { return };
    assert!(ctx.is_mlx5(), "model0 must be driven by libmlx5 here");
    let pd = Pd::new(&ctx).unwrap();
    let all = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_WRITE | MrAccess::REMOTE_READ | MrAccess::REMOTE_ATOMIC;
    let local = Mr::new(&pd, 16384, all, false).unwrap();
    let remote = Mr::new(&pd, 16384, all, false).unwrap();
    let mk = |wr, ts: bool| {
        let cq = if ts {
            Cq::with_timestamps(&ctx, 1024).unwrap()
        } else {
            Cq::new(&ctx, 1024).unwrap()
        };
        let qp = Qp::new_rc(&pd, &cq, &cq, CAPS, wr).unwrap();
        Side { qp, cq }
    };
    // A: libmlx5 posts; B: the direct path posts (same capabilities, so the same ring);
    // P and Q: their peers, each with receives for SENDs and immediates. With the ibv_wr_* API,
    // A's CQ carries completion timestamps (ibv_create_cq_ex), polled with ibv_start_poll and
    // ibv_wc_read_completion_ts; with ibv_post_send, a plain CQ polled with ibv_poll_cq.
    let (mut a, mut b, mut p, mut q) = (
        mk(api_wr, api_wr),
        mk(api_wr, false),
        mk(false, false),
        mk(false, false),
    );
    connect(&ctx, &mut a.qp, &mut p.qp);
    connect(&ctx, &mut b.qp, &mut q.qp);
    let (ra, rb) = (raw_qp(&a.qp), raw_qp(&b.qp));
    assert_eq!(ra.wqe_cnt, rb.wqe_cnt, "same capabilities, same ring");
    let max_inline = a.qp.granted_caps().max_inline_data as usize;
    let cfg = SqConfig {
        buf: rb.buf,
        wqe_cnt: rb.wqe_cnt,
        stride: 64,
        dbrec: rb.dbrec,
        bf_reg: rb.bf,
        bf_size: rb.bf_size,
        qpn: b.qp.qpn(),
        max_inline: b.qp.granted_caps().max_inline_data,
    };
    // SAFETY: B's ring, record and register from mlx5dv; B lives to the end of the test and
    // libmlx5 never posts to it.
    let mut sq = unsafe { Sq::new(cfg, DbMode::Bf, NoHook) }.expect("direct SQ over B");
    let mut bcq = raw_cq(&b.cq, std::ptr::null_mut());
    // a second view of A's CQ: the direct path's decoding of the CQEs libmlx5 polls
    let mut shadow_ci = 0u32;
    let mut acq_view = raw_cq(&a.cq, &mut shadow_ci);
    for s in [&mut p, &mut q] {
        for i in 0..256 {
            let sge = [remote.sge(8192, 8192).unwrap()];
            s.qp.post_recv(i, &sge).unwrap();
        }
    }
    let mut rng = Rng(seed);
    let (mut decoded, mut timestamped, mut last_ts) = (0usize, 0usize, 0u64);
    // signalled WRs posted and not yet completed, on A and on B (model0 may execute a QP from
    // another thread's progress call, so "nothing polled now" does not mean "all done")
    let (mut due_a, mut due_b) = (0u32, 0u32);
    // A's WQE index -> (wr_id, the work completion's opcode libmlx5 must report)
    let mut posted = std::collections::HashMap::new();
    for n in 0..WRS {
        let r = random_req(&mut rng, max_inline, n);
        let sges: Vec<_> = r.sges.iter().map(|&(o, l)| local.sge(o, l).unwrap()).collect();
        let segs: Vec<DataSeg> = sges
            .iter()
            .map(|s| DataSeg::new(s.raw().addr, s.raw().lkey, s.raw().length))
            .collect();
        let mut inl = Vec::new();
        for &(o, l) in &r.sges {
            let mut buf = vec![0u8; l];
            local.read(o, &mut buf).unwrap();
            inl.extend_from_slice(&buf);
        }
        let rem = remote.remote(r.remote_off);
        let op = match r.op {
            0 => Op::Write(rem),
            1 => Op::WriteImm(rem, r.imm),
            2 => Op::Send,
            3 => Op::SendImm(r.imm),
            4 => Op::Read(rem),
            5 => Op::FetchAdd {
                remote: rem,
                add: r.add,
            },
            _ => Op::CmpSwap {
                remote: rem,
                compare: r.add,
                swap: r.swap,
            },
        };
        let flags = SendFlags {
            signaled: r.signaled,
            inline: r.inline,
            fence: r.fence,
            solicited: r.solicited,
        };
        clear_reg(&ra);
        clear_reg(&rb);
        let (pa, pb) = (pi(&ra), pi(&rb));
        let wc_op = match r.op {
            0 | 1 => sys::IBV_WC_RDMA_WRITE,
            2 | 3 => sys::IBV_WC_SEND,
            4 => sys::IBV_WC_RDMA_READ,
            5 => sys::IBV_WC_FETCH_ADD,
            _ => sys::IBV_WC_COMP_SWAP,
        };
        posted.insert((pa & 0xffff) as u16, (n as u64, wc_op));
        if api_wr {
            a.qp.wr_post(&[WrBatch {
                wr_id: n as u64,
                op,
                sges: &sges,
                flags,
            }])
            .unwrap_or_else(|e| panic!("WR {n} {r:?}: {e}"));
        } else {
            a.qp.post_send(n as u64, op, &sges, flags)
                .unwrap_or_else(|e| panic!("WR {n} {r:?}: {e}"));
        }
        let w = direct_wqe(&r, &segs, &inl, (rem.addr, rem.rkey));
        let idx = if r.inline && n % 2 == 1 {
            // every other inline WR as the direct backend posts it: an image prepared with
            // other bytes, given the payload at the post (garbage after it in the source)
            let stale = vec![0u8; inl.len()];
            let mut p = Prepared::new(&direct_wqe(&r, &segs, &stale, (rem.addr, rem.rkey)), b.qp.qpn(), 256)
                .unwrap_or_else(|e| panic!("WR {n} {r:?}: prepare: {e}"));
            let mut src = inl.clone();
            src.resize(inl.len() + 64, 0xee);
            sq.post_prepared_ring_inline(&mut p, &src, r.signaled)
        } else {
            sq.post_and_ring(&w)
        }
        .unwrap_or_else(|e| panic!("WR {n} {r:?}: direct: {e}"));
        if r.signaled {
            due_a += 1;
            due_b += 1;
        }
        assert_eq!(idx as u32, pb & 0xffff);
        // the doorbell records advance alike
        assert_eq!(
            (pi(&ra), pi(&rb)),
            (pa + (pi(&rb) - pb), pi(&rb)),
            "WR {n} {r:?}: doorbell records"
        );
        // the WQEs, field by field
        let len = 64 * (pi(&ra) - pa) as usize;
        let (wa, wb) = (wqe_bytes(&ra, pa, len), wqe_bytes(&rb, pb, len));
        let skip: Vec<_> = allowed(&r, api_wr).into_iter().map(|a| a.0).collect();
        let d = diff_wqe(&wa, a.qp.qpn(), &wb, b.qp.qpn(), &skip);
        assert!(
            d.is_empty(),
            "WR {n} {r:?} ({} API):\n  {}",
            if api_wr { "wr" } else { "post_send" },
            d.join("\n  ")
        );
        if n < 64 {
            comparator_sees_every_byte(&wa, a.qp.qpn(), &wb, b.qp.qpn(), &skip);
        }
        // the register: what each stored, the QP numbers aside
        let (ga, gb) = (reg_written(&ra), reg_written(&rb));
        // per half written: the offset, doorbell (8 bytes) or BlueFlame copy, and the WQE's
        // bytes in it (the QP number and the allowed ranges aside; a BlueFlame copy goes on to
        // the 64-byte boundary with whatever the ring held there, which is not compared)
        let strip = |g: &[(usize, Vec<u8>)]| -> Vec<(usize, bool, Vec<u8>)> {
            g.iter()
                .map(|(o, b)| {
                    let bf = b.len() > 8;
                    let ds = b.get(7).map_or(0, |d| (d & 0x3f) as usize);
                    // `reg_written` ends a half at its last non-zero byte: a WQE whose tail
                    // is zero (zero padding, as a prepared image writes it) is taken to its
                    // size again, the zeros put back
                    let mut b = if bf {
                        let mut v = b[..(ds * 16).min(b.len())].to_vec();
                        v.resize(ds * 16, 0);
                        v
                    } else {
                        b.clone()
                    };
                    if b.len() >= 8 {
                        b[4..7].fill(0); // the QP number in ctrl.qpn_ds
                    }
                    for r in &skip {
                        let end = r.end.min(b.len());
                        if r.start < end {
                            b[r.start..end].fill(0);
                        }
                    }
                    (*o, bf, b)
                })
                .collect()
        };
        assert_eq!(strip(&ga), strip(&gb), "WR {n} {r:?}: register writes");
        // model0 executes both; drain what completed
        rdmaprobe::uverbs::progress();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut wc = [sys::ibv_wc::default(); 16];
            let mut views = [rdmaprobe::mlx5::cq::Cqe::default(); 16];
            // the direct path's view first (it moves only its private record), then libmlx5
            let nv = acq_view
                .poll(&mut views)
                .unwrap_or_else(|e| panic!("direct view of A's CQ: {e}"));
            let libmlx5 = poll_a(&a.cq, &mut wc[..nv]);
            assert_eq!(libmlx5.len(), nv, "libmlx5 and the direct path see as many CQEs");
            for ((c, ts), v) in libmlx5.iter().zip(&views[..nv]) {
                if let Some(ts) = ts {
                    // ibv_wc_read_completion_ts and the direct path: the same 64 bits
                    assert_eq!(*ts, v.timestamp, "WR {}: completion timestamp", c.wr_id);
                    // completed in order on one QP: never earlier (one tick is 6.4 ns: equal is
                    // possible)
                    assert!(
                        *ts >= last_ts && *ts > 0,
                        "WR {}: timestamp {ts} after {last_ts}",
                        c.wr_id
                    );
                    last_ts = *ts;
                    timestamped += 1;
                }
                assert_eq!(
                    c.status,
                    sys::IBV_WC_SUCCESS,
                    "WR {}: status {} vendor error {:#x}",
                    c.wr_id,
                    c.status,
                    c.vendor_err
                );
                assert_eq!(c.qp_num, v.qpn);
                // the same work request: libmlx5 by wr_id, the direct path by WQE index
                let (wr_id, op) = posted[&v.wqe_counter];
                assert_eq!((c.wr_id, c.opcode), (wr_id, op), "CQE at WQE index {}", v.wqe_counter);
                assert_eq!(v.opcode, rdmaprobe::mlx5::cq::cqe_op::REQ);
                decoded += 1;
                due_a -= 1;
            }
            let mut out = [rdmaprobe::mlx5::cq::Cqe::default(); 16];
            let k = bcq.poll(&mut out).unwrap_or_else(|e| panic!("WR {n}: direct CQ: {e}"));
            for c in &out[..k] {
                sq.retire(c.wqe_counter);
                due_b -= 1;
            }
            for s in [&mut p, &mut q] {
                let k = s.cq.poll_raw(&mut wc).unwrap();
                for c in &wc[..k] {
                    assert_eq!(
                        c.status,
                        sys::IBV_WC_SUCCESS,
                        "peer: status {} vendor error {:#x}",
                        c.status,
                        c.vendor_err
                    );
                    let sge = [remote.sge(8192, 8192).unwrap()];
                    s.qp.post_recv(0, &sge).unwrap();
                }
            }
            // keep room: the direct SQ retires on its CQEs, libmlx5 on its own
            if due_a == 0 && due_b == 0 {
                break;
            }
            assert!(Instant::now() < deadline, "WR {n}: completions stalled");
            rdmaprobe::uverbs::progress();
        }
    }
    assert!(decoded > WRS / 8, "{decoded} completions decoded by both");
    assert_eq!(timestamped, if api_wr { decoded } else { 0 }, "timestamps read");
    eprintln!(
        "{} API: {WRS} work requests over {} wraps of a {}-WQEBB ring compared; {decoded} CQEs decoded by both, {timestamped} timestamps",
        if api_wr { "ibv_wr_*" } else { "ibv_post_send" },
        pi(&ra) / ra.wqe_cnt,
        ra.wqe_cnt
    );
}

#[test]
fn libmlx5_post_send_and_the_direct_path_write_the_same_wqes() {
    run(false, 0x9e37_79b9_7f4a_7c15);
}

#[test]
fn libmlx5_wr_api_and_the_direct_path_write_the_same_wqes() {
    run(true, 0x2545_f491_4f6c_dd1d);
}

/// libmlx5's work-completion status for an mlx5 error syndrome (providers/mlx5/cq.c,
/// `mlx5_handle_error_cqe`, rdma-core 44): the mapping both decoders must agree on.
fn wc_status_of(syndrome: u8) -> u32 {
    match syndrome {
        0x01 => sys::IBV_WC_LOC_LEN_ERR,
        0x02 => sys::IBV_WC_LOC_QP_OP_ERR,
        0x04 => sys::IBV_WC_LOC_PROT_ERR,
        0x05 => sys::IBV_WC_WR_FLUSH_ERR,
        0x06 => sys::IBV_WC_MW_BIND_ERR,
        0x10 => sys::IBV_WC_BAD_RESP_ERR,
        0x11 => sys::IBV_WC_LOC_ACCESS_ERR,
        0x12 => sys::IBV_WC_REM_INV_REQ_ERR,
        0x13 => sys::IBV_WC_REM_ACCESS_ERR,
        0x14 => sys::IBV_WC_REM_OP_ERR,
        0x15 => sys::IBV_WC_RETRY_EXC_ERR,
        0x16 => sys::IBV_WC_RNR_RETRY_EXC_ERR,
        0x22 => sys::IBV_WC_REM_ABORT_ERR,
        _ => sys::IBV_WC_GENERAL_ERR,
    }
}

/// Error CQEs, one syndrome at a time: model0 fails the first of four WRITEs with it (and
/// flushes the other three, WR_FLUSH); the direct path's CQ code and libmlx5's `ibv_poll_cq`
/// decode each CQE to the same status, vendor syndrome and work request (the direct path names
/// it by WQE index, libmlx5 by wr_id: the posting order ties them). One syndrome comes from a
/// real fault instead of an injected one: a wrong rkey.
#[test]
fn error_cqes_decode_alike() {
    let Some(ctx) = model0() else { return };
    let pd = Pd::new(&ctx).unwrap();
    let all = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_WRITE | MrAccess::REMOTE_READ | MrAccess::REMOTE_ATOMIC;
    let local = Mr::new(&pd, 16384, all, false).unwrap();
    let remote = Mr::new(&pd, 16384, all, false).unwrap();
    let cases = [0x01u8, 0x02, 0x04, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x22]
        .map(|s| (s, false))
        .into_iter()
        .chain([(0x13, true)]);
    for (syndrome, bad_rkey) in cases {
        let mk = || {
            let cq = Cq::new(&ctx, 64).unwrap();
            let qp = Qp::new_rc(&pd, &cq, &cq, CAPS, false).unwrap();
            Side { qp, cq }
        };
        let (mut a, mut p) = (mk(), mk());
        connect(&ctx, &mut a.qp, &mut p.qp);
        let ra = raw_qp(&a.qp);
        let mut shadow_ci = 0u32;
        let mut view = raw_cq(&a.cq, &mut shadow_ci);
        let mq = rdmaprobe::uverbs::model_qp(a.qp.qpn())
            .and_then(|w| w.upgrade())
            .expect("the model's QP behind the libmlx5 QP");
        if !bad_rkey {
            mq.inject_error(syndrome, 0);
        }
        let mut by_index = std::collections::HashMap::new();
        for wr_id in 0..4u64 {
            by_index.insert((pi(&ra) & 0xffff) as u16, wr_id);
            let mut rem = remote.remote(64 * wr_id as usize);
            if bad_rkey && wr_id == 0 {
                rem.rkey ^= 0x55;
            }
            let sges = [local.sge(0, 32).unwrap()];
            let flags = SendFlags {
                signaled: wr_id == 0,
                ..SendFlags::SIGNALED
            };
            a.qp.post_send(100 + wr_id, Op::Write(rem), &sges, flags).unwrap();
        }
        rdmaprobe::uverbs::progress();
        let mut seen = 0;
        let deadline = Instant::now() + Duration::from_secs(10);
        while seen < 4 {
            assert!(Instant::now() < deadline, "syndrome {syndrome:#x}: {seen} of 4 CQEs");
            let mut v = [rdmaprobe::mlx5::cq::Cqe::default(); 1];
            let e = match view.poll(&mut v) {
                Ok(0) => continue,
                Ok(_) => panic!("syndrome {syndrome:#x}: a good CQE where an error was due"),
                Err(e) => e,
            };
            let mut wc = [sys::ibv_wc::default(); 1];
            assert_eq!(
                a.cq.poll_raw(&mut wc).unwrap(),
                1,
                "libmlx5 sees the CQE the direct path saw"
            );
            let c = &wc[0];
            let want = if seen == 0 { syndrome } else { 0x05 };
            assert_eq!(e.syndrome, want, "direct: {e}");
            assert_eq!(
                c.status,
                wc_status_of(e.syndrome),
                "syndrome {:#x}: libmlx5 status",
                e.syndrome
            );
            assert_eq!(c.vendor_err, u32::from(e.vendor_syndrome), "vendor syndrome");
            assert_eq!(
                Some(&(c.wr_id - 100)),
                by_index.get(&e.wqe_counter),
                "work request of {e}"
            );
            assert_eq!(c.qp_num, e.qpn);
            assert!(!e.responder);
            seen += 1;
        }
        // the QP the model moved to error reads back as such through libibverbs
        assert_eq!(a.qp.state().unwrap(), "ERR", "syndrome {syndrome:#x}: QP state");
    }
}

/// Scatter-to-CQE, as rdma-core asks for it (hardware-fidelity point a): libmlx5 creates RC QPs
/// with `MLX5_QP_FLAG_SCATTER_CQE` unless told otherwise, and a NIC then puts a responder payload
/// of up to 32 bytes into the 64-byte CQE (`MLX5_INLINE_SCATTER_32`), leaving the receive buffer
/// untouched until libmlx5's poll copies it there (providers/mlx5/cq.c, handle_responder). A QP
/// made with `MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE` (how the direct path makes its QPs) gets
/// every payload in its buffer.
#[test]
fn scatter_to_cqe_as_rdma_core_asks_for_it() {
    let Some(ctx) = model0() else { return };
    let pd = Pd::new(&ctx).unwrap();
    let all = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_WRITE | MrAccess::REMOTE_READ | MrAccess::REMOTE_ATOMIC;
    let src = Mr::new(&pd, 4096, all, false).unwrap();
    let dst = Mr::new(&pd, 4096, all, false).unwrap();
    let payload: Vec<u8> = (0..100u8).map(|i| i.wrapping_mul(7).wrapping_add(1)).collect();
    src.write(0, &payload).unwrap();
    for no_scatter in [false, true] {
        let cq = |n| Cq::new(&ctx, n).unwrap();
        let (cqa, cqp) = (cq(64), cq(64));
        let mut a = Qp::new_rc(&pd, &cqa, &cqa, CAPS, false).unwrap();
        let mut p = if no_scatter {
            Qp::new_rc_mlx5_no_scatter(&pd, &cqp, &cqp, CAPS).unwrap()
        } else {
            Qp::new_rc(&pd, &cqp, &cqp, CAPS, false).unwrap()
        };
        connect(&ctx, &mut a, &mut p);
        let mut shadow_ci = 0u32;
        let mut view = raw_cq(&cqp, &mut shadow_ci);
        for len in [16usize, 32, 33, 100] {
            dst.write(0, &[0u8; 128]).unwrap();
            p.post_recv(len as u64, &[dst.sge(0, 128).unwrap()]).unwrap();
            a.post_send(1, Op::Send, &[src.sge(0, len).unwrap()], SendFlags::SIGNALED)
                .unwrap();
            rdmaprobe::uverbs::progress();
            let mut v = [rdmaprobe::mlx5::cq::Cqe::default(); 1];
            let deadline = Instant::now() + Duration::from_secs(10);
            while view.poll(&mut v).expect("receive completion") == 0 {
                assert!(Instant::now() < deadline, "no receive completion");
                rdmaprobe::uverbs::progress();
            }
            let scattered = !no_scatter && len <= 32;
            assert_eq!(
                v[0].scatter,
                if scattered { 32 } else { 0 },
                "{len} B, no_scatter {no_scatter}"
            );
            assert_eq!(v[0].byte_cnt as usize, len);
            let mut got = vec![0u8; len];
            dst.read(0, &mut got).unwrap();
            if scattered {
                // in the CQE, not yet in the buffer
                assert!(
                    got.iter().all(|&b| b == 0),
                    "{len} B scattered, yet the buffer was written"
                );
            } else {
                assert_eq!(got, payload[..len], "{len} B in the buffer");
            }
            // libmlx5's poll copies a scattered payload into the receive buffer
            let mut wc = [sys::ibv_wc::default(); 1];
            assert_eq!(cqp.poll_raw(&mut wc).unwrap(), 1);
            assert_eq!((wc[0].status, wc[0].byte_len as usize), (sys::IBV_WC_SUCCESS, len));
            dst.read(0, &mut got).unwrap();
            assert_eq!(got, payload[..len], "{len} B after ibv_poll_cq");
            let mut s = [sys::ibv_wc::default(); 1];
            while cqa.poll_raw(&mut s).unwrap() == 0 {
                rdmaprobe::uverbs::progress();
                assert!(Instant::now() < deadline, "no send completion");
            }
        }
    }
}

/// Sizing (hardware-fidelity point f): model0's own QPs (the direct path's on model0) get the
/// ring and the inline limit libmlx5 gives the same request on a ConnectX: a plain RC QP reserves
/// 192 B of send-WQE overhead, so asking 220 B of inline data grants 252 and 128 WQEs take 1024
/// WQEBBs, not 512.
#[test]
fn model0_sizes_qps_as_libmlx5_does() {
    use rdmaprobe::model::{Model, ModelConfig, ModelQpCaps};
    let Some(ctx) = model0() else { return };
    let pd = Pd::new(&ctx).unwrap();
    let model = Model::open(ModelConfig::default()).unwrap();
    let mcq = model.create_cq(64).unwrap();
    for (wr, inline) in [
        (128u32, 220u32),
        (64, 0),
        (16, 64),
        (1, 828),
        (256, 512),
        (1000, 100),
        (7, 221),
    ] {
        let cq = Cq::new(&ctx, 64).unwrap();
        let caps = QpCaps {
            max_send_wr: wr,
            max_recv_wr: 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: inline,
        };
        let qp = Qp::new_rc(&pd, &cq, &cq, caps, false).unwrap();
        let want = (raw_qp(&qp).wqe_cnt, qp.granted_caps().max_inline_data);
        let mqp = model
            .create_qp(
                model.alloc_pd(),
                &mcq,
                &mcq,
                ModelQpCaps {
                    max_send_wr: wr,
                    max_recv_wr: 16,
                    max_recv_sge: 1,
                    max_inline_data: inline,
                },
            )
            .unwrap();
        let got = (mqp.sq_config().wqe_cnt, mqp.sq_config().max_inline);
        assert_eq!(
            got, want,
            "max_send_wr {wr}, max_inline_data {inline}: (WQEBBs, inline granted)"
        );
    }
}

/// Creation as rdma-core allows it (hardware-fidelity point e): with no dedicated BlueFlame
/// register left (`ibv_alloc_td` fails once the device's dynamic registers are used up) the
/// direct path makes its QP on a shared register and rings it with the doorbell, and it works;
/// a QP with no receive queue (`max_recv_wr` 0: rdma-core's `wqe_cnt` 0) is accepted.
#[test]
fn direct_qps_without_a_dedicated_register_or_a_receive_queue() {
    use rdmaprobe::verbs::direct::DirectQp;
    let Some(ctx) = model0() else { return };
    let pd = Pd::new(&ctx).unwrap();
    let caps = QpCaps { max_recv_wr: 0, ..CAPS };
    let mut qps = Vec::new();
    let shared = loop {
        let q = DirectQp::new(&pd, caps, 64, DbMode::Bf).expect("direct QP, dedicated register or not");
        assert_eq!(q.sq.mode() == DbMode::Db, q.shared_register());
        if q.shared_register() {
            break q;
        }
        qps.push(q);
        assert!(qps.len() <= 64, "no fallback after {} thread domains", qps.len());
    };
    assert!(!qps.is_empty(), "the first QPs get dedicated registers");
    // the fallback QP works: a WRITE to a peer lands
    let mut peer = qps.pop().unwrap();
    let mut a = shared;
    let port = ctx.query_port(1).unwrap();
    let opts = ConnectOpts {
        port: 1,
        gid_index: None,
        access: MrAccess::LOCAL_WRITE | MrAccess::REMOTE_WRITE,
        ..Default::default()
    };
    let (ea, eb) = (a.endpoint(&port, None).unwrap(), peer.endpoint(&port, None).unwrap());
    a.connect(&port, &opts, &eb).unwrap();
    peer.connect(&port, &opts, &ea).unwrap();
    let all = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_WRITE;
    let (src, dst) = (
        Mr::new(&pd, 4096, all, false).unwrap(),
        Mr::new(&pd, 4096, all, false).unwrap(),
    );
    src.write(0, b"shared register").unwrap();
    let seg = [DataSeg::new(src.addr(), src.lkey(), 15)];
    let idx =
        a.sq.post_and_ring(&Wqe::write(dst.addr(), dst.rkey(), Payload::Gather(&seg)).signaled())
            .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out = [rdmaprobe::mlx5::cq::Cqe::default(); 1];
    loop {
        rdmaprobe::uverbs::progress();
        if a.cq.poll(&mut out).unwrap() == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "no completion on the shared-register QP");
    }
    assert_eq!(out[0].wqe_counter, idx);
    let mut got = [0u8; 15];
    dst.read(0, &mut got).unwrap();
    assert_eq!(&got, b"shared register");
    // no receive queue: a receive is refused, typed
    assert!(a.rq.post(&seg).is_err());
}

/// UD (issue 14 part 1): SENDs to an address handle, posted through libmlx5 (`ibv_post_send`,
/// the handle in `wr.ud`) on one UD QP and built by the direct path on a second
/// (`DirectQp::datagrams_to`: the address vector `mlx5dv_init_obj` gives for a handle to the same
/// peer, with the QP number and Q_Key filled in): sizes from 0 to 1 KiB, gathered and inline,
/// with and without an immediate, signalled or not, over several wraps of the ring. The WQEs
/// agree byte for byte (the datagram segment included; the QP numbers and inline padding aside),
/// and model0 delivers both to the peer, whose work completions name each sender's QP and count
/// the 40-byte GRH area.
#[test]
fn ud_sends_libmlx5_and_the_direct_path_write_the_same_wqes() {
    use rdmaprobe::verbs::direct::DirectQp;
    use rdmaprobe::verbs::qp::Ah;
    const QKEY: u32 = 0x1111_1111;
    let Some(ctx) = model0() else { return };
    let pd = Pd::new(&ctx).unwrap();
    let port = ctx.query_port(1).unwrap();
    let local = Mr::new(&pd, 16384, MrAccess::LOCAL_WRITE, false).unwrap();
    let rx = Mr::new(&pd, 1 << 20, MrAccess::LOCAL_WRITE, false).unwrap();
    let pattern: Vec<u8> = (0..16384u32).map(|i| (i * 29 + 3) as u8).collect();
    local.write(0, &pattern).unwrap();
    let caps = QpCaps {
        max_inline_data: 64,
        ..CAPS
    };
    let (cqa, cqp) = (Cq::new(&ctx, 1024).unwrap(), Cq::new(&ctx, 1024).unwrap());
    let mut a = Qp::new_ud(&pd, &cqa, &cqa, caps, false).unwrap();
    let mut b = DirectQp::with_type(&pd, caps, 1024, DbMode::Bf, sys::IBV_QPT_UD).expect("direct UD QP");
    let mut p = Qp::new_ud(&pd, &cqp, &cqp, caps, false).unwrap();
    a.connect_ud(&port, 0, QKEY).unwrap();
    b.connect_ud(&port, 0, QKEY).unwrap();
    p.connect_ud(&port, 0, QKEY).unwrap();
    let ep = p.endpoint(&port, None).unwrap();
    let ah = Ah::new(&pd, &port, &ep, None, (0, 0)).unwrap();
    let av = b.datagrams_to(&pd, &port, &ep, None, (0, 0), QKEY).unwrap();
    let (ra, rb) = (raw_qp(&a), raw_qp(b.verbs_qp()));
    assert_eq!(ra.wqe_cnt, rb.wqe_cnt, "same capabilities, same ring");
    let max_inline = a.granted_caps().max_inline_data as usize;
    assert_eq!(max_inline as u32, b.max_inline(), "UD QPs of the same capabilities");
    // the peer's receives: 1 KiB + the GRH area each, in slots of 2 KiB
    let slots = 256;
    for i in 0..slots {
        p.post_recv(i, &[rx.sge(i as usize * 2048, 2048).unwrap()]).unwrap();
    }
    let (qa, qb) = (a.qpn(), b.qpn());
    let mut rng = Rng(0x5851_f42d_4c95_7f2d);
    let (mut from_a, mut from_b, mut due_a, mut due_b) = (0u32, 0u32, 0u32, 0u32);
    let n_wrs = 600;
    for n in 0..n_wrs {
        let inline = max_inline > 0 && rng.below(3) == 0;
        let len = match rng.below(4) {
            0 => 0,
            _ if inline => rng.below(max_inline as u64 + 1) as usize,
            1 => 1 + rng.below(16) as usize,
            _ => rng.below(1025) as usize,
        };
        let off = rng.below(8192) as usize;
        let imm = rng.below(2) == 1;
        let signaled = rng.below(2) == 0 || n % 16 == 15;
        let sge = local.sge(off, len).unwrap();
        let mut raw_sge = sge.raw();
        let mut wr = sys::ibv_send_wr {
            wr_id: n as u64,
            sg_list: &mut raw_sge,
            num_sge: i32::from(len > 0),
            opcode: if imm {
                sys::IBV_WR_SEND_WITH_IMM
            } else {
                sys::IBV_WR_SEND
            },
            send_flags: (if signaled { sys::IBV_SEND_SIGNALED } else { 0 })
                | (if inline { sys::IBV_SEND_INLINE } else { 0 }),
            ..Default::default()
        };
        if imm {
            wr.__bindgen_anon_1.imm_data = (n as u32).to_be();
        }
        wr.wr.ud = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_3 {
            ah: ah.as_ptr(),
            remote_qpn: ep.qpn,
            remote_qkey: QKEY,
        };
        clear_reg(&ra);
        clear_reg(&rb);
        let (pa, pb) = (pi(&ra), pi(&rb));
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live UD QP; the WR and its one SGE (inside `local`) live across the call.
        let rc = unsafe { rdmaprobe::sys::inline::post_send(a.as_ptr(), &mut wr, &mut bad) };
        assert_eq!(rc, 0, "WR {n}: ibv_post_send");
        let segs = [DataSeg::new(raw_sge.addr, raw_sge.lkey, len as u32)];
        let payload = if inline {
            Payload::Inline(&pattern[off..off + len])
        } else {
            Payload::Gather(&segs)
        };
        let w = if imm {
            Wqe::send_imm(n as u32, payload)
        } else {
            Wqe::send(payload)
        }
        .to(&av);
        let w = if signaled { w.signaled() } else { w };
        if inline && n % 2 == 1 {
            // every other inline WR as the direct backend posts it: an image prepared with
            // other bytes, given the payload at the post (garbage after it in the source)
            let stale = vec![0u8; len];
            let s = if imm {
                Wqe::send_imm(n as u32, Payload::Inline(&stale))
            } else {
                Wqe::send(Payload::Inline(&stale))
            }
            .to(&av);
            let mut p = Prepared::new(&s, b.qpn(), 256).unwrap_or_else(|e| panic!("WR {n}: prepare: {e}"));
            let mut src = pattern[off..off + len].to_vec();
            src.resize(len + 64, 0xee);
            b.sq.post_prepared_ring_inline(&mut p, &src, signaled)
        } else {
            b.sq.post_and_ring(&w)
        }
        .unwrap_or_else(|e| panic!("WR {n}: direct: {e}"));
        let what = format!("WR {n}: {len} B inline {inline} imm {imm} signaled {signaled}");
        assert_eq!(pi(&ra) - pa, pi(&rb) - pb, "{what}: WQEBBs");
        let bytes = 64 * (pi(&ra) - pa) as usize;
        let (wa, wb) = (wqe_bytes(&ra, pa, bytes), wqe_bytes(&rb, pb, bytes));
        // inline padding: libmlx5 copies exactly the payload (providers/mlx5/qp.c
        // set_data_inl_seg); the bytes up to the 16-byte boundary keep what the ring held
        let start = 64 + 4;
        let pad = start + len..(start + len).next_multiple_of(16);
        let skip: Vec<std::ops::Range<usize>> = std::iter::once(pad).filter(|_| inline && len > 0).collect();
        let d = diff_wqe(&wa, qa, &wb, qb, &skip);
        assert!(d.is_empty(), "{what}:\n  {}", d.join("\n  "));
        if n < 32 {
            comparator_sees_every_byte(&wa, qa, &wb, qb, &skip);
        }
        if signaled {
            due_a += 1;
            due_b += 1;
        }
        // model0 executes both; drain what completed, repost the peer's receives
        rdmaprobe::uverbs::progress();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut wc = [sys::ibv_wc::default(); 16];
            let k = cqa.poll_raw(&mut wc).unwrap();
            for c in &wc[..k] {
                assert_eq!(c.status, sys::IBV_WC_SUCCESS, "A: status {}", c.status);
                due_a -= 1;
            }
            let mut out = [rdmaprobe::mlx5::cq::Cqe::default(); 16];
            let k = b.cq.poll(&mut out).unwrap_or_else(|e| panic!("{what}: direct CQ: {e}"));
            for c in &out[..k] {
                b.sq.retire(c.wqe_counter);
                due_b -= 1;
            }
            let k = cqp.poll_raw(&mut wc).unwrap();
            for c in &wc[..k] {
                assert_eq!(c.status, sys::IBV_WC_SUCCESS, "peer: status {}", c.status);
                assert!(c.byte_len >= 40, "{what}: the GRH area counted: {}", c.byte_len);
                match c.src_qp {
                    s if s == qa => from_a += 1,
                    s if s == qb => from_b += 1,
                    s => panic!("{what}: a datagram from QP {s:#x}, neither {qa:#x} nor {qb:#x}"),
                }
                p.post_recv(c.wr_id, &[rx.sge(c.wr_id as usize * 2048, 2048).unwrap()])
                    .unwrap();
            }
            if due_a == 0 && due_b == 0 && from_a == from_b && from_a == n as u32 + 1 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: completions stalled (A {due_a} due, B {due_b} due; received {from_a} from A, {from_b} from B)"
            );
            rdmaprobe::uverbs::progress();
        }
    }
    eprintln!(
        "UD: {n_wrs} SENDs compared over {} wraps of a {}-WQEBB ring; the peer received {from_a} from libmlx5's QP and \
         {from_b} from the direct path's",
        pi(&ra) / ra.wqe_cnt,
        ra.wqe_cnt
    );
}

// ---- model0's NIC clock through libibverbs and libmlx5 (issue 26, point 3): `ibv_query_device_ex`
// reports its rate and mask, `ibv_query_rt_values_ex` reads its timer page,
// `ibv_create_cq_ex(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP)` makes CQs whose completions
// `ibv_wc_read_completion_ts` reads, `mlx5dv_get_clock_info` and `mlx5dv_ts_to_ns` convert them,
// and the direct path's decoding of the same CQEs gives the same timestamps.

const TS_CAPS: QpCaps = QpCaps {
    max_send_wr: 64,
    max_recv_wr: 64,
    max_send_sge: 1,
    max_recv_sge: 1,
    max_inline_data: 64,
};

fn one_direct(view: &mut DirectCq) -> Cqe {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut v = [Cqe::default(); 1];
    while view.poll(&mut v).expect("a good CQE") == 0 {
        assert!(Instant::now() < deadline, "no completion within 10 s");
        rdmaprobe::uverbs::progress();
    }
    v[0]
}

fn one_ts(cq: &Cq) -> TsCompletion {
    let mut out = Vec::new();
    assert_eq!(cq.poll_ts(&mut out, 4).expect("ibv_start_poll"), 1, "{out:?}");
    assert_eq!(out[0].c.status, sys::IBV_WC_SUCCESS, "{out:?}");
    out[0]
}

#[test]
fn completion_timestamps_through_libmlx5_match_the_direct_decoding_and_the_clock() {
    let Some(ctx) = model0() else { return };
    let caps = ctx.nic_clock_caps().expect("ibv_query_device_ex");
    assert_eq!(
        (caps.timestamp_mask, caps.hca_core_clock_khz),
        (TIMESTAMP_MASK, HCA_CORE_CLOCK_KHZ)
    );
    assert!(caps.usable());
    let pd = Pd::new(&ctx).unwrap();
    let all = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_WRITE | MrAccess::REMOTE_READ;
    let (src, dst) = (
        Mr::new(&pd, 4096, all, false).unwrap(),
        Mr::new(&pd, 4096, all, false).unwrap(),
    );
    let (cqa, cqp) = (
        Cq::with_timestamps(&ctx, 64).unwrap(),
        Cq::with_timestamps(&ctx, 64).unwrap(),
    );
    assert!(cqa.has_timestamps() && !Cq::new(&ctx, 8).unwrap().has_timestamps());
    let mut a = Qp::new_rc(&pd, &cqa, &cqa, TS_CAPS, false).unwrap();
    let mut p = Qp::new_rc(&pd, &cqp, &cqp, TS_CAPS, false).unwrap();
    connect(&ctx, &mut a, &mut p);
    let (mut sa, mut sp) = (0u32, 0u32);
    let (mut va, mut vp) = (raw_cq(&cqa, &mut sa), raw_cq(&cqp, &mut sp));
    let mut clock_info = sys::mlx5dv_clock_info::default();
    // SAFETY: a live mlx5 context; a valid out-struct.
    let rc = unsafe { sys::mlx5dv_get_clock_info(ctx.as_ptr(), &mut clock_info) };
    assert_eq!(rc, 0, "mlx5dv_get_clock_info");
    let mut last = 0u64;
    for i in 0..32u64 {
        p.post_recv(i, &[dst.sge(0, 64).unwrap()]).unwrap();
        let before = ctx.nic_clock().expect("ibv_query_rt_values_ex");
        a.post_send(i, Op::Send, &[src.sge(0, 8 + i as usize).unwrap()], SendFlags::SIGNALED)
            .unwrap();
        let (recv, send) = (one_direct(&mut vp), one_direct(&mut va));
        let after = ctx.nic_clock().unwrap();
        // asked for none, none taken (the completion stays for the next poll)
        assert_eq!(cqp.poll_ts(&mut Vec::new(), 0).unwrap(), 0);
        let (tr, ts) = (one_ts(&cqp), one_ts(&cqa));
        // libmlx5 and the direct path read the same 64 bits of the same CQEs
        assert_eq!(
            (tr.timestamp, ts.timestamp),
            (recv.timestamp, send.timestamp),
            "send {i}"
        );
        assert_eq!((tr.c.wr_id, tr.c.byte_len, ts.c.wr_id), (i, 8 + i as u32, i));
        // stamped when model0 completed the work, between the two reads of the timer page: the
        // receive first (model0 delivers, then completes the send), each later than the last
        assert!(
            last < tr.timestamp && before <= tr.timestamp && tr.timestamp <= ts.timestamp && ts.timestamp <= after,
            "send {i}: last {last}, timer {before}, receive {}, send {}, timer {after}",
            tr.timestamp,
            ts.timestamp
        );
        last = ts.timestamp;
        // mlx5dv_ts_to_ns reads model0's clock-info page as the page means it: the real time
        // it was paired with plus the ticks since, 6.4 ns each (6710886 >> 20: 60 ppb slow)
        // SAFETY: the clock info read above; a plain computation.
        let ns = unsafe { sys::mlx5dv_ts_to_ns(&mut clock_info, ts.timestamp) };
        let ci = &clock_info;
        assert_eq!((ci.mult, ci.shift, ci.mask), (6_710_886, 20, (1 << 41) - 1), "{ci:?}");
        let ticks = ts.timestamp.wrapping_sub(ci.last_cycles) & ci.mask;
        assert!(ticks < ci.mask / 2, "send {i}: {ticks} ticks after the page's pairing");
        let since = (ticks as u128 * 6_400 / 1_000) as u64; // exact 6.4 ns a tick
        let got = ns - ci.nsec;
        assert!(
            got <= since && since - got <= 1 + since / 10_000_000,
            "send {i}: {got} ns after the pairing, {ticks} ticks = {since} ns"
        );
    }
}

/// The timer page read through `ibv_query_rt_values_ex` runs at the rate `hca_core_clock`
/// states: ticks over 200 ms of the raw monotonic clock, each end bracketed by two readings of
/// it, so the rate's bounds hold whatever the host's preemption does; they must contain 156.25
/// MHz (with 100 ppm for the tick's granularity: 1 tick in 31250).
#[test]
fn the_raw_clock_runs_at_the_stated_rate() {
    let Some(ctx) = model0() else { return };
    // bracketed by CLOCK_MONOTONIC_RAW, the clock model0's counter follows (not slewed as
    // CLOCK_MONOTONIC may be by a time daemon): the bounds are exact but for the 6.4 ns tick
    let raw = || rdmaprobe::clock::monotonic_raw_ns().expect("CLOCK_MONOTONIC_RAW");
    let read = || {
        let t0 = raw();
        let c = ctx.nic_clock().expect("ibv_query_rt_values_ex");
        (t0, c, raw())
    };
    let (a0, c0, a1) = read();
    std::thread::sleep(Duration::from_millis(200));
    let (b0, c1, b1) = read();
    let ticks = (c1 - c0) as f64;
    let (longest, shortest) = ((b1 - a0) as f64, (b0 - a1) as f64);
    let khz = HCA_CORE_CLOCK_KHZ as f64;
    let (lo, hi) = (ticks / longest * 1e6, ticks / shortest * 1e6);
    assert!(
        lo * 0.9999 <= khz && khz <= hi * 1.0001,
        "{ticks} ticks: {lo:.1}..{hi:.1} kHz, stated {khz}"
    );
}

/// The NIC clock mapped to the TSC on model0 through libmlx5 (`NicClockMap`): the rate it
/// measures passes the check against `hca_core_clock`, and a completion's timestamp maps to a
/// TSC between the two TSC reads around the work, within the map's stated error.
#[test]
fn the_nic_clock_maps_to_the_tsc_at_the_stated_rate() {
    let Some(ctx) = model0() else { return };
    let hz = rdmaprobe::clock::Calibration::run(100_000_000).unwrap().hz;
    let m = rdmaprobe::verbs::NicClockMap::measure(&ctx, hz, Duration::from_millis(100), 21).unwrap();
    assert_eq!(m.stated_khz, HCA_CORE_CLOCK_KHZ);
    assert!(m.rate_check().is_ok(), "{m:?}");
    let pd = Pd::new(&ctx).unwrap();
    let all = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_WRITE | MrAccess::REMOTE_READ;
    let (src, dst) = (
        Mr::new(&pd, 4096, all, false).unwrap(),
        Mr::new(&pd, 4096, all, false).unwrap(),
    );
    let cq = Cq::with_timestamps(&ctx, 64).unwrap();
    let (mut a, mut p) = (
        Qp::new_rc(&pd, &cq, &cq, TS_CAPS, false).unwrap(),
        Qp::new_rc(&pd, &cq, &cq, TS_CAPS, false).unwrap(),
    );
    connect(&ctx, &mut a, &mut p);
    let err_ticks = m.error_ns() * hz / 1e9;
    for i in 0..16u64 {
        let t0 = rdmaprobe::clock::start();
        a.post_send(
            i,
            Op::Write(dst.remote(0)),
            &[src.sge(0, 8).unwrap()],
            SendFlags::SIGNALED,
        )
        .unwrap();
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while cq.poll_ts(&mut out, 1).unwrap() == 0 {
            assert!(Instant::now() < deadline, "no completion");
        }
        let t1 = rdmaprobe::clock::stop();
        let at = m.tsc_of(out[0].timestamp);
        assert!(
            t0 as f64 - err_ticks <= at && at <= t1 as f64 + err_ticks,
            "WRITE {i}: completion mapped to TSC {at:.0}, the work between {t0} and {t1} (± {err_ticks:.0}): {m:?}"
        );
    }
}
