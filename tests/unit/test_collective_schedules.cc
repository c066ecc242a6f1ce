// Schedules of broadcast, reduce, all-gather, reduce-scatter, all-to-all, gather, scatter,
// barrier and point-to-point batches through the in-process executor: every rank's bytes checked
// (results, untouched buffers, guards), NCCL's in-place layouts, many rank counts, and a
// structural check of every builder at 1024 ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "algorithms/algorithms.h"
#include "src/exec/inprocess.h"
#include "src/kernels/reduce.h"
#include "tests/unit/schedule_test_data.h"

namespace coll {
namespace {

enum class Algo {
  RingBroadcast,
  TreeBroadcast,
  RingReduce,
  TreeReduce,
  RingAllGather,
  BruckAllGather,
  RingReduceScatter,
  PairwiseAlltoAll,
  LinearGather,
  LinearScatter,
  DirectReduceScatter,
  DirectAllGather,
};

struct AlgoInfo {
  Algo algo;
  const char* name;
  CollKind kind;
};

const AlgoInfo kAlgos[] = {
    {Algo::RingBroadcast, "ring-broadcast", CollKind::Broadcast},
    {Algo::TreeBroadcast, "tree-broadcast", CollKind::Broadcast},
    {Algo::RingReduce, "ring-reduce", CollKind::Reduce},
    {Algo::TreeReduce, "tree-reduce", CollKind::Reduce},
    {Algo::RingAllGather, "ring-allgather", CollKind::AllGather},
    {Algo::BruckAllGather, "bruck-allgather", CollKind::AllGather},
    {Algo::RingReduceScatter, "ring-reducescatter", CollKind::ReduceScatter},
    {Algo::PairwiseAlltoAll, "pairwise-alltoall", CollKind::AlltoAll},
    {Algo::LinearGather, "linear-gather", CollKind::Gather},
    {Algo::LinearScatter, "linear-scatter", CollKind::Scatter},
    {Algo::DirectReduceScatter, "direct-reducescatter", CollKind::ReduceScatter},
    {Algo::DirectAllGather, "direct-allgather", CollKind::AllGather},
};

const AlgoInfo& info(Algo a) { return kAlgos[static_cast<int>(a)]; }
bool reduces(CollKind k) { return k == CollKind::Reduce || k == CollKind::ReduceScatter; }
bool rooted(CollKind k) {
  return k == CollKind::Broadcast || k == CollKind::Reduce || k == CollKind::Gather || k == CollKind::Scatter;
}

// windowHalfBytes: the in-process world's window half (direct algorithms cut their rounds by it).
void build(Algo a, const Topology& topo, const CollArgs& args, Schedule* s, uint64_t windowHalfBytes = 64 * 1024) {
  switch (a) {
    case Algo::RingBroadcast: buildRingBroadcast(topo, args, s); break;
    case Algo::TreeBroadcast: buildTreeBroadcast(topo, args, s); break;
    case Algo::RingReduce: buildRingReduce(topo, args, s); break;
    case Algo::TreeReduce: buildTreeReduce(topo, args, s); break;
    case Algo::RingAllGather: buildRingAllGather(topo, args, s); break;
    case Algo::BruckAllGather: buildBruckAllGather(topo, args, s); break;
    case Algo::RingReduceScatter: buildRingReduceScatter(topo, args, s); break;
    case Algo::PairwiseAlltoAll: buildPairwiseAlltoAll(topo, args, s); break;
    case Algo::LinearGather: buildLinearGather(topo, args, s); break;
    case Algo::LinearScatter: buildLinearScatter(topo, args, s); break;
    case Algo::DirectReduceScatter: {
      DirectOptions o;
      o.windowHalfBytes = windowHalfBytes;
      buildDirectReduceScatter(topo, args, o, s);
      break;
    }
    case Algo::DirectAllGather: {
      DirectOptions o;
      o.windowHalfBytes = windowHalfBytes;
      buildDirectAllGather(topo, args, o, s);
      break;
    }
  }
}

// Elements of each buffer (NCCL's per-collective counts).

const collDataType_t kAllTypes[] = {collInt8,    collUint8,    collInt32,      collUint32,
                                    collInt64,   collUint64,   collFloat16,    collFloat32,
                                    collFloat64, collBfloat16, collFloat8e4m3, collFloat8e5m2};
using testutil::dataByte;
using testutil::expectedValue;
using testutil::fillByte;
using testutil::inputValue;
using testutil::isFloat;
using testutil::isUnsigned;
using testutil::kGuard;
using testutil::recvElems;
using testutil::sendElems;
using testutil::storeValue;
constexpr auto& kReduceTypes = testutil::kExactReduceTypes;
constexpr auto& kOps = testutil::kBuiltinOps;

struct Case {
  Algo algo;
  uint64_t count;
  collDataType_t dtype;
  collRedOp_t op;
  int32_t root;
  bool inPlace;
};

std::string describe(const Case& c, int p) {
  return std::string(info(c.algo).name) + " p=" + std::to_string(p) + " count=" + std::to_string(c.count) +
         " dtype=" + std::to_string(c.dtype) + " op=" + std::to_string(c.op) + " root=" + std::to_string(c.root) +
         (c.inPlace ? " in-place" : "");
}

struct Runner {
  explicit Runner(int32_t nranks, InProcessOptions options = {}) : world(nranks, nranks, options), schedules(nranks) {}
  InProcessWorld world;
  std::vector<Schedule> schedules;
  uint64_t seq = 0;

  void run(const Case& c) {
    const int32_t p = world.nranks();
    const CollKind kind = info(c.algo).kind;
    const uint64_t es = dataTypeSize(c.dtype);
    const uint64_t blockBytes = c.count * es;
    const uint64_t sendBytes = sendElems(kind, p, c.count) * es, recvBytes = recvElems(kind, p, c.count) * es;
    SCOPED_TRACE(describe(c, p));
    // Per rank: allocation 0 (send, or the one buffer in place) and 1 (recv out of place), each
    // with guards either side; the send and recv pointers point into them as NCCL lays them out.
    std::vector<std::vector<std::byte>> mem0(p), mem1(p), want0(p), want1(p);
    std::vector<std::byte*> sendPtr(p), recvPtr(p);
    std::vector<const Schedule*> ptrs(p);
    std::vector<ExecBuffers> buffers(p);
    for (int32_t r = 0; r < p; ++r) {
      auto fill = [&](std::vector<std::byte>& m, int alloc, uint64_t bytes) {
        m.resize(bytes + 2 * kGuard);
        for (uint64_t b = 0; b < m.size(); ++b) m[b] = fillByte(r, alloc, b);
      };
      if (!c.inPlace) {
        fill(mem0[r], 0, sendBytes);
        fill(mem1[r], 1, recvBytes);
        sendPtr[r] = mem0[r].data() + kGuard;
        recvPtr[r] = mem1[r].data() + kGuard;
      } else {
        fill(mem0[r], 0, std::max(sendBytes, recvBytes));
        std::byte* base = mem0[r].data() + kGuard;
        sendPtr[r] = recvPtr[r] = base;
        if (kind == CollKind::AllGather || kind == CollKind::Gather) sendPtr[r] = base + r * blockBytes;
        if (kind == CollKind::ReduceScatter || kind == CollKind::Scatter) recvPtr[r] = base + r * blockBytes;
      }
      if (reduces(kind)) {
        for (uint64_t i = 0; i < sendBytes / std::max<uint64_t>(es, 1); ++i) {
          storeValue(c.dtype, sendPtr[r], i, inputValue(c.dtype, c.op, p, r, i));
        }
      } else {
        for (uint64_t b = 0; b < sendBytes; ++b) sendPtr[r][b] = dataByte(r, b);
      }
      want0[r] = mem0[r];
      want1[r] = mem1[r];
      CollArgs args;
      args.kind = kind;
      args.count = c.count;
      args.dtype = c.dtype;
      args.op = c.op;
      args.root = c.root;
      args.sendbuff = sendPtr[r];
      args.recvbuff = recvPtr[r];
      build(c.algo, world.topology(r), args, &schedules[r], world.options().windowHalfBytes);
      ptrs[r] = &schedules[r];
      buffers[r] = ExecBuffers{sendPtr[r], recvPtr[r]};
    }
    // What every rank's memory must hold afterwards: the inputs, plus the results where the
    // collective defines them.
    for (int32_t r = 0; r < p; ++r) {
      std::byte* w = (c.inPlace ? want0[r].data() : want1[r].data()) + kGuard +
                     (c.inPlace ? static_cast<uint64_t>(recvPtr[r] - (mem0[r].data() + kGuard)) : 0);
      switch (kind) {
        case CollKind::Broadcast:
          for (uint64_t b = 0; b < blockBytes; ++b) w[b] = dataByte(c.root, b);
          break;
        case CollKind::Reduce:
          if (r == c.root) {
            for (uint64_t i = 0; i < c.count; ++i) storeValue(c.dtype, w, i, expectedValue(c.dtype, c.op, p, i));
          }
          break;
        case CollKind::AllGather:
          for (int32_t j = 0; j < p; ++j) {
            for (uint64_t b = 0; b < blockBytes; ++b) w[j * blockBytes + b] = dataByte(j, b);
          }
          break;
        case CollKind::ReduceScatter:
          for (uint64_t i = 0; i < c.count; ++i) {
            storeValue(c.dtype, w, i, expectedValue(c.dtype, c.op, p, r * c.count + i));
          }
          break;
        case CollKind::AlltoAll:
          for (int32_t j = 0; j < p; ++j) {
            for (uint64_t b = 0; b < blockBytes; ++b) w[j * blockBytes + b] = dataByte(j, r * blockBytes + b);
          }
          break;
        case CollKind::Gather:
          if (r == c.root) {
            for (int32_t j = 0; j < p; ++j) {
              for (uint64_t b = 0; b < blockBytes; ++b) w[j * blockBytes + b] = dataByte(j, b);
            }
          }
          break;
        case CollKind::Scatter:
          for (uint64_t b = 0; b < blockBytes; ++b) w[b] = dataByte(c.root, r * blockBytes + b);
          break;
        default: FAIL();
      }
    }
    if (testing::Test::HasFatalFailure()) return;
    Status st = runInProcess(ptrs, buffers, world, ++seq);
    ASSERT_TRUE(st.ok()) << st.message();
    for (int32_t r = 0; r < p; ++r) {
      checkSame(mem0[r], want0[r], r, c.inPlace ? "buffer" : "send buffer", recvPtr[r] - mem0[r].data());
      checkSame(mem1[r], want1[r], r, "recv buffer", kGuard);
      if (testing::Test::HasFatalFailure()) return;
    }
  }

  static void checkSame(const std::vector<std::byte>& got, const std::vector<std::byte>& want, int r, const char* what,
                        int64_t recvStart) {
    if (got == want) return;
    size_t i = 0;
    while (got[i] == want[i]) ++i;
    FAIL() << "rank " << r << ": " << what << " differs at byte "
           << static_cast<int64_t>(i) - static_cast<int64_t>(kGuard)
           << " (guards are 16 bytes either side; recv starts at byte " << recvStart - static_cast<int64_t>(kGuard)
           << "): got " << static_cast<int>(got[i]) << ", want " << static_cast<int>(want[i]);
  }
};

std::vector<int32_t> rootsFor(CollKind kind, int32_t p) {
  if (!rooted(kind)) return {0};
  std::vector<int32_t> roots = {0};
  if (p / 2 != 0) roots.push_back(p / 2);
  if (p - 1 != 0 && p - 1 != p / 2) roots.push_back(p - 1);
  return roots;
}

TEST(CollectiveSchedules, DataMovingEveryType) {
  for (int32_t p : {1, 2, 3, 4, 5, 7, 8}) {
    Runner runner(p);
    for (const AlgoInfo& a : kAlgos) {
      if (reduces(a.kind)) continue;
      for (collDataType_t t : kAllTypes) {
        for (uint64_t count : {0, 1, 7, 1009}) {
          for (int32_t root : rootsFor(a.kind, p)) {
            for (bool inPlace : {false, true}) {
              runner.run(Case{a.algo, count, t, collSum, root, inPlace});
              if (testing::Test::HasFatalFailure()) return;
            }
          }
        }
      }
    }
  }
}

TEST(CollectiveSchedules, ReducingTypesAndOps) {
  for (int32_t p : {1, 2, 3, 4, 5, 7, 8}) {
    Runner runner(p);
    for (const AlgoInfo& a : kAlgos) {
      if (!reduces(a.kind)) continue;
      int n = 0;
      for (collDataType_t t : kReduceTypes) {
        for (collRedOp_t op : kOps) {
          // Every (type, op) pair at one size and root; the sizes and roots rotate through the pairs.
          const uint64_t counts[] = {0, 1, 7, 1009};
          std::vector<int32_t> roots = rootsFor(a.kind, p);
          ++n;
          for (bool inPlace : {false, true}) {
            runner.run(Case{a.algo, counts[n % 4], t, op, roots[n % roots.size()], inPlace});
            if (testing::Test::HasFatalFailure()) return;
          }
        }
      }
      // And every size and root for the common case.
      for (uint64_t count : {0, 1, 7, 1009}) {
        for (int32_t root : rootsFor(a.kind, p)) {
          for (bool inPlace : {false, true}) {
            runner.run(Case{a.algo, count, collFloat32, collSum, root, inPlace});
            runner.run(Case{a.algo, count, collInt32, collAvg, root, inPlace});
            if (testing::Test::HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

TEST(CollectiveSchedules, RingAndTreeAtMoreRanks) {
  const Algo algos[] = {Algo::RingBroadcast,     Algo::TreeBroadcast,       Algo::RingReduce,
                        Algo::TreeReduce,        Algo::RingAllGather,       Algo::BruckAllGather,
                        Algo::RingReduceScatter, Algo::DirectReduceScatter, Algo::DirectAllGather};
  for (int32_t p : {16, 64}) {
    Runner runner(p);
    for (Algo a : algos) {
      const CollKind kind = info(a).kind;
      for (uint64_t count : {1, 7, 1009}) {
        for (int32_t root : rootsFor(kind, p)) {
          for (bool inPlace : {false, true}) {
            runner.run(Case{a, count, reduces(kind) ? collFloat32 : collFloat16, collSum, root, inPlace});
            if (reduces(kind)) runner.run(Case{a, count, collInt64, collAvg, root, inPlace});
            if (testing::Test::HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

TEST(CollectiveSchedules, LargeMessagesStreamThroughTinyRings) {
  // Tiny rings and slices: every step wraps and waits for credit many times, so per-slice
  // dependencies (and the reduce-scatter's reuse of its scratch slots) are exercised.
  InProcessOptions o;
  o.ringBytes = 64;
  o.sliceBytes = 24;
  for (int32_t p : {2, 3, 5, 8}) {
    Runner runner(p, o);
    for (const AlgoInfo& a : kAlgos) {
      for (int32_t root : rootsFor(a.kind, p)) {
        runner.run(Case{a.algo, 3001, collFloat64, collSum, root, false});
        runner.run(Case{a.algo, 2999, collInt8, reduces(a.kind) ? collMax : collSum, root, true});
        if (testing::Test::HasFatalFailure()) return;
      }
    }
  }
  for (int32_t p : {3, 8}) {
    Runner runner(p);
    for (const AlgoInfo& a : kAlgos) {
      runner.run(Case{a.algo, 100003, collFloat32, collSum, p - 1, false});
      runner.run(Case{a.algo, 100003, collFloat32, collSum, p / 2, true});
      if (testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(CollectiveSchedules, ConsecutiveCallsMixAlgorithms) {
  Runner runner(5);
  for (int call = 0; call < 40; ++call) {
    const AlgoInfo& a = kAlgos[call % 10];
    collDataType_t t = reduces(a.kind) ? kReduceTypes[call % 10] : kAllTypes[call % 12];
    runner.run(Case{a.algo, static_cast<uint64_t>(call * 37 % 300), t, kOps[call % 5], call % 5, call % 3 == 0});
    if (testing::Test::HasFatalFailure()) return;
  }
}

// ---- direct reduce-scatter: rounds through windows smaller than the call

TEST(CollectiveSchedules, DirectReduceScatterRoundsAndWindowReuse) {
  for (int32_t p : {2, 3, 4, 5, 8, 13}) {
    // Regions of 256 bytes: a few hundred elements run as dozens of rounds through both buffers;
    // 40-byte slices publish markers and reductions in pieces; the two slots it needs, no more.
    InProcessOptions o;
    o.windowHalfBytes = 2 * static_cast<uint64_t>(p - 1) * 256;
    o.publishSlots = 2;
    o.sliceBytes = 40;
    o.ringBytes = 256;
    ASSERT_GT(directReduceScatterShape(4097, 4, o.windowHalfBytes, p).rounds, 16u);
    ASSERT_LE(directReduceScatterShape(4097, 4, o.windowHalfBytes, p).windowBytes, o.windowHalfBytes);
    Runner runner(p, o);
    // Back-to-back direct calls reuse each window half two calls later; ring calls in between
    // shift which half a call gets.
    int n = 0;
    for (uint64_t count : {0, 1, 63, 64, 65, 1000, 4097}) {
      for (bool inPlace : {false, true}) {
        ++n;
        runner.run(Case{Algo::DirectReduceScatter, count, collFloat32, collSum, 0, inPlace});
        runner.run(Case{Algo::DirectReduceScatter, count + 3, collInt32, collAvg, 0, !inPlace});
        runner.run(Case{Algo::DirectReduceScatter, count, kReduceTypes[n % 10], kOps[n % 5], 0, inPlace});
        if (n % 3 == 0) runner.run(Case{Algo::RingReduceScatter, count, collFloat64, collSum, 0, inPlace});
        runner.run(Case{Algo::DirectReduceScatter, count * 2 + 1, collInt8, collMax, 0, inPlace});
        if (testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

TEST(CollectiveSchedules, DirectReduceScatterShapes) {
  // Count 0 moves nothing; one round uses one buffer sized to the call; more rounds split the
  // block evenly (no short last round beyond rounding) and fit the window half.
  EXPECT_EQ(directReduceScatterShape(0, 4, 1 << 20, 4).rounds, 0u);
  DirectReduceScatterShape one = directReduceScatterShape(1000, 4, 1 << 20, 4);
  EXPECT_EQ(one.rounds, 1u);
  EXPECT_EQ(one.buffers, 1);
  EXPECT_EQ(one.windowBytes, 3u * 4000);
  for (int32_t l : {2, 3, 4, 8, 64}) {
    for (uint64_t count : {1ull, 1000ull, 1048576ull, 10000019ull}) {
      for (uint64_t es : {1ull, 2ull, 4ull, 8ull}) {
        const uint64_t half = 4ull << 20;
        DirectReduceScatterShape sh = directReduceScatterShape(count, es, half, l);
        ASSERT_GE(sh.rounds * sh.roundElems, count);
        ASSERT_LT((sh.rounds - 1) * sh.roundElems, count);
        ASSERT_GE(sh.regionBytes, sh.roundElems * es);
        ASSERT_LE(sh.windowBytes, half) << "l=" << l << " count=" << count << " es=" << es;
        if (sh.rounds > 1) {
          ASSERT_EQ(sh.regionBytes % 64, 0u);
        }
      }
    }
  }
  // An empty schedule for count 0 (nothing published, no window), and a self copy alone.
  Schedule s;
  CollArgs args;
  args.kind = CollKind::ReduceScatter;
  args.count = 0;
  DirectOptions o;
  o.windowHalfBytes = 1 << 20;
  buildDirectReduceScatter(Topology::uniform(1, 4, 4), args, o, &s);
  EXPECT_TRUE(s.steps.empty());
  EXPECT_FALSE(s.usesWindows);
  args.count = 5;
  buildDirectReduceScatter(Topology::uniform(0, 1, 1), args, o, &s);
  ASSERT_EQ(s.steps.size(), 1u);
  EXPECT_EQ(s.steps[0].kind, StepKind::Copy);
}

// ---- direct all-gather: rounds through windows smaller than the call

TEST(CollectiveSchedules, DirectAllGatherRoundsAndWindowReuse) {
  for (int32_t p : {2, 3, 4, 5, 8, 13}) {
    // Buffers of 128 bytes: a few hundred elements run as dozens of rounds through both buffers;
    // 40-byte slices publish markers and copies in pieces; the two slots it needs, no more.
    InProcessOptions o;
    o.windowHalfBytes = 256;
    o.publishSlots = 2;
    o.sliceBytes = 40;
    o.ringBytes = 256;
    ASSERT_GT(directAllGatherShape(4097, 4, o.windowHalfBytes).rounds, 16u);
    ASSERT_LE(directAllGatherShape(4097, 4, o.windowHalfBytes).windowBytes, o.windowHalfBytes);
    Runner runner(p, o);
    // Back-to-back direct calls reuse each window half two calls later; ring and direct
    // reduce-scatter calls in between shift which half a call gets and what it held.
    int n = 0;
    for (uint64_t count : {0, 1, 31, 32, 33, 64, 65, 1000, 4097}) {
      for (bool inPlace : {false, true}) {
        ++n;
        runner.run(Case{Algo::DirectAllGather, count, collFloat32, collSum, 0, inPlace});
        runner.run(Case{Algo::DirectAllGather, count + 3, collInt32, collSum, 0, !inPlace});
        runner.run(Case{Algo::DirectAllGather, count, kAllTypes[n % 12], collSum, 0, inPlace});
        if (n % 3 == 0) runner.run(Case{Algo::RingAllGather, count, collFloat64, collSum, 0, inPlace});
        if (n % 4 == 1 && count * 4 <= 256)
          runner.run(Case{Algo::DirectReduceScatter, count, collFloat32, collSum, 0, inPlace});
        runner.run(Case{Algo::DirectAllGather, count * 2 + 1, collInt8, collSum, 0, inPlace});
        if (testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

TEST(CollectiveSchedules, DirectAllGatherShapes) {
  // Count 0 moves nothing; a call that fits the window half is one round in one buffer sized to
  // the call; more rounds split the block evenly and fit two buffers into the window half.
  EXPECT_EQ(directAllGatherShape(0, 4, 1 << 20).rounds, 0u);
  DirectAllGatherShape one = directAllGatherShape(1000, 4, 4000);
  EXPECT_EQ(one.rounds, 1u);
  EXPECT_EQ(one.buffers, 1);
  EXPECT_EQ(one.windowBytes, 4000u);
  EXPECT_EQ(directAllGatherShape(1001, 4, 4000).buffers, 2);
  for (uint64_t half : {128ull, 1000ull, 4ull << 20}) {
    for (uint64_t count : {1ull, 1000ull, 1048576ull, 10000019ull}) {
      for (uint64_t es : {1ull, 2ull, 4ull, 8ull}) {
        DirectAllGatherShape sh = directAllGatherShape(count, es, half);
        ASSERT_GE(sh.rounds * sh.roundElems, count);
        ASSERT_LT((sh.rounds - 1) * sh.roundElems, count);
        ASSERT_GE(sh.regionBytes, sh.roundElems * es);
        ASSERT_LE(sh.windowBytes, half) << "half=" << half << " count=" << count << " es=" << es;
        if (sh.rounds > 1 && sh.regionBytes >= 256) {
          ASSERT_EQ(sh.regionBytes % 64, 0u);
        }
      }
    }
  }
  // An empty schedule for count 0 (nothing published, no window), and a self copy alone.
  Schedule s;
  CollArgs args;
  args.kind = CollKind::AllGather;
  args.count = 0;
  DirectOptions o;
  o.windowHalfBytes = 1 << 20;
  buildDirectAllGather(Topology::uniform(1, 4, 4), args, o, &s);
  EXPECT_TRUE(s.steps.empty());
  EXPECT_FALSE(s.usesWindows);
  args.count = 5;
  buildDirectAllGather(Topology::uniform(0, 1, 1), args, o, &s);
  ASSERT_EQ(s.steps.size(), 1u);
  EXPECT_EQ(s.steps[0].kind, StepKind::Copy);
  // One round at 4 ranks: the own copy, the gate, the copy in, the marker, three reads.
  args.count = 1000;
  buildDirectAllGather(Topology::uniform(2, 4, 4), args, o, &s);
  EXPECT_EQ(s.steps.size(), 7u);
  EXPECT_EQ(s.windowBytes, 1000u * dataTypeSize(args.dtype));
}

TEST(CollectiveSchedules, DirectReduceScatterFloat8) {
  // float8 sums of a few small values are exact in the float32 accumulator and rounded once, so
  // the result is the reference reduction in the algorithm's order, bit for bit.
  for (collDataType_t t : {collFloat8e4m3, collFloat8e5m2}) {
    for (int32_t p : {2, 3, 5}) {
      InProcessOptions o;
      o.windowHalfBytes = 2 * static_cast<uint64_t>(p - 1) * 128;
      o.sliceBytes = 24;
      InProcessWorld world(p, p, o);
      const uint64_t count = 777;
      std::vector<std::vector<uint8_t>> send(p, std::vector<uint8_t>(p * count)), recv(p, std::vector<uint8_t>(count));
      for (int32_t r = 0; r < p; ++r) {
        for (uint64_t i = 0; i < p * count; ++i) {
          const float v = static_cast<float>(static_cast<int>((r * 13 + i * 7) % 17) - 8) / 4.0f;
          send[r][i] = t == collFloat8e4m3 ? kernels::floatToFp8e4m3(v) : kernels::floatToFp8e5m2(v);
        }
      }
      // Schedules outlive their calls (an Execution keeps what it prepared for a schedule).
      std::vector<Schedule> s(p);
      uint64_t seq = 0;
      for (collRedOp_t op : {collSum, collMax, collAvg}) {
        std::vector<const Schedule*> sp(p);
        std::vector<ExecBuffers> eb(p);
        for (int32_t r = 0; r < p; ++r) {
          CollArgs args;
          args.kind = CollKind::ReduceScatter;
          args.count = count;
          args.dtype = t;
          args.op = op;
          DirectOptions d;
          d.windowHalfBytes = o.windowHalfBytes;
          buildDirectReduceScatter(world.topology(r), args, d, &s[r]);
          sp[r] = &s[r];
          eb[r] = ExecBuffers{send[r].data(), recv[r].data()};
        }
        Status st = runInProcess(sp, eb, world, ++seq);
        ASSERT_TRUE(st.ok()) << st.message();
        for (int32_t r = 0; r < p; ++r) {
          // Own block first, then the peers in rank order.
          std::vector<const void*> srcs = {send[r].data() + r * count};
          for (int32_t j = 0; j < p; ++j) {
            if (j != r) srcs.push_back(send[j].data() + r * count);
          }
          std::vector<uint8_t> want(count);
          kernels::reduceN(want.data(), srcs.data(), p, count, t, op == collAvg ? collSum : op);
          if (op == collAvg) kernels::divide(want.data(), want.data(), count, t, static_cast<uint64_t>(p));
          ASSERT_EQ(recv[r], want) << "dtype " << t << " op " << op << " p=" << p << " rank " << r;
        }
      }
    }
  }
}

TEST(CollectiveSchedules, PlansDoNotDependOnPointers) {
  std::vector<std::byte> a(4096), b(4096);
  for (int32_t p : {1, 2, 5}) {
    for (const AlgoInfo& info : kAlgos) {
      for (int32_t r = 0; r < p; ++r) {
        Schedule s[2];
        for (int k = 0; k < 2; ++k) {
          CollArgs args;
          args.kind = info.kind;
          args.count = 11;
          args.op = collAvg;
          args.root = p - 1;
          args.sendbuff = a.data();
          args.recvbuff = k == 0 ? a.data() : b.data();
          build(info.algo, Topology::uniform(r, p, p), args, &s[k]);
        }
        ASSERT_EQ(s[0].steps.size(), s[1].steps.size()) << info.name;
        ASSERT_EQ(s[0].deps.size(), s[1].deps.size()) << info.name;
        EXPECT_EQ(s[0].scratchBytes, s[1].scratchBytes);
        EXPECT_EQ(s[0].op, collSum) << info.name;
        for (size_t i = 0; i < s[0].steps.size(); ++i) {
          EXPECT_EQ(s[0].steps[i].kind, s[1].steps[i].kind);
          EXPECT_EQ(s[0].steps[i].count, s[1].steps[i].count);
          EXPECT_EQ(s[0].steps[i].peer, s[1].steps[i].peer);
          EXPECT_EQ(s[0].steps[i].src.offset, s[1].steps[i].src.offset);
          EXPECT_EQ(s[0].steps[i].dst.offset, s[1].steps[i].dst.offset);
        }
      }
    }
  }
}

// ---- point-to-point batches

struct P2pWorld {
  explicit P2pWorld(int32_t p) : world(p, p), schedules(p), ops(p), bufs(p), ptrs(p) {}
  InProcessWorld world;
  std::vector<Schedule> schedules;
  std::vector<std::vector<P2pOp>> ops;
  std::vector<std::vector<std::vector<uint8_t>>> bufs;  // per rank, per op
  std::vector<std::vector<void*>> ptrs;
  uint64_t seq = 0;

  // Message number n from `from` to `to`: its bytes say who sent it and which it is.
  static uint8_t msgByte(int from, int to, int n, uint64_t b) {
    return static_cast<uint8_t>(from * 7 + to * 3 + n * 11 + b);
  }

  void add(int32_t r, bool send, int32_t peer, uint64_t bytes, int n) {
    ops[r].push_back(P2pOp{send, peer, bytes});
    std::vector<uint8_t> buf(bytes + kGuard, 0xee);
    if (send) {
      for (uint64_t b = 0; b < bytes; ++b) buf[b] = msgByte(r, peer, n, b);
    }
    bufs[r].push_back(std::move(buf));
    tags.push_back({r, static_cast<int>(ops[r].size() - 1), n});
  }
  struct Tag {
    int32_t rank;
    int op;
    int n;
  };
  std::vector<Tag> tags;

  void runAndCheck() {
    const int32_t p = world.nranks();
    std::vector<const Schedule*> sp(p);
    std::vector<ExecBuffers> eb(p);
    for (int32_t r = 0; r < p; ++r) {
      buildP2pBatch(world.topology(r), ops[r].data(), ops[r].size(), &schedules[r]);
      ptrs[r].clear();
      for (auto& b : bufs[r]) ptrs[r].push_back(b.data());
      sp[r] = &schedules[r];
      eb[r] = ExecBuffers{nullptr, nullptr, ptrs[r].data(), ptrs[r].size()};
      EXPECT_EQ(schedules[r].dtype, collUint8);
    }
    Status st = runInProcess(sp, eb, world, ++seq);
    ASSERT_TRUE(st.ok()) << st.message();
    for (const Tag& t : tags) {
      const P2pOp& op = ops[t.rank][t.op];
      const auto& buf = bufs[t.rank][t.op];
      const int from = op.send ? t.rank : op.peer, to = op.send ? op.peer : t.rank;
      for (uint64_t b = 0; b < op.bytes; ++b) {
        ASSERT_EQ(buf[b], msgByte(from, to, t.n, b)) << "rank " << t.rank << " op " << t.op << " byte " << b;
      }
      for (uint64_t b = op.bytes; b < buf.size(); ++b) ASSERT_EQ(buf[b], 0xee) << "rank " << t.rank << " guard";
    }
  }
};

TEST(CollectiveSchedules, P2pRingExchange) {
  for (int32_t p : {1, 2, 3, 8}) {
    P2pWorld w(p);
    // Several messages to one peer in one batch, receives issued before or after the sends.
    const uint64_t sizes[] = {5, 0, 3001, 64};
    for (int32_t r = 0; r < p; ++r) {
      const int32_t right = (r + 1) % p, left = (r - 1 + p) % p;
      for (int n = 0; n < 4; ++n) {
        if (r % 2 == 0) {
          w.add(r, true, right, sizes[n], n);
          w.add(r, false, left, sizes[n], n);
        } else {
          w.add(r, false, left, sizes[n], n);
          w.add(r, true, right, sizes[n], n);
        }
      }
    }
    w.runAndCheck();
    if (testing::Test::HasFatalFailure()) return;
  }
}

TEST(CollectiveSchedules, P2pAllToAllOfSendsAndReceives) {
  for (int32_t p : {2, 5, 7}) {
    P2pWorld w(p);
    for (int32_t r = 0; r < p; ++r) {
      // Receives first, then sends, each rank in its own peer order: only the per-peer stream
      // order has to agree.
      for (int32_t k = 0; k < p; ++k) {
        const int32_t from = (r + p - k) % p;
        for (int n = 0; n < 2; ++n) w.add(r, false, from, 100 + from * 10 + r + n * 900, n);
      }
      for (int32_t k = 0; k < p; ++k) {
        const int32_t to = (r + k + 1) % p;
        for (int n = 0; n < 2; ++n) w.add(r, true, to, 100 + r * 10 + to + n * 900, n);
      }
    }
    w.runAndCheck();
    if (testing::Test::HasFatalFailure()) return;
  }
}

// ---- barrier

TEST(CollectiveSchedules, BarrierCompletes) {
  for (int32_t p : {1, 2, 3, 4, 5, 7, 8, 16, 64}) {
    InProcessWorld world(p, p);
    std::vector<Schedule> s(p);
    std::vector<const Schedule*> sp(p);
    std::vector<ExecBuffers> eb(p);
    for (int32_t r = 0; r < p; ++r) {
      buildDisseminationBarrier(world.topology(r), &s[r]);
      sp[r] = &s[r];
      int32_t rounds = 0;
      while ((1 << rounds) < p) ++rounds;
      ASSERT_EQ(s[r].steps.size(), 2u * rounds) << "p=" << p;
    }
    for (uint64_t seq = 1; seq <= 3; ++seq) {
      Status st = runInProcess(sp, eb, world, seq);
      ASSERT_TRUE(st.ok()) << "p=" << p << ": " << st.message();
    }
  }
}

TEST(CollectiveSchedules, BarrierWaitsForEveryRank) {
  for (int32_t p : {2, 3, 5, 8, 13}) {
    for (int32_t withheld : {0, p - 1, p / 2}) {
      InProcessWorld world(p, p);
      std::vector<Schedule> s(p);
      for (int32_t r = 0; r < p; ++r) buildDisseminationBarrier(world.topology(r), &s[r]);
      std::vector<bool> done(p, false), started(p, false);
      auto pollAll = [&]() {
        for (int round = 0; round < 4 * p + 8; ++round) {
          for (int32_t r = 0; r < p; ++r) {
            if (done[r] || !started[r]) continue;
            bool d = false, progressed = false;
            Status st = world.execution(r).poll(&d, &progressed);
            ASSERT_TRUE(st.ok()) << st.message();
            if (d) done[r] = true;
          }
        }
      };
      for (int32_t r = 0; r < p; ++r) {
        if (r == withheld) continue;
        ASSERT_TRUE(world.execution(r).start(s[r], ExecBuffers{}, world.links(r), 1).ok());
        started[r] = true;
      }
      pollAll();
      if (testing::Test::HasFatalFailure()) return;
      // Nobody may leave while one rank has not arrived.
      for (int32_t r = 0; r < p; ++r) {
        EXPECT_FALSE(done[r]) << "p=" << p << " withheld=" << withheld << ": rank " << r << " left the barrier early";
      }
      ASSERT_TRUE(world.execution(withheld).start(s[withheld], ExecBuffers{}, world.links(withheld), 1).ok());
      started[withheld] = true;
      pollAll();
      for (int32_t r = 0; r < p; ++r) EXPECT_TRUE(done[r]) << "p=" << p << " rank " << r << " never left";
    }
  }
}

// ---- structure at scale

uint64_t bufferBytes(BufKind k, CollKind kind, int32_t p, int32_t r, int32_t root, uint64_t blockBytes,
                     const Schedule& s) {
  switch (k) {
    case BufKind::Send:
      if (kind == CollKind::Scatter && r != root) return 0;
      if (kind == CollKind::Broadcast && r != root) return 0;
      return sendElems(kind, p, 1) * blockBytes;
    case BufKind::Recv:
      if ((kind == CollKind::Reduce || kind == CollKind::Gather) && r != root) return 0;
      return recvElems(kind, p, 1) * blockBytes;
    case BufKind::Scratch: return s.scratchBytes;
    default: return 0;
  }
}

// Builds every rank's schedule at `p` ranks and checks: peers in range and not the rank itself,
// every buffer range inside its buffer (and none the collective leaves to the root), every
// pair's send stream matching the receive stream step by step, and the bytes each rank moves.
void checkStructure(int32_t p, Algo algo, uint64_t count) {
  const CollKind kind = info(algo).kind;
  const int32_t root = p / 3;
  const uint64_t es = 4, blockBytes = count * es;
  SCOPED_TRACE(std::string(info(algo).name) + " p=" + std::to_string(p));
  // (from, to, position in that stream, bytes)
  std::vector<std::tuple<int32_t, int32_t, int32_t, uint64_t>> sends, recvs;
  std::vector<int32_t> sentSeen, recvSeen;
  uint64_t totalSent = 0;
  Schedule s;
  for (int32_t r = 0; r < p; ++r) {
    CollArgs args;
    args.kind = kind;
    args.count = count;
    args.dtype = collFloat32;
    args.op = collAvg;
    args.root = root;
    build(algo, Topology::uniform(r, p, p), args, &s);
    ASSERT_NE(s.op, collAvg);
    sentSeen.assign(p, 0);
    recvSeen.assign(p, 0);
    uint64_t sent = 0, received = 0;
    for (size_t i = 0; i < s.steps.size(); ++i) {
      const Step& st = s.steps[i];
      for (uint32_t d = st.depBegin; d < st.depBegin + st.ndeps; ++d) {
        ASSERT_LT(s.deps[d].step, static_cast<int32_t>(s.steps.size()));
        ASSERT_GE(s.deps[d].step, 0);
      }
      const uint64_t bytes = st.count * es;
      const bool readsSrc = st.kind != StepKind::Recv && st.kind != StepKind::Reduce;
      const bool writesDst = st.kind != StepKind::Send;
      if (readsSrc) {
        ASSERT_LE(st.src.offset + bytes, bufferBytes(st.src.kind, kind, p, r, root, blockBytes, s)) << "step " << i;
      }
      if (writesDst) {
        ASSERT_LE(st.dst.offset + bytes, bufferBytes(st.dst.kind, kind, p, r, root, blockBytes, s)) << "step " << i;
      }
      if (st.kind == StepKind::Send || st.kind == StepKind::Recv || st.kind == StepKind::RecvReduce) {
        ASSERT_GE(st.peer, 0);
        ASSERT_LT(st.peer, p);
        ASSERT_NE(st.peer, r);
        ASSERT_NE(std::find(s.peers.begin(), s.peers.end(), st.peer), s.peers.end());
        if (st.count == 0) continue;
        if (st.kind == StepKind::Send) {
          sends.emplace_back(r, st.peer, sentSeen[st.peer]++, bytes);
          sent += bytes;
        } else {
          recvs.emplace_back(st.peer, r, recvSeen[st.peer]++, bytes);
          received += bytes;
        }
      }
    }
    // Bytes per rank where every rank moves the same.
    const uint64_t all = static_cast<uint64_t>(p - 1) * blockBytes;
    switch (kind) {
      case CollKind::AllGather:
      case CollKind::ReduceScatter:
      case CollKind::AlltoAll:
        EXPECT_EQ(sent, all) << "rank " << r;
        EXPECT_EQ(received, all) << "rank " << r;
        break;
      case CollKind::Broadcast: EXPECT_EQ(received, r == root ? 0 : blockBytes) << "rank " << r; break;
      case CollKind::Reduce: EXPECT_EQ(sent, r == root ? 0 : blockBytes) << "rank " << r; break;
      case CollKind::Gather:
        EXPECT_EQ(sent, r == root ? 0 : blockBytes);
        EXPECT_EQ(received, r == root ? all : 0);
        break;
      case CollKind::Scatter:
        EXPECT_EQ(received, r == root ? 0 : blockBytes);
        EXPECT_EQ(sent, r == root ? all : 0);
        break;
      default: break;
    }
    totalSent += sent;
    if (testing::Test::HasFatalFailure()) return;
  }
  const uint64_t perRankKinds = static_cast<uint64_t>(p) * (p - 1) * blockBytes;
  const bool everyone = kind == CollKind::AllGather || kind == CollKind::ReduceScatter || kind == CollKind::AlltoAll;
  EXPECT_EQ(totalSent, everyone ? perRankKinds : static_cast<uint64_t>(p - 1) * blockBytes);
  std::sort(sends.begin(), sends.end());
  std::sort(recvs.begin(), recvs.end());
  ASSERT_EQ(sends.size(), recvs.size());
  for (size_t i = 0; i < sends.size(); ++i) {
    ASSERT_EQ(sends[i], recvs[i]) << "stream " << std::get<0>(sends[i]) << "->" << std::get<1>(sends[i]) << " step "
                                  << std::get<2>(sends[i]);
  }
}

TEST(CollectiveSchedules, StructureAt1024Ranks) {
  for (int32_t p : {1024, 1000}) {
    for (const AlgoInfo& a : kAlgos) {
      // One all-to-all (a million streams) is enough.
      if (p != 1024 && a.algo == Algo::PairwiseAlltoAll) continue;
      // Window algorithms move nothing over streams (their rounds are checked by running them).
      if (a.algo == Algo::DirectReduceScatter || a.algo == Algo::DirectAllGather) continue;
      checkStructure(p, a.algo, 3);
      if (testing::Test::HasFatalFailure()) return;
    }
    // Barrier: ceil(log2 p) rounds, one token each way per round, streams matching.
    std::vector<std::tuple<int32_t, int32_t, uint64_t>> sends, recvs;
    Schedule s;
    for (int32_t r = 0; r < p; ++r) {
      buildDisseminationBarrier(Topology::uniform(r, p, p), &s);
      ASSERT_EQ(s.steps.size(), 20u);
      for (const Step& st : s.steps) {
        ASSERT_TRUE(st.peer >= 0 && st.peer < p && st.peer != r);
        ASSERT_LE((st.kind == StepKind::Send ? st.src : st.dst).offset + 8, s.scratchBytes);
        if (st.kind == StepKind::Send) sends.emplace_back(r, st.peer, st.count);
        else recvs.emplace_back(st.peer, r, st.count);
      }
    }
    std::sort(sends.begin(), sends.end());
    std::sort(recvs.begin(), recvs.end());
    ASSERT_EQ(sends, recvs);
  }
}

TEST(CollectiveSchedulesExtended, EveryBuilderAt1024Ranks) {
  // Rings of 64 bytes keep the all-to-all's million connections small.
  InProcessOptions o;
  o.ringBytes = 64;
  Runner runner(1024, o);
  int n = 0;
  for (const AlgoInfo& a : kAlgos) {
    ++n;
    const uint64_t count = 1 + n % 3;
    runner.run(Case{a.algo, count, collFloat32, collSum, 1024 / 3, n % 2 == 0});
    if (reduces(a.kind))
      runner.run(Case{a.algo, static_cast<uint64_t>(3 - n % 3), collInt32, collAvg, 1023, n % 2 == 1});
    if (testing::Test::HasFatalFailure()) return;
  }
  P2pWorld w(1024);
  for (int32_t r = 0; r < 1024; ++r) {
    w.add(r, true, (r + 1) % 1024, 3, 0);
    w.add(r, false, (r + 1023) % 1024, 3, 0);
  }
  w.runAndCheck();
  InProcessWorld world(1024, 1024, o);
  std::vector<Schedule> s(1024);
  std::vector<const Schedule*> sp(1024);
  for (int32_t r = 0; r < 1024; ++r) {
    buildDisseminationBarrier(world.topology(r), &s[r]);
    sp[r] = &s[r];
  }
  Status st = runInProcess(sp, std::vector<ExecBuffers>(1024), world, 1);
  ASSERT_TRUE(st.ok()) << st.message();
}

}  // namespace
}  // namespace coll
