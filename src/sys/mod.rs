//! The raw layer: bindgen's bindings to `<infiniband/verbs.h>` and `<infiniband/mlx5dv.h>`, the
//! types bindgen gets wrong written by hand, and Rust versions of the hot `static inline` verbs.
//!
//! Two ways to reach a `static inline` function, on purpose:
//! - bindgen's `wrap_static_fns` C shim (compiled by `build.rs`): every static inline function of
//!   the headers is callable under its own name here (`ibv_post_send`, `ibv_wr_rdma_write`,
//!   `mlx5dv_set_ctrl_seg`, `___ibv_query_port`, ...). It is one extra out-of-line call.
//! - [`inline`]: the few that sit on a measured path (`post_send`, `post_recv`, `poll_cq`,
//!   `req_notify_cq`, the `wr_*` family), written in Rust through `context->ops` and the
//!   `ibv_qp_ex` function pointers exactly as the header does, so a measured post costs what it
//!   costs a C program that includes the header, no more.

/// bindgen's output, never edited by hand; lint allowances for generated code live only here.
#[allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    missing_docs
)]
#[allow(
    unnecessary_transmutes,
    clippy::all,
    clippy::undocumented_unsafe_blocks,
    clippy::missing_safety_doc
)]
mod raw {
    use super::mlx5_wqe_ctrl_seg;
    include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
}
pub use raw::*;

/// bindgen's output for the kernel ABI libibverbs and libmlx5 speak to a uverbs device (the
/// legacy `write()` commands of `<rdma/ib_user_verbs.h>` and mlx5's driver data of
/// `<rdma/mlx5-abi.h>`), answered by model0's user-space device (`src/uverbs`).
#[allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    missing_docs,
    unnecessary_transmutes,
    clippy::all,
    clippy::undocumented_unsafe_blocks,
    clippy::missing_safety_doc
)]
pub mod kabi {
    include!(concat!(env!("OUT_DIR"), "/kabi.rs"));
}

pub mod inline;

/// `struct mlx5_wqe_ctrl_seg`, written by hand: in C it is `packed` and `aligned(4)`, which
/// bindgen renders as `packed(4)` with `imm` at 16 and size 20 (bindgen issue #2878). Here:
/// size 16, align 4; offsets 0, 4, 8, 9, 11, 12, checked against the C compiler in the tests.
/// `dci_stream_channel_id` is a `__be16` at an odd offset, hence the byte array.
#[allow(non_camel_case_types)]
#[repr(C, align(4))]
#[derive(Debug, Default, Copy, Clone, PartialEq, Eq)]
pub struct mlx5_wqe_ctrl_seg {
    /// `opmod << 24 | wqe_index << 8 | opcode`, big-endian.
    pub opmod_idx_opcode: __be32,
    /// `qpn << 8 | ds` (WQE size in 16-byte units), big-endian.
    pub qpn_ds: __be32,
    /// WQE signature (unused unless enabled on the QP).
    pub signature: u8,
    /// `__be16` DCI stream channel id, at odd offset 9.
    pub dci_stream_channel_id: [u8; 2],
    /// Fence, completion and solicited flags.
    pub fm_ce_se: u8,
    /// Immediate data (or the rkey to invalidate), stored as given.
    pub imm: __be32,
}

const _: () = {
    assert!(core::mem::size_of::<mlx5_wqe_ctrl_seg>() == 16);
    assert!(core::mem::align_of::<mlx5_wqe_ctrl_seg>() == 4);
    assert!(core::mem::offset_of!(mlx5_wqe_ctrl_seg, signature) == 8);
    assert!(core::mem::offset_of!(mlx5_wqe_ctrl_seg, dci_stream_channel_id) == 9);
    assert!(core::mem::offset_of!(mlx5_wqe_ctrl_seg, fm_ce_se) == 11);
    assert!(core::mem::offset_of!(mlx5_wqe_ctrl_seg, imm) == 12);
};

/// The C compiler's view of the layouts (from `src/sys/layout_probe.c`), for tests.
pub mod layout_probe {
    extern "C" {
        /// sizeof, then offsetof opmod_idx_opcode, qpn_ds, signature, dci_stream_channel_id,
        /// fm_ce_se, imm.
        pub static rdmaprobe_layout_ctrl_seg: [core::ffi::c_ulong; 7];
        /// `_Alignof(struct mlx5_wqe_ctrl_seg)`.
        pub static rdmaprobe_layout_align_ctrl_seg: core::ffi::c_ulong;
        /// sizeof, then offsetof byte_cnt, wqe_counter, signature, op_own.
        pub static rdmaprobe_layout_cqe64: [core::ffi::c_ulong; 5];
        /// sizeof ibv_wc, ibv_send_wr, ibv_recv_wr, ibv_sge, ibv_qp_ex, mlx5_wqe_data_seg,
        /// mlx5_wqe_raddr_seg, mlx5_err_cqe.
        pub static rdmaprobe_layout_sizes: [core::ffi::c_ulong; 8];
    }
}
