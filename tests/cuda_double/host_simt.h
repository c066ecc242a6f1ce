// Host emulation of the CUDA builtins that the device kernels use (src/kernels/cuda/*.cuh), so the
// same kernel source runs on the host: in the CUDA test double and in the tests that compare the
// kernels with the CPU ones. Include this before the .cuh files.
//
// The model: IEEE float operations are what the device does with -fmad=false -prec-div=true
// -ftz=false (each result rounded on its own: volatile keeps the host compiler from fusing). A
// launch runs every thread of the grid one after another on the calling thread
// (emuLaunchSequential), except for kernels with warp shuffles: those run a warp's 32 lanes as 32
// threads (emuLaunchLockstep), warp after warp, and __shfl_xor_sync is a rendezvous of the lanes its
// mask names. Plain threads, a mutex and a condition variable: nothing the sanitizers cannot see.
// The launch geometry is thread-local, so launches on different threads may run at once.
#pragma once

#include <atomic>
#include <barrier>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)

namespace coll::kernels::cuda::dev {

struct EmuDim {
  unsigned x = 0, y = 0, z = 0;
};
inline thread_local EmuDim threadIdx, blockIdx, blockDim, gridDim;

struct float4 {
  float x, y, z, w;
};
struct uint4 {
  uint32_t x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline uint32_t max(uint32_t a, uint32_t b) { return a > b ? a : b; }
inline bool isnan(float f) { return std::isnan(f); }

inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline long long __double_as_longlong(double d) {
  long long u;
  std::memcpy(&u, &d, 8);
  return u;
}
inline double __longlong_as_double(long long u) {
  double d;
  std::memcpy(&d, &u, 8);
  return d;
}

#define COLL_EMU_ROUNDED(name, T, expr) \
  inline T name(T a, T b) {             \
    volatile T r = (expr);              \
    return r;                           \
  }
COLL_EMU_ROUNDED(__fadd_rn, float, a + b)
COLL_EMU_ROUNDED(__fsub_rn, float, a - b)
COLL_EMU_ROUNDED(__fmul_rn, float, a * b)
COLL_EMU_ROUNDED(__fdiv_rn, float, a / b)
COLL_EMU_ROUNDED(__dadd_rn, double, a + b)
COLL_EMU_ROUNDED(__dmul_rn, double, a * b)
COLL_EMU_ROUNDED(__ddiv_rn, double, a / b)
#undef COLL_EMU_ROUNDED
inline float __double2float_rn(double d) {
  volatile float r = static_cast<float>(d);
  return r;
}
inline uint32_t __umulhi(uint32_t a, uint32_t b) { return static_cast<uint32_t>((uint64_t{a} * b) >> 32); }

inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return std::atomic_ref<unsigned long long>(*p).fetch_add(v, std::memory_order_relaxed);
}

// ---- warps in lockstep ---------------------------------------------------------------------------

// One warp's shuffle state. A lane's k-th shuffle leaves its value in vals[lane][k % 2] and waits
// until every lane of the mask has made its k-th shuffle; two slots suffice because no lane can
// start shuffle k + 2 before all lanes of the mask have read shuffle k's values.
class EmuWarp {
 public:
  uint32_t shflXor(int lane, uint32_t mask, uint32_t v, int laneMask) {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t k = done_[lane];
    vals_[lane][k & 1] = v;
    done_[lane] = k + 1;
    cv_.notify_all();
    cv_.wait(lock, [&] {
      for (int l = 0; l < 32; ++l) {
        if ((mask >> l & 1u) && done_[l] < k + 1) return false;
      }
      return true;
    });
    return vals_[lane ^ laneMask][k & 1];
  }
  void reset() {
    std::lock_guard<std::mutex> lock(mu_);
    for (uint64_t& d : done_) d = 0;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t done_[32] = {};
  uint32_t vals_[32][2] = {};
};
inline thread_local EmuWarp* tEmuWarp = nullptr;
inline thread_local int tEmuLane = 0;

inline uint32_t __shfl_xor_sync(uint32_t mask, uint32_t v, int laneMask) {
  return tEmuWarp->shflXor(tEmuLane, mask, v, laneMask);
}

// ---- launches ------------------------------------------------------------------------------------

struct EmuGeometry {
  unsigned grid[3];
  unsigned block[3];
};

// Every thread of the grid, one after another on this thread (kernels without shuffles).
template <class F>
void emuLaunchSequential(const EmuGeometry& g, F&& kernel) {
  gridDim = {g.grid[0], g.grid[1], g.grid[2]};
  blockDim = {g.block[0], g.block[1], g.block[2]};
  for (unsigned bz = 0; bz < g.grid[2]; ++bz) {
    for (unsigned by = 0; by < g.grid[1]; ++by) {
      for (unsigned bx = 0; bx < g.grid[0]; ++bx) {
        blockIdx = {bx, by, bz};
        for (unsigned tz = 0; tz < g.block[2]; ++tz) {
          for (unsigned ty = 0; ty < g.block[1]; ++ty) {
            for (unsigned tx = 0; tx < g.block[0]; ++tx) {
              threadIdx = {tx, ty, tz};
              kernel();
            }
          }
        }
      }
    }
  }
}

// 32 lane threads; lane l runs thread l of every warp, warps one after another (all lanes meet
// between warps). Threads of a block are numbered x fastest, as CUDA forms warps.
template <class F>
void emuLaunchLockstep(const EmuGeometry& g, F&& kernel) {
  const unsigned perBlock = g.block[0] * g.block[1] * g.block[2];
  const unsigned warpsPerBlock = (perBlock + 31) / 32;
  const uint64_t blocks = uint64_t{g.grid[0]} * g.grid[1] * g.grid[2];
  EmuWarp warp;
  std::barrier<> between(32);
  std::vector<std::thread> lanes;
  lanes.reserve(32);
  for (int lane = 0; lane < 32; ++lane) {
    lanes.emplace_back([&, lane] {
      gridDim = {g.grid[0], g.grid[1], g.grid[2]};
      blockDim = {g.block[0], g.block[1], g.block[2]};
      tEmuWarp = &warp;
      tEmuLane = lane;
      for (uint64_t b = 0; b < blocks; ++b) {
        blockIdx = {static_cast<unsigned>(b % g.grid[0]), static_cast<unsigned>(b / g.grid[0] % g.grid[1]),
                    static_cast<unsigned>(b / g.grid[0] / g.grid[1])};
        for (unsigned w = 0; w < warpsPerBlock; ++w) {
          const unsigned t = w * 32 + static_cast<unsigned>(lane);
          if (t < perBlock) {
            threadIdx = {t % g.block[0], t / g.block[0] % g.block[1], t / g.block[0] / g.block[1]};
            kernel();
          }
          between.arrive_and_wait();
          if (lane == 0) warp.reset();
          between.arrive_and_wait();
        }
      }
      tEmuWarp = nullptr;
    });
  }
  for (std::thread& t : lanes) t.join();
}

}  // namespace coll::kernels::cuda::dev
