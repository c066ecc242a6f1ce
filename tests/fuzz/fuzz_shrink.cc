// libFuzzer target: the membership messages. collCommShrink's (the request a leader receives from each
// survivor and the answer each survivor receives from the leader): whatever they accept must re-encode
// to the same bytes. collCommGrow's announcement from rank 0: what it accepts re-encodes to bytes
// that decode to the same fields, with printable text.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "src/comm/grow.h"
#include "src/comm/shrink.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Byte 0: which message (mod 3: shrink request, shrink answer, grow announcement); bytes 1-2: the receiving communicator's size; the rest: the message.
  if (size < 3) return 0;
  const int nranks = 1 + (data[1] | (data[2] << 8));
  const uint8_t* msg = data + 3;
  const size_t len = size - 3;
  if (data[0] % 3 == 2) {
    coll::GrowAnnouncement a, b;
    if (!coll::decodeGrowAnnouncement(msg, len, &a).ok()) return 0;
    uint8_t again[coll::kGrowAnnouncementBytes];
    coll::encodeGrowAnnouncement(a, again);
    if (!coll::decodeGrowAnnouncement(again, sizeof(again), &b).ok()) __builtin_trap();
    if (b.code != a.code || b.nranks != a.nranks || b.message != a.message) __builtin_trap();
    for (char c : a.message) {
      if (c < 0x20 || c > 0x7e) __builtin_trap();
    }
  } else if (data[0] % 3 == 1) {
    coll::ShrinkReply r;
    if (!coll::decodeShrinkReply(msg, len, nranks, &r).ok()) return 0;
    std::vector<uint8_t> again = coll::encodeShrinkReply(r);
    if (again.size() != len || !std::equal(again.begin(), again.end(), msg)) __builtin_trap();
    if (len > coll::shrinkReplyMaxBytes(nranks)) __builtin_trap();
  } else {
    coll::ShrinkRequest r;
    if (!coll::decodeShrinkRequest(msg, len, nranks, &r).ok()) return 0;
    std::vector<uint8_t> again = coll::encodeShrinkRequest(r);
    if (again.size() != len || !std::equal(again.begin(), again.end(), msg)) __builtin_trap();
    if (len > coll::shrinkRequestMaxBytes(nranks)) __builtin_trap();
    for (size_t i = 0; i < r.listed.size(); ++i) {
      if (r.listed[i] < 0 || r.listed[i] >= nranks || (i > 0 && r.listed[i] <= r.listed[i - 1])) __builtin_trap();
    }
    for (size_t i = 0; i < r.roots.size(); ++i) {
      if (r.roots[i].block >= static_cast<uint32_t>(coll::shrinkRootCount(nranks))) __builtin_trap();
      if (i > 0 && r.roots[i].block <= r.roots[i - 1].block) __builtin_trap();
    }
  }
  return 0;
}
