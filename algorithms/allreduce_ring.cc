// Ring All-Reduce: reduce-scatter then all-gather around the ring of all ranks, streamed per slice.
#include "algorithms/algorithms.h"

namespace coll {

void buildRingAllReduce(const Topology& topo, const CollArgs& args, Schedule* out) {
  Schedule& s = *out;
  s.begin("ring", args.dtype, args.op, static_cast<uint64_t>(topo.nranks));
  const int32_t p = topo.nranks;
  const int32_t r = topo.rank;
  const uint64_t es = dataTypeSize(args.dtype);
  const uint64_t count = args.count;

  if (planAlone(topo, count, &s)) return;

  const uint64_t base = count / p, extra = count % p;
  auto chunkStart = [&](int32_t c) { return c * base + std::min<uint64_t>(c, extra); };
  auto chunkCount = [&](int32_t c) { return base + (static_cast<uint64_t>(c) < extra ? 1 : 0); };
  auto mod = [p](int64_t v) { return static_cast<int32_t>(((v % p) + p) % p); };
  const int32_t right = (r + 1) % p, left = (r - 1 + p) % p;

  s.steps.reserve(4 * static_cast<size_t>(p));
  s.deps.reserve(4 * static_cast<size_t>(p));

  // Reduce-scatter: after p-1 steps chunk (r+1) mod p holds the full reduction in recv.
  int32_t prev = -1;
  for (int32_t k = 0; k + 1 < p; ++k) {
    int32_t cs = mod(r - k);
    Step snd;
    snd.kind = StepKind::Send;
    snd.peer = right;
    snd.src = k == 0 ? sendAt(chunkStart(cs) * es) : recvAt(chunkStart(cs) * es);
    snd.count = chunkCount(cs);
    int32_t si = s.addStep(snd);
    if (k > 0) s.addDep(si, stepDep(prev));

    int32_t cr = mod(r - k - 1);
    Step rr;
    rr.kind = StepKind::RecvReduce;
    rr.peer = left;
    rr.src = sendAt(chunkStart(cr) * es);
    rr.dst = recvAt(chunkStart(cr) * es);
    rr.count = chunkCount(cr);
    prev = s.addStep(rr);
  }
  if (args.op == collAvg) {
    int32_t own = mod(r + 1);
    Step d;
    d.kind = StepKind::Divide;
    d.src = recvAt(chunkStart(own) * es);
    d.dst = d.src;
    d.count = chunkCount(own);
    int32_t di = s.addStep(d);
    s.addDep(di, stepDep(prev));
    prev = di;
  }
  // All-gather: forward each reduced chunk as its slices arrive.
  for (int32_t k = 0; k + 1 < p; ++k) {
    int32_t cs = mod(r + 1 - k);
    Step snd;
    snd.kind = StepKind::Send;
    snd.peer = right;
    snd.src = recvAt(chunkStart(cs) * es);
    snd.count = chunkCount(cs);
    int32_t si = s.addStep(snd);
    s.addDep(si, stepDep(prev));

    int32_t cr = mod(r - k);
    Step rv;
    rv.kind = StepKind::Recv;
    rv.peer = left;
    rv.dst = recvAt(chunkStart(cr) * es);
    rv.count = chunkCount(cr);
    prev = s.addStep(rv);
  }
  s.finalizePeers();
}

}  // namespace coll
