// Where a buffer lives, asked of the CUDA driver: the first thing every call decides, since it
// picks the path (host or device) and catches buffers that cannot go together.
#pragma once

#include <cstdint>

#include "src/base/status.h"
#include "src/gpu/cuda_driver.h"

namespace coll::gpu {

enum class MemKind {
  Host,        // ordinary host memory (or memory CUDA does not know: a freed device pointer reads so)
  HostPinned,  // page-locked host memory CUDA knows (cuMemHostAlloc, cuMemHostRegister)
  Device,      // device memory (cuMemAlloc, cudaMalloc, IPC-opened)
  Managed,     // managed (unified) memory
};
const char* memKindName(MemKind kind);

struct MemInfo {
  MemKind kind = MemKind::Host;
  int device = -1;            // ordinal for device, managed and pinned memory (-1: none)
  CUcontext context = nullptr;
  uintptr_t rangeStart = 0;   // the allocation holding the pointer (device and managed memory)
  size_t rangeSize = 0;
};

// Classifies `ptr`. Without a CUDA driver (cu == nullptr) every pointer is host memory: no device
// memory can exist in the process.
Status classifyPointer(const CudaDriver* cu, const void* ptr, MemInfo* out);

inline bool onDevice(MemKind kind) { return kind == MemKind::Device || kind == MemKind::Managed; }

}  // namespace coll::gpu
