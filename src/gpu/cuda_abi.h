// The subset of the CUDA driver API (cuda.h) that libcollective calls, declared here so that the
// library compiles without the CUDA toolkit and loads the driver at run time (cuda_driver.h). Types,
// constants, struct layouts and signatures are the driver's ABI as cuda.h (CUDA 12/13) defines them,
// copied by hand from the toolkit's header (this file cannot include it: the names would clash).
// The exported symbol names (with their _v2 suffixes) are in COLL_CUDA_DRIVER_FUNCTIONS.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st* CUcontext;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUgraph_st* CUgraph;
typedef uint32_t cuuint32_t;

#define COLL_CU_IPC_HANDLE_SIZE 64
typedef struct {
  char reserved[COLL_CU_IPC_HANDLE_SIZE];
} CUipcMemHandle;

// Virtual memory management (cuMem*): physical allocations mapped into reserved address ranges,
// exportable as POSIX file descriptors.
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct {
  int type;  // CUmemLocationType
  int id;    // the device ordinal for kMemLocationTypeDevice
} CUmemLocation;
typedef struct {
  int type;                  // CUmemAllocationType
  int requestedHandleTypes;  // CUmemAllocationHandleType
  CUmemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
} CUmemAllocationProp;
typedef struct {
  CUmemLocation location;
  int flags;  // CUmemAccess_flags
} CUmemAccessDesc;

}  // extern "C"

namespace coll::cu {

// CUresult values we name (cuda.h's CUDA_ERROR_*).
enum : CUresult {
  kSuccess = 0,
  kErrorInvalidValue = 1,
  kErrorOutOfMemory = 2,
  kErrorNotInitialized = 3,
  kErrorDeinitialized = 4,
  kErrorNoDevice = 100,
  kErrorInvalidDevice = 101,
  kErrorInvalidImage = 200,
  kErrorInvalidContext = 201,
  kErrorMapFailed = 205,  // CUDA_ERROR_MAP_FAILED
  kErrorAlreadyMapped = 208,
  kErrorNoBinaryForGpu = 209,
  kErrorPeerAccessUnsupported = 217,
  kErrorInvalidHandle = 400,
  kErrorIllegalState = 401,  // CUDA_ERROR_ILLEGAL_STATE
  kErrorNotFound = 500,
  kErrorNotReady = 600,
  kErrorIllegalAddress = 700,
  kErrorHostMemoryAlreadyRegistered = 712,
  kErrorHostMemoryNotRegistered = 713,  // CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED
  kErrorLaunchFailed = 719,
  kErrorNotSupported = 801,
  kErrorStreamCaptureUnsupported = 900,
  kErrorStreamCaptureInvalidated = 901,
};

// CUpointer_attribute
enum : int {
  kPointerAttributeContext = 1,
  kPointerAttributeMemoryType = 2,
  kPointerAttributeDevicePointer = 3,
  kPointerAttributeBufferId = 7,
  kPointerAttributeIsManaged = 8,
  kPointerAttributeDeviceOrdinal = 9,
  kPointerAttributeRangeStartAddr = 11,
  kPointerAttributeRangeSize = 12,
};

// CUmemorytype
enum : unsigned int { kMemoryTypeHost = 1, kMemoryTypeDevice = 2, kMemoryTypeArray = 3, kMemoryTypeUnified = 4 };

// CUdevice_attribute
enum : int {
  kDeviceAttributeMultiprocessorCount = 16,
  kDeviceAttributePciBusId = 33,
  kDeviceAttributePciDeviceId = 34,
  kDeviceAttributeUnifiedAddressing = 41,
  kDeviceAttributePciDomainId = 50,
  kDeviceAttributeVirtualMemoryManagementSupported = 102,
  kDeviceAttributeHandleTypePosixFileDescriptorSupported = 103,
};

// CUstreamCaptureStatus
enum : int { kCaptureStatusNone = 0, kCaptureStatusActive = 1, kCaptureStatusInvalidated = 2 };
// CUstreamCaptureMode
enum : int { kCaptureModeGlobal = 0, kCaptureModeThreadLocal = 1, kCaptureModeRelaxed = 2 };

// Flags.
constexpr unsigned int kStreamNonBlocking = 0x1;         // CU_STREAM_NON_BLOCKING
constexpr unsigned int kEventDisableTiming = 0x2;        // CU_EVENT_DISABLE_TIMING
constexpr unsigned int kStreamWaitValueGeq = 0x0;        // CU_STREAM_WAIT_VALUE_GEQ
constexpr unsigned int kStreamWaitValueEq = 0x1;         // CU_STREAM_WAIT_VALUE_EQ
constexpr unsigned int kStreamWriteValueDefault = 0x0;   // CU_STREAM_WRITE_VALUE_DEFAULT
constexpr unsigned int kMemHostAllocPortable = 0x01;     // CU_MEMHOSTALLOC_PORTABLE
constexpr unsigned int kMemHostAllocDeviceMap = 0x02;    // CU_MEMHOSTALLOC_DEVICEMAP
constexpr unsigned int kMemHostRegisterPortable = 0x01;  // CU_MEMHOSTREGISTER_PORTABLE
constexpr unsigned int kMemHostRegisterDeviceMap = 0x02; // CU_MEMHOSTREGISTER_DEVICEMAP
constexpr unsigned int kIpcMemLazyEnablePeerAccess = 0x1;  // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
// CUmemAllocationType, CUmemLocationType, CUmemAllocationHandleType, CUmemAccess_flags,
// CUmemAllocationGranularity_flags.
constexpr int kMemAllocationTypePinned = 0x1;           // CU_MEM_ALLOCATION_TYPE_PINNED
constexpr int kMemLocationTypeDevice = 0x1;             // CU_MEM_LOCATION_TYPE_DEVICE
constexpr int kMemHandleTypeNone = 0x0;                 // CU_MEM_HANDLE_TYPE_NONE
constexpr int kMemHandleTypePosixFileDescriptor = 0x1;  // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
constexpr int kMemAccessFlagsProtReadWrite = 0x3;       // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
constexpr int kMemAllocGranularityMinimum = 0x0;        // CU_MEM_ALLOC_GRANULARITY_MINIMUM

// The special stream handles (CU_STREAM_LEGACY, CU_STREAM_PER_THREAD); 0 is the legacy stream too.
inline CUstream legacyStream() { return reinterpret_cast<CUstream>(uintptr_t{1}); }
inline CUstream perThreadStream() { return reinterpret_cast<CUstream>(uintptr_t{2}); }

}  // namespace coll::cu

// X(return-less name used in code, exported symbol, parameter list). One line per driver function
// the library loads; cuda_driver.h turns it into a table of function pointers, the test double
// (tests/cuda_double) implements exactly these symbols.
#define COLL_CUDA_DRIVER_FUNCTIONS(X)                                                                         \
  X(cuInit, "cuInit", (unsigned int flags))                                                                   \
  X(cuDriverGetVersion, "cuDriverGetVersion", (int* version))                                                 \
  X(cuGetErrorString, "cuGetErrorString", (CUresult error, const char** str))                                 \
  X(cuGetErrorName, "cuGetErrorName", (CUresult error, const char** str))                                     \
  X(cuDeviceGetCount, "cuDeviceGetCount", (int* count))                                                       \
  X(cuDeviceGet, "cuDeviceGet", (CUdevice * device, int ordinal))                                             \
  X(cuDeviceGetAttribute, "cuDeviceGetAttribute", (int* pi, int attrib, CUdevice dev))                        \
  X(cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId", (char* pciBusId, int len, CUdevice dev))                      \
  X(cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer", (int* canAccessPeer, CUdevice dev, CUdevice peerDev))     \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", (CUcontext * pctx, CUdevice dev))                   \
  X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", (CUdevice dev))                                \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", (CUcontext ctx))                                                      \
  X(cuCtxGetCurrent, "cuCtxGetCurrent", (CUcontext * pctx))                                                   \
  X(cuCtxGetDevice, "cuCtxGetDevice", (CUdevice * device))                                                    \
  X(cuCtxPushCurrent, "cuCtxPushCurrent_v2", (CUcontext ctx))                                                 \
  X(cuCtxPopCurrent, "cuCtxPopCurrent_v2", (CUcontext * pctx))                                                \
  X(cuPointerGetAttributes, "cuPointerGetAttributes",                                                         \
    (unsigned int numAttributes, int* attributes, void** data, CUdeviceptr ptr))                              \
  X(cuMemGetAddressRange, "cuMemGetAddressRange_v2", (CUdeviceptr * pbase, size_t * psize, CUdeviceptr dptr)) \
  X(cuMemAlloc, "cuMemAlloc_v2", (CUdeviceptr * dptr, size_t bytesize))                                       \
  X(cuMemFree, "cuMemFree_v2", (CUdeviceptr dptr))                                                            \
  X(cuMemHostAlloc, "cuMemHostAlloc", (void** pp, size_t bytesize, unsigned int flags))                       \
  X(cuMemFreeHost, "cuMemFreeHost", (void* p))                                                                \
  X(cuMemHostRegister, "cuMemHostRegister_v2", (void* p, size_t bytesize, unsigned int flags))                \
  X(cuMemHostUnregister, "cuMemHostUnregister", (void* p))                                                    \
  X(cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2", (CUdeviceptr * pdptr, void* p, unsigned int flags)) \
  X(cuMemcpyAsync, "cuMemcpyAsync", (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream))        \
  X(cuMemsetD8Async, "cuMemsetD8Async", (CUdeviceptr dst, unsigned char uc, size_t n, CUstream stream))       \
  X(cuStreamCreate, "cuStreamCreate", (CUstream * phStream, unsigned int flags))                              \
  X(cuStreamDestroy, "cuStreamDestroy_v2", (CUstream hStream))                                                \
  X(cuStreamSynchronize, "cuStreamSynchronize", (CUstream hStream))                                           \
  X(cuStreamQuery, "cuStreamQuery", (CUstream hStream))                                                       \
  X(cuStreamWaitEvent, "cuStreamWaitEvent", (CUstream hStream, CUevent hEvent, unsigned int flags))           \
  X(cuStreamWaitValue32, "cuStreamWaitValue32_v2",                                                            \
    (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags))                                \
  X(cuStreamWriteValue32, "cuStreamWriteValue32_v2",                                                          \
    (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags))                                \
  X(cuStreamIsCapturing, "cuStreamIsCapturing", (CUstream hStream, int* captureStatus))                       \
  X(cuStreamGetCtx, "cuStreamGetCtx", (CUstream hStream, CUcontext * pctx))                                   \
  X(cuEventCreate, "cuEventCreate", (CUevent * phEvent, unsigned int flags))                                  \
  X(cuEventRecord, "cuEventRecord", (CUevent hEvent, CUstream hStream))                                       \
  X(cuEventQuery, "cuEventQuery", (CUevent hEvent))                                                           \
  X(cuEventSynchronize, "cuEventSynchronize", (CUevent hEvent))                                               \
  X(cuEventDestroy, "cuEventDestroy_v2", (CUevent hEvent))                                                    \
  X(cuIpcGetMemHandle, "cuIpcGetMemHandle", (CUipcMemHandle * pHandle, CUdeviceptr dptr))                     \
  X(cuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2", (CUdeviceptr * pdptr, CUipcMemHandle handle, unsigned int flags)) \
  X(cuIpcCloseMemHandle, "cuIpcCloseMemHandle", (CUdeviceptr dptr))                                           \
  X(cuModuleLoadData, "cuModuleLoadData", (CUmodule * module, const void* image))                             \
  X(cuModuleUnload, "cuModuleUnload", (CUmodule hmod))                                                        \
  X(cuModuleGetFunction, "cuModuleGetFunction", (CUfunction * hfunc, CUmodule hmod, const char* name))        \
  X(cuLaunchKernel, "cuLaunchKernel",                                                                         \
    (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX, \
     unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,           \
     void** kernelParams, void** extra))

// Functions the library uses when the driver has them (a null pointer when it does not): the
// virtual memory management calls behind CUDA IPC with POSIX file descriptors.
#define COLL_CUDA_DRIVER_OPTIONAL_FUNCTIONS(X)                                                                       \
  X(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity",                                                  \
    (size_t * granularity, const CUmemAllocationProp* prop, int option))                                             \
  X(cuMemCreate, "cuMemCreate",                                                                                      \
    (CUmemGenericAllocationHandle * handle, size_t size, const CUmemAllocationProp* prop, unsigned long long flags)) \
  X(cuMemRelease, "cuMemRelease", (CUmemGenericAllocationHandle handle))                                             \
  X(cuMemAddressReserve, "cuMemAddressReserve",                                                                      \
    (CUdeviceptr * ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags))                  \
  X(cuMemAddressFree, "cuMemAddressFree", (CUdeviceptr ptr, size_t size))                                            \
  X(cuMemMap, "cuMemMap",                                                                                            \
    (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags))    \
  X(cuMemUnmap, "cuMemUnmap", (CUdeviceptr ptr, size_t size))                                                        \
  X(cuMemSetAccess, "cuMemSetAccess", (CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count))     \
  X(cuMemExportToShareableHandle, "cuMemExportToShareableHandle",                                                    \
    (void* shareableHandle, CUmemGenericAllocationHandle handle, int handleType, unsigned long long flags))          \
  X(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle",                                                \
    (CUmemGenericAllocationHandle * handle, void* osHandle, int shHandleType))
