// Machines (ranks sharing CPUs, across network namespaces): the topology's machine counts, the
// rank table's machine fields, the wait policy and the planner's CPU-contention term built on them.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "src/exec/executor.h"
#include "src/oob/wire.h"
#include "src/plan/planner.h"
#include "src/topo/topology.h"

namespace coll {
namespace {

// 4 hosts x 2 ranks, all on one machine of `cpus` CPUs (an emulated cluster of namespaces).
Topology emulated(int32_t hosts, int32_t perHost, int32_t cpus, int32_t rank = 0) {
  Topology t = Topology::uniform(rank, hosts * perHost, perHost);
  t.setMachines(std::vector<uint64_t>(static_cast<size_t>(hosts * perHost), 77),
                std::vector<int32_t>(static_cast<size_t>(hosts * perHost), cpus));
  return t;
}

TEST(TopologyMachines, HostsWithoutMachineInformationAreTheirOwnMachines) {
  Topology t = Topology::uniform(5, 8, 2);
  EXPECT_EQ(t.nmachines, 4);
  EXPECT_EQ(t.machineSize(), 2);
  EXPECT_EQ(t.machineCpus(), 0);
}

TEST(TopologyMachines, RanksOfSeveralHostsShareAMachine) {
  Topology t = emulated(4, 2, 2, 3);
  EXPECT_EQ(t.nhosts, 4);
  EXPECT_EQ(t.localSize(), 2);  // shared memory still only within the host
  EXPECT_EQ(t.nmachines, 1);
  EXPECT_EQ(t.machineSize(), 8);
  EXPECT_EQ(t.machineCpus(), 2);
}

TEST(TopologyMachines, AMachineTakesTheFewestCpusItsRanksReportAndUnknownWins) {
  Topology t = Topology::uniform(0, 6, 1);
  t.setMachines({1, 1, 2, 2, 3, 3}, {8, 4, 16, 16, 4, 0});
  EXPECT_EQ(t.nmachines, 3);
  EXPECT_EQ(t.machineOfRank, (std::vector<int32_t>{0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(t.cpusOfMachine, (std::vector<int32_t>{4, 16, 0}));
  EXPECT_EQ(t.machineSize(), 2);
  EXPECT_EQ(t.machineCpus(), 4);
  // Mismatched sizes leave the topology as it was.
  t.setMachines({1, 2}, {1, 1});
  EXPECT_EQ(t.nmachines, 3);
}

TEST(TopologyMachines, LocalIdentityIgnoresTheNetworkNamespaceAndCpusArePositive) {
  EXPECT_EQ(localMachineIdentity().find("netns"), std::string::npos);
  EXPECT_NE(localMachineIdentity(), "");
  EXPECT_GE(localMachineCpus(), 1);
}

TEST(TopologyMachines, WaitPolicyYieldsAtOnceOnlyWhenTheMachinesRanksOutnumberItsCpus) {
  if (std::getenv("COLL_SPIN_COUNT") != nullptr) GTEST_SKIP() << "COLL_SPIN_COUNT is set";
  const int cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  ASSERT_GT(cpus, 0);
  EXPECT_EQ(waitPolicyFor(cpus).spins, WaitPolicy{}.spins);
  EXPECT_EQ(waitPolicyFor(cpus + 1).spins, 0u);
  EXPECT_EQ(waitPolicyFor(cpus + 1).yields, WaitPolicy{}.yields);
}

// One rank-table entry: IPv4 127.0.0.1:port, then hostHash, pid, netMask, machineHash, cpus, ringKey (0).
std::vector<uint8_t> entry(uint16_t port, uint64_t machine, uint32_t cpus) {
  std::vector<uint8_t> e(kBootstrapEntryBytes, 0);
  e[0] = 4;
  e[2] = static_cast<uint8_t>(port & 0xff);
  e[3] = static_cast<uint8_t>(port >> 8);
  e[8] = 127;
  e[11] = 1;
  for (int i = 0; i < 8; ++i) e[24 + i] = static_cast<uint8_t>(0x11 * (i + 1));  // hostHash
  for (int i = 0; i < 8; ++i) e[40 + i] = static_cast<uint8_t>(machine >> (8 * i));
  for (int i = 0; i < 4; ++i) e[48 + i] = static_cast<uint8_t>(cpus >> (8 * i));
  return e;
}

TEST(TopologyMachines, RankTableCarriesMachineAndCpusAndBoundsTheCpus) {
  std::vector<uint8_t> table = entry(5000, 0xabcdef0123456789ull, 2);
  std::vector<uint8_t> second = entry(5001, 0xabcdef0123456789ull, 64);
  table.insert(table.end(), second.begin(), second.end());
  std::vector<PeerInfo> peers;
  ASSERT_TRUE(parseRankTable(table.data(), table.size(), 2, &peers).ok());
  ASSERT_EQ(peers.size(), 2u);
  EXPECT_EQ(peers[0].machineHash, 0xabcdef0123456789ull);
  EXPECT_EQ(peers[0].cpus, 2);
  EXPECT_EQ(peers[1].cpus, 64);
  // A CPU count past the bound is a malformed entry, not a number the planner divides by.
  std::vector<uint8_t> bad = entry(5000, 1, static_cast<uint32_t>(kBootstrapMaxCpus) + 1);
  EXPECT_FALSE(parseRankTable(bad.data(), bad.size(), 1, &peers).ok());
  std::vector<uint8_t> huge = entry(5000, 1, 0xffffffffu);
  EXPECT_FALSE(parseRankTable(huge.data(), huge.size(), 1, &peers).ok());
}

struct Inputs {
  Topology topo;
  PlannerInputs in;
  explicit Inputs(Topology t) : topo(std::move(t)) {
    in.topo = &topo;
    in.haveWindows = true;
    in.windowHalfBytes = 4 << 20;
    // The emulated cluster as probed (2 CPUs, 1 Gbit/s tbf links).
    in.intraHost = {2.5e-6, 1 / 3.5e9};
    in.interHost = {20e-6, 1 / 0.12e9};
    in.gamma = 1 / 40e9;
    finalizePlannerInputs(&in);
  }
};

double predict(const PlannerInputs& in, AlgoId a, uint64_t count) {
  return predictAlgo(in, CollKind::AllReduce, a, count * 4, count).seconds;
}

TEST(PlannerContention, NoTermWhereEveryRankHasACpuOrCpusAreUnknown) {
  Inputs unknown(Topology::uniform(0, 8, 2));
  Inputs roomy(emulated(4, 2, 8));
  EXPECT_EQ(roomy.in.shape.machineCpus, 0);  // 8 ranks on 8 CPUs: no oversubscribed machine
  for (AlgoId a : {AlgoId::Ring, AlgoId::RecursiveDoubling, AlgoId::Tree, AlgoId::Hierarchical}) {
    for (uint64_t count : {2ull, 16ull, 1ull << 20}) {
      EXPECT_DOUBLE_EQ(predict(roomy.in, a, count), predict(unknown.in, a, count)) << algoName(a) << " " << count;
    }
  }
}

// Latency only: no bytes, no reductions.
void latencyOnly(Inputs* i) {
  i->in.intraHost.beta = 0;
  i->in.interHost.beta = 0;
  i->in.gamma = 0;
}

TEST(PlannerContention, MessagesAcrossHostsShareTheCpusOfAnOversubscribedMachine) {
  Inputs free(Topology::uniform(0, 8, 2));
  Inputs busy(emulated(4, 2, 2));
  latencyOnly(&free);
  latencyOnly(&busy);
  EXPECT_EQ(busy.in.shape.machineRanks, 8);
  EXPECT_EQ(busy.in.shape.machineCpus, 2);
  EXPECT_EQ(busy.in.shape.machineHosts, 4);
  const double ai = busy.in.intraHost.alpha, ae = busy.in.interHost.alpha;
  // Recursive doubling over 4 x 2: one round inside the hosts, two across them. With a CPU per
  // rank the two ranks of a host take turns on its NIC (2 alphas a round); on 2 CPUs the round's
  // 8 messages across hosts take 0.75 alpha of CPU each: 3 alphas.
  for (uint64_t count : {2ull, 16ull}) {
    EXPECT_NEAR(predict(free.in, AlgoId::RecursiveDoubling, count), ai + 2 * 2 * ae, 1e-12) << count;
    EXPECT_NEAR(predict(busy.in, AlgoId::RecursiveDoubling, count), ai + 2 * 3 * ae, 1e-12) << count;
  }
  // Rabenseifner with 2 elements: of its 8 parts only the first two hold one, so halving's first
  // round (mask 4) has 4 senders (1.5 alphas), its second 2 (one alpha, the least a round takes),
  // and doubling the same in reverse; with 16 elements all 8 send in all four rounds across hosts.
  EXPECT_NEAR(predict(busy.in, AlgoId::Rabenseifner, 2), 2 * ai + 2 * (1.5 + 1) * ae, 1e-12);
  EXPECT_NEAR(predict(busy.in, AlgoId::Rabenseifner, 16), 2 * ai + 4 * 3 * ae, 1e-12);
  // The ring: half its 14 hops cross hosts, but every step has a hop across, whose receiver spends
  // an alpha of CPU on the message before the next step's can follow: one alpha a step. With a CPU
  // per rank the latencies along its path add up instead: half an alpha a step.
  EXPECT_NEAR(predict(busy.in, AlgoId::Ring, 16), 14 * ae, 1e-12);
  EXPECT_NEAR(predict(free.in, AlgoId::Ring, 16), 14 * (0.5 * ai + 0.5 * ae), 1e-12);
  // With 2 elements a link carries a message in a quarter of the steps: the path's latency decides.
  EXPECT_NEAR(predict(busy.in, AlgoId::Ring, 2), 14 * (0.5 * ai + 0.5 * ae), 1e-12);
}

TEST(PlannerContention, ATinyRingCountsOnlyItsSenders) {
  // 4 x 2 on 1 CPU, hops inside hosts slower than those across (so a step's latency along the
  // path, not the one-alpha floor, decides): a step's 4 crossings take 2 alphas of CPU when every
  // rank holds a chunk (a ring's share, 0.5 per message), one with 2 elements (2 senders).
  Inputs busy(emulated(4, 2, 1));
  latencyOnly(&busy);
  busy.in.interHost.alpha = 100e-6;
  busy.in.intraHost.alpha = 120e-6;  // hops: 0.5 * 120 + 0.5 * (2 or 1) * 100 > one alpha
  const double ai = busy.in.intraHost.alpha, ae = busy.in.interHost.alpha;
  EXPECT_NEAR(predict(busy.in, AlgoId::Ring, 16), 14 * (0.5 * ai + 0.5 * 2 * ae), 1e-12);
  EXPECT_NEAR(predict(busy.in, AlgoId::Ring, 2), 14 * (0.5 * ai + 0.5 * ae), 1e-12);
  // Unknown element count: every rank counted busy.
  EXPECT_NEAR(predictAlgo(busy.in, CollKind::AllReduce, AlgoId::Ring, 8, 0).seconds, predict(busy.in, AlgoId::Ring, 16),
              1e-12);
}

TEST(PlannerContention, HierarchicalCountsOnlyTheRanksHoldingAShard) {
  // 2 hosts x 4 ranks, 2 elements: each host's reduce-scatter leaves 2 of its 4 shards empty, so
  // 2 ranks per host cross the hosts (not 4): 4 messages on the machine's 2 CPUs (1.5 alphas,
  // recursive doubling over the two hosts) instead of 8 (3 alphas).
  Inputs busy(emulated(2, 4, 2));
  latencyOnly(&busy);
  const double ae = busy.in.interHost.alpha;
  EXPECT_NEAR(predict(busy.in, AlgoId::Hierarchical, 4) - predict(busy.in, AlgoId::Hierarchical, 2),
              1.1 * (3 - 1.5) * ae, 1e-12);  // hierarchical's implementation factor: 1.1
  // Two more messages through each NIC at least once with four shards than with two.
  Inputs free(Topology::uniform(0, 8, 4));
  EXPECT_GE(predict(free.in, AlgoId::Hierarchical, 4) - predict(free.in, AlgoId::Hierarchical, 2),
            2 * free.in.interHost.alpha);
}

// The planner's plan for an All-Reduce of `count` floats: algorithm and options (no chunk).
std::string floatPlan(const PlannerInputs& in, uint64_t count) {
  CollArgs a;
  a.kind = CollKind::AllReduce;
  a.count = count;
  a.dtype = collFloat32;
  PlanChoice c;
  EXPECT_TRUE(planCollective(in, a, &c).ok());
  return describeChoice(c.algo, c.options, 0);
}

TEST(PlannerContention, EightBytesOnAnOversubscribedFourByTwoClusterTakeRabenseifner) {
  // Measured on 2 CPUs, 4 namespaces x 2 ranks, 1 Gbit/s, with the links as probed there
  // (bench/planner_vs_forced.sh): at 8 B Rabenseifner (16 messages, 12 across hosts) ran
  // 430 us, recursive doubling (24, 16 across) 468, the ring 561, the tree 659.
  Inputs busy(emulated(4, 2, 2));
  busy.in.intraHost = {0.59e-6, 1 / 15e9};
  busy.in.interHost = {77.5e-6, 1 / 0.111e9};
  busy.in.gamma = 1 / 40e9;
  EXPECT_EQ(floatPlan(busy.in, 2), "rabenseifner");
  // The same cluster with a CPU per rank keeps the latency algorithms.
  Inputs roomy(emulated(4, 2, 8));
  EXPECT_NE(floatPlan(roomy.in, 2).rfind("ring", 0), 0u) << floatPlan(roomy.in, 2);
}

TEST(PlannerContention, EightBytesOnAnOversubscribedTwoByFourClusterTakeHierarchical) {
  // Measured on 2 CPUs, 2 namespaces x 4 ranks, 1 Gbit/s, with the links as probed there
  // (bench/planner_vs_forced.sh): at 8 B hierarchical ran 258 us, the ring 347, the tree
  // and recursive doubling 284.
  Inputs busy(emulated(2, 4, 2));
  busy.in.intraHost = {0.3e-6, 1 / 20e9};
  busy.in.interHost = {68e-6, 1 / 0.112e9};
  busy.in.gamma = 1 / 45e9;
  EXPECT_EQ(floatPlan(busy.in, 2).rfind("hier", 0), 0u) << floatPlan(busy.in, 2);
}

TEST(PlannerContention, ARingsBytesHideItsCpuTimeOnAnOversubscribedMachine) {
  // Hierarchical over 4 x 2 emulated hosts on 2 CPUs, only the step across hosts priced: each of
  // its ring's 6 steps sends 2 flows' chunks through every NIC (8 messages on the machine: 2
  // alphas at a ring's share of 0.5 per message) and costs the longer of that CPU time and the
  // bytes, not their sum; recursive doubling's exchanges pay both (3 alphas at 0.75 + bytes).
  Inputs busy(emulated(4, 2, 2));
  busy.in.implementationFactors = false;
  busy.in.intraHost = {0, 0};
  busy.in.gamma = 0;
  const double ae = 30e-6, be = 1 / 0.125e9;
  busy.in.interHost = {ae, be};
  const double bytes = 32 * 1024, shard = bytes / 2, chunk = shard / 4;
  ASSERT_GT(2 * chunk * be, 2 * ae);  // the bytes are the longer
  EXPECT_NEAR(predictHierarchicalAllReduce(busy.in, AlgoId::Ring, 32 * 1024).seconds, 6 * 2 * chunk * be, 1e-12);
  EXPECT_NEAR(predictHierarchicalAllReduce(busy.in, AlgoId::RecursiveDoubling, 32 * 1024).seconds,
              2 * (3 * ae + 2 * shard * be), 1e-12);
  // Where the CPU time is the longer, the step costs it.
  busy.in.interHost.alpha = 50e-6;
  EXPECT_NEAR(predictHierarchicalAllReduce(busy.in, AlgoId::Ring, 32 * 1024).seconds, 6 * 2 * 50e-6, 1e-12);
  // With a CPU per rank the alpha is the links' latency and adds to the bytes.
  Inputs roomy(emulated(4, 2, 8));
  roomy.in.implementationFactors = false;
  roomy.in.intraHost = {0, 0};
  roomy.in.gamma = 0;
  roomy.in.interHost = {50e-6, be};
  EXPECT_GT(predictHierarchicalAllReduce(roomy.in, AlgoId::Ring, 32 * 1024).seconds, 6 * (2 * chunk * be + 50e-6));
}

TEST(PlannerContention, ThirtyTwoKiBOnAnOversubscribedFourByTwoClusterTakeHierarchicalRing) {
  // Measured on 2 CPUs, 4 namespaces x 2 ranks, 1 Gbit/s (bench/planner_vs_forced.sh), inter-host
  // alpha probed at 32-35 us: at 32 KiB hierarchical with a ring across hosts ran 418-451 us, with
  // Rabenseifner 456-469, with recursive doubling 554-560, the flat ring 483-509. On runs that
  // probed 11-26 us hierarchical (Rabenseifner across hosts) ran 450 us and the flat ring 512-547.
  // Both sets of links take hierarchical's ring.
  for (const LinkCost inter :
       {LinkCost{34.34e-6, 1 / 0.120e9}, LinkCost{10.8e-6, 1 / 0.119e9}, LinkCost{25.6e-6, 1 / 0.120e9}}) {
    Inputs busy(emulated(4, 2, 2));
    busy.in.intraHost = {0.39e-6, 1 / 10.94e9};
    busy.in.interHost = inter;
    busy.in.gamma = 1 / 18.65e9;
    EXPECT_EQ(floatPlan(busy.in, 8192), "hier(inter=ring)") << "inter-host alpha " << inter.alpha;
  }
}

TEST(PlannerContention, HierarchicalPricesItsPhasedAlgorithmsAcrossHostsAsTheyRunFlat) {
  // bench/planner_vs_forced.sh, 4 x 2 emulated hosts on 2 CPUs at 16 MiB: two of three auto
  // launches took hierarchical with the torus over 2 x 2 hosts (250-277 ms) with these probed
  // links, where hierarchical with the ring ran 217-223 ms. The torus and Rabenseifner run
  // across hosts as much slower than their model as they run flat (implementationFactor).
  struct Probed {
    LinkCost intra, inter;
    double gamma;
  };
  for (const Probed& probed : {Probed{{0.42e-6, 1 / 12.51e9}, {33.59e-6, 1 / 0.120e9}, 1 / 20.94e9},
                               Probed{{0.52e-6, 1 / 14.51e9}, {35.66e-6, 1 / 0.120e9}, 1 / 27.64e9}}) {
    Inputs busy(emulated(4, 2, 2));
    busy.in.intraHost = probed.intra;
    busy.in.interHost = probed.inter;
    busy.in.gamma = probed.gamma;
    EXPECT_EQ(floatPlan(busy.in, 4 << 20), "hier(inter=ring)");
    // The pure model (what-if tables) leaves the inter-host algorithm unscaled.
    const double scaled = predictHierarchicalAllReduce(busy.in, AlgoId::Torus, 16 << 20).seconds;
    busy.in.implementationFactors = false;
    const double pure = predictHierarchicalAllReduce(busy.in, AlgoId::Torus, 16 << 20).seconds;
    EXPECT_GT(scaled, 1.1 * 1.3 * pure);  // hierarchical's own 1.1, the torus's 1.4 on its bytes
  }
}

TEST(PlannerContention, TreeInteriorNodesTakeTheirChildrenOneAfterTheOther) {
  // Over two hosts each tree is a root and a leaf: no fan-in. Over four, an interior host takes
  // two children's messages through its link: the tree's latency over hosts doubles.
  Inputs two(Topology::uniform(0, 2, 1)), four(Topology::uniform(0, 4, 1));
  for (Inputs* i : {&two, &four}) i->in.interHost = {20e-6, 0};
  for (Inputs* i : {&two, &four}) i->in.gamma = 0;
  EXPECT_NEAR(predict(two.in, AlgoId::Tree, 1), 2 * 1 * 20e-6, 1e-12);
  EXPECT_NEAR(predict(four.in, AlgoId::Tree, 1), 2 * 2 * 2 * 20e-6, 1e-12);
}

}  // namespace
}  // namespace coll
