// TCP connection over already-connected sockets: staging rings, striping of the byte stream over
// the sockets, non-blocking progress, and over several rails the control records, acknowledgements
// and the move of a lost rail's stripes to the others. Setup through the bootstrap is in
// tcp_connect.cc.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "src/base/align.h"
#include "src/base/config.h"
#include "src/base/log.h"
#include "transports/stripe_pattern.h"
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
                        "over, 1-8, with sockets in proportion to the rails' speeds (COLL_TCP_RAIL_MBPS); a rail lost "
                        "mid-run moves its traffic to the others. Every rank must set the same.",
                        {KnobSection::Transports, 55});

const StringKnob kTcpRailMbps("COLL_TCP_RAIL_MBPS", "",
                              "With COLL_TCP_RAILS > 1: each rail's speed in Mbit/s, comma-separated in rail order "
                              "(e.g. 25000,10000), instead of what the interfaces report (veths and shaped links "
                              "report nothing useful). A pair gives each rail sockets in proportion to the slower "
                              "end's speed.",
                              {KnobSection::Transports, 57});

namespace {

Status railMbpsFromKnob(size_t rails, std::vector<uint32_t>* out) {
  const std::string spec = kTcpRailMbps.get();
  std::vector<uint32_t> v;
  size_t i = 0;
  while (i <= spec.size()) {
    const size_t comma = std::min(spec.find(',', i), spec.size());
    const std::optional<double> x = parseNumber(trimSpace(spec.substr(i, comma - i)));
    if (!x || *x < 1 || *x > 1e9 || *x != static_cast<double>(static_cast<uint32_t>(*x))) {
      return makeError(collInvalidUsage, "COLL_TCP_RAIL_MBPS=%s: want one whole number of Mbit/s per rail",
                       spec.c_str());
    }
    v.push_back(static_cast<uint32_t>(*x));
    i = comma + 1;
  }
  if (v.size() != rails) {
    return makeError(collInvalidUsage, "COLL_TCP_RAIL_MBPS=%s gives %zu speed(s) for COLL_TCP_RAILS=%zu rails",
                     spec.c_str(), v.size(), rails);
  }
  *out = std::move(v);
  return okStatus();
}

}  // namespace

std::vector<uint8_t> tcpSocketRails(const std::vector<uint32_t>& weights, int streams) {
  const StripePattern pattern(weights, 1);
  std::vector<uint8_t> rails(static_cast<size_t>(std::max(streams, 0)));
  for (size_t i = 0; i < rails.size(); ++i) rails[i] = static_cast<uint8_t>(pattern.lane[i % pattern.size()]);
  return rails;
}

Status tcpRailsFromConfig(std::vector<SocketAddress>* out, std::vector<uint32_t>* mbps) {
  out->clear();
  if (mbps != nullptr) mbps->clear();
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
  std::vector<uint32_t> speeds;
  for (const NetInterface& n : all) {
    // One address per interface (IPv4 first, as findInterfaces orders them): a rail is a NIC.
    if (std::find(taken.begin(), taken.end(), n.name) != taken.end()) continue;
    taken.push_back(n.name);
    names += (names.empty() ? "" : ", ") + n.name + " " + n.address.toString();
    if (static_cast<int>(out->size()) < want) {
      out->push_back(n.address);
      speeds.push_back(interfaceSpeedMbps(n.name));
    }
  }
  if (static_cast<int>(out->size()) < want) {
    return makeError(collInvalidUsage,
                     "COLL_TCP_RAILS=%d but only %zu interface address(es) that COLL_SOCKET_IFNAME='%s' admits are up: "
                     "%s",
                     want, out->size(), spec.c_str(), names.empty() ? "none" : names.c_str());
  }
  if (!kTcpRailMbps.get().empty()) COLL_TRY(railMbpsFromKnob(out->size(), &speeds));
  if (mbps != nullptr) *mbps = std::move(speeds);
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

const IntKnob kTcpRailTimeoutMs("COLL_TCP_RAIL_TIMEOUT_MS", "5000",
                                "With COLL_TCP_RAILS > 1: how long a rail may leave sent bytes unacknowledged "
                                "(TCP_USER_TIMEOUT) before it is declared lost and its traffic moves to the other "
                                "rails; 0 = the kernel's retransmission limit (minutes).",
                                {KnobSection::Transports, 56});

TcpOptions tcpOptionsFromConfig() {
  TcpOptions o;
  o.railTimeoutMs = static_cast<int>(std::clamp<int64_t>(kTcpRailTimeoutMs.get(), 0, INT_MAX));
  o.streams = static_cast<int>(std::clamp<int64_t>(kNsocksPerPeer.get(), 1, kTcpMaxStreams));
  o.socketBufferBytes = static_cast<int>(std::min<uint64_t>(kSocketBufferBytes.get(), INT_MAX / 2));
  o.stagingBytes = std::clamp<uint64_t>(roundUp(kTcpStagingBytes.get(), 64), 4096, kMaxStaging);
  // At least two stripes per stream in the ring, so a socket has the next stripe to fill while
  // the consumer drains the previous one.
  uint64_t perStream = o.stagingBytes / (2 * static_cast<uint64_t>(o.streams));
  o.stripeBytes = std::clamp<uint64_t>(floorPow2(std::max<uint64_t>(perStream, 1)), kMinStripe, kMaxStripe);
  return o;
}

constexpr uint32_t kControlMagic = 0x6c745443u;  // "CTtl"

void encodeTcpControl(const TcpControl& record, std::vector<uint8_t>* out) {
  const size_t at = out->size();
  out->resize(at + kTcpControlHeaderBytes + 8 * record.values.size());
  uint8_t* p = out->data() + at;
  const uint32_t header[4] = {kControlMagic, static_cast<uint32_t>(record.type) | (record.flags << 8), record.rail,
                              static_cast<uint32_t>(record.values.size())};
  memcpy(p, header, sizeof(header));
  if (!record.values.empty()) memcpy(p + kTcpControlHeaderBytes, record.values.data(), 8 * record.values.size());
}

Status parseTcpControl(const uint8_t* bytes, size_t size, uint32_t rails, size_t* recordBytes, TcpControl* out) {
  *recordBytes = 0;
  if (size < kTcpControlHeaderBytes) return okStatus();
  uint32_t h[4];
  memcpy(h, bytes, sizeof(h));
  const uint32_t type = h[1] & 0xff, flags = h[1] >> 8;
  // Ack: one value; Lost: the rail's sockets; Switch: the live sockets; Bye: none.
  const bool countOk = type == static_cast<uint32_t>(TcpControlType::Ack)      ? h[3] == 1
                       : type == static_cast<uint32_t>(TcpControlType::Bye)    ? h[3] == 0
                       : type == static_cast<uint32_t>(TcpControlType::Lost)   ? h[3] >= 1 && h[3] <= kTcpMaxStreams
                       : type == static_cast<uint32_t>(TcpControlType::Switch) ? h[3] >= 1 && h[3] <= kTcpMaxStreams
                                                                               : false;
  if (h[0] != kControlMagic || !countOk || h[2] >= rails || flags > kTcpLostResumable) {
    return makeError(collRemoteError,
                     "a malformed tcp control record (magic %08x, type %u, flags %u, rail %u of %u, %u values)", h[0],
                     type, flags, h[2], rails, h[3]);
  }
  *recordBytes = kTcpControlHeaderBytes + 8 * size_t{h[3]};
  if (size < *recordBytes) return okStatus();
  out->type = static_cast<TcpControlType>(type);
  out->flags = flags;
  out->rail = h[2];
  out->values.resize(h[3]);
  if (h[3] > 0) memcpy(out->values.data(), bytes + kTcpControlHeaderBytes, 8 * size_t{h[3]});
  return okStatus();
}

void TcpConnection::Lane::advance(uint64_t stripe) {
  if (head < queue.size()) {
    pos = queue[head].begin;
    end = queue[head].end;
    striped = false;
    if (++head == queue.size()) {
      queue.clear();
      head = 0;
    }
    return;
  }
  pos = nextStripe;
  end = nextStripe + stripe;
  nextStripe += stride;
  striped = true;
}

uint64_t TcpConnection::Lane::lowest() const {
  // After a move the queue may hold positions below the current range (what a socket carried
  // before its cut comes first, then the pieces it was dealt).
  uint64_t m = pos < end ? pos : nextStripe;
  for (size_t k = head; k < queue.size(); ++k) m = std::min(m, queue[k].begin);
  return m;
}

namespace {

// The socket's two addresses (a failed socket may no longer know its peer's).
std::string socketPath(int fd) {
  SocketAddress local, remote;
  local.length = remote.length = sizeof(local.storage);
  (void)getsockname(fd, reinterpret_cast<sockaddr*>(&local.storage), &local.length);
  (void)getpeername(fd, reinterpret_cast<sockaddr*>(&remote.storage), &remote.length);
  return "from " + local.toString() + " to " + remote.toString();
}

TcpControl controlRecord(TcpControlType type, uint32_t rail = 0, uint32_t flags = 0,
                         std::vector<uint64_t> values = {}) {
  TcpControl c;
  c.type = type;
  c.rail = rail;
  c.flags = flags;
  c.values = std::move(values);
  return c;
}

using Range = TcpConnection::Range;
using Lane = TcpConnection::Lane;

// The lane's positions from where it stands up to `limit` (its current range, its queue, then its
// stripes), at most maxRanges ranges.
bool futureBelow(const Lane& lane, uint64_t limit, uint64_t stripe, size_t maxRanges, std::vector<Range>* out) {
  auto add = [&](uint64_t b, uint64_t e) {
    e = std::min(e, limit);
    if (b < e) out->push_back(Range{b, e});
    return out->size() <= maxRanges;
  };
  if (lane.pos < lane.end && !add(lane.pos, lane.end)) return false;
  for (size_t k = lane.head; k < lane.queue.size(); ++k) {
    if (!add(lane.queue[k].begin, lane.queue[k].end)) return false;
  }
  for (uint64_t s = lane.nextStripe; s < limit; s += lane.stride) {
    if (!add(s, s + stripe)) return false;
  }
  return true;
}

// The move of one lost rail's traffic, computed alike by both ends from the same lanes: `lanes`
// stand where each live socket's old sequence was cut (the sender's position) and where each
// lost socket's receiver stopped. Stripes from Z (every lane's next untouched stripe, at most)
// go round-robin over the live lanes; what the lanes still owed below Z is cut at stripe
// boundaries, sorted and dealt round-robin, so each live lane carries its share in rising order
// (the receiver's lowest missing byte is always at the head of some socket, whatever the ring
// holds). Fills each live lane's new queue and stripes; false when the lanes owe too many pieces.
bool redistribute(const std::vector<const Lane*>& lanes, const std::vector<Lane*>& live, uint64_t stripe,
                  size_t maxRanges) {
  uint64_t z = 0;
  for (const Lane* l : lanes) z = std::max(z, l->nextStripe);
  z = roundUp(z, stripe);
  std::vector<Range> owed;
  for (const Lane* l : lanes) {
    if (!futureBelow(*l, z, stripe, maxRanges, &owed)) return false;
  }
  std::vector<Range> pieces;
  for (const Range& r : owed) {
    for (uint64_t b = r.begin; b < r.end;) {
      const uint64_t e = std::min(r.end, (b / stripe + 1) * stripe);
      pieces.push_back(Range{b, e});
      b = e;
    }
  }
  std::sort(pieces.begin(), pieces.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  const uint64_t n = live.size();
  for (uint64_t q = 0; q < n; ++q) {
    Lane* l = live[q];
    l->queue.clear();
    l->head = 0;
    for (size_t k = q; k < pieces.size(); k += n) l->queue.push_back(pieces[k]);
    l->origin = l->nextStripe = z + q * stripe;
    l->stride = n * stripe;
  }
  return true;
}

// The lane as it stands at `pos` when `pos` lies in one of its stripes at or after `origin`.
bool laneAt(const Lane& grid, uint64_t origin, uint64_t pos, uint64_t stripe, Lane* out) {
  if (pos < origin || grid.stride == 0) return false;
  const uint64_t b = origin + (pos - origin) / grid.stride * grid.stride;
  if (pos >= b + stripe) return false;
  *out = Lane{};
  out->pos = pos;
  out->end = b + stripe;
  out->origin = origin;
  out->nextStripe = b + grid.stride;
  out->stride = grid.stride;
  return true;
}

}  // namespace

Status TcpConnection::fromSockets(int peer, std::vector<int> fds, const TcpOptions& options, std::string peerName,
                                  std::unique_ptr<TcpConnection>* out, std::vector<int> controls) {
  std::unique_ptr<TcpConnection> c(new TcpConnection());
  c->peer_ = peer;
  c->peerName_ = std::move(peerName);
  // The destructor closes them.
  c->streams_.resize(fds.size());
  for (size_t i = 0; i < fds.size(); ++i) c->streams_[i].fd = fds[i];
  c->rails_.resize(controls.size());
  for (size_t r = 0; r < controls.size(); ++r) c->rails_[r].control = controls[r];
  if (fds.empty() || fds.size() > static_cast<size_t>(kTcpMaxStreams)) {
    return makeError(collInvalidArgument, "TCP connection to rank %d: %zu sockets (expected 1..%d)", peer, fds.size(),
                     kTcpMaxStreams);
  }
  if (controls.size() == 1 || controls.size() > std::min<size_t>(kTcpMaxRails, fds.size())) {
    return makeError(collInvalidArgument,
                     "TCP connection to rank %d: %zu rail control sockets for %zu sockets (expected none, or 2..%d "
                     "and no more than the sockets)",
                     peer, controls.size(), fds.size(), kTcpMaxRails);
  }
  if (!isPow2(options.stripeBytes) || options.stripeBytes < kMinStripe || options.stripeBytes > (64ull << 20)) {
    return makeError(collInvalidArgument,
                     "TCP connection to rank %d: stripe of %llu bytes (expected a power "
                     "of two between 64 bytes and 64 MiB)",
                     peer, static_cast<unsigned long long>(options.stripeBytes));
  }
  c->stripe_ = options.stripeBytes;
  c->railed_ = options.rails.size() > 1 || !controls.empty();
  c->ring_ = StreamRing(roundUp(std::clamp<uint64_t>(options.stagingBytes, c->stripe_, kMaxStaging), c->stripe_));
  const uint64_t stride = fds.size() * c->stripe_;
  std::vector<int> all = fds;
  all.insert(all.end(), controls.begin(), controls.end());
  if (!options.socketRails.empty() && options.socketRails.size() != fds.size()) {
    return makeError(collInvalidArgument, "TCP connection to rank %d: %zu socket rails for %zu sockets", peer,
                     options.socketRails.size(), fds.size());
  }
  std::vector<bool> railUsed(controls.size(), false);
  for (size_t i = 0; i < fds.size(); ++i) {
    Stream& s = c->streams_[i];
    s.rail = controls.empty()              ? 0
             : options.socketRails.empty() ? static_cast<int>(i % controls.size())
                                           : options.socketRails[i];
    if (!controls.empty()) {
      if (static_cast<size_t>(s.rail) >= controls.size()) {
        return makeError(collInvalidArgument, "TCP connection to rank %d: socket %zu on rail %d of %zu", peer, i,
                         s.rail, controls.size());
      }
      if (!railUsed[static_cast<size_t>(s.rail)])
        c->rails_[static_cast<size_t>(s.rail)].firstStream = static_cast<int>(i);
      railUsed[static_cast<size_t>(s.rail)] = true;
    }
    if (c->railed_ && s.fd >= 0) s.path = socketPath(s.fd);
    for (Lane* l : {&s.send, &s.recv}) {
      l->origin = l->nextStripe = i * c->stripe_;
      l->stride = stride;
      l->advance(c->stripe_);
    }
  }
  for (size_t i = 0; i < all.size(); ++i) {
    const int fd = all[i];
    if (fd < 0) {
      return makeError(collInvalidArgument, "TCP connection to rank %d: socket %zu is not open", peer, i);
    }
    int one = 1;
    // A unix socketpair (tests) has no TCP options; only a real TCP socket must accept them.
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    bool isTcp = getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0 &&
                 (addr.ss_family == AF_INET || addr.ss_family == AF_INET6);
    if (isTcp && setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
      int err = errno;
      return makeError(collSystemError, "TCP_NODELAY on the socket to rank %d (%s): %s", peer, c->peerName_.c_str(),
                       errnoText(err).c_str());
    }
    if (isTcp && options.trafficClass != kTrafficClassUnset) {
      COLL_TRY(applyTrafficClass(fd, addr.ss_family, options.trafficClass, peer, c->peerName_));
    }
    // A rail whose link went down leaves its bytes unacknowledged: after this long its sockets
    // fail with ETIMEDOUT and the rail's traffic moves to the others.
    unsigned timeout = static_cast<unsigned>(options.railTimeoutMs);
    if (isTcp && !controls.empty() && timeout > 0 &&
        setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &timeout, sizeof(timeout)) != 0) {
      int err = errno;
      return makeError(collSystemError, "TCP_USER_TIMEOUT on the socket to rank %d (%s): %s", peer,
                       c->peerName_.c_str(), errnoText(err).c_str());
    }
    if (options.socketBufferBytes > 0 && i < fds.size()) {
      int b = options.socketBufferBytes;
      // Best effort: the kernel clamps to net.core.{w,r}mem_max and that is not an error.
      (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof(b));
      (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof(b));
    }
    // Non-blocking from here on (MSG_DONTWAIT covers our calls; the flag also covers anyone who
    // polls the fds and then reads).
    int flags = fcntl(fd, F_GETFL, 0);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
      int err = errno;
      return makeError(collSystemError, "cannot make the socket to rank %d (%s) non-blocking: %s", peer,
                       c->peerName_.c_str(), errnoText(err).c_str());
    }
  }
  for (size_t r = 0; r < railUsed.size(); ++r) {
    if (!railUsed[r]) {
      return makeError(collInvalidArgument, "TCP connection to rank %d: rail %zu has no socket", peer, r);
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
  COLL_TRACE(-1, "TCP connection to rank %d (%s): %zu streams, %zu rail(s), stripe %llu, ring %llu", peer,
             c->peerName_.c_str(), fds.size(), std::max<size_t>(1, controls.size()),
             static_cast<unsigned long long>(c->stripe_), static_cast<unsigned long long>(c->ring_.capacity()));
  *out = std::move(c);
  return okStatus();
}

TcpConnection::~TcpConnection() {
  // Over several rails, say goodbye first: the peer then reads the closes that follow as this end
  // leaving, not as rails lost (best effort; a peer that never reads it sees the rails fail).
  std::vector<uint8_t> bye;
  encodeTcpControl(controlRecord(TcpControlType::Bye), &bye);
  for (Rail& r : rails_) {
    if (r.control < 0) continue;
    if (!r.lost) (void)::send(r.control, bye.data(), bye.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    ::close(r.control);
  }
  for (Stream& s : streams_) {
    if (s.fd >= 0) ::close(s.fd);
  }
  free(sendRing_);
  free(recvRing_);
}

int TcpConnection::railsLost() const {
  int n = 0;
  for (const Rail& r : rails_) n += r.lost ? 1 : 0;
  return n;
}

std::span<std::byte> TcpConnection::sendSpace() {
  return {sendRing_ + ring_.offset(committed_), ring_.writable(committed_, sendFreed_)};
}

void TcpConnection::sendCommit(size_t bytes) { committed_ += bytes; }

std::span<const std::byte> TcpConnection::recvData() {
  return {recvRing_ + ring_.offset(consumed_), ring_.readable(consumed_, received_)};
}

void TcpConnection::recvConsume(size_t bytes) { consumed_ += bytes; }

bool TcpConnection::sendPending(const Stream& s) const { return s.send.lowest() < committed_; }

std::string TcpConnection::where(const Stream& s) const {
  // Over several rails the socket's own addresses say which rail failed.
  if (!railed_) return peerName_;
  return peerName_ + ", on the rail " + (s.path.empty() ? socketPath(s.fd) : s.path);
}

std::string TcpConnection::railName(int rail) const {
  const Stream& first = streams_[static_cast<size_t>(rails_[static_cast<size_t>(rail)].firstStream)];
  return "rail " + std::to_string(rail) + " (" + where(first) + ")";
}

Status TcpConnection::socketError(const Stream& s, int err, const char* what) const {
  const std::string where = this->where(s);
  if (err == ECONNRESET || err == EPIPE || err == ENOTCONN || err == ETIMEDOUT || err == EHOSTUNREACH ||
      err == ENETUNREACH || err == ENETDOWN) {
    return makeError(collRemoteError,
                     "rank %d (%s) reset the connection (%s during %s); check that rank's "
                     "log and the network between the two hosts",
                     peer_, where.c_str(), errnoText(err).c_str(), what);
  }
  return makeError(collSystemError, "%s on the connection to rank %d (%s) failed: %s", what, peer_, where.c_str(),
                   errnoText(err).c_str());
}

void TcpConnection::socketFailed(const Stream& s, const Status& why) {
  if (peerLeaving_ || rails_.empty()) {
    if (closedReason_.ok()) closedReason_ = why;
    return;
  }
  railLost(s.rail, why.message());
}

Status TcpConnection::sendOn(Stream& s, bool* progressed) {
  Lane& l = s.send;
  for (;;) {
    if (l.pos == l.end) l.advance(stripe_);
    const uint64_t end = std::min(l.end, committed_);
    if (l.pos >= end) return okStatus();
    const uint64_t len = end - l.pos;
    ssize_t n = ::send(s.fd, sendRing_ + ring_.offset(l.pos), len, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return okStatus();
      if (errno == EINTR) continue;
      Status st = socketError(s, errno, "send");
      if (rails_.empty()) return st;
      socketFailed(s, st);
      return okStatus();
    }
    *progressed = true;
    l.pos += static_cast<uint64_t>(n);
    if (!rails_.empty()) rails_[static_cast<size_t>(s.rail)].bytesSent += static_cast<uint64_t>(n);
    // A short write means the socket buffer is full: the next call would only see EAGAIN.
    if (static_cast<uint64_t>(n) < len) return okStatus();
  }
}

Status TcpConnection::recvOn(Stream& s, bool* progressed) {
  // While a lost rail's traffic is being moved, the sender may cut any socket's sequence, and what
  // follows the cut is not the rest of its range: read nothing until the Switch says where.
  if (recovery_.awaitingSwitch) return okStatus();
  Lane& l = s.recv;
  for (;;) {
    if (l.pos == l.end) l.advance(stripe_);
    const uint64_t end = std::min(l.end, ring_.limit(consumed_));
    if (l.pos >= end) return okStatus();
    const uint64_t len = end - l.pos;
    if (s.closed) return okStatus();
    ssize_t n = ::recv(s.fd, recvRing_ + ring_.offset(l.pos), len, MSG_DONTWAIT);
    // The peer's close is not an error by itself (it may have finished with us); checkHealth()
    // reports it when this rank still waits for bytes from it.
    if (n == 0) {
      s.closed = true;
      Status why = makeError(collRemoteError,
                             "rank %d (%s) closed the connection; check that rank's log for "
                             "why it exited",
                             peer_, where(s).c_str());
      socketFailed(s, why);
      return okStatus();
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return okStatus();
      if (errno == EINTR) continue;
      if (errno == ECONNRESET || !rails_.empty()) {
        s.closed = true;
        socketFailed(s, socketError(s, errno, "recv"));
        return okStatus();
      }
      return socketError(s, errno, "recv");
    }
    *progressed = true;
    l.pos += static_cast<uint64_t>(n);
    if (static_cast<uint64_t>(n) < len) return okStatus();
  }
}

// --- several rails: control records, acknowledgements, and moving a lost rail's traffic ---

void TcpConnection::queueControl(const TcpControl& record) {
  for (Rail& r : rails_) {
    if (r.lost) continue;
    encodeTcpControl(record, &r.out);
    return;
  }
}

void TcpConnection::queueAck() {
  queueControl(controlRecord(TcpControlType::Ack, 0, 0, {consumed_}));
  ackSent_ = consumed_;
}

void TcpConnection::flushControl() {
  for (size_t i = 0; i < rails_.size(); ++i) {
    Rail& r = rails_[i];
    while (!r.lost && !r.out.empty()) {
      ssize_t n = ::send(r.control, r.out.data(), r.out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = errno;
        const Stream& first = streams_[static_cast<size_t>(r.firstStream)];
        socketFailed(first, socketError(first, err, "send on the rail's control socket"));
        break;
      }
      r.out.erase(r.out.begin(), r.out.begin() + n);
    }
  }
}

void TcpConnection::railLost(int rail, const std::string& why) {
  Rail& lost = rails_[static_cast<size_t>(rail)];
  if (lost.lost) return;
  lost.lost = true;
  lost.why = why;
  // What was queued there is dropped: acknowledgements are repeated below, and Lost and Switch
  // records of a recovery only ever go on a live rail.
  lost.out.clear();
  if (railsLost() == static_cast<int>(rails_.size())) {
    std::string all;
    for (size_t r = 0; r < rails_.size(); ++r) all += "; " + railName(static_cast<int>(r)) + ": " + rails_[r].why;
    if (failed_.ok()) failed_ = makeError(collRemoteError, "every rail to rank %d is lost%s", peer_, all.c_str());
    return;
  }
  if (recovery_.rail >= 0) {
    // A second rail lost before the first's traffic has moved: the positions the move was
    // computed from may be gone too.
    if (failed_.ok()) {
      failed_ =
          makeError(collRemoteError, "%s was lost (%s) while the traffic of the lost %s was being moved to the others",
                    railName(rail).c_str(), why.c_str(), railName(recovery_.rail).c_str());
    }
    return;
  }
  COLL_WARN(-1, "tcp connection to rank %d: %s lost (%s); moving its traffic to the other %d rail(s)", peer_,
            railName(rail).c_str(), why.c_str(), static_cast<int>(rails_.size()) - railsLost());
  recovery_ = Recovery{};
  recovery_.rail = rail;
  recovery_.awaitingPeerLost = true;
  recovery_.awaitingSwitch = true;
  TcpControl record = controlRecord(TcpControlType::Lost, static_cast<uint32_t>(rail), kTcpLostResumable);
  for (Stream& s : streams_) {
    if (s.rail != rail) continue;
    // This end reads no more from the rail: where each socket stands is final.
    if (s.recv.pos == s.recv.end) s.recv.advance(stripe_);
    if (!s.recv.plain()) record.flags = 0;
    record.values.push_back(s.recv.pos);
  }
  // The rail may have carried the last acknowledgement: repeat it.
  queueAck();
  queueControl(record);
}

Status TcpConnection::pollControl(bool* progressed) {
  for (size_t i = 0; i < rails_.size(); ++i) {
    Rail& r = rails_[i];
    while (!r.lost) {
      ssize_t n = ::recv(r.control, r.in + r.inBytes, sizeof(r.in) - r.inBytes, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const Stream& first = streams_[static_cast<size_t>(r.firstStream)];
        Status why = n == 0 ? makeError(collRemoteError,
                                        "rank %d (%s) closed the connection; check that rank's log for why it exited",
                                        peer_, where(first).c_str())
                            : socketError(first, errno, "recv on the rail's control socket");
        socketFailed(first, why);
        break;
      }
      *progressed = true;
      r.inBytes += static_cast<size_t>(n);
      for (;;) {
        size_t bytes = 0;
        TcpControl record;
        COLL_TRY(parseTcpControl(r.in, r.inBytes, static_cast<uint32_t>(rails_.size()), &bytes, &record)
                     .withContext("from rank " + std::to_string(peer_) + " (" + peerName_ + ")"));
        if (bytes == 0 || bytes > r.inBytes) break;
        memmove(r.in, r.in + bytes, r.inBytes - bytes);
        r.inBytes -= bytes;
        COLL_TRY(onControl(record));
        if (r.lost) break;
      }
    }
  }
  return okStatus();
}

Status TcpConnection::onControl(const TcpControl& record) {
  const auto context = [&](const char* what) {
    return std::string(what) + " from rank " + std::to_string(peer_) + " (" + peerName_ + ")";
  };
  switch (record.type) {
    case TcpControlType::Ack:
      if (record.values[0] > committed_) {
        return makeError(collRemoteError, "%s acknowledges %llu bytes of %llu sent",
                         context("a tcp control record").c_str(), static_cast<unsigned long long>(record.values[0]),
                         static_cast<unsigned long long>(committed_));
      }
      peerConsumed_ = std::max(peerConsumed_, record.values[0]);
      return okStatus();
    case TcpControlType::Bye: peerLeaving_ = true; return okStatus();
    case TcpControlType::Lost: {
      if (!rails_[record.rail].lost) {
        railLost(static_cast<int>(record.rail), "rank " + std::to_string(peer_) + " found it lost");
      }
      if (recovery_.rail != static_cast<int>(record.rail) || !recovery_.awaitingPeerLost) {
        // A second loss already failed the connection, or a repeat.
        return okStatus();
      }
      COLL_TRY(applyPeerLost(record).withContext(context("the lost rail's receive positions")));
      recovery_.awaitingPeerLost = false;
      finishRecovery();
      return okStatus();
    }
    case TcpControlType::Switch:
      if (recovery_.rail != static_cast<int>(record.rail) || !recovery_.awaitingSwitch) {
        if (!failed_.ok()) return okStatus();  // the connection failed while this was under way
        return makeError(collRemoteError, "%s", context("an unexpected tcp rail switch").c_str());
      }
      COLL_TRY(applySwitch(record).withContext(context("a tcp rail switch")));
      recovery_.awaitingSwitch = false;
      finishRecovery();
      return okStatus();
  }
  return okStatus();
}

namespace {
// Pieces a recovery may deal out before the record is treated as bogus: what a ring, every socket's
// current stripe and the cut stripes can hold, with room to spare.
size_t maxPiecesFor(uint64_t ring, uint64_t stripe, size_t streams) { return ring / stripe + 4 * streams + 16; }
}  // namespace

// The send side: the peer's final receive positions on the lost rail arrived. Cut every live
// socket where it stands, deal what the receiver lacks over the live sockets, and tell the peer
// where the cuts are.
Status TcpConnection::applyPeerLost(const TcpControl& record) {
  const int rail = static_cast<int>(record.rail);
  const size_t maxPieces = maxPiecesFor(ring_.capacity(), stripe_, streams_.size());
  std::vector<Lane> lostAt;
  std::vector<Lane*> live;
  TcpControl answer = controlRecord(TcpControlType::Switch, record.rail);
  size_t k = 0;
  for (Stream& s : streams_) {
    if (rails_[static_cast<size_t>(s.rail)].lost && s.rail != rail) continue;  // gone in an earlier move
    if (s.rail == rail) {
      if (k >= record.values.size() || !(record.flags & kTcpLostResumable)) {
        return makeError(collRemoteError, "%zu positions for the rail's %s sockets%s", record.values.size(),
                         k >= record.values.size() ? "more" : "",
                         record.flags & kTcpLostResumable
                             ? ""
                             : " (the peer's sockets were still moving an earlier lost rail's traffic)");
      }
      const uint64_t p = record.values[k++];
      Lane at;
      if (p < peerConsumed_ || p > s.send.lowest() || !laneAt(s.send, s.send.origin, p, stripe_, &at)) {
        return makeError(collRemoteError, "receive position %llu is not on the socket's sequence (sent up to %llu)",
                         static_cast<unsigned long long>(p), static_cast<unsigned long long>(s.send.lowest()));
      }
      lostAt.push_back(at);
      continue;
    }
    if (s.send.pos == s.send.end) s.send.advance(stripe_);
    answer.values.push_back(s.send.pos);
    live.push_back(&s.send);
  }
  if (k != record.values.size()) {
    return makeError(collRemoteError, "%zu positions for the rail's %zu sockets", record.values.size(), k);
  }
  // The live lanes' copies stand at their cuts: what they had not sent yet is dealt out again.
  std::vector<Lane> cuts;
  for (Lane* l : live) cuts.push_back(*l);
  std::vector<const Lane*> from;
  for (const Lane& l : cuts) from.push_back(&l);
  for (const Lane& l : lostAt) from.push_back(&l);
  if (!redistribute(from, live, stripe_, maxPieces)) {
    return makeError(collInternalError, "more than %zu pieces to move", maxPieces);
  }
  for (Lane* l : live) {
    l->end = l->pos;  // cut: the rest of the current range was dealt out
    l->advance(stripe_);
  }
  queueControl(answer);
  return okStatus();
}

// The receive side: the sender's cuts arrived. Each live socket first delivers what it had sent
// before its cut, then its share of what this end lacks, then its stripes.
Status TcpConnection::applySwitch(const TcpControl& record) {
  const int rail = static_cast<int>(record.rail);
  const size_t maxPieces = maxPiecesFor(ring_.capacity(), stripe_, streams_.size());
  std::vector<Lane*> live;
  std::vector<Lane> atCut;
  std::vector<std::vector<Range>> inFlight;
  std::vector<const Lane*> from;
  size_t k = 0;
  for (Stream& s : streams_) {
    if (rails_[static_cast<size_t>(s.rail)].lost) continue;
    if (k >= record.values.size()) return makeError(collRemoteError, "too few cuts for the live sockets");
    const uint64_t cut = record.values[k++];
    Lane copy = s.recv;
    std::vector<Range> before;
    for (;;) {
      if (copy.pos == copy.end) copy.advance(stripe_);
      if (cut < copy.pos || before.size() > maxPieces) {
        return makeError(collRemoteError, "cut %llu is not ahead on the socket's sequence (at %llu)",
                         static_cast<unsigned long long>(cut), static_cast<unsigned long long>(s.recv.pos));
      }
      if (cut < copy.end) break;
      before.push_back(Range{copy.pos, copy.end});
      copy.pos = copy.end;
    }
    if (copy.pos < cut) before.push_back(Range{copy.pos, cut});
    copy.pos = cut;
    atCut.push_back(copy);
    inFlight.push_back(std::move(before));
    live.push_back(&s.recv);
  }
  if (k != record.values.size()) return makeError(collRemoteError, "more cuts than live sockets");
  std::vector<Lane> lostAt;
  for (const Stream& s : streams_) {
    // Where this end's Lost said: nothing was read from the rail since.
    if (s.rail == rail) lostAt.push_back(s.recv);
  }
  for (const Lane& l : atCut) from.push_back(&l);
  for (const Lane& l : lostAt) from.push_back(&l);
  if (!redistribute(from, live, stripe_, maxPieces)) {
    return makeError(collRemoteError, "more than %zu pieces to move", maxPieces);
  }
  for (size_t q = 0; q < live.size(); ++q) {
    Lane* l = live[q];
    std::vector<Range> seq = std::move(inFlight[q]);
    seq.insert(seq.end(), l->queue.begin(), l->queue.end());
    l->queue = std::move(seq);
    l->head = 0;
    l->pos = l->end;
    l->advance(stripe_);
  }
  return okStatus();
}

void TcpConnection::finishRecovery() {
  if (recovery_.awaitingPeerLost || recovery_.awaitingSwitch) return;
  COLL_INFO(-1, "tcp connection to rank %d: the traffic of the lost %s now goes over the other %d rail(s)", peer_,
            railName(recovery_.rail).c_str(), static_cast<int>(rails_.size()) - railsLost());
  recovery_ = Recovery{};
}

void TcpConnection::updatePositions() {
  uint64_t minSend = UINT64_MAX, minRecv = UINT64_MAX;
  for (const Stream& s : streams_) {
    const bool lost = !rails_.empty() && rails_[static_cast<size_t>(s.rail)].lost;
    if (!lost) minSend = std::min(minSend, s.send.lowest());
    // A lost rail's sockets hold back what has arrived until the sender's Switch moves their
    // positions to the live sockets.
    if (!lost || (recovery_.awaitingSwitch && s.rail == recovery_.rail)) minRecv = std::min(minRecv, s.recv.lowest());
  }
  // A byte before every socket's next position was sent (received) by its socket: each socket
  // carries its ranges in rising order up to its cut, and the cut ranges were dealt out again.
  sendOut_ = std::min(minSend, committed_);
  received_ = minRecv;
  if (rails_.empty()) {
    sendFreed_ = sendOut_;
    return;
  }
  // Over several rails the ring keeps every byte until the peer consumed it: a rail lost with
  // bytes in its sockets must be able to send them again.
  sendFreed_ = std::min(peerConsumed_, committed_);
  if (recovery_.awaitingPeerLost) sendOut_ = std::min(sendOut_, peerConsumed_);
}

Status TcpConnection::progress(bool* progressed) {
  if (progressed != nullptr) *progressed = false;
  if (!failed_.ok()) return failed_;
  bool any = false;
  if (!rails_.empty()) COLL_TRY(pollControl(&any));
  for (Stream& s : streams_) {
    if (!rails_.empty() && rails_[static_cast<size_t>(s.rail)].lost) continue;
    COLL_TRY(sendOn(s, &any));
    if (!rails_.empty() && rails_[static_cast<size_t>(s.rail)].lost) continue;
    COLL_TRY(recvOn(s, &any));
  }
  updatePositions();
  if (!rails_.empty()) {
    // A quarter ring per acknowledgement: the sender, whose ring waits for them, always has more
    // than that outstanding when it waits.
    if (consumed_ - ackSent_ >= ring_.capacity() / 4) {
      queueAck();
    }
    flushControl();
  }
  if (progressed != nullptr) *progressed = any;
  return failed_;
}

void TcpConnection::progressBetweenCalls() {
  if (rails_.empty() || !failed_.ok()) return;
  // The peer's ring keeps every byte until it hears this: tell it before its next call needs room.
  if (consumed_ != ackSent_) {
    queueAck();
  }
  (void)progress(nullptr);  // failed_ is sticky: the next call's progress() reports it
}

void TcpConnection::appendPollFds(std::vector<pollfd>* fds) const {
  for (const Stream& s : streams_) {
    if (s.closed) continue;  // always readable: it would turn the wait into a spin
    if (!rails_.empty() && rails_[static_cast<size_t>(s.rail)].lost) continue;
    short events = POLLIN;
    if (sendPending(s)) events |= POLLOUT;
    fds->push_back(pollfd{s.fd, events, 0});
  }
  for (const Rail& r : rails_) {
    if (r.lost) continue;
    fds->push_back(pollfd{r.control, static_cast<short>(POLLIN | (r.out.empty() ? 0 : POLLOUT)), 0});
  }
}

}  // namespace coll
