// collCommShrink: a communicator of a parent's surviving ranks, agreed over the parent's bootstrap
// with point-to-point messages only, so the excluded ranks (dead or stalled) are never needed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collective/collective.h"
#include "src/base/status.h"
#include "src/comm/comm.h"

namespace coll {

class Bootstrap;

// Bootstrap tags of shrink messages: "SR" plus the parent's shrink number (low 16 bits), so a job
// can shrink one parent repeatedly and a late message of an earlier attempt is never mistaken.
constexpr uint32_t kShrinkTagBase = 0x53520000u;
inline uint32_t shrinkTag(uint32_t seq) { return kShrinkTagBase | (seq & 0xffffu); }

// The survivors' rendezvous has a root per kShrinkRanksPerRoot new ranks (shrinkRootCount), each
// started by the first survivor of its block (Bootstrap::create with several ids), so no process
// handles more than a block's registrations.
constexpr int kShrinkRanksPerRoot = 256;
inline int shrinkRootCount(int survivors) { return (survivors + kShrinkRanksPerRoot - 1) / kShrinkRanksPerRoot; }

// The longest exclude list carried in full (longer ones travel as a digest only, so the error for a
// mismatch cannot name the ranks), and the longest error text a leader sends.
constexpr uint32_t kShrinkMaxListed = 1u << 16;
constexpr uint32_t kShrinkMaxText = 2048;

// Checks excludeRanks for a caller that is rank `rank` of `nranks` and returns them sorted.
// collInvalidArgument for NULL with a count, a negative count, ranks out of range, duplicates,
// excluding the caller itself or every rank.
Status checkExcludeList(int nranks, int rank, const int* excludeRanks, int excludeCount, std::vector<int>* sorted);

// Builds the survivors' communicator (rank = index among the survivors, in parent-rank order) with
// `config`. Every survivor calls it with the same list; the excluded ranks take no part.
Status shrinkComm(Comm& parent, const int* excludeRanks, int excludeCount, const CommConfig& config,
                  std::unique_ptr<Comm>* out);

// The agreement alone, over any bootstrap (collCommShrink runs it on the parent's): every survivor
// calls it with the same sorted, checked `excluded` (checkExcludeList) and the same `seq`; the
// excluded ranks take no part. Requests go up an 8-ary tree of the survivors in parent order, each
// rank checking its children's lists against its own, and the first survivor of each block starting
// its root of the survivors' rendezvous on the way up; the leader (the lowest survivor) decides,
// and its answer (every root's id, or why not) comes back down the tree. No rank sends or receives more than 9 messages. On success
// `out` holds the roots' ids, the survivors' count and this rank's place among them (its rank in
// parent order): all the new communicator's ranks need.
// The unit test of 1,024 thread ranks runs it without communicators (tests/unit/test_shrink.cc).
struct ShrinkAgreement {
  std::vector<collUniqueId> ids;  // the survivors' rendezvous roots, block by block
  int newNranks = 0;
  int newRank = -1;
};
Status agreeShrink(Bootstrap& bs, uint32_t seq, int64_t timeoutMs, const std::vector<int>& excluded,
                   ShrinkAgreement* out);

// Wire formats (little-endian), exposed for the unit and fuzz tests. A survivor sends its parent in
// the agreement's tree a request: its list and what its subtree found wrong; the leader's reply
// (the new unique id, or why not) goes back down the tree unchanged.
struct ShrinkRequest {
  uint32_t seq = 0;
  uint32_t parentNranks = 0;
  uint32_t excludeCount = 0;
  uint64_t digest = 0;          // of the sorted list (shrinkDigest)
  std::vector<int32_t> listed;  // the sorted list, or empty when longer than kShrinkMaxListed
  // The sender's subtree: how many problems it found (0: none), the first one's code and text.
  collResult_t code = collSuccess;
  uint32_t problems = 0;
  std::string message;
  // The rendezvous roots started in the sender's subtree, by rising block.
  struct Root {
    uint32_t block = 0;
    collUniqueId id{};
  };
  std::vector<Root> roots;
};
struct ShrinkReply {
  uint32_t seq = 0;
  collResult_t code = collSuccess;
  uint32_t newNranks = 0;
  std::vector<collUniqueId> ids;  // success: shrinkRootCount(newNranks) roots, block by block
  std::string message;            // why not (code != collSuccess)
};
uint64_t shrinkDigest(int nranks, const std::vector<int>& sortedExcluded);
std::vector<uint8_t> encodeShrinkRequest(const ShrinkRequest& r);
// Every field is checked against the parent's nranks (remote bytes); the reason on failure.
Status decodeShrinkRequest(const uint8_t* data, size_t size, int parentNranks, ShrinkRequest* out);
std::vector<uint8_t> encodeShrinkReply(const ShrinkReply& r);
Status decodeShrinkReply(const uint8_t* data, size_t size, int parentNranks, ShrinkReply* out);
// The largest encoded request for an nranks-rank parent (recv's bound).
size_t shrinkRequestMaxBytes(int nranks);
size_t shrinkReplyMaxBytes(int nranks);

}  // namespace coll
