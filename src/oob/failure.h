// Failure record of one communicator (which ranks failed, first failure wins, revocation) and the
// control-message formats that spread it (FAILED, REVOKED, wait-for queries) between ranks.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "src/base/status.h"

namespace coll {

// Reserved bootstrap tags, handled on the receiving rank's listener thread (never queued).
constexpr uint32_t kCtlTagBase = 0x464c0000u;         // "FL"
constexpr uint32_t kCtlTagFailed = kCtlTagBase + 1;   // payload: FailedWire (+ reason text)
constexpr uint32_t kCtlTagRevoked = kCtlTagBase + 2;  // payload: empty (the sender revoked)
constexpr uint32_t kCtlTagWaitFor = kCtlTagBase + 3;  // payload: empty; reply: WaitForWire
constexpr uint32_t kCtlTagCycle = kCtlTagBase + 4;    // payload: the wait-for cycle found (text)
// A FAILED, REVOKED or CYCLE notice on its way down the notice tree of the rank that sent it first
// (RelayMessage); the three kinds travel only inside it.
constexpr uint32_t kCtlTagRelay = kCtlTagBase + 5;
// payload: a u32 HeartbeatKind (heartbeat.h: a child's beat to its parent, or LEAVING)
constexpr uint32_t kCtlTagHeartbeat = kCtlTagBase + 6;
enum class HeartbeatKind : uint32_t { Beat = 1, Leaving = 2 };
constexpr size_t kHeartbeatWire = 4;
void encodeHeartbeat(HeartbeatKind kind, uint8_t out[kHeartbeatWire]);
bool decodeHeartbeat(const uint8_t* data, size_t size, HeartbeatKind* out);
inline bool isControlTag(uint32_t tag) { return (tag & 0xffff0000u) == kCtlTagBase; }
constexpr size_t kCtlMaxReason = 512;  // longest reason text accepted off the wire
constexpr size_t kCtlMaxReply = 64;    // longest control reply (the wait-for answer)

struct FailedPeer {
  int rank = -1;
  std::string host;     // "198.18.0.4, pid 1234" (address without port, and pid) when known
  std::string reason;   // "connection closed", "did not answer within 375 ms", ...
  int reportedBy = -1;  // the rank that detected it (this rank when detected here)
};

class FailureRecord {
 public:
  // Records `peer` failed (first failure wins: later reports of the same rank are ignored);
  // true when this is news. Wakes waiters (interrupted() turns true).
  bool record(const FailedPeer& peer);
  // Marks the communicator revoked by `byRank` (first revocation wins); true when this is news.
  bool revoke(int byRank);
  // Records that `byRank` found the ranks waiting for each other in a cycle (a mismatch, nobody
  // failed); first report wins. Interrupts like a failure, reported as collTimeout.
  bool noteCycle(int byRank, const std::string& cycle);

  // Cheap (one relaxed load): something happened that stops in-flight operations.
  bool interrupted() const { return interrupted_.load(std::memory_order_relaxed); }
  bool revoked() const { return revokedBy_.load(std::memory_order_acquire) >= 0; }
  int revokedBy() const { return revokedBy_.load(std::memory_order_acquire); }
  size_t count() const { return count_.load(std::memory_order_acquire); }
  bool isFailed(int rank) const;
  std::vector<int> ranks() const;
  // Every failed peer, in the order recorded.
  std::vector<FailedPeer> peers() const;
  // The first failure (false when none).
  bool first(FailedPeer* out) const;
  // The error that an interrupted operation returns: names the first failed rank and its host
  // (collRemoteError), or the revoking rank (collRemoteError), or the wait-for cycle (collTimeout).
  Status interruption(int myRank) const;
  // One line per failed rank, for dumps.
  std::string describe() const;

 private:
  mutable std::mutex mu_;
  std::vector<FailedPeer> failed_;
  std::atomic<size_t> count_{0};
  std::atomic<int> revokedBy_{-1};
  int cycleBy_ = -1;   // guarded by mu_
  std::string cycle_;  // guarded by mu_
  std::atomic<bool> interrupted_{false};
};

// "peer rank 3 (host 198.18.0.4, pid 1234) failed: connection closed"
std::string describeFailedPeer(const FailedPeer& peer);

// Wire formats (little-endian, fixed size; remote bytes are bounds-checked by the decoders).
struct FailedMessage {
  int32_t rank = -1;
  std::string reason;
};
std::vector<uint8_t> encodeFailed(const FailedMessage& m);
bool decodeFailed(const uint8_t* data, size_t size, int nranks, FailedMessage* out);

// A notice and the rank it started from (the tree it travels is that rank's). 12-byte header
// (origin, inner tag, inner length) before the inner payload; the inner payload is decoded by its
// kind's decoder (decodeFailed for FAILED; REVOKED is empty; CYCLE is text of at most kCtlMaxReason).
struct RelayMessage {
  int32_t origin = -1;
  uint32_t tag = 0;  // kCtlTagFailed, kCtlTagRevoked or kCtlTagCycle
  std::vector<uint8_t> payload;
};
constexpr size_t kRelayHeaderBytes = 12;
std::vector<uint8_t> encodeRelay(const RelayMessage& m);
bool decodeRelay(const uint8_t* data, size_t size, int nranks, RelayMessage* out);

// The notice tree of `origin`: rank r sits at position (r - origin) mod nranks, and position p's
// children are positions p*fanout + 1 .. p*fanout + fanout. Every rank other than the origin has
// exactly one parent, so a notice reaches all ranks in ceil(log_fanout(nranks)) hops and no rank
// sends more than `fanout` copies (plus the children of a child that it has to cover for, below).
// fanout >= nranks - 1 is the flat tree: the origin tells everyone itself.
void noticeTreeChildren(int origin, int self, int nranks, int fanout, std::vector<int>* out);
// The rank that tells `self` in that tree (-1 for the origin).
int noticeTreeParent(int origin, int self, int nranks, int fanout);
// Whom `self` tells, in rounds: its children, where a child is to be skipped (`skip`: failed, or the
// notice's subject) its children instead, recursively. `unreachable` children found while telling
// are expanded the same way by the caller (expandNoticeTargets on them).
void expandNoticeTargets(int origin, int nranks, int fanout, std::vector<int> candidates,
                         const std::function<bool(int)>& skip, std::vector<int>* out);

// What a rank is doing, as published by its executor (answers wait-for queries).
struct WaitForAnswer {
  bool running = false;   // inside a call
  uint64_t seq = 0;       // the call (or the last call, when idle)
  int32_t waitPeer = -1;  // the peer its first blocked step waits on (-1: progressing / none)
  int32_t step = -1;
  uint32_t idleMs = 0;      // how long it has been idle (0: progressing)
  int32_t failedRank = -1;  // the first rank it knows to have failed (-1: none)
};
constexpr size_t kWaitForWire = 32;
void encodeWaitFor(const WaitForAnswer& a, uint8_t out[kWaitForWire]);
bool decodeWaitFor(const uint8_t* data, size_t size, int nranks, WaitForAnswer* out);

// The address part of "host:port" / "[v6]:port".
std::string hostOfAddress(const std::string& addressWithPort);

}  // namespace coll
