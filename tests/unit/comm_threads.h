// Test helper: communicators whose ranks are threads of the test process.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <thread>
#include <vector>

#include "collective/collective.h"

namespace coll::testutil {

// Creates `n` communicators (one per thread, as ranks), runs `body(rank, comm)` on each thread,
// then destroys them.
inline void withComms(int n, const std::function<void(int, collComm_t)>& body) {
  collUniqueId id;
  ASSERT_EQ(collGetUniqueId(&id), collSuccess) << collGetLastError(nullptr);
  std::vector<std::thread> threads;
  std::vector<collResult_t> results(n, collInternalError);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      collComm_t comm = nullptr;
      results[r] = collCommInitRank(&comm, n, id, r);
      if (results[r] != collSuccess) return;
      body(r, comm);
      results[r] = collCommDestroy(comm);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(results[r], collSuccess) << "rank " << r;
}

}  // namespace coll::testutil
