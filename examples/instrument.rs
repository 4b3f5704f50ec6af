//! Instruments a program's own verbs code with rdmaprobe's clock and histogram: the program
//! builds its own `ibv_send_wr` and calls `ibv_post_send` itself; rdmaprobe only timestamps
//! the call (`clock::start`/`clock::stop`, the TSC with its fences), converts with the
//! calibrated rate, takes the timer's own overhead off, and keeps the samples in an
//! HdrHistogram (`report::Hist`).
//!
//! `cargo run --release --example instrument [DEVICE]` (default model0, reached through the
//! machine's libibverbs and libmlx5): two RC QPs connected to each other, 8-byte inline RDMA
//! WRITEs, one at a time; prints the post call's percentiles.

use rdmaprobe::clock::{self, Calibration};
use rdmaprobe::report::Hist;
use rdmaprobe::sys;
use rdmaprobe::verbs::{ConnectOpts, Context, Cq, Mr, MrAccess, Pd, Qp, QpCaps};

const POSTS: usize = 20_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cal = Calibration::run(200_000_000)?;
    let ctx = match std::env::args().nth(1) {
        Some(name) if name != "model0" => Context::open(&name)?,
        _ => Context::open_model0()?,
    };
    let port = ctx.query_port(1)?;
    let pd = Pd::new(&ctx)?;
    let cq = Cq::new(&ctx, 256)?;
    let caps = QpCaps {
        max_inline_data: 64,
        ..QpCaps::default()
    };
    let mut a = Qp::new_rc(&pd, &cq, &cq, caps, false)?;
    let mut b = Qp::new_rc(&pd, &cq, &cq, caps, false)?;
    let access = MrAccess(MrAccess::LOCAL_WRITE.0 | MrAccess::REMOTE_WRITE.0);
    let mr = Mr::new(&pd, 4096, access, false)?;
    let (ea, eb) = (a.endpoint(&port, None)?, b.endpoint(&port, None)?);
    let opts = ConnectOpts::default();
    a.connect(&port, &opts, &eb)?;
    b.connect(&port, &opts, &ea)?;

    // The program's own work request: 8 bytes from the first word of the buffer, written inline
    // to the second half of the buffer through QP b's side of the connection.
    let mut sge = sys::ibv_sge {
        addr: mr.addr(),
        length: 8,
        lkey: mr.lkey(),
    };
    let mut wr = sys::ibv_send_wr {
        sg_list: &mut sge,
        num_sge: 1,
        opcode: sys::IBV_WR_RDMA_WRITE,
        send_flags: sys::IBV_SEND_INLINE | sys::IBV_SEND_SIGNALED,
        ..Default::default()
    };
    wr.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
        remote_addr: mr.addr() + 2048,
        rkey: mr.rkey(),
    };

    let overhead = cal.overhead.median_cycles;
    let mut hist = Hist::new();
    let mut wc = [sys::ibv_wc::default(); 1];
    for i in 0..POSTS {
        wr.wr_id = i as u64;
        let mut bad: *mut sys::ibv_send_wr = std::ptr::null_mut();
        let t0 = clock::start();
        // SAFETY: a live, connected QP; `wr` and `sge` live across the call; the SGE points into
        // a live MR (8 bytes of its 4096).
        let rc = unsafe { sys::inline::post_send(a.as_ptr(), &mut wr, &mut bad) };
        let t1 = clock::stop();
        if rc != 0 {
            return Err(format!("ibv_post_send failed: {}", std::io::Error::from_raw_os_error(rc)).into());
        }
        hist.record(cal.to_ns(t1.wrapping_sub(t0).saturating_sub(overhead)));
        // one at a time: wait for this WRITE's completion (polling also lets model0 execute it)
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while cq.poll_raw(&mut wc)? == 0 {
            if std::time::Instant::now() > deadline {
                return Err(format!("no completion for WRITE {i} within 5 s").into());
            }
        }
        if wc[0].status != sys::IBV_WC_SUCCESS {
            return Err(format!("WRITE {i} completed with status {}", wc[0].status).into());
        }
    }
    println!(
        "ibv_post_send on {} ({} posts, 8 B inline RDMA WRITE), timer overhead {:.1} ns taken off:",
        ctx.name(),
        POSTS,
        cal.overhead_ns()
    );
    // a single call is resolved only to the counter's step (tens of ns under some hypervisors)
    println!(
        "  (the TSC advances in steps of {:.1} ns here: single calls are resolved to that grid)",
        cal.to_ns(clock::tsc_step_ticks())
    );
    for (name, q) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999)] {
        println!("  {name:>6}: {:>8.1} ns", hist.value_at_quantile(q) as f64);
    }
    Ok(())
}
