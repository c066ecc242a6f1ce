// COLL_CHECK=1: a mismatch of each kind (collective, count, datatype, op, root) is collInvalidUsage
// on every rank, naming the ranks on each side and what differs, and leaves the communicator usable.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "collective/collective.h"
#include "tests/unit/comm_threads.h"

namespace coll {
namespace {

using testutil::ScopedEnv;
using testutil::withComms;

constexpr int kRanks = 4;
constexpr int kOdd = 2;  // the rank that calls differently
constexpr size_t kCount = 64;

// Runs `call` on every rank with COLL_CHECK=1 and expects the mismatch error naming `what`, the
// agreeing ranks, the odd rank and both calls; then checks that an agreeing all-reduce still runs.
void expectMismatch(
    const char* what, const std::vector<std::string>& mentions,
    const std::function<collResult_t(int, collComm_t, std::vector<int32_t>&, std::vector<int32_t>&)>& call) {
  ScopedEnv check("COLL_CHECK", "1");
  withComms(kRanks, [&](int rank, collComm_t comm) {
    std::vector<int32_t> in(kCount * kRanks, rank + 1), out(kCount * kRanks, -7);
    EXPECT_EQ(call(rank, comm, in, out), collInvalidUsage) << "rank " << rank;
    const std::string msg = collGetLastError(comm);
    EXPECT_NE(msg.find(std::string("disagree on the ") + what + ":"), std::string::npos) << msg;
    EXPECT_NE(msg.find("ranks 0-1,3 called"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 2 called"), std::string::npos) << msg;
    for (const std::string& m : mentions) EXPECT_NE(msg.find(m), std::string::npos) << "'" << m << "' in " << msg;
    for (int32_t v : out) ASSERT_EQ(v, -7) << "a mismatched call must not touch the buffers";
    // The check runs before any data moves: the communicator is still good.
    ASSERT_EQ(collAllReduce(in.data(), out.data(), kCount, collInt32, collSum, comm, nullptr), collSuccess)
        << collGetLastError(comm);
    EXPECT_EQ(out[0], kRanks * (kRanks + 1) / 2);
  });
}

TEST(CollCheck, CollectiveMismatchNamesBothCalls) {
  expectMismatch("collective", {"allreduce(count 64, int32, op sum)", "allgather(count 64, int32)"},
                 [](int rank, collComm_t comm, std::vector<int32_t>& in, std::vector<int32_t>& out) {
                   if (rank == kOdd) return collAllGather(in.data(), out.data(), kCount, collInt32, comm, nullptr);
                   return collAllReduce(in.data(), out.data(), kCount, collInt32, collSum, comm, nullptr);
                 });
}

TEST(CollCheck, CountMismatch) {
  expectMismatch("count", {"allgather(count 64, int32)", "allgather(count 32, int32)"},
                 [](int rank, collComm_t comm, std::vector<int32_t>& in, std::vector<int32_t>& out) {
                   return collAllGather(in.data(), out.data(), rank == kOdd ? kCount / 2 : kCount, collInt32, comm,
                                        nullptr);
                 });
}

TEST(CollCheck, DatatypeMismatch) {
  expectMismatch("datatype", {"allreduce(count 64, int32, op sum)", "allreduce(count 64, float32, op sum)"},
                 [](int rank, collComm_t comm, std::vector<int32_t>& in, std::vector<int32_t>& out) {
                   return collAllReduce(in.data(), out.data(), kCount, rank == kOdd ? collFloat32 : collInt32, collSum,
                                        comm, nullptr);
                 });
}

TEST(CollCheck, ReductionOpMismatch) {
  expectMismatch("reduction op", {"reducescatter(count 64, int32, op sum)", "reducescatter(count 64, int32, op max)"},
                 [](int rank, collComm_t comm, std::vector<int32_t>& in, std::vector<int32_t>& out) {
                   return collReduceScatter(in.data(), out.data(), kCount, collInt32, rank == kOdd ? collMax : collSum,
                                            comm, nullptr);
                 });
}

TEST(CollCheck, RootMismatch) {
  expectMismatch("root", {"broadcast(count 64, int32, root 0)", "broadcast(count 64, int32, root 3)"},
                 [](int rank, collComm_t comm, std::vector<int32_t>& in, std::vector<int32_t>& out) {
                   (void)in;
                   return collBroadcast(out.data(), out.data(), kCount, collInt32, rank == kOdd ? 3 : 0, comm, nullptr);
                 });
}

// Several fields at once are all named; a reduce's op and root are both part of the call.
TEST(CollCheck, SeveralDifferencesAreAllNamed) {
  expectMismatch("count and reduction op and root",
                 {"reduce(count 64, int32, op sum, root 1)", "reduce(count 16, int32, op min, root 0)"},
                 [](int rank, collComm_t comm, std::vector<int32_t>& in, std::vector<int32_t>& out) {
                   const bool odd = rank == kOdd;
                   return collReduce(in.data(), out.data(), odd ? 16 : kCount, collInt32, odd ? collMin : collSum,
                                     odd ? 0 : 1, comm, nullptr);
                 });
}

// Matching calls pass the check, including arguments a collective ignores (a broadcast's op does
// not exist; an all-gather has no root), and calls inside a group.
TEST(CollCheck, AgreeingCallsRunAndIgnoredArgumentsDoNotCount) {
  ScopedEnv check("COLL_CHECK", "1");
  withComms(3, [](int rank, collComm_t comm) {
    std::vector<int32_t> buf(96, rank), out(96, -1);
    ASSERT_EQ(collBroadcast(buf.data(), buf.data(), 32, collInt32, 1, comm, nullptr), collSuccess)
        << collGetLastError(comm);
    EXPECT_EQ(buf[0], 1);
    ASSERT_EQ(collAllGather(buf.data(), out.data(), 32, collInt32, comm, nullptr), collSuccess);
    ASSERT_EQ(collGroupStart(), collSuccess);
    EXPECT_EQ(collAllReduce(buf.data(), out.data(), 16, collInt32, collSum, comm, nullptr), collSuccess);
    EXPECT_EQ(collAllReduce(buf.data() + 32, out.data() + 32, 16, collInt32, collMax, comm, nullptr), collSuccess);
    ASSERT_EQ(collGroupEnd(), collSuccess) << collGetLastError(comm);
    EXPECT_EQ(out[0], 3);
    EXPECT_EQ(out[32], 2);  // the broadcast covered only the first 32 elements
  });
}

// A mismatch inside a group is caught at GroupEnd with the same message.
TEST(CollCheck, MismatchInsideAGroup) {
  ScopedEnv check("COLL_CHECK", "1");
  withComms(3, [](int rank, collComm_t comm) {
    std::vector<int32_t> buf(64, rank), out(64, -1);
    ASSERT_EQ(collGroupStart(), collSuccess);
    (void)collAllReduce(buf.data(), out.data(), 16, collInt32, collSum, comm, nullptr);
    (void)collAllReduce(buf.data() + 32, out.data() + 32, rank == 1 ? 8 : 16, collInt32, collSum, comm, nullptr);
    EXPECT_EQ(collGroupEnd(), collInvalidUsage);
    const std::string msg = collGetLastError(comm);
    EXPECT_NE(msg.find("disagree on the count: ranks 0,2 called allreduce(count 16"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 1 called allreduce(count 8"), std::string::npos) << msg;
  });
}

}  // namespace
}  // namespace coll
