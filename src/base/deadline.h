// Deadline: every wait in the library has one (COLL_TIMEOUT). Monotonic clock.
#pragma once

#include <chrono>
#include <cstdint>

namespace coll {

using Clock = std::chrono::steady_clock;

// The monotonic clock in nanoseconds (steady_clock is CLOCK_MONOTONIC here: processes of one host
// share it, so their traces line up).
inline int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

class Deadline {
 public:
  // A deadline `ms` milliseconds from now; ms <= 0 means "already expired" only when explicit.
  static Deadline afterMs(int64_t ms) { return Deadline(Clock::now() + std::chrono::milliseconds(ms)); }
  static Deadline never() { return Deadline(Clock::time_point::max()); }

  bool expired() const { return Clock::now() >= when_; }
  // Milliseconds left, clamped to [0, INT32_MAX] (for poll()).
  int remainingMs() const {
    if (when_ == Clock::time_point::max()) return INT32_MAX;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(when_ - Clock::now()).count();
    if (left < 0) return 0;
    if (left > INT32_MAX) return INT32_MAX;
    return static_cast<int>(left);
  }
  Clock::time_point when() const { return when_; }

 private:
  explicit Deadline(Clock::time_point when) : when_(when) {}
  Clock::time_point when_;
};

}  // namespace coll
