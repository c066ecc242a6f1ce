// Convergence with the compressed All-Reduce: a 2-layer MLP trained by 16 simulated
// workers whose gradients are averaged through the in-process executor with the real schedules.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "algorithms/algorithms.h"
#include "src/exec/inprocess.h"
#include "src/kernels/quantize.h"

namespace coll {
namespace {

constexpr int kIn = 32, kHidden = 64, kClasses = 4;
constexpr int kParams = kHidden * kIn + kHidden + kClasses * kHidden + kClasses;
constexpr int kWorkers = 16;
constexpr int kPerWorker = 256;  // samples in each worker's shard
constexpr int kBatch = 16;       // per worker and step
constexpr int kSteps = 200;
constexpr float kLearningRate = 0.3f;
constexpr int kBlock = 64;

// Two Gaussian clusters per class in 32 dimensions (an XOR-like layout, so no linear model
// separates the classes), close enough that the clusters overlap: a loss floor well above zero.
struct Dataset {
  std::vector<float> x;  // n * kIn
  std::vector<int> y;
  int n = 0;
};

Dataset makeData(uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> unit(0.0f, 1.0f);
  constexpr int kClusters = 2 * kClasses;
  std::vector<float> centers(kClusters * kIn);
  for (float& c : centers) c = 0.45f * unit(gen);
  Dataset d;
  d.n = kWorkers * kPerWorker;
  d.x.resize(static_cast<size_t>(d.n) * kIn);
  d.y.resize(static_cast<size_t>(d.n));
  std::uniform_int_distribution<int> pick(0, kClusters - 1);
  for (int i = 0; i < d.n; ++i) {
    const int cluster = pick(gen);
    d.y[static_cast<size_t>(i)] = cluster % kClasses;
    for (int k = 0; k < kIn; ++k) d.x[static_cast<size_t>(i) * kIn + k] = centers[cluster * kIn + k] + unit(gen);
  }
  return d;
}

// Parameters, flat: W1 [kHidden][kIn], b1 [kHidden], W2 [kClasses][kHidden], b2 [kClasses].
constexpr int kW1 = 0, kB1 = kHidden * kIn, kW2 = kB1 + kHidden, kB2 = kW2 + kClasses * kHidden;

std::vector<float> initialParams(uint32_t seed) {
  std::mt19937 gen(seed * 7919u + 1);
  std::normal_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> w(kParams, 0.0f);
  for (int i = 0; i < kHidden * kIn; ++i) w[kW1 + i] = unit(gen) / std::sqrt(static_cast<float>(kIn));
  for (int i = 0; i < kClasses * kHidden; ++i) w[kW2 + i] = unit(gen) / std::sqrt(static_cast<float>(kHidden));
  return w;
}

// Mean softmax cross-entropy over the samples `idx` of d; with grad, its gradient.
double lossAndGrad(const std::vector<float>& w, const Dataset& d, const std::vector<int>& idx,
                   std::vector<float>* grad) {
  if (grad) grad->assign(kParams, 0.0f);
  double loss = 0;
  float h[kHidden], logits[kClasses], dlogits[kClasses], dh[kHidden];
  const float inv = 1.0f / static_cast<float>(idx.size());
  for (int s : idx) {
    const float* x = &d.x[static_cast<size_t>(s) * kIn];
    for (int j = 0; j < kHidden; ++j) {
      float a = w[kB1 + j];
      for (int k = 0; k < kIn; ++k) a += w[kW1 + j * kIn + k] * x[k];
      h[j] = std::tanh(a);
    }
    float top = -INFINITY;
    for (int c = 0; c < kClasses; ++c) {
      float a = w[kB2 + c];
      for (int j = 0; j < kHidden; ++j) a += w[kW2 + c * kHidden + j] * h[j];
      logits[c] = a;
      top = std::max(top, a);
    }
    double z = 0;
    for (int c = 0; c < kClasses; ++c) z += std::exp(static_cast<double>(logits[c] - top));
    const int label = d.y[static_cast<size_t>(s)];
    loss += std::log(z) - static_cast<double>(logits[label] - top);
    if (!grad) continue;
    for (int c = 0; c < kClasses; ++c) {
      const float prob = static_cast<float>(std::exp(static_cast<double>(logits[c] - top)) / z);
      dlogits[c] = (prob - (c == label ? 1.0f : 0.0f)) * inv;
    }
    std::fill(dh, dh + kHidden, 0.0f);
    for (int c = 0; c < kClasses; ++c) {
      (*grad)[kB2 + c] += dlogits[c];
      for (int j = 0; j < kHidden; ++j) {
        (*grad)[kW2 + c * kHidden + j] += dlogits[c] * h[j];
        dh[j] += dlogits[c] * w[kW2 + c * kHidden + j];
      }
    }
    for (int j = 0; j < kHidden; ++j) {
      const float da = dh[j] * (1.0f - h[j] * h[j]);
      (*grad)[kB1 + j] += da;
      for (int k = 0; k < kIn; ++k) (*grad)[kW1 + j * kIn + k] += da * x[k];
    }
  }
  return loss / static_cast<double>(idx.size());
}

enum class Method { Float32, Int4Feedback, Int4NoFeedback, NaiveRing };
const char* methodName(Method m) {
  switch (m) {
    case Method::Float32: return "float32 ring";
    case Method::Int4Feedback: return "int4 + error feedback";
    case Method::Int4NoFeedback: return "int4 without feedback";
    case Method::NaiveRing: return "naive requantizing ring";
  }
  return "?";
}

// Averages kWorkers gradients: through the in-process executor with the ring (float32) or the
// two-shot compressed schedule, or with the naive ring computed here (the negative control).
class GradientAverager {
 public:
  explicit GradientAverager(Method method)
      : method_(method),
        world_(kWorkers, 1, InProcessOptions{64 * 1024, 64 * 1024, 4, 0}),
        schedules_(kWorkers),
        recv_(kWorkers, std::vector<float>(kParams)),
        residual_(kWorkers),
        quant_(kWorkers) {
    for (int32_t r = 0; r < kWorkers; ++r) {
      CollArgs a;
      a.count = kParams, a.dtype = collFloat32, a.op = collAvg;
      Schedule* s = &schedules_[static_cast<size_t>(r)];
      if (method == Method::Float32) buildRingAllReduce(world_.topology(r), a, s);
      else buildCompressedAllReduce(world_.topology(r), a, kBlock, s);
      if (method == Method::Int4Feedback) residual_[static_cast<size_t>(r)].assign(kParams, 0.0f);
      quant_[static_cast<size_t>(r)].blockSize = kBlock;
      quant_[static_cast<size_t>(r)].rank = static_cast<uint32_t>(r);
    }
  }

  // grads[r] is worker r's gradient; *out gets the average every worker holds (checked identical).
  Status average(const std::vector<std::vector<float>>& grads, std::vector<float>* out) {
    if (method_ == Method::NaiveRing) {
      naiveRing(grads, out);
      return okStatus();
    }
    std::vector<const Schedule*> ptrs;
    std::vector<ExecBuffers> buffers;
    for (size_t r = 0; r < kWorkers; ++r) {
      ExecBuffers b{grads[r].data(), recv_[r].data()};
      b.quant = &quant_[r];
      b.residual = residual_[r].empty() ? nullptr : residual_[r].data();
      ptrs.push_back(&schedules_[r]);
      buffers.push_back(b);
    }
    COLL_TRY(runInProcess(ptrs, buffers, world_, ++seq_));
    for (size_t r = 1; r < kWorkers; ++r) {
      if (memcmp(recv_[0].data(), recv_[r].data(), kParams * sizeof(float)) != 0) {
        return makeError(collInternalError, "worker %zu holds a different average than worker 0", r);
      }
    }
    *out = recv_[0];
    return okStatus();
  }

 private:
  // Ring reduce-scatter whose partial sums are quantized before every hop, then the reduced shard
  // quantized once more for the all-gather: p quantizations per element instead of two.
  void naiveRing(const std::vector<std::vector<float>>& grads, std::vector<float>* out) {
    const size_t p = kWorkers, count = kParams;
    const size_t shard = (count + p - 1) / p;
    out->assign(count, 0.0f);
    kernels::QuantParams params;
    params.blockSize = kBlock;
    std::vector<std::byte> q(kernels::quantizedBytes(shard, kBlock));
    std::vector<float> partial(shard), back(shard);
    for (size_t j = 0; j < p; ++j) {
      const size_t off = j * shard, n = off < count ? std::min(shard, count - off) : 0;
      if (n == 0) continue;
      std::copy_n(grads[(j + 1) % p].begin() + static_cast<long>(off), n, partial.begin());
      for (size_t k = 2; k <= p; ++k) {
        kernels::quantize4(q.data(), partial.data(), collFloat32, n, params, 0, nullptr);
        kernels::dequantize4(back.data(), collFloat32, q.data(), n, kBlock);
        const std::vector<float>& mine = grads[(j + k) % p];
        for (size_t i = 0; i < n; ++i) partial[i] = back[i] + mine[off + i];
      }
      for (size_t i = 0; i < n; ++i) partial[i] /= static_cast<float>(p);
      kernels::quantize4(q.data(), partial.data(), collFloat32, n, params, 0, nullptr);
      kernels::dequantize4(out->data() + off, collFloat32, q.data(), n, kBlock);
    }
  }

  Method method_;
  InProcessWorld world_;
  std::vector<Schedule> schedules_;
  std::vector<std::vector<float>> recv_;
  std::vector<std::vector<float>> residual_;
  std::vector<kernels::QuantParams> quant_;
  uint64_t seq_ = 0;
};

struct TrainResult {
  double loss = INFINITY;  // final, on all the data
  double gradError = 0;    // mean over steps of ||avg - exact mean|| / ||exact mean||
};

// Trains from the seed's data and initial weights.
TrainResult train(Method method, uint32_t seed) {
  TrainResult res;
  const Dataset data = makeData(seed);
  std::vector<float> w = initialParams(seed);
  GradientAverager averager(method);
  std::mt19937 gen(seed * 31u + 5u);  // the same minibatches for every method
  std::uniform_int_distribution<int> pick(0, kPerWorker - 1);
  std::vector<std::vector<float>> grads(kWorkers);
  std::vector<int> batch(kBatch);
  std::vector<float> avg;
  for (int step = 0; step < kSteps; ++step) {
    for (int r = 0; r < kWorkers; ++r) {
      for (int& s : batch) s = r * kPerWorker + pick(gen);  // worker r's own shard
      lossAndGrad(w, data, batch, &grads[static_cast<size_t>(r)]);
    }
    Status st = averager.average(grads, &avg);
    EXPECT_TRUE(st.ok()) << methodName(method) << ": " << st.message();
    if (!st.ok()) return res;
    double num = 0, den = 0;
    for (size_t i = 0; i < kParams; ++i) {
      double exact = 0;
      for (const std::vector<float>& g : grads) exact += g[i];
      exact /= kWorkers;
      num += (avg[i] - exact) * (avg[i] - exact);
      den += exact * exact;
    }
    res.gradError += std::sqrt(num / std::max(den, 1e-30)) / kSteps;
    // Linear decay to a tenth: the final iterate settles instead of bouncing with the batch noise.
    const float lr = kLearningRate * (1.0f - 0.9f * static_cast<float>(step) / kSteps);
    for (int i = 0; i < kParams; ++i) w[static_cast<size_t>(i)] -= lr * avg[static_cast<size_t>(i)];
  }
  std::vector<int> all(static_cast<size_t>(data.n));
  for (int i = 0; i < data.n; ++i) all[static_cast<size_t>(i)] = i;
  res.loss = lossAndGrad(w, data, all, nullptr);
  return res;
}

TEST(Convergence, Int4WithErrorFeedbackTracksFloat32) {
  const uint32_t seeds[] = {1, 2, 3};
  const Method methods[] = {Method::Float32, Method::Int4Feedback, Method::Int4NoFeedback, Method::NaiveRing};
  double mean[4] = {0, 0, 0, 0}, gradError[4] = {0, 0, 0, 0};
  const std::vector<float> w0 = initialParams(seeds[0]);
  const Dataset d0 = makeData(seeds[0]);
  std::vector<int> all(static_cast<size_t>(d0.n));
  for (int i = 0; i < d0.n; ++i) all[static_cast<size_t>(i)] = i;
  printf("MLP %d-%d-%d (%d parameters), %d workers x %d samples, %d SGD steps of %d per worker; initial loss %.4f\n",
         kIn, kHidden, kClasses, kParams, kWorkers, kPerWorker, kSteps, kBatch, lossAndGrad(w0, d0, all, nullptr));
  for (int m = 0; m < 4; ++m) {
    printf("  %-24s final loss:", methodName(methods[m]));
    for (uint32_t seed : seeds) {
      const TrainResult r = train(methods[m], seed);
      printf(" %.5f", r.loss);
      mean[m] += r.loss / 3.0;
      gradError[m] += r.gradError / 3.0;
    }
    printf("  mean %.5f (%+.3f%% vs float32); gradient error per step %.4f\n", mean[m],
           m == 0 ? 0.0 : 100.0 * (mean[m] - mean[0]) / mean[0], gradError[m]);
  }
  // The compressed runs did compress (two quantizations: ~0.1-0.2 relative), and the naive ring's
  // 16 requantizations cost more than the two-shot's two.
  EXPECT_GT(gradError[2], 0.02);
  EXPECT_GT(gradError[3], gradError[2]);
  EXPECT_TRUE(std::isfinite(mean[0]));
  EXPECT_LT(mean[0], 0.8 * std::log(static_cast<double>(kClasses))) << "float32 training should learn something";
  EXPECT_LE(std::fabs(mean[1] - mean[0]), 0.02 * mean[0]) << "int4 + error feedback should end within 2% of float32";
}

}  // namespace
}  // namespace coll
