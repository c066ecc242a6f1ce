// The planner choosing by simulated cost (COLL_TOPO_FABRIC): the fabric description's parser, the
// fabric tuner against the simulator run by hand, its budgets, and a communicator using it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "src/plan/planner.h"
#include "src/plan/schedule_cost.h"
#include "src/sim/fabric_description.h"
#include "src/sim/fabric_tuner.h"
#include "src/sim/flow_sim.h"
#include "tests/unit/comm_threads.h"

namespace coll::sim {
namespace {

TEST(FabricDescription, KindFirstThenKeys) {
  FabricDescription d;
  ASSERT_TRUE(parseFabricDescription("fattree2, oversub=4,nic=25 ,leaf-ports=16,uplinks=4,placement=random:7,"
                                     "alpha-inter=3,hop=250,slice=256K,work=1e6",
                                     &d)
                  .ok());
  EXPECT_EQ(d.fabric.kind, FabricKind::FatTree2);
  EXPECT_DOUBLE_EQ(d.fabric.oversubscription, 4);
  EXPECT_DOUBLE_EQ(d.fabric.nicBytesPerSecond, 25e9);
  EXPECT_EQ(d.fabric.leafPorts, 16);
  EXPECT_EQ(d.fabric.leafUplinks, 4);
  EXPECT_EQ(d.placement.kind, PlacementKind::Random);
  EXPECT_EQ(d.placement.seed, 7u);
  EXPECT_DOUBLE_EQ(d.model.link[1].alphaSeconds, 3e-6);
  EXPECT_DOUBLE_EQ(d.fabric.hopSeconds, 250e-9);
  EXPECT_EQ(d.model.defaultSliceBytes, 256u << 10);
  EXPECT_EQ(d.maxWork, 1'000'000u);
}

TEST(FabricDescription, FileWithCommentsAndLines) {
  char path[] = "/tmp/coll_fabric_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string text = "# the cluster\nfabric=torus   # 3D\ntorus=4x4x2\ntorus-link=25, hop=100\n\n";
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  FabricDescription d;
  const Status st = parseFabricDescription(std::string("@") + path, &d);
  unlink(path);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(d.fabric.kind, FabricKind::Torus);
  EXPECT_EQ(d.fabric.torusDims[0], 4);
  EXPECT_EQ(d.fabric.torusDims[2], 2);
  EXPECT_DOUBLE_EQ(d.fabric.torusLinkBytesPerSecond, 25e9);
  EXPECT_DOUBLE_EQ(d.fabric.hopSeconds, 100e-9);
}

TEST(FabricDescription, BadInputNamesWhatIsWrong) {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c :
       {Case{"", "empty"}, Case{"fattree9", "fattree9"}, Case{"fattree2,speed=3", "unknown key 'speed'"},
        Case{"fattree2,nic=-1", "nic=-1"}, Case{"fattree2,oversub=x", "oversub=x"},
        Case{"fattree2,torus", "not key=value"}, Case{"torus,torus=4x", "torus=4x"},
        Case{"dragonfly,routing=fast", "routing=fast"}, Case{"@/nonexistent/fabric", "cannot be read"},
        Case{"fattree2,leaf-ports=0", "leaf-ports=0"}}) {
    FabricDescription d;
    const Status st = parseFabricDescription(c.text, &d);
    EXPECT_FALSE(st.ok()) << c.text;
    EXPECT_NE(st.message().find(c.says), std::string::npos) << c.text << ": " << st.message();
  }
}

// An All-Reduce on a two-tier fat-tree: by default 64 ranks, 4 per node, 8-port leaves with 2
// uplinks each.
struct SmallCluster {
  static constexpr int32_t kRanks = 64, kPerNode = 4;
  CollectiveSim sim;
  Topology topo0;
  SmallCluster(double oversub, uint64_t bytes, int32_t ranks = kRanks, int32_t perNode = kPerNode,
               int32_t leafPorts = 8, int32_t uplinks = 2) {
    sim.kind = CollKind::AllReduce;
    sim.count = bytes / 4;
    sim.nranks = ranks;
    sim.fabric.kind = FabricKind::FatTree2;
    sim.fabric.ranksPerNode = perNode;
    sim.fabric.leafPorts = leafPorts;
    sim.fabric.leafUplinks = uplinks;
    sim.fabric.oversubscription = oversub;
    UniformTopologies topos(ranks, perNode);
    topo0 = topos.at(0);
  }
  FabricDescription description() const {
    FabricDescription d;
    d.fabric = sim.fabric;
    d.model = sim.params.model;
    return d;
  }
};

// What the planner picks with the tuner, and the same pick made by hand from simulateCollective
// with each algorithm forced.
struct Picks {
  PlanChoice tuned, model;
  std::string tunedName;
  double tunedSeconds = 0, bestForced = -1, modelSimulated = 0;
};
Picks pick(double oversub, uint64_t bytes) {
  SmallCluster c(oversub, bytes);
  Picks out;
  std::shared_ptr<const FabricTuner> tuner;
  EXPECT_TRUE(FabricTuner::make(c.description(), c.topo0, &tuner).ok());
  PlannerInputs pin;
  plannerInputsFor(c.sim, &c.topo0, &pin);
  const CollArgs args = callArgsFor(c.sim);
  EXPECT_TRUE(planCollective(pin, args, &out.model).ok());
  EXPECT_FALSE(out.model.tuned);
  pin.tuner = tuner;
  EXPECT_TRUE(planCollective(pin, args, &out.tuned).ok());
  EXPECT_TRUE(out.tuned.tuned);
  out.tunedName = describeChoice(out.tuned.algo, out.tuned.options, 0);
  out.tunedSeconds = out.tuned.predictedSeconds;
  // Each algorithm forced through collsim's path (hierarchical with the model's split, so the
  // tuner, which tries every split, can only match or beat it there).
  for (int i = 0; i < out.model.ncandidates; ++i) {
    CollectiveSim forced = c.sim;
    forced.algo = algoName(out.model.candidates[i].algo);
    CollectiveSimResult r;
    EXPECT_TRUE(simulateCollective(forced, &r).ok()) << forced.algo;
    if (out.bestForced < 0 || r.sim.seconds < out.bestForced) out.bestForced = r.sim.seconds;
  }
  CollectiveSimResult r;
  EXPECT_TRUE(simulateCollective(c.sim, &r).ok());
  out.modelSimulated = r.sim.seconds;
  return out;
}

TEST(FabricTuner, PicksTheFastestSimulatedCandidate) {
  const Picks p = pick(4, 8 << 20);
  // Its time is the simulator's, at least as good as every algorithm forced by hand and the
  // model's own choice.
  EXPECT_LE(p.tunedSeconds, p.bestForced * (1 + 1e-9)) << p.tunedName;
  EXPECT_LE(p.tunedSeconds, p.modelSimulated * (1 + 1e-9));
  // Every candidate was re-priced: the chosen one is the minimum of the list.
  for (int i = 0; i < p.tuned.ncandidates; ++i) EXPECT_GE(p.tuned.candidates[i].seconds, p.tunedSeconds);
}

TEST(FabricTuner, OversubscriptionChangesTheWinner) {
  // On this fabric the model (which has no switches) picks the same for both; the simulation
  // does not, and the model's pick is measurably slower on the oversubscribed one.
  const Picks full = pick(1, 8 << 20), over = pick(4, 8 << 20);
  EXPECT_EQ(describeChoice(full.model.algo, full.model.options, 0),
            describeChoice(over.model.algo, over.model.options, 0));
  EXPECT_NE(full.tunedName, over.tunedName);
  EXPECT_GT(over.modelSimulated, 1.2 * over.tunedSeconds) << over.tunedName;
}

TEST(FabricTuner, PastItsBudgetTheModelDecides) {
  SmallCluster c(4, 8 << 20);
  FabricDescription d = c.description();
  d.maxWork = 1;
  std::shared_ptr<const FabricTuner> tuner;
  ASSERT_TRUE(FabricTuner::make(d, c.topo0, &tuner).ok());
  PlannerInputs pin;
  plannerInputsFor(c.sim, &c.topo0, &pin);
  const CollArgs args = callArgsFor(c.sim);
  PlanChoice model, tuned;
  ASSERT_TRUE(planCollective(pin, args, &model).ok());
  pin.tuner = tuner;
  ASSERT_TRUE(planCollective(pin, args, &tuned).ok());
  EXPECT_FALSE(tuned.tuned);
  EXPECT_EQ(tuned.algo, model.algo);
  EXPECT_DOUBLE_EQ(tuned.predictedSeconds, model.predictedSeconds);
  Candidate one = model.candidates[0];
  const Status st = tuner->price(pin, args, &one);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("work budget"), std::string::npos) << st.message();
}

TEST(FabricTuner, ScatteredHostsRunInFabricOrder) {
  // Hosts placed at random on the leaves: a ring in rank order crosses the oversubscribed
  // uplinks at almost every hop; in fabric order (hosts sorted by node) once per leaf.
  SmallCluster c(4, 8 << 20);
  c.sim.algo = "ring";
  FabricDescription d = c.description();
  ASSERT_TRUE(parsePlacement("random:3", &d.placement).ok());
  std::shared_ptr<const FabricTuner> tuner;
  ASSERT_TRUE(FabricTuner::make(d, c.topo0, &tuner).ok());
  ASSERT_NE(tuner->hostOrder(), nullptr);
  const std::vector<int32_t>& order = *tuner->hostOrder();
  ASSERT_EQ(order.size(), static_cast<size_t>(SmallCluster::kRanks / SmallCluster::kPerNode));
  std::vector<int32_t> node;
  ASSERT_TRUE(
      placeHosts(d.placement, static_cast<int32_t>(order.size()), static_cast<int32_t>(order.size()), &node).ok());
  for (size_t i = 1; i < order.size(); ++i) EXPECT_LT(node[order[i - 1]], node[order[i]]);

  PlannerInputs pin;
  plannerInputsFor(c.sim, &c.topo0, &pin);
  pin.tuner = tuner;
  const CollArgs args = callArgsFor(c.sim);
  PlanChoice choice;
  ASSERT_TRUE(planCollective(pin, args, &choice).ok());
  ASSERT_TRUE(choice.tuned);
  EXPECT_TRUE(choice.options.fabricHostOrder) << describeChoice(choice.algo, choice.options, 0);
  Candidate inRankOrder = choice.candidates[0];
  inRankOrder.options.fabricHostOrder = false;
  ASSERT_TRUE(tuner->price(pin, args, &inRankOrder).ok());
  EXPECT_GT(inRankOrder.seconds, 1.2 * choice.predictedSeconds);

  // Placed linearly, rank order is the fabric order: nothing to reorder.
  std::shared_ptr<const FabricTuner> linear;
  ASSERT_TRUE(FabricTuner::make(c.description(), c.topo0, &linear).ok());
  EXPECT_EQ(linear->hostOrder(), nullptr);
  // Other collectives place blocks by rank: never reordered.
  CollectiveSim gather = c.sim;
  gather.kind = CollKind::AllGather;
  gather.count = 1 << 16;
  PlanChoice g;
  ASSERT_TRUE(planCollective(pin, callArgsFor(gather), &g).ok());
  EXPECT_FALSE(g.options.fabricHostOrder);
}

TEST(FabricTuner, CandidatesStoppedPastTheWinnersTimeAreLeftOut) {
  // 256 ranks on a 4:1 fat-tree, 1 MiB: the contended recursive doubling and Rabenseifner need
  // far more rate solving than the others. With growing budgets, some budget stops them only
  // after their clocks have passed the winner's time: the tuner then has an opinion, the same
  // choice as with no budget, and shows them with lower bounds.
  const SmallCluster c(4, 1 << 20, 256, 8, 32, 8);
  PlannerInputs pin;
  plannerInputsFor(c.sim, &c.topo0, &pin);
  const CollArgs args = callArgsFor(c.sim);
  PlanChoice model;
  ASSERT_TRUE(planCollective(pin, args, &model).ok());
  auto tunerWith = [&](uint64_t work) {
    FabricDescription d = c.description();
    d.maxWork = work;
    std::shared_ptr<const FabricTuner> t;
    EXPECT_TRUE(FabricTuner::make(d, c.topo0, &t).ok());
    return t;
  };
  std::vector<FabricTuner::Priced> unbounded;
  ASSERT_TRUE(tunerWith(~0ull)->priceAll(pin, args, model.candidates, model.ncandidates, &unbounded));
  auto fastest = [](const std::vector<FabricTuner::Priced>& v) {
    size_t best = 0;
    for (size_t i = 1; i < v.size(); ++i) {
      if (v[i].status.ok() && (!v[best].status.ok() || v[i].candidate.seconds < v[best].candidate.seconds)) best = i;
    }
    return best;
  };
  bool seen = false;
  for (double work = 1e5; work < 1e8 && !seen; work *= 1.5) {
    std::vector<FabricTuner::Priced> priced;
    std::string why;
    const bool opinion =
        tunerWith(static_cast<uint64_t>(work))->priceAll(pin, args, model.candidates, model.ncandidates, &priced, &why);
    int bounded = 0;
    for (const FabricTuner::Priced& p : priced) bounded += p.lowerBound ? 1 : 0;
    if (!opinion) {
      EXPECT_FALSE(why.empty());
      continue;
    }
    if (bounded == 0) break;  // every candidate priced: the window was skipped
    seen = true;
    const size_t w = fastest(priced);
    EXPECT_EQ(describeChoice(priced[w].candidate.algo, priced[w].candidate.options, 0),
              describeChoice(unbounded[fastest(unbounded)].candidate.algo,
                             unbounded[fastest(unbounded)].candidate.options, 0));
    for (const FabricTuner::Priced& p : priced) {
      if (p.lowerBound) {
        EXPECT_GT(p.candidate.seconds, priced[w].candidate.seconds);
      }
    }
  }
  EXPECT_TRUE(seen) << "no budget stopped a candidate past the winner's time";
}

TEST(FabricTuner, RefusesRanksThatAreNotInHostBlocks) {
  // Two hosts, ranks alternating between them.
  const Topology t = Topology::fromHostHashes(0, {1, 2, 1, 2});
  FabricDescription d;
  std::shared_ptr<const FabricTuner> tuner;
  const Status st = FabricTuner::make(d, t, &tuner);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("blocks"), std::string::npos) << st.message();
  EXPECT_TRUE(FabricTuner::make(d, Topology::fromHostHashes(0, {1, 1, 2, 2}), &tuner).ok());
}

TEST(FabricTuner, CommunicatorPlansWithItAndRefusesABadDescription) {
  {
    testutil::ScopedEnv env("COLL_TOPO_FABRIC", "fattree2,oversub=banana");
    for (const auto& [res, msg] : testutil::initAll(2)) {
      EXPECT_EQ(res, collInvalidUsage);
      EXPECT_NE(msg.find("COLL_TOPO_FABRIC"), std::string::npos) << msg;
    }
  }
  testutil::ScopedEnv env("COLL_TOPO_FABRIC", "fattree2,leaf-ports=4,uplinks=1,oversub=2,nic=10");
  testutil::withComms(4, [](int rank, collComm_t comm) {
    for (size_t n : {size_t{1}, size_t{1000}, size_t{300000}}) {
      std::vector<float> buf(n, static_cast<float>(rank + 1));
      ASSERT_EQ(collAllReduce(buf.data(), buf.data(), n, collFloat32, collSum, comm, nullptr), collSuccess)
          << collGetLastError(comm);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(buf[i], 10.0f) << "element " << i << " of " << n;
    }
  });
}

}  // namespace
}  // namespace coll::sim
