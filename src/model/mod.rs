//! `model0`: a software HCA with the memory interface of an mlx5 queue pair — SQ and RQ rings of
//! WQEBBs, doorbell records, a doorbell/BlueFlame register page, CQ buffers of CQE64 starting
//! INVALID — which the direct path drives with the very code it uses on a ConnectX. Only the
//! doorbell is routed here (the [`RingHook`] of the send and receive queues).
//!
//! The model decodes WQEs with rdma-core's types (`sys::mlx5_wqe_*`, not our builders' types, so
//! the two check each other), validates them as hardware does and executes them against
//! registered memory, writing the CQEs hardware writes, error CQEs with their syndromes included.
//! Every object lives in shared memory ([`shm`]), so a client process and a server process can
//! run against each other through the model, exchanging QP number, rkey and address as with
//! real hosts. Results on model0 are about the tool and the data path, never about a NIC.
//!
//! Semantics follow mlx5 where the IB spec leaves a choice. Atomics: a ConnectX works on the
//! 64-bit word in host byte order when its `atomic_req_8B_endianness_mode` says so (and only then
//! does the kernel advertise `IBV_ATOMIC_HCA`), else big-endian; model0 does either
//! ([`ModelConfig::atomic_big_endian`], default host order) and its uverbs device advertises
//! the capability that goes with it.

pub mod shm;
mod user;
pub use user::{ModelDbPage, UserQpLayout};

use crate::clock;
use crate::mlx5::cq::{cqe_op, CqConfig};
use crate::mlx5::rq::{RqConfig, INVALID_LKEY};
use crate::mlx5::seg::{opcode, CE_CQ_UPDATE, INLINE_SEG, MAX_DS, WQEBB};

/// The fence-mode bits of a control segment's `fm_ce_se` (`MLX5_WQE_CTRL_FENCE`, `_INITIATOR_SMALL_FENCE`,
/// `_STRONG_ORDERING` are values of this 3-bit field).
const FM_MASK: u8 = 0xe0;
use crate::mlx5::sq::{RingHook, SqConfig};
use crate::sys;
use shm::{ObjKind, Shm};
use std::collections::HashMap;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The model's device name.
pub const DEVICE_NAME: &str = "model0";

// "rdmamod1": the headers' layout changed (ring offsets, doorbell-record objects, data_off);
// objects of an older binary are not taken for this one's
const MAGIC: u64 = 0x7264_6d61_6d6f_6431;
const PAGE: usize = 4096;
/// BlueFlame buffer size the model's QPs report (two halves in the register page).
pub const BF_SIZE: u32 = 256;
/// The largest inline payload a model QP grants: what a WQE of `max_sq_desc_sz` (1024 B, a
/// ConnectX-5's) leaves after the send overhead and the inline header.
pub const MAX_INLINE: u32 = 1024 - SQ_OVERHEAD as u32 - 4;
/// The send-WQE overhead libmlx5 reserves on a plain RC QP (the UMR of bind-MW/local-invalidate).
const SQ_OVERHEAD: usize = 192;

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

/// QP states the model knows.
pub mod state {
    /// Created, not connected: WQEs are flushed.
    pub const RESET: u32 = 0;
    /// Connected.
    pub const RTS: u32 = 3;
    /// In error: WQEs are flushed.
    pub const ERR: u32 = 6;
}

/// Model errors (object creation and configuration; data-path errors are CQEs).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// Shared-memory file trouble.
    #[error("model0: {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Bad arguments.
    #[error("model0: {0}")]
    Invalid(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ModelError {
    let what = what.into();
    move |source| ModelError::Io { what, source }
}

/// When WQEs execute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecMode {
    /// In the thread that rings the doorbell, right after the doorbell (default).
    Inline,
    /// Only when [`ModelQp::progress`] is called (benchmarks of the post path alone).
    Deferred,
    /// Right after the post call, when the poster asks ([`ModelQp::deliver`], which the
    /// scenarios call once the post call's timestamp is taken), or at the QP's next poll: so a
    /// timed post call measures the post alone, never the model executing the WQE. Receives
    /// wake a sender waiting on them at once, as in `Inline`.
    AfterPost,
}

/// The longest wire delay the model accepts, ns (1 s): a longer one would outlast the scenarios'
/// stall deadlines, and a wait must stay short enough to end on SIGINT.
pub const MAX_WIRE_DELAY_NS: u64 = 1_000_000_000;

/// Stops every wire wait in this process at once (async-signal-safe: one atomic store): a SIGINT
/// handler calls it so a long delay does not hold the process.
pub fn abort_wire_waits() {
    WIRE_ABORT.store(true, Ordering::Relaxed);
}

static WIRE_ABORT: AtomicBool = AtomicBool::new(false);

/// Model knobs.
#[derive(Clone, Copy, Debug)]
pub struct ModelConfig {
    /// Added wire delay of every message in each direction, in ns (at most
    /// [`MAX_WIRE_DELAY_NS`]): what a doorbell carries arrives this much later at the responder
    /// (a WRITE's or SEND's data, a READ's or atomic's request), and a READ's or atomic's response
    /// takes as long again back (inline and after-post execution). `None`: no wire, no timing
    /// on the doorbell path at all; `Some(0)` times a zero wait on the same path as any delay,
    /// so a baseline and a delayed run differ by the delay alone.
    pub wire_delay_ns: Option<u64>,
    /// When WQEs execute.
    pub exec: ExecMode,
    /// Atomics on big-endian words (a ConnectX in its default endianness mode, whose kernel
    /// driver then advertises no atomic capability), instead of host-order words (`IBV_ATOMIC_HCA`).
    pub atomic_big_endian: bool,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            wire_delay_ns: None,
            exec: ExecMode::Inline,
            atomic_big_endian: false,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Shared layouts

#[repr(C)]
struct ObjHdr {
    magic: u64,
    owner_pid: u32,
    id: u32,
    valid: AtomicU32,
    _pad: u32,
}

#[repr(C)]
struct MrHdr {
    obj: ObjHdr,
    base: u64,
    len: u64,
    access: u32,
    pd: u32,
    /// Where `base` lies in the file (one page in for the model's own regions; a region
    /// registered through libibverbs starts where the user's buffer starts in its first page).
    data_off: u64,
}

#[repr(C)]
struct CqHdr {
    obj: ObjHdr,
    cqe_cnt: u32,
    lock: AtomicU32,
    pi: AtomicU32,
    overruns: AtomicU32,
    /// The consumer's doorbell record: 0 = in this header at `CQ_DBREC_OFF`, else a `Db` object
    /// (libmlx5's record page) and the offset in it.
    db_id: u32,
    db_off: u32,
}
const CQ_DBREC_OFF: usize = 128;

/// A QP's shared header, in three cache lines by who writes them: the first is read by the
/// peer and written rarely; the second only by whoever executes this QP's send queue; the third
/// by whoever delivers into its receive queue. Fields shared this way never share a line with
/// fields written on every operation by the other side.
#[repr(C)]
struct QpHdr {
    obj: ObjHdr,
    pd: u32,
    state: AtomicU32,
    peer: AtomicU32,
    send_cqn: u32,
    recv_cqn: u32,
    sq_wqe_cnt: u32,
    rq_wqe_cnt: u32,
    rq_stride: u32,
    max_inline: u32,
    rnr_retry: AtomicU32,
    min_rnr_timer: AtomicU32,
    inject_syndrome: AtomicU32,
    wire_delay_ns: AtomicU64,
    /// The rings' offsets in the file (the model's own layout: SQ then RQ; libmlx5's: RQ then SQ).
    sq_off: u32,
    rq_off: u32,
    /// The doorbell record: 0 = in this header at `QP_DBREC_OFF`, else a `Db` object and offset.
    db_id: u32,
    db_off: u32,
    /// Responder payloads up to this many bytes go into the CQE (scatter-to-CQE), 0 = never.
    scatter_cqe: u32,
    /// The user index libmlx5 gave the QP (CQE version 1 names the QP by it), 0 otherwise.
    uidx: u32,
    /// 1: atomics on this QP's memory (as responder) use big-endian words; 0: host order.
    atomic_be: u32,
    /// 1: the QP's register page is the model's (the direct path's QPs): every doorbell is
    /// checked against it; 0: libmlx5's UAR page, which the model does not see.
    check_reg: u32,
    /// Doorbells whose register store did not match the WQE rung (the QP was moved to error).
    bad_doorbells: AtomicU32,
    _pad_sq: [u8; 12],
    sq_ci: AtomicU32,
    sq_lock: AtomicU32,
    kicks: AtomicU32,
    inject_countdown: AtomicU32,
    _pad_rq: [u8; 48],
    rq_ci: AtomicU32,
    rq_lock: AtomicU32,
}

const _: () = {
    assert!(std::mem::offset_of!(QpHdr, sq_ci) == 128);
    assert!(std::mem::offset_of!(QpHdr, rq_ci) == 192);
    assert!(std::mem::size_of::<QpHdr>() <= QP_DBREC_OFF);
};
const QP_DBREC_OFF: usize = 512;
const QP_REG_OFF: usize = PAGE;
const QP_SQ_OFF: usize = 2 * PAGE;

fn hdr<T>(s: &Shm) -> &T {
    debug_assert!(s.len() >= std::mem::size_of::<T>());
    // SAFETY: every object file starts with its header, page-aligned, larger than T; fields
    // shared between processes are atomics; the mapping lives as long as `s`.
    unsafe { &*(s.ptr() as *const T) }
}

/// The doorbell record of an object: in its own header at `own_off`, or in the `Db` object
/// `db_id` (a page of records libmlx5 allocated) at `db_off`. `None` when a `Db` object is gone
/// or the offset lies outside it.
fn dbrec_at(m: &Model, s: &Shm, own_off: usize, db_id: u32, db_off: u32) -> Option<*mut u32> {
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
fn qp_dbrec(m: &Model, q: &Shm) -> Option<*mut u32> {
    let h: &QpHdr = hdr(q);
    dbrec_at(m, q, QP_DBREC_OFF, h.db_id, h.db_off)
}

/// A CQ's consumer doorbell record.
fn cq_dbrec(m: &Model, cq: &Shm) -> Option<*mut u32> {
    let h: &CqHdr = hdr(cq);
    dbrec_at(m, cq, CQ_DBREC_OFF, h.db_id, h.db_off)
}

/// A QP's send and receive rings, checked against the mapping (the header is written by the
/// QP's owner, possibly another process).
fn rings(q: &Shm) -> Option<(*mut u8, *mut u8)> {
    let h: &QpHdr = hdr(q);
    // the header may be another process's: counts must be powers of two (the rings are
    // indexed with count - 1 as a mask) and the rings inside the mapping
    if !h.sq_wqe_cnt.is_power_of_two() || !h.rq_wqe_cnt.is_power_of_two() || h.rq_stride < 16 {
        return None;
    }
    let sq_end = (h.sq_off as usize).checked_add((h.sq_wqe_cnt as usize).checked_mul(WQEBB)?)?;
    let rq_end = (h.rq_off as usize).checked_add((h.rq_wqe_cnt as usize).checked_mul(h.rq_stride as usize)?)?;
    if sq_end > q.len() || rq_end > q.len() || (h.sq_off as usize) < QP_SQ_OFF || (h.rq_off as usize) < QP_SQ_OFF {
        return None;
    }
    // SAFETY: both offsets checked inside the mapping above.
    Some(unsafe { (q.ptr().add(h.sq_off as usize), q.ptr().add(h.rq_off as usize)) })
}

fn owner_of(s: &Shm) -> Option<u32> {
    if s.len() < std::mem::size_of::<ObjHdr>() {
        return None;
    }
    let h: &ObjHdr = hdr(s);
    (h.magic == MAGIC).then_some(h.owner_pid)
}

fn init_obj(s: &Shm, id: u32) {
    // SAFETY: a freshly created, zeroed object we own; nobody maps it before it is valid.
    unsafe {
        let h = s.ptr() as *mut ObjHdr;
        (*h).magic = MAGIC;
        (*h).owner_pid = std::process::id();
        (*h).id = id;
    }
}

// ---------------------------------------------------------------------------------------------
// The per-process handle

struct Inner {
    cfg: ModelConfig,
    rng: Mutex<u64>,
    mrs: Mutex<HashMap<u32, Arc<Shm>>>,
    qps: Mutex<HashMap<u32, Arc<Shm>>>,
    cqs: Mutex<HashMap<u32, Arc<Shm>>>,
    dbs: Mutex<HashMap<u32, Arc<Shm>>>,
    next_pd: AtomicU32,
}

/// A process's handle on model0. Cheap to clone.
#[derive(Clone)]
pub struct Model {
    inner: Arc<Inner>,
}

/// The wire-delay word of a QP: the added delay in ns, with this bit set when the doorbell path
/// times it, even a delay of 0, so a zero-delay baseline and a delayed run take the same
/// instructions and differ only in how long the wait loop turns (0: no wire, no timing at all).
const WIRE_TIMED: u64 = 1 << 63;

/// The wire: returns `ns` nanoseconds of TSC time after its first counter read, by an absolute
/// deadline, taking the same steps for every `ns` including 0 (no early exit for 0: the loop
/// then ends on its first read; the deadline's arithmetic for `ns > 0` comes after the start
/// read, so it is part of the wait, not added to it). Two delays thus differ by the difference of their deadlines,
/// plus how the loop's end falls on the counter's reads, one read period `P` apart (about 10 ns
/// here): for 0 the loop ends on the read one `P` after the start, for `ns > 0` on the first
/// read at or past the deadline, `P / 2` past it on average. So a delay's deadline is set
/// `P / 2` later, and the wait with `ns` lasts `ns` longer than the wait with 0, on average.
#[inline(never)]
fn wire_wait(ns: u64) {
    let start = raw_ticks();
    let ticks = if ns == 0 {
        0
    } else {
        let (tpn, half_read) = wire_clock();
        (ns as f64 * tpn + half_read) as u64
    };
    let until = start.wrapping_add(ticks);
    // No `pause` in this loop: one costs up to ~140 cycles and would be the overshoot. Waits
    // above 100 us also watch for an abort (SIGINT), in slices, so the short waits that are
    // measured keep their exact steps.
    if ns > 100_000 {
        let slice = (ticks / 64).max(1);
        loop {
            let now = raw_ticks();
            if now >= until || WIRE_ABORT.load(Ordering::Relaxed) {
                return;
            }
            let stop = now.saturating_add(slice).min(until);
            while raw_ticks() < stop {}
        }
    }
    while raw_ticks() < until {}
}

/// TSC ticks per ns, and half the counter's read period in ticks (the median step between two
/// consecutive reads), calibrated once per process (100 ms).
fn wire_clock() -> (f64, f64) {
    static C: OnceLock<(f64, f64)> = OnceLock::new();
    *C.get_or_init(|| {
        let mut steps: Vec<u64> = (0..2001)
            .map(|_| {
                let a = raw_ticks();
                raw_ticks().wrapping_sub(a)
            })
            .collect();
        steps.sort_unstable();
        (ticks_per_ns(), steps[steps.len() / 2] as f64 / 2.0)
    })
}

/// An unfenced timestamp (the delay loop needs no ordering, only the time).
#[inline(always)]
fn raw_ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: rdtsc is available on every x86_64 CPU and touches no memory.
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    clock::start()
}

fn ticks_per_ns() -> f64 {
    static CAL: OnceLock<f64> = OnceLock::new();
    *CAL.get_or_init(|| clock::Calibration::run(100_000_000).map(|c| c.hz / 1e9).unwrap_or(1.0))
}

impl Model {
    /// Opens the model for this process; removes objects left by processes that died.
    pub fn open(cfg: ModelConfig) -> Result<Self, ModelError> {
        std::fs::create_dir_all(shm::dir()).map_err(io(format!("creating {}", shm::dir().display())))?;
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
                next_pd: AtomicU32::new(1),
            }),
        })
    }

    /// The knobs in force.
    pub fn config(&self) -> ModelConfig {
        self.inner.cfg
    }

    fn next_id(&self) -> u32 {
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
        // SAFETY: header fields of our own new object, before it is marked valid.
        unsafe {
            let h = shm.ptr() as *mut MrHdr;
            (*h).base = data as u64;
            (*h).len = len as u64;
            (*h).access = access;
            (*h).pd = pd;
            (*h).data_off = PAGE as u64;
        }
        hdr::<ObjHdr>(&shm).valid.store(1, Ordering::Release);
        let shm = publish(&self.inner.mrs, key, shm);
        Ok(ModelMr {
            shm,
            key,
            data,
            base: data as u64,
            len,
            model: self.clone(),
            user: None,
        })
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
        // SAFETY: our new object: header fields, then every CQE's op_own set to INVALID.
        unsafe {
            let h = shm.ptr() as *mut CqHdr;
            (*h).cqe_cnt = cnt;
            for i in 0..cnt as usize {
                *shm.ptr().add(PAGE + i * 64 + 63) = cqe_op::INVALID << 4;
            }
        }
        hdr::<ObjHdr>(&shm).valid.store(1, Ordering::Release);
        let shm = publish(&self.inner.cqs, cqn, shm);
        Ok(ModelCq {
            shm,
            cqn,
            cnt,
            user: None,
        })
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
            },
            None,
        ))
    }

    /// Fills a new QP object's header (the model's defaults: RNR retry 7, RNR timer 12, the
    /// configured wire delay), marks it valid and publishes it.
    fn finish_qp(
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

    /// The object `id` of `kind`, from this thread's own cache (no lock, no reference count
    /// touched, nothing written that another thread reads). This process's own objects are
    /// reached through their owner's mapping (one virtual address per physical page: some CPUs
    /// penalise a line reached through two), others' through a mapping of this thread's.
    fn lookup(&self, kind: ObjKind, id: u32) -> Option<ObjRef> {
        thread_local! {
            // Entries are never removed before the thread ends (a destroyed object's entry is
            // only skipped), so the references handed out stay valid.
            static CACHE: std::cell::RefCell<Vec<(ObjKind, u32, Arc<Shm>)>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        CACHE.with(|c| {
            let mut c = c.borrow_mut();
            for e in c.iter().rev() {
                if e.0 == kind && e.1 == id && hdr::<ObjHdr>(&e.2).valid.load(Ordering::Acquire) == 1 {
                    return Some(ObjRef(Arc::as_ptr(&e.2)));
                }
            }
            let map = match kind {
                ObjKind::Mr => &self.inner.mrs,
                ObjKind::Qp => &self.inner.qps,
                ObjKind::Cq => &self.inner.cqs,
                ObjKind::Db => &self.inner.dbs,
            };
            let own = map.lock().unwrap_or_else(|p| p.into_inner()).get(&id).cloned();
            let s = match own {
                Some(s) => s,
                None => Arc::new(Shm::open(kind, id).ok()?),
            };
            let h: &ObjHdr = hdr(&s);
            if h.magic != MAGIC || h.id != id || h.valid.load(Ordering::Acquire) != 1 {
                return None;
            }
            let r = ObjRef(Arc::as_ptr(&s));
            c.push((kind, id, s));
            Some(r)
        })
    }
}

/// A reference to a mapped object from this thread's lookup cache (not `Send`: it is only valid
/// on the thread that looked it up, whose cache keeps the mapping until the thread ends).
#[derive(Clone, Copy)]
struct ObjRef(*const Shm);

impl std::ops::Deref for ObjRef {
    type Target = Shm;
    fn deref(&self) -> &Shm {
        // SAFETY: the pointer comes from an Arc held by this thread's cache, whose entries are
        // never removed before the thread ends, and ObjRef cannot leave the thread.
        unsafe { &*self.0 }
    }
}

/// The layout and options of a new QP object's header.
struct QpShape {
    sq_wqe_cnt: u32,
    rq_wqe_cnt: u32,
    rq_stride: u32,
    max_inline: u32,
    sq_off: u32,
    rq_off: u32,
    /// The doorbell record's `Db` object and offset ((0, 0): in the header).
    db: (u32, u32),
    scatter_cqe: u32,
    uidx: u32,
}

/// Queue sizes of a model QP.
#[derive(Clone, Copy, Debug)]
pub struct ModelQpCaps {
    /// Send queue depth in WQEs of the largest size (the ring is sized in WQEBBs for them,
    /// rounded up to a power of two).
    pub max_send_wr: u32,
    /// Receive queue depth (rounded up to a power of two).
    pub max_recv_wr: u32,
    /// Scatter entries per receive.
    pub max_recv_sge: u32,
    /// Largest inline payload.
    pub max_inline_data: u32,
}

impl Default for ModelQpCaps {
    fn default() -> Self {
        ModelQpCaps {
            max_send_wr: 128,
            max_recv_wr: 128,
            max_recv_sge: 1,
            max_inline_data: 220,
        }
    }
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
fn retire(shm: &Shm, pin: Option<user::Pinned>, table: &Mutex<HashMap<u32, Arc<Shm>>>, id: u32) {
    hdr::<ObjHdr>(shm).valid.store(0, Ordering::Release);
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
}

impl ModelCq {
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
        hdr::<ObjHdr>(&self.shm).valid.store(0, Ordering::Release);
        if let Some(p) = self.user.take() {
            p.release(&self.shm);
        }
        self.shm.unlink();
    }
}

/// Connection parameters the model honours.
#[derive(Clone, Copy, Debug)]
pub struct ModelConnect {
    /// RNR retries (7 = infinite: the SEND waits for a receive).
    pub rnr_retry: u8,
    /// This QP's RNR timer code, as responder (IB encoding).
    pub min_rnr_timer: u8,
}

impl Default for ModelConnect {
    fn default() -> Self {
        ModelConnect {
            rnr_retry: 7,
            min_rnr_timer: 12,
        }
    }
}

/// A queue pair in shared memory.
pub struct ModelQp {
    shm: Arc<Shm>,
    qpn: u32,
    /// A doorbell was rung and not yet delivered (after-post execution).
    pending: Arc<Pending>,
    model: Model,
    _cqs: (Arc<Shm>, Arc<Shm>),
    /// The program's memory it is mapped over (a QP made through libmlx5), given back at once
    /// by [`ModelQp::release_user_memory`] even while others still hold the QP.
    user: Mutex<Option<user::Pinned>>,
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
    /// Connects to `peer` (the peer does the same towards us): state RTS.
    pub fn connect(&self, peer: u32, c: ModelConnect) {
        let h = self.h();
        h.peer.store(peer, Ordering::Relaxed);
        h.rnr_retry.store(c.rnr_retry as u32, Ordering::Relaxed);
        h.min_rnr_timer.store(c.min_rnr_timer as u32, Ordering::Relaxed);
        h.state.store(state::RTS, Ordering::Release);
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
    /// Executes what was rung and not yet executed (needed in [`ExecMode::Deferred`]).
    pub fn progress(&self) {
        execute(&self.model, &self.shm, self.pending.reg_check());
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
        let pin = self.user.get_mut().unwrap_or_else(|p| p.into_inner()).take();
        retire(&self.shm, pin, &self.model.inner.qps, self.qpn);
    }
}

/// The doorbell route: what the direct path's queues call after every doorbell. In deferred mode
/// it does nothing (the model reads the doorbell record when [`ModelQp::progress`] runs).
#[derive(Clone)]
pub struct ModelDoorbell {
    model: Model,
    qp: Arc<Shm>,
    exec: ExecMode,
    pending: Arc<Pending>,
    /// Doorbells rung through this route (the send queue's), published in `pending.rings`.
    rings: u32,
}

/// A QP's "doorbell rung, not yet delivered" flag (after-post execution) and its doorbell count,
/// alone on their cache lines: the flags of a pair's two QPs are written by two threads on every
/// post, and two small allocations side by side would share a line.
#[repr(align(128))]
#[derive(Default)]
pub struct Pending {
    flag: AtomicBool,
    /// Doorbells rung so far (written by the poster: a plain store of its own count).
    rings: AtomicU32,
    /// `rings` when the register was last checked.
    checked: AtomicU32,
}

impl Pending {
    /// How much of the register a run now can check: with exactly one doorbell since the last
    /// check, the register holds all of it (a BlueFlame write too); after more, only the last
    /// doorbell's first 8 bytes are known to be there.
    fn reg_check(&self) -> RegCheck {
        let rings = self.rings.load(Ordering::Acquire);
        let before = self.checked.swap(rings, Ordering::Relaxed);
        if rings.wrapping_sub(before) == 1 {
            RegCheck::BlueFlame
        } else {
            RegCheck::Doorbell
        }
    }
}

/// What a run of a send queue checks of the QP's register page (model0's own QPs: the page the
/// direct path rings).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum RegCheck {
    /// Nothing: not run by the poster after its doorbell (a receive resumed a sender stalled on
    /// RNR), so the register may be between the record's store and its own.
    None,
    /// The last doorbell's first 8 bytes (several doorbells since the last check).
    Doorbell,
    /// One doorbell since the last check: its first 8 bytes, and a BlueFlame write whole.
    BlueFlame,
}

/// What a doorbell sets off: the wire (the data or request travels `D`), then the WQEs execute.
#[inline]
fn deliver_now(model: &Model, qp: &Shm, reg: RegCheck) {
    // A device sees the doorbell once the stores before it are visible: drain the store
    // buffer first (the `sfence`s of the doorbell only order it), so a delay below cannot
    // hide that drain and the delay adds exactly D.
    fence(Ordering::SeqCst);
    // The wire: everything this doorbell carries arrives D later. The wait comes before any
    // of the model's own work, so the delay shifts the whole operation by D.
    let wire = hdr::<QpHdr>(qp).wire_delay_ns.load(Ordering::Acquire);
    if wire != 0 {
        wire_wait(wire & !WIRE_TIMED);
    }
    hdr::<QpHdr>(qp).kicks.fetch_add(1, Ordering::SeqCst);
    execute(model, qp, reg);
}

impl RingHook for ModelDoorbell {
    #[inline]
    fn rung(&mut self, _qpn: u32, _pi: u32) {
        self.rings = self.rings.wrapping_add(1);
        self.pending.rings.store(self.rings, Ordering::Release);
        match self.exec {
            ExecMode::Inline => deliver_now(&self.model, &self.qp, self.pending.reg_check()),
            ExecMode::AfterPost => self.pending.flag.store(true, Ordering::Release),
            ExecMode::Deferred => {}
        }
    }

    fn rung_rq(&mut self, _qpn: u32, _head: u32) {
        receives_posted(&self.model, &self.qp, self.exec);
    }
}

/// What posting receives sets off: flushed at once on a QP in error; otherwise a sender of the
/// peer stalled on RNR goes on (not in deferred mode).
fn receives_posted(model: &Model, qp: &Shm, exec: ExecMode) {
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
            execute(model, &p, RegCheck::None);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Execution

/// Puts a new object in this process's table of `map` (its kind) under `id`; returns the shared
/// handle.
fn publish(map: &Mutex<HashMap<u32, Arc<Shm>>>, id: u32, shm: Shm) -> Arc<Shm> {
    let shm = Arc::new(shm);
    map.lock().unwrap_or_else(|p| p.into_inner()).insert(id, shm.clone());
    shm
}

fn try_lock(l: &AtomicU32) -> bool {
    l.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_ok()
}

fn lock(l: &AtomicU32) {
    while !try_lock(l) {
        std::hint::spin_loop();
    }
}

fn unlock(l: &AtomicU32) {
    l.store(0, Ordering::Release);
}

/// One CQE to write.
#[derive(Clone, Copy, Default)]
struct CqeOut {
    op: u8,
    qpn: u32,
    uidx: u32,
    /// Responder payload scattered into the CQE (scatter-to-CQE), its length in `scatter.0`.
    scatter: (u8, [u8; 32]),
    wqe_counter: u16,
    byte_cnt: u32,
    imm: u32,
    syndrome: u8,
    wqe_opcode: u8,
}

fn push_cqe(m: &Model, cq: &Shm, c: CqeOut) {
    let h: &CqHdr = hdr(cq);
    lock(&h.lock);
    let cnt = h.cqe_cnt;
    let pi = h.pi.load(Ordering::Relaxed);
    // the CQ's header may be another process's: its size must fit the mapping
    let fits = cnt.is_power_of_two() && PAGE + cnt as usize * 64 <= cq.len();
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
    b[44..48].copy_from_slice(&c.byte_cnt.to_be_bytes());
    // sop_drop_qpn: a requester CQE carries the WQE's opcode in its top byte (libmlx5 takes the
    // work completion's opcode from it), as does an error CQE (s_wqe_opcode_qpn)
    if c.op == cqe_op::REQ_ERR || c.op == cqe_op::RESP_ERR {
        b[55] = c.syndrome;
    }
    let q = if c.op == cqe_op::REQ || c.op == cqe_op::REQ_ERR || c.op == cqe_op::RESP_ERR {
        ((c.wqe_opcode as u32) << 24) | (c.qpn & 0xff_ffff)
    } else {
        c.qpn & 0xff_ffff
    };
    b[56..60].copy_from_slice(&q.to_be_bytes());
    b[60..62].copy_from_slice(&c.wqe_counter.to_be_bytes());
    let owner = ((pi & cnt) != 0) as u8 | if n > 0 { 0x04 } else { 0 }; // MLX5_INLINE_SCATTER_32
                                                                        // SAFETY: slot inside the CQ buffer; the body is written before the owner byte, which is
                                                                        // published with release ordering (the consumer reads it, then fences, then the body).
    unsafe {
        let slot = cq.ptr().add(PAGE + (pi & (cnt - 1)) as usize * 64);
        std::ptr::copy_nonoverlapping(b.as_ptr(), slot, 63);
        fence(Ordering::Release);
        (*(slot.add(63) as *const AtomicU8)).store((c.op << 4) | owner, Ordering::Release);
    }
    h.pi.store(pi.wrapping_add(1), Ordering::Relaxed);
    unlock(&h.lock);
}

/// A resolved piece of registered memory.
struct Region {
    _shm: ObjRef,
    ptr: *mut u8,
}

enum KeyErr {
    Key,
    Access,
    Bounds,
}

fn resolve(m: &Model, key: u32, addr: u64, len: u64, pd: u32, need: u32) -> Result<Region, KeyErr> {
    let shm = m.lookup(ObjKind::Mr, key).ok_or(KeyErr::Key)?;
    let h: &MrHdr = hdr(&shm);
    if h.pd != pd {
        return Err(KeyErr::Key);
    }
    if h.access & need != need {
        return Err(KeyErr::Access);
    }
    let end = addr.checked_add(len).ok_or(KeyErr::Bounds)?;
    if addr < h.base || end > h.base.saturating_add(h.len) {
        return Err(KeyErr::Bounds);
    }
    let off = h.data_off.checked_add(addr - h.base).ok_or(KeyErr::Bounds)?;
    if off.checked_add(len).is_none_or(|e| e > shm.len() as u64) {
        return Err(KeyErr::Bounds);
    }
    // SAFETY: checked inside the mapping above.
    let ptr = unsafe { shm.ptr().add(off as usize) };
    Ok(Region { _shm: shm, ptr })
}

/// The decoded body of a WQE.
struct Decoded {
    opcode: u8,
    idx: u16,
    ds: u32,
    signaled: bool,
    /// Fence (any of the control segment's fence modes): waits for the READs and atomics
    /// before it to complete.
    fence: bool,
    imm: u32,
    raddr: Option<(u64, u32)>,
    atomic: Option<(u64, u64)>,
    inline: Option<(usize, usize)>, // offset, len in the local copy
    sges: [(u64, u32, u32); 16],    // addr, lkey, len
    nsge: usize,
}

/// Reads the WQE at `start` (WQEBB index) into `buf` (following the ring's wrap) and decodes it
/// with rdma-core's segment types. `Err(opcode)` for a malformed WQE.
fn decode(sq: *const u8, wqe_cnt: u32, start: u32, qpn: u32, buf: &mut [u8; 1024]) -> Result<Decoded, (u8, u16)> {
    let slot = |b: u32| -> *const u8 {
        // SAFETY: the slot index is masked into the ring.
        unsafe { sq.add(((start.wrapping_add(b)) & (wqe_cnt - 1)) as usize * WQEBB) }
    };
    // SAFETY: the first WQEBB of the WQE is inside the ring.
    unsafe { std::ptr::copy_nonoverlapping(slot(0), buf.as_mut_ptr(), WQEBB) };
    // SAFETY: buf holds at least the 16-byte control segment.
    let ctrl: sys::mlx5_wqe_ctrl_seg = unsafe { std::ptr::read_unaligned(buf.as_ptr() as *const _) };
    let w0 = u32::from_be(ctrl.opmod_idx_opcode);
    let w1 = u32::from_be(ctrl.qpn_ds);
    let op = (w0 & 0xff) as u8;
    let idx = ((w0 >> 8) & 0xffff) as u16;
    let ds = w1 & 0x3f;
    let bad = Err((op, idx));
    if ds == 0 || ds > MAX_DS || (w1 >> 8) != qpn || idx != (start & 0xffff) as u16 {
        return bad;
    }
    let nbb = ds.div_ceil(4);
    if nbb > wqe_cnt {
        return bad;
    }
    for b in 1..nbb {
        // SAFETY: WQEBB b of the WQE (wrapped) into the local copy, within 1024 bytes (nbb <= 16).
        unsafe { std::ptr::copy_nonoverlapping(slot(b), buf.as_mut_ptr().add(b as usize * WQEBB), WQEBB) };
    }
    let mut d = Decoded {
        opcode: op,
        idx,
        ds,
        signaled: ctrl.fm_ce_se & CE_CQ_UPDATE != 0,
        fence: ctrl.fm_ce_se & FM_MASK != 0,
        imm: ctrl.imm,
        raddr: None,
        atomic: None,
        inline: None,
        sges: [(0, 0, 0); 16],
        nsge: 0,
    };
    let mut u = 1usize;
    let seg = |u: usize| -> *const u8 { buf[u * 16..].as_ptr() };
    let (wants_raddr, wants_atomic) = match op {
        opcode::NOP | opcode::SEND | opcode::SEND_IMM => (false, false),
        opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM | opcode::RDMA_READ => (true, false),
        opcode::ATOMIC_CS | opcode::ATOMIC_FA => (true, true),
        _ => return bad,
    };
    if wants_raddr {
        if u >= ds as usize {
            return bad;
        }
        // SAFETY: a 16-byte segment inside the copied WQE.
        let r: sys::mlx5_wqe_raddr_seg = unsafe { std::ptr::read_unaligned(seg(u) as *const _) };
        d.raddr = Some((u64::from_be(r.raddr), u32::from_be(r.rkey)));
        u += 1;
    }
    if wants_atomic {
        if u >= ds as usize {
            return bad;
        }
        // SAFETY: as above.
        let a: sys::mlx5_wqe_atomic_seg = unsafe { std::ptr::read_unaligned(seg(u) as *const _) };
        d.atomic = Some((u64::from_be(a.swap_add), u64::from_be(a.compare)));
        u += 1;
    }
    if op == opcode::NOP {
        return Ok(d);
    }
    if u < ds as usize {
        // SAFETY: 4 bytes at the start of a segment inside the copy.
        let first: sys::mlx5_wqe_inl_data_seg = unsafe { std::ptr::read_unaligned(seg(u) as *const _) };
        let bc = u32::from_be(first.byte_count);
        if bc & INLINE_SEG != 0 {
            let len = (bc & !INLINE_SEG) as usize;
            if (4 + len).div_ceil(16) != ds as usize - u || op == opcode::RDMA_READ || wants_atomic {
                return bad;
            }
            d.inline = Some((u * 16 + 4, len));
            return Ok(d);
        }
        while u < ds as usize {
            if d.nsge == d.sges.len() {
                return bad;
            }
            // SAFETY: a 16-byte segment inside the copy.
            let s: sys::mlx5_wqe_data_seg = unsafe { std::ptr::read_unaligned(seg(u) as *const _) };
            d.sges[d.nsge] = (u64::from_be(s.addr), u32::from_be(s.lkey), u32::from_be(s.byte_count));
            d.nsge += 1;
            u += 1;
        }
    }
    if wants_atomic && (d.nsge != 1 || d.sges[0].2 != 8) {
        return bad;
    }
    Ok(d)
}

/// IB RNR timer codes in microseconds.
fn rnr_timer_us(code: u32) -> u64 {
    const T: [u64; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840, 5120, 7680, 10240,
        15360, 20480, 30720, 40960, 61440, 81920, 122_880, 163_840, 245_760, 327_680, 491_520,
    ];
    T[(code & 31) as usize]
}

enum Outcome {
    Done {
        byte_cnt: u32,
    },
    Fail(u8),
    /// The responder has no receive and RNR retries are infinite: try again later.
    Stall,
}

fn set_err(m: &Model, q: &Shm) {
    let h: &QpHdr = hdr(q);
    h.state.store(state::ERR, Ordering::Release);
    flush_rq(m, q);
}

/// Flushes every posted, unconsumed receive of `q` with WR_FLUSH responder CQEs.
fn flush_rq(m: &Model, q: &Shm) {
    let h: &QpHdr = hdr(q);
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

fn deliver_to_receiver(m: &Model, peer: &Shm, d: &Decoded, payload: &[u8], resp_op: u8) -> Outcome {
    let ph: &QpHdr = hdr(peer);
    let (Some(db), Some((_, rq))) = (qp_dbrec(m, peer), rings(peer)) else {
        return Outcome::Fail(syndrome::TRANSPORT_RETRY_EXC);
    };
    lock(&ph.rq_lock);
    // SAFETY: the peer's receive counter (checked by qp_dbrec).
    let head = u32::from_be(unsafe { std::ptr::read_volatile(db) }) & 0xffff;
    let ci = ph.rq_ci.load(Ordering::Relaxed);
    if (ci & 0xffff) == head {
        unlock(&ph.rq_lock);
        return Outcome::Stall;
    }
    fence(Ordering::Acquire);
    let Some(rcq) = m.lookup(ObjKind::Cq, ph.recv_cqn) else {
        unlock(&ph.rq_lock);
        return Outcome::Fail(syndrome::TRANSPORT_RETRY_EXC);
    };
    // the responder's CQ overflowed: it is in error and so is the responder QP (a ConnectX's CQ
    // error); the requester sees its peer gone
    if hdr::<CqHdr>(&rcq).overruns.load(Ordering::Relaxed) > 0 {
        unlock(&ph.rq_lock);
        set_err(m, peer);
        return Outcome::Fail(syndrome::TRANSPORT_RETRY_EXC);
    }
    let stride = ph.rq_stride as usize;
    // SAFETY: the receive WQE at slot ci inside the peer's RQ ring (checked by rings).
    let rwqe = unsafe { rq.add((ci & (ph.rq_wqe_cnt - 1)) as usize * stride) };
    let mut off = 0usize;
    let mut fail = None;
    let write_len = if resp_op == cqe_op::RESP_WR_IMM {
        0
    } else {
        payload.len()
    };
    // scatter-to-CQE (the QP asked for it at creation, and its CQEs are 64 B): a payload of at
    // most 32 bytes goes into the CQE, the receive buffer stays untouched (its entries are
    // still checked, as the NIC checks the receive WQE)
    let scatter = ph.scatter_cqe != 0 && write_len > 0 && write_len <= ph.scatter_cqe.min(32) as usize;
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
        match resolve(m, lkey, addr, n as u64, ph.pd, sys::IBV_ACCESS_LOCAL_WRITE) {
            Ok(r) => {
                if !scatter {
                    // SAFETY: resolved in bounds of the receiver's region.
                    unsafe { std::ptr::copy_nonoverlapping(payload.as_ptr().add(off), r.ptr, n) };
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
    ph.rq_ci.store(ci.wrapping_add(1), Ordering::Relaxed);
    unlock(&ph.rq_lock);
    if let Some(s) = fail {
        push_cqe(
            m,
            &rcq,
            CqeOut {
                op: cqe_op::RESP_ERR,
                qpn: ph.obj.id,
                uidx: ph.uidx,
                wqe_counter: ci as u16,
                syndrome: s,
                ..Default::default()
            },
        );
        set_err(m, peer);
        return Outcome::Fail(syndrome::REMOTE_INVAL_REQ);
    }
    push_cqe(
        m,
        &rcq,
        CqeOut {
            op: resp_op,
            qpn: ph.obj.id,
            uidx: ph.uidx,
            wqe_counter: ci as u16,
            byte_cnt: payload.len() as u32,
            imm: d.imm,
            scatter: if scatter {
                let mut s = [0u8; 32];
                s[..payload.len()].copy_from_slice(payload);
                (payload.len() as u8, s)
            } else {
                (0, [0; 32])
            },
            ..Default::default()
        },
    );
    Outcome::Done {
        byte_cnt: payload.len() as u32,
    }
}

/// The wire delay of a response (READ data, an atomic's old value) on its way back to `me`.
fn response_wire(me: &QpHdr) {
    let wire = me.wire_delay_ns.load(Ordering::Acquire);
    if wire != 0 {
        wire_wait(wire & !WIRE_TIMED);
    }
}

/// A READ's data or an atomic's old value on its way back: it lands in the requester's memory
/// when the batch of WQEs it was rung with has run, or before a fenced WQE runs.
struct Landing {
    dst: Region,
    bytes: Vec<u8>,
}

/// Executes one WQE. `late`: where READ data and atomic results go when more WQEs of the same
/// doorbell follow (a ConnectX goes on with the next WQEs while a READ's response is on its way
/// back, so a later WQE that reads the READ's destination without a fence sends what was there
/// before); `None`: they land now.
fn run_one(m: &Model, me: &QpHdr, d: &Decoded, buf: &[u8; 1024], mut late: Option<&mut Vec<Landing>>) -> Outcome {
    if d.opcode == opcode::NOP {
        return Outcome::Done { byte_cnt: 0 };
    }
    let Some(peer) = m.lookup(ObjKind::Qp, me.peer.load(Ordering::Acquire)) else {
        return Outcome::Fail(syndrome::TRANSPORT_RETRY_EXC);
    };
    let ph: &QpHdr = hdr(&peer);
    if ph.state.load(Ordering::Acquire) != state::RTS {
        return Outcome::Fail(syndrome::TRANSPORT_RETRY_EXC);
    }
    // Gather the local side (source for SEND/WRITE: read access suffices).
    // The payload, gathered: on the stack up to 1 KiB (no allocation per operation).
    let mut small = [0u8; 1024];
    let mut big: Vec<u8> = Vec::new();
    let mut plen = 0usize;
    let mut push = |bytes: &[u8]| {
        if big.is_empty() && plen + bytes.len() <= small.len() {
            small[plen..plen + bytes.len()].copy_from_slice(bytes);
        } else {
            if big.is_empty() {
                big.extend_from_slice(&small[..plen]);
            }
            big.extend_from_slice(bytes);
        }
        plen += bytes.len();
    };
    let gathers = matches!(
        d.opcode,
        opcode::SEND | opcode::SEND_IMM | opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM
    );
    if gathers {
        if let Some((off, len)) = d.inline {
            if len > me.max_inline as usize {
                return Outcome::Fail(syndrome::LOCAL_QP_OP);
            }
            push(&buf[off..off + len]);
        } else {
            for &(addr, lkey, len) in &d.sges[..d.nsge] {
                match resolve(m, lkey, addr, len as u64, me.pd, 0) {
                    // SAFETY: resolved in bounds of a registered region.
                    Ok(r) => push(unsafe { std::slice::from_raw_parts(r.ptr, len as usize) }),
                    Err(_) => return Outcome::Fail(syndrome::LOCAL_PROT),
                }
            }
        }
    }
    let payload: &[u8] = if big.is_empty() { &small[..plen] } else { &big };
    let remote = |need: u32, len: u64| -> Result<Region, u8> {
        let (raddr, rkey) = d.raddr.unwrap_or((0, 0));
        resolve(m, rkey, raddr, len, ph.pd, need).map_err(|_| syndrome::REMOTE_ACCESS)
    };
    match d.opcode {
        opcode::SEND => deliver_to_receiver(m, &peer, d, payload, cqe_op::RESP_SEND),
        opcode::SEND_IMM => deliver_to_receiver(m, &peer, d, payload, cqe_op::RESP_SEND_IMM),
        opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM => {
            let r = match remote(sys::IBV_ACCESS_REMOTE_WRITE, payload.len() as u64) {
                Ok(r) => r,
                Err(s) => return Outcome::Fail(s),
            };
            if d.opcode == opcode::RDMA_WRITE_IMM {
                // The immediate needs a receive; check before placing data.
                let ci = ph.rq_ci.load(Ordering::Relaxed);
                let Some(db) = qp_dbrec(m, &peer) else {
                    return Outcome::Fail(syndrome::TRANSPORT_RETRY_EXC);
                };
                // SAFETY: the peer's receive counter (checked by qp_dbrec).
                let head = u32::from_be(unsafe { std::ptr::read_volatile(db) });
                if (ci & 0xffff) == (head & 0xffff) {
                    return Outcome::Stall;
                }
            }
            // SAFETY: resolved in bounds of the responder's region.
            unsafe { std::ptr::copy_nonoverlapping(payload.as_ptr(), r.ptr, payload.len()) };
            if d.opcode == opcode::RDMA_WRITE_IMM {
                return deliver_to_receiver(m, &peer, d, payload, cqe_op::RESP_WR_IMM);
            }
            Outcome::Done {
                byte_cnt: payload.len() as u32,
            }
        }
        opcode::RDMA_READ => {
            let total: u64 = d.sges[..d.nsge].iter().map(|s| s.2 as u64).sum();
            let r = match remote(sys::IBV_ACCESS_REMOTE_READ, total) {
                Ok(r) => r,
                Err(s) => return Outcome::Fail(s),
            };
            // the response travels back over the wire before it lands
            response_wire(me);
            let mut off = 0usize;
            for &(addr, lkey, len) in &d.sges[..d.nsge] {
                let Ok(l) = resolve(m, lkey, addr, len as u64, me.pd, sys::IBV_ACCESS_LOCAL_WRITE) else {
                    return Outcome::Fail(syndrome::LOCAL_PROT);
                };
                match late.as_deref_mut() {
                    // SAFETY: both sides resolved in bounds.
                    None => unsafe { std::ptr::copy_nonoverlapping(r.ptr.add(off), l.ptr, len as usize) },
                    Some(late) => {
                        // the responder reads now (requests are served in order); the data
                        // lands later
                        // SAFETY: resolved in bounds of the responder's region.
                        let bytes = unsafe { std::slice::from_raw_parts(r.ptr.add(off), len as usize) }.to_vec();
                        late.push(Landing { dst: l, bytes });
                    }
                }
                off += len as usize;
            }
            Outcome::Done { byte_cnt: total as u32 }
        }
        opcode::ATOMIC_CS | opcode::ATOMIC_FA => {
            let (raddr, _) = d.raddr.unwrap_or((0, 0));
            if raddr % 8 != 0 {
                return Outcome::Fail(syndrome::REMOTE_INVAL_REQ);
            }
            let r = match remote(sys::IBV_ACCESS_REMOTE_ATOMIC, 8) {
                Ok(r) => r,
                Err(s) => return Outcome::Fail(s),
            };
            let (addr, lkey, _) = d.sges[0];
            let l = match resolve(m, lkey, addr, 8, me.pd, sys::IBV_ACCESS_LOCAL_WRITE) {
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
                    bytes: old_be.to_ne_bytes().to_vec(),
                }),
            }
            Outcome::Done { byte_cnt: 8 }
        }
        _ => Outcome::Fail(syndrome::LOCAL_QP_OP),
    }
}

/// Executes the rung WQEs of QP `q`. Any process may do it for any QP (under the QP's SQ lock):
/// a receiver's process resumes a sender stalled on RNR.
/// `doorbell`: run because this QP's poster rang (its thread, after the register store), so the
/// register is checked against the WQEs; not when another party resumes it (a receive posted
/// for a sender stalled on RNR), which may come between the poster's record and register stores.
fn execute(m: &Model, q: &Shm, reg: RegCheck) {
    let h: &QpHdr = hdr(q);
    let check = reg != RegCheck::None && h.check_reg != 0;
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
    let (Some(dbrec), Some((sq, _))) = (qp_dbrec(m, q), rings(q)) else {
        return None;
    };
    // SAFETY: the send counter, dbrec[1] (checked by qp_dbrec).
    let db = u32::from_be(unsafe { std::ptr::read_volatile(dbrec.add(1)) }) & 0xffff;
    fence(Ordering::Acquire);
    let mut ci = h.sq_ci.load(Ordering::Relaxed);
    let target = ci.wrapping_add(db.wrapping_sub(ci) & 0xffff);
    let mut rung = None;
    if check && target != ci {
        match doorbell_matches(q, sq, ci, target) {
            Rung::Matches(last, half) => rung = Some((last, half)),
            Rung::Unknown => {}
            Rung::Mismatch => {
                // The register does not hold the doorbell of the last WQE rung: a NIC would
                // fetch another WQE, or none. The model executes none of them: the QP moves to
                // error and the loop below flushes them (WR_FLUSH, one CQE each).
                h.bad_doorbells.fetch_add(1, Ordering::Relaxed);
                set_err(m, q);
            }
        }
    }
    let mut buf = [0u8; 1024];
    let mut rnr_deadline: Option<std::time::Instant> = None;
    // READ data and atomic results still on their way back, and the completions behind them
    // (a send queue completes in order). Empty, and not allocated, unless a READ or an atomic
    // is followed by more WQEs of this doorbell.
    let mut lands: Vec<Landing> = Vec::new();
    let mut held: Vec<CqeOut> = Vec::new();
    let emit = |lands: &Vec<Landing>, held: &mut Vec<CqeOut>, c: CqeOut| {
        if lands.is_empty() {
            push_cqe(m, &scq, c);
        } else {
            held.push(c);
        }
    };
    while ci != target {
        // A CQ that overflowed is in error, as on a ConnectX (a CQ error event; its QPs move to
        // error): nothing more executes, and the QP's later WQEs would be flushed into it.
        if hdr::<CqHdr>(&scq).overruns.load(Ordering::Relaxed) > 0 && h.state.load(Ordering::Acquire) != state::ERR {
            set_err(m, q);
        }
        let d = match decode(sq, h.sq_wqe_cnt, ci, h.obj.id, &mut buf) {
            Ok(d) => d,
            Err((op, idx)) => {
                // Malformed: report at the slot, move the QP to error; the rest is flushed.
                emit(
                    &lands,
                    &mut held,
                    CqeOut {
                        op: cqe_op::REQ_ERR,
                        qpn: h.obj.id,
                        uidx: h.uidx,
                        wqe_counter: idx,
                        syndrome: syndrome::LOCAL_QP_OP,
                        wqe_opcode: op,
                        ..Default::default()
                    },
                );
                set_err(m, q);
                ci = ci.wrapping_add(1);
                continue;
            }
        };
        let nbb = d.ds.div_ceil(4);
        if d.fence {
            // a fenced WQE starts once the READs and atomics before it have completed
            land(m, &scq, &mut lands, &mut held);
        }
        let more = ci.wrapping_add(nbb) != target || !lands.is_empty();
        let st = h.state.load(Ordering::Acquire);
        let outcome = if st != state::RTS {
            Outcome::Fail(syndrome::WR_FLUSH)
        } else if h.inject_countdown.load(Ordering::Acquire) > 0
            && h.inject_countdown.fetch_sub(1, Ordering::AcqRel) == 1
        {
            Outcome::Fail(h.inject_syndrome.load(Ordering::Acquire) as u8)
        } else {
            run_one(m, h, &d, &buf, more.then_some(&mut lands))
        };
        match outcome {
            Outcome::Done { byte_cnt } => {
                if d.signaled {
                    emit(
                        &lands,
                        &mut held,
                        CqeOut {
                            op: cqe_op::REQ,
                            qpn: h.obj.id,
                            uidx: h.uidx,
                            wqe_counter: d.idx,
                            byte_cnt,
                            wqe_opcode: d.opcode,
                            ..Default::default()
                        },
                    );
                }
            }
            Outcome::Fail(s) => {
                emit(
                    &lands,
                    &mut held,
                    CqeOut {
                        op: cqe_op::REQ_ERR,
                        qpn: h.obj.id,
                        uidx: h.uidx,
                        wqe_counter: d.idx,
                        syndrome: s,
                        wqe_opcode: d.opcode,
                        ..Default::default()
                    },
                );
                if s != syndrome::WR_FLUSH {
                    set_err(m, q);
                }
            }
            Outcome::Stall => {
                let retries = h.rnr_retry.load(Ordering::Relaxed);
                if retries >= 7 {
                    break; // infinite: resumed by the receiver's doorbell or the next ring
                }
                let peer_timer = m
                    .lookup(ObjKind::Qp, h.peer.load(Ordering::Relaxed))
                    .map(|p| hdr::<QpHdr>(&p).min_rnr_timer.load(Ordering::Relaxed))
                    .unwrap_or(12);
                let wait = std::time::Duration::from_micros(rnr_timer_us(peer_timer) * retries as u64);
                let deadline = *rnr_deadline.get_or_insert_with(|| std::time::Instant::now() + wait);
                if retries > 0 && std::time::Instant::now() < deadline {
                    std::hint::spin_loop();
                    continue; // retry the same WQE
                }
                emit(
                    &lands,
                    &mut held,
                    CqeOut {
                        op: cqe_op::REQ_ERR,
                        qpn: h.obj.id,
                        uidx: h.uidx,
                        wqe_counter: d.idx,
                        syndrome: syndrome::RNR_RETRY_EXC,
                        wqe_opcode: d.opcode,
                        ..Default::default()
                    },
                );
                set_err(m, q);
            }
        }
        rnr_deadline = None;
        ci = ci.wrapping_add(nbb);
        h.sq_ci.store(ci, Ordering::Release);
    }
    land(m, &scq, &mut lands, &mut held);
    rung
}

/// The responses on their way back land, in order, then the completions held behind them.
fn land(m: &Model, scq: &Shm, lands: &mut Vec<Landing>, held: &mut Vec<CqeOut>) {
    for l in lands.drain(..) {
        // SAFETY: `dst` was resolved in bounds of a registered region for `bytes.len()` bytes,
        // and its mapping is held by the region.
        unsafe { std::ptr::copy_nonoverlapping(l.bytes.as_ptr(), l.dst.ptr, l.bytes.len()) };
    }
    for c in held.drain(..) {
        push_cqe(m, scq, c);
    }
}

/// What the register says of the WQEs rung.
enum Rung {
    /// Register half `.1` starts with the first 8 bytes of the last WQE rung, at WQEBB `.0`.
    Matches(u32, usize),
    /// Neither half does.
    Mismatch,
    /// The WQEs do not add up (a malformed one): execution reports it at its slot.
    Unknown,
}

/// The QP's register page: two BlueFlame halves of `BF_SIZE` bytes (the poster alternates).
fn reg_half(q: &Shm, half: usize) -> *mut u64 {
    // SAFETY: the register page is inside the QP object's mapping (QP_REG_OFF + 2 * BF_SIZE).
    unsafe { q.ptr().add(QP_REG_OFF + half * BF_SIZE as usize) as *mut u64 }
}

/// Whether the register page of `q` (either BlueFlame half: the halves alternate) starts with
/// the first 8 bytes of the last WQE rung between `ci` and `target` (WQEBB indices): the
/// doorbell a ConnectX reads the WQE index, opcode, QP number and size from (a BlueFlame copy
/// starts with them too). The last WQE is found by walking the control segments' DS.
fn doorbell_matches(q: &Shm, sq: *const u8, ci: u32, target: u32) -> Rung {
    let h: &QpHdr = hdr(q);
    let cnt = h.sq_wqe_cnt;
    let (mut at, mut last) = (ci, ci);
    while at != target {
        // SAFETY: byte 7 (DS) of the control segment at WQEBB `at` inside the ring.
        let ds = unsafe { std::ptr::read_volatile(sq.add((at & (cnt - 1)) as usize * WQEBB + 7)) } & 0x3f;
        if ds == 0 {
            return Rung::Unknown; // a malformed WQE: execution reports it (LOCAL_QP_OP)
        }
        last = at;
        at = at.wrapping_add((ds as u32).div_ceil(4));
        if target.wrapping_sub(at) > target.wrapping_sub(ci) {
            return Rung::Unknown; // sizes that overrun the record: execution reports the WQE
        }
    }
    // SAFETY: the last WQE's first 8 bytes in the ring.
    let want = unsafe { std::ptr::read_unaligned(sq.add((last & (cnt - 1)) as usize * WQEBB) as *const u64) };
    // SAFETY: the first 8 bytes of each register half.
    match (0..2).find(|&half| unsafe { std::ptr::read_volatile(reg_half(q, half)) } == want) {
        Some(half) => Rung::Matches(last, half),
        None => Rung::Mismatch,
    }
}

/// Whether register half `half`, which holds the doorbell of the WQE at WQEBB `last`, holds it
/// whole when it was a BlueFlame write. A BlueFlame write is told from an 8-byte doorbell by
/// what it leaves past the first 8 bytes (the model clears them after every check, see
/// [`clear_register`]): a copy of the WQE's 64-byte units, up to `BF_SIZE`, which must equal the
/// ring's. An all-zero first unit past byte 8 reads as a doorbell: lenient, never a false alarm.
fn blueflame_matches(q: &Shm, last: u32, half: usize) -> bool {
    let h: &QpHdr = hdr(q);
    let Some((sq, _)) = rings(q) else {
        return true;
    };
    let cnt = h.sq_wqe_cnt;
    let reg = reg_half(q, half);
    // SAFETY: words 1..8 of the half (inside the register page).
    if (1..8).all(|w| unsafe { std::ptr::read_volatile(reg.add(w)) } == 0) {
        return true; // an 8-byte doorbell
    }
    let unit = |b: u32| -> *const u64 {
        // SAFETY: WQEBB `last + b`, masked into the ring.
        unsafe { sq.add((last.wrapping_add(b) & (cnt - 1)) as usize * WQEBB) as *const u64 }
    };
    // SAFETY: byte 7 (DS) of the WQE's control segment, in the ring.
    let ds = unsafe { std::ptr::read_volatile((unit(0) as *const u8).add(7)) } & 0x3f;
    let nbb = (ds as u32).div_ceil(4);
    if nbb == 0 || nbb as usize * WQEBB > BF_SIZE as usize {
        return false; // no BlueFlame write is that long
    }
    (0..nbb).all(|b| {
        (0..8usize).all(|w| {
            // SAFETY: word w of WQEBB b, in the ring and in the half (nbb * 64 <= BF_SIZE).
            unsafe { std::ptr::read_volatile(reg.add(b as usize * 8 + w)) == std::ptr::read_volatile(unit(b).add(w)) }
        })
    })
}

/// Clears both register halves past their first 8 bytes, so the next check tells a BlueFlame
/// write (which leaves bytes there) from an 8-byte doorbell (which does not). Only the poster's
/// thread writes the register, and only it checks: nothing else races with this.
fn clear_register(q: &Shm) {
    for half in 0..2 {
        let reg = reg_half(q, half);
        // SAFETY: words 1..8 of the half.
        if (1..8).any(|w| unsafe { std::ptr::read_volatile(reg.add(w)) } != 0) {
            for w in 1..BF_SIZE as usize / 8 {
                // SAFETY: word w of the half, inside the register page.
                unsafe { std::ptr::write_volatile(reg.add(w), 0) };
            }
        }
    }
}

/// Removes the objects of processes that died (crash recovery); returns how many.
pub fn sweep_dead() -> usize {
    shm::sweep(owner_of)
}

/// What `rdmaprobe devices` says about model0.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ModelInfo {
    /// `model0`.
    pub name: &'static str,
    /// Always true: this is not hardware.
    pub software_model: bool,
    /// What it is.
    pub description: &'static str,
    /// Where its shared-memory objects live.
    pub shm_dir: String,
    /// Largest queue depth.
    pub max_qp_wr: u32,
    /// Largest inline payload the device grants a QP (the device's limit; a QP's granted limit
    /// is in each result as `qp_max_inline_data`).
    #[serde(rename = "device_max_inline_data")]
    pub max_inline_data: u32,
    /// BlueFlame buffer size of its QPs.
    pub bf_size: u32,
    /// Backends it runs (`verbs` and `wr` when libibverbs reaches it: see `crate::uverbs`).
    pub backends: Vec<&'static str>,
    /// The provider library libibverbs runs it with (libmlx5's path), when it does.
    pub provider_library: Option<String>,
    /// Why libibverbs does not reach it here, when it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verbs_unavailable: Option<String>,
    /// Objects of dead processes removed while checking it.
    pub swept: usize,
}

/// Checks that the model can be opened here and describes it.
pub fn info() -> Result<ModelInfo, ModelError> {
    let before = sweep_dead();
    let _m = Model::open(ModelConfig::default())?;
    Ok(ModelInfo {
        name: DEVICE_NAME,
        software_model: true,
        description: "built-in software model of an mlx5 HCA (shared memory); results are about the tool and \
                      the data path, not any NIC's performance",
        shm_dir: shm::dir().display().to_string(),
        max_qp_wr: 32768,
        max_inline_data: MAX_INLINE,
        bf_size: BF_SIZE,
        backends: vec!["direct"],
        provider_library: None,
        verbs_unavailable: None,
        swept: before,
    })
}

/// A QP on model0 driven by the direct path: the same `Sq`, `Rq` and `Cq` code as on a ConnectX,
/// with the doorbell routed to the model. One CQ takes send and receive completions.
pub struct DirectModelQp {
    /// The send queue.
    pub sq: crate::mlx5::sq::Sq<ModelDoorbell>,
    /// The receive queue.
    pub rq: crate::mlx5::rq::Rq<ModelDoorbell>,
    /// The completion queue.
    pub cq: crate::mlx5::cq::Cq,
    /// The model's side of the QP (connect, state, knobs).
    pub qp: ModelQp,
    _cq: ModelCq,
}

impl DirectModelQp {
    /// Creates the CQ (`cqe` entries) and the QP in `pd` and wraps them.
    pub fn new(
        model: &Model,
        pd: u32,
        caps: ModelQpCaps,
        cqe: u32,
        mode: crate::mlx5::sq::DbMode,
    ) -> Result<Self, ModelError> {
        let cq = model.create_cq(cqe)?;
        let qp = model.create_qp(pd, &cq, &cq, caps)?;
        // SAFETY: the ring, doorbell record and register page live in `qp`'s mapping, kept alive
        // by the `qp` field for as long as the queues exist, and posted to only through them.
        let sq = unsafe { crate::mlx5::sq::Sq::new(qp.sq_config(), mode, qp.doorbell()) }
            .map_err(|e| ModelError::Invalid(e.to_string()))?;
        // SAFETY: as above, for the receive ring.
        let rq = unsafe { crate::mlx5::rq::Rq::new(qp.rq_config(), qp.doorbell()) }
            .map_err(|e| ModelError::Invalid(e.to_string()))?;
        // SAFETY: the CQ buffer and record live in `cq`'s mapping, kept by the `_cq` field.
        let dcq = unsafe { crate::mlx5::cq::Cq::new(cq.config()) }.map_err(|e| ModelError::Invalid(e.0.to_string()))?;
        Ok(DirectModelQp {
            sq,
            rq,
            cq: dcq,
            qp,
            _cq: cq,
        })
    }

    /// CQEs the model dropped because this CQ was full.
    pub fn cq_overruns(&self) -> u32 {
        self._cq.overruns()
    }
}
