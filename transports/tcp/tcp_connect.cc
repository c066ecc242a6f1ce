// TCP connection setup through the bootstrap: the lower rank connects the streams and announces
// the stream count and stripe; the higher rank accepts and adopts them. With several rails both
// trade their rail addresses over the bootstrap and the higher rank listens on its own.
#include <poll.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "src/base/log.h"
#include "transports/stripe_pattern.h"
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

constexpr uint32_t kRailsMagic = 0x6c695254u;     // "TRil"
constexpr uint32_t kPreambleMagic = 0x6d615254u;  // "TRam"
constexpr size_t kTokenBytes = kTcpTokenBytes;

// Over the bootstrap (authenticated), from each end: its rail count, its listeners (the higher
// rank's; the lower rank's are its local addresses, for the log) and, from the higher rank, the
// token each of the lower rank's sockets must present, which proves it comes from that peer.
struct RailsMessage {
  uint32_t magic;
  uint32_t rails;
  uint8_t token[kTokenBytes];
  uint8_t address[kTcpMaxRails][kSocketAddressWire];
  uint32_t mbps[kTcpMaxRails];  // each rail's speed, 0 = unknown
};
// First bytes on each socket of a multi-rail connection, from the lower rank.
struct Preamble {
  uint32_t magic;
  uint32_t index;  // which stream this socket is
  uint32_t streams;
  uint32_t stripeLog2;
  uint8_t token[kTokenBytes];
};
static_assert(sizeof(Preamble) == kTcpPreambleBytes);

bool sameToken(const uint8_t* a, const uint8_t* b) {
  uint8_t diff = 0;  // every byte compared: the time says nothing about where they differ
  for (size_t i = 0; i < kTokenBytes; ++i) diff |= static_cast<uint8_t>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

Status parseTcpRails(const uint8_t* bytes, size_t size, bool fromListener, TcpRailsInfo* out) {
  RailsMessage in{};
  if (size != sizeof(in)) {
    return makeError(collRemoteError, "a tcp rail message of %zu bytes instead of %zu", size, sizeof(in));
  }
  memcpy(&in, bytes, sizeof(in));
  if (in.magic != kRailsMagic || in.rails < 1 || in.rails > static_cast<uint32_t>(kTcpMaxRails)) {
    return makeError(collRemoteError, "a malformed tcp rail message (magic %08x, %u rails)", in.magic, in.rails);
  }
  out->rails = in.rails;
  memcpy(out->token, in.token, kTokenBytes);
  out->mbps.assign(in.mbps, in.mbps + in.rails);
  out->listeners.clear();
  for (uint32_t r = 0; fromListener && r < in.rails; ++r) {
    SocketAddress a;
    if (!getSocketAddress(in.address[r], &a) || a.isWildcard()) {
      return makeError(collRemoteError, "a malformed tcp rail message (the address of rail %u)", r);
    }
    out->listeners.push_back(a);
  }
  return okStatus();
}

Status parseTcpPreamble(const uint8_t* bytes, size_t size, TcpPreamble* out) {
  Preamble pre{};
  if (size != sizeof(pre)) {
    return makeError(collRemoteError, "a tcp rail handshake of %zu bytes instead of %zu", size, sizeof(pre));
  }
  memcpy(&pre, bytes, sizeof(pre));
  if (pre.magic != kPreambleMagic || pre.streams < 1 || pre.streams > static_cast<uint32_t>(kTcpMaxStreams) ||
      pre.index >= pre.streams + kTcpMaxRails || pre.stripeLog2 < 6 || pre.stripeLog2 > 26) {
    return makeError(collRemoteError, "a malformed tcp rail handshake (magic %08x, stream %u of %u, stripe 2^%u)",
                     pre.magic, pre.index, pre.streams, pre.stripeLog2);
  }
  out->index = pre.index;
  out->streams = pre.streams;
  out->stripeLog2 = pre.stripeLog2;
  memcpy(out->token, pre.token, kTokenBytes);
  return okStatus();
}

namespace {

// The sockets of a connection over several rails. The lower rank connects socket i from its rail
// i mod rails to the higher rank's listener on the same rail, then one control socket per rail
// (indices streams + rail); the higher rank accepts on all its listeners, keeps sockets that
// present the token, and orders them by their index.
Status connectTcpRails(Bootstrap& bootstrap, int peer, TcpOptions* agreed, Deadline deadline,
                       const std::function<std::string(const char*)>& context, std::vector<Socket>* sockets,
                       std::vector<Socket>* controls) {
  const int me = bootstrap.rank();
  const int mine = static_cast<int>(agreed->rails.size());
  RailsMessage out{};
  out.magic = kRailsMagic;
  out.rails = static_cast<uint32_t>(mine);
  std::vector<Socket> listeners;
  if (me > peer) {
    std::random_device rd;
    for (size_t i = 0; i < kTokenBytes; ++i) out.token[i] = static_cast<uint8_t>(rd());
    for (int r = 0; r < mine; ++r) {
      Socket l;
      SocketAddress bound;
      COLL_TRY(Socket::listen(agreed->rails[r], kTcpMaxStreams, &l, &bound)
                   .withContext(context(("listening on rail " + agreed->rails[r].toString()).c_str())));
      putSocketAddress(out.address[r], bound);
      listeners.push_back(std::move(l));
    }
  } else {
    for (int r = 0; r < mine; ++r) putSocketAddress(out.address[r], agreed->rails[r]);
  }
  for (int r = 0; r < mine && r < static_cast<int>(agreed->railMbps.size()); ++r) out.mbps[r] = agreed->railMbps[r];
  COLL_TRY(bootstrap.send(peer, kTcpTagRails, &out, sizeof(out), deadline).withContext(context("rail addresses")));
  std::vector<uint8_t> raw;
  COLL_TRY(bootstrap.recv(peer, kTcpTagRails, &raw, sizeof(RailsMessage), deadline)
               .withContext(context("rail addresses (is COLL_TCP_RAILS the same on every rank?)")));
  TcpRailsInfo in;
  COLL_TRY(parseTcpRails(raw.data(), raw.size(), me < peer, &in).withContext(context("rail addresses")));
  const int rails = std::min(mine, static_cast<int>(in.rails));
  if (rails != mine) {
    COLL_WARN(me, "%s",
              context(("rank " + std::to_string(peer) + " has " + std::to_string(in.rails) +
                       " rail(s): using that many of this rank's " + std::to_string(mine))
                          .c_str())
                  .c_str());
  }
  // Each rail at the slower end's speed (unknown where either end does not know), as weights.
  std::vector<uint64_t> rates(static_cast<size_t>(rails));
  for (int r = 0; r < rails; ++r) {
    const uint64_t a = r < static_cast<int>(agreed->railMbps.size()) ? agreed->railMbps[r] : 0;
    const uint64_t b = in.mbps[static_cast<size_t>(r)];
    rates[static_cast<size_t>(r)] = a == 0 || b == 0 ? 0 : std::min(a, b);
  }
  const std::vector<uint32_t> weights = stripeWeights(rates);
  uint32_t cycle = 0;
  for (uint32_t w : weights) cycle += w;
  if (cycle > 1 && weights != std::vector<uint32_t>(weights.size(), 1)) {
    std::string text;
    for (int r = 0; r < rails; ++r) {
      text += (r ? ", " : "") + std::to_string(weights[static_cast<size_t>(r)]) + " on rail " + std::to_string(r) +
              " (" + std::to_string(rates[static_cast<size_t>(r)]) + " Mbit/s)";
    }
    COLL_INFO(me, "%s", context(("sockets per rail in the ratio " + text).c_str()).c_str());
  }
  const int per = static_cast<int>(cycle);
  if (me < peer) {
    // Every rail carries sockets in proportion to its weight: a whole number of weight cycles.
    agreed->streams = std::min(kTcpMaxStreams / per * per, (std::max(agreed->streams, per) + per - 1) / per * per);
    agreed->socketRails = tcpSocketRails(weights, agreed->streams);
    Preamble pre{};
    pre.magic = kPreambleMagic;
    pre.streams = static_cast<uint32_t>(agreed->streams);
    pre.stripeLog2 = log2Of(agreed->stripeBytes);
    agreed->stripeBytes = uint64_t{1} << pre.stripeLog2;
    memcpy(pre.token, in.token, kTokenBytes);
    for (int i = 0; i < agreed->streams + rails; ++i) {
      const int r = i < agreed->streams ? agreed->socketRails[static_cast<size_t>(i)] : i - agreed->streams;
      const SocketAddress& to = in.listeners[r];
      SocketAddress from = agreed->rails[r];
      from.setPort(0);
      Socket s;
      COLL_TRY(Socket::connect(to, deadline, &s, nullptr, &from)
                   .withContext(context(("connect on rail " + from.toString() + " to " + to.toString()).c_str())));
      pre.index = static_cast<uint32_t>(i);
      COLL_TRY(s.sendAll(&pre, sizeof(pre), deadline).withContext(context("handshake")));
      (i < agreed->streams ? sockets : controls)->push_back(std::move(s));
    }
    return okStatus();
  }
  // The higher rank: accept until every stream presented itself (strangers are dropped).
  std::vector<Socket> byIndex;
  std::vector<uint8_t> railOfIndex;  // the rail each index must arrive on
  int got = 0;
  uint32_t streams = 0, stripeLog2 = 0;
  while (streams == 0 || got < static_cast<int>(streams) + rails) {
    std::vector<pollfd> fds;
    for (const Socket& l : listeners) fds.push_back(pollfd{l.fd(), POLLIN, 0});
    const int n = ::poll(fds.data(), fds.size(), std::max(1, deadline.remainingMs()));
    if (deadline.expired()) {
      return makeError(collTimeout, "%s", context("the peer's rail sockets did not all arrive in time").c_str());
    }
    if (n <= 0) continue;
    for (size_t r = 0; r < fds.size(); ++r) {
      if (!(fds[r].revents & POLLIN)) continue;
      Socket s;
      SocketAddress from;
      if (!listeners[r].accept(deadline, &s, &from).ok()) continue;
      uint8_t wire[kTcpPreambleBytes];
      TcpPreamble pre;
      if (!s.recvAll(wire, sizeof(wire), Deadline::afterMs(std::min(5000, deadline.remainingMs()))).ok() ||
          !parseTcpPreamble(wire, sizeof(wire), &pre).ok() || !sameToken(pre.token, out.token)) {
        COLL_WARN(me, "%s",
                  context(("dropped a connection from " + from.toString() + " without a valid rail handshake").c_str())
                      .c_str());
        continue;
      }
      // Authenticated by the token, and each socket must agree with the first.
      if (streams != 0 && (pre.streams != streams || pre.stripeLog2 != stripeLog2)) {
        return makeError(collRemoteError, "%s",
                         context("rail handshakes that disagree (stream count or stripe)").c_str());
      }
      if (streams == 0) {
        streams = pre.streams;
        stripeLog2 = pre.stripeLog2;
        byIndex.resize(streams + static_cast<uint32_t>(rails));
      }
      if (pre.index >= byIndex.size()) {
        return makeError(collRemoteError, "%s", context("a rail socket with an index beyond the rails").c_str());
      }
      if (railOfIndex.empty()) {
        railOfIndex = tcpSocketRails(weights, static_cast<int>(streams));
        for (int r = 0; r < rails; ++r) railOfIndex.push_back(static_cast<uint8_t>(r));
      }
      if (railOfIndex[pre.index] != r) {
        return makeError(collRemoteError, "%s",
                         context(("socket " + std::to_string(pre.index) + " arrived on rail " + std::to_string(r) +
                                  " instead of rail " + std::to_string(railOfIndex[pre.index]))
                                     .c_str())
                             .c_str());
      }
      if (byIndex[pre.index].valid()) {
        return makeError(collRemoteError, "%s", context("two sockets claimed the same stream").c_str());
      }
      byIndex[pre.index] = std::move(s);
      ++got;
    }
  }
  agreed->streams = static_cast<int>(streams);
  agreed->stripeBytes = uint64_t{1} << stripeLog2;
  agreed->socketRails.assign(railOfIndex.begin(), railOfIndex.begin() + streams);
  for (size_t i = 0; i < byIndex.size(); ++i) (i < streams ? sockets : controls)->push_back(std::move(byIndex[i]));
  return okStatus();
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
  std::vector<Socket> sockets, controls;
  if (options.rails.size() > 1) {
    COLL_TRY(connectTcpRails(
        bootstrap, peer, &agreed, deadline, [&](const char* what) { return context(what); }, &sockets, &controls));
  } else if (me < peer) {
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
  std::vector<int> fds, controlFds;
  for (Socket& s : sockets) fds.push_back(s.release());
  // One rail left after the two ends agreed: no control socket, no failover to make.
  if (controls.size() >= 2) {
    for (Socket& s : controls) controlFds.push_back(s.release());
  }
  std::unique_ptr<TcpConnection> conn;
  COLL_TRY(TcpConnection::fromSockets(peer, std::move(fds), agreed, peerName, &conn, std::move(controlFds)));
  *out = std::move(conn);
  return okStatus();
}

}  // namespace coll
