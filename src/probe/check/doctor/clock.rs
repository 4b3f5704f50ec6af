//! `nic.clock`: the device's clock for completion timestamps, as `ibv_query_device_ex` states
//! it, measured against the TSC (21 pairs over 100 ms, [`NicClockMap`]) and checked against the
//! stated `hca_core_clock`: the precondition of the NIC-timestamp split of a round trip.

use super::{check, Check, Status};
use crate::verbs::{Context, NicClockCaps, NicClockMap, VerbsError};

const ID: &str = "nic.clock";

/// Opens `name` (model0 through its uverbs device) and checks its clock.
pub fn nic_clock_check(name: &str) -> Check {
    #[cfg(target_os = "linux")]
    if name == crate::model::DEVICE_NAME {
        if let Err(why) = crate::uverbs::status() {
            return check(
                ID,
                Status::Unknown,
                format!("model0 is not reachable through libibverbs here ({why}): its clock is not asked"),
                "",
            );
        }
    }
    let ctx = match Context::open(name) {
        Ok(c) => c,
        Err(e) => return check(ID, Status::Unknown, format!("{name}: {e}"), ""),
    };
    let caps = ctx.nic_clock_caps();
    let map = match &caps {
        Ok(c) if c.usable() => Some(measure(&ctx)),
        _ => None,
    };
    judge(name, caps, map)
}

fn measure(ctx: &Context) -> Result<NicClockMap, VerbsError> {
    let cal = crate::clock::Calibration::run(100_000_000).map_err(|e| VerbsError::Invalid {
        ctx: ctx.ctx(),
        why: format!("calibrating the TSC: {e}"),
    })?;
    NicClockMap::measure(ctx, cal.hz, std::time::Duration::from_millis(100), 21)
}

/// The check's outcome from what the device said and what was measured.
pub(super) fn judge(
    name: &str,
    caps: Result<NicClockCaps, VerbsError>,
    map: Option<Result<NicClockMap, VerbsError>>,
) -> Check {
    let c = match caps {
        Ok(c) => c,
        Err(e) => return check(ID, Status::Unknown, format!("{name}: {e}"), ""),
    };
    if c.timestamp_mask != 0 && c.hca_core_clock_khz == 0 {
        return check(
            ID,
            Status::Warn,
            format!(
                "{name} gives completion timestamps (mask {:#x}) but states no rate (hca_core_clock 0): they cannot \
                 be converted to time",
                c.timestamp_mask
            ),
            "a driver or firmware that reports the device's core clock",
        );
    }
    if !c.usable() {
        return check(
            ID,
            Status::NotApplicable,
            format!(
                "{name} gives no completion timestamps (completion_timestamp_mask {:#x}, hca_core_clock {} kHz): \
                 lat --anatomy splits a round trip on the hosts' clocks only",
                c.timestamp_mask, c.hca_core_clock_khz
            ),
            "",
        );
    }
    match map {
        None => check(ID, Status::Unknown, format!("{name}: its clock was not measured"), ""),
        Some(Err(e)) => check(
            ID,
            Status::Warn,
            format!(
                "{name} states a {} kHz clock, but mapping it to the TSC failed: {e}: its completion timestamps \
                 cannot be placed on the host's time",
                c.hca_core_clock_khz
            ),
            "the error names the step: the TSC's calibration, ibv_query_rt_values_ex (a provider without it has \
             no raw clock to read), or the fit of the pairs",
        ),
        Some(Ok(m)) => match m.rate_check() {
            Ok(()) => check(
                ID,
                Status::Pass,
                format!(
                    "{name}: hca_core_clock {} kHz stated, {:.1} kHz measured against the TSC over {} ms ({:+.1} \
                     ppm); mapping residual max {:.0} ns, one read spans {:.0} ns: within those {} ms a mapped \
                     timestamp is good to ±{:.0} ns (beyond them the clocks' drift adds to it)",
                    m.stated_khz,
                    m.measured_khz,
                    m.window_ns / 1_000_000,
                    m.ppm_shown(),
                    m.residual_max_ns,
                    m.read_span_ns,
                    m.window_ns / 1_000_000,
                    m.error_ns()
                ) + if name == crate::model::DEVICE_NAME {
                    "; on model0 the counter and the TSC's calibration both follow CLOCK_MONOTONIC_RAW: this \
                     checks the stated rate and the mapping, not a crystal"
                } else {
                    ""
                },
                "",
            ),
            Err(why) => check(
                ID,
                Status::Fail,
                format!("{name}: {why}"),
                "do not convert this device's timestamps with hca_core_clock; report the mismatch to the NIC's \
                 vendor (firmware) or the driver's maintainers",
            ),
        },
    }
}
