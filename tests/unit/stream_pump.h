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
#include <vector>

#include "transports/transport.h"

namespace coll::testutil {

inline uint8_t patternByte(uint64_t pos, uint64_t seed) {
  return static_cast<uint8_t>((pos * 0x9E3779B1u + seed) >> 7);
}

// A receive posted the way the executor posts one (Connection::postRecv): units of the stream
// that the transport applies itself are checked against the pattern there.
struct PumpPost : PostedRecv {
  uint64_t recvSeed = 0;
  uint64_t wrong = UINT64_MAX;  // first wrong stream position seen by apply
  uint64_t appliedUnits = 0;
  static void check(PostedRecv* self, const std::byte* data, uint64_t n) {
    auto* p = static_cast<PumpPost*>(self);
    const uint64_t at = p->streamPos + p->applied * p->unitBytes;
    for (uint64_t i = 0; i < n * p->unitBytes; ++i) {
      if (data[i] != std::byte{patternByte(at + i, p->recvSeed)} && p->wrong == UINT64_MAX) p->wrong = at + i;
    }
    p->appliedUnits += n;
  }
};

// Returns false (with a message) on the first wrong byte, a transport error or a 60 s stall.
// `idle` runs when a pass moved nothing (default: yield); shared-memory tests sleep there.
// `postUnit` > 0: both ends move whole units of that many bytes, and the receiver posts its next
// units (a random number of them, as dependencies would allow) before each progress; `post`
// (optional) reports what the transport applied in place. `direct` (optional): the sender offers
// each slice to Connection::sendDirect first, from a buffer it scribbles over as soon as the call
// returns (the transport must not read it later), and counts there the bytes taken. `everyPass`
// (optional) runs after each progress call, e.g. to break something mid-stream.
inline bool pumpStream(Connection* c, uint64_t total, uint64_t sendSeed, uint64_t recvSeed, uint32_t rngSeed,
                       size_t maxSlice, std::string* error, const std::function<void()>& idle = {}, size_t postUnit = 0,
                       PumpPost* post = nullptr, uint64_t* direct = nullptr,
                       const std::function<void()>& everyPass = {}) {
  std::mt19937 rng(rngSeed);
  uint64_t sent = 0, received = 0;
  PumpPost own;
  if (post == nullptr) post = &own;
  post->recvSeed = recvSeed;
  post->apply = &PumpPost::check;
  const size_t unit = postUnit > 0 ? postUnit : 1;
  auto start = std::chrono::steady_clock::now();
  while (sent < total || received < total || !c->sendsFlushed()) {
    bool moved = false;
    if (direct != nullptr && sent < total) {
      std::vector<std::byte> scratch(std::min<uint64_t>(total - sent, 1 + rng() % maxSlice));
      for (size_t i = 0; i < scratch.size(); ++i) scratch[i] = std::byte{patternByte(sent + i, sendSeed)};
      const size_t n = c->sendDirect(scratch.data(), scratch.size(), unit);
      std::fill(scratch.begin(), scratch.end(), std::byte{0xEE});
      if (n % unit != 0 || n > scratch.size()) {
        *error = "sendDirect took " + std::to_string(n) + " of " + std::to_string(scratch.size()) + " bytes";
        return false;
      }
      sent += n;
      *direct += n;
      if (n > 0) moved = true;
    }
    if (sent < total) {
      auto space = c->sendSpace();
      if (!space.empty()) {
        size_t n = std::min<uint64_t>({space.size(), total - sent, 1 + rng() % maxSlice}) / unit * unit;
        for (size_t i = 0; i < n; ++i) space[i] = std::byte{patternByte(sent + i, sendSeed)};
        c->sendCommit(n);
        sent += n;
        if (n > 0) moved = true;
      }
    }
    if (postUnit > 0 && received < total) {
      post->streamPos = received;
      post->units = 1 + rng() % ((total - received) / unit);
      post->unitBytes = unit;
      post->applied = 0;
      c->postRecv(post);
    }
    bool progressed = false;
    Status st = c->progress(&progressed);
    if (everyPass) everyPass();
    if (postUnit > 0) {
      c->postRecv(nullptr);
      received += post->applied * unit;
      if (post->applied > 0) moved = true;
      post->applied = 0;
      if (post->wrong != UINT64_MAX) {
        *error = "wrong byte applied in place at stream position " + std::to_string(post->wrong);
        return false;
      }
      if (c->receivedBytes() != received) {
        *error = "the transport applied bytes it did not count as received";
        return false;
      }
    }
    if (!st.ok()) {
      *error = st.message();
      return false;
    }
    auto data = c->recvData();
    if (!data.empty()) {
      // Posting, the receiver drains what arrived, as the executor does.
      size_t n = (postUnit > 0 ? data.size() : std::min<size_t>(data.size(), 1 + rng() % maxSlice)) / unit * unit;
      for (size_t i = 0; i < n; ++i) {
        if (data[i] != std::byte{patternByte(received + i, recvSeed)}) {
          *error = "wrong byte at stream position " + std::to_string(received + i);
          return false;
        }
      }
      c->recvConsume(n);
      received += n;
      if (n > 0) moved = true;
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
