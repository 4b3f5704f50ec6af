//! Power: the smallest change each row could have found (80 % power, at the level its family's
//! adjustment can demand, beyond its threshold), and with a target effect the runs per side it
//! would take.

use super::Row;
use crate::report::tdist::t_quantile_two_sided;

/// The power the detectable change is stated at.
pub const POWER: f64 = 0.8;

/// Most runs per side `--target-effect` looks for.
pub const MAX_RUNS: usize = 100;

/// The scale a row's test works on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scale {
    /// Logarithms of the runs' values (Welch's t over the runs of a backend's own row).
    Log,
    /// The unit itself, a change told over this figure (a contrast's difference).
    Abs(f64),
    /// The relative change (a bootstrap row: one run on a side).
    Rel,
}

/// What a row's test rests on: the standard error of its estimate on its scale, the degrees
/// of freedom, and the spread of a run on each side (standard deviations, on the same scale)
/// when the runs are the units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// The scale.
    pub scale: Scale,
    /// Standard error of the estimate.
    pub se: f64,
    /// Degrees of freedom (large for the bootstrap's normal approximation).
    pub df: f64,
    /// Per-run standard deviations of BASE and NEW, when the runs are the units.
    pub sd: Option<(f64, f64)>,
}

/// Degrees of freedom standing for the normal distribution.
const NORMAL_DF: f64 = 1e6;

impl Spread {
    /// From a bootstrap interval of the relative change (95 %, two-sided): its width over
    /// 2 x 1.96, the normal approximation.
    pub fn from_interval((lo, hi): (f64, f64)) -> Spread {
        Spread {
            scale: Scale::Rel,
            se: (hi - lo) / (2.0 * 1.959_964),
            df: NORMAL_DF,
            sd: None,
        }
    }
}

/// How many runs per side a row would need to find `--target-effect`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Needed {
    /// This many runs per side (80 % power).
    Runs(usize),
    /// More than [`MAX_RUNS`].
    MoreThan(usize),
    /// The target is within the row's threshold: never a regression at any number of runs.
    BelowThreshold,
    /// One run on a side: the spread between runs is not known.
    Unknown,
}

/// A change in the worse direction (a fraction) on the row's scale.
pub(super) fn to_scale(x: f64, worse_up: bool, s: Scale) -> f64 {
    match s {
        Scale::Log if worse_up => x.ln_1p(),
        Scale::Log if x < 1.0 => -(-x).ln_1p(),
        Scale::Log => f64::INFINITY,
        Scale::Abs(level) => x * level,
        Scale::Rel => x,
    }
}

/// An effect on the row's scale as a change in the worse direction (a fraction).
fn from_scale(e: f64, worse_up: bool, s: Scale) -> f64 {
    match s {
        Scale::Log if worse_up => e.exp_m1(),
        Scale::Log => -(-e).exp_m1(),
        Scale::Abs(level) => e / level,
        Scale::Rel => e,
    }
}

/// The smallest effect (on the row's scale) found with [`POWER`] by a two-sided test at level
/// `alpha` with standard error `se` and `df` degrees of freedom, that must also pass `thr`.
fn detectable(thr: f64, se: f64, df: f64, alpha: f64) -> f64 {
    let q_a = t_quantile_two_sided(alpha, df);
    let q_p = t_quantile_two_sided(2.0 * (1.0 - POWER), df);
    thr.max(q_a * se) + q_p * se
}

/// Each row's detectable change and, with `target` (a fraction), the runs per side it needs.
/// A family is the rows that count, or those shown beside them; its level is `level` (ALPHA,
/// or a sequential look's) over its tested rows (Bonferroni: the strictest step of Holm's, so
/// the figure holds for either adjustment).
pub fn state(rows: &mut [Row], target: Option<f64>, level: f64) {
    for counts in [true, false] {
        let m = rows
            .iter()
            .filter(|r| r.counts == counts && r.p.is_some())
            .count()
            .max(1);
        let alpha = level / m as f64;
        for r in rows.iter_mut().filter(|r| r.counts == counts && r.p.is_some()) {
            let Some(s) = r.spread else { continue };
            let thr = to_scale(r.threshold, r.larger_is_worse, s.scale);
            r.detectable = Some(from_scale(
                detectable(thr, s.se, s.df, alpha),
                r.larger_is_worse,
                s.scale,
            ));
            r.needed = target.map(|t| needed(t, thr, s, r.larger_is_worse, alpha));
        }
    }
}

/// The runs per side that find `target` (a fraction) with [`POWER`].
fn needed(target: f64, thr: f64, s: Spread, worse_up: bool, alpha: f64) -> Needed {
    let t = to_scale(target, worse_up, s.scale);
    if t <= thr {
        return Needed::BelowThreshold;
    }
    let Some((sb, sn)) = s.sd else {
        return Needed::Unknown;
    };
    // fewer runs than the run-level test needs are judged another way (the blocks, the one-run
    // thresholds): the answer starts where the spread of the runs is what decides
    for n in super::MIN_RUNS_FOR_T..=MAX_RUNS {
        let se = ((sb * sb + sn * sn) / n as f64).sqrt();
        if detectable(thr, se, (2 * n - 2) as f64, alpha) <= t {
            return Needed::Runs(n);
        }
    }
    Needed::MoreThan(MAX_RUNS)
}
