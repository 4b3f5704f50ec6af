//! `rdmaprobe compare`: the verdicts CI relies on (same configuration: no regression; a real
//! slowdown: regression; both stable over repeated comparisons and runs), the output formats,
//! and inputs that cannot be compared (exit 2).

mod cmd;
use cmd::run;

fn result(dir: &std::path::Path, name: &str, delay: u64) -> String {
    let p = dir.join(name);
    let d = delay.to_string();
    let (c, o, e) = run(&[
        "lat",
        "write",
        "--loopback",
        "-d",
        "model0",
        "-s",
        "8",
        "-n",
        "20000",
        "--blocks",
        "20",
        "--model-delay-ns",
        &d,
        "--json",
        p.to_str().unwrap(),
    ]);
    assert_eq!(c, 0, "{o}{e}");
    p.to_str().unwrap().to_string()
}

/// The p50 and the p99 row of `compare`'s text output each show an interval and end with
/// `verdict`.
fn rows_have_interval_and_verdict(o: &str, verdict: &str) {
    for m in [" p50 ", " p99 "] {
        let row = o
            .lines()
            .find(|l| l.contains(m))
            .unwrap_or_else(|| panic!("no{m}row:\n{o}"));
        assert!(row.contains('[') && row.ends_with(verdict), "{row}");
    }
}

#[test]
fn verdicts_are_right_and_stable() {
    let dir = std::env::temp_dir().join(format!("rdmaprobe-cmp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // two runs of the same configuration, one with 2 us added each way
    let (a, b, slow) = (
        result(&dir, "a.json", 0),
        result(&dir, "b.json", 0),
        result(&dir, "slow.json", 2000),
    );
    for _ in 0..3 {
        let (c, o, e) = run(&["compare", &a, &b, "--threshold", "25", "--metric", "p50,p99"]);
        assert_eq!(c, 0, "same configuration judged a regression:\n{o}{e}");
        assert!(
            o.contains("environment differences:\n  none") && o.contains(" same"),
            "{o}"
        );
        // p50 and p99 each have an interval from the per-block values
        rows_have_interval_and_verdict(&o, "same");
        let (c, o, e) = run(&["compare", &a, &slow, "--threshold", "25", "--metric", "p50,p99"]);
        assert_eq!(c, 1, "a 2 us slowdown not found:\n{o}{e}");
        rows_have_interval_and_verdict(&o, "REGRESSION");
        // the other way round it is an improvement, not a regression
        let (c, o, _) = run(&["compare", &slow, &a, "--threshold", "25"]);
        assert_eq!(c, 0, "{o}");
        assert!(o.contains("improvement"), "{o}");
    }
    let (_, md, _) = run(&["compare", &a, &slow, "--format", "markdown"]);
    assert!(md.contains("| run | metric |") && md.contains("**REGRESSION**"), "{md}");
    let (_, x, _) = run(&["compare", &a, &slow, "--format", "junit"]);
    assert!(
        x.starts_with("<?xml") && x.contains("<failure message=") && x.contains("failures=\"2\""),
        "{x}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn inputs_that_cannot_be_compared_exit_2() {
    let dir = std::env::temp_dir().join(format!("rdmaprobe-cmp-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = result(&dir, "good.json", 0);
    let text = std::fs::read_to_string(&good).unwrap();
    let w = |name: &str, content: &str| {
        let p = dir.join(name);
        std::fs::write(&p, content).unwrap();
        p.to_str().unwrap().to_string()
    };
    let cases = [
        (w("truncated.json", &text[..text.len() / 2]), "truncated or corrupt"),
        (w("empty.json", ""), "empty file"),
        (w("foreign.json", r#"{"hello": "world"}"#), "not an rdmaprobe result"),
        (
            w(
                "schema.json",
                &text.replacen("\"schema_version\": 1", "\"schema_version\": 99", 1),
            ),
            "schema version 99",
        ),
        (dir.join("missing.json").to_str().unwrap().to_string(), "No such file"),
    ];
    for (p, why) in &cases {
        let (c, o, e) = run(&["compare", &good, p]);
        assert_eq!(c, 2, "{p}: {o}{e}");
        assert!(e.contains(why), "{p}: {e}");
    }
    // nothing matches: a bw result against a lat result
    let bw = dir.join("bw.json");
    let (c, _, _) = run(&[
        "bw",
        "write",
        "--loopback",
        "-d",
        "model0",
        "-n",
        "2000",
        "--json",
        bw.to_str().unwrap(),
    ]);
    assert_eq!(c, 0);
    let (c, _, e) = run(&["compare", &good, bw.to_str().unwrap()]);
    assert_eq!(c, 2);
    assert!(e.contains("no run of BASE matches"), "{e}");
    let (c, _, e) = run(&["compare", &good, &good, "--metric", "p42"]);
    assert_eq!(c, 2);
    assert!(e.contains("unknown metric"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn suite_quick_writes_its_files_and_compares_with_itself() {
    let dir = std::env::temp_dir().join(format!("rdmaprobe-suite-{}", std::process::id()));
    let (c, o, e) = run(&["suite", "--quick", "-d", "model0", "--out", dir.to_str().unwrap()]);
    assert_eq!(c, 0, "{o}{e}");
    assert!(o.contains("WARNING: device is model0, a software model"), "{o}");
    // model0 runs the direct backend alone: the summary says there is no overhead to show
    assert!(
        o.contains("only the direct backend runs here, so no driver overhead to show"),
        "{o}"
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("results.json")).unwrap()).unwrap();
    let runs = v["runs"].as_array().unwrap();
    for scen in ["lat", "bw", "post_cost"] {
        assert!(runs.iter().any(|r| r["scenario"] == scen), "no {scen} run");
    }
    // lat: send, write, read at 3 sizes and atomic at 8 B
    assert_eq!(runs.iter().filter(|r| r["scenario"] == "lat").count(), 3 * 3 + 1);
    let hlog = std::fs::read_to_string(dir.join("latency.hlog")).unwrap();
    assert!(hlog.lines().filter(|l| l.starts_with("Tag=lat-")).count() >= 10);
    let res = dir.join("results.json");
    let (c, o, _) = run(&["compare", res.to_str().unwrap(), res.to_str().unwrap()]);
    assert_eq!(c, 0, "{o}");
    assert!(
        o.contains("lat send direct 8B") && o.contains("post_cost write direct 8B"),
        "{o}"
    );
    // an output directory that cannot be written
    let (c, _, e) = run(&[
        "suite",
        "--quick",
        "-d",
        "model0",
        "--out",
        "/proc/rdmaprobe-cannot-write",
    ]);
    assert_eq!(c, 2);
    assert!(e.contains("/proc/rdmaprobe-cannot-write"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}
