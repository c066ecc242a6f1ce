// Planner: picks algorithm, options and chunk size per call from an alpha-beta-gamma cost model
// per link class (same host, across hosts), within what COLL_ALGO allows.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/model.h"
#include "algorithms/registry.h"
#include "src/base/status.h"
#include "src/plan/tuner.h"
#include "src/schedule/coll_args.h"
#include "src/topo/topology.h"

namespace coll {

// Allowed algorithms per collective (bit i = AlgoId i), from COLL_ALGO.
using AlgoMask = uint32_t;
inline constexpr int kCollKindCount = 11;
inline constexpr AlgoMask algoBit(AlgoId a) { return AlgoMask{1} << static_cast<int>(a); }

// Parses COLL_ALGO in NCCL's syntax: sections separated by ';', each "[collective:][^]algo[,algo...]".
// A section without a collective applies to every collective that has one of its algorithms
// (an error if none has); '^' excludes instead of selecting. Later sections replace earlier ones
// for the collectives they name. Names are case-insensitive. Unknown names are collInvalidUsage.
Status parseAlgoFilter(const std::string& text, AlgoMask allowed[kCollKindCount]);

// The algorithms the planner considers for a collective (before COLL_ALGO and applicability).
AlgoMask candidateAlgos(CollKind kind);

// The model's inputs (algorithms/model.h) and COLL_ALGO's filter.
struct PlannerInputs : ModelInputs {
  std::string forcedAlgo;  // COLL_ALGO ("" = choose)
  // Re-prices the candidates of every planned call (COLL_TOPO_FABRIC); null = the model alone.
  std::shared_ptr<const PlanTuner> tuner;
  // Derived by finalizePlannerInputs:
  AlgoMask allowed[kCollKindCount] = {};
  Status filterStatus;  // COLL_ALGO's parse result
};

// Derives what the planner would otherwise recompute on every call (O(p log p) once).
void finalizePlannerInputs(PlannerInputs* in);

struct PlanChoice {
  AlgoId algo = AlgoId::Ring;
  AlgoOptions options;
  uint64_t sliceBytes = 0;           // executor chunk for this plan (0 = COLL_SLICE_BYTES)
  uint64_t roundElems = 0;           // > 0: the call runs as rounds of at most this many elements
  uint64_t reduceAllBelowBytes = 0;  // direct: every rank reduces everything below this size
  double predictedSeconds = 0;
  static constexpr int kMaxCandidates = 16;  // at least the algorithms serving one collective
  Candidate candidates[kMaxCandidates];      // every allowed, applicable algorithm, in AlgoId order
  int32_t ncandidates = 0;
  bool tuned = false;  // the candidates' times are the tuner's (PlannerInputs::tuner), not the model's
};

// Validates COLL_ALGO and COLL_TORUS_DIMS against this communicator once: an unknown name, or a
// collective left with no applicable algorithm, is collInvalidUsage naming the knob, the
// collective and what would apply.
Status checkForcedAlgo(const PlannerInputs& in);
// Whether `algo` can run `kind` on this communicator (ignoring COLL_ALGO); *why says why not.
bool algoApplicable(const PlannerInputs& in, CollKind kind, AlgoId algo, std::string* why = nullptr);
// The model's time for one algorithm (with its best options and chunk); bytes as NCCL counts the
// call (AllGather: one rank's block, ReduceScatter: one rank's result, others: the message).
// `count`: the call's elements when known (0 = at least one per rank), for how many ranks a tiny
// call keeps busy at once.
Candidate predictAlgo(const PlannerInputs& in, CollKind kind, AlgoId algo, uint64_t bytes, uint64_t count = 0);

Status planAllReduce(const PlannerInputs& in, const CollArgs& args, PlanChoice* out);
// collAllReduceCompressed: among the algorithms with a compressed model (the two-shot and its
// hierarchical variant); COLL_ALGO's allreduce section may name some, naming none leaves all.
Status planCompressedAllReduce(const PlannerInputs& in, const CollArgs& args, PlanChoice* out);
// Any collective. Point-to-point calls are not planned.
Status planCollective(const PlannerInputs& in, const CollArgs& args, PlanChoice* out);

// Everything that changes a call's schedule: plans are cached under it (buffers are not part of it).
struct PlanKey {
  CollKind kind;
  uint64_t count;
  collDataType_t dtype;
  collRedOp_t op;
  int32_t root;
  AlgoId algo;
  AlgoId interHost;
  int32_t channels;
  int32_t torus[3];
  uint64_t sliceBytes;
  uint64_t reduceAllBelowBytes;
  int32_t quantBlock;  // compressed calls
  bool fabricHostOrder;
  bool operator==(const PlanKey&) const = default;
};
PlanKey planKeyOf(const CollArgs& args, const PlanChoice& choice);

// Whether every host holds the same number of ranks, consecutive (host h: ranks h*n .. h*n+n-1).
bool isUniformBlocks(const Topology& t);

// Hosts reordered whole, for a communicator whose ranks are in equal host blocks: the real rank at
// each position of the order (hostOrder[h] = the host at position h), for Schedule::renameRanks.
std::vector<int32_t> ranksInHostOrder(const std::vector<int32_t>& hostOrder, int32_t ranksPerHost);

// Each host's ranks in the order of their ring keys (PeerInfo::ringKey: a GPU's place in its
// node's ring, -1 none), so neighbours in every schedule are neighbours in the node: the real rank
// at each place, for Schedule::renameRanks. Place p, the k-th rank of its host in rank order,
// holds the host's k-th rank by key (keyed ranks first, lowest key first; then by rank). Every
// host keeps its places, so the topology a plan is built on is the real one, this rank at its
// place. Empty when that is rank order everywhere (no keys, or keys in rank order).
std::vector<int32_t> ranksInLocalOrder(const Topology& topo, const std::vector<int32_t>& ringKeys);

// "hier(inter=ring) chunk 512K" (logs).
std::string describeChoice(AlgoId algo, const AlgoOptions& options, uint64_t sliceBytes);
const char* dataTypeName(collDataType_t dtype);

// Kept for tests and tools: the All-Reduce predictions of two algorithms.
double predictRing(const PlannerInputs& in, uint64_t bytes);
double predictDirect(const PlannerInputs& in, uint64_t bytes);
// Hierarchical All-Reduce with a fixed inter-host algorithm (tools comparing against schedules).
// seconds < 0 when that algorithm does not apply (torus over hosts that form no grid).
Candidate predictHierarchicalAllReduce(const PlannerInputs& in, AlgoId interHost, uint64_t bytes);

}  // namespace coll
