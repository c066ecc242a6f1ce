// ib transport error paths on the verbs test double: injected completion errors, remote access
// errors and a port going down become clean errors on both ranks (the failing one and the one
// waiting for it), never a hang. Each test runs in a child process, since injected faults stay in
// the process's double.
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "collective/collective.h"
#include "tests/ib_double/verbs_double.h"
#include "tests/unit/comm_threads.h"
#include "transports/ib/ib_transport.h"

namespace coll {
namespace {

struct Outcome {
  int code = -1;
  std::string message;
};

// Runs `body` in a child process (fresh double) and returns one outcome per rank.
std::vector<Outcome> inChild(const std::function<std::vector<Outcome>()>& body) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    setVerbsApiForTesting(&testing::verbsTestDouble());
    std::vector<Outcome> out = body();
    std::string text;
    for (const Outcome& o : out) text += std::to_string(o.code) + "|" + o.message + "\n";
    size_t off = 0;
    while (off < text.size()) {
      ssize_t n = write(fds[1], text.data() + off, text.size() - off);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  char buf[4096];
  auto start = std::chrono::steady_clock::now();
  for (;;) {
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, 1000) > 0) {
      ssize_t n = read(fds[0], buf, sizeof(buf));
      if (n <= 0) break;
      text.append(buf, static_cast<size_t>(n));
    }
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(90)) {
      kill(pid, SIGKILL);
      text += "-2|the child hung\n";
      break;
    }
  }
  close(fds[0]);
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  std::vector<Outcome> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(pos, nl - pos);
    size_t bar = line.find('|');
    if (bar != std::string::npos) out.push_back(Outcome{atoi(line.substr(0, bar).c_str()), line.substr(bar + 1)});
    pos = nl + 1;
  }
  return out;
}

// Two connected ranks (threads); after both connected, rank 0 injects `fault` and sends one
// message that rank 1 waits for. Each rank returns how its loop ended (10 s cap).
std::vector<Outcome> faultedPair(testing::VerbsFault fault, bool bothSend) {
  SocketAddress bind;
  (void)SocketAddress::parse("127.0.0.1:0", &bind);
  Secret secret{};
  collUniqueId id;
  if (!startBootstrapRoot(bind, &secret, &id).ok()) return {Outcome{-3, "no bootstrap root"}};
  std::vector<Outcome> out(2);
  std::atomic<int> connected{0};
  std::atomic<bool> injected{false};
  std::thread t[2];
  for (int r = 0; r < 2; ++r) {
    t[r] = std::thread([&, r] {
      Deadline deadline = Deadline::afterMs(20000);
      auto finish = [&](const Status& st) { out[r] = Outcome{st.code(), st.ok() ? "ok" : st.message()}; };
      std::unique_ptr<Bootstrap> bs;
      Status st = Bootstrap::create(id, r, 2, 0x77, deadline, &bs);
      if (!st.ok()) return finish(st);
      IbOptions o;
      o.ringBytes = 64 << 10;
      std::shared_ptr<IbDevice> dev;
      st = IbDevice::open(activeVerbsApi(), o, &dev);
      if (!st.ok()) return finish(st);
      std::unique_ptr<IbConnection> c;
      st = connectIb(*bs, dev, 1 - r, o, deadline, &c);
      connected.fetch_add(1);
      if (!st.ok()) return finish(st);
      while (connected.load() < 2) std::this_thread::yield();
      if (r == 0) {
        testing::injectVerbsFault(fault);
        injected.store(true);
      }
      while (!injected.load()) std::this_thread::yield();
      if (r == 0 || bothSend) {
        auto space = c->sendSpace();
        memset(space.data(), 1, 64);
        c->sendCommit(64);
      }
      auto start = std::chrono::steady_clock::now();
      auto lastHealth = start;
      uint64_t got = 0;
      for (;;) {
        bool progressed = false;
        st = c->progress(&progressed);
        if (!st.ok()) return finish(st);
        auto data = c->recvData();
        if (!data.empty()) {
          got += data.size();
          c->recvConsume(data.size());
        }
        auto now = std::chrono::steady_clock::now();
        if (now - lastHealth > std::chrono::milliseconds(100)) {
          lastHealth = now;
          st = c->checkHealth();
          if (!st.ok()) return finish(st);
        }
        if (now - start > std::chrono::seconds(10)) {
          return finish(makeError(collTimeout, "no error after 10 s (received %llu bytes)",
                                  static_cast<unsigned long long>(got)));
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
  }
  for (auto& th : t) th.join();
  return out;
}

TEST(IbFaults, RetryExceededFailsTheSenderAndTellsTheReceiver) {
  auto out = inChild([] { return faultedPair(testing::VerbsFault::FailNextSend, false); });
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].code, collRemoteError) << out[0].message;
  EXPECT_NE(out[0].message.find("retry"), std::string::npos) << out[0].message;
  EXPECT_NE(out[0].message.find("COLL_IB_RETRY_CNT"), std::string::npos) << out[0].message;
  EXPECT_NE(out[0].message.find("rank 1"), std::string::npos) << out[0].message;
  EXPECT_NE(out[0].message.find("verbsdouble0:1"), std::string::npos) << out[0].message;
  EXPECT_EQ(out[1].code, collRemoteError) << out[1].message;
  EXPECT_NE(out[1].message.find("rank 0"), std::string::npos) << out[1].message;
}

TEST(IbFaults, RemoteAccessErrorFailsBothRanks) {
  auto out = inChild([] { return faultedPair(testing::VerbsFault::RemoteAccessError, false); });
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].code, collRemoteError) << out[0].message;
  EXPECT_NE(out[0].message.find("remote access"), std::string::npos) << out[0].message;
  EXPECT_EQ(out[1].code, collRemoteError) << out[1].message;
}

TEST(IbFaults, PortDownIsASystemErrorNamingThePort) {
  auto out = inChild([] { return faultedPair(testing::VerbsFault::PortDown, true); });
  ASSERT_EQ(out.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(out[r].code, collSystemError) << out[r].message;
    EXPECT_NE(out[r].message.find("verbsdouble0:1"), std::string::npos) << out[r].message;
    EXPECT_NE(out[r].message.find("went down"), std::string::npos) << out[r].message;
    EXPECT_NE(out[r].message.find("COLL_IB_HCA"), std::string::npos) << out[r].message;
  }
}

TEST(IbFaults, DeadLinkBecomesRetryExceededOnBothRanks) {
  auto out = inChild([] { return faultedPair(testing::VerbsFault::CutWire, true); });
  ASSERT_EQ(out.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(out[r].code, collRemoteError) << out[r].message;
    EXPECT_NE(out[r].message.find("COLL_IB_RETRY_CNT"), std::string::npos) << out[r].message;
  }
}

// Through the API: a collective that hits a failed write ends with an error on both ranks well
// before COLL_TIMEOUT.
TEST(IbFaults, CollectiveFailsCleanlyOnBothRanks) {
  auto out = inChild([] {
    setenv("COLL_TRANSPORT", "ib", 1);
    setenv("COLL_LINK_PROBE", "0", 1);
    setenv("COLL_TIMEOUT", "60", 1);
    std::vector<Outcome> res(2);
    collUniqueId id;
    if (collGetUniqueId(&id) != collSuccess) return std::vector<Outcome>{Outcome{-3, "no id"}};
    std::atomic<int> warm{0};
    std::thread t[2];
    for (int r = 0; r < 2; ++r) {
      t[r] = std::thread([&, r] {
        collComm_t comm = nullptr;
        collResult_t rc = collCommInitRank(&comm, 2, id, r);
        if (rc != collSuccess) {
          res[r] = Outcome{rc, collGetLastError(nullptr)};
          return;
        }
        std::vector<float> buf(100000, 1.0f);
        rc = collAllReduce(buf.data(), buf.data(), buf.size(), collFloat32, collSum, comm, nullptr);
        warm.fetch_add(1);
        while (warm.load() < 2) std::this_thread::yield();
        if (r == 0) testing::injectVerbsFault(testing::VerbsFault::FailNextSend);
        auto start = std::chrono::steady_clock::now();
        if (rc == collSuccess)
          rc = collAllReduce(buf.data(), buf.data(), buf.size(), collFloat32, collSum, comm, nullptr);
        double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        res[r] = Outcome{rc, std::string(collGetLastError(comm)) + " [" + std::to_string(secs) + " s]"};
        (void)collCommAbort(comm);
      });
    }
    for (auto& th : t) th.join();
    return res;
  });
  ASSERT_EQ(out.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(out[r].code, collRemoteError) << "rank " << r << ": " << out[r].message;
  }
}

}  // namespace
}  // namespace coll
