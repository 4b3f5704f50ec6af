//! RC queue pairs: creation (plain or with the `ibv_wr_*` API), the RESET→INIT→RTR→RTS
//! connection for InfiniBand (LID) and RoCE (GID), the read-back of what the driver granted,
//! and posting through `ibv_post_send`/`ibv_post_recv` or `ibv_wr_start`..`ibv_wr_complete`.
//! Posting is in `post`, its types re-exported here.

mod post;

pub use post::{Op, SendFlags, WrBatch};

use super::cq::Cq;
use super::device::{mtu_bytes, Gid, PortInfo};
use super::error::{check_ptr, check_rc, Ctx, Result, VerbsError};
use super::mr::{MrAccess, Pd};
use super::Kind;
use crate::sys;
use crate::sys::inline::WrOps;

/// Queue sizes requested at creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct QpCaps {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// Gather entries per send WR.
    pub max_send_sge: u32,
    /// Scatter entries per receive WR.
    pub max_recv_sge: u32,
    /// Largest inline payload.
    pub max_inline_data: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps {
            max_send_wr: 128,
            max_recv_wr: 128,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }
    }
}

/// A capability or attribute the driver granted differently from the request.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Granted {
    /// Attribute name (`max_send_wr`, `path_mtu`, ...).
    pub what: &'static str,
    /// What was asked for.
    pub requested: u64,
    /// What the driver gave.
    pub granted: u64,
}

/// What the peer needs to connect to one of our QPs (exchanged out of band).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Endpoint {
    /// QP number.
    pub qpn: u32,
    /// Initial packet sequence number (24 bits).
    pub psn: u32,
    /// LID (InfiniBand).
    pub lid: u16,
    /// GID (RoCE, or global routing on InfiniBand).
    pub gid: Gid,
}

/// Connection parameters. Defaults are the ones seen to work on Soft-RoCE and usual for RC.
#[derive(Debug, Clone, Copy)]
pub struct ConnectOpts {
    /// Local port.
    pub port: u8,
    /// Source GID index: required on RoCE, optional on InfiniBand (global routing).
    pub gid_index: Option<u8>,
    /// Path MTU in bytes; `None` uses the port's active MTU.
    pub mtu: Option<u32>,
    /// Remote access the QP grants.
    pub access: MrAccess,
    /// Local ACK timeout exponent.
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
    /// Minimal RNR NAK timer code.
    pub min_rnr_timer: u8,
    /// Outstanding reads/atomics as initiator.
    pub max_rd_atomic: u8,
    /// Outstanding reads/atomics as responder.
    pub max_dest_rd_atomic: u8,
    /// Service level.
    pub sl: u8,
    /// GRH hop limit.
    pub hop_limit: u8,
    /// GRH traffic class.
    pub traffic_class: u8,
    /// P_Key index.
    pub pkey_index: u16,
}

impl Default for ConnectOpts {
    fn default() -> Self {
        ConnectOpts {
            port: 1,
            gid_index: None,
            mtu: None,
            access: MrAccess::LOCAL_WRITE | MrAccess::REMOTE_WRITE | MrAccess::REMOTE_READ,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            sl: 0,
            hop_limit: 64,
            traffic_class: 0,
            pkey_index: 0,
        }
    }
}
/// An RC queue pair.
pub struct Qp {
    qp: *mut sys::ibv_qp,
    qpx: *mut sys::ibv_qp_ex,
    wr: Option<WrOps>,
    requested: QpCaps,
    granted: QpCaps,
    psn: u32,
    /// `IBV_QPT_RC` or `IBV_QPT_UC`.
    qp_type: u32,
    pd: Pd,
    _send_cq: Cq,
    _recv_cq: Cq,
}

// SAFETY: a QP may be used from another thread; posting needs &mut (one poster at a time).
unsafe impl Send for Qp {}

/// The `ibv_wr_*` operations a UD QP is made with.
const SEND_OPS_UD: u64 = (sys::IBV_QP_EX_WITH_SEND | sys::IBV_QP_EX_WITH_SEND_WITH_IMM) as u64;
/// The `ibv_wr_*` operations a UC QP is made with (providers refuse the others on UC).
const SEND_OPS_UC: u64 = (sys::IBV_QP_EX_WITH_RDMA_WRITE
    | sys::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | sys::IBV_QP_EX_WITH_SEND
    | sys::IBV_QP_EX_WITH_SEND_WITH_IMM) as u64;
/// ... and an RC QP.
const SEND_OPS: u64 = SEND_OPS_UC
    | (sys::IBV_QP_EX_WITH_RDMA_READ
        | sys::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
        | sys::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD) as u64;

impl Qp {
    /// Creates an RC QP with `ibv_create_qp_ex`. With `extended`, the QP is created with the
    /// send-ops flags of the `ibv_wr_*` API (what the `wr` backend posts through); a provider
    /// without that API fails here with the verb's errno.
    pub fn new_rc(pd: &Pd, send_cq: &Cq, recv_cq: &Cq, caps: QpCaps, extended: bool) -> Result<Self> {
        Self::create(pd, (send_cq, recv_cq), caps, extended, false, sys::IBV_QPT_RC)
    }

    /// As [`Qp::new_rc`], for a UD QP (SEND only, each datagram to an address handle).
    pub fn new_ud(pd: &Pd, send_cq: &Cq, recv_cq: &Cq, caps: QpCaps, extended: bool) -> Result<Self> {
        Self::create(pd, (send_cq, recv_cq), caps, extended, false, sys::IBV_QPT_UD)
    }

    /// Takes a UD QP to RTS: INIT with the P_Key index, port and Q_Key, RTR, RTS with its send
    /// PSN (a UD QP has no path and no destination: each datagram names its own).
    pub fn connect_ud(&mut self, port: &PortInfo, pkey_index: u16, qkey: u32) -> Result<()> {
        self.require_active(port)?;
        let p = port.port;
        let mut a = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_INIT,
            pkey_index,
            port_num: p,
            qkey,
            ..Default::default()
        };
        self.modify(
            &mut a,
            sys::IBV_QP_STATE | sys::IBV_QP_PKEY_INDEX | sys::IBV_QP_PORT | sys::IBV_QP_QKEY,
            "ibv_modify_qp(INIT)",
            p,
        )?;
        let mut a = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_RTR,
            ..Default::default()
        };
        self.modify(&mut a, sys::IBV_QP_STATE, "ibv_modify_qp(RTR)", p)?;
        let mut a = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_RTS,
            sq_psn: self.psn,
            ..Default::default()
        };
        self.modify(&mut a, sys::IBV_QP_STATE | sys::IBV_QP_SQ_PSN, "ibv_modify_qp(RTS)", p)?;
        self.require_rts(p)?;
        Ok(())
    }

    /// As [`Qp::new_rc`], for a UC QP (SEND and WRITE; nothing acknowledged).
    pub fn new_uc(pd: &Pd, send_cq: &Cq, recv_cq: &Cq, caps: QpCaps, extended: bool) -> Result<Self> {
        Self::create(pd, (send_cq, recv_cq), caps, extended, false, sys::IBV_QPT_UC)
    }

    /// Creates an RC QP on an mlx5 device with `mlx5dv_create_qp`, scatter-to-CQE disabled
    /// (`MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE`): rdma-core otherwise asks the kernel to let
    /// the NIC put responder payloads of up to 32 B into the CQE instead of the receive buffer,
    /// which only libmlx5's own polling copies out. The direct path polls with its own code.
    pub fn new_rc_mlx5_no_scatter(pd: &Pd, send_cq: &Cq, recv_cq: &Cq, caps: QpCaps) -> Result<Self> {
        Self::create(pd, (send_cq, recv_cq), caps, false, true, sys::IBV_QPT_RC)
    }

    /// As [`Qp::new_rc_mlx5_no_scatter`], of type `qp_type` (`IBV_QPT_RC` or `IBV_QPT_UC`).
    pub fn new_mlx5_no_scatter(pd: &Pd, send_cq: &Cq, recv_cq: &Cq, caps: QpCaps, qp_type: u32) -> Result<Self> {
        Self::create(pd, (send_cq, recv_cq), caps, false, true, qp_type)
    }

    fn create(
        pd: &Pd,
        (send_cq, recv_cq): (&Cq, &Cq),
        caps: QpCaps,
        extended: bool,
        no_scatter: bool,
        qp_type: u32,
    ) -> Result<Self> {
        let ctx = pd.context();
        let mut attr = sys::ibv_qp_init_attr_ex {
            send_cq: send_cq.as_ptr(),
            recv_cq: recv_cq.as_ptr(),
            cap: sys::ibv_qp_cap {
                max_send_wr: caps.max_send_wr,
                max_recv_wr: caps.max_recv_wr,
                max_send_sge: caps.max_send_sge,
                max_recv_sge: caps.max_recv_sge,
                max_inline_data: caps.max_inline_data,
            },
            qp_type,
            sq_sig_all: 0,
            comp_mask: sys::IBV_QP_INIT_ATTR_PD,
            pd: pd.as_ptr(),
            ..Default::default()
        };
        if extended {
            attr.comp_mask |= sys::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
            attr.send_ops_flags = match qp_type {
                sys::IBV_QPT_UC => SEND_OPS_UC,
                sys::IBV_QPT_UD => SEND_OPS_UD,
                _ => SEND_OPS,
            };
        }
        let verb = if no_scatter {
            "mlx5dv_create_qp(DISABLE_SCATTER_TO_CQE)"
        } else if extended {
            "ibv_create_qp_ex(send_ops_flags)"
        } else {
            "ibv_create_qp_ex"
        };
        let qp = if no_scatter {
            let mut dv = sys::mlx5dv_qp_init_attr {
                comp_mask: sys::MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS as u64,
                create_flags: sys::MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE,
                ..Default::default()
            };
            // SAFETY: as below, for an mlx5 device (the caller's contract); `dv` is valid.
            unsafe { sys::mlx5dv_create_qp(ctx.as_ptr(), &mut attr, &mut dv) }
        } else {
            // SAFETY: live context, PD and CQs (kept alive by the clones stored below); attr is
            // valid.
            unsafe { sys::ibv_create_qp_ex(ctx.as_ptr(), &mut attr) }
        };
        let qp = check_ptr(qp, verb, || ctx.ctx().detail(format!("{caps:?}")))?;
        pd.ledger().created(Kind::Qp);
        let granted = QpCaps {
            max_send_wr: attr.cap.max_send_wr,
            max_recv_wr: attr.cap.max_recv_wr,
            max_send_sge: attr.cap.max_send_sge,
            max_recv_sge: attr.cap.max_recv_sge,
            max_inline_data: attr.cap.max_inline_data,
        };
        let mut me = Qp {
            qp,
            qpx: std::ptr::null_mut(),
            wr: None,
            requested: caps,
            granted,
            psn: initial_psn(),
            qp_type,
            pd: pd.clone(),
            _send_cq: send_cq.clone(),
            _recv_cq: recv_cq.clone(),
        };
        if extended {
            // SAFETY: live QP created with send_ops_flags.
            let qpx = unsafe { sys::ibv_qp_to_qp_ex(qp) };
            let qpn = me.qpn();
            let qpx = check_ptr(qpx, "ibv_qp_to_qp_ex", || ctx.ctx().qpn(qpn))?;
            // SAFETY: qpx is this live QP's extended view.
            let ops = unsafe { WrOps::from_qp_ex(qpx) }.ok_or_else(|| VerbsError::Invalid {
                ctx: ctx.ctx().qpn(qpn),
                why: "the provider left some ibv_wr_* entry points unset".into(),
            })?;
            me.qpx = qpx;
            me.wr = Some(ops);
        }
        Ok(me)
    }

    /// A connection needs the port ACTIVE.
    fn require_active(&self, port: &PortInfo) -> Result<()> {
        if !port.is_active() {
            return Err(VerbsError::Port {
                ctx: self.ctx().port(port.port),
                why: format!(
                    "port is {} (physical state {}), not ACTIVE",
                    port.state, port.phys_state
                ),
            });
        }
        Ok(())
    }

    /// A connected QP reads back RTS: its attributes as read.
    fn require_rts(&self, port: u8) -> Result<sys::ibv_qp_attr> {
        let (got, _) = self.query()?;
        if got.qp_state != sys::IBV_QPS_RTS {
            return Err(VerbsError::QpState {
                ctx: self.ctx().port(port),
                step: "connect",
                state: qp_state_str(got.qp_state),
                expected: "RTS",
            });
        }
        Ok(got)
    }

    /// Its type (`IBV_QPT_RC`, `IBV_QPT_UC`, `IBV_QPT_UD`).
    pub fn qp_type(&self) -> u32 {
        self.qp_type
    }

    /// QP number.
    pub fn qpn(&self) -> u32 {
        // SAFETY: live QP.
        unsafe { (*self.qp).qp_num }
    }

    /// The protection domain the QP was made in.
    pub fn pd(&self) -> &Pd {
        &self.pd
    }

    /// Raw pointer (valid while `self` lives).
    pub fn as_ptr(&self) -> *mut sys::ibv_qp {
        self.qp
    }

    /// What was requested at creation.
    pub fn requested_caps(&self) -> QpCaps {
        self.requested
    }

    /// What the driver granted at creation.
    pub fn granted_caps(&self) -> QpCaps {
        self.granted
    }

    /// The `ibv_wr_*` entry points and the extended QP they take, when created with them, as
    /// they are now: read again at each call, because a provider may change them with the QP's
    /// state (libmlx5 installs a `wr_complete` that fails with `EINVAL` until the QP reaches RTS,
    /// providers/mlx5/verbs.c `set_qp_operational_state`): take them after connecting.
    pub fn wr_ops(&self) -> Option<(WrOps, *mut sys::ibv_qp_ex)> {
        self.wr?;
        // SAFETY: qpx is this live QP's extended view (set with `wr`).
        unsafe { WrOps::from_qp_ex(self.qpx) }.map(|w| (w, self.qpx))
    }

    /// Whether the `ibv_wr_*` API is available on this QP.
    pub fn has_wr_api(&self) -> bool {
        self.wr.is_some()
    }

    fn ctx(&self) -> Ctx {
        self.pd.context().ctx().qpn(self.qpn())
    }

    /// Our side of the connection for `port`, with the GID at `gid_index` (zero GID if none).
    pub fn endpoint(&self, port: &PortInfo, gid_index: Option<u8>) -> Result<Endpoint> {
        let gid = match gid_index {
            Some(i) => {
                self.pd
                    .context()
                    .query_gid(port.port, i as u32)?
                    .ok_or_else(|| VerbsError::Port {
                        ctx: self.ctx().port(port.port),
                        why: format!("GID index {i} is empty"),
                    })?
                    .gid
            }
            None => Gid::default(),
        };
        Ok(Endpoint {
            qpn: self.qpn(),
            psn: self.psn,
            lid: port.lid,
            gid,
        })
    }

    fn modify(&self, attr: &mut sys::ibv_qp_attr, mask: u32, verb: &'static str, port: u8) -> Result<()> {
        // SAFETY: live QP; attr is a valid ibv_qp_attr; mask names the fields set.
        let rc = unsafe { sys::ibv_modify_qp(self.qp, attr, mask as i32) };
        check_rc(rc, verb, || self.ctx().port(port))
    }

    /// `ibv_query_qp` of the state and the attributes we check.
    pub fn query(&self) -> Result<(sys::ibv_qp_attr, sys::ibv_qp_init_attr)> {
        let mut attr = sys::ibv_qp_attr::default();
        let mut init = sys::ibv_qp_init_attr::default();
        let mask = sys::IBV_QP_STATE
            | sys::IBV_QP_CAP
            | sys::IBV_QP_PATH_MTU
            | sys::IBV_QP_MAX_QP_RD_ATOMIC
            | sys::IBV_QP_MAX_DEST_RD_ATOMIC
            | sys::IBV_QP_TIMEOUT
            | sys::IBV_QP_RETRY_CNT
            | sys::IBV_QP_RNR_RETRY
            | sys::IBV_QP_MIN_RNR_TIMER;
        // SAFETY: live QP; attr and init are writable.
        let rc = unsafe { sys::ibv_query_qp(self.qp, &mut attr, mask as i32, &mut init) };
        check_rc(rc, "ibv_query_qp", || self.ctx())?;
        Ok((attr, init))
    }

    /// The QP's current state, by name.
    pub fn state(&self) -> Result<&'static str> {
        Ok(qp_state_str(self.query()?.0.qp_state))
    }

    /// RESET→INIT→RTR→RTS towards `remote`, then reads the QP back: it must be in RTS, and every
    /// attribute the driver granted differently from the request is returned.
    pub fn connect(&mut self, port: &PortInfo, opts: &ConnectOpts, remote: &Endpoint) -> Result<Vec<Granted>> {
        self.require_active(port)?;
        if port.is_ethernet() && opts.gid_index.is_none() {
            return Err(VerbsError::Port {
                ctx: self.ctx().port(port.port),
                why: "the link layer is Ethernet (RoCE): a GID index is required (-x)".into(),
            });
        }
        let mtu_req = opts.mtu.unwrap_or(port.active_mtu);
        let mtu = self.path_mtu(mtu_req)?;
        let p = port.port;
        self.to_init(opts, p)?;
        self.to_rtr(opts, remote, mtu, p)?;
        self.to_rts(opts, p)?;
        let got = self.require_rts(p)?;
        Ok(self.granted(opts, mtu_req, &got))
    }

    /// The `IBV_MTU_*` of a path MTU of `bytes`, which must be one of the five.
    fn path_mtu(&self, bytes: u32) -> Result<u32> {
        super::device::mtu_from_bytes(bytes).ok_or_else(|| VerbsError::Invalid {
            ctx: self.ctx(),
            why: format!("path MTU {bytes} is not one of 256, 512, 1024, 2048, 4096"),
        })
    }

    /// Whether the QP is RC: UC has no READs or atomics and no acknowledgements (so no timeout,
    /// retries or RNR).
    fn acknowledged(&self) -> bool {
        self.qp_type == sys::IBV_QPT_RC
    }

    /// RESET→INIT on port `p` with the P_Key index and access flags of `opts`.
    fn to_init(&self, opts: &ConnectOpts, p: u8) -> Result<()> {
        let mut a = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_INIT,
            pkey_index: opts.pkey_index,
            port_num: p,
            qp_access_flags: opts.access.0,
            ..Default::default()
        };
        self.modify(
            &mut a,
            sys::IBV_QP_STATE | sys::IBV_QP_PKEY_INDEX | sys::IBV_QP_PORT | sys::IBV_QP_ACCESS_FLAGS,
            "ibv_modify_qp(INIT)",
            p,
        )
    }

    /// INIT→RTR towards `remote` (its LID, and with a GID index of `opts` a GRH to its GID) with
    /// path MTU `mtu` (an `IBV_MTU_*`); RC also sets the responder's READs and the RNR timer.
    fn to_rtr(&self, opts: &ConnectOpts, remote: &Endpoint, mtu: u32, p: u8) -> Result<()> {
        let mut ah = sys::ibv_ah_attr {
            dlid: remote.lid,
            sl: opts.sl,
            port_num: p,
            ..Default::default()
        };
        if let Some(gi) = opts.gid_index {
            ah.is_global = 1;
            ah.grh = sys::ibv_global_route {
                dgid: remote.gid.to_raw(),
                flow_label: 0,
                sgid_index: gi,
                hop_limit: opts.hop_limit,
                traffic_class: opts.traffic_class,
            };
        }
        let mut a = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_RTR,
            path_mtu: mtu,
            dest_qp_num: remote.qpn,
            rq_psn: remote.psn,
            max_dest_rd_atomic: opts.max_dest_rd_atomic,
            min_rnr_timer: opts.min_rnr_timer,
            ah_attr: ah,
            ..Default::default()
        };
        let rtr = sys::IBV_QP_STATE | sys::IBV_QP_AV | sys::IBV_QP_PATH_MTU | sys::IBV_QP_DEST_QPN | sys::IBV_QP_RQ_PSN;
        self.modify(
            &mut a,
            if self.acknowledged() {
                rtr | sys::IBV_QP_MAX_DEST_RD_ATOMIC | sys::IBV_QP_MIN_RNR_TIMER
            } else {
                rtr
            },
            "ibv_modify_qp(RTR)",
            p,
        )
    }

    /// RTR→RTS with the send PSN; RC also sets the timeout, the retries and the initiator's READs.
    fn to_rts(&self, opts: &ConnectOpts, p: u8) -> Result<()> {
        let mut a = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_RTS,
            timeout: opts.timeout,
            retry_cnt: opts.retry_cnt,
            rnr_retry: opts.rnr_retry,
            sq_psn: self.psn,
            max_rd_atomic: opts.max_rd_atomic,
            ..Default::default()
        };
        self.modify(
            &mut a,
            if self.acknowledged() {
                sys::IBV_QP_STATE
                    | sys::IBV_QP_TIMEOUT
                    | sys::IBV_QP_RETRY_CNT
                    | sys::IBV_QP_RNR_RETRY
                    | sys::IBV_QP_SQ_PSN
                    | sys::IBV_QP_MAX_QP_RD_ATOMIC
            } else {
                sys::IBV_QP_STATE | sys::IBV_QP_SQ_PSN
            },
            "ibv_modify_qp(RTS)",
            p,
        )
    }

    /// Every attribute of `got` (the QP read back in RTS) that differs from what was asked: the
    /// capabilities, the path MTU (`mtu_req` bytes) and, on RC, the READs, timeout and retries.
    fn granted(&self, opts: &ConnectOpts, mtu_req: u32, got: &sys::ibv_qp_attr) -> Vec<Granted> {
        let r = self.requested;
        let mut diffs = Vec::new();
        let mut cmp = |what: &'static str, requested: u64, granted: u64| {
            if requested != granted {
                diffs.push(Granted {
                    what,
                    requested,
                    granted,
                });
            }
        };
        cmp("max_send_wr", r.max_send_wr as u64, got.cap.max_send_wr as u64);
        cmp("max_recv_wr", r.max_recv_wr as u64, got.cap.max_recv_wr as u64);
        cmp("max_send_sge", r.max_send_sge as u64, got.cap.max_send_sge as u64);
        cmp("max_recv_sge", r.max_recv_sge as u64, got.cap.max_recv_sge as u64);
        cmp(
            "max_inline_data",
            r.max_inline_data as u64,
            got.cap.max_inline_data as u64,
        );
        cmp("path_mtu", mtu_req as u64, mtu_bytes(got.path_mtu) as u64);
        if !self.acknowledged() {
            // what UC does not have was not set: nothing more to compare
            return diffs;
        }
        cmp("max_rd_atomic", opts.max_rd_atomic as u64, got.max_rd_atomic as u64);
        cmp(
            "max_dest_rd_atomic",
            opts.max_dest_rd_atomic as u64,
            got.max_dest_rd_atomic as u64,
        );
        cmp("timeout", opts.timeout as u64, got.timeout as u64);
        cmp("retry_cnt", opts.retry_cnt as u64, got.retry_cnt as u64);
        cmp("rnr_retry", opts.rnr_retry as u64, got.rnr_retry as u64);
        diffs
    }

    /// RESET→INIT→RTR→RTS with the attributes the connection manager gave (`-R`): its port,
    /// P_Key index, address vector (with the source GID it chose), path MTU (at most `mtu_cap`
    /// when given), the peer's QP number, the PSNs, timeouts and retries; the access flags are
    /// `access`. Then reads the QP back: it must be in RTS; returns what it holds.
    pub fn connect_cm(
        &mut self,
        port: &PortInfo,
        access: MrAccess,
        cm: &super::cm::CmAttrs,
        mtu_cap: Option<u32>,
    ) -> Result<sys::ibv_qp_attr> {
        self.require_active(port)?;
        let p = port.port;
        let mut init = cm.init;
        init.attr.qp_access_flags = access.0;
        init.mask |= sys::IBV_QP_ACCESS_FLAGS as i32;
        if init.attr.port_num != p {
            return Err(VerbsError::Port {
                ctx: self.ctx().port(p),
                why: format!(
                    "the connection manager routes through port {}, not this port",
                    init.attr.port_num
                ),
            });
        }
        self.modify(&mut init.attr, init.mask as u32, "ibv_modify_qp(INIT)", p)?;
        let mut rtr = cm.rtr;
        if let Some(cap) = mtu_cap {
            let m = self.path_mtu(cap)?;
            rtr.attr.path_mtu = rtr.attr.path_mtu.min(m);
        }
        self.modify(&mut rtr.attr, rtr.mask as u32, "ibv_modify_qp(RTR)", p)?;
        let mut rts = cm.rts;
        self.modify(&mut rts.attr, rts.mask as u32, "ibv_modify_qp(RTS)", p)?;
        self.require_rts(p)
    }

    /// Moves the QP to the error state (flushes outstanding WRs).
    pub fn set_error(&mut self) -> Result<()> {
        let mut a = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_ERR,
            ..Default::default()
        };
        self.modify(&mut a, sys::IBV_QP_STATE, "ibv_modify_qp(ERR)", 0)
    }
}

/// An address handle (`ibv_create_ah`): where a UD QP's datagrams go.
pub struct Ah {
    ah: *mut sys::ibv_ah,
    pd: Pd,
}

// SAFETY: an address handle is read-only to the provider's post path; used by one end at a time.
unsafe impl Send for Ah {}

impl Ah {
    /// The address of `remote` through port `port` at service level `sl`: its LID, and with
    /// `gid_index` (RoCE, or global routing) a GRH to its GID from our entry `gid_index` with
    /// traffic class `tclass` (without a GRH there is no traffic class).
    pub fn new(
        pd: &Pd,
        port: &PortInfo,
        remote: &Endpoint,
        gid_index: Option<u8>,
        (sl, tclass): (u8, u8),
    ) -> Result<Self> {
        let mut attr = sys::ibv_ah_attr {
            dlid: remote.lid,
            sl,
            port_num: port.port,
            ..Default::default()
        };
        if let Some(gi) = gid_index {
            attr.is_global = 1;
            attr.grh = sys::ibv_global_route {
                dgid: remote.gid.to_raw(),
                flow_label: 0,
                sgid_index: gi,
                hop_limit: 64,
                traffic_class: tclass,
            };
        }
        // SAFETY: live PD; attr valid for the call.
        let ah = unsafe { sys::ibv_create_ah(pd.as_ptr(), &mut attr) };
        let ctx = pd.context();
        let ah = check_ptr(ah, "ibv_create_ah", || {
            ctx.ctx().port(port.port).detail(format!("to QP {:#x}", remote.qpn))
        })?;
        pd.ledger().created(Kind::Ah);
        Ok(Ah { ah, pd: pd.clone() })
    }

    /// The raw pointer (valid while `self` lives).
    pub fn as_ptr(&self) -> *mut sys::ibv_ah {
        self.ah
    }
}

impl Drop for Ah {
    fn drop(&mut self) {
        let ctx = self.pd.context().ctx();
        // SAFETY: from ibv_create_ah, destroyed once; no WR in flight refers to it (its end is
        // gone or idle).
        let rc = unsafe { sys::ibv_destroy_ah(self.ah) };
        self.pd
            .ledger()
            .destroyed(Kind::Ah, check_rc(rc, "ibv_destroy_ah", || ctx));
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        let ctx = self.ctx();
        // SAFETY: qp came from ibv_create_qp_ex and is destroyed once; its CQs and PD are still
        // alive (we hold clones, dropped after this).
        let rc = unsafe { sys::ibv_destroy_qp(self.qp) };
        self.pd
            .ledger()
            .destroyed(Kind::Qp, check_rc(rc, "ibv_destroy_qp", || ctx));
    }
}
/// `IBV_QPS_*` name.
pub fn qp_state_str(s: u32) -> &'static str {
    match s {
        sys::IBV_QPS_RESET => "RESET",
        sys::IBV_QPS_INIT => "INIT",
        sys::IBV_QPS_RTR => "RTR",
        sys::IBV_QPS_RTS => "RTS",
        sys::IBV_QPS_SQD => "SQD",
        sys::IBV_QPS_SQE => "SQE",
        sys::IBV_QPS_ERR => "ERR",
        _ => "UNKNOWN",
    }
}

/// A random 24-bit initial PSN (from the clock and address entropy; not security relevant).
fn initial_psn() -> u32 {
    let t = crate::clock::start();
    let x = t ^ (t >> 17) ^ (&t as *const u64 as u64).rotate_left(13);
    (x.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as u32 & 0xff_ffff
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_flags_map_to_verbs_bits() {
        assert_eq!(SendFlags::default().raw(), 0);
        assert_eq!(SendFlags::SIGNALED.raw(), sys::IBV_SEND_SIGNALED);
        let all = SendFlags {
            signaled: true,
            inline: true,
            fence: true,
            solicited: true,
        };
        assert_eq!(
            all.raw(),
            sys::IBV_SEND_SIGNALED | sys::IBV_SEND_INLINE | sys::IBV_SEND_FENCE | sys::IBV_SEND_SOLICITED
        );
    }

    #[test]
    fn psn_is_24_bits() {
        for _ in 0..100 {
            assert!(initial_psn() <= 0xff_ffff);
        }
        assert_eq!(qp_state_str(sys::IBV_QPS_RTS), "RTS");
        assert_eq!(qp_state_str(99), "UNKNOWN");
    }
}
