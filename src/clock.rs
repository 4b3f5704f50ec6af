//! The TSC clock: fenced `rdtsc`/`rdtscp` reads, invariant-TSC detection, the TSC rate from
//! CPUID leaf 0x15 or calibrated against `CLOCK_MONOTONIC_RAW`, and the measured cost of an
//! empty timed region. `core` only: it builds without `std` and never allocates.
//!
//! A timed region is `let t0 = clock::start(); ...; let t1 = clock::stop();`:
//! - `start` = `lfence; rdtsc; lfence`: earlier instructions have finished before the read, and
//!   the timed work cannot start before it.
//! - `stop` = `rdtscp; lfence`: `rdtscp` waits for the timed work to finish, the `lfence` keeps
//!   later instructions from starting before the read.
//!
//! On other architectures the "cycles" are nanoseconds of `CLOCK_MONOTONIC_RAW` and
//! [`Calibration::source`] says so ([`TscSource::ClockGettime`]): reports must warn.

/// Where the tick rate came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "std", derive(serde::Serialize))]
#[cfg_attr(feature = "std", serde(rename_all = "snake_case"))]
pub enum TscSource {
    /// CPUID leaf 0x15 (TSC/crystal ratio times the crystal frequency).
    Cpuid15,
    /// Calibrated against `CLOCK_MONOTONIC_RAW` (CPUID gives no rate: common in VMs, on AMD).
    Calibrated,
    /// No TSC on this architecture: ticks are `CLOCK_MONOTONIC_RAW` nanoseconds.
    ClockGettime,
}

impl TscSource {
    /// A short name for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            TscSource::Cpuid15 => "cpuid-0x15",
            TscSource::Calibrated => "calibrated-monotonic-raw",
            TscSource::ClockGettime => "clock_gettime-fallback",
        }
    }
}

/// Why calibration failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockError {
    /// `clock_gettime(CLOCK_MONOTONIC_RAW)` failed with this errno.
    ClockGettime(i32),
    /// The TSC did not advance, or went backwards, across the calibration window.
    NotMonotonic,
    /// Fewer than two usable points.
    TooFewPoints,
}

impl core::fmt::Display for ClockError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ClockError::ClockGettime(e) => write!(f, "clock_gettime(CLOCK_MONOTONIC_RAW) failed: errno {e}"),
            ClockError::NotMonotonic => write!(f, "the TSC did not advance monotonically during calibration"),
            ClockError::TooFewPoints => write!(f, "calibration needs at least two points"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ClockError {}

/// Reads the timestamp counter at the start of a timed region (`lfence; rdtsc; lfence`).
#[inline(always)]
pub fn start() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_mm_lfence, _rdtsc};
        // SAFETY: lfence and rdtsc are available on every x86_64 CPU (SSE2 is baseline) and
        // touch no memory.
        unsafe {
            _mm_lfence();
            let t = _rdtsc();
            _mm_lfence();
            t
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        monotonic_raw_ns().unwrap_or(0)
    }
}

/// Reads the timestamp counter at the end of a timed region (`rdtscp; lfence`).
#[inline(always)]
pub fn stop() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{__rdtscp, _mm_lfence};
        let mut aux = 0u32;
        // SAFETY: rdtscp writes only `aux`, a local; lfence touches no memory. rdtscp exists on
        // every x86_64 CPU this tool targets (checked by `has_rdtscp` in `calibrate`).
        unsafe {
            let t = __rdtscp(&mut aux);
            _mm_lfence();
            t
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        monotonic_raw_ns().unwrap_or(0)
    }
}

/// `CLOCK_MONOTONIC_RAW` in nanoseconds.
pub fn monotonic_raw_ns() -> Result<u64, ClockError> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into `ts`, a valid local.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_RAW, &mut ts) };
    if rc != 0 {
        return Err(ClockError::ClockGettime(errno()));
    }
    Ok(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// The CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`), ns; 0 when it cannot
/// be read.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into `ts`, a valid local.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The times the kernel took the calling thread off its CPU to run something else (involuntary
/// context switches, `getrusage(RUSAGE_THREAD)`'s `ru_nivcsw`); `None` when it cannot be read.
pub fn thread_involuntary_switches() -> Option<u64> {
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut ru: libc::rusage = unsafe { core::mem::zeroed() };
    // SAFETY: getrusage writes one rusage into `ru`, a valid local.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    (rc == 0).then_some(ru.ru_nivcsw as u64)
}

fn errno() -> i32 {
    // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() }
}

/// What CPUID says about the TSC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuidTsc {
    /// CPUID 0x8000_0007 EDX bit 8: the TSC runs at a constant rate in every P-, C- and T-state.
    pub invariant: bool,
    /// `rdtscp` is available (CPUID 0x8000_0001 EDX bit 27).
    pub rdtscp: bool,
    /// The rate from leaf 0x15, when it gives both the ratio and the crystal frequency.
    pub hz: Option<u64>,
}

/// Reads the TSC facts from CPUID.
pub fn cpuid_tsc() -> CpuidTsc {
    #[cfg(target_arch = "x86_64")]
    {
        let id = x86::cpuid::CpuId::new();
        let invariant = id.get_advanced_power_mgmt_info().is_some_and(|p| p.has_invariant_tsc());
        let rdtscp = id
            .get_extended_processor_and_feature_identifiers()
            .is_some_and(|f| f.has_rdtscp());
        let hz = id.get_tsc_info().and_then(|t| {
            if t.denominator() != 0 && t.numerator() != 0 && t.nominal_frequency() != 0 {
                Some(t.nominal_frequency() as u64 * t.numerator() as u64 / t.denominator() as u64)
            } else {
                None
            }
        });
        CpuidTsc { invariant, rdtscp, hz }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        CpuidTsc::default()
    }
}

/// A least-squares fit of TSC ticks against nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fit {
    /// Ticks per second.
    pub hz: f64,
    /// The largest distance of a point from the fitted line, in ns.
    pub residual_max_ns: f64,
    /// Time spanned by the points, in ns.
    pub window_ns: u64,
}

/// A least-squares line `y = y0 + my + slope * (x - x0 - mx)` through `(x, y)` points, kept
/// relative to the first point so that 64-bit counters lose no precision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Line {
    /// The first point.
    pub x0: u64,
    /// The first point.
    pub y0: u64,
    /// Mean of `x - x0`.
    pub mx: f64,
    /// Mean of `y - y0`.
    pub my: f64,
    /// dy/dx.
    pub slope: f64,
    /// The largest distance of a point from the line, in units of x.
    pub residual_max_x: f64,
}

impl Line {
    /// The line's y at `x` (relative to `y0`).
    pub fn dy_at(&self, x: u64) -> f64 {
        self.my + self.slope * (x.wrapping_sub(self.x0) as i64 as f64 - self.mx)
    }

    /// The line's x (relative to `x0`) where it reaches `y`.
    pub fn dx_at(&self, y: u64) -> f64 {
        self.mx + (y.wrapping_sub(self.y0) as i64 as f64 - self.my) / self.slope
    }
}

/// Fits a line through `(x, y)` points by least squares; both coordinates must increase.
pub fn fit_line(points: &[(u64, u64)]) -> Result<Line, ClockError> {
    if points.len() < 2 {
        return Err(ClockError::TooFewPoints);
    }
    let (x0, y0) = points[0];
    for w in points.windows(2) {
        if w[1].1 <= w[0].1 || w[1].0 <= w[0].0 {
            return Err(ClockError::NotMonotonic);
        }
    }
    let n = points.len() as f64;
    let (mut sx, mut sy) = (0.0f64, 0.0f64);
    for &(x, y) in points {
        sx += (x - x0) as f64;
        sy += (y - y0) as f64;
    }
    let (mx, my) = (sx / n, sy / n);
    let (mut sxy, mut sxx) = (0.0f64, 0.0f64);
    for &(x, y) in points {
        let dx = (x - x0) as f64 - mx;
        let dy = (y - y0) as f64 - my;
        sxy += dx * dy;
        sxx += dx * dx;
    }
    if sxx <= 0.0 || sxy <= 0.0 {
        return Err(ClockError::NotMonotonic);
    }
    let mut line = Line {
        x0,
        y0,
        mx,
        my,
        slope: sxy / sxx,
        residual_max_x: 0.0,
    };
    for &(x, y) in points {
        let d = ((y - y0) as f64 - line.dy_at(x)) / line.slope;
        let d = if d < 0.0 { -d } else { d };
        if d > line.residual_max_x {
            line.residual_max_x = d;
        }
    }
    Ok(line)
}

/// Fits `tsc = a + hz * ns / 1e9` through `(ns, tsc)` points by least squares.
pub fn fit_rate(points: &[(u64, u64)]) -> Result<Fit, ClockError> {
    let line = fit_line(points)?;
    Ok(Fit {
        hz: line.slope * 1e9, // ticks per ns
        residual_max_ns: line.residual_max_x,
        window_ns: points[points.len() - 1].0 - line.x0,
    })
}

/// One (ns, tsc) pair, the TSC read bracketing the clock read as tightly as in 8 tries.
fn paired_read() -> Result<(u64, u64), ClockError> {
    let mut best = (u64::MAX, 0u64, 0u64);
    for _ in 0..8 {
        let t1 = start();
        let ns = monotonic_raw_ns()?;
        let t2 = stop();
        let width = t2.wrapping_sub(t1);
        if width < best.0 {
            best = (width, ns, t1 + width / 2);
        }
    }
    Ok((best.1, best.2))
}

/// Number of points taken over a calibration window.
pub const CALIBRATION_POINTS: usize = 41;

/// Calibrates the TSC against `CLOCK_MONOTONIC_RAW` over `window_ns` (at least 100 ms is
/// enforced), taking [`CALIBRATION_POINTS`] evenly spaced points. It spins for the window.
pub fn calibrate_against_monotonic(window_ns: u64) -> Result<Fit, ClockError> {
    let window_ns = window_ns.max(100_000_000);
    let step = window_ns / (CALIBRATION_POINTS as u64 - 1);
    let mut pts = [(0u64, 0u64); CALIBRATION_POINTS];
    let first = paired_read()?;
    pts[0] = first;
    for (i, p) in pts.iter_mut().enumerate().skip(1) {
        let target = first.0 + step * i as u64;
        while monotonic_raw_ns()? < target {
            core::hint::spin_loop();
        }
        *p = paired_read()?;
    }
    fit_rate(&pts)
}

/// The cost of an empty timed region (`start(); stop()`), in ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "std", derive(serde::Serialize))]
pub struct Overhead {
    /// Smallest of the samples (TSC ticks).
    #[cfg_attr(feature = "std", serde(rename = "min_ticks"))]
    pub min_cycles: u64,
    /// Median of the samples (TSC ticks).
    #[cfg_attr(feature = "std", serde(rename = "median_ticks"))]
    pub median_cycles: u64,
    /// 99th percentile of the samples (TSC ticks).
    #[cfg_attr(feature = "std", serde(rename = "p99_ticks"))]
    pub p99_cycles: u64,
    /// How many regions were timed.
    pub samples: u32,
}

/// Number of empty regions timed by [`measure_overhead`].
pub const OVERHEAD_SAMPLES: usize = 4096;

/// Times [`OVERHEAD_SAMPLES`] empty regions and returns their min, median and p99.
pub fn measure_overhead() -> Overhead {
    let mut s = [0u64; OVERHEAD_SAMPLES];
    // Warm up the path (and the TSC-reading microcode) first.
    for _ in 0..256 {
        let a = start();
        let b = stop();
        core::hint::black_box(b.wrapping_sub(a));
    }
    for v in s.iter_mut() {
        let a = start();
        let b = stop();
        *v = b.wrapping_sub(a);
    }
    overhead_from_samples(&mut s)
}

/// Summarises timed-region samples (sorts them in place).
pub fn overhead_from_samples(s: &mut [u64]) -> Overhead {
    if s.is_empty() {
        return Overhead::default();
    }
    s.sort_unstable();
    let n = s.len();
    Overhead {
        min_cycles: s[0],
        median_cycles: s[n / 2],
        p99_cycles: s[((n * 99) / 100).min(n - 1)],
        samples: n as u32,
    }
}

/// The counter's step: the smallest non-zero difference between two back-to-back reads, in
/// ticks (1 on bare metal; tens on some hypervisors, which update the TSC in steps). A timed
/// region is only resolved to this grid.
pub fn tsc_step_ticks() -> u64 {
    let mut step = u64::MAX;
    let mut prev = start();
    for _ in 0..20_000 {
        let t = start();
        let d = t.wrapping_sub(prev);
        if d > 0 && d < step {
            step = d;
        }
        prev = t;
    }
    if step == u64::MAX {
        1
    } else {
        step
    }
}

/// Everything known about the clock after start-up.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "std", derive(serde::Serialize))]
pub struct Calibration {
    /// Ticks per second used for every conversion.
    pub hz: f64,
    /// Where `hz` came from.
    pub source: TscSource,
    /// Invariant TSC per CPUID (always false for the clock_gettime fallback).
    pub invariant_tsc: bool,
    /// The rate CPUID leaf 0x15 gives, if any.
    pub cpuid_hz: Option<u64>,
    /// The rate calibrated against `CLOCK_MONOTONIC_RAW` (also a cross-check when CPUID gives one).
    pub calibrated_hz: f64,
    /// The calibration's largest residual from its fitted line, in ns.
    pub calibration_residual_ns: f64,
    /// The calibration window, in ns.
    pub calibration_window_ns: u64,
    /// The measured cost of an empty timed region.
    pub overhead: Overhead,
}

impl Calibration {
    /// A calibration stated, not measured: a TSC of `hz` (calibrated at that rate, no overhead
    /// measured), for the tests of what converts ticks.
    #[cfg(test)]
    pub(crate) fn stated(hz: f64) -> Self {
        Calibration {
            hz,
            source: TscSource::Calibrated,
            invariant_tsc: true,
            cpuid_hz: None,
            calibrated_hz: hz,
            calibration_residual_ns: 0.0,
            calibration_window_ns: 0,
            overhead: Overhead::default(),
        }
    }

    /// Calibrates (spinning for `window_ns`, at least 100 ms) and measures the timed-region cost.
    pub fn run(window_ns: u64) -> Result<Self, ClockError> {
        if cfg!(not(target_arch = "x86_64")) {
            return Ok(Calibration {
                hz: 1e9,
                source: TscSource::ClockGettime,
                invariant_tsc: false,
                cpuid_hz: None,
                calibrated_hz: 1e9,
                calibration_residual_ns: 0.0,
                calibration_window_ns: 0,
                overhead: measure_overhead(),
            });
        }
        let id = cpuid_tsc();
        let fit = calibrate_against_monotonic(window_ns)?;
        let (hz, source) = match id.hz {
            Some(h) => (h as f64, TscSource::Cpuid15),
            None => (fit.hz, TscSource::Calibrated),
        };
        Ok(Calibration {
            hz,
            source,
            invariant_tsc: id.invariant,
            cpuid_hz: id.hz,
            calibrated_hz: fit.hz,
            calibration_residual_ns: fit.residual_max_ns,
            calibration_window_ns: fit.window_ns,
            overhead: measure_overhead(),
        })
    }

    /// Converts ticks to nanoseconds.
    #[inline(always)]
    pub fn to_ns(&self, ticks: u64) -> f64 {
        ticks as f64 * 1e9 / self.hz
    }

    /// Converts nanoseconds to ticks (rounded to nearest).
    #[inline]
    pub fn to_ticks(&self, ns: f64) -> u64 {
        (ns * self.hz / 1e9 + 0.5) as u64
    }

    /// Median empty-region cost in ns: figures at or below it are not real measurements.
    pub fn overhead_ns(&self) -> f64 {
        self.to_ns(self.overhead.median_cycles)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_recovers_exact_rate() {
        // 2.5 GHz, offset 12345 ticks, points every 10 ms.
        let pts: [(u64, u64); 11] =
            core::array::from_fn(|i| (1_000 + i as u64 * 10_000_000, 12_345 + i as u64 * 25_000_000));
        let f = fit_rate(&pts).unwrap();
        assert!((f.hz - 2.5e9).abs() < 1e-3, "{}", f.hz);
        assert!(f.residual_max_ns < 1e-6);
        assert_eq!(f.window_ns, 100_000_000);
    }

    #[test]
    fn fit_reports_residual_of_an_outlier() {
        // 1 GHz (1 tick per ns); the middle point is 500 ticks (= 500 ns) late.
        let mut pts: [(u64, u64); 5] = core::array::from_fn(|i| (i as u64 * 1_000_000, i as u64 * 1_000_000));
        pts[2].1 += 500;
        let f = fit_rate(&pts).unwrap();
        // The line moves toward the outlier by 100 ns (500/5), so the outlier sits 400 ns off.
        assert!((f.residual_max_ns - 400.0).abs() < 1.0, "{}", f.residual_max_ns);
        assert!((f.hz - 1e9).abs() < 1.0);
    }

    #[test]
    fn fit_rejects_backwards_and_short_input() {
        assert_eq!(fit_rate(&[(0, 0)]), Err(ClockError::TooFewPoints));
        assert_eq!(fit_rate(&[(0, 10), (10, 5)]), Err(ClockError::NotMonotonic));
        assert_eq!(fit_rate(&[(0, 10), (0, 20)]), Err(ClockError::NotMonotonic));
    }

    #[test]
    fn overhead_summary() {
        let mut s = [9u64, 1, 5, 3, 7, 100, 2, 4, 6, 8];
        let o = overhead_from_samples(&mut s);
        assert_eq!(o.min_cycles, 1);
        assert_eq!(o.median_cycles, 6);
        assert_eq!(o.p99_cycles, 100);
        assert_eq!(o.samples, 10);
        assert_eq!(overhead_from_samples(&mut []), Overhead::default());
    }

    #[test]
    fn conversions_round_trip() {
        let c = Calibration {
            hz: 2_994_000_000.0,
            source: TscSource::Calibrated,
            invariant_tsc: true,
            cpuid_hz: None,
            calibrated_hz: 2_994_000_000.0,
            calibration_residual_ns: 0.0,
            calibration_window_ns: 0,
            overhead: Overhead {
                min_cycles: 30,
                median_cycles: 36,
                p99_cycles: 40,
                samples: 1,
            },
        };
        assert!((c.to_ns(2_994) - 1000.0).abs() < 1e-9);
        assert_eq!(c.to_ticks(1000.0), 2_994);
        assert!((c.overhead_ns() - 12.024).abs() < 0.001);
    }

    #[test]
    fn timestamps_advance() {
        let a = start();
        let b = stop();
        assert!(b >= a);
    }
}
