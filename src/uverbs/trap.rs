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
//! stalled on RNR until receives come, posted without a doorbell; a responder that does not
//! answer) is taken by a sweeper thread: a progress every [`SWEEP_MS`] ms while something
//! waits, every [`IDLE_MS`] ms otherwise (so a WQE may run on it).
//!
//! The program's own SIGSEGV and SIGTRAP handlers stay its own: the preload's `sigaction` and
//! `signal` keep them here (not installed) and every fault that is not a register page's goes
//! to them, or ends the process as it would have without the preload. Limits: a thread that
//! blocks SIGSEGV (or SIGTRAP, for a single-stepped store) and rings a doorbell is ended by the
//! kernel; handlers installed past `sigaction` and `signal` (`sysv_signal`, `bsd_signal`,
//! `sigset`, a raw `rt_sigaction`) replace the trap's, and the next doorbell ends the program; a
//! stack overflow ends the program without its alternate-stack handler's report; an arm of a
//! CQ rung on the register page (not through `ibv_req_notify_cq`) raises no event when a CQE
//! came before it (`ibv_req_notify_cq`'s hook does that).

use super::device;
#[cfg(target_arch = "x86_64")]
use super::insn;
use std::ffi::c_int;
#[cfg(target_arch = "x86_64")]
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

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
#[cfg(target_arch = "x86_64")]
const TF: i64 = 0x100;
/// `si_code` of a fault of access on a mapped page.
#[cfg(target_arch = "x86_64")]
const SEGV_ACCERR: c_int = 2;

/// The sweeper's futex word: 1 when a doorbell's progress left a send waiting.
static HURRY: AtomicU32 = AtomicU32::new(0);
/// Whether the sweeper thread runs.
static SWEEPING: AtomicBool = AtomicBool::new(false);
/// The sweeper is in a progress pass / is to run none again ([`quiesce`]).
static BUSY: AtomicBool = AtomicBool::new(false);
static STOP: AtomicBool = AtomicBool::new(false);
/// Whether the preload was asked for the trap ([`ENGINE_VAR`]).
static WANTED: AtomicBool = AtomicBool::new(false);
/// Whether the trap is on in this process (its handlers installed: at the first register page).
static ON: AtomicBool = AtomicBool::new(false);
/// The trapped register pages (their addresses; 0: a free slot).
static PAGES: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
/// Stores skipped, and stores single-stepped.
static SKIPPED: AtomicU64 = AtomicU64::new(0);
static STEPPED: AtomicU64 = AtomicU64::new(0);
/// The first 16 code bytes at the first store the decoder did not know (what `counts` shows;
/// zeros past the end of the code's page).
static UNKNOWN: [AtomicU64; 2] = [const { AtomicU64::new(0) }; 2];

/// The program's disposition of a signal the trap took (its handler or `SIG_DFL`/`SIG_IGN`, and
/// its flags): where a fault that is not the trap's goes. A sequence lock: the handlers never
/// see the pair half written, and nothing in it blocks.
struct Chained {
    seq: AtomicU32,
    handler: AtomicUsize,
    flags: AtomicUsize,
}

impl Chained {
    /// Outside signal handlers: this thread's signals are blocked meanwhile (a SIGSEGV sent to
    /// it mid-way would spin in [`Chained::get`] for good).
    fn set(&self, handler: usize, flags: usize) {
        // SAFETY: plain data, then this thread's own mask, restored below.
        let old = unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
            old
        };
        while !self.try_set(handler, flags) {
            std::hint::spin_loop();
        }
        // SAFETY: the mask saved above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    }

    /// [`Chained::set`] unless another writer is mid-way (async-signal-safe).
    fn try_set(&self, handler: usize, flags: usize) -> bool {
        let s = self.seq.load(Ordering::Acquire);
        if s % 2 != 0
            || self
                .seq
                .compare_exchange(s, s + 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return false;
        }
        self.handler.store(handler, Ordering::Release);
        self.flags.store(flags, Ordering::Release);
        self.seq.store(s + 2, Ordering::Release);
        true
    }

    /// (handler, flags), async-signal-safe (a writer is never interrupted by the trap's own
    /// fault: it stores to no register page).
    fn get(&self) -> (usize, usize) {
        loop {
            let s = self.seq.load(Ordering::Acquire);
            let v = (self.handler.load(Ordering::Acquire), self.flags.load(Ordering::Acquire));
            if s % 2 == 0 && self.seq.load(Ordering::Acquire) == s {
                return v;
            }
            std::hint::spin_loop();
        }
    }
}

/// SIGSEGV's and SIGTRAP's.
static APP: [Chained; 2] = [const {
    Chained {
        seq: AtomicU32::new(0),
        handler: AtomicUsize::new(libc::SIG_DFL),
        flags: AtomicUsize::new(0),
    }
}; 2];
thread_local! {
    /// The register page this thread is single-stepping a store to (0: none).
    static STEP: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// Whether this thread runs the trap's handler (no thread is started from it).
    static IN_HANDLER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
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
    // libc's sigaction and signal looked up now, outside any signal handler (dlsym is not
    // async-signal-safe, and a program may make its first call to them in a handler)
    let _ = (real_sigaction(), real_signal());
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
#[cfg(not(target_arch = "x86_64"))]
fn enable() -> Result<(), String> {
    Err("the doorbell trap reads x86-64 instructions: not on this architecture".into())
}

/// Turns the trap on (x86-64).
#[cfg(target_arch = "x86_64")]
fn enable() -> Result<(), String> {
    let real = real_sigaction().ok_or("libc's sigaction not found")?;
    for (k, sig, h) in [
        (0, libc::SIGSEGV, on_segv as *const () as usize),
        (1, libc::SIGTRAP, on_trap as *const () as usize),
    ] {
        // SAFETY: `sigaction` is plain data; all zeroes is a valid value.
        let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
        new.sa_sigaction = h;
        // not SA_ONSTACK: model0's progress runs in the handler, more than a small alternate
        // stack holds (a stack overflow of the program then ends it by the kernel's default
        // action, without its own alternate-stack handler's report)
        new.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        // SAFETY: as above.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointers to initialised sigaction structs; the handler has the
        // SA_SIGINFO signature.
        if unsafe { real(sig, &new, &mut old) } != 0 {
            return Err(format!("sigaction({sig}): {}", std::io::Error::last_os_error()));
        }
        APP[k].set(old.sa_sigaction, old.sa_flags as usize);
    }
    ON.store(true, Ordering::Release);
    ensure_sweeper()
}

/// Starts the sweeper thread unless it runs (not from a signal handler: the trap starts it
/// before its first fault).
fn ensure_sweeper() -> Result<(), String> {
    static STARTED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    STARTED
        .get_or_init(|| {
            std::thread::Builder::new()
                .name("model0-sweep".into())
                .spawn(sweep)
                .map(|_| SWEEPING.store(true, Ordering::Release))
                .map_err(|e| format!("the sweeper thread: {e}"))
        })
        .clone()
}

/// model0's hook (`model::set_wait_hook`) when a send starts waiting for a responder that does
/// not answer (not yet in RTR, gone, its process dead; `now`: woken at once) or stalls on RNR
/// with infinite retries (at every retry: not woken, it sees the wait at its next pass, within
/// [`IDLE_MS`] ms): the sweeper retries it, for a program that does not poll (blocked in
/// `ibv_get_cq_event`, or UCX polling its CQ's memory). Started here when the trap has not
/// started it (the hooks alone: this runs in the program's post or poll, not in a handler).
pub fn send_waits(now: bool) {
    if !SWEEPING.load(Ordering::Acquire) && !IN_HANDLER.with(|h| h.get()) {
        let _ = ensure_sweeper();
    }
    if now {
        hurry();
    }
}

/// The sweeper: while a send of the process's waits on the far side (RNR, a responder not yet
/// ready), model0's progress every [`SWEEP_MS`] ms; otherwise a progress every [`IDLE_MS`] ms,
/// or at once when a doorbell's progress leaves a send waiting ([`HURRY`]).
fn sweep() {
    // every signal blocked: a program that takes its signals with sigwait or a signalfd in a
    // thread of its own gets them there, not here
    // SAFETY: plain data, then this thread's own mask.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
    }
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
        // Dekker with `quiesce`: busy first, then look at the stop (both sequentially
        // consistent), so a stop either sees this pass or this pass sees the stop
        BUSY.store(true, Ordering::SeqCst);
        if STOP.load(Ordering::SeqCst) {
            BUSY.store(false, Ordering::SeqCst);
            // parked for good: the process is ending
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
        let waiting = device::progress_then_waiting();
        BUSY.store(false, Ordering::SeqCst);
        ms = if waiting { SWEEP_MS } else { IDLE_MS };
    }
}

/// Stops the sweeper before the process's model0 objects are removed (the preload's exit and
/// its signal handler): it runs no progress after this returns, so it holds none of model0's
/// locks or objects. Waits 2000 sleeps of 0.1 ms (0.2-0.3 s) at most for a pass under way;
/// async-signal-safe (atomics and `nanosleep`).
pub fn quiesce() {
    STOP.store(true, Ordering::SeqCst);
    for _ in 0..2000 {
        if !BUSY.load(Ordering::SeqCst) {
            return;
        }
        let t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 100_000,
        };
        // SAFETY: a valid timespec; nanosleep is async-signal-safe.
        unsafe { libc::nanosleep(&t, std::ptr::null_mut()) };
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

/// Forgets the trapped pages in `[addr, addr + len)` (unmapped, or mapped over); returns them
/// (up to 8: a register page is mapped alone).
pub fn forget(addr: usize, len: usize) -> [Option<usize>; 8] {
    let mut gone = [None; 8];
    if !on() {
        return gone;
    }
    let mut n = 0;
    for s in &PAGES {
        let p = s.load(Ordering::Acquire);
        if p != 0
            && p >= addr & !(PAGE - 1)
            && p < addr.saturating_add(len)
            && s.compare_exchange(p, 0, Ordering::AcqRel, Ordering::Relaxed).is_ok()
            && n < gone.len()
        {
            gone[n] = Some(p);
            n += 1;
        }
    }
    gone
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
/// kept disposition has no signal mask and no SA_NODEFER of its own: the program's handler runs
/// with the trap's.
///
/// # Safety
/// As libc's `sigaction`: `act` and `old` are null or valid.
pub unsafe fn sigaction_hook(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> Option<c_int> {
    let k = slot_of(sig).filter(|_| on())?;
    let (h, f) = APP[k].get();
    if !act.is_null() {
        // SAFETY: the caller's valid struct.
        let (nh, nf) = unsafe { ((*act).sa_sigaction, (*act).sa_flags) };
        APP[k].set(nh, nf as usize);
    }
    if !old.is_null() {
        // SAFETY: the caller's valid struct; all zeroes is a valid value.
        unsafe {
            std::ptr::write_bytes(old, 0, 1);
            (*old).sa_sigaction = h;
            (*old).sa_flags = f as c_int;
        }
    }
    Some(0)
}

/// The preload's `signal` for SIGSEGV and SIGTRAP while the trap is on (glibc's `signal` sets
/// SA_RESTART); `None`: not the trap's.
pub fn signal_hook(sig: c_int, h: libc::sighandler_t) -> Option<libc::sighandler_t> {
    let k = slot_of(sig).filter(|_| on())?;
    let (old, _) = APP[k].get();
    APP[k].set(h, libc::SA_RESTART as usize);
    Some(old)
}

/// Runs model0's progress unless the interrupted thread was inside model0 (which never stores
/// to a register page; its locks may be held). What is left waiting the sweeper finds at its
/// next pass (a wake per doorbell would keep it from sleeping in a stream of them).
#[cfg(target_arch = "x86_64")]
fn progress() {
    if !device::is_inside() {
        device::progress();
    }
}

#[cfg(target_arch = "x86_64")]
/// Runs `f` as the trap's handler: errno kept for the interrupted code (the progress makes
/// system calls), [`IN_HANDLER`] set.
fn handling(f: impl FnOnce()) {
    // SAFETY: glibc's thread-local errno.
    let errno = unsafe { *libc::__errno_location() };
    let was = IN_HANDLER.with(|h| h.replace(true));
    f();
    IN_HANDLER.with(|h| h.set(was));
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

#[cfg(target_arch = "x86_64")]
extern "C" fn on_segv(sig: c_int, info: *mut libc::siginfo_t, uc: *mut c_void) {
    // SAFETY: the kernel's siginfo for a SIGSEGV.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    let page = addr & !(PAGE - 1);
    // a fault of access on a trapped page (a SIGSEGV sent by kill carries no address)
    if code != SEGV_ACCERR || !trapped(page) {
        return chain(sig, info, uc);
    }
    handling(|| {
        let uc = uc as *mut libc::ucontext_t;
        // SAFETY: the kernel's saved context of the interrupted thread, ours to change until we
        // return.
        let g = unsafe { &mut (*uc).uc_mcontext.gregs };
        let rip = g[libc::REG_RIP as usize] as usize;
        // the code bytes at `rip` that lie on its page (the next page may not be mapped; an
        // instruction that runs into it is not decoded, and single-stepped)
        let room = PAGE - rip % PAGE;
        let byte = |i: usize| {
            if i < room {
                // SAFETY: a byte of the page the CPU just fetched the instruction from.
                unsafe { std::ptr::read_volatile((rip + i) as *const u8) }
            } else {
                0x0F
            }
        };
        match insn::store_len(byte) {
            Some(n) if n <= room => {
                g[libc::REG_RIP as usize] += n as i64;
                SKIPPED.fetch_add(1, Ordering::Relaxed);
                progress();
            }
            _ => {
                if UNKNOWN[0].load(Ordering::Relaxed) == 0 {
                    let mut code = [0u8; 16];
                    for (i, b) in code.iter_mut().enumerate() {
                        *b = if i < room { byte(i) } else { 0 };
                    }
                    UNKNOWN[0].store(
                        u64::from_le_bytes(code[..8].try_into().unwrap_or_default()),
                        Ordering::Relaxed,
                    );
                    UNKNOWN[1].store(
                        u64::from_le_bytes(code[8..].try_into().unwrap_or_default()),
                        Ordering::Relaxed,
                    );
                }
                STEP.with(|s| s.set(page));
                // SAFETY: a register page of model0's, mapped by the device: opened for one
                // instruction, closed again at the SIGTRAP after it.
                unsafe { libc::mprotect(page as *mut c_void, PAGE, libc::PROT_READ | libc::PROT_WRITE) };
                g[libc::REG_EFL as usize] |= TF;
            }
        }
    });
}

#[cfg(target_arch = "x86_64")]
extern "C" fn on_trap(sig: c_int, info: *mut libc::siginfo_t, uc: *mut c_void) {
    // SAFETY: the kernel's siginfo.
    let code = unsafe { (*info).si_code };
    let page = STEP.with(|s| s.get());
    // the single step's trap (a SIGTRAP sent by kill meanwhile is the program's)
    if page == 0 || code != libc::TRAP_TRACE {
        return chain(sig, info, uc);
    }
    STEP.with(|s| s.set(0));
    handling(|| {
        if trapped(page) {
            // SAFETY: the page opened by `on_segv` for the instruction just stepped, still a
            // register page of model0's.
            unsafe { libc::mprotect(page as *mut c_void, PAGE, libc::PROT_NONE) };
        }
        // SAFETY: as in `on_segv`.
        unsafe { (*(uc as *mut libc::ucontext_t)).uc_mcontext.gregs[libc::REG_EFL as usize] &= !TF };
        STEPPED.fetch_add(1, Ordering::Relaxed);
        progress();
    });
}

#[cfg(target_arch = "x86_64")]
/// A signal that is not the trap's, given to the program's disposition: its handler, or the
/// default action (the process ends as it would have without the preload).
fn chain(sig: c_int, info: *mut libc::siginfo_t, uc: *mut c_void) {
    let Some(k) = slot_of(sig) else { return };
    let (h, flags) = APP[k].get();
    let flags = flags as c_int;
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
        APP[k].try_set(libc::SIG_DFL, 0);
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
