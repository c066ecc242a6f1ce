// Double binary tree, recursive doubling and Rabenseifner All-Reduce through the in-process
// executor (exact results on every rank, every rank count to 64, several host shapes) and the
// structural formulas read back from the schedules.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/phases.h"
#include "src/exec/inprocess.h"
#include "tests/unit/schedule_test_data.h"

namespace coll {
namespace {

using testutil::expectedValue;
using testutil::inputValue;
using testutil::storeValue;

enum class Builder { RecDoubling, Rabenseifner, Tree };

const char* builderName(Builder b) {
  switch (b) {
    case Builder::RecDoubling: return "recdoubling";
    case Builder::Rabenseifner: return "rabenseifner";
    case Builder::Tree: return "tree";
  }
  return "?";
}

void build(Builder b, const Topology& topo, const CollArgs& args, Schedule* s) {
  switch (b) {
    case Builder::RecDoubling: buildRecursiveDoublingAllReduce(topo, args, s); break;
    case Builder::Rabenseifner: buildRabenseifnerAllReduce(topo, args, s); break;
    case Builder::Tree: buildDoubleBinaryTreeAllReduce(topo, args, s); break;
  }
}

CollArgs argsFor(uint64_t count, collDataType_t t = collFloat32, collRedOp_t op = collSum) {
  static int dummy = 0;
  CollArgs a;
  a.count = count;
  a.dtype = t;
  a.op = op;
  a.sendbuff = &dummy;
  a.recvbuff = &dummy;
  return a;
}

struct Runner {
  Runner(int32_t nranks, int32_t ranksPerHost, InProcessOptions options = {})
      : world(nranks, ranksPerHost, options), rph(ranksPerHost), schedules(nranks) {}
  InProcessWorld world;
  int32_t rph;
  std::vector<Schedule> schedules;
  uint64_t seq = 0;

  // One call on every rank; every rank's result bit for bit, inputs untouched, no write past the end.
  void run(Builder b, uint64_t count, collDataType_t t, collRedOp_t op, bool inPlace) {
    const int32_t p = world.nranks();
    const size_t es = dataTypeSize(t);
    SCOPED_TRACE(std::string(builderName(b)) + " p=" + std::to_string(p) + " ranksPerHost=" + std::to_string(rph) +
                 " count=" + std::to_string(count) + " dtype=" + std::to_string(t) + " op=" + std::to_string(op) +
                 (inPlace ? " in-place" : ""));
    std::vector<std::vector<std::byte>> send(p), recv(p);
    std::vector<const Schedule*> ptrs(p);
    std::vector<ExecBuffers> buffers(p);
    for (int32_t r = 0; r < p; ++r) {
      send[r].resize(count * es + 1);
      recv[r].assign(count * es + 1, std::byte{0x5a});
      for (uint64_t i = 0; i < count; ++i) storeValue(t, send[r].data(), i, inputValue(t, op, p, r, i));
      if (inPlace) memcpy(recv[r].data(), send[r].data(), count * es);
      CollArgs args = argsFor(count, t, op);
      args.recvbuff = recv[r].data();
      args.sendbuff = inPlace ? recv[r].data() : send[r].data();
      build(b, world.topology(r), args, &schedules[r]);
      ASSERT_STREQ(schedules[r].algorithm, builderName(b));
      ptrs[r] = &schedules[r];
      buffers[r] = ExecBuffers{args.sendbuff, args.recvbuff};
    }
    Status st = runInProcess(ptrs, buffers, world, ++seq);
    ASSERT_TRUE(st.ok()) << st.message();
    std::vector<std::byte> expected(count * es + 1);  // never empty: memcmp needs a valid pointer
    for (uint64_t i = 0; i < count; ++i) storeValue(t, expected.data(), i, expectedValue(t, op, p, i));
    for (int32_t r = 0; r < p; ++r) {
      ASSERT_EQ(0, memcmp(recv[r].data(), expected.data(), count * es)) << "rank " << r;
      ASSERT_EQ(recv[r][count * es], std::byte{0x5a}) << "rank " << r << " wrote past the end of recv";
      if (inPlace) continue;
      std::vector<std::byte> v(es);
      for (uint64_t i = 0; i < count; ++i) {
        storeValue(t, v.data(), 0, inputValue(t, op, p, r, i));
        ASSERT_EQ(0, memcmp(send[r].data() + i * es, v.data(), es)) << "rank " << r << " send modified at " << i;
      }
    }
  }
};

// Every builder in every rank count 1..64; the tree also with several ranks per host (the last
// host takes the remainder when it does not divide p).
TEST(TreeAllReduce, EveryRankCount) {
  for (int32_t p = 1; p <= 64; ++p) {
    struct Variant {
      Builder b;
      int32_t rph;
    };
    std::vector<Variant> variants = {{Builder::RecDoubling, p}, {Builder::Rabenseifner, p}, {Builder::Tree, p}};
    for (int32_t rph : {1, 2, 3, 4, 8}) {
      if (rph < p) variants.push_back({Builder::Tree, rph});
    }
    for (const Variant& v : variants) {
      Runner runner(p, v.rph);
      for (uint64_t count : {uint64_t{0}, uint64_t{1}, static_cast<uint64_t>(p - 1), uint64_t{1000}}) {
        for (bool inPlace : {false, true}) {
          runner.run(v.b, count, collFloat32, collSum, inPlace);
          if (count == 1000) runner.run(v.b, count, inPlace ? collInt32 : collBfloat16, collAvg, inPlace);
          if (testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(TreeAllReduce, EveryTypeAndOp) {
  struct Shape {
    int32_t p, rph;
  };
  for (Shape sh : {Shape{2, 2}, Shape{3, 3}, Shape{6, 6}, Shape{7, 7}, Shape{12, 5}, Shape{16, 4}}) {
    Runner runner(sh.p, sh.rph);
    for (Builder b : {Builder::RecDoubling, Builder::Rabenseifner, Builder::Tree}) {
      for (collDataType_t t : testutil::kExactReduceTypes) {
        for (collRedOp_t op : testutil::kBuiltinOps) {
          for (uint64_t count : {uint64_t{5}, uint64_t{1009}}) {
            runner.run(b, count, t, op, (count + t + op) % 2 == 0);
            if (testing::Test::HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

// Many slices per step through tiny rings: every step streams and waits for credit many times.
TEST(TreeAllReduce, ManySlicesSmallRings) {
  InProcessOptions o;
  o.ringBytes = 64;
  o.sliceBytes = 24;
  struct Shape {
    int32_t p, rph;
  };
  for (Shape sh : {Shape{3, 3}, Shape{5, 2}, Shape{8, 8}, Shape{12, 3}, Shape{13, 13}}) {
    Runner runner(sh.p, sh.rph, o);
    for (Builder b : {Builder::RecDoubling, Builder::Rabenseifner, Builder::Tree}) {
      runner.run(b, 5003, collFloat32, collSum, false);
      runner.run(b, 4001, collInt8, collMax, true);
      runner.run(b, 3001, collFloat16, collAvg, true);
      if (testing::Test::HasFatalFailure()) return;
    }
  }
}

// ---- structure read back from the schedules

struct TransferStats {
  int sends = 0, recvs = 0;
  uint64_t sentElems = 0;
};

TransferStats statsOf(const Schedule& s) {
  TransferStats st;
  for (const Step& x : s.steps) {
    if (x.kind == StepKind::Send) {
      st.sends++;
      st.sentElems += x.count;
    } else if (x.kind == StepKind::Recv || x.kind == StepKind::RecvReduce) {
      st.recvs++;
    }
  }
  return st;
}

int log2Floor(int64_t n) {
  int l = 0;
  while ((int64_t{2} << l) <= n) ++l;
  return l;
}

// Recursive doubling, p' = 2^floor(log2 p), r = p - p': members 2i < 2r send once and receive
// once; members 2i+1 < 2r do log2 p' + 1 sends and receives; the rest log2 p'. Every transfer
// is the whole vector. Rounds on the critical path: log2 p' (+ 2 when p is not a power of two).
TEST(TreeAllReduce, RecursiveDoublingStepFormula) {
  const uint64_t count = 77;
  for (int32_t p = 2; p <= 130; ++p) {
    const int lg = log2Floor(p);
    const int32_t pp = 1 << lg, r = p - pp;
    for (int32_t rank = 0; rank < p; ++rank) {
      Schedule s;
      buildRecursiveDoublingAllReduce(Topology::uniform(rank, p, p), argsFor(count), &s);
      const TransferStats st = statsOf(s);
      const int expected = rank < 2 * r ? (rank % 2 == 0 ? 1 : lg + 1) : lg;
      ASSERT_EQ(st.sends, expected) << "p=" << p << " rank=" << rank;
      ASSERT_EQ(st.recvs, expected) << "p=" << p << " rank=" << rank;
      ASSERT_EQ(st.sentElems, expected * count) << "p=" << p << " rank=" << rank;
    }
  }
}

// Rabenseifner: a core member sends count - |own part| while halving and, when p' divides the
// count, 2 (p'-1)/p' of the vector in all: 2 log2 p' sends. Paired members add one whole vector.
TEST(TreeAllReduce, RabenseifnerVolumeFormula) {
  for (int32_t p = 2; p <= 130; ++p) {
    const int lg = log2Floor(p);
    const int32_t pp = 1 << lg, r = p - pp;
    for (uint64_t count : {static_cast<uint64_t>(pp) * 37, uint64_t{1000}}) {
      for (int32_t rank = 0; rank < p; ++rank) {
        Schedule s;
        buildRabenseifnerAllReduce(Topology::uniform(rank, p, p), argsFor(count), &s);
        const TransferStats st = statsOf(s);
        SCOPED_TRACE("p=" + std::to_string(p) + " rank=" + std::to_string(rank) + " count=" + std::to_string(count));
        if (rank < 2 * r && rank % 2 == 0) {
          ASSERT_EQ(st.sends, 1);
          ASSERT_EQ(st.sentElems, count);
          continue;
        }
        const bool paired = rank < 2 * r;
        const int32_t core = paired ? rank / 2 : rank - r;
        // Halving sends are the first log2 p' sends (after the pair's fold).
        uint64_t halving = 0;
        int n = 0;
        for (const Step& x : s.steps) {
          if (x.kind == StepKind::Send && n++ < lg) halving += x.count;
        }
        ASSERT_EQ(halving, count - partCount(count, pp, core));
        ASSERT_EQ(st.sends, 2 * lg + (paired ? 1 : 0));
        if (count % pp == 0) {
          ASSERT_EQ(st.sentElems, 2 * (pp - 1) * (count / pp) + (paired ? count : 0));
        }
      }
    }
  }
}

// The two trees read back from flat schedules (one host): per half, the Recv from the parent and
// the RecvReduce from each child. Half 0 is [0, count/2), half 1 the rest.
struct TreeShape {
  std::vector<int32_t> parent[2];
  std::vector<int> children[2];
};

TreeShape readTrees(int32_t p, int32_t rph, uint64_t count) {
  TreeShape t;
  for (int h = 0; h < 2; ++h) {
    t.parent[h].assign(p, -1);
    t.children[h].assign(p, 0);
  }
  const uint64_t split = count / 2 * sizeof(float);
  for (int32_t rank = 0; rank < p; ++rank) {
    Schedule s;
    buildDoubleBinaryTreeAllReduce(Topology::uniform(rank, p, rph), argsFor(count), &s);
    for (const Step& x : s.steps) {
      if (x.kind == StepKind::Recv) {
        const int h = x.dst.offset < split ? 0 : 1;
        EXPECT_TRUE(t.parent[h][rank] == -1 || t.parent[h][rank] == x.peer) << "two parents, rank " << rank;
        t.parent[h][rank] = x.peer;
      } else if (x.kind == StepKind::RecvReduce && x.count <= count - count / 2) {
        t.children[x.dst.offset < split ? 0 : 1][rank]++;
      }
    }
  }
  return t;
}

// Depth in edges of the forest given by parent (-1 = root); -1 if not one tree over all ranks.
int treeDepth(const std::vector<int32_t>& parent) {
  const int32_t p = static_cast<int32_t>(parent.size());
  int roots = 0, depth = 0;
  for (int32_t r = 0; r < p; ++r) {
    if (parent[r] < 0) roots++;
    int d = 0;
    for (int32_t x = r; parent[x] >= 0; x = parent[x]) {
      if (++d > p) return -1;  // a cycle
    }
    depth = std::max(depth, d);
  }
  return roots == 1 ? depth : -1;
}

// Flat double binary tree: each tree spans every rank with depth floor(log2 p), and no rank has
// children in both trees (for every p >= 2, not only even p).
TEST(TreeAllReduce, DoubleTreeComplementaryAndDepth) {
  for (int32_t p = 2; p <= 200; ++p) {
    const TreeShape t = readTrees(p, p, 1000);
    for (int h = 0; h < 2; ++h) ASSERT_EQ(treeDepth(t.parent[h]), log2Floor(p)) << "p=" << p << " tree " << h;
    for (int32_t r = 0; r < p; ++r) {
      ASSERT_LE(t.children[0][r], 2);
      ASSERT_LE(t.children[1][r], 2);
      ASSERT_FALSE(t.children[0][r] > 0 && t.children[1][r] > 0)
          << "p=" << p << ": rank " << r << " is interior in both trees";
    }
  }
}

// Over hosts: the chain inside each host hangs below the host's first rank, which sits in the
// double binary tree over hosts: depth floor(log2 H) + (ranks per host - 1), and every rank's
// parent is on its host except the host heads'.
TEST(TreeAllReduce, HostTreeDepth) {
  for (int32_t p : {2, 5, 8, 12, 30, 64, 100}) {
    for (int32_t rph : {1, 2, 3, 4, 8}) {
      if (rph >= p) continue;
      const int32_t hosts = (p + rph - 1) / rph;
      const TreeShape t = readTrees(p, rph, 1000);
      for (int h = 0; h < 2; ++h) {
        SCOPED_TRACE("p=" + std::to_string(p) + " ranksPerHost=" + std::to_string(rph) + " tree " + std::to_string(h));
        const int depth = treeDepth(t.parent[h]);
        ASSERT_LE(depth, log2Floor(hosts) + rph - 1);
        if (p % rph == 0) {
          ASSERT_EQ(depth, log2Floor(hosts) + rph - 1);
        }
        for (int32_t r = 0; r < p; ++r) {
          if (r % rph != 0) {
            ASSERT_EQ(t.parent[h][r], r - 1);
          } else if (t.parent[h][r] >= 0) {
            ASSERT_EQ(t.parent[h][r] % rph, 0);
          }
        }
      }
      // Host heads: interior in at most one of the two trees over hosts.
      for (int32_t r = 0; r < p; r += rph) {
        int cross[2] = {0, 0};
        for (int h = 0; h < 2; ++h) {
          for (int32_t q = 0; q < p; q += rph) cross[h] += t.parent[h][q] == r;
        }
        ASSERT_FALSE(cross[0] > 0 && cross[1] > 0) << "p=" << p << " rph=" << rph << " head " << r;
      }
    }
  }
}

// The phases over a sub-group in another order, behind a gate, in place on the receive buffer:
// the even ranks, reversed, reduce among themselves; odd ranks only copy.
TEST(TreeAllReduce, PhasesOverGatedSubgroup) {
  using Phase = void (*)(const RankGroup&, const PhaseSpan&, int32_t, bool, Schedule*);
  const Phase phases[] = {addDoubleBinaryTreeAllReduce, addRecursiveDoublingAllReduce, addRabenseifnerAllReduce};
  const uint64_t count = 1001;
  for (int32_t members = 1; members <= 9; ++members) {
    const int32_t p = 2 * members;
    InProcessWorld world(p, p);
    uint64_t seq = 0;
    // Reused, so each begin() bumps the version the executions cached their preparation for.
    std::vector<Schedule> sched(p);
    for (Phase phase : phases) {
      for (collRedOp_t op : {collSum, collAvg}) {
        std::vector<std::vector<double>> in(p, std::vector<double>(count)), out(p, std::vector<double>(count, -7));
        std::vector<const Schedule*> ptrs(p);
        std::vector<ExecBuffers> buffers(p);
        RankGroup g;
        for (int32_t m = members - 1; m >= 0; --m) g.ranks.push_back(2 * m);
        for (int32_t r = 0; r < p; ++r) {
          for (uint64_t i = 0; i < count; ++i) in[r][i] = static_cast<double>((r * 7 + i * 3) % 11) - 5;
          Schedule& s = sched[r];
          s.begin("subgroup", collFloat64, op, static_cast<uint64_t>(members));
          s.addSelfCopy(count);
          if (r % 2 == 0) {
            g.me = members - 1 - r / 2;
            const int32_t gate = s.addJoin(0);
            phase(g, PhaseSpan{recvAt(0), recvAt(0), count, sizeof(double)}, gate, op == collAvg, &s);
          }
          s.finalizePeers();
          ptrs[r] = &s;
          buffers[r] = ExecBuffers{in[r].data(), out[r].data()};
        }
        Status st = runInProcess(ptrs, buffers, world, ++seq);
        ASSERT_TRUE(st.ok()) << st.message();
        for (int32_t r = 0; r < p; ++r) {
          for (uint64_t i = 0; i < count; ++i) {
            double expected = in[r][i];
            if (r % 2 == 0) {
              expected = 0;
              for (int32_t q = 0; q < p; q += 2) expected += in[q][i];
              if (op == collAvg) expected /= members;
            }
            ASSERT_EQ(out[r][i], expected) << "members=" << members << " rank " << r << " element " << i;
          }
        }
      }
    }
  }
}

TEST(TreeAllReduce, PlansDoNotDependOnPointers) {
  int a = 0, b = 0;
  for (Builder bl : {Builder::RecDoubling, Builder::Rabenseifner, Builder::Tree}) {
    for (int32_t p : {1, 3, 6}) {
      Schedule s[2];
      for (int k = 0; k < 2; ++k) {
        CollArgs args = argsFor(11, collFloat32, collAvg);
        args.sendbuff = &a;
        args.recvbuff = k == 0 ? &a : &b;
        build(bl, Topology::uniform(p - 1, p, 2), args, &s[k]);
      }
      ASSERT_EQ(s[0].steps.size(), s[1].steps.size());
      EXPECT_EQ(s[0].op, collSum);
      EXPECT_EQ(s[0].divisor, static_cast<uint64_t>(p));
      for (size_t i = 0; i < s[0].steps.size(); ++i) {
        EXPECT_EQ(s[0].steps[i].kind, s[1].steps[i].kind);
        EXPECT_EQ(s[0].steps[i].src.offset, s[1].steps[i].src.offset);
        EXPECT_EQ(s[0].steps[i].dst.offset, s[1].steps[i].dst.offset);
      }
    }
  }
}

TEST(TreeAllReduceExtended, ThousandsOfRanks) {
  InProcessOptions o;
  o.ringBytes = 256;
  for (int32_t p : {1000, 4096}) {
    for (Builder b : {Builder::RecDoubling, Builder::Rabenseifner, Builder::Tree}) {
      for (int32_t rph : {p, 8}) {
        if (b != Builder::Tree && rph != p) continue;
        Runner runner(p, rph, o);
        runner.run(b, 33, collFloat32, collSum, false);
        runner.run(b, 1000, collInt32, collAvg, true);
        if (testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

}  // namespace
}  // namespace coll
