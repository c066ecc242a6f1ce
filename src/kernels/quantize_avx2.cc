// 4-bit quantization kernels for AVX2 + FMA + F16C (this file alone is compiled with those flags;
// see CMakeLists.txt). Bit-identical to the portable reference in quantize.cc.
#include "src/kernels/quantize.h"
#include "src/kernels/quantize_impl.h"

#if defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>

#include <cstring>

#include "src/kernels/reduce.h"

namespace coll::kernels::detail {
namespace {

template <collDataType_t DT>
inline __m256 load8(const void* in, size_t i) {
  if constexpr (DT == collFloat32) {
    return _mm256_loadu_ps(static_cast<const float*>(in) + i);
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(in) + i));
    if constexpr (DT == collFloat16) {
      return _mm256_cvtph_ps(h);
    } else {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
  }
}

template <collDataType_t DT>
inline void store8(void* out, size_t i, __m256 v) {
  if constexpr (DT == collFloat32) {
    _mm256_storeu_ps(static_cast<float*>(out) + i, v);
  } else {
    __m128i h;
    if constexpr (DT == collFloat16) {
      h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else {
      // Round to nearest even on the bits; the only NaN reaching here is 0x7FC00000 -> 0x7FC0.
      const __m256i x = _mm256_castps_si256(v);
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
      const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
      h = _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(out) + i), h);
  }
}

constexpr size_t kUniformBatch = 64;

// Uniforms in [0, 1) for the 64 elements e0 .. e0+63 (e0 % 4 == 0), in element order, into u.
// 16 Philox instances as four independent vectors of 4 (one instance per 64-bit lane: the 64-bit
// counter add carries by itself, and _mm256_mul_epu32 reads only the low dword, so high dwords
// may hold garbage between rounds). Lane j of group h runs instance 4h + {0,2,1,3}[j], so the
// final blend/unpack leaves the words in element order.
inline void uniforms64(uint64_t e0, uint32_t k0, uint32_t k1, uint32_t rank, uint32_t step, float* u) {
  constexpr int kGroups = 4;
  const __m256i perm = _mm256_setr_epi64x(0, 2, 1, 3);
  const uint64_t g = e0 / 4;
  __m256i c0[kGroups], c1[kGroups], c2[kGroups], c3[kGroups];
#pragma GCC unroll 4
  for (int h = 0; h < kGroups; ++h) {
    const __m256i ctr = _mm256_add_epi64(_mm256_set1_epi64x(static_cast<long long>(g + 4u * h)), perm);
    c0[h] = ctr;
    c1[h] = _mm256_srli_epi64(ctr, 32);
    c2[h] = _mm256_set1_epi32(static_cast<int>(rank));
    c3[h] = _mm256_set1_epi32(static_cast<int>(step));
  }
  const __m256i m0 = _mm256_set1_epi64x(0xD2511F53u);
  const __m256i m1 = _mm256_set1_epi64x(0xCD9E8D57u);
  // Fully unrolled: the 16 state vectors must live in registers, not on the stack.
#pragma GCC unroll 10
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const __m256i key0 = _mm256_set1_epi32(static_cast<int>(k0));
    const __m256i key1 = _mm256_set1_epi32(static_cast<int>(k1));
#pragma GCC unroll 4
    for (int h = 0; h < kGroups; ++h) {
      const __m256i p0 = _mm256_mul_epu32(c0[h], m0);
      const __m256i p1 = _mm256_mul_epu32(c2[h], m1);
      c0[h] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), c1[h]), key0);
      c2[h] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), c3[h]), key1);
      c1[h] = p1;
      c3[h] = p0;
    }
  }
  const __m256 scale = _mm256_set1_ps(0x1p-24f);
#pragma GCC unroll 4
  for (int h = 0; h < kGroups; ++h) {
    const __m256i a = _mm256_blend_epi32(c0[h], _mm256_slli_epi64(c1[h], 32), 0xAA);
    const __m256i b = _mm256_blend_epi32(c2[h], _mm256_slli_epi64(c3[h], 32), 0xAA);
    const __m256i lo = _mm256_unpacklo_epi64(a, b);  // instances 4h+0, 4h+1
    const __m256i hi = _mm256_unpackhi_epi64(a, b);  // instances 4h+2, 4h+3
    _mm256_store_ps(u + 16 * h, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(lo, 8)), scale));
    _mm256_store_ps(u + 16 * h + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(hi, 8)), scale));
  }
}

inline uint32_t hmaxEpu32(__m256i v) {
  __m128i m = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4e));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xb1));
  return static_cast<uint32_t>(_mm_cvtsi128_si32(m));
}

// 32 levels (int32, -7..7, element order across q[0..3]) to 16 packed bytes.
inline void pack32(uint8_t* dst, const __m256i q[4]) {
  const __m256i a = _mm256_packs_epi32(q[0], q[1]);
  const __m256i b = _mm256_packs_epi32(q[2], q[3]);
  __m256i c = _mm256_packs_epi16(a, b);
  c = _mm256_permutevar8x32_epi32(c, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  const __m256i lo = _mm256_and_si256(c, _mm256_set1_epi16(0x000f));
  const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(c, 4), _mm256_set1_epi16(0x00f0));
  const __m256i w = _mm256_or_si256(lo, hi);
  const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi16(w, w), 0x08);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm256_castsi256_si128(p));
}

// Whole blocks only; the caller sends a partial last block to the reference.
template <collDataType_t DT, bool Stochastic, bool Residual>
void quantizeBlocks(uint8_t* out, const void* in, size_t nBlocks, const QuantParams& p, uint64_t firstElement,
                    float* residual) {
  alignas(32) float xb[256];
  alignas(32) float ub[kUniformBatch];
  size_t ubFor = ~size_t{0};  // region offset of the batch in ub
  const size_t bs = static_cast<size_t>(p.blockSize);
  const size_t rec = quantRecordBytes(p.blockSize);
  const size_t nv = bs / 8;
  const uint32_t k0 = static_cast<uint32_t>(p.seed), k1 = static_cast<uint32_t>(p.seed >> 32);
  const uint32_t step = static_cast<uint32_t>(p.step);
  const __m256i absMask = _mm256_set1_epi32(0x7fffffff);
  const __m256 lo7 = _mm256_set1_ps(-7.0f), hi7 = _mm256_set1_ps(7.0f);
  for (size_t b = 0; b < nBlocks; ++b) {
    const size_t base = b * bs;
    __m256i amax = _mm256_setzero_si256();
    for (size_t v = 0; v < nv; ++v) {
      __m256 x = load8<DT>(in, base + 8 * v);
      if constexpr (Residual) x = _mm256_add_ps(x, _mm256_loadu_ps(residual + base + 8 * v));
      _mm256_store_ps(xb + 8 * v, x);
      amax = _mm256_max_epu32(amax, _mm256_and_si256(_mm256_castps_si256(x), absMask));
    }
    const uint32_t amaxBits = hmaxEpu32(amax);
    uint8_t* nib = out + b * rec;
    uint8_t* scale = nib + bs / 2;
    if (amaxBits >= 0x7f800000u) {
      std::memset(nib, 0, bs / 2);
      storeScale(scale, 0x7fc0u);
      if constexpr (Residual) std::memset(residual + base, 0, bs * sizeof(float));
      continue;
    }
    const uint16_t sb = floatToBfloat16(bitsFloat(amaxBits) / 7.0f);
    storeScale(scale, sb);
    if (sb == 0) {
      std::memset(nib, 0, bs / 2);
      if constexpr (Residual) std::memcpy(residual + base, xb, bs * sizeof(float));
      continue;
    }
    const __m256 s = _mm256_set1_ps(bfloat16ToFloat(sb));
    for (size_t v0 = 0; v0 < nv; v0 += 4) {
      // Special blocks skip their uniforms, so batches are made on demand, not at boundaries.
      const size_t at = (base + 8 * v0) % kUniformBatch;
      if constexpr (Stochastic) {
        const size_t batch = base + 8 * v0 - at;
        if (batch != ubFor) {
          uniforms64(firstElement + batch, k0, k1, p.rank, step, ub);
          ubFor = batch;
        }
      }
      __m256i q[4];
      for (size_t k = 0; k < 4; ++k) {
        const __m256 x = _mm256_load_ps(xb + 8 * (v0 + k));
        __m256 r = _mm256_div_ps(x, s);
        if constexpr (Stochastic) {
          r = _mm256_round_ps(_mm256_add_ps(r, _mm256_load_ps(ub + at + 8 * k)),
                              _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
        } else {
          r = _mm256_round_ps(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        }
        r = _mm256_min_ps(_mm256_max_ps(r, lo7), hi7);
        q[k] = _mm256_cvtps_epi32(r);
        if constexpr (Residual) {
          _mm256_storeu_ps(residual + base + 8 * (v0 + k),
                           _mm256_sub_ps(x, _mm256_mul_ps(_mm256_cvtepi32_ps(q[k]), s)));
        }
      }
      pack32(nib + 4 * v0, q);
    }
  }
}

template <collDataType_t DT, bool Stochastic, bool Residual>
void quantizeT(void* out, const void* in, size_t count, const QuantParams& p, uint64_t firstElement, float* residual) {
  auto* o = static_cast<uint8_t*>(out);
  const size_t bs = static_cast<size_t>(p.blockSize);
  const size_t full = count / bs;
  quantizeBlocks<DT, Stochastic, Residual>(o, in, full, p, firstElement, residual);
  const size_t rest = count - full * bs;
  if (rest != 0) {
    const size_t start = full * bs;
    const size_t elemSize = DT == collFloat32 ? 4 : 2;
    quantizeBlockPortable(o + full * quantRecordBytes(p.blockSize), static_cast<const uint8_t*>(in) + start * elemSize,
                          DT, rest, p, firstElement + start, Residual ? residual + start : nullptr);
  }
}

template <collDataType_t DT>
void quantizeDt(void* out, const void* in, size_t count, const QuantParams& p, uint64_t firstElement, float* residual) {
  if (p.stochastic) {
    if (residual) return quantizeT<DT, true, true>(out, in, count, p, firstElement, residual);
    return quantizeT<DT, true, false>(out, in, count, p, firstElement, residual);
  }
  if (residual) return quantizeT<DT, false, true>(out, in, count, p, firstElement, residual);
  return quantizeT<DT, false, false>(out, in, count, p, firstElement, residual);
}

void quantize(void* out, const void* in, collDataType_t dtype, size_t count, const QuantParams& p,
              uint64_t firstElement, float* residual) {
  switch (dtype) {
    case collFloat16: return quantizeDt<collFloat16>(out, in, count, p, firstElement, residual);
    case collBfloat16: return quantizeDt<collBfloat16>(out, in, count, p, firstElement, residual);
    default: return quantizeDt<collFloat32>(out, in, count, p, firstElement, residual);
  }
}

// 16 elements from 8 packed bytes: level(k) * scale, the same product as the reference.
inline void decode16(const uint8_t* nib, __m256 s, __m256& v0, __m256& v1) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(nib));
  const __m128i m = _mm_set1_epi8(0x0f);
  const __m128i lo = _mm_and_si128(bytes, m);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), m);
  const __m128i il = _mm_unpacklo_epi8(lo, hi);
  const __m256i i0 = _mm256_srai_epi32(_mm256_slli_epi32(_mm256_cvtepu8_epi32(il), 28), 28);
  const __m256i i1 = _mm256_srai_epi32(_mm256_slli_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(il, 8)), 28), 28);
  v0 = _mm256_mul_ps(_mm256_cvtepi32_ps(i0), s);
  v1 = _mm256_mul_ps(_mm256_cvtepi32_ps(i1), s);
}

inline bool scaleFinite(uint16_t sb) { return (sb & 0x7f80u) != 0x7f80u; }

template <collDataType_t DT>
void dequantizeT(void* out, const void* q, size_t count, int blockSize) {
  const auto* qb = static_cast<const uint8_t*>(q);
  const size_t bs = static_cast<size_t>(blockSize);
  const size_t rec = quantRecordBytes(blockSize);
  const size_t full = count / bs;
  const __m256 nan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));
  for (size_t b = 0; b < full; ++b) {
    const uint16_t sb = loadScale(qb + b * rec + bs / 2);
    const size_t base = b * bs;
    if (!scaleFinite(sb)) {
      for (size_t v = 0; v < bs / 8; ++v) store8<DT>(out, base + 8 * v, nan);
      continue;
    }
    const __m256 s = _mm256_set1_ps(bfloat16ToFloat(sb));
    for (size_t v = 0; v < bs / 16; ++v) {
      __m256 a, c;
      decode16(qb + b * rec + 8 * v, s, a, c);
      store8<DT>(out, base + 16 * v, a);
      store8<DT>(out, base + 16 * v + 8, c);
    }
  }
  const size_t rest = count - full * bs;
  if (rest != 0) {
    const size_t start = full * bs;
    const size_t elemSize = DT == collFloat32 ? 4 : 2;
    dequantizeBlockPortable(static_cast<uint8_t*>(out) + start * elemSize, DT, qb + full * rec, blockSize, rest);
  }
}

void dequantize(void* out, collDataType_t dtype, const void* q, size_t count, int blockSize) {
  switch (dtype) {
    case collFloat16: return dequantizeT<collFloat16>(out, q, count, blockSize);
    case collBfloat16: return dequantizeT<collBfloat16>(out, q, count, blockSize);
    default: return dequantizeT<collFloat32>(out, q, count, blockSize);
  }
}

inline void accumulate8(float* a, __m256 v, __m256 nan) {
  const __m256 r = _mm256_add_ps(_mm256_loadu_ps(a), v);
  _mm256_storeu_ps(a, _mm256_blendv_ps(r, nan, _mm256_cmp_ps(r, r, _CMP_UNORD_Q)));
}

void dequantizeAccumulate(float* acc, const void* q, size_t count, int blockSize) {
  const auto* qb = static_cast<const uint8_t*>(q);
  const size_t bs = static_cast<size_t>(blockSize);
  const size_t rec = quantRecordBytes(blockSize);
  const size_t full = count / bs;
  const __m256 nan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));
  for (size_t b = 0; b < full; ++b) {
    const uint16_t sb = loadScale(qb + b * rec + bs / 2);
    const size_t base = b * bs;
    if (!scaleFinite(sb)) {
      for (size_t v = 0; v < bs / 8; ++v) _mm256_storeu_ps(acc + base + 8 * v, nan);
      continue;
    }
    const __m256 s = _mm256_set1_ps(bfloat16ToFloat(sb));
    for (size_t v = 0; v < bs / 16; ++v) {
      __m256 a, c;
      decode16(qb + b * rec + 8 * v, s, a, c);
      accumulate8(acc + base + 16 * v, a, nan);
      accumulate8(acc + base + 16 * v + 8, c, nan);
    }
  }
  const size_t rest = count - full * bs;
  if (rest != 0) {
    const size_t start = full * bs;
    dequantizeAccumulateBlockPortable(acc + start, qb + full * rec, blockSize, rest);
  }
}

}  // namespace

const QuantKernelTable* quantAvx2Table() {
  static const QuantKernelTable table{"avx2", quantize, dequantize, dequantizeAccumulate};
  return &table;
}

}  // namespace coll::kernels::detail
#else
namespace coll::kernels::detail {
const QuantKernelTable* quantAvx2Table() { return nullptr; }
}  // namespace coll::kernels::detail
#endif
