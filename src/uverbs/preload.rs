//! model0 in a program that is not rdmaprobe: the library side of the preload (the `preload/`
//! member crate builds it into `librdmaprobe_model0.so`, whose `ibv_open_device` calls
//! [`wrap_context`] and whose constructor and destructor call [`start`] and [`exit`]).
//!
//! In rdmaprobe's own process the backends call model0 after a post and before a poll. In a
//! foreign program nothing does, so the provider's entry points in every model0 context are
//! wrapped: the real libmlx5 function first, then model0's progress for what it rang
//! (`post_send`, `wr_complete`: the QP's send doorbell record; `post_recv`: a sender stalled on
//! RNR goes on); before a poll (`poll_cq`, an extended CQ's `start_poll`) the progress of every
//! QP of the process; after an arm (`req_notify_cq`) the completions already in the CQ raise the
//! event the arm asks for; before a read of the NIC clock (`query_rt_values`) model0's timer page
//! is brought up to now. Execution is deterministic and in the program's own threads; a thread
//! (`super::trap`'s sweeper) starts only when a send first waits for a responder that does not
//! answer, to retry it where the program does not poll. A program that rings doorbells itself
//! (UCX's `rc_mlx5`) needs the doorbell trap (`super::trap`, `--engine trap`;
//! docs/model0-exec.md).

use super::device;
use crate::sys;
use std::cell::Cell;
use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// Which provider function an entry of [`ORIG`] saves.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Slot {
    PostSend,
    PostRecv,
    PostSrqRecv,
    PollCq,
    ReqNotifyCq,
    CreateQpEx,
    CreateCqEx,
    WrComplete,
    StartPoll,
    QueryRtValues,
}

/// The provider's own functions, by slot and by the object (context, QP, CQ) they were read
/// from: (slot, object address, function address).
static ORIG: Mutex<Vec<(Slot, usize, usize)>> = Mutex::new(Vec::new());
/// Whether the signal handlers that remove this process's model0 objects are installed.
static SIGNALS: AtomicBool = AtomicBool::new(false);

type PostSendFn = unsafe extern "C" fn(*mut sys::ibv_qp, *mut sys::ibv_send_wr, *mut *mut sys::ibv_send_wr) -> c_int;
type PostRecvFn = unsafe extern "C" fn(*mut sys::ibv_qp, *mut sys::ibv_recv_wr, *mut *mut sys::ibv_recv_wr) -> c_int;
type PostSrqRecvFn =
    unsafe extern "C" fn(*mut sys::ibv_srq, *mut sys::ibv_recv_wr, *mut *mut sys::ibv_recv_wr) -> c_int;
type PollCqFn = unsafe extern "C" fn(*mut sys::ibv_cq, c_int, *mut sys::ibv_wc) -> c_int;
type ReqNotifyCqFn = unsafe extern "C" fn(*mut sys::ibv_cq, c_int) -> c_int;
type CreateQpExFn = unsafe extern "C" fn(*mut sys::ibv_context, *mut sys::ibv_qp_init_attr_ex) -> *mut sys::ibv_qp;
type CreateCqExFn = unsafe extern "C" fn(*mut sys::ibv_context, *mut sys::ibv_cq_init_attr_ex) -> *mut sys::ibv_cq_ex;
type WrCompleteFn = unsafe extern "C" fn(*mut sys::ibv_qp_ex) -> c_int;
type StartPollFn = unsafe extern "C" fn(*mut sys::ibv_cq_ex, *mut sys::ibv_poll_cq_attr) -> c_int;
type QueryRtValuesFn = unsafe extern "C" fn(*mut sys::ibv_context, *mut sys::ibv_values_ex) -> c_int;

/// Moves on each change of [`ORIG`]: a thread's [`LAST`] found at another value is looked up
/// again.
static ORIG_GEN: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's last lookup of each slot: (object, function, [`ORIG_GEN`] then; 0: none),
    /// so a program's hot loop (perftest's `ibv_poll_cq`) takes no lock per call.
    static LAST: Cell<[(usize, usize, u64); SLOTS]> = const { Cell::new([(0, 0, 0); SLOTS]) };
}

/// The number of [`Slot`]s (the last one's index + 1: a new last slot moves it).
const SLOTS: usize = Slot::QueryRtValues as usize + 1;

fn save(slot: Slot, obj: usize, f: usize) {
    let mut t = ORIG.lock().unwrap_or_else(|p| p.into_inner());
    match t.iter_mut().find(|e| e.0 == slot && e.1 == obj) {
        Some(e) => e.2 = f,
        None => t.push((slot, obj, f)),
    }
    ORIG_GEN.fetch_add(1, Ordering::Release);
}

fn orig(slot: Slot, obj: usize) -> Option<usize> {
    let gen = ORIG_GEN.load(Ordering::Acquire);
    let i = slot as usize;
    let last = LAST.try_with(|l| l.get()[i]).ok();
    if let Some((o, f, g)) = last {
        if o == obj && g == gen {
            return Some(f);
        }
    }
    let f = ORIG
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|e| e.0 == slot && e.1 == obj)
        .map(|e| e.2)?;
    let _ = LAST.try_with(|l| {
        let mut v = l.get();
        v[i] = (obj, f, gen);
        l.set(v);
    });
    Some(f)
}

/// The preload's constructor: installs the fake sysfs (`SYSFS_PATH`) before `main`, so the
/// program's first device list has model0. Silent: a program that never asks for a device must
/// behave as without the preload (`RDMAPROBE_UVERBS_DEBUG=1` says why model0 is absent).
pub fn start() {
    // a send retried against a responder that does not answer is driven by the sweeper thread
    // in a program that does not poll (blocked for an event, or polling the CQ's memory)
    crate::model::set_wait_hook(super::trap::send_waits);
    if let Err(why) = super::trap::want_from_env() {
        // a user's own setting of the variable (`model0 exec` checks its --engine): said, and
        // the hooks alone run
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "rdmaprobe: model0 preload: {why}; the hooks alone run"
        );
    }
    if let Err(why) = super::status() {
        if std::env::var_os("RDMAPROBE_UVERBS_DEBUG").is_some() {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "rdmaprobe: model0 preload: no model0 device: {why}");
        }
    }
}

/// The preload's destructor (a normal exit, `exit()` from a library): the process's model0
/// objects are removed now, not left for the next start's sweep.
pub fn exit() {
    if super::trap::on() && std::env::var_os("RDMAPROBE_UVERBS_DEBUG").is_some() {
        use std::io::Write;
        let (skipped, stepped, code) = super::trap::counts();
        let first = if stepped > 0 {
            format!(" (the first at code {code:02x?})")
        } else {
            String::new()
        };
        let _ = writeln!(
            std::io::stderr(),
            "rdmaprobe: model0 preload: doorbell trap: {skipped} stores skipped, {stepped} single-stepped{first}"
        );
    }
    super::trap::quiesce();
    let _ = device::close_all(true);
    crate::model::events::remove_fifos(true);
}

extern "C" fn on_signal(sig: c_int) {
    // Nothing here waits for a lock: when the interrupted thread is in model0 (it may hold one
    // of its locks) or a table of the device is locked, the handler gives up, and the next
    // start's sweep removes the files, as after SIGKILL (`device::close_all`). The sweeper
    // thread is stopped first: it may be in a progress pass, holding a table or a QP.
    super::trap::quiesce();
    let _ = device::close_all(false);
    crate::model::events::remove_fifos(false);
    // SAFETY: back to the default disposition, then the signal again: the process ends as it
    // would have without the preload.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// SIGINT, SIGTERM and SIGHUP remove this process's model0 objects before the process ends, for
/// the signals whose disposition is still the default (a program's own handler is left alone).
fn install_signals() {
    if SIGNALS.swap(true, Ordering::AcqRel) {
        return;
    }
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: `sigaction` is plain data; all zeroes is a valid value.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: queries the disposition only (no new action).
        if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } != 0 || old.sa_sigaction != libc::SIG_DFL {
            continue;
        }
        // SAFETY: the handler is an extern "C" fn(c_int), as `signal` expects.
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
}

/// Whether `ctx` is a context of model0's uverbs device.
///
/// # Safety
/// `ctx` is a live context from `ibv_open_device`.
unsafe fn is_model0(ctx: *mut sys::ibv_context) -> bool {
    // SAFETY: a live context's device is a live device from the list.
    let dev = unsafe { (*ctx).device };
    if dev.is_null() {
        return false;
    }
    // SAFETY: `dev_name` is a NUL-terminated array inside the device.
    let name = unsafe { CStr::from_ptr((*dev).dev_name.as_ptr()) };
    name.to_bytes() == device::UVERBS_NAME.as_bytes()
}

/// The extended context around `ctx` if it has one whose size covers the operations wrapped
/// here (what `verbs_get_ctx_op` checks).
///
/// # Safety
/// `ctx` is a live context.
unsafe fn verbs_ctx(ctx: *mut sys::ibv_context) -> Option<*mut sys::verbs_context> {
    // SAFETY: a live context; `abi_compat` is `__VERBS_ABI_IS_EXTENDED` ((void *)-1) in one that
    // is the last member of a `verbs_context`.
    if unsafe { (*ctx).abi_compat } as usize != usize::MAX {
        return None;
    }
    let off = std::mem::offset_of!(sys::verbs_context, context);
    // SAFETY: the context is the last member of the extended context (container_of).
    let v = unsafe { (ctx as *mut u8).sub(off) } as *mut sys::verbs_context;
    let need = std::mem::size_of::<sys::verbs_context>() - std::mem::offset_of!(sys::verbs_context, create_cq_ex);
    // SAFETY: `sz` is just before the context in every extended context.
    (unsafe { (*v).sz } >= need).then_some(v)
}

/// Wraps the provider's entry points of `ctx` when it is a model0 context (any other is left
/// untouched), and installs the signal handlers that remove model0's objects.
///
/// # Safety
/// `ctx` is null or a live context that `ibv_open_device` has just returned, not yet used by
/// another thread.
pub unsafe fn wrap_context(ctx: *mut sys::ibv_context) {
    // SAFETY: the caller's context is live.
    if ctx.is_null() || !unsafe { is_model0(ctx) } {
        return;
    }
    install_signals();
    let key = ctx as usize;
    // SAFETY: a live context no other thread uses yet: its operations are ours to replace.
    let ops = unsafe { &mut (*ctx).ops };
    if let Some(f) = ops.post_send {
        save(Slot::PostSend, key, f as usize);
        ops.post_send = Some(post_send);
    }
    if let Some(f) = ops.post_recv {
        save(Slot::PostRecv, key, f as usize);
        ops.post_recv = Some(post_recv);
    }
    if let Some(f) = ops.post_srq_recv {
        save(Slot::PostSrqRecv, key, f as usize);
        ops.post_srq_recv = Some(post_srq_recv);
    }
    if let Some(f) = ops.poll_cq {
        save(Slot::PollCq, key, f as usize);
        ops.poll_cq = Some(poll_cq);
    }
    if let Some(f) = ops.req_notify_cq {
        save(Slot::ReqNotifyCq, key, f as usize);
        ops.req_notify_cq = Some(req_notify_cq);
    }
    // SAFETY: as above.
    if let Some(v) = unsafe { verbs_ctx(ctx) } {
        // SAFETY: the extended context around a live context, as large as checked.
        let v = unsafe { &mut *v };
        if let Some(f) = v.create_qp_ex {
            save(Slot::CreateQpEx, key, f as usize);
            v.create_qp_ex = Some(create_qp_ex);
        }
        if let Some(f) = v.create_cq_ex {
            save(Slot::CreateCqEx, key, f as usize);
            v.create_cq_ex = Some(create_cq_ex);
        }
        // a newer member than create_cq_ex (the struct grows at its front): further from its
        // end, so its own size check
        let need =
            std::mem::size_of::<sys::verbs_context>() - std::mem::offset_of!(sys::verbs_context, query_rt_values);
        if v.sz >= need {
            if let Some(f) = v.query_rt_values {
                save(Slot::QueryRtValues, key, f as usize);
                v.query_rt_values = Some(query_rt_values);
            }
        }
    }
}

/// `ibv_query_rt_values_ex`: model0's timer page brought up to now, then libmlx5's own read of
/// it (the page is memory, not a register: `device::refresh_clock`).
unsafe extern "C" fn query_rt_values(ctx: *mut sys::ibv_context, values: *mut sys::ibv_values_ex) -> c_int {
    // SAFETY: the slot's type.
    let Some(f) = (unsafe { saved::<QueryRtValuesFn>(Slot::QueryRtValues, ctx as *const c_void) }) else {
        return libc::EOPNOTSUPP;
    };
    device::refresh_clock();
    // SAFETY: the provider's own query_rt_values with the caller's arguments.
    unsafe { f(ctx, values) }
}

/// The saved function of `slot` for `obj`, as type `F`.
///
/// # Safety
/// `F` is the function type of `slot`.
unsafe fn saved<F: Copy>(slot: Slot, obj: *const c_void) -> Option<F> {
    let f = orig(slot, obj as usize)?;
    debug_assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<usize>());
    // SAFETY: saved from a function pointer of type F (the caller's promise for the slot).
    Some(unsafe { std::mem::transmute_copy::<usize, F>(&f) })
}

unsafe extern "C" fn post_send(
    qp: *mut sys::ibv_qp,
    wr: *mut sys::ibv_send_wr,
    bad: *mut *mut sys::ibv_send_wr,
) -> c_int {
    // SAFETY: libibverbs calls this with a live QP of a context wrapped here.
    let (ctx, qpn) = unsafe { ((*qp).context, (*qp).qp_num) };
    // SAFETY: the slot's type.
    let Some(f) = (unsafe { saved::<PostSendFn>(Slot::PostSend, ctx as *const c_void) }) else {
        return libc::ENOSYS;
    };
    // SAFETY: the provider's own post_send with the caller's arguments.
    let rc = unsafe { f(qp, wr, bad) };
    // what was rung before a failed WQE executes too, as on hardware
    device::progress_qp(qpn);
    rc
}

unsafe extern "C" fn post_recv(
    qp: *mut sys::ibv_qp,
    wr: *mut sys::ibv_recv_wr,
    bad: *mut *mut sys::ibv_recv_wr,
) -> c_int {
    // SAFETY: libibverbs calls this with a live QP of a context wrapped here.
    let (ctx, qpn) = unsafe { ((*qp).context, (*qp).qp_num) };
    // SAFETY: the slot's type.
    let Some(f) = (unsafe { saved::<PostRecvFn>(Slot::PostRecv, ctx as *const c_void) }) else {
        return libc::ENOSYS;
    };
    // SAFETY: the provider's own post_recv with the caller's arguments.
    let rc = unsafe { f(qp, wr, bad) };
    if let Some(q) = device::model_qp(qpn).and_then(|w| w.upgrade()) {
        let _in = device::inside();
        q.receives_posted();
    }
    rc
}

unsafe extern "C" fn post_srq_recv(
    srq: *mut sys::ibv_srq,
    wr: *mut sys::ibv_recv_wr,
    bad: *mut *mut sys::ibv_recv_wr,
) -> c_int {
    // SAFETY: libibverbs calls this with a live SRQ of a context wrapped here.
    let ctx = unsafe { (*srq).context };
    // SAFETY: the slot's type.
    let Some(f) = (unsafe { saved::<PostSrqRecvFn>(Slot::PostSrqRecv, ctx as *const c_void) }) else {
        return libc::ENOSYS;
    };
    // SAFETY: the provider's own post_srq_recv with the caller's arguments.
    let rc = unsafe { f(srq, wr, bad) };
    let _in = device::inside();
    device::srq_receives_posted(srq as u64);
    rc
}

unsafe extern "C" fn poll_cq(cq: *mut sys::ibv_cq, n: c_int, wc: *mut sys::ibv_wc) -> c_int {
    // SAFETY: libibverbs calls this with a live CQ of a context wrapped here.
    let ctx = unsafe { (*cq).context };
    // SAFETY: the slot's type.
    let Some(f) = (unsafe { saved::<PollCqFn>(Slot::PollCq, ctx as *const c_void) }) else {
        return -libc::ENOSYS;
    };
    device::progress();
    // The program's arm (ibv_req_notify_cq, before this poll) before the poll's loads: the
    // other half of model0's fence between a CQE and the arm it reads (src/model/cqe.rs), so a
    // CQE is either polled here or raises the event. On x86 the locked instructions of
    // `progress` are that barrier already.
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    // SAFETY: the provider's own poll_cq with the caller's arguments.
    unsafe { f(cq, n, wc) }
}

unsafe extern "C" fn req_notify_cq(cq: *mut sys::ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: libibverbs calls this with a live CQ of a context wrapped here.
    let (ctx, handle) = unsafe { ((*cq).context, (*cq).handle) };
    // SAFETY: the slot's type.
    let Some(f) = (unsafe { saved::<ReqNotifyCqFn>(Slot::ReqNotifyCq, ctx as *const c_void) }) else {
        return libc::ENOSYS;
    };
    // SAFETY: the provider's own arm with the caller's arguments.
    let rc = unsafe { f(cq, solicited_only) };
    if rc == 0 && solicited_only == 0 {
        // SAFETY: the live CQ's context.
        device::cq_armed(unsafe { (*ctx).cmd_fd }, handle);
    }
    rc
}

unsafe extern "C" fn create_qp_ex(ctx: *mut sys::ibv_context, attr: *mut sys::ibv_qp_init_attr_ex) -> *mut sys::ibv_qp {
    // SAFETY: the slot's type.
    let Some(f) = (unsafe { saved::<CreateQpExFn>(Slot::CreateQpEx, ctx as *const c_void) }) else {
        // SAFETY: glibc's thread-local errno.
        unsafe { *libc::__errno_location() = libc::EOPNOTSUPP };
        return std::ptr::null_mut();
    };
    // SAFETY: the provider's own create_qp_ex with the caller's arguments.
    let qp = unsafe { f(ctx, attr) };
    // SAFETY: the caller's attributes are readable.
    let ops = !attr.is_null() && unsafe { (*attr).comp_mask } & sys::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0;
    if !qp.is_null() && ops {
        // SAFETY: a QP just created with send-ops flags: it has its extended QP.
        let qpx = unsafe { sys::ibv_qp_to_qp_ex(qp) };
        if !qpx.is_null() {
            // SAFETY: the new extended QP, not yet used by the program.
            if let Some(c) = unsafe { (*qpx).wr_complete } {
                save(Slot::WrComplete, qpx as usize, c as usize);
                // SAFETY: as above.
                unsafe { (*qpx).wr_complete = Some(wr_complete) };
            }
        }
    }
    qp
}

unsafe extern "C" fn wr_complete(qpx: *mut sys::ibv_qp_ex) -> c_int {
    // SAFETY: the slot's type.
    let Some(f) = (unsafe { saved::<WrCompleteFn>(Slot::WrComplete, qpx as *const c_void) }) else {
        return libc::ENOSYS;
    };
    // SAFETY: a live extended QP; its base QP's number.
    let qpn = unsafe { (*qpx).qp_base.qp_num };
    // SAFETY: the provider's own wr_complete.
    let rc = unsafe { f(qpx) };
    device::progress_qp(qpn);
    rc
}

unsafe extern "C" fn create_cq_ex(
    ctx: *mut sys::ibv_context,
    attr: *mut sys::ibv_cq_init_attr_ex,
) -> *mut sys::ibv_cq_ex {
    // SAFETY: the slot's type.
    let Some(f) = (unsafe { saved::<CreateCqExFn>(Slot::CreateCqEx, ctx as *const c_void) }) else {
        // SAFETY: glibc's thread-local errno.
        unsafe { *libc::__errno_location() = libc::EOPNOTSUPP };
        return std::ptr::null_mut();
    };
    // SAFETY: the provider's own create_cq_ex with the caller's arguments.
    let cq = unsafe { f(ctx, attr) };
    if !cq.is_null() {
        // SAFETY: the new extended CQ, not yet used by the program.
        if let Some(p) = unsafe { (*cq).start_poll } {
            save(Slot::StartPoll, cq as usize, p as usize);
            // SAFETY: as above.
            unsafe { (*cq).start_poll = Some(start_poll) };
        }
    }
    cq
}

unsafe extern "C" fn start_poll(cq: *mut sys::ibv_cq_ex, attr: *mut sys::ibv_poll_cq_attr) -> c_int {
    // SAFETY: the slot's type.
    let Some(f) = (unsafe { saved::<StartPollFn>(Slot::StartPoll, cq as *const c_void) }) else {
        return libc::ENOSYS;
    };
    device::progress();
    // SAFETY: the provider's own start_poll with the caller's arguments.
    unsafe { f(cq, attr) }
}

/// The variable `rdmaprobe model0 exec --model-delay-ns` passes to the program: model0's wire
/// delay, ns.
pub const DELAY_VAR: &str = "RDMAPROBE_MODEL_DELAY_NS";

/// The model configuration of a process that has no run of rdmaprobe's to take it from: the
/// defaults, with the wire delay of [`DELAY_VAR`] when set. A value that is not a number of ns
/// up to [`MAX_WIRE_DELAY_NS`](crate::model::MAX_WIRE_DELAY_NS) is an error naming it.
pub fn env_config() -> Result<crate::model::ModelConfig, String> {
    config_from(std::env::var_os(DELAY_VAR).as_deref())
}

fn config_from(delay: Option<&std::ffi::OsStr>) -> Result<crate::model::ModelConfig, String> {
    let mut cfg = crate::model::ModelConfig::default();
    if let Some(v) = delay {
        let s = v.to_string_lossy();
        let ns: u64 = s
            .trim()
            .parse()
            .map_err(|_| format!("{DELAY_VAR}={s}: not a number of nanoseconds"))?;
        if ns > crate::model::MAX_WIRE_DELAY_NS {
            return Err(format!(
                "{DELAY_VAR}={ns}: more than model0's longest wire delay, {} ns",
                crate::model::MAX_WIRE_DELAY_NS
            ));
        }
        cfg.wire_delay_ns = Some(ns);
    }
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_delay_comes_from_the_variable_and_bad_values_are_named() {
        let delay = |v: Option<&str>| config_from(v.map(std::ffi::OsStr::new)).map(|c| c.wire_delay_ns);
        assert_eq!(delay(None), Ok(None));
        assert_eq!(delay(Some("2500")), Ok(Some(2500)));
        let e = delay(Some("2.5us")).unwrap_err();
        assert!(e.contains(DELAY_VAR) && e.contains("2.5us"), "{e}");
        let e = delay(Some("5000000000")).unwrap_err();
        assert!(e.contains("longest wire delay"), "{e}");
    }
}
