// Sockets (see socket.h): address parsing/printing, interface selection (COLL_SOCKET_IFNAME,
// COLL_SOCKET_FAMILY) and the RAII socket whose every blocking call is bounded by a deadline.
#include "src/oob/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "src/base/byte_order.h"
#include "src/base/config.h"
#include "src/base/log.h"

namespace coll {

// family code (4/6), pad, port, IPv6 scope id, 16 address bytes.
bool putSocketAddress(uint8_t* p, const SocketAddress& a) {
  memset(p, 0, kSocketAddressWire);
  if (a.family() == AF_INET) {
    auto* s = reinterpret_cast<const sockaddr_in*>(&a.storage);
    p[0] = 4;
    le::put16(p + 2, a.port());
    memcpy(p + 8, &s->sin_addr, 4);
    return true;
  }
  if (a.family() == AF_INET6) {
    auto* s = reinterpret_cast<const sockaddr_in6*>(&a.storage);
    p[0] = 6;
    le::put16(p + 2, a.port());
    le::put32(p + 4, s->sin6_scope_id);
    memcpy(p + 8, &s->sin6_addr, 16);
    return true;
  }
  return false;
}

bool getSocketAddress(const uint8_t* p, SocketAddress* out) {
  SocketAddress a;
  if (p[0] == 4) {
    auto* s = reinterpret_cast<sockaddr_in*>(&a.storage);
    s->sin_family = AF_INET;
    memcpy(&s->sin_addr, p + 8, 4);
    a.length = sizeof(sockaddr_in);
  } else if (p[0] == 6) {
    auto* s = reinterpret_cast<sockaddr_in6*>(&a.storage);
    s->sin6_family = AF_INET6;
    s->sin6_scope_id = le::get32(p + 4);
    memcpy(&s->sin6_addr, p + 8, 16);
    a.length = sizeof(sockaddr_in6);
  } else {
    return false;
  }
  a.setPort(le::get16(p + 2));
  if (a.port() == 0) return false;
  *out = a;
  return true;
}

const StringKnob kSocketIfname("COLL_SOCKET_IFNAME", "",
                               "Interfaces to use: prefix list (eth,ib), ^ to exclude, = for exact names.",
                               {KnobSection::Bootstrap, 70});
const StringKnob kSocketFamily("COLL_SOCKET_FAMILY", "",
                               "AF_INET or AF_INET6 to force the address family of the chosen interface.",
                               {KnobSection::Bootstrap, 80});

namespace {

bool isIpv6LinkLocal(const sockaddr_in6& a) {
  return a.sin6_addr.s6_addr[0] == 0xfe && (a.sin6_addr.s6_addr[1] & 0xc0) == 0x80;
}

std::string familyName(int family) {
  if (family == AF_INET) return "AF_INET";
  if (family == AF_INET6) return "AF_INET6";
  return "any family";
}

// poll() on one fd, EINTR-safe, bounded by the deadline. Returns 1 ready, 0 timeout, -1 error.
int pollOne(int fd, short events, Deadline deadline, short* revents) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, deadline.remainingMs());
    if (rc < 0 && errno == EINTR) continue;
    if (rc > 0 && revents) *revents = p.revents;
    return rc;
  }
}

}  // namespace

// ---- SocketAddress ----------------------------------------------------------------------------

uint16_t SocketAddress::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return 0;
}

void SocketAddress::setPort(uint16_t port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(port);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(port);
}

std::string SocketAddress::toString() const {
  char buf[INET6_ADDRSTRLEN + IF_NAMESIZE + 16] = {0};
  if (family() == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&storage);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
    return std::string(buf) + ":" + std::to_string(port());
  }
  if (family() == AF_INET6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&storage);
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    std::string host(buf);
    if (a->sin6_scope_id != 0) {
      char ifname[IF_NAMESIZE] = {0};
      if (if_indextoname(a->sin6_scope_id, ifname) != nullptr) host += std::string("%") + ifname;
      else host += "%" + std::to_string(a->sin6_scope_id);
    }
    return "[" + host + "]:" + std::to_string(port());
  }
  return "<no address>";
}

Status SocketAddress::parse(const std::string& text, SocketAddress* out) {
  std::string host, portText;
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return makeError(collInvalidArgument, "cannot parse address '%s': expected [ipv6]:port", text.c_str());
    }
    host = text.substr(1, close - 1);
    portText = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string::npos) {
      return makeError(collInvalidArgument, "cannot parse address '%s': expected host:port", text.c_str());
    }
    if (text.find(':') != colon) {
      return makeError(collInvalidArgument, "cannot parse address '%s': write IPv6 addresses as [addr]:port",
                       text.c_str());
    }
    host = text.substr(0, colon);
    portText = text.substr(colon + 1);
  }
  if (host.empty()) {
    return makeError(collInvalidArgument, "cannot parse address '%s': the host is empty", text.c_str());
  }
  if (portText.empty() || portText.size() > 5 ||
      !std::all_of(portText.begin(), portText.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return makeError(collInvalidArgument, "cannot parse address '%s': the port must be 0..65535", text.c_str());
  }
  unsigned long port = strtoul(portText.c_str(), nullptr, 10);
  if (port > 65535) {
    return makeError(collInvalidArgument, "cannot parse address '%s': the port must be 0..65535", text.c_str());
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    return makeError(collInvalidArgument, "cannot resolve host '%s' (from '%s'): %s", host.c_str(), text.c_str(),
                     gai_strerror(rc));
  }
  // Prefer IPv4 among the results, so every process that resolves the name picks the same one.
  addrinfo* pick = nullptr;
  for (addrinfo* r = res; r; r = r->ai_next) {
    if (r->ai_family == AF_INET) {
      pick = r;
      break;
    }
    if (r->ai_family == AF_INET6 && pick == nullptr) pick = r;
  }
  if (pick == nullptr || pick->ai_addrlen > sizeof(sockaddr_storage)) {
    freeaddrinfo(res);
    return makeError(collInvalidArgument, "host '%s' has no IPv4 or IPv6 address", host.c_str());
  }
  SocketAddress a;
  memcpy(&a.storage, pick->ai_addr, pick->ai_addrlen);
  a.length = pick->ai_addrlen;
  freeaddrinfo(res);
  a.setPort(static_cast<uint16_t>(port));
  *out = a;
  return okStatus();
}

bool SocketAddress::operator==(const SocketAddress& other) const {
  if (family() != other.family()) return false;
  if (family() == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&storage);
    auto* b = reinterpret_cast<const sockaddr_in*>(&other.storage);
    return a->sin_port == b->sin_port && a->sin_addr.s_addr == b->sin_addr.s_addr;
  }
  if (family() == AF_INET6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&storage);
    auto* b = reinterpret_cast<const sockaddr_in6*>(&other.storage);
    return a->sin6_port == b->sin6_port && a->sin6_scope_id == b->sin6_scope_id &&
           memcmp(&a->sin6_addr, &b->sin6_addr, sizeof(in6_addr)) == 0;
  }
  return family() == AF_UNSPEC;
}

bool SocketAddress::isLoopback() const {
  if (family() == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&storage);
    return (ntohl(a->sin_addr.s_addr) >> 24) == 127;
  }
  if (family() == AF_INET6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&storage);
    return IN6_IS_ADDR_LOOPBACK(&a->sin6_addr);
  }
  return false;
}

bool SocketAddress::isWildcard() const {
  if (family() == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr.s_addr == htonl(INADDR_ANY);
  }
  if (family() == AF_INET6) {
    return IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr);
  }
  return false;
}

SocketAddress SocketAddress::wildcard(int family, uint16_t port) {
  SocketAddress a;
  if (family == AF_INET6) {
    auto* s = reinterpret_cast<sockaddr_in6*>(&a.storage);
    s->sin6_family = AF_INET6;
    s->sin6_addr = in6addr_any;
    a.length = sizeof(sockaddr_in6);
  } else {
    auto* s = reinterpret_cast<sockaddr_in*>(&a.storage);
    s->sin_family = AF_INET;
    s->sin_addr.s_addr = htonl(INADDR_ANY);
    a.length = sizeof(sockaddr_in);
  }
  a.setPort(port);
  return a;
}

// ---- interfaces -------------------------------------------------------------------------------

bool interfaceMatches(const std::string& specText, const std::string& name) {
  std::string spec = specText;
  bool exclude = false, exact = false;
  if (!spec.empty() && spec[0] == '^') exclude = true, spec.erase(0, 1);
  if (!spec.empty() && spec[0] == '=') exact = true, spec.erase(0, 1);
  bool matched = false;
  bool anyEntry = false;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    if (comma == std::string::npos) comma = spec.size();
    std::string entry = spec.substr(start, comma - start);
    start = comma + 1;
    if (entry.empty()) continue;
    anyEntry = true;
    if (exact ? name == entry : name.compare(0, entry.size(), entry) == 0) matched = true;
  }
  if (!anyEntry) return true;
  return exclude ? !matched : matched;
}

Status parseSocketFamily(const std::string& text, int* family) {
  std::string t = text;
  for (auto& c : t) c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
  if (t.empty()) *family = AF_UNSPEC;
  else if (t == "AF_INET" || t == "INET" || t == "4" || t == "IPV4") *family = AF_INET;
  else if (t == "AF_INET6" || t == "INET6" || t == "6" || t == "IPV6") *family = AF_INET6;
  else {
    return makeError(collInvalidUsage, "COLL_SOCKET_FAMILY=%s is not AF_INET or AF_INET6", text.c_str());
  }
  return okStatus();
}

uint32_t interfaceSpeedMbps(const std::string& name) {
  FILE* f = fopen(("/sys/class/net/" + name + "/speed").c_str(), "r");
  if (f == nullptr) return 0;
  long long v = 0;
  const bool ok = fscanf(f, "%lld", &v) == 1;
  fclose(f);
  return ok && v > 0 && v < (1ll << 31) ? static_cast<uint32_t>(v) : 0;
}

Status findInterfaces(const std::string& spec, int family, std::vector<NetInterface>* out) {
  out->clear();
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return makeError(collSystemError, "getifaddrs failed: %s", errnoText(errno).c_str());
  }
  std::vector<NetInterface> preferred, loopback;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || !(i->ifa_flags & IFF_UP)) continue;
    int f = i->ifa_addr->sa_family;
    if (f != AF_INET && f != AF_INET6) continue;
    if (family != AF_UNSPEC && f != family) continue;
    // Link-local IPv6 needs a scope id that means nothing on the peer's host: skip it.
    if (f == AF_INET6 && isIpv6LinkLocal(*reinterpret_cast<sockaddr_in6*>(i->ifa_addr))) continue;
    NetInterface ni;
    ni.name = i->ifa_name;
    ni.address.length = f == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    memcpy(&ni.address.storage, i->ifa_addr, ni.address.length);
    ni.address.setPort(0);
    bool isLoop = (i->ifa_flags & IFF_LOOPBACK) != 0;
    if (!spec.empty()) {
      if (interfaceMatches(spec, ni.name)) preferred.push_back(ni);
    } else if (isLoop) {
      loopback.push_back(ni);
    } else if (ni.name.compare(0, 6, "docker") != 0) {
      preferred.push_back(ni);
    }
  }
  freeifaddrs(list);
  std::vector<NetInterface>& chosen = preferred.empty() && spec.empty() ? loopback : preferred;
  // IPv4 first, then IPv6, each in kernel order: a rule every process applies alike.
  std::stable_partition(chosen.begin(), chosen.end(),
                        [](const NetInterface& n) { return n.address.family() == AF_INET; });
  *out = std::move(chosen);
  return okStatus();
}

Status selectInterfacePreferring(int preferredFamily, NetInterface* out) {
  std::string spec = kSocketIfname.get();
  int family = AF_UNSPEC;
  COLL_TRY(parseSocketFamily(kSocketFamily.get(), &family));
  std::vector<NetInterface> list;
  COLL_TRY(findInterfaces(spec, family, &list));
  if (list.empty()) {
    std::vector<NetInterface> all;
    std::string names;
    if (findInterfaces("", AF_UNSPEC, &all).ok()) {
      for (auto& n : all) names += (names.empty() ? "" : ", ") + n.name + " " + n.address.toString();
    }
    return makeError(collInvalidUsage,
                     "no usable network interface matches COLL_SOCKET_IFNAME='%s' (%s); "
                     "interfaces that are up: %s",
                     spec.c_str(), familyName(family).c_str(), names.empty() ? "none" : names.c_str());
  }
  if (family == AF_UNSPEC && preferredFamily != AF_UNSPEC) {
    for (auto& n : list) {
      if (n.address.family() == preferredFamily) {
        *out = n;
        return okStatus();
      }
    }
  }
  *out = list.front();
  return okStatus();
}

Status selectInterface(NetInterface* out) { return selectInterfacePreferring(AF_UNSPEC, out); }

Status localAddressTowards(const SocketAddress& remote, SocketAddress* out) {
  int fd = ::socket(remote.family(), SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return makeError(collSystemError, "socket() failed: %s", errnoText(errno).c_str());
  Socket guard(fd);
  SocketAddress target = remote;
  if (target.port() == 0) target.setPort(9);  // connect() on UDP needs a port; no traffic is sent
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&target.storage), target.length) != 0) {
    return makeError(collSystemError, "no route to %s: %s", remote.toString().c_str(), errnoText(errno).c_str());
  }
  SocketAddress local;
  local.length = sizeof(local.storage);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local.storage), &local.length) != 0) {
    return makeError(collSystemError, "getsockname failed: %s", errnoText(errno).c_str());
  }
  local.setPort(0);
  *out = local;
  return okStatus();
}

// ---- Socket -----------------------------------------------------------------------------------

Socket::~Socket() { close(); }

Socket::Socket(Socket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

int Socket::release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

void Socket::close() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

Status Socket::listen(const SocketAddress& address, int backlog, Socket* out, SocketAddress* bound) {
  int fd = ::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return makeError(collSystemError, "socket() for %s failed: %s", address.toString().c_str(),
                     errnoText(errno).c_str());
  }
  Socket s(fd);
  int one = 1;
  // A restarted job must be able to reuse its fixed rendezvous port while old sockets linger.
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&address.storage), address.length) != 0) {
    int err = errno;
    return makeError(err == EADDRNOTAVAIL ? collInvalidUsage : collSystemError,
                     "cannot bind to %s: %s (check COLL_SOCKET_IFNAME / the rendezvous address)",
                     address.toString().c_str(), errnoText(err).c_str());
  }
  if (::listen(fd, backlog) != 0) {
    return makeError(collSystemError, "listen on %s failed: %s", address.toString().c_str(), errnoText(errno).c_str());
  }
  if (bound) {
    SocketAddress b;
    b.length = sizeof(b.storage);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&b.storage), &b.length) != 0) {
      return makeError(collSystemError, "getsockname failed: %s", errnoText(errno).c_str());
    }
    *bound = b;
  }
  *out = std::move(s);
  return okStatus();
}

Status Socket::connect(const SocketAddress& address, Deadline deadline, Socket* out, const std::atomic<bool>* cancelled,
                       const SocketAddress* local) {
  int backoffMs = 5;
  int lastErr = 0;
  int attempts = 0;
  for (;;) {
    ++attempts;
    int fd = ::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      return makeError(collSystemError, "socket() for %s failed: %s", address.toString().c_str(),
                       errnoText(errno).c_str());
    }
    Socket s(fd);
    if (local != nullptr && ::bind(fd, reinterpret_cast<const sockaddr*>(&local->storage), local->length) != 0) {
      return makeError(collSystemError, "cannot bind a connection to %s to the local address %s: %s",
                       address.toString().c_str(), local->toString().c_str(), errnoText(errno).c_str());
    }
    int rc;
    do {
      rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&address.storage), address.length);
    } while (rc != 0 && errno == EINTR);
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      short rev = 0;
      int p = pollOne(fd, POLLOUT, deadline, &rev);
      if (p == 0) {
        err = ETIMEDOUT;
      } else if (p < 0) {
        err = errno;
      } else {
        socklen_t len = sizeof(err);
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      }
    }
    if (err == 0) {
      COLL_TRY(s.setNonBlocking(false));
      *out = std::move(s);
      return okStatus();
    }
    lastErr = err;
    bool retryable = err == ECONNREFUSED || err == ETIMEDOUT || err == ECONNRESET || err == EAGAIN ||
                     err == ECONNABORTED || err == EHOSTUNREACH || err == ENETUNREACH;
    if (!retryable) break;
    if (deadline.expired()) break;
    if (cancelled != nullptr && cancelled->load(std::memory_order_acquire)) {
      return makeError(collRemoteError, "gave up connecting to %s after %d attempts: the communicator is being aborted",
                       address.toString().c_str(), attempts);
    }
    int sleepMs = std::min(backoffMs, deadline.remainingMs());
    std::this_thread::sleep_for(std::chrono::milliseconds(sleepMs));
    backoffMs = std::min(backoffMs * 2, 200);
    if (deadline.expired()) break;
  }
  return makeError(lastErr == ETIMEDOUT || lastErr == ECONNREFUSED ? collTimeout : collSystemError,
                   "cannot connect to %s after %d attempts: %s (is the peer running and reachable? "
                   "check COLL_SOCKET_IFNAME and COLL_TIMEOUT)",
                   address.toString().c_str(), attempts, errnoText(lastErr).c_str());
}

Status Socket::accept(Deadline deadline, Socket* out, SocketAddress* peer) const {
  for (;;) {
    short rev = 0;
    int p = pollOne(fd_, POLLIN, deadline, &rev);
    if (p == 0) return makeError(collTimeout, "timed out waiting for a connection (COLL_TIMEOUT)");
    if (p < 0) return makeError(collSystemError, "poll failed: %s", errnoText(errno).c_str());
    SocketAddress a;
    a.length = sizeof(a.storage);
    int fd = ::accept4(fd_, reinterpret_cast<sockaddr*>(&a.storage), &a.length, SOCK_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      // The client may have given up between poll and accept; wait for the next one.
      if (err == EINTR || err == EAGAIN || err == ECONNABORTED || err == EPROTO) continue;
      return makeError(collSystemError, "accept failed: %s", errnoText(err).c_str());
    }
    *out = Socket(fd);
    if (peer) *peer = a;
    return okStatus();
  }
}

Status Socket::sendAll(const void* data, size_t size, Deadline deadline) {
  const char* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::send(fd_, p + done, size - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      short rev = 0;
      int pr = pollOne(fd_, POLLOUT, deadline, &rev);
      if (pr == 0) {
        return makeError(collTimeout, "send timed out after %zu of %zu bytes (COLL_TIMEOUT)", done, size);
      }
      if (pr < 0) return makeError(collSystemError, "poll failed: %s", errnoText(errno).c_str());
      continue;
    }
    return makeError(collRemoteError,
                     "send failed after %zu of %zu bytes: %s (the peer closed "
                     "the connection or died)",
                     done, size, errnoText(errno).c_str());
  }
  return okStatus();
}

Status Socket::recvAll(void* data, size_t size, Deadline deadline) {
  char* p = static_cast<char*>(data);
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::recv(fd_, p + done, size - done, MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      return makeError(collRemoteError, "connection closed by the peer after %zu of %zu bytes", done, size);
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      short rev = 0;
      int pr = pollOne(fd_, POLLIN, deadline, &rev);
      if (pr == 0) {
        return makeError(collTimeout, "receive timed out after %zu of %zu bytes (COLL_TIMEOUT)", done, size);
      }
      if (pr < 0) return makeError(collSystemError, "poll failed: %s", errnoText(errno).c_str());
      continue;
    }
    return makeError(collRemoteError, "receive failed after %zu of %zu bytes: %s", done, size,
                     errnoText(errno).c_str());
  }
  return okStatus();
}

Status Socket::setNonBlocking(bool on) {
  int flags = fcntl(fd_, F_GETFL, 0);
  if (flags < 0) return makeError(collSystemError, "fcntl failed: %s", errnoText(errno).c_str());
  flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (fcntl(fd_, F_SETFL, flags) != 0) {
    return makeError(collSystemError, "fcntl failed: %s", errnoText(errno).c_str());
  }
  return okStatus();
}

Status Socket::setNoDelay(bool on) {
  int v = on ? 1 : 0;
  if (setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &v, sizeof(v)) != 0) {
    return makeError(collSystemError, "TCP_NODELAY failed: %s", errnoText(errno).c_str());
  }
  return okStatus();
}

Status Socket::setBufferSizes(int bytes) {
  if (bytes <= 0) return okStatus();  // 0 = keep the kernel's autotuning
  if (setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes)) != 0 ||
      setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes)) != 0) {
    return makeError(collSystemError, "setting socket buffers to %d bytes failed: %s", bytes, errnoText(errno).c_str());
  }
  return okStatus();
}

}  // namespace coll
