// PlanTuner: a second opinion on the planner's candidates, as NCCL's tuner plugins give one. The
// planner prices every allowed algorithm with its model; a tuner (the fabric simulator when
// COLL_TOPO_FABRIC describes the cluster network, src/sim/fabric_tuner.h) may re-price them all,
// and may pick other options for a candidate (hierarchical's algorithm across hosts). It lives in
// a layer above the planner and is handed down through PlannerInputs, so plan depends on nothing
// above it.
#pragma once

#include <vector>

#include "algorithms/model.h"
#include "src/schedule/coll_args.h"

namespace coll {

struct PlannerInputs;

class PlanTuner {
 public:
  virtual ~PlanTuner() = default;
  // Re-prices all n candidates of one call (each applicable, with the model's options and time),
  // or none: false leaves them as they were (a tuner that can price only some of them gives no
  // opinion, so that model and tuner times are never compared with each other). Must be
  // deterministic: every rank of a communicator plans alone and they must agree. Thread-safe.
  virtual bool tune(const PlannerInputs& in, const CollArgs& args, Candidate* candidates, int n) const = 0;
  // The host order a candidate with options.fabricHostOrder runs in: element h is the host (index
  // in rank order) at position h. Null: the tuner never reorders.
  virtual const std::vector<int32_t>* hostOrder() const { return nullptr; }
};

}  // namespace coll
