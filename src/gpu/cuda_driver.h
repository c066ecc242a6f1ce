// The CUDA driver, loaded at run time: one libcollective.so runs on machines with and without
// CUDA. COLL_CUDA_DRIVER names the library to load (default libcuda.so.1); tests point it at the
// CUDA test double (tests/cuda_double). Nothing here includes a CUDA header (cuda_abi.h).
#pragma once

#include <string>

#include "src/base/status.h"
#include "src/gpu/cuda_abi.h"

namespace coll::gpu {

// One function pointer per driver function the library uses (cuda_abi.h's list).
struct CudaDriver {
#define COLL_CUDA_DRIVER_MEMBER(name, symbol, params) CUresult(*name) params = nullptr;
  COLL_CUDA_DRIVER_FUNCTIONS(COLL_CUDA_DRIVER_MEMBER)
  COLL_CUDA_DRIVER_OPTIONAL_FUNCTIONS(COLL_CUDA_DRIVER_MEMBER)
#undef COLL_CUDA_DRIVER_MEMBER
  int version = 0;      // cuDriverGetVersion
  int deviceCount = 0;  // cuDeviceGetCount (0 is a loaded driver without devices)
  std::string path;     // the library loaded
  // Whether every optional function (virtual memory management) was found.
  bool hasVirtualMemory() const;
};

// The driver, loaded and initialized (cuInit) on first use; nullptr when it cannot be (no
// library, a missing symbol, cuInit failing), with the reason in *why when given. Thread-safe; the
// answer does not change during the process.
const CudaDriver* cudaDriver(std::string* why = nullptr);

// collUnhandledCudaError naming the call and the driver's error name and text; ok for kSuccess.
Status cudaCheck(CUresult result, const char* what);
#define COLL_CU_TRY(driver, call, ...) COLL_TRY(::coll::gpu::cudaCheck((driver).call(__VA_ARGS__), #call))

// Makes device `ordinal`'s primary context current on this thread (retained once per process).
Status setCurrentDevice(const CudaDriver& cu, int ordinal);

}  // namespace coll::gpu
