//! The key-value workload on model0: through libibverbs + libmlx5 (the verbs and wr backends)
//! and on model0's own QPs (the direct backend): HERD's
//! requests as inline UC WRITEs into the region, responses as UD SEND_WITH_IMM, every GET's
//! value checked by its client, in one process and as a server and a client process.

use rdmaprobe::backend::kv::direct;
use rdmaprobe::backend::kv::verbs::{loopback, KvClient};
use rdmaprobe::backend::kv::{ClientLink, Response};
use rdmaprobe::backend::setup::Dev;
use rdmaprobe::backend::BackendError;
use rdmaprobe::backend::BackendKind;
use rdmaprobe::model::ModelConfig;
use rdmaprobe::scenario::kv::engine::Shape;
use rdmaprobe::scenario::kv::keys::KeyDist;
use rdmaprobe::scenario::kv::op::Layout;
use rdmaprobe::scenario::kv::run::{self, KvParams};
use std::time::Duration;

mod cmd;
use cmd::run as rdmaprobe;
use cmd::{finish, spawn};

fn dev() -> Dev {
    Dev::open(Some("model0"), 1, None, ModelConfig::default()).unwrap().0
}

fn params(workers: u32, clients: u32, window: u32, update_pct: u32, requests: u64, postlist: u32) -> KvParams {
    KvParams {
        shape: Shape {
            layout: Layout {
                workers,
                clients,
                window,
            },
            keys: 4096,
            update_pct,
            val_len: 32,
            dist: KeyDist::Uniform,
        },
        postlist,
        requests,
        stall: Duration::from_secs(10),
        deadline: Duration::from_secs(120),
        threads: rdmaprobe::scenario::kv::threads::Threads::One,
    }
}

#[test]
fn every_request_is_answered_over_uc_and_ud_on_model0() {
    let d = dev();
    for (kind, update, postlist) in [
        (BackendKind::Verbs, 0, 32),
        (BackendKind::Verbs, 50, 1),
        (BackendKind::Wr, 50, 32),
        (BackendKind::Wr, 0, 1),
    ] {
        let p = params(2, 3, 16, update, 2000, postlist);
        let mut paths = loopback(&d, kind, p.shape.layout).unwrap();
        let r = run::loopback(&mut paths.clients, &mut paths.workers, &p).unwrap();
        for (i, c) in r.clients.iter().enumerate() {
            assert_eq!((c.issued, c.answered), (2000, 2000), "client {i}");
            assert_eq!(r.latency[i].len(), 2000);
            assert!(
                r.latency[i].iter().all(|&t| t > 0),
                "client {i}: a request answered in 0 ticks"
            );
        }
        let hits: u64 = r.clients.iter().map(|c| c.get_hits).sum();
        let puts: u64 = r.clients.iter().map(|c| c.puts).sum();
        let served: u64 = r.workers.iter().map(|w| w.requests).sum();
        assert_eq!(served, 6000);
        assert_eq!(hits, r.workers.iter().map(|w| w.store.get_hits).sum::<u64>());
        if update == 0 {
            assert_eq!((hits, puts), (6000, 0));
        } else {
            assert!((2500..3500).contains(&puts), "{puts} PUTs of 6000 at 50 %");
        }
        let batches: u64 = r.workers.iter().map(|w| w.batches).sum();
        if postlist == 1 {
            assert_eq!(batches, served);
        }
    }
}

#[test]
fn a_run_whose_requests_go_unanswered_stops_at_the_stall_deadline() {
    let d = dev();
    let mut p = params(1, 1, 8, 0, 100, 8);
    p.stall = Duration::from_secs(1);
    let mut paths = loopback(&d, BackendKind::Verbs, p.shape.layout).unwrap();
    // no worker steps: the first window's requests are written and never answered
    let t = std::time::Instant::now();
    let e = run::loopback(&mut paths.clients, &mut paths.workers[..0], &p).unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    let s = e.to_string();
    assert!(matches!(e, run::KvRunError::Stalled { .. }), "{s}");
    assert!(s.contains("client 0: 8 written, 0 answered"), "{s}");
}

/// A thread per client and per worker (HERD's way), on every model0 backend: every request
/// answered and reconciled. Two workers answering one client at once deliver into one receive
/// queue together; before model0 kept such receives in the queue's order, libmlx5 (which takes a
/// receive's wr_id from its own tail) handed the verbs and wr clients another response's buffer
/// in about half of these runs (a wrong value); ten runs of each.
#[test]
fn a_thread_per_role_answers_every_request_on_every_backend() {
    use rdmaprobe::scenario::kv::threads;
    let _g = cmd::serial();
    let d = dev();
    let Dev::Model(m) = &d else {
        panic!("model0 is Dev::Model")
    };
    for round in 0..10 {
        for kind in [BackendKind::Verbs, BackendKind::Wr, BackendKind::Direct] {
            let mut p = params(2, 2, 32, 50, 20_000, 32);
            p.shape.keys = 100_000;
            p.threads = threads::Threads::PerRole;
            let r = if kind == BackendKind::Direct {
                let mut paths = direct::model_loopback(&m.model, p.shape.layout).unwrap();
                threads::loopback(&mut paths.clients, &mut paths.workers, &p)
            } else {
                let mut paths = loopback(&d, kind, p.shape.layout).unwrap();
                threads::loopback(&mut paths.clients, &mut paths.workers, &p)
            }
            .unwrap_or_else(|e| panic!("round {round}, {kind:?}: {e}"));
            for c in &r.clients {
                assert_eq!((c.issued, c.answered), (20_000, 20_000), "{kind:?}");
                assert_eq!(c.get_hits + c.get_misses + c.puts, 20_000, "{kind:?}");
            }
            assert_eq!(r.workers.iter().map(|w| w.requests).sum::<u64>(), 40_000);
            assert!(r.ticks > 0 && r.latency.iter().all(|l| l.len() == 20_000));
        }
    }
}

/// The direct path's ends on an mlx5 device's QPs taken over with mlx5dv (a ConnectX's ends),
/// here model0's through libmlx5: the WQEs written into libmlx5's rings, the doorbells rung and
/// the CQEs read by rdmaprobe; every request answered, every GET's value checked, in one thread
/// and with a thread per client and worker, uniform keys and Zipf with half PUTs.
#[test]
fn the_direct_path_runs_on_an_mlx5_device_s_qps() {
    use rdmaprobe::scenario::kv::threads;
    let _g = cmd::serial();
    let d = dev();
    for (update, postlist, zipf, per_role) in [(0, 32, false, false), (50, 1, true, false), (50, 32, false, true)] {
        let mut p = params(2, 3, 16, update, 2000, postlist);
        if zipf {
            p.shape.dist = KeyDist::zipf(p.shape.keys, 0.99).unwrap();
        }
        let mut paths = direct::nic_loopback(&d, p.shape.layout).unwrap();
        let r = if per_role {
            p.threads = threads::Threads::PerRole;
            threads::loopback(&mut paths.clients, &mut paths.workers, &p)
        } else {
            run::loopback(&mut paths.clients, &mut paths.workers, &p)
        }
        .unwrap_or_else(|e| panic!("update {update}, postlist {postlist}: {e}"));
        assert!(
            r.clients.iter().all(|c| (c.issued, c.answered) == (2000, 2000)),
            "{:?}",
            r.clients
        );
        let hits: u64 = r.clients.iter().map(|c| c.get_hits).sum();
        let puts: u64 = r.clients.iter().map(|c| c.puts).sum();
        assert_eq!(hits, r.workers.iter().map(|w| w.store.get_hits).sum::<u64>());
        assert_eq!(r.workers.iter().map(|w| w.requests).sum::<u64>(), 6000);
        if update == 0 {
            assert_eq!((hits, puts), (6000, 0));
        } else {
            assert!((2500..3500).contains(&puts), "{puts}");
        }
        if postlist == 1 {
            assert_eq!(r.workers.iter().map(|w| w.batches).sum::<u64>(), 6000);
        }
    }
}

#[test]
fn the_direct_path_runs_on_model0_s_own_qps() {
    let d = dev();
    let Dev::Model(m) = &d else {
        panic!("model0 is Dev::Model")
    };
    for (update, postlist, zipf) in [(0, 32, false), (50, 1, true)] {
        let mut p = params(2, 3, 16, update, 2000, postlist);
        if zipf {
            p.shape.dist = KeyDist::zipf(p.shape.keys, 0.99).unwrap();
        }
        let mut paths = direct::model_loopback(&m.model, p.shape.layout).unwrap();
        let r = run::loopback(&mut paths.clients, &mut paths.workers, &p).unwrap();
        assert!(
            r.clients.iter().all(|c| (c.issued, c.answered) == (2000, 2000)),
            "{:?}",
            r.clients
        );
        let hits: u64 = r.clients.iter().map(|c| c.get_hits).sum();
        let puts: u64 = r.clients.iter().map(|c| c.puts).sum();
        assert_eq!(hits, r.workers.iter().map(|w| w.store.get_hits).sum::<u64>());
        if update == 0 {
            assert_eq!((hits, puts), (6000, 0));
        } else {
            assert!((2500..3500).contains(&puts), "{puts}");
            assert_eq!(
                r.workers.iter().map(|w| w.batches).sum::<u64>(),
                6000,
                "postlist 1: a post per response"
            );
        }
    }
}

#[test]
fn kv_runs_from_the_command_line_with_its_table_and_json() {
    let dir = std::env::temp_dir().join(format!("rdmaprobe-kv-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("kv.json");
    let j = json.to_str().unwrap();
    let args = [
        "kv",
        "--loopback",
        "-d",
        "model0",
        "-n",
        "1500",
        "--keys",
        "4096",
        "--update",
        "50",
        "--json",
        j,
    ];
    let (code, out, err) = rdmaprobe(&args);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("figures are model0's"), "{out}");
    assert!(out.contains("key-value (HERD over MICA stores)"), "{out}");
    for b in ["verbs", "wr", "direct"] {
        assert!(
            out.lines()
                .any(|l| l.trim_start().starts_with(b) && l.contains("Mops per client")),
            "{out}"
        );
    }
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let runs = v["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 3, "{v}");
    for r in runs {
        assert_eq!(r["scenario"], "kv");
        let n = |k: &str| r[k].as_u64().unwrap_or_else(|| panic!("{k} in {r}"));
        // 2 clients x 1500 requests, every one answered and counted once
        assert_eq!(n("get_hits") + n("get_misses") + n("puts"), 3000, "{r}");
        assert_eq!(r["latency_ns"]["count"].as_u64(), Some(3000), "{r}");
        assert!(r["latency_ns"]["p50"].as_f64().unwrap() > 0.0);
        assert!(!r["histogram_ns"].as_str().unwrap().is_empty());
        assert!(r["mops"].as_f64().unwrap() > 0.0);
        assert_eq!(r["client_mops"].as_array().unwrap().len(), 2);
        assert_eq!(r["worker_mops"].as_array().unwrap().len(), 2);
        assert!((1000..2000).contains(&n("puts")), "{r}");
    }
    // compare judges kv rows by their backend and shape
    let (code, out, err) = rdmaprobe(&["compare", j, j]);
    assert_eq!(code, 0, "{out}{err}");
    let row = "kv herd direct 32B postlist=32 threads=per-role workers=2 clients=2 window=32 update_pct=50 keys=4096";
    assert!(out.contains(row), "{out}");
    assert!(out.contains("kv herd verbs-direct 32B"), "{out}");
    // its throughput is the bw metric, in Mops
    let mops = out
        .lines()
        .find(|l| l.starts_with(row) && l.contains(" bw "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(mops.contains("Mops"), "{mops}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_kv_input_exits_2_naming_the_flag() {
    let base = ["kv", "--loopback", "-d", "model0", "-n", "10"];
    let cases: [(&[&str], &str); 12] = [
        (&["--keys", "0"], "--keys 0: at least 1"),
        (&["--clients", "0"], "--clients 0: at least 1"),
        (&["--window", "-1"], "--window"),
        (&["--zipf", "-1"], "--zipf -1"),
        (&["--zipf", "nan"], "--zipf NaN"),
        (&["--window", "65"], "--window 65"),
        (&["--window", "0"], "--window 0"),
        (&["--value-size", "47"], "--value-size 47"),
        (&["--postlist", "33"], "--postlist 33"),
        (&["--update", "101"], "--update 101"),
        (
            &["--clients", "300", "--workers", "16", "--window", "64"],
            "the request region holds at most",
        ),
        (&["--keys", "20000000"], "--keys 20000000"),
    ];
    for (extra, want) in cases {
        let mut a: Vec<&str> = base.to_vec();
        a.extend_from_slice(&["--keys", "64"][..usize::from(extra[0] != "--keys") * 2]);
        a.extend_from_slice(extra);
        let (code, out, err) = rdmaprobe(&a);
        assert_eq!(code, 2, "{extra:?}: {out}{err}");
        assert!(err.contains(want), "{extra:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // what kv's peer cannot be: a HOST with --loopback, a client's port 0; kv has no -R and no
    // --peer (perftest has no key-value workload)
    for (extra, want) in [
        (
            &["--loopback"][..],
            "--loopback runs both ends in this process: give no HOST",
        ),
        (&["-p", "0"][..], "-p 0: a client needs the server's port"),
        (&["-R"][..], "unexpected argument '-R'"),
        (&["--peer=perftest"][..], "unexpected argument '--peer'"),
    ] {
        let (code, _, err) = rdmaprobe(&[&["kv", "-d", "model0", "localhost"][..], extra].concat());
        assert_eq!(code, 2, "{extra:?}: {err}");
        assert!(err.contains(want), "{extra:?}: {err}");
    }
}

/// A client's path that forges the first GET value it receives: a byte flipped, or (with
/// `empty`) its bytes dropped.
struct Forge<'a> {
    inner: &'a mut KvClient,
    armed: bool,
    empty: bool,
}

impl ClientLink for Forge<'_> {
    fn write(&mut self, slot: usize, bytes: &[u8], signal: bool) -> Result<(), BackendError> {
        self.inner.write(slot, bytes, signal)
    }
    fn post_recvs(&mut self, n: u32) -> Result<(), BackendError> {
        self.inner.post_recvs(n)
    }
    fn poll_sends(&mut self) -> Result<u32, BackendError> {
        self.inner.poll_sends()
    }
    fn poll_responses(&mut self, out: &mut Vec<Response>) -> Result<(), BackendError> {
        let from = out.len();
        self.inner.poll_responses(out)?;
        if let (true, Some(r)) = (self.armed, out[from..].iter_mut().find(|r| r.len > 0)) {
            if self.empty {
                r.len = 0;
            } else {
                r.data[7] ^= 1;
            }
            self.armed = false;
        }
        Ok(())
    }
}

#[test]
fn a_forged_value_on_model0_is_caught_naming_the_key() {
    let d = dev();
    let p = params(1, 2, 8, 0, 200, 8);
    let mut paths = loopback(&d, BackendKind::Verbs, p.shape.layout).unwrap();
    let (a, b) = paths.clients.split_at_mut(1);
    let mut links = [
        Forge {
            inner: &mut a[0],
            armed: false,
            empty: false,
        },
        Forge {
            inner: &mut b[0],
            armed: true,
            empty: false,
        },
    ];
    let e = run::loopback(&mut links, &mut paths.workers, &p).unwrap_err();
    let s = e.to_string();
    assert!(s.contains("client 1, response from worker 0: key "), "{s}");
    assert!(s.contains("value byte 7 is"), "{s}");
}

#[test]
fn zipf_keys_run_with_their_updates_in_place() {
    let d = dev();
    let mut p = params(2, 2, 16, 50, 3000, 16);
    p.shape.dist = KeyDist::zipf(p.shape.keys, 0.99).unwrap();
    let mut paths = loopback(&d, BackendKind::Wr, p.shape.layout).unwrap();
    let r = run::loopback(&mut paths.clients, &mut paths.workers, &p).unwrap();
    let puts: u64 = r.clients.iter().map(|c| c.puts).sum();
    let hits: u64 = r.clients.iter().map(|c| c.get_hits).sum();
    assert_eq!(puts + hits + r.clients.iter().map(|c| c.get_misses).sum::<u64>(), 6000);
    // 50 % PUTs of Zipf keys: the hot keys are updated in place, not inserted
    assert!((2500..3500).contains(&puts), "{puts}");
    assert_eq!(r.workers.iter().map(|w| w.store.put_hits).sum::<u64>(), puts);
}

#[test]
fn a_get_answered_empty_where_the_store_had_the_value_is_caught() {
    let d = dev();
    let p = params(1, 1, 8, 0, 200, 8);
    let mut paths = loopback(&d, BackendKind::Verbs, p.shape.layout).unwrap();
    let mut links = [Forge {
        inner: &mut paths.clients[0],
        armed: true,
        empty: true,
    }];
    let e = run::loopback(&mut links, &mut paths.workers, &p).unwrap_err();
    let s = e.to_string();
    assert!(matches!(e, run::KvRunError::Counts(_)), "{s}");
    assert!(s.contains("the clients counted 199 GET hits, 1 GET misses"), "{s}");
}

#[test]
fn kv_stops_at_a_signal_and_refuses_what_it_cannot_build() {
    // a run far longer than the test: SIGINT ends it within the loop's next check, exit 1
    let dir = std::env::temp_dir().join(format!("rdmaprobe-kv-sig-{}", std::process::id()));
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_rdmaprobe"))
        .args([
            "kv",
            "--loopback",
            "-d",
            "model0",
            "--keys",
            "1000",
            "-n",
            "50000000",
            "--backend",
            "verbs",
        ])
        .env("RDMAPROBE_MODEL_DIR", &dir)
        .env_remove("SYSFS_PATH")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let t = std::time::Instant::now();
    let ok = std::process::Command::new("kill")
        .args(["-INT", &c.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    let o = loop {
        if let Some(_st) = c.try_wait().unwrap() {
            break c.wait_with_output().unwrap();
        }
        if t.elapsed() > Duration::from_secs(20) {
            let _ = c.kill();
            panic!("kv did not stop within 20 s of SIGINT");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    // more clients than model0's open files allow: refused before any QP, naming --clients
    let o = std::process::Command::new("sh")
        .args([
            "-c",
            "ulimit -Sn 256 && ulimit -Hn 256 && exec \"$0\" kv --loopback -d model0 --clients 100 --window 1 --keys 64 -n 1",
            env!("CARGO_BIN_EXE_rdmaprobe"),
        ])
        .env("RDMAPROBE_MODEL_DIR", &dir)
        .env_remove("SYSFS_PATH")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--clients 100 and --workers 2: model0 keeps an open file per QP"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A TCP port of this test process's own (16 per process).
fn port(i: u16) -> String {
    (20000 + (std::process::id() % 2500) as u16 * 16 + i).to_string()
}

/// The table's rows of a kv output, one per backend.
fn rows(out: &str) -> Vec<String> {
    out.lines()
        .filter(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.len() == 10 && ["verbs", "wr", "direct"].contains(&w[0])
        })
        .map(str::to_string)
        .collect()
}

/// The server (its workers and stores) and the clients as two processes over the out-of-band
/// channel, on model0, every backend: uniform keys without updates at postlist 1, Zipf keys with
/// half updates at postlist 8. Each run's counts add up (the clients reconcile them with the
/// workers' as they end), and the server prints the clients' rows as its table.
#[test]
fn kv_runs_as_a_server_and_a_client_process_with_every_backend() {
    let _g = cmd::serial();
    let backends = cmd::model0_backends();
    let dir = std::env::temp_dir().join(format!("rdmaprobe-kv-two-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (i, shape) in [
        &["--update", "0", "--postlist", "1", "--threads", "one"][..],
        &["--update", "50", "--zipf", "0.99", "--postlist", "8"][..],
    ]
    .into_iter()
    .enumerate()
    {
        let p = port(i as u16);
        let json = dir.join(format!("client{i}.json"));
        let common = [
            &["kv", "-d", "model0", "-p", &p, "--oob-timeout", "30", "-n", "2000"][..],
            &["--keys", "4096", "--clients", "3", "--window", "8"][..],
            shape,
        ]
        .concat();
        let srv = spawn(&common);
        let cli = spawn(&[&common[..], &["127.0.0.1", "--json", json.to_str().unwrap()][..]].concat());
        let (cc, co, ce) = finish(cli);
        let (sc, so, se) = finish(srv);
        assert_eq!(cc, 0, "client {shape:?}: {co}{ce}");
        assert_eq!(sc, 0, "server {shape:?}: {so}{se}");
        assert!(co.contains("client of the server 127.0.0.1:"), "{co}");
        assert!(
            so.contains("server of the clients at 127.0.0.1:") && so.contains("server: done"),
            "{so}"
        );
        let (cr, sr) = (rows(&co), rows(&so));
        assert_eq!(cr.len(), backends.len(), "{co}");
        assert_eq!(sr, cr, "the server's rows are the clients'");
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(v["params"]["peer"], format!("127.0.0.1:{p}"), "{}", v["params"]);
        let threads = if i == 0 {
            "one in this process: its clients stepped in turn"
        } else {
            "a thread per client in this process, not pinned"
        };
        assert_eq!(v["params"]["threads"], threads);
        assert!(co.contains(&format!("; threads: {threads};")), "{co}");
        let runs = v["runs"].as_array().unwrap();
        for (r, b) in runs.iter().zip(&backends) {
            assert_eq!(r["backend"], *b);
            let n = |k: &str| r[k].as_u64().unwrap_or_else(|| panic!("{k} in {r}"));
            assert_eq!(n("get_hits") + n("get_misses") + n("puts"), 6000, "{r}");
            assert_eq!(r["latency_ns"]["count"].as_u64(), Some(6000), "{r}");
            assert_eq!(r["worker_mops"].as_array().unwrap().len(), 2, "{r}");
            if i == 0 {
                assert_eq!((n("puts"), n("get_misses")), (0, 0), "{r}");
                // postlist 1: one response per post
                assert_eq!(r["mean_batch"].as_f64(), Some(1.0), "{r}");
            } else {
                assert!((2000..4000).contains(&n("puts")), "{r}");
                assert_eq!(r["zipf_theta"].as_f64(), Some(0.99), "{r}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two processes that disagree on the workload stop at the handshake, each naming the flag; a
/// server that dies in the middle of a run is reported by the client, and a client that dies
/// by the server, at once (its socket closes), never waited for.
#[test]
fn kv_peers_that_disagree_or_die_are_reported() {
    let _g = cmd::serial();
    // the server's flags, the client's, what each says
    let cases: [(&[&str], &[&str], &str, &str); 2] = [
        (
            &["--clients", "2"],
            &["--clients", "3"],
            "this side has 3, the peer has 2",
            "clients (--clients)",
        ),
        (
            &["--batching"],
            &[],
            "this side has false, the peer has true",
            "(--batching)",
        ),
    ];
    for (i, (s_flags, c_flags, says, flag)) in cases.into_iter().enumerate() {
        let p = port(2 + 5 * i as u16);
        let base = ["kv", "-d", "model0", "-p", &p, "--oob-timeout", "20", "--keys", "1000"];
        let srv = spawn(&[&base[..], s_flags].concat());
        let cli = spawn(&[&base[..], c_flags, &["localhost"][..]].concat());
        let (cc, _, ce) = finish(cli);
        let (sc, _, se) = finish(srv);
        assert_eq!((cc, sc), (1, 1), "{ce}\n{se}");
        assert!(ce.contains(flag) && ce.contains(says), "{ce}");
        assert!(se.contains(flag), "{se}");
    }
    for kill_server in [true, false] {
        let p = port(if kill_server { 3 } else { 4 });
        let base = [
            "kv",
            "-d",
            "model0",
            "-p",
            &p,
            "--oob-timeout",
            "20",
            "--keys",
            "1000",
            "-n",
            "100000000",
            "--backend",
            "direct",
        ];
        let srv = spawn(&base);
        let cli = spawn(&[&base[..], &["localhost"][..]].concat());
        std::thread::sleep(Duration::from_millis(2500));
        let (mut dead, alive) = if kill_server { (srv, cli) } else { (cli, srv) };
        let t = std::time::Instant::now();
        dead.kill().unwrap();
        let _ = dead.wait();
        let (c, _, e) = finish(alive);
        assert_eq!(c, 1, "kill server {kill_server}: {e}");
        assert!(e.contains("the peer"), "kill server {kill_server}: {e}");
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}: {e}", t.elapsed());
    }
}

/// Issue 27 point 4: the suite's kv part. A point per client count at each window, every
/// backend in each, its summary lines and records; its plots (Mops and latency against the
/// clients, or against the window where only the window varies) and the report's table;
/// compare's rows of it; a kv value it cannot run exits 2 naming the suite's flag or the file's
/// key, before anything runs.
#[test]
fn the_suite_has_a_kv_part_with_its_plots_table_and_rows() {
    let dir = std::env::temp_dir().join(format!("rdmaprobe-kv-suite-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out_dir = dir.join("out");
    let o = out_dir.to_str().unwrap();
    let backends = cmd::model0_backends();
    let (code, out, err) = rdmaprobe(&[
        "suite",
        "-d",
        "model0",
        "--parts",
        "kv",
        "--kv-clients",
        "2,1",
        "--kv-requests",
        "1000",
        "--out",
        o,
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("matrix: kv 1,2 client(s) x window 32, 1000 requests per client, 1048576 keys, threads one"),
        "{out}"
    );
    assert!(
        out.contains("summary: key-value (HERD over MICA stores, both sides in this process, one: every client and worker stepped in turn)"),
        "{out}"
    );
    for clients in [1, 2] {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("  kv {clients} client(s) window 32")))
            .unwrap_or_else(|| panic!("{out}"));
        for b in &backends {
            assert!(line.contains(&format!(" {b}: ")), "{line}");
        }
    }
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("results.json")).unwrap()).unwrap();
    let runs = j["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2 * backends.len(), "{out}");
    for (i, r) in runs.iter().enumerate() {
        let clients = 1 + (i / backends.len()) as u64;
        assert_eq!(r["scenario"], "kv", "{r}");
        assert_eq!(r["backend"], backends[i % backends.len()], "{r}");
        assert_eq!(r["clients"], clients, "{r}");
        assert_eq!(r["threads"], "one", "{r}");
        let n = |k: &str| r[k].as_u64().unwrap_or_else(|| panic!("{k} in {r}"));
        assert_eq!(n("get_hits") + n("get_misses") + n("puts"), clients * 1000, "{r}");
        assert_eq!(r["latency_ns"]["count"].as_u64(), Some(clients * 1000), "{r}");
    }
    assert_eq!(j["params"]["matrix"]["kv_clients"], serde_json::json!([1, 2]));
    for f in ["kv-mops-vs-clients.svg", "kv-latency-vs-clients.svg"] {
        let svg = std::fs::read_to_string(out_dir.join(f)).unwrap_or_else(|e| panic!("{f}: {e}\n{out}"));
        for b in &backends {
            assert!(svg.contains(b), "{f} has no line of {b}");
        }
    }
    let html = std::fs::read_to_string(out_dir.join("report.html")).unwrap();
    assert!(html.contains("<table id=\"kv\">"), "no kv table");
    assert!(html.contains("<figure class=\"plot\" id=\"kv-mops-vs-clients.svg\">"));
    // compare's rows: the shape in the key, the throughput as Mops, the contrast to direct
    let res = out_dir.join("results.json");
    let r = res.to_str().unwrap();
    let (code, cmp, err) = rdmaprobe(&["compare", r, r]);
    assert_eq!(code, 0, "{cmp}{err}");
    let row = "kv herd direct 32B postlist=32 threads=one workers=2 clients=2 window=32 update_pct=0 keys=1048576";
    assert!(
        cmp.lines()
            .any(|l| l.starts_with(row) && l.contains(" bw ") && l.contains("Mops")),
        "{cmp}"
    );
    assert!(cmp.contains("kv herd verbs-direct 32B"), "{cmp}");
    // one client count and two windows: the window is the axis
    std::fs::remove_dir_all(&out_dir).unwrap();
    let (code, out, err) = rdmaprobe(&[
        "suite",
        "-d",
        "model0",
        "--parts",
        "kv",
        "--kv-clients",
        "1",
        "--kv-windows",
        "4,16",
        "--kv-requests",
        "500",
        "--backends",
        "direct",
        "--out",
        o,
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out_dir.join("kv-mops-vs-window.svg").exists(), "{out}");
    assert!(out_dir.join("kv-latency-vs-window.svg").exists(), "{out}");
    assert!(!out_dir.join("kv-mops-vs-clients.svg").exists(), "{out}");
    // what the part cannot run: exit 2, the suite's flag or the file's key named, nothing run
    let m = dir.join("m.toml");
    std::fs::write(&m, "kv_clients = [1, 0]\n").unwrap();
    let w = dir.join("w.toml");
    std::fs::write(&w, "kv_windows = [65]\n").unwrap();
    let cases: [(&[&str], &str); 8] = [
        (
            &["--kv-keys", "16777216", "--kv-clients", "1"],
            "--kv-keys/kv_keys 16777216 of value size 32",
        ),
        (&["--kv-windows", "4,200"], "--kv-windows"),
        (&["--kv-clients", "0"], "--kv-clients"),
        (&["--kv-clients", "1,x"], "--kv-clients"),
        (&["--kv-requests", "0"], "--kv-requests"),
        (&["--kv-threads", "two"], "--kv-threads"),
        (&["--matrix", m.to_str().unwrap()], "key `kv_clients`"),
        (
            &["--matrix", w.to_str().unwrap()],
            "key `kv_windows`: '65' is not a whole number from 1 to 64",
        ),
    ];
    for (args, says) in cases {
        let _ = std::fs::remove_dir_all(&out_dir);
        let mut a = vec!["suite", "-d", "model0", "--parts", "kv", "--out", o];
        a.extend(args);
        let (code, out, err) = rdmaprobe(&a);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!out.contains("1/"), "{args:?} ran a step: {out}");
        assert!(!out_dir.exists(), "{args:?} wrote {}", out_dir.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 27 point 3: the doorbell batching's gain measured in one run (`--batching`): each
/// backend at `--postlist` and at 1, one after the other, a row each named backend/postlist, and
/// under the table each backend's gain from those two rows; in one process and between two (both
/// sides agree on it: kv_peers_that_disagree_or_die_are_reported); `--batching` with
/// `--postlist 1` exits 2.
#[test]
fn batching_runs_each_backend_at_its_postlist_and_at_1() {
    let _g = cmd::serial();
    let backends = cmd::model0_backends();
    let dir = std::env::temp_dir().join(format!("rdmaprobe-kv-batching-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("b.json");
    let base = [
        "kv",
        "-d",
        "model0",
        "-n",
        "1000",
        "--keys",
        "4096",
        "--clients",
        "4",
        "--batching",
    ];
    let (code, out, err) = rdmaprobe(
        &[
            &base[..],
            &["--loopback", "--threads", "one", "--json", json.to_str().unwrap()],
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{out}{err}");
    let named: Vec<String> = out
        .lines()
        .filter(|l| l.split_whitespace().count() == 10)
        .filter_map(|l| {
            l.split_whitespace()
                .next()
                .filter(|w| w.contains('/'))
                .map(str::to_string)
        })
        .filter(|w| backends.iter().any(|b| w.starts_with(&format!("{b}/"))))
        .collect();
    let want: Vec<String> = backends
        .iter()
        .flat_map(|b| [format!("{b}/32"), format!("{b}/1")])
        .collect();
    assert_eq!(named, want, "{out}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["params"]["batching"], true);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2 * backends.len(), "{v}");
    let mut gains = Vec::new();
    for (pair, b) in runs.chunks(2).zip(&backends) {
        assert_eq!(
            (&pair[0]["backend"], &pair[1]["backend"]),
            (&serde_json::json!(b), &serde_json::json!(b))
        );
        assert_eq!(
            (pair[0]["postlist"].as_u64(), pair[1]["postlist"].as_u64()),
            (Some(32), Some(1))
        );
        assert_eq!(
            pair[1]["mean_batch"].as_f64(),
            Some(1.0),
            "postlist 1: a post per response"
        );
        let (m32, m1) = (pair[0]["mops"].as_f64().unwrap(), pair[1]["mops"].as_f64().unwrap());
        gains.push(format!("{b} {:.2}x ({m32:.3} / {m1:.3} Mops)", m32 / m1));
    }
    let line = format!(
        " doorbell batching, this run: Mops at postlist 32 over postlist 1 (a post per response): {}",
        gains.join(", ")
    );
    assert!(out.lines().any(|l| l == line), "no line\n{line}\nin\n{out}");
    // two processes: the server's rows are the clients', both sides at both postlists
    let p = port(5);
    let two = [&base[..], &["--backend", "direct", "-p", &p, "--oob-timeout", "30"]].concat();
    let srv = spawn(&two);
    let cli = spawn(&[&two[..], &["127.0.0.1"][..]].concat());
    let (cc, co, ce) = finish(cli);
    let (sc, so, se) = finish(srv);
    assert_eq!((cc, sc), (0, 0), "{co}{ce}\n{so}{se}");
    let rows = |o: &str| -> Vec<String> {
        o.lines()
            .filter(|l| l.trim_start().starts_with("direct/") && l.split_whitespace().count() == 10)
            .map(str::to_string)
            .collect()
    };
    let names: Vec<String> = rows(&co)
        .iter()
        .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
        .collect();
    assert_eq!(names, ["direct/32", "direct/1"], "{co}");
    assert_eq!(rows(&so), rows(&co), "the server's rows are the clients'");
    // a side without --batching: kv_peers_that_disagree_or_die_are_reported
    let (code, _, err) = rdmaprobe(&["kv", "--loopback", "-d", "model0", "--postlist", "1", "--batching"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--batching with --postlist 1"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
