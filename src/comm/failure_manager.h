// FailureManager: one communicator's fault tolerance (failure.h; docs/ARCHITECTURE.md, "Failure
// detection and propagation"): its failure record and first error, the notices it sends every rank
// (from its own notifier thread), control messages from peers, what a failed call means (diagnose,
// the wait-for chain), revocation and dumps of what the rank is doing.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "collective/collective.h"
#include "src/base/deadline.h"
#include "src/base/status.h"
#include "src/comm/heartbeat.h"
#include "src/exec/executor.h"
#include "src/oob/bootstrap.h"
#include "src/oob/failure.h"

namespace coll {

// What failure handling needs of the communicator's stream lanes (lanes.h): a failed peer
// learned here reaches the other lanes, and a wait-for query that finds this lane idle asks them.
class LaneFailureHooks {
 public:
  virtual void forwardFailure(int peer, const std::string& reason, int reportedBy) = 0;
  virtual void answerFromLanes(WaitForAnswer* a) = 0;

 protected:
  ~LaneFailureHooks() = default;
};

class FailureManager {
 public:
  FailureManager() = default;
  ~FailureManager() { stop(); }
  FailureManager(const FailureManager&) = delete;
  FailureManager& operator=(const FailureManager&) = delete;

  // Takes control messages from `bootstrap` and starts the notifier; `laneParent`: the failure
  // manager this lane's failures also go to (null on a communicator of its own).
  void start(Bootstrap* bootstrap, int64_t timeoutMs, const std::string& name, FailureManager* laneParent,
             LaneFailureHooks* lanes);
  // Sends the queued notices, then stops taking control messages; no handler runs after this.
  void stop();

  // Marks the communicator aborted (every wait stops); the first error still comes from fail().
  void markAborted() { aborted_.store(true); }
  bool aborted() const { return aborted_.load(); }
  const std::atomic<bool>& abortedFlag() const { return aborted_; }
  bool aborting() const { return aborted_.load(std::memory_order_relaxed) || failures_.interrupted(); }
  bool interrupted() const { return failures_.interrupted(); }
  Status interruption() const { return failures_.interruption(rank()); }

  // The communicator's first fatal error wins; a lane's also becomes its parent's.
  void fail(const Status& status);
  collResult_t asyncError() const { return asyncError_.load(); }
  const std::string& failureMessage() const { return failureMessage_; }
  // The ranks known to have failed, in the order learned; safe from any thread.
  std::vector<int> failedRanks() const { return failures_.ranks(); }
  // Records `peer` failed (first failure wins); with `propagate`, tells every rank. True if news.
  bool recordFailure(int peer, const std::string& reason, int reportedBy, bool propagate);
  // collRemoteError naming the failed rank (or the revoker), or the earlier failure.
  Status checkUsable();

  // What the executor is doing, for dumps and peers' wait-for queries.
  ExecSnapshot& snapshot() { return snapshot_; }
  void publishOp(const char* what, uint64_t count, int dtype, uint64_t seq);
  // The call is over (after any diagnosis: until then peers' wait-for chains see it waiting).
  void publishIdle();
  // What a failed call means: a failed peer recorded and told, or a timeout's wait-for chain.
  Status diagnose(const Status& st, const Execution& execution);
  // The error a call reports once the communicator is interrupted: the failure, then what it saw.
  Status consequence(const Status& st);
  // Waits briefly for a notice from another rank; true when one arrived (or the comm was revoked).
  bool awaitNotice();
  // A connection to `peer` could not be made: the peer is recorded failed (unless aborting).
  Status connectFailed(int peer, const Status& st);
  void followWaitChain(int first, uint64_t mySeq, int* culprit, std::string* reason, std::string* cycle);

  // Logs what this rank is doing (op, pending steps, waited-for peers, failure record); any thread.
  void dump(const char* why);
  // Marks the communicator unusable here and on every rank.
  Status revoke();
  // As revoke, for collCommAbort: the notices are queued, not waited for (stop gives them a short
  // grace).
  void revokeWithoutWaiting();

 private:
  // Records this rank's revocation and queues its notice; the notice's id (0: none queued).
  uint64_t queueRevocation(const char* why);
  struct Notice {
    uint32_t tag = 0;
    std::vector<uint8_t> payload;
    uint64_t id = 0;
    int subject = -1;  // the failed rank a FAILED notice names (told last, by the origin only)
    int origin = -1;   // the rank it started from: the notice travels that rank's notice tree
  };

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  Deadline callDeadline() const { return Deadline::afterMs(timeoutMs_); }
  int controlTimeoutMs() const;        // per control message: clamp(timeout / 8, 200 ms, 2 s)
  std::string hostOf(int peer) const;  // "198.18.0.4, pid 1234"
  // Starts a notice from this rank down its notice tree.
  void notifyAll(uint32_t tag, std::vector<uint8_t> payload, int subject);
  // Queues a notice for sending; false when the notifier has stopped.
  bool queueNotice(Notice notice);
  void notifyLoop();
  // Tells this rank's part of `notice`'s tree: its children, covering for failed or unreachable ones.
  void sendDownTree(const Notice& notice);
  std::vector<uint8_t> onControl(int from, uint32_t tag, const std::vector<uint8_t>& payload);
  // A notice that arrived down `origin`'s tree: recorded here; forwarded to this rank's children the
  // first time it arrives.
  void onRelay(const RelayMessage& m);

  Bootstrap* bootstrap_ = nullptr;
  bool started_ = false;
  int rank_ = -1, nranks_ = 0;
  int64_t timeoutMs_ = 0;
  std::string name_;
  FailureManager* laneParent_ = nullptr;
  LaneFailureHooks* lanes_ = nullptr;

  std::atomic<collResult_t> asyncError_{collSuccess};
  std::string failureMessage_;
  std::mutex failMu_;  // guards failureMessage_ (written by the listener thread too)
  std::atomic<bool> aborted_{false};
  FailureRecord failures_;
  ExecSnapshot snapshot_;

  std::mutex notifyMu_;
  std::condition_variable notifyCv_;
  std::deque<Notice> notifyQueue_;
  uint64_t noticesQueued_ = 0, noticesSent_ = 0;
  bool notifyStop_ = false;
  int noticeFanout_ = 0;  // COLL_NOTICE_FANOUT
  // (origin, tag, subject) of the notices forwarded: a notice that arrives twice (a parent covered
  // for a child that was slow, not gone) goes down the tree once. Guarded by notifyMu_.
  std::set<std::tuple<int, uint32_t, int>> forwarded_;
  std::thread notifier_;  // sends FAILED / REVOKED notices to every rank, off the caller's path
  Heartbeat heartbeat_;   // a communicator's own (a lane's process is its parent's)
};

}  // namespace coll
