//! The `verbs` and `wr` backends: prepared `ibv_send_wr` chains posted with `ibv_post_send`, or
//! the same operations through `ibv_wr_start` .. `ibv_wr_complete`, completions from
//! `ibv_poll_cq`. Both call the provider exactly as a C program including the headers does.

use super::{Backend, BackendError, BackendKind, MemView, OpKind, Polled, IMM};
use crate::sys;
use crate::sys::inline::{poll_cq, post_recv, post_send, WrOps};
use crate::verbs::cq::Completion;
use crate::verbs::nic_clock::TsCompletion;
use crate::verbs::{Ah, CompChannel, Cq, Ctx, Mr, Qp, RemoteBuf, VerbsError};

/// Most WQEs one post may chain.
pub const MAX_POSTLIST: usize = 64;

/// One end on a verbs device. Aligned to two cache lines, as `DirectEnd` (the two ends of a
/// pair are written by two threads and sit side by side).
#[repr(align(128))]
pub struct VerbsEnd {
    kind: BackendKind,
    wrs: Vec<sys::ibv_send_wr>,
    sges: Vec<sys::ibv_sge>,
    rwrs: Vec<sys::ibv_recv_wr>,
    rsges: Vec<sys::ibv_sge>,
    wc: [sys::ibv_wc; 16],
    /// A CQ made with completion timestamps (`--anatomy`): its completions, polled with
    /// `ibv_start_poll` .. `ibv_end_poll`, land here.
    ts: Option<Vec<TsCompletion>>,
    wr: Option<(WrOps, *mut sys::ibv_qp_ex)>,
    remote: RemoteBuf,
    view: MemView,
    rx_off: usize,
    max_inline: u32,
    device: String,
    /// On model0 (through libmlx5): the model's QP, its execution mode and the last send
    /// doorbell it delivered. libmlx5 rings a register page nothing watches, so the model executes
    /// where a scenario lets it: right after the timed post, and when polling.
    model: ModelHook,
    // owners, dropped after the raw pointers above are no longer used
    qp: Qp,
    cq: Cq,
    mr: Mr,
    /// The CQ's completion channel (`-e`), dropped after the CQ.
    chan: Option<CompChannel>,
    /// UD: where the datagrams go (the peer's address handle, QP number and Q_Key).
    ud: Option<(Ah, u32, u32)>,
}

// SAFETY: the raw pointers point into this end's own QP, CQ and vectors; the end is used by one
// thread at a time.
unsafe impl Send for VerbsEnd {}

impl VerbsEnd {
    /// Wraps a connected QP (its send and receive CQ is `cq`), the local buffer and the peer's.
    /// `kind` is `Verbs` or `Wr` (the QP must then have been created with the `ibv_wr_*` API).
    pub fn new(kind: BackendKind, qp: Qp, cq: Cq, mr: Mr, remote: RemoteBuf) -> Result<Self, BackendError> {
        let name = kind.as_str();
        let wr = match kind {
            BackendKind::Verbs => None,
            BackendKind::Wr => Some(qp.wr_ops().ok_or_else(|| BackendError::Unsupported {
                backend: name,
                why: "the QP was not created with the ibv_wr_* API".into(),
            })?),
            BackendKind::Direct => {
                return Err(BackendError::Invalid {
                    backend: name,
                    why: "not a verbs backend".into(),
                })
            }
        };
        // SAFETY: the MR's buffer lives as long as `mr`, which this end owns.
        let view = unsafe { MemView::new(mr.as_ptr(), mr.len()) };
        let rx_off = mr.len() / 2;
        let max_inline = qp.granted_caps().max_inline_data;
        let device = cq.context().name().to_string();
        let mut me = VerbsEnd {
            kind,
            wrs: vec![sys::ibv_send_wr::default(); MAX_POSTLIST],
            sges: vec![sys::ibv_sge::default(); MAX_POSTLIST],
            rwrs: vec![sys::ibv_recv_wr::default(); MAX_POSTLIST],
            rsges: vec![sys::ibv_sge::default(); MAX_POSTLIST],
            wc: [sys::ibv_wc::default(); 16],
            ts: cq.has_timestamps().then(|| Vec::with_capacity(16)),
            wr,
            remote,
            view,
            rx_off,
            max_inline,
            model: ModelHook::of(&qp, &device),
            device,
            qp,
            cq,
            mr,
            chan: None,
            ud: None,
        };
        let (sp, rp) = (me.sges.as_mut_ptr(), me.rsges.as_mut_ptr());
        for i in 0..MAX_POSTLIST {
            // SAFETY: i < MAX_POSTLIST: inside the vectors, whose heap buffers never move.
            me.wrs[i].sg_list = unsafe { sp.add(i) };
            me.wrs[i].num_sge = 1;
            me.wrs[i].wr_id = i as u64;
            // SAFETY: as above.
            me.rwrs[i].sg_list = unsafe { rp.add(i) };
            me.rwrs[i].num_sge = 1;
            me.rwrs[i].wr_id = i as u64;
        }
        Ok(me)
    }

    /// This end's QP is UD: its datagrams go through `ah` to QP `qpn` with Q_Key `qkey`.
    pub fn with_ud(mut self, ah: Ah, qpn: u32, qkey: u32) -> Self {
        self.ud = Some((ah, qpn, qkey));
        self
    }

    /// This end waits for completion events on `ch`, the channel its CQ was made on.
    pub fn with_events(mut self, ch: CompChannel) -> Self {
        self.chan = Some(ch);
        self
    }

    fn err(&self, verb: &'static str, rc: i32, what: &str) -> BackendError {
        verbs_err(self.kind, verb, rc, &self.device, self.qp.qpn(), what)
    }

    fn check(&self, op: OpKind, len: u32, n: u32, inline: bool) -> Result<(), BackendError> {
        let backend = self.kind.as_str();
        if n == 0 || n as usize > MAX_POSTLIST {
            return Err(BackendError::Invalid {
                backend,
                why: format!("postlist {n} outside 1..={MAX_POSTLIST}"),
            });
        }
        if len as usize > self.rx_off || len as u64 > self.remote.len / 2 {
            return Err(BackendError::Invalid {
                backend,
                why: format!("size {len} exceeds the buffers"),
            });
        }
        if inline && len > self.max_inline {
            return Err(BackendError::Invalid {
                backend,
                why: format!("inline size {len} exceeds the QP's max_inline_data {}", self.max_inline),
            });
        }
        if op.is_atomic() && (len != 8 || inline) {
            return Err(BackendError::Invalid {
                backend,
                why: "atomics move 8 bytes, never inline".into(),
            });
        }
        if inline && op == OpKind::Read {
            return Err(BackendError::Invalid {
                backend,
                why: "RDMA READ cannot be inline".into(),
            });
        }
        Ok(())
    }

    fn post_verbs(
        &mut self,
        op: OpKind,
        len: u32,
        n: u32,
        inline: bool,
        signal_last: bool,
    ) -> Result<(), BackendError> {
        let base = self.mr.addr();
        let (lkey, raddr, rkey) = (self.mr.lkey(), self.remote.addr + self.remote.len / 2, self.remote.rkey);
        let n = n as usize;
        let wp = self.wrs.as_mut_ptr();
        for i in 0..n {
            let s = &mut self.sges[i];
            s.lkey = lkey;
            s.length = len;
            s.addr = if op == OpKind::Read {
                base + self.rx_off as u64
            } else {
                base
            };
            let w = &mut self.wrs[i];
            w.send_flags = if inline { sys::IBV_SEND_INLINE } else { 0 };
            if signal_last && i == n - 1 {
                w.send_flags |= sys::IBV_SEND_SIGNALED;
            }
            w.next = if i + 1 < n {
                // SAFETY: i + 1 < n <= MAX_POSTLIST: the next WR inside the vector.
                unsafe { wp.add(i + 1) }
            } else {
                std::ptr::null_mut()
            };
            match op {
                OpKind::Write | OpKind::Read | OpKind::WriteImm => {
                    w.opcode = match op {
                        OpKind::Write => sys::IBV_WR_RDMA_WRITE,
                        OpKind::WriteImm => sys::IBV_WR_RDMA_WRITE_WITH_IMM,
                        _ => sys::IBV_WR_RDMA_READ,
                    };
                    let r = if op == OpKind::Read { self.remote.addr } else { raddr };
                    w.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr: r, rkey };
                    if op == OpKind::WriteImm {
                        w.__bindgen_anon_1.imm_data = IMM.to_be();
                    }
                }
                OpKind::Send | OpKind::SendImm => {
                    w.opcode = if op == OpKind::Send {
                        sys::IBV_WR_SEND
                    } else {
                        w.__bindgen_anon_1.imm_data = IMM.to_be();
                        sys::IBV_WR_SEND_WITH_IMM
                    };
                    if let Some((ah, qpn, qkey)) = &self.ud {
                        w.wr.ud = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_3 {
                            ah: ah.as_ptr(),
                            remote_qpn: *qpn,
                            remote_qkey: *qkey,
                        };
                    }
                }
                OpKind::FetchAdd | OpKind::CmpSwap => {
                    w.opcode = if op == OpKind::FetchAdd {
                        sys::IBV_WR_ATOMIC_FETCH_AND_ADD
                    } else {
                        sys::IBV_WR_ATOMIC_CMP_AND_SWP
                    };
                    w.wr.atomic = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
                        remote_addr: raddr,
                        compare_add: if op == OpKind::FetchAdd { 1 } else { 0 },
                        swap: 0,
                        rkey,
                    };
                }
            }
        }
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live QP; the chain of n prepared WRs and their SGEs (inside this end's
        // vectors) point into the registered buffer, bounds checked by `check`.
        let rc = unsafe { post_send(self.qp.as_ptr(), self.wrs.as_mut_ptr(), &mut bad) };
        if rc != 0 {
            return Err(self.err("ibv_post_send", rc, op.as_str()));
        }
        Ok(())
    }

    fn post_wr(&mut self, op: OpKind, len: u32, n: u32, inline: bool, signal_last: bool) -> Result<(), BackendError> {
        let Some((ops, q)) = self.wr else {
            return Err(BackendError::Unsupported {
                backend: "wr",
                why: "no ibv_wr_* API on this QP".into(),
            });
        };
        let present = match op {
            OpKind::Write => ops.rdma_write.is_some(),
            OpKind::WriteImm => ops.rdma_write_imm.is_some(),
            OpKind::Read => ops.rdma_read.is_some(),
            OpKind::FetchAdd => ops.atomic_fetch_add.is_some(),
            OpKind::CmpSwap => ops.atomic_cmp_swp.is_some(),
            _ => true,
        };
        if !present {
            return Err(BackendError::Unsupported {
                backend: "wr",
                why: format!(
                    "the QP has no ibv_wr_* {} (a UC QP has no READ or atomics)",
                    op.as_str()
                ),
            });
        }
        let base = self.mr.addr();
        let (lkey, raddr, rkey) = (self.mr.lkey(), self.remote.addr + self.remote.len / 2, self.remote.rkey);
        let rx = base + self.rx_off as u64;
        // SAFETY: q is this end's live extended QP and `ops` its entry points; between start and
        // complete only builders and setters run; addresses are inside the registered buffers.
        let rc = unsafe {
            (ops.start)(q);
            for i in 0..n {
                (*q).wr_id = i as u64;
                (*q).wr_flags = if signal_last && i == n - 1 {
                    sys::IBV_SEND_SIGNALED
                } else {
                    0
                } | if inline { sys::IBV_SEND_INLINE } else { 0 };
                match op {
                    OpKind::Write => {
                        if let Some(f) = ops.rdma_write {
                            f(q, rkey, raddr)
                        }
                    }
                    // READ and the atomics are present: checked above
                    OpKind::Read => {
                        if let Some(f) = ops.rdma_read {
                            f(q, rkey, self.remote.addr)
                        }
                    }
                    OpKind::Send => (ops.send)(q),
                    OpKind::WriteImm => {
                        if let Some(f) = ops.rdma_write_imm {
                            f(q, rkey, raddr, IMM.to_be())
                        }
                    }
                    OpKind::SendImm => (ops.send_imm)(q, IMM.to_be()),
                    OpKind::FetchAdd => {
                        if let Some(f) = ops.atomic_fetch_add {
                            f(q, rkey, raddr, 1)
                        }
                    }
                    OpKind::CmpSwap => {
                        if let Some(f) = ops.atomic_cmp_swp {
                            f(q, rkey, raddr, 0, 0)
                        }
                    }
                }
                if let (Some((ah, qpn, qkey)), Some(f)) = (&self.ud, ops.set_ud_addr) {
                    f(q, ah.as_ptr(), *qpn, *qkey);
                }
                if inline {
                    (ops.set_inline_data)(q, base as *mut _, len as usize);
                } else {
                    (ops.set_sge)(q, lkey, if op == OpKind::Read { rx } else { base }, len);
                }
            }
            (ops.complete)(q)
        };
        if rc != 0 {
            return Err(self.err("ibv_wr_complete", rc, op.as_str()));
        }
        Ok(())
    }
}

impl Backend for VerbsEnd {
    fn kind(&self) -> BackendKind {
        self.kind
    }

    fn qpn(&self) -> u32 {
        self.qp.qpn()
    }

    fn placement(&self) -> crate::verbs::MrPlacement {
        self.mr.placement()
    }

    fn describe_qp(&self) -> String {
        match self.qp.state() {
            Ok(s) => format!("{} QP {:#x} on {}: {s}", self.kind.as_str(), self.qp.qpn(), self.device),
            Err(e) => format!(
                "{} QP {:#x} on {}: ibv_query_qp failed: {e}",
                self.kind.as_str(),
                self.qp.qpn(),
                self.device
            ),
        }
    }

    fn has_events(&self) -> bool {
        self.chan.is_some()
    }

    fn event_fd(&self) -> Option<i32> {
        self.chan.as_ref().map(|c| c.fd())
    }

    fn arm(&mut self) -> Result<(), BackendError> {
        if self.chan.is_none() {
            return Err(BackendError::Unsupported {
                backend: self.kind.as_str(),
                why: "this end has no completion channel (-e)".into(),
            });
        }
        self.cq.arm(false).map_err(|e| BackendError::Verbs {
            backend: self.kind.as_str(),
            source: Box::new(e),
        })
    }

    fn wait_event(&mut self, timeout: std::time::Duration) -> Result<bool, BackendError> {
        let Some(ch) = &self.chan else {
            return Err(BackendError::Unsupported {
                backend: self.kind.as_str(),
                why: "this end has no completion channel (-e)".into(),
            });
        };
        ch.wait(&self.cq, timeout).map_err(|e| BackendError::Verbs {
            backend: self.kind.as_str(),
            source: Box::new(e),
        })
    }

    #[inline]
    fn post(&mut self, op: OpKind, len: u32, n: u32, inline: bool, signal_last: bool) -> Result<(), BackendError> {
        self.check(op, len, n, inline)?;
        match self.kind {
            BackendKind::Wr => self.post_wr(op, len, n, inline, signal_last),
            _ => self.post_verbs(op, len, n, inline, signal_last),
        }
    }

    fn post_recv(&mut self, len: u32, n: u32) -> Result<(), BackendError> {
        // chains of at most MAX_POSTLIST receives
        let mut left = n;
        while left > MAX_POSTLIST as u32 {
            self.post_recv_chain(len, MAX_POSTLIST as u32)?;
            left -= MAX_POSTLIST as u32;
        }
        self.post_recv_chain(len, left)?;
        self.model.receives_posted();
        Ok(())
    }

    #[inline]
    fn poll(&mut self) -> Result<Polled, BackendError> {
        self.model.before_poll();
        self.poll_cq()
    }

    #[inline]
    fn after_post(&mut self) {
        self.model.after_post();
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

impl VerbsEnd {
    fn post_recv_chain(&mut self, len: u32, n: u32) -> Result<(), BackendError> {
        let n = n as usize;
        if n == 0 || n > MAX_POSTLIST || len as usize > self.view.len() - self.rx_off {
            return Err(BackendError::Invalid {
                backend: self.kind.as_str(),
                why: format!("{n} receives of {len} bytes do not fit"),
            });
        }
        let rx = self.mr.addr() + self.rx_off as u64;
        let rp = self.rwrs.as_mut_ptr();
        for i in 0..n {
            self.rsges[i] = sys::ibv_sge {
                addr: rx,
                length: len,
                lkey: self.mr.lkey(),
            };
            self.rwrs[i].next = if i + 1 < n {
                // SAFETY: i + 1 < n <= MAX_POSTLIST: the next receive WR inside the vector.
                unsafe { rp.add(i + 1) }
            } else {
                std::ptr::null_mut()
            };
        }
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live QP; the chain of prepared receive WRs points into the registered buffer.
        let rc = unsafe { post_recv(self.qp.as_ptr(), self.rwrs.as_mut_ptr(), &mut bad) };
        if rc != 0 {
            return Err(self.err("ibv_post_recv", rc, "receive"));
        }
        Ok(())
    }

    #[inline]
    fn poll_cq(&mut self) -> Result<Polled, BackendError> {
        if self.ts.is_some() {
            return self.poll_cq_ts();
        }
        // SAFETY: a live CQ and room for 16 completions.
        let n = unsafe { poll_cq(self.cq.as_ptr(), 16, self.wc.as_mut_ptr()) };
        if n < 0 {
            return Err(self.err("ibv_poll_cq", n, "poll"));
        }
        let mut p = Polled::default();
        for wc in &self.wc[..n as usize] {
            if wc.status != sys::IBV_WC_SUCCESS {
                return Err(wc_error(self.kind, wc, &self.device));
            }
            self.count(&mut p, wc.opcode, (wc.qp_num, wc.src_qp, wc.byte_len))?;
        }
        Ok(p)
    }

    /// Counts a good completion of `opcode` into `p`: a receive (its QP, sending QP and length;
    /// on UD only the peer's datagrams), or a send.
    #[inline(always)]
    fn count(&self, p: &mut Polled, opcode: u32, (qpn, src, len): (u32, u32, u32)) -> Result<(), BackendError> {
        if opcode & sys::IBV_WC_RECV == 0 {
            p.sends += 1;
            return Ok(());
        }
        if let Some((_, peer, _)) = &self.ud {
            if src != *peer {
                return Err(super::stray_datagram(self.kind.as_str(), qpn, src, *peer));
            }
        }
        p.recvs += 1;
        p.recv_len = len;
        Ok(())
    }

    /// [`VerbsEnd::poll_cq`] on a CQ made with completion timestamps: `ibv_start_poll`,
    /// `ibv_next_poll`, `ibv_end_poll`, each completion read with `ibv_wc_read_*` and its
    /// `ibv_wc_read_completion_ts`.
    fn poll_cq_ts(&mut self) -> Result<Polled, BackendError> {
        let Some(mut buf) = self.ts.take() else {
            return Ok(Polled::default());
        };
        buf.clear();
        let r = self.count_ts(&mut buf);
        self.ts = Some(buf);
        r
    }

    /// Polls into `buf` and counts its completions, the last receive's timestamp kept.
    fn count_ts(&self, buf: &mut Vec<TsCompletion>) -> Result<Polled, BackendError> {
        let wrap = |e| BackendError::Verbs {
            backend: self.kind.as_str(),
            source: Box::new(e),
        };
        self.cq.poll_ts_here(buf, 16).map_err(wrap)?;
        let mut p = Polled::default();
        for t in buf.iter() {
            let c = t.c.check(&self.device).map_err(wrap)?;
            self.count(&mut p, c.opcode, (c.qp_num, t.src_qp, c.byte_len))?;
            if c.opcode & sys::IBV_WC_RECV != 0 {
                p.recv_ts = Some(t.timestamp);
            }
        }
        Ok(p)
    }
}

/// model0 through libmlx5: the model's QP, its execution mode and the last send doorbell
/// record it delivered. libmlx5 rings a register page nothing watches, so the model executes
/// where the caller lets it: right after a post (unless deferred) and before a poll. Elsewhere
/// (another device, another OS) it does nothing.
pub(crate) struct ModelHook {
    #[cfg(target_os = "linux")]
    q: Option<(std::sync::Weak<crate::model::ModelQp>, crate::model::ExecMode, u32)>,
}

impl ModelHook {
    /// The hook of `qp` on the device named `device` (nothing unless it is model0's).
    pub(crate) fn of(qp: &Qp, device: &str) -> ModelHook {
        #[cfg(target_os = "linux")]
        {
            let q = (device == crate::uverbs::IBDEV)
                .then(|| crate::uverbs::model_qp(qp.qpn()))
                .flatten()
                .and_then(|w| {
                    let mode = w.upgrade()?.exec_mode();
                    Some((w, mode, 0))
                });
            ModelHook { q }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (qp, device);
            ModelHook {}
        }
    }

    /// Before a poll: what was rung executes (in deferred mode, everything not yet executed).
    #[inline]
    pub(crate) fn before_poll(&mut self) {
        #[cfg(target_os = "linux")]
        if let Some((w, mode, seen)) = &mut self.q {
            if let Some(q) = w.upgrade() {
                match mode {
                    crate::model::ExecMode::Deferred => q.progress(),
                    _ => q.deliver_if_rung(seen),
                }
            }
        }
    }

    /// Right after a post: what was rung executes, unless the model defers it.
    #[inline]
    pub(crate) fn after_post(&mut self) {
        #[cfg(target_os = "linux")]
        if let Some((w, mode, seen)) = &mut self.q {
            if *mode != crate::model::ExecMode::Deferred {
                if let Some(q) = w.upgrade() {
                    q.deliver_if_rung(seen);
                }
            }
        }
    }

    /// After receives were posted through libmlx5.
    pub(crate) fn receives_posted(&self) {
        #[cfg(target_os = "linux")]
        if let Some(q) = self.q.as_ref().and_then(|m| m.0.upgrade()) {
            q.receives_posted();
        }
    }
}

/// The error of verb `verb` returning `rc` on `device`'s QP `qpn` (`what`: the operation).
pub(crate) fn verbs_err(
    kind: BackendKind,
    verb: &'static str,
    rc: i32,
    device: &str,
    qpn: u32,
    what: &str,
) -> BackendError {
    let ctx = Ctx::dev(device).qpn(qpn).detail(what.to_string());
    let source = crate::verbs::error::check_rc(rc, verb, || ctx)
        .err()
        .unwrap_or(VerbsError::Invalid {
            ctx: Ctx::dev(device),
            why: format!("{verb} failed"),
        });
    BackendError::Verbs {
        backend: kind.as_str(),
        source: Box::new(source),
    }
}

/// An error completion as the verbs error it is (its status, vendor error, QP and operation).
pub(crate) fn wc_error(kind: BackendKind, wc: &sys::ibv_wc, device: &str) -> BackendError {
    let source = Completion::from_wc(wc)
        .check(device)
        .err()
        .unwrap_or(VerbsError::Invalid {
            ctx: Ctx::dev(device).qpn(wc.qp_num),
            why: "completion error".into(),
        });
    BackendError::Verbs {
        backend: kind.as_str(),
        source: Box::new(source),
    }
}
