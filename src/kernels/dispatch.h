// Kernel dispatch tables: one per SIMD level (portable/SSE2, AVX2, AVX-512), indexed by type and
// op, and the test hook that forces a level. Internal to src/kernels and its tests.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collective/collective.h"

namespace coll::kernels::detail {

using Reduce2Fn = void (*)(void* dst, const void* a, const void* b, size_t count);
using ReduceNFn = void (*)(void* dst, const void* const* srcs, int n, size_t count);
using DivideFn = void (*)(void* dst, const void* src, size_t count, uint64_t divisor);
using ScaleFn = void (*)(void* dst, const void* src, size_t count, double scalar);

// collSum..collMin; collAvg never reaches kernels.
constexpr int kNumKernelOps = 4;

struct KernelTable {
  const char* name;
  // Every (type, op) is filled at every level; float8 entries are the scalar code everywhere.
  Reduce2Fn reduce2[collNumTypes][kNumKernelOps];
  ReduceNFn reduceN[collNumTypes][kNumKernelOps];
  DivideFn divide[collNumTypes];
  ScaleFn scale[collNumTypes];
};

enum class SimdLevel { Sse2 = 0, Avx2 = 1, Avx512 = 2 };

// nullptr when that ISA file was not built for this architecture.
const KernelTable* portableTable();
const KernelTable* avx2Table();
const KernelTable* avx512Table();

// Whether this CPU (and build) can run the level.
bool simdLevelSupported(SimdLevel level);

// The level used from now on; returns false (and changes nothing) when unsupported. Not
// thread-safe against concurrent kernel calls: tests only.
bool setSimdLevelForTesting(SimdLevel level);
// Back to the CPUID choice.
void resetSimdLevelForTesting();

}  // namespace coll::kernels::detail
