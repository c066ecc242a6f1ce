// Tests for src/kernels: every type x op against an independent reference (exact integers,
// same-order float arithmetic, _Float16 / hand-rolled bfloat16 rounding, table-search float8
// rounding against a float64 reference), each SIMD level against the portable one, conversions,
// rounding once, divide, scale, NaN/inf, aliasing, and a latency print.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "src/kernels/dispatch.h"
#include "src/kernels/reduce.h"

namespace coll::kernels {
namespace {

using detail::SimdLevel;

struct TypeInfo {
  collDataType_t dtype;
  size_t size;
  const char* name;
};

const TypeInfo kTypes[] = {
    {collInt8, 1, "int8"},         {collUint8, 1, "uint8"},     {collInt32, 4, "int32"},
    {collUint32, 4, "uint32"},     {collInt64, 8, "int64"},     {collUint64, 8, "uint64"},
    {collFloat16, 2, "float16"},   {collFloat32, 4, "float32"}, {collFloat64, 8, "float64"},
    {collBfloat16, 2, "bfloat16"},
};
const TypeInfo kFp8Types[] = {{collFloat8e4m3, 1, "float8e4m3"}, {collFloat8e5m2, 1, "float8e5m2"}};
const collRedOp_t kOps[] = {collSum, collProd, collMax, collMin};
const char* opName(collRedOp_t op) {
  switch (op) {
    case collSum: return "sum";
    case collProd: return "prod";
    case collMax: return "max";
    case collMin: return "min";
    default: return "?";
  }
}
const size_t kCounts[] = {0, 1, 7, 31, 64, 1000, 4099};

// ---- reference conversions (independent of the code under test) --------------------------------

#if defined(__clang__) && __clang_major__ < 15
// clang 14 (Debian 12, the sanitizer build) has no x86 _Float16: the IEEE rules in double arithmetic,
// which is exact here (a half and a float both fit in a double's mantissa).
float refHalfToFloat(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const float sign = (h & 0x8000) ? -1.0f : 1.0f;
  if (e == 31) return m == 0 ? sign * std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  return sign * static_cast<float>(e == 0 ? std::ldexp(double(m), -24) : std::ldexp(double(1024 + m), e - 25));
}
uint16_t refFloatToHalf(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return sign | 0x7e00;
  const double a = std::fabs(double(f));
  if (a >= 65520.0) return sign | 0x7c00;  // at or past the tie between 65504 and 2^16: infinity
  if (a < 0x1p-14) return sign | static_cast<uint16_t>(std::nearbyint(a * 0x1p24));  // subnormal (or 0x400)
  int ex = 0;
  std::frexp(a, &ex);                                                       // a = fr * 2^ex, fr in [0.5, 1)
  const int q = static_cast<int>(std::nearbyint(std::ldexp(a, 11 - ex)));   // in [1024, 2048], ties to even
  return sign | static_cast<uint16_t>(((ex - 1 + 15) << 10) + (q - 1024));  // q = 2048 carries into the exponent
}
#else
float refHalfToFloat(uint16_t h) {
  _Float16 x;
  std::memcpy(&x, &h, 2);
  return static_cast<float>(x);
}
uint16_t refFloatToHalf(float f) {
  _Float16 x = static_cast<_Float16>(f);
  uint16_t h;
  std::memcpy(&h, &x, 2);
  return h;
}
#endif
float refBf16ToFloat(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Nearest of the two bfloat16 neighbours, measured in double; ties to the even one.
uint16_t refFloatToBf16(float f) {
  if (std::isnan(f)) return 0x7fc0;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t lo = static_cast<uint16_t>(u >> 16);
  if ((u & 0xffff) == 0) return lo;
  const uint16_t hi = static_cast<uint16_t>(lo + 1);  // away from zero in magnitude
  const double dlo = std::fabs(static_cast<double>(f) - refBf16ToFloat(lo));
  const double fhi = std::isinf(refBf16ToFloat(hi)) ? std::copysign(std::ldexp(1.0, 128), f) : refBf16ToFloat(hi);
  const double dhi = std::fabs(fhi - static_cast<double>(f));
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1) ? hi : lo;
}

// ---- reference reduction ------------------------------------------------------------------------

template <class A>
A refFloatOp(collRedOp_t op, A a, A b) {
  switch (op) {
    case collSum: return a + b;
    case collProd: return a * b;
    case collMax: return std::isnan(b) ? b : (std::isnan(a) ? a : (b > a ? b : a));
    default: return std::isnan(b) ? b : (std::isnan(a) ? a : (b < a ? b : a));
  }
}

template <class T>
T refIntOp(collRedOp_t op, T a, T b) {
  using U = std::make_unsigned_t<T>;
  // Exact in 128 bits, then reduced modulo 2^bits.
  const unsigned __int128 ua = static_cast<U>(a), ub = static_cast<U>(b);
  switch (op) {
    case collSum: return static_cast<T>(static_cast<U>(ua + ub));
    case collProd: return static_cast<T>(static_cast<U>(ua * ub));
    case collMax: return a > b ? a : b;
    default: return a < b ? a : b;
  }
}

template <class T>
T loadAt(const std::vector<uint8_t>& buf, size_t i) {
  T v;
  std::memcpy(&v, buf.data() + i * sizeof(T), sizeof(T));
  return v;
}
template <class T>
void storeAt(std::vector<uint8_t>& buf, size_t i, T v) {
  std::memcpy(buf.data() + i * sizeof(T), &v, sizeof(T));
}

template <class T>
void refIntReduce(std::vector<uint8_t>& out, const std::vector<std::vector<uint8_t>>& in, size_t count,
                  collRedOp_t op) {
  for (size_t i = 0; i < count; ++i) {
    T acc = loadAt<T>(in[0], i);
    for (size_t k = 1; k < in.size(); ++k) acc = refIntOp<T>(op, acc, loadAt<T>(in[k], i));
    storeAt<T>(out, i, acc);
  }
}

template <class T>
void refFloatReduce(std::vector<uint8_t>& out, const std::vector<std::vector<uint8_t>>& in, size_t count,
                    collRedOp_t op) {
  for (size_t i = 0; i < count; ++i) {
    T acc = loadAt<T>(in[0], i);
    for (size_t k = 1; k < in.size(); ++k) acc = refFloatOp<T>(op, acc, loadAt<T>(in[k], i));
    storeAt<T>(out, i, acc);
  }
}

void refHalfReduce(bool bf16, std::vector<uint8_t>& out, const std::vector<std::vector<uint8_t>>& in, size_t count,
                   collRedOp_t op) {
  auto toF = bf16 ? refBf16ToFloat : refHalfToFloat;
  auto fromF = bf16 ? refFloatToBf16 : refFloatToHalf;
  for (size_t i = 0; i < count; ++i) {
    float acc = toF(loadAt<uint16_t>(in[0], i));
    for (size_t k = 1; k < in.size(); ++k) acc = refFloatOp<float>(op, acc, toF(loadAt<uint16_t>(in[k], i)));
    storeAt<uint16_t>(out, i, fromF(acc));
  }
}

void refReduce(collDataType_t dtype, std::vector<uint8_t>& out, const std::vector<std::vector<uint8_t>>& in,
               size_t count, collRedOp_t op) {
  switch (dtype) {
    case collInt8: return refIntReduce<int8_t>(out, in, count, op);
    case collUint8: return refIntReduce<uint8_t>(out, in, count, op);
    case collInt32: return refIntReduce<int32_t>(out, in, count, op);
    case collUint32: return refIntReduce<uint32_t>(out, in, count, op);
    case collInt64: return refIntReduce<int64_t>(out, in, count, op);
    case collUint64: return refIntReduce<uint64_t>(out, in, count, op);
    case collFloat16: return refHalfReduce(false, out, in, count, op);
    case collBfloat16: return refHalfReduce(true, out, in, count, op);
    case collFloat32: return refFloatReduce<float>(out, in, count, op);
    case collFloat64: return refFloatReduce<double>(out, in, count, op);
    default: FAIL() << "bad dtype";
  }
}

bool isNanAt(collDataType_t dtype, const uint8_t* p) {
  switch (dtype) {
    case collFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return (h & 0x7fff) > 0x7c00;
    }
    case collBfloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return (h & 0x7fff) > 0x7f80;
    }
    case collFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return std::isnan(f);
    }
    case collFloat64: {
      double d;
      std::memcpy(&d, p, 8);
      return std::isnan(d);
    }
    case collFloat8e4m3: return (*p & 0x7f) == 0x7f;
    case collFloat8e5m2: return (*p & 0x7f) > 0x7c;
    default: return false;
  }
}

// Bitwise, except that any NaN matches any NaN when nanLoose (reference conversions may pick
// another payload).
::testing::AssertionResult sameElements(const TypeInfo& t, const uint8_t* got, const uint8_t* want, size_t count,
                                        bool nanLoose) {
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* g = got + i * t.size;
    const uint8_t* w = want + i * t.size;
    if (std::memcmp(g, w, t.size) == 0) continue;
    if (nanLoose && isNanAt(t.dtype, g) && isNanAt(t.dtype, w)) continue;
    std::string gs, ws;
    char buf[8];
    for (size_t b = t.size; b-- > 0;) {
      std::snprintf(buf, sizeof buf, "%02x", g[b]);
      gs += buf;
      std::snprintf(buf, sizeof buf, "%02x", w[b]);
      ws += buf;
    }
    return ::testing::AssertionFailure() << t.name << " element " << i << " of " << count << ": got 0x" << gs
                                         << " want 0x" << ws;
  }
  return ::testing::AssertionSuccess();
}

// Random inputs. withSpecials mixes in NaN, +-inf and -0 for floating types.
void fillRandom(const TypeInfo& t, std::vector<uint8_t>& buf, size_t count, std::mt19937_64& rng, bool withSpecials) {
  buf.assign(count * t.size, 0);
  std::uniform_int_distribution<int> small(-2000, 2000);
  std::uniform_int_distribution<int> pick(0, 31);
  for (size_t i = 0; i < count; ++i) {
    const int special = withSpecials ? pick(rng) : 99;
    switch (t.dtype) {
      case collFloat32: {
        float v = static_cast<float>(small(rng)) / 512.0f;
        if (special == 0) v = std::numeric_limits<float>::quiet_NaN();
        if (special == 1) v = std::numeric_limits<float>::infinity();
        if (special == 2) v = -std::numeric_limits<float>::infinity();
        if (special == 3) v = -0.0f;
        storeAt<float>(buf, i, v);
        break;
      }
      case collFloat64: {
        double v = static_cast<double>(small(rng)) / 4096.0 + static_cast<double>(rng() % 1000) * 1e-9;
        if (special == 0) v = std::numeric_limits<double>::quiet_NaN();
        if (special == 1) v = std::numeric_limits<double>::infinity();
        if (special == 2) v = -std::numeric_limits<double>::infinity();
        if (special == 3) v = -0.0;
        storeAt<double>(buf, i, v);
        break;
      }
      case collFloat16: {
        // Any finite half (subnormals and near-overflow values included).
        uint16_t h = static_cast<uint16_t>(rng());
        if ((h & 0x7c00) == 0x7c00) h &= 0xbfff;
        if (special == 0) h = 0x7e00;
        if (special == 1) h = 0x7c00;
        if (special == 2) h = 0xfc00;
        if (special == 3) h = 0x8000;
        storeAt<uint16_t>(buf, i, h);
        break;
      }
      case collBfloat16: {
        uint16_t h = static_cast<uint16_t>(rng());
        if ((h & 0x7f80) == 0x7f80) h &= 0xbfff;
        if (special == 0) h = 0x7fc0;
        if (special == 1) h = 0x7f80;
        if (special == 2) h = 0xff80;
        if (special == 3) h = 0x8000;
        storeAt<uint16_t>(buf, i, h);
        break;
      }
      default: {
        const uint64_t r = rng();
        std::memcpy(buf.data() + i * t.size, &r, t.size);
      }
    }
  }
}

class LevelGuard {
 public:
  explicit LevelGuard(SimdLevel level) { ok_ = detail::setSimdLevelForTesting(level); }
  ~LevelGuard() { detail::resetSimdLevelForTesting(); }
  bool ok() const { return ok_; }

 private:
  bool ok_;
};

std::vector<SimdLevel> supportedLevels() {
  std::vector<SimdLevel> levels;
  for (SimdLevel l : {SimdLevel::Sse2, SimdLevel::Avx2, SimdLevel::Avx512}) {
    if (detail::simdLevelSupported(l)) levels.push_back(l);
  }
  return levels;
}

// Runs reduceN (and reduce2 for n == 2) at the current level, with an element offset so pointers are
// not vector-aligned, and compares with the reference.
void checkAgainstReference(const TypeInfo& t, collRedOp_t op, size_t count, int n, size_t offset,
                           std::mt19937_64& rng) {
  std::vector<std::vector<uint8_t>> in(n);
  for (auto& b : in) fillRandom(t, b, count, rng, false);
  std::vector<uint8_t> want(count * t.size);
  refReduce(t.dtype, want, in, count, op);

  // Offset copies: element `offset` of each buffer is element 0 of the view.
  std::vector<std::vector<uint8_t>> shifted(n);
  std::vector<const void*> srcs(n);
  for (int k = 0; k < n; ++k) {
    shifted[k].assign((count + offset) * t.size, 0xAB);
    if (count > 0) std::memcpy(shifted[k].data() + offset * t.size, in[k].data(), count * t.size);
    srcs[k] = shifted[k].data() + offset * t.size;
  }
  // Guard bytes after dst catch overruns.
  std::vector<uint8_t> dst((count + offset + 8) * t.size, 0xCD);
  reduceN(dst.data() + offset * t.size, srcs.data(), n, count, t.dtype, op);
  EXPECT_TRUE(sameElements(t, dst.data() + offset * t.size, want.data(), count, true))
      << opName(op) << " n=" << n << " count=" << count << " level=" << simdLevel();
  for (size_t b = (count + offset) * t.size; b < dst.size(); ++b) ASSERT_EQ(dst[b], 0xCD) << "overrun";
  for (size_t b = 0; b < offset * t.size; ++b) ASSERT_EQ(dst[b], 0xCD) << "underrun";

  // In place: dst aliases srcs[0].
  std::vector<uint8_t> inplace = shifted[0];
  srcs[0] = inplace.data() + offset * t.size;
  reduceN(inplace.data() + offset * t.size, srcs.data(), n, count, t.dtype, op);
  EXPECT_TRUE(sameElements(t, inplace.data() + offset * t.size, want.data(), count, true))
      << "in-place " << opName(op) << " n=" << n << " count=" << count;

  if (n == 2) {
    std::vector<uint8_t> d2(count * t.size + 1);
    reduce2(d2.data(), shifted[0].data() + offset * t.size, shifted[1].data() + offset * t.size, count, t.dtype, op);
    EXPECT_TRUE(sameElements(t, d2.data(), want.data(), count, true)) << "reduce2 " << opName(op) << " " << count;
    std::vector<uint8_t> a = shifted[0], b = shifted[1];
    void* pa = a.data() + offset * t.size;
    void* pb = b.data() + offset * t.size;
    reduce2(pa, pa, pb, count, t.dtype, op);  // dst aliases a
    EXPECT_TRUE(sameElements(t, static_cast<uint8_t*>(pa), want.data(), count, true)) << "reduce2 dst==a";
    a = shifted[0];
    reduce2(pb, pa, pb, count, t.dtype, op);  // dst aliases b
    EXPECT_TRUE(sameElements(t, static_cast<uint8_t*>(pb), want.data(), count, true)) << "reduce2 dst==b";
    // Odd byte addresses: a transport may apply received bytes from anywhere in its own buffer
    // (UCX's eager messages follow its headers); UBSan builds check that no access assumes alignment.
    std::vector<uint8_t> oddA(count * t.size + 1), oddB(count * t.size + 3), oddDst(count * t.size + 5);
    if (count > 0) {
      std::memcpy(oddA.data() + 1, in[0].data(), count * t.size);
      std::memcpy(oddB.data() + 3, in[1].data(), count * t.size);
    }
    reduce2(oddDst.data() + 5, oddA.data() + 1, oddB.data() + 3, count, t.dtype, op);
    EXPECT_TRUE(sameElements(t, oddDst.data() + 5, want.data(), count, true)) << "reduce2 at odd addresses";
  }
}

TEST(Kernels, EveryTypeOpCountAndSourceCountMatchesReference) {
  for (SimdLevel level : supportedLevels()) {
    LevelGuard guard(level);
    ASSERT_TRUE(guard.ok());
    std::mt19937_64 rng(1234 + static_cast<int>(level));
    for (const TypeInfo& t : kTypes) {
      for (collRedOp_t op : kOps) {
        for (size_t count : kCounts) {
          for (int n = 1; n <= 8; ++n) {
            // Large counts only for a few source counts, to keep the test fast.
            if (count > 1000 && n != 2 && n != 3 && n != 8) continue;
            checkAgainstReference(t, op, count, n, (count + static_cast<size_t>(n)) % 3, rng);
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

// Every SIMD level must produce the same bits as the portable one, specials included.
TEST(Kernels, SimdLevelsMatchPortableBitForBit) {
  const auto levels = supportedLevels();
  std::printf("supported SIMD levels:");
  for (SimdLevel l : levels) std::printf(" %d", static_cast<int>(l));
  std::printf(" (default: %s)\n", simdLevel());
  std::mt19937_64 rng(99);
  std::vector<TypeInfo> all(std::begin(kTypes), std::end(kTypes));
  all.insert(all.end(), std::begin(kFp8Types), std::end(kFp8Types));
  for (const TypeInfo& t : all) {
    for (collRedOp_t op : kOps) {
      for (size_t count : {size_t{5}, size_t{67}, size_t{1029}}) {
        for (int n : {2, 3, 7}) {
          std::vector<std::vector<uint8_t>> in(n);
          std::vector<const void*> srcs(n);
          for (int k = 0; k < n; ++k) {
            fillRandom(t, in[k], count, rng, true);
            srcs[k] = in[k].data();
          }
          std::vector<uint8_t> base(count * t.size);
          {
            LevelGuard g(SimdLevel::Sse2);
            reduceN(base.data(), srcs.data(), n, count, t.dtype, op);
          }
          for (SimdLevel l : levels) {
            LevelGuard g(l);
            std::vector<uint8_t> got(count * t.size);
            reduceN(got.data(), srcs.data(), n, count, t.dtype, op);
            EXPECT_TRUE(sameElements(t, got.data(), base.data(), count, false))
                << opName(op) << " n=" << n << " level " << simdLevel();
            if (n == 2) {
              reduce2(got.data(), srcs[0], srcs[1], count, t.dtype, op);
              EXPECT_TRUE(sameElements(t, got.data(), base.data(), count, false)) << "reduce2 " << opName(op);
            }
          }
        }
      }
    }
  }
}

TEST(Kernels, HalfConversionsMatchReference) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float got = halfToFloat(static_cast<uint16_t>(h));
    const float want = refHalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << h;
      // Round trip keeps NaN-ness and sign; quiet NaNs keep their payload.
      const uint16_t back = floatToHalf(got);
      ASSERT_EQ(back & 0x8000, h & 0x8000);
      ASSERT_GT(back & 0x7fff, 0x7c00);
      if (h & 0x200) {
        ASSERT_EQ(back, h);
      }
      continue;
    }
    ASSERT_EQ(std::memcmp(&got, &want, 4), 0) << std::hex << h;
    ASSERT_EQ(floatToHalf(got), h) << std::hex << h;  // every half round-trips exactly
  }
  // A sweep of float bit patterns (every exponent, many mantissas, both signs).
  for (uint64_t u = 0; u < 0x100000000ull; u += 997) {
    const uint32_t bits = static_cast<uint32_t>(u);
    float f;
    std::memcpy(&f, &bits, 4);
    const uint16_t got = floatToHalf(f);
    const uint16_t want = refFloatToHalf(f);
    if (std::isnan(f)) {
      ASSERT_GT(got & 0x7fff, 0x7c00) << std::hex << bits;
      continue;
    }
    ASSERT_EQ(got, want) << std::hex << bits;
  }
  // Ties: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 and goes to the even (1.0).
  EXPECT_EQ(floatToHalf(1.0f + 0x1p-11f), 0x3c00);
  EXPECT_EQ(floatToHalf(1.0f + 3 * 0x1p-11f), 0x3c02);
  EXPECT_EQ(floatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(floatToHalf(0x1p-25f), 0x0000);
  EXPECT_EQ(floatToHalf(0x1.000002p-25f), 0x0001);
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) uint16_t hwFloatToHalf(float f) { return static_cast<uint16_t>(_cvtss_sh(f, 0)); }
__attribute__((target("f16c"))) float hwHalfToFloat(uint16_t h) { return _cvtsh_ss(h); }

// The scalar conversions must agree with F16C bit for bit, NaN payloads included, because the
// SIMD paths convert with F16C and the scalar tails with our code.
TEST(Kernels, HalfConversionsMatchF16cIncludingNaNs) {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;  // CPUID: clang 14's __builtin_cpu_supports lacks "f16c"
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & bit_F16C) == 0) GTEST_SKIP() << "no F16C";
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float a = halfToFloat(static_cast<uint16_t>(h)), b = hwHalfToFloat(static_cast<uint16_t>(h));
    ASSERT_EQ(std::memcmp(&a, &b, 4), 0) << std::hex << h;
  }
  for (uint64_t u = 0; u < 0x100000000ull; u += 1009) {
    const uint32_t bits = static_cast<uint32_t>(u);
    float f;
    std::memcpy(&f, &bits, 4);
    ASSERT_EQ(floatToHalf(f), hwFloatToHalf(f)) << std::hex << bits;
  }
}
#endif

TEST(Kernels, Bfloat16ConversionsMatchReference) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = bfloat16ToFloat(static_cast<uint16_t>(b));
    const float want = refBf16ToFloat(static_cast<uint16_t>(b));
    ASSERT_EQ(std::memcmp(&f, &want, 4), 0);
    if (!std::isnan(f)) {
      ASSERT_EQ(floatToBfloat16(f), b);
    }
  }
  for (uint64_t u = 0; u < 0x100000000ull; u += 991) {
    const uint32_t bits = static_cast<uint32_t>(u);
    float f;
    std::memcpy(&f, &bits, 4);
    const uint16_t got = floatToBfloat16(f);
    if (std::isnan(f)) {
      ASSERT_GT(got & 0x7fff, 0x7f80) << "NaN must stay NaN " << std::hex << bits;
      ASSERT_EQ(got & 0x8000, (bits >> 16) & 0x8000);
      continue;
    }
    ASSERT_EQ(got, refFloatToBf16(f)) << std::hex << bits;
  }
  EXPECT_EQ(floatToBfloat16(1.0f + 0x1p-8f), 0x3f80);                     // tie to even
  EXPECT_EQ(floatToBfloat16(1.0f + 3 * 0x1p-8f), 0x3f82);                 // tie to even (up)
  EXPECT_EQ(floatToBfloat16(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to inf
  uint32_t snan = 0x7f800001u;                                            // NaN whose payload sits below the kept bits
  float fs;
  std::memcpy(&fs, &snan, 4);
  EXPECT_GT(floatToBfloat16(fs) & 0x7fff, 0x7f80);
}

// reduceN accumulates every source in float32 and rounds once: per-step rounding would lose the
// two half-ulp contributions.
TEST(Kernels, HalfAndBfloat16RoundOnce) {
  for (SimdLevel level : supportedLevels()) {
    LevelGuard guard(level);
    for (size_t count : {size_t{1}, size_t{40}}) {  // scalar tail and vector body
      std::vector<uint16_t> one(count, 0x3c00), tiny(count, floatToHalf(0x1p-11f)), out(count);
      const void* srcs[3] = {one.data(), tiny.data(), tiny.data()};
      reduceN(out.data(), srcs, 3, count, collFloat16, collSum);
      for (uint16_t v : out) EXPECT_EQ(v, 0x3c01) << simdLevel();  // 1 + 2^-10

      std::vector<uint16_t> bone(count, 0x3f80), btiny(count, floatToBfloat16(0x1p-8f));
      const void* bsrcs[3] = {bone.data(), btiny.data(), btiny.data()};
      reduceN(out.data(), bsrcs, 3, count, collBfloat16, collSum);
      for (uint16_t v : out) EXPECT_EQ(v, 0x3f81) << simdLevel();  // 1 + 2^-7

      // Intermediate overflow of the half range is fine as long as the final value fits.
      std::vector<uint16_t> big(count, floatToHalf(60000.0f)), negbig(count, floatToHalf(-60000.0f));
      const void* osrcs[3] = {big.data(), big.data(), negbig.data()};
      reduceN(out.data(), osrcs, 3, count, collFloat16, collSum);
      for (uint16_t v : out) EXPECT_EQ(halfToFloat(v), 60000.0f) << simdLevel();
    }
  }
}

// NaN propagates through max/min (unlike C fmax); inf arithmetic follows IEEE.
TEST(Kernels, NanAndInfHandling) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (SimdLevel level : supportedLevels()) {
    LevelGuard guard(level);
    for (size_t count : {size_t{1}, size_t{64}}) {
      std::vector<float> a(count), b(count), out(count);
      auto run = [&](float x, float y, collRedOp_t op) {
        std::fill(a.begin(), a.end(), x);
        std::fill(b.begin(), b.end(), y);
        reduce2(out.data(), a.data(), b.data(), count, collFloat32, op);
        return out[count - 1];
      };
      EXPECT_TRUE(std::isnan(run(nan, 1.0f, collMax)));
      EXPECT_TRUE(std::isnan(run(1.0f, nan, collMax)));
      EXPECT_TRUE(std::isnan(run(nan, 1.0f, collMin)));
      EXPECT_TRUE(std::isnan(run(1.0f, nan, collMin)));
      EXPECT_TRUE(std::isnan(run(inf, -inf, collSum)));
      EXPECT_TRUE(std::isnan(run(nan, 2.0f, collSum)));
      EXPECT_EQ(run(inf, 1.0f, collSum), inf);
      EXPECT_EQ(run(-inf, 1.0f, collMax), 1.0f);
      EXPECT_EQ(run(-inf, 1.0f, collMin), -inf);
      EXPECT_EQ(run(inf, 0.5f, collProd), inf);
      // Equal operands (+0 / -0): the earlier one wins.
      EXPECT_TRUE(std::signbit(run(-0.0f, 0.0f, collMax)));
      EXPECT_FALSE(std::signbit(run(0.0f, -0.0f, collMin)));

      std::vector<uint16_t> ha(count, 0x7e00), hb(count, 0x3c00), hout(count);
      reduce2(hout.data(), hb.data(), ha.data(), count, collFloat16, collMax);
      EXPECT_GT(hout[0] & 0x7fff, 0x7c00) << simdLevel();
      std::vector<uint16_t> ba(count, 0x7fc0), bb(count, 0x3f80);
      reduce2(hout.data(), bb.data(), ba.data(), count, collBfloat16, collMin);
      EXPECT_GT(hout[0] & 0x7fff, 0x7f80) << simdLevel();
    }
  }
}

template <class T>
void checkIntDivide(uint64_t divisor, std::mt19937_64& rng) {
  const size_t count = 77;
  std::vector<T> src(count), dst(count);
  for (auto& v : src) v = static_cast<T>(rng());
  src[0] = std::numeric_limits<T>::min();
  src[1] = std::numeric_limits<T>::max();
  src[2] = static_cast<T>(std::is_signed_v<T> ? -7 : 7);
  divide(
      dst.data(), src.data(), count,
      [] {
        if constexpr (std::is_same_v<T, int8_t>) return collInt8;
        else if constexpr (std::is_same_v<T, uint8_t>) return collUint8;
        else if constexpr (std::is_same_v<T, int32_t>) return collInt32;
        else if constexpr (std::is_same_v<T, uint32_t>) return collUint32;
        else if constexpr (std::is_same_v<T, int64_t>) return collInt64;
        else return collUint64;
      }(),
      divisor);
  for (size_t i = 0; i < count; ++i) {
    const __int128 want = static_cast<__int128>(src[i]) / static_cast<__int128>(divisor);  // truncates
    ASSERT_EQ(static_cast<__int128>(dst[i]), want) << i << " divisor " << divisor;
  }
  if (std::is_signed_v<T> && divisor == 2) {
    EXPECT_EQ(dst[2], static_cast<T>(-3));  // toward zero
  }
}

TEST(Kernels, DivideEveryType) {
  std::mt19937_64 rng(7);
  for (SimdLevel level : supportedLevels()) {
    LevelGuard guard(level);
    for (uint64_t d : {uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{7}, uint64_t{1000}, uint64_t{1} << 63}) {
      checkIntDivide<int8_t>(d, rng);
      checkIntDivide<uint8_t>(d, rng);
      checkIntDivide<int32_t>(d, rng);
      checkIntDivide<uint32_t>(d, rng);
      checkIntDivide<int64_t>(d, rng);
      checkIntDivide<uint64_t>(d, rng);
    }
    for (size_t count : {size_t{3}, size_t{100}}) {
      std::vector<float> f(count), fo(count);
      std::vector<double> dd(count), dout(count);
      std::vector<uint16_t> h(count), ho(count), b(count), bo(count);
      for (size_t i = 0; i < count; ++i) {
        f[i] = static_cast<float>(i) * 1.37f - 20.0f;
        dd[i] = static_cast<double>(i) * 1.37 - 20.0;
        h[i] = floatToHalf(f[i]);
        b[i] = floatToBfloat16(f[i]);
      }
      divide(fo.data(), f.data(), count, collFloat32, 3);
      divide(dout.data(), dd.data(), count, collFloat64, 3);
      divide(ho.data(), h.data(), count, collFloat16, 3);
      divide(bo.data(), b.data(), count, collBfloat16, 3);
      for (size_t i = 0; i < count; ++i) {
        EXPECT_EQ(fo[i], f[i] / 3.0f);
        EXPECT_EQ(dout[i], dd[i] / 3.0);
        EXPECT_EQ(ho[i], refFloatToHalf(refHalfToFloat(h[i]) / 3.0f)) << i;
        EXPECT_EQ(bo[i], refFloatToBf16(refBf16ToFloat(b[i]) / 3.0f)) << i;
      }
      divide(fo.data(), fo.data(), count, collFloat32, 1);  // in place, divisor 1: identity
      for (size_t i = 0; i < count; ++i) EXPECT_EQ(fo[i], f[i] / 3.0f);
    }
  }
}

// Sums of float32 agree with a float64 reference within the left-to-right rounding bound.
TEST(Kernels, Float32SumCloseToFloat64Reference) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  const size_t count = 1000;
  const int n = 8;
  std::vector<std::vector<float>> in(n, std::vector<float>(count));
  std::vector<const void*> srcs(n);
  for (int k = 0; k < n; ++k) {
    for (auto& v : in[k]) v = static_cast<float>(dist(rng));
    srcs[k] = in[k].data();
  }
  std::vector<float> out(count);
  reduceN(out.data(), srcs.data(), n, count, collFloat32, collSum);
  for (size_t i = 0; i < count; ++i) {
    double exact = 0, mag = 0;
    for (int k = 0; k < n; ++k) {
      exact += in[k][i];
      mag += std::fabs(in[k][i]);
    }
    EXPECT_NEAR(out[i], exact, n * mag * 0x1p-24);
  }
}

// ---- float8 --------------------------------------------------------------------------------------

// Independent model of an OCP float8 format: values from the field definitions with ldexp, rounding
// by searching the sorted table of finite magnitudes, in double.
struct Fp8Ref {
  bool e4m3;
  double mag[128];  // value of each sign-less code (NaN / inf where the format says so)
  uint8_t maxCode;  // largest finite sign-less code
  const char* name;

  explicit Fp8Ref(bool isE4m3) : e4m3(isE4m3), maxCode(isE4m3 ? 0x7e : 0x7b), name(isE4m3 ? "e4m3" : "e5m2") {
    for (int c = 0; c < 128; ++c) mag[c] = decodeMag(static_cast<uint8_t>(c));
  }
  double decodeMag(uint8_t c) const {
    const int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
    const int e = c >> mbits, m = c & ((1 << mbits) - 1), emax = e4m3 ? 15 : 31;
    if (e4m3 && e == emax && m == 7) return std::numeric_limits<double>::quiet_NaN();
    if (!e4m3 && e == emax)
      return m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
    if (e == 0) return std::ldexp(m, 1 - bias - mbits);
    return std::ldexp((1 << mbits) + m, e - bias - mbits);
  }
  double decode(uint8_t b) const { return (b & 0x80) ? -mag[b & 0x7f] : mag[b & 0x7f]; }
  bool isNan(uint8_t b) const { return std::isnan(mag[b & 0x7f]); }
  // Round to nearest, ties to the even code (its last bit is the mantissa's last bit).
  uint8_t encode(double x) const {
    const uint8_t sign = std::signbit(x) ? 0x80 : 0;
    if (std::isnan(x)) return sign | (e4m3 ? 0x7f : 0x7e);
    const double a = std::fabs(x);
    if (e4m3 && a >= 448.0) return sign | 0x7e;     // satfinite
    if (!e4m3 && a >= 61440.0) return sign | 0x7c;  // IEEE overflow
    int lo = 0;
    while (lo < maxCode && mag[lo + 1] <= a) ++lo;
    if (lo == maxCode) return sign | lo;
    const double mid = (mag[lo] + mag[lo + 1]) / 2;  // exact: few significant bits
    int c = a < mid ? lo : (a > mid ? lo + 1 : ((lo & 1) ? lo + 1 : lo));
    return static_cast<uint8_t>(sign | c);
  }
};

const Fp8Ref& fp8Ref(collDataType_t dtype) {
  static const Fp8Ref e4(true), e5(false);
  return dtype == collFloat8e4m3 ? e4 : e5;
}
float fp8ToFloatUnderTest(collDataType_t dtype, uint8_t b) {
  return dtype == collFloat8e4m3 ? fp8e4m3ToFloat(b) : fp8e5m2ToFloat(b);
}
uint8_t floatToFp8UnderTest(collDataType_t dtype, float f) {
  return dtype == collFloat8e4m3 ? floatToFp8e4m3(f) : floatToFp8e5m2(f);
}

TEST(Kernels, Fp8EveryCodeRoundTripsExactly) {
  for (const TypeInfo& t : kFp8Types) {
    const Fp8Ref& ref = fp8Ref(t.dtype);
    int nans = 0, infs = 0;
    for (int c = 0; c < 256; ++c) {
      const uint8_t b = static_cast<uint8_t>(c);
      const float got = fp8ToFloatUnderTest(t.dtype, b);
      const uint8_t back = floatToFp8UnderTest(t.dtype, got);
      if (ref.isNan(b)) {
        ++nans;
        ASSERT_TRUE(std::isnan(got)) << t.name << " " << c;
        ASSERT_EQ(std::signbit(got), (b & 0x80) != 0) << t.name << " " << c;
        ASSERT_TRUE(ref.isNan(back)) << t.name << " " << c;
        ASSERT_EQ(back & 0x80, b & 0x80);
        if (t.dtype == collFloat8e4m3 || (b & 0x02)) {
          ASSERT_EQ(back, b) << t.name << " " << c;  // the e4m3 NaN and quiet e5m2 NaNs are exact
        }
        continue;
      }
      if (std::isinf(got)) ++infs;
      const float want = static_cast<float>(ref.decode(b));
      ASSERT_EQ(static_cast<double>(want), ref.decode(b));  // every finite fp8 value is a float
      ASSERT_EQ(std::memcmp(&got, &want, 4), 0) << t.name << " code " << c << " got " << got << " want " << want;
      ASSERT_EQ(back, b) << t.name << " code " << c;
    }
    EXPECT_EQ(nans, t.dtype == collFloat8e4m3 ? 2 : 6) << t.name;
    EXPECT_EQ(infs, t.dtype == collFloat8e4m3 ? 0 : 2) << t.name;
  }
  EXPECT_EQ(fp8e4m3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(fp8e4m3ToFloat(0x01), 0x1p-9f);
  EXPECT_EQ(fp8e4m3ToFloat(0x08), 0x1p-6f);
  EXPECT_EQ(fp8e5m2ToFloat(0x7b), 57344.0f);
  EXPECT_EQ(fp8e5m2ToFloat(0x01), 0x1p-16f);
  EXPECT_EQ(fp8e5m2ToFloat(0x04), 0x1p-14f);
  EXPECT_EQ(fp8e5m2ToFloat(0xfc), -std::numeric_limits<float>::infinity());
}

TEST(Kernels, Fp8RoundingMatchesReference) {
  for (const TypeInfo& t : kFp8Types) {
    const Fp8Ref& ref = fp8Ref(t.dtype);
    auto check = [&](float f) -> ::testing::AssertionResult {
      const uint8_t got = floatToFp8UnderTest(t.dtype, f);
      if (std::isnan(f)) {
        if (ref.isNan(got) && (got & 0x80) == (std::signbit(f) ? 0x80 : 0)) return ::testing::AssertionSuccess();
        return ::testing::AssertionFailure() << t.name << " NaN became 0x" << std::hex << int{got};
      }
      const uint8_t want = ref.encode(f);
      if (got == want) return ::testing::AssertionSuccess();
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      return ::testing::AssertionFailure() << t.name << " float " << f << " (0x" << std::hex << bits << "): got 0x"
                                           << int{got} << " want 0x" << int{want};
    };
    // A sweep of float bit patterns: every exponent, many mantissas, both signs, NaNs, infinities.
    for (uint64_t u = 0; u < 0x100000000ull; u += 2039) {
      const uint32_t bits = static_cast<uint32_t>(u);
      float f;
      std::memcpy(&f, &bits, 4);
      ASSERT_TRUE(check(f));
    }
    // Every rounding boundary: each pair of neighbours, their midpoint (a tie) and the floats
    // either side of it, for both signs; and the overflow boundary.
    for (int c = 0; c < ref.maxCode; ++c) {
      for (double sgn : {1.0, -1.0}) {
        const float lo = static_cast<float>(sgn * ref.mag[c]), hi = static_cast<float>(sgn * ref.mag[c + 1]);
        const float mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);
        for (float f : {lo, hi, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, static_cast<float>(sgn) * 1e30f)})
          ASSERT_TRUE(check(f));
      }
    }
    for (float f :
         {448.0f, 464.0f, 480.0f, 57344.0f, 61439.996f, 61440.0f, 65536.0f, 1e30f, std::numeric_limits<float>::max(),
          std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min(), 0.0f}) {
      ASSERT_TRUE(check(f));
      ASSERT_TRUE(check(-f));
    }
  }
  // The rules spelled out.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(floatToFp8e4m3(1.0f + 0x1p-4f), 0x38);      // tie to even (1.0)
  EXPECT_EQ(floatToFp8e4m3(1.0f + 3 * 0x1p-4f), 0x3a);  // tie to even (1.25)
  EXPECT_EQ(floatToFp8e4m3(0x1p-10f), 0x00);            // half the smallest subnormal: even zero
  EXPECT_EQ(floatToFp8e4m3(0x1.000002p-10f), 0x01);
  EXPECT_EQ(floatToFp8e4m3(3 * 0x1p-10f), 0x02);  // subnormal tie to even
  EXPECT_EQ(floatToFp8e4m3(0x1.ep-7f), 0x08);     // rounds up into the smallest normal
  EXPECT_EQ(floatToFp8e4m3(-0.0f), 0x80);
  EXPECT_EQ(floatToFp8e4m3(470.0f), 0x7e);  // satfinite, never the NaN pattern
  EXPECT_EQ(floatToFp8e4m3(inf), 0x7e);
  EXPECT_EQ(floatToFp8e4m3(-inf), 0xfe);
  EXPECT_EQ(floatToFp8e4m3(nan), 0x7f);
  EXPECT_EQ(floatToFp8e4m3(-nan), 0xff);
  EXPECT_EQ(floatToFp8e5m2(1.0f + 0x1p-3f), 0x3c);
  EXPECT_EQ(floatToFp8e5m2(1.0f + 3 * 0x1p-3f), 0x3e);
  EXPECT_EQ(floatToFp8e5m2(0x1p-17f), 0x00);
  EXPECT_EQ(floatToFp8e5m2(0x1.000002p-17f), 0x01);
  EXPECT_EQ(floatToFp8e5m2(61439.996f), 0x7b);
  EXPECT_EQ(floatToFp8e5m2(61440.0f), 0x7c);  // max + half an ulp ties to even: inf
  EXPECT_EQ(floatToFp8e5m2(-inf), 0xfc);
  uint32_t snanBits = 0x7f800001u;  // payload below the kept bits must not turn into inf
  float snan;
  std::memcpy(&snan, &snanBits, 4);
  EXPECT_GT(floatToFp8e5m2(snan) & 0x7f, 0x7c);
}

// Per element: same-order float32 accumulation (the contract) and a float64 one (exact for these
// inputs: at most 8 sources of 3-4 significant bits). Where float32 was exact at every step the
// result must be the float64 value rounded once; otherwise it is the float32 value rounded once.
size_t fp8Reference(collDataType_t dtype, collRedOp_t op, const std::vector<std::vector<uint8_t>>& in, size_t count,
                    std::vector<uint8_t>& want) {
  const Fp8Ref& ref = fp8Ref(dtype);
  size_t inexact = 0;
  want.assign(count, 0);
  for (size_t i = 0; i < count; ++i) {
    if (in.size() == 1) {  // a copy
      want[i] = in[0][i];
      continue;
    }
    double d = ref.decode(in[0][i]);
    float f = static_cast<float>(d);
    bool exact = true;
    for (size_t k = 1; k < in.size(); ++k) {
      const double x = ref.decode(in[k][i]);
      d = refFloatOp<double>(op, d, x);
      f = refFloatOp<float>(op, f, static_cast<float>(x));
      if (!(static_cast<double>(f) == d || (std::isnan(d) && std::isnan(f)))) exact = false;
    }
    if (!exact) ++inexact;
    want[i] = ref.encode(exact ? d : static_cast<double>(f));
  }
  return inexact;
}

void fillFp8(std::vector<uint8_t>& buf, size_t count, std::mt19937_64& rng, bool anyCode) {
  buf.resize(count);
  // anyCode: all 256 codes (NaN, inf, subnormals, extremes). Otherwise codes of moderate
  // magnitude, where sums and products stay in range and float32 is mostly exact.
  for (auto& b : buf)
    b = anyCode ? static_cast<uint8_t>(rng()) : static_cast<uint8_t>((rng() & 0x80) | (0x20 + rng() % 0x30));
}

TEST(Kernels, Fp8ReduceMatchesFloat64ReferenceRoundedOnce) {
  size_t inexactTotal = 0, total = 0;
  for (SimdLevel level : supportedLevels()) {
    LevelGuard guard(level);
    ASSERT_TRUE(guard.ok());
    std::mt19937_64 rng(4242 + static_cast<int>(level));
    for (const TypeInfo& t : kFp8Types) {
      for (collRedOp_t op : kOps) {
        for (size_t count : {size_t{1}, size_t{7}, size_t{64}, size_t{1000}}) {
          for (int n = 1; n <= 8; ++n) {
            for (bool anyCode : {true, false}) {
              std::vector<std::vector<uint8_t>> in(n);
              std::vector<const void*> srcs(n);
              for (int k = 0; k < n; ++k) {
                fillFp8(in[k], count, rng, anyCode);
                srcs[k] = in[k].data();
              }
              std::vector<uint8_t> want;
              inexactTotal += fp8Reference(t.dtype, op, in, count, want);
              total += count;
              std::vector<uint8_t> got(count + 4, 0xCD);
              reduceN(got.data(), srcs.data(), n, count, t.dtype, op);
              ASSERT_TRUE(sameElements(t, got.data(), want.data(), count, true))
                  << opName(op) << " n=" << n << " count=" << count << " level=" << simdLevel();
              for (size_t b = count; b < got.size(); ++b) ASSERT_EQ(got[b], 0xCD) << "overrun";
              std::vector<uint8_t> inplace = in[0];
              srcs[0] = inplace.data();
              reduceN(inplace.data(), srcs.data(), n, count, t.dtype, op);
              ASSERT_TRUE(sameElements(t, inplace.data(), want.data(), count, true)) << "in place";
              if (n == 2) {
                reduce2(got.data(), in[0].data(), in[1].data(), count, t.dtype, op);
                ASSERT_TRUE(sameElements(t, got.data(), want.data(), count, true)) << "reduce2 " << opName(op);
                std::vector<uint8_t> b = in[1];
                reduce2(b.data(), in[0].data(), b.data(), count, t.dtype, op);  // dst aliases b
                ASSERT_TRUE(sameElements(t, b.data(), want.data(), count, true)) << "reduce2 dst==b";
              }
            }
          }
        }
      }
    }
  }
  std::printf("fp8 reductions: %zu of %zu elements needed float32 rounding before the final one\n", inexactTotal,
              total);

  // Rounded once: rounding after each step would lose both half-ulp contributions.
  const uint8_t e4[3] = {0x38, floatToFp8e4m3(0x1p-4f), floatToFp8e4m3(0x1p-4f)};  // 1 + 1/16 + 1/16
  const uint8_t e5[3] = {0x3c, floatToFp8e5m2(0x1p-3f), floatToFp8e5m2(0x1p-3f)};  // 1 + 1/8 + 1/8
  uint8_t out = 0;
  const void* s4[3] = {&e4[0], &e4[1], &e4[2]};
  reduceN(&out, s4, 3, 1, collFloat8e4m3, collSum);
  EXPECT_EQ(fp8e4m3ToFloat(out), 1.125f);
  const void* s5[3] = {&e5[0], &e5[1], &e5[2]};
  reduceN(&out, s5, 3, 1, collFloat8e5m2, collSum);
  EXPECT_EQ(fp8e5m2ToFloat(out), 1.25f);
  // Intermediate values beyond the fp8 range are fine when the result fits (float32 accumulator).
  const uint8_t big[3] = {floatToFp8e4m3(448.0f), floatToFp8e4m3(448.0f), floatToFp8e4m3(-448.0f)};
  const void* sb[3] = {&big[0], &big[1], &big[2]};
  reduceN(&out, sb, 3, 1, collFloat8e4m3, collSum);
  EXPECT_EQ(fp8e4m3ToFloat(out), 448.0f);
  // Overflow of the result: e4m3 saturates, e5m2 goes to inf; inf inputs stay inf in e5m2.
  reduce2(&out, &big[0], &big[1], 1, collFloat8e4m3, collSum);
  EXPECT_EQ(out, 0x7e);
  const uint8_t e5max = 0x7b, e5inf = 0x7c, e5one = 0x3c;
  reduce2(&out, &e5max, &e5max, 1, collFloat8e5m2, collSum);
  EXPECT_EQ(out, 0x7c);
  reduce2(&out, &e5inf, &e5one, 1, collFloat8e5m2, collMin);
  EXPECT_EQ(out, 0x3c);
  reduce2(&out, &e5inf, &e5one, 1, collFloat8e5m2, collSum);
  EXPECT_EQ(out, 0x7c);
  // NaN propagates through max.
  const uint8_t e4nan = 0x7f, e4one = 0x38;
  reduce2(&out, &e4one, &e4nan, 1, collFloat8e4m3, collMax);
  EXPECT_EQ(out & 0x7f, 0x7f);
  // The documented limit of float32 accumulation: 256 + 32 + 2^-16 is 288 in float32 (a tie, to
  // even), which then rounds to even 256; the exact sum would round up to 320.
  const uint8_t parts[3] = {floatToFp8e5m2(256.0f), floatToFp8e5m2(32.0f), 0x01};
  const void* sp[3] = {&parts[0], &parts[1], &parts[2]};
  reduceN(&out, sp, 3, 1, collFloat8e5m2, collSum);
  EXPECT_EQ(fp8e5m2ToFloat(out), 256.0f);
}

TEST(Kernels, Fp8DivideMatchesReference) {
  for (SimdLevel level : supportedLevels()) {
    LevelGuard guard(level);
    for (const TypeInfo& t : kFp8Types) {
      const Fp8Ref& ref = fp8Ref(t.dtype);
      std::vector<uint8_t> src(256), dst(256);
      for (int c = 0; c < 256; ++c) src[c] = static_cast<uint8_t>(c);
      for (uint64_t d : {uint64_t{0}, uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{7}, uint64_t{1000}}) {
        divide(dst.data(), src.data(), src.size(), t.dtype, d);
        const double dd = d == 0 ? 1.0 : static_cast<double>(d);
        for (int c = 0; c < 256; ++c) {
          const double exactQ = ref.decode(src[c]) / dd;
          // float64 reference rounded once; the float32 quotient rounds the same way here.
          const uint8_t want = ref.encode(exactQ);
          ASSERT_EQ(static_cast<float>(exactQ) == exactQ || std::isnan(exactQ) || std::isinf(exactQ) ||
                        want == ref.encode(static_cast<float>(ref.decode(src[c])) / static_cast<float>(dd)),
                    true);
          if (ref.isNan(want)) {
            ASSERT_TRUE(ref.isNan(dst[c])) << t.name << " " << c;
          } else {
            ASSERT_EQ(dst[c], want) << t.name << " code " << c << " / " << d << " level " << simdLevel();
          }
        }
        std::vector<uint8_t> inplace = src;
        divide(inplace.data(), inplace.data(), inplace.size(), t.dtype, d);
        for (int c = 0; c < 256; ++c) {
          if (!ref.isNan(dst[c])) {
            ASSERT_EQ(inplace[c], dst[c]);
          }
        }
      }
    }
  }
}

// ---- scale (PreMulSum) -----------------------------------------------------------------------------

// Independent model of the integer scalar conversion: truncate, clamp, NaN -> 0.
template <class T>
T refScalarToInt(double s) {
  if (std::isnan(s)) return 0;
  const long double t = std::trunc(static_cast<long double>(s));
  if (t <= static_cast<long double>(std::numeric_limits<T>::min())) return std::numeric_limits<T>::min();
  if (t >= static_cast<long double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  return static_cast<T>(t);
}

template <class T>
void checkIntScale(collDataType_t dtype, size_t count, std::mt19937_64& rng) {
  std::vector<T> src(count), dst(count + 1);
  for (auto& v : src) v = static_cast<T>(rng());
  if (count > 2) {
    src[0] = std::numeric_limits<T>::min();
    src[1] = std::numeric_limits<T>::max();
    src[2] = static_cast<T>(7);
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (double s : {3.0, -2.0, 2.9, -2.9, 0.0, 1.0, -1.0, 300.0, -300.0, 1e30, -1e30, 0x1p63, 0x1p64, nan}) {
    dst[count] = static_cast<T>(0x5a);
    scale(dst.data(), src.data(), count, dtype, s);
    const T m = refScalarToInt<T>(s);
    using U = std::make_unsigned_t<T>;
    for (size_t i = 0; i < count; ++i) {
      const T want = static_cast<T>(static_cast<U>(static_cast<unsigned __int128>(static_cast<U>(src[i])) *
                                                   static_cast<unsigned __int128>(static_cast<U>(m))));
      ASSERT_EQ(dst[i], want) << "scalar " << s << " element " << i << " of " << count;
    }
    ASSERT_EQ(dst[count], static_cast<T>(0x5a)) << "overrun";
  }
  // Exact cases spelled out.
  if (count > 2) {
    scale(dst.data(), src.data(), count, dtype, 2.9);
    EXPECT_EQ(dst[2], static_cast<T>(14));  // scalar truncated to 2 first, as NCCL's integer PreMulSum
    std::vector<T> inplace = src;
    scale(inplace.data(), inplace.data(), count, dtype, -1.0);
    EXPECT_EQ(inplace[2], static_cast<T>(std::is_signed_v<T> ? -7 : 0));  // unsigned clamps -1 to 0
  }
}

TEST(Kernels, ScaleEveryType) {
  std::mt19937_64 rng(31337);
  for (SimdLevel level : supportedLevels()) {
    LevelGuard guard(level);
    for (size_t count : {size_t{0}, size_t{1}, size_t{37}, size_t{1000}}) {
      checkIntScale<int8_t>(collInt8, count, rng);
      checkIntScale<uint8_t>(collUint8, count, rng);
      checkIntScale<int32_t>(collInt32, count, rng);
      checkIntScale<uint32_t>(collUint32, count, rng);
      checkIntScale<int64_t>(collInt64, count, rng);
      checkIntScale<uint64_t>(collUint64, count, rng);
      if (HasFatalFailure()) return;

      std::vector<float> f(count), fo(count);
      std::vector<double> d(count), dout(count);
      std::vector<uint16_t> h(count), ho(count), b(count), bo(count);
      std::vector<uint8_t> e4(count), e4o(count), e5(count), e5o(count);
      std::uniform_real_distribution<double> dist(-100.0, 100.0);
      for (size_t i = 0; i < count; ++i) {
        d[i] = dist(rng);
        f[i] = static_cast<float>(d[i]);
        h[i] = static_cast<uint16_t>(rng());
        b[i] = static_cast<uint16_t>(rng());
        e4[i] = static_cast<uint8_t>(rng());
        e5[i] = static_cast<uint8_t>(rng());
      }
      const Fp8Ref& r4 = fp8Ref(collFloat8e4m3);
      const Fp8Ref& r5 = fp8Ref(collFloat8e5m2);
      for (double s : {2.0, 0.5, 1.0 / 3.0, -1.7, 1e-3, 0.0, 1e6}) {
        const float sf = static_cast<float>(s);
        scale(fo.data(), f.data(), count, collFloat32, s);
        scale(dout.data(), d.data(), count, collFloat64, s);
        scale(ho.data(), h.data(), count, collFloat16, s);
        scale(bo.data(), b.data(), count, collBfloat16, s);
        scale(e4o.data(), e4.data(), count, collFloat8e4m3, s);
        scale(e5o.data(), e5.data(), count, collFloat8e5m2, s);
        const TypeInfo th{collFloat16, 2, "float16"}, tb{collBfloat16, 2, "bfloat16"};
        const TypeInfo t4{collFloat8e4m3, 1, "e4m3"}, t5{collFloat8e5m2, 1, "e5m2"};
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(fo[i], f[i] * sf) << i;
          ASSERT_EQ(dout[i], d[i] * s) << i;
          if (s == 2.0 || s == 0.5) {
            ASSERT_EQ(static_cast<double>(fo[i]), static_cast<double>(f[i]) * s);  // exact
          }
          // One rounding from the float32 product; the scalar is never rounded to the storage type.
          const uint16_t wh = refFloatToHalf(refHalfToFloat(h[i]) * sf);
          const uint16_t wb = refFloatToBf16(refBf16ToFloat(b[i]) * sf);
          const uint8_t w4 = r4.encode(static_cast<float>(r4.decode(e4[i])) * sf);
          const uint8_t w5 = r5.encode(static_cast<float>(r5.decode(e5[i])) * sf);
          ASSERT_TRUE(sameElements(th, reinterpret_cast<const uint8_t*>(&ho[i]), reinterpret_cast<const uint8_t*>(&wh),
                                   1, true))
              << "scalar " << s << " level " << simdLevel();
          ASSERT_TRUE(sameElements(tb, reinterpret_cast<const uint8_t*>(&bo[i]), reinterpret_cast<const uint8_t*>(&wb),
                                   1, true))
              << "scalar " << s << " level " << simdLevel();
          ASSERT_TRUE(sameElements(t4, &e4o[i], &w4, 1, true)) << "scalar " << s;
          ASSERT_TRUE(sameElements(t5, &e5o[i], &w5, 1, true)) << "scalar " << s;
        }
      }
      // In place.
      std::vector<float> fi = f;
      scale(fi.data(), fi.data(), count, collFloat32, -0.25);
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(fi[i], f[i] * -0.25f);
      std::vector<uint16_t> hi = h;
      scale(hi.data(), hi.data(), count, collFloat16, 3.0);
      scale(ho.data(), h.data(), count, collFloat16, 3.0);
      ASSERT_TRUE(hi == ho);  // not memcmp: count 0 leaves both null, which memcmp may not take
    }
    // The scalar is rounded to float32, not to the storage type: 3 * (1/3) is 1 in half, while a
    // half-rounded scalar (0.33325) would give 0.99951.
    uint16_t three = floatToHalf(3.0f), out = 0;
    scale(&out, &three, 1, collFloat16, 1.0 / 3.0);
    EXPECT_EQ(out, 0x3c00) << simdLevel();
    // Products beyond the fp8 range follow the overflow rules.
    uint8_t v = floatToFp8e4m3(300.0f), o8 = 0;
    scale(&o8, &v, 1, collFloat8e4m3, 2.0);
    EXPECT_EQ(o8, 0x7e);
    v = floatToFp8e5m2(40960.0f);
    scale(&o8, &v, 1, collFloat8e5m2, 2.0);
    EXPECT_EQ(o8, 0x7c);
  }
}

// Latency of the 8-byte all-reduce's kernel call: a 2-element float32 reduce2.
TEST(Kernels, SmallReduceLatency) {
  float a[2] = {1.0f, 2.0f}, b[2] = {3.0f, 4.0f}, d[2];
  const int iters = 2000000;
  for (SimdLevel level : supportedLevels()) {
    LevelGuard guard(level);
    reduce2(d, a, b, 2, collFloat32, collSum);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) {
      reduce2(d, a, b, 2, collFloat32, collSum);
      asm volatile("" : : "r"(d) : "memory");
    }
    const auto t1 = std::chrono::steady_clock::now();
    const double ns = std::chrono::duration<double, std::nano>(t1 - t0).count() / iters;
    std::printf("reduce2 float32 count=2 at %s: %.2f ns/call\n", simdLevel(), ns);
    EXPECT_EQ(d[0], 4.0f);
    EXPECT_EQ(d[1], 6.0f);
  }
}

}  // namespace
}  // namespace coll::kernels
