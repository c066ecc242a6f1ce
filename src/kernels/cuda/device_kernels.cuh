// The device kernels that the library launches by name through the CUDA driver (names and
// parameters: src/kernels/device_kernel_abi.h). Device code only, no CUDA header: compiled by nvcc
// (device_kernels.cu, into the fatbin the gpu layer embeds) and, for the CUDA test double and the
// tests, by the host compiler under tests/cuda_double/host_simt.h's emulation of the builtins.
//
// Results are those of the CPU kernels (src/kernels/reduce.h) bit for bit, NaN payloads included.
// The CPU kernels run on x86, whose arithmetic returns the first NaN operand quieted and, for an
// invalid operation (inf - inf, 0 * inf), the negative "default" NaN; a GPU returns one canonical
// NaN for both. So the floating operations here settle NaN explicitly before and after the IEEE
// operation (__fadd_rn and friends; built with -fmad=false -prec-div=true -ftz=false).
// Needs, besides quantize_kernels.cuh's builtins: __dadd_rn, __dmul_rn, __ddiv_rn,
// __double2float_rn, __double_as_longlong, __longlong_as_double, atomicAdd (unsigned long long).
#pragma once

#include <cstdint>
#include <type_traits>

#include "collective/collective.h"
#include "src/kernels/cuda/quantize_kernels.cuh"
#include "src/kernels/device_kernel_abi.h"

namespace coll::kernels::cuda::dev {

using devabi::DevScalar;
using devabi::DevSources;

constexpr uint32_t kX86NanF = 0xffc00000u;               // x86's default NaN (float)
constexpr uint64_t kX86NanD = 0xfff8000000000000ull;     // and double

__device__ __forceinline__ uint64_t firstThread() {
  return static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ uint64_t gridThreads() { return static_cast<uint64_t>(gridDim.x) * blockDim.x; }

// ---- float8 (OCP v1.0) conversions: the rules of reduce.h, as its CPU code spells them -----------

__device__ __forceinline__ float fp8e4m3ToFloat(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xfu;
  const uint32_t mant = b & 0x7u;
  if (exp == 0xf && mant == 0x7) return __uint_as_float(sign | 0x7fc00000u);
  if (exp == 0) return __uint_as_float(sign | __float_as_uint(__fmul_rn(static_cast<float>(mant), 0x1p-9f)));
  return __uint_as_float(sign | ((exp + 120u) << 23) | (mant << 20));
}

__device__ __forceinline__ float fp8e5m2ToFloat(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 2) & 0x1fu;
  const uint32_t mant = b & 0x3u;
  if (exp == 0x1f) return __uint_as_float(sign | 0x7f800000u | (mant << 21) | (mant != 0 ? 0x00400000u : 0u));
  if (exp == 0) return __uint_as_float(sign | __float_as_uint(__fmul_rn(static_cast<float>(mant), 0x1p-16f)));
  return __uint_as_float(sign | ((exp + 112u) << 23) | (mant << 21));
}

// |x| (float bits, finite, below overflow) to a sign-less float8 code, nearest even.
template <uint32_t mantBits, uint32_t bias>
__device__ __forceinline__ uint32_t fp8RoundMagnitude(uint32_t ax) {
  constexpr uint32_t drop = 23u - mantBits;
  constexpr uint32_t minNormal = (127u + 1u - bias) << 23;
  constexpr int minSubExp = 1 - static_cast<int>(bias) - static_cast<int>(mantBits);
  constexpr uint32_t halfMinSub = static_cast<uint32_t>(127 + minSubExp - 1) << 23;
  if (ax >= minNormal) {
    const uint32_t r = ax - ((127u - bias) << 23);
    return (r + ((1u << (drop - 1u)) - 1u) + ((r >> drop) & 1u)) >> drop;
  }
  if (ax <= halfMinSub) return 0;
  const uint32_t e = ax >> 23;
  const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
  const uint32_t s = static_cast<uint32_t>(150 + minSubExp) - e;
  uint32_t q = m >> s;
  const uint32_t rem = m & ((1u << s) - 1u);
  const uint32_t halfway = 1u << (s - 1u);
  if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
  return q;
}

__device__ __forceinline__ uint8_t floatToFp8e4m3(float f) {
  const uint32_t x = __float_as_uint(f);
  const uint32_t sign = (x >> 24) & 0x80u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);
  if (ax >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7eu);  // saturate, inf included
  return static_cast<uint8_t>(sign | fp8RoundMagnitude<3, 7>(ax));
}

__device__ __forceinline__ uint8_t floatToFp8e5m2(float f) {
  const uint32_t x = __float_as_uint(f);
  const uint32_t sign = (x >> 24) & 0x80u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7eu | ((ax >> 21) & 1u));
  if (ax >= 0x47700000u) return static_cast<uint8_t>(sign | 0x7cu);
  return static_cast<uint8_t>(sign | fp8RoundMagnitude<2, 15>(ax));
}

// ---- element traits: storage S, accumulation A -----------------------------------------------------

template <class T>
struct PlainElem {
  using S = T;
  using A = T;
  __device__ static A load(S s) { return s; }
  __device__ static S store(A a) { return a; }
};
template <int DT>
struct DevElem;
template <>
struct DevElem<collInt8> : PlainElem<int8_t> {};
template <>
struct DevElem<collUint8> : PlainElem<uint8_t> {};
template <>
struct DevElem<collInt32> : PlainElem<int32_t> {};
template <>
struct DevElem<collUint32> : PlainElem<uint32_t> {};
template <>
struct DevElem<collInt64> : PlainElem<int64_t> {};
template <>
struct DevElem<collUint64> : PlainElem<uint64_t> {};
template <>
struct DevElem<collFloat32> : PlainElem<float> {};
template <>
struct DevElem<collFloat64> : PlainElem<double> {};
template <>
struct DevElem<collFloat16> {
  using S = uint16_t;
  using A = float;
  __device__ static A load(S s) { return halfBitsToFloat(s); }
  __device__ static S store(A a) { return floatToHalfBits(a); }
};
template <>
struct DevElem<collBfloat16> {
  using S = uint16_t;
  using A = float;
  __device__ static A load(S s) { return __uint_as_float(static_cast<uint32_t>(s) << 16); }
  __device__ static S store(A a) { return floatToBf16Bits(a); }
};
template <>
struct DevElem<collFloat8e4m3> {
  using S = uint8_t;
  using A = float;
  __device__ static A load(S s) { return fp8e4m3ToFloat(s); }
  __device__ static S store(A a) { return floatToFp8e4m3(a); }
};
template <>
struct DevElem<collFloat8e5m2> {
  using S = uint8_t;
  using A = float;
  __device__ static A load(S s) { return fp8e5m2ToFloat(s); }
  __device__ static S store(A a) { return floatToFp8e5m2(a); }
};

// ---- floating arithmetic with x86's NaN results ----------------------------------------------------

__device__ __forceinline__ bool isNanBits(float x) { return (__float_as_uint(x) & 0x7fffffffu) > 0x7f800000u; }
__device__ __forceinline__ bool isNanBits(double x) {
  return (static_cast<uint64_t>(__double_as_longlong(x)) & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
}
__device__ __forceinline__ float quieted(float x) { return __uint_as_float(__float_as_uint(x) | 0x00400000u); }
__device__ __forceinline__ double quieted(double x) {
  return __longlong_as_double(static_cast<long long>(static_cast<uint64_t>(__double_as_longlong(x)) |
                                                     0x0008000000000000ull));
}
__device__ __forceinline__ float x86Nan(float) { return __uint_as_float(kX86NanF); }
__device__ __forceinline__ double x86Nan(double) { return __longlong_as_double(static_cast<long long>(kX86NanD)); }

enum ArithOp { kAdd, kMul, kDiv };
template <int Op>
__device__ __forceinline__ float ieeeOp(float a, float b) {
  return Op == kAdd ? __fadd_rn(a, b) : Op == kMul ? __fmul_rn(a, b) : __fdiv_rn(a, b);
}
template <int Op>
__device__ __forceinline__ double ieeeOp(double a, double b) {
  return Op == kAdd ? __dadd_rn(a, b) : Op == kMul ? __dmul_rn(a, b) : __ddiv_rn(a, b);
}

// a op b as x86 computes it: the first NaN operand quieted, else the IEEE result with x86's
// default NaN for an invalid operation.
template <int Op, class A>
__device__ __forceinline__ A x86Arith(A a, A b) {
  if (isNanBits(a)) return quieted(a);
  if (isNanBits(b)) return quieted(b);
  const A r = ieeeOp<Op>(a, b);
  return isNanBits(r) ? x86Nan(r) : r;
}

// double -> float as x86's cvtsd2ss: NaN keeps its sign and top payload bits, quieted.
__device__ __forceinline__ float doubleToFloat(double d) {
  if (isNanBits(d)) {
    const uint64_t x = static_cast<uint64_t>(__double_as_longlong(d));
    return __uint_as_float((static_cast<uint32_t>(x >> 32) & 0x80000000u) | 0x7fc00000u |
                           static_cast<uint32_t>((x >> 29) & 0x7fffffu));
  }
  return __double2float_rn(d);
}
template <class A>
__device__ __forceinline__ A fromDouble(double d) {
  if constexpr (std::is_same_v<A, float>) return doubleToFloat(d);
  else return d;
}

// One step of a reduction (reduce_impl.h's scalarOp).
template <int Op, class A>
__device__ __forceinline__ A reduceStep(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    if constexpr (Op == collSum) return static_cast<A>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    else if constexpr (Op == collProd) return static_cast<A>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    else if constexpr (Op == collMax) return b > a ? b : a;
    else return b < a ? b : a;
  } else {
    if constexpr (Op == collSum) return x86Arith<kAdd>(a, b);
    else if constexpr (Op == collProd) return x86Arith<kMul>(a, b);
    // NaN propagates (the later operand's when both are); between +0 and -0 the earlier wins.
    else if constexpr (Op == collMax) return isNanBits(b) ? b : (b > a ? b : a);
    else return isNanBits(b) ? b : (b < a ? b : a);
  }
}

// ---- kernel bodies -------------------------------------------------------------------------------

// Bytes, W-sized words where dst and src are equally aligned modulo sizeof(W).
template <class W>
__device__ __forceinline__ void copyBody(uint8_t* dst, const uint8_t* src, uint64_t bytes) {
  const uint64_t t0 = firstThread(), stride = gridThreads();
  const uint64_t mis = reinterpret_cast<uintptr_t>(dst) % sizeof(W);
  uint64_t head = mis ? sizeof(W) - mis : 0;
  if (head > bytes) head = bytes;
  const uint64_t words = (bytes - head) / sizeof(W);
  const uint64_t tail = head + words * sizeof(W);
  for (uint64_t i = t0; i < head; i += stride) dst[i] = src[i];
  W* dw = reinterpret_cast<W*>(dst + head);
  const W* sw = reinterpret_cast<const W*>(src + head);
  for (uint64_t i = t0; i < words; i += stride) dw[i] = sw[i];
  for (uint64_t i = tail + t0; i < bytes; i += stride) dst[i] = src[i];
}

__device__ __forceinline__ void copyBytes(void* dstv, const void* srcv, uint64_t bytes) {
  auto* dst = static_cast<uint8_t*>(dstv);
  const auto* src = static_cast<const uint8_t*>(srcv);
  const uintptr_t diff = reinterpret_cast<uintptr_t>(dst) ^ reinterpret_cast<uintptr_t>(src);
  if (diff % 16 == 0) copyBody<uint4>(dst, src, bytes);
  else if (diff % 8 == 0) copyBody<uint64_t>(dst, src, bytes);
  else if (diff % 4 == 0) copyBody<uint32_t>(dst, src, bytes);
  else copyBody<uint8_t>(dst, src, bytes);
}

template <int DT, int Op>
__device__ __forceinline__ void reduceOpBody(void* dstv, const DevSources& srcs, uint64_t count) {
  using E = DevElem<DT>;
  using S = typename E::S;
  using A = typename E::A;
  S* dst = static_cast<S*>(dstv);
  const S* p[devabi::kMaxSources];
  COLL_CUDA_UNROLL
  for (int k = 0; k < devabi::kMaxSources; ++k) p[k] = static_cast<const S*>(srcs.p[k]);
  const int n = srcs.n;
  const uint64_t stride = gridThreads();
  for (uint64_t i = firstThread(); i < count; i += stride) {
    A acc = E::load(p[0][i]);
    COLL_CUDA_UNROLL
    for (int k = 1; k < devabi::kMaxSources; ++k) {
      if (k < n) acc = reduceStep<Op, A>(acc, E::load(p[k][i]));
    }
    dst[i] = E::store(acc);  // rounded once, after all n sources
  }
}

template <int DT>
__device__ __forceinline__ void reduceBody(void* dst, const DevSources& srcs, uint64_t count, int op) {
  using S = typename DevElem<DT>::S;
  if (srcs.n < 1 || srcs.n > devabi::kMaxSources) return;
  if (srcs.n == 1) {  // a copy, as the CPU's: no conversion round trip, signalling NaNs pass as they are
    if (dst != srcs.p[0]) copyBytes(dst, srcs.p[0], count * sizeof(S));
    return;
  }
  switch (op) {
    case collSum: reduceOpBody<DT, collSum>(dst, srcs, count); break;
    case collProd: reduceOpBody<DT, collProd>(dst, srcs, count); break;
    case collMax: reduceOpBody<DT, collMax>(dst, srcs, count); break;
    case collMin: reduceOpBody<DT, collMin>(dst, srcs, count); break;
    default: break;
  }
}

// NCCL's integer PreMulSum scalar: truncated toward zero, clamped to the type, NaN -> 0.
template <class S>
__device__ __forceinline__ S scalarToInt(double scalar) {
  using U = std::make_unsigned_t<S>;
  constexpr bool kSigned = std::is_signed_v<S>;
  constexpr S kMax = static_cast<S>(kSigned ? static_cast<U>(static_cast<U>(~U{0}) >> 1) : static_cast<U>(~U{0}));
  constexpr S kMin = kSigned ? static_cast<S>(-kMax - 1) : S{0};
  constexpr double half = static_cast<double>(uint64_t{1} << (sizeof(S) * 8 - 1));
  constexpr double lo = kSigned ? -half : 0.0;
  constexpr double hiExcl = kSigned ? half : 2.0 * half;
  if (isNanBits(scalar)) return 0;
  if (scalar <= lo) return kMin;
  if (scalar >= hiExcl) return kMax;
  if constexpr (kSigned) return static_cast<S>(static_cast<int64_t>(scalar));
  else return static_cast<S>(static_cast<uint64_t>(scalar));
}

template <int DT>
__device__ __forceinline__ void scaleBody(void* dstv, const void* srcv, uint64_t count, const DevScalar& s) {
  using E = DevElem<DT>;
  using S = typename E::S;
  using A = typename E::A;
  S* dst = static_cast<S*>(dstv);
  const S* src = static_cast<const S*>(srcv);
  const uint64_t stride = gridThreads();
  if constexpr (std::is_integral_v<A>) {
    // The product modulo 2^64, truncated: the wrapped product in the type.
    using W = std::conditional_t<std::is_signed_v<S>, int64_t, uint64_t>;
    const S ms = s.device ? *static_cast<const S*>(s.device) : scalarToInt<S>(s.host);
    const uint64_t m = static_cast<uint64_t>(static_cast<W>(ms));
    for (uint64_t i = firstThread(); i < count; i += stride) {
      dst[i] = static_cast<S>(static_cast<uint64_t>(static_cast<W>(src[i])) * m);
    }
  } else {
    const A m = s.device ? E::load(*static_cast<const S*>(s.device)) : fromDouble<A>(s.host);
    for (uint64_t i = firstThread(); i < count; i += stride) dst[i] = E::store(x86Arith<kMul>(E::load(src[i]), m));
  }
}

template <int DT>
__device__ __forceinline__ void divideBody(void* dstv, const void* srcv, uint64_t count, uint64_t divisor) {
  using E = DevElem<DT>;
  using S = typename E::S;
  using A = typename E::A;
  S* dst = static_cast<S*>(dstv);
  const S* src = static_cast<const S*>(srcv);
  const uint64_t stride = gridThreads();
  if (divisor == 0) divisor = 1;  // as the CPU's divide
  if constexpr (std::is_integral_v<A>) {
    if constexpr (std::is_signed_v<A>) {
      constexpr uint64_t kHalf = uint64_t{1} << 63;
      for (uint64_t i = firstThread(); i < count; i += stride) {
        const int64_t v = src[i];
        // A divisor of 2^63 or more leaves a zero quotient except -2^63 / 2^63.
        dst[i] = divisor < kHalf ? static_cast<S>(v / static_cast<int64_t>(divisor))
                                 : static_cast<S>(divisor == kHalf && v == static_cast<int64_t>(kHalf) ? -1 : 0);
      }
    } else {
      for (uint64_t i = firstThread(); i < count; i += stride) {
        dst[i] = static_cast<S>(static_cast<uint64_t>(src[i]) / divisor);
      }
    }
  } else {
    const A d = static_cast<A>(divisor);
    for (uint64_t i = firstThread(); i < count; i += stride) dst[i] = E::store(x86Arith<kDiv>(E::load(src[i]), d));
  }
}

template <int DT>
__device__ __forceinline__ void countMismatchBody(const void* gotv, const void* wantv, uint64_t count,
                                                  unsigned long long* mismatches) {
  using S = typename DevElem<DT>::S;
  using U = std::make_unsigned_t<std::conditional_t<std::is_floating_point_v<S>,
                                                    std::conditional_t<sizeof(S) == 4, uint32_t, uint64_t>, S>>;
  const U* got = static_cast<const U*>(gotv);
  const U* want = static_cast<const U*>(wantv);
  unsigned long long local = 0;
  const uint64_t stride = gridThreads();
  for (uint64_t i = firstThread(); i < count; i += stride) local += got[i] != want[i] ? 1 : 0;
  if (local != 0) atomicAdd(mismatches, local);  // one atomic per thread, not per element
}

// dst[i] = src[i] as float32 (kernels::convertToFloat: exact for the quantization types).
template <int DT>
__device__ __forceinline__ void widenBody(float* dst, const void* srcv, uint64_t count) {
  using E = DevElem<DT>;
  const typename E::S* src = static_cast<const typename E::S*>(srcv);
  const uint64_t stride = gridThreads();
  for (uint64_t i = firstThread(); i < count; i += stride) dst[i] = static_cast<float>(E::load(src[i]));
}

// ---- the kernels, with the names of device_kernel_abi.h ------------------------------------------

#define COLL_DEV_TYPED_KERNELS(dt, sfx)                                                                           \
  extern "C" __global__ void __launch_bounds__(kThreads)                                                          \
      collDevReduce_##sfx(void* dst, DevSources srcs, uint64_t count, int op) {                                  \
    reduceBody<dt>(dst, srcs, count, op);                                                                         \
  }                                                                                                               \
  extern "C" __global__ void __launch_bounds__(kThreads)                                                          \
      collDevScale_##sfx(void* dst, const void* src, uint64_t count, DevScalar s) {                              \
    scaleBody<dt>(dst, src, count, s);                                                                            \
  }                                                                                                               \
  extern "C" __global__ void __launch_bounds__(kThreads)                                                          \
      collDevDivide_##sfx(void* dst, const void* src, uint64_t count, uint64_t divisor) {                        \
    divideBody<dt>(dst, src, count, divisor);                                                                     \
  }                                                                                                               \
  extern "C" __global__ void __launch_bounds__(kThreads)                                                          \
      collDevCountMismatch_##sfx(const void* got, const void* want, uint64_t count, unsigned long long* mismatches) { \
    countMismatchBody<dt>(got, want, count, mismatches);                                                          \
  }

#define COLL_DEV_QUANT_KERNEL(dt, name, kStochastic, kResidual)                                                    \
  extern "C" __global__ void __launch_bounds__(kThreads)                                                          \
      name(uint8_t* out, const void* in, uint64_t count, int blockSize, DeviceParams p, uint64_t firstElement,    \
           float* residual, bool vecIn, bool vecRes, bool outAligned2) {                                          \
    quantizeBody<dt, kStochastic, kResidual>(out, in, count, blockSize, p, firstElement, residual, vecIn, vecRes, \
                                             outAligned2);                                                        \
  }
#define COLL_DEV_QUANT_KERNELS(dt, sfx)                                                                           \
  COLL_DEV_QUANT_KERNEL(dt, collDevQuantize4_##sfx##_nearest, false, false)                                       \
  COLL_DEV_QUANT_KERNEL(dt, collDevQuantize4_##sfx##_nearest_residual, false, true)                               \
  COLL_DEV_QUANT_KERNEL(dt, collDevQuantize4_##sfx##_stochastic, true, false)                                     \
  COLL_DEV_QUANT_KERNEL(dt, collDevQuantize4_##sfx##_stochastic_residual, true, true)                             \
  extern "C" __global__ void __launch_bounds__(kThreads)                                                          \
      collDevDequantize4_##sfx(void* out, const uint8_t* q, uint64_t count, int blockSize, bool vecOut,          \
                               bool qAligned2) {                                                                  \
    dequantizeBody<dt>(out, q, count, blockSize, vecOut, qAligned2);                                              \
  }                                                                                                               \
  extern "C" __global__ void __launch_bounds__(kThreads) collDevWiden_##sfx(float* dst, const void* src,        \
                                                                           uint64_t count) {                    \
    widenBody<dt>(dst, src, count);                                                                               \
  }

extern "C" __global__ void __launch_bounds__(kThreads) collDevCopy(void* dst, const void* src, uint64_t bytes) {
  copyBytes(dst, src, bytes);
}

COLL_DEV_TYPES(COLL_DEV_TYPED_KERNELS)
COLL_DEV_QUANT_TYPES(COLL_DEV_QUANT_KERNELS)

extern "C" __global__ void __launch_bounds__(kThreads)
    collDevDequantizeAccumulate4(float* acc, const uint8_t* q, uint64_t count, int blockSize, bool vecAcc,
                                 bool qAligned2) {
  dequantizeAccumulateBody(acc, q, count, blockSize, vecAcc, qAligned2);
}

#undef COLL_DEV_TYPED_KERNELS
#undef COLL_DEV_QUANT_KERNEL
#undef COLL_DEV_QUANT_KERNELS

}  // namespace coll::kernels::cuda::dev
