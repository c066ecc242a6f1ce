// Calls on device buffers, end to end, against the CUDA driver test double (tests/cuda_double: not a
// GPU; device memory the host cannot touch, streams on worker threads, IPC through memfd): memory
// kinds and the errors for buffers and streams that do not go together, NCCL's stream semantics
// (the call returns at once, the stream waits for the result, later work waits for it), every
// collective staged through host memory (pipelined above COLL_GPU_STAGING_CHUNK), groups, graph
// capture refused, abort releasing a waiting stream.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <thread>
#include <vector>

#include "collective/collective.h"
#include "src/gpu/cuda_driver.h"
#include "src/gpu/memory.h"
#include "src/kernels/reduce.h"
#include "src/schedule/schedule.h"
#include "tests/unit/comm_threads.h"
#include "tests/unit/gpu_test_driver.h"

namespace coll {
namespace {

const bool kRealDriver = testutil::gpuTestOnRealDriver();  // tests/unit/gpu_test_driver.h

// Before anything loads the driver: the double, two devices, a small staging chunk so that the
// pipelined path runs at test sizes.
const bool kEnvironment = [] {
  if (!kRealDriver) {
    setenv("COLL_CUDA_DRIVER", COLL_CUDA_DOUBLE_PATH, 1);
    setenv("COLL_CUDA_DOUBLE_DEVICES", "2", 1);
  }
  setenv("COLL_GPU_STAGING_CHUNK", "64K", 1);
  return true;
}();

#define SKIP_BELOW_TWO_DEVICES() \
  if (cuda().deviceCount < 2) GTEST_SKIP() << "needs two CUDA devices"

using testutil::withComms;

const gpu::CudaDriver& cuda() {
  const gpu::CudaDriver* cu = gpu::cudaDriver();
  EXPECT_NE(cu, nullptr) << "the CUDA driver did not load";
  return *cu;
}

template <class F>
F doubleFunction(const char* name) {
  (void)cuda();  // loaded by the library first
  void* handle = dlopen(COLL_CUDA_DOUBLE_PATH, RTLD_NOW | RTLD_NOLOAD);
  EXPECT_NE(handle, nullptr);
  return reinterpret_cast<F>(dlsym(handle, name));
}

CUdeviceptr dp(const void* p) { return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p)); }

// A device buffer with host-side helpers (every copy goes through the driver).
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) { EXPECT_EQ(collMemAlloc(&ptr, n), collSuccess) << collGetLastError(nullptr); }
  ~DeviceBuffer() { EXPECT_EQ(collMemFree(ptr), collSuccess); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  // Copies use the per-thread default stream: ranks that are threads of one process share a
  // device, and the legacy default stream would make each rank's copies wait for the others'
  // calls (as on a real GPU).
  template <class T>
  void upload(const std::vector<T>& v, CUstream s = cu::perThreadStream()) {
    ASSERT_EQ(cuda().cuMemcpyAsync(dp(ptr), dp(v.data()), v.size() * sizeof(T), s), 0);
    ASSERT_EQ(cuda().cuStreamSynchronize(s), 0);
  }
  template <class T>
  std::vector<T> download(size_t n, CUstream s = cu::perThreadStream()) {
    std::vector<T> v(n);
    EXPECT_EQ(cuda().cuMemcpyAsync(dp(v.data()), dp(ptr), n * sizeof(T), s), 0);
    EXPECT_EQ(cuda().cuStreamSynchronize(s), 0);
    return v;
  }
};

CUstream makeStream(int device = 0) {
  EXPECT_TRUE(gpu::setCurrentDevice(cuda(), device).ok());
  CUstream s = nullptr;
  EXPECT_EQ(cuda().cuStreamCreate(&s, 0), 0);
  return s;
}

TEST(GpuCalls, MemoryKindsAreTold) {
  const gpu::CudaDriver& cu = cuda();
  ASSERT_TRUE(gpu::setCurrentDevice(cu, 0).ok());
  DeviceBuffer d(256);
  std::vector<char> host(64);
  void* pinned = nullptr;
  ASSERT_EQ(cu.cuMemHostAlloc(&pinned, 64, 0), 0);
  gpu::MemInfo info;
  ASSERT_TRUE(gpu::classifyPointer(&cu, d.ptr, &info).ok());
  EXPECT_EQ(info.kind, gpu::MemKind::Device);
  EXPECT_EQ(info.device, 0);
  EXPECT_EQ(info.rangeSize, 256u);
  ASSERT_TRUE(gpu::classifyPointer(&cu, host.data(), &info).ok());
  EXPECT_EQ(info.kind, gpu::MemKind::Host);
  ASSERT_TRUE(gpu::classifyPointer(&cu, pinned, &info).ok());
  EXPECT_EQ(info.kind, gpu::MemKind::HostPinned);
  ASSERT_TRUE(gpu::classifyPointer(nullptr, d.ptr, &info).ok());
  EXPECT_EQ(info.kind, gpu::MemKind::Host) << "without a driver every pointer is host memory";
  EXPECT_EQ(cu.cuMemFreeHost(pinned), 0);
}

// All-Reduce on 1..4 ranks, several types, in and out of place, small and pipelined sizes.
TEST(GpuCalls, AllReduceOnDeviceBuffers) {
  for (int n : {1, 2, 3, 4}) {
    for (size_t count : {size_t{1}, size_t{1000}, size_t{70000}}) {
      withComms(n, [&](int rank, collComm_t comm) {
        CUstream s = makeStream();
        std::vector<float> x(count);
        for (size_t i = 0; i < count; ++i) x[i] = static_cast<float>(rank + 1) * 0.5f + static_cast<float>(i % 7);
        DeviceBuffer send(count * 4), recv(count * 4);
        send.upload(x);
        ASSERT_EQ(collAllReduce(send.ptr, recv.ptr, count, collFloat32, collSum, comm, s), collSuccess)
            << collGetLastError(nullptr);
        // In place, on the per-thread default stream (the legacy one: LegacyDefaultStream).
        ASSERT_EQ(collAllReduce(send.ptr, send.ptr, count, collFloat32, collMax, comm, cu::perThreadStream()),
                  collSuccess)
            << collGetLastError(nullptr);
        std::vector<float> got = recv.download<float>(count, s);
        std::vector<float> gotMax = send.download<float>(count);
        const float rankSum = 0.5f * static_cast<float>(n * (n + 1) / 2);
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(got[i], rankSum + static_cast<float>(n) * static_cast<float>(i % 7)) << i;
          ASSERT_EQ(gotMax[i], static_cast<float>(n) * 0.5f + static_cast<float>(i % 7)) << i;
        }
        int asyncErr = -1;
        ASSERT_EQ(collCommGetAsyncError(comm, reinterpret_cast<collResult_t*>(&asyncErr)), collSuccess);
        EXPECT_EQ(asyncErr, collSuccess);
        EXPECT_EQ(cuda().cuStreamDestroy(s), 0);
      });
    }
  }
}

// NULL is CUDA's legacy default stream (one rank: the legacy stream is shared by the process).
TEST(GpuCalls, LegacyDefaultStream) {
  withComms(1, [&](int, collComm_t comm) {
    ASSERT_TRUE(gpu::setCurrentDevice(cuda(), 0).ok());
    DeviceBuffer buf(4 * 8);
    buf.upload(std::vector<int32_t>(8, 4), nullptr);
    ASSERT_EQ(collAllReduce(buf.ptr, buf.ptr, 8, collInt32, collProd, comm, nullptr), collSuccess)
        << collGetLastError(nullptr);
    for (int32_t v : buf.download<int32_t>(8, nullptr)) EXPECT_EQ(v, 4);
    int dev = -1;
    ASSERT_EQ(collCommCuDevice(comm, &dev), collSuccess);
    EXPECT_EQ(dev, 0);
  });
}

// The call returns at once even while the stream is busy; the result is there when the stream
// reaches it; a copy queued after it sees it.
TEST(GpuCalls, StreamOrderingBehindASlowKernel) {
  SKIP_ON_REAL_DRIVER();
  auto sleepKernel = doubleFunction<CUresult (*)(CUstream, int)>("collCudaDoubleLaunchSleep");
  ASSERT_NE(sleepKernel, nullptr);
  withComms(2, [&](int rank, collComm_t comm) {
    CUstream s = makeStream();
    DeviceBuffer buf(4 * 16);
    std::vector<int32_t> x(16, rank + 1);
    buf.upload(x);
    ASSERT_EQ(sleepKernel(s, 300 * 1000), 0);
    const auto start = std::chrono::steady_clock::now();
    ASSERT_EQ(collAllReduce(buf.ptr, buf.ptr, 16, collInt32, collSum, comm, s), collSuccess);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(ms, 200.0) << "the call must not wait for the stream";
    EXPECT_EQ(cuda().cuStreamQuery(s), cu::kErrorNotReady);
    std::vector<int32_t> got = buf.download<int32_t>(16, s);  // queued behind the call
    for (int32_t v : got) EXPECT_EQ(v, 3);
    EXPECT_EQ(cuda().cuStreamDestroy(s), 0);
  });
}

// Every other collective and point-to-point on device buffers (2 and 3 ranks).
TEST(GpuCalls, EveryCollectiveOnDeviceBuffers) {
  for (int n : {2, 3}) {
    withComms(n, [&](int rank, collComm_t comm) {
      CUstream s = makeStream();
      const size_t c = 40000;  // above the chunk for the contiguous collectives
      DeviceBuffer a(c * n * 4), b(c * n * 4);
      std::vector<int32_t> x(c * n);
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<int32_t>(rank * 1000000 + i);
      // Uploads go on s: a rank that does not wait for a call (a Reduce's non-root) must not
      // overwrite its send buffer while the call may still read it.
      // Broadcast from root 1.
      a.upload(x, s);
      ASSERT_EQ(collBroadcast(a.ptr, b.ptr, c, collInt32, 1, comm, s), collSuccess) << collGetLastError(nullptr);
      auto got = b.download<int32_t>(c, s);
      for (size_t i = 0; i < c; ++i) ASSERT_EQ(got[i], static_cast<int32_t>(1000000 + i));
      // collBcast in place from root 0.
      ASSERT_EQ(collBcast(a.ptr, c, collInt32, 0, comm, s), collSuccess);
      got = a.download<int32_t>(c, s);
      for (size_t i = 0; i < c; ++i) ASSERT_EQ(got[i], static_cast<int32_t>(i));
      // Reduce to root n-1.
      a.upload(x, s);
      ASSERT_EQ(collReduce(a.ptr, b.ptr, c, collInt32, collSum, n - 1, comm, s), collSuccess);
      if (rank == n - 1) {
        got = b.download<int32_t>(c, s);
        for (size_t i = 0; i < c; ++i) {
          ASSERT_EQ(got[i], static_cast<int32_t>(1000000 * (n * (n - 1) / 2) + n * static_cast<int32_t>(i)));
        }
      }
      // All-Gather, in place.
      a.upload(x, s);
      auto* slot = static_cast<char*>(b.ptr) + rank * c * 4;
      ASSERT_EQ(cuda().cuMemcpyAsync(dp(slot), dp(a.ptr), c * 4, s), 0);
      ASSERT_EQ(collAllGather(slot, b.ptr, c, collInt32, comm, s), collSuccess);
      got = b.download<int32_t>(c * n, s);
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < c; i += 997) ASSERT_EQ(got[r * c + i], static_cast<int32_t>(r * 1000000 + i));
      }
      // Reduce-Scatter.
      ASSERT_EQ(collReduceScatter(a.ptr, b.ptr, c, collInt32, collSum, comm, s), collSuccess);
      got = b.download<int32_t>(c, s);
      for (size_t i = 0; i < c; i += 991) {
        ASSERT_EQ(got[i], static_cast<int32_t>(1000000 * (n * (n - 1) / 2) + n * static_cast<int32_t>(rank * c + i)));
      }
      // All-to-All.
      ASSERT_EQ(collAlltoAll(a.ptr, b.ptr, c, collInt32, comm, s), collSuccess);
      got = b.download<int32_t>(c * n, s);
      for (int r = 0; r < n; ++r) ASSERT_EQ(got[r * c], static_cast<int32_t>(r * 1000000 + rank * c));
      // Gather and Scatter at root 0.
      ASSERT_EQ(collGather(a.ptr, b.ptr, c, collInt32, 0, comm, s), collSuccess);
      if (rank == 0) {
        got = b.download<int32_t>(c * n, s);
        for (int r = 0; r < n; ++r) ASSERT_EQ(got[r * c + 5], static_cast<int32_t>(r * 1000000 + 5));
      }
      ASSERT_EQ(collScatter(a.ptr, b.ptr, c, collInt32, 0, comm, s), collSuccess);
      got = b.download<int32_t>(c, s);
      ASSERT_EQ(got[7], static_cast<int32_t>(rank * c + 7));
      // A ring of sends and receives in one group.
      ASSERT_EQ(collGroupStart(), collSuccess);
      ASSERT_EQ(collSend(a.ptr, 100, collInt32, (rank + 1) % n, comm, s), collSuccess);
      ASSERT_EQ(collRecv(b.ptr, 100, collInt32, (rank + n - 1) % n, comm, s), collSuccess);
      ASSERT_EQ(collGroupEnd(), collSuccess) << collGetLastError(nullptr);
      got = b.download<int32_t>(100, s);
      ASSERT_EQ(got[3], static_cast<int32_t>(((rank + n - 1) % n) * 1000000 + 3));
      ASSERT_EQ(collBarrier(comm, s), collSuccess);
      EXPECT_EQ(cuda().cuStreamSynchronize(s), 0);
      collResult_t asyncErr = collInternalError;
      ASSERT_EQ(collCommGetAsyncError(comm, &asyncErr), collSuccess);
      EXPECT_EQ(asyncErr, collSuccess);
      EXPECT_EQ(cuda().cuStreamDestroy(s), 0);
    });
  }
}

TEST(GpuCalls, TypesAndOpsIncludingPreMulSumAndCompression) {
  withComms(2, [&](int rank, collComm_t comm) {
    CUstream s = makeStream();
    const size_t c = 1024;
    DeviceBuffer a(c * 8), b(c * 8);
    std::vector<double> x(c, rank + 1.0);
    a.upload(x);
    ASSERT_EQ(collAllReduce(a.ptr, b.ptr, c, collFloat64, collAvg, comm, s), collSuccess);
    for (double v : b.download<double>(c, s)) ASSERT_EQ(v, 1.5);
    collRedOp_t op;
    double scalar = 2.0;
    ASSERT_EQ(collRedOpCreatePreMulSum(&op, &scalar, collFloat64, collScalarHostImmediate, comm), collSuccess);
    ASSERT_EQ(collAllReduce(a.ptr, b.ptr, c, collFloat64, op, comm, s), collSuccess) << collGetLastError(nullptr);
    for (double v : b.download<double>(c, s)) ASSERT_EQ(v, 6.0);
    ASSERT_EQ(collRedOpDestroy(op, comm), collSuccess);
    // collScalarDevice: the scalar lives in device memory and is read by each call in stream order.
    DeviceBuffer devScalar(8);
    devScalar.upload(std::vector<double>{3.0}, s);
    ASSERT_EQ(collRedOpCreatePreMulSum(&op, devScalar.ptr, collFloat64, collScalarDevice, comm), collSuccess)
        << collGetLastError(nullptr);
    ASSERT_EQ(collAllReduce(a.ptr, b.ptr, c, collFloat64, op, comm, s), collSuccess) << collGetLastError(nullptr);
    for (double v : b.download<double>(c, s)) ASSERT_EQ(v, 9.0);
    devScalar.upload(std::vector<double>{4.0}, s);
    ASSERT_EQ(collAllReduce(a.ptr, b.ptr, c, collFloat64, op, comm, s), collSuccess);
    for (double v : b.download<double>(c, s)) ASSERT_EQ(v, 12.0);
    ASSERT_EQ(collRedOpDestroy(op, comm), collSuccess);
    std::vector<double> hostScalar{2.0};
    EXPECT_EQ(collRedOpCreatePreMulSum(&op, hostScalar.data(), collFloat64, collScalarDevice, comm),
              collInvalidArgument)
        << "an ordinary host address is not a device scalar";
    // Compressed All-Reduce, with a residual in device memory.
    std::vector<float> f(c, static_cast<float>(rank + 1));
    a.upload(f);
    DeviceBuffer residual(c * 4);
    residual.upload(std::vector<float>(c, 0.0f));
    collCompression_t cfg = COLL_COMPRESSION_INITIALIZER;
    cfg.minBytes = 1;
    ASSERT_EQ(collAllReduceCompressed(a.ptr, b.ptr, c, collFloat32, collSum, &cfg, residual.ptr, comm, s), collSuccess)
        << collGetLastError(nullptr);
    for (float v : b.download<float>(c, s)) ASSERT_NEAR(v, 3.0f, 0.3f);
    EXPECT_EQ(cuda().cuStreamDestroy(s), 0);
  });
}

// One element of `dtype` holding the small integer v (exact in every type).
void storeValue(collDataType_t dtype, int v, std::byte* out) {
  auto put = [&](auto x) { memcpy(out, &x, sizeof(x)); };
  switch (dtype) {
    case collInt8: put(static_cast<int8_t>(v)); break;
    case collUint8: put(static_cast<uint8_t>(v)); break;
    case collInt32: put(static_cast<int32_t>(v)); break;
    case collUint32: put(static_cast<uint32_t>(v)); break;
    case collInt64: put(static_cast<int64_t>(v)); break;
    case collUint64: put(static_cast<uint64_t>(v)); break;
    case collFloat16: put(kernels::floatToHalf(static_cast<float>(v))); break;
    case collBfloat16: put(kernels::floatToBfloat16(static_cast<float>(v))); break;
    case collFloat32: put(static_cast<float>(v)); break;
    case collFloat64: put(static_cast<double>(v)); break;
    case collFloat8e4m3: put(kernels::floatToFp8e4m3(static_cast<float>(v))); break;
    case collFloat8e5m2: put(kernels::floatToFp8e5m2(static_cast<float>(v))); break;
    default: break;
  }
}

// Every type on 1, 2, 5 and 8 ranks: each collective on device buffers gives the bytes the same
// collective gives on host buffers.
TEST(GpuCalls, EveryTypeMatchesTheHostPath) {
  for (int n : {1, 2, 5, 8}) {
    withComms(n, [&](int rank, collComm_t comm) {
      CUstream s = makeStream();
      const size_t c = 37;
      for (int t = 0; t < collNumTypes; ++t) {
        const auto dtype = static_cast<collDataType_t>(t);
        const size_t es = dataTypeSize(dtype);
        std::vector<std::byte> in(c * n * es);
        for (size_t i = 0; i < c * n; ++i) storeValue(dtype, static_cast<int>((i * 7 + rank * 3) % 13) - 4, &in[i * es]);
        DeviceBuffer din(in.size()), dout(in.size());
        din.upload(in);
        struct Case {
          const char* name;
          std::function<collResult_t(const void*, void*, collStream_t)> call;
          size_t outElems;
        } cases[] = {
            {"allreduce sum",
             [&](const void* a, void* b, collStream_t st) { return collAllReduce(a, b, c, dtype, collSum, comm, st); },
             c},
            {"allreduce max",
             [&](const void* a, void* b, collStream_t st) { return collAllReduce(a, b, c, dtype, collMax, comm, st); },
             c},
            {"reducescatter min",
             [&](const void* a, void* b, collStream_t st) {
               return collReduceScatter(a, b, c, dtype, collMin, comm, st);
             },
             c},
            {"allgather",
             [&](const void* a, void* b, collStream_t st) { return collAllGather(a, b, c, dtype, comm, st); }, c * n},
            {"broadcast", [&](const void* a, void* b, collStream_t st) {
               return collBroadcast(a, b, c, dtype, n - 1, comm, st);
             },
             c},
        };
        for (const Case& k : cases) {
          std::vector<std::byte> hostOut(k.outElems * es, std::byte{0});
          ASSERT_EQ(k.call(in.data(), hostOut.data(), nullptr), collSuccess) << k.name;
          ASSERT_EQ(k.call(din.ptr, dout.ptr, s), collSuccess) << k.name << ": " << collGetLastError(nullptr);
          std::vector<std::byte> got = dout.download<std::byte>(k.outElems * es, s);
          ASSERT_EQ(memcmp(got.data(), hostOut.data(), hostOut.size()), 0)
              << k.name << " dtype " << t << " on " << n << " ranks";
        }
      }
      EXPECT_EQ(cuda().cuStreamDestroy(s), 0);
    });
  }
}

// Buffers and streams that do not go together: a clear error naming the argument, nothing written.
TEST(GpuCalls, BadCombinationsAreRefusedUntouched) {
  withComms(1, [&](int, collComm_t comm) {
    CUstream s = makeStream();
    DeviceBuffer d(64), d2(64);
    std::vector<int32_t> host(16, 5), before = host;
    collStream_t hostStream = nullptr;
    ASSERT_EQ(collHostStreamCreate(&hostStream), collSuccess);
    // Device buffers with a host stream.
    EXPECT_EQ(collAllReduce(d.ptr, d2.ptr, 16, collInt32, collSum, comm, hostStream), collInvalidArgument);
    EXPECT_NE(std::string(collGetLastError(nullptr)).find("host stream"), std::string::npos) << collGetLastError(nullptr);
    // Unregistered host memory with a CUDA stream.
    EXPECT_EQ(collAllReduce(host.data(), host.data(), 16, collInt32, collSum, comm, s), collInvalidArgument);
    EXPECT_NE(std::string(collGetLastError(nullptr)).find("sendbuff"), std::string::npos) << collGetLastError(nullptr);
    EXPECT_EQ(host, before);
    // Mixed: device send, host receive.
    EXPECT_EQ(collAllReduce(d.ptr, host.data(), 16, collInt32, collSum, comm, s), collInvalidArgument);
    EXPECT_NE(std::string(collGetLastError(nullptr)).find("recvbuff"), std::string::npos) << collGetLastError(nullptr);
    EXPECT_EQ(host, before);
    // Past the end of the allocation.
    EXPECT_EQ(collAllReduce(d.ptr, d2.ptr, 17, collInt32, collSum, comm, s), collInvalidArgument);
    // A freed buffer with a CUDA stream reads as host memory CUDA does not know.
    void* freed = nullptr;
    ASSERT_EQ(collMemAlloc(&freed, 64), collSuccess);
    ASSERT_EQ(collMemFree(freed), collSuccess);
    EXPECT_EQ(collAllReduce(freed, freed, 16, collInt32, collSum, comm, s), collInvalidArgument);
    EXPECT_NE(std::string(collGetLastError(nullptr)).find("freed"), std::string::npos) << collGetLastError(nullptr);
    // A stream that is neither a host stream nor a CUDA stream.
    int bogus = 0;
    EXPECT_EQ(collAllReduce(d.ptr, d2.ptr, 16, collInt32, collSum, comm, &bogus), collInvalidArgument);
    // Buffers on another device than the stream, and than each other (two devices).
    CUstream s1 = nullptr;
    if (cuda().deviceCount >= 2) {
      s1 = makeStream(1);
      void* other = nullptr;
      ASSERT_EQ(collMemAlloc(&other, 64), collSuccess);  // device 1 is current on this thread now
      ASSERT_TRUE(gpu::setCurrentDevice(cuda(), 0).ok());
      EXPECT_EQ(collAllReduce(d.ptr, d2.ptr, 16, collInt32, collSum, comm, s1), collInvalidArgument);
      EXPECT_NE(std::string(collGetLastError(nullptr)).find("device"), std::string::npos);
      EXPECT_EQ(collAllReduce(d.ptr, other, 16, collInt32, collSum, comm, s), collInvalidArgument);
      EXPECT_EQ(collMemFree(other), collSuccess);
    }
    EXPECT_EQ(collMemFree(host.data()), collInvalidArgument);
    // The communicator still works.
    EXPECT_EQ(collAllReduce(d.ptr, d2.ptr, 16, collInt32, collSum, comm, s), collSuccess) << collGetLastError(nullptr);
    EXPECT_EQ(cuda().cuStreamSynchronize(s), 0);
    EXPECT_EQ(collHostStreamDestroy(hostStream), collSuccess);
    EXPECT_EQ(cuda().cuStreamDestroy(s), 0);
    if (s1 != nullptr) EXPECT_EQ(cuda().cuStreamDestroy(s1), 0);
  });
}

TEST(GpuCalls, GraphCaptureIsRefused) {
  SKIP_ON_REAL_DRIVER();
  auto begin = doubleFunction<CUresult (*)(CUstream, int)>("cuStreamBeginCapture_v2");
  auto end = doubleFunction<CUresult (*)(CUstream, CUgraph*)>("cuStreamEndCapture");
  ASSERT_NE(begin, nullptr);
  withComms(1, [&](int, collComm_t comm) {
    CUstream s = makeStream();
    DeviceBuffer d(64);
    ASSERT_EQ(begin(s, cu::kCaptureModeGlobal), 0);
    EXPECT_EQ(collAllReduce(d.ptr, d.ptr, 16, collInt32, collSum, comm, s), collInvalidUsage);
    EXPECT_NE(std::string(collGetLastError(nullptr)).find("graph"), std::string::npos);
    CUgraph g = nullptr;
    EXPECT_EQ(end(s, &g), 0);
    EXPECT_EQ(cuda().cuStreamDestroy(s), 0);
  });
}

// A rank whose peer never calls: its stream waits on the communicator until abort releases it.
TEST(GpuCalls, AbortReleasesAWaitingStream) {
  SKIP_BELOW_TWO_DEVICES();
  std::vector<collComm_t> comms(2, nullptr);
  ASSERT_EQ(collCommInitAll(comms.data(), 2, nullptr), collSuccess) << collGetLastError(nullptr);
  CUstream s = makeStream();
  {
    DeviceBuffer d(64);
    // Rank 1 never joins the call.
    ASSERT_EQ(collAllReduce(d.ptr, d.ptr, 16, collInt32, collSum, comms[0], s), collSuccess);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(cuda().cuStreamQuery(s), cu::kErrorNotReady) << "the stream waits for the call";
    EXPECT_EQ(collCommAbort(comms[0]), collSuccess);
    EXPECT_EQ(cuda().cuStreamSynchronize(s), 0) << "abort releases the stream";
  }
  EXPECT_EQ(collCommAbort(comms[1]), collSuccess);
  EXPECT_EQ(cuda().cuStreamDestroy(s), 0);
}

// A CUDA error on the progress thread: the stream moves on and the communicator reports it as
// NCCL does, through collCommGetAsyncError.
TEST(GpuCalls, AsyncErrorIsReported) {
  auto inject = doubleFunction<CUresult (*)(const char*, int, CUresult)>("collCudaDoubleInjectError");
  ASSERT_NE(inject, nullptr);
  std::vector<collComm_t> comms(1, nullptr);
  ASSERT_EQ(collCommInitAll(comms.data(), 1, nullptr), collSuccess);
  CUstream s = makeStream();
  {
    DeviceBuffer d(64);
    ASSERT_EQ(inject("cuMemcpyAsync", 1, cu::kErrorLaunchFailed), 0);
    ASSERT_EQ(collAllReduce(d.ptr, d.ptr, 16, collInt32, collSum, comms[0], s), collSuccess);
    EXPECT_EQ(cuda().cuStreamSynchronize(s), 0) << "the stream is released";
    collResult_t asyncErr = collSuccess;
    for (int i = 0; i < 100 && asyncErr == collSuccess; ++i) {
      ASSERT_EQ(collCommGetAsyncError(comms[0], &asyncErr), collSuccess);
      if (asyncErr == collSuccess) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(asyncErr, collUnhandledCudaError);
  }
  EXPECT_EQ(collCommAbort(comms[0]), collSuccess);
  EXPECT_EQ(cuda().cuStreamDestroy(s), 0);
}

TEST(GpuCalls, InitAllWithDevicesAndOneThreadGroups) {
  SKIP_BELOW_TWO_DEVICES();
  std::vector<collComm_t> comms(2, nullptr);
  const int devs[2] = {1, 0};
  ASSERT_EQ(collCommInitAll(comms.data(), 2, devs), collSuccess) << collGetLastError(nullptr);
  int dev = -1;
  ASSERT_EQ(collCommCuDevice(comms[0], &dev), collSuccess);
  EXPECT_EQ(dev, 1);
  ASSERT_EQ(collCommCuDevice(comms[1], &dev), collSuccess);
  EXPECT_EQ(dev, 0);
  // One thread drives both ranks with device buffers on their devices, in one group per call.
  std::vector<void*> bufs(2);
  std::vector<CUstream> streams(2);
  for (int r = 0; r < 2; ++r) {
    streams[r] = makeStream(devs[r]);
    ASSERT_EQ(collMemAlloc(&bufs[r], 64), collSuccess);
    std::vector<int32_t> x(16, r + 10);
    ASSERT_EQ(cuda().cuMemcpyAsync(dp(bufs[r]), dp(x.data()), 64, streams[r]), 0);
    ASSERT_EQ(cuda().cuStreamSynchronize(streams[r]), 0);
  }
  // One call per communicator, each on its device's stream: separate groups of one thread would
  // wait for each other, so both go in one group only when they share a stream; here each call is
  // queued on its own stream and returns at once.
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(gpu::setCurrentDevice(cuda(), devs[r]).ok());
    ASSERT_EQ(collAllReduce(bufs[r], bufs[r], 16, collInt32, collSum, comms[r], streams[r]), collSuccess)
        << collGetLastError(nullptr);
  }
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(gpu::setCurrentDevice(cuda(), devs[r]).ok());
    std::vector<int32_t> got(16);
    ASSERT_EQ(cuda().cuMemcpyAsync(dp(got.data()), dp(bufs[r]), 64, streams[r]), 0);
    ASSERT_EQ(cuda().cuStreamSynchronize(streams[r]), 0);
    for (int32_t v : got) EXPECT_EQ(v, 21);
    EXPECT_EQ(collMemFree(bufs[r]), collSuccess);
    EXPECT_EQ(cuda().cuStreamDestroy(streams[r]), 0);
  }
  // Host buffers: one thread, one group over both communicators (no stream).
  std::vector<int32_t> x0(8, 1), x1(8, 2);
  ASSERT_EQ(collGroupStart(), collSuccess);
  ASSERT_EQ(collAllReduce(x0.data(), x0.data(), 8, collInt32, collSum, comms[0], nullptr), collSuccess);
  ASSERT_EQ(collAllReduce(x1.data(), x1.data(), 8, collInt32, collSum, comms[1], nullptr), collSuccess);
  ASSERT_EQ(collGroupEnd(), collSuccess) << collGetLastError(nullptr);
  for (int v : x0) EXPECT_EQ(v, 3);
  for (int v : x1) EXPECT_EQ(v, 3);
  for (collComm_t c : comms) EXPECT_EQ(collCommDestroy(c), collSuccess);
}

TEST(GpuCalls, RegisterAndDeregister) {
  withComms(1, [&](int, collComm_t comm) {
    DeviceBuffer d(256);
    void* handle = nullptr;
    ASSERT_EQ(collCommRegister(comm, d.ptr, 256, &handle), collSuccess) << collGetLastError(nullptr);
    EXPECT_NE(handle, nullptr);
    void* h2 = nullptr;
    EXPECT_EQ(collCommRegister(comm, d.ptr, 512, &h2), collInvalidArgument) << "past the allocation";
    EXPECT_EQ(collCommDeregister(comm, handle), collSuccess);
    EXPECT_EQ(collCommDeregister(comm, handle), collInvalidArgument);
  });
}

}  // namespace
}  // namespace coll
