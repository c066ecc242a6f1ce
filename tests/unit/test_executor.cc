// Executor semantics on hand-built schedules over in-process connections: stream padding,
// slicing, per-slice dependency streaming, zero counts, deadlock and timeout reports, bad schedules.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <numeric>
#include <vector>

#include "src/exec/executor.h"
#include "src/exec/inprocess.h"

namespace coll {
namespace {

Step sendStep(int peer, BufRef src, uint64_t count) {
  Step s;
  s.kind = StepKind::Send;
  s.peer = peer;
  s.src = src;
  s.count = count;
  return s;
}

Step recvStep(int peer, BufRef dst, uint64_t count, StepKind kind = StepKind::Recv) {
  Step s;
  s.kind = kind;
  s.peer = peer;
  s.dst = dst;
  s.src = dst;
  s.count = count;
  return s;
}

Status runPair(InProcessWorld& world, std::vector<Schedule>& schedules, std::vector<ExecBuffers>& buffers,
               uint64_t seq) {
  std::vector<const Schedule*> ptrs;
  for (auto& s : schedules) {
    s.finalizePeers();
    ptrs.push_back(&s);
  }
  return runInProcess(ptrs, buffers, world, seq);
}

TEST(Executor, PaddingBetweenStepsAndCalls) {
  // int8 steps of 7 leave the stream off 8-byte alignment; the next step and the next call (float32)
  // must still line up on both sides, across ring wraps; also when sends go direct (sendDirect).
  for (bool direct : {false, true}) {
    InProcessOptions o;
    o.ringBytes = 128;
    o.directSends = direct;
    InProcessWorld world(2, 2, o);
    std::vector<int8_t> src(21), dst(21, 0);
    std::iota(src.begin(), src.end(), 1);
    std::vector<Schedule> s(2);
    s[0].dtype = s[1].dtype = collInt8;
    for (uint64_t k = 0; k < 3; ++k) {
      s[0].addStep(sendStep(1, sendAt(k * 7), 7));
      s[1].addStep(recvStep(0, recvAt(k * 7), 7));
    }
    std::vector<ExecBuffers> b = {{src.data(), nullptr}, {nullptr, dst.data()}};
    Status st = runPair(world, s, b, 1);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(src, dst);
    EXPECT_EQ(world.ring(0, 1)->head.load(), 7u + 1 + 7 + 1 + 7);

    std::vector<float> fsrc(1000), fdst(1000, 0);
    std::iota(fsrc.begin(), fsrc.end(), 0.5f);
    std::vector<Schedule> f(2);
    f[0].addStep(sendStep(1, sendAt(0), 1000));
    f[1].addStep(recvStep(0, recvAt(0), 1000));
    b = {{fsrc.data(), nullptr}, {nullptr, fdst.data()}};
    st = runPair(world, f, b, 2);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(fsrc, fdst);
    EXPECT_EQ(world.ring(0, 1)->head.load(), 24u + 4000);
  }
}

TEST(Executor, SlicingAndFusedReduce) {
  // Bidirectional exchange with RecvReduce in place, many slice sizes and ring sizes; and with
  // connections that take every other send straight from the source (Connection::sendDirect).
  for (bool direct : {false, true}) {
    for (size_t ring : {64, 192, 4096}) {
      for (size_t slice : {1, 8, 100, 1 << 20}) {
        InProcessOptions o;
        o.ringBytes = ring;
        o.sliceBytes = slice;
        o.directSends = direct;
        InProcessWorld world(2, 1, o);
        const uint64_t n = 777;
        std::vector<std::vector<int32_t>> buf(2, std::vector<int32_t>(n));
        for (uint64_t i = 0; i < n; ++i) buf[0][i] = static_cast<int32_t>(i), buf[1][i] = static_cast<int32_t>(3 * i);
        std::vector<Schedule> s(2);
        std::vector<ExecBuffers> b(2);
        for (int r = 0; r < 2; ++r) {
          s[r].dtype = collInt32;
          s[r].addStep(sendStep(1 - r, sendAt(0), n));
          // Reduce into a copy so the send above keeps reading the original.
          Step rr = recvStep(1 - r, scratchAt(0), n, StepKind::RecvReduce);
          rr.src = sendAt(0);
          int32_t rri = s[r].addStep(rr);
          Step c;
          c.kind = StepKind::Copy;
          c.src = scratchAt(0);
          c.dst = recvAt(0);
          c.count = n;
          int32_t ci = s[r].addStep(c);
          s[r].addDep(ci, stepDep(rri));
          s[r].scratchBytes = n * 4;
        }
        std::vector<std::vector<int32_t>> out(2, std::vector<int32_t>(n, -1));
        b = {{buf[0].data(), out[0].data()}, {buf[1].data(), out[1].data()}};
        Status st = runPair(world, s, b, 1);
        ASSERT_TRUE(st.ok()) << st.message();
        for (uint64_t i = 0; i < n; ++i) {
          ASSERT_EQ(out[0][i], static_cast<int32_t>(4 * i)) << "ring " << ring << " slice " << slice;
          ASSERT_EQ(out[1][i], static_cast<int32_t>(4 * i));
        }
        Connection* c = nullptr;
        ASSERT_TRUE(world.links(0).connection(1, &c).ok());
        const uint64_t sentDirect = static_cast<MemoryConnection*>(c)->sentDirectBytes();
        if (direct) {
          EXPECT_GT(sentDirect, 0u) << "ring " << ring << " slice " << slice;
          // A ring smaller than the data: the offers the connection refused went through it.
          if (ring < n * 4) {
            EXPECT_LT(sentDirect, n * 4) << "ring " << ring << " slice " << slice;
          }
        } else {
          EXPECT_EQ(sentDirect, 0u);
        }
      }
    }
  }
}

// Rank 1 sends n floats to rank 0, which forwards them to rank 2 with a dependency on its receive.
void buildForward(std::vector<Schedule>& s, uint64_t n, bool whole) {
  s.assign(3, Schedule{});
  s[1].addStep(sendStep(0, sendAt(0), n));
  int32_t r = s[0].addStep(recvStep(1, recvAt(0), n));
  int32_t f = s[0].addStep(sendStep(2, recvAt(0), n));
  s[0].addDep(f, whole ? wholeStepDep(r) : stepDep(r));
  s[2].addStep(recvStep(0, recvAt(0), n));
  for (auto& x : s) x.finalizePeers();
}

TEST(Executor, SlicedDependencyStreams) {
  for (bool whole : {false, true}) {
    InProcessOptions o;
    o.ringBytes = 4096;
    InProcessWorld world(3, 1, o);
    const uint64_t n = 100000;
    std::vector<float> in(n), mid(n), out(n);
    std::iota(in.begin(), in.end(), 1.0f);
    std::vector<Schedule> s;
    buildForward(s, n, whole);
    std::vector<ExecBuffers> b = {{nullptr, mid.data()}, {in.data(), nullptr}, {nullptr, out.data()}};
    for (int r = 0; r < 3; ++r) ASSERT_TRUE(world.execution(r).start(s[r], b[r], world.links(r), 1).ok());
    bool done = false, progressed = false;
    ASSERT_TRUE(world.execution(1).poll(&done, &progressed).ok());
    EXPECT_TRUE(progressed);
    ASSERT_TRUE(world.execution(0).poll(&done, &progressed).ok());
    EXPECT_TRUE(progressed);
    EXPECT_FALSE(done);
    // Sliced: the first 4 KiB already moved on to rank 2 while the receive is far from done.
    EXPECT_EQ(world.ring(0, 2)->head.load() > 0, !whole);
    // Finish call 1 by hand (restarting would strand the bytes already in the rings).
    std::vector<bool> finished(3, false);
    for (int round = 0; round < 100000 && !(finished[0] && finished[1] && finished[2]); ++round) {
      for (int r = 0; r < 3; ++r) {
        if (finished[r]) continue;
        bool d = false, p = false;
        ASSERT_TRUE(world.execution(r).poll(&d, &p).ok());
        finished[r] = d;
      }
    }
    ASSERT_TRUE(finished[0] && finished[1] && finished[2]);
    EXPECT_EQ(in, out);
    EXPECT_EQ(in, mid);
  }
}

TEST(Executor, ZeroCountSteps) {
  InProcessOptions o;
  o.ringBytes = 64;
  InProcessWorld world(2, 2, o);
  std::vector<uint8_t> src(13), dst(13, 0);
  std::iota(src.begin(), src.end(), 1);
  std::vector<Schedule> s(2);
  s[0].dtype = s[1].dtype = collUint8;
  s[0].addStep(sendStep(1, sendAt(0), 0));
  s[0].addStep(sendStep(1, sendAt(0), 5));
  s[0].addStep(sendStep(1, sendAt(5), 0));
  s[0].addStep(sendStep(1, sendAt(5), 8));
  s[1].addStep(recvStep(0, recvAt(0), 0));
  s[1].addStep(recvStep(0, recvAt(0), 5));
  s[1].addStep(recvStep(0, recvAt(5), 0));
  s[1].addStep(recvStep(0, recvAt(5), 8));
  std::vector<ExecBuffers> b = {{src.data(), nullptr}, {nullptr, dst.data()}};
  Status st = runPair(world, s, b, 1);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(src, dst);
  // Only zero-count steps: done at once.
  std::vector<Schedule> z(2);
  z[0].addStep(sendStep(1, sendAt(0), 0));
  z[1].addStep(recvStep(0, recvAt(0), 0));
  st = runPair(world, z, b, 2);
  ASSERT_TRUE(st.ok()) << st.message();
  // Completion is published for lag-2 window reuse, also for calls without windows.
  EXPECT_EQ(world.links(0).windows()->completedCalls(1).load(), 2u);
}

TEST(Executor, DeadlockIsReported) {
  InProcessWorld world(2, 1);
  std::vector<float> x(4), y(4);
  std::vector<Schedule> s(2);
  s[0].addStep(recvStep(1, recvAt(0), 4));
  s[1].addStep(recvStep(0, recvAt(0), 4));
  std::vector<ExecBuffers> b = {{x.data(), x.data()}, {y.data(), y.data()}};
  Status st = runPair(world, s, b, 1);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), collInternalError);
  EXPECT_NE(st.message().find("deadlock"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("Recv peer 1 0/4"), std::string::npos) << st.message();
}

TEST(Executor, TimeoutNamesCallAndSteps) {
  InProcessWorld world(2, 2);
  std::vector<float> x(4);
  Schedule s;
  s.addStep(recvStep(1, recvAt(0), 4));
  Dep d;
  d.kind = DepKind::PeerCall;
  d.peer = 1;
  d.lag = 1;
  Step c;
  c.kind = StepKind::Copy;
  c.src = recvAt(0);
  c.dst = recvAt(0);
  c.count = 4;
  int32_t ci = s.addStep(c);
  s.addDep(ci, d);
  s.finalizePeers();
  Execution& e = world.execution(0);
  ASSERT_TRUE(e.start(s, ExecBuffers{x.data(), x.data()}, world.links(0), 7).ok());
  Status st = runToCompletion(e, world.links(0), Deadline::afterMs(30));
  ASSERT_EQ(st.code(), collTimeout);
  EXPECT_NE(st.message().find("call 7"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("Recv peer 1"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("rank 1 to finish call 6"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("COLL_TIMEOUT"), std::string::npos) << st.message();
}

// Counts the sleep protocol's calls of the Links it wraps.
class CountingLinks final : public Links {
 public:
  explicit CountingLinks(Links& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  Status connection(int peer, Connection** out) override { return inner_.connection(peer, out); }
  HostWindows* windows() override { return inner_.windows(); }
  uint64_t prepareWait() override {
    ++prepares;
    return inner_.prepareWait();
  }
  void wait(uint64_t token, int maxMs) override {
    ++waits;
    inner_.wait(token, maxMs);
  }
  void notifyPeers() override { inner_.notifyPeers(); }
  int prepares = 0, waits = 0;

 private:
  Links& inner_;
};

TEST(Executor, NappingWaitNeverSleepsOnTheLinks) {
  std::vector<float> x(4);
  Schedule s;
  s.addStep(recvStep(1, recvAt(0), 4));  // rank 1 never sends
  s.finalizePeers();
  for (int64_t nap : {int64_t{0}, int64_t{1000}}) {
    InProcessWorld world(2, 2);
    Execution& e = world.execution(0);
    CountingLinks links(world.links(0));
    ASSERT_TRUE(e.start(s, ExecBuffers{x.data(), x.data()}, links, 1).ok());
    WaitPolicy policy;
    policy.spins = 0, policy.yields = 0, policy.napUs = nap;
    const auto t0 = Clock::now();
    Status st = runToCompletion(e, links, Deadline::afterMs(40), policy);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    // Napping or sleeping, the deadline holds; only the sleeper registers on the links.
    EXPECT_EQ(st.code(), collTimeout) << st.message();
    EXPECT_GE(ms, 39.0);
    EXPECT_LT(ms, 2000.0);
    if (nap > 0) {
      EXPECT_EQ(links.prepares, 0);
      EXPECT_EQ(links.waits, 0);
    } else {
      EXPECT_GT(links.waits, 0);
    }
  }
}

TEST(Executor, RunToCompletionSingleRank) {
  InProcessWorld world(1, 1);
  std::vector<double> a = {1, 2, 3}, r(3, 0);
  Schedule s;
  s.dtype = collFloat64;
  s.divisor = 2;
  Step d;
  d.kind = StepKind::Divide;
  d.src = sendAt(0);
  d.dst = recvAt(0);
  d.count = 3;
  s.addStep(d);
  Execution& e = world.execution(0);
  for (uint64_t seq = 1; seq <= 3; ++seq) {
    ASSERT_TRUE(e.start(s, ExecBuffers{a.data(), r.data()}, world.links(0), seq).ok());
    Status st = runToCompletion(e, world.links(0), Deadline::afterMs(5000));
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(r, (std::vector<double>{0.5, 1, 1.5}));
  }
}

TEST(Executor, BadSchedulesAreRejected) {
  InProcessWorld world(2, 1);  // one rank per host: no windows
  std::vector<float> x(4);
  Schedule s;
  s.usesWindows = true;
  Status st = world.execution(0).start(s, ExecBuffers{x.data(), x.data()}, world.links(0), 1);
  EXPECT_EQ(st.code(), collInternalError);
  EXPECT_NE(st.message().find("windows"), std::string::npos) << st.message();

  Schedule unfinalized;
  unfinalized.addStep(sendStep(1, sendAt(0), 4));
  st = world.execution(0).start(unfinalized, ExecBuffers{x.data(), x.data()}, world.links(0), 1);
  EXPECT_EQ(st.code(), collInternalError);
  EXPECT_NE(st.message().find("finalizePeers"), std::string::npos) << st.message();

  Schedule avg;
  avg.op = collAvg;
  st = world.execution(0).start(avg, ExecBuffers{x.data(), x.data()}, world.links(0), 1);
  EXPECT_EQ(st.code(), collInternalError);
}

}  // namespace
}  // namespace coll
