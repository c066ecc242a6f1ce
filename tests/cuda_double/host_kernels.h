// The device kernels on the host, by name: the CUDA test double's cuModuleGetFunction looks kernels
// up here and its cuLaunchKernel runs them. Every entry is the kernel of
// src/kernels/cuda/device_kernels.cuh compiled for the host (host_simt.h), so the double computes
// what the GPU computes, bit for bit.
#pragma once

namespace coll::cuda_double {

// A device address -> its host shadow; a host address unchanged; nullptr for an invalid device address.
using TranslateFn = void* (*)(const void* deviceOrHostAddress);

struct LaunchDims {
  unsigned grid[3];
  unsigned block[3];
};

// Runs the kernel to completion on the calling thread (kernels with warp shuffles start lane
// threads and join them). `params` is cuLaunchKernel's kernelParams: one pointer to each argument.
// Every pointer argument, and the pointers inside DevSources and DevScalar, goes through
// `translate` first; false, without running anything, when one does not translate (the double
// reports CUDA_ERROR_ILLEGAL_ADDRESS). Null pointers stay null.
using HostKernel = bool (*)(const LaunchDims&, void** params, TranslateFn translate);

// nullptr when no kernel has that name.
HostKernel findHostKernel(const char* name);

}  // namespace coll::cuda_double
