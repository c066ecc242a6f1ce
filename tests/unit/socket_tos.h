// Test helper: the IP_TOS of every connected TCP socket of this process. Tests whose ranks, or
// both ends of a pair, are threads of the process read back the class their transports set.
#pragma once

#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdlib>
#include <map>

namespace coll::testutil {

// getsockopt of an int option; -1 where the socket has none.
inline int intSockopt(int fd, int level, int name) {
  int v = -1;
  socklen_t len = sizeof(v);
  return getsockopt(fd, level, name, &v, &len) == 0 ? v : -1;
}

// IPv4 stream sockets that are not listening, counted by their IP_TOS.
inline std::map<int, int> tcpSocketsByTos() {
  std::map<int, int> count;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return count;
  while (dirent* e = readdir(dir)) {
    const int fd = atoi(e->d_name);
    if (fd <= 2 || fd == dirfd(dir)) continue;
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 || addr.ss_family != AF_INET ||
        intSockopt(fd, SOL_SOCKET, SO_TYPE) != SOCK_STREAM || intSockopt(fd, SOL_SOCKET, SO_ACCEPTCONN) != 0) {
      continue;
    }
    ++count[intSockopt(fd, IPPROTO_IP, IP_TOS)];
  }
  closedir(dir);
  return count;
}

}  // namespace coll::testutil
