// Pairwise all-to-all: step k exchanges one block each way with rank r+k; nothing waits on a
// remote step, so the executor keeps every exchange in flight.
#include "algorithms/algorithms.h"

namespace coll {

void buildPairwiseAlltoAll(const Topology& topo, const CollArgs& args, Schedule* out) {
  Schedule& s = *out;
  s.begin("pairwise", args.dtype, collSum);
  const int32_t p = topo.nranks;
  const int32_t r = topo.rank;
  const uint64_t es = dataTypeSize(args.dtype);
  const uint64_t count = args.count;
  const uint64_t blockBytes = count * es;

  Step own;
  own.kind = StepKind::Copy;
  own.src = sendAt(r * blockBytes);
  own.dst = recvAt(r * blockBytes);
  own.count = count;
  s.addStep(own);
  s.steps.reserve(2 * static_cast<size_t>(p));
  s.deps.reserve(static_cast<size_t>(p));
  for (int32_t k = 1; k < p; ++k) {
    const int32_t q = (r + k) % p;
    Step snd;
    snd.kind = StepKind::Send;
    snd.peer = q;
    snd.src = sendAt(q * blockBytes);
    snd.count = count;
    int32_t si = s.addStep(snd);
    // Block q comes from and goes to the same peer. Receiving it only behind what was sent of
    // it makes the plan safe in place (send == recv) at no cost out of place: the send waits on
    // nothing, so it is never the slower of the two.
    Step rv;
    rv.kind = StepKind::Recv;
    rv.peer = q;
    rv.dst = recvAt(q * blockBytes);
    rv.count = count;
    int32_t ri = s.addStep(rv);
    s.addDep(ri, stepDep(si));
  }
  s.finalizePeers();
}

}  // namespace coll
