//! Setting up the direct mlx5 path on a real device: a QP and CQ created through verbs (the QP in
//! a parent domain with a thread domain, for a dedicated BlueFlame register), handed over with
//! `mlx5dv_init_obj`, validated, and wrapped in [`crate::mlx5::sq::Sq`] and
//! [`crate::mlx5::cq::Cq`]. Once handed over, the QP is posted to only directly (never mixed with
//! `ibv_post_send`) and the CQ is polled only directly.

use super::cq::Cq;
use super::error::{check_rc, Ctx, Result, VerbsError};
use super::mr::Pd;
use super::qp::{Ah, ConnectOpts, Endpoint, Granted, Qp, QpCaps};
use super::PortInfo;
use crate::mlx5::cq::{Cq as DirectCq, CqConfig};
use crate::mlx5::rq::{Rq, RqConfig};
use crate::mlx5::seg::AvSeg;
use crate::mlx5::sq::{DbMode, NoHook, Sq, SqConfig};
use crate::sys;

/// A QP and its CQ driven by the direct path. Fields drop in order: the direct views first, then
/// the QP, its CQ and the parent domain.
pub struct DirectQp {
    /// The send queue.
    pub sq: Sq<NoHook>,
    /// The receive queue.
    pub rq: Rq<NoHook>,
    /// The completion queue (send and receive).
    pub cq: DirectCq,
    /// UD: the address handles to the peers, whose address vectors the WQEs copy.
    ahs: Vec<Ah>,
    qp: Qp,
    _cq: Cq,
    _pd: Pd,
    shared: bool,
}

/// The refusal for a device mlx5dv does not drive.
pub fn require_mlx5(ctx: &super::Context) -> Result<()> {
    if ctx.is_mlx5() {
        return Ok(());
    }
    let provider = ctx.query().map(|i| i.provider).unwrap_or_else(|_| "another".into());
    Err(VerbsError::Invalid {
        ctx: Ctx::dev(ctx.name()),
        why: format!(
            "the direct backend needs an mlx5 device; {} uses the {} provider",
            ctx.name(),
            provider
        ),
    })
}

impl DirectQp {
    /// Creates the CQ (`cqe` entries) and the RC QP in a thread-domain parent domain of `pd`
    /// (a BlueFlame register of its own), and takes both over with `mlx5dv_init_obj`. When no
    /// dedicated register is left (`ibv_alloc_td` fails), the QP is made in `pd` itself, on a
    /// register libmlx5 may share with other QPs of the context, and rung with the 8-byte
    /// doorbell only (a BlueFlame copy into a shared register could interleave with another
    /// poster's): [`DirectQp::shared_register`] says so.
    pub fn new(pd: &Pd, caps: QpCaps, cqe: u32, mode: DbMode) -> Result<Self> {
        Self::with_type(pd, caps, cqe, mode, sys::IBV_QPT_RC)
    }

    /// As [`DirectQp::new`], of type `qp_type` (`IBV_QPT_RC` or `IBV_QPT_UC`, whose WQEs are
    /// built alike, or `IBV_QPT_UD`: [`DirectQp::connect_ud`], [`DirectQp::datagrams_to`]).
    pub fn with_type(pd: &Pd, caps: QpCaps, cqe: u32, mode: DbMode, qp_type: u32) -> Result<Self> {
        let ctx = pd.context();
        require_mlx5(ctx)?;
        let (parent, mode, shared) = match pd.with_thread_domain() {
            Ok(p) => (p, mode, false),
            Err(VerbsError::Verb {
                verb: "ibv_alloc_td", ..
            }) => (pd.clone(), DbMode::Db, true),
            Err(e) => return Err(e),
        };
        let cq = Cq::new(ctx, cqe)?;
        // the direct path reads receives from their buffers: no scatter-to-CQE
        let qp = Qp::new_mlx5_no_scatter(&parent, &cq, &cq, caps, qp_type)?;
        let qpn = qp.qpn();
        let mut dv_qp = sys::mlx5dv_qp::default();
        let mut dv_cq = sys::mlx5dv_cq::default();
        let mut obj = sys::mlx5dv_obj::default();
        obj.qp.in_ = qp.as_ptr();
        obj.qp.out = &mut dv_qp;
        obj.cq.in_ = cq.as_ptr();
        obj.cq.out = &mut dv_cq;
        // SAFETY: live QP and CQ of an mlx5 device; `out` pointers are valid locals.
        let rc = unsafe { sys::mlx5dv_init_obj(&mut obj, (sys::MLX5DV_OBJ_QP | sys::MLX5DV_OBJ_CQ) as u64) };
        check_rc(rc, "mlx5dv_init_obj", || Ctx::dev(ctx.name()).qpn(qpn))?;
        let bad = |why: String| VerbsError::Invalid {
            ctx: Ctx::dev(ctx.name()).qpn(qpn),
            why,
        };
        let sq_cfg = SqConfig {
            buf: dv_qp.sq.buf.cast(),
            wqe_cnt: dv_qp.sq.wqe_cnt,
            stride: dv_qp.sq.stride,
            dbrec: dv_qp.dbrec,
            bf_reg: dv_qp.bf.reg.cast(),
            bf_size: dv_qp.bf.size,
            qpn,
            max_inline: qp.granted_caps().max_inline_data,
        };
        // SAFETY: the ring, doorbell record and register come from mlx5dv_init_obj for this QP,
        // which we keep alive (field `qp`) for as long as the Sq exists and post to only here.
        let sq = unsafe { Sq::new(sq_cfg, mode, NoHook) }.map_err(|e| bad(e.to_string()))?;
        let cq_cfg = CqConfig {
            buf: dv_cq.buf.cast(),
            cqe_cnt: dv_cq.cqe_cnt,
            cqe_size: dv_cq.cqe_size,
            dbrec: dv_cq.dbrec,
            cqn: dv_cq.cqn,
        };
        // SAFETY: the CQ buffer and doorbell record come from mlx5dv_init_obj for this CQ, kept
        // alive (field `_cq`) and polled only here.
        let dcq = unsafe { DirectCq::new(cq_cfg) }.map_err(|e| bad(format!("unusable CQ: {}", e.0)))?;
        let rq_cfg = RqConfig {
            buf: dv_qp.rq.buf.cast(),
            wqe_cnt: dv_qp.rq.wqe_cnt,
            stride: dv_qp.rq.stride,
            dbrec: dv_qp.dbrec,
            qpn,
        };
        // SAFETY: the receive ring and doorbell record come from mlx5dv_init_obj for this QP,
        // kept alive (field `qp`) and posted to only here.
        let rq = unsafe { Rq::new(rq_cfg, NoHook) }.map_err(|e| bad(e.to_string()))?;
        Ok(DirectQp {
            rq,
            sq,
            cq: dcq,
            ahs: Vec::new(),
            qp,
            _cq: cq,
            _pd: parent,
            shared,
        })
    }

    /// Whether no dedicated BlueFlame register was left (`ibv_alloc_td` failed): the QP then
    /// shares one and is rung with the 8-byte doorbell whatever mode was asked.
    pub fn shared_register(&self) -> bool {
        self.shared
    }

    /// The QP's state as the device reads it back (`ibv_query_qp`).
    pub fn state(&self) -> String {
        match self.qp.state() {
            Ok(s) => s.to_string(),
            Err(e) => format!("ibv_query_qp failed: {e}"),
        }
    }

    /// The verbs QP underneath (for queries and tests; never posted to through verbs).
    pub fn verbs_qp(&self) -> &Qp {
        &self.qp
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.qp.qpn()
    }

    /// The QP's granted `max_inline_data`.
    pub fn max_inline(&self) -> u32 {
        self.qp.granted_caps().max_inline_data
    }

    /// Our side of the connection.
    pub fn endpoint(&self, port: &PortInfo, gid_index: Option<u8>) -> Result<Endpoint> {
        self.qp.endpoint(port, gid_index)
    }

    /// RESET→INIT→RTR→RTS, as [`Qp::connect`].
    pub fn connect(&mut self, port: &PortInfo, opts: &ConnectOpts, remote: &Endpoint) -> Result<Vec<Granted>> {
        self.qp.connect(port, opts, remote)
    }

    /// RESET→RTS with the connection manager's attributes, as [`Qp::connect_cm`].
    pub fn connect_cm(
        &mut self,
        port: &PortInfo,
        access: crate::verbs::MrAccess,
        cm: &crate::verbs::cm::CmAttrs,
        mtu_cap: Option<u32>,
    ) -> Result<sys::ibv_qp_attr> {
        self.qp.connect_cm(port, access, cm, mtu_cap)
    }

    /// UD: RESET→INIT→RTR→RTS with Q_Key `qkey`, as [`Qp::connect_ud`].
    pub fn connect_ud(&mut self, port: &PortInfo, pkey_index: u16, qkey: u32) -> Result<()> {
        self.qp.connect_ud(port, pkey_index, qkey)
    }

    /// UD: an address handle in `pd` to `remote` (kept with this QP, beside any made before for
    /// other peers; service level and traffic
    /// class `sl_tclass`, as [`Ah::new`]), and the datagram segment
    /// of every WQE to it: the address vector libmlx5 built for the handle (`mlx5dv_init_obj`)
    /// with the remote QP number and `qkey` filled in, as libmlx5's `set_datagram_seg` does.
    pub fn datagrams_to(
        &mut self,
        pd: &Pd,
        port: &PortInfo,
        remote: &Endpoint,
        gid_index: Option<u8>,
        sl_tclass: (u8, u8),
        qkey: u32,
    ) -> Result<AvSeg> {
        let ah = Ah::new(pd, port, remote, gid_index, sl_tclass)?;
        let name = pd.context().name().to_string();
        let mut dv_ah = sys::mlx5dv_ah::default();
        let mut obj = sys::mlx5dv_obj::default();
        obj.ah.in_ = ah.as_ptr();
        obj.ah.out = &mut dv_ah;
        // SAFETY: a live address handle of an mlx5 device; `out` is a valid local.
        let rc = unsafe { sys::mlx5dv_init_obj(&mut obj, sys::MLX5DV_OBJ_AH as u64) };
        check_rc(rc, "mlx5dv_init_obj", || {
            Ctx::dev(&name)
                .qpn(self.qpn())
                .detail(format!("address handle to QP {:#x}", remote.qpn))
        })?;
        if dv_ah.av.is_null() {
            return Err(VerbsError::Invalid {
                ctx: Ctx::dev(&name).qpn(self.qpn()),
                why: "mlx5dv_init_obj gave no address vector for the address handle".into(),
            });
        }
        // SAFETY: libmlx5's address vector of the handle, alive while `ah` is (kept below).
        let av = AvSeg::from_raw(unsafe { &*dv_ah.av }).to(remote.qpn, qkey);
        self.ahs.push(ah);
        Ok(av)
    }
}
