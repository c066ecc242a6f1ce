// File descriptors handed between processes of one host: a Unix stream socket in the abstract
// namespace (no file to clean up; per network namespace) and SCM_RIGHTS. The CUDA IPC path passes
// the POSIX file descriptors of cuMem allocations this way, as the driver expects its users to.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

#include "src/base/deadline.h"
#include "src/base/status.h"

namespace coll {

class FdListener {
 public:
  FdListener() = default;
  ~FdListener();
  FdListener(const FdListener&) = delete;
  FdListener& operator=(const FdListener&) = delete;

  // Listens on abstract socket `name` (without the leading NUL), room for `backlog` senders that
  // have not been received yet.
  Status listen(const std::string& name, int backlog);
  // Receives one sender's message: exactly `bytes` of header and one descriptor (*fd, owned by the
  // caller), and the sender's pid as the kernel reports it (SO_PEERCRED: not the sender's word).
  Status receive(void* header, size_t bytes, int* fd, pid_t* senderPid, Deadline deadline);

 private:
  int fd_ = -1;
};

// Connects to abstract socket `name` and sends `bytes` of header with descriptor `fd` (which stays
// the caller's). Does not wait for the receiver to accept: the kernel queues the message.
Status sendFd(const std::string& name, const void* header, size_t bytes, int fd);

}  // namespace coll
