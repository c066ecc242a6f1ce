// The one list of algorithms, and the names COLL_ALGO and the logs use, taken from it.
#include "algorithms/registry.h"

namespace coll {

// One line per algorithm; its position is its AlgoId (the named AlgoIds are the first positions).
// The list ends in a line of its own so that adding an algorithm adds a line and changes none.
#define COLL_ALGORITHMS(X)       \
  X(kRingAlgorithm)              \
  X(kDirectAlgorithm)            \
  X(kTreeAlgorithm)              \
  X(kBruckAlgorithm)             \
  X(kPairwiseAlgorithm)          \
  X(kLinearAlgorithm)            \
  X(kDisseminationAlgorithm)     \
  X(kRecursiveDoublingAlgorithm) \
  X(kRabenseifnerAlgorithm)      \
  X(kTorusAlgorithm)             \
  X(kHierarchicalAlgorithm)      \
  X(kTwoShotAlgorithm)           \
  /* end of the list */

#define COLL_DECLARE_ALGORITHM(descriptor) extern const AlgorithmDescriptor descriptor;
#define COLL_ALGORITHM_ADDRESS(descriptor) &descriptor,
COLL_ALGORITHMS(COLL_DECLARE_ALGORITHM)
namespace {
const AlgorithmDescriptor* const kAlgorithms[] = {COLL_ALGORITHMS(COLL_ALGORITHM_ADDRESS)};
}  // namespace

std::span<const AlgorithmDescriptor* const> allAlgorithms() { return kAlgorithms; }

const AlgorithmDescriptor& algorithm(AlgoId algo) { return *kAlgorithms[static_cast<int>(algo)]; }

const char* algoName(AlgoId algo) { return static_cast<int>(algo) < algoCount() ? algorithm(algo).name : "?"; }

bool algoFromName(const std::string& name, AlgoId* out) {
  for (int i = 0; i < algoCount(); ++i) {
    if (name == kAlgorithms[i]->name) {
      *out = algoIdAt(i);
      return true;
    }
  }
  return false;
}

}  // namespace coll
