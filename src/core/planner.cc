// Planner implementation. The model is deliberately simple: ring All-Reduce takes 2(p-1) steps of
// n/p bytes over its slowest link; direct All-Reduce (one host) takes two synchronisation hops
// and moves each byte about three times through memory (copy in, reduce, copy out).
#include "core/planner.h"

#include <algorithm>

#include "algorithms/algorithms.h"
#include "exec/schedule.h"

namespace coll {

double predictRing(const PlannerInputs& in, uint64_t bytes) {
  const Topology& t = *in.topo;
  int p = t.nranks;
  if (p <= 1) return 0;
  const LinkCost& link = t.singleHost() ? in.intraHost : in.interHost;
  double steps = 2.0 * (p - 1);
  // Through shared memory each hop is two copies (into the FIFO, then reduced out of it); over a
  // network the copies hide behind the wire.
  double copies = t.singleHost() ? 2.0 : 1.0;
  return steps * (link.alpha + copies * (static_cast<double>(bytes) / p) * link.beta);
}

namespace {
// Below this size every rank reduces the whole vector itself: p times the reads, one hop less.
constexpr uint64_t kReduceAllBelowBytes = 16 * 1024;
}  // namespace

double predictDirect(const PlannerInputs& in, uint64_t bytes) {
  const Topology& t = *in.topo;
  int p = t.nranks;
  if (p <= 1) return 0;
  const double n = static_cast<double>(bytes);
  // Small: copy in, one hop, read all p windows. Sliced: copy in, reduce a slice reading p
  // windows, a second hop, copy the whole result out.
  if (bytes < kReduceAllBelowBytes) return in.intraHost.alpha + (1.0 + p) * n * in.intraHost.beta;
  return 2.0 * in.intraHost.alpha + 3.0 * n * in.intraHost.beta;
}

namespace {

uint64_t directLimitBytes(const PlannerInputs& in) { return in.directLimit; }

bool directPossible(const PlannerInputs& in) {
  return in.haveWindows && in.topo->singleHost() && in.topo->nranks > 1;
}

}  // namespace

void finalizePlannerInputs(PlannerInputs* in) {
  uint64_t limit = in->haveWindows ? directMaxBytes(in->windowHalfBytes, in->topo->localSize()) : 0;
  if (in->directMaxBytes > 0) limit = std::min(limit, in->directMaxBytes);
  in->directLimit = limit;
}

Status checkForcedAlgo(const PlannerInputs& in) {
  const std::string& f = in.forcedAlgo;
  if (f.empty()) return okStatus();
  if (f != "ring" && f != "direct") {
    return makeError(collInvalidUsage, "COLL_ALGO=%s is not an All-Reduce algorithm (known: ring, direct)",
                     f.c_str());
  }
  if (f == "direct" && !directPossible(in) && in.topo->nranks > 1) {
    return makeError(collInvalidUsage,
                     "COLL_ALGO=direct needs every rank on one host with shared memory (this communicator has "
                     "%d hosts%s); unset COLL_ALGO or use ring",
                     in.topo->nhosts, in.haveWindows ? "" : " and no shared windows, e.g. COLL_TRANSPORT=tcp");
  }
  return okStatus();
}

Status planAllReduce(const PlannerInputs& in, const CollArgs& args, PlanChoice* out) {
  COLL_TRY(checkForcedAlgo(in));
  const uint64_t es = dataTypeSize(args.dtype);
  const uint64_t bytes = args.count * es;
  PlanChoice c;
  // Below this size the extra reads of "every rank reduces everything" cost less than a hop.
  c.reduceAllBelowBytes = kReduceAllBelowBytes;
  bool direct = false;
  if (in.forcedAlgo == "direct") {
    direct = true;
  } else if (in.forcedAlgo.empty() && directPossible(in) && bytes <= directLimitBytes(in)) {
    direct = predictDirect(in, bytes) <= predictRing(in, bytes);
  }
  if (direct && in.topo->nranks > 1) {
    c.algo = AlgoId::Direct;
    uint64_t limit = directLimitBytes(in);
    if (limit < es) {
      return makeError(collInvalidUsage, "COLL_SHM_WINDOW_BYTES is too small for even one element");
    }
    if (bytes > limit) c.roundElems = limit / es;
    c.predictedSeconds = predictDirect(in, bytes);
  } else {
    c.algo = AlgoId::Ring;
    c.predictedSeconds = predictRing(in, bytes);
  }
  *out = c;
  return okStatus();
}

namespace {

// The slowest link class a call crosses.
const LinkCost& slowestLink(const PlannerInputs& in) {
  return in.topo->singleHost() ? in.intraHost : in.interHost;
}

double log2Ceil(int p) {
  int k = 0;
  while ((1 << k) < p) ++k;
  return k;
}

}  // namespace

double predictTree(const PlannerInputs& in, uint64_t bytes) {
  const LinkCost& l = slowestLink(in);
  return log2Ceil(in.topo->nranks) * (l.alpha + static_cast<double>(bytes) * l.beta);
}

double predictChain(const PlannerInputs& in, uint64_t bytes) {
  // Pipelined: p-1 hops of latency, the data crosses each link once, in parallel.
  const LinkCost& l = slowestLink(in);
  return (in.topo->nranks - 1) * l.alpha + static_cast<double>(bytes) * l.beta;
}

double predictBruck(const PlannerInputs& in, uint64_t blockBytes) {
  const LinkCost& l = slowestLink(in);
  const int p = in.topo->nranks;
  // log p rounds moving (p-1) blocks in all, plus the final rotation copy (p blocks).
  return log2Ceil(p) * l.alpha + static_cast<double>(p - 1) * blockBytes * l.beta +
         static_cast<double>(p) * blockBytes * in.intraHost.beta;
}

double predictRingAllGather(const PlannerInputs& in, uint64_t blockBytes) {
  const LinkCost& l = slowestLink(in);
  return (in.topo->nranks - 1) * (l.alpha + static_cast<double>(blockBytes) * l.beta);
}

Status planCollective(const PlannerInputs& in, const CollArgs& args, PlanChoice* out) {
  if (args.kind == CollKind::AllReduce) return planAllReduce(in, args, out);
  const uint64_t bytes = args.count * dataTypeSize(args.dtype);
  PlanChoice c;
  switch (args.kind) {
    case CollKind::Broadcast:
    case CollKind::Reduce: {
      double tree = predictTree(in, bytes), chain = predictChain(in, bytes);
      c.algo = tree < chain ? AlgoId::Tree : AlgoId::Ring;
      c.predictedSeconds = std::min(tree, chain);
      break;
    }
    case CollKind::AllGather: {
      double bruck = predictBruck(in, bytes), ring = predictRingAllGather(in, bytes);
      c.algo = bruck < ring ? AlgoId::Bruck : AlgoId::Ring;
      c.predictedSeconds = std::min(bruck, ring);
      break;
    }
    case CollKind::ReduceScatter:
      c.algo = AlgoId::Ring;
      c.predictedSeconds = predictRingAllGather(in, bytes);
      break;
    case CollKind::AlltoAll:
      c.algo = AlgoId::Pairwise;
      break;
    case CollKind::Gather:
    case CollKind::Scatter:
      c.algo = AlgoId::Linear;
      break;
    case CollKind::Barrier:
      c.algo = AlgoId::Dissemination;
      break;
    default:
      return makeError(collInternalError, "no planner for %s", collKindName(args.kind));
  }
  *out = c;
  return okStatus();
}

}  // namespace coll
