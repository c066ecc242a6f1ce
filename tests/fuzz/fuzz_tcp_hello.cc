// libFuzzer target: the TCP transport's handshakes: parseTcpHello (what it accepts must survive an
// encode/parse round trip), and the multi-rail pair's rail message and per-socket preamble
// (parseTcpRails, parseTcpPreamble), whose accepted values must be in range, and the multi-rail
// control records (parseTcpControl: sizes within the bytes given, an encode/parse round trip).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "transports/tcp/tcp_transport.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (bool fromListener : {false, true}) {
    coll::TcpRailsInfo rails;
    if (coll::parseTcpRails(data, size, fromListener, &rails).ok() &&
        (rails.rails < 1 || rails.rails > static_cast<uint32_t>(coll::kTcpMaxRails) ||
         rails.listeners.size() != (fromListener ? rails.rails : 0u) || rails.mbps.size() != rails.rails)) {
      __builtin_trap();
    }
  }
  coll::TcpPreamble pre;
  if (coll::parseTcpPreamble(data, size, &pre).ok() &&
      (pre.streams < 1 || pre.streams > static_cast<uint32_t>(coll::kTcpMaxStreams) ||
       pre.index >= pre.streams + coll::kTcpMaxRails)) {
    __builtin_trap();
  }
  for (uint32_t rails : {2u, 8u}) {
    size_t bytes = 0;
    coll::TcpControl record;
    if (!coll::parseTcpControl(data, size, rails, &bytes, &record).ok() || bytes == 0 || bytes > size) continue;
    if (bytes > coll::kTcpControlMaxBytes || record.rail >= rails ||
        bytes != coll::kTcpControlHeaderBytes + 8 * record.values.size()) {
      __builtin_trap();
    }
    std::vector<uint8_t> wire;
    coll::encodeTcpControl(record, &wire);
    coll::TcpControl again;
    size_t againBytes = 0;
    if (!coll::parseTcpControl(wire.data(), wire.size(), rails, &againBytes, &again).ok() || againBytes != bytes ||
        again.values != record.values || again.type != record.type || again.flags != record.flags) {
      __builtin_trap();
    }
  }
  coll::TcpHello hello;
  if (!coll::parseTcpHello(data, size, &hello).ok()) return 0;
  if (hello.streams < 1 || hello.streams > static_cast<uint32_t>(coll::kTcpMaxStreams) || hello.stripeLog2 < 6 ||
      hello.stripeLog2 > 26) {
    __builtin_trap();
  }
  uint8_t wire[coll::kTcpHelloBytes];
  coll::encodeTcpHello(hello, wire);
  coll::TcpHello again;
  if (!coll::parseTcpHello(wire, sizeof(wire), &again).ok() || again.streams != hello.streams ||
      again.stripeLog2 != hello.stripeLog2) {
    __builtin_trap();
  }
  return 0;
}
