//! One builder per opcode (UD: a SEND with [`Wqe::to`]'s datagram segment). A [`Wqe`] is a small value (control words, optional remote and
//! atomic segments, and the payload by reference); `sq.rs` writes it into the ring. Builders
//! compute the size (DS) and the control flags; nothing here touches device memory.

use super::seg::{
    opcode, AtomicSeg, AvSeg, Be32, Be64, CtrlSeg, DataSeg, RaddrSeg, CE_CQ_UPDATE, FM_FENCE, SE_SOLICITED,
};

/// The data a WQE carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Payload<'a> {
    /// No data (NOP).
    None,
    /// Gather entries, one data segment each.
    Gather(&'a [DataSeg]),
    /// Bytes copied into the WQE after a 4-byte header, padded to 16.
    Inline(&'a [u8]),
}

impl Payload<'_> {
    /// Size in 16-byte units.
    #[inline(always)]
    pub const fn ds(&self) -> u32 {
        match self {
            Payload::None => 0,
            // zero-length entries take no segment, an empty inline payload no header, as
            // libmlx5 builds them (providers/mlx5/qp.c: set_data_ptr_seg only for a non-zero
            // length; set_data_inl_seg writes nothing for 0 bytes)
            Payload::Gather(s) => {
                let (mut n, mut i) = (0, 0);
                while i < s.len() {
                    if s[i].byte_count.get() != 0 {
                        n += 1;
                    }
                    i += 1;
                }
                n
            }
            Payload::Inline([]) => 0,
            Payload::Inline(b) => (4 + b.len() as u32).div_ceil(16),
        }
    }

    /// Total bytes described.
    pub fn bytes(&self) -> u64 {
        match self {
            Payload::None => 0,
            Payload::Gather(s) => s.iter().map(|d| d.byte_count.get() as u64).sum(),
            Payload::Inline(b) => b.len() as u64,
        }
    }
}

/// A work queue entry, ready to be written by [`super::sq::Sq::post`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wqe<'a> {
    /// `MLX5_OPCODE_*`.
    pub opcode: u8,
    /// Fence / CQE / solicited flags.
    pub fm_ce_se: u8,
    /// Immediate as stored (network order).
    pub imm: u32,
    /// UD: the datagram segment (the address vector to the destination), right after the
    /// control segment.
    pub datagram: Option<&'a AvSeg>,
    /// Remote address segment (RDMA and atomic opcodes).
    pub raddr: Option<RaddrSeg>,
    /// Atomic segment (atomic opcodes).
    pub atomic: Option<AtomicSeg>,
    /// The data.
    pub payload: Payload<'a>,
}

const fn raddr(addr: u64, rkey: u32) -> Option<RaddrSeg> {
    Some(RaddrSeg {
        raddr: Be64::new(addr),
        rkey: Be32::new(rkey),
        reserved: 0,
    })
}

impl<'a> Wqe<'a> {
    const fn base(opcode: u8, payload: Payload<'a>) -> Self {
        Wqe {
            opcode,
            fm_ce_se: 0,
            imm: 0,
            datagram: None,
            raddr: None,
            atomic: None,
            payload,
        }
    }

    /// NOP (control segment only).
    pub const fn nop() -> Self {
        Self::base(opcode::NOP, Payload::None)
    }

    /// SEND.
    pub const fn send(payload: Payload<'a>) -> Self {
        Self::base(opcode::SEND, payload)
    }

    /// SEND with immediate (`imm` in host order).
    pub const fn send_imm(imm: u32, payload: Payload<'a>) -> Self {
        let mut w = Self::base(opcode::SEND_IMM, payload);
        w.imm = imm.to_be();
        w
    }

    /// RDMA WRITE to `remote_addr`/`rkey`.
    pub const fn write(remote_addr: u64, rkey: u32, payload: Payload<'a>) -> Self {
        let mut w = Self::base(opcode::RDMA_WRITE, payload);
        w.raddr = raddr(remote_addr, rkey);
        w
    }

    /// RDMA WRITE with immediate (`imm` in host order).
    pub const fn write_imm(remote_addr: u64, rkey: u32, imm: u32, payload: Payload<'a>) -> Self {
        let mut w = Self::base(opcode::RDMA_WRITE_IMM, payload);
        w.raddr = raddr(remote_addr, rkey);
        w.imm = imm.to_be();
        w
    }

    /// RDMA READ from `remote_addr`/`rkey` into `local`.
    pub const fn read(remote_addr: u64, rkey: u32, local: &'a [DataSeg]) -> Self {
        let mut w = Self::base(opcode::RDMA_READ, Payload::Gather(local));
        w.raddr = raddr(remote_addr, rkey);
        w
    }

    /// 64-bit compare-and-swap; the old value lands in `result` (one 8-byte entry).
    pub const fn atomic_cs(remote_addr: u64, rkey: u32, compare: u64, swap: u64, result: &'a [DataSeg]) -> Self {
        let mut w = Self::base(opcode::ATOMIC_CS, Payload::Gather(result));
        w.raddr = raddr(remote_addr, rkey);
        w.atomic = Some(AtomicSeg {
            swap_add: Be64::new(swap),
            compare: Be64::new(compare),
        });
        w
    }

    /// 64-bit fetch-and-add; the old value lands in `result` (one 8-byte entry).
    pub const fn atomic_fa(remote_addr: u64, rkey: u32, add: u64, result: &'a [DataSeg]) -> Self {
        let mut w = Self::base(opcode::ATOMIC_FA, Payload::Gather(result));
        w.raddr = raddr(remote_addr, rkey);
        w.atomic = Some(AtomicSeg {
            swap_add: Be64::new(add),
            compare: Be64::new(0),
        });
        w
    }

    /// A datagram (UD) through the address vector `av` (its destination QP and Q_Key filled in:
    /// [`AvSeg::to`]).
    #[must_use]
    pub const fn to(mut self, av: &'a AvSeg) -> Self {
        self.datagram = Some(av);
        self
    }

    /// Requests a CQE for this WQE.
    #[must_use]
    pub const fn signaled(mut self) -> Self {
        self.fm_ce_se |= CE_CQ_UPDATE;
        self
    }

    /// Fences this WQE behind earlier RDMA READs and atomics.
    #[must_use]
    pub const fn fence(mut self) -> Self {
        self.fm_ce_se |= FM_FENCE;
        self
    }

    /// Raises a solicited event at the receiver (SEND, WRITE_IMM).
    #[must_use]
    pub const fn solicited(mut self) -> Self {
        self.fm_ce_se |= SE_SOLICITED;
        self
    }

    /// Size in 16-byte units: control + datagram (3) + remote address + atomic + payload.
    #[inline(always)]
    pub const fn ds(&self) -> u32 {
        1 + 3 * self.datagram.is_some() as u32
            + self.raddr.is_some() as u32
            + self.atomic.is_some() as u32
            + self.payload.ds()
    }

    /// Number of 64-byte basic blocks it occupies.
    #[inline(always)]
    pub const fn wqebbs(&self) -> u32 {
        self.ds().div_ceil(4)
    }

    /// The control segment for a WQE starting at `wqe_index` on QP `qpn`.
    #[inline(always)]
    pub const fn ctrl(&self, wqe_index: u16, qpn: u32) -> CtrlSeg {
        self.ctrl_of_size(wqe_index, qpn, self.ds() & 0x3f)
    }

    /// As [`Wqe::ctrl`], its size known: `ds` 16-byte units (at most 63, which the caller has
    /// checked).
    #[inline(always)]
    pub const fn ctrl_of_size(&self, wqe_index: u16, qpn: u32, ds: u32) -> CtrlSeg {
        CtrlSeg {
            opmod_idx_opcode: Be32::new(((wqe_index as u32) << 8) | self.opcode as u32),
            qpn_ds: Be32::new((qpn << 8) | ds),
            signature: 0,
            dci_stream_channel_id: [0, 0],
            fm_ce_se: self.fm_ce_se,
            imm: self.imm,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_per_opcode() {
        let one = [DataSeg::new(0x1000, 7, 64)];
        assert_eq!(Wqe::send(Payload::Gather(&one)).ds(), 2);
        assert_eq!(Wqe::write(0, 0, Payload::Gather(&one)).ds(), 3);
        assert_eq!(Wqe::read(0, 0, &one).ds(), 3);
        assert_eq!(Wqe::atomic_fa(0, 0, 1, &one).ds(), 4);
        assert_eq!(Wqe::atomic_cs(0, 0, 1, 2, &one).wqebbs(), 1);
        assert_eq!(Wqe::nop().ds(), 1);
        // inline WRITE of n bytes = 32 + align(n + 4, 16) bytes; 0 bytes: no inline segment at
        // all, as libmlx5 (tests/oracle.rs compares the two)
        for n in [1usize, 12, 13, 60, 100, 220] {
            let data = [0u8; 256];
            let w = Wqe::write(0, 0, Payload::Inline(&data[..n]));
            assert_eq!(w.ds() as usize * 16, 32 + (n + 4).div_ceil(16) * 16, "n={n}");
        }
        assert_eq!(Wqe::write(0, 0, Payload::Inline(&[])).ds(), 2);
        // zero-length gather entries take no segment
        let mixed = [
            DataSeg::new(0x1000, 7, 0),
            DataSeg::new(0x2000, 7, 8),
            DataSeg::new(0x3000, 7, 0),
        ];
        assert_eq!(Wqe::send(Payload::Gather(&mixed)).ds(), 2);
        assert_eq!(Wqe::read(0, 0, &mixed[..1]).ds(), 2);
        let data = [0u8; 200];
        assert_eq!(Wqe::send(Payload::Inline(&data)).wqebbs(), 4); // 16 + 208 = 224 B
                                                                   // UD: the 48-byte datagram segment after the control segment
        let av = AvSeg::default().to(5, 6);
        assert_eq!(Wqe::send(Payload::Gather(&one)).to(&av).ds(), 5);
        assert_eq!(Wqe::send(Payload::Gather(&one)).to(&av).wqebbs(), 2);
        assert_eq!(Wqe::send_imm(1, Payload::Inline(&data[..12])).to(&av).ds(), 5);
        assert_eq!(Wqe::send(Payload::Inline(&[])).to(&av).wqebbs(), 1);
    }

    #[test]
    fn control_words() {
        let one = [DataSeg::new(0x1000, 7, 64)];
        let w = Wqe::send_imm(0xdead_beef, Payload::Gather(&one))
            .signaled()
            .solicited()
            .fence();
        let c = w.ctrl(0x1234, 0xabcdef);
        assert_eq!(c.opmod_idx_opcode.get(), 0x0012_340b);
        assert_eq!(c.qpn_ds.get(), 0xabcd_ef02);
        assert_eq!(c.fm_ce_se, 0x08 | 0x02 | 0x80);
        assert_eq!(c.imm, 0xdead_beefu32.to_be());
        let fa = Wqe::atomic_fa(0x10, 5, 3, &one);
        assert_eq!(fa.atomic.unwrap().swap_add.get(), 3);
        let cs = Wqe::atomic_cs(0x10, 5, 1, 2, &one);
        assert_eq!(
            (cs.atomic.unwrap().compare.get(), cs.atomic.unwrap().swap_add.get()),
            (1, 2)
        );
        assert_eq!(cs.raddr.unwrap().rkey.get(), 5);
        assert_eq!(Payload::Gather(&one).bytes(), 64);
    }
}
