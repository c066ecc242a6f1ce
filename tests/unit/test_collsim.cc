// The fabric simulator (src/sim): alpha-beta closed forms on a non-blocking fabric, agreement
// with the schedule cost model where nothing contends, max-min sharing, oversubscription, the
// routes of every fabric, symmetric against exact runs, and bad input.
#include <gtest/gtest.h>

#include <unistd.h>
#include <array>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "algorithms/algorithms.h"
#include "src/sim/flow_sim.h"

namespace coll::sim {
namespace {

constexpr double kAlpha = 5e-6;
constexpr double kBeta = 50e9;  // NIC bytes per second

// Parameters where only the NICs and per-message latency count: local steps free, one slice per
// message (no pipelining inside a message).
SimParams plainParams() {
  SimParams p;
  p.model.link[0] = LinkParams{kAlpha, kBeta};
  p.model.link[1] = LinkParams{kAlpha, kBeta};
  p.model.memoryBytesPerSecond = 1e18;
  p.model.defaultSliceBytes = 1ull << 40;
  return p;
}

FabricSpec flatSpec(int32_t perNode = 1) {
  FabricSpec f;
  f.kind = FabricKind::NonBlocking;
  f.ranksPerNode = perNode;
  f.nicBytesPerSecond = kBeta;
  f.intraBytesPerSecond = kBeta;
  return f;
}

std::vector<int32_t> linear(int32_t hosts) {
  std::vector<int32_t> v(static_cast<size_t>(hosts));
  for (int32_t h = 0; h < hosts; ++h) v[h] = h;
  return v;
}

CollArgs allReduceArgs(uint64_t bytes) {
  CollArgs a;
  a.kind = CollKind::AllReduce;
  a.count = bytes / 4;
  a.dtype = collFloat32;
  a.op = collSum;
  return a;
}

double simulate(const ScheduleBuilder& build, int32_t nranks, const FabricSpec& spec, const SimParams& params,
                const std::vector<int32_t>& nodeOfHost, SimResult* out = nullptr) {
  Fabric fabric;
  const int32_t hosts = (nranks + spec.ranksPerNode - 1) / spec.ranksPerNode;
  EXPECT_TRUE(Fabric::make(spec, hosts, &fabric).ok());
  SimResult r;
  const Status st = simulateSchedules(build, nranks, fabric, nodeOfHost, params, &r);
  EXPECT_TRUE(st.ok()) << st.message();
  if (out != nullptr) *out = r;
  return r.seconds;
}

TEST(CollSim, RingAllReduceMatchesClosedForm) {
  const int32_t p = 8;
  const uint64_t n = 64ull << 20;
  const CollArgs args = allReduceArgs(n);
  const double t = simulate([&](const Topology& topo, Schedule* s) { buildRingAllReduce(topo, args, s); }, p,
                            flatSpec(), plainParams(), linear(p));
  const double expect = 2.0 * (p - 1) * (kAlpha + static_cast<double>(n) / (p * kBeta));
  EXPECT_NEAR(t, expect, 0.02 * expect);
}

TEST(CollSim, RecursiveDoublingMatchesClosedForm) {
  const int32_t p = 16;
  const uint64_t n = 1ull << 20;
  const CollArgs args = allReduceArgs(n);
  const double t = simulate([&](const Topology& topo, Schedule* s) { buildRecursiveDoublingAllReduce(topo, args, s); },
                            p, flatSpec(), plainParams(), linear(p));
  const double expect = std::log2(p) * (kAlpha + static_cast<double>(n) / kBeta);
  EXPECT_NEAR(t, expect, 0.02 * expect);
}

TEST(CollSim, RabenseifnerMatchesClosedForm) {
  const int32_t p = 16;
  const uint64_t n = 16ull << 20;
  const CollArgs args = allReduceArgs(n);
  const double t = simulate([&](const Topology& topo, Schedule* s) { buildRabenseifnerAllReduce(topo, args, s); }, p,
                            flatSpec(), plainParams(), linear(p));
  const double expect = 2.0 * std::log2(p) * kAlpha + 2.0 * (p - 1) / p * static_cast<double>(n) / kBeta;
  EXPECT_NEAR(t, expect, 0.02 * expect);
}

// Where no link carries two flows at once, the fabric is the schedule model's two port classes.
// (Recursive doubling's rounds overlap on a rank's NIC when sliced: the model serves them first
// come first served, the fabric shares; so it runs with whole-message slices here.)
TEST(CollSim, AgreesWithScheduleModelWithoutContention) {
  const int32_t p = 32, perNode = 4;
  SimParams params;  // default latencies, memory bandwidth and 128 KiB slices: pipelining counts
  params.model.link[0].bytesPerSecond = 200e9;
  params.model.link[1].bytesPerSecond = kBeta;
  FabricSpec spec = flatSpec(perNode);
  spec.intraBytesPerSecond = 200e9;
  for (uint64_t n : {64ull << 10, 8ull << 20}) {
    const CollArgs args = allReduceArgs(n);
    for (int algo = 0; algo < 2; ++algo) {
      params.model.defaultSliceBytes = algo == 0 ? 128u << 10 : 1ull << 40;
      ScheduleBuilder build = [&](const Topology& topo, Schedule* s) {
        if (algo == 0) buildRingAllReduce(topo, args, s);
        else buildRecursiveDoublingAllReduce(topo, args, s);
      };
      CostResult model;
      ASSERT_TRUE(modelScheduleTime(build, p, perNode, params.model, CostOptions{}, &model).ok());
      const double t = simulate(build, p, spec, params, linear(p / perNode));
      EXPECT_NEAR(t, model.seconds, 1e-3 * model.seconds) << "algo " << algo << " bytes " << n;
    }
  }
}

// One Send per listed (from, to, elements), all at time 0.
ScheduleBuilder sendsBuilder(const std::vector<std::array<int32_t, 3>>& msgs) {
  return [msgs](const Topology& topo, Schedule* s) {
    s->begin("test", collFloat32, collSum);
    for (const auto& m : msgs) {
      Step st;
      st.count = static_cast<uint64_t>(m[2]);
      if (m[0] == topo.rank) {
        st.kind = StepKind::Send;
        st.peer = m[1];
        st.src = sendAt(0);
        s->addStep(st);
      } else if (m[1] == topo.rank) {
        st.kind = StepKind::Recv;
        st.peer = m[0];
        st.dst = recvAt(0);
        s->addStep(st);
      }
    }
    s->finalizePeers();
  };
}

TEST(CollSim, TwoFlowsOnOneLinkGetHalfEach) {
  const int32_t n = 1 << 20;  // elements
  const double bytes = 4.0 * n;
  const double one = simulate(sendsBuilder({{0, 2, n}}), 3, flatSpec(), plainParams(), linear(3));
  const double two = simulate(sendsBuilder({{0, 2, n}, {1, 2, n}}), 3, flatSpec(), plainParams(), linear(3));
  EXPECT_NEAR(one, kAlpha + bytes / kBeta, 1e-9);
  EXPECT_NEAR(two, kAlpha + 2 * bytes / kBeta, 1e-9);
}

// Three flows into rank 3 get a third of its NIC each; rank 1's other flow, to rank 4, gets the
// two thirds of rank 1's NIC its flow to rank 3 leaves (max-min), not half (an equal split per
// link), and the whole NIC once the others end: 3n bytes take 4n / beta (an equal split: 4.5n).
TEST(CollSim, MaxMinGivesTheUnusedShareToTheUnconstrainedFlow) {
  const int32_t n = 1 << 18;
  const double bytes = 4.0 * n;
  const double t =
      simulate(sendsBuilder({{0, 3, n}, {1, 3, n}, {2, 3, n}, {1, 4, 3 * n}}), 5, flatSpec(), plainParams(), linear(5));
  EXPECT_NEAR(t, kAlpha + 4 * bytes / kBeta, 1e-9);
}

// Four ranks on one leaf each send to one on the other: through one uplink of 4 NICs' bandwidth
// each gets a NIC; at 2:1 oversubscription half.
TEST(CollSim, OversubscriptionSlowsCrossLeafTraffic) {
  const int32_t n = 1 << 20;
  const double bytes = 4.0 * n;
  FabricSpec spec = flatSpec();
  spec.kind = FabricKind::FatTree2;
  spec.leafPorts = 4;
  spec.leafUplinks = 1;
  const auto build = sendsBuilder({{0, 4, n}, {1, 5, n}, {2, 6, n}, {3, 7, n}});
  const double full = simulate(build, 8, spec, plainParams(), linear(8));
  spec.oversubscription = 2;
  const double half = simulate(build, 8, spec, plainParams(), linear(8));
  EXPECT_NEAR(full, kAlpha + bytes / kBeta, 1e-9);
  EXPECT_NEAR(half, kAlpha + 2 * bytes / kBeta, 1e-9);
}

// A ring whose every hop crosses leaves (hosts alternate between two leaves): at 2:1 each leaf's
// uplink carries 4 flows at half a NIC, so the ring's bandwidth term doubles.
TEST(CollSim, OversubscribedRingAllReduceRunsAtTheUplinkShare) {
  const int32_t p = 8;
  const uint64_t n = 64ull << 20;
  const CollArgs args = allReduceArgs(n);
  FabricSpec spec = flatSpec();
  spec.kind = FabricKind::FatTree2;
  spec.leafPorts = 4;
  spec.leafUplinks = 1;
  spec.oversubscription = 2;
  const std::vector<int32_t> alternate = {0, 4, 1, 5, 2, 6, 3, 7};
  const double t = simulate([&](const Topology& topo, Schedule* s) { buildRingAllReduce(topo, args, s); }, p, spec,
                            plainParams(), alternate);
  const double expect = 2.0 * (p - 1) * (kAlpha + static_cast<double>(n) / (p * kBeta / 2));
  EXPECT_NEAR(t, expect, 0.02 * expect);
}

std::vector<int32_t> routeOf(const Fabric& f, int32_t a, int32_t b, int32_t* switches) {
  std::vector<int32_t> path;
  f.route(a, b, &path, switches);
  return path;
}

TEST(CollSim, FatTreeRoutesAndEcmp) {
  FabricSpec spec = flatSpec(4);
  spec.kind = FabricKind::FatTree2;
  spec.leafPorts = 8;
  spec.leafUplinks = 4;
  Fabric f;
  ASSERT_TRUE(Fabric::make(spec, 8, &f).ok());
  int32_t sw = 0;
  EXPECT_EQ(routeOf(f, 0, 1, &sw).size(), 2u);  // same node: NVLink out and in
  EXPECT_EQ(sw, 0);
  EXPECT_EQ(routeOf(f, 0, 4, &sw).size(), 2u);  // same leaf
  EXPECT_EQ(sw, 1);
  EXPECT_EQ(routeOf(f, 0, 8, &sw).size(), 4u);  // across leaves: up, spine, down
  EXPECT_EQ(sw, 3);
  // ECMP: the same pair always takes the same spine; many pairs use every spine.
  std::vector<int> spineUse(4, 0);
  for (int32_t a = 0; a < 8; ++a) {
    for (int32_t b = 8; b < 32; ++b) {
      const auto p1 = routeOf(f, a, b, &sw), p2 = routeOf(f, a, b, &sw);
      EXPECT_EQ(p1, p2);
      spineUse[f.links()[p1[1]].to]++;
    }
  }
  for (int u = 0; u < 4; ++u) EXPECT_GT(spineUse[u], 0) << "spine " << u;

  spec.kind = FabricKind::FatTree3;
  spec.podLeaves = 2;
  spec.aggUplinks = 2;
  ASSERT_TRUE(Fabric::make(spec, 16, &f).ok());  // 64 NICs, 8 leaves, 4 pods
  EXPECT_EQ(routeOf(f, 0, 8, &sw).size(), 4u);   // same pod
  EXPECT_EQ(sw, 3);
  EXPECT_EQ(routeOf(f, 0, 63, &sw).size(), 6u);  // across pods: through a core
  EXPECT_EQ(sw, 5);
  EXPECT_EQ(f.links()[routeOf(f, 0, 63, &sw)[2]].tier, LinkTier::AggUp);
}

TEST(CollSim, RailRoutes) {
  FabricSpec spec = flatSpec(8);
  spec.kind = FabricKind::Rail;
  spec.leafPorts = 4;  // nodes per rail leaf
  spec.leafUplinks = 2;
  Fabric f;
  ASSERT_TRUE(Fabric::make(spec, 8, &f).ok());
  int32_t sw = 0;
  EXPECT_EQ(routeOf(f, 3, 8 + 3, &sw).size(), 2u);  // GPU 3 of nodes 0 and 1: rail leaf 3
  EXPECT_EQ(sw, 1);
  EXPECT_EQ(routeOf(f, 3, 8 + 5, &sw).size(), 4u);  // another rail: through a spine
  EXPECT_EQ(sw, 3);
  EXPECT_EQ(routeOf(f, 3, 5 * 8 + 3, &sw).size(), 4u);  // same rail, another rail leaf
}

TEST(CollSim, TorusDimensionOrderShortestWay) {
  FabricSpec spec = flatSpec(1);
  spec.kind = FabricKind::Torus;
  spec.torusDims[0] = 4;
  spec.torusDims[1] = 4;
  Fabric f;
  ASSERT_TRUE(Fabric::make(spec, 16, &f).ok());
  int32_t sw = 0;
  // (0,0) -> (3,3): one hop back round each dimension, dimension 0 first.
  auto path = routeOf(f, 0, 15, &sw);
  ASSERT_EQ(path.size(), 4u);
  EXPECT_EQ(sw, 3);
  EXPECT_EQ(f.linkName(path[1]), "router0->dim0-");
  EXPECT_EQ(f.linkName(path[2]), "router3->dim1-");
  // (0,0) -> (2,1): two hops + in dimension 0, then one in dimension 1.
  path = routeOf(f, 0, 6, &sw);
  ASSERT_EQ(path.size(), 5u);
  EXPECT_EQ(f.linkName(path[1]), "router0->dim0+");
  EXPECT_EQ(f.linkName(path[2]), "router1->dim0+");
  EXPECT_EQ(f.linkName(path[3]), "router2->dim1+");
  spec.torusDims[1] = 3;
  EXPECT_FALSE(Fabric::make(spec, 16, &f).ok());  // 4x3 is not 16 nodes
}

TEST(CollSim, DragonflyMinimalAndValiant) {
  FabricSpec spec = flatSpec(1);
  spec.kind = FabricKind::Dragonfly;
  spec.routersPerGroup = 4;
  spec.nodesPerRouter = 2;
  Fabric f;
  ASSERT_TRUE(Fabric::make(spec, 64, &f).ok());  // 32 routers, 8 groups
  ASSERT_EQ(f.groups(), 8);
  int32_t sw = 0;
  EXPECT_EQ(routeOf(f, 0, 1, &sw).size(), 2u);  // same router
  EXPECT_EQ(sw, 1);
  EXPECT_EQ(routeOf(f, 0, 2, &sw).size(), 3u);  // same group: one local link
  int globalsMinimal = 0, globalsValiant = 0;
  size_t longestMinimal = 0, shortestValiant = 100;
  std::vector<int32_t> path;
  for (int32_t b = 8; b < 64; ++b) {
    f.route(0, b, &path, &sw);
    longestMinimal = std::max(longestMinimal, path.size());
    for (int32_t l : path) globalsMinimal += f.links()[l].tier == LinkTier::Global;
  }
  spec.valiant = true;
  ASSERT_TRUE(Fabric::make(spec, 64, &f).ok());
  for (int32_t b = 8; b < 64; ++b) {
    f.route(0, b, &path, &sw);
    shortestValiant = std::min(shortestValiant, path.size());
    for (int32_t l : path) globalsValiant += f.links()[l].tier == LinkTier::Global;
  }
  EXPECT_EQ(globalsMinimal, 56);      // one global link per message to another group
  EXPECT_EQ(globalsValiant, 2 * 56);  // two: via an intermediate group
  EXPECT_LE(longestMinimal, 5u);      // NIC, local, global, local, NIC
  EXPECT_GE(shortestValiant, 4u);
}

// Symmetric runs against exact ones where the fabric is symmetric under the host translation.
TEST(CollSim, SymmetricAgreesWithExactOnRing) {
  CollectiveSim in;
  in.kind = CollKind::AllReduce;
  in.count = (16ull << 20) / 4;
  in.algo = "ring";
  in.nranks = 128;
  in.fabric.kind = FabricKind::FatTree2;
  in.fabric.leafPorts = 16;
  in.fabric.leafUplinks = 4;
  in.autoMode = false;
  CollectiveSimResult exact, sym;
  in.params.cost.mode = CostMode::Exact;
  ASSERT_TRUE(simulateCollective(in, &exact).ok());
  in.params.cost.mode = CostMode::Symmetric;
  const Status st = simulateCollective(in, &sym);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(sym.sim.ranksEvaluated, 8);
  EXPECT_NEAR(sym.sim.seconds, exact.sim.seconds, 0.01 * exact.sim.seconds);
}

TEST(CollSim, EveryCollectiveRunsThroughThePlanner) {
  for (CollKind kind : {CollKind::AllReduce, CollKind::AllGather, CollKind::ReduceScatter, CollKind::Broadcast,
                        CollKind::Reduce, CollKind::AlltoAll}) {
    CollectiveSim in;
    in.kind = kind;
    in.count = 1 << 14;
    in.nranks = 32;
    in.fabric.kind = FabricKind::FatTree3;
    in.fabric.leafPorts = 8;
    in.fabric.leafUplinks = 2;
    in.fabric.podLeaves = 2;
    in.fabric.aggUplinks = 2;
    CollectiveSimResult r;
    const Status st = simulateCollective(in, &r);
    ASSERT_TRUE(st.ok()) << collKindName(kind) << ": " << st.message();
    EXPECT_GT(r.sim.seconds, 0) << collKindName(kind);
    EXPECT_FALSE(r.algorithm.empty());
  }
}

TEST(CollSim, TorusGridIsTheOneAsked) {
  // 64 ranks, 8 per node: the torus All-Reduce on a 8x8 grid and on 4x16, as COLL_TORUS_DIMS
  // would give a communicator; each runs its own schedules (different dimensions, other times).
  CollectiveSim in;
  in.kind = CollKind::AllReduce;
  in.count = 1 << 20;
  in.nranks = 64;
  in.fabric.kind = FabricKind::NonBlocking;
  in.algo = "torus";
  CollectiveSimResult a, b;
  in.torusDims = "8x8";
  ASSERT_TRUE(simulateCollective(in, &a).ok());
  in.torusDims = "4x16";
  ASSERT_TRUE(simulateCollective(in, &b).ok());
  EXPECT_NE(a.algorithm.find("8x8"), std::string::npos) << a.algorithm;
  EXPECT_NE(b.algorithm.find("4x16"), std::string::npos) << b.algorithm;
  EXPECT_NE(a.sim.seconds, b.sim.seconds);
  in.torusDims = "3x7";
  CollectiveSimResult c;
  const Status st = simulateCollective(in, &c);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("COLL_TORUS_DIMS"), std::string::npos) << st.message();
}

TEST(CollSim, BadInputIsAClearError) {
  FabricKind k;
  Status st = parseFabricKind("mesh", &k);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("unknown fabric 'mesh'"), std::string::npos);
  CollectiveSim in;
  in.count = 1024;
  in.nranks = 0;
  CollectiveSimResult r;
  st = simulateCollective(in, &r);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("0 ranks"), std::string::npos);
  // A placement file with the wrong number of hosts, and one placing a node twice.
  char path[] = "/tmp/collsim_placementXXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "0\n1\n1\n", 6), 6);
  close(fd);
  in.nranks = 16;  // 2 hosts of 8
  ASSERT_TRUE(parsePlacement(std::string("file:") + path, &in.placement).ok());
  in.fabricNodes = 4;
  st = simulateCollective(in, &r);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("more than the 2 hosts"), std::string::npos) << st.message();
  in.nranks = 24;  // 3 hosts
  st = simulateCollective(in, &r);
  EXPECT_NE(st.message().find("node 1 placed twice"), std::string::npos) << st.message();
  unlink(path);
  EXPECT_FALSE(parsePlacement("spread", &in.placement).ok());
}

// At scale, by host symmetry (the extended tier): the torus over hosts of 8 ranks is translation
// invariant, the planner's hierarchical choices at this size are not.
TEST(CollSimExtended, SixteenThousandRanksBySymmetry) {
  CollectiveSim in;
  in.kind = CollKind::AllReduce;
  in.count = (1ull << 30) / 4;
  in.nranks = 16384;
  in.algo = "torus";
  in.fabric.kind = FabricKind::FatTree3;
  CollectiveSimResult r;
  const Status st = simulateCollective(in, &r);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(r.sim.mode, CostMode::Symmetric);
  // No faster than the NICs allow: 2 (p-1)/p of the message through each rank's NIC or NVLink.
  EXPECT_GT(r.sim.seconds, 2.0 * (1ull << 30) / 200e9);
}

}  // namespace
}  // namespace coll::sim
