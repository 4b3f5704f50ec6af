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
