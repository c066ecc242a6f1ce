// Torus All-Reduce: ring reduce-scatter along each grid dimension in turn, then all-gather back in
// reverse order, as two half-size rings running in opposite directions; the grid's dimensions;
// the torus descriptor.
#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <numeric>
#include <vector>

#include "algorithms/phases.h"
#include "algorithms/registry.h"

namespace coll {

namespace {

// "XxY" or "XxYxZ" (positive integers); false when it is not of that form.
bool parseDims(const std::string& text, TorusDims* out) {
  TorusDims d;
  d.ndims = 0;
  size_t pos = 0;
  while (true) {
    if (d.ndims == 3) return false;
    size_t end = pos;
    while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
    // Nine digits keep every factor and the product of three inside int64.
    if (end == pos || end - pos > 9) return false;
    const int64_t v = std::strtoll(text.substr(pos, end - pos).c_str(), nullptr, 10);
    if (v < 1) return false;
    d.d[d.ndims++] = static_cast<int32_t>(v);
    if (end == text.size()) break;
    if (text[end] != 'x' && text[end] != 'X') return false;
    pos = end + 1;
  }
  if (d.ndims < 2) return false;
  *out = d;
  return true;
}

// The most balanced grid for p ranks: the smallest largest factor over factorisations into at
// most three factors, then the fewest dimensions (every dimension adds a pipeline drain between
// phases). Largest factor first: dimension 0 carries the most data and joins consecutive ranks,
// which are likeliest to share a host.
TorusDims balancedDims(int32_t p) {
  TorusDims best;
  best.ndims = 1;
  best.d[0] = p;
  int32_t bestMax = p;
  for (int32_t a = 1; static_cast<int64_t>(a) * a * a <= p; ++a) {
    if (p % a != 0) continue;
    const int32_t rest = p / a;
    for (int32_t b = a; static_cast<int64_t>(b) * b <= rest; ++b) {
      if (rest % b != 0) continue;
      const int32_t c = rest / b;
      if (b == 1) continue;  // (1, 1, p): the ring we start from
      const int32_t ndims = a == 1 ? 2 : 3;
      if (c < bestMax || (c == bestMax && ndims < best.ndims)) {
        best = TorusDims{};
        best.ndims = ndims;
        best.d[0] = c;
        best.d[1] = b;
        if (ndims == 3) best.d[2] = a;
        bestMax = c;
      }
    }
  }
  return best;
}

// Steps [first, end) of a schedule.
struct StepRange {
  int32_t first, end;
};

// Schedule::addJoin over several ranges: a no-op step that completes once every step in them
// has (a gate covering one half's phases and not the other's).
int32_t addJoinOf(const std::vector<StepRange>& ranges, Schedule* s) {
  Step j;
  j.kind = StepKind::Copy;
  j.src = scratchAt(0);
  j.dst = scratchAt(0);
  j.count = 1;
  const int32_t index = s->addStep(j);
  for (const StepRange& r : ranges) {
    for (int32_t k = r.first; k < r.end; ++k) {
      if (s->steps[k].count > 0) s->addDep(index, wholeStepDep(k));
    }
  }
  return index;
}

}  // namespace

Status torusDimsFor(const Topology& topo, const std::string& forced, TorusDims* out) {
  const int32_t p = topo.nranks;
  if (!forced.empty()) {
    TorusDims d;
    if (!parseDims(forced, &d)) {
      return makeError(collInvalidUsage,
                       "COLL_TORUS_DIMS=\"%s\" is not a grid: give two or three positive factors separated by 'x' "
                       "(e.g. 4x8 or 2x4x4) whose product is the number of ranks (%d)",
                       forced.c_str(), p);
    }
    if (d.product() != p) {
      return makeError(collInvalidUsage,
                       "COLL_TORUS_DIMS=\"%s\" describes %lld ranks but the communicator has %d ranks; give factors "
                       "whose product is %d, or unset it for an automatic grid",
                       forced.c_str(), static_cast<long long>(d.product()), p, p);
    }
    *out = d;
    return okStatus();
  }
  if (topo.nhosts > 1 && topo.localSize() > 1 && uniformBlockHosts(topo)) {
    TorusDims d;
    d.ndims = 2;
    d.d[0] = topo.localSize();
    d.d[1] = topo.nhosts;
    *out = d;
    return okStatus();
  }
  *out = balancedDims(std::max(p, 1));
  return okStatus();
}

void addTorusAllReduce(const RankGroup& g, const TorusDims& dims, const PhaseSpan& span, int32_t gate, bool divide,
                       Schedule* s) {
  const int32_t n = g.size();
  TorusDims grid = dims;
  if (grid.product() != n) {
    // The planner only hands over grids of the group's size; a ring is still correct.
    assert(!"torus dims do not multiply to the group size");
    grid = TorusDims{};
    grid.ndims = 1;
    grid.d[0] = n;
  }
  // The dimensions that have a ring to run.
  int32_t active[3], nactive = 0;
  for (int32_t i = 0; i < 3; ++i) {
    if (grid.d[i] > 1) active[nactive++] = i;
  }
  if (span.count == 0) return;
  if (nactive == 0) {
    addRingReduceScatter(g, span, gate, false, divide, s);  // n == 1: copy (and divide)
    return;
  }
  const int32_t coord[3] = {g.me % grid.d[0], (g.me / grid.d[0]) % grid.d[1], g.me / (grid.d[0] * grid.d[1])};
  const int32_t stride[3] = {1, grid.d[0], grid.d[0] * grid.d[1]};
  // The line through this member along dimension i, in coordinate order.
  RankGroup line[3];
  for (int32_t a = 0; a < nactive; ++a) {
    const int32_t i = active[a];
    const int32_t base = g.me - coord[i] * stride[i];
    line[i].ranks.resize(static_cast<size_t>(grid.d[i]));
    for (int32_t c = 0; c < grid.d[i]; ++c) line[i].ranks[c] = g.ranks[base + c * stride[i]];
    line[i].me = coord[i];
  }

  // The two halves' phases are built interleaved, phase by phase: with a dimension of size 2
  // both directions talk to the same peer, and that peer's queue runs in step order, so a half
  // built after the other would wait for all of it. Each half's gates join only its own steps.
  struct Half {
    bool reverse = false;
    PhaseSpan level[3];  // the span dimension active[a]'s phases work on
    PhaseSpan cur;
    int32_t gate = -1;
    PhaseResult rs;
    std::vector<StepRange> built;  // this half's steps so far
  };
  const int32_t halves = span.count >= 2 ? 2 : 1;
  const uint64_t half = span.count / 2;
  Half hs[2];
  for (int32_t h = 0; h < halves; ++h) {
    hs[h].reverse = h == 1;
    hs[h].cur = halves == 1 ? span : h == 0 ? subSpan(span, 0, half) : subSpan(span, half, span.count - half);
    hs[h].gate = gate;
  }
  auto track = [&](Half& st, int32_t from) { st.built.push_back({from, static_cast<int32_t>(s->steps.size())}); };
  for (int32_t a = 0; a < nactive; ++a) {
    const int32_t i = active[a];
    for (int32_t h = 0; h < halves; ++h) {
      Half& st = hs[h];
      const int32_t from = static_cast<int32_t>(s->steps.size());
      if (a > 0) st.gate = addJoinOf(st.built, s);
      st.level[a] = st.cur;
      st.rs = addRingReduceScatter(line[i], st.cur, st.gate, st.reverse, divide && a + 1 == nactive, s);
      track(st, from);
      // This member now owns chunk coord[i] of cur, reduced over the line, in out.
      PhaseSpan next =
          subSpan(st.cur, partStart(st.cur.count, grid.d[i], coord[i]), partCount(st.cur.count, grid.d[i], coord[i]));
      next.in = next.out;
      st.cur = next;
    }
  }
  // The last dimension's all-gather streams from its reduce-scatter as a ring All-Reduce does
  // (its receives only overwrite chunks whose owners needed this member's sends first); the
  // earlier ones wait for everything before them in their half.
  for (int32_t a = nactive - 1; a >= 0; --a) {
    const int32_t i = active[a];
    for (int32_t h = 0; h < halves; ++h) {
      Half& st = hs[h];
      const int32_t from = static_cast<int32_t>(s->steps.size());
      if (a == nactive - 1) {
        addRingAllGather(line[i], st.level[a], st.gate, st.rs.ready, st.reverse, s);
      } else {
        addRingAllGather(line[i], st.level[a], addJoinOf(st.built, s), -1, st.reverse, s);
      }
      track(st, from);
    }
  }
}

void buildTorusAllReduce(const Topology& topo, const CollArgs& args, const TorusDims& dims, Schedule* out) {
  Schedule& s = *out;
  s.begin("torus", args.dtype, args.op, static_cast<uint64_t>(topo.nranks));
  if (planAlone(topo, args.count, &s)) return;
  RankGroup all;
  all.ranks.resize(static_cast<size_t>(topo.nranks));
  std::iota(all.ranks.begin(), all.ranks.end(), 0);
  all.me = topo.rank;
  int32_t sum = 0;
  for (int32_t i = 0; i < 3; ++i) sum += dims.d[i] - 1;
  s.steps.reserve(8 * static_cast<size_t>(sum) + 16);
  addTorusAllReduce(all, dims, PhaseSpan{sendAt(0), recvAt(0), args.count, dataTypeSize(args.dtype)}, -1,
                    args.op == collAvg, &s);
  s.finalizePeers();
}

std::string torusDimsText(const TorusDims& dims) {
  std::string t = std::to_string(dims.d[0]);
  for (int i = 1; i < dims.ndims; ++i) t += "x" + std::to_string(dims.d[i]);
  return t;
}

namespace {

bool torusApplies(const ModelInputs& in, CollKind /*kind*/, std::string* why) {
  if (!in.shape.torusOk) return notApplicable(why, [&] { return in.shape.torusProblem; });
  return true;
}

Candidate torusModel(const ModelInputs& in, CollKind kind, uint64_t bytes, uint64_t /*count*/) {
  const PlannerShape& sh = in.shape;
  Candidate c;
  if (kind != CollKind::AllReduce) return c;
  double t = 0, part = static_cast<double>(bytes);
  for (size_t i = 0; i < sh.torusDims.size(); ++i) {
    const int d = sh.torus.d[i];
    if (d <= 1) continue;
    // Two half-size rings in opposite directions.
    const double f = sh.torusInterFraction[i];
    t += streamedSteps(in, d - 1, sh.torusDims[i], f, part / d / 2, 2) +
         streamedSteps(in, d - 1, sh.torusDims[i], f, part / d / 2, 0);
    part /= d;
  }
  c.seconds = t;
  c.options.torus = sh.torus;
  return c;
}

void torusBuild(const BuildRequest& r, Schedule* out) { buildTorusAllReduce(r.topo, r.args, r.options.torus, out); }

std::string torusOptions(const AlgoOptions& options) { return "(" + torusDimsText(options.torus) + ")"; }

}  // namespace

// The torus ran 1.1-2x its model on the bytes (worst on one host; 2-core VM, 8 ranks, 4 MiB and
// 16 MiB, one host and emulated 2x4 and 4x2 hosts at 1 Gbit/s); its latency below that.
extern const AlgorithmDescriptor kTorusAlgorithm{
    .name = "torus",
    .serves = collBit(CollKind::AllReduce),
    .applies = torusApplies,
    .predict = torusModel,
    .allReduceFactor = {1.4, false},
    .build = torusBuild,
    .describeOptions = torusOptions,
};

}  // namespace coll
