// Reduction kernels: plain functions over spans of one data type. A portable implementation and
// SIMD versions (SSE2 / AVX2 / AVX-512) picked at run time; no -march=native. float16 and
// bfloat16 are accumulated in float32 within one call and rounded once, so the wire format stays
// the user's type.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collective/collective.h"

namespace coll::kernels {

// Semantics (identical at every SIMD level, bit for bit): integer sum/prod wrap; floating max/min
// propagate NaN (unlike C fmax: a NaN in any source makes the result NaN); between +0 and -0 the
// earlier source wins. Aliasing means the same pointer; partial overlap is not supported. An
// unsupported dtype/op (float8, avg) is a caller bug and aborts with a message.

// dst[i] = a[i] op b[i]. dst may alias a or b. op is sum, prod, max or min (not avg).
void reduce2(void* dst, const void* a, const void* b, size_t count, collDataType_t dtype, collRedOp_t op);

// dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[n-1][i], left to right (a fixed order, so all
// ranks that reduce the same inputs get bit-identical results). n >= 1; dst may alias srcs[0].
void reduceN(void* dst, const void* const* srcs, int n, size_t count, collDataType_t dtype, collRedOp_t op);

// dst[i] = src[i] / divisor (collAvg's final step): integers divide (truncating toward zero, as
// NCCL's integer average does), floating types divide in their accumulation type, rounded once.
// divisor 0 is treated as 1.
void divide(void* dst, const void* src, size_t count, collDataType_t dtype, uint64_t divisor);

// Name of the SIMD level in use ("avx512", "avx2", "sse2"); COLL_SIMD-free: chosen from CPUID.
const char* simdLevel();

// Conversions used by kernels and tests.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);   // round to nearest even
float bfloat16ToFloat(uint16_t b);
uint16_t floatToBfloat16(float f);  // round to nearest even, NaN stays NaN

}  // namespace coll::kernels
