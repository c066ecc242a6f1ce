// Tests for the 4-bit quantization kernels (src/kernels/quantize*.cc): Philox known answers, the
// record format against an independent restatement of the spec, round-trip error, stochastic
// rounding (unbiased, reproducible, shard-independent), special blocks, error feedback, odd
// counts, and every SIMD level bit-identical to the portable reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "src/kernels/quantize.h"
#include "src/kernels/reduce.h"

// The CUDA kernels in quantize_kernels.cuh run on the host under the CUDA double's emulation of the
// builtins (warps in lockstep for the shuffles).
#include "tests/cuda_double/host_simt.h"
#include "src/kernels/cuda/quantize_kernels.cuh"

namespace coll::kernels {
namespace {

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

const int kBlockSizes[] = {32, 64, 128, 256};
const collDataType_t kTypes[] = {collFloat32, collFloat16, collBfloat16};

size_t elemSize(collDataType_t t) { return t == collFloat32 ? 4 : 2; }

// Stores float values as the given type (the quantizer's input), returning the float values the
// kernels will actually see.
std::vector<uint8_t> encode(const std::vector<float>& v, collDataType_t t, std::vector<float>* seen = nullptr) {
  std::vector<uint8_t> out(v.size() * elemSize(t));
  if (seen) seen->resize(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    float f = v[i];
    if (t == collFloat16) {
      const uint16_t h = floatToHalf(f);
      std::memcpy(&out[2 * i], &h, 2);
      f = halfToFloat(h);
    } else if (t == collBfloat16) {
      const uint16_t h = floatToBfloat16(f);
      std::memcpy(&out[2 * i], &h, 2);
      f = bfloat16ToFloat(h);
    } else {
      std::memcpy(&out[4 * i], &f, 4);
    }
    if (seen) (*seen)[i] = f;
  }
  return out;
}

uint16_t scaleOf(const std::vector<uint8_t>& q, int b, size_t blk) {
  const size_t off = blk * quantRecordBytes(b) + static_cast<size_t>(b) / 2;
  return static_cast<uint16_t>(q[off] | (q[off + 1] << 8));
}
int levelOf(const std::vector<uint8_t>& q, int b, size_t i) {
  const size_t blk = i / static_cast<size_t>(b), j = i % static_cast<size_t>(b);
  const unsigned nib = (q[blk * quantRecordBytes(b) + j / 2] >> (4 * (j & 1))) & 0xf;
  return static_cast<int>(nib ^ 8u) - 8;
}

// Gradient-like data with a spread of magnitudes per block.
std::vector<float> randomData(size_t n, uint32_t seed, float spread = 4.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(-spread, spread);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = nd(rng) * std::exp2(std::round(ud(rng)));
  return v;
}

class QuantLevelGuard {
 public:
  QuantLevelGuard() : saved_(quantKernelLevel()) {}
  ~QuantLevelGuard() { forceQuantKernelLevel(saved_.c_str()); }

 private:
  std::string saved_;
};

TEST(Quantize, PhiloxKnownAnswers) {
  // Random123 kat_vectors, philox4x32 10: counter[4] key[2] -> out[4].
  struct Kat {
    uint32_t ctr[4], key[2], out[4];
  } kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    uint32_t out[4];
    philox4x32(k.ctr, k.key, out);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], k.out[i]) << "word " << i;
  }
}

TEST(Quantize, Sizes) {
  EXPECT_TRUE(validQuantBlockSize(64));
  EXPECT_FALSE(validQuantBlockSize(48));
  EXPECT_FALSE(validQuantBlockSize(0));
  EXPECT_EQ(quantRecordBytes(64), 34u);
  EXPECT_EQ(quantizedBytes(0, 64), 0u);
  EXPECT_EQ(quantizedBytes(1, 64), 34u);
  EXPECT_EQ(quantizedBytes(64, 64), 34u);
  EXPECT_EQ(quantizedBytes(65, 64), 68u);
  EXPECT_EQ(quantizedBytes(1000, 32), 32u * 18u);
  // 4.25 bits per element at B = 64.
  EXPECT_EQ(quantizedBytes(1 << 20, 64) * 8, (size_t{1} << 20) * 17 / 4);
}

// The format restated independently (float arithmetic written out here, std::nearbyint for the
// rounding) for nearest rounding; every level must produce exactly these records.
TEST(Quantize, NearestMatchesSpecRestated) {
  for (int b : kBlockSizes) {
    const size_t n = 7 * static_cast<size_t>(b) + 13;
    const std::vector<float> x = randomData(n, 11u + static_cast<uint32_t>(b));
    std::vector<uint8_t> q(quantizedBytes(n, b), 0xAA);
    QuantParams p;
    p.blockSize = b;
    quantize4(q.data(), x.data(), collFloat32, n, p, 0, nullptr);
    for (size_t blk = 0; blk * b < n; ++blk) {
      const size_t lo = blk * b, hi = std::min(n, lo + b);
      float amax = 0;
      for (size_t i = lo; i < hi; ++i) amax = std::max(amax, std::fabs(x[i]));
      const uint16_t sb = floatToBfloat16(amax / 7.0f);
      ASSERT_EQ(scaleOf(q, b, blk), sb) << "block " << blk;
      const float s = bfloat16ToFloat(sb);
      for (size_t i = lo; i < hi; ++i) {
        const float r = std::nearbyint(x[i] / s);
        const int want = static_cast<int>(std::min(7.0f, std::max(-7.0f, r)));
        ASSERT_EQ(levelOf(q, b, i), want) << "element " << i;
      }
      for (size_t i = hi; i < lo + b; ++i) ASSERT_EQ(levelOf(q, b, i), 0) << "padding nibble " << i;
    }
  }
}

TEST(Quantize, RoundTripErrorWithinHalfScale) {
  for (collDataType_t t : kTypes) {
    for (int b : kBlockSizes) {
      const size_t n = 20 * static_cast<size_t>(b) + 5;
      std::vector<float> seen;
      const std::vector<uint8_t> in = encode(randomData(n, 3u * b + t), t, &seen);
      std::vector<uint8_t> q(quantizedBytes(n, b));
      QuantParams p;
      p.blockSize = b;
      quantize4(q.data(), in.data(), t, n, p, 0, nullptr);
      std::vector<float> back(n);
      dequantize4(back.data(), collFloat32, q.data(), n, b);
      for (size_t i = 0; i < n; ++i) {
        const float s = bfloat16ToFloat(scaleOf(q, b, i / b));
        ASSERT_LE(std::fabs(back[i] - seen[i]), 0.5f * s * (1.0f + 1e-6f)) << "type " << t << " B " << b << " i " << i;
      }
      // Accumulating into zeros is the same as dequantizing to float32.
      std::vector<float> acc(n, 0.0f);
      dequantizeAccumulate4(acc.data(), q.data(), n, b);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(bitsOf(acc[i]), bitsOf(back[i] + 0.0f)) << i;
    }
  }
}

TEST(Quantize, DequantizeToHalfTypesRoundsOnce) {
  const size_t n = 1000;
  const std::vector<float> x = randomData(n, 5);
  std::vector<uint8_t> q(quantizedBytes(n, 64));
  QuantParams p;
  quantize4(q.data(), x.data(), collFloat32, n, p, 0, nullptr);
  std::vector<float> f(n);
  std::vector<uint16_t> h(n), bf(n);
  dequantize4(f.data(), collFloat32, q.data(), n, 64);
  dequantize4(h.data(), collFloat16, q.data(), n, 64);
  dequantize4(bf.data(), collBfloat16, q.data(), n, 64);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(h[i], floatToHalf(f[i])) << i;
    ASSERT_EQ(bf[i], floatToBfloat16(f[i])) << i;
  }
}

TEST(Quantize, StochasticRoundingIsUnbiased) {
  const int b = 64;
  const size_t n = 256;
  std::vector<float> x = randomData(n, 21, 2.0f);
  x[3] = 0.5f * x[0];  // not on the grid
  const int trials = 1000;
  std::vector<double> sumErr(n, 0.0), sumSq(n, 0.0), scale(n, 0.0);
  std::vector<uint8_t> q(quantizedBytes(n, b));
  std::vector<float> back(n);
  QuantParams p;
  p.blockSize = b;
  p.stochastic = true;
  p.seed = 0x1234567890abcdefull;
  p.rank = 3;
  double nearestAbsBias = 0.0;
  {
    QuantParams pn = p;
    pn.stochastic = false;
    quantize4(q.data(), x.data(), collFloat32, n, pn, 0, nullptr);
    dequantize4(back.data(), collFloat32, q.data(), n, b);
    for (size_t i = 0; i < n; ++i) {
      nearestAbsBias += std::fabs(double(back[i]) - x[i]) / bfloat16ToFloat(scaleOf(q, b, i / b));
    }
    nearestAbsBias /= n;
  }
  for (int t = 0; t < trials; ++t) {
    p.step = static_cast<uint64_t>(t);
    quantize4(q.data(), x.data(), collFloat32, n, p, 0, nullptr);
    dequantize4(back.data(), collFloat32, q.data(), n, b);
    for (size_t i = 0; i < n; ++i) {
      const double s = bfloat16ToFloat(scaleOf(q, b, i / b));
      const double e = (double(back[i]) - x[i]) / s;  // in units of the scale
      ASSERT_LT(std::fabs(e), 1.0 + 1e-6) << "stochastic error beyond one step at " << i;
      sumErr[i] += e;
      sumSq[i] += e * e;
    }
  }
  // Overall: the mean normalised error is within 3 sigma / sqrt(N T) of zero.
  double total = 0.0, totalSq = 0.0;
  int outliers = 0;
  for (size_t i = 0; i < n; ++i) {
    total += sumErr[i];
    totalSq += sumSq[i];
    const double mean = sumErr[i] / trials;
    const double sigma = std::sqrt(std::max(0.0, sumSq[i] / trials - mean * mean));
    if (std::fabs(mean) > 3.0 * sigma / std::sqrt(double(trials)) + 1e-12) ++outliers;
  }
  const double nt = double(n) * trials;
  const double mean = total / nt;
  const double sigma = std::sqrt(totalSq / nt - mean * mean);
  EXPECT_LE(std::fabs(mean), 3.0 * sigma / std::sqrt(nt)) << "mean " << mean << " sigma " << sigma;
  // Per element, 3 sigma is exceeded by chance ~0.3% of the time; a biased rounding fails most.
  EXPECT_LE(outliers, static_cast<int>(n / 50)) << outliers << " of " << n << " elements biased";
  EXPECT_GT(nearestAbsBias, 0.1);  // nearest rounding is biased per element: the control
}

TEST(Quantize, StochasticIsReproducibleAndShardIndependent) {
  for (int b : kBlockSizes) {
    for (collDataType_t t : kTypes) {
      const size_t n = 9 * static_cast<size_t>(b) + 7;
      const std::vector<uint8_t> in = encode(randomData(n, 31u + b), t);
      QuantParams p;
      p.blockSize = b;
      p.stochastic = true;
      p.seed = 0xfeedfacecafebeefull;
      p.step = 77;
      p.rank = 5;
      std::vector<uint8_t> whole(quantizedBytes(n, b)), again(whole.size());
      quantize4(whole.data(), in.data(), t, n, p, 0, nullptr);
      quantize4(again.data(), in.data(), t, n, p, 0, nullptr);
      ASSERT_EQ(whole, again);
      // Shards on block boundaries, quantized separately with their first element.
      const size_t cuts[] = {0, 2 * static_cast<size_t>(b), 3 * static_cast<size_t>(b), 8 * static_cast<size_t>(b), n};
      std::vector<uint8_t> joined;
      for (int s = 0; s + 1 < 5; ++s) {
        const size_t cnt = cuts[s + 1] - cuts[s];
        std::vector<uint8_t> part(quantizedBytes(cnt, b));
        quantize4(part.data(), in.data() + cuts[s] * elemSize(t), t, cnt, p, cuts[s], nullptr);
        joined.insert(joined.end(), part.begin(), part.end());
      }
      ASSERT_EQ(joined, whole) << "B " << b << " type " << t;
      // A different step or rank or seed changes the bits.
      for (int which = 0; which < 3; ++which) {
        QuantParams o = p;
        if (which == 0) o.step = 78;
        if (which == 1) o.rank = 6;
        if (which == 2) o.seed ^= 1ull << 40;
        quantize4(again.data(), in.data(), t, n, o, 0, nullptr);
        EXPECT_NE(again, whole) << "parameter " << which << " ignored";
      }
    }
  }
}

TEST(Quantize, SpecialBlocks) {
  const int b = 32;
  const size_t n = 5 * b;
  for (collDataType_t t : kTypes) {
    std::vector<float> x = randomData(n, 41);
    for (int i = 0; i < b; ++i) x[b + i] = 0.0f;                       // block 1: all zero
    x[2 * b + 1] = -0.0f;                                              // (block 2 ordinary)
    x[3 * b + 7] = std::numeric_limits<float>::quiet_NaN();            // block 3: NaN
    x[4 * b + 30] = -std::numeric_limits<float>::infinity();           // block 4: -Inf
    for (int i = 0; i < b; i += 2) x[b + i] = (i & 2) ? 0.0f : -0.0f;  // signed zeros still zero
    const std::vector<uint8_t> in = encode(x, t);
    std::vector<float> res(n, 0.25f);
    std::vector<uint8_t> q(quantizedBytes(n, b));
    QuantParams p;
    p.blockSize = b;
    quantize4(q.data(), in.data(), t, n, p, 0, res.data());
    EXPECT_EQ(scaleOf(q, b, 3), 0x7fc0);
    EXPECT_EQ(scaleOf(q, b, 4), 0x7fc0);
    for (size_t blk : {3, 4}) {
      for (int i = 0; i < b / 2; ++i) EXPECT_EQ(q[blk * quantRecordBytes(b) + i], 0) << blk;
      for (int i = 0; i < b; ++i) EXPECT_EQ(bitsOf(res[blk * b + i]), 0u) << "residual of a NaN block is zero";
    }
    std::vector<float> back(n);
    dequantize4(back.data(), collFloat32, q.data(), n, b);
    for (size_t i = 3 * b; i < n; ++i) EXPECT_EQ(bitsOf(back[i]), 0x7fc00000u) << i;
    std::vector<uint16_t> h(n), bf(n);
    dequantize4(h.data(), collFloat16, q.data(), n, b);
    dequantize4(bf.data(), collBfloat16, q.data(), n, b);
    EXPECT_EQ(h[3 * b], 0x7e00);
    EXPECT_EQ(bf[4 * b + 3], 0x7fc0);
    std::vector<float> acc(n, 1.0f);
    acc[3 * b] = floatOf(0xffc12345u);  // a NaN with a payload also comes out canonical
    dequantizeAccumulate4(acc.data(), q.data(), n, b);
    for (size_t i = 3 * b; i < n; ++i) EXPECT_EQ(bitsOf(acc[i]), 0x7fc00000u) << i;
    // Other blocks are untouched by the NaN: block 0 is an ordinary block.
    EXPECT_NE(scaleOf(q, b, 0), 0);
    EXPECT_TRUE(std::isfinite(back[0]));
  }
  // All-zero input without residual: scale 0, nibbles 0, exact +0 back.
  std::vector<float> z(b, 0.0f);
  z[5] = -0.0f;
  std::vector<uint8_t> q(quantizedBytes(b, b), 0xff);
  QuantParams p;
  p.blockSize = b;
  quantize4(q.data(), z.data(), collFloat32, b, p, 0, nullptr);
  for (uint8_t byte : q) EXPECT_EQ(byte, 0);
  std::vector<float> back(b, 9.0f);
  dequantize4(back.data(), collFloat32, q.data(), b, b);
  for (float f : back) EXPECT_EQ(bitsOf(f), 0u);
  // A nonzero amax so small that amax / 7 rounds to a zero bf16: stored as zero, residual keeps x.
  std::vector<float> tiny(b, 0.0f), res(b, 0.0f);
  tiny[0] = floatOf(3);  // 3 * 2^-149
  quantize4(q.data(), tiny.data(), collFloat32, b, p, 0, res.data());
  EXPECT_EQ(scaleOf(q, b, 0), 0);
  EXPECT_EQ(bitsOf(res[0]), 3u);
}

TEST(Quantize, GarbageRecordsDecodeDeterministically) {
  const int b = 32;
  std::vector<uint8_t> q(quantizedBytes(2 * b, b), 0x88);  // nibble 8 everywhere: level -8
  const uint16_t one = floatToBfloat16(1.0f);
  q[b / 2] = static_cast<uint8_t>(one & 0xff);
  q[b / 2 + 1] = static_cast<uint8_t>(one >> 8);
  q[quantRecordBytes(b) + b / 2] = 0x80;  // scale 0xff80: -Inf
  q[quantRecordBytes(b) + b / 2 + 1] = 0xff;
  std::vector<float> back(2 * b);
  dequantize4(back.data(), collFloat32, q.data(), 2 * b, b);
  for (int i = 0; i < b; ++i) EXPECT_EQ(back[i], -8.0f);
  for (int i = b; i < 2 * b; ++i) EXPECT_EQ(bitsOf(back[i]), 0x7fc00000u);
}

TEST(Quantize, ErrorFeedbackResidualIsExactLoss) {
  for (collDataType_t t : kTypes) {
    for (bool stochastic : {false, true}) {
      const int b = 64;
      const size_t n = 10 * b + 3;
      std::vector<float> seen;
      const std::vector<uint8_t> in = encode(randomData(n, 51), t, &seen);
      std::vector<float> res = randomData(n, 52, 0.0f);
      for (float& r : res) r *= 0.05f;
      const std::vector<float> old = res;
      std::vector<uint8_t> q(quantizedBytes(n, b));
      QuantParams p;
      p.blockSize = b;
      p.stochastic = stochastic;
      p.seed = 9;
      quantize4(q.data(), in.data(), t, n, p, 0, res.data());
      std::vector<float> back(n);
      dequantize4(back.data(), collFloat32, q.data(), n, b);
      for (size_t i = 0; i < n; ++i) {
        const float x = seen[i] + old[i];
        ASSERT_EQ(bitsOf(res[i]), bitsOf(x - back[i])) << i;
      }
      // Quantizing x + r_old is what was quantized: same records as quantizing that sum directly.
      std::vector<float> sum(n);
      for (size_t i = 0; i < n; ++i) sum[i] = seen[i] + old[i];
      std::vector<uint8_t> q2(q.size());
      quantize4(q2.data(), sum.data(), collFloat32, n, p, 0, nullptr);
      ASSERT_EQ(q, q2);
    }
  }
}

// The numeric error-feedback test: the same gradient every step. Without feedback, nearest
// rounding loses the same amount every step, so the accumulated error sum(g_hat - g) grows
// linearly; with feedback it telescopes to r_0 - r_T and stays within a scale.
TEST(Quantize, ErrorFeedbackKeepsAccumulatedErrorBounded) {
  const int b = 64;
  const size_t n = 4 * b;
  const std::vector<float> g = randomData(n, 61, 1.0f);
  std::vector<uint8_t> q(quantizedBytes(n, b));
  std::vector<float> res(n, 0.0f), back(n);
  std::vector<double> errFb(n, 0.0), errNo(n, 0.0);
  QuantParams p;
  p.blockSize = b;
  const int steps = 1000;
  float maxScale = 0.0f;
  for (int s = 0; s < steps; ++s) {
    quantize4(q.data(), g.data(), collFloat32, n, p, 0, res.data());
    dequantize4(back.data(), collFloat32, q.data(), n, b);
    for (size_t i = 0; i < n; ++i) errFb[i] += double(back[i]) - g[i];
    for (size_t blk = 0; blk < n / b; ++blk) maxScale = std::max(maxScale, bfloat16ToFloat(scaleOf(q, b, blk)));
    quantize4(q.data(), g.data(), collFloat32, n, p, 0, nullptr);
    dequantize4(back.data(), collFloat32, q.data(), n, b);
    for (size_t i = 0; i < n; ++i) errNo[i] += double(back[i]) - g[i];
  }
  double maxFb = 0.0, maxNo = 0.0, sumAbsNo = 0.0;
  for (size_t i = 0; i < n; ++i) {
    maxFb = std::max(maxFb, std::fabs(errFb[i]));
    maxNo = std::max(maxNo, std::fabs(errNo[i]));
    sumAbsNo += std::fabs(errNo[i]);
  }
  EXPECT_LE(maxFb, 1.5 * maxScale) << "feedback: accumulated error must stay within about one scale";
  EXPECT_GE(maxNo, 50.0 * maxScale) << "no feedback: the control must grow with the step count";
  EXPECT_GT(sumAbsNo / n, 20.0 * maxFb / 1.5);
}

TEST(Quantize, OddCountsAndTails) {
  for (int b : kBlockSizes) {
    for (size_t n : {size_t{1}, size_t{2}, size_t{3}, size_t{31}, size_t{33}, size_t{63}, size_t{65}, size_t{127},
                     size_t{255}, size_t{257}, size_t{1001}}) {
      const std::vector<float> x = randomData(n, static_cast<uint32_t>(n));
      std::vector<uint8_t> q(quantizedBytes(n, b) + 8, 0xEE);  // guard bytes after the end
      QuantParams p;
      p.blockSize = b;
      quantize4(q.data(), x.data(), collFloat32, n, p, 0, nullptr);
      for (size_t i = quantizedBytes(n, b); i < q.size(); ++i) ASSERT_EQ(q[i], 0xEE) << "wrote past the end";
      const size_t last = (n - 1) / b;
      for (size_t i = n; i < (last + 1) * b; ++i) ASSERT_EQ(levelOf(q, b, i), 0) << "padding nibble " << i;
      std::vector<float> back(n + 4, 123.0f);
      dequantize4(back.data(), collFloat32, q.data(), n, b);
      for (size_t i = n; i < n + 4; ++i) ASSERT_EQ(back[i], 123.0f) << "dequantize wrote past count";
      for (size_t i = 0; i < n; ++i) {
        ASSERT_LE(std::fabs(back[i] - x[i]), 0.5f * bfloat16ToFloat(scaleOf(q, b, i / b)) * (1 + 1e-6f));
      }
    }
  }
}

// Every SIMD level against the portable reference: packed records, residuals, dequantized values
// of each output type, accumulation; random data with special blocks, odd counts, unaligned
// pointers, every block size, every input type, both roundings, with and without residual.
TEST(Quantize, EveryLevelBitIdenticalToPortable) {
  QuantLevelGuard guard;
  std::vector<std::string> levels;
  for (const char* l : {"avx2", "avx512"}) {
    if (forceQuantKernelLevel(l)) levels.push_back(l);
  }
  if (levels.empty()) GTEST_SKIP() << "no SIMD level on this CPU";
  std::mt19937 rng(7);
  const size_t counts[] = {1, 7, 32, 33, 64, 100, 255, 256, 257, 1000, 4096 + 61};
  int cases = 0;
  for (int round = 0; round < 3; ++round) {
    for (size_t n : counts) {
      for (int b : kBlockSizes) {
        for (collDataType_t t : kTypes) {
          std::vector<float> x = randomData(n, rng(), round == 2 ? 30.0f : 4.0f);
          if (round >= 1 && n > 40) {  // special blocks
            x[rng() % n] = std::numeric_limits<float>::quiet_NaN();
            x[rng() % n] = std::numeric_limits<float>::infinity();
            const size_t z = rng() % n;
            for (size_t i = z - z % b; i < std::min(n, z - z % b + b); ++i) x[i] = 0.0f;
          }
          const std::vector<uint8_t> inAligned = encode(x, t);
          // Misalign by one element.
          std::vector<uint8_t> in(inAligned.size() + elemSize(t));
          std::memcpy(in.data() + elemSize(t), inAligned.data(), inAligned.size());
          const void* src = in.data() + elemSize(t);
          std::vector<float> res0 = randomData(n, rng(), 0.0f);
          for (float& r : res0) r *= 0.1f;
          for (bool stochastic : {false, true}) {
            for (bool withRes : {false, true}) {
              QuantParams p;
              p.blockSize = b;
              p.stochastic = stochastic;
              p.seed = (static_cast<uint64_t>(rng()) << 32) | rng();
              p.step = rng();
              p.rank = rng() % 1000;
              const uint64_t first = static_cast<uint64_t>(rng() % 100000) * b;
              const size_t qb = quantizedBytes(n, b);
              forceQuantKernelLevel("portable");
              std::vector<uint8_t> qRef(qb + 1);
              std::vector<float> resRef(res0.begin(), res0.end());
              quantize4(qRef.data() + 1, src, t, n, p, first, withRes ? resRef.data() : nullptr);
              std::vector<float> accRef(n + 1, 0.5f);
              dequantizeAccumulate4(accRef.data() + 1, qRef.data() + 1, n, b);
              std::vector<std::vector<uint8_t>> outRef;
              for (collDataType_t ot : kTypes) {
                std::vector<uint8_t> o((n + 1) * elemSize(ot));  // output one element off alignment
                dequantize4(o.data() + elemSize(ot), ot, qRef.data() + 1, n, b);
                outRef.push_back(o);
              }
              for (const std::string& level : levels) {
                ASSERT_TRUE(forceQuantKernelLevel(level.c_str()));
                std::vector<uint8_t> q(qb + 1);
                std::vector<float> res(res0.begin(), res0.end());
                quantize4(q.data() + 1, src, t, n, p, first, withRes ? res.data() : nullptr);
                const std::string what = level + " n=" + std::to_string(n) + " B=" + std::to_string(b) +
                                         " type=" + std::to_string(t) + " stochastic=" + std::to_string(stochastic) +
                                         " residual=" + std::to_string(withRes);
                ASSERT_EQ(q, qRef) << what;
                ASSERT_EQ(0, std::memcmp(res.data(), resRef.data(), n * 4)) << what;
                std::vector<float> acc(n + 1, 0.5f);
                dequantizeAccumulate4(acc.data() + 1, q.data() + 1, n, b);
                ASSERT_EQ(0, std::memcmp(acc.data(), accRef.data(), (n + 1) * 4)) << what;
                int k = 0;
                for (collDataType_t ot : kTypes) {
                  std::vector<uint8_t> o((n + 1) * elemSize(ot));
                  dequantize4(o.data() + elemSize(ot), ot, q.data() + 1, n, b);
                  ASSERT_EQ(o, outRef[k++]) << what << " out type " << ot;
                }
                ++cases;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 100);
}

// The stochastic counter's low word wraps inside a SIMD batch (element index near 2^34).
TEST(Quantize, StochasticCounterCarryMatchesPortable) {
  QuantLevelGuard guard;
  const size_t n = 1024;
  const std::vector<float> x = randomData(n, 71);
  for (int b : kBlockSizes) {
    for (uint64_t first : {(uint64_t{1} << 34) - 512, (uint64_t{1} << 34) - static_cast<uint64_t>(b),
                           (uint64_t{1} << 36) + 3 * static_cast<uint64_t>(b)}) {
      QuantParams p;
      p.blockSize = b;
      p.stochastic = true;
      p.seed = 5;
      forceQuantKernelLevel("portable");
      std::vector<uint8_t> ref(quantizedBytes(n, b));
      quantize4(ref.data(), x.data(), collFloat32, n, p, first, nullptr);
      for (const char* level : {"avx2", "avx512"}) {
        if (!forceQuantKernelLevel(level)) continue;
        std::vector<uint8_t> q(ref.size());
        quantize4(q.data(), x.data(), collFloat32, n, p, first, nullptr);
        EXPECT_EQ(q, ref) << level << " B " << b << " first " << first;
      }
    }
  }
}

// ---- the CUDA kernels (host emulation) against the CPU kernels --------------------------------

namespace emu = cuda::dev;

// grid x block CUDA threads; with shuffles, each warp's lanes run together.
void emulateLaunch(unsigned grid, unsigned block, bool shuffles, const std::function<void()>& kernel) {
  const emu::EmuGeometry g{{grid, 1, 1}, {block, 1, 1}};
  if (shuffles) {
    emu::emuLaunchLockstep(g, kernel);
  } else {
    emu::emuLaunchSequential(g, kernel);
  }
}

template <int DT>
void emulateQuantize(std::vector<uint8_t>& q, const void* in, size_t n, const QuantParams& p, uint64_t first,
                     float* res, bool vec) {
  const emu::DeviceParams dp{static_cast<uint32_t>(p.seed), static_cast<uint32_t>(p.seed >> 32), p.rank,
                             static_cast<uint32_t>(p.step)};
  auto run = [&](auto kernel) {
    emulateLaunch(2, 32, true, [&] { kernel(q.data(), in, n, p.blockSize, dp, first, res, vec, vec, vec); });
  };
  if (p.stochastic) {
    if (res) {
      run(emu::quantizeKernel<DT, true, true>);
    } else {
      run(emu::quantizeKernel<DT, true, false>);
    }
  } else if (res) {
    run(emu::quantizeKernel<DT, false, true>);
  } else {
    run(emu::quantizeKernel<DT, false, false>);
  }
}

TEST(Quantize, CudaKernelsEmulatedBitIdenticalToCpu) {
  std::mt19937 rng(99);
  int cases = 0;
  for (size_t n : {size_t{5}, size_t{300}, size_t{2048 + 77}}) {
    for (int b : kBlockSizes) {
      for (collDataType_t t : kTypes) {
        for (int mode = 0; mode < 4; ++mode) {
          const bool stochastic = mode & 1, withRes = mode & 2, vec = (mode + b / 32) % 2 == 0;
          std::vector<float> x = randomData(n, rng());
          if (n > 2 * static_cast<size_t>(b) && mode >= 2) {
            x[rng() % n] = std::numeric_limits<float>::quiet_NaN();
            for (int i = 0; i < b; ++i) x[static_cast<size_t>(b) + i] = 0.0f;
          }
          const std::vector<uint8_t> in = encode(x, t);
          std::vector<float> res0 = randomData(n, rng(), 0.0f);
          for (float& r : res0) r *= 0.1f;
          QuantParams p;
          p.blockSize = b;
          p.stochastic = stochastic;
          p.seed = (static_cast<uint64_t>(rng()) << 32) | rng();
          p.step = rng();
          p.rank = rng() % 512;
          const uint64_t first = (static_cast<uint64_t>(rng() % 1000) + (uint64_t{1} << 28)) * b;
          std::vector<uint8_t> qCpu(quantizedBytes(n, b)), qGpu(qCpu.size(), 0xCD);
          std::vector<float> resCpu = res0, resGpu = res0;
          quantize4(qCpu.data(), in.data(), t, n, p, first, withRes ? resCpu.data() : nullptr);
          if (t == collFloat16)
            emulateQuantize<collFloat16>(qGpu, in.data(), n, p, first, withRes ? resGpu.data() : nullptr, vec);
          if (t == collBfloat16)
            emulateQuantize<collBfloat16>(qGpu, in.data(), n, p, first, withRes ? resGpu.data() : nullptr, vec);
          if (t == collFloat32)
            emulateQuantize<collFloat32>(qGpu, in.data(), n, p, first, withRes ? resGpu.data() : nullptr, vec);
          const std::string what = "n=" + std::to_string(n) + " B=" + std::to_string(b) + " type=" + std::to_string(t) +
                                   " mode=" + std::to_string(mode);
          ASSERT_EQ(qGpu, qCpu) << what;
          ASSERT_EQ(0, std::memcmp(resGpu.data(), resCpu.data(), n * 4)) << what;
          // Dequantize (each output type) and accumulate: no shuffles, so one lane at a time.
          for (collDataType_t ot : kTypes) {
            std::vector<uint8_t> oCpu(n * elemSize(ot)), oGpu(oCpu.size());
            dequantize4(oCpu.data(), ot, qCpu.data(), n, b);
            auto kernel = ot == collFloat32   ? emu::dequantizeKernel<collFloat32>
                          : ot == collFloat16 ? emu::dequantizeKernel<collFloat16>
                                              : emu::dequantizeKernel<collBfloat16>;
            emulateLaunch(2, 64, false, [&] { kernel(oGpu.data(), qCpu.data(), n, b, vec, vec); });
            ASSERT_EQ(oGpu, oCpu) << what << " dequantize to " << ot;
          }
          std::vector<float> accCpu(n, 0.75f), accGpu(n, 0.75f);
          accCpu[0] = accGpu[0] = floatOf(0xffc00001u);
          dequantizeAccumulate4(accCpu.data(), qCpu.data(), n, b);
          emulateLaunch(2, 64, false, [&] { emu::dequantizeAccumulateKernel(accGpu.data(), qCpu.data(), n, b, vec, vec); });
          ASSERT_EQ(0, std::memcmp(accGpu.data(), accCpu.data(), n * 4)) << what << " accumulate";
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 3 * 4 * 3 * 4);
}

TEST(Quantize, LevelHook) {
  QuantLevelGuard guard;
  EXPECT_TRUE(forceQuantKernelLevel("portable"));
  EXPECT_STREQ(quantKernelLevel(), "portable");
  EXPECT_FALSE(forceQuantKernelLevel("sve"));
  EXPECT_STREQ(quantKernelLevel(), "portable");
}

}  // namespace
}  // namespace coll::kernels
