//! The completion queue: CQE64 polling with the owner bit against the consumer index,
//! `udma_from_device_barrier` before reading a CQE's body, up to N per call, the consumer-index
//! doorbell record written once per batch, 64- and 128-byte CQEs, error CQEs decoded.

use super::barrier::udma_from_device_barrier;
use core::ptr;

/// CQE opcodes (`op_own >> 4`).
pub mod cqe_op {
    use crate::sys;
    /// Requester completion.
    pub const REQ: u8 = sys::MLX5_CQE_REQ as u8;
    /// Responder: RDMA WRITE with immediate.
    pub const RESP_WR_IMM: u8 = sys::MLX5_CQE_RESP_WR_IMM as u8;
    /// Responder: SEND.
    pub const RESP_SEND: u8 = sys::MLX5_CQE_RESP_SEND as u8;
    /// Responder: SEND with immediate.
    pub const RESP_SEND_IMM: u8 = sys::MLX5_CQE_RESP_SEND_IMM as u8;
    /// Responder: SEND with invalidate.
    pub const RESP_SEND_INV: u8 = sys::MLX5_CQE_RESP_SEND_INV as u8;
    /// Requester error.
    pub const REQ_ERR: u8 = sys::MLX5_CQE_REQ_ERR as u8;
    /// Responder error.
    pub const RESP_ERR: u8 = sys::MLX5_CQE_RESP_ERR as u8;
    /// Not yet written (the initial value).
    pub const INVALID: u8 = sys::MLX5_CQE_INVALID as u8;
}

/// Syndrome names (`MLX5_CQE_SYNDROME_*`).
pub fn syndrome_name(s: u8) -> &'static str {
    use crate::sys::*;
    match s as u32 {
        MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR => "LOCAL_LENGTH_ERR",
        MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR => "LOCAL_QP_OP_ERR",
        MLX5_CQE_SYNDROME_LOCAL_PROT_ERR => "LOCAL_PROT_ERR",
        MLX5_CQE_SYNDROME_WR_FLUSH_ERR => "WR_FLUSH_ERR",
        MLX5_CQE_SYNDROME_MW_BIND_ERR => "MW_BIND_ERR",
        MLX5_CQE_SYNDROME_BAD_RESP_ERR => "BAD_RESP_ERR",
        MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR => "LOCAL_ACCESS_ERR",
        MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR => "REMOTE_INVAL_REQ_ERR",
        MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR => "REMOTE_ACCESS_ERR",
        MLX5_CQE_SYNDROME_REMOTE_OP_ERR => "REMOTE_OP_ERR",
        MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR => "TRANSPORT_RETRY_EXC_ERR",
        MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR => "RNR_RETRY_EXC_ERR",
        MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR => "REMOTE_ABORTED_ERR",
        _ => "UNKNOWN_SYNDROME",
    }
}

/// What a syndrome usually means for the one reading the error ("" when the name says it all).
pub fn syndrome_hint(s: u8) -> &'static str {
    use crate::sys::*;
    match s as u32 {
        MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR => {
            "the peer never acknowledged: it may have stopped or its QP gone to error, or the path (GID index, MTU, LID) is wrong"
        }
        MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR => "the peer had no receive posted for as long as the RNR retries lasted",
        MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR => {
            "the peer refused the access: wrong rkey, an address outside its memory region, or a missing access right"
        }
        MLX5_CQE_SYNDROME_LOCAL_PROT_ERR => "a local buffer is outside its memory region, or its lkey is wrong",
        MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR => "a message is longer than the receive buffer",
        MLX5_CQE_SYNDROME_WR_FLUSH_ERR => "the QP was already in error: the first error before this one is the cause",
        _ => "",
    }
}

/// A successful completion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cqe {
    /// `cqe_op::*`.
    pub opcode: u8,
    /// QP number (24 bits).
    pub qpn: u32,
    /// Requester: the WQEBB index where the completed WQE starts; responder: the receive WQE.
    pub wqe_counter: u16,
    /// Bytes (responder: received).
    pub byte_cnt: u32,
    /// Immediate as stored (network order), for `RESP_*_IMM`.
    pub imm: u32,
    /// Device timestamp (if enabled).
    pub timestamp: u64,
    /// Responder, UD: the QP that sent the datagram (`flags_rqpn`, 24 bits).
    pub src_qp: u32,
    /// Responder payload bytes the device put into the CQE instead of the receive buffer
    /// (scatter-to-CQE: 32, or 64 with 128-byte CQEs; 0: in the buffer). The direct path
    /// creates its QPs without scatter-to-CQE; a non-zero value there is a device that did it
    /// anyway, and the backend refuses the completion.
    pub scatter: u8,
}

/// An error completion, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqeError {
    /// CQ number.
    pub cqn: u32,
    /// QP number.
    pub qpn: u32,
    /// Syndrome (`MLX5_CQE_SYNDROME_*`).
    pub syndrome: u8,
    /// Vendor syndrome.
    pub vendor_syndrome: u8,
    /// The failed WQE's index.
    pub wqe_counter: u16,
    /// The failed WQE's opcode (`s_wqe_opcode`).
    pub wqe_opcode: u8,
    /// Responder error (`RESP_ERR`) rather than requester (`REQ_ERR`).
    pub responder: bool,
}

impl core::fmt::Display for CqeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "{} error CQE on CQ {:#x} QP {:#x}: syndrome {:#04x} {} (vendor syndrome {:#04x}), WQE index {}, opcode {:#04x} {}",
            if self.responder { "responder" } else { "requester" },
            self.cqn,
            self.qpn,
            self.syndrome,
            syndrome_name(self.syndrome),
            self.vendor_syndrome,
            self.wqe_counter,
            self.wqe_opcode,
            super::seg::opcode::name(self.wqe_opcode)
        )?;
        match syndrome_hint(self.syndrome) {
            "" => Ok(()),
            h => write!(f, " ({h})"),
        }
    }
}

/// What a completion queue is made of.
#[derive(Clone, Copy, Debug)]
pub struct CqConfig {
    /// Buffer start.
    pub buf: *mut u8,
    /// Number of CQEs (a power of two).
    pub cqe_cnt: u32,
    /// 64 or 128 (with 128, the CQE64 is the second half).
    pub cqe_size: u32,
    /// Doorbell record (`dbrec[0]` is the consumer index).
    pub dbrec: *mut u32,
    /// CQ number.
    pub cqn: u32,
}

/// Configuration errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqConfigError(pub &'static str);

/// A completion queue polled directly.
pub struct Cq {
    cfg: CqConfig,
    ci: u32,
}

// SAFETY: owned by one poller; may move between threads.
unsafe impl Send for Cq {}

impl Cq {
    /// Validates and builds.
    ///
    /// # Safety
    /// `cfg.buf` is `cqe_cnt * cqe_size` readable bytes written by the device, `cfg.dbrec` a
    /// writable `u32`, valid for the queue's life; nobody else consumes this CQ.
    pub unsafe fn new(cfg: CqConfig) -> Result<Self, CqConfigError> {
        if cfg.cqe_size != 64 && cfg.cqe_size != 128 {
            return Err(CqConfigError("CQE size is neither 64 nor 128"));
        }
        if cfg.cqe_cnt == 0 || !cfg.cqe_cnt.is_power_of_two() {
            return Err(CqConfigError("cqe_cnt is not a power of two"));
        }
        if cfg.buf.is_null() || cfg.dbrec.is_null() {
            return Err(CqConfigError("null CQ buffer or doorbell record"));
        }
        Ok(Cq { cfg, ci: 0 })
    }

    /// Consumer index (free-running).
    pub fn ci(&self) -> u32 {
        self.ci
    }

    /// CQ number.
    pub fn cqn(&self) -> u32 {
        self.cfg.cqn
    }

    #[inline(always)]
    fn cqe64(&self, ci: u32) -> *const u8 {
        let idx = (ci & (self.cfg.cqe_cnt - 1)) as usize;
        let off = idx * self.cfg.cqe_size as usize + (self.cfg.cqe_size as usize - 64);
        // SAFETY: idx < cqe_cnt, so the CQE64 lies inside the buffer (see `new`).
        unsafe { self.cfg.buf.add(off) }
    }

    /// Polls up to `out.len()` completions. Stops before an error CQE when it already has some;
    /// an error CQE at the head is consumed and returned as `Err`. The consumer-index doorbell
    /// record is written once, after the batch.
    #[inline]
    pub fn poll(&mut self, out: &mut [Cqe]) -> Result<usize, CqeError> {
        let mut n = 0;
        let mut result = Ok(0);
        while n < out.len() {
            let cqe = self.cqe64(self.ci);
            // SAFETY: op_own is byte 63 of a CQE64 inside the buffer; volatile: the device writes it.
            let op_own = unsafe { ptr::read_volatile(cqe.add(63)) };
            let op = op_own >> 4;
            let sw_owner = (self.ci & self.cfg.cqe_cnt) != 0;
            if op == cqe_op::INVALID || ((op_own & 1) != 0) != sw_owner {
                break;
            }
            // The owner byte before the body: the body is only valid once ownership is seen.
            udma_from_device_barrier();
            // SAFETY: fields at their mlx5_cqe64 offsets inside this CQE; the device is done with it.
            let (byte_cnt, imm, ts, qpn_w, wqe_counter, rqpn) = unsafe {
                (
                    u32::from_be(ptr::read_unaligned(cqe.add(44) as *const u32)),
                    ptr::read_unaligned(cqe.add(36) as *const u32),
                    u64::from_be(ptr::read_unaligned(cqe.add(48) as *const u64)),
                    u32::from_be(ptr::read_unaligned(cqe.add(56) as *const u32)),
                    u16::from_be(ptr::read_unaligned(cqe.add(60) as *const u16)),
                    u32::from_be(ptr::read_unaligned(cqe.add(24) as *const u32)),
                )
            };
            if op == cqe_op::REQ_ERR || op == cqe_op::RESP_ERR {
                if n > 0 {
                    break; // deliver the good ones first
                }
                // SAFETY: mlx5_err_cqe: vendor_err_synd at 54, syndrome at 55.
                let (vendor, synd) = unsafe { (ptr::read(cqe.add(54)), ptr::read(cqe.add(55))) };
                self.ci = self.ci.wrapping_add(1);
                result = Err(CqeError {
                    cqn: self.cfg.cqn,
                    qpn: qpn_w & 0xff_ffff,
                    syndrome: synd,
                    vendor_syndrome: vendor,
                    wqe_counter,
                    wqe_opcode: (qpn_w >> 24) as u8,
                    responder: op == cqe_op::RESP_ERR,
                });
                break;
            }
            out[n] = Cqe {
                // MLX5_INLINE_SCATTER_32 / _64: the payload is in the CQE, not the buffer
                scatter: match op_own & 0x0c {
                    0x04 => 32,
                    0x08 => 64,
                    _ => 0,
                },
                opcode: op,
                qpn: qpn_w & 0xff_ffff,
                wqe_counter,
                byte_cnt,
                imm,
                timestamp: ts,
                src_qp: rqpn & 0xff_ffff,
            };
            n += 1;
            self.ci = self.ci.wrapping_add(1);
        }
        if n > 0 || result.is_err() {
            // SAFETY: dbrec is a writable u32 (see `new`); volatile: the device reads it.
            unsafe { ptr::write_volatile(self.cfg.dbrec, (self.ci & 0xff_ffff).to_be()) };
        }
        result.map(|_: usize| n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C, align(64))]
    struct Buf([u8; 4 * 128]);

    fn write_cqe(buf: &mut [u8], at: usize, op: u8, owner: u8, qpn: u32, counter: u16, bytes: u32) {
        let c = &mut buf[at..at + 64];
        c[44..48].copy_from_slice(&bytes.to_be_bytes());
        c[56..60].copy_from_slice(&qpn.to_be_bytes());
        c[60..62].copy_from_slice(&counter.to_be_bytes());
        c[63] = op << 4 | owner;
    }

    /// The offsets `poll` reads are those of `struct mlx5_cqe64` (the source QP of a UD receive
    /// inside the leading union's first struct).
    #[test]
    fn field_offsets_are_mlx5_cqe64s() {
        use crate::sys::{mlx5_cqe64, mlx5_cqe64__bindgen_ty_1__bindgen_ty_1 as Inner};
        use core::mem::offset_of;
        assert_eq!(offset_of!(mlx5_cqe64, __bindgen_anon_1), 0);
        assert_eq!(offset_of!(Inner, flags_rqpn), 24);
        assert_eq!(offset_of!(mlx5_cqe64, imm_inval_pkey), 36);
        assert_eq!(offset_of!(mlx5_cqe64, byte_cnt), 44);
        assert_eq!(offset_of!(mlx5_cqe64, timestamp), 48);
        assert_eq!(offset_of!(mlx5_cqe64, sop_drop_qpn), 56);
        assert_eq!(offset_of!(mlx5_cqe64, wqe_counter), 60);
        assert_eq!(offset_of!(mlx5_cqe64, op_own), 63);
        let mut b = fresh(64);
        write_cqe(&mut b.0, 0, cqe_op::RESP_SEND, 0, 7, 0, 48);
        b.0[24..28].copy_from_slice(&0x8012_3456u32.to_be_bytes());
        let mut db = 0u32;
        // SAFETY: `b` and `db` outlive the CQ.
        let mut cq = unsafe { four_cqes(&mut b, &mut db) };
        let mut out = [Cqe::default(); 1];
        assert_eq!(cq.poll(&mut out), Ok(1));
        assert_eq!(out[0].src_qp, 0x12_3456);
    }

    /// A CQ of 4 CQEs of 64 B over `b`, its doorbell record `db` (CQN 9).
    ///
    /// # Safety
    /// `b` and `db` must outlive the CQ.
    unsafe fn four_cqes(b: &mut Buf, db: &mut u32) -> Cq {
        // SAFETY: 4 CQEs of 64 B in `b`, `db` writable; the caller keeps both alive.
        unsafe {
            Cq::new(CqConfig {
                buf: b.0.as_mut_ptr(),
                cqe_cnt: 4,
                cqe_size: 64,
                dbrec: db,
                cqn: 9,
            })
        }
        .unwrap()
    }

    fn fresh(size: usize) -> Buf {
        let mut b = Buf([0; 512]);
        for i in 0..(512 / size) {
            b.0[i * size + size - 1] = cqe_op::INVALID << 4;
        }
        b
    }

    #[test]
    fn owner_bit_and_wrap() {
        let mut b = fresh(64);
        let mut db = 0u32;
        // SAFETY: `b` and `db` outlive the CQ.
        let mut cq = unsafe { four_cqes(&mut b, &mut db) };
        let mut out = [Cqe::default(); 8];
        assert_eq!(cq.poll(&mut out), Ok(0));
        let p = b.0.as_mut_ptr();
        // SAFETY: writes to the CQ buffer from the "device" side of this test.
        let dev = |at: usize, op: u8, owner: u8, c: u16| unsafe {
            let s = core::slice::from_raw_parts_mut(p, 512);
            write_cqe(s, at, op, owner, 0x55, c, 100);
        };
        for i in 0..4 {
            dev(i * 64, cqe_op::REQ, 0, i as u16);
        }
        assert_eq!(cq.poll(&mut out[..3]), Ok(3));
        assert_eq!(out[2].wqe_counter, 2);
        assert_eq!(u32::from_be(db), 3);
        assert_eq!(cq.poll(&mut out), Ok(1));
        // Second pass over the ring: software owner is now 1; stale owner-0 entries are not ours.
        assert_eq!(cq.poll(&mut out), Ok(0));
        dev(0, cqe_op::RESP_SEND, 1, 7);
        assert_eq!(cq.poll(&mut out), Ok(1));
        assert_eq!(
            (out[0].opcode, out[0].qpn, out[0].byte_cnt),
            (cqe_op::RESP_SEND, 0x55, 100)
        );
        assert_eq!(cq.ci(), 5);
    }

    #[test]
    fn error_cqe_is_decoded_after_the_good_ones() {
        let mut b = fresh(128);
        let mut db = 0u32;
        // SAFETY: 4 CQEs of 128 B in `b`; `db` writable.
        let mut cq = unsafe {
            Cq::new(CqConfig {
                buf: b.0.as_mut_ptr(),
                cqe_cnt: 4,
                cqe_size: 128,
                dbrec: &mut db,
                cqn: 3,
            })
        }
        .unwrap();
        // SAFETY: the "device" writes the CQ buffer through the pointer the CQ was given.
        let dev = unsafe { core::slice::from_raw_parts_mut(b.0.as_mut_ptr(), 512) };
        write_cqe(dev, 64, cqe_op::REQ, 0, 0x11, 0, 0);
        write_cqe(dev, 128 + 64, cqe_op::REQ_ERR, 0, (0x08 << 24) | 0x11, 4, 0);
        dev[128 + 64 + 54] = 0x88;
        dev[128 + 64 + 55] = 0x13;
        let mut out = [Cqe::default(); 4];
        assert_eq!(cq.poll(&mut out), Ok(1));
        let e = cq.poll(&mut out).unwrap_err();
        assert_eq!(
            e,
            CqeError {
                cqn: 3,
                qpn: 0x11,
                syndrome: 0x13,
                vendor_syndrome: 0x88,
                wqe_counter: 4,
                wqe_opcode: 8,
                responder: false
            }
        );
        assert_eq!(cq.ci(), 2);
        assert_eq!(syndrome_name(e.syndrome), "REMOTE_ACCESS_ERR");
    }

    /// The message says what a syndrome usually means where the name alone does not tell
    /// (retry exceeded: the peer may be gone), and adds nothing where there is no hint.
    #[cfg(feature = "std")]
    #[test]
    fn error_messages_carry_a_hint() {
        let e = CqeError {
            cqn: 3,
            qpn: 0x11,
            syndrome: crate::sys::MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR as u8,
            vendor_syndrome: 0x81,
            wqe_counter: 9,
            wqe_opcode: 8,
            responder: false,
        };
        let m = std::format!("{e}");
        assert!(
            m.contains("TRANSPORT_RETRY_EXC_ERR") && m.ends_with("(the peer never acknowledged: it may have stopped or its QP gone to error, or the path (GID index, MTU, LID) is wrong)"),
            "{m}"
        );
        let m = std::format!(
            "{}",
            CqeError {
                syndrome: crate::sys::MLX5_CQE_SYNDROME_BAD_RESP_ERR as u8,
                ..e
            }
        );
        assert!(m.ends_with("opcode 0x08 RDMA_WRITE"), "{m}");
    }
}
