// collCommGetUniqueId / collCommGrow with thread ranks: old ranks keep their rank and newcomers take
// the ranks after them (checked by an exact all-reduce whose sum names every member), growth after a
// shrink, and the refusals: bad arguments, a grow id without the secret or of another rendezvous, a
// size disagreement, stream work in flight, a newcomer that never comes or dies in the rendezvous;
// the old communicator stays usable after each.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "collective/collective.h"
#include "src/comm/grow.h"
#include "tests/unit/comm_threads.h"

namespace coll {
namespace {

collConfig_t timeoutConfig(int ms) {
  collConfig_t cfg = COLL_CONFIG_INITIALIZER;
  cfg.timeoutMs = ms;
  return cfg;
}

// An exact all-reduce over `comm` where member m contributes 1 << (4m): the sum says exactly which
// ranks took part, whatever the order.
void checkMembers(collComm_t comm, int expectSize, const char* what) {
  int rank = -1, size = -1;
  ASSERT_EQ(collCommUserRank(comm, &rank), collSuccess);
  ASSERT_EQ(collCommCount(comm, &size), collSuccess);
  ASSERT_EQ(size, expectSize) << what;
  const size_t count = 777;
  std::vector<int64_t> send(count), recv(count, -1);
  for (size_t i = 0; i < count; ++i) send[i] = (int64_t{1} << (4 * rank)) * static_cast<int64_t>(i + 1);
  ASSERT_EQ(collAllReduce(send.data(), recv.data(), count, collInt64, collSum, comm, nullptr), collSuccess)
      << what << ", rank " << rank << ": " << collGetLastError(comm);
  int64_t mask = 0;
  for (int m = 0; m < expectSize; ++m) mask += int64_t{1} << (4 * m);
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(recv[i], mask * static_cast<int64_t>(i + 1)) << what << " element " << i;
}

// n old ranks (threads, a communicator with timeoutMs) run oldBody(rank, comm, growId); `newcomers`
// threads run newBody(index, growId) once rank 0 published its grow id (makeId false: nobody makes
// one and growId is never published to newcomers).
struct GrowRun {
  int n = 3;
  int newcomers = 0;
  int timeoutMs = 10000;
  bool makeId = true;
  std::function<void(int, collComm_t, const collUniqueId&)> oldBody;
  std::function<void(int, const collUniqueId&)> newBody;

  void run() {
    std::promise<collUniqueId> grow;
    std::shared_future<collUniqueId> growFuture = grow.get_future().share();
    std::vector<std::thread> newcomerThreads;
    for (int k = 0; k < newcomers; ++k) {
      newcomerThreads.emplace_back([&, k] { newBody(k, growFuture.get()); });
    }
    const collConfig_t cfg = timeoutConfig(timeoutMs);
    testutil::withComms(
        n,
        [&](int r, collComm_t comm) {
          collUniqueId growId;
          memset(&growId, 0, sizeof(growId));
          if (r == 0 && makeId) {
            EXPECT_EQ(collCommGetUniqueId(comm, &growId), collSuccess) << collGetLastError(comm);
            grow.set_value(growId);
          }
          oldBody(r, comm, growId);
        },
        &cfg);
    for (auto& t : newcomerThreads) t.join();
  }
};

// The old ranks' side of a grow that must succeed: grow, check, all-reduce on both communicators.
void growOld(int rank, collComm_t comm, const collUniqueId& growId, int nranks, int oldSize) {
  collComm_t grown = nullptr;
  ASSERT_EQ(collCommGrow(comm, nranks, rank == 0 ? &growId : nullptr, -1, &grown, nullptr), collSuccess)
      << "rank " << rank << ": " << collGetLastError(comm);
  int newRank = -1;
  ASSERT_EQ(collCommUserRank(grown, &newRank), collSuccess);
  EXPECT_EQ(newRank, rank) << "old ranks keep their rank";
  checkMembers(grown, nranks, "grown communicator");
  EXPECT_EQ(collCommDestroy(grown), collSuccess);
  checkMembers(comm, oldSize, "the old communicator after the grow");
}

void growNew(int rank, const collUniqueId& growId, int nranks) {
  collComm_t grown = nullptr;
  ASSERT_EQ(collCommGrow(nullptr, nranks, &growId, rank, &grown, nullptr), collSuccess)
      << "newcomer " << rank << ": " << collGetLastError(nullptr);
  int newRank = -1;
  ASSERT_EQ(collCommUserRank(grown, &newRank), collSuccess);
  EXPECT_EQ(newRank, rank);
  checkMembers(grown, nranks, "grown communicator");
  EXPECT_EQ(collCommDestroy(grown), collSuccess);
}

TEST(Grow, ThreeRanksGrowToFive) {
  GrowRun g;
  g.n = 3, g.newcomers = 2;
  g.oldBody = [](int r, collComm_t comm, const collUniqueId& id) { growOld(r, comm, id, 5, 3); };
  g.newBody = [](int k, const collUniqueId& id) { growNew(3 + k, id, 5); };
  g.run();
}

TEST(Grow, AfterShrinkBackToItsSize) {
  // 4 ranks, rank 3 "fails" (never calls again), the survivors shrink to 3 and grow back to 4.
  GrowRun g;
  g.n = 4, g.makeId = false;
  std::promise<collUniqueId> grow;
  std::shared_future<collUniqueId> growFuture = grow.get_future().share();
  g.oldBody = [&](int r, collComm_t comm, const collUniqueId&) {
    if (r == 3) return;
    const int excluded[] = {3};
    collComm_t shrunk = nullptr;
    ASSERT_EQ(collCommShrink(comm, excluded, 1, &shrunk, nullptr), collSuccess) << collGetLastError(comm);
    checkMembers(shrunk, 3, "shrunk communicator");
    collUniqueId growId;
    if (r == 0) {
      ASSERT_EQ(collCommGetUniqueId(shrunk, &growId), collSuccess) << collGetLastError(shrunk);
      grow.set_value(growId);
    }
    growOld(r, shrunk, growId, 4, 3);
    EXPECT_EQ(collCommDestroy(shrunk), collSuccess);
  };
  std::thread newcomer([&] { growNew(3, growFuture.get(), 4); });
  g.run();
  newcomer.join();
}

TEST(Grow, BadArgumentsRefusedOldCommunicatorUntouched) {
  GrowRun g;
  g.n = 2;
  g.oldBody = [](int r, collComm_t comm, const collUniqueId& growId) {
    collComm_t out = reinterpret_cast<collComm_t>(0x1);
    collUniqueId mine;
    if (r == 1) {
      EXPECT_EQ(collCommGetUniqueId(comm, &mine), collInvalidUsage) << "only rank 0 makes grow ids";
      EXPECT_NE(std::string(collGetLastError(comm)).find("rank 0"), std::string::npos) << collGetLastError(comm);
    }
    EXPECT_EQ(collCommGetUniqueId(comm, nullptr), collInvalidArgument);
    EXPECT_EQ(collCommGrow(comm, 2, nullptr, -1, &out, nullptr), collInvalidArgument) << "nranks must grow";
    EXPECT_EQ(out, nullptr);
    EXPECT_EQ(collCommGrow(comm, 3, nullptr, r, &out, nullptr), collInvalidArgument) << "old ranks pass -1";
    EXPECT_EQ(collCommGrow(comm, 3, nullptr, -1, nullptr, nullptr), collInvalidArgument);
    // Rank 0 without its id: every old rank is told why, none waits for a rendezvous.
    EXPECT_EQ(collCommGrow(comm, 3, nullptr, -1, &out, nullptr), collInvalidArgument);
    if (r == 1) {
      EXPECT_NE(std::string(collGetLastError(comm)).find("rank 0 refused"), std::string::npos);
    }
    // Rank 0 with a plain unique id: refused the same way.
    collUniqueId plain;
    if (r == 0) {
      ASSERT_EQ(collGetUniqueId(&plain), collSuccess);
    }
    EXPECT_EQ(collCommGrow(comm, 3, r == 0 ? &plain : nullptr, -1, &out, nullptr), collInvalidArgument);
    // A grow id in collCommInitRank is refused before any rendezvous.
    if (r == 0) {
      collComm_t other = nullptr;
      EXPECT_EQ(collCommInitRank(&other, 3, growId, 2), collInvalidArgument);
      EXPECT_NE(std::string(collGetLastError(nullptr)).find("grow id"), std::string::npos);
    }
    checkMembers(comm, 2, "the communicator after refused grows");
  };
  g.run();
}

TEST(Grow, NewcomerArgumentsChecked) {
  collUniqueId plain;
  ASSERT_EQ(collGetUniqueId(&plain), collSuccess);
  collComm_t out = nullptr;
  EXPECT_EQ(collCommGrow(nullptr, 3, &plain, 2, &out, nullptr), collInvalidArgument) << "a plain unique id";
  EXPECT_NE(std::string(collGetLastError(nullptr)).find("not a grow id"), std::string::npos);
  EXPECT_EQ(collCommGrow(nullptr, 3, nullptr, 2, &out, nullptr), collInvalidArgument);
  GrowRun g;
  g.n = 2;
  g.oldBody = [](int r, collComm_t comm, const collUniqueId& growId) {
    if (r != 0) return;
    collComm_t newcomer = nullptr;
    EXPECT_EQ(collCommGrow(nullptr, 3, &growId, 1, &newcomer, nullptr), collInvalidArgument)
        << "a newcomer cannot take an old rank";
    EXPECT_EQ(collCommGrow(nullptr, 3, &growId, 3, &newcomer, nullptr), collInvalidArgument) << "nor one past nranks";
    EXPECT_EQ(collCommGrow(nullptr, 2, &growId, 2, &newcomer, nullptr), collInvalidArgument) << "nranks must grow";
    EXPECT_EQ(newcomer, nullptr);
    (void)comm;
  };
  g.run();
}

// A grow id with its secret changed, and one of another rendezvous at the same address (its nonce
// changed): refused at the rendezvous, and the real newcomer still makes a 3-rank communicator.
TEST(Grow, ForgedGrowIdsAddNoRank) {
  GrowRun g;
  g.n = 2, g.newcomers = 1;
  std::atomic<int> refused{0};
  g.oldBody = [](int r, collComm_t comm, const collUniqueId& id) { growOld(r, comm, id, 3, 2); };
  g.newBody = [&](int, const collUniqueId& id) {
    for (int offset : {32, 48}) {  // the secret, the rendezvous nonce (src/oob/bootstrap.cc)
      collUniqueId forged = id;
      forged.internal[offset] ^= 0x5a;
      collConfig_t cfg = timeoutConfig(1500);
      collComm_t intruder = nullptr;
      EXPECT_NE(collCommGrow(nullptr, 3, &forged, 2, &intruder, &cfg), collSuccess) << "offset " << offset;
      EXPECT_EQ(intruder, nullptr);
      refused++;
    }
    growNew(2, id, 3);
  };
  g.run();
  EXPECT_EQ(refused.load(), 2);
}

TEST(Grow, GrowIdServesOneGrow) {
  GrowRun g;
  g.n = 2, g.newcomers = 1;
  g.oldBody = [](int r, collComm_t comm, const collUniqueId& id) {
    growOld(r, comm, id, 3, 2);
    collComm_t again = nullptr;
    EXPECT_EQ(collCommGrow(comm, 3, r == 0 ? &id : nullptr, -1, &again, nullptr), collInvalidArgument);
    EXPECT_NE(std::string(collGetLastError(comm)).find("one grow"), std::string::npos) << collGetLastError(comm);
  };
  g.newBody = [](int, const collUniqueId& id) { growNew(2, id, 3); };
  g.run();
}

TEST(Grow, SizeDisagreementFailsEveryOldRank) {
  GrowRun g;
  g.n = 3;
  g.oldBody = [](int r, collComm_t comm, const collUniqueId& id) {
    collComm_t out = nullptr;
    const int nranks = r == 2 ? 5 : 4;
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(collCommGrow(comm, nranks, r == 0 ? &id : nullptr, -1, &out, nullptr), collInvalidUsage);
    EXPECT_NE(std::string(collGetLastError(comm)).find("rank 2 passed nranks 5"), std::string::npos)
        << collGetLastError(comm);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5)) << "no rendezvous wait";
    checkMembers(comm, 3, "the communicator after a refused grow");
  };
  g.run();
}

TEST(Grow, StreamWorkInFlightRefused) {
  GrowRun g;
  g.n = 2;
  std::atomic<int> refusedOn0{0};
  g.oldBody = [&](int r, collComm_t comm, const collUniqueId& id) {
    collStream_t stream = nullptr;
    ASSERT_EQ(collHostStreamCreate(&stream), collSuccess);
    std::vector<float> data(1 << 16, 1.0f);
    // Rank 1 queues its half only after rank 0's grow was refused: rank 0's all-reduce is still
    // in flight (waiting for rank 1) when it calls collCommGrow.
    if (r == 1) {
      while (refusedOn0.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_EQ(collAllReduce(data.data(), data.data(), data.size(), collFloat32, collSum, comm, stream), collSuccess);
    collComm_t out = nullptr;
    if (r == 0) {
      EXPECT_EQ(collCommGrow(comm, 3, &id, -1, &out, nullptr), collInvalidUsage);
      EXPECT_NE(std::string(collGetLastError(comm)).find("synchronize"), std::string::npos) << collGetLastError(comm);
      refusedOn0 = 1;
    }
    ASSERT_EQ(collHostStreamSynchronize(stream), collSuccess) << collGetLastError(comm);
    EXPECT_EQ(data[0], 2.0f);
    EXPECT_EQ(collHostStreamDestroy(stream), collSuccess);
    checkMembers(comm, 2, "the communicator after a refused grow");
  };
  g.run();
}

// Newcomers that never come, or join the rendezvous and leave before it completes (their
// listener gone, as when the process dies): every old rank's grow fails within its deadline and
// the old communicator works on.
TEST(Grow, MissingOrDeadNewcomerLeavesOldCommunicatorUsable) {
  for (bool joinsThenDies : {false, true}) {
    GrowRun g;
    g.n = 3, g.timeoutMs = 1500, g.newcomers = joinsThenDies ? 1 : 0;
    std::atomic<bool> newcomerGone{false};
    g.oldBody = [&](int r, collComm_t comm, const collUniqueId& id) {
      if (joinsThenDies) {
        while (!newcomerGone.load()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      collComm_t out = nullptr;
      const auto start = std::chrono::steady_clock::now();
      EXPECT_NE(collCommGrow(comm, 4, r == 0 ? &id : nullptr, -1, &out, nullptr), collSuccess) << "rank " << r;
      EXPECT_EQ(out, nullptr);
      EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(8)) << "bounded by the timeout";
      checkMembers(comm, 3, "the old communicator after a failed grow");
    };
    g.newBody = [&](int, const collUniqueId& id) {
      // Registers at the rendezvous, then gives up before the old ranks arrive.
      collConfig_t cfg = timeoutConfig(300);
      collComm_t grown = nullptr;
      EXPECT_NE(collCommGrow(nullptr, 4, &id, 3, &grown, &cfg), collSuccess);
      newcomerGone = true;
    };
    g.run();
  }
}

TEST(GrowWire, AnnouncementRoundTripAndMalformed) {
  GrowAnnouncement a;
  a.code = collInvalidArgument;
  a.nranks = 7;
  a.message = std::string("why\x01not", 7);
  uint8_t wire[kGrowAnnouncementBytes];
  encodeGrowAnnouncement(a, wire);
  GrowAnnouncement b;
  ASSERT_TRUE(decodeGrowAnnouncement(wire, sizeof(wire), &b).ok());
  EXPECT_EQ(b.code, collInvalidArgument);
  EXPECT_EQ(b.nranks, 7u);
  EXPECT_EQ(b.message, "why?not") << "remote text is made printable";
  EXPECT_FALSE(decodeGrowAnnouncement(wire, sizeof(wire) - 1, &b).ok());
  uint8_t bad[kGrowAnnouncementBytes];
  memcpy(bad, wire, sizeof(bad));
  bad[0] ^= 1;
  EXPECT_FALSE(decodeGrowAnnouncement(bad, sizeof(bad), &b).ok()) << "magic";
  memcpy(bad, wire, sizeof(bad));
  bad[4] = static_cast<uint8_t>(collNumResults);
  EXPECT_FALSE(decodeGrowAnnouncement(bad, sizeof(bad), &b).ok()) << "code";
  memcpy(bad, wire, sizeof(bad));
  bad[12 + sizeof(collUniqueId)] = 0xff;
  bad[13 + sizeof(collUniqueId)] = 0xff;
  EXPECT_FALSE(decodeGrowAnnouncement(bad, sizeof(bad), &b).ok()) << "text length";
  a.code = collSuccess;
  a.nranks = 1;
  encodeGrowAnnouncement(a, wire);
  EXPECT_FALSE(decodeGrowAnnouncement(wire, sizeof(wire), &b).ok()) << "a grow to one rank";
}

}  // namespace
}  // namespace coll
