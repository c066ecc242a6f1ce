// TCP connection setup through the bootstrap: the lower rank connects the streams and announces
// the stream count and stripe; the higher rank accepts and adopts them.
#include <cstring>

#include "src/base/log.h"
#include "transports/tcp/tcp_transport.h"

namespace coll {

namespace {

constexpr uint32_t kHelloMagic = 0x636f5443u;  // "coTC"
constexpr uint32_t kHelloVersion = 1;

uint32_t log2Of(uint64_t v) {
  uint32_t l = 0;
  while ((uint64_t{1} << (l + 1)) <= v) ++l;
  return l;
}

}  // namespace

// Host byte order, as before this was a function: both ends are the same build.
void encodeTcpHello(const TcpHello& hello, uint8_t out[kTcpHelloBytes]) {
  const uint32_t words[4] = {kHelloMagic, kHelloVersion, hello.streams, hello.stripeLog2};
  memcpy(out, words, sizeof(words));
}

Status parseTcpHello(const uint8_t* bytes, size_t size, TcpHello* out) {
  uint32_t w[4] = {};
  if (size != kTcpHelloBytes) {
    return makeError(collRemoteError, "a TCP handshake of %zu bytes instead of %zu", size, kTcpHelloBytes);
  }
  memcpy(w, bytes, sizeof(w));
  // Untrusted until checked: the count bounds the accept loop and the stripe sizes our rings.
  if (w[0] != kHelloMagic || w[1] != kHelloVersion || w[2] < 1 || w[2] > static_cast<uint32_t>(kTcpMaxStreams) ||
      w[3] < 6 || w[3] > 26) {
    return makeError(collRemoteError,
                     "a malformed TCP handshake (magic %08x, version %u, %u streams, stripe 2^%u); are both "
                     "ranks running the same library version?",
                     w[0], w[1], w[2], w[3]);
  }
  out->streams = w[2];
  out->stripeLog2 = w[3];
  return okStatus();
}

Status connectTcp(Bootstrap& bootstrap, int peer, const TcpOptions& options, Deadline deadline,
                  std::unique_ptr<Connection>* out) {
  const int me = bootstrap.rank();
  if (peer == me || peer < 0 || peer >= bootstrap.nranks()) {
    return makeError(collInternalError, "rank %d: no TCP connection to rank %d", me, peer);
  }
  const std::string peerName = bootstrap.peer(peer).address.toString();
  auto context = [&](const char* what) {
    return std::string("TCP connection to rank ") + std::to_string(peer) + " (" + peerName + "): " + what;
  };
  TcpOptions agreed = options;
  std::vector<Socket> sockets;
  if (me < peer) {
    if (agreed.streams < 1 || agreed.streams > kTcpMaxStreams) {
      return makeError(collInvalidArgument, "COLL_NSOCKS_PERPEER=%d is out of range 1..%d", agreed.streams,
                       kTcpMaxStreams);
    }
    Socket first;
    COLL_TRY(bootstrap.connectData(peer, kTcpTagBase, &first, deadline).withContext(context("connect")));
    TcpHello hello{static_cast<uint32_t>(agreed.streams), log2Of(agreed.stripeBytes)};
    agreed.stripeBytes = uint64_t{1} << hello.stripeLog2;
    uint8_t wire[kTcpHelloBytes];
    encodeTcpHello(hello, wire);
    COLL_TRY(first.sendAll(wire, sizeof(wire), deadline).withContext(context("handshake")));
    sockets.push_back(std::move(first));
    for (int i = 1; i < agreed.streams; ++i) {
      Socket s;
      COLL_TRY(bootstrap.connectData(peer, kTcpTagBase + i, &s, deadline).withContext(context("connect")));
      sockets.push_back(std::move(s));
    }
  } else {
    Socket first;
    COLL_TRY(bootstrap.acceptData(peer, kTcpTagBase, &first, deadline).withContext(context("accept")));
    uint8_t wire[kTcpHelloBytes];
    COLL_TRY(first.recvAll(wire, sizeof(wire), deadline).withContext(context("handshake")));
    TcpHello hello;
    COLL_TRY(parseTcpHello(wire, sizeof(wire), &hello).withContext(context("handshake")));
    if (static_cast<int>(hello.streams) != agreed.streams) {
      COLL_INFO(me, "TCP to rank %d: using its %u streams (COLL_NSOCKS_PERPEER=%d here)", peer, hello.streams,
                agreed.streams);
    }
    agreed.streams = static_cast<int>(hello.streams);
    agreed.stripeBytes = uint64_t{1} << hello.stripeLog2;
    sockets.push_back(std::move(first));
    for (int i = 1; i < agreed.streams; ++i) {
      Socket s;
      COLL_TRY(bootstrap.acceptData(peer, kTcpTagBase + i, &s, deadline).withContext(context("accept")));
      sockets.push_back(std::move(s));
    }
  }
  std::vector<int> fds;
  for (Socket& s : sockets) fds.push_back(s.release());
  std::unique_ptr<TcpConnection> conn;
  COLL_TRY(TcpConnection::fromSockets(peer, std::move(fds), agreed, peerName, &conn));
  *out = std::move(conn);
  return okStatus();
}

}  // namespace coll
