// The fabric simulator as the planner's tuner (see fabric_tuner.h).
#include "src/sim/fabric_tuner.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "src/base/log.h"
#include "src/sim/flow_sim.h"

namespace coll::sim {

Status FabricTuner::make(const FabricDescription& net, const Topology& topo, std::shared_ptr<const FabricTuner>* out) {
  out->reset();
  if (!isUniformBlocks(topo)) {
    return makeError(collInvalidUsage,
                     "COLL_TOPO_FABRIC: %d ranks on %d hosts are not in blocks of the same count per host, which the "
                     "simulator assumes",
                     topo.nranks, topo.nhosts);
  }
  const int32_t per = topo.nranks / topo.nhosts;
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

Status FabricTuner::price(const PlannerInputs& in, const CollArgs& args, Candidate* c, double* stoppedAt) const {
  if (c->options.fabricHostOrder && fabricOrder_.empty()) {
    return makeError(collInvalidUsage, "COLL_TOPO_FABRIC: hosts in fabric order, but the fabric order is rank order");
  }
  return priceInOrder(in, args, c->options.fabricHostOrder ? nodeOfOrderedHost_ : nodeOfHost_, c, stoppedAt);
}

// The simulator sees hosts in the schedule's order: the host at position h sits on nodeOfHost[h].
Status FabricTuner::priceInOrder(const PlannerInputs& in, const CollArgs& args, const std::vector<int32_t>& nodeOfHost,
                                 Candidate* c, double* stoppedAt) const {
  SimParams params;
  params.model = net_.model;
  params.maxWork = net_.maxWork;
  const SimMode mode{true, net_.exactSteps};
  auto simulate = [&](const Candidate& plan, SimResult* r) {
    const Status st = simulatePlan(in, args, plan, fabric_, nodeOfHost, params, mode, r, 0);
    if (!st.ok() && stoppedAt != nullptr) *stoppedAt = r->stoppedAt;
    return st;
  };
  if (c->algo != AlgoId::Hierarchical || args.kind != CollKind::AllReduce) {
    SimResult r;
    COLL_TRY(simulate(*c, &r));
    c->seconds = r.seconds;
    return okStatus();
  }
  // The split: the model's must be priced (so the candidate is at least the model's choice of
  // it, simulated); every other algorithm across hosts that can be simulated may beat it.
  SimResult first;
  COLL_TRY(simulate(*c, &first));
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

Status FabricTuner::priceBest(const PlannerInputs& in, const CollArgs& args, Candidate* c, double* stoppedAt) const {
  Candidate inRankOrder = *c;
  inRankOrder.options.fabricHostOrder = false;
  COLL_TRY(price(in, args, &inRankOrder, stoppedAt));
  // An All-Reduce's result does not depend on which rank holds which part on the way, so its
  // schedule may run with the hosts in fabric order (the others place blocks by rank). The
  // reordered run only improves on the priced one: if it cannot be priced, rank order stands.
  if (args.kind == CollKind::AllReduce && !fabricOrder_.empty()) {
    Candidate reordered = *c;
    reordered.options.fabricHostOrder = true;
    if (price(in, args, &reordered).ok() && reordered.seconds < inRankOrder.seconds) {
      *c = reordered;
      return okStatus();
    }
  }
  *c = inRankOrder;
  return okStatus();
}

bool FabricTuner::priceAll(const PlannerInputs& in, const CollArgs& args, Candidate* candidates, int n,
                           std::vector<Priced>* out, std::string* why) const {
  // The model's fastest first, so that a good simulated time is known early: a candidate the
  // work budget stops after its clock has passed that time is slower, whatever it would take.
  std::vector<int> order(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return candidates[a].seconds < candidates[b].seconds; });
  out->assign(static_cast<size_t>(n), Priced{});
  double best = -1;
  bool all = true;
  for (int i : order) {
    Priced& p = (*out)[i];
    p.candidate = candidates[i];
    double stoppedAt = 0;
    p.status = priceBest(in, args, &p.candidate, &stoppedAt);
    if (p.status.ok()) {
      if (best < 0 || p.candidate.seconds < best) best = p.candidate.seconds;
    } else if (stoppedAt > 0) {
      p.candidate.seconds = stoppedAt;
      p.lowerBound = true;
    } else {
      if (all && why != nullptr) *why = std::string(algoName(candidates[i].algo)) + ": " + p.status.message();
      all = false;
    }
  }
  for (Priced& p : *out) {
    if (p.lowerBound && (best < 0 || p.candidate.seconds <= best)) {
      if (all && why != nullptr) {
        char buf[200];
        snprintf(buf, sizeof buf, "%s passed the work budget at %.1f us simulated, short of the best priced (%.1f us)",
                 algoName(p.candidate.algo), p.candidate.seconds * 1e6, best * 1e6);
        *why = buf;
      }
      all = false;
    }
  }
  return all;
}

bool FabricTuner::tune(const PlannerInputs& in, const CollArgs& args, Candidate* candidates, int n) const {
  std::vector<Priced> priced;
  std::string why;
  if (!priceAll(in, args, candidates, n, &priced, &why)) {
    COLL_INFO(in.topo->rank, "COLL_TOPO_FABRIC: %s of %llu elements planned by the model (%s)", collKindName(args.kind),
              static_cast<unsigned long long>(args.count), why.c_str());
    return false;
  }
  for (int i = 0; i < n; ++i) candidates[i] = priced[static_cast<size_t>(i)].candidate;
  return true;
}

}  // namespace coll::sim
