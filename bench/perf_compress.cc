// --compress for the benchmarks and tests/mp (see perf_compress.h): parsing, inputs, and the
// float64 reference with the format's tolerance.
#include "bench/perf_compress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/perf_data.h"

namespace coll::perf {

namespace {

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The value before storing in the tensor's type.
double inputValue(int rank, uint64_t seed, size_t index) {
  const uint64_t base = mix(seed * 0x2545f4914f6cdd1dull + static_cast<uint64_t>(rank) + 1);
  const uint64_t h = mix(base ^ (index * 0xd6e8feb86659fd93ull));
  // Irwin-Hall of four 16-bit uniforms: mean 0, variance 1 after the sqrt(3) factor.
  double sum = 0;
  for (int k = 0; k < 4; ++k) sum += static_cast<double>((h >> (16 * k)) & 0xffff) / 65536.0;
  const uint64_t blockHash = mix(base ^ ((index >> 6) * 0x9e3779b97f4a7c15ull) ^ 0x5bd1e995ull);
  const double magnitude = std::ldexp(1.0, static_cast<int>(blockHash % 5) - 2);
  return (sum - 2.0) * 1.7320508075688772 * magnitude;
}

double outputUlpFraction(collDataType_t type) {
  switch (type) {
    case collBfloat16: return std::ldexp(1.0, -8);
    case collFloat16: return std::ldexp(1.0, -11);
    default: return std::ldexp(1.0, -24);
  }
}

}  // namespace

bool parseCompressSpec(const std::string& text, CompressSpec* out, std::string* error) {
  CompressSpec spec;
  spec.enabled = true;
  size_t pos = 0;
  bool first = true;
  while (pos <= text.size()) {
    const size_t colon = text.find(':', pos);
    const std::string tok = text.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos);
    if (first) {
      if (tok != "int4") {
        *error = "'" + tok + "' is not a compression format (int4 is; e.g. --compress int4:64:stochastic)";
        return false;
      }
      first = false;
    } else if (tok == "stochastic") {
      spec.stochastic = true;
    } else if (tok == "nearest") {
      spec.stochastic = false;
    } else if (tok == "feedback") {
      spec.feedback = true;
    } else if (tok == "threshold") {
      spec.libraryThreshold = true;
    } else {
      char* end = nullptr;
      const long b = strtol(tok.c_str(), &end, 10);
      if (tok.empty() || *end != '\0' || (b != 32 && b != 64 && b != 128 && b != 256)) {
        *error = "'" + tok + "' in '" + text +
                 "': expected a block size (32, 64, 128, 256), stochastic, nearest, feedback or threshold";
        return false;
      }
      spec.blockSize = static_cast<int>(b);
    }
    if (colon == std::string::npos) break;
    pos = colon + 1;
  }
  *out = spec;
  return true;
}

std::string compressSpecName(const CompressSpec& spec) {
  char buf[96];
  snprintf(buf, sizeof(buf), "int4:%d:%s%s%s", spec.blockSize, spec.stochastic ? "stochastic" : "nearest",
           spec.feedback ? ":feedback" : "", spec.libraryThreshold ? ":threshold" : "");
  return buf;
}

collCompression_t compressionConfig(const CompressSpec& spec) {
  collCompression_t c = COLL_COMPRESSION_INITIALIZER;
  c.blockSize = spec.blockSize;
  c.rounding = spec.stochastic ? collRoundStochastic : collRoundNearest;
  c.seed = 0x5eedull;
  c.step = 0;
  c.minBytes = spec.libraryThreshold ? 0 : 1;
  return c;
}

void fillCompressInput(void* buf, size_t count, collDataType_t type, int rank, uint64_t seed, size_t firstIndex) {
  for (size_t i = 0; i < count; ++i) storeElement(buf, i, type, inputValue(rank, seed, firstIndex + i));
}

CompressCheck checkCompressed(const void* out, size_t count, collDataType_t type, collRedOp_t op, int nranks,
                              const CompressSpec& spec, uint64_t seed) {
  CompressCheck res;
  const size_t B = static_cast<size_t>(spec.blockSize);
  const double k = spec.stochastic ? 1.0 : 0.5;
  const double scaleSlack = 1.0 + std::ldexp(1.0, -8);
  const double p = nranks;
  const double divide = op == collAvg ? p : 1.0;
  const double ulp = outputUlpFraction(type);
  std::vector<unsigned char> stored(B * 8);
  std::vector<double> exact(B), absSum(B);
  double num = 0, den = 0;
  for (size_t b0 = 0; b0 < count; b0 += B) {
    const size_t n = std::min(B, count - b0);
    std::fill(exact.begin(), exact.end(), 0.0);
    std::fill(absSum.begin(), absSum.end(), 0.0);
    double scaleSum = 0;
    for (int r = 0; r < nranks; ++r) {
      // The input as the rank stored it (16-bit types round), so the reference is exact.
      fillCompressInput(stored.data(), n, type, r, seed, b0);
      double amax = 0;
      for (size_t i = 0; i < n; ++i) {
        const double x = loadElement(stored.data(), i, type);
        exact[i] += x;
        absSum[i] += std::fabs(x);
        amax = std::max(amax, std::fabs(x));
      }
      scaleSum += amax / 7.0 * scaleSlack;
    }
    double smax = 0;
    for (size_t i = 0; i < n; ++i) {
      exact[i] /= divide;
      smax = std::max(smax, std::fabs(exact[i]));
    }
    const double e1 = k * scaleSum / divide;
    const double e2 = k * (smax + e1) / 7.0 * scaleSlack;
    for (size_t i = 0; i < n; ++i) {
      const double got = loadElement(out, b0 + i, type);
      const double err = got - exact[i];
      const double arith = p * std::ldexp(1.0, -23) * absSum[i];
      const double tol = e1 + e2 + arith + ulp * (std::fabs(exact[i]) + e1 + e2) + 1e-30;
      num += err * err;
      den += exact[i] * exact[i];
      const double ratio = std::isfinite(err) ? std::fabs(err) / tol : INFINITY;
      res.worstRatio = std::max(res.worstRatio, ratio);
      if (!(ratio <= 1.0)) {
        if (res.wrong == 0) {
          char msg[240];
          snprintf(msg, sizeof(msg), "element %zu is %.9g, exact %.9g: error %.3g over the tolerance %.3g", b0 + i, got,
                   exact[i], std::fabs(err), tol);
          res.firstError = msg;
        }
        ++res.wrong;
      }
    }
  }
  res.relError = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return res;
}

double ringWireBytes(double bytes, int nranks) { return nranks > 1 ? 2.0 * (nranks - 1) / nranks * bytes : 0.0; }

}  // namespace coll::perf
