//! The bytes a SEND or WRITE carries: a head copied into the payload (a UD receive's GRH area,
//! or the inline bytes of the WQE), then the requester's gather entries, resolved and read in
//! place when the payload is written out. A NIC's DMA moves a gathered message once, from the
//! requester's memory to the responder's; so does model0: an earlier version copied every
//! gathered byte into a buffer first (and above 1 KiB into a `Vec` allocated per WQE), which
//! made a 64 KiB WRITE cost two copies and an allocation where a READ cost one copy.

use super::exec::{resolve, Region};
use super::layout::{transport, QpHdr};
use super::Model;
use crate::model::cqe::syndrome;
use std::mem::MaybeUninit;

/// Entries of a WQE's gather list (mlx5: at most 16 data segments decoded).
const MAX_SEGS: usize = 16;

/// A payload: `head` bytes owned, then `segs` read in place.
pub(super) struct Payload {
    /// The first `nhead` bytes are written (the rest never read: not cleared, which cost a
    /// memset of 1 KiB per WQE).
    head: [MaybeUninit<u8>; 1024 + transport::GRH],
    /// A head that did not fit `head` (not reached: inline data is at most the QP's
    /// `max_inline`, at most model0's `MAX_INLINE`, 828 bytes, after a 40-byte GRH area).
    big: Vec<u8>,
    nhead: usize,
    /// Resolved gather entries: address in this process's mapping, length. The mappings are
    /// held by this thread's lookup cache for the scope the WQE runs in.
    segs: [(*const u8, usize); MAX_SEGS],
    nsegs: usize,
    len: usize,
}

impl Payload {
    pub(super) fn new() -> Self {
        Payload {
            head: [MaybeUninit::uninit(); 1024 + transport::GRH],
            big: Vec::new(),
            nhead: 0,
            segs: [(std::ptr::null(), 0); MAX_SEGS],
            nsegs: 0,
            len: 0,
        }
    }

    /// The payload's length in bytes.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Appends owned bytes to the head (before any gather entry).
    pub(super) fn push(&mut self, bytes: &[u8]) {
        debug_assert_eq!(self.nsegs, 0, "the head comes before the gather entries");
        if self.big.is_empty() && self.nhead + bytes.len() <= self.head.len() {
            // SAFETY: nhead + bytes.len() <= head.len(): the bytes fit after the `nhead` written.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    (self.head.as_mut_ptr() as *mut u8).add(self.nhead),
                    bytes.len(),
                )
            };
        } else {
            if self.big.is_empty() {
                let head = self.head_written().to_vec();
                self.big = head;
            }
            self.big.extend_from_slice(bytes);
        }
        self.nhead += bytes.len();
        self.len += bytes.len();
    }

    /// The head's bytes.
    fn head_written(&self) -> &[u8] {
        if !self.big.is_empty() {
            return &self.big;
        }
        // SAFETY: the first `nhead` bytes of `head` were written by `push` while `big` was
        // empty (`nhead` counts them).
        unsafe { std::slice::from_raw_parts(self.head.as_ptr() as *const u8, self.nhead) }
    }

    /// Takes the local side of a SEND or WRITE (read access suffices) after what `self` holds:
    /// inline bytes into the head, or each gather entry resolved; a syndrome when it cannot.
    pub(super) fn gather(&mut self, m: &Model, me: &QpHdr, d: &super::decode::Decoded, buf: &[u8]) -> Result<(), u8> {
        if let Some((off, len)) = d.inline {
            if len > me.max_inline as usize {
                return Err(syndrome::LOCAL_QP_OP);
            }
            self.push(&buf[off..off + len]);
            return Ok(());
        }
        for &(addr, lkey, len) in &d.sges[..d.nsge.min(MAX_SEGS)] {
            match resolve(m, lkey, addr, len as u64, me.pd, me.obj.owner_pid, 0) {
                Ok(Region { ptr, .. }) => {
                    self.segs[self.nsegs] = (ptr, len as usize);
                    self.nsegs += 1;
                    self.len += len as usize;
                }
                Err(_) => return Err(syndrome::LOCAL_PROT),
            }
        }
        Ok(())
    }

    /// Copies bytes `[off, off + n)` of the payload to `dst` (`off + n <= len()`), in one pass
    /// from where they are, piece by piece. A piece that overlaps `dst` (a WRITE within one
    /// region) is copied as `memmove` does; with several gather entries overlapping the
    /// destination, an earlier piece may land on a later one's source before it is read (the
    /// outcome is undefined on a NIC too).
    ///
    /// # Safety
    /// `dst` must be valid for writes of `n` bytes (a resolved region of at least `n` bytes).
    pub(super) unsafe fn copy_to(&self, off: usize, dst: *mut u8, n: usize) {
        debug_assert!(off + n <= self.len);
        let mut at = 0usize; // payload offset of the piece below
        let mut done = 0usize;
        let head = self.head_written();
        let pieces = std::iter::once((head.as_ptr(), head.len())).chain(self.segs[..self.nsegs].iter().copied());
        for (p, len) in pieces {
            if done == n {
                break;
            }
            let (start, end) = (at, at + len);
            at = end;
            let want = off + done;
            if want >= end {
                continue;
            }
            let k = (end - want).min(n - done);
            // SAFETY: the piece is `len` bytes readable (the head as written, or a gather entry
            // resolved in bounds of its region, held by the lookup cache); `want - start + k <=
            // len`; the caller gives `dst` valid for `n` bytes and `done + k <= n`.
            unsafe { std::ptr::copy(p.add(want - start), dst.add(done), k) };
            done += k;
        }
    }

    /// The first `n` bytes (at most 32: a payload scattered into a CQE).
    pub(super) fn first(&self, n: usize) -> [u8; 32] {
        let mut s = [0u8; 32];
        let n = n.min(32).min(self.len);
        // SAFETY: `s` holds 32 bytes, n <= 32 and n <= len().
        unsafe { self.copy_to(0, s.as_mut_ptr(), n) };
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(head: &[u8], segs: &[&[u8]]) -> Payload {
        let mut p = Payload::new();
        p.push(head);
        for s in segs {
            p.segs[p.nsegs] = (s.as_ptr(), s.len());
            p.nsegs += 1;
            p.len += s.len();
        }
        p
    }

    #[test]
    fn every_window_of_a_payload_copies_its_bytes_in_order() {
        let (a, b, c): (Vec<u8>, Vec<u8>, Vec<u8>) = (
            (0..7).collect(),
            (7..7 + 3000).map(|x| x as u8).collect(),
            (3007..3100).map(|x| x as u8).collect(),
        );
        let head = [0xeeu8; 40];
        let p = with(&head, &[&a, &b, &c]);
        let mut all = head.to_vec();
        all.extend(a.iter().chain(&b).chain(&c));
        assert_eq!(p.len(), all.len());
        for (off, n) in [
            (0, all.len()),
            (0, 1),
            (39, 2),
            (40, 7),
            (45, 3000),
            (3046, 94),
            (all.len(), 0),
            (100, 0),
        ] {
            let mut out = vec![0u8; n];
            // SAFETY: out holds n bytes.
            unsafe { p.copy_to(off, out.as_mut_ptr(), n) };
            assert_eq!(out, all[off..off + n], "off {off} n {n}");
        }
        assert_eq!(p.first(32)[..], all[..32]);
        // a head only (inline), bigger than the stack buffer
        let big: Vec<u8> = (0..2000).map(|x| (x * 7) as u8).collect();
        let p = with(&big[..1000], &[]);
        let mut p2 = p;
        p2.push(&big[1000..]);
        let mut out = vec![0u8; 2000];
        // SAFETY: out holds 2000 bytes.
        unsafe { p2.copy_to(0, out.as_mut_ptr(), 2000) };
        assert_eq!(out, big);
    }

    #[test]
    fn a_copy_onto_its_own_source_moves_as_memmove_does() {
        let mut buf: Vec<u8> = (0..64).collect();
        let want: Vec<u8> = (0..8).chain(0..56).collect();
        let src = buf.as_ptr();
        let mut p = Payload::new();
        p.segs[0] = (src, 56);
        p.nsegs = 1;
        p.len = 56;
        // SAFETY: buf holds 64 bytes: 8 + 56.
        unsafe { p.copy_to(0, buf.as_mut_ptr().add(8), 56) };
        assert_eq!(buf, want);
    }
}
