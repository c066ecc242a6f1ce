// Stream lanes (src/comm/lanes.h): two host streams of one communicator run concurrently (a test
// that deadlocks into a timeout when they serialize, and its COLL_STREAM_LANES=1 control), many
// mixed operations on two and three streams, failures on every lane, PreMulSum, COLL_CHECK and
// split through lanes.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "collective/collective.h"
#include "src/comm/comm.h"
#include "tests/unit/comm_threads.h"

namespace {

using coll::testutil::ScopedEnv;
using coll::testutil::withComms;

// Two communicators C and D per rank (thread), with a short timeout.
void withTwoComms(int n, int timeoutMs, const std::function<void(int, collComm_t, collComm_t)>& body) {
  collUniqueId idC, idD;
  ASSERT_EQ(collGetUniqueId(&idC), collSuccess);
  ASSERT_EQ(collGetUniqueId(&idD), collSuccess);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      collConfig_t cfg = COLL_CONFIG_INITIALIZER;
      cfg.timeoutMs = timeoutMs;
      collComm_t c = nullptr, d = nullptr;
      ASSERT_EQ(collCommInitRankConfig(&c, n, idC, r, &cfg), collSuccess) << collGetLastError(nullptr);
      ASSERT_EQ(collCommInitRankConfig(&d, n, idD, r, &cfg), collSuccess) << collGetLastError(nullptr);
      body(r, c, d);
      EXPECT_EQ(collCommAbort(d), collSuccess);
      EXPECT_EQ(collCommAbort(c), collSuccess);
    });
  }
  for (auto& t : threads) t.join();
}

struct CrossResult {
  collResult_t syncA = collSuccess, syncB = collSuccess, syncS1 = collSuccess, syncS2 = collSuccess;
  bool xExact = false, yExact = false;
  double seconds = 0;
};

// Rank 0: X on stream A, Y on stream B, synchronize B, token to rank 1 on D, synchronize A.
// Rank 1: on S1 a receive on D then X; on S2 Y. Y can complete only if it overtakes X on C.
CrossResult crossStreams(int timeoutMs) {
  CrossResult out;
  const auto t0 = std::chrono::steady_clock::now();
  withTwoComms(2, timeoutMs, [&](int rank, collComm_t c, collComm_t d) {
    std::vector<int32_t> x(1000, rank + 1), y(3000, 10 * (rank + 1));
    if (rank == 0) {
      collStream_t a = nullptr, b = nullptr;
      ASSERT_EQ(collHostStreamCreate(&a), collSuccess);
      ASSERT_EQ(collHostStreamCreate(&b), collSuccess);
      ASSERT_EQ(collAllReduce(x.data(), x.data(), x.size(), collInt32, collSum, c, a), collSuccess);
      ASSERT_EQ(collAllReduce(y.data(), y.data(), y.size(), collInt32, collSum, c, b), collSuccess);
      out.syncB = collHostStreamSynchronize(b);
      int32_t token = 7;
      (void)collSend(&token, 1, collInt32, 1, d, nullptr);
      out.syncA = collHostStreamSynchronize(a);
      out.xExact = std::all_of(x.begin(), x.end(), [](int32_t v) { return v == 3; });
      out.yExact = std::all_of(y.begin(), y.end(), [](int32_t v) { return v == 30; });
      (void)collHostStreamDestroy(a);
      (void)collHostStreamDestroy(b);
    } else {
      collStream_t s1 = nullptr, s2 = nullptr;
      ASSERT_EQ(collHostStreamCreate(&s1), collSuccess);
      ASSERT_EQ(collHostStreamCreate(&s2), collSuccess);
      int32_t token = 0;
      ASSERT_EQ(collRecv(&token, 1, collInt32, 0, d, s1), collSuccess);
      ASSERT_EQ(collAllReduce(x.data(), x.data(), x.size(), collInt32, collSum, c, s1), collSuccess);
      ASSERT_EQ(collAllReduce(y.data(), y.data(), y.size(), collInt32, collSum, c, s2), collSuccess);
      out.syncS2 = collHostStreamSynchronize(s2);
      out.syncS1 = collHostStreamSynchronize(s1);
      if (out.syncS1 == collSuccess) {
        EXPECT_EQ(token, 7);
      }
      (void)collHostStreamDestroy(s1);
      (void)collHostStreamDestroy(s2);
    }
  });
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

TEST(StreamLanes, TwoStreamsOfOneCommunicatorRunConcurrently) {
  const CrossResult r = crossStreams(10000);
  EXPECT_EQ(r.syncA, collSuccess);
  EXPECT_EQ(r.syncB, collSuccess);
  EXPECT_EQ(r.syncS1, collSuccess);
  EXPECT_EQ(r.syncS2, collSuccess);
  EXPECT_TRUE(r.xExact);
  EXPECT_TRUE(r.yExact);
  EXPECT_LT(r.seconds, 8.0);  // far below the timeout: nothing waited for it
}

// The control: with one lane the same program deadlocks, and COLL_TIMEOUT turns that into errors.
TEST(StreamLanes, OneLaneSerializesAndTheSameProgramTimesOut) {
  ScopedEnv lanes("COLL_STREAM_LANES", "1");
  const CrossResult r = crossStreams(1500);
  // Which stream sees the timeout first is a race (the peers' deadlines run out at about the same
  // time); that the program cannot finish cleanly is not.
  EXPECT_FALSE(r.syncA == collSuccess && r.syncB == collSuccess && r.syncS1 == collSuccess && r.syncS2 == collSuccess);
  EXPECT_TRUE(r.syncA == collTimeout || r.syncB == collTimeout || r.syncS1 == collTimeout || r.syncS2 == collTimeout)
      << r.syncA << " " << r.syncB << " " << r.syncS1 << " " << r.syncS2;
  EXPECT_LT(r.seconds, 30.0);
}

// Many mixed operations (collectives, groups, point-to-point, blocking calls in between) on
// `nstreams` streams of one communicator; every result checked exactly after synchronize.
void manyOperations(int n, int nstreams) {
  withComms(n, [&](int rank, collComm_t comm) {
    std::vector<collStream_t> streams(static_cast<size_t>(nstreams));
    for (auto& s : streams) ASSERT_EQ(collHostStreamCreate(&s), collSuccess);
    const int ops = 24;
    const size_t len = 513;
    std::vector<std::vector<int32_t>> ar(ops), bc(ops), ag(ops), src(ops), rs(ops), p2p(ops), blocking(ops);
    for (int k = 0; k < ops; ++k) {
      collStream_t s = streams[static_cast<size_t>(k % nstreams)];
      switch (k % 4) {
        case 0:
          ar[k].assign(len, rank + k);
          ASSERT_EQ(collAllReduce(ar[k].data(), ar[k].data(), len, collInt32, collSum, comm, s), collSuccess);
          break;
        case 1:
          bc[k].assign(len, rank == k % n ? 1000 + k : -1);
          ASSERT_EQ(collBroadcast(bc[k].data(), bc[k].data(), len, collInt32, k % n, comm, s), collSuccess);
          break;
        case 2: {
          // One group: an all-gather and a reduce-scatter (fused or not) on one stream.
          ag[k].assign(len * n, -1);
          src[k].assign(len, rank * 100 + k);  // read by queued work: lives until the end
          rs[k].assign(len * n, 0);
          for (size_t i = 0; i < rs[k].size(); ++i) rs[k][i] = static_cast<int32_t>(i) + rank;
          ASSERT_EQ(collGroupStart(), collSuccess);
          ASSERT_EQ(collAllGather(src[k].data(), ag[k].data(), len, collInt32, comm, s), collSuccess);
          ASSERT_EQ(collReduceScatter(rs[k].data(), rs[k].data() + len * rank, len, collInt32, collSum, comm, s),
                    collSuccess);
          ASSERT_EQ(collGroupEnd(), collSuccess);
          break;
        }
        case 3: {
          // A ring exchange: send to the next rank, receive from the previous, one group.
          p2p[k].assign(2 * len, 0);
          for (size_t i = 0; i < len; ++i) p2p[k][i] = rank * 7 + k;
          ASSERT_EQ(collGroupStart(), collSuccess);
          ASSERT_EQ(collSend(p2p[k].data(), len, collInt32, (rank + 1) % n, comm, s), collSuccess);
          ASSERT_EQ(collRecv(p2p[k].data() + len, len, collInt32, (rank + n - 1) % n, comm, s), collSuccess);
          ASSERT_EQ(collGroupEnd(), collSuccess);
          break;
        }
      }
      if (k % 5 == 4) {
        // A blocking call between stream work, on its own buffer.
        blocking[k].assign(17, rank + 1);
        ASSERT_EQ(collAllReduce(blocking[k].data(), blocking[k].data(), 17, collInt32, collSum, comm, nullptr),
                  collSuccess)
            << collGetLastError(comm);
        for (int32_t v : blocking[k]) ASSERT_EQ(v, n * (n + 1) / 2);
      }
    }
    // Stream order across lanes: the same buffer twice on one stream sees the first result.
    std::vector<int32_t> twice(100, 1);
    ASSERT_EQ(collAllReduce(twice.data(), twice.data(), twice.size(), collInt32, collSum, comm, streams[0]),
              collSuccess);
    ASSERT_EQ(collAllReduce(twice.data(), twice.data(), twice.size(), collInt32, collSum, comm, streams[0]),
              collSuccess);
    for (auto s : streams) ASSERT_EQ(collHostStreamSynchronize(s), collSuccess) << collGetLastError(nullptr);
    for (auto s : streams) EXPECT_EQ(collHostStreamQuery(s), collSuccess);
    const int32_t rankSum = n * (n - 1) / 2;
    for (int k = 0; k < ops; ++k) {
      switch (k % 4) {
        case 0:
          for (int32_t v : ar[k]) ASSERT_EQ(v, rankSum + n * k) << "op " << k;
          break;
        case 1:
          for (int32_t v : bc[k]) ASSERT_EQ(v, 1000 + k) << "op " << k;
          break;
        case 2:
          for (int r = 0; r < n; ++r) {
            for (size_t i = 0; i < len; ++i) ASSERT_EQ(ag[k][r * len + i], r * 100 + k) << "op " << k;
          }
          for (size_t i = 0; i < len; ++i) {
            ASSERT_EQ(rs[k][len * rank + i], n * static_cast<int32_t>(len * rank + i) + rankSum) << "op " << k;
          }
          break;
        case 3:
          for (size_t i = 0; i < len; ++i) ASSERT_EQ(p2p[k][len + i], ((rank + n - 1) % n) * 7 + k) << "op " << k;
          break;
      }
    }
    for (int32_t v : twice) EXPECT_EQ(v, n * n);
    // Finalize drains every lane; a last blocking call sees everyone.
    EXPECT_EQ(collCommFinalize(comm), collSuccess);
    for (auto s : streams) EXPECT_EQ(collHostStreamDestroy(s), collSuccess);
  });
}

TEST(StreamLanes, ManyOperationsOnTwoStreamsTwoRanks) { manyOperations(2, 2); }

TEST(StreamLanes, ManyOperationsOnThreeStreamsThreeRanksThreeLanes) {
  ScopedEnv lanes("COLL_STREAM_LANES", "3");
  manyOperations(3, 3);
}

TEST(StreamLanes, ManyOperationsOnTwoStreamsFourRanks) { manyOperations(4, 2); }

// A peer that leaves: the work on both lanes' streams ends in an error, and the communicator
// reports it, within the timeout instead of hanging.
TEST(StreamLanes, AFailingPeerIsAnErrorOnEveryLanesStream) {
  collUniqueId id;
  ASSERT_EQ(collGetUniqueId(&id), collSuccess);
  std::vector<collResult_t> sync(2, collSuccess), query(2, collSuccess);
  collResult_t async = collSuccess;
  int nfailed = 0;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      collConfig_t config = COLL_CONFIG_INITIALIZER;
      config.timeoutMs = 2000;
      collComm_t comm = nullptr;
      ASSERT_EQ(collCommInitRankConfig(&comm, 2, id, r, &config), collSuccess) << collGetLastError(nullptr);
      // Two blocking calls: lanes 0 and 1 both exist and work.
      for (int k = 0; k < 2; ++k) {
        float v = 1.0f;
        ASSERT_EQ(collAllReduce(&v, &v, 1, collFloat32, collSum, comm, nullptr), collSuccess) << collGetLastError(comm);
        EXPECT_EQ(v, 2.0f);
      }
      if (r == 1) {
        (void)collCommAbort(comm);  // leaves without joining what comes next
        return;
      }
      collStream_t s[2] = {nullptr, nullptr};
      std::vector<std::vector<float>> v(2, std::vector<float>(1000, 1.0f));
      for (int k = 0; k < 2; ++k) {
        ASSERT_EQ(collHostStreamCreate(&s[k]), collSuccess);
        (void)collAllReduce(v[k].data(), v[k].data(), v[k].size(), collFloat32, collSum, comm, s[k]);
      }
      for (int k = 0; k < 2; ++k) sync[k] = collHostStreamSynchronize(s[k]);
      for (int k = 0; k < 2; ++k) query[k] = collHostStreamQuery(s[k]);
      (void)collCommGetAsyncError(comm, &async);
      int failed[4];
      (void)collCommGetFailedRanks(comm, failed, 4, &nfailed);
      for (int k = 0; k < 2; ++k) (void)collHostStreamDestroy(s[k]);
      (void)collCommAbort(comm);
    });
  }
  for (auto& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int k = 0; k < 2; ++k) {
    EXPECT_TRUE(sync[k] == collRemoteError || sync[k] == collTimeout || sync[k] == collInvalidUsage)
        << "stream " << k << ": " << sync[k];
    EXPECT_NE(query[k], collSuccess);
    EXPECT_NE(query[k], collInProgress);
  }
  EXPECT_NE(async, collSuccess);
  EXPECT_LT(seconds, 20.0);
}

// PreMulSum ops made on the communicator work on every lane; COLL_CHECK catches a mismatch on
// lane 1; a communicator with lanes splits, and its child works.
TEST(StreamLanes, PreMulSumCheckAndSplitThroughLanes) {
  ScopedEnv check("COLL_CHECK", "1");
  withComms(2, [&](int rank, collComm_t comm) {
    float scalar = 0.5f;
    collRedOp_t half;
    ASSERT_EQ(collRedOpCreatePreMulSum(&half, &scalar, collFloat32, collScalarHostImmediate, comm), collSuccess);
    collStream_t a = nullptr, b = nullptr;
    ASSERT_EQ(collHostStreamCreate(&a), collSuccess);
    ASSERT_EQ(collHostStreamCreate(&b), collSuccess);
    std::vector<std::vector<float>> v(4, std::vector<float>(300, 2.0f * (rank + 1)));
    for (int k = 0; k < 4; ++k) {
      ASSERT_EQ(collAllReduce(v[k].data(), v[k].data(), v[k].size(), collFloat32, half, comm, k % 2 ? b : a),
                collSuccess);
    }
    ASSERT_EQ(collHostStreamSynchronize(a), collSuccess) << collGetLastError(nullptr);
    ASSERT_EQ(collHostStreamSynchronize(b), collSuccess) << collGetLastError(nullptr);
    for (int k = 0; k < 4; ++k) {
      for (float x : v[k]) ASSERT_EQ(x, 3.0f) << "op " << k;  // 0.5 * (2 + 4)
    }
    // Blocking, alternating lanes 0 and 1.
    for (int k = 0; k < 2; ++k) {
      float x = 4.0f;
      ASSERT_EQ(collAllReduce(&x, &x, 1, collFloat32, half, comm, nullptr), collSuccess) << collGetLastError(comm);
      EXPECT_EQ(x, 4.0f);
    }
    // Work index 4 (lane 0) agrees, work index 5 (lane 1) does not: COLL_CHECK says so there.
    std::vector<int32_t> buf(8, 1);
    ASSERT_EQ(collAllReduce(buf.data(), buf.data(), 4, collInt32, collSum, comm, nullptr), collSuccess);
    EXPECT_EQ(collAllReduce(buf.data(), buf.data(), rank == 0 ? 4 : 5, collInt32, collSum, comm, nullptr),
              collInvalidUsage);
    EXPECT_NE(std::string(collGetLastError(comm)).find("COLL_CHECK"), std::string::npos) << collGetLastError(comm);
    // Split (its own exchanges are work on the lanes too).
    collComm_t child = nullptr;
    ASSERT_EQ(collCommSplit(comm, 0, -rank, &child, nullptr), collSuccess) << collGetLastError(comm);
    ASSERT_NE(child, nullptr);
    int childRank = -1;
    ASSERT_EQ(collCommUserRank(child, &childRank), collSuccess);
    EXPECT_EQ(childRank, 1 - rank);
    for (int k = 0; k < 3; ++k) {
      int32_t x = childRank + 1;
      ASSERT_EQ(collAllReduce(&x, &x, 1, collInt32, collSum, child, a), collSuccess);
      ASSERT_EQ(collHostStreamSynchronize(a), collSuccess) << collGetLastError(nullptr);
      EXPECT_EQ(x, 3);
    }
    EXPECT_EQ(collCommDestroy(child), collSuccess);
    collCommStats_t stats;
    EXPECT_EQ(collCommGetStats(comm, &stats), collSuccess);
    EXPECT_EQ(collCommDump(comm), collSuccess);
    EXPECT_EQ(collRedOpDestroy(half, comm), collSuccess);
    EXPECT_EQ(collHostStreamDestroy(a), collSuccess);
    EXPECT_EQ(collHostStreamDestroy(b), collSuccess);
  });
}

// Statistics sum the lanes (one compressed call ran on each), and a revocation reaches every lane.
TEST(StreamLanes, StatsSumTheLanesAndRevokeReachesThem) {
  withComms(2, [&](int rank, collComm_t comm) {
    std::vector<float> in(1 << 15, 1.0f), out(1 << 15, 0.0f);
    collCompression_t cfg = COLL_COMPRESSION_INITIALIZER;
    for (int k = 0; k < 2; ++k) {  // work indices 0 and 1: lanes 0 and 1
      ASSERT_EQ(
          collAllReduceCompressed(in.data(), out.data(), in.size(), collFloat32, collSum, &cfg, nullptr, comm, nullptr),
          collSuccess)
          << collGetLastError(comm);
      EXPECT_NEAR(out[0], 2.0f, 0.25f);
    }
    collCommStats_t stats;
    ASSERT_EQ(collCommGetStats(comm, &stats), collSuccess);
    EXPECT_EQ(stats.compressedCalls, 2u);
    EXPECT_GT(stats.compressedWireBytes, 0u);
    EXPECT_GE(stats.wireBytes, stats.compressedWireBytes);
    if (rank == 0) {
      EXPECT_EQ(collCommRevoke(comm), collSuccess);
    }
    // Whichever lane the next two calls land on, both fail as revoked (rank 1 hears of it first).
    for (int k = 0; k < 2; ++k) {
      float x = 1.0f;
      const auto t0 = std::chrono::steady_clock::now();
      const collResult_t res = collAllReduce(&x, &x, 1, collFloat32, collSum, comm, nullptr);
      EXPECT_NE(res, collSuccess) << "call " << k;
      EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
    }
  });
}

// How many lanes each rank has after its first and its second blocking call (work indices 0 and 1:
// lanes 0 and 1), under COLL_LAZY_SETUP and COLL_STREAM_LANES.
std::vector<std::pair<int, int>> lanesMade(int n, const char* lazy, const char* lanes) {
  ScopedEnv lazyEnv("COLL_LAZY_SETUP", lazy), lanesEnv("COLL_STREAM_LANES", lanes), timeout("COLL_TIMEOUT", "20");
  collUniqueId id;
  EXPECT_EQ(collGetUniqueId(&id), collSuccess);
  std::vector<std::pair<int, int>> out(static_cast<size_t>(n), {-1, -1});
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<coll::Comm> comm;
      coll::Status st = coll::Comm::create(id, n, r, coll::CommConfig{}, &comm);
      ASSERT_TRUE(st.ok()) << "rank " << r << ": " << st.message();
      for (int k = 0; k < 2; ++k) {
        float x = 1.0f;
        coll::CollArgs args;
        args.sendbuff = &x, args.recvbuff = &x, args.count = 1;
        st = comm->runNow(args);
        ASSERT_TRUE(st.ok()) << "rank " << r << ": " << st.message();
        EXPECT_EQ(x, static_cast<float>(n));
        (k == 0 ? out[static_cast<size_t>(r)].first : out[static_cast<size_t>(r)].second) = comm->lanesMade();
      }
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

// A lane's first call used to make its communicator: by default every lane is made from creation
// on, in the background, and exists once the first call (which waits for it) has run on lane 0;
// COLL_LAZY_SETUP=1 keeps the old way (made by the lane's first call).
TEST(StreamLanes, LanesAreMadeAheadUnlessLazy) {
  for (const auto& [first, second] : lanesMade(3, "0", "3")) {
    EXPECT_EQ(first, 3);
    EXPECT_EQ(second, 3);
  }
  for (const auto& [first, second] : lanesMade(3, "1", "3")) {
    EXPECT_EQ(first, 1);
    EXPECT_EQ(second, 2);  // lane 2 had no work yet
  }
  for (const auto& [first, second] : lanesMade(2, "0", "1")) {
    EXPECT_EQ(first, 1);
    EXPECT_EQ(second, 1);
  }
}

// A rank that aborts while the lanes are still being made in the background (right after
// creation) revokes the communicator: the other ranks' set-up threads wait for it in the lanes'
// rendezvous, and their destroy would otherwise wait there until COLL_TIMEOUT (60 s here).
TEST(StreamLanes, AbortWhileTheLanesAreBeingMadeReleasesThePeers) {
  ScopedEnv lanesEnv("COLL_STREAM_LANES", "16"), lazyEnv("COLL_LAZY_SETUP", "0"), timeout("COLL_TIMEOUT", "60");
  constexpr int n = 3;
  collUniqueId id;
  ASSERT_EQ(collGetUniqueId(&id), collSuccess);
  int madeAtAbort = -1;
  std::vector<double> destroySeconds(n, -1);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<coll::Comm> comm;
      coll::Status st = coll::Comm::create(id, n, r, coll::CommConfig{}, &comm);
      ASSERT_TRUE(st.ok()) << "rank " << r << ": " << st.message();
      if (r == 0) {
        madeAtAbort = comm->lanesMade();
        comm->abort();
      }
      const auto t0 = std::chrono::steady_clock::now();
      comm.reset();
      destroySeconds[static_cast<size_t>(r)] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LT(madeAtAbort, 16) << "the lanes were all made before the abort: nothing was tested";
  for (int r = 0; r < n; ++r) EXPECT_LT(destroySeconds[static_cast<size_t>(r)], 10.0) << "rank " << r;
}

}  // namespace

// Point-to-point among some ranks only (pipeline parallelism): ranks 0 and 1 exchange, rank 2 does
// not, then every rank runs collectives, blocking and on a host stream. The sends must not move
// the call numbers that the collectives' shared windows match ranks by, nor the lane index every
// rank counts: with either, the next collective waits for a call rank 2 never makes.
void pointToPointAmongSomeRanks(const char* lanes) {
  ScopedEnv lanesEnv("COLL_STREAM_LANES", lanes);
  ScopedEnv timeout("COLL_TIMEOUT", "20");
  withComms(3, [](int rank, collComm_t comm) {
    collStream_t s = nullptr;
    ASSERT_EQ(collHostStreamCreate(&s), collSuccess);
    for (int round = 0; round < 3; ++round) {
      std::vector<float> mine(1000, static_cast<float>(rank + round)), theirs(1000, -1.0f);
      if (rank < 2) {
        const int peer = 1 - rank;
        ASSERT_EQ(collGroupStart(), collSuccess);
        ASSERT_EQ(collSend(mine.data(), mine.size(), collFloat32, peer, comm, nullptr), collSuccess);
        ASSERT_EQ(collRecv(theirs.data(), theirs.size(), collFloat32, peer, comm, nullptr), collSuccess);
        ASSERT_EQ(collGroupEnd(), collSuccess) << collGetLastError(comm);
        EXPECT_EQ(theirs[999], static_cast<float>(peer + round)) << "rank " << rank << " round " << round;
        // One more on a host stream: queued point-to-point work takes no lane index either.
        ASSERT_EQ(rank == 0 ? collSend(mine.data(), 10, collFloat32, 1, comm, s)
                            : collRecv(theirs.data(), 10, collFloat32, 0, comm, s),
                  collSuccess);
      }
      for (size_t count : {size_t{8}, size_t{1} << 18}) {
        std::vector<float> blocking(count, 1.0f), streamed(count, 2.0f);
        ASSERT_EQ(collAllReduce(blocking.data(), blocking.data(), count, collFloat32, collSum, comm, nullptr),
                  collSuccess)
            << "rank " << rank << " round " << round << ": " << collGetLastError(comm);
        ASSERT_EQ(collAllReduce(streamed.data(), streamed.data(), count, collFloat32, collSum, comm, s), collSuccess);
        ASSERT_EQ(collHostStreamSynchronize(s), collSuccess) << "rank " << rank << ": " << collGetLastError(comm);
        EXPECT_EQ(blocking[count - 1], 3.0f) << "rank " << rank << " round " << round << " count " << count;
        EXPECT_EQ(streamed[count - 1], 6.0f) << "rank " << rank << " round " << round << " count " << count;
      }
    }
    EXPECT_EQ(collHostStreamDestroy(s), collSuccess);
  });
}

TEST(StreamLanes, PointToPointAmongSomeRanksOneLane) { pointToPointAmongSomeRanks("1"); }
TEST(StreamLanes, PointToPointAmongSomeRanksTwoLanes) { pointToPointAmongSomeRanks("2"); }
