//! The latency scenario on model0: every operation, the accuracy of the figures against the
//! model's wire delay, and the ways a run must stop cleanly (completion error mid-run, SIGINT,
//! bad parameters).

use rdmaprobe::backend::setup::model_pair;
use rdmaprobe::backend::{Backend, BackendError, BackendKind, MemView, OpKind, Polled};
use rdmaprobe::clock::Calibration;
use rdmaprobe::mlx5::sq::DbMode;
use rdmaprobe::model::{syndrome, ExecMode, Model, ModelConfig};
use rdmaprobe::report::Hist;
use rdmaprobe::scenario::lat::{self, LatParams, PingState};
use rdmaprobe::scenario::runner::{nic_anatomy, run_interleaved, AnyPair, LatPair, NicAnatomy};
use rdmaprobe::scenario::ScenarioError;
use rdmaprobe::verbs::nic_clock::NicClockMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

static NO_INTR: AtomicBool = AtomicBool::new(false);

/// The tests here measure time: they run one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn cal() -> &'static Calibration {
    static C: OnceLock<Calibration> = OnceLock::new();
    C.get_or_init(|| Calibration::run(200_000_000).expect("calibration"))
}

fn params(op: OpKind, size: u32, iters: u64) -> LatParams {
    LatParams {
        op,
        size,
        iters,
        warmup: 50,
        inline: false,
        stall: Duration::from_secs(10),
        anatomy: false,
    }
}

fn pair(delay_ns: u64, op: OpKind) -> AnyPair {
    let m = Model::open(ModelConfig {
        wire_delay_ns: Some(delay_ns),
        exec: ExecMode::AfterPost,
        ..Default::default()
    })
    .unwrap();
    AnyPair::Model(Box::new(model_pair(&m, op, 1 << 16, DbMode::Bf).unwrap()))
}

#[test]
fn every_operation_runs_and_keeps_every_sample() {
    let _g = serial();
    for (op, size, inline) in [
        (OpKind::Write, 64, true),
        (OpKind::Write, 4096, false),
        (OpKind::Send, 32, true),
        (OpKind::Read, 1024, false),
        (OpKind::FetchAdd, 8, false),
    ] {
        let mut pairs = vec![LatPair::new(rdmaprobe::backend::BackendKind::Direct, pair(0, op))];
        let p = LatParams {
            inline,
            ..params(op, size, 3000)
        };
        let r = run_interleaved(&mut pairs, &p, 5, cal(), &NO_INTR).unwrap();
        let r = &r[0];
        assert_eq!(r.iterations, 3000, "{op:?}");
        assert_eq!(r.latency.count, 3000);
        assert_eq!(r.block_medians_ns.len(), 5);
        assert!(r.latency.min > 0.0 && r.latency.min <= r.latency.p50 && r.latency.p50 <= r.latency.max);
        assert_eq!(r.figure, if lat::one_way(op) { "one_way" } else { "round_trip" });
        // the histogram holds every sample and agrees with the exact median to 3 digits
        let h = Hist::decode(&r.histogram).unwrap();
        assert_eq!(h.len(), 3000);
        let hp50 = h.value_at_quantile(0.5) as f64;
        assert!(
            (hp50 - r.latency.p50).abs() <= r.latency.p50 * 0.002 + 1.0,
            "{hp50} vs {}",
            r.latency.p50
        );
        // the post is part of the round trip
        assert!(r.post.p50 < r.latency.p50 * if lat::one_way(op) { 2.0 } else { 1.0 });
    }
}

/// Blocks with several settings of the model's wire delay, in turn on the same pair (so they
/// differ in nothing else); returns the interquantile mean (25-75 %) of the figure for each.
fn alternate(op: OpKind, delays: &[u64], both_ends: bool) -> Vec<f64> {
    // as the CLI runs it: the model executes after the post call
    let m = Model::open(ModelConfig {
        wire_delay_ns: None,
        exec: ExecMode::AfterPost,
        ..Default::default()
    })
    .unwrap();
    let (mut c, mut s) = model_pair(&m, op, 1 << 16, DbMode::Bf).unwrap();
    let p = LatParams {
        inline: op == OpKind::Write,
        ..params(op, 8, 1000)
    };
    let half = if lat::one_way(op) { 2.0 } else { 1.0 };
    let mut st = PingState::default();
    lat::run(&mut c, &mut s, &p, 2000, 0, &mut st, &NO_INTR).unwrap(); // warm-up
    let mut hists: Vec<Hist> = delays.iter().map(|_| Hist::new()).collect();
    for block in 0..30 * delays.len() {
        let i = block % delays.len();
        let d = delays[i];
        c.queues().qp.set_wire_delay(d);
        s.queues().qp.set_wire_delay(if both_ends { d } else { 0 });
        let r = lat::run(&mut c, &mut s, &p, 1000, 0, &mut st, &NO_INTR).unwrap();
        r.rtt.iter().for_each(|&t| hists[i].record(cal().to_ns(t) / half));
    }
    // The central half of the samples: the TSC of these VMs moves in 10 ns steps, so a single
    // percentile is too coarse for 2 % of 500 ns; their mean is not.
    hists.iter().map(|h| h.trimmed_mean(0.25, 0.75)).collect()
}

/// The harness measures an added delay exactly. The model's wire delay is set to 0, 500 ns, 5 us
/// and 50 us in turn, in blocks on the same pair (so the settings differ in nothing else), and:
/// - the step from 5 us to 50 us is measured as 45 us (READ: 90 us) within 2 % on the READ round
///   trip and within 5 % on the WRITE one-way figure: the slope, which a wrong tick rate (a
///   systematic one, a wrong rate source or unit, READ's 2 % catches: each process calibrates
///   its own), a lost or doubled leg or a dropped sample move (by the error itself, or by
///   50-100 %);
/// - the step from 0 to 500 ns is measured as 500 ns (READ: 1 us) within 25 %: a lost or doubled
///   leg moves it by 50-100 %.
///
/// on the WRITE one-way latency (half the round trip; the delay on both ends, so each leg carries
/// D) and on the RDMA READ round trip (the request travels D, the response D back, both waits in
/// the client's thread; the server passive). Every setting goes through the model's timed
/// doorbell path (`set_wire_delay(0)` times a zero wait), so they differ only in the wait (see
/// `wire_wait` in src/model).
///
/// What the host adds is kept out of the bounds, measured, not assumed:
/// - The rest of a WRITE round trip, the part that crosses between the two CPUs, costs more the
///   longer each end has waited: `rdmaprobe lat write --loopback -d model0 -s 8 -n 4000
///   --backend direct --model-delay-ns D` gave a one-way p50 minus D of 823, 880, 1022, 928,
///   1123, 1249, 1470 ns for D = 0, 2, 5, 10, 20, 50, 100 us, while each of the model's waits,
///   timed inside it, lasted D + 25-55 ns. Two bare threads in C passing a flag between the CPUs,
///   one spinning D ticks before it answers, show it too (round trip minus D up to 150 ticks more
///   at D = 10^4 ticks than at 0). So the WRITE steps come out 2-4.6 % long from 500 ns to 5 us
///   (CI: 4650 ns for 4500, six processes in a row; 2 % failed there) and 0.9-1.2 % long from
///   5 us to 50 us; READ's, with no crossing in its waits, 1-2 % and 0.2-0.3 %.
/// - Some processes on these shared VMs run in a slow state from start to end, where any
///   non-zero wait ends 10-25 ns late in every attempt (CI saw 500 ns measured as 511-550 ns): a
///   lateness per wait is not in the step between two non-zero delays, and it is well inside
///   25 % of 500 ns.
///
/// A miss is measured again with a fresh pair (3 times in a process), in up to 6 fresh processes
/// (this test runs itself again, `measure_one_wire_delay_figure`); a systematic error of the
/// harness misses every time and fails.
#[test]
fn wire_delay_is_measured_within_its_bounds() {
    let _g = serial();
    for (what, op) in [("WRITE one-way", "write"), ("READ round trip", "read")] {
        let mut tries = Vec::new();
        let ok = (0..6).any(|_| {
            let o = std::process::Command::new(std::env::current_exe().expect("test binary"))
                .args(["--exact", "measure_one_wire_delay_figure", "--ignored", "--nocapture"])
                .env("RDMAPROBE_WIRE_FIGURE", op)
                .output()
                .expect("run the test binary");
            let out = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
            let ok = out.contains("WIRE-FIGURE ok");
            tries.push(
                out.lines()
                    .filter(|l| l.contains(" step "))
                    .collect::<Vec<_>>()
                    .join("; "),
            );
            eprintln!("{what}: {}", tries.last().map(String::as_str).unwrap_or(""));
            ok
        });
        assert!(ok, "{what}, 6 processes: {tries:?}");
    }
}

/// One process's measurement for [`wire_delay_is_measured_within_its_bounds`]: the operation from
/// `RDMAPROBE_WIRE_FIGURE` (`write` or `read`), up to 3 fresh pairs; prints `WIRE-FIGURE ok` when
/// one measures both steps within their bounds.
#[test]
#[ignore = "run by wire_delay_is_measured_within_its_bounds in a fresh process"]
fn measure_one_wire_delay_figure() {
    let spec = std::env::var("RDMAPROBE_WIRE_FIGURE").unwrap_or_else(|_| "write".into());
    let op = if spec == "read" { OpKind::Read } else { OpKind::Write };
    // each message takes D each way: WRITE one-way +D, READ round trip +2D
    let legs = if op == OpKind::Read { 2.0 } else { 1.0 };
    // the slope's bound: READ's waits are both in the client's thread; WRITE's cross CPUs
    let slope_bound = if op == OpKind::Read { 0.02 } else { 0.05 };
    for _ in 0..3 {
        let f = alternate(op, &[0, 500, 5000, 50_000], op == OpKind::Write);
        let (offset, mid, slope) = (f[1] - f[0], f[2] - f[1], f[3] - f[2]);
        let off_err = (offset - 500.0 * legs).abs() / (500.0 * legs);
        let mid_err = (mid - 4500.0 * legs).abs() / (4500.0 * legs);
        let slope_err = (slope - 45_000.0 * legs).abs() / (45_000.0 * legs);
        println!(
            "{spec}: 0 / 500 / 5000 / 50000 ns measured {:.1} / {:.1} / {:.1} / {:.1}: \
             step 0-500 {offset:.1} ns ({:.2} % off, bound 25 %), step 500-5000 {mid:.1} ns ({:.2} % off, not bound), \
             step 5000-50000 {slope:.1} ns ({:.2} % off, bound {:.0} %)",
            f[0],
            f[1],
            f[2],
            f[3],
            off_err * 100.0,
            mid_err * 100.0,
            slope_err * 100.0,
            slope_bound * 100.0
        );
        if off_err <= 0.25 && slope_err <= slope_bound {
            println!("WIRE-FIGURE ok");
            return;
        }
    }
}

#[test]
fn a_completion_error_mid_run_stops_with_the_syndrome_and_the_operation() {
    let _g = serial();
    let m = Model::open(ModelConfig::default()).unwrap();
    let (mut c, mut s) = model_pair(&m, OpKind::Write, 1 << 16, DbMode::Bf).unwrap();
    // the client's 120th WQE fails
    c.queues().qp.inject_error(syndrome::REMOTE_ACCESS, 119);
    let e = lat::run(
        &mut c,
        &mut s,
        &params(OpKind::Write, 8, 1000),
        1000,
        0,
        &mut PingState::default(),
        &NO_INTR,
    )
    .unwrap_err();
    let msg = e.to_string();
    match e {
        ScenarioError::Backend { side, index, source } => {
            assert_eq!(side, "client");
            assert!((119..=120 + 32).contains(&index), "index {index}");
            assert!(source.to_string().contains("REMOTE_ACCESS_ERR"), "{source}");
        }
        other => panic!("unexpected: {other}"),
    }
    assert!(msg.contains("client failed at operation"), "{msg}");
}

#[test]
fn sigint_stops_a_run_cleanly() {
    let _g = serial();
    static INTR: AtomicBool = AtomicBool::new(false);
    let m = Model::open(ModelConfig::default()).unwrap();
    let (mut c, mut s) = model_pair(&m, OpKind::Write, 1 << 16, DbMode::Bf).unwrap();
    let t = std::thread::spawn(|| {
        std::thread::sleep(Duration::from_millis(200));
        INTR.store(true, Ordering::Relaxed);
    });
    let started = std::time::Instant::now();
    // far more iterations than 200 ms allow
    let e = lat::run(
        &mut c,
        &mut s,
        &params(OpKind::Write, 8, 1_000_000_000),
        1_000_000_000,
        0,
        &mut PingState::default(),
        &INTR,
    );
    t.join().unwrap();
    assert!(matches!(e, Err(ScenarioError::Interrupted)), "{e:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_peer_that_stops_answering_is_reported_not_waited_for_forever() {
    let _g = serial();
    let m = Model::open(ModelConfig::default()).unwrap();
    let (mut c, mut s) = model_pair(&m, OpKind::Send, 1 << 16, DbMode::Bf).unwrap();
    // the server's QP goes to error: its receives are flushed and it never answers
    s.queues().qp.set_error();
    let p = LatParams {
        stall: Duration::from_millis(300),
        ..params(OpKind::Send, 8, 100)
    };
    let started = std::time::Instant::now();
    let e = lat::run(&mut c, &mut s, &p, 100, 0, &mut PingState::default(), &NO_INTR).unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    let msg = e.to_string();
    assert!(
        msg.contains("failed at operation") || msg.contains("no progress"),
        "{msg}"
    );
}

#[test]
fn bad_parameters_are_refused() {
    let _g = serial();
    let m = Model::open(ModelConfig::default()).unwrap();
    let (mut c, mut s) = model_pair(&m, OpKind::Write, 1 << 16, DbMode::Bf).unwrap();
    let run =
        |c: &mut _, s: &mut _, p: LatParams, iters| lat::run(c, s, &p, iters, 0, &mut PingState::default(), &NO_INTR);
    assert!(matches!(
        run(&mut c, &mut s, params(OpKind::Write, 8, 0), 0),
        Err(ScenarioError::Invalid(_))
    ));
    assert!(matches!(
        run(&mut c, &mut s, params(OpKind::FetchAdd, 16, 1), 1),
        Err(ScenarioError::Invalid(_))
    ));
    // larger than the buffer halves
    let e = run(&mut c, &mut s, params(OpKind::Write, 1 << 16, 10), 10).unwrap_err();
    assert!(e.to_string().contains("exceeds the buffers"), "{e}");
    // inline above the QP's limit
    let p = LatParams {
        inline: true,
        ..params(OpKind::Write, 4096, 10)
    };
    let e = run(&mut c, &mut s, p, 10).unwrap_err();
    assert!(e.to_string().contains("inline"), "{e}");
}

/// Regression: a SEND ping-pong over many blocks (new server thread each block) used to stall at
/// the first operation of some block: the model unlocked a send queue with a plain store and
/// then read its wake-up counter, a load that could pass the store, so a doorbell rung by the
/// other thread in between was lost. It must now run through.
#[test]
fn send_ping_pong_over_many_blocks_never_loses_a_doorbell() {
    let _g = serial();
    let m = Model::open(ModelConfig::default()).unwrap();
    let (mut c, mut s) = model_pair(&m, OpKind::Send, 1 << 16, DbMode::Bf).unwrap();
    let p = LatParams {
        stall: Duration::from_secs(2),
        ..params(OpKind::Send, 16384, 500)
    };
    let mut st = PingState::default();
    for b in 0..60 {
        if let Err(e) = lat::run(&mut c, &mut s, &p, 500, if b == 0 { 100 } else { 0 }, &mut st, &NO_INTR) {
            eprintln!(
                "block {b}: {e}\nclient {}\nserver {}",
                c.queues().qp.debug_state(),
                s.queues().qp.debug_state()
            );
            let (sq, rq, _) = rdmaprobe::backend::direct::DirectQueues::parts(c.queues());
            eprintln!(
                "client app: sq pi {} ci {}, rq outstanding {}",
                sq.pi(),
                sq.ci(),
                rq.outstanding()
            );
            let (sq, rq, _) = rdmaprobe::backend::direct::DirectQueues::parts(s.queues());
            eprintln!(
                "server app: sq pi {} ci {}, rq outstanding {}",
                sq.pi(),
                sq.ci(),
                rq.outstanding()
            );
            panic!("stalled");
        }
    }
}

/// Regression (issue: a 1-4 ms stall at the start of every block): each block used to spawn a
/// new server thread from the pinned client thread; the new thread inherited the client's
/// one-CPU mask and could not run until the spinning client was preempted, and that wait was the
/// block's first sample. In a 100-block run the blocks' first samples must now look like the
/// others: before the fix 99 of 100 were above 1 ms (thousands of times the p50).
#[test]
fn blocks_start_without_a_stall() {
    let _g = serial();
    use rdmaprobe::scenario::runner::{run_blocks, Length};
    let mut pairs = vec![LatPair::new(
        rdmaprobe::backend::BackendKind::Direct,
        pair(0, OpKind::Write),
    )];
    let p = params(OpKind::Write, 8, 20_000);
    let mut firsts = Vec::new();
    let r = run_blocks(
        &mut pairs,
        &p,
        Length::Iterations {
            iters: 20_000,
            blocks: 100,
        },
        cal(),
        &NO_INTR,
        &mut |_, v, _, _| firsts.push(v[0]),
    )
    .unwrap();
    let l = &r[0].latency;
    assert_eq!(firsts.len(), 100);
    let slow: Vec<f64> = firsts.iter().copied().filter(|&f| f > 20.0 * l.p50).collect();
    eprintln!(
        "p50 {:.0} ns, p99 {:.0} ns, max {:.0} ns; blocks whose first sample > 20 x p50: {slow:?}",
        l.p50, l.p99, l.max
    );
    // noise on a shared 2-CPU host can preempt a few samples anywhere: allow a handful
    assert!(
        slow.len() <= 5,
        "{} of 100 blocks start with a stall: {slow:?}",
        slow.len()
    );
    assert!(l.p99 < 10.0 * l.p50, "p99 {} against p50 {}", l.p99, l.p50);
}

/// A block shorter than the signalling period used to leave every post unsignalled, so the send
/// queue filled after a few blocks ("send queue full"); every block now ends with a signalled
/// post and an empty send queue.
#[test]
fn blocks_shorter_than_the_signalling_period_run() {
    let _g = serial();
    for op in [OpKind::Write, OpKind::Send] {
        let mut pairs = vec![LatPair::new(rdmaprobe::backend::BackendKind::Direct, pair(0, op))];
        let r = run_interleaved(&mut pairs, &params(op, 8, 1000), 100, cal(), &NO_INTR).unwrap();
        assert_eq!(r[0].iterations, 1000, "{op:?}");
        assert_eq!(r[0].block_medians_ns.len(), 100);
        // one iteration per block
        let r = run_interleaved(&mut pairs, &params(op, 8, 300), 300, cal(), &NO_INTR).unwrap();
        assert_eq!(r[0].iterations, 300, "{op:?}");
    }
}

/// The sizes of `lat send -a` follow each other on one pair: the receives are posted once per
/// pair, not once per size (the 9th size used to stop with "receive queue full").
#[test]
fn send_over_many_sizes_keeps_the_receive_queue_bounded() {
    let _g = serial();
    let mut pairs = vec![LatPair::new(
        rdmaprobe::backend::BackendKind::Direct,
        pair(0, OpKind::Send),
    )];
    for e in 1..=15 {
        let r = run_interleaved(&mut pairs, &params(OpKind::Send, 1 << e, 100), 4, cal(), &NO_INTR)
            .unwrap_or_else(|err| panic!("size {}: {err}", 1 << e));
        assert_eq!(r[0].iterations, 100);
    }
}

/// A server whose posts take `spin_ns` more (a slow responder, made so on purpose): every
/// `every`-th post (1: each).
struct SlowPost<B> {
    inner: B,
    spin_ns: u64,
    every: u64,
    posts: u64,
}

impl<B: Backend> Backend for SlowPost<B> {
    fn kind(&self) -> BackendKind {
        self.inner.kind()
    }
    fn qpn(&self) -> u32 {
        self.inner.qpn()
    }
    fn post(&mut self, op: OpKind, len: u32, n: u32, inline: bool, signal_last: bool) -> Result<(), BackendError> {
        self.posts += 1;
        if self.spin_ns > 0 && self.posts % self.every == 0 {
            let until = std::time::Instant::now() + Duration::from_nanos(self.spin_ns);
            while std::time::Instant::now() < until {
                std::hint::spin_loop();
            }
        }
        self.inner.post(op, len, n, inline, signal_last)
    }
    fn post_recv(&mut self, len: u32, n: u32) -> Result<(), BackendError> {
        self.inner.post_recv(len, n)
    }
    fn poll(&mut self) -> Result<Polled, BackendError> {
        self.inner.poll()
    }
    fn after_post(&mut self) {
        self.inner.after_post()
    }
    fn mem(&self) -> &MemView {
        self.inner.mem()
    }
    fn max_inline(&self) -> u32 {
        self.inner.max_inline()
    }
    fn rx_offset(&self) -> usize {
        self.inner.rx_offset()
    }
}

/// model0's NIC clock now, as a reader for `NicClockMap::pairs`.
#[allow(clippy::result_large_err)]
fn model_clock() -> Result<u64, rdmaprobe::verbs::VerbsError> {
    Ok(rdmaprobe::model::clock::nic_clock())
}

/// The NIC split of the plain, wire-delayed and slow-server runs (`nic`): the wire delay D
/// moves the wire/NIC component by 2D and no host component (the client's post, the
/// responder, the client's polling); the slow server S moves the responder and neither the
/// wire nor the polling; no mapped timestamp lies outside its causal window. Bounds as the host
/// split's: within 25 % and +5 us of 2D or S, other moves under 5 us.
fn nic_split_moves(nic: &[NicAnatomy], d: u64, s: u64) {
    let (plain, wire, slow) = (&nic[0], &nic[1], &nic[2]);
    let show = format!("plain {plain:?}\nwire {wire:?}\nslow {slow:?}");
    let moved = |f: fn(&NicAnatomy) -> f64, x: &NicAnatomy| f(x) - f(plain);
    let within = |v: f64, want: f64| v >= 0.75 * want && v <= 1.25 * want + 5000.0;
    let [w, r, pl, po]: [fn(&NicAnatomy) -> f64; 4] = [
        |x| x.wire_ns.p50,
        |x| x.responder_ns.p50,
        |x| x.poll_ns.p50,
        |x| x.post_ns.p50,
    ];
    assert!(
        within(moved(w, wire), 2.0 * d as f64),
        "the wire's 2D in wire/NIC: {show}"
    );
    for (f, what) in [(r, "responder"), (pl, "poll"), (po, "post")] {
        assert!(moved(f, wire).abs() < 5000.0, "the wire not in the {what}: {show}");
    }
    assert!(
        within(moved(r, slow), s as f64),
        "the slow server in the responder: {show}"
    );
    for (f, what) in [(w, "wire"), (pl, "poll"), (po, "post")] {
        assert!(
            moved(f, slow).abs() < 5000.0,
            "the slow server not in the {what}: {show}"
        );
    }
    for n in nic {
        assert_eq!(n.outside_window, 0, "{n:?}");
        assert!(n.map.rate_error_ppm.abs() < 1000.0, "{n:?}");
    }
}

/// The map against the truth (point 4: "within the clock mapping's stated error"): every
/// completion timestamp of the samples `got` (both ends'), placed on the TSC by `map`, lies
/// within the map's stated error, half the span of the model's own read and one NIC tick of
/// the TSC the model read around its clock when it wrote that CQE (`stamps`, recorded by the
/// model). Returns the largest distance seen and the count checked.
fn map_holds_against_the_model(
    got: &[rdmaprobe::scenario::lat::LatSamples],
    map: &NicClockMap,
    stamps: &[(u64, u64, u64)],
) -> (f64, usize) {
    let truth: std::collections::HashMap<u64, (u64, u64)> =
        stamps.iter().map(|&(n, mid, span)| (n, (mid, span))).collect();
    let ns = |ticks: f64| ticks * 1e9 / cal().hz;
    let (mut worst, mut checked) = (0.0f64, 0);
    let mut offs = Vec::new();
    for g in got {
        for &ts in g.nic_reply.iter().chain(&g.nic_request) {
            let &(mid, span) = truth
                .get(&ts)
                .unwrap_or_else(|| panic!("timestamp {ts} was not one the model wrote"));
            let off = ns(map.tsc_since(ts, mid)).abs();
            let bound = map.error_ns() + ns(span as f64) / 2.0 + map.tick_ns();
            assert!(
                off <= bound,
                "timestamp {ts} mapped {off:.1} ns from the TSC of its stamp (bound {bound:.1} ns)"
            );
            worst = worst.max(off);
            offs.push((off, ns(span as f64)));
            checked += 1;
        }
    }
    assert!(!offs.is_empty(), "no timestamps to check");
    offs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let q = |f: f64| offs[((offs.len() - 1) as f64 * f) as usize];
    eprintln!(
        "the map's stated error {:.1} ns; mapped timestamps from their stamp's TSC: p50 {:.1} ns, p99 {:.1}, largest \
         {worst:.1} (its read {:.1} ns wide); beyond the stated error and a tick: {} of {checked}, each within half \
         its own read",
        map.error_ns(),
        q(0.5).0,
        q(0.99).0,
        q(1.0).1,
        offs.iter().filter(|o| o.0 > map.error_ns() + map.tick_ns()).count()
    );
    (worst, checked)
}

/// `--anatomy` splits each round trip where the time goes: on one pair, in interleaved blocks,
/// the model's wire delay D (each way) moves the rest by 2D and not the server's turnaround; a
/// server made slow by S a reply moves its turnaround by S and not the rest; each sample's
/// turnaround lies within its own round trip (never clipped); and with every 7th reply slowed,
/// those turnarounds are slow and each within its round trip (paired one iteration off, a slow
/// turnaround would meet a fast round trip). D and S are 20 us, far above this VM's
/// noise at the median (a few us at worst); the bounds are 2D or S within 25 % and +5 us, and
/// moves of the other component under 5 us.
#[test]
fn the_anatomy_puts_the_wire_in_the_rest_and_a_slow_server_in_its_turnaround() {
    use rdmaprobe::scenario::lat::LatSamples;
    use rdmaprobe::scenario::runner::Anatomy;
    let _g = serial();
    const D: u64 = 20_000;
    const S: u64 = 20_000;
    let m = Model::open(ModelConfig {
        wire_delay_ns: Some(0),
        exec: ExecMode::AfterPost,
        ..Default::default()
    })
    .unwrap();
    // both ends wrapped alike (a run takes one type): only the server's ever spins
    let (c, s) = model_pair(&m, OpKind::Send, 1 << 16, DbMode::Bf).unwrap();
    let slow = |inner| SlowPost {
        inner,
        spin_ns: 0,
        every: 1,
        posts: 0,
    };
    let (mut c, mut s) = (slow(c), slow(s));
    let p = LatParams {
        anatomy: true,
        inline: true,
        ..params(OpKind::Send, 8, 1000)
    };
    let mut st = PingState::default();
    let first = lat::run(&mut c, &mut s, &p, 500, 50, &mut st, &NO_INTR).unwrap();
    assert_eq!(first.turnaround.len(), first.rtt.len(), "one turnaround per round trip");
    // the NIC clock placed on the TSC over the run: pairs before and after
    let clock_pairs = || NicClockMap::pairs(&mut model_clock, Duration::from_millis(10), 11).unwrap();
    let mut pairs = clock_pairs();
    /// Stops the model's recording when the test ends, passed or not.
    struct Recording;
    impl Drop for Recording {
        fn drop(&mut self) {
            rdmaprobe::model::clock::record_stamps(false);
        }
    }
    rdmaprobe::model::clock::record_stamps(true);
    let recording = Recording;
    // plain, wire delay D, slow server S
    let settings = [(0, 0), (D, 0), (0, S)];
    let mut got: Vec<LatSamples> = settings.iter().map(|_| LatSamples::default()).collect();
    for block in 0..10 * settings.len() {
        let i = block % settings.len();
        let (d, spin) = settings[i];
        c.inner.queues().qp.set_wire_delay(d);
        s.inner.queues().qp.set_wire_delay(d);
        s.spin_ns = spin;
        got[i].extend(lat::run(&mut c, &mut s, &p, 200, 0, &mut st, &NO_INTR).unwrap());
    }
    let stamps = rdmaprobe::model::clock::recorded_stamps();
    drop(recording);
    pairs.extend(clock_pairs());
    let map = NicClockMap::fit(&pairs, cal().hz, rdmaprobe::model::clock::HCA_CORE_CLOCK_KHZ);
    let map_ok = map.as_ref().expect("a map");
    // the bound is the map's own stated error: it must be one worth the name (a map of mostly
    // interrupted reads could state microseconds and pass anything)
    assert!(map_ok.error_ns() < 1000.0, "{map_ok:?}");
    let (_, checked) = map_holds_against_the_model(&got, map_ok, &stamps);
    assert_eq!(checked, 2 * 3 * 2000, "both ends' timestamps of every sample");
    let nic: Vec<NicAnatomy> = got
        .iter()
        .map(|g| nic_anatomy(OpKind::Send, g, &map, cal()).expect("a NIC split"))
        .collect();
    let a: Vec<Anatomy> = got
        .iter()
        .map(|g| Anatomy::of(&g.rtt, &g.turnaround, cal()).unwrap().expect("an anatomy"))
        .collect();
    nic_split_moves(&nic, D, S);
    for x in &a {
        assert_eq!(x.round_trip_ns.count, 2000);
        assert_eq!(x.turnaround_over_round_trip, 0, "{x:?}");
    }
    let (plain, wire, slow) = (&a[0], &a[1], &a[2]);
    let moved = |f: fn(&Anatomy) -> f64, x: &Anatomy| f(x) - f(plain);
    let rest = |x: &Anatomy| x.rest_ns.p50;
    let turn = |x: &Anatomy| x.turnaround_ns.p50;
    let within = |v: f64, want: f64| v >= 0.75 * want && v <= 1.25 * want + 5000.0;
    let show = format!("plain {plain:?}\nwire {wire:?}\nslow {slow:?}");
    assert!(
        within(moved(rest, wire), 2.0 * D as f64),
        "the wire's 2D in the rest: {show}"
    );
    assert!(
        moved(turn, wire).abs() < 5000.0,
        "the wire not in the turnaround: {show}"
    );
    assert!(
        within(moved(turn, slow), S as f64),
        "the slow server in its turnaround: {show}"
    );
    assert!(
        moved(rest, slow).abs() < 5000.0,
        "the slow server not in the rest: {show}"
    );
    // every 7th reply slow, from the first post of a block (the warm-up's included)
    c.inner.queues().qp.set_wire_delay(0);
    s.inner.queues().qp.set_wire_delay(0);
    (s.spin_ns, s.every, s.posts) = (S, 7, 0);
    let g = lat::run(&mut c, &mut s, &p, 700, 0, &mut st, &NO_INTR).unwrap();
    // the slowed ones are slow (the spin guarantees it); another is slow only where the
    // server was descheduled in its few tens of ns between t2 and t3 (a few at most)
    let slow_ones: Vec<usize> = (0..g.turnaround.len())
        .filter(|&i| cal().to_ns(g.turnaround[i]) > S as f64 / 2.0)
        .collect();
    assert!(
        (0..700).filter(|i| i % 7 == 6).all(|i| slow_ones.contains(&i)),
        "{slow_ones:?}"
    );
    assert!(slow_ones.len() <= 100 + 3, "{slow_ones:?}");
    for &i in &slow_ones {
        assert!(
            g.rtt[i] >= g.turnaround[i],
            "sample {i}: {} < {}",
            g.rtt[i],
            g.turnaround[i]
        );
    }
}
