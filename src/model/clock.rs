//! model0's NIC clock: a free-running counter at a declared `hca_core_clock`, written into the
//! timestamp of every good CQE at the moment the model writes the CQE (the model completes the
//! work there), read through the core clock page, and converted by the clock-info page, as a
//! ConnectX's internal timer is.
//!
//! The rate is 156.25 MHz ([`HCA_CORE_CLOCK_KHZ`]): what published `ibv_devinfo -v` output shows
//! for ConnectX-4/5 (`hca_core_clock: 156250kHZ`; ConnectX-6 Dx and later show 1000000kHZ), and
//! model0 presents itself as a ConnectX-5. It is neither the TSC's rate nor 1 GHz, so a reader
//! that takes the timestamps for nanoseconds, or for TSC ticks, is off by a factor of 6.4 or
//! more and its check against `hca_core_clock` fails. The counter is `CLOCK_MONOTONIC_RAW`
//! scaled to that rate (one clock for every process on the host, as one NIC is for every
//! process using it); its timestamp mask is a ConnectX's, 63 bits.

use crate::sys::kabi as k;

/// The NIC clock's rate, kHz, as the device reports it (`hca_core_clock`).
pub const HCA_CORE_CLOCK_KHZ: u64 = 156_250;
/// The valid bits of a CQE timestamp (`completion_timestamp_mask`), as a ConnectX reports.
pub const TIMESTAMP_MASK: u64 = 0x7fff_ffff_ffff_ffff;
/// The cycle counter's mask in the clock-info page (the mlx5 kernel driver's timecounter: 41
/// bits): `mlx5dv_ts_to_ns` converts within half of it (2^40 ticks, about 1.95 h) of the page's
/// pairing, so the page must be renewed before then.
pub const CLOCK_INFO_MASK: u64 = (1 << 41) - 1;
/// `mult` and `shift` of the clock-info page: ns = cycles * mult >> shift. 1e6 / 156250 = 6.4
/// ns per cycle; with shift 20, mult = 6710886 (6.4 * 2^20 = 6710886.4: 60 ppb slow, 0.06 ns a
/// millisecond), and a 41-bit delta times mult stays within 64 bits (2^41 * 2^23 = 2^64).
const CLOCK_INFO_SHIFT: u32 = 20;

fn clock_ns(id: libc::clockid_t) -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and a valid out-pointer (the vDSO answers it where the clock
    // source allows, as the TSC does here: 59 cycles a call measured, about 23 ns).
    unsafe { libc::clock_gettime(id, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Whether [`cqe_stamp`] records what it stamps ([`record_stamps`]).
static RECORD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// What [`cqe_stamp`] recorded: (NIC ticks, the TSC at the middle of the read, the TSC span of
/// the read).
static STAMPS: std::sync::Mutex<Vec<(u64, u64, u64)>> = std::sync::Mutex::new(Vec::new());

/// The timestamp of a CQE the model writes now ([`nic_clock`]); while [`record_stamps`] is on,
/// also the TSC around the read, so a test can hold a mapping of the NIC clock to the TSC
/// against the moment the model really stamped each completion (off: one relaxed load more).
pub(super) fn cqe_stamp() -> u64 {
    if !RECORD.load(std::sync::atomic::Ordering::Relaxed) {
        return nic_clock();
    }
    let t1 = crate::clock::start();
    let n = nic_clock();
    let t2 = crate::clock::stop();
    let w = t2.saturating_sub(t1);
    STAMPS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((n, t1 + w / 2, w));
    n
}

/// A test's hook: from now, every CQE timestamp this process's model writes is recorded with
/// the TSC around its read (`on`), or no longer; recorded ones so far are dropped.
pub fn record_stamps(on: bool) {
    STAMPS.lock().unwrap_or_else(|p| p.into_inner()).clear();
    RECORD.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// The stamps recorded since [`record_stamps`]: (NIC ticks, TSC at the middle of the read, its
/// TSC span), in the order written.
pub fn recorded_stamps() -> Vec<(u64, u64, u64)> {
    STAMPS.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// The NIC clock now: `CLOCK_MONOTONIC_RAW` scaled to [`HCA_CORE_CLOCK_KHZ`], masked to
/// [`TIMESTAMP_MASK`].
pub fn nic_clock() -> u64 {
    ticks_of(clock_ns(libc::CLOCK_MONOTONIC_RAW))
}

fn ticks_of(ns: u64) -> u64 {
    ((ns as u128 * HCA_CORE_CLOCK_KHZ as u128 / 1_000_000) as u64) & TIMESTAMP_MASK
}

/// The clock-info page's content (`struct mlx5_ib_clock_info`, version 1) taken now: the
/// counter and `CLOCK_REALTIME` read together (as the kernel's timecounter pairs its cycles with
/// real time), the conversion factors, the counter's width and the period within which it is
/// renewed (`overflow_period`, ns: a quarter of the width, about 59 min; libmlx5 passes it on
/// as `max_clock_info_update_nsec`). `sign` is even: no update in progress.
pub fn clock_info() -> k::mlx5_ib_clock_info {
    let real = clock_ns(libc::CLOCK_REALTIME);
    let cycles = nic_clock();
    let mask = CLOCK_INFO_MASK;
    let mult = (1_000_000u64 << CLOCK_INFO_SHIFT) / HCA_CORE_CLOCK_KHZ;
    k::mlx5_ib_clock_info {
        sign: 0,
        nsec: real,
        cycles: cycles & mask,
        mult: mult as u32,
        shift: CLOCK_INFO_SHIFT,
        mask,
        overflow_period: (((mask / 4) as u128 * mult as u128) >> CLOCK_INFO_SHIFT) as u64,
        ..Default::default()
    }
}

/// The core clock page's content for `ticks`: the internal timer's high word at 0 and low word
/// at 4, big-endian, as libmlx5's `mlx5_read_clock` reads them (high, low, high again).
pub fn core_clock_words(ticks: u64) -> [u8; 8] {
    let mut w = [0u8; 8];
    w[..4].copy_from_slice(&((ticks >> 32) as u32).to_be_bytes());
    w[4..].copy_from_slice(&(ticks as u32).to_be_bytes());
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counter_runs_at_the_declared_rate_against_the_raw_clock() {
        // 1 s of CLOCK_MONOTONIC_RAW is exactly HCA_CORE_CLOCK_KHZ * 1000 ticks
        assert_eq!(
            ticks_of(2_000_000_000) - ticks_of(1_000_000_000),
            HCA_CORE_CLOCK_KHZ * 1000
        );
        assert_eq!(ticks_of(u64::MAX) & !TIMESTAMP_MASK, 0);
        let a = nic_clock();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = nic_clock();
        // at least 2 ms of ticks (the sleep may last longer, never shorter)
        assert!(b - a >= 2 * HCA_CORE_CLOCK_KHZ, "{a} then {b}");
    }

    /// mlx5dv_ts_to_ns' arithmetic on the page gives the real time of a later counter value.
    #[test]
    fn the_clock_info_page_converts_cycles_to_real_time() {
        let ci = clock_info();
        assert_eq!(ci.sign & 1, 0);
        let later = ci.cycles + HCA_CORE_CLOCK_KHZ * 1000; // one second later
        let delta = (later - ci.cycles) & ci.mask;
        let ns = ci.nsec + ((delta * ci.mult as u64 + ci.frac) >> ci.shift);
        let off = ns as i64 - (ci.nsec + 1_000_000_000) as i64;
        // the factors are 60 ppb slow: 60 ns in a second, no more
        assert!((-100..=0).contains(&off), "{off} ns off after one second");
        // half the counter's width is the longest span converted: the product must not overflow
        assert!(((ci.mask / 2) as u128 * ci.mult as u128) < 1u128 << 64);
        // a quarter of 2^41 ticks of 6.4 ns: 3518 s
        assert!(
            (3_517..=3_519).contains(&(ci.overflow_period / 1_000_000_000)),
            "{}",
            ci.overflow_period
        );
    }

    #[test]
    fn the_clock_page_is_big_endian_high_then_low() {
        let w = core_clock_words(0x0123_4567_89ab_cdef);
        assert_eq!(w, [0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef]);
    }
}
