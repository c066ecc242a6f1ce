// The progress thread of a communicator's stream-ordered work (see work_queue.h).
#include "src/comm/work_queue.h"

#include <pthread.h>
#include <sched.h>

#include "src/base/deadline.h"
#include "src/base/log.h"

namespace coll {

Status WorkQueue::enqueue(CommWork work) {
  std::lock_guard<std::mutex> lock(queueMu_);
  if (aborted_.load()) return makeError(collInvalidUsage, "the communicator was aborted");
  if (!progressThread_.joinable()) {
    progressThread_ = std::thread([this] { progressLoop(); });
    bindProgressThread();
    threaded_.store(true, std::memory_order_release);
  }
  queue_.push_back(std::move(work));
  outstanding_.fetch_add(1, std::memory_order_acq_rel);
  queueCv_.notify_one();
  return okStatus();
}

void WorkQueue::bindProgressThread() {
  if (cpus_.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int32_t c : cpus_) {
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  }
  int rc = pthread_setaffinity_np(progressThread_.native_handle(), sizeof set, &set);
  if (rc != 0) {
    COLL_WARN(rank_,
              "progress thread%s: cannot bind it to %zu CPUs near the rank's devices (error %d); it runs "
              "unbound (COLL_BIND_THREADS=0 stops trying)",
              label_.c_str(), cpus_.size(), rc);
  } else {
    COLL_INFO(rank_, "progress thread%s bound to %zu CPUs near the rank's devices (first %d)", label_.c_str(),
              cpus_.size(), cpus_.front());
  }
}

Status WorkQueue::runNow(CommWork work) {
  if (!threaded_.load(std::memory_order_acquire)) return execute_(work);
  // A private stream carries the completion of this one piece of work.
  auto done = std::make_shared<HostStream>();
  work.stream = done;
  work.ticket = done->enqueue();
  COLL_TRY(enqueue(std::move(work)));
  return done->synchronize(Deadline::afterMs(timeoutMs_ * 2));
}

void WorkQueue::abort() {
  std::lock_guard<std::mutex> lock(queueMu_);
  const Status aborted(collRemoteError, "the communicator was aborted");
  outstanding_.fetch_sub(queue_.size(), std::memory_order_acq_rel);
  for (CommWork& w : queue_) {
    if (w.stream) w.stream->complete(w.ticket, aborted);
    if (w.finish) w.finish(aborted);
  }
  queue_.clear();
}

void WorkQueue::progressLoop() {
  for (;;) {
    CommWork work;
    {
      std::unique_lock<std::mutex> lock(queueMu_);
      queueCv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued has run
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    Status status;
    if (work.stream) status = work.stream->waitTurn(work.ticket, Deadline::afterMs(timeoutMs_));
    if (status.ok()) status = execute_(work);
    if (!status.ok()) COLL_WARN(rank_, "stream-ordered work%s failed: %s", label_.c_str(), status.message().c_str());
    // Before the completion: a caller that saw its stream finish finds nothing outstanding.
    outstanding_.fetch_sub(1, std::memory_order_acq_rel);
    if (work.stream) work.stream->complete(work.ticket, status);
    if (work.finish) work.finish(status);
  }
}

void WorkQueue::stop() {
  {
    std::lock_guard<std::mutex> lock(queueMu_);
    stopping_ = true;
    queueCv_.notify_all();
  }
  if (progressThread_.joinable()) progressThread_.join();
}

}  // namespace coll
