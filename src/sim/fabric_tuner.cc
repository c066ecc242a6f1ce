// The fabric simulator as the planner's tuner (see fabric_tuner.h).
#include "src/sim/fabric_tuner.h"

#include <algorithm>

#include "src/base/log.h"
#include "src/sim/flow_sim.h"

namespace coll::sim {

Status FabricTuner::make(const FabricDescription& net, const Topology& topo, std::shared_ptr<const FabricTuner>* out) {
  out->reset();
  if (topo.nranks <= 0 || topo.nhosts <= 0 || topo.nranks % topo.nhosts != 0) {
    return makeError(collInvalidUsage, "COLL_TOPO_FABRIC: %d ranks on %d hosts are not the same count on every host",
                     topo.nranks, topo.nhosts);
  }
  const int32_t per = topo.nranks / topo.nhosts;
  for (int32_t r = 0; r < topo.nranks; ++r) {
    if (topo.hostOfRank[static_cast<size_t>(r)] != r / per) {
      return makeError(collInvalidUsage,
                       "COLL_TOPO_FABRIC: ranks are not in blocks of %d per host (rank %d is on host %d), which the "
                       "simulator assumes",
                       per, r, topo.hostOfRank[static_cast<size_t>(r)]);
    }
  }
  auto tuner = std::make_shared<FabricTuner>();
  tuner->net_ = net;
  tuner->net_.fabric.ranksPerNode = per;
  const int32_t nodes = net.nodes > 0 ? net.nodes : topo.nhosts;
  if (nodes < topo.nhosts) {
    return makeError(collInvalidUsage, "COLL_TOPO_FABRIC: %d hosts do not fit on nodes=%d", topo.nhosts, nodes);
  }
  COLL_TRY(Fabric::make(tuner->net_.fabric, nodes, &tuner->fabric_));
  COLL_TRY(placeHosts(net.placement, topo.nhosts, nodes, &tuner->nodeOfHost_));
  std::vector<int32_t> order(static_cast<size_t>(topo.nhosts));
  for (int32_t h = 0; h < topo.nhosts; ++h) order[h] = h;
  const std::vector<int32_t>& node = tuner->nodeOfHost_;
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return node[a] < node[b]; });
  if (!std::is_sorted(node.begin(), node.end())) {
    tuner->fabricOrder_ = order;
    for (int32_t h : order) tuner->nodeOfOrderedHost_.push_back(node[h]);
  }
  *out = std::move(tuner);
  return okStatus();
}

Status FabricTuner::price(const PlannerInputs& in, const CollArgs& args, Candidate* c) const {
  if (c->options.fabricHostOrder && fabricOrder_.empty()) {
    return makeError(collInvalidUsage, "COLL_TOPO_FABRIC: hosts in fabric order, but the fabric order is rank order");
  }
  return priceInOrder(in, args, c->options.fabricHostOrder ? nodeOfOrderedHost_ : nodeOfHost_, c);
}

// The simulator sees hosts in the schedule's order: the host at position h sits on nodeOfHost[h].
Status FabricTuner::priceInOrder(const PlannerInputs& in, const CollArgs& args, const std::vector<int32_t>& nodeOfHost,
                                 Candidate* c) const {
  SimParams params;
  params.model = net_.model;
  params.maxWork = net_.maxWork;
  const SimMode mode{true, net_.exactSteps};
  if (c->algo != AlgoId::Hierarchical || args.kind != CollKind::AllReduce) {
    SimResult r;
    COLL_TRY(simulatePlan(in, args, *c, fabric_, nodeOfHost, params, mode, &r, 0));
    c->seconds = r.seconds;
    return okStatus();
  }
  // The split: the model's must be priced (so the candidate is at least the model's choice of
  // it, simulated); every other algorithm across hosts that can be simulated may beat it.
  SimResult first;
  COLL_TRY(simulatePlan(in, args, *c, fabric_, nodeOfHost, params, mode, &first, 0));
  c->seconds = first.seconds;
  const uint64_t bytes = args.count * dataTypeSize(args.dtype);
  for (AlgoId x : {AlgoId::Ring, AlgoId::Tree, AlgoId::Torus, AlgoId::RecursiveDoubling, AlgoId::Rabenseifner}) {
    if (x == c->options.interHost) continue;
    Candidate h = predictHierarchicalAllReduce(in, x, bytes);
    if (h.seconds < 0) continue;
    h.options.fabricHostOrder = c->options.fabricHostOrder;
    SimResult r;
    if (simulatePlan(in, args, h, fabric_, nodeOfHost, params, mode, &r, 0).ok() && r.seconds < c->seconds) {
      c->options = h.options;
      c->sliceBytes = h.sliceBytes;
      c->seconds = r.seconds;
    }
  }
  return okStatus();
}

Status FabricTuner::priceBest(const PlannerInputs& in, const CollArgs& args, Candidate* c) const {
  Candidate inRankOrder = *c;
  inRankOrder.options.fabricHostOrder = false;
  COLL_TRY(price(in, args, &inRankOrder));
  // An All-Reduce's result does not depend on which rank holds which part on the way, so its
  // schedule may run with the hosts in fabric order (the others place blocks by rank).
  if (args.kind == CollKind::AllReduce && !fabricOrder_.empty()) {
    Candidate reordered = *c;
    reordered.options.fabricHostOrder = true;
    COLL_TRY(price(in, args, &reordered));
    if (reordered.seconds < inRankOrder.seconds) {
      *c = reordered;
      return okStatus();
    }
  }
  *c = inRankOrder;
  return okStatus();
}

bool FabricTuner::tune(const PlannerInputs& in, const CollArgs& args, Candidate* candidates, int n) const {
  for (int i = 0; i < n; ++i) {
    Candidate c = candidates[i];
    const Status st = priceBest(in, args, &c);
    if (!st.ok()) {
      COLL_INFO(
          in.topo->rank, "COLL_TOPO_FABRIC: %s of %llu elements planned by the model: %s cannot be simulated (%s)",
          collKindName(args.kind), static_cast<unsigned long long>(args.count), algoName(c.algo), st.message().c_str());
      return false;
    }
    candidates[i] = c;
  }
  return true;
}

}  // namespace coll::sim
