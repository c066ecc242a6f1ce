// Ring reduce-scatter: p-1 steps around the ring, partial sums double-buffered in scratch, the
// last reduction landing block r straight in the receive buffer.
#include "algorithms/algorithms.h"

#include <algorithm>
#include <vector>

namespace coll {

void buildRingReduceScatter(const Topology& topo, const CollArgs& args, Schedule* out) {
  Schedule& s = *out;
  s.begin("ring", args.dtype, args.op, static_cast<uint64_t>(topo.nranks));
  const int32_t p = topo.nranks;
  const int32_t r = topo.rank;
  const uint64_t es = dataTypeSize(args.dtype);
  const uint64_t count = args.count;
  const uint64_t blockBytes = count * es;
  if (planAlone(topo, count, &s)) return;
  auto mod = [p](int64_t x) { return static_cast<int32_t>(((x % p) + p) % p); };
  const int32_t right = mod(r + 1), left = mod(r - 1);
  // In step k rank r sends the partial of block r-k-1 and receives that of block r-k-2, so step
  // p-2 receives block r. The receive buffer holds only `count` elements, so partials live in
  // kSlots scratch slots used in turn: step k's reduction writes slot k%kSlots, which step k+1
  // sends; the reduction kSlots steps later reuses the slot only behind that send. Two slots
  // would suffice; a third lets the reduction run a whole step ahead of the slowest send.
  constexpr int32_t kSlots = 3;
  const int32_t slots = std::min(kSlots, p - 2);
  s.scratchBytes = static_cast<uint64_t>(std::max(0, slots)) * blockBytes;
  auto slot = [&](int32_t k) { return scratchAt(static_cast<uint64_t>(k % slots) * blockBytes); };
  std::vector<int32_t> sendOfStep;
  sendOfStep.reserve(static_cast<size_t>(p));
  s.steps.reserve(2 * static_cast<size_t>(p) + 1);
  int32_t prevReduce = -1;
  for (int32_t k = 0; k + 1 < p; ++k) {
    Step snd;
    snd.kind = StepKind::Send;
    snd.peer = right;
    snd.src = k == 0 ? sendAt(mod(r - 1) * blockBytes) : slot(k - 1);
    snd.count = count;
    int32_t si = s.addStep(snd);
    if (k > 0) s.addDep(si, stepDep(prevReduce));

    const bool last = k + 2 == p;
    Step rr;
    rr.kind = StepKind::RecvReduce;
    rr.peer = left;
    // In place, recv is send block r: the last step reduces it in place, and nothing reads
    // block r before (the first send is block r-1, the reductions read blocks r-k-2).
    rr.src = sendAt(mod(r - k - 2) * blockBytes);
    rr.dst = last ? recvAt(0) : slot(k);
    rr.count = count;
    int32_t ri = s.addStep(rr);
    sendOfStep.push_back(si);
    // Slot k%slots was last written by reduction k-slots and read by send k-slots+1.
    if (!last && k >= slots) s.addDep(ri, stepDep(sendOfStep[k - slots + 1]));
    prevReduce = ri;
  }
  if (args.op == collAvg) {
    Step d;
    d.kind = StepKind::Divide;
    d.src = recvAt(0);
    d.dst = d.src;
    d.count = count;
    int32_t di = s.addStep(d);
    s.addDep(di, stepDep(prevReduce));
  }
  s.finalizePeers();
}

}  // namespace coll
