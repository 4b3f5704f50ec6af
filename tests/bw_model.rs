//! The bandwidth scenario on model0: every operation completes exactly the messages asked for,
//! in one and two threads, with several QPs, postlists, completion moderation and both
//! directions; bad parameters are refused.

use rdmaprobe::backend::setup::{Dev, DEPTH};
use rdmaprobe::backend::{BackendKind, OpKind};
use rdmaprobe::clock::Calibration;
use rdmaprobe::mlx5::sq::DbMode;
use rdmaprobe::model::ModelConfig;
use rdmaprobe::scenario::bw::BwParams;
use rdmaprobe::scenario::runner::{run_bw, RunError};
use rdmaprobe::scenario::ScenarioError;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// The tests here measure (or load both CPUs): they run one at a time, or they would measure
/// each other.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

static NO_INTR: AtomicBool = AtomicBool::new(false);

fn p(op: OpKind, size: u32) -> BwParams {
    BwParams {
        unreliable: false,
        op,
        size,
        iters: 3000,
        tx_depth: 64,
        rx_depth: None,
        postlist: 1,
        cq_mod: 16,
        inline: false,
        bidirectional: false,
        stall: Duration::from_secs(10),
        window: Duration::from_micros(100),
        min_duration: Duration::ZERO,
        no_peak: false,
    }
}

/// One thread, one QP, a 64 KiB buffer, BlueFlame doorbells.
fn one(
    dev: &Dev,
    kind: BackendKind,
    prm: &BwParams,
    cal: &Calibration,
) -> Result<rdmaprobe::scenario::runner::BwResult, RunError> {
    run_bw(dev, kind, prm, 1, 1, 1 << 16, DbMode::Bf, cal, &NO_INTR)
}

fn model() -> Dev {
    Dev::open(Some("model0"), 1, None, ModelConfig::default()).unwrap().0
}

#[test]
fn every_operation_moves_exactly_what_was_asked() {
    let _g = serial();
    let dev = model();
    let cal = Calibration::run(100_000_000).unwrap();
    // every backend: direct, and libibverbs + libmlx5 (verbs, wr) through model0's uverbs device
    let cases = [
        (OpKind::Write, 4096, false),
        (OpKind::Write, 64, true),
        (OpKind::Send, 512, false),
        (OpKind::Read, 1024, false),
        (OpKind::FetchAdd, 8, false),
    ];
    // (where the kernel lists RDMA devices, libibverbs cannot reach model0: direct alone)
    let kinds: Vec<BackendKind> = [BackendKind::Direct, BackendKind::Verbs, BackendKind::Wr]
        .into_iter()
        .filter(|k| dev.supports(*k).is_ok())
        .collect();
    assert!(kinds.len() == 3 || rdmaprobe::uverbs::status().is_err(), "{kinds:?}");
    for (kind, (op, size, inline)) in kinds.into_iter().flat_map(|k| cases.map(|c| (k, c))) {
        let prm = BwParams { inline, ..p(op, size) };
        let r = run_bw(&dev, kind, &prm, 1, 2, 1 << 16, DbMode::Bf, &cal, &NO_INTR).unwrap();
        let s = r.summary.clone();
        assert_eq!(s.messages, 2 * 3000, "{kind:?} {op:?}");
        assert_eq!(s.bytes, 2 * 3000 * u64::from(size));
        assert!(s.seconds > 0.0 && s.msg_rate_mpps > 0.0);
        // the windows partition the run: the worst is never above the average, the best never
        // below; perftest's peak (two QPs here) does not apply
        assert!(
            s.bw_min_window_mib_s <= s.bw_avg_mib_s && s.bw_avg_mib_s <= s.bw_peak_window_mib_s,
            "{s:?}"
        );
        assert_eq!(s.bw_peak_perftest_mib_s, None);
        // the 100 us asked for, or the whole multiple of it that holds 16 completions
        assert!((s.window_requested_ms - 0.1).abs() < 0.001, "{s:?}");
        let m = s.window_ms / s.window_requested_ms;
        assert!(m >= 0.999 && (m - m.round()).abs() < 1e-6, "{s:?}");
        let avg_check = s.bytes as f64 / s.seconds / (1024.0 * 1024.0);
        assert!((avg_check - s.bw_avg_mib_s).abs() < 1e-6 * avg_check.max(1.0));
    }
}

#[test]
fn threads_postlists_moderation_and_both_directions() {
    let _g = serial();
    let dev = model();
    let cal = Calibration::run(100_000_000).unwrap();
    for (threads, qps, postlist, cq_mod, bidir) in [
        (2, 1, 1, 1, false),
        (2, 2, 8, 32, false),
        (1, 3, 32, 64, true),
        (2, 1, 4, 16, true),
    ] {
        let prm = BwParams {
            postlist,
            cq_mod,
            bidirectional: bidir,
            ..p(OpKind::Write, 256)
        };
        let r = run_bw(
            &dev,
            BackendKind::Direct,
            &prm,
            threads,
            qps,
            1 << 16,
            DbMode::Db,
            &cal,
            &NO_INTR,
        )
        .unwrap();
        let dirs = if bidir { 2 } else { 1 };
        assert_eq!(
            r.summary.messages,
            (threads * qps * dirs) as u64 * 3000,
            "{threads} {qps} {postlist} {cq_mod} {bidir}"
        );
        assert_eq!(
            (r.threads, r.qps_per_thread, r.postlist, r.cq_mod),
            (threads, qps, postlist, cq_mod)
        );
    }
    // SEND both ways, receives replenished on both ends
    let prm = BwParams {
        bidirectional: true,
        ..p(OpKind::Send, 128)
    };
    let r = one(&dev, BackendKind::Direct, &prm, &cal).unwrap();
    assert_eq!(r.summary.messages, 6000);
}

#[test]
fn bad_parameters_and_unsupported_backends_are_refused() {
    let _g = serial();
    let dev = model();
    let cal = Calibration::run(100_000_000).unwrap();
    let bad = BwParams {
        postlist: 65,
        tx_depth: 64,
        rx_depth: None,
        ..p(OpKind::Write, 64)
    };
    let e = one(&dev, BackendKind::Direct, &bad, &cal).unwrap_err();
    assert!(matches!(e, RunError::Scenario(ScenarioError::Invalid(_))), "{e}");
    let big = p(OpKind::Write, 1 << 16);
    let e = one(&dev, BackendKind::Direct, &big, &cal).unwrap_err();
    assert!(e.to_string().contains("exceeds the buffers"), "{e}");
    let _ = DEPTH;
}

/// Bandwidth as perftest users read it: perftest's peak for one QP in one direction (at or above
/// the average, which it bounds from above by definition: the whole run is one of its spans),
/// windows of the stated length partitioning the run (the worst at or below the average), and a
/// run shorter than the minimum duration sized up and repeated.
#[test]
fn peak_windows_and_minimum_duration() {
    let _g = serial();
    let dev = model();
    let cal = Calibration::run(100_000_000).unwrap();
    let prm = BwParams {
        iters: 2000,
        window: Duration::from_millis(1),
        min_duration: Duration::from_millis(50),
        ..p(OpKind::Write, 1024)
    };
    let r = one(&dev, BackendKind::Direct, &prm, &cal).unwrap();
    let s = &r.summary;
    assert!(
        s.seconds >= 0.05,
        "the run lasted {} s, under the 50 ms minimum",
        s.seconds
    );
    assert!(r.iters > 2000 && s.messages == r.iters, "{} {}", r.iters, s.messages);
    assert_eq!(r.min_duration_ms, 50.0);
    // about one window per millisecond (the last up to 1.5 windows)
    let n = s.window_mib_s.len() as f64;
    assert!(
        n >= (s.seconds * 1e3 / 1.5).floor() && n <= (s.seconds * 1e3).ceil(),
        "{n} windows in {} s",
        s.seconds
    );
    let peak = s.bw_peak_perftest_mib_s.expect("perftest's peak for one QP one way");
    assert!(peak >= s.bw_avg_mib_s * (1.0 - 1e-9), "{s:?}");
    assert!(
        s.bw_min_window_mib_s <= s.bw_avg_mib_s && s.bw_avg_mib_s <= s.bw_peak_window_mib_s,
        "{s:?}"
    );
    // both directions: no perftest peak (its definition is one stream)
    let prm = BwParams {
        bidirectional: true,
        ..prm
    };
    let r = one(&dev, BackendKind::Direct, &prm, &cal).unwrap();
    assert_eq!(r.summary.bw_peak_perftest_mib_s, None);
}
