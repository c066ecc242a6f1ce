// The C API: validates arguments, turns calls into CollArgs for the communicator, and never
// touches a socket. Handles are indices into a registry with a generation count, so a call on a
// destroyed communicator is a clean error that never dereferences freed memory.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collective/collective.h"
#include "src/base/config.h"
#include "src/base/log.h"
#include "src/base/status.h"
#include "src/comm/comm.h"
#include "src/comm/grow.h"
#include "src/comm/shrink.h"
#include "src/comm/stream.h"
#include "src/gpu/cuda_driver.h"
#include "src/gpu/memory.h"
#include "src/kernels/quantize.h"
#include "src/kernels/reduce.h"
#include "src/oob/auth.h"
#include "src/oob/bootstrap.h"
#include "src/oob/env_bootstrap.h"
#include "src/oob/socket.h"
#include "src/schedule/coll_args.h"
#include "src/schedule/schedule.h"

namespace coll {

const BytesKnob kCompressMinBytes("COLL_COMPRESS_MIN_BYTES", "64K",
                                  "collAllReduceCompressed: tensors smaller than this run uncompressed (when the "
                                  "call's minBytes is 0), logged once per communicator.",
                                  {KnobSection::Transports, 20});
namespace {

// ---- errors -----------------------------------------------------------------------------------

thread_local std::string tLastError;

collResult_t report(const Status& status, int rank = -1) {
  if (!status.ok()) {
    tLastError = status.message();
    // collInProgress is a state (a non-blocking communicator being made), not a failure.
    if (status.code() != collInProgress) COLL_WARN(rank, "%s", status.message().c_str());
  }
  return status.code();
}

// ---- handle registry ---------------------------------------------------------------------------
// A handle encodes (slot + 1) << 32 | generation. Slots are never freed; a slot's generation
// changes when its communicator is destroyed, so stale handles fail the lookup.

// A non-blocking communicator (config.blocking = 0) being made on its own thread.
struct PendingInit {
  std::thread thread;
  std::atomic<bool> done{false};
  std::unique_ptr<Comm> comm;  // written by the thread before `done`
  Status status;
};

struct Slot {
  std::unique_ptr<Comm> comm;
  std::shared_ptr<PendingInit> pending;  // set while (or since) a non-blocking init runs
  uint32_t generation = 1;
  bool occupied() const { return comm || pending; }
};

std::mutex gRegistryMu;
std::vector<Slot>& registry() {
  static std::vector<Slot>* slots = new std::vector<Slot>();  // never destroyed: safe at exit
  return *slots;
}

collComm_t registerComm(std::unique_ptr<Comm> comm) {
  std::lock_guard<std::mutex> lock(gRegistryMu);
  auto& slots = registry();
  size_t index = slots.size();
  for (size_t i = 0; i < slots.size(); ++i) {
    if (!slots[i].occupied()) {
      index = i;
      break;
    }
  }
  if (index == slots.size()) slots.emplace_back();
  slots[index].comm = std::move(comm);
  uint64_t handle = (static_cast<uint64_t>(index + 1) << 32) | slots[index].generation;
  return reinterpret_cast<collComm_t>(static_cast<uintptr_t>(handle));
}

// The slot of a live handle (gRegistryMu held), with a finished non-blocking init settled: its
// communicator moves into the slot, or its failure stays there for collCommGetAsyncError.
Status findSlot(const collComm_t handle, Slot** out) {
  if (handle == nullptr) return makeError(collInvalidArgument, "communicator is NULL");
  uint64_t h = reinterpret_cast<uintptr_t>(handle);
  uint64_t index = (h >> 32) - 1;
  uint32_t generation = static_cast<uint32_t>(h);
  auto& slots = registry();
  if ((h >> 32) == 0 || index >= slots.size() || !slots[index].occupied() || slots[index].generation != generation) {
    return makeError(collInvalidArgument, "communicator %p is not valid (destroyed, aborted, or never created)",
                     static_cast<void*>(handle));
  }
  Slot& slot = slots[index];
  if (slot.pending && slot.pending->done.load(std::memory_order_acquire) && slot.pending->thread.joinable()) {
    slot.pending->thread.join();  // done: returns at once
    if (slot.pending->status.ok()) {
      slot.comm = std::move(slot.pending->comm);
      slot.pending.reset();
    }
  }
  *out = &slot;
  return okStatus();
}

Status lookup(const collComm_t handle, Comm** out) {
  std::lock_guard<std::mutex> lock(gRegistryMu);
  Slot* slot = nullptr;
  COLL_TRY(findSlot(handle, &slot));
  if (slot->pending) {
    if (!slot->pending->done.load(std::memory_order_acquire)) {
      return makeError(collInProgress,
                       "communicator %p is still being made (non-blocking): poll collCommGetAsyncError until it "
                       "returns collSuccess",
                       static_cast<void*>(handle));
    }
    return slot->pending->status;
  }
  *out = slot->comm.get();
  return okStatus();
}

// A non-blocking communicator: a handle now, the communicator made by `make` on its own thread.
collComm_t registerPending(std::function<Status(std::unique_ptr<Comm>*)> make) {
  auto pending = std::make_shared<PendingInit>();
  collComm_t handle = nullptr;
  {
    std::lock_guard<std::mutex> lock(gRegistryMu);
    auto& slots = registry();
    size_t index = slots.size();
    for (size_t i = 0; i < slots.size(); ++i) {
      if (!slots[i].occupied()) {
        index = i;
        break;
      }
    }
    if (index == slots.size()) slots.emplace_back();
    slots[index].pending = pending;
    uint64_t h = (static_cast<uint64_t>(index + 1) << 32) | slots[index].generation;
    handle = reinterpret_cast<collComm_t>(static_cast<uintptr_t>(h));
  }
  PendingInit* p = pending.get();
  std::lock_guard<std::mutex> lock(gRegistryMu);  // the thread handle is written before anyone joins
  pending->thread = std::thread([p, make = std::move(make)] {
    p->status = make(&p->comm);
    p->done.store(true, std::memory_order_release);
  });
  return handle;
}

// The state of a non-blocking init for collCommGetAsyncError: collInProgress, its error, or
// collSuccess once the communicator is made (then *comm is set).
collResult_t initState(const collComm_t handle, Comm** comm, Status* lookupError) {
  std::lock_guard<std::mutex> lock(gRegistryMu);
  Slot* slot = nullptr;
  *lookupError = findSlot(handle, &slot);
  if (!lookupError->ok()) return lookupError->code();
  if (slot->pending) {
    if (!slot->pending->done.load(std::memory_order_acquire)) return collInProgress;
    tLastError = slot->pending->status.message();
    return slot->pending->status.code();
  }
  *comm = slot->comm.get();
  return collSuccess;
}

// Removes the communicator from the registry and returns it for destruction outside the lock. A
// non-blocking init still running is waited for first (its waits have deadlines).
Status unregister(collComm_t handle, std::unique_ptr<Comm>* out) {
  for (;;) {
    std::shared_ptr<PendingInit> running;
    {
      std::lock_guard<std::mutex> lock(gRegistryMu);
      Slot* slot = nullptr;
      COLL_TRY(findSlot(handle, &slot));
      if (slot->pending && !slot->pending->done.load(std::memory_order_acquire)) {
        running = slot->pending;
      } else {
        *out = std::move(slot->comm);  // null for a failed non-blocking init
        slot->pending.reset();
        slot->generation++;
        if (slot->generation == 0) slot->generation = 1;
        return okStatus();
      }
    }
    while (!running->done.load(std::memory_order_acquire)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
}

// ---- groups ---------------------------------------------------------------------------------------

// Where a call runs: on the host (now, or on a host stream) or on a CUDA stream (device buffers).
struct Placement {
  std::shared_ptr<HostStream> hostStream;
  bool device = false;
  CUstream cudaStream = nullptr;
  int cudaDevice = -1;
};

struct QueuedCall {
  collComm_t comm;
  CollArgs args;  // Send/Recv: a point-to-point call (buffer in sendbuff/recvbuff)
  Placement place;
};
thread_local int tGroupDepth = 0;
thread_local std::vector<QueuedCall> tGroupCalls;

// ---- argument validation -------------------------------------------------------------------------

// nonBlocking: where the caller supports config.blocking = 0 (made on a thread of its own), set to
// the config's choice; nullptr refuses it.
Status validateConfig(const collConfig_t* config, CommConfig* out, bool* nonBlocking = nullptr) {
  if (config == nullptr) return okStatus();
  if (config->magic != COLL_CONFIG_MAGIC || config->size < offsetof(collConfig_t, timeoutMs)) {
    return makeError(collInvalidArgument,
                     "config is not initialized: start from COLL_CONFIG_INITIALIZER (magic %#x, size %zu)",
                     config->magic, config->size);
  }
  // Fields beyond what the caller's (older) struct has keep their defaults.
  auto has = [&](size_t offset, size_t size) { return config->size >= offset + size; };
  if (has(offsetof(collConfig_t, blocking), sizeof(int)) && config->blocking != COLL_CONFIG_UNDEF_INT &&
      config->blocking != 1) {
    if (config->blocking != 0) return makeError(collInvalidArgument, "config.blocking must be 0 or 1");
    if (nonBlocking == nullptr) {
      return makeError(collInvalidUsage, "config.blocking = 0 is supported by collCommInitRankConfig and "
                                         "collCommInitFromEnv (not by split and shrink yet)");
    }
    *nonBlocking = true;
  }
  if (has(offsetof(collConfig_t, timeoutMs), sizeof(int)) && config->timeoutMs != COLL_CONFIG_UNDEF_INT) {
    if (config->timeoutMs <= 0) return makeError(collInvalidArgument, "config.timeoutMs must be > 0");
    out->timeoutMs = config->timeoutMs;
  }
  if (has(offsetof(collConfig_t, netName), sizeof(char*)) && config->netName) out->netName = config->netName;
  if (has(offsetof(collConfig_t, commName), sizeof(char*)) && config->commName) out->commName = config->commName;
  if (has(offsetof(collConfig_t, trafficClass), sizeof(int)) && config->trafficClass != COLL_CONFIG_UNDEF_INT) {
    // One byte on the wire (GRH traffic class, IP TOS): a wider value would be silently cut.
    if (config->trafficClass < 0 || config->trafficClass > 255) {
      return makeError(collInvalidArgument,
                       "config.trafficClass %d is out of range 0..255 (COLL_CONFIG_UNDEF_INT: unset)",
                       config->trafficClass);
    }
    out->trafficClass = config->trafficClass;
  }
  return okStatus();
}

Status validateType(collDataType_t datatype) {
  if (static_cast<int>(datatype) < 0 || datatype >= collNumTypes) {
    return makeError(collInvalidArgument, "invalid datatype %d", static_cast<int>(datatype));
  }
  return okStatus();
}

bool reduces(CollKind kind) {
  return kind == CollKind::AllReduce || kind == CollKind::Reduce || kind == CollKind::ReduceScatter;
}

// The receive-buffer address at which the send buffer counts as in place (NCCL's rules), or
// nullptr when the collective has no in-place form other than equal pointers.
const void* inPlaceSend(const CollArgs& a, int rank, size_t es) {
  auto at = [&](const void* base, uint64_t block) {
    return static_cast<const void*>(static_cast<const char*>(base) + block * a.count * es);
  };
  switch (a.kind) {
    case CollKind::AllGather: return at(a.recvbuff, static_cast<uint64_t>(rank));
    case CollKind::Gather: return rank == a.root ? at(a.recvbuff, static_cast<uint64_t>(a.root)) : nullptr;
    case CollKind::ReduceScatter: return nullptr;  // checked the other way round below
    case CollKind::Scatter: return nullptr;
    default: return a.recvbuff;
  }
}
const void* inPlaceRecv(const CollArgs& a, int rank, size_t es) {
  auto at = [&](const void* base, uint64_t block) {
    return static_cast<const void*>(static_cast<const char*>(base) + block * a.count * es);
  };
  if (a.kind == CollKind::ReduceScatter) return at(a.sendbuff, static_cast<uint64_t>(rank));
  if (a.kind == CollKind::Scatter && rank == a.root) return at(a.sendbuff, static_cast<uint64_t>(a.root));
  return nullptr;
}

// Validates a call against NCCL's conventions before anything is touched.
Status validateCall(Comm& comm, const CollArgs& a) {
  const int nranks = comm.nranks(), rank = comm.rank();
  const char* what = collKindName(a.kind);
  if (a.kind != CollKind::Barrier) {
    COLL_TRY(validateType(a.dtype));
    if (reduces(a.kind)) {
      // Read as an integer: a caller's out-of-range value is not a valid enum value to load.
      int op = 0;
      memcpy(&op, &a.op, sizeof(op));
      if (op < 0) return makeError(collInvalidArgument, "%s: invalid reduction op %d", what, op);
      if (op >= collNumOps) COLL_TRY(comm.checkUserOp(a.op, a.dtype));
    }
  }
  if (a.kind == CollKind::Broadcast || a.kind == CollKind::Reduce || a.kind == CollKind::Gather ||
      a.kind == CollKind::Scatter) {
    if (a.root < 0 || a.root >= nranks) {
      return makeError(collInvalidArgument, "%s: root %d is out of range for %d ranks", what, a.root, nranks);
    }
  }
  if (a.kind == CollKind::Send || a.kind == CollKind::Recv) {
    if (a.peer < 0 || a.peer >= nranks) {
      return makeError(collInvalidArgument, "%s: peer %d is out of range for %d ranks", what, a.peer, nranks);
    }
  }
  const size_t es = dataTypeSize(a.dtype);
  // Element counts are bounded by the executor's progress encoding (2^40) and byte sizes by size_t.
  const uint64_t maxElems = static_cast<uint64_t>(1) << 40;
  if (a.count > maxElems || a.count * static_cast<uint64_t>(nranks) > maxElems || a.count > SIZE_MAX / es / nranks) {
    return makeError(collInvalidArgument, "%s: count %llu is too large (at most 2^40 elements per buffer)", what,
                     static_cast<unsigned long long>(a.count));
  }
  uint64_t sendElems = 0, recvElems = 0;
  bufferElements(a, rank, nranks, &sendElems, &recvElems);
  if (sendElems > 0 && a.sendbuff == nullptr) {
    return makeError(collInvalidArgument, "%s: sendbuff is NULL with count %llu", what,
                     static_cast<unsigned long long>(a.count));
  }
  if (recvElems > 0 && a.recvbuff == nullptr) {
    return makeError(collInvalidArgument, "%s: recvbuff is NULL with count %llu", what,
                     static_cast<unsigned long long>(a.count));
  }
  if (sendElems > 0 && recvElems > 0 && a.sendbuff != a.recvbuff) {
    uintptr_t s = reinterpret_cast<uintptr_t>(a.sendbuff), r = reinterpret_cast<uintptr_t>(a.recvbuff);
    uint64_t sb = sendElems * es, rb = recvElems * es;
    bool overlap = s < r + rb && r < s + sb;
    bool inPlace = a.sendbuff == inPlaceSend(a, rank, es) || a.recvbuff == inPlaceRecv(a, rank, es);
    if (overlap && !inPlace) {
      return makeError(collInvalidArgument, "%s: sendbuff and recvbuff overlap without being NCCL's in-place layout",
                       what);
    }
  }
  return okStatus();
}

// ---- memory kinds and streams ----------------------------------------------------------------------

// The device of a CUDA stream (0 and the legacy / per-thread handles: the current context's).
Status streamDevice(const gpu::CudaDriver& cu, CUstream stream, int* device) {
  CUcontext ctx = nullptr;
  CUresult r = cu.cuStreamGetCtx(stream, &ctx);
  if (r != cu::kSuccess || ctx == nullptr) {
    return makeError(collInvalidArgument,
                     "stream %p is neither a host stream (collHostStreamCreate) nor a CUDA stream the driver knows "
                     "(%s)",
                     static_cast<void*>(stream), gpu::cudaCheck(r, "cuStreamGetCtx").message().c_str());
  }
  COLL_TRY(gpu::cudaCheck(cu.cuCtxPushCurrent(ctx), "cuCtxPushCurrent"));
  CUdevice dev = -1;
  r = cu.cuCtxGetDevice(&dev);
  CUcontext popped = nullptr;
  (void)cu.cuCtxPopCurrent(&popped);
  COLL_TRY(gpu::cudaCheck(r, "cuCtxGetDevice"));
  *device = dev;
  return okStatus();
}

bool specialStream(collStream_t s) {
  return s == nullptr || s == static_cast<void*>(cu::legacyStream()) || s == static_cast<void*>(cu::perThreadStream());
}

// Decides where a validated call runs from where its buffers live (asked of the CUDA driver) and
// what its stream is, and refuses the combinations NCCL refuses, before anything is touched.
Status placeCall(Comm& comm, const CollArgs& a, collStream_t stream, Placement* out) {
  const char* what = collKindName(a.kind);
  *out = Placement{};
  if (stream != nullptr && findHostStream(stream, &out->hostStream).ok()) {
    // A host stream: handled below like NULL, except that device buffers are refused.
  } else {
    out->hostStream.reset();
  }
  const gpu::CudaDriver* cu = gpu::cudaDriver();  // why it is missing: asked only for the error below
  uint64_t sendElems = 0, recvElems = 0;
  bufferElements(a, comm.rank(), comm.nranks(), &sendElems, &recvElems);
  const size_t es = a.kind == CollKind::Barrier ? 1 : dataTypeSize(a.dtype);
  struct Buf {
    const char* name;
    const void* ptr;
    uint64_t bytes;
    gpu::MemInfo info;
  } bufs[2] = {{"sendbuff", a.sendbuff, sendElems * es, {}}, {"recvbuff", a.recvbuff, recvElems * es, {}}};
  bool anyDevice = false;
  int device = -1;
  for (Buf& b : bufs) {
    if (b.bytes == 0 || b.ptr == nullptr) continue;
    // The context is built on failure only: every host call passes here.
    if (Status st = gpu::classifyPointer(cu, b.ptr, &b.info); !st.ok()) {
      return st.withContext(std::string(what) + ": " + b.name);
    }
    if (gpu::onDevice(b.info.kind)) {
      if (anyDevice && b.info.device != device) {
        return makeError(collInvalidArgument, "%s: sendbuff is on CUDA device %d but recvbuff on device %d", what,
                         device, b.info.device);
      }
      anyDevice = true;
      device = b.info.device;
      const uintptr_t p = reinterpret_cast<uintptr_t>(b.ptr);
      if (b.info.rangeSize > 0 && p + b.bytes > b.info.rangeStart + b.info.rangeSize) {
        return makeError(collInvalidArgument,
                         "%s: %s %p holds %llu bytes for this call, past the end of its allocation (%zu bytes at "
                         "%#llx)",
                         what, b.name, b.ptr, static_cast<unsigned long long>(b.bytes), b.info.rangeSize,
                         static_cast<unsigned long long>(b.info.rangeStart));
      }
    }
  }
  const bool cudaStream = stream != nullptr && !out->hostStream;
  if (!anyDevice && !cudaStream) return okStatus();  // host buffers, NULL or a host stream: the host path
  if (cu == nullptr) {
    std::string why;
    (void)gpu::cudaDriver(&why);
    return makeError(collInvalidArgument,
                     "%s: stream %p is not a host stream (collHostStreamCreate), and CUDA is not available here "
                     "(%s)",
                     what, stream, why.c_str());
  }
  if (anyDevice && out->hostStream) {
    return makeError(collInvalidArgument,
                     "%s: the buffers are CUDA device memory but the stream is a host stream: pass a cudaStream_t "
                     "(or NULL for the default stream)",
                     what);
  }
  for (const Buf& b : bufs) {
    if (b.bytes == 0 || b.ptr == nullptr || b.info.kind != gpu::MemKind::Host) continue;
    if (anyDevice) {
      return makeError(collInvalidArgument,
                       "%s: %s %p is host memory while the other buffer is device memory on device %d; both must be "
                       "device memory (or pinned host memory)",
                       what, b.name, b.ptr, device);
    }
    return makeError(collInvalidArgument,
                     "%s: %s %p is not memory CUDA can reach (ordinary host memory, or a freed device buffer), but "
                     "the stream is a CUDA stream: pass device memory, register the buffer (cudaHostRegister), or "
                     "use a host stream",
                     what, b.name, b.ptr);
  }
  // The stream's device must be the buffers' (the current device's for the default streams).
  const CUstream cs = static_cast<CUstream>(stream);
  if (specialStream(stream)) {
    if (device < 0) device = comm.cudaDevice() >= 0 ? comm.cudaDevice() : 0;
    COLL_TRY(gpu::setCurrentDevice(*cu, device));
  } else {
    int sd = -1;
    COLL_TRY(streamDevice(*cu, cs, &sd).withContext(what));
    if (device >= 0 && sd != device) {
      return makeError(collInvalidArgument, "%s: stream %p belongs to CUDA device %d but the buffers are on device %d",
                       what, stream, sd, device);
    }
    device = sd;
  }
  if (comm.cudaDevice() >= 0 && comm.cudaDevice() != device) {
    return makeError(collInvalidArgument, "%s: the buffers are on CUDA device %d, but the communicator uses device %d",
                     what, device, comm.cudaDevice());
  }
  // A compressed call's residual is read and written by device kernels: device memory of the
  // buffers' device (or pinned host memory), holding count floats.
  if (a.compress.residual != nullptr && a.count > 0) {
    gpu::MemInfo r;
    COLL_TRY(gpu::classifyPointer(cu, a.compress.residual, &r).withContext(std::string(what) + ": residual"));
    const uint64_t bytes = a.count * sizeof(float);
    const uintptr_t p = reinterpret_cast<uintptr_t>(a.compress.residual);
    if (r.kind == gpu::MemKind::Host) {
      return makeError(collInvalidArgument,
                       "%s: residual %p is ordinary host memory while the call runs on CUDA device %d: pass device "
                       "memory (or pinned host memory)",
                       what, static_cast<void*>(a.compress.residual), device);
    }
    if (gpu::onDevice(r.kind) && r.device != device) {
      return makeError(collInvalidArgument, "%s: residual is on CUDA device %d but the buffers are on device %d", what,
                       r.device, device);
    }
    if (gpu::onDevice(r.kind) && r.rangeSize > 0 && p + bytes > r.rangeStart + r.rangeSize) {
      return makeError(collInvalidArgument,
                       "%s: residual %p holds %llu bytes for this call, past the end of its allocation (%zu bytes)",
                       what, static_cast<void*>(a.compress.residual), static_cast<unsigned long long>(bytes),
                       r.rangeSize);
    }
  }
  out->device = true;
  out->cudaStream = cs;
  out->cudaDevice = device;
  return okStatus();
}

Status initComm(collComm_t* out, int nranks, const collUniqueId& id, int rank, const CommConfig& config,
                bool nonBlocking = false) {
  if (out == nullptr) return makeError(collInvalidArgument, "comm (output pointer) is NULL");
  *out = nullptr;
  if (nranks < 1 || nranks > (1 << 24)) return makeError(collInvalidArgument, "nranks %d is out of range", nranks);
  if (rank < 0 || rank >= nranks) {
    return makeError(collInvalidArgument, "rank %d is out of range for %d ranks", rank, nranks);
  }
  UniqueIdContents contents;
  if (decodeUniqueId(id, &contents).ok() && contents.growFrom != 0) {
    return makeError(collInvalidArgument,
                     "this is a grow id (collCommGetUniqueId), which only collCommGrow takes; collCommInitRank takes "
                     "an id from collGetUniqueId");
  }
  if (nonBlocking) {
    *out = registerPending([id, nranks, rank, config](std::unique_ptr<Comm>* comm) {
      return Comm::create(id, nranks, rank, config, comm);
    });
    return Status(collInProgress, "");
  }
  std::unique_ptr<Comm> comm;
  COLL_TRY(Comm::create(id, nranks, rank, config, &comm));
  *out = registerComm(std::move(comm));
  return okStatus();
}

bool isP2p(const CollArgs& a) { return a.kind == CollKind::Send || a.kind == CollKind::Recv; }

// Zero-count collectives are no-ops (a barrier always runs).
bool worthRunning(const CollArgs& a) { return a.count > 0 || a.kind == CollKind::Barrier || isP2p(a); }

// Runs a communicator's work now (NULL stream) or queues it on a host stream.
Status dispatch(Comm& comm, Comm::Work work, const std::shared_ptr<HostStream>& stream) {
  if (!stream) return comm.runNow(std::move(work));
  work.stream = stream;
  work.ticket = stream->enqueue();
  Status s = comm.enqueue(std::move(work));
  if (!s.ok()) stream->complete(work.ticket, s);
  return s;
}

// Runs one call now, or queues it inside a group.
collResult_t submit(collComm_t handle, const CollArgs& args, collStream_t stream) {
  Comm* c = nullptr;
  if (Status s = lookup(handle, &c); !s.ok()) return report(s);
  // Each check's Status is made in place, never assigned: the call path stays free of a string's
  // move assignment (this is the 8-byte call's whole overhead budget).
  if (Status s = validateCall(*c, args); !s.ok()) return report(s, c->rank());
  Placement place;
  if (Status s = placeCall(*c, args, stream, &place); !s.ok()) return report(s, c->rank());
  if (tGroupDepth > 0) {
    tGroupCalls.push_back(QueuedCall{handle, args, std::move(place)});
    return collSuccess;
  }
  if (!worthRunning(args)) return collSuccess;
  if (!place.device && !place.hostStream) return report(c->runNow(args), c->rank());
  Comm::Work work;
  if (isP2p(args)) work.p2p.push_back(Comm::p2pCallOf(args));
  else work.collectives.push_back(args);
  if (place.device) return report(c->enqueueDevice(std::move(work), place.cudaStream, place.cudaDevice), c->rank());
  return report(dispatch(*c, std::move(work), place.hostStream), c->rank());
}

// A group: per communicator (in order of first appearance), its collectives in issue order
// (every rank issues them in the same order), then its point-to-point calls as one batch that
// progresses together, so any mix of sends and receives completes. All calls of a group share
// one stream (or none).
//
// Several communicators driven from one thread (collCommInitAll's, one per device) are each other's
// peers: with no stream, their work goes to their progress threads together and the group waits
// for all of it, so no communicator's collective waits for one this thread has not started.
Status runGroup(std::vector<QueuedCall>& calls) {
  if (calls.empty()) return okStatus();
  const Placement& place = calls.front().place;
  for (const QueuedCall& call : calls) {
    if (call.place.hostStream != place.hostStream || call.place.device != place.device ||
        call.place.cudaStream != place.cudaStream) {
      return makeError(collInvalidUsage, "the calls of one group must use the same stream");
    }
  }
  std::vector<collComm_t> comms;
  for (const QueuedCall& call : calls) {
    if (std::find(comms.begin(), comms.end(), call.comm) == comms.end()) comms.push_back(call.comm);
  }
  const bool together = !place.device && !place.hostStream && comms.size() > 1;
  std::vector<std::shared_ptr<HostStream>> completions;
  int64_t waitMs = 0;
  Status first;
  for (collComm_t handle : comms) {
    Comm::Work work;
    for (const QueuedCall& call : calls) {
      if (call.comm != handle || !worthRunning(call.args)) continue;
      if (isP2p(call.args)) work.p2p.push_back(Comm::p2pCallOf(call.args));
      else work.collectives.push_back(call.args);
    }
    Comm* c = nullptr;
    Status s = lookup(handle, &c);
    if (s.ok() && place.device) {
      if (!work.collectives.empty() || !work.p2p.empty()) s = c->enqueueDevice(std::move(work), place.cudaStream,
                                                                               place.cudaDevice);
    } else if (s.ok() && together) {
      auto done = std::make_shared<HostStream>();
      completions.push_back(done);
      waitMs = std::max<int64_t>(waitMs, c->config().timeoutMs > 0 ? c->config().timeoutMs : defaultTimeoutMs());
      s = dispatch(*c, std::move(work), done);
    } else if (s.ok()) {
      s = dispatch(*c, std::move(work), place.hostStream);
    }
    if (!s.ok() && first.ok()) first = s;
  }
  for (const auto& done : completions) {
    Status s = done->synchronize(Deadline::afterMs(2 * waitMs));
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

// collCommSplit over the parent's own collectives: an all-gather of (color, key); each color's
// new rank 0 starts a rendezvous; an all-gather of the unique ids tells every member its id.
Status splitComm(Comm& parent, int color, int key, const CommConfig& config, collComm_t* out) {
  const int n = parent.nranks(), me = parent.rank();
  std::vector<int32_t> mine = {color, key};
  std::vector<int32_t> all(2 * static_cast<size_t>(n));
  CollArgs gather;
  gather.kind = CollKind::AllGather, gather.sendbuff = mine.data(), gather.recvbuff = all.data();
  gather.count = 2, gather.dtype = collInt32;
  Comm::Work colors;
  colors.collectives.push_back(gather);
  COLL_TRY(parent.runNow(std::move(colors)).withContext("collCommSplit: exchanging colors"));
  std::vector<int> members;  // old ranks of my color, in new-rank order
  if (color != COLL_SPLIT_NOCOLOR) {
    for (int r = 0; r < n; ++r) {
      if (all[2 * r] == color) members.push_back(r);
    }
    std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return all[2 * a + 1] < all[2 * b + 1]; });
  }
  const int newRank = color == COLL_SPLIT_NOCOLOR
                          ? -1
                          : static_cast<int>(std::find(members.begin(), members.end(), me) - members.begin());
  collUniqueId myId;
  memset(&myId, 0, sizeof(myId));
  if (newRank == 0) {
    Secret secret;
    COLL_TRY(randomSecret(&secret));
    COLL_TRY(startBootstrapRoot(SocketAddress{}, &secret, &myId).withContext("collCommSplit: starting the rendezvous"));
  }
  std::vector<collUniqueId> ids(static_cast<size_t>(n));
  CollArgs idGather;
  idGather.kind = CollKind::AllGather, idGather.sendbuff = &myId, idGather.recvbuff = ids.data();
  idGather.count = sizeof(collUniqueId), idGather.dtype = collUint8;
  Comm::Work idWork;
  idWork.collectives.push_back(idGather);
  COLL_TRY(parent.runNow(std::move(idWork)).withContext("collCommSplit: exchanging rendezvous ids"));
  if (color == COLL_SPLIT_NOCOLOR) return okStatus();
  return initComm(out, static_cast<int>(members.size()), ids[members[0]], newRank, config);
}
}  // namespace
}  // namespace coll

using namespace coll;

extern "C" {

collResult_t collGetVersion(int* version) {
  if (version == nullptr) return report(makeError(collInvalidArgument, "version is NULL"));
  *version = COLL_VERSION_CODE;
  return collSuccess;
}

collResult_t collGetUniqueId(collUniqueId* uniqueId) {
  if (uniqueId == nullptr) return report(makeError(collInvalidArgument, "uniqueId is NULL"));
  Secret secret;
  Status s = randomSecret(&secret);
  if (!s.ok()) return report(s);
  // An empty bind address: the interface selected by COLL_SOCKET_IFNAME / the default rule.
  return report(startBootstrapRoot(SocketAddress{}, &secret, uniqueId));
}

collResult_t collCommInitRank(collComm_t* comm, int nranks, collUniqueId commId, int rank) {
  return report(initComm(comm, nranks, commId, rank, CommConfig{}), rank);
}

collResult_t collCommInitRankConfig(collComm_t* comm, int nranks, collUniqueId commId, int rank, collConfig_t* config) {
  CommConfig cc;
  bool nonBlocking = false;
  Status s = validateConfig(config, &cc, &nonBlocking);
  if (!s.ok()) return report(s, rank);
  return report(initComm(comm, nranks, commId, rank, cc, nonBlocking), rank);
}

collResult_t collCommInitRankScalable(collComm_t* comm, int nranks, int rank, int nId, collUniqueId* commIds,
                                      collConfig_t* config) {
  CommConfig cc;
  bool nonBlocking = false;
  Status s = validateConfig(config, &cc, &nonBlocking);
  if (!s.ok()) return report(s, rank);
  if (commIds == nullptr) return report(makeError(collInvalidArgument, "commIds is NULL"), rank);
  if (nId < 1 || nId > nranks) {
    return report(makeError(collInvalidArgument, "nId %d is out of range: 1 to nranks (%d) roots", nId, nranks), rank);
  }
  for (int i = 0; i < nId; ++i) {
    UniqueIdContents contents;
    if (decodeUniqueId(commIds[i], &contents).ok() && contents.growFrom != 0) {
      return report(makeError(collInvalidArgument,
                              "commIds[%d] is a grow id (collCommGetUniqueId): roots take ids from "
                              "collGetUniqueId",
                              i),
                    rank);
    }
  }
  if (nId > 1) cc.rootIds.assign(commIds, commIds + nId);
  return report(initComm(comm, nranks, commIds[0], rank, cc, nonBlocking), rank);
}

collResult_t collCommInitFromEnv(collComm_t* comm, collConfig_t* config) {
  if (comm == nullptr) return report(makeError(collInvalidArgument, "comm (output pointer) is NULL"));
  CommConfig cc;
  bool nonBlocking = false;
  Status s = validateConfig(config, &cc, &nonBlocking);
  if (!s.ok()) return report(s);
  EnvBootstrap env;
  s = resolveEnvBootstrap(&env);
  if (!s.ok()) return report(s);
  collUniqueId id;
  s = envUniqueId(env, env.rank == 0, &id);
  if (!s.ok()) return report(s, env.rank);
  return report(initComm(comm, env.nranks, id, env.rank, cc, nonBlocking), env.rank);
}

collResult_t collCommFinalize(collComm_t comm) {
  Comm* c = nullptr;
  Status s = lookup(comm, &c);
  if (!s.ok()) return report(s);
  // Outstanding stream work completes first: an empty piece of work queued behind it runs last.
  return report(c->runNow(Comm::Work{}), c->rank());
}

collResult_t collCommDestroy(collComm_t comm) {
  std::unique_ptr<Comm> c;
  Status s = unregister(comm, &c);
  if (!s.ok()) return report(s);
  c.reset();
  return collSuccess;
}

collResult_t collCommAbort(collComm_t comm) {
  std::unique_ptr<Comm> c;
  Status s = unregister(comm, &c);
  if (!s.ok()) return report(s);
  if (!c) return collSuccess;  // a non-blocking init that failed
  c->abort();
  c.reset();
  return collSuccess;
}

collResult_t collCommGetAsyncError(collComm_t comm, collResult_t* asyncError) {
  if (asyncError == nullptr) return report(makeError(collInvalidArgument, "asyncError is NULL"));
  Comm* c = nullptr;
  Status s;
  const collResult_t state = initState(comm, &c, &s);
  if (!s.ok()) return report(s);
  // A non-blocking communicator still being made (collInProgress) or whose init failed.
  *asyncError = state == collSuccess ? c->asyncError() : state;
  return collSuccess;
}

collResult_t collCommGetStats(collComm_t comm, collCommStats_t* stats) {
  if (stats == nullptr) return report(makeError(collInvalidArgument, "stats is NULL"));
  Comm* c = nullptr;
  Status s = lookup(comm, &c);
  if (!s.ok()) return report(s);
  *stats = c->stats();
  return collSuccess;
}

collResult_t collCommCount(const collComm_t comm, int* count) {
  if (count == nullptr) return report(makeError(collInvalidArgument, "count is NULL"));
  Comm* c = nullptr;
  Status s = lookup(comm, &c);
  if (!s.ok()) return report(s);
  *count = c->nranks();
  return collSuccess;
}

collResult_t collCommUserRank(const collComm_t comm, int* rank) {
  if (rank == nullptr) return report(makeError(collInvalidArgument, "rank is NULL"));
  Comm* c = nullptr;
  Status s = lookup(comm, &c);
  if (!s.ok()) return report(s);
  *rank = c->rank();
  return collSuccess;
}

collResult_t collCommCuDevice(const collComm_t comm, int* device) {
  if (device == nullptr) return report(makeError(collInvalidArgument, "collCommCuDevice: device is NULL"));
  Comm* c = nullptr;
  Status s = lookup(comm, &c);
  if (!s.ok()) return report(s);
  *device = c->cudaDevice();
  return collSuccess;
}

collResult_t collMemAlloc(void** ptr, size_t size) {
  if (ptr == nullptr) return report(makeError(collInvalidArgument, "collMemAlloc: ptr is NULL"));
  *ptr = nullptr;
  if (size == 0) return report(makeError(collInvalidArgument, "collMemAlloc: size is 0"));
  std::string why;
  const gpu::CudaDriver* cu = gpu::cudaDriver(&why);
  if (cu == nullptr) return report(makeError(collInvalidUsage, "collMemAlloc: CUDA is not available: %s", why.c_str()));
  // The current device, as cudaMalloc would use (device 0 when this thread has no context yet).
  CUcontext ctx = nullptr;
  if (cu->cuCtxGetCurrent(&ctx) != cu::kSuccess || ctx == nullptr) {
    Status s = gpu::setCurrentDevice(*cu, 0);
    if (!s.ok()) return report(s.withContext("collMemAlloc"));
  }
  CUdeviceptr p = 0;
  Status s = gpu::cudaCheck(cu->cuMemAlloc(&p, size), "collMemAlloc: cuMemAlloc");
  if (!s.ok()) return report(s);
  *ptr = reinterpret_cast<void*>(static_cast<uintptr_t>(p));
  return collSuccess;
}

collResult_t collMemFree(void* ptr) {
  if (ptr == nullptr) return collSuccess;
  std::string why;
  const gpu::CudaDriver* cu = gpu::cudaDriver(&why);
  if (cu == nullptr) return report(makeError(collInvalidUsage, "collMemFree: CUDA is not available: %s", why.c_str()));
  gpu::MemInfo info;
  Status s = gpu::classifyPointer(cu, ptr, &info);
  if (s.ok() && info.kind != gpu::MemKind::Device) {
    s = makeError(collInvalidArgument, "collMemFree: %p is %s, not device memory from collMemAlloc", ptr,
                  gpu::memKindName(info.kind));
  }
  if (s.ok()) s = gpu::cudaCheck(cu->cuMemFree(static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(ptr))),
                                 "collMemFree: cuMemFree");
  return report(s);
}

}  // extern "C"

extern "C" {

collResult_t collCommRegister(const collComm_t comm, void* buff, size_t size, void** handle) {
  if (handle == nullptr) return report(makeError(collInvalidArgument, "collCommRegister: handle is NULL"));
  *handle = nullptr;
  Comm* c = nullptr;
  Status s = lookup(comm, &c);
  if (!s.ok()) return report(s);
  if (buff == nullptr || size == 0) {
    return report(makeError(collInvalidArgument, "collCommRegister: buff is NULL or size is 0"), c->rank());
  }
  gpu::MemInfo info;
  s = gpu::classifyPointer(gpu::cudaDriver(), buff, &info);
  if (s.ok() && gpu::onDevice(info.kind)) {
    if (c->cudaDevice() >= 0 && info.device != c->cudaDevice()) {
      s = makeError(collInvalidArgument, "collCommRegister: buff is on CUDA device %d, the communicator uses %d",
                    info.device, c->cudaDevice());
    } else if (info.rangeSize > 0 &&
               reinterpret_cast<uintptr_t>(buff) + size > info.rangeStart + info.rangeSize) {
      s = makeError(collInvalidArgument, "collCommRegister: %zu bytes at %p run past the end of the allocation", size,
                    buff);
    }
  }
  if (!s.ok()) return report(s.withContext("collCommRegister"), c->rank());
  BufferRegistry::Entry e;
  e.begin = reinterpret_cast<uintptr_t>(buff), e.size = size, e.kind = info.kind;
  e.allocationBegin = info.rangeStart;
  *handle = c->registry().add(e);
  return collSuccess;
}

collResult_t collCommDeregister(const collComm_t comm, void* handle) {
  Comm* c = nullptr;
  Status s = lookup(comm, &c);
  if (!s.ok()) return report(s);
  if (handle != nullptr && c->registry().remove(handle)) return collSuccess;
  return report(makeError(collInvalidArgument, "collCommDeregister: %p is not a registration of this communicator",
                          handle),
                c->rank());
}

// ---- fault tolerance (collCommShrink lives in src/comm/shrink.cc) -------------------------------

collResult_t collCommGetFailedRanks(collComm_t comm, int* ranks, int maxRanks, int* count) {
  if (count == nullptr) return report(makeError(collInvalidArgument, "count is NULL"));
  if (maxRanks < 0) return report(makeError(collInvalidArgument, "maxRanks is %d; want >= 0", maxRanks));
  if (maxRanks > 0 && ranks == nullptr) {
    return report(makeError(collInvalidArgument, "ranks is NULL but maxRanks is %d", maxRanks));
  }
  Comm* c = nullptr;
  Status s = lookup(comm, &c);
  if (!s.ok()) return report(s);
  const std::vector<int> failed = c->failedRanks();
  for (size_t i = 0; i < failed.size() && i < static_cast<size_t>(maxRanks); ++i) ranks[i] = failed[i];
  *count = static_cast<int>(failed.size());
  return collSuccess;
}

collResult_t collCommDump(collComm_t comm) {
  Comm* c = nullptr;
  Status s = lookup(comm, &c);
  if (!s.ok()) return report(s);
  c->dump("collCommDump");
  c->dumpLanes("collCommDump");
  return collSuccess;
}

collResult_t collCommSetProfiler(collComm_t comm, collProfileCallback_t callback, void* userData) {
  Comm* c = nullptr;
  Status s = lookup(comm, &c);
  if (!s.ok()) return report(s);
  c->setProfiler(callback, userData);
  return collSuccess;
}

collResult_t collCommRevoke(collComm_t comm) {
  Comm* c = nullptr;
  Status s = lookup(comm, &c);
  if (!s.ok()) return report(s);
  s = c->revoke();
  Status lanes = c->revokeLanes();  // a lane's ranks may be waiting in the lane's own calls
  return report(s.ok() ? lanes : s, c->rank());
}

const char* collGetErrorString(collResult_t result) {
  switch (result) {
    case collSuccess: return "no error";
    case collUnhandledCudaError: return "unhandled cuda error (run with COLL_DEBUG=INFO for details)";
    case collSystemError: return "unhandled system error (run with COLL_DEBUG=INFO for details)";
    case collInternalError: return "internal error - please report this issue to the libcollective developers";
    case collInvalidArgument: return "invalid argument (run with COLL_DEBUG=WARN for details)";
    case collInvalidUsage: return "invalid usage (run with COLL_DEBUG=WARN for details)";
    case collRemoteError: return "remote process exited or there was a network error";
    case collInProgress: return "operation in progress";
    case collTimeout: return "timeout: a peer did not make progress within COLL_TIMEOUT";
    default: return "unknown result code";
  }
}

const char* collGetLastError(collComm_t comm) {
  (void)comm;  // errors are kept per thread; a communicator's failures are reported there too
  return tLastError.c_str();
}

collResult_t collAllReduce(const void* sendbuff, void* recvbuff, size_t count, collDataType_t datatype, collRedOp_t op,
                           collComm_t comm, collStream_t stream) {
  CollArgs a;
  a.kind = CollKind::AllReduce, a.sendbuff = sendbuff, a.recvbuff = recvbuff, a.count = count;
  a.dtype = datatype, a.op = op;
  return submit(comm, a, stream);
}

}  // extern "C": reopened below; a C++ helper returning Status must not have C linkage (clang warns)

namespace {

// The compression settings of a collAllReduceCompressed call, checked (nothing is touched before).
Status compressionOf(const collCompression_t* cfg, const CollArgs& a, void* residual, CollArgs::Compression* out) {
  if (cfg == nullptr) return makeError(collInvalidArgument, "collAllReduceCompressed: cfg is NULL");
  // Read what the caller's struct version has: fields past its size keep their defaults.
  collCompression_t c = COLL_COMPRESSION_INITIALIZER;
  if (cfg->size < offsetof(collCompression_t, minBytes) || cfg->size > sizeof(collCompression_t)) {
    return makeError(collInvalidArgument,
                     "collAllReduceCompressed: cfg->size is %zu; start from COLL_COMPRESSION_INITIALIZER", cfg->size);
  }
  memcpy(&c, cfg, cfg->size);
  int kind = 0, rounding = 0, op = 0;
  memcpy(&kind, &c.kind, sizeof(kind));
  memcpy(&rounding, &c.rounding, sizeof(rounding));
  memcpy(&op, &a.op, sizeof(op));
  if (kind != collCompressInt4) {
    return makeError(collInvalidArgument, "collAllReduceCompressed: compression kind %d is not supported (int4 is)",
                     kind);
  }
  const int block = c.blockSize == 0 ? 64 : c.blockSize;
  if (!kernels::validQuantBlockSize(block)) {
    return makeError(collInvalidArgument, "collAllReduceCompressed: blockSize %d is not 32, 64, 128 or 256",
                     c.blockSize);
  }
  if (rounding != collRoundNearest && rounding != collRoundStochastic) {
    return makeError(collInvalidArgument, "collAllReduceCompressed: rounding %d is neither nearest nor stochastic",
                     rounding);
  }
  if (op != collSum && op != collAvg) {
    return makeError(collInvalidArgument, "collAllReduceCompressed: op %d; compression supports sum and avg", op);
  }
  if (a.dtype != collFloat32 && a.dtype != collFloat16 && a.dtype != collBfloat16) {
    return makeError(collInvalidArgument,
                     "collAllReduceCompressed: datatype %d; compression takes float32, float16 "
                     "or bfloat16",
                     static_cast<int>(a.dtype));
  }
  if (residual != nullptr) {
    if (reinterpret_cast<uintptr_t>(residual) % alignof(float) != 0) {
      return makeError(collInvalidArgument, "collAllReduceCompressed: residual is not aligned for float");
    }
    const auto* r = static_cast<const std::byte*>(residual);
    const uint64_t rb = a.count * sizeof(float), ub = a.count * dataTypeSize(a.dtype);
    for (const void* buf : {static_cast<const void*>(a.sendbuff), static_cast<const void*>(a.recvbuff)}) {
      const auto* b = static_cast<const std::byte*>(buf);
      if (b != nullptr && r < b + ub && b < r + rb) {
        return makeError(collInvalidArgument, "collAllReduceCompressed: residual overlaps sendbuff or recvbuff");
      }
    }
  }
  out->blockSize = block;
  out->stochastic = rounding == collRoundStochastic;
  out->seed = c.seed;
  out->step = c.step;
  out->minBytes = c.minBytes != 0 ? c.minBytes : kCompressMinBytes.get();
  out->residual = static_cast<float*>(residual);
  return okStatus();
}

}  // namespace

extern "C" {

collResult_t collAllReduceCompressed(const void* sendbuff, void* recvbuff, size_t count, collDataType_t datatype,
                                     collRedOp_t op, const collCompression_t* cfg, void* residual, collComm_t comm,
                                     collStream_t stream) {
  CollArgs a;
  a.kind = CollKind::AllReduce, a.sendbuff = sendbuff, a.recvbuff = recvbuff, a.count = count;
  a.dtype = datatype, a.op = op;
  Status s = compressionOf(cfg, a, residual, &a.compress);
  if (!s.ok()) return report(s);
  return submit(comm, a, stream);
}

collResult_t collBroadcast(const void* sendbuff, void* recvbuff, size_t count, collDataType_t datatype, int root,
                           collComm_t comm, collStream_t stream) {
  CollArgs a;
  a.kind = CollKind::Broadcast, a.sendbuff = sendbuff, a.recvbuff = recvbuff, a.count = count;
  a.dtype = datatype, a.root = root;
  return submit(comm, a, stream);
}

collResult_t collBcast(void* buff, size_t count, collDataType_t datatype, int root, collComm_t comm,
                       collStream_t stream) {
  return collBroadcast(buff, buff, count, datatype, root, comm, stream);
}

collResult_t collReduce(const void* sendbuff, void* recvbuff, size_t count, collDataType_t datatype, collRedOp_t op,
                        int root, collComm_t comm, collStream_t stream) {
  CollArgs a;
  a.kind = CollKind::Reduce, a.sendbuff = sendbuff, a.recvbuff = recvbuff, a.count = count;
  a.dtype = datatype, a.op = op, a.root = root;
  return submit(comm, a, stream);
}

collResult_t collAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, collDataType_t datatype,
                           collComm_t comm, collStream_t stream) {
  CollArgs a;
  a.kind = CollKind::AllGather, a.sendbuff = sendbuff, a.recvbuff = recvbuff, a.count = sendcount;
  a.dtype = datatype;
  return submit(comm, a, stream);
}

collResult_t collReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, collDataType_t datatype,
                               collRedOp_t op, collComm_t comm, collStream_t stream) {
  CollArgs a;
  a.kind = CollKind::ReduceScatter, a.sendbuff = sendbuff, a.recvbuff = recvbuff, a.count = recvcount;
  a.dtype = datatype, a.op = op;
  return submit(comm, a, stream);
}

collResult_t collAlltoAll(const void* sendbuff, void* recvbuff, size_t count, collDataType_t datatype, collComm_t comm,
                          collStream_t stream) {
  CollArgs a;
  a.kind = CollKind::AlltoAll, a.sendbuff = sendbuff, a.recvbuff = recvbuff, a.count = count;
  a.dtype = datatype;
  return submit(comm, a, stream);
}

collResult_t collGather(const void* sendbuff, void* recvbuff, size_t count, collDataType_t datatype, int root,
                        collComm_t comm, collStream_t stream) {
  CollArgs a;
  a.kind = CollKind::Gather, a.sendbuff = sendbuff, a.recvbuff = recvbuff, a.count = count;
  a.dtype = datatype, a.root = root;
  return submit(comm, a, stream);
}

collResult_t collScatter(const void* sendbuff, void* recvbuff, size_t count, collDataType_t datatype, int root,
                         collComm_t comm, collStream_t stream) {
  CollArgs a;
  a.kind = CollKind::Scatter, a.sendbuff = sendbuff, a.recvbuff = recvbuff, a.count = count;
  a.dtype = datatype, a.root = root;
  return submit(comm, a, stream);
}

collResult_t collSend(const void* sendbuff, size_t count, collDataType_t datatype, int peer, collComm_t comm,
                      collStream_t stream) {
  CollArgs a;
  a.kind = CollKind::Send, a.sendbuff = sendbuff, a.count = count, a.dtype = datatype, a.peer = peer;
  return submit(comm, a, stream);
}

collResult_t collRecv(void* recvbuff, size_t count, collDataType_t datatype, int peer, collComm_t comm,
                      collStream_t stream) {
  CollArgs a;
  a.kind = CollKind::Recv, a.recvbuff = recvbuff, a.count = count, a.dtype = datatype, a.peer = peer;
  return submit(comm, a, stream);
}

collResult_t collBarrier(collComm_t comm, collStream_t stream) {
  CollArgs a;
  a.kind = CollKind::Barrier, a.dtype = collUint8, a.count = 0;
  return submit(comm, a, stream);
}

collResult_t collRedOpCreatePreMulSum(collRedOp_t* op, void* scalar, collDataType_t datatype,
                                      collScalarResidence_t residence, collComm_t comm) {
  Comm* c = nullptr;
  Status s = lookup(comm, &c);
  if (!s.ok()) return report(s);
  if (op == nullptr || scalar == nullptr) {
    return report(makeError(collInvalidArgument, "collRedOpCreatePreMulSum: %s is NULL", op ? "scalar" : "op"));
  }
  s = validateType(datatype);
  if (!s.ok()) return report(s, c->rank());
  int res = 0;
  memcpy(&res, &residence, sizeof(res));
  if (res != collScalarHostImmediate && res != collScalarDevice) {
    return report(makeError(collInvalidArgument, "collRedOpCreatePreMulSum: residence %d is not valid", res),
                  c->rank());
  }
  if (res == collScalarDevice) {
    // The scalar stays where it is and each call reads it when its stream reaches the call.
    gpu::MemInfo info;
    s = gpu::classifyPointer(gpu::cudaDriver(), scalar, &info);
    if (s.ok() && !gpu::onDevice(info.kind) && info.kind != gpu::MemKind::HostPinned) {
      s = makeError(collInvalidArgument,
                    "collRedOpCreatePreMulSum: collScalarDevice needs a scalar in device (or pinned) memory; %p is "
                    "%s (use collScalarHostImmediate)",
                    scalar, gpu::memKindName(info.kind));
    }
    if (!s.ok()) return report(s, c->rank());
    return report(c->createPreMulSum(0.0, scalar, datatype, op), c->rank());
  }
  double value = 0;
  if (!kernels::scalarToDouble(scalar, datatype, &value)) {
    return report(makeError(collInvalidArgument, "collRedOpCreatePreMulSum: datatype %d has no scalar form", datatype),
                  c->rank());
  }
  return report(c->createPreMulSum(value, nullptr, datatype, op), c->rank());
}

collResult_t collRedOpDestroy(collRedOp_t op, collComm_t comm) {
  Comm* c = nullptr;
  Status s = lookup(comm, &c);
  if (!s.ok()) return report(s);
  return report(c->destroyRedOp(op), c->rank());
}

collResult_t collHostStreamCreate(collStream_t* stream) {
  if (stream == nullptr) return report(makeError(collInvalidArgument, "collHostStreamCreate: stream is NULL"));
  return report(createHostStream(stream));
}

collResult_t collHostStreamDestroy(collStream_t stream) { return report(destroyHostStream(stream)); }

collResult_t collHostStreamQuery(collStream_t stream) {
  std::shared_ptr<HostStream> s;
  Status st = findHostStream(stream, &s);
  if (!st.ok()) return report(st);
  std::string message;
  collResult_t r = s->query(&message);
  if (r != collSuccess && r != collInProgress) tLastError = message;
  return r;
}

collResult_t collHostStreamSynchronize(collStream_t stream) {
  std::shared_ptr<HostStream> s;
  Status st = findHostStream(stream, &s);
  if (!st.ok()) return report(st);
  // Each queued operation has its own deadline; this bounds the wait for all of them.
  return report(s->synchronize(Deadline::afterMs(4 * defaultTimeoutMs())));
}

collResult_t collGroupStart(void) {
  tGroupDepth++;
  return collSuccess;
}

collResult_t collGroupEnd(void) {
  if (tGroupDepth == 0) return report(makeError(collInvalidUsage, "collGroupEnd without collGroupStart"));
  if (--tGroupDepth > 0) return collSuccess;
  std::vector<QueuedCall> calls;
  calls.swap(tGroupCalls);
  return report(runGroup(calls));
}

collResult_t collCommSplit(collComm_t comm, int color, int key, collComm_t* newcomm, collConfig_t* config) {
  Comm* c = nullptr;
  Status s = lookup(comm, &c);
  if (!s.ok()) return report(s);
  if (newcomm == nullptr) return report(makeError(collInvalidArgument, "collCommSplit: newcomm is NULL"), c->rank());
  *newcomm = nullptr;
  if (color < 0 && color != COLL_SPLIT_NOCOLOR) {
    return report(makeError(collInvalidArgument, "collCommSplit: color %d must be >= 0 or COLL_SPLIT_NOCOLOR", color),
                  c->rank());
  }
  CommConfig cc = c->config();
  s = validateConfig(config, &cc);
  if (!s.ok()) return report(s, c->rank());
  return report(splitComm(*c, color, key, cc, newcomm), c->rank());
}

collResult_t collCommShrink(collComm_t comm, const int* excludeRanks, int excludeCount, collComm_t* newcomm,
                            collConfig_t* config) {
  Comm* c = nullptr;
  Status s = lookup(comm, &c);
  if (!s.ok()) return report(s);
  if (newcomm == nullptr) return report(makeError(collInvalidArgument, "collCommShrink: newcomm is NULL"), c->rank());
  *newcomm = nullptr;
  CommConfig cc = c->config();
  cc.commName = cc.commName.empty() ? std::string("shrink") : cc.commName + "-shrink";
  s = validateConfig(config, &cc);
  if (!s.ok()) return report(s.withContext("collCommShrink"), c->rank());
  std::unique_ptr<Comm> child;
  s = shrinkComm(*c, excludeRanks, excludeCount, cc, &child);
  if (!s.ok()) return report(s, c->rank());
  *newcomm = registerComm(std::move(child));
  return collSuccess;
}

collResult_t collCommGetUniqueId(collComm_t comm, collUniqueId* growId) {
  Comm* c = nullptr;
  Status s = lookup(comm, &c);
  if (!s.ok()) return report(s.withContext("collCommGetUniqueId"));
  if (growId == nullptr)
    return report(makeError(collInvalidArgument, "collCommGetUniqueId: growId is NULL"), c->rank());
  return report(makeGrowId(*c, growId), c->rank());
}

collResult_t collCommGrow(collComm_t comm, int nranks, const collUniqueId* growId, int rank, collComm_t* newcomm,
                          collConfig_t* config) {
  if (newcomm == nullptr) return report(makeError(collInvalidArgument, "collCommGrow: newcomm is NULL"));
  *newcomm = nullptr;
  std::unique_ptr<Comm> grown;
  if (comm == nullptr) {
    // A newcomer: no communicator, the grow id and the rank it takes.
    if (growId == nullptr) {
      return report(makeError(collInvalidArgument,
                              "collCommGrow: a newcomer (comm NULL) needs the growId of rank 0's collCommGetUniqueId"));
    }
    CommConfig cc;
    cc.commName = "grow";
    Status s = validateConfig(config, &cc);
    if (!s.ok()) return report(s.withContext("collCommGrow"), rank);
    s = growNewcomer(nranks, *growId, rank, cc, &grown);
    if (!s.ok()) return report(s, rank);
  } else {
    Comm* c = nullptr;
    Status s = lookup(comm, &c);
    if (!s.ok()) return report(s.withContext("collCommGrow"));
    if (rank != -1) {
      return report(makeError(collInvalidArgument,
                              "collCommGrow: rank %d on a rank of the communicator that grows: its ranks pass -1 (they "
                              "keep their rank); only newcomers (comm NULL) name theirs",
                              rank),
                    c->rank());
    }
    CommConfig cc = c->config();
    cc.commName = cc.commName.empty() ? std::string("grow") : cc.commName + "-grow";
    s = validateConfig(config, &cc);
    if (!s.ok()) return report(s.withContext("collCommGrow"), c->rank());
    s = growExisting(*c, nranks, growId, cc, &grown);
    if (!s.ok()) return report(s, c->rank());
  }
  *newcomm = registerComm(std::move(grown));
  return collSuccess;
}

collResult_t collCommInitAll(collComm_t* comms, int ndev, const int* devlist) {
  if (comms == nullptr) return report(makeError(collInvalidArgument, "collCommInitAll: comms is NULL"));
  if (ndev < 1) return report(makeError(collInvalidArgument, "collCommInitAll: ndev %d must be >= 1", ndev));
  // Devices: devlist, else 0..ndev-1 where CUDA has that many, else none (host ranks).
  std::string why;
  const gpu::CudaDriver* cu = gpu::cudaDriver(&why);
  std::vector<int> devices(static_cast<size_t>(ndev), -1);
  for (int r = 0; r < ndev; ++r) {
    if (devlist != nullptr) {
      if (cu == nullptr) {
        return report(makeError(collInvalidArgument, "collCommInitAll: a device list without CUDA (%s)", why.c_str()));
      }
      if (devlist[r] < 0 || devlist[r] >= cu->deviceCount) {
        return report(makeError(collInvalidArgument, "collCommInitAll: devlist[%d] = %d, but there are %d device(s)",
                                r, devlist[r], cu->deviceCount));
      }
      devices[r] = devlist[r];
    } else if (cu != nullptr && ndev <= cu->deviceCount) {
      devices[r] = r;
    }
  }
  collUniqueId id;
  Secret secret;
  Status s = randomSecret(&secret);
  if (s.ok()) s = startBootstrapRoot(SocketAddress{}, &secret, &id);
  if (!s.ok()) return report(s);
  std::vector<Status> results(ndev);
  std::vector<std::thread> threads;
  for (int r = 0; r < ndev; ++r) {
    threads.emplace_back([&, r] {
      results[r] = initComm(&comms[r], ndev, id, r, CommConfig{});
      Comm* c = nullptr;
      if (results[r].ok() && devices[r] >= 0 && lookup(comms[r], &c).ok()) results[r] = c->bindDevice(devices[r]);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < ndev; ++r) {
    if (!results[r].ok()) {
      for (int q = 0; q < ndev; ++q) {
        if (results[q].ok()) (void)collCommDestroy(comms[q]);
        comms[q] = nullptr;
      }
      return report(results[r], r);
    }
  }
  return collSuccess;
}

}  // extern "C"
