// runInParallel: fn(i) for every i < count, from up to maxThreads threads (the caller's included),
// for a handful of blocking exchanges (control messages to several ranks) that must not queue
// behind one slow peer.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace coll {

template <typename Fn>
void runInParallel(size_t count, size_t maxThreads, Fn&& fn) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < count; i = next++) fn(i);
  };
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < std::min(count, maxThreads); ++t) helpers.emplace_back(worker);
  worker();
  for (std::thread& t : helpers) t.join();
}

}  // namespace coll
