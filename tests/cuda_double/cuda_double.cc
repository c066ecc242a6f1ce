// CUDA driver test double: the driver functions of src/gpu/cuda_abi.h (COLL_CUDA_DRIVER_FUNCTIONS)
// implemented on the host, not a GPU. Device memory is a memfd per allocation, reached by the double
// through a private read/write "shadow" mapping while its device address lies in a PROT_NONE arena
// (host code touching it faults, as on a GPU); streams are worker threads running their operations
// in order; kernels are the host builds of the device kernels (host_kernels.h); IPC handles name the
// owner's memfd, opened by other processes through /proc/<pid>/fd. The VMM functions of
// COLL_CUDA_DRIVER_OPTIONAL_FUNCTIONS map memfds of their own into reserved arena ranges and share
// them as POSIX file descriptors. README.md lists what is modelled.
#include "tests/cuda_double/cuda_double.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tests/cuda_double/host_kernels.h"

#define COLL_DOUBLE_EXPORT extern "C" __attribute__((visibility("default")))

namespace coll::cuda_double {
// Optional in host_kernels.cc: the byte size of each parameter of kernel `name` (up to `max`),
// returning how many it has, or -1 for an unknown kernel. With it a launch copies its arguments
// at once and runs asynchronously; without it (weak, null) a launch waits for the stream to be idle
// and runs the kernel before it returns (the arguments' storage is the caller's).
int hostKernelParamSizes(const char* name, size_t* sizes, int max) __attribute__((weak));
}  // namespace coll::cuda_double

namespace {

using namespace coll;
using coll::cuda_double::HostKernel;
using coll::cuda_double::LaunchDims;

// Results this file names beyond cuda_abi.h's (cuda.h names).
constexpr CUresult kMapFailed = 205;               // CUDA_ERROR_MAP_FAILED
constexpr CUresult kIllegalState = 401;            // CUDA_ERROR_ILLEGAL_STATE
constexpr CUresult kHostNotRegistered = 713;       // CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED
constexpr CUresult kNotPermitted = 800;            // CUDA_ERROR_NOT_PERMITTED
constexpr int kDeviceInvalid = -2;                 // CU_DEVICE_INVALID

constexpr int kDriverVersion = 13000;
constexpr size_t kPage = 4096;
// The device address space of the process: 64 GiB, or COLL_CUDA_DOUBLE_ARENA_MB (valgrind cannot
// reserve that much).
size_t arenaBytes() {
  static const size_t bytes = [] {
    const char* mb = std::getenv("COLL_CUDA_DOUBLE_ARENA_MB");
    const long long v = mb ? std::atoll(mb) : 0;
    return v > 0 ? static_cast<size_t>(v) << 20 : size_t{64} << 30;
  }();
  return bytes;
}
constexpr uint32_t kIpcMagic = 0x44554343;        // "CCUD"
constexpr const char* kMemfdPrefix = "coll-cuda-double-";
// cuMemCreate's memfds are named kMemfdPrefix + "vmm-d<device>-<id>": an importer finds the device
// there, and the legacy IPC check (kMemfdPrefix + "<buffer id> ") never matches one.
constexpr const char* kVmmMemfdTag = "vmm-d";
// cuMemGetAllocationGranularity, both options (what current GPUs report).
constexpr size_t kVmmGranularity = size_t{2} << 20;

size_t roundUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

// ---- memory ------------------------------------------------------------------------------------

struct Context;

// A physical allocation of the VMM API: from cuMemCreate, or a handle imported from a shareable fd
// (its own dup of the exporter's memfd). Under State::memMu, except the constant fields.
struct VmmAlloc {
  CUmemGenericAllocationHandle handle = 0;
  size_t size = 0;  // a multiple of kVmmGranularity
  int device = 0;
  int memfd = -1;
  int handleTypes = 0;    // requestedHandleTypes (imported: POSIX fd, it came as one)
  bool imported = false;  // not charged to the per-device limit (the exporter's memory)
  bool released = false;  // cuMemRelease called: the handle is gone, mappings keep the memory
  int mappings = 0;       // live cuMemMap ranges
  ~VmmAlloc() {
    if (memfd >= 0) close(memfd);
  }
};

// One range of device memory: an allocation of this process, a mapping opened from a handle, or a
// cuMemMap mapping of a VmmAlloc.
struct DeviceRange {
  uintptr_t base = 0;    // device address (in the arena)
  size_t size = 0;       // bytes as asked
  size_t mapped = 0;     // page-rounded
  void* shadow = nullptr;  // where the bytes are, for the double
  int memfd = -1;        // -1 for an opened mapping (its fd is closed after mmap)
  uint64_t bufferId = 0;
  Context* ctx = nullptr;
  bool imported = false;
  pid_t ownerPid = 0;      // imported: the exporter and its buffer id (the refcount key)
  uint64_t ownerBuffer = 0;
  int importRefs = 0;
  // cuMemMap: the allocation mapped (kept open while the range is), and the devices cuMemSetAccess
  // gave read-write access (bit per ordinal); copies and kernels need their device's bit.
  std::shared_ptr<VmmAlloc> vmm;
  uint64_t accessMask = 0;
  ~DeviceRange() {
    if (shadow != nullptr) munmap(shadow, mapped);
    if (memfd >= 0) close(memfd);
  }
};

// Pinned host memory: from cuMemHostAlloc (owned) or cuMemHostRegister.
struct HostRange {
  uintptr_t base = 0;
  size_t size = 0;
  uint64_t bufferId = 0;
  Context* ctx = nullptr;
  bool owned = false;
};

// ---- contexts, streams -------------------------------------------------------------------------

struct StreamCore;
using StreamRef = std::shared_ptr<StreamCore>;

struct Context {
  int device = 0;
  int retains = 0;
  CUresult sticky = cu::kSuccess;  // under State::mu
  StreamRef legacy;                // created with the context
  std::vector<StreamRef> blocking;  // live blocking streams (explicit and per-thread), under mu
};

struct Op {
  std::function<CUresult()> run;  // empty: a marker (event record, wait)
  std::vector<std::pair<StreamRef, uint64_t>> deps;  // (stream, completed count it needs)
};

struct StreamCore {
  Context* ctx = nullptr;
  bool legacy = false;
  bool blocking = true;
  // Under State::mu:
  uint64_t enqueued = 0, completed = 0;
  std::deque<Op> queue;
  bool closing = false;
  bool capturing = false;
  bool captureInvalidated = false;
};

struct Event {
  unsigned flags = 0;
  StreamRef stream;  // the last record (under State::mu); null: never recorded
  uint64_t seq = 0;
};

struct Function {
  std::string name;
  HostKernel kernel = nullptr;
  std::vector<size_t> paramSizes;
  bool sized = false;
};

struct Module {
  Context* ctx = nullptr;
  std::map<std::string, std::unique_ptr<Function>> functions;
};

struct State {
  // Streams, events, contexts, capture: one lock and one condition for every completion.
  std::mutex mu;
  std::condition_variable cv;
  bool initialized = false;
  int deviceCount = 0;
  std::vector<std::unique_ptr<Context>> contexts;  // one primary context per device
  std::unordered_map<StreamCore*, StreamRef> streams;  // explicit streams by handle
  std::unordered_map<Event*, std::unique_ptr<Event>> events;
  std::unordered_map<Module*, std::unique_ptr<Module>> modules;
  uint64_t generation = 1;

  // Memory: its own lock (never held with mu).
  std::mutex memMu;
  uintptr_t arena = 0;
  uintptr_t arenaNext = 0;  // bump pointer; freed ranges are reused only when the arena is exhausted
  std::map<uintptr_t, size_t> arenaFree;
  std::map<uintptr_t, std::shared_ptr<DeviceRange>> device;  // by base
  std::map<uintptr_t, HostRange> host;                       // by base
  uint64_t nextBufferId = 1;
  size_t deviceBytes = 0;
  int deviceAllocations = 0;
  size_t hostBytes = 0;
  int hostRegistrations = 0;
  size_t memoryLimit = size_t{16} << 30;
  std::vector<size_t> bytesPerDevice;
  // VMM: live handles, and the reserved ranges (by aligned base) with the arena extent each took.
  struct Reservation {
    size_t size = 0;
    uintptr_t taken = 0;
    size_t takenBytes = 0;
  };
  std::map<CUmemGenericAllocationHandle, std::shared_ptr<VmmAlloc>> vmmHandles;
  CUmemGenericAllocationHandle nextVmmHandle = 0x7000;
  std::map<uintptr_t, Reservation> reservations;
  bool vmmSupported = true;  // COLL_CUDA_DOUBLE_VMM=0 at cuInit: false (set before `initialized`)

  // Error injection.
  std::mutex injectMu;
  std::map<std::string, std::pair<int, CUresult>> inject;
  std::atomic<int> injectPending{0};
};

State* gState = new State();  // never destroyed: detached stream workers may use it at exit
std::atomic<bool> gForkedAfterInit{false};

void onForkChild() {
  // A child of a process that initialized CUDA cannot use it (the driver refuses); it has no
  // stream workers either. Nothing here takes a lock another thread may have held at fork.
  if (gState->initialized) gForkedAfterInit.store(true);
}

struct AtForkInstaller {
  AtForkInstaller() { pthread_atfork(nullptr, nullptr, &onForkChild); }
} gAtFork;

// ---- per-thread state: context stack and per-thread default streams -----------------------------

struct ThreadState {
  std::vector<Context*> stack;
  std::map<Context*, StreamRef> perThread;
  ~ThreadState();
};
thread_local ThreadState tls;

Context* currentContext() { return tls.stack.empty() ? nullptr : tls.stack.back(); }

// ---- entry checks -------------------------------------------------------------------------------

std::string baseName(const char* name) {
  std::string s = name;
  if (s.size() > 3 && s.compare(s.size() - 3, 3, "_v2") == 0) s.resize(s.size() - 3);
  return s;
}

bool exported(const std::string& name) {
  static const char* const kNames[] = {
#define COLL_DOUBLE_NAME(code, symbol, params) #code,
      // clang-format off
      COLL_CUDA_DRIVER_FUNCTIONS(COLL_DOUBLE_NAME)
      COLL_CUDA_DRIVER_OPTIONAL_FUNCTIONS(COLL_DOUBLE_NAME)
      // clang-format on
#undef COLL_DOUBLE_NAME
      "cuStreamBeginCapture", "cuStreamEndCapture"};
  for (const char* n : kNames) {
    if (name == n) return true;
  }
  return false;
}

CUresult injected(const char* name) {
  State& g = *gState;
  if (g.injectPending.load(std::memory_order_acquire) == 0) return cu::kSuccess;
  std::lock_guard<std::mutex> lock(g.injectMu);
  auto it = g.inject.find(name);
  if (it == g.inject.end() || it->second.first <= 0) return cu::kSuccess;
  const CUresult r = it->second.second;
  if (--it->second.first == 0) {
    g.inject.erase(it);
    g.injectPending.fetch_sub(1);
  }
  return r;
}

// The common start of a driver function: injected failures, a forked child, cuInit not called.
#define DOUBLE_ENTER(name, needsInit)                                        \
  do {                                                                       \
    if (gForkedAfterInit.load(std::memory_order_relaxed)) return cu::kErrorNotInitialized; \
    if (CUresult injected_ = injected(name); injected_ != cu::kSuccess) return injected_; \
    if ((needsInit) && !initializedNow()) return cu::kErrorNotInitialized;   \
  } while (0)

bool initializedNow() {
  std::lock_guard<std::mutex> lock(gState->mu);
  return gState->initialized;
}

// ---- arena ---------------------------------------------------------------------------------------

bool ensureArena(State& g) {  // memMu held
  if (g.arena != 0) return true;
  void* p = mmap(nullptr, arenaBytes(), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  g.arena = reinterpret_cast<uintptr_t>(p);
  g.arenaNext = g.arena;
  return true;
}

bool inArena(const State& g, uintptr_t a) { return g.arena != 0 && a >= g.arena && a < g.arena + arenaBytes(); }

// A device address range of `bytes` (page multiple) with a guard page after it; 0 when exhausted.
uintptr_t arenaTake(State& g, size_t bytes) {  // memMu held
  const size_t need = bytes + kPage;
  if (g.arenaNext + need <= g.arena + arenaBytes()) {
    const uintptr_t a = g.arenaNext;
    g.arenaNext += need;
    return a;
  }
  for (auto it = g.arenaFree.begin(); it != g.arenaFree.end(); ++it) {
    if (it->second >= need) {
      const uintptr_t a = it->first;
      const size_t left = it->second - need;
      g.arenaFree.erase(it);
      if (left > 0) g.arenaFree[a + need] = left;
      return a;
    }
  }
  return 0;
}

void arenaGive(State& g, uintptr_t a, size_t bytes) { g.arenaFree[a] = bytes + kPage; }  // memMu held

// The live device range containing `a` (memMu held); null when none.
std::shared_ptr<DeviceRange> findDevice(State& g, uintptr_t a) {
  auto it = g.device.upper_bound(a);
  if (it == g.device.begin()) return nullptr;
  --it;
  const DeviceRange& r = *it->second;
  if (a >= r.base && a < r.base + std::max<size_t>(r.size, 1)) return it->second;
  return nullptr;
}

const HostRange* findHost(State& g, uintptr_t a) {  // memMu held
  auto it = g.host.upper_bound(a);
  if (it == g.host.begin()) return nullptr;
  --it;
  if (a >= it->second.base && a < it->second.base + it->second.size) return &it->second;
  return nullptr;
}

// The device whose work is running on this thread (a stream worker's context, a kernel run by the
// launching thread); -1 elsewhere. VMM mappings are usable only by the devices given access.
thread_local int tlsAccessDevice = -1;

// Whether the running work may touch range `r` (memMu held): always for cuMemAlloc and IPC memory;
// a VMM mapping needs cuMemSetAccess for the accessing device (any device, when not known).
bool accessible(const DeviceRange& r) {
  if (!r.vmm) return true;
  if (tlsAccessDevice < 0 || tlsAccessDevice >= 64) return r.accessMask != 0;
  return (r.accessMask >> tlsAccessDevice) & 1;
}

// An address an operation reads or writes: the device range kept alive while the operation uses it.
struct Resolved {
  void* p = nullptr;
  std::shared_ptr<DeviceRange> keep;
};

// Device address -> shadow (checking [a, a+bytes) lies inside the range); host address unchanged.
// False for a device address outside live device memory.
bool resolve(uintptr_t a, size_t bytes, Resolved* out) {
  State& g = *gState;
  std::lock_guard<std::mutex> lock(g.memMu);
  if (!inArena(g, a)) {
    out->p = reinterpret_cast<void*>(a);
    return true;
  }
  std::shared_ptr<DeviceRange> r = findDevice(g, a);
  if (!r || bytes > r->size - (a - r->base) || !accessible(*r)) return false;  // an illegal address
  out->p = static_cast<char*>(r->shadow) + (a - r->base);
  out->keep = std::move(r);
  return true;
}

// The kernels' translate function: the ranges it resolves stay alive until the kernel returns.
thread_local std::vector<std::shared_ptr<DeviceRange>>* tlsKernelKeep = nullptr;

void* translateForKernel(const void* address) {
  Resolved r;
  if (!resolve(reinterpret_cast<uintptr_t>(address), 0, &r)) return nullptr;
  if (r.keep && tlsKernelKeep != nullptr) tlsKernelKeep->push_back(std::move(r.keep));
  return r.p;
}

// ---- streams --------------------------------------------------------------------------------------

bool depsDone(const Op& op) {
  for (const auto& d : op.deps) {
    if (d.first->completed < d.second) return false;
  }
  return true;
}

void workerLoop(StreamRef s) {
  State& g = *gState;
  tlsAccessDevice = s->ctx->device;  // the context's device does this stream's work
  std::unique_lock<std::mutex> lock(g.mu);
  for (;;) {
    g.cv.wait(lock, [&] { return !s->queue.empty() || s->closing; });
    if (s->queue.empty()) break;  // closing and drained
    g.cv.wait(lock, [&] { return depsDone(s->queue.front()); });
    std::function<CUresult()> run = std::move(s->queue.front().run);
    s->queue.front().deps.clear();
    CUresult r = cu::kSuccess;
    if (run && s->ctx->sticky == cu::kSuccess) {  // after a fault the context runs nothing more
      lock.unlock();
      r = run();
      run = nullptr;
      lock.lock();
    }
    if (r != cu::kSuccess && s->ctx->sticky == cu::kSuccess) s->ctx->sticky = r;
    s->queue.pop_front();
    ++s->completed;
    g.cv.notify_all();
  }
}

StreamRef newStream(Context* ctx, bool legacy, bool blocking) {  // mu held
  auto s = std::make_shared<StreamCore>();
  s->ctx = ctx;
  s->legacy = legacy;
  s->blocking = blocking;
  std::thread(workerLoop, s).detach();  // drains its queue after destroy, then ends
  if (blocking && !legacy) ctx->blocking.push_back(s);
  return s;
}

void closeStream(const StreamRef& s) {  // mu held
  s->closing = true;
  auto& b = s->ctx->blocking;
  b.erase(std::remove(b.begin(), b.end(), s), b.end());
  gState->cv.notify_all();
}

ThreadState::~ThreadState() {
  if (perThread.empty()) return;
  std::lock_guard<std::mutex> lock(gState->mu);
  for (auto& [ctx, s] : perThread) closeStream(s);
}

constexpr uintptr_t kLegacyHandle = 0x1;
constexpr uintptr_t kPerThreadHandle = 0x2;

// The stream a handle names (mu held): 0 and 0x1 the current context's legacy stream, 0x2 this
// thread's default stream of the current context, else an explicit stream.
CUresult streamOf(CUstream h, StreamRef* out) {
  State& g = *gState;
  const uintptr_t v = reinterpret_cast<uintptr_t>(h);
  if (v == 0 || v == kLegacyHandle || v == kPerThreadHandle) {
    Context* ctx = currentContext();
    if (ctx == nullptr || ctx->retains <= 0) return cu::kErrorInvalidContext;
    if (v != kPerThreadHandle) {
      *out = ctx->legacy;
      return cu::kSuccess;
    }
    StreamRef& s = tls.perThread[ctx];
    if (!s) s = newStream(ctx, false, true);
    *out = s;
    return cu::kSuccess;
  }
  auto it = g.streams.find(reinterpret_cast<StreamCore*>(h));
  if (it == g.streams.end()) return cu::kErrorInvalidHandle;
  *out = it->second;
  return cu::kSuccess;
}

// Appends an operation (mu held), with the legacy stream's implicit synchronization. Returns its
// sequence number (the stream's completed count once it has run).
uint64_t enqueue(const StreamRef& s, std::function<CUresult()> run, std::vector<std::pair<StreamRef, uint64_t>> deps = {}) {
  Op op;
  op.run = std::move(run);
  op.deps = std::move(deps);
  if (s->legacy) {
    for (const StreamRef& b : s->ctx->blocking) {
      if (b->enqueued > b->completed) op.deps.emplace_back(b, b->enqueued);
    }
  } else if (s->blocking) {
    const StreamRef& l = s->ctx->legacy;
    if (l->enqueued > l->completed) op.deps.emplace_back(l, l->enqueued);
  }
  s->queue.push_back(std::move(op));
  ++s->enqueued;
  gState->cv.notify_all();
  return s->enqueued;
}

// Common part of every stream-ordered call: resolves the stream; while it captures, the operation
// is recorded (dropped here) instead of run. *captured tells which.
CUresult beginStreamOp(CUstream h, StreamRef* s, bool* captured) {
  CUresult r = streamOf(h, s);
  if (r != cu::kSuccess) return r;
  if ((*s)->ctx->sticky != cu::kSuccess) return (*s)->ctx->sticky;
  *captured = (*s)->capturing;
  return cu::kSuccess;
}

// Enqueues `run` on stream handle `h` (the shape of cuMemcpyAsync and friends).
CUresult streamOp(CUstream h, std::function<CUresult()> run) {
  std::lock_guard<std::mutex> lock(gState->mu);
  StreamRef s;
  bool captured = false;
  CUresult r = beginStreamOp(h, &s, &captured);
  if (r != cu::kSuccess || captured) return r;
  enqueue(s, std::move(run));
  return cu::kSuccess;
}

// The waits that complete the work queued on `s` so far (mu held). The legacy stream's include
// the blocking streams' work, as work queued on it would wait for them.
std::vector<std::pair<StreamRef, uint64_t>> syncPoints(const StreamRef& s) {
  std::vector<std::pair<StreamRef, uint64_t>> points{{s, s->enqueued}};
  if (s->legacy) {
    for (const StreamRef& b : s->ctx->blocking) points.emplace_back(b, b->enqueued);
  }
  return points;
}

bool reached(const std::vector<std::pair<StreamRef, uint64_t>>& points) {
  for (const auto& p : points) {
    if (p.first->completed < p.second) return false;
  }
  return true;
}

// Sleeps between polls of memory (no condition tells the double when another process writes).
void pollPause(int round) {
  State& g = *gState;
  std::unique_lock<std::mutex> lock(g.mu);
  const auto us = std::chrono::microseconds(round < 100 ? 10 : (round < 1000 ? 100 : 1000));
  g.cv.wait_for(lock, us);  // cuStreamWriteValue32 in this process wakes it at once
}

// ---- error strings -------------------------------------------------------------------------------

struct ErrorText {
  CUresult code;
  const char* name;
  const char* text;
};
const ErrorText kErrors[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {205, "CUDA_ERROR_MAP_FAILED", "mapping of buffer object failed"},
    {208, "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped"},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
    {217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", "peer access is not supported between these two devices"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {401, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {702, "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
    {709, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "part or all of the requested memory range is already mapped"},
    {713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "pointer does not correspond to a registered memory region"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {800, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing"},
    {901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "operation failed due to a previous error during capture"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

const ErrorText* errorText(CUresult r) {
  for (const ErrorText& e : kErrors) {
    if (e.code == r) return &e;
  }
  return nullptr;
}

// Context needed by a call: the current one, live.
CUresult needContext(Context** out) {
  Context* ctx = currentContext();
  if (ctx == nullptr) return cu::kErrorInvalidContext;
  {
    std::lock_guard<std::mutex> lock(gState->mu);
    if (ctx->retains <= 0) return cu::kErrorInvalidContext;
    if (ctx->sticky != cu::kSuccess) return ctx->sticky;
  }
  *out = ctx;
  return cu::kSuccess;
}

int envDevices() {
  const char* v = std::getenv("COLL_CUDA_DOUBLE_DEVICES");
  if (v == nullptr || *v == '\0') return 1;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 0 || n > 64) return 1;
  return static_cast<int>(n);
}

// A device's PCI address: the dev-th entry of COLL_CUDA_DOUBLE_BUSIDS ("DDDD:BB:DD.F,..."), so a
// test can place its devices in a topology file; else domain 0, bus 0x10 + dev.
struct PciAddress {
  unsigned domain = 0, bus = 0, device = 0, function = 0;
};
PciAddress pciAddressOf(CUdevice dev) {
  PciAddress a;
  a.bus = 0x10 + static_cast<unsigned>(dev);
  const char* list = std::getenv("COLL_CUDA_DOUBLE_BUSIDS");
  if (list == nullptr) return a;
  const char* p = list;
  for (int i = 0; i < dev && p != nullptr; ++i) {
    p = std::strchr(p, ',');
    if (p != nullptr) ++p;
  }
  PciAddress parsed;
  if (p != nullptr && std::sscanf(p, "%x:%x:%x.%x", &parsed.domain, &parsed.bus, &parsed.device, &parsed.function) == 4)
    return parsed;
  return a;
}

CUresult validDevice(CUdevice dev) {
  return dev >= 0 && dev < gState->deviceCount ? cu::kSuccess : cu::kErrorInvalidDevice;
}

}  // namespace

// =================================================================================================
// Driver functions
// =================================================================================================

COLL_DOUBLE_EXPORT CUresult cuInit(unsigned int flags) {
  DOUBLE_ENTER("cuInit", false);
  if (flags != 0) return cu::kErrorInvalidValue;
  State& g = *gState;
  std::lock_guard<std::mutex> lock(g.mu);
  if (!g.initialized) {
    g.deviceCount = envDevices();
    if (g.deviceCount == 0) return cu::kErrorNoDevice;
    const char* vmm = std::getenv("COLL_CUDA_DOUBLE_VMM");
    g.vmmSupported = !(vmm != nullptr && std::strcmp(vmm, "0") == 0);
    for (int d = 0; d < g.deviceCount; ++d) {
      auto ctx = std::make_unique<Context>();
      ctx->device = d;
      ctx->legacy = newStream(ctx.get(), true, true);
      g.contexts.push_back(std::move(ctx));
    }
    {
      std::lock_guard<std::mutex> memLock(g.memMu);
      g.bytesPerDevice.assign(g.deviceCount, 0);
    }
    g.initialized = true;
  }
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuDriverGetVersion(int* version) {
  DOUBLE_ENTER("cuDriverGetVersion", false);
  if (version == nullptr) return cu::kErrorInvalidValue;
  *version = kDriverVersion;
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuGetErrorString(CUresult error, const char** str) {
  if (str == nullptr) return cu::kErrorInvalidValue;
  const ErrorText* e = errorText(error);
  *str = e ? e->text : nullptr;
  return e ? cu::kSuccess : cu::kErrorInvalidValue;
}

COLL_DOUBLE_EXPORT CUresult cuGetErrorName(CUresult error, const char** str) {
  if (str == nullptr) return cu::kErrorInvalidValue;
  const ErrorText* e = errorText(error);
  *str = e ? e->name : nullptr;
  return e ? cu::kSuccess : cu::kErrorInvalidValue;
}

COLL_DOUBLE_EXPORT CUresult cuDeviceGetCount(int* count) {
  DOUBLE_ENTER("cuDeviceGetCount", true);
  if (count == nullptr) return cu::kErrorInvalidValue;
  *count = gState->deviceCount;
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  DOUBLE_ENTER("cuDeviceGet", true);
  if (device == nullptr) return cu::kErrorInvalidValue;
  if (validDevice(ordinal) != cu::kSuccess) return cu::kErrorInvalidDevice;
  *device = ordinal;
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuDeviceGetAttribute(int* pi, int attrib, CUdevice dev) {
  DOUBLE_ENTER("cuDeviceGetAttribute", true);
  if (pi == nullptr) return cu::kErrorInvalidValue;
  if (validDevice(dev) != cu::kSuccess) return cu::kErrorInvalidDevice;
  switch (attrib) {
    case 1: *pi = 1024; break;                                   // MAX_THREADS_PER_BLOCK
    case 2: case 3: *pi = 1024; break;                           // MAX_BLOCK_DIM_X/Y
    case 4: *pi = 64; break;                                     // MAX_BLOCK_DIM_Z
    case 5: *pi = 2147483647; break;                             // MAX_GRID_DIM_X
    case 6: case 7: *pi = 65535; break;                          // MAX_GRID_DIM_Y/Z
    case 8: *pi = 49152; break;                                  // MAX_SHARED_MEMORY_PER_BLOCK
    case 10: *pi = 32; break;                                    // WARP_SIZE
    case cu::kDeviceAttributeMultiprocessorCount: *pi = 4; break;
    case cu::kDeviceAttributePciBusId: *pi = static_cast<int>(pciAddressOf(dev).bus); break;  // distinct per device
    case cu::kDeviceAttributePciDeviceId: *pi = static_cast<int>(pciAddressOf(dev).device); break;
    case cu::kDeviceAttributeUnifiedAddressing: *pi = 1; break;
    case cu::kDeviceAttributePciDomainId: *pi = static_cast<int>(pciAddressOf(dev).domain); break;
    case 75: *pi = 9; break;                                     // COMPUTE_CAPABILITY_MAJOR
    case 76: *pi = 0; break;                                     // COMPUTE_CAPABILITY_MINOR
    case cu::kDeviceAttributeVirtualMemoryManagementSupported:   // COLL_CUDA_DOUBLE_VMM=0: neither
    case cu::kDeviceAttributeHandleTypePosixFileDescriptorSupported: *pi = gState->vmmSupported ? 1 : 0; break;
    default: return cu::kErrorInvalidValue;  // not modelled (README)
  }
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuDeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev) {
  DOUBLE_ENTER("cuDeviceGetPCIBusId", true);
  if (pciBusId == nullptr || len <= 0) return cu::kErrorInvalidValue;
  if (validDevice(dev) != cu::kSuccess) return cu::kErrorInvalidDevice;
  const PciAddress a = pciAddressOf(dev);
  char id[32];
  std::snprintf(id, sizeof(id), "%04x:%02x:%02x.%x", a.domain, a.bus, a.device, a.function);
  std::snprintf(pciBusId, static_cast<size_t>(len), "%s", id);  // truncated like the driver
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuDeviceCanAccessPeer(int* canAccessPeer, CUdevice dev, CUdevice peerDev) {
  DOUBLE_ENTER("cuDeviceCanAccessPeer", true);
  if (canAccessPeer == nullptr) return cu::kErrorInvalidValue;
  if (validDevice(dev) != cu::kSuccess || validDevice(peerDev) != cu::kSuccess) return cu::kErrorInvalidDevice;
  *canAccessPeer = dev != peerDev ? 1 : 0;  // the driver answers 0 for a device and itself
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  DOUBLE_ENTER("cuDevicePrimaryCtxRetain", true);
  if (pctx == nullptr) return cu::kErrorInvalidValue;
  if (validDevice(dev) != cu::kSuccess) return cu::kErrorInvalidDevice;
  std::lock_guard<std::mutex> lock(gState->mu);
  Context* ctx = gState->contexts[dev].get();
  ++ctx->retains;
  *pctx = reinterpret_cast<CUcontext>(ctx);
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  DOUBLE_ENTER("cuDevicePrimaryCtxRelease", true);
  if (validDevice(dev) != cu::kSuccess) return cu::kErrorInvalidDevice;
  std::lock_guard<std::mutex> lock(gState->mu);
  Context* ctx = gState->contexts[dev].get();
  if (ctx->retains <= 0) return cu::kErrorInvalidContext;
  --ctx->retains;  // at 0 the context is inactive (its memory stays: README)
  return cu::kSuccess;
}

namespace {
CUresult knownContext(CUcontext c, Context** out) {
  std::lock_guard<std::mutex> lock(gState->mu);
  for (auto& ctx : gState->contexts) {
    if (reinterpret_cast<CUcontext>(ctx.get()) == c) {
      if (ctx->retains <= 0) return cu::kErrorInvalidContext;
      *out = ctx.get();
      return cu::kSuccess;
    }
  }
  return cu::kErrorInvalidContext;
}
}  // namespace

COLL_DOUBLE_EXPORT CUresult cuCtxSetCurrent(CUcontext c) {
  DOUBLE_ENTER("cuCtxSetCurrent", true);
  if (c == nullptr) {
    if (!tls.stack.empty()) tls.stack.pop_back();
    return cu::kSuccess;
  }
  Context* ctx = nullptr;
  if (CUresult r = knownContext(c, &ctx); r != cu::kSuccess) return r;
  if (tls.stack.empty()) tls.stack.push_back(ctx);
  else tls.stack.back() = ctx;
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuCtxGetCurrent(CUcontext* pctx) {
  DOUBLE_ENTER("cuCtxGetCurrent", true);
  if (pctx == nullptr) return cu::kErrorInvalidValue;
  *pctx = reinterpret_cast<CUcontext>(currentContext());
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuCtxGetDevice(CUdevice* device) {
  DOUBLE_ENTER("cuCtxGetDevice", true);
  if (device == nullptr) return cu::kErrorInvalidValue;
  Context* ctx = currentContext();
  if (ctx == nullptr) return cu::kErrorInvalidContext;
  *device = ctx->device;
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext c) {
  DOUBLE_ENTER("cuCtxPushCurrent", true);
  Context* ctx = nullptr;
  if (CUresult r = knownContext(c, &ctx); r != cu::kSuccess) return r;
  tls.stack.push_back(ctx);
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  DOUBLE_ENTER("cuCtxPopCurrent", true);
  if (tls.stack.empty()) return cu::kErrorInvalidContext;
  if (pctx != nullptr) *pctx = reinterpret_cast<CUcontext>(tls.stack.back());
  tls.stack.pop_back();
  return cu::kSuccess;
}

// ---- memory -----------------------------------------------------------------------------------------

COLL_DOUBLE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  DOUBLE_ENTER("cuMemAlloc", true);
  Context* ctx = nullptr;
  if (CUresult r = needContext(&ctx); r != cu::kSuccess) return r;
  if (dptr == nullptr || bytesize == 0) return cu::kErrorInvalidValue;
  State& g = *gState;
  const size_t mapped = roundUp(bytesize, kPage);
  auto range = std::make_shared<DeviceRange>();
  range->size = bytesize;
  range->mapped = mapped;
  range->ctx = ctx;
  std::lock_guard<std::mutex> lock(g.memMu);
  if (!ensureArena(g)) return cu::kErrorOutOfMemory;
  if (g.bytesPerDevice[ctx->device] + bytesize > g.memoryLimit) return cu::kErrorOutOfMemory;
  range->bufferId = g.nextBufferId++;
  const std::string name = kMemfdPrefix + std::to_string(range->bufferId);
  range->memfd = memfd_create(name.c_str(), MFD_CLOEXEC);
  if (range->memfd < 0) return cu::kErrorOutOfMemory;
  if (ftruncate(range->memfd, static_cast<off_t>(mapped)) != 0) return cu::kErrorOutOfMemory;
  void* shadow = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, range->memfd, 0);
  if (shadow == MAP_FAILED) return cu::kErrorOutOfMemory;
  range->shadow = shadow;
  range->base = arenaTake(g, mapped);
  if (range->base == 0) return cu::kErrorOutOfMemory;
  g.device[range->base] = range;
  g.bytesPerDevice[ctx->device] += bytesize;
  g.deviceBytes += bytesize;
  ++g.deviceAllocations;
  *dptr = range->base;
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  DOUBLE_ENTER("cuMemFree", true);
  Context* ctx = nullptr;
  if (CUresult r = needContext(&ctx); r != cu::kSuccess) return r;
  State& g = *gState;
  std::shared_ptr<DeviceRange> range;
  {
    std::lock_guard<std::mutex> lock(g.memMu);
    auto it = g.device.find(static_cast<uintptr_t>(dptr));
    // IPC and VMM mappings are not cuMemAlloc's (cuIpcCloseMemHandle, cuMemUnmap free those).
    if (it == g.device.end() || it->second->imported || it->second->vmm) return cu::kErrorInvalidValue;
    range = std::move(it->second);
    g.device.erase(it);
    arenaGive(g, range->base, range->mapped);
    g.bytesPerDevice[range->ctx->device] -= range->size;
    g.deviceBytes -= range->size;
    --g.deviceAllocations;
  }
  // Operations still queued that use it keep the shadow mapped until they finish (README).
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  DOUBLE_ENTER("cuMemGetAddressRange", true);
  Context* ctx = nullptr;
  if (CUresult r = needContext(&ctx); r != cu::kSuccess) return r;
  State& g = *gState;
  std::lock_guard<std::mutex> lock(g.memMu);
  uintptr_t base = 0;
  size_t size = 0;
  if (auto range = findDevice(g, dptr)) {
    base = range->base;
    size = range->size;
  } else if (const HostRange* h = findHost(g, dptr)) {
    base = h->base;
    size = h->size;
  } else {
    return cu::kErrorNotFound;
  }
  if (pbase != nullptr) *pbase = base;
  if (psize != nullptr) *psize = size;
  return cu::kSuccess;
}

namespace {
bool overlapsHost(State& g, uintptr_t a, size_t n) {  // memMu held
  auto it = g.host.lower_bound(a + n);
  if (it == g.host.begin()) return false;
  --it;
  return it->second.base + it->second.size > a;
}
}  // namespace

COLL_DOUBLE_EXPORT CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int flags) {
  DOUBLE_ENTER("cuMemHostAlloc", true);
  Context* ctx = nullptr;
  if (CUresult r = needContext(&ctx); r != cu::kSuccess) return r;
  if (pp == nullptr || bytesize == 0 || (flags & ~0x7u) != 0) return cu::kErrorInvalidValue;
  void* p = nullptr;
  if (posix_memalign(&p, kPage, roundUp(bytesize, kPage)) != 0) return cu::kErrorOutOfMemory;
  State& g = *gState;
  std::lock_guard<std::mutex> lock(g.memMu);
  HostRange h;
  h.base = reinterpret_cast<uintptr_t>(p);
  h.size = bytesize;
  h.bufferId = g.nextBufferId++;
  h.ctx = ctx;
  h.owned = true;
  g.host[h.base] = h;
  g.hostBytes += bytesize;
  *pp = p;
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuMemFreeHost(void* p) {
  DOUBLE_ENTER("cuMemFreeHost", true);
  State& g = *gState;
  {
    std::lock_guard<std::mutex> lock(g.memMu);
    auto it = g.host.find(reinterpret_cast<uintptr_t>(p));
    if (it == g.host.end() || !it->second.owned) return cu::kErrorInvalidValue;
    g.hostBytes -= it->second.size;
    g.host.erase(it);
  }
  std::free(p);
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int flags) {
  DOUBLE_ENTER("cuMemHostRegister", true);
  Context* ctx = nullptr;
  if (CUresult r = needContext(&ctx); r != cu::kSuccess) return r;
  if (p == nullptr || bytesize == 0 || (flags & ~0xfu) != 0) return cu::kErrorInvalidValue;
  State& g = *gState;
  std::lock_guard<std::mutex> lock(g.memMu);
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (inArena(g, a)) return cu::kErrorInvalidValue;
  if (overlapsHost(g, a, bytesize)) return cu::kErrorHostMemoryAlreadyRegistered;
  HostRange h;
  h.base = a;
  h.size = bytesize;
  h.bufferId = g.nextBufferId++;
  h.ctx = ctx;
  g.host[a] = h;
  ++g.hostRegistrations;
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuMemHostUnregister(void* p) {
  DOUBLE_ENTER("cuMemHostUnregister", true);
  Context* ctx = nullptr;
  if (CUresult r = needContext(&ctx); r != cu::kSuccess) return r;
  if (p == nullptr) return cu::kErrorInvalidValue;
  State& g = *gState;
  std::lock_guard<std::mutex> lock(g.memMu);
  auto it = g.host.find(reinterpret_cast<uintptr_t>(p));
  if (it == g.host.end() || it->second.owned) return kHostNotRegistered;
  g.host.erase(it);
  --g.hostRegistrations;
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int flags) {
  DOUBLE_ENTER("cuMemHostGetDevicePointer", true);
  Context* ctx = nullptr;
  if (CUresult r = needContext(&ctx); r != cu::kSuccess) return r;
  if (pdptr == nullptr || flags != 0) return cu::kErrorInvalidValue;
  State& g = *gState;
  std::lock_guard<std::mutex> lock(g.memMu);
  if (findHost(g, reinterpret_cast<uintptr_t>(p)) == nullptr) return cu::kErrorInvalidValue;
  *pdptr = reinterpret_cast<uintptr_t>(p);  // unified addressing: the same address
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuPointerGetAttributes(unsigned int numAttributes, int* attributes, void** data,
                                                  CUdeviceptr ptr) {
  DOUBLE_ENTER("cuPointerGetAttributes", true);
  if (numAttributes == 0 || attributes == nullptr || data == nullptr) return cu::kErrorInvalidValue;
  State& g = *gState;
  // What the pointer is (defaults: unknown memory, cuda.h's "default NULL values").
  Context* ctx = nullptr;
  unsigned int memType = 0;
  CUdeviceptr devicePointer = 0;
  unsigned long long bufferId = 0;
  int ordinal = kDeviceInvalid;
  CUdeviceptr rangeStart = 0;
  size_t rangeSize = 0;
  {
    std::lock_guard<std::mutex> lock(g.memMu);
    if (auto range = findDevice(g, ptr)) {
      ctx = range->ctx;
      memType = cu::kMemoryTypeDevice;
      devicePointer = ptr;
      bufferId = range->bufferId;
      ordinal = range->ctx->device;
      rangeStart = range->base;
      rangeSize = range->size;
    } else if (const HostRange* h = findHost(g, ptr)) {
      ctx = h->ctx;
      memType = cu::kMemoryTypeHost;
      devicePointer = ptr;
      bufferId = h->bufferId;
      ordinal = h->ctx->device;
      rangeStart = h->base;
      rangeSize = h->size;
    }
  }
  for (unsigned i = 0; i < numAttributes; ++i) {
    void* d = data[i];
    if (d == nullptr) return cu::kErrorInvalidValue;
    switch (attributes[i]) {
      case cu::kPointerAttributeContext: *static_cast<CUcontext*>(d) = reinterpret_cast<CUcontext>(ctx); break;
      case cu::kPointerAttributeMemoryType: *static_cast<unsigned int*>(d) = memType; break;
      case cu::kPointerAttributeDevicePointer: *static_cast<CUdeviceptr*>(d) = devicePointer; break;
      case cu::kPointerAttributeBufferId: *static_cast<unsigned long long*>(d) = bufferId; break;
      case cu::kPointerAttributeIsManaged: *static_cast<unsigned int*>(d) = 0; break;
      case cu::kPointerAttributeDeviceOrdinal: *static_cast<int*>(d) = ordinal; break;
      case cu::kPointerAttributeRangeStartAddr: *static_cast<CUdeviceptr*>(d) = rangeStart; break;
      case cu::kPointerAttributeRangeSize: *static_cast<size_t*>(d) = rangeSize; break;
      default: return cu::kErrorInvalidValue;  // not modelled (README)
    }
  }
  return cu::kSuccess;
}

// ---- copies and values ---------------------------------------------------------------------------------

COLL_DOUBLE_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  DOUBLE_ENTER("cuMemcpyAsync", true);
  if (bytes > 0 && (dst == 0 || src == 0)) return cu::kErrorInvalidValue;
  return streamOp(stream, [dst, src, bytes]() -> CUresult {
    if (bytes == 0) return cu::kSuccess;
    Resolved d, s;
    if (!resolve(dst, bytes, &d) || !resolve(src, bytes, &s)) return cu::kErrorIllegalAddress;
    std::memmove(d.p, s.p, bytes);
    return cu::kSuccess;
  });
}

COLL_DOUBLE_EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char uc, size_t n, CUstream stream) {
  DOUBLE_ENTER("cuMemsetD8Async", true);
  if (n > 0 && dst == 0) return cu::kErrorInvalidValue;
  return streamOp(stream, [dst, uc, n]() -> CUresult {
    if (n == 0) return cu::kSuccess;
    Resolved d;
    if (!resolve(dst, n, &d)) return cu::kErrorIllegalAddress;
    std::memset(d.p, uc, n);
    return cu::kSuccess;
  });
}

namespace {
// The memory a stream memory operation may use: device memory or pinned host memory (the driver
// refuses other host addresses), 4-byte aligned.
bool validValueAddress(CUdeviceptr addr) {
  if (addr % 4 != 0 || addr == 0) return false;
  State& g = *gState;
  std::lock_guard<std::mutex> lock(g.memMu);
  return findDevice(g, addr) != nullptr || findHost(g, addr) != nullptr;
}

// Reads the word at `addr` now: false when the memory is gone (freed since).
bool readWord(CUdeviceptr addr, uint32_t* value) {
  State& g = *gState;
  std::lock_guard<std::mutex> lock(g.memMu);  // held: cuMemFree/cuMemFreeHost cannot unmap it meanwhile
  if (auto range = findDevice(g, addr)) {
    if (!accessible(*range)) return false;
    *value = __atomic_load_n(reinterpret_cast<uint32_t*>(static_cast<char*>(range->shadow) + (addr - range->base)),
                             __ATOMIC_ACQUIRE);
    return addr + 4 <= range->base + range->size;
  }
  if (findHost(g, addr) != nullptr) {
    *value = __atomic_load_n(reinterpret_cast<uint32_t*>(addr), __ATOMIC_ACQUIRE);
    return true;
  }
  return false;
}
}  // namespace

COLL_DOUBLE_EXPORT CUresult cuStreamWaitValue32_v2(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                               unsigned int flags) {
  DOUBLE_ENTER("cuStreamWaitValue32", true);
  const unsigned cond = flags & 0x3;
  if ((flags & ~0x40000003u) != 0 || (cond != cu::kStreamWaitValueGeq && cond != cu::kStreamWaitValueEq)) {
    return cu::kErrorInvalidValue;  // AND (0x2) and NOR (0x3) are not modelled
  }
  if (!validValueAddress(addr)) return cu::kErrorInvalidValue;
  return streamOp(stream, [addr, value, cond]() -> CUresult {
    for (int round = 0;; ++round) {
      uint32_t v = 0;
      if (!readWord(addr, &v)) return cu::kErrorIllegalAddress;
      const bool ok = cond == cu::kStreamWaitValueEq ? v == value : static_cast<int32_t>(v - value) >= 0;
      if (ok) return cu::kSuccess;
      pollPause(round);
    }
  });
}

COLL_DOUBLE_EXPORT CUresult cuStreamWriteValue32_v2(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                                unsigned int flags) {
  DOUBLE_ENTER("cuStreamWriteValue32", true);
  if ((flags & ~0x1u) != 0) return cu::kErrorInvalidValue;  // DEFAULT or NO_MEMORY_BARRIER
  if (!validValueAddress(addr)) return cu::kErrorInvalidValue;
  return streamOp(stream, [addr, value]() -> CUresult {
    State& g = *gState;
    {
      std::lock_guard<std::mutex> lock(g.memMu);
      if (auto range = findDevice(g, addr)) {
        if (addr + 4 > range->base + range->size || !accessible(*range)) return cu::kErrorIllegalAddress;
        __atomic_store_n(reinterpret_cast<uint32_t*>(static_cast<char*>(range->shadow) + (addr - range->base)), value,
                         __ATOMIC_RELEASE);
      } else if (findHost(g, addr) != nullptr) {
        __atomic_store_n(reinterpret_cast<uint32_t*>(addr), value, __ATOMIC_RELEASE);
      } else {
        return cu::kErrorIllegalAddress;
      }
    }
    std::lock_guard<std::mutex> lock(g.mu);
    g.cv.notify_all();  // wakes waiters of this process at once
    return cu::kSuccess;
  });
}

// ---- streams --------------------------------------------------------------------------------------------

COLL_DOUBLE_EXPORT CUresult cuStreamCreate(CUstream* phStream, unsigned int flags) {
  DOUBLE_ENTER("cuStreamCreate", true);
  Context* ctx = nullptr;
  if (CUresult r = needContext(&ctx); r != cu::kSuccess) return r;
  if (phStream == nullptr || (flags & ~cu::kStreamNonBlocking) != 0) return cu::kErrorInvalidValue;
  std::lock_guard<std::mutex> lock(gState->mu);
  StreamRef s = newStream(ctx, false, (flags & cu::kStreamNonBlocking) == 0);
  gState->streams[s.get()] = s;
  *phStream = reinterpret_cast<CUstream>(s.get());
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuStreamDestroy_v2(CUstream hStream) {
  DOUBLE_ENTER("cuStreamDestroy", true);
  std::lock_guard<std::mutex> lock(gState->mu);
  auto it = gState->streams.find(reinterpret_cast<StreamCore*>(hStream));
  if (it == gState->streams.end()) return cu::kErrorInvalidHandle;
  closeStream(it->second);  // returns at once; queued work still runs (as the driver does)
  gState->streams.erase(it);
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuStreamSynchronize(CUstream hStream) {
  DOUBLE_ENTER("cuStreamSynchronize", true);
  State& g = *gState;
  std::unique_lock<std::mutex> lock(g.mu);
  StreamRef s;
  if (CUresult r = streamOf(hStream, &s); r != cu::kSuccess) return r;
  if (s->capturing) {
    s->captureInvalidated = true;
    return cu::kErrorStreamCaptureUnsupported;
  }
  const auto points = syncPoints(s);
  g.cv.wait(lock, [&] { return reached(points) || s->ctx->sticky != cu::kSuccess; });
  return s->ctx->sticky;
}

COLL_DOUBLE_EXPORT CUresult cuStreamQuery(CUstream hStream) {
  DOUBLE_ENTER("cuStreamQuery", true);
  std::lock_guard<std::mutex> lock(gState->mu);
  StreamRef s;
  if (CUresult r = streamOf(hStream, &s); r != cu::kSuccess) return r;
  if (s->ctx->sticky != cu::kSuccess) return s->ctx->sticky;
  if (s->capturing) {
    s->captureInvalidated = true;
    return cu::kErrorStreamCaptureUnsupported;
  }
  return reached(syncPoints(s)) ? cu::kSuccess : cu::kErrorNotReady;
}

COLL_DOUBLE_EXPORT CUresult cuStreamIsCapturing(CUstream hStream, int* captureStatus) {
  DOUBLE_ENTER("cuStreamIsCapturing", true);
  if (captureStatus == nullptr) return cu::kErrorInvalidValue;
  std::lock_guard<std::mutex> lock(gState->mu);
  StreamRef s;
  if (CUresult r = streamOf(hStream, &s); r != cu::kSuccess) return r;
  *captureStatus = !s->capturing             ? cu::kCaptureStatusNone
                   : s->captureInvalidated ? cu::kCaptureStatusInvalidated
                                           : cu::kCaptureStatusActive;
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuStreamGetCtx(CUstream hStream, CUcontext* pctx) {
  DOUBLE_ENTER("cuStreamGetCtx", true);
  if (pctx == nullptr) return cu::kErrorInvalidValue;
  std::lock_guard<std::mutex> lock(gState->mu);
  StreamRef s;
  if (CUresult r = streamOf(hStream, &s); r != cu::kSuccess) return r;
  *pctx = reinterpret_cast<CUcontext>(s->ctx);
  return cu::kSuccess;
}

// Test-only driver functions (not in COLL_CUDA_DRIVER_FUNCTIONS): graph capture, as far as the
// library can observe it (cuStreamIsCapturing). Operations enqueued while capturing are recorded,
// not run; the graph that comes out is a dummy handle (the recorded operations are dropped).
COLL_DOUBLE_EXPORT CUresult cuStreamBeginCapture_v2(CUstream hStream, int mode) {
  DOUBLE_ENTER("cuStreamBeginCapture", true);
  if (mode < cu::kCaptureModeGlobal || mode > cu::kCaptureModeRelaxed) return cu::kErrorInvalidValue;
  const uintptr_t v = reinterpret_cast<uintptr_t>(hStream);
  if (v == 0 || v == kLegacyHandle) return cu::kErrorStreamCaptureUnsupported;  // the legacy stream
  std::lock_guard<std::mutex> lock(gState->mu);
  StreamRef s;
  if (CUresult r = streamOf(hStream, &s); r != cu::kSuccess) return r;
  if (s->capturing) return kIllegalState;
  s->capturing = true;
  s->captureInvalidated = false;
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuStreamEndCapture(CUstream hStream, CUgraph* phGraph) {
  DOUBLE_ENTER("cuStreamEndCapture", true);
  if (phGraph == nullptr) return cu::kErrorInvalidValue;
  std::lock_guard<std::mutex> lock(gState->mu);
  StreamRef s;
  if (CUresult r = streamOf(hStream, &s); r != cu::kSuccess) return r;
  if (!s->capturing) return kIllegalState;
  s->capturing = false;
  *phGraph = nullptr;
  if (s->captureInvalidated) return cu::kErrorStreamCaptureInvalidated;
  static uintptr_t dummyGraphs = 0x6000;
  dummyGraphs += 0x10;
  *phGraph = reinterpret_cast<CUgraph>(dummyGraphs);
  return cu::kSuccess;
}

// ---- events ---------------------------------------------------------------------------------------------

COLL_DOUBLE_EXPORT CUresult cuEventCreate(CUevent* phEvent, unsigned int flags) {
  DOUBLE_ENTER("cuEventCreate", true);
  Context* ctx = nullptr;
  if (CUresult r = needContext(&ctx); r != cu::kSuccess) return r;
  if (phEvent == nullptr || (flags & ~0xfu) != 0) return cu::kErrorInvalidValue;
  auto e = std::make_unique<Event>();
  e->flags = flags;
  std::lock_guard<std::mutex> lock(gState->mu);
  *phEvent = reinterpret_cast<CUevent>(e.get());
  gState->events[e.get()] = std::move(e);
  return cu::kSuccess;
}

namespace {
Event* eventOf(CUevent h) {  // mu held
  auto it = gState->events.find(reinterpret_cast<Event*>(h));
  return it == gState->events.end() ? nullptr : it->second.get();
}
}  // namespace

COLL_DOUBLE_EXPORT CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
  DOUBLE_ENTER("cuEventRecord", true);
  std::lock_guard<std::mutex> lock(gState->mu);
  Event* e = eventOf(hEvent);
  if (e == nullptr) return cu::kErrorInvalidHandle;
  StreamRef s;
  bool captured = false;
  if (CUresult r = beginStreamOp(hStream, &s, &captured); r != cu::kSuccess) return r;
  if (captured) return cu::kSuccess;  // a node of the graph; the event is untouched
  // A marker operation: complete once everything before it on the stream (and, on the legacy
  // stream, on the blocking streams) has run.
  e->seq = enqueue(s, nullptr);
  e->stream = s;
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuEventQuery(CUevent hEvent) {
  DOUBLE_ENTER("cuEventQuery", true);
  std::lock_guard<std::mutex> lock(gState->mu);
  Event* e = eventOf(hEvent);
  if (e == nullptr) return cu::kErrorInvalidHandle;
  if (!e->stream) return cu::kSuccess;  // never recorded
  if (e->stream->ctx->sticky != cu::kSuccess) return e->stream->ctx->sticky;
  return e->stream->completed >= e->seq ? cu::kSuccess : cu::kErrorNotReady;
}

COLL_DOUBLE_EXPORT CUresult cuEventSynchronize(CUevent hEvent) {
  DOUBLE_ENTER("cuEventSynchronize", true);
  State& g = *gState;
  std::unique_lock<std::mutex> lock(g.mu);
  Event* e = eventOf(hEvent);
  if (e == nullptr) return cu::kErrorInvalidHandle;
  if (!e->stream) return cu::kSuccess;
  const StreamRef s = e->stream;
  const uint64_t seq = e->seq;
  g.cv.wait(lock, [&] { return s->completed >= seq || s->ctx->sticky != cu::kSuccess; });
  return s->ctx->sticky;
}

COLL_DOUBLE_EXPORT CUresult cuEventDestroy_v2(CUevent hEvent) {
  DOUBLE_ENTER("cuEventDestroy", true);
  std::lock_guard<std::mutex> lock(gState->mu);
  // Waits already queued captured the record; the event itself may go at once.
  return gState->events.erase(reinterpret_cast<Event*>(hEvent)) == 1 ? cu::kSuccess : cu::kErrorInvalidHandle;
}

COLL_DOUBLE_EXPORT CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int flags) {
  DOUBLE_ENTER("cuStreamWaitEvent", true);
  if (flags != 0) return cu::kErrorInvalidValue;
  std::lock_guard<std::mutex> lock(gState->mu);
  Event* e = eventOf(hEvent);
  if (e == nullptr) return cu::kErrorInvalidHandle;
  StreamRef s;
  bool captured = false;
  if (CUresult r = beginStreamOp(hStream, &s, &captured); r != cu::kSuccess) return r;
  if (captured || !e->stream) return cu::kSuccess;  // a never-recorded event: nothing to wait for
  enqueue(s, nullptr, {{e->stream, e->seq}});  // the record as of now
  return cu::kSuccess;
}

// ---- IPC -------------------------------------------------------------------------------------------------

namespace {
struct IpcLayout {  // fits CUipcMemHandle's 64 bytes
  uint32_t magic;
  int32_t ownerPid;
  int32_t memfd;
  uint32_t reserved;
  uint64_t size;      // bytes as asked
  uint64_t mapped;    // bytes of the memfd
  uint64_t offset;    // of the exported pointer within the allocation (informational)
  uint64_t bufferId;
  uint64_t check;     // of the fields above: a garbage handle is refused
};
static_assert(sizeof(IpcLayout) <= sizeof(CUipcMemHandle));

uint64_t ipcCheck(const IpcLayout& h) {
  uint64_t x = 0xcbf29ce484222325ull;
  auto mix = [&](uint64_t v) { x = (x ^ v) * 0x100000001b3ull; };
  mix(h.magic);
  mix(static_cast<uint32_t>(h.ownerPid));
  mix(static_cast<uint32_t>(h.memfd));
  mix(h.size);
  mix(h.mapped);
  mix(h.offset);
  mix(h.bufferId);
  return x;
}
}  // namespace

COLL_DOUBLE_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr) {
  DOUBLE_ENTER("cuIpcGetMemHandle", true);
  Context* ctx = nullptr;
  if (CUresult r = needContext(&ctx); r != cu::kSuccess) return r;
  if (pHandle == nullptr) return cu::kErrorInvalidValue;
  State& g = *gState;
  std::lock_guard<std::mutex> lock(g.memMu);
  auto range = findDevice(g, dptr);
  // The driver gives no legacy handle for cuMemCreate memory (it is shared by shareable handles).
  if (!range || range->imported || range->vmm) return cu::kErrorInvalidValue;
  IpcLayout h{};
  h.magic = kIpcMagic;
  h.ownerPid = static_cast<int32_t>(getpid());
  h.memfd = range->memfd;
  h.size = range->size;
  h.mapped = range->mapped;
  h.offset = dptr - range->base;
  h.bufferId = range->bufferId;
  h.check = ipcCheck(h);
  std::memset(pHandle, 0, sizeof(*pHandle));
  std::memcpy(pHandle->reserved, &h, sizeof(h));
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags) {
  DOUBLE_ENTER("cuIpcOpenMemHandle", true);
  Context* ctx = nullptr;
  if (CUresult r = needContext(&ctx); r != cu::kSuccess) return r;
  if (pdptr == nullptr || (flags & ~cu::kIpcMemLazyEnablePeerAccess) != 0) return cu::kErrorInvalidValue;
  IpcLayout h;
  std::memcpy(&h, handle.reserved, sizeof(h));
  if (h.magic != kIpcMagic || h.check != ipcCheck(h) || h.size == 0 || h.mapped < h.size || h.memfd < 0) {
    return cu::kErrorInvalidValue;  // not a handle
  }
  // The driver refuses a handle of the opening process itself ("invalid device context").
  if (h.ownerPid == static_cast<int32_t>(getpid())) return cu::kErrorInvalidContext;
  State& g = *gState;
  std::lock_guard<std::mutex> lock(g.memMu);
  for (auto& [base, r] : g.device) {  // opened before by this process: one more reference
    if (r->imported && r->ownerPid == h.ownerPid && r->ownerBuffer == h.bufferId) {
      ++r->importRefs;
      *pdptr = r->base;
      return cu::kSuccess;
    }
  }
  // The exporter's memfd, if the exporter is alive and the fd is still that allocation.
  const std::string fdPath = "/proc/" + std::to_string(h.ownerPid) + "/fd/" + std::to_string(h.memfd);
  char link[256] = {};
  const ssize_t n = readlink(fdPath.c_str(), link, sizeof(link) - 1);
  const std::string expected = std::string("/memfd:") + kMemfdPrefix + std::to_string(h.bufferId) + " ";
  if (n <= 0 || std::string(link, static_cast<size_t>(n)).rfind(expected, 0) != 0) return kMapFailed;
  const int fd = open(fdPath.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return kMapFailed;
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != h.mapped || !ensureArena(g)) {
    close(fd);
    return kMapFailed;
  }
  void* shadow = mmap(nullptr, h.mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (shadow == MAP_FAILED) return kMapFailed;
  auto range = std::make_shared<DeviceRange>();
  range->size = h.size;
  range->mapped = h.mapped;
  range->shadow = shadow;
  range->ctx = ctx;
  range->imported = true;
  range->ownerPid = h.ownerPid;
  range->ownerBuffer = h.bufferId;
  range->importRefs = 1;
  range->bufferId = g.nextBufferId++;
  range->base = arenaTake(g, h.mapped);
  if (range->base == 0) return cu::kErrorOutOfMemory;
  g.device[range->base] = range;
  *pdptr = range->base;  // the allocation's base, as the driver returns (not base + offset)
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  DOUBLE_ENTER("cuIpcCloseMemHandle", true);
  Context* ctx = nullptr;
  if (CUresult r = needContext(&ctx); r != cu::kSuccess) return r;
  State& g = *gState;
  std::lock_guard<std::mutex> lock(g.memMu);
  auto it = g.device.find(static_cast<uintptr_t>(dptr));
  if (it == g.device.end() || !it->second->imported) return cu::kErrorInvalidValue;
  if (--it->second->importRefs == 0) {
    arenaGive(g, it->second->base, it->second->mapped);
    g.device.erase(it);  // unmapped once no queued operation uses it
  }
  return cu::kSuccess;
}

// ---- virtual memory management (VMM) -------------------------------------------------------------
//
// cuMemCreate makes a physical allocation (a memfd, named like cuMemAlloc's); cuMemAddressReserve
// takes a range of the device arena; cuMemMap makes [ptr, ptr + size) a DeviceRange over a fresh
// shadow mapping of the memfd, which the rest of the double treats as device memory of the
// allocation's device, usable by copies and kernels once cuMemSetAccess gave their device access.
// POSIX-fd shareable handles are dups of the memfd; an importer maps the same pages.

namespace {
// The common start of the VMM functions: off with COLL_CUDA_DOUBLE_VMM=0 (set before cuInit ended).
#define DOUBLE_ENTER_VMM(name)                                \
  do {                                                        \
    DOUBLE_ENTER(name, true);                                 \
    if (!gState->vmmSupported) return cu::kErrorNotSupported; \
  } while (0)

// A pinned allocation on a device: what the double models (INVALID_VALUE otherwise; the ordinal is
// checked by the caller, which knows its error).
bool pinnedDeviceProp(const CUmemAllocationProp* prop) {
  return prop != nullptr && prop->type == cu::kMemAllocationTypePinned &&
         prop->location.type == cu::kMemLocationTypeDevice;
}

// The allocation counts as device memory from its creation (or import) until it is released and
// unmapped, as CUDA frees it then; this ends that (memMu held).
void vmmRetire(State& g, const VmmAlloc& a) {
  if (!a.imported) g.bytesPerDevice[a.device] -= a.size;
  g.deviceBytes -= a.size;
  --g.deviceAllocations;
}

// A new handle for `a` (memMu held): counted as a live allocation.
CUmemGenericAllocationHandle vmmAdd(State& g, std::shared_ptr<VmmAlloc> a) {
  a->handle = g.nextVmmHandle++;
  if (!a->imported) g.bytesPerDevice[a->device] += a->size;
  g.deviceBytes += a->size;
  ++g.deviceAllocations;
  const CUmemGenericAllocationHandle h = a->handle;
  g.vmmHandles[h] = std::move(a);
  return h;
}

// Whether any device range overlaps [a, a + n) (memMu held).
bool overlapsDevice(State& g, uintptr_t a, size_t n) {
  auto it = g.device.lower_bound(a + n);
  if (it == g.device.begin()) return false;
  --it;
  return it->second->base + it->second->mapped > a;
}

// The reservation containing [a, a + n), or null (memMu held).
const State::Reservation* reservationOf(State& g, uintptr_t a, size_t n) {
  auto it = g.reservations.upper_bound(a);
  if (it == g.reservations.begin()) return nullptr;
  --it;
  if (a < it->first || n > it->second.size || a - it->first > it->second.size - n) return nullptr;
  return &it->second;
}
}  // namespace

COLL_DOUBLE_EXPORT CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                                          int option) {
  DOUBLE_ENTER_VMM("cuMemGetAllocationGranularity");
  if (granularity == nullptr || !pinnedDeviceProp(prop) || validDevice(prop->location.id) != cu::kSuccess) {
    return cu::kErrorInvalidValue;
  }
  if (option != cu::kMemAllocGranularityMinimum && option != 0x1) return cu::kErrorInvalidValue;  // or RECOMMENDED
  *granularity = kVmmGranularity;
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                        const CUmemAllocationProp* prop, unsigned long long flags) {
  DOUBLE_ENTER_VMM("cuMemCreate");
  if (handle == nullptr || flags != 0 || size == 0 || size % kVmmGranularity != 0 || !pinnedDeviceProp(prop)) {
    return cu::kErrorInvalidValue;
  }
  if (validDevice(prop->location.id) != cu::kSuccess) return cu::kErrorInvalidDevice;
  if (prop->requestedHandleTypes != cu::kMemHandleTypeNone &&
      prop->requestedHandleTypes != cu::kMemHandleTypePosixFileDescriptor) {
    return cu::kErrorInvalidValue;  // Win32 and fabric handles are not modelled
  }
  State& g = *gState;
  auto a = std::make_shared<VmmAlloc>();
  a->size = size;
  a->device = prop->location.id;
  a->handleTypes = prop->requestedHandleTypes;
  std::lock_guard<std::mutex> lock(g.memMu);
  if (g.bytesPerDevice[a->device] + size > g.memoryLimit) return cu::kErrorOutOfMemory;
  const std::string name =
      kMemfdPrefix + std::string(kVmmMemfdTag) + std::to_string(a->device) + "-" + std::to_string(g.nextBufferId++);
  a->memfd = memfd_create(name.c_str(), MFD_CLOEXEC);
  if (a->memfd < 0 || ftruncate(a->memfd, static_cast<off_t>(size)) != 0) return cu::kErrorOutOfMemory;
  *handle = vmmAdd(g, std::move(a));
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  DOUBLE_ENTER_VMM("cuMemRelease");
  State& g = *gState;
  std::lock_guard<std::mutex> lock(g.memMu);
  auto it = g.vmmHandles.find(handle);
  if (it == g.vmmHandles.end()) return cu::kErrorInvalidValue;
  it->second->released = true;
  if (it->second->mappings == 0) vmmRetire(g, *it->second);  // else the last cuMemUnmap frees it
  g.vmmHandles.erase(it);
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                                unsigned long long flags) {
  DOUBLE_ENTER_VMM("cuMemAddressReserve");
  (void)addr;  // a hint: the double always picks the address
  if (ptr == nullptr || flags != 0 || size == 0 || size % kVmmGranularity != 0 || (alignment & (alignment - 1)) != 0) {
    return cu::kErrorInvalidValue;
  }
  const size_t align = std::max(alignment, kVmmGranularity);
  State& g = *gState;
  std::lock_guard<std::mutex> lock(g.memMu);
  if (!ensureArena(g)) return cu::kErrorOutOfMemory;
  // The arena hands out page-aligned ranges: take enough to align inside it.
  const size_t takenBytes = size + align - kPage;
  const uintptr_t taken = arenaTake(g, takenBytes);
  if (taken == 0) return cu::kErrorOutOfMemory;
  const uintptr_t base = roundUp(taken, align);
  g.reservations[base] = State::Reservation{size, taken, takenBytes};
  *ptr = base;
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  DOUBLE_ENTER_VMM("cuMemAddressFree");
  State& g = *gState;
  std::lock_guard<std::mutex> lock(g.memMu);
  auto it = g.reservations.find(ptr);
  if (it == g.reservations.end() || it->second.size != size) return cu::kErrorInvalidValue;
  if (overlapsDevice(g, ptr, size)) return cu::kErrorInvalidValue;  // still mapped: cuMemUnmap first
  arenaGive(g, it->second.taken, it->second.takenBytes);
  g.reservations.erase(it);
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                                     unsigned long long flags) {
  DOUBLE_ENTER_VMM("cuMemMap");
  if (flags != 0 || offset != 0 || size == 0 || ptr % kVmmGranularity != 0) return cu::kErrorInvalidValue;
  State& g = *gState;
  std::lock_guard<std::mutex> lock(g.memMu);
  auto it = g.vmmHandles.find(handle);
  if (it == g.vmmHandles.end()) return cu::kErrorInvalidValue;
  const std::shared_ptr<VmmAlloc>& a = it->second;
  if (size != a->size) return cu::kErrorInvalidValue;  // partial mappings are not modelled
  if (reservationOf(g, ptr, size) == nullptr) return cu::kErrorInvalidValue;
  if (overlapsDevice(g, ptr, size)) return cu::kErrorAlreadyMapped;
  void* shadow = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, a->memfd, 0);
  if (shadow == MAP_FAILED) return cu::kErrorOutOfMemory;
  auto range = std::make_shared<DeviceRange>();
  range->base = ptr;
  range->size = size;
  range->mapped = size;
  range->shadow = shadow;  // memfd stays -1: the VmmAlloc owns it
  range->bufferId = g.nextBufferId++;
  range->ctx = g.contexts[a->device].get();  // constant after cuInit
  range->vmm = a;
  ++a->mappings;
  g.device[ptr] = std::move(range);
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  DOUBLE_ENTER_VMM("cuMemUnmap");
  State& g = *gState;
  std::lock_guard<std::mutex> lock(g.memMu);
  auto it = g.device.find(ptr);
  if (it == g.device.end() || !it->second->vmm || it->second->size != size) return cu::kErrorInvalidValue;
  VmmAlloc& a = *it->second->vmm;
  if (--a.mappings == 0 && a.released) vmmRetire(g, a);
  // Operations still queued that use it keep the shadow mapped until they finish (as cuMemFree).
  g.device.erase(it);
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  DOUBLE_ENTER_VMM("cuMemSetAccess");
  if (desc == nullptr || count == 0 || size == 0) return cu::kErrorInvalidValue;
  uint64_t grant = 0, revoke = 0;
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != cu::kMemLocationTypeDevice) return cu::kErrorInvalidValue;
    if (validDevice(desc[i].location.id) != cu::kSuccess) return cu::kErrorInvalidDevice;
    const uint64_t bit = uint64_t{1} << desc[i].location.id;
    if (desc[i].flags == cu::kMemAccessFlagsProtReadWrite) grant |= bit;
    else if (desc[i].flags == 0) revoke |= bit;  // PROT_NONE
    else return cu::kErrorInvalidValue;          // read-only access is not modelled
  }
  State& g = *gState;
  std::lock_guard<std::mutex> lock(g.memMu);
  // [ptr, ptr + size) must be whole VMM mappings, back to back.
  std::vector<DeviceRange*> ranges;
  for (uintptr_t at = ptr; at != ptr + size;) {
    auto it = g.device.find(at);
    if (it == g.device.end() || !it->second->vmm || it->second->size > ptr + size - at) return cu::kErrorInvalidValue;
    ranges.push_back(it->second.get());
    at += it->second->size;
  }
  for (DeviceRange* r : ranges) r->accessMask = (r->accessMask & ~revoke) | grant;
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuMemExportToShareableHandle(void* shareableHandle, CUmemGenericAllocationHandle handle,
                                                         int handleType, unsigned long long flags) {
  DOUBLE_ENTER_VMM("cuMemExportToShareableHandle");
  if (shareableHandle == nullptr || flags != 0 || handleType != cu::kMemHandleTypePosixFileDescriptor) {
    return cu::kErrorInvalidValue;
  }
  State& g = *gState;
  std::lock_guard<std::mutex> lock(g.memMu);
  auto it = g.vmmHandles.find(handle);
  if (it == g.vmmHandles.end()) return cu::kErrorInvalidValue;
  // Created without asking for this handle type.
  if ((it->second->handleTypes & cu::kMemHandleTypePosixFileDescriptor) == 0) return kNotPermitted;
  const int fd = fcntl(it->second->memfd, F_DUPFD_CLOEXEC, 0);  // the caller's to close
  if (fd < 0) return cu::kErrorOutOfMemory;
  *static_cast<int*>(shareableHandle) = fd;
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* osHandle,
                                                           int shHandleType) {
  DOUBLE_ENTER_VMM("cuMemImportFromShareableHandle");
  if (handle == nullptr || shHandleType != cu::kMemHandleTypePosixFileDescriptor) return cu::kErrorInvalidValue;
  const intptr_t fdValue = reinterpret_cast<intptr_t>(osHandle);
  if (fdValue < 0 || fdValue > INT32_MAX) return cu::kErrorInvalidValue;
  const int fd = static_cast<int>(fdValue);
  // One of the double's cuMemCreate memfds (from this process or another): its name tells the device.
  const std::string fdPath = "/proc/self/fd/" + std::to_string(fd);
  char link[256] = {};
  const ssize_t n = readlink(fdPath.c_str(), link, sizeof(link) - 1);
  const std::string tag = std::string("/memfd:") + kMemfdPrefix + kVmmMemfdTag;
  if (n <= 0 || std::string(link, static_cast<size_t>(n)).rfind(tag, 0) != 0) return cu::kErrorInvalidValue;
  int device = -1;
  unsigned long long id = 0;
  if (std::sscanf(link + tag.size(), "%d-%llu", &device, &id) != 2) return cu::kErrorInvalidValue;
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size <= 0 || static_cast<size_t>(st.st_size) % kVmmGranularity != 0) {
    return cu::kErrorInvalidValue;
  }
  // A device this process does not have ("cannot support the memory described by this handle").
  if (validDevice(device) != cu::kSuccess) return cu::kErrorNotSupported;
  auto a = std::make_shared<VmmAlloc>();
  a->size = static_cast<size_t>(st.st_size);
  a->device = device;
  a->handleTypes = cu::kMemHandleTypePosixFileDescriptor;
  a->imported = true;
  a->memfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);  // its own: the caller may close `fd` at once
  if (a->memfd < 0) return cu::kErrorOutOfMemory;
  State& g = *gState;
  std::lock_guard<std::mutex> lock(g.memMu);
  *handle = vmmAdd(g, std::move(a));
  return cu::kSuccess;
}

// ---- modules and kernels ------------------------------------------------------------------------------

COLL_DOUBLE_EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  DOUBLE_ENTER("cuModuleLoadData", true);
  Context* ctx = nullptr;
  if (CUresult r = needContext(&ctx); r != cu::kSuccess) return r;
  if (module == nullptr || image == nullptr) return cu::kErrorInvalidValue;
  auto m = std::make_unique<Module>();  // any image: the kernels are the host registry's
  m->ctx = ctx;
  std::lock_guard<std::mutex> lock(gState->mu);
  *module = reinterpret_cast<CUmodule>(m.get());
  gState->modules[m.get()] = std::move(m);
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT CUresult cuModuleUnload(CUmodule hmod) {
  DOUBLE_ENTER("cuModuleUnload", true);
  std::lock_guard<std::mutex> lock(gState->mu);
  return gState->modules.erase(reinterpret_cast<Module*>(hmod)) == 1 ? cu::kSuccess : cu::kErrorInvalidHandle;
}

COLL_DOUBLE_EXPORT CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  DOUBLE_ENTER("cuModuleGetFunction", true);
  if (hfunc == nullptr || name == nullptr) return cu::kErrorInvalidValue;
  std::lock_guard<std::mutex> lock(gState->mu);
  auto it = gState->modules.find(reinterpret_cast<Module*>(hmod));
  if (it == gState->modules.end()) return cu::kErrorInvalidHandle;
  std::unique_ptr<Function>& f = it->second->functions[name];
  if (!f) {
    HostKernel k = coll::cuda_double::findHostKernel(name);
    if (k == nullptr) {
      it->second->functions.erase(name);
      return cu::kErrorNotFound;
    }
    f = std::make_unique<Function>();
    f->name = name;
    f->kernel = k;
    if (&coll::cuda_double::hostKernelParamSizes != nullptr) {
      size_t sizes[64];
      const int n = coll::cuda_double::hostKernelParamSizes(name, sizes, 64);
      if (n >= 0 && n <= 64) {
        f->paramSizes.assign(sizes, sizes + n);
        f->sized = true;
      }
    }
  }
  *hfunc = reinterpret_cast<CUfunction>(f.get());
  return cu::kSuccess;
}

namespace {
bool knownFunction(CUfunction f) {  // mu held
  for (auto& [m, mod] : gState->modules) {
    for (auto& [name, fn] : mod->functions) {
      if (reinterpret_cast<CUfunction>(fn.get()) == f) return true;
    }
  }
  return false;
}

CUresult runKernel(HostKernel kernel, const LaunchDims& dims, void** params) {
  std::vector<std::shared_ptr<DeviceRange>> keep;
  tlsKernelKeep = &keep;
  const bool ok = kernel(dims, params, &translateForKernel);
  tlsKernelKeep = nullptr;
  return ok ? cu::kSuccess : cu::kErrorIllegalAddress;
}
}  // namespace

COLL_DOUBLE_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                          unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                          unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                          void** kernelParams, void** extra) {
  DOUBLE_ENTER("cuLaunchKernel", true);
  if (f == nullptr) return cu::kErrorInvalidHandle;
  if (gridDimX == 0 || gridDimY == 0 || gridDimZ == 0 || blockDimX == 0 || blockDimY == 0 || blockDimZ == 0 ||
      uint64_t{blockDimX} * blockDimY * blockDimZ > 1024 || blockDimZ > 64 || sharedMemBytes > 49152) {
    return cu::kErrorInvalidValue;
  }
  if (extra != nullptr || kernelParams == nullptr) return cu::kErrorInvalidValue;  // `extra` is not modelled
  const LaunchDims dims{{gridDimX, gridDimY, gridDimZ}, {blockDimX, blockDimY, blockDimZ}};
  State& g = *gState;
  std::unique_lock<std::mutex> lock(g.mu);
  if (!knownFunction(f)) return cu::kErrorInvalidHandle;
  const Function& fn = *reinterpret_cast<Function*>(f);
  StreamRef s;
  bool captured = false;
  if (CUresult r = beginStreamOp(hStream, &s, &captured); r != cu::kSuccess || captured) return r;
  const HostKernel kernel = fn.kernel;
  if (fn.sized) {
    // The arguments copied now, as a launch does: the caller may reuse their storage at once.
    size_t total = 0;
    for (size_t b : fn.paramSizes) total += roundUp(b, 16);
    auto storage = std::make_shared<std::vector<std::max_align_t>>(total / sizeof(std::max_align_t) + 1);
    auto pointers = std::make_shared<std::vector<void*>>();
    char* at = reinterpret_cast<char*>(storage->data());
    for (size_t i = 0; i < fn.paramSizes.size(); ++i) {
      std::memcpy(at, kernelParams[i], fn.paramSizes[i]);
      pointers->push_back(at);
      at += roundUp(fn.paramSizes[i], 16);
    }
    enqueue(s, [kernel, dims, storage, pointers]() { return runKernel(kernel, dims, pointers->data()); });
    return cu::kSuccess;
  }
  // Without parameter sizes: wait until the stream reached the launch, run it here, then let the
  // stream go on (the caller's argument storage is valid only during this call).
  struct Gate {
    bool reached = false, done = false;
    CUresult result = cu::kSuccess;
  };
  auto gate = std::make_shared<Gate>();
  enqueue(s, [gate]() -> CUresult {
    State& st = *gState;
    std::unique_lock<std::mutex> l(st.mu);
    gate->reached = true;
    st.cv.notify_all();
    st.cv.wait(l, [&] { return gate->done; });
    return gate->result;
  });
  g.cv.wait(lock, [&] { return gate->reached || s->ctx->sticky != cu::kSuccess; });
  if (!gate->reached) return s->ctx->sticky;
  lock.unlock();
  const int accessDevice = tlsAccessDevice;
  tlsAccessDevice = s->ctx->device;  // run here on the stream's behalf
  const CUresult r = runKernel(kernel, dims, kernelParams);
  tlsAccessDevice = accessDevice;
  lock.lock();
  gate->result = r;
  gate->done = true;
  g.cv.notify_all();
  return cu::kSuccess;
}

// =================================================================================================
// Control API (cuda_double.h)
// =================================================================================================

COLL_DOUBLE_EXPORT int collCudaDoubleIsDouble(void) { return 1; }

COLL_DOUBLE_EXPORT CUresult collCudaDoubleLaunchSleep(CUstream stream, int microseconds) {
  if (microseconds < 0) return cu::kErrorInvalidValue;
  if (!initializedNow()) return cu::kErrorNotInitialized;
  return streamOp(stream, [microseconds]() {
    std::this_thread::sleep_for(std::chrono::microseconds(microseconds));
    return cu::kSuccess;
  });
}

COLL_DOUBLE_EXPORT CUresult collCudaDoubleInjectError(const char* function, int count, CUresult result) {
  if (function == nullptr || count < 0) return cu::kErrorInvalidValue;
  const std::string name = baseName(function);
  if (!exported(name)) return cu::kErrorInvalidValue;
  State& g = *gState;
  std::lock_guard<std::mutex> lock(g.injectMu);
  const bool had = g.inject.count(name) != 0;
  if (count == 0) {
    if (had) {
      g.inject.erase(name);
      g.injectPending.fetch_sub(1);
    }
    return cu::kSuccess;
  }
  g.inject[name] = {count, result};
  if (!had) g.injectPending.fetch_add(1);
  return cu::kSuccess;
}

COLL_DOUBLE_EXPORT void collCudaDoubleClearInjectedErrors(void) {
  State& g = *gState;
  std::lock_guard<std::mutex> lock(g.injectMu);
  g.inject.clear();
  g.injectPending.store(0);
}

COLL_DOUBLE_EXPORT size_t collCudaDoubleDeviceBytesAllocated(void) {
  std::lock_guard<std::mutex> lock(gState->memMu);
  return gState->deviceBytes;
}

COLL_DOUBLE_EXPORT int collCudaDoubleDeviceAllocations(void) {
  std::lock_guard<std::mutex> lock(gState->memMu);
  return gState->deviceAllocations;
}

COLL_DOUBLE_EXPORT size_t collCudaDoubleHostBytesAllocated(void) {
  std::lock_guard<std::mutex> lock(gState->memMu);
  return gState->hostBytes;
}

COLL_DOUBLE_EXPORT int collCudaDoubleHostRegistrations(void) {
  std::lock_guard<std::mutex> lock(gState->memMu);
  return gState->hostRegistrations;
}

COLL_DOUBLE_EXPORT void collCudaDoubleSetDeviceMemoryLimit(size_t bytes) {
  std::lock_guard<std::mutex> lock(gState->memMu);
  gState->memoryLimit = bytes;
}

COLL_DOUBLE_EXPORT void* collCudaDoubleShadow(CUdeviceptr dptr) {
  State& g = *gState;
  std::lock_guard<std::mutex> lock(g.memMu);
  if (!inArena(g, dptr)) return nullptr;
  auto r = findDevice(g, dptr);
  return r ? static_cast<char*>(r->shadow) + (dptr - r->base) : nullptr;
}

COLL_DOUBLE_EXPORT void collCudaDoubleClearStickyErrors(void) {
  std::lock_guard<std::mutex> lock(gState->mu);
  for (auto& ctx : gState->contexts) ctx->sticky = cu::kSuccess;
  gState->cv.notify_all();
}
