// The intra-node device path over CUDA IPC (src/comm/device_ipc.h), against the CUDA driver test
// double (not a GPU: device memory is a memfd, IPC handles open across processes, an open in the
// handle's own process is refused as with CUDA, kernels run on host threads):
//  - ranks as threads of one process (peers used by pointer): All-Reduce of every type and op on
//    2-4 ranks, counts around the chunk, in place and not, exact and equal to the staged path's;
//  - the compressed (int4) All-Reduce on the device kernels, byte for byte the staged path's
//    results and residuals;
//  - Broadcast, Reduce, All-Gather, Reduce-Scatter, All-to-All, Gather and Scatter: exact, and
//    equal to the staged path's;
//  - registered buffers (collCommRegister) used directly, the same bytes, on threads and processes;
//  - ranks that cannot reach each other (another device of the same process) fall back to staging;
//  - 2 and 4 processes sharing device 0 (real cross-process IPC handles of the double): this test
//    binary re-executed as each rank (GpuIpcChild.*).
// With COLL_GPU_TEST_REAL_DRIVER=1 the same tests run on a GPU (bench/gpu_check.sh), less those
// that need the double's hooks or its second device.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/perf_data.h"
#include "collective/collective.h"
#include "src/base/align.h"
#include "src/comm/device_ipc.h"
#include "src/gpu/cuda_driver.h"
#include "src/kernels/reduce.h"
#include "tests/unit/comm_threads.h"
#include "tests/unit/gpu_test_driver.h"

extern char** environ;

namespace coll {
namespace {

constexpr size_t kChunk = 4096;  // COLL_GPU_IPC_CHUNK in these tests: many chunks at small counts

const bool kRealDriver = testutil::gpuTestOnRealDriver();  // tests/unit/gpu_test_driver.h

// Before anything loads the driver: the double (two devices, unless a parent process chose), a
// small IPC chunk. A child rank of the multi-process test inherits its parent's settings.
const bool kEnvironment = [] {
  if (!kRealDriver) {
    setenv("COLL_CUDA_DRIVER", COLL_CUDA_DOUBLE_PATH, 1);
    setenv("COLL_CUDA_DOUBLE_DEVICES", "2", 0);
  }
  setenv("COLL_GPU_IPC_CHUNK", "4K", 1);
  return true;
}();

using testutil::ScopedEnv;
using testutil::withComms;

const gpu::CudaDriver& cuda() {
  const gpu::CudaDriver* cu = gpu::cudaDriver();
  EXPECT_NE(cu, nullptr) << "the CUDA driver did not load";
  return *cu;
}

CUdeviceptr dp(const void* p) { return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p)); }

struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t n) { EXPECT_EQ(collMemAlloc(&ptr, n), collSuccess) << collGetLastError(nullptr); }
  ~DeviceBuffer() { EXPECT_EQ(collMemFree(ptr), collSuccess); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void upload(const void* host, size_t bytes) {
    ASSERT_EQ(cuda().cuMemcpyAsync(dp(ptr), dp(host), bytes, cu::perThreadStream()), 0);
    ASSERT_EQ(cuda().cuStreamSynchronize(cu::perThreadStream()), 0);
  }
  std::vector<unsigned char> download(size_t bytes) {
    std::vector<unsigned char> v(bytes);
    EXPECT_EQ(cuda().cuMemcpyAsync(dp(v.data()), dp(ptr), bytes, cu::perThreadStream()), 0);
    EXPECT_EQ(cuda().cuStreamSynchronize(cu::perThreadStream()), 0);
    return v;
  }
};

const collDataType_t kTypes[] = {collInt8,    collUint8,   collInt32,   collUint32,     collInt64,     collUint64,
                                 collFloat16, collFloat32, collFloat64, collBfloat16, collFloat8e4m3, collFloat8e5m2};
const collRedOp_t kOps[] = {collSum, collProd, collMax, collMin, collAvg};

// Counts around the chunk (in elements of the type) and across several chunks; the op picks
// three of them, so every type meets every count.
std::vector<size_t> countsFor(collDataType_t t, collRedOp_t op, int nranks) {
  const size_t c = kChunk / perf::typeSize(t);
  const size_t all[] = {1, static_cast<size_t>(nranks) + 1, c - 1, c, c + 1, 3 * c + 5};
  const size_t k = static_cast<size_t>(op) + static_cast<size_t>(t);
  return {all[k % 6], all[(k + 2) % 6], all[(k + 4) % 6]};
}

// One rank's battery: every type, op, count, in place and not. Returns each result's bytes in
// order; checks each against the exact expected result.
std::vector<std::vector<unsigned char>> battery(int rank, int nranks, collComm_t comm, CUstream s) {
  std::vector<std::vector<unsigned char>> results;
  for (collDataType_t t : kTypes) {
    for (collRedOp_t op : kOps) {
      for (size_t count : countsFor(t, op, nranks)) {
        for (bool inPlace : {false, true}) {
          const size_t bytes = count * perf::typeSize(t);
          std::vector<unsigned char> in(bytes);
          perf::fillInput(in.data(), count, t, op, rank, nranks);
          DeviceBuffer send(bytes), recv(bytes + 64);
          send.upload(in.data(), bytes);
          std::vector<unsigned char> guard(bytes + 64, 0x5a);
          recv.upload(guard.data(), guard.size());
          void* dst = inPlace ? send.ptr : recv.ptr;
          EXPECT_EQ(collAllReduce(send.ptr, dst, count, t, op, comm, s), collSuccess) << collGetLastError(comm);
          EXPECT_EQ(cuda().cuStreamSynchronize(s), 0);
          std::vector<unsigned char> got = (inPlace ? send : recv).download(bytes);
          std::string first;
          EXPECT_EQ(perf::checkResult(got.data(), count, t, op, nranks, &first), 0u)
              << "rank " << rank << " of " << nranks << ": " << perf::typeName(t) << " " << perf::opName(op)
              << " count " << count << (inPlace ? " in place" : "") << ": " << first;
          if (!inPlace) {
            std::vector<unsigned char> tail = recv.download(bytes + 64);
            for (size_t i = bytes; i < bytes + 64; ++i) EXPECT_EQ(tail[i], 0x5a) << "written past the end";
            EXPECT_EQ(send.download(bytes), in) << "the send buffer changed";
          }
          results.push_back(std::move(got));
        }
      }
    }
  }
  return results;
}

CUstream makeStream(int device = 0) {
  EXPECT_TRUE(gpu::setCurrentDevice(cuda(), device).ok());
  CUstream s = nullptr;
  EXPECT_EQ(cuda().cuStreamCreate(&s, cu::kStreamNonBlocking), 0);
  return s;
}

// Every type and op on 2-4 ranks (threads of this process: peers by pointer), through IPC, then
// the same through staging: exact, and the same bytes.
TEST(GpuIpc, AllReduceEveryTypeAndOpEqualsStaging) {
  for (int n : {2, 3, 4}) {
    std::vector<std::vector<std::vector<unsigned char>>> ipc(static_cast<size_t>(n)), staged(static_cast<size_t>(n));
    const uint64_t before = deviceIpcCollectives();
    withComms(n, [&](int rank, collComm_t comm) {
      CUstream s = makeStream();
      ipc[static_cast<size_t>(rank)] = battery(rank, n, comm, s);
      EXPECT_EQ(cuda().cuStreamDestroy(s), 0);
    });
    const uint64_t calls = ipc[0].size();
    EXPECT_EQ(deviceIpcCollectives() - before, calls * static_cast<uint64_t>(n)) << "every call took the IPC path";
    {
      ScopedEnv off("COLL_GPU_IPC", "0");
      withComms(n, [&](int rank, collComm_t comm) {
        CUstream s = makeStream();
        staged[static_cast<size_t>(rank)] = battery(rank, n, comm, s);
        EXPECT_EQ(cuda().cuStreamDestroy(s), 0);
      });
    }
    EXPECT_EQ(deviceIpcCollectives() - before, calls * static_cast<uint64_t>(n)) << "COLL_GPU_IPC=0 stages";
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(ipc[static_cast<size_t>(r)].size(), staged[static_cast<size_t>(r)].size());
      for (size_t i = 0; i < ipc[static_cast<size_t>(r)].size(); ++i) {
        EXPECT_EQ(ipc[static_cast<size_t>(r)][i], staged[static_cast<size_t>(r)][i]) << "rank " << r << " call " << i;
        EXPECT_EQ(ipc[static_cast<size_t>(r)][i], ipc[0][i]) << "ranks differ: rank " << r << " call " << i;
      }
    }
  }
}

// One rank's compressed battery: float32/float16/bfloat16, sum and avg, nearest and stochastic
// rounding, every block size, counts within one round and across several, in place and not, with
// and without a residual (two steps, so the second quantizes with the first's error). Returns each
// call's result bytes, then its residual's.
std::vector<std::vector<unsigned char>> compressedBattery(int rank, int nranks, collComm_t comm, CUstream s) {
  std::vector<std::vector<unsigned char>> results;
  uint64_t seed = 1000 + static_cast<uint64_t>(rank);
  auto next = [&] {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(static_cast<int64_t>(seed >> 40) - (int64_t{1} << 23)) / 1048576.0f;
  };
  // variant: bit 0 in place, bit 1 with a residual, bit 2 stochastic rounding. 5003 elements take
  // several rounds of the 4 KiB chunk at every block size.
  struct Case {
    collDataType_t t;
    collRedOp_t op;
    int block;
    size_t count;
    int variant;
  };
  const Case cases[] = {
      {collFloat32, collSum, 32, 5003, 7},   {collFloat32, collAvg, 256, 700, 2},  {collFloat32, collSum, 128, 1, 3},
      {collFloat16, collSum, 64, 33, 1},     {collFloat16, collAvg, 32, 5003, 6},  {collBfloat16, collSum, 256, 5003, 3},
      {collBfloat16, collAvg, 64, 700, 4},   {collBfloat16, collSum, 128, 5003, 0},
  };
  for (const Case& c : cases) {
    const collDataType_t t = c.t;
    const collRedOp_t op = c.op;
    const int block = c.block, variant = c.variant;
    const size_t count = c.count;
    const bool inPlace = (variant & 1) != 0, withResidual = (variant & 2) != 0;
    const size_t bytes = count * perf::typeSize(t);
    std::vector<float> x(count);
    for (float& v : x) v = next();
    std::vector<unsigned char> in(bytes);
    for (size_t i = 0; i < count; ++i) {
      if (t == collFloat32) memcpy(in.data() + 4 * i, &x[i], 4);
      if (t == collFloat16) { const uint16_t h = kernels::floatToHalf(x[i]); memcpy(in.data() + 2 * i, &h, 2); }
      if (t == collBfloat16) { const uint16_t h = kernels::floatToBfloat16(x[i]); memcpy(in.data() + 2 * i, &h, 2); }
    }
    DeviceBuffer send(bytes), recv(bytes), residual(count * 4);
    std::vector<float> zero(count, 0.0f);
    residual.upload(zero.data(), count * 4);
    collCompression_t cfg = COLL_COMPRESSION_INITIALIZER;
    cfg.blockSize = block;
    cfg.rounding = (variant & 4) != 0 ? collRoundStochastic : collRoundNearest;
    cfg.seed = 77;
    cfg.minBytes = 1;
    for (unsigned long long step = 0; step < (withResidual ? 2u : 1u); ++step) {
      cfg.step = step;
      send.upload(in.data(), bytes);
      void* dst = inPlace ? send.ptr : recv.ptr;
      EXPECT_EQ(collAllReduceCompressed(send.ptr, dst, count, t, op, &cfg,
                                        withResidual ? residual.ptr : nullptr, comm, s),
                collSuccess)
          << collGetLastError(comm);
      EXPECT_EQ(cuda().cuStreamSynchronize(s), 0);
      results.push_back((inPlace ? send : recv).download(bytes));
      results.push_back(residual.download(count * 4));
      if (!inPlace) EXPECT_EQ(send.download(bytes), in) << "the send buffer changed";
    }
  }
  return results;
}

// The compressed All-Reduce over IPC runs the device int4 kernels and gives the staged (host)
// path's bytes exactly, results and residuals, on 2-4 ranks; the same on every rank.
TEST(GpuIpc, CompressedAllReduceEqualsStagingBitForBit) {
  for (int n : {2, 3, 4}) {
    std::vector<std::vector<std::vector<unsigned char>>> ipc(static_cast<size_t>(n)), staged(static_cast<size_t>(n));
    std::vector<unsigned long long> compressedCalls(static_cast<size_t>(n));
    const uint64_t before = deviceIpcCollectives();
    withComms(n, [&](int rank, collComm_t comm) {
      CUstream s = makeStream();
      ipc[static_cast<size_t>(rank)] = compressedBattery(rank, n, comm, s);
      collCommStats_t st;
      EXPECT_EQ(collCommGetStats(comm, &st), collSuccess);
      compressedCalls[static_cast<size_t>(rank)] = st.compressedCalls;
      EXPECT_EQ(cuda().cuStreamDestroy(s), 0);
    });
    const uint64_t calls = ipc[0].size() / 2;
    EXPECT_EQ(deviceIpcCollectives() - before, calls * static_cast<uint64_t>(n)) << "every call took the IPC path";
    for (unsigned long long c : compressedCalls) EXPECT_EQ(c, calls) << "counted as compressed calls";
    {
      ScopedEnv off("COLL_GPU_IPC", "0");
      withComms(n, [&](int rank, collComm_t comm) {
        CUstream s = makeStream();
        staged[static_cast<size_t>(rank)] = compressedBattery(rank, n, comm, s);
        EXPECT_EQ(cuda().cuStreamDestroy(s), 0);
      });
    }
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(ipc[static_cast<size_t>(r)].size(), staged[static_cast<size_t>(r)].size());
      for (size_t i = 0; i < ipc[static_cast<size_t>(r)].size(); ++i) {
        EXPECT_EQ(ipc[static_cast<size_t>(r)][i], staged[static_cast<size_t>(r)][i])
            << "rank " << r << (i % 2 ? " residual" : " result") << " of call " << i / 2;
        if (i % 2 == 0) EXPECT_EQ(ipc[static_cast<size_t>(r)][i], ipc[0][i]) << "ranks differ: call " << i / 2;
      }
    }
  }
}

// A compressed call below its minBytes runs uncompressed (staged, as the host path decides); a
// residual in ordinary host memory is refused before anything runs.
TEST(GpuIpc, CompressedCallsTheIpcPathDoesNotTake) {
  const int n = 2;
  const uint64_t before = deviceIpcCollectives();
  withComms(n, [&](int rank, collComm_t comm) {
    CUstream s = makeStream();
    const size_t count = 100;
    std::vector<float> x(count, static_cast<float>(rank + 1));
    DeviceBuffer a(count * 4), r(count * 4);
    a.upload(x.data(), count * 4);
    collCompression_t cfg = COLL_COMPRESSION_INITIALIZER;
    cfg.minBytes = 1 << 20;
    ASSERT_EQ(collAllReduceCompressed(a.ptr, a.ptr, count, collFloat32, collSum, &cfg, r.ptr, comm, s), collSuccess);
    ASSERT_EQ(cuda().cuStreamSynchronize(s), 0);
    std::vector<unsigned char> raw = a.download(count * 4);
    for (size_t i = 0; i < count; ++i) {
      float v;
      memcpy(&v, raw.data() + i * 4, 4);
      ASSERT_EQ(v, 3.0f) << "uncompressed: exact";
    }
    std::vector<float> hostResidual(count, 0.0f);
    cfg.minBytes = 1;
    EXPECT_EQ(collAllReduceCompressed(a.ptr, a.ptr, count, collFloat32, collSum, &cfg, hostResidual.data(), comm, s),
              collInvalidArgument);
    EXPECT_NE(std::string(collGetLastError(comm)).find("residual"), std::string::npos) << collGetLastError(comm);
    EXPECT_EQ(a.download(count * 4), raw) << "the refused call touched the buffer";
    EXPECT_EQ(cuda().cuStreamDestroy(s), 0);
  });
  EXPECT_EQ(deviceIpcCollectives(), before) << "no call took the IPC path";
}

// Calls the path does not take (PreMulSum) still stage on an IPC communicator, interleaved with
// IPC calls.
TEST(GpuIpc, OtherCallsStageBetweenIpcCalls) {
  const int n = 3;
  const uint64_t before = deviceIpcCollectives();
  withComms(n, [&](int rank, collComm_t comm) {
    CUstream s = makeStream();
    const size_t count = 2 * kChunk + 7;
    std::vector<float> x(count, static_cast<float>(rank + 1));
    DeviceBuffer a(count * 4), b(count * 4 * n);
    a.upload(x.data(), count * 4);
    ASSERT_EQ(collAllReduce(a.ptr, a.ptr, count, collFloat32, collSum, comm, s), collSuccess);
    ASSERT_EQ(collAllGather(a.ptr, b.ptr, count, collFloat32, comm, s), collSuccess);
    collRedOp_t premul;
    const float two = 2.0f;
    ASSERT_EQ(collRedOpCreatePreMulSum(&premul, const_cast<float*>(&two), collFloat32, collScalarHostImmediate, comm),
              collSuccess);
    ASSERT_EQ(collAllReduce(a.ptr, a.ptr, count, collFloat32, premul, comm, s), collSuccess);
    ASSERT_EQ(collAllReduce(a.ptr, a.ptr, count, collFloat32, collMax, comm, s), collSuccess);
    ASSERT_EQ(cuda().cuStreamSynchronize(s), 0);
    EXPECT_EQ(collRedOpDestroy(premul, comm), collSuccess);
    std::vector<unsigned char> raw = a.download(count * 4);
    std::vector<unsigned char> all = b.download(count * 4 * n);
    const float sum = static_cast<float>(n * (n + 1) / 2);
    for (size_t i = 0; i < count; ++i) {
      float v, g;
      memcpy(&v, raw.data() + i * 4, 4);
      ASSERT_EQ(v, 2.0f * sum * static_cast<float>(n)) << i;
      memcpy(&g, all.data() + ((i * 7) % (count * n)) * 4, 4);
      ASSERT_EQ(g, sum);
    }
    EXPECT_EQ(cuda().cuStreamDestroy(s), 0);
  });
  EXPECT_EQ(deviceIpcCollectives() - before, 3u * n) << "three of the four calls on the IPC path";
}

// Calls over CUDA IPC run no schedule, yet a profiler (and COLL_TRACE_FILE) sees each: one start
// and one stop with the algorithm "cuda-ipc", around the host barriers the path takes.
struct IpcProfile {
  std::mutex mu;
  std::vector<collProfileEvent_t> ipcCalls;
  static void callback(const collProfileEvent_t* e, void* self) {
    auto* p = static_cast<IpcProfile*>(self);
    if (e->type != collProfileColl || std::string(e->algorithm) != "cuda-ipc") return;
    std::lock_guard<std::mutex> lock(p->mu);
    p->ipcCalls.push_back(*e);
  }
};

TEST(GpuIpc, IpcCallsAreProfiled) {
  const int n = 2;
  IpcProfile prof[n];
  const uint64_t before = deviceIpcCollectives();
  withComms(n, [&](int rank, collComm_t comm) {
    ASSERT_EQ(collCommSetProfiler(comm, &IpcProfile::callback, &prof[rank]), collSuccess);
    CUstream s = makeStream();
    const size_t count = 3 * kChunk + 1;
    std::vector<float> x(count, 1.0f);
    DeviceBuffer a(count * 4);
    a.upload(x.data(), count * 4);
    ASSERT_EQ(collAllReduce(a.ptr, a.ptr, count, collFloat32, collSum, comm, s), collSuccess);
    ASSERT_EQ(cuda().cuStreamSynchronize(s), 0);
    ASSERT_EQ(collCommSetProfiler(comm, nullptr, nullptr), collSuccess);
    EXPECT_EQ(cuda().cuStreamDestroy(s), 0);
  });
  ASSERT_EQ(deviceIpcCollectives() - before, static_cast<uint64_t>(n)) << "the call took the IPC path";
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(prof[r].ipcCalls.size(), 2u) << "rank " << r;
    const collProfileEvent_t& start = prof[r].ipcCalls[0];
    const collProfileEvent_t& stop = prof[r].ipcCalls[1];
    EXPECT_EQ(start.phase, collProfileStart);
    EXPECT_EQ(stop.phase, collProfileStop);
    EXPECT_STREQ(start.name, "allreduce");
    EXPECT_EQ(start.count, 3 * kChunk + 1);
    EXPECT_EQ(start.bytes, (3 * kChunk + 1) * 4);
    EXPECT_EQ(stop.result, collSuccess);
    EXPECT_LE(start.timeNs, stop.timeNs);
  }
}

// The scratch is freed when the communicator is destroyed, also by a thread with no CUDA context.
TEST(GpuIpc, ScratchIsFreedOnDestroy) {
  SKIP_ON_REAL_DRIVER();  // counts the double's allocations
  (void)cuda();  // loaded by the library first
  void* handle = dlopen(COLL_CUDA_DOUBLE_PATH, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(handle, nullptr);
  auto allocations = reinterpret_cast<int (*)()>(dlsym(handle, "collCudaDoubleDeviceAllocations"));
  ASSERT_NE(allocations, nullptr);
  const int baseline = allocations();
  const uint64_t before = deviceIpcCollectives();
  withComms(2, [&](int rank, collComm_t comm) {
    std::thread([&] {
      CUstream s = makeStream();
      std::vector<int32_t> x(100, rank);
      {
        DeviceBuffer a(400);
        a.upload(x.data(), 400);
        ASSERT_EQ(collAllReduce(a.ptr, a.ptr, 100, collInt32, collSum, comm, s), collSuccess);
        ASSERT_EQ(cuda().cuStreamSynchronize(s), 0);
      }
      EXPECT_EQ(cuda().cuStreamDestroy(s), 0);
    }).join();
    // withComms destroys the communicator on this thread, which never made a context current.
  });
  EXPECT_EQ(deviceIpcCollectives() - before, 2u);
  EXPECT_EQ(allocations(), baseline) << "device memory left after destroying the communicators";
}

// Ranks of one process on different devices cannot use each other's pointers (no peer access is
// enabled): every rank stages, and the results are right.
TEST(GpuIpc, UnreachablePeersFallBackToStaging) {
  SKIP_ON_REAL_DRIVER();  // the double's two devices, never peers
  const int n = 2;
  const uint64_t before = deviceIpcCollectives();
  withComms(n, [&](int rank, collComm_t comm) {
    CUstream s = makeStream(rank);
    const size_t count = kChunk + 3;
    std::vector<int32_t> x(count, rank + 1);
    DeviceBuffer a(count * 4);
    a.upload(x.data(), count * 4);
    ASSERT_EQ(collAllReduce(a.ptr, a.ptr, count, collInt32, collSum, comm, s), collSuccess) << collGetLastError(comm);
    ASSERT_EQ(cuda().cuStreamSynchronize(s), 0);
    std::vector<unsigned char> raw = a.download(count * 4);
    for (size_t i = 0; i < count; ++i) {
      int32_t v;
      memcpy(&v, raw.data() + i * 4, 4);
      ASSERT_EQ(v, 3) << i;
    }
    collResult_t err = collSuccess;
    EXPECT_EQ(collCommGetAsyncError(comm, &err), collSuccess);
    EXPECT_EQ(err, collSuccess);
    EXPECT_EQ(cuda().cuStreamDestroy(s), 0);
  });
  EXPECT_EQ(deviceIpcCollectives(), before) << "no call took the IPC path";
}

// How a rank of registeredBattery treats its buffers.
enum class Registration { None, Registered, RegisteredThenDeregistered };

// One rank's All-Reduces on buffers inside one device allocation (at offsets, so the exchanged
// offsets matter): several types and ops, counts within a chunk and across many, in place and
// not. Returns each result's bytes; checks each against the exact expected result.
std::vector<std::vector<unsigned char>> registeredBattery(int rank, int nranks, collComm_t comm, CUstream s,
                                                          Registration how) {
  struct Case {
    collDataType_t t;
    collRedOp_t op;
  };
  const Case cases[] = {{collInt32, collSum},     {collFloat32, collAvg},    {collFloat16, collMax},
                        {collBfloat16, collProd}, {collFloat8e4m3, collMin}, {collFloat64, collSum},
                        {collUint8, collMax}};
  const size_t maxBytes = 3 * kChunk + 5 * 8 + 64;
  DeviceBuffer arena(2 * maxBytes + 256);
  void* handle = nullptr;
  if (how != Registration::None) {
    EXPECT_EQ(collCommRegister(comm, arena.ptr, 2 * maxBytes + 256, &handle), collSuccess) << collGetLastError(comm);
  }
  if (how == Registration::RegisteredThenDeregistered) EXPECT_EQ(collCommDeregister(comm, handle), collSuccess);
  std::vector<std::vector<unsigned char>> results;
  for (const Case& c : cases) {
    const size_t es = perf::typeSize(c.t);
    for (size_t count : {size_t{1}, static_cast<size_t>(nranks) + 1, 3 * kChunk / es + 5}) {
      for (bool inPlace : {false, true}) {
        const size_t bytes = count * es;
        auto* send = static_cast<std::byte*>(arena.ptr) + 64;
        auto* recv = send + roundUp(bytes, size_t{64}) + 64;
        std::vector<unsigned char> in(bytes), guard(bytes + 64, 0x5a);
        perf::fillInput(in.data(), count, c.t, c.op, rank, nranks);
        EXPECT_EQ(cuda().cuMemcpyAsync(dp(send), dp(in.data()), bytes, s), 0);
        EXPECT_EQ(cuda().cuMemcpyAsync(dp(recv), dp(guard.data()), bytes + 64, s), 0);
        void* dst = inPlace ? send : recv;
        // No synchronization before the call: it runs after the uploads queued on its stream.
        EXPECT_EQ(collAllReduce(send, dst, count, c.t, c.op, comm, s), collSuccess) << collGetLastError(comm);
        std::vector<unsigned char> got(bytes), tail(bytes + 64), sent(bytes);
        EXPECT_EQ(cuda().cuMemcpyAsync(dp(got.data()), dp(dst), bytes, s), 0);
        EXPECT_EQ(cuda().cuMemcpyAsync(dp(tail.data()), dp(recv), bytes + 64, s), 0);
        EXPECT_EQ(cuda().cuMemcpyAsync(dp(sent.data()), dp(send), bytes, s), 0);
        EXPECT_EQ(cuda().cuStreamSynchronize(s), 0);
        std::string first;
        EXPECT_EQ(perf::checkResult(got.data(), count, c.t, c.op, nranks, &first), 0u)
            << "rank " << rank << " of " << nranks << ": " << perf::typeName(c.t) << " " << perf::opName(c.op)
            << " count " << count << (inPlace ? " in place" : "") << ": " << first;
        if (!inPlace) {
          EXPECT_EQ(std::vector<unsigned char>(tail.begin() + static_cast<ptrdiff_t>(bytes), tail.end()),
                    std::vector<unsigned char>(64, 0x5a))
              << "written past the end";
          EXPECT_EQ(sent, in) << "the send buffer changed";
        }
        results.push_back(std::move(got));
      }
    }
  }
  if (how == Registration::Registered) EXPECT_EQ(collCommDeregister(comm, handle), collSuccess);
  return results;
}

// Buffers registered on every rank (collCommRegister) run in place: every rank reads its peers'
// send buffers and receive buffers, no copies through the scratch; the same bytes as unregistered
// calls. One rank without registrations, or registrations withdrawn, take the scratch.
TEST(GpuIpc, RegisteredBuffersSkipTheScratch) {
  for (int n : {2, 3, 4}) {
    auto runAll = [&](auto howFor, uint64_t* ipcCalls, uint64_t* inPlaceCalls) {
      std::vector<std::vector<std::vector<unsigned char>>> out(static_cast<size_t>(n));
      const uint64_t ipcBefore = deviceIpcCollectives(), inPlaceBefore = deviceIpcRegisteredCollectives();
      withComms(n, [&](int rank, collComm_t comm) {
        CUstream s = makeStream();
        out[static_cast<size_t>(rank)] = registeredBattery(rank, n, comm, s, howFor(rank));
        collResult_t err = collSuccess;
        EXPECT_EQ(collCommGetAsyncError(comm, &err), collSuccess);
        EXPECT_EQ(err, collSuccess);
        EXPECT_EQ(cuda().cuStreamDestroy(s), 0);
      });
      *ipcCalls = deviceIpcCollectives() - ipcBefore;
      *inPlaceCalls = deviceIpcRegisteredCollectives() - inPlaceBefore;
      return out;
    };
    uint64_t ipc = 0, inPlace = 0;
    const auto plain = runAll([](int) { return Registration::None; }, &ipc, &inPlace);
    const uint64_t calls = plain[0].size() * static_cast<uint64_t>(n);
    EXPECT_EQ(ipc, calls);
    EXPECT_EQ(inPlace, 0u) << "nothing registered";
    const auto registered = runAll([](int) { return Registration::Registered; }, &ipc, &inPlace);
    EXPECT_EQ(ipc, calls);
    EXPECT_EQ(inPlace, calls) << n << " ranks: every call in place on the registered buffers";
    const auto oneMissing =
        runAll([](int rank) { return rank == 1 ? Registration::None : Registration::Registered; }, &ipc, &inPlace);
    EXPECT_EQ(ipc, calls);
    EXPECT_EQ(inPlace, 0u) << "rank 1 registered nothing: every rank takes the scratch";
    const auto withdrawn = runAll([](int) { return Registration::RegisteredThenDeregistered; }, &ipc, &inPlace);
    EXPECT_EQ(inPlace, 0u) << "deregistered buffers take the scratch";
    for (int r = 0; r < n; ++r) {
      const size_t ri = static_cast<size_t>(r);
      ASSERT_EQ(registered[ri].size(), plain[ri].size());
      for (size_t i = 0; i < plain[ri].size(); ++i) {
        EXPECT_EQ(registered[ri][i], plain[ri][i]) << n << " ranks, rank " << r << " call " << i;
        EXPECT_EQ(oneMissing[ri][i], plain[ri][i]) << n << " ranks, rank " << r << " call " << i;
        EXPECT_EQ(withdrawn[ri][i], plain[ri][i]) << n << " ranks, rank " << r << " call " << i;
      }
    }
  }
}

// One call of any collective the IPC path runs, on buffers laid out in one device allocation
// (NCCL's in-place layouts when `inPlace`), optionally registered. Checks the result exactly, the
// send buffer unchanged (not in place) and every other byte of the allocation untouched; returns
// what this rank received (empty where it receives nothing).
struct KindCase {
  CollKind kind;
  collDataType_t t;
  collRedOp_t op;
};

std::vector<unsigned char> runKind(const KindCase& c, size_t count, bool inPlace, int root, int rank, int n,
                                   collComm_t comm, CUstream s, bool registered) {
  const size_t es = perf::typeSize(c.t), N = static_cast<size_t>(n), me = static_cast<size_t>(rank);
  const bool isRoot = rank == root;
  const uint64_t seed = 99;
  size_t sendElems = count, recvElems = count;  // as NCCL counts them on this rank
  switch (c.kind) {
    case CollKind::Broadcast: sendElems = isRoot ? count : 0; break;
    case CollKind::Reduce: recvElems = isRoot ? count : 0; break;
    case CollKind::AllGather: recvElems = N * count; break;
    case CollKind::ReduceScatter: sendElems = N * count; break;
    case CollKind::AlltoAll: sendElems = recvElems = N * count; break;
    case CollKind::Gather: recvElems = isRoot ? N * count : 0; break;
    case CollKind::Scatter: sendElems = isRoot ? N * count : 0; break;
    default: ADD_FAILURE() << "no such case"; return {};
  }
  const size_t sendBytes = sendElems * es, recvBytes = recvElems * es;
  const size_t arenaBytes = 64 + roundUp(std::max<size_t>(sendBytes, 1), size_t{64}) + 64 + recvBytes + 64;
  DeviceBuffer arena(arenaBytes);
  void* handle = nullptr;
  if (registered) EXPECT_EQ(collCommRegister(comm, arena.ptr, arenaBytes, &handle), collSuccess);
  auto* base = static_cast<std::byte*>(arena.ptr);
  std::byte* send = base + 64;
  std::byte* recv = send + roundUp(std::max<size_t>(sendBytes, 1), size_t{64}) + 64;
  if (inPlace) {  // NCCL's in-place layouts
    switch (c.kind) {
      case CollKind::AllGather: recv = base + 64, send = recv + me * count * es; break;
      case CollKind::ReduceScatter: recv = send + me * count * es; break;
      case CollKind::Gather:
        if (isRoot) recv = base + 64, send = recv + me * count * es;
        break;
      case CollKind::Scatter:
        if (isRoot) recv = send + me * count * es;
        break;
      default: recv = send; break;
    }
  }
  // The allocation: 0x5a everywhere, then this rank's input.
  std::vector<unsigned char> host(arenaBytes, 0x5a);
  std::vector<unsigned char> in(sendBytes);
  const bool reduces = c.kind == CollKind::Reduce || c.kind == CollKind::ReduceScatter;
  if (reduces) perf::fillInput(in.data(), sendElems, c.t, c.op, rank, n);
  else perf::fillPattern(in.data(), sendElems, es, rank, 0, seed);
  if (sendBytes > 0) memcpy(host.data() + (send - base), in.data(), sendBytes);
  arena.upload(host.data(), arenaBytes);
  collResult_t r = collInternalError;
  switch (c.kind) {
    case CollKind::Broadcast: r = collBroadcast(send, recv, count, c.t, root, comm, s); break;
    case CollKind::Reduce: r = collReduce(send, recv, count, c.t, c.op, root, comm, s); break;
    case CollKind::AllGather: r = collAllGather(send, recv, count, c.t, comm, s); break;
    case CollKind::ReduceScatter: r = collReduceScatter(send, recv, count, c.t, c.op, comm, s); break;
    case CollKind::AlltoAll: r = collAlltoAll(send, recv, count, c.t, comm, s); break;
    case CollKind::Gather: r = collGather(send, recv, count, c.t, root, comm, s); break;
    case CollKind::Scatter: r = collScatter(send, recv, count, c.t, root, comm, s); break;
    default: break;
  }
  EXPECT_EQ(r, collSuccess) << collGetLastError(comm);
  EXPECT_EQ(cuda().cuStreamSynchronize(s), 0);
  const std::vector<unsigned char> after = arena.download(arenaBytes);
  if (registered) EXPECT_EQ(collCommDeregister(comm, handle), collSuccess);
  const std::string what = std::string(collKindName(c.kind)) + " " + perf::typeName(c.t) + " count " +
                           std::to_string(count) + (inPlace ? " in place" : "") + " root " + std::to_string(root) +
                           ", rank " + std::to_string(rank) + " of " + std::to_string(n) +
                           (registered ? " (registered)" : "");
  const unsigned char* got = after.data() + (recv - base);
  size_t wrong = 0;
  std::string first;
  if (c.kind == CollKind::Reduce) {
    if (isRoot) wrong = perf::checkResult(got, count, c.t, c.op, n, &first);
  } else if (c.kind == CollKind::ReduceScatter) {
    wrong = perf::checkResult(got, count, c.t, c.op, n, &first, me * count);
  } else {
    for (size_t i = 0; i < recvElems && wrong == 0; ++i) {
      const size_t slot = i / count, j = i % count;
      int from = 0;
      size_t index = 0;
      switch (c.kind) {
        case CollKind::Broadcast: from = root, index = i; break;
        case CollKind::AllGather:
        case CollKind::Gather: from = static_cast<int>(slot), index = j; break;
        case CollKind::AlltoAll: from = static_cast<int>(slot), index = me * count + j; break;
        case CollKind::Scatter: from = root, index = me * count + i; break;
        default: break;
      }
      if (!perf::patternMatches(got, i, es, from, index, seed)) wrong++, first = "element " + std::to_string(i);
    }
  }
  EXPECT_EQ(wrong, 0u) << what << ": " << first;
  // Outside the receive buffer: the send buffer as it was (unless in place), 0x5a elsewhere.
  for (size_t i = 0; i < arenaBytes; ++i) {
    const std::byte* at = base + i;
    if (at >= recv && at < recv + recvBytes) continue;
    const unsigned char want = at >= send && at < send + sendBytes ? in[static_cast<size_t>(at - send)] : 0x5a;
    if (after[i] != want) {
      ADD_FAILURE() << what << ": byte " << i << " of the allocation outside the receive buffer changed";
      break;
    }
  }
  return std::vector<unsigned char>(got, got + recvBytes);
}

// Every collective the IPC path takes besides All-Reduce (Broadcast, Reduce, All-Gather,
// Reduce-Scatter, All-to-All, Gather, Scatter), on 2-4 ranks, counts within a chunk and across
// many, in place and not, through the scratch and on registered buffers: exact, and the staged
// path's bytes.
TEST(GpuIpc, EveryCollectiveEqualsStaging) {
  const KindCase cases[] = {
      {CollKind::Broadcast, collUint8, collSum},       {CollKind::Broadcast, collFloat64, collSum},
      {CollKind::Reduce, collInt32, collSum},          {CollKind::Reduce, collBfloat16, collAvg},
      {CollKind::AllGather, collUint8, collSum},       {CollKind::AllGather, collFloat16, collSum},
      {CollKind::ReduceScatter, collFloat32, collMax}, {CollKind::ReduceScatter, collFloat16, collAvg},
      {CollKind::AlltoAll, collInt32, collSum},        {CollKind::AlltoAll, collUint8, collSum},
      {CollKind::Gather, collFloat32, collSum},        {CollKind::Scatter, collInt64, collSum},
  };
  for (int n : {2, 3, 4}) {
    // Each rank's results in call order; the calls that could not run on registered buffers.
    auto battery = [&](bool registered, uint64_t* ipcCalls, uint64_t* registeredCalls, uint64_t* inPlaceAlltoAlls) {
      std::vector<std::vector<std::vector<unsigned char>>> out(static_cast<size_t>(n));
      const uint64_t ipcBefore = deviceIpcCollectives(), regBefore = deviceIpcRegisteredCollectives();
      withComms(n, [&](int rank, collComm_t comm) {
        CUstream s = makeStream();
        uint64_t k = 0, alltoalls = 0;
        for (const KindCase& c : cases) {
          const size_t es = perf::typeSize(c.t);
          for (size_t count : {size_t{1}, static_cast<size_t>(n) + 1, 3 * kChunk / es + 5}) {
            for (bool inPlace : {false, true}) {
              const int root = static_cast<int>(k++ % static_cast<uint64_t>(n));
              if (inPlace && c.kind == CollKind::AlltoAll) alltoalls++;
              out[static_cast<size_t>(rank)].push_back(runKind(c, count, inPlace, root, rank, n, comm, s, registered));
            }
          }
        }
        if (rank == 0) *inPlaceAlltoAlls = alltoalls;
        EXPECT_EQ(cuda().cuStreamDestroy(s), 0);
      });
      *ipcCalls = deviceIpcCollectives() - ipcBefore;
      *registeredCalls = deviceIpcRegisteredCollectives() - regBefore;
      return out;
    };
    uint64_t ipc = 0, reg = 0, alltoalls = 0;
    const auto plain = battery(false, &ipc, &reg, &alltoalls);
    const uint64_t calls = plain[0].size() * static_cast<uint64_t>(n);
    EXPECT_EQ(ipc, calls) << "every call on the IPC path";
    EXPECT_EQ(reg, 0u);
    const auto registered = battery(true, &ipc, &reg, &alltoalls);
    EXPECT_EQ(ipc, calls);
    EXPECT_EQ(reg, calls - alltoalls * static_cast<uint64_t>(n))
        << "every call on registered buffers but the in-place All-to-Alls";
    std::vector<std::vector<std::vector<unsigned char>>> staged;
    {
      ScopedEnv off("COLL_GPU_IPC", "0");
      staged = battery(false, &ipc, &reg, &alltoalls);
      EXPECT_EQ(ipc, 0u) << "COLL_GPU_IPC=0 stages";
    }
    for (size_t r = 0; r < static_cast<size_t>(n); ++r) {
      ASSERT_EQ(plain[r].size(), staged[r].size());
      for (size_t i = 0; i < plain[r].size(); ++i) {
        EXPECT_EQ(plain[r][i], staged[r][i]) << n << " ranks, rank " << r << " call " << i;
        EXPECT_EQ(registered[r][i], staged[r][i]) << n << " ranks, rank " << r << " call " << i << " (registered)";
      }
    }
  }
}

// ---- several processes on device 0 ----

std::string hex(const void* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    const unsigned b = static_cast<const unsigned char*>(p)[i];
    out += digits[b >> 4], out += digits[b & 15];
  }
  return out;
}

bool unhex(const std::string& s, void* p, size_t n) {
  if (s.size() != 2 * n) return false;
  for (size_t i = 0; i < n; ++i) static_cast<unsigned char*>(p)[i] = static_cast<unsigned char>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
  return true;
}

// Runs this binary as `n` ranks (GpuIpcChild.Rank), each with one device (0) of the double; all
// must pass within the time limit. `failOpenRank` >= 0: that rank's first mapping of a peer's
// scratch fails. `handle`: COLL_GPU_IPC_HANDLE for every rank (nullptr: the default, auto).
// `failRegisteredRank` >= 0: that rank cannot open any peer's legacy IPC handle (the scratch must
// then be shared by file descriptor), so no registered buffer can be mapped there.
void runProcesses(int n, int failOpenRank = -1, const char* handle = nullptr, int failRegisteredRank = -1) {
  collUniqueId id;
  ASSERT_EQ(collGetUniqueId(&id), collSuccess);
  const std::string self = [] {
    char buf[4096];
    const ssize_t len = readlink("/proc/self/exe", buf, sizeof buf - 1);
    return std::string(buf, len > 0 ? static_cast<size_t>(len) : 0);
  }();
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      if (strncmp(*e, "COLL_CUDA_DOUBLE_DEVICES=", 25) != 0 && strncmp(*e, "GTEST_", 6) != 0) env.emplace_back(*e);
    }
    env.push_back("COLL_CUDA_DOUBLE_DEVICES=1");
    env.push_back("COLL_IPC_TEST_RANK=" + std::to_string(r));
    env.push_back("COLL_IPC_TEST_NRANKS=" + std::to_string(n));
    env.push_back("COLL_IPC_TEST_ID=" + hex(&id, sizeof id));
    env.push_back("COLL_TIMEOUT=60");
    if (failOpenRank >= 0) env.push_back("COLL_IPC_TEST_FAIL_OPEN_RANK=" + std::to_string(failOpenRank));
    if (handle != nullptr) env.push_back(std::string("COLL_GPU_IPC_HANDLE=") + handle);
    if (failRegisteredRank >= 0) {
      env.push_back("COLL_IPC_TEST_FAIL_REGISTERED_RANK=" + std::to_string(failRegisteredRank));
    }
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string filter = "--gtest_filter=GpuIpcChild.Rank";
    std::vector<char*> argv = {const_cast<char*>(self.c_str()), filter.data(), nullptr};
    pid_t pid = -1;
    ASSERT_EQ(posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(), envp.data()), 0);
    pids.push_back(pid);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  std::vector<int> status(pids.size(), -1);
  size_t left = pids.size();
  while (left > 0 && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (status[i] != -1) continue;
      int st = 0;
      if (waitpid(pids[i], &st, WNOHANG) == pids[i]) status[i] = st, --left;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    if (status[i] == -1) {
      kill(pids[i], SIGKILL);
      waitpid(pids[i], nullptr, 0);
      ADD_FAILURE() << "rank " << i << " of " << n << " did not finish in time";
      continue;
    }
    EXPECT_TRUE(WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == 0)
        << "rank " << i << " of " << n << " failed (status " << status[i] << ")";
  }
}

TEST(GpuIpc, TwoProcessesShareDevice0) { runProcesses(2); }
TEST(GpuIpc, FourProcessesShareDevice0) { runProcesses(4); }
// Each way of sharing the scratch on its own: cuMem allocations passed as POSIX file descriptors
// over abstract Unix sockets (fd: setting up fails, and every call stages, if they cannot be), and
// legacy IPC handles.
TEST(GpuIpc, ThreeProcessesShareByFileDescriptor) { runProcesses(3, -1, "fd"); }
TEST(GpuIpc, ThreeProcessesShareByLegacyHandle) { runProcesses(3, -1, "legacy"); }
// One rank unable to map its peers' registered buffers: every rank agrees to take the scratch for
// those calls (right results, none counted as registered).
TEST(GpuIpc, AFailedRegisteredOpenMakesEveryRankUseTheScratch) {
  SKIP_ON_REAL_DRIVER();  // errors injected into the double
  runProcesses(3, -1, "fd", 1);
}
// One rank failing to open a peer's handle: every rank stages (they agree), with right results.
TEST(GpuIpc, AFailedOpenOnOneRankMakesEveryRankStage) {
  SKIP_ON_REAL_DRIVER();  // errors injected into the double
  runProcesses(3, 1);
}

// One rank of runProcesses (skipped when run on its own): All-Reduce of several types and ops
// over real cross-process IPC handles, exact results, every call on the IPC path.
TEST(GpuIpcChild, Rank) {
  const char* rankText = getenv("COLL_IPC_TEST_RANK");
  if (rankText == nullptr) GTEST_SKIP() << "a rank of GpuIpc.*ProcessesShareDevice0, run by that test";
  const int rank = atoi(rankText), n = atoi(getenv("COLL_IPC_TEST_NRANKS"));
  collUniqueId id;
  ASSERT_TRUE(unhex(getenv("COLL_IPC_TEST_ID"), &id, sizeof id));
  if (!kRealDriver) ASSERT_EQ(cuda().deviceCount, 1);  // COLL_CUDA_DOUBLE_DEVICES=1
  ASSERT_TRUE(gpu::setCurrentDevice(cuda(), 0).ok());
  collComm_t comm = nullptr;
  ASSERT_EQ(collCommInitRank(&comm, n, id, rank), collSuccess) << collGetLastError(nullptr);
  CUstream s = makeStream();
  const char* failOpen = getenv("COLL_IPC_TEST_FAIL_OPEN_RANK");
  const bool ipcExpected = failOpen == nullptr;
  if (failOpen != nullptr && atoi(failOpen) == rank) {
    void* handle = dlopen(COLL_CUDA_DOUBLE_PATH, RTLD_NOW | RTLD_NOLOAD);
    ASSERT_NE(handle, nullptr);
    auto inject = reinterpret_cast<CUresult (*)(const char*, int, CUresult)>(dlsym(handle, "collCudaDoubleInjectError"));
    ASSERT_NE(inject, nullptr);
    // Whichever way the scratch is shared (legacy handle or file descriptor).
    ASSERT_EQ(inject("cuIpcOpenMemHandle", 1, cu::kErrorMapFailed), 0);
    ASSERT_EQ(inject("cuMemImportFromShareableHandle", 1, cu::kErrorInvalidValue), 0);
  }
  const char* failRegistered = getenv("COLL_IPC_TEST_FAIL_REGISTERED_RANK");
  const bool registeredExpected = ipcExpected && failRegistered == nullptr;
  if (failRegistered != nullptr && atoi(failRegistered) == rank) {
    void* handle = dlopen(COLL_CUDA_DOUBLE_PATH, RTLD_NOW | RTLD_NOLOAD);
    ASSERT_NE(handle, nullptr);
    auto inject =
        reinterpret_cast<CUresult (*)(const char*, int, CUresult)>(dlsym(handle, "collCudaDoubleInjectError"));
    ASSERT_NE(inject, nullptr);
    ASSERT_EQ(inject("cuIpcOpenMemHandle", 1 << 20, cu::kErrorMapFailed), 0);
  }
  const uint64_t before = deviceIpcCollectives();
  uint64_t calls = 0;
  for (collDataType_t t : {collInt32, collFloat32, collFloat16, collBfloat16, collFloat64, collUint8}) {
    for (collRedOp_t op : kOps) {
      for (size_t count : countsFor(t, op, n)) {
        const size_t bytes = count * perf::typeSize(t);
        std::vector<unsigned char> in(bytes);
        perf::fillInput(in.data(), count, t, op, rank, n);
        DeviceBuffer send(bytes), recv(bytes);
        send.upload(in.data(), bytes);
        const bool inPlace = (count & 1) != 0;
        void* dst = inPlace ? send.ptr : recv.ptr;
        ASSERT_EQ(collAllReduce(send.ptr, dst, count, t, op, comm, s), collSuccess) << collGetLastError(comm);
        ASSERT_EQ(cuda().cuStreamSynchronize(s), 0);
        ++calls;
        std::vector<unsigned char> got = (inPlace ? send : recv).download(bytes);
        std::string first;
        ASSERT_EQ(perf::checkResult(got.data(), count, t, op, n, &first), 0u)
            << "rank " << rank << " of " << n << " (processes): " << perf::typeName(t) << " " << perf::opName(op)
            << " count " << count << ": " << first;
      }
    }
  }
  {
    // The compressed All-Reduce over cross-process handles: rank r contributes r + 1, with a
    // residual in device memory; the sum within 4-bit quantization's error.
    const size_t count = 3 * kChunk + 5;
    std::vector<float> x(count, static_cast<float>(rank + 1));
    DeviceBuffer a(count * 4), residual(count * 4);
    a.upload(x.data(), count * 4);
    std::vector<float> zero(count, 0.0f);
    residual.upload(zero.data(), count * 4);
    collCompression_t cfg = COLL_COMPRESSION_INITIALIZER;
    cfg.minBytes = 1;
    ASSERT_EQ(collAllReduceCompressed(a.ptr, a.ptr, count, collFloat32, collSum, &cfg, residual.ptr, comm, s),
              collSuccess)
        << collGetLastError(comm);
    ASSERT_EQ(cuda().cuStreamSynchronize(s), 0);
    ++calls;
    std::vector<unsigned char> raw = a.download(count * 4);
    const float want = static_cast<float>(n * (n + 1) / 2);
    for (size_t i = 0; i < count; ++i) {
      float v;
      memcpy(&v, raw.data() + i * 4, 4);
      ASSERT_NEAR(v, want, 0.02f * want) << "compressed, element " << i;
    }
  }
  {
    // Registered buffers across processes: peers' allocations opened by handle (once, then reused
    // by the second call), the call in place on them.
    const uint64_t inPlaceBefore = deviceIpcRegisteredCollectives();
    const size_t count = 5 * kChunk / 4 + 3;
    DeviceBuffer a(2 * count * 4);
    void* handle = nullptr;
    ASSERT_EQ(collCommRegister(comm, a.ptr, 2 * count * 4, &handle), collSuccess) << collGetLastError(comm);
    auto* send = static_cast<std::byte*>(a.ptr);
    for (bool inPlace : {true, false}) {
      std::vector<unsigned char> in(count * 4);
      perf::fillInput(in.data(), count, collFloat32, collSum, rank, n);
      ASSERT_EQ(cuda().cuMemcpyAsync(dp(send), dp(in.data()), count * 4, s), 0);
      void* dst = inPlace ? send : send + count * 4;
      ASSERT_EQ(collAllReduce(send, dst, count, collFloat32, collSum, comm, s), collSuccess) << collGetLastError(comm);
      std::vector<unsigned char> got(count * 4);
      ASSERT_EQ(cuda().cuMemcpyAsync(dp(got.data()), dp(dst), count * 4, s), 0);
      ASSERT_EQ(cuda().cuStreamSynchronize(s), 0);
      ++calls;
      std::string first;
      ASSERT_EQ(perf::checkResult(got.data(), count, collFloat32, collSum, n, &first), 0u)
          << "registered, rank " << rank << " of " << n << (inPlace ? " in place" : "") << ": " << first;
    }
    EXPECT_EQ(collCommDeregister(comm, handle), collSuccess);
    EXPECT_EQ(deviceIpcRegisteredCollectives() - inPlaceBefore, registeredExpected ? 2u : 0u)
        << "registered buffers across processes run in place";
  }
  {
    // The other collectives across processes, through the scratch and on registered buffers.
    const uint64_t registeredBefore = deviceIpcRegisteredCollectives();
    const KindCase kinds[] = {{CollKind::Broadcast, collFloat32, collSum},
                              {CollKind::ReduceScatter, collInt32, collSum},
                              {CollKind::AlltoAll, collUint8, collSum},
                              {CollKind::Gather, collFloat16, collSum}};
    int k = 0;
    for (const KindCase& c : kinds) {
      for (bool registered : {false, true}) {
        runKind(c, 3 * kChunk / perf::typeSize(c.t) + 5, false, k++ % n, rank, n, comm, s, registered);
        ++calls;
      }
    }
    EXPECT_EQ(deviceIpcRegisteredCollectives() - registeredBefore, registeredExpected ? 4u : 0u)
        << "registered buffers of the other collectives across processes";
  }
  collResult_t err = collSuccess;
  EXPECT_EQ(collCommGetAsyncError(comm, &err), collSuccess);
  EXPECT_EQ(err, collSuccess);
  EXPECT_EQ(deviceIpcCollectives() - before, ipcExpected ? calls : 0)
      << (ipcExpected ? "every call took the IPC path (cross-process handles)" : "a failed open: every rank stages");
  EXPECT_EQ(cuda().cuStreamDestroy(s), 0);
  EXPECT_EQ(collCommDestroy(comm), collSuccess);
}

}  // namespace
}  // namespace coll
