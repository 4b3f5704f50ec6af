//! `lat write -s 8` on model0 (direct backend, loopback) next to a plain two-thread cache-line
//! ping-pong, in one run and on the same two pinned CPUs, blocks alternating: the ratio of the
//! round-trip medians is what the probe's own machinery (WQE, doorbell, model, polling) costs
//! over the floor of moving one line between two cores. Run: `cargo bench --bench lat_pingpong`.

use rdmaprobe::backend::setup::model_pair;
use rdmaprobe::backend::OpKind;
use rdmaprobe::clock::{self, Calibration};
use rdmaprobe::mlx5::sq::DbMode;
use rdmaprobe::model::{Model, ModelConfig};
use rdmaprobe::report::percentile;
use rdmaprobe::scenario::lat::{self, pin, LatParams, PingState};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

#[repr(align(128))]
struct Line(AtomicU64);

/// Round trips (ticks) of a plain ping-pong of one cache line between two pinned threads.
fn plain(n: u64) -> Vec<u64> {
    let line = Line(AtomicU64::new(0));
    let mut out = Vec::with_capacity(n as usize);
    std::thread::scope(|s| {
        let l = &line;
        s.spawn(move || {
            pin(1);
            for i in 0..n {
                while l.0.load(Ordering::Acquire) != 2 * i + 1 {}
                l.0.store(2 * i + 2, Ordering::Release);
            }
        });
        pin(0);
        for i in 0..n {
            let t0 = clock::start();
            line.0.store(2 * i + 1, Ordering::Release);
            while line.0.load(Ordering::Acquire) != 2 * i + 2 {}
            out.push(clock::stop() - t0);
        }
    });
    out
}

fn main() {
    let cal = Calibration::run(200_000_000).expect("calibration");
    let m = Model::open(ModelConfig::default()).expect("model0");
    let (mut c, mut s) = model_pair(&m, OpKind::Write, 1 << 16, DbMode::Bf).expect("pair");
    let p = LatParams {
        op: OpKind::Write,
        size: 8,
        iters: 0,
        warmup: 0,
        inline: true,
        stall: Duration::from_secs(10),
        anatomy: false,
    };
    let intr = AtomicBool::new(false);
    let mut st = PingState::default();
    lat::run(&mut c, &mut s, &p, 20_000, 0, &mut st, &intr).expect("warm-up");
    plain(20_000);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..20 {
        a.extend(plain(10_000).into_iter().map(|t| cal.to_ns(t)));
        b.extend(
            lat::run(&mut c, &mut s, &p, 10_000, 0, &mut st, &intr)
                .expect("lat")
                .rtt
                .into_iter()
                .map(|t| cal.to_ns(t)),
        );
    }
    a.sort_by(|x, y| x.total_cmp(y));
    b.sort_by(|x, y| x.total_cmp(y));
    let (pa, pb) = (percentile(&a, 0.5), percentile(&b, 0.5));
    println!(
        "device: model0 (software model); TSC {:.3} MHz; 200000 round trips each, 20 alternating blocks",
        cal.hz / 1e6
    );
    println!(
        "plain cache-line ping-pong   round trip p50 {pa:8.1} ns  p99 {:8.1} ns",
        percentile(&a, 0.99)
    );
    println!(
        "lat write -s 8 (direct, inl) round trip p50 {pb:8.1} ns  p99 {:8.1} ns",
        percentile(&b, 0.99)
    );
    println!("ratio lat/plain (p50): {:.2}  (target <= 1.75)", pb / pa);
}
