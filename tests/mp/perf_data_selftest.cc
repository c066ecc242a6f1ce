// Self-test of the benchmark test patterns: reductions done in the element type, rounding at
// every step, in several orders, must match checkResult exactly (and a corrupted one must not).
#include <cstdio>
#include <cstring>
#include <vector>

#include "bench/perf_data.h"

namespace {

using namespace coll::perf;

// One reduction step in the element's type, as a library would do it.
double step(double a, double b, collDataType_t t, collRedOp_t op) {
  double r;
  switch (op) {
    case collSum:
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
    fprintf(stderr, "FAIL %s %s n=%d order=%d: %zu wrong: %s\n", typeName(t), opName(op), n, order, wrong, first.c_str());
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
      for (collRedOp_t op : kAllOps) {
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
  if (floatToHalf(1.0f + 1.0f / 2048) != 0x3c00 || floatToHalf(1.0f + 3.0f / 2048) != 0x3c02 ||
      floatToHalf(65520.0f) != 0x7c00 || floatToHalf(65519.0f) != 0x7bff) {
    fprintf(stderr, "FAIL half rounding\n");
    ++failures;
  }
  if (failures) return 1;
  printf("perf_data self-test: OK\n");
  return 0;
}
