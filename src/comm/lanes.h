// Lanes: the concurrent execution lanes of one communicator, so that work on different host
// streams of one communicator overlaps. Lane 0 is the communicator itself; lane k > 0 is an
// internal child communicator over the same ranks, made by the communicator's set-up thread on
// every rank (lazily with COLL_LAZY_SETUP=1; see lanes.cc).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "collective/collective.h"
#include "src/base/status.h"
#include "src/comm/comm.h"
#include "src/comm/work_queue.h"

namespace coll {

// Bootstrap tags of the lane rendezvous ("LN"): lane k uses kLaneTagBase + 2k (children ready,
// up the tree) and kLaneTagBase + 2k + 1 (the child communicator's unique id, down the tree).
constexpr uint32_t kLaneTagBase = 0x4c4e0000u;
constexpr int kMaxStreamLanes = 16;

// COLL_STREAM_LANES, clamped to [1, kMaxStreamLanes].
int streamLanesFromConfig();

class Lanes {
 public:
  Lanes(Comm& parent, int count);
  ~Lanes();
  Lanes(const Lanes&) = delete;
  Lanes& operator=(const Lanes&) = delete;

  int count() const { return count_; }
  // The lane of the next piece of work: its work index modulo the lane count. Called by the
  // thread that issues work on the communicator (every rank issues in the same order).
  int take() { return static_cast<int>(next_++ % static_cast<uint64_t>(count_)); }
  // The lane of point-to-point work: the one the next collective takes, without taking it. Only
  // some ranks issue it, so it must not move the index every rank counts; the two ends of a send
  // have issued the same collectives, so they agree on the lane.
  int peek() const { return static_cast<int>(next_ % static_cast<uint64_t>(count_)); }

  // Makes every lane's child communicator now, on the calling thread (the communicator's setup
  // thread, on every rank in the same order): the first work of a lane then finds it made.
  Status makeAll();

  // Work for lane k (k > 0): queued behind the lane's earlier work, run by its progress thread.
  Status enqueue(int k, Comm::Work work);
  // Runs work on lane k now: on the caller's thread while the lane has no progress thread (the
  // blocking fast path), else through its queue, and waits.
  Status runNow(int k, Comm::Work work);
  Status runNow(int k, const CollArgs& args);
  // Every lane's queued work has completed (collCommFinalize): the first error, or success.
  Status drain();
  // Work queued or running on the lanes now; any thread.
  size_t outstanding() const;

  // Drops queued work (its streams get an error), stops a lane being made, aborts every child.
  void abort();
  // Joins the lanes' progress threads (queued work runs first, as Comm's does) and destroys the
  // children. The parent calls this first thing in its destructor.
  void shutdown();

  // Visits every child made so far (under a lock the lanes' own work never takes).
  void forEachChild(const std::function<void(Comm&)>& fn);
  // A wait-for query while the parent runs no call: a lane being made waits for that peer.
  void answerWaitFor(WaitForAnswer* a) const;

 private:
  struct Lane {
    Lane(Lanes& lanes, int k);
    int index = 0;
    // The lane's stream-ordered work and its progress thread, as the communicator's own.
    WorkQueue queue;
    // Touched only by whoever runs the lane's work: the caller while the lane has no thread,
    // then its progress thread (the handover is ordered by the queue's mutex).
    std::unique_ptr<Comm> child;
    bool tried = false;
    Status made;
    Comm* published = nullptr;  // childrenMu_: the child, for visitors on other threads
  };

  Status run(Lane& lane, const Comm::Work& work);
  Status ready(Lane& lane);
  Status make(int k, std::unique_ptr<Comm>* out);
  Status recvPolling(int peer, uint32_t tag, std::vector<uint8_t>* data, size_t maxSize, Deadline deadline);
  Status sendPolling(int peer, uint32_t tag, const void* data, size_t size, Deadline deadline);
  // Why a rendezvous wait for `peer` timed out: the wait-for chain names the culprit, as a
  // collective's timeout does.
  Status diagnoseTimeout(int peer, const Status& st);
  // Stop waiting: aborted, or the communicator failed (the reason, or okStatus to go on).
  Status interrupted();

  Comm& parent_;
  const int count_;
  uint64_t next_ = 0;
  std::vector<std::unique_ptr<Lane>> lanes_;  // index k; lanes_[0] is unused (lane 0 is the parent)
  std::mutex childrenMu_;
  std::atomic<bool> stop_{false};
  std::atomic<int> waitPeer_{-1};  // the peer a lane being made waits for (wait-for answers)
};

}  // namespace coll
