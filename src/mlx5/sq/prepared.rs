//! Prepared WQEs: a WQE's byte image built once ([`Prepared`]) and posted many times by word
//! copies, the fast paths of the benchmarks and the verbs backends ([`Sq::post_prepared`],
//! [`Sq::post_prepared_n`], [`Sq::post_prepared_ring`]).

use super::{DbMode, RingHook, Sq, SqError};
use crate::mlx5::barrier::{mmio_flush_writes, mmio_wc_start, udma_to_device_barrier};
use crate::mlx5::seg::{AvSeg, Be32, CtrlSeg, DataSeg, InlineHdr, CE_CQ_UPDATE, INLINE_SEG, WQEBB};
use crate::mlx5::wqe::{Payload, Wqe};
use core::ptr;

impl<H: RingHook> Sq<H> {
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
            if let Some(av) = w.datagram {
                ptr::write_unaligned(base.add(off) as *mut AvSeg, *av);
                off += 48;
            }
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
