//! The `rdmaprobe` binary as a perftest veteran runs it (issue 29, items 10-16): help texts that
//! match the program, perftest's flag meanings, ping's and doctor's verdicts, the client's
//! first words when nothing listens, and the units and notes of the tables.

mod cmd;
use cmd::run as rdmaprobe;

/// Tests that measure run one at a time (each pins its threads to the same CPUs).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// A fresh directory for one test's files.
fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("rdmaprobe-habits-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Item 16: the top-level help says lat and bw run client and server (or both ends with
/// --loopback), and compare's help names the test it uses with 3 or more runs.
#[test]
fn help_says_what_the_program_does() {
    let (c, out, err) = rdmaprobe(&["--help"]);
    assert_eq!(c, 0, "{err}");
    assert!(!out.contains("Runs both ends in this process"), "{out}");
    let lat = out.lines().find(|l| l.trim_start().starts_with("lat")).expect("lat in the help");
    assert!(lat.contains("Client and server") || out.contains("Client and server over TCP"), "{out}");
    let (c, out, err) = rdmaprobe(&["compare", "--help"]);
    assert_eq!(c, 0, "{err}");
    assert!(out.contains("Welch's t"), "{out}");
    assert!(out.contains("30, 75, 50, 150"), "the thresholds of one run per side: {out}");
}

/// Item 13: `--output latency` prints perftest's figure, the average (the JSON's mean), and
/// without --backend runs one backend (perftest's post path, named on standard error);
/// `--backend all` with --output is refused, naming the way out.
#[test]
fn output_is_the_average_of_one_backend_by_default() {
    let _g = serial();
    let dir = scratch("output");
    let f = dir.join("o.json");
    let (c, out, err) = rdmaprobe(&[
        "lat",
        "write",
        "--loopback",
        "-n",
        "300",
        "--output",
        "latency",
        "--json",
        f.to_str().unwrap(),
    ]);
    assert_eq!(c, 0, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "{out}");
    let v: f64 = lines[0].parse().expect("a number");
    let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
    let runs = j["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "one backend: {j}");
    let backend = runs[0]["backend"].as_str().unwrap();
    assert_eq!(backend, cmd::model0_backends()[if cmd::model0_backends().len() > 1 { 1 } else { 0 }]);
    assert!(err.contains(&format!("--output: backend {backend}")), "{err}");
    let mean = runs[0]["latency_ns"]["mean"].as_f64().unwrap();
    assert!((v - mean).abs() < 0.01, "--output {v}, the JSON's mean {mean}");
    // bw: one backend too, one number
    let (c, out, err) = rdmaprobe(&[
        "bw", "write", "--loopback", "-n", "2000", "--min-ms", "0", "--output", "bandwidth",
    ]);
    assert_eq!(c, 0, "{out}{err}");
    assert_eq!(out.lines().count(), 1, "{out}");
    let (c, out, err) = rdmaprobe(&["lat", "write", "--loopback", "--backend", "all", "--output", "latency"]);
    assert_eq!(c, 2, "{out}{err}");
    assert!(err.contains("give no --backend"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}
