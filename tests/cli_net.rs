//! Client and server as two processes over the out-of-band TCP exchange, on model0: a normal
//! run, parameters that disagree, a server that is not there, a server that dies mid-run, a
//! client that never comes. Each case ends with a message and a non-zero exit, never a hang.
//! And the failure bundle a failed run writes, against another local user (issue 30).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One test at a time: each runs a client and a server pinned to the two CPUs, spinning; two
/// tests at once would share them and stretch every deadline and figure the tests check.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static M: std::sync::Mutex<()> = std::sync::Mutex::new(());
    M.lock().unwrap_or_else(|e| e.into_inner())
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rdmaprobe"))
}

/// A TCP port of this test process's own (16 per process: each test its own, the tests run
/// in parallel).
fn port(i: u16) -> String {
    assert!(i < 16);
    (20000 + (std::process::id() % 2500) as u16 * 16 + i).to_string()
}

fn spawn(args: &[&str]) -> Child {
    bin()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rdmaprobe")
}

fn finish(c: Child) -> (i32, String, String) {
    let o = c.wait_with_output().expect("wait");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

#[test]
fn client_and_server_processes_measure_together() {
    let _g = serial();
    let p = port(0);
    let srv = spawn(&[
        "lat",
        "write",
        "-d",
        "model0",
        "-n",
        "3000",
        "-s",
        "32",
        "-p",
        &p,
        "--oob-timeout",
        "20",
    ]);
    let cli = spawn(&[
        "lat",
        "write",
        "127.0.0.1",
        "-d",
        "model0",
        "-n",
        "3000",
        "-s",
        "32",
        "-p",
        &p,
        "--oob-timeout",
        "20",
    ]);
    let (cc, co, ce) = finish(cli);
    let (sc, so, se) = finish(srv);
    assert_eq!(cc, 0, "client: {co}{ce}");
    assert_eq!(sc, 0, "server: {so}{se}");
    let row = co
        .lines()
        .find(|l| l.trim_start().starts_with("32") && l.contains("direct"))
        .expect("client table row");
    assert_eq!(row.split_whitespace().nth(2), Some("3000"), "{row}");
    assert!(
        so.contains("server: client 127.0.0.1:") && so.contains("server: done"),
        "{so}"
    );
    // the server prints the client's rows as its table (issue 29 item 15), as perftest's does
    let srow = so
        .lines()
        .find(|l| l.trim_start().starts_with("32") && l.contains("direct"))
        .unwrap_or_else(|| panic!("no table on the server: {so}"));
    assert_eq!(srow, row, "the server's row is the client's");
    assert!(so.contains("the rows are the client's measurement"), "{so}");
}

#[test]
fn parameters_that_disagree_stop_both_ends_naming_the_parameter() {
    let _g = serial();
    let p = port(1);
    let srv = spawn(&[
        "lat",
        "write",
        "-d",
        "model0",
        "-n",
        "100",
        "-s",
        "64",
        "-p",
        &p,
        "--oob-timeout",
        "20",
    ]);
    let cli = spawn(&[
        "lat",
        "write",
        "127.0.0.1",
        "-d",
        "model0",
        "-n",
        "100",
        "-s",
        "128",
        "-p",
        &p,
        "--oob-timeout",
        "20",
    ]);
    let (cc, _, ce) = finish(cli);
    let (sc, _, se) = finish(srv);
    assert_eq!(cc, 1, "{ce}");
    assert_eq!(sc, 1, "{se}");
    assert!(
        ce.contains("disagree on sizes (-s, -a): this side has 128, the peer has 64"),
        "client: {ce}"
    );
    assert!(
        se.contains("disagree on sizes (-s, -a): this side has 64, the peer has 128"),
        "server: {se}"
    );
}

#[test]
fn an_unreachable_server_is_reported_within_the_deadline() {
    let _g = serial();
    let t = Instant::now();
    let (c, _, e) = finish(spawn(&[
        "lat",
        "write",
        "127.0.0.1",
        "-d",
        "model0",
        "-p",
        &port(2),
        "--oob-timeout",
        "1",
    ]));
    assert_eq!(c, 1, "{e}");
    assert!(e.contains("connecting to 127.0.0.1:"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
}

/// A server that dies mid-run is reported, not waited for; the client's failure writes the
/// diagnostics bundle (issue 13 point 4) where `--diag` says, and its error names it: the
/// command, the environment, devices and doctor, the QPs' states read back, the counters before
/// and after, the error, the kernel log's tail.
#[test]
fn a_server_that_dies_mid_run_is_reported_not_waited_for() {
    let _g = serial();
    let p = port(3);
    let diag = std::env::temp_dir().join(format!("rdmaprobe-diag-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&diag);
    let common = [
        "-d",
        "model0",
        "--backend",
        "direct",
        "-n",
        "100000000",
        "-p",
        &p,
        "--oob-timeout",
        "20",
    ];
    let mut srv = spawn(&[&["lat", "write"][..], &common[..]].concat());
    let cli = spawn(
        &[
            &["lat", "write", "127.0.0.1"][..],
            &common[..],
            &["--stall-secs", "2", "--diag", diag.to_str().unwrap()][..],
        ]
        .concat(),
    );
    std::thread::sleep(Duration::from_millis(1500));
    let t = Instant::now();
    srv.kill().expect("kill the server");
    let _ = srv.wait();
    let (c, _, e) = finish(cli);
    assert_eq!(c, 1, "{e}");
    // Two correct reports of a dead peer, depending on when it died: the stall watchdog (the
    // peer stopped answering), or the transport itself (the peer's QP is gone, so our WRITE's
    // retries run out: an error CQE with its syndrome, as on a NIC).
    let stalled = e.contains("no progress") && e.contains("the peer stopped");
    let retries_out = e.contains("TRANSPORT_RETRY_EXC_ERR")
        && e.contains("requester error CQE")
        && e.contains("the peer never acknowledged: it may have stopped");
    assert!(stalled || retries_out, "{e}");
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    assert!(e.contains(&format!("(diagnostics: {})", diag.display())), "{e}");
    for f in [
        "command.txt",
        "plan.txt",
        "environment.json",
        "devices.txt",
        "doctor.txt",
        "doctor.json",
        "qp_states.txt",
        "counters.json",
        "error.txt",
        "kernel_log.txt",
    ] {
        assert!(diag.join(f).is_file(), "no {f} in the bundle");
    }
    let states = std::fs::read_to_string(diag.join("qp_states.txt")).unwrap();
    assert!(states.starts_with("direct QP 0x"), "{states}");
    let err = std::fs::read_to_string(diag.join("error.txt")).unwrap();
    assert!(
        err.contains("no progress") || err.contains("TRANSPORT_RETRY_EXC_ERR"),
        "{err}"
    );
    let counters: serde_json::Value =
        serde_json::from_slice(&std::fs::read(diag.join("counters.json")).unwrap()).unwrap();
    assert_eq!(counters["before"]["source"], "model0", "{counters}");
    assert!(
        counters["delta"]["wqes_executed"].as_u64().is_some_and(|n| n > 0),
        "{counters}"
    );
    std::fs::remove_dir_all(&diag).ok();
}

#[test]
fn a_server_without_client_gives_up_at_its_deadline() {
    let _g = serial();
    let (c, _, e) = finish(spawn(&[
        "lat",
        "write",
        "-d",
        "model0",
        "-p",
        &port(4),
        "--oob-timeout",
        "1",
    ]));
    assert_eq!(c, 1, "{e}");
    assert!(e.contains("no client within the deadline"), "{e}");
}

#[test]
fn bandwidth_client_and_server_processes() {
    let _g = serial();
    for (i, args) in [
        &["send", "-s", "256"][..],
        &["write", "-s", "64", "-b", "--threads", "2", "-q", "2"][..],
    ]
    .iter()
    .enumerate()
    {
        let p = port(if i == 0 { 1 } else { 2 }).parse::<u16>().unwrap() + 1000;
        let p = p.to_string();
        let mut sa = vec!["bw"];
        sa.extend_from_slice(args);
        sa.extend_from_slice(&["-d", "model0", "-n", "5000", "-p", &p, "--oob-timeout", "20"]);
        let mut ca = sa.clone();
        ca.insert(2, "127.0.0.1");
        let srv = spawn(&sa);
        let cli = spawn(&ca);
        let (cc, co, ce) = finish(cli);
        let (sc, so, se) = finish(srv);
        assert_eq!(cc, 0, "client {args:?}: {co}{ce}");
        assert_eq!(sc, 0, "server {args:?}: {so}{se}");
        let row = co
            .lines()
            .find(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()) && l.contains("direct"))
            .expect("a row");
        let msgs: u64 = row.split_whitespace().nth(2).unwrap().parse().unwrap();
        // bidirectional: only the client's own direction is its figure: threads x QPs x iterations
        let expect = if i == 0 { 5000 } else { 2 * 2 * 5000 };
        assert_eq!(msgs, expect, "{row}");
        assert!(so.contains("server: done"), "{so}");
    }
}

/// A server that goes away instead of sending `Done` once the measurement is over (here: the
/// library's server behind a rendezvous that closes the connection at `Done`, which the
/// `Rendezvous` trait lets a test put in). The client's figures were measured: it prints them,
/// writes its `--json` (with the unclean end among the warnings), and exits 1 naming what went
/// wrong. Before, the client dropped its finished results and wrote nothing.
#[test]
fn results_are_written_when_the_peer_vanishes_at_the_end() {
    let _g = serial();
    use rdmaprobe::oob::{OobError, Peer, Rendezvous};
    use rdmaprobe::probe::{self, Backends, LatPlan, PeerSpec, Plan, Quiet, Scenario};
    struct ClosesAtDone(Option<Peer>);
    impl Rendezvous for ClosesAtDone {
        fn send_value(&mut self, msg: serde_json::Value) -> Result<(), OobError> {
            if msg.as_object().is_some_and(|o| o.len() == 1 && o.contains_key("error")) {
                self.0 = None; // the connection closes instead of Done
            }
            match self.0.as_mut() {
                Some(p) => p.send_value(msg),
                None => Err(OobError::Protocol {
                    peer: "client".into(),
                    why: "closed by the test".into(),
                }),
            }
        }
        fn recv_value(&mut self) -> Result<serde_json::Value, OobError> {
            match self.0.as_mut() {
                Some(p) => p.recv_value(),
                None => Err(OobError::Protocol {
                    peer: "client".into(),
                    why: "closed by the test".into(),
                }),
            }
        }
        fn leads(&self) -> bool {
            true
        }
        fn peer_name(&self) -> String {
            self.0.as_ref().map(|p| p.addr().to_string()).unwrap_or_default()
        }
        fn set_timeout(&mut self, t: Duration) -> Result<(), OobError> {
            self.0.as_mut().map_or(Ok(()), |p| Rendezvous::set_timeout(p, t))
        }
    }
    let p = port(5);
    let tcp_port: u16 = p.parse().unwrap();
    let dir = std::env::temp_dir().join(format!("rdmaprobe-net-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("lat.json");
    let server = std::thread::spawn(move || {
        let mut lat = LatPlan::new(rdmaprobe::backend::OpKind::Write, 32);
        lat.iters = 2000;
        let plan = Plan {
            device: rdmaprobe::probe::DeviceSpec {
                name: Some("model0".into()),
                ..Default::default()
            },
            backends: Backends::Only(rdmaprobe::backend::BackendKind::Direct),
            peer: PeerSpec::Listen {
                bind: "127.0.0.1".into(),
                port: tcp_port,
            },
            ..Plan::loopback(Scenario::Lat(lat))
        };
        let peer = Peer::accept(tcp_port, Duration::from_secs(20)).expect("accept");
        probe::run_with_peer(&plan, &mut ClosesAtDone(Some(peer)), &mut Quiet).map(|r| r.end_error)
    });
    let cli = spawn(&[
        "lat",
        "write",
        "127.0.0.1",
        "-d",
        "model0",
        "--backend",
        "direct",
        "-n",
        "2000",
        "-s",
        "32",
        "-p",
        &p,
        "--oob-timeout",
        "20",
        "--json",
        json.to_str().unwrap(),
    ]);
    let (cc, co, ce) = finish(cli);
    let srv = server.join().expect("server thread");
    assert!(srv.is_ok_and(|e| e.is_some()), "the server saw its own unclean end");
    assert_eq!(cc, 1, "client: {co}{ce}");
    assert!(ce.contains("did not end cleanly"), "{ce}");
    assert!(co.contains("results written to"), "{co}");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).expect("json written")).unwrap();
    assert_eq!(doc["runs"][0]["iterations"].as_u64(), Some(2000), "{doc}");
    assert!(
        doc["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("did not end cleanly")),
        "{doc}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A peer that sends back this side's own QP address would have it connect a QP to itself and
/// report a loopback figure as the wire's (seen: 75 ns p50, exit 0). The client refuses it.
#[test]
fn a_peer_that_echoes_our_qp_is_refused() {
    let _g = serial();
    use rdmaprobe::oob::{Answer, Hello, OobError, Rendezvous};
    use rdmaprobe::probe::{self, Backends, LatPlan, PeerSpec, Plan, Quiet, Scenario};
    /// Agrees to everything and echoes every other message.
    struct Echo(Option<serde_json::Value>);
    impl Rendezvous for Echo {
        fn send_value(&mut self, msg: serde_json::Value) -> Result<(), OobError> {
            self.0 = Some(match serde_json::from_value::<Hello>(msg.clone()) {
                Ok(h) => serde_json::to_value(Answer::Agree(h)).unwrap(),
                Err(_) => msg,
            });
            Ok(())
        }
        fn recv_value(&mut self) -> Result<serde_json::Value, OobError> {
            Ok(self.0.take().unwrap_or_default())
        }
        fn leads(&self) -> bool {
            false
        }
        fn peer_name(&self) -> String {
            "echo".into()
        }
        fn set_timeout(&mut self, _: Duration) -> Result<(), OobError> {
            Ok(())
        }
    }
    let plan = Plan {
        device: rdmaprobe::probe::DeviceSpec {
            name: Some("model0".into()),
            ..Default::default()
        },
        backends: Backends::Only(rdmaprobe::backend::BackendKind::Direct),
        peer: PeerSpec::Connect {
            host: "echo".into(),
            port: 1,
        },
        ..Plan::loopback(Scenario::Lat(LatPlan::new(rdmaprobe::backend::OpKind::Write, 8)))
    };
    let e = probe::run_with_peer(&plan, &mut Echo(None), &mut Quiet)
        .err()
        .expect("refused");
    assert!(e.to_string().contains("refusing to connect a QP to itself"), "{e}");
}

/// `-p 0` listens on a port the system picks and prints it (before: "port 0"); `--bind` chooses
/// the address.
#[test]
fn a_server_on_port_0_prints_its_real_port() {
    let _g = serial();
    let srv = spawn(&[
        "lat",
        "write",
        "-d",
        "model0",
        "-p",
        "0",
        "--bind",
        "127.0.0.1",
        "--oob-timeout",
        "1",
    ]);
    let (code, _, err) = finish(srv);
    assert_eq!(code, 1, "{err}");
    let addr = err
        .split("waiting for a client on ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or_else(|| panic!("{err}"));
    let port: u16 = addr.strip_prefix("127.0.0.1:").expect(addr).parse().expect(addr);
    assert_ne!(port, 0, "{err}");
}

/// `rdmaprobe ping` (issue 13 point 2) between two processes on model0: a good ladder; an
/// unreachable peer (layer 2); a peer whose QP address carries a wrong rkey, and one whose QP
/// is in error (layer 2: the faults put in by a rendezvous behind the library's ping server);
/// a slow peer (model0's wire delay) against a latency limit (layer 3). Each names its layer
/// and likely cause and exits 10 + the layer.
#[test]
fn ping_names_the_first_failing_layer() {
    let _g = serial();
    use rdmaprobe::oob::{OobError, Peer, Rendezvous};
    use rdmaprobe::probe::check::ping;
    use rdmaprobe::probe::{Backends, LatPlan, PeerSpec, Plan, Quiet, Scenario};
    /// Rewrites this side's QP addresses on their way out.
    struct Rewrite<F: FnMut(&mut serde_json::Value)>(Peer, F);
    impl<F: FnMut(&mut serde_json::Value)> Rendezvous for Rewrite<F> {
        fn send_value(&mut self, mut msg: serde_json::Value) -> Result<(), OobError> {
            if msg.get("rkey").is_some() && msg.get("qpn").is_some() {
                (self.1)(&mut msg);
            }
            self.0.send_value(msg)
        }
        fn recv_value(&mut self) -> Result<serde_json::Value, OobError> {
            self.0.recv_value()
        }
        fn leads(&self) -> bool {
            true
        }
        fn peer_name(&self) -> String {
            self.0.addr().to_string()
        }
        fn set_timeout(&mut self, t: Duration) -> Result<(), OobError> {
            Rendezvous::set_timeout(&mut self.0, t)
        }
    }
    let server_plan = |port: u16| ping::PingPlan {
        plan: Plan {
            device: rdmaprobe::probe::DeviceSpec {
                name: Some("model0".into()),
                ..Default::default()
            },
            backends: Backends::Only(rdmaprobe::backend::BackendKind::Direct),
            peer: PeerSpec::Listen {
                bind: "127.0.0.1".into(),
                port,
            },
            stall: Duration::from_secs(3),
            ..Plan::loopback(Scenario::Lat(LatPlan::new(rdmaprobe::backend::OpKind::Write, 1)))
        },
        max_lat_ns: None,
        min_bw_mib_s: None,
        baseline: None,
        tolerance_pct: 20.0,
        model_delay_ns: None,
    };
    let client = |p: &str, extra: &[&str]| {
        let args = [
            &[
                "ping",
                "127.0.0.1",
                "-d",
                "model0",
                "--backend",
                "direct",
                "-p",
                p,
                "--oob-timeout",
                "10",
                "--stall-secs",
                "3",
            ][..],
            extra,
        ]
        .concat();
        finish(spawn(&args))
    };
    // a good ladder: server and client processes
    let p = port(6);
    let srv = spawn(&[
        "ping",
        "-d",
        "model0",
        "--backend",
        "direct",
        "-p",
        &p,
        "--oob-timeout",
        "10",
    ]);
    let (c, o, e) = client(&p, &["--max-lat-ns", "100000", "--min-bw", "10"]);
    let (sc, so, se) = finish(srv);
    assert_eq!(c, 0, "client: {o}{e}");
    assert_eq!(sc, 0, "server: {so}{se}");
    assert!(
        o.contains("all layers pass") && o.contains("1-byte SEND on direct: completed"),
        "{o}"
    );
    // unreachable: layer 2
    let (c, o, _) = client("1", &[]);
    assert_eq!(c, 12, "{o}");
    assert!(
        o.contains("first failing layer: 2 (connection)") && o.contains("the peer is unreachable"),
        "{o}"
    );
    // a wrong rkey, and a QP in error, put in by the server's rendezvous
    let model = rdmaprobe::model::Model::open(Default::default()).unwrap();
    let broken = rdmaprobe::model::DirectModelQp::new(
        &model,
        model.alloc_pd(),
        Default::default(),
        64,
        rdmaprobe::mlx5::sq::DbMode::Db,
    )
    .unwrap();
    broken.qp.set_error();
    let broken_qpn = broken.qp.qpn();
    for (fault, want) in [("rkey", "wrong rkey"), ("qp", "its QP is in error or gone")] {
        let p = port(7);
        let tcp: u16 = p.parse().unwrap();
        let srv = std::thread::spawn(move || {
            let peer = rdmaprobe::oob::Listener::bind("127.0.0.1", tcp)
                .unwrap()
                .accept(Duration::from_secs(10))
                .unwrap();
            let rewrite = move |m: &mut serde_json::Value| {
                if fault == "rkey" {
                    m["rkey"] = (m["rkey"].as_u64().unwrap() ^ 0x5a5a).into();
                } else {
                    m["qpn"] = broken_qpn.into();
                }
            };
            ping::run_with_peer(&server_plan(tcp), &mut Rewrite(peer, rewrite), &mut Quiet).map(|r| r.exit_code())
        });
        let (c, o, e) = client(&p, &[]);
        let _ = srv.join();
        assert_eq!(c, 12, "{fault}: {o}{e}");
        assert!(o.contains("first failing layer: 2") && o.contains(want), "{fault}: {o}");
    }
    drop(broken);
    // a slow peer: layer 3 against a latency limit
    let p = port(8);
    let srv = spawn(&[
        "ping",
        "-d",
        "model0",
        "--backend",
        "direct",
        "-p",
        &p,
        "--oob-timeout",
        "10",
        "--model-delay-ns",
        "40000",
    ]);
    let (c, o, e) = client(&p, &["--max-lat-ns", "5000"]);
    let (sc, so, se) = finish(srv);
    assert_eq!(c, 13, "{o}{e}");
    // the client failed layer 3 but ran the whole ladder: the server was not left waiting, and
    // it learnt the client's verdict (both ends agree: issue 29 item 10)
    assert_eq!(sc, 13, "server: {so}{se}");
    assert!(
        so.contains("the client's limits:") && so.contains("over the limit 5000 ns"),
        "{so}"
    );
    assert!(
        o.contains("first failing layer: 3 (performance)") && o.contains("over the limit 5000 ns"),
        "{o}"
    );
}

/// The set-up with the peer is one phase with one deadline (issue 11 point 3): a peer that
/// answers each message just within `--oob-timeout` cannot stretch the set-up to several times
/// it (before: 2.5 s per message made a 3 s timeout last 15 s).
#[test]
fn a_slow_peer_cannot_stretch_the_set_up() {
    let _g = serial();
    use rdmaprobe::oob::{Answer, Hello, Peer, QpInfo};
    let p = port(9);
    let tcp: u16 = p.parse().unwrap();
    let srv = std::thread::spawn(move || {
        let mut peer = Peer::accept(tcp, Duration::from_secs(10)).unwrap();
        let h: Hello = peer.recv().unwrap();
        std::thread::sleep(Duration::from_millis(1500));
        peer.send(&Answer::Agree(h)).unwrap();
        let q: Result<QpInfo, _> = peer.recv();
        std::thread::sleep(Duration::from_millis(1500));
        if let Ok(mut q) = q {
            q.qpn ^= 1;
            let _ = peer.send(&q);
        }
        std::thread::sleep(Duration::from_secs(3));
    });
    let t = Instant::now();
    let (c, o, e) = finish(spawn(&[
        "lat",
        "write",
        "127.0.0.1",
        "-d",
        "model0",
        "--backend",
        "direct",
        "-p",
        &p,
        "--oob-timeout",
        "2",
    ]));
    let took = t.elapsed();
    let _ = srv.join();
    assert_eq!(c, 1, "{o}{e}");
    assert!(
        e.contains("the set-up (parameters, QP addresses, barrier) did not end within 2 s"),
        "{e}"
    );
    assert!(
        took < Duration::from_secs(4),
        "the set-up took {took:?} against a 2 s deadline"
    );
}

/// UC and UD ping-pongs between two processes (issue 14 part 1): each side posts its receives
/// before the barrier, so no message finds none (nothing is retried on these transports): every
/// backend completes every iteration and model0 drops nothing.
#[test]
fn uc_and_ud_ping_pongs_between_two_processes() {
    let _g = serial();
    for (i, t) in ["UC", "UD"].into_iter().enumerate() {
        let p = port(12 + i as u16);
        let json = std::env::temp_dir().join(format!("rdmaprobe-net-{t}-{}.json", std::process::id()));
        let args = |client: bool| {
            let mut a = vec![
                "lat", "send", "-c", t, "-d", "model0", "-n", "3000", "-s", "64", "-p", &p,
            ];
            a.extend(["--oob-timeout", "20"]);
            if client {
                a.extend(["127.0.0.1", "--json", json.to_str().unwrap()]);
            }
            a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
        };
        let srv_args = args(false);
        let srv = spawn(&srv_args.iter().map(String::as_str).collect::<Vec<_>>());
        let cli_args = args(true);
        let cli = spawn(&cli_args.iter().map(String::as_str).collect::<Vec<_>>());
        let (cc, co, ce) = finish(cli);
        let (sc, so, se) = finish(srv);
        assert_eq!(cc, 0, "{t} client: {co}{ce}");
        assert_eq!(sc, 0, "{t} server: {so}{se}");
        let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(j["params"]["transport"], t);
        let runs = j["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 3, "{co}");
        for r in runs {
            assert_eq!(r["latency_ns"]["count"], 3000, "{t}: {r}");
        }
        assert!(
            j["counters"]["delta"]["wqes_executed"].as_u64().unwrap_or(0) >= 3 * 3000,
            "{t}: model0's counters: {}",
            j["counters"]
        );
        let dropped = j["counters"]["delta"]["dropped_messages"].as_u64().unwrap_or(0);
        assert_eq!(dropped, 0, "{t}: model0 dropped {dropped} messages\n{co}");
        std::fs::remove_file(&json).ok();
    }
}

/// bw -D between two processes: the client sizes every run from a short first one and gives the
/// server the count, so each run lasts at least D on both ends; --run-infinitely: a row per
/// backend every D until a stop on either side, which ends both with exit 0 after the round
/// under way (every row in the client's JSON).
#[test]
fn bandwidth_for_a_duration_and_without_end_between_two_processes() {
    let _g = serial();
    // write, and send (whose runs, resized on the same QPs, must leave no receive behind)
    for (i, op) in [(10, "write"), (13, "send")] {
        let p = port(i);
        let common = [op, "-s", "4096", "-d", "model0", "-p", &p, "--oob-timeout", "20"];
        let mut sa = vec!["bw", "-D", "0.3"];
        sa.extend_from_slice(&common);
        let mut ca = sa.clone();
        ca.push("127.0.0.1");
        let srv = spawn(&sa);
        let cli = spawn(&ca);
        let (cc, co, ce) = finish(cli);
        let (sc, so, se) = finish(srv);
        assert_eq!((cc, sc), (0, 0), "{op}: client: {co}{ce}\nserver: {so}{se}");
        assert!(co.contains("-D: every run lasts at least 300 ms"), "{co}");
        let rows: Vec<&str> = co.lines().filter(|l| l.trim_start().starts_with("4096 ")).collect();
        assert!(
            !rows.is_empty() && rows.len() == cmd_backends(&co),
            "a row per backend: {co}"
        );
        for r in &rows {
            let ms: f64 = r.split_whitespace().nth(3).unwrap().parse().unwrap();
            assert!(ms >= 300.0, "a run shorter than -D 0.3: {r}");
        }
    }
    // --run-infinitely: stopped on the client, then on the server
    for (i, stop_client) in [(11, true), (12, false)] {
        let p = port(i);
        let json = std::env::temp_dir().join(format!("rdmaprobe-ri-{}-{i}.json", std::process::id()));
        let js = json.to_str().unwrap().to_string();
        let mut sa = vec!["bw", "--run-infinitely", "-D", "0.2"];
        sa.extend_from_slice(&["write", "-s", "4096", "-d", "model0", "-p", &p, "--oob-timeout", "20"]);
        let mut ca = sa.clone();
        ca.extend_from_slice(&["--json", &js, "127.0.0.1"]);
        let srv = spawn(&sa);
        let cli = spawn(&ca);
        std::thread::sleep(Duration::from_secs(3));
        let pid = if stop_client { cli.id() } else { srv.id() };
        // SAFETY: kill(2) on a child this test spawned and has not waited for.
        unsafe { libc::kill(pid as i32, libc::SIGINT) };
        let (cc, co, ce) = finish(cli);
        let (sc, so, se) = finish(srv);
        let who = if stop_client { "client" } else { "server" };
        assert_eq!(
            (cc, sc),
            (0, 0),
            "stopped on the {who}: client: {co}{ce}\nserver: {so}{se}"
        );
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let runs = v["runs"].as_array().unwrap();
        let printed = co.lines().filter(|l| l.trim_start().starts_with("4096 ")).count();
        assert_eq!(runs.len(), printed, "every round's row in the JSON: {co}");
        // at least the first round on every backend, each run at least D
        assert!(printed >= cmd_backends(&co), "{co}");
        for r in runs {
            let ms = r["summary"]["seconds"].as_f64().unwrap() * 1e3;
            assert!(ms >= 200.0, "a round shorter than -D 0.2: {r}");
        }
        std::fs::remove_file(&json).ok();
    }
}

/// The backends a client's header names ("backends verbs, wr, direct" is not in bw's header:
/// count the distinct backend column of its rows).
fn cmd_backends(out: &str) -> usize {
    let mut b: Vec<&str> = out
        .lines()
        .filter(|l| l.trim_start().starts_with("4096 "))
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    b.sort();
    b.dedup();
    b.len()
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Runs `sh -c script` as another local user (uid and gid 65534, `nobody`), as an attacker
/// would; needs root.
fn as_nobody(script: &str) {
    use std::os::unix::process::CommandExt;
    let s = Command::new("sh")
        .args(["-c", script])
        .uid(65534)
        .gid(65534)
        .status()
        .expect("sh as uid 65534");
    assert!(s.success(), "as uid 65534: {script}");
}

/// The mode (permission bits) and owner of `p`, not following a link.
fn mode_owner(p: &std::path::Path) -> (u32, u32) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(p).unwrap();
    (m.mode() & 0o7777, m.uid())
}

/// A short loopback `lat write` on model0 given `--diag dir` (a good run writes the bundle
/// too); its exit status and standard error.
fn run_with_diag(dir: &std::path::Path) -> (Option<i32>, String) {
    let o = bin()
        .args([
            "lat",
            "write",
            "--loopback",
            "-d",
            "model0",
            "--backend",
            "direct",
            "-n",
            "1000",
        ])
        .arg("--diag")
        .arg(dir)
        .output()
        .unwrap();
    (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// Checks a bundle directory: this user's, mode 0700, every file in it regular and 0600, a
/// README among them.
fn assert_private_bundle(dir: &std::path::Path) {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    assert_eq!(mode_owner(dir), (0o700, me), "{}", dir.display());
    let mut names = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        assert!(
            e.file_type().unwrap().is_file(),
            "{} is not a regular file",
            e.path().display()
        );
        assert_eq!(mode_owner(&e.path()), (0o600, me), "{}", e.path().display());
        names.push(e.file_name().to_string_lossy().into_owned());
    }
    for f in ["README.txt", "command.txt", "error.txt", "kernel_log.txt"] {
        assert!(names.iter().any(|n| n == f), "no {f} in {}: {names:?}", dir.display());
    }
    let readme = std::fs::read_to_string(dir.join("README.txt")).unwrap();
    assert!(
        readme.contains("kernel_log.txt") && readme.contains("owner"),
        "{readme}"
    );
}

/// The failure bundle against another local user (issue 30 points 1 and 2). Before: a failed
/// run's bundle went to `$TMPDIR/rdmaprobe-diag-<secs>-<pid>`, used when it already existed
/// (anyone's, any mode), its files written through the symlinks planted in it (root's files
/// replaced by the command line and the kernel log), 0755/0644; `--diag` took another user's
/// world-writable directory the same way. Now: the default bundle is a fresh directory of an
/// unpredictable name, 0700, files 0600 with a README; another user's `--diag` directory is
/// refused before the run (exit 2), nothing written. The other user's steps need root (CI).
#[test]
fn a_failed_runs_bundle_is_private_and_not_where_another_user_points() {
    use std::os::unix::fs::PermissionsExt;
    let _g = serial();
    let root = is_root();
    let t = std::env::temp_dir().join(format!("rdmaprobe-bundle-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&t);
    std::fs::create_dir(&t).unwrap();
    // a shared temporary directory, as /tmp
    std::fs::set_permissions(&t, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let secret = |n: &str| t.join(format!("secret-{n}"));
    for n in ["a", "b"] {
        std::fs::write(secret(n), b"root only\n").unwrap();
        std::fs::set_permissions(secret(n), std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let plant = |d: &std::path::Path| {
        format!(
            "mkdir -m 0777 {d} && ln -s {a} {d}/command.txt && ln -s {b} {d}/kernel_log.txt",
            d = d.display(),
            a = secret("a").display(),
            b = secret("b").display()
        )
    };
    let intact = || {
        for n in ["a", "b"] {
            assert_eq!(
                std::fs::read(secret(n)).unwrap(),
                b"root only\n",
                "secret-{n} was written"
            );
            assert_eq!(mode_owner(&secret(n)).0, 0o600);
        }
    };
    if root {
        // another user's world-writable directory given to --diag: refused before the run
        let trap = t.join("trap");
        as_nobody(&plant(&trap));
        let (code, e) = run_with_diag(&trap);
        assert_eq!(code, Some(2), "{e}");
        assert!(e.contains("--diag") && e.contains(&trap.display().to_string()), "{e}");
        assert!(e.contains("uid 65534"), "{e}");
        intact();
    } else {
        eprintln!(
            "a_failed_runs_bundle_is_private_and_not_where_another_user_points: another user's directories \
             NOT tried (not root: cannot act as uid 65534); the default bundle's privacy still checked"
        );
    }
    // a failed run (its server killed) without --diag, TMPDIR the shared directory; another
    // user has made the names it would have used, for the next 40 seconds
    let p = port(13);
    let common = [
        "-d",
        "model0",
        "--backend",
        "direct",
        "-n",
        "100000000",
        "-p",
        &p,
        "--oob-timeout",
        "20",
    ];
    let mut srv = spawn(&[&["lat", "write"][..], &common[..]].concat());
    let cli = bin()
        .args(
            [
                &["lat", "write", "127.0.0.1"][..],
                &common[..],
                &["--stall-secs", "2"][..],
            ]
            .concat(),
        )
        .env("TMPDIR", &t)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let predicted: Vec<_> = (now - 1..now + 40)
        .map(|s| t.join(format!("rdmaprobe-diag-{s}-{}", cli.id())))
        .collect();
    if root {
        let script: Vec<String> = predicted.iter().map(|d| plant(d)).collect();
        as_nobody(&script.join(" && "));
    }
    std::thread::sleep(Duration::from_millis(1500));
    srv.kill().expect("kill the server");
    let _ = srv.wait();
    let (c, _, e) = finish(cli);
    assert_eq!(c, 1, "{e}");
    let dir = e
        .split("(diagnostics: ")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| panic!("no bundle named: {e}"));
    assert_eq!(dir.parent(), Some(t.as_path()), "not under TMPDIR: {e}");
    assert!(!predicted.contains(&dir), "a predictable name: {}", dir.display());
    let name = dir.file_name().unwrap().to_string_lossy().into_owned();
    let suffix = name.strip_prefix("rdmaprobe-diag-").expect("rdmaprobe-diag-...");
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    assert!(
        !suffix.split_once('-').is_some_and(|(a, b)| digits(a) && digits(b)),
        "named by time and pid: {name}"
    );
    assert_private_bundle(&dir);
    intact();
    if root {
        // the attacker's directories hold their links alone
        for d in &predicted {
            let mut n: Vec<_> = std::fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name()).collect();
            n.sort();
            assert_eq!(n, ["command.txt", "kernel_log.txt"], "{}", d.display());
        }
    }
    std::fs::remove_dir_all(&t).ok();
}

/// A symlink planted in the user's own `--diag` directory is not followed (issue 30 point 1):
/// the link is replaced by the bundle's file, its target untouched (before: the target was
/// replaced by the command line); a second run into the same directory replaces its files; a
/// `--diag` directory that does not exist is made 0700 (before: 0755, files 0644).
#[test]
fn a_link_in_the_users_own_diag_directory_is_not_followed() {
    use std::os::unix::fs::PermissionsExt;
    let _g = serial();
    let t = std::env::temp_dir().join(format!("rdmaprobe-owndiag-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&t);
    std::fs::create_dir(&t).unwrap();
    let own = t.join("own");
    std::fs::create_dir(&own).unwrap();
    std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o700)).unwrap();
    let victim = t.join("victim");
    std::fs::write(&victim, b"precious\n").unwrap();
    std::os::unix::fs::symlink(&victim, own.join("command.txt")).unwrap();
    std::os::unix::fs::symlink(t.join("nowhere"), own.join("error.txt")).unwrap();
    let fresh = t.join("new/deeper");
    for d in [&own, &own, &fresh] {
        let (code, e) = run_with_diag(d);
        assert_eq!(code, Some(0), "{e}");
        assert!(e.contains(&format!("diagnostics written to {}", d.display())), "{e}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious\n", "the link was followed");
        assert!(!t.join("nowhere").exists(), "the dangling link was followed");
        let error = std::fs::read_to_string(d.join("error.txt")).unwrap();
        assert!(error.contains("no error"), "{error}");
        assert_private_bundle(d);
    }
    std::fs::remove_dir_all(&t).ok();
}

/// Issue 29 item 15: the QPs' numbers are shown, as perftest shows them. In one process the
/// header names both ends' QP numbers per backend and the JSON's `params.qps` has them; between
/// two processes each side prints its QPs' addresses and the peer's (QPN, PSN, LID, GID, RKey,
/// VAddr), and what one side calls local the other calls remote.
#[test]
fn qp_numbers_are_in_the_header_and_the_json() {
    let _g = serial();
    let dir = std::env::temp_dir().join(format!("rdmaprobe-qpn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let j = |n: &str| dir.join(n).to_string_lossy().into_owned();
    let o = bin()
        .args([
            "lat",
            "write",
            "--loopback",
            "-d",
            "model0",
            "-n",
            "200",
            "-s",
            "8",
            "--json",
            &j("l.json"),
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}{}", String::from_utf8_lossy(&o.stderr));
    let line = out
        .lines()
        .find(|l| l.starts_with(" QP numbers: "))
        .unwrap_or_else(|| panic!("{out}"));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(j("l.json")).unwrap()).unwrap();
    let qps = v["params"]["qps"].as_array().expect("params.qps");
    assert_eq!(qps.len(), 3, "{qps:?}");
    for q in qps {
        let n: Vec<u64> = q["qpns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        assert_eq!(n.len(), 2);
        assert_ne!(n[0], n[1]);
        let shown = format!("{}: {:#08x} <-> {:#08x}", q["backend"].as_str().unwrap(), n[0], n[1]);
        assert!(line.contains(&shown), "{shown} not in {line}");
    }

    let p = port(10);
    let common = ["-d", "model0", "-n", "200", "-s", "8", "-p", &p, "--oob-timeout", "20"];
    let mut sa = vec!["lat", "write", "--json"];
    let sj = j("s.json");
    sa.push(&sj);
    sa.extend(common);
    let srv = spawn(&sa);
    let mut ca = vec!["lat", "write", "127.0.0.1", "--json"];
    let cj = j("c.json");
    ca.push(&cj);
    ca.extend(common);
    let cli = spawn(&ca);
    let (cc, co, ce) = finish(cli);
    let (sc, so, se) = finish(srv);
    assert_eq!(cc, 0, "client: {co}{ce}");
    assert_eq!(sc, 0, "server: {so}{se}");
    let read = |f: &str| -> serde_json::Value { serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap() };
    let (c, s) = (read(&cj), read(&sj));
    let (cq, sq) = (
        c["params"]["qps"].as_array().unwrap(),
        s["params"]["qps"].as_array().unwrap(),
    );
    assert_eq!(cq.len(), 3, "{cq:?}");
    assert_eq!(sq.len(), 3, "{sq:?}");
    for (a, b) in cq.iter().zip(sq) {
        assert_eq!(a["backend"], b["backend"]);
        assert_eq!(a["local"], b["remote"], "client's local is the server's remote");
        assert_eq!(a["remote"], b["local"], "client's remote is the server's local");
        for (text, side) in [(&co, a), (&so, b)] {
            let qpn = side["local"]["qpn"].as_u64().unwrap();
            let backend = side["backend"].as_str().unwrap();
            let want = format!("QPN {qpn:#08x} ");
            assert!(
                text.lines()
                    .any(|l| l.starts_with(&format!("  local  address ({backend}):")) && l.contains(&want)),
                "{want} not in {text}"
            );
        }
    }
    assert!(co.contains("  remote address (verbs):  QPN "), "{co}");
    // model0's direct QPs have no PSN, LID or GID: said, not printed as zeros
    let d = cq.iter().find(|q| q["backend"] == "direct").unwrap();
    assert!(d["local"].get("psn").is_none(), "{d}");
    assert!(
        d["psn_lid_gid"]
            .as_str()
            .unwrap()
            .contains("model0's direct QPs have no PSN"),
        "{d}"
    );
    assert!(
        co.contains("(PSN, LID, GID: none: model0's direct QPs have no PSN, LID or GID)"),
        "{co}"
    );
    let v = cq.iter().find(|q| q["backend"] == "verbs").unwrap();
    assert!(v["local"]["psn"].is_u64() && v.get("psn_lid_gid").is_none(), "{v}");
    // the server's file says whose rows it holds, and compare will not take it for a measurement
    assert_eq!(c["params"]["role"], "client");
    assert_eq!(s["params"]["role"], "server");
    assert_eq!(s["params"]["rows_from"], "client");
    let o = bin().args(["compare", &sj, &cj]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("a latency server's file"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// `--anatomy` between two processes: the server's turnarounds come to the client after the run
/// and split every round trip (the JSON's `anatomy`: as many samples as round trips, turnaround
/// plus rest at the median no more than the round trip's p50 allows, the second table on both
/// ends); the NIC split too, the server's responders on its own map of the NIC clock (its map in
/// the JSON, no timestamp outside its window); one end without it is a disagreement named; READ
/// has no software turnaround (exit 2).
#[test]
fn the_anatomy_between_two_processes_carries_the_servers_turnarounds() {
    let _g = serial();
    let p = port(11);
    let dir = std::env::temp_dir().join(format!("rdmaprobe-anatomy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let json = dir.join("anatomy.json");
    let args = |extra: &[&'static str]| {
        let mut a = vec![
            "lat",
            "send",
            "-d",
            "model0",
            "-n",
            "3000",
            "-s",
            "64",
            "--oob-timeout",
            "20",
        ];
        a.extend(extra);
        a
    };
    let mut s_args = args(&["--anatomy"]);
    s_args.extend(["-p", &p]);
    let srv = spawn(&s_args);
    let mut c_args = args(&["--anatomy", "127.0.0.1", "--json"]);
    c_args.extend([json.to_str().expect("a UTF-8 path"), "-p", &p]);
    let (cc, co, ce) = finish(spawn(&c_args));
    let (sc, so, se) = finish(srv);
    assert_eq!((cc, sc), (0, 0), "client: {co}{ce}\nserver: {so}{se}");
    for out in [&co, &so] {
        assert!(out.contains("anatomy [ns], round trips (not halved)"), "{out}");
        assert!(out.contains("turn p50"), "{out}");
        assert!(out.contains("NIC split [ns]"), "{out}");
    }
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).expect("the JSON")).expect("JSON");
    assert_eq!(v["params"]["anatomy"], true);
    let runs = v["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 3, "verbs, wr, direct");
    for r in runs {
        let a = &r["anatomy"];
        let f = |k: &str, q: &str| a[k][q].as_f64().unwrap_or_else(|| panic!("{k}.{q} in {a}"));
        for k in ["round_trip_ns", "turnaround_ns", "rest_ns"] {
            assert_eq!(a[k]["count"], 3000, "{k}: {a}");
        }
        // each sample's round trip is its turnaround plus its rest; their medians can differ
        // from the sum by the quantisation only, never by more than the round trip
        assert!(f("turnaround_ns", "p50") > 0.0 && f("rest_ns", "p50") > 0.0, "{a}");
        assert!(f("turnaround_ns", "p50") < f("round_trip_ns", "p50"), "{a}");
        assert!(f("rest_ns", "p50") <= f("round_trip_ns", "p50"), "{a}");
        let n = &a["nic"];
        assert_eq!(n["poll_ns"]["count"], 3000, "{a}");
        assert_eq!(n["outside_window"], 0, "{a}");
        assert_eq!(n["server_map"]["stated_khz"], 156250, "{a}");
        assert!(
            n["server_map"]["rate_error_ppm"].as_f64().expect("ppm").abs() < 1000.0,
            "{a}"
        );
        assert!(n["server_error_ns"].as_f64().expect("its error") > 0.0, "{a}");
        // the one-way figure is half the round trip
        let lat = r["latency_ns"]["p50"].as_f64().expect("latency p50");
        assert!(
            (2.0 * lat - f("round_trip_ns", "p50")).abs() <= 0.02 * f("round_trip_ns", "p50"),
            "{r}"
        );
    }
    // one end with --anatomy, the other without: named before any figure
    let p2 = port(12);
    let srv = spawn(&[&args(&[])[..], &["-p", &p2]].concat());
    let (cc, _, ce) = finish(spawn(&[&args(&["--anatomy", "127.0.0.1"])[..], &["-p", &p2]].concat()));
    let (sc, _, _) = finish(srv);
    assert_eq!((cc, sc), (1, 1), "{ce}");
    assert!(ce.contains("disagree on anatomy"), "{ce}");
    // READ and atomics: the far NIC answers
    let (rc, _, re) = finish(spawn(&["lat", "read", "--loopback", "-d", "model0", "--anatomy"]));
    assert_eq!(rc, 2, "{re}");
    assert!(re.contains("no software turn to stamp"), "{re}");
    let _ = std::fs::remove_dir_all(&dir);
}
