// UCX transport: ranks as threads (each its own bootstrap, UCP context and worker) over UCX's tcp
// and shared-memory transports: exact bytes both ways, transfers many times the ring, thousands of
// small messages in flight, several peers at once, a peer process that exits (an error, no hang),
// and a rank between calls that still answers its peer (the net's idle progress).
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "src/base/config.h"
#include "tests/unit/stream_pump.h"
#include "transports/ucx/ucx_transport.h"

namespace coll {
namespace {

using testutil::patternByte;
using testutil::pumpStream;

UcxOptions options(const std::string& tls, uint64_t ring, uint64_t message, const char* protocol = "auto") {
  UcxOptions o;
  o.protocol = protocol;
  o.config = ucxOptionsFromConfig().config;  // the default UCX settings, as in production
  o.tls = tls;
  o.ringBytes = ring;
  o.messageBytes = message;
  return o;
}

collUniqueId startRoot() {
  SocketAddress bind;
  EXPECT_TRUE(SocketAddress::parse("127.0.0.1:0", &bind).ok());
  Secret secret{};
  secret[0] = 9;
  collUniqueId id{};
  Status st = startBootstrapRoot(bind, &secret, &id);
  EXPECT_TRUE(st.ok()) << st.message();
  return id;
}

// One rank: bootstrap, UCX net and a connection to every other rank.
struct Rank {
  std::unique_ptr<Bootstrap> bootstrap;
  std::unique_ptr<UcxNet> net;
  std::vector<std::unique_ptr<Connection>> conns;
  Status setup(const collUniqueId& id, int rank, int n, const UcxOptions& o) {
    Deadline deadline = Deadline::afterMs(20000);
    COLL_TRY(Bootstrap::create(id, rank, n, 0x1234, deadline, &bootstrap));
    COLL_TRY(UcxNet::create(*bootstrap, o, &net));
    conns.resize(n);
    for (int p = 0; p < n; ++p) {
      if (p != rank) COLL_TRY(net->connect(p, deadline, &conns[p]));
    }
    return okStatus();
  }
  // Connections before the worker they use. Ranks tear down on their own threads: a closing
  // endpoint's flush needs its peer to progress.
  void teardown() {
    conns.clear();
    net.reset();
  }
  ~Rank() { teardown(); }
};

// Runs body(r, rank) on n ranks, each on its own thread with its own bootstrap, net and
// connections, then tears each down on that thread (a closing endpoint's flush needs its peer
// to progress). A rank whose setup failed skips the body; that fails the test.
template <class Body>
void runRanks(int n, const UcxOptions& o, Body body) {
  collUniqueId id = startRoot();
  std::vector<Rank> ranks(n);
  std::vector<Status> setup(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      setup[r] = ranks[r].setup(id, r, n, o);
      if (setup[r].ok()) body(r, ranks[r]);
      ranks[r].teardown();
    });
  }
  for (auto& th : threads) th.join();
  for (int r = 0; r < n; ++r) ASSERT_TRUE(setup[r].ok()) << "rank " << r << ": " << setup[r].message();
}

class UcxTls : public ::testing::TestWithParam<const char*> {};

// Both directions at once, 24 MiB through a 256 KiB ring: random commit and consume sizes, the
// ring wraps ~100 times, and messages up to 64 KiB go eager or rendezvous as UCX decides.
TEST_P(UcxTls, BidirectionalManyTimesTheRing) {
  std::string errors[2], describe[2];
  bool ok[2] = {false, false};
  bool healthy[2] = {false, false};
  std::atomic<int> pumped{0}, checked{0};
  runRanks(2, options(GetParam(), 256 << 10, 64 << 10), [&](int r, Rank& rank) {
    Connection* c = rank.conns[1 - r].get();
    ok[r] = pumpStream(c, 24 << 20, 10 + r, 11 - r, r, 100000, &errors[r]);
    // Health is asked while both ends are still up: a peer that has finished and closed its
    // endpoint is, rightly, an unreachable peer. Keep progressing until the other rank arrives.
    auto arriveAndWait = [c](std::atomic<int>& arrived) {
      arrived.fetch_add(1);
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      bool progressed = false;
      while (arrived.load() < 2 && std::chrono::steady_clock::now() < until && c->progress(&progressed).ok()) {
        std::this_thread::yield();
      }
    };
    arriveAndWait(pumped);
    healthy[r] = c->checkHealth().ok();
    arriveAndWait(checked);
    describe[r] = rank.net->describe();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(ok[r]) << "rank " << r << ": " << errors[r];
    EXPECT_TRUE(healthy[r]);
  }
  EXPECT_NE(describe[0].find("ucx "), std::string::npos) << describe[0];
}

// Each message protocol forced in turn (auto lets UCX choose by size): rendezvous receives land
// in the ring by ucp_am_recv_data_nbx, eager ones are copied from UCX's buffer.
TEST_P(UcxTls, EachProtocol) {
  for (const char* protocol : {"rndv", "eager"}) {
    std::string errors[2], describe[2];
    bool ok[2] = {false, false};
    runRanks(2, options(GetParam(), 512 << 10, 128 << 10, protocol), [&](int r, Rank& rank) {
      describe[r] = rank.net->describe();
      ok[r] = pumpStream(rank.conns[1 - r].get(), 8 << 20, 40 + r, 41 - r, 9 + r, 300000, &errors[r]);
    });
    for (int r = 0; r < 2; ++r) {
      EXPECT_TRUE(ok[r]) << protocol << " rank " << r << ": " << errors[r];
      EXPECT_NE(describe[r].find(std::string("messages ") + protocol), std::string::npos) << describe[r];
    }
  }
}

// Tiny slices: thousands of messages, so the message window (not only the byte credit) fills
// and refills, and rendezvous-sized ones (1 MiB ring, 512 KiB messages) interleave with them.
TEST_P(UcxTls, ManySmallMessagesInFlight) {
  std::string errors[2];
  bool ok[2] = {false, false};
  runRanks(2, options(GetParam(), 1 << 20, 512 << 10), [&](int r, Rank& rank) {
    // Rank 0 sends and consumes in slices of up to 24 bytes, rank 1 in slices up to 700 KiB.
    ok[r] = pumpStream(rank.conns[1 - r].get(), 1 << 20, 30 + r, 31 - r, 5 + r, r == 0 ? 24 : 700000, &errors[r]);
  });
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(ok[r]) << "rank " << r << ": " << errors[r];
}

// Three ranks, every pair at once (each rank pumps its peers in rank order, so pairs overlap and
// one worker serves several connections).
TEST_P(UcxTls, ThreeRanksAllPairs) {
  constexpr int n = 3;
  std::string errors[n];
  bool ok[n] = {};
  runRanks(n, options(GetParam(), 128 << 10, 32 << 10), [&](int r, Rank& rank) {
    ok[r] = true;
    for (int p = 0; p < n && ok[r]; ++p) {
      if (p == r) continue;
      ok[r] = pumpStream(rank.conns[p].get(), 3 << 20, 100 * r + p, 100 * p + r, r, 50000, &errors[r]);
    }
  });
  for (int r = 0; r < n; ++r) EXPECT_TRUE(ok[r]) << "rank " << r << ": " << errors[r];
}

// Posted receives (the executor's path for UCX): eager messages are applied from UCX's buffer
// straight to the post, the rest (rendezvous messages, units beyond the post, bytes behind ring
// data) land in the ring; every byte arrives once, in order, both ways at once.
TEST_P(UcxTls, PostedReceivesApplyEagerMessagesInPlace) {
  std::string errors[2];
  bool ok[2] = {false, false};
  testutil::PumpPost posts[2];
  uint64_t inPlace[2] = {0, 0};
  runRanks(2, options(GetParam(), 256 << 10, 32 << 10), [&](int r, Rank& rank) {
    auto* conn = static_cast<UcxConnection*>(rank.conns[1 - r].get());
    ok[r] = pumpStream(conn, 8 << 20, 60 + r, 61 - r, 3 + r, 100000, &errors[r], {}, 8, &posts[r]);
    inPlace[r] = conn->appliedInPlaceBytes();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(ok[r]) << "rank " << r << ": " << errors[r];
    EXPECT_EQ(inPlace[r], posts[r].appliedUnits * 8);
    // The receiver posts before every progress and drains the ring: over tcp (eager messages,
    // handed up in UCX's buffer) those that arrive with the ring empty go in place. Over shared
    // memory UCX may take rendezvous, which lands in the ring without a copy anyway.
    if (std::string(GetParam()) == "tcp") {
      EXPECT_GT(inPlace[r], 0u) << "rank " << r;
    }
  }
}

// Direct sends (the executor's path for UCX): slices go straight from the sender's memory when UCX
// completes them at once, the rest through the ring, mixed in one stream; the sender overwrites its
// buffer as soon as sendDirect returns, so a byte UCX read later would arrive wrong. Both ways at
// once, with posted receives, as an All-Reduce runs.
TEST_P(UcxTls, DirectSendsMixWithTheRing) {
  std::string errors[2];
  bool ok[2] = {false, false};
  uint64_t taken[2] = {0, 0}, counted[2] = {0, 0};
  runRanks(2, options(GetParam(), 256 << 10, 32 << 10), [&](int r, Rank& rank) {
    auto* conn = static_cast<UcxConnection*>(rank.conns[1 - r].get());
    testutil::PumpPost post;
    ok[r] = pumpStream(conn, 8 << 20, 70 + r, 71 - r, 13 + r, 100000, &errors[r], {}, 8, &post, &taken[r]);
    counted[r] = conn->sentDirectBytes();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(ok[r]) << "rank " << r << ": " << errors[r];
    EXPECT_EQ(counted[r], taken[r]);
    EXPECT_LT(taken[r], uint64_t{8} << 20) << "some slices should have met a closed window or a busy endpoint";
    // UCX's tcp has an eager short protocol up to its segment size (2 MiB by default here), so
    // it completes sends at once; shared memory's short limit is smaller than most slices.
    if (std::string(GetParam()) == "tcp") {
      EXPECT_GT(taken[r], 0u) << "rank " << r;
    }
  }
}

// Forcing rendezvous turns direct sends off (a rendezvous send holds the caller's memory).
TEST(Ucx, NoDirectSendsWithRendezvous) {
  std::string errors[2];
  bool ok[2] = {false, false};
  uint64_t taken[2] = {0, 0};
  runRanks(2, options("tcp", 256 << 10, 32 << 10, "rndv"), [&](int r, Rank& rank) {
    ok[r] = pumpStream(rank.conns[1 - r].get(), 1 << 20, 80 + r, 81 - r, 17 + r, 100000, &errors[r], {}, 0, nullptr,
                       &taken[r]);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(ok[r]) << "rank " << r << ": " << errors[r];
    EXPECT_EQ(taken[r], 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Tls, UcxTls, ::testing::Values("tcp", "sm", "posix,self,cma"), [](const auto& info) {
  std::string s = info.param;
  for (char& c : s)
    if (c == ',') c = '_';
  return s;
});

// A peer process that exits mid-stream: the survivor's checkHealth fails naming the peer within
// seconds (UCX peer failure over tcp; the pid watch over shared memory), and nothing hangs.
class UcxPeerExit : public ::testing::TestWithParam<const char*> {};

TEST_P(UcxPeerExit, SurvivorGetsAnError) {
  const UcxOptions o = options(GetParam(), 256 << 10, 64 << 10);
  // Forked before this process starts any thread (the rendezvous root's listener): a child of a
  // multi-threaded process may inherit a lock some other thread held (an allocator's: the child
  // of an ASan build once hung for good in its first malloc). The id follows through a pipe.
  int idPipe[2];
  ASSERT_EQ(pipe(idPipe), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Rank 1: connect, send 1 MiB, leave without any teardown.
    close(idPipe[1]);
    collUniqueId id{};
    pollfd ready{idPipe[0], POLLIN, 0};
    if (poll(&ready, 1, 20000) != 1 || read(idPipe[0], &id, sizeof(id)) != static_cast<ssize_t>(sizeof(id))) _exit(2);
    Rank r;
    if (!r.setup(id, 1, 2, o).ok()) _exit(3);
    Connection* c = r.conns[0].get();
    uint64_t sent = 0;
    auto start = std::chrono::steady_clock::now();
    while (sent < (1u << 20) && std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
      auto space = c->sendSpace();
      if (!space.empty()) {
        size_t n = std::min<size_t>(space.size(), (1u << 20) - sent);
        for (size_t i = 0; i < n; ++i) space[i] = std::byte{patternByte(sent + i, 1)};
        c->sendCommit(n);
        sent += n;
      }
      bool progressed = false;
      (void)c->progress(&progressed);
      auto data = c->recvData();
      if (!data.empty()) c->recvConsume(data.size());
    }
    _exit(0);
  }
  close(idPipe[0]);
  // On every way out, failed assertions included: a child left running would keep ctest waiting.
  struct ChildReaper {
    pid_t pid;
    bool reaped = false;
    void reap() {
      if (reaped) return;
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      reaped = true;
    }
    ~ChildReaper() { reap(); }
  } reaper{child};
  collUniqueId id = startRoot();
  ASSERT_EQ(write(idPipe[1], &id, sizeof(id)), static_cast<ssize_t>(sizeof(id)));
  close(idPipe[1]);
  Rank me;
  Status st = me.setup(id, 0, 2, o);
  ASSERT_TRUE(st.ok()) << st.message();
  Connection* c = me.conns[1].get();
  // Expect far more than the child sends: the stream can only end in an error.
  uint64_t received = 0;
  Status health;
  auto start = std::chrono::steady_clock::now();
  auto lastCheck = start;
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(15)) {
    bool progressed = false;
    Status p = c->progress(&progressed);
    ASSERT_TRUE(p.ok()) << "progress fails only on protocol errors: " << p.message();
    auto data = c->recvData();
    if (!data.empty()) {
      for (size_t i = 0; i < data.size(); ++i) {
        ASSERT_EQ(data[i], std::byte{patternByte(received + i, 1)}) << "at " << received + i;
      }
      c->recvConsume(data.size());
      received += data.size();
    }
    if (!reaper.reaped) reaper.reaped = waitpid(child, nullptr, WNOHANG) == child;  // a zombie's pid still exists
    if (std::chrono::steady_clock::now() - lastCheck > std::chrono::milliseconds(100)) {
      lastCheck = std::chrono::steady_clock::now();
      health = c->checkHealth();
      if (!health.ok()) break;
    }
    if (!progressed) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  reaper.reap();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(health.ok()) << "no error " << seconds << " s after the peer exited (received " << received << ")";
  EXPECT_EQ(health.code(), collRemoteError);
  EXPECT_NE(health.message().find("rank 1"), std::string::npos) << health.message();
  EXPECT_LT(seconds, 12.0);
  EXPECT_LE(received, 1u << 20);
}

INSTANTIATE_TEST_SUITE_P(Tls, UcxPeerExit, ::testing::Values("tcp", "sm"));

TEST(Ucx, AvailableHereWithoutRdma) {
  bool rdma = true;
  std::string why;
  EXPECT_TRUE(ucxAvailable(&rdma, &why)) << why;
  // This machine (and CI) has no RDMA device: the automatic choice must stay tcp.
  EXPECT_FALSE(rdma);
}

TEST(Ucx, BadTlsIsAnError) {
  collUniqueId id = startRoot();
  Rank r;
  Status st = r.setup(id, 0, 1, options("no_such_transport", 1 << 20, 1 << 16));
  EXPECT_FALSE(st.ok());
}

TEST(Ucx, BadProtocolIsAnError) {
  collUniqueId id = startRoot();
  Rank r;
  Status st = r.setup(id, 0, 1, options("tcp", 1 << 20, 1 << 16, "fast"));
  EXPECT_EQ(st.code(), collInvalidUsage) << st.message();
}

TEST(Ucx, BadConfigIsAnError) {
  collUniqueId id = startRoot();
  Rank r;
  UcxOptions o = options("tcp", 1 << 20, 1 << 16);
  o.config = "TCP_SNDBUF";
  Status st = r.setup(id, 0, 1, o);
  EXPECT_EQ(st.code(), collInvalidUsage) << st.message();
}

TEST(Ucx, OptionsFromConfig) {
  setenv("COLL_UCX_TLS", "tcp", 1);
  setenv("COLL_UCX_RING_BYTES", "100000", 1);
  setenv("COLL_UCX_MESSAGE_BYTES", "16M", 1);
  UcxOptions o = ucxOptionsFromConfig();
  EXPECT_EQ(o.tls, "tcp");
  EXPECT_EQ(o.ringBytes % 64, 0u);
  EXPECT_GE(o.ringBytes, 100000u);
  EXPECT_LE(o.messageBytes, o.ringBytes);
  unsetenv("COLL_UCX_TLS");
  unsetenv("COLL_UCX_RING_BYTES");
  unsetenv("COLL_UCX_MESSAGE_BYTES");
  o = ucxOptionsFromConfig();
  EXPECT_EQ(o.ringBytes, 4u << 20);
  EXPECT_EQ(o.messageBytes, 1u << 20);
  EXPECT_EQ(o.protocol, "auto");
  EXPECT_NE(o.config.find("SNDBUF"), std::string::npos);
  // A default message fits one tcp segment each way (larger ones are reassembled by UCX in a
  // buffer it allocates per message, which halved the bandwidth).
  for (const char* name : {"TX_SEG_SIZE=", "RX_SEG_SIZE="}) {
    const size_t at = o.config.find(name);
    ASSERT_NE(at, std::string::npos) << o.config;
    const size_t from = at + strlen(name);
    const std::optional<uint64_t> seg = parseBytes(o.config.substr(from, o.config.find(';', from) - from));
    ASSERT_TRUE(seg.has_value()) << o.config;
    EXPECT_GT(*seg, o.messageBytes) << name << " in " << o.config;
  }
}

// UCX's whole configuration as ucp_config_print writes it ("NAME=VALUE" lines, UCX_ prefix dropped).
std::string printedUcxConfig(const UcxOptions& o) {
  ucp_config_t* config = nullptr;
  Status st = buildUcxConfig(o, &config);
  EXPECT_TRUE(st.ok()) << st.message();
  if (!st.ok()) return "";
  char* text = nullptr;
  size_t size = 0;
  FILE* f = open_memstream(&text, &size);
  ucp_config_print(config, f, nullptr, UCS_CONFIG_PRINT_CONFIG);
  fclose(f);
  ucp_config_release(config);
  std::string out(text, size);
  free(text);
  return "\n" + out;
}

// The communicator's class reaches UCX's verbs transports as the context's own IB_TRAFFIC_CLASS
// (which UCX applies over UCX_IB_TRAFFIC_CLASS), replacing one in COLL_UCX_CONFIG; unset, that one
// stays.
TEST(Ucx, TrafficClassIsTheContextsIbTrafficClass) {
  auto settings = [](const std::string& printed) {
    std::vector<std::string> found;
    for (size_t at = printed.find("\nIB_TRAFFIC_CLASS="); at != std::string::npos;
         at = printed.find("\nIB_TRAFFIC_CLASS=", at + 1)) {
      found.push_back(printed.substr(at + 1, printed.find('\n', at + 1) - at - 1));
    }
    return found;
  };
  UcxOptions o = options("tcp", 1 << 20, 1 << 16);
  EXPECT_EQ(settings(printedUcxConfig(o)), std::vector<std::string>{});
  o.trafficClass = 96;
  EXPECT_EQ(settings(printedUcxConfig(o)), std::vector<std::string>{"IB_TRAFFIC_CLASS=96"});
  o.config = "TCP_SNDBUF=1M;IB_TRAFFIC_CLASS=64";
  EXPECT_EQ(settings(printedUcxConfig(o)), std::vector<std::string>{"IB_TRAFFIC_CLASS=96"});
  o.trafficClass = kTrafficClassUnset;
  EXPECT_EQ(settings(printedUcxConfig(o)), std::vector<std::string>{"IB_TRAFFIC_CLASS=64"});
}

}  // namespace
}  // namespace coll

namespace coll {
namespace {

// Between calls a rank's UCX worker is still progressed (UcxNet's idle progress): what its peers
// need from it after its call ended goes on. Seen from the peer: it finishes receiving, then
// closes its endpoint, and the close's flush needs an answer from this rank (over tcp a
// zero-length put and its ack), which is idle, waiting for something else. With idle progress the
// answer comes at once; without, the close waits its full second and then forces the endpoint
// closed (measured here: 1.00 s each time).
TEST(UcxIdleProgress, AnIdleRankStillAnswersItsPeer) {
  collUniqueId id = startRoot();
  Rank ranks[2];
  Status setup[2];
  std::atomic<bool> readerClosed{false};
  std::string error;
  uint64_t received = 0;
  double closeSeconds = 0;
  constexpr uint64_t kBytes = 2u << 20;
  std::thread t[2];
  for (int r = 0; r < 2; ++r) {
    t[r] = std::thread([&, r] {
      setup[r] = ranks[r].setup(id, r, 2, options("tcp", 1u << 20, 64u << 10));
      if (!setup[r].ok()) return;
      Connection* c = ranks[r].conns[1 - r].get();
      UcxNet& net = *ranks[r].net;
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(15);
      net.enterCall();
      if (r == 0) {
        uint64_t sent = 0;
        while ((sent < kBytes || !c->sendsFlushed()) && std::chrono::steady_clock::now() < until) {
          auto space = c->sendSpace();
          const size_t n = std::min<uint64_t>(space.size(), kBytes - sent);
          for (size_t i = 0; i < n; ++i) space[i] = std::byte{patternByte(sent + i, 5)};
          c->sendCommit(n);
          sent += n;
          (void)c->progress(nullptr);
        }
        net.leaveCall();
        // Waiting for something else: this thread no longer touches the worker.
        while (!readerClosed.load() && std::chrono::steady_clock::now() < until) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      } else {
        while (received < kBytes && std::chrono::steady_clock::now() < until) {
          Status st = c->progress(nullptr);
          if (!st.ok()) {
            error = st.message();
            break;
          }
          auto data = c->recvData();
          for (size_t i = 0; i < data.size() && error.empty(); ++i) {
            if (data[i] != std::byte{patternByte(received + i, 5)})
              error = "wrong byte at " + std::to_string(received + i);
          }
          c->recvConsume(data.size());
          received += data.size();
        }
        net.leaveCall();
        const auto start = std::chrono::steady_clock::now();
        ranks[r].teardown();
        closeSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        readerClosed = true;
      }
    });
  }
  for (auto& th : t) th.join();
  ASSERT_TRUE(setup[0].ok() && setup[1].ok()) << setup[0].message() << setup[1].message();
  EXPECT_TRUE(error.empty()) << error;
  EXPECT_EQ(received, kBytes);
  // UCX's own limit is 1 s; a loaded CI machine answers in well under half of it.
  EXPECT_LT(closeSeconds, 0.5) << "the idle rank did not answer the closing peer's flush";
}

}  // namespace
}  // namespace coll
