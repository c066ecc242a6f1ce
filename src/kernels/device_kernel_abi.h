// What the device kernels (src/kernels/cuda/device_kernels.cuh) and the host code that launches
// them by name agree on: the plain structs passed by value as kernel parameters and the kernels'
// names. No CUDA here: included by the launcher (src/gpu/device_kernels.cc), by nvcc, and by the
// CUDA test double's host registry (tests/cuda_double/host_kernels.cc).
//
// Kernels, every one grid-stride (any grid covers all elements), pointers device addresses,
// element pointers element-aligned:
//   collDevCopy(void* dst, const void* src, uint64_t bytes)
//   collDevReduce_<t>(void* dst, DevSources srcs, uint64_t count, int op)        op: collSum..collMin
//   collDevScale_<t>(void* dst, const void* src, uint64_t count, DevScalar s)
//   collDevDivide_<t>(void* dst, const void* src, uint64_t count, uint64_t divisor)
//   collDevCountMismatch_<t>(const void* got, const void* want, uint64_t count, unsigned long long* mismatches)
//   collDevQuantize4_<q>_<nearest|stochastic>[_residual](uint8_t* out, const void* in, uint64_t count, int blockSize,
//       DevQuantParams p, uint64_t firstElement, float* residual, bool vecIn, bool vecRes, bool outAligned2)
//   collDevDequantize4_<q>(void* out, const uint8_t* q, uint64_t count, int blockSize, bool vecOut, bool qAligned2)
//   collDevWiden_<q>(float* dst, const void* src, uint64_t count)
//   collDevDequantizeAccumulate4(float* acc, const uint8_t* q, uint64_t count, int blockSize, bool vecAcc,
//       bool qAligned2)
// <t>: i8 u8 i32 u32 i64 u64 f16 f32 f64 bf16 f8e4m3 f8e5m2; <q>: f32 f16 bf16. The quantization
// kernels need 256 threads per block (a quantization block's lanes share a warp).
#pragma once

#include <cstdint>

#include "collective/collective.h"

namespace coll::kernels::devabi {

constexpr int kMaxSources = 8;  // collDevReduce's inputs per launch; more are chained

// collDevReduce's inputs: p[0..n-1], 1 <= n <= kMaxSources.
struct DevSources {
  const void* p[kMaxSources];
  int n;
};

// PreMulSum's scalar: read on the device from `device` (one element of the kernel's type, NCCL's
// collScalarDevice) when that is not null, else `host`.
struct DevScalar {
  double host;
  const void* device;
};

// The seed, rank and step of stochastic rounding, as the kernels take them (quantize.h's QuantParams).
struct DevQuantParams {
  uint32_t k0, k1, rank, step;
};

// X(collDataType_t, name suffix): one line per type, in enum order. The kernels and their names are
// both generated from this list.
#define COLL_DEV_TYPES(X) \
  X(collInt8, i8)         \
  X(collUint8, u8)        \
  X(collInt32, i32)       \
  X(collUint32, u32)      \
  X(collInt64, i64)       \
  X(collUint64, u64)      \
  X(collFloat16, f16)     \
  X(collFloat32, f32)     \
  X(collFloat64, f64)     \
  X(collBfloat16, bf16)   \
  X(collFloat8e4m3, f8e4m3) \
  X(collFloat8e5m2, f8e5m2)

// The types of the 4-bit quantization kernels.
#define COLL_DEV_QUANT_TYPES(X) \
  X(collFloat32, f32)           \
  X(collFloat16, f16)           \
  X(collBfloat16, bf16)

inline constexpr const char* kCopyKernel = "collDevCopy";
inline constexpr const char* kDequantizeAccumulate4Kernel = "collDevDequantizeAccumulate4";

#define COLL_DEV_NAME_CASE(prefix, dt, sfx) \
  case dt: return prefix #sfx;
#define COLL_DEV_REDUCE_CASE(dt, sfx) COLL_DEV_NAME_CASE("collDevReduce_", dt, sfx)
#define COLL_DEV_SCALE_CASE(dt, sfx) COLL_DEV_NAME_CASE("collDevScale_", dt, sfx)
#define COLL_DEV_DIVIDE_CASE(dt, sfx) COLL_DEV_NAME_CASE("collDevDivide_", dt, sfx)
#define COLL_DEV_MISMATCH_CASE(dt, sfx) COLL_DEV_NAME_CASE("collDevCountMismatch_", dt, sfx)
#define COLL_DEV_DEQUANT_CASE(dt, sfx) COLL_DEV_NAME_CASE("collDevDequantize4_", dt, sfx)
#define COLL_DEV_WIDEN_CASE(dt, sfx) COLL_DEV_NAME_CASE("collDevWiden_", dt, sfx)

// The kernel's name, nullptr for a type outside the list.
inline const char* reduceKernelName(collDataType_t t) {
  switch (t) {
    COLL_DEV_TYPES(COLL_DEV_REDUCE_CASE)
    default: return nullptr;
  }
}
inline const char* scaleKernelName(collDataType_t t) {
  switch (t) {
    COLL_DEV_TYPES(COLL_DEV_SCALE_CASE)
    default: return nullptr;
  }
}
inline const char* divideKernelName(collDataType_t t) {
  switch (t) {
    COLL_DEV_TYPES(COLL_DEV_DIVIDE_CASE)
    default: return nullptr;
  }
}
inline const char* countMismatchKernelName(collDataType_t t) {
  switch (t) {
    COLL_DEV_TYPES(COLL_DEV_MISMATCH_CASE)
    default: return nullptr;
  }
}
inline const char* dequantize4KernelName(collDataType_t t) {
  switch (t) {
    COLL_DEV_QUANT_TYPES(COLL_DEV_DEQUANT_CASE)
    default: return nullptr;
  }
}
inline const char* widenKernelName(collDataType_t t) {
  switch (t) {
    COLL_DEV_QUANT_TYPES(COLL_DEV_WIDEN_CASE)
    default: return nullptr;
  }
}
inline const char* quantize4KernelName(collDataType_t t, bool stochastic, bool residual) {
#define COLL_DEV_QUANT_CASE(dt, sfx)                                                              \
  case dt:                                                                                        \
    return stochastic ? (residual ? "collDevQuantize4_" #sfx "_stochastic_residual"               \
                                  : "collDevQuantize4_" #sfx "_stochastic")                       \
                      : (residual ? "collDevQuantize4_" #sfx "_nearest_residual" : "collDevQuantize4_" #sfx "_nearest");
  switch (t) {
    COLL_DEV_QUANT_TYPES(COLL_DEV_QUANT_CASE)
    default: return nullptr;
  }
#undef COLL_DEV_QUANT_CASE
}

#undef COLL_DEV_NAME_CASE
#undef COLL_DEV_REDUCE_CASE
#undef COLL_DEV_SCALE_CASE
#undef COLL_DEV_DIVIDE_CASE
#undef COLL_DEV_MISMATCH_CASE
#undef COLL_DEV_DEQUANT_CASE
#undef COLL_DEV_WIDEN_CASE

// Calls f(name) for every kernel the image holds (the launcher resolves them all at load; the
// tests check the host registry has each).
template <class F>
void forEachDeviceKernelName(F&& f) {
  f(kCopyKernel);
  for (int t = 0; t < collNumTypes; ++t) {
    const auto dt = static_cast<collDataType_t>(t);
    f(reduceKernelName(dt));
    f(scaleKernelName(dt));
    f(divideKernelName(dt));
    f(countMismatchKernelName(dt));
  }
  for (collDataType_t dt : {collFloat32, collFloat16, collBfloat16}) {
    for (int mode = 0; mode < 4; ++mode) f(quantize4KernelName(dt, mode & 1, mode & 2));
    f(dequantize4KernelName(dt));
    f(widenKernelName(dt));
  }
  f(kDequantizeAccumulate4Kernel);
}

}  // namespace coll::kernels::devabi
