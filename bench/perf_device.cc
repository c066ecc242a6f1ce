// CUDA device buffers for the benchmarks (see perf_device.h).
#include "bench/perf_device.h"

#include <cstdio>
#include <cstdlib>

#include "src/gpu/cuda_driver.h"
#include "src/gpu/device_kernels.h"

namespace coll::perf {

namespace {

std::string cuError(CUresult r, const char* what) { return gpu::cudaCheck(r, what).message(); }

class CudaPerfDevice : public PerfDevice {
 public:
  CudaPerfDevice(const gpu::CudaDriver* cu, int ordinal) : cu_(cu), ordinal_(ordinal) {}
  ~CudaPerfDevice() override {
    if (counter_ != nullptr) (void)collMemFree(counter_);
    if (stream_ != nullptr) {
      (void)cu_->cuStreamSynchronize(stream_);
      (void)cu_->cuStreamDestroy(stream_);
    }
  }

  bool open(std::string* why) {
    Status st = gpu::setCurrentDevice(*cu_, ordinal_);
    if (!st.ok()) {
      *why = st.message();
      return false;
    }
    CUresult r = cu_->cuStreamCreate(&stream_, cu::kStreamNonBlocking);
    if (r != cu::kSuccess) {
      stream_ = nullptr;
      *why = cuError(r, "cuStreamCreate");
      return false;
    }
    char bus[32] = {};
    CUdevice dev = 0;
    if (cu_->cuDeviceGet(&dev, ordinal_) != cu::kSuccess ||
        cu_->cuDeviceGetPCIBusId(bus, static_cast<int>(sizeof(bus)) - 1, dev) != cu::kSuccess) {
      snprintf(bus, sizeof(bus), "?");
    }
    char text[64];
    snprintf(text, sizeof(text), "device %2d [%s]", ordinal_, bus);
    label_ = text;
    return true;
  }

  int ordinal() const override { return ordinal_; }
  std::string label() const override { return label_; }
  void* stream() const override { return stream_; }

  bool alloc(size_t bytes, void** ptr, std::string* error) override {
    collResult_t res = collMemAlloc(ptr, bytes);
    if (res != collSuccess) {
      *ptr = nullptr;
      *error = std::string("collMemAlloc: ") + collGetErrorString(res) + ": " + collGetLastError(nullptr);
      return false;
    }
    return true;
  }
  void release(void* ptr) override { (void)collMemFree(ptr); }

  bool copy(void* dst, const void* src, size_t bytes, std::string* error) {
    if (bytes == 0) return true;
    CUresult r = cu_->cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src), bytes,
                                    stream_);
    if (r != cu::kSuccess) {
      *error = cuError(r, "cuMemcpyAsync");
      return false;
    }
    return synchronize(error);
  }
  bool upload(void* device, const void* host, size_t bytes, std::string* error) override {
    return copy(device, host, bytes, error);
  }
  bool download(void* host, const void* device, size_t bytes, std::string* error) override {
    return copy(host, device, bytes, error);
  }

  bool synchronize(std::string* error) override {
    CUresult r = cu_->cuStreamSynchronize(stream_);
    if (r != cu::kSuccess) {
      *error = cuError(r, "cuStreamSynchronize");
      return false;
    }
    return true;
  }

  bool canCountOnDevice(std::string* why) override {
    std::string reason;
    if (gpu::deviceKernelsAvailable(*cu_, &reason)) return true;
    *why = "the device kernels are not available (" + reason + ")";
    return false;
  }

  bool countMismatches(const void* got, const void* want, size_t count, collDataType_t type, unsigned long long* wrong,
                       std::string* error) override {
    *wrong = 0;
    if (count == 0) return true;
    if (counter_ == nullptr && !alloc(sizeof(unsigned long long), &counter_, error)) return false;
    CUresult r = cu_->cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(counter_), 0, sizeof(unsigned long long), stream_);
    if (r != cu::kSuccess) {
      *error = cuError(r, "cuMemsetD8Async");
      return false;
    }
    Status st = gpu::deviceCountMismatches(*cu_, got, want, count, type, static_cast<unsigned long long*>(counter_),
                                           static_cast<CUstream>(stream_));
    if (!st.ok()) {
      *error = st.message();
      return false;
    }
    return download(wrong, counter_, sizeof(unsigned long long), error);
  }

 private:
  const gpu::CudaDriver* cu_;
  int ordinal_;
  CUstream stream_ = nullptr;
  void* counter_ = nullptr;  // the device's mismatch counter
  std::string label_;
};

}  // namespace

int cudaDeviceCount(std::string* why) {
  std::string reason;
  const gpu::CudaDriver* cu = gpu::cudaDriver(&reason);
  if (cu == nullptr) {
    if (why) *why = "no CUDA driver: " + reason;
    return 0;
  }
  if (cu->deviceCount <= 0 && why) *why = "the CUDA driver " + cu->path + " reports no device";
  return cu->deviceCount;
}

int launcherLocalRank() {
  for (const char* name : {"COLL_LOCAL_RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
                           "MPI_LOCALRANKID"}) {
    const char* v = getenv(name);
    if (v != nullptr && *v != '\0') return atoi(v);
  }
  return 0;
}

std::unique_ptr<PerfDevice> openPerfDevice(int ordinal, std::string* why) {
  const gpu::CudaDriver* cu = gpu::cudaDriver(why);
  if (cu == nullptr) return nullptr;
  auto dev = std::make_unique<CudaPerfDevice>(cu, ordinal);
  if (!dev->open(why)) return nullptr;
  return dev;
}

}  // namespace coll::perf
