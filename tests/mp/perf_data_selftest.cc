// Self-test of the benchmark test patterns: reductions done in the element type, rounding at
// every step, in several orders, must match checkResult exactly (and a corrupted one must not).
#include <cstdio>
#include <cstring>
#include <vector>

#include "bench/perf_colls.h"
#include "bench/perf_data.h"

namespace {

using namespace coll::perf;

// One reduction step in the element's type, as a library would do it.
double step(double a, double b, collDataType_t t, collRedOp_t op) {
  double r;
  switch (op) {
    case collSum:
    case kPreMulSum:
    case collAvg: r = a + b; break;
    case collProd: r = a * b; break;
    case collMax: r = a > b ? a : b; break;
    default: r = a < b ? a : b; break;
  }
  unsigned char tmp[8];
  if (!isFloatType(t)) {
    // Integer arithmetic wraps in the type's width.
    int64_t v = static_cast<int64_t>(r);
    switch (t) {
      case collInt8: return static_cast<int8_t>(v);
      case collUint8: return static_cast<uint8_t>(v);
      case collInt32: return static_cast<int32_t>(v);
      case collUint32: return static_cast<uint32_t>(v);
      default: return r;
    }
  }
  storeElement(tmp, 0, t, r);
  return loadElement(tmp, 0, t);
}

int checkOne(collDataType_t t, collRedOp_t op, int n, size_t count, int order) {
  std::vector<std::vector<unsigned char>> in(n, std::vector<unsigned char>(count * typeSize(t)));
  for (int r = 0; r < n; ++r) fillInput(in[r].data(), count, t, op, r, n);
  std::vector<unsigned char> out(count * typeSize(t));
  for (size_t i = 0; i < count; ++i) {
    std::vector<double> v(n);
    for (int r = 0; r < n; ++r) v[r] = loadElement(in[r].data(), i, t);
    if (op == kPreMulSum) {  // each rank's input times its scalar, rounded to the type
      for (int r = 0; r < n; ++r) v[r] = step(v[r], premulScalar(t, r), t, collProd);
    }
    double acc;
    if (order == 0) {
      acc = v[0];
      for (int r = 1; r < n; ++r) acc = step(acc, v[r], t, op);
    } else if (order == 1) {
      acc = v[n - 1];
      for (int r = n - 2; r >= 0; --r) acc = step(acc, v[r], t, op);
    } else {
      while (v.size() > 1) {  // pairwise tree
        std::vector<double> next;
        for (size_t k = 0; k + 1 < v.size(); k += 2) next.push_back(step(v[k], v[k + 1], t, op));
        if (v.size() % 2) next.push_back(v.back());
        v = next;
      }
      acc = v[0];
    }
    if (op == collAvg) {
      if (isFloatType(t)) acc = t == collFloat64 ? acc / n : static_cast<float>(acc) / static_cast<float>(n);
      else acc = static_cast<double>(static_cast<int64_t>(acc) / n);
    }
    storeElement(out.data(), i, t, acc);
  }
  std::string first;
  size_t wrong = checkResult(out.data(), count, t, op, n, &first);
  if (wrong) {
    fprintf(stderr, "FAIL %s %s n=%d order=%d: %zu wrong: %s\n", typeName(t), opName(op), n, order, wrong,
            first.c_str());
    return 1;
  }
  // A single corrupted element must be found.
  storeElement(out.data(), count / 2, t, loadElement(out.data(), count / 2, t) + 1);
  if (checkResult(out.data(), count, t, op, n, nullptr) != 1) {
    fprintf(stderr, "FAIL %s %s n=%d: a corrupted element went unnoticed\n", typeName(t), opName(op), n);
    return 1;
  }
  return 0;
}

}  // namespace

int main() {
  int failures = 0;
  for (int n : {1, 2, 3, 5, 8, 17, 64}) {
    for (collDataType_t t : kAllTypes) {
      const bool fp8 = t == collFloat8e4m3 || t == collFloat8e5m2;
      if (fp8 && n > 16) continue;  // float8 patterns are exact up to 16 ranks
      for (collRedOp_t op : kAllOpsPreMul) {
        for (int order = 0; order < 3; ++order) failures += checkOne(t, op, n, 257, order);
      }
    }
  }
  // Conversions: every half and bfloat16 value round-trips.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    bool nanH = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    if (!nanH && floatToHalf(halfToFloat(static_cast<uint16_t>(h))) != h) {
      fprintf(stderr, "FAIL half round trip %04x\n", h);
      ++failures;
      break;
    }
    bool nanB = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
    if (!nanB && floatToBf16(bf16ToFloat(static_cast<uint16_t>(h))) != h) {
      fprintf(stderr, "FAIL bfloat16 round trip %04x\n", h);
      ++failures;
      break;
    }
  }
  // Every finite float8 value round-trips; rounding to nearest even and saturation.
  for (uint32_t b = 0; b < 0x100; ++b) {
    if ((b & 0x7f) != 0x7f && floatToFp8e4m3(fp8e4m3ToFloat(static_cast<uint8_t>(b))) != b) {
      fprintf(stderr, "FAIL f8e4m3 round trip %02x\n", b);
      ++failures;
    }
    if ((b & 0x7c) != 0x7c && floatToFp8e5m2(fp8e5m2ToFloat(static_cast<uint8_t>(b))) != b) {
      fprintf(stderr, "FAIL f8e5m2 round trip %02x\n", b);
      ++failures;
    }
  }
  if (fp8e4m3ToFloat(0x7e) != 448.0f || floatToFp8e4m3(1000.0f) != 0x7e ||
      fp8e4m3ToFloat(floatToFp8e4m3(17.0f)) != 16.0f || fp8e4m3ToFloat(floatToFp8e4m3(19.0f)) != 20.0f ||
      fp8e5m2ToFloat(0x7b) != 57344.0f || fp8e5m2ToFloat(floatToFp8e5m2(9.0f)) != 8.0f ||
      fp8e5m2ToFloat(floatToFp8e5m2(11.0f)) != 12.0f || floatToFp8e4m3(-0.5f) != 0xb0) {
    fprintf(stderr, "FAIL float8 rounding\n");
    ++failures;
  }
  if (floatToHalf(1.0f + 1.0f / 2048) != 0x3c00 || floatToHalf(1.0f + 3.0f / 2048) != 0x3c02 ||
      floatToHalf(65520.0f) != 0x7c00 || floatToHalf(65519.0f) != 0x7bff) {
    fprintf(stderr, "FAIL half rounding\n");
    ++failures;
  }
  // expectedRecv (the device check's expected bytes) is what checkCall accepts, for every collective.
  for (const CollInfo& info : kAllColls) {
    for (int n : {1, 2, 3, 5}) {
      for (collDataType_t t : kAllTypes) {
        for (int rank = 0; rank < n; ++rank) {
          for (bool inPlace : {false, true}) {
            const CollShape shape = shapeForBytes(info.coll, 1000, typeSize(t), n);
            std::vector<unsigned char> send(shape.extent() * typeSize(t) + 8), recv(send.size());
            const int root = info.rooted ? n - 1 : -1;
            CollCall c = makeCall(info.coll, shape, t, info.reduces ? collAvg : collSum, root, rank, inPlace,
                                  send.data(), recv.data());
            prepareCheck(c, shape, rank, n, inPlace, send.data(), recv.data(), 99);
            expectedRecv(c, shape, rank, n, inPlace, 99, recv.data());
            std::string first;
            if (size_t bad = checkCall(c, shape, rank, n, inPlace, send.data(), recv.data(), 99, &first)) {
              fprintf(stderr, "FAIL expectedRecv %s %s n=%d rank %d %s: %zu wrong; %s\n", info.name, typeName(t), n,
                      rank, inPlace ? "in-place" : "out-of-place", bad, first.c_str());
              ++failures;
            }
          }
        }
      }
    }
  }
  if (failures) return 1;
  printf("perf_data self-test: OK\n");
  return 0;
}
