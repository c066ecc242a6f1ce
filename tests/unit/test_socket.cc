// Tests of socket addresses, interface selection, the deadline-bounded socket, and the
// connection authentication handshake (auth.h).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "src/oob/auth.h"
#include "src/oob/socket.h"

namespace coll {
namespace {

SocketAddress parsed(const std::string& text) {
  SocketAddress a;
  Status st = SocketAddress::parse(text, &a);
  EXPECT_TRUE(st.ok()) << text << ": " << st.message();
  return a;
}

TEST(SocketAddress, ParsesAndPrintsIpv4AndIpv6) {
  EXPECT_EQ(parsed("1.2.3.4:5").toString(), "1.2.3.4:5");
  EXPECT_EQ(parsed("1.2.3.4:5").family(), AF_INET);
  EXPECT_EQ(parsed("1.2.3.4:5").port(), 5);
  EXPECT_EQ(parsed("[::1]:5").toString(), "[::1]:5");
  EXPECT_EQ(parsed("[::1]:5").family(), AF_INET6);
  EXPECT_EQ(parsed("[2001:db8::7]:65535").toString(), "[2001:db8::7]:65535");
  EXPECT_EQ(parsed("localhost:80").port(), 80);
  EXPECT_TRUE(parsed("localhost:80").isLoopback());
  EXPECT_TRUE(parsed("127.0.0.1:1") == parsed("127.0.0.1:1"));
  EXPECT_FALSE(parsed("127.0.0.1:1") == parsed("127.0.0.1:2"));
  EXPECT_FALSE(parsed("127.0.0.1:1") == parsed("[::1]:1"));
  EXPECT_TRUE(parsed("0.0.0.0:3").isWildcard());
  EXPECT_TRUE(SocketAddress::wildcard(AF_INET6, 9).isWildcard());
  EXPECT_EQ(SocketAddress::wildcard(AF_INET6, 9).toString(), "[::]:9");
  SocketAddress a = parsed("10.0.0.1:1");
  a.setPort(4242);
  EXPECT_EQ(a.toString(), "10.0.0.1:4242");
}

TEST(SocketAddress, RejectsJunk) {
  for (const char* bad : {"1.2.3.4", ":5", "1.2.3.4:70000", "1.2.3.4:", "::1:5", "[::1]5", "[::1", "host:abc",
                          "1.2.3.4:-1", "", "no-such-host.invalid:5"}) {
    SocketAddress a;
    Status st = SocketAddress::parse(bad, &a);
    EXPECT_FALSE(st.ok()) << bad;
    EXPECT_EQ(st.code(), collInvalidArgument) << bad;
  }
}

TEST(Interfaces, SpecMatcherFollowsNcclSyntax) {
  EXPECT_TRUE(interfaceMatches("", "eth0"));
  EXPECT_TRUE(interfaceMatches("eth,ib", "eth0"));
  EXPECT_TRUE(interfaceMatches("eth,ib", "ib1"));
  EXPECT_FALSE(interfaceMatches("eth,ib", "lo"));
  EXPECT_FALSE(interfaceMatches("eth,ib", "docker0"));
  EXPECT_FALSE(interfaceMatches("^docker,lo", "docker0"));
  EXPECT_FALSE(interfaceMatches("^docker,lo", "lo"));
  EXPECT_TRUE(interfaceMatches("^docker,lo", "eth0"));
  EXPECT_TRUE(interfaceMatches("=eth0", "eth0"));
  EXPECT_FALSE(interfaceMatches("=eth0", "eth01"));
  EXPECT_TRUE(interfaceMatches("eth0", "eth01"));  // a prefix without '='
  EXPECT_FALSE(interfaceMatches("^=docker0", "docker0"));
  EXPECT_TRUE(interfaceMatches("^=docker0", "docker01"));
  EXPECT_TRUE(interfaceMatches("^=docker0", "eth0"));
  EXPECT_TRUE(interfaceMatches("=eth0,ib0", "ib0"));
  EXPECT_TRUE(interfaceMatches("eth,,", "eth3"));
}

TEST(Interfaces, FamilyParsing) {
  int f = -1;
  ASSERT_TRUE(parseSocketFamily("", &f).ok());
  EXPECT_EQ(f, AF_UNSPEC);
  ASSERT_TRUE(parseSocketFamily("AF_INET", &f).ok());
  EXPECT_EQ(f, AF_INET);
  ASSERT_TRUE(parseSocketFamily("af_inet6", &f).ok());
  EXPECT_EQ(f, AF_INET6);
  EXPECT_EQ(parseSocketFamily("AF_UNIX", &f).code(), collInvalidUsage);
}

TEST(Interfaces, FindsAndSelects) {
  std::vector<NetInterface> list;
  ASSERT_TRUE(findInterfaces("", AF_UNSPEC, &list).ok());
  ASSERT_FALSE(list.empty());
  for (auto& n : list) {
    EXPECT_EQ(n.address.port(), 0);
    EXPECT_NE(n.name.compare(0, 6, "docker"), 0);
    if (n.address.family() == AF_INET6) {
      auto* a6 = reinterpret_cast<const sockaddr_in6*>(&n.address.storage);
      EXPECT_FALSE(IN6_IS_ADDR_LINKLOCAL(&a6->sin6_addr)) << n.name;
    }
  }
  ASSERT_TRUE(findInterfaces("lo", AF_INET, &list).ok());
  ASSERT_FALSE(list.empty());
  EXPECT_TRUE(list[0].address.isLoopback());
  ASSERT_TRUE(findInterfaces("=no-such-if", AF_UNSPEC, &list).ok());
  EXPECT_TRUE(list.empty());

  setenv("COLL_SOCKET_IFNAME", "=lo", 1);
  setenv("COLL_SOCKET_FAMILY", "AF_INET", 1);
  NetInterface ni;
  ASSERT_TRUE(selectInterface(&ni).ok());
  EXPECT_EQ(ni.name, "lo");
  EXPECT_EQ(ni.address.family(), AF_INET);
  setenv("COLL_SOCKET_IFNAME", "no-such-if", 1);
  Status st = selectInterface(&ni);
  EXPECT_EQ(st.code(), collInvalidUsage);
  EXPECT_NE(st.message().find("COLL_SOCKET_IFNAME"), std::string::npos);
  unsetenv("COLL_SOCKET_IFNAME");
  unsetenv("COLL_SOCKET_FAMILY");
  ASSERT_TRUE(selectInterface(&ni).ok());

  SocketAddress local;
  ASSERT_TRUE(localAddressTowards(parsed("127.0.0.1:1"), &local).ok());
  EXPECT_TRUE(local.isLoopback());
}

struct Pair {
  Socket a, b;
};

Pair connectedPair(const char* host = "127.0.0.1:0") {
  Socket listener;
  SocketAddress bound;
  Status st = Socket::listen(parsed(host), 16, &listener, &bound);
  EXPECT_TRUE(st.ok()) << st.message();
  Pair p;
  st = Socket::connect(bound, Deadline::afterMs(2000), &p.a);
  EXPECT_TRUE(st.ok()) << st.message();
  SocketAddress peer;
  st = listener.accept(Deadline::afterMs(2000), &p.b, &peer);
  EXPECT_TRUE(st.ok()) << st.message();
  return p;
}

TEST(Socket, TransfersLargeBuffersBothWays) {
  Pair p = connectedPair();
  ASSERT_TRUE(p.a.setNoDelay(true).ok());
  ASSERT_TRUE(p.a.setBufferSizes(1 << 20).ok());
  ASSERT_TRUE(p.b.setNonBlocking(true).ok());
  std::vector<uint8_t> out(8 << 20), in(out.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i * 131 + 7);
  std::thread t([&] { ASSERT_TRUE(p.a.sendAll(out.data(), out.size(), Deadline::afterMs(10000)).ok()); });
  ASSERT_TRUE(p.b.recvAll(in.data(), in.size(), Deadline::afterMs(10000)).ok());
  t.join();
  EXPECT_EQ(in, out);
}

TEST(Socket, Ipv6Loopback) {
  std::vector<NetInterface> v6;
  ASSERT_TRUE(findInterfaces("lo", AF_INET6, &v6).ok());
  if (v6.empty()) GTEST_SKIP() << "no IPv6 loopback";
  Pair p = connectedPair("[::1]:0");
  uint32_t x = 0xabcdef, y = 0;
  ASSERT_TRUE(p.a.sendAll(&x, 4, Deadline::afterMs(1000)).ok());
  ASSERT_TRUE(p.b.recvAll(&y, 4, Deadline::afterMs(1000)).ok());
  EXPECT_EQ(x, y);
}

// A loopback port nobody listens on, below the kernel's ephemeral range: a port from bind(0) is
// ephemeral, so a connect retrying towards it may be given it as its own source port (TCP's
// simultaneous open connects the socket to itself) or another test's connection may take it,
// and a listener arriving later cannot bind it.
SocketAddress unusedPortBelowEphemeral() {
  int low = 32768;
  if (FILE* f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (fscanf(f, "%d", &low) != 1) low = 32768;
    fclose(f);
  }
  const int span = std::max(1000, low - 10000);
  const int start = 10000 + static_cast<int>(getpid() % span);
  for (int k = 0; k < span; ++k) {
    const int port = 10000 + (start - 10000 + k) % span;
    Socket probe;
    SocketAddress bound;
    if (Socket::listen(parsed("127.0.0.1:" + std::to_string(port)), 4, &probe, &bound).ok()) return bound;
  }
  ADD_FAILURE() << "no free loopback port below " << low;
  return parsed("127.0.0.1:1");
}

TEST(Socket, DeadlinesBoundEveryWait) {
  Pair p = connectedPair();
  char buf[4];
  auto t0 = std::chrono::steady_clock::now();
  Status st = p.b.recvAll(buf, 4, Deadline::afterMs(100));
  EXPECT_EQ(st.code(), collTimeout);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));

  Socket listener, none;
  SocketAddress bound;
  ASSERT_TRUE(Socket::listen(parsed("127.0.0.1:0"), 4, &listener, &bound).ok());
  st = listener.accept(Deadline::afterMs(100), &none, nullptr);
  EXPECT_EQ(st.code(), collTimeout);

  // Nobody listens on a port: connect retries, then fails at its deadline.
  listener.close();
  bound = unusedPortBelowEphemeral();
  t0 = std::chrono::steady_clock::now();
  st = Socket::connect(bound, Deadline::afterMs(300), &none);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(bound.toString()), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
}

TEST(Socket, ConnectRetriesUntilTheListenerAppears) {
  const SocketAddress bound = unusedPortBelowEphemeral();
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    Socket l, c;
    ASSERT_TRUE(Socket::listen(bound, 4, &l, nullptr).ok());
    ASSERT_TRUE(l.accept(Deadline::afterMs(3000), &c, nullptr).ok());
  });
  Socket s;
  Status st = Socket::connect(bound, Deadline::afterMs(5000), &s);
  EXPECT_TRUE(st.ok()) << st.message();
  late.join();
}

// A connect retrying towards a peer that has gone stops once its cancel flag is set (an abort),
// long before its deadline.
TEST(Socket, ConnectRetriesStopWhenCancelled) {
  Socket none;
  const SocketAddress bound = unusedPortBelowEphemeral();
  std::atomic<bool> cancelled{false};
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    cancelled = true;
  });
  const auto t0 = std::chrono::steady_clock::now();
  Status st = Socket::connect(bound, Deadline::afterMs(30000), &none, &cancelled);
  const auto took = std::chrono::steady_clock::now() - t0;
  aborter.join();
  EXPECT_EQ(st.code(), collRemoteError) << st.message();
  EXPECT_NE(st.message().find("being aborted"), std::string::npos) << st.message();
  EXPECT_GE(took, std::chrono::milliseconds(150));
  EXPECT_LT(took, std::chrono::seconds(3));
}

TEST(Socket, SendToClosedPeerFailsWithoutSigpipe) {
  Pair p = connectedPair();
  p.b.close();
  std::vector<uint8_t> big(4 << 20);
  Status st = okStatus();
  for (int i = 0; i < 4 && st.ok(); ++i) st = p.a.sendAll(big.data(), big.size(), Deadline::afterMs(2000));
  EXPECT_FALSE(st.ok());  // and the process is still alive: MSG_NOSIGNAL
  char c;
  Pair q = connectedPair();
  q.a.close();
  EXPECT_EQ(q.b.recvAll(&c, 1, Deadline::afterMs(1000)).code(), collRemoteError);
}

// ---- authentication ---------------------------------------------------------------------------

Pair unixPair() {
  int fds[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  return Pair{Socket(fds[0]), Socket(fds[1])};
}

struct AuthResult {
  Status connector, acceptor;
};

AuthResult runAuth(const Secret* connectorSecret, const Secret* acceptorSecret) {
  Pair p = unixPair();
  AuthResult r;
  std::thread t([&] {
    r.acceptor = authenticate(p.b, acceptorSecret, AuthRole::Acceptor, Deadline::afterMs(2000), "test-connector");
    if (!r.acceptor.ok()) p.b.close();
  });
  r.connector = authenticate(p.a, connectorSecret, AuthRole::Connector, Deadline::afterMs(2000), "test-acceptor");
  if (!r.connector.ok()) p.a.close();
  t.join();
  return r;
}

TEST(Auth, SameSecretSucceeds) {
  Secret s;
  ASSERT_TRUE(randomSecret(&s).ok());
  AuthResult r = runAuth(&s, &s);
  EXPECT_TRUE(r.connector.ok()) << r.connector.message();
  EXPECT_TRUE(r.acceptor.ok()) << r.acceptor.message();
}

TEST(Auth, WrongSecretIsRefusedOnBothSides) {
  Secret s1, s2;
  ASSERT_TRUE(randomSecret(&s1).ok());
  s2 = s1;
  s2[15] ^= 1;
  AuthResult r = runAuth(&s1, &s2);
  EXPECT_FALSE(r.connector.ok());
  EXPECT_FALSE(r.acceptor.ok());
  EXPECT_NE(r.acceptor.message().find("test-connector"), std::string::npos);
}

TEST(Auth, ModeMismatchFailsFastAndUnauthenticatedWorks) {
  Secret s;
  ASSERT_TRUE(randomSecret(&s).ok());
  auto t0 = std::chrono::steady_clock::now();
  AuthResult r = runAuth(&s, nullptr);
  EXPECT_FALSE(r.connector.ok());
  EXPECT_FALSE(r.acceptor.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  r = runAuth(nullptr, nullptr);
  EXPECT_TRUE(r.connector.ok());
  EXPECT_TRUE(r.acceptor.ok());
}

TEST(Auth, GarbageOrSilentPeerIsRefusedWithinTheDeadline) {
  Secret s;
  ASSERT_TRUE(randomSecret(&s).ok());
  Pair p = unixPair();
  std::vector<uint8_t> junk(200, 0x5a);
  ASSERT_TRUE(p.a.sendAll(junk.data(), junk.size(), Deadline::afterMs(1000)).ok());
  EXPECT_FALSE(authenticate(p.b, &s, AuthRole::Acceptor, Deadline::afterMs(1000), "junk").ok());
  Pair q = unixPair();
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(authenticate(q.b, &s, AuthRole::Acceptor, Deadline::afterMs(200), "silent").code(), collTimeout);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
}

TEST(Auth, SecretTextAndHex) {
  uint8_t bytes[3] = {0x00, 0xab, 0xff};
  EXPECT_EQ(hexEncode(bytes, 3), "00abff");
  std::vector<uint8_t> back;
  ASSERT_TRUE(hexDecode("00ABff", &back));
  EXPECT_EQ(back, std::vector<uint8_t>({0x00, 0xab, 0xff}));
  EXPECT_FALSE(hexDecode("abc", &back));
  EXPECT_FALSE(hexDecode("zz", &back));

  Secret s;
  ASSERT_TRUE(secretFromText("000102030405060708090a0b0c0d0e0f", &s).ok());
  for (int i = 0; i < 16; ++i) EXPECT_EQ(s[i], i);
  Secret h1, h2;
  ASSERT_TRUE(secretFromText("correct horse battery staple", &h1).ok());
  ASSERT_TRUE(secretFromText("correct horse battery staple", &h2).ok());
  EXPECT_EQ(h1, h2);
  ASSERT_TRUE(secretFromText("correct horse battery stapl", &h2).ok());
  EXPECT_NE(h1, h2);
  EXPECT_FALSE(secretFromText("", &h1).ok());
  Secret r1, r2;
  ASSERT_TRUE(randomSecret(&r1).ok());
  ASSERT_TRUE(randomSecret(&r2).ok());
  EXPECT_NE(r1, r2);
}

}  // namespace
}  // namespace coll
