//! Post cost of the direct mlx5 path on model0, next to a floor loop that performs only the same
//! stores (the WQE copy into the ring, the doorbell record, the fences, the BlueFlame copy or the
//! 8-byte doorbell), in one run, interleaved block by block so machine drift cancels out.
//!
//! The device is model0 in deferred mode: the model executes the WQEs between timed blocks, so the
//! timed region holds the post path alone. Its ring, doorbell record and register page are shared
//! memory (write-back), not a NIC's write-combining MMIO, so absolute figures are not a NIC's; the
//! ratio direct/floor is the cost of the path's own logic (index, flags, checks, bookkeeping). Run:
//! `cargo bench --bench post_cost`.

use rdmaprobe::clock::{self, Calibration};
use rdmaprobe::mlx5::barrier::{mmio_flush_writes, mmio_wc_start, udma_to_device_barrier};
use rdmaprobe::mlx5::cq::Cqe;
use rdmaprobe::mlx5::seg::DataSeg;
use rdmaprobe::mlx5::sq::{DbMode, Prepared};
use rdmaprobe::mlx5::wqe::{Payload, Wqe};
use rdmaprobe::model::{DirectModelQp, ExecMode, Model, ModelConfig, ModelConnect, ModelQpCaps};
use rdmaprobe::sys;
use std::hint::black_box;
use std::ptr;

const WQE_CNT: u32 = 256;
const WQES_PER_BLOCK: u32 = 128;
const BLOCKS: usize = 2000;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let cal = Calibration::run(200_000_000).expect("TSC calibration");
    let model = Model::open(ModelConfig {
        exec: ExecMode::Deferred,
        ..Default::default()
    })
    .expect("model0");
    let pd = model.alloc_pd();
    let access = sys::IBV_ACCESS_LOCAL_WRITE | sys::IBV_ACCESS_REMOTE_WRITE;
    let src = model.reg_mr(pd, 4096, access).expect("mr");
    let dst = model.reg_mr(pd, 4096, access).expect("mr");
    println!(
        "device: model0 (software model, deferred execution); TSC {:.3} MHz ({}); timed-region overhead median {} cycles",
        cal.hz / 1e6,
        cal.source.as_str(),
        cal.overhead.median_cycles
    );
    println!(
        "{:<12} {:<11} {:>8} {:>15} {:>8} {:>14} {:>6}",
        "case", "mode", "postlist", "direct cyc/WQE", "ns/WQE", "floor cyc/WQE", "ratio"
    );
    let payload = [0x5au8; 8];
    let sge = [DataSeg::new(src.addr(), src.lkey(), 64)];
    let caps = ModelQpCaps {
        max_send_wr: WQE_CNT,
        max_recv_wr: 2 * WQES_PER_BLOCK,
        ..Default::default()
    };
    let rsge = [DataSeg::new(dst.addr(), dst.lkey(), 64)];
    for (name, inline) in [("SEND 8B inl", true), ("WRITE 64B", false)] {
        for mode in [DbMode::Bf, DbMode::BfNoFence, DbMode::Db] {
            for postlist in [1u32, 8, 32] {
                let mut a = DirectModelQp::new(&model, pd, caps, 1024, mode).expect("qp");
                let mut b = DirectModelQp::new(&model, pd, caps, 1024, mode).expect("qp");
                let floor_qp = model
                    .create_qp(
                        pd,
                        &model.create_cq(16).expect("cq"),
                        &model.create_cq(16).expect("cq"),
                        caps,
                    )
                    .expect("qp");
                a.qp.connect(b.qp.qpn(), ModelConnect::default());
                b.qp.connect(a.qp.qpn(), ModelConnect::default());
                let wqe = if inline {
                    Wqe::send(Payload::Inline(&payload))
                } else {
                    Wqe::write(dst.addr(), dst.rkey(), Payload::Gather(&sge))
                };
                let last = Wqe::nop().signaled();
                // The direct path posts the WQE prepared once (as the verbs backends reuse their
                // prepared work requests); `post(&Wqe)`, building each time, is in the tests.
                let prepared = Prepared::new(&wqe, a.qp.qpn(), 220).expect("prepared WQE");
                // The floor's WQE image: the very bytes the path writes (taken from the ring).
                a.sq.post(&wqe).expect("post");
                let cfg = a.qp.sq_config();
                // SAFETY: the first WQEBB of the model QP's ring, just written.
                let image: [u8; 64] = unsafe { ptr::read(cfg.buf as *const [u8; 64]) };
                let f = floor_qp.sq_config();
                let (fb, frec, freg) = (f.buf, f.dbrec, f.bf_reg);
                let (mut fpi, mut bf_off) = (0u32, 0usize);
                // Receives for the SENDs of the next block (outside the timed region).
                let refill = |b: &mut DirectModelQp, n: u32| {
                    if inline {
                        let mut out = [Cqe::default(); 64];
                        while let Ok(k) = b.cq.poll(&mut out) {
                            if k == 0 {
                                break;
                            }
                            b.rq.retire(out[k - 1].wqe_counter);
                        }
                        for _ in 0..n {
                            b.rq.post(&rsge).expect("receive");
                        }
                        b.rq.ring();
                    }
                };
                let drain = |a: &mut DirectModelQp| {
                    a.qp.progress();
                    let mut out = [Cqe::default(); 8];
                    loop {
                        match a.cq.poll(&mut out) {
                            Ok(0) => {}
                            Ok(n) => {
                                a.sq.retire(out[n - 1].wqe_counter);
                                break;
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                };
                refill(&mut b, 2);
                a.sq.post_and_ring(&last).expect("post");
                drain(&mut a);
                let batches = WQES_PER_BLOCK / postlist;
                let mut direct = Vec::with_capacity(BLOCKS);
                let mut floor = Vec::with_capacity(BLOCKS);
                for _ in 0..BLOCKS {
                    refill(&mut b, WQES_PER_BLOCK);
                    let t0 = clock::start();
                    for _ in 0..batches {
                        for _ in 0..postlist {
                            if a.sq.post_prepared(black_box(&prepared), false).is_err() {
                                panic!("ring full");
                            }
                        }
                        a.sq.ring();
                    }
                    let t1 = clock::stop();
                    direct.push((t1 - t0) as f64 / WQES_PER_BLOCK as f64);
                    // A signalled NOP after the block retires it (outside the timed region).
                    a.sq.post_and_ring(&last).expect("post");
                    drain(&mut a);

                    let t0 = clock::start();
                    for _ in 0..batches {
                        let mut slot = 0;
                        for _ in 0..postlist {
                            slot = (fpi & (WQE_CNT - 1)) as usize;
                            // SAFETY: slot < WQE_CNT: a 64-byte slot inside the floor QP's ring.
                            unsafe { ptr::copy_nonoverlapping(black_box(image.as_ptr()), fb.add(slot * 64), 64) };
                            fpi = fpi.wrapping_add(1);
                        }
                        udma_to_device_barrier();
                        // SAFETY: the floor QP's doorbell record (two u32s).
                        unsafe { ptr::write_volatile(frec.add(1), (fpi & 0xffff).to_be()) };
                        mmio_wc_start();
                        let r = freg.wrapping_add(bf_off) as *mut u64;
                        let src = fb.wrapping_add(slot * 64) as *const u64;
                        if mode != DbMode::Db && postlist == 1 {
                            for q in 0..8 {
                                // SAFETY: a 64-byte chunk of the register page at bf_off; the
                                // source is the slot just written.
                                unsafe { ptr::write_volatile(r.add(q), ptr::read(src.add(q))) };
                            }
                        } else {
                            // SAFETY: 8 bytes of the register page; the source is the last slot.
                            unsafe { ptr::write_volatile(r, ptr::read(src)) };
                        }
                        if mode != DbMode::BfNoFence {
                            mmio_flush_writes();
                        }
                        bf_off ^= 256;
                    }
                    let t1 = clock::stop();
                    floor.push((t1 - t0) as f64 / WQES_PER_BLOCK as f64);
                }
                let d = median(&mut direct);
                let fl = median(&mut floor);
                println!(
                    "{:<12} {:<11} {:>8} {:>15.1} {:>8.2} {:>14.1} {:>6.2}",
                    name,
                    mode.as_str(),
                    postlist,
                    d,
                    cal.to_ns(1) * d,
                    fl,
                    d / fl
                );
            }
        }
    }
}
