// COLL_TOPO_FABRIC end to end: ranks as processes on emulated hosts (COLL_HOSTID) over tcp,
// placed on the fabric so that rank order alternates leaves; the communicator runs its All-Reduce
// with the hosts in fabric order and must still sum exactly. A file of its own: the ranks are
// forked from a process that has made no thread yet.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "collective/collective.h"
#include "tests/unit/comm_threads.h"

namespace coll {
namespace {

// Ranks as processes on emulated hosts (COLL_HOSTID), over tcp: `hosts` hosts of `per` ranks each.
// Each runs body(rank, comm) and returns its line; the INFO log of every rank goes to logDir.
std::vector<std::string> runProcesses(int hosts, int per, const std::string& logDir,
                                      const std::function<std::string(int, collComm_t)>& body) {
  const int n = hosts * per;
  // Rank 0 makes the unique id and hands it over pipes: this process makes no thread before the
  // forks (a lock held by another thread at fork time would stay held in the child).
  std::vector<int> idRead(static_cast<size_t>(n)), idWrite(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    idRead[static_cast<size_t>(r)] = fds[0];
    idWrite[static_cast<size_t>(r)] = fds[1];
  }
  std::vector<int> readEnd(static_cast<size_t>(n));
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      setenv("COLL_HOSTID", ("fabric-host-" + std::to_string(r / per)).c_str(), 1);
      setenv("COLL_TRANSPORT", "tcp", 1);
      setenv("COLL_LINK_PROBE", "0", 1);
      setenv("COLL_TIMEOUT", "60", 1);
      setenv("COLL_DEBUG", "INFO", 1);
      setenv("COLL_DEBUG_FILE", (logDir + "/rank" + std::to_string(r) + ".log").c_str(), 1);
      collUniqueId id{};
      if (r == 0) {
        if (collGetUniqueId(&id) != collSuccess) _exit(1);
        for (int k = 1; k < n; ++k) {
          if (write(idWrite[static_cast<size_t>(k)], &id, sizeof id) != static_cast<ssize_t>(sizeof id)) _exit(1);
        }
      } else if (read(idRead[static_cast<size_t>(r)], &id, sizeof id) != static_cast<ssize_t>(sizeof id)) {
        _exit(1);
      }
      collComm_t comm = nullptr;
      std::string line;
      if (collCommInitRank(&comm, n, id, r) != collSuccess) {
        line = std::string("init failed: ") + collGetLastError(nullptr);
      } else {
        line = body(r, comm);
      }
      const ssize_t w = write(fds[1], line.data(), line.size());
      (void)w;
      close(fds[1]);
      if (comm != nullptr) (void)collCommDestroy(comm);
      _exit(0);
    }
    close(fds[1]);
    readEnd[static_cast<size_t>(r)] = fds[0];
    pids.push_back(pid);
  }
  for (int r = 0; r < n; ++r) {
    close(idRead[static_cast<size_t>(r)]);
    close(idWrite[static_cast<size_t>(r)]);
  }
  std::vector<std::string> lines(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    char buf[512];
    ssize_t got;
    while ((got = read(readEnd[static_cast<size_t>(r)], buf, sizeof buf)) > 0)
      lines[r].append(buf, static_cast<size_t>(got));
    close(readEnd[static_cast<size_t>(r)]);
  }
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  return lines;
}

TEST(FabricOrder, RanksOnScatteredHostsAllReduceInFabricOrder) {
  // 4 hosts of 2 ranks on a fat-tree of 2-node leaves, placed so that rank order alternates
  // leaves: the communicator plans the ring in fabric order and must still sum exactly.
  char dir[] = "/tmp/coll_fabric_order_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string placement = std::string(dir) + "/placement";
  {
    FILE* f = fopen(placement.c_str(), "w");
    ASSERT_NE(f, nullptr);
    fputs("0\n2\n1\n3\n", f);  // host h on node: leaves {0,1} and {2,3}
    fclose(f);
  }
  testutil::ScopedEnv fabric("COLL_TOPO_FABRIC",
                             ("fattree2,leaf-ports=4,uplinks=1,oversub=4,nic=10,placement=file:" + placement).c_str());
  testutil::ScopedEnv algo("COLL_ALGO", "allreduce:ring");
  const std::vector<std::string> lines = runProcesses(4, 2, dir, [](int rank, collComm_t comm) -> std::string {
    for (size_t n : {size_t{3}, size_t{4096}, size_t{1} << 20}) {
      std::vector<int32_t> buf(n);
      for (size_t i = 0; i < n; ++i) buf[i] = static_cast<int32_t>(rank * 1000 + i % 977);
      if (collAllReduce(buf.data(), buf.data(), n, collInt32, collSum, comm, nullptr) != collSuccess) {
        return std::string("allreduce failed: ") + collGetLastError(comm);
      }
      for (size_t i = 0; i < n; ++i) {
        const int32_t want = 28000 + 8 * static_cast<int32_t>(i % 977);
        if (buf[i] != want) return "wrong at " + std::to_string(i) + " of " + std::to_string(n);
      }
    }
    return "ok";
  });
  for (size_t r = 0; r < lines.size(); ++r) EXPECT_EQ(lines[r], "ok") << "rank " << r;
  // Rank 0 logs the plans (every rank plans alike, or the results above would be wrong): the
  // ring with the hosts in fabric order, by simulation, at every size but the smallest.
  for (size_t r = 0; r < lines.size(); ++r) {
    const std::string path = std::string(dir) + "/rank" + std::to_string(r) + ".log";
    if (r == 0) {
      std::ifstream in(path);
      std::stringstream all;
      all << in.rdbuf();
      EXPECT_NE(all.str().find("planner: choosing by simulation on fattree2"), std::string::npos) << all.str();
      EXPECT_NE(all.str().find("plan allreduce 1048576 x int32: ring hosts in fabric order"), std::string::npos)
          << all.str();
    }
    unlink(path.c_str());
  }
  unlink(placement.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace coll
