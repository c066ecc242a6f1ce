// Profiling and tracing: collCommSetProfiler's events (calls, their steps with peers and bytes,
// waits, failures) and the per-rank Chrome trace of COLL_TRACE_FILE.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "collective/collective.h"
#include "src/base/log.h"
#include "src/comm/trace.h"
#include "tests/unit/comm_threads.h"

namespace coll {
namespace {

using testutil::ScopedEnv;
using testutil::withComms;

TEST(Trace, ExpandPath) {
  EXPECT_EQ(expandTracePath("/t/trace-%r.json", 3, 77, "h"), "/t/trace-3.json");
  EXPECT_EQ(expandTracePath("/t/%h-%p-%r.json", 0, 77, "node1"), "/t/node1-77-0.json");
  EXPECT_EQ(expandTracePath("/t/trace.json", 5, 77, "h"), "/t/trace.rank5.json");
  EXPECT_EQ(expandTracePath("/t.d/trace", 5, 77, "h"), "/t.d/trace.rank5");
  EXPECT_EQ(expandTracePath("/t/.trace", 2, 77, "h"), "/t/.trace.rank2");
  EXPECT_EQ(expandTracePath("/t/100%%-%r%x%", 1, 77, "h"), "/t/100%-1%x%");
}

struct Recorder {
  std::mutex mu;
  std::vector<collProfileEvent_t> events;
  std::vector<std::string> messages;
  static void callback(const collProfileEvent_t* e, void* self) {
    auto* r = static_cast<Recorder*>(self);
    std::lock_guard<std::mutex> lock(r->mu);
    r->events.push_back(*e);
    r->messages.push_back(e->message != nullptr ? e->message : "");
  }
  std::vector<collProfileEvent_t> of(collProfileEventType_t type) {
    std::vector<collProfileEvent_t> out;
    for (const auto& e : events) {
      if (e.type == type) out.push_back(e);
    }
    return out;
  }
};

// Every call has a start and a stop (same seq, name, algorithm; stop not before start; success),
// every step that started stopped, step peers are real ranks, and the bytes one rank sends to
// another are the bytes that rank receives from it.
TEST(Trace, ProfilerSeesCallsStepsAndWaits) {
  constexpr int kRanks = 3;
  constexpr size_t kCount = 256 * 1024;
  Recorder rec[kRanks];
  ScopedEnv tcp("COLL_TRANSPORT", "tcp");  // steps with peers (over shm they are window copies)
  withComms(kRanks, [&](int rank, collComm_t comm) {
    ASSERT_EQ(collCommSetProfiler(comm, &Recorder::callback, &rec[rank]), collSuccess);
    std::vector<float> a(kCount, 1.0f + rank), b(kCount);
    ASSERT_EQ(collAllReduce(a.data(), b.data(), kCount, collFloat32, collSum, comm, nullptr), collSuccess);
    ASSERT_EQ(collBroadcast(a.data(), b.data(), kCount, collFloat32, 1, comm, nullptr), collSuccess);
    // Removed: later calls tell nothing.
    ASSERT_EQ(collCommSetProfiler(comm, nullptr, nullptr), collSuccess);
    ASSERT_EQ(collAllReduce(a.data(), b.data(), kCount, collFloat32, collSum, comm, nullptr), collSuccess);
  });
  std::map<std::pair<int, int>, uint64_t> sent, received;  // (from, to) -> bytes
  for (int r = 0; r < kRanks; ++r) {
    const auto colls = rec[r].of(collProfileColl);
    ASSERT_EQ(colls.size(), 4u) << "rank " << r;
    const char* names[] = {"allreduce", "broadcast"};
    for (int c = 0; c < 2; ++c) {
      const auto& start = colls[2 * c];
      const auto& stop = colls[2 * c + 1];
      EXPECT_EQ(start.phase, collProfileStart);
      EXPECT_EQ(stop.phase, collProfileStop);
      EXPECT_STREQ(start.name, names[c]);
      EXPECT_STREQ(stop.name, names[c]);
      EXPECT_EQ(start.seq, stop.seq);
      EXPECT_EQ(start.rank, r);
      EXPECT_EQ(start.count, kCount);
      EXPECT_EQ(start.bytes, kCount * sizeof(float));
      EXPECT_EQ(start.datatype, collFloat32);
      EXPECT_GT(strlen(start.algorithm), 0u);
      EXPECT_LE(start.timeNs, stop.timeNs);
      EXPECT_EQ(stop.result, collSuccess);
    }
    EXPECT_LE(colls[1].timeNs, colls[2].timeNs);
    // Steps: start and stop pair up per (seq, step), within their call.
    std::map<std::pair<unsigned long long, int>, collProfileEvent_t> open;
    size_t stops = 0;
    for (const auto& e : rec[r].of(collProfileStep)) {
      const auto key = std::make_pair(e.seq, e.step);
      if (e.phase == collProfileStart) {
        EXPECT_EQ(open.count(key), 0u) << "rank " << r << " step " << e.step << " started twice";
        open[key] = e;
        continue;
      }
      ASSERT_EQ(e.phase, collProfileStop);
      ++stops;
      auto it = open.find(key);
      ASSERT_NE(it, open.end()) << "rank " << r << " step " << e.step << " stopped without a start";
      EXPECT_LE(it->second.timeNs, e.timeNs);
      EXPECT_STREQ(it->second.name, e.name);
      open.erase(it);
      const std::string name = e.name;
      if (name == "Send" || name == "Recv" || name == "RecvReduce") {
        EXPECT_GE(e.peer, 0);
        EXPECT_LT(e.peer, kRanks);
        EXPECT_NE(e.peer, r);
        if (name == "Send") sent[{r, e.peer}] += e.bytes;
        else received[{e.peer, r}] += e.bytes;
      } else {
        EXPECT_EQ(e.peer, -1) << name;
      }
    }
    EXPECT_TRUE(open.empty()) << "rank " << r << ": " << open.size() << " steps never stopped";
    EXPECT_GT(stops, 0u) << "rank " << r;
    for (const auto& w : rec[r].of(collProfileWait)) EXPECT_GE(w.peer, -1);
    EXPECT_TRUE(rec[r].of(collProfileFailure).empty());
  }
  EXPECT_FALSE(sent.empty());
  EXPECT_EQ(sent, received);
}

// A call that fails (its peer never calls) is a failure event with the error, and its stop
// carries the result.
TEST(Trace, FailedCallIsAFailureEvent) {
  Recorder rec;
  collConfig_t config = COLL_CONFIG_INITIALIZER;
  config.timeoutMs = 500;
  withComms(
      2,
      [&](int rank, collComm_t comm) {
        if (rank != 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1500));
          return;
        }
        ASSERT_EQ(collCommSetProfiler(comm, &Recorder::callback, &rec), collSuccess);
        std::vector<float> a(1024, 1.0f);
        EXPECT_NE(collAllReduce(a.data(), a.data(), a.size(), collFloat32, collSum, comm, nullptr), collSuccess);
      },
      &config);
  const auto failures = rec.of(collProfileFailure);
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].phase, collProfileInstant);
  EXPECT_NE(failures[0].result, collSuccess);
  size_t i = 0;
  while (i < rec.events.size() && rec.events[i].type != collProfileFailure) ++i;
  EXPECT_NE(rec.messages[i].find("timed out"), std::string::npos) << rec.messages[i];
  const auto colls = rec.of(collProfileColl);
  ASSERT_EQ(colls.size(), 2u);
  EXPECT_EQ(colls[1].result, failures[0].result);
  // It waited for rank 1 before failing.
  bool waitedForPeer = false;
  for (const auto& w : rec.of(collProfileWait)) waitedForPeer |= w.peer == 1;
  EXPECT_TRUE(waitedForPeer);
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t countOf(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// One file per rank (the rank in its name), a JSON array: names for the process and the
// communicator's thread, one "X" event per call and per step, peers and bytes in the steps.
TEST(Trace, ChromeTraceFilePerRank) {
  char dirTemplate[] = "/tmp/coll_trace_XXXXXX";
  ASSERT_NE(mkdtemp(dirTemplate), nullptr);
  const std::string dir = dirTemplate;
  constexpr int kRanks = 3, kCalls = 4;
  {
    ScopedEnv env("COLL_TRACE_FILE", (dir + "/trace-%r.json").c_str());
    ScopedEnv lanes("COLL_STREAM_LANES", "1");
    ScopedEnv tcp("COLL_TRANSPORT", "tcp");
    withComms(kRanks, [&](int, collComm_t comm) {
      std::vector<float> a(64 * 1024, 1.0f), b(a.size());
      for (int i = 0; i < kCalls; ++i) {
        ASSERT_EQ(collAllReduce(a.data(), b.data(), a.size(), collFloat32, collSum, comm, nullptr), collSuccess);
      }
    });
  }
  for (int r = 0; r < kRanks; ++r) {
    const std::string path = dir + "/trace-" + std::to_string(r) + ".json";
    const std::string text = readFile(path);
    ASSERT_FALSE(text.empty()) << path;
    EXPECT_EQ(text.substr(0, 2), "[\n") << path;
    EXPECT_EQ(text.substr(text.size() - 3), "\n]\n") << path;
    EXPECT_NE(text.find("\"name\":\"rank " + std::to_string(r) + "\""), std::string::npos) << text.substr(0, 400);
    EXPECT_NE(text.find("\"thread_name\""), std::string::npos);
    // The link probe's exchanges at creation are operations too.
    EXPECT_GE(countOf(text, "\"cat\":\"coll\""), static_cast<size_t>(kCalls)) << path;
    EXPECT_EQ(countOf(text, "\"cat\":\"coll\",\"name\":\"allreduce\""), static_cast<size_t>(kCalls)) << path;
    EXPECT_GE(countOf(text, "\"cat\":\"step\""), static_cast<size_t>(kCalls)) << path;
    EXPECT_NE(text.find("\"name\":\"Send\""), std::string::npos) << path;
    EXPECT_NE(text.find("\"pid\":" + std::to_string(r) + ","), std::string::npos) << path;
    EXPECT_EQ(text.find(",,"), std::string::npos);
    EXPECT_EQ(text.find("}{"), std::string::npos);
    unlink(path.c_str());
  }
  rmdir(dir.c_str());
}

std::mutex gLogMu;
std::vector<std::string> gLog;
void captureLog(LogLevel, const char* message) {
  std::lock_guard<std::mutex> lock(gLogMu);
  gLog.push_back(message);
}

// A trace file that cannot be written is one warning per path, and the job goes on.
TEST(Trace, UnwritablePathWarnsOnceAndRunsUntraced) {
  {
    std::lock_guard<std::mutex> lock(gLogMu);
    gLog.clear();
  }
  setLogSink(captureLog);
  {
    ScopedEnv env("COLL_TRACE_FILE", "/nonexistent-coll-dir/trace.json");
    withComms(2, [&](int, collComm_t comm) {
      std::vector<float> a(1024, 1.0f);
      EXPECT_EQ(collAllReduce(a.data(), a.data(), a.size(), collFloat32, collSum, comm, nullptr), collSuccess);
    });
  }
  setLogSink(nullptr);
  std::lock_guard<std::mutex> lock(gLogMu);
  std::map<std::string, int> warnings;  // path -> count
  for (const std::string& line : gLog) {
    if (line.find("COLL_TRACE_FILE: cannot write") == std::string::npos) continue;
    for (int r = 0; r < 2; ++r) {
      const std::string path = "/nonexistent-coll-dir/trace.rank" + std::to_string(r) + ".json";
      if (line.find(path) != std::string::npos) warnings[path]++;
    }
  }
  EXPECT_EQ(warnings.size(), 2u);
  for (const auto& [path, n] : warnings) EXPECT_EQ(n, 1) << path;
}

}  // namespace
}  // namespace coll
