// The bookkeeping of one ring of bytes between the producer and the consumer of a byte stream
// (the tcp, ucx, ib and shm rings, the in-process ring): offsets, free and readable bytes, spans
// up to the wrap, and the alignment rule. No I/O and no storage of its own.
#pragma once

#include <algorithm>
#include <cstdint>

#include "src/base/align.h"

namespace coll {

// Positions are the stream counters the users keep where they need them (atomics shared between
// threads, one counter per socket, a credit word the peer's HCA writes): bytes produced (head)
// or consumed (tail) since the stream began, only growing. Stream byte p sits at offset(p), and
// the ring holds the stream bytes [tail, tail + capacity). Differences of positions are modulo
// 2^64, so free and readable bytes stay right when the counters wrap; offsets stay continuous
// across that wrap only for a power-of-two capacity (2^64 bytes take decades of traffic).
//
// The alignment rule, which lets the executor reduce elements straight out of a ring: every
// capacity is a multiple of kCapacityGranule (so of every element size), and the executor starts
// each step at a stream position that is a multiple of kElementAlign, both ends skipping the
// same paddingTo() bytes. So no element straddles the wrap, and a position is aligned exactly
// when its offset is. At an aligned position writable() cuts the span to a multiple of
// kElementAlign, so a producer that fills the whole span stays aligned.
class StreamRing {
 public:
  static constexpr uint64_t kCapacityGranule = 64;
  static constexpr uint64_t kElementAlign = 8;

  StreamRing() = default;
  // `capacity`: a non-zero multiple of kCapacityGranule (capacityFor makes one). A power of two
  // turns offsets into a mask.
  explicit StreamRing(uint64_t capacity) : capacity_(capacity), mask_(isPow2(capacity) ? capacity - 1 : 0) {}

  // The smallest valid capacity that holds `bytes`.
  static constexpr uint64_t capacityFor(uint64_t bytes) {
    return bytes <= kCapacityGranule ? kCapacityGranule : roundUp(bytes, kCapacityGranule);
  }
  // Bytes to skip from `pos` to the next aligned stream position (0 when it is aligned).
  static constexpr uint64_t paddingTo(uint64_t pos) { return (kElementAlign - pos % kElementAlign) % kElementAlign; }
  // `n` cut to whole kElementAlign units when `pos` is aligned (the alignment rule).
  static constexpr uint64_t alignedSpan(uint64_t pos, uint64_t n) {
    return pos % kElementAlign == 0 ? n & ~(kElementAlign - 1) : n;
  }

  uint64_t capacity() const { return capacity_; }
  uint64_t offset(uint64_t pos) const { return mask_ != 0 ? pos & mask_ : pos % capacity_; }
  // Contiguous bytes from `pos` up to the ring's end.
  uint64_t toWrap(uint64_t pos) const { return capacity_ - offset(pos); }
  // The first stream position the producer may not write while the consumer is at `tail`.
  uint64_t limit(uint64_t tail) const { return tail + capacity_; }
  // Saturates at 0: a producer bounded by a remote consumer's credit may have run past it.
  uint64_t freeBytes(uint64_t head, uint64_t tail) const {
    const uint64_t used = head - tail;
    return used >= capacity_ ? 0 : capacity_ - used;
  }
  // The producer's contiguous span at `head` (free, up to the wrap, the alignment rule).
  uint64_t writable(uint64_t head, uint64_t tail) const {
    return alignedSpan(head, std::min(freeBytes(head, tail), toWrap(head)));
  }
  // The consumer's contiguous span at `tail` of the bytes produced up to `head`.
  uint64_t readable(uint64_t tail, uint64_t head) const { return std::min(head - tail, toWrap(tail)); }

 private:
  uint64_t capacity_ = 0;
  uint64_t mask_ = 0;  // capacity - 1 for a power of two, else 0 (offsets by division)
};

}  // namespace coll
