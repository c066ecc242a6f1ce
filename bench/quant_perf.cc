// quant_perf: single-core throughput of the 4-bit quantization kernels (GB/s of float32 input) per
// SIMD level, next to memcpy of the same bytes measured in the same run (median of alternating runs).
// Times are the thread's CPU time by default (-w: wall time), so a busy shared machine that
// deschedules the benchmark does not count against the kernels.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "src/kernels/quantize.h"

namespace {

bool gWall = false;

double now() {
  if (gWall) return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

void usage() {
  std::fprintf(
      stderr,
      "usage: quant_perf [-s MiB of float32 input (default 64)] [-r runs (default 7)] [-B block size "
      "(default 64)] [-l level: portable|avx2|avx512 (default all supported)] [-w: wall time, not CPU time]\n");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace coll::kernels;
  size_t mib = 64;
  int runs = 7;
  int block = 64;
  std::vector<std::string> levels;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-w") {
      gWall = true;
      continue;
    }
    if (i + 1 >= argc) {
      usage();
      return 2;
    }
    if (a == "-s") {
      mib = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "-r") {
      runs = std::atoi(argv[++i]);
    } else if (a == "-B") {
      block = std::atoi(argv[++i]);
    } else if (a == "-l") {
      levels.push_back(argv[++i]);
    } else {
      usage();
      return 2;
    }
  }
  if (mib == 0 || runs < 1 || !validQuantBlockSize(block)) {
    usage();
    return 2;
  }
  if (levels.empty()) levels = {"portable", "avx2", "avx512"};

  const size_t n = mib * (size_t{1} << 20) / sizeof(float);
  std::vector<float> in(n), residual(n, 0.0f), acc(n, 0.0f), copy(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float& v : in) v = nd(rng);
  std::vector<uint8_t> q(quantizedBytes(n, block));
  // Touch every page once so the first timed run does not pay for faults.
  std::memcpy(copy.data(), in.data(), n * sizeof(float));

  std::printf("# quant_perf: %zu MiB float32 input, B = %d, median of %d alternating runs, 1 thread, %s time\n", mib,
              block, runs, gWall ? "wall" : "thread CPU");
  std::printf("# %-8s %-22s %10s %12s %8s\n", "level", "kernel", "GB/s", "memcpy GB/s", "ratio");
  const double bytes = static_cast<double>(n) * sizeof(float);
  for (const std::string& level : levels) {
    if (!forceQuantKernelLevel(level.c_str())) {
      std::printf("# %-8s not supported on this CPU/build\n", level.c_str());
      continue;
    }
    struct Kernel {
      const char* name;
      int mode;
    } kernels[] = {
        {"quantize nearest", 0}, {"quantize stochastic", 1}, {"quantize +residual", 2}, {"dequantize-accumulate", 3}};
    for (const Kernel& k : kernels) {
      std::vector<double> tk, tm;
      for (int r = 0; r < runs; ++r) {
        QuantParams p;
        p.blockSize = block;
        p.stochastic = k.mode == 1;
        p.seed = 42;
        p.step = static_cast<uint64_t>(r);
        const double t0 = now();
        if (k.mode == 3) {
          dequantizeAccumulate4(acc.data(), q.data(), n, block);
        } else {
          quantize4(q.data(), in.data(), collFloat32, n, p, 0, k.mode == 2 ? residual.data() : nullptr);
        }
        const double t1 = now();
        std::memcpy(copy.data(), in.data(), n * sizeof(float));
        const double t2 = now();
        tk.push_back(t1 - t0);
        tm.push_back(t2 - t1);
      }
      std::sort(tk.begin(), tk.end());
      std::sort(tm.begin(), tm.end());
      const double gk = bytes / tk[tk.size() / 2] / 1e9, gm = bytes / tm[tm.size() / 2] / 1e9;
      std::printf("  %-8s %-22s %10.2f %12.2f %8.2f\n", level.c_str(), k.name, gk, gm, gk / gm);
    }
  }
  return 0;
}
