//! Shared receive queues: CREATE_SRQ (libmlx5's ring and doorbell record pinned into a model0
//! SRQ, `crate::model::ModelSrq`), QUERY_SRQ, MODIFY_SRQ (no limit event: refused, named),
//! DESTROY_SRQ (busy while a QP uses it), and what posting to one sets off.

use super::commands::{release_db, take_db};
use super::frame::{bytes, legacy, rd, Cmd};
use super::qps::with_qps;
use super::{errno_of, handle, Ctx, SrqEnt};
use crate::model::UserSrqLayout;
use crate::sys::kabi as k;
use std::ffi::c_int;
use std::sync::Mutex;

/// The SRQs of this process: (libibverbs' `struct ibv_srq *`, as CREATE_SRQ's user handle
/// gives it; SRQ number), for the preload's `post_srq_recv`.
static BY_USER_HANDLE: Mutex<Vec<(u64, u32)>> = Mutex::new(Vec::new());

/// `ibv_modify_srq`'s attribute bits.
const SRQ_MAX_WR: u32 = 1;
const SRQ_LIMIT: u32 = 2;

pub(super) fn create_srq(ctx: &mut Ctx, c: &mut Cmd<'_>) -> Result<(), c_int> {
    legacy::<k::ib_uverbs_create_srq, k::ib_uverbs_create_srq_resp>(c, true)?;
    let q: k::ib_uverbs_create_srq = rd(c.core, 0);
    let d: k::mlx5_ib_create_srq = rd(c.drv, 0);
    let Some(&pdn) = ctx.pds.get(&q.pd_handle) else {
        return errno_of(
            format!("CREATE_SRQ with unknown PD handle {}", q.pd_handle),
            libc::EINVAL,
        );
    };
    if d.flags != 0 {
        return errno_of(
            format!(
                "CREATE_SRQ with mlx5 flags {:#x} (WQE signatures: unset MLX5_SRQ_SIGNATURE)",
                d.flags
            ),
            libc::EOPNOTSUPP,
        );
    }
    if q.srq_limit != 0 {
        return errno_of("an SRQ limit event (srq_limit at ibv_create_srq)", libc::EOPNOTSUPP);
    }
    // as the mlx5 kernel driver sizes it from the request (libmlx5 sized its ring the same way),
    // and refuses one whose WQE is larger than the device's 512 bytes
    let stride = q
        .max_sge
        .saturating_mul(16)
        .saturating_add(16)
        .max(32)
        .next_power_of_two();
    if stride > 512 {
        return errno_of(
            format!("CREATE_SRQ with {} scatter entries: model0 takes up to 31", q.max_sge),
            libc::EINVAL,
        );
    }
    let Some(wqe_cnt) = q
        .max_wr
        .checked_add(1)
        .map(u32::next_power_of_two)
        .filter(|&n| n <= 1 << 15)
    else {
        return errno_of(
            format!("CREATE_SRQ of {} receives: model0 has up to 32767", q.max_wr),
            libc::EINVAL,
        );
    };
    let l = UserSrqLayout {
        buf: d.buf_addr as usize,
        wqe_cnt,
        stride,
    };
    let (page, off) = take_db(ctx, d.db_addr)?;
    let db = &ctx.dbs[&page].page;
    // SAFETY: libmlx5's SRQ ring, `wqe_cnt * stride` bytes (its own sizing), kept until
    // DESTROY_SRQ, which gives the memory back first.
    let srq = match unsafe { ctx.model.create_user_srq(pdn, l, db, off) } {
        Ok(s) => s,
        Err(e) => {
            release_db(ctx, page);
            let n = e.errno().unwrap_or(libc::EINVAL);
            return errno_of(e, n);
        }
    };
    let h = handle(ctx);
    let srqn = srq.srqn();
    let (max_wr, max_sge) = srq.caps();
    ctx.srqs.insert(h, SrqEnt { srq, pdn, db: page });
    BY_USER_HANDLE
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((q.user_handle, srqn));
    let r = k::ib_uverbs_create_srq_resp {
        srq_handle: h,
        max_wr,
        max_sge,
        srqn,
        ..Default::default()
    };
    c.resp
        .put(bytes(&r), bytes(&k::mlx5_ib_create_srq_resp { srqn, reserved: 0 }))
}

pub(super) fn query_srq(ctx: &mut Ctx, c: &mut Cmd<'_>) -> Result<(), c_int> {
    legacy::<k::ib_uverbs_query_srq, k::ib_uverbs_query_srq_resp>(c, true)?;
    let q: k::ib_uverbs_query_srq = rd(c.core, 0);
    let Some(e) = ctx.srqs.get(&q.srq_handle) else {
        return errno_of(format!("QUERY_SRQ of unknown handle {}", q.srq_handle), libc::EINVAL);
    };
    let (max_wr, max_sge) = e.srq.caps();
    let r = k::ib_uverbs_query_srq_resp {
        max_wr,
        max_sge,
        srq_limit: 0,
        ..Default::default()
    };
    c.resp.put(bytes(&r), &[])
}

pub(super) fn modify_srq(ctx: &mut Ctx, c: &mut Cmd<'_>) -> Result<(), c_int> {
    legacy::<k::ib_uverbs_modify_srq, ()>(c, false)?;
    let q: k::ib_uverbs_modify_srq = rd(c.core, 0);
    if !ctx.srqs.contains_key(&q.srq_handle) {
        return errno_of(format!("MODIFY_SRQ of unknown handle {}", q.srq_handle), libc::EINVAL);
    }
    if q.attr_mask & SRQ_LIMIT != 0 {
        return errno_of(
            "an SRQ limit event (ibv_modify_srq with IBV_SRQ_LIMIT)",
            libc::EOPNOTSUPP,
        );
    }
    if q.attr_mask & SRQ_MAX_WR != 0 {
        // as the mlx5 kernel driver: an SRQ is not resized
        return errno_of("MODIFY_SRQ with IBV_SRQ_MAX_WR: an SRQ is not resized", libc::EINVAL);
    }
    Ok(())
}

pub(super) fn destroy_srq(ctx: &mut Ctx, c: &mut Cmd<'_>) -> Result<(), c_int> {
    legacy::<k::ib_uverbs_destroy_srq, k::ib_uverbs_destroy_srq_resp>(c, true)?;
    let q: k::ib_uverbs_destroy_srq = rd(c.core, 0);
    if !ctx.srqs.contains_key(&q.srq_handle) {
        return errno_of(format!("DESTROY_SRQ of unknown handle {}", q.srq_handle), libc::EINVAL);
    }
    // as the kernel: an SRQ a QP still uses is busy
    if ctx.qps.values().any(|e| e.srq == Some(q.srq_handle)) {
        return errno_of(format!("DESTROY_SRQ {}: a QP still uses it", q.srq_handle), libc::EBUSY);
    }
    destroy(ctx, q.srq_handle);
    c.resp.put(bytes(&k::ib_uverbs_destroy_srq_resp::default()), &[])
}

/// Destroys SRQ handle `h`: the program's ring goes back to it now (libmlx5 frees it when the
/// command returns).
fn destroy(ctx: &mut Ctx, h: u32) {
    if let Some(e) = ctx.srqs.remove(&h) {
        let srqn = e.srq.srqn();
        BY_USER_HANDLE
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|&(_, n)| n != srqn);
        e.srq.release_user_memory();
        drop(e.srq);
        release_db(ctx, e.db);
    }
}

/// The context's SRQs, at its close (after its QPs).
pub(super) fn destroy_all(ctx: &mut Ctx) {
    let hs: Vec<u32> = ctx.srqs.keys().copied().collect();
    for h in hs {
        destroy(ctx, h);
    }
}

/// Whether a PD is used by an SRQ of `ctx`.
pub(super) fn uses_pd(ctx: &Ctx, pdn: u32) -> bool {
    ctx.srqs.values().any(|e| e.pdn == pdn)
}

/// After receives were posted to the SRQ libibverbs knows as `user_handle` (its `struct
/// ibv_srq *`): a sender stalled on RNR at any QP of this process attached to it goes on.
pub fn receives_posted(user_handle: u64) {
    let srqn = BY_USER_HANDLE
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|e| e.0 == user_handle)
        .map(|e| e.1);
    let Some(srqn) = srqn else { return };
    let qps: Vec<_> = with_qps(|qs| qs.iter().filter_map(|e| e.1.upgrade()).collect());
    for q in qps.iter().filter(|q| q.srqn() == srqn) {
        q.receives_posted();
    }
}
