// Phase builders: the pieces composed algorithms are made of. Each appends one phase (a ring
// reduce-scatter, a tree All-Reduce, ...) over a group of ranks (any subset, in the order the
// phase uses) and a span of elements to a rank's schedule. Phases are chained with a gate: every
// step of a phase waits for the gate step (usually Schedule::addJoin of the previous phase).
#pragma once

#include <cstdint>
#include <vector>

#include "algorithms/algorithms.h"
#include "src/schedule/schedule.h"

namespace coll {

struct RankGroup {
  std::vector<int32_t> ranks;  // global ranks, in the order the phase uses
  int32_t me = 0;              // index of this rank in `ranks`
  int32_t size() const { return static_cast<int32_t>(ranks.size()); }
  // Member i, cyclically (any integer i).
  int32_t at(int64_t i) const {
    const int64_t n = size();
    return ranks[static_cast<size_t>(((i % n) + n) % n)];
  }
};

// What a phase works on: `count` elements; this rank's contribution is read from `in` (never
// written unless it equals `out`), results go to `out`. Ranges may be the user's buffers,
// scratch or windows.
struct PhaseSpan {
  BufRef in;
  BufRef out;
  uint64_t count = 0;  // elements
  size_t es = 0;       // element size in bytes
  // Streaming input (ring phases only; others need it complete at their gate): element e of `in`
  // is ready once step `inReady` has done inReadyOffset + e elements, so a phase can start on
  // what the previous one has finished, slice by slice. -1 = ready at the gate.
  int32_t inReady = -1;
  uint64_t inReadyOffset = 0;
};

// Near-equal partition of `count` elements into n chunks, the first count % n one element longer.
inline uint64_t partStart(uint64_t count, int32_t n, int32_t c) {
  const uint64_t base = count / n, extra = count % n;
  return c * base + (static_cast<uint64_t>(c) < extra ? c : extra);
}
inline uint64_t partCount(uint64_t count, int32_t n, int32_t c) {
  return count / n + (static_cast<uint64_t>(c) < count % n ? 1 : 0);
}
inline BufRef offsetBy(BufRef r, uint64_t bytes) {
  r.offset += bytes;
  return r;
}
// The sub-span of elements [first, first + count).
inline PhaseSpan subSpan(const PhaseSpan& s, uint64_t first, uint64_t count) {
  return PhaseSpan{offsetBy(s.in, first * s.es), offsetBy(s.out, first * s.es), count, s.es, s.inReady,
                   s.inReadyOffset + first};
}

// Which step finalises which part of a span: part k covers [first_k, first_{k+1}) (ascending,
// span-relative elements), and its element e is final once `step` has done e - first_k elements.
// A later phase streams from a result made in pieces by depending on every piece's step.
struct Producer {
  uint64_t first = 0;
  int32_t step = -1;
};
using Producers = std::vector<Producer>;

// What a phase leaves behind: the step after which this rank's result is final (per slice:
// dependents may stream from it with stepDep), or -1 when the phase added no step that writes it.
struct PhaseResult {
  int32_t ready = -1;
};

// All ranks of the communicator, in rank order.
RankGroup allRanksGroup(const Topology& topo);
// A group of one: the member's result is its contribution (in copied to out, divided when
// `divide`), after `gate` and, per slice, after step `after` (element i needs after's
// afterOffset + i; -1 = nothing).
PhaseResult addOwnResult(const PhaseSpan& span, int32_t gate, bool divide, Schedule* s, int32_t after = -1,
                         uint64_t afterOffset = 0);

// ---- ring phases (phases.cc). `reverse` runs the ring the other way round (member m sends to
// m-1), so two half-size rings in opposite directions use both directions of every link.

// Reduce-scatter: afterwards member i holds chunk i (partStart(count, n, i)) reduced over the group
// in out; other chunks of out hold partial sums. With `divide`, the own chunk is divided by the
// schedule's divisor (collAvg). n == 1: in is copied to out (and divided).
PhaseResult addRingReduceScatter(const RankGroup& g, const PhaseSpan& span, int32_t gate, bool reverse, bool divide,
                                 Schedule* s);
// All-gather: member i's chunk i of out (final once `ownReady` has covered it; -1 = at the gate;
// or, when `ownParts` is given, made in pieces: chunk-relative producers) reaches every member's
// out. Returns the last step of the phase; `finals` (if given) receives the producers of the whole
// span.
PhaseResult addRingAllGather(const RankGroup& g, const PhaseSpan& span, int32_t gate, int32_t ownReady, bool reverse,
                             Schedule* s, const Producers* ownParts = nullptr, Producers* finals = nullptr);
// Reduce-scatter then all-gather, streamed per slice. channels == 2 (and n > 2): the first half
// of the span runs forward, the second half in reverse. `finals` as for addRingAllGather.
void addRingAllReduce(const RankGroup& g, const PhaseSpan& span, int32_t gate, bool divide, int32_t channels,
                      Schedule* s, Producers* finals = nullptr);

// ---- tree and recursive phases (tree_phases.cc).

// Double binary tree All-Reduce over the group's members: two complementary binary trees
// (a member interior in one is a leaf in the other) each carrying half the span, pipelined per
// slice; the roots divide when `divide`.
void addDoubleBinaryTreeAllReduce(const RankGroup& g, const PhaseSpan& span, int32_t gate, bool divide, Schedule* s);
// Recursive doubling / Rabenseifner All-Reduce over the group's members (any group size).
void addRecursiveDoublingAllReduce(const RankGroup& g, const PhaseSpan& span, int32_t gate, bool divide, Schedule* s);
void addRabenseifnerAllReduce(const RankGroup& g, const PhaseSpan& span, int32_t gate, bool divide, Schedule* s);

// ---- torus phase (torus.cc): All-Reduce over the group as a grid with `dims` (product = group
// size; member index = x + d0 * (y + d1 * z)).
void addTorusAllReduce(const RankGroup& g, const TorusDims& dims, const PhaseSpan& span, int32_t gate, bool divide,
                       Schedule* s);

}  // namespace coll
