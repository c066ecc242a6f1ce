// comm_init_perf: how long making a communicator takes. Launched by collrun (one process per rank):
// the first communicator (collCommInitFromEnv) hands out fresh unique ids; each of ITERS rounds
// then makes a communicator from one (collCommInitRank, every rank starting together after a
// barrier) and destroys it. Prints each round's creation time (the slowest rank's) and the median.
// usage: collrun -np 8 comm_init_perf [ITERS=5]   (knobs such as COLL_LAZY_SETUP from the environment)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "collective/collective.h"

namespace {

bool ok(collResult_t res, collComm_t comm, const char* what) {
  if (res == collSuccess) return true;
  fprintf(stderr, "comm_init_perf: %s failed: %s\n", what, collGetLastError(comm));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? atoi(argv[1]) : 5;
  if (iters < 1) {
    fprintf(stderr, "usage: comm_init_perf [ITERS >= 1]\n");
    return 2;
  }
  collComm_t world = nullptr;
  if (!ok(collCommInitFromEnv(&world, nullptr), nullptr, "collCommInitFromEnv")) return 2;
  int rank = 0, nranks = 0;
  if (!ok(collCommUserRank(world, &rank), world, "collCommUserRank") ||
      !ok(collCommCount(world, &nranks), world, "collCommCount"))
    return 2;
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    collUniqueId id{};
    if (rank == 0 && !ok(collGetUniqueId(&id), world, "collGetUniqueId")) return 2;
    if (!ok(collBroadcast(&id, &id, sizeof(id), collUint8, 0, world, nullptr), world, "broadcast of the id")) return 2;
    int one = 1, sum = 0;
    if (!ok(collAllReduce(&one, &sum, 1, collInt32, collSum, world, nullptr), world, "barrier")) return 2;
    const auto t0 = std::chrono::steady_clock::now();
    collComm_t comm = nullptr;
    if (!ok(collCommInitRank(&comm, nranks, id, rank), nullptr, "collCommInitRank")) return 2;
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(), slowest = 0;
    if (!ok(collAllReduce(&ms, &slowest, 1, collFloat64, collMax, world, nullptr), world, "all-reduce of the time"))
      return 2;
    if (!ok(collCommDestroy(comm), comm, "collCommDestroy")) return 2;
    times.push_back(slowest);
    if (rank == 0) printf("# round %d: %.2f ms\n", i + 1, slowest);
  }
  std::sort(times.begin(), times.end());
  if (rank == 0) printf("comm_init %d ranks: median %.2f ms (of %d)\n", nranks, times[times.size() / 2], iters);
  return collCommDestroy(world) == collSuccess ? 0 : 2;
}
