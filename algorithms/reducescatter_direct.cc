// Direct reduce-scatter over host-shared windows: every rank publishes the blocks its peers own,
// each owner sums its block reading the peers' windows in local-rank order, round by round.
#include "algorithms/algorithms.h"

#include <algorithm>
#include <vector>

#include "src/base/align.h"

namespace coll {

namespace {

constexpr uint64_t kAlign = 64;

}  // namespace

DirectReduceScatterShape directReduceScatterShape(uint64_t count, uint64_t elemBytes, uint64_t windowHalfBytes,
                                                  int32_t localSize) {
  DirectReduceScatterShape sh;
  const uint64_t peers = static_cast<uint64_t>(std::max(1, localSize - 1));
  const uint64_t es = std::max<uint64_t>(1, elemBytes);
  if (count == 0 || localSize <= 1) return sh;
  // Two buffers per peer so a rank copies round k+1 in while its peers still read round k.
  uint64_t region = windowHalfBytes / (2 * peers);
  region = region >= 4 * kAlign ? roundDown(region, kAlign) : roundDown(region, es);
  const uint64_t maxElems = std::max<uint64_t>(1, region / es);
  sh.rounds = ceilDiv(count, maxElems);
  sh.roundElems = ceilDiv(count, sh.rounds);
  const uint64_t bytes = sh.roundElems * es;
  sh.regionBytes = sh.rounds > 1 && bytes >= 4 * kAlign ? roundUp(bytes, kAlign) : bytes;
  sh.buffers = sh.rounds > 1 ? 2 : 1;
  sh.windowBytes = static_cast<uint64_t>(sh.buffers) * peers * sh.regionBytes;
  return sh;
}

void buildDirectReduceScatter(const Topology& topo, const CollArgs& args, const DirectOptions& options, Schedule* out) {
  Schedule& s = *out;
  s.begin("direct", args.dtype, args.op, static_cast<uint64_t>(topo.nranks));
  if (planAlone(topo, args.count, &s)) return;
  const uint64_t es = dataTypeSize(args.dtype);
  const uint64_t count = args.count;
  const int32_t l = topo.localSize();
  const int32_t me = topo.localRank();
  const int32_t self = topo.rank;
  const DirectReduceScatterShape sh = directReduceScatterShape(count, es, options.windowHalfBytes, l);
  if (sh.rounds == 0) return;  // count 0: nothing moves, nothing is published
  s.usesWindows = true;
  s.windowBytes = sh.windowBytes;
  // Round k's marker publishes in slot k % slots; see the comment on the markers below.
  const int32_t slots = sh.rounds > 1 ? 2 : 1;
  s.publishSlots = slots;
  const uint64_t blockBytes = count * es;
  const uint64_t bufferBytes = static_cast<uint64_t>(l - 1) * sh.regionBytes;
  // Owner `o` keeps the region for reader `r` at index r (skipping itself) of each buffer.
  auto regionOf = [](int32_t owner, int32_t reader) {
    return static_cast<uint64_t>(reader < owner ? reader : reader - 1);
  };
  auto blockOf = [&](int32_t local) { return static_cast<uint64_t>(topo.localRanks[static_cast<size_t>(local)]); };

  s.steps.reserve(static_cast<size_t>(sh.rounds) * (static_cast<size_t>(l) + 2));
  s.srcs.reserve(static_cast<size_t>(sh.rounds) * static_cast<size_t>(l));
  std::vector<BufRef> sources(static_cast<size_t>(l));
  // The window half was last used two calls back, when any local rank may have read any part of
  // it: the first round of copies into each buffer waits until every peer has finished that call
  // (one gate step touching no memory, so each copy carries one dependency, not one per peer).
  Step g;
  g.kind = StepKind::Copy;
  g.src = scratchAt(0);
  g.dst = scratchAt(0);
  g.count = 1;
  const int32_t gate = s.addStep(g);
  for (int32_t j = 0; j < l; ++j) {
    if (j != me) s.addDep(gate, peerCallDep(topo.localRanks[static_cast<size_t>(j)], 2));
  }
  int32_t prevMarker = -1, prevReduce = -1;
  for (uint64_t k = 0; k < sh.rounds; ++k) {
    const uint64_t first = k * sh.roundElems;
    const uint64_t n = std::min(sh.roundElems, count - first);
    const uint64_t buffer = (k % static_cast<uint64_t>(sh.buffers)) * bufferBytes;
    const int32_t firstCopy = static_cast<int32_t>(s.steps.size());
    for (int32_t t = 1; t < l; ++t) {
      // Readers in rotated order, so every rank's reader 0 is not served first by everybody.
      const int32_t reader = (me + t) % l;
      Step c;
      c.kind = StepKind::Copy;
      c.src = sendAt(blockOf(reader) * blockBytes + first * es);
      c.dst = windowAt(self, buffer + regionOf(me, reader) * sh.regionBytes);
      c.count = n;
      const int32_t ci = s.addStep(c);
      if (k < static_cast<uint64_t>(sh.buffers)) {
        s.addDep(ci, wholeStepDep(gate));
      } else {
        // The reader's marker of round k-1 comes after its reduction of round k-2, the last read
        // of this region.
        s.addDep(ci, peerMarkerDep(topo.localRanks[static_cast<size_t>(reader)],
                                   static_cast<int32_t>((k - 1) % static_cast<uint64_t>(slots)), k));
      }
    }
    // The round's marker: a step that touches no memory (scratch onto itself) and completes once
    // this rank's copies of round k and its reduction of round k-1 have. Its count is k+1, so a
    // marker's completed value is distinct from those of the rounds before it that published in
    // the same slot; a peer can be at most one round ahead of any rank waiting on it, so two
    // slots never show a value from a later round to a waiter. It publishes in one slice
    // (progress slots carry element counts) unless there are more rounds than slice elements,
    // and a partial value only delays a waiter, whose dependency is whole.
    Step m;
    m.kind = StepKind::Copy;
    m.src = scratchAt(0);
    m.dst = scratchAt(0);
    m.count = k + 1;
    m.publishSlot = static_cast<int32_t>(k % static_cast<uint64_t>(slots));
    const int32_t marker = s.addStep(m);
    for (int32_t i = firstCopy; i < marker; ++i) s.addDep(marker, wholeStepDep(i));
    if (prevReduce >= 0) s.addDep(marker, wholeStepDep(prevReduce));
    if (prevMarker >= 0) s.addDep(marker, wholeStepDep(prevMarker));

    // This rank's block, rows [first, first + n): its own input straight from the send buffer
    // first (in place, recv is that block, and reduceN lets dst alias only its first source),
    // then the peers' from their windows in local-rank order.
    sources[0] = sendAt(blockOf(me) * blockBytes + first * es);
    for (int32_t j = 0, i = 1; j < l; ++j) {
      if (j == me) continue;
      sources[static_cast<size_t>(i++)] =
          windowAt(topo.localRanks[static_cast<size_t>(j)], buffer + regionOf(j, me) * sh.regionBytes);
    }
    const int32_t red = s.addReduce(recvAt(first * es), sources.data(), static_cast<uint32_t>(l), n);
    for (int32_t j = 0; j < l; ++j) {
      if (j != me) {
        s.addDep(red, peerMarkerDep(topo.localRanks[static_cast<size_t>(j)],
                                    static_cast<int32_t>(k % static_cast<uint64_t>(slots)), k + 1));
      }
    }
    if (args.op == collAvg) {
      Step d;
      d.kind = StepKind::Divide;
      d.src = recvAt(first * es);
      d.dst = d.src;
      d.count = n;
      const int32_t di = s.addStep(d);
      s.addDep(di, stepDep(red));
    }
    prevMarker = marker;
    prevReduce = red;
  }
}

}  // namespace coll
