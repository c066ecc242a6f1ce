// libFuzzer target: the fault-tolerance control messages (a heartbeat, a notice down a notice
// tree, a FAILED notice and the answer to a wait-for query) that a rank's bootstrap listener / query receives;
// accepted input must be in range.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "src/oob/failure.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Byte 0: which message; bytes 1-2: the receiving communicator's size; the rest: the message.
  if (size < 3) return 0;
  const int nranks = 1 + (data[1] | (data[2] << 8));
  const uint8_t* msg = data + 3;
  const size_t len = size - 3;
  if (data[0] & 4) {
    coll::HeartbeatKind kind;
    if (!coll::decodeHeartbeat(msg, len, &kind)) return 0;
    uint8_t again[coll::kHeartbeatWire];
    coll::encodeHeartbeat(kind, again);
    if (len != sizeof(again) || !std::equal(again, again + sizeof(again), msg)) __builtin_trap();
  } else if (data[0] & 2) {
    coll::RelayMessage m;
    if (!coll::decodeRelay(msg, len, nranks, &m)) return 0;
    if (m.origin < 0 || m.origin >= nranks || m.payload.size() > 8 + coll::kCtlMaxReason) __builtin_trap();
    if (m.tag != coll::kCtlTagFailed && m.tag != coll::kCtlTagRevoked && m.tag != coll::kCtlTagCycle) __builtin_trap();
    std::vector<uint8_t> again = coll::encodeRelay(m);
    if (again.size() != len || !std::equal(again.begin(), again.end(), msg)) __builtin_trap();
  } else if (data[0] & 1) {
    coll::WaitForAnswer a;
    if (!coll::decodeWaitFor(msg, len, nranks, &a)) return 0;
    if (a.waitPeer < -1 || a.waitPeer >= nranks || a.failedRank < -1 || a.failedRank >= nranks) __builtin_trap();
    uint8_t again[coll::kWaitForWire];
    coll::encodeWaitFor(a, again);
    if (len != sizeof(again) || !std::equal(again, again + sizeof(again), msg)) __builtin_trap();
  } else {
    coll::FailedMessage m;
    if (!coll::decodeFailed(msg, len, nranks, &m)) return 0;
    if (m.rank < 0 || m.rank >= nranks || m.reason.size() > coll::kCtlMaxReason) __builtin_trap();
    for (char c : m.reason) {
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) __builtin_trap();
    }
    std::vector<uint8_t> again = coll::encodeFailed(m);
    if (again.size() != len) __builtin_trap();
  }
  return 0;
}
