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
    /// written in. Returns the 16-bit index. An inline image carries the payload it holds
    /// (given to [`Prepared::new`] or the last [`Prepared::set_inline`]; the `_inline` posts'
    /// register paths do not store theirs into it): to send the bytes of the moment, use
    /// [`Sq::post_prepared_ring_inline`] / [`Sq::post_prepared_n_inline`].
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
        self.post_n_body(w, n, signal_last, Body::Image(&w.words))
    }

    /// As [`Sq::post_prepared_n`] for an inline image, its payload `bytes` (of the image's
    /// payload length) as they are now: a one-WQEBB WQE that does not reach the ring's end takes
    /// them from registers ([`Prepared::body_with`]), any other is given them first
    /// ([`Prepared::set_inline`]). The bytes are those of `w.set_inline(bytes)` then
    /// `post_prepared_n(w, ..)`.
    #[inline(always)]
    pub fn post_prepared_n_inline(
        &mut self,
        w: &mut Prepared,
        bytes: &[u8],
        n: u32,
        signal_last: bool,
    ) -> Result<Option<u16>, SqError> {
        let slot = self.pi() & (self.cfg.wqe_cnt - 1);
        if w.nbb != 1 || slot + n > self.cfg.wqe_cnt {
            w.set_inline(bytes)?;
            return self.post_prepared_n(w, n, signal_last);
        }
        let body = w.body_with(bytes)?;
        self.post_n_body(w, n, signal_last, Body::Words(body))
    }

    /// [`Sq::post_prepared_n`] with the words after the control segment given (`body`: those
    /// of a one-WQEBB WQE; a longer one, or a batch that reaches the ring's end, is posted from
    /// the image).
    #[inline(always)]
    fn post_n_body(&mut self, w: &Prepared, n: u32, signal_last: bool, body: Body<'_>) -> Result<Option<u16>, SqError> {
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
        let hi_last = if signal_last {
            w.words[1] | u64::from(CE_CQ_UPDATE) << 24
        } else {
            w.words[1]
        };
        let end = start.wrapping_add(n - 1);
        // SAFETY: slot + n <= wqe_cnt, so the n WQEBBs from slot are inside the ring, and free
        // (n <= free, checked above), each 64-byte aligned.
        unsafe {
            write_batch(
                self.cfg.buf.add(slot as usize * WQEBB),
                start,
                n,
                lo0,
                w.words[1],
                hi_last,
                body,
            )
        };
        self.last_start = end;
        self.set_pi(end.wrapping_add(1));
        self.pending += n;
        Ok(Some((end & 0xffff) as u16))
    }

    /// Posts one [`Prepared`] WQE and rings the doorbell for it: the latency path (postlist 1).
    /// The stores are those of [`Sq::post_prepared`] then [`Sq::ring`], in the same order; when
    /// nothing else is waiting for a doorbell and the WQE is one WQEBB that does not wrap, the
    /// BlueFlame copy takes the WQE's words from registers instead of reading the ring back, and
    /// the ring's bookkeeping is that of exactly one WQE. Otherwise it is those two calls.
    #[inline(always)]
    pub fn post_prepared_ring(&mut self, w: &Prepared, signaled: bool) -> Result<u16, SqError> {
        if w.nbb != 1 || self.pending != 0 || self.free() == 0 {
            let i = self.post_prepared(w, signaled)?;
            self.ring();
            return Ok(i);
        }
        self.ring_one(w, signaled, Body::Image(&w.words))
    }

    /// As [`Sq::post_prepared_ring`] for an inline image, its payload `bytes` (of the image's
    /// payload length) as they are now: on the single-WQE path the words come from registers
    /// ([`Prepared::body_with`]: the payload loaded from `bytes`, shifted past the inline header,
    /// and stored to the ring and the BlueFlame register without a round trip through the
    /// image); otherwise the image is given them first ([`Prepared::set_inline`]). The stores are
    /// those of `w.set_inline(bytes)` then `post_prepared_ring(w, ..)`.
    #[inline(always)]
    pub fn post_prepared_ring_inline(
        &mut self,
        w: &mut Prepared,
        bytes: &[u8],
        signaled: bool,
    ) -> Result<u16, SqError> {
        if w.nbb != 1 || self.pending != 0 || self.free() == 0 {
            w.set_inline(bytes)?;
            let i = self.post_prepared(w, signaled)?;
            self.ring();
            return Ok(i);
        }
        let body = w.body_with(bytes)?;
        self.ring_one(w, signaled, Body::Words(body))
    }

    /// The single-WQE path of [`Sq::post_prepared_ring`]: a one-WQEBB WQE, nothing waiting for
    /// a doorbell, a free WQEBB (the caller has checked all three); `body` the words after the
    /// control segment: made in general registers (an inline payload), they go to the ring as
    /// 8-byte stores (16-byte stores would first move each pair to a vector register); read from
    /// the image, as 16-byte loads and stores.
    #[inline(always)]
    fn ring_one(&mut self, w: &Prepared, signaled: bool, body: Body<'_>) -> Result<u16, SqError> {
        let start = self.pi();
        let slot = start & (self.cfg.wqe_cnt - 1);
        let lo = w.words[0] & !0x00ff_ff00u64 | u64::from((start as u16).swap_bytes()) << 8;
        let hi = if signaled {
            w.words[1] | u64::from(CE_CQ_UPDATE) << 24
        } else {
            w.words[1]
        };
        let pi = start.wrapping_add(1);
        // SAFETY: slot < wqe_cnt (a power of two, see `new`) and the ring has a free WQEBB
        // (checked by the caller): [p, p + 64) is inside the ring, 64-byte aligned.
        unsafe {
            let dst = self.cfg.buf.add(slot as usize * WQEBB);
            match body {
                Body::Words(b) => write_words(dst, lo, hi, b),
                Body::Image(_) => write_wqebb::<false>(dst, lo, hi, body),
            }
        };
        udma_to_device_barrier();
        // SAFETY: dbrec points to two writable u32s (see `new`); volatile, as the device reads it.
        unsafe { ptr::write_volatile(self.cfg.dbrec.add(1), (pi & 0xffff).to_be()) };
        mmio_wc_start();
        let bf_offset = self.bf_offset();
        let reg = self.cfg.bf_reg.wrapping_add(bf_offset as usize) as *mut u64;
        // A WQE of the control segment alone (DS 1, byte 7 of the image) takes the doorbell.
        let bf = self.mode != DbMode::Db && (w.words[0] >> 56) & 0x3f > 1;
        // SAFETY: the register takes 64 bytes at bf_offset in the BlueFlame modes (bf_size is 256
        // there, see `new`) and 8 bytes otherwise.
        unsafe {
            ptr::write_volatile(reg, lo);
            if bf {
                ptr::write_volatile(reg.add(1), hi);
                for q in 0..6 {
                    ptr::write_volatile(reg.add(2 + q), body.word(q));
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
    /// Inline images: the word holding the inline header (in its low half; the payload follows
    /// it, 4 bytes into that word), 0 for a WQE without inline data.
    inl_word: u32,
    /// Inline images: the payload's length (what [`Prepared::set_inline`] takes).
    inl_len: u32,
    /// One-WQEBB inline images: the header's word (2 or 4) when [`Prepared::body_with`] can
    /// take every word of the WQEBB after it with whole loads, else 0.
    inl_fast: u8,
    /// For the words after the control segment: which bytes of each are the inline segment's
    /// (all, up to the payload's end, or none).
    inl_masks: [u64; 6],
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
        let mut inl_word = 0;
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
                    inl_word = (off / 8) as u32;
                }
            }
        }
        let inl_len = match w.payload {
            Payload::Inline(b) => b.len() as u32,
            _ => 0,
        };
        let nbb = ds.div_ceil(4);
        let (mut inl_fast, mut inl_masks) = (0, [0u64; 6]);
        if nbb == 1 && inl_len > 0 && (inl_word == 2 || inl_word == 4) {
            // byte e of the WQEBB (from the header's word on) belongs to the segment if
            // e < header's start + 4 + inl_len
            let end = 8 * inl_word as usize + 4 + inl_len as usize;
            for (j, m) in inl_masks.iter_mut().enumerate().skip(inl_word as usize - 2) {
                let from = 8 * (j + 2);
                *m = match end.saturating_sub(from) {
                    0 => 0,
                    k if k >= 8 => u64::MAX,
                    k => u64::MAX >> (64 - 8 * k),
                };
            }
            inl_fast = inl_word as u8;
        }
        Ok(Prepared {
            words: img,
            nbb,
            inl_word,
            inl_len,
            inl_fast,
            inl_masks,
        })
    }

    /// The inline payload's length (0 for a WQE without inline data).
    pub fn inline_len(&self) -> u32 {
        self.inl_len
    }

    /// Puts the first [`Prepared::inline_len`] bytes of `src` into an inline image as its
    /// payload, so the next posts carry them: what the direct path does at every post of an
    /// inline WQE that is not a one-WQEBB single post or batch (those take the bytes from
    /// registers: [`Prepared::body_with`]); the rest of the image is kept. The words are made as
    /// [`Prepared::body_with`] makes them and stored whole, so the post's 8-byte loads of them are
    /// served from the stores (a byte copy 4 bytes into a word would make them wait for the
    /// stores to reach the cache). The padding up to the next 8 bytes is zero. Nothing of `src`
    /// past the payload is read.
    ///
    /// A `src` shorter than the payload is refused (`InlineTooLarge` with the image's payload
    /// length as the limit; an image without inline data has length 0, and takes any `src`).
    #[inline(always)]
    pub fn set_inline(&mut self, src: &[u8]) -> Result<(), SqError> {
        let bytes = self.payload_of(src)?;
        if bytes.is_empty() {
            // an empty inline payload has no header and no bytes (as libmlx5 builds it)
            return Ok(());
        }
        let k = self.inl_word as usize;
        let hdr = self.words[k];
        for m in 0..(4 + bytes.len()).div_ceil(8) {
            self.words[k + m] = inline_word(hdr, bytes, m);
        }
        Ok(())
    }

    /// The words after the control segment of a one-WQEBB image (6 of them), as they are.
    #[inline(always)]
    pub(super) fn body(&self) -> [u64; 6] {
        let mut b = [0u64; 6];
        b.copy_from_slice(&self.words[2..8]);
        b
    }

    /// The words after the control segment of a one-WQEBB image with the first
    /// [`Prepared::inline_len`] bytes of `src` as its inline payload: the image's words before
    /// the inline header; from the header's word on, the header then the payload, then zeros to
    /// the end of the WQEBB. Made in registers, on their way to the ring and the BlueFlame
    /// register: when `src` holds the whole WQEBB's worth after the header (28 bytes for a
    /// WRITE, 44 for a SEND; the direct backend passes its send buffer), each word is one
    /// 8-byte load of `src` at its offset and a mask prepared with the image (all of the word,
    /// the payload's end, or nothing), no branch on the length: up to 27 or 43 bytes of `src`
    /// past the payload are read and masked off, never sent. A shorter `src` is read exactly, by
    /// shorter loads. For an image without inline data, the image's words. A `src` shorter than
    /// the payload is refused, as by [`Prepared::set_inline`], and so is an inline image of more
    /// than one WQEBB (`BadConfig`: its payload goes through `set_inline`).
    #[inline(always)]
    pub fn body_with(&self, src: &[u8]) -> Result<[u64; 6], SqError> {
        match self.inl_fast {
            // SAFETY: src holds the 28 (K = 4) or 44 (K = 2) bytes body_at reads.
            4 if src.len() >= 28 => return Ok(unsafe { self.body_at::<4>(src) }),
            // SAFETY: as above.
            2 if src.len() >= 44 => return Ok(unsafe { self.body_at::<2>(src) }),
            _ => {}
        }
        let bytes = self.payload_of(src)?;
        let (k, w) = (self.inl_word as usize, (4 + bytes.len()).div_ceil(8));
        let mut b = self.body();
        if bytes.is_empty() || k < 2 {
            return Ok(b);
        }
        if self.nbb != 1 || k + w > 8 {
            // its payload does not fit in the words returned: `set_inline` then a plain post
            return Err(SqError::BadConfig(
                "an inline image of more than one WQEBB takes its payload through set_inline",
            ));
        }
        let hdr = self.words[k];
        for m in 0..w {
            b[k - 2 + m] = inline_word(hdr, bytes, m);
        }
        Ok(b)
    }

    /// [`Prepared::body_with`] with the header at word `K` (2: a SEND; 4: an RDMA WRITE, after
    /// the remote address) and `src` holding the `8 (8 - K) - 4` bytes the rest of the WQEBB
    /// takes: constant word positions and whole loads, so the words stay in registers.
    ///
    /// # Safety
    /// `src` holds at least `8 (8 - K) - 4` bytes.
    #[inline(always)]
    unsafe fn body_at<const K: usize>(&self, src: &[u8]) -> [u64; 6] {
        let mut b = self.body();
        let hdr = self.words[K] & 0xffff_ffff;
        let p = src.as_ptr();
        for m in 0..8 - K {
            // SAFETY: src holds 8 (8 - K) - 4 bytes (the caller's contract), so the 4 bytes at 0
            // and, for 1 <= m < 8 - K, the 8 at 8 m - 4 are inside it; unaligned loads.
            let v = unsafe {
                if m == 0 {
                    hdr | u64::from(ptr::read_unaligned(p as *const u32)) << 32
                } else {
                    ptr::read_unaligned(p.add(8 * m - 4) as *const u64)
                }
            };
            b[K - 2 + m] = v & self.inl_masks[K - 2 + m];
        }
        b
    }

    /// The payload: the first `inl_len` bytes of `src`, which must hold them.
    #[inline(always)]
    fn payload_of<'s>(&self, src: &'s [u8]) -> Result<&'s [u8], SqError> {
        match src.get(..self.inl_len as usize) {
            Some(b) => Ok(b),
            None => Err(SqError::InlineTooLarge {
                qpn: u32::from_be((self.words[0] >> 32) as u32) >> 8,
                len: src.len() as u32,
                max: self.inl_len,
            }),
        }
    }

    /// WQEBBs it occupies.
    pub fn wqebbs(&self) -> u32 {
        self.nbb
    }
}

/// Word `m` of an inline segment: the 4-byte header (the low half of `hdr`, the image's word
/// that holds it) followed by `bytes`, then zeros, read as little-endian words from the header's
/// start. Word 0 is the header and bytes 0..4; word `m` (1 and up) bytes `8m - 4 .. 8m + 4`.
#[inline(always)]
fn inline_word(hdr: u64, bytes: &[u8], m: usize) -> u64 {
    if m == 0 {
        return hdr & 0xffff_ffff | load_upto(bytes, 0, 4) << 32;
    }
    load_upto(bytes, 8 * m - 4, 8)
}

/// Up to `max` (at most 8) bytes of `b` from `at` as a little-endian word, fewer (zero-extended)
/// where `b` ends, none past its end: whole 8-byte loads where they fit, else two overlapping
/// loads of 4, 2 or 1 bytes (no byte loop).
#[inline(always)]
fn load_upto(b: &[u8], at: usize, max: usize) -> u64 {
    let n = b.len();
    if at >= n {
        return 0;
    }
    let r = (n - at).min(max);
    if r == 8 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[at..at + 8]);
        return u64::from_le_bytes(w);
    }
    if n >= 8 && at + r == n {
        // the 8 bytes that end where `b` ends, shifted down to the `r` wanted
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[n - 8..n]);
        return u64::from_le_bytes(w) >> ((8 - r) * 8);
    }
    let t = &b[at..at + r];
    if r >= 4 {
        let lo = u64::from(u32::from_le_bytes([t[0], t[1], t[2], t[3]]));
        let hi = u64::from(u32::from_le_bytes([t[r - 4], t[r - 3], t[r - 2], t[r - 1]]));
        lo | hi << ((r - 4) * 8)
    } else if r >= 2 {
        let lo = u64::from(u16::from_le_bytes([t[0], t[1]]));
        let hi = u64::from(u16::from_le_bytes([t[r - 2], t[r - 1]]));
        lo | hi << ((r - 2) * 8)
    } else {
        u64::from(t[0])
    }
}

/// Writes one WQEBB as eight 8-byte stores: `lo`, `hi`, then `body`.
///
/// # Safety
/// `dst` is 64 writable bytes, 8-byte aligned.
#[inline(always)]
unsafe fn write_words(dst: *mut u8, lo: u64, hi: u64, body: [u64; 6]) {
    let d = dst as *mut u64;
    // SAFETY: dst is 64 writable 8-byte aligned bytes (caller).
    unsafe {
        ptr::write(d, lo);
        ptr::write(d.add(1), hi);
        for (q, v) in body.into_iter().enumerate() {
            ptr::write(d.add(2 + q), v);
        }
    }
}

/// The words after a one-WQEBB WQE's control segment as a post takes them: read from the image
/// (a gathered WQE: 16-byte loads straight into the stores) or made in registers (an inline
/// payload: [`Prepared::body_with`]). Every use is inlined with the kind known, so the match
/// folds away.
#[derive(Clone, Copy)]
enum Body<'a> {
    /// The image's words (the body is its words 2..8).
    Image(&'a [u64; 32]),
    /// The six words.
    Words([u64; 6]),
}

impl Body<'_> {
    /// Word `q` (0..6) after the control segment.
    #[inline(always)]
    fn word(&self, q: usize) -> u64 {
        match self {
            Body::Image(w) => w[2 + q],
            Body::Words(b) => b[q],
        }
    }
}

/// Writes one WQEBB: the control segment's two words `lo`, `hi`, then the 6 words of `body`, as
/// 16-byte stores on x86-64 (from 16-byte loads of the image, or the words joined in vector
/// registers), 8-byte stores elsewhere. With `JOIN` the two control words are joined in a
/// register and go out as one 16-byte store (four stores in all: a batch of WQEs is bound by its
/// stores); without, as two 8-byte stores (fewer instructions: a single post is bound by how many
/// the core can issue).
///
/// # Safety
/// `dst` is 64 writable bytes, 16-byte aligned.
#[inline(always)]
unsafe fn write_wqebb<const JOIN: bool>(dst: *mut u8, lo: u64, hi: u64, body: Body<'_>) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE2 is part of x86-64; dst is 64 writable 16-byte aligned bytes (caller); the
    // image's words 2..8 are 48 readable bytes (unaligned loads).
    unsafe {
        use core::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_set_epi64x, _mm_store_si128};
        let d = dst as *mut __m128i;
        if JOIN {
            _mm_store_si128(d, _mm_set_epi64x(hi as i64, lo as i64));
        } else {
            ptr::write(dst as *mut u64, lo);
            ptr::write((dst as *mut u64).add(1), hi);
        }
        match body {
            Body::Image(w) => {
                let b = w.as_ptr().add(2) as *const __m128i;
                _mm_store_si128(d.add(1), _mm_loadu_si128(b));
                _mm_store_si128(d.add(2), _mm_loadu_si128(b.add(1)));
                _mm_store_si128(d.add(3), _mm_loadu_si128(b.add(2)));
            }
            Body::Words(b) => {
                _mm_store_si128(d.add(1), _mm_set_epi64x(b[1] as i64, b[0] as i64));
                _mm_store_si128(d.add(2), _mm_set_epi64x(b[3] as i64, b[2] as i64));
                _mm_store_si128(d.add(3), _mm_set_epi64x(b[5] as i64, b[4] as i64));
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: as above, 8-byte stores.
    unsafe {
        let d = dst as *mut u64;
        ptr::write(d, lo);
        ptr::write(d.add(1), hi);
        for q in 0..6 {
            ptr::write(d.add(2 + q), body.word(q));
        }
    }
}

/// The control segment's first word for WQE index `pi`: `lo0` (the image's, its index bytes
/// cleared) with the index written in (bytes 1 and 2, big-endian).
#[inline(always)]
fn ctrl_lo(lo0: u64, pi: u32) -> u64 {
    lo0 | u64::from((pi << 8).swap_bytes() & 0x00ff_ff00)
}

/// Writes `n` (at least 1) one-WQEBB WQEs from `dst` on, indices `start`, `start + 1`, ..: each
/// the control words (`lo0` with its index, `hi`; `hi_last` for the last) then `body`, the bytes
/// of [`write_wqebb`] for each. On x86-64 the control words live in a vector register from one
/// WQE to the next: the index's low byte is byte 2 of the word (big-endian), so the next index
/// is an add of `1 << 16` to the word while that byte does not wrap, and the word is made anew
/// where it does (every 256th WQE). A WQE then costs its four 16-byte stores, that add and the
/// pointer's step, as a loop storing one unchanged image costs its stores and its own index
/// arithmetic.
///
/// # Safety
/// `dst` is `n` consecutive writable WQEBBs, 16-byte aligned.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn write_batch(dst: *mut u8, start: u32, n: u32, lo0: u64, hi: u64, hi_last: u64, body: Body<'_>) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE2 is part of x86-64; dst + 64 i for i < n is a writable, 16-byte aligned
    // WQEBB (caller); the image's words 2..8 are 48 readable bytes (unaligned loads).
    unsafe {
        use core::arch::x86_64::{__m128i, _mm_add_epi64, _mm_loadu_si128, _mm_set_epi64x, _mm_store_si128};
        let b = match body {
            Body::Image(w) => {
                let b = w.as_ptr().add(2) as *const __m128i;
                [_mm_loadu_si128(b), _mm_loadu_si128(b.add(1)), _mm_loadu_si128(b.add(2))]
            }
            Body::Words(b) => [
                _mm_set_epi64x(b[1] as i64, b[0] as i64),
                _mm_set_epi64x(b[3] as i64, b[2] as i64),
                _mm_set_epi64x(b[5] as i64, b[4] as i64),
            ],
        };
        let step = _mm_set_epi64x(0, 1 << 16);
        let mut d = dst as *mut __m128i;
        let mut pi = start;
        let mut left = n - 1;
        // all but the last, in runs over which the index's low byte does not wrap
        while left > 0 {
            let run = left.min(256 - (pi & 0xff));
            let mut c = _mm_set_epi64x(hi as i64, ctrl_lo(lo0, pi) as i64);
            let stop = d.add(4 * run as usize);
            while d != stop {
                _mm_store_si128(d, c);
                _mm_store_si128(d.add(1), b[0]);
                _mm_store_si128(d.add(2), b[1]);
                _mm_store_si128(d.add(3), b[2]);
                c = _mm_add_epi64(c, step);
                d = d.add(4);
            }
            pi = pi.wrapping_add(run);
            left -= run;
        }
        _mm_store_si128(d, _mm_set_epi64x(hi_last as i64, ctrl_lo(lo0, pi) as i64));
        _mm_store_si128(d.add(1), b[0]);
        _mm_store_si128(d.add(2), b[1]);
        _mm_store_si128(d.add(3), b[2]);
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: as above.
    unsafe {
        let mut p = dst;
        let mut pi = start;
        for i in 0..n {
            let h = if i == n - 1 { hi_last } else { hi };
            write_wqebb::<true>(p, ctrl_lo(lo0, pi), h, body);
            p = p.add(WQEBB);
            pi = pi.wrapping_add(1);
        }
    }
}
