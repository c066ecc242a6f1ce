// The compressed (4-bit) two-shot All-Reduce: a reduce-scatter done as an all-to-all of quantized
// shards, a float32 sum at each shard's owner, and an all-gather of the requantized shards. Each
// element is quantized at most twice whatever the rank count (see algorithms.h).
#include <algorithm>

#include "algorithms/algorithms.h"
#include "kernels/quantize.h"

namespace coll {

void buildCompressedAllReduce(const Topology& topo, const CollArgs& args, int blockSize, Schedule* out) {
  Schedule& s = *out;
  const int32_t p = topo.nranks, r = topo.rank;
  s.begin("compressed(two-shot)", args.dtype, args.op, static_cast<uint64_t>(p));
  if (planAlone(topo, args.count, &s)) return;
  s.quantBlock = blockSize;
  const uint64_t n = args.count, B = static_cast<uint64_t>(blockSize);
  const uint64_t es = dataTypeSize(args.dtype);
  const uint64_t record = kernels::quantRecordBytes(blockSize);
  // Shards of whole blocks: shard j = [lo(j), lo(j + 1)).
  const uint64_t shard = (n + static_cast<uint64_t>(p) - 1) / static_cast<uint64_t>(p);
  const uint64_t S = (shard + B - 1) / B * B;
  auto lo = [&](int32_t j) { return std::min(static_cast<uint64_t>(j) * S, n); };
  auto elems = [&](int32_t j) { return lo(j + 1) - lo(j); };
  auto blocks = [&](int32_t j) { return (elems(j) + B - 1) / B; };
  // Quantized shards travel as 8-byte units (the executor's stream alignment); each region is
  // padded to a whole unit.
  auto words = [&](int32_t j) { return (blocks(j) * record + 7) / 8; };
  const uint64_t stride = (S / B * record + 63) / 64 * 64;
  const uint64_t P = static_cast<uint64_t>(p);
  auto sendQ = [&](int32_t j) { return scratchAt(static_cast<uint64_t>(j) * stride); };
  auto recvQ = [&](int32_t j) { return scratchAt((P + static_cast<uint64_t>(j)) * stride); };
  auto gatherQ = [&](int32_t j) { return scratchAt((2 * P + static_cast<uint64_t>(j)) * stride); };
  const uint64_t accOffset = 3 * P * stride;
  s.scratchBytes = accOffset + S * sizeof(float);

  auto quantize = [&](BufRef src, uint8_t flags, int32_t j, BufRef dst) {
    Step q;
    q.kind = StepKind::Quantize;
    q.src = src;
    q.dst = dst;
    q.flags = flags;
    q.count = blocks(j);
    q.elems = elems(j);
    q.first = lo(j);
    q.aux = BufRef{BufKind::Residual, -1, lo(j) * sizeof(float)};
    return s.addStep(q);
  };
  auto transfer = [&](StepKind kind, int32_t peer, BufRef buf, uint64_t units) {
    Step t;
    t.kind = kind;
    t.peer = peer;
    (kind == StepKind::Send ? t.src : t.dst) = buf;
    t.count = units;
    t.unitBytes = 8;
    return s.addStep(t);
  };
  auto blockStep = [&](StepKind kind, BufRef src, BufRef dst, int32_t j) {
    Step b;
    b.kind = kind;
    b.src = src;
    b.dst = dst;
    b.count = blocks(j);
    b.elems = elems(j);
    return s.addStep(b);
  };

  // Reduce-scatter: my contribution to every other shard, quantized once, to its owner (in a
  // rotating order so no owner receives from everyone at once).
  for (int32_t k = 1; k < p; ++k) {
    const int32_t j = (r + k) % p;
    if (blocks(j) == 0) continue;
    const int32_t q = quantize(sendAt(lo(j) * es), 0, j, sendQ(j));
    const int32_t t = transfer(StepKind::Send, j, sendQ(j), words(j));
    s.addDep(t, wholeStepDep(q));
  }
  const bool own = blocks(r) > 0;
  if (own) {
    // My shard: my own part at full precision, then every peer's dequantized part added in
    // float32 as it arrives.
    int32_t acc = blockStep(StepKind::Widen, sendAt(lo(r) * es), scratchAt(accOffset), r);
    for (int32_t k = 1; k < p; ++k) {
      const int32_t j = (r - k + p) % p;
      const int32_t t = transfer(StepKind::Recv, j, recvQ(j), words(r));
      const int32_t a = blockStep(StepKind::DequantAccumulate, recvQ(j), scratchAt(accOffset), r);
      s.addDep(a, wholeStepDep(t));
      s.addDep(a, stepDep(acc));
      acc = a;
    }
    // All-gather: the sum (averaged, plus my residual) quantized once; everyone, me included,
    // takes its dequantized bytes.
    const uint8_t flags = static_cast<uint8_t>(kStepSrcFloat | (args.op == collAvg ? kStepDivide : 0));
    const int32_t q = quantize(scratchAt(accOffset), flags, r, sendQ(r));
    s.addDep(q, stepDep(acc));
    for (int32_t k = 1; k < p; ++k) {
      const int32_t t = transfer(StepKind::Send, (r + k) % p, sendQ(r), words(r));
      s.addDep(t, wholeStepDep(q));
    }
    const int32_t d = blockStep(StepKind::Dequantize, sendQ(r), recvAt(lo(r) * es), r);
    s.addDep(d, stepDep(q));
  }
  for (int32_t k = 1; k < p; ++k) {
    const int32_t j = (r - k + p) % p;
    if (blocks(j) == 0) continue;
    const int32_t t = transfer(StepKind::Recv, j, gatherQ(j), words(j));
    const int32_t d = blockStep(StepKind::Dequantize, gatherQ(j), recvAt(lo(j) * es), j);
    s.addDep(d, wholeStepDep(t));
  }
  s.finalizePeers();
}

}  // namespace coll
