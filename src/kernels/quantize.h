// 4-bit block quantization of gradients: the wire format and the CPU kernels (runtime
// dispatch AVX-512 / AVX2 / portable, all bit-identical). CUDA kernels with the same results live
// in src/kernels/cuda/ and are declared in quantize_cuda.h.
//
// Format (docs/ARCHITECTURE.md "4-bit format"): symmetric int4, levels -7..+7 as 4-bit two's
// complement (-8 never written), two values per byte (element 2i of a block in the low nibble of
// byte i, 2i+1 in the high nibble), one scale per block of B elements (B = 32, 64, 128 or 256)
// stored as bfloat16 (little-endian). A quantized vector is a sequence of self-contained block
// records, so it can be cut, sent and consumed block by block:
//   record = [B/2 bytes of nibbles][2 bytes bf16 scale]      (B/2 + 2 bytes: 4.25 bits/elem at B=64)
// The last block of a vector whose count is not a multiple of B is a full record whose missing
// elements are zero nibbles. quantizedBytes(n, B) = ceil(n/B) * (B/2 + 2).
// Per block: amax = max |x|; scale = bf16(amax / 7) rounded to nearest even; if the rounded scale
// makes amax/scale > 7 the clamp below takes care of it. q = clamp(rint(x / scale), -7, 7) with
// IEEE float32 division and round-half-even (nearest), or q = clamp(floor(x / scale + u), -7, 7)
// with u in [0, 1) from Philox4x32-10 (stochastic). Dequantized value: q * float(scale).
// Special blocks: all zero -> scale 0, nibbles 0 (dequantizes to exact zeros); any NaN or +-Inf in
// the block -> scale = bf16 NaN (0x7FC0), nibbles 0, so the whole block dequantizes to NaN and a
// loss scaler sees the overflow on every rank (as a float32 All-Reduce would propagate it).
// Edge cases, identical on every CPU level and on CUDA: a block whose nonzero amax is so small
// that amax / 7 rounds to a zero bf16 is stored like an all-zero block (its residual keeps all of
// x); a nibble 0x8 (never written) decodes as -8; any non-finite scale read (bytes from a peer)
// makes the block NaN; NaN results of dequantize / dequantize-accumulate are written as the one
// quiet NaN 0x7FC00000 (bf16 0x7FC0, half 0x7E00), whatever NaN payload went in. Results assume
// the default floating-point environment (round to nearest, no flush-to-zero).
//
// Stochastic rounding counter (reproducible whatever the sharding): Philox4x32-10 with key
// (lo32(seed), hi32(seed)) and counter (lo32(e / 4), hi32(e / 4), rank, lo32(step)), where e is
// the element's index in the whole tensor (firstElement + i); output word e % 4 gives
// u = (word >> 8) * 2^-24.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collective/collective.h"

namespace coll::kernels {

constexpr int kQuantBits = 4;
constexpr int kQuantMaxLevel = 7;

struct QuantParams {
  int blockSize = 64;       // 32, 64, 128 or 256
  bool stochastic = false;  // false: round to nearest even
  uint64_t seed = 0;        // stochastic rounding only
  uint64_t step = 0;
  uint32_t rank = 0;
};

bool validQuantBlockSize(int blockSize);
size_t quantizedBytes(size_t count, int blockSize);
// Bytes of one block record: B/2 + 2.
constexpr size_t quantRecordBytes(int blockSize) { return static_cast<size_t>(blockSize) / 2 + 2; }

// Quantizes count elements of `in` (collFloat32, collFloat16 or collBfloat16). firstElement is the
// index of in[0] in the whole tensor (stochastic counter); it must be a multiple of blockSize so
// blocks align with the tensor's. With `residual` (count float32, error feedback), quantizes
// in + residual and stores in + residual - dequantized back into residual (NaN/Inf blocks leave
// the residual of that block at zero).
void quantize4(void* out, const void* in, collDataType_t dtype, size_t count, const QuantParams& params,
               uint64_t firstElement, float* residual);
// Dequantizes into `out` of type collFloat32, collFloat16 or collBfloat16 (converted once from the
// float32 value q * scale, round to nearest even).
void dequantize4(void* out, collDataType_t dtype, const void* q, size_t count, int blockSize);
// acc[i] += q[i] * scale (float32): the receiving side of the compressed reduce-scatter.
void dequantizeAccumulate4(float* acc, const void* q, size_t count, int blockSize);

// Philox4x32-10 (exposed for tests and the CUDA kernels' cross-check).
void philox4x32(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]);

// Which implementation the dispatch picked ("avx512", "avx2", "portable"), and a test hook forcing
// one (false when unsupported here). Not thread-safe against concurrent kernel calls.
const char* quantKernelLevel();
bool forceQuantKernelLevel(const char* level);

namespace detail {

// One implementation level of the kernels above (internal: dispatch and tests). The public entry
// points validate arguments; a level gets valid input.
struct QuantKernelTable {
  const char* name;
  void (*quantize)(void* out, const void* in, collDataType_t dtype, size_t count, const QuantParams& params,
                   uint64_t firstElement, float* residual);
  void (*dequantize)(void* out, collDataType_t dtype, const void* q, size_t count, int blockSize);
  void (*dequantizeAccumulate)(float* acc, const void* q, size_t count, int blockSize);
};

// nullptr where that ISA file was not built for this architecture (CPU support is checked apart).
const QuantKernelTable* quantPortableTable();
const QuantKernelTable* quantAvx2Table();
const QuantKernelTable* quantAvx512Table();

// The reference code for one block record of n <= params.blockSize elements (the SIMD levels run
// a partial last block through these): writes the whole record (nibbles past n are zero, then
// the scale); firstElement is in[0]'s index in the whole tensor.
void quantizeBlockPortable(uint8_t* record, const void* in, collDataType_t dtype, size_t n, const QuantParams& params,
                           uint64_t firstElement, float* residual);
void dequantizeBlockPortable(void* out, collDataType_t dtype, const uint8_t* record, int blockSize, size_t n);
void dequantizeAccumulateBlockPortable(float* acc, const uint8_t* record, int blockSize, size_t n);

}  // namespace detail

}  // namespace coll::kernels
