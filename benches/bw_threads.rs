//! `bw write` on model0 with one thread and with two (each its own QP, CQ and buffers, pinned),
//! alternating, in one run: the message-rate ratio shows how the direct path and the model
//! scale across cores. Run: `cargo bench --bench bw_threads`.

use rdmaprobe::backend::setup::Dev;
use rdmaprobe::backend::{BackendKind, OpKind};
use rdmaprobe::clock::Calibration;
use rdmaprobe::mlx5::sq::DbMode;
use rdmaprobe::model::ModelConfig;
use rdmaprobe::scenario::bw::BwParams;
use rdmaprobe::scenario::runner::run_bw;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

fn main() {
    let cal = Calibration::run(200_000_000).expect("calibration");
    let dev = Dev::open(Some("model0"), 1, None, ModelConfig::default())
        .expect("model0")
        .0;
    let intr = AtomicBool::new(false);
    let p = BwParams {
        op: OpKind::Write,
        size: 64,
        iters: 1_000_000,
        tx_depth: 128,
        rx_depth: None,
        postlist: 1,
        cq_mod: 64,
        inline: true,
        bidirectional: false,
        stall: Duration::from_secs(30),
        window: Duration::from_millis(1),
        min_duration: Duration::ZERO,
        no_peak: false,
        unreliable: false,
    };
    let (mut one, mut two) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        for (threads, v) in [(1usize, &mut one), (2, &mut two)] {
            let r = run_bw(
                &dev,
                BackendKind::Direct,
                &p,
                threads,
                1,
                1 << 16,
                DbMode::Bf,
                &cal,
                &intr,
            )
            .expect("bw");
            v.push(r.summary.msg_rate_mpps);
        }
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let (a, b) = (med(&mut one), med(&mut two));
    println!("device: model0 (software model); WRITE 64 B inline, tx depth 128, CQE every 64; median of 5 runs each");
    println!("1 thread : {a:8.2} Mpps");
    println!("2 threads: {b:8.2} Mpps");
    println!("ratio 2/1: {:.2}  (target >= 1.7)", b / a);
}
