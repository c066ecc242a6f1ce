// The algorithm registry: one descriptor per algorithm, defined next to its builder and listed
// once in registry.cc. The planner iterates the list; the communicator calls `build`.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "algorithms/algorithms.h"
#include "algorithms/model.h"
#include "src/base/status.h"
#include "src/schedule/coll_args.h"
#include "src/schedule/schedule.h"
#include "src/topo/topology.h"

namespace coll {

// The collectives an algorithm serves (bit i = CollKind i).
using CollMask = uint32_t;
constexpr CollMask collBit(CollKind kind) { return CollMask{1} << static_cast<int>(kind); }

// What a builder gets beyond the call: the planner's choices and the communicator's window.
struct BuildRequest {
  const Topology& topo;
  const CollArgs& args;
  const AlgoOptions& options;
  uint64_t windowHalfBytes = 0;      // direct algorithms: bytes of each rank's window half
  uint64_t reduceAllBelowBytes = 0;  // direct All-Reduce: every rank reduces everything below this
};

// How a call runs beyond its algorithm and options (an algorithm's `shapeCall` sets it).
struct CallShape {
  uint64_t roundElems = 0;           // > 0: the call runs as rounds of at most this many elements
  uint64_t reduceAllBelowBytes = 0;  // BuildRequest::reduceAllBelowBytes
};

struct AlgorithmDescriptor {
  const char* name;  // COLL_ALGO's spelling, logs
  CollMask serves;   // the collectives the planner considers it for
  // Whether it can run `kind` (one it serves) on this communicator; *why (when asked) says why
  // not. nullptr: wherever it serves.
  bool (*applies)(const ModelInputs& in, CollKind kind, std::string* why);
  // The model's time on more than one rank, with the best options and chunk; bytes as NCCL counts
  // the call (AllGather: one rank's block, ReduceScatter: one rank's result, others: the
  // message); `count`: the call's elements when known (0 = at least one per rank).
  Candidate (*predict)(const ModelInputs& in, CollKind kind, uint64_t bytes, uint64_t count);
  // How much slower than `predict` its All-Reduce ran where the model was calibrated (the other
  // collectives run at their model).
  ImplementationFactor allReduceFactor;
  void (*build)(const BuildRequest& request, Schedule* out);
  // Optional: rounds and modes decided per call once the algorithm is chosen (nullptr: none).
  Status (*shapeCall)(const ModelInputs& in, const CollArgs& args, CallShape* out) = nullptr;
  // Optional: the model's time for a compressed All-Reduce (collAllReduceCompressed), < 0 where it
  // cannot run it here (nullptr: it runs no compressed All-Reduce).
  double (*predictCompressed)(const ModelInputs& in, const CollArgs& args) = nullptr;
  // Optional: the options it takes, for logs: "(inter=ring)" (nullptr: none).
  std::string (*describeOptions)(const AlgoOptions& options) = nullptr;
};

// Every algorithm, in AlgoId order: an algorithm's id is its position in the list.
std::span<const AlgorithmDescriptor* const> allAlgorithms();
inline int algoCount() { return static_cast<int>(allAlgorithms().size()); }
inline AlgoId algoIdAt(int position) { return static_cast<AlgoId>(position); }
// The descriptor of `algo` (which must be below algoCount()).
const AlgorithmDescriptor& algorithm(AlgoId algo);

}  // namespace coll
