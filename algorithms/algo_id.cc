// Names of the algorithms (logs, COLL_ALGO, benchmarks).
#include "algorithms/algorithms.h"

namespace coll {

const char* algoName(AlgoId algo) {
  switch (algo) {
    case AlgoId::Ring: return "ring";
    case AlgoId::Direct: return "direct";
    case AlgoId::Tree: return "tree";
    case AlgoId::Bruck: return "bruck";
    case AlgoId::Pairwise: return "pairwise";
    case AlgoId::Linear: return "linear";
    case AlgoId::Dissemination: return "dissemination";
    case AlgoId::RecursiveDoubling: return "recdoubling";
    case AlgoId::Rabenseifner: return "rabenseifner";
    case AlgoId::Torus: return "torus";
    case AlgoId::Hierarchical: return "hier";
    case AlgoId::TwoShot: return "twoshot";
  }
  return "?";
}

bool algoFromName(const std::string& name, AlgoId* out) {
  for (int i = 0; i < kAlgoCount; ++i) {
    AlgoId a = static_cast<AlgoId>(i);
    if (name == algoName(a)) {
      *out = a;
      return true;
    }
  }
  return false;
}

}  // namespace coll
