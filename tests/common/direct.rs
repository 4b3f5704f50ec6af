//! Operation checks for the direct path, shared by the model0 tests and the ConnectX tests: the
//! same WQEs, the same doorbells, the same CQE checks, whichever device is underneath.
#![allow(dead_code)]

use rdmaprobe::mlx5::cq::{cqe_op, Cq, Cqe, CqeError};
use rdmaprobe::mlx5::rq::Rq;
use rdmaprobe::mlx5::seg::{opcode, DataSeg};
use rdmaprobe::mlx5::sq::{RingHook, Sq};
use rdmaprobe::mlx5::wqe::{Payload, Wqe};
use std::time::{Duration, Instant};

/// A registered buffer as the direct path sees it (its address is a pointer in this process).
#[derive(Clone, Copy, Debug)]
pub struct Mem {
    pub addr: u64,
    pub lkey: u32,
    pub rkey: u32,
    pub len: usize,
}

impl Mem {
    pub fn read(&self, off: usize, out: &mut [u8]) {
        assert!(off + out.len() <= self.len);
        // SAFETY: in bounds of a registered buffer of this process.
        unsafe { std::ptr::copy_nonoverlapping((self.addr as *const u8).add(off), out.as_mut_ptr(), out.len()) };
    }
    pub fn write(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.len);
        // SAFETY: in bounds of a registered, writable buffer of this process.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), (self.addr as *mut u8).add(off), data.len()) };
    }
    pub fn sge(&self, off: usize, len: u32) -> [DataSeg; 1] {
        [DataSeg::new(self.addr + off as u64, self.lkey, len)]
    }
}

/// One end of a connected pair.
pub struct End<'a, H: RingHook> {
    pub sq: &'a mut Sq<H>,
    pub rq: &'a mut Rq<H>,
    pub cq: &'a mut Cq,
    pub mem: Mem,
}

pub fn next(cq: &mut Cq) -> Result<Cqe, CqeError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out = [Cqe::default(); 1];
    loop {
        if cq.poll(&mut out)? == 1 {
            return Ok(out[0]);
        }
        assert!(Instant::now() < deadline, "no CQE within 10 s");
    }
}

pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

/// SEND with two gather entries into a posted receive; SEND with immediate, inline.
pub fn send_recv<H: RingHook>(a: End<'_, H>, b: End<'_, H>) {
    let data = pattern(3000, 1);
    a.mem.write(0, &data);
    b.rq.post(&b.mem.sge(8192, 4096)).unwrap();
    b.rq.post(&b.mem.sge(16384, 64)).unwrap();
    b.rq.ring();
    let g = [
        DataSeg::new(a.mem.addr, a.mem.lkey, 1000),
        DataSeg::new(a.mem.addr + 1000, a.mem.lkey, 2000),
    ];
    let i = a.sq.post_and_ring(&Wqe::send(Payload::Gather(&g)).signaled()).unwrap();
    let c = next(a.cq).unwrap();
    assert_eq!((c.opcode, c.wqe_counter, c.qpn), (cqe_op::REQ, i, a.sq.qpn()));
    a.sq.retire(c.wqe_counter);
    let r = next(b.cq).unwrap();
    assert_eq!(
        (r.opcode, r.byte_cnt, r.wqe_counter, r.qpn),
        (cqe_op::RESP_SEND, 3000, 0, b.sq.qpn())
    );
    b.rq.retire(r.wqe_counter);
    let mut got = vec![0u8; 3000];
    b.mem.read(8192, &mut got);
    assert_eq!(got, data);
    a.sq.post_and_ring(&Wqe::send_imm(0xfeed_f00d, Payload::Inline(b"hello direct")).signaled())
        .unwrap();
    assert_eq!(next(a.cq).unwrap().opcode, cqe_op::REQ);
    let r = next(b.cq).unwrap();
    assert_eq!(
        (r.opcode, r.byte_cnt, u32::from_be(r.imm)),
        (cqe_op::RESP_SEND_IMM, 12, 0xfeed_f00d)
    );
    let mut got = [0u8; 12];
    b.mem.read(16384, &mut got);
    assert_eq!(&got, b"hello direct");
}

/// RDMA WRITE (silent at the responder), then an inline WRITE with immediate (consumes a receive).
pub fn write<H: RingHook>(a: End<'_, H>, b: End<'_, H>) {
    let data = pattern(5000, 9);
    a.mem.write(100, &data);
    let src = a.mem.sge(100, 5000);
    a.sq.post_and_ring(&Wqe::write(b.mem.addr + 3, b.mem.rkey, Payload::Gather(&src)).signaled())
        .unwrap();
    let c = next(a.cq).unwrap();
    a.sq.retire(c.wqe_counter);
    let mut out = [Cqe::default(); 1];
    assert_eq!(b.cq.poll(&mut out), Ok(0), "a plain WRITE is silent at the responder");
    let mut got = vec![0u8; 5000];
    b.mem.read(3, &mut got);
    assert_eq!(got, data);
    b.rq.post(&b.mem.sge(0, 0)).unwrap();
    b.rq.ring();
    let w = Wqe::write_imm(b.mem.addr + 40000, b.mem.rkey, 77, Payload::Inline(&data[..100])).signaled();
    a.sq.post_and_ring(&w).unwrap();
    next(a.cq).unwrap();
    let r = next(b.cq).unwrap();
    assert_eq!(
        (r.opcode, r.byte_cnt, u32::from_be(r.imm)),
        (cqe_op::RESP_WR_IMM, 100, 77)
    );
    let mut got = vec![0u8; 100];
    b.mem.read(40000, &mut got);
    assert_eq!(got, &data[..100]);
}

/// RDMA READ; fetch-and-add; compare-and-swap hit and miss; NOP. `big_endian`: the device's
/// atomics work on big-endian words (a ConnectX in its default mode, or model0 so configured),
/// else on host-order ones (what `IBV_ATOMIC_HCA` means on mlx5).
pub fn read_and_atomics<H: RingHook>(a: End<'_, H>, b: End<'_, H>, big_endian: bool) {
    let enc = |v: u64| if big_endian { v.to_be_bytes() } else { v.to_ne_bytes() };
    let dec = |w: [u8; 8]| {
        if big_endian {
            u64::from_be_bytes(w)
        } else {
            u64::from_ne_bytes(w)
        }
    };
    let data = pattern(4096, 5);
    b.mem.write(8192, &data);
    let s = a.mem.sge(0, 4096);
    a.sq.post_and_ring(&Wqe::read(b.mem.addr + 8192, b.mem.rkey, &s).signaled())
        .unwrap();
    assert_eq!(next(a.cq).unwrap().byte_cnt, 4096);
    let mut got = vec![0u8; 4096];
    a.mem.read(0, &mut got);
    assert_eq!(got, data);
    b.mem.write(64, &enc(1000));
    let res = a.mem.sge(5000, 8);
    a.sq.post_and_ring(&Wqe::atomic_fa(b.mem.addr + 64, b.mem.rkey, 7, &res).signaled())
        .unwrap();
    next(a.cq).unwrap();
    let mut w = [0u8; 8];
    a.mem.read(5000, &mut w);
    assert_eq!(dec(w), 1000);
    b.mem.read(64, &mut w);
    assert_eq!(dec(w), 1007);
    for (compare, expect_old, expect_now) in [(1007u64, 1007u64, 5u64), (1007, 5, 5)] {
        let wqe = Wqe::atomic_cs(b.mem.addr + 64, b.mem.rkey, compare, 5, &res).signaled();
        a.sq.post_and_ring(&wqe).unwrap();
        next(a.cq).unwrap();
        a.mem.read(5000, &mut w);
        assert_eq!(dec(w), expect_old);
        b.mem.read(64, &mut w);
        assert_eq!(dec(w), expect_now);
    }
    let i = a.sq.post_and_ring(&Wqe::nop().signaled()).unwrap();
    assert_eq!(next(a.cq).unwrap().wqe_counter, i);
}

/// A WRITE with a wrong rkey: REMOTE_ACCESS error CQE with the WQE's index and opcode.
pub fn bad_rkey<H: RingHook>(a: End<'_, H>, b: End<'_, H>) {
    let s = a.mem.sge(0, 64);
    let i =
        a.sq.post_and_ring(&Wqe::write(b.mem.addr, b.mem.rkey ^ 0x5a5a, Payload::Gather(&s)))
            .unwrap();
    let e = next(a.cq).unwrap_err();
    assert_eq!(
        (e.syndrome, e.wqe_counter, e.qpn, e.responder),
        (0x13, i, a.sq.qpn(), false)
    );
    assert_eq!(e.wqe_opcode, opcode::RDMA_WRITE);
    assert!(e.to_string().contains("REMOTE_ACCESS_ERR"), "{e}");
}
