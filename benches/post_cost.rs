//! Post cost of the direct mlx5 path next to a floor loop that performs only the same stores, in
//! one run, interleaved block by block so machine drift cancels out.
//!
//! The "device" here is plain memory (ring, doorbell record, a 512-byte register page): the
//! direct path's stores are the same as on a ConnectX, but the register is write-back memory
//! instead of write-combining MMIO, so absolute figures are not a NIC's; the ratio direct/floor
//! is the cost of the path's own logic (building, bounds, index bookkeeping). Run:
//! `cargo bench --bench post_cost`.

use rdmaprobe::clock::{self, Calibration};
use rdmaprobe::mlx5::barrier::{mmio_flush_writes, mmio_wc_start, udma_to_device_barrier};
use rdmaprobe::mlx5::seg::DataSeg;
use rdmaprobe::mlx5::sq::{DbMode, NoHook, Sq, SqConfig};
use rdmaprobe::mlx5::wqe::{Payload, Wqe};
use std::hint::black_box;
use std::ptr;

const WQE_CNT: u32 = 256;
const WQES_PER_BLOCK: u32 = 128;
const BLOCKS: usize = 2000;

#[repr(C, align(4096))]
struct Ring([u8; WQE_CNT as usize * 64]);
#[repr(C, align(64))]
struct Reg([u8; 512]);

#[derive(Clone, Copy)]
enum Case {
    SendInline8,
    Write64,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let cal = Calibration::run(200_000_000).expect("TSC calibration");
    println!(
        "TSC {:.3} MHz ({}), timed-region overhead median {} cycles; device: plain memory (see the file's header)",
        cal.hz / 1e6,
        cal.source.as_str(),
        cal.overhead.median_cycles
    );
    println!(
        "{:<14} {:<11} {:>8} {:>14} {:>10} {:>14} {:>7}",
        "case", "mode", "postlist", "direct cyc/WQE", "ns/WQE", "floor cyc/WQE", "ratio"
    );
    let payload = [0x5au8; 8];
    let src = [0u8; 64];
    let sge = [DataSeg::new(src.as_ptr() as u64, 0x1234, 64)];
    for case in [Case::SendInline8, Case::Write64] {
        for mode in [DbMode::Bf, DbMode::BfNoFence, DbMode::Db] {
            for postlist in [1u32, 8, 32] {
                let mut ring = Box::new(Ring([0; WQE_CNT as usize * 64]));
                let mut floor_ring = Box::new(Ring([0; WQE_CNT as usize * 64]));
                let mut reg = Box::new(Reg([0; 512]));
                let mut dbrec = [0u32; 2];
                let cfg = SqConfig {
                    buf: ring.0.as_mut_ptr(),
                    wqe_cnt: WQE_CNT,
                    stride: 64,
                    dbrec: dbrec.as_mut_ptr(),
                    bf_reg: reg.0.as_mut_ptr(),
                    bf_size: 256,
                    qpn: 0x42,
                    max_inline: 64,
                };
                // SAFETY: the boxes and dbrec outlive `sq` (dropped at the end of this scope).
                let mut sq = unsafe { Sq::new(cfg, mode, NoHook) }.expect("sq");
                let wqe = match case {
                    Case::SendInline8 => Wqe::send(Payload::Inline(&payload)),
                    Case::Write64 => Wqe::write(0x7f00_0000_0000, 0x99, Payload::Gather(&sge)),
                };
                // The floor's WQE image: the same 64 bytes the path writes.
                sq.post_and_ring(&wqe).expect("post");
                let image: [u8; 64] = ring.0[..64].try_into().expect("64 bytes");
                sq.retire(0);
                let batches = WQES_PER_BLOCK / postlist;
                let mut direct = Vec::with_capacity(BLOCKS);
                let mut floor = Vec::with_capacity(BLOCKS);
                let fb = floor_ring.0.as_mut_ptr();
                let rp = reg.0.as_mut_ptr();
                let mut fpi = 0u32;
                let mut bf_off = 0usize;
                for _ in 0..BLOCKS {
                    // direct path
                    let t0 = clock::start();
                    let mut last = 0;
                    for _ in 0..batches {
                        for _ in 0..postlist {
                            last = sq.post(black_box(&wqe)).expect("ring has room");
                        }
                        sq.ring();
                    }
                    let t1 = clock::stop();
                    sq.retire(last);
                    direct.push((t1 - t0) as f64 / WQES_PER_BLOCK as f64);
                    // floor: the same stores, nothing else
                    let t0 = clock::start();
                    for _ in 0..batches {
                        let mut slot = 0;
                        for _ in 0..postlist {
                            slot = (fpi & (WQE_CNT - 1)) as usize;
                            // SAFETY: slot < WQE_CNT: a 64-byte slot inside floor_ring.
                            unsafe { ptr::copy_nonoverlapping(black_box(image.as_ptr()), fb.add(slot * 64), 64) };
                            fpi = fpi.wrapping_add(1);
                        }
                        udma_to_device_barrier();
                        // SAFETY: dbrec is a live local array of two u32.
                        unsafe { ptr::write_volatile(dbrec.as_mut_ptr().add(1), (fpi & 0xffff).to_be()) };
                        mmio_wc_start();
                        let r = rp.wrapping_add(bf_off) as *mut u64;
                        if mode != DbMode::Db && postlist == 1 {
                            for q in 0..8 {
                                // SAFETY: the 64-byte chunk at bf_off is inside `reg`; the source
                                // is the slot just written.
                                unsafe {
                                    ptr::write_volatile(r.add(q), ptr::read((fb.add(slot * 64) as *const u64).add(q)))
                                };
                            }
                        } else {
                            // SAFETY: 8 bytes at bf_off inside `reg`; the source is the last slot.
                            unsafe { ptr::write_volatile(r, ptr::read(fb.add(slot * 64) as *const u64)) };
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
                let f = median(&mut floor);
                let name = match case {
                    Case::SendInline8 => "SEND 8B inl",
                    Case::Write64 => "WRITE 64B",
                };
                println!(
                    "{:<14} {:<11} {:>8} {:>14.1} {:>10.2} {:>14.1} {:>7.2}",
                    name,
                    mode.as_str(),
                    postlist,
                    d,
                    cal.to_ns(1) * d,
                    f,
                    d / f
                );
            }
        }
    }
}
