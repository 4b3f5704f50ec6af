//! The device behind the descriptor: the legacy uverbs `write()` commands libibverbs sends once
//! its `ioctl` gets `ENOTTY` (`<rdma/ib_user_verbs.h>`), with libmlx5's driver data
//! (`<rdma/mlx5-abi.h>`), answered as the mlx5 kernel driver would for a ConnectX-5 port that is
//! model0: objects are model0's, their memory is the program's (pinned into model0's shared
//! files), the UAR pages are plain shared memory.

use super::interpose;
use crate::model::{Model, ModelCq, ModelDbPage, ModelMr, ModelQp, UserQpLayout};
use crate::sys::kabi as k;
use crate::sys::{
    IBV_QP_ACCESS_FLAGS, IBV_QP_AV, IBV_QP_DEST_QPN, IBV_QP_MAX_DEST_RD_ATOMIC, IBV_QP_MAX_QP_RD_ATOMIC,
    IBV_QP_MIN_RNR_TIMER, IBV_QP_PATH_MTU, IBV_QP_PKEY_INDEX, IBV_QP_PORT, IBV_QP_QKEY, IBV_QP_RETRY_CNT,
    IBV_QP_RNR_RETRY, IBV_QP_RQ_PSN, IBV_QP_SQ_PSN, IBV_QP_STATE, IBV_QP_TIMEOUT,
};
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::mem::size_of;
use std::sync::{Arc, Mutex, Weak};

/// The uverbs device's name in the fake sysfs and under `/dev/infiniband`.
pub const UVERBS_NAME: &str = "uverbs_model0";
/// The device node libibverbs opens.
pub const DEV_PATH: &str = "/dev/infiniband/uverbs_model0";

const PAGE: usize = 4096;
/// BlueFlame registers: 16 in 8 UAR pages (2 per page, `bf_reg_size` 512, halves of 256 B).
const TOT_BFREGS: u32 = 16;
/// Dynamic BlueFlame registers (dedicated ones for thread domains, `ibv_alloc_td`): libmlx5 maps
/// them page by page with `MLX5_IB_MMAP_ALLOC_WC`, 2 per page.
const DYN_BFREGS: u32 = 32;
/// A QP on a dynamic register (thread domain): no static one counted.
const NO_BFREG: u32 = u32::MAX;
const BF_REG_SIZE: u32 = 512;
/// IB QP states.
const QPS_RESET: u8 = 0;
const QPS_INIT: u8 = 1;
const QPS_RTR: u8 = 2;
const QPS_RTS: u8 = 3;
const QPS_ERR: u8 = 6;

struct DbRef {
    page: ModelDbPage,
    refs: u32,
}

struct CqEnt {
    cq: ModelCq,
    db: usize,
}

struct QpEnt {
    qp: Arc<ModelQp>,
    pdn: u32,
    db: usize,
    /// The BlueFlame register given to it (0..TOT_BFREGS).
    bfreg: u32,
    send_cq: u32,
    recv_cq: u32,
    attr: k::ib_uverbs_query_qp_resp,
}

/// One open context (a device descriptor after `GET_CONTEXT`).
struct Ctx {
    model: Model,
    next: u32,
    pds: HashMap<u32, u32>,
    mrs: HashMap<u32, ModelMr>,
    cqs: HashMap<u32, CqEnt>,
    qps: HashMap<u32, QpEnt>,
    dbs: HashMap<usize, DbRef>,
    /// QPs per BlueFlame register, and how many registers (the last ones) are low-latency
    /// (dedicated to one QP each), as GET_CONTEXT asked.
    bfreg_users: [u32; TOT_BFREGS as usize],
    low_latency: u32,
}

// SAFETY: the context is only reached under `CTXS`' lock; its model objects are shared memory.
unsafe impl Send for Ctx {}

static CTXS: Mutex<Vec<(c_int, Option<Ctx>)>> = Mutex::new(Vec::new());
/// The QPs made through this device in this process: number, the model's QP, and the last send
/// doorbell record [`progress`] delivered for it.
static QPS: Mutex<Vec<(u32, Weak<ModelQp>, u32)>> = Mutex::new(Vec::new());
static MODEL: Mutex<Option<Model>> = Mutex::new(None);
/// The pages pinned for registered regions, all contexts of the process: (region start, first
/// page, end of last page).
static MR_PAGES: Mutex<Vec<(usize, usize, usize)>> = Mutex::new(Vec::new());

/// The model new contexts use (the run's, with its execution mode and wire delay).
pub fn set_model(m: &Model) {
    *MODEL.lock().unwrap_or_else(|p| p.into_inner()) = Some(m.clone());
}

/// The model QP behind a QP number created through this device (this process).
pub fn model_qp(qpn: u32) -> Option<Weak<ModelQp>> {
    QPS.lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|(n, _, _)| *n == qpn)
        .map(|(_, w, _)| w.clone())
}

/// Lets model0 execute what libmlx5 rang on this process's QPs (the wire, then the WQEs, for
/// each QP whose send doorbell record moved; a sender stalled on RNR goes on): what a program
/// polling a model0 CQ through libibverbs needs, since no thread watches the doorbells. The
/// verbs layer's CQ polling calls it on model0; the measured backends use their own hooks.
pub fn progress() {
    let qps: Vec<(usize, Arc<ModelQp>, u32)> = QPS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .enumerate()
        .filter_map(|(i, (_, w, seen))| Some((i, w.upgrade()?, *seen)))
        .collect();
    for (i, q, mut seen) in qps {
        q.deliver_if_rung(&mut seen);
        let mut t = QPS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = t.get_mut(i).filter(|e| e.0 == q.qpn()) {
            e.2 = seen;
        }
    }
}

fn errno_of<T>(e: impl std::fmt::Display, errno: c_int) -> Result<T, c_int> {
    // what model0 does not do (a command, a flag, a feature) or cannot (no room in its
    // directory, memory not mapped) is said at once: libibverbs passes on only the errno; other
    // refusals (bad handles, bad transitions) are the caller's to report
    let said = [libc::EOPNOTSUPP, libc::ENOMEM, libc::ENOSPC, libc::EFAULT];
    if said.contains(&errno) || std::env::var_os("RDMAPROBE_UVERBS_DEBUG").is_some() {
        // never eprintln! here: it panics when stderr is a closed pipe, and this runs inside
        // an extern "C" write(), where a panic aborts
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "rdmaprobe: model0 uverbs: {e}");
    }
    Err(errno)
}

pub(super) fn open_device(flags: c_int) -> c_int {
    let fd = interpose::open_null(flags);
    if fd >= 0 {
        CTXS.lock().unwrap_or_else(|p| p.into_inner()).push((fd, None));
    }
    fd
}

pub(super) fn stat_device(buf: *mut libc::stat) -> c_int {
    // SAFETY: the caller's buffer; /dev/null is the character device the descriptor really is.
    unsafe { libc::syscall(libc::SYS_newfstatat, libc::AT_FDCWD, c"/dev/null".as_ptr(), buf, 0) as c_int }
}

pub(super) fn close_device(fd: c_int) {
    let ctx = {
        let mut c = CTXS.lock().unwrap_or_else(|p| p.into_inner());
        let i = c.iter().position(|(f, _)| *f == fd);
        i.and_then(|i| c.remove(i).1)
    };
    if let Some(mut ctx) = ctx {
        // What the program left: QPs before CQs before doorbell pages, as a kernel tears down.
        let qps: Vec<u32> = ctx.qps.keys().copied().collect();
        for h in qps {
            destroy_qp_ent(&mut ctx, h);
        }
        let cqs: Vec<u32> = ctx.cqs.keys().copied().collect();
        for h in cqs {
            if let Some(e) = ctx.cqs.remove(&h) {
                drop(e.cq);
                release_db(&mut ctx, e.db);
            }
        }
        let mut pages = MR_PAGES.lock().unwrap_or_else(|p| p.into_inner());
        for m in ctx.mrs.values() {
            let at = m.as_ptr() as usize;
            pages.retain(|r| r.0 != at);
        }
        drop(pages);
        ctx.mrs.clear();
        ctx.dbs.clear();
    }
}

pub(super) fn mmap_device(fd: c_int, len: usize, off: libc::off_t) -> Result<*mut c_void, c_int> {
    let pgoff = off as u64 / PAGE as u64;
    let cmd = (pgoff >> 8) & 0xff;
    let index = (pgoff & 0xff) | ((pgoff >> 16) << 8);
    let pages = match cmd as u32 {
        k::MLX5_IB_MMAP_REGULAR_PAGE | k::MLX5_IB_MMAP_WC_PAGE | k::MLX5_IB_MMAP_NC_PAGE => TOT_BFREGS / 2,
        // libmlx5 counts its dynamic pages on from the static ones
        k::MLX5_IB_MMAP_ALLOC_WC => (TOT_BFREGS + DYN_BFREGS) / 2,
        _ => 0,
    };
    if len != PAGE || index >= pages as u64 {
        return errno_of(
            format!("fd {fd}: mmap of command {cmd} index {index}, {len} bytes: not a UAR page model0 has"),
            libc::EINVAL,
        );
    }
    // SAFETY: fresh anonymous shared memory, forwarded to the kernel.
    let p = unsafe {
        libc::syscall(
            libc::SYS_mmap,
            std::ptr::null_mut::<c_void>(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    } as *mut c_void;
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::ENOMEM));
    }
    Ok(p)
}

// ---------------------------------------------------------------------------------------------
// Framing

/// Reads a `T` at `off` of `b` (zero-filled past the end: a shorter command from an older
/// library leaves the newer fields 0, as the kernel treats them).
fn rd<T: Default>(b: &[u8], off: usize) -> T {
    let mut v = T::default();
    let n = size_of::<T>().min(b.len().saturating_sub(off));
    // SAFETY: copies at most size_of::<T>() bytes that exist in `b` into a plain-data struct.
    unsafe { std::ptr::copy_nonoverlapping(b.as_ptr().add(off.min(b.len())), &mut v as *mut T as *mut u8, n) };
    v
}

fn bytes<T>(v: &T) -> &[u8] {
    // SAFETY: a plain-data struct viewed as its bytes.
    unsafe { std::slice::from_raw_parts(v as *const T as *const u8, size_of::<T>()) }
}

/// Where a command's response goes: the core part, then the driver part.
struct Resp {
    ptr: u64,
    core: usize,
    cap: usize,
}

impl Resp {
    /// Writes the core response and the driver response after it (each cut to its room).
    fn put(&self, core: &[u8], drv: &[u8]) -> Result<(), c_int> {
        if self.ptr == 0 {
            return Ok(());
        }
        let n = core.len().min(self.core).min(self.cap);
        // SAFETY: libibverbs hands a response buffer of `cap` bytes at `ptr` (this process).
        unsafe { std::ptr::copy_nonoverlapping(core.as_ptr(), self.ptr as *mut u8, n) };
        let room = self.cap.saturating_sub(self.core);
        let m = drv.len().min(room);
        // SAFETY: as above, the driver part follows the core part.
        unsafe { std::ptr::copy_nonoverlapping(drv.as_ptr(), (self.ptr as *mut u8).add(self.core), m) };
        Ok(())
    }
}

/// A command: its number, whether extended, the core payload, the driver payload, the response.
struct Cmd<'a> {
    op: u32,
    ex: bool,
    core: &'a [u8],
    drv: &'a [u8],
    resp: Resp,
}

fn frame(b: &[u8]) -> Result<Cmd<'_>, c_int> {
    let hdr: k::ib_uverbs_cmd_hdr = rd(b, 0);
    if b.len() < size_of::<k::ib_uverbs_cmd_hdr>() {
        return errno_of("command shorter than its header", libc::EINVAL);
    }
    if hdr.command & k::IB_USER_VERBS_CMD_FLAG_EXTENDED != 0 {
        let ex: k::ib_uverbs_ex_cmd_hdr = rd(b, 8);
        let core_len = hdr.in_words as usize * 8;
        let drv_len = ex.provider_in_words as usize * 8;
        let start = 8 + size_of::<k::ib_uverbs_ex_cmd_hdr>();
        if start + core_len + drv_len > b.len() {
            return errno_of("extended command longer than written", libc::EINVAL);
        }
        Ok(Cmd {
            op: hdr.command & k::IB_USER_VERBS_CMD_COMMAND_MASK,
            ex: true,
            core: &b[start..start + core_len],
            drv: &b[start + core_len..start + core_len + drv_len],
            resp: Resp {
                ptr: ex.response,
                core: hdr.out_words as usize * 8,
                cap: hdr.out_words as usize * 8 + ex.provider_out_words as usize * 8,
            },
        })
    } else {
        if hdr.in_words as usize * 4 != b.len() {
            return errno_of(
                format!(
                    "command {}: {} words announced, {} bytes written",
                    hdr.command,
                    hdr.in_words,
                    b.len()
                ),
                libc::EINVAL,
            );
        }
        let body = &b[8..];
        // The core structs of commands with a response start with the response pointer; the
        // split between core and driver parts is per command (`legacy`).
        Ok(Cmd {
            op: hdr.command,
            ex: false,
            core: body,
            drv: &[],
            resp: Resp {
                ptr: 0,
                core: 0,
                cap: hdr.out_words as usize * 4,
            },
        })
    }
}

/// Splits a legacy command's body at the core struct `C` (whose first field is the response
/// pointer when `has_resp`), with `R` the core response.
fn legacy<C, R>(c: &mut Cmd<'_>, has_resp: bool) {
    if c.ex {
        return;
    }
    let n = size_of::<C>().min(c.core.len());
    c.drv = &c.core[n..];
    c.core = &c.core[..n];
    if has_resp {
        c.resp.ptr = rd::<u64>(c.core, 0);
        c.resp.core = size_of::<R>();
    }
}

// ---------------------------------------------------------------------------------------------
// Commands

pub(super) fn command(fd: c_int, b: &[u8]) -> Result<(), c_int> {
    let mut c = frame(b)?;
    let mut ctxs = CTXS.lock().unwrap_or_else(|p| p.into_inner());
    let Some(slot) = ctxs.iter_mut().find(|(f, _)| *f == fd) else {
        return errno_of(format!("fd {fd} is not an open model0 device"), libc::EBADF);
    };
    if c.op == k::IB_USER_VERBS_CMD_GET_CONTEXT && !c.ex {
        if slot.1.is_some() {
            return errno_of("GET_CONTEXT twice on one descriptor", libc::EINVAL);
        }
        legacy::<k::ib_uverbs_get_context, k::ib_uverbs_get_context_resp>(&mut c, true);
        let model = match MODEL.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            Some(m) => m,
            None => Model::open(Default::default()).or_else(|e| errno_of(e, libc::ENODEV))?,
        };
        let low_latency = get_context(&c)?;
        slot.1 = Some(Ctx {
            bfreg_users: [0; TOT_BFREGS as usize],
            low_latency,
            model,
            next: 1,
            pds: HashMap::new(),
            mrs: HashMap::new(),
            cqs: HashMap::new(),
            qps: HashMap::new(),
            dbs: HashMap::new(),
        });
        return Ok(());
    }
    let Some(ctx) = slot.1.as_mut() else {
        return errno_of(format!("command {} before GET_CONTEXT", c.op), libc::EINVAL);
    };
    match (c.op, c.ex) {
        (k::IB_USER_VERBS_CMD_QUERY_DEVICE, false) => {
            legacy::<k::ib_uverbs_query_device, k::ib_uverbs_query_device_resp>(&mut c, true);
            c.resp.put(bytes(&device_attr(&ctx.model)), &[])
        }
        (k::IB_USER_VERBS_EX_CMD_QUERY_DEVICE, true) => {
            let mut r = k::ib_uverbs_ex_query_device_resp {
                base: device_attr(&ctx.model),
                ..Default::default()
            };
            r.response_length = (size_of::<k::ib_uverbs_ex_query_device_resp>().min(c.resp.core)) as u32;
            c.resp.put(bytes(&r), &[])
        }
        (k::IB_USER_VERBS_CMD_QUERY_PORT, false) => {
            legacy::<k::ib_uverbs_query_port, k::ib_uverbs_query_port_resp>(&mut c, true);
            let q: k::ib_uverbs_query_port = rd(c.core, 0);
            if q.port_num != 1 {
                return errno_of(
                    format!("QUERY_PORT of port {}: model0 has port 1", q.port_num),
                    libc::EINVAL,
                );
            }
            c.resp.put(bytes(&port_attr()), &[])
        }
        (k::IB_USER_VERBS_CMD_ALLOC_PD, false) => {
            legacy::<k::ib_uverbs_alloc_pd, k::ib_uverbs_alloc_pd_resp>(&mut c, true);
            let h = handle(ctx);
            let pdn = ctx.model.alloc_pd();
            ctx.pds.insert(h, pdn);
            let r = k::ib_uverbs_alloc_pd_resp {
                pd_handle: h,
                ..Default::default()
            };
            let d = k::mlx5_ib_alloc_pd_resp { pdn: pdn & 0xff_ffff };
            c.resp.put(bytes(&r), bytes(&d))
        }
        (k::IB_USER_VERBS_CMD_DEALLOC_PD, false) => {
            legacy::<k::ib_uverbs_dealloc_pd, ()>(&mut c, false);
            let q: k::ib_uverbs_dealloc_pd = rd(c.core, 0);
            let Some(&pdn) = ctx.pds.get(&q.pd_handle) else {
                return errno_of(format!("DEALLOC_PD of unknown handle {}", q.pd_handle), libc::EINVAL);
            };
            // as the kernel: a PD still used by a region or a QP is busy
            if ctx.mrs.values().any(|m| m.pd() == pdn) || ctx.qps.values().any(|e| e.pdn == pdn) {
                return errno_of(format!("DEALLOC_PD {}: still in use", q.pd_handle), libc::EBUSY);
            }
            ctx.pds.remove(&q.pd_handle);
            Ok(())
        }
        (k::IB_USER_VERBS_CMD_REG_MR, false) => {
            legacy::<k::ib_uverbs_reg_mr, k::ib_uverbs_reg_mr_resp>(&mut c, true);
            reg_mr(ctx, &c)
        }
        (k::IB_USER_VERBS_CMD_DEREG_MR, false) => {
            legacy::<k::ib_uverbs_dereg_mr, ()>(&mut c, false);
            let q: k::ib_uverbs_dereg_mr = rd(c.core, 0);
            match ctx.mrs.remove(&q.mr_handle) {
                Some(mr) => {
                    let at = mr.as_ptr() as usize;
                    drop(mr);
                    MR_PAGES.lock().unwrap_or_else(|p| p.into_inner()).retain(|r| r.0 != at);
                    Ok(())
                }
                None => errno_of(format!("DEREG_MR of unknown handle {}", q.mr_handle), libc::EINVAL),
            }
        }
        (k::IB_USER_VERBS_CMD_CREATE_CQ, false) => {
            legacy::<k::ib_uverbs_create_cq, k::ib_uverbs_create_cq_resp>(&mut c, true);
            let q: k::ib_uverbs_create_cq = rd(c.core, 0);
            create_cq(ctx, &c, q.cqe, q.comp_channel, false)
        }
        (k::IB_USER_VERBS_EX_CMD_CREATE_CQ, true) => {
            let q: k::ib_uverbs_ex_create_cq = rd(c.core, 0);
            if q.flags != 0 {
                return errno_of(
                    format!("CREATE_CQ flags {:#x} not supported", q.flags),
                    libc::EOPNOTSUPP,
                );
            }
            create_cq(ctx, &c, q.cqe, q.comp_channel, true)
        }
        (k::IB_USER_VERBS_CMD_DESTROY_CQ, false) => {
            legacy::<k::ib_uverbs_destroy_cq, k::ib_uverbs_destroy_cq_resp>(&mut c, true);
            let q: k::ib_uverbs_destroy_cq = rd(c.core, 0);
            if ctx
                .qps
                .values()
                .any(|e| e.send_cq == q.cq_handle || e.recv_cq == q.cq_handle)
            {
                return errno_of(format!("DESTROY_CQ {}: a QP still uses it", q.cq_handle), libc::EBUSY);
            }
            let Some(e) = ctx.cqs.remove(&q.cq_handle) else {
                return errno_of(format!("DESTROY_CQ of unknown handle {}", q.cq_handle), libc::EINVAL);
            };
            drop(e.cq);
            release_db(ctx, e.db);
            c.resp.put(bytes(&k::ib_uverbs_destroy_cq_resp::default()), &[])
        }
        (k::IB_USER_VERBS_CMD_CREATE_QP, false) => {
            legacy::<k::ib_uverbs_create_qp, k::ib_uverbs_create_qp_resp>(&mut c, true);
            let q: k::ib_uverbs_create_qp = rd(c.core, 0);
            let e = k::ib_uverbs_ex_create_qp {
                user_handle: q.user_handle,
                pd_handle: q.pd_handle,
                send_cq_handle: q.send_cq_handle,
                recv_cq_handle: q.recv_cq_handle,
                srq_handle: q.srq_handle,
                max_send_wr: q.max_send_wr,
                max_recv_wr: q.max_recv_wr,
                max_send_sge: q.max_send_sge,
                max_recv_sge: q.max_recv_sge,
                max_inline_data: q.max_inline_data,
                sq_sig_all: q.sq_sig_all,
                qp_type: q.qp_type,
                is_srq: q.is_srq,
                ..Default::default()
            };
            create_qp(ctx, &c, &e, false)
        }
        (k::IB_USER_VERBS_EX_CMD_CREATE_QP, true) => {
            let e: k::ib_uverbs_ex_create_qp = rd(c.core, 0);
            create_qp(ctx, &c, &e, true)
        }
        (k::IB_USER_VERBS_CMD_MODIFY_QP, false) => {
            legacy::<k::ib_uverbs_modify_qp, ()>(&mut c, false);
            let q: k::ib_uverbs_modify_qp = rd(c.core, 0);
            modify_qp(ctx, &q)
        }
        (k::IB_USER_VERBS_EX_CMD_MODIFY_QP, true) => {
            let q: k::ib_uverbs_ex_modify_qp = rd(c.core, 0);
            modify_qp(ctx, &q.base)?;
            let r = k::ib_uverbs_ex_modify_qp_resp {
                comp_mask: 0,
                response_length: size_of::<k::ib_uverbs_ex_modify_qp_resp>() as u32,
            };
            c.resp.put(bytes(&r), &[])
        }
        (k::IB_USER_VERBS_CMD_QUERY_QP, false) => {
            legacy::<k::ib_uverbs_query_qp, k::ib_uverbs_query_qp_resp>(&mut c, true);
            let q: k::ib_uverbs_query_qp = rd(c.core, 0);
            let Some(e) = ctx.qps.get(&q.qp_handle) else {
                return errno_of(format!("QUERY_QP of unknown handle {}", q.qp_handle), libc::EINVAL);
            };
            let mut a: k::ib_uverbs_query_qp_resp = rd(bytes(&e.attr), 0);
            // the model moves a QP to error on a failed WQE, as a NIC does
            if e.qp.state() == crate::model::state::ERR {
                a.qp_state = QPS_ERR;
            }
            a.cur_qp_state = a.qp_state;
            c.resp.put(bytes(&a), &[])
        }
        (k::IB_USER_VERBS_CMD_DESTROY_QP, false) => {
            legacy::<k::ib_uverbs_destroy_qp, k::ib_uverbs_destroy_qp_resp>(&mut c, true);
            let q: k::ib_uverbs_destroy_qp = rd(c.core, 0);
            if !ctx.qps.contains_key(&q.qp_handle) {
                return errno_of(format!("DESTROY_QP of unknown handle {}", q.qp_handle), libc::EINVAL);
            }
            destroy_qp_ent(ctx, q.qp_handle);
            c.resp.put(bytes(&k::ib_uverbs_destroy_qp_resp::default()), &[])
        }
        (op, ex) => errno_of(
            format!(
                "{} command {op} is not one model0's uverbs device knows (a newer rdma-core?)",
                if ex { "extended" } else { "legacy" }
            ),
            libc::EOPNOTSUPP,
        ),
    }
}

fn handle(ctx: &mut Ctx) -> u32 {
    ctx.next += 1;
    ctx.next
}

/// Answers GET_CONTEXT; returns how many low-latency BlueFlame registers libmlx5 asked for.
fn get_context(c: &Cmd<'_>) -> Result<u32, c_int> {
    let req: k::mlx5_ib_alloc_ucontext_req_v2 = rd(c.drv, 0);
    if req.total_num_bfregs > TOT_BFREGS || req.num_low_latency_bfregs >= TOT_BFREGS {
        return errno_of(
            format!(
                "GET_CONTEXT asks {} BlueFlame registers, {} of them low-latency: model0 has {TOT_BFREGS}",
                req.total_num_bfregs, req.num_low_latency_bfregs
            ),
            libc::EINVAL,
        );
    }
    // SAFETY: an eventfd nobody signals: model0 raises no asynchronous events.
    let async_fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if async_fd < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EMFILE));
    }
    let r = k::ib_uverbs_get_context_resp {
        async_fd: async_fd as u32,
        num_comp_vectors: 1,
        ..Default::default()
    };
    let d = k::mlx5_ib_alloc_ucontext_resp {
        qp_tab_size: 1 << 18,
        bf_reg_size: BF_REG_SIZE,
        tot_bfregs: TOT_BFREGS,
        cache_line_size: 64,
        max_sq_desc_sz: 1024,
        max_rq_desc_sz: 512,
        max_send_wqebb: 1 << 15,
        max_recv_wr: 1 << 15,
        max_srq_recv_wr: 1 << 15,
        num_ports: 1,
        cqe_version: req.max_cqe_version.min(1),
        response_length: size_of::<k::mlx5_ib_alloc_ucontext_resp>() as u32,
        log_uar_size: 12,
        num_uars_per_page: 1,
        num_dyn_bfregs: DYN_BFREGS,
        ..Default::default()
    };
    c.resp.put(bytes(&r), bytes(&d))?;
    Ok(req.num_low_latency_bfregs)
}

/// A BlueFlame register for a new QP, as the mlx5 kernel driver allocates them: a free
/// low-latency one (the last `low_latency`, one QP each), else the least used medium one, else
/// register 0 (no BlueFlame, doorbells only). Returns the register and the index libmlx5 takes
/// (`bfs[]` counts 4 registers per UAR page, 2 of them usable: the kernel's adjust_bfregn).
fn alloc_bfreg(ctx: &mut Ctx) -> (u32, u32) {
    let first_low = TOT_BFREGS - ctx.low_latency;
    let n = (first_low..TOT_BFREGS)
        .find(|&i| ctx.bfreg_users[i as usize] == 0)
        .or_else(|| (1..first_low).min_by_key(|&i| ctx.bfreg_users[i as usize]))
        .unwrap_or(0);
    ctx.bfreg_users[n as usize] += 1;
    (n, n / 2 * 4 + n % 2)
}

/// What a ConnectX-5 reports, with model0's limits; atomics: `IBV_ATOMIC_HCA` when model0 works
/// on host-order words, none when on big-endian ones (as the mlx5 kernel driver advertises).
fn device_attr(m: &Model) -> k::ib_uverbs_query_device_resp {
    k::ib_uverbs_query_device_resp {
        fw_ver: (16u64 << 32) | (35 << 16) | 1000,
        node_guid: 0x0000_0000_0000_0001u64.to_be(),
        sys_image_guid: 0x0000_0000_0000_0001u64.to_be(),
        max_mr_size: u64::MAX,
        page_size_cap: !(PAGE as u64 - 1),
        vendor_id: 0x02c9,
        vendor_part_id: 4119,
        hw_ver: 0,
        max_qp: 1 << 18,
        max_qp_wr: 1 << 15,
        device_cap_flags: 0,
        max_sge: 30,
        max_sge_rd: 30,
        max_cq: 1 << 24,
        max_cqe: (1 << 22) - 1,
        max_mr: 1 << 24,
        max_pd: 1 << 24,
        max_qp_rd_atom: 16,
        max_res_rd_atom: 16 << 18,
        max_qp_init_rd_atom: 16,
        atomic_cap: if m.config().atomic_big_endian {
            crate::sys::IBV_ATOMIC_NONE
        } else {
            crate::sys::IBV_ATOMIC_HCA
        },
        max_pkeys: 128,
        local_ca_ack_delay: 16,
        phys_port_cnt: 1,
        ..Default::default()
    }
}

fn port_attr() -> k::ib_uverbs_query_port_resp {
    k::ib_uverbs_query_port_resp {
        port_cap_flags: 0,
        max_msg_sz: 1 << 30,
        gid_tbl_len: 1,
        pkey_tbl_len: 1,
        lid: 1,
        sm_lid: 1,
        state: crate::sys::IBV_PORT_ACTIVE as u8,
        max_mtu: crate::sys::IBV_MTU_4096 as u8,
        active_mtu: crate::sys::IBV_MTU_4096 as u8,
        max_vl_num: 4,
        active_width: 2,  // 4x
        active_speed: 32, // EDR
        phys_state: 5,    // LinkUp
        link_layer: crate::sys::IBV_LINK_LAYER_INFINIBAND as u8,
        ..Default::default()
    }
}

fn reg_mr(ctx: &mut Ctx, c: &Cmd<'_>) -> Result<(), c_int> {
    let q: k::ib_uverbs_reg_mr = rd(c.core, 0);
    let Some(&pdn) = ctx.pds.get(&q.pd_handle) else {
        return errno_of(format!("REG_MR in unknown PD handle {}", q.pd_handle), libc::EINVAL);
    };
    let (start, len) = (q.start as usize, q.length as usize);
    // the kernel's checks (ib_check_mr_access): remote write or atomic needs local write
    let remote_w = crate::sys::IBV_ACCESS_REMOTE_WRITE | crate::sys::IBV_ACCESS_REMOTE_ATOMIC;
    if q.access_flags & remote_w != 0 && q.access_flags & crate::sys::IBV_ACCESS_LOCAL_WRITE == 0 {
        return errno_of(
            format!(
                "REG_MR with access {:#x}: remote write or atomic without local write",
                q.access_flags
            ),
            libc::EINVAL,
        );
    }
    let Some(e0) = start.checked_add(len).and_then(|e| e.checked_next_multiple_of(PAGE)) else {
        return errno_of(
            format!("REG_MR of {start:#x} + {len}: the range overflows"),
            libc::EINVAL,
        );
    };
    if len == 0 {
        return errno_of("REG_MR of 0 bytes", libc::EINVAL);
    }
    let s0 = start & !(PAGE - 1);
    // every page mapped (the kernel pins with get_user_pages and answers EFAULT)
    if !mapped(s0, e0 - s0) {
        return errno_of(
            format!("REG_MR of {start:#x} + {len}: not all of it is mapped"),
            libc::EFAULT,
        );
    }
    // model0 pins whole pages by mapping a file over them: pages another region (of any
    // context of this process) already pinned cannot be pinned twice
    let mut pages = MR_PAGES.lock().unwrap_or_else(|p| p.into_inner());
    if pages.iter().any(|&(_, s1, e1)| s0 < e1 && s1 < e0) {
        return errno_of(
            format!("REG_MR of {start:#x} + {len}: its pages overlap another region's (model0 pins whole pages)"),
            libc::EOPNOTSUPP,
        );
    }
    // SAFETY: libibverbs registers memory the program owns and keeps until DEREG_MR.
    let mr = unsafe { ctx.model.reg_user_mr(pdn, start, len, q.hca_va, q.access_flags) }
        .or_else(|e| errno_of(e, libc::ENOMEM))?;
    let h = handle(ctx);
    let r = k::ib_uverbs_reg_mr_resp {
        mr_handle: h,
        lkey: mr.lkey(),
        rkey: mr.rkey(),
        ..Default::default()
    };
    pages.push((mr.as_ptr() as usize, s0, e0));
    ctx.mrs.insert(h, mr);
    c.resp.put(bytes(&r), &[])
}

/// Whether every page of `[addr, addr + len)` is mapped (`mincore` answers ENOMEM otherwise).
fn mapped(addr: usize, len: usize) -> bool {
    let mut vec = vec![0u8; len.div_ceil(PAGE)];
    // SAFETY: mincore only inspects the range and writes one byte per page into `vec`.
    unsafe { libc::mincore(addr as *mut c_void, len, vec.as_mut_ptr()) == 0 }
}

/// Pins the doorbell-record page holding `addr` (once per page), returns the page and offset.
fn take_db(ctx: &mut Ctx, addr: u64) -> Result<(usize, u32), c_int> {
    let page = addr as usize & !(PAGE - 1);
    if let Some(d) = ctx.dbs.get_mut(&page) {
        d.refs += 1;
    } else {
        // SAFETY: libmlx5's record page, allocated until the last object using it is destroyed.
        let p = unsafe { ctx.model.map_db_page(page) }.or_else(|e| errno_of(e, libc::ENOMEM))?;
        ctx.dbs.insert(page, DbRef { page: p, refs: 1 });
    }
    Ok((page, (addr as usize - page) as u32))
}

fn release_db(ctx: &mut Ctx, page: usize) {
    if let Some(d) = ctx.dbs.get_mut(&page) {
        d.refs -= 1;
        if d.refs == 0 {
            ctx.dbs.remove(&page);
        }
    }
}

fn create_cq(ctx: &mut Ctx, c: &Cmd<'_>, cqe: u32, channel: i32, ex: bool) -> Result<(), c_int> {
    let d: k::mlx5_ib_create_cq = rd(c.drv, 0);
    if channel >= 0 {
        return errno_of(
            "CREATE_CQ with a completion channel: model0 raises no events yet",
            libc::EOPNOTSUPP,
        );
    }
    if d.cqe_size != 64 {
        return errno_of(
            format!(
                "CREATE_CQ with {}-byte CQEs: model0 writes 64-byte CQEs (unset MLX5_CQE_SIZE)",
                d.cqe_size
            ),
            libc::EOPNOTSUPP,
        );
    }
    let cnt = cqe.wrapping_add(1);
    let (page, off) = take_db(ctx, d.db_addr)?;
    let db = &ctx.dbs[&page].page;
    // SAFETY: libmlx5's CQ buffer of `cnt` 64-byte entries, kept until DESTROY_CQ.
    let cq = match unsafe { ctx.model.create_user_cq(cnt, d.buf_addr as usize, db, off) } {
        Ok(cq) => cq,
        Err(e) => {
            release_db(ctx, page);
            return errno_of(e, libc::EINVAL);
        }
    };
    let h = handle(ctx);
    let r = k::ib_uverbs_create_cq_resp {
        cq_handle: h,
        cqe: cnt - 1,
        ..Default::default()
    };
    let dr = k::mlx5_ib_create_cq_resp {
        cqn: cq.cqn(),
        ..Default::default()
    };
    ctx.cqs.insert(h, CqEnt { cq, db: page });
    if ex {
        let e = k::ib_uverbs_ex_create_cq_resp {
            base: r,
            comp_mask: 0,
            response_length: size_of::<k::ib_uverbs_ex_create_cq_resp>() as u32,
        };
        c.resp.put(bytes(&e), bytes(&dr))
    } else {
        c.resp.put(bytes(&r), bytes(&dr))
    }
}

fn create_qp(ctx: &mut Ctx, c: &Cmd<'_>, q: &k::ib_uverbs_ex_create_qp, ex: bool) -> Result<(), c_int> {
    let d: k::mlx5_ib_create_qp = rd(c.drv, 0);
    if q.qp_type != crate::sys::IBV_QPT_RC as u8 {
        return errno_of(
            format!("CREATE_QP of type {}: model0 has RC QPs", q.qp_type),
            libc::EOPNOTSUPP,
        );
    }
    if q.is_srq != 0 || q.create_flags & !k::IB_UVERBS_QP_CREATE_SQ_SIG_ALL != 0 || q.comp_mask != 0 {
        return errno_of(
            format!(
                "CREATE_QP with an SRQ, create flags {:#x} or comp_mask {:#x}",
                q.create_flags, q.comp_mask
            ),
            libc::EOPNOTSUPP,
        );
    }
    let known = k::MLX5_QP_FLAG_SCATTER_CQE | k::MLX5_QP_FLAG_SIGNATURE | k::MLX5_QP_FLAG_BFREG_INDEX;
    if d.flags & !known != 0 {
        return errno_of(format!("CREATE_QP with mlx5 flags {:#x}", d.flags), libc::EOPNOTSUPP);
    }
    if d.flags & k::MLX5_QP_FLAG_SIGNATURE != 0 {
        return errno_of(
            "CREATE_QP with WQE signatures (MLX5_QP_SIGNATURE=1): model0 does not check them; unset it",
            libc::EOPNOTSUPP,
        );
    }
    let (Some(&pdn), Some(scq), Some(rcq)) = (
        ctx.pds.get(&q.pd_handle),
        ctx.cqs.get(&q.send_cq_handle),
        ctx.cqs.get(&q.recv_cq_handle),
    ) else {
        return errno_of("CREATE_QP with an unknown PD or CQ handle", libc::EINVAL);
    };
    let rq_stride = 1u32.checked_shl(d.rq_wqe_shift).unwrap_or(0);
    let rq_len = d.rq_wqe_count as usize * rq_stride as usize;
    let sq_len = d.sq_wqe_count as usize * 64;
    let l = UserQpLayout {
        buf: d.buf_addr as usize,
        buf_len: (rq_len + sq_len).next_multiple_of(PAGE),
        sq_wqe_cnt: d.sq_wqe_count,
        rq_wqe_cnt: d.rq_wqe_count,
        rq_stride: rq_stride.max(16),
        max_inline: q.max_inline_data,
        scatter_cqe: if d.flags & k::MLX5_QP_FLAG_SCATTER_CQE != 0 {
            32
        } else {
            0
        },
        uidx: d.uidx,
    };
    let (send_cq, recv_cq) = (q.send_cq_handle, q.recv_cq_handle);
    let (scq, rcq) = (&scq.cq as *const ModelCq, &rcq.cq as *const ModelCq);
    let (page, off) = take_db(ctx, d.db_addr)?;
    let db = &ctx.dbs[&page].page;
    // SAFETY: the CQs are entries of `ctx.cqs`, not moved by `take_db` (which touches `dbs`);
    // libmlx5's QP buffer is kept until DESTROY_QP.
    let qp = match unsafe { ctx.model.create_user_qp(pdn, &*scq, &*rcq, l, db, off) } {
        Ok(qp) => Arc::new(qp),
        Err(e) => {
            release_db(ctx, page);
            return errno_of(e, libc::EINVAL);
        }
    };
    let h = handle(ctx);
    let qpn = qp.qpn();
    QPS.lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((qpn, Arc::downgrade(&qp), 0));
    let r = k::ib_uverbs_create_qp_resp {
        qp_handle: h,
        qpn,
        max_send_wr: q.max_send_wr,
        max_recv_wr: q.max_recv_wr,
        max_send_sge: q.max_send_sge,
        max_recv_sge: q.max_recv_sge,
        max_inline_data: q.max_inline_data,
        ..Default::default()
    };
    // a thread-domain QP names its dynamic register itself (MLX5_QP_FLAG_BFREG_INDEX): it takes
    // none of the static ones
    let (bfreg, bfreg_index) = if d.flags & k::MLX5_QP_FLAG_BFREG_INDEX != 0 {
        (NO_BFREG, d.bfreg_index)
    } else {
        alloc_bfreg(ctx)
    };
    let dr = k::mlx5_ib_create_qp_resp {
        bfreg_index,
        ..Default::default()
    };
    let attr = k::ib_uverbs_query_qp_resp {
        max_send_wr: q.max_send_wr,
        max_recv_wr: q.max_recv_wr,
        max_send_sge: q.max_send_sge,
        max_recv_sge: q.max_recv_sge,
        max_inline_data: q.max_inline_data,
        qp_state: QPS_RESET,
        sq_sig_all: q.sq_sig_all,
        port_num: 1,
        ..Default::default()
    };
    ctx.qps.insert(
        h,
        QpEnt {
            qp,
            pdn,
            db: page,
            bfreg,
            send_cq,
            recv_cq,
            attr,
        },
    );
    if ex {
        let e = k::ib_uverbs_ex_create_qp_resp {
            base: r,
            comp_mask: 0,
            response_length: size_of::<k::ib_uverbs_ex_create_qp_resp>() as u32,
        };
        c.resp.put(bytes(&e), bytes(&dr))
    } else {
        c.resp.put(bytes(&r), bytes(&dr))
    }
}

fn destroy_qp_ent(ctx: &mut Ctx, h: u32) {
    if let Some(e) = ctx.qps.remove(&h) {
        let qpn = e.qp.qpn();
        QPS.lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(n, _, _)| *n != qpn);
        // libmlx5 frees the buffer when this command returns: the memory goes back now, whoever
        // still holds the QP (a concurrent progress call, a backend) keeps only the model's file
        e.qp.release_user_memory();
        drop(e.qp);
        release_db(ctx, e.db);
        if e.bfreg != NO_BFREG {
            ctx.bfreg_users[e.bfreg as usize] -= 1;
        }
    }
}

fn modify_qp(ctx: &mut Ctx, q: &k::ib_uverbs_modify_qp) -> Result<(), c_int> {
    let Some(e) = ctx.qps.get_mut(&q.qp_handle) else {
        return errno_of(format!("MODIFY_QP of unknown handle {}", q.qp_handle), libc::EINVAL);
    };
    let m = q.attr_mask;
    let a = &mut e.attr;
    let cur = a.qp_state;
    let next = if m & IBV_QP_STATE != 0 { q.qp_state } else { cur };
    // The transitions and required attributes of the IB specification (the kernel's
    // ib_modify_qp_is_ok) for an RC QP.
    let need = match (cur, next) {
        (_, QPS_RESET) | (_, QPS_ERR) => Some(0),
        (QPS_RESET, QPS_INIT) => Some(IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
        (QPS_INIT, QPS_INIT) => Some(0),
        (QPS_INIT, QPS_RTR) => Some(
            IBV_QP_AV
                | IBV_QP_PATH_MTU
                | IBV_QP_DEST_QPN
                | IBV_QP_RQ_PSN
                | IBV_QP_MAX_DEST_RD_ATOMIC
                | IBV_QP_MIN_RNR_TIMER,
        ),
        (QPS_RTR, QPS_RTS) => {
            Some(IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)
        }
        (QPS_RTS, QPS_RTS) => Some(0),
        _ => None,
    };
    match need {
        Some(n) if m & n == n => {}
        Some(n) => {
            return errno_of(
                format!("MODIFY_QP {cur}->{next}: attributes {:#x} missing", n & !m),
                libc::EINVAL,
            )
        }
        None => return errno_of(format!("MODIFY_QP {cur}->{next}: not a valid transition"), libc::EINVAL),
    }
    if m & IBV_QP_PORT != 0 && q.port_num != 1 {
        return errno_of(
            format!("MODIFY_QP to port {}: model0 has port 1", q.port_num),
            libc::EINVAL,
        );
    }
    if m & IBV_QP_PATH_MTU != 0 && !(1..=5).contains(&q.path_mtu) {
        return errno_of(format!("MODIFY_QP with path MTU code {}", q.path_mtu), libc::EINVAL);
    }
    if m & IBV_QP_DEST_QPN != 0 && q.dest_qp_num == e.qp.qpn() {
        return errno_of(
            "MODIFY_QP to itself: model0 has no loopback of a QP to itself",
            libc::EINVAL,
        );
    }
    if m & IBV_QP_ACCESS_FLAGS != 0 {
        a.qp_access_flags = q.qp_access_flags;
    }
    if m & IBV_QP_PKEY_INDEX != 0 {
        a.pkey_index = q.pkey_index;
    }
    if m & IBV_QP_PORT != 0 {
        a.port_num = q.port_num;
    }
    if m & IBV_QP_QKEY != 0 {
        a.qkey = q.qkey;
    }
    if m & IBV_QP_AV != 0 {
        a.dest = q.dest;
    }
    if m & IBV_QP_PATH_MTU != 0 {
        a.path_mtu = q.path_mtu;
    }
    if m & IBV_QP_DEST_QPN != 0 {
        a.dest_qp_num = q.dest_qp_num;
    }
    if m & IBV_QP_RQ_PSN != 0 {
        a.rq_psn = q.rq_psn;
    }
    if m & IBV_QP_MAX_DEST_RD_ATOMIC != 0 {
        a.max_dest_rd_atomic = q.max_dest_rd_atomic;
    }
    if m & IBV_QP_MIN_RNR_TIMER != 0 {
        a.min_rnr_timer = q.min_rnr_timer;
    }
    if m & IBV_QP_SQ_PSN != 0 {
        a.sq_psn = q.sq_psn;
    }
    if m & IBV_QP_TIMEOUT != 0 {
        a.timeout = q.timeout;
    }
    if m & IBV_QP_RETRY_CNT != 0 {
        a.retry_cnt = q.retry_cnt;
    }
    if m & IBV_QP_RNR_RETRY != 0 {
        a.rnr_retry = q.rnr_retry;
    }
    if m & IBV_QP_MAX_QP_RD_ATOMIC != 0 {
        a.max_rd_atomic = q.max_rd_atomic;
    }
    a.qp_state = next;
    match next {
        QPS_RESET => e.qp.reset(),
        QPS_ERR => e.qp.set_error(),
        QPS_RTS if cur == QPS_RTR => e.qp.connect(
            a.dest_qp_num,
            crate::model::ModelConnect {
                rnr_retry: a.rnr_retry,
                min_rnr_timer: a.min_rnr_timer,
            },
        ),
        _ => {}
    }
    Ok(())
}
