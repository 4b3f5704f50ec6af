/* The rdma-core headers rdmaprobe binds with bindgen (see build.rs). */
#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>
#include <rdma/rdma_cma.h>
