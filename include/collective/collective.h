/* libcollective public C API: NCCL-shaped communicators and collectives.
 * Compiles as C99 and as C++ and never includes CUDA headers. */
#ifndef COLLECTIVE_COLLECTIVE_H_
#define COLLECTIVE_COLLECTIVE_H_

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define COLL_API __attribute__((visibility("default")))
#else
#define COLL_API
#endif

/* In C++ the enums below are int-based, as they are in C: a C caller may pass any int, and the
 * library must be able to read it to reject it (an out-of-range plain C++ enum is undefined). */
#ifdef __cplusplus
#define COLL_ENUM_INT : int
#else
#define COLL_ENUM_INT
#endif

#define COLL_MAJOR 0
#define COLL_MINOR 1
#define COLL_PATCH 0
#define COLL_VERSION(X, Y, Z) ((X)*10000 + (Y)*100 + (Z))
#define COLL_VERSION_CODE COLL_VERSION(COLL_MAJOR, COLL_MINOR, COLL_PATCH)

/* Opaque communicator handle. Handles are validated on every call: a destroyed communicator
 * gives collInvalidArgument, never a use of freed memory. */
typedef struct collComm* collComm_t;
#define COLL_COMM_NULL NULL

#define COLL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[COLL_UNIQUE_ID_BYTES];
} collUniqueId;

/* Result codes: 0..7 are numbered as ncclResult_t; collTimeout is ours. */
typedef enum COLL_ENUM_INT {
  collSuccess = 0,
  collUnhandledCudaError = 1,
  collSystemError = 2,
  collInternalError = 3,
  collInvalidArgument = 4,
  collInvalidUsage = 5,
  collRemoteError = 6,
  collInProgress = 7,
  collTimeout = 8,
  collNumResults = 9
} collResult_t;

/* Data types, numbered as ncclDataType_t (float8 slots 10 and 11 are reserved). */
typedef enum COLL_ENUM_INT {
  collInt8 = 0,
  collChar = 0,
  collUint8 = 1,
  collInt32 = 2,
  collInt = 2,
  collUint32 = 3,
  collInt64 = 4,
  collUint64 = 5,
  collFloat16 = 6,
  collHalf = 6,
  collFloat32 = 7,
  collFloat = 7,
  collFloat64 = 8,
  collDouble = 8,
  collBfloat16 = 9,
  collFloat8e4m3 = 10, /* OCP FP8 E4M3 (reduced in float32, rounded once, saturating) */
  collFloat8e5m2 = 11, /* OCP FP8 E5M2 */
  collNumTypes = 12
} collDataType_t;

/* Reduction operations, numbered as ncclRedOp_t. */
typedef enum COLL_ENUM_INT {
  collSum = 0,
  collProd = 1,
  collMax = 2,
  collMin = 3,
  collAvg = 4,
  collNumOps = 5,
  collMaxRedOp = 0x7fffffff
} collRedOp_t;

/* One stream parameter for both worlds; the buffers decide what it is.
 *  - Host buffers: NULL runs the call now and returns when the result is in the receive buffer;
 *    otherwise a host stream made by collHostStreamCreate: the call is queued and returns at once,
 *    and the buffers belong to the library until the stream is synchronized.
 *  - Device buffers (cudaMalloc, collMemAlloc, managed memory; pinned host memory may join them):
 *    a cudaStream_t exactly as NCCL takes it (NULL = CUDA's legacy default stream;
 *    cudaStreamPerThread works too). The call is queued on the stream and returns at once; the
 *    result is ready when the stream reaches that point, and later work on the stream waits for
 *    it. Errors found later are reported by collCommGetAsyncError. Calls inside CUDA graph capture
 *    are refused (collInvalidUsage). CUDA is loaded at run time (COLL_CUDA_DRIVER): without it,
 *    a stream that is not a host stream is an error.
 *  Any object pointer converts to void*, so callers pass cudaStream_t as is. */
typedef void* collStream_t;

#define COLL_CONFIG_UNDEF_INT INT_MIN
#define COLL_CONFIG_UNDEF_PTR NULL
#define COLL_CONFIG_MAGIC 0xc011c0f1u

/* Communicator configuration. size/magic/version let it grow without breaking the ABI: always
 * start from COLL_CONFIG_INITIALIZER and set the fields you need. */
typedef struct collConfig_v1 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;         /* 1 (default): init blocks. 0 (collCommInitRankConfig, collCommInitFromEnv):
                           init returns collInProgress at once with *comm set; poll
                           collCommGetAsyncError until it gives collSuccess (or the init's error);
                           other calls on the communicator return collInProgress until then. */
  int timeoutMs;        /* deadline for every wait; UNDEF = COLL_TIMEOUT */
  const char* netName;  /* inter-host transport ("tcp"); UNDEF = automatic */
  const char* commName; /* shown in logs */
  int trafficClass;     /* 0..255, NCCL's ncclConfig_t.trafficClass: the network priority of this
                           communicator's traffic (between jobs, or a job's DP/TP/PP groups). ib: the
                           GRH traffic class (RoCE; COLL_IB_SL stays the service level). tcp: IP_TOS
                           (IPv6: IPV6_TCLASS; the kernel keeps the two ECN bits) and SO_PRIORITY
                           trafficClass >> 5 on the data sockets. ucx: not applied (its tcp and sm
                           transports have no class; see docs/ARCHITECTURE.md). Split, shrink and
                           stream lanes inherit it. UNDEF = COLL_IB_TC on ib, the socket default on tcp. */
} collConfig_t;

#define COLL_CONFIG_INITIALIZER                                                                               \
  {                                                                                                           \
    sizeof(collConfig_t), COLL_CONFIG_MAGIC, COLL_VERSION_CODE, COLL_CONFIG_UNDEF_INT, COLL_CONFIG_UNDEF_INT, \
        COLL_CONFIG_UNDEF_PTR, COLL_CONFIG_UNDEF_PTR, COLL_CONFIG_UNDEF_INT                                   \
  }

/* Version as COLL_VERSION(major, minor, patch). */
COLL_API collResult_t collGetVersion(int* version);

/* Creates a unique id on the root rank and starts its rendezvous listener. Broadcast the id to
 * all ranks (MPI_Bcast, a file, ...) and pass it to collCommInitRank. */
COLL_API collResult_t collGetUniqueId(collUniqueId* uniqueId);

COLL_API collResult_t collCommInitRank(collComm_t* comm, int nranks, collUniqueId commId, int rank);
COLL_API collResult_t collCommInitRankConfig(collComm_t* comm, int nranks, collUniqueId commId, int rank,
                                             collConfig_t* config);
/* NCCL's ncclCommInitRankScalable: creation with nId roots, so that no root serves every rank.
 * commIds holds nId ids from collGetUniqueId (1 <= nId <= nranks), made by different ranks (each
 * root runs in its caller's process), the same on every rank and in the same order. The ranks are
 * cut into nId consecutive blocks, block i (ranks [i*nranks/nId, (i+1)*nranks/nId)) registering
 * with root i; a block's first rank forwards the block to root 0. nId = 1 is collCommInitRankConfig.
 * config as in collCommInitRankConfig (NULL: defaults). */
COLL_API collResult_t collCommInitRankScalable(collComm_t* comm, int nranks, int rank, int nId, collUniqueId* commIds,
                                               collConfig_t* config);

/* Rank and size from the launcher's environment (collrun, torchrun, Open MPI, PMI, Slurm) and
 * the rendezvous from COLL_COMM_ID, MASTER_ADDR/MASTER_PORT or Slurm's node list. */
COLL_API collResult_t collCommInitFromEnv(collComm_t* comm, collConfig_t* config);

/* Finalize completes outstanding work; Destroy frees the communicator; Abort frees it without
 * waiting for peers. */
COLL_API collResult_t collCommFinalize(collComm_t comm);
COLL_API collResult_t collCommDestroy(collComm_t comm);
COLL_API collResult_t collCommAbort(collComm_t comm);
COLL_API collResult_t collCommGetAsyncError(collComm_t comm, collResult_t* asyncError);
COLL_API collResult_t collCommCount(const collComm_t comm, int* count);
COLL_API collResult_t collCommUserRank(const collComm_t comm, int* rank);
/* The CUDA device the communicator uses: the current device when it was made (or its entry in
 * collCommInitAll's list, or the device of its first call on device buffers); -1 for none. */
COLL_API collResult_t collCommCuDevice(const collComm_t comm, int* device);

/* Device memory on the current CUDA device (NCCL's ncclMemAlloc); freed by collMemFree. */
COLL_API collResult_t collMemAlloc(void** ptr, size_t size);
COLL_API collResult_t collMemFree(void* ptr);
/* Registers a buffer with the communicator (NCCL's ncclCommRegister): *handle identifies it until
 * collCommDeregister. The buffer is checked (device memory of the communicator's device, or host
 * memory) and remembered. A collective among the ranks of one host whose device buffers are
 * registered on every rank (cuMemAlloc/cudaMalloc/collMemAlloc memory) is read and written by the
 * peers directly over CUDA IPC, skipping the copies through the library's scratch; the buffer must
 * stay allocated until it is deregistered. Other calls run as if nothing were registered. */
COLL_API collResult_t collCommRegister(const collComm_t comm, void* buff, size_t size, void** handle);
COLL_API collResult_t collCommDeregister(const collComm_t comm, void* handle);

/* Fault tolerance. A rank that detects a failed peer (process death, a stall past the timeout, a
 * cut link) tells every rank of the communicator, so each returns collRemoteError or collTimeout
 * naming that peer instead of waiting for its own timeout.
 *
 * The ranks this communicator knows to have failed, in the order learned: up to maxRanks are
 * written to ranks (may be NULL when maxRanks is 0); *count is the total known. */
COLL_API collResult_t collCommGetFailedRanks(collComm_t comm, int* ranks, int maxRanks, int* count);
/* Logs (COLL_WARN) what this rank is doing: the operation in progress (collective, count, type,
 * sequence number), the pending steps of its schedule and the peers it waits for. Safe to call
 * from another thread while an operation runs. COLL_DUMP_ON_SIGNAL=1 does the same on SIGUSR1. */
COLL_API collResult_t collCommDump(collComm_t comm);
/* Marks comm unusable on every rank: operations in flight and later calls return collRemoteError
 * ("revoked"). The communicator must still be destroyed or aborted; collCommShrink still works. */
COLL_API collResult_t collCommRevoke(collComm_t comm);
/* A communicator of the ranks of comm not listed in excludeRanks (ranks of comm), in the same
 * order, made without any help from the excluded ranks (which may be dead). Every surviving rank
 * calls it with the same list; an excluded rank must not call it. Works on a communicator that has
 * failed or been revoked (not on one destroyed or aborted). config as in collCommInitRankConfig. */
COLL_API collResult_t collCommShrink(collComm_t comm, const int* excludeRanks, int excludeCount, collComm_t* newcomm,
                                     collConfig_t* config);

/* Elastic growth (NCCL's ncclCommGetUniqueId / ncclCommGrow): the ranks of comm and new processes
 * make a larger communicator. Rank 0 of comm makes a grow id (collCommGetUniqueId) and hands it to
 * the newcomers (a file, the launcher, a store); the grow id carries the job's secret, so keep it
 * as private as a unique id. Then, with the same nranks (> comm's size) everywhere:
 *  - rank 0 of comm:        collCommGrow(comm, nranks, &growId, -1, &newcomm, config)
 *  - other ranks of comm:   collCommGrow(comm, nranks, NULL,    -1, &newcomm, config)
 *  - each newcomer:         collCommGrow(NULL, nranks, &growId, rank, &newcomm, config)
 * The ranks of comm keep their rank; newcomers take ranks size(comm) .. nranks-1, each one once.
 * The grow id serves one grow and lasts four of comm's timeouts: newcomers must join by then.
 * comm is left as it was and stays usable whatever happens (a newcomer that dies or never comes
 * makes collCommGrow fail on every rank within the timeout). Collective over comm: host-stream
 * work still queued or running on comm is refused (collInvalidUsage; synchronize first). config
 * as in collCommInitRankConfig (NULL: comm's for its ranks, defaults for newcomers). */
COLL_API collResult_t collCommGetUniqueId(collComm_t comm, collUniqueId* growId);
COLL_API collResult_t collCommGrow(collComm_t comm, int nranks, const collUniqueId* growId, int rank,
                                   collComm_t* newcomm, collConfig_t* config);

/* Profiling, in the spirit of NCCL's profiler plugin: a callback told when each operation, each
 * step of its schedule (a send, receive, receive-and-reduce, copy or local reduction, with its peer
 * and bytes) and each wait starts and stops, and of failures. COLL_TRACE_FILE=path writes the same
 * events per rank as a Chrome trace (see docs/TRACING.md). */
typedef enum {
  collProfileColl = 0,   /* one collective or point-to-point execution (name: "allreduce", ...) */
  collProfileStep = 1,   /* one step of its schedule (name: "Send", "Recv", "RecvReduce", ...) */
  collProfileWait = 2,   /* the rank idle within an operation, waiting for `peer` (-1: local) */
  collProfileFailure = 3 /* an operation failed: `message` says why (phase collProfileInstant) */
} collProfileEventType_t;
typedef enum { collProfileStart = 0, collProfileStop = 1, collProfileInstant = 2 } collProfilePhase_t;
typedef struct {
  collProfileEventType_t type;
  collProfilePhase_t phase;
  int rank;               /* this rank in the communicator */
  unsigned long long seq; /* the operation's call number on the communicator (lane) */
  const char* name;       /* static string */
  const char* algorithm;  /* Coll: the schedule's algorithm ("" for none) */
  int peer;               /* Step, Wait: the peer rank, -1 for local work */
  int step;               /* Step, Wait: the step's index in this rank's schedule; else -1 */
  size_t count;           /* Coll: elements; Step: elements (or blocks) of the step */
  collDataType_t datatype;
  size_t bytes;        /* Coll: bytes of one rank's input; Step: bytes the step moves */
  collResult_t result; /* Coll stop: the outcome */
  const char* message; /* Failure: the error; otherwise NULL */
  long long timeNs;    /* CLOCK_MONOTONIC, nanoseconds */
} collProfileEvent_t;
typedef void (*collProfileCallback_t)(const collProfileEvent_t* event, void* userData);
/* Sets (or, with NULL, removes) comm's profiler callback, used by every later operation of comm
 * (and of its stream lanes); set it while no operation of comm is in flight. The callback runs on
 * the thread that runs the operation and must not call into comm. */
COLL_API collResult_t collCommSetProfiler(collComm_t comm, collProfileCallback_t callback, void* userData);

COLL_API const char* collGetErrorString(collResult_t result);
/* The message of the last failure on this thread (for comm, or of any call when comm is NULL). */
COLL_API const char* collGetLastError(collComm_t comm);

COLL_API collResult_t collAllReduce(const void* sendbuff, void* recvbuff, size_t count, collDataType_t datatype,
                                    collRedOp_t op, collComm_t comm, collStream_t stream);

/* Collectives with NCCL's argument conventions (counts per rank; in place when the pointers are
 * the ones NCCL defines as in place). */
COLL_API collResult_t collBroadcast(const void* sendbuff, void* recvbuff, size_t count, collDataType_t datatype,
                                    int root, collComm_t comm, collStream_t stream);
/* NCCL's legacy in-place broadcast: collBroadcast(buff, buff, ...). */
COLL_API collResult_t collBcast(void* buff, size_t count, collDataType_t datatype, int root, collComm_t comm,
                                collStream_t stream);
COLL_API collResult_t collReduce(const void* sendbuff, void* recvbuff, size_t count, collDataType_t datatype,
                                 collRedOp_t op, int root, collComm_t comm, collStream_t stream);
/* recvbuff holds nranks * sendcount elements; in place when sendbuff == recvbuff + rank * sendcount. */
COLL_API collResult_t collAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, collDataType_t datatype,
                                    collComm_t comm, collStream_t stream);
/* sendbuff holds nranks * recvcount elements; in place when recvbuff == sendbuff + rank * recvcount. */
COLL_API collResult_t collReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, collDataType_t datatype,
                                        collRedOp_t op, collComm_t comm, collStream_t stream);
/* count elements to and from every rank: buffers hold nranks * count elements. */
COLL_API collResult_t collAlltoAll(const void* sendbuff, void* recvbuff, size_t count, collDataType_t datatype,
                                   collComm_t comm, collStream_t stream);
/* The root's recvbuff holds nranks * count elements. */
COLL_API collResult_t collGather(const void* sendbuff, void* recvbuff, size_t count, collDataType_t datatype, int root,
                                 collComm_t comm, collStream_t stream);
/* The root's sendbuff holds nranks * count elements. */
COLL_API collResult_t collScatter(const void* sendbuff, void* recvbuff, size_t count, collDataType_t datatype, int root,
                                  collComm_t comm, collStream_t stream);
/* Point to point. Inside a group, any mix of sends and receives runs together (no deadlock);
 * operations between one pair of ranks match in the order they were issued. */
COLL_API collResult_t collSend(const void* sendbuff, size_t count, collDataType_t datatype, int peer, collComm_t comm,
                               collStream_t stream);
COLL_API collResult_t collRecv(void* recvbuff, size_t count, collDataType_t datatype, int peer, collComm_t comm,
                               collStream_t stream);
/* Returns when every rank has entered the barrier. */
COLL_API collResult_t collBarrier(collComm_t comm, collStream_t stream);

/* Compressed All-Reduce (4-bit gradient compression). Each element is quantized at most twice,
 * whatever the rank count: every rank quantizes each other rank's shard once for its owner, the
 * owner sums in float32 and requantizes once, and every rank (the owner too) dequantizes the same
 * bytes, so all ranks end with bit-identical results. Format: symmetric int4 (-7..+7), one bfloat16
 * scale per block of blockSize elements (4.25 bits per element at 64). Sum or avg of float32,
 * float16 or bfloat16. Start from COLL_COMPRESSION_INITIALIZER. */
typedef enum COLL_ENUM_INT { collCompressInt4 = 0 } collCompressionKind_t;
typedef enum COLL_ENUM_INT { collRoundNearest = 0, collRoundStochastic = 1 } collRounding_t;
typedef struct collCompression_v1 {
  size_t size;                /* sizeof(collCompression_t): later versions may append fields */
  collCompressionKind_t kind; /* int4 (room for 8-bit later) */
  int blockSize;              /* 32, 64, 128 or 256; 0 = 64 */
  collRounding_t rounding;    /* nearest (ties to even) or stochastic */
  unsigned long long seed;    /* stochastic rounding: the generator key (same on every rank) */
  unsigned long long step;    /* stochastic rounding: the training step (a new draw per step) */
  size_t minBytes;            /* tensors smaller than this go uncompressed; 0 = COLL_COMPRESS_MIN_BYTES */
} collCompression_t;
#define COLL_COMPRESSION_INITIALIZER \
  { sizeof(collCompression_t), collCompressInt4, 64, collRoundNearest, 0ull, 0ull, 0 }
/* residual: NULL, or count floats owned by the caller (zero them before the first step) for error
 * feedback: the library adds it to this rank's contribution before quantizing and stores what
 * quantization lost. A call below minBytes runs uncompressed and leaves residual unchanged. */
COLL_API collResult_t collAllReduceCompressed(const void* sendbuff, void* recvbuff, size_t count,
                                              collDataType_t datatype, collRedOp_t op, const collCompression_t* cfg,
                                              void* residual, collComm_t comm, collStream_t stream);

/* Traffic of one rank of a communicator since its creation: bytes handed to transports for peers
 * (shared-memory FIFOs and network connections; the one-host direct algorithm's shared windows are
 * not counted), and how much of it compressed calls sent. Call it when no work of the
 * communicator is in flight (after synchronizing the host streams it uses). */
typedef struct {
  unsigned long long wireBytes;             /* everything this rank sent to peers */
  unsigned long long compressedWireBytes;   /* of which by compressed calls */
  unsigned long long compressedInputBytes;  /* those calls' tensors uncompressed (count x type size) */
  unsigned long long compressedCalls;       /* compressed calls run compressed */
  unsigned long long uncompressedFallbacks; /* compressed calls below minBytes, run uncompressed */
} collCommStats_t;
COLL_API collResult_t collCommGetStats(collComm_t comm, collCommStats_t* stats);

/* PreMulSum: every rank's input is multiplied by *scalar (of `datatype`) before the sum.
 * collScalarHostImmediate reads it now; collScalarDevice keeps the address (device or pinned
 * memory) and each call on device buffers reads it when its stream reaches the call. The op is
 * valid for `comm` until collRedOpDestroy. */
typedef enum COLL_ENUM_INT { collScalarDevice = 0, collScalarHostImmediate = 1 } collScalarResidence_t;
COLL_API collResult_t collRedOpCreatePreMulSum(collRedOp_t* op, void* scalar, collDataType_t datatype,
                                               collScalarResidence_t residence, collComm_t comm);
COLL_API collResult_t collRedOpDestroy(collRedOp_t op, collComm_t comm);

/* Splits comm: ranks with the same color form a new communicator, ordered by key (then by old
 * rank). COLL_SPLIT_NOCOLOR returns *newcomm = NULL. Collective over comm. */
#define COLL_SPLIT_NOCOLOR -1
COLL_API collResult_t collCommSplit(collComm_t comm, int color, int key, collComm_t* newcomm, collConfig_t* config);
/* ndev communicators of one process (ranks 0..ndev-1), rank i on CUDA device devlist[i] (NULL:
 * devices 0..ndev-1 where CUDA is present, none otherwise). One thread may drive them all inside
 * a group (collGroupStart, one call per communicator, collGroupEnd), as with NCCL. */
COLL_API collResult_t collCommInitAll(collComm_t* comms, int ndev, const int* devlist);

/* Host streams. Work on one stream runs in issue order on the communicators' progress threads
 * while the caller computes. Work on one communicator runs in the order it was issued (issue it
 * in the same order on every rank, as with NCCL), whatever its stream. */
COLL_API collResult_t collHostStreamCreate(collStream_t* stream);
/* The handle dies at once; work already queued still completes. */
COLL_API collResult_t collHostStreamDestroy(collStream_t stream);
/* collSuccess: all queued work is done; collInProgress: some is pending; else the first error. */
COLL_API collResult_t collHostStreamQuery(collStream_t stream);
/* Waits for all queued work; returns the first error of the stream's work. */
COLL_API collResult_t collHostStreamSynchronize(collStream_t stream);

/* Calls between GroupStart and GroupEnd are queued and run at GroupEnd. Groups nest. */
COLL_API collResult_t collGroupStart(void);
COLL_API collResult_t collGroupEnd(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* COLLECTIVE_COLLECTIVE_H_ */
