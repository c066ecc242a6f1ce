// Reduction kernels: the portable (baseline SSE2 / generic) implementation, run-time selection of
// the SIMD level and the public entry points declared in reduce.h.
#define COLL_KERNEL_ISA portable
#define COLL_VEC_BYTES 16
#define COLL_F16C_WIDTH 0
#include "src/kernels/reduce_impl.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "src/base/log.h"
#include "src/kernels/reduce.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace coll::kernels {
namespace detail {

#if defined(__x86_64__) || defined(__i386__)
namespace {
// clang 14's __builtin_cpu_supports does not know "f16c": ask CPUID (leaf 1, ECX) instead.
bool cpuHasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
}  // namespace
#endif

const KernelTable* portableTable() {
  static const KernelTable table = portable::makeTable("sse2");
  return &table;
}

bool simdLevelSupported(SimdLevel level) {
  switch (level) {
    case SimdLevel::Sse2: return true;
    case SimdLevel::Avx2:
#if defined(__x86_64__) || defined(__i386__)
      // CPU checks first: building a table runs code compiled for that ISA.
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpuHasF16c() && avx2Table() != nullptr;
#else
      return false;
#endif
    case SimdLevel::Avx512:
#if defined(__x86_64__) || defined(__i386__)
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("fma") && cpuHasF16c() && avx512Table() != nullptr;
#else
      return false;
#endif
  }
  return false;
}

namespace {

// Constant-initialised, so kernels called from other files' static initialisers still work; the
// hot path is one load and an indirect call.
std::atomic<const KernelTable*> gActive{nullptr};

const KernelTable* tableFor(SimdLevel level) {
  switch (level) {
    case SimdLevel::Avx512: return avx512Table();
    case SimdLevel::Avx2: return avx2Table();
    case SimdLevel::Sse2: break;
  }
  return portableTable();
}

const KernelTable* chooseFromCpu() {
  for (SimdLevel level : {SimdLevel::Avx512, SimdLevel::Avx2}) {
    if (simdLevelSupported(level)) return tableFor(level);
  }
  return portableTable();
}

[[gnu::noinline, gnu::cold]] const KernelTable* initActive() {
  const KernelTable* chosen = chooseFromCpu();
  const KernelTable* expected = nullptr;
  if (!gActive.compare_exchange_strong(expected, chosen, std::memory_order_acq_rel)) return expected;
  COLL_INFO(-1, "reduction kernels: %s", chosen->name);
  return chosen;
}

inline const KernelTable& active() {
  const KernelTable* t = gActive.load(std::memory_order_acquire);
  if (__builtin_expect(t == nullptr, 0)) t = initActive();
  return *t;
}

[[noreturn, gnu::cold]] void badArgs(const char* what, int dtype, int op) {
  COLL_WARN(-1,
            "%s: unsupported dtype %d / op %d reached the reduction kernels (callers must validate the "
            "type and map avg to sum+divide)",
            what, dtype, op);
  std::abort();
}

inline bool validType(collDataType_t dtype) {
  return static_cast<unsigned>(dtype) < static_cast<unsigned>(collNumTypes);
}
inline bool validOp(collRedOp_t op) { return static_cast<unsigned>(op) < static_cast<unsigned>(kNumKernelOps); }

}  // namespace

bool setSimdLevelForTesting(SimdLevel level) {
  if (!simdLevelSupported(level)) return false;
  gActive.store(tableFor(level), std::memory_order_release);
  return true;
}

void resetSimdLevelForTesting() { gActive.store(chooseFromCpu(), std::memory_order_release); }

}  // namespace detail

void reduce2(void* dst, const void* a, const void* b, size_t count, collDataType_t dtype, collRedOp_t op) {
  const detail::KernelTable& t = detail::active();
  detail::Reduce2Fn fn = nullptr;
  if (detail::validType(dtype) && detail::validOp(op)) fn = t.reduce2[dtype][op];
  if (__builtin_expect(fn == nullptr, 0)) detail::badArgs("reduce2", dtype, op);
  fn(dst, a, b, count);
}

void reduceN(void* dst, const void* const* srcs, int n, size_t count, collDataType_t dtype, collRedOp_t op) {
  const detail::KernelTable& t = detail::active();
  detail::ReduceNFn fn = nullptr;
  if (detail::validType(dtype) && detail::validOp(op) && n >= 1) fn = t.reduceN[dtype][op];
  if (__builtin_expect(fn == nullptr, 0)) detail::badArgs("reduceN (or n < 1)", dtype, op);
  fn(dst, srcs, n, count);
}

void divide(void* dst, const void* src, size_t count, collDataType_t dtype, uint64_t divisor) {
  const detail::KernelTable& t = detail::active();
  detail::DivideFn fn = detail::validType(dtype) ? t.divide[dtype] : nullptr;
  if (__builtin_expect(fn == nullptr, 0)) detail::badArgs("divide", dtype, -1);
  fn(dst, src, count, divisor);
}

void convertToFloat(float* dst, const void* src, collDataType_t dtype, size_t count) {
  switch (dtype) {
    case collFloat32:
      if (dst != src) memmove(dst, src, count * sizeof(float));
      return;
    case collFloat16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = halfToFloat(s[i]);
      return;
    }
    case collBfloat16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = bfloat16ToFloat(s[i]);
      return;
    }
    default: detail::badArgs("convertToFloat", dtype, -1);
  }
}

void scale(void* dst, const void* src, size_t count, collDataType_t dtype, double scalar) {
  const detail::KernelTable& t = detail::active();
  detail::ScaleFn fn = detail::validType(dtype) ? t.scale[dtype] : nullptr;
  if (__builtin_expect(fn == nullptr, 0)) detail::badArgs("scale", dtype, -1);
  fn(dst, src, count, scalar);
}

const char* simdLevel() { return detail::active().name; }

float halfToFloat(uint16_t h) { return portable::halfToFloatS(h); }
uint16_t floatToHalf(float f) { return portable::floatToHalfS(f); }
float bfloat16ToFloat(uint16_t b) { return portable::bf16ToFloatS(b); }
uint16_t floatToBfloat16(float f) { return portable::floatToBf16S(f); }
float fp8e4m3ToFloat(uint8_t b) { return portable::fp8e4m3ToFloatS(b); }
uint8_t floatToFp8e4m3(float f) { return portable::floatToFp8e4m3S(f); }
float fp8e5m2ToFloat(uint8_t b) { return portable::fp8e5m2ToFloatS(b); }
uint8_t floatToFp8e5m2(float f) { return portable::floatToFp8e5m2S(f); }

bool scalarToDouble(const void* scalar, collDataType_t dtype, double* out) {
  auto load = [&](auto zero) {
    decltype(zero) v;
    memcpy(&v, scalar, sizeof(v));
    return v;
  };
  switch (dtype) {
    case collInt8: *out = load(int8_t{}); return true;
    case collUint8: *out = load(uint8_t{}); return true;
    case collInt32: *out = load(int32_t{}); return true;
    case collUint32: *out = load(uint32_t{}); return true;
    case collInt64: *out = static_cast<double>(load(int64_t{})); return true;
    case collUint64: *out = static_cast<double>(load(uint64_t{})); return true;
    case collFloat16: *out = halfToFloat(load(uint16_t{})); return true;
    case collBfloat16: *out = bfloat16ToFloat(load(uint16_t{})); return true;
    case collFloat32: *out = load(float{}); return true;
    case collFloat64: *out = load(double{}); return true;
    case collFloat8e4m3: *out = fp8e4m3ToFloat(load(uint8_t{})); return true;
    case collFloat8e5m2: *out = fp8e5m2ToFloat(load(uint8_t{})); return true;
    default: return false;
  }
}

}  // namespace coll::kernels
