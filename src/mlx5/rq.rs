//! The receive queue: receive WQEs (scatter lists of data segments, terminated by an entry with
//! `MLX5_INVALID_LKEY` when shorter than the stride) and the receive doorbell record.

use super::barrier::udma_to_device_barrier;
use super::seg::{Be32, Be64, DataSeg};
use super::sq::{RingHook, SqError};
use crate::sys;
use core::ptr;

/// lkey marking the end of a short scatter list.
pub const INVALID_LKEY: u32 = sys::MLX5_INVALID_LKEY;

/// What a receive queue is made of.
#[derive(Clone, Copy, Debug)]
pub struct RqConfig {
    /// Ring start.
    pub buf: *mut u8,
    /// Number of receive WQEs (a power of two).
    pub wqe_cnt: u32,
    /// Bytes per receive WQE (16 x a power of two).
    pub stride: u32,
    /// The QP's doorbell record (`dbrec[0]` is the receive counter).
    pub dbrec: *mut u32,
    /// QP number.
    pub qpn: u32,
}

/// A receive queue driven directly.
pub struct Rq<H: RingHook> {
    cfg: RqConfig,
    head: u32,
    tail: u32,
    hook: H,
}

// SAFETY: owned by one poster; may move between threads.
unsafe impl<H: RingHook + Send> Send for Rq<H> {}

impl<H: RingHook> Rq<H> {
    /// Validates and builds.
    ///
    /// # Safety
    /// `cfg.buf` is `wqe_cnt * stride` writable bytes and `cfg.dbrec` a writable `u32`, valid for
    /// the queue's life and posted to by nobody else.
    pub unsafe fn new(cfg: RqConfig, hook: H) -> Result<Self, SqError> {
        // a QP made with max_recv_wr 0 has no receive queue (rdma-core reports wqe_cnt 0): it
        // is built, and every post is refused as a full queue of depth 0
        if cfg.wqe_cnt == 0 {
            if cfg.dbrec.is_null() {
                return Err(SqError::BadConfig("null RQ doorbell record"));
            }
            return Ok(Rq {
                cfg,
                head: 0,
                tail: 0,
                hook,
            });
        }
        if !cfg.wqe_cnt.is_power_of_two() {
            return Err(SqError::BadConfig("RQ wqe_cnt is not a power of two"));
        }
        if cfg.stride < 16 || !cfg.stride.is_power_of_two() {
            return Err(SqError::BadConfig("RQ stride is not 16 x a power of two"));
        }
        if cfg.buf.is_null() || cfg.dbrec.is_null() {
            return Err(SqError::BadConfig("null RQ buffer or doorbell record"));
        }
        Ok(Rq {
            cfg,
            head: 0,
            tail: 0,
            hook,
        })
    }

    /// Receive WQEs posted and not yet consumed.
    pub fn outstanding(&self) -> u32 {
        self.head.wrapping_sub(self.tail)
    }

    /// Most scatter entries one receive WQE holds.
    pub fn max_sge(&self) -> u32 {
        self.cfg.stride / 16
    }

    /// Writes one receive WQE (no doorbell). Returns its index.
    #[inline]
    pub fn post(&mut self, sges: &[DataSeg]) -> Result<u16, SqError> {
        let qpn = self.cfg.qpn;
        if self.outstanding() >= self.cfg.wqe_cnt {
            return Err(SqError::RqFull {
                qpn,
                depth: self.cfg.wqe_cnt,
            });
        }
        if sges.len() as u32 > self.max_sge() {
            return Err(SqError::TooLarge {
                qpn,
                ds: sges.len() as u32,
            });
        }
        let slot = (self.head & (self.cfg.wqe_cnt - 1)) as usize;
        // SAFETY: slot < wqe_cnt; the WQE's `stride` bytes are inside the ring and free
        // (outstanding < wqe_cnt).
        unsafe {
            let base = self.cfg.buf.add(slot * self.cfg.stride as usize) as *mut DataSeg;
            for (i, s) in sges.iter().enumerate() {
                ptr::write(base.add(i), *s);
            }
            if (sges.len() as u32) < self.max_sge() {
                ptr::write(
                    base.add(sges.len()),
                    DataSeg {
                        byte_count: Be32::new(0),
                        lkey: Be32::new(INVALID_LKEY),
                        addr: Be64::new(0),
                    },
                );
            }
        }
        let idx = (self.head & 0xffff) as u16;
        self.head = self.head.wrapping_add(1);
        Ok(idx)
    }

    /// Publishes posted receive WQEs: `udma_to_device_barrier` (WQEs before the record), then
    /// `dbrec[0] = be32(head & 0xffff)`.
    #[inline]
    pub fn ring(&mut self) {
        udma_to_device_barrier();
        // SAFETY: dbrec is a writable u32 (see `new`); volatile: the device reads it.
        unsafe { ptr::write_volatile(self.cfg.dbrec, (self.head & 0xffff).to_be()) };
        self.hook.rung_rq(self.cfg.qpn, self.head);
    }

    /// Retires receive WQEs up to and including `wqe_counter` (from a responder CQE).
    #[inline]
    pub fn retire(&mut self, wqe_counter: u16) {
        let delta = (wqe_counter as u32).wrapping_sub(self.tail) & 0xffff;
        self.tail = self.tail.wrapping_add(delta + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::super::sq::NoHook;
    use super::*;

    #[test]
    fn post_writes_sges_and_terminator() {
        let mut ring = [0u8; 4 * 32];
        let mut db = 0u32;
        let cfg = RqConfig {
            buf: ring.as_mut_ptr(),
            wqe_cnt: 4,
            stride: 32,
            dbrec: &mut db,
            qpn: 5,
        };
        // SAFETY: ring and db outlive rq.
        let mut rq = unsafe { Rq::new(cfg, NoHook) }.unwrap();
        for i in 0..4u64 {
            assert_eq!(rq.post(&[DataSeg::new(0x1000 * i, 7, 64)]).unwrap(), i as u16);
        }
        assert_eq!(
            rq.post(&[DataSeg::new(0, 7, 1)]),
            Err(SqError::RqFull { qpn: 5, depth: 4 })
        );
        rq.ring();
        rq.retire(1);
        assert_eq!(rq.outstanding(), 2);
        let too_many = [DataSeg::new(0, 0, 0); 3];
        assert!(matches!(rq.post(&too_many), Err(SqError::TooLarge { .. })));
        assert_eq!(u32::from_be(db), 4);
        assert_eq!(&ring[32 + 8..32 + 16], &0x1000u64.to_be_bytes());
        assert_eq!(&ring[32 + 20..32 + 24], &INVALID_LKEY.to_be_bytes());
    }
}
