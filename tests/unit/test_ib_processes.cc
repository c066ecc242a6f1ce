// ib transport between processes on the verbs test double: ranks are forked processes
// (COLL_TRANSPORT=ib), each with its own emulated device; exact collective results, and a rank
// that dies mid-job turns into an error on the survivor instead of a hang.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "collective/collective.h"
#include "tests/ib_double/verbs_double.h"
#include "transports/ib/verbs_api.h"

namespace {

// Forks one process per rank running body(rank, comm) -> a result line; returns the lines. This
// process starts no thread (a fork copies only the calling thread, and a lock another thread held
// would stay locked in the child): rank 0 makes the unique id and hands it to the others by pipe.
std::vector<std::string> forkRanks(int n, const std::function<std::string(int, collComm_t)>& body) {
  std::vector<pid_t> pids(n);
  std::vector<int> readFds(n);
  std::vector<int> idRead(n, -1), idWrite(n, -1);
  for (int r = 1; r < n; ++r) {
    int fds[2];
    if (pipe(fds) != 0) return {};
    idRead[r] = fds[0];
    idWrite[r] = fds[1];
  }
  for (int r = 0; r < n; ++r) {
    int fds[2];
    if (pipe(fds) != 0) return {};
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      coll::setVerbsApiForTesting(&coll::testing::verbsTestDouble());
      setenv("COLL_TRANSPORT", "ib", 1);
      setenv("COLL_LINK_PROBE", "0", 1);
      setenv("COLL_TIMEOUT", "30", 1);
      collUniqueId id{};
      if (r == 0) {
        if (collGetUniqueId(&id) != collSuccess) _exit(1);
        for (int k = 1; k < n; ++k) {
          if (write(idWrite[k], &id, sizeof(id)) != static_cast<ssize_t>(sizeof(id))) _exit(1);
        }
      } else if (read(idRead[r], &id, sizeof(id)) != static_cast<ssize_t>(sizeof(id))) {
        _exit(1);
      }
      collComm_t comm = nullptr;
      std::string line;
      collResult_t rc = collCommInitRank(&comm, n, id, r);
      if (rc != collSuccess) line = "init failed: " + std::string(collGetLastError(nullptr));
      else line = body(r, comm);
      ssize_t w = write(fds[1], line.data(), line.size());
      (void)w;
      close(fds[1]);
      if (comm) (void)collCommDestroy(comm);
      _exit(0);
    }
    close(fds[1]);
    pids[r] = pid;
    readFds[r] = fds[0];
  }
  for (int r = 1; r < n; ++r) {
    close(idRead[r]);
    close(idWrite[r]);
  }
  std::vector<std::string> out(n);
  auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < n; ++r) {
    char buf[4096];
    for (;;) {
      pollfd p{readFds[r], POLLIN, 0};
      if (poll(&p, 1, 1000) > 0) {
        ssize_t k = read(readFds[r], buf, sizeof(buf));
        if (k <= 0) break;
        out[r].append(buf, static_cast<size_t>(k));
      }
      if (std::chrono::steady_clock::now() - start > std::chrono::seconds(90)) {
        out[r] += "hung";
        break;
      }
    }
    close(readFds[r]);
  }
  for (pid_t pid : pids) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  return out;
}

std::string allReduceRounds(int rank, int n, collComm_t comm) {
  for (size_t count : {size_t{3}, size_t{70000}}) {
    std::vector<int32_t> buf(count);
    for (size_t i = 0; i < count; ++i) buf[i] = static_cast<int32_t>(rank + i % 11);
    if (collAllReduce(buf.data(), buf.data(), count, collInt32, collSum, comm, nullptr) != collSuccess) {
      return std::string("allreduce failed: ") + collGetLastError(comm);
    }
    for (size_t i = 0; i < count; ++i) {
      const int32_t expect = n * (n - 1) / 2 + n * static_cast<int32_t>(i % 11);
      if (buf[i] != expect) return "wrong value at " + std::to_string(i);
    }
  }
  return "ok";
}

TEST(IbProcesses, AllReduceExactBetweenProcesses) {
  for (int n : {2, 4}) {
    auto out = forkRanks(n, [n](int rank, collComm_t comm) { return allReduceRounds(rank, n, comm); });
    ASSERT_EQ(out.size(), static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) EXPECT_EQ(out[r], "ok") << n << " ranks, rank " << r;
  }
}

TEST(IbProcesses, DeadRankIsAnErrorNotAHang) {
  auto out = forkRanks(2, [](int rank, collComm_t comm) -> std::string {
    std::string first = allReduceRounds(rank, 2, comm);
    if (first != "ok") return first;
    if (rank == 1) _exit(0);  // dies without a word, its device with it
    std::vector<float> buf(200000, 1.0f);
    auto start = std::chrono::steady_clock::now();
    collResult_t rc = collAllReduce(buf.data(), buf.data(), buf.size(), collFloat32, collSum, comm, nullptr);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return std::to_string(static_cast<int>(rc)) + " after " + std::to_string(secs) + " s: " + collGetLastError(comm);
  });
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].rfind(std::to_string(static_cast<int>(collRemoteError)) + " ", 0), 0u) << out[0];
}

}  // namespace
