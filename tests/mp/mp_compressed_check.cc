// mp_compressed_check: collAllReduceCompressed across real processes (public API only): results
// within the 4-bit format's tolerance of a float64 reference, bit-identical on every rank, sizes
// below the threshold run uncompressed (same bits as collAllReduce, residual untouched), and the
// wire bytes of large tensors at most 14% of an uncompressed ring's.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/perf_compress.h"
#include "bench/perf_data.h"
#include "collective/collective.h"

namespace {

using namespace coll::perf;

constexpr size_t kGuard = 64;

struct Case {
  size_t count;
  collDataType_t type;
  collRedOp_t op;
  CompressSpec spec;
  bool inPlace;
  size_t minBytes;  // the call's cfg.minBytes (0 = COLL_COMPRESS_MIN_BYTES)
};

struct Checker {
  collComm_t comm = nullptr;
  int rank = 0, nranks = 1;
  int cases = 0, failures = 0;
  size_t thresholdBytes = 64 * 1024;  // COLL_COMPRESS_MIN_BYTES as the test sets it (default)
  double worstWire = 0;               // largest wire fraction seen on a large float32 tensor
  double worstRatio = 0;              // largest error / tolerance of a compressed call (<= 1)

  bool ok(collResult_t res, const char* what) {
    if (res == collSuccess) return true;
    fprintf(stderr, "rank %d: FAIL %s returned %s: %s\n", rank, what, collGetErrorString(res), collGetLastError(comm));
    return false;
  }

  bool stats(collCommStats_t* out) { return ok(collCommGetStats(comm, out), "collCommGetStats"); }

  // The same value on every rank? (max == min of a 64-bit value.)
  bool agree(unsigned long long v, bool* same) {
    unsigned long long hi = 0, lo = 0;
    if (!ok(collAllReduce(&v, &hi, 1, collUint64, collMax, comm, nullptr), "hash max") ||
        !ok(collAllReduce(&v, &lo, 1, collUint64, collMin, comm, nullptr), "hash min"))
      return false;
    *same = hi == lo;
    return true;
  }

  bool sumDouble(double v, double* out) {
    return ok(collAllReduce(&v, out, 1, collFloat64, collSum, comm, nullptr), "sum");
  }

  void failCase(const Case& c, const std::string& why) {
    ++failures;
    fprintf(stderr, "rank %d: FAIL count=%zu %s %s %s %s minBytes=%zu: %s\n", rank, c.count, typeName(c.type),
            opName(c.op), compressSpecName(c.spec).c_str(), c.inPlace ? "in-place" : "out-of-place", c.minBytes,
            why.c_str());
  }

  // Returns false on a communication error (the battery stops).
  bool run(const Case& c) {
    ++cases;
    const size_t esz = typeSize(c.type), bytes = c.count * esz;
    const uint64_t seed = c.count * 977 + static_cast<uint64_t>(c.type) * 31 + (c.inPlace ? 7 : 0) + c.spec.blockSize;
    const bool compresses = nranks > 1 && bytes >= (c.minBytes != 0 ? c.minBytes : thresholdBytes);
    std::vector<unsigned char> send(bytes + kGuard), recv(bytes + kGuard);
    fillCompressInput(c.inPlace ? recv.data() : send.data(), c.count, c.type, rank, seed);
    if (!c.inPlace) memset(recv.data(), 0xa5, bytes);
    memset(recv.data() + bytes, 0x5a, kGuard);
    // A compressed call starts from a zero residual (the tolerance assumes it); one that falls
    // back must leave whatever is there untouched.
    std::vector<float> residual;
    if (c.spec.feedback) residual.assign(c.count, compresses ? 0.0f : 0.375f);
    collCompression_t cfg = compressionConfig(c.spec);
    cfg.minBytes = c.minBytes;
    collCommStats_t before, after;
    if (!stats(&before)) return false;
    const void* src = c.inPlace ? recv.data() : send.data();
    if (!ok(collAllReduceCompressed(src, recv.data(), c.count, c.type, c.op, &cfg,
                                    residual.empty() ? nullptr : residual.data(), comm, nullptr),
            "collAllReduceCompressed"))
      return false;
    if (!stats(&after)) return false;

    CompressCheck check = checkCompressed(recv.data(), c.count, c.type, c.op, nranks, c.spec, seed);
    if (compresses) worstRatio = std::max(worstRatio, check.worstRatio);
    if (check.wrong)
      failCase(c, std::to_string(check.wrong) + " elements beyond the tolerance; first: " + check.firstError);
    for (size_t i = 0; i < kGuard; ++i) {
      if (recv[bytes + i] != 0x5a) {
        failCase(c, "wrote past count (guard byte " + std::to_string(i) + ")");
        break;
      }
    }
    if (!c.inPlace) {
      std::vector<unsigned char> fresh(bytes + 1);
      fillCompressInput(fresh.data(), c.count, c.type, rank, seed);
      if (memcmp(fresh.data(), send.data(), bytes) != 0) failCase(c, "the send buffer changed");
    }
    const unsigned long long calls = after.compressedCalls - before.compressedCalls;
    const unsigned long long fallbacks = after.uncompressedFallbacks - before.uncompressedFallbacks;
    if (calls != (compresses ? 1u : 0u) || fallbacks != (compresses ? 0u : 1u)) {
      char msg[160];
      snprintf(msg, sizeof(msg), "expected the call to run %s; stats say %llu compressed, %llu fallbacks",
               compresses ? "compressed" : "uncompressed", calls, fallbacks);
      failCase(c, msg);
    }
    if (!compresses) {
      for (float r : residual) {
        if (r != 0.375f) {
          failCase(c, "an uncompressed fallback changed the residual");
          break;
        }
      }
    }
    bool same = false;
    if (!agree(hashBytes(recv.data(), bytes), &same)) return false;
    if (!same) failCase(c, "ranks hold different results");

    if (!compresses && nranks > 1) {
      // The fallback is the plain All-Reduce: the same bits as collAllReduce of the same input.
      std::vector<unsigned char> in(bytes + 1), plain(bytes + 1);
      fillCompressInput(in.data(), c.count, c.type, rank, seed);
      if (!ok(collAllReduce(in.data(), plain.data(), c.count, c.type, c.op, comm, nullptr), "collAllReduce"))
        return false;
      if (memcmp(plain.data(), recv.data(), bytes) != 0) failCase(c, "the fallback differs from collAllReduce");
    }
    if (compresses && c.type == collFloat32 && c.spec.blockSize >= 64 && c.count >= (1u << 20)) {
      // Wire bytes over all ranks against an uncompressed float32 ring's.
      double sent = 0;
      if (!sumDouble(static_cast<double>(after.compressedWireBytes - before.compressedWireBytes), &sent)) return false;
      const double fraction = sent / (nranks * ringWireBytes(static_cast<double>(bytes), nranks));
      worstWire = std::max(worstWire, fraction);
      if (fraction > 0.14)
        failCase(c, "wire bytes are " + std::to_string(100 * fraction) + "% of a float32 ring's (> 14%)");
    }
    return true;
  }

  // The checker itself: a result checked against another seed's reference must fail.
  void negativeControl() {
    ++cases;
    const size_t count = 4096;
    CompressSpec spec;
    spec.enabled = true;
    std::vector<float> in(count), out(count);
    fillCompressInput(in.data(), count, collFloat32, rank, 1);
    collCompression_t cfg = compressionConfig(spec);
    if (!ok(collAllReduceCompressed(in.data(), out.data(), count, collFloat32, collSum, &cfg, nullptr, comm, nullptr),
            "collAllReduceCompressed (control)"))
      return;
    CompressCheck right = checkCompressed(out.data(), count, collFloat32, collSum, nranks, spec, 1);
    CompressCheck wrong = checkCompressed(out.data(), count, collFloat32, collSum, nranks, spec, 2);
    if (right.wrong != 0 || wrong.wrong < count / 2) {
      ++failures;
      fprintf(stderr,
              "rank %d: FAIL the tolerance check does not discriminate: %zu wrong against the right "
              "reference, %zu of %zu against another seed's\n",
              rank, right.wrong, wrong.wrong, count);
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else {
      fprintf(stderr,
              "usage: mp_compressed_check [--quick]\n"
              "  run under collrun (COLL_COMPRESS_MIN_BYTES must be unset or 64K); --quick runs fewer\n"
              "  combinations of the small sizes\n");
      return 2;
    }
  }
  Checker c;
  collResult_t res = collCommInitFromEnv(&c.comm, nullptr);
  if (res != collSuccess) {
    fprintf(stderr, "FAIL: collCommInitFromEnv: %s: %s\n", collGetErrorString(res), collGetLastError(nullptr));
    return 2;
  }
  if (collCommUserRank(c.comm, &c.rank) != collSuccess || collCommCount(c.comm, &c.nranks) != collSuccess) {
    fprintf(stderr, "FAIL: cannot query rank/size\n");
    return 2;
  }
  bool alive = true;
  auto spec = [](int block, bool stochastic, bool feedback) {
    CompressSpec s;
    s.enabled = true;
    s.blockSize = block;
    s.stochastic = stochastic;
    s.feedback = feedback;
    return s;
  };
  // Small and odd sizes, every type and op, both roundings, with and without feedback, in and out
  // of place; minBytes 1 forces compression, 0 leaves it to COLL_COMPRESS_MIN_BYTES (64K).
  const size_t small[] = {1, 7, 63, 64, 65, 1009, 16411};
  for (size_t count : small) {
    for (collDataType_t t : {collFloat32, collFloat16, collBfloat16}) {
      for (collRedOp_t op : {collSum, collAvg}) {
        for (int variant = 0; variant < 4 && alive; ++variant) {
          if (quick && variant != (static_cast<int>(count) + static_cast<int>(t) + static_cast<int>(op)) % 4) continue;
          const bool stochastic = variant & 1, feedback = variant & 2;
          const int block = 32 << ((count + variant) % 4);
          alive = c.run({count, t, op, spec(block, stochastic, feedback), variant == 1, 1});
        }
        if (alive) alive = c.run({count, t, op, spec(64, false, true), count % 2 == 0, 0});
      }
    }
  }
  // Above the threshold: the library's default decides (compressed), odd counts, and the large
  // float32 tensors whose wire bytes are measured.
  for (size_t count : {size_t{65537}, size_t{1048583}}) {
    for (collDataType_t t : {collFloat32, collBfloat16}) {
      if (alive) alive = c.run({count, t, collAvg, spec(64, false, true), false, 0});
      if (alive) alive = c.run({count, t, collSum, spec(128, true, false), true, 0});
    }
  }
  if (alive) alive = c.run({size_t{1} << 21, collFloat32, collSum, spec(256, false, false), false, 1});
  if (alive) c.negativeControl();
  if (!alive) {
    collCommAbort(c.comm);
    fprintf(stderr, "rank %d: FAIL: communication error after %d cases\n", c.rank, c.cases);
    return 2;
  }
  res = collCommDestroy(c.comm);
  if (res != collSuccess) {
    fprintf(stderr, "rank %d: FAIL: collCommDestroy: %s\n", c.rank, collGetErrorString(res));
    return 2;
  }
  if (c.failures) {
    fprintf(stderr, "rank %d: FAIL: %d of %d cases wrong\n", c.rank, c.failures, c.cases);
    return 1;
  }
  printf(
      "rank %d of %d: OK: %d cases passed (wire bytes of large float32 tensors: %.2f%% of a ring's; worst "
      "error %.2f of the tolerance)\n",
      c.rank, c.nranks, c.cases, 100 * c.worstWire, c.worstRatio);
  return 0;
}
