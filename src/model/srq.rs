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

    /// What it takes, as CREATE_SRQ and QUERY_SRQ answer: receives (one slot of the ring is
    /// libmlx5's spare) and scatter entries per WQE (after the 16-byte next segment).
    pub fn caps(&self) -> (u32, u32) {
        let h = hdr::<SrqHdr>(&self.shm);
        (h.wqe_cnt - 1, (h.stride - 16) / 16)
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
    let (cnt, stride) = unsafe {
        (
            std::ptr::read_volatile(&h.wqe_cnt),
            std::ptr::read_volatile(&h.stride) as usize,
        )
    };
    let posted = count_posted(m, s).ok_or(())?;
    if !cnt.is_power_of_two() || !(32..=512).contains(&stride) || stride % 16 != 0 {
        return Err(());
    }
    let end = SRQ_RING_OFF
        .checked_add((cnt as usize).checked_mul(stride).ok_or(())?)
        .ok_or(())?;
    if end > s.len() {
        return Err(());
    }
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

/// Whether SRQ `s` has a receive posted (`None`: its doorbell record is not one).
pub(super) fn posted(m: &Model, s: &Shm) -> Option<bool> {
    let h: &SrqHdr = hdr(s);
    Some(h.taken.load(Ordering::Relaxed) & 0xffff != count_posted(m, s)?)
}

/// The count of receives posted to SRQ `s`, from its doorbell record (`None`: not one).
fn count_posted(m: &Model, s: &Shm) -> Option<u32> {
    let h: &SrqHdr = hdr(s);
    // SAFETY: header fields inside the mapping, read once each (another process owns them).
    let (db_id, db_off) = unsafe { (std::ptr::read_volatile(&h.db_id), std::ptr::read_volatile(&h.db_off)) };
    let db = dbrec_at(m, s, 0, db_id, db_off).filter(|_| db_id != 0)?;
    // SAFETY: the record lies inside its Db object (checked by dbrec_at).
    Some(u32::from_be(unsafe { std::ptr::read_volatile(db) }) & 0xffff)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mlx5::cq::{cqe_op, Cq, Cqe};
    use crate::mlx5::seg::DataSeg;
    use crate::mlx5::sq::DbMode;
    use crate::mlx5::wqe::{Payload, Wqe};
    use crate::model::layout::QpHdr;
    use crate::model::{DirectModelQp, ExecMode, ModelConfig, ModelConnect, ModelQpCaps};
    use crate::sys;
    use crate::test_pages::Page;

    fn next(cq: &mut Cq) -> Cqe {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut out = [Cqe::default(); 1];
        loop {
            if cq.poll(&mut out).expect("a good CQE") == 1 {
                return out[0];
            }
            assert!(std::time::Instant::now() < deadline, "no CQE within 5 s");
        }
    }

    /// Receives from an SRQ laid out as libmlx5 lays it out: each message takes the WQE the
    /// links lead to (0, then 1, then the link the program rewrote: 5), the CQE names that
    /// WQE, the data lands in its buffer; a WRITE with immediate takes one too; with none
    /// posted the sender waits, and goes on once one is.
    #[test]
    fn receives_follow_the_srq_s_links() {
        let m = Model::open(ModelConfig {
            exec: ExecMode::Inline,
            ..Default::default()
        })
        .unwrap();
        let pd = m.alloc_pd();
        let mk = || DirectModelQp::new(&m, pd, ModelQpCaps::default(), 64, DbMode::Db).unwrap();
        let (mut a, mut b) = (mk(), mk());
        a.qp.connect(b.qp.qpn(), ModelConnect::default());
        b.qp.connect(a.qp.qpn(), ModelConnect::default());
        let all = sys::IBV_ACCESS_LOCAL_WRITE | sys::IBV_ACCESS_REMOTE_WRITE;
        let (src, dst) = (m.reg_mr(pd, PAGE, all).unwrap(), m.reg_mr(pd, PAGE, all).unwrap());
        // pages of this process, as libmlx5 allocates its rings
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        let (ring, dbp) = (Page::new(rw), Page::new(rw));
        // SAFETY: pages of ours, kept until the SRQ and the record page are dropped (below).
        let db = unsafe { m.map_db_page(dbp.0 as usize) }.unwrap();
        let l = UserSrqLayout {
            buf: ring.0 as usize,
            wqe_cnt: 8,
            stride: 32,
        };
        // SAFETY: as above.
        let srq = unsafe { m.create_user_srq(pd, l, &db, 0) }.unwrap();
        let s = m.lookup(ObjKind::Qp, b.qp.qpn()).unwrap();
        // SAFETY: b's header, in our own mapping: b takes its receives from the SRQ now.
        unsafe { (*(s.ptr() as *mut QpHdr)).srqn = srq.srqn() };
        // WQE i: linked to i + 1, its buffer 64 bytes at dst + 64 i
        let wqe = |i: usize, link: u16| {
            // SAFETY: WQE i inside the pinned ring.
            unsafe {
                let w = ring.0.add(i * 32);
                std::ptr::write_volatile(w.add(2) as *mut u16, link.to_be());
                let seg = DataSeg::new(dst.addr() + 64 * i as u64, dst.lkey(), 64);
                std::ptr::write_volatile(w.add(16) as *mut DataSeg, seg);
            }
        };
        let post = |n: u32| {
            // SAFETY: the SRQ's record, in the pinned page.
            unsafe { std::ptr::write_volatile(dbp.0 as *mut u32, n.to_be()) };
        };
        for i in 0..8 {
            wqe(i, i as u16 + 1);
        }
        // the program's list after WQE 1: WQE 5 (as after frees out of order)
        wqe(1, 5);
        post(2);
        src.write(0, b"one two three!");
        let sge = [DataSeg::new(src.addr(), src.lkey(), 3)];
        a.sq.post_and_ring(&Wqe::send(Payload::Gather(&sge))).unwrap();
        let c = next(&mut b.cq);
        assert_eq!((c.opcode, c.wqe_counter, c.byte_cnt), (cqe_op::RESP_SEND, 0, 3));
        let w = Wqe::write_imm(dst.addr() + 600, dst.rkey(), 7, Payload::Gather(&sge));
        a.sq.post_and_ring(&w).unwrap();
        let c = next(&mut b.cq);
        assert_eq!((c.opcode, c.wqe_counter), (cqe_op::RESP_WR_IMM, 1));
        // none posted: the SEND waits
        let sge2 = [DataSeg::new(src.addr() + 4, src.lkey(), 3)];
        a.sq.post_and_ring(&Wqe::send(Payload::Gather(&sge2))).unwrap();
        let mut out = [Cqe::default(); 1];
        assert_eq!(b.cq.poll(&mut out), Ok(0));
        post(3);
        a.qp.progress();
        let c = next(&mut b.cq);
        assert_eq!((c.opcode, c.wqe_counter, c.byte_cnt), (cqe_op::RESP_SEND, 5, 3));
        let mut got = [0u8; 3];
        dst.read(0, &mut got);
        assert_eq!(&got, b"one");
        dst.read(600, &mut got);
        assert_eq!(&got, b"one", "the WRITE's data");
        dst.read(64 * 5, &mut got);
        assert_eq!(&got, b"two");
        srq.release_user_memory();
        drop((srq, db));
    }
}
