// Direct All-Reduce over host-shared windows: every local rank publishes its input in its window,
// reductions read all windows in local-rank order, dependencies are progress slots, not messages.
// Also the direct descriptor (All-Reduce, All-Gather, Reduce-Scatter on one host).
#include "algorithms/algorithms.h"
#include "algorithms/registry.h"

#include <algorithm>
#include <vector>

#include "src/base/align.h"

namespace coll {

namespace {

constexpr uint64_t kAlign = 64;

}  // namespace

uint64_t directMaxBytes(uint64_t windowHalfBytes, int32_t localSize) {
  // Layout: [input: B][pad to 64][result slice <= ceil(B / L) rounded up to one 8-byte element].
  const uint64_t l = static_cast<uint64_t>(std::max(1, localSize));
  auto fits = [&](uint64_t b) { return roundUp(b, kAlign) + ceilDiv(b, l) + 8 <= windowHalfBytes; };
  uint64_t lo = 0, hi = windowHalfBytes;
  if (!fits(0)) return 0;
  while (lo < hi) {
    uint64_t mid = lo + (hi - lo + 1) / 2;
    if (fits(mid)) lo = mid;
    else hi = mid - 1;
  }
  return lo / 8 * 8;
}

void buildDirectAllReduce(const Topology& topo, const CollArgs& args, const DirectOptions& options, Schedule* out) {
  Schedule& s = *out;
  s.begin("direct", args.dtype, args.op, static_cast<uint64_t>(topo.localSize()));
  const bool avg = args.op == collAvg;
  s.usesWindows = true;
  const uint64_t es = dataTypeSize(args.dtype);
  const uint64_t count = args.count;
  const int32_t l = topo.localSize();
  const int32_t me = topo.localRank();
  const int32_t self = topo.rank;
  const uint64_t inputBytes = count * es;
  const uint64_t resultOff = roundUp(inputBytes, kAlign);

  if (l <= 1) {
    // Alone on the host: no windows exist and the result is the input.
    s.usesWindows = false;
    s.addSelfCopy(count);
    return;
  }

  s.srcs.reserve(static_cast<size_t>(l));
  // Step 0: publish the input. The half is reused two calls later, so wait until every peer has
  // finished the call that last read it.
  Step in;
  in.kind = StepKind::Copy;
  in.src = sendAt(0);
  in.dst = windowAt(self, 0);
  in.count = count;
  in.publishSlot = 0;
  int32_t copyIn = s.addStep(in);
  for (int32_t j = 0; j < l; ++j) {
    if (j != me) s.addDep(copyIn, peerCallDep(topo.localRanks[j], 2));
  }

  std::vector<BufRef> sources(static_cast<size_t>(l));
  if (inputBytes < options.reduceAllBelowBytes) {
    // Small: every rank reduces everything, one hop.
    s.windowBytes = inputBytes;
    s.publishSlots = 1;
    for (int32_t j = 0; j < l; ++j) sources[j] = windowAt(topo.localRanks[j], 0);
    int32_t red = s.addReduce(recvAt(0), sources.data(), static_cast<uint32_t>(l), count);
    for (int32_t j = 0; j < l; ++j) {
      if (j == me) s.addDep(red, stepDep(copyIn));
      else s.addDep(red, peerStepDep(topo.localRanks[j], 0, 0, count));
    }
    if (avg) {
      Step d;
      d.kind = StepKind::Divide;
      d.src = recvAt(0);
      d.dst = d.src;
      d.count = count;
      int32_t di = s.addStep(d);
      s.addDep(di, stepDep(red));
    }
    return;
  }

  // Sliced: owner i reduces [a_i, b_i) into its result area; everyone copies every result out.
  const uint64_t base = count / l, extra = count % l;
  auto sliceStart = [&](int32_t i) { return i * base + std::min<uint64_t>(i, extra); };
  auto sliceCount = [&](int32_t i) { return base + (static_cast<uint64_t>(i) < extra ? 1 : 0); };
  s.windowBytes = resultOff + (base + (extra ? 1 : 0)) * es;
  s.publishSlots = 2;
  const uint64_t a = sliceStart(me), n = sliceCount(me);
  for (int32_t j = 0; j < l; ++j) sources[j] = windowAt(topo.localRanks[j], a * es);
  int32_t red = s.addReduce(windowAt(self, resultOff), sources.data(), static_cast<uint32_t>(l), n);
  for (int32_t j = 0; j < l; ++j) {
    if (j == me) s.addDep(red, stepDep(copyIn, a));
    else s.addDep(red, peerStepDep(topo.localRanks[j], 0, a, count));
  }
  int32_t last = red;
  if (avg) {
    Step d;
    d.kind = StepKind::Divide;
    d.src = windowAt(self, resultOff);
    d.dst = d.src;
    d.count = n;
    last = s.addStep(d);
    s.addDep(last, stepDep(red));
  }
  s.steps[last].publishSlot = 1;
  for (int32_t t = 0; t < l; ++t) {
    int32_t j = (me + t) % l;
    Step c;
    c.kind = StepKind::Copy;
    c.src = windowAt(topo.localRanks[j], resultOff);
    c.dst = recvAt(sliceStart(j) * es);
    c.count = sliceCount(j);
    int32_t ci = s.addStep(c);
    if (j == me) s.addDep(ci, stepDep(last));
    else s.addDep(ci, peerStepDep(topo.localRanks[j], 1, 0, sliceCount(j)));
  }
}

namespace {

// Below this size every rank of a direct All-Reduce reduces the whole vector: p times the reads,
// one hop less.
constexpr uint64_t kReduceAllBelowBytes = 16 * 1024;

bool directApplies(const ModelInputs& in, CollKind kind, std::string* why) {
  const Topology& t = *in.topo;
  if (!in.haveWindows) {
    return notApplicable(
        why, [] { return std::string("direct needs shared-memory windows (not with COLL_TRANSPORT=tcp)"); });
  }
  if (!t.singleHost()) {
    return notApplicable(why, [&] {
      return "direct needs every rank on one host (this communicator spans " + std::to_string(t.nhosts) + " hosts)";
    });
  }
  if (t.nranks < 2) return notApplicable(why, [] { return std::string("direct needs two ranks or more"); });
  if (in.directLimit == 0) {
    return notApplicable(
        why, [] { return std::string("direct needs a window (COLL_SHM_WINDOW_BYTES, COLL_DIRECT_MAX_BYTES)"); });
  }
  if (kind == CollKind::ReduceScatter && in.windowHalfBytes / (2 * static_cast<uint64_t>(t.nranks - 1)) < 64) {
    return notApplicable(why, [] {
      return std::string("direct reducescatter needs 128 window bytes per peer (COLL_SHM_WINDOW_BYTES)");
    });
  }
  if (kind == CollKind::AllGather && in.windowHalfBytes < 128) {
    return notApplicable(why, [] {
      return std::string("direct allgather needs a window half of 128 bytes or more (COLL_SHM_WINDOW_BYTES)");
    });
  }
  return true;
}

double directOnce(const ModelInputs& in, double n) {
  const int p = in.topo->nranks;
  if (n < kReduceAllBelowBytes) return in.intraHost.alpha + (1.0 + p) * n * in.gamma;
  return 2.0 * in.intraHost.alpha + 3.0 * n * in.gamma;
}

Candidate directModel(const ModelInputs& in, CollKind kind, uint64_t bytes, uint64_t /*count*/) {
  const int64_t p = in.topo->nranks;
  const double n = static_cast<double>(bytes);
  const double g = in.gamma;
  Candidate c;
  switch (kind) {
    case CollKind::AllReduce:
      c.seconds = in.directLimit > 0 && n > in.directLimit
                      ? std::ceil(n / in.directLimit) * directOnce(in, static_cast<double>(in.directLimit))
                      : directOnce(in, n);
      break;
    case CollKind::AllGather: {
      // Per rank: its block copied into its window once, the p-1 peers' blocks copied out (the
      // ring copies each block twice per hop through a FIFO); every round waits once on the
      // peers' markers and once for the copy in (directAllGatherShape).
      const uint64_t rounds = directAllGatherShape(bytes, 1, in.windowHalfBytes).rounds;
      c.seconds = 2 * static_cast<double>(rounds) * in.intraHost.alpha + static_cast<double>(p) * n * g;
      break;
    }
    case CollKind::ReduceScatter: {
      // Per rank: L-1 blocks copied into its window, one pass reading L blocks; every round
      // waits once on the peers' markers and once for the copies (directReduceScatterShape).
      const uint64_t rounds = directReduceScatterShape(bytes, 1, in.windowHalfBytes, static_cast<int32_t>(p)).rounds;
      c.seconds = 2 * static_cast<double>(rounds) * in.intraHost.alpha + static_cast<double>(2 * p - 1) * n * g;
      break;
    }
    default: break;
  }
  return c;
}

// A direct All-Reduce past the window runs as rounds (directModel counts them).
Status directShapeCall(const ModelInputs& in, const CollArgs& args, CallShape* out) {
  if (args.kind != CollKind::AllReduce) return okStatus();
  const uint64_t es = dataTypeSize(args.dtype);
  out->reduceAllBelowBytes = kReduceAllBelowBytes;
  if (in.directLimit < es)
    return makeError(collInvalidUsage, "COLL_SHM_WINDOW_BYTES is too small for even one element");
  if (args.count * es > in.directLimit) out->roundElems = in.directLimit / es;
  return okStatus();
}

void directBuild(const BuildRequest& r, Schedule* out) {
  DirectOptions options;
  options.windowHalfBytes = r.windowHalfBytes;
  switch (r.args.kind) {
    case CollKind::AllGather: buildDirectAllGather(r.topo, r.args, options, out); break;
    case CollKind::ReduceScatter: buildDirectReduceScatter(r.topo, r.args, options, out); break;
    default:
      options.reduceAllBelowBytes = r.reduceAllBelowBytes;
      buildDirectAllReduce(r.topo, r.args, options, out);
      break;
  }
}

}  // namespace

extern const AlgorithmDescriptor kDirectAlgorithm{
    .name = "direct",
    .serves = collBit(CollKind::AllReduce) | collBit(CollKind::AllGather) | collBit(CollKind::ReduceScatter),
    .applies = directApplies,
    .predict = directModel,
    .allReduceFactor = {},
    .build = directBuild,
    .shapeCall = directShapeCall,
};

}  // namespace coll
