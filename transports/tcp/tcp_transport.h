// TCP transport: a connection to one peer over one or more sockets, the byte stream cut into
// fixed stripes sent round-robin over them, with send and receive staging rings; with several
// rails (interfaces), socket i leaves from and arrives at rail i mod rails, each rail has a
// control socket, and a lost rail's stripes move to the others.
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
  // Each rail's speed in Mbit/s (0 = unknown), parallel to `rails`: a pair gives each rail
  // sockets in proportion to the slower end's speed (stripeWeights), so a faster rail carries more.
  std::vector<uint32_t> railMbps;
  // Set by connectTcp over several rails: the rail of each socket (empty: socket i on rail i mod
  // rails).
  std::vector<uint8_t> socketRails;
  // Over several rails: TCP_USER_TIMEOUT of every socket, so a rail whose link went down is found
  // lost (ETIMEDOUT) after this long with bytes unacknowledged; 0 = the kernel's (minutes).
  int railTimeoutMs = 5000;
};

// COLL_NSOCKS_PERPEER, COLL_SOCKET_BUFFSIZE, COLL_TCP_STAGING_BYTES; the stripe is 512 KiB, or
// less so that every stream has at least two stripes of the ring to work on.
TcpOptions tcpOptionsFromConfig();
// COLL_TCP_RAILS > 1: the addresses of the first that many interfaces COLL_SOCKET_IFNAME admits
// (in findInterfaces' order), and their speeds (COLL_TCP_RAIL_MBPS, else what each interface
// reports in /sys/class/net). Fewer is an error listing them, as is a COLL_SOCKET_IFNAME name
// that matches no interface: never fewer rails than asked.
Status tcpRailsFromConfig(std::vector<SocketAddress>* out, std::vector<uint32_t>* mbps = nullptr);

// The rail of each of a pair's sockets over rails of these weights (stripeWeights): socket i on
// rail pattern[i mod sum of weights], smooth weighted round-robin, so with `streams` a multiple of
// that sum every rail has its weight's share of the sockets. Equal weights: i mod rails.
std::vector<uint8_t> tcpSocketRails(const std::vector<uint32_t>& weights, int streams);

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
  std::vector<uint32_t> mbps;            // each rail's speed (0 = unknown)
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
// Indices streams .. streams + kTcpMaxRails - 1 are the rails' control sockets.
Status parseTcpPreamble(const uint8_t* bytes, size_t size, TcpPreamble* out);

// The records of a multi-rail connection's control sockets (one per rail, both directions):
//   Ack(pos)       the sender may reuse its ring below pos: this end consumed the stream there;
//   Lost(rail, flags, p...)  this end found `rail` lost (or heard so) and stopped using it; p are
//                  its final receive positions on the rail's sockets, in socket order;
//   Switch(rail, c...)  the sender's answer: c is where each live socket's old sequence was cut;
//                  what the receiver lacks below the first untouched stripe moves to the live
//                  sockets (TcpConnection::applySwitch), and stripes from there go round-robin
//                  over the live sockets only;
//   Bye            this end is closing the connection: what follows is not a lost rail.
// Remote bytes: parseTcpControl checks the magic, the type, the rail and the count of values.
enum class TcpControlType : uint32_t { Ack = 1, Lost = 2, Switch = 3, Bye = 4 };
constexpr size_t kTcpControlHeaderBytes = 16;
constexpr size_t kTcpControlMaxBytes = kTcpControlHeaderBytes + 8 * (kTcpMaxStreams + 1);
struct TcpControl {
  TcpControlType type = TcpControlType::Ack;
  uint32_t rail = 0;
  uint32_t flags = 0;  // Lost: kTcpLostResumable when every lost socket sits in its plain stripe order
  std::vector<uint64_t> values;
};
constexpr uint32_t kTcpLostResumable = 1;
void encodeTcpControl(const TcpControl& record, std::vector<uint8_t>* out);
// Needs the record's first kTcpControlHeaderBytes; *recordBytes is its whole size (0 while the
// header is incomplete); the record is parsed once `size` covers it.
Status parseTcpControl(const uint8_t* bytes, size_t size, uint32_t rails, size_t* recordBytes, TcpControl* out);

// Both ranks of a pair call this when they first need each other: the lower rank connects
// `streams` sockets (bootstrap.connectData(peer, kTcpTagBase + i)) and tells the higher one the
// stream count and stripe over the first; the higher rank accepts them.
Status connectTcp(Bootstrap& bootstrap, int peer, const TcpOptions& options, Deadline deadline,
                  std::unique_ptr<Connection>* out);

class TcpConnection final : public Connection {
 public:
  // From already-connected sockets (ownership of the fds passes here, also on failure). Both
  // ends must pass the same number of sockets, in the same order, and the same stripeBytes.
  // `peerName` appears in error messages, e.g. "10.0.0.2:41000". `controls`: one control socket
  // per rail (two or more: socket i is on rail i mod rails, whose loss the others survive);
  // none: one rail, no failover.
  static Status fromSockets(int peer, std::vector<int> fds, const TcpOptions& options, std::string peerName,
                            std::unique_ptr<TcpConnection>* out, std::vector<int> controls = {});
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
  Status checkHealth() override { return failed_.ok() ? closedReason_ : failed_; }
  bool sendsFlushed() const override { return sendOut_ >= committed_; }
  uint64_t flushedBytes() const override { return sendOut_; }

  // Between calls, over several rails (the transport's idle progress): a rail may fail under bytes
  // the last call handed to the kernel, and the peer's failover needs this end's answer before
  // this rank makes another call with it, which may wait for that peer. So this watches the rails,
  // answers and moves traffic as progress() does, and acknowledges what this end consumed. Its
  // errors wait for the next call. A no-op over one rail.
  void progressBetweenCalls();
  // For the communicator's sleep: POLLIN on every socket, POLLOUT where committed bytes wait.
  void appendPollFds(std::vector<pollfd>* fds) const;
  int streams() const { return static_cast<int>(streams_.size()); }
  // The local address socket i is bound to (where it leaves this host from).
  SocketAddress streamLocalAddress(int i) const;
  uint64_t stripeBytes() const { return stripe_; }
  uint64_t ringBytes() const { return ring_.capacity(); }
  int rails() const { return static_cast<int>(rails_.size()); }
  int railsLost() const;
  int streamRail(int i) const { return streams_[static_cast<size_t>(i)].rail; }
  uint64_t railBytesSent(int rail) const { return rails_[static_cast<size_t>(rail)].bytesSent; }

  // Which stream positions one socket carries in one direction, in order: the current range,
  // ranges queued after it (only after a rail was lost), then the stripes origin, origin + stride,
  // ... Both ends keep the same sequence for each socket, so no byte carries a header.
  struct Range {
    uint64_t begin = 0, end = 0;
  };
  struct Lane {
    uint64_t pos = 0;     // the next byte
    uint64_t end = 0;     // the end of the current range
    bool striped = true;  // the current range is one of the stripes, not a queued range
    std::vector<Range> queue;
    size_t head = 0;
    uint64_t origin = 0;  // the first of the stripes
    uint64_t nextStripe = 0, stride = 0;
    void advance(uint64_t stripe);
    bool plain() const { return striped && head == queue.size(); }
    uint64_t lowest() const;  // the first position this lane has yet to carry
  };

 private:
  struct Stream {
    int fd = -1;
    int rail = 0;
    std::string path;  // over several rails: "from LOCAL to REMOTE", taken while both are known
    Lane send, recv;
    bool closed = false;  // the peer closed or reset this socket
  };
  struct Rail {
    int control = -1;
    bool lost = false;
    int firstStream = 0;     // the rail's first socket, whose addresses name it
    uint64_t bytesSent = 0;  // by its sockets
    std::string why;
    std::vector<uint8_t> out;  // control records not yet handed to the kernel (whole records)
    uint8_t in[kTcpControlMaxBytes] = {};
    size_t inBytes = 0;
  };
  // The recovery from one lost rail: this end's receive side waits (at range ends) for the
  // peer's Switch, its send side for the peer's Lost.
  struct Recovery {
    int rail = -1;
    bool awaitingPeerLost = false;
    bool awaitingSwitch = false;
  };
  Status closedReason_;  // set when a socket closed; reported by checkHealth()
  Status failed_;        // every rail lost, or a second during a move: progress() fails with it
  TcpConnection() = default;
  Status sendOn(Stream& s, bool* progressed);
  Status recvOn(Stream& s, bool* progressed);
  Status socketError(const Stream& s, int err, const char* what) const;
  // A socket of a multi-rail connection failed or closed: the rail is lost, or the peer is gone.
  void socketFailed(const Stream& s, const Status& why);
  std::string where(const Stream& s) const;  // the peer's name, and the socket's rail when railed
  std::string railName(int rail) const;
  bool sendPending(const Stream& s) const;
  void railLost(int rail, const std::string& why);
  void queueControl(const TcpControl& record);
  void queueAck();  // an Ack of what this end consumed
  Status pollControl(bool* progressed);
  void flushControl();
  Status onControl(const TcpControl& record);
  Status applyPeerLost(const TcpControl& record);
  Status applySwitch(const TcpControl& record);
  void finishRecovery();
  void updatePositions();

  int peer_ = -1;
  std::string peerName_;
  std::vector<Stream> streams_;
  uint64_t stripe_ = 0;
  bool railed_ = false;  // sockets over several rails: errors name the socket's addresses
  std::vector<Rail> rails_;  // with two or more: control sockets, acknowledgements and failover
  Recovery recovery_;
  bool peerLeaving_ = false;  // the peer said Bye: a closed socket is the peer gone, not a rail
  StreamRing ring_;           // both the send and the receive ring
  std::byte* sendRing_ = nullptr;
  std::byte* recvRing_ = nullptr;
  uint64_t committed_ = 0;
  uint64_t sendFreed_ = 0;     // the send ring may be rewritten below this
  uint64_t sendOut_ = 0;       // every byte before this has been handed to the kernel
  uint64_t peerConsumed_ = 0;  // multi-rail: the peer's last Ack
  uint64_t consumed_ = 0;
  uint64_t ackSent_ = 0;   // multi-rail: the last Ack this end queued
  uint64_t received_ = 0;  // every byte before this has arrived
};

}  // namespace coll
