// FabricTuner: the planner's candidates priced by the fabric simulator, for a communicator whose
// cluster network COLL_TOPO_FABRIC describes. Each candidate's actual schedules run on the fabric
// (flow_sim.h); hierarchical All-Reduce is tried with each algorithm across hosts (its split),
// keeping the fastest; an All-Reduce also with the hosts in fabric order (hostOrder()) where the
// placement is not linear. Within budgets that are counts, not wall time (FabricDescription), so
// every rank reaches the same verdict. A candidate the work budget stops once its simulated clock
// has passed the best priced candidate's time cannot win and is left out; any other candidate
// past the budgets leaves the call to the model.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "src/base/status.h"
#include "src/plan/planner.h"
#include "src/plan/tuner.h"
#include "src/sim/fabric.h"
#include "src/sim/fabric_description.h"
#include "src/topo/topology.h"

namespace coll::sim {

class FabricTuner final : public PlanTuner {
 public:
  // For a communicator of topo's shape: hosts of equal rank counts, ranks in host blocks (as the
  // simulator lays them out), placed on the fabric as `net` says. An error says why not.
  static Status make(const FabricDescription& net, const Topology& topo, std::shared_ptr<const FabricTuner>* out);

  bool tune(const PlannerInputs& in, const CollArgs& args, Candidate* candidates, int n) const override;

  // What tune() decides from, per candidate: priced (status ok; hierarchical at its best split,
  // in its better host order), stopped by the work budget with a lower bound in its seconds, or
  // not simulated (status says why). True when the tuner has an opinion: every candidate priced
  // or bounded above the best; else *why says what stopped it.
  struct Priced {
    Candidate candidate;
    Status status;
    bool lowerBound = false;
  };
  bool priceAll(const PlannerInputs& in, const CollArgs& args, Candidate* candidates, int n, std::vector<Priced>* out,
                std::string* why = nullptr) const;

  // Hosts by their fabric node (stably): ring neighbours under one leaf where the placement
  // scattered them. Null when that is rank order already (a linear placement).
  const std::vector<int32_t>* hostOrder() const override { return fabricOrder_.empty() ? nullptr : &fabricOrder_; }

  // One candidate's simulated time, in the host order its options say; an error when it cannot
  // be simulated within the budgets. Hierarchical All-Reduce: the model's split must be priced,
  // and any other split that can be and is faster replaces it in *c's options.
  // *stoppedAt (if given): for a run the work budget stopped, the simulated time it had
  // reached, a lower bound on the candidate's time.
  Status price(const PlannerInputs& in, const CollArgs& args, Candidate* c, double* stoppedAt = nullptr) const;
  // price() in rank order and, for an All-Reduce whose hosts have a fabric order, in that order
  // too: *c gets the faster (options.fabricHostOrder says which).
  Status priceBest(const PlannerInputs& in, const CollArgs& args, Candidate* c, double* stoppedAt = nullptr) const;
  const FabricDescription& description() const { return net_; }

 private:
  Status priceInOrder(const PlannerInputs& in, const CollArgs& args, const std::vector<int32_t>& nodeOfHost,
                      Candidate* c, double* stoppedAt) const;

  FabricDescription net_;
  Fabric fabric_;
  std::vector<int32_t> nodeOfHost_;
  std::vector<int32_t> fabricOrder_;        // empty: rank order is the fabric order
  std::vector<int32_t> nodeOfOrderedHost_;  // nodeOfHost_ of the hosts in fabricOrder_
};

}  // namespace coll::sim
