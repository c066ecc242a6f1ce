// Torus and hierarchical schedules through the in-process executor: exact results on every rank
// for many grids and host layouts (uneven hosts, ranks not in host blocks), untouched inputs and
// guards, and structural checks of steps and bytes against the algorithms' formulas.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/phases.h"
#include "src/exec/inprocess.h"
#include "src/plan/planner.h"
#include "tests/unit/schedule_test_data.h"

namespace coll {
namespace {

using testutil::expectedValue;
using testutil::inputValue;
using testutil::storeValue;
constexpr auto& kTypes = testutil::kExactReduceTypes;
constexpr auto& kOps = testutil::kBuiltinOps;
using testutil::dataByte;
using testutil::fillByte;
using testutil::kGuard;
using testutil::recvElems;
using testutil::sendElems;

using Builder = std::function<void(const Topology&, const CollArgs&, Schedule*)>;

bool reduces(CollKind k) { return k == CollKind::AllReduce || k == CollKind::ReduceScatter; }

// Hosts of `sizes[h]` ranks each, in blocks.
std::vector<int32_t> blockLayout(const std::vector<int32_t>& sizes) {
  std::vector<int32_t> host;
  for (size_t h = 0; h < sizes.size(); ++h) host.insert(host.end(), sizes[h], static_cast<int32_t>(h));
  return host;
}

std::string layoutName(const std::vector<int32_t>& host) {
  std::string s;
  for (int32_t h : host) s += std::to_string(h);
  return s;
}

struct World {
  explicit World(const std::vector<int32_t>& hostOfRank, InProcessOptions options = {})
      : world(hostOfRank, options), schedules(hostOfRank.size()), host(hostOfRank) {}
  InProcessWorld world;
  std::vector<Schedule> schedules;
  std::vector<int32_t> host;
  uint64_t seq = 0;
  uint64_t skew = 0;  // 0: runInProcess's fair round robin; else the seed of runSkewed's weights

  // One call of `kind` on every rank with NCCL's buffer layout (in place: one allocation);
  // every byte of every allocation checked afterwards.
  void run(const char* name, CollKind kind, const Builder& build, uint64_t count, collDataType_t t, collRedOp_t op,
           int32_t root, bool inPlace) {
    const int32_t p = world.nranks();
    const uint64_t es = dataTypeSize(t);
    const uint64_t blockBytes = count * es;
    const uint64_t sendBytes = sendElems(kind, p, count) * es, recvBytes = recvElems(kind, p, count) * es;
    SCOPED_TRACE(std::string(name) + " layout=" + layoutName(host) + " count=" + std::to_string(count) +
                 " dtype=" + std::to_string(t) + " op=" + std::to_string(op) + " root=" + std::to_string(root) +
                 (inPlace ? " in-place" : ""));
    std::vector<std::vector<std::byte>> mem0(p), mem1(p), want0(p), want1(p);
    std::vector<std::byte*> sendPtr(p), recvPtr(p);
    std::vector<const Schedule*> ptrs(p);
    std::vector<ExecBuffers> buffers(p);
    for (int32_t r = 0; r < p; ++r) {
      auto fill = [&](std::vector<std::byte>& m, int alloc, uint64_t bytes) {
        m.resize(bytes + 2 * kGuard);
        for (uint64_t b = 0; b < m.size(); ++b) m[b] = fillByte(r, alloc, b);
      };
      if (!inPlace) {
        fill(mem0[r], 0, sendBytes);
        fill(mem1[r], 1, recvBytes);
        sendPtr[r] = mem0[r].data() + kGuard;
        recvPtr[r] = mem1[r].data() + kGuard;
      } else {
        fill(mem0[r], 0, std::max(sendBytes, recvBytes));
        std::byte* base = mem0[r].data() + kGuard;
        sendPtr[r] = recvPtr[r] = base;
        if (kind == CollKind::AllGather) sendPtr[r] = base + r * blockBytes;
        if (kind == CollKind::ReduceScatter) recvPtr[r] = base + r * blockBytes;
      }
      if (reduces(kind)) {
        for (uint64_t i = 0; i < sendBytes / es; ++i) storeValue(t, sendPtr[r], i, inputValue(t, op, p, r, i));
      } else {
        for (uint64_t b = 0; b < sendBytes; ++b) sendPtr[r][b] = dataByte(r, b);
      }
      want0[r] = mem0[r];
      want1[r] = mem1[r];
      CollArgs args;
      args.kind = kind;
      args.count = count;
      args.dtype = t;
      args.op = op;
      args.root = root;
      args.sendbuff = sendPtr[r];
      args.recvbuff = recvPtr[r];
      build(world.topology(r), args, &schedules[r]);
      ASSERT_NE(schedules[r].op, collAvg);
      ptrs[r] = &schedules[r];
      buffers[r] = ExecBuffers{sendPtr[r], recvPtr[r]};
    }
    for (int32_t r = 0; r < p; ++r) {
      std::byte* w = (inPlace ? want0[r].data() + (recvPtr[r] - mem0[r].data()) : want1[r].data() + kGuard);
      switch (kind) {
        case CollKind::AllReduce:
          for (uint64_t i = 0; i < count; ++i) storeValue(t, w, i, expectedValue(t, op, p, i));
          break;
        case CollKind::ReduceScatter:
          for (uint64_t i = 0; i < count; ++i) storeValue(t, w, i, expectedValue(t, op, p, r * count + i));
          break;
        case CollKind::AllGather:
          for (int32_t j = 0; j < p; ++j) {
            for (uint64_t b = 0; b < blockBytes; ++b) w[j * blockBytes + b] = dataByte(j, b);
          }
          break;
        case CollKind::Broadcast:
          for (uint64_t b = 0; b < blockBytes; ++b) w[b] = dataByte(root, b);
          break;
        default: FAIL();
      }
    }
    ++seq;
    Status st = skew == 0 ? runInProcess(ptrs, buffers, world, seq) : runSkewed(ptrs, buffers, seq);
    ASSERT_TRUE(st.ok()) << st.message();
    for (int32_t r = 0; r < p; ++r) {
      checkSame(mem0[r], want0[r], r, inPlace ? "buffer" : "send buffer");
      checkSame(mem1[r], want1[r], r, "recv buffer");
      if (testing::Test::HasFatalFailure()) return;
    }
  }

  // Like runInProcess, but rank r is polled only every period(r)-th round (periods from `skew`),
  // so some ranks run far ahead of their peers: a missing dependency shows up as a wrong result.
  Status runSkewed(const std::vector<const Schedule*>& ptrs, const std::vector<ExecBuffers>& buffers, uint64_t call) {
    const int32_t p = world.nranks();
    for (int32_t r = 0; r < p; ++r) {
      Status st = world.execution(r).start(*ptrs[r], buffers[r], world.links(r), call);
      if (!st.ok()) return st;
    }
    std::vector<int> period(p);
    uint64_t x = skew * 0x9e3779b97f4a7c15ull;
    for (int32_t r = 0; r < p; ++r) {
      x ^= x >> 29;
      x *= 0xbf58476d1ce4e5b9ull;
      x ^= x >> 32;
      period[r] = 1 << (x % 4);  // 1 .. 8
    }
    std::vector<uint8_t> finished(p, 0);
    int32_t left = p;
    int idle = 0;
    for (uint64_t round = 0; left > 0; ++round) {
      bool any = false;
      for (int32_t i = 0; i < p; ++i) {
        const int32_t r = static_cast<int32_t>((i + call * 3) % p);  // a different order per call
        if (finished[r] || round % period[r] != 0) continue;
        bool done = false, progressed = false;
        Status st = world.execution(r).poll(&done, &progressed);
        if (!st.ok()) return st;
        any |= progressed;
        if (done) {
          finished[r] = 1;
          --left;
          any = true;
        }
      }
      idle = any ? 0 : idle + 1;
      if (idle > 16) return Status(collInternalError, "deadlock under skewed polling");
    }
    return okStatus();
  }

  static void checkSame(const std::vector<std::byte>& got, const std::vector<std::byte>& want, int r,
                        const char* what) {
    if (got == want) return;
    size_t i = 0;
    while (got[i] == want[i]) ++i;
    FAIL() << "rank " << r << ": " << what << " differs at byte " << static_cast<int64_t>(i) - int64_t{kGuard}
           << " (guards of 16 bytes either side): got " << static_cast<int>(got[i]) << ", want "
           << static_cast<int>(want[i]);
  }
};

Builder torusBuilder(const TorusDims& dims) {
  return [dims](const Topology& topo, const CollArgs& args, Schedule* s) { buildTorusAllReduce(topo, args, dims, s); };
}

TorusDims dimsOf(const Topology& topo, const std::string& forced = "") {
  TorusDims d;
  Status st = torusDimsFor(topo, forced, &d);
  EXPECT_TRUE(st.ok()) << st.message();
  return d;
}

// The grid over `nhosts` hosts the planner would hand a hierarchical All-Reduce.
TorusDims hostDims(int32_t nhosts) { return dimsOf(Topology::uniform(0, nhosts, nhosts)); }

AlgoOptions interOptions(AlgoId inter, int32_t nhosts, int32_t channels = 1) {
  AlgoOptions o;
  o.interHost = inter;
  o.channels = channels;
  o.torus = hostDims(nhosts);
  return o;
}

Builder hierBuilder(const AlgoOptions& o) {
  return [o](const Topology& topo, const CollArgs& args, Schedule* s) { buildHierarchicalAllReduce(topo, args, o, s); };
}

const AlgoId kInter[] = {AlgoId::Ring, AlgoId::Tree, AlgoId::Torus, AlgoId::RecursiveDoubling, AlgoId::Rabenseifner};

// ---- torus

TEST(TorusDims, DefaultsAndForced) {
  auto dims = [](const Topology& t, const std::string& f = "") {
    TorusDims d = dimsOf(t, f);
    return std::vector<int32_t>{d.ndims, d.d[0], d.d[1], d.d[2]};
  };
  using V = std::vector<int32_t>;
  EXPECT_EQ(dims(Topology::uniform(0, 64, 64)), (V{3, 4, 4, 4}));
  EXPECT_EQ(dims(Topology::uniform(0, 12, 12)), (V{3, 3, 2, 2}));
  EXPECT_EQ(dims(Topology::uniform(0, 6, 6)), (V{2, 3, 2, 1}));
  EXPECT_EQ(dims(Topology::uniform(0, 16, 16)), (V{2, 4, 4, 1}));
  EXPECT_EQ(dims(Topology::uniform(0, 13, 13)), (V{1, 13, 1, 1}));
  EXPECT_EQ(dims(Topology::uniform(0, 1, 1)), (V{1, 1, 1, 1}));
  // Uniform hosts: ranks per host x hosts.
  EXPECT_EQ(dims(Topology::uniform(3, 24, 8)), (V{2, 8, 3, 1}));
  EXPECT_EQ(dims(Topology::uniform(3, 6, 1)), (V{2, 3, 2, 1}));  // one rank per host: balanced
  EXPECT_EQ(dims(Topology::uniform(0, 24, 8), "2x3x4"), (V{3, 2, 3, 4}));
  EXPECT_EQ(dims(Topology::uniform(0, 6, 6), "1x6"), (V{2, 1, 6, 1}));
  EXPECT_EQ(dims(Topology::uniform(0, 6, 6), "6X1"), (V{2, 6, 1, 1}));
}

TEST(TorusDims, BadForcedDimsAreInvalidUsage) {
  const Topology topo = Topology::uniform(0, 6, 6);
  for (const char* bad : {"2x4", "2x2x2", "1x1x1"}) {
    TorusDims d;
    Status st = torusDimsFor(topo, bad, &d);
    ASSERT_EQ(st.code(), collInvalidUsage) << bad;
    EXPECT_NE(st.message().find(bad), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("6 ranks"), std::string::npos) << st.message();
  }
  for (const char* bad : {"6", "2x", "x3", "ax3", "2x3x1x1", "0x6", "2*3", "-2x-3", "2x3 ", "9999999999x1"}) {
    TorusDims d;
    Status st = torusDimsFor(topo, bad, &d);
    ASSERT_EQ(st.code(), collInvalidUsage) << bad;
    EXPECT_NE(st.message().find("COLL_TORUS_DIMS"), std::string::npos) << st.message();
  }
}

TEST(TorusSchedules, EveryRankCountDefaultDims) {
  InProcessOptions o;
  o.sliceBytes = 512;
  for (int32_t p = 1; p <= 64; ++p) {
    World w(blockLayout({p}), o);
    const TorusDims dims = dimsOf(w.world.topology(0));
    for (uint64_t count : {0, 1, 5, 1031}) {
      w.run("torus", CollKind::AllReduce, torusBuilder(dims), count, collFloat32, collSum, 0, count % 2 == 1);
      if (testing::Test::HasFatalFailure()) return;
    }
    w.run("torus", CollKind::AllReduce, torusBuilder(dims), 97, collInt32, collAvg, 0, false);
    if (testing::Test::HasFatalFailure()) return;
  }
}

TEST(TorusSchedules, ForcedGridsEveryTypeAndOp) {
  struct G {
    int32_t p;
    const char* dims;
  };
  const G grids[] = {{6, "2x3"},   {6, "3x2"},   {6, "1x6"},    {6, "6x1"}, {6, "2x1x3"},
                     {8, "2x2x2"}, {8, "1x1x8"}, {12, "2x3x2"}, {4, "2x2"}, {9, "3x1x3"}};
  for (const G& g : grids) {
    World w(blockLayout({g.p}));
    const TorusDims dims = dimsOf(w.world.topology(0), g.dims);
    int n = 0;
    for (collDataType_t t : kTypes) {
      for (collRedOp_t op : kOps) {
        const uint64_t counts[] = {0, 1, 2, 7, 301};
        ++n;
        w.run(g.dims, CollKind::AllReduce, torusBuilder(dims), counts[n % 5], t, op, 0, n % 2 == 0);
        if (testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

TEST(TorusSchedules, HostGridsAndTinyRings) {
  // Tiny rings and slices: every step waits for credit many times, so the per-slice streaming
  // from each reduce-scatter into its all-gather and the joins between dimensions are exercised.
  InProcessOptions o;
  o.ringBytes = 64;
  o.sliceBytes = 24;
  for (const char* forced : {"", "2x2x2", "4x2", "1x8"}) {
    World w(blockLayout({4, 4}), o);
    const TorusDims dims = dimsOf(w.world.topology(0), forced);
    w.run(forced, CollKind::AllReduce, torusBuilder(dims), 3001, collFloat64, collSum, 0, false);
    w.run(forced, CollKind::AllReduce, torusBuilder(dims), 2999, collInt8, collMax, 0, true);
    w.run(forced, CollKind::AllReduce, torusBuilder(dims), 1001, collBfloat16, collAvg, 0, true);
    if (testing::Test::HasFatalFailure()) return;
  }
}

// Elements a schedule sends, split by whether the peer is on this rank's host.
struct Sent {
  uint64_t steps = 0, intra = 0, inter = 0;
};
Sent sentBy(const Schedule& s, const Topology& topo) {
  Sent out;
  for (const Step& st : s.steps) {
    if (st.kind != StepKind::Send || st.count == 0) continue;
    out.steps++;
    (topo.sameHost(topo.rank, st.peer) ? out.intra : out.inter) += st.count;
  }
  return out;
}

TEST(TorusSchedules, StepsAndBytesPerRankMatchTheFormula) {
  struct G {
    int32_t p;
    const char* dims;
  };
  const G grids[] = {{64, "4x4x4"}, {64, "8x8"}, {64, "2x4x8"}, {24, "1x4x6"}, {7, "7x1"}, {30, "5x3x2"}};
  for (const G& g : grids) {
    const Topology t0 = Topology::uniform(0, g.p, g.p);
    const TorusDims dims = dimsOf(t0, g.dims);
    int32_t sum = 0;
    for (int32_t i = 0; i < 3; ++i) sum += dims.d[i] - 1;
    const uint64_t count = 2 * static_cast<uint64_t>(g.p) * 10;  // every chunk of every phase non-empty and even
    for (int32_t r = 0; r < g.p; ++r) {
      Schedule s;
      CollArgs args;
      args.count = count;
      buildTorusAllReduce(Topology::uniform(r, g.p, g.p), args, dims, &s);
      EXPECT_STREQ(s.algorithm, "torus");
      // 2 sum(d_i - 1) sends per direction; each direction moves 2 (1 - 1/p) of its half.
      std::map<bool, uint64_t> sendsPerDirection;
      const uint64_t half = count / 2;
      for (const Step& st : s.steps) {
        if (st.kind != StepKind::Send) continue;
        sendsPerDirection[st.src.offset >= half * 4]++;
      }
      EXPECT_EQ(sendsPerDirection[false], static_cast<uint64_t>(2 * sum)) << g.dims << " rank " << r;
      EXPECT_EQ(sendsPerDirection[true], static_cast<uint64_t>(2 * sum)) << g.dims << " rank " << r;
      const Sent sent = sentBy(s, Topology::uniform(r, g.p, g.p));
      EXPECT_EQ(sent.intra, 2 * count * (g.p - 1) / g.p) << g.dims << " rank " << r;
    }
  }
}

// ---- hierarchical All-Reduce

const std::vector<std::vector<int32_t>>& hierLayouts() {
  static const std::vector<std::vector<int32_t>> layouts = {
      blockLayout({4, 4}),
      blockLayout({2, 2, 2, 2}),
      blockLayout({3, 3, 3}),
      blockLayout({3, 3, 2}),
      blockLayout({2, 1}),
      blockLayout({1, 4}),
      blockLayout({1, 1, 1}),
      blockLayout({5}),
      {0, 1, 0, 2, 1, 0, 2, 1},  // not in blocks, 3+3+2
      {0, 1, 1, 0, 2, 2, 2, 0, 1, 3},
  };
  return layouts;
}

TEST(HierAllReduce, EveryInterAlgorithmAndLayout) {
  InProcessOptions o;
  o.sliceBytes = 256;  // several slices per step at the larger counts
  for (const auto& layout : hierLayouts()) {
    World w(layout, o);
    const int32_t nhosts = w.world.topology(0).nhosts;
    for (AlgoId inter : kInter) {
      for (int32_t channels : {1, 2}) {
        if (channels == 2 && inter != AlgoId::Ring) continue;
        const AlgoOptions opt = interOptions(inter, nhosts, channels);
        const std::string name = std::string("hier/") + algoName(inter) + (channels == 2 ? "2" : "");
        for (uint64_t count : {0, 1, 2, 7, 64, 1009}) {
          for (bool inPlace : {false, true}) {
            w.run(name.c_str(), CollKind::AllReduce, hierBuilder(opt), count, collFloat32, collSum, 0, inPlace);
            if (testing::Test::HasFatalFailure()) return;
          }
        }
        w.run(name.c_str(), CollKind::AllReduce, hierBuilder(opt), 333, collInt32, collAvg, 0, false);
        w.run(name.c_str(), CollKind::AllReduce, hierBuilder(opt), 335, collFloat16, collMax, 0, true);
        if (testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

TEST(HierAllReduce, EveryTypeAndOp) {
  for (const auto& layout : {blockLayout({3, 3, 2}), std::vector<int32_t>{0, 1, 0, 2, 1, 0, 2, 1}}) {
    World w(layout);
    const int32_t nhosts = w.world.topology(0).nhosts;
    int n = 0;
    for (AlgoId inter : {AlgoId::Ring, AlgoId::Torus}) {
      for (collDataType_t t : kTypes) {
        for (collRedOp_t op : kOps) {
          const uint64_t counts[] = {1, 7, 100, 1009};
          ++n;
          w.run("hier", CollKind::AllReduce, hierBuilder(interOptions(inter, nhosts)), counts[n % 4], t, op, 0,
                n % 3 == 0);
          if (testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(HierAllReduce, ConsecutiveCallsAndTinyRings) {
  InProcessOptions o;
  o.ringBytes = 64;
  o.sliceBytes = 24;
  World w({0, 1, 1, 0, 2, 2, 2, 0, 1}, o);
  for (int call = 0; call < 10; ++call) {
    const AlgoId inter = kInter[call % 5];
    w.run("hier", CollKind::AllReduce, hierBuilder(interOptions(inter, 3, 1 + call % 2)),
          static_cast<uint64_t>(1000 + call * 337), kTypes[call % 10], kOps[call % 5], 0, call % 2 == 0);
    if (testing::Test::HasFatalFailure()) return;
  }
}

// What a phase sends when built alone over `n` members for a shard of `count` elements, by
// member (the inter-host formula of whichever implementation the phase has).
uint64_t phaseSends(AlgoId inter, const AlgoOptions& o, int32_t n, int32_t me, uint64_t count) {
  RankGroup g;
  g.ranks.resize(static_cast<size_t>(n));
  std::iota(g.ranks.begin(), g.ranks.end(), 0);
  g.me = me;
  Schedule s;
  s.begin("phase", collFloat32, collSum);
  const PhaseSpan span{recvAt(0), recvAt(0), count, 4};
  switch (inter) {
    case AlgoId::Tree: addDoubleBinaryTreeAllReduce(g, span, -1, false, &s); break;
    case AlgoId::RecursiveDoubling: addRecursiveDoublingAllReduce(g, span, -1, false, &s); break;
    case AlgoId::Rabenseifner: addRabenseifnerAllReduce(g, span, -1, false, &s); break;
    case AlgoId::Torus: addTorusAllReduce(g, o.torus, span, -1, false, &s); break;
    default: addRingAllReduce(g, span, -1, false, o.channels, &s); break;
  }
  uint64_t sent = 0;
  for (const Step& st : s.steps) sent += st.kind == StepKind::Send ? st.count : 0;
  return sent;
}

TEST(HierAllReduce, BytesAcrossHostsMatchTheInterFormula) {
  struct L {
    int32_t hosts, perHost;
  };
  for (const L& l : {L{4, 2}, L{2, 4}, L{8, 3}, L{6, 2}}) {
    const int32_t p = l.hosts * l.perHost;
    const uint64_t count = static_cast<uint64_t>(p) * 2 * 64;  // every shard splits evenly everywhere
    const uint64_t shard = count / l.perHost;
    for (AlgoId inter : kInter) {
      for (int32_t channels : {1, 2}) {
        if (channels == 2 && inter != AlgoId::Ring) continue;
        const AlgoOptions opt = interOptions(inter, l.hosts, channels);
        for (int32_t r = 0; r < p; ++r) {
          const Topology topo = Topology::uniform(r, p, l.perHost);
          Schedule s;
          CollArgs args;
          args.count = count;
          buildHierarchicalAllReduce(topo, args, opt, &s);
          EXPECT_STREQ(s.algorithm, "hier");
          const Sent sent = sentBy(s, topo);
          const std::string what = std::string(algoName(inter)) + " " + std::to_string(l.hosts) + "x" +
                                   std::to_string(l.perHost) + " rank " + std::to_string(r);
          // Ring reduce-scatter and all-gather inside the host.
          EXPECT_EQ(sent.intra, 2 * count * (l.perHost - 1) / l.perHost) << what;
          // Across hosts: the inter phase over this rank's shard, as the phase sends it alone.
          EXPECT_EQ(sent.inter, phaseSends(inter, opt, l.hosts, topo.hostOfRank[r], shard)) << what;
          if (inter == AlgoId::Ring || inter == AlgoId::Torus) {
            EXPECT_EQ(sent.inter, 2 * shard * (l.hosts - 1) / l.hosts) << what;  // bandwidth-optimal
          }
        }
      }
    }
  }
}

TEST(HierAllReduce, UnevenHostsSplitEveryShardAmongOwners) {
  // 3+1 hosts: the single rank of host 1 owns the whole vector there, and takes part in three
  // inter-host phases (one per shard of host 0), each with exactly two members.
  const std::vector<int32_t> layout = {0, 0, 1, 0};
  const uint64_t count = 300;
  for (int32_t r = 0; r < 4; ++r) {
    const Topology topo = Topology::fromHostHashes(r, std::vector<uint64_t>(layout.begin(), layout.end()));
    Schedule s;
    CollArgs args;
    args.count = count;
    buildHierarchicalAllReduce(topo, args, interOptions(AlgoId::Ring, 2), &s);
    const Sent sent = sentBy(s, topo);
    // A two-member ring All-Reduce of n elements sends n.
    EXPECT_EQ(sent.inter, r == 2 ? count : count / 3) << "rank " << r;
  }
}

TEST(HierAllReduce, UniformBlockHosts) {
  EXPECT_TRUE(uniformBlockHosts(Topology::uniform(0, 8, 4)));
  EXPECT_TRUE(uniformBlockHosts(Topology::uniform(0, 8, 8)));
  EXPECT_TRUE(uniformBlockHosts(Topology::uniform(0, 8, 1)));
  EXPECT_FALSE(uniformBlockHosts(Topology::uniform(0, 7, 4)));
  const std::vector<uint64_t> interleaved = {0, 1, 0, 1};
  EXPECT_FALSE(uniformBlockHosts(Topology::fromHostHashes(0, interleaved)));
}

// ---- hierarchical reduce-scatter, all-gather, broadcast

const std::vector<std::vector<int32_t>>& uniformLayouts() {
  static const std::vector<std::vector<int32_t>> layouts = {
      blockLayout({4, 4}),          blockLayout({2, 2, 2, 2}), blockLayout({3, 3, 3}), blockLayout({5}),
      blockLayout({1, 1, 1, 1, 1}), blockLayout({2}),          blockLayout({1})};
  return layouts;
}

TEST(HierCollectives, ReduceScatterAllGatherBroadcast) {
  InProcessOptions o;
  o.sliceBytes = 256;
  const Builder rs = [](const Topology& t, const CollArgs& a, Schedule* s) { buildHierarchicalReduceScatter(t, a, s); };
  const Builder ag = [](const Topology& t, const CollArgs& a, Schedule* s) { buildHierarchicalAllGather(t, a, s); };
  const Builder bc = [](const Topology& t, const CollArgs& a, Schedule* s) { buildHierarchicalBroadcast(t, a, s); };
  for (const auto& layout : uniformLayouts()) {
    World w(layout, o);
    const int32_t p = w.world.nranks();
    for (uint64_t count : {0, 1, 7, 1009}) {
      for (bool inPlace : {false, true}) {
        w.run("hier-rs", CollKind::ReduceScatter, rs, count, collFloat32, collSum, 0, inPlace);
        w.run("hier-rs", CollKind::ReduceScatter, rs, count, collInt32, collAvg, 0, inPlace);
        w.run("hier-ag", CollKind::AllGather, ag, count, collFloat16, collSum, 0, inPlace);
        if (testing::Test::HasFatalFailure()) return;
        for (int32_t root = 0; root < p; ++root) {
          w.run("hier-bcast", CollKind::Broadcast, bc, count, collInt8, collSum, root, inPlace);
          if (testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(HierCollectives, ReduceScatterEveryTypeAndOp) {
  World w(blockLayout({3, 3}));
  int n = 0;
  for (collDataType_t t : kTypes) {
    for (collRedOp_t op : kOps) {
      ++n;
      w.run(
          "hier-rs", CollKind::ReduceScatter,
          [](const Topology& tp, const CollArgs& a, Schedule* s) { buildHierarchicalReduceScatter(tp, a, s); },
          static_cast<uint64_t>(1 + n % 3 * 50), t, op, 0, n % 2 == 0);
      if (testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(HierCollectives, TinyRingsAndStructure) {
  InProcessOptions o;
  o.ringBytes = 64;
  o.sliceBytes = 24;
  World w(blockLayout({3, 3, 3}), o);
  w.run(
      "hier-rs", CollKind::ReduceScatter,
      [](const Topology& t, const CollArgs& a, Schedule* s) { buildHierarchicalReduceScatter(t, a, s); }, 1001,
      collFloat64, collSum, 0, true);
  w.run(
      "hier-ag", CollKind::AllGather,
      [](const Topology& t, const CollArgs& a, Schedule* s) { buildHierarchicalAllGather(t, a, s); }, 1001, collFloat64,
      collSum, 0, false);
  w.run(
      "hier-bcast", CollKind::Broadcast,
      [](const Topology& t, const CollArgs& a, Schedule* s) { buildHierarchicalBroadcast(t, a, s); }, 3001, collFloat64,
      collSum, 4, false);
  // Bytes across hosts: reduce-scatter and all-gather move (H-1) blocks per rank across hosts
  // and H (L-1) blocks inside; broadcast crosses hosts once per host.
  const int32_t hosts = 4, perHost = 3, p = hosts * perHost;
  const uint64_t count = 10;
  uint64_t bcastInter = 0;
  for (int32_t r = 0; r < p; ++r) {
    const Topology topo = Topology::uniform(r, p, perHost);
    CollArgs args;
    args.count = count;
    args.root = 7;
    Schedule rsS, agS, bcS;
    buildHierarchicalReduceScatter(topo, args, &rsS);
    buildHierarchicalAllGather(topo, args, &agS);
    buildHierarchicalBroadcast(topo, args, &bcS);
    for (const Schedule* s : {&rsS, &agS}) {
      const Sent sent = sentBy(*s, topo);
      EXPECT_EQ(sent.inter, count * (hosts - 1)) << s->algorithm << " rank " << r;
      EXPECT_EQ(sent.intra, count * hosts * (perHost - 1)) << " rank " << r;
    }
    // Partial sums rotate through three slots per stage: scratch stays well below the input.
    EXPECT_LE(rsS.scratchBytes, (4 * hosts + 3) * count * 4) << "rank " << r;
    bcastInter += sentBy(bcS, topo).inter;
    EXPECT_STREQ(bcS.algorithm, "hier");
  }
  EXPECT_EQ(bcastInter, count * (hosts - 1));
}

// ---- hosts in another order (COLL_TOPO_FABRIC's fabric order)

// Builds on the topology with the hosts in `order` (position h holds host order[h]) and renames
// the schedule's ranks back to the real ones, as the communicator does for a plan with
// options.fabricHostOrder.
Builder inHostOrder(const std::vector<int32_t>& order, const Builder& build) {
  return [order, build](const Topology& real, const CollArgs& args, Schedule* s) {
    const int32_t per = real.nranks / real.nhosts;
    const std::vector<int32_t> rankOf = ranksInHostOrder(order, per);
    const int32_t me = static_cast<int32_t>(std::find(rankOf.begin(), rankOf.end(), real.rank) - rankOf.begin());
    build(Topology::uniform(me, real.nranks, per), args, s);
    s->renameRanks(rankOf);
  };
}

// Every All-Reduce builder: flat ones, torus (on uniform hosts), and hierarchical with each
// algorithm between hosts (more than one rank per host).
std::vector<std::pair<std::string, Builder>> allReduceAlgorithms(const Topology& t, int32_t hosts) {
  std::vector<std::pair<std::string, Builder>> algos = {
      {"ring", [](const Topology& t, const CollArgs& a, Schedule* s) { buildRingAllReduce(t, a, s); }},
      {"ring2", [](const Topology& t, const CollArgs& a, Schedule* s) { buildRingAllReduce(t, a, s, 2); }},
      {"tree", [](const Topology& t, const CollArgs& a, Schedule* s) { buildDoubleBinaryTreeAllReduce(t, a, s); }},
      {"recdoubling",
       [](const Topology& t, const CollArgs& a, Schedule* s) { buildRecursiveDoublingAllReduce(t, a, s); }},
      {"rabenseifner", [](const Topology& t, const CollArgs& a, Schedule* s) { buildRabenseifnerAllReduce(t, a, s); }},
  };
  if (isUniformBlocks(t)) algos.emplace_back("torus", torusBuilder(dimsOf(t)));
  if (t.nranks > hosts) {
    for (AlgoId inter : kInter) {
      if (inter == AlgoId::Torus && hosts < 4) continue;
      algos.emplace_back(std::string("hier/") + algoName(inter), hierBuilder(interOptions(inter, hosts)));
    }
  }
  return algos;
}

TEST(HostOrder, EveryAllReduceAlgorithmInAnyHostOrder) {
  InProcessOptions o;
  o.sliceBytes = 256;
  struct Layout {
    int32_t hosts, per;
    std::vector<int32_t> order;
  };
  const Layout layouts[] = {
      {4, 2, {2, 0, 3, 1}}, {3, 3, {2, 1, 0}}, {6, 2, {5, 2, 0, 4, 1, 3}}, {8, 1, {7, 3, 5, 1, 6, 2, 4, 0}}};
  for (const Layout& l : layouts) {
    World w(blockLayout(std::vector<int32_t>(static_cast<size_t>(l.hosts), l.per)), o);
    const auto algos = allReduceAlgorithms(w.world.topology(0), l.hosts);
    for (const auto& [name, build] : algos) {
      for (uint64_t count : {1, 7, 1000}) {
        w.run(name.c_str(), CollKind::AllReduce, inHostOrder(l.order, build), count, collInt32, collSum, 0, count == 7);
        if (testing::Test::HasFatalFailure()) return;
      }
      w.run(name.c_str(), CollKind::AllReduce, inHostOrder(l.order, build), 333, collFloat32, collMax, 0, false);
      if (testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(HostOrder, RenamingMovesEveryRankTheScheduleNames) {
  // A hierarchical All-Reduce on 4 hosts of 2 names windows, local peers and remote peers.
  const std::vector<int32_t> order = {3, 1, 0, 2};
  const std::vector<int32_t> rankOf = ranksInHostOrder(order, 2);
  EXPECT_EQ(rankOf, (std::vector<int32_t>{6, 7, 2, 3, 0, 1, 4, 5}));
  for (int32_t v = 0; v < 8; ++v) {
    CollArgs args;
    args.kind = CollKind::AllReduce;
    args.count = 4096;
    args.dtype = collFloat32;
    args.op = collSum;
    static float buf[2];
    args.sendbuff = &buf[0];
    args.recvbuff = &buf[1];
    Schedule built, renamed;
    const Topology vt = Topology::uniform(v, 8, 2);
    buildHierarchicalAllReduce(vt, args, interOptions(AlgoId::Ring, 4), &built);
    buildHierarchicalAllReduce(vt, args, interOptions(AlgoId::Ring, 4), &renamed);
    renamed.renameRanks(rankOf);
    ASSERT_EQ(built.steps.size(), renamed.steps.size());
    for (size_t i = 0; i < built.steps.size(); ++i) {
      const Step& a = built.steps[i];
      const Step& b = renamed.steps[i];
      if (a.kind == StepKind::Send || a.kind == StepKind::Recv || a.kind == StepKind::RecvReduce) {
        EXPECT_EQ(b.peer, rankOf[a.peer]) << "step " << i;
        // Virtual v and its peer are on hosts v / 2 and peer / 2; renamed, on the real hosts there.
        EXPECT_EQ(b.peer / 2, order[a.peer / 2]);
      }
      if (a.src.kind == BufKind::Window) EXPECT_EQ(b.src.owner, rankOf[a.src.owner]);
      if (a.dst.kind == BufKind::Window) EXPECT_EQ(b.dst.owner, rankOf[a.dst.owner]);
    }
    for (size_t i = 0; i < built.deps.size(); ++i) {
      const Dep& a = built.deps[i];
      if (a.kind == DepKind::PeerStep || a.kind == DepKind::PeerCall) {
        EXPECT_EQ(renamed.deps[i].peer, rankOf[a.peer]);
        EXPECT_EQ(renamed.deps[i].peer / 2, rankOf[v] / 2) << "a local peer stays on this rank's host";
      }
    }
    for (size_t i = 0; i < built.peers.size(); ++i) EXPECT_EQ(renamed.peers[i], rankOf[built.peers[i]]);
  }
}

// ---- each host's ranks in another order (their GPUs' ring order: PlanCache's local order)

// Builds on the real topology with this rank at its place in `rankOf` (ranksInLocalOrder) and
// renames the schedule back, as the communicator does for every All-Reduce plan.
Builder inLocalOrder(const std::vector<int32_t>& rankOf, const Builder& build) {
  return [rankOf, build](const Topology& real, const CollArgs& args, Schedule* s) {
    Topology placed = real;
    placed.rank = static_cast<int32_t>(std::find(rankOf.begin(), rankOf.end(), real.rank) - rankOf.begin());
    build(placed, args, s);
    s->renameRanks(rankOf);
  };
}

TEST(LocalOrder, RanksGoByTheirKeysWithinEachHost) {
  auto topoOf = [](const std::vector<uint64_t>& hosts) { return Topology::fromHostHashes(0, hosts); };
  // Nothing known, or keys already in rank order: rank order (empty).
  EXPECT_TRUE(ranksInLocalOrder(topoOf({1, 1, 1, 1}), {-1, -1, -1, -1}).empty());
  EXPECT_TRUE(ranksInLocalOrder(topoOf({1, 1, 2, 2}), {0, 1, 0, 5}).empty());
  EXPECT_TRUE(ranksInLocalOrder(topoOf({1, 1}), {0}).empty()) << "a key per rank or none";
  // Each host keeps its places; inside, by key.
  EXPECT_EQ(ranksInLocalOrder(topoOf({1, 1, 1, 1, 2, 2, 2, 2}), {0, 2, 1, 3, 3, 2, 1, 0}),
            (std::vector<int32_t>{0, 2, 1, 3, 7, 6, 5, 4}));
  // Keyed ranks first, lowest key first, then the others by rank.
  EXPECT_EQ(ranksInLocalOrder(topoOf({1, 1, 1, 1}), {-1, 1, -1, 0}), (std::vector<int32_t>{3, 1, 0, 2}));
  // Hosts interleaved in rank order.
  EXPECT_EQ(ranksInLocalOrder(topoOf({1, 2, 1, 2}), {1, 0, 0, 1}), (std::vector<int32_t>{2, 1, 0, 3}));
}

TEST(LocalOrder, EveryAllReduceAlgorithmInAnyLocalOrder) {
  InProcessOptions o;
  o.sliceBytes = 256;
  struct Layout {
    std::vector<int32_t> sizes;
    std::vector<int32_t> keys;
  };
  const Layout layouts[] = {
      {{4, 4}, {1, 3, 0, 2, 3, 2, 1, 0}}, {{3, 3, 2}, {2, 0, 1, -1, 0, -1, 1, 0}}, {{6}, {5, 0, 4, 1, 3, 2}}};
  for (const Layout& l : layouts) {
    World w(blockLayout(l.sizes), o);
    const std::vector<int32_t> rankOf = ranksInLocalOrder(w.world.topology(0), l.keys);
    ASSERT_FALSE(rankOf.empty());
    for (const auto& [name, build] : allReduceAlgorithms(w.world.topology(0), static_cast<int32_t>(l.sizes.size()))) {
      for (uint64_t count : {1, 7, 1000}) {
        w.run(name.c_str(), CollKind::AllReduce, inLocalOrder(rankOf, build), count, collInt32, collSum, 0, count == 7);
        if (testing::Test::HasFatalFailure()) return;
      }
      w.run(name.c_str(), CollKind::AllReduce, inLocalOrder(rankOf, build), 333, collFloat32, collMax, 0, false);
      if (testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(TorusHierSkewed, DependenciesHoldWhenRanksRunAhead) {
  InProcessOptions o;
  o.sliceBytes = 64;
  const Builder rs = [](const Topology& t, const CollArgs& a, Schedule* s) { buildHierarchicalReduceScatter(t, a, s); };
  const Builder ag = [](const Topology& t, const CollArgs& a, Schedule* s) { buildHierarchicalAllGather(t, a, s); };
  const Builder bc = [](const Topology& t, const CollArgs& a, Schedule* s) { buildHierarchicalBroadcast(t, a, s); };
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    {
      World w(blockLayout({8}), o);
      w.skew = seed;
      for (const char* forced : {"2x2x2", "4x2"}) {
        const TorusDims dims = dimsOf(w.world.topology(0), forced);
        w.run(forced, CollKind::AllReduce, torusBuilder(dims), 501, collFloat32, collSum, 0, seed % 2 == 0);
        w.run(forced, CollKind::AllReduce, torusBuilder(dims), 333, collInt32, collAvg, 0, seed % 2 == 1);
      }
    }
    for (const auto& layout : {blockLayout({3, 3, 2}), std::vector<int32_t>{0, 1, 0, 2, 1, 0, 2, 1}}) {
      World w(layout, o);
      w.skew = seed;
      for (AlgoId inter : kInter) {
        w.run("hier", CollKind::AllReduce, hierBuilder(interOptions(inter, 3)), 401, collFloat32, collSum, 0,
              seed % 2 == 0);
        w.run("hier", CollKind::AllReduce, hierBuilder(interOptions(inter, 3)), 203, collInt64, collAvg, 0,
              seed % 2 == 1);
      }
    }
    // Rings of 6+ members reuse the reduce-scatter's partial-sum slots; tiny rings make a send
    // lag behind the reduction that wants its slot next.
    InProcessOptions tiny;
    tiny.ringBytes = 64;
    tiny.sliceBytes = 16;
    for (const auto& layout :
         {blockLayout({7, 7}), blockLayout({1, 1, 1, 1, 1, 1, 1}), blockLayout({2, 2, 2, 2, 2, 2})}) {
      World v(layout, tiny);
      v.skew = seed;
      v.run("hier-rs", CollKind::ReduceScatter, rs, 45, collFloat32, collSum, 0, seed % 2 == 0);
    }
    World u(blockLayout({3, 3, 3}), o);
    u.skew = seed;
    for (bool inPlace : {false, true}) {
      u.run("hier-rs", CollKind::ReduceScatter, rs, 77, collFloat32, collSum, 0, inPlace);
      u.run("hier-rs", CollKind::ReduceScatter, rs, 77, collInt32, collAvg, 0, inPlace);
      u.run("hier-ag", CollKind::AllGather, ag, 77, collFloat32, collSum, 0, inPlace);
      u.run("hier-bcast", CollKind::Broadcast, bc, 301, collFloat32, collSum, static_cast<int32_t>(seed * 5 % 9),
            inPlace);
    }
    if (testing::Test::HasFatalFailure()) return;
  }
}

TEST(TorusHierExtended, BiggerSweeps) {
  InProcessOptions o;
  o.ringBytes = 64 * 1024;
  o.sliceBytes = 16 * 1024;
  for (int32_t p = 1; p <= 96; ++p) {
    World w(blockLayout({p}), o);
    for (const char* forced : {"", "2x2x2", "4x4"}) {
      TorusDims d;
      if (!torusDimsFor(w.world.topology(0), forced, &d).ok()) continue;
      const bool big = p % 16 == 0 || p == 17 || p == 8;
      for (uint64_t count : {uint64_t{3}, uint64_t{4099}, big ? uint64_t{100003} : uint64_t{0}}) {
        w.run("torus", CollKind::AllReduce, torusBuilder(d), count, collFloat32, collSum, 0, false);
        w.run("torus", CollKind::AllReduce, torusBuilder(d), count, collFloat64, collAvg, 0, true);
        if (testing::Test::HasFatalFailure()) return;
      }
    }
  }
  for (const auto& sizes : std::vector<std::vector<int32_t>>{{8, 8, 8, 8}, {5, 7, 3, 1, 6}, {1, 1, 1, 1, 1, 1, 1, 2}}) {
    World w(blockLayout(sizes), o);
    const int32_t nhosts = w.world.topology(0).nhosts;
    for (AlgoId inter : kInter) {
      for (uint64_t count : {1, 77, 100003}) {
        w.run("hier", CollKind::AllReduce, hierBuilder(interOptions(inter, nhosts)), count, collFloat32, collSum, 0,
              count % 2 == 1);
        w.run("hier", CollKind::AllReduce, hierBuilder(interOptions(inter, nhosts)), count, collBfloat16, collAvg, 0,
              false);
        if (testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

}  // namespace
}  // namespace coll
