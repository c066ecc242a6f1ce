#include "src/gpu/memory.h"

namespace coll::gpu {

const char* memKindName(MemKind kind) {
  switch (kind) {
    case MemKind::Host: return "host memory";
    case MemKind::HostPinned: return "pinned host memory";
    case MemKind::Device: return "device memory";
    case MemKind::Managed: return "managed memory";
  }
  return "?";
}

Status classifyPointer(const CudaDriver* cu, const void* ptr, MemInfo* out) {
  *out = MemInfo{};
  if (cu == nullptr || ptr == nullptr) return okStatus();
  unsigned int memType = 0;
  unsigned int managed = 0;
  int ordinal = -1;
  CUcontext ctx = nullptr;
  int attributes[] = {cu::kPointerAttributeMemoryType, cu::kPointerAttributeIsManaged,
                      cu::kPointerAttributeDeviceOrdinal, cu::kPointerAttributeContext};
  void* data[] = {&memType, &managed, &ordinal, &ctx};
  const CUresult r =
      cu->cuPointerGetAttributes(4, attributes, data, static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(ptr)));
  // Memory the driver does not know reads as success with memory type 0 (or, on some versions,
  // CUDA_ERROR_INVALID_VALUE): ordinary host memory either way.
  if (r == cu::kErrorInvalidValue || (r == cu::kSuccess && memType == 0)) return okStatus();
  COLL_TRY(cudaCheck(r, "cuPointerGetAttributes"));
  out->device = ordinal;
  out->context = ctx;
  if (managed != 0) {
    out->kind = MemKind::Managed;
  } else if (memType == cu::kMemoryTypeDevice) {
    out->kind = MemKind::Device;
  } else if (memType == cu::kMemoryTypeHost) {
    out->kind = MemKind::HostPinned;
    return okStatus();
  } else {
    return makeError(collInvalidArgument, "pointer %p is CUDA memory of type %u (arrays are not buffers)", ptr,
                     memType);
  }
  CUdeviceptr base = 0;
  size_t size = 0;
  if (cu->cuMemGetAddressRange(&base, &size, static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(ptr))) ==
      cu::kSuccess) {
    out->rangeStart = static_cast<uintptr_t>(base);
    out->rangeSize = size;
  }
  return okStatus();
}

}  // namespace coll::gpu
