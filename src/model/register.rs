//! The checks of what a poster stored in a QP's register page against the WQEs it rang: the
//! doorbell (the first 8 bytes of the last WQE rung), a BlueFlame write's copy of that WQE, and
//! the clearing of the page that tells the two apart at the next check.

use super::cqe::set_err;
use super::layout::{bump64, hdr, rings, QpHdr, Rings, QP_REG_OFF};
use super::shm::Shm;
use super::{Model, BF_SIZE};
use crate::mlx5::seg::WQEBB;
use std::sync::atomic::Ordering;

/// Checks the register against the WQEs rung from `ci` to `target` on the ring `sq` (its base
/// and count of WQEBBs): the last WQE's index and register half when they match; on a mismatch
/// the QP moves to error.
#[inline(always)]
pub(super) fn check_doorbell(
    m: &Model,
    q: &Shm,
    h: &QpHdr,
    sq: (*const u8, u32),
    ci: u32,
    target: u32,
) -> Option<(u32, usize)> {
    match doorbell_matches(q, sq.0, sq.1, ci, target) {
        Rung::Matches(last, half) => Some((last, half)),
        Rung::Unknown => None,
        Rung::Mismatch => {
            // The register does not hold the doorbell of the last WQE rung: a NIC would
            // fetch another WQE, or none. The model executes none of them: the QP moves to
            // error and the run's loop flushes them (WR_FLUSH, one CQE each).
            h.bad_doorbells.fetch_add(1, Ordering::Relaxed);
            set_err(m, q);
            None
        }
    }
}

/// What the register says of the WQEs rung.
enum Rung {
    /// Register half `.1` starts with the first 8 bytes of the last WQE rung, at WQEBB `.0`.
    Matches(u32, usize),
    /// Neither half does.
    Mismatch,
    /// The WQEs do not add up (a malformed one): execution reports it at its slot.
    Unknown,
}

/// The QP's register page: two BlueFlame halves of `BF_SIZE` bytes (the poster alternates).
fn reg_half(q: &Shm, half: usize) -> *mut u64 {
    // SAFETY: the register page is inside the QP object's mapping (QP_REG_OFF + 2 * BF_SIZE).
    unsafe { q.ptr().add(QP_REG_OFF + half * BF_SIZE as usize) as *mut u64 }
}

/// Whether the register page of `q` (either BlueFlame half: the halves alternate) starts with
/// the first 8 bytes of the last WQE rung between `ci` and `target` (WQEBB indices): the
/// doorbell a ConnectX reads the WQE index, opcode, QP number and size from (a BlueFlame copy
/// starts with them too). The last WQE is found by walking the control segments' DS.
fn doorbell_matches(q: &Shm, sq: *const u8, cnt: u32, ci: u32, target: u32) -> Rung {
    let (mut at, mut last) = (ci, ci);
    while at != target {
        // SAFETY: byte 7 (DS) of the control segment at WQEBB `at` inside the ring.
        let ds = unsafe { std::ptr::read_volatile(sq.add((at & (cnt - 1)) as usize * WQEBB + 7)) } & 0x3f;
        if ds == 0 {
            return Rung::Unknown; // a malformed WQE: execution reports it (LOCAL_QP_OP)
        }
        last = at;
        at = at.wrapping_add((ds as u32).div_ceil(4));
        if target.wrapping_sub(at) > target.wrapping_sub(ci) {
            return Rung::Unknown; // sizes that overrun the record: execution reports the WQE
        }
    }
    // SAFETY: the last WQE's first 8 bytes in the ring.
    let want = unsafe { std::ptr::read_unaligned(sq.add((last & (cnt - 1)) as usize * WQEBB) as *const u64) };
    // SAFETY: the first 8 bytes of each register half.
    match (0..2).find(|&half| unsafe { std::ptr::read_volatile(reg_half(q, half)) } == want) {
        Some(half) => Rung::Matches(last, half),
        None => Rung::Mismatch,
    }
}

/// Whether register half `half`, which holds the doorbell of the WQE at WQEBB `last`, holds it
/// whole when it was a BlueFlame write. A BlueFlame write is told from an 8-byte doorbell by
/// what it leaves past the first 8 bytes (the model clears them after every check, see
/// [`clear_register`]): a copy of the WQE's 64-byte units, up to `BF_SIZE`, which must equal the
/// ring's. An all-zero first unit past byte 8 reads as a doorbell: lenient, never a false alarm.
pub(super) fn blueflame_matches(q: &Shm, last: u32, half: usize) -> bool {
    let Some(Rings { sq, sq_cnt: cnt, .. }) = rings(q) else {
        return true;
    };
    let reg = reg_half(q, half);
    // SAFETY: words 1..8 of the half (inside the register page).
    if (1..8).all(|w| unsafe { std::ptr::read_volatile(reg.add(w)) } == 0) {
        return true; // an 8-byte doorbell
    }
    bump64(&hdr::<QpHdr>(q).ctr_bf_writes, 1);
    let unit = |b: u32| -> *const u64 {
        // SAFETY: WQEBB `last + b`, masked into the ring.
        unsafe { sq.add((last.wrapping_add(b) & (cnt - 1)) as usize * WQEBB) as *const u64 }
    };
    // SAFETY: byte 7 (DS) of the WQE's control segment, in the ring.
    let ds = unsafe { std::ptr::read_volatile((unit(0) as *const u8).add(7)) } & 0x3f;
    let nbb = (ds as u32).div_ceil(4);
    if nbb == 0 || nbb as usize * WQEBB > BF_SIZE as usize {
        return false; // no BlueFlame write is that long
    }
    (0..nbb).all(|b| {
        (0..8usize).all(|w| {
            // SAFETY: word w of WQEBB b, in the ring and in the half (nbb * 64 <= BF_SIZE).
            unsafe { std::ptr::read_volatile(reg.add(b as usize * 8 + w)) == std::ptr::read_volatile(unit(b).add(w)) }
        })
    })
}

/// Clears both register halves past their first 8 bytes, so the next check tells a BlueFlame
/// write (which leaves bytes there) from an 8-byte doorbell (which does not). Only the poster's
/// thread writes the register, and only it checks: nothing else races with this.
pub(super) fn clear_register(q: &Shm) {
    for half in 0..2 {
        let reg = reg_half(q, half);
        // SAFETY: words 1..8 of the half.
        if (1..8).any(|w| unsafe { std::ptr::read_volatile(reg.add(w)) } != 0) {
            for w in 1..BF_SIZE as usize / 8 {
                // SAFETY: word w of the half, inside the register page.
                unsafe { std::ptr::write_volatile(reg.add(w), 0) };
            }
        }
    }
}
