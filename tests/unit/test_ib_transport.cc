// ib transport on the verbs test double: COLL_IB_HCA parsing, discovery, the registration cache,
// connections between two ranks (threads with real bootstraps): small and large messages, rings
// that wrap, credits exhausted and refilled, 1-4 QPs striped, setup data agreement, and a
// real-device test that runs where an RDMA port exists.
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "tests/ib_double/verbs_double.h"
#include "tests/unit/stream_pump.h"
#include "transports/ib/ib_transport.h"
#include "transports/net.h"

namespace coll {
namespace {

using testutil::pumpStream;

class IbOnDouble : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::configureVerbsDouble(testing::VerbsDoubleOptions{});
    testing::injectVerbsFault(testing::VerbsFault::None);
    setVerbsApiForTesting(&testing::verbsTestDouble());
  }
  void TearDown() override { setVerbsApiForTesting(nullptr); }
};

IbOptions smallOptions(int qps, uint64_t ring) {
  IbOptions o;
  o.qps = qps;
  o.ringBytes = ring;
  o.sendDepth = 64;
  o.recvDepth = 32;
  return o;
}

// Two ranks as threads: each opens the device, rendezvous through a real Bootstrap, connects to
// the other with its options and runs `body`.
void withIbPair(const IbOptions options[2], const std::function<void(int, IbConnection*)>& body, Status results[2]) {
  SocketAddress bind;
  ASSERT_TRUE(SocketAddress::parse("127.0.0.1:0", &bind).ok());
  Secret secret{};
  secret[0] = 9;
  collUniqueId id;
  Status st = startBootstrapRoot(bind, &secret, &id);
  ASSERT_TRUE(st.ok()) << st.message();
  std::thread t[2];
  for (int r = 0; r < 2; ++r) {
    t[r] = std::thread([&, r] {
      Deadline deadline = Deadline::afterMs(30000);
      std::unique_ptr<Bootstrap> bs;
      results[r] = Bootstrap::create(id, r, 2, 0x1234, deadline, &bs);
      if (!results[r].ok()) return;
      std::shared_ptr<IbDevice> dev;
      results[r] = IbDevice::open(activeVerbsApi(), options[r], &dev);
      if (!results[r].ok()) return;
      std::unique_ptr<IbConnection> conn;
      results[r] = connectIb(*bs, dev, 1 - r, options[r], deadline, &conn);
      if (!results[r].ok()) return;
      body(r, conn.get());
    });
  }
  for (auto& th : t) th.join();
}

// Both directions at once, random slice sizes, checked byte by byte.
void pumpPair(const IbOptions& o, uint64_t total, size_t maxSlice, int* qpsSeen = nullptr) {
  const IbOptions opts[2] = {o, o};
  std::string errors[2];
  bool ok[2] = {false, false};
  Status results[2];
  withIbPair(
      opts,
      [&](int r, IbConnection* c) {
        if (qpsSeen) qpsSeen[r] = c->qps();
        ok[r] = pumpStream(c, total, 100 + r, 101 - r, r, maxSlice, &errors[r]);
      },
      results);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].message();
    EXPECT_TRUE(ok[r]) << "rank " << r << ": " << errors[r];
  }
}

TEST(IbHca, ParsesNcclSyntax) {
  IbHcaFilter f;
  ASSERT_TRUE(parseIbHcaList("", &f).ok());
  EXPECT_TRUE(f.matches("mlx5_0", 1));
  ASSERT_TRUE(parseIbHcaList("mlx5_0:1,mlx5_1", &f).ok());
  ASSERT_EQ(f.entries.size(), 2u);
  EXPECT_FALSE(f.exclude);
  EXPECT_FALSE(f.exact);
  EXPECT_TRUE(f.matches("mlx5_0", 1));
  EXPECT_FALSE(f.matches("mlx5_0", 2));
  EXPECT_TRUE(f.matches("mlx5_1", 2));
  EXPECT_TRUE(f.matches("mlx5_10", 1));  // prefix
  EXPECT_FALSE(f.matches("mlx4_0", 1));
  ASSERT_TRUE(parseIbHcaList("^mlx5_0", &f).ok());
  EXPECT_TRUE(f.exclude);
  EXPECT_FALSE(f.matches("mlx5_0", 1));
  EXPECT_FALSE(f.matches("mlx5_01", 1));
  EXPECT_TRUE(f.matches("mlx5_1", 1));
  ASSERT_TRUE(parseIbHcaList("=mlx5_1", &f).ok());
  EXPECT_TRUE(f.exact);
  EXPECT_TRUE(f.matches("mlx5_1", 1));
  EXPECT_FALSE(f.matches("mlx5_10", 1));
  ASSERT_TRUE(parseIbHcaList("^=mlx5_1:2", &f).ok());
  EXPECT_TRUE(f.exclude && f.exact);
  EXPECT_FALSE(f.matches("mlx5_1", 2));
  EXPECT_TRUE(f.matches("mlx5_1", 1));
  EXPECT_TRUE(f.matches("mlx5_10", 2));
  ASSERT_TRUE(parseIbHcaList(" mlx5_0 , mlx5_1:1", &f).ok());
  EXPECT_EQ(f.entries[0].name, "mlx5_0");
  EXPECT_EQ(f.entries[1].port, 1);
}

TEST(IbHca, RejectsMalformedLists) {
  IbHcaFilter f;
  for (const char* bad : {"^", "=", "mlx5_0,", ",mlx5_0", "mlx5_0:", "mlx5_0:x", "mlx5_0:0", "mlx5_0:999", ":1",
                          "mlx5_0,^mlx5_1", "mlx5_0,,mlx5_1"}) {
    Status st = parseIbHcaList(bad, &f);
    EXPECT_EQ(st.code(), collInvalidUsage) << bad;
    EXPECT_NE(st.message().find("COLL_IB_HCA"), std::string::npos) << st.message();
  }
}

TEST(IbOptions, FromConfig) {
  setenv("COLL_IB_QPS_PER_CONNECTION", "4", 1);
  setenv("COLL_IB_TIMEOUT", "14", 1);
  setenv("COLL_IB_RETRY_CNT", "99", 1);
  setenv("COLL_IB_STAGING_BYTES", "64K", 1);
  IbOptions o = ibOptionsFromConfig();
  EXPECT_EQ(o.qps, 4);
  EXPECT_EQ(o.timeout, 14);
  EXPECT_EQ(o.retryCount, 7);  // clamped to the 3-bit field
  EXPECT_EQ(o.ringBytes, 64u << 10);
  unsetenv("COLL_IB_QPS_PER_CONNECTION");
  unsetenv("COLL_IB_TIMEOUT");
  unsetenv("COLL_IB_RETRY_CNT");
  unsetenv("COLL_IB_STAGING_BYTES");
  o = ibOptionsFromConfig();
  EXPECT_EQ(o.qps, 2);
  EXPECT_EQ(o.timeout, 20);
  EXPECT_EQ(o.retryCount, 7);
  EXPECT_EQ(o.gidIndex, -1);
}

TEST_F(IbOnDouble, DiscoveryFindsTheActivePortAndPrefersRoceV2) {
  std::shared_ptr<IbDevice> dev;
  Status st = IbDevice::open(activeVerbsApi(), IbOptions{}, &dev);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(dev->port().device, "verbsdouble0");
  EXPECT_EQ(dev->port().port, 1);
  EXPECT_TRUE(dev->port().ethernet);
  EXPECT_EQ(dev->port().gidType, "RoCE v2");
  std::string why;
  EXPECT_TRUE(ibAvailable(&why)) << why;
}

TEST_F(IbOnDouble, HcaFilterAndForcedGidIndex) {
  IbOptions o;
  o.hca = "^verbsdouble";
  std::shared_ptr<IbDevice> dev;
  Status st = IbDevice::open(activeVerbsApi(), o, &dev);
  EXPECT_EQ(st.code(), collSystemError);
  EXPECT_NE(st.message().find("COLL_IB_HCA"), std::string::npos) << st.message();
  o.hca = "=verbsdouble0:1";
  st = IbDevice::open(activeVerbsApi(), o, &dev);
  EXPECT_TRUE(st.ok()) << st.message();
  o.hca = "";
  o.gidIndex = 1000;
  st = IbDevice::open(activeVerbsApi(), o, &dev);
  EXPECT_EQ(st.code(), collInvalidUsage);
  EXPECT_NE(st.message().find("COLL_IB_GID_INDEX"), std::string::npos) << st.message();
}

TEST_F(IbOnDouble, NoActivePortExplainsWhy) {
  testing::VerbsDoubleOptions vo;
  vo.portActive = false;
  testing::configureVerbsDouble(vo);
  std::string why;
  EXPECT_FALSE(ibAvailable(&why));
  EXPECT_NE(why.find("no RDMA device"), std::string::npos) << why;
  EXPECT_NE(why.find("DOWN"), std::string::npos) << why;
  testing::configureVerbsDouble(testing::VerbsDoubleOptions{});
}

TEST_F(IbOnDouble, RegistrationCacheRegistersOnceAndEvicts) {
  std::shared_ptr<IbDevice> dev;
  ASSERT_TRUE(IbDevice::open(activeVerbsApi(), IbOptions{}, &dev).ok());
  IbMrCache& cache = dev->mrCache();
  // Page-aligned buffers, so the page-rounded registrations of the two do not overlap.
  struct Freer {
    void operator()(std::byte* p) const { free(p); }
  };
  std::unique_ptr<std::byte, Freer> abuf(static_cast<std::byte*>(aligned_alloc(4096, 1 << 20)));
  std::unique_ptr<std::byte, Freer> bbuf(static_cast<std::byte*>(aligned_alloc(4096, 3 << 20)));
  std::span<std::byte> a(abuf.get(), 1 << 20), b(bbuf.get(), 3 << 20);
  ibv_mr* m1 = nullptr;
  ibv_mr* m2 = nullptr;
  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  ASSERT_TRUE(cache.registerHost(a.data(), a.size(), rw, &m1).ok());
  ASSERT_TRUE(cache.registerHost(a.data() + 4096, 8192, IBV_ACCESS_LOCAL_WRITE, &m2).ok());
  EXPECT_EQ(m1, m2);  // inside, fewer rights: the same registration
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_EQ(cache.misses(), 1u);
  ASSERT_TRUE(cache.registerHost(b.data(), b.size(), rw, &m2).ok());
  EXPECT_NE(m1, m2);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_LE(reinterpret_cast<uintptr_t>(m1->addr), reinterpret_cast<uintptr_t>(a.data()));
  EXPECT_GE(reinterpret_cast<uintptr_t>(m1->addr) + m1->length, reinterpret_cast<uintptr_t>(a.data()) + a.size());
  cache.evict(a.data(), a.size());  // "freed"
  EXPECT_EQ(cache.size(), 1u);
  ASSERT_TRUE(cache.registerHost(a.data(), 100, rw, &m1).ok());
  EXPECT_EQ(cache.misses(), 3u);
  EXPECT_EQ(cache.registerHost(nullptr, 10, rw, &m1).code(), collInvalidArgument);
  EXPECT_EQ(cache.registerDmabuf(-1, 0, 10, 0, rw, &m1).code(), collInvalidArgument);
}

TEST_F(IbOnDouble, DmabufRegionsAreCachedByFd) {
  std::shared_ptr<IbDevice> dev;
  ASSERT_TRUE(IbDevice::open(activeVerbsApi(), IbOptions{}, &dev).ok());
  IbMrCache& cache = dev->mrCache();
  // A memfd stands in for the dmabuf a GPU driver exports.
  const int fd = memfd_create("ib_dmabuf_test", 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 1 << 20), 0);
  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  ibv_mr* m1 = nullptr;
  ibv_mr* m2 = nullptr;
  Status st = cache.registerDmabuf(fd, 0, 1 << 20, 0x10000000, rw, &m1);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_TRUE(cache.registerDmabuf(fd, 4096, 8192, 0x10001000, rw, &m2).ok());
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_EQ(cache.size(), 1u);
  cache.evictDmabuf(fd);
  EXPECT_EQ(cache.size(), 0u);
  close(fd);
}

TEST_F(IbOnDouble, InfiniBandUsesLidAddressing) {
  testing::VerbsDoubleOptions vo;
  vo.infiniband = true;
  testing::configureVerbsDouble(vo);
  std::shared_ptr<IbDevice> dev;
  Status st = IbDevice::open(activeVerbsApi(), IbOptions{}, &dev);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_FALSE(dev->port().ethernet);
  EXPECT_NE(dev->port().lid, 0);
  EXPECT_NE(dev->port().describe().find("InfiniBand (LID"), std::string::npos) << dev->port().describe();
  dev.reset();
  pumpPair(smallOptions(2, 64 << 10), 1 << 20, 5000);
  testing::configureVerbsDouble(testing::VerbsDoubleOptions{});
}

TEST_F(IbOnDouble, ConnectAndTeardown) {
  const IbOptions opts[2] = {smallOptions(2, 64 << 10), smallOptions(2, 64 << 10)};
  Status results[2];
  for (int round = 0; round < 3; ++round) {
    withIbPair(
        opts,
        [&](int, IbConnection* c) {
          EXPECT_EQ(c->qps(), 2);
          EXPECT_EQ(c->ringBytes(), 64u << 10);
          EXPECT_TRUE(c->sendsFlushed());
          EXPECT_TRUE(c->recvData().empty());
          bool progressed = true;
          EXPECT_TRUE(c->progress(&progressed).ok());
          EXPECT_TRUE(c->checkHealth().ok());
        },
        results);
    for (int r = 0; r < 2; ++r) ASSERT_TRUE(results[r].ok()) << results[r].message();
  }
}

TEST_F(IbOnDouble, SmallMessagesExact) { pumpPair(smallOptions(2, 64 << 10), 200000, 64); }

TEST_F(IbOnDouble, LargeMessagesBeyondTheRing) { pumpPair(smallOptions(2, 256 << 10), 8 << 20, 300000); }

TEST_F(IbOnDouble, TinyRingExhaustsAndRefillsCredits) {
  // 4 KiB rings: the sender runs out of the peer's ring space constantly.
  pumpPair(smallOptions(1, 4096), 2 << 20, 5000);
}

TEST_F(IbOnDouble, ManyWritesInFlightBeyondTheReceiveDepth) {
  // 8-byte slices with a receive depth of 8: the receive credits run out long before the ring.
  IbOptions o = smallOptions(2, 1 << 20);
  o.recvDepth = 8;
  o.sendDepth = 16;
  pumpPair(o, 100000, 8);
}

TEST_F(IbOnDouble, NoInlineDataAndTinyQueues) {
  // Credit writes then come from registered source slots, and the send queue (4 entries) fills.
  testing::VerbsDoubleOptions vo;
  vo.maxInlineData = 0;
  testing::configureVerbsDouble(vo);
  IbOptions o = smallOptions(2, 16 << 10);
  o.sendDepth = 4;
  o.recvDepth = 4;
  pumpPair(o, 1 << 20, 700);
  testing::configureVerbsDouble(testing::VerbsDoubleOptions{});
}

class IbStriping : public IbOnDouble, public ::testing::WithParamInterface<int> {};

TEST_P(IbStriping, ReassembledInOrder) {
  int seen[2] = {0, 0};
  pumpPair(smallOptions(GetParam(), 64 << 10), 4 << 20, 20000, seen);
  EXPECT_EQ(seen[0], GetParam());
  EXPECT_EQ(seen[1], GetParam());
}
INSTANTIATE_TEST_SUITE_P(Qps, IbStriping, ::testing::Values(1, 2, 3, 4));

TEST_F(IbOnDouble, SidesAgreeOnTheSmallerProposal) {
  const IbOptions opts[2] = {smallOptions(4, 256 << 10), smallOptions(2, 16 << 10)};
  Status results[2];
  int qps[2] = {0, 0};
  uint64_t ring[2] = {0, 0};
  std::string errors[2];
  bool ok[2] = {false, false};
  withIbPair(
      opts,
      [&](int r, IbConnection* c) {
        qps[r] = c->qps();
        ring[r] = c->ringBytes();
        ok[r] = pumpStream(c, 1 << 20, 100 + r, 101 - r, r, 3000, &errors[r]);
      },
      results);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(results[r].ok()) << results[r].message();
    EXPECT_EQ(qps[r], 2);
    EXPECT_EQ(ring[r], 16u << 10);
    EXPECT_TRUE(ok[r]) << errors[r];
  }
}

TEST_F(IbOnDouble, CreditWritesAreBatched) {
  const IbOptions opts[2] = {smallOptions(1, 64 << 10), smallOptions(1, 64 << 10)};
  Status results[2];
  uint64_t credits[2] = {0, 0};
  std::string errors[2];
  bool ok[2] = {false, false};
  withIbPair(
      opts,
      [&](int r, IbConnection* c) {
        ok[r] = pumpStream(c, 4 << 20, 100 + r, 101 - r, r, 16 << 10, &errors[r]);
        credits[r] = c->creditWrites();
      },
      results);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(results[r].ok()) << results[r].message();
    EXPECT_TRUE(ok[r]) << errors[r];
    // 4 MiB through a 64 KiB ring: at least one credit write per quarter ring, and not one per write.
    EXPECT_GE(credits[r], 4u * 64 / 4 / 2);
    EXPECT_LE(credits[r], 4u * 64 * 4 * 2);
  }
}

// Connection data is remote input: rank 1 impersonates a peer and sends damaged copies of what
// a real one sent; rank 0 must refuse each with an actionable error instead of using it.
TEST_F(IbOnDouble, MalformedConnectionDataIsRejected) {
  // Offsets in the wire message (ib_connect.cc): magic 0, version 4, qps 8, ringLog2 12,
  // recvDepth 16, rails 20; rail 0 from 40: mtu 40, ethernet 44, QP numbers from 80.
  struct Damage {
    size_t offset;
    uint32_t value;
    const char* what;
  };
  const Damage damages[] = {{0, 0xdeadbeef, "magic"},
                            {4, 99, "version"},
                            {8, 0, "queue pairs"},
                            {8, 1000, "queue pairs"},
                            {12, 40, "ring size"},
                            {16, 1, "receive depth"},
                            {20, 0, "rails"},
                            {20, 99, "bytes of ib connection data"},
                            {20, 2, "bytes of ib connection data"},
                            {40, 9, "MTU"},
                            {44, 7, "link layer"},
                            {80, 0, "QP number"}};
  for (const Damage& d : damages) {
    SocketAddress bind;
    ASSERT_TRUE(SocketAddress::parse("127.0.0.1:0", &bind).ok());
    Secret secret{};
    collUniqueId id;
    ASSERT_TRUE(startBootstrapRoot(bind, &secret, &id).ok());
    Status result;
    std::thread t[2];
    for (int r = 0; r < 2; ++r) {
      t[r] = std::thread([&, r] {
        Deadline deadline = Deadline::afterMs(10000);
        std::unique_ptr<Bootstrap> bs;
        ASSERT_TRUE(Bootstrap::create(id, r, 2, 0x1234, deadline, &bs).ok());
        if (r == 1) {
          // Take rank 0's genuine data, damage one field and send it back as ours.
          std::vector<uint8_t> raw;
          ASSERT_TRUE(bs->recv(0, kIbTagInfo, &raw, 4096, deadline).ok());
          ASSERT_GE(raw.size(), d.offset + 4);
          memcpy(raw.data() + d.offset, &d.value, 4);
          ASSERT_TRUE(bs->send(0, kIbTagInfo, raw.data(), raw.size(), deadline).ok());
          return;
        }
        std::shared_ptr<IbDevice> dev;
        ASSERT_TRUE(IbDevice::open(activeVerbsApi(), smallOptions(2, 64 << 10), &dev).ok());
        std::unique_ptr<IbConnection> conn;
        result = connectIb(*bs, dev, 1, smallOptions(2, 64 << 10), deadline, &conn);
      });
    }
    for (auto& th : t) th.join();
    EXPECT_EQ(result.code(), collRemoteError) << d.what << ": " << result.message();
    EXPECT_NE(result.message().find(d.what), std::string::npos) << result.message();
  }
}

// The real verbs stack: runs where a device with an active port exists (hardware or SoftRoCE:
// bench/softroce.sh up), skips with the reason elsewhere.
TEST(IbRealDevice, ConnectsAndStreams) {
  setVerbsApiForTesting(nullptr);
  std::shared_ptr<IbDevice> dev;
  Status st = IbDevice::open(realVerbsApi(), ibOptionsFromConfig(), &dev);
  if (!st.ok()) GTEST_SKIP() << st.message();
  dev.reset();
  pumpPair(smallOptions(2, 1 << 20), 16 << 20, 100000);
}

}  // namespace
}  // namespace coll
