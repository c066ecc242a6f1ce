// shrink_restart: the elastic-restart pattern end to end. N rank processes run all-reduces with
// exactly checkable inputs; one raises SIGKILL mid-loop; the survivors see the error, shrink the
// communicator without it (collCommGetFailedRanks says whom) and carry on, checking every result.
//
// It launches its own ranks (collrun stops a whole job when one rank dies): the launcher makes the
// unique id, re-executes itself once per rank, and checks that the victim died by SIGKILL and that
// every survivor printed SHRINK_OK. COLL_TRANSPORT (shm, tcp) passes through to the ranks.
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collective/collective.h"

namespace {

struct Options {
  int np = 6;
  int victim = 3;
  int killAt = 20;    // the victim dies before its all-reduce number killAt
  int after = 200;    // all-reduces on the shrunk communicator
  int limitSec = 60;  // the launcher kills everything after this long
  int rank = -1;      // >= 0: run as this rank
  std::string idHex;
};

double nowSec() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

// Varied sizes: small (one message), around the protocol switch, and pipelined large ones.
size_t countOf(int iter) {
  static const size_t sizes[] = {1, 7, 256, 1000, 4099, 65536, 200003};
  return sizes[static_cast<size_t>(iter) % (sizeof(sizes) / sizeof(sizes[0]))];
}

// Element j of the rank with parent rank `who` at iteration `iter`: small integers, so float32
// sums are exact in any order.
float valueOf(int who, int iter, size_t j) {
  return static_cast<float>((who + 1) * static_cast<int>((static_cast<size_t>(iter) * 7 + j) % 61 + 1));
}

// One checked all-reduce; returns the library's result (a wrong sum prints FAIL and exits).
collResult_t checkedAllReduce(collComm_t comm, int me, const std::vector<int>& members, int iter, const char* phase) {
  const size_t count = countOf(iter);
  std::vector<float> send(count), recv(count, -1.0f);
  for (size_t j = 0; j < count; ++j) send[j] = valueOf(me, iter, j);
  collResult_t res = collAllReduce(send.data(), recv.data(), count, collFloat32, collSum, comm, nullptr);
  if (res != collSuccess) return res;
  int weight = 0;
  for (int m : members) weight += m + 1;
  for (size_t j = 0; j < count; ++j) {
    const float want = static_cast<float>(weight * static_cast<int>((static_cast<size_t>(iter) * 7 + j) % 61 + 1));
    if (recv[j] != want) {
      printf("FAIL rank %d: %s all-reduce %d (count %zu): element %zu is %g, want %g\n", me, phase, iter, count, j,
             static_cast<double>(recv[j]), static_cast<double>(want));
      fflush(stdout);
      _exit(1);
    }
  }
  return collSuccess;
}

int runRank(const Options& o) {
  collUniqueId id;
  if (o.idHex.size() != 2 * sizeof(id.internal)) {
    printf("FAIL rank %d: bad --id\n", o.rank);
    return 2;
  }
  for (size_t i = 0; i < sizeof(id.internal); ++i) {
    id.internal[i] = static_cast<char>(strtoul(o.idHex.substr(2 * i, 2).c_str(), nullptr, 16));
  }
  const int me = o.rank;
  collComm_t comm = nullptr;
  collResult_t res = collCommInitRank(&comm, o.np, id, me);
  if (res != collSuccess) {
    printf("FAIL rank %d: init: %s: %s\n", me, collGetErrorString(res), collGetLastError(nullptr));
    return 2;
  }
  std::vector<int> everyone;
  for (int r = 0; r < o.np; ++r) everyone.push_back(r);

  int iter = 0;
  for (;; ++iter) {
    if (me == o.victim && iter == o.killAt) {
      printf("victim rank %d: SIGKILL before all-reduce %d\n", me, iter);
      fflush(stdout);
      raise(SIGKILL);
    }
    if (iter > o.killAt + 2) {
      printf("FAIL rank %d: all-reduce %d succeeded although rank %d died before %d\n", me, iter, o.victim, o.killAt);
      return 1;
    }
    const double t0 = nowSec();
    res = checkedAllReduce(comm, me, everyone, iter, "full");
    if (res == collSuccess) continue;
    if (iter < o.killAt) {
      printf("FAIL rank %d: all-reduce %d failed before the victim died: %s\n", me, iter, collGetLastError(comm));
      (void)collCommAbort(comm);
      return 1;
    }
    printf("rank %d: all-reduce %d failed after %.2f s: %s: %s\n", me, iter, nowSec() - t0, collGetErrorString(res),
           collGetLastError(comm));
    break;
  }

  // Whom to exclude: the communicator's failure record (every survivor must pass the same list).
  int failed[64];
  int nfailed = 0;
  res = collCommGetFailedRanks(comm, failed, 64, &nfailed);
  if (res != collSuccess || nfailed != 1 || failed[0] != o.victim) {
    printf("FAIL rank %d: collCommGetFailedRanks: %s, %d ranks (first %d), want exactly rank %d\n", me,
           collGetErrorString(res), nfailed, nfailed > 0 ? failed[0] : -1, o.victim);
    (void)collCommAbort(comm);
    return 1;
  }
  const double t0 = nowSec();
  collComm_t shrunk = nullptr;
  res = collCommShrink(comm, failed, nfailed, &shrunk, nullptr);
  if (res != collSuccess) {
    printf("FAIL rank %d: collCommShrink: %s: %s\n", me, collGetErrorString(res), collGetLastError(comm));
    (void)collCommAbort(comm);
    return 1;
  }
  int newRank = -1, newN = -1;
  (void)collCommUserRank(shrunk, &newRank);
  (void)collCommCount(shrunk, &newN);
  std::vector<int> members;
  for (int r = 0; r < o.np; ++r) {
    if (r != o.victim) members.push_back(r);
  }
  if (newN != o.np - 1 || newRank < 0 || members[static_cast<size_t>(newRank)] != me) {
    printf("FAIL rank %d: shrunk communicator has rank %d of %d\n", me, newRank, newN);
    return 1;
  }
  printf("rank %d: shrunk in %.2f s: now rank %d of %d\n", me, nowSec() - t0, newRank, newN);
  for (int i = 0; i < o.after; ++i) {
    res = checkedAllReduce(shrunk, me, members, i, "shrunk");
    if (res != collSuccess) {
      printf("FAIL rank %d: all-reduce %d on the shrunk communicator: %s: %s\n", me, i, collGetErrorString(res),
             collGetLastError(shrunk));
      return 1;
    }
  }
  if ((res = collCommDestroy(shrunk)) != collSuccess || (res = collCommAbort(comm)) != collSuccess) {
    printf("FAIL rank %d: destroy/abort: %s\n", me, collGetErrorString(res));
    return 1;
  }
  printf("SHRINK_OK rank=%d newrank=%d iters=%d\n", me, newRank, o.after);
  return 0;
}

int launch(const Options& o) {
  collUniqueId id;
  if (collGetUniqueId(&id) != collSuccess) {
    fprintf(stderr, "FAIL: collGetUniqueId: %s\n", collGetLastError(nullptr));
    return 2;
  }
  std::string hex;
  for (size_t i = 0; i < sizeof(id.internal); ++i) {
    char b[3];
    snprintf(b, sizeof(b), "%02x", static_cast<unsigned char>(id.internal[i]));
    hex += b;
  }
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0) return 2;
  self[len] = 0;
  // Small timeouts: a survivor that has to find out by itself must not take minutes.
  setenv("COLL_TIMEOUT", getenv("COLL_TIMEOUT") ? getenv("COLL_TIMEOUT") : "5", 1);
  fflush(stdout);
  std::vector<pid_t> pids;
  for (int r = 0; r < o.np; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      std::vector<std::string> args = {self,
                                       "--rank",
                                       std::to_string(r),
                                       "--np",
                                       std::to_string(o.np),
                                       "--victim",
                                       std::to_string(o.victim),
                                       "--kill-at",
                                       std::to_string(o.killAt),
                                       "--after",
                                       std::to_string(o.after),
                                       "--id",
                                       hex};
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(self, argv.data());
      _exit(127);
    }
    if (pid < 0) return 2;
    pids.push_back(pid);
  }
  const double start = nowSec();
  std::vector<int> status(static_cast<size_t>(o.np), -1);
  int left = o.np;
  while (left > 0 && nowSec() - start < o.limitSec) {
    for (int r = 0; r < o.np; ++r) {
      if (status[r] != -1) continue;
      int st = 0;
      if (waitpid(pids[r], &st, WNOHANG) == pids[r]) status[r] = st, --left;
    }
    usleep(20000);
  }
  bool ok = true;
  if (left > 0) {
    printf("FAIL: %d ranks still running after %d s (hung); killing them\n", left, o.limitSec);
    ok = false;
    for (int r = 0; r < o.np; ++r) {
      if (status[r] == -1) kill(pids[r], SIGKILL), waitpid(pids[r], &status[r], 0);
    }
  }
  for (int r = 0; r < o.np; ++r) {
    const int st = status[r];
    if (r == o.victim) {
      if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL))
        printf("FAIL: the victim rank %d was not SIGKILLed\n", r), ok = false;
    } else if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
      printf("FAIL: survivor rank %d ended with status %#x\n", r, st);
      ok = false;
    }
  }
  printf("%s: %d ranks, victim %d, %.1f s\n", ok ? "PASS" : "FAIL", o.np, o.victim, nowSec() - start);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        fprintf(stderr, "%s needs a value\n", a.c_str());
        exit(2);
      }
      return argv[++i];
    };
    if (a == "--np") o.np = atoi(value().c_str());
    else if (a == "--victim") o.victim = atoi(value().c_str());
    else if (a == "--kill-at") o.killAt = atoi(value().c_str());
    else if (a == "--after") o.after = atoi(value().c_str());
    else if (a == "--limit") o.limitSec = atoi(value().c_str());
    else if (a == "--rank") o.rank = atoi(value().c_str());
    else if (a == "--id") o.idHex = value();
    else {
      fprintf(stderr,
              "usage: shrink_restart [--np N] [--victim R] [--kill-at I] [--after N] [--limit SEC]\n"
              "  N ranks run all-reduces; rank R raises SIGKILL before all-reduce I; the survivors shrink\n"
              "  and run N more; fails on a wrong sum, a hang (SEC) or a survivor without SHRINK_OK.\n");
      return 2;
    }
  }
  if (o.np < 2 || o.victim < 0 || o.victim >= o.np || o.killAt < 0) {
    fprintf(stderr, "shrink_restart: need np >= 2 and 0 <= victim < np\n");
    return 2;
  }
  return o.rank >= 0 ? runRank(o) : launch(o);
}
