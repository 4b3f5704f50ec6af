//! `compare`: matches the runs of BASE and NEW result files and decides, per run and metric,
//! whether NEW is a regression. Each file is one process run; a side may have several. The
//! interval of the change is a hierarchical bootstrap (the runs resampled, then the blocks
//! within each resampled run), so with several files per side it contains the run-to-run
//! variation; with one file per side it cannot, and a higher default threshold stands in for
//! it. A regression is a change beyond the threshold in the worse direction whose bootstrap
//! p-value, adjusted over all rows of the compare (Holm or Benjamini–Hochberg), is below 5 %.
//! Deterministic: the same inputs always give the same verdict.
#![forbid(unsafe_code)]

mod input;
mod render;
mod stats;
#[cfg(test)]
mod tests;
mod types;

pub use input::{load, parse, RunSample};
pub use render::{junit, markdown, text};
pub use stats::{adjust, hierarchical, paired_difference, point, welch_runs, Boot, Paired, MIN_RUNS_FOR_T};
pub use types::{Adjust, CompareError, Options, Report, Row, Verdict};

use input::side;
use serde_json::Value;
use stats::{geo_mean, verdict};

/// Bootstrap resamples per row: enough for a p-value near 1/5000 (Holm over a hundred rows at
/// 5 % needs 0.0005 for the smallest).
pub const ROUNDS: usize = 10_000;

/// Significance level of the adjusted p-values.
pub const ALPHA: f64 = 0.05;

/// Default thresholds (percent) by row: (scenario, metric, several runs on both sides, one run
/// on a side). With one run on a side the interval holds only the noise within that run, so the
/// threshold must stand above the run-to-run variation. Measured on model0 (a shared 2-CPU VM)
/// between process runs of one configuration (`harness/compare-calibration.sh`, 120 ordered
/// pairs of identical 3-second `lat write -s 8` runs, three backends each): the worst row of a
/// pair rose beyond 20 % (p50) or 50 % (p99) in 16 of 120 pairs, beyond 30 % or 75 % in 4 of
/// 120 (one run per side: 30 and 75 keep false alarms under 1 in 20); `bw` averages a factor of 2 apart under load; `post-cost` per-WQE p50 up to
/// +102 % (two states a process lands in: SEND 8 B inline, doorbell mode, postlist 32 measured
/// 4.8 and 9.7 ns per WQE in two processes; one run per side needs 150 %), so that three runs against
/// three can split +56 % apart with no change at all. With several runs per side the interval
/// holds the variation that the runs show, and the threshold is the smallest change worth a
/// report; for post-cost it also covers the states three runs can miss.
#[rustfmt::skip]
pub const DEFAULT_THRESHOLDS_PCT: [(&str, &str, f64, f64); 5] = [
    ("lat",       "p50",   5.0,  30.0),
    ("lat",       "p99",  20.0,  75.0),
    ("bw",        "bw",   10.0,  50.0),
    ("post_cost", "p50",  75.0, 150.0),
    ("post_cost", "p99", 100.0, 100.0),
];

/// The default threshold (percent) of a row of `scenario` and `metric`, for several runs on both
/// sides or not (a row not in [`DEFAULT_THRESHOLDS_PCT`]: 10 and 50).
pub fn default_threshold_pct(scenario: &str, metric: &str, several_runs: bool) -> f64 {
    let (several, one) = DEFAULT_THRESHOLDS_PCT
        .iter()
        .find(|(s, m, _, _)| *s == scenario && *m == metric)
        .map(|&(_, _, a, b)| (a, b))
        .unwrap_or((10.0, 50.0));
    if several_runs {
        several
    } else {
        one
    }
}
const ENV_FIELDS: [&str; 14] = [
    "kernel",
    "cpu_model",
    "rdma_core_built",
    "libibverbs_version",
    "libibverbs_loaded",
    "clocksource",
    "invariant_tsc",
    "device",
    "provider",
    "firmware",
    "governor",
    "software_model",
    "virtualized",
    "env_vars",
];

/// Compares BASE's files with NEW's: (path, loaded document) each, one process run per file.
pub fn compare_sets(base: &[(String, Value)], new: &[(String, Value)], o: &Options) -> Result<Report, CompareError> {
    refuse_a_run_twice(base, new)?;
    // documents of an older schema read as the current one
    let (base, new) = (&upgraded(base)[..], &upgraded(new)[..]);
    let (Some(b0), Some(n0)) = (base.first(), new.first()) else {
        return Err(CompareError::Foreign {
            path: "(none)".into(),
            why: "a side has no file".into(),
        });
    };
    let env_diff = ENV_FIELDS
        .iter()
        .filter_map(|f| {
            let (a, b) = (&b0.1["environment"][f], &n0.1["environment"][f]);
            (a != b).then(|| (f.to_string(), a.to_string(), b.to_string()))
        })
        .collect();
    let side_diff = side_diff(base, new);
    let (brows, bkeys) = side(base, &o.metrics)?;
    let (nrows, nkeys) = side(new, &o.metrics)?;
    let mut rows = Vec::new();
    for ((k, m), (bs, worse_up)) in &brows {
        let Some((ns, _)) = nrows.get(&(k.clone(), m.clone())) else {
            continue;
        };
        rows.push(row(k, m, bs, ns, *worse_up, o));
    }
    give_verdicts(&mut rows, o.adjust);
    // regressions first; within a verdict, the runs' order (stable)
    rows.sort_by_key(|r| r.verdict.rank());
    Ok(Report {
        env_diff,
        side_diff,
        files_base: base.len(),
        files_new: new.len(),
        rows,
        only_base: bkeys.difference(&nkeys).cloned().collect(),
        only_new: nkeys.difference(&bkeys).cloned().collect(),
        threshold_pct: o.threshold_pct,
        adjust: o.adjust,
        rounds: o.rounds,
    })
}

/// One process run per file: a document given twice on a side would count one run as two.
fn refuse_a_run_twice(base: &[(String, Value)], new: &[(String, Value)]) -> Result<(), CompareError> {
    for (side, files) in [("BASE", base), ("NEW", new)] {
        for (i, (p, d)) in files.iter().enumerate() {
            if let Some((q, _)) = files[..i].iter().find(|(_, e)| e == d) {
                return Err(CompareError::SameRunTwice {
                    side,
                    first: q.clone(),
                    second: p.clone(),
                });
            }
        }
    }
    Ok(())
}

/// A side's documents, those of an older schema upgraded to the current one.
fn upgraded(s: &[(String, Value)]) -> Vec<(String, Value)> {
    s.iter()
        .map(|(p, d)| {
            let mut d = d.clone();
            super::schema::upgrade(&mut d);
            (p.clone(), d)
        })
        .collect()
}

/// The environment fields in which a side's later files differ from its first: (side, field,
/// file).
fn side_diff(base: &[(String, Value)], new: &[(String, Value)]) -> Vec<(String, String, String)> {
    let mut side_diff = Vec::new();
    for (name, files) in [("BASE", base), ("NEW", new)] {
        for (path, doc) in &files[1..] {
            for f in ENV_FIELDS {
                if doc["environment"][f] != files[0].1["environment"][f] {
                    side_diff.push((name.to_string(), f.to_string(), path.clone()));
                }
            }
        }
    }
    side_diff
}

/// The row of run key `k` and metric `m` from BASE's runs `bs` and NEW's `ns`: the figures,
/// the change, its interval and p-value, the threshold; not adjusted, no verdict yet.
fn row(k: &str, m: &str, bs: &[RunSample], ns: &[RunSample], larger_is_worse: bool, o: &Options) -> Row {
    let (bv, nv) = (point(bs), point(ns));
    let runs = bs.len().min(ns.len());
    // several runs on both sides: the runs are the units (Welch's t on their logarithms,
    // an honest p-value however few they are); one run on a side: its blocks, resampled
    let (bv, nv, change, boot) = match welch_runs(bs, ns) {
        // the figures the test compares: the runs' geometric means
        Some((c, iv, p)) if runs >= MIN_RUNS_FOR_T => (geo_mean(bs), geo_mean(ns), c, Some(Boot { interval: iv, p })),
        _ => (bv, nv, nv / bv - 1.0, hierarchical(bs, ns, o.rounds)),
    };
    let scenario = k.split(' ').next().unwrap_or("");
    let threshold = o
        .threshold_pct
        .unwrap_or_else(|| default_threshold_pct(scenario, m, runs >= MIN_RUNS_FOR_T))
        / 100.0;
    Row {
        key: k.to_string(),
        metric: m.to_string(),
        unit: unit(scenario, m),
        runs_base: bs.len(),
        runs_new: ns.len(),
        base: bv,
        new: nv,
        change,
        interval: boot.map(|b| b.interval),
        p: boot.map(|b| b.p),
        p_adjusted: None,
        threshold,
        larger_is_worse,
        verdict: Verdict::NoInterval,
    }
}

/// The unit of a row's figures, by its scenario and metric.
fn unit(scenario: &str, metric: &str) -> &'static str {
    match (scenario, metric) {
        (_, "bw") => "MiB/s",
        ("post_cost", _) => "ns/WQE",
        _ => "ns",
    }
}

/// The p-values adjusted over every row that has one, then each row's verdict.
fn give_verdicts(rows: &mut [Row], how: Adjust) {
    let tested: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].p.is_some()).collect();
    let ps: Vec<f64> = tested.iter().filter_map(|&i| rows[i].p).collect();
    for (&i, q) in tested.iter().zip(adjust(&ps, how)) {
        rows[i].p_adjusted = Some(q);
    }
    for r in rows {
        r.verdict = verdict(r.change, r.p_adjusted, r.larger_is_worse, r.threshold);
    }
}

/// Compares two loaded result documents, one run per side (see [`compare_sets`]).
pub fn compare(base: &Value, new: &Value, o: &Options) -> Result<Report, CompareError> {
    compare_sets(&[("BASE".into(), base.clone())], &[("NEW".into(), new.clone())], o)
}
