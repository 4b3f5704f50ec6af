//! What a compare takes and gives: the options, the rows, the report and the notes its verdicts
//! rest on, the verdicts, and why files cannot be compared.

use super::{ALPHA, DEFAULT_THRESHOLDS_PCT, MIN_RUNS_FOR_T, ROUNDS};

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
    /// `--until-decided`: the files given make no look of the rule.
    #[error("--until-decided: {0}")]
    Sequential(String),
    /// `--control on` and the in-run control cannot be used between the sides.
    #[error("--control on: the in-run control cannot be used: {0}")]
    ControlRequired(String),
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
    /// Where rows of this verdict stand in a report: regressions first, then improvements, the
    /// rows that held, and those not judged.
    pub fn rank(self) -> u8 {
        match self {
            Verdict::Regression => 0,
            Verdict::Improvement => 1,
            Verdict::Same => 2,
            Verdict::NoInterval => 3,
        }
    }

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

/// A row's part in the verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Judged on its own figures.
    Own,
    /// A backend against its in-run control (`verbs-direct`): the backend's figure minus the
    /// control's in each run, round by round of blocks where the run interleaved them; its
    /// change told as a share of the backend's own figure in BASE.
    Contrast,
    /// A backend's own row whose verdict rests on its contrast (shown, not counted).
    ByContrast,
    /// The control's own row while it serves as the control with one run on a side: its change
    /// holds the host's states, which one run per side cannot tell from a change, so it is
    /// judged against wider thresholds ([`super::CONTROL_ONE_RUN_THRESHOLDS_PCT`]).
    Control,
}

/// Whether the in-run control (the direct backend for verbs and wr, the polling backend for
/// its -e twin) was used.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlUse {
    /// No run of a backend has its control beside it.
    Absent,
    /// Turned off (`--control off`).
    Off,
    /// Not usable: why (the sides differ in what the control's own speed depends on).
    Unusable(String),
    /// Used (the sides differ in the library under test): the verdicts of the controlled
    /// backends rest on their contrasts.
    Used,
    /// Used, the sides not differing in the library under test either (identical runs, or a
    /// change of something not recorded): a change that moves every backend alike shows in the
    /// control's own rows only.
    SameLibrary,
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
    /// How to use the in-run control (`--control auto`, the default; `on`: required; `off`).
    pub control: super::ControlMode,
    /// `--target-effect PCT`: the change (percent, in the worse direction) for which each row
    /// says how many runs per side would find it with 80 % power.
    pub target_effect_pct: Option<f64>,
    /// `--until-decided MAX`: the files are a look of the sequential rule with at most MAX runs
    /// per side ([`super::Look`]).
    pub until_decided: Option<usize>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            threshold_pct: None,
            metrics: super::METRICS.iter().map(|m| m.to_string()).collect(),
            adjust: Adjust::Holm,
            rounds: ROUNDS,
            control: super::ControlMode::Auto,
            target_effect_pct: None,
            until_decided: None,
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
    /// The unit of `base` and `new`: `ns` (latency), `ns/WQE` (post cost), `MiB/s` (bandwidth),
    /// a contrast's the same as its backend's.
    pub unit: &'static str,
    /// The row's part in the verdict.
    pub role: Role,
    /// Whether its verdict enters the exit status.
    pub counts: bool,
    /// A contrast's: the backend's own figure in BASE (the median over the runs), the scale
    /// of `change`.
    pub level: Option<f64>,
    /// Runs (files) of BASE that have this row.
    pub runs_base: usize,
    /// Runs (files) of NEW that have this row.
    pub runs_new: usize,
    /// BASE value: the median over BASE's runs of each run's value (with 3 or more runs on
    /// both sides: their geometric mean; a contrast's: their mean).
    pub base: f64,
    /// NEW value: the median over NEW's runs of each run's value.
    pub new: f64,
    /// Relative change, NEW over BASE minus 1 (positive = larger); a contrast's: NEW minus BASE
    /// over the backend's own figure (`level`).
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
    /// What the row's test rests on (its standard error, the runs' spread), for its power.
    #[serde(skip)]
    pub spread: Option<super::Spread>,
    /// The smallest change in the worse direction (a fraction) this comparison finds with 80 %
    /// power: beyond the threshold and significant at the level its family's adjustment can
    /// demand (none: the row has no test).
    pub detectable: Option<f64>,
    /// With `--target-effect`: the runs per side that find it with 80 % power.
    pub needed: Option<super::Needed>,
    /// With `--until-decided`, a row that counts: whether it is decided at this look (a
    /// regression or improvement, or its bound within its threshold; see [`super::Look`]).
    pub decided: Option<bool>,
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
    /// Whether the in-run control was used, and if not why.
    pub control: ControlUse,
    /// `--target-effect` (percent), if given.
    pub target_effect_pct: Option<f64>,
    /// The look of the sequential rule (`--until-decided`), if one.
    pub sequential: Option<super::Look>,
}

impl Report {
    /// Whether any row that counts is a regression.
    pub fn regressed(&self) -> bool {
        self.rows.iter().any(|r| r.counts && r.verdict == Verdict::Regression)
    }

    /// The rows that count still undecided at this look of `--until-decided` (0 without it).
    pub fn undecided(&self) -> usize {
        self.rows.iter().filter(|r| r.decided == Some(false)).count()
    }

    /// The exit status: 1 a regression; 3 with `--until-decided`, rows undecided (and no
    /// regression); else 0.
    pub fn exit_status(&self) -> u8 {
        if self.regressed() {
            1
        } else if self.undecided() > 0 {
            3
        } else {
            0
        }
    }

    /// The rows that count of verdict `v`.
    pub fn count(&self, v: Verdict) -> usize {
        self.rows.iter().filter(|r| r.counts && r.verdict == v).count()
    }

    /// The whole compare's verdict in one line: regression or not, and how many rows had each
    /// verdict.
    pub fn verdict_line(&self) -> String {
        if self.rows.is_empty() {
            return "verdict: nothing compared (no run of BASE matches a run of NEW; exit 2)".into();
        }
        let [reg, imp, same, nj] = [
            Verdict::Regression,
            Verdict::Improvement,
            Verdict::Same,
            Verdict::NoInterval,
        ]
        .map(|v| self.count(v));
        let shown = self.rows.iter().filter(|r| !r.counts).count();
        let undecided_same = self
            .rows
            .iter()
            .filter(|r| r.decided == Some(false) && r.verdict == Verdict::Same)
            .count();
        let mut counts = format!(
            "{reg} regression, {imp} improvement, {} same, {nj} not judged, of {} rows",
            same - undecided_same,
            self.rows.len() - shown
        );
        if shown > 0 {
            counts.push_str(&format!(", {shown} more shown beside them"));
        }
        if let Some(l) = self.sequential {
            counts.push_str(&format!(
                "; {} undecided, at look {} of {} ({} runs per side of at most {})",
                self.undecided(),
                l.look,
                l.looks,
                l.runs,
                l.max_runs
            ));
        }
        let unjudged = self
            .rows
            .iter()
            .filter(|r| {
                r.role == Role::Control
                    && r.verdict == Verdict::Same
                    && super::control::own_threshold_passed(r, self.threshold_pct.is_some())
            })
            .count();
        if unjudged > 0 {
            counts.push_str(&format!(
                "; the control NOT JUDGED in {unjudged} row(s): a change of every backend alike, see the notes"
            ));
        }
        match self.exit_status() {
            1 => format!("verdict: REGRESSION ({counts}; exit 1)"),
            3 if self.sequential.is_some_and(|l| l.last()) => {
                format!("verdict: no regression, UNDECIDED with the budget spent ({counts}; exit 3)")
            }
            3 => format!("verdict: UNDECIDED so far, no regression: run both sides again ({counts}; exit 3)"),
            _ => format!("verdict: no regression ({counts}; exit 0)"),
        }
    }

    /// Rows that count with a p-value (the family the adjustment runs over).
    pub fn tested(&self) -> usize {
        self.rows.iter().filter(|r| r.counts && r.p.is_some()).count()
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
                 contain the run-to-run variation (on model0 larger than the noise within a run: identical runs' \
                 latency points up to 3.2 times apart), and only a change beyond the wide one-run thresholds \
                 below is judged; give at least 3 files per side (--base F1 F2 F3 --new G1 G2 G3, run \
                 alternately; or --until-decided) for an interval that does and the smaller thresholds"
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
        let untested = self.rows.iter().filter(|r| r.counts && r.p.is_none()).count();
        let mut s = format!(
            "significance: {} rows, {}-adjusted at {} % ({})",
            self.tested(),
            self.adjust.as_str(),
            match self.sequential {
                None => format!("{}", ALPHA * 100.0),
                Some(l) => format!("{:.4}", l.alpha * 100.0),
            },
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
        n.push(match self.sequential {
            None => "regression: change beyond the threshold in the worse direction and adjusted p below 5 %".into(),
            Some(_) => {
                "regression: change beyond the threshold in the worse direction and adjusted p below this look's level"
                    .into()
            }
        });
        n.extend(super::sequential::note(self));
        n.push(format!(
            "detects: the smallest change in the worse direction each row would find 4 times in 5 (80 % power): \
             beyond its threshold and significant at {} over its family's tested rows (Bonferroni, the strictest \
             step of Holm's), from the row's own standard error (Welch's over the runs; with fewer than 3 runs per \
             side from the bootstrap interval's width, normal). A verdict of same says: no change of at least that. \
             over: a contrast's change is told over this, the backend's own figure in BASE{}",
            match self.sequential {
                None => "5 %".to_string(),
                Some(l) => format!("this look's {:.4} %", l.alpha * 100.0),
            },
            match self.target_effect_pct {
                Some(t) => format!(
                    "; runs@{t}%: the runs per side (alternated) that would find a change of {t} % with 80 % power, \
                     from the spread of the runs given (unknown with fewer than 3 per side; never when {t} % is within \
                     the threshold)"
                ),
                None => String::new(),
            }
        ));
        n.extend(super::control::notes(self));
        n
    }
}
