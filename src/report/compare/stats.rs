//! Statistics: the paired difference of blocks run in the same rounds (the summary's driver
//! overhead), the hierarchical bootstrap of runs and their blocks, Welch's t over the runs, Holm and Benjamini–Hochberg adjustment, and the verdict.

use super::{Adjust, RunSample, Verdict};
use crate::report::{percentile, tdist};

/// A small deterministic generator (SplitMix64).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in 0..n (n > 0).
    fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next()) * n as u128) >> 64) as usize
    }
}

const SEED: u64 = 0x005e_ed0f_c04d_4ae5;

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// The difference of a backend from its control over blocks run in the same rounds (the
/// backends interleaved block by block): per round, the backend's block figure minus the
/// control's; the point is the median of these differences and the interval a bootstrap of that
/// same median (the rounds resampled), so the point and its interval are one statistic.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Paired {
    /// Median of the per-round differences (the figures' unit).
    pub median: f64,
    /// 95 % percentile interval of the median (at least 3 rounds; `None` with fewer).
    pub interval: Option<(f64, f64)>,
    /// How many rounds were paired.
    pub rounds: usize,
}

/// [`Paired`] of `other` against `control`, block `i` of one with block `i` of the other (the
/// same round); `resamples` bootstrap draws (fixed seed: the same input gives the same interval).
/// `None` without a block on either side, or when their counts differ (not the same rounds).
pub fn paired_difference(control: &[f64], other: &[f64], resamples: usize) -> Option<Paired> {
    if control.is_empty() || control.len() != other.len() {
        return None;
    }
    let d: Vec<f64> = other.iter().zip(control).map(|(o, c)| o - c).collect();
    let n = d.len();
    let point = median(&mut d.clone());
    let interval = (n >= MIN_BLOCKS && resamples > 0).then(|| {
        let mut rng = Rng(SEED);
        let mut drawn = vec![0.0; n];
        let mut m: Vec<f64> = (0..resamples)
            .map(|_| {
                drawn.iter_mut().for_each(|x| *x = d[rng.below(n)]);
                median(&mut drawn)
            })
            .collect();
        m.sort_by(|a, b| a.total_cmp(b));
        (percentile(&m, 0.025), percentile(&m, 0.975))
    });
    Some(Paired {
        median: point,
        interval,
        rounds: n,
    })
}

/// The result of a hierarchical bootstrap.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Boot {
    /// 95 % percentile interval of the relative change.
    pub interval: (f64, f64),
    /// Two-sided p-value of "no change": twice the smaller share of resampled changes on one
    /// side of zero, counted with the observed one ((k + 1) / (rounds + 1)), at most 1.
    pub p: f64,
}

/// Fewest runs on each side for the run-level test (Welch's t on the runs' logarithms) and the
/// several-runs thresholds; with fewer, a side's blocks are resampled.
pub const MIN_RUNS_FOR_T: usize = 3;

/// Fewest blocks a run needs for them to be resampled.
const MIN_BLOCKS: usize = 3;
/// Fewest runs a side without per-block samples needs to be resampled.
const MIN_RUNS_WITHOUT_BLOCKS: usize = 3;

/// Whether a side has something to resample: per-block samples in every run, or enough runs.
fn resamplable(runs: &[RunSample]) -> bool {
    !runs.is_empty() && (runs.len() >= MIN_RUNS_WITHOUT_BLOCKS || runs.iter().all(|r| r.blocks.len() >= MIN_BLOCKS))
}

/// Median (the mean of the middle two for an even count); sorts in place. NaN when empty.
pub(super) fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The point estimate of a side: the median over its runs of each run's value (a run disturbed
/// by other work on the machine moves it less than it would move a mean).
pub fn point(runs: &[RunSample]) -> f64 {
    median(&mut runs.iter().map(|r| r.value).collect::<Vec<_>>())
}

/// Hierarchical bootstrap of the relative change point(new)/point(base) - 1: each round
/// resamples each side's runs with replacement, then within each drawn run its blocks with
/// replacement; a drawn run contributes its value scaled by its resampled blocks' mean over its
/// blocks' mean (the run's own figure, moved by its within-run noise; a run with fewer than 3
/// blocks contributes its value unchanged). The side's figure is the median over the drawn runs,
/// as the point estimate is. With one run per side only the within-run noise is resampled.
/// `None` when a side has nothing to resample (see `resamplable`) or `rounds` is 0.
pub fn hierarchical(base: &[RunSample], new: &[RunSample], rounds: usize) -> Option<Boot> {
    if !resamplable(base) || !resamplable(new) || rounds == 0 {
        return None;
    }
    let mut rng = Rng(SEED);
    let means: Vec<Vec<f64>> = [base, new]
        .iter()
        .map(|side| side.iter().map(|r| mean(&r.blocks)).collect())
        .collect();
    let mut drawn = Vec::with_capacity(base.len().max(new.len()));
    let mut draw = |runs: &[RunSample], block_means: &[f64], rng: &mut Rng| -> f64 {
        drawn.clear();
        for _ in 0..runs.len() {
            let i = rng.below(runs.len());
            let r = &runs[i];
            if r.blocks.len() >= MIN_BLOCKS {
                let n = r.blocks.len();
                let b: f64 = (0..n).map(|_| r.blocks[rng.below(n)]).sum::<f64>() / n as f64;
                drawn.push(r.value * b / block_means[i]);
            } else {
                drawn.push(r.value);
            }
        }
        median(&mut drawn)
    };
    let d: Vec<f64> = (0..rounds)
        .map(|_| {
            let b = draw(base, &means[0], &mut rng);
            draw(new, &means[1], &mut rng) / b - 1.0
        })
        .collect();
    Some(boot_of(d))
}

/// The interval and p-value of a bootstrap's resampled changes `d` (one per round): the 2.5th
/// and 97.5th percentiles, and twice the smaller share on one side of zero, counted with the
/// observed one ((k + 1) / (rounds + 1)), at most 1.
fn boot_of(mut d: Vec<f64>) -> Boot {
    let rounds = d.len();
    d.sort_by(|a, b| a.total_cmp(b));
    let below = d.iter().filter(|&&x| x <= 0.0).count();
    let above = d.iter().filter(|&&x| x >= 0.0).count();
    let p = (2.0 * (below.min(above) + 1) as f64 / (rounds + 1) as f64).min(1.0);
    Boot {
        interval: (percentile(&d, 0.025), percentile(&d, 0.975)),
        p,
    }
}

/// The geometric mean of the runs' values.
pub(super) fn geo_mean(runs: &[RunSample]) -> f64 {
    (runs.iter().map(|r| r.value.ln()).sum::<f64>() / runs.len().max(1) as f64).exp()
}

/// Welch's t on two samples: the difference of the means, its standard error and the degrees
/// of freedom; `None` with fewer than 2 on a side.
fn welch(b: &[f64], n: &[f64]) -> Option<(f64, f64, f64)> {
    if b.len() < 2 || n.len() < 2 {
        return None;
    }
    // each side's mean and the variance of its mean
    let mv = |v: &[f64]| {
        let (m, var) = mean_var(v);
        (m, var / v.len() as f64)
    };
    let ((mb, vb), (mn, vn)) = (mv(b), mv(n));
    let se2 = vb + vn;
    let df = if se2 > 0.0 {
        se2 * se2 / (vb * vb / (b.len() - 1) as f64 + vn * vn / (n.len() - 1) as f64)
    } else {
        f64::INFINITY
    };
    Some((mn - mb, se2.sqrt(), df))
}

/// The standard error and degrees of freedom of Welch's t between samples `b` and `n`, and
/// each one's standard deviation (what [`super::power`] needs); `None` with fewer than 2 on a
/// side.
pub(super) fn run_spread(b: &[f64], n: &[f64]) -> Option<(f64, f64, (f64, f64))> {
    let (_, se, df) = welch(b, n)?;
    let sd = |v: &[f64]| mean_var(v).1.sqrt();
    Some((se, df.min(1e6), (sd(b), sd(n))))
}

/// The mean and the sample variance (n - 1) of `v` (at least 2 values).
fn mean_var(v: &[f64]) -> (f64, f64) {
    let m = mean(v);
    (
        m,
        v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (v.len() - 1) as f64,
    )
}

/// The 95 % interval and two-sided p of a difference `d` with standard error `se` on `df`
/// degrees of freedom (no spread: the interval is the point, p 1 or 0).
fn t_interval(d: f64, se: f64, df: f64) -> ((f64, f64), f64) {
    if se <= 0.0 {
        return ((d, d), if d == 0.0 { 1.0 } else { 0.0 });
    }
    let q = tdist::t_quantile_two_sided(0.05, df);
    ((d - q * se, d + q * se), tdist::t_two_sided_p(d / se, df))
}

/// Welch's t-test on the logarithms of the runs' values (the change as a ratio): with several
/// process runs per side the runs are the units, as their variation is what a repeated
/// measurement shows (Kalibera and Jones). Returns the change exp(mean ln new - mean ln base) - 1,
/// its 95 % interval and the two-sided p-value; `None` with fewer than 2 runs on a side.
pub fn welch_runs(base: &[RunSample], new: &[RunSample]) -> Option<(f64, (f64, f64), f64)> {
    let logs = |v: &[RunSample]| v.iter().map(|r| r.value.ln()).collect::<Vec<f64>>();
    let (d, se, df) = welch(&logs(base), &logs(new))?;
    let ((lo, hi), p) = t_interval(d, se, df);
    Some((d.exp() - 1.0, (lo.exp() - 1.0, hi.exp() - 1.0), p))
}

/// Welch's t-test on the runs' values themselves (a contrast's differences, which may be
/// negative or near 0): the difference of the means NEW - BASE, its 95 % interval and the
/// two-sided p-value; `None` with fewer than 2 runs on a side.
pub fn welch_abs(base: &[RunSample], new: &[RunSample]) -> Option<(f64, (f64, f64), f64)> {
    let vals = |v: &[RunSample]| v.iter().map(|r| r.value).collect::<Vec<f64>>();
    let (d, se, df) = welch(&vals(base), &vals(new))?;
    let (iv, p) = t_interval(d, se, df);
    Some((d, iv, p))
}

/// Hierarchical bootstrap of a contrast's change point(new) - point(base), in its unit: each
/// round resamples each side's runs with replacement, then within each drawn run its blocks
/// (each a round's difference); a drawn run's figure is the median of its drawn blocks, as its
/// value is the median of its blocks (a run with fewer than 3 blocks: its value). The side's
/// figure is the median over the drawn runs. `None` when a side has nothing to resample.
pub fn hierarchical_abs(base: &[RunSample], new: &[RunSample], rounds: usize) -> Option<Boot> {
    if !resamplable(base) || !resamplable(new) || rounds == 0 {
        return None;
    }
    let mut rng = Rng(SEED);
    let (mut drawn, mut blocks) = (Vec::new(), Vec::new());
    let mut draw = |runs: &[RunSample], rng: &mut Rng| -> f64 {
        drawn.clear();
        for _ in 0..runs.len() {
            let r = &runs[rng.below(runs.len())];
            let n = r.blocks.len();
            if n >= MIN_BLOCKS {
                blocks.clear();
                blocks.extend((0..n).map(|_| r.blocks[rng.below(n)]));
                drawn.push(median(&mut blocks));
            } else {
                drawn.push(r.value);
            }
        }
        median(&mut drawn)
    };
    let d: Vec<f64> = (0..rounds)
        .map(|_| {
            let b = draw(base, &mut rng);
            draw(new, &mut rng) - b
        })
        .collect();
    Some(boot_of(d))
}

/// Adjusted p-values, in the input's order. Holm: the i-th smallest p times (m - i + 1), kept
/// non-decreasing; Benjamini–Hochberg: the i-th smallest times m / i, kept non-increasing from
/// the largest; both at most 1.
pub fn adjust(p: &[f64], how: Adjust) -> Vec<f64> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
    let mut out = vec![0.0; m];
    match how {
        Adjust::Holm => {
            let mut run_max: f64 = 0.0;
            for (i, &j) in order.iter().enumerate() {
                run_max = run_max.max(((m - i) as f64 * p[j]).min(1.0));
                out[j] = run_max;
            }
        }
        Adjust::BenjaminiHochberg => {
            let mut run_min: f64 = 1.0;
            for (i, &j) in order.iter().enumerate().rev() {
                run_min = run_min.min((m as f64 / (i + 1) as f64 * p[j]).min(1.0));
                out[j] = run_min;
            }
        }
    }
    out
}

/// A row's verdict: a regression (or an improvement) is a change beyond `threshold` in the worse
/// (better) direction with an adjusted p below `alpha`.
pub(super) fn verdict(
    change: f64,
    p_adjusted: Option<f64>,
    larger_is_worse: bool,
    threshold: f64,
    alpha: f64,
) -> Verdict {
    let Some(p) = p_adjusted else {
        return Verdict::NoInterval;
    };
    let worse = if larger_is_worse { change } else { -change };
    if p >= alpha {
        Verdict::Same
    } else if worse > threshold {
        Verdict::Regression
    } else if worse < -threshold {
        Verdict::Improvement
    } else {
        Verdict::Same
    }
}
