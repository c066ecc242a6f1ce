// Broadcast schedules: a pipelined chain from the root around the ring (large messages) and a
// binomial tree rooted at the root (small messages).
#include "algorithms/algorithms.h"

namespace coll {

namespace {

// The root's own result: recv = send, skipped by the executor when the call is in place.
int32_t addRootCopy(uint64_t count, Schedule* s) {
  Step c;
  c.kind = StepKind::Copy;
  c.src = sendAt(0);
  c.dst = recvAt(0);
  c.count = count;
  return s->addStep(c);
}

}  // namespace

void buildRingBroadcast(const Topology& topo, const CollArgs& args, Schedule* out) {
  Schedule& s = *out;
  s.begin("ring", args.dtype, collSum);
  const int32_t p = topo.nranks;
  const int32_t r = topo.rank;
  const int32_t root = args.root;
  const uint64_t count = args.count;
  if (planAlone(topo, count, &s)) return;
  const int32_t v = (r - root + p) % p;  // position in the chain
  const int32_t right = (r + 1) % p, left = (r - 1 + p) % p;
  if (v == 0) {
    // The root sends straight from its input so the chain does not wait for the local copy.
    addRootCopy(count, &s);
    Step snd;
    snd.kind = StepKind::Send;
    snd.peer = right;
    snd.src = sendAt(0);
    snd.count = count;
    s.addStep(snd);
  } else {
    Step rv;
    rv.kind = StepKind::Recv;
    rv.peer = left;
    rv.dst = recvAt(0);
    rv.count = count;
    int32_t ri = s.addStep(rv);
    if (v + 1 < p) {
      Step snd;
      snd.kind = StepKind::Send;
      snd.peer = right;
      snd.src = recvAt(0);
      snd.count = count;
      int32_t si = s.addStep(snd);
      s.addDep(si, stepDep(ri));
    }
  }
  s.finalizePeers();
}

void buildTreeBroadcast(const Topology& topo, const CollArgs& args, Schedule* out) {
  Schedule& s = *out;
  s.begin("tree", args.dtype, collSum);
  const int32_t p = topo.nranks;
  const int32_t r = topo.rank;
  const int32_t root = args.root;
  const uint64_t count = args.count;
  if (planAlone(topo, count, &s)) return;
  const int32_t v = (r - root + p) % p;
  auto real = [&](int32_t vr) { return (vr + root) % p; };
  // Binomial tree on virtual ranks: the parent clears v's lowest set bit; the children set each
  // lower bit. `span` is the first bit a child may use.
  int32_t span = 1;
  while (span < p) span <<= 1;
  int32_t recvStep = -1;
  if (v == 0) {
    addRootCopy(count, &s);
  } else {
    const int32_t low = v & -v;
    span = low;
    Step rv;
    rv.kind = StepKind::Recv;
    rv.peer = real(v - low);
    rv.dst = recvAt(0);
    rv.count = count;
    recvStep = s.addStep(rv);
  }
  // Largest subtree first: it has the most hops still to go.
  for (int32_t mask = span >> 1; mask > 0; mask >>= 1) {
    if (v + mask >= p) continue;
    Step snd;
    snd.kind = StepKind::Send;
    snd.peer = real(v + mask);
    snd.src = v == 0 ? sendAt(0) : recvAt(0);
    snd.count = count;
    int32_t si = s.addStep(snd);
    if (recvStep >= 0) s.addDep(si, stepDep(recvStep));
  }
  s.finalizePeers();
}

}  // namespace coll
