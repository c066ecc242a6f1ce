// fault_stall: one rank SIGSTOPs itself between all-reduces (a stalled peer: its sockets stay
// open, nothing answers). Every survivor must fail naming it within 2 x COLL_TIMEOUT (or
// FAULT_STALL_LIMIT_S, for the heartbeat's run), list it in
// collCommGetFailedRanks, and abort promptly; the victim, once continued, must fail too (no hang).
// With MODE "abort": the victim stops before any call; the survivors queue an all-to-all on a
// host stream (it connects to the victim, which accepts but never answers) and collCommAbort must
// return within a second, rank 0's too, which aborts last, while it tells the victim that the
// others have gone.
// usage: fault_stall VICTIM STOP_AT PIDFILE [abort]
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "collective/collective.h"

namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: fault_stall VICTIM STOP_AT PIDFILE\n");
    return 2;
  }
  const int victim = atoi(argv[1]);
  const int stopAt = atoi(argv[2]);
  const char* pidFile = argv[3];
  const bool abortMode = argc > 4 && std::string(argv[4]) == "abort";
  const char* timeoutText = getenv("COLL_TIMEOUT");
  const double timeoutSec = timeoutText ? atof(timeoutText) : 300;
  // The heartbeat run names the victim long before COLL_TIMEOUT: its own limit.
  const char* limitText = getenv("FAULT_STALL_LIMIT_S");
  const double limitSec = limitText ? atof(limitText) : 2 * timeoutSec;
  collComm_t comm = nullptr;
  collResult_t res = collCommInitFromEnv(&comm, nullptr);
  if (res != collSuccess) {
    fprintf(stderr, "FAIL: collCommInitFromEnv: %s\n", collGetLastError(nullptr));
    return 2;
  }
  int rank = 0, nranks = 1;
  if (collCommUserRank(comm, &rank) != collSuccess || collCommCount(comm, &nranks) != collSuccess) return 2;
  std::vector<float> send(4096, 1.0f), recv(4096);
  if (abortMode && rank != victim) {
    collStream_t stream = nullptr;
    if (collHostStreamCreate(&stream) != collSuccess) return 2;
    std::vector<float> all(4096 * static_cast<size_t>(nranks), 1.0f), out(all.size());
    if (collAlltoAll(all.data(), out.data(), 4096, collFloat32, comm, stream) != collSuccess) return 2;
    // Rank 0 aborts last: the others have exited by then, and it is telling the stalled victim of
    // their deaths (a notice with its full deadline), which the abort must not wait out.
    usleep(rank == 0 ? 1500000 : 1000000);
    const auto a0 = std::chrono::steady_clock::now();
    collCommAbort(comm);
    const double abortSec = since(a0);
    const collResult_t streamRes = collHostStreamSynchronize(stream);
    collHostStreamDestroy(stream);
    const bool ok = abortSec < 1.0 && streamRes != collSuccess;
    printf("survivor rank %d %s: abort took %.2f s with an all-to-all in flight (stream: %s)\n", rank,
           ok ? "ok" : "FAILED", abortSec, collGetErrorString(streamRes));
    return ok ? 0 : 1;
  }
  for (int i = 0; i < 100000; ++i) {
    if (rank == victim && i == stopAt) {
      FILE* f = fopen(pidFile, "w");
      if (f) fprintf(f, "%d\n", static_cast<int>(getpid())), fclose(f);
      printf("victim rank %d: stopping itself (SIGSTOP) before call %d\n", rank, i);
      fflush(stdout);
      raise(SIGSTOP);
      printf("victim rank %d: continued\n", rank);
      fflush(stdout);
      if (abortMode) {  // the others ran an all-to-all and left: nothing to call
        printf("victim rank %d got an error after 0.00 s: (abort mode: not calling)\n", rank);
        collCommAbort(comm);
        return 0;
      }
    }
    const auto t0 = std::chrono::steady_clock::now();
    res = collAllReduce(send.data(), recv.data(), send.size(), collFloat32, collSum, comm, nullptr);
    if (res == collSuccess) {
      if (recv[0] != static_cast<float>(nranks)) {
        fprintf(stderr, "FAIL: rank %d: wrong result %g at call %d\n", rank, recv[0], i);
        return 1;
      }
      continue;
    }
    const double took = since(t0);
    const std::string msg = collGetLastError(comm);
    if (rank == victim) {
      printf("victim rank %d got an error after %.2f s: %s\n", rank, took, msg.c_str());
      collCommAbort(comm);
      return 0;
    }
    int count = 0, failed[8] = {-1};
    collCommGetFailedRanks(comm, failed, 8, &count);
    const std::string name = "rank " + std::to_string(victim);
    bool ok = true;
    if (i < stopAt) ok = false, fprintf(stderr, "FAIL: rank %d: call %d failed before the stall\n", rank, i);
    if (msg.find(name) == std::string::npos)
      ok = false, fprintf(stderr, "FAIL: rank %d: error does not name %s\n", rank, name.c_str());
    if (count < 1 || failed[0] != victim)
      ok = false, fprintf(stderr, "FAIL: rank %d: failed ranks %d (first %d)\n", rank, count, failed[0]);
    if (took > limitSec) ok = false, fprintf(stderr, "FAIL: rank %d: took %.2f s > %.1f s\n", rank, took, limitSec);
    const auto a0 = std::chrono::steady_clock::now();
    collCommAbort(comm);
    const double abortSec = since(a0);
    if (abortSec > 3) ok = false, fprintf(stderr, "FAIL: rank %d: collCommAbort took %.2f s\n", rank, abortSec);
    printf("survivor rank %d %s: named %s after %.2f s (abort %.2f s): %s: %s\n", rank, ok ? "ok" : "FAILED",
           name.c_str(), took, abortSec, collGetErrorString(res), msg.c_str());
    return ok ? 0 : 1;
  }
  fprintf(stderr, "FAIL: rank %d: never saw an error\n", rank);
  return 1;
}
