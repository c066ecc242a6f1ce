// Tests of the CUDA driver test double (not a GPU): loaded as the library loads the driver (dlopen
// by path, the symbols of COLL_CUDA_DRIVER_FUNCTIONS by their exported names), checked against what
// the real driver does. The binary is also the IPC child process (--ipc-child, --ipc-export,
// --vmm-child, --vmm-off).
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
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
  COLL_CUDA_DRIVER_OPTIONAL_FUNCTIONS(COLL_TEST_MEMBER)
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
    COLL_CUDA_DRIVER_OPTIONAL_FUNCTIONS(COLL_TEST_RESOLVE)  // the double has them all
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
  EXPECT_EQ(vmm, 1);  // COLL_CUDA_DOUBLE_VMM unset
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

// ---- virtual memory management (VMM) ------------------------------------------------------------------

constexpr size_t kGranularity = size_t{2} << 20;

CUmemAllocationProp vmmProp(int device, int handleTypes = cu::kMemHandleTypeNone) {
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof(prop));
  prop.type = cu::kMemAllocationTypePinned;
  prop.requestedHandleTypes = handleTypes;
  prop.location.type = cu::kMemLocationTypeDevice;
  prop.location.id = device;
  return prop;
}

CUmemAccessDesc readWrite(int device) {
  CUmemAccessDesc desc;
  desc.location.type = cu::kMemLocationTypeDevice;
  desc.location.id = device;
  desc.flags = cu::kMemAccessFlagsProtReadWrite;
  return desc;
}

// Reserves `size` bytes of addresses and maps `handle` (of that size) at their start. 0 on failure.
CUdeviceptr reserveAndMap(Driver* d, CUmemGenericAllocationHandle handle, size_t size, size_t reserve = 0) {
  CUdeviceptr va = 0;
  if (d->cuMemAddressReserve(&va, reserve ? reserve : size, 0, 0, 0) != cu::kSuccess) return 0;
  if (d->cuMemMap(va, size, 0, handle, 0) != cu::kSuccess) return 0;
  return va;
}

// Copies `n` bytes between host and device on stream `s` and waits: the synchronize result.
CUresult copyAndWait(Driver* d, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  const CUresult r = d->cuMemcpyAsync(dst, src, n, s);
  return r != cu::kSuccess ? r : d->cuStreamSynchronize(s);
}

TEST_F(CudaDouble, VmmGranularityAndSupport) {
  int vmm = 0, posix = 0;
  EXPECT_EQ(d_->cuDeviceGetAttribute(&vmm, cu::kDeviceAttributeVirtualMemoryManagementSupported, 1), cu::kSuccess);
  EXPECT_EQ(d_->cuDeviceGetAttribute(&posix, cu::kDeviceAttributeHandleTypePosixFileDescriptorSupported, 1),
            cu::kSuccess);
  EXPECT_EQ(vmm, 1);
  EXPECT_EQ(posix, 1);
  CUmemAllocationProp prop = vmmProp(1);
  size_t g = 0;
  EXPECT_EQ(d_->cuMemGetAllocationGranularity(&g, &prop, cu::kMemAllocGranularityMinimum), cu::kSuccess);
  EXPECT_EQ(g, kGranularity);
  g = 0;
  EXPECT_EQ(d_->cuMemGetAllocationGranularity(&g, &prop, 1 /* RECOMMENDED */), cu::kSuccess);
  EXPECT_EQ(g, kGranularity);
  prop.location.id = 2;  // no such device
  EXPECT_EQ(d_->cuMemGetAllocationGranularity(&g, &prop, 0), cu::kErrorInvalidValue);
  prop = vmmProp(0);
  prop.type = 0;
  EXPECT_EQ(d_->cuMemGetAllocationGranularity(&g, &prop, 0), cu::kErrorInvalidValue);

  // cuMemCreate's checks, and injection by name.
  CUmemGenericAllocationHandle h = 0;
  prop = vmmProp(0);
  EXPECT_EQ(d_->cuMemCreate(&h, kGranularity + 4096, &prop, 0), cu::kErrorInvalidValue);
  EXPECT_EQ(d_->cuMemCreate(&h, 0, &prop, 0), cu::kErrorInvalidValue);
  EXPECT_EQ(d_->cuMemCreate(&h, kGranularity, &prop, 1), cu::kErrorInvalidValue);
  CUmemAllocationProp bad = vmmProp(5);
  EXPECT_EQ(d_->cuMemCreate(&h, kGranularity, &bad, 0), cu::kErrorInvalidDevice);
  ASSERT_EQ(d_->inject("cuMemCreate", 1, cu::kErrorOutOfMemory), cu::kSuccess);
  EXPECT_EQ(d_->cuMemCreate(&h, kGranularity, &prop, 0), cu::kErrorOutOfMemory);
  EXPECT_EQ(d_->deviceAllocations(), allocationsAtStart_);
  ASSERT_EQ(d_->cuMemCreate(&h, kGranularity, &prop, 0), cu::kSuccess);
  EXPECT_NE(h, 0u);
  EXPECT_EQ(d_->deviceAllocations(), allocationsAtStart_ + 1);
  EXPECT_EQ(d_->deviceBytes(), bytesAtStart_ + kGranularity);
  EXPECT_EQ(d_->cuMemRelease(h), cu::kSuccess);
  EXPECT_EQ(d_->cuMemRelease(h), cu::kErrorInvalidValue);
  EXPECT_EQ(d_->cuMemRelease(12345), cu::kErrorInvalidValue);
}

TEST_F(CudaDouble, VmmMappedMemoryIsDeviceMemory) {
  const CUmemAllocationProp prop = vmmProp(1);  // on device 1, used from device 0's context too
  CUmemGenericAllocationHandle h = 0;
  ASSERT_EQ(d_->cuMemCreate(&h, kGranularity, &prop, 0), cu::kSuccess);
  CUdeviceptr va = 0;
  ASSERT_EQ(d_->cuMemAddressReserve(&va, 2 * kGranularity, 0, 0, 0), cu::kSuccess);
  EXPECT_EQ(va % kGranularity, 0u);
  EXPECT_EQ(d_->cuMemMap(va, kGranularity / 2, 0, h, 0), cu::kErrorInvalidValue);         // not the whole allocation
  EXPECT_EQ(d_->cuMemMap(va, kGranularity, kGranularity, h, 0), cu::kErrorInvalidValue);  // offset
  EXPECT_EQ(d_->cuMemMap(va + 2 * kGranularity, kGranularity, 0, h, 0), cu::kErrorInvalidValue);  // outside
  const CUdeviceptr at = va + kGranularity;  // the second half of the reservation
  ASSERT_EQ(d_->cuMemMap(at, kGranularity, 0, h, 0), cu::kSuccess);
  EXPECT_EQ(d_->cuMemMap(at, kGranularity, 0, h, 0), cu::kErrorAlreadyMapped);
  const CUmemAccessDesc access[] = {readWrite(0), readWrite(1)};
  EXPECT_EQ(d_->cuMemSetAccess(va, 2 * kGranularity, access, 2), cu::kErrorInvalidValue);  // half unmapped
  CUmemAccessDesc noDevice = readWrite(7);
  EXPECT_EQ(d_->cuMemSetAccess(at, kGranularity, &noDevice, 1), cu::kErrorInvalidDevice);
  ASSERT_EQ(d_->cuMemSetAccess(at, kGranularity, access, 2), cu::kSuccess);

  CUstream s = newStream();
  std::vector<uint8_t> in(kGranularity - 100), out(in.size(), 0);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i * 7 + 3);
  ASSERT_EQ(copyAndWait(d_, at + 100, dev(in.data()), in.size(), s), cu::kSuccess);
  ASSERT_EQ(copyAndWait(d_, dev(out.data()), at + 100, out.size(), s), cu::kSuccess);
  EXPECT_EQ(out, in);
  EXPECT_EQ(static_cast<uint8_t*>(d_->shadow(at + 100))[5], in[5]);

  Attributes a;
  ASSERT_EQ(attributesOf(d_, at + 4096, &a), cu::kSuccess);
  EXPECT_EQ(a.memType, cu::kMemoryTypeDevice);
  EXPECT_EQ(a.ordinal, 1);
  EXPECT_EQ(a.devicePointer, at + 4096);
  EXPECT_EQ(a.rangeStart, at);
  EXPECT_EQ(a.rangeSize, kGranularity);
  EXPECT_NE(a.bufferId, 0u);
  CUdeviceptr base = 0;
  size_t size = 0;
  EXPECT_EQ(d_->cuMemGetAddressRange(&base, &size, at + kGranularity - 1), cu::kSuccess);
  EXPECT_EQ(base, at);
  EXPECT_EQ(size, kGranularity);
  ASSERT_EQ(attributesOf(d_, va, &a), cu::kSuccess);  // reserved, not mapped
  EXPECT_EQ(a.memType, 0u);

  EXPECT_EQ(d_->cuMemFree(at), cu::kErrorInvalidValue);  // not cuMemAlloc's
  CUipcMemHandle ipc;
  EXPECT_EQ(d_->cuIpcGetMemHandle(&ipc, at), cu::kErrorInvalidValue) << "no legacy IPC for cuMemCreate memory";
  EXPECT_EQ(d_->cuMemUnmap(at, kGranularity / 2), cu::kErrorInvalidValue);  // part of a mapping
  EXPECT_EQ(d_->cuMemUnmap(at, kGranularity), cu::kSuccess);
  EXPECT_EQ(d_->cuMemUnmap(at, kGranularity), cu::kErrorInvalidValue);
  EXPECT_EQ(d_->cuMemRelease(h), cu::kSuccess);
  EXPECT_EQ(d_->cuMemAddressFree(va, 2 * kGranularity), cu::kSuccess);
  EXPECT_EQ(d_->cuStreamDestroy(s), cu::kSuccess);
}

TEST_F(CudaDouble, VmmAccessNeedsSetAccessForTheDevice) {
  const CUmemAllocationProp prop = vmmProp(0);
  CUmemGenericAllocationHandle h = 0;
  ASSERT_EQ(d_->cuMemCreate(&h, kGranularity, &prop, 0), cu::kSuccess);
  const CUdeviceptr va = reserveAndMap(d_, h, kGranularity);
  ASSERT_NE(va, 0u);
  CUstream s = newStream();  // device 0's
  std::vector<uint8_t> in(4096, 0x5a);
  // Mapped without access: the copy faults when it runs, as an invalid address does.
  EXPECT_EQ(copyAndWait(d_, va, dev(in.data()), in.size(), s), cu::kErrorIllegalAddress);
  d_->clearSticky();
  // Access for device 1 only: device 0's stream still faults.
  const CUmemAccessDesc one = readWrite(1);
  ASSERT_EQ(d_->cuMemSetAccess(va, kGranularity, &one, 1), cu::kSuccess);
  EXPECT_EQ(copyAndWait(d_, va, dev(in.data()), in.size(), s), cu::kErrorIllegalAddress);
  d_->clearSticky();
  const CUmemAccessDesc zero = readWrite(0);
  ASSERT_EQ(d_->cuMemSetAccess(va, kGranularity, &zero, 1), cu::kSuccess);
  EXPECT_EQ(copyAndWait(d_, va, dev(in.data()), in.size(), s), cu::kSuccess);
  CUmemAccessDesc revoke = readWrite(0);
  revoke.flags = 0;  // PROT_NONE
  ASSERT_EQ(d_->cuMemSetAccess(va, kGranularity, &revoke, 1), cu::kSuccess);
  EXPECT_EQ(d_->cuMemsetD8Async(va, 0, 16, s), cu::kSuccess);
  EXPECT_EQ(d_->cuStreamSynchronize(s), cu::kErrorIllegalAddress);
  d_->clearSticky();
  EXPECT_EQ(d_->cuStreamSynchronize(s), cu::kSuccess);
  EXPECT_EQ(d_->cuMemUnmap(va, kGranularity), cu::kSuccess);
  EXPECT_EQ(d_->cuMemAddressFree(va, kGranularity), cu::kSuccess);
  EXPECT_EQ(d_->cuMemRelease(h), cu::kSuccess);
  EXPECT_EQ(d_->cuStreamDestroy(s), cu::kSuccess);
}

TEST_F(CudaDouble, VmmReleasedAllocationLivesWhileMapped) {
  const CUmemAllocationProp prop = vmmProp(0);
  CUmemGenericAllocationHandle h = 0;
  ASSERT_EQ(d_->cuMemCreate(&h, kGranularity, &prop, 0), cu::kSuccess);
  const CUdeviceptr va = reserveAndMap(d_, h, kGranularity);
  ASSERT_NE(va, 0u);
  const CUmemAccessDesc access = readWrite(0);
  ASSERT_EQ(d_->cuMemSetAccess(va, kGranularity, &access, 1), cu::kSuccess);
  CUstream s = newStream();
  ASSERT_EQ(d_->cuMemsetD8Async(va, 0x6b, kGranularity, s), cu::kSuccess);
  ASSERT_EQ(d_->cuStreamSynchronize(s), cu::kSuccess);
  ASSERT_EQ(d_->cuMemRelease(h), cu::kSuccess);
  EXPECT_EQ(d_->deviceAllocations(), allocationsAtStart_ + 1) << "released but mapped: still allocated";
  EXPECT_EQ(d_->deviceBytes(), bytesAtStart_ + kGranularity);
  EXPECT_EQ(d_->cuMemMap(va, kGranularity, 0, h, 0), cu::kErrorInvalidValue);  // the handle is gone
  std::vector<uint8_t> out(kGranularity, 0);
  ASSERT_EQ(copyAndWait(d_, dev(out.data()), va, out.size(), s), cu::kSuccess);
  EXPECT_EQ(out, std::vector<uint8_t>(kGranularity, 0x6b));
  ASSERT_EQ(d_->cuMemUnmap(va, kGranularity), cu::kSuccess);
  EXPECT_EQ(d_->deviceAllocations(), allocationsAtStart_);
  EXPECT_EQ(d_->deviceBytes(), bytesAtStart_);
  EXPECT_EQ(copyAndWait(d_, dev(out.data()), va, 16, s), cu::kErrorIllegalAddress);  // reserved, unmapped
  d_->clearSticky();
  EXPECT_EQ(d_->cuMemAddressFree(va, kGranularity), cu::kSuccess);
  EXPECT_EQ(d_->cuStreamDestroy(s), cu::kSuccess);
}

TEST_F(CudaDouble, VmmAddressFreeNeedsTheWholeUnmappedReservation) {
  const CUmemAllocationProp prop = vmmProp(0);
  CUmemGenericAllocationHandle h = 0;
  ASSERT_EQ(d_->cuMemCreate(&h, kGranularity, &prop, 0), cu::kSuccess);
  const CUdeviceptr va = reserveAndMap(d_, h, kGranularity, 2 * kGranularity);
  ASSERT_NE(va, 0u);
  const CUdeviceptr p = alloc(100);  // cuMemAlloc never lands in a reservation
  EXPECT_TRUE(p + 100 <= va || p >= va + 2 * kGranularity);
  EXPECT_EQ(d_->cuMemAddressFree(va, 2 * kGranularity), cu::kErrorInvalidValue) << "still mapped";
  EXPECT_EQ(d_->cuMemUnmap(va, kGranularity), cu::kSuccess);
  EXPECT_EQ(d_->cuMemAddressFree(va, kGranularity), cu::kErrorInvalidValue);  // not the reserved size
  EXPECT_EQ(d_->cuMemAddressFree(va + kGranularity, kGranularity), cu::kErrorInvalidValue);
  EXPECT_EQ(d_->cuMemAddressFree(va, 2 * kGranularity), cu::kSuccess);
  EXPECT_EQ(d_->cuMemAddressFree(va, 2 * kGranularity), cu::kErrorInvalidValue);
  EXPECT_EQ(d_->cuMemMap(va, kGranularity, 0, h, 0), cu::kErrorInvalidValue);  // no longer reserved
  EXPECT_EQ(d_->cuMemRelease(h), cu::kSuccess);
  EXPECT_EQ(d_->cuMemFree(p), cu::kSuccess);
}

TEST_F(CudaDouble, VmmExportImportInOneProcess) {
  const CUmemAllocationProp prop = vmmProp(0, cu::kMemHandleTypePosixFileDescriptor);
  CUmemGenericAllocationHandle h = 0, imported = 0;
  ASSERT_EQ(d_->cuMemCreate(&h, 2 * kGranularity, &prop, 0), cu::kSuccess);
  int fd = -1;
  EXPECT_EQ(d_->cuMemExportToShareableHandle(&fd, h, cu::kMemHandleTypeNone, 0), cu::kErrorInvalidValue);
  ASSERT_EQ(d_->cuMemExportToShareableHandle(&fd, h, cu::kMemHandleTypePosixFileDescriptor, 0), cu::kSuccess);
  ASSERT_GE(fd, 0);
  EXPECT_NE(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
  ASSERT_EQ(d_->cuMemImportFromShareableHandle(&imported, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                                               cu::kMemHandleTypePosixFileDescriptor),
            cu::kSuccess);
  EXPECT_EQ(close(fd), 0);  // the imported handle keeps its own
  EXPECT_NE(imported, h);
  EXPECT_EQ(d_->deviceAllocations(), allocationsAtStart_ + 2) << "an imported handle is released too";

  const CUdeviceptr a = reserveAndMap(d_, h, 2 * kGranularity);
  const CUdeviceptr b = reserveAndMap(d_, imported, 2 * kGranularity);
  ASSERT_NE(a, 0u);
  ASSERT_NE(b, 0u);
  const CUmemAccessDesc access = readWrite(0);
  ASSERT_EQ(d_->cuMemSetAccess(a, 2 * kGranularity, &access, 1), cu::kSuccess);
  ASSERT_EQ(d_->cuMemSetAccess(b, 2 * kGranularity, &access, 1), cu::kSuccess);
  CUstream s = newStream();
  std::vector<uint8_t> in(1000), out(1000, 0);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i ^ 0x93);
  ASSERT_EQ(copyAndWait(d_, a + kGranularity + 5, dev(in.data()), in.size(), s), cu::kSuccess);
  ASSERT_EQ(copyAndWait(d_, dev(out.data()), b + kGranularity + 5, out.size(), s), cu::kSuccess);
  EXPECT_EQ(out, in) << "both handles are the same memory";

  // An allocation created without the POSIX handle type cannot be exported.
  const CUmemAllocationProp plain = vmmProp(0);
  CUmemGenericAllocationHandle p = 0;
  ASSERT_EQ(d_->cuMemCreate(&p, kGranularity, &plain, 0), cu::kSuccess);
  EXPECT_EQ(d_->cuMemExportToShareableHandle(&fd, p, cu::kMemHandleTypePosixFileDescriptor, 0), 800)
      << "CUDA_ERROR_NOT_PERMITTED";
  EXPECT_EQ(d_->cuMemRelease(p), cu::kSuccess);

  EXPECT_EQ(d_->cuMemUnmap(a, 2 * kGranularity), cu::kSuccess);
  EXPECT_EQ(d_->cuMemUnmap(b, 2 * kGranularity), cu::kSuccess);
  EXPECT_EQ(d_->cuMemAddressFree(a, 2 * kGranularity), cu::kSuccess);
  EXPECT_EQ(d_->cuMemAddressFree(b, 2 * kGranularity), cu::kSuccess);
  EXPECT_EQ(d_->cuMemRelease(imported), cu::kSuccess);
  EXPECT_EQ(d_->cuMemRelease(h), cu::kSuccess);
  EXPECT_EQ(d_->cuStreamDestroy(s), cu::kSuccess);
}

TEST_F(CudaDouble, VmmImportOfAForeignFdIsRefused) {
  CUmemGenericAllocationHandle h = 0;
  auto asHandle = [](int fd) { return reinterpret_cast<void*>(static_cast<intptr_t>(fd)); };
  const int posix = cu::kMemHandleTypePosixFileDescriptor;
  EXPECT_EQ(d_->cuMemImportFromShareableHandle(&h, asHandle(-1), posix), cu::kErrorInvalidValue);
  EXPECT_EQ(d_->cuMemImportFromShareableHandle(&h, asHandle(987654), posix), cu::kErrorInvalidValue);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  EXPECT_EQ(d_->cuMemImportFromShareableHandle(&h, asHandle(fds[0]), posix), cu::kErrorInvalidValue);
  close(fds[0]);
  close(fds[1]);
  // A memfd of the right size, but not the double's.
  const int other = memfd_create("not-the-double", MFD_CLOEXEC);
  ASSERT_GE(other, 0);
  ASSERT_EQ(ftruncate(other, static_cast<off_t>(kGranularity)), 0);
  EXPECT_EQ(d_->cuMemImportFromShareableHandle(&h, asHandle(other), posix), cu::kErrorInvalidValue);
  close(other);
  // The double's, with a handle type it was not exported as.
  const CUmemAllocationProp prop = vmmProp(0, posix);
  CUmemGenericAllocationHandle created = 0;
  ASSERT_EQ(d_->cuMemCreate(&created, kGranularity, &prop, 0), cu::kSuccess);
  int fd = -1;
  ASSERT_EQ(d_->cuMemExportToShareableHandle(&fd, created, posix, 0), cu::kSuccess);
  EXPECT_EQ(d_->cuMemImportFromShareableHandle(&h, asHandle(fd), cu::kMemHandleTypeNone), cu::kErrorInvalidValue);
  EXPECT_EQ(d_->deviceAllocations(), allocationsAtStart_ + 1);
  close(fd);
  EXPECT_EQ(d_->cuMemRelease(created), cu::kSuccess);
}

// Passes `fd` over Unix socket `sock` (SCM_RIGHTS), with `value` as the payload.
bool sendFd(int sock, int fd, uint64_t value) {
  char control[CMSG_SPACE(sizeof(int))] = {};
  iovec iov{&value, sizeof(value)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  return sendmsg(sock, &msg, 0) == static_cast<ssize_t>(sizeof(value));
}

int receiveFd(int sock, uint64_t* value) {
  char control[CMSG_SPACE(sizeof(int))] = {};
  iovec iov{value, sizeof(*value)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  if (recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) != static_cast<ssize_t>(sizeof(*value))) return -1;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (c == nullptr || c->cmsg_type != SCM_RIGHTS) return -1;
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
  return fd;
}

TEST_F(CudaDouble, VmmShareableFdAcrossProcesses) {
  const size_t n = 2 * kGranularity;
  const CUmemAllocationProp prop = vmmProp(0, cu::kMemHandleTypePosixFileDescriptor);
  CUmemGenericAllocationHandle h = 0;
  ASSERT_EQ(d_->cuMemCreate(&h, n, &prop, 0), cu::kSuccess);
  const CUdeviceptr va = reserveAndMap(d_, h, n);
  ASSERT_NE(va, 0u);
  const CUmemAccessDesc access = readWrite(0);
  ASSERT_EQ(d_->cuMemSetAccess(va, n, &access, 1), cu::kSuccess);
  CUstream s = newStream();
  ASSERT_EQ(d_->cuMemsetD8Async(va, 0x33, n, s), cu::kSuccess);
  ASSERT_EQ(d_->cuStreamSynchronize(s), cu::kSuccess);

  // The fd travels in a message queued on the child's socket before the child starts.
  int fd = -1;
  ASSERT_EQ(d_->cuMemExportToShareableHandle(&fd, h, cu::kMemHandleTypePosixFileDescriptor, 0), cu::kSuccess);
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);  // sv[1] is inherited by the child
  ASSERT_TRUE(sendFd(sv[0], fd, n));
  close(fd);
  // The child reads 0x33, writes 0x44 into the first half through its own mapping.
  EXPECT_EQ(runSelf({"--vmm-child", std::to_string(sv[1])}), 0);
  close(sv[0]);
  close(sv[1]);
  std::vector<uint8_t> out(n, 0);
  ASSERT_EQ(copyAndWait(d_, dev(out.data()), va, n, s), cu::kSuccess);
  EXPECT_EQ(std::vector<uint8_t>(out.begin(), out.begin() + n / 2), std::vector<uint8_t>(n / 2, 0x44));
  EXPECT_EQ(std::vector<uint8_t>(out.begin() + n / 2, out.end()), std::vector<uint8_t>(n / 2, 0x33));

  EXPECT_EQ(d_->cuMemUnmap(va, n), cu::kSuccess);
  EXPECT_EQ(d_->cuMemAddressFree(va, n), cu::kSuccess);
  EXPECT_EQ(d_->cuMemRelease(h), cu::kSuccess);
  EXPECT_EQ(d_->cuStreamDestroy(s), cu::kSuccess);
}

// Child of VmmShareableFdAcrossProcesses: receives the fd, imports and maps it, checks and writes.
int vmmChild(int sock) {
  uint64_t n = 0;
  const int fd = receiveFd(sock, &n);
  if (fd < 0 || n == 0) return 10;
  Driver* d = loadDriver();
  CUcontext ctx = nullptr;
  if (!d->missing.empty() || d->cuInit(0) != 0 || d->cuDevicePrimaryCtxRetain(&ctx, 0) != 0 ||
      d->cuCtxSetCurrent(ctx) != 0) {
    return 11;
  }
  CUmemGenericAllocationHandle h = 0;
  if (d->cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                                        cu::kMemHandleTypePosixFileDescriptor) != 0) {
    return 12;
  }
  close(fd);
  if (d->deviceAllocations() != 1) return 13;
  const CUdeviceptr va = reserveAndMap(d, h, n);
  if (va == 0) return 14;
  const CUmemAccessDesc access = readWrite(0);
  if (d->cuMemSetAccess(va, n, &access, 1) != 0) return 15;
  std::vector<uint8_t> buf(n, 0);
  if (copyAndWait(d, dev(buf.data()), va, n, nullptr) != 0) return 16;
  if (buf != std::vector<uint8_t>(n, 0x33)) return 17;
  if (d->cuMemsetD8Async(va, 0x44, n / 2, nullptr) != 0 || d->cuStreamSynchronize(nullptr) != 0) return 18;
  if (d->cuMemUnmap(va, n) != 0 || d->cuMemAddressFree(va, n) != 0 || d->cuMemRelease(h) != 0) return 19;
  if (d->deviceAllocations() != 0 || d->deviceBytes() != 0) return 20;
  return 0;
}

TEST_F(CudaDouble, VmmOffWithTheEnvironmentKnob) {
  EXPECT_EQ(runSelf({"--vmm-off"}), 0);  // the double reads COLL_CUDA_DOUBLE_VMM at cuInit: a new process
}

// Child of VmmOffWithTheEnvironmentKnob: COLL_CUDA_DOUBLE_VMM=0.
int vmmOff() {
  setenv("COLL_CUDA_DOUBLE_VMM", "0", 1);
  Driver* d = loadDriver();
  CUcontext ctx = nullptr;
  if (!d->missing.empty() || d->cuInit(0) != 0 || d->cuDevicePrimaryCtxRetain(&ctx, 0) != 0 ||
      d->cuCtxSetCurrent(ctx) != 0) {
    return 10;
  }
  int vmm = -1, posix = -1;
  if (d->cuDeviceGetAttribute(&vmm, cu::kDeviceAttributeVirtualMemoryManagementSupported, 0) != 0 || vmm != 0) {
    return 11;
  }
  if (d->cuDeviceGetAttribute(&posix, cu::kDeviceAttributeHandleTypePosixFileDescriptorSupported, 0) != 0 ||
      posix != 0) {
    return 12;
  }
  const CUmemAllocationProp prop = vmmProp(0);
  CUmemGenericAllocationHandle h = 0;
  size_t g = 0;
  CUdeviceptr va = 0;
  if (d->cuMemCreate(&h, kGranularity, &prop, 0) != cu::kErrorNotSupported) return 13;
  if (d->cuMemGetAllocationGranularity(&g, &prop, 0) != cu::kErrorNotSupported) return 14;
  if (d->cuMemAddressReserve(&va, kGranularity, 0, 0, 0) != cu::kErrorNotSupported) return 15;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  setenv("COLL_CUDA_DOUBLE_DEVICES", "2", 1);
  if (argc == 4 && std::strcmp(argv[1], "--ipc-child") == 0) return ipcChild(argv[2], std::strtoull(argv[3], nullptr, 10));
  if (argc == 2 && std::strcmp(argv[1], "--ipc-export") == 0) return ipcExport();
  if (argc == 3 && std::strcmp(argv[1], "--vmm-child") == 0) return vmmChild(std::atoi(argv[2]));
  if (argc == 2 && std::strcmp(argv[1], "--vmm-off") == 0) return vmmOff();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
