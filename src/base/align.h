// Integer alignment one-liners (rounding to a multiple, powers of two) for every layer that sizes
// buffers, rings, stripes and slices, so each rule is written once.
#pragma once

#include <bit>
#include <cstdint>

namespace coll {

// v / d rounded up (d non-zero).
constexpr uint64_t ceilDiv(uint64_t v, uint64_t d) { return (v + d - 1) / d; }

// The smallest multiple of `to` (non-zero) that is not below `v`.
constexpr uint64_t roundUp(uint64_t v, uint64_t to) { return ceilDiv(v, to) * to; }

// The largest multiple of `to` (non-zero) that is not above `v`.
constexpr uint64_t roundDown(uint64_t v, uint64_t to) { return v / to * to; }

constexpr bool isPow2(uint64_t v) { return std::has_single_bit(v); }

// The largest power of two not above `v`; 1 for 0, so a size derived from it is never zero.
constexpr uint64_t floorPow2(uint64_t v) { return v == 0 ? 1 : std::bit_floor(v); }

}  // namespace coll
