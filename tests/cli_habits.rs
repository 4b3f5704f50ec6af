//! The `rdmaprobe` binary as a perftest veteran runs it (issue 29, items 9-16): a matrix file's
//! backends, help texts that match the program, perftest's flag meanings, ping's and doctor's
//! verdicts, the client's first words when nothing listens, and the units and notes of the
//! tables.

mod cmd;
use cmd::run as rdmaprobe;
use cmd::{finish, serial, spawn};

/// A fresh directory for one test's files.
fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("rdmaprobe-habits-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Item 9: a matrix file with `backends = ["verbs"]` on model0 runs verbs alone, and says the
/// direct backend was not asked for (before: "no direct backend on this device", which model0
/// has); results.json, its params and report.html name no other backend. Where libibverbs
/// cannot reach model0 (a kernel with RDMA devices), verbs is refused, naming it.
#[test]
fn a_matrix_of_verbs_alone_runs_verbs_alone() {
    let _g = serial();
    let dir = scratch("matrix-verbs");
    let m = dir.join("m.toml");
    std::fs::write(
        &m,
        "backends = [\"verbs\"]\nparts = [\"lat\", \"bw\", \"post_cost\"]\nops = [\"write\"]\nsizes = [8]\n\
         iters = 200\nbw_messages = 200\nbw_min_ms = 0\npost_cost_blocks = 5\n",
    )
    .unwrap();
    let out_dir = dir.join("out");
    let (c, out, err) = rdmaprobe(&[
        "suite",
        "-d",
        "model0",
        "--matrix",
        m.to_str().unwrap(),
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    if !cmd::model0_backends().contains(&"verbs") {
        assert_eq!(c, 2, "{out}{err}");
        assert!(err.contains("verbs"), "{err}");
        return;
    }
    assert_eq!(c, 0, "{out}{err}");
    assert!(
        out.contains("rdmaprobe suite on model0 (model0), backends verbs\n"),
        "{out}"
    );
    assert!(!out.contains("no direct backend on this device"), "{out}");
    assert!(
        out.contains("the direct backend was not asked for (backends: verbs), so no driver overhead to show"),
        "{out}"
    );
    let line = out
        .lines()
        .find(|l| l.starts_with("  lat write 8 B"))
        .unwrap_or_default();
    assert!(line.contains("verbs: ") && !line.contains("direct"), "{out}");
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("results.json")).unwrap()).unwrap();
    assert_eq!(j["params"]["backends"], serde_json::json!(["verbs"]), "{}", j["params"]);
    assert_eq!(
        j["params"]["matrix"]["backends"],
        serde_json::json!(["verbs"]),
        "{}",
        j["params"]
    );
    let runs: Vec<String> = j["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| format!("{} {}", r["scenario"].as_str().unwrap(), r["backend"].as_str().unwrap()))
        .collect();
    assert_eq!(
        runs,
        [
            "lat verbs",
            "bw verbs",
            "post_cost verbs",
            "post_cost verbs",
            "post_cost verbs"
        ],
        "{out}"
    );
    let html = std::fs::read_to_string(out_dir.join("report.html")).unwrap();
    // no column of differences to a direct run that is not there
    assert!(
        !html.contains("− direct") && !html.contains("minus direct"),
        "report.html: {html}"
    );
    assert!(html.contains("no direct run among them"), "report.html: {html}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Item 16: the top-level help says lat and bw run client and server (or both ends with
/// --loopback), and compare's help names what it does with 1, 2 and 3 or more runs per side:
/// Welch's t with 3 or more on both sides, else a bootstrap of the runs and their blocks.
#[test]
fn help_says_what_the_program_does() {
    let (c, out, err) = rdmaprobe(&["--help"]);
    assert_eq!(c, 0, "{err}");
    assert!(!out.contains("Runs both ends in this process"), "{out}");
    for cmd in ["lat", "bw"] {
        let line = out
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{cmd} ")))
            .unwrap_or_else(|| panic!("{cmd} in the help: {out}"));
        assert!(
            line.contains("Client and server over TCP") && line.contains("both ends in this process with --loopback"),
            "{line}"
        );
    }
    let (c, out, err) = rdmaprobe(&["compare", "--help"]);
    assert_eq!(c, 0, "{err}");
    assert!(!out.contains("hierarchical bootstrap"), "{out}");
    assert!(
        out.contains("3 or more runs on both sides: Welch's t over the runs' logarithms"),
        "{out}"
    );
    assert!(
        out.contains("fewer on a side: a bootstrap resampling the runs, then the blocks within each"),
        "{out}"
    );
    assert!(out.contains("Benjamini-Hochberg with --adjust bh"), "{out}");
    // the help's one-run thresholds are the table's (lat p50, lat p99, bw, post_cost p50)
    let one: Vec<String> = [("lat", "p50"), ("lat", "p99"), ("bw", "bw"), ("post_cost", "p50")]
        .iter()
        .map(|(s, m)| rdmaprobe::report::compare::default_threshold_pct(s, m, false).to_string())
        .collect();
    assert!(
        out.contains(&format!("{} (p99 100)", one.join(", "))),
        "the thresholds of one run per side, {one:?}: {out}"
    );
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
    assert_eq!(
        backend,
        cmd::model0_backends()[if cmd::model0_backends().len() > 1 { 1 } else { 0 }]
    );
    assert!(err.contains(&format!("--output: backend {backend}")), "{err}");
    let mean = runs[0]["latency_ns"]["mean"].as_f64().unwrap();
    assert!((v - mean).abs() < 0.01, "--output {v}, the JSON's mean {mean}");
    // bw: one backend too, one number
    let (c, out, err) = rdmaprobe(&[
        "bw",
        "write",
        "--loopback",
        "-n",
        "2000",
        "--min-ms",
        "0",
        "--output",
        "bandwidth",
    ]);
    assert_eq!(c, 0, "{out}{err}");
    assert_eq!(out.lines().count(), 1, "{out}");
    let (c, out, err) = rdmaprobe(&["lat", "write", "--loopback", "--backend", "all", "--output", "latency"]);
    assert_eq!(c, 2, "{out}{err}");
    assert!(err.contains("give no --backend"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Item 14: perftest's flags with perftest's meaning: -t and -Q taken and clamped (-Q to -t, as
/// perftest), an explicit bw -n exact, -s 4K, UD sizes above the MTU clamped, `--json -`
/// refused, and perftest's flags rdmaprobe lacks pointing to docs/perftest.md.
#[test]
fn perftest_flags_keep_perftest_meaning() {
    let _g = serial();
    let dir = scratch("flags");
    let f = dir.join("b.json");
    let fs = f.to_str().unwrap();
    let json = || -> serde_json::Value { serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap() };
    // -t 512 -Q 200: taken, as the QPs' 128 and -Q clamped to it; -n 1000 exact; -s 4K
    let (c, out, err) = rdmaprobe(&[
        "bw",
        "write",
        "--loopback",
        "-t",
        "512",
        "-Q",
        "200",
        "-n",
        "1000",
        "-s",
        "4K",
        "--backend",
        "direct",
        "--json",
        fs,
    ]);
    assert_eq!(c, 0, "{out}{err}");
    assert!(err.contains("-t 512: the QPs hold 128 WQEs"), "{err}");
    assert!(err.contains("-Q 200 above -t 128"), "{err}");
    assert!(out.contains("runs are exactly -n messages per QP"), "{out}");
    let j = json();
    assert_eq!(j["params"]["tx_depth"], 128, "{}", j["params"]);
    assert_eq!(j["params"]["cq_mod"], 128, "{}", j["params"]);
    assert_eq!(j["runs"][0]["size_bytes"], 4096);
    assert_eq!(j["runs"][0]["summary"]["messages"], 1000, "an explicit -n is exact");
    // the default -Q is perftest's 100; -Q 100 -t 64 is -Q 64, not an error
    let (c, out, err) = rdmaprobe(&[
        "bw",
        "write",
        "--loopback",
        "-t",
        "64",
        "-n",
        "500",
        "--backend",
        "direct",
        "--json",
        fs,
    ]);
    assert_eq!(c, 0, "{out}{err}");
    assert_eq!(json()["params"]["cq_mod"], 64);
    let (c, out, err) = rdmaprobe(&[
        "bw",
        "write",
        "--loopback",
        "-n",
        "500",
        "--backend",
        "direct",
        "--json",
        fs,
    ]);
    assert_eq!(c, 0, "{out}{err}");
    assert_eq!(json()["params"]["cq_mod"], 100);
    // lat takes -s 4K too
    let (c, out, err) = rdmaprobe(&[
        "lat",
        "write",
        "--loopback",
        "-s",
        "4K",
        "-n",
        "100",
        "--backend",
        "direct",
    ]);
    assert_eq!(c, 0, "{out}{err}");
    assert!(out.contains(" 4096 "), "{out}");
    // bw send -c UD without -s: the MTU, said, not an error naming a size never typed
    let (c, out, err) = rdmaprobe(&[
        "bw",
        "send",
        "--loopback",
        "-c",
        "UD",
        "-n",
        "500",
        "--backend",
        "direct",
        "--json",
        fs,
    ]);
    assert_eq!(c, 0, "{out}{err}");
    assert!(
        out.contains("-c UD: messages of") && out.contains("the port's MTU"),
        "{out}"
    );
    let size = json()["runs"][0]["size_bytes"].as_u64().unwrap();
    assert!(size < 65536, "{size}");
    // --json -: refused, no file named "-"
    let (c, out, err) = rdmaprobe(&["lat", "write", "--loopback", "-n", "100", "--json", "-"]);
    assert_eq!(c, 2, "{out}{err}");
    assert!(err.contains("'-' is not taken for standard output"), "{err}");
    assert!(!std::path::Path::new("-").exists());
    // perftest's flags that rdmaprobe does not take: what instead, and docs/perftest.md
    for flag in ["-H", "-U", "-C", "--out_json", "-z"] {
        let (c, out, err) = rdmaprobe(&["lat", "write", "--loopback", flag]);
        assert_eq!(c, 2, "{flag}: {out}{err}");
        assert!(
            err.contains(&format!("perftest's {flag} is not taken here")),
            "{flag}: {err}"
        );
        assert!(err.contains("docs/perftest.md"), "{flag}: {err}");
    }
    // --cpu_util is lat's and bw's
    let (c, _, err) = rdmaprobe(&["post-cost", "-d", "model0", "--cpu_util"]);
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("lat and bw take it"), "{err}");
    for args in [["-o", "4"], ["-w", "10"]] {
        let (c, _, err) = rdmaprobe(&["bw", "write", "--loopback", args[0], args[1]]);
        assert_eq!(c, 2, "{args:?}: {err}");
        assert!(err.contains("docs/perftest.md"), "{args:?}: {err}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Item 14: perftest's -r. `bw send -r 1` keeps one receive posted: the sends in flight find
/// the receive queue empty (RNR) about once a message, where the default depth meets it at most
/// between reposts; -r above the queue's 128 is 128, said; -r for WRITE does nothing, said; the
/// header and the JSON name the depth.
#[test]
fn rx_depth_is_perftest_s_receive_depth() {
    let _g = serial();
    let dir = scratch("rx");
    let f = dir.join("b.json");
    let fs = f.to_str().unwrap();
    let json = || -> serde_json::Value { serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap() };
    let run = |extra: &[&str]| {
        let mut a = vec![
            "bw",
            "send",
            "--loopback",
            "-d",
            "model0",
            "-s",
            "64",
            "-n",
            "4000",
            "--backend",
            "direct",
            "--json",
            fs,
        ];
        a.extend_from_slice(extra);
        rdmaprobe(&a)
    };
    let (c, out, err) = run(&["-r", "1"]);
    assert_eq!(c, 0, "{out}{err}");
    assert!(out.contains("tx depth 128, rx depth 1,"), "{out}");
    let j = json();
    assert_eq!(j["params"]["rx_depth"], 1, "{}", j["params"]);
    // in the run too, so compare keeps a -r run apart from one at the default depth
    assert_eq!(j["runs"][0]["rx_depth"], 1);
    let with_r = dir.join("r1.json");
    std::fs::copy(&f, &with_r).unwrap();
    let rnr = j["counters"]["delta"]["rnr_events"].as_u64().unwrap_or(0);
    assert!(
        rnr >= 2000,
        "-r 1 with 128 sends in flight: {rnr} RNR events for 4000 messages"
    );
    let (c, out, err) = run(&["-r", "512"]);
    assert_eq!(c, 0, "{out}{err}");
    assert!(err.contains("-r 512: the QPs hold 128 WQEs, so -r 128"), "{err}");
    assert_eq!(json()["params"]["rx_depth"], 128);
    let (c, out, err) = run(&[]);
    assert_eq!(c, 0, "{out}{err}");
    assert_eq!(json()["params"]["rx_depth"], 128, "the default: -t + 32, at most 128");
    assert!(
        json()["runs"][0].get("rx_depth").is_none(),
        "the default depth keeps the older key"
    );
    let (c, out, err) = rdmaprobe(&["compare", with_r.to_str().unwrap(), fs]);
    assert_eq!(c, 2, "-r 1 against the default: nothing to compare\n{out}{err}");
    assert!(
        out.contains("only in BASE: bw send direct 64B") && out.contains("rx_depth=1"),
        "{out}"
    );
    assert!(out.contains("verdict: nothing compared"), "{out}");
    let (c, out, err) = rdmaprobe(&[
        "bw",
        "write",
        "--loopback",
        "-d",
        "model0",
        "-n",
        "500",
        "--backend",
        "direct",
        "-r",
        "4",
        "--json",
        fs,
    ]);
    assert_eq!(c, 0, "{out}{err}");
    assert!(err.contains("-r 4: write consumes no receive"), "{err}");
    assert!(json()["params"]["rx_depth"].is_null());
    assert!(!out.contains("rx depth"), "{out}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A TCP port nobody listens on now (the system's pick, released).
fn free_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port().to_string()
}

/// Item 10: a client over its --max-lat-ns fails layer 3 (exit 13), and so does the server,
/// which learns the client's verdict instead of saying "all layers pass".
#[test]
fn both_ends_of_ping_agree_on_the_verdict() {
    let _g = serial();
    let p = free_port();
    let common = ["-d", "model0", "--backend", "direct", "-p", &p, "--oob-timeout", "20"];
    let srv = spawn(&[&["ping"][..], &common].concat());
    std::thread::sleep(std::time::Duration::from_millis(300));
    let cli = spawn(&[&["ping", "127.0.0.1", "--max-lat-ns", "100"][..], &common].concat());
    let (cc, co, ce) = finish(cli);
    let (sc, so, se) = finish(srv);
    assert_eq!(cc, 13, "client: {co}{ce}");
    assert_eq!(sc, 13, "server: {so}{se}");
    assert!(!so.contains("all layers pass"), "{so}");
    assert!(
        so.contains("the client's limits:") && so.contains("over the limit 100 ns"),
        "{so}"
    );
    assert!(co.contains("the server's layer 3: pass"), "{co}");
}

/// Item 11: a client pointed at a port where nothing listens says so at once, and until when it
/// retries (the deadline); interrupted, ping names the error (not "see the error above").
#[test]
fn a_client_says_at_once_that_nothing_listens() {
    let p = free_port();
    let started = std::time::Instant::now();
    let (c, out, err) = rdmaprobe(&[
        "lat",
        "write",
        "127.0.0.1",
        "-p",
        &p,
        "--oob-timeout",
        "1",
        "-d",
        "model0",
    ]);
    assert_eq!(c, 1, "{out}{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    let first = err
        .lines()
        .find(|l| l.contains("nothing listens"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(first.contains(&format!("nothing listens at 127.0.0.1:{p}")), "{err}");
    assert!(
        first.contains("retrying until") && first.contains("UTC") && first.contains("--oob-timeout 1 s"),
        "{err}"
    );
    // ping, interrupted while it retries: the layer names the refused connection
    let mut child = spawn(&["ping", "127.0.0.1", "-p", &p, "-d", "model0", "--oob-timeout", "30"]);
    // signalled once it says it retries (its handlers are in place by then); the child ends by
    // itself at its deadline if the line never comes, so the read ends either way
    use std::io::BufRead;
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap())
        .lines()
        .map_while(Result::ok);
    let said = lines.by_ref().any(|l| l.contains("nothing listens at"));
    assert!(said, "ping said nothing about the closed port");
    // SAFETY: signals a child process of this test, by its id.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    // the rest of standard error read (kept open) while the child ends
    let err: Vec<String> = lines.collect();
    let (c, out, _) = finish(child);
    assert_eq!(c, 12, "{out}{err:?}");
    assert!(
        out.contains("interrupted while retrying the connection") && out.contains("refused"),
        "{out}"
    );
    assert!(!out.contains("see the error above"), "{out}");
}

/// Item 12: doctor reports the RDMA devices visible to libibverbs as a check, consistent with
/// `devices`: on a kernel without RDMA (`devices` exits 3) a failure, doctor exiting 1, when
/// model0 only stands in for the missing device, a warning when it was asked for by name; the
/// evidence carries the reason `devices` gives and says model0 still runs. With devices, the
/// check passes naming each one `devices` lists.
#[test]
fn doctor_says_when_the_host_has_no_rdma_device() {
    let (dev_code, dev_out, _) = rdmaprobe(&["devices"]);
    let status = |args: &[&str]| {
        let (code, out, err) = rdmaprobe(args);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
        let c = v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == "rdma.devices")
            .cloned();
        (code, c.unwrap_or_else(|| panic!("no rdma.devices check: {out}")))
    };
    let (code, c) = status(&["doctor", "--json"]);
    let evidence = c["evidence"].as_str().unwrap_or_default().to_string();
    match dev_code {
        3 => {
            assert_eq!(c["status"], "fail", "{c}");
            assert_eq!(code, 1, "a failed check exits 1: {c}");
            // the reason is the one devices gives, in its words
            let reason = dev_out.lines().nth(2).unwrap_or_default();
            let first = reason.split(". ").next().unwrap();
            assert!(evidence.contains(first), "{c} / {reason}");
            assert!(evidence.starts_with("no RDMA device visible to libibverbs"), "{c}");
            assert!(evidence.contains("model0 still runs: -d model0"), "{c}");
            assert!(evidence.contains("`rdmaprobe devices` exits 3"), "{c}");
            assert!(!c["fix"].as_str().unwrap().is_empty(), "{c}");
            // the text form: the same line, FAIL, and the count of failures
            let (code, out, _) = rdmaprobe(&["doctor"]);
            assert_eq!(code, 1, "{out}");
            let line = out.lines().find(|l| l.contains("rdma.devices")).unwrap_or_default();
            assert!(
                line.trim_start().starts_with("FAIL") && line.contains("model0 still runs: -d model0"),
                "{out}"
            );
            let last = out.lines().last().unwrap_or_default();
            assert!(last.contains(" fail,") && !last.contains(" 0 fail,"), "{out}");
            let (_, c) = status(&["doctor", "-d", "model0", "--json"]);
            assert_eq!(c["status"], "warn", "model0 asked for by name: {c}");
        }
        _ => {
            assert_eq!(c["status"], "pass", "{c}");
            assert!(evidence.starts_with("RDMA devices visible to libibverbs: "), "{c}");
            // each device devices lists (its hca_id lines, model0 aside) is named
            for name in dev_out
                .lines()
                .filter_map(|l| l.strip_prefix("hca_id:"))
                .filter_map(|l| l.split_whitespace().next())
                .filter(|n| *n != "model0")
            {
                assert!(evidence.contains(name), "{name}: {c}");
            }
        }
    }
}

/// Item 15: the tables' units and notes: every latency column with its unit, p99.99 said to be
/// the max below 10000 samples, the device named once, the QPs' MTU and inline size, one
/// bandwidth unit named (MB/sec = 2^20 B/s, or Gb/sec alone with --report-gbits), -b's count
/// and --min-ms 0 said as what they do.
#[test]
fn tables_name_their_units_and_settings() {
    let _g = serial();
    let (c, out, err) = rdmaprobe(&[
        "lat",
        "write",
        "--loopback",
        "-n",
        "500",
        "--backend",
        "direct",
        "-m",
        "1024",
        "-I",
        "0",
    ]);
    assert_eq!(c, 0, "{out}{err}");
    assert!(out.contains("latency, device model0, backends"), "{out}");
    assert!(!out.contains("model0 (model0)"), "{out}");
    let head = out.lines().find(|l| l.contains("#bytes")).unwrap();
    for col in ["p99.9[ns]", "p99.99[ns]", "stdev[ns]", "post p50[ns]", "avg[ns]"] {
        assert!(head.contains(col), "{col}: {head}");
    }
    assert!(
        out.contains("p99.99 is the max below 10000 samples, p99.9 below 1000"),
        "{out}"
    );
    assert!(out.contains(" QPs: RC, path MTU 1024 B (-m), no inline"), "{out}");
    let (c, out, err) = rdmaprobe(&[
        "bw",
        "write",
        "--loopback",
        "-n",
        "500",
        "--min-ms",
        "0",
        "--backend",
        "direct",
        "--report-gbits",
        "-b",
    ]);
    assert_eq!(c, 0, "{out}{err}");
    assert!(!out.contains("MB = 2^20") && !out.contains("MB/sec"), "{out}");
    assert!(out.contains("Gb/sec = 10^9 bits per second"), "{out}");
    assert!(out.contains("-b: both ends send -n messages per QP"), "{out}");
    assert!(!out.contains("shorter than 0 ms"), "{out}");
    assert!(out.contains("runs are exactly -n messages per QP"), "{out}");
    assert!(out.contains(" QPs: RC, path MTU "), "{out}");
    let (c, out, err) = rdmaprobe(&["bw", "write", "--loopback", "-n", "500", "--backend", "direct"]);
    assert_eq!(c, 0, "{out}{err}");
    assert!(out.contains("MB/sec = 2^20 bytes per second (MiB/s)"), "{out}");
}

/// Item 14: bw --cpu_util (perftest's) prints each run's CPU use, and the JSON carries it always:
/// a figure between 0 and a little over 100 % per thread (the threads' CPU time over their run).
#[test]
fn bw_cpu_util_is_printed_and_recorded() {
    let _g = serial();
    let dir = scratch("cpu");
    let f = dir.join("c.json");
    let (c, out, err) = rdmaprobe(&[
        "bw",
        "write",
        "--loopback",
        "-n",
        "3000",
        "--backend",
        "direct",
        "--cpu_util",
        "--json",
        f.to_str().unwrap(),
    ]);
    assert_eq!(c, 0, "{out}{err}");
    let line = out
        .lines()
        .find(|l| l.contains("cpu_util 65536 B direct: "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains(" %"), "{line}");
    let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
    let pct = j["runs"][0]["summary"]["cpu_pct"].as_f64().expect("summary.cpu_pct");
    // CPU time cannot exceed the time it was measured over (a little slack for the clocks' reads)
    assert!(pct > 0.0 && pct <= 105.0, "{pct}");
    // without the flag: no line, the JSON still has it
    let (c, out, err) = rdmaprobe(&[
        "bw",
        "write",
        "--loopback",
        "-n",
        "3000",
        "--backend",
        "direct",
        "--json",
        f.to_str().unwrap(),
    ]);
    assert_eq!(c, 0, "{out}{err}");
    assert!(!out.contains("cpu_util"), "{out}");
    let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
    assert!(j["runs"][0]["summary"]["cpu_pct"].is_number());
    std::fs::remove_dir_all(&dir).ok();
}

/// Item 14: lat --cpu_util (perftest's) prints each run's CPU use, the client thread's, and the
/// JSON carries it always (`cpu_pct`): between 0 and a little over 100 %.
#[test]
fn lat_cpu_util_is_printed_and_recorded() {
    let _g = serial();
    let dir = scratch("latcpu");
    let f = dir.join("l.json");
    for flag in [true, false] {
        let mut args = vec![
            "lat",
            "write",
            "--loopback",
            "-n",
            "2000",
            "-s",
            "8",
            "--backend",
            "direct",
        ];
        if flag {
            args.push("--cpu_util");
        }
        args.extend(["--json", f.to_str().unwrap()]);
        let (c, out, err) = rdmaprobe(&args);
        assert_eq!(c, 0, "{out}{err}");
        let line = out.lines().find(|l| l.contains("cpu_util 8 B direct: "));
        assert_eq!(line.is_some(), flag, "{out}");
        if let Some(l) = line {
            assert!(l.contains(" %") && l.contains("client thread"), "{l}");
        }
        let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        let pct = j["runs"][0]["cpu_pct"].as_f64().expect("runs[0].cpu_pct");
        // CPU time cannot exceed the time it was measured over (slack for the clocks' reads)
        assert!(pct > 0.0 && pct <= 105.0, "{pct}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Item 16: the README's first screen keeps the two commands at the top, then the one command
/// to start with and what it prints (its column heads are the program's own); the CI recipe
/// says model0's verbs and wr backends go through libibverbs (they do).
#[test]
fn the_readme_opens_with_what_to_run_and_what_it_prints() {
    let _g = serial();
    let root = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let first: Vec<&str> = readme.lines().take(60).collect();
    let at = |what: &str| {
        first
            .iter()
            .position(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no {what} on the first screen"))
    };
    assert!(at("harness/run.sh") < at("## Start here"));
    assert!(at("harness/test.sh") < at("## Start here"));
    assert!(at("## Start here") < at("rdmaprobe lat write --loopback"));
    let shown = first[at("#bytes backend")].trim();
    let (c, out, err) = rdmaprobe(&["lat", "write", "--loopback", "-n", "100", "--backend", "direct"]);
    assert_eq!(c, 0, "{out}{err}");
    let printed = out.lines().find(|l| l.contains("#bytes")).unwrap().trim();
    assert_eq!(shown, printed, "the README's column heads are not the program's");
    let ci = std::fs::read_to_string(format!("{root}/docs/ci-recipe.md")).unwrap();
    assert!(
        !ci.contains("the post path does not go through `libibverbs`"),
        "docs/ci-recipe.md"
    );
}
