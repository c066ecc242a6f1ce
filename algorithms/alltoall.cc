// Pairwise all-to-all: step k exchanges one block each way with rank r+k; nothing waits on a
// remote step, so the executor keeps every exchange in flight. Blocks to a rank on the same host
// go in chunks that stay a few chunks ahead of the peer (bounded data in flight, cache-resident).
// Also the pairwise descriptor.
#include "algorithms/algorithms.h"
#include "algorithms/registry.h"

#include <algorithm>

namespace coll {

namespace {

// Same host: a block moves in chunks of this many bytes, and chunk i goes out only once chunk
// i - kLocalLead has come back from that peer, so only a few chunks per direction sit in the
// shared-memory FIFO and the peer copies them out while they are still in cache. Whole 4 MiB
// blocks (a 2 MiB FIFO filled ahead of the reader) ran at 0.85x the out-of-place and 0.75x the
// in-place busbw of 128 KiB chunks one ahead (4 ranks on 2 cores, 16 MiB all-to-all; 64 KiB to
// 512 KiB chunks one or two ahead measured within the noise of each other).
constexpr uint64_t kLocalChunkBytes = 128 * 1024;
constexpr int32_t kLocalLead = 1;

}  // namespace

void buildPairwiseAlltoAll(const Topology& topo, const CollArgs& args, Schedule* out) {
  Schedule& s = *out;
  s.begin("pairwise", args.dtype, collSum);
  const int32_t p = topo.nranks;
  const int32_t r = topo.rank;
  const uint64_t es = dataTypeSize(args.dtype);
  const uint64_t count = args.count;
  const uint64_t blockBytes = count * es;
  const uint64_t chunkElems = std::max<uint64_t>(1, kLocalChunkBytes / std::max<uint64_t>(es, 1));

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
    // Both ends cut the block the same way: the pair's streams carry the same chunks in order.
    const uint64_t chunk = topo.sameHost(r, q) ? chunkElems : std::max<uint64_t>(count, 1);
    int32_t recvOf[kLocalLead] = {};
    for (uint64_t first = 0, i = 0; first < count || (count == 0 && i == 0); first += chunk, ++i) {
      const uint64_t n = std::min(chunk, count - first);
      Step snd;
      snd.kind = StepKind::Send;
      snd.peer = q;
      snd.src = sendAt(q * blockBytes + first * es);
      snd.count = n;
      int32_t si = s.addStep(snd);
      if (i >= static_cast<uint64_t>(kLocalLead)) s.addDep(si, wholeStepDep(recvOf[(i - kLocalLead) % kLocalLead]));
      // Block q comes from and goes to the same peer. Receiving it only behind what was sent of
      // it makes the plan safe in place (send == recv) at no cost out of place: the send waits
      // on nothing but the peer's earlier chunks, so it is never the slower of the two.
      Step rv;
      rv.kind = StepKind::Recv;
      rv.peer = q;
      rv.dst = recvAt(q * blockBytes + first * es);
      rv.count = n;
      int32_t ri = s.addStep(rv);
      s.addDep(ri, stepDep(si));
      recvOf[i % kLocalLead] = ri;
      if (count == 0) break;
    }
  }
  s.finalizePeers();
}

namespace {

Candidate pairwiseModel(const ModelInputs& in, CollKind /*kind*/, uint64_t bytes, uint64_t /*count*/) {
  const PlannerShape& sh = in.shape;
  const int64_t p = in.topo->nranks, H = in.topo->nhosts, L = sh.maxLocal;
  // Pairwise round k sends r -> r + k: past the first rounds every rank of a host sends
  // across at once, ranksPerNic of them through each NIC (every rank of a busy machine).
  const StepLoad round{L > 1 ? 1 : 0, H > 1 ? static_cast<double>(sh.ranksPerNic) : 0.0,
                       H > 1 ? static_cast<double>(sh.machineRanks) : 0.0};
  Candidate c;
  c.seconds = (p - 1) * stepCost(in, round, static_cast<double>(bytes));
  return c;
}

void pairwiseBuild(const BuildRequest& r, Schedule* out) { buildPairwiseAlltoAll(r.topo, r.args, out); }

}  // namespace

extern const AlgorithmDescriptor kPairwiseAlgorithm{
    .name = "pairwise",
    .serves = collBit(CollKind::AlltoAll),
    .applies = nullptr,
    .predict = pairwiseModel,
    .allReduceFactor = {},
    .build = pairwiseBuild,
};

}  // namespace coll
