//! Stopping a run from outside. SIGINT, SIGTERM, SIGHUP and SIGPIPE set [`INTERRUPTED`], which
//! every loop that can wait watches (the measurement's iterations, model0's long wire waits, the
//! out-of-band exchange), so the run unwinds and every resource is given back (model0's shared
//! memory objects are removed by their owners, not left for the next run's sweep); the signal is
//! recorded so the command line can end with the conventional status.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};

/// Set by the signals [`install`] handles (or by a program that embeds rdmaprobe).
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

static SIGNAL: AtomicI32 = AtomicI32::new(0);

static COUNT: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNAL.store(sig, Ordering::Relaxed);
    COUNT.fetch_add(1, Ordering::Relaxed);
    INTERRUPTED.store(true, Ordering::Relaxed);
    crate::model::abort_wire_waits();
}

/// Installs the handler for SIGINT, SIGTERM, SIGHUP and SIGPIPE (after it, a write to a closed
/// pipe fails with EPIPE instead of killing the process).
pub fn install() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGPIPE] {
        // SAFETY: the handler only stores to atomics (async-signal-safe).
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
}

/// Whether a stop was asked.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

static HELD: AtomicUsize = AtomicUsize::new(0);

/// While one lives, a stop does not end a wait for the peer out of band: what the peer must hear
/// after a stop (client/server --run-infinitely: that this side stops, once the run under way
/// has ended on both) is still exchanged, within the exchange's deadline.
pub struct Hold(());

/// Holds the stop of out-of-band waits until the returned [`Hold`] is dropped.
pub fn hold() -> Hold {
    HELD.fetch_add(1, Ordering::SeqCst);
    Hold(())
}

impl Drop for Hold {
    fn drop(&mut self) {
        HELD.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Whether a wait for the peer ends: a stop was asked and no [`Hold`] lives, or a stop was asked
/// twice (a second Ctrl-C does not wait for the peer).
pub fn stops_waits() -> bool {
    interrupted() && (HELD.load(Ordering::SeqCst) == 0 || COUNT.load(Ordering::Relaxed) >= 2)
}

/// The last signal that asked for a stop, if any.
pub fn signal() -> Option<i32> {
    match SIGNAL.load(Ordering::Relaxed) {
        0 => None,
        s => Some(s),
    }
}
