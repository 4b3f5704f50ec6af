//! The NIC's clock through verbs: what the device says of it (`ibv_query_device_ex`:
//! `completion_timestamp_mask`, `hca_core_clock`), its raw counter now
//! (`ibv_query_rt_values_ex`), and CQs whose completions carry the counter of their
//! completion (`ibv_create_cq_ex` with `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`, read with
//! `ibv_wc_read_completion_ts`). A device without them (rxe) answers 0 or `EOPNOTSUPP`, said as
//! such.

use super::cq::{Completion, Cq};
use super::device::Context;
use super::error::{check_ptr, Result, VerbsError};
use crate::sys;

/// What the device says of its clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct NicClockCaps {
    /// The valid bits of a completion timestamp; 0: the device gives none.
    pub timestamp_mask: u64,
    /// The clock's rate, kHz; 0: not reported.
    pub hca_core_clock_khz: u64,
}

impl NicClockCaps {
    /// Whether completions can carry timestamps of a clock of known rate.
    pub fn usable(&self) -> bool {
        self.timestamp_mask != 0 && self.hca_core_clock_khz != 0
    }
}

/// A completion with the NIC clock of its completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TsCompletion {
    /// The completion.
    pub c: Completion,
    /// `ibv_wc_read_completion_ts`: NIC clock ticks (within the device's timestamp mask).
    pub timestamp: u64,
    /// `ibv_wc_read_src_qp`: the sending QP of a receive completion (UD: who sent the datagram).
    pub src_qp: u32,
}

impl Context {
    /// `ibv_query_device_ex`: the completion timestamp mask and the clock's rate.
    pub fn nic_clock_caps(&self) -> Result<NicClockCaps> {
        let mut a = sys::ibv_device_attr_ex::default();
        // SAFETY: live context; no input; `a` is a valid out-struct of the size libibverbs passes.
        let rc = unsafe { sys::ibv_query_device_ex(self.as_ptr(), std::ptr::null(), &mut a) };
        if rc != 0 {
            return Err(VerbsError::Verb {
                verb: "ibv_query_device_ex",
                ctx: self.ctx(),
                source: std::io::Error::from_raw_os_error(rc.abs()),
            });
        }
        Ok(NicClockCaps {
            timestamp_mask: a.completion_timestamp_mask,
            hca_core_clock_khz: a.hca_core_clock,
        })
    }

    /// `ibv_query_rt_values_ex(IBV_VALUES_MASK_RAW_CLOCK)`: the NIC clock's counter now, as the
    /// provider reads it (libmlx5: the core clock page, in `tv_nsec`; taken here as
    /// `tv_sec * 10^9 + tv_nsec`, all 64 bits kept).
    pub fn nic_clock(&self) -> Result<u64> {
        // model0 through libmlx5: its timer page is memory, brought up to now before the read
        #[cfg(target_os = "linux")]
        if self.name() == crate::uverbs::IBDEV {
            crate::uverbs::device::refresh_clock();
        }
        let mut v = sys::ibv_values_ex {
            comp_mask: sys::IBV_VALUES_MASK_RAW_CLOCK,
            ..Default::default()
        };
        // SAFETY: live context; `v` is a valid in/out struct.
        let rc = unsafe { sys::ibv_query_rt_values_ex(self.as_ptr(), &mut v) };
        if rc != 0 {
            return Err(VerbsError::Verb {
                verb: "ibv_query_rt_values_ex",
                ctx: self.ctx(),
                source: std::io::Error::from_raw_os_error(rc.abs()),
            });
        }
        if v.comp_mask & sys::IBV_VALUES_MASK_RAW_CLOCK == 0 {
            return Err(VerbsError::Invalid {
                ctx: self.ctx(),
                why: "ibv_query_rt_values_ex succeeded without the raw clock".into(),
            });
        }
        Ok((v.raw_clock.tv_sec as u64)
            .wrapping_mul(1_000_000_000)
            .wrapping_add(v.raw_clock.tv_nsec as u64))
    }
}

impl Cq {
    /// `ibv_create_cq_ex` with room for at least `cqe` completions whose work completions carry
    /// the NIC clock (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`, besides the standard fields).
    pub fn with_timestamps(ctx: &Context, cqe: u32) -> Result<Self> {
        Self::with_timestamps_on(ctx, cqe, None)
    }

    /// As [`Cq::with_timestamps`], on completion channel `ch` when given (`-e`).
    pub fn with_timestamps_on(ctx: &Context, cqe: u32, ch: Option<&super::cq::CompChannel>) -> Result<Self> {
        let mut a = sys::ibv_cq_init_attr_ex {
            cqe,
            wc_flags: (sys::IBV_WC_STANDARD_FLAGS | sys::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) as u64,
            channel: ch.map_or(std::ptr::null_mut(), |c| c.as_ptr()),
            ..Default::default()
        };
        // SAFETY: live context; `a` is a valid attribute struct (the channel, if any, outlives
        // the CQ: the CQ holds it; no comp_mask).
        let ex = unsafe { sys::ibv_create_cq_ex(ctx.as_ptr(), &mut a) };
        let ex = check_ptr(ex, "ibv_create_cq_ex", || {
            ctx.ctx().detail(format!(
                "{cqe} entries, IBV_WC_EX_WITH_COMPLETION_TIMESTAMP{}",
                if ch.is_some() { ", completion channel" } else { "" }
            ))
        })?;
        // SAFETY: a live extended CQ; its plain CQ view.
        let cq = unsafe { sys::ibv_cq_ex_to_cq(ex) };
        Ok(Cq::from_ex(ctx, cq, ex, ch))
    }

    /// Whether its completions carry timestamps ([`Cq::with_timestamps`]).
    pub fn has_timestamps(&self) -> bool {
        !self.inner.ex.is_null()
    }

    /// Polls up to `max` completions with their timestamps (`ibv_start_poll`, `ibv_next_poll`,
    /// `ibv_end_poll`), appended to `out`; returns how many. A CQ made without timestamps is an
    /// error, not zeros.
    pub fn poll_ts(&self, out: &mut Vec<TsCompletion>, max: usize) -> Result<usize> {
        #[cfg(target_os = "linux")]
        if !self.inner.ex.is_null() && max > 0 && self.inner.ctx.name() == crate::uverbs::IBDEV {
            crate::uverbs::progress();
        }
        self.poll_ts_here(out, max)
    }

    /// As [`Cq::poll_ts`], without letting model0 progress first: for a caller that does (a
    /// backend's model hook).
    #[inline]
    pub fn poll_ts_here(&self, out: &mut Vec<TsCompletion>, max: usize) -> Result<usize> {
        let cq = self.inner.ex;
        if cq.is_null() {
            return Err(VerbsError::Invalid {
                ctx: self.inner.ctx.ctx(),
                why: "poll_ts on a CQ made without completion timestamps".into(),
            });
        }
        if max == 0 {
            return Ok(0);
        }
        let mut attr = sys::ibv_poll_cq_attr::default();
        // SAFETY: a live extended CQ of ours; valid attribute struct.
        let mut rc = unsafe { sys::ibv_start_poll(cq, &mut attr) };
        let mut n = 0;
        while rc == 0 {
            // SAFETY: a current completion between start_poll and end_poll.
            out.push(unsafe { read_current(cq) });
            n += 1;
            if n == max {
                break;
            }
            // SAFETY: as above.
            rc = unsafe { sys::ibv_next_poll(cq) };
        }
        if n > 0 || rc == 0 {
            // SAFETY: start_poll succeeded: the poll is ended once.
            unsafe { sys::ibv_end_poll(cq) };
        }
        if rc != 0 && rc != libc::ENOENT {
            return Err(VerbsError::Verb {
                verb: if n == 0 { "ibv_start_poll" } else { "ibv_next_poll" },
                ctx: self.inner.ctx.ctx(),
                source: std::io::Error::from_raw_os_error(rc.abs()),
            });
        }
        Ok(n)
    }
}

/// The current completion of an extended CQ.
///
/// # Safety
/// `cq` is a live extended CQ made with the standard flags and the timestamp, between a
/// successful `ibv_start_poll`/`ibv_next_poll` and `ibv_end_poll`.
unsafe fn read_current(cq: *mut sys::ibv_cq_ex) -> TsCompletion {
    // SAFETY: the caller's promise: every reader asked for at creation is set.
    unsafe {
        // an error completion has its id, status, QP and vendor syndrome only
        let ok = (*cq).status == sys::IBV_WC_SUCCESS;
        let flags = if ok { sys::ibv_wc_read_wc_flags(cq) } else { 0 };
        TsCompletion {
            c: Completion {
                wr_id: (*cq).wr_id,
                status: (*cq).status,
                opcode: if ok { sys::ibv_wc_read_opcode(cq) } else { 0 },
                // libmlx5 reads byte 54 of the CQE: a good CQE's timestamp is there
                vendor_err: if ok { 0 } else { sys::ibv_wc_read_vendor_err(cq) },
                byte_len: if ok { sys::ibv_wc_read_byte_len(cq) } else { 0 },
                qp_num: sys::ibv_wc_read_qp_num(cq),
                imm: (ok && flags & sys::IBV_WC_WITH_IMM != 0).then(|| u32::from_be(sys::ibv_wc_read_imm_data(cq))),
            },
            timestamp: if ok { sys::ibv_wc_read_completion_ts(cq) } else { 0 },
            src_qp: if ok { sys::ibv_wc_read_src_qp(cq) } else { 0 },
        }
    }
}

/// How far the NIC clock's measured rate may stray from the rate the device states, ppm: an
/// oscillator's tolerance (ConnectX crystals: within 100 ppm) with room for the TSC's own
/// calibration; a wrong rate (ns taken for ticks, another model's clock) is off by percent.
pub const RATE_TOLERANCE_PPM: f64 = 1000.0;

/// What a fit of the NIC clock against the TSC found (see [`NicClockMap`]), as the JSON keeps it.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MapSummary {
    /// The rate the device states (`hca_core_clock`), kHz.
    pub stated_khz: u64,
    /// The rate measured against the TSC, kHz.
    pub measured_khz: f64,
    /// (measured − stated) / stated, ppm.
    pub rate_error_ppm: f64,
    /// The largest distance of a pair from the fitted line, ns.
    pub residual_max_ns: f64,
    /// The median TSC span around one NIC clock read, ns: where in it the NIC read its clock is
    /// unknown, so a mapped timestamp is uncertain by half of it besides the residual.
    pub read_span_ns: f64,
    /// Time spanned by the pairs, ns.
    pub window_ns: u64,
    /// Pairs fitted.
    pub pairs: usize,
    /// Pairs left out: their read spanned more than 4 times the median (an interruption), or
    /// they did not come after the pair before them in both clocks.
    pub pairs_dropped: usize,
    /// A mapped timestamp's stated error within the window the pairs spanned, ns: the largest
    /// residual and half the median read span. Outside the window the rate's own uncertainty
    /// and the NIC crystal's drift against the TSC add to it (not measured here).
    pub error_ns: f64,
}

/// The largest stated error of a map used: an error that large would let any timestamp pass
/// a causality check (a map whose reads were nearly all interrupted can state one).
pub const MAX_MAP_ERROR_NS: f64 = 1e6;

impl MapSummary {
    /// The rate error, ppm, rounded to a tenth before its sign is printed (no -0.0).
    pub fn ppm_shown(&self) -> f64 {
        (self.rate_error_ppm * 10.0).round() / 10.0 + 0.0
    }

    /// Whether the map can be used, else why not: every figure finite and in range, at least 3
    /// pairs, its stated error its residual and half its read span and at most
    /// [`MAX_MAP_ERROR_NS`], its rate (from its measured and stated kHz) within
    /// [`RATE_TOLERANCE_PPM`] of the stated one.
    pub fn check(&self) -> std::result::Result<(), String> {
        let m = self;
        let figures = [
            m.measured_khz,
            m.rate_error_ppm,
            m.residual_max_ns,
            m.read_span_ns,
            m.error_ns,
        ];
        let ppm = (m.measured_khz / m.stated_khz as f64 - 1.0) * 1e6;
        let why = if figures.iter().any(|f| !f.is_finite())
            || m.residual_max_ns < 0.0
            || m.read_span_ns < 0.0
            || m.measured_khz <= 0.0
        {
            "a figure that is not one"
        } else if m.stated_khz == 0 || m.pairs < 3 {
            "no stated rate, or fewer than 3 pairs"
        } else if (m.error_ns - m.residual_max_ns - m.read_span_ns / 2.0).abs() > 1e-6 * m.error_ns.max(1.0) {
            "a stated error other than its residual and half its read span"
        } else if ppm.abs() > RATE_TOLERANCE_PPM {
            "a rate beyond the tolerance of its stated one"
        } else if m.error_ns > MAX_MAP_ERROR_NS {
            "a stated error over 1 ms (its reads interrupted)"
        } else {
            return Ok(());
        };
        Err(format!(
            "the map of the NIC clock has {why} ({:.1} kHz measured, {} stated, error {:.1} ns, {} pairs)",
            m.measured_khz, m.stated_khz, m.error_ns, m.pairs
        ))
    }
}

/// The NIC clock mapped to the TSC: pairs of one NIC clock read (`ibv_query_rt_values_ex`)
/// bracketed by two TSC reads, taken across a window and fitted by least squares as the TSC is
/// calibrated; its rate checked against the device's `hca_core_clock`. Its figures are its
/// [`MapSummary`] (through `Deref`).
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct NicClockMap {
    /// What the fit found.
    #[serde(flatten)]
    pub fit: MapSummary,
    /// x: TSC ticks, y: NIC ticks.
    #[serde(skip)]
    line: crate::clock::Line,
    #[serde(skip)]
    tsc_hz: f64,
}

impl std::ops::Deref for NicClockMap {
    type Target = MapSummary;
    fn deref(&self) -> &MapSummary {
        &self.fit
    }
}

impl NicClockMap {
    /// Fits `(tsc at the middle of the read, NIC ticks, TSC span of the read)` triples, the
    /// TSC at `tsc_hz`, against the stated rate.
    /// A pair whose span exceeds 4 times the median span (the thread was interrupted between
    /// its reads), or that does not come after the pair before it in both clocks, is left out,
    /// and counted.
    pub fn fit(pairs: &[(u64, u64, u64)], tsc_hz: f64, stated_khz: u64) -> std::result::Result<Self, String> {
        if stated_khz == 0 || tsc_hz.is_nan() || tsc_hz <= 0.0 {
            return Err(format!(
                "the NIC clock against the TSC: a stated rate of {stated_khz} kHz and a TSC of {tsc_hz} Hz cannot be compared"
            ));
        }
        let mut spans: Vec<u64> = pairs.iter().map(|p| p.2).collect();
        spans.sort_unstable();
        let limit = spans.get(spans.len() / 2).map_or(0, |m| m.saturating_mul(4));
        // a pair that does not come after the one before it in both clocks (a read that was
        // cached, or a TSC read on another CPU) cannot be fitted: left out, and counted
        let mut kept: Vec<(u64, u64, u64)> = Vec::with_capacity(pairs.len());
        for p in pairs.iter().copied().filter(|p| p.2 <= limit) {
            if kept.last().is_none_or(|l| p.0 > l.0 && p.1 > l.1) {
                kept.push(p);
            }
        }
        if kept.len() < 3 {
            return Err(format!(
                "the NIC clock against the TSC: {} of {} pairs read within 4 times the median span and in order, 3 needed",
                kept.len(),
                pairs.len()
            ));
        }
        let pts: Vec<(u64, u64)> = kept.iter().map(|&(t, n, _)| (t, n)).collect();
        let line = crate::clock::fit_line(&pts)
            .map_err(|e| format!("the NIC clock against the TSC, {} pairs: {e}", pts.len()))?;
        let pairs = &kept[..];
        let ns = |ticks: f64| ticks * 1e9 / tsc_hz;
        let measured_khz = line.slope * tsc_hz / 1e3;
        let window = pairs[pairs.len() - 1].0 - pairs[0].0;
        let (residual_max_ns, read_span_ns) = (ns(line.residual_max_x), ns(spans[spans.len() / 2] as f64));
        Ok(NicClockMap {
            fit: MapSummary {
                stated_khz,
                measured_khz,
                rate_error_ppm: (measured_khz / stated_khz as f64 - 1.0) * 1e6,
                residual_max_ns,
                read_span_ns,
                window_ns: ns(window as f64) as u64,
                pairs: pairs.len(),
                pairs_dropped: spans.len() - pairs.len(),
                error_ns: residual_max_ns + read_span_ns / 2.0,
            },
            line,
            tsc_hz,
        })
    }

    /// Measures the map of `ctx`'s NIC clock: `pairs` pairs evenly spread over `window` (the
    /// thread sleeps between them), each the narrowest TSC bracket of 8 reads.
    pub fn measure(ctx: &Context, tsc_hz: f64, window: std::time::Duration, pairs: usize) -> Result<Self> {
        let caps = ctx.nic_clock_caps()?;
        let got = Self::pairs(&mut || ctx.nic_clock(), window, pairs).map_err(|e| match e {
            VerbsError::Invalid { why, .. } => VerbsError::Invalid { ctx: ctx.ctx(), why },
            e => e,
        })?;
        Self::fit(&got, tsc_hz, caps.hca_core_clock_khz).map_err(|why| VerbsError::Invalid { ctx: ctx.ctx(), why })
    }

    /// `pairs` pairs of the NIC clock `read` and the TSC, evenly spread over `window` (the
    /// thread sleeps between them), each the narrowest TSC bracket of 8 reads: `(TSC at the
    /// middle of the read, NIC ticks, TSC span)`, for [`NicClockMap::fit`].
    pub fn pairs(
        read: &mut dyn FnMut() -> Result<u64>,
        window: std::time::Duration,
        pairs: usize,
    ) -> Result<Vec<(u64, u64, u64)>> {
        let n = u32::try_from(pairs)
            .ok()
            .filter(|n| (3..=100_000).contains(n))
            .ok_or_else(|| VerbsError::Invalid {
                ctx: crate::verbs::Ctx::default(),
                why: format!("{pairs} pairs to map the NIC clock: 3 to 100000"),
            })?;
        let step = window / (n - 1);
        let mut got = Vec::with_capacity(pairs);
        for i in 0..pairs {
            if i > 0 {
                std::thread::sleep(step);
            }
            got.push(Self::one_pair(read)?);
        }
        Ok(got)
    }

    /// One pair of the NIC clock `read` and the TSC: the narrowest TSC bracket of 8 reads, as
    /// `(TSC at the middle of the read, NIC ticks, TSC span)`.
    pub fn one_pair(read: &mut dyn FnMut() -> Result<u64>) -> Result<(u64, u64, u64)> {
        let mut best = (u64::MAX, 0u64, 0u64);
        for _ in 0..8 {
            let t1 = crate::clock::start();
            let nic = read()?;
            let t2 = crate::clock::stop();
            let w = t2.wrapping_sub(t1);
            if w < best.0 {
                best = (w, nic, t1 + w / 2);
            }
        }
        Ok((best.2, best.1, best.0))
    }

    /// The check against the stated rate: `Err` says by how much the rate is off.
    pub fn rate_check(&self) -> std::result::Result<(), String> {
        if self.rate_error_ppm.abs() <= RATE_TOLERANCE_PPM {
            return Ok(());
        }
        Err(format!(
            "the NIC clock runs at {:.1} kHz against the TSC ({} pairs over {} ms), the device states {} kHz \
             (hca_core_clock): {:+.0} ppm, beyond the {RATE_TOLERANCE_PPM} ppm allowed; its timestamps converted at \
             the stated rate would be off by {:+.2} %",
            self.measured_khz,
            self.pairs,
            self.window_ns / 1_000_000,
            self.stated_khz,
            self.rate_error_ppm,
            self.rate_error_ppm / 1e4
        ))
    }

    /// The stated error of a mapped timestamp within the window the pairs spanned, ns (the
    /// summary's `error_ns`).
    pub fn error_ns(&self) -> f64 {
        self.fit.error_ns
    }

    /// The TSC (ticks) at which the NIC clock read `nic`, on the fitted line.
    pub fn tsc_of(&self, nic: u64) -> f64 {
        self.line.x0 as f64 + self.line.dx_at(nic)
    }

    /// The TSC at which the NIC clock read `nic`, on the fitted line, in ticks since the TSC
    /// `base` (the difference taken in integers first: an absolute TSC as a float loses
    /// nanoseconds after weeks of uptime).
    pub fn tsc_since(&self, nic: u64, base: u64) -> f64 {
        self.line.x0.wrapping_sub(base) as i64 as f64 + self.line.dx_at(nic)
    }

    /// One tick of the NIC clock at its stated rate, ns: a timestamp is its counter truncated,
    /// up to one tick before the moment it stands for.
    pub fn tick_ns(&self) -> f64 {
        1e6 / self.stated_khz as f64
    }

    /// NIC ticks to ns at the measured rate (a difference of two timestamps).
    pub fn ticks_to_ns(&self, ticks: f64) -> f64 {
        ticks / self.line.slope * 1e9 / self.tsc_hz
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pairs of a NIC clock at `khz` against a 2.6 GHz TSC, every 5 ms, reads 80 ns wide, with
    /// `jitter` TSC ticks added to every other pair's TSC.
    fn pairs(khz: f64, jitter: u64) -> Vec<(u64, u64, u64)> {
        let hz = 2.6e9;
        (0..21u64)
            .map(|i| {
                let tsc = 1_000_000_000 + i * 13_000_000;
                let nic = 5_000_000 + ((tsc - 1_000_000_000) as f64 * khz * 1e3 / hz) as u64;
                (tsc + (i % 2) * jitter, nic, 208)
            })
            .collect()
    }

    #[test]
    fn a_clock_at_its_stated_rate_passes_and_maps_back() {
        let m = NicClockMap::fit(&pairs(156_250.0, 0), 2.6e9, 156_250).unwrap();
        assert!(m.rate_error_ppm.abs() < 1.0, "{m:?}");
        assert!(m.rate_check().is_ok());
        assert!((m.read_span_ns - 80.0).abs() < 0.5, "{m:?}");
        assert_eq!(m.window_ns, 100_000_000);
        // the NIC tick of the fifth pair maps back to its TSC, to a NIC tick (6.4 ns = 17 TSC)
        let p = pairs(156_250.0, 0)[5];
        assert!(
            (m.tsc_of(p.1) - p.0 as f64).abs() < 17.0,
            "{} vs {}",
            m.tsc_of(p.1),
            p.0
        );
        assert!((m.ticks_to_ns(156_250.0) - 1e6).abs() < 1.0);
    }

    /// Point 4: a NIC clock whose rate is not the one the device states is caught, whether the
    /// stated rate is 1 GHz (ns taken for ticks) or off by 0.5 %.
    #[test]
    fn a_wrong_rate_is_caught_by_the_check_against_hca_core_clock() {
        let m = NicClockMap::fit(&pairs(156_250.0, 0), 2.6e9, 1_000_000).unwrap();
        let e = m.rate_check().unwrap_err();
        assert!(e.contains("states 1000000 kHz") && e.contains("-84.3"), "{e}");
        let m = NicClockMap::fit(&pairs(157_031.25, 0), 2.6e9, 156_250).unwrap();
        assert!((m.rate_error_ppm - 5000.0).abs() < 10.0, "{m:?}");
        assert!(m.rate_check().is_err());
        // no stated rate: nothing to compare, not an infinite error
        assert!(NicClockMap::fit(&pairs(156_250.0, 0), 2.6e9, 0).is_err());
    }

    /// A pair whose reads were interrupted (a wide span: its middle is no time of the NIC's
    /// read) is left out, so it cannot tilt the rate; too many such pairs is an error.
    #[test]
    fn interrupted_reads_are_left_out() {
        let mut p = pairs(156_250.0, 0);
        p[20].0 += 2_600_000; // 1 ms late, as a preempted read's middle would be
        p[20].2 = 5_200_000;
        let m = NicClockMap::fit(&p, 2.6e9, 156_250).unwrap();
        assert_eq!((m.pairs, m.pairs_dropped), (20, 1));
        assert!(m.rate_error_ppm.abs() < 1.0 && m.rate_check().is_ok(), "{m:?}");
        // most reads wide: nothing to leave out, and the error says so
        for q in p.iter_mut().take(11) {
            q.2 = 5_200_000;
        }
        let m = NicClockMap::fit(&p, 2.6e9, 156_250).unwrap();
        assert!(m.pairs_dropped == 0 && m.error_ns() >= 1e6, "{m:?}");
        assert!(NicClockMap::fit(&p[..2], 2.6e9, 156_250).is_err());
        // a pair read again with the same NIC tick (a cached read) is left out, not an error
        let mut q = pairs(156_250.0, 0);
        q.insert(6, (q[5].0 + 100, q[5].1, 208));
        let m = NicClockMap::fit(&q, 2.6e9, 156_250).unwrap();
        assert_eq!((m.pairs, m.pairs_dropped), (21, 1));
    }

    #[test]
    fn the_residual_says_how_far_the_pairs_stray() {
        // every other pair's TSC 2600 ticks (1 us) late: about half of it from the line
        let m = NicClockMap::fit(&pairs(156_250.0, 2600), 2.6e9, 156_250).unwrap();
        assert!(m.residual_max_ns > 400.0 && m.residual_max_ns < 600.0, "{m:?}");
        assert!(m.error_ns() > m.residual_max_ns);
        assert!(NicClockMap::fit(&pairs(156_250.0, 0)[..1], 2.6e9, 156_250).is_err());
    }
}
