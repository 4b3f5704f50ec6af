//! The send queue: the only code that writes ring, doorbell-record or register memory.
//!
//! Indices are free-running `u32`s; a WQEBB's slot is `index & (wqe_cnt - 1)`; the 16-bit
//! `wqe_index` in the control segment is `index & 0xffff`. A WQE is posted only when all its
//! WQEBBs are free (`wqe_cnt - (pi - ci)`), so a multi-WQEBB WQE never overwrites one the device
//! has not retired. [`Sq::ring`] rings one doorbell for everything posted since the last ring,
//! following rdma-core's `post_send_db`.

use super::barrier::{mmio_flush_writes, mmio_wc_start, udma_to_device_barrier};
use super::seg::{Be32, CtrlSeg, DataSeg, InlineHdr, CE_CQ_UPDATE, INLINE_SEG, MAX_DS, WQEBB};
use super::wqe::{Payload, Wqe};
use core::ptr;

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
        let ctrl = CtrlSeg {
            opmod_idx_opcode: Be32::new(((idx as u32) << 8) | w.opcode as u32),
            qpn_ds: Be32::new((qpn << 8) | ds),
            signature: 0,
            dci_stream_channel_id: [0, 0],
            fm_ce_se: w.fm_ce_se,
            imm: w.imm,
        };
        let slot = start & (self.cfg.wqe_cnt - 1);
        if slot + nbb <= self.cfg.wqe_cnt {
            // The common case: the WQE does not wrap; write it at consecutive addresses.
            // SAFETY: slot + nbb <= wqe_cnt, so [base, base + nbb * 64) is inside the ring; those
            // WQEBBs are free (checked above); 16-byte segments at 16-byte aligned addresses.
            unsafe {
                let mut p = self.cfg.buf.add(slot as usize * WQEBB);
                ptr::write(p as *mut CtrlSeg, ctrl);
                p = p.add(16);
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
            // are free (checked above); segments are 16-byte values at 16-byte aligned addresses.
            unsafe {
                ptr::write(self.unit(start, 0) as *mut CtrlSeg, ctrl);
                let mut u = 1;
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
        self.set_pi(start.wrapping_add(nbb));
        self.pending += nbb;
        self.last_start = start;
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

    /// Writes a [`Prepared`] WQE at the producer index (no doorbell): its bytes copied as they
    /// are, the first 16 (control segment) with this post's WQE index and completion flag
    /// written in. Returns the 16-bit index.
    #[inline(always)]
    pub fn post_prepared(&mut self, w: &Prepared, signaled: bool) -> Result<u16, SqError> {
        let nbb = w.nbb;
        let free = self.free();
        if nbb > free {
            return Err(SqError::Full {
                qpn: self.cfg.qpn,
                need: nbb,
                free,
            });
        }
        let start = self.pi();
        let idx = (start & 0xffff) as u16;
        // control segment words on this little-endian machine: bytes 0..4 are
        // be32(idx << 8 | opcode), byte 11 the flags
        let lo = w.words[0] & !0x00ff_ff00u64 | u64::from((u32::from(idx) << 8).to_be()) & 0x00ff_ff00;
        let hi = if signaled {
            w.words[1] | u64::from(CE_CQ_UPDATE) << 24
        } else {
            w.words[1]
        };
        let slot = start & (self.cfg.wqe_cnt - 1);
        if slot + nbb <= self.cfg.wqe_cnt {
            // SAFETY: slot + nbb <= wqe_cnt: [p, p + nbb * 64) is inside the ring, and free
            // (checked above); 8-byte aligned stores.
            unsafe {
                let p = self.cfg.buf.add(slot as usize * WQEBB) as *mut u64;
                ptr::write(p, lo);
                ptr::write(p.add(1), hi);
                let src = w.words.as_ptr().add(2);
                match nbb {
                    1 => ptr::copy_nonoverlapping(src, p.add(2), 6),
                    2 => ptr::copy_nonoverlapping(src, p.add(2), 14),
                    3 => ptr::copy_nonoverlapping(src, p.add(2), 22),
                    _ => ptr::copy_nonoverlapping(src, p.add(2), 30),
                }
            }
        } else {
            for b in 0..nbb {
                let dst = self.unit(start.wrapping_add(b), 0) as *mut u64;
                for q in 0..8usize {
                    let v = match (b, q) {
                        (0, 0) => lo,
                        (0, 1) => hi,
                        _ => w.words[b as usize * 8 + q],
                    };
                    // SAFETY: a free WQEBB of the ring (the wrap handled by `unit`).
                    unsafe { ptr::write(dst.add(q), v) };
                }
            }
        }
        self.set_pi(start.wrapping_add(nbb));
        self.pending += nbb;
        self.last_start = start;
        Ok(idx)
    }

    /// Writes `n` copies of a [`Prepared`] WQE (no doorbell), the last with a completion
    /// requested when `signal_last`: the postlist of a benchmark or a bandwidth scenario. One
    /// free-space check covers the batch; a batch of one-WQEBB WQEs that does not reach the ring's
    /// end is written by a loop that keeps the producer index in a register. The bytes are those
    /// of `n` calls of [`Sq::post_prepared`]. Returns the index of the last WQE (`None` if `n` is 0).
    #[inline(always)]
    pub fn post_prepared_n(&mut self, w: &Prepared, n: u32, signal_last: bool) -> Result<Option<u16>, SqError> {
        if n == 0 {
            return Ok(None);
        }
        let nbb = w.nbb;
        let free = self.free();
        let need = u64::from(nbb) * u64::from(n);
        if need > u64::from(free) {
            return Err(SqError::Full {
                qpn: self.cfg.qpn,
                need: u32::try_from(need).unwrap_or(u32::MAX),
                free,
            });
        }
        let start = self.pi();
        let slot = start & (self.cfg.wqe_cnt - 1);
        if nbb != 1 || slot + n > self.cfg.wqe_cnt {
            let mut last = 0;
            for i in 0..n {
                last = self.post_prepared(w, signal_last && i == n - 1)?;
            }
            return Ok(Some(last));
        }
        let lo0 = w.words[0] & !0x00ff_ff00u64;
        let hi0 = w.words[1];
        let body = w.words.as_ptr().wrapping_add(2);
        // SAFETY: slot + n <= wqe_cnt, so the n WQEBBs from slot are inside the ring, and free
        // (n <= free, checked above), each 64-byte aligned; `body` is 6 words of the image.
        unsafe {
            let mut p = self.cfg.buf.add(slot as usize * WQEBB);
            let mut pi = start;
            let end = start.wrapping_add(n - 1);
            while pi != end {
                write_wqebb::<true>(p, lo0 | u64::from((pi << 8).swap_bytes() & 0x00ff_ff00), hi0, body);
                p = p.add(WQEBB);
                pi = pi.wrapping_add(1);
            }
            let hi = if signal_last {
                hi0 | u64::from(CE_CQ_UPDATE) << 24
            } else {
                hi0
            };
            write_wqebb::<true>(p, lo0 | u64::from((pi << 8).swap_bytes() & 0x00ff_ff00), hi, body);
            self.last_start = pi;
            self.set_pi(pi.wrapping_add(1));
            self.pending += n;
            Ok(Some((pi & 0xffff) as u16))
        }
    }

    /// Posts one [`Prepared`] WQE and rings the doorbell for it: the latency path (postlist 1).
    /// The stores are those of [`Sq::post_prepared`] then [`Sq::ring`], in the same order; when
    /// nothing else is waiting for a doorbell and the WQE is one WQEBB that does not wrap, the
    /// BlueFlame copy takes the WQE's words from registers instead of reading the ring back, and
    /// the ring's bookkeeping is that of exactly one WQE. Otherwise it is those two calls.
    #[inline(always)]
    pub fn post_prepared_ring(&mut self, w: &Prepared, signaled: bool) -> Result<u16, SqError> {
        let start = self.pi();
        let slot = start & (self.cfg.wqe_cnt - 1);
        if w.nbb != 1 || self.pending != 0 || self.free() == 0 {
            let i = self.post_prepared(w, signaled)?;
            self.ring();
            return Ok(i);
        }
        let lo = w.words[0] & !0x00ff_ff00u64 | u64::from((start as u16).swap_bytes()) << 8;
        let hi = if signaled {
            w.words[1] | u64::from(CE_CQ_UPDATE) << 24
        } else {
            w.words[1]
        };
        let body = w.words.as_ptr().wrapping_add(2);
        let pi = start.wrapping_add(1);
        // SAFETY: slot < wqe_cnt (a power of two, see `new`) and the ring has a free WQEBB
        // (checked above): [p, p + 64) is inside the ring, 64-byte aligned; `body` is 6 words of
        // the image.
        unsafe { write_wqebb::<false>(self.cfg.buf.add(slot as usize * WQEBB), lo, hi, body) };
        udma_to_device_barrier();
        // SAFETY: dbrec points to two writable u32s (see `new`); volatile, as the device reads it.
        unsafe { ptr::write_volatile(self.cfg.dbrec.add(1), (pi & 0xffff).to_be()) };
        mmio_wc_start();
        let bf_offset = self.bf_offset();
        let reg = self.cfg.bf_reg.wrapping_add(bf_offset as usize) as *mut u64;
        // A WQE of the control segment alone (DS 1, byte 7 of the image) takes the doorbell.
        let bf = self.mode != DbMode::Db && (w.words[0] >> 56) & 0x3f > 1;
        // SAFETY: the register takes 64 bytes at bf_offset in the BlueFlame modes (bf_size is 256
        // there, see `new`) and 8 bytes otherwise; `body` is 6 words of the image.
        unsafe {
            ptr::write_volatile(reg, lo);
            if bf {
                ptr::write_volatile(reg.add(1), hi);
                for q in 0..6 {
                    ptr::write_volatile(reg.add(2 + q), ptr::read(body.add(q)));
                }
            }
        }
        if self.mode != DbMode::BfNoFence || !bf {
            mmio_flush_writes();
        }
        // `last_start` is read by `ring` only while WQEs wait for a doorbell: none do now
        self.pos = self.pos.wrapping_add(1 << 32) ^ u64::from(self.cfg.bf_size);
        self.hook.rung(self.cfg.qpn, pi);
        Ok((start & 0xffff) as u16)
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

/// A WQE built once and posted many times with [`Sq::post_prepared`] (as benchmarks post the same
/// operation over and over, and as the verbs backends reuse their prepared work requests): its
/// byte image for one QP, up to 4 WQEBBs.
#[derive(Clone)]
#[repr(C, align(16))]
pub struct Prepared {
    words: [u64; 32],
    nbb: u32,
}

impl Prepared {
    /// The image of `w` on QP `qpn` (the index and the completion flag are set at each post).
    pub fn new(w: &Wqe<'_>, qpn: u32, max_inline: u32) -> Result<Self, SqError> {
        let ds = w.ds();
        if ds > 16 {
            return Err(SqError::TooLarge { qpn, ds });
        }
        if let Payload::Inline(b) = w.payload {
            if b.len() as u64 > u64::from(max_inline) {
                return Err(SqError::InlineTooLarge {
                    qpn,
                    len: b.len() as u32,
                    max: max_inline,
                });
            }
        }
        let mut img = [0u64; 32];
        let base = img.as_mut_ptr() as *mut u8;
        let unsig = Wqe {
            fm_ce_se: w.fm_ce_se & !CE_CQ_UPDATE,
            ..*w
        };
        // SAFETY: the image has room for 16 units (256 bytes) and ds <= 16; segments are written
        // at 16-byte offsets inside it; the inline bytes fit (ds counts them).
        unsafe {
            ptr::write_unaligned(base as *mut CtrlSeg, unsig.ctrl(0, qpn));
            let mut off = 16;
            if let Some(r) = w.raddr {
                ptr::write_unaligned(base.add(off) as *mut _, r);
                off += 16;
            }
            if let Some(a) = w.atomic {
                ptr::write_unaligned(base.add(off) as *mut _, a);
                off += 16;
            }
            match w.payload {
                Payload::None => {}
                Payload::Gather(segs) => {
                    for s in segs.iter().filter(|s| s.byte_count.get() != 0) {
                        ptr::write_unaligned(base.add(off) as *mut DataSeg, *s);
                        off += 16;
                    }
                }
                Payload::Inline([]) => {}
                Payload::Inline(bytes) => {
                    let hdr = InlineHdr {
                        byte_count: Be32::new(bytes.len() as u32 | INLINE_SEG),
                    };
                    ptr::write_unaligned(base.add(off) as *mut InlineHdr, hdr);
                    ptr::copy_nonoverlapping(bytes.as_ptr(), base.add(off + 4), bytes.len());
                }
            }
        }
        Ok(Prepared {
            words: img,
            nbb: ds.div_ceil(4),
        })
    }

    /// WQEBBs it occupies.
    pub fn wqebbs(&self) -> u32 {
        self.nbb
    }
}

/// Writes one WQEBB: the control segment's two words `lo`, `hi`, then the 6 words at `body`, as
/// 16-byte stores on x86-64, 8-byte stores elsewhere. With `JOIN` the two control words are joined
/// in a register and go out as one 16-byte store (four stores in all: a batch of WQEs is bound by
/// its stores); without, as two 8-byte stores (fewer instructions: a single post is bound by how
/// many the core can issue).
///
/// # Safety
/// `dst` is 64 writable bytes, 16-byte aligned; `body` is 6 readable `u64`s.
#[inline(always)]
unsafe fn write_wqebb<const JOIN: bool>(dst: *mut u8, lo: u64, hi: u64, body: *const u64) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE2 is part of x86-64; dst is 64 writable 16-byte aligned bytes and body 48
    // readable bytes (caller); unaligned loads.
    unsafe {
        use core::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_set_epi64x, _mm_store_si128};
        let d = dst as *mut __m128i;
        let b = body as *const __m128i;
        if JOIN {
            _mm_store_si128(d, _mm_set_epi64x(hi as i64, lo as i64));
        } else {
            ptr::write(dst as *mut u64, lo);
            ptr::write((dst as *mut u64).add(1), hi);
        }
        _mm_store_si128(d.add(1), _mm_loadu_si128(b));
        _mm_store_si128(d.add(2), _mm_loadu_si128(b.add(1)));
        _mm_store_si128(d.add(3), _mm_loadu_si128(b.add(2)));
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: as above, 8-byte stores.
    unsafe {
        let d = dst as *mut u64;
        ptr::write(d, lo);
        ptr::write(d.add(1), hi);
        ptr::copy_nonoverlapping(body, d.add(2), 6);
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

#[cfg(test)]
mod tests {
    use super::super::seg::{opcode, DataSeg};
    use super::*;

    /// bf-nofence drops the flush after a BlueFlame copy only: an 8-byte doorbell (a WQE of the
    /// control segment alone, or a postlist) keeps it, as UCX does; bf flushes after both.
    #[test]
    fn bf_nofence_keeps_the_fence_after_a_doorbell() {
        use super::super::barrier::FLUSHES;
        let flushes = || FLUSHES.with(|f| f.get());
        let d = [DataSeg::new(0x1000, 1, 8)];
        for (mode, after_bf, after_db) in [(DbMode::BfNoFence, 0, 1), (DbMode::Bf, 1, 1), (DbMode::Db, 1, 1)] {
            let mut r = rig();
            let mut q = sq(&mut r, mode, 256);
            let f0 = flushes();
            q.post_and_ring(&Wqe::send(Payload::Gather(&d))).unwrap(); // 2 units: BlueFlame
            let f1 = flushes();
            q.post_and_ring(&Wqe::nop()).unwrap(); // 1 unit: the doorbell, as libmlx5
            let f2 = flushes();
            q.post(&Wqe::send(Payload::Gather(&d))).unwrap();
            q.post(&Wqe::send(Payload::Gather(&d))).unwrap();
            q.ring(); // a postlist: the doorbell
            let f3 = flushes();
            assert_eq!((f1 - f0, f2 - f1, f3 - f2), (after_bf, after_db, after_db), "{mode:?}");
        }
    }

    #[repr(C, align(64))]
    struct Mem<const N: usize>([u8; N]);

    struct Rig {
        ring: Mem<{ 8 * 64 }>,
        dbrec: [u32; 2],
        reg: Mem<512>,
    }

    #[derive(Default)]
    struct Count(u32, u32);
    impl RingHook for Count {
        fn rung(&mut self, _qpn: u32, pi: u32) {
            self.0 += 1;
            self.1 = pi;
        }
    }

    fn sq(r: &mut Rig, mode: DbMode, bf_size: u32) -> Sq<Count> {
        let cfg = SqConfig {
            buf: r.ring.0.as_mut_ptr(),
            wqe_cnt: 8,
            stride: 64,
            dbrec: r.dbrec.as_mut_ptr(),
            bf_reg: r.reg.0.as_mut_ptr(),
            bf_size,
            qpn: 0x123,
            max_inline: 220,
        };
        // SAFETY: the rig's buffers match the config and outlive the queue in each test.
        unsafe { Sq::new(cfg, mode, Count::default()) }.unwrap()
    }

    fn rig() -> Rig {
        Rig {
            ring: Mem([0; 512]),
            dbrec: [0; 2],
            reg: Mem([0; 512]),
        }
    }

    #[test]
    fn config_is_validated() {
        let mut r = rig();
        let mut cfg = SqConfig {
            buf: r.ring.0.as_mut_ptr(),
            wqe_cnt: 6,
            stride: 64,
            dbrec: r.dbrec.as_mut_ptr(),
            bf_reg: r.reg.0.as_mut_ptr(),
            bf_size: 256,
            qpn: 1,
            max_inline: 0,
        };
        // SAFETY: rejected before any memory is touched.
        let e = unsafe { Sq::new(cfg, DbMode::Bf, NoHook) }.err();
        assert_eq!(
            e,
            Some(SqError::BadConfig("SQ wqe_cnt is not a power of two in 1..=32768"))
        );
        cfg.wqe_cnt = 8;
        cfg.stride = 128;
        // SAFETY: as above.
        assert!(unsafe { Sq::new(cfg, DbMode::Bf, NoHook) }.is_err());
        cfg.stride = 64;
        // rdma-core's bf_reg_size / 2: a power of two a WQEBB fits in (128 too), not 96 or 32
        for bad in [96, 32, 8192] {
            cfg.bf_size = bad;
            // SAFETY: as above.
            assert!(unsafe { Sq::new(cfg, DbMode::Bf, NoHook) }.is_err(), "bf_size {bad}");
        }
        cfg.bf_size = 128;
        // SAFETY: valid rig memory (its register has 512 bytes).
        assert_eq!(unsafe { Sq::new(cfg, DbMode::Bf, NoHook) }.unwrap().mode(), DbMode::Bf);
        cfg.bf_size = 0;
        // SAFETY: valid rig memory.
        let s = unsafe { Sq::new(cfg, DbMode::Bf, NoHook) }.unwrap();
        assert_eq!(s.mode(), DbMode::Db, "no BlueFlame register forces doorbell mode");
    }

    #[test]
    fn post_writes_segments_and_ring_writes_dbrec_and_bf() {
        let mut r = rig();
        let mut q = sq(&mut r, DbMode::Bf, 256);
        let d = [DataSeg::new(0x7f00_0000_1000, 0x42, 64)];
        let i = q
            .post(&Wqe::write(0xaa00, 0x77, Payload::Gather(&d)).signaled())
            .unwrap();
        assert_eq!(i, 0);
        q.ring();
        assert_eq!(q.hook_mut().0, 1);
        assert_eq!(u32::from_be(r.dbrec[1]), 1);
        let w = &r.ring.0[..64];
        assert_eq!(&w[0..4], &[0, 0, 0, opcode::RDMA_WRITE]);
        assert_eq!(&w[4..8], &[0, 0x01, 0x23, 3]);
        assert_eq!(w[11], 0x08);
        assert_eq!(&w[16..24], &0xaa00u64.to_be_bytes());
        assert_eq!(&w[24..28], &0x77u32.to_be_bytes());
        assert_eq!(&w[32..36], &64u32.to_be_bytes());
        assert_eq!(&w[40..48], &0x7f00_0000_1000u64.to_be_bytes());
        // BlueFlame: the whole 64-byte WQEBB copied to the register at offset 0.
        assert_eq!(&r.reg.0[..64], w);
        assert!(r.reg.0[256..].iter().all(|&b| b == 0));
    }

    #[test]
    fn bf_offset_toggles_and_batches_use_the_doorbell() {
        let mut r = rig();
        let mut q = sq(&mut r, DbMode::Bf, 256);
        let d = [DataSeg::new(1, 2, 3)];
        q.post_and_ring(&Wqe::send(Payload::Gather(&d))).unwrap(); // BF at offset 0
        q.post(&Wqe::send(Payload::Gather(&d))).unwrap();
        q.post(&Wqe::send(Payload::Gather(&d)).signaled()).unwrap();
        q.ring(); // two WQEs: 8-byte doorbell at offset 256 with the last WQE's first 8 bytes
        assert_eq!(q.pi(), 3);
        assert_eq!(&r.reg.0[256..264], &r.ring.0[128..136]);
        assert!(
            r.reg.0[264..320].iter().all(|&b| b == 0),
            "only 8 bytes stored in db mode"
        );
        assert_eq!(u32::from_be(r.dbrec[1]), 3);
    }

    #[test]
    fn db_mode_never_copies_the_wqe() {
        let mut r = rig();
        let mut q = sq(&mut r, DbMode::Db, 256);
        let d = [DataSeg::new(1, 2, 3)];
        q.post_and_ring(&Wqe::send(Payload::Gather(&d))).unwrap();
        assert_eq!(&r.reg.0[..8], &r.ring.0[..8]);
        assert!(r.reg.0[8..64].iter().all(|&b| b == 0));
    }

    #[test]
    fn full_ring_refuses_and_retire_frees() {
        let mut r = rig();
        let mut q = sq(&mut r, DbMode::Db, 0);
        let data = [0x5au8; 200]; // 4 WQEBBs each
        q.post(&Wqe::send(Payload::Inline(&data))).unwrap();
        q.post(&Wqe::send(Payload::Inline(&data))).unwrap();
        assert_eq!(q.free(), 0);
        let e = q.post(&Wqe::nop()).unwrap_err();
        assert_eq!(
            e,
            SqError::Full {
                qpn: 0x123,
                need: 1,
                free: 0
            }
        );
        q.retire(0); // the first WQE (4 WQEBBs)
        assert_eq!((q.ci(), q.free()), (4, 4));
        q.retire(4);
        assert_eq!((q.ci(), q.free()), (8, 8));
        let big = [0u8; 221];
        assert!(matches!(
            q.post(&Wqe::send(Payload::Inline(&big))),
            Err(SqError::InlineTooLarge { .. })
        ));
    }

    #[test]
    fn prepared_wqes_write_the_same_bytes_as_built_ones() {
        let d = [DataSeg::new(0x7f00_0000_1000, 0x42, 64)];
        let data: [u8; 150] = core::array::from_fn(|i| i as u8 ^ 0x5a);
        let wqes = [
            Wqe::write(0xaa00, 0x77, Payload::Gather(&d)),
            Wqe::send_imm(0xdead, Payload::Inline(&data[..40])),
            Wqe::write(0x10, 1, Payload::Inline(&data)),
            Wqe::atomic_fa(0x20, 2, 9, &d),
        ];
        for (i, w) in wqes.iter().enumerate() {
            for signaled in [false, true] {
                let (mut r1, mut r2) = (rig(), rig());
                let mut a = sq(&mut r1, DbMode::Db, 0);
                let mut b = sq(&mut r2, DbMode::Db, 0);
                // start both at WQEBB 6 so the larger ones wrap
                for _ in 0..6 {
                    a.post(&Wqe::nop()).unwrap();
                    b.post(&Wqe::nop()).unwrap();
                }
                a.retire(5);
                b.retire(5);
                let built = if signaled { w.signaled() } else { *w };
                let ia = a.post(&built).unwrap();
                let p = Prepared::new(w, 0x123, 220).unwrap();
                let ib = b.post_prepared(&p, signaled).unwrap();
                assert_eq!(ia, ib);
                let n = built.wqebbs() as usize;
                for k in 0..n {
                    let s = ((6 + k) % 8) * 64;
                    assert_eq!(
                        &r1.ring.0[s..s + 64],
                        &r2.ring.0[s..s + 64],
                        "WQE {i} signaled {signaled} WQEBB {k}"
                    );
                }
                assert_eq!((a.pi(), b.pi()), (6 + n as u32, 6 + n as u32));
            }
        }
    }

    #[test]
    fn inline_wraps_past_the_ring_end() {
        let mut r = rig();
        let mut q = sq(&mut r, DbMode::Db, 0);
        for _ in 0..6 {
            q.post(&Wqe::nop()).unwrap();
        }
        q.retire(5);
        let data: [u8; 150] = core::array::from_fn(|i| i as u8);
        // starts at WQEBB 6: ctrl+raddr (32 B), header, 150 bytes: 3 WQEBBs: 6, 7, then 0.
        let i = q.post(&Wqe::write(0x10, 1, Payload::Inline(&data))).unwrap();
        assert_eq!(i, 6);
        let ring = &r.ring.0;
        let off = 6 * 64 + 32;
        assert_eq!(&ring[off..off + 4], &(150u32 | INLINE_SEG).to_be_bytes());
        let first = 512 - (off + 4); // bytes before the end
        assert_eq!(&ring[off + 4..], &data[..first]);
        assert_eq!(&ring[..150 - first], &data[first..]);
    }

    /// The fast paths ([`Sq::post_prepared_ring`] for one WQE, [`Sq::post_prepared_n`] for a
    /// batch) store exactly what `post_prepared` x n then `ring` store: ring, doorbell record,
    /// register (BlueFlame copy or 8-byte doorbell, at the toggling offset), indices, doorbells,
    /// over 40 rounds of mixed sizes that wrap the 8-WQEBB ring many times, in every mode, with
    /// WQEs left waiting before a single post (the fast path must step aside) and batches that
    /// do not fit (the batch path refuses the whole batch and writes nothing; the reference,
    /// post by post, writes what fits and is brought level by hand).
    #[test]
    fn fast_prepared_posts_store_what_post_then_ring_stores() {
        let d = [DataSeg::new(0x7f00_0000_1000, 0x42, 64)];
        let data: [u8; 100] = core::array::from_fn(|i| i as u8 ^ 0xa5);
        let wqes = [
            Wqe::write(0xaa00, 0x77, Payload::Gather(&d)),
            Wqe::send(Payload::Inline(&data[..8])),
            Wqe::write(0x10, 1, Payload::Inline(&data[..40])),
            Wqe::send_imm(0xbeef, Payload::Inline(&data)),
        ];
        let preps: [Prepared; 4] = core::array::from_fn(|i| Prepared::new(&wqes[i], 0x123, 220).unwrap());
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = |m: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % m
        };
        for (mode, bf_size) in [
            (DbMode::Bf, 256),
            (DbMode::BfNoFence, 256),
            (DbMode::Db, 256),
            (DbMode::Bf, 0),
        ] {
            let (mut r1, mut r2) = (rig(), rig());
            let mut a = sq(&mut r1, mode, bf_size);
            let mut b = sq(&mut r2, mode, bf_size);
            for round in 0..40 {
                let p = &preps[next(4) as usize];
                let n = 1 + next(if p.wqebbs() == 1 { 9 } else { 3 }) as u32;
                let signal_last = next(2) == 1;
                let leftover = next(4) == 0 && n == 1;
                if leftover {
                    // a WQE waits for a doorbell: the single post must ring for both
                    a.post_prepared(&preps[0], false).unwrap();
                    b.post_prepared(&preps[0], false).unwrap();
                }
                let fits = u64::from(p.wqebbs()) * u64::from(n) <= u64::from(a.free());
                let ra = (|| {
                    let mut last = 0;
                    for i in 0..n {
                        last = a.post_prepared(p, signal_last && i == n - 1)?;
                    }
                    a.ring();
                    Ok::<u16, SqError>(last)
                })();
                let rb = if n == 1 {
                    b.post_prepared_ring(p, signal_last)
                } else {
                    b.post_prepared_n(p, n, signal_last)
                        .map(|i| i.unwrap())
                        .inspect(|_| b.ring())
                };
                let what = format!(
                    "{mode:?} bf_size {bf_size} round {round}: n {n} of {} WQEBBs",
                    p.wqebbs()
                );
                let last = if fits {
                    let last = ra.unwrap();
                    assert_eq!(last, rb.unwrap(), "{what}");
                    Some(last)
                } else {
                    // the batch is refused whole; the reference wrote the WQEs that fitted and
                    // stopped before its doorbell: bring `b` to the same state by hand
                    assert!(matches!(rb, Err(SqError::Full { .. })), "{what}: {rb:?}");
                    assert!(matches!(ra, Err(SqError::Full { .. })), "{what}: {ra:?}");
                    let mut last = None;
                    while b.pi() != a.pi() {
                        last = Some(b.post_prepared(p, false).unwrap());
                    }
                    a.ring();
                    b.ring();
                    last
                };
                assert_eq!(r1.ring.0, r2.ring.0, "{what}: ring");
                assert_eq!(r1.dbrec, r2.dbrec, "{what}: doorbell record");
                assert_eq!(r1.reg.0, r2.reg.0, "{what}: register page");
                assert_eq!(
                    (a.pi(), a.hook.0, a.hook.1),
                    (b.pi(), b.hook.0, b.hook.1),
                    "{what}: index, doorbells"
                );
                assert_eq!(a.bf_offset(), b.bf_offset(), "{what}: BlueFlame offset");
                // retire everything, as the completion of the last WQE would
                if let Some(last) = last {
                    a.retire(last);
                    b.retire(last);
                }
                assert_eq!(a.ci(), a.pi(), "{what}: retired");
                assert_eq!((a.ci(), a.pi()), (b.ci(), b.pi()), "{what}: retired");
            }
        }
    }
}
