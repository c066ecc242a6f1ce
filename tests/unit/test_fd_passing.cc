// File descriptors over abstract Unix sockets (src/base/fd_passing.h): what arrives is the sent
// file, with the sender's pid as the kernel reports it; malformed messages, a name nobody listens
// on and a sender that never comes are errors, the last one at its deadline.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "src/base/fd_passing.h"

namespace coll {
namespace {

std::string uniqueName(const char* what) {
  static int serial = 0;
  return "collective-test-" + std::to_string(getpid()) + "-" + what + "-" + std::to_string(serial++);
}

struct Header {
  int32_t rank;
  uint32_t magic;
};

bool sameFile(int a, int b) {
  struct stat sa {
  }, sb{};
  return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

TEST(FdPassing, TheSentFileArrivesWithTheSendersPid) {
  const std::string name = uniqueName("ok");
  FdListener listener;
  ASSERT_TRUE(listener.listen(name, 4).ok());
  FILE* file = tmpfile();
  ASSERT_NE(file, nullptr);
  // Two senders queue before anything is received: sending does not wait for the receiver.
  for (int32_t r : {3, 5}) {
    const Header h{r, 0xfeedu};
    Status s = sendFd(name, &h, sizeof h, fileno(file));
    ASSERT_TRUE(s.ok()) << s.message();
  }
  for (int32_t want : {3, 5}) {
    Header h{};
    UniqueFd fd;
    pid_t pid = 0;
    Status s = listener.receive(&h, sizeof h, &fd, &pid, Deadline::afterMs(5000));
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(h.rank, want);
    EXPECT_EQ(h.magic, 0xfeedu);
    EXPECT_EQ(pid, getpid());
    ASSERT_TRUE(fd.valid());
    EXPECT_NE(fd.get(), fileno(file)) << "a new descriptor";
    EXPECT_TRUE(sameFile(fd.get(), fileno(file)));
  }
  fclose(file);
}

TEST(FdPassing, NobodyListeningIsAnError) {
  const Header h{0, 0};
  Status s = sendFd(uniqueName("absent"), &h, sizeof h, 0);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("connect"), std::string::npos) << s.message();
}

TEST(FdPassing, NoSenderTimesOut) {
  FdListener listener;
  ASSERT_TRUE(listener.listen(uniqueName("idle"), 4).ok());
  Header h{};
  UniqueFd fd;
  pid_t pid = 0;
  const auto start = std::chrono::steady_clock::now();
  Status s = listener.receive(&h, sizeof h, &fd, &pid, Deadline::afterMs(200));
  EXPECT_EQ(s.code(), collTimeout) << s.message();
  EXPECT_FALSE(fd.valid());
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(150));
}

// A message without a descriptor, or of another size, is refused (and leaks nothing).
TEST(FdPassing, MalformedMessagesAreRefused) {
  const std::string name = uniqueName("bad");
  FdListener listener;
  ASSERT_TRUE(listener.listen(name, 4).ok());
  {
    const Header h{1, 2};
    EXPECT_TRUE(sendFd(name, &h, sizeof h - 2, 0).ok());  // short header, with a descriptor
  }
  {
    // A plain connection that writes a header and no descriptor.
    const int sock = socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_GE(sock, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    memcpy(addr.sun_path + 1, name.data(), name.size());
    ASSERT_EQ(connect(sock, reinterpret_cast<sockaddr*>(&addr),
                      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size())),
              0);
    const Header h{1, 2};
    ASSERT_EQ(write(sock, &h, sizeof h), static_cast<ssize_t>(sizeof h));
    close(sock);
  }
  for (int i = 0; i < 2; ++i) {
    Header h{};
    UniqueFd fd;
    pid_t pid = 0;
    Status s = listener.receive(&h, sizeof h, &fd, &pid, Deadline::afterMs(5000));
    EXPECT_FALSE(s.ok()) << "message " << i;
    EXPECT_FALSE(fd.valid());
  }
}

}  // namespace
}  // namespace coll
