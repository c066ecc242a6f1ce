// Dissemination barrier: in round k every rank signals r+2^k and hears from r-2^k, so after
// ceil(log2 p) rounds each rank has (transitively) heard from every other. Also its descriptor.
#include "algorithms/algorithms.h"
#include "algorithms/registry.h"

namespace coll {

void buildDisseminationBarrier(const Topology& topo, Schedule* out) {
  Schedule& s = *out;
  s.begin("dissemination", collUint64, collSum);
  const int32_t p = topo.nranks;
  const int32_t r = topo.rank;
  int32_t rounds = 0;
  for (int32_t dist = 1; dist < p; dist <<= 1) ++rounds;
  // One 8-byte token slot to send from and one per round to receive into; the contents carry
  // no meaning, only their arrival does.
  s.scratchBytes = 8 * static_cast<uint64_t>(rounds + 1);
  int32_t prevRecv = -1, k = 0;
  for (int32_t dist = 1; dist < p; dist <<= 1, ++k) {
    Step snd;
    snd.kind = StepKind::Send;
    snd.peer = (r + dist) % p;
    snd.src = scratchAt(0);
    snd.count = 1;
    int32_t si = s.addStep(snd);
    // Round k's signal means "I have heard from the 2^k - 1 ranks behind me", so it waits for
    // every earlier round, not just round k-1: receives from different peers complete in any
    // order, hence each receive also waits for the one before (a chain is cheaper than k deps).
    if (prevRecv >= 0) s.addDep(si, wholeStepDep(prevRecv));

    Step rv;
    rv.kind = StepKind::Recv;
    rv.peer = ((r - dist) % p + p) % p;
    rv.dst = scratchAt(8 * static_cast<uint64_t>(k + 1));
    rv.count = 1;
    int32_t ri = s.addStep(rv);
    if (prevRecv >= 0) s.addDep(ri, wholeStepDep(prevRecv));
    prevRecv = ri;
  }
  s.finalizePeers();
}

namespace {

Candidate disseminationModel(const ModelInputs& in, CollKind /*kind*/, uint64_t /*bytes*/, uint64_t /*count*/) {
  const LinkCost& slow = in.topo->singleHost() ? in.intraHost : in.interHost;
  Candidate c;
  c.seconds = log2Ceil(in.topo->nranks) * slow.alpha;
  return c;
}

void disseminationBuild(const BuildRequest& r, Schedule* out) { buildDisseminationBarrier(r.topo, out); }

}  // namespace

extern const AlgorithmDescriptor kDisseminationAlgorithm{
    .name = "dissemination",
    .serves = collBit(CollKind::Barrier),
    .applies = nullptr,
    .predict = disseminationModel,
    .allReduceFactor = {},
    .build = disseminationBuild,
};

}  // namespace coll
