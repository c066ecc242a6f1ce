// <collective>_perf: one nccl-tests-style benchmark on libcollective (public API only); the build
// names the collective (COLL_PERF_COLL). Rank and size come from the launcher's environment
// (collrun, mpirun, srun, torchrun) via collCommInitFromEnv.
#include <cstdio>
#include <string>

#include "bench/perf_backend_coll.h"
#include "bench/perf_harness.h"
#include "collective/collective.h"

#ifndef COLL_PERF_COLL
#error "COLL_PERF_COLL must name the collective (all_reduce, all_gather, ...)"
#endif
#ifndef COLL_PERF_PROGRAM
#error "COLL_PERF_PROGRAM must name the program"
#endif

int main(int argc, char** argv) {
  const char* program = COLL_PERF_PROGRAM;
  coll::perf::PerfColl coll;
  if (!coll::perf::parseColl(COLL_PERF_COLL, &coll)) {
    fprintf(stderr, "%s: built for an unknown collective %s\n", program, COLL_PERF_COLL);
    return 2;
  }
  coll::perf::PerfOptions opts;
  int rc = coll::perf::parsePerfOptions(argc, argv, program, &opts);
  if (rc >= 0) return rc;

  collConfig_t config = COLL_CONFIG_INITIALIZER;
  if (opts.timeoutSec > 0) config.timeoutMs = opts.timeoutSec * 1000;
  collComm_t comm = nullptr;
  collResult_t res = collCommInitFromEnv(&comm, &config);
  if (res != collSuccess) {
    fprintf(stderr, "%s: collCommInitFromEnv failed: %s\n", program, coll::perf::collErrorText(res, nullptr).c_str());
    return 2;
  }
  int exitCode;
  {
    coll::perf::CollBackend backend(comm);
    exitCode = coll::perf::runPerf(coll, opts, backend);
  }
  // After a failure the peers may be gone: abort rather than wait for them.
  res = exitCode == 2 ? collCommAbort(comm) : collCommDestroy(comm);
  if (res != collSuccess && exitCode == 0) {
    fprintf(stderr, "%s: destroying the communicator failed: %s\n", program, collGetErrorString(res));
    exitCode = 2;
  }
  return exitCode;
}
