// Tests of StreamRing (transports/stream_ring.h), the ring bookkeeping every byte-stream
// connection shares: offsets, free and readable bytes, spans at the wrap, the alignment rule,
// and stream positions that wrap 2^64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "transports/stream_ring.h"

namespace coll {
namespace {

constexpr uint64_t kNearWrap = ~uint64_t{0} - 1000;  // 1001 bytes before the counters wrap

TEST(StreamRing, CapacityIsAMultipleOfTheGranule) {
  EXPECT_EQ(StreamRing::capacityFor(0), 64u);
  EXPECT_EQ(StreamRing::capacityFor(1), 64u);
  EXPECT_EQ(StreamRing::capacityFor(64), 64u);
  EXPECT_EQ(StreamRing::capacityFor(65), 128u);
  EXPECT_EQ(StreamRing::capacityFor(4096), 4096u);
  EXPECT_EQ(StreamRing::capacityFor(4097), 4160u);
  EXPECT_EQ(StreamRing(192).capacity(), 192u);
}

TEST(StreamRing, OffsetIsThePositionModuloTheCapacity) {
  for (uint64_t cap : {64u, 192u, 4096u, 4160u}) {
    const StreamRing ring(cap);
    for (uint64_t pos : {uint64_t{0}, uint64_t{1}, cap - 1, cap, cap + 5, 7 * cap + 63, kNearWrap}) {
      EXPECT_EQ(ring.offset(pos), pos % cap) << "capacity " << cap << ", position " << pos;
      EXPECT_EQ(ring.toWrap(pos), cap - pos % cap);
    }
  }
}

TEST(StreamRing, EmptyAndFull) {
  const StreamRing ring(256);
  EXPECT_EQ(ring.freeBytes(1000, 1000), 256u);
  EXPECT_EQ(ring.readable(1000, 1000), 0u);
  EXPECT_EQ(ring.limit(1000), 1256u);
  // Full: the producer is a whole ring ahead of the consumer.
  EXPECT_EQ(ring.freeBytes(1256, 1000), 0u);
  EXPECT_EQ(ring.writable(1256, 1000), 0u);
  EXPECT_EQ(ring.readable(1000, 1256), 256u - 1000 % 256);  // up to the wrap
  // A producer past a remote consumer's credit has no room, not a huge one.
  EXPECT_EQ(ring.freeBytes(1300, 1000), 0u);
  EXPECT_EQ(ring.writable(1300, 1000), 0u);
}

TEST(StreamRing, SpansStopAtTheWrap) {
  for (uint64_t cap : {256u, 192u}) {
    const StreamRing ring(cap);
    const uint64_t head = 3 * cap - 24;  // 24 bytes before the end of the ring
    EXPECT_EQ(ring.writable(head, head), 24u);
    EXPECT_EQ(ring.writable(head + 24, head), cap - 24);  // the rest, from the ring's start
    const uint64_t tail = 3 * cap - 16;
    EXPECT_EQ(ring.readable(tail, tail + 100), 16u);
    EXPECT_EQ(ring.readable(tail + 16, tail + 100), 84u);
    EXPECT_EQ(ring.offset(tail + 16), 0u);
  }
}

TEST(StreamRing, AlignedPositionsGetAlignedSpans) {
  const StreamRing ring(128);
  // Aligned head, 5 bytes free: too few for a whole aligned unit.
  EXPECT_EQ(ring.writable(136, 13), 0u);
  // Aligned head, 13 bytes free: cut to 8.
  EXPECT_EQ(ring.writable(136, 21), 8u);
  // An unaligned head (inside a step's padding or a byte stream) gets every free byte.
  EXPECT_EQ(ring.writable(131, 10), 7u);
  EXPECT_EQ(StreamRing::alignedSpan(8, 13), 8u);
  EXPECT_EQ(StreamRing::alignedSpan(9, 13), 13u);
  // Reading is never cut: the consumer takes what the producer wrote.
  EXPECT_EQ(ring.readable(8, 13), 5u);
}

TEST(StreamRing, AlignmentHoldsForEveryCapacityAndConsumer) {
  // For every valid capacity shape, aligned head and consumer behind it: the span and the offset
  // are multiples of the alignment, so an aligned element never straddles the wrap.
  for (uint64_t cap : {64u, 128u, 192u, 320u, 1024u}) {
    const StreamRing ring(cap);
    for (uint64_t head = 0; head < 3 * cap; head += StreamRing::kElementAlign) {
      EXPECT_EQ(ring.offset(head) % StreamRing::kElementAlign, 0u);
      const uint64_t lowest = head >= cap ? head - cap : 0;
      for (uint64_t tail = lowest; tail <= head; tail += 3) {
        EXPECT_EQ(ring.writable(head, tail) % StreamRing::kElementAlign, 0u)
            << "capacity " << cap << ", head " << head << ", tail " << tail;
      }
    }
  }
}

TEST(StreamRing, PaddingReachesTheNextAlignedPosition) {
  EXPECT_EQ(StreamRing::paddingTo(0), 0u);
  EXPECT_EQ(StreamRing::paddingTo(1), 7u);
  EXPECT_EQ(StreamRing::paddingTo(7), 1u);
  EXPECT_EQ(StreamRing::paddingTo(8), 0u);
  EXPECT_EQ(StreamRing::paddingTo(~uint64_t{0} - 2), 3u);  // to 2^64, that is position 0
}

TEST(StreamRing, PositionsWrapping2To64) {
  const StreamRing ring(4096);
  const uint64_t tail = ~uint64_t{0} - 15;  // 2^64 - 16
  const uint64_t head = tail + 64;          // 48 after the counters wrapped
  ASSERT_LT(head, tail);
  EXPECT_EQ(ring.freeBytes(head, tail), 4096u - 64);
  EXPECT_EQ(ring.readable(tail, head), 16u);  // 2^64 is a multiple of the ring: it wraps there too
  EXPECT_EQ(ring.offset(tail), 4080u);
  EXPECT_EQ(ring.offset(tail + 16), 0u);
  EXPECT_EQ(ring.readable(tail + 16, head), 48u);
  EXPECT_EQ(ring.writable(head, tail), 4096u - 64);
  EXPECT_EQ(ring.limit(tail), tail + 4096);  // modulo 2^64, as every position
  // Full across the wrap.
  EXPECT_EQ(ring.freeBytes(tail + 4096, tail), 0u);
  // Any capacity up to the wrap: differences stay right.
  const StreamRing odd(192);
  EXPECT_EQ(odd.freeBytes(kNearWrap, kNearWrap - 50), 142u);
  EXPECT_EQ(odd.readable(kNearWrap - 50, kNearWrap), std::min<uint64_t>(50, 192 - (kNearWrap - 50) % 192));
}

// A producer and a consumer moving uneven amounts through a ring: every byte arrives in order,
// across many wraps (and, for a power-of-two ring, across the 2^64 wrap of the counters).
void pumpThrough(uint64_t capacity, uint64_t start) {
  const StreamRing ring(capacity);
  std::vector<uint8_t> buffer(capacity);
  uint64_t head = start, tail = start;
  uint64_t written = 0, read = 0;
  const uint64_t total = 20 * capacity + 37;
  uint64_t step = 0;
  while (read < total) {
    ++step;
    const uint64_t want = std::min<uint64_t>(1 + step * 7 % 61, total - written);
    const uint64_t n = std::min(want, ring.writable(head, tail));
    for (uint64_t i = 0; i < n; ++i) buffer[ring.offset(head) + i] = static_cast<uint8_t>(written + i);
    head += n;
    written += n;
    const uint64_t take = std::min<uint64_t>(1 + step * 5 % 53, ring.readable(tail, head));
    for (uint64_t i = 0; i < take; ++i) {
      ASSERT_EQ(buffer[ring.offset(tail) + i], static_cast<uint8_t>(read + i)) << "byte " << read + i;
    }
    tail += take;
    read += take;
    ASSERT_LT(step, 100 * total) << "no progress";
  }
  EXPECT_EQ(head, tail);
}

TEST(StreamRing, BytesArriveInOrderAcrossWraps) {
  pumpThrough(256, 0);
  pumpThrough(192, 0);
  pumpThrough(192, kNearWrap - 20 * 192 * 2);  // near 2^64, without reaching it
  pumpThrough(256, kNearWrap);                 // across 2^64
}

}  // namespace
}  // namespace coll
