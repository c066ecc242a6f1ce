// Conformance driver and point-to-point benchmark for NCCL net plugins (libnccl-net-collective.so):
// loads a plugin the way NCCL does and drives it through NCCL's calling sequence between two processes.
//
// Two processes (fork before anything is loaded) each resolve, dlopen and initialise the plugin on
// their own; the only thing that crosses between them is the 128-byte listen handle, over a pipe
// (plus one-byte barriers where NCCL would use its bootstrap). Each check names where NCCL makes the
// same call: src/plugin/net.cc and src/plugin/net/net_vN.cc (loading, version shims),
// src/plugin/plugin_open.cc (library name resolution), src/transport/net.cc (the proxy's calls).
// Exit status 0 = every check passed on both processes.
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "src/nccl_net/nccl_net_abi.h"

namespace {

using Clock = std::chrono::steady_clock;

// ---- options ----------------------------------------------------------------------------------
struct Options {
  std::string plugin;  // NCCL_NET_PLUGIN semantics; empty = "libnccl-net.so"
  int version = 0;     // 0 = the newest exported, as NCCL picks
  int dev = 0;
  int timeoutSec = 120;  // whole-process watchdog
  int channels = 2;      // comm pairs per direction in the traffic phases (NCCL: one per channel)
  int groups = 300;      // grouped receives per channel in the concurrency phase
  bool verbose = false;
  bool abiOnly = false;
  bool skipAbuse = false;
  // --skip-unavailable: init refusing the transport (ncclInvalidUsage: COLL_NCCL_NET names one this
  // machine lacks, e.g. ib without an RDMA device) exits 77, ctest's "skipped", instead of failing.
  bool skipUnavailable = false;
  // benchmark mode
  size_t benchBytes = 0;
  int inflight = 8;
  double seconds = 5;
  std::string netns[2];
  int cpus[2] = {-1, -1};  // --cpus A,B: pin rank 0 to CPU A and rank 1 to CPU B (as two hosts would be)
};

constexpr int kSkipped = 77;            // ctest SKIP_RETURN_CODE
int gRank = -1;                         // 0 = parent, 1 = child
const char* volatile gPhase = "start";  // read by the watchdog's signal handler

void say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void say(const char* fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  fprintf(stderr, "[driver rank %d] %s\n", gRank, line);
}

// The first failed check ends this process; the peer sees the pipe close and fails fast too.
[[noreturn]] void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
[[noreturn]] void fail(const char* fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  fprintf(stderr, "[driver rank %d] FAIL in phase '%s': %s\n", gRank, gPhase, line);
  fflush(stderr);
  _exit(1);
}

#define EXPECT(cond, ...)           \
  do {                              \
    if (!(cond)) fail(__VA_ARGS__); \
  } while (0)

const char* resultName(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    case ncclTimeout: return "ncclTimeout";
    default: return "unknown ncclResult_t";
  }
}

#define NCHECK(call)                                                                    \
  do {                                                                                  \
    ncclResult_t r_ = (call);                                                           \
    if (r_ != ncclSuccess) fail("%s returned %s (%d)", #call, resultName(r_), (int)r_); \
  } while (0)

void watchdog(int) {
  static const char prefix[] = "[driver] FAIL: watchdog timeout (a plugin call blocked or never completed) in phase ";
  ssize_t ignored = write(2, prefix, sizeof(prefix) - 1);
  const char* phase = gPhase;
  ignored = write(2, phase, strlen(phase));
  ignored = write(2, "\n", 1);
  (void)ignored;
  _exit(124);
}

double secondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// ---- the logger NCCL hands to init (src/debug.cc ncclDebugLog) ------------------------------------
int gLogLines = 0;
int gLogWarns = 0;
bool gVerbose = false;

extern "C" void driverLogger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt,
                             ...) {
  ++gLogLines;
  if (level == NCCL_LOG_WARN) ++gLogWarns;
  if (!gVerbose && level != NCCL_LOG_WARN) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  const char* lvl = level == NCCL_LOG_WARN ? "WARN" : level == NCCL_LOG_INFO ? "INFO" : "TRACE";
  fprintf(stderr, "[driver rank %d] plugin %s %s:%d (flags 0x%lx) %s\n", gRank, lvl, file ? file : "?", line, flags,
          msg);
}

// NCCL always hands v10+ plugins its profiler callback (src/plugin/net.cc passes ncclProfilerCallback);
// a plugin may call it for its own events, so the driver passes one that accepts and ignores them.
extern "C" ncclResult_t driverProfiler(void** eHandle, int, void*, int64_t, void*) {
  if (eHandle) *eHandle = nullptr;
  return ncclSuccess;
}

// ---- the pipe between the two processes ------------------------------------------------------------
struct PeerPipe {
  int in = -1;
  int out = -1;

  void sendAll(const void* data, size_t n) const {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t w = write(out, p, n);
      if (w < 0 && errno == EINTR) continue;
      EXPECT(w > 0, "pipe to the peer process broke (peer exited?): %s", strerror(errno));
      p += w;
      n -= static_cast<size_t>(w);
    }
  }
  // Every wait has a deadline: the peer may have died or hung.
  void recvAll(void* data, size_t n, double timeoutSec = 60) const {
    char* p = static_cast<char*>(data);
    const auto start = Clock::now();
    while (n > 0) {
      const double left = timeoutSec - secondsSince(start);
      EXPECT(left > 0, "timed out after %.0f s waiting for the peer process", timeoutSec);
      pollfd pfd{in, POLLIN, 0};
      int rc = poll(&pfd, 1, static_cast<int>(std::min(left, 1.0) * 1000) + 1);
      if (rc < 0 && errno == EINTR) continue;
      if (rc <= 0) continue;
      ssize_t r = read(in, p, n);
      if (r < 0 && errno == EINTR) continue;
      EXPECT(r > 0, "the peer process closed the pipe (it failed or exited; see its messages)");
      p += r;
      n -= static_cast<size_t>(r);
    }
  }
  void barrier(char tag) const {
    sendAll(&tag, 1);
    char got = 0;
    recvAll(&got, 1);
    EXPECT(got == tag, "barrier mismatch: the processes are in different phases (%c vs %c)", tag, got);
  }
};

// ---- loading: NCCL's resolution of NCCL_NET_PLUGIN and its dlsym of each version -------------------
struct Loaded {
  void* lib = nullptr;
  std::string path;
  const void* tables[12] = {};  // indexed by version
};

// src/plugin/plugin_open.cc openPluginLib: the name as given first, then libnccl-net-<name>.so when
// the name is neither a path nor already a library name; unset means libnccl-net.so.
Loaded loadPlugin(const std::string& name) {
  std::vector<std::string> tries;
  if (name.empty()) {
    tries.push_back("libnccl-net.so");
  } else {
    tries.push_back(name);
    const bool isPath = name.find('/') != std::string::npos;
    const bool isLibName =
        name.rfind("lib", 0) == 0 && name.size() >= 3 && name.compare(name.size() - 3, 3, ".so") == 0;
    if (!isPath && !isLibName) tries.push_back("libnccl-net-" + name + ".so");
  }
  Loaded out;
  std::string errors;
  for (const auto& t : tries) {
    // NCCL opens plugins RTLD_NOW | RTLD_LOCAL (src/os/linux.cc ncclOsDlopen).
    out.lib = dlopen(t.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (out.lib) {
      out.path = t;
      break;
    }
    errors += std::string(" [") + t + ": " + dlerror() + "]";
  }
  EXPECT(out.lib, "could not load the plugin%s (set LD_LIBRARY_PATH to the plugin's directory)", errors.c_str());
  // src/plugin/net.cc ncclNetPluginLoad: tries ncclNetPlugin_v12, v11, ... and keeps the first found.
  for (int v = 8; v <= 11; ++v) {
    const std::string sym = "ncclNetPlugin_v" + std::to_string(v);
    out.tables[v] = dlsym(out.lib, sym.c_str());
  }
  return out;
}

// Sizes NCCL's compiler gives these structs (computed from NVIDIA/nccl src/include/plugin/net/net_vN.h
// on x86-64); the header we include must agree, and so must the size of the object the plugin exports.
struct AbiExpect {
  int version;
  size_t table;
  size_t props;
  size_t seenTable;
  size_t seenProps;
};
const AbiExpect kAbi[] = {
    {8, 152, 64, sizeof(ncclNet_v8_t), sizeof(ncclNetProperties_v8_t)},
    {9, 160, 104, sizeof(ncclNet_v9_t), sizeof(ncclNetProperties_v9_t)},
    {10, 160, 104, sizeof(ncclNet_v10_t), sizeof(ncclNetProperties_v10_t)},
    {11, 176, 112, sizeof(ncclNet_v11_t), sizeof(ncclNetProperties_v11_t)},
};

void checkAbi(const Loaded& loaded, bool requireAll) {
  gPhase = "abi";
  EXPECT(NCCL_NET_HANDLE_MAXSIZE == 128 && NCCL_NET_MAX_REQUESTS == 32 && NCCL_PTR_HOST == 1,
         "ABI constants differ from NCCL's");
  EXPECT(sizeof(ncclNetDeviceHandle_v8_t) == 32 && sizeof(ncclNetVDeviceProps_v9_t) == 20 &&
             sizeof(ncclNetCommConfig_v10_t) == 4 && sizeof(ncclNetAttr_v11_t) == 44,
         "helper struct sizes differ from NCCL's");
  int found = 0;
  for (const auto& a : kAbi) {
    EXPECT(a.seenTable == a.table, "sizeof(ncclNet_v%d_t) is %zu in nccl_net_abi.h, NCCL's is %zu", a.version,
           a.seenTable, a.table);
    EXPECT(a.seenProps == a.props, "sizeof(ncclNetProperties_v%d_t) is %zu in nccl_net_abi.h, NCCL's is %zu", a.version,
           a.seenProps, a.props);
    const void* sym = loaded.tables[a.version];
    if (!sym) {
      EXPECT(!requireAll, "the plugin does not export ncclNetPlugin_v%d", a.version);
      continue;
    }
    ++found;
    // The exported object's ELF size: what the plugin was compiled with.
    Dl_info info{};
    void* extra = nullptr;
    const bool haveEntry = dladdr1(sym, &info, &extra, RTLD_DL_SYMENT) != 0;
    const auto* elfSym = static_cast<const ElfW(Sym)*>(extra);
    EXPECT(haveEntry && elfSym, "dladdr1 found no symbol entry for ncclNetPlugin_v%d", a.version);
    EXPECT(elfSym->st_size == a.table, "ncclNetPlugin_v%d is %zu bytes in the plugin, NCCL reads %zu", a.version,
           static_cast<size_t>(elfSym->st_size), a.table);
    EXPECT(ELF64_ST_TYPE(elfSym->st_info) == STT_OBJECT, "ncclNetPlugin_v%d is not a data object", a.version);
  }
  EXPECT(found > 0, "the plugin exports none of ncclNetPlugin_v8..v11");
}

// ---- one view of the four versions (what NCCL's src/plugin/net/net_vN.cc shims do) -----------------
struct Props {
  std::string name, pciPath;
  uint64_t guid = 0;
  int ptrSupport = 0, regIsGlobal = 0, forceFlush = 0, speed = 0, port = 0;
  float latency = 0;
  int maxComms = 0, maxRecvs = 0, netDeviceType = 0, netDeviceVersion = 0;
  int vNdevs = 1, vDevs[NCCL_NET_MAX_DEVS_PER_NIC] = {};
  size_t maxP2pBytes = NCCL_NET_MAX_SIZE_DEFAULT, maxCollBytes = NCCL_NET_MAX_SIZE_DEFAULT;
  int maxMultiRequestSize = 1;
};

int gDummyProfilerHandle = 0;  // NCCL passes a pointer to its profiler's handle slot; never NULL

class Net {
  // The functions whose signature every version shares, called through the caller's table type.
  template <class F>
  auto same(F f) const {
    switch (v_) {
      case 8: return f(v8());
      case 9: return f(v9());
      case 10: return f(v10());
      default: return f(v11());
    }
  }
  const ncclNet_v8_t* v8() const { return static_cast<const ncclNet_v8_t*>(t_); }
  const ncclNet_v9_t* v9() const { return static_cast<const ncclNet_v9_t*>(t_); }
  const ncclNet_v10_t* v10() const { return static_cast<const ncclNet_v10_t*>(t_); }
  const ncclNet_v11_t* v11() const { return static_cast<const ncclNet_v11_t*>(t_); }

 public:
  Net(int version, const void* table) : v_(version), t_(table) {}
  int version() const { return v_; }
  const char* name() const {
    return same([](auto* t) { return t->name; });
  }

  // init: v8/v9 init(logger); v10 init(logger, profiler); v11 init(&ctx, commId, &config, logger, profiler).
  // src/plugin/net.cc ncclNetPluginInit, once per NCCL communicator from v11 on (net_v8.cc keeps v8-v10 to once).
  ncclResult_t init(void** ctx, uint64_t commId) const {
    switch (v_) {
      case 8: return v8()->init(driverLogger);
      case 9: return v9()->init(driverLogger);
      case 10: return v10()->init(driverLogger, driverProfiler);
      default: {
        ncclNetCommConfig_v11_t config{NCCL_NET_TRAFFIC_CLASS_UNDEF};
        return v11()->init(ctx, commId, &config, driverLogger, driverProfiler);
      }
    }
  }
  ncclResult_t finalize(void* ctx) const { return v_ >= 11 ? v11()->finalize(ctx) : ncclSuccess; }
  ncclResult_t devices(int* n) const {
    return same([&](auto* t) { return t->devices(n); });
  }
  ncclResult_t getProperties(int dev, Props* p) const {
    auto common = [&](auto& raw) {
      p->name = raw.name ? raw.name : "";
      p->pciPath = raw.pciPath ? raw.pciPath : "";
      p->guid = raw.guid;
      p->ptrSupport = raw.ptrSupport;
      p->regIsGlobal = raw.regIsGlobal;
      p->speed = raw.speed;
      p->port = raw.port;
      p->latency = raw.latency;
      p->maxComms = raw.maxComms;
      p->maxRecvs = raw.maxRecvs;
      p->netDeviceType = raw.netDeviceType;
      p->netDeviceVersion = raw.netDeviceVersion;
    };
    auto v9fields = [&](auto& raw) {
      p->forceFlush = raw.forceFlush;
      p->vNdevs = raw.vProps.ndevs;
      for (int i = 0; i < NCCL_NET_MAX_DEVS_PER_NIC; ++i) p->vDevs[i] = raw.vProps.devs[i];
      p->maxP2pBytes = raw.maxP2pBytes;
      p->maxCollBytes = raw.maxCollBytes;
    };
    // Poison first: a field the plugin forgets to fill must not look valid by luck.
    switch (v_) {
      case 8: {
        ncclNetProperties_v8_t raw;
        memset(&raw, 0xA5, sizeof(raw));
        ncclResult_t r = v8()->getProperties(dev, &raw);
        if (r == ncclSuccess) common(raw), p->vDevs[0] = dev;
        return r;
      }
      case 9:
      case 10: {
        ncclNetProperties_v9_t raw;
        memset(&raw, 0xA5, sizeof(raw));
        ncclResult_t r = v_ == 9 ? v9()->getProperties(dev, &raw) : v10()->getProperties(dev, &raw);
        if (r == ncclSuccess) common(raw), v9fields(raw);
        return r;
      }
      default: {
        ncclNetProperties_v11_t raw;
        memset(&raw, 0xA5, sizeof(raw));
        ncclResult_t r = v11()->getProperties(dev, &raw);
        if (r == ncclSuccess) common(raw), v9fields(raw), p->maxMultiRequestSize = raw.maxMultiRequestSize;
        return r;
      }
    }
  }
  ncclResult_t listen(void* ctx, int dev, void* handle, void** lc) const {
    return v_ >= 11 ? v11()->listen(ctx, dev, handle, lc)
                    : (v_ == 8   ? v8()->listen(dev, handle, lc)
                       : v_ == 9 ? v9()->listen(dev, handle, lc)
                                 : v10()->listen(dev, handle, lc));
  }
  ncclResult_t connect(void* ctx, int dev, void* handle, void** sc, ncclNetDeviceHandle_v8_t** dh) const {
    switch (v_) {
      case 8: return v8()->connect(dev, handle, sc, dh);
      case 9: return v9()->connect(dev, handle, sc, dh);
      case 10: {
        // src/transport/net.cc passes the communicator's traffic class; UNDEF when the user set none.
        ncclNetCommConfig_v10_t config{NCCL_NET_TRAFFIC_CLASS_UNDEF};
        return v10()->connect(dev, &config, handle, sc, dh);
      }
      default: return v11()->connect(ctx, dev, handle, sc, dh);
    }
  }
  ncclResult_t accept(void* lc, void** rc, ncclNetDeviceHandle_v8_t** dh) const {
    return same([&](auto* t) { return t->accept(lc, rc, dh); });
  }
  ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mh) const {
    return same([&](auto* t) { return t->regMr(comm, data, size, type, mh); });
  }
  ncclResult_t deregMr(void* comm, void* mh) const {
    return same([&](auto* t) { return t->deregMr(comm, mh); });
  }
  // v8 takes int sizes; a negative or > INT_MAX size reaches the plugin as it would from a broken caller.
  ncclResult_t isend(void* sc, void* data, long long size, int tag, void* mh, void** req) const {
    switch (v_) {
      case 8: return v8()->isend(sc, data, static_cast<int>(size), tag, mh, req);
      case 9: return v9()->isend(sc, data, static_cast<size_t>(size), tag, mh, req);
      case 10: return v10()->isend(sc, data, static_cast<size_t>(size), tag, mh, &gDummyProfilerHandle, req);
      default: return v11()->isend(sc, data, static_cast<size_t>(size), tag, mh, &gDummyProfilerHandle, req);
    }
  }
  ncclResult_t irecv(void* rc, int n, void** data, const size_t* sizes, int* tags, void** mhs, void** req) const {
    size_t s[64];
    int si[64];
    void* ph[64];
    const int m = std::min(std::max(n, 0), 64);
    for (int i = 0; i < m; ++i) {
      s[i] = sizes[i];
      si[i] = static_cast<int>(sizes[i]);
      ph[i] = &gDummyProfilerHandle;
    }
    switch (v_) {
      case 8: return v8()->irecv(rc, n, data, si, tags, mhs, req);
      case 9: return v9()->irecv(rc, n, data, s, tags, mhs, req);
      case 10: return v10()->irecv(rc, n, data, s, tags, mhs, ph, req);
      default: return v11()->irecv(rc, n, data, s, tags, mhs, ph, req);
    }
  }
  ncclResult_t iflush(void* rc, int n, void** data, int* sizes, void** mhs, void** req) const {
    return same([&](auto* t) { return t->iflush(rc, n, data, sizes, mhs, req); });
  }
  ncclResult_t test(void* req, int* done, int* sizes) const {
    return same([&](auto* t) { return t->test(req, done, sizes); });
  }
  ncclResult_t closeSend(void* c) const {
    return same([&](auto* t) { return t->closeSend(c); });
  }
  ncclResult_t closeRecv(void* c) const {
    return same([&](auto* t) { return t->closeRecv(c); });
  }
  ncclResult_t closeListen(void* c) const {
    return same([&](auto* t) { return t->closeListen(c); });
  }
  bool hasIrecvConsumed() const {
    return same([](auto* t) { return t->irecvConsumed != nullptr; });
  }
  ncclResult_t irecvConsumed(void* rc, int n, void* req) const {
    return same([&](auto* t) { return t->irecvConsumed(rc, n, req); });
  }
  bool hasSetNetAttr() const { return v_ >= 11 && v11()->setNetAttr != nullptr; }
  ncclResult_t setNetAttr(void* ctx, ncclNetAttr_v11_t* a) const { return v11()->setNetAttr(ctx, a); }

  int v_;
  const void* t_;
};

// ---- connection setup ----------------------------------------------------------------------------
struct Pair {
  void* sc = nullptr;  // my send comm: connected to the peer's listen handle
  void* rc = nullptr;  // my recv comm: accepted on my listen comm
};

struct Ctx {
  const Net* net = nullptr;
  void* ctx = nullptr;  // v11's per-communicator context
  int dev = 0;
  int ndev = 0;
  const PeerPipe* pipe = nullptr;
  Props props;
  double timeout = 60;
};

void setAttrIfAny(const Ctx& c) {
  // src/transport/net.cc setNetAttrs / setXferNetAttrs: v11 plugins are told NCCL's traffic shape.
  if (!c.net->hasSetNetAttr()) return;
  ncclNetAttr_v11_t attr;
  attr.sendCommAttr = {NCCL_NET_ATTR_UNDEF, NCCL_NET_ATTR_UNDEF, NCCL_NET_ATTR_UNDEF, NCCL_NET_ATTR_UNDEF};
  attr.recvCommAttr = attr.sendCommAttr;
  attr.op = static_cast<uint32_t>(NCCL_NET_ATTR_UNDEF);
  attr.algo = static_cast<uint32_t>(NCCL_NET_ATTR_UNDEF);
  attr.proto = static_cast<uint32_t>(NCCL_NET_ATTR_UNDEF);
  NCHECK(c.net->setNetAttr(c.ctx, &attr));
}

// I listen recvCount times and connect sendCount times (the peer's recvCount). The handle is the only
// thing that crosses. src/transport/net.cc: recvProxySetup calls listen and returns the handle as the
// connect info; sendProxyConnect calls connect (again on the same handle buffer while it returns a
// NULL comm: the plugin may keep state in the handle); recvProxyConnect calls accept (again while NULL)
// and closeListen as soon as the comm exists.
std::vector<Pair> establish(const Ctx& c, int sendCount, int recvCount, int* nullReturns = nullptr) {
  const Net& net = *c.net;
  std::vector<void*> listens(recvCount, nullptr);
  std::vector<char> handles(static_cast<size_t>(recvCount) * NCCL_NET_HANDLE_MAXSIZE);
  for (int i = 0; i < recvCount; ++i) {
    unsigned char buf[2 * NCCL_NET_HANDLE_MAXSIZE];
    memset(buf, 0xA5, sizeof(buf));
    NCHECK(net.listen(c.ctx, c.dev, buf, &listens[i]));
    EXPECT(listens[i] != nullptr, "listen returned ncclSuccess and a NULL listen comm");
    for (size_t j = NCCL_NET_HANDLE_MAXSIZE; j < sizeof(buf); ++j)
      EXPECT(buf[j] == 0xA5, "listen wrote past the %d-byte handle (byte %zu)", NCCL_NET_HANDLE_MAXSIZE, j);
    memcpy(&handles[static_cast<size_t>(i) * NCCL_NET_HANDLE_MAXSIZE], buf, NCCL_NET_HANDLE_MAXSIZE);
  }
  if (recvCount > 0) c.pipe->sendAll(handles.data(), handles.size());
  std::vector<char> peerHandles(static_cast<size_t>(sendCount) * NCCL_NET_HANDLE_MAXSIZE);
  if (sendCount > 0) c.pipe->recvAll(peerHandles.data(), peerHandles.size());

  std::vector<Pair> pairs(std::max(sendCount, recvCount));
  setAttrIfAny(c);
  const auto start = Clock::now();
  int nulls = 0;
  for (;;) {
    bool missing = false;
    for (int i = 0; i < sendCount; ++i) {
      if (pairs[i].sc) continue;
      ncclNetDeviceHandle_v8_t* devHandle = nullptr;  // NULL: NCCL asks for no device offload
      NCHECK(net.connect(c.ctx, c.dev, &peerHandles[static_cast<size_t>(i) * NCCL_NET_HANDLE_MAXSIZE], &pairs[i].sc,
                         &devHandle));
      EXPECT(devHandle == nullptr, "connect set a device handle although NCCL asked for none");
      if (!pairs[i].sc) ++nulls, missing = true;
    }
    for (int i = 0; i < recvCount; ++i) {
      if (pairs[i].rc) continue;
      ncclNetDeviceHandle_v8_t* devHandle = nullptr;
      NCHECK(net.accept(listens[i], &pairs[i].rc, &devHandle));
      EXPECT(devHandle == nullptr, "accept set a device handle although NCCL asked for none");
      if (pairs[i].rc) {
        NCHECK(net.closeListen(listens[i]));
        listens[i] = nullptr;
      } else {
        ++nulls, missing = true;
      }
    }
    if (!missing) break;
    EXPECT(secondsSince(start) < c.timeout, "connect/accept still returned NULL comms after %.0f s (%d NULL returns)",
           c.timeout, nulls);
    sched_yield();
  }
  if (nullReturns) *nullReturns = nulls;
  return pairs;
}

// ---- deterministic traffic scripts ----------------------------------------------------------------
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }
};

struct Msg {
  size_t sendSize = 0;
  size_t recvSize = 0;  // never smaller than sendSize; often larger (NCCL posts whole slots)
  int tag = 0;
};
struct Group {
  std::vector<Msg> msgs;       // one grouped irecv (n = msgs.size())
  std::vector<int> sendOrder;  // the sender's isend order within the group: tags select
  bool optionalCompletion = false;
};

inline uint8_t patternByte(uint64_t base, size_t j) { return static_cast<uint8_t>(base + j * 131 + (j >> 9)); }
inline uint64_t msgBase(int senderRank, int channel, size_t group, int index) {
  Rng r{(static_cast<uint64_t>(senderRank) << 56) ^ (static_cast<uint64_t>(channel) << 48) ^ (group << 8) ^
        static_cast<uint64_t>(index)};
  return r.next();
}

std::vector<Group> basicScript() {
  // Sizes around the edges a byte stream cares about; receives larger than sends by 0..64 KiB.
  const size_t sizes[] = {0, 1, 7, 100, 4095, 4096, 4097, 65536 + 13, 1 << 20, (8 << 20) - 5};
  const size_t extra[] = {0, 1, 4096, 0, 1, 0, 65536, 3, 0, 5};
  std::vector<Group> out;
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i) {
    Group g;
    g.msgs.push_back({sizes[i], sizes[i] + extra[i], static_cast<int>(i)});
    g.sendOrder = {0};
    out.push_back(g);
  }
  return out;
}

std::vector<Group> groupedScript(uint64_t seed, int groups, int maxN, size_t slotBytes, bool optional) {
  Rng rng{seed};
  std::vector<Group> out(groups);
  for (int g = 0; g < groups; ++g) {
    Group& grp = out[g];
    const int n = (g % 5 == 0) ? 1 : 1 + static_cast<int>(rng.below(maxN));
    std::vector<int> tags;
    while (static_cast<int>(tags.size()) < n) {
      int t = static_cast<int>(rng.below(4096));
      if (std::find(tags.begin(), tags.end(), t) == tags.end()) tags.push_back(t);
    }
    for (int i = 0; i < n; ++i) {
      Msg m;
      const uint64_t kind = rng.below(100);
      m.sendSize = kind < 5    ? 0
                   : kind < 25 ? 1 + rng.below(64)
                   : kind < 50 ? 64 + rng.below(4096 - 64)
                   : kind < 80 ? 4096 + rng.below(65536 - 4096)
                               : 65536 + rng.below(slotBytes - 65536 + 1);
      m.recvSize = m.sendSize + (rng.below(2) ? 0 : rng.below(slotBytes - m.sendSize + 1));
      m.tag = tags[i];
      grp.msgs.push_back(m);
      grp.sendOrder.push_back(i);
    }
    // Shuffle the send order inside the group: the receive is matched by tag, not by position.
    for (int i = n - 1; i > 0; --i) std::swap(grp.sendOrder[i], grp.sendOrder[rng.below(i + 1)]);
    grp.optionalCompletion = optional && n == 1 && g % 7 == 3;
  }
  return out;
}

char* allocPool(size_t bytes) {
  void* p = mmap(nullptr, std::max<size_t>(bytes, 4096), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT(p != MAP_FAILED, "mmap of %zu bytes failed", bytes);
  return static_cast<char*>(p);
}

void* const kPoison = reinterpret_cast<void*>(uintptr_t{0xDEADBEEF0BADF00Dull});

// The send side of one comm, as src/transport/net.cc sendProxyProgress drives it: isend the next step
// when its data is ready (retry the same step while the plugin answers a NULL request), test the
// oldest posted step, never more than `window` in flight.
class Sender {
 public:
  Sender(const Ctx& c, void* sc, const std::vector<Group>* script, int rank, int channel, size_t slotBytes, int window)
      : c_(c), sc_(sc), script_(script), rank_(rank), channel_(channel), slotBytes_(slotBytes), window_(window) {
    for (size_t g = 0; g < script->size(); ++g)
      for (int i : (*script)[g].sendOrder) order_.push_back({g, i});
    pool_ = allocPool(slotBytes_ * window_);
    // src/transport/net.cc sendProxyConnect: regMr(netSendComm, buffers, NCCL_PTR_HOST) once per buffer.
    NCHECK(c_.net->regMr(sc_, pool_, slotBytes_ * window_, NCCL_PTR_HOST, &mh_));
    reqs_.assign(window_, nullptr);
  }
  ~Sender() { munmap(pool_, std::max<size_t>(slotBytes_ * window_, 4096)); }
  void deregister() { NCHECK(c_.net->deregMr(sc_, mh_)); }
  bool done() const { return oldest_ == order_.size(); }
  long nullRequests() const { return nulls_; }
  std::string state() const {
    return "send ch" + std::to_string(channel_) + ": " + std::to_string(oldest_) + " done, " +
           std::to_string(next_ - oldest_) + " in flight, " + std::to_string(order_.size() - next_) +
           " not posted (NULL answers " + std::to_string(nulls_) + ")";
  }

  bool step() {
    bool progress = false;
    while (next_ < order_.size() && next_ - oldest_ < static_cast<size_t>(window_)) {
      const auto [g, i] = order_[next_];
      const Msg& m = (*script_)[g].msgs[i];
      char* buf = pool_ + (next_ % window_) * slotBytes_;
      if (!filled_) {
        const uint64_t base = msgBase(rank_, channel_, g, i);
        for (size_t j = 0; j < m.sendSize; ++j) buf[j] = static_cast<char>(patternByte(base, j));
        filled_ = true;
      }
      void* req = kPoison;
      NCHECK(c_.net->isend(sc_, buf, static_cast<long long>(m.sendSize), m.tag, mh_, &req));
      EXPECT(req != kPoison, "isend returned without writing *request (must be a request or NULL)");
      if (!req) {
        ++nulls_;
        break;
      }
      reqs_[next_ % window_] = req;
      ++next_;
      filled_ = false;
      progress = true;
    }
    if (oldest_ < next_) {
      const auto [g, i] = order_[oldest_];
      int isDone = 0;
      int size = -1;
      NCHECK(c_.net->test(reqs_[oldest_ % window_], &isDone, &size));
      if (isDone) {
        EXPECT(size == static_cast<int>((*script_)[g].msgs[i].sendSize),
               "test of a send reported %d bytes, %zu were sent (channel %d group %zu)", size,
               (*script_)[g].msgs[i].sendSize, channel_, g);
        ++oldest_;
        progress = true;
      }
    }
    return progress;
  }

 private:
  const Ctx& c_;
  void* sc_;
  const std::vector<Group>* script_;
  int rank_, channel_;
  size_t slotBytes_;
  int window_;
  std::vector<std::pair<size_t, int>> order_;
  char* pool_ = nullptr;
  void* mh_ = nullptr;
  std::vector<void*> reqs_;
  size_t next_ = 0, oldest_ = 0;
  bool filled_ = false;
  long nulls_ = 0;
};

// The receive side, as recvProxyProgress drives it: one grouped irecv per step (n subs, a tag each),
// test the oldest, check the sizes it reports, flush (iflush + test) and tell the plugin the data was
// consumed (irecvConsumed) where the plugin has that entry.
class Receiver {
 public:
  Receiver(const Ctx& c, void* rc, const std::vector<Group>* script, int peerRank, int channel, size_t slotBytes,
           int window, int maxN, int flushEvery)
      : c_(c),
        rc_(rc),
        script_(script),
        peer_(peerRank),
        channel_(channel),
        slotBytes_(slotBytes),
        window_(window),
        maxN_(maxN),
        flushEvery_(flushEvery) {
    poolBytes_ = slotBytes_ * window_ * maxN_;
    pool_ = allocPool(poolBytes_);
    // src/transport/net.cc recvProxyConnect: regMr(netRecvComm, buffers, NCCL_PTR_HOST).
    NCHECK(c_.net->regMr(rc_, pool_, poolBytes_, NCCL_PTR_HOST, &mh_));
    reqs_.assign(window_, nullptr);
  }
  ~Receiver() { munmap(pool_, std::max<size_t>(poolBytes_, 4096)); }
  void deregister() { NCHECK(c_.net->deregMr(rc_, mh_)); }
  bool done() const { return oldest_ == script_->size(); }
  long nullRequests() const { return nulls_; }
  std::string state() const {
    return "recv ch" + std::to_string(channel_) + ": " + std::to_string(oldest_) + " groups done, " +
           std::to_string(next_ - oldest_) + " in flight, " + std::to_string(script_->size() - next_) +
           " not posted (NULL answers " + std::to_string(nulls_) + ")";
  }
  long flushes() const { return flushes_; }

  bool step() {
    bool progress = false;
    while (next_ < script_->size() && next_ - oldest_ < static_cast<size_t>(window_)) {
      const Group& grp = (*script_)[next_];
      const int n = static_cast<int>(grp.msgs.size());
      void* data[64];
      size_t sizes[64];
      int tags[64];
      void* mhs[64];
      for (int i = 0; i < n; ++i) {
        data[i] = slot(next_, i);
        if (!filledThis_) memset(data[i], 0xEE, grp.msgs[i].recvSize);
        sizes[i] = grp.msgs[i].recvSize;
        tags[i] = grp.msgs[i].tag;
        mhs[i] = mh_;
      }
      filledThis_ = true;
      // src/transport/net.cc recvProxyProgress sets *request to NCCL_NET_OPTIONAL_RECV_COMPLETION for
      // single LL/LL128 receives (v10+ see it unchanged: src/plugin/net/net_v10.cc passes irecv through).
      const bool optional = grp.optionalCompletion && c_.net->version() >= 10;
      void* req = optional ? reinterpret_cast<void*>(uintptr_t{NCCL_NET_OPTIONAL_RECV_COMPLETION}) : kPoison;
      NCHECK(c_.net->irecv(rc_, n, data, sizes, tags, mhs, &req));
      EXPECT(req != kPoison, "irecv returned without writing *request (must be a request or NULL)");
      EXPECT(req != reinterpret_cast<void*>(uintptr_t{NCCL_NET_OPTIONAL_RECV_COMPLETION}),
             "irecv left NCCL_NET_OPTIONAL_RECV_COMPLETION in *request instead of a request or NULL");
      if (!req) {
        ++nulls_;
        break;
      }
      reqs_[next_ % window_] = req;
      ++next_;
      filledThis_ = false;
      progress = true;
    }
    if (oldest_ < next_) {
      const Group& grp = (*script_)[oldest_];
      const int n = static_cast<int>(grp.msgs.size());
      int isDone = 0;
      int sizes[64];
      for (int i = 0; i < n; ++i) sizes[i] = -1;
      void* req = reqs_[oldest_ % window_];
      NCHECK(c_.net->test(req, &isDone, sizes));
      if (isDone) {
        const bool optional = grp.optionalCompletion && c_.net->version() >= 10;
        if (!optional) verify(grp, sizes);
        if (c_.net->hasIrecvConsumed()) NCHECK(c_.net->irecvConsumed(rc_, n, req));
        if (flushEvery_ > 0 && oldest_ % flushEvery_ == 0) flush(grp, sizes);
        ++oldest_;
        progress = true;
      }
    }
    return progress;
  }

 private:
  char* slot(size_t group, int i) const {
    return pool_ + ((group % window_) * maxN_ + static_cast<size_t>(i)) * slotBytes_;
  }
  void verify(const Group& grp, const int* sizes) const {
    const size_t g = oldest_;
    for (size_t i = 0; i < grp.msgs.size(); ++i) {
      const Msg& m = grp.msgs[i];
      EXPECT(sizes[i] == static_cast<int>(m.sendSize),
             "test of a grouped receive reported %d bytes for sub %zu (tag %d), the peer sent %zu "
             "(channel %d group %zu, n=%zu, receive size %zu)",
             sizes[i], i, m.tag, m.sendSize, channel_, g, grp.msgs.size(), m.recvSize);
      const unsigned char* p = reinterpret_cast<const unsigned char*>(slot(g, static_cast<int>(i)));
      const uint64_t base = msgBase(peer_, channel_, g, static_cast<int>(i));
      for (size_t j = 0; j < m.sendSize; ++j)
        EXPECT(p[j] == patternByte(base, j),
               "received data differs at byte %zu of sub %zu (tag %d, %zu bytes; channel %d group %zu): the wrong "
               "send was matched or the stream is corrupt",
               j, i, m.tag, m.sendSize, channel_, g);
      for (size_t j = m.sendSize; j < m.recvSize; ++j)
        EXPECT(p[j] == 0xEE, "the plugin wrote byte %zu of a receive beyond the %zu bytes sent (channel %d group %zu)",
               j, m.sendSize, channel_, g);
    }
  }
  // src/transport/net.cc recvProxyProgress: iflush(netRecvComm, n, ptrs, sizes, mhandles, &request)
  // after a receive into GPU memory; a NULL request means nothing to flush. Host memory needs no
  // flush, but a plugin must still answer the call correctly.
  void flush(const Group& grp, const int* received) {
    const int n = static_cast<int>(grp.msgs.size());
    void* data[64];
    int sizes[64];
    void* mhs[64];
    for (int i = 0; i < n; ++i) {
      data[i] = slot(oldest_, i);
      sizes[i] = received[i] < 0 ? static_cast<int>(grp.msgs[i].sendSize) : received[i];
      mhs[i] = mh_;
    }
    void* req = kPoison;
    NCHECK(c_.net->iflush(rc_, n, data, sizes, mhs, &req));
    EXPECT(req != kPoison, "iflush returned without writing *request");
    ++flushes_;
    if (!req) return;
    const auto start = Clock::now();
    for (;;) {
      int isDone = 0;
      NCHECK(c_.net->test(req, &isDone, nullptr));  // NCCL tests flushes with sizes == NULL
      if (isDone) break;
      EXPECT(secondsSince(start) < c_.timeout, "a flush request never completed");
      sched_yield();
    }
  }

  const Ctx& c_;
  void* rc_;
  const std::vector<Group>* script_;
  int peer_, channel_;
  size_t slotBytes_;
  int window_, maxN_, flushEvery_;
  size_t poolBytes_ = 0;
  char* pool_ = nullptr;
  void* mh_ = nullptr;
  std::vector<void*> reqs_;
  size_t next_ = 0, oldest_ = 0;
  bool filledThis_ = false;
  long nulls_ = 0, flushes_ = 0;
};

// Both directions of every channel at once, in one polling loop (NCCL's proxy thread does the same).
void runTraffic(const Ctx& c, std::vector<std::unique_ptr<Sender>>& senders,
                std::vector<std::unique_ptr<Receiver>>& receivers) {
  const auto start = Clock::now();
  for (;;) {
    bool progress = false, all = true;
    for (auto& s : senders) {
      progress |= s->step();
      all &= s->done();
    }
    for (auto& r : receivers) {
      progress |= r->step();
      all &= r->done();
    }
    if (all) return;
    if (secondsSince(start) >= c.timeout) {
      std::string st;
      for (auto& sd : senders) st += "; " + sd->state();
      for (auto& r : receivers) st += "; " + r->state();
      fail("traffic did not complete within %.0f s%s", c.timeout, st.c_str());
    }
    if (!progress) sched_yield();
  }
}

void trafficPhase(const Ctx& c, const std::vector<Pair>& pairs, int rank, const char* what,
                  const std::vector<std::vector<Group>>& sendScripts,
                  const std::vector<std::vector<Group>>& recvScripts, size_t slotBytes, int sendWindow, int recvWindow,
                  int maxN, int flushEvery) {
  std::vector<std::unique_ptr<Sender>> senders;
  std::vector<std::unique_ptr<Receiver>> receivers;
  for (size_t ch = 0; ch < pairs.size(); ++ch) {
    senders.push_back(
        std::make_unique<Sender>(c, pairs[ch].sc, &sendScripts[ch], rank, static_cast<int>(ch), slotBytes, sendWindow));
    receivers.push_back(std::make_unique<Receiver>(c, pairs[ch].rc, &recvScripts[ch], 1 - rank, static_cast<int>(ch),
                                                   slotBytes, recvWindow, maxN, flushEvery));
  }
  const auto start = Clock::now();
  runTraffic(c, senders, receivers);
  long sendNulls = 0, recvNulls = 0, flushes = 0;
  size_t msgs = 0, bytes = 0;
  for (auto& s : senders) sendNulls += s->nullRequests(), s->deregister();
  for (auto& r : receivers) recvNulls += r->nullRequests(), flushes += r->flushes(), r->deregister();
  for (const auto& script : recvScripts)
    for (const auto& g : script)
      for (const auto& m : g.msgs) ++msgs, bytes += m.sendSize;
  if (gRank == 0 || gVerbose)
    say("PASS %s: %zu messages (%.1f MiB) received over %zu channels in %.2f s; NULL requests: %ld isend, %ld "
        "irecv; %ld flushes",
        what, msgs, bytes / 1048576.0, pairs.size(), secondsSince(start), sendNulls, recvNulls, flushes);
}

void closePairs(const Ctx& c, std::vector<Pair>& pairs) {
  // src/transport/net.cc sendProxyFree / recvProxyFree: deregMr, then closeSend / closeRecv.
  for (auto& p : pairs) {
    if (p.sc) NCHECK(c.net->closeSend(p.sc));
    if (p.rc) NCHECK(c.net->closeRecv(p.rc));
    p = Pair{};
  }
}

// ---- the checks of one process ----------------------------------------------------------------------
void checkProperties(const Net& net, int ndev) {
  for (int d = 0; d < ndev; ++d) {
    // src/plugin/net.cc ncclNetCheckDeviceVersion and src/graph/topo.cc read these at init.
    Props p;
    NCHECK(net.getProperties(d, &p));
    EXPECT(!p.name.empty(), "device %d has no name", d);
    EXPECT(p.ptrSupport & NCCL_PTR_HOST, "device %d: ptrSupport 0x%x lacks NCCL_PTR_HOST", d, p.ptrSupport);
    EXPECT((p.ptrSupport & ~(NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF)) == 0,
           "device %d: ptrSupport 0x%x has unknown bits", d, p.ptrSupport);
    EXPECT(p.speed > 0, "device %d: speed %d Mbps", d, p.speed);
    EXPECT(p.latency >= 0 && p.latency < 1e6, "device %d: latency %g", d, static_cast<double>(p.latency));
    EXPECT(p.maxComms > 0, "device %d: maxComms %d", d, p.maxComms);
    EXPECT(p.maxRecvs > 1 && p.maxRecvs <= 64, "device %d: maxRecvs %d (grouped receives need > 1)", d, p.maxRecvs);
    EXPECT(p.regIsGlobal == 0 || p.regIsGlobal == 1, "device %d: regIsGlobal %d", d, p.regIsGlobal);
    EXPECT(p.netDeviceType == NCCL_NET_DEVICE_HOST, "device %d: netDeviceType %d (no offload expected)", d,
           p.netDeviceType);
    if (net.version() >= 9) {
      EXPECT(p.forceFlush == 0 || p.forceFlush == 1, "device %d: forceFlush %d", d, p.forceFlush);
      EXPECT(p.maxP2pBytes > 0 && p.maxP2pBytes <= static_cast<size_t>(NCCL_MAX_NET_SIZE_BYTES),
             "device %d: maxP2pBytes %zu outside (0, 1 TiB]", d, p.maxP2pBytes);
      EXPECT(p.maxCollBytes > 0 && p.maxCollBytes <= static_cast<size_t>(NCCL_MAX_NET_SIZE_BYTES),
             "device %d: maxCollBytes %zu outside (0, 1 TiB]", d, p.maxCollBytes);
      EXPECT(p.vNdevs >= 1 && p.vNdevs <= NCCL_NET_MAX_DEVS_PER_NIC, "device %d: vProps.ndevs %d", d, p.vNdevs);
      for (int i = 0; i < p.vNdevs; ++i)
        EXPECT(p.vDevs[i] >= 0 && p.vDevs[i] < ndev, "device %d: vProps.devs[%d] = %d", d, i, p.vDevs[i]);
    }
    if (net.version() >= 11)
      EXPECT(p.maxMultiRequestSize >= 1, "device %d: maxMultiRequestSize %d", d, p.maxMultiRequestSize);
    if (gRank == 0)
      say("device %d: %s pci=%s guid=0x%llx ptrSupport=0x%x speed=%d Mbps latency=%g us port=%d maxComms=%d "
          "maxRecvs=%d regIsGlobal=%d%s",
          d, p.name.c_str(), p.pciPath.c_str(), static_cast<unsigned long long>(p.guid), p.ptrSupport, p.speed,
          static_cast<double>(p.latency), p.port, p.maxComms, p.maxRecvs, p.regIsGlobal,
          net.version() >= 9 ? (" maxP2pBytes=" + std::to_string(p.maxP2pBytes) + " vdevs=" + std::to_string(p.vNdevs) +
                                " forceFlush=" + std::to_string(p.forceFlush))
                                   .c_str()
                             : "");
  }
}

void invalidDevicePhase(const Ctx& c) {
  gPhase = "abuse: invalid device";
  const Net& net = *c.net;
  Props p;
  EXPECT(net.getProperties(c.ndev, &p) != ncclSuccess, "getProperties(%d) of %d devices succeeded", c.ndev, c.ndev);
  EXPECT(net.getProperties(-1, &p) != ncclSuccess, "getProperties(-1) succeeded");
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* lc = nullptr;
  EXPECT(net.listen(c.ctx, c.ndev, handle, &lc) != ncclSuccess, "listen on device %d of %d succeeded", c.ndev, c.ndev);
  EXPECT(lc == nullptr, "a failed listen returned a listen comm");
  void* sc = nullptr;
  ncclNetDeviceHandle_v8_t* dh = nullptr;
  EXPECT(net.connect(c.ctx, -1, handle, &sc, &dh) != ncclSuccess, "connect on device -1 succeeded");
  EXPECT(sc == nullptr, "a failed connect returned a send comm");
  if (gRank == 0) say("PASS invalid device: getProperties, listen and connect refuse device %d and -1", c.ndev);
}

// Misuse by the caller on a healthy pair: more subs than maxRecvs, n = 0, a send larger than the
// version allows (v8: a negative int; v9+: maxP2pBytes + 1). Each must be refused (error or NULL
// request), never accepted and never a crash.
void misusePhase(const Ctx& c) {
  gPhase = "abuse: misuse";
  const Net& net = *c.net;
  std::vector<Pair> pairs = establish(c, 1, 1);
  Pair& p = pairs[0];
  char* buf = allocPool(1 << 16);
  void *smh = nullptr, *rmh = nullptr;
  NCHECK(net.regMr(p.sc, buf, 1 << 16, NCCL_PTR_HOST, &smh));
  NCHECK(net.regMr(p.rc, buf, 1 << 16, NCCL_PTR_HOST, &rmh));
  const int n = c.props.maxRecvs + 1;
  std::vector<void*> data(n, buf);
  std::vector<size_t> sizes(n, 64);
  std::vector<int> tags(n);
  std::vector<void*> mhs(n, rmh);
  for (int i = 0; i < n; ++i) tags[i] = i;
  void* req = kPoison;
  ncclResult_t r = net.irecv(p.rc, n, data.data(), sizes.data(), tags.data(), mhs.data(), &req);
  EXPECT(r != ncclSuccess || req == nullptr, "irecv with n = %d > maxRecvs = %d was accepted", n, c.props.maxRecvs);
  req = kPoison;
  r = net.irecv(p.rc, 0, data.data(), sizes.data(), tags.data(), mhs.data(), &req);
  EXPECT(r != ncclSuccess || req == nullptr, "irecv with n = 0 was accepted");

  long long huge = -1;
  void* region = nullptr;
  size_t regionBytes = 0;
  if (net.version() >= 9 && c.props.maxP2pBytes < (size_t{1} << 34)) {
    // Reserve (not commit) the whole range so a plugin that wrongly reads it does not crash the test.
    regionBytes = c.props.maxP2pBytes + 4096;
    region = mmap(nullptr, regionBytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    EXPECT(region != MAP_FAILED, "could not reserve %zu bytes", regionBytes);
    huge = static_cast<long long>(c.props.maxP2pBytes) + 1;
  }
  if (net.version() == 8 || region) {
    req = kPoison;
    r = net.isend(p.sc, region ? region : buf, huge, 1, smh, &req);
    EXPECT(r != ncclSuccess || req == nullptr, "isend of %lld bytes (limit %zu) was accepted", huge,
           net.version() >= 9 ? c.props.maxP2pBytes : static_cast<size_t>(INT_MAX));
  }
  if (region) munmap(region, regionBytes);
  c.pipe->barrier('m');
  NCHECK(net.deregMr(p.sc, smh));
  NCHECK(net.deregMr(p.rc, rmh));
  closePairs(c, pairs);
  munmap(buf, 1 << 16);
  if (gRank == 0)
    say("PASS misuse: irecv n=%d > maxRecvs and n=0 refused; %s", n,
        net.version() == 8 ? "isend size -1 refused"
                           : (region ? "isend of maxP2pBytes+1 refused" : "(maxP2pBytes too large to probe)"));
}

// Resource exhaustion: receives and sends posted without ever being tested until the plugin says NULL
// (NCCL retries a NULL request later), then both comms closed with all of them still in flight
// (what ncclCommAbort / teardown does: src/transport/net.cc sendProxyFree, recvProxyFree).
void limitsPhase(const Ctx& c) {
  gPhase = "abuse: too many requests";
  const Net& net = *c.net;
  std::vector<Pair> pairs = establish(c, 1, 1);
  Pair& p = pairs[0];
  const size_t bytes = 4096;
  char* rbuf = allocPool(bytes);
  char* sbuf = allocPool(bytes);
  void *smh = nullptr, *rmh = nullptr;
  NCHECK(net.regMr(p.rc, rbuf, bytes, NCCL_PTR_HOST, &rmh));
  NCHECK(net.regMr(p.sc, sbuf, bytes, NCCL_PTR_HOST, &smh));
  const int maxAttempts = 4096;
  int recvs = 0;
  bool recvNull = false;
  for (int a = 0; a < maxAttempts && !recvNull; ++a) {
    void* data = rbuf;
    size_t size = bytes;
    int tag = 5;
    void* req = kPoison;
    NCHECK(net.irecv(p.rc, 1, &data, &size, &tag, &rmh, &req));
    EXPECT(req != kPoison, "irecv returned without writing *request");
    if (req) ++recvs;
    else recvNull = true;
  }
  EXPECT(recvNull, "irecv accepted %d receives on one comm and never answered a NULL request", recvs);
  EXPECT(recvs >= NCCL_NET_MAX_REQUESTS, "irecv answered NULL after only %d receives (NCCL may post %d)", recvs,
         NCCL_NET_MAX_REQUESTS);
  c.pipe->barrier('r');
  int sends = 0;
  bool sendNull = false;
  for (int a = 0; a < maxAttempts && !sendNull; ++a) {
    void* req = kPoison;
    NCHECK(net.isend(p.sc, sbuf, static_cast<long long>(bytes), 5, smh, &req));
    EXPECT(req != kPoison, "isend returned without writing *request");
    if (req) ++sends;
    else sendNull = true;
  }
  EXPECT(sendNull, "isend accepted %d untested sends on one comm and never answered a NULL request", sends);
  EXPECT(sends >= 1, "isend accepted no send although the peer posted %d receives", recvs);
  c.pipe->barrier('s');
  // Close with everything in flight, in NCCL's teardown order (deregMr, then close): must return
  // promptly and successfully, and must not touch the buffers afterwards.
  const auto closeStart = Clock::now();
  NCHECK(net.deregMr(p.sc, smh));
  NCHECK(net.deregMr(p.rc, rmh));
  NCHECK(net.closeSend(p.sc));
  NCHECK(net.closeRecv(p.rc));
  const double closeSec = secondsSince(closeStart);
  EXPECT(closeSec < 10, "closing comms with requests in flight took %.1f s", closeSec);
  c.pipe->barrier('c');
  munmap(rbuf, bytes);
  munmap(sbuf, bytes);
  if (gRank == 0)
    say("PASS too many requests: %d receives then NULL, %d sends then NULL; closeSend+closeRecv with all in flight "
        "in %.3f s",
        recvs, sends, closeSec);
}

// A send larger than the receive posted for it: the receive must fail (NCCL: "a receive may be larger
// than the send, never smaller"), and nothing past the receive buffer may be written.
void oversizePhase(const Ctx& c) {
  gPhase = "abuse: send larger than receive";
  const Net& net = *c.net;
  std::vector<Pair> pairs = establish(c, 1, 1);
  Pair& p = pairs[0];
  const size_t recvBytes = 4096, sendBytes = 6000, bufBytes = 16384;
  char* rbuf = allocPool(bufBytes);
  char* sbuf = allocPool(bufBytes);
  memset(rbuf, 0xEE, bufBytes);
  memset(sbuf, 0x3C, bufBytes);
  void *smh = nullptr, *rmh = nullptr;
  NCHECK(net.regMr(p.rc, rbuf, bufBytes, NCCL_PTR_HOST, &rmh));
  NCHECK(net.regMr(p.sc, sbuf, bufBytes, NCCL_PTR_HOST, &smh));
  // The mismatch may be caught when the receive is posted (the send already arrived) or when it is
  // tested; either way the receive must fail, and the send may complete or fail.
  const auto start = Clock::now();
  ncclResult_t recvResult = ncclSuccess, sendResult = ncclSuccess;
  bool recvFinished = false, sendFinished = false;
  void* rreq = nullptr;
  void* sreq = nullptr;
  while (!rreq && !recvFinished) {
    void* data = rbuf;
    size_t size = recvBytes;
    int tag = 9;
    recvResult = net.irecv(p.rc, 1, &data, &size, &tag, &rmh, &rreq);
    if (recvResult != ncclSuccess) recvFinished = true;
    EXPECT(secondsSince(start) < c.timeout, "irecv kept answering NULL");
  }
  while (!sreq && !sendFinished) {
    sendResult = net.isend(p.sc, sbuf, static_cast<long long>(sendBytes), 9, smh, &sreq);
    if (sendResult != ncclSuccess) sendFinished = true;
    EXPECT(secondsSince(start) < c.timeout, "isend kept answering NULL");
  }
  const double sendGrace = 5;
  while (!recvFinished || (!sendFinished && secondsSince(start) < sendGrace)) {
    if (!recvFinished) {
      int done = 0, size = -1;
      recvResult = net.test(rreq, &done, &size);
      if (recvResult != ncclSuccess) recvFinished = true;
      EXPECT(!done || recvResult != ncclSuccess,
             "a %zu-byte send into a %zu-byte receive completed successfully (reported size %d)", sendBytes, recvBytes,
             size);
    }
    if (!sendFinished) {
      int sdone = 0, ssize = -1;
      sendResult = net.test(sreq, &sdone, &ssize);
      if (sendResult != ncclSuccess || sdone) sendFinished = true;
    }
    EXPECT(secondsSince(start) < c.timeout, "the receive neither failed nor completed in %.0f s", c.timeout);
    sched_yield();
  }
  for (size_t j = recvBytes; j < bufBytes; ++j)
    EXPECT(static_cast<unsigned char>(rbuf[j]) == 0xEE,
           "the plugin wrote byte %zu, past the end of the %zu-byte receive", j, recvBytes);
  c.pipe->barrier('o');
  // After a failure the comms are closed, as NCCL's teardown would; they must return, errors allowed.
  ncclResult_t ds = net.deregMr(p.sc, smh), dr = net.deregMr(p.rc, rmh);
  (void)ds, (void)dr;
  ncclResult_t cs = net.closeSend(p.sc);
  ncclResult_t cr = net.closeRecv(p.rc);
  c.pipe->barrier('O');
  munmap(rbuf, bufBytes);
  munmap(sbuf, bufBytes);
  if (gRank == 0)
    say("PASS send larger than receive: receive failed with %s, send %s, nothing written past the receive; "
        "close returned %s / %s",
        resultName(recvResult), sendFinished ? resultName(sendResult) : "still pending (closed in flight)",
        resultName(cs), resultName(cr));
}

void setNetns(const std::string& name) {
  if (name.empty()) return;
  const std::string path = "/var/run/netns/" + name;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT(fd >= 0, "cannot open %s: %s", path.c_str(), strerror(errno));
  EXPECT(setns(fd, CLONE_NEWNET) == 0, "setns(%s): %s (needs root)", path.c_str(), strerror(errno));
  close(fd);
}

struct Setup {
  Loaded loaded;
  std::unique_ptr<Net> net;
  Ctx ctx;
};

// False when the transport is unavailable and --skip-unavailable was given.
bool loadAndInit(const Options& o, const PeerPipe& pipe, Setup& s) {
  gPhase = "load";
  s.loaded = loadPlugin(o.plugin);
  checkAbi(s.loaded, false);
  int version = o.version;
  if (version == 0)
    for (int v = 11; v >= 8 && version == 0; --v)
      if (s.loaded.tables[v]) version = v;
  EXPECT(s.loaded.tables[version], "the plugin does not export ncclNetPlugin_v%d", version);
  s.net = std::make_unique<Net>(version, s.loaded.tables[version]);
  const Net& net = *s.net;
  EXPECT(net.name() && net.name()[0], "ncclNetPlugin_v%d has no name", version);
  gPhase = "init";
  // Distinct per communicator in NCCL (comm->commHash); any value the plugin must accept.
  const ncclResult_t initResult = net.init(&s.ctx.ctx, 0x5eed0000ull + static_cast<uint64_t>(version));
  if (initResult == ncclInvalidUsage && o.skipUnavailable) {
    say("SKIP: the plugin's init refused the transport (see its log line above); nothing to test here");
    return false;
  }
  NCHECK(initResult);
  gPhase = "devices";
  int ndev = -1;
  NCHECK(net.devices(&ndev));
  EXPECT(ndev >= 1, "devices reported %d devices", ndev);
  EXPECT(o.dev >= 0 && o.dev < ndev, "--dev %d but the plugin has %d devices", o.dev, ndev);
  s.ctx.net = s.net.get();
  s.ctx.dev = o.dev;
  s.ctx.ndev = ndev;
  s.ctx.pipe = &pipe;
  s.ctx.timeout = std::max(10, o.timeoutSec / 2);
  NCHECK(net.getProperties(o.dev, &s.ctx.props));
  if (gRank == 0)
    say(
        "loaded %s (%s) as ncclNetPlugin_v%d, name \"%s\", %d device(s)", s.loaded.path.c_str(),
        [&] {
          std::string v;
          for (int i = 8; i <= 11; ++i)
            if (s.loaded.tables[i]) v += (v.empty() ? "exports v" : ",v") + std::to_string(i);
          return v;
        }()
            .c_str(),
        version, net.name(), ndev);
  return true;
}

int runConformance(const Options& o, const PeerPipe& pipe) {
  Setup s;
  if (!loadAndInit(o, pipe, s)) return kSkipped;
  const Net& net = *s.net;
  Ctx& c = s.ctx;
  checkProperties(net, c.ndev);
  // v11: NCCL calls init once per communicator, each with its own context (src/plugin/net.cc
  // ncclNetPluginInit); a second one must coexist with the first.
  void* ctx2 = nullptr;
  if (net.version() >= 11) NCHECK(net.init(&ctx2, 0xfeedull));
  pipe.barrier('i');

  gPhase = "connect";
  int nulls = 0;
  const auto t0 = Clock::now();
  std::vector<Pair> pairs = establish(c, o.channels, o.channels, &nulls);
  if (gRank == 0)
    say("PASS connect: %d send + %d recv comms in %.3f s (%d NULL connect/accept returns before ready), "
        "closeListen after each accept",
        o.channels, o.channels, secondsSince(t0), nulls);

  gPhase = "register";
  {
    // regIsGlobal: one registration may serve every comm; registering the same range again (on the
    // same and on another comm) must work and be released independently.
    char* buf = allocPool(1 << 20);
    void *a = nullptr, *b = nullptr, *d = nullptr;
    NCHECK(net.regMr(pairs[0].sc, buf, 1 << 20, NCCL_PTR_HOST, &a));
    NCHECK(net.regMr(pairs[0].sc, buf, 1 << 20, NCCL_PTR_HOST, &b));
    NCHECK(net.regMr(pairs[0].rc, buf + 4096, 65536, NCCL_PTR_HOST, &d));
    EXPECT(a && b && d, "regMr returned ncclSuccess with a NULL handle");
    NCHECK(net.deregMr(pairs[0].sc, b));
    NCHECK(net.deregMr(pairs[0].rc, d));
    NCHECK(net.deregMr(pairs[0].sc, a));
    munmap(buf, 1 << 20);
    if (gRank == 0) say("PASS register: regMr/deregMr of overlapping ranges on send and recv comms");
  }
  pipe.barrier('g');

  gPhase = "basic";
  {
    std::vector<std::vector<Group>> scripts(o.channels, basicScript());
    trafficPhase(c, pairs, gRank, "basic (sizes 0 B..8 MiB, receive larger than send)", scripts, scripts, 8 << 20, 2, 2,
                 1, 3);
  }
  pipe.barrier('b');

  gPhase = "grouped";
  {
    const int maxN = std::min(c.props.maxRecvs, 8);
    const size_t slot = 64 << 10;
    std::vector<std::vector<Group>> sendScripts, recvScripts;
    for (int ch = 0; ch < o.channels; ++ch) {
      sendScripts.push_back(groupedScript(0xC0FFEEull * (gRank + 1) + ch, o.groups, maxN, slot, true));
      recvScripts.push_back(groupedScript(0xC0FFEEull * (2 - gRank) + ch, o.groups, maxN, slot, true));
    }
    const std::string what = "grouped (n=1.." + std::to_string(maxN) +
                             " per irecv, tags out of order, 32 receives and " + std::to_string(32 * maxN) +
                             " sends in flight per comm)";
    trafficPhase(c, pairs, gRank, what.c_str(), sendScripts, recvScripts, slot, NCCL_NET_MAX_REQUESTS * maxN,
                 NCCL_NET_MAX_REQUESTS, maxN, 4);
  }
  pipe.barrier('G');

  gPhase = "close";
  closePairs(c, pairs);
  pipe.barrier('x');
  if (gRank == 0) say("PASS orderly close: deregMr, closeSend, closeRecv on every channel");

  if (!o.skipAbuse) {
    invalidDevicePhase(c);
    pipe.barrier('v');
    misusePhase(c);
    pipe.barrier('M');
    limitsPhase(c);
    pipe.barrier('L');
    oversizePhase(c);
    pipe.barrier('Z');
  }

  gPhase = "finalize";
  if (net.version() >= 11) {
    NCHECK(net.finalize(ctx2));
    NCHECK(net.finalize(c.ctx));
  }
  if (gRank == 0 || gVerbose) say("plugin logged %d lines through NCCL's logger (%d WARN)", gLogLines, gLogWarns);
  // The abuse phases make the plugin warn; those lines must arrive through NCCL's logger.
  if (!o.skipAbuse) EXPECT(gLogWarns > 0, "the plugin never warned through the logger NCCL passed to init");
  say("PASS");
  return 0;
}

// ---- benchmark: rank 0 sends, rank 1 receives, `inflight` requests each way at most ------------------
int runBench(const Options& o, const PeerPipe& pipe) {
  Setup s;
  if (!loadAndInit(o, pipe, s)) return kSkipped;
  const Net& net = *s.net;
  Ctx& c = s.ctx;
  gPhase = "bench connect";
  const bool sender = gRank == 0;
  std::vector<Pair> pairs = establish(c, sender ? 1 : 0, sender ? 0 : 1);
  void* comm = sender ? pairs[0].sc : pairs[0].rc;
  const size_t size = o.benchBytes;
  const int k = o.inflight;
  char* pool = allocPool(size * k);
  memset(pool, 0x5A, size * k);
  void* mh = nullptr;
  NCHECK(net.regMr(comm, pool, size * k, NCCL_PTR_HOST, &mh));
  pipe.barrier('B');
  gPhase = "bench";
  std::vector<void*> reqs(k, nullptr);
  std::vector<size_t> reqSize(k, 0);
  size_t next = 0, oldest = 0;
  const auto start = Clock::now();
  const double deadline = o.seconds + c.timeout;
  double warm = std::min(1.0, o.seconds * 0.2);
  if (sender) {
    bool stopping = false, endPosted = false;
    size_t bytes = 0;
    for (;;) {
      const size_t before = next + oldest;
      const double now = secondsSince(start);
      if (now >= o.seconds) stopping = true;
      while (next - oldest < static_cast<size_t>(k) && !endPosted) {
        // After the time is up, one zero-byte message tells the receiver to stop.
        const size_t n = stopping ? 0 : size;
        void* req = nullptr;
        NCHECK(net.isend(comm, pool + (next % k) * size, static_cast<long long>(n), 0, mh, &req));
        if (!req) break;
        reqs[next % k] = req;
        reqSize[next % k] = n;
        ++next;
        if (stopping) endPosted = true;
      }
      if (oldest < next) {
        int done = 0, got = -1;
        NCHECK(net.test(reqs[oldest % k], &done, &got));
        if (done) {
          bytes += reqSize[oldest % k];
          ++oldest;
        }
      }
      if (endPosted && oldest == next) break;
      EXPECT(now < deadline, "the benchmark's sends did not complete");
      // NCCL's proxy thread yields when no request progressed (src/proxy.cc progress loop).
      if (next + oldest == before) sched_yield();
    }
    const double sec = secondsSince(start);
    say("bench sender: %zu bytes in %.3f s = %.3f GB/s", bytes, sec, bytes / sec / 1e9);
  } else {
    size_t bytes = 0, msgs = 0;
    double tFirst = -1, tLast = 0;
    bool ended = false;
    while (!ended) {
      const size_t before = next + oldest;
      while (next - oldest < static_cast<size_t>(k)) {
        void* data = pool + (next % k) * size;
        size_t sz = size;
        int tag = 0;
        void* req = nullptr;
        NCHECK(net.irecv(comm, 1, &data, &sz, &tag, &mh, &req));
        if (!req) break;
        reqs[next % k] = req;
        ++next;
      }
      if (oldest == next) {
        EXPECT(secondsSince(start) < deadline, "irecv kept answering NULL");
        sched_yield();
        continue;
      }
      int done = 0, got = -1;
      NCHECK(net.test(reqs[oldest % k], &done, &got));
      if (done) {
        ++oldest;
        const double now = secondsSince(start);
        if (got == 0) {
          ended = true;
        } else if (now >= warm) {
          // The first message after the warm-up opens the window; bytes count from the next one.
          if (tFirst < 0) tFirst = now;
          else bytes += static_cast<size_t>(got), ++msgs;
          tLast = now;
        }
      }
      EXPECT(secondsSince(start) < deadline, "the benchmark's receives did not complete");
      if (next + oldest == before) sched_yield();
    }
    const double sec = tLast - tFirst;
    EXPECT(sec > 0 && msgs > 0, "no messages after the warm-up: raise --seconds");
    const double gbps = bytes / sec / 1e9;
    say("bench receiver: %zu messages of %zu bytes in %.3f s = %.3f GB/s (%.2f Gbit/s), %d in flight", msgs, size, sec,
        gbps, gbps * 8, k);
    printf("BENCH size=%zu inflight=%d seconds=%.3f bytes=%zu GBps=%.4f\n", size, k, sec, bytes, gbps);
    fflush(stdout);
  }
  pipe.barrier('E');
  // The receiver still has receives posted past the end marker: closed in flight.
  NCHECK(net.deregMr(comm, mh));
  closePairs(c, pairs);
  if (net.version() >= 11) NCHECK(net.finalize(c.ctx));
  munmap(pool, size * k);
  return 0;
}

size_t parseSize(const char* s) {
  char* end = nullptr;
  double v = strtod(s, &end);
  std::string suffix = end ? end : "";
  size_t mult = 1;
  if (suffix == "K" || suffix == "KiB" || suffix == "k") mult = size_t{1} << 10;
  else if (suffix == "M" || suffix == "MiB" || suffix == "m") mult = size_t{1} << 20;
  else if (suffix == "G" || suffix == "GiB" || suffix == "g") mult = size_t{1} << 30;
  else if (!suffix.empty()) return 0;
  return static_cast<size_t>(v * static_cast<double>(mult));
}

void usage() {
  fprintf(stderr,
          "usage: nccl_net_driver [--plugin NAME] [--version 8|9|10|11] [--dev N] [--channels C] [--groups G]\n"
          "                       [--timeout SEC] [--no-abuse] [--verbose]\n"
          "       nccl_net_driver --abi [--plugin NAME]\n"
          "       nccl_net_driver --bench SIZE [--inflight K] [--seconds S] [--netns NS0,NS1] [--cpus C0,C1]\n"
          "                       [--plugin NAME]\n"
          "NAME resolves as NCCL_NET_PLUGIN does (default: $NCCL_NET_PLUGIN, else \"collective\"):\n"
          "NAME itself, then libnccl-net-NAME.so, through the dynamic loader's search path.\n"
          "Two processes (fork) load and initialise the plugin; only the 128-byte handle crosses.\n");
}

bool parse(int argc, char** argv, Options& o) {
  // NCCL reads NCCL_NET_PLUGIN the same way (src/plugin/plugin_open.cc); the driver mimics NCCL.
  const char* env = getenv("NCCL_NET_PLUGIN");
  o.plugin = env && *env ? env : "collective";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--plugin" && (v = val())) o.plugin = v;
    else if (a == "--version" && (v = val())) o.version = atoi(v);
    else if (a == "--dev" && (v = val())) o.dev = atoi(v);
    else if (a == "--channels" && (v = val())) o.channels = atoi(v);
    else if (a == "--groups" && (v = val())) o.groups = atoi(v);
    else if (a == "--timeout" && (v = val())) o.timeoutSec = atoi(v);
    else if (a == "--bench" && (v = val())) o.benchBytes = parseSize(v);
    else if (a == "--inflight" && (v = val())) o.inflight = atoi(v);
    else if (a == "--seconds" && (v = val())) o.seconds = atof(v);
    else if (a == "--netns" && (v = val())) {
      std::string s = v;
      size_t comma = s.find(',');
      if (comma == std::string::npos) return false;
      o.netns[0] = s.substr(0, comma);
      o.netns[1] = s.substr(comma + 1);
    } else if (a == "--cpus" && (v = val())) {
      if (sscanf(v, "%d,%d", &o.cpus[0], &o.cpus[1]) != 2 || o.cpus[0] < 0 || o.cpus[1] < 0) return false;
    } else if (a == "--abi") o.abiOnly = true;
    else if (a == "--skip-unavailable") o.skipUnavailable = true;
    else if (a == "--no-abuse") o.skipAbuse = true;
    else if (a == "--verbose") o.verbose = true;
    else return false;
  }
  if (o.version != 0 && (o.version < 8 || o.version > 11)) return false;
  if (o.channels < 1 || o.channels > 16 || o.groups < 1 || o.timeoutSec < 1) return false;
  if (o.inflight < 1 || o.inflight > NCCL_NET_MAX_REQUESTS || o.seconds <= 0) return false;
  if (!o.netns[0].empty() && o.benchBytes == 0) return false;
  return true;
}

int runRank(const Options& o, const PeerPipe& pipe) {
  signal(SIGALRM, watchdog);
  alarm(static_cast<unsigned>(o.timeoutSec + (o.benchBytes ? static_cast<int>(o.seconds) : 0)));
  setNetns(o.netns[gRank]);
  if (o.cpus[gRank] >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(o.cpus[gRank], &set);
    EXPECT(sched_setaffinity(0, sizeof(set), &set) == 0, "cannot pin to CPU %d: %s", o.cpus[gRank], strerror(errno));
  }
  return o.benchBytes ? runBench(o, pipe) : runConformance(o, pipe);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    usage();
    return 2;
  }
  gVerbose = o.verbose;
  if (o.abiOnly) {
    gRank = 0;
    Loaded loaded = loadPlugin(o.plugin);
    checkAbi(loaded, true);
    say("PASS abi: %s exports ncclNetPlugin_v8..v11 with NCCL's sizes (152/160/160/176 bytes); header structs "
        "match NCCL's layout",
        loaded.path.c_str());
    return 0;
  }
  int toChild[2], toParent[2];
  if (pipe(toChild) != 0 || pipe(toParent) != 0) {
    perror("pipe");
    return 1;
  }
  fflush(nullptr);
  const pid_t child = fork();
  if (child < 0) {
    perror("fork");
    return 1;
  }
  if (child == 0) {
    gRank = 1;
    // The child must not outlive a parent that failed and exited.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1) _exit(1);
    close(toChild[1]);
    close(toParent[0]);
    PeerPipe p{toChild[0], toParent[1]};
    int rc = runRank(o, p);
    fflush(nullptr);
    _exit(rc);
  }
  gRank = 0;
  close(toChild[0]);
  close(toParent[1]);
  PeerPipe p{toParent[0], toChild[1]};
  int rc = runRank(o, p);
  // The child's own watchdog bounds it; wait a little longer than that, then kill it.
  int status = 0;
  const auto start = Clock::now();
  for (;;) {
    pid_t w = waitpid(child, &status, WNOHANG);
    if (w == child) break;
    if (secondsSince(start) > o.timeoutSec + 30) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      fprintf(stderr, "[driver rank 0] FAIL: the child process did not exit\n");
      return 1;
    }
    usleep(10000);
  }
  const int childRc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (rc == kSkipped && childRc == kSkipped) return kSkipped;
  if (childRc != 0) fprintf(stderr, "[driver rank 0] FAIL: the child process exited with %d\n", childRc);
  return rc != 0 ? rc : childRc;
}
