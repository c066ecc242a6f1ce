// Every collective through the public API on communicators whose ranks are threads: NCCL's
// argument conventions, in-place layouts, groups of sends and receives, PreMulSum, split,
// InitAll, and bad input.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "collective/collective.h"
#include "tests/unit/comm_threads.h"

namespace {

using coll::testutil::withComms;

int32_t value(int rank, size_t i) { return static_cast<int32_t>(rank * 100 + static_cast<int>(i % 37)); }

TEST(ApiCollectives, BroadcastAndReduceWithARoot) {
  const int n = 3, root = 1;
  withComms(n, [&](int rank, collComm_t comm) {
    for (size_t count : {size_t{1}, size_t{1009}, size_t{200000}}) {
      std::vector<int32_t> send(count), recv(count, -1);
      for (size_t i = 0; i < count; ++i) send[i] = value(rank, i);
      ASSERT_EQ(collBroadcast(send.data(), recv.data(), count, collInt32, root, comm, nullptr), collSuccess)
          << collGetLastError(comm);
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(recv[i], value(root, i));
      std::vector<int32_t> red(count, -7);
      ASSERT_EQ(collReduce(send.data(), red.data(), count, collInt32, collSum, root, comm, nullptr), collSuccess);
      for (size_t i = 0; i < count; ++i) {
        int32_t expect = 0;
        for (int r = 0; r < n; ++r) expect += value(r, i);
        ASSERT_EQ(red[i], rank == root ? expect : -7) << "rank " << rank << " i " << i;
      }
      // In place on the root.
      std::vector<int32_t> buf = send;
      ASSERT_EQ(collBroadcast(buf.data(), buf.data(), count, collInt32, root, comm, nullptr), collSuccess);
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(buf[i], value(root, i));
    }
  });
}

TEST(ApiCollectives, AllGatherAndReduceScatterInAndOutOfPlace) {
  const int n = 4;
  withComms(n, [&](int rank, collComm_t comm) {
    for (size_t count : {size_t{1}, size_t{7}, size_t{50000}}) {
      std::vector<int32_t> send(count), recv(count * n, -1);
      for (size_t i = 0; i < count; ++i) send[i] = value(rank, i);
      ASSERT_EQ(collAllGather(send.data(), recv.data(), count, collInt32, comm, nullptr), collSuccess)
          << collGetLastError(comm);
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < count; ++i) ASSERT_EQ(recv[r * count + i], value(r, i));
      }
      std::vector<int32_t> inplace(count * n, -1);
      std::copy(send.begin(), send.end(), inplace.begin() + rank * count);
      ASSERT_EQ(collAllGather(inplace.data() + rank * count, inplace.data(), count, collInt32, comm, nullptr),
                collSuccess);
      EXPECT_EQ(inplace, recv);

      std::vector<int32_t> full(count * n), block(count, -1);
      for (size_t i = 0; i < count * n; ++i) full[i] = value(rank, i);
      ASSERT_EQ(collReduceScatter(full.data(), block.data(), count, collInt32, collSum, comm, nullptr), collSuccess);
      for (size_t i = 0; i < count; ++i) {
        int32_t expect = 0;
        for (int r = 0; r < n; ++r) expect += value(r, rank * count + i);
        ASSERT_EQ(block[i], expect);
      }
      ASSERT_EQ(collReduceScatter(full.data(), full.data() + rank * count, count, collInt32, collSum, comm, nullptr),
                collSuccess);
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(full[rank * count + i], block[i]);
    }
  });
}

TEST(ApiCollectives, AlltoAllGatherScatterBarrier) {
  const int n = 3, root = 2;
  std::atomic<int> arrived{0};
  withComms(n, [&](int rank, collComm_t comm) {
    const size_t count = 513;
    std::vector<int32_t> send(count * n), recv(count * n, -1);
    for (size_t i = 0; i < count * n; ++i) send[i] = value(rank, i);
    ASSERT_EQ(collAlltoAll(send.data(), recv.data(), count, collInt32, comm, nullptr), collSuccess)
        << collGetLastError(comm);
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(recv[r * count + i], value(r, rank * count + i));
    }

    std::vector<int32_t> gathered(rank == root ? count * n : 0, -1), mine(count);
    for (size_t i = 0; i < count; ++i) mine[i] = value(rank, i);
    ASSERT_EQ(collGather(mine.data(), gathered.data(), count, collInt32, root, comm, nullptr), collSuccess);
    if (rank == root) {
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < count; ++i) ASSERT_EQ(gathered[r * count + i], value(r, i));
      }
    }

    std::vector<int32_t> scattered(count, -1);
    ASSERT_EQ(collScatter(send.data(), scattered.data(), count, collInt32, root, comm, nullptr), collSuccess);
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(scattered[i], value(root, rank * count + i));

    arrived.fetch_add(1);
    ASSERT_EQ(collBarrier(comm, nullptr), collSuccess) << collGetLastError(comm);
    EXPECT_EQ(arrived.load(), n);  // nobody leaves the barrier before everyone entered it
  });
}

TEST(ApiCollectives, GroupedSendRecvNeverDeadlocks) {
  const int n = 4;
  withComms(n, [&](int rank, collComm_t comm) {
    const int right = (rank + 1) % n, left = (rank + n - 1) % n;
    const size_t count = 300000;  // larger than any transport buffer: both directions must move at once
    std::vector<float> out(count, static_cast<float>(rank)), in(count, -1.0f);
    ASSERT_EQ(collGroupStart(), collSuccess);
    ASSERT_EQ(collSend(out.data(), count, collFloat32, right, comm, nullptr), collSuccess);
    ASSERT_EQ(collRecv(in.data(), count, collFloat32, left, comm, nullptr), collSuccess);
    ASSERT_EQ(collGroupEnd(), collSuccess) << collGetLastError(comm);
    for (float v : in) ASSERT_EQ(v, static_cast<float>(left));

    // All-to-all out of sends and receives, two messages per pair (they match in issue order).
    std::vector<std::vector<int32_t>> tx(n), rx(2 * n);
    ASSERT_EQ(collGroupStart(), collSuccess);
    for (int p = 0; p < n; ++p) {
      tx[p] = {rank, p, rank * 10 + p};
      rx[2 * p].assign(3, -1);
      rx[2 * p + 1].assign(2, -1);
      ASSERT_EQ(collSend(tx[p].data(), 3, collInt32, p, comm, nullptr), collSuccess);
      ASSERT_EQ(collSend(tx[p].data(), 2, collInt32, p, comm, nullptr), collSuccess);
      ASSERT_EQ(collRecv(rx[2 * p].data(), 3, collInt32, p, comm, nullptr), collSuccess);
      ASSERT_EQ(collRecv(rx[2 * p + 1].data(), 2, collInt32, p, comm, nullptr), collSuccess);
    }
    ASSERT_EQ(collGroupEnd(), collSuccess) << collGetLastError(comm);
    for (int p = 0; p < n; ++p) {
      EXPECT_EQ(rx[2 * p], (std::vector<int32_t>{p, rank, p * 10 + rank}));
      EXPECT_EQ(rx[2 * p + 1], (std::vector<int32_t>{p, rank}));
    }
  });
}

TEST(ApiCollectives, MixedCollectivesInOneGroup) {
  const int n = 3;
  withComms(n, [&](int rank, collComm_t comm) {
    std::vector<int64_t> a(100, rank + 1), b(100 * n, -1), c(10, rank);
    ASSERT_EQ(collGroupStart(), collSuccess);
    ASSERT_EQ(collAllReduce(a.data(), a.data(), a.size(), collInt64, collSum, comm, nullptr), collSuccess);
    ASSERT_EQ(collAllGather(c.data(), b.data(), 10, collInt64, comm, nullptr), collSuccess);
    ASSERT_EQ(collBroadcast(c.data(), c.data(), 10, collInt64, 0, comm, nullptr), collSuccess);
    ASSERT_EQ(collGroupEnd(), collSuccess) << collGetLastError(comm);
    for (int64_t v : a) EXPECT_EQ(v, 6);
    for (int r = 0; r < n; ++r) EXPECT_EQ(b[r * 10], r);
    for (int64_t v : c) EXPECT_EQ(v, 0);
  });
}

// Gradient buckets: many calls of one type and op in one group run as one fused schedule
// (direct-sized and ring-sized ones together, in and out of place, an all-gather among them).
TEST(ApiCollectives, ManyAllReducesInOneGroupAreFusedAndCorrect) {
  const int n = 3;
  withComms(n, [&](int rank, collComm_t comm) {
    const std::vector<size_t> counts = {1, 7, 1000, 300000, 5, 70000};
    for (int round = 0; round < 2; ++round) {  // the second round reuses the cached parts
      std::vector<std::vector<float>> in(counts.size()), out(counts.size());
      for (size_t b = 0; b < counts.size(); ++b) {
        in[b].assign(counts[b], static_cast<float>(rank + b + round));
        out[b].assign(counts[b], -1.0f);
      }
      std::vector<float> gathered(4 * n, -1.0f), mine(4, static_cast<float>(rank));
      ASSERT_EQ(collGroupStart(), collSuccess);
      for (size_t b = 0; b < counts.size(); ++b) {
        float* dst = b % 2 ? in[b].data() : out[b].data();  // odd buckets in place
        ASSERT_EQ(collAllReduce(in[b].data(), dst, counts[b], collFloat32, collSum, comm, nullptr), collSuccess);
      }
      ASSERT_EQ(collAllGather(mine.data(), gathered.data(), 4, collFloat32, comm, nullptr), collSuccess);
      ASSERT_EQ(collGroupEnd(), collSuccess) << collGetLastError(comm);
      for (size_t b = 0; b < counts.size(); ++b) {
        const std::vector<float>& result = b % 2 ? in[b] : out[b];
        const float expect = static_cast<float>(n * (n - 1) / 2 + n * (b + round));
        for (size_t i = 0; i < counts[b]; i += 97) ASSERT_EQ(result[i], expect) << "bucket " << b << " i " << i;
        ASSERT_EQ(result.back(), expect);
      }
      for (int r = 0; r < n; ++r) EXPECT_EQ(gathered[4 * r + 3], static_cast<float>(r));
    }
  });
}

TEST(ApiCollectives, RepeatedCallsReuseAChoiceOnlyForTheSameSignature) {
  // The communicator keeps the planner's choice per (kind, count, type, op, root). A 64 KiB window
  // makes direct's choice depend on the count (past the window it runs in rounds): a choice reused
  // for another count, type or op would give wrong sums (or run past the window). More signatures
  // than the 16 kept, twice over, so entries are replaced and made again.
  coll::testutil::ScopedEnv window("COLL_SHM_WINDOW_BYTES", "64K");
  const int n = 3;
  withComms(n, [&](int rank, collComm_t comm) {
    for (int pass = 0; pass < 2; ++pass) {
      for (size_t count : {size_t{5}, size_t{40000}, size_t{6}, size_t{39999}, size_t{7}, size_t{12000}}) {
        std::vector<int32_t> in(count), out(count, -1);
        for (size_t i = 0; i < count; ++i) in[i] = value(rank, i);
        for (collRedOp_t op : {collSum, collMax}) {
          ASSERT_EQ(collAllReduce(in.data(), out.data(), count, collInt32, op, comm, nullptr), collSuccess)
              << collGetLastError(comm);
          for (size_t i = 0; i < count; i += 101) {
            const int32_t expect = op == collSum ? value(0, i) + value(1, i) + value(2, i) : value(n - 1, i);
            ASSERT_EQ(out[i], expect) << "count " << count << " op " << op << " i " << i;
          }
          ASSERT_EQ(out.back(), op == collSum ? value(0, count - 1) + value(1, count - 1) + value(2, count - 1)
                                              : value(n - 1, count - 1));
        }
        std::vector<double> d(count, rank + 0.5), dout(count, -1);
        ASSERT_EQ(collAllReduce(d.data(), dout.data(), count, collFloat64, collSum, comm, nullptr), collSuccess);
        ASSERT_EQ(dout[count / 2], 0.5 * n + n * (n - 1) / 2);
        for (int root = 0; root < n; ++root) {
          std::vector<int32_t> b(count, rank == root ? root + 10 : -1);
          ASSERT_EQ(collBroadcast(b.data(), b.data(), count, collInt32, root, comm, nullptr), collSuccess);
          ASSERT_EQ(b[count - 1], root + 10) << "count " << count << " root " << root;
        }
      }
    }
  });
}

TEST(ApiCollectives, PreMulSumScalesEachContributionOnce) {
  const int n = 3;
  withComms(n, [&](int rank, collComm_t comm) {
    float scalar = 0.5f;
    collRedOp_t op;
    ASSERT_EQ(collRedOpCreatePreMulSum(&op, &scalar, collFloat32, collScalarHostImmediate, comm), collSuccess);
    EXPECT_GE(static_cast<int>(op), static_cast<int>(collNumOps));
    std::vector<float> send(1000, static_cast<float>(2 * (rank + 1))), recv(1000, -1);
    ASSERT_EQ(collAllReduce(send.data(), recv.data(), send.size(), collFloat32, op, comm, nullptr), collSuccess)
        << collGetLastError(comm);
    for (float v : recv) ASSERT_EQ(v, 6.0f);  // 0.5 * (2 + 4 + 6)
    // The op belongs to its datatype and dies with RedOpDestroy.
    std::vector<double> d(4, 1.0);
    EXPECT_EQ(collAllReduce(d.data(), d.data(), d.size(), collFloat64, op, comm, nullptr), collInvalidArgument);
    ASSERT_EQ(collRedOpDestroy(op, comm), collSuccess);
    EXPECT_EQ(collAllReduce(send.data(), recv.data(), send.size(), collFloat32, op, comm, nullptr),
              collInvalidArgument);
    EXPECT_EQ(collRedOpDestroy(op, comm), collInvalidArgument);
  });
}

TEST(ApiCollectives, SplitMakesIndependentSubCommunicators) {
  const int n = 4;
  withComms(n, [&](int rank, collComm_t comm) {
    collComm_t sub = nullptr;
    int color = rank == 3 ? COLL_SPLIT_NOCOLOR : rank % 2;
    ASSERT_EQ(collCommSplit(comm, color, -rank, &sub, nullptr), collSuccess) << collGetLastError(comm);
    if (color == COLL_SPLIT_NOCOLOR) {
      EXPECT_EQ(sub, nullptr);
    } else {
      ASSERT_NE(sub, nullptr);
      int size = 0, subRank = -1;
      ASSERT_EQ(collCommCount(sub, &size), collSuccess);
      ASSERT_EQ(collCommUserRank(sub, &subRank), collSuccess);
      // Color 0: ranks {0, 2}, keys {0, -2}: rank 2 comes first. Color 1: rank 1 alone.
      EXPECT_EQ(size, color == 0 ? 2 : 1);
      EXPECT_EQ(subRank, rank == 2 ? 0 : rank == 0 ? 1 : 0);
      std::vector<int32_t> x(10, rank), y(10, -1);
      ASSERT_EQ(collAllReduce(x.data(), y.data(), 10, collInt32, collSum, sub, nullptr), collSuccess);
      for (int32_t v : y) EXPECT_EQ(v, color == 0 ? 2 : 1);
    }
    // The parent still works, independently of the children.
    std::vector<int32_t> x(10, 1), y(10, -1);
    ASSERT_EQ(collAllReduce(x.data(), y.data(), 10, collInt32, collSum, comm, nullptr), collSuccess);
    for (int32_t v : y) EXPECT_EQ(v, n);
    if (sub) {
      EXPECT_EQ(collCommDestroy(sub), collSuccess);
    }
  });
}

TEST(ApiCollectives, InitAllMakesOneCommunicatorPerThread) {
  const int n = 3;
  std::vector<collComm_t> comms(n, nullptr);
  ASSERT_EQ(collCommInitAll(comms.data(), n, nullptr), collSuccess) << collGetLastError(nullptr);
  std::vector<std::thread> threads;
  std::vector<int> ok(n, 0);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      int rank = -1;
      if (collCommUserRank(comms[r], &rank) != collSuccess || rank != r) return;
      double x = r, y = 0;
      if (collAllReduce(&x, &y, 1, collFloat64, collMax, comms[r], nullptr) != collSuccess) return;
      ok[r] = y == n - 1;
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(ok[r]) << r;
    EXPECT_EQ(collCommDestroy(comms[r]), collSuccess);
  }
  EXPECT_EQ(collCommInitAll(comms.data(), 0, nullptr), collInvalidArgument);
}

// COLL_CHECK=1: ranks that disagree on the root (or the count) get a clear error instead of a
// hang or wrong data, and the communicator stays usable.
TEST(ApiCollectives, CollCheckNamesMismatchedRootAndCount) {
  setenv("COLL_CHECK", "1", 1);
  const int n = 3;
  withComms(n, [&](int rank, collComm_t comm) {
    std::vector<int32_t> buf(64, rank), out(64, -1);
    EXPECT_EQ(collBroadcast(buf.data(), buf.data(), 64, collInt32, rank == 2 ? 1 : 0, comm, nullptr), collInvalidUsage);
    std::string msg = collGetLastError(comm);
    EXPECT_NE(msg.find("root"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 2"), std::string::npos) << msg;
    EXPECT_EQ(collAllReduce(buf.data(), out.data(), rank == 1 ? 32 : 64, collInt32, collSum, comm, nullptr),
              collInvalidUsage);
    EXPECT_NE(std::string(collGetLastError(comm)).find("count"), std::string::npos);
    for (int32_t v : out) EXPECT_EQ(v, -1);
    // Agreeing calls still run.
    ASSERT_EQ(collAllReduce(buf.data(), out.data(), 64, collInt32, collSum, comm, nullptr), collSuccess);
    EXPECT_EQ(out[0], n * (n - 1) / 2);
  });
  unsetenv("COLL_CHECK");
}

TEST(ApiCollectives, BadInputIsAClearErrorAndTouchesNothing) {
  withComms(2, [](int, collComm_t comm) {
    std::vector<int32_t> a(8, 5), b(16, -3);
    EXPECT_EQ(collBroadcast(a.data(), b.data(), 8, collInt32, 2, comm, nullptr), collInvalidArgument);
    EXPECT_NE(std::string(collGetLastError(comm)).find("root 2"), std::string::npos);
    EXPECT_EQ(collReduce(a.data(), b.data(), 8, collInt32, static_cast<collRedOp_t>(-1), 0, comm, nullptr),
              collInvalidArgument);
    EXPECT_EQ(collReduce(a.data(), b.data(), 8, collInt32, static_cast<collRedOp_t>(77), 0, comm, nullptr),
              collInvalidArgument);
    EXPECT_EQ(collSend(a.data(), 8, collInt32, 5, comm, nullptr), collInvalidArgument);
    EXPECT_EQ(collRecv(nullptr, 8, collInt32, 0, comm, nullptr), collInvalidArgument);
    // All-gather buffers that overlap other than in NCCL's in-place layout.
    EXPECT_EQ(collAllGather(b.data() + 1, b.data(), 8, collInt32, comm, nullptr), collInvalidArgument);
    EXPECT_EQ(collAlltoAll(a.data(), b.data(), static_cast<size_t>(1) << 40, collInt32, comm, nullptr),
              collInvalidArgument);
    for (int32_t v : a) EXPECT_EQ(v, 5);
    for (int32_t v : b) EXPECT_EQ(v, -3);
  });
}

}  // namespace
