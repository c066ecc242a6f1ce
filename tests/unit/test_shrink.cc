// collCommShrink with thread ranks: survivors build a working communicator without the excluded
// ranks (idle, destroyed or never calling), bad lists are refused, mismatched lists fail on every
// survivor without hanging; and the shrink messages' decoders against malformed bytes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "collective/collective.h"
#include "src/comm/shrink.h"
#include "tests/unit/comm_threads.h"

namespace coll {
namespace {

using testutil::initAll;

collConfig_t timeoutConfig(int ms) {
  collConfig_t cfg = COLL_CONFIG_INITIALIZER;
  cfg.timeoutMs = ms;
  return cfg;
}

// Creates n thread ranks with a parent timeout of timeoutMs; runs body(rank, comm) on each.
void withParent(int n, int timeoutMs, const std::function<void(int, collComm_t)>& body) {
  collUniqueId id;
  ASSERT_EQ(collGetUniqueId(&id), collSuccess) << collGetLastError(nullptr);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      collConfig_t cfg = timeoutConfig(timeoutMs);
      collComm_t comm = nullptr;
      ASSERT_EQ(collCommInitRankConfig(&comm, n, id, r, &cfg), collSuccess) << collGetLastError(nullptr);
      body(r, comm);
      // The parent may have survivors' peers gone: abort never waits for them.
      EXPECT_EQ(collCommAbort(comm), collSuccess) << "rank " << r;
    });
  }
  for (auto& t : threads) t.join();
}

// The survivors' side: shrink, check rank and size, all-reduce exactly on the new communicator.
void shrinkAndCheck(int rank, int n, collComm_t parent, const std::vector<int>& excluded) {
  collComm_t child = nullptr;
  ASSERT_EQ(collCommShrink(parent, excluded.data(), static_cast<int>(excluded.size()), &child, nullptr), collSuccess)
      << "rank " << rank << ": " << collGetLastError(parent);
  std::set<int> ex(excluded.begin(), excluded.end());
  std::vector<int> survivors;
  for (int r = 0; r < n; ++r) {
    if (!ex.count(r)) survivors.push_back(r);
  }
  int newRank = -1, newN = -1;
  ASSERT_EQ(collCommUserRank(child, &newRank), collSuccess);
  ASSERT_EQ(collCommCount(child, &newN), collSuccess);
  EXPECT_EQ(newN, static_cast<int>(survivors.size()));
  EXPECT_EQ(survivors[static_cast<size_t>(newRank)], rank) << "new ranks keep the parent's order";
  // Inputs identify the contributing parent rank: the sum proves exactly the survivors took part.
  const size_t count = 1000;
  for (int iter = 0; iter < 3; ++iter) {
    std::vector<int64_t> send(count), recv(count, -1);
    for (size_t i = 0; i < count; ++i) send[i] = (int64_t{1} << (rank * 4)) * static_cast<int64_t>(i + iter + 1);
    ASSERT_EQ(collAllReduce(send.data(), recv.data(), count, collInt64, collSum, child, nullptr), collSuccess)
        << collGetLastError(child);
    int64_t mask = 0;
    for (int s : survivors) mask += int64_t{1} << (s * 4);
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(recv[i], mask * static_cast<int64_t>(i + iter + 1)) << "rank " << rank << " element " << i;
    }
  }
  EXPECT_EQ(collCommDestroy(child), collSuccess);
}

TEST(Shrink, ExcludedRankStaysIdle) {
  std::atomic<int> done{0};
  withParent(4, 10000, [&](int rank, collComm_t comm) {
    if (rank == 2) {
      // Alive but never calling: nobody may need it.
      while (done.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return;
    }
    shrinkAndCheck(rank, 4, comm, {2});
    done++;
  });
}

TEST(Shrink, ExcludedRankDestroyedFirst) {
  std::atomic<bool> gone{false};
  withParent(4, 10000, [&](int rank, collComm_t comm) {
    if (rank == 3) {
      gone = true;  // withParent aborts it right away: its listener disappears
      return;
    }
    while (!gone.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    shrinkAndCheck(rank, 4, comm, {3});
  });
}

TEST(Shrink, ExcludeTwo) {
  withParent(5, 10000, [&](int rank, collComm_t comm) {
    if (rank == 1 || rank == 3) return;
    shrinkAndCheck(rank, 5, comm, {3, 1});  // any order
  });
}

TEST(Shrink, LeaderRankZeroExcluded) {
  withParent(4, 10000, [&](int rank, collComm_t comm) {
    if (rank == 0) return;
    shrinkAndCheck(rank, 4, comm, {0});
  });
}

TEST(Shrink, NothingExcludedAndRepeated) {
  // Shrinking one parent twice: each round has its own tags.
  withParent(3, 10000, [&](int rank, collComm_t comm) {
    shrinkAndCheck(rank, 3, comm, {});
    if (rank == 1) return;
    shrinkAndCheck(rank, 3, comm, {1});
  });
}

TEST(Shrink, ShrinkOfAShrunkCommunicator) {
  withParent(4, 10000, [&](int rank, collComm_t comm) {
    if (rank == 3) return;
    std::vector<int> ex = {3};
    collComm_t child = nullptr;
    ASSERT_EQ(collCommShrink(comm, ex.data(), 1, &child, nullptr), collSuccess) << collGetLastError(comm);
    if (rank != 0) {
      shrinkAndCheck(rank, 3, child, {0});
    }  // without rank 3 the child's ranks are the parent's
    EXPECT_EQ(collCommAbort(child), collSuccess);
  });
}

TEST(Shrink, InheritsAndOverridesConfig) {
  withParent(2, 7000, [&](int, collComm_t comm) {
    collConfig_t cfg = COLL_CONFIG_INITIALIZER;
    cfg.commName = "elastic";
    collComm_t child = nullptr;
    ASSERT_EQ(collCommShrink(comm, nullptr, 0, &child, &cfg), collSuccess) << collGetLastError(comm);
    int n = 0;
    EXPECT_EQ(collCommCount(child, &n), collSuccess);
    EXPECT_EQ(n, 2);
    EXPECT_EQ(collCommDestroy(child), collSuccess);
  });
}

TEST(Shrink, AfterAFailedCollective) {
  // Rank 3 leaves mid-job: the survivors' next all-reduce fails, and shrink still works on the
  // failed parent (asyncError set).
  withParent(4, 1000, [&](int rank, collComm_t comm) {
    std::vector<float> buf(4096, 1.0f);
    ASSERT_EQ(collAllReduce(buf.data(), buf.data(), buf.size(), collFloat32, collSum, comm, nullptr), collSuccess)
        << collGetLastError(comm);
    if (rank == 3) return;  // withParent aborts it: its connections close
    collResult_t res = collAllReduce(buf.data(), buf.data(), buf.size(), collFloat32, collSum, comm, nullptr);
    EXPECT_NE(res, collSuccess);
    collResult_t async = collSuccess;
    EXPECT_EQ(collCommGetAsyncError(comm, &async), collSuccess);
    shrinkAndCheck(rank, 4, comm, {3});
  });
}

// Waits (bounded) until counter reaches n.
bool awaitCount(const std::atomic<int>& counter, int n) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (counter.load() < n) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

TEST(Shrink, AfterRevoke) {
  std::atomic<int> started{0}, revoked{0};
  withParent(4, 5000, [&](int rank, collComm_t comm) {
    started++;
    if (rank == 2) {
      EXPECT_TRUE(awaitCount(revoked, 3));
      return;
    }
    if (rank == 0) {
      // Every rank must have finished creating the parent: a revoke during another rank's
      // collCommInitRank fails that init instead.
      ASSERT_TRUE(awaitCount(started, 4));
      EXPECT_EQ(collCommRevoke(comm), collSuccess) << collGetLastError(comm);
    }
    revoked++;
    shrinkAndCheck(rank, 4, comm, {2});
  });
}

TEST(Shrink, BadArguments) {
  withParent(3, 10000, [&](int rank, collComm_t comm) {
    collComm_t child = reinterpret_cast<collComm_t>(0x1);
    auto expectBad = [&](const int* list, int count, const char* words) {
      EXPECT_EQ(collCommShrink(comm, list, count, &child, nullptr), collInvalidArgument) << words;
      EXPECT_NE(std::string(collGetLastError(comm)).find(words), std::string::npos) << collGetLastError(comm);
      EXPECT_EQ(child, nullptr);
    };
    const int outOfRange[] = {3};
    const int negative[] = {-1};
    const int dup[] = {(rank + 1) % 3, (rank + 1) % 3};
    const int self[] = {rank};
    const int all[] = {0, 1, 2};
    expectBad(outOfRange, 1, "not a rank");
    expectBad(negative, 1, "not a rank");
    expectBad(dup, 2, "twice");
    expectBad(self, 1, "excludes itself");
    expectBad(all, 3, "every rank");
    expectBad(nullptr, 1, "NULL");
    expectBad(self, -1, "negative");
    EXPECT_EQ(collCommShrink(comm, nullptr, 0, nullptr, nullptr), collInvalidArgument);
    EXPECT_EQ(collCommShrink(nullptr, nullptr, 0, &child, nullptr), collInvalidArgument);
    collConfig_t bad = COLL_CONFIG_INITIALIZER;
    bad.timeoutMs = -5;
    EXPECT_EQ(collCommShrink(comm, nullptr, 0, &child, &bad), collInvalidArgument);
  });
}

TEST(Shrink, MismatchedListsFailEverywhere) {
  // Ranks 0 and 2 exclude {3}; rank 1 excludes {2, 3}. The leader (0) sees the difference and
  // tells every survivor; rank 2 is told too though rank 1 thinks it excluded.
  std::vector<std::string> errors(4);
  std::vector<collResult_t> codes(4, collSuccess);
  auto start = std::chrono::steady_clock::now();
  withParent(4, 1000, [&](int rank, collComm_t comm) {
    if (rank == 3) return;
    std::vector<int> ex = rank == 1 ? std::vector<int>{2, 3} : std::vector<int>{3};
    collComm_t child = nullptr;
    codes[rank] = collCommShrink(comm, ex.data(), static_cast<int>(ex.size()), &child, nullptr);
    errors[rank] = collGetLastError(comm);
    EXPECT_EQ(child, nullptr);
  });
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(sec, 8.0);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(codes[r], collInvalidUsage) << "rank " << r << ": " << errors[r];
    EXPECT_NE(errors[r].find("{2} only in rank 1's list"), std::string::npos) << "rank " << r << ": " << errors[r];
  }
}

TEST(Shrink, DifferentLeadersTimeOutCleanly) {
  // Rank 1 excludes {0, 3} (it leads in its own view); ranks 0 and 2 exclude {3}. Nobody may hang:
  // everybody returns an error within the bounded waits (a few parent timeouts).
  std::vector<collResult_t> codes(4, collSuccess);
  std::vector<std::string> errors(4);
  auto start = std::chrono::steady_clock::now();
  withParent(4, 500, [&](int rank, collComm_t comm) {
    if (rank == 3) return;
    std::vector<int> ex = rank == 1 ? std::vector<int>{0, 3} : std::vector<int>{3};
    collComm_t child = nullptr;
    codes[rank] = collCommShrink(comm, ex.data(), static_cast<int>(ex.size()), &child, nullptr);
    errors[rank] = collGetLastError(comm);
    if (child) (void)collCommAbort(child);
  });
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(sec, 10.0);
  for (int r = 0; r < 3; ++r) EXPECT_NE(codes[r], collSuccess) << "rank " << r;
  EXPECT_NE(errors[0].find("rank 1"), std::string::npos) << errors[0];
}

TEST(Shrink, UnexcludedDeadRankTimesOut) {
  // Rank 3 is gone but the survivors forgot to exclude it: the leader gives up after its wait and
  // says whom to exclude; the others hear it from the leader.
  std::vector<std::string> errors(4);
  std::vector<collResult_t> codes(4, collSuccess);
  withParent(4, 400, [&](int rank, collComm_t comm) {
    if (rank == 3) return;
    collComm_t child = nullptr;
    codes[rank] = collCommShrink(comm, nullptr, 0, &child, nullptr);
    errors[rank] = collGetLastError(comm);
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(codes[r], collTimeout) << errors[r];
    EXPECT_NE(errors[r].find("add it to excludeRanks"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("rank 3"), std::string::npos) << errors[r];
  }
}

TEST(Shrink, RequestDecoderRefusesMalformedBytes) {
  ShrinkRequest r;
  r.seq = 4, r.parentNranks = 8, r.excludeCount = 2, r.digest = shrinkDigest(8, {1, 5}), r.listed = {1, 5};
  std::vector<uint8_t> b = encodeShrinkRequest(r);
  ShrinkRequest out;
  ASSERT_TRUE(decodeShrinkRequest(b.data(), b.size(), 8, &out).ok());
  EXPECT_EQ(out.seq, 4u);
  EXPECT_EQ(out.listed, (std::vector<int32_t>{1, 5}));
  EXPECT_LE(b.size(), shrinkRequestMaxBytes(8));
  EXPECT_FALSE(decodeShrinkRequest(b.data(), b.size(), 9, &out).ok()) << "other nranks";
  for (size_t cut = 0; cut < b.size(); ++cut) EXPECT_FALSE(decodeShrinkRequest(b.data(), cut, 8, &out).ok()) << cut;
  auto bad = [&](ShrinkRequest m) {
    std::vector<uint8_t> e = encodeShrinkRequest(m);
    return !decodeShrinkRequest(e.data(), e.size(), 8, &out).ok();
  };
  ShrinkRequest m = r;
  m.listed = {5, 1};
  EXPECT_TRUE(bad(m)) << "unsorted";
  m.listed = {1, 8};
  EXPECT_TRUE(bad(m)) << "out of range";
  m.listed = {1, 1};
  EXPECT_TRUE(bad(m)) << "duplicate";
  m = r;
  m.excludeCount = 8;
  m.listed.clear();
  EXPECT_TRUE(bad(m)) << "excludes all";
  m = r;
  m.excludeCount = 3;
  EXPECT_TRUE(bad(m)) << "listed differs from the count";
  m = r;
  m.listed.clear();
  EXPECT_FALSE(bad(m)) << "digest only is allowed";
  std::vector<uint8_t> magic = b;
  magic[0] ^= 1;
  EXPECT_FALSE(decodeShrinkRequest(magic.data(), magic.size(), 8, &out).ok());
}

TEST(Shrink, ReplyDecoderRefusesMalformedBytes) {
  ShrinkReply r;
  r.seq = 1, r.code = collSuccess, r.newNranks = 3;
  memset(&r.id, 7, sizeof(r.id));
  std::vector<uint8_t> b = encodeShrinkReply(r);
  ShrinkReply out;
  ASSERT_TRUE(decodeShrinkReply(b.data(), b.size(), 4, &out).ok());
  EXPECT_EQ(memcmp(&out.id, &r.id, sizeof(r.id)), 0);
  EXPECT_FALSE(decodeShrinkReply(b.data(), b.size(), 2, &out).ok()) << "more survivors than ranks";
  for (size_t cut = 0; cut < b.size(); ++cut) EXPECT_FALSE(decodeShrinkReply(b.data(), cut, 4, &out).ok()) << cut;
  r.code = collInvalidUsage, r.newNranks = 0, r.message = "lists differ";
  b = encodeShrinkReply(r);
  ASSERT_TRUE(decodeShrinkReply(b.data(), b.size(), 4, &out).ok());
  EXPECT_EQ(out.message, "lists differ");
  b[8] = 99;  // code
  EXPECT_FALSE(decodeShrinkReply(b.data(), b.size(), 4, &out).ok());
  b[8] = collInProgress;
  EXPECT_FALSE(decodeShrinkReply(b.data(), b.size(), 4, &out).ok());
  b[8] = collInvalidUsage;
  b.push_back('x');  // text longer than announced
  EXPECT_FALSE(decodeShrinkReply(b.data(), b.size(), 4, &out).ok());
  r.message.assign(kShrinkMaxText + 10, 'a');
  b = encodeShrinkReply(r);
  ASSERT_TRUE(decodeShrinkReply(b.data(), b.size(), 4, &out).ok());
  EXPECT_EQ(out.message.size(), kShrinkMaxText) << "encoder truncates";
}

TEST(Shrink, DigestSeparatesLists) {
  EXPECT_NE(shrinkDigest(8, {1}), shrinkDigest(8, {2}));
  EXPECT_NE(shrinkDigest(8, {1}), shrinkDigest(9, {1}));
  EXPECT_NE(shrinkDigest(8, {}), shrinkDigest(8, {0}));
  EXPECT_EQ(shrinkDigest(8, {1, 4}), shrinkDigest(8, {1, 4}));
}

}  // namespace
}  // namespace coll
