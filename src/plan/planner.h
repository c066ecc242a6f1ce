// Planner: picks algorithm, options and chunk size per call from an alpha-beta-gamma cost model
// per link class (same host, across hosts), within what COLL_ALGO allows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/algorithms.h"
#include "src/schedule/coll_args.h"
#include "src/base/status.h"
#include "src/topo/topology.h"

namespace coll {

// Cost of moving a message over one link class: alpha seconds per message, beta seconds per byte.
// Intra-host: one hop between two ranks of a host, whatever the transport does (two copies through
// a shared-memory FIFO). Inter-host: one network link (NIC); PlannerInputs::nicsPerHost says how
// many a host has and so how many of its ranks share one.
struct LinkCost {
  double alpha = 0;
  double beta = 0;
};

// The leads used when neither the probe nor the COLL_LINK_* knobs give a value.
inline constexpr LinkCost kDefaultIntraLink{1.0e-6, 1.0 / 4.0e9};
inline constexpr LinkCost kDefaultInterLink{25.0e-6, 1.0 / 1.2e9};
inline constexpr double kDefaultGamma = 1.0 / 8.0e9;

// How one round of simultaneous transfers (each rank sends to at most a few partners) loads the
// links: the most transfers one rank makes inside its host, the most transfers leaving (or
// entering) through one NIC, which share its bandwidth, and the transfers across hosts that the
// ranks of the most oversubscribed machine send (PlannerShape::busyMachine), which share its CPUs.
// sendingShare: the share of those transfers that carry data (small calls leave chunks empty).
struct StepLoad {
  int32_t intraPerRank = 0;
  double interPerNic = 0;
  double machineInter = 0;
  double sendingShare = 1.0;
};

// What the model needs of the communicator's shape, derived once by finalizePlannerInputs.
struct PlannerShape {
  int32_t maxLocal = 1;
  int32_t ranksPerNic = 1;             // the most ranks of a host that share one NIC
  bool uniformBlocks = false;
  bool hierPossible = false;           // > 1 host and some host with > 1 rank
  StepLoad ring;                       // flat ring in rank order (also chains and ring all-gather)
  double ringInterFraction = 0;        // share of the ring's hops that cross hosts
  int32_t core = 1;                    // recursive doubling/halving: p' = largest power of two <= p
  StepLoad fold;                       // the first 2(p - p') ranks pairing up (p' < p)
  std::vector<StepLoad> pairSteps;     // step k: core members at distance 2^k
  std::vector<StepLoad> binomial;      // binomial tree from rank 0, round k: i -> i + 2^k
  std::vector<StepLoad> bruck;         // Bruck round k: r -> r - 2^k
  int32_t treeHeight = 0;              // double binary tree over the hosts (or ranks on one host)
  bool torusOk = false;                // a grid with >= 2 dims > 1, or dims forced and valid
  TorusDims torus;
  std::vector<StepLoad> torusDims;     // per dimension: both directions of its rings
  std::vector<double> torusInterFraction;  // per dimension: share of its hops that cross hosts
  std::string torusProblem;            // why torus cannot apply
  TorusDims hostTorus;                 // hierarchical's inter-host torus (over hosts)
  bool hostTorusOk = false;
  // The most oversubscribed machine (Topology::setMachines): its index, ranks, CPUs (0 = none:
  // every machine has a CPU per rank, or its CPUs are unknown) and the hosts it holds.
  int32_t busyMachine = -1;
  int32_t machineRanks = 1;
  int32_t machineCpus = 0;
  int32_t machineHosts = 0;
};

// Allowed algorithms per collective (bit i = AlgoId i), from COLL_ALGO.
using AlgoMask = uint32_t;
inline constexpr int kCollKindCount = 11;
inline constexpr AlgoMask algoBit(AlgoId a) { return AlgoMask{1} << static_cast<int>(a); }
inline constexpr AlgoMask kAllAlgos = (AlgoMask{1} << kAlgoCount) - 1;

// Parses COLL_ALGO in NCCL's syntax: sections separated by ';', each "[collective:][^]algo[,algo...]".
// A section without a collective applies to every collective that has one of its algorithms
// (an error if none has); '^' excludes instead of selecting. Later sections replace earlier ones
// for the collectives they name. Names are case-insensitive. Unknown names are collInvalidUsage.
Status parseAlgoFilter(const std::string& text, AlgoMask allowed[kCollKindCount]);

// The algorithms the planner considers for a collective (before COLL_ALGO and applicability).
AlgoMask candidateAlgos(CollKind kind);

struct PlannerInputs {
  Topology const* topo = nullptr;
  bool haveWindows = false;      // shared windows exist (all local ranks share memory)
  uint64_t windowHalfBytes = 0;  // per rank
  LinkCost intraHost = kDefaultIntraLink;
  LinkCost interHost = kDefaultInterLink;  // per NIC
  // NICs per host (COLL_LINK_NICS_PER_HOST): inter-host traffic of local rank i leaves through NIC
  // i * nics / ranks-on-host. 1 = one link shared by all of a host's ranks (what the probe sees
  // on an emulated cluster); 0 = one per rank (a NIC per accelerator, as GPU clusters are built).
  int32_t nicsPerHost = 1;
  double gamma = kDefaultGamma;            // seconds per byte of local reduction or memory pass
  // Scale predictions by how much slower than the model each implementation ran on the machine
  // it was calibrated on (planner.cc); false = the pure model (what-if tables for other clusters).
  bool implementationFactors = true;
  // Whether a rank's reductions run alongside its transfers (GPU kernels, NIC DMA: the schedule
  // model's assumption) or take the same CPU time the copies do (host buffers on CPU cores, as
  // the emulated cluster that calibrated the factors above): All-Reduce rounds then add them.
  bool reductionOverlaps = false;
  std::string forcedAlgo;        // COLL_ALGO ("" = choose)
  std::string torusDims;         // COLL_TORUS_DIMS ("" = derived)
  uint64_t directMaxBytes = 0;   // COLL_DIRECT_MAX_BYTES (0 = window bound)
  uint64_t sliceBytes = 0;       // COLL_SLICE_BYTES when set explicitly: the planner keeps it
  // Derived by finalizePlannerInputs:
  uint64_t directLimit = 0;      // largest direct call in bytes
  AlgoMask allowed[kCollKindCount] = {};
  Status filterStatus;           // COLL_ALGO's parse result
  PlannerShape shape;
};

// Derives what the planner would otherwise recompute on every call (O(p log p) once).
void finalizePlannerInputs(PlannerInputs* in);

// One algorithm evaluated by the model.
struct Candidate {
  AlgoId algo = AlgoId::Ring;
  AlgoOptions options;
  uint64_t sliceBytes = 0;  // 0 = COLL_SLICE_BYTES
  double seconds = 0;
};

struct PlanChoice {
  AlgoId algo = AlgoId::Ring;
  AlgoOptions options;
  uint64_t sliceBytes = 0;           // executor chunk for this plan (0 = COLL_SLICE_BYTES)
  uint64_t roundElems = 0;           // > 0: the call runs as rounds of at most this many elements
  uint64_t reduceAllBelowBytes = 0;  // direct: every rank reduces everything below this size
  double predictedSeconds = 0;
  static constexpr int kMaxCandidates = 8;
  Candidate candidates[kMaxCandidates];  // every allowed, applicable algorithm, in AlgoId order
  int32_t ncandidates = 0;
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
// collAllReduceCompressed: two-shot or its hierarchical variant (COLL_ALGO's allreduce section
// may name twoshot or hier; naming neither leaves both).
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
  bool operator==(const PlanKey&) const = default;
};
PlanKey planKeyOf(const CollArgs& args, const PlanChoice& choice);

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
