// Tests of the CUDA driver test double (not a GPU): loaded as the library loads the driver (dlopen
// by path, the symbols of COLL_CUDA_DRIVER_FUNCTIONS by their exported names), checked against what
// the real driver does. The binary is also the IPC child process (--ipc-child, --ipc-export).
#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "src/gpu/cuda_abi.h"
#include "tests/cuda_double/cuda_double.h"

namespace {

using namespace coll;
using Clock = std::chrono::steady_clock;

struct Driver {
#define COLL_TEST_MEMBER(name, symbol, params) CUresult(*name) params = nullptr;
  COLL_CUDA_DRIVER_FUNCTIONS(COLL_TEST_MEMBER)
#undef COLL_TEST_MEMBER
  CUresult (*cuStreamBeginCapture)(CUstream, int) = nullptr;
  CUresult (*cuStreamEndCapture)(CUstream, CUgraph*) = nullptr;
  decltype(&collCudaDoubleIsDouble) isDouble = nullptr;
  decltype(&collCudaDoubleLaunchSleep) sleep = nullptr;
  decltype(&collCudaDoubleInjectError) inject = nullptr;
  decltype(&collCudaDoubleClearInjectedErrors) clearInjected = nullptr;
  decltype(&collCudaDoubleDeviceBytesAllocated) deviceBytes = nullptr;
  decltype(&collCudaDoubleDeviceAllocations) deviceAllocations = nullptr;
  decltype(&collCudaDoubleHostBytesAllocated) hostBytes = nullptr;
  decltype(&collCudaDoubleHostRegistrations) hostRegistrations = nullptr;
  decltype(&collCudaDoubleShadow) shadow = nullptr;
  decltype(&collCudaDoubleClearStickyErrors) clearSticky = nullptr;
  std::string missing;
};

template <class F>
void resolve(void* h, F* out, const char* symbol, std::string* missing) {
  *out = reinterpret_cast<F>(dlsym(h, symbol));
  if (*out == nullptr) *missing += std::string(" ") + symbol;
}

// The double, loaded once per process the way src/gpu/cuda_driver.cc loads a driver.
Driver* loadDriver() {
  static Driver* d = [] {
    auto* drv = new Driver();
    void* h = dlopen(COLL_CUDA_DOUBLE_PATH, RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      drv->missing = std::string("dlopen: ") + dlerror();
      return drv;
    }
#define COLL_TEST_RESOLVE(name, symbol, params) resolve(h, &drv->name, symbol, &drv->missing);
    COLL_CUDA_DRIVER_FUNCTIONS(COLL_TEST_RESOLVE)
#undef COLL_TEST_RESOLVE
    resolve(h, &drv->cuStreamBeginCapture, "cuStreamBeginCapture_v2", &drv->missing);
    resolve(h, &drv->cuStreamEndCapture, "cuStreamEndCapture", &drv->missing);
    resolve(h, &drv->isDouble, "collCudaDoubleIsDouble", &drv->missing);
    resolve(h, &drv->sleep, "collCudaDoubleLaunchSleep", &drv->missing);
    resolve(h, &drv->inject, "collCudaDoubleInjectError", &drv->missing);
    resolve(h, &drv->clearInjected, "collCudaDoubleClearInjectedErrors", &drv->missing);
    resolve(h, &drv->deviceBytes, "collCudaDoubleDeviceBytesAllocated", &drv->missing);
    resolve(h, &drv->deviceAllocations, "collCudaDoubleDeviceAllocations", &drv->missing);
    resolve(h, &drv->hostBytes, "collCudaDoubleHostBytesAllocated", &drv->missing);
    resolve(h, &drv->hostRegistrations, "collCudaDoubleHostRegistrations", &drv->missing);
    resolve(h, &drv->shadow, "collCudaDoubleShadow", &drv->missing);
    resolve(h, &drv->clearSticky, "collCudaDoubleClearStickyErrors", &drv->missing);
    return drv;
  }();
  return d;
}

CUdeviceptr dev(const void* p) { return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p)); }

class CudaDouble : public ::testing::Test {
 protected:
  void SetUp() override {
    d_ = loadDriver();
    ASSERT_TRUE(d_->missing.empty()) << "unresolved:" << d_->missing;
    ASSERT_EQ(d_->cuInit(0), cu::kSuccess);
    ASSERT_EQ(d_->cuDevicePrimaryCtxRetain(&ctx_, 0), cu::kSuccess);
    ASSERT_EQ(d_->cuCtxSetCurrent(ctx_), cu::kSuccess);
    bytesAtStart_ = d_->deviceBytes();
    allocationsAtStart_ = d_->deviceAllocations();
  }
  void TearDown() override {
    if (d_ == nullptr || !d_->missing.empty()) return;
    d_->clearInjected();
    EXPECT_EQ(d_->deviceBytes(), bytesAtStart_) << "device memory leaked by the test";
    EXPECT_EQ(d_->deviceAllocations(), allocationsAtStart_);
    (void)d_->cuDevicePrimaryCtxRelease(0);
  }
  CUstream newStream(unsigned flags = 0) {
    CUstream s = nullptr;
    EXPECT_EQ(d_->cuStreamCreate(&s, flags), cu::kSuccess);
    return s;
  }
  CUdeviceptr alloc(size_t n) {
    CUdeviceptr p = 0;
    EXPECT_EQ(d_->cuMemAlloc(&p, n), cu::kSuccess);
    return p;
  }

  Driver* d_ = nullptr;
  CUcontext ctx_ = nullptr;
  size_t bytesAtStart_ = 0;
  int allocationsAtStart_ = 0;
};

TEST_F(CudaDouble, IdentifiesItselfAndReportsDevices) {
  EXPECT_EQ(d_->isDouble(), 1);
  int version = 0, count = 0;
  EXPECT_EQ(d_->cuDriverGetVersion(&version), cu::kSuccess);
  EXPECT_EQ(version, 13000);
  EXPECT_EQ(d_->cuDeviceGetCount(&count), cu::kSuccess);
  EXPECT_EQ(count, 2);  // COLL_CUDA_DOUBLE_DEVICES=2 (main)
  CUdevice dv = -1;
  EXPECT_EQ(d_->cuDeviceGet(&dv, 1), cu::kSuccess);
  EXPECT_EQ(dv, 1);
  EXPECT_EQ(d_->cuDeviceGet(&dv, 2), cu::kErrorInvalidDevice);
  int sm = 0, bus0 = 0, bus1 = 0, uva = 0, vmm = -1;
  EXPECT_EQ(d_->cuDeviceGetAttribute(&sm, cu::kDeviceAttributeMultiprocessorCount, 0), cu::kSuccess);
  EXPECT_GT(sm, 0);
  EXPECT_EQ(d_->cuDeviceGetAttribute(&bus0, cu::kDeviceAttributePciBusId, 0), cu::kSuccess);
  EXPECT_EQ(d_->cuDeviceGetAttribute(&bus1, cu::kDeviceAttributePciBusId, 1), cu::kSuccess);
  EXPECT_NE(bus0, bus1);
  EXPECT_EQ(d_->cuDeviceGetAttribute(&uva, cu::kDeviceAttributeUnifiedAddressing, 0), cu::kSuccess);
  EXPECT_EQ(uva, 1);
  EXPECT_EQ(d_->cuDeviceGetAttribute(&vmm, cu::kDeviceAttributeVirtualMemoryManagementSupported, 0), cu::kSuccess);
  EXPECT_EQ(vmm, 0);
  char bus[32];
  EXPECT_EQ(d_->cuDeviceGetPCIBusId(bus, sizeof(bus), 1), cu::kSuccess);
  char expected[32];
  std::snprintf(expected, sizeof(expected), "0000:%02x:00.0", bus1);
  EXPECT_STREQ(bus, expected);
  int peer = 0;
  EXPECT_EQ(d_->cuDeviceCanAccessPeer(&peer, 0, 1), cu::kSuccess);
  EXPECT_EQ(peer, 1);
  const char* s = nullptr;
  EXPECT_EQ(d_->cuGetErrorName(cu::kErrorInvalidValue, &s), cu::kSuccess);
  EXPECT_STREQ(s, "CUDA_ERROR_INVALID_VALUE");
  EXPECT_EQ(d_->cuGetErrorName(713, &s), cu::kSuccess);
  EXPECT_STREQ(s, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED");
  EXPECT_EQ(d_->cuGetErrorString(cu::kErrorIllegalAddress, &s), cu::kSuccess);
  EXPECT_STREQ(s, "an illegal memory access was encountered");
  EXPECT_EQ(d_->cuGetErrorName(123456, &s), cu::kErrorInvalidValue);
}

TEST_F(CudaDouble, ContextsArePerThread) {
  CUcontext ctx1 = nullptr;
  ASSERT_EQ(d_->cuDevicePrimaryCtxRetain(&ctx1, 1), cu::kSuccess);
  EXPECT_NE(ctx1, ctx_);
  std::thread([&] {
    CUcontext c = reinterpret_cast<CUcontext>(1);
    EXPECT_EQ(d_->cuCtxGetCurrent(&c), cu::kSuccess);
    EXPECT_EQ(c, nullptr);  // a new thread has no current context
    CUdevice dv = -1;
    EXPECT_EQ(d_->cuCtxGetDevice(&dv), cu::kErrorInvalidContext);
    CUdeviceptr p = 0;
    EXPECT_EQ(d_->cuMemAlloc(&p, 64), cu::kErrorInvalidContext);
    CUstream s = nullptr;
    EXPECT_EQ(d_->cuStreamCreate(&s, 0), cu::kErrorInvalidContext);
    EXPECT_EQ(d_->cuStreamSynchronize(nullptr), cu::kErrorInvalidContext);
    EXPECT_EQ(d_->cuCtxPushCurrent(ctx1), cu::kSuccess);
    EXPECT_EQ(d_->cuCtxGetDevice(&dv), cu::kSuccess);
    EXPECT_EQ(dv, 1);
    EXPECT_EQ(d_->cuCtxPushCurrent(ctx_), cu::kSuccess);
    EXPECT_EQ(d_->cuCtxGetDevice(&dv), cu::kSuccess);
    EXPECT_EQ(dv, 0);
    EXPECT_EQ(d_->cuCtxPopCurrent(&c), cu::kSuccess);
    EXPECT_EQ(c, ctx_);
    EXPECT_EQ(d_->cuCtxGetDevice(&dv), cu::kSuccess);
    EXPECT_EQ(dv, 1);
    EXPECT_EQ(d_->cuCtxPopCurrent(&c), cu::kSuccess);
    EXPECT_EQ(d_->cuCtxPopCurrent(&c), cu::kErrorInvalidContext);
  }).join();
  CUdevice dv = -1;
  EXPECT_EQ(d_->cuCtxGetDevice(&dv), cu::kSuccess);
  EXPECT_EQ(dv, 0);  // this thread's context is untouched
  EXPECT_EQ(d_->cuDevicePrimaryCtxRelease(1), cu::kSuccess);
}

// A host access to device memory faults, as on a GPU: checked in a child process whose SIGSEGV
// handler reports whether the faulting address is the device address (77) or another (78).
volatile uintptr_t gFaultTarget = 0;
void onSegv(int, siginfo_t* info, void*) { _exit(reinterpret_cast<uintptr_t>(info->si_addr) == gFaultTarget ? 77 : 78); }

TEST_F(CudaDouble, HostAccessToDeviceMemoryFaults) {
  const CUdeviceptr p = alloc(4096);
  gFaultTarget = p + 100;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    struct sigaction sa {};
    sa.sa_sigaction = &onSegv;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
    *reinterpret_cast<volatile char*>(gFaultTarget) = 1;
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 77) << "0: the write did not fault; 78: it faulted elsewhere";
  EXPECT_EQ(d_->cuMemFree(p), cu::kSuccess);
}

TEST_F(CudaDouble, CopiesBetweenHostAndDevice) {
  const size_t n = 1 << 16;
  std::vector<uint8_t> in(n), out(n, 0);
  for (size_t i = 0; i < n; ++i) in[i] = static_cast<uint8_t>(i * 7 + 3);
  const CUdeviceptr a = alloc(n), b = alloc(n);
  CUstream s = newStream();
  EXPECT_EQ(d_->cuMemcpyAsync(a, dev(in.data()), n, s), cu::kSuccess);           // H2D
  EXPECT_EQ(d_->cuMemcpyAsync(b, a, n, s), cu::kSuccess);                        // D2D
  EXPECT_EQ(d_->cuMemsetD8Async(b + 10, 0xee, 5, s), cu::kSuccess);
  EXPECT_EQ(d_->cuMemcpyAsync(dev(out.data()), b, n, s), cu::kSuccess);          // D2H
  EXPECT_EQ(d_->cuStreamSynchronize(s), cu::kSuccess);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t want = (i >= 10 && i < 15) ? 0xee : in[i];
    ASSERT_EQ(out[i], want) << "byte " << i;
  }
  // The double's own view of device memory agrees.
  EXPECT_EQ(static_cast<uint8_t*>(d_->shadow(a))[77], in[77]);
  EXPECT_EQ(d_->shadow(dev(out.data())), nullptr);
  // Legacy and per-thread default streams copy too.
  std::fill(out.begin(), out.end(), 0);
  EXPECT_EQ(d_->cuMemcpyAsync(dev(out.data()), a, n, nullptr), cu::kSuccess);
  EXPECT_EQ(d_->cuStreamSynchronize(nullptr), cu::kSuccess);
  EXPECT_EQ(out, in);
  std::fill(out.begin(), out.end(), 0);
  EXPECT_EQ(d_->cuMemcpyAsync(dev(out.data()), a, n, cu::perThreadStream()), cu::kSuccess);
  EXPECT_EQ(d_->cuStreamSynchronize(cu::perThreadStream()), cu::kSuccess);
  EXPECT_EQ(out, in);
  EXPECT_EQ(d_->cuStreamDestroy(s), cu::kSuccess);
  EXPECT_EQ(d_->cuStreamDestroy(s), cu::kErrorInvalidHandle);
  EXPECT_EQ(d_->cuMemFree(a), cu::kSuccess);
  EXPECT_EQ(d_->cuMemFree(b), cu::kSuccess);
  EXPECT_EQ(d_->cuMemFree(b), cu::kErrorInvalidValue);  // freed twice
  EXPECT_EQ(d_->cuMemFree(dev(in.data())), cu::kErrorInvalidValue);
}

TEST_F(CudaDouble, StreamOrderAndEvents) {
  const size_t n = 4096;
  std::vector<uint8_t> in(n, 0x5a), out(n, 0);
  const CUdeviceptr a = alloc(n);
  CUstream s1 = newStream(), s2 = newStream(cu::kStreamNonBlocking);
  CUevent never = nullptr, done = nullptr;
  ASSERT_EQ(d_->cuEventCreate(&never, cu::kEventDisableTiming), cu::kSuccess);
  ASSERT_EQ(d_->cuEventCreate(&done, cu::kEventDisableTiming), cu::kSuccess);
  EXPECT_EQ(d_->cuEventQuery(never), cu::kSuccess);  // never recorded: complete
  EXPECT_EQ(d_->cuEventSynchronize(never), cu::kSuccess);

  const auto start = Clock::now();
  ASSERT_EQ(d_->sleep(s1, 300 * 1000), cu::kSuccess);  // the slow kernel
  ASSERT_EQ(d_->cuMemcpyAsync(a, dev(in.data()), n, s1), cu::kSuccess);
  ASSERT_EQ(d_->cuEventRecord(done, s1), cu::kSuccess);
  ASSERT_EQ(d_->cuStreamWaitEvent(s2, done, 0), cu::kSuccess);
  ASSERT_EQ(d_->cuMemcpyAsync(dev(out.data()), a, n, s2), cu::kSuccess);
  // A record after the wait does not change what s2 waits for.
  ASSERT_EQ(d_->cuEventRecord(done, s2), cu::kSuccess);
  EXPECT_EQ(d_->cuStreamQuery(s1), cu::kErrorNotReady);
  EXPECT_EQ(d_->cuStreamQuery(s2), cu::kErrorNotReady);
  EXPECT_EQ(d_->cuEventQuery(done), cu::kErrorNotReady);
  EXPECT_EQ(static_cast<uint8_t*>(d_->shadow(a))[0], 0) << "the copy ran before the sleep ended";
  EXPECT_EQ(d_->cuStreamSynchronize(s2), cu::kSuccess);
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(290));
  EXPECT_EQ(out, in);
  EXPECT_EQ(d_->cuEventQuery(done), cu::kSuccess);
  EXPECT_EQ(d_->cuStreamQuery(s1), cu::kSuccess);

  // A wait takes the record as of the call: a later record does not hold the waiter.
  ASSERT_EQ(d_->cuEventRecord(done, s1), cu::kSuccess);  // completes at once (s1 idle)
  ASSERT_EQ(d_->cuEventSynchronize(done), cu::kSuccess);
  ASSERT_EQ(d_->cuStreamWaitEvent(s2, done, 0), cu::kSuccess);
  ASSERT_EQ(d_->sleep(s1, 400 * 1000), cu::kSuccess);
  ASSERT_EQ(d_->cuEventRecord(done, s1), cu::kSuccess);
  const auto t = Clock::now();
  EXPECT_EQ(d_->cuStreamSynchronize(s2), cu::kSuccess);
  EXPECT_LT(Clock::now() - t, std::chrono::milliseconds(300));
  EXPECT_EQ(d_->cuEventSynchronize(done), cu::kSuccess);

  EXPECT_EQ(d_->cuEventDestroy(never), cu::kSuccess);
  EXPECT_EQ(d_->cuEventDestroy(done), cu::kSuccess);
  EXPECT_EQ(d_->cuEventQuery(done), cu::kErrorInvalidHandle);
  EXPECT_EQ(d_->cuStreamDestroy(s1), cu::kSuccess);
  EXPECT_EQ(d_->cuStreamDestroy(s2), cu::kSuccess);
  EXPECT_EQ(d_->cuMemFree(a), cu::kSuccess);
}

TEST_F(CudaDouble, LegacyStreamSynchronizesWithBlockingStreams) {
  const size_t n = 256;
  std::vector<uint8_t> out(n, 0);
  const CUdeviceptr a = alloc(n);
  CUstream blocking = newStream(), nonBlocking = newStream(cu::kStreamNonBlocking);
  // Blocking stream first: the legacy stream's copy waits for it.
  ASSERT_EQ(d_->sleep(blocking, 200 * 1000), cu::kSuccess);
  ASSERT_EQ(d_->cuMemsetD8Async(a, 1, n, blocking), cu::kSuccess);
  ASSERT_EQ(d_->cuMemcpyAsync(dev(out.data()), a, n, cu::legacyStream()), cu::kSuccess);
  EXPECT_EQ(d_->cuStreamSynchronize(cu::legacyStream()), cu::kSuccess);
  EXPECT_EQ(out, std::vector<uint8_t>(n, 1));
  // Legacy first: the blocking stream's copy waits for it (handle 0 is the legacy stream too).
  ASSERT_EQ(d_->sleep(nullptr, 200 * 1000), cu::kSuccess);
  ASSERT_EQ(d_->cuMemsetD8Async(a, 2, n, nullptr), cu::kSuccess);
  ASSERT_EQ(d_->cuMemcpyAsync(dev(out.data()), a, n, blocking), cu::kSuccess);
  EXPECT_EQ(d_->cuStreamSynchronize(blocking), cu::kSuccess);
  EXPECT_EQ(out, std::vector<uint8_t>(n, 2));
  // A non-blocking stream does not wait for the legacy stream.
  ASSERT_EQ(d_->sleep(nullptr, 500 * 1000), cu::kSuccess);
  const auto t = Clock::now();
  ASSERT_EQ(d_->cuMemsetD8Async(a, 3, 1, nonBlocking), cu::kSuccess);
  EXPECT_EQ(d_->cuStreamSynchronize(nonBlocking), cu::kSuccess);
  EXPECT_LT(Clock::now() - t, std::chrono::milliseconds(400));
  EXPECT_EQ(d_->cuStreamQuery(nullptr), cu::kErrorNotReady);
  EXPECT_EQ(d_->cuStreamSynchronize(nullptr), cu::kSuccess);
  EXPECT_EQ(d_->cuStreamDestroy(blocking), cu::kSuccess);
  EXPECT_EQ(d_->cuStreamDestroy(nonBlocking), cu::kSuccess);
  EXPECT_EQ(d_->cuMemFree(a), cu::kSuccess);
}

TEST_F(CudaDouble, WaitValueBlocksUntilTheHostWritesIt) {
  void* host = nullptr;
  ASSERT_EQ(d_->cuMemHostAlloc(&host, 64, cu::kMemHostAllocDeviceMap | cu::kMemHostAllocPortable), cu::kSuccess);
  auto* word = static_cast<uint32_t*>(host);
  __atomic_store_n(word, 0u, __ATOMIC_RELEASE);
  CUdeviceptr wordDev = 0;
  ASSERT_EQ(d_->cuMemHostGetDevicePointer(&wordDev, host, 0), cu::kSuccess);
  EXPECT_EQ(wordDev, dev(host));  // unified addressing
  const CUdeviceptr a = alloc(16);
  CUstream s = newStream();
  ASSERT_EQ(d_->cuStreamWaitValue32(s, wordDev, 5, cu::kStreamWaitValueGeq), cu::kSuccess);
  ASSERT_EQ(d_->cuMemsetD8Async(a, 9, 16, s), cu::kSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(d_->cuStreamQuery(s), cu::kErrorNotReady);
  __atomic_store_n(word, 4u, __ATOMIC_RELEASE);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(d_->cuStreamQuery(s), cu::kErrorNotReady);  // 4 < 5
  // GEQ compares as the driver does, (int32_t)(word - value) >= 0: larger as unsigned is not enough.
  std::thread([&] { __atomic_store_n(word, 0x80000006u, __ATOMIC_RELEASE); }).join();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(d_->cuStreamQuery(s), cu::kErrorNotReady) << "(int32_t)(0x80000006 - 5) < 0";
  std::thread([&] { __atomic_store_n(word, 7u, __ATOMIC_RELEASE); }).join();
  EXPECT_EQ(d_->cuStreamSynchronize(s), cu::kSuccess);
  EXPECT_EQ(static_cast<uint8_t*>(d_->shadow(a))[15], 9);

  // EQ on a device word, written by another stream's cuStreamWriteValue32.
  CUstream writerStream = newStream(cu::kStreamNonBlocking);
  ASSERT_EQ(d_->cuMemsetD8Async(a, 0, 16, s), cu::kSuccess);
  ASSERT_EQ(d_->cuStreamWaitValue32(s, a + 4, 42, cu::kStreamWaitValueEq), cu::kSuccess);
  ASSERT_EQ(d_->cuMemsetD8Async(a, 1, 1, s), cu::kSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(d_->cuStreamQuery(s), cu::kErrorNotReady);
  ASSERT_EQ(d_->cuStreamWriteValue32(writerStream, a + 4, 42, cu::kStreamWriteValueDefault), cu::kSuccess);
  EXPECT_EQ(d_->cuStreamSynchronize(s), cu::kSuccess);
  EXPECT_EQ(static_cast<uint8_t*>(d_->shadow(a))[0], 1);
  // Unregistered host memory and unaligned words are refused.
  uint32_t plain = 0;
  EXPECT_EQ(d_->cuStreamWaitValue32(s, dev(&plain), 1, 0), cu::kErrorInvalidValue);
  EXPECT_EQ(d_->cuStreamWaitValue32(s, wordDev + 2, 1, 0), cu::kErrorInvalidValue);

  EXPECT_EQ(d_->cuStreamDestroy(s), cu::kSuccess);
  EXPECT_EQ(d_->cuStreamDestroy(writerStream), cu::kSuccess);
  EXPECT_EQ(d_->cuMemFree(a), cu::kSuccess);
  EXPECT_EQ(d_->cuMemFreeHost(host), cu::kSuccess);
  EXPECT_EQ(d_->cuMemFreeHost(host), cu::kErrorInvalidValue);
}

// A stream whose worker waits forever on a value may be destroyed; the process still exits (the
// word stays allocated: freeing it would be a fault of the waiting stream, as on a GPU).
TEST_F(CudaDouble, DestroyedStreamBlockedOnAValueDoesNotHoldUpExit) {
  void* host = nullptr;
  ASSERT_EQ(d_->cuMemHostAlloc(&host, 4, cu::kMemHostAllocDeviceMap), cu::kSuccess);
  __atomic_store_n(static_cast<uint32_t*>(host), 0u, __ATOMIC_RELEASE);
  CUstream s = newStream(cu::kStreamNonBlocking);
  ASSERT_EQ(d_->cuStreamWaitValue32(s, dev(host), 1, cu::kStreamWaitValueEq), cu::kSuccess);
  EXPECT_EQ(d_->cuStreamQuery(s), cu::kErrorNotReady);
  EXPECT_EQ(d_->cuStreamDestroy(s), cu::kSuccess);
}

struct Attributes {
  CUcontext ctx = reinterpret_cast<CUcontext>(0x1234);
  unsigned int memType = 99;
  CUdeviceptr devicePointer = 99;
  unsigned long long bufferId = 99;
  unsigned int managed = 99;
  int ordinal = 99;
  CUdeviceptr rangeStart = 99;
  size_t rangeSize = 99;
};

CUresult attributesOf(Driver* d, CUdeviceptr p, Attributes* a) {
  int attrs[] = {cu::kPointerAttributeContext,      cu::kPointerAttributeMemoryType,
                 cu::kPointerAttributeDevicePointer, cu::kPointerAttributeBufferId,
                 cu::kPointerAttributeIsManaged,     cu::kPointerAttributeDeviceOrdinal,
                 cu::kPointerAttributeRangeStartAddr, cu::kPointerAttributeRangeSize};
  void* data[] = {&a->ctx, &a->memType, &a->devicePointer, &a->bufferId, &a->managed, &a->ordinal, &a->rangeStart,
                  &a->rangeSize};
  return d->cuPointerGetAttributes(8, attrs, data, p);
}

TEST_F(CudaDouble, PointerAttributesOfEachKindOfMemory) {
  CUcontext ctx1 = nullptr;
  ASSERT_EQ(d_->cuDevicePrimaryCtxRetain(&ctx1, 1), cu::kSuccess);
  ASSERT_EQ(d_->cuCtxPushCurrent(ctx1), cu::kSuccess);
  const CUdeviceptr p = alloc(1000);  // on device 1
  CUcontext popped = nullptr;
  ASSERT_EQ(d_->cuCtxPopCurrent(&popped), cu::kSuccess);
  Attributes a;
  ASSERT_EQ(attributesOf(d_, p + 10, &a), cu::kSuccess);
  EXPECT_EQ(a.ctx, ctx1);
  EXPECT_EQ(a.memType, cu::kMemoryTypeDevice);
  EXPECT_EQ(a.devicePointer, p + 10);
  EXPECT_NE(a.bufferId, 0u);
  EXPECT_EQ(a.managed, 0u);
  EXPECT_EQ(a.ordinal, 1);
  EXPECT_EQ(a.rangeStart, p);
  EXPECT_EQ(a.rangeSize, 1000u);
  CUdeviceptr base = 0;
  size_t size = 0;
  EXPECT_EQ(d_->cuMemGetAddressRange(&base, &size, p + 999), cu::kSuccess);
  EXPECT_EQ(base, p);
  EXPECT_EQ(size, 1000u);
  const unsigned long long deviceBuffer = a.bufferId;

  void* pinned = nullptr;
  ASSERT_EQ(d_->cuMemHostAlloc(&pinned, 512, 0), cu::kSuccess);
  ASSERT_EQ(attributesOf(d_, dev(pinned) + 1, &a), cu::kSuccess);
  EXPECT_EQ(a.ctx, ctx_);
  EXPECT_EQ(a.memType, cu::kMemoryTypeHost);
  EXPECT_EQ(a.devicePointer, dev(pinned) + 1);
  EXPECT_NE(a.bufferId, deviceBuffer);
  EXPECT_EQ(a.ordinal, 0);
  EXPECT_EQ(a.rangeStart, dev(pinned));
  EXPECT_EQ(a.rangeSize, 512u);

  std::vector<char> heap(8192);
  ASSERT_EQ(d_->cuMemHostRegister(heap.data(), 4096, cu::kMemHostRegisterDeviceMap), cu::kSuccess);
  EXPECT_EQ(d_->cuMemHostRegister(heap.data() + 100, 100, 0), cu::kErrorHostMemoryAlreadyRegistered);
  EXPECT_EQ(d_->cuMemHostRegister(pinned, 100, 0), cu::kErrorHostMemoryAlreadyRegistered);
  ASSERT_EQ(attributesOf(d_, dev(heap.data()) + 4095, &a), cu::kSuccess);
  EXPECT_EQ(a.memType, cu::kMemoryTypeHost);
  EXPECT_EQ(a.ordinal, 0);
  // Beyond the registered range: plain host memory, which the driver reports with its defaults
  // (cuda.h: "the attributes are assigned default NULL values and CUDA_SUCCESS is returned").
  ASSERT_EQ(attributesOf(d_, dev(heap.data()) + 4096, &a), cu::kSuccess);
  EXPECT_EQ(a.ctx, nullptr);
  EXPECT_EQ(a.memType, 0u);
  EXPECT_EQ(a.devicePointer, 0u);
  EXPECT_EQ(a.bufferId, 0u);
  EXPECT_EQ(a.ordinal, -2);  // CU_DEVICE_INVALID
  EXPECT_EQ(a.rangeSize, 0u);
  EXPECT_EQ(d_->cuMemHostUnregister(heap.data()), cu::kSuccess);
  EXPECT_EQ(d_->cuMemHostUnregister(heap.data()), 713);  // CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED
  EXPECT_EQ(d_->cuMemHostUnregister(pinned), 713);        // allocated, not registered

  // A freed device pointer is unknown memory.
  ASSERT_EQ(d_->cuMemFree(p), cu::kSuccess);
  a = Attributes{};
  ASSERT_EQ(attributesOf(d_, p, &a), cu::kSuccess);
  EXPECT_EQ(a.memType, 0u);
  EXPECT_EQ(a.ctx, nullptr);
  EXPECT_EQ(a.ordinal, -2);
  EXPECT_EQ(d_->cuMemGetAddressRange(&base, &size, p), cu::kErrorNotFound);
  EXPECT_EQ(d_->cuMemFreeHost(pinned), cu::kSuccess);
  EXPECT_EQ(d_->hostRegistrations(), 0);
  EXPECT_EQ(d_->cuDevicePrimaryCtxRelease(1), cu::kSuccess);
}

TEST_F(CudaDouble, FailedOperationIsAStickyIllegalAddress) {
  const CUdeviceptr p = alloc(256);
  CUstream s = newStream(), other = newStream();
  ASSERT_EQ(d_->cuMemFree(p), cu::kSuccess);
  std::vector<uint8_t> in(256, 1);
  EXPECT_EQ(d_->cuMemcpyAsync(p, dev(in.data()), in.size(), s), cu::kSuccess);  // fails when it runs
  EXPECT_EQ(d_->cuStreamSynchronize(s), cu::kErrorIllegalAddress);
  EXPECT_EQ(d_->cuStreamQuery(s), cu::kErrorIllegalAddress);
  EXPECT_EQ(d_->cuStreamSynchronize(other), cu::kErrorIllegalAddress);  // the whole context
  CUdeviceptr q = 0;
  EXPECT_EQ(d_->cuMemAlloc(&q, 16), cu::kErrorIllegalAddress);
  d_->clearSticky();
  EXPECT_EQ(d_->cuStreamSynchronize(s), cu::kSuccess);
  EXPECT_EQ(d_->cuStreamDestroy(s), cu::kSuccess);
  EXPECT_EQ(d_->cuStreamDestroy(other), cu::kSuccess);
}

TEST_F(CudaDouble, InjectedErrors) {
  EXPECT_EQ(d_->inject("cuMemAlloc_v2", 2, cu::kErrorOutOfMemory), cu::kSuccess);
  CUdeviceptr p = 0;
  EXPECT_EQ(d_->cuMemAlloc(&p, 16), cu::kErrorOutOfMemory);
  EXPECT_EQ(d_->cuMemAlloc(&p, 16), cu::kErrorOutOfMemory);
  EXPECT_EQ(d_->cuMemAlloc(&p, 16), cu::kSuccess);
  EXPECT_EQ(d_->deviceBytes(), bytesAtStart_ + 16);
  EXPECT_EQ(d_->cuMemFree(p), cu::kSuccess);
  EXPECT_EQ(d_->inject("cuStreamSynchronize", 1, cu::kErrorLaunchFailed), cu::kSuccess);
  EXPECT_EQ(d_->cuStreamSynchronize(nullptr), cu::kErrorLaunchFailed);
  EXPECT_EQ(d_->cuStreamSynchronize(nullptr), cu::kSuccess);
  EXPECT_EQ(d_->inject("cuNoSuchFunction", 1, 1), cu::kErrorInvalidValue);
  EXPECT_EQ(d_->inject("cuEventCreate", 5, cu::kErrorOutOfMemory), cu::kSuccess);
  EXPECT_EQ(d_->inject("cuEventCreate", 0, 0), cu::kSuccess);  // cleared
  CUevent e = nullptr;
  EXPECT_EQ(d_->cuEventCreate(&e, 0), cu::kSuccess);
  EXPECT_EQ(d_->cuEventDestroy(e), cu::kSuccess);
}

TEST_F(CudaDouble, CaptureRecordsInsteadOfRunning) {
  CUstream s = newStream();
  const CUdeviceptr a = alloc(16);
  ASSERT_EQ(d_->cuMemsetD8Async(a, 0, 16, s), cu::kSuccess);
  ASSERT_EQ(d_->cuStreamSynchronize(s), cu::kSuccess);
  int status = -1;
  EXPECT_EQ(d_->cuStreamIsCapturing(s, &status), cu::kSuccess);
  EXPECT_EQ(status, cu::kCaptureStatusNone);
  ASSERT_EQ(d_->cuStreamBeginCapture(s, cu::kCaptureModeThreadLocal), cu::kSuccess);
  EXPECT_EQ(d_->cuStreamIsCapturing(s, &status), cu::kSuccess);
  EXPECT_EQ(status, cu::kCaptureStatusActive);
  EXPECT_EQ(d_->cuMemsetD8Async(a, 7, 16, s), cu::kSuccess);
  CUgraph g = nullptr;
  EXPECT_EQ(d_->cuStreamEndCapture(s, &g), cu::kSuccess);
  EXPECT_NE(g, nullptr);
  EXPECT_EQ(d_->cuStreamIsCapturing(s, &status), cu::kSuccess);
  EXPECT_EQ(status, cu::kCaptureStatusNone);
  EXPECT_EQ(d_->cuStreamSynchronize(s), cu::kSuccess);
  EXPECT_EQ(static_cast<uint8_t*>(d_->shadow(a))[3], 0) << "a captured operation ran";
  // Synchronizing a capturing stream is refused and invalidates the capture.
  ASSERT_EQ(d_->cuStreamBeginCapture(s, cu::kCaptureModeGlobal), cu::kSuccess);
  EXPECT_EQ(d_->cuStreamSynchronize(s), cu::kErrorStreamCaptureUnsupported);
  EXPECT_EQ(d_->cuStreamIsCapturing(s, &status), cu::kSuccess);
  EXPECT_EQ(status, cu::kCaptureStatusInvalidated);
  EXPECT_EQ(d_->cuStreamEndCapture(s, &g), cu::kErrorStreamCaptureInvalidated);
  EXPECT_EQ(g, nullptr);
  EXPECT_EQ(d_->cuStreamBeginCapture(nullptr, cu::kCaptureModeGlobal), cu::kErrorStreamCaptureUnsupported);
  EXPECT_EQ(d_->cuStreamIsCapturing(nullptr, &status), cu::kSuccess);
  EXPECT_EQ(status, cu::kCaptureStatusNone);
  EXPECT_EQ(d_->cuStreamDestroy(s), cu::kSuccess);
  EXPECT_EQ(d_->cuMemFree(a), cu::kSuccess);
}

TEST_F(CudaDouble, KernelsRunFromTheHostRegistry) {
  static const char kImage[] = "any image";
  CUmodule m = nullptr;
  ASSERT_EQ(d_->cuModuleLoadData(&m, kImage), cu::kSuccess);
  CUfunction f = nullptr;
  EXPECT_EQ(d_->cuModuleGetFunction(&f, m, "noSuchKernel"), cu::kErrorNotFound);
  if (d_->cuModuleGetFunction(&f, m, "collDevCopy") != cu::kSuccess) {
    EXPECT_EQ(d_->cuModuleUnload(m), cu::kSuccess);
    GTEST_SKIP() << "the host kernel registry has no collDevCopy";
  }
  const size_t n = 3000;
  std::vector<uint8_t> in(n), out(n, 0);
  for (size_t i = 0; i < n; ++i) in[i] = static_cast<uint8_t>(i);
  const CUdeviceptr a = alloc(n), b = alloc(n);
  CUstream s = newStream();
  ASSERT_EQ(d_->cuMemcpyAsync(a, dev(in.data()), n, s), cu::kSuccess);
  {
    void* dst = reinterpret_cast<void*>(b);
    const void* src = reinterpret_cast<const void*>(a);
    uint64_t bytes = n;
    void* params[] = {&dst, &src, &bytes};
    ASSERT_EQ(d_->cuLaunchKernel(f, 2, 1, 1, 256, 1, 1, 0, s, params, nullptr), cu::kSuccess);
    dst = nullptr;  // the launch took its copies
    src = nullptr;
    bytes = 0;
  }
  ASSERT_EQ(d_->cuMemcpyAsync(dev(out.data()), b, n, s), cu::kSuccess);
  EXPECT_EQ(d_->cuStreamSynchronize(s), cu::kSuccess);
  EXPECT_EQ(out, in);
  // A kernel given a freed device address fails when it runs.
  ASSERT_EQ(d_->cuMemFree(b), cu::kSuccess);
  {
    void* dst = reinterpret_cast<void*>(b);
    const void* src = reinterpret_cast<const void*>(a);
    uint64_t bytes = n;
    void* params[] = {&dst, &src, &bytes};
    EXPECT_EQ(d_->cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, s, params, nullptr), cu::kSuccess);
  }
  EXPECT_EQ(d_->cuStreamSynchronize(s), cu::kErrorIllegalAddress);
  d_->clearSticky();
  EXPECT_EQ(d_->cuStreamDestroy(s), cu::kSuccess);
  EXPECT_EQ(d_->cuMemFree(a), cu::kSuccess);
  EXPECT_EQ(d_->cuModuleUnload(m), cu::kSuccess);
}

// ---- IPC ----------------------------------------------------------------------------------------------

std::string toHex(const CUipcMemHandle& h) {
  std::string s;
  char b[3];
  for (char c : h.reserved) {
    std::snprintf(b, sizeof(b), "%02x", static_cast<unsigned char>(c));
    s += b;
  }
  return s;
}

bool fromHex(const char* s, CUipcMemHandle* h) {
  if (std::strlen(s) < 2 * sizeof(h->reserved)) return false;
  for (size_t i = 0; i < sizeof(h->reserved); ++i) {
    unsigned v = 0;
    if (std::sscanf(s + 2 * i, "%2x", &v) != 1) return false;
    h->reserved[i] = static_cast<char>(v);
  }
  return true;
}

// Runs this binary with `args`; its stdout into *out; returns the exit status (or -1).
int runSelf(const std::vector<std::string>& args, std::string* out = nullptr) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const pid_t child = fork();
  if (child < 0) return -1;
  if (child == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> argv;
    static char self[] = "/proc/self/exe";
    argv.push_back(self);
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(self, argv.data());
    _exit(127);
  }
  close(fds[1]);
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) {
    if (out) out->append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  if (waitpid(child, &status, 0) != child) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST_F(CudaDouble, IpcAcrossProcesses) {
  const size_t n = 10000;
  const CUdeviceptr p = alloc(n);
  CUstream s = newStream();
  ASSERT_EQ(d_->cuMemsetD8Async(p, 0x11, n, s), cu::kSuccess);
  ASSERT_EQ(d_->cuStreamSynchronize(s), cu::kSuccess);
  CUipcMemHandle h;
  ASSERT_EQ(d_->cuIpcGetMemHandle(&h, p), cu::kSuccess);
  CUdeviceptr opened = 0;
  EXPECT_EQ(d_->cuIpcOpenMemHandle(&opened, h, cu::kIpcMemLazyEnablePeerAccess), cu::kErrorInvalidContext)
      << "the driver refuses a handle of the opening process";
  CUipcMemHandle garbage;
  std::memset(&garbage, 0x5c, sizeof(garbage));
  EXPECT_EQ(d_->cuIpcOpenMemHandle(&opened, garbage, cu::kIpcMemLazyEnablePeerAccess), cu::kErrorInvalidValue);

  // The child checks it reads 0x11, writes 0x22 through its own mapping.
  EXPECT_EQ(runSelf({"--ipc-child", toHex(h), std::to_string(n)}), 0);
  std::vector<uint8_t> out(n, 0);
  ASSERT_EQ(d_->cuMemcpyAsync(dev(out.data()), p, n, s), cu::kSuccess);
  ASSERT_EQ(d_->cuStreamSynchronize(s), cu::kSuccess);
  EXPECT_EQ(out, std::vector<uint8_t>(n, 0x22));

  // A handle whose owner has exited does not map (and does not crash).
  std::string exported;
  ASSERT_EQ(runSelf({"--ipc-export"}, &exported), 0);
  CUipcMemHandle dead;
  ASSERT_TRUE(fromHex(exported.c_str(), &dead)) << exported;
  EXPECT_EQ(d_->cuIpcOpenMemHandle(&opened, dead, cu::kIpcMemLazyEnablePeerAccess), cu::kErrorMapFailed);
  EXPECT_EQ(d_->cuIpcCloseMemHandle(p), cu::kErrorInvalidValue);  // not an opened handle

  EXPECT_EQ(d_->cuStreamDestroy(s), cu::kSuccess);
  EXPECT_EQ(d_->cuMemFree(p), cu::kSuccess);
}

// Child of IpcAcrossProcesses: opens the handle, checks the parent's bytes, writes its own.
int ipcChild(const char* hex, size_t n) {
  Driver* d = loadDriver();
  if (!d->missing.empty()) return 10;
  CUipcMemHandle h;
  if (!fromHex(hex, &h)) return 11;
  CUcontext ctx = nullptr;
  if (d->cuInit(0) != 0 || d->cuDevicePrimaryCtxRetain(&ctx, 0) != 0 || d->cuCtxSetCurrent(ctx) != 0) return 12;
  CUdeviceptr p = 0, again = 0;
  if (d->cuIpcOpenMemHandle(&p, h, cu::kIpcMemLazyEnablePeerAccess) != 0) return 13;
  if (d->cuIpcOpenMemHandle(&again, h, cu::kIpcMemLazyEnablePeerAccess) != 0 || again != p) return 14;
  std::vector<uint8_t> buf(n, 0);
  if (d->cuMemcpyAsync(dev(buf.data()), p, n, nullptr) != 0 || d->cuStreamSynchronize(nullptr) != 0) return 15;
  if (buf != std::vector<uint8_t>(n, 0x11)) return 16;
  unsigned int memType = 0;
  int attr = cu::kPointerAttributeMemoryType;
  void* data = &memType;
  if (d->cuPointerGetAttributes(1, &attr, &data, p) != 0 || memType != cu::kMemoryTypeDevice) return 17;
  if (d->cuMemsetD8Async(p, 0x22, n, nullptr) != 0 || d->cuStreamSynchronize(nullptr) != 0) return 18;
  if (d->cuIpcCloseMemHandle(p) != 0 || d->cuIpcCloseMemHandle(p) != 0) return 19;
  if (d->cuIpcCloseMemHandle(p) != cu::kErrorInvalidValue) return 20;
  return 0;
}

// Child that exports a handle and exits (its memory goes with it).
int ipcExport() {
  Driver* d = loadDriver();
  CUcontext ctx = nullptr;
  if (!d->missing.empty() || d->cuInit(0) != 0 || d->cuDevicePrimaryCtxRetain(&ctx, 0) != 0 ||
      d->cuCtxSetCurrent(ctx) != 0) {
    return 10;
  }
  CUdeviceptr p = 0;
  CUipcMemHandle h;
  if (d->cuMemAlloc(&p, 4096) != 0 || d->cuIpcGetMemHandle(&h, p) != 0) return 11;
  std::printf("%s\n", toHex(h).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  setenv("COLL_CUDA_DOUBLE_DEVICES", "2", 1);
  if (argc == 4 && std::strcmp(argv[1], "--ipc-child") == 0) return ipcChild(argv[2], std::strtoull(argv[3], nullptr, 10));
  if (argc == 2 && std::strcmp(argv[1], "--ipc-export") == 0) return ipcExport();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
