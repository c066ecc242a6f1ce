// Security of the wire: raw-socket intruders against a live rank's listener (its bootstrap and
// data port), peers that send malformed or oversized frames, the parsers of remote bytes, and the
// communicator secret never appearing in logs or error messages.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "collective/collective.h"
#include "src/base/log.h"
#include "src/oob/auth.h"
#include "src/oob/bootstrap.h"
#include "src/oob/env_bootstrap.h"
#include "src/oob/wire.h"
#include "tests/unit/comm_threads.h"
#include "transports/tcp/tcp_transport.h"

namespace coll {
namespace {

SocketAddress loopback() {
  SocketAddress a;
  EXPECT_TRUE(SocketAddress::parse("127.0.0.1:0", &a).ok());
  return a;
}

std::vector<std::unique_ptr<Bootstrap>> createAll(const collUniqueId& id, int nranks) {
  std::vector<std::unique_ptr<Bootstrap>> bs(static_cast<size_t>(nranks));
  std::vector<Status> sts(static_cast<size_t>(nranks));
  std::vector<std::thread> ts;
  for (int r = 0; r < nranks; ++r) {
    ts.emplace_back([&, r] { sts[r] = Bootstrap::create(id, r, nranks, 1000, Deadline::afterMs(10000), &bs[r]); });
  }
  for (auto& t : ts) t.join();
  for (int r = 0; r < nranks; ++r) EXPECT_TRUE(sts[r].ok()) << "rank " << r << ": " << sts[r].message();
  return bs;
}

// A raw TCP client that speaks whatever bytes it is told to (the intruder).
class RawClient {
 public:
  explicit RawClient(const SocketAddress& to) {
    fd_ = ::socket(to.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
    timeval tv{2, 0};
    (void)setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    (void)setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    connected_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<const sockaddr*>(&to.storage), to.length) == 0;
  }
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }
  // Sends what it can; the listener may hang up midway (that is the point).
  void send(const void* data, size_t size) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      ssize_t n = ::send(fd_, p, size, MSG_NOSIGNAL);
      if (n <= 0) return;
      p += n;
      size -= static_cast<size_t>(n);
    }
  }
  void send(const std::vector<uint8_t>& bytes) { send(bytes.data(), bytes.size()); }
  // Reads until the peer closes or 2 s pass; true when it closed (EOF or reset).
  bool waitClosed() {
    char buf[256];
    for (;;) {
      ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n == 0) return true;
      if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK;
    }
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

std::vector<uint8_t> le32s(std::initializer_list<uint32_t> words) {
  std::vector<uint8_t> out;
  for (uint32_t w : words) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(w >> (8 * i)));
  }
  return out;
}

// The authentication prologue (src/oob/auth.cc): magic "CLCA", version 1, authenticated flag.
std::vector<uint8_t> prologue(bool authenticated) {
  std::vector<uint8_t> p = le32s({0x41434c43});
  p.push_back(1);
  p.push_back(authenticated ? 1 : 0);
  p.push_back(0);
  p.push_back(0);
  return p;
}

std::vector<uint8_t> randomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// The rank still works after the attacks: a message both ways and a data connection.
void expectHealthy(std::vector<std::unique_ptr<Bootstrap>>& bs, uint32_t tag) {
  const char msg[] = "still alive";
  Status sent;
  std::thread t([&] { sent = bs[0]->send(1, tag, msg, sizeof(msg), Deadline::afterMs(15000)); });
  std::vector<uint8_t> got;
  Status st = bs[1]->recv(0, tag, &got, 64, Deadline::afterMs(15000));
  t.join();
  ASSERT_TRUE(sent.ok()) << sent.message();
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(got.data())), msg);
  Socket a, b;
  Status connected;
  std::thread c([&] { connected = bs[0]->connectData(1, tag, &a, Deadline::afterMs(15000)); });
  Status accepted = bs[1]->acceptData(0, tag, &b, Deadline::afterMs(15000));
  c.join();
  ASSERT_TRUE(connected.ok()) << connected.message();
  ASSERT_TRUE(accepted.ok()) << accepted.message();
  uint32_t v = 0xfeedbeef, w = 0;
  ASSERT_TRUE(a.sendAll(&v, sizeof(v), Deadline::afterMs(5000)).ok());
  ASSERT_TRUE(b.recvAll(&w, sizeof(w), Deadline::afterMs(5000)).ok());
  EXPECT_EQ(w, v);
}

TEST(WireIntruder, AuthenticatedListenerSurvivesGarbage) {
  Secret secret;
  ASSERT_TRUE(randomSecret(&secret).ok());
  collUniqueId id;
  ASSERT_TRUE(startBootstrapRoot(loopback(), &secret, &id).ok());
  auto bs = createAll(id, 2);
  ASSERT_TRUE(bs[0] && bs[1]);
  const SocketAddress target = bs[1]->peer(1).address;

  {  // connect and hang up at once
    RawClient c(target);
    ASSERT_TRUE(c.connected());
  }
  {  // garbage instead of the prologue
    RawClient c(target);
    c.send(randomBytes(64, 1));
    EXPECT_TRUE(c.waitClosed());
  }
  {  // a truncated prologue, then silence until we hang up
    RawClient c(target);
    c.send(prologue(true).data(), 3);
  }
  {  // a client without the secret
    RawClient c(target);
    c.send(prologue(false));
    EXPECT_TRUE(c.waitClosed());
  }
  {  // the right prologue, a nonce, and a MAC made without the secret
    RawClient c(target);
    c.send(prologue(true));
    c.send(randomBytes(32 + 32, 2));
    EXPECT_TRUE(c.waitClosed());
  }
  {  // an oversized frame: 4 MiB of noise
    RawClient c(target);
    c.send(randomBytes(4 << 20, 3));
    EXPECT_TRUE(c.waitClosed());
  }
  expectHealthy(bs, 11);

  // An idle intruder holds the (single-threaded) listener only until its handshake deadline:
  // a real message sent meanwhile still arrives.
  RawClient idle(target);
  ASSERT_TRUE(idle.connected());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  expectHealthy(bs, 12);
}

TEST(WireIntruder, UnauthenticatedListenerRejectsBadHellos) {
  // Without a secret anyone reaches the hello parser: every malformed hello is dropped.
  collUniqueId id;
  ASSERT_TRUE(startBootstrapRoot(loopback(), nullptr, &id).ok());
  auto bs = createAll(id, 2);
  ASSERT_TRUE(bs[0] && bs[1]);
  const SocketAddress target = bs[1]->peer(1).address;
  const uint32_t kHello = 0x4c484c43;
  const std::vector<std::vector<uint8_t>> hellos = {
      le32s({0xdeadbeef, 1, 0, 5, 10}),                 // bad magic
      le32s({kHello, 1, 0, 5, (16u << 20) + 1}),        // a message over 16 MiB
      le32s({kHello, 1, 99, 5, 10}),                    // sender rank out of range
      le32s({kHello, 1, 0xffffffffu, 5, 10}),           // negative sender rank
      le32s({kHello, 7, 0, 5, 0}),                      // unknown type
      le32s({kHello, 2, 0, 5, 64}),                     // a data hello with a payload
      le32s({kHello, 3, 0xffffffffu, 0, 0xffffffffu}),  // a rank table of 4 GiB
  };
  for (const auto& h : hellos) {
    RawClient c(target);
    ASSERT_TRUE(c.connected());
    c.send(prologue(false));
    c.send(h);
    EXPECT_TRUE(c.waitClosed());
  }
  {  // a truncated hello, then we hang up
    RawClient c(target);
    c.send(prologue(false));
    c.send(le32s({kHello, 1, 0}));
  }
  {  // a message that announces 1000 bytes and delivers 10
    RawClient c(target);
    c.send(prologue(false));
    c.send(le32s({kHello, 1, 0, 77, 1000}));
    c.send(randomBytes(10, 4));
  }
  expectHealthy(bs, 21);
  // Nothing the intruders sent was filed as a message on the tags they used.
  std::vector<uint8_t> got;
  EXPECT_EQ(bs[1]->recv(0, 5, &got, 1 << 20, Deadline::afterMs(100)).code(), collTimeout);
  EXPECT_EQ(bs[1]->recv(0, 77, &got, 1 << 20, Deadline::afterMs(100)).code(), collTimeout);
}

TEST(WireIntruder, PeerWithMalformedFramesGetsAnError) {
  Secret secret;
  ASSERT_TRUE(randomSecret(&secret).ok());
  collUniqueId id;
  ASSERT_TRUE(startBootstrapRoot(loopback(), &secret, &id).ok());
  auto bs = createAll(id, 2);
  ASSERT_TRUE(bs[0] && bs[1]);

  // A peer that knows the secret but sends a garbage TCP handshake on the data socket.
  Socket s;
  Status connected;
  std::thread t([&] {
    connected = bs[0]->connectData(1, kTcpTagBase, &s, Deadline::afterMs(10000));
    if (connected.ok()) {
      auto junk = le32s({0x636f5443, 1, 100000, 40});  // right magic, 100000 streams, stripe 2^40
      connected = s.sendAll(junk.data(), junk.size(), Deadline::afterMs(5000));
    }
  });
  std::unique_ptr<Connection> conn;
  Status st = connectTcp(*bs[1], 0, TcpOptions{}, Deadline::afterMs(10000), &conn);
  t.join();
  ASSERT_TRUE(connected.ok()) << connected.message();
  EXPECT_EQ(st.code(), collRemoteError) << st.message();
  EXPECT_NE(st.message().find("malformed TCP handshake"), std::string::npos) << st.message();
  EXPECT_EQ(conn, nullptr);

  // An oversized bootstrap message where a small one is expected.
  std::vector<uint8_t> big(1 << 20, 0xab);
  Status sent;
  std::thread u([&] { sent = bs[0]->send(1, 31, big.data(), big.size(), Deadline::afterMs(10000)); });
  std::vector<uint8_t> got;
  st = bs[1]->recv(0, 31, &got, 4096, Deadline::afterMs(10000));
  u.join();
  EXPECT_TRUE(sent.ok()) << sent.message();
  EXPECT_EQ(st.code(), collRemoteError) << st.message();
  expectHealthy(bs, 32);
}

TEST(WireParsers, HelloRegistrationAndTable) {
  const uint32_t kHello = 0x4c484c43;
  BootstrapHello h;
  auto ok = le32s({kHello, 1, 1, 9, 100});
  EXPECT_EQ(parseBootstrapHello(ok.data(), ok.size(), 2, &h), nullptr);
  EXPECT_EQ(h.fromRank, 1);
  EXPECT_EQ(h.tag, 9u);
  EXPECT_EQ(h.length, 100u);
  EXPECT_NE(parseBootstrapHello(ok.data(), ok.size() - 1, 2, &h), nullptr);
  EXPECT_NE(parseBootstrapHello(ok.data(), ok.size(), 1, &h), nullptr);  // rank 1 of 1
  EXPECT_NE(parseBootstrapHello(ok.data(), ok.size(), 0, &h), nullptr);
  auto table = le32s({kHello, 3, 0xffffffffu, 0, 2 * static_cast<uint32_t>(kBootstrapEntryBytes)});
  EXPECT_EQ(parseBootstrapHello(table.data(), table.size(), 2, &h), nullptr);
  EXPECT_NE(parseBootstrapHello(table.data(), table.size(), 3, &h), nullptr);

  BootstrapRegistration reg;
  std::vector<uint8_t> r = le32s({0x47524c43, 4, 1, 4, 77, 0});
  std::vector<uint8_t> entry(kBootstrapEntryBytes, 0);
  entry[0] = 4;
  entry[2] = 0x88;  // port 0x1388 = 5000
  entry[3] = 0x13;
  entry[8] = 127;
  entry[11] = 1;
  r.insert(r.end(), entry.begin(), entry.end());
  const std::vector<uint8_t> oneGroup = le32s({1, 0, 0});  // groups, group, forwarded block count
  r.insert(r.end(), oneGroup.begin(), oneGroup.end());
  ASSERT_EQ(r.size(), kBootstrapRegistrationBytes);
  EXPECT_EQ(parseBootstrapRegistration(r.data(), r.size(), 77, -1, &reg), 0u);
  EXPECT_EQ(reg.rank, 1);
  EXPECT_EQ(reg.nranks, 4);
  EXPECT_EQ(reg.info.address.toString(), "127.0.0.1:5000");
  EXPECT_NE(parseBootstrapRegistration(r.data(), r.size(), 78, -1, &reg), 0u);  // another id
  EXPECT_NE(parseBootstrapRegistration(r.data(), r.size(), 77, 8, &reg), 0u);   // nranks differ
  EXPECT_NE(parseBootstrapRegistration(r.data(), r.size() - 1, 77, -1, &reg), 0u);
  std::vector<uint8_t> v2 = r;
  v2[4] = 2;  // the version before groups
  EXPECT_NE(parseBootstrapRegistration(v2.data(), v2.size(), 77, -1, &reg), 0u);
  std::vector<uint8_t> split = r;
  split[kBootstrapRegistrationBytes - 12] = 4;  // rank 1 of 4 in 4 groups: block 1, not 0
  EXPECT_NE(parseBootstrapRegistration(split.data(), split.size(), 77, -1, &reg), 0u);
  split[kBootstrapRegistrationBytes - 8] = 1;
  EXPECT_EQ(parseBootstrapRegistration(split.data(), split.size(), 77, -1, &reg), 0u);
  EXPECT_EQ(reg.groups, 4);
  EXPECT_EQ(reg.group, 1);

  std::vector<PeerInfo> peers;
  EXPECT_TRUE(parseRankTable(entry.data(), entry.size(), 1, &peers).ok());
  ASSERT_EQ(peers.size(), 1u);
  EXPECT_EQ(peers[0].address.port(), 5000);
  EXPECT_EQ(parseRankTable(entry.data(), entry.size(), 2, &peers).code(), collRemoteError);
  entry[0] = 5;  // no such family
  EXPECT_EQ(parseRankTable(entry.data(), entry.size(), 1, &peers).code(), collRemoteError);
}

TEST(WireParsers, TcpHello) {
  uint8_t wire[kTcpHelloBytes];
  encodeTcpHello(TcpHello{4, 19}, wire);
  TcpHello h;
  ASSERT_TRUE(parseTcpHello(wire, sizeof(wire), &h).ok());
  EXPECT_EQ(h.streams, 4u);
  EXPECT_EQ(h.stripeLog2, 19u);
  EXPECT_EQ(parseTcpHello(wire, sizeof(wire) - 1, &h).code(), collRemoteError);
  encodeTcpHello(TcpHello{0, 19}, wire);
  EXPECT_EQ(parseTcpHello(wire, sizeof(wire), &h).code(), collRemoteError);
  encodeTcpHello(TcpHello{2, 27}, wire);
  EXPECT_EQ(parseTcpHello(wire, sizeof(wire), &h).code(), collRemoteError);
}

TEST(WireParsers, SlurmHostListStaysWithinItsBound) {
  // Found by fuzz_config: plain names after bracket expansions went past maxHosts.
  std::vector<std::string> hosts;
  EXPECT_EQ(expandSlurmNodeList("a,b,c", &hosts, 2).code(), collInvalidUsage);
  EXPECT_EQ(expandSlurmNodeList("n[1-2],x", &hosts, 2).code(), collInvalidUsage);
  EXPECT_EQ(expandSlurmNodeList("n[1-3]", &hosts, 2).code(), collInvalidUsage);
  ASSERT_TRUE(expandSlurmNodeList("n[1-2]", &hosts, 2).ok());
  EXPECT_EQ(hosts, (std::vector<std::string>{"n1", "n2"}));
}

// ---- the secret never in logs ------------------------------------------------------------------

std::mutex gLogMu;
std::string gLog;
void captureLog(LogLevel, const char* message) {
  std::lock_guard<std::mutex> lock(gLogMu);
  gLog += message;
  gLog += '\n';
}

// Sends every log line (at the level COLL_DEBUG now says) to gLog, cleared.
void startLogCapture() {
  logReset();
  setLogSink(captureLog);
  std::lock_guard<std::mutex> lock(gLogMu);
  gLog.clear();
}

// Stops the capture (and COLL_DEBUG) and returns what was logged.
std::string stopLogCapture() {
  setLogSink(nullptr);
  unsetenv("COLL_DEBUG");
  logReset();
  std::lock_guard<std::mutex> lock(gLogMu);
  return gLog;
}

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
  return s;
}

TEST(WireSecret, NeverAppearsInTraceLogsOrErrors) {
  testutil::ScopedEnv debug("COLL_DEBUG", "TRACE");
  testutil::ScopedEnv transport("COLL_TRANSPORT", "tcp");
  startLogCapture();
  collUniqueId id;
  ASSERT_EQ(collGetUniqueId(&id), collSuccess);
  UniqueIdContents contents;
  ASSERT_TRUE(decodeUniqueId(id, &contents).ok());
  ASSERT_TRUE(contents.authenticated);
  const std::string hex = hexEncode(contents.secret.data(), contents.secret.size());
  std::vector<std::string> errors;
  std::mutex errorsMu;
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r) {
    ts.emplace_back([&, r] {
      collComm_t comm = nullptr;
      ASSERT_EQ(collCommInitRank(&comm, 2, id, r), collSuccess) << collGetLastError(nullptr);
      std::vector<float> in(4096, 1.0f + r), out(4096);
      EXPECT_EQ(collAllReduce(in.data(), out.data(), in.size(), collFloat32, collSum, comm, nullptr), collSuccess);
      EXPECT_EQ(out[17], 3.0f);
      EXPECT_EQ(collCommDestroy(comm), collSuccess);
    });
  }
  for (auto& t : ts) t.join();
  // An impostor with a live root's address and a wrong secret fails; its error text is checked too.
  {
    testutil::ScopedEnv timeout("COLL_TIMEOUT", "5");
    collUniqueId other;
    ASSERT_EQ(collGetUniqueId(&other), collSuccess);
    UniqueIdContents wrong;
    ASSERT_TRUE(decodeUniqueId(other, &wrong).ok());
    wrong.secret = contents.secret;
    wrong.secret[0] ^= 0xff;
    collUniqueId wrongId;
    ASSERT_TRUE(encodeUniqueId(wrong, &wrongId).ok());
    collComm_t comm = nullptr;
    EXPECT_NE(collCommInitRank(&comm, 2, wrongId, 1), collSuccess);
    std::lock_guard<std::mutex> lock(errorsMu);
    errors.push_back(collGetLastError(nullptr));
  }
  const std::string log = stopLogCapture();
  EXPECT_NE(log.find("bootstrap"), std::string::npos) << "TRACE logging did not reach the sink";
  for (const std::string& text : std::vector<std::string>{log, errors[0]}) {
    EXPECT_EQ(text.find(hex), std::string::npos) << "the secret's hex appears in:\n" << text;
    EXPECT_EQ(upper(text).find(upper(hex)), std::string::npos);
    EXPECT_EQ(text.find(std::string(reinterpret_cast<const char*>(contents.secret.data()), 8)), std::string::npos);
  }
}

// A port that was free a moment ago (the rendezvous needs a fixed one).
std::string freeLoopbackPort() {
  Socket s;
  SocketAddress bound;
  EXPECT_TRUE(Socket::listen(loopback(), 1, &s, &bound).ok());
  return "127.0.0.1:" + std::to_string(bound.port());
}

TEST(WireSecret, EnvironmentSecretNeverInTraceLogs) {
  // collCommInitFromEnv with COLL_COMM_SECRET: a one-rank job hosting its own rendezvous.
  const std::string hex = "5ec7e75ec7e75ec7e75ec7e75ec7e7aa";
  const std::string phrase = "correct horse battery staple";
  for (const std::string& secret : {hex, phrase}) {
    testutil::ScopedEnv debug("COLL_DEBUG", "TRACE");
    testutil::ScopedEnv rank("COLL_RANK", "0");
    testutil::ScopedEnv size("COLL_WORLD_SIZE", "1");
    const std::string rendezvous = freeLoopbackPort();
    testutil::ScopedEnv where("COLL_COMM_ID", rendezvous.c_str());
    testutil::ScopedEnv text("COLL_COMM_SECRET", secret.c_str());
    startLogCapture();
    collComm_t comm = nullptr;
    const collResult_t res = collCommInitFromEnv(&comm, nullptr);
    const std::string error = res == collSuccess ? "" : collGetLastError(nullptr);
    EXPECT_EQ(res, collSuccess) << error;
    if (res == collSuccess) {
      EXPECT_EQ(collCommDestroy(comm), collSuccess);
    }
    const std::string log = stopLogCapture();
    EXPECT_NE(log.find("bootstrap"), std::string::npos) << "TRACE logging did not reach the sink";
    Secret derived;
    ASSERT_TRUE(secretFromText(secret, &derived).ok());
    const std::string derivedHex = hexEncode(derived.data(), derived.size());
    for (const std::string& out : {log, error}) {
      EXPECT_EQ(out.find(secret), std::string::npos) << out;
      EXPECT_EQ(upper(out).find(upper(derivedHex)), std::string::npos) << out;
    }
  }
}

}  // namespace
}  // namespace coll
