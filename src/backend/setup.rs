//! Opening a device and building connected pairs of ends for each backend (loopback: both ends
//! on one device, as two hosts would be connected).

use super::direct::{DirectEnd, LocalBuf};
use super::path::path_taken;
pub use super::path::PathOpts;
use super::verbs::VerbsEnd;
use super::{BackendError, BackendKind, OpKind, Transport, QKEY};
use crate::mlx5::seg::AvSeg;
use crate::mlx5::sq::DbMode;
use crate::model::{DirectModelQp, Model, ModelConfig, ModelConnect, ModelQpCaps};
use crate::sys;
use crate::verbs::device::pick_gid_index;
use crate::verbs::direct::DirectQp;
use crate::verbs::{
    Ah, CompChannel, ConnectOpts, Context, Cq, DeviceList, Mr, MrAccess, Pd, PortInfo, Qp, QpCaps, VerbsError,
};

/// model0: the model, and the same model opened through libibverbs and libmlx5 (its user-space
/// uverbs device, `crate::uverbs`) for the `verbs` and `wr` backends, or why it could not be.
pub struct ModelDev {
    /// The model (the direct backend drives it).
    pub model: Model,
    /// model0 as an mlx5 device of the machine's libibverbs: the context and its port.
    pub verbs: Result<(Context, PortInfo), String>,
    /// How its QPs are made (the path options and huge pages: the verbs QPs; model0's own
    /// direct QPs have no path and use the model's shared memory).
    pub opts: DevOpts,
}

/// How a device's QPs are made: what a plan sets on it once it is open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DevOpts {
    /// The path and QP options its verbs QPs connect with.
    pub path: PathOpts,
    /// The buffers of its verbs (and mlx5 direct) QPs on 2 MiB huge pages (perftest's
    /// --use_hugepages); a buffer that cannot have them is an error naming the reservation.
    pub huge_pages: bool,
    /// The QPs' transport (perftest's `-c`).
    pub transport: Transport,
}

impl std::ops::Deref for ModelDev {
    type Target = Model;
    fn deref(&self) -> &Model {
        &self.model
    }
}

impl ModelDev {
    /// Opens model0 with `cfg`, and through libibverbs when this machine allows it.
    pub fn open(cfg: ModelConfig) -> Result<Self, SetupError> {
        let model = Model::open(cfg)?;
        #[cfg(target_os = "linux")]
        crate::uverbs::set_model(&model);
        let verbs = Context::open_model0()
            .and_then(|ctx| {
                let p = ctx.query_port(1)?;
                Ok((ctx, p))
            })
            .map_err(|e| e.to_string());
        Ok(ModelDev {
            model,
            verbs,
            opts: DevOpts::default(),
        })
    }
}

/// The libmlx5 environment variables that change what a ConnectX is told (read as libmlx5
/// reads them, providers/mlx5/mlx5.c and verbs.c, rdma-core 44).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mlx5Env {
    /// `MLX5_SHUT_UP_BF` set and not `0`: libmlx5 never uses BlueFlame, only the doorbell.
    pub shut_up_bf: bool,
    /// `MLX5_POST_SEND_PREFER_BF` unset or not `0`: BlueFlame for any single WQE that fits;
    /// `0`: for inline WQEs only.
    pub prefer_bf: bool,
    /// `MLX5_QP_SIGNATURE` set (any value): the NIC verifies WQE signatures.
    pub qp_signature: bool,
}

impl Mlx5Env {
    /// This process's.
    pub fn get() -> Self {
        let on = |k: &str| std::env::var_os(k).map(|v| v != "0");
        Mlx5Env {
            shut_up_bf: on("MLX5_SHUT_UP_BF").unwrap_or(false),
            prefer_bf: on("MLX5_POST_SEND_PREFER_BF").unwrap_or(true),
            qp_signature: std::env::var_os("MLX5_QP_SIGNATURE").is_some(),
        }
    }

    /// The doorbell mode the direct path uses for `asked`: the doorbell only when libmlx5 is
    /// told to shut up BlueFlame (both paths then ring alike).
    pub fn direct_mode(self, asked: DbMode) -> DbMode {
        if self.shut_up_bf {
            DbMode::Db
        } else {
            asked
        }
    }
}

/// The device a run uses.
pub enum Dev {
    /// model0.
    Model(ModelDev),
    /// A verbs device and the port used.
    Verbs {
        /// The open device.
        ctx: Context,
        /// The port.
        port: PortInfo,
        /// The GID index (RoCE).
        gid: Option<u8>,
        /// Provider name.
        provider: String,
        /// Firmware version.
        fw: String,
        /// How its QPs are made.
        opts: DevOpts,
    },
}

/// Errors while choosing or opening a device.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SetupError {
    /// A verbs failure.
    #[error(transparent)]
    Verbs(Box<VerbsError>),
    /// model0 could not be opened.
    #[error(transparent)]
    Model(Box<crate::model::ModelError>),
    /// A backend failure.
    #[error(transparent)]
    Backend(Box<BackendError>),
}

impl From<VerbsError> for SetupError {
    fn from(e: VerbsError) -> Self {
        SetupError::Verbs(Box::new(e))
    }
}

impl From<crate::model::ModelError> for SetupError {
    fn from(e: crate::model::ModelError) -> Self {
        SetupError::Model(Box::new(e))
    }
}

impl From<BackendError> for SetupError {
    fn from(e: BackendError) -> Self {
        SetupError::Backend(Box::new(e))
    }
}

impl Dev {
    /// Opens `name` (`model0` for the model); `None`: the first RDMA device, else model0 (the
    /// returned note says so). The port must be ACTIVE.
    pub fn open(
        name: Option<&str>,
        port: u8,
        gid: Option<u8>,
        model: ModelConfig,
    ) -> Result<(Dev, Option<String>), SetupError> {
        let (name, note) = match name {
            Some(n) => (n.to_string(), None),
            None => match DeviceList::get() {
                Ok(l) => match l.names().into_iter().next() {
                    Some(n) => (n, None),
                    None => (
                        crate::model::DEVICE_NAME.into(),
                        Some("no RDMA device: using model0".to_string()),
                    ),
                },
                Err(VerbsError::NoDevice(why)) => (
                    crate::model::DEVICE_NAME.to_string(),
                    Some(format!(
                        "no RDMA device ({}): using model0, the built-in software model; its figures are not a NIC's",
                        match why {
                            crate::verbs::NoDevice::KernelWithoutRdma => "kernel without RDMA support",
                            crate::verbs::NoDevice::NoDevices => "none present",
                            crate::verbs::NoDevice::NoUverbs => "ib_uverbs missing",
                            crate::verbs::NoDevice::NoPermission => "no permission",
                        }
                    )),
                ),
                Err(e) => return Err(e.into()),
            },
        };
        if name == crate::model::DEVICE_NAME {
            if port != 1 {
                return Err(VerbsError::Port {
                    ctx: crate::verbs::Ctx::dev(&name).port(port),
                    why: "model0 has one port, port 1".into(),
                }
                .into());
            }
            if gid.is_some() {
                return Err(VerbsError::Port {
                    ctx: crate::verbs::Ctx::dev(&name).port(port),
                    why: "model0 has no GID table (-x applies to RoCE devices)".into(),
                }
                .into());
            }
            return Ok((Dev::Model(ModelDev::open(model)?), note));
        }
        let ctx = open_named(&name)?;
        let info = ctx.query()?;
        if port == 0 || port > info.phys_port_cnt {
            return Err(VerbsError::Port {
                ctx: crate::verbs::Ctx::dev(&name).port(port),
                why: format!("{name} has ports 1..={}", info.phys_port_cnt),
            }
            .into());
        }
        let p = ctx.query_port(port)?;
        if !p.is_active() {
            return Err(VerbsError::Port {
                ctx: crate::verbs::Ctx::dev(&name).port(port),
                why: format!("port is {} (physical state {}), not ACTIVE", p.state, p.phys_state),
            }
            .into());
        }
        let gid = match gid {
            Some(g) => {
                if ctx.query_gid(port, g as u32)?.is_none() {
                    return Err(VerbsError::Port {
                        ctx: crate::verbs::Ctx::dev(&name).port(port),
                        why: format!("GID index {g} is empty"),
                    }
                    .into());
                }
                Some(g)
            }
            None if p.is_ethernet() => pick_gid_index(&ctx.gids(port, 16)?).map(|i| i as u8),
            None => None,
        };
        Ok((
            Dev::Verbs {
                ctx,
                port: p,
                gid,
                provider: info.provider,
                fw: info.fw_ver,
                opts: DevOpts::default(),
            },
            note,
        ))
    }

    /// Device name.
    pub fn name(&self) -> String {
        match self {
            Dev::Model(_) => crate::model::DEVICE_NAME.into(),
            Dev::Verbs { ctx, .. } => ctx.name().into(),
        }
    }

    /// Provider name.
    pub fn provider(&self) -> String {
        match self {
            Dev::Model(_) => "model0".into(),
            Dev::Verbs { provider, .. } => provider.clone(),
        }
    }

    /// The provider library the verbs backends run through (libmlx5's path on model0 and on a
    /// ConnectX), when known.
    pub fn provider_library(&self) -> Option<String> {
        self.verbs_parts().and_then(|(ctx, _, _)| ctx.provider_library())
    }

    /// Firmware version.
    pub fn firmware(&self) -> Option<String> {
        match self {
            Dev::Model(_) => None,
            Dev::Verbs { fw, .. } => Some(fw.clone()),
        }
    }

    /// Whether this is model0.
    pub fn is_model(&self) -> bool {
        matches!(self, Dev::Model(_))
    }

    /// Whether `kind` can run here, and why not.
    pub fn supports(&self, kind: BackendKind) -> Result<(), BackendError> {
        if kind == BackendKind::Direct && Mlx5Env::get().qp_signature {
            return Err(BackendError::Unsupported {
                backend: "direct",
                why: "MLX5_QP_SIGNATURE is set: the NIC would verify WQE signatures, which the direct path does \
                      not write; unset it to run the direct backend"
                    .into(),
            });
        }
        match (self, kind) {
            (Dev::Model(_), BackendKind::Direct) => Ok(()),
            (Dev::Model(m), k) => match &m.verbs {
                Ok(_) => Ok(()),
                Err(why) => Err(BackendError::Unsupported {
                    backend: k.as_str(),
                    why: format!("needs libibverbs to reach model0, and {why}"),
                }),
            },
            (Dev::Verbs { ctx, provider, .. }, BackendKind::Direct) if !ctx.is_mlx5() => {
                Err(BackendError::Unsupported {
                    backend: "direct",
                    why: format!(
                        "needs an mlx5 device or model0; {} uses the {provider} provider",
                        ctx.name()
                    ),
                })
            }
            _ => Ok(()),
        }
    }

    /// Refuses a message size above the port's maximum message size.
    pub fn check_size(&self, size: u32) -> Result<(), SetupError> {
        if let Dev::Verbs { ctx, port, .. } = self {
            if size > port.max_msg_sz {
                return Err(VerbsError::Invalid {
                    ctx: crate::verbs::Ctx::dev(ctx.name()).port(port.port),
                    why: format!("message size {size} exceeds the port's max_msg_sz {}", port.max_msg_sz),
                }
                .into());
            }
        }
        Ok(())
    }

    /// How its QPs are made.
    pub fn opts(&self) -> DevOpts {
        match self {
            Dev::Verbs { opts, .. } => *opts,
            Dev::Model(m) => m.opts,
        }
    }

    /// Sets how its QPs are made (the path options, huge pages, the transport).
    pub fn opts_mut(&mut self) -> &mut DevOpts {
        match self {
            Dev::Verbs { opts, .. } => opts,
            Dev::Model(m) => &mut m.opts,
        }
    }

    /// The path and QP options its verbs QPs connect with.
    pub fn path(&self) -> PathOpts {
        self.opts().path
    }

    /// The transport of the QPs made on it.
    pub fn transport(&self) -> Transport {
        self.opts().transport
    }

    /// Whether the buffers of its verbs (and mlx5 direct) QPs are on 2 MiB huge pages.
    pub fn huge_pages(&self) -> bool {
        self.opts().huge_pages
    }

    /// The verbs context, port and GID index the `verbs` and `wr` backends use (model0's through
    /// libmlx5), if any.
    pub fn verbs_parts(&self) -> Option<(&Context, &PortInfo, Option<u8>)> {
        match self {
            Dev::Verbs { ctx, port, gid, .. } => Some((ctx, port, *gid)),
            Dev::Model(m) => m.verbs.as_ref().ok().map(|(c, p)| (c, p, None)),
        }
    }

    /// The backends this device runs.
    pub fn backends(&self) -> Vec<BackendKind> {
        [BackendKind::Verbs, BackendKind::Wr, BackendKind::Direct]
            .into_iter()
            .filter(|k| self.supports(*k).is_ok())
            .collect()
    }
}

/// The capabilities of every verbs or mlx5 QP the scenarios create.
fn qp_caps() -> QpCaps {
    QpCaps {
        max_send_wr: DEPTH,
        max_recv_wr: DEPTH,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: INLINE,
    }
}

/// Opens the RDMA device `name`; a name that is not there is said as such, with model0 among
/// the devices present, whatever the kernel (one without RDMA support has model0 alone).
pub fn open_named(name: &str) -> Result<Context, VerbsError> {
    match Context::open(name) {
        Err(VerbsError::NoDevice(_)) => Err(VerbsError::UnknownDevice {
            name: name.into(),
            available: vec!["model0 (software model)".into()],
        }),
        Err(VerbsError::UnknownDevice { name, mut available }) => {
            available.push("model0 (software model)".into());
            Err(VerbsError::UnknownDevice { name, available })
        }
        r => r,
    }
}

/// Outstanding RDMA READs and atomics a QP allows at most (perftest's default of `-o`: the
/// device's limit, which is 16 on ConnectX).
pub const MAX_RD_ATOMIC: u8 = 16;

/// How a scenario's QP connects on `port` with GID index `gid`, with the access `op` needs and
/// as many outstanding READs and atomics as the device allows (up to [`MAX_RD_ATOMIC`]; as
/// perftest, so a READ or atomic stream is not held to one at a time).
fn connect_opts(
    ctx: &Context,
    port: &PortInfo,
    gid: Option<u8>,
    op: OpKind,
    path: PathOpts,
) -> Result<ConnectOpts, SetupError> {
    let rd = rd_atomic(ctx)?;
    Ok(ConnectOpts {
        port: port.port,
        gid_index: gid,
        access: access_for(op),
        max_rd_atomic: rd,
        max_dest_rd_atomic: rd,
        mtu: path.mtu,
        sl: path.sl,
        traffic_class: path.traffic_class,
        timeout: path.timeout,
        retry_cnt: path.retry_count,
        pkey_index: path.pkey_index,
        ..Default::default()
    })
}

/// As many outstanding READs and atomics as the device allows, up to [`MAX_RD_ATOMIC`].
pub fn rd_atomic(ctx: &Context) -> Result<u8, SetupError> {
    let d = ctx.query()?;
    Ok(d.max_qp_rd_atom
        .min(d.max_qp_init_rd_atom)
        .clamp(1, i32::from(MAX_RD_ATOMIC)) as u8)
}

/// Remote access an operation needs at the responder (plus local write for results/receives).
pub fn access_for(op: OpKind) -> MrAccess {
    MrAccess::LOCAL_WRITE
        | match op {
            OpKind::Write | OpKind::WriteImm => MrAccess::REMOTE_WRITE,
            OpKind::Read => MrAccess::REMOTE_READ,
            OpKind::FetchAdd | OpKind::CmpSwap => MrAccess::REMOTE_ATOMIC,
            OpKind::Send | OpKind::SendImm => MrAccess::LOCAL_READ,
        }
}

/// Queue sizes used by the scenarios.
pub const DEPTH: u32 = 128;
/// Inline size asked for.
pub const INLINE: u32 = 220;

/// Two connected verbs (or wr) ends on one device, each with `buf_len` bytes.
pub fn verbs_pair(
    dev: &Dev,
    kind: BackendKind,
    op: OpKind,
    buf_len: usize,
) -> Result<(VerbsEnd, VerbsEnd), SetupError> {
    verbs_pair_with(dev, kind, op, buf_len, false)
}

/// As [`verbs_pair`]; with `events`, each end's CQ is on a completion channel of its own and the
/// end waits for completion events (`-e`).
pub fn verbs_pair_with(
    dev: &Dev,
    kind: BackendKind,
    op: OpKind,
    buf_len: usize,
    events: bool,
) -> Result<(VerbsEnd, VerbsEnd), SetupError> {
    dev.supports(kind)?;
    let Some((ctx, port, gid)) = dev.verbs_parts() else {
        unreachable!("supports() admits only devices with a verbs context")
    };
    let pd = Pd::new(ctx)?;
    let caps = qp_caps();
    let opts = connect_opts(ctx, port, gid, op, dev.path())?;
    let huge = dev.huge_pages();
    let (cha, chb) = if events {
        (Some(CompChannel::new(ctx)?), Some(CompChannel::new(ctx)?))
    } else {
        (None, None)
    };
    let t = dev.transport();
    let (mut qa, ca, ma) = verbs_qp(ctx, &pd, (kind, t), caps, op, (buf_len, huge), cha.as_ref())?;
    let (mut qb, cb, mb) = verbs_qp(ctx, &pd, (kind, t), caps, op, (buf_len, huge), chb.as_ref())?;
    let (ea, eb) = (qa.endpoint(port, gid)?, qb.endpoint(port, gid)?);
    if t == Transport::Ud {
        // each end's datagrams go to the other through an address handle
        let path = dev.path();
        qa.connect_ud(port, path.pkey_index, QKEY)?;
        qb.connect_ud(port, path.pkey_index, QKEY)?;
        let (aha, ahb) = (
            Ah::new(&pd, port, &eb, gid, (path.sl, path.traffic_class))?,
            Ah::new(&pd, port, &ea, gid, (path.sl, path.traffic_class))?,
        );
        let (ra, rb) = (ma.remote(0), mb.remote(0));
        let (mut a, mut b) = (
            VerbsEnd::new(kind, qa, ca, ma, rb)?.with_ud(aha, eb.qpn, QKEY),
            VerbsEnd::new(kind, qb, cb, mb, ra)?.with_ud(ahb, ea.qpn, QKEY),
        );
        if let (Some(x), Some(y)) = (cha, chb) {
            a = a.with_events(x);
            b = b.with_events(y);
        }
        return Ok((a, b));
    }
    path_taken(ctx, qa.connect(port, &opts, &eb)?)?;
    path_taken(ctx, qb.connect(port, &opts, &ea)?)?;
    let (ra, rb) = (ma.remote(0), mb.remote(0));
    let (mut a, mut b) = (
        VerbsEnd::new(kind, qa, ca, ma, rb)?,
        VerbsEnd::new(kind, qb, cb, mb, ra)?,
    );
    if let (Some(x), Some(y)) = (cha, chb) {
        a = a.with_events(x);
        b = b.with_events(y);
    }
    Ok((a, b))
}

/// One verbs (or wr) QP with its CQ (on completion channel `chan`, if any) and buffer (`buf_len`
/// bytes, on huge pages when asked) in `pd`. Some providers grant less inline data than asked:
/// the QP is then made again with none.
fn verbs_qp(
    ctx: &Context,
    pd: &Pd,
    (kind, transport): (BackendKind, Transport),
    caps: QpCaps,
    op: OpKind,
    (buf_len, huge): (usize, bool),
    chan: Option<&CompChannel>,
) -> Result<(Qp, Cq, Mr), SetupError> {
    let cq = match chan {
        Some(ch) => Cq::with_channel(ctx, 2 * DEPTH, ch)?,
        None => Cq::new(ctx, 2 * DEPTH)?,
    };
    let wr = kind == BackendKind::Wr;
    let new = match transport {
        Transport::Rc => Qp::new_rc,
        Transport::Uc => Qp::new_uc,
        Transport::Ud => Qp::new_ud,
    };
    let qp = match new(pd, &cq, &cq, caps, wr) {
        Ok(q) => q,
        Err(_) => new(
            pd,
            &cq,
            &cq,
            QpCaps {
                max_inline_data: 0,
                ..caps
            },
            wr,
        )?,
    };
    let mr = Mr::new(pd, buf_len, access_for(op), huge)?;
    Ok((qp, cq, mr))
}

fn model_access(op: OpKind) -> u32 {
    access_for(op).0 | sys::IBV_ACCESS_LOCAL_WRITE
}

/// Two connected direct ends on model0.
pub fn model_pair(
    model: &Model,
    op: OpKind,
    buf_len: usize,
    mode: DbMode,
) -> Result<(DirectEnd<DirectModelQp>, DirectEnd<DirectModelQp>), SetupError> {
    model_pair_with(model, op, buf_len, mode, Transport::Rc)
}

/// As [`model_pair`], with QPs of transport `t`.
pub fn model_pair_with(
    model: &Model,
    op: OpKind,
    buf_len: usize,
    mode: DbMode,
    t: Transport,
) -> Result<(DirectEnd<DirectModelQp>, DirectEnd<DirectModelQp>), SetupError> {
    let pd = model.alloc_pd();
    let caps = ModelQpCaps {
        max_send_wr: DEPTH,
        max_recv_wr: DEPTH,
        max_recv_sge: 1,
        max_inline_data: INLINE,
    };
    let mode = Mlx5Env::get().direct_mode(mode);
    let qa = DirectModelQp::new(model, pd, caps, 2 * DEPTH, mode)?;
    let qb = DirectModelQp::new(model, pd, caps, 2 * DEPTH, mode)?;
    for q in [&qa, &qb] {
        q.qp.set_transport(t.model());
        q.qp.set_qkey(QKEY);
    }
    qa.qp.connect(qb.qp.qpn(), ModelConnect::default());
    qb.qp.connect(qa.qp.qpn(), ModelConnect::default());
    // UD: model0's own QPs have no address handles; the address vector names the peer's QP and
    // the Q_Key, all model0 reads of it (its port is InfiniBand, one LID for every QP)
    let (ava, avb) = (
        AvSeg::default().to(qb.qp.qpn(), QKEY),
        AvSeg::default().to(qa.qp.qpn(), QKEY),
    );
    let ma = model.reg_mr(pd, buf_len, model_access(op))?;
    let mb = model.reg_mr(pd, buf_len, model_access(op))?;
    let ra = crate::verbs::RemoteBuf {
        addr: ma.addr(),
        rkey: ma.rkey(),
        len: ma.len() as u64,
    };
    let rb = crate::verbs::RemoteBuf {
        addr: mb.addr(),
        rkey: mb.rkey(),
        len: mb.len() as u64,
    };
    let (ia, ib) = (qa.qp.sq_config().max_inline, qb.qp.sq_config().max_inline);
    // the inline limit granted (model0 sizes QPs as libmlx5 does: asking 220 grants 252)
    let (a, b) = (
        DirectEnd::new(qa, LocalBuf::Model(ma), rb, ia),
        DirectEnd::new(qb, LocalBuf::Model(mb), ra, ib),
    );
    Ok(if t == Transport::Ud {
        (a.with_datagram(ava), b.with_datagram(avb))
    } else {
        (a, b)
    })
}

/// Two connected direct ends on an mlx5 device.
pub fn mlx5_pair(
    dev: &Dev,
    op: OpKind,
    buf_len: usize,
    mode: DbMode,
) -> Result<(DirectEnd<DirectQp>, DirectEnd<DirectQp>), SetupError> {
    dev.supports(BackendKind::Direct)?;
    let Dev::Verbs { ctx, port, gid, .. } = dev else {
        unreachable!("supports() admits only mlx5 devices here")
    };
    let pd = Pd::new(ctx)?;
    let caps = qp_caps();
    let opts = connect_opts(ctx, port, *gid, op, dev.path())?;
    let mode = Mlx5Env::get().direct_mode(mode);
    let t = dev.transport().ibv_qp_type();
    let mut qa = DirectQp::with_type(&pd, caps, 2 * DEPTH, mode, t)?;
    let mut qb = DirectQp::with_type(&pd, caps, 2 * DEPTH, mode, t)?;
    if mode != DbMode::Db && (qa.shared_register() || qb.shared_register()) {
        eprintln!(
            "rdmaprobe: WARNING: no dedicated BlueFlame register left (ibv_alloc_td failed): the direct QPs ring \
             the 8-byte doorbell only, not {}",
            mode.as_str()
        );
    }
    let (ea, eb) = (qa.endpoint(port, *gid)?, qb.endpoint(port, *gid)?);
    let ud = if dev.transport() == Transport::Ud {
        let path = dev.path();
        qa.connect_ud(port, path.pkey_index, QKEY)?;
        qb.connect_ud(port, path.pkey_index, QKEY)?;
        Some((
            qa.datagrams_to(&pd, port, &eb, *gid, (path.sl, path.traffic_class), QKEY)?,
            qb.datagrams_to(&pd, port, &ea, *gid, (path.sl, path.traffic_class), QKEY)?,
        ))
    } else {
        path_taken(ctx, qa.connect(port, &opts, &eb)?)?;
        path_taken(ctx, qb.connect(port, &opts, &ea)?)?;
        None
    };
    let ma = Mr::new(&pd, buf_len, access_for(op), dev.huge_pages())?;
    let mb = Mr::new(&pd, buf_len, access_for(op), dev.huge_pages())?;
    let (ra, rb) = (ma.remote(0), mb.remote(0));
    let (ia, ib) = (qa.max_inline(), qb.max_inline());
    let (a, b) = (
        DirectEnd::new(qa, LocalBuf::Verbs(ma), rb, ia),
        DirectEnd::new(qb, LocalBuf::Verbs(mb), ra, ib),
    );
    Ok(match ud {
        Some((ava, avb)) => (a.with_datagram(ava), b.with_datagram(avb)),
        None => (a, b),
    })
}

/// One end of a connection between two processes, before it knows its peer. (A few exist per
/// run, briefly: the size difference between variants does not matter.)
#[allow(clippy::large_enum_variant)]
pub enum HalfEnd {
    /// verbs or wr.
    Verbs {
        /// Which of the two.
        kind: BackendKind,
        /// The QP.
        qp: Qp,
        /// Its CQ.
        cq: Cq,
        /// Its buffer.
        mr: Mr,
        /// -e: the completion channel its CQ was made on (it waits for events).
        chan: Option<CompChannel>,
    },
    /// direct on model0.
    Model {
        /// The queues.
        q: Box<DirectModelQp>,
        /// The buffer.
        mr: crate::model::ModelMr,
    },
    /// direct on mlx5.
    Mlx5 {
        /// The queues.
        q: Box<DirectQp>,
        /// The buffer.
        mr: Mr,
    },
}

/// `e`, waiting for completion events on `chan` when there is one.
fn events(e: VerbsEnd, chan: Option<CompChannel>) -> VerbsEnd {
    match chan {
        Some(ch) => e.with_events(ch),
        None => e,
    }
}

/// A connected end of any backend.
pub enum AnyEnd {
    /// verbs or wr.
    Verbs(Box<VerbsEnd>),
    /// direct on model0.
    Model(Box<DirectEnd<DirectModelQp>>),
    /// direct on mlx5.
    Mlx5(Box<DirectEnd<DirectQp>>),
}

impl AnyEnd {
    /// The QP's state as the device reads it back.
    pub fn describe(&self) -> String {
        use crate::backend::Backend;
        match self {
            AnyEnd::Verbs(e) => e.describe_qp(),
            AnyEnd::Model(e) => e.describe_qp(),
            AnyEnd::Mlx5(e) => e.describe_qp(),
        }
    }
}

impl HalfEnd {
    /// Creates this side's QP, CQ and buffer for `kind` on `dev`.
    pub fn new(dev: &Dev, kind: BackendKind, op: OpKind, buf_len: usize, mode: DbMode) -> Result<Self, SetupError> {
        dev.supports(kind)?;
        let caps = qp_caps();
        let mode = Mlx5Env::get().direct_mode(mode);
        Ok(match dev {
            Dev::Model(m) if kind == BackendKind::Direct => {
                let pd = m.alloc_pd();
                let mcaps = ModelQpCaps {
                    max_send_wr: DEPTH,
                    max_recv_wr: DEPTH,
                    max_recv_sge: 1,
                    max_inline_data: INLINE,
                };
                let q = DirectModelQp::new(m, pd, mcaps, 2 * DEPTH, mode)?;
                q.qp.set_transport(m.opts.transport.model());
                q.qp.set_qkey(QKEY);
                let mr = m.reg_mr(pd, buf_len, model_access(op))?;
                HalfEnd::Model { q: Box::new(q), mr }
            }
            _ => {
                let Some((ctx, _, _)) = dev.verbs_parts() else {
                    unreachable!("supports() admits only devices with a verbs context")
                };
                let pd = Pd::new(ctx)?;
                if kind == BackendKind::Direct {
                    let q = DirectQp::with_type(&pd, caps, 2 * DEPTH, mode, dev.transport().ibv_qp_type())?;
                    let mr = Mr::new(&pd, buf_len, access_for(op), dev.huge_pages())?;
                    HalfEnd::Mlx5 { q: Box::new(q), mr }
                } else {
                    let (qp, cq, mr) = verbs_qp(
                        ctx,
                        &pd,
                        (kind, dev.transport()),
                        caps,
                        op,
                        (buf_len, dev.huge_pages()),
                        None,
                    )?;
                    HalfEnd::Verbs {
                        kind,
                        qp,
                        cq,
                        mr,
                        chan: None,
                    }
                }
            }
        })
    }

    /// As [`HalfEnd::new`] for the verbs or wr backend, the CQ on a completion channel: the end
    /// waits for completion events (`-e`).
    pub fn with_events(dev: &Dev, kind: BackendKind, op: OpKind, buf_len: usize) -> Result<Self, SetupError> {
        if kind == BackendKind::Direct {
            return Err(SetupError::from(BackendError::Unsupported {
                backend: "direct",
                why:
                    "completion events (-e) are libibverbs' completion channel: the verbs and wr backends wait for them"
                        .into(),
            }));
        }
        dev.supports(kind)?;
        let Some((ctx, _, _)) = dev.verbs_parts() else {
            unreachable!("supports() admits the verbs backends only on devices with a verbs context")
        };
        let pd = Pd::new(ctx)?;
        let ch = CompChannel::new(ctx)?;
        let (qp, cq, mr) = verbs_qp(
            ctx,
            &pd,
            (kind, dev.transport()),
            qp_caps(),
            op,
            (buf_len, dev.huge_pages()),
            Some(&ch),
        )?;
        Ok(HalfEnd::Verbs {
            kind,
            qp,
            cq,
            mr,
            chan: Some(ch),
        })
    }

    /// What the peer needs: QP number, PSN, LID, GID, buffer address, rkey and length.
    pub fn info(&self, dev: &Dev) -> Result<crate::oob::QpInfo, SetupError> {
        let ep = |qp: &Qp| -> Result<crate::verbs::Endpoint, SetupError> {
            let Some((_, port, gid)) = dev.verbs_parts() else {
                unreachable!("verbs ends live on devices with a verbs context")
            };
            Ok(qp.endpoint(port, gid)?)
        };
        Ok(match self {
            HalfEnd::Verbs { qp, mr, .. } => {
                let e = ep(qp)?;
                crate::oob::QpInfo {
                    qpn: e.qpn,
                    psn: e.psn,
                    lid: e.lid,
                    gid: e.gid.0,
                    addr: mr.addr(),
                    rkey: mr.rkey(),
                    len: mr.len() as u64,
                }
            }
            HalfEnd::Mlx5 { q, mr } => {
                let Dev::Verbs { port, gid, .. } = dev else {
                    unreachable!("mlx5 ends live on verbs devices")
                };
                let e = q.endpoint(port, *gid)?;
                crate::oob::QpInfo {
                    qpn: e.qpn,
                    psn: e.psn,
                    lid: e.lid,
                    gid: e.gid.0,
                    addr: mr.addr(),
                    rkey: mr.rkey(),
                    len: mr.len() as u64,
                }
            }
            HalfEnd::Model { q, mr } => crate::oob::QpInfo {
                qpn: q.qp.qpn(),
                psn: 0,
                lid: 0,
                gid: [0; 16],
                addr: mr.addr(),
                rkey: mr.rkey(),
                len: mr.len() as u64,
            },
        })
    }

    /// The QP's number.
    pub fn qpn(&self) -> u32 {
        match self {
            HalfEnd::Verbs { qp, .. } => qp.qpn(),
            HalfEnd::Model { q, .. } => q.qp.qpn(),
            HalfEnd::Mlx5 { q, .. } => q.qpn(),
        }
    }

    /// Connects to the peer described by `r` (its buffer) with the attributes the connection
    /// manager gave (`-R`: RC on a verbs device); returns the end and its QP's attributes as read
    /// back in RTS.
    pub fn connect_cm(
        self,
        dev: &Dev,
        op: OpKind,
        r: &crate::oob::QpInfo,
        cm: &crate::verbs::cm::CmAttrs,
    ) -> Result<(AnyEnd, sys::ibv_qp_attr), SetupError> {
        let remote = crate::verbs::RemoteBuf {
            addr: r.addr,
            rkey: r.rkey,
            len: r.len,
        };
        let (Dev::Verbs { port, .. }, Transport::Rc) = (dev, dev.transport()) else {
            return Err(SetupError::from(VerbsError::Invalid {
                ctx: crate::verbs::Ctx::dev(&dev.name()),
                why: "-R connects RC QPs of an RDMA device through the connection manager".into(),
            }));
        };
        let mtu = dev.path().mtu;
        Ok(match self {
            HalfEnd::Verbs {
                kind,
                mut qp,
                cq,
                mr,
                chan,
            } => {
                let got = qp.connect_cm(port, access_for(op), cm, mtu)?;
                let e = VerbsEnd::new(kind, qp, cq, mr, remote)?;
                (AnyEnd::Verbs(Box::new(events(e, chan))), got)
            }
            HalfEnd::Mlx5 { mut q, mr } => {
                let got = q.connect_cm(port, access_for(op), cm, mtu)?;
                let inl = q.max_inline();
                (
                    AnyEnd::Mlx5(Box::new(DirectEnd::new(*q, LocalBuf::Verbs(mr), remote, inl))),
                    got,
                )
            }
            HalfEnd::Model { .. } => {
                return Err(SetupError::from(VerbsError::Invalid {
                    ctx: crate::verbs::Ctx::dev(&dev.name()),
                    why: "-R: model0 has no IP address for the connection manager to resolve".into(),
                }))
            }
        })
    }

    /// Connects to the peer described by `r`.
    pub fn connect(self, dev: &Dev, op: OpKind, r: &crate::oob::QpInfo) -> Result<AnyEnd, SetupError> {
        let remote = crate::verbs::RemoteBuf {
            addr: r.addr,
            rkey: r.rkey,
            len: r.len,
        };
        let rep = crate::verbs::Endpoint {
            qpn: r.qpn,
            psn: r.psn,
            lid: r.lid,
            gid: crate::verbs::Gid(r.gid),
        };
        if let Dev::Model(m) = dev {
            // the peer's QP must be one of model0's, and another process's: a peer that names one
            // of ours (or none) would have this process talk to itself or to nobody
            let why = match m.model.qp_owner(r.qpn) {
                None => Some("is not a QP of model0 here (is the peer on this machine, run by the same user?)"),
                Some(pid) if pid == std::process::id() => Some("is one of this process's own QPs"),
                Some(_) => None,
            };
            if let Some(why) = why {
                return Err(crate::model::ModelError::Invalid(format!(
                    "the peer's QP {:#x} {why}: refusing to connect to it",
                    r.qpn
                ))
                .into());
            }
        }
        // UD: each datagram names the peer's QP (through an address handle to it on a NIC)
        let ud = dev.transport() == Transport::Ud;
        let path = dev.path();
        Ok(match self {
            HalfEnd::Model { q, mr } => {
                q.qp.connect(r.qpn, ModelConnect::default());
                let inl = q.qp.sq_config().max_inline;
                let e = DirectEnd::new(*q, LocalBuf::Model(mr), remote, inl);
                AnyEnd::Model(Box::new(if ud {
                    e.with_datagram(AvSeg::default().to(r.qpn, QKEY))
                } else {
                    e
                }))
            }
            HalfEnd::Verbs {
                kind,
                mut qp,
                cq,
                mr,
                chan,
            } => {
                let Some((ctx, port, gid)) = dev.verbs_parts() else {
                    unreachable!("verbs ends live on devices with a verbs context")
                };
                if ud {
                    qp.connect_ud(port, path.pkey_index, QKEY)?;
                    let ah = Ah::new(mr.pd(), port, &rep, gid, (path.sl, path.traffic_class))?;
                    let e = VerbsEnd::new(kind, qp, cq, mr, remote)?.with_ud(ah, r.qpn, QKEY);
                    AnyEnd::Verbs(Box::new(events(e, chan)))
                } else {
                    let opts = connect_opts(ctx, port, gid, op, path)?;
                    path_taken(ctx, qp.connect(port, &opts, &rep)?)?;
                    AnyEnd::Verbs(Box::new(events(VerbsEnd::new(kind, qp, cq, mr, remote)?, chan)))
                }
            }
            HalfEnd::Mlx5 { mut q, mr } => {
                let Dev::Verbs { ctx, port, gid, .. } = dev else {
                    unreachable!("mlx5 ends live on verbs devices")
                };
                let av = if ud {
                    q.connect_ud(port, path.pkey_index, QKEY)?;
                    Some(q.datagrams_to(mr.pd(), port, &rep, *gid, (path.sl, path.traffic_class), QKEY)?)
                } else {
                    let opts = connect_opts(ctx, port, *gid, op, path)?;
                    path_taken(ctx, q.connect(port, &opts, &rep)?)?;
                    None
                };
                let inl = q.max_inline();
                let e = DirectEnd::new(*q, LocalBuf::Verbs(mr), remote, inl);
                AnyEnd::Mlx5(Box::new(match av {
                    Some(av) => e.with_datagram(av),
                    None => e,
                }))
            }
        })
    }
}
