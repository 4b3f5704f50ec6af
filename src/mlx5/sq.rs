//! The send queue: the only code that writes ring, doorbell-record or register memory.
//!
//! Indices are free-running `u32`s; a WQEBB's slot is `index & (wqe_cnt - 1)`; the 16-bit
//! `wqe_index` in the control segment is `index & 0xffff`. A WQE is posted only when all its
//! WQEBBs are free (`wqe_cnt - (pi - ci)`), so a multi-WQEBB WQE never overwrites one the device
//! has not retired. [`Sq::ring`] rings one doorbell for everything posted since the last ring,
//! following rdma-core's `post_send_db`.

use super::barrier::{mmio_flush_writes, mmio_wc_start, udma_to_device_barrier};
use super::seg::{AvSeg, Be32, CtrlSeg, DataSeg, InlineHdr, INLINE_SEG, MAX_DS, WQEBB};
use super::wqe::{Payload, Wqe};
use core::ptr;

mod prepared;
#[cfg(test)]
mod tests;

pub use prepared::Prepared;

/// How the doorbell is rung.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DbMode {
    /// BlueFlame when a single WQE of at most 256 B was posted (else the 8-byte doorbell), with
    /// the trailing `sfence` (rdma-core's default).
    Bf,
    /// As `Bf` without the trailing `sfence` after a BlueFlame copy (UCX `bf_post` on x86,
    /// single-threaded); an 8-byte doorbell keeps its fence (UCX skips the flush only after whole
    /// BlueFlame lines). For measurement: the store order across threads is the caller's.
    BfNoFence,
    /// Always the 8-byte doorbell store.
    Db,
}

impl DbMode {
    /// Name for reports and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            DbMode::Bf => "bf",
            DbMode::BfNoFence => "bf-nofence",
            DbMode::Db => "db",
        }
    }
}

/// Called after every doorbell: nothing on hardware; `model0` uses it to receive the doorbell.
pub trait RingHook {
    /// The send doorbell for `qpn` was rung with producer index `pi`.
    fn rung(&mut self, qpn: u32, pi: u32);
    /// The receive doorbell record for `qpn` was written with head `head`.
    fn rung_rq(&mut self, _qpn: u32, _head: u32) {}
}

/// The hardware case: the device sees the stores themselves.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoHook;

impl RingHook for NoHook {
    #[inline(always)]
    fn rung(&mut self, _qpn: u32, _pi: u32) {}
}

/// Errors of the send queue (small and `Copy`: this is the hot path).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SqError {
    /// Not enough free WQEBBs: poll the CQ to retire some.
    Full {
        /// QP number.
        qpn: u32,
        /// WQEBBs needed.
        need: u32,
        /// WQEBBs free.
        free: u32,
    },
    /// The receive queue is full.
    RqFull {
        /// QP number.
        qpn: u32,
        /// Its depth.
        depth: u32,
    },
    /// The WQE exceeds 63 16-byte units.
    TooLarge {
        /// QP number.
        qpn: u32,
        /// Its size in 16-byte units.
        ds: u32,
    },
    /// Inline payload above the QP's `max_inline_data`.
    InlineTooLarge {
        /// QP number.
        qpn: u32,
        /// Bytes asked for.
        len: u32,
        /// The QP's limit.
        max: u32,
    },
    /// The queue description is unusable.
    BadConfig(&'static str),
}

impl core::fmt::Display for SqError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SqError::Full { qpn, need, free } => {
                write!(f, "QP {qpn:#x}: send queue full ({need} WQEBBs needed, {free} free)")
            }
            SqError::RqFull { qpn, depth } => {
                write!(f, "QP {qpn:#x}: receive queue full ({depth} receives outstanding)")
            }
            SqError::TooLarge { qpn, ds } => write!(f, "QP {qpn:#x}: WQE of {ds} 16-byte units exceeds {MAX_DS}"),
            SqError::InlineTooLarge { qpn, len, max } => {
                write!(f, "QP {qpn:#x}: inline payload {len} B exceeds max_inline_data {max}")
            }
            SqError::BadConfig(why) => write!(f, "unusable send queue: {why}"),
        }
    }
}

/// What a send queue is made of (from `mlx5dv_init_obj`, or from model0).
#[derive(Clone, Copy, Debug)]
pub struct SqConfig {
    /// Ring start.
    pub buf: *mut u8,
    /// Number of WQEBBs (a power of two).
    pub wqe_cnt: u32,
    /// Bytes per WQEBB (must be 64).
    pub stride: u32,
    /// The QP's doorbell record (`dbrec`; the send counter is `dbrec[1]`).
    pub dbrec: *mut u32,
    /// The BlueFlame / doorbell register.
    pub bf_reg: *mut u8,
    /// BlueFlame buffer size: 256, or 0 for a shared UAR (doorbell only).
    pub bf_size: u32,
    /// QP number.
    pub qpn: u32,
    /// The QP's `max_inline_data`.
    pub max_inline: u32,
}

/// A send queue driven directly.
pub struct Sq<H: RingHook = NoHook> {
    cfg: SqConfig,
    /// The producer index (high 32 bits) and the BlueFlame offset (low 32 bits) in one word, so
    /// the single-WQE path, which changes both, updates them with one add, one xor and one store
    /// (the index wraps off the top of the word, leaving the offset alone).
    pos: u64,
    ci: u32,
    /// Start of the last WQE posted since the last doorbell.
    last_start: u32,
    /// WQEBBs posted since the last doorbell (so the producer index at that doorbell is
    /// `pi - pending`): 0 means nothing to ring, and `last_start == pi - pending` exactly one WQE
    /// since (BlueFlame may carry it). A count rather than that index, so the single-WQE path,
    /// which starts and ends with nothing pending, leaves it alone.
    pending: u32,
    mode: DbMode,
    hook: H,
}

// SAFETY: the queue's memory is owned by this Sq (one poster); moving it to another thread is
// fine, sharing is not (no Sync).
unsafe impl<H: RingHook + Send> Send for Sq<H> {}

impl<H: RingHook> Sq<H> {
    /// Validates `cfg` and builds the queue. `bf_size == 0` forces [`DbMode::Db`].
    ///
    /// # Safety
    /// `cfg.buf` is `wqe_cnt * 64` writable bytes, `cfg.dbrec` two writable `u32`s, `cfg.bf_reg`
    /// a writable register (at least `2 * bf_size` bytes, or 8 when `bf_size` is 0), all valid
    /// for the life of the queue and written by nobody else.
    pub unsafe fn new(cfg: SqConfig, mode: DbMode, hook: H) -> Result<Self, SqError> {
        if cfg.stride as usize != WQEBB {
            return Err(SqError::BadConfig("SQ stride is not 64"));
        }
        if cfg.wqe_cnt == 0 || !cfg.wqe_cnt.is_power_of_two() || cfg.wqe_cnt > 32768 {
            return Err(SqError::BadConfig("SQ wqe_cnt is not a power of two in 1..=32768"));
        }
        // rdma-core hands out half the device's bf_reg_size (providers/mlx5/mlx5.c: buf_size =
        // bf_reg_size / 2), 256 on current ConnectX; any power of two a WQEBB fits in works here
        if cfg.bf_size != 0 && !(cfg.bf_size.is_power_of_two() && (64..=4096).contains(&cfg.bf_size)) {
            return Err(SqError::BadConfig(
                "BlueFlame size is neither 0 nor a power of two in 64..=4096",
            ));
        }
        if cfg.buf.is_null() || cfg.dbrec.is_null() || cfg.bf_reg.is_null() {
            return Err(SqError::BadConfig("null SQ buffer, doorbell record or register"));
        }
        let mode = if cfg.bf_size == 0 { DbMode::Db } else { mode };
        Ok(Sq {
            cfg,
            pos: 0,
            ci: 0,
            last_start: 0,
            pending: 0,
            mode,
            hook,
        })
    }

    /// The doorbell mode in force (`Db` when the QP has no BlueFlame register).
    pub fn mode(&self) -> DbMode {
        self.mode
    }
    /// Producer index (free-running, in WQEBBs).
    pub fn pi(&self) -> u32 {
        (self.pos >> 32) as u32
    }
    #[inline(always)]
    fn set_pi(&mut self, pi: u32) {
        self.pos = self.pos & 0xffff_ffff | u64::from(pi) << 32;
    }
    /// Offset of the BlueFlame half the next doorbell writes (0 or `bf_size`).
    #[inline(always)]
    pub fn bf_offset(&self) -> u32 {
        self.pos as u32
    }
    /// Consumer index: everything before it is retired.
    pub fn ci(&self) -> u32 {
        self.ci
    }
    /// Free WQEBBs.
    pub fn free(&self) -> u32 {
        self.cfg.wqe_cnt - self.pi().wrapping_sub(self.ci)
    }
    /// Ring size in WQEBBs.
    pub fn wqe_cnt(&self) -> u32 {
        self.cfg.wqe_cnt
    }
    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.cfg.qpn
    }
    /// The hook (the model, on model0).
    pub fn hook_mut(&mut self) -> &mut H {
        &mut self.hook
    }

    /// Address of 16-byte unit `u` of the WQE starting at WQEBB index `start`.
    #[inline(always)]
    fn unit(&self, start: u32, u: u32) -> *mut u8 {
        let units_mask = (self.cfg.wqe_cnt * 4) - 1;
        let idx = (start.wrapping_mul(4).wrapping_add(u)) & units_mask;
        // SAFETY: idx < wqe_cnt * 4, so the offset is inside the ring (see `new`'s contract).
        unsafe { self.cfg.buf.add(idx as usize * 16) }
    }

    /// A WQE of `nbb` WQEBBs was written at `start`: the producer index moves past it, and the
    /// next doorbell rings for it.
    #[inline(always)]
    fn posted(&mut self, start: u32, nbb: u32) {
        self.set_pi(start.wrapping_add(nbb));
        self.pending += nbb;
        self.last_start = start;
    }

    /// Writes `w` into the ring at the producer index (no doorbell). Returns its 16-bit index.
    #[inline(always)]
    pub fn post(&mut self, w: &Wqe<'_>) -> Result<u16, SqError> {
        let qpn = self.cfg.qpn;
        let ds = w.ds();
        if ds > MAX_DS {
            return Err(SqError::TooLarge { qpn, ds });
        }
        if let Payload::Inline(b) = w.payload {
            if b.len() as u64 > self.cfg.max_inline as u64 {
                return Err(SqError::InlineTooLarge {
                    qpn,
                    len: b.len() as u32,
                    max: self.cfg.max_inline,
                });
            }
        }
        let nbb = ds.div_ceil(4);
        let free = self.free();
        if nbb > free {
            return Err(SqError::Full { qpn, need: nbb, free });
        }
        let start = self.pi();
        let idx = (start & 0xffff) as u16;
        let ctrl = w.ctrl_of_size(idx, qpn, ds);
        let slot = start & (self.cfg.wqe_cnt - 1);
        if slot + nbb <= self.cfg.wqe_cnt {
            // The common case: the WQE does not wrap; write it at consecutive addresses.
            // SAFETY: slot + nbb <= wqe_cnt, so [base, base + nbb * 64) is inside the ring; those
            // WQEBBs are free (checked above); 16-byte segments at 16-byte aligned addresses.
            unsafe {
                let mut p = self.cfg.buf.add(slot as usize * WQEBB);
                ptr::write(p as *mut CtrlSeg, ctrl);
                p = p.add(16);
                if let Some(av) = w.datagram {
                    ptr::write(p as *mut AvSeg, *av);
                    p = p.add(48);
                }
                if let Some(r) = w.raddr {
                    ptr::write(p as *mut _, r);
                    p = p.add(16);
                }
                if let Some(a) = w.atomic {
                    ptr::write(p as *mut _, a);
                    p = p.add(16);
                }
                match w.payload {
                    Payload::None => {}
                    Payload::Gather(segs) => {
                        let mut d = p as *mut DataSeg;
                        for s in segs.iter().filter(|s| s.byte_count.get() != 0) {
                            ptr::write(d, *s);
                            d = d.add(1);
                        }
                    }
                    Payload::Inline([]) => {}
                    Payload::Inline(bytes) => {
                        let hdr = InlineHdr {
                            byte_count: Be32::new(bytes.len() as u32 | INLINE_SEG),
                        };
                        ptr::write(p as *mut InlineHdr, hdr);
                        copy_bytes(bytes, p.add(4));
                    }
                }
            }
        } else {
            // SAFETY: every unit address comes from `unit`, inside the ring; the WQEBBs written
            // are free (checked above); segments are 16-byte values at 16-byte aligned addresses;
            // the datagram segment's 3 units are the rest of the first WQEBB (contiguous).
            unsafe {
                ptr::write(self.unit(start, 0) as *mut CtrlSeg, ctrl);
                let mut u = 1;
                if let Some(av) = w.datagram {
                    ptr::write(self.unit(start, u) as *mut AvSeg, *av);
                    u += 3;
                }
                if let Some(r) = w.raddr {
                    ptr::write(self.unit(start, u) as *mut _, r);
                    u += 1;
                }
                if let Some(a) = w.atomic {
                    ptr::write(self.unit(start, u) as *mut _, a);
                    u += 1;
                }
                match w.payload {
                    Payload::None => {}
                    Payload::Gather(segs) => {
                        for s in segs.iter().filter(|s| s.byte_count.get() != 0) {
                            ptr::write(self.unit(start, u) as *mut _, *s);
                            u += 1;
                        }
                    }
                    Payload::Inline([]) => {}
                    Payload::Inline(bytes) => self.write_inline(start, u, bytes),
                }
            }
        }
        self.posted(start, nbb);
        Ok(idx)
    }

    /// The inline header at unit `u`, then the bytes, wrapping past the ring's end to its start.
    ///
    /// # Safety
    /// The WQEBBs from `start` covering `4 + bytes.len()` bytes after unit `u` are free.
    #[inline]
    unsafe fn write_inline(&self, start: u32, u: u32, bytes: &[u8]) {
        let hdr = InlineHdr {
            byte_count: Be32::new(bytes.len() as u32 | INLINE_SEG),
        };
        let first = self.unit(start, u);
        // SAFETY: unit address inside the ring, free (caller), 4-byte aligned.
        unsafe { ptr::write(first as *mut InlineHdr, hdr) };
        let ring_end = self.cfg.buf as usize + self.cfg.wqe_cnt as usize * WQEBB;
        let dst = first as usize + 4;
        let till_end = ring_end - dst;
        let n1 = bytes.len().min(till_end);
        // SAFETY: [dst, dst + n1) lies before the ring's end; the rest continues at the ring's
        // start (the wrap), within the free WQEBBs the WQE occupies.
        unsafe {
            ptr::copy_nonoverlapping(bytes.as_ptr(), dst as *mut u8, n1);
            if n1 < bytes.len() {
                ptr::copy_nonoverlapping(bytes.as_ptr().add(n1), self.cfg.buf, bytes.len() - n1);
            }
        }
    }

    /// Rings the doorbell for everything posted since the last ring (no-op if nothing was).
    ///
    /// 1. `udma_to_device_barrier`: WQE stores before the doorbell record.
    /// 2. doorbell record `dbrec[1] = be32(pi & 0xffff)`.
    /// 3. `mmio_wc_start` (`sfence`): the record before the write-combining register stores.
    /// 4. BlueFlame (one WQE of more than one and at most 256/16 units posted since the last
    ///    ring, mode `bf*`; a WQE of the control segment alone is rung with the doorbell, as
    ///    libmlx5's `post_send_db` does, `size > 1`): the WQE copied in ascending 64-byte chunks
    ///    of 8-byte stores; else the 8-byte doorbell store of the last WQE's first 8 bytes.
    /// 5. `mmio_flush_writes` (`sfence`) except in `bf-nofence` mode.
    /// 6. The BlueFlame offset toggles.
    #[inline(always)]
    pub fn ring(&mut self) {
        if self.pending == 0 {
            return;
        }
        let start = self.last_start;
        let nbb = self.pi().wrapping_sub(start);
        udma_to_device_barrier();
        // SAFETY: dbrec points to two writable u32s (see `new`); volatile, as the device reads it.
        unsafe { ptr::write_volatile(self.cfg.dbrec.add(1), (self.pi() & 0xffff).to_be()) };
        mmio_wc_start();
        let reg = self.cfg.bf_reg.wrapping_add(self.bf_offset() as usize) as *mut u64;
        // SAFETY: the last WQE's control segment is in the ring; byte 7 is its DS.
        let ds = unsafe { ptr::read(self.unit(start, 0).add(7)) } & 0x3f;
        let use_bf = self.mode != DbMode::Db
            && self.last_start == self.pi().wrapping_sub(self.pending)
            && ds > 1
            && (nbb as usize) * WQEBB <= self.cfg.bf_size as usize;
        if use_bf {
            for b in 0..nbb {
                let src = self.unit(start.wrapping_add(b), 0) as *const u64;
                for q in 0..8usize {
                    // SAFETY: src is a WQEBB in the ring (8 u64s); reg + b*8 + q is inside the
                    // 256-byte BlueFlame half at bf_offset (nbb * 64 <= bf_size, checked).
                    unsafe { ptr::write_volatile(reg.add(b as usize * 8 + q), ptr::read(src.add(q))) };
                }
            }
        } else {
            // SAFETY: the last WQE's control segment is in the ring; the register takes an
            // 8-byte store at bf_offset.
            unsafe {
                let first8 = ptr::read(self.unit(start, 0) as *const u64);
                ptr::write_volatile(reg, first8);
            }
        }
        if self.mode != DbMode::BfNoFence || !use_bf {
            mmio_flush_writes();
        }
        self.pos ^= u64::from(self.cfg.bf_size);
        self.pending = 0;
        self.hook.rung(self.cfg.qpn, self.pi());
    }

    /// Posts one WQE and rings the doorbell.
    #[inline]
    pub fn post_and_ring(&mut self, w: &Wqe<'_>) -> Result<u16, SqError> {
        let i = self.post(w)?;
        self.ring();
        Ok(i)
    }

    /// Retires every WQE up to and including the one starting at `wqe_counter` (a requester
    /// CQE's counter: with selective signalling it covers all unsignalled WQEs before it).
    #[inline]
    pub fn retire(&mut self, wqe_counter: u16) {
        let delta = (wqe_counter as u32).wrapping_sub(self.ci) & 0xffff;
        let start = self.ci.wrapping_add(delta);
        // SAFETY: the control segment of an unretired WQE is still in the ring.
        let qpn_ds = unsafe { ptr::read(self.unit(start, 0) as *const CtrlSeg) }.qpn_ds.get();
        let nbb = (qpn_ds & 0x3f).div_ceil(4).max(1);
        self.ci = start.wrapping_add(nbb);
    }
}

/// Copies `src` to `dst`: small payloads (the common inline case) with 8-byte moves instead of a
/// call to `memcpy`.
///
/// # Safety
/// `dst` is valid for `src.len()` bytes and does not overlap `src`.
#[inline(always)]
unsafe fn copy_bytes(src: &[u8], dst: *mut u8) {
    let n = src.len();
    if n > 64 {
        // SAFETY: the caller guarantees dst is valid for n bytes.
        unsafe { ptr::copy_nonoverlapping(src.as_ptr(), dst, n) };
        return;
    }
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n: in bounds of src and dst; unaligned 8-byte moves.
        unsafe {
            ptr::write_unaligned(
                dst.add(i) as *mut u64,
                ptr::read_unaligned(src.as_ptr().add(i) as *const u64),
            )
        };
        i += 8;
    }
    while i < n {
        // SAFETY: i < n: in bounds of src and dst.
        unsafe { *dst.add(i) = *src.get_unchecked(i) };
        i += 1;
    }
}
