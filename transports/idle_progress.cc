// A net transport's progress between calls (see idle_progress.h).
#include "transports/idle_progress.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "src/base/log.h"

namespace coll {

void IdleProgress::enterCall() {
  std::lock_guard<std::mutex> lock(mu_);
  inCall_ = true;
  ++calls_;
}

void IdleProgress::leaveCall() {
  std::lock_guard<std::mutex> lock(mu_);
  inCall_ = false;
  if (parked_) cv_.notify_one();  // a system call only when the thread sleeps there
  if (thread_.joinable() || stop_) return;
  std::string why;
  wakeFd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wakeFd_ < 0) {
    why = std::string("eventfd: ") + strerror(errno);
  } else {
    try {
      thread_ = std::thread([this] { run(); });
      return;
    } catch (const std::system_error& e) {
      why = e.what();
      close(wakeFd_);
      wakeFd_ = -1;
    }
  }
  stop_ = true;
  COLL_WARN(rank_,
            "%s: no thread for idle progress (%s); a peer may wait for this rank's next call to receive "
            "the end of its last one",
            what_.c_str(), why.c_str());
}

void IdleProgress::run() {
  constexpr int kIdleMs = 2;  // how long the owner stays out of calls before this thread steps in
  uint64_t seen = ~uint64_t{0};
  Sleep sleep;
  for (;;) {
    pollfd fds[2] = {{wakeFd_, POLLIN, 0}, {sleep.fd, POLLIN, 0}};
    (void)::poll(fds, sleep.fd >= 0 ? 2 : 1, sleep.timeoutMs);
    std::unique_lock<std::mutex> lock(mu_);
    if (stop_) return;
    if (inCall_) {
      // The owner is in a call, which progresses everything itself: sleep until it leaves (a long
      // call would otherwise wake this thread every few milliseconds, taking a core from a rank).
      parked_ = true;
      cv_.wait(lock, [this] { return !inCall_ || stop_; });
      parked_ = false;
      if (stop_) return;
    }
    if (calls_ != seen) {
      // The owner has been in a call since the last look: give it a moment before stepping in
      // (and watch no descriptor meanwhile, or this thread would wake on every event).
      seen = calls_;
      sleep = Sleep{-1, kIdleMs};
      continue;
    }
    sleep = step_();
  }
}

void IdleProgress::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    cv_.notify_one();
  }
  if (wakeFd_ < 0) return;
  const uint64_t one = 1;
  (void)!write(wakeFd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  close(wakeFd_);
  wakeFd_ = -1;
}

}  // namespace coll
