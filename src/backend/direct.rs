//! The `direct` backend: our WQE builders, send/receive queues and CQE polling, on a ConnectX
//! (`verbs::direct::DirectQp`) or on model0 (`model::DirectModelQp`).

use super::{Backend, BackendError, BackendKind, MemView, OpKind, Polled, IMM};
use crate::mlx5::cq::{cqe_op, Cq, Cqe};
use crate::mlx5::rq::Rq;
use crate::mlx5::seg::{AvSeg, DataSeg};
use crate::mlx5::sq::{Prepared, RingHook, Sq};
use crate::mlx5::wqe::{Payload, Wqe};
use crate::verbs::RemoteBuf;

/// Queues the direct backend drives.
pub trait DirectQueues {
    /// The doorbell route.
    type Hook: RingHook;
    /// The send queue, receive queue and CQ.
    fn parts(&mut self) -> (&mut Sq<Self::Hook>, &mut Rq<Self::Hook>, &mut Cq);
    /// Lets a device that executes only when asked (model0 in deferred or after-post mode)
    /// execute what was rung. Nothing on hardware.
    fn progress(&mut self) {}
    /// Right after a timed post call: a device that executes after the post (model0 in
    /// after-post mode) executes now. Nothing on hardware.
    fn after_post(&mut self) {}
    /// The QP's state as the device reads it back.
    fn describe(&self) -> String {
        "QP state not readable".into()
    }
    /// The QP's number.
    fn qpn(&self) -> u32;
}

impl DirectQueues for crate::model::DirectModelQp {
    fn describe(&self) -> String {
        format!("direct {}", self.qp.debug_state())
    }
    fn qpn(&self) -> u32 {
        self.qp.qpn()
    }
    type Hook = crate::model::ModelDoorbell;
    fn parts(&mut self) -> (&mut Sq<Self::Hook>, &mut Rq<Self::Hook>, &mut Cq) {
        (&mut self.sq, &mut self.rq, &mut self.cq)
    }
    fn progress(&mut self) {
        // a WQE retried against a responder that does not answer (not ready, gone, its
        // process dead) is tried again at each poll, until the retry budget runs out (deferred
        // mode's progress does that already)
        match self.qp.exec_mode() {
            crate::model::ExecMode::Deferred => self.qp.progress(),
            crate::model::ExecMode::AfterPost => {
                self.qp.deliver();
                if self.qp.retrying() {
                    self.qp.progress();
                }
            }
            crate::model::ExecMode::Inline => {
                if self.qp.retrying() {
                    self.qp.progress();
                }
            }
        }
    }
    fn after_post(&mut self) {
        if self.qp.exec_mode() == crate::model::ExecMode::AfterPost {
            self.qp.deliver();
        }
    }
}

impl DirectQueues for crate::verbs::direct::DirectQp {
    type Hook = crate::mlx5::sq::NoHook;
    fn parts(&mut self) -> (&mut Sq<Self::Hook>, &mut Rq<Self::Hook>, &mut Cq) {
        (&mut self.sq, &mut self.rq, &mut self.cq)
    }
    fn describe(&self) -> String {
        format!("direct QP {:#x}: {}", self.qpn(), self.state())
    }
    fn qpn(&self) -> u32 {
        crate::verbs::direct::DirectQp::qpn(self)
    }
}

/// The registered local buffer, whoever registered it.
pub enum LocalBuf {
    /// A verbs memory region.
    Verbs(crate::verbs::Mr),
    /// A model0 memory region.
    Model(crate::model::ModelMr),
}

impl LocalBuf {
    /// Where the buffer sits. model0's regions are shared-memory files (tmpfs, 4 KiB pages),
    /// placed from the address this process maps them at.
    pub fn placement(&self) -> crate::verbs::MrPlacement {
        match self {
            LocalBuf::Verbs(m) => m.placement(),
            LocalBuf::Model(m) => crate::verbs::MrPlacement::at(m.as_ptr() as u64, false),
        }
    }

    fn parts(&self) -> (u64, u32, usize) {
        match self {
            LocalBuf::Verbs(m) => (m.addr(), m.lkey(), m.len()),
            LocalBuf::Model(m) => (m.addr(), m.lkey(), m.len()),
        }
    }
}

/// One end on the direct path. Aligned to two cache lines: the two ends of a pair sit side by
/// side in memory and are written by two threads, so they must not share a line (or the
/// adjacent line the prefetcher pairs with it); unaligned, a run's latency depended on where the
/// allocator put the pair (p50 190 or 400 ns on model0, from one process to the next).
#[repr(align(128))]
pub struct DirectEnd<Q: DirectQueues> {
    q: Q,
    view: MemView,
    tx: [DataSeg; 1],
    rx_sge: [DataSeg; 1],
    base: u64,
    lkey: u32,
    rx_off: usize,
    remote: RemoteBuf,
    max_inline: u32,
    cqes: [Cqe; 16],
    prepared: Option<(OpKind, u32, bool, Prepared)>,
    /// UD: the address vector of the peer (its QP number and Q_Key filled in).
    av: Option<AvSeg>,
    _buf: LocalBuf,
}

impl<Q: DirectQueues> DirectEnd<Q> {
    /// Wraps connected queues, the local buffer and the peer's; `max_inline` is the QP's limit.
    pub fn new(q: Q, buf: LocalBuf, remote: RemoteBuf, max_inline: u32) -> Self {
        let (base, lkey, len) = buf.parts();
        // SAFETY: the buffer lives as long as `_buf`, owned by this end.
        let view = unsafe { MemView::new(base as *mut u8, len) };
        DirectEnd {
            q,
            view,
            tx: [DataSeg::new(base, lkey, 0)],
            rx_sge: [DataSeg::new(base + (len / 2) as u64, lkey, 0)],
            base,
            lkey,
            rx_off: len / 2,
            remote,
            max_inline,
            cqes: [Cqe::default(); 16],
            prepared: None,
            av: None,
            _buf: buf,
        }
    }

    /// This end's QP is UD: every WQE carries the datagram segment `av` (the address vector to
    /// the peer, with its QP number and Q_Key: [`AvSeg::to`]).
    pub fn with_datagram(mut self, av: AvSeg) -> Self {
        self.av = Some(av);
        self.prepared = None;
        self
    }

    /// Every post that is not the repeat of a prepared WQE: checks, then prepares the WQE (or,
    /// an inline one too large for an image, builds and posts it).
    #[inline(never)]
    fn post_slow(&mut self, op: OpKind, len: u32, n: u32, inline: bool, signal_last: bool) -> Result<(), BackendError> {
        let backend = "direct";
        if n == 0 || n > 64 {
            return Err(BackendError::Invalid {
                backend,
                why: format!("postlist {n} outside 1..=64"),
            });
        }
        if len as usize > self.rx_off || len as u64 > self.remote.len / 2 {
            return Err(BackendError::Invalid {
                backend,
                why: format!("size {len} exceeds the buffers"),
            });
        }
        if inline && (len > self.max_inline || !op.carries_payload()) {
            return Err(BackendError::Invalid {
                backend,
                why: format!("inline {} of {len} bytes not possible", op.as_str()),
            });
        }
        if op.is_atomic() && len != 8 {
            return Err(BackendError::Invalid {
                backend,
                why: "atomics move 8 bytes".into(),
            });
        }
        let raddr = self.remote.addr + self.remote.len / 2;
        let rkey = self.remote.rkey;
        self.tx[0] = DataSeg::new(self.base, self.lkey, len);
        let rx = [DataSeg::new(self.base + self.rx_off as u64, self.lkey, len)];
        // SAFETY: the inline source is the first `len` bytes of our registered buffer (len is
        // within it, checked above); the device does not write that half.
        let src = unsafe { std::slice::from_raw_parts(self.base as *const u8, len as usize) };
        let payload = if inline {
            Payload::Inline(src)
        } else {
            Payload::Gather(&self.tx)
        };
        let wqe = match op {
            OpKind::Write => Wqe::write(raddr, rkey, payload),
            OpKind::Send => Wqe::send(payload),
            OpKind::WriteImm => Wqe::write_imm(raddr, rkey, IMM, payload),
            OpKind::SendImm => Wqe::send_imm(IMM, payload),
            OpKind::Read => Wqe::read(self.remote.addr, rkey, &rx),
            OpKind::FetchAdd => Wqe::atomic_fa(raddr, rkey, 1, &self.tx),
            OpKind::CmpSwap => Wqe::atomic_cs(raddr, rkey, 0, 0, &self.tx),
        };
        let wqe = match &self.av {
            Some(av) => wqe.to(av),
            None => wqe,
        };
        // the WQE is prepared once per operation, size and payload kind, as the verbs backends
        // prepare their work requests: gather entries point at the data, which the device reads;
        // an inline image takes the payload's bytes at every post (`Prepared::set_inline`). An
        // inline WQE too large for an image (over 4 WQEBBs) is built at every post.
        if !matches!(&self.prepared, Some((o, l, i, _)) if *o == op && *l == len && *i == inline) {
            let qpn = self.q.parts().0.qpn();
            match Prepared::new(&wqe, qpn, self.max_inline) {
                Ok(prep) => self.prepared = Some((op, len, inline, prep)),
                Err(crate::mlx5::sq::SqError::TooLarge { .. }) if inline => {
                    let (sq, _, _) = self.q.parts();
                    for i in 0..n {
                        let w = if signal_last && i == n - 1 { wqe.signaled() } else { wqe };
                        sq.post(&w).map_err(BackendError::Sq)?;
                    }
                    sq.ring();
                    return Ok(());
                }
                Err(e) => return Err(BackendError::Sq(e)),
            }
        }
        self.post_prepared(n, signal_last)
    }

    /// Posts the prepared WQE `n` times (its inline payload taken from the buffer now), one
    /// doorbell.
    #[inline(always)]
    fn post_prepared(&mut self, n: u32, signal_last: bool) -> Result<(), BackendError> {
        let Some((_, _, inline, prep)) = &mut self.prepared else {
            return Err(BackendError::Invalid {
                backend: "direct",
                why: "no prepared WQE to post".into(),
            });
        };
        let (sq, _, _) = self.q.parts();
        if *inline {
            // SAFETY: the inline payload is the first `len` bytes of our registered buffer's
            // first half (len checked against it when the WQE was prepared); the post may read
            // a few bytes past the payload in that half. The device writes that half only for
            // an atomic's result (its 8 bytes at the start), and atomics take no inline payload:
            // a run posts one operation, so no atomic is in flight while an inline post reads.
            let src = unsafe { std::slice::from_raw_parts(self.base as *const u8, self.rx_off) };
            if n == 1 {
                sq.post_prepared_ring_inline(prep, src, signal_last)
                    .map_err(BackendError::Sq)?;
            } else {
                sq.post_prepared_n_inline(prep, src, n, signal_last)
                    .map_err(BackendError::Sq)?;
                sq.ring();
            }
        } else if n == 1 {
            // the latency path: one WQE, one doorbell
            sq.post_prepared_ring(prep, signal_last).map_err(BackendError::Sq)?;
        } else {
            sq.post_prepared_n(prep, n, signal_last).map_err(BackendError::Sq)?;
            sq.ring();
        }
        Ok(())
    }

    /// The queues (for connection and knobs).
    pub fn queues(&mut self) -> &mut Q {
        &mut self.q
    }
}

impl<Q: DirectQueues> Backend for DirectEnd<Q> {
    fn kind(&self) -> BackendKind {
        BackendKind::Direct
    }

    fn describe_qp(&self) -> String {
        self.q.describe()
    }

    fn qpn(&self) -> u32 {
        self.q.qpn()
    }

    fn placement(&self) -> crate::verbs::MrPlacement {
        self._buf.placement()
    }

    #[inline(always)]
    fn post(&mut self, op: OpKind, len: u32, n: u32, inline: bool, signal_last: bool) -> Result<(), BackendError> {
        // The repeated post of a prepared WQE (checked when it was prepared): nothing else on
        // the path, as a provider posts a work request it was handed.
        if let Some((o, l, i, _)) = &self.prepared {
            if *o == op && *l == len && *i == inline && (1..=64).contains(&n) {
                return self.post_prepared(n, signal_last);
            }
        }
        self.post_slow(op, len, n, inline, signal_last)
    }

    fn post_recv(&mut self, len: u32, n: u32) -> Result<(), BackendError> {
        if len as usize > self.view.len() - self.rx_off {
            return Err(BackendError::Invalid {
                backend: "direct",
                why: format!("receives of {len} bytes do not fit"),
            });
        }
        self.rx_sge[0] = DataSeg::new(self.base + self.rx_off as u64, self.lkey, len);
        let sge = self.rx_sge;
        let (_, rq, _) = self.q.parts();
        for _ in 0..n {
            rq.post(&sge).map_err(BackendError::Sq)?;
        }
        rq.ring();
        Ok(())
    }

    #[inline]
    fn poll(&mut self) -> Result<Polled, BackendError> {
        self.q.progress();
        let (sq, rq, cq) = self.q.parts();
        let n = cq.poll(&mut self.cqes).map_err(BackendError::Cqe)?;
        let mut p = Polled::default();
        let mut last_req = None;
        for c in &self.cqes[..n] {
            if c.opcode == cqe_op::REQ {
                p.sends += 1;
                last_req = Some(c.wqe_counter);
            } else {
                if c.scatter != 0 {
                    // the payload went into the CQE, where this path never reads: the QP was
                    // created without scatter-to-CQE, so the device is not doing what it was told
                    return Err(BackendError::Invalid {
                        backend: "direct",
                        why: format!(
                            "QP {:#x}: receive completion with its {} B payload scattered into the CQE \
                             (scatter-to-CQE), on a QP created without it",
                            c.qpn, c.byte_cnt
                        ),
                    });
                }
                if let Some(av) = &self.av {
                    let peer = av.dqp_dct.get() & 0xff_ffff;
                    if c.src_qp != peer {
                        return Err(super::stray_datagram("direct", c.qpn, c.src_qp, peer));
                    }
                }
                p.recvs += 1;
                p.recv_len = c.byte_cnt;
                p.recv_ts = Some(c.timestamp);
                rq.retire(c.wqe_counter);
            }
        }
        if let Some(w) = last_req {
            sq.retire(w);
        }
        Ok(p)
    }

    #[inline]
    fn after_post(&mut self) {
        self.q.after_post();
    }

    fn mem(&self) -> &MemView {
        &self.view
    }

    fn max_inline(&self) -> u32 {
        self.max_inline
    }

    fn rx_offset(&self) -> usize {
        self.rx_off
    }
}
