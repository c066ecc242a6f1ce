// Which CUDA driver the GPU unit tests run on: the CUDA driver test double (tests/cuda_double, the
// default everywhere, CI included), or with COLL_GPU_TEST_REAL_DRIVER=1 the real driver
// (bench/gpu_check.sh on a GPU machine: COLL_CUDA_DRIVER as set, else libcuda.so.1). Tests that
// need the double's hooks (injected errors, its allocation count, its sleep kernel) or two devices
// skip there. Each test program sets its own environment before the driver loads.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace coll::testutil {

inline bool gpuTestOnRealDriver() {
  const char* v = std::getenv("COLL_GPU_TEST_REAL_DRIVER");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace coll::testutil

// A statement of its own (safe inside an unbraced if/else).
#define SKIP_ON_REAL_DRIVER()                                                     \
  do {                                                                            \
    if (::coll::testutil::gpuTestOnRealDriver()) {                                \
      GTEST_SKIP() << "needs the CUDA test double (COLL_GPU_TEST_REAL_DRIVER=1)"; \
    }                                                                             \
  } while (0)
