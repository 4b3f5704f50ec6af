/* Sizes and offsets as the C compiler lays them out, for the tests that check the Rust types
 * (the hand-written mlx5_wqe_ctrl_seg in particular, which bindgen cannot express). */
#include <stddef.h>
#include "wrapper.h"

#define OFF(t, f) ((unsigned long)offsetof(struct t, f))

const unsigned long rdmaprobe_layout_ctrl_seg[7] = {
	sizeof(struct mlx5_wqe_ctrl_seg),
	OFF(mlx5_wqe_ctrl_seg, opmod_idx_opcode),
	OFF(mlx5_wqe_ctrl_seg, qpn_ds),
	OFF(mlx5_wqe_ctrl_seg, signature),
	OFF(mlx5_wqe_ctrl_seg, dci_stream_channel_id),
	OFF(mlx5_wqe_ctrl_seg, fm_ce_se),
	OFF(mlx5_wqe_ctrl_seg, imm),
};

const unsigned long rdmaprobe_layout_align_ctrl_seg = _Alignof(struct mlx5_wqe_ctrl_seg);

const unsigned long rdmaprobe_layout_cqe64[5] = {
	sizeof(struct mlx5_cqe64),
	OFF(mlx5_cqe64, byte_cnt),
	OFF(mlx5_cqe64, wqe_counter),
	OFF(mlx5_cqe64, signature),
	OFF(mlx5_cqe64, op_own),
};

const unsigned long rdmaprobe_layout_sizes[8] = {
	sizeof(struct ibv_wc),
	sizeof(struct ibv_send_wr),
	sizeof(struct ibv_recv_wr),
	sizeof(struct ibv_sge),
	sizeof(struct ibv_qp_ex),
	sizeof(struct mlx5_wqe_data_seg),
	sizeof(struct mlx5_wqe_raddr_seg),
	sizeof(struct mlx5_err_cqe),
};
