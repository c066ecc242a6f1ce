// Test helper: drives one Connection as both ends of a byte stream would, sending `total`
// pattern bytes in random slices while receiving and checking `total` bytes.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <thread>

#include "transports/transport.h"

namespace coll::testutil {

inline uint8_t patternByte(uint64_t pos, uint64_t seed) {
  return static_cast<uint8_t>((pos * 0x9E3779B1u + seed) >> 7);
}

// Returns false (with a message) on the first wrong byte, a transport error or a 60 s stall.
// `idle` runs when a pass moved nothing (default: yield); shared-memory tests sleep there.
inline bool pumpStream(Connection* c, uint64_t total, uint64_t sendSeed, uint64_t recvSeed, uint32_t rngSeed,
                       size_t maxSlice, std::string* error, const std::function<void()>& idle = {}) {
  std::mt19937 rng(rngSeed);
  uint64_t sent = 0, received = 0;
  auto start = std::chrono::steady_clock::now();
  while (sent < total || received < total || !c->sendsFlushed()) {
    bool moved = false;
    if (sent < total) {
      auto space = c->sendSpace();
      if (!space.empty()) {
        size_t n = std::min<uint64_t>({space.size(), total - sent, 1 + rng() % maxSlice});
        for (size_t i = 0; i < n; ++i) space[i] = std::byte{patternByte(sent + i, sendSeed)};
        c->sendCommit(n);
        sent += n;
        moved = true;
      }
    }
    bool progressed = false;
    Status st = c->progress(&progressed);
    if (!st.ok()) {
      *error = st.message();
      return false;
    }
    auto data = c->recvData();
    if (!data.empty()) {
      size_t n = std::min<size_t>(data.size(), 1 + rng() % maxSlice);
      for (size_t i = 0; i < n; ++i) {
        if (data[i] != std::byte{patternByte(received + i, recvSeed)}) {
          *error = "wrong byte at stream position " + std::to_string(received + i);
          return false;
        }
      }
      c->recvConsume(n);
      received += n;
      moved = true;
    }
    if (!moved && !progressed) {
      if (idle) idle();
      else std::this_thread::yield();
      if (std::chrono::steady_clock::now() - start > std::chrono::seconds(60)) {
        *error = "stalled at sent " + std::to_string(sent) + " received " + std::to_string(received);
        return false;
      }
    }
  }
  if (c->sentBytes() != total || c->receivedBytes() != total) {
    *error = "stream positions disagree";
    return false;
  }
  return true;
}

}  // namespace coll::testutil
