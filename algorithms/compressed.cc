// The compressed (4-bit) All-Reduce: the two-shot phase (a reduce-scatter done as an all-to-all
// of quantized shards, a float32 sum at each shard's owner, an all-gather of the requantized
// shards; each element quantized at most twice whatever the rank count), and the hierarchical
// variant that reduces inside each host at full precision and compresses only between hosts;
// both variants' models and the two-shot's descriptor.
#include <algorithm>

#include "algorithms/algorithms.h"
#include "algorithms/phases.h"
#include "algorithms/registry.h"
#include "src/base/align.h"
#include "src/kernels/quantize.h"

namespace coll {

namespace {

// A phase's own scratch, after everything the schedule already uses.
uint64_t takeScratch(Schedule* s, uint64_t bytes) {
  const uint64_t at = roundUp(s->scratchBytes, 64);
  s->scratchBytes = at + bytes;
  return at;
}

// Two-shot over the group's members on elements [first, first + count) of the tensor: `in` and
// `out` point at element `first` (`in` in the schedule's type); `first` is a multiple of the block
// size, so blocks, shards and the stochastic counter line up with the whole tensor's. Every step
// waits for `gate` (-1: none). Returns the steps that write `out` (each covers one shard).
std::vector<int32_t> addCompressedTwoShot(const RankGroup& g, BufRef in, BufRef out, uint64_t first, uint64_t count,
                                          int blockSize, int32_t gate, bool divide, Schedule* s) {
  const int32_t p = g.size(), me = g.me;
  const uint64_t B = static_cast<uint64_t>(blockSize), P = static_cast<uint64_t>(p);
  const uint64_t es = dataTypeSize(s->dtype);
  const uint64_t record = kernels::quantRecordBytes(blockSize);
  // Quantized data streams block by block: a block's record is sent once quantized, and used once
  // its bytes have arrived (dependencies between block counts and 8-byte units).
  const uint32_t rec = static_cast<uint32_t>(record);
  const uint64_t S = roundUp(ceilDiv(count, P), B);  // shard j = [lo(j), lo(j + 1)), whole blocks
  auto lo = [&](int32_t j) { return std::min(static_cast<uint64_t>(j) * S, count); };
  auto elems = [&](int32_t j) { return lo(j + 1) - lo(j); };
  auto blocks = [&](int32_t j) { return ceilDiv(elems(j), B); };
  // Quantized shards travel as 8-byte units (the executor's stream alignment).
  auto words = [&](int32_t j) { return ceilDiv(blocks(j) * record, 8); };
  const uint64_t stride = roundUp(S / B * record, 64);
  const uint64_t base = takeScratch(s, 3 * P * stride + S * sizeof(float));
  auto sendQ = [&](int32_t j) { return scratchAt(base + static_cast<uint64_t>(j) * stride); };
  auto recvQ = [&](int32_t j) { return scratchAt(base + (P + static_cast<uint64_t>(j)) * stride); };
  auto gatherQ = [&](int32_t j) { return scratchAt(base + (2 * P + static_cast<uint64_t>(j)) * stride); };
  const BufRef acc = scratchAt(base + 3 * P * stride);
  auto gated = [&](int32_t step) {
    if (gate >= 0) s->addDep(step, wholeStepDep(gate));
    return step;
  };
  auto quantize = [&](BufRef src, uint8_t flags, int32_t j) {
    Step q;
    q.kind = StepKind::Quantize;
    q.src = src;
    q.dst = sendQ(j);
    q.flags = flags;
    q.count = blocks(j);
    q.elems = elems(j);
    q.first = first + lo(j);
    q.aux = BufRef{BufKind::Residual, -1, (first + lo(j)) * sizeof(float)};
    return gated(s->addStep(q));
  };
  auto transfer = [&](StepKind kind, int32_t peer, BufRef buf, uint64_t units) {
    Step t;
    t.kind = kind;
    t.peer = peer;
    (kind == StepKind::Send ? t.src : t.dst) = buf;
    t.count = units;
    t.unitBytes = 8;
    return gated(s->addStep(t));
  };
  auto blockStep = [&](StepKind kind, BufRef src, BufRef dst, int32_t j) {
    Step b;
    b.kind = kind;
    b.src = src;
    b.dst = dst;
    b.count = blocks(j);
    b.elems = elems(j);
    return gated(s->addStep(b));
  };
  std::vector<int32_t> writers;

  // Reduce-scatter: my contribution to every other shard, quantized once, to its owner (in a
  // rotating order so no owner receives from everyone at once).
  for (int32_t k = 1; k < p; ++k) {
    const int32_t j = (me + k) % p;
    if (blocks(j) == 0) continue;
    const int32_t q = quantize(offsetBy(in, lo(j) * es), 0, j);
    s->addDep(transfer(StepKind::Send, g.at(j), sendQ(j), words(j)), unitStepDep(q, rec, 8));
  }
  if (blocks(me) > 0) {
    // My shard: my own part at full precision, then every peer's dequantized part added in
    // float32 as it arrives.
    int32_t sum = blockStep(StepKind::Widen, offsetBy(in, lo(me) * es), acc, me);
    for (int32_t k = 1; k < p; ++k) {
      const int32_t j = (me - k + p) % p;
      const int32_t t = transfer(StepKind::Recv, g.at(j), recvQ(j), words(me));
      const int32_t a = blockStep(StepKind::DequantAccumulate, recvQ(j), acc, me);
      s->addDep(a, unitStepDep(t, 8, rec));
      s->addDep(a, stepDep(sum));
      sum = a;
    }
    // All-gather: the sum (averaged, plus my residual) quantized once; everyone, me included,
    // takes its dequantized bytes.
    const uint8_t flags = static_cast<uint8_t>(kStepSrcFloat | (divide ? kStepDivide : 0));
    const int32_t q = quantize(acc, flags, me);
    s->addDep(q, stepDep(sum));
    for (int32_t k = 1; k < p; ++k) {
      s->addDep(transfer(StepKind::Send, g.at(me + k), sendQ(me), words(me)), unitStepDep(q, rec, 8));
    }
    const int32_t d = blockStep(StepKind::Dequantize, sendQ(me), offsetBy(out, lo(me) * es), me);
    s->addDep(d, stepDep(q));
    writers.push_back(d);
  }
  for (int32_t k = 1; k < p; ++k) {
    const int32_t j = (me - k + p) % p;
    if (blocks(j) == 0) continue;
    const int32_t t = transfer(StepKind::Recv, g.at(j), gatherQ(j), words(j));
    const int32_t d = blockStep(StepKind::Dequantize, gatherQ(j), offsetBy(out, lo(j) * es), j);
    s->addDep(d, unitStepDep(t, 8, rec));
    writers.push_back(d);
  }
  return writers;
}

void beginCompressed(const char* name, const Topology& topo, const CollArgs& args, int blockSize, Schedule* s) {
  s->begin(name, args.dtype, args.op, static_cast<uint64_t>(topo.nranks));
  s->quantBlock = blockSize;
  // Joins name scratch element 0.
  s->scratchBytes = dataTypeSize(args.dtype);
}

}  // namespace

void buildCompressedAllReduce(const Topology& topo, const CollArgs& args, int blockSize, Schedule* out) {
  Schedule& s = *out;
  beginCompressed("compressed(two-shot)", topo, args, blockSize, &s);
  if (planAlone(topo, args.count, &s)) return;
  addCompressedTwoShot(allRanksGroup(topo), sendAt(0), recvAt(0), 0, args.count, blockSize, -1, args.op == collAvg, &s);
  s.finalizePeers();
}

bool compressedHierarchyApplies(const Topology& topo) {
  if (topo.nhosts < 2 || topo.nranks == topo.nhosts) return false;
  const int32_t per = topo.nranks / topo.nhosts;
  if (per * topo.nhosts != topo.nranks) return false;
  std::vector<int32_t> count(static_cast<size_t>(topo.nhosts));
  for (int32_t h : topo.hostOfRank) ++count[static_cast<size_t>(h)];
  return std::all_of(count.begin(), count.end(), [&](int32_t c) { return c == per; });
}

void buildHierarchicalCompressedAllReduce(const Topology& topo, const CollArgs& args, int blockSize, Schedule* out) {
  if (!compressedHierarchyApplies(topo)) {
    buildCompressedAllReduce(topo, args, blockSize, out);
    return;
  }
  Schedule& s = *out;
  beginCompressed("compressed(hier)", topo, args, blockSize, &s);
  const int32_t L = topo.nranks / topo.nhosts;
  const uint64_t n = args.count, B = static_cast<uint64_t>(blockSize), es = dataTypeSize(args.dtype);
  // Local rank i owns chunk i of whole blocks (so the inter-host shards and the stochastic
  // counter line up with the tensor's blocks).
  const uint64_t C = roundUp(ceilDiv(n, static_cast<uint64_t>(L)), B);
  auto lo = [&](int32_t c) { return std::min(static_cast<uint64_t>(c) * C, n); };
  auto len = [&](int32_t c) { return lo(c + 1) - lo(c); };

  // My host's ranks in rank order, and the ranks with my local index on every host.
  RankGroup local, across;
  for (int32_t r = 0; r < topo.nranks; ++r) {
    if (topo.sameHost(r, topo.rank)) {
      if (r == topo.rank) local.me = local.size();
      local.ranks.push_back(r);
    }
  }
  const int32_t i = local.me;
  for (int32_t h = 0; h < topo.nhosts; ++h) {
    int32_t seen = 0;
    for (int32_t r = 0; r < topo.nranks; ++r) {
      if (topo.hostOfRank[static_cast<size_t>(r)] != h) continue;
      if (seen++ == i) {
        if (r == topo.rank) across.me = across.size();
        across.ranks.push_back(r);
      }
    }
  }

  // Reduce-scatter inside the host at full precision: every local rank sends its part of chunk m
  // to local rank m, which adds the parts into its chunk of the receive buffer as they arrive.
  const int32_t first = static_cast<int32_t>(s.steps.size());
  for (int32_t k = 1; k < L; ++k) {
    const int32_t m = (i + k) % L;
    if (len(m) == 0) continue;
    Step send;
    send.kind = StepKind::Send;
    send.peer = local.at(m);
    send.src = sendAt(lo(m) * es);
    send.count = len(m);
    s.addStep(send);
  }
  if (len(i) > 0) {
    Step copy;
    copy.kind = StepKind::Copy;
    copy.src = sendAt(lo(i) * es);
    copy.dst = recvAt(lo(i) * es);
    copy.count = len(i);
    int32_t sum = s.addStep(copy);
    for (int32_t k = 1; k < L; ++k) {
      Step rr;
      rr.kind = StepKind::RecvReduce;
      rr.peer = local.at(i - k);
      rr.src = recvAt(lo(i) * es);
      rr.dst = recvAt(lo(i) * es);
      rr.count = len(i);
      const int32_t r = s.addStep(rr);
      s.addDep(r, stepDep(sum));
      sum = r;
    }
  }
  // Across hosts, compressed: my chunk's host sums from every host, two-shot.
  const int32_t gate = s.addJoin(first);
  if (len(i) > 0) {
    addCompressedTwoShot(across, recvAt(lo(i) * es), recvAt(lo(i) * es), lo(i), len(i), blockSize, gate,
                         args.op == collAvg, &s);
  }
  // All-gather inside the host: my final chunk to every local rank, theirs into mine.
  const int32_t done = s.addJoin(gate);
  for (int32_t k = 1; k < L; ++k) {
    const int32_t m = (i + k) % L;
    if (len(i) > 0) {
      Step send;
      send.kind = StepKind::Send;
      send.peer = local.at(m);
      send.src = recvAt(lo(i) * es);
      send.count = len(i);
      s.addDep(s.addStep(send), wholeStepDep(done));
    }
    const int32_t from = (i - k + L) % L;
    if (len(from) > 0) {
      Step recv;
      recv.kind = StepKind::Recv;
      recv.peer = local.at(from);
      recv.dst = recvAt(lo(from) * es);
      recv.count = len(from);
      s.addDep(s.addStep(recv), wholeStepDep(done));
    }
  }
  s.finalizePeers();
}

namespace {

// The tensor quantized, in bytes, for `elems` elements.
double quantizedBytes(const CollArgs& args, double elems) {
  const double block = args.compress.blockSize > 0 ? args.compress.blockSize : 64;
  return elems * (block / 2 + 2) / block;
}

// The two-shot among `members`, each sending its quantized shards to every other and receiving
// as many (2(m-1) messages, 2(m-1)/m of the quantized tensor `q`, `flowsPerNic` of them sharing
// a NIC); quantizing passes count as local passes (gamma) over the float32 tensor.
double twoShotTime(const ModelInputs& in, double members, double elems, double q, double flowsPerNic,
                   const LinkCost& link) {
  const double m = members;
  return 2 * (m - 1) * flowsPerNic * link.alpha + 2 * (m - 1) / m * q * flowsPerNic * link.beta +
         4 * elems * 4 * in.gamma;  // widen, accumulate, quantize twice, dequantize: about 4 float passes
}

double twoShotCompressedModel(const ModelInputs& in, const CollArgs& args) {
  const Topology& t = *in.topo;
  const double n = static_cast<double>(args.count);
  const LinkCost& across = t.nhosts > 1 ? in.interHost : in.intraHost;
  return twoShotTime(in, t.nranks, n, quantizedBytes(args, n), t.nhosts > 1 ? in.shape.ranksPerNic : 1, across);
}

bool twoShotApplies(const ModelInputs& /*in*/, CollKind /*kind*/, std::string* why) {
  return notApplicable(why,
                       [] { return std::string("twoshot runs compressed All-Reduce only (collAllReduceCompressed)"); });
}

Candidate noPlainModel(const ModelInputs& /*in*/, CollKind /*kind*/, uint64_t /*bytes*/, uint64_t /*count*/) {
  return Candidate{};
}

void twoShotBuild(const BuildRequest& r, Schedule* out) {
  buildCompressedAllReduce(r.topo, r.args, r.args.compress.blockSize, out);
}

}  // namespace

// The hierarchical variant moves the tensor at full precision inside the host (like a ring
// reduce-scatter + all-gather) and runs the two-shot across hosts on 1/L of it per local rank.
double hierarchicalCompressedModel(const ModelInputs& in, const CollArgs& args) {
  const Topology& t = *in.topo;
  if (!compressedHierarchyApplies(t)) return -1;
  const double H = t.nhosts, L = in.shape.maxLocal;
  const double es = static_cast<double>(dataTypeSize(args.dtype));
  const double n = static_cast<double>(args.count);
  const double intra =
      2 * (L - 1) * in.intraHost.alpha + 2 * (L - 1) / L * n * es * in.intraHost.beta + n * es * in.gamma;
  return intra + twoShotTime(in, H, n / L, quantizedBytes(args, n) / L, in.shape.ranksPerNic, in.interHost);
}

// Serves All-Reduce only as collAllReduceCompressed: the planner never picks it for a plain one.
extern const AlgorithmDescriptor kTwoShotAlgorithm{
    .name = "twoshot",
    .serves = collBit(CollKind::AllReduce),
    .applies = twoShotApplies,
    .predict = noPlainModel,
    .allReduceFactor = {},
    .build = twoShotBuild,
    .predictCompressed = twoShotCompressedModel,
};

}  // namespace coll
