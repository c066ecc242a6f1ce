// Helpers shared by the quantization kernels' files (portable, AVX2, AVX-512). Internal linkage
// on purpose: each file is compiled for its own ISA, and an inline function with external linkage
// would let the linker keep one ISA's copy for all of them.
#pragma once

#include <cstdint>
#include <cstring>

namespace coll::kernels::detail {
namespace {

constexpr uint16_t kNanScale = 0x7fc0u;          // bf16 quiet NaN: the scale of a NaN/Inf block
constexpr uint32_t kCanonicalNan = 0x7fc00000u;  // the one NaN the kernels write

inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// A record's bf16 scale, little-endian, at any alignment.
inline void storeScale(uint8_t* p, uint16_t bits) {
  p[0] = static_cast<uint8_t>(bits & 0xffu);
  p[1] = static_cast<uint8_t>(bits >> 8);
}
inline uint16_t loadScale(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

}  // namespace
}  // namespace coll::kernels::detail
