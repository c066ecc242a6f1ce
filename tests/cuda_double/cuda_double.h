// CUDA driver test double: the control API for tests. The double (libcoll_cuda_double.so) is a
// stand-in for libcuda.so.1 that implements the driver functions of src/gpu/cuda_abi.h on the host:
// it is not a GPU. Device memory is host memory the CPU cannot touch at the device address (a
// PROT_NONE reservation), streams are host threads, kernels are the host builds of the device kernels
// (host_kernels.h). Load it as the library does: COLL_CUDA_DRIVER=<path of libcoll_cuda_double.so>.
//
// These functions exist only in the double (C linkage, prefix collCudaDouble); a test reaches them
// with dlsym on the handle it opened the double with. See README.md for what is modelled.
#pragma once

#include <stddef.h>

#include "src/gpu/cuda_abi.h"

extern "C" {

// 1: the library loaded is the double (a real driver has no such symbol).
int collCudaDoubleIsDouble(void);

// Enqueues a "slow kernel" on `stream`: the stream's worker sleeps `microseconds`, holding back
// every later operation of the stream (and of streams waiting on it). Returns a CUresult, as a
// launch would (the same handle rules: 0 and CU_STREAM_LEGACY are the legacy stream).
CUresult collCudaDoubleLaunchSleep(CUstream stream, int microseconds);

// The next `count` calls of driver function `function` fail with `result` without doing anything.
// `function` is the name used in code or the exported one ("cuMemAlloc" or "cuMemAlloc_v2").
// count 0 clears that function's injection. Returns CUDA_ERROR_INVALID_VALUE for a function the
// double does not export.
CUresult collCudaDoubleInjectError(const char* function, int count, CUresult result);
// Clears every pending injection.
void collCudaDoubleClearInjectedErrors(void);

// Device memory of this process: bytes (as asked, summed) and allocations live from cuMemAlloc, and
// VMM allocations from cuMemCreate or cuMemImportFromShareableHandle, each live until it has been
// released (cuMemRelease) and is no longer mapped (cuMemUnmap), as CUDA frees it then. IPC mappings
// opened with cuIpcOpenMemHandle are not included. At the end of a test, both 0 means nothing leaked.
size_t collCudaDoubleDeviceBytesAllocated(void);
int collCudaDoubleDeviceAllocations(void);
// Pinned host memory live from cuMemHostAlloc (bytes as asked) and ranges live from cuMemHostRegister.
size_t collCudaDoubleHostBytesAllocated(void);
int collCudaDoubleHostRegistrations(void);
// cuMemAlloc and cuMemCreate fail with CUDA_ERROR_OUT_OF_MEMORY past this many live bytes per device (default
// 16 GiB; the bytes themselves are only used when written).
void collCudaDoubleSetDeviceMemoryLimit(size_t bytes);

// The host address the double reads and writes for device address `dptr` (its shadow mapping),
// nullptr when `dptr` is not inside live device memory. For tests that inspect device memory
// without a copy; the library under test must never see this.
void* collCudaDoubleShadow(CUdeviceptr dptr);

// Clears the sticky error (CUDA_ERROR_ILLEGAL_ADDRESS after a failed operation) of every context, as
// a process restart would: lets one test process check a fault and go on.
void collCudaDoubleClearStickyErrors(void);

}  // extern "C"
