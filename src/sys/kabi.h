/* The kernel ABI that libibverbs and libmlx5 speak to the uverbs device (the legacy write()
 * commands and mlx5's driver data), bound by build.rs for model0's user-space uverbs device. */
#include <rdma/ib_user_verbs.h>
#include <rdma/mlx5-abi.h>
