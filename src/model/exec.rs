//! Execution: a send queue's rung WQEs run under its lock (any process may run any QP), each
//! against registered memory (keys resolved and checked), READ and atomic results landing late
//! unless fenced, RNR retries; the register page is checked after the poster's doorbell
//! (`register`).

use super::cqe::{push_cqe, set_err, syndrome, CqeOut};
use super::decode::{decode, Decoded};
use super::direct::RegCheck;
use super::layout::{bump32, bump64, hdr, qp_dbrec, rings, state, transport, try_lock, CqHdr, MrHdr, QpHdr};
use super::lookup::ObjRef;
use super::payload::Payload;
use super::recv::deliver_to_receiver;
use super::register::{blueflame_matches, check_doorbell, clear_register};
use super::shm::{ObjKind, Shm};
use super::wire::response_wire;
use super::Model;
use crate::mlx5::cq::cqe_op;
use crate::mlx5::seg::opcode;
use crate::sys;
use std::sync::atomic::{fence, AtomicU64, Ordering};

/// A resolved piece of registered memory.
pub(super) struct Region {
    _shm: ObjRef,
    _data: Option<ObjRef>,
    pub(super) ptr: *mut u8,
}

pub(super) enum KeyErr {
    Key,
    Access,
    Bounds,
}

/// Resolves `len` bytes at `addr` through the region of `key`: it must belong to `pd` of the
/// process `owner` (the QP's whose access it is: the requester's for a local key, the
/// responder's for a remote one), allow `need`, and hold the range; the address returned lies in
/// this process's mapping of the region, checked against the mapping (the header may be another
/// process's, and is read once).
pub(super) fn resolve(
    m: &Model,
    key: u32,
    addr: u64,
    len: u64,
    pd: u32,
    owner: u32,
    need: u32,
) -> Result<Region, KeyErr> {
    let shm = m.lookup(ObjKind::Mr, key).ok_or(KeyErr::Key)?;
    let h: &MrHdr = hdr(&shm);
    // SAFETY: fields of the header, inside the mapping; read once each (volatile: another
    // process may write them), every check below uses these copies.
    let (base, rlen, data_off, rpd, access, rowner, data_id) = unsafe {
        (
            std::ptr::read_volatile(&h.base),
            std::ptr::read_volatile(&h.len),
            std::ptr::read_volatile(&h.data_off),
            std::ptr::read_volatile(&h.pd),
            std::ptr::read_volatile(&h.access),
            std::ptr::read_volatile(&h.obj.owner_pid),
            std::ptr::read_volatile(&h.data_id),
        )
    };
    if rpd != pd || rowner != owner {
        return Err(KeyErr::Key);
    }
    if access & need != need {
        return Err(KeyErr::Access);
    }
    let end = addr.checked_add(len).ok_or(KeyErr::Bounds)?;
    if addr < base || end > base.saturating_add(rlen) {
        return Err(KeyErr::Bounds);
    }
    // the bytes in another region's file: a region of the same process
    let data = match data_id {
        0 => None,
        id => {
            let d = m.lookup(ObjKind::Mr, id).ok_or(KeyErr::Key)?;
            if hdr::<MrHdr>(&d).obj.owner_pid != rowner {
                return Err(KeyErr::Key);
            }
            Some(d)
        }
    };
    let file = data.as_ref().unwrap_or(&shm);
    let off = data_off.checked_add(addr - base).ok_or(KeyErr::Bounds)?;
    if off.checked_add(len).is_none_or(|e| e > file.len() as u64) {
        return Err(KeyErr::Bounds);
    }
    // SAFETY: checked inside the mapping above.
    let ptr = unsafe { file.ptr().add(off as usize) };
    Ok(Region {
        _shm: shm,
        _data: data,
        ptr,
    })
}

/// IB RNR timer codes in microseconds.
fn rnr_timer_us(code: u32) -> u64 {
    const T: [u64; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840, 5120, 7680, 10240,
        15360, 20480, 30720, 40960, 61440, 81920, 122_880, 163_840, 245_760, 327_680, 491_520,
    ];
    T[(code & 31) as usize]
}

pub(super) enum Outcome {
    Done {
        byte_cnt: u32,
    },
    Fail(u8),
    /// The responder has no receive and RNR retries are infinite: try again later.
    Stall,
    /// The responder does not answer (not in RTR yet, gone, its process dead): the
    /// requester's transport retries, for up to [`TRANSPORT_RETRY_NS`] (each ring or poll of the
    /// requester's, and the responder's move to RTR, tries again), then fail it.
    NotReady,
}

/// How long a requester retries a responder that is not ready to receive before its transport
/// retries are exceeded: model0's one budget, whatever the QP's `retry_cnt` and `timeout`: a
/// ConnectX's with `retry_cnt` 7 and `timeout` 14 (7 x 4.096 us x 2^14, about 0.47 s; perftest's
/// values; UCX 1.13's are 7 and 18, about 7.5 s).
pub(super) const TRANSPORT_RETRY_NS: u64 = 7 * 4096 * (1 << 14);

/// A READ's data or an atomic's old value on its way back to `dst`: it lands before the next
/// WQE runs, unless that WQE (unfenced) reads `dst`: then it runs first and sees what was there
/// before, as on a ConnectX, and the response lands after it.
struct Landing {
    dst: Region,
    bytes: Bytes,
}

/// What lands: the responder's memory as it is (read when it lands: nothing of this QP has run
/// in between), a copy taken when a WQE had to run first (it may write the source), or an
/// atomic's old value.
enum Bytes {
    Source(Region, usize),
    Owned(Vec<u8>),
    Word([u8; 8]),
}

impl Landing {
    fn len(&self) -> usize {
        match &self.bytes {
            Bytes::Source(_, n) => *n,
            Bytes::Owned(v) => v.len(),
            Bytes::Word(_) => 8,
        }
    }
    /// Whether `[p, p + n)` overlaps where this lands.
    fn overlaps(&self, p: *const u8, n: usize) -> bool {
        let (a, b) = (self.dst.ptr as usize, p as usize);
        a < b + n && b < a + self.len()
    }
}

/// Executes one WQE. `late`: where READ data and atomic results go when more WQEs of the same
/// doorbell follow (a ConnectX goes on with the next WQEs while a READ's response is on its way
/// back, so a later WQE that reads the READ's destination without a fence sends what was there
/// before); `None`: they land now.
fn run_one(m: &Model, me: &QpHdr, d: &Decoded, buf: &[u8], late: Option<&mut Vec<Landing>>) -> Outcome {
    match me.transport.load(Ordering::Acquire) {
        transport::UC => {}
        transport::UD => return run_datagram(m, me, d, buf),
        _ => return run_reliable(m, me, d, buf, late),
    }
    // UC: SEND and WRITE only (a READ or an atomic is a malformed WQE for it, as on a ConnectX)
    if matches!(d.opcode, opcode::RDMA_READ | opcode::ATOMIC_CS | opcode::ATOMIC_FA) {
        return Outcome::Fail(syndrome::LOCAL_QP_OP);
    }
    match run_reliable(m, me, d, buf, late) {
        // nothing comes back to the requester: what the responder could not take is dropped
        Outcome::Stall
        | Outcome::NotReady
        | Outcome::Fail(syndrome::REMOTE_ACCESS | syndrome::REMOTE_INVAL_REQ | syndrome::TRANSPORT_RETRY_EXC) => {
            bump32(&me.ctr_dropped, 1);
            let len = match d.inline {
                Some((_, n)) => n as u32,
                None => d.sges[..d.nsge].iter().map(|s| s.2).sum(),
            };
            Outcome::Done { byte_cnt: len }
        }
        o => o,
    }
}

/// Executes one WQE of a UD QP: a SEND (or SEND with immediate) to the QP its address vector
/// names. Nothing is acknowledged: a datagram the destination does not take (no such UD QP,
/// not ready, another Q_Key, no receive posted) is dropped and counted, and the requester
/// completes it; a message over the MTU is the requester's local length error.
fn run_datagram(m: &Model, me: &QpHdr, d: &Decoded, buf: &[u8]) -> Outcome {
    let resp_op = match d.opcode {
        opcode::NOP => return Outcome::Done { byte_cnt: 0 },
        opcode::SEND => cqe_op::RESP_SEND,
        opcode::SEND_IMM => cqe_op::RESP_SEND_IMM,
        _ => return Outcome::Fail(syndrome::LOCAL_QP_OP),
    };
    let Some((dqp, qkey)) = d.ud else {
        return Outcome::Fail(syndrome::LOCAL_QP_OP);
    };
    // the receiver's buffer takes the GRH area first (model0's port is InfiniBand and its
    // datagrams carry no GRH: the area is left as zeros), then the message
    let mut g = Payload::new();
    g.push(&[0; transport::GRH]);
    if let Err(s) = g.gather(m, me, d, buf) {
        return Outcome::Fail(s);
    }
    let len = g.len() - transport::GRH;
    if len > transport::UD_MTU {
        return Outcome::Fail(syndrome::LOCAL_LENGTH);
    }
    let dropped = || {
        bump32(&me.ctr_dropped, 1);
        Outcome::Done { byte_cnt: len as u32 }
    };
    let Some(peer) = m.lookup(ObjKind::Qp, dqp) else {
        return dropped();
    };
    let ph: &QpHdr = hdr(&peer);
    if ph.transport.load(Ordering::Acquire) != transport::UD
        || !matches!(ph.state.load(Ordering::Acquire), state::RTR | state::RTS)
        || ph.qkey.load(Ordering::Acquire) != qkey
    {
        return dropped();
    }
    match deliver_to_receiver(m, &peer, d, &g, resp_op, me.obj.id) {
        Outcome::Stall | Outcome::Fail(syndrome::TRANSPORT_RETRY_EXC) => dropped(),
        Outcome::Done { .. } => Outcome::Done { byte_cnt: len as u32 },
        o => o,
    }
}

/// Executes one WQE of a reliable connection (and the parts every transport shares).
fn run_reliable(m: &Model, me: &QpHdr, d: &Decoded, buf: &[u8], late: Option<&mut Vec<Landing>>) -> Outcome {
    if d.opcode == opcode::NOP {
        return Outcome::Done { byte_cnt: 0 };
    }
    // a responder that is gone (destroyed, or its process dead) does not answer, and the
    // requester retries until its retries are exceeded, as on a wire: a program that ends while
    // its peer still sends (ibv_srq_pingpong's last sends, beyond the iterations the other side
    // counts) fails those sends only after the budget, by when the sender has ended too
    let Some(peer) = m.lookup(ObjKind::Qp, me.peer.load(Ordering::Acquire)) else {
        return Outcome::NotReady;
    };
    let ph: &QpHdr = hdr(&peer);
    // a responder receives from RTR on (IB spec 10.3.1), as perftest's bandwidth servers rely
    // on; one not yet there (its side of the connection still being set up, as UCX's is when
    // its peer already sends) drops the packets, and the requester retries them. One in error
    // fails the requester at once: model0's shortcut (a wire's requester would retry it out
    // too), which keeps the direct path's failure prompt where nothing drives the retries
    match ph.state.load(Ordering::Acquire) {
        state::RTR | state::RTS => {}
        state::ERR => return Outcome::Fail(syndrome::TRANSPORT_RETRY_EXC),
        _ => return Outcome::NotReady,
    }
    // asked every time while this QP retries (a sample that said alive would end the wait)
    let retrying = me.not_ready_since.load(Ordering::Relaxed) != 0;
    // SAFETY: a header field, read once (the peer's process wrote it at creation).
    let owner = unsafe { std::ptr::read_volatile(&ph.obj.owner_pid) };
    if !super::pid::peer_process_alive(owner, retrying) {
        return Outcome::NotReady;
    }
    let mut g = Payload::new();
    let gathers = matches!(
        d.opcode,
        opcode::SEND | opcode::SEND_IMM | opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM
    );
    if gathers {
        if let Err(s) = g.gather(m, me, d, buf) {
            return Outcome::Fail(s);
        }
    }
    let payload = &g;
    match d.opcode {
        opcode::SEND => deliver_to_receiver(m, &peer, d, payload, cqe_op::RESP_SEND, me.obj.id),
        opcode::SEND_IMM => deliver_to_receiver(m, &peer, d, payload, cqe_op::RESP_SEND_IMM, me.obj.id),
        opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM => {
            // a WRITE of no bytes touches no memory: its key and address are not checked (IB
            // spec o9-31; UCX checks a connection with one, key 0)
            let r = match payload.len() {
                0 => None,
                n => match remote_region(m, ph, d, sys::IBV_ACCESS_REMOTE_WRITE, n as u64) {
                    Ok(r) => Some(r),
                    Err(s) => return Outcome::Fail(s),
                },
            };
            if d.opcode == opcode::RDMA_WRITE_IMM {
                // The immediate needs a receive; check before placing data.
                match super::recv::receive_posted(m, &peer) {
                    Some(true) => {}
                    Some(false) => return Outcome::Stall,
                    None => return Outcome::Fail(syndrome::TRANSPORT_RETRY_EXC),
                }
            }
            if let Some(r) = r {
                // SAFETY: resolved in bounds of the responder's region, `payload.len()` bytes:
                // one copy from the requester's memory (or the inline bytes), as a NIC's DMA.
                unsafe { payload.copy_to(0, r.ptr, payload.len()) };
            }
            if d.opcode == opcode::RDMA_WRITE_IMM {
                return deliver_to_receiver(m, &peer, d, payload, cqe_op::RESP_WR_IMM, me.obj.id);
            }
            Outcome::Done {
                byte_cnt: payload.len() as u32,
            }
        }
        opcode::RDMA_READ => rdma_read(m, me, ph, d, late),
        opcode::ATOMIC_CS | opcode::ATOMIC_FA => atomic(m, me, ph, d, late),
        _ => Outcome::Fail(syndrome::LOCAL_QP_OP),
    }
}

/// The responder's region the WQE `d` names (its remote address and key), `len` bytes with
/// access `need`, or the remote access syndrome.
fn remote_region(m: &Model, ph: &QpHdr, d: &Decoded, need: u32, len: u64) -> Result<Region, u8> {
    let (raddr, rkey) = d.raddr.unwrap_or((0, 0));
    resolve(m, rkey, raddr, len, ph.pd, ph.obj.owner_pid, need).map_err(|_| syndrome::REMOTE_ACCESS)
}

/// An RDMA READ of a reliable connection: the responder's bytes into the requester's scatter
/// entries, now or (`late`) before the next WQE that reads them.
fn rdma_read(m: &Model, me: &QpHdr, ph: &QpHdr, d: &Decoded, mut late: Option<&mut Vec<Landing>>) -> Outcome {
    let total: u64 = d.sges[..d.nsge].iter().map(|s| s.2 as u64).sum();
    // a READ of no bytes touches no memory: its key and address are not checked
    if total == 0 {
        response_wire(me);
        return Outcome::Done { byte_cnt: 0 };
    }
    let r = match remote_region(m, ph, d, sys::IBV_ACCESS_REMOTE_READ, total) {
        Ok(r) => r,
        Err(s) => return Outcome::Fail(s),
    };
    // the response travels back over the wire before it lands
    response_wire(me);
    let mut off = 0usize;
    for &(addr, lkey, len) in &d.sges[..d.nsge] {
        let Ok(l) = resolve(
            m,
            lkey,
            addr,
            len as u64,
            me.pd,
            me.obj.owner_pid,
            sys::IBV_ACCESS_LOCAL_WRITE,
        ) else {
            return Outcome::Fail(syndrome::LOCAL_PROT);
        };
        match late.as_deref_mut() {
            // SAFETY: both sides resolved in bounds.
            None => unsafe { std::ptr::copy_nonoverlapping(r.ptr.add(off), l.ptr, len as usize) },
            Some(late) => {
                // the data lands before the next WQE (or after it, when it reads here)
                let src = Region {
                    _shm: r._shm,
                    _data: r._data,
                    // SAFETY: `off + len` is within the responder's resolved range.
                    ptr: unsafe { r.ptr.add(off) },
                };
                late.push(Landing {
                    dst: l,
                    bytes: Bytes::Source(src, len as usize),
                });
            }
        }
        off += len as usize;
    }
    Outcome::Done { byte_cnt: total as u32 }
}

/// An atomic (compare-and-swap or fetch-and-add) of a reliable connection on the responder's
/// 8-byte word, the old value to the requester, now or (`late`) before the next WQE.
fn atomic(m: &Model, me: &QpHdr, ph: &QpHdr, d: &Decoded, late: Option<&mut Vec<Landing>>) -> Outcome {
    let (raddr, _) = d.raddr.unwrap_or((0, 0));
    if raddr % 8 != 0 {
        return Outcome::Fail(syndrome::REMOTE_INVAL_REQ);
    }
    let r = match remote_region(m, ph, d, sys::IBV_ACCESS_REMOTE_ATOMIC, 8) {
        Ok(r) => r,
        Err(s) => return Outcome::Fail(s),
    };
    let (addr, lkey, _) = d.sges[0];
    let l = match resolve(m, lkey, addr, 8, me.pd, me.obj.owner_pid, sys::IBV_ACCESS_LOCAL_WRITE) {
        Ok(l) => l,
        Err(_) => return Outcome::Fail(syndrome::LOCAL_PROT),
    };
    let (swap_add, compare) = d.atomic.unwrap_or((0, 0));
    // SAFETY: an 8-byte aligned word inside the responder's region (checked above);
    // shared memory is accessed atomically by every process.
    let word = unsafe { &*(r.ptr as *const AtomicU64) };
    // The word's byte order is the responder device's (big-endian or host order); the
    // old value goes back in the same order.
    let big = ph.atomic_be != 0;
    let order = |v: u64| if big { v.to_be() } else { v };
    let old_be = if d.opcode == opcode::ATOMIC_FA {
        let mut cur = word.load(Ordering::Acquire);
        loop {
            let new = order(order(cur).wrapping_add(swap_add));
            match word.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(v) => break v,
                Err(v) => cur = v,
            }
        }
    } else {
        match word.compare_exchange(order(compare), order(swap_add), Ordering::AcqRel, Ordering::Acquire) {
            Ok(v) | Err(v) => v,
        }
    };
    // the response (the old value) travels back over the wire before it lands
    response_wire(me);
    match late {
        // SAFETY: 8 bytes resolved in the requester's region (may be unaligned).
        None => unsafe { std::ptr::write_unaligned(l.ptr as *mut u64, old_be) },
        Some(late) => late.push(Landing {
            dst: l,
            bytes: Bytes::Word(old_be.to_ne_bytes()),
        }),
    }
    Outcome::Done { byte_cnt: 8 }
}

/// Executes the rung WQEs of QP `q`. Any process may do it for any QP (under the QP's SQ lock):
/// a receiver's process resumes a sender stalled on RNR.
/// `reg`: not `None` when run because this QP's poster rang (its thread, after the register
/// store), so the register is checked against the WQEs; `None` when another party resumes it (a
/// receive posted for a sender stalled on RNR), which may come between the poster's record and
/// register stores. `rung`: the doorbells rung since the last run (the poster's count; 0 when
/// resumed), added to the QP's `doorbells` counter.
pub(super) fn execute(m: &Model, q: &Shm, reg: RegCheck, rung: u32) {
    let _scope = Model::scope();
    let h: &QpHdr = hdr(q);
    let check = reg != RegCheck::None && h.check_reg != 0;
    if reg != RegCheck::None && rung > 0 {
        bump64(&h.ctr_doorbells, u64::from(rung));
    }
    let mut rung = None;
    loop {
        let kicks = h.kicks.load(Ordering::SeqCst);
        if !try_lock(&h.sq_lock) {
            break; // another thread runs it and will see our kick
        }
        rung = rung.or(run_sq(m, q, check));
        // Unlock with a locked instruction, not a plain store: a later load may otherwise pass
        // the store (store-load reordering, even on x86) and miss a kick given by a thread that
        // then failed to take the still-held lock (a lost wake-up).
        h.sq_lock.swap(0, Ordering::SeqCst);
        if h.kicks.load(Ordering::SeqCst) == kicks {
            break;
        }
    }
    if check {
        // After the run (its cost stays out of the operation's latency): a BlueFlame write
        // must hold the WQE it names, byte for byte, as a ConnectX executes the write's copy.
        // The WQE has run by now; a mismatch moves the QP to error, so no later WQE runs.
        if let (RegCheck::BlueFlame, Some((last, half))) = (reg, rung) {
            if !blueflame_matches(q, last, half) {
                h.bad_doorbells.fetch_add(1, Ordering::Relaxed);
                set_err(m, q);
            }
        }
        clear_register(q);
    }
}

/// Runs the WQEs rung on `q`'s send queue. `check`: the register is checked against the last
/// WQE rung; returns that WQE's index and the register half holding its doorbell.
fn run_sq(m: &Model, q: &Shm, check: bool) -> Option<(u32, usize)> {
    let h: &QpHdr = hdr(q);
    let scq = m.lookup(ObjKind::Cq, h.send_cqn)?;
    let (Some(dbrec), Some(r)) = (qp_dbrec(m, q), rings(q)) else {
        return None;
    };
    // the ring as checked (another process may be the QP's owner and change its header)
    let (sq, sq_cnt) = (r.sq as *const u8, r.sq_cnt);
    let (mut ci, target) = rung_range(h, dbrec);
    let mut rung = None;
    if check && target != ci {
        rung = check_doorbell(m, q, h, (sq, sq_cnt), ci, target);
    }
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 1024];
    let mut executed = 0u64;
    // READ data and atomic results still on their way back, and the completions behind them
    // (a send queue completes in order). Empty, and not allocated, unless a READ or an atomic
    // is followed by more WQEs of this doorbell.
    let mut lands: Vec<Landing> = Vec::new();
    let mut held: Vec<CqeOut> = Vec::new();
    let mut run = SqRun {
        m,
        q,
        h,
        scq,
        rnr_deadline: None,
        lands: &mut lands,
        held: &mut held,
    };
    while ci != target {
        run.stop_on_cq_error();
        let ud = h.transport.load(Ordering::Relaxed) == transport::UD;
        let d = match decode(sq, sq_cnt, ci, h.obj.id, &mut buf, ud) {
            Ok(d) => d,
            Err((op, idx)) => {
                run.malformed(op, idx);
                ci = ci.wrapping_add(1);
                continue;
            }
        };
        let nbb = d.ds.div_ceil(4);
        let hazard = run.land_or_keep_responses(&d);
        let more = ci.wrapping_add(nbb) != target || !run.lands.is_empty();
        // SAFETY: `d` is what decode just returned for `buf`, unwritten since.
        let wqe = unsafe { super::decode::wqe(&d, &buf) };
        let outcome = run.outcome(&d, wqe, more);
        match run.complete(&d, outcome) {
            Flow::Next => {}
            Flow::Retry => continue,
            Flow::Stop => break,
        }
        run.rnr_deadline = None;
        ci = ci.wrapping_add(nbb);
        executed += 1;
        if hazard {
            run.land();
        }
        h.sq_ci.store(ci, Ordering::Release);
    }
    run.land();
    if executed > 0 {
        bump64(&h.ctr_wqes, executed);
    }
    rung
}

/// The send queue's consumer index and the index its doorbell record's send counter rings up
/// to (`dbrec`: the QP's doorbell record, checked).
#[inline(always)]
pub(super) fn rung_range(h: &QpHdr, dbrec: *mut u32) -> (u32, u32) {
    // SAFETY: the send counter, dbrec[1] (checked by qp_dbrec).
    let db = u32::from_be(unsafe { std::ptr::read_volatile(dbrec.add(1)) }) & 0xffff;
    fence(Ordering::Acquire);
    let ci = h.sq_ci.load(Ordering::Relaxed);
    let target = ci.wrapping_add(db.wrapping_sub(ci) & 0xffff);
    (ci, target)
}

/// What [`run_sq`] does after a WQE's completion: go on with the next WQE, try the same one
/// again (an RNR retry), or stop (infinite RNR retries: resumed later).
enum Flow {
    Next,
    Retry,
    Stop,
}

/// The state of one run of a send queue ([`run_sq`]): the QP, its send CQ, the RNR deadline of
/// the WQE retried, and the responses in flight with the completions held behind them.
struct SqRun<'a> {
    m: &'a Model,
    q: &'a Shm,
    h: &'a QpHdr,
    scq: ObjRef,
    rnr_deadline: Option<std::time::Instant>,
    lands: &'a mut Vec<Landing>,
    held: &'a mut Vec<CqeOut>,
}

impl SqRun<'_> {
    /// Writes completion `c`, or holds it behind the responses in flight.
    #[inline(always)]
    fn emit(&mut self, c: CqeOut) {
        if self.lands.is_empty() {
            push_cqe(self.m, &self.scq, c);
        } else {
            self.held.push(c);
        }
    }

    /// The responses in flight land, then the completions held behind them.
    #[inline(always)]
    fn land(&mut self) {
        land(self.m, &self.scq, self.lands, self.held);
    }

    /// A CQ that overflowed is in error, as on a ConnectX (a CQ error event; its QPs move to
    /// error): nothing more executes, and the QP's later WQEs would be flushed into it.
    #[inline(always)]
    fn stop_on_cq_error(&self) {
        let h = self.h;
        if hdr::<CqHdr>(&self.scq).overruns.load(Ordering::Relaxed) > 0 && h.state.load(Ordering::Acquire) != state::ERR
        {
            set_err(self.m, self.q);
        }
    }

    /// A malformed WQE (`op`, at slot `idx`): reported at the slot, the QP moved to error; the
    /// rest is flushed.
    #[inline(always)]
    fn malformed(&mut self, op: u8, idx: u16) {
        let c = req_err(self.h, idx, syndrome::LOCAL_QP_OP, op);
        self.emit(c);
        set_err(self.m, self.q);
    }

    /// Responses in flight land before WQE `d` runs, unless it reads their destination without
    /// a fence: then it runs first (and sends what was there before, as a ConnectX would), the
    /// responses copied first in case it writes their source, and land after it (returns true).
    #[inline(always)]
    fn land_or_keep_responses(&mut self, d: &Decoded) -> bool {
        let hazard = !self.lands.is_empty() && !d.fence && reads_landing(self.m, self.h, d, self.lands);
        if hazard {
            for l in self.lands.iter_mut() {
                if let Bytes::Source(src, n) = &l.bytes {
                    // SAFETY: the source was resolved in bounds of the responder's region for
                    // `n` bytes, and its mapping is held by the region.
                    let v = unsafe { std::slice::from_raw_parts(src.ptr, *n) }.to_vec();
                    l.bytes = Bytes::Owned(v);
                }
            }
        } else if !self.lands.is_empty() {
            self.land();
        }
        hazard
    }

    /// What WQE `d` (its bytes in `buf`) comes to: flushed when the QP is not in RTS, the
    /// injected error when its countdown ends, else its execution (`more`: WQEs or responses
    /// follow it, so its own responses land late).
    #[inline(always)]
    fn outcome(&mut self, d: &Decoded, buf: &[u8], more: bool) -> Outcome {
        let h = self.h;
        let st = h.state.load(Ordering::Acquire);
        if st != state::RTS {
            Outcome::Fail(syndrome::WR_FLUSH)
        } else if h.inject_countdown.load(Ordering::Acquire) > 0
            && h.inject_countdown.fetch_sub(1, Ordering::AcqRel) == 1
        {
            Outcome::Fail(h.inject_syndrome.load(Ordering::Acquire) as u8)
        } else {
            run_one(self.m, h, d, buf, more.then_some(&mut *self.lands))
        }
    }

    /// Completes WQE `d` with `outcome`: its CQE when signaled, an error CQE (the QP to error
    /// unless flushed), or an RNR stall.
    #[inline(always)]
    fn complete(&mut self, d: &Decoded, outcome: Outcome) -> Flow {
        let h = self.h;
        match outcome {
            Outcome::Done { byte_cnt } => {
                // a WQE that met a responder not ready before (the same index comes again
                // after a reset or a wrap) starts its wait afresh
                if h.not_ready_since.load(Ordering::Relaxed) != 0 {
                    h.not_ready_since.store(0, Ordering::Relaxed);
                }
                if d.signaled {
                    self.emit(CqeOut {
                        op: cqe_op::REQ,
                        qpn: h.obj.id,
                        uidx: h.uidx,
                        wqe_counter: d.idx,
                        byte_cnt,
                        wqe_opcode: d.opcode,
                        ..Default::default()
                    });
                }
            }
            Outcome::Fail(s) => {
                self.emit(req_err(h, d.idx, s, d.opcode));
                if s != syndrome::WR_FLUSH {
                    set_err(self.m, self.q);
                }
            }
            Outcome::Stall => return self.rnr_stall(d),
            Outcome::NotReady => return self.not_ready(d),
        }
        Flow::Next
    }

    /// WQE `d` met a responder not ready to receive: stop (the next ring or poll tries it again)
    /// until [`TRANSPORT_RETRY_NS`] has passed since it first did, then the retry-exceeded error.
    fn not_ready(&mut self, d: &Decoded) -> Flow {
        let h = self.h;
        let now = monotonic_ns() & !0xffff;
        let since = h.not_ready_since.load(Ordering::Relaxed);
        if since == 0 || since & 0xffff != u64::from(d.idx) {
            h.not_ready_since.store(now | u64::from(d.idx), Ordering::Relaxed);
            super::pid::send_waits(true);
            return Flow::Stop;
        }
        if now.saturating_sub(since & !0xffff) < TRANSPORT_RETRY_NS {
            return Flow::Stop;
        }
        h.not_ready_since.store(0, Ordering::Relaxed);
        self.emit(req_err(h, d.idx, syndrome::TRANSPORT_RETRY_EXC, d.opcode));
        set_err(self.m, self.q);
        Flow::Next
    }

    /// WQE `d` met a responder without a receive: counted once per WQE; stop when retries are
    /// infinite (resumed by the receiver's doorbell or the next ring), retry until the peer's
    /// RNR timer times the retries has passed, then the retry-exceeded error.
    #[inline(always)]
    fn rnr_stall(&mut self, d: &Decoded) -> Flow {
        let (m, h) = (self.m, self.h);
        if self.rnr_deadline.is_none() {
            bump32(&h.ctr_rnr, 1);
        }
        let retries = h.rnr_retry.load(Ordering::Relaxed);
        if retries >= 7 {
            // infinite: resumed by the receiver's doorbell, the next ring or poll, or the
            // preload's sweeper (a receiver that died never posts again: the sweeper's retries
            // find its process gone)
            super::pid::send_waits(false);
            return Flow::Stop;
        }
        let peer_timer = m
            .lookup(ObjKind::Qp, h.peer.load(Ordering::Relaxed))
            .map(|p| hdr::<QpHdr>(&p).min_rnr_timer.load(Ordering::Relaxed))
            .unwrap_or(12);
        let wait = std::time::Duration::from_micros(rnr_timer_us(peer_timer) * retries as u64);
        let deadline = *self
            .rnr_deadline
            .get_or_insert_with(|| std::time::Instant::now() + wait);
        if retries > 0 && std::time::Instant::now() < deadline {
            std::hint::spin_loop();
            return Flow::Retry; // retry the same WQE
        }
        self.emit(req_err(h, d.idx, syndrome::RNR_RETRY_EXC, d.opcode));
        set_err(m, self.q);
        Flow::Next
    }
}

/// CLOCK_MONOTONIC in nanoseconds (the same clock in every process).
fn monotonic_ns() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and a timespec of ours.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// The requester's error CQE of WQE `idx` (its opcode `op`) on QP `h`.
fn req_err(h: &QpHdr, idx: u16, syndrome: u8, op: u8) -> CqeOut {
    CqeOut {
        op: cqe_op::REQ_ERR,
        qpn: h.obj.id,
        uidx: h.uidx,
        wqe_counter: idx,
        syndrome,
        wqe_opcode: op,
        ..Default::default()
    }
}

/// Whether WQE `d` gathers (as a SEND or WRITE from registered memory) from where a response
/// in flight will land.
fn reads_landing(m: &Model, me: &QpHdr, d: &Decoded, lands: &[Landing]) -> bool {
    let gathers = matches!(
        d.opcode,
        opcode::SEND | opcode::SEND_IMM | opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM
    );
    if !gathers || d.inline.is_some() {
        return false;
    }
    d.sges[..d.nsge].iter().any(|&(addr, lkey, len)| {
        resolve(m, lkey, addr, len as u64, me.pd, me.obj.owner_pid, 0)
            .is_ok_and(|r| lands.iter().any(|l| l.overlaps(r.ptr, len as usize)))
    })
}

/// The responses on their way back land, in order, then the completions held behind them.
fn land(m: &Model, scq: &Shm, lands: &mut Vec<Landing>, held: &mut Vec<CqeOut>) {
    for l in lands.drain(..) {
        let n = l.len();
        // SAFETY: `dst` was resolved in bounds of a registered region for `n` bytes, as was the
        // source (or the copy holds `n` bytes); the mappings are held by the regions.
        unsafe {
            match &l.bytes {
                Bytes::Source(src, _) => std::ptr::copy_nonoverlapping(src.ptr, l.dst.ptr, n),
                Bytes::Owned(v) => std::ptr::copy_nonoverlapping(v.as_ptr(), l.dst.ptr, n),
                Bytes::Word(w) => std::ptr::copy_nonoverlapping(w.as_ptr(), l.dst.ptr, n),
            }
        }
    }
    for c in held.drain(..) {
        push_cqe(m, scq, c);
    }
}
