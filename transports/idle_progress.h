// IdleProgress: a net transport's own progress between a communicator's calls. Some transports
// leave work behind when a call completes: UCX moves the rest of a send only inside its worker's
// progress; a tcp connection over several rails must notice a rail that fails under bytes the last
// call handed to the kernel, and answer the peer's failover records. A rank whose call ended and
// that then waits elsewhere (another lane, another communicator, its own computation) would leave
// its peer waiting. So between calls a thread of the transport's own runs its step, once the owner
// has stayed out of calls for a moment (back-to-back calls never wake it; during a call it sleeps
// on a condition variable). The owner brackets every call with enterCall/leaveCall; the hand-over
// lock makes the step and the owner's calls exclusive, so the transport needs no locks of its own.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace coll {

class IdleProgress {
 public:
  // How the thread sleeps until its next step: on `fd` becoming readable (-1: none) for at most
  // `timeoutMs`.
  struct Sleep {
    int fd = -1;
    int timeoutMs = 2;
  };
  // `step` runs on the thread while the owner is out of calls, under the hand-over lock.
  // `what` names the transport in the warning when no thread can be had ("UCX", "tcp rails").
  IdleProgress(int rank, std::string what, std::function<Sleep()> step)
      : rank_(rank), what_(std::move(what)), step_(std::move(step)) {}
  ~IdleProgress() { stop(); }
  IdleProgress(const IdleProgress&) = delete;
  IdleProgress& operator=(const IdleProgress&) = delete;

  void enterCall();
  // Starts the thread after the first call, on the thread that runs calls: a transport that only
  // the NCCL net plugin drives (no calls) never has one.
  void leaveCall();
  // Ends the thread for good: before the owner tears down what the step touches.
  void stop();

 private:
  void run();

  const int rank_;
  const std::string what_;
  const std::function<Sleep()> step_;
  std::mutex mu_;
  std::condition_variable cv_;  // the thread waits here while the owner is in a call
  bool parked_ = false;         // ... and says so, so leaveCall notifies only then
  bool inCall_ = false;
  bool stop_ = false;
  uint64_t calls_ = 0;  // calls entered, so the thread sees an owner that came and went
  int wakeFd_ = -1;     // eventfd: ends the thread's poll
  std::thread thread_;
};

}  // namespace coll
