// The cost model's inputs (link costs, the communicator's shape) and the primitives algorithms'
// predictions are made of, below the planner so each descriptor (registry.h) holds its own.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/algorithms.h"
#include "src/schedule/coll_args.h"
#include "src/topo/topology.h"

namespace coll {

// Cost of moving a message over one link class: alpha seconds per message, beta seconds per byte.
// Intra-host: one hop between two ranks of a host, whatever the transport does (two copies through
// a shared-memory FIFO). Inter-host: one network link (NIC); ModelInputs::nicsPerHost says how
// many a host has and so how many of its ranks share one.
struct LinkCost {
  double alpha = 0;
  double beta = 0;
};

// The leads used when neither the probe nor the COLL_LINK_* knobs give a value.
inline constexpr LinkCost kDefaultIntraLink{1.0e-6, 1.0 / 4.0e9};
inline constexpr LinkCost kDefaultInterLink{25.0e-6, 1.0 / 1.2e9};
inline constexpr double kDefaultGamma = 1.0 / 8.0e9;
// COLL_SLICE_BYTES' default: the chunk a plan keeps unless the model finds a better one.
inline constexpr uint64_t kDefaultSliceBytes = 128 * 1024;

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
  int32_t ranksPerNic = 1;  // the most ranks of a host that share one NIC
  bool uniformBlocks = false;
  bool hierPossible = false;        // > 1 host and some host with > 1 rank
  StepLoad ring;                    // flat ring in rank order (also chains and ring all-gather)
  double ringInterFraction = 0;     // share of the ring's hops that cross hosts
  int32_t core = 1;                 // recursive doubling/halving: p' = largest power of two <= p
  StepLoad fold;                    // the first 2(p - p') ranks pairing up (p' < p)
  std::vector<StepLoad> pairSteps;  // step k: core members at distance 2^k
  std::vector<StepLoad> binomial;   // binomial tree from rank 0, round k: i -> i + 2^k
  std::vector<StepLoad> bruck;      // Bruck round k: r -> r - 2^k
  int32_t treeHeight = 0;           // double binary tree over the hosts (or ranks on one host)
  bool torusOk = false;             // a grid with >= 2 dims > 1, or dims forced and valid
  TorusDims torus;
  std::vector<StepLoad> torusDims;         // per dimension: both directions of its rings
  std::vector<double> torusInterFraction;  // per dimension: share of its hops that cross hosts
  std::string torusProblem;                // why torus cannot apply
  TorusDims hostTorus;                     // hierarchical's inter-host torus (over hosts)
  bool hostTorusOk = false;
  // The most oversubscribed machine (Topology::setMachines): its index, ranks, CPUs (0 = none:
  // every machine has a CPU per rank, or its CPUs are unknown) and the hosts it holds.
  int32_t busyMachine = -1;
  int32_t machineRanks = 1;
  int32_t machineCpus = 0;
  int32_t machineHosts = 0;
};

// Everything a prediction or an applicability check reads; the planner's PlannerInputs adds
// COLL_ALGO's filter to it.
struct ModelInputs {
  Topology const* topo = nullptr;
  bool haveWindows = false;      // shared windows exist (all local ranks share memory)
  uint64_t windowHalfBytes = 0;  // per rank
  LinkCost intraHost = kDefaultIntraLink;
  LinkCost interHost = kDefaultInterLink;  // per NIC
  // NICs per host (COLL_LINK_NICS_PER_HOST): inter-host traffic of local rank i leaves through NIC
  // i * nics / ranks-on-host. 1 = one link shared by all of a host's ranks (what the probe sees
  // on an emulated cluster); 0 = one per rank (a NIC per accelerator, as GPU clusters are built).
  int32_t nicsPerHost = 1;
  double gamma = kDefaultGamma;  // seconds per byte of local reduction or memory pass
  // Scale predictions by how much slower than the model each implementation ran on the machine
  // it was calibrated on (AlgorithmDescriptor::allReduceFactor); false = the pure model (what-if
  // tables for other clusters).
  bool implementationFactors = true;
  // Whether a rank's reductions run alongside its transfers (GPU kernels, NIC DMA: the schedule
  // model's assumption) or take the same CPU time the copies do (host buffers on CPU cores, as
  // the emulated cluster that calibrated the factors above): All-Reduce rounds then add them.
  bool reductionOverlaps = false;
  std::string torusDims;        // COLL_TORUS_DIMS ("" = derived)
  uint64_t directMaxBytes = 0;  // COLL_DIRECT_MAX_BYTES (0 = window bound)
  uint64_t sliceBytes = 0;      // COLL_SLICE_BYTES when set explicitly: the planner keeps it
  // Derived by finalizePlannerInputs:
  uint64_t directLimit = 0;  // largest direct call in bytes
  PlannerShape shape;
};

// One algorithm evaluated by the model.
struct Candidate {
  AlgoId algo = AlgoId::Ring;
  AlgoOptions options;
  uint64_t sliceBytes = 0;  // 0 = COLL_SLICE_BYTES
  double seconds = 0;
};

// How much slower than its model an implementation ran where it was calibrated
// (bench/planner_vs_forced.sh). The phased algorithms wait at a gate between phases and make more
// local passes than the model counts, so their factor scales only what the bytes add to the
// call's latency; others scale the whole call.
struct ImplementationFactor {
  double factor = 1.0;
  bool wholeCall = true;  // false: the bytes' share only
};

// `seconds`, the model's time, scaled by `f` (unless the inputs leave factors out): the whole
// call, or what the bytes add to the latency (`latencyModel()`: the same model with no bytes).
template <typename LatencyModel>
double withImplementationFactor(const ModelInputs& in, ImplementationFactor f, double seconds,
                                LatencyModel latencyModel) {
  if (!in.implementationFactors) f = ImplementationFactor{};
  if (f.factor == 1.0 || seconds <= 0) return seconds;
  const double latency = f.wholeCall ? 0.0 : latencyModel();
  return latency + f.factor * std::max(0.0, seconds - latency);
}

// Says why an algorithm does not apply, building the reason only when asked for (the planner
// asks on every call without one). Returns false, so `return notApplicable(why, [&] {...});`.
template <typename Reason>
bool notApplicable(std::string* why, Reason reason) {
  if (why != nullptr) *why = reason();
  return false;
}

int log2Floor(int64_t v);
int log2Ceil(int64_t v);

// How a round's partners exchange: pairwise (both ways on each connection, recursive doubling and
// halving, trees, the torus's two directions) or as a ring (each rank sends to one and receives
// from another; each connection carries bytes one way).
enum class StepFlow { Exchange, Ring };

// How many alphas one round's messages across hosts take (model.cc says how).
double interAlphas(const ModelInputs& in, const StepLoad& l, StepFlow flow = StepFlow::Exchange);
// The load of a round in which only `share` of the ranks send (the rest hold empty chunks).
inline StepLoad withSendingShare(StepLoad l, double share) {
  l.sendingShare = share;
  return l;
}
// One round of `bytes` per transfer under load `l`, unpipelined.
double stepCost(const ModelInputs& in, const StepLoad& l, double bytes);
// Bytes the busiest member of a double binary tree over n members moves per byte of the call, per
// direction: an interior node forwards its tree's half to two children and the other tree's
// half up, 2n in all; with two members each tree is a root and a leaf, so each link direction
// carries the call once.
inline double treeBusyFactor(int64_t members) { return members > 2 ? 2.0 : 1.0; }
// The ranks of one ring that hold a non-empty chunk of `count` elements: a ring's empty chunks
// send nothing, so with fewer elements than members only that many work in a step.
inline int64_t nonEmptyChunks(uint64_t count, int64_t members) {
  return count > 0 && static_cast<int64_t>(count) < members ? static_cast<int64_t>(count) : members;
}

// A pipeline carrying `bytes` in chunks: the first chunk's trip through every stage (fill), then
// one chunk per occupancy of the busiest resource. Picks the chunk (unless COLL_SLICE_BYTES was
// set) and returns the time.
template <typename Fill, typename Busy>
double streamedPipeline(const ModelInputs& in, double bytes, Fill fill, Busy busy, uint64_t* sliceOut) {
  // A pipelined plan changes its chunk only when the model gains this much (fewer distinct plans).
  constexpr double kSliceGain = 0.97;
  auto eval = [&](uint64_t s) {
    const double chunk = std::min<double>(bytes, static_cast<double>(s));
    const double chunks = bytes <= 0 ? 1 : std::ceil(bytes / static_cast<double>(s));
    return fill(chunk) + (chunks - 1) * busy(chunk);
  };
  const uint64_t base = in.sliceBytes != 0 ? in.sliceBytes : kDefaultSliceBytes;
  double best = eval(base);
  *sliceOut = 0;
  if (in.sliceBytes != 0) return best;
  for (uint64_t s = 16 * 1024; s <= 1024 * 1024; s *= 2) {
    const double t = eval(s);
    if (t < best * kSliceGain) best = t, *sliceOut = s;
  }
  return best;
}

// A pipeline `depth` stages deep carrying `bytes` in chunks: (depth + chunks - 1) chunk times.
template <typename ChunkTime>
double pipelined(const ModelInputs& in, int64_t depth, double bytes, ChunkTime chunkTime, uint64_t* sliceOut) {
  const double stages = static_cast<double>(std::max<int64_t>(depth, 1));
  return streamedPipeline(
      in, bytes, [&](double s) { return stages * chunkTime(s); }, chunkTime, sliceOut);
}

// `steps` steps of `chunk` bytes per transfer, slices streaming through each (model.cc);
// `interFraction` of the hops cross hosts; `reduce`: chunks a rank reduces per step (0 = none;
// 2 for both directions of a torus dimension).
double streamedSteps(const ModelInputs& in, double steps, const StepLoad& l, double interFraction, double chunk,
                     double reduce, StepFlow flow = StepFlow::Exchange);
// One step of a pairwise algorithm (recursive doubling, Rabenseifner): its latency is the slowest
// pair's.
double streamedStep(const ModelInputs& in, const StepLoad& l, double chunk, double reduce);

// Hierarchical's model with its inter-host algorithm fixed (`interHost`; Hierarchical = the best
// one), for tools comparing it against schedules (hierarchical.cc).
Candidate hierarchicalModel(const ModelInputs& in, CollKind kind, uint64_t bytes, uint64_t count, AlgoId interHost);
// The hierarchical compressed All-Reduce's model; < 0 where hosts hold unequal rank counts
// (compressed.cc).
double hierarchicalCompressedModel(const ModelInputs& in, const CollArgs& args);

}  // namespace coll
