//! The shared layout of model0's objects: the headers every process maps (`ObjHdr`, `MrHdr`,
//! `CqHdr`, `QpHdr`), their offsets and the QP states, the spin locks in them, and the accessors
//! that check what another process wrote (doorbell records, rings).

use super::shm::{ObjKind, Shm};
use super::Model;
use crate::mlx5::seg::WQEBB;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

// "rdmamod5": the headers' layout changed (a CQ's 128-byte CQEs); objects of an older binary are
// not taken for this one's
pub(super) const MAGIC: u64 = 0x7264_6d61_6d6f_6435;
pub(super) const PAGE: usize = 4096;

/// The transports of the model's QPs.
pub mod transport {
    /// Reliable connected: acknowledged, retried (RNR), errors reported to the requester.
    pub const RC: u32 = 0;
    /// Unreliable connected: SEND and WRITE only; nothing acknowledged, so a message the
    /// responder cannot take is dropped (and counted), and the requester completes it.
    pub const UC: u32 = 1;
    /// Unreliable datagram: SEND only, each to the QP its address vector names, with that QP's
    /// Q_Key; up to the path MTU ([`UD_MTU`]); the receive takes a 40-byte GRH area first.
    pub const UD: u32 = 2;
    /// The largest UD message (model0's port MTU).
    pub const UD_MTU: usize = 4096;
    /// The GRH area at the head of a UD receive.
    pub const GRH: usize = 40;
}

/// QP states the model knows.
pub mod state {
    /// Created, not connected: WQEs are flushed.
    pub const RESET: u32 = 0;
    /// Ready to receive (a responder, as perftest leaves a bandwidth test's server): it takes
    /// what its peer sends, its own WQEs are flushed.
    pub const RTR: u32 = 2;
    /// Connected.
    pub const RTS: u32 = 3;
    /// In error: WQEs are flushed.
    pub const ERR: u32 = 6;
}

#[repr(C)]
pub(super) struct ObjHdr {
    pub(super) magic: u64,
    pub(super) owner_pid: u32,
    pub(super) id: u32,
    pub(super) valid: AtomicU32,
    _pad: u32,
}

#[repr(C)]
pub(super) struct MrHdr {
    pub(super) obj: ObjHdr,
    pub(super) base: u64,
    pub(super) len: u64,
    pub(super) access: u32,
    pub(super) pd: u32,
    /// Where `base` lies in the file (one page in for the model's own regions; a region
    /// registered through libibverbs starts where the user's buffer starts in its first page).
    pub(super) data_off: u64,
    /// 0: the bytes are in this region's file; else the key of the region (of the same process)
    /// whose file holds them, at `data_off` there (memory registered twice: model0 pins a page
    /// once).
    pub(super) data_id: u32,
    _pad: u32,
}

#[repr(C)]
pub(super) struct CqHdr {
    pub(super) obj: ObjHdr,
    pub(super) cqe_cnt: u32,
    pub(super) lock: AtomicU32,
    pub(super) pi: AtomicU32,
    pub(super) overruns: AtomicU32,
    /// The consumer's doorbell record: 0 = in this header at `CQ_DBREC_OFF`, else a `Db` object
    /// (libmlx5's record page) and the offset in it.
    pub(super) db_id: u32,
    pub(super) db_off: u32,
    /// Its completion channel (`super::events`; 0: none), in the owner's process.
    pub(super) chan: u32,
    /// The arm doorbell record's value that raised the last event (an arm is a new value).
    pub(super) arm_seen: AtomicU32,
    /// The handle the channel's events carry (libibverbs' `struct ibv_cq *`).
    pub(super) user_handle: u64,
    /// 1: 128-byte CQEs, each 64-byte CQE in the second half of its entry (libmlx5's
    /// `MLX5_CQE_SIZE=128`, UCX's default); 0: 64-byte ones.
    pub(super) cqe_128: u32,
}
pub(super) const CQ_DBREC_OFF: usize = 128;
const _: () = assert!(std::mem::size_of::<CqHdr>() <= CQ_DBREC_OFF);

/// A CQ's counters, in its header page after the doorbell record (written under the CQ's lock).
#[repr(C)]
pub(super) struct CqCounters {
    pub(super) cqes: AtomicU64,
    /// Error completions by syndrome (the low 6 bits: every mlx5 syndrome fits).
    pub(super) errors: [AtomicU32; 64],
    /// Completion events raised on its channel.
    pub(super) events: AtomicU64,
    /// Events that could not be raised (the channel's owner is another process, or its pipe
    /// was full or gone).
    pub(super) events_lost: AtomicU64,
}
pub(super) const CQ_CTR_OFF: usize = 256;

/// The counters of a CQ object.
pub(super) fn cq_counters(s: &Shm) -> &CqCounters {
    const _: () = assert!(CQ_CTR_OFF + std::mem::size_of::<CqCounters>() <= PAGE);
    // SAFETY: every object file has a header page (checked when mapped), and the counters lie
    // inside it; they are atomics, shared between processes.
    unsafe { &*(s.ptr().add(CQ_CTR_OFF) as *const CqCounters) }
}

/// Adds `n` to a counter written by one side only (a relaxed load and store: no locked
/// instruction on the hot path; a rare second writer may lose a count, never corrupt one).
pub(super) fn bump64(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

/// As [`bump64`], for a 32-bit counter.
pub(super) fn bump32(c: &AtomicU32, n: u32) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

/// A QP's shared header, in three cache lines by who writes them: the first is read by the
/// peer and written rarely; the second only by whoever executes this QP's send queue; the third
/// by whoever delivers into its receive queue. Fields shared this way never share a line with
/// fields written on every operation by the other side.
#[repr(C)]
pub(super) struct QpHdr {
    pub(super) obj: ObjHdr,
    pub(super) pd: u32,
    pub(super) state: AtomicU32,
    pub(super) peer: AtomicU32,
    pub(super) send_cqn: u32,
    pub(super) recv_cqn: u32,
    pub(super) sq_wqe_cnt: u32,
    pub(super) rq_wqe_cnt: u32,
    pub(super) rq_stride: u32,
    pub(super) max_inline: u32,
    pub(super) rnr_retry: AtomicU32,
    pub(super) min_rnr_timer: AtomicU32,
    pub(super) inject_syndrome: AtomicU32,
    pub(super) wire_delay_ns: AtomicU64,
    /// The rings' offsets in the file (the model's own layout: SQ then RQ; libmlx5's: RQ then SQ).
    pub(super) sq_off: u32,
    pub(super) rq_off: u32,
    /// The doorbell record: 0 = in this header at `QP_DBREC_OFF`, else a `Db` object and offset.
    pub(super) db_id: u32,
    pub(super) db_off: u32,
    /// Responder payloads up to this many bytes go into the CQE (scatter-to-CQE), 0 = never.
    pub(super) scatter_cqe: u32,
    /// The user index libmlx5 gave the QP (CQE version 1 names the QP by it), 0 otherwise.
    pub(super) uidx: u32,
    /// 1: atomics on this QP's memory (as responder) use big-endian words; 0: host order.
    pub(super) atomic_be: u32,
    /// 1: the QP's register page is the model's (the direct path's QPs): every doorbell is
    /// checked against it; 0: libmlx5's UAR page, which the model does not see.
    pub(super) check_reg: u32,
    /// Doorbells whose register store did not match the WQE rung (the QP was moved to error).
    pub(super) bad_doorbells: AtomicU32,
    /// The transport (`transport::RC`, `UC`, `UD`).
    pub(super) transport: AtomicU32,
    /// UD: the Q_Key a datagram must carry to be taken.
    pub(super) qkey: AtomicU32,
    /// The shared receive queue its receives come from (0: its own receive queue).
    pub(super) srqn: u32,
    pub(super) sq_ci: AtomicU32,
    pub(super) sq_lock: AtomicU32,
    pub(super) kicks: AtomicU32,
    pub(super) inject_countdown: AtomicU32,
    /// Counters, written by whoever executes the send queue (relaxed load and store, no locked
    /// instruction: this line is that side's alone).
    pub(super) ctr_wqes: AtomicU64,
    pub(super) ctr_doorbells: AtomicU64,
    pub(super) ctr_bf_writes: AtomicU64,
    pub(super) ctr_rnr: AtomicU32,
    /// Messages of an unreliable transport (UC) the responder dropped (no receive, access or
    /// state): the requester completes them, as no acknowledgement tells it otherwise.
    pub(super) ctr_dropped: AtomicU32,
    /// Moves of the send doorbell record the model saw on a QP whose doorbells it does not see
    /// (libmlx5's, executed when polled): doorbells between two looks count once.
    pub(super) ctr_dbrec_moves: AtomicU64,
    /// Since when (CLOCK_MONOTONIC ns, the low 16 bits the WQE's index) the WQE of that index
    /// has met a responder not yet ready to receive (0: none).
    pub(super) not_ready_since: AtomicU64,
    pub(super) rq_ci: AtomicU32,
    pub(super) rq_lock: AtomicU32,
}

const _: () = {
    assert!(std::mem::offset_of!(QpHdr, sq_ci) == 128);
    assert!(std::mem::offset_of!(QpHdr, rq_ci) == 192);
    assert!(std::mem::size_of::<QpHdr>() <= QP_DBREC_OFF);
};
pub(super) const QP_DBREC_OFF: usize = 512;
pub(super) const QP_REG_OFF: usize = PAGE;
pub(super) const QP_SQ_OFF: usize = 2 * PAGE;

pub(super) fn hdr<T>(s: &Shm) -> &T {
    debug_assert!(s.len() >= std::mem::size_of::<T>());
    // SAFETY: every object file starts with its header, page-aligned, larger than T; fields
    // shared between processes are atomics; the mapping lives as long as `s`.
    unsafe { &*(s.ptr() as *const T) }
}

/// The doorbell record of an object: in its own header at `own_off`, or in the `Db` object
/// `db_id` (a page of records libmlx5 allocated) at `db_off`. `None` when a `Db` object is gone
/// or the offset lies outside it.
pub(super) fn dbrec_at(m: &Model, s: &Shm, own_off: usize, db_id: u32, db_off: u32) -> Option<*mut u32> {
    if db_id == 0 {
        // SAFETY: the record lies inside the header page.
        return Some(unsafe { s.ptr().add(own_off) } as *mut u32);
    }
    let d = m.lookup(ObjKind::Db, db_id)?;
    let off = PAGE + db_off as usize;
    if db_off % 4 != 0 || off + 8 > d.len() {
        return None;
    }
    // SAFETY: checked inside the Db object's mapping, which this thread's cache keeps.
    Some(unsafe { d.ptr().add(off) } as *mut u32)
}

/// A QP's doorbell record (`[0]` receive counter, `[1]` send counter).
pub(super) fn qp_dbrec(m: &Model, q: &Shm) -> Option<*mut u32> {
    let h: &QpHdr = hdr(q);
    dbrec_at(m, q, QP_DBREC_OFF, h.db_id, h.db_off)
}

/// A CQ's consumer doorbell record.
pub(super) fn cq_dbrec(m: &Model, cq: &Shm) -> Option<*mut u32> {
    let h: &CqHdr = hdr(cq);
    dbrec_at(m, cq, CQ_DBREC_OFF, h.db_id, h.db_off)
}

/// A QP's send and receive rings, checked against the mapping (the header is written by the
/// QP's owner, possibly another process).
pub(super) fn rings(q: &Shm) -> Option<Rings> {
    let h: &QpHdr = hdr(q);
    // SAFETY: fields of the header, inside the mapping; read once each (volatile: the header may
    // be another process's, which may change it), and only these copies are used.
    let (sq_cnt, rq_cnt, rq_stride, sq_off, rq_off) = unsafe {
        (
            std::ptr::read_volatile(&h.sq_wqe_cnt),
            std::ptr::read_volatile(&h.rq_wqe_cnt),
            std::ptr::read_volatile(&h.rq_stride),
            std::ptr::read_volatile(&h.sq_off) as usize,
            std::ptr::read_volatile(&h.rq_off) as usize,
        )
    };
    // counts must be powers of two (the rings are indexed with count - 1 as a mask) and the
    // rings inside the mapping
    if !sq_cnt.is_power_of_two() || !rq_cnt.is_power_of_two() || rq_stride < 16 || rq_stride % 16 != 0 {
        return None;
    }
    let sq_end = sq_off.checked_add((sq_cnt as usize).checked_mul(WQEBB)?)?;
    let rq_end = rq_off.checked_add((rq_cnt as usize).checked_mul(rq_stride as usize)?)?;
    if sq_end > q.len() || rq_end > q.len() || sq_off < QP_SQ_OFF || rq_off < QP_SQ_OFF {
        return None;
    }
    Some(Rings {
        // SAFETY: both offsets checked inside the mapping above.
        sq: unsafe { q.ptr().add(sq_off) },
        sq_cnt,
        // SAFETY: as above.
        rq: unsafe { q.ptr().add(rq_off) },
        rq_cnt,
        rq_stride,
    })
}

/// A QP's rings as checked against its mapping: use these counts, not the header's again.
pub(super) struct Rings {
    pub(super) sq: *mut u8,
    pub(super) sq_cnt: u32,
    pub(super) rq: *mut u8,
    pub(super) rq_cnt: u32,
    pub(super) rq_stride: u32,
}

pub(super) fn owner_of(s: &Shm) -> Option<u32> {
    if s.len() < std::mem::size_of::<ObjHdr>() {
        return None;
    }
    let h: &ObjHdr = hdr(s);
    (h.magic == MAGIC).then_some(h.owner_pid)
}

pub(super) fn init_obj(s: &Shm, id: u32) {
    // SAFETY: a freshly created, zeroed object we own; nobody maps it before it is valid.
    unsafe {
        let h = s.ptr() as *mut ObjHdr;
        (*h).magic = MAGIC;
        (*h).owner_pid = std::process::id();
        (*h).id = id;
    }
}

pub(super) fn try_lock(l: &AtomicU32) -> bool {
    l.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_ok()
}

pub(super) fn lock(l: &AtomicU32) {
    while !try_lock(l) {
        std::hint::spin_loop();
    }
}

pub(super) fn unlock(l: &AtomicU32) {
    l.store(0, Ordering::Release);
}
