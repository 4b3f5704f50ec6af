//! The wire: the added delay a doorbell's message and a response travel (a calibrated TSC wait
//! that a SIGINT can cut short).

use super::layout::QpHdr;
use crate::clock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// Stops every wire wait in this process at once (async-signal-safe: one atomic store): a SIGINT
/// handler calls it so a long delay does not hold the process.
pub fn abort_wire_waits() {
    WIRE_ABORT.store(true, Ordering::Relaxed);
}

static WIRE_ABORT: AtomicBool = AtomicBool::new(false);

/// The wire-delay word of a QP: the added delay in ns, with this bit set when the doorbell path
/// times it, even a delay of 0, so a zero-delay baseline and a delayed run take the same
/// instructions and differ only in how long the wait loop turns (0: no wire, no timing at all).
pub(super) const WIRE_TIMED: u64 = 1 << 63;

/// The wire: returns `ns` nanoseconds of TSC time after its first counter read, by an absolute
/// deadline, taking the same steps for every `ns` including 0 (no early exit for 0: the loop
/// then ends on its first read; the deadline's arithmetic for `ns > 0` comes after the start
/// read, so it is part of the wait, not added to it). Two delays thus differ by the difference of their deadlines,
/// plus how the loop's end falls on the counter's reads, one read period `P` apart (about 10 ns
/// here): for 0 the loop ends on the read one `P` after the start, for `ns > 0` on the first
/// read at or past the deadline, `P / 2` past it on average. So a delay's deadline is set
/// `P / 2` later, and the wait with `ns` lasts `ns` longer than the wait with 0, on average.
#[inline(never)]
pub(super) fn wire_wait(ns: u64) {
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
pub(super) fn wire_clock() -> (f64, f64) {
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

/// The wire delay of a response (READ data, an atomic's old value) on its way back to `me`.
pub(super) fn response_wire(me: &QpHdr) {
    let wire = me.wire_delay_ns.load(Ordering::Acquire);
    if wire != 0 {
        wire_wait(wire & !WIRE_TIMED);
    }
}
