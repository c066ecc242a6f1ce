// Exact test patterns and checks for all-reduce benchmarks and tests (see perf_data.h).
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

// The value rank r contributes at element i. Kept to a few distinct small integers so that
// int8 sums of 64 ranks do not overflow and bfloat16 (8 significant bits) stays exact.
int64_t inputValue(collDataType_t t, collRedOp_t op, int r, int n, size_t i) {
  const uint64_t ii = i % 1000003;  // keeps the arithmetic below in range for huge counts
  const bool byteType = t == collInt8 || t == collUint8;
  switch (op) {
    case collSum:
      if (byteType) return static_cast<int64_t>((r + ii) % 3) - (isUnsigned(t) ? 0 : 1);
      return static_cast<int64_t>((r * 5 + ii * 3 + 1) % 5) - (isUnsigned(t) ? 0 : 2);
    case collProd: {
      int64_t v = (static_cast<uint64_t>(r) == ii % static_cast<uint64_t>(n)) ? 2 : 1;
      if (!isUnsigned(t) && (r + 2 * ii) % 3 == 0) v = -v;
      return v;
    }
    case collMax:
    case collMin:
      return static_cast<int64_t>((r * 7 + ii * 13) % 11) - (isUnsigned(t) ? 0 : 5);
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
    default:
      return 0;
  }
}

// The exact result in int64 (floating results are exact integers by construction), before the
// conversion to the element type.
int64_t expectedValue(collDataType_t t, collRedOp_t op, int n, size_t i) {
  int64_t acc = inputValue(t, op, 0, n, i);
  for (int r = 1; r < n; ++r) {
    int64_t v = inputValue(t, op, r, n, i);
    switch (op) {
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
    case collUint8: return 1;
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
    default: return "?";
  }
}

bool isFloatType(collDataType_t t) {
  return t == collFloat16 || t == collFloat32 || t == collFloat64 || t == collBfloat16;
}

bool parseType(const std::string& s, collDataType_t* out) {
  struct Name {
    const char* text;
    collDataType_t type;
  };
  static const Name names[] = {{"int8", collInt8},       {"char", collInt8},        {"uint8", collUint8},
                               {"int32", collInt32},     {"int", collInt32},        {"uint32", collUint32},
                               {"int64", collInt64},     {"uint64", collUint64},    {"half", collFloat16},
                               {"float16", collFloat16}, {"float", collFloat32},    {"float32", collFloat32},
                               {"double", collFloat64},  {"float64", collFloat64},  {"bfloat16", collBfloat16},
                               {"bf16", collBfloat16}};
  for (const auto& n : names) {
    if (s == n.text) {
      *out = n.type;
      return true;
    }
  }
  return false;
}

bool parseOp(const std::string& s, collRedOp_t* out) {
  for (collRedOp_t op : kAllOps) {
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
  if (a > 0x7f800000u) return sign | 0x7e00;       // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00;      // rounds to infinity (>= 65520)
  if (a < 0x38800000u) {                           // half subnormal or zero
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
    default: break;
  }
}

void fillInput(void* buf, size_t count, collDataType_t t, collRedOp_t op, int rank, int nranks) {
  for (size_t i = 0; i < count; ++i) storeElement(buf, i, t, wrapToType(t, inputValue(t, op, rank, nranks, i)));
}

size_t checkResult(const void* buf, size_t count, collDataType_t t, collRedOp_t op, int nranks,
                   std::string* firstError) {
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    double expected = wrapToType(t, expectedValue(t, op, nranks, i));
    double got = loadElement(buf, i, t);
    if (got != expected) {
      if (wrong == 0 && firstError != nullptr) {
        char msg[256];
        snprintf(msg, sizeof(msg), "element %zu of %zu (%s %s, %d ranks): expected %.17g, got %.17g", i, count,
                 typeName(t), opName(op), nranks, expected, got);
        *firstError = msg;
      }
      ++wrong;
    }
  }
  return wrong;
}

size_t checkUnchanged(const void* buf, size_t count, collDataType_t t, collRedOp_t op, int rank, int nranks) {
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    if (loadElement(buf, i, t) != wrapToType(t, inputValue(t, op, rank, nranks, i))) ++wrong;
  }
  return wrong;
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
