// Reduce schedules: a pipelined chain ending at the root (large messages) and a binomial tree
// towards the root (small messages). Only the root's receive buffer is written.
#include "algorithms/algorithms.h"

namespace coll {

namespace {

// collAvg: the root divides the sum in place, slice by slice behind the last reduction.
void addRootDivide(const CollArgs& args, int32_t last, Schedule* s) {
  if (args.op != collAvg) return;
  Step d;
  d.kind = StepKind::Divide;
  d.src = recvAt(0);
  d.dst = d.src;
  d.count = args.count;
  int32_t di = s->addStep(d);
  if (last >= 0) s->addDep(di, stepDep(last));
}

}  // namespace

void buildRingReduce(const Topology& topo, const CollArgs& args, Schedule* out) {
  Schedule& s = *out;
  s.begin("ring", args.dtype, args.op, static_cast<uint64_t>(topo.nranks));
  const int32_t p = topo.nranks;
  const int32_t r = topo.rank;
  const uint64_t es = dataTypeSize(args.dtype);
  const uint64_t count = args.count;
  if (planAlone(topo, count, &s)) return;
  // Chain root+1 -> root+2 -> ... -> root-1 -> root.
  const int32_t v = (r - args.root + p) % p;
  const int32_t right = (r + 1) % p, left = (r - 1 + p) % p;
  if (v == 1) {
    Step snd;
    snd.kind = StepKind::Send;
    snd.peer = right;
    snd.src = sendAt(0);
    snd.count = count;
    s.addStep(snd);
  } else if (v > 1) {
    // A non-root's receive buffer is not ours to write: partial sums pass through scratch.
    s.scratchBytes = count * es;
    Step rr;
    rr.kind = StepKind::RecvReduce;
    rr.peer = left;
    rr.src = sendAt(0);
    rr.dst = scratchAt(0);
    rr.count = count;
    int32_t ri = s.addStep(rr);
    Step snd;
    snd.kind = StepKind::Send;
    snd.peer = right;
    snd.src = scratchAt(0);
    snd.count = count;
    int32_t si = s.addStep(snd);
    s.addDep(si, stepDep(ri));
  } else {
    Step rr;
    rr.kind = StepKind::RecvReduce;
    rr.peer = left;
    rr.src = sendAt(0);
    rr.dst = recvAt(0);
    rr.count = count;
    int32_t ri = s.addStep(rr);
    addRootDivide(args, ri, &s);
  }
  s.finalizePeers();
}

void buildTreeReduce(const Topology& topo, const CollArgs& args, Schedule* out) {
  Schedule& s = *out;
  s.begin("tree", args.dtype, args.op, static_cast<uint64_t>(topo.nranks));
  const int32_t p = topo.nranks;
  const int32_t r = topo.rank;
  const uint64_t es = dataTypeSize(args.dtype);
  const uint64_t count = args.count;
  if (planAlone(topo, count, &s)) return;
  const int32_t root = args.root;
  const int32_t v = (r - root + p) % p;
  auto real = [&](int32_t vr) { return (vr + root) % p; };
  int32_t span = 1;
  while (span < p) span <<= 1;
  if (v != 0) span = v & -v;
  // The accumulator: the root's receive buffer, scratch elsewhere (a non-root's receive buffer
  // is not ours to write). Leaves send their input as is.
  const BufRef acc = v == 0 ? recvAt(0) : scratchAt(0);
  // Children in a fixed order (smallest subtree first: it is ready first), so every run
  // reduces in the same order and results are reproducible.
  int32_t last = -1;
  for (int32_t mask = 1; mask < span; mask <<= 1) {
    if (v + mask >= p) break;
    Step rr;
    rr.kind = StepKind::RecvReduce;
    rr.peer = real(v + mask);
    rr.src = last < 0 ? sendAt(0) : acc;
    rr.dst = acc;
    rr.count = count;
    int32_t ri = s.addStep(rr);
    if (last >= 0) s.addDep(ri, stepDep(last));
    last = ri;
  }
  if (v == 0) {
    addRootDivide(args, last, &s);
  } else {
    if (last >= 0) s.scratchBytes = count * es;
    Step snd;
    snd.kind = StepKind::Send;
    snd.peer = real(v - (v & -v));
    snd.src = last < 0 ? sendAt(0) : acc;
    snd.count = count;
    int32_t si = s.addStep(snd);
    if (last >= 0) s.addDep(si, stepDep(last));
  }
  s.finalizePeers();
}

}  // namespace coll
