// All-Reduce schedules at 1,000 to 10,000 ranks: results through the in-process executor, every
// rank's step and byte counts against each algorithm's formula, and the schedule cost model
// (src/plan/schedule_cost.h): hand-computed cases and symmetric against exact evaluation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/phases.h"
#include "src/exec/inprocess.h"
#include "src/plan/schedule_cost.h"
#include "tests/unit/schedule_test_data.h"

namespace coll {
namespace {

// Torus: the grid torusDimsFor gives uniform hosts (ranks per host x hosts); TorusBalanced: the
// most balanced 2D/3D grid (what COLL_TORUS_DIMS or a non-uniform placement gives).
enum class Algo {
  Ring,
  Tree,
  RecDoubling,
  Rabenseifner,
  Torus,
  TorusBalanced,
  HierRing,
  HierTree,
  HierTorus,
  HierRecDoubling
};

const char* algoLabel(Algo a) {
  switch (a) {
    case Algo::Ring: return "ring";
    case Algo::Tree: return "tree";
    case Algo::RecDoubling: return "recdoubling";
    case Algo::Rabenseifner: return "rabenseifner";
    case Algo::Torus: return "torus";
    case Algo::TorusBalanced: return "torus(balanced)";
    case Algo::HierRing: return "hier(ring)";
    case Algo::HierTree: return "hier(tree)";
    case Algo::HierTorus: return "hier(torus)";
    case Algo::HierRecDoubling: return "hier(recdoubling)";
  }
  return "?";
}

TorusDims dimsFor(int32_t nranks, int32_t perHost) {
  UniformTopologies t(nranks, perHost);
  TorusDims d;
  Status st = torusDimsFor(t.at(0), "", &d);
  EXPECT_TRUE(st.ok()) << st.message();
  return d;
}

// The builder of one algorithm for a world of nranks with perHost ranks per host.
ScheduleBuilder builderFor(Algo a, const CollArgs& args, int32_t nranks, int32_t perHost) {
  const int32_t hosts = (nranks + perHost - 1) / perHost;
  switch (a) {
    case Algo::Ring: return [args](const Topology& t, Schedule* s) { buildRingAllReduce(t, args, s, 1); };
    case Algo::Tree: return [args](const Topology& t, Schedule* s) { buildDoubleBinaryTreeAllReduce(t, args, s); };
    case Algo::RecDoubling:
      return [args](const Topology& t, Schedule* s) { buildRecursiveDoublingAllReduce(t, args, s); };
    case Algo::Rabenseifner: return [args](const Topology& t, Schedule* s) { buildRabenseifnerAllReduce(t, args, s); };
    case Algo::Torus:
    case Algo::TorusBalanced: {
      const TorusDims d = dimsFor(nranks, a == Algo::Torus ? perHost : 1);
      return [args, d](const Topology& t, Schedule* s) { buildTorusAllReduce(t, args, d, s); };
    }
    case Algo::HierRing:
    case Algo::HierTree:
    case Algo::HierTorus:
    case Algo::HierRecDoubling: {
      AlgoOptions o;
      o.interHost = a == Algo::HierRing    ? AlgoId::Ring
                    : a == Algo::HierTree  ? AlgoId::Tree
                    : a == Algo::HierTorus ? AlgoId::Torus
                                           : AlgoId::RecursiveDoubling;
      if (a == Algo::HierTorus) o.torus = dimsFor(hosts, 1);
      return [args, o](const Topology& t, Schedule* s) { buildHierarchicalAllReduce(t, args, o, s); };
    }
  }
  return nullptr;
}

CollArgs allReduceArgs(uint64_t count, collDataType_t dtype = collFloat32, collRedOp_t op = collSum) {
  CollArgs a;
  a.kind = CollKind::AllReduce;
  a.count = count;
  a.dtype = dtype;
  a.op = op;
  return a;
}

// ---- data through the in-process executor

// Runs one All-Reduce over every rank (out of place) and checks every rank's result bit for bit
// and its input untouched. Schedules are built one rank at a time from UniformTopologies.
void runAndCheck(Algo a, int32_t nranks, int32_t perHost, uint64_t count, collDataType_t dtype, collRedOp_t op) {
  SCOPED_TRACE(std::string(algoLabel(a)) + " p=" + std::to_string(nranks) + " perHost=" + std::to_string(perHost) +
               " count=" + std::to_string(count));
  const CollArgs args = allReduceArgs(count, dtype, op);
  const ScheduleBuilder build = builderFor(a, args, nranks, perHost);
  const size_t es = dataTypeSize(dtype);
  InProcessOptions o;
  o.ringBytes = 256;  // thousands of connections: keep each small
  InProcessWorld world(nranks, perHost, o);
  std::vector<Schedule> schedules(static_cast<size_t>(nranks));
  std::vector<const Schedule*> ptrs(static_cast<size_t>(nranks));
  std::vector<std::vector<std::byte>> send(static_cast<size_t>(nranks)), recv(static_cast<size_t>(nranks));
  std::vector<ExecBuffers> buffers(static_cast<size_t>(nranks));
  UniformTopologies topos(nranks, perHost);
  for (int32_t r = 0; r < nranks; ++r) {
    build(topos.at(r), &schedules[r]);
    ptrs[r] = &schedules[r];
    send[r].resize(count * es);
    recv[r].assign(count * es, std::byte{0x5a});
    for (uint64_t i = 0; i < count; ++i) {
      testutil::storeValue(dtype, send[r].data(), i, testutil::inputValue(dtype, op, nranks, r, i));
    }
    buffers[r].send = send[r].data();
    buffers[r].recv = recv[r].data();
  }
  Status st = runInProcess(ptrs, buffers, world, 1);
  ASSERT_TRUE(st.ok()) << st.message().substr(0, 2000);
  std::vector<std::byte> want(count * es), input(count * es);
  for (uint64_t i = 0; i < count; ++i) {
    testutil::storeValue(dtype, want.data(), i, testutil::expectedValue(dtype, op, nranks, i));
  }
  for (int32_t r = 0; r < nranks; ++r) {
    ASSERT_EQ(0, std::memcmp(recv[r].data(), want.data(), want.size())) << "rank " << r;
    for (uint64_t i = 0; i < count; ++i) {
      testutil::storeValue(dtype, input.data(), i, testutil::inputValue(dtype, op, nranks, r, i));
    }
    ASSERT_EQ(0, std::memcmp(send[r].data(), input.data(), input.size())) << "rank " << r << " input changed";
  }
}

// ---- per-rank counts against the formulas

struct Expect {
  uint64_t sends = 0;  // Send steps with count > 0
  uint64_t bytes = 0;  // bytes those sends carry
};

uint64_t floorLog2(uint64_t n) {
  uint64_t k = 0;
  while ((uint64_t{2} << k) <= n) ++k;
  return k;
}

// Ring reduce-scatter + all-gather over a group of n, member m, of `count` elements: every chunk
// but m's own in the reduce-scatter, every chunk but the next member's (m+1, or m-1 running in
// reverse) in the all-gather.
Expect ringFormula(int64_t n, int64_t m, uint64_t count, size_t es, bool reverse = false) {
  Expect e;
  if (n == 1) return e;
  const int64_t next = ((m + (reverse ? -1 : 1)) % n + n) % n;
  for (int64_t c = 0; c < n; ++c) {
    const uint64_t k = partCount(count, static_cast<int32_t>(n), static_cast<int32_t>(c));
    if (k == 0) continue;
    if (c != m) e.sends++, e.bytes += k * es;
    if (c != next) e.sends++, e.bytes += k * es;
  }
  return e;
}

// Recursive doubling over n members (the first 2(n - p') pairing up): a core member sends the
// whole vector log2 p' times, plus once back to its partner; the partner sends it once.
Expect recDoublingFormula(int64_t n, int64_t m, uint64_t count, size_t es) {
  Expect e;
  if (n == 1 || count == 0) return e;
  const int64_t pp = int64_t{1} << floorLog2(static_cast<uint64_t>(n));
  const int64_t r = n - pp;
  const uint64_t sends =
      m < 2 * r ? (m % 2 == 0 ? 1 : floorLog2(static_cast<uint64_t>(pp)) + 1) : floorLog2(static_cast<uint64_t>(pp));
  e.sends = sends;
  e.bytes = sends * count * es;
  return e;
}

// Rabenseifner: a core member c sends, while halving, everything but its own part c (of p'
// parts), and while doubling its aligned blocks of 1, 2, ..., p'/2 parts; a paired core member
// also the whole vector back; its partner the whole vector once. Empty ranges send nothing.
Expect rabenseifnerFormula(int64_t n, int64_t m, uint64_t count, size_t es) {
  Expect e;
  if (n == 1 || count == 0) return e;
  const int32_t pp = static_cast<int32_t>(int64_t{1} << floorLog2(static_cast<uint64_t>(n)));
  const int64_t r = n - pp;
  auto add = [&](uint64_t elems) {
    if (elems == 0) return;
    e.sends++;
    e.bytes += elems * es;
  };
  if (m < 2 * r && m % 2 == 0) {
    add(count);
    return e;
  }
  const int32_t c = static_cast<int32_t>(m < 2 * r ? m / 2 : m - r);
  auto range = [&](int32_t lo, int32_t hi) { return partStart(count, pp, hi) - partStart(count, pp, lo); };
  int32_t lo = 0, hi = pp;
  for (int32_t mask = pp / 2; mask >= 1; mask /= 2) {
    const int32_t mid = lo + mask;
    const bool upper = (c & mask) != 0;
    add(upper ? range(lo, mid) : range(mid, hi));
    if (upper) lo = mid;
    else hi = mid;
  }
  for (int32_t mask = 1; mask < pp; mask *= 2) {
    const int32_t mine = c & ~(mask - 1);
    add(range(mine, mine + mask));
  }
  if (m < 2 * r) add(count);
  return e;
}

// Torus: per half (the second running its rings in reverse), a ring reduce-scatter then
// all-gather along each dimension of size > 1, over the chunk the member owns by then: 2 *
// sum(d_i - 1) sends per half when every chunk is non-empty.
Expect torusFormula(const TorusDims& d, int64_t member, uint64_t count, size_t es) {
  Expect e;
  const int64_t coord[3] = {member % d.d[0], (member / d.d[0]) % d.d[1], member / (int64_t{d.d[0]} * d.d[1])};
  const int halves = count >= 2 ? 2 : 1;
  for (int h = 0; h < halves; ++h) {
    uint64_t n = halves == 1 ? count : h == 0 ? count / 2 : count - count / 2;
    for (int i = 0; i < 3; ++i) {
      if (d.d[i] == 1) continue;
      const Expect part = ringFormula(d.d[i], coord[i], n, es, h == 1);
      e.sends += part.sends;
      e.bytes += part.bytes;
      n = partCount(n, d.d[i], static_cast<int32_t>(coord[i]));
    }
  }
  return e;
}

// The shape of a double binary tree read back from the schedules: per tree, each member's parent
// (the peer of its cross-host plain Recv for that half), -1 for the root.
struct TreeShape {
  std::vector<int32_t> parent[2];
};

// Depth of each tree (-1 if the parents do not form one tree with one root).
int64_t treeDepth(const std::vector<int32_t>& parent) {
  const int64_t n = static_cast<int64_t>(parent.size());
  int64_t roots = 0, depth = 0;
  std::vector<int32_t> memo(parent.size(), -1);
  for (int64_t m = 0; m < n; ++m) {
    if (parent[m] < 0) roots++;
    // Walk up until a known depth; at most n steps (else a cycle).
    std::vector<int64_t> path;
    int64_t cur = m;
    while (cur >= 0 && memo[cur] < 0 && static_cast<int64_t>(path.size()) <= n) {
      path.push_back(cur);
      cur = parent[cur];
    }
    if (static_cast<int64_t>(path.size()) > n) return -1;
    int64_t d = cur < 0 ? -1 : memo[cur];
    for (auto it = path.rbegin(); it != path.rend(); ++it) memo[*it] = static_cast<int32_t>(++d);
    depth = std::max<int64_t>(depth, memo[m]);
  }
  return roots == 1 ? depth : -1;
}

// Checks, rank by rank, that every schedule's messages and bytes (Send steps with count > 0)
// match the algorithm's formula. Flat algorithms: all sends. Hierarchical ones: the sends inside
// the host are the intra-host ring's, the ones across hosts the inter-host algorithm's over the
// rank's shard. Trees: per member at most 4 messages (interior in one tree, a leaf in the other)
// and at most twice its share, 2 (H - 1) shares in all over the tree's edges, and depth floor(log2 H)
// read back from the schedules (the tree through hosts; the chain inside a host is checked exactly).
void checkCounts(Algo a, int32_t p, int32_t L, uint64_t count) {
  SCOPED_TRACE(std::string(algoLabel(a)) + " p=" + std::to_string(p) + " perHost=" + std::to_string(L) +
               " count=" + std::to_string(count));
  const CollArgs args = allReduceArgs(count);
  const size_t es = 4;
  const ScheduleBuilder build = builderFor(a, args, p, L);
  const int32_t H = (p + L - 1) / L;
  ASSERT_EQ(p % L, 0) << "the formulas assume equal hosts";
  const bool hier = a == Algo::HierRing || a == Algo::HierTree || a == Algo::HierTorus || a == Algo::HierRecDoubling;
  const bool tree = a == Algo::Tree || a == Algo::HierTree;
  const TorusDims flatDims = a == Algo::Torus ? dimsFor(p, L) : a == Algo::TorusBalanced ? dimsFor(p, 1) : TorusDims{};
  const TorusDims hostDims = a == Algo::HierTorus ? dimsFor(H, 1) : TorusDims{};
  // Trees: one tree group per shard (hier) or one (the hosts' heads); members are hosts.
  const int32_t groups = a == Algo::HierTree ? L : 1;
  std::vector<TreeShape> shapes(static_cast<size_t>(groups));
  std::vector<uint64_t> treeBytes(static_cast<size_t>(groups), 0);
  for (auto& sh : shapes)
    sh.parent[0].assign(static_cast<size_t>(H), -2), sh.parent[1].assign(static_cast<size_t>(H), -2);
  UniformTopologies topos(p, L);
  Schedule s;
  for (int32_t r = 0; r < p; ++r) {
    const Topology& topo = topos.at(r);
    build(topo, &s);
    const ScheduleCounts c = countSchedule(s, topo);
    const int32_t l = r % L, h = r / L;
    const uint64_t shard = hier ? partCount(count, L, l) : count;
    const uint64_t shardBase = hier ? partStart(count, L, l) : 0;
    Expect inside, across, total;
    bool exactTotal = true, exactSplit = hier;
    switch (a) {
      case Algo::Ring: total = ringFormula(p, r, count, es); break;
      case Algo::RecDoubling: total = recDoublingFormula(p, r, count, es); break;
      case Algo::Rabenseifner: total = rabenseifnerFormula(p, r, count, es); break;
      case Algo::Torus:
      case Algo::TorusBalanced: total = torusFormula(flatDims, r, count, es); break;
      case Algo::Tree: {
        exactTotal = false;
        // The chain inside the host: up to l-1 (the whole vector), down to l+1 (both halves).
        const uint64_t halves = (count / 2 > 0 ? 1 : 0) + (count - count / 2 > 0 ? 1 : 0);
        inside.sends = (l > 0 ? 1 : 0) + (l + 1 < L ? halves : 0);
        inside.bytes = ((l > 0 ? 1 : 0) + (l + 1 < L ? 1 : 0)) * count * es;
        ASSERT_EQ(c.messages[0], inside.sends) << "rank " << r;
        ASSERT_EQ(c.bytesSent[0], inside.bytes) << "rank " << r;
        if (l > 0) {
          ASSERT_EQ(c.messages[1], 0u) << "rank " << r << ": only a host's first rank crosses hosts";
        }
        break;
      }
      case Algo::HierRing:
        inside = ringFormula(L, l, count, es);
        across = ringFormula(H, h, shard, es);
        break;
      case Algo::HierTorus:
        inside = ringFormula(L, l, count, es);
        across = torusFormula(hostDims, h, shard, es);
        break;
      case Algo::HierRecDoubling:
        inside = ringFormula(L, l, count, es);
        across = recDoublingFormula(H, h, shard, es);
        break;
      case Algo::HierTree:
        exactTotal = false;
        inside = ringFormula(L, l, count, es);
        ASSERT_EQ(c.messages[0], inside.sends) << "rank " << r;
        ASSERT_EQ(c.bytesSent[0], inside.bytes) << "rank " << r;
        break;
    }
    if (exactTotal && !exactSplit) {
      ASSERT_EQ(c.totalMessages(), total.sends) << "rank " << r;
      ASSERT_EQ(c.totalBytesSent(), total.bytes) << "rank " << r;
    }
    if (exactSplit && !tree) {
      ASSERT_EQ(c.messages[0], inside.sends) << "rank " << r << " inside the host";
      ASSERT_EQ(c.bytesSent[0], inside.bytes) << "rank " << r << " inside the host";
      ASSERT_EQ(c.messages[1], across.sends) << "rank " << r << " across hosts";
      ASSERT_EQ(c.bytesSent[1], across.bytes) << "rank " << r << " across hosts";
    }
    if (tree && (a == Algo::HierTree || l == 0)) {
      const int32_t group = a == Algo::HierTree ? l : 0;
      ASSERT_LE(c.messages[1], 4u) << "rank " << r;
      ASSERT_LE(c.bytesSent[1], 2 * shard * es + 2 * es) << "rank " << r;
      treeBytes[group] += c.bytesSent[1];
      if (shard >= 2 && H > 1) {
        TreeShape& sh = shapes[group];
        sh.parent[0][h] = sh.parent[1][h] = -1;
        for (const Step& st : s.steps) {
          if (st.kind != StepKind::Recv || st.count == 0 || topo.sameHost(r, st.peer)) continue;
          const int t = st.dst.offset == shardBase * es ? 0 : 1;
          ASSERT_EQ(sh.parent[t][h], -1) << "rank " << r << " has two parents in tree " << t;
          sh.parent[t][h] = st.peer / L;
        }
      }
    }
  }
  if (!tree) return;
  for (int32_t g = 0; g < groups; ++g) {
    const uint64_t shard = a == Algo::HierTree ? partCount(count, L, g) : count;
    EXPECT_EQ(treeBytes[g], 2 * static_cast<uint64_t>(H - 1) * shard * es) << "tree group " << g;
    if (shard < 2 || H < 2) continue;
    for (int t = 0; t < 2; ++t) {
      EXPECT_EQ(treeDepth(shapes[g].parent[t]), static_cast<int64_t>(floorLog2(static_cast<uint64_t>(H))))
          << "tree " << t << " of group " << g << " over " << H << " hosts";
    }
    if (H % 2 == 0 && H >= 4) {
      std::vector<uint8_t> interior[2] = {std::vector<uint8_t>(static_cast<size_t>(H), 0),
                                          std::vector<uint8_t>(static_cast<size_t>(H), 0)};
      for (int t = 0; t < 2; ++t) {
        for (int32_t m = 0; m < H; ++m) {
          if (shapes[g].parent[t][m] >= 0) interior[t][shapes[g].parent[t][m]] = 1;
        }
      }
      for (int32_t m = 0; m < H; ++m) EXPECT_FALSE(interior[0][m] && interior[1][m]) << "host " << m;
    }
  }
}

// ---- the cost model

LinkModel latencyOnly() {
  LinkModel m;
  m.link[0] = LinkParams{1.0, 1e300};
  m.link[1] = LinkParams{1.0, 1e300};
  m.memoryBytesPerSecond = 1e300;
  return m;
}

CostResult evaluate(Algo a, int32_t p, int32_t L, uint64_t count, const LinkModel& model, CostMode mode) {
  CostOptions o;
  o.mode = mode;
  if (a == Algo::HierTorus) {
    const TorusDims d = dimsFor(p / L, 1);
    o.symmetry.ndims = d.ndims;
    for (int i = 0; i < 3; ++i) o.symmetry.d[i] = d.d[i];
  }
  CostResult r;
  Status st = modelScheduleTime(builderFor(a, allReduceArgs(count), p, L), p, L, model, o, &r);
  EXPECT_TRUE(st.ok()) << algoLabel(a) << " p=" << p << ": " << st.message();
  return r;
}

TEST(ScheduleCost, TwoRanksOnTwoHostsByHand) {
  // Ring over 2 ranks of 1 MiB: each sends half (h = 512 KiB / 50 GB/s) in the reduce-scatter;
  // the all-gather's send streams behind it on the same stream: done at 2h + alpha.
  LinkModel m;
  const CostResult r = evaluate(Algo::Ring, 2, 1, (1u << 20) / 4, m, CostMode::Exact);
  const double h = (512.0 * 1024) / 50e9;
  EXPECT_NEAR(r.seconds, 2 * h + 5e-6, 1e-12);
  EXPECT_EQ(r.transfers, 4u);
  EXPECT_EQ(r.maxPerRank.messages[1], 2u);
  EXPECT_EQ(r.maxPerRank.bytesSent[1], 1u << 20);
}

TEST(ScheduleCost, BandwidthBoundRingMatchesTheFormula) {
  // 16 ranks, 2 hosts, 64 MiB: the two ranks at host boundaries send 2(p-1)/p of the vector over
  // 50 GB/s; slices add (p-1) hops of latency and slice time at most.
  LinkModel m;
  const uint64_t bytes = 64ull << 20;
  const CostResult r = evaluate(Algo::Ring, 16, 8, bytes / 4, m, CostMode::Exact);
  const double bw = 2.0 * 15 / 16 * bytes / 50e9;
  EXPECT_GE(r.seconds, bw);
  EXPECT_LE(r.seconds, bw + 30 * (5e-6 + (128 << 10) / 50e9));
}

TEST(ScheduleCost, PipelinedTreeIsBandwidthBound) {
  // Double binary tree over 16 hosts of one rank, 64 MiB: a member interior in one tree takes in
  // two halves from its children, one from its parent and one as a leaf of the other tree, 2x the
  // vector through its port; slices stream through the 4 levels (not a half per level).
  LinkModel m;
  const uint64_t bytes = 64ull << 20;
  const CostResult r = evaluate(Algo::Tree, 16, 1, bytes / 4, m, CostMode::Exact);
  const double port = 2.0 * bytes / 50e9, hop = 5e-6 + (128 << 10) / 50e9;
  EXPECT_GE(r.seconds, port);
  EXPECT_LE(r.seconds, port + 4 * 4 * hop);
}

TEST(ScheduleCost, LatencyOnlyCountsHops) {
  // With alpha = 1 and infinite bandwidth the model counts the longest chain of messages.
  const LinkModel m = latencyOnly();
  EXPECT_DOUBLE_EQ(evaluate(Algo::Ring, 24, 8, 24 * 5, m, CostMode::Exact).seconds, 2.0 * 23);
  // Torus 8 x 3 (local x hosts): 2 * sum(d_i - 1) hops.
  EXPECT_DOUBLE_EQ(evaluate(Algo::Torus, 24, 8, 24 * 5, m, CostMode::Exact).seconds, 2.0 * (7 + 2));
  // Recursive doubling, p' = largest power of two <= p, r = p - p' paired members: log2 p'
  // exchanges, plus the fold and the unfold; when r <= p'/2 every paired member meets an unpaired
  // one in the last exchange, whose chain is one shorter, so the pairing adds one hop, not two.
  for (int32_t p : {17, 24, 32, 40, 1000}) {
    const int32_t pp = 1 << floorLog2(static_cast<uint64_t>(p)), r = p - pp;
    const double hops = floorLog2(static_cast<uint64_t>(pp)) + (r == 0 ? 0 : r <= pp / 2 ? 1 : 2);
    EXPECT_DOUBLE_EQ(evaluate(Algo::RecDoubling, p, 8, 5, m, CostMode::Exact).seconds, hops) << "p=" << p;
  }
}

TEST(ScheduleCost, SymmetricEvaluationMatchesExact) {
  // 64 ranks on 8 hosts: the algorithms that are the same on every host up to translation,
  // with counts that divide evenly (every host's chunks the same size) and an uneven one.
  LinkModel m;
  for (Algo a : {Algo::Ring, Algo::Torus, Algo::HierRing, Algo::HierTorus}) {
    for (uint64_t count : {uint64_t{64 * 8 * 2 * 4}, uint64_t{1} << 20}) {
      SCOPED_TRACE(std::string(algoLabel(a)) + " count=" + std::to_string(count));
      const CostResult exact = evaluate(a, 64, 8, count, m, CostMode::Exact);
      const CostResult sym = evaluate(a, 64, 8, count, m, CostMode::Symmetric);
      EXPECT_EQ(sym.ranksEvaluated, 8);
      EXPECT_EQ(sym.asymmetricTransfers, 0u);
      EXPECT_NEAR(sym.seconds, exact.seconds, 1e-9 * exact.seconds);
      for (int32_t r = 0; r < 8; ++r) EXPECT_NEAR(sym.rankSeconds[r], exact.rankSeconds[r], 1e-9 * exact.seconds);
    }
  }
  // Chunks of an uneven count differ between hosts: the symmetric evaluation says so.
  const CostResult sym = evaluate(Algo::Ring, 64, 8, 1000, m, CostMode::Symmetric);
  EXPECT_GT(sym.asymmetricTransfers, 0u);
}

TEST(ScheduleCost, RejectsUnmatchedAndAsymmetricSchedules) {
  // Rank 0 sends to rank 1, which never receives.
  ScheduleBuilder broken = [](const Topology& t, Schedule* s) {
    s->begin("broken", collFloat32, collSum);
    if (t.rank == 0) {
      Step st;
      st.kind = StepKind::Send;
      st.peer = 1;
      st.count = 4;
      s->addStep(st);
    }
  };
  CostResult r;
  Status st = modelScheduleTime(broken, 4, 2, LinkModel{}, CostOptions{}, &r);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("no matching receive"), std::string::npos) << st.message();
  // A symmetric evaluation of uneven hosts is refused.
  CostOptions o;
  o.mode = CostMode::Symmetric;
  st = modelScheduleTime(builderFor(Algo::Ring, allReduceArgs(64), 12, 8), 12, 8, LinkModel{}, o, &r);
  EXPECT_EQ(st.code(), collInvalidUsage);
  // So is an exact evaluation beyond the step budget.
  o = CostOptions{};
  o.maxSteps = 100;
  st = modelScheduleTime(builderFor(Algo::Ring, allReduceArgs(64), 64, 8), 64, 8, LinkModel{}, o, &r);
  EXPECT_EQ(st.code(), collInvalidUsage);
}

TEST(ScheduleCost, CountsByLinkClass) {
  // Ring over 16 ranks on 2 hosts: rank 7 sends across (to 8), rank 3 inside.
  const CollArgs args = allReduceArgs(160);
  UniformTopologies topos(16, 8);
  Schedule s;
  buildRingAllReduce(topos.at(7), args, &s);
  ScheduleCounts c = countSchedule(s, topos.at(7));
  EXPECT_EQ(c.steps, 60u);
  EXPECT_EQ(c.kind(StepKind::Send), 30u);
  EXPECT_EQ(c.kind(StepKind::RecvReduce), 15u);
  EXPECT_EQ(c.kind(StepKind::Recv), 15u);
  EXPECT_EQ(c.messages[1], 30u);
  EXPECT_EQ(c.messages[0], 0u);
  EXPECT_EQ(c.bytesSent[1], 2u * 150 * 4);
  EXPECT_EQ(c.receives[0], 30u);
  buildRingAllReduce(topos.at(3), args, &s);
  c = countSchedule(s, topos.at(3));
  EXPECT_EQ(c.messages[0], 30u);
  EXPECT_EQ(c.messages[1], 0u);
}

TEST(ScheduleCost, CountsEveryStepKindOfACompressedSchedule) {
  // The quantization kinds are the last StepKind values: counting them must not spill into the
  // link-class counters next to byKind.
  const CollArgs args = allReduceArgs(4096);
  UniformTopologies topos(4, 4);
  Schedule s;
  buildCompressedAllReduce(topos.at(1), args, 64, &s);
  const ScheduleCounts c = countSchedule(s, topos.at(1));
  uint64_t kinds = 0;
  for (uint64_t k : c.byKind) kinds += k;
  EXPECT_EQ(kinds, c.steps);
  EXPECT_GT(c.kind(StepKind::Quantize), 0u);
  EXPECT_GT(c.kind(StepKind::DequantAccumulate), 0u);
  EXPECT_EQ(c.messages[0], c.kind(StepKind::Send));  // one host: every send stays inside
  EXPECT_EQ(c.messages[1], 0u);
  EXPECT_EQ(c.bytesSent[1], 0u);
}

// ---- at scale: counts (fast tier: 1,000 and 4,096 ranks; 10,000 for the O(1)-per-rank trees)

TEST(SchedulesAtScale, CountsMatchFormulas) {
  // Every algorithm at 1,000 ranks; the O(log p)-step ones at 4,096 and the tree at 10,000 (the
  // hierarchical builders spend O(p) per rank on the host table: 4,096+ is the extended tier).
  const uint64_t counts[] = {7, 100003};
  for (Algo a : {Algo::Ring, Algo::Tree, Algo::RecDoubling, Algo::Rabenseifner, Algo::Torus, Algo::HierRing,
                 Algo::HierTree, Algo::HierTorus, Algo::HierRecDoubling}) {
    for (uint64_t count : counts) {
      checkCounts(a, 1000, 8, count);
      if (testing::Test::HasFatalFailure()) return;
    }
  }
  for (Algo a : {Algo::Tree, Algo::RecDoubling, Algo::Rabenseifner}) {
    for (uint64_t count : counts) {
      checkCounts(a, 4096, 8, count);
      if (testing::Test::HasFatalFailure()) return;
    }
  }
  for (uint64_t count : counts) checkCounts(Algo::Tree, 10000, 8, count);
}

TEST(SchedulesAtScaleExtended, CountsMatchFormulasEverywhere) {
  for (int32_t p : {1000, 4096, 10000}) {
    for (Algo a : {Algo::Ring, Algo::Tree, Algo::RecDoubling, Algo::Rabenseifner, Algo::Torus, Algo::TorusBalanced,
                   Algo::HierRing, Algo::HierTree, Algo::HierTorus, Algo::HierRecDoubling}) {
      for (uint64_t count : {uint64_t{1}, uint64_t{7}, uint64_t{100003}}) {
        checkCounts(a, p, 8, count);
        if (testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

// ---- at scale: results

TEST(SchedulesAtScale, ResultsAt1000Ranks) {
  runAndCheck(Algo::Ring, 1000, 8, 3, collFloat32, collSum);
  for (Algo a : {Algo::Tree, Algo::RecDoubling, Algo::Rabenseifner, Algo::Torus, Algo::HierTree, Algo::HierRing}) {
    runAndCheck(a, 1000, 8, 5, collInt32, collSum);
    if (testing::Test::HasFatalFailure()) return;
  }
}

// Every schedule of the world is held at once: the algorithms with few steps per rank (O(log p)
// or a balanced 3D torus: about 4 * sum(d_i - 1) sends); the ring and the torus over (ranks per
// host x hosts) hold O(p) steps per rank, 10^8 steps at 10,000 ranks, and run at 1,000 above.
TEST(SchedulesAtScaleExtended, ResultsAt4096And10000Ranks) {
  for (int32_t p : {4096, 10000}) {
    for (Algo a : {Algo::Tree, Algo::RecDoubling, Algo::Rabenseifner, Algo::TorusBalanced, Algo::HierTree,
                   Algo::HierRecDoubling}) {
      runAndCheck(a, p, 8, 5, collInt32, collSum);
      if (testing::Test::HasFatalFailure()) return;
    }
    runAndCheck(Algo::Tree, p, 8, 4, collFloat32, collAvg);
    if (testing::Test::HasFatalFailure()) return;
  }
}

// The modelled table's shape at scale: exact trees at 10,000 ranks and symmetric rings agree
// with the exact evaluation at 1,024.
TEST(SchedulesAtScaleExtended, ModelAt10000Ranks) {
  LinkModel m;
  const CostResult tree = evaluate(Algo::Tree, 10000, 8, 1 << 18, m, CostMode::Exact);
  EXPECT_GT(tree.seconds, 0);
  const CostResult exact = evaluate(Algo::Ring, 1024, 8, 1 << 18, m, CostMode::Exact);
  const CostResult sym = evaluate(Algo::Ring, 1024, 8, 1 << 18, m, CostMode::Symmetric);
  EXPECT_NEAR(sym.seconds, exact.seconds, 1e-9 * exact.seconds);
}

}  // namespace
}  // namespace coll
