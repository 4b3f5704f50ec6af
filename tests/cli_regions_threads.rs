//! Issue 29's items 19 and 20 as a user sees them: where each registered buffer sits (header,
//! JSON, report), and `bw --threads 128` on model0 with more threads than CPUs.

mod cmd;
use cmd::run as rdmaprobe;
use cmd::serial;

fn temp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("rdmaprobe-{name}-{}", std::process::id()))
}

/// ` MR direct.A: addr 0x..., page offset N, aligned ..., huge pages no, phys ...` for every
/// end of every backend, and the same fields in the JSON (`memory_regions`), which the report
/// renders as a table.
#[test]
fn lat_prints_and_records_where_each_buffer_sits() {
    let _g = serial();
    let json = temp("regions.json");
    let plots = temp("regions-plots");
    let (code, out, err) = rdmaprobe(&[
        "lat",
        "write",
        "--loopback",
        "-d",
        "model0",
        "-n",
        "200",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let backends = cmd::model0_backends();
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let regions = doc["memory_regions"].as_array().expect("memory_regions in the JSON");
    assert_eq!(regions.len(), 2 * backends.len(), "{regions:?}");
    for k in &backends {
        for end in ["A", "B"] {
            let name = format!("{k}.{end}");
            let r = regions
                .iter()
                .find(|r| r["name"] == name.as_str())
                .unwrap_or_else(|| panic!("{name} in {regions:?}"));
            let addr = r["addr"].as_u64().unwrap();
            let (off, align) = (r["page_offset"].as_u64().unwrap(), r["align"].as_u64().unwrap());
            assert_eq!(off, addr % 4096, "{r}");
            assert!(
                align.is_power_of_two() && addr % align == 0 && (addr / align) % 2 == 1,
                "{r}"
            );
            assert_eq!(r["huge"].as_bool(), Some(false), "{r}");
            let phys = match (r["phys_addr"].as_u64(), r["phys_unreadable"].as_str()) {
                (Some(p), None) => {
                    assert_eq!(p % 4096, off, "the physical address keeps the page offset: {r}");
                    format!("{p:#x}")
                }
                (None, Some(why)) => {
                    assert!(["needs root", "page not mapped in yet"].contains(&why), "{r}");
                    format!("unreadable ({why})")
                }
                _ => panic!("a physical address or why not: {r}"),
            };
            let kib = align / 1024;
            let line = format!(
                " MR {name}: addr {addr:#x}, page offset {off}, aligned {}, huge pages no, phys {phys}\n",
                if align >= 1 << 20 {
                    format!("{} MiB", align >> 20)
                } else {
                    format!("{kib} KiB")
                }
            );
            let head = &out[..out.find("#bytes").unwrap_or(out.len())];
            assert!(head.contains(&line), "{line:?} in the header:\n{out}");
        }
    }
    let (code, _, err) = rdmaprobe(&["plot", json.to_str().unwrap(), "--out", plots.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let page = std::fs::read_to_string(plots.join("report.html")).unwrap();
    assert!(
        page.contains("<summary>Memory regions (") && page.contains("id=\"regions\""),
        "{page}"
    );
    assert!(
        page.contains(&format!("<td class=\"l\">{}.A</td>", backends[0])),
        "{page}"
    );
    let _ = std::fs::remove_file(&json);
    let _ = std::fs::remove_dir_all(&plots);
}

/// 128 workers, each its own QP, CQ and buffer on model0, pinned round-robin over this host's
/// CPUs (said so, with how many per CPU); 129 is refused with the limit named.
#[test]
fn bw_runs_128_threads_and_refuses_129() {
    let _g = serial();
    let json = temp("threads.json");
    let t0 = std::time::Instant::now();
    let (code, out, err) = rdmaprobe(&[
        "bw",
        "write",
        "--loopback",
        "-d",
        "model0",
        "--backend",
        "direct",
        "--threads",
        "128",
        "-n",
        "200",
        "-s",
        "64",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(t0.elapsed().as_secs() < 60, "took {:?}", t0.elapsed());
    assert!(out.contains("128 thread(s) x 1 QP(s)"), "{out}");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let run = &doc["runs"][0];
    assert_eq!(run["threads"].as_u64(), Some(128), "{run}");
    assert_eq!(doc["params"]["threads"].as_u64(), Some(128));
    // every worker's two buffers, each its own
    let regions = run["memory_regions"].as_array().expect("the run's regions");
    assert_eq!(regions.len(), 256);
    let mut addrs: Vec<u64> = regions.iter().map(|r| r["addr"].as_u64().unwrap()).collect();
    addrs.sort_unstable();
    addrs.dedup();
    assert_eq!(addrs.len(), 256);
    assert!(out.contains(" MR direct.t0.q0.A: addr 0x"), "{out}");
    assert!(
        out.contains(" MR direct.t1.q0.A .. direct.t127.q0.B (254 more): "),
        "{out}"
    );
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    if cpus < 128 {
        let note =
            format!("--threads 128 on {cpus} CPU(s): more threads than CPUs, so they cannot each be pinned alone");
        assert!(out.contains(&format!(" WARNING: {note}")), "{out}");
        if 128 % cpus == 0 {
            assert!(
                out.contains(&format!("pinned round-robin, {} per CPU", 128 / cpus)),
                "{out}"
            );
        }
        let w = doc["warnings"].as_array().unwrap();
        assert!(
            w.iter().any(|w| w.as_str().is_some_and(|s| s.starts_with(&note))),
            "{w:?}"
        );
    }
    let _ = std::fs::remove_file(&json);
    for args in [
        &["bw", "write", "--loopback", "-d", "model0", "--threads", "129"][..],
        &["suite", "-d", "model0", "--threads", "129"][..],
    ] {
        let (code, out, err) = rdmaprobe(args);
        assert_eq!(code, 2, "{out}{err}");
        assert!(
            err.contains("129 threads: 1 to 128 (each thread drives its own QPs, CQs and buffers"),
            "{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}
