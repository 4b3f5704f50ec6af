//! Completions and errors: the syndromes model0 reports, CQEs written as hardware writes them
//! (owner bit last, overruns counted), and a QP moved to error.

use super::layout::{bump32, bump64, cq_counters, cq_dbrec, hdr, lock, state, unlock, CqHdr, QpHdr, PAGE};
use super::recv::flush_rq;
use super::shm::Shm;
use super::Model;
use crate::mlx5::cq::cqe_op;
use std::sync::atomic::{fence, AtomicU8, Ordering};

/// Syndromes the model reports (`MLX5_CQE_SYNDROME_*`).
pub mod syndrome {
    use crate::sys;
    /// Local length error.
    pub const LOCAL_LENGTH: u8 = sys::MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR as u8;
    /// Malformed WQE.
    pub const LOCAL_QP_OP: u8 = sys::MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR as u8;
    /// Bad lkey or local bounds.
    pub const LOCAL_PROT: u8 = sys::MLX5_CQE_SYNDROME_LOCAL_PROT_ERR as u8;
    /// Flushed: the QP was in error.
    pub const WR_FLUSH: u8 = sys::MLX5_CQE_SYNDROME_WR_FLUSH_ERR as u8;
    /// The responder rejected the request (length, alignment).
    pub const REMOTE_INVAL_REQ: u8 = sys::MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR as u8;
    /// Bad rkey, bounds or access rights at the responder.
    pub const REMOTE_ACCESS: u8 = sys::MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR as u8;
    /// No responder (peer gone or not ready).
    pub const TRANSPORT_RETRY_EXC: u8 = sys::MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR as u8;
    /// No receive posted and RNR retries used up.
    pub const RNR_RETRY_EXC: u8 = sys::MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR as u8;
}

/// One CQE to write.
#[derive(Clone, Copy, Default)]
pub(super) struct CqeOut {
    pub(super) op: u8,
    pub(super) qpn: u32,
    pub(super) uidx: u32,
    /// Responder payload scattered into the CQE (scatter-to-CQE), its length in `scatter.0`.
    pub(super) scatter: (u8, [u8; 32]),
    pub(super) wqe_counter: u16,
    pub(super) byte_cnt: u32,
    pub(super) imm: u32,
    pub(super) syndrome: u8,
    pub(super) wqe_opcode: u8,
    /// A receive of a message sent solicited (it raises an event at a CQ armed for solicited
    /// completions only).
    pub(super) solicited: bool,
    /// The requester's QP (a responder CQE's `flags_rqpn`: UD receives report it).
    pub(super) src_qp: u32,
}

pub(super) fn push_cqe(m: &Model, cq: &Shm, c: CqeOut) {
    let h: &CqHdr = hdr(cq);
    lock(&h.lock);
    // SAFETY: a field of the header, inside the mapping; read once (another process may own it).
    let cnt = unsafe { std::ptr::read_volatile(&h.cqe_cnt) };
    // SAFETY: as above.
    let stride = if unsafe { std::ptr::read_volatile(&h.cqe_128) } != 0 {
        128
    } else {
        64
    };
    let pi = h.pi.load(Ordering::Relaxed);
    // the CQ's header may be another process's: its size must fit the mapping
    let fits = cnt.is_power_of_two() && PAGE + cnt as usize * stride <= cq.len();
    let Some(db) = cq_dbrec(m, cq).filter(|_| fits) else {
        h.overruns.fetch_add(1, Ordering::Relaxed);
        unlock(&h.lock);
        return;
    };
    // SAFETY: the consumer's doorbell record (checked by cq_dbrec).
    let ci = u32::from_be(unsafe { std::ptr::read_volatile(db) });
    if (pi.wrapping_sub(ci) & 0xff_ffff) >= cnt {
        h.overruns.fetch_add(1, Ordering::Relaxed);
        unlock(&h.lock);
        return;
    }
    let mut b = [0u8; 64];
    let n = c.scatter.0 as usize;
    b[..n].copy_from_slice(&c.scatter.1[..n]);
    b[32..36].copy_from_slice(&(c.uidx & 0xff_ffff).to_be_bytes());
    b[36..40].copy_from_slice(&c.imm.to_ne_bytes());
    // flags_rqpn (at 24, where a 32-byte scatter would be: UD receives scatter nothing)
    if n <= 24 {
        b[24..28].copy_from_slice(&(c.src_qp & 0xff_ffff).to_be_bytes());
    }
    b[44..48].copy_from_slice(&c.byte_cnt.to_be_bytes());
    // sop_drop_qpn: a requester CQE carries the WQE's opcode in its top byte (libmlx5 takes the
    // work completion's opcode from it), as does an error CQE (s_wqe_opcode_qpn)
    if c.op == cqe_op::REQ_ERR || c.op == cqe_op::RESP_ERR {
        b[55] = c.syndrome;
    } else {
        // the NIC clock when the model completes the work (mlx5_cqe64.timestamp; an error
        // CQE's bytes there are reserved)
        b[48..56].copy_from_slice(&super::clock::cqe_stamp().to_be_bytes());
    }
    let q = if c.op == cqe_op::REQ || c.op == cqe_op::REQ_ERR || c.op == cqe_op::RESP_ERR {
        ((c.wqe_opcode as u32) << 24) | (c.qpn & 0xff_ffff)
    } else {
        c.qpn & 0xff_ffff
    };
    b[56..60].copy_from_slice(&q.to_be_bytes());
    b[60..62].copy_from_slice(&c.wqe_counter.to_be_bytes());
    // bit 2: MLX5_INLINE_SCATTER_32
    let owner = ((pi & cnt) != 0) as u8 | if n > 0 { 0x04 } else { 0 };
    // SAFETY: slot inside the CQ buffer; the body is written before the owner byte, which is
    // published with release ordering (the consumer reads it, then fences, then the body).
    unsafe {
        // a 128-byte entry holds its 64-byte CQE in its second half
        let slot = cq.ptr().add(PAGE + (pi & (cnt - 1)) as usize * stride + (stride - 64));
        std::ptr::copy_nonoverlapping(b.as_ptr(), slot, 63);
        fence(Ordering::Release);
        (*(slot.add(63) as *const AtomicU8)).store((c.op << 4) | owner, Ordering::Release);
    }
    h.pi.store(pi.wrapping_add(1), Ordering::Relaxed);
    let ctr = cq_counters(cq);
    bump64(&ctr.cqes, 1);
    let error = c.op == cqe_op::REQ_ERR || c.op == cqe_op::RESP_ERR;
    if error {
        bump32(&ctr.errors[(c.syndrome & 63) as usize], 1);
    }
    event_if_armed(cq, db, error || c.solicited, |_| true);
    unlock(&h.lock);
}

/// Under the CQ's lock, after a CQE was written or an arm was given: raises the event when the
/// CQ has a channel and its arm record holds an arm not yet answered ([`super::events::armed`])
/// that `pending` (given the arm) says has a completion to report; the arm is then answered.
fn event_if_armed(cq: &Shm, db: *mut u32, solicited_or_error: bool, pending: impl Fn(u32) -> bool) {
    let h: &CqHdr = hdr(cq);
    // SAFETY: a field of the header, read once (another process may own it).
    let chan = unsafe { std::ptr::read_volatile(&h.chan) };
    if chan == 0 {
        return;
    }
    // The CQE's (or the arm's) store before the arm's load (a full fence: a store and a later
    // load of another address may otherwise pass each other, even on x86). The program arms,
    // then polls (libmlx5's arm, then the poll wrapper's or libibverbs' locked instructions):
    // with a fence on both sides, either this load sees the arm or the program's poll sees the
    // CQE.
    fence(Ordering::SeqCst);
    // SAFETY: the arm record follows the consumer's record (cq_dbrec checked 8 bytes).
    let arm = u32::from_be(unsafe { std::ptr::read_volatile(db.add(1)) });
    if !super::events::armed(arm, h.arm_seen.load(Ordering::Relaxed), solicited_or_error) || !pending(arm) {
        return;
    }
    h.arm_seen.store(arm, Ordering::Relaxed);
    // SAFETY: header fields, read once.
    let (handle, owner) = unsafe {
        (
            std::ptr::read_volatile(&h.user_handle),
            std::ptr::read_volatile(&h.obj.owner_pid),
        )
    };
    let ctr = cq_counters(cq);
    if super::events::raise(chan, handle, owner) {
        bump64(&ctr.events, 1);
    } else {
        bump64(&ctr.events_lost, 1);
    }
}

/// The program armed CQ `cq` (`ibv_req_notify_cq` for every completion): as a ConnectX, which
/// compares the arm's consumer index with its producer index, an arm given while completions
/// are already in the CQ beyond that index raises the event now (a program that polls a bounded
/// number of completions per event, as `ibv_rc_pingpong -e` two, leaves some there and waits
/// for the event they owe it). Solicited-only arms are left to the next solicited completion.
pub(super) fn arm_given(m: &Model, cq: &Shm) {
    let h: &CqHdr = hdr(cq);
    lock(&h.lock);
    if let Some(db) = cq_dbrec(m, cq) {
        let pi = h.pi.load(Ordering::Relaxed);
        event_if_armed(cq, db, false, |arm| (arm & 0xff_ffff) != (pi & 0xff_ffff));
    }
    unlock(&h.lock);
}

pub(super) fn set_err(m: &Model, q: &Shm) {
    let h: &QpHdr = hdr(q);
    h.state.store(state::ERR, Ordering::Release);
    flush_rq(m, q);
}
