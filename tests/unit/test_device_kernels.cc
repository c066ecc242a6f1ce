// The device kernels (src/kernels/cuda/device_kernels.cuh) compiled for the host and run through the
// CUDA test double's registry (tests/cuda_double/host_kernels.h), against the CPU kernels bit for
// bit: every type and op, n = 1..8 sources, NaN/inf/-0/subnormals/extremes, odd counts and
// pointers, at every SIMD level the CPU has; PreMulSum scaling with host and device scalars, the
// average's divide, the copy, the mismatch counter and the 4-bit quantization wrappers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "src/kernels/device_kernel_abi.h"
#include "src/kernels/dispatch.h"
#include "src/kernels/quantize.h"
#include "src/kernels/reduce.h"
#include "tests/cuda_double/host_kernels.h"

namespace coll {
namespace {

using cuda_double::findHostKernel;
using cuda_double::HostKernel;
using cuda_double::LaunchDims;
using kernels::devabi::DevQuantParams;
using kernels::devabi::DevScalar;
using kernels::devabi::DevSources;

void* identity(const void* p) { return const_cast<void*>(p); }

// Launches `name` as the double would, with cuLaunchKernel's parameter array.
template <class... Args>
void launch(const char* name, LaunchDims dims, Args... args) {
  HostKernel k = findHostKernel(name);
  ASSERT_NE(k, nullptr) << name;
  void* params[] = {static_cast<void*>(&args)...};
  ASSERT_TRUE(k(dims, params, &identity)) << name;
}

// Small grids, so the grid-stride loops wrap several times.
constexpr LaunchDims kDims{{3, 1, 1}, {32, 1, 1}};

size_t typeSize(collDataType_t t) {
  switch (t) {
    case collInt8:
    case collUint8:
    case collFloat8e4m3:
    case collFloat8e5m2: return 1;
    case collFloat16:
    case collBfloat16: return 2;
    case collInt32:
    case collUint32:
    case collFloat32: return 4;
    default: return 8;
  }
}
bool isFloat(collDataType_t t) { return t >= collFloat16; }

const collDataType_t kAllTypes[] = {collInt8,    collUint8,    collInt32,      collUint32,
                                    collInt64,   collUint64,   collFloat16,    collFloat32,
                                    collFloat64, collBfloat16, collFloat8e4m3, collFloat8e5m2};
const collRedOp_t kOps[] = {collSum, collProd, collMax, collMin};

// The element's value as a double (NaN checks and exact scalars).
double valueOf(collDataType_t t, const uint8_t* p) {
  switch (t) {
    case collInt8: return static_cast<int8_t>(*p);
    case collUint8: return *p;
    case collFloat8e4m3: return kernels::fp8e4m3ToFloat(*p);
    case collFloat8e5m2: return kernels::fp8e5m2ToFloat(*p);
    default: break;
  }
  union {
    uint16_t h;
    int32_t i32;
    uint32_t u32;
    int64_t i64;
    uint64_t u64;
    float f;
    double d;
  } v;
  std::memcpy(&v, p, typeSize(t));
  switch (t) {
    case collFloat16: return kernels::halfToFloat(v.h);
    case collBfloat16: return kernels::bfloat16ToFloat(v.h);
    case collInt32: return v.i32;
    case collUint32: return v.u32;
    case collInt64: return static_cast<double>(v.i64);
    case collUint64: return static_cast<double>(v.u64);
    case collFloat32: return v.f;
    default: return v.d;
  }
}

// Random elements: raw bits (every class of float16/bfloat16/float8 value, huge and tiny float32/64)
// mixed with the specials and ordinary values, so sums and products round, overflow and cancel.
void fillRandom(std::vector<uint8_t>& buf, collDataType_t t, std::mt19937_64& rng) {
  const size_t es = typeSize(t);
  for (size_t i = 0; i + es <= buf.size(); i += es) {
    const unsigned pick = rng() % 8;
    uint64_t bits = rng();
    if (t == collFloat32 && pick >= 3) {
      const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                                -std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::infinity(),
                                -0.0f,
                                0.0f,
                                std::numeric_limits<float>::max(),
                                std::numeric_limits<float>::denorm_min(),
                                -std::numeric_limits<float>::min()};
      float f = pick == 3 ? specials[rng() % 8] : static_cast<float>(static_cast<int64_t>(rng() % 2001) - 1000) / 8.0f;
      if (pick == 4 && rng() % 4 == 0) {  // a signalling NaN with a payload
        const uint32_t snan = 0x7f800001u | static_cast<uint32_t>(rng() & 0x801ffffeu);
        std::memcpy(&f, &snan, 4);
      }
      std::memcpy(&bits, &f, 4);
    } else if (t == collFloat64 && pick >= 3) {
      const double specials[] = {std::numeric_limits<double>::quiet_NaN(),
                                 -std::numeric_limits<double>::infinity(),
                                 std::numeric_limits<double>::infinity(),
                                 -0.0,
                                 0.0,
                                 std::numeric_limits<double>::max(),
                                 std::numeric_limits<double>::denorm_min(),
                                 -std::numeric_limits<double>::min()};
      const double d =
          pick == 3 ? specials[rng() % 8] : static_cast<double>(static_cast<int64_t>(rng() % 2001) - 1000) / 8.0;
      std::memcpy(&bits, &d, 8);
    } else if (!isFloat(t) && pick == 3) {
      bits = rng() % 2 ? ~uint64_t{0} >> 1 : uint64_t{1} << 63;  // extremes (truncated to the type)
      if (es < 8) bits >>= 64 - 8 * es;
    } else if (!isFloat(t) && pick >= 4) {
      bits = rng() % 7;  // small values: products that do not overflow
    }
    std::memcpy(&buf[i], &bits, es);
  }
}

// Bytes equal; with nanLoose, any NaN also matches any NaN (where the CPU itself is not consistent).
::testing::AssertionResult sameElements(collDataType_t t, const uint8_t* got, const uint8_t* want, size_t count,
                                        bool nanLoose = false) {
  const size_t es = typeSize(t);
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(got + i * es, want + i * es, es) == 0) continue;
    if (nanLoose && std::isnan(valueOf(t, got + i * es)) && std::isnan(valueOf(t, want + i * es))) continue;
    unsigned long long g = 0, w = 0;
    std::memcpy(&g, got + i * es, es);
    std::memcpy(&w, want + i * es, es);
    char text[96];
    std::snprintf(text, sizeof text, "element %zu of %zu: got 0x%llx, want 0x%llx", i, count, g, w);
    return ::testing::AssertionFailure() << text;
  }
  return ::testing::AssertionSuccess();
}

// The CPU's SIMD levels this machine runs.
std::vector<kernels::detail::SimdLevel> cpuLevels() {
  std::vector<kernels::detail::SimdLevel> levels;
  for (auto l : {kernels::detail::SimdLevel::Sse2, kernels::detail::SimdLevel::Avx2, kernels::detail::SimdLevel::Avx512}) {
    if (kernels::detail::simdLevelSupported(l)) levels.push_back(l);
  }
  return levels;
}

class SimdGuard {
 public:
  ~SimdGuard() { kernels::detail::resetSimdLevelForTesting(); }
};

TEST(DeviceKernels, EveryNameHasAHostKernel) {
  std::set<std::string> names;
  kernels::devabi::forEachDeviceKernelName([&](const char* name) {
    ASSERT_NE(name, nullptr);
    EXPECT_NE(findHostKernel(name), nullptr) << name;
    names.insert(name);
  });
  EXPECT_EQ(names.size(), 1u + 4u * 12u + 6u * 3u + 1u);  // all distinct
  EXPECT_EQ(findHostKernel("collDevReduce_f128"), nullptr);
  EXPECT_EQ(findHostKernel(nullptr), nullptr);
  EXPECT_EQ(kernels::devabi::reduceKernelName(collNumTypes), nullptr);
  EXPECT_STREQ(kernels::devabi::reduceKernelName(collFloat8e5m2), "collDevReduce_f8e5m2");
  EXPECT_STREQ(kernels::devabi::quantize4KernelName(collBfloat16, true, true), "collDevQuantize4_bf16_stochastic_residual");
}

TEST(DeviceKernels, ReduceMatchesCpuEveryTypeOpAndSourceCount) {
  SimdGuard guard;
  std::mt19937_64 rng(7);
  const auto levels = cpuLevels();
  for (collDataType_t t : kAllTypes) {
    const size_t es = typeSize(t);
    for (collRedOp_t op : kOps) {
      for (int n = 1; n <= 8; ++n) {
        for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{100}, size_t{261}}) {
          const size_t off = rng() % 4;  // element offsets: no 16-byte alignment
          std::vector<std::vector<uint8_t>> in(n, std::vector<uint8_t>((count + off) * es));
          const void* srcs[8];
          DevSources ds{};
          for (int k = 0; k < n; ++k) {
            fillRandom(in[k], t, rng);
            srcs[k] = ds.p[k] = in[k].data() + off * es;
          }
          ds.n = n;
          std::vector<uint8_t> got(count * es + 1, 0xA5), aliased(in[0]);
          launch(kernels::devabi::reduceKernelName(t), kDims, static_cast<void*>(got.data()), ds,
                 static_cast<uint64_t>(count), static_cast<int>(op));
          ASSERT_EQ(got.back(), 0xA5) << "wrote past the end";
          // In place: dst aliases the first source.
          DevSources inPlace = ds;
          inPlace.p[0] = aliased.data() + off * es;
          launch(kernels::devabi::reduceKernelName(t), kDims, static_cast<void*>(aliased.data() + off * es), inPlace,
                 static_cast<uint64_t>(count), static_cast<int>(op));
          for (auto level : levels) {
            kernels::detail::setSimdLevelForTesting(level);
            std::vector<uint8_t> want(count * es + 1, 0xA5);
            kernels::reduceN(want.data(), srcs, n, count, t, op);
            ASSERT_TRUE(sameElements(t, got.data(), want.data(), count))
                << "type " << t << " op " << op << " n " << n << " count " << count << " level "
                << static_cast<int>(level);
            ASSERT_TRUE(sameElements(t, aliased.data() + off * es, want.data(), count)) << "in place, type " << t;
          }
        }
      }
    }
  }
}

// An element of type t holding `v` (for device scalars).
std::vector<uint8_t> elementOf(collDataType_t t, double v) {
  std::vector<uint8_t> b(8);
  const float f = static_cast<float>(v);
  uint16_t h;
  switch (t) {
    case collInt8: b[0] = static_cast<uint8_t>(static_cast<int8_t>(v)); break;
    case collUint8: b[0] = static_cast<uint8_t>(v); break;
    case collInt32: {
      const int32_t x = static_cast<int32_t>(v);
      std::memcpy(b.data(), &x, 4);
      break;
    }
    case collUint32: {
      const uint32_t x = static_cast<uint32_t>(v);
      std::memcpy(b.data(), &x, 4);
      break;
    }
    case collInt64: {
      const int64_t x = static_cast<int64_t>(v);
      std::memcpy(b.data(), &x, 8);
      break;
    }
    case collUint64: {
      const uint64_t x = static_cast<uint64_t>(v);
      std::memcpy(b.data(), &x, 8);
      break;
    }
    case collFloat16: h = kernels::floatToHalf(f), std::memcpy(b.data(), &h, 2); break;
    case collBfloat16: h = kernels::floatToBfloat16(f), std::memcpy(b.data(), &h, 2); break;
    case collFloat8e4m3: b[0] = kernels::floatToFp8e4m3(f); break;
    case collFloat8e5m2: b[0] = kernels::floatToFp8e5m2(f); break;
    case collFloat32: std::memcpy(b.data(), &f, 4); break;
    default: std::memcpy(b.data(), &v, 8); break;
  }
  return b;
}

TEST(DeviceKernels, ScaleMatchesCpuWithHostAndDeviceScalars) {
  SimdGuard guard;
  std::mt19937_64 rng(11);
  const auto levels = cpuLevels();
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (collDataType_t t : kAllTypes) {
    const size_t es = typeSize(t);
    const bool integer = !isFloat(t);
    // No -0.0: the CPU's vector body multiplies by +0 then (its splat adds the scalar to a zero vector).
    for (double scalar : {2.0, -3.0, 0.5, 0.1, 0.0, 1e40, -1e300, 300.7, -129.9, 5e9, 1e19, inf, -inf, nan}) {
      for (bool onDevice : {false, true}) {
        // An integer element must hold the scalar exactly.
        const bool isUnsigned = t == collUint8 || t == collUint32 || t == collUint64;
        if (onDevice && integer && !(std::fabs(scalar) < 100 && (scalar >= 0 || !isUnsigned))) continue;
        const size_t count = 1 + rng() % 300, off = rng() % 3;
        std::vector<uint8_t> src((count + off) * es), got(count * es);
        fillRandom(src, t, rng);
        // Only a device scalar is converted to an element (an integer cannot hold inf, nan or 1e40).
        const std::vector<uint8_t> dev = onDevice ? elementOf(t, scalar) : std::vector<uint8_t>(8);
        // The scalar the CPU gets: the device element's own value, else the host double.
        const double cpuScalar = onDevice ? valueOf(t, dev.data()) : scalar;
        const DevScalar s{onDevice ? 0.0 : scalar, onDevice ? static_cast<const void*>(dev.data()) : nullptr};
        launch(kernels::devabi::scaleKernelName(t), kDims, static_cast<void*>(got.data()),
               static_cast<const void*>(src.data() + off * es), static_cast<uint64_t>(count), s);
        for (auto level : levels) {
          kernels::detail::setSimdLevelForTesting(level);
          std::vector<uint8_t> want(count * es);
          kernels::scale(want.data(), src.data() + off * es, count, t, cpuScalar);
          // NaN times NaN: the CPU's own levels differ on whose payload survives.
          ASSERT_TRUE(sameElements(t, got.data(), want.data(), count, std::isnan(cpuScalar)))
              << "type " << t << " scalar " << scalar << (onDevice ? " (device)" : " (host)") << " level "
              << static_cast<int>(level);
        }
      }
    }
  }
}

TEST(DeviceKernels, DivideMatchesCpu) {
  SimdGuard guard;
  std::mt19937_64 rng(13);
  const auto levels = cpuLevels();
  const uint64_t half = uint64_t{1} << 63;
  for (collDataType_t t : kAllTypes) {
    const size_t es = typeSize(t);
    for (uint64_t divisor : {uint64_t{0}, uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{7}, uint64_t{1000},
                             uint64_t{1} << 40, half - 1, half, half + 1, ~uint64_t{0}}) {
      const size_t count = 1 + rng() % 300, off = rng() % 3;
      std::vector<uint8_t> src((count + off) * es), got(count * es);
      fillRandom(src, t, rng);
      if (t == collInt64) std::memcpy(src.data() + off * es, &half, 8);  // -2^63
      launch(kernels::devabi::divideKernelName(t), kDims, static_cast<void*>(got.data()),
             static_cast<const void*>(src.data() + off * es), static_cast<uint64_t>(count), divisor);
      for (auto level : levels) {
        kernels::detail::setSimdLevelForTesting(level);
        std::vector<uint8_t> want(count * es);
        kernels::divide(want.data(), src.data() + off * es, count, t, divisor);
        ASSERT_TRUE(sameElements(t, got.data(), want.data(), count))
            << "type " << t << " divisor " << divisor << " level " << static_cast<int>(level);
      }
    }
  }
}

TEST(DeviceKernels, WidenMatchesCpu) {
  SimdGuard guard;
  std::mt19937_64 rng(19);
  const auto levels = cpuLevels();
  for (collDataType_t t : {collFloat32, collFloat16, collBfloat16}) {
    const size_t es = typeSize(t);
    for (size_t count : {size_t{1}, size_t{7}, size_t{64}, size_t{1000}}) {
      const size_t off = rng() % 3;
      std::vector<uint8_t> src((count + off) * es);
      fillRandom(src, t, rng);  // NaNs and infinities included
      std::vector<float> got(count, -1.0f);
      launch(kernels::devabi::widenKernelName(t), kDims, static_cast<void*>(got.data()),
             static_cast<const void*>(src.data() + off * es), static_cast<uint64_t>(count));
      for (auto level : levels) {
        kernels::detail::setSimdLevelForTesting(level);
        std::vector<float> want(count);
        kernels::convertToFloat(want.data(), src.data() + off * es, t, count);
        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), count * sizeof(float)))
            << "type " << t << " count " << count << " level " << static_cast<int>(level);
      }
    }
  }
}

TEST(DeviceKernels, CopyAnySizeAndAlignment) {
  std::mt19937_64 rng(17);
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{100}, size_t{1000}, size_t{4099}}) {
    for (size_t dOff = 0; dOff < 17; dOff += 3) {
      for (size_t sOff : {size_t{0}, size_t{1}, size_t{4}, size_t{8}, dOff}) {
        std::vector<uint8_t> src(bytes + 32), dst(bytes + 64, 0x5C);
        for (uint8_t& b : src) b = static_cast<uint8_t>(rng());
        // 16-byte aligned bases, so the offsets decide the word size.
        uint8_t* d = dst.data() + (16 - reinterpret_cast<uintptr_t>(dst.data()) % 16) % 16 + dOff;
        const uint8_t* s = src.data() + (16 - reinterpret_cast<uintptr_t>(src.data()) % 16) % 16 + sOff;
        if (s + bytes > src.data() + src.size()) continue;
        std::vector<uint8_t> before = dst;
        launch(kernels::devabi::kCopyKernel, kDims, static_cast<void*>(d), static_cast<const void*>(s),
               static_cast<uint64_t>(bytes));
        ASSERT_EQ(0, std::memcmp(d, s, bytes)) << bytes << " bytes, offsets " << dOff << "/" << sOff;
        for (size_t i = 0; i < dst.size(); ++i) {
          if (dst.data() + i < d || dst.data() + i >= d + bytes) {
            ASSERT_EQ(dst[i], before[i]) << "byte " << i;
          }
        }
      }
    }
  }
}

TEST(DeviceKernels, CountMismatchesComparesBytes) {
  std::mt19937_64 rng(19);
  for (collDataType_t t : kAllTypes) {
    const size_t es = typeSize(t);
    const size_t count = 1 + rng() % 500;
    std::vector<uint8_t> want(count * es);
    fillRandom(want, t, rng);
    std::vector<uint8_t> got = want;
    unsigned long long expected = 0;
    for (size_t i = 0; i < count; ++i) {
      if (rng() % 5 == 0) {
        got[i * es + rng() % es] ^= static_cast<uint8_t>(1u << (rng() % 8));
        ++expected;
      }
    }
    unsigned long long counter = 3;  // adds to what is there
    launch(kernels::devabi::countMismatchKernelName(t), kDims, static_cast<const void*>(got.data()),
           static_cast<const void*>(want.data()), static_cast<uint64_t>(count), &counter);
    EXPECT_EQ(counter, 3 + expected) << "type " << t;
  }
}

TEST(DeviceKernels, UntranslatablePointerIsRefused) {
  HostKernel k = findHostKernel(kernels::devabi::reduceKernelName(collFloat32));
  ASSERT_NE(k, nullptr);
  float a[4] = {1, 2, 3, 4}, out[4] = {};
  DevSources ds{};
  ds.p[0] = a;
  ds.p[1] = reinterpret_cast<const void*>(uintptr_t{0xdead0000});
  ds.n = 2;
  void* dst = out;
  uint64_t count = 4;
  int op = collSum;
  void* params[] = {&dst, &ds, &count, &op};
  auto onlyHost = [](const void* p) -> void* {
    return reinterpret_cast<uintptr_t>(p) == 0xdead0000 ? nullptr : const_cast<void*>(p);
  };
  EXPECT_FALSE(k(kDims, params, onlyHost));
  EXPECT_EQ(out[0], 0.0f);  // nothing ran
  ds.n = 1;                 // the unused slot is not looked at
  EXPECT_TRUE(k(kDims, params, onlyHost));
  EXPECT_EQ(out[3], 4.0f);
}

// ---- the 4-bit quantization wrappers against the CPU kernels -------------------------------------

std::vector<uint8_t> encodeFloats(const std::vector<float>& v, collDataType_t t) {
  std::vector<uint8_t> out(v.size() * typeSize(t));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == collFloat32) {
      std::memcpy(&out[4 * i], &v[i], 4);
    } else {
      const uint16_t h = t == collFloat16 ? kernels::floatToHalf(v[i]) : kernels::floatToBfloat16(v[i]);
      std::memcpy(&out[2 * i], &h, 2);
    }
  }
  return out;
}

TEST(DeviceKernels, QuantizeWrappersMatchCpu) {
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const LaunchDims dims{{2, 1, 1}, {64, 1, 1}};
  for (size_t n : {size_t{5}, size_t{300}, size_t{1100}}) {
    for (int b : {32, 64, 128, 256}) {
      for (collDataType_t t : {collFloat32, collFloat16, collBfloat16}) {
        for (int mode = 0; mode < 4; ++mode) {
          const bool stochastic = mode & 1, withRes = mode & 2;
          std::vector<float> x(n);
          for (float& v : x) v = nd(rng) * std::exp2(static_cast<float>(static_cast<int>(rng() % 9) - 4));
          if (n > 2 * static_cast<size_t>(b)) x[rng() % n] = std::numeric_limits<float>::quiet_NaN();
          const std::vector<uint8_t> in = encodeFloats(x, t);
          std::vector<float> res0(n);
          for (float& r : res0) r = 0.01f * nd(rng);
          kernels::QuantParams p;
          p.blockSize = b;
          p.stochastic = stochastic;
          p.seed = (static_cast<uint64_t>(rng()) << 32) | rng();
          p.step = rng();
          p.rank = rng() % 64;
          const uint64_t first = static_cast<uint64_t>(rng() % 1000) * static_cast<uint64_t>(b);
          std::vector<uint8_t> qCpu(kernels::quantizedBytes(n, b)), qDev(qCpu.size(), 0xCD);
          std::vector<float> resCpu = res0, resDev = res0;
          kernels::quantize4(qCpu.data(), in.data(), t, n, p, first, withRes ? resCpu.data() : nullptr);
          const DevQuantParams dp{static_cast<uint32_t>(p.seed), static_cast<uint32_t>(p.seed >> 32), p.rank,
                                  static_cast<uint32_t>(p.step)};
          const bool vec = (mode + b / 32) % 2 == 0;  // the vector paths need 16-byte aligned buffers
          launch(kernels::devabi::quantize4KernelName(t, stochastic, withRes), dims, qDev.data(),
                 static_cast<const void*>(in.data()), static_cast<uint64_t>(n), b, dp, first,
                 withRes ? resDev.data() : static_cast<float*>(nullptr), vec, vec, true);
          const std::string what = "n=" + std::to_string(n) + " B=" + std::to_string(b) + " type=" + std::to_string(t) +
                                   " mode=" + std::to_string(mode);
          ASSERT_EQ(qDev, qCpu) << what;
          ASSERT_EQ(0, std::memcmp(resDev.data(), resCpu.data(), n * 4)) << what;
          for (collDataType_t ot : {collFloat32, collFloat16, collBfloat16}) {
            std::vector<uint8_t> oCpu(n * typeSize(ot)), oDev(oCpu.size());
            kernels::dequantize4(oCpu.data(), ot, qCpu.data(), n, b);
            launch(kernels::devabi::dequantize4KernelName(ot), dims, static_cast<void*>(oDev.data()),
                   static_cast<const uint8_t*>(qCpu.data()), static_cast<uint64_t>(n), b, vec, true);
            ASSERT_EQ(oDev, oCpu) << what << " dequantize to " << ot;
          }
          std::vector<float> accCpu(n, 0.75f), accDev(n, 0.75f);
          kernels::dequantizeAccumulate4(accCpu.data(), qCpu.data(), n, b);
          launch(kernels::devabi::kDequantizeAccumulate4Kernel, dims, accDev.data(),
                 static_cast<const uint8_t*>(qCpu.data()), static_cast<uint64_t>(n), b, vec, true);
          ASSERT_EQ(0, std::memcmp(accDev.data(), accCpu.data(), n * 4)) << what << " accumulate";
        }
      }
    }
  }
}

}  // namespace
}  // namespace coll
