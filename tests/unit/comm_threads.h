// Test helpers for communicator-level tests: knobs set for a scope, and every rank of a
// communicator created in its own thread of this process.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "collective/collective.h"

namespace coll::testutil {

struct ScopedEnv {
  const char* name;
  ScopedEnv(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~ScopedEnv() { unsetenv(name); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
};

// Creates an n-rank communicator with one thread per rank; runs `body` on each rank that
// initialised, then destroys it. Returns every rank's init result and error text.
inline std::vector<std::pair<collResult_t, std::string>> initAll(
    int n, const std::function<void(collComm_t, int)>& body = nullptr) {
  collUniqueId id;
  EXPECT_EQ(collGetUniqueId(&id), collSuccess);
  std::vector<std::pair<collResult_t, std::string>> out(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      collComm_t comm = nullptr;
      collResult_t res = collCommInitRank(&comm, n, id, r);
      out[static_cast<size_t>(r)] = {res, collGetLastError(nullptr)};
      if (res != collSuccess) return;
      if (body) body(comm, r);
      EXPECT_EQ(collCommDestroy(comm), collSuccess);
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

}  // namespace coll::testutil
