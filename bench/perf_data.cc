// Exact test patterns and checks for the benchmarks and multi-process tests (see perf_data.h).
#include "bench/perf_data.h"

#include <cmath>
#include <cstdio>
#include <cstring>

namespace coll::perf {

namespace {

template <typename T>
T loadAs(const void* buf, size_t i) {
  T v;
  memcpy(&v, static_cast<const char*>(buf) + i * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
void storeAs(void* buf, size_t i, T v) {
  memcpy(static_cast<char*>(buf) + i * sizeof(T), &v, sizeof(T));
}

bool isUnsigned(collDataType_t t) { return t == collUint8 || t == collUint32 || t == collUint64; }

bool isFp8(collDataType_t t) { return t == collFloat8e4m3 || t == collFloat8e5m2; }

// float8 holds the integers up to 16 (E4M3) or 8 (E5M2) exactly, and avg/sum round at every
// step, so every partial sum must stay within 8: at most 8 ranks add a non-zero +-1 per element.
int64_t fp8SumValue(int r, int n, uint64_t ii) {
  const uint64_t stride = static_cast<uint64_t>((n + 7) / 8);
  if ((r + ii) % stride != 0) return 0;
  return static_cast<int64_t>((r + ii / stride) % 3) - 1;
}

// The value rank r contributes at element i. Kept to a few distinct small integers so that
// int8 sums of 64 ranks do not overflow and bfloat16 (8 significant bits) stays exact.
int64_t inputValue(collDataType_t t, collRedOp_t op, int r, int n, size_t i) {
  const uint64_t ii = i % 1000003;  // keeps the arithmetic below in range for huge counts
  const bool byteType = t == collInt8 || t == collUint8;
  if (isFp8(t) && (op == collSum || op == kPreMulSum)) return fp8SumValue(r, n, ii);
  if (isFp8(t) && op == collAvg) {
    // Every rank the same +-1 (sum n <= 8, avg exact), or a +-1 perturbation that sums to zero.
    int64_t base = n <= 8 ? static_cast<int64_t>(ii % 3) - 1 : 0;
    if (base != 0) return base;
    if (r % 2 == 0 && r + 1 < n) return 1;
    return r % 2 == 1 ? -1 : 0;
  }
  switch (op) {
    case kPreMulSum:
    case collSum:
      if (byteType) return static_cast<int64_t>((r + ii) % 3) - (isUnsigned(t) ? 0 : 1);
      return static_cast<int64_t>((r * 5 + ii * 3 + 1) % 5) - (isUnsigned(t) ? 0 : 2);
    case collProd: {
      int64_t v = (static_cast<uint64_t>(r) == ii % static_cast<uint64_t>(n)) ? 2 : 1;
      if (!isUnsigned(t) && (r + 2 * ii) % 3 == 0) v = -v;
      return v;
    }
    case collMax:
    case collMin: return static_cast<int64_t>((r * 7 + ii * 13) % 11) - (isUnsigned(t) ? 0 : 5);
    case collAvg: {
      if (!isFloatType(t)) {
        if (byteType) return static_cast<int64_t>((r + ii) % 3) - (isUnsigned(t) ? 0 : 1);
        return static_cast<int64_t>((r * 5 + ii * 3 + 1) % 5) - (isUnsigned(t) ? 0 : 2);
      }
      // Floating avg: base value plus a perturbation that sums to zero over the ranks, so the
      // sum is divisible by n and the average is exact however it is rounded.
      int64_t base = static_cast<int64_t>(ii % 5) - 2;
      int64_t delta = 0;
      if (r % 2 == 0 && r + 1 < n) delta = 1;
      if (r % 2 == 1) delta = -1;
      return base + delta;
    }
    default: return 0;
  }
}

// The exact result in int64 (floating results are exact integers by construction), before the
// conversion to the element type.
int64_t premulFactor(collDataType_t t, int r) { return isFp8(t) ? 2 : (r % 2 ? 2 : 1); }

int64_t expectedValue(collDataType_t t, collRedOp_t op, int n, size_t i) {
  int64_t acc = inputValue(t, op, 0, n, i);
  if (op == kPreMulSum) acc *= premulFactor(t, 0);
  for (int r = 1; r < n; ++r) {
    int64_t v = inputValue(t, op, r, n, i);
    switch (op) {
      case kPreMulSum: acc += v * premulFactor(t, r); break;
      case collSum:
      case collAvg: acc += v; break;
      case collProd: acc *= v; break;
      case collMax: acc = v > acc ? v : acc; break;
      case collMin: acc = v < acc ? v : acc; break;
      default: break;
    }
  }
  if (op == collAvg) acc /= n;  // C++ division truncates toward zero, as integer avg does
  return acc;
}

// Converts to the element type with the wrap-around of integer arithmetic (modular since C++20).
double wrapToType(collDataType_t t, int64_t v) {
  switch (t) {
    case collInt8: return static_cast<int8_t>(v);
    case collUint8: return static_cast<uint8_t>(v);
    case collInt32: return static_cast<int32_t>(v);
    case collUint32: return static_cast<uint32_t>(v);
    case collInt64: return static_cast<double>(v);
    case collUint64: return static_cast<double>(static_cast<uint64_t>(v));
    default: return static_cast<double>(v);
  }
}

}  // namespace

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
    case collInt64:
    case collUint64:
    case collFloat64: return 8;
    default: return 0;
  }
}

const char* typeName(collDataType_t t) {
  switch (t) {
    case collInt8: return "int8";
    case collUint8: return "uint8";
    case collInt32: return "int32";
    case collUint32: return "uint32";
    case collInt64: return "int64";
    case collUint64: return "uint64";
    case collFloat16: return "half";
    case collFloat32: return "float";
    case collFloat64: return "double";
    case collBfloat16: return "bfloat16";
    case collFloat8e4m3: return "f8e4m3";
    case collFloat8e5m2: return "f8e5m2";
    default: return "?";
  }
}

const char* opName(collRedOp_t op) {
  switch (op) {
    case collSum: return "sum";
    case collProd: return "prod";
    case collMax: return "max";
    case collMin: return "min";
    case collAvg: return "avg";
    case kPreMulSum: return "premulsum";
    default: return "?";
  }
}

bool isFloatType(collDataType_t t) {
  return t == collFloat16 || t == collFloat32 || t == collFloat64 || t == collBfloat16 || isFp8(t);
}

bool parseType(const std::string& s, collDataType_t* out) {
  struct Name {
    const char* text;
    collDataType_t type;
  };
  static const Name names[] = {{"int8", collInt8},         {"char", collInt8},
                               {"uint8", collUint8},       {"int32", collInt32},
                               {"int", collInt32},         {"uint32", collUint32},
                               {"int64", collInt64},       {"uint64", collUint64},
                               {"half", collFloat16},      {"float16", collFloat16},
                               {"float", collFloat32},     {"float32", collFloat32},
                               {"double", collFloat64},    {"float64", collFloat64},
                               {"bfloat16", collBfloat16}, {"bf16", collBfloat16},
                               {"f8e4m3", collFloat8e4m3}, {"float8e4m3", collFloat8e4m3},
                               {"f8e5m2", collFloat8e5m2}, {"float8e5m2", collFloat8e5m2}};
  for (const auto& n : names) {
    if (s == n.text) {
      *out = n.type;
      return true;
    }
  }
  return false;
}

bool parseOp(const std::string& s, collRedOp_t* out) {
  if (s == "mulsum") {  // nccl-tests' spelling
    *out = kPreMulSum;
    return true;
  }
  for (collRedOp_t op : kAllOpsPreMul) {
    if (s == opName(op)) {
      *out = op;
      return true;
    }
  }
  return false;
}

float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  float f;
  if (exp == 0) {
    f = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -f : f;
  }
  uint32_t bits = exp == 31 ? (sign | 0x7f800000u | (mant << 13)) : (sign | ((exp + 112) << 23) | (mant << 13));
  memcpy(&f, &bits, sizeof(f));
  return f;
}

uint16_t floatToHalf(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof(x));
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00;   // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00;  // rounds to infinity (>= 65520)
  if (a < 0x38800000u) {                       // half subnormal or zero
    float v;
    memcpy(&v, &a, sizeof(v));
    return sign | static_cast<uint16_t>(std::nearbyint(v * 16777216.0f));  // * 2^24, exact
  }
  uint32_t h = (a - (112u << 23)) >> 13;
  uint32_t rest = a & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) ++h;
  return sign | static_cast<uint16_t>(h);
}

float bf16ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  memcpy(&f, &bits, sizeof(f));
  return f;
}

uint16_t floatToBf16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof(x));
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);
  x += 0x7fffu + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

// float8 by exponent/mantissa arithmetic: frexp gives v = m * 2^e with m in [0.5, 1).
namespace {
uint8_t floatToFp8(float f, int expBits, int mantBits, uint8_t maxFinite, uint8_t nanCode) {
  const int bias = (1 << (expBits - 1)) - 1;
  uint8_t sign = std::signbit(f) ? 0x80 : 0;
  if (std::isnan(f)) return sign | nanCode;
  double v = std::fabs(static_cast<double>(f));
  const double minNormal = std::ldexp(1.0, 1 - bias);
  if (v < minNormal) {  // subnormal: steps of 2^(1 - bias - mantBits); a carry lands on exponent 1
    return sign | static_cast<uint8_t>(std::nearbyint(std::ldexp(v, bias - 1 + mantBits)));
  }
  int e = 0;
  double m = std::frexp(v, &e);  // v = (2m) * 2^(e-1)
  int biased = e - 1 + bias;
  int mant = static_cast<int>(std::nearbyint((2 * m - 1) * (1 << mantBits)));
  if (mant == (1 << mantBits)) {
    mant = 0;
    ++biased;
  }
  uint32_t code = (static_cast<uint32_t>(biased) << mantBits) | static_cast<uint32_t>(mant);
  if (biased >= (1 << expBits) || code > maxFinite) return sign | maxFinite;  // saturate
  return sign | static_cast<uint8_t>(code);
}

float fp8ToFloat(uint8_t b, int expBits, int mantBits) {
  const int bias = (1 << (expBits - 1)) - 1;
  int e = (b >> mantBits) & ((1 << expBits) - 1);
  int m = b & ((1 << mantBits) - 1);
  float v = e == 0 ? std::ldexp(static_cast<float>(m), 1 - bias - mantBits)
                   : std::ldexp(1.0f + static_cast<float>(m) / static_cast<float>(1 << mantBits), e - bias);
  return (b & 0x80) ? -v : v;
}
}  // namespace

float fp8e4m3ToFloat(uint8_t b) {
  if ((b & 0x7f) == 0x7f) return std::nanf("");
  return fp8ToFloat(b, 4, 3);
}
uint8_t floatToFp8e4m3(float f) { return floatToFp8(f, 4, 3, 0x7e, 0x7f); }
float fp8e5m2ToFloat(uint8_t b) {
  if ((b & 0x7c) == 0x7c) return (b & 0x3) ? std::nanf("") : ((b & 0x80) ? -INFINITY : INFINITY);
  return fp8ToFloat(b, 5, 2);
}
uint8_t floatToFp8e5m2(float f) { return floatToFp8(f, 5, 2, 0x7b, 0x7f); }

double loadElement(const void* buf, size_t i, collDataType_t t) {
  switch (t) {
    case collInt8: return loadAs<int8_t>(buf, i);
    case collUint8: return loadAs<uint8_t>(buf, i);
    case collInt32: return loadAs<int32_t>(buf, i);
    case collUint32: return loadAs<uint32_t>(buf, i);
    case collInt64: return static_cast<double>(loadAs<int64_t>(buf, i));
    case collUint64: return static_cast<double>(loadAs<uint64_t>(buf, i));
    case collFloat16: return halfToFloat(loadAs<uint16_t>(buf, i));
    case collFloat32: return loadAs<float>(buf, i);
    case collFloat64: return loadAs<double>(buf, i);
    case collBfloat16: return bf16ToFloat(loadAs<uint16_t>(buf, i));
    case collFloat8e4m3: return fp8e4m3ToFloat(loadAs<uint8_t>(buf, i));
    case collFloat8e5m2: return fp8e5m2ToFloat(loadAs<uint8_t>(buf, i));
    default: return 0;
  }
}

void storeElement(void* buf, size_t i, collDataType_t t, double v) {
  switch (t) {
    case collInt8: storeAs<int8_t>(buf, i, static_cast<int8_t>(v)); break;
    case collUint8: storeAs<uint8_t>(buf, i, static_cast<uint8_t>(v)); break;
    case collInt32: storeAs<int32_t>(buf, i, static_cast<int32_t>(v)); break;
    case collUint32: storeAs<uint32_t>(buf, i, static_cast<uint32_t>(v)); break;
    case collInt64: storeAs<int64_t>(buf, i, static_cast<int64_t>(v)); break;
    case collUint64: storeAs<uint64_t>(buf, i, static_cast<uint64_t>(v)); break;
    case collFloat16: storeAs<uint16_t>(buf, i, floatToHalf(static_cast<float>(v))); break;
    case collFloat32: storeAs<float>(buf, i, static_cast<float>(v)); break;
    case collFloat64: storeAs<double>(buf, i, v); break;
    case collBfloat16: storeAs<uint16_t>(buf, i, floatToBf16(static_cast<float>(v))); break;
    case collFloat8e4m3: storeAs<uint8_t>(buf, i, floatToFp8e4m3(static_cast<float>(v))); break;
    case collFloat8e5m2: storeAs<uint8_t>(buf, i, floatToFp8e5m2(static_cast<float>(v))); break;
    default: break;
  }
}

void fillInput(void* buf, size_t count, collDataType_t t, collRedOp_t op, int rank, int nranks, size_t firstIndex) {
  for (size_t i = 0; i < count; ++i) storeElement(buf, i, t, inputElement(t, op, rank, nranks, firstIndex + i));
}

double inputElement(collDataType_t t, collRedOp_t op, int rank, int nranks, size_t index) {
  return wrapToType(t, inputValue(t, op, rank, nranks, index));
}

double expectedElement(collDataType_t t, collRedOp_t op, int nranks, size_t index) {
  return wrapToType(t, expectedValue(t, op, nranks, index));
}

double premulScalar(collDataType_t t, int rank) { return static_cast<double>(premulFactor(t, rank)); }

void premulScalarBytes(collDataType_t t, int rank, void* out8) {
  memset(out8, 0, 8);
  storeElement(out8, 0, t, premulScalar(t, rank));
}

size_t checkResult(const void* buf, size_t count, collDataType_t t, collRedOp_t op, int nranks, std::string* firstError,
                   size_t firstIndex) {
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    double expected = expectedElement(t, op, nranks, firstIndex + i);
    double got = loadElement(buf, i, t);
    if (got != expected) {
      if (wrong == 0 && firstError != nullptr) {
        char msg[256];
        snprintf(msg, sizeof(msg), "element %zu of %zu (%s %s, %d ranks): expected %.17g, got %.17g", firstIndex + i,
                 count, typeName(t), opName(op), nranks, expected, got);
        *firstError = msg;
      }
      ++wrong;
    }
  }
  return wrong;
}

size_t checkUnchanged(const void* buf, size_t count, collDataType_t t, collRedOp_t op, int rank, int nranks,
                      size_t firstIndex) {
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    if (loadElement(buf, i, t) != inputElement(t, op, rank, nranks, firstIndex + i)) ++wrong;
  }
  return wrong;
}

namespace {
uint64_t patternWord(int srcRank, size_t index, uint64_t seed) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(srcRank) * 0xd1b54a32d192ed03ull + index;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;  // splitmix64 finaliser
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

void fillPattern(void* buf, size_t count, size_t eltSize, int srcRank, size_t firstIndex, uint64_t seed) {
  auto* p = static_cast<unsigned char*>(buf);
  for (size_t i = 0; i < count; ++i) {
    uint64_t w = patternWord(srcRank, firstIndex + i, seed);
    memcpy(p + i * eltSize, &w, eltSize);
  }
}

bool patternMatches(const void* buf, size_t i, size_t eltSize, int srcRank, size_t index, uint64_t seed) {
  uint64_t w = patternWord(srcRank, index, seed);
  return memcmp(static_cast<const unsigned char*>(buf) + i * eltSize, &w, eltSize) == 0;
}

void fillRandom(void* buf, size_t count, collDataType_t t, int rank, uint64_t seed) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(rank) * 0xbf58476d1ce4e5b9ull + 1;
  for (size_t i = 0; i < count; ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    double v = static_cast<double>(s >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0;
    storeElement(buf, i, t, v);
  }
}

uint64_t hashBytes(const void* buf, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(buf);
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace coll::perf
