//! `compare`: matches the runs of BASE and NEW result files and decides, per run and metric,
//! whether NEW is a regression. Each file is one process run; a side may have several. The
//! interval of the change is a hierarchical bootstrap (the runs resampled, then the blocks
//! within each resampled run), so with several files per side it contains the run-to-run
//! variation; with one file per side it cannot, and a higher default threshold stands in for
//! it. A regression is a change beyond the threshold in the worse direction whose bootstrap
//! p-value, adjusted over all rows of the compare (Holm or Benjamini–Hochberg), is below 5 %.
//! Deterministic: the same inputs always give the same verdict.
#![forbid(unsafe_code)]

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Bootstrap resamples per row: enough for a p-value near 1/5000 (Holm over a hundred rows at
/// 5 % needs 0.0005 for the smallest).
pub const ROUNDS: usize = 10_000;

/// Significance level of the adjusted p-values.
pub const ALPHA: f64 = 0.05;

/// Default thresholds (percent) by row: (scenario, metric, several runs on both sides, one run
/// on a side). With one run on a side the interval holds only the noise within that run, so the
/// threshold must stand above the run-to-run variation. Measured on model0 (a shared 2-CPU VM)
/// between process runs of one configuration: `lat write -s 8` p50 up to about +-25 %, p99 up to
/// about +-50 % (the median p99 of three runs against three: up to +-15 %); `bw` averages a factor of 2 apart under load; `post-cost` per-WQE p50 up to
/// +102 % (two states a process lands in: SEND 8 B inline, doorbell mode, postlist 32 measured
/// 4.8 and 9.7 ns per WQE in two processes; one run per side needs 150 %), so that three runs against
/// three can split +56 % apart with no change at all. With several runs per side the interval
/// holds the variation that the runs show, and the threshold is the smallest change worth a
/// report; for post-cost it also covers the states three runs can miss.
#[rustfmt::skip]
pub const DEFAULT_THRESHOLDS_PCT: [(&str, &str, f64, f64); 5] = [
    ("lat",       "p50",   5.0,  20.0),
    ("lat",       "p99",  20.0,  50.0),
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

/// Why files cannot be compared.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompareError {
    /// Not readable.
    #[error("{path}: {why}")]
    Unreadable {
        /// File.
        path: String,
        /// What went wrong.
        why: String,
    },
    /// Not an rdmaprobe result, or another schema.
    #[error("{path}: {why}")]
    Foreign {
        /// File.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// A run carries a value compare cannot use (zero, negative, not finite, not a number).
    #[error("{path}: run '{run}': {why}")]
    BadValue {
        /// File.
        path: String,
        /// The run's key.
        run: String,
        /// Which field, and what is wrong with it.
        why: String,
    },
    /// Two runs of one file have the same key: which one to compare is ambiguous.
    #[error("{path}: run '{run}' appears more than once in the file (runs are matched by scenario, operation, backend, size and parameters)")]
    DuplicateRun {
        /// File.
        path: String,
        /// The run's key.
        run: String,
    },
    /// One side names the same document twice (the same file, or a copy): one process run would
    /// count as two.
    #[error("{side} names one run twice: {first} and {second} are the same file or have the same contents")]
    SameRunTwice {
        /// `BASE` or `NEW`.
        side: &'static str,
        /// The first file.
        first: String,
        /// The second.
        second: String,
    },
}

/// Verdict of one comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Worse beyond the threshold, and significantly.
    Regression,
    /// Better beyond the threshold, and significantly.
    Improvement,
    /// Within the threshold or the noise.
    Same,
    /// No samples to judge the noise by (no per-block samples and fewer than three runs on a
    /// side): not judged, never a regression.
    NoInterval,
}

impl Verdict {
    /// The word a report shows.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Regression => "REGRESSION",
            Verdict::Improvement => "improvement",
            Verdict::Same => "same",
            Verdict::NoInterval => "not judged",
        }
    }
}

/// Multiple-comparison adjustment of the rows' p-values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Adjust {
    /// Holm's step-down: controls the chance of any false alarm (family-wise error rate).
    Holm,
    /// Benjamini–Hochberg: controls the expected share of false alarms among the alarms.
    BenjaminiHochberg,
}

impl Adjust {
    /// Its name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Adjust::Holm => "Holm",
            Adjust::BenjaminiHochberg => "Benjamini-Hochberg",
        }
    }
}

/// How to compare.
#[derive(Debug, Clone)]
pub struct Options {
    /// Threshold in percent; `None`: the row's default for its scenario, metric and number of runs
    /// ([`DEFAULT_THRESHOLDS_PCT`]).
    pub threshold_pct: Option<f64>,
    /// Metrics (`p50`, `p99`, `bw`).
    pub metrics: Vec<String>,
    /// Adjustment over the rows.
    pub adjust: Adjust,
    /// Bootstrap resamples per row.
    pub rounds: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            threshold_pct: None,
            metrics: vec!["p50".into(), "p99".into(), "bw".into()],
            adjust: Adjust::Holm,
            rounds: ROUNDS,
        }
    }
}

/// One matched run and metric.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    /// The run's key (scenario, op, backend, size, parameters).
    pub key: String,
    /// Metric name (`p50`, `p99`, `bw`).
    pub metric: String,
    /// Runs (files) of BASE that have this row.
    pub runs_base: usize,
    /// Runs (files) of NEW that have this row.
    pub runs_new: usize,
    /// BASE value: the median over BASE's runs of each run's value.
    pub base: f64,
    /// NEW value: the median over NEW's runs of each run's value.
    pub new: f64,
    /// Relative change, NEW over BASE minus 1 (positive = larger).
    pub change: f64,
    /// 95 % bootstrap interval of the relative change (none: nothing to resample).
    pub interval: Option<(f64, f64)>,
    /// Two-sided bootstrap p-value of "no change".
    pub p: Option<f64>,
    /// The p-value adjusted over all rows of this compare that have one.
    pub p_adjusted: Option<f64>,
    /// The threshold this row was judged with, as a fraction.
    pub threshold: f64,
    /// Larger is worse (latency) or better (bandwidth).
    pub larger_is_worse: bool,
    /// The verdict.
    pub verdict: Verdict,
}

/// The whole comparison.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// Environment fields that differ between the first BASE and the first NEW file:
    /// (field, BASE, NEW).
    pub env_diff: Vec<(String, String, String)>,
    /// Environment fields that differ between the files of one side: (side, field, file).
    pub side_diff: Vec<(String, String, String)>,
    /// Files of BASE.
    pub files_base: usize,
    /// Files of NEW.
    pub files_new: usize,
    /// Matched rows.
    pub rows: Vec<Row>,
    /// Runs only in BASE.
    pub only_base: Vec<String>,
    /// Runs only in NEW.
    pub only_new: Vec<String>,
    /// The threshold given on the command line (percent), if any.
    pub threshold_pct: Option<f64>,
    /// The adjustment used.
    pub adjust: Adjust,
    /// Bootstrap resamples per row.
    pub rounds: usize,
}

impl Report {
    /// Whether any row is a regression.
    pub fn regressed(&self) -> bool {
        self.rows.iter().any(|r| r.verdict == Verdict::Regression)
    }

    /// Rows with a p-value (the family the adjustment runs over).
    pub fn tested(&self) -> usize {
        self.rows.iter().filter(|r| r.p.is_some()).count()
    }

    /// Whether some row has a single run on a side (its interval cannot hold run-to-run
    /// variation).
    pub fn single_run(&self) -> bool {
        self.rows.iter().any(|r| r.runs_base.min(r.runs_new) < MIN_RUNS_FOR_T)
    }

    /// What the verdicts rest on, in sentences, for every output format.
    pub fn notes(&self) -> Vec<String> {
        let mut n = vec![format!(
            "runs per side: BASE {} file(s), NEW {} file(s) (each file one process run)",
            self.files_base, self.files_new
        )];
        if self.single_run() {
            n.push(
                "fewer than 3 runs on a side: the interval resamples the blocks within the runs, so it CANNOT \
                 contain the run-to-run variation (on model0 larger than the noise within a run); give at least 3 \
                 files per side (--base F1 F2 F3 --new G1 G2 G3, run alternately) for an interval that does"
                    .into(),
            );
        } else {
            n.push(
                "interval and p: Welch's t-test over the process runs (the logarithms of each run's value): it \
                 contains the run-to-run variation; the change is the ratio of the runs' geometric means"
                    .into(),
            );
        }
        n.push(match self.threshold_pct {
            Some(t) => format!("threshold: {t} % (given)"),
            None => {
                let t = |several: bool| {
                    DEFAULT_THRESHOLDS_PCT
                        .iter()
                        .map(|(sc, m, a, b)| {
                            // a bandwidth row's metric is the bandwidth itself
                            let what = if sc == m { sc.to_string() } else { format!("{sc} {m}") };
                            format!("{what} {} %", if several { a } else { b })
                        })
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                format!(
                    "threshold: default by row, with 3 or more runs on both sides: {}; with fewer: {}",
                    t(true),
                    t(false)
                )
            }
        });
        let untested = self.rows.len() - self.tested();
        let mut s = format!(
            "significance: {} rows, {}-adjusted at {} % ({})",
            self.tested(),
            self.adjust.as_str(),
            ALPHA * 100.0,
            if self.single_run() {
                format!("{} bootstrap resamples of the blocks per row", self.rounds)
            } else {
                "Welch's t over the runs per row".to_string()
            }
        );
        if untested > 0 {
            s.push_str(&format!(
                "; {untested} rows not judged (no per-block samples and fewer than 3 runs per side)"
            ));
        }
        n.push(s);
        n.push("regression: change beyond the threshold in the worse direction and adjusted p below 5 %".into());
        n
    }
}

/// Reads and checks a result file (schema versions 1 up to this rdmaprobe's).
pub fn load(path: &str) -> Result<Value, CompareError> {
    let text = std::fs::read_to_string(path).map_err(|e| CompareError::Unreadable {
        path: path.into(),
        why: e.to_string(),
    })?;
    let foreign = |why: String| CompareError::Foreign { path: path.into(), why };
    if text.trim().is_empty() {
        return Err(foreign("empty file".into()));
    }
    let v: Value =
        serde_json::from_str(&text).map_err(|e| foreign(format!("not valid JSON ({e}): truncated or corrupt?")))?;
    if v["tool"]["name"] != "rdmaprobe" {
        return Err(foreign("not an rdmaprobe result (no tool.name = rdmaprobe)".into()));
    }
    match v["schema_version"].as_u64() {
        Some(n) if (1..=u64::from(super::SCHEMA_VERSION)).contains(&n) => {}
        _ => {
            return Err(foreign(format!(
                "schema version {} (this rdmaprobe reads 1 to {})",
                v["schema_version"],
                super::SCHEMA_VERSION
            )))
        }
    }
    if !v["runs"].is_array() {
        return Err(foreign("no runs".into()));
    }
    let mut v = v;
    super::schema::upgrade(&mut v);
    Ok(v)
}

fn key(doc: &Value, r: &Value) -> String {
    // schema 2: every run says its scenario; schema 1 single-scenario files say it once
    let scen = r["scenario"]
        .as_str()
        .or_else(|| doc["params"]["scenario"].as_str())
        .unwrap_or("?");
    let size = r["size_bytes"].as_u64().unwrap_or(0);
    let mut k = format!(
        "{scen} {} {} {size}B",
        r["op"].as_str().or_else(|| doc["params"]["op"].as_str()).unwrap_or("?"),
        r["backend"].as_str().unwrap_or("?"),
    );
    for f in [
        "db_mode",
        "postlist",
        "inline",
        "cq_mod",
        "threads",
        "qps_per_thread",
        "tx_depth",
        "bidirectional",
    ] {
        if let Some(x) = r.get(f).filter(|x| !x.is_null()) {
            k.push_str(&format!(" {f}={}", x.to_string().trim_matches('"')));
        }
    }
    k
}

/// One process run's figure for one metric.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSample {
    /// The run's value (its p50, p99 or average bandwidth).
    pub value: f64,
    /// Per-block samples of the same statistic (empty: none).
    pub blocks: Vec<f64>,
}

/// A metric of a run: name, value, per-block samples, larger is worse.
type Metric = (String, RunSample, bool);

/// Per-block samples: absent is allowed (files from before they were recorded); present, each
/// must be a finite number above 0 (bandwidth windows: at least 0), and not all 0.
fn samples(x: Option<&Value>, field: &str, zero_ok: bool) -> Result<Vec<f64>, String> {
    let x = match x {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(x) => x,
    };
    let a = x.as_array().ok_or_else(|| format!("{field} is {x}: not an array"))?;
    let mut out = Vec::with_capacity(a.len());
    for (i, e) in a.iter().enumerate() {
        match e.as_f64() {
            Some(v) if v.is_finite() && (v > 0.0 || (zero_ok && v == 0.0)) => out.push(v),
            Some(v) => {
                return Err(format!(
                    "{field}[{i}] is {v}: must be a finite number {}",
                    if zero_ok { "of at least 0" } else { "above 0" }
                ))
            }
            None => return Err(format!("{field}[{i}] is {e}: not a number")),
        }
    }
    if !out.is_empty() && out.iter().sum::<f64>() <= 0.0 {
        return Err(format!("{field}: every sample is 0"));
    }
    Ok(out)
}

/// The metrics of a run, every value checked.
fn metrics(r: &Value, wanted: &[String]) -> Result<Vec<Metric>, String> {
    let want = |m: &str| wanted.iter().any(|w| w == m);
    let value = |obj: &Value, obj_name: &str, f: &str| -> Result<f64, String> {
        let x = &obj[f];
        match x.as_f64() {
            Some(v) if v.is_finite() && v > 0.0 => Ok(v),
            Some(v) => Err(format!(
                "{obj_name}.{f} is {v}: a value must be a finite number above 0"
            )),
            None if x.is_null() => Err(format!(
                "{obj_name}.{f} is missing or null (a non-finite number is written as null)"
            )),
            None => Err(format!("{obj_name}.{f} is {x}: not a number")),
        }
    };
    let mut out = Vec::new();
    let lat = [("latency_ns", false), ("per_wqe_ns", true)]
        .into_iter()
        .find(|(f, _)| r[*f].is_object());
    if let Some((obj_name, post_cost)) = lat {
        for m in ["p50", "p99"].into_iter().filter(|m| want(m)) {
            let v = value(&r[obj_name], obj_name, m)?;
            let b = match (post_cost, m) {
                (false, "p50") => samples(r.get("block_medians_ns"), "block_medians_ns", false)?,
                (false, _) => samples(r.get("block_p99_ns"), "block_p99_ns", false)?,
                (true, "p50") => samples(r.get("block_per_wqe_ns"), "block_per_wqe_ns", false)?,
                (true, _) => Vec::new(),
            };
            out.push((m.to_string(), RunSample { value: v, blocks: b }, true));
        }
    }
    if want("bw") && r["summary"].is_object() {
        let v = value(&r["summary"], "summary", "bw_avg_mib_s")?;
        let w = samples(r["summary"].get("window_mib_s"), "summary.window_mib_s", true)?;
        out.push(("bw".into(), RunSample { value: v, blocks: w }, false));
    }
    Ok(out)
}

/// One side's rows: (key, metric) -> (the runs' samples, larger is worse); and every run key.
type SideRows = (BTreeMap<(String, String), (Vec<RunSample>, bool)>, BTreeSet<String>);

/// Reads one side's files into rows, checking every value and that no file repeats a run.
fn side(files: &[(String, Value)], wanted: &[String]) -> Result<SideRows, CompareError> {
    let mut rows: BTreeMap<(String, String), (Vec<RunSample>, bool)> = BTreeMap::new();
    let mut keys = BTreeSet::new();
    for (path, doc) in files {
        let mut seen = BTreeSet::new();
        for r in doc["runs"].as_array().into_iter().flatten() {
            let k = key(doc, r);
            if !seen.insert(k.clone()) {
                return Err(CompareError::DuplicateRun {
                    path: path.clone(),
                    run: k,
                });
            }
            // a run must carry the figures of its scenario (an object), or it would drop out of
            // the comparison unseen
            let carries = ["latency_ns", "per_wqe_ns", "summary"]
                .iter()
                .any(|f| r[*f].is_object());
            if !carries {
                return Err(CompareError::BadValue {
                    path: path.clone(),
                    run: k,
                    why: "no figures (latency_ns, per_wqe_ns or summary is missing or not an object)".into(),
                });
            }
            let ms = metrics(r, wanted).map_err(|why| CompareError::BadValue {
                path: path.clone(),
                run: k.clone(),
                why,
            })?;
            for (m, s, worse_up) in ms {
                rows.entry((k.clone(), m))
                    .or_insert_with(|| (Vec::new(), worse_up))
                    .0
                    .push(s);
            }
            keys.insert(k);
        }
    }
    Ok((rows, keys))
}

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

/// Bootstrap 95 % interval of mean(new)/mean(base) - 1, resampling each side's blocks (one run
/// per side: the noise within a run only).
pub fn bootstrap(base: &[f64], new: &[f64], rounds: usize) -> Option<(f64, f64)> {
    if base.len() < 3 || new.len() < 3 {
        return None;
    }
    let run = |v: &[f64]| {
        vec![RunSample {
            value: mean(v),
            blocks: v.to_vec(),
        }]
    };
    hierarchical(&run(base), &run(new), rounds).map(|h| h.interval)
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
fn median(v: &mut [f64]) -> f64 {
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
/// `None` when a side has nothing to resample (see [`resamplable`]) or `rounds` is 0.
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
    let mut d: Vec<f64> = (0..rounds)
        .map(|_| {
            let b = draw(base, &means[0], &mut rng);
            draw(new, &means[1], &mut rng) / b - 1.0
        })
        .collect();
    d.sort_by(|a, b| a.total_cmp(b));
    let below = d.iter().filter(|&&x| x <= 0.0).count();
    let above = d.iter().filter(|&&x| x >= 0.0).count();
    let p = (2.0 * (below.min(above) + 1) as f64 / (rounds + 1) as f64).min(1.0);
    Some(Boot {
        interval: (super::percentile(&d, 0.025), super::percentile(&d, 0.975)),
        p,
    })
}

/// The geometric mean of the runs' values.
fn geo_mean(runs: &[RunSample]) -> f64 {
    (runs.iter().map(|r| r.value.ln()).sum::<f64>() / runs.len().max(1) as f64).exp()
}

/// Welch's t-test on the logarithms of the runs' values (the change as a ratio): with several
/// process runs per side the runs are the units, as their variation is what a repeated
/// measurement shows (Kalibera and Jones). Returns the change exp(mean ln new - mean ln base) - 1,
/// its 95 % interval and the two-sided p-value; `None` with fewer than 2 runs on a side.
pub fn welch_runs(base: &[RunSample], new: &[RunSample]) -> Option<(f64, (f64, f64), f64)> {
    if base.len() < 2 || new.len() < 2 {
        return None;
    }
    let logs = |v: &[RunSample]| v.iter().map(|r| r.value.ln()).collect::<Vec<f64>>();
    let (b, n) = (logs(base), logs(new));
    let mv = |v: &[f64]| {
        let m = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (v.len() - 1) as f64;
        (m, var / v.len() as f64)
    };
    let ((mb, vb), (mn, vn)) = (mv(&b), mv(&n));
    let d = mn - mb;
    let se2 = vb + vn;
    if se2 <= 0.0 {
        // no spread on either side: the runs agree exactly
        let p = if d == 0.0 { 1.0 } else { 0.0 };
        return Some((d.exp() - 1.0, (d.exp() - 1.0, d.exp() - 1.0), p));
    }
    let df = se2 * se2 / (vb * vb / (b.len() - 1) as f64 + vn * vn / (n.len() - 1) as f64);
    let se = se2.sqrt();
    let p = super::tdist::t_two_sided_p(d / se, df);
    let q = super::tdist::t_quantile_two_sided(0.05, df);
    Some((d.exp() - 1.0, ((d - q * se).exp() - 1.0, (d + q * se).exp() - 1.0), p))
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

fn verdict(change: f64, p_adjusted: Option<f64>, larger_is_worse: bool, threshold: f64) -> Verdict {
    let Some(p) = p_adjusted else {
        return Verdict::NoInterval;
    };
    let worse = if larger_is_worse { change } else { -change };
    if p >= ALPHA {
        Verdict::Same
    } else if worse > threshold {
        Verdict::Regression
    } else if worse < -threshold {
        Verdict::Improvement
    } else {
        Verdict::Same
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
    // one process run per file: a document given twice on a side would count one run as two
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
    // documents of an older schema read as the current one
    let up = |s: &[(String, Value)]| -> Vec<(String, Value)> {
        s.iter()
            .map(|(p, d)| {
                let mut d = d.clone();
                super::schema::upgrade(&mut d);
                (p.clone(), d)
            })
            .collect()
    };
    let (base, new) = (&up(base)[..], &up(new)[..]);
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
    let (brows, bkeys) = side(base, &o.metrics)?;
    let (nrows, nkeys) = side(new, &o.metrics)?;
    let mut rows = Vec::new();
    for ((k, m), (bs, worse_up)) in &brows {
        let Some((ns, _)) = nrows.get(&(k.clone(), m.clone())) else {
            continue;
        };
        let (bv, nv) = (point(bs), point(ns));
        let runs = bs.len().min(ns.len());
        // several runs on both sides: the runs are the units (Welch's t on their logarithms,
        // an honest p-value however few they are); one run on a side: its blocks, resampled
        let (bv, nv, change, boot) = match welch_runs(bs, ns) {
            // the figures the test compares: the runs' geometric means
            Some((c, iv, p)) if runs >= MIN_RUNS_FOR_T => {
                (geo_mean(bs), geo_mean(ns), c, Some(Boot { interval: iv, p }))
            }
            _ => (bv, nv, nv / bv - 1.0, hierarchical(bs, ns, o.rounds)),
        };
        let scenario = k.split(' ').next().unwrap_or("");
        let threshold = o
            .threshold_pct
            .unwrap_or_else(|| default_threshold_pct(scenario, m, runs >= MIN_RUNS_FOR_T))
            / 100.0;
        rows.push(Row {
            key: k.clone(),
            metric: m.clone(),
            runs_base: bs.len(),
            runs_new: ns.len(),
            base: bv,
            new: nv,
            change,
            interval: boot.map(|b| b.interval),
            p: boot.map(|b| b.p),
            p_adjusted: None,
            threshold,
            larger_is_worse: *worse_up,
            verdict: Verdict::NoInterval,
        });
    }
    let tested: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].p.is_some()).collect();
    let ps: Vec<f64> = tested.iter().filter_map(|&i| rows[i].p).collect();
    for (&i, q) in tested.iter().zip(adjust(&ps, o.adjust)) {
        rows[i].p_adjusted = Some(q);
    }
    for r in &mut rows {
        r.verdict = verdict(r.change, r.p_adjusted, r.larger_is_worse, r.threshold);
    }
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

/// Compares two loaded result documents, one run per side (see [`compare_sets`]).
pub fn compare(base: &Value, new: &Value, o: &Options) -> Result<Report, CompareError> {
    compare_sets(&[("BASE".into(), base.clone())], &[("NEW".into(), new.clone())], o)
}

fn iv(r: &Row) -> String {
    r.interval
        .map(|(a, b)| format!("[{:+.2}%, {:+.2}%]", a * 100.0, b * 100.0))
        .unwrap_or_else(|| "n/a".into())
}

fn pv(p: Option<f64>) -> String {
    match p {
        Some(p) if p < 0.0001 => "<0.0001".into(),
        Some(p) => format!("{p:.4}"),
        None => "n/a".into(),
    }
}

fn runs(r: &Row) -> String {
    format!("{}/{}", r.runs_base, r.runs_new)
}

/// Plain text.
pub fn text(r: &Report) -> String {
    let mut s = String::new();
    s.push_str("environment differences:\n");
    if r.env_diff.is_empty() {
        s.push_str("  none\n");
    }
    for (f, a, b) in &r.env_diff {
        s.push_str(&format!("  {f}: {a} -> {b}\n"));
    }
    for (side, f, path) in &r.side_diff {
        s.push_str(&format!(
            "  within {side}: {path} has another {f} than the side's first file\n"
        ));
    }
    s.push('\n');
    for n in r.notes() {
        s.push_str(&format!("note: {n}\n"));
    }
    let w = r.rows.iter().map(|x| x.key.len()).max().unwrap_or(0).max(3);
    s.push_str(&format!(
        "\n{:<w$} {:>6} {:>5} {:>12} {:>12} {:>9} {:>22} {:>9} {:>6}  verdict\n",
        "run", "metric", "runs", "base", "new", "change", "95% interval", "p adj", "thresh"
    ));
    for x in &r.rows {
        s.push_str(&format!(
            "{:<w$} {:>6} {:>5} {:>12.2} {:>12.2} {:>+8.2}% {:>22} {:>9} {:>5.0}%  {}\n",
            x.key,
            x.metric,
            runs(x),
            x.base,
            x.new,
            x.change * 100.0,
            iv(x),
            pv(x.p_adjusted),
            x.threshold * 100.0,
            x.verdict.as_str()
        ));
    }
    for k in &r.only_base {
        s.push_str(&format!("only in BASE: {k}\n"));
    }
    for k in &r.only_new {
        s.push_str(&format!("only in NEW: {k}\n"));
    }
    s
}

/// Markdown (for CI summaries).
pub fn markdown(r: &Report) -> String {
    let mut s = String::from("### Environment differences\n\n");
    if r.env_diff.is_empty() && r.side_diff.is_empty() {
        s.push_str("none\n");
    } else {
        s.push_str("| field | base | new |\n|---|---|---|\n");
        for (f, a, b) in &r.env_diff {
            s.push_str(&format!("| {f} | {a} | {b} |\n"));
        }
        for (side, f, path) in &r.side_diff {
            s.push_str(&format!("| {f} | within {side}: {path} differs | |\n"));
        }
    }
    s.push_str("\n### How the verdicts were reached\n\n");
    for n in r.notes() {
        s.push_str(&format!("- {n}\n"));
    }
    s.push_str(
        "\n### Runs\n\n| run | metric | runs base/new | base | new | change | 95% interval | p adj | threshold | verdict |\n\
         |---|---|---:|---:|---:|---:|---|---:|---:|---|\n",
    );
    for x in &r.rows {
        s.push_str(&format!(
            "| {} | {} | {} | {:.2} | {:.2} | {:+.2}% | {} | {} | {:.0}% | {} |\n",
            x.key,
            x.metric,
            runs(x),
            x.base,
            x.new,
            x.change * 100.0,
            iv(x),
            pv(x.p_adjusted),
            x.threshold * 100.0,
            if x.verdict == Verdict::Regression {
                format!("**{}**", x.verdict.as_str())
            } else {
                x.verdict.as_str().to_string()
            }
        ));
    }
    for k in &r.only_base {
        s.push_str(&format!("\nonly in base: {k}"));
    }
    for k in &r.only_new {
        s.push_str(&format!("\nonly in new: {k}"));
    }
    s.push('\n');
    s
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// JUnit XML: one test case per row, a failure per regression, a skipped case per row not
/// judged; the notes as properties, each row's figures in its system-out.
pub fn junit(r: &Report) -> String {
    let fails = r.rows.iter().filter(|x| x.verdict == Verdict::Regression).count();
    let skipped = r.rows.iter().filter(|x| x.verdict == Verdict::NoInterval).count();
    let mut s = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"rdmaprobe compare\" tests=\"{}\" failures=\"{fails}\" skipped=\"{skipped}\">\n  <properties>\n",
        r.rows.len()
    );
    for (i, n) in r.notes().iter().enumerate() {
        s.push_str(&format!(
            "    <property name=\"note{}\" value=\"{}\"/>\n",
            i + 1,
            xml(n)
        ));
    }
    s.push_str("  </properties>\n");
    for x in &r.rows {
        let name = xml(&format!("{} {}", x.key, x.metric));
        let figures = format!(
            "{:.2} -> {:.2} ({:+.2}%, 95% interval {}, adjusted p {}, runs base/new {}, threshold {:.0}%): {}",
            x.base,
            x.new,
            x.change * 100.0,
            iv(x),
            pv(x.p_adjusted),
            runs(x),
            x.threshold * 100.0,
            x.verdict.as_str()
        );
        s.push_str(&format!("  <testcase classname=\"rdmaprobe\" name=\"{name}\">"));
        match x.verdict {
            Verdict::Regression => s.push_str(&format!("<failure message=\"{}\"/>", xml(&figures))),
            Verdict::NoInterval => s.push_str(&format!("<skipped message=\"{}\"/>", xml(&figures))),
            _ => {}
        }
        s.push_str(&format!("<system-out>{}</system-out>", xml(&figures)));
        s.push_str("</testcase>\n");
    }
    s.push_str("</testsuite>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn runs(values: &[f64], blocks: impl Fn(f64) -> Vec<f64>) -> Vec<RunSample> {
        values
            .iter()
            .map(|&v| RunSample {
                value: v,
                blocks: blocks(v),
            })
            .collect()
    }

    /// Ten blocks spread ±1 % around v.
    fn ten(v: f64) -> Vec<f64> {
        (0..10).map(|i| v * (1.0 + (i as f64 - 4.5) / 450.0)).collect()
    }

    #[test]
    fn verdicts_need_threshold_and_adjusted_significance() {
        // latency up 10 %, significant: regression
        assert_eq!(verdict(0.10, Some(0.001), true, 0.05), Verdict::Regression);
        // up 10 % but not significant after adjustment: noise
        assert_eq!(verdict(0.10, Some(0.2), true, 0.05), Verdict::Same);
        assert_eq!(verdict(0.10, Some(ALPHA), true, 0.05), Verdict::Same);
        // significant but below the threshold
        assert_eq!(verdict(0.03, Some(0.001), true, 0.05), Verdict::Same);
        // bandwidth down 10 %: regression; up: improvement
        assert_eq!(verdict(-0.10, Some(0.001), false, 0.05), Verdict::Regression);
        assert_eq!(verdict(0.10, Some(0.001), false, 0.05), Verdict::Improvement);
        assert_eq!(verdict(-0.10, Some(0.001), true, 0.05), Verdict::Improvement);
        // nothing to judge the noise by: never a regression
        assert_eq!(verdict(0.50, None, true, 0.05), Verdict::NoInterval);
    }

    #[test]
    fn welch_on_runs() {
        // Welch on runs: identical sides p 1; a clear shift p small, its interval around it
        let runs = |v: &[f64]| {
            v.iter()
                .map(|&x| RunSample {
                    value: x,
                    blocks: vec![],
                })
                .collect::<Vec<_>>()
        };
        let (c, _, p) = welch_runs(&runs(&[100.0, 102.0, 98.0]), &runs(&[100.0, 102.0, 98.0])).unwrap();
        assert!(c.abs() < 1e-12 && (p - 1.0).abs() < 1e-9);
        let (c, (lo, hi), p) = welch_runs(&runs(&[100.0, 102.0, 98.0]), &runs(&[120.0, 122.4, 117.6])).unwrap();
        assert!(
            (c - 0.2).abs() < 1e-3 && lo < c && c < hi && lo > 0.1 && p < 0.01,
            "{c} {lo} {hi} {p}"
        );
        // one run on a side: no run-level test
        assert!(welch_runs(&runs(&[100.0]), &runs(&[120.0, 121.0])).is_none());
    }

    #[test]
    fn hierarchical_bootstrap_separates_shifted_runs_and_not_identical_ones() {
        let a = runs(&[100.0, 104.0, 98.0], ten);
        let b = runs(&[110.0, 114.4, 107.8], ten);
        let h = hierarchical(&a, &b, 4000).unwrap();
        assert!(h.interval.0 > 0.02 && h.interval.1 < 0.18, "{h:?}");
        assert!(h.interval.0 < 0.10 && 0.10 < h.interval.1, "{h:?}");
        assert!(h.p < 0.01, "{h:?}");
        let h = hierarchical(&a, &a, 4000).unwrap();
        assert!(h.interval.0 < 0.0 && 0.0 < h.interval.1 && h.p > 0.5, "{h:?}");
        // deterministic
        assert_eq!(hierarchical(&a, &b, 500), hierarchical(&a, &b, 500));
    }

    #[test]
    fn the_interval_holds_run_to_run_variation() {
        // blocks tight (±1 %) but runs 20 % apart: one run per side gives a narrow interval that
        // excludes zero; the runs together do not
        let a = runs(&[100.0, 120.0, 100.0], ten);
        let b = runs(&[120.0, 100.0, 120.0], ten);
        let one = hierarchical(&a[..1], &b[..1], 4000).unwrap();
        assert!(one.interval.0 > 0.15 && one.p < 0.001, "{one:?}");
        let all = hierarchical(&a, &b, 4000).unwrap();
        assert!(all.interval.0 < 0.0 && all.interval.1 > 0.0 && all.p > 0.05, "{all:?}");
    }

    #[test]
    fn a_side_needs_blocks_or_three_runs() {
        let bare = |v: &[f64]| runs(v, |_| Vec::new());
        assert_eq!(hierarchical(&bare(&[100.0]), &bare(&[200.0]), 100), None);
        assert_eq!(hierarchical(&bare(&[100.0, 101.0]), &bare(&[200.0, 201.0]), 100), None);
        let h = hierarchical(&bare(&[100.0, 101.0, 99.0]), &bare(&[200.0, 202.0, 198.0]), 4000).unwrap();
        assert!(h.interval.0 > 0.9 && h.p < 0.01, "{h:?}");
        assert_eq!(hierarchical(&runs(&[100.0], ten), &bare(&[200.0]), 100), None);
        assert_eq!(hierarchical(&runs(&[100.0], ten), &runs(&[100.0], ten), 0), None);
    }

    #[test]
    fn one_run_bootstrap_keeps_its_old_behaviour() {
        let a: Vec<f64> = (0..10).map(|i| 100.0 + (i % 3) as f64).collect();
        let b: Vec<f64> = a.iter().map(|x| x * 1.2).collect();
        let (lo, hi) = bootstrap(&a, &b, 2000).unwrap();
        assert!(lo > 0.15 && hi < 0.25, "{lo} {hi}");
        let (lo, hi) = bootstrap(&a, &a, 2000).unwrap();
        assert!(lo < 0.0 && hi > 0.0, "{lo} {hi}");
        assert_eq!(bootstrap(&a[..2], &b, 100), None);
        assert_eq!(bootstrap(&a, &b, 500), bootstrap(&a, &b, 500));
    }

    #[test]
    fn default_thresholds_by_row_and_runs() {
        assert_eq!(default_threshold_pct("lat", "p50", true), 5.0);
        assert_eq!(default_threshold_pct("lat", "p50", false), 20.0);
        assert_eq!(default_threshold_pct("lat", "p99", false), 50.0);
        assert_eq!(default_threshold_pct("post_cost", "p50", false), 150.0);
        assert_eq!(default_threshold_pct("suite?", "p50", true), 10.0);
        // every default with one run is at least the one with several
        assert!(DEFAULT_THRESHOLDS_PCT
            .iter()
            .all(|&(_, _, several, one)| one >= several));
        // a row takes its scenario's default
        let a = doc(json!([lat_run(json!(100.0))]));
        let r = compare(&a, &a, &Options::default()).unwrap();
        assert_eq!((r.rows[0].metric.as_str(), r.rows[0].threshold), ("p50", 0.20));
        assert_eq!((r.rows[1].metric.as_str(), r.rows[1].threshold), ("p99", 0.50));
    }

    #[test]
    fn holm_and_benjamini_hochberg() {
        let p = [0.01, 0.04, 0.03, 0.005];
        // Holm: sorted 0.005 0.01 0.03 0.04 -> x4 x3 x2 x1 = 0.02 0.03 0.06 0.04 -> monotone 0.06
        let h = adjust(&p, Adjust::Holm);
        let want = [0.03, 0.06, 0.06, 0.02];
        for (x, w) in h.iter().zip(want) {
            assert!((x - w).abs() < 1e-12, "{h:?}");
        }
        // BH: sorted ranks 1..4 -> x4/1 x4/2 x4/3 x4/4 = 0.02 0.02 0.04 0.04
        let bh = adjust(&p, Adjust::BenjaminiHochberg);
        let want = [0.02, 0.04, 0.04, 0.02];
        for (x, w) in bh.iter().zip(want) {
            assert!((x - w).abs() < 1e-12, "{bh:?}");
        }
        // capped at 1, empty stays empty, one p-value is unchanged
        assert_eq!(adjust(&[0.5, 0.9], Adjust::Holm), vec![1.0, 1.0]);
        assert!(adjust(&[], Adjust::Holm).is_empty());
        assert_eq!(adjust(&[0.03], Adjust::BenjaminiHochberg), vec![0.03]);
    }

    fn doc(runs: Value) -> Value {
        json!({"schema_version": 1, "tool": {"name": "rdmaprobe"}, "params": {"scenario": "lat"}, "runs": runs})
    }

    fn lat_run(p50: Value) -> Value {
        json!({"op": "write", "backend": "direct", "size": 8, "latency": {"p50": p50, "p99": 300.0},
               "block_medians_ns": [100.0, 101.0, 99.0], "block_p99_ns": [300.0, 310.0, 290.0]})
    }

    #[test]
    fn bad_values_are_refused_naming_the_run() {
        let o = Options::default();
        let good = doc(json!([lat_run(json!(100.0))]));
        for (bad, why) in [
            (json!(0.0), "latency_ns.p50 is 0"),
            (json!(-5.0), "latency_ns.p50 is -5"),
            (json!("100"), "not a number"),
            (Value::Null, "missing or null"),
        ] {
            let d = doc(json!([lat_run(bad)]));
            for (b, n) in [(&good, &d), (&d, &good)] {
                let e = compare(b, n, &o).unwrap_err().to_string();
                assert!(e.contains("run 'lat write direct 8B'") && e.contains(why), "{e}");
            }
        }
        let mut r = lat_run(json!(100.0));
        r["block_medians_ns"] = json!([100.0, "x", 99.0]);
        let e = compare(&good, &doc(json!([r])), &o).unwrap_err().to_string();
        assert!(e.contains("block_medians_ns[1]"), "{e}");
        let e = compare(&good, &doc(json!([lat_run(json!(100.0)), lat_run(json!(101.0))])), &o)
            .unwrap_err()
            .to_string();
        assert!(e.contains("'lat write direct 8B' appears more than once"), "{e}");
        let bw = json!([{"op": "write", "backend": "direct", "size": 8,
                         "summary": {"bw_avg_mib_s": 1000.0, "window_mib_s": [1000.0, -1.0, 990.0]}}]);
        let e = compare(&doc(bw.clone()), &doc(bw), &o).unwrap_err().to_string();
        assert!(e.contains("summary.window_mib_s[1] is -1"), "{e}");
    }

    #[test]
    fn post_cost_rows_are_judged_on_their_blocks() {
        let pc = |v: f64, blocks: Value| {
            doc(
                json!([{"scenario": "post_cost", "op": "write", "backend": "direct", "size": 8, "postlist": 1,
                         "per_wqe_ns": {"p50": v, "p99": 2.0 * v}, "block_per_wqe_ns": blocks}]),
            )
        };
        let a = pc(50.0, json!([50.0, 51.0, 49.0, 50.5, 49.5]));
        // two runs of one configuration, on the 10 ns grid of the TSC: same, with an interval
        let b = pc(50.0, json!([50.0, 51.5, 49.0, 50.0, 49.5]));
        let r = compare(&a, &b, &Options::default()).unwrap();
        let p50 = r.rows.iter().find(|x| x.metric == "p50").unwrap();
        assert!(p50.interval.is_some() && p50.verdict == Verdict::Same, "{p50:?}");
        assert!(!r.regressed());
        // p99 has no blocks: not judged, not a regression
        let p99 = r.rows.iter().find(|x| x.metric == "p99").unwrap();
        assert_eq!(p99.verdict, Verdict::NoInterval);
        // without blocks (older files) neither row is judged
        let r = compare(&pc(50.0, Value::Null), &pc(80.0, Value::Null), &Options::default()).unwrap();
        assert!(!r.regressed() && r.rows.iter().all(|x| x.verdict == Verdict::NoInterval));
        // one run per side: a post-cost row needs more than model0's run-to-run +102 % (default
        // 150 %); a real shift of every block beyond it is found, and below it with --threshold
        let c = pc(135.0, json!([135.0, 137.7, 132.3, 136.3, 133.6]));
        let r = compare(&a, &c, &Options::default()).unwrap();
        assert!(r.regressed(), "{}", text(&r));
        let c = pc(75.0, json!([75.0, 76.5, 73.5, 75.7, 74.2]));
        assert!(!compare(&a, &c, &Options::default()).unwrap().regressed());
        let o = Options {
            threshold_pct: Some(10.0),
            ..Options::default()
        };
        assert!(compare(&a, &c, &o).unwrap().regressed());
    }

    #[test]
    fn schema_1_and_2_both_read() {
        let dir = std::env::temp_dir().join(format!("rdmaprobe-cmp-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for v in 1..=super::super::SCHEMA_VERSION {
            let p = dir.join(format!("v{v}.json"));
            let mut d = doc(json!([lat_run(json!(100.0))]));
            d["schema_version"] = json!(v);
            std::fs::write(&p, d.to_string()).unwrap();
            assert!(load(p.to_str().unwrap()).is_ok());
        }
        for v in [json!(0), json!(super::super::SCHEMA_VERSION + 1), json!("1")] {
            let p = dir.join("bad.json");
            let mut d = doc(json!([]));
            d["schema_version"] = v;
            std::fs::write(&p, d.to_string()).unwrap();
            assert!(load(p.to_str().unwrap())
                .unwrap_err()
                .to_string()
                .contains("schema version"));
        }
        std::fs::remove_dir_all(&dir).ok();
        // schema 2: the scenario in the run; schema 1: in the file's params
        let mut v2 = lat_run(json!(100.0));
        v2["scenario"] = json!("lat");
        v2["size_bytes"] = json!(8);
        let d2 = json!({"schema_version": 2, "params": {}, "runs": [v2]});
        assert_eq!(key(&d2, &d2["runs"][0]), "lat write direct 8B");
        let mut d1 = doc(json!([lat_run(json!(100.0))]));
        super::super::schema::upgrade(&mut d1);
        assert_eq!(key(&d1, &d1["runs"][0]), "lat write direct 8B");
    }

    #[test]
    fn outputs_say_runs_interval_significance_and_the_note() {
        let a = doc(json!([lat_run(json!(100.0))]));
        let r = compare(&a, &a, &Options::default()).unwrap();
        for out in [text(&r), markdown(&r), junit(&r)] {
            for want in [
                "CANNOT contain",
                "runs per side: BASE 1 file(s), NEW 1 file(s)",
                "Holm-adjusted at 5 %",
                "2 rows",
                "1/1",
                "95% interval",
            ] {
                assert!(out.contains(want), "{want} not in:\n{out}");
            }
        }
    }
}
