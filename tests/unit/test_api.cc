// Public C API: argument validation, handle safety, and All-Reduce through communicators whose
// ranks are threads of this process.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "collective/collective.h"
#include "tests/unit/comm_threads.h"

namespace {

using coll::testutil::withComms;

TEST(Api, VersionAndErrorStrings) {
  int v = 0;
  ASSERT_EQ(collGetVersion(&v), collSuccess);
  EXPECT_EQ(v, COLL_VERSION_CODE);
  EXPECT_EQ(collGetVersion(nullptr), collInvalidArgument);
  for (int r = 0; r < collNumResults; ++r) EXPECT_STRNE(collGetErrorString(static_cast<collResult_t>(r)), "");
  EXPECT_NE(std::string(collGetErrorString(collTimeout)).find("COLL_TIMEOUT"), std::string::npos);
}

TEST(Api, NullAndForgedHandlesAreCleanErrors) {
  float x = 1, y = 0;
  EXPECT_EQ(collAllReduce(&x, &y, 1, collFloat32, collSum, nullptr, nullptr), collInvalidArgument);
  int n = 0;
  EXPECT_EQ(collCommCount(nullptr, &n), collInvalidArgument);
  // A value that was never a handle.
  auto forged = reinterpret_cast<collComm_t>(static_cast<uintptr_t>(0x1234567800000001ull));
  EXPECT_EQ(collCommDestroy(forged), collInvalidArgument);
  EXPECT_NE(std::string(collGetLastError(nullptr)).find("not valid"), std::string::npos);
}

TEST(Api, InitRejectsBadArguments) {
  collUniqueId id;
  ASSERT_EQ(collGetUniqueId(&id), collSuccess);
  collComm_t comm = nullptr;
  EXPECT_EQ(collCommInitRank(&comm, 2, id, 2), collInvalidArgument);
  EXPECT_EQ(collCommInitRank(&comm, 2, id, -1), collInvalidArgument);
  EXPECT_EQ(collCommInitRank(&comm, 0, id, 0), collInvalidArgument);
  EXPECT_EQ(collCommInitRank(nullptr, 1, id, 0), collInvalidArgument);
  collConfig_t config = COLL_CONFIG_INITIALIZER;
  config.magic = 0;
  EXPECT_EQ(collCommInitRankConfig(&comm, 1, id, 0, &config), collInvalidArgument);
  EXPECT_NE(std::string(collGetLastError(nullptr)).find("COLL_CONFIG_INITIALIZER"), std::string::npos);
  collUniqueId junk;
  memset(&junk, 0x5a, sizeof(junk));
  EXPECT_EQ(collCommInitRank(&comm, 1, junk, 0), collInvalidArgument);
}

// trafficClass is one byte on the wire: anything else is refused before anything is made. A caller
// built against the struct before the field (a smaller size) is not read past its end.
TEST(Api, TrafficClassIsCheckedAndOldConfigsIgnoreIt) {
  collUniqueId id;
  ASSERT_EQ(collGetUniqueId(&id), collSuccess);
  for (int bad : {300, 256, -1}) {
    collComm_t comm = nullptr;
    collConfig_t config = COLL_CONFIG_INITIALIZER;
    config.trafficClass = bad;
    EXPECT_EQ(collCommInitRankConfig(&comm, 1, id, 0, &config), collInvalidArgument) << bad;
    EXPECT_EQ(comm, nullptr);
    EXPECT_NE(std::string(collGetLastError(nullptr)).find("config.trafficClass " + std::to_string(bad)),
              std::string::npos)
        << collGetLastError(nullptr);
  }
  collConfig_t older = COLL_CONFIG_INITIALIZER;
  older.size = offsetof(collConfig_t, trafficClass);
  older.trafficClass = 300;  // beyond the caller's struct: never read
  collComm_t comm = nullptr;
  ASSERT_EQ(collCommInitRankConfig(&comm, 1, id, 0, &older), collSuccess) << collGetLastError(nullptr);
  collConfig_t bad = COLL_CONFIG_INITIALIZER;
  bad.trafficClass = 300;
  collComm_t child = nullptr;
  EXPECT_EQ(collCommSplit(comm, 0, 0, &child, &bad), collInvalidArgument);
  EXPECT_EQ(child, nullptr);
  EXPECT_NE(std::string(collGetLastError(comm)).find("trafficClass"), std::string::npos) << collGetLastError(comm);
  EXPECT_EQ(collCommDestroy(comm), collSuccess);
}

TEST(Api, BadCallArgumentsLeaveBuffersUntouched) {
  withComms(1, [](int, collComm_t comm) {
    std::vector<float> send(16, 1.0f), recv(16, -7.0f);
    auto untouched = [&] {
      for (float v : recv) EXPECT_EQ(v, -7.0f);
    };
    EXPECT_EQ(collAllReduce(nullptr, recv.data(), 16, collFloat32, collSum, comm, nullptr), collInvalidArgument);
    EXPECT_EQ(collAllReduce(send.data(), nullptr, 16, collFloat32, collSum, comm, nullptr), collInvalidArgument);
    EXPECT_EQ(collAllReduce(send.data(), recv.data(), 16, static_cast<collDataType_t>(42), collSum, comm, nullptr),
              collInvalidArgument);
    EXPECT_EQ(collAllReduce(send.data(), recv.data(), 16, collFloat32, static_cast<collRedOp_t>(9), comm, nullptr),
              collInvalidArgument);
    EXPECT_EQ(collAllReduce(send.data(), recv.data(), SIZE_MAX / 2, collFloat32, collSum, comm, nullptr),
              collInvalidArgument);
    EXPECT_EQ(collAllReduce(recv.data(), recv.data() + 1, 8, collFloat32, collSum, comm, nullptr), collInvalidArgument);
    int dummyStream = 0;
    EXPECT_EQ(collAllReduce(send.data(), recv.data(), 16, collFloat32, collSum, comm, &dummyStream),
              collInvalidArgument);
    untouched();
    // NULL buffers are fine with count 0.
    EXPECT_EQ(collAllReduce(nullptr, nullptr, 0, collFloat32, collSum, comm, nullptr), collSuccess);
  });
}

TEST(Api, UseAfterDestroyIsACleanError) {
  collUniqueId id;
  ASSERT_EQ(collGetUniqueId(&id), collSuccess);
  collComm_t comm = nullptr;
  ASSERT_EQ(collCommInitRank(&comm, 1, id, 0), collSuccess) << collGetLastError(nullptr);
  int n = 0, r = -1;
  EXPECT_EQ(collCommCount(comm, &n), collSuccess);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(collCommUserRank(comm, &r), collSuccess);
  EXPECT_EQ(r, 0);
  ASSERT_EQ(collCommDestroy(comm), collSuccess);
  float x = 1, y = 0;
  EXPECT_EQ(collAllReduce(&x, &y, 1, collFloat32, collSum, comm, nullptr), collInvalidArgument);
  EXPECT_EQ(y, 0.0f);
  EXPECT_EQ(collCommDestroy(comm), collInvalidArgument);
  EXPECT_EQ(collCommAbort(comm), collInvalidArgument);
  collResult_t async;
  EXPECT_EQ(collCommGetAsyncError(comm, &async), collInvalidArgument);
  // A new communicator that reuses the slot does not revive the old handle.
  collUniqueId id2;
  ASSERT_EQ(collGetUniqueId(&id2), collSuccess);
  collComm_t comm2 = nullptr;
  ASSERT_EQ(collCommInitRank(&comm2, 1, id2, 0), collSuccess);
  EXPECT_NE(comm2, comm);
  EXPECT_EQ(collCommCount(comm, &n), collInvalidArgument);
  EXPECT_EQ(collCommGetAsyncError(comm2, &async), collSuccess);
  EXPECT_EQ(async, collSuccess);
  EXPECT_EQ(collCommFinalize(comm2), collSuccess);
  EXPECT_EQ(collCommDestroy(comm2), collSuccess);
}

// config.blocking = 0: init returns collInProgress at once; collCommGetAsyncError says when the
// communicator is ready; calls before that return collInProgress; a failed init reports its error.
TEST(Api, NonBlockingInit) {
  const int n = 3;
  collUniqueId id;
  ASSERT_EQ(collGetUniqueId(&id), collSuccess);
  std::vector<collComm_t> comms(n, nullptr);
  collConfig_t config = COLL_CONFIG_INITIALIZER;
  config.blocking = 0;
  // One thread starts every rank: with blocking init this would wait for the other ranks forever.
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(collCommInitRankConfig(&comms[r], n, id, r, &config), collInProgress) << collGetLastError(nullptr);
    ASSERT_NE(comms[r], nullptr);
  }
  int count = 0;
  const collResult_t early = collCommCount(comms[0], &count);
  EXPECT_TRUE(early == collInProgress || early == collSuccess) << early;
  for (int r = 0; r < n; ++r) {
    collResult_t state = collInProgress;
    for (int i = 0; i < 3000 && state == collInProgress; ++i) {
      ASSERT_EQ(collCommGetAsyncError(comms[r], &state), collSuccess);
      if (state == collInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(state, collSuccess) << "rank " << r << ": " << collGetLastError(nullptr);
  }
  std::vector<std::thread> threads;
  std::vector<int32_t> results(n, 0);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      int32_t v = r + 1;
      EXPECT_EQ(collAllReduce(&v, &v, 1, collInt32, collSum, comms[r], nullptr), collSuccess);
      results[r] = v;
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(results[r], 6);
    EXPECT_EQ(collCommDestroy(comms[r]), collSuccess);
  }
  // An init that cannot succeed (the other rank never comes): its error arrives through
  // collCommGetAsyncError; destroy frees the handle.
  setenv("COLL_TIMEOUT", "1", 1);
  collUniqueId lonely;
  ASSERT_EQ(collGetUniqueId(&lonely), collSuccess);
  collComm_t failing = nullptr;
  ASSERT_EQ(collCommInitRankConfig(&failing, 2, lonely, 0, &config), collInProgress);
  collResult_t state = collInProgress;
  for (int i = 0; i < 1000 && state == collInProgress; ++i) {
    ASSERT_EQ(collCommGetAsyncError(failing, &state), collSuccess);
    if (state == collInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  unsetenv("COLL_TIMEOUT");
  EXPECT_NE(state, collSuccess);
  EXPECT_NE(state, collInProgress);
  EXPECT_EQ(collCommDestroy(failing), collSuccess);
  EXPECT_EQ(collCommDestroy(failing), collInvalidArgument);
}

TEST(Api, AllReduceAcrossThreadRanks) {
  for (int n : {1, 2, 3, 4}) {
    withComms(n, [n](int rank, collComm_t comm) {
      for (size_t count : {size_t{1}, size_t{7}, size_t{1009}, size_t{300000}}) {
        std::vector<int32_t> send(count), recv(count, -1);
        for (size_t i = 0; i < count; ++i) send[i] = static_cast<int32_t>(rank * 1000 + i % 97);
        ASSERT_EQ(collAllReduce(send.data(), recv.data(), count, collInt32, collSum, comm, nullptr), collSuccess)
            << collGetLastError(comm);
        for (size_t i = 0; i < count; ++i) {
          int32_t expect = static_cast<int32_t>(1000 * n * (n - 1) / 2 + n * (i % 97));
          ASSERT_EQ(recv[i], expect) << "rank " << rank << " count " << count << " i " << i;
        }
        // In place, average.
        std::vector<double> data(count);
        for (size_t i = 0; i < count; ++i) data[i] = rank + static_cast<double>(i % 5);
        ASSERT_EQ(collAllReduce(data.data(), data.data(), count, collFloat64, collAvg, comm, nullptr), collSuccess);
        for (size_t i = 0; i < count; ++i) ASSERT_EQ(data[i], (n - 1) / 2.0 + static_cast<double>(i % 5));
      }
    });
  }
}

// ncclCommInitRankScalable's equivalent: three roots (ids made in three calls) for five thread
// ranks; the communicator works as one made with one root, and bad arguments are clean errors.
TEST(Api, InitRankScalableWithSeveralRoots) {
  constexpr int n = 5, roots = 3;
  std::vector<collUniqueId> ids(roots);
  for (auto& id : ids) ASSERT_EQ(collGetUniqueId(&id), collSuccess) << collGetLastError(nullptr);
  collComm_t none = nullptr;
  EXPECT_EQ(collCommInitRankScalable(&none, n, 0, 0, ids.data(), nullptr), collInvalidArgument);
  EXPECT_EQ(collCommInitRankScalable(&none, n, 0, n + 1, ids.data(), nullptr), collInvalidArgument);
  EXPECT_EQ(collCommInitRankScalable(&none, n, 0, roots, nullptr, nullptr), collInvalidArgument);
  EXPECT_NE(std::string(collGetLastError(nullptr)).find("commIds"), std::string::npos);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      collComm_t comm = nullptr;
      ASSERT_EQ(collCommInitRankScalable(&comm, n, r, roots, ids.data(), nullptr), collSuccess)
          << "rank " << r << ": " << collGetLastError(nullptr);
      int rank = -1, count = -1;
      EXPECT_EQ(collCommUserRank(comm, &rank), collSuccess);
      EXPECT_EQ(collCommCount(comm, &count), collSuccess);
      EXPECT_EQ(rank, r);
      EXPECT_EQ(count, n);
      std::vector<int32_t> data(1000, r + 1);
      ASSERT_EQ(collAllReduce(data.data(), data.data(), data.size(), collInt32, collSum, comm, nullptr), collSuccess)
          << collGetLastError(comm);
      EXPECT_EQ(data, std::vector<int32_t>(1000, n * (n + 1) / 2));
      EXPECT_EQ(collCommDestroy(comm), collSuccess);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(Api, GroupedCallsRunAtGroupEnd) {
  withComms(2, [](int rank, collComm_t comm) {
    std::vector<float> a(100, static_cast<float>(rank + 1)), b(50, 2.0f);
    ASSERT_EQ(collGroupStart(), collSuccess);
    ASSERT_EQ(collGroupStart(), collSuccess);
    ASSERT_EQ(collAllReduce(a.data(), a.data(), a.size(), collFloat32, collSum, comm, nullptr), collSuccess);
    ASSERT_EQ(collGroupEnd(), collSuccess);
    EXPECT_EQ(a[0], static_cast<float>(rank + 1));  // still queued: the outer group is open
    ASSERT_EQ(collAllReduce(b.data(), b.data(), b.size(), collFloat32, collProd, comm, nullptr), collSuccess);
    ASSERT_EQ(collGroupEnd(), collSuccess);
    for (float v : a) EXPECT_EQ(v, 3.0f);
    for (float v : b) EXPECT_EQ(v, 4.0f);
  });
  EXPECT_EQ(collGroupEnd(), collInvalidUsage);
}

}  // namespace
