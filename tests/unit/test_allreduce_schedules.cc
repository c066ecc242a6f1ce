// Ring and direct All-Reduce schedules run through the in-process executor: exact results for
// every dtype and op, many rank counts and sizes, in place and out of place, consecutive calls.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/algorithms.h"
#include "src/exec/inprocess.h"
#include "src/kernels/reduce.h"
#include "tests/unit/schedule_test_data.h"

namespace coll {
namespace {

enum class Algo { Ring, DirectSmall, DirectSliced };

const char* algoName(Algo a) {
  switch (a) {
    case Algo::Ring: return "ring";
    case Algo::DirectSmall: return "direct-small";
    case Algo::DirectSliced: return "direct-sliced";
  }
  return "?";
}

using testutil::expectedValue;
using testutil::inputValue;
using testutil::isFloat;
using testutil::isUnsigned;
using testutil::storeValue;
constexpr auto& kTypes = testutil::kExactReduceTypes;
constexpr auto& kOps = testutil::kBuiltinOps;

struct Runner {
  Runner(int32_t nranks, InProcessOptions options = {}) : world(nranks, nranks, options), schedules(nranks) {}
  InProcessWorld world;
  std::vector<Schedule> schedules;
  uint64_t seq = 0;

  // One call on every rank; checks every rank's result bit for bit (and untouched inputs).
  void run(Algo algo, uint64_t count, collDataType_t t, collRedOp_t op, bool inPlace) {
    const int32_t p = world.nranks();
    const size_t es = dataTypeSize(t);
    SCOPED_TRACE(std::string(algoName(algo)) + " p=" + std::to_string(p) + " count=" + std::to_string(count) +
                 " dtype=" + std::to_string(t) + " op=" + std::to_string(op) + (inPlace ? " in-place" : ""));
    std::vector<std::vector<std::byte>> send(p), recv(p);
    std::vector<const Schedule*> ptrs(p);
    std::vector<ExecBuffers> buffers(p);
    for (int32_t r = 0; r < p; ++r) {
      send[r].resize(count * es + 1);
      recv[r].assign(count * es + 1, std::byte{0x5a});
      for (uint64_t i = 0; i < count; ++i) storeValue(t, send[r].data(), i, inputValue(t, op, p, r, i));
      if (inPlace) memcpy(recv[r].data(), send[r].data(), count * es);
      CollArgs args;
      args.count = count;
      args.dtype = t;
      args.op = op;
      args.recvbuff = recv[r].data();
      args.sendbuff = inPlace ? recv[r].data() : send[r].data();
      Topology topo = world.topology(r);
      if (algo == Algo::Ring) {
        buildRingAllReduce(topo, args, &schedules[r]);
      } else {
        DirectOptions d;
        d.windowHalfBytes = world.options().windowHalfBytes;
        d.reduceAllBelowBytes = algo == Algo::DirectSmall ? UINT64_MAX : 0;
        ASSERT_LE(count * es, directMaxBytes(d.windowHalfBytes, topo.localSize()));
        buildDirectAllReduce(topo, args, d, &schedules[r]);
        ASSERT_LE(schedules[r].windowBytes, d.windowHalfBytes);
      }
      ptrs[r] = &schedules[r];
      buffers[r] = ExecBuffers{args.sendbuff, args.recvbuff};
    }
    Status st = runInProcess(ptrs, buffers, world, ++seq);
    ASSERT_TRUE(st.ok()) << st.message();
    std::vector<std::byte> expected(count * es);
    for (uint64_t i = 0; i < count; ++i) storeValue(t, expected.data(), i, expectedValue(t, op, p, i));
    for (int32_t r = 0; r < p; ++r) {
      if (count > 0) {
        ASSERT_EQ(0, memcmp(recv[r].data(), expected.data(), count * es))
            << "rank " << r << " first mismatch at element " << firstMismatch(recv[r], expected, es);
      }
      ASSERT_EQ(recv[r][count * es], std::byte{0x5a}) << "rank " << r << " wrote past the end of recv";
      if (!inPlace) {
        for (uint64_t i = 0; i < std::min<uint64_t>(count, 64); ++i) {
          std::vector<std::byte> v(es);
          storeValue(t, v.data(), 0, inputValue(t, op, p, r, i));
          ASSERT_EQ(0, memcmp(send[r].data() + i * es, v.data(), es)) << "rank " << r << " send buffer modified";
        }
      }
    }
  }

  static size_t firstMismatch(const std::vector<std::byte>& a, const std::vector<std::byte>& b, size_t es) {
    for (size_t i = 0; i < b.size(); ++i) {
      if (a[i] != b[i]) return i / es;
    }
    return b.size();
  }
};

InProcessOptions directOptions() {
  InProcessOptions o;
  o.windowHalfBytes = 1 << 20;
  return o;
}

TEST(AllReduceSchedules, EveryTypeAndOp) {
  for (int32_t p : {1, 2, 3, 5, 8}) {
    Runner runner(p, directOptions());
    for (Algo algo : {Algo::Ring, Algo::DirectSmall, Algo::DirectSliced}) {
      for (collDataType_t t : kTypes) {
        for (collRedOp_t op : kOps) {
          for (uint64_t count : {0, 1, 7, 1009}) {
            for (bool inPlace : {false, true}) {
              runner.run(algo, count, t, op, inPlace);
              if (testing::Test::HasFatalFailure()) return;
            }
          }
        }
      }
    }
  }
}

TEST(AllReduceSchedules, ManyRankCounts) {
  for (int32_t p : {1, 2, 3, 4, 5, 7, 8, 13, 16, 31, 64}) {
    Runner runner(p, directOptions());
    for (uint64_t count : {0, 1, 7, 1009, 100003}) {
      for (bool inPlace : {false, true}) {
        runner.run(Algo::Ring, count, collFloat32, collSum, inPlace);
        if (count <= 1009) runner.run(Algo::Ring, count, collInt32, collAvg, inPlace);
        if (p <= 16) {
          runner.run(Algo::DirectSliced, count, collFloat32, collSum, inPlace);
          runner.run(Algo::DirectSmall, count, collFloat32, collSum, inPlace);
          if (count <= 1009) runner.run(Algo::DirectSliced, count, collBfloat16, collAvg, inPlace);
        }
        if (testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

TEST(AllReduceSchedules, ConsecutiveCallsReuseWindows) {
  for (int32_t p : {2, 5, 16}) {
    Runner runner(p, directOptions());
    const uint64_t counts[] = {1009, 3, 100003, 0, 64, 7, 5000};
    const Algo algos[] = {Algo::DirectSliced, Algo::Ring, Algo::DirectSmall};
    for (int call = 0; call < 21; ++call) {
      collDataType_t t = kTypes[call % 10];
      collRedOp_t op = kOps[call % 5];
      runner.run(algos[call % 3], counts[call % 7], t, op, call % 2 == 0);
      if (testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(AllReduceSchedules, SkewedRanksRespectWindowReuse) {
  // Rank 0 is polled far more often than the others and starts each call as soon as it finished
  // the previous one. Data dependencies alone keep it within one call of its peers, except across
  // an empty call: then it runs ahead into the window half its peers may still read, and only the
  // lag-2 call dependencies keep results intact.
  const int32_t p = 4;
  const int calls = 13;
  const uint64_t fullCount = 1009;
  InProcessWorld world(p, p, directOptions());
  std::vector<std::vector<Schedule>> sched(calls, std::vector<Schedule>(p));
  std::vector<std::vector<std::vector<float>>> in(calls), out(calls);
  // S = direct small, L = direct sliced, R = ring; lower case = an empty call.
  const char plan[calls + 1] = "SrLsSlSrRSrSL";
  for (int c = 0; c < calls; ++c) {
    const char a = static_cast<char>(toupper(plan[c]));
    const uint64_t count = islower(plan[c]) ? 0 : fullCount;
    in[c].assign(p, std::vector<float>(count));
    out[c].assign(p, std::vector<float>(count, -1.0f));
    for (int32_t r = 0; r < p; ++r) {
      for (uint64_t i = 0; i < count; ++i) in[c][r][i] = static_cast<float>((i + r + c) % 7);
      CollArgs args;
      args.count = count;
      args.sendbuff = in[c][r].data();
      args.recvbuff = out[c][r].data();
      if (a == 'R') {
        buildRingAllReduce(world.topology(r), args, &sched[c][r]);
      } else {
        DirectOptions d{world.options().windowHalfBytes, a == 'S' ? UINT64_MAX : 0};
        buildDirectAllReduce(world.topology(r), args, d, &sched[c][r]);
      }
    }
  }
  std::vector<int> call(p, -1);
  std::vector<bool> running(p, false);
  int finished = 0;
  while (finished < p) {
    bool any = false;
    for (int32_t r = 0; r < p; ++r) {
      for (int k = 0; k < (r == 0 ? 16 : 1); ++k) {
        if (!running[r]) {
          if (call[r] + 1 == calls) break;
          ++call[r];
          Status st =
              world.execution(r).start(sched[call[r]][r], ExecBuffers{in[call[r]][r].data(), out[call[r]][r].data()},
                                       world.links(r), call[r] + 1);
          ASSERT_TRUE(st.ok()) << st.message();
          running[r] = true;
          any = true;
        }
        bool done = false, progressed = false;
        Status st = world.execution(r).poll(&done, &progressed);
        ASSERT_TRUE(st.ok()) << st.message();
        any |= progressed;
        if (done) {
          running[r] = false;
          any = true;
          if (call[r] + 1 == calls) ++finished;
        }
      }
    }
    ASSERT_TRUE(any) << "deadlock; rank 0 at call " << call[0] << ":\n" << world.execution(0).describePending();
  }
  for (int c = 0; c < calls; ++c) {
    for (uint64_t i = 0; i < in[c][0].size(); ++i) {
      float expected = 0;
      for (int32_t r = 0; r < p; ++r) expected += static_cast<float>((i + r + c) % 7);
      for (int32_t r = 0; r < p; ++r) ASSERT_EQ(out[c][r][i], expected) << "call " << c << " rank " << r;
    }
  }
}

TEST(AllReduceSchedules, SmallRingBuffersAndSlices) {
  // Tiny rings and slices: every step wraps and waits for credit many times.
  InProcessOptions o = directOptions();
  o.ringBytes = 64;
  o.sliceBytes = 24;
  for (int32_t p : {2, 3, 7}) {
    Runner runner(p, o);
    for (collDataType_t t : {collInt8, collFloat16, collFloat64}) {
      runner.run(Algo::Ring, 1009, t, collSum, false);
      runner.run(Algo::Ring, 333, t, collAvg, true);
      runner.run(Algo::DirectSliced, 1009, t, collMax, false);
      runner.run(Algo::DirectSmall, 77, t, collProd, true);
      if (testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(AllReduceSchedules, RingShape) {
  Topology topo = Topology::uniform(2, 5, 5);
  CollArgs args;
  args.count = 10;
  args.op = collAvg;
  int x = 0;
  args.sendbuff = &x;
  args.recvbuff = &x;
  Schedule s;
  buildRingAllReduce(topo, args, &s);
  EXPECT_STREQ(s.algorithm, "ring");
  EXPECT_EQ(s.op, collSum);
  EXPECT_EQ(s.divisor, 5u);
  EXPECT_EQ(s.steps.size(), 4u * 4u + 1u);
  ASSERT_EQ(s.peers.size(), 2u);
  EXPECT_FALSE(s.usesWindows);
}

TEST(AllReduceSchedules, PlansDoNotDependOnPointers) {
  // The communicator caches plans by shape and reuses them with new buffers, in place or not.
  int a = 0, b = 0;
  for (int32_t p : {1, 2, 3}) {
    for (int algo = 0; algo < 3; ++algo) {
      Schedule s[2];
      for (int k = 0; k < 2; ++k) {
        CollArgs args;
        args.count = 11;
        args.op = collAvg;
        args.sendbuff = &a;
        args.recvbuff = k == 0 ? &a : &b;
        Topology topo = Topology::uniform(p - 1, p, p);
        if (algo == 0) buildRingAllReduce(topo, args, &s[k]);
        else buildDirectAllReduce(topo, args, DirectOptions{1 << 16, algo == 1 ? UINT64_MAX : 0}, &s[k]);
      }
      ASSERT_EQ(s[0].steps.size(), s[1].steps.size()) << "p=" << p << " algo=" << algo;
      for (size_t i = 0; i < s[0].steps.size(); ++i) {
        EXPECT_EQ(s[0].steps[i].kind, s[1].steps[i].kind);
        EXPECT_EQ(s[0].steps[i].count, s[1].steps[i].count);
        EXPECT_EQ(s[0].steps[i].src.offset, s[1].steps[i].src.offset);
        EXPECT_EQ(s[0].steps[i].dst.offset, s[1].steps[i].dst.offset);
      }
    }
  }
}

TEST(AllReduceSchedules, DirectMaxBytesFits) {
  for (int32_t l : {2, 3, 8, 16}) {
    for (uint64_t half : {4096ull, 100000ull, 1ull << 20}) {
      uint64_t maxBytes = directMaxBytes(half, l);
      EXPECT_GT(maxBytes, half / 2);
      for (collDataType_t t : {collInt8, collFloat16, collFloat32, collFloat64}) {
        Topology topo = Topology::uniform(l - 1, l, l);
        CollArgs args;
        args.dtype = t;
        args.count = maxBytes / dataTypeSize(t);
        Schedule s;
        buildDirectAllReduce(topo, args, DirectOptions{half, 0}, &s);
        EXPECT_LE(s.windowBytes, half) << "l=" << l << " half=" << half << " dtype=" << t;
      }
    }
  }
}

TEST(AllReduceSchedulesExtended, Ring1000Ranks) {
  Runner runner(1000);
  runner.run(Algo::Ring, 5003, collFloat32, collSum, false);
  runner.run(Algo::Ring, 999, collInt32, collAvg, true);
  runner.run(Algo::Ring, 1, collFloat64, collMax, false);
  runner.run(Algo::Ring, 100003, collFloat16, collSum, true);  // partial sums stay exact below 2048
}

}  // namespace
}  // namespace coll
