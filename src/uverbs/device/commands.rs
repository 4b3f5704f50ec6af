//! The commands' work: GET_CONTEXT, the device and port attributes, and the objects (memory
//! regions, CQs, QPs, the doorbell-record pages they share) made, changed and destroyed with the
//! checks the mlx5 kernel driver makes.

use super::frame::{bytes, rd, Cmd};
use super::{
    errno_of, handle, CqEnt, Ctx, DbRef, QpEnt, BF_REG_SIZE, DYN_BFREGS, MR_PAGES, NO_BFREG, PAGE, QPS, QPS_ERR,
    QPS_INIT, QPS_RESET, QPS_RTR, QPS_RTS, TOT_BFREGS,
};
use crate::model::{Model, ModelCq, UserQpLayout};
use crate::sys::kabi as k;
use crate::sys::{
    IBV_QP_ACCESS_FLAGS, IBV_QP_AV, IBV_QP_DEST_QPN, IBV_QP_MAX_DEST_RD_ATOMIC, IBV_QP_MAX_QP_RD_ATOMIC,
    IBV_QP_MIN_RNR_TIMER, IBV_QP_PATH_MTU, IBV_QP_PKEY_INDEX, IBV_QP_PORT, IBV_QP_QKEY, IBV_QP_RETRY_CNT,
    IBV_QP_RNR_RETRY, IBV_QP_RQ_PSN, IBV_QP_SQ_PSN, IBV_QP_STATE, IBV_QP_TIMEOUT,
};
use std::ffi::{c_int, c_void};
use std::mem::size_of;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;

/// Answers GET_CONTEXT; returns how many low-latency BlueFlame registers libmlx5 asked for.
pub(super) fn get_context(c: &Cmd<'_>) -> Result<u32, c_int> {
    let req: k::mlx5_ib_alloc_ucontext_req_v2 = rd(c.drv, 0);
    if req.total_num_bfregs > TOT_BFREGS || req.num_low_latency_bfregs >= TOT_BFREGS {
        return errno_of(
            format!(
                "GET_CONTEXT asks {} BlueFlame registers, {} of them low-latency: model0 has {TOT_BFREGS}",
                req.total_num_bfregs, req.num_low_latency_bfregs
            ),
            libc::EINVAL,
        );
    }
    // SAFETY: an eventfd nobody signals: model0 raises no asynchronous events.
    let async_fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if async_fd < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EMFILE));
    }
    let r = k::ib_uverbs_get_context_resp {
        async_fd: async_fd as u32,
        num_comp_vectors: 1,
        ..Default::default()
    };
    let d = k::mlx5_ib_alloc_ucontext_resp {
        qp_tab_size: 1 << 18,
        bf_reg_size: BF_REG_SIZE,
        tot_bfregs: TOT_BFREGS,
        cache_line_size: 64,
        max_sq_desc_sz: 1024,
        max_rq_desc_sz: 512,
        max_send_wqebb: 1 << 15,
        max_recv_wr: 1 << 15,
        max_srq_recv_wr: 1 << 15,
        num_ports: 1,
        cqe_version: req.max_cqe_version.min(1),
        response_length: size_of::<k::mlx5_ib_alloc_ucontext_resp>() as u32,
        log_uar_size: 12,
        num_uars_per_page: 1,
        num_dyn_bfregs: DYN_BFREGS,
        // the NIC clock's pages (`clock`): the timer at offset 0 of its page, and version 1 of
        // the clock info
        comp_mask: k::MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_CORE_CLOCK_OFFSET,
        hca_core_clock_offset: 0,
        clock_info_versions: 1 << k::MLX5_IB_CLOCK_INFO_V1,
        ..Default::default()
    };
    if let Err(e) = c.resp.put(bytes(&r), bytes(&d)) {
        // SAFETY: the eventfd made above, not handed out.
        unsafe { libc::close(async_fd) };
        return Err(e);
    }
    Ok(req.num_low_latency_bfregs)
}

/// A BlueFlame register for a new QP, as the mlx5 kernel driver allocates them: a free
/// low-latency one (the last `low_latency`, one QP each), else the least used medium one, else
/// register 0 (no BlueFlame, doorbells only). Returns the register and the index libmlx5 takes
/// (`bfs[]` counts 4 registers per UAR page, 2 of them usable: the kernel's adjust_bfregn).
fn alloc_bfreg(ctx: &mut Ctx) -> (u32, u32) {
    let first_low = TOT_BFREGS - ctx.low_latency;
    let n = (first_low..TOT_BFREGS)
        .find(|&i| ctx.bfreg_users[i as usize] == 0)
        .or_else(|| (1..first_low).min_by_key(|&i| ctx.bfreg_users[i as usize]))
        .unwrap_or(0);
    ctx.bfreg_users[n as usize] += 1;
    (n, n / 2 * 4 + n % 2)
}

/// What a ConnectX-5 reports, with model0's limits; atomics: `IBV_ATOMIC_HCA` when model0 works
/// on host-order words, none when on big-endian ones (as the mlx5 kernel driver advertises).
pub(super) fn device_attr(m: &Model) -> k::ib_uverbs_query_device_resp {
    k::ib_uverbs_query_device_resp {
        fw_ver: (16u64 << 32) | (35 << 16) | 1000,
        node_guid: 0x0000_0000_0000_0001u64.to_be(),
        sys_image_guid: 0x0000_0000_0000_0001u64.to_be(),
        max_mr_size: u64::MAX,
        page_size_cap: !(PAGE as u64 - 1),
        vendor_id: 0x02c9,
        vendor_part_id: 4119,
        hw_ver: 0,
        max_qp: 1 << 18,
        max_qp_wr: 1 << 15,
        device_cap_flags: 0,
        max_sge: 30,
        max_sge_rd: 30,
        max_cq: 1 << 24,
        max_cqe: (1 << 22) - 1,
        max_mr: 1 << 24,
        max_pd: 1 << 24,
        max_qp_rd_atom: 16,
        max_res_rd_atom: 16 << 18,
        max_qp_init_rd_atom: 16,
        max_srq: 1 << 23,
        max_srq_wr: (1 << 15) - 1,
        max_srq_sge: 31,
        atomic_cap: if m.config().atomic_big_endian {
            crate::sys::IBV_ATOMIC_NONE
        } else {
            crate::sys::IBV_ATOMIC_HCA
        },
        max_pkeys: 128,
        local_ca_ack_delay: 16,
        phys_port_cnt: 1,
        ..Default::default()
    }
}

pub(super) fn port_attr() -> k::ib_uverbs_query_port_resp {
    k::ib_uverbs_query_port_resp {
        port_cap_flags: 0,
        max_msg_sz: 1 << 30,
        gid_tbl_len: 1,
        pkey_tbl_len: 1,
        lid: 1,
        sm_lid: 1,
        state: crate::sys::IBV_PORT_ACTIVE as u8,
        max_mtu: crate::sys::IBV_MTU_4096 as u8,
        active_mtu: crate::sys::IBV_MTU_4096 as u8,
        max_vl_num: 4,
        active_width: 2,  // 4x
        active_speed: 32, // EDR
        phys_state: 5,    // LinkUp
        link_layer: crate::sys::IBV_LINK_LAYER_INFINIBAND as u8,
        ..Default::default()
    }
}

pub(super) fn reg_mr(ctx: &mut Ctx, c: &Cmd<'_>) -> Result<(), c_int> {
    let q: k::ib_uverbs_reg_mr = rd(c.core, 0);
    let Some(&pdn) = ctx.pds.get(&q.pd_handle) else {
        return errno_of(format!("REG_MR in unknown PD handle {}", q.pd_handle), libc::EINVAL);
    };
    let (start, len) = (q.start as usize, q.length as usize);
    // the kernel's checks (ib_check_mr_access): remote write or atomic needs local write
    let remote_w = crate::sys::IBV_ACCESS_REMOTE_WRITE | crate::sys::IBV_ACCESS_REMOTE_ATOMIC;
    if q.access_flags & remote_w != 0 && q.access_flags & crate::sys::IBV_ACCESS_LOCAL_WRITE == 0 {
        return errno_of(
            format!(
                "REG_MR with access {:#x}: remote write or atomic without local write",
                q.access_flags
            ),
            libc::EINVAL,
        );
    }
    let Some(e0) = start.checked_add(len).and_then(|e| e.checked_next_multiple_of(PAGE)) else {
        return errno_of(
            format!("REG_MR of {start:#x} + {len}: the range overflows"),
            libc::EINVAL,
        );
    };
    if len == 0 {
        return errno_of("REG_MR of 0 bytes", libc::EINVAL);
    }
    let s0 = start & !(PAGE - 1);
    // every page mapped (the kernel pins with get_user_pages and answers EFAULT)
    if !mapped(s0, e0 - s0) {
        return errno_of(
            format!("REG_MR of {start:#x} + {len}: not all of it is mapped"),
            libc::EFAULT,
        );
    }
    // model0 pins a page once, by mapping a region's file over it (pins.rs): a region on the
    // same pages as a region of any context of this process uses them
    let mut pages = MR_PAGES.lock().unwrap_or_else(|p| p.into_inner());
    let Ok(host) = super::pins::find(&pages, s0, e0) else {
        return errno_of(
            format!("REG_MR of {start:#x} + {len}: its pages overlap another region's, not on the same pages (model0 pins whole pages, once)"),
            libc::EOPNOTSUPP,
        );
    };
    let mr = match host {
        Some((key, hs0)) => {
            let (pa, span) = ((pdn, q.access_flags), (start, len, q.hca_va));
            ctx.model.reg_user_mr_in(pa, span, key, hs0)
        }
        // SAFETY: libibverbs registers memory the program owns and keeps until DEREG_MR.
        None => unsafe { ctx.model.reg_user_mr(pdn, start, len, q.hca_va, q.access_flags) },
    }
    .or_else(|e| model_errno(e, libc::ENOMEM))?;
    let h = handle(ctx);
    let r = k::ib_uverbs_reg_mr_resp {
        mr_handle: h,
        lkey: mr.lkey(),
        rkey: mr.rkey(),
        ..Default::default()
    };
    let e = super::pins::add(&mut pages, mr, (s0, e0), host.map(|h| h.0));
    ctx.mrs.insert(h, e);
    c.resp.put(bytes(&r), &[])
}

/// A model error answered with the errno that caused it (too many open files, a full
/// directory, no memory: what the model met creating the object), else with `otherwise`.
fn model_errno<T>(e: crate::model::ModelError, otherwise: c_int) -> Result<T, c_int> {
    let n = e.errno().unwrap_or(otherwise);
    errno_of(e, n)
}

/// Whether every page of `[addr, addr + len)` is mapped (`mincore` answers ENOMEM otherwise).
fn mapped(addr: usize, len: usize) -> bool {
    let mut vec = vec![0u8; len.div_ceil(PAGE)];
    // SAFETY: mincore only inspects the range and writes one byte per page into `vec`.
    unsafe { libc::mincore(addr as *mut c_void, len, vec.as_mut_ptr()) == 0 }
}

/// Pins the doorbell-record page holding `addr` (once per page), returns the page and offset.
pub(super) fn take_db(ctx: &mut Ctx, addr: u64) -> Result<(usize, u32), c_int> {
    let page = addr as usize & !(PAGE - 1);
    if let Some(d) = ctx.dbs.get_mut(&page) {
        d.refs += 1;
    } else {
        // SAFETY: libmlx5's record page, allocated until the last object using it is destroyed.
        let p = unsafe { ctx.model.map_db_page(page) }.or_else(|e| model_errno(e, libc::ENOMEM))?;
        ctx.dbs.insert(page, DbRef { page: p, refs: 1 });
    }
    Ok((page, (addr as usize - page) as u32))
}

pub(super) fn release_db(ctx: &mut Ctx, page: usize) {
    if let Some(d) = ctx.dbs.get_mut(&page) {
        d.refs -= 1;
        if d.refs == 0 {
            ctx.dbs.remove(&page);
        }
    }
}

pub(super) fn create_cq(
    ctx: &mut Ctx,
    c: &Cmd<'_>,
    cqe: u32,
    (channel, user_handle): (i32, u64),
    ex: bool,
) -> Result<(), c_int> {
    let d: k::mlx5_ib_create_cq = rd(c.drv, 0);
    let chan = match channel {
        ..0 => None,
        fd => match crate::model::events::by_fd(fd) {
            Some(id) => Some(id),
            None => {
                return errno_of(
                    format!("CREATE_CQ with completion channel {fd}: not a channel of model0's"),
                    libc::EINVAL,
                )
            }
        },
    };
    if d.cqe_size != 64 && d.cqe_size != 128 {
        return errno_of(
            format!(
                "CREATE_CQ with {}-byte CQEs: model0 writes 64- and 128-byte CQEs",
                d.cqe_size
            ),
            libc::EOPNOTSUPP,
        );
    }
    let cnt = cqe.wrapping_add(1);
    let (page, off) = take_db(ctx, d.db_addr)?;
    let db = &ctx.dbs[&page].page;
    // SAFETY: libmlx5's CQ buffer of `cnt` entries of `cqe_size` bytes, kept until DESTROY_CQ.
    let cq = match unsafe {
        ctx.model
            .create_user_cq(cnt, d.cqe_size as usize, d.buf_addr as usize, db, off)
    } {
        Ok(cq) => cq,
        Err(e) => {
            release_db(ctx, page);
            return model_errno(e, libc::EINVAL);
        }
    };
    if let Some(id) = chan {
        cq.attach_channel(id, user_handle);
    }
    let h = handle(ctx);
    let r = k::ib_uverbs_create_cq_resp {
        cq_handle: h,
        cqe: cnt - 1,
        ..Default::default()
    };
    let dr = k::mlx5_ib_create_cq_resp {
        cqn: cq.cqn(),
        ..Default::default()
    };
    ctx.cqs.insert(h, CqEnt { cq, db: page });
    if ex {
        let e = k::ib_uverbs_ex_create_cq_resp {
            base: r,
            comp_mask: 0,
            response_length: size_of::<k::ib_uverbs_ex_create_cq_resp>() as u32,
        };
        c.resp.put(bytes(&e), bytes(&dr))
    } else {
        c.resp.put(bytes(&r), bytes(&dr))
    }
}

/// CREATE_QP (`q`, legacy requests read into the extended one; `ex`: answered as extended): a
/// model0 QP over libmlx5's buffer and doorbell record, with a BlueFlame register.
pub(super) fn create_qp(ctx: &mut Ctx, c: &Cmd<'_>, q: &k::ib_uverbs_ex_create_qp, ex: bool) -> Result<(), c_int> {
    let d: k::mlx5_ib_create_qp = rd(c.drv, 0);
    let transport = qp_transport(q)?;
    check_qp_request(q, &d)?;
    let (Some(&pdn), Some(scq), Some(rcq)) = (
        ctx.pds.get(&q.pd_handle),
        ctx.cqs.get(&q.send_cq_handle),
        ctx.cqs.get(&q.recv_cq_handle),
    ) else {
        return errno_of("CREATE_QP with an unknown PD or CQ handle", libc::EINVAL);
    };
    let mut l = user_qp_layout(q, &d);
    let srq = if q.is_srq != 0 {
        match ctx.srqs.get(&q.srq_handle) {
            Some(s) => {
                l.srqn = s.srq.srqn();
                Some(q.srq_handle)
            }
            None => {
                return errno_of(
                    format!("CREATE_QP with unknown SRQ handle {}", q.srq_handle),
                    libc::EINVAL,
                )
            }
        }
    } else {
        None
    };
    let (send_cq, recv_cq) = (q.send_cq_handle, q.recv_cq_handle);
    let (scq, rcq) = (&scq.cq as *const ModelCq, &rcq.cq as *const ModelCq);
    let (page, off) = take_db(ctx, d.db_addr)?;
    let db = &ctx.dbs[&page].page;
    // SAFETY: the CQs are entries of `ctx.cqs`, not moved by `take_db` (which touches `dbs`);
    // libmlx5's QP buffer is kept until DESTROY_QP.
    let qp = match unsafe { ctx.model.create_user_qp(pdn, &*scq, &*rcq, l, db, off) } {
        Ok(qp) => Arc::new(qp),
        Err(e) => {
            release_db(ctx, page);
            return model_errno(e, libc::EINVAL);
        }
    };
    qp.set_transport(transport);
    let h = handle(ctx);
    let qpn = qp.qpn();
    QPS.lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((qpn, Arc::downgrade(&qp), Arc::new(AtomicU32::new(0))));
    super::qps::changed();
    // a thread-domain QP names its dynamic register itself (MLX5_QP_FLAG_BFREG_INDEX): it takes
    // none of the static ones
    let (bfreg, bfreg_index) = if d.flags & k::MLX5_QP_FLAG_BFREG_INDEX != 0 {
        (NO_BFREG, d.bfreg_index)
    } else {
        alloc_bfreg(ctx)
    };
    ctx.qps.insert(
        h,
        QpEnt {
            qp,
            pdn,
            db: page,
            bfreg,
            send_cq,
            recv_cq,
            srq,
            attr: initial_qp_attr(q),
        },
    );
    answer_create_qp(c, q, (h, qpn), bfreg_index, ex)
}

/// The model's transport for a CREATE_QP of `q.qp_type` (RC, UC or UD; others unsupported).
fn qp_transport(q: &k::ib_uverbs_ex_create_qp) -> Result<u32, c_int> {
    match q.qp_type as u32 {
        crate::sys::IBV_QPT_RC => Ok(crate::model::transport::RC),
        crate::sys::IBV_QPT_UC => Ok(crate::model::transport::UC),
        crate::sys::IBV_QPT_UD => Ok(crate::model::transport::UD),
        t => errno_of(
            format!("CREATE_QP of type {t}: model0 has RC, UC and UD QPs"),
            libc::EOPNOTSUPP,
        ),
    }
}

/// Refuses what model0 does not do in a CREATE_QP (`q`, libmlx5's part `d`): create flags
/// other than signalling all, a comp_mask, unknown mlx5 flags, WQE signatures.
fn check_qp_request(q: &k::ib_uverbs_ex_create_qp, d: &k::mlx5_ib_create_qp) -> Result<(), c_int> {
    if q.create_flags & !k::IB_UVERBS_QP_CREATE_SQ_SIG_ALL != 0 || q.comp_mask != 0 {
        return errno_of(
            format!(
                "CREATE_QP with create flags {:#x} or comp_mask {:#x}",
                q.create_flags, q.comp_mask
            ),
            libc::EOPNOTSUPP,
        );
    }
    // ALLOW_SCATTER_CQE lets the device put a requester's small READ or atomic response into
    // the CQE; model0 never does (allowed, not asked), so it changes nothing
    let known = k::MLX5_QP_FLAG_SCATTER_CQE
        | k::MLX5_QP_FLAG_SIGNATURE
        | k::MLX5_QP_FLAG_BFREG_INDEX
        | k::MLX5_QP_FLAG_ALLOW_SCATTER_CQE;
    if d.flags & !known != 0 {
        return errno_of(format!("CREATE_QP with mlx5 flags {:#x}", d.flags), libc::EOPNOTSUPP);
    }
    if d.flags & k::MLX5_QP_FLAG_SIGNATURE != 0 {
        return errno_of(
            "CREATE_QP with WQE signatures (MLX5_QP_SIGNATURE=1): model0 does not check them; unset it",
            libc::EOPNOTSUPP,
        );
    }
    Ok(())
}

/// Where libmlx5 laid out the QP's rings in its buffer (`d`), and its options.
fn user_qp_layout(q: &k::ib_uverbs_ex_create_qp, d: &k::mlx5_ib_create_qp) -> UserQpLayout {
    let rq_stride = 1u32.checked_shl(d.rq_wqe_shift).unwrap_or(0);
    let rq_len = d.rq_wqe_count as usize * rq_stride as usize;
    let sq_len = d.sq_wqe_count as usize * 64;
    UserQpLayout {
        buf: d.buf_addr as usize,
        buf_len: (rq_len + sq_len).next_multiple_of(PAGE),
        sq_wqe_cnt: d.sq_wqe_count,
        rq_wqe_cnt: d.rq_wqe_count,
        rq_stride: rq_stride.max(16),
        max_inline: q.max_inline_data,
        scatter_cqe: if d.flags & k::MLX5_QP_FLAG_SCATTER_CQE != 0 {
            32
        } else {
            0
        },
        uidx: d.uidx,
        srqn: 0,
    }
}

/// A new QP's attributes as QUERY_QP answers them: its capabilities, state RESET, port 1.
fn initial_qp_attr(q: &k::ib_uverbs_ex_create_qp) -> k::ib_uverbs_query_qp_resp {
    k::ib_uverbs_query_qp_resp {
        max_send_wr: q.max_send_wr,
        max_recv_wr: q.max_recv_wr,
        max_send_sge: q.max_send_sge,
        max_recv_sge: q.max_recv_sge,
        max_inline_data: q.max_inline_data,
        qp_state: QPS_RESET,
        sq_sig_all: q.sq_sig_all,
        port_num: 1,
        ..Default::default()
    }
}

/// CREATE_QP's response: the handle and number `(h, qpn)`, the capabilities granted (those
/// asked), libmlx5's BlueFlame register index; extended when `ex`.
fn answer_create_qp(
    c: &Cmd<'_>,
    q: &k::ib_uverbs_ex_create_qp,
    (h, qpn): (u32, u32),
    bfreg_index: u32,
    ex: bool,
) -> Result<(), c_int> {
    let r = k::ib_uverbs_create_qp_resp {
        qp_handle: h,
        qpn,
        max_send_wr: q.max_send_wr,
        max_recv_wr: q.max_recv_wr,
        max_send_sge: q.max_send_sge,
        max_recv_sge: q.max_recv_sge,
        max_inline_data: q.max_inline_data,
        ..Default::default()
    };
    let dr = k::mlx5_ib_create_qp_resp {
        bfreg_index,
        ..Default::default()
    };
    if ex {
        let e = k::ib_uverbs_ex_create_qp_resp {
            base: r,
            comp_mask: 0,
            response_length: size_of::<k::ib_uverbs_ex_create_qp_resp>() as u32,
        };
        c.resp.put(bytes(&e), bytes(&dr))
    } else {
        c.resp.put(bytes(&r), bytes(&dr))
    }
}

/// Destroys QP handle `h` of `ctx`; `qps` is [`QPS`](super::QPS), locked by the caller.
pub(super) fn destroy_qp_ent(ctx: &mut Ctx, h: u32, qps: &mut Vec<super::qps::QpEntry>) {
    if let Some(e) = ctx.qps.remove(&h) {
        let qpn = e.qp.qpn();
        qps.retain(|(n, _, _)| *n != qpn);
        super::qps::changed();
        // libmlx5 frees the buffer when this command returns: the memory goes back now, whoever
        // still holds the QP (a concurrent progress call, a backend) keeps only the model's file
        e.qp.release_user_memory();
        drop(e.qp);
        release_db(ctx, e.db);
        if e.bfreg != NO_BFREG {
            ctx.bfreg_users[e.bfreg as usize] -= 1;
        }
    }
}

/// MODIFY_QP: a transition of the IB specification with its required attributes, the
/// attributes given recorded, and what the new state sets off in the model.
pub(super) fn modify_qp(ctx: &mut Ctx, q: &k::ib_uverbs_modify_qp) -> Result<(), c_int> {
    let Some(e) = ctx.qps.get_mut(&q.qp_handle) else {
        return errno_of(format!("MODIFY_QP of unknown handle {}", q.qp_handle), libc::EINVAL);
    };
    let m = q.attr_mask;
    let cur = e.attr.qp_state;
    let next = if m & IBV_QP_STATE != 0 { q.qp_state } else { cur };
    let uc = e.qp.transport() == crate::model::transport::UC;
    let ud = e.qp.transport() == crate::model::transport::UD;
    match required_attrs((uc, ud), cur, next) {
        Some(n) if m & n == n => {}
        Some(n) => {
            return errno_of(
                format!("MODIFY_QP {cur}->{next}: attributes {:#x} missing", n & !m),
                libc::EINVAL,
            )
        }
        None => return errno_of(format!("MODIFY_QP {cur}->{next}: not a valid transition"), libc::EINVAL),
    }
    check_modify_values(q, e.qp.qpn())?;
    record_attrs(e, q);
    e.attr.qp_state = next;
    enter_state(e, cur, next);
    Ok(())
}

/// The attributes a transition `cur` -> `next` requires of a QP (`(uc, ud)`: whether it is a UC
/// or a UD QP; else RC), `None` when it is not a transition: those of the IB specification (the
/// kernel's ib_modify_qp_is_ok) for an RC or a UC QP (UC: no ACK timeout, retries, RNR or
/// READs), and UD's.
fn required_attrs((uc, ud): (bool, bool), cur: u8, next: u8) -> Option<u32> {
    match (cur, next) {
        // UD: the Q_Key at INIT; no path, no destination (each datagram names its own)
        (QPS_RESET, QPS_INIT) if ud => Some(IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
        (QPS_INIT, QPS_RTR) if ud => Some(0),
        (QPS_RTR, QPS_RTS) if ud => Some(IBV_QP_SQ_PSN),
        (QPS_INIT, QPS_RTR) if uc => Some(IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN),
        (QPS_RTR, QPS_RTS) if uc => Some(IBV_QP_SQ_PSN),
        (_, QPS_RESET) | (_, QPS_ERR) => Some(0),
        (QPS_RESET, QPS_INIT) => Some(IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
        (QPS_INIT, QPS_INIT) => Some(0),
        (QPS_INIT, QPS_RTR) => Some(
            IBV_QP_AV
                | IBV_QP_PATH_MTU
                | IBV_QP_DEST_QPN
                | IBV_QP_RQ_PSN
                | IBV_QP_MAX_DEST_RD_ATOMIC
                | IBV_QP_MIN_RNR_TIMER,
        ),
        (QPS_RTR, QPS_RTS) => {
            Some(IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)
        }
        (QPS_RTS, QPS_RTS) => Some(0),
        _ => None,
    }
}

/// Refuses attribute values model0 cannot take in a MODIFY_QP of QP `qpn`: a port other than
/// 1, a path MTU code out of range, the QP itself as destination.
fn check_modify_values(q: &k::ib_uverbs_modify_qp, qpn: u32) -> Result<(), c_int> {
    let m = q.attr_mask;
    if m & IBV_QP_PORT != 0 && q.port_num != 1 {
        return errno_of(
            format!("MODIFY_QP to port {}: model0 has port 1", q.port_num),
            libc::EINVAL,
        );
    }
    if m & IBV_QP_PATH_MTU != 0 && !(1..=5).contains(&q.path_mtu) {
        return errno_of(format!("MODIFY_QP with path MTU code {}", q.path_mtu), libc::EINVAL);
    }
    if m & IBV_QP_DEST_QPN != 0 && q.dest_qp_num == qpn {
        return errno_of(
            "MODIFY_QP to itself: model0 has no loopback of a QP to itself",
            libc::EINVAL,
        );
    }
    Ok(())
}

/// Records the attributes a MODIFY_QP gives in the QP's attributes (as QUERY_QP answers them);
/// a Q_Key goes to the model's QP too.
fn record_attrs(e: &mut QpEnt, q: &k::ib_uverbs_modify_qp) {
    let m = q.attr_mask;
    let a = &mut e.attr;
    if m & IBV_QP_ACCESS_FLAGS != 0 {
        a.qp_access_flags = q.qp_access_flags;
    }
    if m & IBV_QP_PKEY_INDEX != 0 {
        a.pkey_index = q.pkey_index;
    }
    if m & IBV_QP_PORT != 0 {
        a.port_num = q.port_num;
    }
    if m & IBV_QP_QKEY != 0 {
        a.qkey = q.qkey;
        e.qp.set_qkey(q.qkey);
    }
    if m & IBV_QP_AV != 0 {
        a.dest = q.dest;
    }
    if m & IBV_QP_PATH_MTU != 0 {
        a.path_mtu = q.path_mtu;
    }
    if m & IBV_QP_DEST_QPN != 0 {
        a.dest_qp_num = q.dest_qp_num;
    }
    if m & IBV_QP_RQ_PSN != 0 {
        a.rq_psn = q.rq_psn;
    }
    if m & IBV_QP_MAX_DEST_RD_ATOMIC != 0 {
        a.max_dest_rd_atomic = q.max_dest_rd_atomic;
    }
    if m & IBV_QP_MIN_RNR_TIMER != 0 {
        a.min_rnr_timer = q.min_rnr_timer;
    }
    if m & IBV_QP_SQ_PSN != 0 {
        a.sq_psn = q.sq_psn;
    }
    if m & IBV_QP_TIMEOUT != 0 {
        a.timeout = q.timeout;
    }
    if m & IBV_QP_RETRY_CNT != 0 {
        a.retry_cnt = q.retry_cnt;
    }
    if m & IBV_QP_RNR_RETRY != 0 {
        a.rnr_retry = q.rnr_retry;
    }
    if m & IBV_QP_MAX_QP_RD_ATOMIC != 0 {
        a.max_rd_atomic = q.max_rd_atomic;
    }
}

/// What entering state `next` from `cur` sets off in the model's QP: RESET empties it, ERR
/// flushes it, RTR makes it a responder (and a peer that already sent to it, waiting for it to
/// be ready, goes on), RTS from RTR connects it to its destination with its RNR settings.
fn enter_state(e: &QpEnt, cur: u8, next: u8) {
    let a = &e.attr;
    match next {
        QPS_RESET => e.qp.reset(),
        QPS_ERR => e.qp.set_error(),
        QPS_RTR if cur == QPS_INIT => {
            e.qp.ready_to_receive(a.dest_qp_num);
            e.qp.receives_posted();
        }
        QPS_RTS if cur == QPS_RTR => e.qp.connect(
            a.dest_qp_num,
            crate::model::ModelConnect {
                rnr_retry: a.rnr_retry,
                min_rnr_timer: a.min_rnr_timer,
            },
        ),
        _ => {}
    }
}
