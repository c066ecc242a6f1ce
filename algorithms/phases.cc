// Ring phases over a group (reduce-scatter, all-gather, All-Reduce), the flat ring All-Reduce
// built from them, and the ring's descriptor (every collective it serves).
#include "algorithms/phases.h"
#include "algorithms/registry.h"

#include <algorithm>
#include <numeric>

namespace coll {

namespace {

void gateStep(Schedule* s, int32_t step, int32_t gate) {
  if (gate >= 0) s->addDep(step, wholeStepDep(gate));
}

// A step reading `in` from element `first` of the span streams behind the span's producer.
void inputDep(Schedule* s, int32_t step, const PhaseSpan& span, uint64_t first) {
  if (span.inReady >= 0) s->addDep(step, stepDep(span.inReady, span.inReadyOffset + first));
}

}  // namespace

RankGroup allRanksGroup(const Topology& topo) {
  RankGroup all;
  all.ranks.resize(static_cast<size_t>(topo.nranks));
  std::iota(all.ranks.begin(), all.ranks.end(), 0);
  all.me = topo.rank;
  return all;
}

PhaseResult addOwnResult(const PhaseSpan& span, int32_t gate, bool divide, Schedule* s, int32_t after,
                         uint64_t afterOffset) {
  PhaseResult res;
  if (span.count == 0) return res;
  Step c;
  c.kind = divide ? StepKind::Divide : StepKind::Copy;
  c.src = span.in;
  c.dst = span.out;
  c.count = span.count;
  res.ready = s->addStep(c);
  gateStep(s, res.ready, gate);
  inputDep(s, res.ready, span, 0);
  if (after >= 0) s->addDep(res.ready, stepDep(after, afterOffset));
  return res;
}

PhaseResult addRingReduceScatter(const RankGroup& g, const PhaseSpan& span, int32_t gate, bool reverse, bool divide,
                                 Schedule* s) {
  const int32_t n = g.size();
  if (n == 1) return addOwnResult(span, gate, divide, s);
  const int64_t m = g.me;
  const int64_t dir = reverse ? -1 : 1;
  const int32_t right = g.at(m + dir), left = g.at(m - dir);
  auto chunk = [&](int64_t c) { return static_cast<int32_t>(((c % n) + n) % n); };
  auto at = [&](const BufRef& base, int32_t c) { return offsetBy(base, partStart(span.count, n, c) * span.es); };
  // Step k sends chunk m-(k+1)*dir (first from `in`, later the partial reduced in step k-1) and
  // reduces chunk m-(k+2)*dir into out, so step n-2 completes chunk m.
  int32_t prev = -1;
  for (int32_t k = 0; k + 1 < n; ++k) {
    const int32_t cs = chunk(m - (k + 1) * dir);
    Step snd;
    snd.kind = StepKind::Send;
    snd.peer = right;
    snd.src = at(k == 0 ? span.in : span.out, cs);
    snd.count = partCount(span.count, n, cs);
    const int32_t si = s->addStep(snd);
    gateStep(s, si, gate);
    if (k > 0) s->addDep(si, stepDep(prev));
    else inputDep(s, si, span, partStart(span.count, n, cs));

    const int32_t cr = chunk(m - (k + 2) * dir);
    Step rr;
    rr.kind = StepKind::RecvReduce;
    rr.peer = left;
    rr.src = at(span.in, cr);
    rr.dst = at(span.out, cr);
    rr.count = partCount(span.count, n, cr);
    prev = s->addStep(rr);
    gateStep(s, prev, gate);
    inputDep(s, prev, span, partStart(span.count, n, cr));
  }
  if (divide) {
    Step d;
    d.kind = StepKind::Divide;
    d.src = at(span.out, static_cast<int32_t>(m));
    d.dst = d.src;
    d.count = partCount(span.count, n, static_cast<int32_t>(m));
    const int32_t di = s->addStep(d);
    s->addDep(di, stepDep(prev));
    prev = di;
  }
  return PhaseResult{prev};
}

PhaseResult addRingAllGather(const RankGroup& g, const PhaseSpan& span, int32_t gate, int32_t ownReady, bool reverse,
                             Schedule* s, const Producers* ownParts, Producers* finals) {
  const int32_t n = g.size();
  const int64_t m = g.me;
  auto at = [&](int32_t c) { return offsetBy(span.out, partStart(span.count, n, c) * span.es); };
  auto record = [&](int32_t c, int32_t step) {
    if (finals != nullptr) finals->push_back(Producer{partStart(span.count, n, c), step});
  };
  auto addOwnDeps = [&](int32_t step) {
    if (ownParts == nullptr) {
      if (ownReady >= 0) s->addDep(step, stepDep(ownReady));
      return;
    }
    for (const Producer& p : *ownParts) {
      if (p.step >= 0) s->addDep(step, p.first == 0 ? stepDep(p.step) : stepDepFrom(p.step, p.first));
    }
  };
  const int32_t own = static_cast<int32_t>(m);
  if (n == 1) {
    record(own, ownReady);
    return PhaseResult{ownReady};
  }
  const int64_t dir = reverse ? -1 : 1;
  const int32_t right = g.at(m + dir), left = g.at(m - dir);
  auto chunk = [&](int64_t c) { return static_cast<int32_t>(((c % n) + n) % n); };
  // Step k forwards chunk m-k*dir (own first, then what arrived in step k-1) and receives chunk
  // m-(k+1)*dir.
  const size_t firstFinal = finals != nullptr ? finals->size() : 0;
  record(own, ownReady);
  int32_t prev = -1;
  for (int32_t k = 0; k + 1 < n; ++k) {
    const int32_t cs = chunk(m - k * dir);
    Step snd;
    snd.kind = StepKind::Send;
    snd.peer = right;
    snd.src = at(cs);
    snd.count = partCount(span.count, n, cs);
    const int32_t si = s->addStep(snd);
    gateStep(s, si, gate);
    if (k == 0) addOwnDeps(si);
    else s->addDep(si, stepDep(prev));

    const int32_t cr = chunk(m - (k + 1) * dir);
    Step rv;
    rv.kind = StepKind::Recv;
    rv.peer = left;
    rv.dst = at(cr);
    rv.count = partCount(span.count, n, cr);
    prev = s->addStep(rv);
    gateStep(s, prev, gate);
    record(cr, prev);
  }
  if (finals != nullptr) {
    std::sort(finals->begin() + static_cast<ptrdiff_t>(firstFinal), finals->end(),
              [](const Producer& a, const Producer& b) { return a.first < b.first; });
  }
  return PhaseResult{prev};
}

void addRingAllReduce(const RankGroup& g, const PhaseSpan& span, int32_t gate, bool divide, int32_t channels,
                      Schedule* s, Producers* finals) {
  if (channels >= 2 && g.size() > 2 && span.count >= 2) {
    const uint64_t half = span.count / 2;
    for (int c = 0; c < 2; ++c) {
      PhaseSpan part = c == 0 ? subSpan(span, 0, half) : subSpan(span, half, span.count - half);
      PhaseResult rs = addRingReduceScatter(g, part, gate, c == 1, divide, s);
      const size_t before = finals != nullptr ? finals->size() : 0;
      addRingAllGather(g, part, gate, rs.ready, c == 1, s, nullptr, finals);
      if (finals != nullptr && c == 1) {
        for (size_t k = before; k < finals->size(); ++k) (*finals)[k].first += half;
      }
    }
    return;
  }
  PhaseResult rs = addRingReduceScatter(g, span, gate, false, divide, s);
  addRingAllGather(g, span, gate, rs.ready, false, s, nullptr, finals);
}

void buildRingAllReduce(const Topology& topo, const CollArgs& args, Schedule* out, int32_t channels) {
  Schedule& s = *out;
  s.begin(channels >= 2 ? "ring2" : "ring", args.dtype, args.op, static_cast<uint64_t>(topo.nranks));
  if (planAlone(topo, args.count, &s)) return;
  const RankGroup all = allRanksGroup(topo);
  const size_t es = dataTypeSize(args.dtype);
  s.steps.reserve(4 * static_cast<size_t>(topo.nranks) + 2);
  s.deps.reserve(4 * static_cast<size_t>(topo.nranks) + 2);
  addRingAllReduce(all, PhaseSpan{sendAt(0), recvAt(0), args.count, es}, -1, args.op == collAvg, channels, &s);
  s.finalizePeers();
}

namespace {

Candidate ringModel(const ModelInputs& in, CollKind kind, uint64_t bytes, uint64_t count) {
  const PlannerShape& sh = in.shape;
  const int64_t p = in.topo->nranks;
  const double n = static_cast<double>(bytes);
  const double g = in.gamma;
  Candidate c;
  switch (kind) {
    case CollKind::AllReduce: {
      // Only the ranks holding a non-empty chunk send in a step.
      const StepLoad l =
          withSendingShare(sh.ring, static_cast<double>(nonEmptyChunks(count, p)) / static_cast<double>(p));
      c.seconds = streamedSteps(in, static_cast<double>(p - 1), l, sh.ringInterFraction, n / p, 1, StepFlow::Ring) +
                  streamedSteps(in, static_cast<double>(p - 1), l, sh.ringInterFraction, n / p, 0, StepFlow::Ring);
      break;
    }
    case CollKind::Broadcast:
    case CollKind::Reduce: {
      const double red = kind == CollKind::Reduce ? g : 0;
      c.seconds = pipelined(
          in, p - 1, n, [&](double s) { return stepCost(in, sh.ring, s) + s * red; }, &c.sliceBytes);
      break;
    }
    case CollKind::AllGather: c.seconds = (p - 1) * stepCost(in, sh.ring, n); break;
    case CollKind::ReduceScatter: c.seconds = (p - 1) * (stepCost(in, sh.ring, n) + n * g); break;
    default: break;
  }
  return c;
}

void ringBuild(const BuildRequest& r, Schedule* out) {
  switch (r.args.kind) {
    case CollKind::Broadcast: buildRingBroadcast(r.topo, r.args, out); break;
    case CollKind::Reduce: buildRingReduce(r.topo, r.args, out); break;
    case CollKind::AllGather: buildRingAllGather(r.topo, r.args, out); break;
    case CollKind::ReduceScatter: buildRingReduceScatter(r.topo, r.args, out); break;
    default: buildRingAllReduce(r.topo, r.args, out, r.options.channels); break;
  }
}

}  // namespace

extern const AlgorithmDescriptor kRingAlgorithm{
    .name = "ring",
    .serves = collBit(CollKind::AllReduce) | collBit(CollKind::Broadcast) | collBit(CollKind::Reduce) |
              collBit(CollKind::AllGather) | collBit(CollKind::ReduceScatter),
    .applies = nullptr,
    .predict = ringModel,
    .allReduceFactor = {},
    .build = ringBuild,
};

}  // namespace coll
