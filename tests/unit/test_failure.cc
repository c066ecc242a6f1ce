// Failure detection and propagation with thread ranks: a peer that aborts or stops calling is
// named by every survivor (also ranks not adjacent to it), collCommDump / SIGUSR1 show the op, step
// and waited-for peer, collCommRevoke reaches every rank, and collCommAbort is bounded.
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "collective/collective.h"
#include "src/base/log.h"
#include "src/oob/failure.h"
#include "tests/unit/comm_threads.h"

namespace coll {
namespace {

using testutil::ScopedEnv;
using Ms = std::chrono::milliseconds;

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Thread ranks with a chosen timeout; body(rank, comm) owns the comm's end (destroy or abort):
// it returns true when it has already destroyed/aborted the comm.
void runRanks(int n, int timeoutMs, const std::function<bool(int, collComm_t)>& body) {
  collUniqueId id;
  ASSERT_EQ(collGetUniqueId(&id), collSuccess) << collGetLastError(nullptr);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      collConfig_t config = COLL_CONFIG_INITIALIZER;
      config.timeoutMs = timeoutMs;
      collComm_t comm = nullptr;
      const collResult_t res = collCommInitRankConfig(&comm, n, id, r, &config);
      ASSERT_EQ(res, collSuccess) << "rank " << r << ": " << collGetLastError(nullptr);
      if (!body(r, comm)) {
        EXPECT_EQ(collCommAbort(comm), collSuccess) << "rank " << r;
      }
    });
  }
  for (auto& t : threads) t.join();
}

collResult_t allReduce(collComm_t comm, std::vector<float>& buf) {
  return collAllReduce(buf.data(), buf.data(), buf.size(), collFloat32, collSum, comm, nullptr);
}

std::vector<int> failedRanks(collComm_t comm) {
  int count = -1;
  EXPECT_EQ(collCommGetFailedRanks(comm, nullptr, 0, &count), collSuccess);
  std::vector<int> out(static_cast<size_t>(std::max(count, 0)));
  int again = -1;
  EXPECT_EQ(collCommGetFailedRanks(comm, out.data(), static_cast<int>(out.size()), &again), collSuccess);
  EXPECT_EQ(again, count);
  return out;
}

// Captures log lines (the library's log sink is process-wide).
std::mutex gLogMu;
std::vector<std::string> gLog;
void captureLog(LogLevel, const char* message) {
  std::lock_guard<std::mutex> lock(gLogMu);
  gLog.push_back(message);
}
struct LogCapture {
  LogCapture() {
    std::lock_guard<std::mutex> lock(gLogMu);
    gLog.clear();
    setLogSink(captureLog);
  }
  ~LogCapture() { setLogSink(nullptr); }
  std::string find(const std::string& needle) {
    std::lock_guard<std::mutex> lock(gLogMu);
    for (const std::string& line : gLog) {
      if (line.find(needle) != std::string::npos) return line;
    }
    return std::string();
  }
};

TEST(Failure, GetFailedRanksArguments) {
  int count = 0;
  EXPECT_EQ(collCommGetFailedRanks(nullptr, nullptr, 0, &count), collInvalidArgument);
  testutil::withComms(2, [](int, collComm_t comm) {
    int count = -1;
    EXPECT_EQ(collCommGetFailedRanks(comm, nullptr, 0, nullptr), collInvalidArgument);
    EXPECT_EQ(collCommGetFailedRanks(comm, nullptr, 1, &count), collInvalidArgument);
    EXPECT_EQ(collCommGetFailedRanks(comm, nullptr, -1, &count), collInvalidArgument);
    EXPECT_EQ(collCommGetFailedRanks(comm, nullptr, 0, &count), collSuccess);
    EXPECT_EQ(count, 0);
  });
}

TEST(Failure, WireFormatsRejectBadInput) {
  FailedMessage m;
  std::vector<uint8_t> good = encodeFailed(FailedMessage{3, "connection closed"});
  ASSERT_TRUE(decodeFailed(good.data(), good.size(), 4, &m));
  EXPECT_EQ(m.rank, 3);
  EXPECT_EQ(m.reason, "connection closed");
  EXPECT_FALSE(decodeFailed(good.data(), good.size(), 3, &m));      // rank out of range
  EXPECT_FALSE(decodeFailed(good.data(), good.size() - 1, 4, &m));  // length mismatch
  EXPECT_FALSE(decodeFailed(good.data(), 4, 4, &m));                // truncated
  WaitForAnswer a;
  a.running = true, a.seq = 7, a.waitPeer = 2, a.step = 5, a.idleMs = 10;
  uint8_t wire[kWaitForWire];
  encodeWaitFor(a, wire);
  WaitForAnswer b;
  ASSERT_TRUE(decodeWaitFor(wire, sizeof(wire), 4, &b));
  EXPECT_EQ(b.seq, 7u);
  EXPECT_EQ(b.waitPeer, 2);
  EXPECT_FALSE(decodeWaitFor(wire, sizeof(wire), 2, &b));  // waitPeer out of range
  EXPECT_FALSE(decodeWaitFor(wire, sizeof(wire) - 1, 4, &b));
  EXPECT_EQ(hostOfAddress("198.18.0.4:5000"), "198.18.0.4");
  EXPECT_EQ(hostOfAddress("[2001:2::1]:5000"), "2001:2::1");
}

TEST(Failure, RelayWireRejectsBadInput) {
  RelayMessage m{5, kCtlTagFailed, encodeFailed(FailedMessage{3, "gone"})};
  const std::vector<uint8_t> good = encodeRelay(m);
  RelayMessage got;
  ASSERT_TRUE(decodeRelay(good.data(), good.size(), 8, &got));
  EXPECT_EQ(got.origin, 5);
  EXPECT_EQ(got.tag, kCtlTagFailed);
  EXPECT_EQ(got.payload, m.payload);
  EXPECT_FALSE(decodeRelay(good.data(), good.size(), 5, &got));      // origin out of range
  EXPECT_FALSE(decodeRelay(good.data(), good.size() - 1, 8, &got));  // length mismatch
  EXPECT_FALSE(decodeRelay(good.data(), 8, 8, &got));                // truncated header
  std::vector<uint8_t> bad = encodeRelay(RelayMessage{1, kCtlTagWaitFor, {}});
  EXPECT_FALSE(decodeRelay(bad.data(), bad.size(), 8, &got));  // a query is not a notice
  bad = encodeRelay(RelayMessage{1, kCtlTagRevoked, {1}});
  EXPECT_FALSE(decodeRelay(bad.data(), bad.size(), 8, &got));  // REVOKED carries nothing
  bad = encodeRelay(RelayMessage{1, kCtlTagCycle, std::vector<uint8_t>(kCtlMaxReason + 1, 'x')});
  EXPECT_FALSE(decodeRelay(bad.data(), bad.size(), 8, &got));
}

TEST(Failure, HeartbeatWireRejectsBadInput) {
  uint8_t wire[kHeartbeatWire];
  HeartbeatKind kind;
  encodeHeartbeat(HeartbeatKind::Leaving, wire);
  ASSERT_TRUE(decodeHeartbeat(wire, sizeof(wire), &kind));
  EXPECT_EQ(kind, HeartbeatKind::Leaving);
  EXPECT_FALSE(decodeHeartbeat(wire, sizeof(wire) - 1, &kind));
  wire[0] = 3;
  EXPECT_FALSE(decodeHeartbeat(wire, sizeof(wire), &kind));
}

// With a fast heartbeat, ranks that destroy their communicator seconds apart (and one that
// aborts) are not blamed by those still running: they said LEAVING. Without it, the later ranks
// would name the early ones after 0.6 s.
TEST(Failure, HeartbeatDoesNotBlameRanksThatLeaveEarly) {
  ScopedEnv interval("COLL_HEARTBEAT_MS", "100");
  ScopedEnv timeout("COLL_HEARTBEAT_TIMEOUT_MS", "600");
  ScopedEnv fanout("COLL_NOTICE_FANOUT", "2");  // rank 0 watches 1 and 2, rank 1 watches 3 and 4
  runRanks(6, 10000, [&](int rank, collComm_t comm) {
    std::vector<float> buf(1024, 1.0f);
    EXPECT_EQ(allReduce(comm, buf), collSuccess) << collGetLastError(comm);
    if (rank == 1 || rank == 4) {  // a parent and a leaf leave first
      EXPECT_EQ(rank == 1 ? collCommDestroy(comm) : collCommAbort(comm), collSuccess);
      return true;
    }
    std::this_thread::sleep_for(Ms(1500));
    collResult_t async = collInternalError;
    EXPECT_EQ(collCommGetAsyncError(comm, &async), collSuccess);
    EXPECT_EQ(async, collSuccess) << "rank " << rank << ": " << collGetLastError(comm);
    EXPECT_TRUE(failedRanks(comm).empty()) << "rank " << rank;
    EXPECT_EQ(collCommDestroy(comm), collSuccess);
    return true;
  });
}

// Walks a notice down the tree as the ranks would (each told rank tells its children, covering
// for skipped ones) and returns how many messages each rank sent; every rank not skipped must be
// told exactly once.
std::vector<int> walkNoticeTree(int origin, int n, int fanout, const std::function<bool(int)>& gone) {
  std::vector<int> sent(static_cast<size_t>(n), 0), told(static_cast<size_t>(n), 0);
  std::vector<int> frontier{origin}, children, targets;
  told[static_cast<size_t>(origin)] = 1;
  while (!frontier.empty()) {
    std::vector<int> next;
    for (int r : frontier) {
      noticeTreeChildren(origin, r, n, fanout, &children);
      targets.clear();
      expandNoticeTargets(origin, n, fanout, children, gone, &targets);
      sent[static_cast<size_t>(r)] += static_cast<int>(targets.size());
      for (int t : targets) {
        told[static_cast<size_t>(t)]++;
        next.push_back(t);
      }
    }
    frontier = std::move(next);
  }
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(told[static_cast<size_t>(r)], gone(r) ? 0 : 1) << "rank " << r << " of " << n << ", origin " << origin;
  }
  return sent;
}

TEST(Failure, NoticeTreeReachesEveryRankOnceWithBoundedFanout) {
  for (int n : {1, 2, 3, 9, 33, 100, 1000, 102400}) {
    for (int fanout : {1, 2, 8, 32}) {
      if (n > 1000 && fanout < 8) continue;  // a chain of 100k hops proves nothing more
      const int origin = n / 3;
      const std::vector<int> sent = walkNoticeTree(origin, n, fanout, [](int) { return false; });
      EXPECT_LE(*std::max_element(sent.begin(), sent.end()), fanout) << n << " ranks, fan-out " << fanout;
      EXPECT_EQ(std::accumulate(sent.begin(), sent.end(), 0), n - 1);
    }
  }
  // Each rank's parent is the rank whose children include it (the heartbeat's tree).
  std::vector<int> children;
  for (int n : {1, 7, 100, 1000}) {
    for (int fanout : {1, 3, 32}) {
      EXPECT_EQ(noticeTreeParent(4 % n, 4 % n, n, fanout), -1);
      for (int r = 0; r < n; ++r) {
        const int parent = noticeTreeParent(4 % n, r, n, fanout);
        if (parent < 0) continue;
        noticeTreeChildren(4 % n, parent, n, fanout, &children);
        EXPECT_NE(std::find(children.begin(), children.end(), r), children.end()) << r << " of " << n;
      }
    }
  }
  // The flat tree: the origin tells everyone.
  const std::vector<int> flat = walkNoticeTree(2, 20, 32, [](int) { return false; });
  EXPECT_EQ(flat[2], 19);
  // Failed ranks (and the subject) are skipped; their children are told by whoever would have
  // told them, so only their parents send more.
  const int n = 4096, fanout = 8;
  auto gone = [](int r) { return r % 97 == 5; };
  const std::vector<int> sent = walkNoticeTree(17, n, fanout, gone);
  EXPECT_LE(*std::max_element(sent.begin(), sent.end()), fanout * fanout);
}

// One rank aborts while the others keep calling: every survivor fails naming it and lists it,
// faster than its own timeout (the detecting neighbours tell everyone).
void peerAbortTest(const char* transport, int n, int victim, int timeoutMs, double limitSeconds) {
  ScopedEnv env("COLL_TRANSPORT", transport);
  std::atomic<bool> aborted{false};
  runRanks(n, timeoutMs, [&](int rank, collComm_t comm) {
    std::vector<float> buf(4096, 1.0f);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(allReduce(comm, buf), collSuccess) << collGetLastError(comm);
    if (rank == victim) {
      std::this_thread::sleep_for(Ms(100));
      EXPECT_EQ(collCommAbort(comm), collSuccess);
      aborted = true;
      return true;
    }
    const auto t0 = std::chrono::steady_clock::now();
    collResult_t res = collSuccess;
    for (int i = 0; i < 1000 && res == collSuccess; ++i) res = allReduce(comm, buf);
    const double took = secondsSince(t0);
    const std::string msg = collGetLastError(comm);
    EXPECT_TRUE(res == collRemoteError || res == collTimeout) << "rank " << rank << ": " << res << " " << msg;
    EXPECT_NE(msg.find("rank " + std::to_string(victim)), std::string::npos) << "rank " << rank << ": " << msg;
    EXPECT_EQ(failedRanks(comm), std::vector<int>{victim}) << "rank " << rank << ": " << msg;
    EXPECT_LT(took, limitSeconds) << "rank " << rank << ": " << msg;
    // Later calls fail at once, naming the failed rank.
    EXPECT_EQ(allReduce(comm, buf), collRemoteError);
    EXPECT_NE(std::string(collGetLastError(comm)).find("rank " + std::to_string(victim)), std::string::npos);
    return false;
  });
  EXPECT_TRUE(aborted.load());
}

TEST(Failure, PeerAbortPropagatesTcp) { peerAbortTest("tcp", 4, 2, 8000, 4.0); }

// Over shared memory an aborted thread rank leaves no trace (same pid): the survivors' timeout
// follows the wait-for chain to it (its listener is gone) within 2 x the timeout.
TEST(Failure, PeerAbortFoundByWaitForChainShm) { peerAbortTest("shm", 4, 1, 1500, 3.0 + 1.0); }

// A rank that stops calling (stuck in its own code) is named by everyone within 2 x the timeout;
// when it comes back its call fails at once, saying it was declared failed.
TEST(Failure, StalledRankNamedWithinTwiceTimeout) {
  constexpr int kTimeoutMs = 2000, kVictim = 3;
  std::atomic<int> survivorsDone{0};
  std::atomic<bool> victimDone{false};
  runRanks(5, kTimeoutMs, [&](int rank, collComm_t comm) {
    std::vector<float> buf(1024, 1.0f);
    EXPECT_EQ(allReduce(comm, buf), collSuccess) << collGetLastError(comm);
    if (rank == kVictim) {
      while (survivorsDone.load() < 4) std::this_thread::sleep_for(Ms(10));
      // The detector tells the failed rank last, after everyone else.
      const auto t0 = std::chrono::steady_clock::now();
      while (failedRanks(comm).empty() && secondsSince(t0) < 10) std::this_thread::sleep_for(Ms(10));
      EXPECT_EQ(failedRanks(comm), std::vector<int>{kVictim});
      EXPECT_EQ(allReduce(comm, buf), collRemoteError);
      EXPECT_NE(std::string(collGetLastError(comm)).find("rank 3"), std::string::npos) << collGetLastError(comm);
      victimDone = true;
      return false;
    }
    const auto t0 = std::chrono::steady_clock::now();
    const collResult_t res = allReduce(comm, buf);
    const double took = secondsSince(t0);
    const std::string msg = collGetLastError(comm);
    EXPECT_TRUE(res == collRemoteError || res == collTimeout) << res << " " << msg;
    EXPECT_NE(msg.find("rank 3"), std::string::npos) << "rank " << rank << ": " << msg;
    EXPECT_NE(msg.find("pid"), std::string::npos) << "rank " << rank << ": " << msg;
    EXPECT_EQ(failedRanks(comm), std::vector<int>{kVictim}) << "rank " << rank << ": " << msg;
    EXPECT_LT(took, 2.0 * kTimeoutMs / 1000.0) << "rank " << rank << ": " << msg;
    survivorsDone++;
    // The survivors stay until the victim has looked: an aborting rank gives its notices in
    // flight only a short grace (tested by fault.stall_abort), and this test is about the notice
    // reaching the victim, not about racing an abort on a loaded machine.
    const auto w0 = std::chrono::steady_clock::now();
    while (!victimDone.load() && secondsSince(w0) < 15) std::this_thread::sleep_for(Ms(10));
    return false;
  });
}

// Both ranks receive from each other: nobody failed, the wait-for chain loops. collTimeout names
// the cycle and nobody is recorded failed.
TEST(Failure, WaitForCycleIsReportedAsMismatch) {
  runRanks(2, 1000, [&](int rank, collComm_t comm) {
    std::vector<float> buf(64);
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(collRecv(buf.data(), buf.size(), collFloat32, 1 - rank, comm, nullptr), collTimeout);
    EXPECT_LT(secondsSince(t0), 2.0);
    const std::string msg = collGetLastError(comm);
    // Found here, or by the other rank first and passed on.
    const bool here = msg.find("cycle: " + std::to_string(rank) + " -> " + std::to_string(1 - rank) + " -> " +
                               std::to_string(rank)) != std::string::npos;
    const bool there = msg.find("rank " + std::to_string(1 - rank) +
                                " found the ranks waiting for each other in a "
                                "cycle: " +
                                std::to_string(1 - rank) + " -> " + std::to_string(rank)) != std::string::npos;
    EXPECT_TRUE(here || there) << msg;
    EXPECT_TRUE(failedRanks(comm).empty()) << msg;
    return false;
  });
}

TEST(Failure, DumpOfIdleCommunicator) {
  LogCapture log;
  testutil::withComms(2, [](int, collComm_t comm) { EXPECT_EQ(collCommDump(comm), collSuccess); });
  EXPECT_NE(log.find("idle (last call"), "");
}

TEST(Failure, DumpShowsOperationStepAndWaitedPeer) {
  LogCapture log;
  std::atomic<bool> dumped{false};
  runRanks(2, 20000, [&](int rank, collComm_t comm) {
    std::vector<float> buf(1024, 1.0f);
    if (rank == 1) {
      // Joins only once rank 0's dump has shown it waiting (or after 10 s: the checks below fail).
      for (int i = 0; i < 1000 && !dumped.load(); ++i) std::this_thread::sleep_for(Ms(10));
    } else {
      std::thread dumper([&] {
        // On a loaded machine rank 0 may not be in its call yet: dump until it is seen waiting.
        for (int i = 0; i < 40 && log.find("waits for rank 1").empty(); ++i) {
          std::this_thread::sleep_for(Ms(200));
          EXPECT_EQ(collCommDump(comm), collSuccess);
        }
        dumped = true;
      });
      EXPECT_EQ(allReduce(comm, buf), collSuccess) << collGetLastError(comm);
      dumper.join();
      return false;
    }
    EXPECT_EQ(allReduce(comm, buf), collSuccess) << collGetLastError(comm);
    return false;
  });
  const std::string dump = log.find("waits for rank 1");
  ASSERT_FALSE(dump.empty());
  EXPECT_NE(dump.find("dump (collCommDump)"), std::string::npos) << dump;
  EXPECT_NE(dump.find("in allreduce (count 1024"), std::string::npos) << dump;
  EXPECT_NE(dump.find(", call "), std::string::npos) << dump;
  EXPECT_NE(dump.find("step"), std::string::npos) << dump;
}

TEST(Failure, SignalDump) {
  ScopedEnv env("COLL_DUMP_ON_SIGNAL", "1");
  LogCapture log;
  runRanks(2, 10000, [&](int rank, collComm_t comm) {
    std::vector<float> buf(256, 1.0f);
    if (rank == 1) {
      std::this_thread::sleep_for(Ms(300));
      raise(SIGUSR1);
      std::this_thread::sleep_for(Ms(300));
    }
    EXPECT_EQ(allReduce(comm, buf), collSuccess) << collGetLastError(comm);
    return false;
  });
  const std::string dump = log.find("dump (SIGUSR1)");
  ASSERT_FALSE(dump.empty());
  EXPECT_NE(log.find("dump (SIGUSR1) of communicator"), "");
}

void revokeReachesEveryRank(int n) {
  runRanks(n, 10000, [&](int rank, collComm_t comm) {
    std::vector<float> buf(1024, 1.0f);
    EXPECT_EQ(allReduce(comm, buf), collSuccess) << collGetLastError(comm);
    if (rank == 0) {
      std::this_thread::sleep_for(Ms(200));
      EXPECT_EQ(collCommRevoke(comm), collSuccess);
      EXPECT_EQ(collCommRevoke(comm), collSuccess);  // idempotent
    } else {
      const auto t0 = std::chrono::steady_clock::now();
      EXPECT_EQ(allReduce(comm, buf), collRemoteError);
      EXPECT_LT(secondsSince(t0), 3.0);
      EXPECT_NE(std::string(collGetLastError(comm)).find("revoked by rank 0"), std::string::npos)
          << collGetLastError(comm);
    }
    EXPECT_EQ(allReduce(comm, buf), collRemoteError);
    EXPECT_NE(std::string(collGetLastError(comm)).find("revoked"), std::string::npos) << collGetLastError(comm);
    EXPECT_TRUE(failedRanks(comm).empty());
    if (rank == 2) {
      EXPECT_EQ(collCommDestroy(comm), collSuccess);
      return true;
    }
    return false;
  });
}

TEST(Failure, RevokeReachesEveryRank) { revokeReachesEveryRank(3); }

// Down a notice tree of fan-out 2 (four levels at 12 ranks): every rank names the revoking rank,
// not the rank that passed the notice on.
TEST(Failure, RevokeReachesEveryRankDownTheNoticeTree) {
  ScopedEnv fanout("COLL_NOTICE_FANOUT", "2");
  revokeReachesEveryRank(12);
}

// Over tcp with a notice tree of fan-out 2: the detecting neighbours' notices reach every rank,
// also those below the aborted rank in the tree (its parent covers for it).
TEST(Failure, PeerAbortPropagatesDownTheNoticeTreeTcp) {
  ScopedEnv fanout("COLL_NOTICE_FANOUT", "2");
  peerAbortTest("tcp", 10, 1, 8000, 4.0);
}

// Abort returns promptly with a stalled peer, a call in flight on the progress thread and more
// queued behind it; the stream reports the abort.
void abortBoundedTest(const char* transport) {
  ScopedEnv env("COLL_TRANSPORT", transport);
  std::atomic<int> abortedRanks{0};
  runRanks(3, 30000, [&](int rank, collComm_t comm) {
    if (rank == 2) {
      while (abortedRanks.load() < 2) std::this_thread::sleep_for(Ms(10));
      return false;
    }
    collStream_t stream = nullptr;
    EXPECT_EQ(collHostStreamCreate(&stream), collSuccess);
    std::vector<std::vector<float>> bufs(4, std::vector<float>(1 << 16, 1.0f));
    for (auto& b : bufs) {
      EXPECT_EQ(collAllReduce(b.data(), b.data(), b.size(), collFloat32, collSum, comm, stream), collSuccess);
    }
    std::this_thread::sleep_for(Ms(300));
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(collCommAbort(comm), collSuccess);
    EXPECT_LT(secondsSince(t0), 2.0);
    abortedRanks++;
    EXPECT_NE(collHostStreamSynchronize(stream), collSuccess);
    EXPECT_EQ(collHostStreamDestroy(stream), collSuccess);
    return true;
  });
}

TEST(Failure, AbortBoundedWithStalledPeerAndQueuedWorkShm) { abortBoundedTest("shm"); }
// Over tcp the call in flight may be connecting to the stalled peer (which accepts but never
// answers): abort must break that wait too.
TEST(Failure, AbortBoundedWithStalledPeerAndQueuedWorkTcp) { abortBoundedTest("tcp"); }

}  // namespace
}  // namespace coll
