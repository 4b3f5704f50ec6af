//! This process's id without a system call per use: the model compares it with each WQE's
//! peer owner; whether a peer's process is still there; and who drives the retries of a
//! requester waiting for a peer that does not answer.

/// This process's id, as [`std::process::id`] gives it, read once: `getpid` is a system call,
/// and the model asks for every WQE it executes (a quarter of the CPU time of a small `bw` on
/// model0 went there: `perf` showed `__getpid` under `peer_process_alive` in 25 % of the
/// samples).
/// A child made by `fork` reads its own again (a `pthread_atfork` child handler clears it).
/// Never blocks (a lock or a `Once` held by another thread at a fork would be held forever in
/// the child): the first caller registers the handler; until it has, and if registering failed,
/// the id is read anew at every call and not cached.
pub(super) fn own_pid() -> u32 {
    use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
    let p = OWN_PID.load(Relaxed);
    if p != 0 {
        return p;
    }
    if HOOK
        .compare_exchange(HOOK_NONE, HOOK_REGISTERING, AcqRel, Acquire)
        .is_ok()
    {
        // SAFETY: registers a child handler that only stores to an atomic (async-signal-safe,
        // as a handler run after fork must be); no prepare or parent handler.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(forget_own_pid)) };
        HOOK.store(
            if rc == 0 { HOOK_REGISTERED } else { HOOK_FAILED },
            std::sync::atomic::Ordering::Release,
        );
    }
    let p = std::process::id();
    if HOOK.load(Acquire) == HOOK_REGISTERED {
        OWN_PID.store(p, Relaxed);
    }
    p
}

/// Whether the process owning a peer QP (`pid`) is still there: a responder whose process is
/// gone (SIGKILLed, crashed) answers nothing, and the requester's WQEs end in retry exceeded, as
/// on hardware, instead of landing in a dead process's memory. Checked (a `kill(pid, 0)`, a
/// system call) once in every 256 WQEs a thread executes against another process's QP, and at
/// every WQE while the requester retries one (`always`): a few hundred WQEs may still land
/// after a peer died; the one that meets it waits out the retry budget, then fails and moves
/// the QP to error, and the rest are flushed.
pub(super) fn peer_process_alive(pid: u32, always: bool) -> bool {
    thread_local! {
        static SINCE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    }
    if pid == own_pid() || pid == 0 {
        return true;
    }
    let n = SINCE.with(|c| {
        let n = c.get().wrapping_add(1);
        c.set(n);
        n
    });
    (n % 256 != 0 && !always) || super::shm::pid_alive(pid)
}

/// [`own_pid`]'s fork handler: not registered yet, being registered, registered, failed.
static HOOK: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(HOOK_NONE);
const HOOK_NONE: u8 = 0;
const HOOK_REGISTERING: u8 = 1;
const HOOK_REGISTERED: u8 = 2;
const HOOK_FAILED: u8 = 3;

/// [`own_pid`]'s cache; 0: not read yet, or cleared in a child after fork.
static OWN_PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// `pthread_atfork`'s child handler: the child reads its own id at its next [`own_pid`].
extern "C" fn forget_own_pid() {
    OWN_PID.store(0, std::sync::atomic::Ordering::Relaxed);
}

/// Called when a requester starts retrying a responder that does not answer, or stalls on RNR
/// with infinite retries: the preload starts a thread that drives the retries where the program
/// does not poll (`uverbs::trap`).
static WAIT_HOOK: std::sync::OnceLock<fn(bool)> = std::sync::OnceLock::new();

/// Sets the function called when a send starts waiting for a peer that does not answer (with
/// true) or stalls for a receive (false, at each retry) (once per process; later calls change
/// nothing).
pub fn set_wait_hook(f: fn(bool)) {
    let _ = WAIT_HOOK.set(f);
}

/// A send waits (`first`: it starts waiting for a peer that does not answer): the hook, if one
/// is set.
pub(super) fn send_waits(first: bool) {
    if let Some(f) = WAIT_HOOK.get() {
        f(first);
    }
}

#[cfg(test)]
mod tests {
    use super::own_pid;

    /// The cached id is this process's, and a child made by `fork` gets its own, not its
    /// parent's (a stale id would make the child take its parent's QPs for its own and skip
    /// the check that the peer is alive).
    #[test]
    fn own_pid_is_read_again_in_a_child_after_fork() {
        let parent = own_pid();
        assert_eq!(parent, std::process::id());
        // SAFETY: the child only calls getpid (through own_pid: it takes no lock) and _exit,
        // both async-signal-safe; the parent waits for it.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork failed");
        if child == 0 {
            // SAFETY: getpid and _exit in the child, as above.
            unsafe {
                let me = libc::getpid() as u32;
                libc::_exit(if own_pid() == me && me != parent { 0 } else { 1 });
            }
        }
        let mut status = 0;
        // SAFETY: waits for our own child; `status` is a valid local.
        let rc = unsafe { libc::waitpid(child, &mut status, 0) };
        assert_eq!(rc, child);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child saw a stale id: {status:#x}"
        );
    }
}
