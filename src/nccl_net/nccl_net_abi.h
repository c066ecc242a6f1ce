// NCCL's external network plugin ABI (ncclNet v8, v9, v10, v11) as NCCL's loader sees it: our own
// declarations of the same memory layout, checked at compile time against the offsets NCCL defines.
#ifndef COLL_NCCL_NET_NCCL_NET_ABI_H_
#define COLL_NCCL_NET_NCCL_NET_ABI_H_

// Plain C on purpose: the conformance driver and anyone writing a loader can include it from C.
// The names are NCCL's because they are the contract (dlsym looks up ncclNetPlugin_vN); the
// layouts come from NVIDIA/nccl src/include/plugin/nccl_net.h, src/include/plugin/net/net_v8.h ..
// net_v11.h, src/include/nccl_common.h, src/include/nccl_device/net_device.h and src/nccl.h.in.

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// ---- common types (nccl.h.in, nccl_common.h) ---------------------------------------------------
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,    // network or OS failure
  ncclInternalError = 3,  // the caller (NCCL) broke the plugin contract
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,  // bad configuration
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclTimeout = 8,
  ncclNumResults = 9
} ncclResult_t;

typedef enum {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5
} ncclDebugLogLevel;

// Subsystem flags passed with each log line; the plugin logs under NCCL_NET (and NCCL_INIT).
#define NCCL_INIT 0x1
#define NCCL_NET 0x10
#define NCCL_ALL (~0)

typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                                  const char* fmt, ...);

// v10+: NCCL's profiler hook (NULL when NCCL has no profiler). `type` is one of the values below
// (nccl_common.h); pHandle is the handle NCCL gave isend/irecv, extData the plugin's descriptor.
typedef ncclResult_t (*ncclProfilerCallback_t)(void** eHandle, int type, void* pHandle, int64_t pluginId,
                                               void* extData);
enum {
  ncclProfilerNetEventStart = 0,
  ncclProfilerNetEventStop,
  ncclProfilerNetEventUpdate,
  ncclProfilerNetEventUpdateAndStop,
};

// ---- constants (plugin/nccl_net.h) --------------------------------------------------------------
#define NCCL_NET_HANDLE_MAXSIZE 128
#define NCCL_PTR_HOST 0x1
#define NCCL_PTR_CUDA 0x2
#define NCCL_PTR_DMABUF 0x4
#define NCCL_NET_MAX_REQUESTS 32               // requests in flight per comm that NCCL will post
#define NCCL_NET_MAX_DEVS_PER_NIC 4            // vProps.devs[] length for v9, v10, v11
#define NCCL_MAX_NET_SIZE_BYTES (1LL << 40)    // upper bound NCCL accepts for maxP2pBytes/maxCollBytes
#define NCCL_NET_MAX_SIZE_DEFAULT (1LL << 30)  // what NCCL assumes before v9 (MAX_NET_SIZE)
#define NCCL_NET_OPTIONAL_RECV_COMPLETION 0x1
#define NCCL_NET_MULTI_REQUEST 0x2
#define NCCL_NET_TRAFFIC_CLASS_UNDEF (-1)
#define NCCL_NET_ATTR_UNDEF (-1)

// ---- device offload handle (nccl_device/net_device.h) -------------------------------------------
typedef enum {
  NCCL_NET_DEVICE_HOST = 0,  // no offload: what this plugin reports
  NCCL_NET_DEVICE_UNPACK = 1
} ncclNetDeviceType;
#define NCCL_NET_DEVICE_INVALID_VERSION 0x0

typedef struct {
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  void* handle;
  size_t size;
  int needsProxyProgress;
} ncclNetDeviceHandle_v7_t;
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v8_t;
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v9_t;
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v10_t;
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v11_t;

// ---- v8 (plugin/net/net_v8.h; NCCL 2.19 - 2.22) -------------------------------------------------
typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;   // NCCL_PTR_* bits
  int regIsGlobal;  // a registration is usable on every comm of the process
  int speed;        // Mbps
  int port;
  float latency;  // microseconds
  int maxComms;
  int maxRecvs;  // receives one irecv may group
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
} ncclNetProperties_v8_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v8_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v8_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v8_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
} ncclNet_v8_t;

// ---- v9 (plugin/net/net_v9.h; NCCL 2.23 - 2.25): size_t sizes, forceFlush, vNICs, max bytes -----
typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC];
} ncclNetVDeviceProps_v9_t;

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;  // NCCL must flush every receive
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v9_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
} ncclNetProperties_v9_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v9_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v9_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v9_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v9_t* props);
} ncclNet_v9_t;

// ---- v10 (plugin/net/net_v10.h; NCCL 2.26 - 2.27): profiler hook, per-connect traffic class ------
typedef ncclNetVDeviceProps_v9_t ncclNetVDeviceProps_v10_t;
typedef struct {
  int trafficClass;  // NCCL_NET_TRAFFIC_CLASS_UNDEF when NCCL has no preference
} ncclNetCommConfig_v10_t;
typedef ncclNetProperties_v9_t ncclNetProperties_v10_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v10_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v10_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v10_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
                        void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v10_t* props);
} ncclNet_v10_t;

// ---- v11 (plugin/net/net_v11.h; NCCL 2.28+): per-communicator context, finalize, setNetAttr ------
typedef ncclNetVDeviceProps_v9_t ncclNetVDeviceProps_v11_t;
typedef ncclNetCommConfig_v10_t ncclNetCommConfig_v11_t;

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v11_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;  // 1 = no multi-request support
} ncclNetProperties_v11_t;

typedef struct {
  int32_t maxConcurrentPeers;
  int32_t minConcurrentPeers;
  int32_t maxFlowsPerPeer;
  int32_t minFlowsPerPeer;
} ncclNetCommAttr_v11_t;

typedef struct {
  ncclNetCommAttr_v11_t sendCommAttr;
  ncclNetCommAttr_v11_t recvCommAttr;
  uint32_t op;
  uint32_t algo;
  uint32_t proto;
} ncclNetAttr_v11_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, ncclNetCommConfig_v11_t* config, ncclDebugLogger_t logFunction,
                       ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v11_t* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* ctx, int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v11_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v11_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
                        void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v11_t* props);
  ncclResult_t (*finalize)(void* ctx);
  ncclResult_t (*setNetAttr)(void* ctx, ncclNetAttr_v11_t* netAttr);
} ncclNet_v11_t;

// The symbols NCCL's loader looks up with dlsym (NVIDIA/nccl src/plugin/net.cc), newest first.
#define COLL_NCCL_NET_SYMBOL_V8 "ncclNetPlugin_v8"
#define COLL_NCCL_NET_SYMBOL_V9 "ncclNetPlugin_v9"
#define COLL_NCCL_NET_SYMBOL_V10 "ncclNetPlugin_v10"
#define COLL_NCCL_NET_SYMBOL_V11 "ncclNetPlugin_v11"

#ifdef __cplusplus
}  // extern "C"
#endif

// ---- layout checks (x86-64 / aarch64 LP64) ------------------------------------------------------
// Each offset below is what NCCL's compiler computes for the struct in the cited header; a mismatch
// here means NCCL would read the wrong field, so it fails the build instead.
#if defined(__cplusplus) && defined(__LP64__)
#define COLL_ABI_AT(T, f, off) static_assert(offsetof(T, f) == (off), #T "." #f " offset differs from NCCL")
#define COLL_ABI_SIZE(T, sz) static_assert(sizeof(T) == (sz), "sizeof(" #T ") differs from NCCL")
#define COLL_ABI_FN(T, f, index) COLL_ABI_AT(T, f, 8 * (index))

static_assert(sizeof(ncclResult_t) == 4 && sizeof(ncclNetDeviceType) == 4, "C enums are ints in NCCL's ABI");
// nccl_device/net_device.h: ncclNetDeviceHandle_v7_t (aliased by v8..v11).
COLL_ABI_AT(ncclNetDeviceHandle_v8_t, netDeviceVersion, 4);
COLL_ABI_AT(ncclNetDeviceHandle_v8_t, handle, 8);
COLL_ABI_AT(ncclNetDeviceHandle_v8_t, size, 16);
COLL_ABI_AT(ncclNetDeviceHandle_v8_t, needsProxyProgress, 24);
COLL_ABI_SIZE(ncclNetDeviceHandle_v8_t, 32);

// plugin/net/net_v8.h: ncclNetProperties_v8_t.
COLL_ABI_AT(ncclNetProperties_v8_t, pciPath, 8);
COLL_ABI_AT(ncclNetProperties_v8_t, guid, 16);
COLL_ABI_AT(ncclNetProperties_v8_t, ptrSupport, 24);
COLL_ABI_AT(ncclNetProperties_v8_t, regIsGlobal, 28);
COLL_ABI_AT(ncclNetProperties_v8_t, speed, 32);
COLL_ABI_AT(ncclNetProperties_v8_t, port, 36);
COLL_ABI_AT(ncclNetProperties_v8_t, latency, 40);
COLL_ABI_AT(ncclNetProperties_v8_t, maxComms, 44);
COLL_ABI_AT(ncclNetProperties_v8_t, maxRecvs, 48);
COLL_ABI_AT(ncclNetProperties_v8_t, netDeviceType, 52);
COLL_ABI_AT(ncclNetProperties_v8_t, netDeviceVersion, 56);
COLL_ABI_SIZE(ncclNetProperties_v8_t, 64);
// plugin/net/net_v8.h: ncclNet_v8_t, name then 18 function pointers.
COLL_ABI_FN(ncclNet_v8_t, init, 1);
COLL_ABI_FN(ncclNet_v8_t, listen, 4);
COLL_ABI_FN(ncclNet_v8_t, connect, 5);
COLL_ABI_FN(ncclNet_v8_t, accept, 6);
COLL_ABI_FN(ncclNet_v8_t, regMr, 7);
COLL_ABI_FN(ncclNet_v8_t, isend, 10);
COLL_ABI_FN(ncclNet_v8_t, irecv, 11);
COLL_ABI_FN(ncclNet_v8_t, iflush, 12);
COLL_ABI_FN(ncclNet_v8_t, test, 13);
COLL_ABI_FN(ncclNet_v8_t, closeListen, 16);
COLL_ABI_FN(ncclNet_v8_t, getDeviceMr, 17);
COLL_ABI_FN(ncclNet_v8_t, irecvConsumed, 18);
COLL_ABI_SIZE(ncclNet_v8_t, 152);

// plugin/net/net_v9.h: ncclNetVDeviceProps_v9_t and ncclNetProperties_v9_t (forceFlush inserted at 32).
COLL_ABI_SIZE(ncclNetVDeviceProps_v9_t, 20);
COLL_ABI_AT(ncclNetProperties_v9_t, ptrSupport, 24);
COLL_ABI_AT(ncclNetProperties_v9_t, regIsGlobal, 28);
COLL_ABI_AT(ncclNetProperties_v9_t, forceFlush, 32);
COLL_ABI_AT(ncclNetProperties_v9_t, speed, 36);
COLL_ABI_AT(ncclNetProperties_v9_t, port, 40);
COLL_ABI_AT(ncclNetProperties_v9_t, latency, 44);
COLL_ABI_AT(ncclNetProperties_v9_t, maxComms, 48);
COLL_ABI_AT(ncclNetProperties_v9_t, maxRecvs, 52);
COLL_ABI_AT(ncclNetProperties_v9_t, netDeviceType, 56);
COLL_ABI_AT(ncclNetProperties_v9_t, netDeviceVersion, 60);
COLL_ABI_AT(ncclNetProperties_v9_t, vProps, 64);
COLL_ABI_AT(ncclNetProperties_v9_t, maxP2pBytes, 88);
COLL_ABI_AT(ncclNetProperties_v9_t, maxCollBytes, 96);
COLL_ABI_SIZE(ncclNetProperties_v9_t, 104);
// plugin/net/net_v9.h: ncclNet_v9_t = v8's table + makeVDevice.
COLL_ABI_FN(ncclNet_v9_t, isend, 10);
COLL_ABI_FN(ncclNet_v9_t, irecv, 11);
COLL_ABI_FN(ncclNet_v9_t, irecvConsumed, 18);
COLL_ABI_FN(ncclNet_v9_t, makeVDevice, 19);
COLL_ABI_SIZE(ncclNet_v9_t, 160);

// plugin/net/net_v10.h: properties identical to v9; ncclNetCommConfig_v10_t is one int.
COLL_ABI_SIZE(ncclNetProperties_v10_t, 104);
COLL_ABI_SIZE(ncclNetCommConfig_v10_t, 4);
COLL_ABI_FN(ncclNet_v10_t, connect, 5);
COLL_ABI_FN(ncclNet_v10_t, isend, 10);
COLL_ABI_FN(ncclNet_v10_t, irecv, 11);
COLL_ABI_FN(ncclNet_v10_t, makeVDevice, 19);
COLL_ABI_SIZE(ncclNet_v10_t, 160);

// plugin/net/net_v11.h: properties gain maxMultiRequestSize; the table gains finalize, setNetAttr.
COLL_ABI_AT(ncclNetProperties_v11_t, vProps, 64);
COLL_ABI_AT(ncclNetProperties_v11_t, maxP2pBytes, 88);
COLL_ABI_AT(ncclNetProperties_v11_t, maxCollBytes, 96);
COLL_ABI_AT(ncclNetProperties_v11_t, maxMultiRequestSize, 104);
COLL_ABI_SIZE(ncclNetProperties_v11_t, 112);
COLL_ABI_AT(ncclNetAttr_v11_t, recvCommAttr, 16);
COLL_ABI_AT(ncclNetAttr_v11_t, op, 32);
COLL_ABI_AT(ncclNetAttr_v11_t, proto, 40);
COLL_ABI_SIZE(ncclNetAttr_v11_t, 44);
COLL_ABI_FN(ncclNet_v11_t, listen, 4);
COLL_ABI_FN(ncclNet_v11_t, connect, 5);
COLL_ABI_FN(ncclNet_v11_t, makeVDevice, 19);
COLL_ABI_FN(ncclNet_v11_t, finalize, 20);
COLL_ABI_FN(ncclNet_v11_t, setNetAttr, 21);
COLL_ABI_SIZE(ncclNet_v11_t, 176);

#undef COLL_ABI_FN
#undef COLL_ABI_SIZE
#undef COLL_ABI_AT
#endif  // __cplusplus && __LP64__

#endif  // COLL_NCCL_NET_NCCL_NET_ABI_H_
