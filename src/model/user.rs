//! Objects whose memory someone else allocated: the queues and doorbell-record pages libmlx5
//! allocates, and the memory a program registers through libibverbs (model0 under rdma-core,
//! `src/uverbs`). A kernel pins such memory; model0 "pins" it by mapping an object file over it
//! (`Shm::map_over`): the program keeps its addresses and stores as before, and the bytes live in
//! shared memory that the model, in this process or the peer's, reads and writes. Destroying
//! the object gives the program private memory back with the same bytes, before libmlx5 frees it.

use super::config::io;
use super::direct::{deliver_now, RegCheck};
use super::exec::execute;
use super::layout::{hdr, init_obj, lock, qp_dbrec, state, unlock, MrHdr, ObjHdr, QpHdr, PAGE, QP_SQ_OFF};
use super::objects::{publish, retire, MrPlace, QpShape};
use super::shm::{ObjKind, Shm};
use super::{Model, ModelCq, ModelError, ModelMr, ModelQp, MAX_INLINE};
use crate::mlx5::seg::WQEBB;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A range of the program's memory that an object file is mapped over.
pub(super) struct Pinned {
    addr: usize,
    len: usize,
    off: usize,
}

impl Pinned {
    /// Maps `shm` at `off` over `[addr, addr + len)`.
    ///
    /// # Safety
    /// As [`Shm::map_over`].
    pub(super) unsafe fn new(shm: &Shm, off: usize, addr: usize, len: usize, what: &str) -> Result<Pinned, ModelError> {
        // SAFETY: forwarded from the caller.
        unsafe { shm.map_over(off, addr, len) }.map_err(io(format!("pinning {what} at {addr:#x} ({len} bytes)")))?;
        Ok(Pinned { addr, len, off })
    }

    /// Gives the program private memory back, with the object's bytes.
    pub(super) fn release(self, shm: &Shm) {
        // SAFETY: this range was mapped over by `new` and is released once.
        if let Err(e) = unsafe { shm.unmap_over(self.off, self.addr, self.len) } {
            {
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "rdmaprobe: model0: giving back {:#x} ({} bytes) failed: {e}",
                    self.addr,
                    self.len
                );
            }
        }
    }
}

/// Takes object `shm` out of service and gives back the program's memory it pinned (`user`),
/// once.
pub(super) fn release_user_memory(shm: &Shm, user: &std::sync::Mutex<Option<Pinned>>) {
    hdr::<ObjHdr>(shm).valid.store(0, Ordering::Release);
    super::lookup::note_retired();
    let pin = user.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(p) = pin {
        p.release(shm);
    }
}

fn page_span(addr: usize, len: usize) -> Result<(usize, usize), ModelError> {
    let start = addr & !(PAGE - 1);
    let end = addr
        .checked_add(len)
        .and_then(|e| e.checked_next_multiple_of(PAGE))
        .ok_or_else(|| ModelError::Invalid(format!("range {addr:#x} + {len} overflows")))?;
    Ok((start, end - start))
}

/// A page of doorbell records that libmlx5 allocated, pinned into a `Db` object (records of
/// several QPs and CQs share it).
pub struct ModelDbPage {
    shm: Arc<Shm>,
    id: u32,
    addr: usize,
    pin: Option<Pinned>,
    model: Model,
}

impl ModelDbPage {
    /// The page's address in the program.
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// Its object's id (what a QP's or SRQ's header names it by).
    pub(super) fn id(&self) -> u32 {
        self.id
    }
}

impl Drop for ModelDbPage {
    fn drop(&mut self) {
        retire(&self.shm, self.pin.take(), &self.model.inner.dbs, self.id);
    }
}

/// The rings of a QP as libmlx5 laid them out in its buffer (receive ring first, then the send
/// ring), with what the create command asked.
#[derive(Clone, Copy, Debug)]
pub struct UserQpLayout {
    /// The buffer (page-aligned, `buf_len` a whole number of pages).
    pub buf: usize,
    /// Its length.
    pub buf_len: usize,
    /// Send ring entries (64-byte WQEBBs, a power of two).
    pub sq_wqe_cnt: u32,
    /// Receive ring entries (a power of two, or 0).
    pub rq_wqe_cnt: u32,
    /// Receive WQE stride (a power of two, at least 16).
    pub rq_stride: u32,
    /// Largest inline payload granted.
    pub max_inline: u32,
    /// Responder payloads up to this many bytes are scattered into the CQE (0: never).
    pub scatter_cqe: u32,
    /// The user index CQEs carry (CQE version 1).
    pub uidx: u32,
    /// The shared receive queue its receives come from ([`super::ModelSrq::srqn`]; 0: its own).
    pub srqn: u32,
}

impl Model {
    /// Pins the page at `addr` (page-aligned) that holds doorbell records.
    ///
    /// # Safety
    /// `addr` must be a mapped, writable page of this process that stays allocated until the
    /// returned page is dropped.
    pub unsafe fn map_db_page(&self, addr: usize) -> Result<ModelDbPage, ModelError> {
        if addr % PAGE != 0 {
            return Err(ModelError::Invalid(format!("doorbell page {addr:#x} not page-aligned")));
        }
        let (id, shm) =
            Shm::create(ObjKind::Db, 2 * PAGE, || self.next_id()).map_err(io("creating a doorbell-record page"))?;
        init_obj(&shm, id);
        // SAFETY: forwarded from the caller; the object's second page is the record page.
        let pin = unsafe { Pinned::new(&shm, PAGE, addr, PAGE, "a doorbell-record page")? };
        hdr::<ObjHdr>(&shm).valid.store(1, Ordering::Release);
        let shm = publish(&self.inner.dbs, id, shm);
        Ok(ModelDbPage {
            shm,
            id,
            addr,
            pin: Some(pin),
            model: self.clone(),
        })
    }

    /// Registers `len` bytes of the program's memory at `start`, addressed in WQEs as `iova`.
    ///
    /// # Safety
    /// `[start, start + len)` must be mapped, writable memory of this process that stays
    /// allocated until the region is dropped, and no other region may cover its pages.
    pub unsafe fn reg_user_mr(
        &self,
        pd: u32,
        start: usize,
        len: usize,
        iova: u64,
        access: u32,
    ) -> Result<ModelMr, ModelError> {
        if len == 0 {
            return Err(ModelError::Invalid("memory region of 0 bytes".into()));
        }
        let (pstart, plen) = page_span(start, len)?;
        let (key, shm) =
            Shm::create(ObjKind::Mr, PAGE + plen, || self.next_id()).map_err(io("creating a memory region"))?;
        init_obj(&shm, key);
        // SAFETY: forwarded from the caller; the object's data starts one page in.
        let pin = unsafe { Pinned::new(&shm, PAGE, pstart, plen, "a memory region")? };
        let place = MrPlace {
            base: iova,
            len,
            data: start as *mut u8,
            data_off: (PAGE + (start - pstart)) as u64,
        };
        Ok(self.finish_mr(shm, key, pd, access, place, Some(pin)))
    }

    /// A region of `len` bytes at `start` whose pages the region with key `host` (of this
    /// process, its pinned pages starting at `host_pages`) already pinned: its bytes are the
    /// host's, reached through the host's file (memory registered twice). The host's pinned
    /// pages must outlive it (the caller keeps the host, [`ModelMr::revoke`]d if deregistered
    /// first).
    pub fn reg_user_mr_in(
        &self,
        (pd, access): (u32, u32),
        (start, len, iova): (usize, usize, u64),
        host: u32,
        host_pages: usize,
    ) -> Result<ModelMr, ModelError> {
        if len == 0 || start < host_pages {
            return Err(ModelError::Invalid(format!("memory region {start:#x} + {len}")));
        }
        let (key, shm) = Shm::create(ObjKind::Mr, PAGE, || self.next_id()).map_err(io("creating a memory region"))?;
        init_obj(&shm, key);
        // SAFETY: a header field of our own new object, before it is marked valid.
        unsafe { (*(shm.ptr() as *mut MrHdr)).data_id = host };
        let place = MrPlace {
            base: iova,
            len,
            data: start as *mut u8,
            data_off: (PAGE + (start - host_pages)) as u64,
        };
        Ok(self.finish_mr(shm, key, pd, access, place, None))
    }

    /// A CQ of `cnt` CQEs of `cqe_size` bytes (64 or 128) in the program's buffer `buf`
    /// (page-aligned), its consumer record at `db_off` in `db`.
    ///
    /// # Safety
    /// `buf` must be mapped, writable memory of `cnt * cqe_size` bytes rounded up to whole
    /// pages, allocated until the CQ is dropped; `db` must outlive the CQ.
    pub unsafe fn create_user_cq(
        &self,
        cnt: u32,
        cqe_size: usize,
        buf: usize,
        db: &ModelDbPage,
        db_off: u32,
    ) -> Result<ModelCq, ModelError> {
        if !cnt.is_power_of_two() || !(2..=1 << 22).contains(&cnt) || buf % PAGE != 0 {
            return Err(ModelError::Invalid(format!("CQ of {cnt} entries at {buf:#x}")));
        }
        if db_off as usize % 8 != 0 || db_off as usize + 8 > PAGE {
            return Err(ModelError::Invalid(format!("CQ doorbell record at offset {db_off}")));
        }
        if cqe_size != 64 && cqe_size != 128 {
            return Err(ModelError::Invalid(format!("CQ of {cqe_size}-byte CQEs")));
        }
        let len = (cnt as usize * cqe_size).next_multiple_of(PAGE);
        let (cqn, shm) = Shm::create(ObjKind::Cq, PAGE + len, || self.next_id()).map_err(io("creating a CQ"))?;
        init_obj(&shm, cqn);
        // SAFETY: a header field of our own new object, before it is marked valid.
        unsafe { (*(shm.ptr() as *mut super::layout::CqHdr)).cqe_128 = (cqe_size == 128) as u32 };
        // SAFETY: forwarded from the caller; the CQEs start one page in, as in the model's own.
        let pin = unsafe { Pinned::new(&shm, PAGE, buf, len, "a CQ buffer")? };
        Ok(self.finish_cq(shm, cqn, cnt, (db.id, db_off), Some(pin)))
    }

    /// An RC QP whose rings are libmlx5's buffer (`l`), its doorbell record at `db_off` in `db`.
    ///
    /// # Safety
    /// `l.buf` must be mapped, writable memory of `l.buf_len` bytes, allocated until the QP is
    /// dropped; `db` must outlive the QP.
    pub unsafe fn create_user_qp(
        &self,
        pd: u32,
        send_cq: &ModelCq,
        recv_cq: &ModelCq,
        l: UserQpLayout,
        db: &ModelDbPage,
        db_off: u32,
    ) -> Result<ModelQp, ModelError> {
        let rq_len = l.rq_wqe_cnt as usize * l.rq_stride as usize;
        let sq_len = l.sq_wqe_cnt as usize * WQEBB;
        // a QP without a send queue (max_send_wr 0: qperf's bandwidth server) has no send ring in
        // libmlx5's buffer; the model's ring of one WQEBB is then its own, past the pinned part
        let ok = (l.sq_wqe_cnt == 0 || l.sq_wqe_cnt.is_power_of_two())
            && l.sq_wqe_cnt <= 32768
            && (l.rq_wqe_cnt == 0 || (l.rq_wqe_cnt.is_power_of_two() && l.rq_wqe_cnt <= 32768))
            && l.rq_stride.is_power_of_two()
            && (16..=512).contains(&l.rq_stride)
            && l.buf % PAGE == 0
            && l.buf_len % PAGE == 0
            && rq_len + sq_len <= l.buf_len
            && l.max_inline <= MAX_INLINE
            && db_off as usize % 8 == 0
            && db_off as usize + 8 <= PAGE;
        if !ok {
            return Err(ModelError::Invalid(format!(
                "QP layout {l:?}, doorbell record at {db_off}"
            )));
        }
        let own_sq = if l.sq_wqe_cnt == 0 { WQEBB } else { 0 };
        let (qpn, shm) =
            Shm::create(ObjKind::Qp, QP_SQ_OFF + l.buf_len + own_sq, || self.next_id()).map_err(io("creating a QP"))?;
        // SAFETY: forwarded from the caller; the rings start two pages in, as in the model's own.
        let pin = unsafe { Pinned::new(&shm, QP_SQ_OFF, l.buf, l.buf_len, "a QP buffer")? };
        let sq_off = if own_sq == 0 {
            QP_SQ_OFF + rq_len
        } else {
            QP_SQ_OFF + l.buf_len
        };
        let shape = QpShape {
            sq_wqe_cnt: l.sq_wqe_cnt.max(1),
            // An RQ of 0 entries (max_recv_wr 0) is a ring of one that never holds a receive.
            rq_wqe_cnt: l.rq_wqe_cnt.max(1),
            rq_stride: l.rq_stride,
            max_inline: l.max_inline,
            rq_off: QP_SQ_OFF as u32,
            sq_off: sq_off as u32,
            db: (db.id, db_off),
            scatter_cqe: l.scatter_cqe,
            uidx: l.uidx,
            srqn: l.srqn,
        };
        Ok(self.finish_qp(shm, qpn, pd, (send_cq, recv_cq), shape, Some(pin)))
    }
}

impl ModelQp {
    /// After a post whose doorbell the model does not see (libmlx5 rings a register page that
    /// nothing watches): the wire, then the WQEs up to the doorbell record, now. One doorbell
    /// (libmlx5 rings once per post call).
    pub fn deliver_rung(&self) {
        deliver_now(&self.model, &self.shm, (RegCheck::Doorbell, 1));
    }

    /// Destruction through libibverbs: the QP leaves service and the program gets its memory
    /// back now, before libmlx5 frees it, even while another thread still holds this QP (a
    /// concurrent `uverbs::progress`, a backend's handle): from here on the model reaches the
    /// rings only through its own object file, never the program's addresses.
    pub fn release_user_memory(&self) {
        release_user_memory(&self.shm, &self.user);
    }

    /// Back to RESET (libmlx5 then starts its rings over at index 0): the model's consumer
    /// indices follow.
    pub fn reset(&self) {
        let h: &QpHdr = hdr(&self.shm);
        lock(&h.sq_lock);
        lock(&h.rq_lock);
        h.state.store(state::RESET, Ordering::Release);
        h.sq_ci.store(0, Ordering::Relaxed);
        h.rq_ci.store(0, Ordering::Relaxed);
        unlock(&h.rq_lock);
        unlock(&h.sq_lock);
    }

    /// After a post, or while waiting, with libmlx5 ringing: when the send doorbell record moved
    /// since `seen` (the last value this caller delivered), the wire and then the WQEs up to it
    /// (as a doorbell would set off); otherwise only what is left to run (a sender resumed after
    /// RNR), with no wire.
    pub fn deliver_if_rung(&self, seen: &mut u32) {
        let Some(db) = qp_dbrec(&self.model, &self.shm) else {
            return;
        };
        // SAFETY: the send counter, dbrec[1] (checked by qp_dbrec).
        let pi = unsafe { std::ptr::read_volatile(db.add(1)) };
        if pi != *seen {
            *seen = pi;
            // the record moved: at least one doorbell (libmlx5's register page is not watched,
            // so doorbells between two looks are not told apart): counted as a move, not as
            // doorbells
            // (a locked add: two threads may poll one QP)
            hdr::<QpHdr>(&self.shm).ctr_dbrec_moves.fetch_add(1, Ordering::Relaxed);
            deliver_now(&self.model, &self.shm, (RegCheck::Doorbell, 0));
        } else {
            execute(&self.model, &self.shm, RegCheck::None, 0);
        }
    }

    /// Whether WQEs rung on its send queue wait to be executed (a send stalled on RNR, or on a
    /// responder not yet ready): what the doorbell trap's sweeper looks for.
    pub fn sends_waiting(&self) -> bool {
        qp_dbrec(&self.model, &self.shm).is_some_and(|db| {
            let (ci, target) = super::exec::rung_range(hdr::<QpHdr>(&self.shm), db);
            ci != target
        })
    }

    /// After receives were posted by someone other than the direct path (libmlx5): a QP in
    /// error flushes them, a peer stalled on RNR goes on.
    pub fn receives_posted(&self) {
        super::recv::receives_posted(&self.model, &self.shm, self.model.inner.cfg.exec);
    }

    /// The shared receive queue its receives come from (0: its own receive queue).
    pub fn srqn(&self) -> u32 {
        hdr::<QpHdr>(&self.shm).srqn
    }
}
