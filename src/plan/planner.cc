// Planner implementation: the alpha-beta-gamma model per (collective, algorithm), COLL_ALGO's
// filter, and the choice of algorithm, options and chunk per call. Formulas: docs/ARCHITECTURE.md.
#include "src/plan/planner.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "algorithms/algorithms.h"
#include "src/schedule/schedule.h"

namespace coll {

namespace {

// Below this size every rank of a direct All-Reduce reduces the whole vector: p times the reads,
// one hop less.
constexpr uint64_t kReduceAllBelowBytes = 16 * 1024;
// COLL_SLICE_BYTES' default: the chunk a plan keeps unless the model finds a better one.
constexpr uint64_t kDefaultSliceBytes = 128 * 1024;
// A pipelined plan changes its chunk only when the model gains this much (fewer distinct plans).
constexpr double kSliceGain = 0.97;

constexpr CollKind kPlannedKinds[] = {CollKind::AllReduce, CollKind::Broadcast,     CollKind::Reduce,
                                      CollKind::AllGather, CollKind::ReduceScatter, CollKind::AlltoAll,
                                      CollKind::Gather,    CollKind::Scatter,       CollKind::Barrier};

int log2Floor(int64_t v) {
  int k = 0;
  while ((int64_t{2} << k) <= v) ++k;
  return k;
}

int log2Ceil(int64_t v) {
  int k = 0;
  while ((int64_t{1} << k) < v) ++k;
  return k;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string maskNames(AlgoMask mask) {
  std::string out;
  for (int i = 0; i < kAlgoCount; ++i) {
    if ((mask & (AlgoMask{1} << i)) == 0) continue;
    if (!out.empty()) out += ", ";
    out += algoName(static_cast<AlgoId>(i));
  }
  return out.empty() ? "none" : out;
}

// Counts how one round of transfers loads the links.
class LoadCounter {
 public:
  // nicOfRank: the NIC (0 .. nics-1 over all hosts) each rank's inter-host traffic uses.
  // busyMachine: the machine whose CPUs the transfers across hosts are counted on (-1: none).
  LoadCounter(const Topology& t, const std::vector<int32_t>& nicOfRank, int32_t nics, int32_t busyMachine)
      : t_(t), nicOf_(nicOfRank), busyMachine_(busyMachine), out_(static_cast<size_t>(nics)),
        in_(static_cast<size_t>(nics)), perRank_(static_cast<size_t>(t.nranks)) {}
  void add(int32_t src, int32_t dst) {
    if (src == dst) return;
    const int32_t hs = t_.hostOfRank[static_cast<size_t>(src)], hd = t_.hostOfRank[static_cast<size_t>(dst)];
    if (hs == hd) {
      int32_t& n = perRank_[static_cast<size_t>(src)];
      load_.intraPerRank = std::max(load_.intraPerRank, ++n);
    } else {
      load_.interPerNic = std::max<double>(load_.interPerNic, ++out_[static_cast<size_t>(nicOf_[static_cast<size_t>(src)])]);
      load_.interPerNic = std::max<double>(load_.interPerNic, ++in_[static_cast<size_t>(nicOf_[static_cast<size_t>(dst)])]);
      if (busyMachine_ >= 0 && t_.machineOfRank[static_cast<size_t>(src)] == busyMachine_) ++load_.machineInter;
    }
  }
  StepLoad take() {
    StepLoad l = load_;
    load_ = StepLoad{};
    std::fill(out_.begin(), out_.end(), 0);
    std::fill(in_.begin(), in_.end(), 0);
    std::fill(perRank_.begin(), perRank_.end(), 0);
    return l;
  }

 private:
  const Topology& t_;
  const std::vector<int32_t>& nicOf_;
  int32_t busyMachine_;
  std::vector<int32_t> out_, in_, perRank_;
  StepLoad load_;
};

bool isUniformBlocks(const Topology& t) {
  if (t.nranks <= 0 || t.nhosts <= 0 || t.nranks % t.nhosts != 0) return false;
  const int32_t per = t.nranks / t.nhosts;
  for (int32_t r = 0; r < t.nranks; ++r) {
    if (t.hostOfRank[static_cast<size_t>(r)] != r / per) return false;
  }
  return true;
}

// The machine whose ranks most outnumber its CPUs (none when every machine has a core per rank
// or its CPUs are unknown).
void deriveMachineLoad(const Topology& t, PlannerShape* s) {
  if (t.machineOfRank.size() != static_cast<size_t>(t.nranks) || t.nmachines <= 0) return;
  std::vector<int32_t> ranks(static_cast<size_t>(t.nmachines));
  for (int32_t m : t.machineOfRank) {
    if (m >= 0 && m < t.nmachines) ++ranks[static_cast<size_t>(m)];
  }
  double worst = 1.0;
  for (size_t m = 0; m < ranks.size() && m < t.cpusOfMachine.size(); ++m) {
    const int32_t cpus = t.cpusOfMachine[m];
    if (cpus > 0 && static_cast<double>(ranks[m]) / cpus > worst) {
      worst = static_cast<double>(ranks[m]) / cpus;
      s->busyMachine = static_cast<int32_t>(m);
      s->machineRanks = ranks[m];
      s->machineCpus = cpus;
    }
  }
  if (s->busyMachine < 0) return;
  std::vector<char> onMachine(static_cast<size_t>(std::max(t.nhosts, 1)), 0);
  for (int32_t r = 0; r < t.nranks; ++r) {
    const size_t i = static_cast<size_t>(r);
    if (t.machineOfRank[i] == s->busyMachine) onMachine[static_cast<size_t>(t.hostOfRank[i])] = 1;
  }
  s->machineHosts = static_cast<int32_t>(std::count(onMachine.begin(), onMachine.end(), 1));
}

void deriveShape(const PlannerInputs& in, PlannerShape* s) {
  const Topology& t = *in.topo;
  const int32_t p = t.nranks;
  *s = PlannerShape{};
  std::vector<int32_t> perHost(static_cast<size_t>(std::max(t.nhosts, 1)));
  for (int32_t h : t.hostOfRank) ++perHost[static_cast<size_t>(h)];
  s->maxLocal = std::max(1, *std::max_element(perHost.begin(), perHost.end()));
  s->uniformBlocks = isUniformBlocks(t);
  s->hierPossible = t.nhosts > 1 && s->maxLocal > 1;
  deriveMachineLoad(t, s);
  if (p <= 1) return;

  // Which NIC each rank's inter-host traffic leaves through: local rank i of a host with n ranks
  // and k NICs uses NIC i * k / n, so the ranks spread evenly over the NICs.
  std::vector<int32_t> firstNic(perHost.size()), seen(perHost.size()), nicOfRank(static_cast<size_t>(p));
  int32_t nics = 0;
  for (size_t h = 0; h < perHost.size(); ++h) {
    firstNic[h] = nics;
    nics += in.nicsPerHost > 0 ? std::min(in.nicsPerHost, std::max(perHost[h], 1)) : std::max(perHost[h], 1);
  }
  std::vector<int32_t> perNic(static_cast<size_t>(nics));
  for (int32_t r = 0; r < p; ++r) {
    const size_t h = static_cast<size_t>(t.hostOfRank[static_cast<size_t>(r)]);
    const int64_t k = in.nicsPerHost > 0 ? std::min(in.nicsPerHost, perHost[h]) : perHost[h];
    const int32_t nic = firstNic[h] + static_cast<int32_t>(int64_t{seen[h]++} * k / perHost[h]);
    nicOfRank[static_cast<size_t>(r)] = nic;
    s->ranksPerNic = std::max(s->ranksPerNic, ++perNic[static_cast<size_t>(nic)]);
  }

  LoadCounter c(t, nicOfRank, nics, s->busyMachine);
  int64_t crossing = 0;
  for (int32_t r = 0; r < p; ++r) {
    c.add(r, (r + 1) % p);
    crossing += t.sameHost(r, (r + 1) % p) ? 0 : 1;
  }
  s->ring = c.take();
  s->ringInterFraction = static_cast<double>(crossing) / p;

  const int32_t core = int32_t{1} << log2Floor(p);
  const int32_t extra = p - core;
  s->core = core;
  for (int32_t i = 0; i < 2 * extra; i += 2) c.add(i, i + 1);
  s->fold = c.take();
  auto member = [&](int32_t j) { return j < extra ? 2 * j + 1 : j + extra; };
  for (int32_t d = 1; d < core; d <<= 1) {
    for (int32_t j = 0; j < core; ++j) c.add(member(j), member(j ^ d));
    s->pairSteps.push_back(c.take());
  }
  for (int64_t d = 1; d < p; d <<= 1) {
    for (int64_t i = 0; i < std::min<int64_t>(d, p - d); ++i) c.add(static_cast<int32_t>(i), static_cast<int32_t>(i + d));
    s->binomial.push_back(c.take());
    for (int32_t r = 0; r < p; ++r) c.add(r, static_cast<int32_t>((r - d % p + p) % p));
    s->bruck.push_back(c.take());
  }
  s->treeHeight = log2Floor(t.nhosts > 1 ? t.nhosts : p);

  TorusDims dims;
  Status st = torusDimsFor(t, in.torusDims, &dims);
  if (!st.ok()) {
    s->torusProblem = st.message();
  } else if (dims.product() != p) {
    s->torusProblem = "torus dimensions " + std::to_string(dims.d[0]) + "x" + std::to_string(dims.d[1]) + "x" +
                      std::to_string(dims.d[2]) + " do not multiply to " + std::to_string(p) + " ranks";
  } else {
    int big = 0;
    for (int i = 0; i < 3; ++i) big += dims.d[i] > 1 ? 1 : 0;
    if (big < 2 && in.torusDims.empty()) {
      s->torusProblem = std::to_string(p) + " ranks make no grid with two dimensions > 1 (set COLL_TORUS_DIMS)";
    } else {
      s->torusOk = true;
      s->torus = dims;
      int64_t stride = 1;
      for (int i = 0; i < 3; ++i) {
        const int64_t d = dims.d[i];
        int64_t cross = 0;
        for (int32_t r = 0; r < p && d > 1; ++r) {
          const int64_t x = (r / stride) % d;
          const int32_t next = static_cast<int32_t>(r + ((x + 1) % d - x) * stride);
          c.add(r, next);
          c.add(r, static_cast<int32_t>(r + ((x + d - 1) % d - x) * stride));
          cross += t.sameHost(r, next) ? 0 : 1;
        }
        s->torusDims.push_back(c.take());
        s->torusInterFraction.push_back(static_cast<double>(cross) / p);
        stride *= d;
      }
    }
  }
  if (t.nhosts > 1) {
    Topology hosts = Topology::uniform(0, t.nhosts, 1);
    TorusDims hd;
    if (torusDimsFor(hosts, "", &hd).ok() && hd.product() == t.nhosts) {
      int big = 0;
      for (int i = 0; i < 3; ++i) big += hd.d[i] > 1 ? 1 : 0;
      s->hostTorusOk = big >= 2;
      s->hostTorus = hd;
    }
  }
}

// Bytes the busiest member of a double binary tree over n members moves per byte of the call, per
// direction: an interior node forwards its tree's half to two children and the other tree's
// half up, 2n in all; with two members each tree is a root and a leaf, so each link direction
// carries the call once.
double treeBusyFactor(int64_t members) { return members > 2 ? 2.0 : 1.0; }

// The share of a message's inter-host alpha that is CPU time on an oversubscribed machine (below).
// Fitted on the emulated 4 x 2 cluster (2 CPUs, run planner_vs_forced-20261202-105748, 8 and
// 64 B): recursive doubling's rounds of 8 messages across hosts took 3.0 alphas each, Rabenseifner's
// of 4 (8 B) 1.4-1.5; 0.75 * 8 / 2 = 3 and 0.75 * 4 / 2 = 1.5.
constexpr double kInterMessageCpuShare = 0.75;

// The same share for the steps of a ring, where every connection carries bytes one way: fitted on
// 4 x 2 emulated hosts at 32 KiB (2026-12-03, inter-host alpha probed at 32-35 us), where ring
// choices are decided: the flat ring's steps of 4 messages across hosts ran 34 us (0.5 * 4 / 2 = 1
// alpha), hierarchical's ring across hosts, 8 messages a step (two flows per NIC), 66-70 us (2
// alphas, about its bytes, 65.5 us at 1 Gbit/s). At 8-64 B on that cluster the ring's steps cost
// their floors under either share (one alpha a step in streamedSteps, at least one a crossing in
// interAlphas), so the 8-64 B fit above does not move them.
constexpr double kRingMessageCpuShare = 0.5;

// How a round's partners exchange: pairwise (both ways on each connection, recursive doubling and
// halving, trees, the torus's two directions) or as a ring (each rank sends to one and receives
// from another; each connection carries bytes one way).
enum class StepFlow { Exchange, Ring };

// How many alphas one round's messages across hosts take. A shared NIC handles the messages of the
// ranks crossing through it one after another: k ranks sending at once pay k alphas (their
// per-message cost, as well as their bytes); one rank's own concurrent messages (both directions
// of a torus ring) overlap, as on a NIC of its own. On a machine with fewer CPUs than ranks (an
// emulated cluster: namespaces whose "NICs" are veth pairs of one kernel) an inter-host alpha is
// mostly CPU time (system calls, the kernel's TCP stack, waking the receiver): the round's
// messages from that machine share its CPUs, not a NIC, so a round costs its messages' CPU time
// spread over the CPUs, and at least one alpha.
double interAlphas(const PlannerInputs& in, const StepLoad& l, StepFlow flow = StepFlow::Exchange) {
  const PlannerShape& sh = in.shape;
  if (sh.machineCpus > 0) {
    const double share = flow == StepFlow::Ring ? kRingMessageCpuShare : kInterMessageCpuShare;
    return std::max(1.0, share * l.machineInter * l.sendingShare / sh.machineCpus);
  }
  return std::max(1.0, std::min(l.interPerNic, static_cast<double>(sh.ranksPerNic)));
}

// The load of a round in which only `share` of the ranks send (the rest hold empty chunks).
StepLoad withSendingShare(StepLoad l, double share) {
  l.sendingShare = share;
  return l;
}

double stepCost(const PlannerInputs& in, const StepLoad& l, double bytes) {
  double t = 0;
  if (l.intraPerRank > 0) t = in.intraHost.alpha + l.intraPerRank * bytes * in.intraHost.beta;
  if (l.interPerNic > 0) {
    t = std::max(t, interAlphas(in, l) * in.interHost.alpha + l.interPerNic * bytes * in.interHost.beta);
  }
  return t;
}

// A pipeline carrying `bytes` in chunks: the first chunk's trip through every stage (fill), then
// one chunk per occupancy of the busiest resource. Picks the chunk (unless COLL_SLICE_BYTES was
// set) and returns the time.
template <typename Fill, typename Busy>
double streamedPipeline(const PlannerInputs& in, double bytes, Fill fill, Busy busy, uint64_t* sliceOut) {
  auto eval = [&](uint64_t s) {
    const double chunk = std::min<double>(bytes, static_cast<double>(s));
    const double chunks = bytes <= 0 ? 1 : std::ceil(bytes / static_cast<double>(s));
    return fill(chunk) + (chunks - 1) * busy(chunk);
  };
  const uint64_t base = in.sliceBytes != 0 ? in.sliceBytes : kDefaultSliceBytes;
  double best = eval(base);
  *sliceOut = 0;
  if (in.sliceBytes != 0) return best;
  for (uint64_t s = 16 * 1024; s <= 1024 * 1024; s *= 2) {
    const double t = eval(s);
    if (t < best * kSliceGain) best = t, *sliceOut = s;
  }
  return best;
}

// A pipeline `depth` stages deep carrying `bytes` in chunks: (depth + chunks - 1) chunk times.
template <typename ChunkTime>
double pipelined(const PlannerInputs& in, int64_t depth, double bytes, ChunkTime chunkTime, uint64_t* sliceOut) {
  const double stages = static_cast<double>(std::max<int64_t>(depth, 1));
  return streamedPipeline(in, bytes, [&](double s) { return stages * chunkTime(s); }, chunkTime, sliceOut);
}

// The executor streams slices through a rank (dependencies are per slice), so within a phase the
// latency of successive slices overlaps their transfer (and their reduction, where
// reductionOverlaps): a step of `chunk` bytes costs the busiest resource's time for the whole
// chunk, or, when that is shorter, the latency of one slice through one hop (the next step's
// first slice waits for it). Hops: `interFraction` of them cross hosts.
double sliceBytesOf(const PlannerInputs& in) {
  return static_cast<double>(in.sliceBytes != 0 ? in.sliceBytes : kDefaultSliceBytes);
}

// `reduce`: chunks a rank reduces per step (0 = none; 2 for both directions of a torus dimension).
double streamedSteps(const PlannerInputs& in, double steps, const StepLoad& l, double interFraction, double chunk,
                     double reduce, StepFlow flow = StepFlow::Exchange) {
  if (steps <= 0) return 0;
  const double s = std::min(chunk, sliceBytesOf(in));
  const double g = reduce > 0 ? in.gamma : 0;
  double ports = std::max(l.intraPerRank * chunk * in.intraHost.beta, l.interPerNic * chunk * in.interHost.beta);
  // On an oversubscribed machine an inter-host alpha is CPU time the receiving rank spends on each
  // message, one message after another as bytes cross a wire: a step with a hop across hosts
  // takes at least one alpha, whatever share of its hops cross (a ring advances at the pace of
  // its links across hosts; rounds whose every hop crosses pay it in `hop` already). A link that
  // carries a message in only some steps (a ring of fewer elements than ranks) is busy that
  // share of them.
  if (in.shape.machineCpus > 0 && l.interPerNic > 0) ports = std::max(ports, l.sendingShare * in.interHost.alpha);
  const double busy = in.reductionOverlaps ? std::max(ports, reduce * chunk * g) : ports + reduce * chunk * g;
  const double f = interFraction;
  // A step of one slice does not pipeline: it ends when the last message through the busiest
  // link arrives, after every message sharing that link (their bytes as well as their alphas).
  const bool oneSlice = chunk <= s;
  const double intraBytes = s * (oneSlice ? std::max(1, l.intraPerRank) : 1);
  const double interBytes = s * (oneSlice ? std::max(1.0, l.interPerNic) : 1.0);
  // On an oversubscribed machine a ring's messages across hosts cost their CPU time or their
  // bytes on the NIC, whichever is longer, not both: while the CPUs handle one step's messages the
  // NIC (here a token bucket, which fills while the link idles) sends what the previous handed
  // it. Measured on 4 x 2 emulated hosts at 32 KiB (inter-host alpha 32-35 us): the flat ring's
  // steps ran at their bytes alone, 34 us for 32.8 us of bytes; hierarchical's ring across hosts
  // at 66-70 us for 65.5 us of bytes, where the sum priced it at 102 + 65.5 us and the planner took
  // hierarchical's recursive doubling (555 us measured) or the flat ring (485 us) over it (435 us).
  // Pairwise exchanges pay both: recursive doubling's rounds there ran their bytes + 1-1.5 alphas.
  const double interAlpha = interAlphas(in, l, flow) * in.interHost.alpha;
  const double interHop = flow == StepFlow::Ring && in.shape.machineCpus > 0
                              ? std::max(interAlpha, interBytes * in.interHost.beta)
                              : interAlpha + interBytes * in.interHost.beta;
  const double hop = (1 - f) * (in.intraHost.alpha + intraBytes * in.intraHost.beta) + f * interHop;
  return steps * std::max(busy, hop + s * g);
}

// One step of a pairwise algorithm (recursive doubling, Rabenseifner): its latency is the slowest
// pair's.
double streamedStep(const PlannerInputs& in, const StepLoad& l, double chunk, double reduce) {
  return streamedSteps(in, 1, l, l.interPerNic > 0 ? 1.0 : 0.0, chunk, reduce);
}

// Recursive doubling / Rabenseifner / ring / tree / torus over one member per host, every NIC
// carrying `flows` such shards at once (hierarchical's inter-host phase).
double interHostAllReduce(const PlannerInputs& in, AlgoId algo, double m, int flows, uint64_t* slice) {
  const int64_t h = in.topo->nhosts;
  const double a = in.interHost.alpha, b = in.interHost.beta, g = in.gamma;
  *slice = 0;
  if (h <= 1) return 0;
  // Every host on the busiest machine sends its flows' messages each round.
  const double machineFlows = static_cast<double>(flows) * in.shape.machineHosts;
  const StepLoad one{0, static_cast<double>(flows), machineFlows};
  switch (algo) {
    case AlgoId::Ring:
      return streamedSteps(in, static_cast<double>(h - 1), one, 1, m / h, 1, StepFlow::Ring) +
             streamedSteps(in, static_cast<double>(h - 1), one, 1, m / h, 0, StepFlow::Ring);
    case AlgoId::Tree: {
      // Double binary tree over the hosts: a busy member sends and receives twice each chunk.
      const int depth = 2 * log2Floor(h);
      // The first chunk of every flow crosses each NIC before the pipeline runs full, an interior
      // member's two children one after the other (as in the flat tree).
      const double fanIn = treeBusyFactor(h);
      return streamedPipeline(
          in, m, [&](double s) { return depth * flows * fanIn * (a + s * b) + depth / 2 * s * g; },
          [&](double s) {
            const double ports = treeBusyFactor(h) * s * b * flows;
            return in.reductionOverlaps ? std::max(ports, s * g) : ports + s * g;
          },
          slice);
    }
    case AlgoId::RecursiveDoubling: {
      const int64_t core = int64_t{1} << log2Floor(h);
      const double fold = core < h ? streamedSteps(in, 1, one, 1, m, 1) + streamedSteps(in, 1, one, 1, m, 0) : 0;
      return fold + streamedSteps(in, log2Floor(h), one, 1, m, 1);
    }
    case AlgoId::Rabenseifner: {
      const int64_t core = int64_t{1} << log2Floor(h);
      double t = core < h ? streamedSteps(in, 1, one, 1, m, 1) + streamedSteps(in, 1, one, 1, m, 0) : 0;
      double part = m;
      for (int k = 0; k < log2Floor(h); ++k) {
        part /= 2;
        t += streamedSteps(in, 1, one, 1, part, 1) + streamedSteps(in, 1, one, 1, part, 0);
      }
      return t;
    }
    case AlgoId::Torus: {
      // Per dimension two half-size rings in opposite directions: two flows per member.
      const StepLoad two{0, 2.0 * flows, 2.0 * machineFlows};
      double t = 0, part = m;
      for (int i = 0; i < 3; ++i) {
        const int d = in.shape.hostTorus.d[i];
        if (d <= 1) continue;
        t += streamedSteps(in, d - 1, two, 1, part / d / 2, 2) + streamedSteps(in, d - 1, two, 1, part / d / 2, 0);
        part /= d;
      }
      return t;
    }
    default: return 0;
  }
}

// How much slower than its model each All-Reduce implementation ran here (2-core VM, 8 ranks,
// 4 MiB and 16 MiB, 2026-11-29, on one host and on emulated 2x4 and 4x2 hosts at 1 Gbit/s):
// ring, recursive doubling and direct matched the model; Rabenseifner ran 1.5x its model
// everywhere; torus 1.1-2x (worst on one host); hierarchical 1.04-1.07x once the model counted
// every flow's first chunk through the shared NIC (it was 1.0-1.4x before). The phased algorithms
// wait at a gate between phases and make more local passes than the model counts, so a factor
// scales what the bytes add to the call's latency (Rabenseifner ran 8-64 B at its unscaled model
// on the emulated 4 x 2 cluster, run -105748; the torus below it). Hierarchical's scales the whole
// call: its latency ran 1.2-2.4x the model at 8-64 B there, its phases inside the hosts waking
// ranks that the probe's intra alpha (both ranks on a CPU) does not count; unscaled, the model
// tied it at 64-512 B on 4 x 2 with the flat recursive doubling whose rounds across hosts it
// repeats, and it ran 1.1-1.2x slower. Recalibrate with bench/planner_vs_forced.sh when the
// implementations change.
struct ImplementationFactor {
  double factor = 1.0;
  bool wholeCall = true;  // false: the bytes' share only
};
ImplementationFactor implementationFactor(AlgoId algo) {
  switch (algo) {
    case AlgoId::Rabenseifner: return {1.5, false};
    case AlgoId::Torus: return {1.4, false};
    case AlgoId::Hierarchical: return {1.1, true};
    default: return {};
  }
}

// `seconds`, the model's time for `algo`, scaled by its implementation factor (unless the inputs
// leave factors out): the whole call, or what the bytes add to the latency (`latencyModel()`: the
// same model with no bytes).
template <typename LatencyModel>
double withImplementationFactor(const PlannerInputs& in, AlgoId algo, double seconds, LatencyModel latencyModel) {
  const ImplementationFactor f = in.implementationFactors ? implementationFactor(algo) : ImplementationFactor{};
  if (f.factor == 1.0 || seconds <= 0) return seconds;
  const double latency = f.wholeCall ? 0.0 : latencyModel();
  return latency + f.factor * std::max(0.0, seconds - latency);
}

// The ranks of one ring that hold a non-empty chunk of `count` elements: a ring's empty chunks
// send nothing, so with fewer elements than members only that many work in a step.
int64_t nonEmptyChunks(uint64_t count, int64_t members) {
  return count > 0 && static_cast<int64_t>(count) < members ? static_cast<int64_t>(count) : members;
}

// The share of the p' core members that send in Rabenseifner's round at mask m (halving and
// doubling alike): a member sends an aligned block of m of the p' parts, and with fewer elements
// than parts only the first `count` parts hold any (partStart), so only the members whose block
// starts below `count` have something to send: min(p', m * ceil(count / m)) of them.
double rabenseifnerSenders(uint64_t count, int64_t core, int64_t mask) {
  if (count == 0 || static_cast<int64_t>(count) >= core) return 1.0;
  const int64_t blocks = (static_cast<int64_t>(count) + mask - 1) / mask;
  return static_cast<double>(std::min(core, mask * blocks)) / static_cast<double>(core);
}

double directOnce(const PlannerInputs& in, double n) {
  const int p = in.topo->nranks;
  if (n < kReduceAllBelowBytes) return in.intraHost.alpha + (1.0 + p) * n * in.gamma;
  return 2.0 * in.intraHost.alpha + 3.0 * n * in.gamma;
}

// The model's All-Reduce time, without the implementation factor. count: the elements, which a
// small call spreads over fewer ranks than it has (0: every rank holds some). onlyInter:
// hierarchical's inter-host algorithm when fixed (Hierarchical = the best one).
Candidate modelAllReduce(const PlannerInputs& in, AlgoId algo, double n, uint64_t count, AlgoId onlyInter) {
  const PlannerShape& sh = in.shape;
  const Topology& t = *in.topo;
  const int64_t p = t.nranks;
  const double g = in.gamma;
  Candidate c;
  c.algo = algo;
  if (p <= 1) return c;
  switch (algo) {
    case AlgoId::Ring: {
      // Only the ranks holding a non-empty chunk send in a step.
      const StepLoad l =
          withSendingShare(sh.ring, static_cast<double>(nonEmptyChunks(count, p)) / static_cast<double>(p));
      c.seconds = streamedSteps(in, static_cast<double>(p - 1), l, sh.ringInterFraction, n / p, 1, StepFlow::Ring) +
                  streamedSteps(in, static_cast<double>(p - 1), l, sh.ringInterFraction, n / p, 0, StepFlow::Ring);
      break;
    }
    case AlgoId::Direct:
      c.seconds = in.directLimit > 0 && n > in.directLimit
                      ? std::ceil(n / in.directLimit) * directOnce(in, static_cast<double>(in.directLimit))
                      : directOnce(in, n);
      break;
    case AlgoId::Tree: {
      // Two complementary trees, half the data each: per chunk a busy node sends and receives
      // twice the chunk (up, and down to two children); inside a host a chain does the same.
      // The first chunk goes up and down the tree over the hosts (or ranks) and the chains.
      const bool hosts = t.nhosts > 1;
      const int64_t treeHops = sh.treeHeight, chainHops = hosts ? sh.maxLocal - 1 : 0;
      const LinkCost& l = hosts ? in.interHost : in.intraHost;
      // An interior node's two children reach it through its one link, one message after the
      // other (and it sends to both on the way down), as ranks sharing a NIC do (interAlphas).
      const double fanIn = treeBusyFactor(hosts ? t.nhosts : t.nranks);
      c.seconds = streamedPipeline(
          in, n,
          [&](double s) {
            // Each tree carries half of every chunk up and down.
            const double h = s / 2;
            return 2.0 * (treeHops * fanIn * (l.alpha + h * l.beta) +
                          chainHops * (in.intraHost.alpha + h * in.intraHost.beta)) +
                   static_cast<double>(treeHops + chainHops) * h * g;
          },
          [&](double s) {
            double ports = treeBusyFactor(hosts ? t.nhosts : t.nranks) * s * l.beta;
            if (chainHops > 0) ports = std::max(ports, 2 * s * in.intraHost.beta);
            return in.reductionOverlaps ? std::max(ports, s * g) : ports + s * g;
          },
          &c.sliceBytes);
      break;
    }
    case AlgoId::RecursiveDoubling: {
      double tt = sh.core < p ? streamedStep(in, sh.fold, n, 1) + streamedStep(in, sh.fold, n, 0) : 0;
      for (const StepLoad& l : sh.pairSteps) tt += streamedStep(in, l, n, 1);
      c.seconds = tt;
      break;
    }
    case AlgoId::Rabenseifner: {
      double tt = sh.core < p ? streamedStep(in, sh.fold, n, 1) + streamedStep(in, sh.fold, n, 0) : 0;
      // Halving starts with the farthest partner and half the vector (doubling ends there).
      double part = n;
      for (size_t k = sh.pairSteps.size(); k-- > 0;) {
        part /= 2;
        const StepLoad l = withSendingShare(sh.pairSteps[k], rabenseifnerSenders(count, sh.core, int64_t{1} << k));
        tt += streamedStep(in, l, part, 1) + streamedStep(in, l, part, 0);
      }
      c.seconds = tt;
      break;
    }
    case AlgoId::Torus: {
      double tt = 0, part = n;
      for (size_t i = 0; i < sh.torusDims.size(); ++i) {
        const int d = sh.torus.d[i];
        if (d <= 1) continue;
        // Two half-size rings in opposite directions.
        const double f = sh.torusInterFraction[i];
        tt += streamedSteps(in, d - 1, sh.torusDims[i], f, part / d / 2, 2) +
              streamedSteps(in, d - 1, sh.torusDims[i], f, part / d / 2, 0);
        part /= d;
      }
      c.seconds = tt;
      c.options.torus = sh.torus;
      break;
    }
    case AlgoId::Hierarchical: {
      const int64_t L = sh.maxLocal;
      const double m = n / static_cast<double>(L);
      const StepLoad ringInHost{1, 0};
      const double intra = streamedSteps(in, static_cast<double>(L - 1), ringInHost, 0, m, 1) +
                           streamedSteps(in, static_cast<double>(L - 1), ringInHost, 0, m, 0);
      double best = -1;
      for (AlgoId x : {AlgoId::Ring, AlgoId::Tree, AlgoId::Torus, AlgoId::RecursiveDoubling, AlgoId::Rabenseifner}) {
        if (x == AlgoId::Torus && !sh.hostTorusOk) continue;
        if (onlyInter != AlgoId::Hierarchical && x != onlyInter) continue;
        uint64_t slice = 0;
        // Every local rank with a non-empty shard runs its inter-host phase at once: up to
        // ranksPerNic of them per NIC.
        const int flows = static_cast<int>(std::min<int64_t>(sh.ranksPerNic, nonEmptyChunks(count, L)));
        // The phased implementations run across hosts as they run flat, as much slower than
        // their model on the bytes: unscaled, hierarchical with the torus over 2 x 2 hosts (fewer
        // steps than the ring, the same bytes) was chosen at 16 MiB on 4 x 2 emulated hosts in some
        // launches and ran 1.14-1.26x the ring's 220 ms, and with Rabenseifner at 2 MiB 1.1-1.3x.
        const double tx = withImplementationFactor(in, x, interHostAllReduce(in, x, m, flows, &slice), [&] {
          uint64_t unused = 0;
          return interHostAllReduce(in, x, 0, flows, &unused);
        });
        if (best < 0 || tx < best) {
          best = tx;
          c.options.interHost = x;
          c.sliceBytes = slice;
        }
      }
      if (best < 0) {
        c.seconds = -1;
        return c;
      }
      if (c.options.interHost == AlgoId::Torus) c.options.torus = sh.hostTorus;
      c.seconds = intra + best;
      break;
    }
    default: break;
  }
  return c;
}

Candidate predictAllReduce(const PlannerInputs& in, AlgoId algo, double n, uint64_t count,
                           AlgoId onlyInter = AlgoId::Hierarchical) {
  Candidate c = modelAllReduce(in, algo, n, count, onlyInter);
  c.seconds = withImplementationFactor(in, algo, c.seconds,
                                       [&] { return modelAllReduce(in, algo, 0, count, onlyInter).seconds; });
  return c;
}

}  // namespace

// ---- COLL_ALGO

AlgoMask candidateAlgos(CollKind kind) {
  switch (kind) {
    case CollKind::AllReduce:
      return algoBit(AlgoId::Ring) | algoBit(AlgoId::Direct) | algoBit(AlgoId::Tree) |
             algoBit(AlgoId::RecursiveDoubling) | algoBit(AlgoId::Rabenseifner) | algoBit(AlgoId::Torus) |
             algoBit(AlgoId::Hierarchical) | algoBit(AlgoId::TwoShot);
    case CollKind::Broadcast: return algoBit(AlgoId::Tree) | algoBit(AlgoId::Ring) | algoBit(AlgoId::Hierarchical);
    case CollKind::Reduce: return algoBit(AlgoId::Tree) | algoBit(AlgoId::Ring);
    case CollKind::AllGather:
      return algoBit(AlgoId::Bruck) | algoBit(AlgoId::Ring) | algoBit(AlgoId::Direct) | algoBit(AlgoId::Hierarchical);
    case CollKind::ReduceScatter:
      return algoBit(AlgoId::Ring) | algoBit(AlgoId::Direct) | algoBit(AlgoId::Hierarchical);
    case CollKind::AlltoAll: return algoBit(AlgoId::Pairwise);
    case CollKind::Gather:
    case CollKind::Scatter: return algoBit(AlgoId::Linear);
    case CollKind::Barrier: return algoBit(AlgoId::Dissemination);
    case CollKind::Send:
    case CollKind::Recv: return 0;
  }
  return 0;
}

Status parseAlgoFilter(const std::string& text, AlgoMask allowed[kCollKindCount]) {
  for (int k = 0; k < kCollKindCount; ++k) allowed[k] = candidateAlgos(static_cast<CollKind>(k));
  std::string rest = text;
  while (!rest.empty()) {
    const size_t semi = rest.find(';');
    const std::string section = trim(rest.substr(0, semi));
    rest = semi == std::string::npos ? "" : rest.substr(semi + 1);
    if (section.empty()) continue;
    const size_t colon = section.find(':');
    bool perColl = colon != std::string::npos;
    CollKind kind = CollKind::AllReduce;
    if (perColl) {
      const std::string name = lower(trim(section.substr(0, colon)));
      bool found = false;
      for (CollKind k : kPlannedKinds) {
        if (name == collKindName(k)) kind = k, found = true;
      }
      if (!found) {
        return makeError(collInvalidUsage,
                         "COLL_ALGO=%s: unknown collective '%s' (known: allreduce, broadcast, reduce, allgather, "
                         "reducescatter, alltoall, gather, scatter, barrier)",
                         text.c_str(), name.c_str());
      }
    }
    std::string list = trim(perColl ? section.substr(colon + 1) : section);
    const bool exclude = !list.empty() && list[0] == '^';
    if (exclude) list = trim(list.substr(1));
    AlgoMask named = 0;
    while (true) {
      const size_t comma = list.find(',');
      const std::string name = lower(trim(list.substr(0, comma)));
      AlgoId a;
      if (!algoFromName(name, &a)) {
        return makeError(collInvalidUsage,
                         "COLL_ALGO=%s: unknown algorithm '%s' (known: ring, direct, tree, recdoubling, "
                         "rabenseifner, torus, hier, bruck, pairwise, linear, dissemination)",
                         text.c_str(), name.c_str());
      }
      named |= algoBit(a);
      if (comma == std::string::npos) break;
      list = list.substr(comma + 1);
    }
    if (perColl) {
      const AlgoMask cand = candidateAlgos(kind);
      if ((named & ~cand) != 0) {
        return makeError(collInvalidUsage, "COLL_ALGO=%s: %s is not a %s algorithm (%s has: %s)", text.c_str(),
                         maskNames(named & ~cand).c_str(), collKindName(kind), collKindName(kind),
                         maskNames(cand).c_str());
      }
      allowed[static_cast<int>(kind)] = exclude ? cand & ~named : named;
      continue;
    }
    for (CollKind k : kPlannedKinds) {
      const AlgoMask cand = candidateAlgos(k);
      if (exclude) {
        allowed[static_cast<int>(k)] = cand & ~named;
      } else if ((cand & named) != 0) {
        allowed[static_cast<int>(k)] = cand & named;
      }
    }
  }
  return okStatus();
}

// ---- applicability and predictions

bool algoApplicable(const PlannerInputs& in, CollKind kind, AlgoId algo, std::string* why) {
  // Reasons are built only when asked for: planCollective calls this on every call.
  auto no = [&](auto&& reason) {
    if (why != nullptr) *why = reason();
    return false;
  };
  if ((candidateAlgos(kind) & algoBit(algo)) == 0) {
    return no([&] { return std::string(algoName(algo)) + " does not implement " + collKindName(kind); });
  }
  const Topology& t = *in.topo;
  switch (algo) {
    case AlgoId::Direct:
      if (!in.haveWindows) return no([] { return std::string("direct needs shared-memory windows (not with COLL_TRANSPORT=tcp)"); });
      if (!t.singleHost()) {
        return no([&] { return "direct needs every rank on one host (this communicator spans " + std::to_string(t.nhosts) + " hosts)"; });
      }
      if (t.nranks < 2) return no([] { return std::string("direct needs two ranks or more"); });
      if (in.directLimit == 0) {
        return no([] { return std::string("direct needs a window (COLL_SHM_WINDOW_BYTES, COLL_DIRECT_MAX_BYTES)"); });
      }
      if (kind == CollKind::ReduceScatter && in.windowHalfBytes / (2 * static_cast<uint64_t>(t.nranks - 1)) < 64) {
        return no([] { return std::string("direct reducescatter needs 128 window bytes per peer (COLL_SHM_WINDOW_BYTES)"); });
      }
      if (kind == CollKind::AllGather && in.windowHalfBytes < 128) {
        return no([] { return std::string("direct allgather needs a window half of 128 bytes or more (COLL_SHM_WINDOW_BYTES)"); });
      }
      return true;
    case AlgoId::Torus:
      if (!in.shape.torusOk) return no([&] { return in.shape.torusProblem; });
      return true;
    case AlgoId::TwoShot:
      return no([] { return std::string("twoshot runs compressed All-Reduce only (collAllReduceCompressed)"); });
    case AlgoId::Hierarchical:
      if (!in.shape.hierPossible) {
        return no([&] {
          return "hier needs more than one host and a host with more than one rank (this communicator: " +
                 std::to_string(t.nhosts) + " hosts, at most " + std::to_string(in.shape.maxLocal) + " ranks per host)";
        });
      }
      if (kind != CollKind::AllReduce && !in.shape.uniformBlocks) {
        return no([&] {
          return std::string("hier ") + collKindName(kind) +
                 " needs the same number of ranks on every host, numbered in host blocks";
        });
      }
      return true;
    default: return true;
  }
}

Candidate predictAlgo(const PlannerInputs& in, CollKind kind, AlgoId algo, uint64_t bytesIn, uint64_t count) {
  const Topology& t = *in.topo;
  const PlannerShape& sh = in.shape;
  const int64_t p = t.nranks;
  const double n = static_cast<double>(bytesIn);
  const double g = in.gamma;
  if (kind == CollKind::AllReduce) {
    return predictAllReduce(in, algo, n, count);
  }
  Candidate c;
  c.algo = algo;
  if (p <= 1) return c;
  const int64_t H = t.nhosts, L = sh.maxLocal;
  const LinkCost& slow = t.singleHost() ? in.intraHost : in.interHost;
  switch (kind) {
    case CollKind::Broadcast:
    case CollKind::Reduce: {
      const double red = kind == CollKind::Reduce ? g : 0;
      if (algo == AlgoId::Tree) {
        for (const StepLoad& l : sh.binomial) c.seconds += stepCost(in, l, n) + n * red;
      } else if (algo == AlgoId::Ring) {
        c.seconds = pipelined(in, p - 1, n, [&](double s) { return stepCost(in, sh.ring, s) + s * red; }, &c.sliceBytes);
      } else if (algo == AlgoId::Hierarchical) {
        // Chains across hosts, then inside each host, slices streaming through both.
        c.seconds = pipelined(in, (H - 1) + (L - 1), n,
                              [&](double s) {
                                return std::max(in.interHost.alpha + s * in.interHost.beta,
                                                in.intraHost.alpha + s * in.intraHost.beta);
                              },
                              &c.sliceBytes);
      }
      break;
    }
    case CollKind::AllGather:
      if (algo == AlgoId::Ring) {
        c.seconds = (p - 1) * stepCost(in, sh.ring, n);
      } else if (algo == AlgoId::Bruck) {
        for (size_t k = 0; k < sh.bruck.size(); ++k) {
          const int64_t blocks = std::min<int64_t>(int64_t{1} << k, p - (int64_t{1} << k));
          c.seconds += stepCost(in, sh.bruck[k], n * blocks);
        }
        c.seconds += p * n * g;  // the final rotation
      } else if (algo == AlgoId::Direct) {
        // Per rank: its block copied into its window once, the p-1 peers' blocks copied out (the
        // ring copies each block twice per hop through a FIFO); every round waits once on the
        // peers' markers and once for the copy in (directAllGatherShape).
        const uint64_t rounds = directAllGatherShape(bytesIn, 1, in.windowHalfBytes).rounds;
        c.seconds = 2 * static_cast<double>(rounds) * in.intraHost.alpha + static_cast<double>(p) * n * g;
      } else if (algo == AlgoId::Hierarchical) {
        c.seconds = (H - 1) * sh.ranksPerNic * (in.interHost.alpha + n * in.interHost.beta) +
                    (L - 1) * (in.intraHost.alpha + H * n * in.intraHost.beta);
      }
      break;
    case CollKind::ReduceScatter:
      if (algo == AlgoId::Ring) {
        c.seconds = (p - 1) * (stepCost(in, sh.ring, n) + n * g);
      } else if (algo == AlgoId::Direct) {
        // Per rank: L-1 blocks copied into its window, one pass reading L blocks; every round
        // waits once on the peers' markers and once for the copies (directReduceScatterShape).
        const uint64_t rounds = directReduceScatterShape(bytesIn, 1, in.windowHalfBytes, static_cast<int32_t>(p)).rounds;
        c.seconds = 2 * static_cast<double>(rounds) * in.intraHost.alpha + static_cast<double>(2 * p - 1) * n * g;
      } else if (algo == AlgoId::Hierarchical) {
        c.seconds = (L - 1) * (in.intraHost.alpha + H * n * (in.intraHost.beta + g)) +
                    (H - 1) * (sh.ranksPerNic * (in.interHost.alpha + n * in.interHost.beta) + n * g);
      }
      break;
    case CollKind::AlltoAll: {
      // Pairwise round k sends r -> r + k: past the first rounds every rank of a host sends
      // across at once, ranksPerNic of them through each NIC (every rank of a busy machine).
      const StepLoad round{L > 1 ? 1 : 0, H > 1 ? static_cast<double>(sh.ranksPerNic) : 0.0,
                           H > 1 ? static_cast<double>(sh.machineRanks) : 0.0};
      c.seconds = (p - 1) * stepCost(in, round, n);
      break;
    }
    case CollKind::Gather:
    case CollKind::Scatter:
      c.seconds = (p - 1) * (slow.alpha + n * slow.beta);
      break;
    case CollKind::Barrier:
      c.seconds = log2Ceil(p) * slow.alpha;
      break;
    default: break;
  }
  return c;
}

double predictRing(const PlannerInputs& in, uint64_t bytes) {
  return predictAllReduce(in, AlgoId::Ring, static_cast<double>(bytes), 0).seconds;
}

double predictDirect(const PlannerInputs& in, uint64_t bytes) {
  return predictAllReduce(in, AlgoId::Direct, static_cast<double>(bytes), 0).seconds;
}

Candidate predictHierarchicalAllReduce(const PlannerInputs& in, AlgoId interHost, uint64_t bytes) {
  return predictAllReduce(in, AlgoId::Hierarchical, static_cast<double>(bytes), 0, interHost);
}

void finalizePlannerInputs(PlannerInputs* in) {
  uint64_t limit = in->haveWindows ? directMaxBytes(in->windowHalfBytes, in->topo->localSize()) : 0;
  if (in->directMaxBytes > 0) limit = std::min(limit, in->directMaxBytes);
  in->directLimit = limit;
  in->filterStatus = parseAlgoFilter(in->forcedAlgo, in->allowed);
  deriveShape(*in, &in->shape);
}

Status checkForcedAlgo(const PlannerInputs& in) {
  if (!in.filterStatus.ok()) return in.filterStatus;
  // A single rank copies its input whatever is forced (split communicators inherit the knob).
  if (in.topo->nranks <= 1) return okStatus();
  for (CollKind k : kPlannedKinds) {
    const AlgoMask allowed = in.allowed[static_cast<int>(k)] & candidateAlgos(k);
    AlgoMask usable = 0, applicable = 0;
    std::string reasons;
    for (int i = 0; i < kAlgoCount; ++i) {
      const AlgoId a = static_cast<AlgoId>(i);
      if ((candidateAlgos(k) & algoBit(a)) == 0) continue;
      std::string why;
      if (algoApplicable(in, k, a, &why)) {
        applicable |= algoBit(a);
        if (allowed & algoBit(a)) usable |= algoBit(a);
      } else if (allowed & algoBit(a)) {
        reasons += "; " + why;
      }
    }
    if (usable == 0) {
      return makeError(collInvalidUsage,
                       "COLL_ALGO=%s leaves %s with no algorithm that can run on this communicator (allowed: %s%s); "
                       "applicable here: %s",
                       in.forcedAlgo.c_str(), collKindName(k), maskNames(allowed).c_str(), reasons.c_str(),
                       maskNames(applicable).c_str());
    }
  }
  return okStatus();
}

// Compressed All-Reduce: the flat two-shot against the hierarchical variant. Per rank, the
// two-shot sends its quantized shards to every other rank and receives as many (2(p-1) messages,
// 2(p-1)/p of the quantized tensor, through a NIC shared by the host's ranks); the hierarchical one
// moves the tensor at full precision inside the host (like a ring reduce-scatter + all-gather)
// and runs the two-shot across hosts on 1/L of it per local rank. Quantizing passes are counted
// as local passes (gamma) over the float32 tensor.
Status planCompressedAllReduce(const PlannerInputs& in, const CollArgs& args, PlanChoice* out) {
  if (!in.filterStatus.ok()) return in.filterStatus;
  const Topology& t = *in.topo;
  const double p = t.nranks, H = t.nhosts, L = in.shape.maxLocal;
  const double es = static_cast<double>(dataTypeSize(args.dtype));
  const double n = static_cast<double>(args.count);
  const double block = args.compress.blockSize > 0 ? args.compress.blockSize : 64;
  const double qBytes = n * (block / 2 + 2) / block;  // the tensor quantized
  const double g = in.gamma;
  auto twoShot = [&](double members, double elems, double q, double flowsPerNic, const LinkCost& link) {
    const double m = members;
    return 2 * (m - 1) * flowsPerNic * link.alpha + 2 * (m - 1) / m * q * flowsPerNic * link.beta +
           4 * elems * 4 * g;  // widen, accumulate, quantize twice, dequantize: about 4 float passes
  };
  const LinkCost& across = t.nhosts > 1 ? in.interHost : in.intraHost;
  AlgoMask mask = in.allowed[static_cast<int>(CollKind::AllReduce)] & (algoBit(AlgoId::TwoShot) | algoBit(AlgoId::Hierarchical));
  if (mask == 0) mask = algoBit(AlgoId::TwoShot) | algoBit(AlgoId::Hierarchical);  // COLL_ALGO named neither
  const bool hierOk = compressedHierarchyApplies(t);
  PlanChoice& c = *out;
  c = PlanChoice{};
  if (mask & algoBit(AlgoId::TwoShot)) {
    Candidate k;
    k.algo = AlgoId::TwoShot;
    k.seconds = twoShot(p, n, qBytes, t.nhosts > 1 ? in.shape.ranksPerNic : 1, across);
    c.candidates[c.ncandidates++] = k;
  }
  if ((mask & algoBit(AlgoId::Hierarchical)) && hierOk) {
    Candidate k;
    k.algo = AlgoId::Hierarchical;
    const double intra = 2 * (L - 1) * in.intraHost.alpha + 2 * (L - 1) / L * n * es * in.intraHost.beta + n * es * g;
    k.seconds = intra + twoShot(H, n / L, qBytes / L, in.shape.ranksPerNic, in.interHost);
    c.candidates[c.ncandidates++] = k;
  }
  if (c.ncandidates == 0) {
    return makeError(collInvalidUsage,
                     "COLL_ALGO=%s allows only hier for compressed All-Reduce, which needs hosts with equal rank counts",
                     in.forcedAlgo.c_str());
  }
  int best = 0;
  for (int i = 1; i < c.ncandidates; ++i) {
    if (c.candidates[i].seconds < c.candidates[best].seconds) best = i;
  }
  c.algo = c.candidates[best].algo;
  c.predictedSeconds = c.candidates[best].seconds;
  return okStatus();
}

Status planCollective(const PlannerInputs& in, const CollArgs& args, PlanChoice* out) {
  if (!in.filterStatus.ok()) return in.filterStatus;
  const uint64_t es = dataTypeSize(args.dtype);
  const uint64_t bytes = args.count * es;
  AlgoMask mask = in.allowed[static_cast<int>(args.kind)] & candidateAlgos(args.kind);
  if (in.topo->nranks <= 1) mask = candidateAlgos(args.kind) & ~algoBit(AlgoId::Direct);
  // Direct past its window runs as rounds (its prediction counts them): measured here it stays
  // 1.2-1.9x faster than the ring on one host at 4-64 MiB (bench/planner_vs_forced.sh 1x8,
  // 4 ranks of allreduce_perf), so it competes at every size.
  PlanChoice& c = *out;
  c = PlanChoice{};
  int best = -1;
  for (int i = 0; i < kAlgoCount; ++i) {
    const AlgoId a = static_cast<AlgoId>(i);
    if ((mask & algoBit(a)) == 0 || !algoApplicable(in, args.kind, a)) continue;
    if (c.ncandidates == PlanChoice::kMaxCandidates) break;
    Candidate cand = predictAlgo(in, args.kind, a, bytes, args.count);
    c.candidates[c.ncandidates] = cand;
    if (best < 0 || cand.seconds < c.candidates[best].seconds) best = c.ncandidates;
    ++c.ncandidates;
  }
  if (best < 0) {
    return makeError(collInvalidUsage, "COLL_ALGO=%s leaves %s with no algorithm that can run on this communicator",
                     in.forcedAlgo.c_str(), collKindName(args.kind));
  }
  const Candidate& w = c.candidates[best];
  c.algo = w.algo;
  c.options = w.options;
  c.sliceBytes = w.sliceBytes;
  c.predictedSeconds = w.seconds;
  if (c.algo == AlgoId::Direct && args.kind == CollKind::AllReduce && in.topo->nranks > 1) {
    c.reduceAllBelowBytes = kReduceAllBelowBytes;
    if (in.directLimit < es) {
      return makeError(collInvalidUsage, "COLL_SHM_WINDOW_BYTES is too small for even one element");
    }
    if (bytes > in.directLimit) c.roundElems = in.directLimit / es;
  }
  return okStatus();
}

Status planAllReduce(const PlannerInputs& in, const CollArgs& args, PlanChoice* out) {
  CollArgs a = args;
  a.kind = CollKind::AllReduce;
  return planCollective(in, a, out);
}

PlanKey planKeyOf(const CollArgs& args, const PlanChoice& choice) {
  PlanKey k{};
  k.kind = args.kind;
  k.count = args.count;
  k.dtype = args.dtype;
  k.op = args.op;
  k.root = args.root;
  k.algo = choice.algo;
  k.interHost = choice.options.interHost;
  k.channels = choice.options.channels;
  for (int i = 0; i < 3; ++i) k.torus[i] = choice.options.torus.d[i];
  k.sliceBytes = choice.sliceBytes;
  k.reduceAllBelowBytes = choice.reduceAllBelowBytes;
  k.quantBlock = args.compress.blockSize;
  return k;
}

std::string describeChoice(AlgoId algo, const AlgoOptions& options, uint64_t sliceBytes) {
  std::string s = algoName(algo);
  auto dims = [](const TorusDims& d) {
    std::string t = std::to_string(d.d[0]);
    for (int i = 1; i < d.ndims; ++i) t += "x" + std::to_string(d.d[i]);
    return t;
  };
  if (algo == AlgoId::Hierarchical) {
    s += std::string("(inter=") + algoName(options.interHost);
    if (options.interHost == AlgoId::Torus) s += " " + dims(options.torus);
    s += ")";
  } else if (algo == AlgoId::Torus) {
    s += "(" + dims(options.torus) + ")";
  }
  if (options.channels > 1) s += " channels " + std::to_string(options.channels);
  if (sliceBytes != 0) {
    s += " chunk " + (sliceBytes % 1024 == 0 ? std::to_string(sliceBytes / 1024) + "K" : std::to_string(sliceBytes));
  }
  return s;
}

const char* dataTypeName(collDataType_t dtype) {
  switch (dtype) {
    case collInt8: return "int8";
    case collUint8: return "uint8";
    case collInt32: return "int32";
    case collUint32: return "uint32";
    case collInt64: return "int64";
    case collUint64: return "uint64";
    case collFloat16: return "float16";
    case collFloat32: return "float32";
    case collFloat64: return "float64";
    case collBfloat16: return "bfloat16";
    case collFloat8e4m3: return "float8e4m3";
    case collFloat8e5m2: return "float8e5m2";
    default: return "?";
  }
}

}  // namespace coll
