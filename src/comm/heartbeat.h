// Heartbeat: the stall detector that does not wait for COLL_TIMEOUT. The ranks of a communicator
// form the notice tree rooted at rank 0 (failure.h); every rank sends a small HEARTBEAT control
// message to its parent every COLL_HEARTBEAT_MS, and the parent's acknowledgement is the beat the
// other way. A parent that hears nothing from a child for COLL_HEARTBEAT_TIMEOUT_MS asks it a
// wait-for query; no answer, and the child is blamed. A child whose beats go unacknowledged for as
// long blames its parent. So a hung (stopped, frozen, cut off) or dead rank is named within about
// the heartbeat timeout, whether or not anyone is in a call with it, and each rank sends one
// message per interval and receives at most the fan-out: no message per pair. A rank that
// destroys or aborts its communicator says LEAVING to its parent and children first, so ranks
// that end at different times are not blamed.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "src/oob/bootstrap.h"

namespace coll {

struct HeartbeatOptions {
  int intervalMs = 1000;  // COLL_HEARTBEAT_MS; 0: no heartbeat
  int timeoutMs = 6000;   // COLL_HEARTBEAT_TIMEOUT_MS
  int fanout = 32;        // the notice tree's (COLL_NOTICE_FANOUT)
  int queryMs = 2000;     // deadline of the wait-for query asked of a silent child
};
// The knobs, clamped to sane values (the timeout at least twice the interval).
HeartbeatOptions heartbeatOptionsFromConfig(int fanout, int queryMs);

// What the heartbeat needs of the communicator's failure handling.
struct HeartbeatHooks {
  std::function<bool(int)> isFailed;  // a rank already recorded failed (not watched any more)
  std::function<bool()> interrupted;  // the communicator failed or was revoked: nothing to watch
  // Records the rank failed and tells every rank (FailureManager::recordFailure with propagate).
  std::function<void(int rank, const std::string& reason)> blame;
};

class Heartbeat {
 public:
  Heartbeat() = default;
  ~Heartbeat() { stop(true); }
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // Starts the beating thread (nothing when options.intervalMs is 0 or there is one rank).
  void start(Bootstrap* bootstrap, const HeartbeatOptions& options, HeartbeatHooks hooks);
  // Says LEAVING to the parent and children (each attempt bounded: 100 ms when aborting) and joins
  // the thread.
  void stop(bool aborting);
  // A HEARTBEAT message (listener thread; records atomics only). The reply is empty.
  void onMessage(int from, const std::vector<uint8_t>& payload);

  int parent() const { return parent_; }
  const std::vector<int>& children() const { return children_; }

 private:
  void loop();
  void beatParent(int64_t now);
  void watchChildren(int64_t now);
  int childIndex(int rank) const;

  Bootstrap* bootstrap_ = nullptr;
  HeartbeatOptions options_;
  HeartbeatHooks hooks_;
  int parent_ = -1;
  std::vector<int> children_;
  std::unique_ptr<std::atomic<int64_t>[]> childBeatNs_;  // last beat heard from each child
  std::unique_ptr<std::atomic<bool>[]> childLeft_;
  std::atomic<bool> parentLeft_{false};
  int64_t parentAckNs_ = 0;  // last acknowledged beat (the beating thread's)

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::atomic<bool> started_{false};  // set once the tree and clocks are in place (the listener reads it)
  std::thread thread_;
};

}  // namespace coll
