// The C API: validates arguments, turns calls into CollArgs for the communicator, and never
// touches a socket. Handles are indices into a registry with a generation count, so a call on a
// destroyed communicator is a clean error that never dereferences freed memory.
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collective/collective.h"
#include "core/auth.h"
#include "core/bootstrap.h"
#include "core/coll_args.h"
#include "core/comm.h"
#include "core/env_bootstrap.h"
#include "core/log.h"
#include "core/socket.h"
#include "core/status.h"
#include "exec/schedule.h"

namespace coll {
namespace {

// ---- errors -----------------------------------------------------------------------------------

thread_local std::string tLastError;

collResult_t report(const Status& status, int rank = -1) {
  if (!status.ok()) {
    tLastError = status.message();
    COLL_WARN(rank, "%s", status.message().c_str());
  }
  return status.code();
}

// ---- handle registry ---------------------------------------------------------------------------
// A handle encodes (slot + 1) << 32 | generation. Slots are never freed; a slot's generation
// changes when its communicator is destroyed, so stale handles fail the lookup.

struct Slot {
  std::unique_ptr<Comm> comm;
  uint32_t generation = 1;
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
    if (!slots[i].comm) {
      index = i;
      break;
    }
  }
  if (index == slots.size()) slots.emplace_back();
  slots[index].comm = std::move(comm);
  uint64_t handle = (static_cast<uint64_t>(index + 1) << 32) | slots[index].generation;
  return reinterpret_cast<collComm_t>(static_cast<uintptr_t>(handle));
}

Status lookup(const collComm_t handle, Comm** out) {
  if (handle == nullptr) return makeError(collInvalidArgument, "communicator is NULL");
  uint64_t h = reinterpret_cast<uintptr_t>(handle);
  uint64_t index = (h >> 32) - 1;
  uint32_t generation = static_cast<uint32_t>(h);
  std::lock_guard<std::mutex> lock(gRegistryMu);
  auto& slots = registry();
  if ((h >> 32) == 0 || index >= slots.size() || !slots[index].comm || slots[index].generation != generation) {
    return makeError(collInvalidArgument,
                     "communicator %p is not valid (destroyed, aborted, or never created)", static_cast<void*>(handle));
  }
  *out = slots[index].comm.get();
  return okStatus();
}

// Removes the communicator from the registry and returns it for destruction outside the lock.
Status unregister(collComm_t handle, std::unique_ptr<Comm>* out) {
  Comm* comm = nullptr;
  COLL_TRY(lookup(handle, &comm));
  uint64_t index = (reinterpret_cast<uintptr_t>(handle) >> 32) - 1;
  std::lock_guard<std::mutex> lock(gRegistryMu);
  Slot& slot = registry()[index];
  *out = std::move(slot.comm);
  slot.generation++;
  if (slot.generation == 0) slot.generation = 1;
  return okStatus();
}

// ---- groups ---------------------------------------------------------------------------------------

struct QueuedCall {
  collComm_t comm;
  CollArgs args;
};
thread_local int tGroupDepth = 0;
thread_local std::vector<QueuedCall> tGroupCalls;

// ---- argument validation -------------------------------------------------------------------------

Status validateConfig(const collConfig_t* config, CommConfig* out) {
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
    return makeError(collInvalidUsage, "non-blocking communicators (config.blocking=0) are not supported yet");
  }
  if (has(offsetof(collConfig_t, timeoutMs), sizeof(int)) && config->timeoutMs != COLL_CONFIG_UNDEF_INT) {
    if (config->timeoutMs <= 0) return makeError(collInvalidArgument, "config.timeoutMs must be > 0");
    out->timeoutMs = config->timeoutMs;
  }
  if (has(offsetof(collConfig_t, netName), sizeof(char*)) && config->netName) out->netName = config->netName;
  if (has(offsetof(collConfig_t, commName), sizeof(char*)) && config->commName) out->commName = config->commName;
  return okStatus();
}

Status validateAllReduce(const void* sendbuff, void* recvbuff, size_t count, collDataType_t datatype,
                         collRedOp_t op, collStream_t stream) {
  if (static_cast<int>(datatype) < 0 || datatype >= collNumTypes) {
    return makeError(collInvalidArgument, "invalid datatype %d", static_cast<int>(datatype));
  }
  if (datatype == collFloat8e4m3 || datatype == collFloat8e5m2) {
    return makeError(collInvalidArgument, "float8 datatypes are reserved and not supported yet");
  }
  if (static_cast<int>(op) < 0 || op >= collNumOps) {
    return makeError(collInvalidArgument, "invalid reduction op %d", static_cast<int>(op));
  }
  const size_t es = dataTypeSize(datatype);
  // Element counts are bounded by the executor's progress encoding (2^40) and byte sizes by size_t.
  if (count > (static_cast<size_t>(1) << 40) || count > SIZE_MAX / es) {
    return makeError(collInvalidArgument, "count %zu is too large (at most 2^40 elements)", count);
  }
  if (count > 0 && (sendbuff == nullptr || recvbuff == nullptr)) {
    return makeError(collInvalidArgument, "%s is NULL with count %zu", sendbuff == nullptr ? "sendbuff" : "recvbuff",
                     count);
  }
  if (count > 0 && sendbuff != recvbuff) {
    uintptr_t s = reinterpret_cast<uintptr_t>(sendbuff), r = reinterpret_cast<uintptr_t>(recvbuff);
    size_t bytes = count * es;
    if (s < r + bytes && r < s + bytes) {
      return makeError(collInvalidArgument,
                       "sendbuff and recvbuff overlap without being equal (in-place calls pass the same pointer)");
    }
  }
  if (stream != nullptr) {
    return makeError(collInvalidUsage,
                     "host streams are not supported in this release: pass NULL to run the call now");
  }
  return okStatus();
}

Status initComm(collComm_t* out, int nranks, const collUniqueId& id, int rank, const CommConfig& config) {
  if (out == nullptr) return makeError(collInvalidArgument, "comm (output pointer) is NULL");
  *out = nullptr;
  if (nranks < 1 || nranks > (1 << 24)) return makeError(collInvalidArgument, "nranks %d is out of range", nranks);
  if (rank < 0 || rank >= nranks) {
    return makeError(collInvalidArgument, "rank %d is out of range for %d ranks", rank, nranks);
  }
  std::unique_ptr<Comm> comm;
  COLL_TRY(Comm::create(id, nranks, rank, config, &comm));
  *out = registerComm(std::move(comm));
  return okStatus();
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

collResult_t collCommInitRankConfig(collComm_t* comm, int nranks, collUniqueId commId, int rank,
                                    collConfig_t* config) {
  CommConfig cc;
  Status s = validateConfig(config, &cc);
  if (!s.ok()) return report(s, rank);
  return report(initComm(comm, nranks, commId, rank, cc), rank);
}

collResult_t collCommInitFromEnv(collComm_t* comm, collConfig_t* config) {
  if (comm == nullptr) return report(makeError(collInvalidArgument, "comm (output pointer) is NULL"));
  CommConfig cc;
  Status s = validateConfig(config, &cc);
  if (!s.ok()) return report(s);
  EnvBootstrap env;
  s = resolveEnvBootstrap(&env);
  if (!s.ok()) return report(s);
  collUniqueId id;
  s = envUniqueId(env, env.rank == 0, &id);
  if (!s.ok()) return report(s, env.rank);
  return report(initComm(comm, env.nranks, id, env.rank, cc), env.rank);
}

collResult_t collCommFinalize(collComm_t comm) {
  Comm* c = nullptr;
  Status s = lookup(comm, &c);
  if (!s.ok()) return report(s);
  // Blocking communicators have no outstanding work when control returns to the caller.
  return collSuccess;
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
  c->abort();
  c.reset();
  return collSuccess;
}

collResult_t collCommGetAsyncError(collComm_t comm, collResult_t* asyncError) {
  if (asyncError == nullptr) return report(makeError(collInvalidArgument, "asyncError is NULL"));
  Comm* c = nullptr;
  Status s = lookup(comm, &c);
  if (!s.ok()) return report(s);
  *asyncError = c->asyncError();
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

collResult_t collAllReduce(const void* sendbuff, void* recvbuff, size_t count, collDataType_t datatype,
                           collRedOp_t op, collComm_t comm, collStream_t stream) {
  Comm* c = nullptr;
  Status s = lookup(comm, &c);
  if (!s.ok()) return report(s);
  s = validateAllReduce(sendbuff, recvbuff, count, datatype, op, stream);
  if (!s.ok()) return report(s, c->rank());
  CollArgs args;
  args.kind = CollKind::AllReduce;
  args.sendbuff = sendbuff;
  args.recvbuff = recvbuff;
  args.count = count;
  args.dtype = datatype;
  args.op = op;
  if (tGroupDepth > 0) {
    tGroupCalls.push_back(QueuedCall{comm, args});
    return collSuccess;
  }
  if (count == 0) return collSuccess;
  return report(c->allReduce(args), c->rank());
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
  // Every rank queued the same calls in the same order, so running them in order cannot deadlock.
  collResult_t first = collSuccess;
  for (const QueuedCall& call : calls) {
    Comm* c = nullptr;
    Status s = lookup(call.comm, &c);
    if (s.ok() && call.args.count > 0) s = c->allReduce(call.args);
    if (!s.ok() && first == collSuccess) first = report(s, c ? c->rank() : -1);
  }
  return first;
}

}  // extern "C"
