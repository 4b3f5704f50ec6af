//! `compare BASE NEW`: matches the runs of two result files and decides, per run and metric,
//! whether NEW is a regression: the change must exceed the threshold AND its bootstrap 95 %
//! interval (resampling the per-block medians of each side) must exclude zero. Deterministic:
//! the same inputs always give the same verdict.
#![forbid(unsafe_code)]

use serde_json::Value;
use std::collections::BTreeMap;

/// Why two files cannot be compared.
#[derive(Debug, thiserror::Error)]
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
}

impl Verdict {
    /// The word a report shows.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Regression => "REGRESSION",
            Verdict::Improvement => "improvement",
            Verdict::Same => "same",
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
    /// BASE value.
    pub base: f64,
    /// NEW value.
    pub new: f64,
    /// Relative change, NEW over BASE minus 1 (positive = larger).
    pub change: f64,
    /// 95 % interval of the relative change (when per-block samples exist).
    pub interval: Option<(f64, f64)>,
    /// Larger is worse (latency) or better (bandwidth).
    pub larger_is_worse: bool,
    /// The verdict.
    pub verdict: Verdict,
}

/// The whole comparison.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// Environment fields that differ: (field, BASE, NEW).
    pub env_diff: Vec<(String, String, String)>,
    /// Matched rows.
    pub rows: Vec<Row>,
    /// Runs only in BASE.
    pub only_base: Vec<String>,
    /// Runs only in NEW.
    pub only_new: Vec<String>,
}

impl Report {
    /// Whether any row is a regression.
    pub fn regressed(&self) -> bool {
        self.rows.iter().any(|r| r.verdict == Verdict::Regression)
    }
}

/// Reads and checks a result file.
pub fn load(path: &str) -> Result<Value, CompareError> {
    let text = std::fs::read_to_string(path).map_err(|e| CompareError::Unreadable {
        path: path.into(),
        why: e.to_string(),
    })?;
    if text.trim().is_empty() {
        return Err(CompareError::Foreign {
            path: path.into(),
            why: "empty file".into(),
        });
    }
    let v: Value = serde_json::from_str(&text).map_err(|e| CompareError::Foreign {
        path: path.into(),
        why: format!("not valid JSON ({e}): truncated or corrupt?"),
    })?;
    if v["tool"]["name"] != "rdmaprobe" {
        return Err(CompareError::Foreign {
            path: path.into(),
            why: "not an rdmaprobe result (no tool.name = rdmaprobe)".into(),
        });
    }
    if v["schema_version"] != super::SCHEMA_VERSION {
        return Err(CompareError::Foreign {
            path: path.into(),
            why: format!(
                "schema version {} (this rdmaprobe reads {})",
                v["schema_version"],
                super::SCHEMA_VERSION
            ),
        });
    }
    if !v["runs"].is_array() {
        return Err(CompareError::Foreign {
            path: path.into(),
            why: "no runs".into(),
        });
    }
    Ok(v)
}

fn key(doc: &Value, r: &Value) -> String {
    // a suite's runs say their scenario; single-scenario files say it once
    let scen = r["scenario"]
        .as_str()
        .or_else(|| doc["params"]["scenario"].as_str())
        .unwrap_or("?");
    let mut k = format!(
        "{scen} {} {} {}B",
        r["op"].as_str().unwrap_or("?"),
        r["backend"].as_str().unwrap_or("?"),
        r["size"].as_u64().unwrap_or(0)
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

/// Metrics of a run: name, value, per-block samples (if any), larger is worse.
fn metrics(r: &Value, wanted: &[String]) -> Vec<(String, f64, Vec<f64>, bool)> {
    let mut out = Vec::new();
    let blocks = |field: &str| -> Vec<f64> {
        r[field]
            .as_array()
            .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
            .unwrap_or_default()
    };
    let lat = if r["latency"].is_object() {
        Some(&r["latency"])
    } else if r["per_wqe_ns"].is_object() {
        Some(&r["per_wqe_ns"])
    } else {
        None
    };
    if let Some(l) = lat {
        for m in ["p50", "p99"] {
            if wanted.iter().any(|w| w == m) {
                if let Some(v) = l[m].as_f64() {
                    out.push((
                        m.to_string(),
                        v,
                        blocks(if m == "p50" { "block_medians_ns" } else { "block_p99_ns" }),
                        true,
                    ));
                }
            }
        }
    }
    if wanted.iter().any(|w| w == "bw") {
        if let Some(v) = r["summary"]["bw_avg_mib_s"].as_f64() {
            let w: Vec<f64> = r["summary"]["window_mib_s"]
                .as_array()
                .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
                .unwrap_or_default();
            out.push(("bw".into(), v, w, false));
        }
    }
    out
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Bootstrap 95 % interval of mean(new)/mean(base) - 1, resampling each side's blocks.
pub fn bootstrap(base: &[f64], new: &[f64], rounds: usize) -> Option<(f64, f64)> {
    if base.len() < 3 || new.len() < 3 {
        return None;
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let draw = |v: &[f64], rng: &mut Rng| -> f64 {
        let s: f64 = (0..v.len()).map(|_| v[(rng.next() % v.len() as u64) as usize]).sum();
        s / v.len() as f64
    };
    let mut d: Vec<f64> = (0..rounds)
        .map(|_| draw(new, &mut rng) / draw(base, &mut rng) - 1.0)
        .collect();
    d.sort_by(|a, b| a.total_cmp(b));
    Some((super::percentile(&d, 0.025), super::percentile(&d, 0.975)))
}

/// The bootstrap interval moved so it is centred where the reported change is: the bootstrap
/// measures how much the change of the per-block statistic (mean of the blocks' values) varies,
/// while the change reported is that of the whole run's percentile, which can sit apart from the
/// blocks' mean (a skewed distribution, few blocks). The interval keeps its width and its offsets
/// from the blocks' own change.
fn centred(iv: Option<(f64, f64)>, base: &[f64], new: &[f64], change: f64) -> Option<(f64, f64)> {
    let (lo, hi) = iv?;
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let blocks_change = mean(new) / mean(base) - 1.0;
    if !blocks_change.is_finite() {
        return None;
    }
    Some((lo - blocks_change + change, hi - blocks_change + change))
}

fn verdict(change: f64, interval: Option<(f64, f64)>, larger_is_worse: bool, threshold: f64) -> Verdict {
    let worse = if larger_is_worse { change } else { -change };
    let significant = |sign: f64| match interval {
        // the interval must lie entirely on that side of zero
        Some((lo, hi)) => {
            if sign > 0.0 {
                lo > 0.0
            } else {
                hi < 0.0
            }
        }
        // no per-block samples: the threshold alone decides
        None => true,
    };
    let dir = if larger_is_worse { 1.0 } else { -1.0 };
    if worse > threshold && significant(dir) {
        Verdict::Regression
    } else if worse < -threshold && significant(-dir) {
        Verdict::Improvement
    } else {
        Verdict::Same
    }
}

/// Compares two loaded result documents.
pub fn compare(base: &Value, new: &Value, threshold_pct: f64, metrics_wanted: &[String]) -> Report {
    let fields = [
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
    let env_diff = fields
        .iter()
        .filter_map(|f| {
            let (a, b) = (&base["environment"][f], &new["environment"][f]);
            (a != b).then(|| (f.to_string(), a.to_string(), b.to_string()))
        })
        .collect();
    let index = |doc: &Value| -> BTreeMap<String, Value> {
        doc["runs"]
            .as_array()
            .map(|a| a.iter().map(|r| (key(doc, r), r.clone())).collect())
            .unwrap_or_default()
    };
    let (bi, ni) = (index(base), index(new));
    let mut rows = Vec::new();
    for (k, br) in &bi {
        let Some(nr) = ni.get(k) else { continue };
        let (bm, nm) = (metrics(br, metrics_wanted), metrics(nr, metrics_wanted));
        for (name, bv, bs, worse_up) in bm {
            let Some((_, nv, ns, _)) = nm.iter().find(|m| m.0 == name) else {
                continue;
            };
            let change = if bv != 0.0 { nv / bv - 1.0 } else { 0.0 };
            let interval = centred(bootstrap(&bs, ns, 2000), &bs, ns, change);
            rows.push(Row {
                key: k.clone(),
                metric: name,
                base: bv,
                new: *nv,
                change,
                interval,
                larger_is_worse: worse_up,
                verdict: verdict(change, interval, worse_up, threshold_pct / 100.0),
            });
        }
    }
    Report {
        env_diff,
        rows,
        only_base: bi.keys().filter(|k| !ni.contains_key(*k)).cloned().collect(),
        only_new: ni.keys().filter(|k| !bi.contains_key(*k)).cloned().collect(),
    }
}

fn iv(r: &Row) -> String {
    r.interval
        .map(|(a, b)| format!("[{:+.2}%, {:+.2}%]", a * 100.0, b * 100.0))
        .unwrap_or_else(|| "n/a".into())
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
    s.push_str(&format!(
        "\n{:<60} {:>6} {:>12} {:>12} {:>9} {:>22}  verdict\n",
        "run", "metric", "base", "new", "change", "95% interval"
    ));
    for x in &r.rows {
        s.push_str(&format!(
            "{:<60} {:>6} {:>12.2} {:>12.2} {:>+8.2}% {:>22}  {}\n",
            x.key,
            x.metric,
            x.base,
            x.new,
            x.change * 100.0,
            iv(x),
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
    if r.env_diff.is_empty() {
        s.push_str("none\n");
    } else {
        s.push_str("| field | base | new |\n|---|---|---|\n");
        for (f, a, b) in &r.env_diff {
            s.push_str(&format!("| {f} | {a} | {b} |\n"));
        }
    }
    s.push_str("\n### Runs\n\n| run | metric | base | new | change | 95% interval | verdict |\n|---|---|---:|---:|---:|---|---|\n");
    for x in &r.rows {
        s.push_str(&format!(
            "| {} | {} | {:.2} | {:.2} | {:+.2}% | {} | {} |\n",
            x.key,
            x.metric,
            x.base,
            x.new,
            x.change * 100.0,
            iv(x),
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

/// JUnit XML: one test case per row, a failure per regression.
pub fn junit(r: &Report) -> String {
    let fails = r.rows.iter().filter(|x| x.verdict == Verdict::Regression).count();
    let mut s = format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"rdmaprobe compare\" tests=\"{}\" failures=\"{fails}\">\n", r.rows.len());
    for x in &r.rows {
        let name = xml(&format!("{} {}", x.key, x.metric));
        s.push_str(&format!("  <testcase classname=\"rdmaprobe\" name=\"{name}\">"));
        if x.verdict == Verdict::Regression {
            s.push_str(&format!(
                "<failure message=\"{}\"/>",
                xml(&format!(
                    "{:.2} -> {:.2} ({:+.2}%, interval {})",
                    x.base,
                    x.new,
                    x.change * 100.0,
                    iv(x)
                ))
            ));
        }
        s.push_str("</testcase>\n");
    }
    s.push_str("</testsuite>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_need_both_threshold_and_significance() {
        // latency up 10 %, interval clear of zero: regression
        assert_eq!(verdict(0.10, Some((0.05, 0.15)), true, 0.05), Verdict::Regression);
        // up 10 % but the interval includes zero: noise
        assert_eq!(verdict(0.10, Some((-0.02, 0.2)), true, 0.05), Verdict::Same);
        // significant but below the threshold
        assert_eq!(verdict(0.03, Some((0.01, 0.05)), true, 0.05), Verdict::Same);
        // bandwidth down 10 %: regression; up: improvement
        assert_eq!(verdict(-0.10, Some((-0.15, -0.05)), false, 0.05), Verdict::Regression);
        assert_eq!(verdict(0.10, Some((0.05, 0.15)), false, 0.05), Verdict::Improvement);
        // no samples: threshold alone
        assert_eq!(verdict(0.10, None, true, 0.05), Verdict::Regression);
    }

    #[test]
    fn intervals_are_centred_on_the_reported_change() {
        let a: Vec<f64> = (0..10).map(|i| 100.0 + (i % 3) as f64).collect();
        let b: Vec<f64> = a.iter().map(|x| x * 1.2).collect();
        let iv = bootstrap(&a, &b, 2000);
        let (lo, hi) = iv.unwrap();
        // the run's percentile changed by +25 % while the blocks' mean changed by +20 %
        let (clo, chi) = centred(iv, &a, &b, 0.25).unwrap();
        assert!((clo - (lo + 0.05)).abs() < 1e-12 && (chi - (hi + 0.05)).abs() < 1e-12);
        assert!(clo < 0.25 && 0.25 < chi, "{clo} {chi}");
        assert_eq!(centred(None, &a, &b, 0.25), None);
    }

    #[test]
    fn p99_is_judged_on_the_blocks_p99s() {
        let run = serde_json::json!({
            "latency": {"p50": 100.0, "p99": 150.0},
            "block_medians_ns": [100.0, 101.0, 99.0],
            "block_p99_ns": [150.0, 160.0, 140.0],
        });
        let m = metrics(&run, &["p50".into(), "p99".into()]);
        assert_eq!(m[0].0, "p50");
        assert_eq!(m[0].2, vec![100.0, 101.0, 99.0]);
        assert_eq!(m[1].0, "p99");
        assert_eq!(m[1].2, vec![150.0, 160.0, 140.0]);
        // a file from before block p99s were recorded: no interval, the threshold alone
        let old = serde_json::json!({"latency": {"p50": 100.0, "p99": 150.0}, "block_medians_ns": [1.0, 2.0, 3.0]});
        assert!(metrics(&old, &["p99".into()])[0].2.is_empty());
    }

    #[test]
    fn bootstrap_separates_shifted_samples_and_not_equal_ones() {
        let a: Vec<f64> = (0..10).map(|i| 100.0 + (i % 3) as f64).collect();
        let b: Vec<f64> = a.iter().map(|x| x * 1.2).collect();
        let (lo, hi) = bootstrap(&a, &b, 2000).unwrap();
        assert!(lo > 0.15 && hi < 0.25, "{lo} {hi}");
        let (lo, hi) = bootstrap(&a, &a, 2000).unwrap();
        assert!(lo < 0.0 && hi > 0.0, "{lo} {hi}");
        assert_eq!(bootstrap(&a[..2], &b, 100), None);
        // deterministic
        assert_eq!(bootstrap(&a, &b, 500), bootstrap(&a, &b, 500));
    }
}
