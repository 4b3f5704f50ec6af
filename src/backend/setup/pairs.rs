//! Connected pairs of ends in one process, for each backend: both ends on one device, connected
//! to each other as two hosts would be.

use super::device::{Dev, Mlx5Env};
use super::qp::{access_for, connect_opts, model_access, model_qp_caps, qp_caps, verbs_qp, DEPTH};
use super::SetupError;
use crate::backend::direct::{DirectEnd, LocalBuf};
use crate::backend::path::path_taken;
use crate::backend::verbs::VerbsEnd;
use crate::backend::{BackendKind, OpKind, Transport, QKEY};
use crate::mlx5::seg::AvSeg;
use crate::mlx5::sq::DbMode;
use crate::model::{DirectModelQp, Model, ModelConnect};
use crate::verbs::direct::DirectQp;
use crate::verbs::{Ah, CompChannel, Mr, Pd};

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
    let (cha, chb) = if events {
        (Some(CompChannel::new(ctx)?), Some(CompChannel::new(ctx)?))
    } else {
        (None, None)
    };
    let t = dev.transport();
    let (mut qa, ca, ma) = verbs_qp(ctx, &pd, (kind, t), caps, op, (buf_len, dev.opts()), cha.as_ref())?;
    let (mut qb, cb, mb) = verbs_qp(ctx, &pd, (kind, t), caps, op, (buf_len, dev.opts()), chb.as_ref())?;
    let (ea, eb) = (qa.endpoint(port, gid)?, qb.endpoint(port, gid)?);
    let (mut a, mut b) = if t == Transport::Ud {
        // each end's datagrams go to the other through an address handle
        let path = dev.path();
        qa.connect_ud(port, path.pkey_index, QKEY)?;
        qb.connect_ud(port, path.pkey_index, QKEY)?;
        let (aha, ahb) = (
            Ah::new(&pd, port, &eb, gid, (path.sl, path.traffic_class))?,
            Ah::new(&pd, port, &ea, gid, (path.sl, path.traffic_class))?,
        );
        let (ra, rb) = (ma.remote(0), mb.remote(0));
        (
            VerbsEnd::new(kind, qa, ca, ma, rb)?.with_ud(aha, eb.qpn, QKEY),
            VerbsEnd::new(kind, qb, cb, mb, ra)?.with_ud(ahb, ea.qpn, QKEY),
        )
    } else {
        path_taken(ctx, qa.connect(port, &opts, &eb)?)?;
        path_taken(ctx, qb.connect(port, &opts, &ea)?)?;
        let (ra, rb) = (ma.remote(0), mb.remote(0));
        (
            VerbsEnd::new(kind, qa, ca, ma, rb)?,
            VerbsEnd::new(kind, qb, cb, mb, ra)?,
        )
    };
    if let (Some(x), Some(y)) = (cha, chb) {
        a = a.with_events(x);
        b = b.with_events(y);
    }
    Ok((a, b))
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
    let caps = model_qp_caps();
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
    let (ra, rb) = (model_remote(&ma), model_remote(&mb));
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

/// What the peer of an end with the model0 buffer `mr` writes and reads: all of it.
fn model_remote(mr: &crate::model::ModelMr) -> crate::verbs::RemoteBuf {
    crate::verbs::RemoteBuf {
        addr: mr.addr(),
        rkey: mr.rkey(),
        len: mr.len() as u64,
    }
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
