// The CUDA 4-bit quantization kernels themselves (device code only, no CUDA header): included by
// quantize.cu, and by tests/unit/test_quantize.cc under a host emulation of the few CUDA builtins
// used here, so CI checks them against the CPU kernels bit for bit without a GPU.
// Needs, before inclusion: float4/uint4/make_float4, threadIdx and friends, __shfl_xor_sync,
// __umulhi, the __f*_rn intrinsics, rintf/floorf/fminf/fmaxf/isnan, max.
// Each kernel is a __device__ body and a __global__ template that calls it: quantize.cu launches the
// templates, device_kernels.cuh wraps the bodies in extern "C" kernels with fixed names.
#pragma once

#include <cstdint>

#include "collective/collective.h"
#include "src/kernels/device_kernel_abi.h"

// nvcc unrolls; the host emulation in the tests has no such pragma (GCC would warn).
#if defined(__CUDACC__)
#define COLL_CUDA_UNROLL _Pragma("unroll")
#else
#define COLL_CUDA_UNROLL
#endif

namespace coll::kernels::cuda::dev {

constexpr int kThreads = 256;  // threads per CUDA block
constexpr uint32_t kCanonicalNan = 0x7fc00000u;

// One thread owns 8 consecutive elements of a block (4 record bytes); a block of B elements is a
// group of B/8 lanes (4..32) of one warp, which reduces amax with shuffles.
constexpr int kPerThread = 8;

using DeviceParams = devabi::DevQuantParams;

__device__ __forceinline__ float halfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return __uint_as_float(sign | 0x7f800000u | (mant << 13) | (mant != 0 ? 0x00400000u : 0u));
  if (exp == 0) {
    if (mant == 0) return __uint_as_float(sign);
    return __uint_as_float(sign | __float_as_uint(__fmul_rn(static_cast<float>(mant), 0x1p-24f)));
  }
  return __uint_as_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

// Round to nearest even; the only NaN reaching here is the canonical one (-> 0x7E00).
__device__ __forceinline__ uint16_t floatToHalfBits(float f) {
  const uint32_t x = __float_as_uint(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (ax >= 0x38800000u) {
    const uint32_t r = ax - 0x38000000u;
    return static_cast<uint16_t>(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
  }
  if (ax <= 0x33000000u) return static_cast<uint16_t>(sign);
  const uint32_t e = ax >> 23;
  const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
  const uint32_t s = 126u - e;
  uint32_t q = m >> s;
  const uint32_t rem = m & ((1u << s) - 1u);
  const uint32_t halfway = 1u << (s - 1u);
  if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

__device__ __forceinline__ uint16_t floatToBf16Bits(float f) {
  const uint32_t x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

template <int DT>
__device__ __forceinline__ float loadElem(const void* in, size_t i) {
  if constexpr (DT == collFloat32) {
    return static_cast<const float*>(in)[i];
  } else if constexpr (DT == collFloat16) {
    return halfBitsToFloat(static_cast<const uint16_t*>(in)[i]);
  } else {
    return __uint_as_float(static_cast<uint32_t>(static_cast<const uint16_t*>(in)[i]) << 16);
  }
}

// Eight elements from a 16-byte aligned address.
template <int DT>
__device__ __forceinline__ void load8(const void* in, size_t i, float x[8]) {
  if constexpr (DT == collFloat32) {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(in) + i);
    const float4 a = p[0], b = p[1];
    x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
  } else {
    const uint4 v = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(in) + i);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    COLL_CUDA_UNROLL
    for (int k = 0; k < 4; ++k) {
      const uint16_t lo = static_cast<uint16_t>(w[k] & 0xffffu), hi = static_cast<uint16_t>(w[k] >> 16);
      if constexpr (DT == collFloat16) {
        x[2 * k] = halfBitsToFloat(lo);
        x[2 * k + 1] = halfBitsToFloat(hi);
      } else {
        x[2 * k] = __uint_as_float(static_cast<uint32_t>(lo) << 16);
        x[2 * k + 1] = __uint_as_float(static_cast<uint32_t>(hi) << 16);
      }
    }
  }
}

__device__ __forceinline__ void philox(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1,
                                       uint32_t out[4]) {
  COLL_CUDA_UNROLL
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    const uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

__device__ __forceinline__ uint32_t groupMask(int g) {
  if (g == 32) return 0xffffffffu;
  const int lane = threadIdx.x & 31;
  return ((1u << g) - 1u) << (lane & ~(g - 1));
}

__device__ __forceinline__ void storeRecordBytes(uint8_t* p, uint32_t v, bool aligned2) {
  if (aligned2) {
    reinterpret_cast<uint16_t*>(p)[0] = static_cast<uint16_t>(v & 0xffffu);
    reinterpret_cast<uint16_t*>(p)[1] = static_cast<uint16_t>(v >> 16);
  } else {
    p[0] = static_cast<uint8_t>(v), p[1] = static_cast<uint8_t>(v >> 8);
    p[2] = static_cast<uint8_t>(v >> 16), p[3] = static_cast<uint8_t>(v >> 24);
  }
}

template <int DT, bool Stochastic, bool Residual>
__device__ __forceinline__ void quantizeBody(uint8_t* out, const void* in, size_t count, int bs, DeviceParams dp,
                                             uint64_t first, float* res, bool vecIn, bool vecRes, bool aligned2) {
  const int g = bs / kPerThread;
  const uint32_t mask = groupMask(g);
  const size_t rec = static_cast<size_t>(bs) / 2 + 2;
  const size_t total = (count + bs - 1) / bs * g;  // a multiple of g: loop exits are group-uniform
  for (size_t tid = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; tid < total;
       tid += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t blk = tid / g;
    const int j = static_cast<int>(tid % g);
    const size_t e = blk * bs + static_cast<size_t>(j) * kPerThread;
    const bool full = e + kPerThread <= count;
    float x[kPerThread];
    if (full && vecIn) {
      load8<DT>(in, e, x);
    } else {
      COLL_CUDA_UNROLL
      for (int k = 0; k < kPerThread; ++k) x[k] = e + k < count ? loadElem<DT>(in, e + k) : 0.0f;
    }
    if constexpr (Residual) {
      if (full && vecRes) {
        const float4* p = reinterpret_cast<const float4*>(res + e);
        const float4 a = p[0], b = p[1];
        const float r[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        COLL_CUDA_UNROLL
        for (int k = 0; k < kPerThread; ++k) x[k] = __fadd_rn(x[k], r[k]);
      } else {
        COLL_CUDA_UNROLL
        for (int k = 0; k < kPerThread; ++k) {
          if (e + k < count) x[k] = __fadd_rn(x[k], res[e + k]);
        }
      }
    }
    uint32_t amax = 0;
    COLL_CUDA_UNROLL
    for (int k = 0; k < kPerThread; ++k) amax = max(amax, __float_as_uint(x[k]) & 0x7fffffffu);
    for (int off = g / 2; off > 0; off /= 2) amax = max(amax, __shfl_xor_sync(mask, amax, off));

    uint16_t sb;
    uint32_t packed = 0;
    float r[kPerThread];  // new residual
    if (amax >= 0x7f800000u) {
      sb = 0x7fc0u;
      COLL_CUDA_UNROLL
      for (int k = 0; k < kPerThread; ++k) r[k] = 0.0f;
    } else {
      sb = floatToBf16Bits(__fdiv_rn(__uint_as_float(amax), 7.0f));
      if (sb == 0) {
        COLL_CUDA_UNROLL
        for (int k = 0; k < kPerThread; ++k) r[k] = x[k];
      } else {
        const float s = __uint_as_float(static_cast<uint32_t>(sb) << 16);
        uint32_t w[kPerThread];
        if constexpr (Stochastic) {
          const uint64_t c = (first + e) / 4;
          philox(static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32), dp.rank, dp.step, dp.k0, dp.k1, w);
          philox(static_cast<uint32_t>(c + 1), static_cast<uint32_t>((c + 1) >> 32), dp.rank, dp.step, dp.k0, dp.k1,
                 w + 4);
        }
        COLL_CUDA_UNROLL
        for (int k = 0; k < kPerThread; ++k) {
          const float v = __fdiv_rn(x[k], s);
          float q;
          if constexpr (Stochastic) {
            const float u = __fmul_rn(static_cast<float>(w[k] >> 8), 0x1p-24f);
            q = floorf(__fadd_rn(v, u));
          } else {
            q = rintf(v);
          }
          q = fminf(fmaxf(q, -7.0f), 7.0f);
          const int qi = static_cast<int>(q);
          packed |= (static_cast<uint32_t>(qi) & 0xfu) << (4 * k);
          r[k] = __fsub_rn(x[k], __fmul_rn(static_cast<float>(qi), s));
        }
      }
    }
    uint8_t* record = out + blk * rec;
    storeRecordBytes(record + 4 * j, packed, aligned2);
    if (j == 0) {
      if (aligned2) {
        *reinterpret_cast<uint16_t*>(record + bs / 2) = sb;
      } else {
        record[bs / 2] = static_cast<uint8_t>(sb & 0xffu);
        record[bs / 2 + 1] = static_cast<uint8_t>(sb >> 8);
      }
    }
    if constexpr (Residual) {
      if (full && vecRes) {
        float4* p = reinterpret_cast<float4*>(res + e);
        p[0] = make_float4(r[0], r[1], r[2], r[3]);
        p[1] = make_float4(r[4], r[5], r[6], r[7]);
      } else {
        COLL_CUDA_UNROLL
        for (int k = 0; k < kPerThread; ++k) {
          if (e + k < count) res[e + k] = r[k];
        }
      }
    }
  }
}

// The 8 dequantized values of a thread, q * scale or the canonical NaN.
__device__ __forceinline__ void decode8(const uint8_t* q, size_t blk, int j, int bs, bool aligned2, float v[8]) {
  const uint8_t* record = q + blk * (static_cast<size_t>(bs) / 2 + 2);
  uint32_t nib;
  uint16_t sb;
  if (aligned2) {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(record + 4 * j);
    nib = p[0] | (static_cast<uint32_t>(p[1]) << 16);
    sb = *reinterpret_cast<const uint16_t*>(record + bs / 2);
  } else {
    const uint8_t* p = record + 4 * j;
    nib = p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
    sb = static_cast<uint16_t>(record[bs / 2] | (record[bs / 2 + 1] << 8));
  }
  const bool finite = (sb & 0x7f80u) != 0x7f80u;
  const float s = __uint_as_float(static_cast<uint32_t>(sb) << 16);
  COLL_CUDA_UNROLL
  for (int k = 0; k < 8; ++k) {
    const int level = static_cast<int>(((nib >> (4 * k)) & 0xfu) ^ 8u) - 8;
    v[k] = finite ? __fmul_rn(static_cast<float>(level), s) : __uint_as_float(kCanonicalNan);
  }
}

template <int DT, bool Stochastic, bool Residual>
__global__ void __launch_bounds__(kThreads)
    quantizeKernel(uint8_t* out, const void* in, size_t count, int bs, DeviceParams dp, uint64_t first, float* res,
                   bool vecIn, bool vecRes, bool aligned2) {
  quantizeBody<DT, Stochastic, Residual>(out, in, count, bs, dp, first, res, vecIn, vecRes, aligned2);
}

template <int DT>
__device__ __forceinline__ void dequantizeBody(void* out, const uint8_t* q, size_t count, int bs, bool vecOut,
                                               bool aligned2) {
  const int g = bs / kPerThread;
  const size_t total = (count + kPerThread - 1) / kPerThread;
  for (size_t tid = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; tid < total;
       tid += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t blk = tid / g;
    const int j = static_cast<int>(tid % g);
    const size_t e = tid * kPerThread;
    float v[8];
    decode8(q, blk, j, bs, aligned2, v);
    const bool full = e + kPerThread <= count;
    if constexpr (DT == collFloat32) {
      float* o = static_cast<float*>(out);
      if (full && vecOut) {
        reinterpret_cast<float4*>(o + e)[0] = make_float4(v[0], v[1], v[2], v[3]);
        reinterpret_cast<float4*>(o + e)[1] = make_float4(v[4], v[5], v[6], v[7]);
      } else {
        for (int k = 0; k < kPerThread && e + k < count; ++k) o[e + k] = v[k];
      }
    } else {
      uint16_t h[8];
      COLL_CUDA_UNROLL
      for (int k = 0; k < 8; ++k) h[k] = DT == collFloat16 ? floatToHalfBits(v[k]) : floatToBf16Bits(v[k]);
      uint16_t* o = static_cast<uint16_t*>(out);
      if (full && vecOut) {
        uint4 w;
        w.x = h[0] | (static_cast<uint32_t>(h[1]) << 16);
        w.y = h[2] | (static_cast<uint32_t>(h[3]) << 16);
        w.z = h[4] | (static_cast<uint32_t>(h[5]) << 16);
        w.w = h[6] | (static_cast<uint32_t>(h[7]) << 16);
        *reinterpret_cast<uint4*>(o + e) = w;
      } else {
        for (int k = 0; k < kPerThread && e + k < count; ++k) o[e + k] = h[k];
      }
    }
  }
}

template <int DT>
__global__ void __launch_bounds__(kThreads)
    dequantizeKernel(void* out, const uint8_t* q, size_t count, int bs, bool vecOut, bool aligned2) {
  dequantizeBody<DT>(out, q, count, bs, vecOut, aligned2);
}

__device__ __forceinline__ void dequantizeAccumulateBody(float* acc, const uint8_t* q, size_t count, int bs,
                                                         bool vecAcc, bool aligned2) {
  const int g = bs / kPerThread;
  const size_t total = (count + kPerThread - 1) / kPerThread;
  for (size_t tid = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; tid < total;
       tid += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t blk = tid / g;
    const int j = static_cast<int>(tid % g);
    const size_t e = tid * kPerThread;
    float v[8];
    decode8(q, blk, j, bs, aligned2, v);
    if (e + kPerThread <= count && vecAcc) {
      float4* p = reinterpret_cast<float4*>(acc + e);
      const float4 a = p[0], b = p[1];
      const float in[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
      float r[8];
      COLL_CUDA_UNROLL
      for (int k = 0; k < 8; ++k) {
        r[k] = __fadd_rn(in[k], v[k]);
        if (isnan(r[k])) r[k] = __uint_as_float(kCanonicalNan);
      }
      p[0] = make_float4(r[0], r[1], r[2], r[3]);
      p[1] = make_float4(r[4], r[5], r[6], r[7]);
    } else {
      for (int k = 0; k < kPerThread && e + k < count; ++k) {
        float r = __fadd_rn(acc[e + k], v[k]);
        if (isnan(r)) r = __uint_as_float(kCanonicalNan);
        acc[e + k] = r;
      }
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    dequantizeAccumulateKernel(float* acc, const uint8_t* q, size_t count, int bs, bool vecAcc, bool aligned2) {
  dequantizeAccumulateBody(acc, q, count, bs, vecAcc, aligned2);
}

}  // namespace coll::kernels::cuda::dev
