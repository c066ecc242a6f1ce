// Flow-level simulation of a collective's actual schedules on a fabric (fabric.h): every message
// (a Send step of count > 0 to another rank) is a flow over the links of its route, links are
// shared max-min fairly among the flows crossing them (recomputed whenever a flow starts or
// ends), and steps wait for their dependencies as the schedule model's graph says
// (src/plan/schedule_cost.h: the same graph, with its ports replaced by the fabric's links).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/base/status.h"
#include "src/plan/planner.h"
#include "src/plan/schedule_cost.h"
#include "src/schedule/coll_args.h"
#include "src/sim/fabric.h"

namespace coll::sim {

struct SimParams {
  // Latency per message inside a node and across nodes (hop latency comes on top, per switch),
  // memory bandwidth of local steps and the slice where a schedule names none. The link
  // bandwidths of LinkModel are the fabric's (intra-node port, NIC); its own are not used.
  LinkModel model;
  // Exact: every rank. Symmetric: host 0's ranks, each of their messages standing for its copies
  // on every host (translated by the host symmetry), which load the links as one flow class.
  CostOptions cost;
  // > 0: fail once rate solving has visited this many (flow, link) pairs, a deterministic bound on
  // the run's work (contended exact runs re-solve often).
  uint64_t maxWork = 0;
};

struct TierLoad {
  int32_t links = 0;    // links of the tier
  int32_t used = 0;     // that carried bytes
  double bytes = 0;     // carried, all links
  double meanUtil = 0;  // over used links: bytes / (bandwidth * time)
  double maxUtil = 0;
};
struct LinkLoad {
  int32_t link = 0;
  std::string name;  // Fabric::linkName
  double bytes = 0;
  double util = 0;
};

struct SimResult {
  double seconds = 0;
  CostMode mode = CostMode::Exact;
  int32_t ranksEvaluated = 0;
  uint64_t steps = 0;
  uint64_t flows = 0;       // flows simulated (classes' copies not counted)
  uint64_t rateSolves = 0;  // max-min computations (cache misses)
  uint64_t rateReuses = 0;  // active sets seen before
  uint64_t asymmetricTransfers = 0;
  TierLoad tiers[kLinkTiers];
  std::vector<LinkLoad> busiest;  // most loaded links, most first
  // A run stopped by SimParams::maxWork (it fails): the simulated time it had reached, a lower
  // bound on its makespan.
  double stoppedAt = 0;
};

// Simulates the schedules `build` makes for nranks ranks (fabric.spec().ranksPerNode consecutive
// ranks per host; host h on node nodeOfHost[h]).
Status simulateSchedules(const ScheduleBuilder& build, int32_t nranks, const Fabric& fabric,
                         const std::vector<int32_t>& nodeOfHost, const SimParams& params, SimResult* out,
                         int32_t topLinks = 10);

// How a run is evaluated: auto = exact up to exactSteps steps in all, else by host symmetry (when
// the schedules are not translation invariant that fails, naming the algorithm); otherwise as
// SimParams::cost says.
struct SimMode {
  bool autoMode = true;
  uint64_t exactSteps = 1'000'000;
};

// One planned call (an algorithm with its options and chunk, as the planner chose or a tuner
// tries) on the fabric: its rounds and the schedules the registry builds, for a communicator
// with pin's inputs (pin.topo->nranks ranks, fabric.spec().ranksPerNode consecutive per host,
// host h on node nodeOfHost[h]). SimParams' link bandwidths are taken from the fabric.
Status simulatePlan(const PlannerInputs& pin, const CollArgs& args, const Candidate& plan, const Fabric& fabric,
                    const std::vector<int32_t>& nodeOfHost, SimParams params, const SimMode& mode, SimResult* out,
                    int32_t topLinks = 10);

// One collective as the library would run it: the planner's choice (or `algo`, in COLL_ALGO's
// spelling), built by the registry, simulated on the fabric.
struct CollectiveSim {
  CollKind kind = CollKind::AllReduce;
  uint64_t count = 0;  // elements, as CollArgs counts them for `kind`
  collDataType_t dtype = collFloat32;
  std::string algo;       // "" = the planner's choice
  std::string torusDims;  // COLL_TORUS_DIMS' spelling ("" = the planner's grid)
  int32_t nranks = 0;
  int32_t fabricNodes = 0;  // 0 = one per host
  FabricSpec fabric;
  PlacementSpec placement;
  SimParams params;
  // Auto: exact up to this many steps in all, else by host symmetry.
  bool autoMode = true;
  uint64_t exactSteps = 1'000'000;  // exact runs slow down with contention: ~10 s at 1,024 ranks of a torus
  int32_t topLinks = 10;
};
struct CollectiveSimResult {
  SimResult sim;
  std::string algorithm;        // describeChoice of what ran
  double predictedSeconds = 0;  // the planner's model for it
};
Status simulateCollective(const CollectiveSim& in, CollectiveSimResult* out);
// The planner's inputs for a communicator of in's shape (`topo`: one of its ranks): the fabric's
// per-rank links, the pure model (no implementation factors measured elsewhere), in.algo as COLL_ALGO.
void plannerInputsFor(const CollectiveSim& in, const Topology* topo, PlannerInputs* pin);
// The call in describes (sum, out of place, root 0).
CollArgs callArgsFor(const CollectiveSim& in);

}  // namespace coll::sim
