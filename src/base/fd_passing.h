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

// A file descriptor, closed when its owner goes (or is reset).
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

class FdListener {
 public:
  // Listens on abstract socket `name` (without the leading NUL), room for `backlog` senders that
  // have not been received yet.
  Status listen(const std::string& name, int backlog);
  // Receives one sender's message: exactly `bytes` of header and one descriptor (*fd), and the
  // sender's pid as the kernel reports it (SO_PEERCRED: not the sender's word).
  Status receive(void* header, size_t bytes, UniqueFd* fd, pid_t* senderPid, Deadline deadline);

 private:
  UniqueFd socket_;
};

// Connects to abstract socket `name` and sends `bytes` of header with descriptor `fd` (which stays
// the caller's). Does not wait for the receiver to accept: the kernel queues the message.
Status sendFd(const std::string& name, const void* header, size_t bytes, int fd);

}  // namespace coll
