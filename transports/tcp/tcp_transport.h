// TCP transport: a connection to one peer over one or more sockets, the byte stream cut into
// fixed stripes sent round-robin over them, with send and receive staging rings; with several
// rails (interfaces), socket i leaves from and arrives at rail i mod rails.
#pragma once

#include <poll.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/base/deadline.h"
#include "src/base/status.h"
#include "src/oob/bootstrap.h"
#include "transports/stream_ring.h"
#include "transports/transport.h"

namespace coll {

// Bootstrap data-socket tags: stream i of a pair uses kTcpTagBase + i (0x5443 = "TC").
constexpr uint32_t kTcpTagBase = 0x54430000u;
constexpr int kTcpMaxStreams = 64;
constexpr uint32_t kTcpTagRails = kTcpTagBase + kTcpMaxStreams;  // the rail addresses of a pair
constexpr int kTcpMaxRails = 8;

struct TcpOptions {
  int streams = 2;
  int socketBufferBytes = 4 << 20;      // SO_SNDBUF / SO_RCVBUF; 0 = kernel default
  uint64_t stagingBytes = 1ull << 20;   // each of the send and receive rings
  uint64_t stripeBytes = 512ull << 10;  // power of two; the active side's value is used by both
  // The communicator's class (0..255): IP_TOS / IPV6_TCLASS and SO_PRIORITY of every data socket.
  int trafficClass = kTrafficClassUnset;
  // Local addresses of the rails (COLL_TCP_RAILS interfaces); fewer than two: the sockets are
  // made through the bootstrap listener as ever.
  std::vector<SocketAddress> rails;
};

// COLL_NSOCKS_PERPEER, COLL_SOCKET_BUFFSIZE, COLL_TCP_STAGING_BYTES; the stripe is 512 KiB, or
// less so that every stream has at least two stripes of the ring to work on.
TcpOptions tcpOptionsFromConfig();
// COLL_TCP_RAILS > 1: the addresses of the first that many interfaces COLL_SOCKET_IFNAME admits
// (in findInterfaces' order). Fewer is an error listing them, as is a COLL_SOCKET_IFNAME name
// that matches no interface: never fewer rails than asked.
Status tcpRailsFromConfig(std::vector<SocketAddress>* out);

// The handshake the lower rank sends on the first stream: the stream count and the stripe. Remote
// bytes: parseTcpHello checks the magic, version, 1..kTcpMaxStreams streams and a 64 B..64 MiB
// stripe (tests/fuzz calls it too).
constexpr size_t kTcpHelloBytes = 16;
struct TcpHello {
  uint32_t streams = 0;
  uint32_t stripeLog2 = 0;
};
void encodeTcpHello(const TcpHello& hello, uint8_t out[kTcpHelloBytes]);
Status parseTcpHello(const uint8_t* bytes, size_t size, TcpHello* out);

// The setup messages of a pair over several rails (connectTcp). Remote bytes: the parsers check
// magic, sizes, counts and addresses (tests/fuzz calls them too). The higher rank's message carries
// its listeners (every one must decode) and the token the lower rank's sockets present.
constexpr size_t kTcpTokenBytes = 16;
struct TcpRailsInfo {
  uint32_t rails = 0;
  uint8_t token[kTcpTokenBytes] = {};
  std::vector<SocketAddress> listeners;  // from the higher rank only
};
Status parseTcpRails(const uint8_t* bytes, size_t size, bool fromListener, TcpRailsInfo* out);
// The first bytes of each socket of such a pair, from the lower rank.
constexpr size_t kTcpPreambleBytes = 32;
struct TcpPreamble {
  uint32_t index = 0;
  uint32_t streams = 0;
  uint32_t stripeLog2 = 0;
  uint8_t token[kTcpTokenBytes] = {};
};
Status parseTcpPreamble(const uint8_t* bytes, size_t size, TcpPreamble* out);

// Both ranks of a pair call this when they first need each other: the lower rank connects
// `streams` sockets (bootstrap.connectData(peer, kTcpTagBase + i)) and tells the higher one the
// stream count and stripe over the first; the higher rank accepts them.
Status connectTcp(Bootstrap& bootstrap, int peer, const TcpOptions& options, Deadline deadline,
                  std::unique_ptr<Connection>* out);

class TcpConnection final : public Connection {
 public:
  // From already-connected sockets (ownership of the fds passes here, also on failure). Both
  // ends must pass the same number of sockets, in the same order, and the same stripeBytes.
  // `peerName` appears in error messages, e.g. "10.0.0.2:41000".
  static Status fromSockets(int peer, std::vector<int> fds, const TcpOptions& options, std::string peerName,
                            std::unique_ptr<TcpConnection>* out);
  ~TcpConnection() override;
  TcpConnection(const TcpConnection&) = delete;
  TcpConnection& operator=(const TcpConnection&) = delete;

  int peer() const override { return peer_; }
  std::span<std::byte> sendSpace() override;
  void sendCommit(size_t bytes) override;
  std::span<const std::byte> recvData() override;
  void recvConsume(size_t bytes) override;
  uint64_t sentBytes() const override { return committed_; }
  uint64_t receivedBytes() const override { return consumed_; }
  Status progress(bool* progressed) override;
  Status checkHealth() override { return closedReason_; }
  bool sendsFlushed() const override { return sendFreed_ >= committed_; }
  uint64_t flushedBytes() const override { return sendFreed_; }

  // For the communicator's sleep: POLLIN on every socket, POLLOUT where committed bytes wait.
  void appendPollFds(std::vector<pollfd>* fds) const;
  int streams() const { return static_cast<int>(streams_.size()); }
  // The local address socket i is bound to (where it leaves this host from).
  SocketAddress streamLocalAddress(int i) const;
  uint64_t stripeBytes() const { return stripe_; }
  uint64_t ringBytes() const { return ring_.capacity(); }

 private:
  struct Stream {
    int fd = -1;
    uint64_t sendPos = 0;  // stream position of the next byte this socket sends
    uint64_t recvPos = 0;  // stream position of the next byte this socket receives
    bool closed = false;   // the peer closed or reset this socket
  };
  Status closedReason_;  // set when a socket closed; reported by checkHealth()
  TcpConnection() = default;
  Status sendOn(Stream& s, bool* progressed);
  Status recvOn(Stream& s, bool* progressed);
  Status socketError(const Stream& s, int err, const char* what) const;
  std::string where(const Stream& s) const;  // the peer's name, and the socket's rail when railed
  bool sendPending(const Stream& s) const;

  int peer_ = -1;
  std::string peerName_;
  std::vector<Stream> streams_;
  uint64_t stripe_ = 0;
  bool railed_ = false;  // sockets over several rails: errors name the socket's addresses
  StreamRing ring_;    // both the send and the receive ring
  uint64_t skip_ = 0;  // (streams - 1) * stripe: from the end of a stripe to the socket's next one
  std::byte* sendRing_ = nullptr;
  std::byte* recvRing_ = nullptr;
  uint64_t committed_ = 0;
  uint64_t sendFreed_ = 0;  // every byte before this has been handed to the kernel
  uint64_t consumed_ = 0;
  uint64_t received_ = 0;  // every byte before this has arrived
};

}  // namespace coll
