// Planner: the cost model's choices, COLL_ALGO validation, and rounds for bounded windows.
#include <gtest/gtest.h>

#include "algorithms/algorithms.h"
#include "core/planner.h"

namespace coll {
namespace {

struct Fixture {
  Topology topo;
  PlannerInputs in;
  Fixture(int nranks, int perHost, bool windows, const char* forced = "") {
    topo = Topology::uniform(0, nranks, perHost);
    in.topo = &topo;
    in.haveWindows = windows;
    in.windowHalfBytes = 4 << 20;
    in.intraHost = LinkCost{1e-6, 1 / 8e9};
    in.interHost = LinkCost{25e-6, 1 / 1.2e9};
    in.forcedAlgo = forced;
    finalizePlannerInputs(&in);
  }
};

CollArgs floats(uint64_t count) {
  CollArgs a;
  a.count = count;
  a.dtype = collFloat32;
  return a;
}

TEST(Planner, SmallMessagesOnOneHostGoDirectInOneHop) {
  Fixture f(2, 2, true);
  PlanChoice c;
  ASSERT_TRUE(planAllReduce(f.in, floats(2), &c).ok());
  EXPECT_EQ(c.algo, AlgoId::Direct);
  EXPECT_LT(predictDirect(f.in, 8), predictRing(f.in, 8));
  EXPECT_EQ(c.roundElems, 0u);
}

TEST(Planner, AcrossHostsOrWithoutWindowsItIsRing) {
  Fixture hosts(8, 4, true);
  PlanChoice c;
  ASSERT_TRUE(planAllReduce(hosts.in, floats(2), &c).ok());
  EXPECT_EQ(c.algo, AlgoId::Ring);
  Fixture noWindows(4, 4, false);
  ASSERT_TRUE(planAllReduce(noWindows.in, floats(2), &c).ok());
  EXPECT_EQ(c.algo, AlgoId::Ring);
}

TEST(Planner, LargeMessagesBeyondTheWindowAreNotDirectUnlessForced) {
  Fixture f(4, 4, true);
  PlanChoice c;
  uint64_t big = (64ull << 20) / 4;
  ASSERT_TRUE(planAllReduce(f.in, floats(big), &c).ok());
  EXPECT_EQ(c.algo, AlgoId::Ring);
  Fixture forced(4, 4, true, "direct");
  ASSERT_TRUE(planAllReduce(forced.in, floats(big), &c).ok());
  EXPECT_EQ(c.algo, AlgoId::Direct);
  EXPECT_GT(c.roundElems, 0u);
  EXPECT_LE(c.roundElems * 4, directMaxBytes(4 << 20, 4));
}

TEST(Planner, ForcedAlgorithmsAreValidatedNotSilentlyReplaced) {
  PlanChoice c;
  Fixture unknown(4, 4, true, "tree");
  Status s = planAllReduce(unknown.in, floats(10), &c);
  EXPECT_EQ(s.code(), collInvalidUsage);
  EXPECT_NE(s.message().find("COLL_ALGO=tree"), std::string::npos);
  Fixture directAcrossHosts(4, 2, true, "direct");
  EXPECT_EQ(checkForcedAlgo(directAcrossHosts.in).code(), collInvalidUsage);
  Fixture directNoWindows(4, 4, false, "direct");
  EXPECT_EQ(checkForcedAlgo(directNoWindows.in).code(), collInvalidUsage);
  Fixture ring(4, 2, true, "ring");
  ASSERT_TRUE(planAllReduce(ring.in, floats(10), &c).ok());
  EXPECT_EQ(c.algo, AlgoId::Ring);
}

}  // namespace
}  // namespace coll
