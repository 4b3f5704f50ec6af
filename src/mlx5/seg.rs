//! mlx5 WQE segments as `#[repr(C)]` types with big-endian field types, and the constants of the
//! send path. Layouts follow `<infiniband/mlx5dv.h>`; the tests pin sizes and offsets and check
//! them against bindgen's types from the installed header.

use crate::sys;

macro_rules! be_type {
    ($name:ident, $t:ty) => {
        /// A big-endian value as stored in device memory.
        #[repr(transparent)]
        #[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
        pub struct $name($t);
        impl $name {
            /// Stores `v` in big-endian order.
            #[inline(always)]
            pub const fn new(v: $t) -> Self {
                $name(v.to_be())
            }
            /// The value in host order.
            #[inline(always)]
            pub const fn get(self) -> $t {
                <$t>::from_be(self.0)
            }
            /// The raw stored bits (big-endian).
            #[inline(always)]
            pub const fn raw(self) -> $t {
                self.0
            }
        }
        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                write!(f, "{:#x}", self.get())
            }
        }
    };
}
be_type!(Be16, u16);
be_type!(Be32, u32);
be_type!(Be64, u64);

/// Control segment (16 B): opcode and WQE index, QP number and size, flags, immediate.
#[repr(C, align(4))]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct CtrlSeg {
    /// `opmod << 24 | (wqe_index & 0xffff) << 8 | opcode`.
    pub opmod_idx_opcode: Be32,
    /// `qpn << 8 | ds` (size in 16-byte units).
    pub qpn_ds: Be32,
    /// Signature (unused).
    pub signature: u8,
    /// DCI stream channel id (`__be16` at offset 9; unused for RC).
    pub dci_stream_channel_id: [u8; 2],
    /// [`CE_CQ_UPDATE`], [`SE_SOLICITED`], [`FM_FENCE`], ...
    pub fm_ce_se: u8,
    /// Immediate (already in network order) or the rkey to invalidate.
    pub imm: u32,
}

/// Remote address segment (16 B).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct RaddrSeg {
    /// Remote virtual address.
    pub raddr: Be64,
    /// Remote key.
    pub rkey: Be32,
    /// Reserved, zero.
    pub reserved: u32,
}

/// Data (gather/scatter) segment (16 B).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct DataSeg {
    /// Length in bytes.
    pub byte_count: Be32,
    /// Local key.
    pub lkey: Be32,
    /// Local address.
    pub addr: Be64,
}

impl DataSeg {
    /// A gather entry.
    #[inline(always)]
    pub const fn new(addr: u64, lkey: u32, len: u32) -> Self {
        DataSeg {
            byte_count: Be32::new(len),
            lkey: Be32::new(lkey),
            addr: Be64::new(addr),
        }
    }
}

/// Atomic segment (16 B): CAS uses both fields, fetch-and-add puts the addend in `swap_add`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct AtomicSeg {
    /// Swap value (CAS) or addend (FA).
    pub swap_add: Be64,
    /// Compare value (CAS).
    pub compare: Be64,
}

/// The datagram segment of a UD WQE (48 B): the address vector (`struct mlx5_wqe_av`) the
/// provider keeps for an address handle, with the destination QP and Q_Key of the datagram.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct AvSeg {
    /// Q_Key the datagram carries (the first half of the 8-byte key; DC uses all 8).
    pub qkey: Be32,
    /// Reserved (the second half of the key).
    pub key_reserved: u32,
    /// Destination QP number, with [`EXTENDED_UD_AV`] set.
    pub dqp_dct: Be32,
    /// Static rate and service level.
    pub stat_rate_sl: u8,
    /// GRH flag and the source path bits.
    pub fl_mlid: u8,
    /// Destination LID.
    pub rlid: Be16,
    /// Reserved.
    pub reserved0: [u8; 4],
    /// Destination MAC (RoCE).
    pub rmac: [u8; 6],
    /// GRH traffic class.
    pub tclass: u8,
    /// GRH hop limit.
    pub hop_limit: u8,
    /// GRH: the source GID index and flow label.
    pub grh_gid_fl: Be32,
    /// Destination GID.
    pub rgid: [u8; 16],
}

/// `dqp_dct`: the address vector is the extended (48-byte) one.
pub const EXTENDED_UD_AV: u32 = sys::MLX5_EXTENDED_UD_AV;

impl AvSeg {
    /// The provider's address vector of an address handle, as `mlx5dv_init_obj` hands it out.
    pub fn from_raw(av: &sys::mlx5_wqe_av) -> Self {
        // SAFETY: AvSeg has the layout of `struct mlx5_wqe_av` (48 plain bytes, the tests pin
        // the offsets against bindgen's), and every bit pattern is a valid AvSeg.
        unsafe { core::mem::transmute_copy(av) }
    }

    /// This address vector, for a datagram to QP `dqpn` with Q_Key `qkey` (as libmlx5's
    /// `set_datagram_seg` fills the copy in each WQE).
    #[must_use]
    pub const fn to(mut self, dqpn: u32, qkey: u32) -> Self {
        self.dqp_dct = Be32::new((dqpn & 0xff_ffff) | EXTENDED_UD_AV);
        self.qkey = Be32::new(qkey);
        self
    }
}

/// Inline data header (4 B), followed by the bytes, padded to 16.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct InlineHdr {
    /// `len | INLINE_SEG`.
    pub byte_count: Be32,
}

/// Send opcodes (`MLX5_OPCODE_*`).
pub mod opcode {
    use crate::sys;
    /// NOP.
    pub const NOP: u8 = sys::MLX5_OPCODE_NOP as u8;
    /// RDMA WRITE.
    pub const RDMA_WRITE: u8 = sys::MLX5_OPCODE_RDMA_WRITE as u8;
    /// RDMA WRITE with immediate.
    pub const RDMA_WRITE_IMM: u8 = sys::MLX5_OPCODE_RDMA_WRITE_IMM as u8;
    /// SEND.
    pub const SEND: u8 = sys::MLX5_OPCODE_SEND as u8;
    /// SEND with immediate.
    pub const SEND_IMM: u8 = sys::MLX5_OPCODE_SEND_IMM as u8;
    /// RDMA READ.
    pub const RDMA_READ: u8 = sys::MLX5_OPCODE_RDMA_READ as u8;
    /// Atomic compare-and-swap.
    pub const ATOMIC_CS: u8 = sys::MLX5_OPCODE_ATOMIC_CS as u8;
    /// Atomic fetch-and-add.
    pub const ATOMIC_FA: u8 = sys::MLX5_OPCODE_ATOMIC_FA as u8;

    /// A name for reports.
    pub fn name(op: u8) -> &'static str {
        match op {
            NOP => "NOP",
            RDMA_WRITE => "RDMA_WRITE",
            RDMA_WRITE_IMM => "RDMA_WRITE_IMM",
            SEND => "SEND",
            SEND_IMM => "SEND_IMM",
            RDMA_READ => "RDMA_READ",
            ATOMIC_CS => "ATOMIC_CS",
            ATOMIC_FA => "ATOMIC_FA",
            _ => "UNKNOWN",
        }
    }
}

/// `fm_ce_se`: generate a CQE.
pub const CE_CQ_UPDATE: u8 = sys::MLX5_WQE_CTRL_CQ_UPDATE as u8;
/// `fm_ce_se`: solicited event.
pub const SE_SOLICITED: u8 = sys::MLX5_WQE_CTRL_SOLICITED as u8;
/// `fm_ce_se`: fence (wait for earlier reads/atomics).
pub const FM_FENCE: u8 = sys::MLX5_WQE_CTRL_FENCE as u8;
/// `fm_ce_se`: initiator small fence.
pub const FM_SMALL_FENCE: u8 = sys::MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE as u8;
/// Inline flag of the inline header's byte count.
pub const INLINE_SEG: u32 = sys::MLX5_INLINE_SEG;
/// Bytes per send WQE basic block.
pub const WQEBB: usize = sys::MLX5_SEND_WQE_BB as usize;
/// Largest WQE size in 16-byte units (6-bit DS field).
pub const MAX_DS: u32 = 63;
/// Largest WQE BlueFlame can carry.
pub const BF_MAX_BYTES: usize = 256;

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    #[test]
    fn sizes_and_offsets() {
        assert_eq!(size_of::<CtrlSeg>(), 16);
        assert_eq!(core::mem::align_of::<CtrlSeg>(), 4);
        assert_eq!(
            [
                offset_of!(CtrlSeg, opmod_idx_opcode),
                offset_of!(CtrlSeg, qpn_ds),
                offset_of!(CtrlSeg, signature),
                offset_of!(CtrlSeg, dci_stream_channel_id),
                offset_of!(CtrlSeg, fm_ce_se),
                offset_of!(CtrlSeg, imm)
            ],
            [0, 4, 8, 9, 11, 12]
        );
        assert_eq!(size_of::<RaddrSeg>(), 16);
        assert_eq!(
            [
                offset_of!(RaddrSeg, raddr),
                offset_of!(RaddrSeg, rkey),
                offset_of!(RaddrSeg, reserved)
            ],
            [0, 8, 12]
        );
        assert_eq!(size_of::<DataSeg>(), 16);
        assert_eq!(
            [
                offset_of!(DataSeg, byte_count),
                offset_of!(DataSeg, lkey),
                offset_of!(DataSeg, addr)
            ],
            [0, 4, 8]
        );
        assert_eq!(size_of::<AtomicSeg>(), 16);
        assert_eq!(
            [offset_of!(AtomicSeg, swap_add), offset_of!(AtomicSeg, compare)],
            [0, 8]
        );
        assert_eq!(size_of::<InlineHdr>(), 4);
        assert_eq!(size_of::<AvSeg>(), 48);
        assert_eq!(core::mem::align_of::<AvSeg>(), 4);
    }

    #[test]
    fn agree_with_bindgen_layouts() {
        assert_eq!(size_of::<CtrlSeg>(), size_of::<sys::mlx5_wqe_ctrl_seg>());
        assert_eq!(
            offset_of!(CtrlSeg, fm_ce_se),
            offset_of!(sys::mlx5_wqe_ctrl_seg, fm_ce_se)
        );
        assert_eq!(offset_of!(CtrlSeg, imm), offset_of!(sys::mlx5_wqe_ctrl_seg, imm));
        assert_eq!(size_of::<RaddrSeg>(), size_of::<sys::mlx5_wqe_raddr_seg>());
        assert_eq!(offset_of!(RaddrSeg, rkey), offset_of!(sys::mlx5_wqe_raddr_seg, rkey));
        assert_eq!(size_of::<DataSeg>(), size_of::<sys::mlx5_wqe_data_seg>());
        assert_eq!(offset_of!(DataSeg, lkey), offset_of!(sys::mlx5_wqe_data_seg, lkey));
        assert_eq!(offset_of!(DataSeg, addr), offset_of!(sys::mlx5_wqe_data_seg, addr));
        assert_eq!(size_of::<AtomicSeg>(), size_of::<sys::mlx5_wqe_atomic_seg>());
        assert_eq!(
            offset_of!(AtomicSeg, compare),
            offset_of!(sys::mlx5_wqe_atomic_seg, compare)
        );
        assert_eq!(size_of::<InlineHdr>(), size_of::<sys::mlx5_wqe_inl_data_seg>());
        assert_eq!(size_of::<AvSeg>(), size_of::<sys::mlx5_wqe_av>());
        assert_eq!(size_of::<AvSeg>(), size_of::<sys::mlx5_wqe_datagram_seg>());
        assert_eq!(
            [
                offset_of!(AvSeg, dqp_dct),
                offset_of!(AvSeg, stat_rate_sl),
                offset_of!(AvSeg, fl_mlid),
                offset_of!(AvSeg, rlid),
                offset_of!(AvSeg, rmac),
                offset_of!(AvSeg, tclass),
                offset_of!(AvSeg, hop_limit),
                offset_of!(AvSeg, grh_gid_fl),
                offset_of!(AvSeg, rgid)
            ],
            [
                offset_of!(sys::mlx5_wqe_av, dqp_dct),
                offset_of!(sys::mlx5_wqe_av, stat_rate_sl),
                offset_of!(sys::mlx5_wqe_av, fl_mlid),
                offset_of!(sys::mlx5_wqe_av, rlid),
                offset_of!(sys::mlx5_wqe_av, rmac),
                offset_of!(sys::mlx5_wqe_av, tclass),
                offset_of!(sys::mlx5_wqe_av, hop_limit),
                offset_of!(sys::mlx5_wqe_av, grh_gid_fl),
                offset_of!(sys::mlx5_wqe_av, rgid)
            ]
        );
        assert_eq!(offset_of!(AvSeg, qkey), offset_of!(sys::mlx5_wqe_av, key));
        // from the provider's bytes, then the destination filled in as libmlx5 does
        let mut raw = sys::mlx5_wqe_av {
            rlid: 0x1234u16.to_be(),
            stat_rate_sl: 0x05,
            ..Default::default()
        };
        raw.rgid[15] = 9;
        let av = AvSeg::from_raw(&raw).to(0x0abc_def1, 0x1111_1111);
        assert_eq!((av.rlid.get(), av.stat_rate_sl, av.rgid[15]), (0x1234, 5, 9));
        assert_eq!(av.dqp_dct.get(), 0x80bc_def1);
        assert_eq!(av.qkey.get(), 0x1111_1111);
    }

    #[test]
    fn big_endian_storage() {
        let v = Be32::new(0x0102_0304);
        // SAFETY: Be32 is a transparent u32: 4 plain bytes.
        let b: [u8; 4] = unsafe { core::mem::transmute(v) };
        assert_eq!(b, [1, 2, 3, 4]);
        assert_eq!(v.get(), 0x0102_0304);
        assert_eq!(Be64::new(5).get(), 5);
        assert_eq!(Be16::new(0xabcd).raw(), 0xabcdu16.to_be());
        assert_eq!(opcode::name(opcode::ATOMIC_FA), "ATOMIC_FA");
        assert_eq!(
            (opcode::SEND, opcode::RDMA_READ, CE_CQ_UPDATE, FM_FENCE),
            (0x0a, 0x10, 0x08, 0x80)
        );
    }
}
