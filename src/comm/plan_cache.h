// PlanCache: a communicator's planner inputs and the plans it has made: the planner's recent
// choices by call signature, and the schedules built for them, each with its prepared Execution.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <vector>

#include "src/base/status.h"
#include "src/exec/executor.h"
#include "src/plan/planner.h"
#include "src/schedule/coll_args.h"
#include "src/schedule/schedule.h"
#include "src/topo/topology.h"

namespace coll {

class PlanCache {
 public:
  // A cached plan keeps its own prepared Execution: a repeated call only rebinds pointers.
  struct PlanEntry {
    PlanKey key;
    Schedule schedule;
    Execution execution;
  };

  explicit PlanCache(const Topology& topo) : topo_(topo) {}
  PlanCache(const PlanCache&) = delete;
  PlanCache& operator=(const PlanCache&) = delete;

  // Refuses a COLL_ALGO that cannot run on `topo` (before anything shared exists).
  static Status checkAlgoKnob(const Topology& topo, bool haveWindows, uint64_t windowHalfBytes);
  // The planner's inputs from the topology, the windows and the planner's knobs; the link model
  // is set afterwards (link_probe.h).
  Status setInputs(bool haveWindows, uint64_t windowHalfBytes);
  // Each host's ranks in ring order (ranksInLocalOrder; empty: rank order): every All-Reduce plan
  // is built with this rank at its place and renamed back. Before setInputs (a fabric order
  // composes it).
  void setLocalOrder(std::vector<int32_t> rankOf);
  PlannerInputs& inputs() { return plannerInputs_; }
  const PlannerInputs& inputs() const { return plannerInputs_; }

  // The planner's choice for this call: the one made for the last call of the same signature
  // (kind, count, type, op, root), else planCollective's, kept. The planner's inputs are fixed once
  // the communicator is set up (the link probe, which runs before, plans with planCollective), and
  // evaluating every algorithm's model on every call (about 0.3 us a call) added about 1 us to an
  // 8 B All-Reduce of 8 ranks on 2 CPUs (7.3 us automatic, 6.3 us direct forced).
  // *out points into the cache (no copy of the candidate list on the hot path) and stays valid
  // until the next choosePlan.
  Status choosePlan(const CollArgs& args, const PlanChoice** out);
  // The plan for this call shape, from the cache or built now (the only allocation on a new shape).
  // callCount: the whole call's count when `args` is one round of it (for the INFO log only).
  PlanEntry& planFor(const CollArgs& args, const PlanChoice& choice, uint64_t callCount = 0);

 private:
  int rank() const { return topo_.rank; }
  void buildPlan(const CollArgs& args, const PlanChoice& choice, Schedule* out) const;
  void logPlan(const CollArgs& args, const PlanChoice& choice, uint64_t callCount) const;

  const Topology& topo_;
  PlannerInputs plannerInputs_;
  std::list<PlanEntry> plans_;  // most recently used first, at most kMaxPlans
  static constexpr size_t kMaxPlans = 16;
  // choosePlan's recent choices, replaced round robin.
  struct ChoiceEntry {
    CollKind kind;
    uint64_t count;
    collDataType_t dtype;
    collRedOp_t op;
    int32_t root;
    PlanChoice choice;
  };
  std::vector<ChoiceEntry> choices_;
  // COLL_TOPO_FABRIC's host order (PlanTuner::hostOrder): the real rank at each position, and
  // this rank's topology in that order, for plans chosen with options.fabricHostOrder. Each host's
  // ranks go in the local order there too.
  std::vector<int32_t> rankInHostOrder_;
  Topology hostOrderTopo_;
  // The local order (setLocalOrder) and this rank's topology at its place in it, for every other plan.
  std::vector<int32_t> rankInLocalOrder_;
  Topology localOrderTopo_;
  size_t nextChoice_ = 0;
  static constexpr size_t kMaxChoices = 16;
};

}  // namespace coll
