// 4-bit quantization kernels for AVX-512 F/BW/VL/DQ + F16C (this file alone is compiled with those
// flags; see CMakeLists.txt). Bit-identical to the portable reference in quantize.cc.
#include "src/kernels/quantize.h"
#include "src/kernels/quantize_impl.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && defined(__F16C__)
// GCC 12's AVX-512 headers self-initialise their "undefined" vectors (__Y = __Y), which
// -Wmaybe-uninitialized reports once inlined (GCC bug 105593); the code here reads no such value.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "src/kernels/reduce.h"

namespace coll::kernels::detail {
namespace {

template <collDataType_t DT>
inline __m512 load16(const void* in, size_t i) {
  if constexpr (DT == collFloat32) {
    return _mm512_loadu_ps(static_cast<const float*>(in) + i);
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(in) + i));
    if constexpr (DT == collFloat16) {
      return _mm512_cvtph_ps(h);
    } else {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
  }
}

template <collDataType_t DT>
inline void store16(void* out, size_t i, __m512 v) {
  if constexpr (DT == collFloat32) {
    _mm512_storeu_ps(static_cast<float*>(out) + i, v);
  } else {
    __m256i h;
    if constexpr (DT == collFloat16) {
      h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else {
      // Round to nearest even on the bits; the only NaN reaching here is 0x7FC00000 -> 0x7FC0.
      const __m512i x = _mm512_castps_si512(v);
      const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
      const __m512i r = _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb);
      h = _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(out) + i), h);
  }
}

constexpr size_t kUniformBatch = 128;

// Uniforms in [0, 1) for the 128 elements e0 .. e0+127 (e0 % 4 == 0), in element order, into u.
// 32 Philox instances as four independent vectors of 8 (one instance per 64-bit lane: the 64-bit
// counter add carries into the high word by itself, and _mm512_mul_epu32 reads only the low
// dword, so the high dwords may hold garbage between rounds). Four chains hide the multiply
// latency. Lane j of group h runs instance 8h + {0,4,1,5,2,6,3,7}[j], so the final
// blend/unpack leaves the words in element order.
inline void uniforms128(uint64_t e0, uint32_t k0, uint32_t k1, uint32_t rank, uint32_t step, float* u) {
  constexpr int kGroups = 4;
  const __m512i perm = _mm512_setr_epi64(0, 4, 1, 5, 2, 6, 3, 7);
  const uint64_t g = e0 / 4;
  __m512i c0[kGroups], c1[kGroups], c2[kGroups], c3[kGroups];
#pragma GCC unroll 4
  for (int h = 0; h < kGroups; ++h) {
    const __m512i ctr = _mm512_add_epi64(_mm512_set1_epi64(static_cast<long long>(g + 8u * h)), perm);
    c0[h] = ctr;
    c1[h] = _mm512_srli_epi64(ctr, 32);
    c2[h] = _mm512_set1_epi32(static_cast<int>(rank));
    c3[h] = _mm512_set1_epi32(static_cast<int>(step));
  }
  const __m512i m0 = _mm512_set1_epi64(0xD2511F53u);
  const __m512i m1 = _mm512_set1_epi64(0xCD9E8D57u);
  // Fully unrolled: the 16 state vectors must live in registers, not on the stack.
#pragma GCC unroll 10
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const __m512i key0 = _mm512_set1_epi32(static_cast<int>(k0));
    const __m512i key1 = _mm512_set1_epi32(static_cast<int>(k1));
#pragma GCC unroll 4
    for (int h = 0; h < kGroups; ++h) {
      const __m512i p0 = _mm512_mul_epu32(c0[h], m0);
      const __m512i p1 = _mm512_mul_epu32(c2[h], m1);
      c0[h] = _mm512_ternarylogic_epi32(_mm512_srli_epi64(p1, 32), c1[h], key0, 0x96);
      c2[h] = _mm512_ternarylogic_epi32(_mm512_srli_epi64(p0, 32), c3[h], key1, 0x96);
      c1[h] = p1;
      c3[h] = p0;
    }
  }
  const __m512 scale = _mm512_set1_ps(0x1p-24f);
#pragma GCC unroll 4
  for (int h = 0; h < kGroups; ++h) {
    // a: words 0,1 of each instance side by side; b: words 2,3.
    const __m512i a = _mm512_mask_blend_epi32(0xAAAA, c0[h], _mm512_slli_epi64(c1[h], 32));
    const __m512i b = _mm512_mask_blend_epi32(0xAAAA, c2[h], _mm512_slli_epi64(c3[h], 32));
    const __m512i lo = _mm512_unpacklo_epi64(a, b);  // instances 8h+0..3
    const __m512i hi = _mm512_unpackhi_epi64(a, b);  // instances 8h+4..7
    _mm512_store_ps(u + 32 * h, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(lo, 8)), scale));
    _mm512_store_ps(u + 32 * h + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(hi, 8)), scale));
  }
}

// Whole blocks only; the caller sends a partial last block to the reference.
template <collDataType_t DT, bool Stochastic, bool Residual>
void quantizeBlocks(uint8_t* out, const void* in, size_t nBlocks, const QuantParams& p, uint64_t firstElement,
                    float* residual) {
  alignas(64) float xb[256];
  alignas(64) float ub[kUniformBatch];
  size_t ubFor = ~size_t{0};  // region offset of the batch in ub
  const size_t bs = static_cast<size_t>(p.blockSize);
  const size_t rec = quantRecordBytes(p.blockSize);
  const size_t nv = bs / 16;
  const uint32_t k0 = static_cast<uint32_t>(p.seed), k1 = static_cast<uint32_t>(p.seed >> 32);
  const uint32_t step = static_cast<uint32_t>(p.step);
  const __m512i absMask = _mm512_set1_epi32(0x7fffffff);
  const __m512 lo7 = _mm512_set1_ps(-7.0f), hi7 = _mm512_set1_ps(7.0f);
  const __m512i nibMask = _mm512_set1_epi32(0xf);
  for (size_t b = 0; b < nBlocks; ++b) {
    const size_t base = b * bs;
    __m512i amax = _mm512_setzero_si512();
    for (size_t v = 0; v < nv; ++v) {
      __m512 x = load16<DT>(in, base + 16 * v);
      if constexpr (Residual) x = _mm512_add_ps(x, _mm512_loadu_ps(residual + base + 16 * v));
      _mm512_store_ps(xb + 16 * v, x);
      amax = _mm512_max_epu32(amax, _mm512_and_si512(_mm512_castps_si512(x), absMask));
    }
    const uint32_t amaxBits = _mm512_reduce_max_epu32(amax);
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
    const __m512 s = _mm512_set1_ps(bfloat16ToFloat(sb));
    for (size_t v = 0; v < nv; ++v) {
      const __m512 x = _mm512_load_ps(xb + 16 * v);
      __m512 r = _mm512_div_ps(x, s);
      if constexpr (Stochastic) {
        // Special blocks skip their uniforms, so batches are made on demand, not at boundaries.
        const size_t at = (base + 16 * v) % kUniformBatch;
        const size_t batch = base + 16 * v - at;
        if (batch != ubFor) {
          uniforms128(firstElement + batch, k0, k1, p.rank, step, ub);
          ubFor = batch;
        }
        r = _mm512_roundscale_ps(_mm512_add_ps(r, _mm512_load_ps(ub + at)), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
      } else {
        r = _mm512_roundscale_ps(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      }
      r = _mm512_min_ps(_mm512_max_ps(r, lo7), hi7);
      const __m512i q = _mm512_cvtps_epi32(r);
      const __m512i t = _mm512_and_si512(q, nibMask);
      const __m512i packed = _mm512_or_si512(t, _mm512_srli_epi64(t, 28));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(nib + 8 * v), _mm512_cvtepi64_epi8(packed));
      if constexpr (Residual) {
        _mm512_storeu_ps(residual + base + 16 * v, _mm512_sub_ps(x, _mm512_mul_ps(_mm512_cvtepi32_ps(q), s)));
      }
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

// The block's 16 possible values, level(k) * scale for nibble k (two's complement), or all NaN.
inline __m512 blockTable(uint16_t sb) {
  if ((sb & 0x7f80u) == 0x7f80u) return _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000));
  const __m512 levels = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1);
  return _mm512_mul_ps(levels, _mm512_set1_ps(bfloat16ToFloat(sb)));
}

inline __m512 decode16(const uint8_t* nib, __m512 table) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(nib));
  const __m128i m = _mm_set1_epi8(0x0f);
  const __m128i lo = _mm_and_si128(bytes, m);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), m);
  const __m512i idx = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi));
  return _mm512_permutexvar_ps(idx, table);
}

template <collDataType_t DT>
void dequantizeT(void* out, const void* q, size_t count, int blockSize) {
  const auto* qb = static_cast<const uint8_t*>(q);
  const size_t bs = static_cast<size_t>(blockSize);
  const size_t rec = quantRecordBytes(blockSize);
  const size_t full = count / bs;
  for (size_t b = 0; b < full; ++b) {
    const __m512 table = blockTable(loadScale(qb + b * rec + bs / 2));
    const size_t base = b * bs;
    for (size_t v = 0; v < bs / 16; ++v) store16<DT>(out, base + 16 * v, decode16(qb + b * rec + 8 * v, table));
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

void dequantizeAccumulate(float* acc, const void* q, size_t count, int blockSize) {
  const auto* qb = static_cast<const uint8_t*>(q);
  const size_t bs = static_cast<size_t>(blockSize);
  const size_t rec = quantRecordBytes(blockSize);
  const size_t full = count / bs;
  const __m512 nan = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000));
  for (size_t b = 0; b < full; ++b) {
    const __m512 table = blockTable(loadScale(qb + b * rec + bs / 2));
    const size_t base = b * bs;
    for (size_t v = 0; v < bs / 16; ++v) {
      float* a = acc + base + 16 * v;
      const __m512 r = _mm512_add_ps(_mm512_loadu_ps(a), decode16(qb + b * rec + 8 * v, table));
      _mm512_storeu_ps(a, _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(r, r, _CMP_UNORD_Q), nan));
    }
  }
  const size_t rest = count - full * bs;
  if (rest != 0) {
    const size_t start = full * bs;
    dequantizeAccumulateBlockPortable(acc + start, qb + full * rec, blockSize, rest);
  }
}

}  // namespace

const QuantKernelTable* quantAvx512Table() {
  static const QuantKernelTable table{"avx512", quantize, dequantize, dequantizeAccumulate};
  return &table;
}

}  // namespace coll::kernels::detail
#else
namespace coll::kernels::detail {
const QuantKernelTable* quantAvx512Table() { return nullptr; }
}  // namespace coll::kernels::detail
#endif
