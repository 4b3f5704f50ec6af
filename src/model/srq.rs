//! Shared receive queues as libmlx5 lays them out (`providers/mlx5/srq.c`): a ring of WQEs, each
//! a 16-byte next segment (`next_wqe_index` at bytes 2..4) and scatter entries, linked into a
//! list the program keeps; a doorbell record with the count of receives posted. The device takes
//! the WQE the list leads to (from index 0 on), follows its link to the next one, and reports the
//! WQE's index in the CQE (libmlx5 takes the receive's `wr_id` by that index and puts the WQE back
//! at the tail of its free list). A QP attached to an SRQ has no receive queue of its own; the
//! SRQ's receives are not flushed when one of its QPs goes to error.

use super::config::io;
use super::layout::{dbrec_at, hdr, init_obj, lock, unlock, ObjHdr, PAGE};
use super::objects::{publish, retire};
use super::shm::{ObjKind, Shm};
use super::user::{ModelDbPage, Pinned};
use super::{Model, ModelError};
use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// An SRQ object's header (its ring is pinned one page in).
#[repr(C)]
pub(super) struct SrqHdr {
    pub(super) obj: ObjHdr,
    pub(super) pd: u32,
    pub(super) wqe_cnt: u32,
    pub(super) stride: u32,
    pub(super) db_id: u32,
    pub(super) db_off: u32,
    pub(super) lock: AtomicU32,
    /// The index of the WQE the device takes next.
    pub(super) next: AtomicU32,
    /// Receives taken (compared with the doorbell record's count modulo 2^16).
    pub(super) taken: AtomicU32,
}
const _: () = assert!(std::mem::size_of::<SrqHdr>() <= PAGE);
const SRQ_RING_OFF: usize = PAGE;

/// An SRQ's ring as libmlx5 allocated it, with what the create command asked.
#[derive(Clone, Copy, Debug)]
pub struct UserSrqLayout {
    /// The buffer (page-aligned).
    pub buf: usize,
    /// WQEs in the ring (a power of two).
    pub wqe_cnt: u32,
    /// Bytes per WQE (a power of two, 32 to 512).
    pub stride: u32,
}

/// A shared receive queue in shared memory, its ring the program's (pinned).
pub struct ModelSrq {
    shm: Arc<Shm>,
    srqn: u32,
    model: Model,
    user: Mutex<Option<Pinned>>,
}

impl ModelSrq {
    /// Its SRQ number (what a QP's header names it by).
    pub fn srqn(&self) -> u32 {
        self.srqn
    }

    /// Destruction through libibverbs: the program gets its ring back now, before libmlx5 frees
    /// it; a sender still holding the SRQ finds it invalid.
    pub fn release_user_memory(&self) {
        super::user::release_user_memory(&self.shm, &self.user);
    }
}

impl Drop for ModelSrq {
    fn drop(&mut self) {
        let pin = self.user.get_mut().unwrap_or_else(|p| p.into_inner()).take();
        retire(&self.shm, pin, &self.model.inner.srqs, self.srqn);
    }
}

impl Model {
    /// An SRQ over libmlx5's ring `l` and the doorbell record at `db_off` in `db`.
    ///
    /// # Safety
    /// `l.buf` must be a mapped, writable buffer of this process of `wqe_cnt * stride` bytes (a
    /// whole number of pages) that stays allocated until the SRQ's memory is released.
    pub unsafe fn create_user_srq(
        &self,
        pd: u32,
        l: UserSrqLayout,
        db: &ModelDbPage,
        db_off: u32,
    ) -> Result<ModelSrq, ModelError> {
        let len = l.wqe_cnt as usize * l.stride as usize;
        let ok = l.wqe_cnt.is_power_of_two()
            && l.wqe_cnt <= 1 << 15
            && l.stride.is_power_of_two()
            && (32..=512).contains(&l.stride)
            && l.buf % PAGE == 0
            && db_off as usize % 4 == 0
            && db_off as usize + 4 <= PAGE;
        if !ok {
            return Err(ModelError::Invalid(format!(
                "SRQ layout {l:?}, doorbell record at {db_off}"
            )));
        }
        let pinned = len.next_multiple_of(PAGE);
        let (srqn, shm) =
            Shm::create(ObjKind::Srq, SRQ_RING_OFF + pinned, || self.next_id()).map_err(io("creating an SRQ"))?;
        // SAFETY: forwarded from the caller; the ring starts one page in.
        let pin = unsafe { Pinned::new(&shm, SRQ_RING_OFF, l.buf, pinned, "an SRQ ring")? };
        init_obj(&shm, srqn);
        // SAFETY: header fields of our own new object, before it is marked valid.
        unsafe {
            let h = shm.ptr() as *mut SrqHdr;
            (*h).pd = pd;
            (*h).wqe_cnt = l.wqe_cnt;
            (*h).stride = l.stride;
            (*h).db_id = db.id();
            (*h).db_off = db_off;
        }
        hdr::<ObjHdr>(&shm).valid.store(1, Ordering::Release);
        let shm = publish(&self.inner.srqs, srqn, shm);
        Ok(ModelSrq {
            shm,
            srqn,
            model: self.clone(),
            user: Mutex::new(Some(pin)),
        })
    }
}

/// A receive WQE taken from an SRQ: where its scatter entries start, their bytes, and the
/// WQE's index (the CQE's WQE counter).
pub(super) struct SrqWqe {
    pub(super) segs: *mut u8,
    pub(super) len: usize,
    pub(super) index: u16,
}

/// Takes the next posted receive of SRQ `s` (its lock held by the caller): `Ok(None)` when none
/// is posted, `Err(())` when its doorbell record, ring or link is not one (another process's
/// header or ring, checked as read).
pub(super) fn take(m: &Model, s: &Shm) -> Result<Option<SrqWqe>, ()> {
    let h: &SrqHdr = hdr(s);
    // SAFETY: header fields inside the mapping, read once each (another process owns them).
    let (cnt, stride, db_id, db_off) = unsafe {
        (
            std::ptr::read_volatile(&h.wqe_cnt),
            std::ptr::read_volatile(&h.stride) as usize,
            std::ptr::read_volatile(&h.db_id),
            std::ptr::read_volatile(&h.db_off),
        )
    };
    let db = dbrec_at(m, s, 0, db_id, db_off).filter(|_| db_id != 0).ok_or(())?;
    if !cnt.is_power_of_two() || !(32..=512).contains(&stride) || stride % 16 != 0 {
        return Err(());
    }
    let end = SRQ_RING_OFF
        .checked_add((cnt as usize).checked_mul(stride).ok_or(())?)
        .ok_or(())?;
    if end > s.len() {
        return Err(());
    }
    // SAFETY: the record lies inside its Db object (checked by dbrec_at).
    let posted = u32::from_be(unsafe { std::ptr::read_volatile(db) }) & 0xffff;
    let taken = h.taken.load(Ordering::Relaxed);
    if taken & 0xffff == posted {
        return Ok(None);
    }
    fence(Ordering::Acquire);
    let index = h.next.load(Ordering::Relaxed) & (cnt - 1);
    // SAFETY: WQE `index` inside the ring (checked above).
    let wqe = unsafe { s.ptr().add(SRQ_RING_OFF + index as usize * stride) };
    // SAFETY: the next segment's `next_wqe_index` (big-endian, bytes 2..4 of the WQE).
    let link = u16::from_be(unsafe { std::ptr::read_volatile(wqe.add(2) as *const u16) });
    h.next.store(u32::from(link) & (cnt - 1), Ordering::Relaxed);
    h.taken.store(taken.wrapping_add(1), Ordering::Relaxed);
    Ok(Some(SrqWqe {
        // SAFETY: the scatter entries follow the 16-byte next segment, inside the WQE.
        segs: unsafe { wqe.add(16) },
        len: stride - 16,
        index: index as u16,
    }))
}

/// Holds SRQ `s`'s lock while alive.
pub(super) struct Locked<'a>(&'a SrqHdr);

impl<'a> Locked<'a> {
    pub(super) fn new(s: &'a Shm) -> Self {
        let h: &SrqHdr = hdr(s);
        lock(&h.lock);
        Locked(h)
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        unlock(&self.0.lock);
    }
}
