// 4-bit quantization kernels: the portable reference implementation (the SIMD levels must match it
// bit for bit), Philox4x32-10, run-time choice of the level and the public entry points.
#include "src/kernels/quantize.h"
#include "src/kernels/quantize_impl.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "src/base/align.h"
#include "src/base/log.h"
#include "src/kernels/dispatch.h"
#include "src/kernels/reduce.h"

namespace coll::kernels {

using detail::bitsFloat;
using detail::floatBits;
using detail::kCanonicalNan;
using detail::kNanScale;
using detail::loadScale;
using detail::storeScale;

namespace {

constexpr uint32_t kAbsMask = 0x7fffffffu;
constexpr uint32_t kInfBits = 0x7f800000u;
// (v + 1.5 * 2^23) - 1.5 * 2^23 rounds v to an integer, ties to even, for |v| < 2^22: the reference
// needs no SSE4.1 and no libm call. |x / scale| stays below 11 for every valid scale.
constexpr float kRoundMagic = 12582912.0f;

// Both return ints for |v| < 2^22 without branches: stochastic rounding makes any branch on the
// value a coin flip the predictor loses.
inline int roundNearestEven(float v) { return static_cast<int>((v + kRoundMagic) - kRoundMagic); }
inline int roundDown(float v) {
  const int t = static_cast<int>(v);  // toward zero
  return t - static_cast<int>(v < static_cast<float>(t));
}
inline int clampLevel(int q) { return std::min(7, std::max(-7, q)); }

void loadBlock(float* x, const void* in, collDataType_t dtype, size_t n) {
  if (dtype == collFloat32) {
    std::memcpy(x, in, n * sizeof(float));
  } else if (dtype == collBfloat16) {
    const auto* p = static_cast<const uint16_t*>(in);
    for (size_t i = 0; i < n; ++i) x[i] = bitsFloat(static_cast<uint32_t>(p[i]) << 16);
  } else {
    const auto* p = static_cast<const uint16_t*>(in);
    for (size_t i = 0; i < n; ++i) x[i] = halfToFloat(p[i]);
  }
}

inline void storeElem(void* out, collDataType_t dtype, size_t i, float v) {
  switch (dtype) {
    case collFloat16: static_cast<uint16_t*>(out)[i] = floatToHalf(v); break;
    case collBfloat16: static_cast<uint16_t*>(out)[i] = floatToBfloat16(v); break;
    default: static_cast<float*>(out)[i] = v; break;
  }
}

inline int nibbleLevel(const uint8_t* nib, size_t i) {
  const unsigned n = (nib[i / 2] >> (4 * (i & 1))) & 0xfu;
  return static_cast<int>(n ^ 8u) - 8;
}

inline bool scaleFinite(uint16_t bits) { return (bits & 0x7f80u) != 0x7f80u; }

void quantizePortable(void* out, const void* in, collDataType_t dtype, size_t count, const QuantParams& params,
                      uint64_t firstElement, float* residual) {
  const size_t elemSize = dtype == collFloat32 ? 4 : 2;
  const size_t b = static_cast<size_t>(params.blockSize);
  const size_t rec = quantRecordBytes(params.blockSize);
  for (size_t start = 0, blk = 0; start < count; start += b, ++blk) {
    const size_t n = count - start < b ? count - start : b;
    detail::quantizeBlockPortable(static_cast<uint8_t*>(out) + blk * rec,
                                  static_cast<const uint8_t*>(in) + start * elemSize, dtype, n, params,
                                  firstElement + start, residual ? residual + start : nullptr);
  }
}

void dequantizePortable(void* out, collDataType_t dtype, const void* q, size_t count, int blockSize) {
  const size_t elemSize = dtype == collFloat32 ? 4 : 2;
  const size_t b = static_cast<size_t>(blockSize);
  const size_t rec = quantRecordBytes(blockSize);
  for (size_t start = 0, blk = 0; start < count; start += b, ++blk) {
    const size_t n = count - start < b ? count - start : b;
    detail::dequantizeBlockPortable(static_cast<uint8_t*>(out) + start * elemSize, dtype,
                                    static_cast<const uint8_t*>(q) + blk * rec, blockSize, n);
  }
}

void dequantizeAccumulatePortable(float* acc, const void* q, size_t count, int blockSize) {
  const size_t b = static_cast<size_t>(blockSize);
  const size_t rec = quantRecordBytes(blockSize);
  for (size_t start = 0, blk = 0; start < count; start += b, ++blk) {
    const size_t n = count - start < b ? count - start : b;
    detail::dequantizeAccumulateBlockPortable(acc + start, static_cast<const uint8_t*>(q) + blk * rec, blockSize, n);
  }
}

}  // namespace

namespace detail {

void quantizeBlockPortable(uint8_t* record, const void* in, collDataType_t dtype, size_t n, const QuantParams& params,
                           uint64_t firstElement, float* residual) {
  uint8_t* nib = record;
  uint8_t* scale = record + params.blockSize / 2;
  const size_t nbytes = static_cast<size_t>(params.blockSize) / 2;
  // Simple loops over the block (one concern each) so compilers can vectorise the fallback too.
  float x[256];
  loadBlock(x, in, dtype, n);
  if (residual) {
    for (size_t i = 0; i < n; ++i) x[i] += residual[i];
  }
  uint32_t amaxBits = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t a = floatBits(x[i]) & kAbsMask;
    amaxBits = a > amaxBits ? a : amaxBits;
  }
  std::memset(nib, 0, nbytes);
  if (amaxBits >= kInfBits) {  // NaN or Inf somewhere: the whole block reads NaN on every rank
    storeScale(scale, kNanScale);
    if (residual) std::memset(residual, 0, n * sizeof(float));
    return;
  }
  const uint16_t sb = floatToBfloat16(bitsFloat(amaxBits) / 7.0f);
  storeScale(scale, sb);
  if (sb == 0) {
    if (residual) std::memcpy(residual, x, n * sizeof(float));
    return;
  }
  const float s = bfloat16ToFloat(sb);
  int8_t q[256];
  if (params.stochastic) {
    float u[256];
    const uint32_t key[2] = {static_cast<uint32_t>(params.seed), static_cast<uint32_t>(params.seed >> 32)};
    for (size_t i = 0; i < n; i += 4) {  // firstElement is a multiple of 4: one counter per 4 elements
      const uint64_t g = (firstElement + i) / 4;
      const uint32_t ctr[4] = {static_cast<uint32_t>(g), static_cast<uint32_t>(g >> 32), params.rank,
                               static_cast<uint32_t>(params.step)};
      uint32_t words[4];
      philox4x32(ctr, key, words);
      for (size_t k = 0; k < 4 && i + k < n; ++k) u[i + k] = static_cast<float>(words[k] >> 8) * 0x1p-24f;
    }
    for (size_t i = 0; i < n; ++i) q[i] = static_cast<int8_t>(clampLevel(roundDown(x[i] / s + u[i])));
  } else {
    for (size_t i = 0; i < n; ++i) q[i] = static_cast<int8_t>(clampLevel(roundNearestEven(x[i] / s)));
  }
  for (size_t i = 0; i < n; ++i) {
    nib[i / 2] |= static_cast<uint8_t>((static_cast<unsigned>(q[i]) & 0xfu) << (4 * (i & 1)));
  }
  if (residual) {
    for (size_t i = 0; i < n; ++i) residual[i] = x[i] - static_cast<float>(q[i]) * s;
  }
}

void dequantizeBlockPortable(void* out, collDataType_t dtype, const uint8_t* record, int blockSize, size_t n) {
  const uint8_t* nib = record;
  const uint16_t scaleBits = loadScale(record + blockSize / 2);
  const bool finite = scaleFinite(scaleBits);
  const float s = bfloat16ToFloat(scaleBits);
  for (size_t i = 0; i < n; ++i) {
    const float v = finite ? static_cast<float>(nibbleLevel(nib, i)) * s : bitsFloat(kCanonicalNan);
    storeElem(out, dtype, i, v);
  }
}

void dequantizeAccumulateBlockPortable(float* acc, const uint8_t* record, int blockSize, size_t n) {
  const uint8_t* nib = record;
  const uint16_t scaleBits = loadScale(record + blockSize / 2);
  const bool finite = scaleFinite(scaleBits);
  const float s = bfloat16ToFloat(scaleBits);
  for (size_t i = 0; i < n; ++i) {
    const float v = finite ? static_cast<float>(nibbleLevel(nib, i)) * s : bitsFloat(kCanonicalNan);
    const float r = acc[i] + v;
    acc[i] = r != r ? bitsFloat(kCanonicalNan) : r;
  }
}

const QuantKernelTable* quantPortableTable() {
  static const QuantKernelTable table{"portable", quantizePortable, dequantizePortable, dequantizeAccumulatePortable};
  return &table;
}

}  // namespace detail

void philox4x32(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

bool validQuantBlockSize(int blockSize) {
  return blockSize == 32 || blockSize == 64 || blockSize == 128 || blockSize == 256;
}

size_t quantizedBytes(size_t count, int blockSize) {
  if (!validQuantBlockSize(blockSize)) return 0;
  const size_t b = static_cast<size_t>(blockSize);
  return ceilDiv(count, b) * quantRecordBytes(blockSize);
}

namespace {

bool levelSupported(const char* level) {
  using detail::SimdLevel;
  if (std::strcmp(level, "portable") == 0) return true;
  if (std::strcmp(level, "avx2") == 0)
    return detail::quantAvx2Table() != nullptr && detail::simdLevelSupported(SimdLevel::Avx2);
  if (std::strcmp(level, "avx512") == 0)
    return detail::quantAvx512Table() != nullptr && detail::simdLevelSupported(SimdLevel::Avx512);
  return false;
}

const detail::QuantKernelTable* tableNamed(const char* level) {
  if (std::strcmp(level, "avx512") == 0) return detail::quantAvx512Table();
  if (std::strcmp(level, "avx2") == 0) return detail::quantAvx2Table();
  return detail::quantPortableTable();
}

const detail::QuantKernelTable* chooseFromCpu() {
  for (const char* level : {"avx512", "avx2"}) {
    if (levelSupported(level)) return tableNamed(level);
  }
  return detail::quantPortableTable();
}

std::atomic<const detail::QuantKernelTable*> gQuantActive{nullptr};

[[gnu::noinline, gnu::cold]] const detail::QuantKernelTable* initQuantActive() {
  const detail::QuantKernelTable* chosen = chooseFromCpu();
  const detail::QuantKernelTable* expected = nullptr;
  if (!gQuantActive.compare_exchange_strong(expected, chosen, std::memory_order_acq_rel)) return expected;
  COLL_INFO(-1, "quantization kernels: %s", chosen->name);
  return chosen;
}

inline const detail::QuantKernelTable& quantActive() {
  const detail::QuantKernelTable* t = gQuantActive.load(std::memory_order_acquire);
  if (__builtin_expect(t == nullptr, 0)) t = initQuantActive();
  return *t;
}

[[noreturn, gnu::cold]] void badQuantArgs(const char* what, int dtype, int blockSize, unsigned long long first) {
  COLL_WARN(-1,
            "%s: unsupported arguments reached the quantization kernels (dtype %d, block size %d, first "
            "element %llu): callers must pass float32/float16/bfloat16, a block size of 32/64/128/256 and a "
            "first element that is a multiple of it",
            what, dtype, blockSize, first);
  std::abort();
}

inline bool quantType(collDataType_t dtype) {
  return dtype == collFloat32 || dtype == collFloat16 || dtype == collBfloat16;
}

}  // namespace

void quantize4(void* out, const void* in, collDataType_t dtype, size_t count, const QuantParams& params,
               uint64_t firstElement, float* residual) {
  if (!quantType(dtype) || !validQuantBlockSize(params.blockSize) ||
      firstElement % static_cast<uint64_t>(params.blockSize) != 0) {
    badQuantArgs("quantize4", dtype, params.blockSize, static_cast<unsigned long long>(firstElement));
  }
  if (count == 0) return;
  quantActive().quantize(out, in, dtype, count, params, firstElement, residual);
}

void dequantize4(void* out, collDataType_t dtype, const void* q, size_t count, int blockSize) {
  if (!quantType(dtype) || !validQuantBlockSize(blockSize)) badQuantArgs("dequantize4", dtype, blockSize, 0);
  if (count == 0) return;
  quantActive().dequantize(out, dtype, q, count, blockSize);
}

void dequantizeAccumulate4(float* acc, const void* q, size_t count, int blockSize) {
  if (!validQuantBlockSize(blockSize)) badQuantArgs("dequantizeAccumulate4", collFloat32, blockSize, 0);
  if (count == 0) return;
  quantActive().dequantizeAccumulate(acc, q, count, blockSize);
}

const char* quantKernelLevel() { return quantActive().name; }

bool forceQuantKernelLevel(const char* level) {
  if (level == nullptr || !levelSupported(level)) return false;
  gQuantActive.store(tableNamed(level), std::memory_order_release);
  return true;
}

}  // namespace coll::kernels
