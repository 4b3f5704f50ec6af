//! The receive side: a receive WQE consumed by a SEND or WRITE with immediate (data scattered,
//! responder CQE written), receives flushed on a QP in error, and what posting receives sets off.

use super::cqe::{push_cqe, set_err, syndrome, CqeOut};
use super::decode::Decoded;
use super::direct::RegCheck;
use super::exec::{execute, resolve, Outcome};
use super::layout::{hdr, lock, qp_dbrec, rings, state, unlock, CqHdr, QpHdr};
use super::payload::Payload;
use super::shm::{ObjKind, Shm};
use super::srq;
use super::{ExecMode, Model};
use crate::mlx5::cq::cqe_op;
use crate::mlx5::rq::INVALID_LKEY;
use crate::sys;
use std::sync::atomic::{fence, Ordering};

/// Flushes every posted, unconsumed receive of `q` with WR_FLUSH responder CQEs.
pub(super) fn flush_rq(m: &Model, q: &Shm) {
    let _scope = Model::scope();
    let h: &QpHdr = hdr(q);
    // an SRQ's receives stay for its other QPs
    if h.srqn != 0 {
        return;
    }
    let Some(cq) = m.lookup(ObjKind::Cq, h.recv_cqn) else {
        return;
    };
    let Some(db) = qp_dbrec(m, q) else { return };
    lock(&h.rq_lock);
    // SAFETY: the receive counter, dbrec[0] (checked by qp_dbrec).
    let head = u32::from_be(unsafe { std::ptr::read_volatile(db) }) & 0xffff;
    let mut ci = h.rq_ci.load(Ordering::Relaxed);
    while (ci & 0xffff) != head {
        push_cqe(
            m,
            &cq,
            CqeOut {
                op: cqe_op::RESP_ERR,
                qpn: h.obj.id,
                uidx: h.uidx,
                wqe_counter: ci as u16,
                syndrome: syndrome::WR_FLUSH,
                ..Default::default()
            },
        );
        ci = ci.wrapping_add(1);
    }
    h.rq_ci.store(ci, Ordering::Relaxed);
    unlock(&h.rq_lock);
}

/// Takes a receive of `peer` (from its receive queue, or from its shared receive queue) for a
/// message from QP `src_qp` (the responder CQE names it, as a UD receive's does).
pub(super) fn deliver_to_receiver(
    m: &Model,
    peer: &Shm,
    d: &Decoded,
    payload: &Payload,
    resp_op: u8,
    src_qp: u32,
) -> Outcome {
    let ph: &QpHdr = hdr(peer);
    // SAFETY: a header field inside the mapping, read once (its owner may change it).
    let srqn = unsafe { std::ptr::read_volatile(&ph.srqn) };
    if srqn == 0 {
        let Some(db) = qp_dbrec(m, peer) else {
            return Outcome::Fail(syndrome::TRANSPORT_RETRY_EXC);
        };
        let Some(r) = rings(peer) else {
            return Outcome::Fail(syndrome::TRANSPORT_RETRY_EXC);
        };
        lock(&ph.rq_lock);
        let t = take_and_scatter(m, ph, (d, payload, resp_op, src_qp), || {
            // SAFETY: the peer's receive counter (checked by qp_dbrec).
            let head = u32::from_be(unsafe { std::ptr::read_volatile(db) }) & 0xffff;
            let ci = ph.rq_ci.load(Ordering::Relaxed);
            if (ci & 0xffff) == head {
                return Ok(None);
            }
            fence(Ordering::Acquire);
            ph.rq_ci.store(ci.wrapping_add(1), Ordering::Relaxed);
            let stride = r.rq_stride as usize;
            // SAFETY: the receive WQE at slot ci inside the peer's RQ ring (checked by rings).
            let wqe = unsafe { r.rq.add((ci & (r.rq_cnt - 1)) as usize * stride) };
            Ok(Some((wqe, stride, ci as u16, ph.pd)))
        });
        unlock(&ph.rq_lock);
        return t.after_unlock(m, (peer, ph));
    }
    // an SRQ of the QP's own process only (a forged number takes no one else's receives)
    let Some(s) = m
        .lookup(ObjKind::Srq, srqn)
        .filter(|s| hdr::<srq::SrqHdr>(s).obj.owner_pid == ph.obj.owner_pid)
    else {
        return Outcome::Fail(syndrome::TRANSPORT_RETRY_EXC);
    };
    let held = srq::Locked::new(&s);
    let t = take_and_scatter(m, ph, (d, payload, resp_op, src_qp), || {
        Ok(srq::take(m, &s)?.map(|w| (w.segs, w.len, w.index, hdr::<srq::SrqHdr>(&s).pd)))
    });
    drop(held);
    t.after_unlock(m, (peer, ph))
}

/// Whether `peer` has a receive posted (in its receive queue, or its SRQ): `None` when its
/// queue is not one.
pub(super) fn receive_posted(m: &Model, peer: &Shm) -> Option<bool> {
    let ph: &QpHdr = hdr(peer);
    // SAFETY: a header field inside the mapping, read once (its owner may change it).
    let srqn = unsafe { std::ptr::read_volatile(&ph.srqn) };
    if srqn != 0 {
        let s = m.lookup(ObjKind::Srq, srqn)?;
        return srq::posted(m, &s);
    }
    let db = qp_dbrec(m, peer)?;
    // SAFETY: the peer's receive counter (checked by qp_dbrec).
    let head = u32::from_be(unsafe { std::ptr::read_volatile(db) });
    Some(ph.rq_ci.load(Ordering::Relaxed) & 0xffff != head & 0xffff)
}

/// What [`take_and_scatter`] came to, under the receive queue's lock: what moves the responder
/// to error (which flushes its receive queue, taking that lock) is done after it is let go.
enum Took {
    Out(Outcome),
    /// The responder's CQ overflowed.
    Overrun,
    /// The receive with this WQE counter failed with this syndrome (its error CQE goes into the
    /// CQ).
    Failed(super::lookup::ObjRef, u16, u8),
}

impl Took {
    fn after_unlock(self, m: &Model, (peer, ph): (&Shm, &QpHdr)) -> Outcome {
        match self {
            Took::Out(o) => o,
            Took::Overrun => {
                set_err(m, peer);
                Outcome::Fail(syndrome::TRANSPORT_RETRY_EXC)
            }
            Took::Failed(rcq, counter, s) => receive_failed(m, (peer, ph), &rcq, counter, s),
        }
    }
}

/// A receive WQE taken: its scatter entries, their bytes, the CQE's WQE counter, the PD its
/// keys must be of.
type Taken = (*mut u8, usize, u16, u32);

/// The receive `take` gives (its queue's lock held by the caller) filled with the message and
/// completed: `take` answers `Ok(None)` when no receive is posted (the sender stalls), `Err` when
/// the queue is not one (the sender's retries are exceeded).
#[inline(always)]
fn take_and_scatter(
    m: &Model,
    ph: &QpHdr,
    (d, payload, resp_op, src_qp): (&Decoded, &Payload, u8, u32),
    take: impl FnOnce() -> Result<Option<Taken>, ()>,
) -> Took {
    let Some(rcq) = m.lookup(ObjKind::Cq, ph.recv_cqn) else {
        return Took::Out(Outcome::Fail(syndrome::TRANSPORT_RETRY_EXC));
    };
    // the responder's CQ overflowed: it is in error and so is the responder QP (a ConnectX's CQ
    // error); the requester sees its peer gone
    if hdr::<CqHdr>(&rcq).overruns.load(Ordering::Relaxed) > 0 {
        return Took::Overrun;
    }
    let (rwqe, stride, counter, pd) = match take() {
        Ok(Some(t)) => t,
        Ok(None) => return Took::Out(Outcome::Stall),
        Err(()) => return Took::Out(Outcome::Fail(syndrome::TRANSPORT_RETRY_EXC)),
    };
    let write_len = if resp_op == cqe_op::RESP_WR_IMM {
        0
    } else {
        payload.len()
    };
    // scatter-to-CQE (the QP asked for it at creation): a payload of at
    // most 32 bytes goes into the CQE, the receive buffer stays untouched (its entries are
    // still checked, as the NIC checks the receive WQE)
    let scatter = ph.scatter_cqe != 0 && write_len > 0 && write_len <= ph.scatter_cqe.min(32) as usize;
    let to = (pd, ph.obj.owner_pid);
    if let Some(s) = scatter_payload(m, to, (rwqe, stride), payload, write_len, scatter) {
        return Took::Failed(rcq, counter, s);
    }
    // the CQE is written before the receive queue is let go: two senders delivering into one
    // receive queue at once (threads, or processes) complete its receives in its order, as a
    // NIC does, and as libmlx5 assumes (for a QP's own receive queue it takes a receive's wr_id
    // from its own tail, not from the CQE's WQE counter; for an SRQ by the counter). Lock
    // order: the receive queue's (or the SRQ's), then the CQ's (as flush_rq).
    push_cqe(
        m,
        &rcq,
        CqeOut {
            op: resp_op,
            qpn: ph.obj.id,
            uidx: ph.uidx,
            wqe_counter: counter,
            byte_cnt: payload.len() as u32,
            imm: d.imm,
            solicited: d.solicited,
            src_qp,
            scatter: if scatter {
                (payload.len() as u8, payload.first(payload.len()))
            } else {
                (0, [0; 32])
            },
            ..Default::default()
        },
    );
    Took::Out(Outcome::Done {
        byte_cnt: payload.len() as u32,
    })
}

/// Scatters the first `write_len` bytes of `payload` through the receive WQE `wqe` (its scatter
/// entries and their bytes) into the receiver's regions (of PD `pd`, process `owner`), or only checks its entries
/// when the payload goes into the CQE (`to_cqe`). The syndrome of a failure: an entry's key,
/// access or bounds refused, or entries too short for the payload.
#[inline(always)]
fn scatter_payload(
    m: &Model,
    (pd, owner): (u32, u32),
    wqe: (*mut u8, usize),
    payload: &Payload,
    write_len: usize,
    to_cqe: bool,
) -> Option<u8> {
    let (rwqe, stride) = wqe;
    let mut off = 0usize;
    let mut fail = None;
    for i in 0..stride / 16 {
        if off >= write_len {
            break;
        }
        // SAFETY: scatter entry i of the receive WQE.
        let s: sys::mlx5_wqe_data_seg = unsafe { std::ptr::read_unaligned(rwqe.add(i * 16) as *const _) };
        let lkey = u32::from_be(s.lkey);
        if lkey == INVALID_LKEY {
            break;
        }
        let (addr, len) = (u64::from_be(s.addr), u32::from_be(s.byte_count) as usize);
        let n = len.min(write_len - off);
        match resolve(m, lkey, addr, n as u64, pd, owner, sys::IBV_ACCESS_LOCAL_WRITE) {
            Ok(r) => {
                if !to_cqe {
                    // SAFETY: resolved in bounds of the receiver's region, `n` bytes; off + n
                    // <= write_len <= payload.len().
                    unsafe { payload.copy_to(off, r.ptr, n) };
                }
                off += n;
            }
            Err(_) => {
                fail = Some(syndrome::LOCAL_PROT);
                break;
            }
        }
    }
    if fail.is_none() && off < write_len {
        fail = Some(syndrome::LOCAL_LENGTH);
    }
    fail
}

/// The receive with WQE counter `counter` of `peer` (and its header) failed with syndrome `s`: its error CQE into `rcq`,
/// `peer` moved to error; the requester's WQE fails as a remote invalid request.
#[inline(always)]
fn receive_failed(m: &Model, (peer, ph): (&Shm, &QpHdr), rcq: &Shm, counter: u16, s: u8) -> Outcome {
    push_cqe(
        m,
        rcq,
        CqeOut {
            op: cqe_op::RESP_ERR,
            qpn: ph.obj.id,
            uidx: ph.uidx,
            wqe_counter: counter,
            syndrome: s,
            ..Default::default()
        },
    );
    set_err(m, peer);
    Outcome::Fail(syndrome::REMOTE_INVAL_REQ)
}

/// What posting receives sets off: flushed at once on a QP in error; otherwise a sender of the
/// peer stalled on RNR goes on (not in deferred mode).
pub(super) fn receives_posted(model: &Model, qp: &Shm, exec: ExecMode) {
    let _scope = Model::scope();
    let h: &QpHdr = hdr(qp);
    if h.state.load(Ordering::Acquire) == state::ERR {
        flush_rq(model, qp);
        return;
    }
    if exec == ExecMode::Deferred {
        return;
    }
    let peer = h.peer.load(Ordering::Acquire);
    if peer != 0 {
        if let Some(p) = model.lookup(ObjKind::Qp, peer) {
            hdr::<QpHdr>(&p).kicks.fetch_add(1, Ordering::SeqCst);
            // the peer's own poster may be between its doorbell record and its register store:
            // not a doorbell to check
            execute(model, &p, RegCheck::None, 0);
        }
    }
}
