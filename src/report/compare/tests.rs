//! Tests of the compare: verdicts, the bootstraps and Welch's t, input checks, outputs.

use super::input::key;
use super::*;
use serde_json::json;

fn runs(values: &[f64], blocks: impl Fn(f64) -> Vec<f64>) -> Vec<RunSample> {
    values
        .iter()
        .map(|&v| RunSample {
            value: v,
            blocks: blocks(v),
            level: None,
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
    assert_eq!(verdict(0.10, Some(0.001), true, 0.05, ALPHA), Verdict::Regression);
    // up 10 % but not significant after adjustment: noise
    assert_eq!(verdict(0.10, Some(0.2), true, 0.05, ALPHA), Verdict::Same);
    assert_eq!(verdict(0.10, Some(ALPHA), true, 0.05, ALPHA), Verdict::Same);
    // significant but below the threshold
    assert_eq!(verdict(0.03, Some(0.001), true, 0.05, ALPHA), Verdict::Same);
    // bandwidth down 10 %: regression; up: improvement
    assert_eq!(verdict(-0.10, Some(0.001), false, 0.05, ALPHA), Verdict::Regression);
    assert_eq!(verdict(0.10, Some(0.001), false, 0.05, ALPHA), Verdict::Improvement);
    assert_eq!(verdict(-0.10, Some(0.001), true, 0.05, ALPHA), Verdict::Improvement);
    // nothing to judge the noise by: never a regression
    assert_eq!(verdict(0.50, None, true, 0.05, ALPHA), Verdict::NoInterval);
}

#[test]
fn welch_on_runs() {
    // Welch on runs: identical sides p 1; a clear shift p small, its interval around it
    let runs = |v: &[f64]| {
        v.iter()
            .map(|&x| RunSample {
                value: x,
                blocks: vec![],
                level: None,
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

/// The paired difference: the median of the per-round differences, an interval of that same
/// median (which holds it), a shift found and no shift not, the same input the same answer, and
/// no pairing of blocks that are not the same rounds.
#[test]
fn paired_difference_is_one_statistic_with_its_interval() {
    let a: Vec<f64> = (0..10).map(|i| 100.0 + (i % 3) as f64).collect();
    let b: Vec<f64> = a.iter().enumerate().map(|(i, x)| x + 20.0 + (i % 4) as f64).collect();
    let p = paired_difference(&a, &b, 2000).unwrap();
    let (lo, hi) = p.interval.unwrap();
    assert_eq!((p.median, p.rounds), (21.0, 10), "{p:?}");
    assert!(lo <= p.median && p.median <= hi && lo >= 20.0 && hi <= 23.0, "{p:?}");
    let z = paired_difference(&a, &a, 2000).unwrap();
    assert_eq!((z.median, z.interval), (0.0, Some((0.0, 0.0))));
    let noisy: Vec<f64> = a
        .iter()
        .enumerate()
        .map(|(i, x)| x + [-3.0, 2.0, -1.0, 4.0, 1.0][i % 5])
        .collect();
    let n = paired_difference(&a, &noisy, 2000).unwrap();
    let (lo, hi) = n.interval.unwrap();
    assert!(lo < 0.0 && hi > 0.0 && lo <= n.median && n.median <= hi, "{n:?}");
    assert_eq!(paired_difference(&a[..2], &b[..2], 100).unwrap().interval, None);
    assert_eq!(paired_difference(&a, &b[..9], 100), None);
    assert_eq!(paired_difference(&[], &[], 100), None);
    assert_eq!(paired_difference(&a, &b, 500), paired_difference(&a, &b, 500));
}

#[test]
fn default_thresholds_by_row_and_runs() {
    assert_eq!(default_threshold_pct("lat", "p50", true), 5.0);
    assert_eq!(default_threshold_pct("lat", "p50", false), 250.0);
    assert_eq!(default_threshold_pct("lat", "p99", false), 500.0);
    assert_eq!(default_threshold_pct("post_cost", "p50", false), 300.0);
    assert_eq!(default_threshold_pct("suite?", "p50", true), 10.0);
    assert_eq!(default_threshold_pct("kv", "bw", false), 75.0);
    assert_eq!(default_threshold_pct("kv", "p99", false), 200.0);
    assert_eq!(default_threshold_pct("kv", "p50", true), 10.0);
    // every default with one run is at least the one with several
    assert!(DEFAULT_THRESHOLDS_PCT
        .iter()
        .all(|&(_, _, several, one)| one >= several));
    // a row takes its scenario's default
    let a = doc(json!([lat_run(json!(100.0))]));
    let r = compare(&a, &a, &Options::default()).unwrap();
    assert_eq!((r.rows[0].metric.as_str(), r.rows[0].threshold), ("p50", 2.5));
    assert_eq!((r.rows[1].metric.as_str(), r.rows[1].threshold), ("p99", 5.0));
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
    // one run per side: a post-cost row needs more than model0's run-to-run +218 % (default
    // 300 %); a real shift of every block beyond it is found, and below it with --threshold
    let c = pc(210.0, json!([210.0, 214.2, 205.8, 212.1, 207.9]));
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

#[test]
fn rows_are_sorted_by_verdict_with_units_a_final_verdict_and_no_negative_zero() {
    let bw = |v: f64| {
        json!({"scenario": "bw", "op": "write", "backend": "direct", "size": 8,
        "summary": {"bw_avg_mib_s": v, "window_mib_s": [v, v * 1.001, v * 0.999, v * 1.0005, v * 0.9995]}})
    };
    // a latency run unchanged and a bandwidth run at a fifth: the bandwidth row is the
    // regression and comes first
    let mut lat_a = lat_run(json!(100.0));
    lat_a["scenario"] = json!("lat");
    let mut lat_b = lat_a.clone();
    // 100 -> 99.9999: a change that rounds to -0.00 %
    lat_b["latency"]["p50"] = json!(99.9999);
    let a = doc(json!([lat_a, bw(1000.0)]));
    let b = doc(json!([lat_b, bw(200.0)]));
    let r = compare(&a, &b, &Options::default()).unwrap();
    assert_eq!(r.rows[0].verdict, Verdict::Regression, "{}", text(&r));
    assert_eq!((r.rows[0].metric.as_str(), r.rows[0].unit), ("bw", "MiB/s"));
    assert!(r.rows.windows(2).all(|w| w[0].verdict.rank() <= w[1].verdict.rank()));
    assert!(r.rows.iter().filter(|x| x.metric != "bw").all(|x| x.unit == "ns"));
    let t = text(&r);
    assert!(!t.contains("-0.00%"), "{t}");
    assert!(t.contains("+0.00%"), "{t}");
    let last = t.lines().last().unwrap();
    assert!(
        last.starts_with("verdict: REGRESSION (1 regression, 0 improvement, 2 same, 0 not judged, of 3 rows; exit 1)"),
        "{last}"
    );
    let md = markdown(&r);
    assert!(
        md.starts_with("**verdict: REGRESSION") && md.contains("| MiB/s |") && !md.contains("-0.00%"),
        "{md}"
    );
    assert!(junit(&r).contains("MiB/s"));
    let same = compare(&a, &a, &Options::default()).unwrap();
    assert!(text(&same)
        .trim_end()
        .ends_with("verdict: no regression (0 regression, 0 improvement, 3 same, 0 not judged, of 3 rows; exit 0)"));
    // post cost per WQE
    assert_eq!(super::unit("post_cost", "p50"), "ns/WQE");
}

/// A file of three backends' `lat write 8B` runs with these block medians (p50 the median of
/// the blocks, p99 twice it), from rdmaprobe source `source`.
fn three(source: &str, verbs: &[f64], wr: &[f64], direct: &[f64]) -> Value {
    let run = |b: &str, blocks: &[f64]| {
        let mut s = blocks.to_vec();
        s.sort_by(f64::total_cmp);
        let p50 = s[s.len() / 2];
        json!({"scenario": "lat", "op": "write", "backend": b, "size_bytes": 8,
               "latency_ns": {"p50": p50, "p99": 2.0 * p50},
               "block_medians_ns": blocks, "block_p99_ns": blocks.iter().map(|x| 2.0 * x).collect::<Vec<_>>()})
    };
    json!({"schema_version": 2, "tool": {"name": "rdmaprobe", "source": source},
           "environment": {"kernel": "k", "cpu_model": "c", "device": "model0", "rdma_core_built": "44.0"},
           "params": {"scenario": "lat"},
           "runs": [run("verbs", verbs), run("wr", wr), run("direct", direct)]})
}

/// Ten blocks at `v`, those in `slow` raised by `by` (a state of the host lasting some blocks:
/// on model0 it doubles a block's figure), with a ±1 % spread.
fn level(v: f64, slow: std::ops::Range<usize>, by: f64) -> Vec<f64> {
    (0..10)
        .map(|i| (v + if slow.contains(&i) { by } else { 0.0 }) * (1.0 + (i as f64 - 4.5) / 450.0))
        .collect()
}

#[test]
fn the_in_run_control_removes_a_host_state_and_finds_a_driver_change() {
    let o = Options::default();
    let row = |r: &Report, k: &str, m: &str| r.rows.iter().find(|x| x.key == k && x.metric == m).cloned().unwrap();
    // NEW with another rdma-core
    let new_lib = |mut d: Value| {
        d["environment"]["rdma_core_built"] = json!("56.1");
        d
    };
    let fast = |v: f64| level(v, 0..0, 0.0);
    let slow = |v: f64| level(v, 2..8, 800.0);
    // BASE all fast; NEW with the host slow for 6 of 10 rounds (+800 ns on every backend):
    // every own p50 moves beyond its one-run threshold (250 %), direct's within the control's
    // (300 %), the contrasts do not move
    let base = three("s1", &fast(300.0), &fast(310.0), &fast(280.0));
    let same_lib = three("s1", &slow(300.0), &slow(310.0), &slow(280.0));
    // the same library on both sides: auto uses the control too (identical runs of one
    // library are judged as a change of library would be), and says so
    let r = compare(&base, &same_lib, &o).unwrap();
    assert_eq!(r.control, ControlUse::SameLibrary, "{}", text(&r));
    assert!(!r.regressed(), "{}", text(&r));
    assert!(
        text(&r).contains("do not differ in the library under test either"),
        "{}",
        text(&r)
    );
    // on: the same, and a compare where it cannot be used is refused
    let on = Options {
        control: ControlMode::On,
        ..Options::default()
    };
    assert_eq!(compare(&base, &same_lib, &on).unwrap().control, ControlUse::SameLibrary);
    let slow_new = new_lib(same_lib);
    let r = compare(&base, &slow_new, &o).unwrap();
    assert_eq!(r.control, ControlUse::Used, "{}", text(&r));
    assert!(!r.regressed(), "{}", text(&r));
    let v = row(&r, "lat write verbs 8B", "p50");
    assert!(v.change > 2.5 && v.verdict == Verdict::Regression, "{v:?}");
    assert!(v.role == Role::ByContrast && !v.counts, "{v:?}");
    let c = row(&r, "lat write verbs-direct 8B", "p50");
    assert!(
        c.role == Role::Contrast && c.counts && c.verdict == Verdict::Same,
        "{c:?}"
    );
    // the change is told over verbs' lower quartile of blocks in BASE (its fastest rounds)
    assert!(c.change.abs() < 0.02 && (c.level.unwrap() - 300.0).abs() < 2.0, "{c:?}");
    let d = row(&r, "lat write direct 8B", "p50");
    assert!(d.role == Role::Control && d.counts && d.threshold == 3.0, "{d:?}");
    // direct +286 %: beyond its own threshold (250 %), within the control's (300 %): said not
    // judged, not held
    assert!(text(&r).contains("the control NOT JUDGED"), "{}", text(&r));
    // without the control the same files are a regression
    let off = Options {
        control: ControlMode::Off,
        ..Options::default()
    };
    let r = compare(&base, &slow_new, &off).unwrap();
    assert!(r.regressed() && r.control == ControlUse::Off, "{}", text(&r));
    // verbs 110 % slower in the slow state as well: found by its contrast (+330 ns over 300,
    // beyond the contrast's 100 % with one run per side)
    let worse = new_lib(three("s1", &slow(630.0), &slow(310.0), &slow(280.0)));
    let r = compare(&base, &worse, &o).unwrap();
    let c = row(&r, "lat write verbs-direct 8B", "p50");
    assert!(
        c.verdict == Verdict::Regression && (c.change - 1.1).abs() < 0.01,
        "{c:?}"
    );
    // p50 only: the p99 contrast's threshold is 250 %
    assert!(r.regressed() && r.count(Verdict::Regression) == 1, "{}", text(&r));
    // the control's own row: a device's change beyond the control's threshold is found
    let dev = new_lib(three("s1", &fast(1500.0), &fast(1510.0), &fast(1400.0)));
    let r = compare(&base, &dev, &o).unwrap();
    assert_eq!(
        row(&r, "lat write direct 8B", "p50").verdict,
        Verdict::Regression,
        "{}",
        text(&r)
    );
    assert!(text(&r).contains("the control MOVED"), "{}", text(&r));
    // another source of rdmaprobe: the control is not used, and the report says why
    let other = new_lib(three("s2", &slow(300.0), &slow(310.0), &slow(280.0)));
    let r = compare(&base, &other, &o).unwrap();
    assert!(
        matches!(&r.control, ControlUse::Unusable(w) if w.contains("another source of rdmaprobe")),
        "{:?}",
        r.control
    );
    assert!(
        r.regressed() && text(&r).contains("in-run control NOT used"),
        "{}",
        text(&r)
    );
    assert!(text(&r).contains("tool.source"), "{}", text(&r));
    // runs waiting for completion events have no contrast (direct has no such twin)
    let mut ev = base.clone();
    for r in ev["runs"].as_array_mut().unwrap() {
        r["completion"] = json!("events");
    }
    let r = compare(&ev, &new_lib(ev.clone()), &o).unwrap();
    assert!(r.rows.iter().all(|x| x.role != Role::Contrast), "{}", text(&r));
}

#[test]
fn the_controls_one_run_thresholds_stand_above_the_own_rows() {
    // the band "the control NOT JUDGED" (beyond the own row's threshold, within the control's)
    // exists only where the control's is the wider
    for &(sc, m, t) in CONTROL_ONE_RUN_THRESHOLDS_PCT.iter() {
        let own = default_threshold_pct(sc, m, false);
        assert!(
            t > own,
            "{sc} {m}: the control's {t} % is not above the own rows' {own} %"
        );
    }
    // a threshold given: every row judged against it, nothing said not judged
    let fast = |v: f64| level(v, 0..0, 0.0);
    let base = three("s1", &fast(300.0), &fast(310.0), &fast(200.0));
    let shared = three("s1", &fast(850.0), &fast(860.0), &fast(750.0));
    let o = Options {
        threshold_pct: Some(400.0),
        ..Options::default()
    };
    let r = compare(&base, &shared, &o).unwrap();
    assert!(!r.verdict_line().contains("NOT JUDGED"), "{}", text(&r));
    assert!(compare(&base, &shared, &Options::default())
        .unwrap()
        .verdict_line()
        .contains("NOT JUDGED"));
}

#[test]
fn control_on_refuses_a_compare_where_it_cannot_be_used() {
    let on = Options {
        control: ControlMode::On,
        ..Options::default()
    };
    let base = three(
        "s1",
        &level(300.0, 0..0, 0.0),
        &level(310.0, 0..0, 0.0),
        &level(200.0, 0..0, 0.0),
    );
    let mut other = base.clone();
    other["tool"]["source"] = json!("s2");
    let refused = compare(&base, &other, &on);
    assert!(
        matches!(&refused, Err(CompareError::ControlRequired(w)) if w.contains("another source of rdmaprobe")),
        "{refused:?}"
    );
    // auto compares them, every backend's own rows judged, and says why
    let r = compare(&base, &other, &Options::default()).unwrap();
    assert!(matches!(r.control, ControlUse::Unusable(_)), "{:?}", r.control);
}

#[test]
fn with_the_same_library_the_control_still_finds_a_device_change_and_says_what_it_cannot_judge() {
    let o = Options::default();
    let fast = |v: f64| level(v, 0..0, 0.0);
    let base = three("s1", &fast(300.0), &fast(310.0), &fast(200.0));
    // every backend +1200 ns (direct +600 %): beyond the control's 300 %, a regression
    let dev = three("s1", &fast(1500.0), &fast(1510.0), &fast(1400.0));
    let r = compare(&base, &dev, &o).unwrap();
    assert_eq!(r.control, ControlUse::SameLibrary);
    assert!(r.regressed() && text(&r).contains("the control MOVED"), "{}", text(&r));
    // every backend +550 ns (direct +275 %, beyond its own 250 %, within the control's 300 %):
    // one file per side cannot judge it; the verdict line says so
    let shared = three("s1", &fast(850.0), &fast(860.0), &fast(750.0));
    let r = compare(&base, &shared, &o).unwrap();
    assert!(!r.regressed(), "{}", text(&r));
    assert!(
        r.verdict_line().contains("the control NOT JUDGED in 1 row(s)"),
        "{}",
        r.verdict_line()
    );
    // --until-decided refuses Benjamini-Hochberg (its bound is for any false alarm)
    let bh = Options {
        adjust: Adjust::BenjaminiHochberg,
        until_decided: Some(5),
        ..Options::default()
    };
    assert!(matches!(compare(&base, &base, &bh), Err(CompareError::Sequential(w)) if w.contains("holm")));
}

#[test]
fn every_row_says_what_it_could_detect_and_the_runs_a_target_needs() {
    // three runs per side with a 4 % spread: Welch over the runs; its detectable change is
    // beyond the threshold, shrinks with more runs, and a target within the threshold is never
    let mk = |vals: &[f64]| {
        vals.iter()
            .map(|&v| {
                doc(json!([{"op": "write", "backend": "direct", "size": 8,
                                  "latency": {"p50": v, "p99": 3.0 * v}}]))
            })
            .map(|d| ("f".to_string() + &d.to_string(), d))
            .collect::<Vec<_>>()
    };
    let (b3, n3) = (mk(&[100.0, 104.0, 96.0]), mk(&[101.0, 97.0, 105.0]));
    let o = Options {
        target_effect_pct: Some(10.0),
        ..Options::default()
    };
    let r = compare_sets(&b3, &n3, &o).unwrap();
    let p50 = r.rows.iter().find(|x| x.metric == "p50").unwrap();
    let d3 = p50.detectable.unwrap();
    assert!(
        p50.verdict == Verdict::Same && d3 > p50.threshold && d3 < 1.0,
        "{p50:?}"
    );
    let Some(Needed::Runs(n)) = p50.needed else {
        panic!("{p50:?}")
    };
    assert!((3..=MAX_RUNS).contains(&n), "{p50:?}");
    let (b6, n6) = (
        mk(&[100.0, 104.0, 96.0, 100.5, 103.5, 96.5]),
        mk(&[101.0, 97.0, 105.0, 100.0, 96.0, 104.0]),
    );
    let r6 = compare_sets(&b6, &n6, &o).unwrap();
    let d6 = r6.rows.iter().find(|x| x.metric == "p50").unwrap().detectable.unwrap();
    assert!(d6 < d3, "{d6} {d3}");
    // a target within the threshold (p99's 20 %): never
    let o20 = Options {
        target_effect_pct: Some(15.0),
        ..Options::default()
    };
    let r = compare_sets(&b3, &n3, &o20).unwrap();
    let p99 = r.rows.iter().find(|x| x.metric == "p99").unwrap();
    assert_eq!(p99.needed, Some(Needed::BelowThreshold), "{p99:?}");
    // one run per side: detectable from the bootstrap's width; runs needed for a target above
    // its 250 % threshold unknown
    let a = doc(json!([lat_run(json!(100.0))]));
    let o260 = Options {
        target_effect_pct: Some(260.0),
        ..Options::default()
    };
    let r = compare(&a, &a, &o260).unwrap();
    let p50 = r.rows.iter().find(|x| x.metric == "p50").unwrap();
    assert!(p50.detectable.unwrap() >= p50.threshold, "{p50:?}");
    assert_eq!(p50.needed, Some(Needed::Unknown));
    let t = text(&r);
    assert!(
        t.contains("detects") && t.contains("runs@260%") && t.contains("unknown"),
        "{t}"
    );
    // the detectable change is found: a shift of that size in every run is a regression
    let shifted: Vec<f64> = [100.0, 104.0, 96.0].iter().map(|v| v * (1.0 + d3) * 1.02).collect();
    let r = compare_sets(&b3, &mk(&shifted), &Options::default()).unwrap();
    assert!(r.regressed(), "{}", text(&r));
}

#[test]
fn runs_until_decided_keep_the_false_alarm_rate_and_decide_a_change() {
    // the levels of the looks spend ALPHA: they sum to it, early looks the largest
    let l = |n| sequential::look(n, n, 8).unwrap();
    let total: f64 = (3..=8).map(|n| l(n).alpha).sum();
    assert!(
        (total - ALPHA).abs() < 1e-12 && (l(8).spent - ALPHA).abs() < 1e-12,
        "{total}"
    );
    assert!((3..8).all(|n| l(n).alpha > l(n + 1).alpha) && l(8).last() && !l(7).last());
    // a look needs 3 runs per side, and no more than the budget
    for (b, n, max) in [(2, 2, 8), (9, 9, 8), (3, 3, 2)] {
        assert!(matches!(sequential::look(b, n, max), Err(CompareError::Sequential(_))));
    }
    // modelled runs: one direct lat run per file, its p50 lognormal around 100 with a 4 %
    // spread between runs; NEW shifted by `shift`; the looks at 3..=8 runs per side
    let mut rng = 0x9e37_79b9_u64;
    let mut normal = move || {
        let mut u = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng >> 11) as f64 / (1u64 << 53) as f64
        };
        (-2.0 * u().max(1e-300).ln()).sqrt() * (std::f64::consts::TAU * u()).cos()
    };
    let file = |v: f64, i: usize, side: &str| {
        let d = doc(json!([{"op": "write", "backend": "direct", "size": 8,
                                "latency": {"p50": v, "p99": 3.0 * v}}]));
        (format!("{side}{i}"), d)
    };
    let o = Options {
        metrics: vec!["p50".into()],
        until_decided: Some(8),
        ..Options::default()
    };
    let mut trial = |shift: f64| -> (u8, usize) {
        let (mut b, mut n) = (Vec::new(), Vec::new());
        for i in 1..=8 {
            b.push(file(100.0 * (0.04 * normal()).exp(), i, "b"));
            n.push(file(100.0 * (1.0 + shift) * (0.04 * normal()).exp(), i, "n"));
            if i >= 3 {
                let r = compare_sets(&b, &n, &o).unwrap();
                let status = r.exit_status();
                if status != 3 || i == 8 {
                    return (status, i);
                }
            }
        }
        unreachable!()
    };
    // no change, 400 sequences: regressions at most ALPHA's share (20), plus a margin for the
    // draw (the rule's bound is 5 %; with Bonferroni over looks it is below)
    let alarms = (0..400).filter(|_| trial(0.0).0 == 1).count();
    // (deterministic draw: 1 of 400 here)
    assert!(alarms <= 20, "{alarms} false alarms in 400");
    // a change of +15 % (three times the 5 % threshold): found, mostly before the budget
    let found: Vec<(u8, usize)> = (0..100).map(|_| trial(0.15)).collect();
    let hits = found.iter().filter(|(s, _)| *s == 1).count();
    let early = found.iter().filter(|(s, n)| *s == 1 && *n <= 5).count();
    // (deterministic draw: 100, 94 of them by 5 runs)
    assert!(hits >= 95 && early >= 90, "{hits} found, {early} by 5 runs");
    // no change with a 1 % spread: decided same before the budget (the bound within 5 %)
    let b: Vec<_> = (1..=4).map(|i| file(100.0 + i as f64 * 0.5, i, "b")).collect();
    let n: Vec<_> = (1..=4).map(|i| file(100.5 + i as f64 * 0.4, i, "n")).collect();
    let r = compare_sets(&b, &n, &o).unwrap();
    assert_eq!(r.exit_status(), 0, "{}", text(&r));
    assert!(r.rows.iter().all(|x| x.decided == Some(true)));
    // a 4 % spread at 3 runs: undecided, said so, exit 3
    let b: Vec<_> = [100.0, 104.0, 96.0]
        .iter()
        .enumerate()
        .map(|(i, &v)| file(v, i, "b"))
        .collect();
    let n: Vec<_> = [101.0, 97.0, 105.0]
        .iter()
        .enumerate()
        .map(|(i, &v)| file(v, i, "n"))
        .collect();
    let r = compare_sets(&b, &n, &o).unwrap();
    let t = text(&r);
    assert_eq!(r.exit_status(), 3, "{t}");
    assert!(
        t.contains("undecided") && t.contains("look 1 of 6") && t.contains("exit 3"),
        "{t}"
    );
}

/// The (first) row of metric `m` in `r`.
fn metric_row<'a>(r: &'a Report, m: &str) -> &'a Row {
    r.rows
        .iter()
        .find(|x| x.metric == m)
        .unwrap_or_else(|| panic!("no {m} row"))
}

#[test]
fn an_anatomy_runs_turnaround_and_rest_are_rows_of_their_own() {
    // direct alone: three runs a side, the rest twice as long in NEW, the turnaround unchanged
    let run = |turn: f64, rest: f64| {
        let st = |v: f64| json!({"p50": v});
        doc(
            json!([{"op": "send", "backend": "direct", "size": 64, "latency": {"p50": 400.0, "p99": 800.0},
                    "block_medians_ns": [400.0, 401.0, 399.0], "block_p99_ns": [800.0, 810.0, 790.0],
                    "anatomy": {"round_trip_ns": st(turn + rest), "turnaround_ns": st(turn), "rest_ns": st(rest)}}]),
        )
    };
    let set = |v: &[(f64, f64)]| -> Vec<(String, Value)> {
        v.iter()
            .enumerate()
            .map(|(i, &(t, r))| (format!("f{i}-{t}-{r}"), run(t, r)))
            .collect()
    };
    let base = set(&[(60.0, 700.0), (61.0, 710.0), (59.0, 690.0)]);
    let new = set(&[(60.0, 1400.0), (61.0, 1420.0), (59.0, 1380.0)]);
    let r = compare_sets(&base, &new, &Options::default()).unwrap();
    let row = |m: &str| metric_row(&r, m);
    assert_eq!(row("rest").verdict, Verdict::Regression, "{:?}", row("rest"));
    assert_eq!(row("turn").verdict, Verdict::Same, "{:?}", row("turn"));
    assert_eq!((row("rest").threshold, row("turn").threshold), (0.9, 1.1));
    // a run without --anatomy has no such rows, and is not the same run as one with it
    let plain = vec![("p".to_string(), doc(json!([lat_run(json!(100.0))])))];
    let r = compare_sets(&plain, &plain, &Options::default()).unwrap();
    assert!(r.rows.iter().all(|x| x.metric != "turn" && x.metric != "rest"));
    let mut with = lat_run(json!(100.0));
    with["anatomy"] = run(60.0, 700.0)["runs"][0]["anatomy"].clone();
    let with = vec![("w".to_string(), doc(json!([with])))];
    assert!(compare_sets(&plain, &with, &Options::default())
        .unwrap()
        .rows
        .is_empty());
    // verbs beside direct: its turn and rest are its own rows, never a contrast to direct's
    let both = |verbs_rest: f64| {
        let mut d = run(60.0, 700.0);
        let mut v = d["runs"][0].clone();
        v["backend"] = json!("verbs");
        v["anatomy"]["rest_ns"]["p50"] = json!(verbs_rest);
        d["runs"].as_array_mut().unwrap().push(v);
        d
    };
    let r = compare(&both(800.0), &both(810.0), &Options::default()).unwrap();
    assert!(
        r.rows.iter().any(|x| x.metric == "rest" && x.key.contains(" verbs ")),
        "{:?}",
        r.rows
    );
    assert!(
        r.rows
            .iter()
            .all(|x| !(x.key.contains("verbs-direct") && (x.metric == "turn" || x.metric == "rest"))),
        "{:?}",
        r.rows
    );
    // a damaged anatomy is refused, naming the field
    let mut bad = run(60.0, 700.0);
    bad["runs"][0]["anatomy"]["rest_ns"]["p50"] = json!(-1.0);
    let e = compare(&run(60.0, 700.0), &bad, &Options::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("anatomy.rest_ns.p50 is -1"), "{e}");
    // the NIC split's components are rows of their own too: the wire doubled, the responder
    // and the polling not
    let nic = |wire: f64| {
        let mut d = run(60.0, 700.0);
        let st = |v: f64| json!({"p50": v});
        d["runs"][0]["anatomy"]["nic"] = json!({"wire_ns": st(wire), "responder_ns": st(150.0), "poll_ns": st(120.0)});
        d
    };
    let base: Vec<(String, Value)> = (0..3).map(|i| (format!("b{i}"), nic(500.0 + i as f64))).collect();
    let new: Vec<(String, Value)> = (0..3).map(|i| (format!("n{i}"), nic(1000.0 + i as f64))).collect();
    let r = compare_sets(&base, &new, &Options::default()).unwrap();
    let row = |m: &str| metric_row(&r, m);
    assert_eq!(row("wire").verdict, Verdict::Regression, "{:?}", row("wire"));
    assert_eq!(row("responder").verdict, Verdict::Same, "{:?}", row("responder"));
    assert_eq!(row("poll").verdict, Verdict::Same, "{:?}", row("poll"));
    assert_eq!((row("wire").threshold, row("poll").threshold), (0.9, 0.6));
    assert!(r.rows.iter().all(|x| !x.key.contains("verbs-direct")));
}
