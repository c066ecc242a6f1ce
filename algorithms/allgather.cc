// All-gather schedules: a ring forwarding what arrived (large messages) and Bruck's algorithm,
// ceil(log2 p) rounds for any p through a rotated copy in scratch (small messages); Bruck's
// descriptor (the ring's is with the ring All-Reduce).
#include "algorithms/algorithms.h"
#include "algorithms/registry.h"

#include <algorithm>

namespace coll {

void buildRingAllGather(const Topology& topo, const CollArgs& args, Schedule* out) {
  Schedule& s = *out;
  s.begin("ring", args.dtype, collSum);
  const int32_t p = topo.nranks;
  const int32_t r = topo.rank;
  const uint64_t es = dataTypeSize(args.dtype);
  const uint64_t count = args.count;
  const uint64_t blockBytes = count * es;
  auto mod = [p](int64_t x) { return static_cast<int32_t>(((x % p) + p) % p); };
  const int32_t right = mod(r + 1), left = mod(r - 1);

  // Own block; in place the send buffer is recv block r and the executor skips the copy.
  Step own;
  own.kind = StepKind::Copy;
  own.src = sendAt(0);
  own.dst = recvAt(r * blockBytes);
  own.count = count;
  s.addStep(own);
  s.steps.reserve(2 * static_cast<size_t>(p));
  int32_t prev = -1;
  for (int32_t k = 0; k + 1 < p; ++k) {
    Step snd;
    snd.kind = StepKind::Send;
    snd.peer = right;
    // Step 0 sends straight from the input (the same bytes as recv block r), so it need not
    // wait for the local copy; later steps forward the block received one step earlier.
    snd.src = k == 0 ? sendAt(0) : recvAt(mod(r - k) * blockBytes);
    snd.count = count;
    int32_t si = s.addStep(snd);
    if (k > 0) s.addDep(si, stepDep(prev));

    Step rv;
    rv.kind = StepKind::Recv;
    rv.peer = left;
    rv.dst = recvAt(mod(r - k - 1) * blockBytes);
    rv.count = count;
    prev = s.addStep(rv);
  }
  s.finalizePeers();
}

void buildBruckAllGather(const Topology& topo, const CollArgs& args, Schedule* out) {
  Schedule& s = *out;
  s.begin("bruck", args.dtype, collSum);
  const int32_t p = topo.nranks;
  const int32_t r = topo.rank;
  const uint64_t es = dataTypeSize(args.dtype);
  const uint64_t count = args.count;
  const uint64_t blockBytes = count * es;
  if (planAlone(topo, count, &s)) return;
  auto mod = [p](int64_t x) { return static_cast<int32_t>(((x % p) + p) % p); };
  // Scratch block i holds block (r + i) mod p: every rank's blocks are in the same relative
  // order, so each round moves one contiguous run.
  s.scratchBytes = static_cast<uint64_t>(p) * blockBytes;
  Step in;
  in.kind = StepKind::Copy;
  in.src = sendAt(0);
  in.dst = scratchAt(0);
  in.count = count;
  const int32_t copyIn = s.addStep(in);
  // Every step that reads the filled prefix waits for all of it: Copy and each earlier receive
  // (dependencies are not transitive across peers).
  int32_t firstRecv = -1, nrecv = 0;
  for (int32_t dist = 1; dist < p; dist <<= 1) {
    const int32_t n = std::min(dist, p - dist);
    Step snd;
    snd.kind = StepKind::Send;
    snd.peer = mod(r - dist);
    snd.src = scratchAt(0);
    snd.count = static_cast<uint64_t>(n) * count;
    int32_t si = s.addStep(snd);
    s.addDep(si, wholeStepDep(copyIn));
    for (int32_t k = 0; k < nrecv; ++k) s.addDep(si, wholeStepDep(firstRecv + 2 * k));

    Step rv;
    rv.kind = StepKind::Recv;
    rv.peer = mod(r + dist);
    rv.dst = scratchAt(static_cast<uint64_t>(dist) * blockBytes);
    rv.count = static_cast<uint64_t>(n) * count;
    int32_t ri = s.addStep(rv);
    if (firstRecv < 0) firstRecv = ri;
    ++nrecv;
  }
  // Rotate into place: scratch [0, p-r) -> recv blocks [r, p), scratch [p-r, p) -> [0, r).
  auto addRotate = [&](BufRef src, BufRef dst, uint64_t blocks) {
    Step c;
    c.kind = StepKind::Copy;
    c.src = src;
    c.dst = dst;
    c.count = blocks * count;
    int32_t ci = s.addStep(c);
    s.addDep(ci, wholeStepDep(copyIn));
    for (int32_t k = 0; k < nrecv; ++k) s.addDep(ci, wholeStepDep(firstRecv + 2 * k));
  };
  addRotate(scratchAt(0), recvAt(r * blockBytes), static_cast<uint64_t>(p - r));
  if (r > 0) addRotate(scratchAt(static_cast<uint64_t>(p - r) * blockBytes), recvAt(0), static_cast<uint64_t>(r));
  s.finalizePeers();
}

namespace {

Candidate bruckModel(const ModelInputs& in, CollKind /*kind*/, uint64_t bytes, uint64_t /*count*/) {
  const std::vector<StepLoad>& rounds = in.shape.bruck;
  const int64_t p = in.topo->nranks;
  const double n = static_cast<double>(bytes);
  Candidate c;
  for (size_t k = 0; k < rounds.size(); ++k) {
    const int64_t blocks = std::min<int64_t>(int64_t{1} << k, p - (int64_t{1} << k));
    c.seconds += stepCost(in, rounds[k], n * blocks);
  }
  c.seconds += p * n * in.gamma;  // the final rotation
  return c;
}

void bruckBuild(const BuildRequest& r, Schedule* out) { buildBruckAllGather(r.topo, r.args, out); }

}  // namespace

extern const AlgorithmDescriptor kBruckAlgorithm{
    .name = "bruck",
    .serves = collBit(CollKind::AllGather),
    .applies = nullptr,
    .predict = bruckModel,
    .allReduceFactor = {},
    .build = bruckBuild,
};

}  // namespace coll
