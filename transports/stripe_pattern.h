// Which lane (a queue pair or socket of a connection) carries which fixed-size chunk of a byte
// stream, when the lanes belong to rails (NICs) of different speeds: one deterministic rule that
// both ends compute from the same agreed inputs, so a receiver knows where every byte lands
// without a header. No I/O and no storage beyond the pattern.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

namespace coll {

// Integer weights in 1..kMaxStripeWeight from rail rates (any unit; 0 = unknown), reduced by their
// common divisor: equal rates give all 1 (plain round-robin), 100 and 25 give 4 and 1. An
// unknown rate counts as the fastest one, so a rail is never starved for lack of a number.
constexpr uint32_t kMaxStripeWeight = 8;
inline std::vector<uint32_t> stripeWeights(std::span<const uint64_t> rates) {
  const uint64_t fastest = rates.empty() ? 0 : *std::max_element(rates.begin(), rates.end());
  std::vector<uint32_t> w(rates.size(), 1);
  if (fastest == 0) return w;
  uint32_t g = 0;
  for (size_t r = 0; r < rates.size(); ++r) {
    const uint64_t rate = rates[r] == 0 ? fastest : rates[r];
    w[r] = static_cast<uint32_t>(
        std::clamp<uint64_t>((rate * kMaxStripeWeight + fastest / 2) / fastest, 1, kMaxStripeWeight));
    g = std::gcd(g, w[r]);
  }
  for (uint32_t& x : w) x /= g;
  return w;
}

// The chunk -> lane map: chunk i travels on lane[i % size()]. Lanes are numbered rail-major
// (lane = rail * lanesPerRail + k). One cycle gives rail r weight[r] * lanesPerRail chunks, each
// of its lanes weight[r], spread by smooth weighted round-robin so no rail waits behind a burst
// of another's chunks. With one rail it is 0, 1, ..., lanesPerRail - 1: plain round-robin.
struct StripePattern {
  std::vector<uint32_t> lane;
  // Chunks from position p to the next chunk of the same lane (cyclically; >= 1): the receiver's
  // jump from the end of one of a lane's chunks to the start of its next one.
  std::vector<uint32_t> gap;
  std::vector<uint32_t> first;  // by lane: position of its first chunk

  size_t size() const { return lane.size(); }
  uint32_t laneOf(uint64_t chunk) const { return lane[chunk % lane.size()]; }
  // The first chunk after `chunk` that travels on the same lane.
  uint64_t nextOnLane(uint64_t chunk) const { return chunk + gap[chunk % lane.size()]; }

  StripePattern(std::span<const uint32_t> weights, uint32_t lanesPerRail) {
    const uint32_t rails = static_cast<uint32_t>(weights.size());
    uint64_t total = 0;
    for (uint32_t w : weights) total += w;
    std::vector<int64_t> current(rails, 0);
    std::vector<uint32_t> taken(rails, 0);
    for (uint64_t i = 0; i < total * lanesPerRail; ++i) {
      uint32_t best = 0;
      for (uint32_t r = 0; r < rails; ++r) {
        current[r] += weights[r];
        if (current[r] > current[best]) best = r;
      }
      current[best] -= static_cast<int64_t>(total);
      lane.push_back(best * lanesPerRail + taken[best]++ % lanesPerRail);
    }
    const size_t n = lane.size();
    gap.assign(n, static_cast<uint32_t>(n));
    first.assign(static_cast<size_t>(rails) * lanesPerRail, 0);
    for (size_t p = n; p-- > 0;) first[lane[p]] = static_cast<uint32_t>(p);
    for (size_t p = 0; p < n; ++p) {
      for (size_t d = 1; d <= n; ++d) {
        if (lane[(p + d) % n] == lane[p]) {
          gap[p] = static_cast<uint32_t>(d);
          break;
        }
      }
    }
  }
};

// The chunk -> lane map of a connection over time: a pattern from chunk 0, and a new one from an
// agreed chunk on whenever the lanes change (a rail lost). Each segment's pattern numbers its own
// lanes; `laneIds` maps them to the connection's. Positions before a switch keep the old map, so
// both ends still agree on where every earlier byte went.
class StripeSchedule {
 public:
  static constexpr uint64_t kNone = UINT64_MAX;

  void switchAt(uint64_t startChunk, StripePattern pattern, std::vector<uint32_t> laneIds) {
    Segment s{startChunk, std::move(pattern), std::move(laneIds), {}};
    uint32_t maxLane = 0;
    for (uint32_t id : s.laneIds) maxLane = std::max(maxLane, id);
    s.local.assign(maxLane + 1, kAbsent);
    for (uint32_t l = 0; l < s.laneIds.size(); ++l) s.local[s.laneIds[l]] = l;
    segments_.push_back(std::move(s));
  }
  bool empty() const { return segments_.empty(); }
  const StripePattern& first() const { return segments_.front().pattern; }

  uint32_t laneOf(uint64_t chunk) const {
    const Segment& s = segmentOf(chunk);
    return s.laneIds[s.pattern.laneOf(chunk - s.start)];
  }
  // The next chunk after `chunk` on the same lane; kNone when a switch dropped that lane.
  uint64_t nextOnLane(uint64_t chunk) const {
    const size_t k = indexOf(chunk);
    const Segment& s = segments_[k];
    const uint64_t next = s.start + s.pattern.nextOnLane(chunk - s.start);
    if (k + 1 < segments_.size() && next >= segments_[k + 1].start) {
      return firstFrom(k + 1, segments_[k + 1].start, s.laneIds[s.pattern.laneOf(chunk - s.start)]);
    }
    return next;
  }
  // The first chunk at or after `chunk` that travels on `lane`; kNone when none does.
  uint64_t firstOnLaneFrom(uint64_t chunk, uint32_t lane) const { return firstFrom(indexOf(chunk), chunk, lane); }

 private:
  static constexpr uint32_t kAbsent = UINT32_MAX;
  struct Segment {
    uint64_t start;
    StripePattern pattern;
    std::vector<uint32_t> laneIds;
    std::vector<uint32_t> local;  // connection lane -> this segment's lane, kAbsent when not in it
  };
  size_t indexOf(uint64_t chunk) const {
    size_t k = segments_.size() - 1;
    while (k > 0 && chunk < segments_[k].start) --k;
    return k;
  }
  const Segment& segmentOf(uint64_t chunk) const { return segments_[indexOf(chunk)]; }
  uint64_t firstFrom(size_t k, uint64_t chunk, uint32_t lane) const {
    for (; k < segments_.size(); ++k) {
      const Segment& s = segments_[k];
      chunk = std::max(chunk, s.start);
      const uint32_t local = lane < s.local.size() ? s.local[lane] : kAbsent;
      if (local != kAbsent) {
        const size_t n = s.pattern.size();
        const uint64_t rel = chunk - s.start;
        size_t d = 0;
        while (s.pattern.lane[(rel + d) % n] != local) ++d;
        const uint64_t found = chunk + d;
        if (k + 1 >= segments_.size() || found < segments_[k + 1].start) return found;
      }
    }
    return kNone;
  }
  std::vector<Segment> segments_;
};

}  // namespace coll
