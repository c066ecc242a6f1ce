// Device buffers for the libcollective benchmarks (the PerfDevice of perf_harness.h): memory from
// collMemAlloc, a CUDA stream made through the library's run-time loaded CUDA driver (src/gpu,
// COLL_CUDA_DRIVER), and mismatches counted by the library's device kernels.
#pragma once

#include <memory>
#include <string>

#include "bench/perf_harness.h"

namespace coll::perf {

// CUDA devices of this process: the library's driver loaded (cudaDriver) and its deviceCount; 0
// with the reason in *why when there is no driver or no device.
int cudaDeviceCount(std::string* why);

// This process's rank on its host from the launcher's environment (COLL_LOCAL_RANK, LOCAL_RANK,
// OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MPI_LOCALRANKID); 0 when none is set.
int launcherLocalRank();

// Makes device `ordinal` current on the calling thread (coll::gpu::setCurrentDevice) and creates a
// non-blocking stream on it; nullptr with the reason in *why.
std::unique_ptr<PerfDevice> openPerfDevice(int ordinal, std::string* why);

}  // namespace coll::perf
