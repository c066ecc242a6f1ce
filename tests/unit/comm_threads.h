// Test helpers: communicators whose ranks are threads of the test process, and knobs set for a
// scope.
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

// Creates `n` communicators (one per thread, as ranks; made with `config` when given), runs
// `body(rank, comm)` on each rank that initialised, then destroys them. Returns every rank's init
// result and error text.
inline std::vector<std::pair<collResult_t, std::string>> initAll(
    int n, const std::function<void(int, collComm_t)>& body = nullptr, const collConfig_t* config = nullptr) {
  std::vector<std::pair<collResult_t, std::string>> out(static_cast<size_t>(n));
  collUniqueId id;
  EXPECT_EQ(collGetUniqueId(&id), collSuccess) << collGetLastError(nullptr);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      collComm_t comm = nullptr;
      collConfig_t rankConfig = config ? *config : collConfig_t COLL_CONFIG_INITIALIZER;
      const collResult_t res =
          config ? collCommInitRankConfig(&comm, n, id, r, &rankConfig) : collCommInitRank(&comm, n, id, r);
      out[static_cast<size_t>(r)] = {res, collGetLastError(nullptr)};
      if (res != collSuccess) return;
      if (body) body(r, comm);
      EXPECT_EQ(collCommDestroy(comm), collSuccess) << "rank " << r;
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

// As initAll, for tests that need every rank to initialise.
inline void withComms(int n, const std::function<void(int, collComm_t)>& body, const collConfig_t* config = nullptr) {
  int r = 0;
  for (const auto& [res, msg] : initAll(n, body, config)) EXPECT_EQ(res, collSuccess) << "rank " << r++ << ": " << msg;
}

struct ScopedEnv {
  const char* name;
  ScopedEnv(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~ScopedEnv() { unsetenv(name); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
};

}  // namespace coll::testutil
