// TCP connection over already-connected sockets: staging rings, striping of the byte stream over
// the sockets, and non-blocking progress. Setup through the bootstrap is in tcp_connect.cc.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>

#include "src/base/align.h"
#include "src/base/config.h"
#include "src/base/log.h"
#include "transports/tcp/tcp_transport.h"

namespace coll {

const IntKnob kNsocksPerPeer("COLL_NSOCKS_PERPEER", "2",
                             "TCP streams per peer connection; large transfers are striped over them.",
                             {KnobSection::Transports, 50});
const BytesKnob kSocketBufferBytes("COLL_SOCKET_BUFFSIZE", "4M",
                                   "SO_SNDBUF / SO_RCVBUF of data sockets (0 = kernel default).",
                                   {KnobSection::Transports, 60});
const BytesKnob kTcpStagingBytes("COLL_TCP_STAGING_BYTES", "1M",
                                 "Send and receive staging ring per TCP connection (small enough that received slices "
                                 "are reduced while still in cache).",
                                 {KnobSection::Transports, 70});

namespace {

constexpr uint64_t kMaxStripe = 512ull << 10;
constexpr uint64_t kMinStripe = 64;
constexpr uint64_t kMaxStaging = 1ull << 32;

// The class goes in the IP header (TOS / IPv6 traffic class) for the network, and as the socket
// priority (its top three bits, the DSCP class selector) for this host's queueing disciplines and
// VLAN priority maps, which IPv6 would not otherwise derive from it.
Status applyTrafficClass(int fd, sa_family_t family, int trafficClass, int peer, const std::string& peerName) {
  const int tos = trafficClass;
  const bool v6 = family == AF_INET6;
  if (setsockopt(fd, v6 ? IPPROTO_IPV6 : IPPROTO_IP, v6 ? IPV6_TCLASS : IP_TOS, &tos, sizeof(tos)) != 0) {
    int err = errno;
    return makeError(collSystemError, "%s %d on the socket to rank %d (%s): %s", v6 ? "IPV6_TCLASS" : "IP_TOS", tos,
                     peer, peerName.c_str(), errnoText(err).c_str());
  }
  // Priority 7 needs CAP_NET_ADMIN: without it the socket keeps the kernel's priority, and the
  // class still travels in the header.
  const int priority = trafficClass >> 5;
  if (setsockopt(fd, SOL_SOCKET, SO_PRIORITY, &priority, sizeof(priority)) != 0) {
    int err = errno;
    COLL_INFO(-1, "SO_PRIORITY %d on the socket to rank %d (%s): %s; the traffic class %d is set in the IP header",
              priority, peer, peerName.c_str(), errnoText(err).c_str(), trafficClass);
  }
  return okStatus();
}

}  // namespace

const IntKnob kTcpRails("COLL_TCP_RAILS", "1",
                        "Interfaces (the first that COLL_SOCKET_IFNAME admits) each tcp connection spreads its sockets "
                        "over, 1-8; socket i uses rail i mod rails. Every rank must set the same.",
                        {KnobSection::Transports, 55});

Status tcpRailsFromConfig(std::vector<SocketAddress>* out) {
  out->clear();
  const int want = static_cast<int>(std::clamp<int64_t>(kTcpRails.get(), 1, kTcpMaxRails));
  if (want < 2) return okStatus();
  const std::string spec = kSocketIfname.get();
  std::vector<NetInterface> all;
  COLL_TRY(findInterfaces(spec, AF_UNSPEC, &all));
  // A name the user listed that matches nothing is a typo or a missing NIC, not a rail to drop.
  if (!spec.empty() && spec[0] != '^') {
    const bool exact = spec[0] == '=';
    size_t i = exact ? 1 : 0;
    while (i <= spec.size()) {
      const size_t comma = std::min(spec.find(',', i), spec.size());
      const std::string entry = spec.substr(i, comma - i);
      bool found = false;
      for (const NetInterface& n : all) found = found || interfaceMatches((exact ? "=" : "") + entry, n.name);
      if (!entry.empty() && !found) {
        return makeError(collInvalidUsage,
                         "COLL_SOCKET_IFNAME=%s: no interface that is up is named %s%s (COLL_TCP_RAILS=%d)",
                         spec.c_str(), entry.c_str(), exact ? "" : "*", want);
      }
      i = comma + 1;
    }
  }
  std::string names;
  std::vector<std::string> taken;
  for (const NetInterface& n : all) {
    // One address per interface (IPv4 first, as findInterfaces orders them): a rail is a NIC.
    if (std::find(taken.begin(), taken.end(), n.name) != taken.end()) continue;
    taken.push_back(n.name);
    names += (names.empty() ? "" : ", ") + n.name + " " + n.address.toString();
    if (static_cast<int>(out->size()) < want) out->push_back(n.address);
  }
  if (static_cast<int>(out->size()) < want) {
    return makeError(collInvalidUsage,
                     "COLL_TCP_RAILS=%d but only %zu interface address(es) that COLL_SOCKET_IFNAME='%s' admits are up: "
                     "%s",
                     want, out->size(), spec.c_str(), names.empty() ? "none" : names.c_str());
  }
  return okStatus();
}

SocketAddress TcpConnection::streamLocalAddress(int i) const {
  SocketAddress a;
  a.length = sizeof(a.storage);
  if (getsockname(streams_[static_cast<size_t>(i)].fd, reinterpret_cast<sockaddr*>(&a.storage), &a.length) != 0) {
    a.length = 0;
  }
  return a;
}

TcpOptions tcpOptionsFromConfig() {
  TcpOptions o;
  o.streams = static_cast<int>(std::clamp<int64_t>(kNsocksPerPeer.get(), 1, kTcpMaxStreams));
  o.socketBufferBytes = static_cast<int>(std::min<uint64_t>(kSocketBufferBytes.get(), INT_MAX / 2));
  o.stagingBytes = std::clamp<uint64_t>(roundUp(kTcpStagingBytes.get(), 64), 4096, kMaxStaging);
  // At least two stripes per stream in the ring, so a socket has the next stripe to fill while
  // the consumer drains the previous one.
  uint64_t perStream = o.stagingBytes / (2 * static_cast<uint64_t>(o.streams));
  o.stripeBytes = std::clamp<uint64_t>(floorPow2(std::max<uint64_t>(perStream, 1)), kMinStripe, kMaxStripe);
  return o;
}

Status TcpConnection::fromSockets(int peer, std::vector<int> fds, const TcpOptions& options, std::string peerName,
                                  std::unique_ptr<TcpConnection>* out) {
  std::unique_ptr<TcpConnection> c(new TcpConnection());
  c->peer_ = peer;
  c->peerName_ = std::move(peerName);
  for (int fd : fds) c->streams_.push_back(Stream{fd, 0, 0});  // the destructor closes them
  if (fds.empty() || fds.size() > static_cast<size_t>(kTcpMaxStreams)) {
    return makeError(collInvalidArgument, "TCP connection to rank %d: %zu sockets (expected 1..%d)", peer, fds.size(),
                     kTcpMaxStreams);
  }
  if (!isPow2(options.stripeBytes) || options.stripeBytes < kMinStripe || options.stripeBytes > (64ull << 20)) {
    return makeError(collInvalidArgument,
                     "TCP connection to rank %d: stripe of %llu bytes (expected a power "
                     "of two between 64 bytes and 64 MiB)",
                     peer, static_cast<unsigned long long>(options.stripeBytes));
  }
  c->stripe_ = options.stripeBytes;
  c->railed_ = options.rails.size() > 1;
  c->ring_ = StreamRing(roundUp(std::clamp<uint64_t>(options.stagingBytes, c->stripe_, kMaxStaging), c->stripe_));
  c->skip_ = (fds.size() - 1) * c->stripe_;
  for (size_t i = 0; i < fds.size(); ++i) {
    Stream& s = c->streams_[i];
    if (s.fd < 0) {
      return makeError(collInvalidArgument, "TCP connection to rank %d: socket %zu is not open", peer, i);
    }
    s.sendPos = s.recvPos = i * c->stripe_;
    int one = 1;
    // A unix socketpair (tests) has no TCP options; only a real TCP socket must accept them.
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    bool isTcp = getsockname(s.fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0 &&
                 (addr.ss_family == AF_INET || addr.ss_family == AF_INET6);
    if (isTcp && setsockopt(s.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
      int err = errno;
      return makeError(collSystemError, "TCP_NODELAY on the socket to rank %d (%s): %s", peer, c->peerName_.c_str(),
                       errnoText(err).c_str());
    }
    if (isTcp && options.trafficClass != kTrafficClassUnset) {
      COLL_TRY(applyTrafficClass(s.fd, addr.ss_family, options.trafficClass, peer, c->peerName_));
    }
    if (options.socketBufferBytes > 0) {
      int b = options.socketBufferBytes;
      // Best effort: the kernel clamps to net.core.{w,r}mem_max and that is not an error.
      (void)setsockopt(s.fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof(b));
      (void)setsockopt(s.fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof(b));
    }
  }
  c->sendRing_ = static_cast<std::byte*>(aligned_alloc(4096, roundUp(c->ring_.capacity(), 4096)));
  c->recvRing_ = static_cast<std::byte*>(aligned_alloc(4096, roundUp(c->ring_.capacity(), 4096)));
  if (c->sendRing_ == nullptr || c->recvRing_ == nullptr) {
    return makeError(collSystemError,
                     "cannot allocate 2 x %llu bytes of TCP staging for rank %d; lower "
                     "COLL_TCP_STAGING_BYTES",
                     static_cast<unsigned long long>(c->ring_.capacity()), peer);
  }
  // Non-blocking from here on (MSG_DONTWAIT covers our calls; the flag also covers anyone who
  // polls the fds and then reads).
  for (const Stream& s : c->streams_) {
    int flags = fcntl(s.fd, F_GETFL, 0);
    if (flags < 0 || fcntl(s.fd, F_SETFL, flags | O_NONBLOCK) != 0) {
      int err = errno;
      return makeError(collSystemError, "cannot make the socket to rank %d (%s) non-blocking: %s", peer,
                       c->peerName_.c_str(), errnoText(err).c_str());
    }
  }
  COLL_TRACE(-1, "TCP connection to rank %d (%s): %zu streams, stripe %llu, ring %llu", peer, c->peerName_.c_str(),
             fds.size(), static_cast<unsigned long long>(c->stripe_),
             static_cast<unsigned long long>(c->ring_.capacity()));
  *out = std::move(c);
  return okStatus();
}

TcpConnection::~TcpConnection() {
  for (Stream& s : streams_) {
    if (s.fd >= 0) ::close(s.fd);
  }
  free(sendRing_);
  free(recvRing_);
}

std::span<std::byte> TcpConnection::sendSpace() {
  return {sendRing_ + ring_.offset(committed_), ring_.writable(committed_, sendFreed_)};
}

void TcpConnection::sendCommit(size_t bytes) { committed_ += bytes; }

std::span<const std::byte> TcpConnection::recvData() {
  return {recvRing_ + ring_.offset(consumed_), ring_.readable(consumed_, received_)};
}

void TcpConnection::recvConsume(size_t bytes) { consumed_ += bytes; }

bool TcpConnection::sendPending(const Stream& s) const {
  return s.sendPos < std::min((s.sendPos / stripe_ + 1) * stripe_, committed_);
}

std::string TcpConnection::where(const Stream& s) const {
  // Over several rails the socket's own addresses say which rail failed (tcp has no failover).
  if (!railed_) return peerName_;
  SocketAddress local, remote;
  local.length = remote.length = sizeof(local.storage);
  (void)getsockname(s.fd, reinterpret_cast<sockaddr*>(&local.storage), &local.length);
  (void)getpeername(s.fd, reinterpret_cast<sockaddr*>(&remote.storage), &remote.length);
  return peerName_ + ", on the rail from " + local.toString() + " to " + remote.toString();
}

Status TcpConnection::socketError(const Stream& s, int err, const char* what) const {
  const std::string where = this->where(s);
  if (err == ECONNRESET || err == EPIPE || err == ENOTCONN || err == ETIMEDOUT || err == EHOSTUNREACH) {
    return makeError(collRemoteError,
                     "rank %d (%s) reset the connection (%s during %s); check that rank's "
                     "log and the network between the two hosts",
                     peer_, where.c_str(), errnoText(err).c_str(), what);
  }
  return makeError(collSystemError, "%s on the connection to rank %d (%s) failed: %s", what, peer_, where.c_str(),
                   errnoText(err).c_str());
}

Status TcpConnection::sendOn(Stream& s, bool* progressed) {
  for (;;) {
    const uint64_t stripeEnd = (s.sendPos / stripe_ + 1) * stripe_;
    const uint64_t end = std::min(stripeEnd, committed_);
    if (s.sendPos >= end) return okStatus();
    const uint64_t len = end - s.sendPos;
    ssize_t n = ::send(s.fd, sendRing_ + ring_.offset(s.sendPos), len, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return okStatus();
      if (errno == EINTR) continue;
      return socketError(s, errno, "send");
    }
    *progressed = true;
    s.sendPos += static_cast<uint64_t>(n);
    if (s.sendPos == stripeEnd) s.sendPos += skip_;
    // A short write means the socket buffer is full: the next call would only see EAGAIN.
    if (static_cast<uint64_t>(n) < len) return okStatus();
  }
}

Status TcpConnection::recvOn(Stream& s, bool* progressed) {
  for (;;) {
    const uint64_t stripeEnd = (s.recvPos / stripe_ + 1) * stripe_;
    const uint64_t end = std::min(stripeEnd, ring_.limit(consumed_));
    if (s.recvPos >= end) return okStatus();
    const uint64_t len = end - s.recvPos;
    if (s.closed) return okStatus();
    ssize_t n = ::recv(s.fd, recvRing_ + ring_.offset(s.recvPos), len, MSG_DONTWAIT);
    // The peer's close is not an error by itself (it may have finished with us); checkHealth()
    // reports it when this rank still waits for bytes from it.
    if (n == 0) {
      s.closed = true;
      if (closedReason_.ok()) {
        closedReason_ = makeError(collRemoteError,
                                  "rank %d (%s) closed the connection; check that rank's log for "
                                  "why it exited",
                                  peer_, where(s).c_str());
      }
      return okStatus();
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return okStatus();
      if (errno == EINTR) continue;
      if (errno == ECONNRESET) {
        s.closed = true;
        if (closedReason_.ok()) closedReason_ = socketError(s, errno, "recv");
        return okStatus();
      }
      return socketError(s, errno, "recv");
    }
    *progressed = true;
    s.recvPos += static_cast<uint64_t>(n);
    if (s.recvPos == stripeEnd) s.recvPos += skip_;
    if (static_cast<uint64_t>(n) < len) return okStatus();
  }
}

Status TcpConnection::progress(bool* progressed) {
  bool any = false;
  uint64_t minSend = UINT64_MAX;
  uint64_t minRecv = UINT64_MAX;
  for (Stream& s : streams_) {
    COLL_TRY(sendOn(s, &any));
    COLL_TRY(recvOn(s, &any));
    minSend = std::min(minSend, s.sendPos);
    minRecv = std::min(minRecv, s.recvPos);
  }
  // A byte before every socket's next position was sent (received) by its socket: the socket
  // positions only move forward through their own stripes.
  sendFreed_ = std::min(minSend, committed_);
  received_ = minRecv;
  if (progressed != nullptr) *progressed = any;
  return okStatus();
}

void TcpConnection::appendPollFds(std::vector<pollfd>* fds) const {
  for (const Stream& s : streams_) {
    if (s.closed) continue;  // always readable: it would turn the wait into a spin
    short events = POLLIN;
    if (sendPending(s)) events |= POLLOUT;
    fds->push_back(pollfd{s.fd, events, 0});
  }
}

}  // namespace coll
