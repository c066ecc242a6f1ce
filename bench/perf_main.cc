// <collective>_perf: one nccl-tests-style benchmark on libcollective (public API only); the build
// names the collective (COLL_PERF_COLL). Rank and size come from the launcher's environment
// (collrun, mpirun, srun, torchrun) via collCommInitFromEnv. Buffers are device memory when a CUDA
// device is present (as nccl-tests), else host memory; -G 0|1 and --host choose (perf_harness.cc).
#include <cstdio>
#include <memory>
#include <string>

#include "bench/perf_backend_coll.h"
#include "bench/perf_device.h"
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

  // Device buffers: by default where CUDA has a device and the host-only mode (--stream) was not
  // asked for. The device (local rank % device count) is made current before the communicator
  // is created, so the communicator is on it (collCommCuDevice).
  std::unique_ptr<coll::perf::PerfDevice> device;
  {
    std::string why;
    const int devices = opts.deviceBuffers == 0 ? 0 : coll::perf::cudaDeviceCount(&why);
    const bool hostOnly = opts.stream;
    if (opts.deviceBuffers == 1 && devices <= 0) {
      fprintf(stderr, "%s: -G 1: no CUDA device: %s\n", program, why.c_str());
      return 2;
    }
    if (devices > 0 && (opts.deviceBuffers == 1 || !hostOnly)) {
      const int ordinal = coll::perf::launcherLocalRank() % devices;
      device = coll::perf::openPerfDevice(ordinal, &why);
      if (!device) {
        fprintf(stderr, "%s: device %d: %s\n", program, ordinal, why.c_str());
        return 2;
      }
    }
  }

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
    exitCode = coll::perf::runPerf(coll, opts, backend, device.get());
  }
  // After a failure the peers may be gone: abort rather than wait for them.
  res = exitCode == 2 ? collCommAbort(comm) : collCommDestroy(comm);
  if (res != collSuccess && exitCode == 0) {
    fprintf(stderr, "%s: destroying the communicator failed: %s\n", program, collGetErrorString(res));
    exitCode = 2;
  }
  return exitCode;
}
