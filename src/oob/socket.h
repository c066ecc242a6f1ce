// Sockets: addresses (IPv4 and IPv6), interface selection with NCCL's COLL_SOCKET_IFNAME syntax,
// and an RAII socket with deadline-bounded blocking helpers used by bootstrap and TCP.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "src/base/config.h"
#include "src/base/deadline.h"
#include "src/base/status.h"

namespace coll {

// Which interfaces to use; set, it also decides where the bootstrap listens.
extern const StringKnob kSocketIfname;  // COLL_SOCKET_IFNAME

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;

  int family() const { return storage.ss_family; }
  uint16_t port() const;
  void setPort(uint16_t port);
  // "198.18.0.1:5000" or "[2001:2::1]:5000".
  std::string toString() const;
  // Parses "host:port", "[v6]:port", or a name resolved with getaddrinfo.
  static Status parse(const std::string& text, SocketAddress* out);
  bool operator==(const SocketAddress& other) const;
  // 127.0.0.0/8 or ::1 (a job whose root is on loopback is a single-host job).
  bool isLoopback() const;
  // 0.0.0.0 or :: (binds every interface; never sent to peers).
  bool isWildcard() const;
  // The wildcard address of `family` with `port`.
  static SocketAddress wildcard(int family, uint16_t port);
};

// An address on the wire (bootstrap messages, tcp rail addresses): family code (4/6), pad, port
// (little-endian), IPv6 scope id, 16 address bytes. get fails on an unknown family or port 0
// (remote bytes).
constexpr size_t kSocketAddressWire = 24;
bool putSocketAddress(uint8_t* p, const SocketAddress& a);
bool getSocketAddress(const uint8_t* p, SocketAddress* out);

struct NetInterface {
  std::string name;
  SocketAddress address;  // port 0
};

// Interfaces matching `spec` (NCCL syntax: "eth,ib" prefixes; "^docker,lo" excludes; "=eth0"
// exact), optionally one address family (AF_UNSPEC for both). With an empty spec: non-loopback
// interfaces first (excluding docker*), loopback only if nothing else exists.
Status findInterfaces(const std::string& spec, int family, std::vector<NetInterface>* out);

// The speed the interface reports (/sys/class/net/NAME/speed) in Mbit/s; 0 when it reports none.
uint32_t interfaceSpeedMbps(const std::string& name);
// The interface to bind to for this process, from COLL_SOCKET_IFNAME / COLL_SOCKET_FAMILY.
Status selectInterface(NetInterface* out);
// As selectInterface, but among the allowed interfaces prefers `family` (when
// COLL_SOCKET_FAMILY does not force one), falling back to any family.
Status selectInterfacePreferring(int family, NetInterface* out);
// The COLL_SOCKET_IFNAME matcher as a pure function: does interface `name` pass `spec`?
// An empty spec passes everything (the default exclusions live in findInterfaces).
bool interfaceMatches(const std::string& spec, const std::string& name);
// COLL_SOCKET_FAMILY text ("AF_INET", "AF_INET6", "4", "6", "") to AF_INET/AF_INET6/AF_UNSPEC.
Status parseSocketFamily(const std::string& text, int* family);
// The local interface address from which `remote` is reached (a UDP connect trick, no traffic).
Status localAddressTowards(const SocketAddress& remote, SocketAddress* out);

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket();
  Socket(Socket&& other) noexcept;
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release();
  void close();

  // Listening socket bound to `address` (port 0 = any); the bound address is returned.
  static Status listen(const SocketAddress& address, int backlog, Socket* out, SocketAddress* bound);
  // Connects with retries on ECONNREFUSED until the deadline, or until *cancelled (when given)
  // turns true: an abort must not wait out the retries towards a peer that has gone.
  // `local` (port 0), when given: the connection leaves from that address (a tcp rail).
  static Status connect(const SocketAddress& address, Deadline deadline, Socket* out,
                        const std::atomic<bool>* cancelled = nullptr, const SocketAddress* local = nullptr);
  // Accepts one connection (or fails at the deadline).
  Status accept(Deadline deadline, Socket* out, SocketAddress* peer) const;

  // Blocking, deadline-bounded whole-buffer I/O (the socket may be non-blocking).
  Status sendAll(const void* data, size_t size, Deadline deadline);
  Status recvAll(void* data, size_t size, Deadline deadline);

  Status setNonBlocking(bool on);
  Status setNoDelay(bool on);
  Status setBufferSizes(int bytes);

 private:
  int fd_ = -1;
};

}  // namespace coll
