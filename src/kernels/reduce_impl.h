// Reduction kernel templates, compiled once per SIMD level: the including file defines
// COLL_KERNEL_ISA (a namespace name), COLL_VEC_BYTES (vector width) and COLL_F16C_WIDTH (0 or floats
// per F16C conversion) before including this. No include guard on purpose.
//
// Everything here lives in coll::kernels::<ISA>, so the same template compiled under different -m
// flags never merges across files (an inline function built with AVX-512 must not be picked by the
// linker for the portable path).
//
// Semantics shared by the scalar and vector code (they must agree bit for bit, the tests check):
// - Integers: sum and prod wrap (computed unsigned); max/min compare in the type's signedness.
// - Floating max/min propagate NaN: if either operand is NaN the result is NaN (the later operand's
//   NaN when both are). This keeps a NaN in one rank's gradient visible instead of hiding it, which
//   differs from C fmax. Between +0 and -0 the earlier operand wins.
// - float16/bfloat16/float8 are widened to float32, all sources are combined in float32, and the
//   result is rounded once to nearest-even. NaN results stay NaN (quiet). Half conversions are
//   exact and match F16C (VCVTPH2PS / VCVTPS2PH with round-to-nearest-even) bit for bit.
// - float8 (OCP 8-bit floating point v1.0) overflow: E4M3 has no infinity, so it saturates
//   ("satfinite", as NVIDIA's __NV_SATFINITE and NCCL's fp8 types): anything beyond +-448,
//   infinities included, becomes +-448; NaN is S.1111.111. E5M2 is IEEE-like and keeps IEEE
//   overflow: results at or beyond 61440 (max 57344 plus half an ulp) become +-inf, and inf stays
//   inf, so an inf in one rank's input reads the same after a reduction as after a copy.
// - dst may alias a source exactly (same pointer); partial overlap is not supported.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "collective/collective.h"
#include "src/kernels/dispatch.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace coll::kernels::COLL_KERNEL_ISA {

struct F16Tag {};
struct BF16Tag {};
struct F8E4M3Tag {};
struct F8E5M2Tag {};

// ---- scalar conversions (bit manipulation, independent of MXCSR) ---------------------------------

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

inline float halfToFloatS(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) {  // inf / NaN; a signalling NaN comes back quiet, as F16C does
    return bitsFloat(sign | 0x7f800000u | (mant << 13) | (mant != 0 ? 0x00400000u : 0u));
  }
  if (exp == 0) {
    if (mant == 0) return bitsFloat(sign);
    // Subnormal half: mant * 2^-24 is exactly representable as a normal float.
    return bitsFloat(sign | floatBits(static_cast<float>(mant) * 0x1p-24f));
  }
  return bitsFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline uint16_t floatToHalfS(float f) {
  const uint32_t x = floatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (ax >= 0x38800000u) {                                              // normal half
    const uint32_t r = ax - 0x38000000u;
    return static_cast<uint16_t>(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
  }
  if (ax <= 0x33000000u) return static_cast<uint16_t>(sign);  // <= 2^-25: ties to even zero
  // Subnormal half: value / 2^-24 = m >> (126 - e), rounded to nearest even. A carry into bit 10
  // yields the smallest normal encoding, which is right.
  const uint32_t e = ax >> 23;
  const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
  const uint32_t s = 126u - e;
  uint32_t q = m >> s;
  const uint32_t rem = m & ((1u << s) - 1u);
  const uint32_t halfway = 1u << (s - 1u);
  if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

inline float bf16ToFloatS(uint16_t b) { return bitsFloat(static_cast<uint32_t>(b) << 16); }

inline uint16_t floatToBf16S(float f) {
  const uint32_t x = floatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// float8: scalar only (kW == 0 below). Decoding builds the float's bits; encoding rounds the float's
// mantissa to the target width to nearest-even, the same trick as floatToHalfS.
inline float fp8e4m3ToFloatS(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xfu;
  const uint32_t mant = b & 0x7u;
  if (exp == 0xf && mant == 0x7) return bitsFloat(sign | 0x7fc00000u);                   // the only NaN
  if (exp == 0) return bitsFloat(sign | floatBits(static_cast<float>(mant) * 0x1p-9f));  // subnormal or 0
  return bitsFloat(sign | ((exp + 120u) << 23) | (mant << 20));
}

inline float fp8e5m2ToFloatS(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 2) & 0x1fu;
  const uint32_t mant = b & 0x3u;
  if (exp == 0x1f) {  // inf / NaN; a signalling NaN comes back quiet, as for half
    return bitsFloat(sign | 0x7f800000u | (mant << 21) | (mant != 0 ? 0x00400000u : 0u));
  }
  if (exp == 0) return bitsFloat(sign | floatBits(static_cast<float>(mant) * 0x1p-16f));
  return bitsFloat(sign | ((exp + 112u) << 23) | (mant << 21));
}

// |x| (as float bits ax, finite, below the format's overflow threshold) to a sign-less float8 code:
// mantBits stored mantissa bits, bias the format's exponent bias. Normal results carry into the
// exponent field on round-up, which is the right encoding.
template <uint32_t mantBits, uint32_t bias>
inline uint32_t fp8RoundMagnitude(uint32_t ax) {
  constexpr uint32_t drop = 23u - mantBits;
  constexpr uint32_t minNormal = (127u + 1u - bias) << 23;                            // 2^(1-bias)
  constexpr int minSubExp = 1 - static_cast<int>(bias) - static_cast<int>(mantBits);  // log2 of the smallest subnormal
  constexpr uint32_t halfMinSub = static_cast<uint32_t>(127 + minSubExp - 1) << 23;
  if (ax >= minNormal) {
    const uint32_t r = ax - ((127u - bias) << 23);
    return (r + ((1u << (drop - 1u)) - 1u) + ((r >> drop) & 1u)) >> drop;
  }
  if (ax <= halfMinSub) return 0;  // half the smallest subnormal ties to the even zero
  // Subnormal: value / 2^minSubExp = m >> s, rounded to nearest even; 1 <= s <= 24 here.
  const uint32_t e = ax >> 23;
  const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
  const uint32_t s = static_cast<uint32_t>(150 + minSubExp) - e;
  uint32_t q = m >> s;
  const uint32_t rem = m & ((1u << s) - 1u);
  const uint32_t halfway = 1u << (s - 1u);
  if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
  return q;
}

inline uint8_t floatToFp8e4m3S(float f) {
  const uint32_t x = floatBits(f);
  const uint32_t sign = (x >> 24) & 0x80u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);
  if (ax >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7eu);  // >= 448, inf included: saturate
  return static_cast<uint8_t>(sign | fp8RoundMagnitude<3, 7>(ax));
}

inline uint8_t floatToFp8e5m2S(float f) {
  const uint32_t x = floatBits(f);
  const uint32_t sign = (x >> 24) & 0x80u;
  const uint32_t ax = x & 0x7fffffffu;
  // NaN stays NaN (quiet bit forced, so a payload below the kept bits cannot turn into inf).
  if (ax > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7eu | ((ax >> 21) & 1u));
  if (ax >= 0x47700000u) return static_cast<uint8_t>(sign | 0x7cu);  // >= 61440 rounds to inf
  return static_cast<uint8_t>(sign | fp8RoundMagnitude<2, 15>(ax));
}

// ---- element traits: storage type S, accumulation type A ------------------------------------------

template <class T>
struct Elem {
  using S = T;
  using A = T;
  static A load(S s) { return s; }
  static S store(A a) { return a; }
};
template <>
struct Elem<F16Tag> {
  using S = uint16_t;
  using A = float;
  static A load(S s) { return halfToFloatS(s); }
  static S store(A a) { return floatToHalfS(a); }
};
template <>
struct Elem<BF16Tag> {
  using S = uint16_t;
  using A = float;
  static A load(S s) { return bf16ToFloatS(s); }
  static S store(A a) { return floatToBf16S(a); }
};

template <>
struct Elem<F8E4M3Tag> {
  using S = uint8_t;
  using A = float;
  static A load(S s) { return fp8e4m3ToFloatS(s); }
  static S store(A a) { return floatToFp8e4m3S(a); }
};
template <>
struct Elem<F8E5M2Tag> {
  using S = uint8_t;
  using A = float;
  static A load(S s) { return fp8e5m2ToFloatS(s); }
  static S store(A a) { return floatToFp8e5m2S(a); }
};

template <int Op, class A>
inline A scalarOp(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    if constexpr (Op == collSum) return static_cast<A>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    else if constexpr (Op == collProd) return static_cast<A>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    else if constexpr (Op == collMax) return b > a ? b : a;
    else return b < a ? b : a;
  } else {
    if constexpr (Op == collSum) return a + b;
    else if constexpr (Op == collProd) return a * b;
    else if constexpr (Op == collMax) return b != b ? b : (b > a ? b : a);
    else return b != b ? b : (b < a ? b : a);
  }
}

// ---- vector traits (GCC vector extensions; the -m flags of the including file pick the ISA) ------

template <class E, size_t Bytes = COLL_VEC_BYTES>
struct VecType {
  typedef E type __attribute__((vector_size(Bytes)));
};
template <class E>
using Vec = typename VecType<E>::type;

template <int Op, class V>
inline V vecOp(V a, V b) {
  using E = std::remove_cvref_t<decltype(a[0])>;
  if constexpr (std::is_integral_v<E>) {
    using UV = Vec<std::make_unsigned_t<E>>;
    if constexpr (Op == collSum) return (V)((UV)a + (UV)b);
    else if constexpr (Op == collProd) return (V)((UV)a * (UV)b);
    else if constexpr (Op == collMax) return b > a ? b : a;
    else return b < a ? b : a;
  } else {
    if constexpr (Op == collSum) return a + b;
    else if constexpr (Op == collProd) return a * b;
    else if constexpr (Op == collMax) {
      V r = b > a ? b : a;
      return b != b ? b : r;
    } else {
      V r = b < a ? b : a;
      return b != b ? b : r;
    }
  }
}

// kW == 0: no vector path for this type at this level (scalar loop only).
template <class T>
struct VecTraits {
  static constexpr size_t kW = COLL_VEC_BYTES / sizeof(T);
  using V = Vec<T>;
  static V load(const T* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static void store(T* p, V v) { std::memcpy(p, &v, sizeof v); }
  static V splat(T a) { return V{} + a; }
};

template <>
struct VecTraits<BF16Tag> {
  static constexpr size_t kW = COLL_VEC_BYTES / sizeof(float);
  using V = Vec<float>;
  using VU = Vec<uint32_t>;
  using VH = typename VecType<uint16_t, COLL_VEC_BYTES / 2>::type;
  // GCC splits __builtin_convertvector u16->u32 into halves; the widening intrinsics are one
  // instruction each where the ISA has them.
  static V load(const uint16_t* p) {
#if COLL_VEC_BYTES == 64 && defined(__AVX512F__)
    // maskz forms: GCC 12's unmasked ones trip -Wmaybe-uninitialized in its own headers.
    return (V)((VU)_mm512_maskz_cvtepu16_epi32(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))) << 16);
#elif COLL_VEC_BYTES == 32 && defined(__AVX2__)
    return (V)_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16);
#else
    VH h;
    std::memcpy(&h, p, sizeof h);
    return (V)(__builtin_convertvector(h, VU) << 16);
#endif
  }
  static void store(uint16_t* p, V v) {
    const VU x = (VU)v;
    const VU rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    const VU quiet = (x >> 16) | 0x40u;
    const VU r = (x & 0x7fffffffu) > 0x7f800000u ? quiet : rounded;
#if COLL_VEC_BYTES == 64 && defined(__AVX512BW__)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_maskz_cvtepi32_epi16(0xffff, (__m512i)r));
#elif COLL_VEC_BYTES == 32 && defined(__AVX2__)
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32((__m256i)r, (__m256i)r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
#else
    const VH h = __builtin_convertvector(r, VH);
    std::memcpy(p, &h, sizeof h);
#endif
  }
  static V splat(float a) { return V{} + a; }
};

template <>
struct VecTraits<F16Tag> {
  static constexpr size_t kW = COLL_F16C_WIDTH;
#if COLL_F16C_WIDTH == 8
  using V = __m256;
  static V load(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static void store(uint16_t* p, V v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  static V splat(float a) { return _mm256_set1_ps(a); }
#elif COLL_F16C_WIDTH == 16
  using V = __m512;
  // The maskz forms: GCC 12's unmasked ones trip -Wmaybe-uninitialized in its own headers.
  static V load(const uint16_t* p) {
    return _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static void store(uint16_t* p, V v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_maskz_cvtps_ph(0xffff, v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static V splat(float a) { return _mm512_set1_ps(a); }
#else
  using V = float;  // unused: kW == 0
  static V load(const uint16_t*) { return 0; }
  static void store(uint16_t*, V) {}
  static V splat(float a) { return a; }
#endif
};

// float8 stays scalar at every level: bytes are converted one at a time anyway.
template <class Tag>
struct ScalarOnlyTraits {
  static constexpr size_t kW = 0;
  using V = float;
  static V load(const uint8_t*) { return 0; }
  static void store(uint8_t*, V) {}
  static V splat(float a) { return a; }
};
template <>
struct VecTraits<F8E4M3Tag> : ScalarOnlyTraits<F8E4M3Tag> {};
template <>
struct VecTraits<F8E5M2Tag> : ScalarOnlyTraits<F8E5M2Tag> {};

// ---- kernels -------------------------------------------------------------------------------------

// An element at any address (memcpy: a plain move where the target allows it). reduce2's sources
// need not be aligned: a transport may hand received bytes at an odd address (UCX's eager messages).
template <class S>
inline S loadUnaligned(const S* p) {
  S s;
  std::memcpy(&s, p, sizeof s);
  return s;
}

template <class T, int Op>
void reduce2Kernel(void* dstv, const void* av, const void* bv, size_t count) {
  using E = Elem<T>;
  using S = typename E::S;
  using A = typename E::A;
  S* dst = static_cast<S*>(dstv);
  const S* a = static_cast<const S*>(av);
  const S* b = static_cast<const S*>(bv);
  size_t i = 0;
  using VT = VecTraits<T>;
  if constexpr (VT::kW > 0) {
    constexpr size_t W = VT::kW;
    for (; i + 4 * W <= count; i += 4 * W) {
      auto x0 = vecOp<Op>(VT::load(a + i), VT::load(b + i));
      auto x1 = vecOp<Op>(VT::load(a + i + W), VT::load(b + i + W));
      auto x2 = vecOp<Op>(VT::load(a + i + 2 * W), VT::load(b + i + 2 * W));
      auto x3 = vecOp<Op>(VT::load(a + i + 3 * W), VT::load(b + i + 3 * W));
      VT::store(dst + i, x0);
      VT::store(dst + i + W, x1);
      VT::store(dst + i + 2 * W, x2);
      VT::store(dst + i + 3 * W, x3);
    }
    for (; i + W <= count; i += W) VT::store(dst + i, vecOp<Op>(VT::load(a + i), VT::load(b + i)));
  }
  for (; i < count; ++i) {
    const S r = E::store(scalarOp<Op, A>(E::load(loadUnaligned(a + i)), E::load(loadUnaligned(b + i))));
    std::memcpy(dst + i, &r, sizeof r);
  }
}

template <class T, int Op>
void reduceNKernel(void* dstv, const void* const* srcs, int n, size_t count) {
  using E = Elem<T>;
  using S = typename E::S;
  using A = typename E::A;
  S* dst = static_cast<S*>(dstv);
  const S* s0 = static_cast<const S*>(srcs[0]);
  if (n <= 1) {  // a plain copy: no conversion round trip, so even signalling NaNs pass unchanged
    if (dst != s0 && count > 0) std::memmove(dst, s0, count * sizeof(S));
    return;
  }
  size_t i = 0;
  using VT = VecTraits<T>;
  if constexpr (VT::kW > 0) {
    constexpr size_t W = VT::kW;
    for (; i + 4 * W <= count; i += 4 * W) {
      auto x0 = VT::load(s0 + i);
      auto x1 = VT::load(s0 + i + W);
      auto x2 = VT::load(s0 + i + 2 * W);
      auto x3 = VT::load(s0 + i + 3 * W);
      for (int k = 1; k < n; ++k) {
        const S* p = static_cast<const S*>(srcs[k]) + i;
        x0 = vecOp<Op>(x0, VT::load(p));
        x1 = vecOp<Op>(x1, VT::load(p + W));
        x2 = vecOp<Op>(x2, VT::load(p + 2 * W));
        x3 = vecOp<Op>(x3, VT::load(p + 3 * W));
      }
      VT::store(dst + i, x0);
      VT::store(dst + i + W, x1);
      VT::store(dst + i + 2 * W, x2);
      VT::store(dst + i + 3 * W, x3);
    }
    for (; i + W <= count; i += W) {
      auto x = VT::load(s0 + i);
      for (int k = 1; k < n; ++k) x = vecOp<Op>(x, VT::load(static_cast<const S*>(srcs[k]) + i));
      VT::store(dst + i, x);
    }
  }
  for (; i < count; ++i) {
    A acc = E::load(s0[i]);
    for (int k = 1; k < n; ++k) acc = scalarOp<Op, A>(acc, E::load(static_cast<const S*>(srcs[k])[i]));
    dst[i] = E::store(acc);
  }
}

template <class T>
void divideKernel(void* dstv, const void* srcv, size_t count, uint64_t divisor) {
  using E = Elem<T>;
  using S = typename E::S;
  using A = typename E::A;
  S* dst = static_cast<S*>(dstv);
  const S* src = static_cast<const S*>(srcv);
  // Dividing by zero is a caller bug; treat it as 1 rather than trap (integers) or emit inf.
  if (divisor == 0) divisor = 1;
  if constexpr (std::is_integral_v<A>) {
    if constexpr (std::is_signed_v<A>) {
      if (divisor <= static_cast<uint64_t>(INT64_MAX)) {
        const int64_t d = static_cast<int64_t>(divisor);
        for (size_t i = 0; i < count; ++i) dst[i] = static_cast<S>(static_cast<int64_t>(src[i]) / d);
      } else {
        const __int128 d = static_cast<__int128>(divisor);
        for (size_t i = 0; i < count; ++i) dst[i] = static_cast<S>(static_cast<__int128>(src[i]) / d);
      }
    } else {
      for (size_t i = 0; i < count; ++i) dst[i] = static_cast<S>(static_cast<uint64_t>(src[i]) / divisor);
    }
  } else {
    const A d = static_cast<A>(divisor);
    size_t i = 0;
    using VT = VecTraits<T>;
    if constexpr (VT::kW > 0) {
      constexpr size_t W = VT::kW;
      const auto dv = VT::splat(d);
      for (; i + W <= count; i += W) VT::store(dst + i, VT::load(src + i) / dv);
    }
    for (; i < count; ++i) dst[i] = E::store(E::load(src[i]) / d);
  }
}

// PreMulSum's scaling (see reduce.h for the rules).
template <class S>
inline S scalarToInt(double scalar) {
  if (!(scalar == scalar)) return 0;
  // Compare in double against bounds that are exact powers of two, so no cast is out of range.
  constexpr double lo = std::is_signed_v<S> ? -0x1p0 * static_cast<double>(uint64_t{1} << (sizeof(S) * 8 - 1)) : 0.0;
  constexpr double hiExcl = std::is_signed_v<S> ? static_cast<double>(uint64_t{1} << (sizeof(S) * 8 - 1))
                                                : 2.0 * static_cast<double>(uint64_t{1} << (sizeof(S) * 8 - 1));
  if (scalar <= lo) return std::numeric_limits<S>::min();
  if (scalar >= hiExcl) return std::numeric_limits<S>::max();
  if constexpr (std::is_signed_v<S>) return static_cast<S>(static_cast<int64_t>(scalar));
  else return static_cast<S>(static_cast<uint64_t>(scalar));
}

template <class T>
void scaleKernel(void* dstv, const void* srcv, size_t count, double scalar) {
  using E = Elem<T>;
  using S = typename E::S;
  using A = typename E::A;
  S* dst = static_cast<S*>(dstv);
  const S* src = static_cast<const S*>(srcv);
  if constexpr (std::is_integral_v<A>) {
    // Multiplying modulo 2^64 and truncating equals the wrapped product in the type.
    using W = std::conditional_t<std::is_signed_v<S>, int64_t, uint64_t>;
    const uint64_t m = static_cast<uint64_t>(static_cast<W>(scalarToInt<S>(scalar)));
    for (size_t i = 0; i < count; ++i) dst[i] = static_cast<S>(static_cast<uint64_t>(static_cast<W>(src[i])) * m);
  } else {
    const A m = static_cast<A>(scalar);
    size_t i = 0;
    using VT = VecTraits<T>;
    if constexpr (VT::kW > 0) {
      constexpr size_t W = VT::kW;
      const auto mv = VT::splat(m);
      for (; i + W <= count; i += W) VT::store(dst + i, VT::load(src + i) * mv);
    }
    for (; i < count; ++i) dst[i] = E::store(E::load(src[i]) * m);
  }
}

template <class T>
void fillType(detail::KernelTable& t, collDataType_t dtype) {
  t.reduce2[dtype][collSum] = &reduce2Kernel<T, collSum>;
  t.reduce2[dtype][collProd] = &reduce2Kernel<T, collProd>;
  t.reduce2[dtype][collMax] = &reduce2Kernel<T, collMax>;
  t.reduce2[dtype][collMin] = &reduce2Kernel<T, collMin>;
  t.reduceN[dtype][collSum] = &reduceNKernel<T, collSum>;
  t.reduceN[dtype][collProd] = &reduceNKernel<T, collProd>;
  t.reduceN[dtype][collMax] = &reduceNKernel<T, collMax>;
  t.reduceN[dtype][collMin] = &reduceNKernel<T, collMin>;
  t.divide[dtype] = &divideKernel<T>;
  t.scale[dtype] = &scaleKernel<T>;
}

inline detail::KernelTable makeTable(const char* name) {
  detail::KernelTable t{};
  t.name = name;
  fillType<int8_t>(t, collInt8);
  fillType<uint8_t>(t, collUint8);
  fillType<int32_t>(t, collInt32);
  fillType<uint32_t>(t, collUint32);
  fillType<int64_t>(t, collInt64);
  fillType<uint64_t>(t, collUint64);
  fillType<F16Tag>(t, collFloat16);
  fillType<float>(t, collFloat32);
  fillType<double>(t, collFloat64);
  fillType<BF16Tag>(t, collBfloat16);
  fillType<F8E4M3Tag>(t, collFloat8e4m3);
  fillType<F8E5M2Tag>(t, collFloat8e5m2);
  return t;
}

}  // namespace coll::kernels::COLL_KERNEL_ISA
