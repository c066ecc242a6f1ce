// NCCL's net plugin ABI as we declare it (src/nccl_net/nccl_net_abi.h): the header's static_asserts
// of every version's sizes and offsets compile here; this adds the constants NCCL relies on.
#include <gtest/gtest.h>

#include "src/nccl_net/nccl_net_abi.h"

TEST(NcclNetAbi, ConstantsMatchNccl) {
  EXPECT_EQ(NCCL_NET_HANDLE_MAXSIZE, 128);
  EXPECT_EQ(NCCL_NET_MAX_REQUESTS, 32);
  EXPECT_EQ(NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF, 0x7);
  EXPECT_EQ(static_cast<int>(ncclSystemError), 2);
  EXPECT_EQ(static_cast<int>(ncclInternalError), 3);
  EXPECT_EQ(static_cast<int>(ncclInvalidUsage), 5);
  EXPECT_EQ(static_cast<int>(ncclRemoteError), 6);
  EXPECT_EQ(static_cast<int>(NCCL_LOG_WARN), 2);
  EXPECT_EQ(static_cast<int>(NCCL_LOG_TRACE), 5);
}

TEST(NcclNetAbi, TablesGrowOnlyAtTheEnd) {
  EXPECT_EQ(sizeof(ncclNet_v9_t), sizeof(ncclNet_v8_t) + sizeof(void*));
  EXPECT_EQ(sizeof(ncclNet_v10_t), sizeof(ncclNet_v9_t));
  EXPECT_EQ(sizeof(ncclNet_v11_t), sizeof(ncclNet_v10_t) + 2 * sizeof(void*));
  EXPECT_EQ(offsetof(ncclNetProperties_v11_t, maxCollBytes), offsetof(ncclNetProperties_v9_t, maxCollBytes));
}
