// IdleProgress: a transport's step runs only while the owner is out of calls, never before the
// first call or after stop(), and wakes on the descriptor it asked to sleep on.
#include "transports/idle_progress.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace coll {
namespace {

using std::chrono::milliseconds;

// Waits up to `ms` for `done`.
template <typename F>
bool eventually(F done, int ms = 5000) {
  const auto until = std::chrono::steady_clock::now() + milliseconds(ms);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

TEST(IdleProgress, StepsOnlyBetweenCalls) {
  std::atomic<int> steps{0};
  std::atomic<bool> owner{false};  // set while the owner is inside a call
  std::atomic<bool> overlapped{false};
  IdleProgress idle(0, "test", [&] {
    if (owner.load()) overlapped = true;
    ++steps;
    return IdleProgress::Sleep{-1, 1};
  });
  // No thread before the first call: a transport nobody calls never steps.
  std::this_thread::sleep_for(milliseconds(30));
  EXPECT_EQ(steps.load(), 0);
  idle.enterCall();
  idle.leaveCall();
  EXPECT_TRUE(eventually([&] { return steps.load() >= 3; }));
  for (int round = 0; round < 20; ++round) {
    idle.enterCall();
    owner = true;
    const int before = steps.load();
    std::this_thread::sleep_for(milliseconds(10));
    EXPECT_EQ(steps.load(), before) << "a step ran during the owner's call";
    owner = false;
    idle.leaveCall();
    std::this_thread::sleep_for(milliseconds(round % 3));  // back-to-back calls, and short gaps
  }
  EXPECT_FALSE(overlapped.load());
  EXPECT_TRUE(eventually([&] { return steps.load() >= 30; }));
  idle.stop();
  const int stopped = steps.load();
  idle.enterCall();
  idle.leaveCall();  // no new thread after stop()
  std::this_thread::sleep_for(milliseconds(30));
  EXPECT_EQ(steps.load(), stopped);
}

TEST(IdleProgress, WakesOnItsDescriptor) {
  const int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  ASSERT_GE(fd, 0);
  std::atomic<int> steps{0}, woken{0};
  IdleProgress idle(0, "test", [&] {
    uint64_t n = 0;
    if (read(fd, &n, sizeof n) == sizeof n) ++woken;
    ++steps;
    return IdleProgress::Sleep{fd, 60000};  // far longer than the test waits
  });
  idle.enterCall();
  idle.leaveCall();
  ASSERT_TRUE(eventually([&] { return steps.load() >= 1; }));
  std::this_thread::sleep_for(milliseconds(20));
  const int asleep = steps.load();
  const uint64_t one = 1;
  ASSERT_EQ(write(fd, &one, sizeof one), static_cast<ssize_t>(sizeof one));
  EXPECT_TRUE(eventually([&] { return woken.load() == 1; }));
  EXPECT_EQ(steps.load(), asleep + 1);
  idle.stop();  // ends the 60 s sleep at once
  close(fd);
}

}  // namespace
}  // namespace coll
