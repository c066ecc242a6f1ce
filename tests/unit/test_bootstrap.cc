// Tests of unique ids, the bootstrap root and Bootstrap (ranks as threads in one process):
// rendezvous, messages, data sockets, and refusal of unauthenticated or bogus clients.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "src/oob/auth.h"
#include "src/oob/bootstrap.h"
#include "src/oob/wire.h"

namespace coll {
namespace {

SocketAddress loopback() {
  SocketAddress a;
  EXPECT_TRUE(SocketAddress::parse("127.0.0.1:0", &a).ok());
  return a;
}

collUniqueId startRoot(const Secret* secret) {
  collUniqueId id;
  Status st = startBootstrapRoot(loopback(), secret, &id);
  EXPECT_TRUE(st.ok()) << st.message();
  return id;
}

// Runs `nranks` Bootstrap::create calls in threads; returns the bootstraps (index = rank).
std::vector<std::unique_ptr<Bootstrap>> createAll(const collUniqueId& id, int nranks, int timeoutMs = 10000) {
  std::vector<std::unique_ptr<Bootstrap>> bs(nranks);
  std::vector<Status> sts(nranks);
  std::vector<std::thread> ts;
  for (int r = 0; r < nranks; ++r) {
    ts.emplace_back(
        [&, r] { sts[r] = Bootstrap::create(id, r, nranks, 1000 + r % 2, Deadline::afterMs(timeoutMs), &bs[r]); });
  }
  for (auto& t : ts) t.join();
  for (int r = 0; r < nranks; ++r) EXPECT_TRUE(sts[r].ok()) << "rank " << r << ": " << sts[r].message();
  return bs;
}

TEST(UniqueId, RoundTripsIpv4AndIpv6) {
  for (const char* addr : {"192.0.2.7:4242", "[2001:db8::1]:65000"}) {
    UniqueIdContents c;
    ASSERT_TRUE(SocketAddress::parse(addr, &c.root).ok());
    ASSERT_TRUE(randomSecret(&c.secret).ok());
    c.authenticated = true;
    c.commNonce = 0x0123456789abcdefull;
    collUniqueId id;
    ASSERT_TRUE(encodeUniqueId(c, &id).ok());
    UniqueIdContents d;
    ASSERT_TRUE(decodeUniqueId(id, &d).ok());
    EXPECT_TRUE(d.root == c.root);
    EXPECT_EQ(d.root.toString(), addr);
    EXPECT_EQ(d.secret, c.secret);
    EXPECT_TRUE(d.authenticated);
    EXPECT_EQ(d.commNonce, c.commNonce);
  }
  UniqueIdContents c;
  ASSERT_TRUE(SocketAddress::parse("10.1.1.1:1", &c.root).ok());
  c.authenticated = false;
  collUniqueId id;
  ASSERT_TRUE(encodeUniqueId(c, &id).ok());
  UniqueIdContents d;
  ASSERT_TRUE(decodeUniqueId(id, &d).ok());
  EXPECT_FALSE(d.authenticated);
}

TEST(UniqueId, RejectsJunk) {
  collUniqueId id;
  UniqueIdContents d;
  memset(&id, 0, sizeof(id));
  EXPECT_EQ(decodeUniqueId(id, &d).code(), collInvalidArgument);
  std::mt19937 rng(7);
  for (int i = 0; i < 100; ++i) {
    for (auto& b : id.internal) b = static_cast<char>(rng());
    EXPECT_EQ(decodeUniqueId(id, &d).code(), collInvalidArgument);
  }
  UniqueIdContents c;
  ASSERT_TRUE(SocketAddress::parse("10.1.1.1:1", &c.root).ok());
  collUniqueId good;
  ASSERT_TRUE(encodeUniqueId(c, &good).ok());
  id = good;
  id.internal[4] = 9;  // version
  Status st = decodeUniqueId(id, &d);
  EXPECT_EQ(st.code(), collInvalidArgument);
  EXPECT_NE(st.message().find("version"), std::string::npos);
  id = good;
  id.internal[8] = 5;  // family code
  EXPECT_EQ(decodeUniqueId(id, &d).code(), collInvalidArgument);
  id = good;
  id.internal[10] = id.internal[11] = 0;  // port 0
  EXPECT_EQ(decodeUniqueId(id, &d).code(), collInvalidArgument);
  UniqueIdContents noAddr;
  EXPECT_EQ(encodeUniqueId(noAddr, &id).code(), collInvalidArgument);
}

// Every rank sends to a few pseudo-random peers; every rank receives what it is owed; then
// each rank opens a data socket to its successor and they exchange bytes.
void exerciseBootstraps(std::vector<std::unique_ptr<Bootstrap>>& bs) {
  const int n = static_cast<int>(bs.size());
  const int kPerRank = 3;
  auto dest = [n](int r, int k) { return (r * 7 + k * 3 + 1) % n; };
  auto text = [](int from, int to, int k) {
    return "from " + std::to_string(from) + " to " + std::to_string(to) + " #" + std::to_string(k);
  };
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(bs[r]->rank(), r);
    EXPECT_EQ(bs[r]->nranks(), n);
    EXPECT_EQ(bs[r]->commHash(), bs[0]->commHash());
    for (int p = 0; p < n; ++p) {
      EXPECT_TRUE(bs[r]->peer(p).address == bs[p]->peer(p).address);
      EXPECT_EQ(bs[r]->peer(p).hostHash, 1000u + p % 2);
      EXPECT_EQ(bs[r]->peer(p).pid, getpid());
    }
  }
  std::vector<std::thread> ts;
  std::atomic<int> failures{0};
  for (int r = 0; r < n; ++r) {
    ts.emplace_back([&, r] {
      for (int k = 0; k < kPerRank; ++k) {
        std::string m = text(r, dest(r, k), k);
        Status st = bs[r]->send(dest(r, k), 7, m.data(), m.size(), Deadline::afterMs(5000));
        if (!st.ok()) ++failures, ADD_FAILURE() << st.message();
      }
      // Receive, per source in order, every message owed to this rank.
      for (int from = 0; from < n; ++from) {
        for (int k = 0; k < kPerRank; ++k) {
          if (dest(from, k) != r) continue;
          std::vector<uint8_t> got;
          Status st = bs[r]->recv(from, 7, &got, 1024, Deadline::afterMs(5000));
          if (!st.ok()) {
            ++failures, ADD_FAILURE() << st.message();
            continue;
          }
          EXPECT_EQ(std::string(got.begin(), got.end()), text(from, r, k));
        }
      }
      Socket out, in;
      Status st = bs[r]->connectData((r + 1) % n, 99, &out, Deadline::afterMs(5000));
      if (!st.ok()) {
        ++failures, ADD_FAILURE() << st.message();
        return;
      }
      st = bs[r]->acceptData((r + n - 1) % n, 99, &in, Deadline::afterMs(5000));
      if (!st.ok()) {
        ++failures, ADD_FAILURE() << st.message();
        return;
      }
      std::vector<uint32_t> payload(4096, static_cast<uint32_t>(r)), got(4096);
      EXPECT_TRUE(out.sendAll(payload.data(), payload.size() * 4, Deadline::afterMs(5000)).ok());
      EXPECT_TRUE(in.recvAll(got.data(), got.size() * 4, Deadline::afterMs(5000)).ok());
      EXPECT_EQ(got, std::vector<uint32_t>(4096, static_cast<uint32_t>((r + n - 1) % n)));
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(failures.load(), 0);
}

class BootstrapSizes : public ::testing::TestWithParam<int> {};

TEST_P(BootstrapSizes, RendezvousMessagesAndData) {
  Secret secret;
  ASSERT_TRUE(randomSecret(&secret).ok());
  collUniqueId id = startRoot(&secret);
  auto bs = createAll(id, GetParam());
  for (auto& b : bs) ASSERT_NE(b, nullptr);
  exerciseBootstraps(bs);
}

INSTANTIATE_TEST_SUITE_P(Ranks, BootstrapSizes, ::testing::Values(1, 2, 5, 16));

TEST(Bootstrap, SmallFanoutTreeAndUnauthenticatedMode) {
  setenv("COLL_BOOTSTRAP_FANOUT", "2", 1);
  collUniqueId id = startRoot(nullptr);
  auto bs = createAll(id, 7);
  unsetenv("COLL_BOOTSTRAP_FANOUT");
  for (auto& b : bs) ASSERT_NE(b, nullptr);
  exerciseBootstraps(bs);
}

TEST(Bootstrap, RootOnTheSelectedInterface) {
  Secret secret;
  ASSERT_TRUE(randomSecret(&secret).ok());
  collUniqueId id;
  ASSERT_TRUE(startBootstrapRoot(SocketAddress{}, &secret, &id).ok());
  auto bs = createAll(id, 2);
  for (auto& b : bs) ASSERT_NE(b, nullptr);
  exerciseBootstraps(bs);
}

TEST(Bootstrap, CommHashDiffersBetweenIds) {
  Secret secret;
  ASSERT_TRUE(randomSecret(&secret).ok());
  collUniqueId a = startRoot(&secret), b = startRoot(&secret);
  auto ba = createAll(a, 1), bb = createAll(b, 1);
  ASSERT_TRUE(ba[0] && bb[0]);
  EXPECT_NE(ba[0]->commHash(), bb[0]->commHash());
}

// Speaks the registration protocol by hand (layout of bootstrap.cc) to send bogus values.
// Registers by hand; `blockCount` > 0 sends that many (zeroed, so malformed) entries after it.
uint32_t rawRegister(const collUniqueId& id, const Secret* secret, int32_t rank, int32_t nranks, int32_t groups = 1,
                     int32_t group = 0, uint32_t blockCount = 0) {
  UniqueIdContents c;
  EXPECT_TRUE(decodeUniqueId(id, &c).ok());
  Socket s;
  EXPECT_TRUE(Socket::connect(c.root, Deadline::afterMs(2000), &s).ok());
  EXPECT_TRUE(authenticate(s, secret, AuthRole::Connector, Deadline::afterMs(2000), "root").ok());
  std::vector<uint8_t> reg(kBootstrapRegistrationBytes + blockCount * kBootstrapEntryBytes, 0);
  uint32_t magic = 0x47524c43, version = 4;
  memcpy(reg.data(), &magic, 4);
  memcpy(reg.data() + 4, &version, 4);
  memcpy(reg.data() + 8, &rank, 4);
  memcpy(reg.data() + 12, &nranks, 4);
  memcpy(reg.data() + 16, &c.commNonce, 8);
  reg[24] = 4;  // IPv4
  reg[26] = 1;  // port 1
  reg[32] = 127, reg[35] = 1;
  const size_t tail = 24 + kBootstrapEntryBytes;
  memcpy(reg.data() + tail, &groups, 4);
  memcpy(reg.data() + tail + 4, &group, 4);
  memcpy(reg.data() + tail + 8, &blockCount, 4);
  EXPECT_TRUE(s.sendAll(reg.data(), reg.size(), Deadline::afterMs(2000)).ok());
  uint32_t reply = 0xffffffff;
  EXPECT_TRUE(s.recvAll(&reply, 4, Deadline::afterMs(2000)).ok());
  return reply;
}

TEST(Bootstrap, IntrudersAndBogusRegistrationsAreRefused) {
  Secret secret, wrong;
  ASSERT_TRUE(randomSecret(&secret).ok());
  ASSERT_TRUE(randomSecret(&wrong).ok());
  collUniqueId id = startRoot(&secret);
  UniqueIdContents c;
  ASSERT_TRUE(decodeUniqueId(id, &c).ok());
  const int n = 4;

  // Before the ranks arrive: a client with the wrong secret, one with none, and junk.
  {
    Socket s;
    ASSERT_TRUE(Socket::connect(c.root, Deadline::afterMs(2000), &s).ok());
    EXPECT_FALSE(authenticate(s, &wrong, AuthRole::Connector, Deadline::afterMs(2000), "root").ok());
    Socket u;
    ASSERT_TRUE(Socket::connect(c.root, Deadline::afterMs(2000), &u).ok());
    EXPECT_FALSE(authenticate(u, nullptr, AuthRole::Connector, Deadline::afterMs(2000), "root").ok());
    Socket j;
    ASSERT_TRUE(Socket::connect(c.root, Deadline::afterMs(2000), &j).ok());
    char junk[64];
    memset(junk, 'x', sizeof(junk));
    (void)j.sendAll(junk, sizeof(junk), Deadline::afterMs(1000));
  }
  EXPECT_EQ(rawRegister(id, &secret, 99, n), 1u);  // rank out of range
  EXPECT_EQ(rawRegister(id, &secret, -1, n), 1u);
  EXPECT_EQ(rawRegister(id, &secret, 0, 0), 2u);  // nranks out of range

  auto bs = createAll(id, n);
  for (auto& b : bs) ASSERT_NE(b, nullptr);

  // A rank's listener refuses a client with the wrong secret, and keeps serving the job.
  Socket s;
  ASSERT_TRUE(Socket::connect(bs[1]->peer(1).address, Deadline::afterMs(2000), &s).ok());
  EXPECT_FALSE(authenticate(s, &wrong, AuthRole::Connector, Deadline::afterMs(2000), "rank 1").ok());
  exerciseBootstraps(bs);
}

collUniqueId ids0(const std::vector<collUniqueId>& ids) { return ids[0]; }

// Runs `nranks` Bootstrap::create calls with several roots (one id each) in threads.
std::vector<std::unique_ptr<Bootstrap>> createAllScalable(const std::vector<collUniqueId>& ids, int nranks,
                                                          int timeoutMs = 20000) {
  std::vector<std::unique_ptr<Bootstrap>> bs(nranks);
  std::vector<Status> sts(nranks);
  std::vector<std::thread> ts;
  for (int r = 0; r < nranks; ++r) {
    ts.emplace_back(
        [&, r] { sts[r] = Bootstrap::create(ids, r, nranks, 1000 + r % 2, 0, Deadline::afterMs(timeoutMs), &bs[r]); });
  }
  for (auto& t : ts) t.join();
  for (int r = 0; r < nranks; ++r) EXPECT_TRUE(sts[r].ok()) << "rank " << r << ": " << sts[r].message();
  return bs;
}

TEST(Bootstrap, GroupsCutRanksIntoConsecutiveBlocks) {
  for (int n : {1, 2, 7, 16, 1000}) {
    for (int groups = 1; groups <= std::min(n, 40); ++groups) {
      EXPECT_EQ(bootstrapGroupStart(0, groups, n), 0);
      EXPECT_EQ(bootstrapGroupStart(groups, groups, n), n);
      for (int g = 0; g < groups; ++g) {
        const int start = bootstrapGroupStart(g, groups, n), end = bootstrapGroupStart(g + 1, groups, n);
        EXPECT_GE(end - start, n / groups) << n << " ranks, block " << g << " of " << groups;
        EXPECT_LE(end - start, n / groups + 1);
        for (int r = start; r < end; ++r) ASSERT_EQ(bootstrapGroupOf(r, groups, n), g) << r << " of " << n;
      }
    }
  }
}

// Several roots (collCommInitRankScalable's rendezvous): every rank gets the same table as with one
// root, whatever the number of roots, including one per rank.
TEST(Bootstrap, SeveralRootsGiveOneRankTable) {
  Secret secret;
  ASSERT_TRUE(randomSecret(&secret).ok());
  for (int roots : {2, 3, 5, 16}) {
    std::vector<collUniqueId> ids;
    for (int i = 0; i < roots; ++i) ids.push_back(startRoot(&secret));
    auto bs = createAllScalable(ids, 16);
    for (auto& b : bs) ASSERT_NE(b, nullptr) << roots << " roots";
    exerciseBootstraps(bs);
  }
  // Unauthenticated roots work the same; mixed ones are refused.
  std::vector<collUniqueId> open{startRoot(nullptr), startRoot(nullptr)};
  auto bs = createAllScalable(open, 5);
  for (auto& b : bs) ASSERT_NE(b, nullptr);
  exerciseBootstraps(bs);
  std::unique_ptr<Bootstrap> b;
  const std::vector<collUniqueId> mixed{startRoot(&secret), startRoot(nullptr)};
  Status st = Bootstrap::create(mixed, 0, 2, 1, 0, Deadline::afterMs(300), &b);
  EXPECT_EQ(st.code(), collInvalidArgument) << st.message();
  EXPECT_EQ(Bootstrap::create(std::vector<collUniqueId>{}, 0, 2, 1, 0, Deadline::afterMs(300), &b).code(),
            collInvalidArgument);
  EXPECT_EQ(Bootstrap::create(std::vector<collUniqueId>(3, ids0(open)), 0, 2, 1, 0, Deadline::afterMs(300), &b).code(),
            collInvalidArgument);  // more roots than ranks
}

// A root refuses registrations that do not belong to it: a rank outside the block its group names,
// a forwarded block from a rank that does not lead it, of the wrong size, or of block 0.
TEST(Bootstrap, RootsRefuseRegistrationsOfOtherGroups) {
  Secret secret;
  ASSERT_TRUE(randomSecret(&secret).ok());
  collUniqueId id = startRoot(&secret);
  EXPECT_EQ(rawRegister(id, &secret, 5, 8, 2, 0), 6u);     // rank 5 is in block 1 of 2
  EXPECT_EQ(rawRegister(id, &secret, 1, 8, 9, 0), 6u);     // more groups than ranks
  EXPECT_EQ(rawRegister(id, &secret, 1, 8, 2, 2), 6u);     // no group 2 of 2
  EXPECT_EQ(rawRegister(id, &secret, 5, 8, 2, 1, 4), 6u);  // block 1 starts at rank 4
  EXPECT_EQ(rawRegister(id, &secret, 4, 8, 2, 1, 3), 6u);  // block 1 has 4 ranks
  EXPECT_EQ(rawRegister(id, &secret, 0, 8, 2, 0, 4), 6u);  // block 0 is never forwarded
  EXPECT_EQ(rawRegister(id, &secret, 4, 8, 2, 1, 4), 5u);  // well formed, but its zeroed entries are not
  // The root is still free: a real two-root job on it as root 0.
  const std::vector<collUniqueId> ids{id, startRoot(&secret)};
  auto bs = createAllScalable(ids, 8);
  for (auto& b : bs) ASSERT_NE(b, nullptr);
  exerciseBootstraps(bs);
}

// 1,024 ranks in one process, with one root and with 32 (every root serving 32 registrations and
// root 0 also 31 forwarded blocks).
TEST(Bootstrap, ThousandRanksWithOneAndWithManyRoots) {
  Secret secret;
  ASSERT_TRUE(randomSecret(&secret).ok());
  for (int roots : {1, 32}) {
    std::vector<collUniqueId> ids;
    for (int i = 0; i < roots; ++i) ids.push_back(startRoot(&secret));
    const auto t0 = std::chrono::steady_clock::now();
    auto bs = createAllScalable(ids, 1024, 60000);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (auto& b : bs) ASSERT_NE(b, nullptr);
    for (int r = 0; r < 1024; r += 97) {
      EXPECT_EQ(bs[r]->commHash(), bs[0]->commHash());
      for (int p = 0; p < 1024; p += 31) EXPECT_TRUE(bs[r]->peer(p).address == bs[p]->peer(p).address);
    }
    printf("1024 ranks, %d root(s): rendezvous %.2f s\n", roots, s);
  }
}

TEST(Bootstrap, TimesOutWhenRanksAreMissing) {
  Secret secret;
  ASSERT_TRUE(randomSecret(&secret).ok());
  collUniqueId id = startRoot(&secret);
  std::unique_ptr<Bootstrap> b;
  auto t0 = std::chrono::steady_clock::now();
  Status st = Bootstrap::create(id, 0, 3, 1, Deadline::afterMs(300), &b);
  EXPECT_EQ(st.code(), collTimeout) << st.message();
  EXPECT_NE(st.message().find("COLL_TIMEOUT"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));

  // A root that is not there: connect retries until the deadline, then names the root.
  UniqueIdContents c;
  ASSERT_TRUE(decodeUniqueId(id, &c).ok());
  Socket probe;
  SocketAddress free;
  ASSERT_TRUE(Socket::listen(loopback(), 1, &probe, &free).ok());
  probe.close();
  c.root = free;
  collUniqueId dead;
  ASSERT_TRUE(encodeUniqueId(c, &dead).ok());
  st = Bootstrap::create(dead, 0, 1, 1, Deadline::afterMs(300), &b);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(free.toString()), std::string::npos);

  EXPECT_EQ(Bootstrap::create(id, 3, 3, 1, Deadline::afterMs(300), &b).code(), collInvalidArgument);
  collUniqueId junk;
  memset(&junk, 0, sizeof(junk));
  EXPECT_EQ(Bootstrap::create(junk, 0, 1, 1, Deadline::afterMs(300), &b).code(), collInvalidArgument);
}

TEST(Bootstrap, RecvLimitsAbortAndPromptDestruction) {
  Secret secret;
  ASSERT_TRUE(randomSecret(&secret).ok());
  auto bs = createAll(startRoot(&secret), 2);
  ASSERT_TRUE(bs[0] && bs[1]);
  std::vector<uint8_t> big(100, 1), got;
  ASSERT_TRUE(bs[0]->send(1, 5, big.data(), big.size(), Deadline::afterMs(2000)).ok());
  Status st = bs[1]->recv(0, 5, &got, 10, Deadline::afterMs(2000));
  EXPECT_EQ(st.code(), collRemoteError);
  EXPECT_EQ(bs[1]->recv(0, 6, &got, 10, Deadline::afterMs(100)).code(), collTimeout);
  EXPECT_EQ(bs[0]->send(2, 5, big.data(), 1, Deadline::afterMs(100)).code(), collInvalidArgument);

  // A stalled client sits in rank 1's handshake; abort wakes a waiter; destruction is prompt.
  Socket stalled;
  ASSERT_TRUE(Socket::connect(bs[1]->peer(1).address, Deadline::afterMs(2000), &stalled).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::thread waiter([&] {
    std::vector<uint8_t> m;
    EXPECT_EQ(bs[1]->recv(0, 9, &m, 10, Deadline::afterMs(10000)).code(), collRemoteError);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto t0 = std::chrono::steady_clock::now();
  bs[1]->abort();
  waiter.join();
  bs[1].reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  st = bs[0]->send(1, 5, big.data(), 1, Deadline::afterMs(300));
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("rank 1"), std::string::npos);
}

}  // namespace
}  // namespace coll
