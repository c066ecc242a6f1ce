// Host streams: queued work runs in order on the progress thread and overlaps the caller;
// several streams; errors surface on query and synchronize instead of hanging.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "collective/collective.h"
#include "tests/unit/comm_threads.h"

namespace {

using coll::testutil::withComms;

TEST(ApiStreams, ManyOperationsOnTwoStreamsAreCorrectAfterSynchronize) {
  const int n = 3, ops = 20;
  withComms(n, [&](int rank, collComm_t comm) {
    collStream_t a = nullptr, b = nullptr;
    ASSERT_EQ(collHostStreamCreate(&a), collSuccess);
    ASSERT_EQ(collHostStreamCreate(&b), collSuccess);
    std::vector<std::vector<int32_t>> bufs(ops, std::vector<int32_t>(4096));
    for (int k = 0; k < ops; ++k) {
      for (auto& v : bufs[k]) v = rank + k;
      ASSERT_EQ(collAllReduce(bufs[k].data(), bufs[k].data(), bufs[k].size(), collInt32, collSum, comm, k % 2 ? b : a),
                collSuccess);
    }
    // The same buffer twice on one stream: the second sees the first's result (stream order).
    std::vector<int32_t> twice(100, 1);
    ASSERT_EQ(collAllReduce(twice.data(), twice.data(), twice.size(), collInt32, collSum, comm, a), collSuccess);
    ASSERT_EQ(collAllReduce(twice.data(), twice.data(), twice.size(), collInt32, collSum, comm, a), collSuccess);
    ASSERT_EQ(collHostStreamSynchronize(a), collSuccess) << collGetLastError(nullptr);
    ASSERT_EQ(collHostStreamSynchronize(b), collSuccess) << collGetLastError(nullptr);
    EXPECT_EQ(collHostStreamQuery(a), collSuccess);
    for (int k = 0; k < ops; ++k) {
      for (int32_t v : bufs[k]) ASSERT_EQ(v, n * (n - 1) / 2 + n * k);
    }
    for (int32_t v : twice) EXPECT_EQ(v, n * n);
    // A blocking call after stream work runs after it, on the same communicator.
    int32_t x = 1, y = 0;
    ASSERT_EQ(collAllReduce(&x, &y, 1, collInt32, collSum, comm, nullptr), collSuccess);
    EXPECT_EQ(y, n);
    EXPECT_EQ(collHostStreamDestroy(a), collSuccess);
    EXPECT_EQ(collHostStreamDestroy(b), collSuccess);
    EXPECT_EQ(collHostStreamDestroy(a), collInvalidArgument);
  });
}

TEST(ApiStreams, QueuedWorkLetsTheCallerComputeMeanwhile) {
  withComms(2, [&](int rank, collComm_t comm) {
    collStream_t s = nullptr;
    ASSERT_EQ(collHostStreamCreate(&s), collSuccess);
    std::vector<float> big(1 << 20, 1.0f);
    // Rank 1 enqueues late: rank 0's call cannot complete before that, yet returns at once.
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(collAllReduce(big.data(), big.data(), big.size(), collFloat32, collSum, comm, s), collSuccess);
    auto enqueueTime = std::chrono::steady_clock::now() - t0;
    EXPECT_LT(enqueueTime, std::chrono::milliseconds(100));
    if (rank == 0) {
      EXPECT_EQ(collHostStreamQuery(s), collInProgress);
    }
    // Finalize completes outstanding stream work (NCCL's ncclCommFinalize flushes too).
    ASSERT_EQ(collCommFinalize(comm), collSuccess);
    EXPECT_EQ(collHostStreamQuery(s), collSuccess);
    ASSERT_EQ(collHostStreamSynchronize(s), collSuccess);
    for (size_t i = 0; i < big.size(); i += 4099) ASSERT_EQ(big[i], 2.0f);
    EXPECT_EQ(collHostStreamDestroy(s), collSuccess);
  });
}

TEST(ApiStreams, AFailingPeerIsAnErrorOnSynchronizeNotAHang) {
  collUniqueId id;
  ASSERT_EQ(collGetUniqueId(&id), collSuccess);
  std::vector<collResult_t> sync(2, collSuccess);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      collConfig_t config = COLL_CONFIG_INITIALIZER;
      config.timeoutMs = 1500;
      collComm_t comm = nullptr;
      collResult_t init = collCommInitRankConfig(&comm, 2, id, r, &config);
      ASSERT_EQ(init, collSuccess) << collGetLastError(nullptr);
      if (r == 1) {
        (void)collCommDestroy(comm);  // leaves without joining the collective
        return;
      }
      collStream_t s = nullptr;
      (void)collHostStreamCreate(&s);
      std::vector<float> v(1000, 1.0f);
      (void)collAllReduce(v.data(), v.data(), v.size(), collFloat32, collSum, comm, s);
      sync[0] = collHostStreamSynchronize(s);
      collResult_t async = collSuccess;
      (void)collCommGetAsyncError(comm, &async);
      EXPECT_NE(async, collSuccess);
      EXPECT_NE(collHostStreamQuery(s), collSuccess);
      (void)collHostStreamDestroy(s);
      (void)collCommDestroy(comm);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(sync[0] == collRemoteError || sync[0] == collTimeout) << sync[0];
}

TEST(ApiStreams, AbortStopsQueuedAndRunningWorkPromptly) {
  collUniqueId id;
  ASSERT_EQ(collGetUniqueId(&id), collSuccess);
  std::vector<std::thread> threads;
  std::chrono::steady_clock::duration abortTime{};
  collResult_t syncResult = collSuccess;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      collComm_t comm = nullptr;
      ASSERT_EQ(collCommInitRank(&comm, 2, id, r), collSuccess) << collGetLastError(nullptr);
      if (r == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // never joins the collectives
        (void)collCommDestroy(comm);
        return;
      }
      collStream_t s = nullptr;
      ASSERT_EQ(collHostStreamCreate(&s), collSuccess);
      std::vector<float> v(1000, 1.0f);
      for (int k = 0; k < 3; ++k) {
        ASSERT_EQ(collAllReduce(v.data(), v.data(), v.size(), collFloat32, collSum, comm, s), collSuccess);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      auto t0 = std::chrono::steady_clock::now();
      EXPECT_EQ(collCommAbort(comm), collSuccess);
      abortTime = std::chrono::steady_clock::now() - t0;
      syncResult = collHostStreamSynchronize(s);
      (void)collHostStreamDestroy(s);
    });
  }
  for (auto& t : threads) t.join();
  // COLL_TIMEOUT is 300 s: an abort that waited for the deadline would take that long.
  EXPECT_LT(abortTime, std::chrono::seconds(1));
  EXPECT_NE(syncResult, collSuccess);
}

TEST(ApiStreams, ForeignStreamPointersAreRejected) {
  withComms(1, [](int, collComm_t comm) {
    int notAStream = 0;
    float x = 1, y = 0;
    EXPECT_EQ(collAllReduce(&x, &y, 1, collFloat32, collSum, comm, &notAStream), collInvalidArgument);
    EXPECT_EQ(y, 0.0f);
    EXPECT_EQ(collHostStreamSynchronize(&notAStream), collInvalidArgument);
  });
}

}  // namespace
