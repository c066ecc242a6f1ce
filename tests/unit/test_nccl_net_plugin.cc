// libnccl-net-collective.so loaded as NCCL loads it (dlopen + dlsym of each version's table), both
// ends in this process over loopback: connect/accept until ready, grouped tagged traffic, abuse.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collective/nccl_net_profiler.h"
#include "src/nccl_net/nccl_net_abi.h"
#include "tests/unit/socket_tos.h"

#ifndef COLL_NCCL_NET_PLUGIN_PATH
#error "the build passes the plugin's path"
#endif

namespace {

using coll::testutil::tcpSocketsByTos;

// Silent unless COLL_DEBUG asks for our lines (the plugin filters by it before calling).
void quietLogger(ncclDebugLogLevel, unsigned long, const char*, int, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

void* plugin() {
  static void* h = [] {
    setenv("COLL_SOCKET_IFNAME", "lo", 0);
    return dlopen(COLL_NCCL_NET_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  }();
  return h;
}

template <typename T>
T* table(const char* symbol) {
  void* h = plugin();
  if (!h) return nullptr;
  return static_cast<T*>(dlsym(h, symbol));
}

// Drives connect/accept the way NCCL's proxy does: call both again until both comms exist.
template <typename Connect, typename Accept>
void establish(Connect connect, Accept accept, void** sendComm, void** recvComm) {
  *sendComm = *recvComm = nullptr;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((!*sendComm || !*recvComm) && std::chrono::steady_clock::now() < until) {
    if (!*sendComm) {
      ASSERT_EQ(connect(sendComm), ncclSuccess);
    }
    if (!*recvComm) {
      ASSERT_EQ(accept(recvComm), ncclSuccess);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_NE(*sendComm, nullptr);
  ASSERT_NE(*recvComm, nullptr);
}

TEST(NcclNetPlugin, ExportsEveryVersion) {
  ASSERT_NE(plugin(), nullptr) << dlerror();
  for (const char* s :
       {COLL_NCCL_NET_SYMBOL_V8, COLL_NCCL_NET_SYMBOL_V9, COLL_NCCL_NET_SYMBOL_V10, COLL_NCCL_NET_SYMBOL_V11}) {
    EXPECT_NE(dlsym(plugin(), s), nullptr) << s;
  }
  EXPECT_EQ(dlsym(plugin(), "collCommInitRank"), nullptr);  // our library stays hidden inside
}

// v11 is the only version with finalize, so each transport gets a fresh choice of COLL_NCCL_NET.
void v11Traffic(const char* transport) {
  setenv("COLL_NCCL_NET", transport, 1);
  auto* net = table<ncclNet_v11_t>(COLL_NCCL_NET_SYMBOL_V11);
  ASSERT_NE(net, nullptr);
  void* ctx = nullptr;
  ncclNetCommConfig_v11_t config{NCCL_NET_TRAFFIC_CLASS_UNDEF};
  ncclResult_t r = net->init(&ctx, 42, &config, quietLogger, nullptr);
  if (r == ncclInvalidUsage && std::string(transport) != "tcp") GTEST_SKIP() << transport << " is not available here";
  ASSERT_EQ(r, ncclSuccess);
  int ndev = 0;
  ASSERT_EQ(net->devices(&ndev), ncclSuccess);
  ASSERT_GE(ndev, 1);
  ncclNetProperties_v11_t props;
  ASSERT_EQ(net->getProperties(0, &props), ncclSuccess);
  EXPECT_EQ(props.ptrSupport & NCCL_PTR_HOST, NCCL_PTR_HOST);
  EXPECT_GT(props.maxRecvs, 1);
  EXPECT_GE(props.maxP2pBytes, size_t{1} << 30);
  EXPECT_NE(std::string(props.name).find(transport), std::string::npos) << props.name;
  EXPECT_NE(net->getProperties(ndev, &props), ncclSuccess);  // invalid device

  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* listenComm = nullptr;
  ASSERT_EQ(net->listen(ctx, 0, handle, &listenComm), ncclSuccess);
  char peerHandle[NCCL_NET_HANDLE_MAXSIZE];
  std::memcpy(peerHandle, handle, sizeof(handle));  // what crosses between ranks
  void *sendComm, *recvComm;
  ncclNetDeviceHandle_v11_t* devHandle = nullptr;
  establish([&](void** c) { return net->connect(ctx, 0, peerHandle, c, &devHandle); },
            [&](void** c) { return net->accept(listenComm, c, &devHandle); }, &sendComm, &recvComm);
  ASSERT_EQ(net->closeListen(listenComm), ncclSuccess);

  std::vector<char> a(1 << 20), b(1000), ra(1 << 20), rb(4096);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<char>(i * 31);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<char>(i * 17);
  void *mhs, *mhr;
  ASSERT_EQ(net->regMr(sendComm, a.data(), a.size(), NCCL_PTR_HOST, &mhs), ncclSuccess);
  ASSERT_EQ(net->regMr(recvComm, ra.data(), ra.size(), NCCL_PTR_HOST, &mhr), ncclSuccess);
  EXPECT_NE(net->regMr(sendComm, a.data(), a.size(), NCCL_PTR_CUDA, &mhs), ncclSuccess);

  void* data[2] = {ra.data(), rb.data()};
  size_t sizes[2] = {ra.size(), rb.size()};
  int tags[2] = {1, 2};
  void* mh[2] = {mhr, mhr};
  void* ph[2] = {nullptr, nullptr};
  void* rreq = nullptr;
  ASSERT_EQ(net->irecv(recvComm, 2, data, sizes, tags, mh, ph, &rreq), ncclSuccess);
  ASSERT_NE(rreq, nullptr);
  void *s1 = nullptr, *s2 = nullptr;
  ASSERT_EQ(net->isend(sendComm, b.data(), b.size(), 2, mhs, nullptr, &s2), ncclSuccess);
  ASSERT_EQ(net->isend(sendComm, a.data(), a.size(), 1, mhs, nullptr, &s1), ncclSuccess);
  ASSERT_NE(s1, nullptr);
  ASSERT_NE(s2, nullptr);
  int done[3] = {0, 0, 0}, got[2] = {-1, -1}, sent = 0;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!(done[0] && done[1] && done[2]) && std::chrono::steady_clock::now() < until) {
    if (!done[0]) {
      ASSERT_EQ(net->test(s1, &done[0], &sent), ncclSuccess);
    }
    if (!done[1]) {
      ASSERT_EQ(net->test(s2, &done[1], nullptr), ncclSuccess);
    }
    if (!done[2]) {
      ASSERT_EQ(net->test(rreq, &done[2], got), ncclSuccess);
    }
  }
  ASSERT_TRUE(done[0] && done[1] && done[2]);
  EXPECT_EQ(sent, static_cast<int>(a.size()));
  EXPECT_EQ(got[0], static_cast<int>(a.size()));
  EXPECT_EQ(got[1], static_cast<int>(b.size()));
  EXPECT_EQ(0, std::memcmp(ra.data(), a.data(), a.size()));
  EXPECT_EQ(0, std::memcmp(rb.data(), b.data(), b.size()));
  void* flush = reinterpret_cast<void*>(1);
  int fsz[1] = {1};
  EXPECT_EQ(net->iflush(recvComm, 1, data, fsz, mh, &flush), ncclSuccess);
  EXPECT_EQ(flush, nullptr);

  ncclNetAttr_v11_t attr{};
  EXPECT_EQ(net->setNetAttr(ctx, &attr), ncclSuccess);
  EXPECT_EQ(net->deregMr(sendComm, mhs), ncclSuccess);
  EXPECT_EQ(net->deregMr(recvComm, mhr), ncclSuccess);
  // Closing with a receive in flight is allowed.
  ASSERT_EQ(net->irecv(recvComm, 1, data, sizes, tags, mh, ph, &rreq), ncclSuccess);
  EXPECT_EQ(net->closeSend(sendComm), ncclSuccess);
  EXPECT_EQ(net->closeRecv(recvComm), ncclSuccess);
  EXPECT_EQ(net->finalize(ctx), ncclSuccess);
}

TEST(NcclNetPlugin, V11GroupedTaggedTrafficOverTcp) { v11Traffic("tcp"); }
TEST(NcclNetPlugin, V11GroupedTaggedTrafficOverUcx) { v11Traffic("ucx"); }
TEST(NcclNetPlugin, V11GroupedTaggedTrafficOverIb) { v11Traffic("ib"); }

TEST(NcclNetPlugin, UnknownTransportIsInvalidUsage) {
  setenv("COLL_NCCL_NET", "carrier-pigeon", 1);
  auto* net = table<ncclNet_v11_t>(COLL_NCCL_NET_SYMBOL_V11);
  ASSERT_NE(net, nullptr);
  void* ctx = nullptr;
  EXPECT_EQ(net->init(&ctx, 1, nullptr, quietLogger, nullptr), ncclInvalidUsage);
}

TEST(NcclNetPlugin, V8IntSizesAndVirtualDeviceOnV9) {
  setenv("COLL_NCCL_NET", "tcp", 1);
  auto* v8 = table<ncclNet_v8_t>(COLL_NCCL_NET_SYMBOL_V8);
  auto* v9 = table<ncclNet_v9_t>(COLL_NCCL_NET_SYMBOL_V9);
  ASSERT_NE(v8, nullptr);
  ASSERT_NE(v9, nullptr);
  ASSERT_EQ(v8->init(quietLogger), ncclSuccess);
  ncclNetProperties_v8_t p8;
  ASSERT_EQ(v8->getProperties(0, &p8), ncclSuccess);
  EXPECT_GT(p8.maxRecvs, 1);
  ASSERT_EQ(v9->init(quietLogger), ncclSuccess);
  ncclNetVDeviceProps_v9_t vp{1, {0}};
  int vdev = -1;
  ASSERT_EQ(v9->makeVDevice(&vdev, &vp), ncclSuccess);
  ncclNetProperties_v9_t p9;
  ASSERT_EQ(v9->getProperties(vdev, &p9), ncclSuccess);
  EXPECT_EQ(p9.vProps.ndevs, 1);

  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* listenComm = nullptr;
  ASSERT_EQ(v8->listen(0, handle, &listenComm), ncclSuccess);
  // The handle's tail is the plugin's scratch on the connect side; whatever arrives there from the
  // network must not be taken for a connect in progress.
  std::memset(handle + 64, 0x41, sizeof(handle) - 64);
  void *sendComm, *recvComm;
  ncclNetDeviceHandle_v8_t* dh = nullptr;
  establish([&](void** c) { return v8->connect(0, handle, c, &dh); },
            [&](void** c) { return v8->accept(listenComm, c, &dh); }, &sendComm, &recvComm);
  EXPECT_EQ(v8->closeListen(listenComm), ncclSuccess);
  char msg[100] = "hello", out[200] = {};
  void* d[1] = {out};
  int sz[1] = {sizeof(out)}, tag[1] = {7};
  void* mh[1] = {nullptr};
  void *rr = nullptr, *sr = nullptr;
  ASSERT_EQ(v8->irecv(recvComm, 1, d, sz, tag, mh, &rr), ncclSuccess);
  ASSERT_EQ(v8->isend(sendComm, msg, sizeof(msg), 7, nullptr, &sr), ncclSuccess);
  EXPECT_NE(v8->isend(sendComm, msg, -1, 7, nullptr, &sr), ncclSuccess);  // misuse
  int done = 0, got = 0;
  while (!done) ASSERT_EQ(v8->test(rr, &done, &got), ncclSuccess);
  EXPECT_EQ(got, 100);
  EXPECT_STREQ(out, "hello");
  EXPECT_EQ(v8->closeSend(sendComm), ncclSuccess);
  EXPECT_EQ(v8->closeRecv(recvComm), ncclSuccess);
}

// v11: the class NCCL gives init is the class of the connections of both listen and connect on
// that context (tcp: 2 data sockets per end, COLL_NSOCKS_PERPEER).
TEST(NcclNetPlugin, V11ContextTrafficClassReachesBothEnds) {
  setenv("COLL_NCCL_NET", "tcp", 1);
  setenv("COLL_NSOCKS_PERPEER", "2", 1);
  auto* net = table<ncclNet_v11_t>(COLL_NCCL_NET_SYMBOL_V11);
  ASSERT_NE(net, nullptr);
  void* ctx = nullptr;
  ncclNetCommConfig_v11_t config{0x68};
  ASSERT_EQ(net->init(&ctx, 43, &config, quietLogger, nullptr), ncclSuccess);
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* listenComm = nullptr;
  ASSERT_EQ(net->listen(ctx, 0, handle, &listenComm), ncclSuccess);
  void *sendComm, *recvComm;
  ncclNetDeviceHandle_v11_t* devHandle = nullptr;
  establish([&](void** c) { return net->connect(ctx, 0, handle, c, &devHandle); },
            [&](void** c) { return net->accept(listenComm, c, &devHandle); }, &sendComm, &recvComm);
  EXPECT_EQ(tcpSocketsByTos()[0x68], 4);
  EXPECT_EQ(net->closeListen(listenComm), ncclSuccess);
  EXPECT_EQ(net->closeSend(sendComm), ncclSuccess);
  EXPECT_EQ(net->closeRecv(recvComm), ncclSuccess);
  EXPECT_EQ(tcpSocketsByTos()[0x68], 0);
  EXPECT_EQ(net->finalize(ctx), ncclSuccess);
  unsetenv("COLL_NSOCKS_PERPEER");
}

// v10: only connect carries NCCL's class (ncclNetCommConfig_v10_t); the accepting end, whose
// listen had none, takes the connector's (as NCCL's ib receiver does). A class beyond one byte is
// refused.
TEST(NcclNetPlugin, V10ConnectConfigTrafficClass) {
  setenv("COLL_NCCL_NET", "tcp", 1);
  setenv("COLL_NSOCKS_PERPEER", "2", 1);
  auto* net = table<ncclNet_v10_t>(COLL_NCCL_NET_SYMBOL_V10);
  ASSERT_NE(net, nullptr);
  ASSERT_EQ(net->init(quietLogger, nullptr), ncclSuccess);
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* listenComm = nullptr;
  ASSERT_EQ(net->listen(0, handle, &listenComm), ncclSuccess);
  void* refused = nullptr;
  ncclNetCommConfig_v10_t bad{300};
  EXPECT_EQ(net->connect(0, &bad, handle, &refused, nullptr), ncclInvalidUsage);
  EXPECT_EQ(refused, nullptr);
  ncclNetCommConfig_v10_t config{0xa0};
  void *sendComm, *recvComm;
  ncclNetDeviceHandle_v10_t* devHandle = nullptr;
  establish([&](void** c) { return net->connect(0, &config, handle, c, &devHandle); },
            [&](void** c) { return net->accept(listenComm, c, &devHandle); }, &sendComm, &recvComm);
  EXPECT_EQ(tcpSocketsByTos()[0xa0], 4) << "both ends of both data sockets";
  EXPECT_EQ(net->closeListen(listenComm), ncclSuccess);
  EXPECT_EQ(net->closeSend(sendComm), ncclSuccess);
  EXPECT_EQ(net->closeRecv(recvComm), ncclSuccess);
  unsetenv("COLL_NSOCKS_PERPEER");
}

// NCCL's profiler hook (v10+): each isend / irecv that NCCL gives a profiler handle starts an
// event (our plugin id, a descriptor of the message) when posted and ends it with an update (the
// bytes moved) once test() finds it done; a NULL handle makes no event.
struct NetProfilerLog {
  std::mutex mu;
  int next = 0;
  struct Event {
    void* parent;
    int64_t pluginId;
    collProfilerNetDescr_v1_t descr;
    int stops = 0;
    size_t bytes = 0;  // the update's
    bool updated = false;
  };
  std::map<intptr_t, Event> events;  // by the handle given back
  int badStops = 0;
};
NetProfilerLog gNetProfilerLog;

ncclResult_t recordNetProfilerEvent(void** eHandle, int type, void* pHandle, int64_t pluginId, void* extData) {
  NetProfilerLog& log = gNetProfilerLog;
  std::lock_guard<std::mutex> lock(log.mu);
  if (type == ncclProfilerNetEventStart) {
    const intptr_t id = ++log.next;
    log.events[id] = NetProfilerLog::Event{pHandle, pluginId, *static_cast<collProfilerNetDescr_v1_t*>(extData), 0};
    *eHandle = reinterpret_cast<void*>(id);
  } else {
    auto it = log.events.find(reinterpret_cast<intptr_t>(*eHandle));
    if (it == log.events.end()) {
      ++log.badStops;
      return ncclSuccess;
    }
    if (type == ncclProfilerNetEventUpdate || type == ncclProfilerNetEventUpdateAndStop) {
      it->second.updated = true;
      it->second.bytes = static_cast<collProfilerNetState_v1_t*>(extData)->bytes;
    }
    if (type == ncclProfilerNetEventStop || type == ncclProfilerNetEventUpdateAndStop) ++it->second.stops;
  }
  return ncclSuccess;
}

TEST(NcclNetPlugin, V10ProfilerEventsPerMessage) {
  setenv("COLL_NCCL_NET", "tcp", 1);
  auto* net = table<ncclNet_v10_t>(COLL_NCCL_NET_SYMBOL_V10);
  ASSERT_NE(net, nullptr);
  ASSERT_EQ(net->init(quietLogger, recordNetProfilerEvent), ncclSuccess);
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* listenComm = nullptr;
  ASSERT_EQ(net->listen(0, handle, &listenComm), ncclSuccess);
  void *sendComm, *recvComm;
  ncclNetDeviceHandle_v10_t* devHandle = nullptr;
  ncclNetCommConfig_v10_t config{NCCL_NET_TRAFFIC_CLASS_UNDEF};
  establish([&](void** c) { return net->connect(0, &config, handle, c, &devHandle); },
            [&](void** c) { return net->accept(listenComm, c, &devHandle); }, &sendComm, &recvComm);
  // The first receive's buffer is larger than its message: the update gives the size received.
  std::vector<char> a(300000, 'a'), b(1000, 'b'), ra(a.size() + 100), rb(4096);
  void *mhs, *mhr;
  ASSERT_EQ(net->regMr(sendComm, a.data(), a.size(), NCCL_PTR_HOST, &mhs), ncclSuccess);
  ASSERT_EQ(net->regMr(recvComm, ra.data(), ra.size(), NCCL_PTR_HOST, &mhr), ncclSuccess);
  int parentA = 0, parentRa = 0;  // NCCL's step handles, as far as we can tell: opaque pointers
  void* data[2] = {ra.data(), rb.data()};
  size_t sizes[2] = {ra.size(), rb.size()};
  int tags[2] = {7, 9};
  void* mh[2] = {mhr, mhr};
  void* ph[2] = {&parentRa, nullptr};
  void *rreq = nullptr, *s1 = nullptr, *s2 = nullptr;
  ASSERT_EQ(net->irecv(recvComm, 2, data, sizes, tags, mh, ph, &rreq), ncclSuccess);
  ASSERT_EQ(net->isend(sendComm, a.data(), a.size(), 7, mhs, &parentA, &s1), ncclSuccess);
  ASSERT_EQ(net->isend(sendComm, b.data(), b.size(), 9, mhs, nullptr, &s2), ncclSuccess);
  {
    std::lock_guard<std::mutex> lock(gNetProfilerLog.mu);
    for (const auto& [id, e] : gNetProfilerLog.events) EXPECT_EQ(e.stops, 0) << "stopped before done";
  }
  int done[3] = {0, 0, 0};
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!(done[0] && done[1] && done[2]) && std::chrono::steady_clock::now() < until) {
    void* reqs[3] = {s1, s2, rreq};
    for (int i = 0; i < 3; ++i) {
      if (!done[i]) {
        ASSERT_EQ(net->test(reqs[i], &done[i], nullptr), ncclSuccess);
      }
    }
  }
  ASSERT_TRUE(done[0] && done[1] && done[2]);
  EXPECT_TRUE(std::equal(a.begin(), a.end(), ra.begin()));
  {
    std::lock_guard<std::mutex> lock(gNetProfilerLog.mu);
    ASSERT_EQ(gNetProfilerLog.events.size(), 2u) << "one per message with a handle";
    EXPECT_EQ(gNetProfilerLog.badStops, 0);
    bool sawSend = false, sawRecv = false;
    for (const auto& [id, e] : gNetProfilerLog.events) {
      EXPECT_EQ(e.stops, 1);
      EXPECT_TRUE(e.updated) << "the end carries the bytes moved";
      EXPECT_EQ(e.bytes, a.size());
      EXPECT_EQ(e.pluginId, static_cast<int64_t>(COLL_PROFILER_NET_TYPE | COLL_PROFILER_NET_VERSION));
      EXPECT_EQ(e.descr.device, 0);
      EXPECT_EQ(e.descr.tag, 7);
      if (e.descr.type == collProfileNetSend) {
        sawSend = true;
        EXPECT_EQ(e.parent, &parentA);
        EXPECT_EQ(e.descr.length, a.size());
      } else {
        ASSERT_EQ(e.descr.type, collProfileNetRecv);
        sawRecv = true;
        EXPECT_EQ(e.parent, &parentRa);
        EXPECT_EQ(e.descr.length, ra.size());
      }
    }
    EXPECT_TRUE(sawSend && sawRecv);
  }
  EXPECT_EQ(net->deregMr(sendComm, mhs), ncclSuccess);
  EXPECT_EQ(net->deregMr(recvComm, mhr), ncclSuccess);
  EXPECT_EQ(net->closeListen(listenComm), ncclSuccess);
  EXPECT_EQ(net->closeSend(sendComm), ncclSuccess);
  EXPECT_EQ(net->closeRecv(recvComm), ncclSuccess);
  ASSERT_EQ(net->init(quietLogger, nullptr), ncclSuccess);  // later tests run without the hook
}

}  // namespace
