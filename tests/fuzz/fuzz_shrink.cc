// libFuzzer target: collCommShrink's messages (the request a leader receives from each survivor and
// the answer each survivor receives from the leader); whatever they accept must re-encode to the same bytes.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "src/comm/shrink.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Byte 0: which message; bytes 1-2: the receiving communicator's size; the rest: the message.
  if (size < 3) return 0;
  const int nranks = 1 + (data[1] | (data[2] << 8));
  const uint8_t* msg = data + 3;
  const size_t len = size - 3;
  if (data[0] & 1) {
    coll::ShrinkReply r;
    if (!coll::decodeShrinkReply(msg, len, nranks, &r).ok()) return 0;
    std::vector<uint8_t> again = coll::encodeShrinkReply(r);
    if (again.size() != len || !std::equal(again.begin(), again.end(), msg)) __builtin_trap();
    if (len > coll::shrinkReplyMaxBytes()) __builtin_trap();
  } else {
    coll::ShrinkRequest r;
    if (!coll::decodeShrinkRequest(msg, len, nranks, &r).ok()) return 0;
    std::vector<uint8_t> again = coll::encodeShrinkRequest(r);
    if (again.size() != len || !std::equal(again.begin(), again.end(), msg)) __builtin_trap();
    if (len > coll::shrinkRequestMaxBytes(nranks)) __builtin_trap();
    for (size_t i = 0; i < r.listed.size(); ++i) {
      if (r.listed[i] < 0 || r.listed[i] >= nranks || (i > 0 && r.listed[i] <= r.listed[i - 1])) __builtin_trap();
    }
  }
  return 0;
}
