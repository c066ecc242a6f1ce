// The algorithm registry: every descriptor is complete, the named AlgoIds sit at their registry
// positions, names round-trip through COLL_ALGO, and the planner's masks and candidate array hold
// every algorithm.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "algorithms/registry.h"
#include "src/plan/planner.h"

namespace coll {
namespace {

TEST(AlgorithmRegistry, EveryDescriptorIsComplete) {
  std::set<std::string> names;
  for (const AlgorithmDescriptor* d : allAlgorithms()) {
    ASSERT_NE(d, nullptr);
    ASSERT_NE(d->name, nullptr);
    EXPECT_TRUE(names.insert(d->name).second) << "two algorithms named " << d->name;
    EXPECT_NE(d->serves, 0u) << d->name;
    EXPECT_NE(d->predict, nullptr) << d->name;
    EXPECT_NE(d->build, nullptr) << d->name;
  }
}

TEST(AlgorithmRegistry, NamedIdsAreRegistryPositions) {
  const std::pair<AlgoId, const char*> named[] = {
      {AlgoId::Ring, "ring"},
      {AlgoId::Direct, "direct"},
      {AlgoId::Tree, "tree"},
      {AlgoId::Bruck, "bruck"},
      {AlgoId::Pairwise, "pairwise"},
      {AlgoId::Linear, "linear"},
      {AlgoId::Dissemination, "dissemination"},
      {AlgoId::RecursiveDoubling, "recdoubling"},
      {AlgoId::Rabenseifner, "rabenseifner"},
      {AlgoId::Torus, "torus"},
      {AlgoId::Hierarchical, "hier"},
      {AlgoId::TwoShot, "twoshot"},
  };
  for (const auto& [id, name] : named) EXPECT_STREQ(algoName(id), name);
}

TEST(AlgorithmRegistry, NamesRoundTrip) {
  for (int i = 0; i < algoCount(); ++i) {
    AlgoId id;
    ASSERT_TRUE(algoFromName(algoName(algoIdAt(i)), &id)) << algoName(algoIdAt(i));
    EXPECT_EQ(id, algoIdAt(i));
  }
  AlgoId unused;
  EXPECT_FALSE(algoFromName("no-such-algorithm", &unused));
}

TEST(AlgorithmRegistry, FitsThePlannersMasksAndCandidates) {
  EXPECT_LE(algoCount(), static_cast<int>(8 * sizeof(AlgoMask)));
  for (int k = 0; k < kCollKindCount; ++k) {
    int serving = 0;
    for (const AlgorithmDescriptor* d : allAlgorithms())
      serving += (d->serves & collBit(static_cast<CollKind>(k))) ? 1 : 0;
    EXPECT_LE(serving, PlanChoice::kMaxCandidates) << collKindName(static_cast<CollKind>(k));
  }
}

TEST(AlgorithmRegistry, CandidatesAreWhatTheDescriptorsServe) {
  for (int k = 0; k < kCollKindCount; ++k) {
    const CollKind kind = static_cast<CollKind>(k);
    for (int i = 0; i < algoCount(); ++i) {
      const bool serves = (allAlgorithms()[i]->serves & collBit(kind)) != 0;
      EXPECT_EQ((candidateAlgos(kind) & algoBit(algoIdAt(i))) != 0, serves)
          << collKindName(kind) << " " << algoName(algoIdAt(i));
    }
  }
}

}  // namespace
}  // namespace coll
