//! Fuzzing what rdmaprobe reads from others: a peer's out-of-band messages and result files
//! (`compare`, `plot`, the report). A corpus of valid inputs is mutated deterministically (a
//! seeded generator: byte flips, insertions, deletions, duplications, numbers and values
//! swapped for hostile ones, truncation); each input must be accepted or refused with an
//! error, never panic or hang. CI runs a short count; `harness/fuzz.sh N` runs N per target
//! and prints the rate (`RDMAPROBE_FUZZ_ITERS`). Histogram encodings with lying lengths are
//! decoded under `ulimit -v` (the test runs itself again under the limit).

use rdmaprobe::oob::{self, Answer, Done, Hello, QpInfo, Ready};
use rdmaprobe::report::compare;
use serde_json::{json, Value};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const HOSTILE: &[&str] = &[
    "-1",
    "0",
    "1e309",
    "-1e309",
    "18446744073709551616",
    "NaN",
    "null",
    "true",
    "\"x\"",
    "[]",
    "{}",
    "\"\\u001b[2J\"",
    "\"|\\n<&>\"",
    "4294967295",
    "1.5",
    "[1,2,3]",
    "{\"a\":{\"b\":[]}}",
];

fn mutate(rng: &mut Rng, input: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(v.len() + 1);
        match rng.below(7) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 => v.insert(at, rng.next() as u8),
            2 if !v.is_empty() => {
                let end = (at + rng.below(16)).min(v.len());
                v.drain(at.min(end)..end);
            }
            3 if !v.is_empty() => {
                let start = rng.below(v.len());
                let end = (start + rng.below(64)).min(v.len());
                let piece = v[start..end].to_vec();
                v.splice(at..at, piece);
            }
            4 => {
                // a number (or a value after a colon) swapped for a hostile one
                let h = HOSTILE[rng.below(HOSTILE.len())].as_bytes();
                let s = (at..v.len()).find(|&i| v[i].is_ascii_digit() || v[i] == b':');
                if let Some(s) = s {
                    let s = if v[s] == b':' { s + 1 } else { s };
                    let e = (s..v.len())
                        .find(|&i| matches!(v[i], b',' | b'}' | b']'))
                        .unwrap_or(v.len());
                    v.splice(s..e, h.iter().copied());
                }
            }
            5 => v.truncate(at),
            _ => {}
        }
    }
    v
}

fn iters() -> u64 {
    std::env::var("RDMAPROBE_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000)
}

fn report(what: &str, n: u64, t: std::time::Instant, ok: u64) {
    let s = t.elapsed().as_secs_f64();
    println!(
        "fuzz {what}: {n} executions in {s:.1} s ({:.0}/s), {ok} accepted",
        n as f64 / s
    );
}

/// Every message a peer can send, mutated, through the parser the exchange uses; a hello that
/// parses is also checked against ours (its values reach error messages).
#[test]
fn out_of_band_messages_never_panic() {
    let mut params = std::collections::BTreeMap::new();
    params.insert("op".to_string(), "write".to_string());
    params.insert("sizes".to_string(), "8,64".to_string());
    let hello = Hello::new(params);
    let corpus: Vec<String> = vec![
        serde_json::to_string(&hello).unwrap(),
        serde_json::to_string(&Answer::Agree(hello.clone())).unwrap(),
        serde_json::to_string(&Answer::Refuse {
            param: "op".into(),
            server: "read".into(),
            client: "write".into(),
        })
        .unwrap(),
        serde_json::to_string(&QpInfo {
            qpn: 0x123,
            psn: 7,
            lid: 1,
            gid: [0; 16],
            addr: 0x7f00_0000_0000,
            rkey: 0x42,
            len: 65536,
        })
        .unwrap(),
        serde_json::to_string(&Ready { qps: 3 }).unwrap(),
        serde_json::to_string(&Done {
            error: Some("boom".into()),
        })
        .unwrap(),
    ];
    let mut rng = Rng(0x5eed_0001);
    let (n, t) = (iters(), std::time::Instant::now());
    let mut ok = 0;
    for i in 0..n {
        let base = corpus[i as usize % corpus.len()].as_bytes();
        let m = mutate(&mut rng, base);
        let line = String::from_utf8_lossy(&m);
        if let Ok(h) = oob::parse::<Hello>(&line, "fuzz") {
            let _ = hello.check(&h).map_err(|e| e.to_string());
            ok += 1;
        }
        if let Ok(Answer::Refuse { param, server, client }) = oob::parse::<Answer>(&line, "fuzz") {
            let e = oob::escape(&format!("{param}{server}{client}"));
            assert!(!e.chars().any(|c| c.is_control()), "{e:?}");
            ok += 1;
        }
        ok += u64::from(oob::parse::<QpInfo>(&line, "fuzz").is_ok());
        ok += u64::from(oob::parse::<Ready>(&line, "fuzz").is_ok());
        ok += u64::from(oob::parse::<Done>(&line, "fuzz").is_ok());
    }
    report("out-of-band messages", n, t, ok);
}

/// A small valid result document of each scenario.
fn documents() -> Vec<Value> {
    let hist = {
        let mut h = rdmaprobe::report::Hist::new();
        for v in [200.0, 210.0, 250.0, 400.0] {
            h.record(v);
        }
        h.encode()
    };
    let env = json!({"device": "model0", "provider": "model0", "model": true, "host": "fuzz"});
    let lat = |backend: &str, size: u64| {
        json!({"scenario": "lat", "backend": backend, "op": "write", "verb": "write", "size_bytes": size,
               "inline": true, "figure": "one_way", "iterations": 1000,
               "latency_ns": {"min": 190.0, "p50": 210.0, "p90": 230.0, "p99": 300.0, "p99_9": 400.0, "p99_99": 401.0, "max": 500.0, "mean": 215.0, "stdev": 20.0},
               "post_ns": {"min": 20.0, "p50": 30.0, "p90": 40.0, "p99": 50.0, "p99_9": 60.0, "p99_99": 61.0, "max": 70.0, "mean": 31.0, "stdev": 5.0},
               "block_medians_ns": [210.0, 211.0, 209.0, 212.0], "block_p99_ns": [300.0, 310.0, 290.0, 305.0],
               "histogram_ns": hist, "post_histogram_ns": hist})
    };
    let bw = json!({"scenario": "bw", "backend": "direct", "op": "write", "verb": "write", "size_bytes": 4096,
                    "threads": 1, "qps_per_thread": 1, "tx_depth": 128, "postlist": 1, "cq_mod": 64, "bidirectional": false,
                    "inline": false, "iters": 1000, "min_duration_ms": 0.0,
                    "summary": {"messages": 1000, "seconds": 0.01, "bw_avg_mib_s": 1000.0, "bw_avg_gbit_s": 8.4, "msg_rate_mpps": 1.0,
                                "bw_peak_window_mib_s": 1100.0, "bw_min_window_mib_s": 900.0, "window_ms": 1.0,
                                "window_bw_mib_s": [1000.0, 1100.0, 900.0]}});
    let pc = json!({"scenario": "post_cost", "backend": "direct", "db_mode": "bf", "op": "write", "verb": "write", "size_bytes": 8,
                    "postlist": 8, "inline": true, "cq_mod": 1, "calls_per_block": 12, "wqes_per_block": 96,
                    "per_wqe_ns": {"min": 5.0, "p50": 6.0, "p90": 7.0, "p99": 9.0, "p99_9": 10.0, "p99_99": 11.0, "max": 12.0, "mean": 6.5, "stdev": 1.0},
                    "per_wqe_ticks_p50": 15.0, "call_ns": {"min": 40.0, "p50": 48.0, "p90": 50.0, "p99": 60.0, "p99_9": 61.0, "p99_99": 62.0, "max": 63.0, "mean": 49.0, "stdev": 3.0},
                    "block_per_wqe_ns": [6.0, 6.1, 5.9], "call_histogram_ns": hist, "tsc_step_ns": 20.0, "timer_overhead_ns": 20.0, "below_overhead": false});
    let doc = |runs: Value| {
        json!({"schema_version": rdmaprobe::report::SCHEMA_VERSION, "tool": {"name": "rdmaprobe", "version": "0"},
               "environment": env, "clock": {"hz": 2.6e9}, "warnings": ["w"], "params": {"scenario": "suite"}, "runs": runs})
    };
    vec![
        doc(json!([
            lat("direct", 8),
            lat("verbs", 8),
            lat("direct", 64),
            lat("verbs", 64)
        ])),
        doc(json!([bw])),
        doc(json!([pc])),
        doc(json!([lat("direct", 8), bw, pc])),
    ]
}

/// Result files, mutated, through the reader `compare` and `plot` use; every 50th one read also
/// through `compare` itself (one and several runs per side, every format).
#[test]
fn result_files_never_panic() {
    let corpus: Vec<String> = documents().iter().map(|d| d.to_string()).collect();
    let seeds: Vec<Value> = corpus
        .iter()
        .enumerate()
        .map(|(i, c)| compare::parse(c, "seed").unwrap_or_else(|e| panic!("seed {i} does not read: {e}")))
        .collect();
    let mut rng = Rng(0x5eed_0002);
    let (n, t) = (iters(), std::time::Instant::now());
    let mut ok = 0;
    let opts = compare::Options::default();
    for i in 0..n {
        let k = i as usize % corpus.len();
        let m = mutate(&mut rng, corpus[k].as_bytes());
        let Ok(doc) = compare::parse(&String::from_utf8_lossy(&m), "fuzz") else {
            continue;
        };
        ok += 1;
        if ok % 50 != 1 {
            continue; // compare (its bootstraps) on every 50th document read: the reader is the target
        }
        let seed = &seeds[k];
        let one = compare::compare(seed, &doc, &opts);
        let three = compare::compare_sets(
            &[
                ("a".into(), seed.clone()),
                ("b".into(), seed.clone()),
                ("c".into(), seed.clone()),
            ],
            &[("d".into(), doc.clone()), ("e".into(), seed.clone()), ("f".into(), doc)],
            &opts,
        );
        for r in [one, three].into_iter().flatten() {
            let _ = (compare::text(&r), compare::markdown(&r), compare::junit(&r));
        }
    }
    report("result files (read and compared)", n, t, ok);
}

/// Result files, mutated, through the plots and the report (slower: a tenth as many).
#[test]
fn plotted_result_files_never_panic() {
    let corpus: Vec<String> = documents().iter().map(|d| d.to_string()).collect();
    for (i, c) in corpus.iter().enumerate() {
        let d = compare::parse(c, "seed").unwrap();
        rdmaprobe::report::plot::figures(&d).unwrap_or_else(|e| panic!("seed {i} does not plot: {e}"));
    }
    let mut rng = Rng(0x5eed_0003);
    let (n, t) = (iters() / 10, std::time::Instant::now());
    let mut ok = 0;
    for i in 0..n {
        let m = mutate(&mut rng, corpus[i as usize % corpus.len()].as_bytes());
        let Ok(doc) = compare::parse(&String::from_utf8_lossy(&m), "fuzz") else {
            continue;
        };
        if let Ok(figs) = rdmaprobe::report::plot::figures(&doc) {
            let _ = rdmaprobe::report::html::report(&doc, &figs);
            ok += 1;
        }
    }
    report("result files (plotted)", n, t, ok);
}

/// The memory the histogram fuzzing runs under (`ulimit -v`, KiB): a lying header that is
/// believed allocates what it claims (4 GiB for a payload length of 0xFFFFFFFF) and aborts here.
const HIST_FUZZ_LIMIT_KIB: u64 = 1_000_000;

/// Runs this test binary's test `name` again under `ulimit -v` (the child sees
/// `RDMAPROBE_FUZZ_CHILD`), and fails with its output when it does not pass.
fn under_memory_limit(name: &str, kib: u64) {
    let exe = std::env::current_exe().unwrap();
    let o = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {kib} && exec \"$0\" \"$@\""))
        .arg(exe)
        .args([name, "--exact", "--nocapture", "--test-threads", "1"])
        .env("RDMAPROBE_FUZZ_CHILD", "1")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        o.status.success() && text.contains("1 passed"),
        "{name} under ulimit -v {kib}: {:?}\n{text}",
        o.status
    );
    for l in text.lines().filter_map(|l| l.find("fuzz ").map(|i| &l[i..])) {
        println!("{l}");
    }
}

fn be32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

fn be64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

fn deflated(v2: &[u8], claimed: Option<u32>) -> Vec<u8> {
    use std::io::Write;
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(v2).unwrap();
    let z = z.finish().unwrap();
    let mut out = 0x1c84_9314u32.to_be_bytes().to_vec();
    out.extend(claimed.unwrap_or(z.len() as u32).to_be_bytes());
    out.extend(z);
    out
}

/// A V2 header's fields given hostile values: the payload length (bytes 4..8), the significant
/// digits (12..16), the lowest (16..24) and the highest value (24..32).
fn lie_in_v2(rng: &mut Rng, v2: &[u8]) -> Vec<u8> {
    let mut b = v2.to_vec();
    let len = (b.len() - 40) as u32;
    let lengths = [
        0,
        1,
        len.wrapping_sub(1),
        len + 1,
        len * 2,
        0x7fff_ffff,
        u32::MAX,
        16 << 20,
        (16 << 20) + 1,
    ];
    let values = [
        0,
        1,
        2,
        3,
        1000,
        1 << 20,
        3_600_000_000_000,
        1 << 62,
        u64::MAX / 2,
        u64::MAX - 1,
        u64::MAX,
    ];
    for _ in 0..1 + rng.below(3) {
        match rng.below(4) {
            0 => be32(&mut b, 4, lengths[rng.below(lengths.len())]),
            1 => be32(&mut b, 12, [0, 1, 3, 4, 5, 6, 255, u32::MAX][rng.below(8)]),
            2 => be64(&mut b, 16, values[rng.below(values.len())]),
            _ => be64(&mut b, 24, values[rng.below(values.len())]),
        }
    }
    b
}

/// Histogram encodings with lying lengths, plain and deflated (the payload length, the
/// compressed length, the digits, the lowest and highest value; bytes mutated at random too),
/// through `Hist::decode` and now and then the plots, under `ulimit -v` (1 GB): every one decodes
/// or is refused, none allocates what its header claims. A deflated stream that inflates to
/// 64 MiB is among them.
#[test]
fn histogram_payloads_with_lying_lengths_never_allocate_what_they_claim() {
    use base64::Engine;
    use hdrhistogram::serialization::{Serializer, V2Serializer};
    if std::env::var_os("RDMAPROBE_FUZZ_CHILD").is_none() {
        return under_memory_limit(
            "histogram_payloads_with_lying_lengths_never_allocate_what_they_claim",
            HIST_FUZZ_LIMIT_KIB,
        );
    }
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
    for v in [1u64, 200, 210, 250, 400, 1_000_000, 3_000_000_000_000] {
        h.record_n(v, v % 7 + 1).unwrap();
    }
    let mut v2 = Vec::new();
    V2Serializer::new().serialize(&h, &mut v2).unwrap();
    let empty = {
        let mut e = Vec::new();
        V2Serializer::new()
            .serialize(
                &hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap(),
                &mut e,
            )
            .unwrap();
        e
    };
    assert!(rdmaprobe::report::Hist::decode(&b64(&v2)).is_ok());
    assert!(rdmaprobe::report::Hist::decode(&b64(&deflated(&v2, None))).is_ok());
    // a deflated stream of 64 MiB: a valid V2 header, a payload of zeros
    let bomb = {
        let mut b = empty.clone();
        b.resize(40 + (64 << 20), 0);
        be32(&mut b, 4, 64 << 20);
        deflated(&b, None)
    };
    let e = rdmaprobe::report::Hist::decode(&b64(&bomb)).err().unwrap_or_default();
    assert!(e.contains("inflates to more than 16 MiB"), "{e}");
    let doc = documents().swap_remove(0);
    let mut rng = Rng(0x5eed_0004);
    let (n, t) = (iters(), std::time::Instant::now());
    let mut ok = 0;
    for i in 0..n {
        let base = if i % 3 == 0 { &empty } else { &v2 };
        let lying = match rng.below(4) {
            0 => lie_in_v2(&mut rng, base),
            1 => deflated(&lie_in_v2(&mut rng, base), None),
            2 => {
                let d = deflated(base, None);
                let lens = [0, 1, d.len() as u32 - 9, d.len() as u32 - 7, u32::MAX];
                deflated(base, Some(lens[rng.below(lens.len())]))
            }
            _ => {
                let plain = rng.below(2) == 0;
                let m = mutate(&mut rng, base);
                if plain {
                    m
                } else {
                    deflated(&m, None)
                }
            }
        };
        let s = b64(&lying);
        ok += u64::from(rdmaprobe::report::Hist::decode(&s).is_ok());
        if i % 20 == 0 {
            let mut d = doc.clone();
            d["runs"][0]["histogram_ns"] = Value::from(s);
            let _ = rdmaprobe::report::plot::figures(&d);
        }
    }
    report("histogram payloads with lying lengths", n, t, ok);
}
