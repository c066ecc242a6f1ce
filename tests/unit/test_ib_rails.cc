// ib multi-rail on the verbs test double: the striping pattern, 1, 2 and 4 rails carrying a
// connection's stream bit-exact in both directions with the bytes spread over every rail, uneven
// rail speeds weighting the spread, a rail lost mid-stream, and the errors that name a port that
// does not exist or never came up.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "src/base/log.h"
#include "tests/ib_double/verbs_double.h"
#include "tests/unit/stream_pump.h"
#include "transports/ib/ib_transport.h"
#include "transports/stripe_pattern.h"

namespace coll {
namespace {

using testutil::pumpStream;

TEST(StripePattern, OneRailIsPlainRoundRobin) {
  const uint32_t w[] = {1};
  StripePattern p(w, 3);
  ASSERT_EQ(p.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(p.lane[i], i);
    EXPECT_EQ(p.gap[i], 3u);
    EXPECT_EQ(p.first[i], i);
  }
  EXPECT_EQ(p.nextOnLane(7), 10u);
}

TEST(StripePattern, WeightsGiveEachLaneItsShareAndGapsFindTheNextChunk) {
  const uint32_t w[] = {4, 1, 2};
  StripePattern p(w, 2);
  ASSERT_EQ(p.size(), 14u);
  std::vector<int> count(6, 0);
  for (uint32_t l : p.lane) ++count[l];
  EXPECT_EQ(count, (std::vector<int>{4, 4, 1, 1, 2, 2}));
  for (size_t i = 0; i < 3 * p.size(); ++i) {
    const uint64_t next = p.nextOnLane(i);
    EXPECT_EQ(p.laneOf(next), p.laneOf(i));
    for (uint64_t j = i + 1; j < next; ++j) EXPECT_NE(p.laneOf(j), p.laneOf(i));
  }
  for (uint32_t l = 0; l < 6; ++l) EXPECT_EQ(p.lane[p.first[l]], l);
  // Smooth: the heaviest rail never takes more than two chunks in a row here.
  for (size_t i = 0; i + 2 < p.size(); ++i) EXPECT_FALSE(p.lane[i] < 2 && p.lane[i + 1] < 2 && p.lane[i + 2] < 2);
}

TEST(StripePattern, WeightsFromRates) {
  const uint64_t equal[] = {100, 100, 100};
  EXPECT_EQ(stripeWeights(equal), (std::vector<uint32_t>{1, 1, 1}));
  const uint64_t fourToOne[] = {100000, 25000};
  EXPECT_EQ(stripeWeights(fourToOne), (std::vector<uint32_t>{4, 1}));
  const uint64_t unknown[] = {0, 50, 100};
  EXPECT_EQ(stripeWeights(unknown), (std::vector<uint32_t>{2, 1, 2}));
  const uint64_t none[] = {0, 0};
  EXPECT_EQ(stripeWeights(none), (std::vector<uint32_t>{1, 1}));
  const uint64_t tiny[] = {1000, 1};
  EXPECT_EQ(stripeWeights(tiny), (std::vector<uint32_t>{8, 1}));
}

class IbRails : public ::testing::Test {
 protected:
  void SetUp() override {
    configure(4, {});
    testing::injectVerbsFault(testing::VerbsFault::None);
    setVerbsApiForTesting(&testing::verbsTestDouble());
  }
  void TearDown() override {
    setVerbsApiForTesting(nullptr);
    testing::configureVerbsDouble(testing::VerbsDoubleOptions{});
  }
  static void configure(int devices, std::vector<uint8_t> speeds) {
    testing::VerbsDoubleOptions o;
    o.devices = devices;
    for (size_t i = 0; i < speeds.size(); ++i) o.activeSpeed[i] = speeds[i];
    testing::configureVerbsDouble(o);
  }
};

IbOptions railOptions(int rails, int qps = 2) {
  IbOptions o;
  o.rails = rails;
  o.qps = qps;
  o.ringBytes = 256 << 10;
  o.sendDepth = 64;
  o.recvDepth = 32;
  return o;
}

// Two ranks as threads with real bootstraps, each opening its rails (options[r]) and connecting.
void withRailPair(const IbOptions options[2], const std::function<void(int, IbConnection*)>& body, Status results[2]) {
  SocketAddress bind;
  ASSERT_TRUE(SocketAddress::parse("127.0.0.1:0", &bind).ok());
  Secret secret{};
  secret[0] = 5;
  collUniqueId id;
  Status st = startBootstrapRoot(bind, &secret, &id);
  ASSERT_TRUE(st.ok()) << st.message();
  std::thread t[2];
  for (int r = 0; r < 2; ++r) {
    t[r] = std::thread([&, r] {
      Deadline deadline = Deadline::afterMs(30000);
      std::unique_ptr<Bootstrap> bs;
      results[r] = Bootstrap::create(id, r, 2, 0x1234, deadline, &bs);
      if (!results[r].ok()) return;
      std::vector<std::shared_ptr<IbDevice>> rails;
      results[r] = IbDevice::openRails(activeVerbsApi(), options[r], &rails);
      if (!results[r].ok()) return;
      std::unique_ptr<IbConnection> conn;
      results[r] = connectIb(*bs, rails, 1 - r, options[r], deadline, &conn);
      if (!results[r].ok()) return;
      body(r, conn.get());
    });
  }
  for (auto& th : t) th.join();
}
void withRailPair(const IbOptions& o, const std::function<void(int, IbConnection*)>& body, Status results[2]) {
  const IbOptions both[2] = {o, o};
  withRailPair(both, body, results);
}

struct RailRun {
  int rails[2] = {0, 0};
  std::vector<uint64_t> bytes[2];
  uint64_t chunk = 0;
  int lanes = 0;
};

RailRun pumpRails(const IbOptions& o, uint64_t total) {
  RailRun run;
  std::string errors[2];
  bool ok[2] = {false, false};
  Status results[2];
  withRailPair(
      o,
      [&](int r, IbConnection* c) {
        ok[r] = pumpStream(c, total, 300 + r, 301 - r, r, 200000, &errors[r]);
        run.rails[r] = c->rails();
        for (int i = 0; i < c->rails(); ++i) run.bytes[r].push_back(c->railBytesSent(i));
        run.chunk = c->chunkBytes();
        run.lanes = c->qps();
      },
      results);
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].message();
    EXPECT_TRUE(ok[r]) << "rank " << r << ": " << errors[r];
  }
  return run;
}

class IbRailCount : public IbRails, public ::testing::WithParamInterface<int> {};

TEST_P(IbRailCount, StripesBitExactOverEveryRail) {
  const int n = GetParam();
  const uint64_t total = 16 << 20;
  RailRun run = pumpRails(railOptions(n), total);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(run.rails[r], n);
    ASSERT_EQ(run.bytes[r].size(), static_cast<size_t>(n));
    uint64_t sum = 0;
    for (int i = 0; i < n; ++i) {
      sum += run.bytes[r][i];
      // Equal speeds: equal shares, up to the chunks of one round of the pattern.
      EXPECT_NEAR(static_cast<double>(run.bytes[r][i]), static_cast<double>(total) / n,
                  static_cast<double>(run.chunk * run.lanes))
          << "rank " << r << " rail " << i;
    }
    EXPECT_EQ(sum, total);
  }
}
INSTANTIATE_TEST_SUITE_P(Rails, IbRailCount, ::testing::Values(1, 2, 4));

TEST_F(IbRails, UnevenSpeedsSpreadBytesByWeight) {
  configure(2, {32, 2});  // 4x EDR (100 Gb/s) and 4x DDR (20 Gb/s): weights 4 and 1
  const uint64_t total = 16 << 20;
  RailRun run = pumpRails(railOptions(2), total);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(run.bytes[r].size(), 2u);
    EXPECT_EQ(run.bytes[r][0] + run.bytes[r][1], total);
    EXPECT_NEAR(static_cast<double>(run.bytes[r][1]), total / 5.0, static_cast<double>(run.chunk * 10))
        << run.bytes[r][0] << " " << run.bytes[r][1];
  }
}

TEST_F(IbRails, QpsPerRailShareTheLaneBudget) {
  // 4 rails of 8 QPs asked: 16 lanes at most, so 4 QPs each.
  RailRun run = pumpRails(railOptions(4, 8), 1 << 20);
  EXPECT_EQ(run.lanes, 16);
}

TEST_F(IbRails, UnknownHcaNameIsAnErrorNamingIt) {
  IbOptions o = railOptions(2);
  o.hca = "verbsdouble0,mlx5_7";
  std::vector<std::shared_ptr<IbDevice>> rails;
  Status st = IbDevice::openRails(activeVerbsApi(), o, &rails);
  EXPECT_EQ(st.code(), collInvalidUsage) << st.message();
  EXPECT_NE(st.message().find("mlx5_7"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("verbsdouble0"), std::string::npos) << st.message();  // what does exist
  o.hca = "=verbsdouble";  // exact: a prefix of real names is no name
  st = IbDevice::openRails(activeVerbsApi(), o, &rails);
  EXPECT_EQ(st.code(), collInvalidUsage) << st.message();
}

TEST_F(IbRails, MoreRailsThanPortsIsAnErrorListingThem) {
  configure(2, {});
  std::vector<std::shared_ptr<IbDevice>> rails;
  Status st = IbDevice::openRails(activeVerbsApi(), railOptions(3), &rails);
  EXPECT_EQ(st.code(), collSystemError) << st.message();
  EXPECT_NE(st.message().find("COLL_IB_RAILS=3"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("verbsdouble1:1"), std::string::npos) << st.message();
}

TEST_F(IbRails, ARailThatNeverCameUpIsNamed) {
  configure(2, {});
  // Keep verbsdouble1 open so its port can be taken down before the rails are chosen.
  const VerbsApi& api = activeVerbsApi();
  int num = 0;
  ibv_device** list = api.getDeviceList(&num);
  ASSERT_EQ(num, 2);
  ibv_context* keep = api.openDevice(list[1]);
  ASSERT_NE(keep, nullptr);
  testing::injectVerbsDeviceFault(testing::VerbsFault::PortDown, 1);
  std::vector<std::shared_ptr<IbDevice>> rails;
  Status st = IbDevice::openRails(api, railOptions(2), &rails);
  EXPECT_EQ(st.code(), collSystemError) << st.message();
  EXPECT_NE(st.message().find("verbsdouble1:1 DOWN"), std::string::npos) << st.message();
  api.closeDevice(keep);
  api.freeDeviceList(list);
}

// Warnings, captured (the log sink is process-wide).
std::mutex gLogMu;
std::vector<std::string> gLog;
void captureLog(LogLevel level, const char* message) {
  std::lock_guard<std::mutex> lock(gLogMu);
  if (level == LogLevel::Warn) gLog.push_back(message);
}
std::string loggedLine(const std::string& needle) {
  std::lock_guard<std::mutex> lock(gLogMu);
  for (const std::string& line : gLog) {
    if (line.find(needle) != std::string::npos) return line;
  }
  return std::string();
}

// Streams `total` bytes each way; rank 0 takes down the port of each device in `kill` once it
// has received `after` bytes (both ranks' ends of that rail share the device in this process).
void pumpAndLoseRails(const IbOptions& o, uint64_t total, uint64_t after, std::vector<int> kill, bool ok[2],
                      std::string errors[2], Status results[2], std::vector<uint64_t> bytes[2]) {
  withRailPair(
      o,
      [&](int r, IbConnection* c) {
        // after == 0: the rails are down before the first byte (a pass that never idles cannot
        // outrun the fault).
        bool injected = r == 0 && after == 0;
        if (injected) {
          for (int d : kill) testing::injectVerbsDeviceFault(testing::VerbsFault::PortDown, d);
        }
        auto idle = [&] {
          if (r == 0 && !injected && c->receivedBytes() >= after) {
            injected = true;
            for (int d : kill) testing::injectVerbsDeviceFault(testing::VerbsFault::PortDown, d);
          }
          std::this_thread::yield();
        };
        ok[r] = pumpStream(c, total, 500 + r, 501 - r, r, 100000, &errors[r], idle);
        for (int i = 0; i < c->rails(); ++i) bytes[r].push_back(c->railBytesSent(i));
      },
      results);
}

class IbRailLoss : public IbRails, public ::testing::WithParamInterface<int> {};

TEST_P(IbRailLoss, TrafficMovesToTheOtherRailsBitExact) {
  const int n = GetParam();
  {
    std::lock_guard<std::mutex> lock(gLogMu);
    gLog.clear();
  }
  setLogSink(captureLog);
  const uint64_t total = 32 << 20;
  bool ok[2] = {false, false};
  std::string errors[2];
  Status results[2];
  std::vector<uint64_t> bytes[2];
  pumpAndLoseRails(railOptions(n), total, total / 4, {1}, ok, errors, results, bytes);
  setLogSink(nullptr);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].message();
    EXPECT_TRUE(ok[r]) << "rank " << r << ": " << errors[r];
    ASSERT_EQ(bytes[r].size(), static_cast<size_t>(n));
    // The lost rail stopped early; the others carried the rest (and the repairs).
    uint64_t others = 0;
    for (int i = 0; i < n; ++i) others += i == 1 ? 0 : bytes[r][i];
    EXPECT_LT(bytes[r][1], total / 2) << "rank " << r;
    EXPECT_GE(others + bytes[r][1], total) << "rank " << r;
  }
  EXPECT_NE(loggedLine("lost rail verbsdouble1:1"), "");
}
INSTANTIATE_TEST_SUITE_P(Rails, IbRailLoss, ::testing::Values(2, 4));

TEST_F(IbRails, APeerWithFewerRailsIsWarnedAbout) {
  {
    std::lock_guard<std::mutex> lock(gLogMu);
    gLog.clear();
  }
  setLogSink(captureLog);
  const IbOptions opts[2] = {railOptions(4), railOptions(2)};
  Status results[2];
  int rails[2] = {0, 0};
  bool ok[2] = {false, false};
  std::string errors[2];
  withRailPair(
      opts,
      [&](int r, IbConnection* c) {
        rails[r] = c->rails();
        ok[r] = pumpStream(c, 4 << 20, 300 + r, 301 - r, r, 100000, &errors[r]);
      },
      results);
  setLogSink(nullptr);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(results[r].ok()) << results[r].message();
    EXPECT_TRUE(ok[r]) << errors[r];
    EXPECT_EQ(rails[r], 2);
  }
  const std::string line = loggedLine("stay unused");
  EXPECT_NE(line.find("verbsdouble2:1, verbsdouble3:1"), std::string::npos) << line;
}

TEST_F(IbRails, EveryRailLostFailsNamingThem) {
  bool ok[2] = {false, false};
  std::string errors[2];
  Status results[2];
  std::vector<uint64_t> bytes[2];
  pumpAndLoseRails(railOptions(2), 16 << 20, 0, {1, 0}, ok, errors, results, bytes);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].message();
    EXPECT_FALSE(ok[r]);
    EXPECT_NE(errors[r].find("verbsdouble0:1"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("verbsdouble1:1"), std::string::npos) << errors[r];
  }
}

}  // namespace
}  // namespace coll
