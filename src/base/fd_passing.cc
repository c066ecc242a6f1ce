#include "src/base/fd_passing.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace coll {

namespace {

Status abstractAddress(const std::string& name, sockaddr_un* addr, socklen_t* len) {
  std::memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  if (name.empty() || name.size() + 1 > sizeof addr->sun_path) {
    return makeError(collInternalError, "abstract socket name of %zu bytes", name.size());
  }
  std::memcpy(addr->sun_path + 1, name.data(), name.size());  // sun_path[0] = 0: abstract
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return okStatus();
}

Status systemError(const char* what) { return makeError(collSystemError, "%s: %s", what, strerror(errno)); }

}  // namespace

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
}

Status FdListener::listen(const std::string& name, int backlog) {
  sockaddr_un addr;
  socklen_t len = 0;
  COLL_TRY(abstractAddress(name, &addr, &len));
  socket_.reset(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!socket_.valid()) return systemError("socket(AF_UNIX)");
  if (bind(socket_.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0)
    return systemError("bind (abstract unix socket)");
  if (::listen(socket_.get(), backlog) != 0) return systemError("listen (abstract unix socket)");
  return okStatus();
}

Status FdListener::receive(void* header, size_t bytes, UniqueFd* fd, pid_t* senderPid, Deadline deadline) {
  fd->reset();
  *senderPid = 0;
  if (!socket_.valid()) return makeError(collInternalError, "FdListener::receive before listen");
  UniqueFd conn;
  while (!conn.valid()) {
    conn.reset(accept4(socket_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (conn.valid()) break;
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return systemError("accept (abstract unix socket)");
    if (deadline.expired()) return makeError(collTimeout, "no descriptor arrived within the timeout");
    pollfd p{socket_.get(), POLLIN, 0};
    (void)poll(&p, 1, std::min(deadline.remainingMs(), 100));
  }
  ucred cred{};
  socklen_t credLen = sizeof cred;
  if (getsockopt(conn.get(), SOL_SOCKET, SO_PEERCRED, &cred, &credLen) != 0) return systemError("SO_PEERCRED");
  // The sender wrote everything before we accepted, or is about to: one message, waited for.
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  iovec iov{header, bytes};
  msghdr msg{};
  msg.msg_iov = &iov, msg.msg_iovlen = 1;
  msg.msg_control = control, msg.msg_controllen = sizeof control;
  ssize_t got = -1;
  while ((got = recvmsg(conn.get(), &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT)) < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return systemError("recvmsg (abstract unix socket)");
    if (deadline.expired()) return makeError(collTimeout, "a descriptor's message did not arrive within the timeout");
    pollfd p{conn.get(), POLLIN, 0};
    (void)poll(&p, 1, std::min(deadline.remainingMs(), 100));
  }
  UniqueFd arrived;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof(int))) {
      int received = -1;
      std::memcpy(&received, CMSG_DATA(c), sizeof(int));
      arrived.reset(received);
    }
  }
  if (static_cast<size_t>(got) != bytes || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 || !arrived.valid()) {
    return makeError(collRemoteError, "a malformed descriptor message (%zd bytes of %zu)", got, bytes);
  }
  *fd = std::move(arrived);
  *senderPid = cred.pid;
  return okStatus();
}

Status sendFd(const std::string& name, const void* header, size_t bytes, int fd) {
  sockaddr_un addr;
  socklen_t len = 0;
  COLL_TRY(abstractAddress(name, &addr, &len));
  const UniqueFd sock(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) return systemError("socket(AF_UNIX)");
  if (connect(sock.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    return systemError("connect (abstract unix socket)");
  }
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  iovec iov{const_cast<void*>(header), bytes};
  msghdr msg{};
  msg.msg_iov = &iov, msg.msg_iovlen = 1;
  msg.msg_control = control, msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_RIGHTS, c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  ssize_t sent = -1;
  do {
    sent = sendmsg(sock.get(), &msg, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) return systemError("sendmsg (abstract unix socket)");
  if (sent != static_cast<ssize_t>(bytes)) return makeError(collSystemError, "sendmsg: a short write");
  return okStatus();
}

}  // namespace coll
