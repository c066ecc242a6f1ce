// TCP transport: striped streams over loopback sockets in both directions at once, EOF and reset
// detection, poll sets, options from the environment, and setup through a real Bootstrap.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "collective/collective.h"
#include "tests/unit/comm_threads.h"
#include "tests/unit/socket_tos.h"
#include "tests/unit/stream_pump.h"
#include "transports/tcp/tcp_transport.h"

namespace coll {
namespace {

using testutil::intSockopt;
using testutil::tcpSocketsByTos;

// `n` connected loopback TCP socket pairs: a[i] <-> b[i].
void loopbackPairs(int n, std::vector<int>* a, std::vector<int>* b) {
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(lfd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(lfd, 64), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  for (int i = 0; i < n; ++i) {
    int c = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_EQ(connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    int s = accept(lfd, nullptr, nullptr);
    ASSERT_GE(s, 0);
    a->push_back(c);
    b->push_back(s);
  }
  close(lfd);
}

TcpOptions smallOptions(int streams, uint64_t staging, uint64_t stripe) {
  TcpOptions o;
  o.streams = streams;
  o.socketBufferBytes = 0;
  o.stagingBytes = staging;
  o.stripeBytes = stripe;
  return o;
}

void makePair(const TcpOptions& o, std::unique_ptr<TcpConnection>* ca, std::unique_ptr<TcpConnection>* cb) {
  std::vector<int> a, b;
  loopbackPairs(o.streams, &a, &b);
  Status s1 = TcpConnection::fromSockets(1, a, o, "127.0.0.1:b", ca);
  Status s2 = TcpConnection::fromSockets(0, b, o, "127.0.0.1:a", cb);
  ASSERT_TRUE(s1.ok()) << s1.message();
  ASSERT_TRUE(s2.ok()) << s2.message();
}

using testutil::pumpStream;

class TcpStreams : public ::testing::TestWithParam<int> {};

// 64 MiB each way at once, random commit and consume sizes, default-like staging.
TEST_P(TcpStreams, Bidirectional64MiB) {
  const int streams = GetParam();
  TcpOptions o = smallOptions(streams, 4 << 20, 512 << 10);
  std::unique_ptr<TcpConnection> a, b;
  makePair(o, &a, &b);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->streams(), streams);
  const uint64_t total = 64ull << 20;
  std::string ea, eb;
  bool oka = false, okb = false;
  std::thread ta([&] { oka = pumpStream(a.get(), total, 1, 2, 10, 300000, &ea); });
  std::thread tb([&] { okb = pumpStream(b.get(), total, 2, 1, 20, 300000, &eb); });
  ta.join();
  tb.join();
  EXPECT_TRUE(oka) << ea;
  EXPECT_TRUE(okb) << eb;
}

// Small staging and stripes: many wraps of both rings, stripes smaller than commits.
TEST_P(TcpStreams, SmallRingsManyWraps) {
  const int streams = GetParam();
  TcpOptions o = smallOptions(streams, 16 << 10, 1 << 10);
  std::unique_ptr<TcpConnection> a, b;
  makePair(o, &a, &b);
  ASSERT_TRUE(a && b);
  const uint64_t total = 8ull << 20;
  std::string ea, eb;
  bool oka = false, okb = false;
  std::thread ta([&] { oka = pumpStream(a.get(), total, 3, 4, 30, 5000, &ea); });
  std::thread tb([&] { okb = pumpStream(b.get(), total, 4, 3, 40, 5000, &eb); });
  ta.join();
  tb.join();
  EXPECT_TRUE(oka) << ea;
  EXPECT_TRUE(okb) << eb;
}

INSTANTIATE_TEST_SUITE_P(Streams, TcpStreams, ::testing::Values(1, 2, 4));

TEST(Tcp, SmallMessageGoesOutInOneProgress) {
  std::unique_ptr<TcpConnection> a, b;
  makePair(smallOptions(2, 1 << 20, 256 << 10), &a, &b);
  ASSERT_TRUE(a && b);
  auto s = a->sendSpace();
  ASSERT_GE(s.size(), 8u);
  memcpy(s.data(), "12345678", 8);
  a->sendCommit(8);
  EXPECT_FALSE(a->sendsFlushed());
  std::vector<pollfd> fds;
  a->appendPollFds(&fds);
  ASSERT_EQ(fds.size(), 2u);
  EXPECT_TRUE(fds[0].events & POLLOUT);
  EXPECT_FALSE(fds[1].events & POLLOUT);
  bool progressed = false;
  ASSERT_TRUE(a->progress(&progressed).ok());
  EXPECT_TRUE(progressed);
  EXPECT_TRUE(a->sendsFlushed());
  fds.clear();
  a->appendPollFds(&fds);
  EXPECT_FALSE(fds[0].events & POLLOUT);
  auto deadline = Deadline::afterMs(5000);
  while (b->recvData().size() < 8 && !deadline.expired()) ASSERT_TRUE(b->progress(&progressed).ok());
  ASSERT_EQ(b->recvData().size(), 8u);
  EXPECT_EQ(memcmp(b->recvData().data(), "12345678", 8), 0);
}

TEST(Tcp, ThroughputLoopback64MiB) {
  std::unique_ptr<TcpConnection> a, b;
  makePair(smallOptions(2, 4 << 20, 512 << 10), &a, &b);
  ASSERT_TRUE(a && b);
  const uint64_t total = 64ull << 20;
  auto start = std::chrono::steady_clock::now();
  std::thread tx([&] {
    uint64_t sent = 0;
    bool p;
    while (sent < total || !a->sendsFlushed()) {
      auto s = a->sendSpace();
      size_t n = std::min<uint64_t>(s.size(), total - sent);
      if (n > 0) {
        memset(s.data(), 0x33, n);
        a->sendCommit(n);
        sent += n;
      }
      if (!a->progress(&p).ok()) return;
    }
  });
  uint64_t received = 0;
  bool p;
  while (received < total) {
    ASSERT_TRUE(b->progress(&p).ok());
    auto d = b->recvData();
    b->recvConsume(d.size());
    received += d.size();
  }
  tx.join();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  printf("[ tcp ] 64 MiB one-way loopback stream, 2 sockets: %.3f s, %.2f GB/s\n", s, total / s / 1e9);
}

// A peer's orderly close is not an error for progress() (the peer may be done with us); the
// executor asks checkHealth() when it still waits for bytes, and that reports it.
TEST(Tcp, PeerCloseIsRemoteError) {
  std::unique_ptr<TcpConnection> a, b;
  makePair(smallOptions(2, 1 << 20, 256 << 10), &a, &b);
  ASSERT_TRUE(a && b);
  auto space = b->sendSpace();
  ASSERT_GE(space.size(), 8u);
  memset(space.data(), 7, 8);
  b->sendCommit(8);
  bool progressed;
  while (!b->sendsFlushed()) ASSERT_TRUE(b->progress(&progressed).ok());
  b.reset();
  Status st;
  auto deadline = Deadline::afterMs(5000);
  while (st.ok() && !deadline.expired()) {
    ASSERT_TRUE(a->progress(&progressed).ok());
    st = a->checkHealth();
  }
  // Bytes sent before the close are still delivered.
  ASSERT_GE(a->recvData().size(), 8u);
  EXPECT_EQ(static_cast<int>(a->recvData()[0]), 7);
  EXPECT_EQ(st.code(), collRemoteError);
  EXPECT_NE(st.message().find("rank 1"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("closed the connection"), std::string::npos) << st.message();
}

TEST(Tcp, SendToClosedPeerIsRemoteError) {
  std::unique_ptr<TcpConnection> a, b;
  makePair(smallOptions(1, 1 << 20, 256 << 10), &a, &b);
  ASSERT_TRUE(a && b);
  b.reset();
  Status st;
  bool progressed;
  auto deadline = Deadline::afterMs(5000);
  while (st.ok() && !deadline.expired()) {
    auto s = a->sendSpace();
    if (!s.empty()) a->sendCommit(s.size());
    st = a->progress(&progressed);
  }
  EXPECT_EQ(st.code(), collRemoteError) << st.message();
  EXPECT_NE(st.message().find("rank 1"), std::string::npos) << st.message();
}

TEST(Tcp, RejectsBadOptions) {
  std::vector<int> a, b;
  loopbackPairs(1, &a, &b);
  std::unique_ptr<TcpConnection> c;
  EXPECT_EQ(TcpConnection::fromSockets(1, a, smallOptions(1, 1 << 20, 1000), "x", &c).code(), collInvalidArgument);
  EXPECT_EQ(TcpConnection::fromSockets(1, {}, smallOptions(1, 1 << 20, 1024), "x", &c).code(), collInvalidArgument);
  for (int fd : b) close(fd);
}

// The real setup path: two ranks rendezvous through a Bootstrap and call connectTcp; the lower
// rank's stream count and stripe win.
TEST(Tcp, ConnectThroughBootstrap) {
  SocketAddress bind;
  ASSERT_TRUE(SocketAddress::parse("127.0.0.1:0", &bind).ok());
  Secret secret{};
  secret[0] = 7;
  collUniqueId id;
  Status st = startBootstrapRoot(bind, &secret, &id);
  ASSERT_TRUE(st.ok()) << st.message();
  std::unique_ptr<Bootstrap> bs[2];
  std::unique_ptr<Connection> conn[2];
  Status results[2];
  std::string errors[2];
  bool ok[2] = {false, false};
  std::thread t[2];
  for (int r = 0; r < 2; ++r) {
    t[r] = std::thread([&, r] {
      Deadline deadline = Deadline::afterMs(20000);
      results[r] = Bootstrap::create(id, r, 2, 0x1234, deadline, &bs[r]);
      if (!results[r].ok()) return;
      TcpOptions o = smallOptions(r == 0 ? 3 : 1, 256 << 10, 16 << 10);
      results[r] = connectTcp(*bs[r], 1 - r, o, deadline, &conn[r]);
      if (!results[r].ok()) return;
      ok[r] = pumpStream(conn[r].get(), 4 << 20, 100 + r, 101 - r, r, 70000, &errors[r]);
    });
  }
  for (auto& th : t) th.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].message();
    EXPECT_TRUE(ok[r]) << "rank " << r << ": " << errors[r];
    auto* tcp = dynamic_cast<TcpConnection*>(conn[r].get());
    ASSERT_NE(tcp, nullptr);
    EXPECT_EQ(tcp->streams(), 3);
    EXPECT_EQ(tcp->stripeBytes(), 16u << 10);
    EXPECT_EQ(tcp->peer(), 1 - r);
  }
}

// A pair of thread ranks connected over two rails on one host, 127.0.0.1 and 127.0.0.2 (both on
// lo): bootstraps them, connects rank r with streamsOf(r) sockets, then runs body(r, connection).
void withTwoRailPair(uint8_t secretByte, int (*streamsOf)(int), const std::function<void(int, Connection*)>& body,
                     std::unique_ptr<Connection> conn[2], const std::vector<uint32_t>& railMbps = {}) {
  SocketAddress bind;
  ASSERT_TRUE(SocketAddress::parse("127.0.0.1:0", &bind).ok());
  Secret secret{};
  secret[0] = secretByte;
  collUniqueId id;
  Status st = startBootstrapRoot(bind, &secret, &id);
  ASSERT_TRUE(st.ok()) << st.message();
  SocketAddress rail[2];
  ASSERT_TRUE(SocketAddress::parse("127.0.0.1:0", &rail[0]).ok());
  ASSERT_TRUE(SocketAddress::parse("127.0.0.2:0", &rail[1]).ok());
  std::unique_ptr<Bootstrap> bs[2];
  Status results[2];
  std::thread t[2];
  for (int r = 0; r < 2; ++r) {
    t[r] = std::thread([&, r] {
      Deadline deadline = Deadline::afterMs(20000);
      results[r] = Bootstrap::create(id, r, 2, 0x1234, deadline, &bs[r]);
      if (!results[r].ok()) return;
      TcpOptions o = smallOptions(streamsOf(r), 256 << 10, 16 << 10);
      o.rails = {rail[0], rail[1]};
      o.railMbps = railMbps;
      results[r] = connectTcp(*bs[r], 1 - r, o, deadline, &conn[r]);
      if (results[r].ok()) body(r, conn[r].get());
    });
  }
  for (auto& th : t) th.join();
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].message();
}

// The sockets of the connection leave from and arrive at both addresses, alternately, and the
// stream stays exact both ways.
TEST(TcpRails, SocketsAreBoundToEveryRail) {
  std::unique_ptr<Connection> conn[2];
  std::string errors[2];
  bool ok[2] = {false, false};
  withTwoRailPair(
      8, [](int r) { return r == 0 ? 3 : 1; },
      [&](int r, Connection* c) { ok[r] = pumpStream(c, 8 << 20, 100 + r, 101 - r, r, 70000, &errors[r]); }, conn);
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(ok[r]) << "rank " << r << ": " << errors[r];
    auto* tcp = dynamic_cast<TcpConnection*>(conn[r].get());
    ASSERT_NE(tcp, nullptr);
    EXPECT_EQ(tcp->streams(), 4);  // 3 asked, rounded up to the same count on each rail
    for (int i = 0; i < tcp->streams(); ++i) {
      const std::string local = tcp->streamLocalAddress(i).toString();
      const std::string want = i % 2 == 0 ? "127.0.0.1:" : "127.0.0.2:";
      EXPECT_EQ(local.compare(0, want.size(), want), 0) << "rank " << r << " stream " << i << ": " << local;
    }
  }
}

// Through connectTcp over two addresses: a rail whose socket is shut down mid-stream is lost at
// both ends, its traffic moves to the other, and the stream stays exact both ways.
TEST(TcpRails, ALostRailFailsOver) {
  std::unique_ptr<Connection> conn[2];
  std::string errors[2];
  bool ok[2] = {false, false};
  withTwoRailPair(
      9, [](int) { return 2; },
      [&](int r, Connection* c) {
        if (r == 0) {
          // Cut rail 2: find the socket of stream 1 by its local address and shut it down.
          const SocketAddress gone = static_cast<TcpConnection*>(c)->streamLocalAddress(1);
          for (int fd = 3; fd < 4096; ++fd) {
            SocketAddress a;
            a.length = sizeof(a.storage);
            if (getsockname(fd, reinterpret_cast<sockaddr*>(&a.storage), &a.length) == 0 && a == gone) {
              shutdown(fd, SHUT_RDWR);
              break;
            }
          }
        }
        ok[r] = pumpStream(c, 8 << 20, 100 + r, 101 - r, r, 70000, &errors[r]);
        if (ok[r]) {
          Status h = c->checkHealth();
          ok[r] = h.ok();
          errors[r] = h.message();
        }
      },
      conn);
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(ok[r]) << "rank " << r << ": " << errors[r];
    auto* tcp = dynamic_cast<TcpConnection*>(conn[r].get());
    ASSERT_NE(tcp, nullptr);
    EXPECT_EQ(tcp->rails(), 2);
    EXPECT_EQ(tcp->railsLost(), 1) << "rank " << r;
  }
}

// Two connections over `streams` loopback sockets and `rails` control sockets, as connectTcp
// makes them over several rails (socket i on rail i mod rails).
void makeRailedPair(const TcpOptions& o, int rails, std::unique_ptr<TcpConnection>* ca,
                    std::unique_ptr<TcpConnection>* cb, std::vector<int>* fdsA, std::vector<int>* fdsB) {
  std::vector<int> a, b, ctlA, ctlB;
  loopbackPairs(o.streams, &a, &b);
  loopbackPairs(rails, &ctlA, &ctlB);
  *fdsA = a;
  *fdsB = b;
  for (int r = 0; r < rails; ++r) {
    fdsA->push_back(ctlA[r]);
    fdsB->push_back(ctlB[r]);
  }
  Status s1 = TcpConnection::fromSockets(1, a, o, "127.0.0.1:b", ca, ctlA);
  Status s2 = TcpConnection::fromSockets(0, b, o, "127.0.0.1:a", cb, ctlB);
  ASSERT_TRUE(s1.ok()) << s1.message();
  ASSERT_TRUE(s2.ok()) << s2.message();
}

struct RailCut {
  int rail;             // the rail whose sockets (data and control) are shut down
  uint64_t afterBytes;  // once rank 0 has received this many bytes
  bool atA;             // shut down at a (else at b)
};

// Both directions at once over `rails` rails; the cuts happen mid-stream. Returns each end's
// outcome.
void pumpWithCuts(const TcpOptions& o, int rails, uint64_t total, const std::vector<RailCut>& cuts, bool ok[2],
                  std::string errors[2], std::unique_ptr<TcpConnection>* keepA = nullptr,
                  std::unique_ptr<TcpConnection>* keepB = nullptr) {
  const int streams = o.streams;
  std::unique_ptr<TcpConnection> a, b;
  std::vector<int> fdsA, fdsB;
  makeRailedPair(o, rails, &a, &b, &fdsA, &fdsB);
  ASSERT_TRUE(a && b);
  auto cutRail = [&](const RailCut& c) {
    const std::vector<int>& fds = c.atA ? fdsA : fdsB;
    for (int i = 0; i < streams; ++i) {
      if (a->streamRail(i) == c.rail) shutdown(fds[i], SHUT_RDWR);
    }
    shutdown(fds[streams + c.rail], SHUT_RDWR);
  };
  std::thread tb([&] { ok[1] = pumpStream(b.get(), total, 2, 1, 20, 7000, &errors[1]); });
  size_t nextCut = 0;
  // Cuts between a's progress calls, as a failure would come.
  ok[0] = pumpStream(a.get(), total, 1, 2, 10, 5000, &errors[0], {}, 0, nullptr, nullptr, [&] {
    while (nextCut < cuts.size() && a->receivedBytes() >= cuts[nextCut].afterBytes) cutRail(cuts[nextCut++]);
  });
  tb.join();
  if (keepA != nullptr) *keepA = std::move(a);
  if (keepB != nullptr) *keepB = std::move(b);
}

TEST(TcpRails, ALostRailMovesItsTrafficToTheOthers) {
  for (int rails : {2, 4}) {
    for (bool atA : {true, false}) {
      bool ok[2] = {false, false};
      std::string errors[2];
      std::unique_ptr<TcpConnection> a, b;
      pumpWithCuts(smallOptions(2 * rails, 64 << 10, 4 << 10), rails, 8 << 20, {{1, 1 << 20, atA}}, ok, errors, &a, &b);
      for (int r = 0; r < 2; ++r) EXPECT_TRUE(ok[r]) << rails << " rails, rank " << r << ": " << errors[r];
      // Small rings and stripes: the move deals many pieces, and the ring wraps often.
      pumpWithCuts(smallOptions(2 * rails, 16 << 10, 1 << 10), rails, 4 << 20, {{rails - 1, 1 << 20, !atA}}, ok,
                   errors);
      for (int r = 0; r < 2; ++r) EXPECT_TRUE(ok[r]) << rails << " rails, rank " << r << ": " << errors[r];
      ASSERT_TRUE(a && b);
      EXPECT_EQ(a->railsLost(), 1);
      EXPECT_EQ(b->railsLost(), 1);
      EXPECT_TRUE(a->checkHealth().ok()) << a->checkHealth().message();
    }
  }
}

// A rail lost after the sender's call completed (its bytes handed to the kernel, some of them
// then lost with the rail at the receiver): the receiver cannot finish until the sender answers,
// and the sender's progress between calls (the transport's idle thread) does, with no call of its
// own. Its acknowledgements between calls free the peer's ring too.
TEST(TcpRails, ARailLostBetweenCallsMovesWithoutAnotherCall) {
  const TcpOptions o = smallOptions(4, 64 << 10, 4 << 10);
  const int rails = 2;
  std::unique_ptr<TcpConnection> a, b;
  std::vector<int> fdsA, fdsB;
  makeRailedPair(o, rails, &a, &b, &fdsA, &fdsB);
  ASSERT_TRUE(a && b);
  const size_t total = 48 << 10;
  auto byteAt = [](size_t i) { return static_cast<std::byte>((i * 131 + 7) & 0xff); };
  auto space = a->sendSpace();
  ASSERT_GE(space.size(), total);
  for (size_t i = 0; i < total; ++i) space[i] = byteAt(i);
  a->sendCommit(total);
  bool progressed = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!a->sendsFlushed() && std::chrono::steady_clock::now() < deadline) ASSERT_TRUE(a->progress(&progressed).ok());
  ASSERT_TRUE(a->sendsFlushed());  // the sender's call would complete here

  // Rail 1 fails at the receiver, with the bytes that reached it there.
  for (int i = 0; i < o.streams; ++i) {
    if (b->streamRail(i) == 1) shutdown(fdsB[i], SHUT_RDWR);
  }
  shutdown(fdsB[o.streams + 1], SHUT_RDWR);
  size_t got = 0;
  std::string wrong;
  auto receive = [&](int ms) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (got < total && std::chrono::steady_clock::now() < until) {
      Status st = b->progress(&progressed);
      ASSERT_TRUE(st.ok()) << st.message();
      auto data = b->recvData();
      for (size_t i = 0; i < data.size() && wrong.empty(); ++i) {
        if (data[i] != byteAt(got + i)) wrong = "byte " + std::to_string(got + i);
      }
      got += data.size();
      b->recvConsume(data.size());
    }
  };
  receive(300);
  EXPECT_LT(got, total) << "the lost rail carried none of the bytes: the test shows nothing";
  EXPECT_EQ(b->railsLost(), 1);
  // Now the sender's idle progress runs (here between the receiver's polls, on the same thread).
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (got < total && std::chrono::steady_clock::now() < until) {
    a->progressBetweenCalls();
    receive(1);
  }
  EXPECT_EQ(got, total);
  EXPECT_EQ(wrong, "");
  EXPECT_EQ(a->railsLost(), 1);
  EXPECT_TRUE(a->checkHealth().ok()) << a->checkHealth().message();

  // The receiver consumed everything; between calls it says so, and the sender's whole ring is
  // free again: past the ring's end, all that the first message used.
  for (int i = 0; i < 20; ++i) {
    b->progressBetweenCalls();
    a->progressBetweenCalls();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const size_t tail = a->sendSpace().size();
  ASSERT_EQ(tail, a->ringBytes() - total);
  a->sendCommit(tail);
  EXPECT_EQ(a->sendSpace().size(), total);
}

// Rails lost one after the other, each once the previous move is done: the stream stays exact.
TEST(TcpRails, RailsLostOneAfterTheOther) {
  bool ok[2] = {false, false};
  std::string errors[2];
  std::unique_ptr<TcpConnection> a, b;
  pumpWithCuts(smallOptions(8, 64 << 10, 4 << 10), 4, 12 << 20,
               {{1, 1 << 20, true}, {2, 4 << 20, false}, {3, 8 << 20, true}}, ok, errors, &a, &b);
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(ok[r]) << "rank " << r << ": " << errors[r];
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->railsLost(), 3);
  EXPECT_EQ(b->railsLost(), 3);
}

// The last rail lost fails both ends, naming every rail and why it was lost.
TEST(TcpRails, TheLastRailLostFailsNamingEveryRail) {
  bool ok[2] = {true, true};
  std::string errors[2];
  pumpWithCuts(smallOptions(4, 64 << 10, 4 << 10), 2, 8 << 20, {{1, 1 << 20, true}, {0, 3 << 20, false}}, ok, errors);
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(ok[r]) << "rank " << r;
    EXPECT_NE(errors[r].find("every rail to rank"), std::string::npos) << "rank " << r << ": " << errors[r];
    EXPECT_NE(errors[r].find("rail 0 ("), std::string::npos) << "rank " << r << ": " << errors[r];
    EXPECT_NE(errors[r].find("rail 1 ("), std::string::npos) << "rank " << r << ": " << errors[r];
  }
}

// Two rails lost at once: the second is lost while the first's traffic is being moved, which
// fails the connection at both ends, naming both rails.
TEST(TcpRails, ASecondRailLostDuringAMoveFails) {
  bool ok[2] = {true, true};
  std::string errors[2];
  pumpWithCuts(smallOptions(8, 64 << 10, 4 << 10), 4, 8 << 20, {{1, 1 << 20, true}, {2, 1 << 20, true}}, ok, errors);
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(ok[r]) << "rank " << r;
    EXPECT_NE(errors[r].find("while the traffic of the lost rail"), std::string::npos)
        << "rank " << r << ": " << errors[r];
  }
}

// A connection whose peer says goodbye before closing reads the closes as the peer gone (reported
// when it is still needed), not as lost rails.
TEST(TcpRails, APeerThatLeavesIsNotALostRail) {
  TcpOptions o = smallOptions(4, 64 << 10, 4 << 10);
  std::unique_ptr<TcpConnection> a, b;
  std::vector<int> fdsA, fdsB;
  makeRailedPair(o, 2, &a, &b, &fdsA, &fdsB);
  ASSERT_TRUE(a && b);
  b.reset();
  bool progressed = false;
  for (int i = 0; i < 100 && a->checkHealth().ok(); ++i) {
    EXPECT_TRUE(a->progress(&progressed).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(a->railsLost(), 0);
  Status st = a->checkHealth();
  EXPECT_EQ(st.code(), collRemoteError);
  EXPECT_NE(st.message().find("closed the connection"), std::string::npos) << st.message();
}

TEST(TcpRails, ControlRecordsAreChecked) {
  std::vector<uint8_t> wire;
  TcpControl lost;
  lost.type = TcpControlType::Lost;
  lost.rail = 1;
  lost.flags = kTcpLostResumable;
  lost.values = {7, 9};
  encodeTcpControl(lost, &wire);
  size_t bytes = 0;
  TcpControl back;
  // A record arrives in pieces: nothing until its header, then its size, then the record.
  EXPECT_TRUE(parseTcpControl(wire.data(), 3, 2, &bytes, &back).ok());
  EXPECT_EQ(bytes, 0u);
  EXPECT_TRUE(parseTcpControl(wire.data(), wire.size() - 1, 2, &bytes, &back).ok());
  EXPECT_EQ(bytes, wire.size());
  EXPECT_TRUE(back.values.empty());
  ASSERT_TRUE(parseTcpControl(wire.data(), wire.size(), 2, &bytes, &back).ok());
  EXPECT_EQ(back.type, TcpControlType::Lost);
  EXPECT_EQ(back.rail, 1u);
  EXPECT_EQ(back.flags, kTcpLostResumable);
  EXPECT_EQ(back.values, (std::vector<uint64_t>{7, 9}));
  // A rail beyond the connection's, a bad magic, an Ack with two values, an unknown type.
  EXPECT_EQ(parseTcpControl(wire.data(), wire.size(), 1, &bytes, &back).code(), collRemoteError);
  std::vector<uint8_t> bad = wire;
  bad[0] ^= 1;
  EXPECT_EQ(parseTcpControl(bad.data(), bad.size(), 2, &bytes, &back).code(), collRemoteError);
  bad = wire;
  bad[4] = static_cast<uint8_t>(TcpControlType::Ack);
  EXPECT_EQ(parseTcpControl(bad.data(), bad.size(), 2, &bytes, &back).code(), collRemoteError);
  bad[4] = 9;
  EXPECT_EQ(parseTcpControl(bad.data(), bad.size(), 2, &bytes, &back).code(), collRemoteError);
}

TEST(TcpRails, SocketsFollowTheRailsWeights) {
  EXPECT_EQ(tcpSocketRails({1, 1}, 4), (std::vector<uint8_t>{0, 1, 0, 1}));
  EXPECT_EQ(tcpSocketRails({1, 1, 1}, 3), (std::vector<uint8_t>{0, 1, 2}));
  const std::vector<uint8_t> weighted = tcpSocketRails({2, 1}, 6);
  EXPECT_EQ(std::count(weighted.begin(), weighted.end(), 0), 4);
  EXPECT_EQ(std::count(weighted.begin(), weighted.end(), 1), 2);
  // Smooth: each cycle of three has both rails.
  EXPECT_NE(std::find(weighted.begin(), weighted.begin() + 3, 1), weighted.begin() + 3);
  EXPECT_NE(std::find(weighted.begin() + 3, weighted.end(), 1), weighted.end());
}

// Rails at 20 and 10 Gbit/s: sockets 2:1 (3 asked become 3), bytes about 2:1, and the stream
// exact; the slower end's speeds count.
TEST(TcpRails, AFasterRailCarriesMore) {
  std::unique_ptr<Connection> conn[2];
  std::string errors[2];
  bool ok[2] = {false, false};
  withTwoRailPair(
      10, [](int) { return 3; },
      [&](int r, Connection* c) { ok[r] = pumpStream(c, 16 << 20, 100 + r, 101 - r, r, 70000, &errors[r]); }, conn,
      {20000, 10000});
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(ok[r]) << "rank " << r << ": " << errors[r];
    auto* tcp = dynamic_cast<TcpConnection*>(conn[r].get());
    ASSERT_NE(tcp, nullptr);
    EXPECT_EQ(tcp->streams(), 3);
    int onFast = 0;
    for (int i = 0; i < tcp->streams(); ++i) onFast += tcp->streamRail(i) == 0 ? 1 : 0;
    EXPECT_EQ(onFast, 2);
    const double fast = static_cast<double>(tcp->railBytesSent(0));
    const double total = fast + static_cast<double>(tcp->railBytesSent(1));
    EXPECT_NEAR(fast / total, 2.0 / 3.0, 0.05) << "rank " << r;
    // The sockets leave from the rail they belong to.
    for (int i = 0; i < tcp->streams(); ++i) {
      const std::string local = tcp->streamLocalAddress(i).toString();
      const std::string want = tcp->streamRail(i) == 0 ? "127.0.0.1:" : "127.0.0.2:";
      EXPECT_EQ(local.compare(0, want.size(), want), 0) << "rank " << r << " stream " << i << ": " << local;
    }
  }
}

// Weighted rails lose a rail like equal ones do.
TEST(TcpRails, AWeightedRailIsLostToo) {
  for (int lost : {0, 1}) {
    TcpOptions o = smallOptions(6, 64 << 10, 4 << 10);
    o.socketRails = tcpSocketRails({2, 1}, 6);
    bool ok[2] = {false, false};
    std::string errors[2];
    std::unique_ptr<TcpConnection> a, b;
    pumpWithCuts(o, 2, 8 << 20, {{lost, 1 << 20, true}}, ok, errors, &a, &b);
    for (int r = 0; r < 2; ++r) EXPECT_TRUE(ok[r]) << "lost rail " << lost << ", rank " << r << ": " << errors[r];
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a->railsLost(), 1);
  }
}

TEST(TcpRails, RailSpeedsFromConfig) {
  std::vector<SocketAddress> rails;
  std::vector<uint32_t> mbps;
  setenv("COLL_TCP_RAILS", "2", 1);
  setenv("COLL_SOCKET_IFNAME", "lo", 1);
  // lo has one IPv4 address: one rail only, whatever the speeds say.
  setenv("COLL_TCP_RAIL_MBPS", "100,50", 1);
  EXPECT_EQ(tcpRailsFromConfig(&rails, &mbps).code(), collInvalidUsage);
  unsetenv("COLL_TCP_RAILS");
  unsetenv("COLL_SOCKET_IFNAME");
  unsetenv("COLL_TCP_RAIL_MBPS");
}

TEST(TcpRails, FromConfigNamesWhatIsMissing) {
  std::vector<SocketAddress> rails;
  unsetenv("COLL_TCP_RAILS");
  EXPECT_TRUE(tcpRailsFromConfig(&rails).ok());
  EXPECT_TRUE(rails.empty());  // one rail: the classic path
  setenv("COLL_TCP_RAILS", "2", 1);
  setenv("COLL_SOCKET_IFNAME", "lo,nosuchif", 1);
  Status st = tcpRailsFromConfig(&rails);
  EXPECT_EQ(st.code(), collInvalidUsage) << st.message();
  EXPECT_NE(st.message().find("nosuchif"), std::string::npos) << st.message();
  setenv("COLL_SOCKET_IFNAME", "=lo", 1);
  st = tcpRailsFromConfig(&rails);
  EXPECT_EQ(st.code(), collInvalidUsage) << st.message();
  EXPECT_NE(st.message().find("COLL_TCP_RAILS=2"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("lo "), std::string::npos) << st.message();
  unsetenv("COLL_TCP_RAILS");
  unsetenv("COLL_SOCKET_IFNAME");
}

TEST(Tcp, OptionsFromConfig) {
  setenv("COLL_NSOCKS_PERPEER", "4", 1);
  setenv("COLL_TCP_STAGING_BYTES", "1M", 1);
  TcpOptions o = tcpOptionsFromConfig();
  EXPECT_EQ(o.streams, 4);
  EXPECT_EQ(o.stagingBytes, 1u << 20);
  EXPECT_EQ(o.stripeBytes, 128u << 10);  // two stripes per stream in the ring
  setenv("COLL_NSOCKS_PERPEER", "1000", 1);
  unsetenv("COLL_TCP_STAGING_BYTES");
  o = tcpOptionsFromConfig();
  EXPECT_EQ(o.streams, kTcpMaxStreams);
  EXPECT_EQ(o.stagingBytes, 1u << 20);
  unsetenv("COLL_NSOCKS_PERPEER");
  o = tcpOptionsFromConfig();
  EXPECT_EQ(o.streams, 2);
  EXPECT_EQ(o.stripeBytes, 256u << 10);
}

TEST(Tcp, TrafficClassOnEverySocket) {
  std::vector<int> a, b;
  loopbackPairs(2, &a, &b);
  TcpOptions o = smallOptions(2, 64 << 10, 4 << 10);
  o.trafficClass = 0x68;  // DSCP 26 (AF31)
  std::unique_ptr<TcpConnection> ca, cb;
  ASSERT_TRUE(TcpConnection::fromSockets(1, a, o, "a", &ca).ok());
  o.trafficClass = kTrafficClassUnset;
  ASSERT_TRUE(TcpConnection::fromSockets(0, b, o, "b", &cb).ok());
  for (int fd : a) {
    EXPECT_EQ(intSockopt(fd, IPPROTO_IP, IP_TOS), 0x68);
    EXPECT_EQ(intSockopt(fd, SOL_SOCKET, SO_PRIORITY), 3);  // the class selector, 0x68 >> 5
  }
  for (int fd : b) EXPECT_EQ(intSockopt(fd, IPPROTO_IP, IP_TOS), 0);  // unset: the socket's default
}

// A communicator over COLL_TRANSPORT=tcp: its data sockets carry config.trafficClass, its stream
// lane, a split and a shrink inherit it, a split may set its own. Work w runs on lane w mod 2, so an
// all-reduce and a barrier connect both lanes: 2 lanes x 2 ranks x 2 streams = 8 sockets per
// communicator. Rank 0 looks once every connection is made; the next barrier keeps rank 1's open.
TEST(Tcp, CommunicatorTrafficClassReachesDataSockets) {
  testutil::ScopedEnv transport("COLL_TRANSPORT", "tcp");
  testutil::ScopedEnv streams("COLL_NSOCKS_PERPEER", "2");
  testutil::ScopedEnv lanes("COLL_STREAM_LANES", "2");
  testutil::ScopedEnv probe("COLL_LINK_PROBE", "0");
  collConfig_t config = COLL_CONFIG_INITIALIZER;
  config.trafficClass = 0x60;
  testutil::withComms(
      2,
      [&](int rank, collComm_t comm) {
        float x = 1, y = 0;
        ASSERT_EQ(collAllReduce(&x, &y, 1, collFloat32, collSum, comm, nullptr), collSuccess) << collGetLastError(comm);
        ASSERT_EQ(collBarrier(comm, nullptr), collSuccess);
        if (rank == 0) {
          EXPECT_EQ(tcpSocketsByTos()[0x60], 8);
        }
        ASSERT_EQ(collBarrier(comm, nullptr), collSuccess);

        collComm_t inherited = nullptr, own = nullptr, shrunk = nullptr;
        ASSERT_EQ(collCommSplit(comm, 0, rank, &inherited, nullptr), collSuccess) << collGetLastError(comm);
        ASSERT_EQ(collCommShrink(comm, nullptr, 0, &shrunk, nullptr), collSuccess) << collGetLastError(comm);
        collConfig_t splitConfig = COLL_CONFIG_INITIALIZER;
        splitConfig.trafficClass = 0xa0;
        ASSERT_EQ(collCommSplit(comm, 0, rank, &own, &splitConfig), collSuccess) << collGetLastError(comm);
        for (collComm_t c : {inherited, own, shrunk}) {
          ASSERT_EQ(collAllReduce(&x, &y, 1, collFloat32, collSum, c, nullptr), collSuccess) << collGetLastError(c);
          ASSERT_EQ(collBarrier(c, nullptr), collSuccess);
        }
        if (rank == 0) {
          std::map<int, int> byTos = tcpSocketsByTos();
          EXPECT_EQ(byTos[0x60], 24);
          EXPECT_EQ(byTos[0xa0], 8);
          EXPECT_EQ(byTos.size(), 2u) << "a socket with a class nobody asked for";
        }
        ASSERT_EQ(collBarrier(comm, nullptr), collSuccess);
        EXPECT_EQ(collCommDestroy(inherited), collSuccess);
        EXPECT_EQ(collCommDestroy(own), collSuccess);
        EXPECT_EQ(collCommDestroy(shrunk), collSuccess);
      },
      &config);
}

TEST(Tcp, CommunicatorWithoutTrafficClassKeepsSocketDefault) {
  testutil::ScopedEnv transport("COLL_TRANSPORT", "tcp");
  testutil::ScopedEnv probe("COLL_LINK_PROBE", "0");
  testutil::withComms(2, [&](int rank, collComm_t comm) {
    float x = 1, y = 0;
    ASSERT_EQ(collAllReduce(&x, &y, 1, collFloat32, collSum, comm, nullptr), collSuccess) << collGetLastError(comm);
    ASSERT_EQ(collBarrier(comm, nullptr), collSuccess);
    if (rank == 0) {
      std::map<int, int> byTos = tcpSocketsByTos();
      EXPECT_GE(byTos[0], 4);
      EXPECT_EQ(byTos.size(), 1u) << "a socket with a class nobody asked for";
    }
    ASSERT_EQ(collBarrier(comm, nullptr), collSuccess);
  });
}

}  // namespace
}  // namespace coll
