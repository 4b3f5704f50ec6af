//! The direct mlx5 path: WQE segments and builders, the send queue with its doorbell, the
//! completion queue, and rdma-core's barriers. `core` only, no allocation on post or poll.

pub mod barrier;
pub mod cq;
pub mod rq;
pub mod seg;
pub mod sq;
pub mod wqe;
