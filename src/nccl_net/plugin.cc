// libnccl-net-collective.so: one implementation of NCCL's net plugin over our inter-host
// transports (tcp, ucx, ib), and the thin ncclNetPlugin_v8..v11 tables NCCL's loader looks up.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <openssl/rand.h>

#include "src/base/config.h"
#include "src/base/log.h"
#include "src/nccl_net/message_stream.h"
#include "src/nccl_net/nccl_net_abi.h"
#include "src/nccl_net/pair_bootstrap.h"
#include "src/oob/auth.h"
#include "src/oob/socket.h"
#include "transports/net.h"

namespace coll::ncclnet {
namespace {

constexpr uint32_t kHandleMagic = 0x434f4c4e;  // "COLN"
constexpr uint16_t kHandleVersion = 1;
constexpr int kMaxVDevices = 32;

// What listen() writes into NCCL's 128-byte handle. NCCL gives the connecting side a copy it keeps
// between connect() calls, so the connect in progress is remembered in the handle itself.
struct Handle {
  uint32_t magic;
  uint16_t version;
  uint16_t netKind;
  Secret secret;
  uint32_t addressLength;
  uint8_t address[28];  // sockaddr_in or sockaddr_in6
  uint8_t reserved[12];
  void* pending;  // connect side only: the PendingPair being set up (nullptr at first)
  uint64_t reserved2;
};
static_assert(sizeof(Handle) <= NCCL_NET_HANDLE_MAXSIZE);

struct Device {
  std::string name;  // "tcp:eth0"
  std::string pciPath;
  int speedMbps = 10000;
  std::vector<int> members;  // physical devices behind a virtual one
};

struct Global {
  std::mutex mu;
  int initCount = 0;
  ncclDebugLogger_t logger = nullptr;
  // NCCL's profiler hook (v10+ init; NCCL passes the same one to every init), null before v10.
  std::atomic<ncclProfilerCallback_t> profiler{nullptr};
  NetKind kind = NetKind::Tcp;
  NetInterface iface;
  std::vector<Device> devices;  // [0] the physical device, then virtual ones
};
Global& global() {
  static Global* g = new Global;  // never destroyed: NCCL may call us from its atexit paths
  return *g;
}

void logSink(LogLevel level, const char* message) {
  ncclDebugLogger_t logger = global().logger;
  if (!logger) return;
  ncclDebugLogLevel l = level == LogLevel::Warn   ? NCCL_LOG_WARN
                        : level == LogLevel::Info ? NCCL_LOG_INFO
                                                  : NCCL_LOG_TRACE;
  logger(l, NCCL_NET, __FILE__, __LINE__, "NET/Collective: %s", message);
}

ncclResult_t toNccl(const Status& st, const char* what) {
  if (st.ok()) return ncclSuccess;
  COLL_WARN(-1, "%s: %s", what, st.message().c_str());
  switch (st.code()) {
    case collInternalError: return ncclInternalError;
    case collInvalidArgument: return ncclInternalError;  // NCCL passed something out of contract
    case collInvalidUsage: return ncclInvalidUsage;
    case collRemoteError: return ncclRemoteError;
    default: return ncclSystemError;  // network, OS, timeouts
  }
}

// A connected pair: the transport objects live as long as the connection that uses them.
struct Pair {
  std::unique_ptr<Socket> listener;  // unused after setup; the accept side's listener is the listenComm's
  std::unique_ptr<PairBootstrap> bootstrap;
  std::unique_ptr<NetTransport> net;
  std::unique_ptr<Connection> conn;
  std::unique_ptr<MessageStream> stream;
  std::string peerName;
  ~Pair() {
    stream.reset();
    conn.reset();
    net.reset();
    if (bootstrap) bootstrap->abort();
    bootstrap.reset();
  }
};

constexpr uint64_t kSendMagic = 0x53454e44434f4c4cull, kRecvMagic = 0x52454356434f4c4cull;
struct Comm {
  uint64_t magic;
  std::unique_ptr<Pair> pair;
  int device = 0;  // the device it was made on (profiler events name it)
};

// Setup of one pair on a helper thread, with the plugin's own deadline, so connect/accept never
// block: they look at `finished` and return a NULL comm until it is set.
struct PendingPair {
  std::thread thread;
  std::atomic<bool> finished{false};
  Status status;
  std::unique_ptr<Pair> pair;
  ~PendingPair() {
    if (thread.joinable()) thread.join();
  }
};

// Connects in progress in this process. The pointer in a handle came over the network with the
// rest of it, so it is trusted only when it names one of these.
std::mutex gPendingMu;
std::set<PendingPair*> gPending;

struct ListenComm {
  Socket listener;
  SocketAddress address;
  Secret secret{};
  NetKind kind = NetKind::Tcp;
  int trafficClass = kTrafficClassUnset;  // the NCCL communicator's, for the pairs it accepts
  int device = 0;
  std::unique_ptr<PendingPair> pending;
};

struct MemHandle {
  void* data;
  size_t size;
  int type;
};

Status finishPair(int rank, Socket control, const Secret& secret, uint64_t pairId, const PeerInfo& me,
                  const PeerInfo& peer, const Socket* listener, NetKind kind, int trafficClass, Deadline deadline,
                  std::unique_ptr<Pair>* out) {
  auto pair = std::make_unique<Pair>();
  pair->peerName = peer.address.toString();
  pair->bootstrap = std::make_unique<PairBootstrap>(rank, std::move(control), secret, pairId, me, peer, listener);
  COLL_TRY(createNet(kind, *pair->bootstrap, trafficClass, &pair->net));
  COLL_TRY(pair->net->connect(1 - rank, deadline, &pair->conn)
               .withContext("NCCL plugin " + std::string(netKindName(kind)) + " connection to " + pair->peerName));
  pair->stream = std::make_unique<MessageStream>(pair->conn.get(), pair->peerName.c_str());
  *out = std::move(pair);
  return okStatus();
}

PeerInfo selfInfo(const SocketAddress& address) {
  PeerInfo me;
  me.address = address;
  me.hostHash = localHostHash();
  me.pid = static_cast<int32_t>(getpid());
  me.netMask = ~0u;
  return me;
}

void connectSide(PendingPair* p, Handle handle, int trafficClass) {
  Deadline deadline = Deadline::afterMs(defaultTimeoutMs());
  SocketAddress remote;
  std::memcpy(&remote.storage, handle.address, handle.addressLength);
  remote.length = handle.addressLength;
  Status st = [&]() -> Status {
    Socket s;
    COLL_TRY(Socket::connect(remote, deadline, &s));
    COLL_TRY(authenticate(s, &handle.secret, AuthRole::Connector, deadline, remote.toString()));
    PairHello hello;
    if (RAND_bytes(reinterpret_cast<unsigned char*>(&hello.pairId), sizeof(hello.pairId)) != 1) {
      return makeError(collSystemError, "RAND_bytes failed");
    }
    hello.pid = static_cast<int32_t>(getpid());
    hello.hostHash = localHostHash();
    hello.trafficClass = trafficClass;
    COLL_TRY(s.sendAll(&hello, sizeof(hello), deadline));
    PairHello reply;
    COLL_TRY(s.recvAll(&reply, sizeof(reply), deadline));
    if (reply.magic != PairHello::kMagic || reply.kind != PairHello::kControl || reply.pairId != hello.pairId) {
      return makeError(collRemoteError, "NCCL plugin listener %s answered with a malformed hello",
                       remote.toString().c_str());
    }
    SocketAddress local;
    (void)localAddressTowards(remote, &local);
    PeerInfo peer;
    peer.address = remote;
    peer.hostHash = reply.hostHash;
    peer.pid = reply.pid;
    peer.netMask = ~0u;
    return finishPair(0, std::move(s), handle.secret, hello.pairId, selfInfo(local), peer, nullptr,
                      static_cast<NetKind>(handle.netKind), trafficClass, deadline, &p->pair);
  }();
  p->status = st;
  p->finished.store(true, std::memory_order_release);
}

void acceptSide(PendingPair* p, ListenComm* l) {
  Deadline deadline = Deadline::afterMs(defaultTimeoutMs());
  Status st = [&]() -> Status {
    for (;;) {
      Socket s;
      SocketAddress from;
      COLL_TRY(l->listener.accept(deadline, &s, &from));
      if (!authenticate(s, &l->secret, AuthRole::Acceptor, deadline, from.toString()).ok()) continue;
      PairHello hello;
      if (!s.recvAll(&hello, sizeof(hello), deadline).ok()) continue;
      if (hello.magic != PairHello::kMagic || hello.kind != PairHello::kControl) continue;  // a stray socket
      if (hello.trafficClass != kTrafficClassUnset && (hello.trafficClass < 0 || hello.trafficClass > 255)) {
        COLL_WARN(-1, "NCCL plugin: a connector from %s sent traffic class %d (not 0..255); ignored",
                  from.toString().c_str(), hello.trafficClass);
        continue;
      }
      PairHello reply;
      reply.pairId = hello.pairId;
      reply.pid = static_cast<int32_t>(getpid());
      reply.hostHash = localHostHash();
      COLL_TRY(s.sendAll(&reply, sizeof(reply), deadline));
      PeerInfo peer;
      peer.address = from;
      peer.hostHash = hello.hostHash;
      peer.pid = hello.pid;
      peer.netMask = ~0u;
      // The connector's class where it has one (NCCL v10 gives it to connect only), else the
      // listening communicator's own.
      const int trafficClass = hello.trafficClass != kTrafficClassUnset ? hello.trafficClass : l->trafficClass;
      return finishPair(1, std::move(s), l->secret, hello.pairId, selfInfo(l->address), peer, &l->listener, l->kind,
                        trafficClass, deadline, &p->pair);
    }
  }();
  p->status = st;
  p->finished.store(true, std::memory_order_release);
}

Status chooseKind(NetKind* out) {
  std::string why;
  const uint32_t available = probeNetAvailability(&why);
  std::string forced = kNcclNet.get();
  if (!forced.empty()) {
    NetKind kind;
    if (!netKindFromName(forced, &kind)) {
      return makeError(collInvalidUsage, "COLL_NCCL_NET=%s: expected tcp, ucx or ib", forced.c_str());
    }
    if (!(available & netBit(kind))) {
      return makeError(collInvalidUsage, "COLL_NCCL_NET=%s but it is not available here: %s", forced.c_str(),
                       why.c_str());
    }
    *out = kind;
    return okStatus();
  }
  const uint32_t mask = automaticNetMask(available);
  for (int k = 0; k < kNetKinds; ++k) {
    if (mask & (1u << k)) {
      *out = static_cast<NetKind>(k);
      return okStatus();
    }
  }
  *out = NetKind::Tcp;
  return okStatus();
}

// NCCL's per-communicator class (ncclNetCommConfig_t.trafficClass, from ncclConfig_t or
// NCCL_IB_TC) as the transports take it; false (warned) when it does not fit the byte it sets.
bool trafficClassFromNccl(int ncclClass, int* out) {
  if (ncclClass == NCCL_NET_TRAFFIC_CLASS_UNDEF) {
    *out = kTrafficClassUnset;
    return true;
  }
  if (ncclClass < 0 || ncclClass > 255) {
    COLL_WARN(-1, "trafficClass %d is out of range 0..255", ncclClass);
    return false;
  }
  *out = ncclClass;
  return true;
}

// ---- the one implementation ---------------------------------------------------------------------

ncclResult_t pluginInit(ncclDebugLogger_t logger) {
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mu);
  if (logger) g.logger = logger;
  if (g.logger) setLogSink(logSink);
  if (g.initCount++ > 0) return ncclSuccess;
  Status st = chooseKind(&g.kind);
  if (st.ok()) st = selectInterface(&g.iface);
  if (!st.ok()) {
    g.initCount = 0;
    return toNccl(st, "NCCL plugin init");
  }
  Device d;
  d.name = std::string(netKindName(g.kind)) + ":" + g.iface.name;
  char* real = realpath(("/sys/class/net/" + g.iface.name + "/device").c_str(), nullptr);
  if (real) {
    d.pciPath = real;
    free(real);
  }
  if (const uint32_t speed = interfaceSpeedMbps(g.iface.name); speed > 0) d.speedMbps = static_cast<int>(speed);
  d.members = {0};
  g.devices = {d};
  COLL_INFO(-1, "using %s over %s (%s)", netKindName(g.kind), g.iface.name.c_str(), g.iface.address.toString().c_str());
  return ncclSuccess;
}

ncclResult_t pluginDevices(int* ndev) {
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mu);
  if (!ndev) return ncclInternalError;
  *ndev = static_cast<int>(g.devices.size());
  return ncclSuccess;
}

ncclResult_t checkDev(int dev) {
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mu);
  if (g.initCount == 0) {
    COLL_WARN(-1, "called before init");
    return ncclInternalError;
  }
  if (dev < 0 || dev >= static_cast<int>(g.devices.size())) {
    COLL_WARN(-1, "device %d does not exist (%zu devices)", dev, g.devices.size());
    return ncclInternalError;
  }
  return ncclSuccess;
}

// Fills the v11 properties (a superset); the older shims copy what their version has.
ncclResult_t pluginGetProperties(int dev, ncclNetProperties_v11_t* props) {
  if (!props) return ncclInternalError;
  if (ncclResult_t r = checkDev(dev)) return r;
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mu);
  const Device& d = g.devices[dev];
  std::memset(props, 0, sizeof(*props));
  props->name = const_cast<char*>(d.name.c_str());
  props->pciPath = d.pciPath.empty() ? nullptr : const_cast<char*>(d.pciPath.c_str());
  props->guid = static_cast<uint64_t>(dev);
  props->ptrSupport = NCCL_PTR_HOST;
  props->regIsGlobal = 1;  // registrations are host bookkeeping, valid on every comm
  props->forceFlush = 0;
  props->speed = d.speedMbps;
  props->port = 0;
  props->latency = 0;
  props->maxComms = 65536;
  props->maxRecvs = kMaxRecvs;
  props->netDeviceType = NCCL_NET_DEVICE_HOST;
  props->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
  props->vProps.ndevs = static_cast<int>(d.members.size());
  for (size_t i = 0; i < d.members.size() && i < NCCL_NET_MAX_DEVS_PER_NIC; ++i) props->vProps.devs[i] = d.members[i];
  props->maxP2pBytes = kMaxMessageBytes;
  props->maxCollBytes = kMaxMessageBytes;
  props->maxMultiRequestSize = 1;
  return ncclSuccess;
}

ncclResult_t pluginListen(int dev, int ncclTrafficClass, void* opaque, void** listenComm) {
  if (!opaque || !listenComm) return ncclInternalError;
  *listenComm = nullptr;
  if (ncclResult_t r = checkDev(dev)) return r;
  Global& g = global();
  auto l = std::make_unique<ListenComm>();
  l->device = dev;
  l->kind = g.kind;
  if (!trafficClassFromNccl(ncclTrafficClass, &l->trafficClass)) return ncclInvalidUsage;
  SocketAddress bind = g.iface.address;
  bind.setPort(0);
  Status st = Socket::listen(bind, 128, &l->listener, &l->address);
  if (st.ok()) st = randomSecret(&l->secret);
  if (!st.ok()) return toNccl(st, "NCCL plugin listen");
  if (l->address.length > sizeof(Handle::address)) return ncclInternalError;
  Handle h{};
  h.magic = kHandleMagic;
  h.version = kHandleVersion;
  h.netKind = static_cast<uint16_t>(l->kind);
  h.secret = l->secret;
  h.addressLength = l->address.length;
  std::memcpy(h.address, &l->address.storage, l->address.length);
  std::memset(opaque, 0, NCCL_NET_HANDLE_MAXSIZE);
  std::memcpy(opaque, &h, sizeof(h));
  *listenComm = l.release();
  return ncclSuccess;
}

ncclResult_t pluginConnect(int dev, int ncclTrafficClass, void* opaque, void** sendComm) {
  if (!opaque || !sendComm) return ncclInternalError;
  *sendComm = nullptr;
  if (ncclResult_t r = checkDev(dev)) return r;
  int trafficClass = kTrafficClassUnset;
  if (!trafficClassFromNccl(ncclTrafficClass, &trafficClass)) return ncclInvalidUsage;
  Handle* h = static_cast<Handle*>(opaque);
  if (h->magic != kHandleMagic || h->version != kHandleVersion || h->netKind >= kNetKinds || h->addressLength == 0 ||
      h->addressLength > sizeof(h->address)) {
    COLL_WARN(-1, "connect: the handle is not one of this plugin's (magic %08x, version %u)", h->magic, h->version);
    return ncclInternalError;
  }
  PendingPair* p = static_cast<PendingPair*>(h->pending);
  if (p) {
    std::lock_guard<std::mutex> lock(gPendingMu);
    if (!gPending.count(p)) p = nullptr;  // not ours: a fresh handle whose bytes happen to be set
  }
  if (!p) {
    if (static_cast<NetKind>(h->netKind) != global().kind) {
      COLL_INFO(-1, "connect: the listener uses %s, this process chose %s; following the listener",
                netKindName(static_cast<NetKind>(h->netKind)), netKindName(global().kind));
    }
    p = new PendingPair;
    {
      std::lock_guard<std::mutex> lock(gPendingMu);
      gPending.insert(p);
    }
    h->pending = p;
    Handle copy = *h;
    p->thread = std::thread(connectSide, p, copy, trafficClass);
    return ncclSuccess;
  }
  if (!p->finished.load(std::memory_order_acquire)) return ncclSuccess;
  std::unique_ptr<PendingPair> done(p);
  {
    std::lock_guard<std::mutex> lock(gPendingMu);
    gPending.erase(p);
  }
  h->pending = nullptr;
  done->thread.join();
  if (!done->status.ok()) return toNccl(done->status, "NCCL plugin connect");
  *sendComm = new Comm{kSendMagic, std::move(done->pair), dev};
  return ncclSuccess;
}

ncclResult_t pluginAccept(void* listenComm, void** recvComm) {
  if (!listenComm || !recvComm) return ncclInternalError;
  *recvComm = nullptr;
  ListenComm* l = static_cast<ListenComm*>(listenComm);
  if (!l->pending) {
    l->pending = std::make_unique<PendingPair>();
    l->pending->thread = std::thread(acceptSide, l->pending.get(), l);
    return ncclSuccess;
  }
  if (!l->pending->finished.load(std::memory_order_acquire)) return ncclSuccess;
  std::unique_ptr<PendingPair> done = std::move(l->pending);
  done->thread.join();
  if (!done->status.ok()) return toNccl(done->status, "NCCL plugin accept");
  *recvComm = new Comm{kRecvMagic, std::move(done->pair), l->device};
  return ncclSuccess;
}

Comm* asComm(void* p, uint64_t magic) {
  Comm* c = static_cast<Comm*>(p);
  if (!c || (magic && c->magic != magic) || (c->magic != kSendMagic && c->magic != kRecvMagic)) return nullptr;
  return c;
}

ncclResult_t pluginRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  if (!asComm(comm, 0) || !mhandle) return ncclInternalError;
  if (type != NCCL_PTR_HOST) {
    COLL_WARN(-1, "regMr: memory type %d is not supported (only NCCL_PTR_HOST was advertised)", type);
    return ncclInternalError;
  }
  *mhandle = new MemHandle{data, size, type};
  return ncclSuccess;
}

ncclResult_t pluginRegMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t, int, void** mhandle) {
  COLL_WARN(-1, "regMrDmaBuf: DMA-BUF was not advertised (ptrSupport is NCCL_PTR_HOST)");
  (void)comm, (void)data, (void)size, (void)type, (void)mhandle;
  return ncclInternalError;
}

ncclResult_t pluginDeregMr(void* comm, void* mhandle) {
  if (!asComm(comm, 0)) return ncclInternalError;
  delete static_cast<MemHandle*>(mhandle);
  return ncclSuccess;
}

// Starts NCCL profiler event i of a request just posted, where NCCL gave it a handle (phandle).
void startProfilerEvent(Request* r, int i, void* phandle, uint8_t type, int device, int tag, size_t length) {
  ncclProfilerCallback_t profiler = global().profiler.load(std::memory_order_acquire);
  if (profiler == nullptr || phandle == nullptr || r == nullptr) return;
  r->profilerDescr[i] = collProfilerNetDescr_v1_t{type, device, tag, length};
  (void)profiler(&r->profilerEvents[i], ncclProfilerNetEventStart, phandle,
                 static_cast<int64_t>(COLL_PROFILER_NET_TYPE | COLL_PROFILER_NET_VERSION), &r->profilerDescr[i]);
}

ncclResult_t pluginIsend(void* sendComm, void* data, size_t size, int tag, void* phandle, void** request) {
  Comm* c = asComm(sendComm, kSendMagic);
  if (!c || !request) return ncclInternalError;
  Request* r = nullptr;
  Status st = c->pair->stream->postSend(data, size, tag, &r);
  if (st.ok()) startProfilerEvent(r, 0, phandle, collProfileNetSend, c->device, tag, size);
  *request = r;
  return toNccl(st, "NCCL plugin isend");
}

ncclResult_t pluginIrecv(void* recvComm, int n, void** data, const size_t* sizes, int* tags, void** phandles,
                         void** request) {
  Comm* c = asComm(recvComm, kRecvMagic);
  if (!c || !request || n < 1 || n > kMaxRecvs) return ncclInternalError;
  uint64_t s[kMaxRecvs];
  for (int i = 0; i < n; ++i) s[i] = sizes[i];
  Request* r = nullptr;
  Status st = c->pair->stream->postRecv(n, data, s, tags, &r);
  if (st.ok() && phandles != nullptr) {
    for (int i = 0; i < n; ++i) startProfilerEvent(r, i, phandles[i], collProfileNetRecv, c->device, tags[i], sizes[i]);
  }
  *request = r;
  return toNccl(st, "NCCL plugin irecv");
}

ncclResult_t pluginIflush(void* recvComm, int, void**, int*, void**, void** request) {
  if (!asComm(recvComm, kRecvMagic) || !request) return ncclInternalError;
  *request = nullptr;  // host memory only: nothing to make visible, NCCL treats NULL as done
  return ncclSuccess;
}

ncclResult_t pluginTest(void* request, int* done, int* sizes) {
  Request* r = static_cast<Request*>(request);
  if (!r || !done || !r->owner) return ncclInternalError;
  MessageStream* stream = static_cast<MessageStream*>(r->owner);
  bool finished = false;
  uint64_t got[kMaxRecvs];
  const int n = r->n;
  void* events[kMaxRecvs];  // a finished request is released by test()
  std::copy(r->profilerEvents, r->profilerEvents + kMaxRecvs, events);
  Status st = stream->test(r, &finished, got, kMaxRecvs);
  if (!st.ok()) return toNccl(st, "NCCL plugin test");
  if (finished) {
    if (ncclProfilerCallback_t profiler = global().profiler.load(std::memory_order_acquire)) {
      for (int i = 0; i < n && i < kMaxRecvs; ++i) {
        if (events[i] == nullptr) continue;
        // Read by the profiler during the call only (recordEventState, then stopEvent).
        collProfilerNetState_v1_t state{static_cast<size_t>(got[i])};
        (void)profiler(&events[i], ncclProfilerNetEventUpdateAndStop, nullptr, 0, &state);
      }
    }
  }
  *done = finished ? 1 : 0;
  if (finished && sizes) {
    for (int i = 0; i < n; ++i) sizes[i] = static_cast<int>(got[i]);
  }
  return ncclSuccess;
}

ncclResult_t pluginClose(void* comm, uint64_t magic) {
  Comm* c = asComm(comm, magic);
  if (!c) return ncclInternalError;
  c->magic = 0;
  delete c;
  return ncclSuccess;
}

ncclResult_t pluginCloseListen(void* listenComm) {
  if (!listenComm) return ncclInternalError;
  ListenComm* l = static_cast<ListenComm*>(listenComm);
  // An accept still in progress gives up once its socket is gone.
  if (l->pending) ::shutdown(l->listener.fd(), SHUT_RDWR);
  delete l;
  return ncclSuccess;
}

ncclResult_t pluginGetDeviceMr(void*, void*, void** dptr) {
  if (dptr) *dptr = nullptr;  // no device offload
  return ncclSuccess;
}

ncclResult_t pluginIrecvConsumed(void*, int, void*) { return ncclSuccess; }

ncclResult_t pluginMakeVDevice(int* d, ncclNetVDeviceProps_v11_t* props) {
  if (!d || !props || props->ndevs < 1 || props->ndevs > NCCL_NET_MAX_DEVS_PER_NIC) return ncclInternalError;
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mu);
  if (static_cast<int>(g.devices.size()) >= kMaxVDevices) return ncclInvalidUsage;
  Device v;
  v.speedMbps = 0;
  for (int i = 0; i < props->ndevs; ++i) {
    int m = props->devs[i];
    if (m < 0 || m >= static_cast<int>(g.devices.size()) || g.devices[m].members.size() != 1 ||
        g.devices[m].members[0] != m) {
      COLL_WARN(-1, "makeVDevice: %d is not a physical device", m);
      return ncclInternalError;
    }
    v.members.push_back(m);
    v.name += (i ? "+" : "") + g.devices[m].name;
    v.speedMbps += g.devices[m].speedMbps;
  }
  v.pciPath = g.devices[props->devs[0]].pciPath;
  g.devices.push_back(v);
  *d = static_cast<int>(g.devices.size()) - 1;
  return ncclSuccess;
}

// v11: one context per NCCL communicator (NCCL 2.28+ calls init per communicator).
struct Context {
  uint64_t commId;
  int trafficClass;  // NCCL's, applied to the connections of listen and connect on this context
  ncclNetAttr_v11_t attr;
};
int contextTrafficClass(void* ctx) {
  return ctx ? static_cast<Context*>(ctx)->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF;
}

ncclResult_t pluginFinalize() {
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mu);
  // The last finalize forgets the transport choice: the next init reads COLL_NCCL_NET again.
  if (g.initCount > 0 && --g.initCount == 0) {
    setLogSink(nullptr);
    g.devices.clear();
  }
  return ncclSuccess;
}

// ---- per-version shims --------------------------------------------------------------------------

ncclResult_t initV8(ncclDebugLogger_t logger) { return pluginInit(logger); }
ncclResult_t initV10(ncclDebugLogger_t logger, ncclProfilerCallback_t profiler) {
  global().profiler.store(profiler, std::memory_order_release);
  return pluginInit(logger);
}
ncclResult_t initV11(void** ctx, uint64_t commId, ncclNetCommConfig_v11_t* config, ncclDebugLogger_t logger,
                     ncclProfilerCallback_t profiler) {
  if (!ctx) return ncclInternalError;
  global().profiler.store(profiler, std::memory_order_release);
  ncclResult_t r = pluginInit(logger);
  if (r != ncclSuccess) return r;
  auto* c = new Context{commId, config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF, {}};
  *ctx = c;
  return ncclSuccess;
}
ncclResult_t finalizeV11(void* ctx) {
  delete static_cast<Context*>(ctx);
  return pluginFinalize();
}
ncclResult_t setNetAttrV11(void* ctx, ncclNetAttr_v11_t* attr) {
  if (!ctx || !attr) return ncclInternalError;
  static_cast<Context*>(ctx)->attr = *attr;  // hints only: one stream per pair has no flows to tune
  return ncclSuccess;
}

ncclResult_t getPropertiesV8(int dev, ncclNetProperties_v8_t* props) {
  ncclNetProperties_v11_t p;
  if (!props) return ncclInternalError;
  if (ncclResult_t r = pluginGetProperties(dev, &p)) return r;
  props->name = p.name;
  props->pciPath = p.pciPath;
  props->guid = p.guid;
  props->ptrSupport = p.ptrSupport;
  props->regIsGlobal = p.regIsGlobal;
  props->speed = p.speed;
  props->port = p.port;
  props->latency = p.latency;
  props->maxComms = p.maxComms;
  props->maxRecvs = p.maxRecvs;
  props->netDeviceType = p.netDeviceType;
  props->netDeviceVersion = p.netDeviceVersion;
  return ncclSuccess;
}
ncclResult_t getPropertiesV9(int dev, ncclNetProperties_v9_t* props) {
  ncclNetProperties_v11_t p;
  if (!props) return ncclInternalError;
  if (ncclResult_t r = pluginGetProperties(dev, &p)) return r;
  std::memcpy(props, &p, sizeof(*props));  // v9's layout is v11's prefix (static_asserts in the ABI header)
  return ncclSuccess;
}
ncclResult_t getPropertiesV11(int dev, ncclNetProperties_v11_t* props) { return pluginGetProperties(dev, props); }

// Before v11 only v10's connect carries NCCL's class; listen has none, so the accepting side
// keeps each transport's default (COLL_IB_TC).
ncclResult_t listenV8(int dev, void* handle, void** listenComm) {
  return pluginListen(dev, NCCL_NET_TRAFFIC_CLASS_UNDEF, handle, listenComm);
}
ncclResult_t listenV11(void* ctx, int dev, void* handle, void** listenComm) {
  return pluginListen(dev, contextTrafficClass(ctx), handle, listenComm);
}
ncclResult_t connectV8(int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v8_t** devComm) {
  if (devComm) *devComm = nullptr;
  return pluginConnect(dev, NCCL_NET_TRAFFIC_CLASS_UNDEF, handle, sendComm);
}
ncclResult_t connectV10(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** sendComm,
                        ncclNetDeviceHandle_v10_t** devComm) {
  if (devComm) *devComm = nullptr;
  return pluginConnect(dev, config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF, handle, sendComm);
}
ncclResult_t connectV11(void* ctx, int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v11_t** devComm) {
  if (devComm) *devComm = nullptr;
  return pluginConnect(dev, contextTrafficClass(ctx), handle, sendComm);
}
ncclResult_t acceptV8(void* listenComm, void** recvComm, ncclNetDeviceHandle_v8_t** devComm) {
  if (devComm) *devComm = nullptr;
  return pluginAccept(listenComm, recvComm);
}

ncclResult_t isendV8(void* comm, void* data, int size, int tag, void* mhandle, void** request) {
  (void)mhandle;
  if (size < 0) return ncclInternalError;
  return pluginIsend(comm, data, static_cast<size_t>(size), tag, nullptr, request);
}
ncclResult_t isendV9(void* comm, void* data, size_t size, int tag, void*, void** request) {
  return pluginIsend(comm, data, size, tag, nullptr, request);
}
ncclResult_t isendV10(void* comm, void* data, size_t size, int tag, void*, void* phandle, void** request) {
  return pluginIsend(comm, data, size, tag, phandle, request);
}
ncclResult_t irecvV8(void* comm, int n, void** data, int* sizes, int* tags, void**, void** request) {
  if (n < 1 || n > kMaxRecvs || !sizes) return ncclInternalError;
  size_t s[kMaxRecvs];
  for (int i = 0; i < n; ++i) {
    if (sizes[i] < 0) return ncclInternalError;
    s[i] = static_cast<size_t>(sizes[i]);
  }
  return pluginIrecv(comm, n, data, s, tags, nullptr, request);
}
ncclResult_t irecvV9(void* comm, int n, void** data, size_t* sizes, int* tags, void**, void** request) {
  if (!sizes) return ncclInternalError;
  return pluginIrecv(comm, n, data, sizes, tags, nullptr, request);
}
ncclResult_t irecvV10(void* comm, int n, void** data, size_t* sizes, int* tags, void**, void** phandles,
                      void** request) {
  if (!sizes) return ncclInternalError;
  return pluginIrecv(comm, n, data, sizes, tags, phandles, request);
}
ncclResult_t closeSend(void* comm) { return pluginClose(comm, kSendMagic); }
ncclResult_t closeRecv(void* comm) { return pluginClose(comm, kRecvMagic); }
ncclResult_t makeVDeviceV9(int* d, ncclNetVDeviceProps_v9_t* props) { return pluginMakeVDevice(d, props); }

}  // namespace
}  // namespace coll::ncclnet

using namespace coll::ncclnet;

#if defined(__clang__)
// clang's ASan pads globals with a redzone counted in the symbol's size, which the size NCCL's loader
// (and our conformance driver) checks; the tables are read-only data, so they need no redzone.
#define COLL_NCCL_EXPORT __attribute__((visibility("default"), no_sanitize("address")))
#else
#define COLL_NCCL_EXPORT __attribute__((visibility("default")))
#endif

extern "C" {

COLL_NCCL_EXPORT ncclNet_v8_t ncclNetPlugin_v8 = {
    "Collective",       initV8,      pluginDevices,     getPropertiesV8, listenV8,          connectV8,
    acceptV8,           pluginRegMr, pluginRegMrDmaBuf, pluginDeregMr,   isendV8,           irecvV8,
    pluginIflush,       pluginTest,  closeSend,         closeRecv,       pluginCloseListen, pluginGetDeviceMr,
    pluginIrecvConsumed};

COLL_NCCL_EXPORT ncclNet_v9_t ncclNetPlugin_v9 = {"Collective",
                                                  initV8,
                                                  pluginDevices,
                                                  getPropertiesV9,
                                                  listenV8,
                                                  connectV8,
                                                  acceptV8,
                                                  pluginRegMr,
                                                  pluginRegMrDmaBuf,
                                                  pluginDeregMr,
                                                  isendV9,
                                                  irecvV9,
                                                  pluginIflush,
                                                  pluginTest,
                                                  closeSend,
                                                  closeRecv,
                                                  pluginCloseListen,
                                                  pluginGetDeviceMr,
                                                  pluginIrecvConsumed,
                                                  makeVDeviceV9};

COLL_NCCL_EXPORT ncclNet_v10_t ncclNetPlugin_v10 = {
    "Collective", initV10,           pluginDevices,     getPropertiesV9,     listenV8,
    connectV10,   acceptV8,          pluginRegMr,       pluginRegMrDmaBuf,   pluginDeregMr,
    isendV10,     irecvV10,          pluginIflush,      pluginTest,          closeSend,
    closeRecv,    pluginCloseListen, pluginGetDeviceMr, pluginIrecvConsumed, makeVDeviceV9};

COLL_NCCL_EXPORT ncclNet_v11_t ncclNetPlugin_v11 = {
    "Collective", initV11,           pluginDevices,     getPropertiesV11,    listenV11,
    connectV11,   acceptV8,          pluginRegMr,       pluginRegMrDmaBuf,   pluginDeregMr,
    isendV10,     irecvV10,          pluginIflush,      pluginTest,          closeSend,
    closeRecv,    pluginCloseListen, pluginGetDeviceMr, pluginIrecvConsumed, makeVDeviceV9,
    finalizeV11,  setNetAttrV11};

}  // extern "C"
