//! Posting: the send operations and flags, one WR through `ibv_post_send`/`ibv_post_recv` or a
//! batch through `ibv_wr_start`..`ibv_wr_complete`, each checked against what the QP was
//! granted before the verb.

use super::Qp;
use crate::sys;
use crate::verbs::error::{check_rc, Result, VerbsError};
use crate::verbs::mr::{RemoteBuf, Sge};

/// A send operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// SEND.
    Send,
    /// SEND with immediate (host order).
    SendImm(u32),
    /// RDMA WRITE.
    Write(RemoteBuf),
    /// RDMA WRITE with immediate (host order).
    WriteImm(RemoteBuf, u32),
    /// RDMA READ into the local SGEs.
    Read(RemoteBuf),
    /// 64-bit fetch-and-add; the old value lands in the (8-byte) local SGE.
    FetchAdd {
        /// Remote 8-byte aligned word.
        remote: RemoteBuf,
        /// Value to add.
        add: u64,
    },
    /// 64-bit compare-and-swap; the old value lands in the (8-byte) local SGE.
    CmpSwap {
        /// Remote 8-byte aligned word.
        remote: RemoteBuf,
        /// Expected value.
        compare: u64,
        /// New value.
        swap: u64,
    },
}

impl Op {
    fn name(&self) -> &'static str {
        match self {
            Op::Send => "SEND",
            Op::SendImm(_) => "SEND_WITH_IMM",
            Op::Write(_) => "RDMA_WRITE",
            Op::WriteImm(..) => "RDMA_WRITE_WITH_IMM",
            Op::Read(_) => "RDMA_READ",
            Op::FetchAdd { .. } => "ATOMIC_FETCH_AND_ADD",
            Op::CmpSwap { .. } => "ATOMIC_CMP_AND_SWP",
        }
    }
}

/// Send flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SendFlags {
    /// Generate a completion.
    pub signaled: bool,
    /// Copy the payload into the WQE.
    pub inline: bool,
    /// Wait for earlier reads/atomics first.
    pub fence: bool,
    /// Solicited event at the receiver.
    pub solicited: bool,
}

impl SendFlags {
    /// Only `signaled`.
    pub const SIGNALED: SendFlags = SendFlags {
        signaled: true,
        inline: false,
        fence: false,
        solicited: false,
    };

    pub(super) fn raw(self) -> u32 {
        let mut f = 0;
        if self.signaled {
            f |= sys::IBV_SEND_SIGNALED;
        }
        if self.inline {
            f |= sys::IBV_SEND_INLINE;
        }
        if self.fence {
            f |= sys::IBV_SEND_FENCE;
        }
        if self.solicited {
            f |= sys::IBV_SEND_SOLICITED;
        }
        f
    }
}
impl Qp {
    fn check_local(&self, op: &Op, sges: &[Sge<'_>], flags: SendFlags) -> Result<u32> {
        let total: u64 = sges.iter().map(|s| s.len() as u64).sum();
        if sges.len() > self.granted.max_send_sge as usize {
            return Err(VerbsError::Invalid {
                ctx: self.ctx(),
                why: format!("{} SGEs, the QP allows {}", sges.len(), self.granted.max_send_sge),
            });
        }
        if flags.inline && total > self.granted.max_inline_data as u64 {
            return Err(VerbsError::Invalid {
                ctx: self.ctx(),
                why: format!(
                    "inline payload {total} B exceeds the QP's max_inline_data {}",
                    self.granted.max_inline_data
                ),
            });
        }
        if matches!(op, Op::FetchAdd { .. } | Op::CmpSwap { .. }) && (sges.len() != 1 || total != 8) {
            return Err(VerbsError::Invalid {
                ctx: self.ctx(),
                why: "atomics need exactly one 8-byte SGE".into(),
            });
        }
        Ok(total as u32)
    }

    /// Posts one send WR through `ibv_post_send`.
    pub fn post_send(&mut self, wr_id: u64, op: Op, sges: &[Sge<'_>], flags: SendFlags) -> Result<()> {
        self.check_local(&op, sges, flags)?;
        let mut sg: Vec<sys::ibv_sge> = sges.iter().map(|s| s.raw).collect();
        let mut wr = sys::ibv_send_wr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: sg.as_mut_ptr(),
            num_sge: sg.len() as i32,
            send_flags: flags.raw(),
            ..Default::default()
        };
        match op {
            Op::Send => wr.opcode = sys::IBV_WR_SEND,
            Op::SendImm(imm) => {
                wr.opcode = sys::IBV_WR_SEND_WITH_IMM;
                wr.__bindgen_anon_1.imm_data = imm.to_be();
            }
            Op::Write(r) | Op::WriteImm(r, _) | Op::Read(r) => {
                wr.opcode = match op {
                    Op::Write(_) => sys::IBV_WR_RDMA_WRITE,
                    Op::WriteImm(_, imm) => {
                        wr.__bindgen_anon_1.imm_data = imm.to_be();
                        sys::IBV_WR_RDMA_WRITE_WITH_IMM
                    }
                    _ => sys::IBV_WR_RDMA_READ,
                };
                wr.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
                    remote_addr: r.addr,
                    rkey: r.rkey,
                };
            }
            Op::FetchAdd { remote, add } => {
                wr.opcode = sys::IBV_WR_ATOMIC_FETCH_AND_ADD;
                wr.wr.atomic = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
                    remote_addr: remote.addr,
                    compare_add: add,
                    swap: 0,
                    rkey: remote.rkey,
                };
            }
            Op::CmpSwap { remote, compare, swap } => {
                wr.opcode = sys::IBV_WR_ATOMIC_CMP_AND_SWP;
                wr.wr.atomic = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
                    remote_addr: remote.addr,
                    compare_add: compare,
                    swap,
                    rkey: remote.rkey,
                };
            }
        }
        let mut bad: *mut sys::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: live QP; wr and its SGE array live across the call; the SGEs point into live
        // MRs (Sge borrows them) and were bounds-checked.
        let rc = unsafe { sys::inline::post_send(self.qp, &mut wr, &mut bad) };
        check_rc(rc, "ibv_post_send", || {
            self.ctx().detail(format!("{} wr_id {wr_id}", op.name()))
        })
    }

    /// Posts one receive WR through `ibv_post_recv`.
    pub fn post_recv(&mut self, wr_id: u64, sges: &[Sge<'_>]) -> Result<()> {
        let mut sg: Vec<sys::ibv_sge> = sges.iter().map(|s| s.raw).collect();
        let mut wr = sys::ibv_recv_wr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: sg.as_mut_ptr(),
            num_sge: sg.len() as i32,
        };
        let mut bad: *mut sys::ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: live QP; wr and its SGE array live across the call; SGEs are into live MRs.
        let rc = unsafe { sys::inline::post_recv(self.qp, &mut wr, &mut bad) };
        check_rc(rc, "ibv_post_recv", || self.ctx().detail(format!("wr_id {wr_id}")))
    }

    /// Posts a batch through the `ibv_wr_*` API: `ibv_wr_start`, per WR one builder call and
    /// one data setter (`ibv_wr_set_sge`, `_sge_list`, `_inline_data` or `_inline_data_list`),
    /// then `ibv_wr_complete`.
    pub fn wr_post(&mut self, batch: &[WrBatch<'_, '_>]) -> Result<()> {
        let (ops, _) = self.wr_ops().ok_or_else(|| VerbsError::Invalid {
            ctx: self.ctx(),
            why: "QP was created without the ibv_wr_* API (extended = false)".into(),
        })?;
        for b in batch {
            self.check_local(&b.op, b.sges, b.flags)?;
            let missing = match b.op {
                Op::Write(_) => ops.rdma_write.is_none(),
                Op::WriteImm(..) => ops.rdma_write_imm.is_none(),
                Op::Read(_) => ops.rdma_read.is_none(),
                Op::FetchAdd { .. } => ops.atomic_fetch_add.is_none(),
                Op::CmpSwap { .. } => ops.atomic_cmp_swp.is_none(),
                _ => false,
            };
            if missing {
                return Err(VerbsError::Invalid {
                    ctx: self.ctx().qpn(self.qpn()),
                    why: format!(
                        "{}: the QP has no such ibv_wr_* operation (a UC QP has no READ or atomics)",
                        b.op.name()
                    ),
                });
            }
        }
        let q = self.qpx;
        // SAFETY: q is the live extended view of this QP, and `ops` its entry points; between
        // start and complete only builder/setter calls follow; every SGE is into a live MR and
        // the inline sources (the same SGEs' memory) stay valid during the calls.
        unsafe {
            (ops.start)(q);
            for b in batch {
                (*q).wr_id = b.wr_id;
                (*q).wr_flags = b.flags.raw();
                match b.op {
                    Op::Send => (ops.send)(q),
                    Op::SendImm(imm) => (ops.send_imm)(q, imm.to_be()),
                    Op::Write(r) => {
                        if let Some(f) = ops.rdma_write {
                            f(q, r.rkey, r.addr)
                        }
                    }
                    Op::WriteImm(r, imm) => {
                        if let Some(f) = ops.rdma_write_imm {
                            f(q, r.rkey, r.addr, imm.to_be())
                        }
                    }
                    // each present: checked above
                    Op::Read(r) => {
                        if let Some(f) = ops.rdma_read {
                            f(q, r.rkey, r.addr)
                        }
                    }
                    Op::FetchAdd { remote, add } => {
                        if let Some(f) = ops.atomic_fetch_add {
                            f(q, remote.rkey, remote.addr, add)
                        }
                    }
                    Op::CmpSwap { remote, compare, swap } => {
                        if let Some(f) = ops.atomic_cmp_swp {
                            f(q, remote.rkey, remote.addr, compare, swap)
                        }
                    }
                }
                if b.flags.inline && b.sges.len() == 1 {
                    // One buffer: ibv_wr_set_inline_data (rxe's _list variant in rdma-core 44
                    // never sums the lengths and sends 0 bytes; see docs/testing.md).
                    let s = b.sges[0].raw;
                    (ops.set_inline_data)(q, s.addr as *mut _, s.length as usize);
                } else if b.flags.inline {
                    let bufs: Vec<sys::ibv_data_buf> = b
                        .sges
                        .iter()
                        .map(|s| sys::ibv_data_buf {
                            addr: s.raw.addr as *mut _,
                            length: s.raw.length as usize,
                        })
                        .collect();
                    (ops.set_inline_data_list)(q, bufs.len(), bufs.as_ptr());
                } else if b.sges.len() == 1 {
                    let s = b.sges[0].raw;
                    (ops.set_sge)(q, s.lkey, s.addr, s.length);
                } else {
                    let sg: Vec<sys::ibv_sge> = b.sges.iter().map(|s| s.raw).collect();
                    (ops.set_sge_list)(q, sg.len(), sg.as_ptr());
                }
            }
            let rc = (ops.complete)(q);
            check_rc(rc, "ibv_wr_complete", || {
                self.ctx().detail(format!("batch of {}", batch.len()))
            })
        }
    }
}

/// One WR of an `ibv_wr_*` batch.
#[derive(Clone, Copy)]
pub struct WrBatch<'a, 'm> {
    /// Work request id.
    pub wr_id: u64,
    /// Operation.
    pub op: Op,
    /// Local memory.
    pub sges: &'a [Sge<'m>],
    /// Flags.
    pub flags: SendFlags,
}
