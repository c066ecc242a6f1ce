#include "src/gpu/cuda_driver.h"

#include <dlfcn.h>

#include <mutex>
#include <vector>

#include "src/base/config.h"
#include "src/base/log.h"

namespace coll::gpu {

const StringKnob kCudaDriver("COLL_CUDA_DRIVER", "libcuda.so.1",
                             "The CUDA driver library loaded at run time for device buffers (a path or a name the "
                             "dynamic loader finds). Without it, a device pointer or a CUDA stream is an error.",
                             {KnobSection::Transports, 60});

namespace {

struct Loaded {
  CudaDriver driver;
  bool ok = false;
  std::string why;
};

void load(Loaded* out) {
  const std::string path = kCudaDriver.get();
  // RTLD_LOCAL: the driver's symbols never interpose on the application's.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    out->why = "the CUDA driver (" + path + ") could not be loaded: " + (err ? err : "unknown error");
    return;
  }
  CudaDriver& d = out->driver;
  d.path = path;
  std::string missing;
#define COLL_CUDA_DRIVER_RESOLVE(name, symbol, params)                    \
  d.name = reinterpret_cast<decltype(d.name)>(dlsym(handle, symbol));     \
  if (d.name == nullptr) missing += std::string(missing.empty() ? "" : ", ") + symbol;
  COLL_CUDA_DRIVER_FUNCTIONS(COLL_CUDA_DRIVER_RESOLVE)
#undef COLL_CUDA_DRIVER_RESOLVE
#define COLL_CUDA_DRIVER_RESOLVE_OPTIONAL(name, symbol, params) \
  d.name = reinterpret_cast<decltype(d.name)>(dlsym(handle, symbol));
  COLL_CUDA_DRIVER_OPTIONAL_FUNCTIONS(COLL_CUDA_DRIVER_RESOLVE_OPTIONAL)
#undef COLL_CUDA_DRIVER_RESOLVE_OPTIONAL
  // The handle stays open for the process: the table points into it.
  if (!missing.empty()) {
    out->why = "the CUDA driver " + path + " lacks " + missing + " (a driver for CUDA 12 or newer is needed)";
    return;
  }
  CUresult r = d.cuInit(0);
  if (r != cu::kSuccess) {
    out->why = "the CUDA driver " + path + " did not initialize: " + cudaCheck(r, "cuInit").message();
    return;
  }
  if (d.cuDriverGetVersion(&d.version) != cu::kSuccess) d.version = 0;
  if (d.cuDeviceGetCount(&d.deviceCount) != cu::kSuccess) d.deviceCount = 0;
  out->ok = true;
}

Loaded& loaded() {
  static Loaded* state = [] {
    auto* s = new Loaded();  // never destroyed: stream threads may use the table at exit
    load(s);
    if (s->ok) {
      COLL_INFO(-1, "CUDA driver %s loaded: version %d, %d device(s)", s->driver.path.c_str(), s->driver.version,
                s->driver.deviceCount);
    } else {
      COLL_INFO(-1, "no CUDA: %s", s->why.c_str());
    }
    return s;
  }();
  return *state;
}

}  // namespace

bool CudaDriver::hasVirtualMemory() const {
  bool all = true;
#define COLL_CUDA_DRIVER_HAS(name, symbol, params) all = all && name != nullptr;
  COLL_CUDA_DRIVER_OPTIONAL_FUNCTIONS(COLL_CUDA_DRIVER_HAS)
#undef COLL_CUDA_DRIVER_HAS
  return all;
}

const CudaDriver* cudaDriver(std::string* why) {
  Loaded& l = loaded();
  if (!l.ok) {
    if (why) *why = l.why;
    return nullptr;
  }
  return &l.driver;
}

Status cudaCheck(CUresult result, const char* what) {
  if (result == cu::kSuccess) return okStatus();
  const char* name = nullptr;
  const char* text = nullptr;
  const Loaded& l = loaded();
  if (l.driver.cuGetErrorName) (void)l.driver.cuGetErrorName(result, &name);
  if (l.driver.cuGetErrorString) (void)l.driver.cuGetErrorString(result, &text);
  return makeError(collUnhandledCudaError, "%s failed: %s (%d): %s", what, name ? name : "CUDA error", result,
                   text ? text : "no description");
}

Status setCurrentDevice(const CudaDriver& cu, int ordinal) {
  static std::mutex mu;
  static std::vector<CUcontext>* contexts = new std::vector<CUcontext>();  // retained for the process
  if (ordinal < 0 || ordinal >= cu.deviceCount) {
    return makeError(collInvalidArgument, "CUDA device %d does not exist (%d device(s))", ordinal, cu.deviceCount);
  }
  CUcontext ctx = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (contexts->size() < static_cast<size_t>(cu.deviceCount)) contexts->resize(cu.deviceCount, nullptr);
    ctx = (*contexts)[ordinal];
    if (ctx == nullptr) {
      CUdevice dev = 0;
      COLL_CU_TRY(cu, cuDeviceGet, &dev, ordinal);
      COLL_CU_TRY(cu, cuDevicePrimaryCtxRetain, &ctx, dev);
      (*contexts)[ordinal] = ctx;
    }
  }
  CUcontext current = nullptr;
  if (cu.cuCtxGetCurrent(&current) == cu::kSuccess && current == ctx) return okStatus();
  COLL_CU_TRY(cu, cuCtxSetCurrent, ctx);
  return okStatus();
}

}  // namespace coll::gpu
