// The compressed (4-bit, two-shot) All-Reduce through the in-process executor: bit-identical
// results on every rank, an error that does not grow with the rank count (while a naive ring that
// requantizes at every hop, kept here as the negative control, does), error feedback that keeps the
// accumulated error bounded, avg, 16-bit inputs, odd counts, empty shards and in-place calls.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "algorithms/algorithms.h"
#include "src/exec/inprocess.h"
#include "src/kernels/quantize.h"
#include "src/kernels/reduce.h"

namespace coll {
namespace {

constexpr int kBlock = 64;

// Gradient-like inputs: Gaussian, a different stream per rank.
std::vector<float> gradient(int rank, uint64_t count, uint32_t salt = 0) {
  std::mt19937 gen(1000u * static_cast<uint32_t>(rank) + 17u + salt);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(count);
  for (float& x : v) x = dist(gen);
  return v;
}

struct CompressedRun {
  CompressedRun(int32_t p, uint64_t count, collDataType_t dtype = collFloat32, collRedOp_t op = collSum,
                bool feedback = false, int32_t ranksPerHost = 1, size_t ringBytes = 64 * 1024, size_t sliceBytes = 0)
      : p(p),
        count(count),
        dtype(dtype),
        op(op),
        world(p, ranksPerHost, InProcessOptions{ringBytes, 64 * 1024, 4, sliceBytes}),
        schedules(static_cast<size_t>(p)),
        send(static_cast<size_t>(p)),
        recv(static_cast<size_t>(p)),
        residual(static_cast<size_t>(p)) {
    for (int32_t r = 0; r < p; ++r) {
      CollArgs a;
      a.count = count, a.dtype = dtype, a.op = op;
      if (ranksPerHost > 1) {
        buildHierarchicalCompressedAllReduce(world.topology(r), a, kBlock, &schedules[static_cast<size_t>(r)]);
      } else {
        buildCompressedAllReduce(world.topology(r), a, kBlock, &schedules[static_cast<size_t>(r)]);
      }
      send[static_cast<size_t>(r)].resize(count * dataTypeSize(dtype));
      recv[static_cast<size_t>(r)].assign(count * dataTypeSize(dtype), std::byte{0x5a});
      if (feedback) residual[static_cast<size_t>(r)].assign(count, 0.0f);
    }
  }
  // Sets rank r's input from float values (converted to the run's type).
  void setInput(int32_t r, const std::vector<float>& values) {
    std::byte* dst = send[static_cast<size_t>(r)].data();
    for (uint64_t i = 0; i < count; ++i) {
      if (dtype == collFloat32) {
        memcpy(dst + 4 * i, &values[i], 4);
      } else {
        const uint16_t h = dtype == collFloat16 ? kernels::floatToHalf(values[i]) : kernels::floatToBfloat16(values[i]);
        memcpy(dst + 2 * i, &h, 2);
      }
    }
  }
  float inputAt(int32_t r, uint64_t i) const { return valueAt(send[static_cast<size_t>(r)], i); }
  float outputAt(int32_t r, uint64_t i) const { return valueAt(recv[static_cast<size_t>(r)], i); }
  float valueAt(const std::vector<std::byte>& buf, uint64_t i) const {
    float v;
    kernels::convertToFloat(&v, buf.data() + i * dataTypeSize(dtype), dtype, 1);
    return v;
  }
  Status run(bool inPlace = false, uint64_t stepNo = 0) {
    std::vector<const Schedule*> ptrs;
    std::vector<ExecBuffers> buffers;
    quant.assign(static_cast<size_t>(p), kernels::QuantParams{});
    for (int32_t r = 0; r < p; ++r) {
      const size_t i = static_cast<size_t>(r);
      quant[i].blockSize = kBlock;
      quant[i].rank = static_cast<uint32_t>(r);
      quant[i].step = stepNo;
      if (inPlace) recv[i] = send[i];
      ExecBuffers b{inPlace ? static_cast<const void*>(recv[i].data()) : send[i].data(), recv[i].data()};
      b.quant = &quant[i];
      b.residual = residual[i].empty() ? nullptr : residual[i].data();
      ptrs.push_back(&schedules[i]);
      buffers.push_back(b);
    }
    return runInProcess(ptrs, buffers, world, ++seq);
  }
  // ||out - exact|| / ||exact|| on rank 0, the exact result in double.
  double relativeError() const {
    double num = 0, den = 0;
    for (uint64_t i = 0; i < count; ++i) {
      double exact = 0;
      for (int32_t r = 0; r < p; ++r) exact += inputAt(r, i);
      if (op == collAvg) exact /= p;
      const double d = outputAt(0, i) - exact;
      num += d * d;
      den += exact * exact;
    }
    return std::sqrt(num / std::max(den, 1e-30));
  }
  void expectIdenticalOnEveryRank() const {
    for (int32_t r = 1; r < p; ++r) {
      ASSERT_EQ(0, memcmp(recv[0].data(), recv[static_cast<size_t>(r)].data(), recv[0].size())) << "rank " << r;
    }
  }

  int32_t p;
  uint64_t count;
  collDataType_t dtype;
  collRedOp_t op;
  InProcessWorld world;
  std::vector<Schedule> schedules;
  std::vector<std::vector<std::byte>> send, recv;
  std::vector<std::vector<float>> residual;
  std::vector<kernels::QuantParams> quant;
  uint64_t seq = 0;
};

double compressedError(int32_t p, uint64_t count) {
  CompressedRun run(p, count);
  for (int32_t r = 0; r < p; ++r) run.setInput(r, gradient(r, count));
  Status st = run.run();
  EXPECT_TRUE(st.ok()) << st.message();
  run.expectIdenticalOnEveryRank();
  return run.relativeError();
}

// The negative control: a ring reduce-scatter whose partial sums are requantized at every hop
// (what a naive "compress every message" ring does), then an exact all-gather. Returns the
// relative error of the result.
double naiveRingError(int32_t p, uint64_t count) {
  std::vector<std::vector<float>> in(static_cast<size_t>(p));
  for (int32_t r = 0; r < p; ++r) in[static_cast<size_t>(r)] = gradient(r, count);
  const uint64_t shard = count / static_cast<uint64_t>(p);
  std::vector<std::byte> q(kernels::quantizedBytes(shard, kBlock));
  std::vector<float> result(count), partial(shard), back(shard);
  kernels::QuantParams params;
  params.blockSize = kBlock;
  for (int32_t j = 0; j < p; ++j) {
    // Shard j travels around the ring starting at rank j + 1, accumulating each rank's part.
    const uint64_t off = static_cast<uint64_t>(j) * shard;
    std::copy(in[static_cast<size_t>((j + 1) % p)].begin() + static_cast<long>(off),
              in[static_cast<size_t>((j + 1) % p)].begin() + static_cast<long>(off + shard), partial.begin());
    for (int32_t k = 2; k <= p; ++k) {
      kernels::quantize4(q.data(), partial.data(), collFloat32, shard, params, off, nullptr);
      kernels::dequantize4(back.data(), collFloat32, q.data(), shard, kBlock);
      const std::vector<float>& mine = in[static_cast<size_t>((j + k) % p)];
      for (uint64_t i = 0; i < shard; ++i) partial[i] = back[i] + mine[off + i];
    }
    std::copy(partial.begin(), partial.end(), result.begin() + static_cast<long>(off));
  }
  double num = 0, den = 0;
  for (uint64_t i = 0; i < count; ++i) {
    double exact = 0;
    for (int32_t r = 0; r < p; ++r) exact += in[static_cast<size_t>(r)][i];
    num += (result[i] - exact) * (result[i] - exact);
    den += exact * exact;
  }
  return std::sqrt(num / den);
}

TEST(CompressedAllReduce, ErrorDoesNotGrowWithRanksWhileNaiveRingDoes) {
  const uint64_t perRank = 4 * kBlock;
  const double e2 = compressedError(2, 2 * perRank);
  const double e8 = compressedError(8, 8 * perRank);
  const double e64 = compressedError(64, 64 * perRank);
  // Two quantizations of Gaussian data at 4 bits: about 0.1-0.2 relative, whatever p.
  EXPECT_LT(e2, 0.25);
  EXPECT_LT(e8, 1.3 * e2 + 0.02);
  EXPECT_LT(e64, 1.3 * e2 + 0.02);
  const double n2 = naiveRingError(2, 2 * perRank), n64 = naiveRingError(64, 64 * perRank);
  printf("relative error, two-shot: p=2 %.4f, p=8 %.4f, p=64 %.4f; naive ring: p=2 %.4f, p=64 %.4f\n", e2, e8, e64, n2,
         n64);
  EXPECT_GT(n64, 2.0 * n2) << "the naive ring's error should grow with the hop count";
  EXPECT_GT(n64, 2.0 * e64);
}

TEST(CompressedAllReduce, ExtendedErrorFlatAt512Ranks) {
  const uint64_t perRank = 2 * kBlock;
  const double e2 = compressedError(2, 2 * perRank);
  const double e512 = compressedError(512, 512 * perRank);
  EXPECT_LT(e512, 1.3 * e2 + 0.02);
}

TEST(CompressedAllReduce, AvgSixteenBitTypesOddCountsEmptyShardsInPlace) {
  for (collDataType_t t : {collFloat32, collFloat16, collBfloat16}) {
    for (uint64_t count : {uint64_t{1}, uint64_t{63}, uint64_t{65}, uint64_t{3 * kBlock + 7}, uint64_t{1000}}) {
      for (collRedOp_t op : {collSum, collAvg}) {
        for (bool inPlace : {false, true}) {
          SCOPED_TRACE(testing::Message()
                       << "type " << t << " count " << count << " op " << op << " in-place " << inPlace);
          CompressedRun run(5, count, t, op);
          for (int32_t r = 0; r < 5; ++r) run.setInput(r, gradient(r, count, 7));
          // Inputs as the run stored them (16-bit types round them), for the reference.
          Status st = run.run(inPlace);
          ASSERT_TRUE(st.ok()) << st.message();
          run.expectIdenticalOnEveryRank();
          // In place, send was overwritten: recompute the reference from fresh inputs.
          CompressedRun ref(5, count, t, op);
          for (int32_t r = 0; r < 5; ++r) ref.setInput(r, gradient(r, count, 7));
          double num = 0, den = 0;
          for (uint64_t i = 0; i < count; ++i) {
            double exact = 0;
            for (int32_t r = 0; r < 5; ++r) exact += ref.inputAt(r, i);
            if (op == collAvg) exact /= 5;
            num += (run.outputAt(0, i) - exact) * (run.outputAt(0, i) - exact);
            den += exact * exact;
          }
          EXPECT_LT(std::sqrt(num / den), 0.3);
        }
      }
    }
  }
}

TEST(CompressedAllReduce, ErrorFeedbackKeepsAccumulatedErrorBounded) {
  // The same gradient every step: without feedback nearest rounding makes the same error each
  // time, so the accumulated error grows linearly; with feedback it stays bounded.
  const int32_t p = 4;
  const uint64_t count = 8 * kBlock;
  auto accumulatedError = [&](bool feedback, int steps) {
    CompressedRun run(p, count, collFloat32, collSum, feedback);
    for (int32_t r = 0; r < p; ++r) run.setInput(r, gradient(r, count, 3));
    std::vector<double> sum(count, 0.0);
    for (int t = 0; t < steps; ++t) {
      Status st = run.run(false, static_cast<uint64_t>(t));
      EXPECT_TRUE(st.ok()) << st.message();
      for (uint64_t i = 0; i < count; ++i) {
        double exact = 0;
        for (int32_t r = 0; r < p; ++r) exact += run.inputAt(r, i);
        sum[i] += run.outputAt(0, i) - exact;
      }
    }
    double worst = 0;
    for (double s : sum) worst = std::max(worst, std::fabs(s));
    return worst;
  };
  const double with100 = accumulatedError(true, 100), with200 = accumulatedError(true, 200);
  const double without100 = accumulatedError(false, 100), without200 = accumulatedError(false, 200);
  printf("largest accumulated error after 100 / 200 steps: with feedback %.3f / %.3f, without %.3f / %.3f\n", with100,
         with200, without100, without200);
  EXPECT_GT(without200, 1.8 * without100) << "without feedback the error should grow with the steps";
  EXPECT_LT(with200, 1.5 * with100 + 1.0) << "with feedback the accumulated error should stay bounded";
  EXPECT_LT(with200, 0.2 * without200);
}

TEST(CompressedAllReduce, HierarchicalVariantAcrossHostShapes) {
  // Hosts of 2-4 ranks; the inter-host part compresses, the intra-host part is exact.
  struct Shape {
    int32_t hosts, per;
  };
  for (Shape sh : {Shape{2, 2}, Shape{3, 4}, Shape{4, 2}, Shape{2, 3}}) {
    const int32_t p = sh.hosts * sh.per;
    for (uint64_t count : {uint64_t{5}, uint64_t{kBlock * 3 + 1}, uint64_t{4096}}) {
      for (collRedOp_t op : {collSum, collAvg}) {
        for (bool inPlace : {false, true}) {
          SCOPED_TRACE(testing::Message()
                       << sh.hosts << "x" << sh.per << " count " << count << " op " << op << " in-place " << inPlace);
          CompressedRun run(p, count, collFloat32, op, /*feedback=*/true, sh.per);
          ASSERT_STREQ(run.schedules[0].algorithm, "compressed(hier)");
          std::vector<std::vector<float>> inputs;
          for (int32_t r = 0; r < p; ++r) inputs.push_back(gradient(r, count, 11));
          for (int32_t r = 0; r < p; ++r) run.setInput(r, inputs[static_cast<size_t>(r)]);
          Status st = run.run(inPlace);
          ASSERT_TRUE(st.ok()) << st.message();
          run.expectIdenticalOnEveryRank();
          double num = 0, den = 0;
          for (uint64_t i = 0; i < count; ++i) {
            double exact = 0;
            for (int32_t r = 0; r < p; ++r) exact += inputs[static_cast<size_t>(r)][i];
            if (op == collAvg) exact /= p;
            num += (run.outputAt(0, i) - exact) * (run.outputAt(0, i) - exact);
            den += exact * exact;
          }
          EXPECT_LT(std::sqrt(num / den), 0.25);
        }
      }
    }
  }
}

TEST(CompressedAllReduce, HierarchicalFallsBackToTwoShotOnUnevenHosts) {
  Topology t = Topology::fromHostHashes(0, {1, 1, 1, 2, 2});
  EXPECT_FALSE(compressedHierarchyApplies(t));
  CollArgs a;
  a.count = 1000;
  Schedule s;
  buildHierarchicalCompressedAllReduce(t, a, kBlock, &s);
  EXPECT_STREQ(s.algorithm, "compressed(two-shot)");
}

TEST(CompressedAllReduce, StreamsBlocksThroughSmallRingsBitIdentically) {
  // 256-byte rings and 1 KiB slices: every shard crosses in many pieces, so sends take the words of
  // partly quantized shards and sums start on partly received ones (unit-converting dependencies).
  const uint64_t count = 8 * 1024 + 13;
  CompressedRun small(4, count, collFloat32, collSum, true, 1, 256, 1024);
  CompressedRun big(4, count, collFloat32, collSum, true, 1, 1 << 20, 0);
  for (int32_t r = 0; r < 4; ++r) {
    small.setInput(r, gradient(r, count, 5));
    big.setInput(r, gradient(r, count, 5));
  }
  for (int step = 0; step < 3; ++step) {  // error feedback carried across calls too
    ASSERT_TRUE(small.run(false, static_cast<uint64_t>(step)).ok());
    ASSERT_TRUE(big.run(false, static_cast<uint64_t>(step)).ok());
    small.expectIdenticalOnEveryRank();
    for (int32_t r = 0; r < 4; ++r) {
      ASSERT_EQ(0, memcmp(small.recv[static_cast<size_t>(r)].data(), big.recv[static_cast<size_t>(r)].data(),
                          small.recv[0].size()))
          << "rank " << r << " step " << step;
      ASSERT_EQ(small.residual[static_cast<size_t>(r)], big.residual[static_cast<size_t>(r)]);
    }
  }
}

TEST(CompressedAllReduce, OneRankCopies) {
  CompressedRun run(1, 100);
  run.setInput(0, gradient(0, 100));
  ASSERT_TRUE(run.run().ok());
  EXPECT_EQ(0, memcmp(run.send[0].data(), run.recv[0].data(), run.send[0].size()));
}

}  // namespace
}  // namespace coll
