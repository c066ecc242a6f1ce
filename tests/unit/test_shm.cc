// Shared-memory transport: FIFO streams with wrap-around, windows and slots across processes,
// futex sleep/wake, peer-death detection, and no /dev/shm leftovers.
#include <dirent.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/unit/stream_pump.h"
#include "transports/shm/shm_transport.h"

namespace coll {
namespace {

// A bootstrap over pre-made socketpairs (one per pair of ranks), enough for ShmHost::create's
// barrier; usable from threads or from forked processes.
class PairBootstrap final : public Bootstrap {
 public:
  PairBootstrap(int rank, int nranks, uint64_t hash, std::vector<int> fds)
      : rank_(rank), nranks_(nranks), hash_(hash), fds_(std::move(fds)) {}
  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }
  const PeerInfo& peer(int) const override { return info_; }
  uint64_t commHash() const override { return hash_; }
  Status send(int peer, uint32_t tag, const void* data, size_t size, Deadline) override {
    uint32_t hdr[2] = {tag, static_cast<uint32_t>(size)};
    if (!writeAll(fds_[peer], hdr, sizeof(hdr)) || !writeAll(fds_[peer], data, size)) {
      return makeError(collSystemError, "test bootstrap send failed");
    }
    return okStatus();
  }
  Status recv(int peer, uint32_t tag, std::vector<uint8_t>* data, size_t maxSize, Deadline) override {
    uint32_t hdr[2];
    if (!readAll(fds_[peer], hdr, sizeof(hdr))) return makeError(collRemoteError, "test bootstrap recv: peer gone");
    if (hdr[0] != tag || hdr[1] > maxSize) return makeError(collRemoteError, "test bootstrap: bad message");
    data->resize(hdr[1]);
    if (!readAll(fds_[peer], data->data(), hdr[1])) return makeError(collRemoteError, "test bootstrap recv");
    return okStatus();
  }
  Status connectData(int, uint32_t, Socket*, Deadline) override { return makeError(collInternalError, "n/a"); }
  Status acceptData(int, uint32_t, Socket*, Deadline) override { return makeError(collInternalError, "n/a"); }
  void abort() override {}

 private:
  static bool writeAll(int fd, const void* p, size_t n) {
    auto* b = static_cast<const char*>(p);
    while (n > 0) {
      ssize_t k = ::write(fd, b, n);
      if (k <= 0) return false;
      b += k;
      n -= static_cast<size_t>(k);
    }
    return true;
  }
  static bool readAll(int fd, void* p, size_t n) {
    auto* b = static_cast<char*>(p);
    while (n > 0) {
      ssize_t k = ::read(fd, b, n);
      if (k <= 0) return false;
      b += k;
      n -= static_cast<size_t>(k);
    }
    return true;
  }
  int rank_, nranks_;
  uint64_t hash_;
  std::vector<int> fds_;
  PeerInfo info_;
};

// Socketpairs for n ranks: fds[r][p] is rank r's end towards p.
struct PairNet {
  explicit PairNet(int n) : fds(n, std::vector<int>(n, -1)) {
    for (int i = 0; i < n; ++i) {
      for (int j = i + 1; j < n; ++j) {
        int sv[2];
        EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
        fds[i][j] = sv[0];
        fds[j][i] = sv[1];
      }
    }
  }
  ~PairNet() {
    for (auto& row : fds)
      for (int fd : row)
        if (fd >= 0) close(fd);
  }
  std::vector<std::vector<int>> fds;
};

uint64_t freshHash() {
  static std::atomic<uint64_t> counter{0};
  auto t = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return (static_cast<uint64_t>(getpid()) << 40) ^ (t & 0xffffffffffull) ^ (++counter << 32);
}

int leftovers(uint64_t hash) {
  char prefix[64];
  snprintf(prefix, sizeof(prefix), "coll-%016llx-", static_cast<unsigned long long>(hash));
  int count = 0;
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return 0;
  while (dirent* e = readdir(d)) {
    if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) ++count;
  }
  closedir(d);
  return count;
}

// Creates n ShmHosts (one per thread, as the ranks of one host would).
std::vector<std::unique_ptr<ShmHost>> createHosts(int n, const ShmOptions& options, uint64_t hash) {
  PairNet net(n);
  std::vector<std::unique_ptr<ShmHost>> hosts(n);
  std::vector<Status> results(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      PairBootstrap bs(r, n, hash, net.fds[r]);
      results[r] = ShmHost::create(bs, Topology::uniform(r, n, n), options, Deadline::afterMs(10000), &hosts[r]);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_TRUE(results[r].ok()) << results[r].message();
  return hosts;
}

using testutil::pumpStream;

// Idle step of a shared-memory pump: sleep on the host's futex doorbell until the peer moves.
std::function<void()> sleepOn(ShmHost* host, Connection* c) {
  return [host, c] {
    uint64_t token = host->prepareWait();
    if (c->recvData().empty() && c->sendSpace().empty()) host->wait(token, 100);
    else host->cancelWait();
  };
}

TEST(Shm, SingleRankLoopbackAndWindows) {
  ShmOptions o{4096, 1 << 16, 8};
  uint64_t hash = freshHash();
  auto hosts = createHosts(1, o, hash);
  ASSERT_TRUE(hosts[0]);
  EXPECT_EQ(leftovers(hash), 0);
  ShmHost& h = *hosts[0];
  EXPECT_EQ(h.halfBytes(), 1u << 16);
  EXPECT_EQ(h.maxPublishSlots(), 8);
  EXPECT_NE(h.windowHalf(0, 0), h.windowHalf(0, 1));
  EXPECT_EQ(h.windowHalf(0, 2), h.windowHalf(0, 0));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(h.windowHalf(0, 1)) % 64, 0u);
  h.progressSlot(0, 7).store(42);
  EXPECT_EQ(h.progressSlot(0, 7).load(), 42u);
  h.notifyLocalPeers();  // nobody to wake; must not crash
  std::unique_ptr<Connection> self;
  ASSERT_TRUE(h.connection(0, &self).ok());
  std::string err;
  EXPECT_TRUE(pumpStream(self.get(), 1 << 20, 5, 5, 1, 3000, &err)) << err;
  EXPECT_TRUE(self->checkHealth().ok());
  EXPECT_TRUE(self->sendsFlushed());
  std::unique_ptr<Connection> other;
  EXPECT_FALSE(h.connection(3, &other).ok());
}

TEST(Shm, SendSpaceIsMultipleOf8AtAlignedPositions) {
  ShmOptions o{4096, 64, 1};
  auto hosts = createHosts(1, o, freshHash());
  std::unique_ptr<Connection> c;
  ASSERT_TRUE(hosts[0]->connection(0, &c).ok());
  auto s = c->sendSpace();
  ASSERT_EQ(s.size(), 4096u);
  c->sendCommit(4000);
  auto d = c->recvData();
  ASSERT_EQ(d.size(), 4000u);
  c->recvConsume(13);  // the reader is mid-element; the writer's space must still stay 8-aligned
  s = c->sendSpace();
  EXPECT_EQ(s.size(), 96u);  // to the end of the ring
  c->sendCommit(96);
  s = c->sendSpace();
  EXPECT_EQ(s.size(), 8u);  // 13 bytes free at the start, rounded down to 8
}

// Two ranks (threads) stream 64 MiB in each direction at once through small FIFOs (many wraps).
TEST(Shm, BidirectionalStreamWithWrapAround) {
  ShmOptions o{64 << 10, 4096, 4};
  uint64_t hash = freshHash();
  auto hosts = createHosts(2, o, hash);
  ASSERT_TRUE(hosts[0] && hosts[1]);
  EXPECT_EQ(leftovers(hash), 0);
  std::unique_ptr<Connection> c01, c10;
  ASSERT_TRUE(hosts[0]->connection(1, &c01).ok());
  ASSERT_TRUE(hosts[1]->connection(0, &c10).ok());
  const uint64_t total = 64ull << 20;
  std::string e0, e1;
  bool ok0 = false, ok1 = false;
  std::thread t0(
      [&] { ok0 = pumpStream(c01.get(), total, 11, 22, 7, 20000, &e0, sleepOn(hosts[0].get(), c01.get())); });
  std::thread t1(
      [&] { ok1 = pumpStream(c10.get(), total, 22, 11, 8, 20000, &e1, sleepOn(hosts[1].get(), c10.get())); });
  t0.join();
  t1.join();
  EXPECT_TRUE(ok0) << e0;
  EXPECT_TRUE(ok1) << e1;
}

// One direction, default-sized FIFO, large slices: the number to compare with memcpy bandwidth.
TEST(Shm, StreamThroughput64MiB) {
  ShmOptions o{2 << 20, 4096, 4};
  auto hosts = createHosts(2, o, freshHash());
  std::unique_ptr<Connection> tx, rx;
  ASSERT_TRUE(hosts[0]->connection(1, &tx).ok());
  ASSERT_TRUE(hosts[1]->connection(0, &rx).ok());
  const uint64_t total = 64ull << 20;
  std::vector<std::byte> src(256 << 10, std::byte{0x5a});
  std::vector<std::byte> dst(256 << 10);
  uint64_t sum = 0;
  auto start = std::chrono::steady_clock::now();
  std::thread producer([&] {
    uint64_t sent = 0;
    while (sent < total) {
      auto s = tx->sendSpace();
      if (s.empty()) continue;
      size_t n = std::min<uint64_t>({s.size(), total - sent, src.size()});
      memcpy(s.data(), src.data(), n);
      tx->sendCommit(n);
      sent += n;
    }
  });
  uint64_t received = 0;
  while (received < total) {
    auto d = rx->recvData();
    if (d.empty()) continue;
    size_t n = std::min(d.size(), dst.size());
    memcpy(dst.data(), d.data(), n);
    sum += static_cast<uint64_t>(dst[n - 1]);
    rx->recvConsume(n);
    received += n;
  }
  producer.join();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GT(sum, 0u);
  printf("[ shm ] 64 MiB one-way stream: %.3f s, %.2f GB/s\n", s, total / s / 1e9);
}

// A sleeping waiter is woken by a commit within milliseconds, and 10,000 ping-pong handoffs in
// which both sides always sleep never lose a wake-up.
TEST(Shm, FutexSleepWakeNoLostWakeups) {
  ShmOptions o{4096, 64, 1};
  auto hosts = createHosts(2, o, freshHash());
  std::unique_ptr<Connection> c01, c10;
  ASSERT_TRUE(hosts[0]->connection(1, &c01).ok());
  ASSERT_TRUE(hosts[1]->connection(0, &c10).ok());

  // Single wake latency, measured from the commit to the sleeper's return.
  std::atomic<int64_t> commitNs{0};
  int64_t wokeNs = 0;
  int waits = 0;
  auto nowNs = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  std::thread sleeper([&] {
    while (c10->recvData().empty()) {
      uint64_t token = hosts[1]->prepareWait();
      if (!c10->recvData().empty()) {
        hosts[1]->cancelWait();
        break;
      }
      ++waits;
      hosts[1]->wait(token, 5000);
    }
    wokeNs = nowNs();
    c10->recvConsume(8);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  c01->sendSpace();
  commitNs = nowNs();
  c01->sendCommit(8);
  sleeper.join();
  // Woken by the commit (typically a fraction of a millisecond), not by the 5 s timeout; the
  // bound is loose because the CI machine is shared.
  const double latencyMs = (wokeNs - commitNs.load()) / 1e6;
  EXPECT_LT(latencyMs, 500.0) << "wake-up took too long";
  printf("[ shm ] sleeper (%d waits) woke %.3f ms after the commit\n", waits, latencyMs);

  // Ping-pong: any lost wake-up shows as a 2 s timeout.
  const int kRounds = 10000;
  std::atomic<int> slowWaits{0};
  auto side = [&](Connection* c, ShmHost* h, bool starts) {
    for (int i = 0; i < kRounds; ++i) {
      if (starts) {
        auto s = c->sendSpace();
        memcpy(s.data(), &i, 4);
        c->sendCommit(8);
      }
      while (c->recvData().size() < 8) {
        uint64_t token = h->prepareWait();
        if (c->recvData().size() >= 8) {
          h->cancelWait();
          break;
        }
        auto t = std::chrono::steady_clock::now();
        h->wait(token, 2000);
        if (std::chrono::steady_clock::now() - t > std::chrono::milliseconds(1500)) ++slowWaits;
      }
      int got = -1;
      memcpy(&got, c->recvData().data(), 4);
      EXPECT_EQ(got, i);
      c->recvConsume(8);
      if (!starts) {
        auto s = c->sendSpace();
        memcpy(s.data(), &i, 4);
        c->sendCommit(8);
      }
    }
  };
  auto start = std::chrono::steady_clock::now();
  std::thread a([&] { side(c01.get(), hosts[0].get(), true); });
  std::thread b([&] { side(c10.get(), hosts[1].get(), false); });
  a.join();
  b.join();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(slowWaits.load(), 0);
  printf("[ shm ] %d sleeping round trips: %.1f us each\n", kRounds, s * 1e6 / kRounds);
}

// Windows, progress slots and completed-call counters written by one process are seen by the
// other; then the child exits and the parent's checkHealth reports it.
TEST(Shm, ForkedWindowsSlotsAndPeerDeath) {
  ShmOptions o{4096, 1 << 16, 16};
  uint64_t hash = freshHash();
  PairNet net(2);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    PairBootstrap bs(1, 2, hash, net.fds[1]);
    std::unique_ptr<ShmHost> h;
    if (!ShmHost::create(bs, Topology::uniform(1, 2, 2), o, Deadline::afterMs(10000), &h).ok()) _exit(10);
    auto* w = reinterpret_cast<uint32_t*>(h->windowHalf(1, 3));
    for (uint32_t i = 0; i < (1 << 14); ++i) w[i] = i * 3 + 1;
    h->progressSlot(1, 5).store((uint64_t{3} << HostWindows::kSeqShift) | (1 << 14), std::memory_order_release);
    h->completedCalls(1).store(3, std::memory_order_release);
    h->notifyLocalPeers();
    // Wait for the parent's answer in its window, then exit (the parent then sees us gone).
    auto deadline = Deadline::afterMs(10000);
    while (h->progressSlot(0, 0).load(std::memory_order_acquire) != 77) {
      if (deadline.expired()) _exit(11);
      std::this_thread::yield();
    }
    auto* pw = reinterpret_cast<const uint32_t*>(h->windowHalf(0, 0));
    for (uint32_t i = 0; i < 1000; ++i)
      if (pw[i] != ~i) _exit(12);
    _exit(0);
  }
  PairBootstrap bs(0, 2, hash, net.fds[0]);
  std::unique_ptr<ShmHost> h;
  Status st = ShmHost::create(bs, Topology::uniform(0, 2, 2), o, Deadline::afterMs(10000), &h);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(leftovers(hash), 0);
  std::unique_ptr<Connection> c;
  ASSERT_TRUE(h->connection(1, &c).ok());
  auto deadline = Deadline::afterMs(10000);
  while (h->progressSlot(1, 5).load(std::memory_order_acquire) == 0 && !deadline.expired()) {
    uint64_t token = h->prepareWait();
    if (h->progressSlot(1, 5).load() != 0) {
      h->cancelWait();
      break;
    }
    h->wait(token, 50);
  }
  uint64_t v = h->progressSlot(1, 5).load(std::memory_order_acquire);
  EXPECT_EQ(v >> HostWindows::kSeqShift, 3u);
  EXPECT_EQ(v & ((uint64_t{1} << HostWindows::kSeqShift) - 1), 1u << 14);
  EXPECT_EQ(h->completedCalls(1).load(), 3u);
  auto* w = reinterpret_cast<const uint32_t*>(h->windowHalf(1, 1));
  bool same = true;
  for (uint32_t i = 0; i < (1 << 14); ++i) same = same && w[i] == i * 3 + 1;
  EXPECT_TRUE(same);
  EXPECT_TRUE(c->checkHealth().ok());
  auto* mine = reinterpret_cast<uint32_t*>(h->windowHalf(0, 0));
  for (uint32_t i = 0; i < 1000; ++i) mine[i] = ~i;
  h->progressSlot(0, 0).store(77, std::memory_order_release);

  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  EXPECT_TRUE(WIFEXITED(wstatus));
  EXPECT_EQ(WEXITSTATUS(wstatus), 0);
  Status health = c->checkHealth();
  EXPECT_EQ(health.code(), collRemoteError);
  EXPECT_NE(health.message().find("rank 1"), std::string::npos) << health.message();
  EXPECT_NE(health.message().find(std::to_string(child)), std::string::npos) << health.message();
}

// A rank whose options differ fails setup on every rank, and no segment is left behind.
TEST(Shm, MismatchedOptionsFailEverywhereWithoutLeftovers) {
  uint64_t hash = freshHash();
  PairNet net(2);
  Status results[2];
  std::unique_ptr<ShmHost> hosts[2];
  std::thread t[2];
  for (int r = 0; r < 2; ++r) {
    t[r] = std::thread([&, r] {
      ShmOptions o{r == 0 ? 4096u : 8192u, 4096, 4};
      PairBootstrap bs(r, 2, hash, net.fds[r]);
      results[r] = ShmHost::create(bs, Topology::uniform(r, 2, 2), o, Deadline::afterMs(10000), &hosts[r]);
    });
  }
  for (auto& th : t) th.join();
  EXPECT_FALSE(results[0].ok());
  EXPECT_FALSE(results[1].ok());
  EXPECT_NE(results[0].message().find("COLL_SHM"), std::string::npos) << results[0].message();
  EXPECT_EQ(leftovers(hash), 0);
}

// The real setup path: three ranks of one host rendezvous through a Bootstrap.
TEST(Shm, CreateThroughBootstrap) {
  SocketAddress bind;
  ASSERT_TRUE(SocketAddress::parse("127.0.0.1:0", &bind).ok());
  Secret secret{};
  secret[3] = 9;
  collUniqueId id;
  Status st = startBootstrapRoot(bind, &secret, &id);
  ASSERT_TRUE(st.ok()) << st.message();
  constexpr int n = 3;
  std::unique_ptr<Bootstrap> bs[n];
  std::unique_ptr<ShmHost> hosts[n];
  Status results[n];
  std::thread t[n];
  for (int r = 0; r < n; ++r) {
    t[r] = std::thread([&, r] {
      Deadline deadline = Deadline::afterMs(20000);
      results[r] = Bootstrap::create(id, r, n, 0x99, deadline, &bs[r]);
      if (results[r].ok()) {
        results[r] =
            ShmHost::create(*bs[r], Topology::uniform(r, n, n), ShmOptions{8192, 4096, 4}, deadline, &hosts[r]);
      }
    });
  }
  for (auto& th : t) th.join();
  for (int r = 0; r < n; ++r) ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].message();
  EXPECT_EQ(leftovers(bs[0]->commHash()), 0);
  std::unique_ptr<Connection> c20, c02;
  ASSERT_TRUE(hosts[2]->connection(0, &c20).ok());
  ASSERT_TRUE(hosts[0]->connection(2, &c02).ok());
  auto s = c20->sendSpace();
  ASSERT_GE(s.size(), 64u);
  memset(s.data(), 0xab, 64);
  c20->sendCommit(64);
  ASSERT_EQ(c02->recvData().size(), 64u);
  EXPECT_EQ(c02->recvData()[63], std::byte{0xab});
  hosts[1]->completedCalls(1).store(5);
  EXPECT_EQ(hosts[0]->completedCalls(1).load(), 5u);
}

// Kilobytes of the mapping that holds `p` which this process's page tables map now (smaps' Rss),
// and the mapping's size; -1 when /proc/self/smaps has no such mapping.
long residentKiB(const void* p, long* sizeKiB) {
  FILE* f = fopen("/proc/self/smaps", "r");
  if (f == nullptr) return -1;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  char line[512];
  bool inside = false;
  long size = -1, rss = -1;
  while (fgets(line, sizeof(line), f) != nullptr) {
    unsigned long lo = 0, hi = 0;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      if (inside) break;
      inside = addr >= lo && addr < hi;
      continue;
    }
    if (!inside) continue;
    sscanf(line, "Size: %ld kB", &size);
    sscanf(line, "Rss: %ld kB", &rss);
  }
  fclose(f);
  *sizeKiB = size;
  return rss;
}

// Calls must not take a page fault per 4 KiB of window or FIFO the first time they touch them:
// after prefault(), every rank maps its own segment whole and each peer's window and its FIFO into
// that peer; before, only the few pages create() wrote or read.
TEST(Shm, PrefaultMapsWhatTheCallsTouch) {
  ShmOptions o{1 << 20, 4 << 20, 8};
  auto hosts = createHosts(2, o, freshHash());
  ASSERT_TRUE(hosts[0] && hosts[1]);
  const long segment = static_cast<long>(ShmHost::segmentBytes(o, 2) / 1024);
  const long peerPart = static_cast<long>((hosts[0]->prefaultBytes() - ShmHost::segmentBytes(o, 2)) / 1024);
  EXPECT_GE(peerPart, static_cast<long>(2 * o.windowHalfBytes / 1024));
  for (bool after : {false, true}) {
    for (int r = 0; r < 2; ++r) {
      if (after) hosts[r]->prefault();
      for (int peer = 0; peer < 2; ++peer) {
        long size = 0;
        const long rss = residentKiB(hosts[r]->windowHalf(peer, 1), &size);
        ASSERT_GE(rss, 0) << "no smaps entry for rank " << r << "'s mapping of rank " << peer << "'s segment";
        EXPECT_EQ(size, segment);
        const long want = peer == r ? segment : peerPart;
        if (after) EXPECT_GE(rss, want) << "rank " << r << ", segment of rank " << peer;
        else EXPECT_LT(rss, want / 4) << "rank " << r << ", segment of rank " << peer << " before prefault";
      }
    }
  }
}

TEST(Shm, OptionsFromConfig) {
  setenv("COLL_SHM_FIFO_BYTES", "100000", 1);
  setenv("COLL_SHM_WINDOW_BYTES", "1M", 1);
  ShmOptions o = shmOptionsFromConfig();
  unsetenv("COLL_SHM_FIFO_BYTES");
  unsetenv("COLL_SHM_WINDOW_BYTES");
  EXPECT_EQ(o.fifoBytes % 64, 0u);
  EXPECT_GE(o.fifoBytes, 100000u);
  EXPECT_EQ(o.windowHalfBytes, 512u << 10);
  EXPECT_EQ(o.publishSlots, 64);
}

}  // namespace
}  // namespace coll
