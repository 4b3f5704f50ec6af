//! `librdmaprobe_model0.so`: model0 for a program that is not rdmaprobe. Loaded with
//! `LD_PRELOAD` (or by `rdmaprobe model0 exec`), it carries the library's interposer, uverbs
//! device and model (no copy of their code): a constructor installs the fake sysfs before `main`,
//! `ibv_open_device` wraps the provider's entry points of model0 contexts so model0 executes
//! after a post and before a poll (`rdmaprobe::uverbs::preload`), and a destructor removes the
//! process's model0 objects at exit. With `--engine trap` a store to a model0 register page
//! executes what was rung (`rdmaprobe::uverbs::trap`; `sigaction`, `signal` and `munmap` here
//! serve it). Every other device, descriptor and call is untouched.

use rdmaprobe::sys;
use rdmaprobe::uverbs::trap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Runs before the program's `main` (and before any library asks for devices).
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

/// Runs at exit (normal return from `main`, `exit()` from anywhere), before libibverbs' own.
#[used]
#[link_section = ".fini_array"]
static FINI: extern "C" fn() = fini;

extern "C" fn init() {
    rdmaprobe::uverbs::preload::start();
}

extern "C" fn fini() {
    rdmaprobe::uverbs::preload::exit();
}

type OpenFn = unsafe extern "C" fn(*mut sys::ibv_device) -> *mut sys::ibv_context;

/// libibverbs' own `ibv_open_device` (0: not looked up yet).
static REAL_OPEN: AtomicUsize = AtomicUsize::new(0);

/// `ibv_open_device`, in front of libibverbs': the context it opens, with model0's progress
/// wrapped around the provider's entry points when the device is model0.
///
/// # Safety
/// As libibverbs' `ibv_open_device`: `dev` comes from `ibv_get_device_list`.
#[no_mangle]
pub unsafe extern "C" fn ibv_open_device(dev: *mut sys::ibv_device) -> *mut sys::ibv_context {
    let mut f = REAL_OPEN.load(Ordering::Acquire);
    if f == 0 {
        // SAFETY: a constant symbol name; RTLD_NEXT finds the next definition, libibverbs'.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, c"ibv_open_device".as_ptr()) } as usize;
        if f == 0 {
            no_libc();
            return std::ptr::null_mut();
        }
        REAL_OPEN.store(f, Ordering::Release);
    }
    // SAFETY: the address dlsym gave for libibverbs' ibv_open_device, of this type.
    let real: OpenFn = unsafe { std::mem::transmute::<usize, OpenFn>(f) };
    // SAFETY: forwarded as given.
    let ctx = unsafe { real(dev) };
    // SAFETY: null or the context just opened, which no other thread has yet.
    unsafe { rdmaprobe::uverbs::preload::wrap_context(ctx) };
    ctx
}

/// `sigaction`, in front of libc's: while model0's doorbell trap is on (`--engine trap`), the
/// program's SIGSEGV and SIGTRAP dispositions are kept by the trap, which passes on every
/// fault that is not its own (`rdmaprobe::uverbs::trap`); everything else is libc's.
///
/// # Safety
/// As libc's `sigaction`.
#[no_mangle]
pub unsafe extern "C" fn sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    // SAFETY: the caller's pointers, as libc's sigaction takes them.
    if let Some(r) = unsafe { trap::sigaction_hook(sig, act, old) } {
        return r;
    }
    match trap::real_sigaction() {
        // SAFETY: forwarded as given.
        Some(f) => unsafe { f(sig, act, old) },
        None => no_libc(),
    }
}

/// `signal`, in front of libc's (glibc's own `signal` does not call `sigaction` through the
/// symbol table): as [`sigaction`].
///
/// # Safety
/// As libc's `signal`.
#[no_mangle]
pub unsafe extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    if let Some(old) = trap::signal_hook(sig, handler) {
        return old;
    }
    match trap::real_signal() {
        // SAFETY: forwarded as given.
        Some(f) => unsafe { f(sig, handler) },
        None => {
            no_libc();
            libc::SIG_ERR
        }
    }
}

/// `munmap`, in front of libc's: a trapped register page unmapped is forgotten (a later fault at
/// its address is not a doorbell).
///
/// # Safety
/// As libc's `munmap`.
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: usize) -> c_int {
    // forgotten before (the address may be mapped again at once by another thread), trapped
    // again if the unmapping failed (the page is still there, with no access)
    let pages = trap::forget(addr as usize, len);
    // SAFETY: forwarded as given.
    let r = unsafe { libc::syscall(libc::SYS_munmap, addr, len) } as c_int;
    if r != 0 {
        for p in pages.into_iter().flatten() {
            let _ = trap::trap_page(p);
        }
    }
    r
}

/// The next library's function is not there: ENOSYS, -1.
fn no_libc() -> c_int {
    // SAFETY: glibc's thread-local errno.
    unsafe { *libc::__errno_location() = libc::ENOSYS };
    -1
}
