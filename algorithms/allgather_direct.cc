// Direct all-gather over host-shared windows: every rank publishes its block once in its window,
// every rank copies each peer's block straight out of the peer's window, round by round.
#include "algorithms/algorithms.h"

#include <algorithm>

#include "src/base/align.h"

namespace coll {

namespace {

constexpr uint64_t kAlign = 64;

}  // namespace

DirectAllGatherShape directAllGatherShape(uint64_t count, uint64_t elemBytes, uint64_t windowHalfBytes) {
  DirectAllGatherShape sh;
  const uint64_t es = std::max<uint64_t>(1, elemBytes);
  if (count == 0) return sh;
  if (count * es <= windowHalfBytes) {
    sh.rounds = 1;
    sh.roundElems = count;
    sh.regionBytes = count * es;
    sh.buffers = 1;
    sh.windowBytes = sh.regionBytes;
    return sh;
  }
  // Two buffers so a rank publishes round k+1 while its peers still read round k.
  uint64_t region = windowHalfBytes / 2;
  region = region >= 4 * kAlign ? roundDown(region, kAlign) : roundDown(region, es);
  const uint64_t maxElems = std::max<uint64_t>(1, region / es);
  sh.rounds = ceilDiv(count, maxElems);
  sh.roundElems = ceilDiv(count, sh.rounds);
  const uint64_t bytes = sh.roundElems * es;
  sh.regionBytes = bytes >= 4 * kAlign ? roundUp(bytes, kAlign) : bytes;
  sh.buffers = 2;
  sh.windowBytes = 2 * sh.regionBytes;
  return sh;
}

void buildDirectAllGather(const Topology& topo, const CollArgs& args, const DirectOptions& options, Schedule* out) {
  Schedule& s = *out;
  s.begin("direct", args.dtype, collSum);
  if (planAlone(topo, args.count, &s)) return;
  const uint64_t es = dataTypeSize(args.dtype);
  const uint64_t count = args.count;
  const int32_t l = topo.localSize();
  const int32_t me = topo.localRank();
  const int32_t self = topo.rank;
  const DirectAllGatherShape sh = directAllGatherShape(count, es, options.windowHalfBytes);
  if (sh.rounds == 0) return;  // count 0: nothing moves, nothing is published
  s.usesWindows = true;
  s.windowBytes = sh.windowBytes;
  const int32_t slots = sh.rounds > 1 ? 2 : 1;
  s.publishSlots = slots;
  const uint64_t blockBytes = count * es;
  auto peerOf = [&](int32_t local) { return topo.localRanks[static_cast<size_t>(local)]; };
  auto blockOf = [&](int32_t local) { return static_cast<uint64_t>(peerOf(local)); };

  s.steps.reserve(2 + static_cast<size_t>(sh.rounds) * (static_cast<size_t>(l) + 1));
  // The window half was last used two calls back, when any local rank may have read any part of
  // it: the first copy into each buffer waits until every peer has finished that call (one gate
  // step touching no memory, so each copy carries one dependency, not one per peer).
  Step g;
  g.kind = StepKind::Copy;
  g.src = scratchAt(0);
  g.dst = scratchAt(0);
  g.count = 1;
  const int32_t gate = s.addStep(g);
  for (int32_t j = 0; j < l; ++j) {
    if (j != me) s.addDep(gate, peerCallDep(peerOf(j), 2));
  }
  int32_t prevMarker = -1, prevFirstRead = -1, prevEndRead = -1;
  for (uint64_t k = 0; k < sh.rounds; ++k) {
    const uint64_t first = k * sh.roundElems;
    const uint64_t n = std::min(sh.roundElems, count - first);
    const uint64_t buffer = (k % static_cast<uint64_t>(sh.buffers)) * sh.regionBytes;
    Step c;
    c.kind = StepKind::Copy;
    c.src = sendAt(first * es);
    c.dst = windowAt(self, buffer);
    c.count = n;
    const int32_t ci = s.addStep(c);
    if (k < static_cast<uint64_t>(sh.buffers)) {
      s.addDep(ci, wholeStepDep(gate));
    } else {
      // Every peer reads this buffer: its marker of round k-1 comes after its reads of round
      // k-2, the last reads of this buffer.
      for (int32_t j = 0; j < l; ++j) {
        if (j != me)
          s.addDep(ci, peerMarkerDep(peerOf(j), static_cast<int32_t>((k - 1) % static_cast<uint64_t>(slots)), k));
      }
    }
    // The round's marker: touches no memory and completes once this rank's copy of round k and
    // its reads of round k-1 have. Its count k+1 keeps a slot's values increasing, and a peer is
    // at most one round ahead of a rank waiting on it (its copy of round k+2 waits for this
    // rank's marker k+1), so two slots suffice; see buildDirectReduceScatter.
    Step m;
    m.kind = StepKind::Copy;
    m.src = scratchAt(0);
    m.dst = scratchAt(0);
    m.count = k + 1;
    m.publishSlot = static_cast<int32_t>(k % static_cast<uint64_t>(slots));
    const int32_t marker = s.addStep(m);
    s.addDep(marker, wholeStepDep(ci));
    for (int32_t i = prevFirstRead; i >= 0 && i < prevEndRead; ++i) s.addDep(marker, wholeStepDep(i));
    if (prevMarker >= 0) s.addDep(marker, wholeStepDep(prevMarker));
    if (k == 0) {
      // The own block needs no window; it goes after the first marker so peers are not kept
      // waiting for it. In place it already is recv block `me` and the executor skips the copy.
      Step own;
      own.kind = StepKind::Copy;
      own.src = sendAt(0);
      own.dst = recvAt(blockOf(me) * blockBytes);
      own.count = count;
      s.addStep(own);
    }

    // Peers in rotated order, so no window is read by everybody at once.
    prevFirstRead = static_cast<int32_t>(s.steps.size());
    for (int32_t t = 1; t < l; ++t) {
      const int32_t j = (me + t) % l;
      Step rd;
      rd.kind = StepKind::Copy;
      rd.src = windowAt(peerOf(j), buffer);
      rd.dst = recvAt(blockOf(j) * blockBytes + first * es);
      rd.count = n;
      const int32_t ri = s.addStep(rd);
      s.addDep(ri, peerMarkerDep(peerOf(j), static_cast<int32_t>(k % static_cast<uint64_t>(slots)), k + 1));
    }
    prevEndRead = static_cast<int32_t>(s.steps.size());
    prevMarker = marker;
  }
}

}  // namespace coll
