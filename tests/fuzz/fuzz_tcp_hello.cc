// libFuzzer target: the TCP transport's handshake (parseTcpHello), the only header the tcp
// transport reads off a data socket; what it accepts must survive an encode/parse round trip.
#include <cstddef>
#include <cstdint>

#include "transports/tcp/tcp_transport.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
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
