//! Runs until decided (`compare --until-decided MAX`, driven by `harness/until-decided.sh`): a
//! group-sequential rule. The sides' runs are looked at after 3, 4, ... `MAX` runs per side;
//! the 5 % a compare may spend on a false alarm is spread over these looks by a Lan–DeMets
//! spending function of Pocock's shape, `ALPHA · ln(1 + (e − 1) · t)` with `t` the share of
//! the looks made, and each look tests at its increment. The looks' levels sum to `ALPHA`, so
//! by Bonferroni's inequality over the looks the chance of any false alarm over the whole
//! sequence stays below `ALPHA` however the looks correlate (conservative: a boundary computed
//! from their correlation would be less strict). A row is decided when it is a regression or an
//! improvement at the look's level, or when its one-sided bound of the change in the worse
//! direction (at the look's level over the family's tested rows) is within its threshold: then
//! the change is below the threshold with that confidence. The looks are counted by runs per
//! side (t = look / looks, not a measured information fraction): the bound rests on the
//! Bonferroni sum, whatever the spending function's shape. Holm within a look (Benjamini–
//! Hochberg is refused: it bounds another rate).

use super::power::to_scale;
use super::{Adjust, CompareError, Options, Report, Row, Verdict, ALPHA, MIN_RUNS_FOR_T};
use crate::report::tdist::t_quantile_two_sided;

/// Most runs per side `--until-decided` takes.
pub const MAX_LOOK_RUNS: usize = 1000;

/// One look of the sequential rule.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Look {
    /// Runs per side at this look (the fewer of the two sides' files).
    pub runs: usize,
    /// Most runs per side (`--until-decided MAX`).
    pub max_runs: usize,
    /// This look, from 1 (3 runs per side).
    pub look: usize,
    /// How many looks the budget allows.
    pub looks: usize,
    /// This look's significance level: its increment of the spending function.
    pub alpha: f64,
    /// The level spent through this look.
    pub spent: f64,
}

impl Look {
    /// Whether the budget is spent: no further look.
    pub fn last(&self) -> bool {
        self.look == self.looks
    }
}

/// The share of `ALPHA` spent by the time `t` of the looks were made (Lan–DeMets, Pocock's
/// shape: early looks get a fair share, so a large change is decided in few runs).
pub fn spent(t: f64) -> f64 {
    ALPHA * (1.0 + (std::f64::consts::E - 1.0) * t.clamp(0.0, 1.0)).ln()
}

/// The look of `--until-decided` (none without it) that `files_base` and `files_new` files per
/// side make; refused with Benjamini–Hochberg, which bounds another rate.
pub(super) fn look_of(o: &Options, files_base: usize, files_new: usize) -> Result<Option<Look>, CompareError> {
    match o.until_decided {
        Some(_) if o.adjust == Adjust::BenjaminiHochberg => Err(CompareError::Sequential(
            "--adjust bh controls the share of false alarms among the alarms, not the chance of any: \
             the rule's bound needs holm"
                .into(),
        )),
        Some(max) => look(files_base, files_new, max).map(Some),
        None => Ok(None),
    }
}

/// The look that `base` and `new` files per side make with at most `max_runs` per side.
pub(super) fn look(files_base: usize, files_new: usize, max_runs: usize) -> Result<Look, CompareError> {
    let runs = files_base.min(files_new);
    let bad = |why: String| Err(CompareError::Sequential(why));
    if !(MIN_RUNS_FOR_T..=MAX_LOOK_RUNS).contains(&max_runs) {
        return bad(format!(
            "the most runs per side must be {MIN_RUNS_FOR_T} to {MAX_LOOK_RUNS} (got {max_runs})"
        ));
    }
    if runs < MIN_RUNS_FOR_T {
        return bad(format!(
            "{runs} run(s) on a side: the rule's first look is at {MIN_RUNS_FOR_T} runs per side (its test is Welch's over the runs)"
        ));
    }
    if runs > max_runs {
        return bad(format!("{runs} runs per side, more than the budget of {max_runs}"));
    }
    let looks = max_runs - MIN_RUNS_FOR_T + 1;
    let look = runs - MIN_RUNS_FOR_T + 1;
    let at = |k: usize| spent(k as f64 / looks as f64);
    Ok(Look {
        runs,
        max_runs,
        look,
        looks,
        alpha: at(look) - at(look - 1),
        spent: at(look),
    })
}

/// At a look, a row with fewer than 3 runs on a side (its run missing from some files) is
/// shown, not counted: its interval would rest on the blocks within its runs, which cannot
/// hold the run-to-run variation the rule's bound assumes.
pub(super) fn too_few_runs(rows: &mut [Row]) {
    for r in rows.iter_mut().filter(|r| r.runs_base.min(r.runs_new) < MIN_RUNS_FOR_T) {
        r.counts = false;
    }
}

/// Marks each row that counts decided or not at a look of level `alpha` (see the module).
pub(super) fn decide(rows: &mut [Row], alpha: f64) {
    let m = rows.iter().filter(|r| r.counts && r.p.is_some()).count().max(1);
    let a = alpha / m as f64;
    for r in rows.iter_mut().filter(|r| r.counts) {
        r.decided = Some(match r.verdict {
            Verdict::Regression | Verdict::Improvement => true,
            Verdict::NoInterval => false,
            Verdict::Same => within(r, a),
        });
    }
}

/// Whether a row's one-sided bound (level `a`) of its change in the worse direction is within
/// its threshold; only a row whose runs are the units (a known spread of the runs) can be.
fn within(r: &Row, a: f64) -> bool {
    let Some(s) = r.spread.filter(|s| s.sd.is_some()) else {
        return false;
    };
    let worse = if r.larger_is_worse { r.change } else { -r.change };
    let e = to_scale(worse, r.larger_is_worse, s.scale);
    let thr = to_scale(r.threshold, r.larger_is_worse, s.scale);
    // one-sided at a: the two-sided quantile at 2a
    e + t_quantile_two_sided(2.0 * a, s.df) * s.se < thr
}

/// The note of a look: the rule, this look's level, and the rows still undecided.
pub(super) fn note(r: &Report) -> Option<String> {
    let l = r.sequential?;
    let undecided: Vec<String> = r
        .rows
        .iter()
        .filter(|x| x.decided == Some(false))
        .map(|x| format!("{} {}", x.key, x.metric))
        .collect();
    Some(format!(
        "runs until decided: look {} of {} ({} runs per side; the looks are at 3, 4, ... {} runs per side). \
         Group-sequential rule: the 5 % a false alarm may take is spent over the looks by a Lan-DeMets function \
         of Pocock's shape, 5 % x ln(1 + (e - 1) t), t = look / looks; this look tests at its increment, \
         {:.4} % ({:.4} % spent through it), so over every look the chance of any false alarm stays below 5 % \
         (Bonferroni over the looks). A row is decided when it is a regression or an improvement at this \
         level, or when its one-sided bound of the change in the worse direction, at this level over the {} \
         tested rows, is within its threshold: then the change is below the threshold with confidence \
         1 - that level. The rows' intervals stay 95 %; rows with fewer than 3 runs on a side are shown, \
         not counted. {}",
        l.look,
        l.looks,
        l.runs,
        l.max_runs,
        l.alpha * 100.0,
        l.spent * 100.0,
        r.tested(),
        if undecided.is_empty() {
            "Every row that counts is decided.".to_string()
        } else {
            format!(
                "{} undecided{}: {}{}",
                undecided.len(),
                if l.last() { " with the budget spent" } else { "" },
                undecided.iter().take(8).cloned().collect::<Vec<_>>().join(", "),
                if undecided.len() > 8 { ", ..." } else { "" }
            )
        }
    ))
}
