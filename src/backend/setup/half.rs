//! The ends of a connection between two processes (client and server): a [`HalfEnd`] made
//! before the peer is known, what the peer is told of it, and the [`AnyEnd`] it becomes once
//! connected to the peer (directly, or with the connection manager's attributes).

use super::device::{Dev, Mlx5Env};
use super::qp::{access_for, connect_opts, model_access, model_qp_caps, qp_caps, verbs_qp, DEPTH};
use super::SetupError;
use crate::backend::direct::{DirectEnd, LocalBuf};
use crate::backend::path::path_taken;
use crate::backend::verbs::VerbsEnd;
use crate::backend::{BackendKind, OpKind, Transport, QKEY};
use crate::mlx5::seg::AvSeg;
use crate::mlx5::sq::DbMode;
use crate::model::{DirectModelQp, ModelConnect};
use crate::sys;
use crate::verbs::direct::DirectQp;
use crate::verbs::{Ah, CompChannel, Cq, Mr, Pd, Qp, VerbsError};

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

    /// Where its buffer sits.
    pub fn placement(&self) -> crate::verbs::MrPlacement {
        use crate::backend::Backend;
        match self {
            AnyEnd::Verbs(e) => e.placement(),
            AnyEnd::Model(e) => e.placement(),
            AnyEnd::Mlx5(e) => e.placement(),
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
                let q = DirectModelQp::new(m, pd, model_qp_caps(), 2 * DEPTH, mode)?;
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
                    let (qp, cq, mr) =
                        verbs_qp(ctx, &pd, (kind, dev.transport()), caps, op, (buf_len, dev.opts()), None)?;
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
            return Err(super::no_events_on_direct());
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
            (buf_len, dev.opts()),
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
        Ok(match self {
            HalfEnd::Verbs { qp, mr, .. } => {
                let Some((_, port, gid)) = dev.verbs_parts() else {
                    unreachable!("verbs ends live on devices with a verbs context")
                };
                peer_info(&qp.endpoint(port, gid)?, mr)
            }
            HalfEnd::Mlx5 { q, mr } => {
                let Dev::Verbs { port, gid, .. } = dev else {
                    unreachable!("mlx5 ends live on verbs devices")
                };
                peer_info(&q.endpoint(port, *gid)?, mr)
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
        let remote = remote_of(r);
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
        if let Dev::Model(m) = dev {
            refuse_unknown_peer(&m.model, r.qpn)?;
        }
        Ok(match self {
            HalfEnd::Model { q, mr } => AnyEnd::Model(Box::new(connect_model(dev, *q, mr, r))),
            HalfEnd::Verbs { kind, qp, cq, mr, chan } => {
                AnyEnd::Verbs(Box::new(events(connect_verbs(dev, op, (kind, qp, cq, mr), r)?, chan)))
            }
            HalfEnd::Mlx5 { q, mr } => AnyEnd::Mlx5(Box::new(connect_mlx5(dev, op, *q, mr, r)?)),
        })
    }
}

/// The peer's buffer, as it described it.
fn remote_of(r: &crate::oob::QpInfo) -> crate::verbs::RemoteBuf {
    crate::verbs::RemoteBuf {
        addr: r.addr,
        rkey: r.rkey,
        len: r.len,
    }
}

/// The peer's QP, as it described it.
fn endpoint_of(r: &crate::oob::QpInfo) -> crate::verbs::Endpoint {
    crate::verbs::Endpoint {
        qpn: r.qpn,
        psn: r.psn,
        lid: r.lid,
        gid: crate::verbs::Gid(r.gid),
    }
}

/// What the peer is told of an end with QP `e` and buffer `mr`.
fn peer_info(e: &crate::verbs::Endpoint, mr: &Mr) -> crate::oob::QpInfo {
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

/// On model0: the peer's QP `qpn` must be one of model0's, and another process's: a peer that
/// names one of ours (or none) would have this process talk to itself or to nobody.
fn refuse_unknown_peer(model: &crate::model::Model, qpn: u32) -> Result<(), SetupError> {
    let why = match model.qp_owner(qpn) {
        None => Some("is not a QP of model0 here (is the peer on this machine, run by the same user?)"),
        Some(pid) if pid == std::process::id() => Some("is one of this process's own QPs"),
        Some(_) => None,
    };
    if let Some(why) = why {
        return Err(crate::model::ModelError::Invalid(format!(
            "the peer's QP {qpn:#x} {why}: refusing to connect to it"
        ))
        .into());
    }
    Ok(())
}

/// model0's direct end `q` connected to the peer `r` (UD: each datagram names the peer's QP).
fn connect_model(
    dev: &Dev,
    q: DirectModelQp,
    mr: crate::model::ModelMr,
    r: &crate::oob::QpInfo,
) -> DirectEnd<DirectModelQp> {
    q.qp.connect(r.qpn, ModelConnect::default());
    let inl = q.qp.sq_config().max_inline;
    let e = DirectEnd::new(q, LocalBuf::Model(mr), remote_of(r), inl);
    if dev.transport() == Transport::Ud {
        e.with_datagram(AvSeg::default().to(r.qpn, QKEY))
    } else {
        e
    }
}

/// A verbs (or wr) QP connected to the peer `r` with the device's path options (UD: its
/// datagrams go to the peer through an address handle), and its end.
fn connect_verbs(
    dev: &Dev,
    op: OpKind,
    (kind, mut qp, cq, mr): (BackendKind, Qp, Cq, Mr),
    r: &crate::oob::QpInfo,
) -> Result<VerbsEnd, SetupError> {
    let Some((ctx, port, gid)) = dev.verbs_parts() else {
        unreachable!("verbs ends live on devices with a verbs context")
    };
    let (path, rep, remote) = (dev.path(), endpoint_of(r), remote_of(r));
    if dev.transport() == Transport::Ud {
        qp.connect_ud(port, path.pkey_index, QKEY)?;
        let ah = Ah::new(mr.pd(), port, &rep, gid, (path.sl, path.traffic_class))?;
        Ok(VerbsEnd::new(kind, qp, cq, mr, remote)?.with_ud(ah, r.qpn, QKEY))
    } else {
        let opts = connect_opts(ctx, port, gid, op, path)?;
        path_taken(ctx, qp.connect(port, &opts, &rep)?)?;
        Ok(VerbsEnd::new(kind, qp, cq, mr, remote)?)
    }
}

/// An mlx5 direct QP connected to the peer `r` with the device's path options (UD: its
/// datagrams carry an address vector to the peer), and its end.
fn connect_mlx5(
    dev: &Dev,
    op: OpKind,
    mut q: DirectQp,
    mr: Mr,
    r: &crate::oob::QpInfo,
) -> Result<DirectEnd<DirectQp>, SetupError> {
    let Dev::Verbs { ctx, port, gid, .. } = dev else {
        unreachable!("mlx5 ends live on verbs devices")
    };
    let (path, rep) = (dev.path(), endpoint_of(r));
    let av = if dev.transport() == Transport::Ud {
        q.connect_ud(port, path.pkey_index, QKEY)?;
        Some(q.datagrams_to(mr.pd(), port, &rep, *gid, (path.sl, path.traffic_class), QKEY)?)
    } else {
        let opts = connect_opts(ctx, port, *gid, op, path)?;
        path_taken(ctx, q.connect(port, &opts, &rep)?)?;
        None
    };
    let inl = q.max_inline();
    let e = DirectEnd::new(q, LocalBuf::Verbs(mr), remote_of(r), inl);
    Ok(match av {
        Some(av) => e.with_datagram(av),
        None => e,
    })
}
