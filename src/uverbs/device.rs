//! The device behind the descriptor: the legacy uverbs `write()` commands libibverbs sends once
//! its `ioctl` gets `ENOTTY` (`<rdma/ib_user_verbs.h>`), with libmlx5's driver data
//! (`<rdma/mlx5-abi.h>`), answered as the mlx5 kernel driver would for a ConnectX-5 port that is
//! model0: objects are model0's, their memory is the program's (pinned into model0's shared
//! files), the UAR pages are plain shared memory.
//!
//! Here: the descriptors and their contexts, the UAR mappings and GET_CONTEXT; the framing of a
//! command and its response is in `frame`, the table of the other commands' handlers in
//! `dispatch`, the larger commands' work in `commands`.

mod clock;
mod commands;
mod dispatch;
mod frame;
mod pins;
mod qps;
mod srq;
#[cfg(test)]
mod tests;

use super::interpose;
use crate::model::{Model, ModelCq, ModelDbPage, ModelQp, ModelSrq};
use crate::sys::kabi as k;
use commands::{destroy_qp_ent, get_context, release_db};
use frame::{frame, legacy, Cmd};

pub use clock::refresh as refresh_clock;
pub use srq::receives_posted as srq_receives_posted;
use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, Weak};

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
    /// The SRQ handle its receives come from.
    srq: Option<u32>,
    attr: k::ib_uverbs_query_qp_resp,
}

struct SrqEnt {
    srq: ModelSrq,
    pdn: u32,
    db: usize,
}

/// One open context (a device descriptor after `GET_CONTEXT`).
struct Ctx {
    model: Model,
    next: u32,
    pds: HashMap<u32, u32>,
    mrs: HashMap<u32, pins::MrEnt>,
    cqs: HashMap<u32, CqEnt>,
    qps: HashMap<u32, QpEnt>,
    srqs: HashMap<u32, SrqEnt>,
    dbs: HashMap<usize, DbRef>,
    /// QPs per BlueFlame register, and how many registers (the last ones) are low-latency
    /// (dedicated to one QP each), as GET_CONTEXT asked.
    bfreg_users: [u32; TOT_BFREGS as usize],
    low_latency: u32,
}

// SAFETY: the context is only reached under `CTXS`' lock; its model objects are shared memory.
unsafe impl Send for Ctx {}

static CTXS: Mutex<Vec<(c_int, Option<Ctx>)>> = Mutex::new(Vec::new());
use qps::{with_qps, QPS};
static MODEL: Mutex<Option<Model>> = Mutex::new(None);
use pins::PINS as MR_PAGES;

thread_local! {
    /// How deep this thread is in model0's device and model, where it may hold any of their
    /// locks (the device's tables, the model's, the shared rings'): what the signal path reads
    /// before it tears anything down.
    static INSIDE: Cell<u32> = const { Cell::new(0) };
}

/// This thread is in model0 while the value lives ([`inside`]).
pub struct Inside(());

/// Marks this thread as in model0 (it may take model0's locks) until the value is dropped.
pub fn inside() -> Inside {
    let _ = INSIDE.try_with(|c| c.set(c.get() + 1));
    Inside(())
}

impl Drop for Inside {
    fn drop(&mut self) {
        let _ = INSIDE.try_with(|c| c.set(c.get().saturating_sub(1)));
    }
}

/// Whether this thread is in model0 now (a signal handler: the thread it interrupted).
pub(super) fn is_inside() -> bool {
    INSIDE.try_with(|c| c.get() != 0).unwrap_or(true)
}

/// `m` locked: waiting for it with `wait`, else only if it is free now.
fn guard<T>(m: &Mutex<T>, wait: bool) -> Option<MutexGuard<'_, T>> {
    if wait {
        return Some(m.lock().unwrap_or_else(|p| p.into_inner()));
    }
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// The model new contexts use (the run's, with its execution mode and wire delay).
pub fn set_model(m: &Model) {
    *MODEL.lock().unwrap_or_else(|p| p.into_inner()) = Some(m.clone());
}

/// The model QP behind a QP number created through this device (this process).
pub fn model_qp(qpn: u32) -> Option<Weak<ModelQp>> {
    let _in = inside();
    with_qps(|qs| qs.iter().find(|(n, _, _)| *n == qpn).map(|(_, w, _)| w.clone()))
}

/// The program armed the CQ of handle `handle` on device descriptor `fd` (after libmlx5's
/// `ibv_req_notify_cq`): completions already in it beyond the arm's consumer index raise the
/// event now, as on a ConnectX ([`ModelCq::arm_given`]). Another descriptor or handle: nothing.
pub fn cq_armed(fd: c_int, handle: u32) {
    let t = CTXS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(e) = t
        .iter()
        .find(|(f, _)| *f == fd)
        .and_then(|(_, c)| c.as_ref())
        .and_then(|c| c.cqs.get(&handle))
    {
        e.cq.arm_given();
    }
}

/// Lets model0 execute what libmlx5 rang on this process's QPs (the wire, then the WQEs, for
/// each QP whose send doorbell record moved; a sender stalled on RNR goes on): what a program
/// polling a model0 CQ through libibverbs needs, since no thread watches the doorbells. The
/// verbs layer's CQ polling calls it on model0; the measured backends use their own hooks.
pub fn progress() {
    progress_all(false);
}

/// [`progress`], then whether a QP of this process has WQEs rung and not yet executed (a send
/// stalled on RNR, or on a responder not yet ready): the doorbell trap's (`super::trap`).
pub fn progress_then_waiting() -> bool {
    progress_all(true)
}

/// The progress of every QP of this process; with `check`, whether one still has WQEs waiting.
#[inline]
fn progress_all(check: bool) -> bool {
    let _in = inside();
    clock::renew_if_due();
    with_qps(|qs| {
        let mut waiting = false;
        for (_, w, seen) in qs {
            if let Some(q) = w.upgrade() {
                deliver(&q, seen);
                waiting |= check && q.sends_waiting();
            }
        }
        waiting
    })
}

/// What `q` rang since `seen`, delivered; `seen` moved to it.
fn deliver(q: &ModelQp, seen: &AtomicU32) {
    let mut s = seen.load(Ordering::Acquire);
    q.deliver_if_rung(&mut s);
    seen.store(s, Ordering::Release);
}

/// [`progress`] for one QP (number `qpn`, made through this device in this process): what a post
/// on it rang, executed now; a QP model0 does not know is left alone.
pub fn progress_qp(qpn: u32) {
    let _in = inside();
    with_qps(|qs| {
        if let Some(q) = qs
            .iter()
            .find(|e| e.0 == qpn)
            .and_then(|e| Some((e.1.upgrade()?, &e.2)))
        {
            deliver(&q.0, q.1);
        }
    });
}

/// Closes every model0 device descriptor of this process (their objects' files are removed):
/// the preload's exit and signal path. With `wait` false (a signal handler) nothing waits for a
/// lock: when the interrupted thread is in model0 (it may hold any of model0's locks, [`inside`])
/// or one of the device's tables is locked, it gives up and the sweep of the next start removes
/// what is left, as after SIGKILL. Otherwise the interrupted thread holds none of model0's
/// locks, so what the objects' removal takes is at most held briefly by another running thread.
/// Returns whether every descriptor was closed.
pub fn close_all(wait: bool) -> bool {
    if !wait && is_inside() {
        return false;
    }
    let _in = inside();
    let fds: Vec<c_int> = match guard(&CTXS, wait) {
        Some(c) => c.iter().map(|(f, _)| *f).collect(),
        None => return false,
    };
    for fd in fds {
        if !close_device_with(fd, wait) {
            return false;
        }
        interpose::remove_fd(fd);
    }
    true
}

/// Whether any model0 context is open in this process.
pub fn any_open() -> bool {
    !CTXS.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
}

fn errno_of<T>(e: impl std::fmt::Display, errno: c_int) -> Result<T, c_int> {
    // what model0 does not do (a command, a flag, a feature) or cannot (no room in its
    // directory, memory not mapped) is said at once: libibverbs passes on only the errno; other
    // refusals (bad handles, bad transitions) are the caller's to report
    let said = [
        libc::EOPNOTSUPP,
        libc::ENOMEM,
        libc::ENOSPC,
        libc::EFAULT,
        libc::EMFILE,
        libc::ENFILE,
    ];
    if said.contains(&errno) || std::env::var_os("RDMAPROBE_UVERBS_DEBUG").is_some() {
        // never eprintln! here: it panics when stderr is a closed pipe, and this runs inside
        // an extern "C" write(), where a panic aborts
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "rdmaprobe: model0 uverbs: {e}");
    }
    Err(errno)
}

pub(super) fn open_device(flags: c_int) -> c_int {
    let _in = inside();
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
    let _in = inside();
    close_device_with(fd, true);
}

/// Closes descriptor `fd`, its context's objects destroyed; with `wait` false, only when the
/// device's tables are free now (returns false when one is not: nothing is done then).
fn close_device_with(fd: c_int, wait: bool) -> bool {
    let (Some(mut c), Some(mut qps), Some(mut pages)) = (guard(&CTXS, wait), guard(&QPS, wait), guard(&MR_PAGES, wait))
    else {
        return false;
    };
    let i = c.iter().position(|(f, _)| *f == fd);
    let ctx = i.and_then(|i| c.remove(i).1);
    drop(c);
    if let Some(mut ctx) = ctx {
        // What the program left: QPs before CQs before doorbell pages, as a kernel tears down.
        let hs: Vec<u32> = ctx.qps.keys().copied().collect();
        for h in hs {
            destroy_qp_ent(&mut ctx, h, &mut qps);
        }
        drop(qps);
        srq::destroy_all(&mut ctx);
        let cqs: Vec<u32> = ctx.cqs.keys().copied().collect();
        for h in cqs {
            if let Some(e) = ctx.cqs.remove(&h) {
                drop(e.cq);
                release_db(&mut ctx, e.db);
            }
        }
        for (_, e) in ctx.mrs.drain() {
            pins::release(&mut pages, e);
        }
        drop(pages);
        ctx.dbs.clear();
    }
    true
}

pub(super) fn mmap_device(fd: c_int, len: usize, prot: c_int, off: libc::off_t) -> Result<*mut c_void, c_int> {
    let _in = inside();
    let pgoff = off as u64 / PAGE as u64;
    let cmd = (pgoff >> 8) & 0xff;
    let index = (pgoff & 0xff) | ((pgoff >> 16) << 8);
    if let Some(r) = clock::map(cmd as u32, index, len, prot) {
        return r.or_else(|e| {
            errno_of(
                format!("fd {fd}: mmap of clock page command {cmd} index {index}, {len} bytes, prot {prot:#x}"),
                e,
            )
        });
    }
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
    // with the doorbell trap (`super::trap`) the page has no access: each store to it faults
    let trap = super::trap::wanted();
    let access = if trap {
        libc::PROT_NONE
    } else {
        libc::PROT_READ | libc::PROT_WRITE
    };
    // SAFETY: fresh anonymous shared memory, forwarded to the kernel.
    let p = unsafe {
        libc::syscall(
            libc::SYS_mmap,
            std::ptr::null_mut::<c_void>(),
            len,
            access,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    } as *mut c_void;
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::ENOMEM));
    }
    if trap {
        if let Err(why) = super::trap::trap_page(p as usize) {
            // SAFETY: the page just mapped, not yet given to anyone.
            unsafe { libc::syscall(libc::SYS_munmap, p, len) };
            return errno_of(format!("fd {fd}: --engine trap: {why}"), libc::ENOMEM);
        }
    }
    Ok(p)
}

/// Answers the command `b` written on descriptor `fd`: GET_CONTEXT opens the descriptor's
/// context, every other command runs in it through its handler ([`dispatch`]).
pub(super) fn command(fd: c_int, b: &[u8]) -> Result<(), c_int> {
    let _in = inside();
    let mut c = frame(b)?;
    // an extended command's response range is known now (a legacy one's when it is split)
    if c.ex {
        c.resp.check()?;
    }
    let mut ctxs = CTXS.lock().unwrap_or_else(|p| p.into_inner());
    let Some(slot) = ctxs.iter_mut().find(|(f, _)| *f == fd) else {
        return errno_of(format!("fd {fd} is not an open model0 device"), libc::EBADF);
    };
    if c.op == k::IB_USER_VERBS_CMD_GET_CONTEXT && !c.ex {
        return open_context(&mut slot.1, &mut c);
    }
    let Some(ctx) = slot.1.as_mut() else {
        return errno_of(format!("command {} before GET_CONTEXT", c.op), libc::EINVAL);
    };
    match dispatch::handler(c.op, c.ex) {
        Some(handler) => handler(ctx, &mut c),
        None => match dispatch::unsupported(c.op, c.ex) {
            Some(what) => errno_of(
                format!("model0 does not do {what} (uverbs command {}): not supported", c.op),
                libc::EOPNOTSUPP,
            ),
            None => unknown_command(&c),
        },
    }
}

fn unknown_command(c: &Cmd<'_>) -> Result<(), c_int> {
    errno_of(
        format!(
            "{} command {} is not one model0's uverbs device knows (a newer rdma-core?)",
            if c.ex { "extended" } else { "legacy" },
            c.op
        ),
        libc::EOPNOTSUPP,
    )
}

/// GET_CONTEXT on a descriptor whose context is `slot` (once only): the context, on the run's
/// model (or one opened now).
fn open_context(slot: &mut Option<Ctx>, c: &mut Cmd<'_>) -> Result<(), c_int> {
    if slot.is_some() {
        return errno_of("GET_CONTEXT twice on one descriptor", libc::EINVAL);
    }
    legacy::<k::ib_uverbs_get_context, k::ib_uverbs_get_context_resp>(c, true)?;
    let model = match MODEL.lock().unwrap_or_else(|p| p.into_inner()).clone() {
        Some(m) => m,
        // a program that is not rdmaprobe (the preload): the defaults and the environment's delay
        None => Model::open(super::preload::env_config().map_err(|e| {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "rdmaprobe: model0 uverbs: {e}");
            libc::EINVAL
        })?)
        .or_else(|e| {
            let n = e
                .errno()
                .filter(|n| [libc::EMFILE, libc::ENFILE, libc::ENOMEM, libc::ENOSPC].contains(n));
            errno_of(e, n.unwrap_or(libc::ENODEV))
        })?,
    };
    let low_latency = get_context(c)?;
    *slot = Some(Ctx {
        bfreg_users: [0; TOT_BFREGS as usize],
        low_latency,
        model,
        next: 1,
        pds: HashMap::new(),
        mrs: HashMap::new(),
        cqs: HashMap::new(),
        qps: HashMap::new(),
        srqs: HashMap::new(),
        dbs: HashMap::new(),
    });
    Ok(())
}

fn handle(ctx: &mut Ctx) -> u32 {
    ctx.next += 1;
    ctx.next
}
