// Reduction kernels: plain functions over spans of one data type. A portable implementation and
// SIMD versions (SSE2 / AVX2 / AVX-512) picked at run time; no -march=native. float16, bfloat16 and
// float8 are accumulated in float32 within one call and rounded once, so the wire format stays the
// user's type.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collective/collective.h"

namespace coll::kernels {

// Semantics (identical at every SIMD level, bit for bit): integer sum/prod wrap; floating max/min
// propagate NaN (unlike C fmax: a NaN in any source makes the result NaN); between +0 and -0 the
// earlier source wins. Aliasing means the same pointer; partial overlap is not supported. Every
// collDataType_t is supported, float8 included (scalar code at every level). An out-of-range
// dtype or op (collAvg included: callers map it to sum + divide) is a caller bug and aborts with a
// message; callers validate user input before it gets here.
//
// float8 (OCP 8-bit floating point v1.0) rounding is to nearest-even, with these overflow rules:
// - E4M3 has no infinity: results beyond +-448 saturate to +-448, infinities included
//   ("satfinite", as CUDA's __NV_SATFINITE); NaN (S.1111.111) stays NaN.
// - E5M2 keeps IEEE overflow: a result of magnitude >= 61440 (max finite 57344 plus half an ulp)
//   becomes +-inf; +-inf stays inf and NaN stays NaN.

// dst[i] = a[i] op b[i]. dst may alias a or b. op is sum, prod, max or min (not avg). No pointer
// needs element alignment (a transport may apply received bytes from any address).
void reduce2(void* dst, const void* a, const void* b, size_t count, collDataType_t dtype, collRedOp_t op);

// dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[n-1][i], left to right (a fixed order, so all
// ranks that reduce the same inputs get bit-identical results). n >= 1; dst may alias srcs[0].
void reduceN(void* dst, const void* const* srcs, int n, size_t count, collDataType_t dtype, collRedOp_t op);

// dst[i] = src[i] / divisor (collAvg's final step): integers divide (truncating toward zero, as
// NCCL's integer average does), floating types divide in their accumulation type, rounded once.
// divisor 0 is treated as 1.
void divide(void* dst, const void* src, size_t count, collDataType_t dtype, uint64_t divisor);

// dst[i] = (float) src[i] for float32, float16 and bfloat16 (exact conversions).
void convertToFloat(float* dst, const void* src, collDataType_t dtype, size_t count);

// dst[i] = src[i] * scalar (PreMulSum's scaling); dst may alias src.
// - Floating types multiply in their accumulation type with the scalar rounded to it first:
//   float32 for float16/bfloat16/float8 (the product is then rounded once to the storage type),
//   float32 for float32, float64 for float64.
// - Integers: as NCCL's integer PreMulSum, the scalar is first converted to the element type
//   (truncated toward zero, clamped to the type's range, NaN -> 0), then the product is formed in
//   64 bits and truncated, i.e. it wraps like integer prod.
void scale(void* dst, const void* src, size_t count, collDataType_t dtype, double scalar);

// The value of one element of `dtype` at `scalar` (any alignment), as a double: PreMulSum's
// scalar. False for an unknown dtype.
bool scalarToDouble(const void* scalar, collDataType_t dtype, double* out);

// Name of the SIMD level in use ("avx512", "avx2", "sse2"); COLL_SIMD-free: chosen from CPUID.
const char* simdLevel();

// Conversions used by kernels and tests.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);  // round to nearest even
float bfloat16ToFloat(uint16_t b);
uint16_t floatToBfloat16(float f);  // round to nearest even, NaN stays NaN
float fp8e4m3ToFloat(uint8_t b);    // exact; 0x7f/0xff -> NaN
uint8_t floatToFp8e4m3(float f);    // nearest even; saturates to +-448 (inf too); NaN -> S.1111.111
float fp8e5m2ToFloat(uint8_t b);    // exact; signalling NaNs come back quiet
uint8_t floatToFp8e5m2(float f);    // nearest even; >= 61440 in magnitude -> inf; NaN stays NaN

}  // namespace coll::kernels
