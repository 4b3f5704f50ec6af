//! The doorbell trap (`rdmaprobe model0 exec --engine trap`): execution for programs that write
//! WQEs and ring doorbells themselves (UCX's `rc_mlx5`, DPDK-style code), where no libibverbs
//! call follows a post.
//!
//! model0's register (UAR) pages are mapped with no access. A store to one (a doorbell, a
//! BlueFlame copy) faults; the SIGSEGV handler runs model0's progress for the process's QPs (the
//! doorbell record was written before the store, as mlx5 requires, so what was rung is known) and
//! skips the store (model0 reads the doorbell record and the send queue, never the register
//! page). A store the decoder (`super::insn`) does not know is single-stepped instead: the page
//! made writable, the trap flag set, and at the SIGTRAP after it the page closed again and the
//! progress run. Execution is in the program's own thread, at the doorbell, as on a NIC's side of
//! the bus: no thread competes with the program for a CPU. What waits on the far side (a send
//! stalled on RNR until receives come, posted without a doorbell) is taken by a sweeper thread,
//! every [`SWEEP_MS`] ms while something waits, asleep otherwise.
//!
//! The program's own SIGSEGV and SIGTRAP handlers stay its own: the preload's `sigaction` and
//! `signal` keep them here (not installed) and every fault that is not a register page's goes
//! to them, or ends the process as it would have without the preload.

use super::{device, insn};
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// The variable that asks the preload for an engine ("trap"; unset: the hooks alone).
pub const ENGINE_VAR: &str = "RDMAPROBE_ENGINE";
/// How often the sweeper thread runs model0's progress while a send waits on the far side, in ms.
pub const SWEEP_MS: u64 = 1;
/// How long it sleeps when no send waits, in ms (a doorbell that leaves one waiting wakes it).
pub const IDLE_MS: u64 = 50;

const PAGE: usize = 4096;
/// Register pages one process can have trapped at once.
const SLOTS: usize = 256;
/// x86's trap flag in EFLAGS.
const TF: i64 = 0x100;

/// The sweeper's futex word: 1 when a doorbell's progress left a send waiting.
static HURRY: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
/// Whether the preload was asked for the trap ([`ENGINE_VAR`]).
static WANTED: AtomicBool = AtomicBool::new(false);
/// Whether the trap is on in this process (its handlers installed: at the first register page).
static ON: AtomicBool = AtomicBool::new(false);
/// The trapped register pages (their addresses; 0: a free slot).
static PAGES: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
/// Stores skipped, and stores single-stepped.
static SKIPPED: AtomicU64 = AtomicU64::new(0);
static STEPPED: AtomicU64 = AtomicU64::new(0);
/// The first 16 code bytes at the first store the decoder did not know (what `counts` shows).
static UNKNOWN: [AtomicU64; 2] = [const { AtomicU64::new(0) }; 2];

/// The program's disposition of a signal the trap took (its handler or `SIG_DFL`/`SIG_IGN`, and
/// its flags): where a fault that is not the trap's goes.
struct Chained {
    handler: AtomicUsize,
    flags: AtomicUsize,
}

/// SIGSEGV's and SIGTRAP's.
static APP: [Chained; 2] = [const {
    Chained {
        handler: AtomicUsize::new(libc::SIG_DFL),
        flags: AtomicUsize::new(0),
    }
}; 2];

thread_local! {
    /// The register page this thread is single-stepping a store to (0: none).
    static STEP: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

type SigactionFn = unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;
type SignalFn = unsafe extern "C" fn(c_int, libc::sighandler_t) -> libc::sighandler_t;

/// libc's `sigaction`, past the preload's.
pub fn real_sigaction() -> Option<SigactionFn> {
    static F: AtomicUsize = AtomicUsize::new(0);
    // SAFETY: the symbol is libc's sigaction, of this type.
    next(&F, c"sigaction").map(|f| unsafe { std::mem::transmute::<usize, SigactionFn>(f) })
}

/// libc's `signal`, past the preload's.
pub fn real_signal() -> Option<SignalFn> {
    static F: AtomicUsize = AtomicUsize::new(0);
    // SAFETY: the symbol is libc's signal, of this type.
    next(&F, c"signal").map(|f| unsafe { std::mem::transmute::<usize, SignalFn>(f) })
}

/// The next definition of `name` after this object's (cached in `cache`).
fn next(cache: &AtomicUsize, name: &std::ffi::CStr) -> Option<usize> {
    let mut f = cache.load(Ordering::Acquire);
    if f == 0 {
        // SAFETY: a constant symbol name; RTLD_NEXT looks past this object.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
        cache.store(f, Ordering::Release);
    }
    (f != 0).then_some(f)
}

/// Whether the trap is on in this process.
pub fn on() -> bool {
    ON.load(Ordering::Acquire)
}

/// (stores skipped, stores single-stepped, the code bytes at the first single-stepped one) so
/// far in this process.
pub fn counts() -> (u64, u64, [u8; 16]) {
    let mut code = [0u8; 16];
    code[..8].copy_from_slice(&UNKNOWN[0].load(Ordering::Relaxed).to_le_bytes());
    code[8..].copy_from_slice(&UNKNOWN[1].load(Ordering::Relaxed).to_le_bytes());
    (SKIPPED.load(Ordering::Relaxed), STEPPED.load(Ordering::Relaxed), code)
}

/// The preload's constructor: whether [`ENGINE_VAR`] asks for the trap ("trap"; "hooks" or
/// unset: not). Nothing else happens until the program maps a model0 register page, so a
/// program that opens no RDMA device runs as without the preload.
pub fn want_from_env() -> Result<(), String> {
    match std::env::var(ENGINE_VAR).as_deref() {
        Ok("trap") => WANTED.store(true, Ordering::Release),
        Ok("hooks") | Err(std::env::VarError::NotPresent) => {}
        Ok(v) => return Err(format!("{ENGINE_VAR}={v}: not an engine (trap or hooks)")),
        Err(e) => return Err(format!("{ENGINE_VAR}: {e}")),
    }
    Ok(())
}

/// Whether register pages are to be trapped in this process.
pub fn wanted() -> bool {
    WANTED.load(Ordering::Acquire)
}

/// Traps `page`, a register page just mapped with no access: the trap turned on first if it is
/// not yet (its handlers installed, the sweeper started). An error says why it cannot be.
pub fn trap_page(page: usize) -> Result<(), String> {
    static ENABLED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    ENABLED.get_or_init(enable).clone()?;
    if PAGES
        .iter()
        .any(|s| s.compare_exchange(0, page, Ordering::AcqRel, Ordering::Relaxed).is_ok())
    {
        Ok(())
    } else {
        Err(format!("more than {SLOTS} register pages mapped in one process"))
    }
}

/// Turns the trap on: installs its SIGSEGV and SIGTRAP handlers (the dispositions they replace
/// are kept as the program's) and starts the sweeper thread.
fn enable() -> Result<(), String> {
    let real = real_sigaction().ok_or("libc's sigaction not found")?;
    for (k, sig, h) in [
        (0, libc::SIGSEGV, on_segv as *const () as usize),
        (1, libc::SIGTRAP, on_trap as *const () as usize),
    ] {
        // SAFETY: `sigaction` is plain data; all zeroes is a valid value.
        let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
        new.sa_sigaction = h;
        new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
        // SAFETY: as above.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointers to initialised sigaction structs; the handler has the
        // SA_SIGINFO signature.
        if unsafe { real(sig, &new, &mut old) } != 0 {
            return Err(format!("sigaction({sig}): {}", std::io::Error::last_os_error()));
        }
        APP[k].handler.store(old.sa_sigaction, Ordering::Release);
        APP[k].flags.store(old.sa_flags as usize, Ordering::Release);
    }
    ON.store(true, Ordering::Release);
    std::thread::Builder::new()
        .name("model0-sweep".into())
        .spawn(sweep)
        .map_err(|e| format!("the sweeper thread: {e}"))?;
    Ok(())
}

/// The sweeper: while a send of the process's waits on the far side (RNR, a responder not yet
/// ready), model0's progress every [`SWEEP_MS`] ms; otherwise a progress every [`IDLE_MS`] ms,
/// or at once when a doorbell's progress leaves a send waiting ([`HURRY`]).
fn sweep() {
    let mut ms = IDLE_MS;
    loop {
        if HURRY.swap(0, Ordering::AcqRel) == 0 {
            let t = libc::timespec {
                tv_sec: 0,
                tv_nsec: (ms * 1_000_000) as libc::c_long,
            };
            // SAFETY: a futex wait on our own static word while it holds 0, with a timeout.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    HURRY.as_ptr(),
                    libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                    0,
                    &t as *const libc::timespec,
                )
            };
        }
        ms = if device::progress_then_waiting() {
            SWEEP_MS
        } else {
            IDLE_MS
        };
    }
}

/// Wakes the sweeper (async-signal-safe: an atomic store and a futex wake).
fn hurry() {
    if HURRY.swap(1, Ordering::AcqRel) == 0 {
        // SAFETY: a futex wake of our own static word.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                HURRY.as_ptr(),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                1,
            )
        };
    }
}

/// Forgets the trapped pages in `[addr, addr + len)` (unmapped, or mapped over).
pub fn forget(addr: usize, len: usize) {
    if !on() {
        return;
    }
    for s in &PAGES {
        let p = s.load(Ordering::Acquire);
        if p != 0 && p >= addr & !(PAGE - 1) && p < addr.saturating_add(len) {
            let _ = s.compare_exchange(p, 0, Ordering::AcqRel, Ordering::Relaxed);
        }
    }
}

/// Whether the page holding `addr` is a trapped register page.
pub fn is_trapped(addr: usize) -> bool {
    trapped(addr & !(PAGE - 1))
}

fn trapped(page: usize) -> bool {
    page != 0 && PAGES.iter().any(|s| s.load(Ordering::Acquire) == page)
}

fn slot_of(sig: c_int) -> Option<usize> {
    match sig {
        libc::SIGSEGV => Some(0),
        libc::SIGTRAP => Some(1),
        _ => None,
    }
}

/// The preload's `sigaction` for SIGSEGV and SIGTRAP while the trap is on: the program's
/// disposition is kept here, not installed (`None`: not the trap's, forward to libc's). The
/// kept disposition has no signal mask of its own: the handler runs with the trap's (none
/// added).
///
/// # Safety
/// As libc's `sigaction`: `act` and `old` are null or valid.
pub unsafe fn sigaction_hook(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> Option<c_int> {
    let k = slot_of(sig).filter(|_| on())?;
    if !old.is_null() {
        // SAFETY: the caller's valid struct; all zeroes is a valid value.
        unsafe {
            std::ptr::write_bytes(old, 0, 1);
            (*old).sa_sigaction = APP[k].handler.load(Ordering::Acquire);
            (*old).sa_flags = APP[k].flags.load(Ordering::Acquire) as c_int;
        }
    }
    if !act.is_null() {
        // SAFETY: the caller's valid struct.
        let (h, f) = unsafe { ((*act).sa_sigaction, (*act).sa_flags) };
        APP[k].handler.store(h, Ordering::Release);
        APP[k].flags.store(f as usize, Ordering::Release);
    }
    Some(0)
}

/// The preload's `signal` for SIGSEGV and SIGTRAP while the trap is on (glibc's `signal` sets
/// SA_RESTART); `None`: not the trap's.
pub fn signal_hook(sig: c_int, h: libc::sighandler_t) -> Option<libc::sighandler_t> {
    let k = slot_of(sig).filter(|_| on())?;
    APP[k].flags.store(libc::SA_RESTART as usize, Ordering::Release);
    Some(APP[k].handler.swap(h, Ordering::AcqRel))
}

/// Runs model0's progress unless the interrupted thread was inside model0 (which never stores
/// to a register page; its locks may be held).
fn progress() {
    if !device::is_inside() && device::progress_then_waiting() {
        hurry();
    }
}

extern "C" fn on_segv(sig: c_int, info: *mut libc::siginfo_t, uc: *mut c_void) {
    // SAFETY: the kernel's siginfo for a SIGSEGV.
    let addr = unsafe { (*info).si_addr() } as usize;
    let page = addr & !(PAGE - 1);
    if !trapped(page) {
        return chain(sig, info, uc);
    }
    let uc = uc as *mut libc::ucontext_t;
    // SAFETY: the kernel's saved context of the interrupted thread, ours to change until we
    // return.
    let g = unsafe { &mut (*uc).uc_mcontext.gregs };
    let rip = g[libc::REG_RIP as usize] as usize;
    // SAFETY: the bytes of the instruction the CPU just fetched at `rip` (the decoder reads no
    // further than where the instruction ends, or where it stops knowing it).
    let len = insn::store_len(|i| unsafe { std::ptr::read_volatile((rip + i) as *const u8) });
    match len {
        Some(n) => {
            g[libc::REG_RIP as usize] += n as i64;
            SKIPPED.fetch_add(1, Ordering::Relaxed);
            progress();
        }
        None => {
            if UNKNOWN[0].load(Ordering::Relaxed) == 0 {
                for (k, w) in UNKNOWN.iter().enumerate() {
                    // SAFETY: as above; the code the CPU runs is readable, and an instruction the
                    // decoder stopped in has at least one byte (16 read: the next ones may be the
                    // next instruction's, never past the code's page when it ends 16 bytes on).
                    let b: [u8; 8] =
                        std::array::from_fn(|i| unsafe { std::ptr::read_volatile((rip + 8 * k + i) as *const u8) });
                    w.store(u64::from_le_bytes(b), Ordering::Relaxed);
                }
            }
            STEP.with(|s| s.set(page));
            // SAFETY: a register page of model0's, mapped by the device: opened for one
            // instruction, closed again at the SIGTRAP after it.
            unsafe { libc::mprotect(page as *mut c_void, PAGE, libc::PROT_READ | libc::PROT_WRITE) };
            g[libc::REG_EFL as usize] |= TF;
        }
    }
}

extern "C" fn on_trap(sig: c_int, info: *mut libc::siginfo_t, uc: *mut c_void) {
    let page = STEP.with(|s| s.replace(0));
    if page == 0 {
        return chain(sig, info, uc);
    }
    // SAFETY: the page opened by `on_segv` for the instruction just stepped.
    unsafe { libc::mprotect(page as *mut c_void, PAGE, libc::PROT_NONE) };
    // SAFETY: as in `on_segv`.
    unsafe { (*(uc as *mut libc::ucontext_t)).uc_mcontext.gregs[libc::REG_EFL as usize] &= !TF };
    STEPPED.fetch_add(1, Ordering::Relaxed);
    progress();
}

/// A signal that is not the trap's, given to the program's disposition: its handler, or the
/// default action (the process ends as it would have without the preload).
fn chain(sig: c_int, info: *mut libc::siginfo_t, uc: *mut c_void) {
    let Some(k) = slot_of(sig) else { return };
    let h = APP[k].handler.load(Ordering::Acquire);
    let flags = APP[k].flags.load(Ordering::Acquire) as c_int;
    // SAFETY: the kernel's siginfo.
    let from_fault = unsafe { (*info).si_code } > 0;
    if h == libc::SIG_IGN && !from_fault {
        return;
    }
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        // the default action, taken when this handler returns (the signal is blocked until then)
        if let Some(real) = real_sigaction() {
            // SAFETY: plain data; SIG_DFL with no flags.
            let dfl: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: a valid struct; resets this signal's disposition.
            unsafe { real(sig, &dfl, std::ptr::null_mut()) };
        }
        // SAFETY: raise is async-signal-safe.
        unsafe { libc::raise(sig) };
        return;
    }
    if flags & libc::SA_RESETHAND != 0 {
        APP[k].handler.store(libc::SIG_DFL, Ordering::Release);
    }
    if flags & libc::SA_SIGINFO != 0 {
        type Info = extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void);
        // SAFETY: the program installed this handler with SA_SIGINFO.
        let f = unsafe { std::mem::transmute::<usize, Info>(h) };
        f(sig, info, uc);
    } else {
        // SAFETY: the program installed this handler without SA_SIGINFO.
        let f = unsafe { std::mem::transmute::<usize, extern "C" fn(c_int)>(h) };
        f(sig);
    }
}
