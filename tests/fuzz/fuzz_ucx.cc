// libFuzzer target: the ucx transport's parsers of remote bytes: the handshake a peer sends over
// the bootstrap (checkUcxHello) and the check that decides where an arriving active message's
// bytes land in the receive ring (UcxConnection::dataHeaderFits).
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "transports/ucx/ucx_transport.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  if ((data[0] & 1) == 0) {
    (void)coll::checkUcxHello(data + 1, size - 1, data[0] >> 1);
    return 0;
  }
  // [1][DataHeader 32][delivered length 8][window: ring log2 1, consumed 8, in flight 8, recvSeq 8]
  using C = coll::UcxConnection;
  C::DataHeader h;
  uint64_t length, consumed, inFlight, recvSeq;
  if (size < 1 + sizeof(h) + 8 + 1 + 24) return 0;
  const uint8_t* p = data + 1;
  memcpy(&h, p, sizeof(h));
  memcpy(&length, p + 32, 8);
  const uint8_t ringLog2 = p[40];
  memcpy(&consumed, p + 41, 8);
  memcpy(&inFlight, p + 49, 8);
  memcpy(&recvSeq, p + 57, 8);
  // A window the receiver can be in: a ring of 4 KiB..4 GiB (a multiple of 64, as allocate makes
  // it; sometimes not a power of two), consumed <= received <= consumed + ring.
  C::RecvWindow w;
  w.ring = (uint64_t{1} << (12 + ringLog2 % 21)) - (ringLog2 & 0x80 ? 64 * (ringLog2 & 0x3f) : 0);
  w.consumed = consumed;
  w.received = consumed + inFlight % (w.ring + 1);
  if (w.received < consumed) return 0;  // the stream position never wraps 2^64
  w.recvSeq = recvSeq;
  if (!C::dataHeaderFits(h, static_cast<size_t>(length), w)) return 0;
  // Accepted: every byte lands inside the ring, in [received, consumed + ring) of the stream.
  const unsigned __int128 end = static_cast<unsigned __int128>(h.pos) + h.len;
  if (h.len == 0 || h.len != length || h.len > w.ring) __builtin_trap();
  if (h.pos % w.ring + h.len > w.ring) __builtin_trap();
  if (h.pos < w.received || end > static_cast<unsigned __int128>(w.consumed) + w.ring) __builtin_trap();
  if (h.seq < w.recvSeq || h.seq - w.recvSeq >= C::kMaxMessages) __builtin_trap();
  return 0;
}
