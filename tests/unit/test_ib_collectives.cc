// Whole collectives over COLL_TRANSPORT=ib on the verbs test double, ranks as threads of this
// process: exact results for 2-4 ranks, a small staging ring, multi-rail (4 rails, and a rail
// lost mid-run), and a send/receive ping-pong that bench/ib_double_instructions.sh counts
// instructions on.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collective/collective.h"
#include "src/base/log.h"
#include "tests/ib_double/verbs_double.h"
#include "tests/unit/comm_threads.h"
#include "transports/ib/verbs_api.h"
#include "transports/net.h"

namespace {

using coll::testutil::withComms;

class IbCollectives : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    coll::testing::configureVerbsDouble(coll::testing::VerbsDoubleOptions{});
    coll::testing::injectVerbsFault(coll::testing::VerbsFault::None);
    coll::setVerbsApiForTesting(&coll::testing::verbsTestDouble());
    setenv("COLL_TRANSPORT", "ib", 1);
    setenv("COLL_LINK_PROBE", "0", 1);
  }
  void TearDown() override {
    unsetenv("COLL_TRANSPORT");
    unsetenv("COLL_LINK_PROBE");
    unsetenv("COLL_IB_STAGING_BYTES");
    unsetenv("COLL_IB_QPS_PER_CONNECTION");
    coll::setVerbsApiForTesting(nullptr);
  }
};

float value(int rank, size_t i) { return static_cast<float>(rank * 3 + static_cast<int>(i % 101)); }

void allCollectives(int n) {
  withComms(n, [&](int rank, collComm_t comm) {
    for (size_t count : {size_t{1}, size_t{1000}, size_t{300000}}) {
      std::vector<float> send(count), recv(count, -1);
      for (size_t i = 0; i < count; ++i) send[i] = value(rank, i);
      ASSERT_EQ(collAllReduce(send.data(), recv.data(), count, collFloat32, collSum, comm, nullptr), collSuccess)
          << collGetLastError(comm);
      for (size_t i = 0; i < count; ++i) {
        float expect = 0;
        for (int r = 0; r < n; ++r) expect += value(r, i);
        ASSERT_EQ(recv[i], expect) << "rank " << rank << " count " << count << " i " << i;
      }
      std::vector<float> gathered(count * n, -1);
      ASSERT_EQ(collAllGather(send.data(), gathered.data(), count, collFloat32, comm, nullptr), collSuccess)
          << collGetLastError(comm);
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < count; ++i) ASSERT_EQ(gathered[r * count + i], value(r, i));
      std::vector<float> bcast(count, -1);
      ASSERT_EQ(collBroadcast(send.data(), bcast.data(), count, collFloat32, n - 1, comm, nullptr), collSuccess)
          << collGetLastError(comm);
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(bcast[i], value(n - 1, i));
      std::vector<float> block(count, -1);
      std::vector<float> full(count * n);
      for (size_t i = 0; i < count * n; ++i) full[i] = value(rank, i);
      ASSERT_EQ(collReduceScatter(full.data(), block.data(), count, collFloat32, collSum, comm, nullptr), collSuccess)
          << collGetLastError(comm);
      for (size_t i = 0; i < count; ++i) {
        float expect = 0;
        for (int r = 0; r < n; ++r) expect += value(r, rank * count + i);
        ASSERT_EQ(block[i], expect);
      }
    }
    std::vector<float> a2a(64 * n), out(64 * n, -1);
    for (size_t i = 0; i < a2a.size(); ++i) a2a[i] = value(rank, i);
    ASSERT_EQ(collAlltoAll(a2a.data(), out.data(), 64, collFloat32, comm, nullptr), collSuccess)
        << collGetLastError(comm);
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < 64; ++i) ASSERT_EQ(out[r * 64 + i], value(r, rank * 64 + i));
    ASSERT_EQ(collBarrier(comm, nullptr), collSuccess) << collGetLastError(comm);
  });
}

TEST_P(IbCollectives, ExactResults) { allCollectives(GetParam()); }

TEST_P(IbCollectives, ExactResultsThroughATinyRingOnFourQps) {
  setenv("COLL_IB_STAGING_BYTES", "8K", 1);
  setenv("COLL_IB_QPS_PER_CONNECTION", "4", 1);
  allCollectives(GetParam());
}

// Ranks that sleep as soon as they are idle: the completion channel and its arming race.
TEST_P(IbCollectives, ExactResultsSleepingOnTheCompletionChannel) {
  setenv("COLL_SPIN_COUNT", "0", 1);
  setenv("COLL_YIELD_COUNT", "0", 1);
  allCollectives(GetParam());
  unsetenv("COLL_SPIN_COUNT");
  unsetenv("COLL_YIELD_COUNT");
}

INSTANTIATE_TEST_SUITE_P(Ranks, IbCollectives, ::testing::Values(2, 3, 4));

// The double's table with modifyQp recording the GRH traffic class of every move to RTR (where
// the address vector, and with it the class, is set).
std::mutex gRtrMu;
std::vector<int> gRtrTrafficClasses;
int recordingModifyQp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
  if ((mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RTR && (mask & IBV_QP_AV) && attr->ah_attr.is_global) {
    std::lock_guard<std::mutex> lock(gRtrMu);
    gRtrTrafficClasses.push_back(attr->ah_attr.grh.traffic_class);
  }
  return coll::testing::verbsTestDouble().modifyQp(qp, attr, mask);
}
const coll::VerbsApi& recordingVerbsDouble() {
  static const coll::VerbsApi api = [] {
    coll::VerbsApi a = coll::testing::verbsTestDouble();
    a.modifyQp = recordingModifyQp;
    return a;
  }();
  return api;
}

// The traffic classes the QPs of a 2-rank communicator made with `config` were given.
std::vector<int> rtrTrafficClasses(const collConfig_t* config) {
  gRtrTrafficClasses.clear();
  coll::setVerbsApiForTesting(&recordingVerbsDouble());
  withComms(
      2,
      [](int, collComm_t comm) {
        float x = 1, y = 0;
        ASSERT_EQ(collAllReduce(&x, &y, 1, collFloat32, collSum, comm, nullptr), collSuccess) << collGetLastError(comm);
      },
      config);
  std::lock_guard<std::mutex> lock(gRtrMu);
  return gRtrTrafficClasses;
}

TEST_F(IbCollectives, ConfigTrafficClassIsTheQpsGrhTrafficClass) {
  setenv("COLL_IB_QPS_PER_CONNECTION", "2", 1);
  setenv("COLL_IB_TC", "32", 1);
  collConfig_t config = COLL_CONFIG_INITIALIZER;
  config.trafficClass = 0x68;
  const std::vector<int> classes = rtrTrafficClasses(&config);
  EXPECT_GE(classes.size(), 4u);  // 2 QPs at each of the 2 ranks
  for (int tc : classes) EXPECT_EQ(tc, 0x68);
  // Unset: COLL_IB_TC, as before the field existed.
  const std::vector<int> defaults = rtrTrafficClasses(nullptr);
  EXPECT_GE(defaults.size(), 4u);
  for (int tc : defaults) EXPECT_EQ(tc, 32);
  unsetenv("COLL_IB_TC");
}

// The same over the real verbs stack where a device with an active port exists (hardware or
// SoftRoCE: bench/softroce.sh up); skipped with the reason elsewhere.
TEST(IbCollectivesRealDevice, ExactResults) {
  coll::setVerbsApiForTesting(nullptr);
  std::string why;
  if (!coll::ibAvailable(&why)) GTEST_SKIP() << why;
  setenv("COLL_TRANSPORT", "ib", 1);
  setenv("COLL_LINK_PROBE", "0", 1);
  allCollectives(2);
  unsetenv("COLL_TRANSPORT");
  unsetenv("COLL_LINK_PROBE");
}

// Small-message ping-pong through the API (executor + transport + double). The iteration count
// comes from IB_PINGPONG_ITERS so the instruction-count script can run it at two lengths, and
// the rails (double devices and COLL_IB_RAILS) from IB_PINGPONG_RAILS (default 1).
TEST(IbPingPong, SmallMessages) {
  const char* railsEnv = getenv("IB_PINGPONG_RAILS");
  const int rails = railsEnv ? std::max(1, atoi(railsEnv)) : 1;
  coll::testing::VerbsDoubleOptions vo;
  vo.devices = rails;
  coll::testing::configureVerbsDouble(vo);
  coll::setVerbsApiForTesting(&coll::testing::verbsTestDouble());
  setenv("COLL_TRANSPORT", "ib", 1);
  setenv("COLL_LINK_PROBE", "0", 1);
  setenv("COLL_IB_RAILS", std::to_string(rails).c_str(), 1);
  const char* env = getenv("IB_PINGPONG_ITERS");
  const int iters = env ? atoi(env) : 200;
  withComms(2, [&](int rank, collComm_t comm) {
    float buf[2] = {0, 0};
    const int peer = 1 - rank;
    // Warm-up: connection setup and first-call planning stay out of the count.
    for (int i = 0; i < 10 + iters; ++i) {
      if (rank == 0) {
        buf[0] = static_cast<float>(i);
        ASSERT_EQ(collSend(buf, 2, collFloat32, peer, comm, nullptr), collSuccess) << collGetLastError(comm);
        ASSERT_EQ(collRecv(buf, 2, collFloat32, peer, comm, nullptr), collSuccess) << collGetLastError(comm);
        ASSERT_EQ(buf[0], static_cast<float>(i) + 1);
      } else {
        ASSERT_EQ(collRecv(buf, 2, collFloat32, peer, comm, nullptr), collSuccess) << collGetLastError(comm);
        buf[0] += 1;
        ASSERT_EQ(collSend(buf, 2, collFloat32, peer, comm, nullptr), collSuccess) << collGetLastError(comm);
      }
    }
  });
  unsetenv("COLL_TRANSPORT");
  unsetenv("COLL_LINK_PROBE");
  unsetenv("COLL_IB_RAILS");
  coll::testing::configureVerbsDouble(coll::testing::VerbsDoubleOptions{});
  coll::setVerbsApiForTesting(nullptr);
}

// Multi-rail under whole collectives: every collective over 4 rails, and a rail lost in the middle
// of a run of large All-Reduces (they complete, exact, with a warning naming the rail).
class IbRailCollectives : public ::testing::Test {
 protected:
  void SetUp() override {
    coll::testing::VerbsDoubleOptions vo;
    vo.devices = 4;
    coll::testing::configureVerbsDouble(vo);
    coll::testing::injectVerbsFault(coll::testing::VerbsFault::None);
    coll::setVerbsApiForTesting(&coll::testing::verbsTestDouble());
    setenv("COLL_TRANSPORT", "ib", 1);
    setenv("COLL_LINK_PROBE", "0", 1);
  }
  void TearDown() override {
    unsetenv("COLL_TRANSPORT");
    unsetenv("COLL_LINK_PROBE");
    unsetenv("COLL_IB_RAILS");
    coll::setVerbsApiForTesting(nullptr);
    coll::testing::configureVerbsDouble(coll::testing::VerbsDoubleOptions{});
  }
};

TEST_F(IbRailCollectives, ExactResultsOverFourRails) {
  setenv("COLL_IB_RAILS", "4", 1);
  allCollectives(3);
}

std::mutex gWarnMu;
std::vector<std::string> gWarnings;
void captureWarning(coll::LogLevel level, const char* message) {
  std::lock_guard<std::mutex> lock(gWarnMu);
  if (level == coll::LogLevel::Warn) gWarnings.push_back(message);
}

TEST_F(IbRailCollectives, RailLostMidRunCompletesExact) {
  setenv("COLL_IB_RAILS", "2", 1);
  {
    std::lock_guard<std::mutex> lock(gWarnMu);
    gWarnings.clear();
  }
  coll::setLogSink(captureWarning);
  constexpr int kIters = 12;
  constexpr size_t kCount = 4 << 20;  // 16 MiB of floats per call
  std::atomic<int> done{0};
  std::thread fault([&] {
    // Once two calls have completed, take rail 1's port down while the third or a later one runs.
    for (int i = 0; i < 20000 && done.load() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    coll::testing::injectVerbsDeviceFault(coll::testing::VerbsFault::PortDown, 1);
  });
  withComms(2, [&](int rank, collComm_t comm) {
    std::vector<float> send(kCount), recv(kCount);
    for (int it = 0; it < kIters; ++it) {
      for (size_t i = 0; i < kCount; ++i) send[i] = value(rank + it, i);
      ASSERT_EQ(collAllReduce(send.data(), recv.data(), kCount, collFloat32, collSum, comm, nullptr), collSuccess)
          << collGetLastError(comm);
      for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(recv[i], value(it, i) + value(1 + it, i)) << it << " " << i;
      if (rank == 0) done.fetch_add(1);
    }
  });
  fault.join();
  coll::setLogSink(nullptr);
  std::lock_guard<std::mutex> lock(gWarnMu);
  bool warned = false;
  for (const std::string& w : gWarnings) warned = warned || w.find("lost rail verbsdouble1:1") != std::string::npos;
  EXPECT_TRUE(warned);
}

}  // namespace
