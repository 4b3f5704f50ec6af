//! What every QP the scenarios make is made with: queue sizes, capabilities, access flags and
//! connection options; and one verbs (or wr) QP with its CQ and buffer.

use super::SetupError;
use crate::backend::path::PathOpts;
use crate::backend::{BackendKind, OpKind, Transport};
use crate::model::ModelQpCaps;
use crate::sys;
use crate::verbs::{CompChannel, ConnectOpts, Context, Cq, Mr, MrAccess, Pd, PortInfo, Qp, QpCaps};

/// Queue sizes used by the scenarios.
pub const DEPTH: u32 = 128;
/// Inline size asked for.
pub const INLINE: u32 = 220;

/// The capabilities of every verbs or mlx5 QP the scenarios create.
pub(super) fn qp_caps() -> QpCaps {
    QpCaps {
        max_send_wr: DEPTH,
        max_recv_wr: DEPTH,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: INLINE,
    }
}

/// The capabilities of every model0 direct QP the scenarios create.
pub(super) fn model_qp_caps() -> ModelQpCaps {
    ModelQpCaps {
        max_send_wr: DEPTH,
        max_recv_wr: DEPTH,
        max_recv_sge: 1,
        max_inline_data: INLINE,
    }
}

/// Outstanding RDMA READs and atomics a QP allows at most (perftest's default of `-o`: the
/// device's limit, which is 16 on ConnectX).
pub const MAX_RD_ATOMIC: u8 = 16;

/// How a scenario's QP connects on `port` with GID index `gid`, with the access `op` needs and
/// as many outstanding READs and atomics as the device allows (up to [`MAX_RD_ATOMIC`]; as
/// perftest, so a READ or atomic stream is not held to one at a time).
pub(super) fn connect_opts(
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
        max_rd_atomic: path.max_rd_atomic.map_or(rd, |m| m.clamp(1, rd)),
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

/// How the key-value workload's UC QPs connect (as a WRITE scenario's).
pub fn kv_connect_opts(
    ctx: &Context,
    port: &PortInfo,
    gid: Option<u8>,
    path: PathOpts,
) -> Result<ConnectOpts, SetupError> {
    connect_opts(ctx, port, gid, OpKind::Write, path)
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

/// One verbs (or wr) QP with its CQ (on completion channel `chan`, if any; with completion
/// timestamps when the device's options ask) and buffer (`buf_len` bytes, on huge pages when
/// asked) in `pd`. Some providers grant less inline data than asked: the QP is then made again
/// with none.
pub(super) fn verbs_qp(
    ctx: &Context,
    pd: &Pd,
    (kind, transport): (BackendKind, Transport),
    caps: QpCaps,
    op: OpKind,
    (buf_len, dev): (usize, super::DevOpts),
    chan: Option<&CompChannel>,
) -> Result<(Qp, Cq, Mr), SetupError> {
    let huge = dev.huge_pages;
    let cq = match chan {
        _ if dev.timestamps => Cq::with_timestamps_on(ctx, 2 * DEPTH, chan)?,
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

/// The access of a model0 buffer for `op`, as model0 takes it (with local write).
pub(super) fn model_access(op: OpKind) -> u32 {
    access_for(op).0 | sys::IBV_ACCESS_LOCAL_WRITE
}
