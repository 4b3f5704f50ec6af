//! The command table: every command model0 answers after GET_CONTEXT, by its number (legacy or
//! extended), with its handler, which splits the command, reads its request and answers it (the
//! larger commands' work is in `commands`).

use super::commands::{self, destroy_qp_ent, device_attr, port_attr, release_db};
use super::frame::{bytes, legacy, rd, Cmd};
use super::{errno_of, handle, Ctx, MR_PAGES, QPS_ERR};
use crate::sys::kabi as k;
use std::ffi::c_int;
use std::mem::size_of;

/// A command's handler: it runs in the descriptor's context, on the command as framed.
pub(super) type Handler = fn(&mut Ctx, &mut Cmd<'_>) -> Result<(), c_int>;

/// The commands model0 answers after GET_CONTEXT: (number, extended, handler).
#[rustfmt::skip]
const TABLE: &[(u32, bool, Handler)] = &[
    (k::IB_USER_VERBS_CMD_QUERY_DEVICE, false, query_device),
    (k::IB_USER_VERBS_EX_CMD_QUERY_DEVICE, true, ex_query_device),
    (k::IB_USER_VERBS_CMD_QUERY_PORT, false, query_port),
    (k::IB_USER_VERBS_CMD_ALLOC_PD, false, alloc_pd),
    (k::IB_USER_VERBS_CMD_DEALLOC_PD, false, dealloc_pd),
    (k::IB_USER_VERBS_CMD_REG_MR, false, reg_mr),
    (k::IB_USER_VERBS_CMD_DEREG_MR, false, dereg_mr),
    (k::IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL, false, create_comp_channel),
    (k::IB_USER_VERBS_CMD_CREATE_CQ, false, create_cq),
    (k::IB_USER_VERBS_EX_CMD_CREATE_CQ, true, ex_create_cq),
    (k::IB_USER_VERBS_CMD_DESTROY_CQ, false, destroy_cq),
    (k::IB_USER_VERBS_CMD_CREATE_QP, false, create_qp),
    (k::IB_USER_VERBS_EX_CMD_CREATE_QP, true, ex_create_qp),
    (k::IB_USER_VERBS_CMD_MODIFY_QP, false, modify_qp),
    (k::IB_USER_VERBS_EX_CMD_MODIFY_QP, true, ex_modify_qp),
    (k::IB_USER_VERBS_CMD_QUERY_QP, false, query_qp),
    (k::IB_USER_VERBS_CMD_DESTROY_QP, false, destroy_qp),
    (k::IB_USER_VERBS_CMD_CREATE_SRQ, false, super::srq::create_srq),
    (k::IB_USER_VERBS_CMD_QUERY_SRQ, false, super::srq::query_srq),
    (k::IB_USER_VERBS_CMD_MODIFY_SRQ, false, super::srq::modify_srq),
    (k::IB_USER_VERBS_CMD_DESTROY_SRQ, false, super::srq::destroy_srq),
];

/// Commands model0 does not answer, by the feature a program asked for with them: (number,
/// extended, what the program asked for). Said with the refusal, since libibverbs passes on
/// only the errno.
#[rustfmt::skip]
const UNSUPPORTED: &[(u32, bool, &str)] = &[
    (k::IB_USER_VERBS_CMD_CREATE_XSRQ, false, "an XRC or tag-matching SRQ (ibv_create_srq_ex)"),
    (k::IB_USER_VERBS_CMD_OPEN_XRCD, false, "an XRC domain (XRC, ibv_open_xrcd)"),
    (k::IB_USER_VERBS_CMD_OPEN_QP, false, "opening a shared XRC QP (ibv_open_qp)"),
    (k::IB_USER_VERBS_CMD_CREATE_AH, false, "an address handle made by the kernel (RoCE, ibv_create_ah)"),
    (k::IB_USER_VERBS_CMD_ALLOC_MW, false, "a memory window (ibv_alloc_mw)"),
    (k::IB_USER_VERBS_CMD_ATTACH_MCAST, false, "multicast (ibv_attach_mcast)"),
    (k::IB_USER_VERBS_CMD_REREG_MR, false, "re-registering a region (ibv_rereg_mr)"),
    (k::IB_USER_VERBS_CMD_RESIZE_CQ, false, "resizing a CQ (ibv_resize_cq)"),
    (k::IB_USER_VERBS_EX_CMD_MODIFY_CQ, true, "CQ moderation (ibv_modify_cq)"),
    (k::IB_USER_VERBS_EX_CMD_CREATE_WQ, true, "a work queue (ibv_create_wq)"),
    (k::IB_USER_VERBS_EX_CMD_CREATE_RWQ_IND_TBL, true, "an RSS indirection table (ibv_create_rwq_ind_table)"),
    (k::IB_USER_VERBS_EX_CMD_CREATE_FLOW, true, "a flow steering rule (ibv_create_flow)"),
];

/// What a program asked for with command `op` (`ex`: an extended one) that model0 does not do.
pub(super) fn unsupported(op: u32, ex: bool) -> Option<&'static str> {
    UNSUPPORTED
        .iter()
        .find(|&&(o, e, _)| o == op && e == ex)
        .map(|&(_, _, w)| w)
}

/// The handler of command `op` (`ex`: an extended one), if model0 answers it.
pub(super) fn handler(op: u32, ex: bool) -> Option<Handler> {
    TABLE.iter().find(|&&(o, e, _)| o == op && e == ex).map(|&(_, _, h)| h)
}

fn query_device(ctx: &mut Ctx, c: &mut Cmd<'_>) -> Result<(), c_int> {
    legacy::<k::ib_uverbs_query_device, k::ib_uverbs_query_device_resp>(c, true)?;
    c.resp.put(bytes(&device_attr(&ctx.model)), &[])
}

fn ex_query_device(ctx: &mut Ctx, c: &mut Cmd<'_>) -> Result<(), c_int> {
    // with the NIC clock of model0's CQE timestamps (`crate::model::clock`); a field past the
    // response length the caller gave is not copied (libibverbs then reports it 0)
    let mut r = k::ib_uverbs_ex_query_device_resp {
        base: device_attr(&ctx.model),
        timestamp_mask: crate::model::clock::TIMESTAMP_MASK,
        hca_core_clock: crate::model::clock::HCA_CORE_CLOCK_KHZ,
        ..Default::default()
    };
    r.response_length = (size_of::<k::ib_uverbs_ex_query_device_resp>().min(c.resp.core)) as u32;
    c.resp.put(bytes(&r), &[])
}

fn query_port(_: &mut Ctx, c: &mut Cmd<'_>) -> Result<(), c_int> {
    legacy::<k::ib_uverbs_query_port, k::ib_uverbs_query_port_resp>(c, true)?;
    let q: k::ib_uverbs_query_port = rd(c.core, 0);
    if q.port_num != 1 {
        return errno_of(
            format!("QUERY_PORT of port {}: model0 has port 1", q.port_num),
            libc::EINVAL,
        );
    }
    c.resp.put(bytes(&port_attr()), &[])
}

fn alloc_pd(ctx: &mut Ctx, c: &mut Cmd<'_>) -> Result<(), c_int> {
    legacy::<k::ib_uverbs_alloc_pd, k::ib_uverbs_alloc_pd_resp>(c, true)?;
    let h = handle(ctx);
    let pdn = ctx.model.alloc_pd();
    ctx.pds.insert(h, pdn);
    let r = k::ib_uverbs_alloc_pd_resp {
        pd_handle: h,
        ..Default::default()
    };
    let d = k::mlx5_ib_alloc_pd_resp { pdn: pdn & 0xff_ffff };
    c.resp.put(bytes(&r), bytes(&d))
}

fn dealloc_pd(ctx: &mut Ctx, c: &mut Cmd<'_>) -> Result<(), c_int> {
    legacy::<k::ib_uverbs_dealloc_pd, ()>(c, false)?;
    let q: k::ib_uverbs_dealloc_pd = rd(c.core, 0);
    let Some(&pdn) = ctx.pds.get(&q.pd_handle) else {
        return errno_of(format!("DEALLOC_PD of unknown handle {}", q.pd_handle), libc::EINVAL);
    };
    // as the kernel: a PD still used by a region or a QP is busy
    if ctx.mrs.values().any(|e| e.mr.pd() == pdn)
        || ctx.qps.values().any(|e| e.pdn == pdn)
        || super::srq::uses_pd(ctx, pdn)
    {
        return errno_of(format!("DEALLOC_PD {}: still in use", q.pd_handle), libc::EBUSY);
    }
    ctx.pds.remove(&q.pd_handle);
    Ok(())
}

fn reg_mr(ctx: &mut Ctx, c: &mut Cmd<'_>) -> Result<(), c_int> {
    legacy::<k::ib_uverbs_reg_mr, k::ib_uverbs_reg_mr_resp>(c, true)?;
    commands::reg_mr(ctx, c)
}

fn dereg_mr(ctx: &mut Ctx, c: &mut Cmd<'_>) -> Result<(), c_int> {
    legacy::<k::ib_uverbs_dereg_mr, ()>(c, false)?;
    let q: k::ib_uverbs_dereg_mr = rd(c.core, 0);
    match ctx.mrs.remove(&q.mr_handle) {
        Some(e) => {
            super::pins::release(&mut MR_PAGES.lock().unwrap_or_else(|p| p.into_inner()), e);
            Ok(())
        }
        None => errno_of(format!("DEREG_MR of unknown handle {}", q.mr_handle), libc::EINVAL),
    }
}

fn create_comp_channel(_: &mut Ctx, c: &mut Cmd<'_>) -> Result<(), c_int> {
    legacy::<k::ib_uverbs_create_comp_channel, k::ib_uverbs_create_comp_channel_resp>(c, true)?;
    let (_, fd) = crate::model::events::create().or_else(|e| {
        let n = e.raw_os_error().unwrap_or(libc::EMFILE);
        errno_of(format!("a completion channel: {e}"), n)
    })?;
    c.resp
        .put(bytes(&k::ib_uverbs_create_comp_channel_resp { fd: fd as u32 }), &[])
}

fn create_cq(ctx: &mut Ctx, c: &mut Cmd<'_>) -> Result<(), c_int> {
    legacy::<k::ib_uverbs_create_cq, k::ib_uverbs_create_cq_resp>(c, true)?;
    let q: k::ib_uverbs_create_cq = rd(c.core, 0);
    commands::create_cq(ctx, c, q.cqe, (q.comp_channel, q.user_handle), false)
}

fn ex_create_cq(ctx: &mut Ctx, c: &mut Cmd<'_>) -> Result<(), c_int> {
    let q: k::ib_uverbs_ex_create_cq = rd(c.core, 0);
    if q.flags != 0 {
        return errno_of(
            format!("CREATE_CQ flags {:#x} not supported", q.flags),
            libc::EOPNOTSUPP,
        );
    }
    commands::create_cq(ctx, c, q.cqe, (q.comp_channel, q.user_handle), true)
}

fn destroy_cq(ctx: &mut Ctx, c: &mut Cmd<'_>) -> Result<(), c_int> {
    legacy::<k::ib_uverbs_destroy_cq, k::ib_uverbs_destroy_cq_resp>(c, true)?;
    let q: k::ib_uverbs_destroy_cq = rd(c.core, 0);
    if ctx
        .qps
        .values()
        .any(|e| e.send_cq == q.cq_handle || e.recv_cq == q.cq_handle)
    {
        return errno_of(format!("DESTROY_CQ {}: a QP still uses it", q.cq_handle), libc::EBUSY);
    }
    let Some(e) = ctx.cqs.remove(&q.cq_handle) else {
        return errno_of(format!("DESTROY_CQ of unknown handle {}", q.cq_handle), libc::EINVAL);
    };
    // libibverbs waits until the program has acknowledged every event reported
    let r = k::ib_uverbs_destroy_cq_resp {
        comp_events_reported: e.cq.events_read(),
        async_events_reported: 0,
    };
    drop(e.cq);
    release_db(ctx, e.db);
    c.resp.put(bytes(&r), &[])
}

/// The legacy CREATE_QP, read into the extended command's request.
fn create_qp(ctx: &mut Ctx, c: &mut Cmd<'_>) -> Result<(), c_int> {
    legacy::<k::ib_uverbs_create_qp, k::ib_uverbs_create_qp_resp>(c, true)?;
    let q: k::ib_uverbs_create_qp = rd(c.core, 0);
    let e = k::ib_uverbs_ex_create_qp {
        user_handle: q.user_handle,
        pd_handle: q.pd_handle,
        send_cq_handle: q.send_cq_handle,
        recv_cq_handle: q.recv_cq_handle,
        srq_handle: q.srq_handle,
        max_send_wr: q.max_send_wr,
        max_recv_wr: q.max_recv_wr,
        max_send_sge: q.max_send_sge,
        max_recv_sge: q.max_recv_sge,
        max_inline_data: q.max_inline_data,
        sq_sig_all: q.sq_sig_all,
        qp_type: q.qp_type,
        is_srq: q.is_srq,
        ..Default::default()
    };
    commands::create_qp(ctx, c, &e, false)
}

fn ex_create_qp(ctx: &mut Ctx, c: &mut Cmd<'_>) -> Result<(), c_int> {
    let e: k::ib_uverbs_ex_create_qp = rd(c.core, 0);
    commands::create_qp(ctx, c, &e, true)
}

fn modify_qp(ctx: &mut Ctx, c: &mut Cmd<'_>) -> Result<(), c_int> {
    legacy::<k::ib_uverbs_modify_qp, ()>(c, false)?;
    let q: k::ib_uverbs_modify_qp = rd(c.core, 0);
    commands::modify_qp(ctx, &q)
}

fn ex_modify_qp(ctx: &mut Ctx, c: &mut Cmd<'_>) -> Result<(), c_int> {
    let q: k::ib_uverbs_ex_modify_qp = rd(c.core, 0);
    commands::modify_qp(ctx, &q.base)?;
    let r = k::ib_uverbs_ex_modify_qp_resp {
        comp_mask: 0,
        response_length: size_of::<k::ib_uverbs_ex_modify_qp_resp>() as u32,
    };
    c.resp.put(bytes(&r), &[])
}

fn query_qp(ctx: &mut Ctx, c: &mut Cmd<'_>) -> Result<(), c_int> {
    legacy::<k::ib_uverbs_query_qp, k::ib_uverbs_query_qp_resp>(c, true)?;
    let q: k::ib_uverbs_query_qp = rd(c.core, 0);
    let Some(e) = ctx.qps.get(&q.qp_handle) else {
        return errno_of(format!("QUERY_QP of unknown handle {}", q.qp_handle), libc::EINVAL);
    };
    let mut a: k::ib_uverbs_query_qp_resp = rd(bytes(&e.attr), 0);
    // the model moves a QP to error on a failed WQE, as a NIC does
    if e.qp.state() == crate::model::state::ERR {
        a.qp_state = QPS_ERR;
    }
    a.cur_qp_state = a.qp_state;
    c.resp.put(bytes(&a), &[])
}

fn destroy_qp(ctx: &mut Ctx, c: &mut Cmd<'_>) -> Result<(), c_int> {
    legacy::<k::ib_uverbs_destroy_qp, k::ib_uverbs_destroy_qp_resp>(c, true)?;
    let q: k::ib_uverbs_destroy_qp = rd(c.core, 0);
    if !ctx.qps.contains_key(&q.qp_handle) {
        return errno_of(format!("DESTROY_QP of unknown handle {}", q.qp_handle), libc::EINVAL);
    }
    destroy_qp_ent(
        ctx,
        q.qp_handle,
        &mut super::QPS.lock().unwrap_or_else(|p| p.into_inner()),
    );
    c.resp.put(bytes(&k::ib_uverbs_destroy_qp_resp::default()), &[])
}
