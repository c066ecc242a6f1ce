// WorkQueue: a communicator's stream-ordered work and the progress thread that runs it, started on
// first use, in issue order.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "src/base/status.h"
#include "src/comm/stream.h"
#include "src/gpu/stream_gate.h"
#include "src/schedule/coll_args.h"

namespace coll {

// One point-to-point call of a batch (one group, or one call alone): all progress together.
struct P2pCall {
  bool send;
  int32_t peer;
  void* buffer;
  uint64_t bytes;
};

// One group (or one call) for a communicator; `stream` orders it against other work on the same
// stream and reports completion.
struct CommWork {
  std::vector<CollArgs> collectives;
  std::vector<P2pCall> p2p;
  std::shared_ptr<HostStream> stream;
  uint64_t ticket = 0;
  // Work on device buffers: its passage through the communicator's stream gate (seq 0: host
  // work), and what releases the user's CUDA stream, run once when the work ran or was dropped.
  gpu::GateTicket gate;
  std::function<void(const Status&)> finish;
};

class WorkQueue {
 public:
  // `execute` runs one piece of work; `aborted` refuses new work once set.
  WorkQueue(std::function<Status(const CommWork&)> execute, const std::atomic<bool>& aborted)
      : execute_(std::move(execute)), aborted_(aborted) {}
  ~WorkQueue() { stop(); }
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // The rank and a name for warnings (" on lane 2"), and the communicator's timeout (for waits).
  void setIdentity(int rank, int64_t timeoutMs, std::string label = {}) {
    rank_ = rank;
    timeoutMs_ = timeoutMs;
    label_ = std::move(label);
  }
  // The CPUs the progress thread runs on (placement: near the rank's GPU or NIC); empty: wherever
  // the process may. Takes effect for a thread started after the call.
  void setCpus(std::vector<int32_t> cpus) {
    std::lock_guard<std::mutex> lock(queueMu_);
    cpus_ = std::move(cpus);
  }
  // Whether the progress thread exists: once it does, every call goes through it, so calls on
  // one communicator never run concurrently.
  bool threaded() const { return threaded_.load(std::memory_order_acquire); }

  // Queues work behind earlier work, starting the progress thread on first use.
  Status enqueue(CommWork work);
  // Runs work now on this thread, or, once the progress thread exists, through it, and waits.
  Status runNow(CommWork work);
  // Drops queued work that has not started: its streams learn of the abort.
  void abort();
  // Runs what is queued, then joins the progress thread.
  void stop();
  // Work queued or running now (enqueue'd, not yet completed or dropped); any thread.
  size_t outstanding() const { return outstanding_.load(std::memory_order_acquire); }

 private:
  void progressLoop();
  void bindProgressThread();  // to cpus_ (queueMu_ held)

  std::function<Status(const CommWork&)> execute_;
  const std::atomic<bool>& aborted_;
  int rank_ = -1;
  int64_t timeoutMs_ = 0;
  std::string label_;
  std::vector<int32_t> cpus_;  // guarded by queueMu_
  std::mutex queueMu_;
  std::condition_variable queueCv_;
  std::deque<CommWork> queue_;
  bool stopping_ = false;
  std::thread progressThread_;
  std::atomic<bool> threaded_{false};  // progressThread_ started (read without the lock)
  std::atomic<size_t> outstanding_{0};
};

}  // namespace coll
