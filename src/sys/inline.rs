//! Rust versions of the `static inline` verbs that sit on measured paths: each does exactly what
//! the header's function does (one indirect call through the provider's function pointer), with
//! no extra out-of-line call in between. A missing provider entry gives `ENOSYS` instead of a
//! call through a null pointer.

use super::{ibv_cq, ibv_data_buf, ibv_qp, ibv_qp_ex, ibv_recv_wr, ibv_send_wr, ibv_sge, ibv_wc};
use core::ffi::c_int;

const ENOSYS: c_int = 38;

/// `ibv_post_send`: `qp->context->ops.post_send(qp, wr, bad_wr)`. Returns 0 or an errno.
///
/// # Safety
/// `qp` is a live QP from `ibv_create_qp*`; `wr` is a valid, null-terminated list whose SGEs
/// point into registered memory; `bad_wr` is writable.
#[inline(always)]
pub unsafe fn post_send(qp: *mut ibv_qp, wr: *mut ibv_send_wr, bad_wr: *mut *mut ibv_send_wr) -> c_int {
    // SAFETY: the caller guarantees a live QP, whose `context` is its live device context.
    match unsafe { (*(*qp).context).ops.post_send } {
        // SAFETY: the provider's own post_send, called with the arguments the caller vouched for.
        Some(f) => unsafe { f(qp, wr, bad_wr) },
        None => ENOSYS,
    }
}

/// `ibv_post_recv`: `qp->context->ops.post_recv(qp, wr, bad_wr)`. Returns 0 or an errno.
///
/// # Safety
/// As [`post_send`], for a receive list.
#[inline(always)]
pub unsafe fn post_recv(qp: *mut ibv_qp, wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr) -> c_int {
    // SAFETY: the caller guarantees a live QP, whose `context` is its live device context.
    match unsafe { (*(*qp).context).ops.post_recv } {
        // SAFETY: the provider's own post_recv, called with the arguments the caller vouched for.
        Some(f) => unsafe { f(qp, wr, bad_wr) },
        None => ENOSYS,
    }
}

/// `ibv_poll_cq`: `cq->context->ops.poll_cq(cq, n, wc)`. Returns the number of completions
/// (0..=n) or a negative value on error.
///
/// # Safety
/// `cq` is a live CQ; `wc` points to at least `num_entries` writable `ibv_wc`.
#[inline(always)]
pub unsafe fn poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: the caller guarantees a live CQ, whose `context` is its live device context.
    match unsafe { (*(*cq).context).ops.poll_cq } {
        // SAFETY: the provider's poll_cq with a live CQ and room for num_entries completions.
        Some(f) => unsafe { f(cq, num_entries, wc) },
        None => -ENOSYS,
    }
}

/// `ibv_req_notify_cq`: `cq->context->ops.req_notify_cq(cq, solicited_only)`.
///
/// # Safety
/// `cq` is a live CQ created with a completion channel.
#[inline(always)]
pub unsafe fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: the caller guarantees a live CQ, whose `context` is its live device context.
    match unsafe { (*(*cq).context).ops.req_notify_cq } {
        // SAFETY: the provider's req_notify_cq with a live CQ.
        Some(f) => unsafe { f(cq, solicited_only) },
        None => ENOSYS,
    }
}

type Fn0 = unsafe extern "C" fn(*mut ibv_qp_ex);
type FnComplete = unsafe extern "C" fn(*mut ibv_qp_ex) -> c_int;
type FnRkeyAddr = unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64);
type FnWriteImm = unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32);
type FnSendImm = unsafe extern "C" fn(*mut ibv_qp_ex, u32);
type FnCas = unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64, u64);
type FnFaa = unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64);
type FnSge = unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32);
type FnSgeList = unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_sge);
type FnInline = unsafe extern "C" fn(*mut ibv_qp_ex, *mut core::ffi::c_void, usize);
type FnInlineList = unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_data_buf);
type FnUdAddr = unsafe extern "C" fn(*mut ibv_qp_ex, *mut super::ibv_ah, u32, u32);

/// The `ibv_wr_*` entry points of one `ibv_qp_ex`, read once and checked non-null, so each
/// call is the same single indirect call as the header's `ibv_wr_*` inline functions.
#[derive(Clone, Copy)]
pub struct WrOps {
    /// `ibv_wr_start`
    pub start: Fn0,
    /// `ibv_wr_complete`
    pub complete: FnComplete,
    /// `ibv_wr_abort`
    pub abort: Fn0,
    /// `ibv_wr_send`
    pub send: Fn0,
    /// `ibv_wr_send_imm` (immediate in network order)
    pub send_imm: FnSendImm,
    /// `ibv_wr_rdma_write` (`None` on a QP made without it: UD)
    pub rdma_write: Option<FnRkeyAddr>,
    /// `ibv_wr_rdma_write_imm` (`None` on a QP made without it: UD)
    pub rdma_write_imm: Option<FnWriteImm>,
    /// `ibv_wr_rdma_read` (`None` on a QP made without it: UC)
    pub rdma_read: Option<FnRkeyAddr>,
    /// `ibv_wr_atomic_cmp_swp` (`None` on a QP made without it: UC)
    pub atomic_cmp_swp: Option<FnCas>,
    /// `ibv_wr_atomic_fetch_add` (`None` on a QP made without it: UC)
    pub atomic_fetch_add: Option<FnFaa>,
    /// `ibv_wr_set_sge`
    pub set_sge: FnSge,
    /// `ibv_wr_set_sge_list`
    pub set_sge_list: FnSgeList,
    /// `ibv_wr_set_inline_data`
    pub set_inline_data: FnInline,
    /// `ibv_wr_set_inline_data_list`
    pub set_inline_data_list: FnInlineList,
    /// `ibv_wr_set_ud_addr` (UD QPs)
    pub set_ud_addr: Option<FnUdAddr>,
}

impl WrOps {
    /// Reads the entry points of `qpx`; `None` when the provider left any of them unset (a QP
    /// created without the matching `send_ops_flags`, or a provider without the extended API),
    /// WRITE, READ and the atomics excepted (a UC QP has no READ or atomics, a UD QP none of
    /// them).
    ///
    /// # Safety
    /// `qpx` is the `ibv_qp_ex` of a live QP (from `ibv_qp_to_qp_ex`).
    pub unsafe fn from_qp_ex(qpx: *const ibv_qp_ex) -> Option<Self> {
        // SAFETY: the caller guarantees qpx points to a live ibv_qp_ex; we only read it.
        let q = unsafe { &*qpx };
        Some(WrOps {
            start: q.wr_start?,
            complete: q.wr_complete?,
            abort: q.wr_abort?,
            send: q.wr_send?,
            send_imm: q.wr_send_imm?,
            rdma_write: q.wr_rdma_write,
            rdma_write_imm: q.wr_rdma_write_imm,
            rdma_read: q.wr_rdma_read,
            atomic_cmp_swp: q.wr_atomic_cmp_swp,
            atomic_fetch_add: q.wr_atomic_fetch_add,
            set_sge: q.wr_set_sge?,
            set_sge_list: q.wr_set_sge_list?,
            set_inline_data: q.wr_set_inline_data?,
            set_inline_data_list: q.wr_set_inline_data_list?,
            set_ud_addr: q.wr_set_ud_addr,
        })
    }
}
