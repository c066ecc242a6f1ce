// A communicator's planner inputs and plan cache (see plan_cache.h).
#include "src/comm/plan_cache.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "algorithms/algorithms.h"
#include "algorithms/registry.h"
#include "src/base/config.h"
#include "src/base/log.h"
#include "src/sim/fabric_description.h"
#include "src/sim/fabric_tuner.h"

namespace coll {

const StringKnob kAlgo("COLL_ALGO", "",
                       "Restrict the planner's algorithms, NCCL syntax: ring (every collective that has it), "
                       "allreduce:tree,ring;allgather:bruck (per collective), ^tree or allreduce:^ring (exclude). "
                       "Algorithms: the names collinfo lists (the algorithm registry: ring, tree, direct, hier, ...). "
                       "A filter that leaves a collective nothing that can run is an error at init.",
                       {KnobSection::PlannerExecutor, 10});
const StringKnob kTorusDims("COLL_TORUS_DIMS", "",
                            "Torus All-Reduce grid, XxY or XxYxZ, multiplying to the rank count (default: ranks per "
                            "host x hosts, else the most balanced factorisation).",
                            {KnobSection::PlannerExecutor, 20});
const IntKnob kLinkNicsPerHost("COLL_LINK_NICS_PER_HOST", "1",
                               "Planner: network links per host that inter-host traffic spreads over (local rank i "
                               "uses link i*N/ranks-on-host). 1 (default): one link shared by all of a host's ranks, "
                               "as on an emulated cluster; 0: one per rank (a NIC per GPU, as real GPU clusters).",
                               {KnobSection::PlannerExecutor, 80});
const StringKnob kTopoFabric(
    "COLL_TOPO_FABRIC", "",
    "The cluster network, for the planner to choose by simulated cost (the fabric simulator runs each "
    "candidate's schedules on it: hierarchical at each split across hosts, All-Reduce also with the hosts in "
    "fabric order where the placement scatters them): KIND[,key=value...] or @FILE, "
    "collsim's options as keys, e.g. fattree2,leaf-ports=32,uplinks=8,oversub=4,nic=50. Calls the simulator cannot "
    "price within its budgets (keys exact-steps, work) keep the model's choice. Unset: the model alone.",
    {KnobSection::PlannerExecutor, 25});
const BytesKnob kDirectMaxBytes(
    "COLL_DIRECT_MAX_BYTES", "",
    "Largest message the planner sends through the direct algorithm (default: what fits in a window half).",
    {KnobSection::PlannerExecutor, 100});

Status PlanCache::checkAlgoKnob(const Topology& topo, bool haveWindows, uint64_t windowHalfBytes) {
  PlannerInputs early;
  early.topo = &topo;
  early.haveWindows = haveWindows;
  early.windowHalfBytes = windowHalfBytes;
  early.forcedAlgo = kAlgo.get();
  early.torusDims = kTorusDims.get();
  finalizePlannerInputs(&early);
  return checkForcedAlgo(early);
}

Status PlanCache::setInputs(bool haveWindows, uint64_t windowHalfBytes) {
  PlannerInputs& in = plannerInputs_;
  in.topo = &topo_;
  in.haveWindows = haveWindows;
  in.windowHalfBytes = windowHalfBytes;
  in.forcedAlgo = kAlgo.get();
  in.torusDims = kTorusDims.get();
  in.directMaxBytes = kDirectMaxBytes.get();
  // An explicit COLL_SLICE_BYTES is the user's chunk: the planner keeps it.
  in.sliceBytes = kSliceBytes.raw() ? kSliceBytes.get() : 0;
  const int64_t nics = kLinkNicsPerHost.get();
  if (nics < 0 || nics > 65536) {
    return makeError(collInvalidUsage,
                     "COLL_LINK_NICS_PER_HOST=%lld: want 0 (one NIC per rank) or a count of NICs per host",
                     static_cast<long long>(nics));
  }
  in.nicsPerHost = static_cast<int32_t>(nics);
  in.tuner.reset();
  rankInHostOrder_.clear();
  if (const std::string fabric = kTopoFabric.get(); !fabric.empty()) {
    sim::FabricDescription net;
    const Status parsed = sim::parseFabricDescription(fabric, &net);
    if (!parsed.ok()) {
      return makeError(collInvalidUsage, "COLL_TOPO_FABRIC=%s: %s", fabric.c_str(), parsed.message().c_str());
    }
    std::shared_ptr<const sim::FabricTuner> tuner;
    const Status made = sim::FabricTuner::make(net, topo_, &tuner);
    if (made.ok()) {
      in.tuner = tuner;
      if (const std::vector<int32_t>* order = tuner->hostOrder(); order != nullptr) {
        // The topology plans see when hosts run in fabric order, and the real rank at each place.
        const int32_t per = topo_.nranks / topo_.nhosts;
        rankInHostOrder_ = ranksInHostOrder(*order, per);
        if (!rankInLocalOrder_.empty()) {
          for (int32_t& r : rankInHostOrder_) r = rankInLocalOrder_[static_cast<size_t>(r)];
        }
        const auto me = std::find(rankInHostOrder_.begin(), rankInHostOrder_.end(), topo_.rank);
        hostOrderTopo_ = Topology::uniform(static_cast<int32_t>(me - rankInHostOrder_.begin()), topo_.nranks, per);
      }
      if (rank() == 0) COLL_INFO(rank(), "planner: choosing by simulation on %s", sim::describeFabric(net).c_str());
    } else if (rank() == 0) {
      COLL_WARN(rank(), "%s; the planner uses its model alone", made.message().c_str());
    }
  }
  finalizePlannerInputs(&in);
  COLL_TRY(checkForcedAlgo(in));
  if (!in.torusDims.empty() && !in.shape.torusOk && rank() == 0) {
    COLL_WARN(rank(), "COLL_TORUS_DIMS=%s: %s; the planner will not use torus", in.torusDims.c_str(),
              in.shape.torusProblem.c_str());
  }
  return okStatus();
}

Status PlanCache::choosePlan(const CollArgs& args, const PlanChoice** out) {
  for (const ChoiceEntry& e : choices_) {
    if (e.kind == args.kind && e.count == args.count && e.dtype == args.dtype && e.op == args.op &&
        e.root == args.root) {
      *out = &e.choice;
      return okStatus();
    }
  }
  ChoiceEntry entry{args.kind, args.count, args.dtype, args.op, args.root, PlanChoice{}};
  COLL_TRY(planCollective(plannerInputs_, args, &entry.choice));
  ChoiceEntry* kept;
  if (choices_.size() < kMaxChoices) {
    kept = &choices_.emplace_back(entry);
  } else {
    kept = &choices_[nextChoice_];
    *kept = entry;
    nextChoice_ = (nextChoice_ + 1) % kMaxChoices;
  }
  *out = &kept->choice;
  return okStatus();
}

PlanCache::PlanEntry& PlanCache::planFor(const CollArgs& args, const PlanChoice& choice, uint64_t callCount) {
  const PlanKey key = planKeyOf(args, choice);
  for (auto it = plans_.begin(); it != plans_.end(); ++it) {
    if (it->key == key) {
      if (it != plans_.begin()) plans_.splice(plans_.begin(), plans_, it);
      return plans_.front();
    }
  }
  if (plans_.size() >= kMaxPlans) {
    // Reuse the least recently used entry's storage.
    plans_.splice(plans_.begin(), plans_, std::prev(plans_.end()));
  } else {
    plans_.emplace_front();
  }
  PlanEntry& entry = plans_.front();
  entry.key = key;
  entry.schedule.clear();
  buildPlan(args, choice, &entry.schedule);
  if (rank() == 0 && logEnabled(LogLevel::Info)) logPlan(args, choice, callCount);
  return entry;
}

void PlanCache::logPlan(const CollArgs& args, const PlanChoice& choice, uint64_t callCount) const {
  std::string others;
  for (int i = 0; i < choice.ncandidates; ++i) {
    const Candidate& c = choice.candidates[i];
    char buf[160];
    snprintf(buf, sizeof(buf), "%s%s %.1f", others.empty() ? "" : ", ", describeChoice(c.algo, c.options, 0).c_str(),
             c.seconds * 1e6);
    others += buf;
  }
  // A call run in rounds is logged under its own count (the one the user passed), with the round's.
  char rounds[64] = "";
  if (callCount > args.count) {
    snprintf(rounds, sizeof(rounds), ", in rounds (this one %llu)", static_cast<unsigned long long>(args.count));
  }
  COLL_INFO(rank(), "plan %s %llu x %s: %s %s %.1f us [%s]%s", collKindName(args.kind),
            static_cast<unsigned long long>(std::max(callCount, args.count)), dataTypeName(args.dtype),
            describeChoice(choice.algo, choice.options, choice.sliceBytes).c_str(),
            choice.tuned ? "simulated" : "predicted", choice.predictedSeconds * 1e6, others.c_str(), rounds);
}

void PlanCache::setLocalOrder(std::vector<int32_t> rankOf) {
  rankInLocalOrder_ = std::move(rankOf);
  if (rankInLocalOrder_.empty()) return;
  localOrderTopo_ = topo_;
  localOrderTopo_.rank = static_cast<int32_t>(
      std::find(rankInLocalOrder_.begin(), rankInLocalOrder_.end(), topo_.rank) - rankInLocalOrder_.begin());
}

void PlanCache::buildPlan(const CollArgs& args, const PlanChoice& choice, Schedule* out) const {
  if (args.kind == CollKind::Send || args.kind == CollKind::Recv)
    return;  // point-to-point calls go through pointToPoint()
  // A plan in another order is built with this rank at its place and renamed back. Only an
  // All-Reduce's result is the same whatever place each rank holds: the others' buffers are laid
  // out by rank (an All-Gather's block r is rank r's), which renaming would not move.
  const Topology* placed = &topo_;
  const std::vector<int32_t>* rankOf = nullptr;
  if (choice.options.fabricHostOrder && !rankInHostOrder_.empty()) {
    placed = &hostOrderTopo_, rankOf = &rankInHostOrder_;
  } else if (args.kind == CollKind::AllReduce && !rankInLocalOrder_.empty()) {
    placed = &localOrderTopo_, rankOf = &rankInLocalOrder_;
  }
  const BuildRequest request{*placed, args, choice.options, plannerInputs_.windowHalfBytes, choice.reduceAllBelowBytes};
  algorithm(choice.algo).build(request, out);
  if (rankOf != nullptr) out->renameRanks(*rankOf);
  if (choice.sliceBytes != 0) out->sliceBytes = choice.sliceBytes;
}

}  // namespace coll
