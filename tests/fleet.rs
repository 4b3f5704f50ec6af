//! Fleet acceptance on one machine (issue 13 point 5): the playbook in harness/fleet/ run by
//! Debian's `ansible-playbook` over the four-node inventory `inventory.local.yml` (n1-n4 on
//! 127.0.0.11-14, local connections, model0; n3 slow through model0's wire delay, n4 reached over
//! ssh where no sshd listens), then `rdmaprobe fleet-report` on what it fetched: the report must
//! flag exactly n3 and n4, and exit 1 listing them. harness/test.sh installs ansible-core; the
//! test fails (it does not skip) where ansible-playbook is missing.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn playbook(out: &Path, ports: u16) -> std::process::Output {
    let fleet = repo().join("harness/fleet");
    Command::new("ansible-playbook")
        .arg("-i")
        .arg(fleet.join("inventory.local.yml"))
        .arg(fleet.join("playbook.yml"))
        .arg("-e")
        .arg(format!("fleet_out={}", out.display()))
        .arg("-e")
        .arg(format!("rdmaprobe_bin={}", env!("CARGO_BIN_EXE_rdmaprobe")))
        .arg("-e")
        .arg(format!("rdmaprobe_workdir={}", out.join("nodes-work").display()))
        .arg("-e")
        .arg(format!("fleet_port_base={ports}"))
        .env("ANSIBLE_NOCOLOR", "1")
        .env("ANSIBLE_HOST_KEY_CHECKING", "False")
        .output()
        .unwrap_or_else(|e| {
            panic!("ansible-playbook cannot run ({e}): install Debian's ansible-core (harness/test.sh does)")
        })
}

#[test]
fn the_four_node_fleet_flags_the_slow_node_and_the_unreachable_one() {
    let out = std::env::temp_dir().join(format!("rdmaprobe-fleet-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    let ports = 18700 + (std::process::id() % 100) as u16 * 20;
    let pb = playbook(&out, ports);
    let log = format!(
        "{}\n{}",
        String::from_utf8_lossy(&pb.stdout),
        String::from_utf8_lossy(&pb.stderr)
    );
    // an unreachable host makes ansible-playbook exit 4; every other host must have finished
    assert!(
        pb.status.code() == Some(4) || pb.status.code() == Some(0),
        "ansible-playbook: {:?}\n{log}",
        pb.status
    );
    assert!(log.contains("UNREACHABLE"), "n4 must be unreachable:\n{log}");

    // --min-deviation-pct 40: the default 20 % is for a fleet of real nodes; here three "nodes"
    // share two vCPUs whose speed moves by tens of percent between runs (docs/ci-recipe.md), while
    // n3's wire delay (20 us) puts it far above the fleet's median latency (at 5 us it sat at about
    // +70 %, where a slow process for the n1-n2 pair alone could bring it near 40 %)
    let r = Command::new(env!("CARGO_BIN_EXE_rdmaprobe"))
        .arg("fleet-report")
        .arg(&out)
        .args(["--min-deviation-pct", "40"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&r.stdout).to_string();
    assert_eq!(
        r.status.code(),
        Some(1),
        "{text}\n{}\nplaybook:\n{log}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert!(text.contains("FAILED nodes: n3, n4"), "{text}\nplaybook:\n{log}");

    let j: Value = serde_json::from_str(&std::fs::read_to_string(out.join("fleet-report.json")).unwrap()).unwrap();
    assert_eq!(j["failed"], serde_json::json!(["n3", "n4"]), "{text}");
    let node = |n: &str| {
        j["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["node"] == n)
            .unwrap()
            .clone()
    };
    // n4: unreachable, its pairs skipped, nothing else said of it
    let n4 = node("n4");
    assert_eq!(n4["reachable"], false);
    assert!(n4["reasons"][0].as_str().unwrap().starts_with("unreachable"), "{n4}");
    // n3: reachable, connects, but its latency is an outlier of the fleet
    let n3 = node("n3");
    assert_eq!(n3["reachable"], true);
    assert_eq!(n3["layers"], serde_json::json!(["pass", "pass", "pass"]), "{n3}");
    assert!(
        n3["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x.as_str().unwrap().contains("latency p50") && x.as_str().unwrap().contains("outlier")),
        "{n3}"
    );
    // n1 and n2: every layer passes, figures from their pairs, doctor run
    for n in ["n1", "n2"] {
        let x = node(n);
        assert_eq!(x["failed"], false, "{x}");
        assert_eq!(x["layers"], serde_json::json!(["pass", "pass", "pass"]), "{x}");
        assert!(x["lat_p50_ns"].as_f64().unwrap() > 0.0 && x["bw_avg_mib_s"].as_f64().unwrap() > 0.0);
        assert!(out.join("nodes").join(n).join("doctor.json").exists());
    }
    // all pairs of four: six, the three with n4 skipped
    let pairs = j["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 6, "{text}");
    let skipped = pairs
        .iter()
        .filter(|p| p["findings"][0].as_str().is_some_and(|f| f.starts_with("not run")))
        .count();
    assert_eq!(skipped, 3, "{text}");
    let html = std::fs::read_to_string(out.join("fleet-report.html")).unwrap();
    assert!(html.contains("Failed nodes: n3, n4") && !html.contains("<script"));
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn fleet_report_refuses_a_directory_that_is_not_a_fleet_run() {
    let d = std::env::temp_dir().join(format!("rdmaprobe-fleet-empty-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let r = Command::new(env!("CARGO_BIN_EXE_rdmaprobe"))
        .arg("fleet-report")
        .arg(&d)
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("fleet.json"));
    let r = Command::new(env!("CARGO_BIN_EXE_rdmaprobe"))
        .args(["fleet-report", "--mad-k", "-1"])
        .arg(&d)
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&d);
}

/// A fleet run's directory as the playbook leaves it, written here: three nodes, every pair,
/// every layer passing, every file world-writable as another user could find it (the nodes'
/// results fill it); `doctor_n3` is n3's doctor report.
fn synthetic(dir: &Path, doctor_n3: &Value) {
    use serde_json::json;
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::remove_dir_all(dir);
    let w = |p: PathBuf, v: &Value| {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, v.to_string()).unwrap();
    };
    let nodes = ["n1", "n2", "n3"];
    w(
        dir.join("fleet.json"),
        &json!({"nodes": nodes, "pairing": "all", "reachable": nodes, "doctor_rc": {"n1": 0, "n2": 0, "n3": 0}}),
    );
    let ok = json!({"checks": [{"id": "memlock", "status": "pass", "evidence": "ok"}]});
    for n in nodes {
        w(
            dir.join("nodes").join(n).join("doctor.json"),
            if n == "n3" { doctor_n3 } else { &ok },
        );
    }
    let layers: Vec<Value> = (1..=3)
        .map(|l| json!({"layer": l, "status": "pass", "findings": []}))
        .collect();
    let ladder = json!({"role": "client", "layers": layers});
    for (a, b) in [("n1", "n2"), ("n1", "n3"), ("n2", "n3")] {
        let p = dir.join("pairs").join(format!("{a}--{b}"));
        w(
            p.join("status.json"),
            &json!({"server": a, "client": b, "ping_rc": 0, "lat_rc": 0, "bw_rc": 0,
                    "server_rc": {"ping": 0, "lat": 0, "bw": 0}}),
        );
        w(p.join("ping-server.json"), &ladder);
        w(p.join("ping-client.json"), &ladder);
        w(p.join("lat.json"), &json!({"runs": [{"latency_ns": {"p50": 600.0}}]}));
        w(
            p.join("bw.json"),
            &json!({"runs": [{"summary": {"bw_avg_mib_s": 9000.0}}]}),
        );
    }
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            }
        }
    }
}

/// Whether this test runs as root (then another user's steps run as uid 65534, `nobody`).
fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Runs `cmd ARGS` as the other local user (uid/gid 65534) when root, else as this user (and
/// says so): the attacker's steps.
fn as_other_user(test: &str, cmd: &str, args: &[&std::ffi::OsStr]) {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new(cmd);
    c.args(args);
    if root() {
        // (std drops the supplementary groups when root switches uid)
        c.uid(65534).gid(65534);
    } else {
        eprintln!("{test}: not root: the other user's step `{cmd}` runs as this user");
    }
    let s = c.status().unwrap();
    assert!(s.success(), "{cmd} {args:?}: {s}");
}

/// A directory only root may enter, holding a root-only file `name` with `text`.
fn private_file(base: &Path, name: &str, text: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let d = base.join("private");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
    let f = d.join(name);
    std::fs::write(&f, text).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    f
}

/// `rdmaprobe fleet-report ARGS` under `ulimit -v 2000000` and `timeout 20`: (exit status, or
/// 128 + the signal; stdout and stderr; seconds).
fn fleet_report(args: &[&std::ffi::OsStr]) -> (i32, String, f64) {
    use std::os::unix::process::ExitStatusExt;
    let t = std::time::Instant::now();
    let o = Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 2000000 && exec timeout 20 \"$0\" fleet-report \"$@\"")
        .arg(env!("CARGO_BIN_EXE_rdmaprobe"))
        .args(args)
        .output()
        .unwrap();
    let code = o.status.code().unwrap_or_else(|| 128 + o.status.signal().unwrap_or(0));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (code, text, t.elapsed().as_secs_f64())
}

fn os(p: &Path) -> &std::ffi::OsStr {
    p.as_os_str()
}

/// fleet-report reads regular files inside its directory only (issue 30 point 5). Another user
/// who can write in the directory the nodes' results fill plants: a FIFO as `bw.json` (before:
/// fleet-report blocked for ever, here killed by `timeout`: 124), `doctor.json` as a link to
/// `/dev/zero` (before: read until memory ran out), `lat.json` as a link to a root-only JSON
/// outside the directory (before: its `counters` copied into the world-readable report), a pair's
/// directory or a node's as a link out of it; a doctor report over 16 MiB. Now each is refused at
/// once, exit 2, naming the file and why; nothing of the root-only file reaches the output.
#[test]
fn fleet_report_reads_only_regular_files_inside_its_directory() {
    use serde_json::json;
    let t = "fleet_report_reads_only_regular_files_inside_its_directory";
    let base = std::env::temp_dir().join(format!("rdmaprobe-fleet-hostile-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let secret = private_file(
        &base,
        "secret.json",
        &json!({"runs": [{"latency_ns": {"p50": 600.0}}],
                "counters": {"source": "sysfs", "delta": {"root_only_secret": 424242}}})
        .to_string(),
    );
    let outside = base.join("elsewhere");
    std::fs::create_dir_all(outside.join("n1--n2")).unwrap();
    let dir = base.join("run");
    let doctor = json!({"checks": [{"id": "memlock", "status": "pass", "evidence": "ok"}]});
    synthetic(&dir, &doctor);
    let (c, text, _) = fleet_report(&[os(&dir)]);
    assert_eq!(c, 0, "the synthetic run passes: {text}");
    let pair = dir.join("pairs/n1--n2");
    let ln = |target: &Path, link: &Path| {
        let _ = std::fs::remove_file(link).or_else(|_| std::fs::remove_dir_all(link));
        as_other_user(t, "ln", &[os(Path::new("-s")), os(target), os(link)]);
    };
    // (how the other user plants it, the file the refusal names, why)
    type Plant<'a> = Box<dyn Fn() + 'a>;
    let cases: Vec<(Plant, &str, &str)> = vec![
        (
            Box::new(|| {
                std::fs::remove_file(pair.join("bw.json")).unwrap();
                as_other_user(t, "mkfifo", &[os(&pair.join("bw.json"))]);
            }),
            "n1--n2/bw.json",
            "a FIFO, not a regular file",
        ),
        (
            Box::new(|| ln(Path::new("/dev/zero"), &dir.join("nodes/n1/doctor.json"))),
            "n1/doctor.json",
            "a symbolic link",
        ),
        (
            Box::new(|| ln(&secret, &pair.join("lat.json"))),
            "n1--n2/lat.json",
            "a symbolic link",
        ),
        (
            Box::new(|| ln(&outside.join("n1--n2"), &pair)),
            "pairs/n1--n2",
            "a symbolic link",
        ),
        (
            Box::new(|| ln(&outside, &dir.join("nodes/n2"))),
            "nodes/n2",
            "a symbolic link",
        ),
        (
            Box::new(|| {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .truncate(true)
                    .open(dir.join("nodes/n3/doctor.json"))
                    .unwrap();
                f.set_len((16 << 20) + 1).unwrap();
            }),
            "n3/doctor.json",
            "larger than 16 MiB",
        ),
    ];
    for (plant, file, why) in cases {
        synthetic(&dir, &doctor);
        plant();
        let (c, text, s) = fleet_report(&[os(&dir)]);
        assert_eq!(c, 2, "{file}: {text}");
        assert!(text.contains(file) && text.contains(why), "{file}: {text}");
        assert!(s < 10.0, "{file}: {s:.1} s");
        assert!(!text.contains("root_only_secret"), "{file}: {text}");
        for out in ["fleet-report.json", "fleet-report.html"] {
            let o = std::fs::read_to_string(dir.join(out)).unwrap_or_default();
            assert!(
                !o.contains("root_only_secret"),
                "{file}: {out} holds the root-only file's counters"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// fleet-report's default outputs (`DIR/fleet-report.{json,html}`, inside the directory the
/// nodes' results fill) are created without following a link another user planted there
/// (before: the link was followed and its root-only target replaced by the report); the link is
/// replaced by the report, its target untouched. A `--json` path the user names keeps
/// `output::write`'s documented behaviour: a symlink there is followed, the link stays.
#[test]
fn fleet_report_default_outputs_replace_a_planted_link_never_its_target() {
    use serde_json::json;
    let t = "fleet_report_default_outputs_replace_a_planted_link_never_its_target";
    let base = std::env::temp_dir().join(format!("rdmaprobe-fleet-outlink-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let dir = base.join("run");
    synthetic(
        &dir,
        &json!({"checks": [{"id": "memlock", "status": "pass", "evidence": "ok"}]}),
    );
    let victims = [
        private_file(&base, "shadow", "root's own\n"),
        private_file(&base, "authorized_keys", "root's keys\n"),
    ];
    for (name, v) in ["fleet-report.json", "fleet-report.html"].iter().zip(&victims) {
        as_other_user(t, "ln", &[os(Path::new("-s")), os(v), os(&dir.join(name))]);
        if root() {
            use std::os::unix::fs::MetadataExt;
            assert_eq!(std::fs::symlink_metadata(dir.join(name)).unwrap().uid(), 65534);
        }
    }
    let (c, text, _) = fleet_report(&[os(&dir)]);
    assert_eq!(c, 0, "{text}");
    assert_eq!(std::fs::read_to_string(&victims[0]).unwrap(), "root's own\n");
    assert_eq!(std::fs::read_to_string(&victims[1]).unwrap(), "root's keys\n");
    for name in ["fleet-report.json", "fleet-report.html"] {
        let m = std::fs::symlink_metadata(dir.join(name)).unwrap();
        assert!(m.file_type().is_file(), "{name}: {m:?}");
    }
    let j: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("fleet-report.json")).unwrap()).unwrap();
    assert_eq!(j["failed"], json!([]), "{j}");
    // a path the user names: a symlink there is followed (output::write), the link kept
    let mine = base.join("mine.json");
    std::fs::write(&mine, "old").unwrap();
    let link = base.join("link.json");
    std::os::unix::fs::symlink(&mine, &link).unwrap();
    let (c, text, _) = fleet_report(&[os(&dir), os(Path::new("--json")), os(&link)]);
    assert_eq!(c, 0, "{text}");
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert!(std::fs::read_to_string(&mine).unwrap().contains("\"failed\""));
    let _ = std::fs::remove_dir_all(&base);
}

/// One node's doctor report with 160,000 warnings (15 MB, within the 16 MiB a fleet file may
/// hold) is judged in linear time through the command (issue 30 point 6: 76 s in release before
/// issue 28 made it linear; 1.2 s now in release): here within 20 s, n3 failed, every warning
/// said as its own.
#[test]
fn fleet_report_judges_a_doctor_of_160000_warnings_at_once() {
    use serde_json::json;
    let dir = std::env::temp_dir().join(format!("rdmaprobe-fleet-warnings-{}", std::process::id()));
    let checks: Vec<Value> = std::iter::once(json!({"id": "memlock", "status": "fail", "evidence": "64 KiB"}))
        .chain(
            (0..160_000)
                .map(|i| json!({"id": format!("w{i:06}"), "status": "warn", "evidence": "a warning of some length"})),
        )
        .collect();
    synthetic(&dir, &json!({ "checks": checks }));
    assert!(std::fs::metadata(dir.join("nodes/n3/doctor.json")).unwrap().len() < 16 << 20);
    let (c, text, s) = fleet_report(&[os(&dir)]);
    assert_eq!(c, 1, "{}", &text[..text.len().min(2000)]);
    println!("fleet-report of 160,000 warnings: {s:.1} s");
    assert!(s < 20.0, "{s:.1} s");
    let j: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("fleet-report.json")).unwrap()).unwrap();
    assert_eq!(j["failed"], json!(["n3"]));
    assert_eq!(j["nodes"][2]["evidence"].as_array().map(Vec::len), Some(160_000));
    let _ = std::fs::remove_dir_all(&dir);
}
