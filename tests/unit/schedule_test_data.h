// Test data shared by the schedule tests: inputs whose reduction is exact in every type and
// order, their expected results (float64 reference), and typed stores.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "src/kernels/reduce.h"
#include "src/schedule/coll_args.h"
#include "src/schedule/schedule.h"

namespace coll::testutil {

// Types every reducing collective supports with exact small-integer inputs (float8 has its own
// kernel tests: its 3-bit mantissa cannot hold these sums exactly).
inline constexpr collDataType_t kExactReduceTypes[] = {collInt8,   collUint8,   collInt32,   collUint32,  collInt64,
                                                       collUint64, collFloat16, collFloat32, collFloat64, collBfloat16};
inline constexpr collRedOp_t kBuiltinOps[] = {collSum, collProd, collMax, collMin, collAvg};

inline bool isUnsigned(collDataType_t t) { return t == collUint8 || t == collUint32 || t == collUint64; }
inline bool isFloat(collDataType_t t) {
  return t == collFloat16 || t == collFloat32 || t == collFloat64 || t == collBfloat16;
}

inline void storeValue(collDataType_t t, void* buf, size_t i, double v) {
  switch (t) {
    case collInt8: static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(v); break;
    case collUint8: static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v); break;
    case collInt32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case collUint32: static_cast<uint32_t*>(buf)[i] = static_cast<uint32_t>(v); break;
    case collInt64: static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v); break;
    case collUint64: static_cast<uint64_t*>(buf)[i] = static_cast<uint64_t>(v); break;
    case collFloat16: static_cast<uint16_t*>(buf)[i] = kernels::floatToHalf(static_cast<float>(v)); break;
    case collBfloat16: static_cast<uint16_t*>(buf)[i] = kernels::floatToBfloat16(static_cast<float>(v)); break;
    case collFloat32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case collFloat64: static_cast<double*>(buf)[i] = v; break;
    default: FAIL() << "unexpected dtype";
  }
}

// Inputs whose reduction is exact in every type and order (small integers; products of at most
// one 2 and a few -1s), so results compare bit for bit.
inline double inputValue(collDataType_t t, collRedOp_t op, int p, int r, uint64_t i) {
  const bool narrow = dataTypeSize(t) == 1;
  switch (op) {
    case collSum:
    case collAvg: {
      double v = static_cast<double>((r * 5 + i * 7) % (narrow ? 2 : 3));
      if (!isUnsigned(t) && !narrow) v -= 1;
      return v;
    }
    case collProd: {
      double v = (static_cast<uint64_t>(r) == i % p) ? 2 : 1;
      if (!isUnsigned(t) && i % 3 == 0 && static_cast<uint64_t>(r) == (i / 2) % p) v = -v;
      return v;
    }
    default: {
      double v = static_cast<double>((r * 37 + i * 11) % 50);
      if (!isUnsigned(t)) v -= 25;
      return v;
    }
  }
}

inline double expectedValue(collDataType_t t, collRedOp_t op, int p, uint64_t i) {
  double acc = inputValue(t, op, p, 0, i);
  for (int r = 1; r < p; ++r) {
    double v = inputValue(t, op, p, r, i);
    switch (op) {
      case collSum:
      case collAvg: acc += v; break;
      case collProd: acc *= v; break;
      case collMax: acc = std::max(acc, v); break;
      case collMin: acc = std::min(acc, v); break;
      default: break;
    }
  }
  if (op != collAvg) return acc;
  if (!isFloat(t)) return std::trunc(acc / p);
  if (t == collFloat64) return acc / p;
  return static_cast<double>(static_cast<float>(acc) / static_cast<float>(p));
}

// NCCL's buffer sizes per collective (elements; count as CollKind defines it).
inline uint64_t sendElems(CollKind k, int p, uint64_t c) {
  return (k == CollKind::ReduceScatter || k == CollKind::AlltoAll || k == CollKind::Scatter) ? p * c : c;
}
inline uint64_t recvElems(CollKind k, int p, uint64_t c) {
  return (k == CollKind::AllGather || k == CollKind::AlltoAll || k == CollKind::Gather) ? p * c : c;
}

// Data-moving collectives are byte exact whatever the type: inputs are a byte pattern of
// (rank, byte), and every other byte of every buffer (guards of kGuard bytes either side
// included) starts as a different pattern.
inline std::byte dataByte(int r, uint64_t b) {
  return static_cast<std::byte>((r * 97 + b * 31 + (b >> 8) * 7 + 1) & 0xff);
}
inline std::byte fillByte(int r, int alloc, uint64_t b) {
  return static_cast<std::byte>((r * 13 + b * 29 + alloc * 101 + 0x5a) & 0xff);
}
inline constexpr uint64_t kGuard = 16;

}  // namespace coll::testutil
