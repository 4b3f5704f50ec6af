//! WQE decoding: a send WQE read out of the ring (following its wrap) and checked as hardware
//! checks it, with rdma-core's segment types.

use crate::mlx5::seg::{opcode, CE_CQ_UPDATE, INLINE_SEG, MAX_DS, SE_SOLICITED, WQEBB};
use crate::sys;
use std::mem::MaybeUninit;

/// The fence-mode bits of a control segment's `fm_ce_se` (`MLX5_WQE_CTRL_FENCE`, `_INITIATOR_SMALL_FENCE`,
/// `_STRONG_ORDERING` are values of this 3-bit field).
const FM_MASK: u8 = 0xe0;

/// The decoded body of a WQE.
pub(super) struct Decoded {
    pub(super) opcode: u8,
    pub(super) idx: u16,
    pub(super) ds: u32,
    pub(super) signaled: bool,
    /// Solicited event at the receiver.
    pub(super) solicited: bool,
    /// UD: the destination QP and Q_Key of its datagram segment (the address vector).
    pub(super) ud: Option<(u32, u32)>,
    /// Fence (any of the control segment's fence modes): waits for the READs and atomics
    /// before it to complete.
    pub(super) fence: bool,
    pub(super) imm: u32,
    pub(super) raddr: Option<(u64, u32)>,
    pub(super) atomic: Option<(u64, u64)>,
    pub(super) inline: Option<(usize, usize)>, // offset, len in the local copy
    pub(super) sges: [(u64, u32, u32); 16],    // addr, lkey, len
    pub(super) nsge: usize,
}

impl Decoded {
    /// Bytes of the WQE (its WQEBBs) that [`decode`] copied into its buffer.
    pub(super) fn wqe_bytes(&self) -> usize {
        self.ds.div_ceil(4) as usize * WQEBB
    }
}

/// The WQE `d` that [`decode`] copied into `buf`.
///
/// # Safety
/// `d` is what `decode` returned (`Ok`) for `buf`, and `buf` has not been written since.
pub(super) unsafe fn wqe<'b>(d: &Decoded, buf: &'b [MaybeUninit<u8>; 1024]) -> &'b [u8] {
    // SAFETY: decode wrote the first `wqe_bytes()` bytes (at most 1024) of buf for `d` (the
    // caller's contract), so they are initialised.
    unsafe { std::slice::from_raw_parts(buf.as_ptr() as *const u8, d.wqe_bytes().min(1024)) }
}

/// Reads the WQE at `start` (WQEBB index) into `buf` (following the ring's wrap) and decodes it
/// with rdma-core's segment types. `Err(opcode)` for a malformed WQE. On success the first
/// [`Decoded::wqe_bytes`] bytes of `buf` hold the WQE (the rest is left as it was: the buffer
/// is not cleared, which cost a memset of 1 KiB per doorbell); [`wqe`] views them.
pub(super) fn decode(
    sq: *const u8,
    wqe_cnt: u32,
    start: u32,
    qpn: u32,
    buf: &mut [MaybeUninit<u8>; 1024],
    ud: bool,
) -> Result<Decoded, (u8, u16)> {
    let slot = |b: u32| -> *const u8 {
        // SAFETY: the slot index is masked into the ring.
        unsafe { sq.add(((start.wrapping_add(b)) & (wqe_cnt - 1)) as usize * WQEBB) }
    };
    let dst = buf.as_mut_ptr() as *mut u8;
    // SAFETY: the first WQEBB of the WQE is inside the ring; buf has room for it.
    unsafe { std::ptr::copy_nonoverlapping(slot(0), dst, WQEBB) };
    // SAFETY: buf holds the 64 bytes just copied, the 16-byte control segment first.
    let ctrl: sys::mlx5_wqe_ctrl_seg = unsafe { std::ptr::read_unaligned(dst as *const _) };
    let w0 = u32::from_be(ctrl.opmod_idx_opcode);
    let w1 = u32::from_be(ctrl.qpn_ds);
    let op = (w0 & 0xff) as u8;
    let idx = ((w0 >> 8) & 0xffff) as u16;
    let ds = w1 & 0x3f;
    let bad = Err((op, idx));
    if ds == 0 || ds > MAX_DS || (w1 >> 8) != qpn || idx != (start & 0xffff) as u16 {
        return bad;
    }
    let nbb = ds.div_ceil(4);
    if nbb > wqe_cnt {
        return bad;
    }
    for b in 1..nbb {
        // SAFETY: WQEBB b of the WQE (wrapped) into the local copy, within 1024 bytes (nbb <= 16).
        unsafe { std::ptr::copy_nonoverlapping(slot(b), dst.add(b as usize * WQEBB), WQEBB) };
    }
    // SAFETY: the first nbb WQEBBs of buf were just written (nbb <= 16: within its 1024 bytes).
    let buf: &[u8] = unsafe { std::slice::from_raw_parts(dst, nbb as usize * WQEBB) };
    let mut d = Decoded {
        opcode: op,
        idx,
        ds,
        signaled: ctrl.fm_ce_se & CE_CQ_UPDATE != 0,
        solicited: ctrl.fm_ce_se & SE_SOLICITED != 0,
        ud: None,
        fence: ctrl.fm_ce_se & FM_MASK != 0,
        imm: ctrl.imm,
        raddr: None,
        atomic: None,
        inline: None,
        sges: [(0, 0, 0); 16],
        nsge: 0,
    };
    match segments(&mut d, buf, ud) {
        Ok(()) => Ok(d),
        Err(()) => bad,
    }
}

/// The segments after the control segment of the WQE in `buf` (its copy), into `d`; `Err` for
/// a malformed WQE.
fn segments(d: &mut Decoded, buf: &[u8], ud: bool) -> Result<(), ()> {
    let (op, ds) = (d.opcode, d.ds);
    let mut u = 1usize;
    let seg = |u: usize| -> *const u8 { buf[u * 16..].as_ptr() };
    let (wants_raddr, wants_atomic) = match op {
        opcode::NOP | opcode::SEND | opcode::SEND_IMM => (false, false),
        opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM | opcode::RDMA_READ => (true, false),
        opcode::ATOMIC_CS | opcode::ATOMIC_FA => (true, true),
        _ => return Err(()),
    };
    if ud && op != opcode::NOP {
        // the datagram segment: the 48-byte address vector (`struct mlx5_wqe_av`): Q_Key first,
        // the destination QP number at byte 8
        if u + 3 > ds as usize {
            return Err(());
        }
        let av = &buf[u * 16..u * 16 + 48];
        let qkey = u32::from_be_bytes([av[0], av[1], av[2], av[3]]);
        let dqp_dct = u32::from_be_bytes([av[8], av[9], av[10], av[11]]);
        // libmlx5's set_datagram_seg sets MLX5_EXTENDED_UD_AV: the 48-byte address vector the
        // segment is; a WQE without it is not one a provider builds
        if dqp_dct & crate::mlx5::seg::EXTENDED_UD_AV == 0 {
            return Err(());
        }
        let dqp = dqp_dct & 0xff_ffff;
        d.ud = Some((dqp, qkey));
        u += 3;
    }
    if wants_raddr {
        if u >= ds as usize {
            return Err(());
        }
        // SAFETY: a 16-byte segment inside the copied WQE.
        let r: sys::mlx5_wqe_raddr_seg = unsafe { std::ptr::read_unaligned(seg(u) as *const _) };
        d.raddr = Some((u64::from_be(r.raddr), u32::from_be(r.rkey)));
        u += 1;
    }
    if wants_atomic {
        if u >= ds as usize {
            return Err(());
        }
        // SAFETY: as above.
        let a: sys::mlx5_wqe_atomic_seg = unsafe { std::ptr::read_unaligned(seg(u) as *const _) };
        d.atomic = Some((u64::from_be(a.swap_add), u64::from_be(a.compare)));
        u += 1;
    }
    if op == opcode::NOP {
        return Ok(());
    }
    if u < ds as usize {
        // SAFETY: 4 bytes at the start of a segment inside the copy.
        let first: sys::mlx5_wqe_inl_data_seg = unsafe { std::ptr::read_unaligned(seg(u) as *const _) };
        let bc = u32::from_be(first.byte_count);
        if bc & INLINE_SEG != 0 {
            let len = (bc & !INLINE_SEG) as usize;
            if (4 + len).div_ceil(16) != ds as usize - u || op == opcode::RDMA_READ || wants_atomic {
                return Err(());
            }
            d.inline = Some((u * 16 + 4, len));
            return Ok(());
        }
        while u < ds as usize {
            if d.nsge == d.sges.len() {
                return Err(());
            }
            // SAFETY: a 16-byte segment inside the copy.
            let s: sys::mlx5_wqe_data_seg = unsafe { std::ptr::read_unaligned(seg(u) as *const _) };
            d.sges[d.nsge] = (u64::from_be(s.addr), u32::from_be(s.lkey), u32::from_be(s.byte_count));
            d.nsge += 1;
            u += 1;
        }
    }
    if wants_atomic && (d.nsge != 1 || d.sges[0].2 != 8) {
        return Err(());
    }
    Ok(())
}
