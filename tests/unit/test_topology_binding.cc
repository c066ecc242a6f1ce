// Placement's thread binding applied: a communicator's progress thread runs on the CPUs it was
// given (cpusNear's choice), and where it was given none, wherever the process may run.
#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "src/comm/stream.h"
#include "src/comm/work_queue.h"

namespace coll {
namespace {

std::vector<int> affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

// The CPUs the progress thread may run on, as seen from the work it runs.
std::vector<int> progressThreadCpus(const std::vector<int32_t>& bind) {
  std::atomic<bool> aborted{false};
  std::vector<int> seen;
  WorkQueue queue(
      [&](const CommWork&) {
        seen = affinity();
        return okStatus();
      },
      aborted);
  queue.setCpus(bind);
  auto stream = std::make_shared<HostStream>();
  CommWork work;
  work.stream = stream;
  work.ticket = stream->enqueue();
  EXPECT_TRUE(queue.enqueue(std::move(work)).ok());
  Status st = stream->synchronize(Deadline::afterMs(30000));
  EXPECT_TRUE(st.ok()) << st.message();
  queue.stop();
  return seen;
}

TEST(ThreadBinding, ProgressThreadRunsOnTheGivenCpus) {
  std::vector<int> process = affinity();
  ASSERT_FALSE(process.empty());
  EXPECT_EQ(progressThreadCpus({}), process);
  const int last = process.back();
  EXPECT_EQ(progressThreadCpus({last}), std::vector<int>{last});
  EXPECT_EQ(affinity(), process);  // the caller's thread is left alone
}

}  // namespace
}  // namespace coll
