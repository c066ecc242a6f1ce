// fault_kill_rank: the last rank _exit()s after a few all-reduces while the others keep calling.
// Survivors must get an error (not hang) and print "survivor ... got the expected error".
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "collective/collective.h"

int main(int argc, char** argv) {
  int dieAfter = argc > 1 ? atoi(argv[1]) : 5;
  size_t count = argc > 2 ? strtoull(argv[2], nullptr, 10) : 4096;
  collComm_t comm = nullptr;
  collResult_t res = collCommInitFromEnv(&comm, nullptr);
  if (res != collSuccess) {
    fprintf(stderr, "FAIL: collCommInitFromEnv: %s: %s\n", collGetErrorString(res), collGetLastError(nullptr));
    return 2;
  }
  int rank = 0, nranks = 1;
  if (collCommUserRank(comm, &rank) != collSuccess || collCommCount(comm, &nranks) != collSuccess) return 2;
  const int victim = nranks - 1;
  std::vector<float> send(count, 1.0f), recv(count);
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000000; ++i) {
    if (rank == victim && i == dieAfter) {
      printf("victim rank %d: exiting abruptly after %d all-reduces\n", rank, i);
      fflush(stdout);
      _exit(0);  // exit status 0: the launcher must not be the one who stops the survivors
    }
    auto callStart = std::chrono::steady_clock::now();
    res = collAllReduce(send.data(), recv.data(), count, collFloat32, collSum, comm, nullptr);
    if (res != collSuccess) {
      double callSec = std::chrono::duration<double>(std::chrono::steady_clock::now() - callStart).count();
      // The victim's last call may still be in flight on the survivors when it exits (its socket
      // closes with data unread), so that call may fail too; earlier ones must not.
      if (i < dieAfter - 1) {
        fprintf(stderr, "FAIL: rank %d: all-reduce %d failed before the victim left: %s: %s\n", rank, i,
                collGetErrorString(res), collGetLastError(comm));
        collCommAbort(comm);
        return 1;
      }
      printf("survivor rank %d got the expected error at call %d after %.2f s in the call: %s: %s\n", rank, i, callSec,
             collGetErrorString(res), collGetLastError(comm));
      fflush(stdout);
      collCommAbort(comm);  // must return promptly even though a peer is gone
      return 0;
    }
    if (recv[0] != static_cast<float>(nranks)) {
      fprintf(stderr, "FAIL: rank %d: wrong result %g at call %d\n", rank, recv[0], i);
      collCommAbort(comm);
      return 1;
    }
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(120)) break;
  }
  fprintf(stderr, "FAIL: rank %d: never saw an error although rank %d left\n", rank, victim);
  collCommAbort(comm);
  return 1;
}
