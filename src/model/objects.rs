//! model0's objects and their API: the per-process [`Model`] handle (opening, ids, protection
//! domains, counters), creation of memory regions, CQs and QPs, and the handles [`ModelMr`],
//! [`ModelCq`], [`ModelQp`] that take them out of service. Their lookup, from any process, is
//! `lookup`'s.

use super::config::{
    io, ExecMode, ModelConfig, ModelConnect, ModelError, ModelQpCaps, BF_SIZE, MAX_INLINE, MAX_WIRE_DELAY_NS,
    SQ_OVERHEAD,
};
use super::cqe::set_err;
use super::direct::{deliver_now, ModelDoorbell, Pending};
use super::exec::execute;
use super::layout::{
    hdr, init_obj, owner_of, qp_dbrec, state, CqHdr, MrHdr, ObjHdr, QpHdr, CQ_DBREC_OFF, PAGE, QP_DBREC_OFF,
    QP_REG_OFF, QP_SQ_OFF,
};
use super::lookup::note_retired;
use super::shm::{self, ObjKind, Shm};
use super::user;
use super::wire::{wire_clock, WIRE_TIMED};
use crate::clock;
use crate::mlx5::cq::{cqe_op, CqConfig};
use crate::mlx5::rq::RqConfig;
use crate::mlx5::seg::WQEBB;
use crate::mlx5::sq::SqConfig;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

pub(super) struct Inner {
    pub(super) cfg: ModelConfig,
    rng: Mutex<u64>,
    pub(super) mrs: Mutex<HashMap<u32, Arc<Shm>>>,
    pub(super) qps: Mutex<HashMap<u32, Arc<Shm>>>,
    pub(super) cqs: Mutex<HashMap<u32, Arc<Shm>>>,
    pub(super) dbs: Mutex<HashMap<u32, Arc<Shm>>>,
    pub(super) srqs: Mutex<HashMap<u32, Arc<Shm>>>,
    next_pd: AtomicU32,
    /// The counters of this handle's QPs and CQs already destroyed.
    retired: Mutex<Counters>,
}

/// model0's counters by name (as a NIC's port counters).
pub type Counters = std::collections::BTreeMap<String, u64>;

fn add(c: &mut Counters, k: &str, v: u64) {
    if v > 0 {
        *c.entry(k.to_string()).or_default() += v;
    }
}

/// Adds a QP's counters to `c`.
fn add_qp(c: &mut Counters, s: &Shm) {
    let h: &QpHdr = hdr(s);
    add(c, "wqes_executed", h.ctr_wqes.load(Ordering::Relaxed));
    add(c, "doorbells", h.ctr_doorbells.load(Ordering::Relaxed));
    add(
        c,
        "doorbell_record_moves_seen",
        h.ctr_dbrec_moves.load(Ordering::Relaxed),
    );
    add(c, "blueflame_writes_checked", h.ctr_bf_writes.load(Ordering::Relaxed));
    add(c, "rnr_events", h.ctr_rnr.load(Ordering::Relaxed) as u64);
    add(c, "dropped_messages", h.ctr_dropped.load(Ordering::Relaxed) as u64);
    add(c, "bad_doorbells", h.bad_doorbells.load(Ordering::Relaxed) as u64);
}

/// Adds a CQ's counters to `c`.
fn add_cq(c: &mut Counters, s: &Shm) {
    let k = super::layout::cq_counters(s);
    add(c, "cqes", k.cqes.load(Ordering::Relaxed));
    add(c, "completion_events", k.events.load(Ordering::Relaxed));
    add(c, "completion_events_lost", k.events_lost.load(Ordering::Relaxed));
    add(
        c,
        "cq_overruns",
        hdr::<super::layout::CqHdr>(s).overruns.load(Ordering::Relaxed) as u64,
    );
    for (i, e) in k.errors.iter().enumerate() {
        add(
            c,
            &format!("error_cqes_syndrome_0x{i:02x}"),
            e.load(Ordering::Relaxed) as u64,
        );
    }
}

/// A process's handle on model0. Cheap to clone.
#[derive(Clone)]
pub struct Model {
    pub(super) inner: Arc<Inner>,
}

impl Model {
    /// Opens the model for this process; removes objects left by processes that died.
    pub fn open(cfg: ModelConfig) -> Result<Self, ModelError> {
        shm::secure_dir().map_err(io(format!("opening {}", shm::dir().display())))?;
        shm::sweep(owner_of);
        if let Some(d) = cfg.wire_delay_ns {
            if d > MAX_WIRE_DELAY_NS {
                return Err(ModelError::Invalid(format!(
                    "wire delay {d} ns exceeds the model's limit of {MAX_WIRE_DELAY_NS} ns (1 s)"
                )));
            }
            wire_clock();
        }
        let seed = clock::start() ^ ((std::process::id() as u64) << 32) ^ 0x9e37_79b9_7f4a_7c15;
        Ok(Model {
            inner: Arc::new(Inner {
                cfg,
                rng: Mutex::new(seed | 1),
                mrs: Mutex::new(HashMap::new()),
                qps: Mutex::new(HashMap::new()),
                cqs: Mutex::new(HashMap::new()),
                dbs: Mutex::new(HashMap::new()),
                srqs: Mutex::new(HashMap::new()),
                next_pd: AtomicU32::new(1),
                retired: Mutex::new(Counters::new()),
            }),
        })
    }

    /// This handle's counters: WQEs executed, doorbells rung (where each is seen: the direct
    /// path's, and a libmlx5 post call the model runs after), for libmlx5's QPs executed when
    /// polled the moves of the doorbell record seen (several doorbells count once), BlueFlame writes
    /// seen, RNR events, bad doorbells, CQEs written, error completions by syndrome, CQ
    /// overruns; over its QPs and CQs, those destroyed included. Only the non-zero ones.
    pub fn counters(&self) -> Counters {
        let mut c = self.inner.retired.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for q in self.inner.qps.lock().unwrap_or_else(|p| p.into_inner()).values() {
            add_qp(&mut c, q);
        }
        for q in self.inner.cqs.lock().unwrap_or_else(|p| p.into_inner()).values() {
            add_cq(&mut c, q);
        }
        c
    }

    /// The process that owns QP `qpn`, if it is a QP of this model.
    pub fn qp_owner(&self, qpn: u32) -> Option<u32> {
        self.lookup(ObjKind::Qp, qpn).and_then(|q| owner_of(&q))
    }

    /// The knobs in force.
    pub fn config(&self) -> ModelConfig {
        self.inner.cfg
    }

    pub(super) fn next_id(&self) -> u32 {
        let mut s = self.inner.rng.lock().unwrap_or_else(|p| p.into_inner());
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        (*s >> 8) as u32
    }

    /// A protection domain number, unique across processes.
    pub fn alloc_pd(&self) -> u32 {
        (std::process::id() << 8) ^ self.inner.next_pd.fetch_add(1, Ordering::Relaxed)
    }

    /// Registers `len` bytes of fresh shared memory with `access` (`IBV_ACCESS_*` bits) in `pd`.
    pub fn reg_mr(&self, pd: u32, len: usize, access: u32) -> Result<ModelMr, ModelError> {
        if len == 0 {
            return Err(ModelError::Invalid("memory region of 0 bytes".into()));
        }
        let total = PAGE + len.div_ceil(PAGE) * PAGE;
        let (key, shm) = Shm::create(ObjKind::Mr, total, || self.next_id()).map_err(io("creating a memory region"))?;
        init_obj(&shm, key);
        // SAFETY: our new object; the data area starts one page in.
        let data = unsafe { shm.ptr().add(PAGE) };
        let place = MrPlace {
            base: data as u64,
            len,
            data,
            data_off: PAGE as u64,
        };
        Ok(self.finish_mr(shm, key, pd, access, place, None))
    }

    /// Fills a new memory region's header (where its bytes are, `access`, `pd`), marks it
    /// valid and publishes it: the model's own regions and those pinned over a program's memory.
    /// `shm` is a new object of this process, not yet valid.
    pub(super) fn finish_mr(
        &self,
        shm: Shm,
        key: u32,
        pd: u32,
        access: u32,
        p: MrPlace,
        user: Option<user::Pinned>,
    ) -> ModelMr {
        // SAFETY: header fields of our own new object, before it is marked valid.
        unsafe {
            let h = shm.ptr() as *mut MrHdr;
            (*h).base = p.base;
            (*h).len = p.len as u64;
            (*h).access = access;
            (*h).pd = pd;
            (*h).data_off = p.data_off;
        }
        hdr::<ObjHdr>(&shm).valid.store(1, Ordering::Release);
        let shm = publish(&self.inner.mrs, key, shm);
        ModelMr {
            shm,
            key,
            data: p.data,
            base: p.base,
            len: p.len,
            model: self.clone(),
            user,
        }
    }

    /// Creates a CQ of at least `cqe` entries (rounded up to a power of two).
    pub fn create_cq(&self, cqe: u32) -> Result<ModelCq, ModelError> {
        let cnt = cqe
            .max(2)
            .checked_next_power_of_two()
            .ok_or_else(|| ModelError::Invalid(format!("CQ size {cqe}")))?;
        let total = PAGE + cnt as usize * 64;
        let (cqn, shm) = Shm::create(ObjKind::Cq, total, || self.next_id()).map_err(io("creating a CQ"))?;
        init_obj(&shm, cqn);
        // SAFETY: our new object: every CQE's op_own set to INVALID, before it is marked valid.
        unsafe {
            for i in 0..cnt as usize {
                *shm.ptr().add(PAGE + i * 64 + 63) = cqe_op::INVALID << 4;
            }
        }
        Ok(self.finish_cq(shm, cqn, cnt, (0, 0), None))
    }

    /// Fills a new CQ's header (`cnt` CQEs, the consumer record's `Db` object and offset, (0, 0):
    /// in the header), marks it valid and publishes it: the model's own CQs and those pinned over
    /// a program's buffer. `shm` is a new object of this process, not yet valid.
    pub(super) fn finish_cq(
        &self,
        shm: Shm,
        cqn: u32,
        cnt: u32,
        db: (u32, u32),
        user: Option<user::Pinned>,
    ) -> ModelCq {
        // SAFETY: header fields of our own new object, before it is marked valid.
        unsafe {
            let h = shm.ptr() as *mut CqHdr;
            (*h).cqe_cnt = cnt;
            (*h).db_id = db.0;
            (*h).db_off = db.1;
        }
        hdr::<ObjHdr>(&shm).valid.store(1, Ordering::Release);
        let shm = publish(&self.inner.cqs, cqn, shm);
        ModelCq {
            shm,
            cqn,
            cnt,
            user,
            model: self.clone(),
        }
    }

    /// Creates an RC QP in `pd`.
    pub fn create_qp(
        &self,
        pd: u32,
        send_cq: &ModelCq,
        recv_cq: &ModelCq,
        caps: ModelQpCaps,
    ) -> Result<ModelQp, ModelError> {
        // As libmlx5 sizes a plain RC QP on a ConnectX (providers/mlx5/verbs.c, rdma-core 44:
        // _sq_overhead, mlx5_calc_send_wqe, mlx5_calc_sq_size): the largest WQE is the 192 B a
        // bind-MW/local-invalidate UMR takes (16 control + 48 UMR control + 64 mkey context + 64
        // KLM), or that overhead plus one gather entry, or plus the inline segment of
        // max_inline_data bytes; rounded up to a WQEBB; the inline limit granted is what that WQE
        // leaves (asking 220 grants 252); the ring holds max_send_wr of them, a power of two.
        if caps.max_inline_data > MAX_INLINE {
            return Err(ModelError::Invalid(format!("unsupported capabilities {caps:?}")));
        }
        let inl = match caps.max_inline_data as usize {
            0 => 0,
            n => SQ_OVERHEAD + (4 + n).next_multiple_of(16),
        };
        let wqe = (SQ_OVERHEAD + 16).max(inl).next_multiple_of(WQEBB);
        let granted_inline = (wqe - SQ_OVERHEAD - 4) as u32;
        let sq_cnt = (caps.max_send_wr.max(1) as usize * wqe)
            .checked_next_power_of_two()
            .map(|b| b / WQEBB)
            .filter(|&c| c <= 32768)
            .map(|c| c as u32);
        let rq_cnt = caps
            .max_recv_wr
            .max(1)
            .checked_next_power_of_two()
            .filter(|&c| c <= 32768);
        let (Some(sq_cnt), Some(rq_cnt)) = (sq_cnt, rq_cnt) else {
            return Err(ModelError::Invalid(format!("queue sizes {caps:?} exceed 32768")));
        };
        if caps.max_recv_sge == 0 || caps.max_recv_sge > 32 {
            return Err(ModelError::Invalid(format!("unsupported capabilities {caps:?}")));
        }
        let rq_stride = (caps.max_recv_sge * 16).next_power_of_two();
        let total = QP_SQ_OFF + sq_cnt as usize * WQEBB + rq_cnt as usize * rq_stride as usize;
        let (qpn, shm) = Shm::create(ObjKind::Qp, total, || self.next_id()).map_err(io("creating a QP"))?;
        Ok(self.finish_qp(
            shm,
            qpn,
            pd,
            (send_cq, recv_cq),
            QpShape {
                sq_wqe_cnt: sq_cnt,
                rq_wqe_cnt: rq_cnt,
                rq_stride,
                max_inline: granted_inline,
                sq_off: QP_SQ_OFF as u32,
                rq_off: (QP_SQ_OFF + sq_cnt as usize * WQEBB) as u32,
                db: (0, 0),
                scatter_cqe: 0,
                uidx: 0,
                srqn: 0,
            },
            None,
        ))
    }

    /// Fills a new QP object's header (the model's defaults: RNR retry 7, RNR timer 12, the
    /// configured wire delay), marks it valid and publishes it.
    pub(super) fn finish_qp(
        &self,
        shm: Shm,
        qpn: u32,
        pd: u32,
        cqs: (&ModelCq, &ModelCq),
        q: QpShape,
        user: Option<user::Pinned>,
    ) -> ModelQp {
        init_obj(&shm, qpn);
        // SAFETY: header fields of our own new object, before it is marked valid.
        unsafe {
            let h = shm.ptr() as *mut QpHdr;
            (*h).pd = pd;
            (*h).send_cqn = cqs.0.cqn;
            (*h).recv_cqn = cqs.1.cqn;
            (*h).sq_wqe_cnt = q.sq_wqe_cnt;
            (*h).rq_wqe_cnt = q.rq_wqe_cnt;
            (*h).rq_stride = q.rq_stride;
            (*h).max_inline = q.max_inline;
            (*h).sq_off = q.sq_off;
            (*h).rq_off = q.rq_off;
            (*h).db_id = q.db.0;
            (*h).db_off = q.db.1;
            (*h).scatter_cqe = q.scatter_cqe;
            (*h).uidx = q.uidx;
            (*h).srqn = q.srqn;
            (*h).atomic_be = self.inner.cfg.atomic_big_endian as u32;
            (*h).check_reg = user.is_none() as u32;
        }
        let h: &QpHdr = hdr(&shm);
        h.rnr_retry.store(7, Ordering::Relaxed);
        h.min_rnr_timer.store(12, Ordering::Relaxed);
        h.wire_delay_ns.store(
            self.inner.cfg.wire_delay_ns.map_or(0, |d| d | WIRE_TIMED),
            Ordering::Relaxed,
        );
        h.obj.valid.store(1, Ordering::Release);
        let shm = publish(&self.inner.qps, qpn, shm);
        ModelQp {
            shm,
            qpn,
            pending: Arc::new(Pending::default()),
            model: self.clone(),
            _cqs: (cqs.0.shm.clone(), cqs.1.shm.clone()),
            user: Mutex::new(user),
        }
    }
}

/// Where a new memory region's bytes are.
pub(super) struct MrPlace {
    /// The address WQEs use for its first byte (the I/O virtual address of a region registered
    /// through libibverbs).
    pub(super) base: u64,
    /// Its length.
    pub(super) len: usize,
    /// Where this process reaches its first byte.
    pub(super) data: *mut u8,
    /// Where `base` lies in the file.
    pub(super) data_off: u64,
}

/// The layout and options of a new QP object's header.
pub(super) struct QpShape {
    pub(super) sq_wqe_cnt: u32,
    pub(super) rq_wqe_cnt: u32,
    pub(super) rq_stride: u32,
    pub(super) max_inline: u32,
    pub(super) sq_off: u32,
    pub(super) rq_off: u32,
    /// The doorbell record's `Db` object and offset ((0, 0): in the header).
    pub(super) db: (u32, u32),
    pub(super) scatter_cqe: u32,
    pub(super) uidx: u32,
    pub(super) srqn: u32,
}

/// A registered memory region in shared memory.
pub struct ModelMr {
    shm: Arc<Shm>,
    key: u32,
    data: *mut u8,
    base: u64,
    len: usize,
    model: Model,
    user: Option<user::Pinned>,
}

// SAFETY: the region is shared memory; handing its pointer to another thread is fine.
unsafe impl Send for ModelMr {}
// SAFETY: shared access only reads the key and hands out raw addresses.
unsafe impl Sync for ModelMr {}

impl ModelMr {
    /// Deregistration of a region whose pinned pages other regions still use
    /// ([`Model::reg_user_mr_in`]): its key stops working now (no PD and no access), its file
    /// stays until it is dropped.
    pub fn revoke(&self) {
        // SAFETY: header fields of our own object, read by others with volatile loads each use.
        unsafe {
            let h = self.shm.ptr() as *mut MrHdr;
            std::ptr::write_volatile(&mut (*h).pd, 0);
            std::ptr::write_volatile(&mut (*h).access, 0);
        }
    }

    /// Local key (equal to the remote key, as on mlx5).
    pub fn lkey(&self) -> u32 {
        self.key
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.key
    }
    /// Its protection domain.
    pub fn pd(&self) -> u32 {
        hdr::<MrHdr>(&self.shm).pd
    }
    /// Address used in WQEs (the I/O virtual address of a region registered through
    /// libibverbs).
    pub fn addr(&self) -> u64 {
        self.base
    }
    /// Length.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Never true.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Raw pointer to the data.
    pub fn as_ptr(&self) -> *mut u8 {
        self.data
    }
    /// Copies out `out.len()` bytes at `off` (panics out of bounds: a test helper).
    pub fn read(&self, off: usize, out: &mut [u8]) {
        assert!(off + out.len() <= self.len, "read past the memory region");
        // SAFETY: in bounds; byte copies of shared memory.
        unsafe { std::ptr::copy_nonoverlapping(self.data.add(off), out.as_mut_ptr(), out.len()) };
    }
    /// Copies `data` in at `off` (panics out of bounds: a test helper).
    pub fn write(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.len, "write past the memory region");
        // SAFETY: in bounds; the region is ours and writable.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.data.add(off), data.len()) };
    }
}

impl Drop for ModelMr {
    fn drop(&mut self) {
        retire(&self.shm, self.user.take(), &self.model.inner.mrs, self.key);
    }
}

/// Takes an object out of service: invalid for lookups, the program's memory it pinned given
/// back, its file removed, out of this process's table.
pub(super) fn retire(shm: &Shm, pin: Option<user::Pinned>, table: &Mutex<HashMap<u32, Arc<Shm>>>, id: u32) {
    hdr::<ObjHdr>(shm).valid.store(0, Ordering::Release);
    note_retired();
    if let Some(p) = pin {
        p.release(shm);
    }
    shm.unlink();
    table.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
}

/// A completion queue in shared memory.
pub struct ModelCq {
    shm: Arc<Shm>,
    cqn: u32,
    cnt: u32,
    user: Option<user::Pinned>,
    model: Model,
}

impl ModelCq {
    /// The program armed this CQ for every completion: completions already in it beyond the
    /// arm's consumer index raise the event now (see `cqe::arm_given`).
    pub fn arm_given(&self) {
        super::cqe::arm_given(&self.model, &self.shm);
    }

    /// Attaches completion channel `chan` (`super::events`): its events carry `handle`. The CQ
    /// is unarmed until its arm record changes.
    pub fn attach_channel(&self, chan: u32, handle: u64) {
        if let Some(db) = super::layout::cq_dbrec(&self.model, &self.shm) {
            // SAFETY: the arm record follows the consumer's record (cq_dbrec checked 8 bytes).
            unsafe { std::ptr::write_volatile(db.add(1), super::events::UNARMED.to_be()) };
        }
        let h = hdr::<CqHdr>(&self.shm);
        h.arm_seen.store(super::events::UNARMED, Ordering::Relaxed);
        // SAFETY: header fields of our own CQ; the channel is set last, with release ordering
        // (push_cqe reads it under the CQ's lock, which orders it after these stores).
        unsafe {
            let p = self.shm.ptr() as *mut CqHdr;
            std::ptr::write_volatile(&mut (*p).user_handle, handle);
            std::sync::atomic::fence(Ordering::Release);
            std::ptr::write_volatile(&mut (*p).chan, chan);
        }
    }

    /// Completion events raised on its channel so far.
    pub fn events_raised(&self) -> u32 {
        super::layout::cq_counters(&self.shm).events.load(Ordering::Relaxed) as u32
    }

    /// Completion events raised and read by the program: raised, less those still in its
    /// channel (taken out of it; the CQ is being destroyed).
    pub fn events_read(&self) -> u32 {
        let h = hdr::<CqHdr>(&self.shm);
        // SAFETY: header fields of our own CQ, read once.
        let (chan, handle) = unsafe {
            (
                std::ptr::read_volatile(&h.chan),
                std::ptr::read_volatile(&h.user_handle),
            )
        };
        let unread = if chan == 0 {
            0
        } else {
            super::events::take_unread(chan, handle)
        };
        self.events_raised().saturating_sub(unread)
    }

    /// CQ number.
    pub fn cqn(&self) -> u32 {
        self.cqn
    }
    /// The direct path's view of it.
    pub fn config(&self) -> CqConfig {
        CqConfig {
            // SAFETY: inside the mapping: buffer one page in, doorbell record in the header page.
            buf: unsafe { self.shm.ptr().add(PAGE) },
            cqe_cnt: self.cnt,
            cqe_size: 64,
            // SAFETY: as above.
            dbrec: unsafe { self.shm.ptr().add(CQ_DBREC_OFF) } as *mut u32,
            cqn: self.cqn,
        }
    }
    /// CQEs dropped because the CQ was full (hardware would raise a CQ error).
    pub fn overruns(&self) -> u32 {
        hdr::<CqHdr>(&self.shm).overruns.load(Ordering::Relaxed)
    }
}

impl Drop for ModelCq {
    fn drop(&mut self) {
        add_cq(
            &mut self.model.inner.retired.lock().unwrap_or_else(|p| p.into_inner()),
            &self.shm,
        );
        retire(&self.shm, self.user.take(), &self.model.inner.cqs, self.cqn);
    }
}

/// A queue pair in shared memory.
pub struct ModelQp {
    pub(super) shm: Arc<Shm>,
    qpn: u32,
    /// A doorbell was rung and not yet delivered (after-post execution).
    pending: Arc<Pending>,
    pub(super) model: Model,
    _cqs: (Arc<Shm>, Arc<Shm>),
    /// The program's memory it is mapped over (a QP made through libmlx5), given back at once
    /// by [`ModelQp::release_user_memory`] even while others still hold the QP.
    pub(super) user: Mutex<Option<user::Pinned>>,
}

// SAFETY: shared memory and atomics; may move between threads.
unsafe impl Send for ModelQp {}

impl ModelQp {
    fn h(&self) -> &QpHdr {
        hdr(&self.shm)
    }
    /// QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }
    /// The send queue as the direct path sees it.
    pub fn sq_config(&self) -> SqConfig {
        let h = self.h();
        SqConfig {
            // SAFETY: offsets inside the mapping (see create_qp's layout).
            buf: unsafe { self.shm.ptr().add(QP_SQ_OFF) },
            wqe_cnt: h.sq_wqe_cnt,
            stride: WQEBB as u32,
            // SAFETY: as above.
            dbrec: unsafe { self.shm.ptr().add(QP_DBREC_OFF) } as *mut u32,
            // SAFETY: as above.
            bf_reg: unsafe { self.shm.ptr().add(QP_REG_OFF) },
            bf_size: BF_SIZE,
            qpn: self.qpn,
            max_inline: h.max_inline,
        }
    }
    /// The receive queue as the direct path sees it.
    pub fn rq_config(&self) -> RqConfig {
        let h = self.h();
        RqConfig {
            // SAFETY: the RQ follows the SQ inside the mapping.
            buf: unsafe { self.shm.ptr().add(QP_SQ_OFF + h.sq_wqe_cnt as usize * WQEBB) },
            wqe_cnt: h.rq_wqe_cnt,
            stride: h.rq_stride,
            // SAFETY: doorbell record inside the header page.
            dbrec: unsafe { self.shm.ptr().add(QP_DBREC_OFF) } as *mut u32,
            qpn: self.qpn,
        }
    }
    /// The doorbell route for this QP's send and receive queues.
    pub fn doorbell(&self) -> ModelDoorbell {
        ModelDoorbell {
            model: self.model.clone(),
            qp: self.shm.clone(),
            exec: self.model.inner.cfg.exec,
            pending: self.pending.clone(),
            rings: self.pending.rings.load(Ordering::Relaxed),
        }
    }
    /// The QP's transport (`transport::RC`, `UC`).
    pub fn transport(&self) -> u32 {
        self.h().transport.load(Ordering::Acquire)
    }

    /// UD: sets the Q_Key datagrams must carry to be taken.
    pub fn set_qkey(&self, qkey: u32) {
        self.h().qkey.store(qkey, Ordering::Release);
    }

    /// Sets the QP's transport (`transport::RC`, `UC`, `UD`), before it is connected.
    pub fn set_transport(&self, t: u32) {
        self.h().transport.store(t, Ordering::Release);
    }

    /// Connects to `peer` (the peer does the same towards us): state RTS.
    pub fn connect(&self, peer: u32, c: ModelConnect) {
        let h = self.h();
        h.peer.store(peer, Ordering::Relaxed);
        h.rnr_retry.store(c.rnr_retry as u32, Ordering::Relaxed);
        h.min_rnr_timer.store(c.min_rnr_timer as u32, Ordering::Relaxed);
        h.state.store(state::RTS, Ordering::Release);
    }
    /// Ready to receive from `peer` (IB's RTR, entered from INIT: the QP is a responder, its own
    /// WQEs wait for RTS); a QP already connected is left as it is.
    pub fn ready_to_receive(&self, peer: u32) {
        let h = self.h();
        if h.state.load(Ordering::Acquire) == state::RESET {
            h.peer.store(peer, Ordering::Relaxed);
            h.state.store(state::RTR, Ordering::Release);
        }
    }
    /// Current state (`state::*`).
    pub fn state(&self) -> u32 {
        self.h().state.load(Ordering::Acquire)
    }
    /// Doorbells whose register store did not match the WQE rung (each moved the QP to error).
    pub fn bad_doorbells(&self) -> u32 {
        self.h().bad_doorbells.load(Ordering::Relaxed)
    }
    /// Moves the QP to error: outstanding and later WQEs are flushed.
    pub fn set_error(&self) {
        set_err(&self.model, &self.shm);
    }
    /// Sets this QP's added wire delay (ns) from now on, and times it on the doorbell path even
    /// when it is 0 (the baseline of an accuracy measurement takes the same path as the delayed
    /// runs).
    pub fn set_wire_delay(&self, ns: u64) {
        wire_clock();
        self.h()
            .wire_delay_ns
            .store(ns.min(MAX_WIRE_DELAY_NS) | WIRE_TIMED, Ordering::Release);
    }

    /// After-post execution: delivers what the doorbells rung since the last call carry (the
    /// wire, then the WQEs); nothing when nothing is pending.
    pub fn deliver(&self) {
        if self.pending.flag.swap(false, Ordering::AcqRel) {
            deliver_now(&self.model, &self.shm, self.pending.reg_check());
        }
    }

    /// Error injection: the `after`-th WQE from now (0 = the next) fails with `syndrome`.
    pub fn inject_error(&self, syndrome: u8, after: u32) {
        let h = self.h();
        h.inject_countdown.store(after + 1, Ordering::Relaxed);
        h.inject_syndrome.store(syndrome as u32, Ordering::Release);
    }
    /// Whether a WQE of its waits for a responder that does not answer (retried at each
    /// [`ModelQp::progress`] until the retry budget runs out).
    pub fn retrying(&self) -> bool {
        self.h().not_ready_since.load(Ordering::Relaxed) != 0
    }

    /// Executes what was rung and not yet executed (needed in [`ExecMode::Deferred`]).
    pub fn progress(&self) {
        let (reg, rung) = self.pending.reg_check();
        execute(&self.model, &self.shm, reg, rung);
    }

    /// The model's view of this QP, for diagnostics: state, send doorbell and consumer index,
    /// receive head and consumer index.
    pub fn debug_state(&self) -> String {
        let h = self.h();
        let Some(p) = qp_dbrec(&self.model, &self.shm) else {
            return format!("QP {:#x}: doorbell record gone", self.qpn);
        };
        // SAFETY: the doorbell record (two u32), checked by qp_dbrec.
        let (r, sdb) = unsafe {
            (
                u32::from_be(std::ptr::read_volatile(p)),
                u32::from_be(std::ptr::read_volatile(p.add(1))),
            )
        };
        format!(
            "QP {:#x}: state {}, sq dbrec {} sq_ci {} (lock {}), rq head {} rq_ci {} (lock {}), kicks {}",
            self.qpn,
            h.state.load(Ordering::Relaxed),
            sdb,
            h.sq_ci.load(Ordering::Relaxed),
            h.sq_lock.load(Ordering::Relaxed),
            r,
            h.rq_ci.load(Ordering::Relaxed),
            h.rq_lock.load(Ordering::Relaxed),
            h.kicks.load(Ordering::Relaxed)
        )
    }

    /// When this QP's WQEs execute.
    pub fn exec_mode(&self) -> ExecMode {
        self.model.inner.cfg.exec
    }
}

impl Drop for ModelQp {
    fn drop(&mut self) {
        add_qp(
            &mut self.model.inner.retired.lock().unwrap_or_else(|p| p.into_inner()),
            &self.shm,
        );
        let pin = self.user.get_mut().unwrap_or_else(|p| p.into_inner()).take();
        retire(&self.shm, pin, &self.model.inner.qps, self.qpn);
    }
}

/// Puts a new object in this process's table of `map` (its kind) under `id`; returns the shared
/// handle.
pub(super) fn publish(map: &Mutex<HashMap<u32, Arc<Shm>>>, id: u32, shm: Shm) -> Arc<Shm> {
    let shm = Arc::new(shm);
    map.lock().unwrap_or_else(|p| p.into_inner()).insert(id, shm.clone());
    shm
}
