// Planner implementation: derives the model's inputs once, parses COLL_ALGO's filter, and picks
// algorithm, options and chunk per call by asking every registered algorithm (algorithms/registry.h)
// whether it applies and what it predicts. Formulas: docs/ARCHITECTURE.md.
#include "src/plan/planner.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "algorithms/algorithms.h"
#include "algorithms/model.h"
#include "algorithms/registry.h"
#include "src/base/config.h"
#include "src/schedule/schedule.h"

namespace coll {

namespace {

constexpr CollKind kPlannedKinds[] = {CollKind::AllReduce, CollKind::Broadcast,     CollKind::Reduce,
                                      CollKind::AllGather, CollKind::ReduceScatter, CollKind::AlltoAll,
                                      CollKind::Gather,    CollKind::Scatter,       CollKind::Barrier};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string maskNames(AlgoMask mask) {
  std::string out;
  for (int i = 0; i < algoCount(); ++i) {
    if ((mask & algoBit(algoIdAt(i))) == 0) continue;
    if (!out.empty()) out += ", ";
    out += algoName(algoIdAt(i));
  }
  return out.empty() ? "none" : out;
}

// Every algorithm's name, in registry order (COLL_ALGO's error messages).
std::string allAlgoNames() {
  std::string out;
  for (const AlgorithmDescriptor* d : allAlgorithms()) out += std::string(out.empty() ? "" : ", ") + d->name;
  return out;
}

// Counts how one round of transfers loads the links.
class LoadCounter {
 public:
  // nicOfRank: the NIC (0 .. nics-1 over all hosts) each rank's inter-host traffic uses.
  // busyMachine: the machine whose CPUs the transfers across hosts are counted on (-1: none).
  LoadCounter(const Topology& t, const std::vector<int32_t>& nicOfRank, int32_t nics, int32_t busyMachine)
      : t_(t),
        nicOf_(nicOfRank),
        busyMachine_(busyMachine),
        out_(static_cast<size_t>(nics)),
        in_(static_cast<size_t>(nics)),
        perRank_(static_cast<size_t>(t.nranks)) {}
  void add(int32_t src, int32_t dst) {
    if (src == dst) return;
    const int32_t hs = t_.hostOfRank[static_cast<size_t>(src)], hd = t_.hostOfRank[static_cast<size_t>(dst)];
    if (hs == hd) {
      int32_t& n = perRank_[static_cast<size_t>(src)];
      load_.intraPerRank = std::max(load_.intraPerRank, ++n);
    } else {
      load_.interPerNic =
          std::max<double>(load_.interPerNic, ++out_[static_cast<size_t>(nicOf_[static_cast<size_t>(src)])]);
      load_.interPerNic =
          std::max<double>(load_.interPerNic, ++in_[static_cast<size_t>(nicOf_[static_cast<size_t>(dst)])]);
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
    for (int64_t i = 0; i < std::min<int64_t>(d, p - d); ++i)
      c.add(static_cast<int32_t>(i), static_cast<int32_t>(i + d));
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

}  // namespace

bool isUniformBlocks(const Topology& t) {
  if (t.nranks <= 0 || t.nhosts <= 0 || t.nranks % t.nhosts != 0) return false;
  const int32_t per = t.nranks / t.nhosts;
  for (int32_t r = 0; r < t.nranks; ++r) {
    if (t.hostOfRank[static_cast<size_t>(r)] != r / per) return false;
  }
  return true;
}

// ---- COLL_ALGO

AlgoMask candidateAlgos(CollKind kind) {
  AlgoMask mask = 0;
  for (int i = 0; i < algoCount(); ++i) {
    if (allAlgorithms()[i]->serves & collBit(kind)) mask |= algoBit(algoIdAt(i));
  }
  return mask;
}

Status parseAlgoFilter(const std::string& text, AlgoMask allowed[kCollKindCount]) {
  for (int k = 0; k < kCollKindCount; ++k) allowed[k] = candidateAlgos(static_cast<CollKind>(k));
  std::string rest = text;
  while (!rest.empty()) {
    const size_t semi = rest.find(';');
    const std::string section = trimSpace(rest.substr(0, semi));
    rest = semi == std::string::npos ? "" : rest.substr(semi + 1);
    if (section.empty()) continue;
    const size_t colon = section.find(':');
    bool perColl = colon != std::string::npos;
    CollKind kind = CollKind::AllReduce;
    if (perColl) {
      const std::string name = lower(trimSpace(section.substr(0, colon)));
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
    std::string list = trimSpace(perColl ? section.substr(colon + 1) : section);
    const bool exclude = !list.empty() && list[0] == '^';
    if (exclude) list = trimSpace(list.substr(1));
    AlgoMask named = 0;
    while (true) {
      const size_t comma = list.find(',');
      const std::string name = lower(trimSpace(list.substr(0, comma)));
      AlgoId a;
      if (!algoFromName(name, &a)) {
        return makeError(collInvalidUsage, "COLL_ALGO=%s: unknown algorithm '%s' (known: %s)", text.c_str(),
                         name.c_str(), allAlgoNames().c_str());
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
  const AlgorithmDescriptor& d = algorithm(algo);
  if ((d.serves & collBit(kind)) == 0) {
    return notApplicable(why, [&] { return std::string(d.name) + " does not implement " + collKindName(kind); });
  }
  return d.applies == nullptr || d.applies(in, kind, why);
}

Candidate predictAlgo(const PlannerInputs& in, CollKind kind, AlgoId algo, uint64_t bytes, uint64_t count) {
  const AlgorithmDescriptor& d = algorithm(algo);
  Candidate c;
  if (in.topo->nranks > 1) c = d.predict(in, kind, bytes, count);
  c.algo = algo;
  if (kind == CollKind::AllReduce) {
    c.seconds = withImplementationFactor(in, d.allReduceFactor, c.seconds,
                                         [&] { return d.predict(in, kind, 0, count).seconds; });
  }
  return c;
}

double predictRing(const PlannerInputs& in, uint64_t bytes) {
  return predictAlgo(in, CollKind::AllReduce, AlgoId::Ring, bytes).seconds;
}

double predictDirect(const PlannerInputs& in, uint64_t bytes) {
  return predictAlgo(in, CollKind::AllReduce, AlgoId::Direct, bytes).seconds;
}

Candidate predictHierarchicalAllReduce(const PlannerInputs& in, AlgoId interHost, uint64_t bytes) {
  Candidate c;
  if (in.topo->nranks > 1) c = hierarchicalModel(in, CollKind::AllReduce, bytes, 0, interHost);
  c.algo = AlgoId::Hierarchical;
  c.seconds = withImplementationFactor(in, algorithm(AlgoId::Hierarchical).allReduceFactor, c.seconds, [&] {
    return hierarchicalModel(in, CollKind::AllReduce, 0, 0, interHost).seconds;
  });
  return c;
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
    for (int i = 0; i < algoCount(); ++i) {
      const AlgoId a = algoIdAt(i);
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

// Compressed All-Reduce: the algorithms with a compressed model (the two-shot and its
// hierarchical variant), those COLL_ALGO's allreduce section names, or all of them when it names none.
Status planCompressedAllReduce(const PlannerInputs& in, const CollArgs& args, PlanChoice* out) {
  if (!in.filterStatus.ok()) return in.filterStatus;
  AlgoMask compressed = 0;
  for (int i = 0; i < algoCount(); ++i) {
    if (allAlgorithms()[i]->predictCompressed != nullptr) compressed |= algoBit(algoIdAt(i));
  }
  AlgoMask mask = in.allowed[static_cast<int>(CollKind::AllReduce)] & compressed;
  if (mask == 0) mask = compressed;
  PlanChoice& c = *out;
  c = PlanChoice{};
  for (int i = 0; i < algoCount(); ++i) {
    const AlgoId a = algoIdAt(i);
    if ((mask & algoBit(a)) == 0) continue;
    Candidate k;
    k.algo = a;
    k.seconds = algorithm(a).predictCompressed(in, args);
    if (k.seconds >= 0) c.candidates[c.ncandidates++] = k;
  }
  if (c.ncandidates == 0) {
    return makeError(collInvalidUsage,
                     "COLL_ALGO=%s allows only %s for compressed All-Reduce, which cannot run on this communicator "
                     "(hier needs hosts with equal rank counts)",
                     in.forcedAlgo.c_str(), maskNames(mask).c_str());
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
  // A single rank copies its input whatever is forced (split communicators inherit the knob).
  if (in.topo->nranks <= 1) mask = candidateAlgos(args.kind);
  // Direct past its window runs as rounds (its prediction counts them): measured here it stays
  // 1.2-1.9x faster than the ring on one host at 4-64 MiB (bench/planner_vs_forced.sh 1x8,
  // 4 ranks of allreduce_perf), so it competes at every size.
  PlanChoice& c = *out;
  c = PlanChoice{};
  int best = -1;
  for (int i = 0; i < algoCount(); ++i) {
    const AlgoId a = algoIdAt(i);
    if ((mask & algoBit(a)) == 0 || !algoApplicable(in, args.kind, a)) continue;
    if (c.ncandidates == PlanChoice::kMaxCandidates) break;
    c.candidates[c.ncandidates++] = predictAlgo(in, args.kind, a, bytes, args.count);
  }
  if (c.ncandidates == 0) {
    return makeError(collInvalidUsage, "COLL_ALGO=%s leaves %s with no algorithm that can run on this communicator",
                     in.forcedAlgo.c_str(), collKindName(args.kind));
  }
  if (in.tuner != nullptr && in.topo->nranks > 1) {
    Candidate tuned[PlanChoice::kMaxCandidates];
    std::copy(c.candidates, c.candidates + c.ncandidates, tuned);
    if (in.tuner->tune(in, args, tuned, c.ncandidates)) {
      std::copy(tuned, tuned + c.ncandidates, c.candidates);
      c.tuned = true;
    }
  }
  for (int i = 0; i < c.ncandidates; ++i) {
    if (best < 0 || c.candidates[i].seconds < c.candidates[best].seconds) best = i;
  }
  const Candidate& w = c.candidates[best];
  c.algo = w.algo;
  c.options = w.options;
  c.sliceBytes = w.sliceBytes;
  c.predictedSeconds = w.seconds;
  const AlgorithmDescriptor& chosen = algorithm(c.algo);
  if (chosen.shapeCall != nullptr && in.topo->nranks > 1) {
    CallShape shape;
    const Status st = chosen.shapeCall(in, args, &shape);
    c.reduceAllBelowBytes = shape.reduceAllBelowBytes;
    c.roundElems = shape.roundElems;
    COLL_TRY(st);
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
  k.fabricHostOrder = choice.options.fabricHostOrder;
  return k;
}

std::vector<int32_t> ranksInHostOrder(const std::vector<int32_t>& hostOrder, int32_t ranksPerHost) {
  std::vector<int32_t> rankOf;
  rankOf.reserve(hostOrder.size() * static_cast<size_t>(ranksPerHost));
  for (int32_t host : hostOrder) {
    for (int32_t i = 0; i < ranksPerHost; ++i) rankOf.push_back(host * ranksPerHost + i);
  }
  return rankOf;
}

std::vector<int32_t> ranksInLocalOrder(const Topology& topo, const std::vector<int32_t>& ringKeys) {
  const size_t n = static_cast<size_t>(topo.nranks);
  if (ringKeys.size() != n) return {};
  std::vector<std::vector<int32_t>> byHost(static_cast<size_t>(topo.nhosts));
  for (int32_t r = 0; r < topo.nranks; ++r)
    byHost[static_cast<size_t>(topo.hostOfRank[static_cast<size_t>(r)])].push_back(r);
  std::vector<int32_t> rankOf(n);
  bool moved = false;
  for (const std::vector<int32_t>& places : byHost) {
    std::vector<int32_t> ordered = places;  // ascending: the host's places in rank order
    std::stable_sort(ordered.begin(), ordered.end(), [&](int32_t a, int32_t b) {
      const int32_t ka = ringKeys[static_cast<size_t>(a)], kb = ringKeys[static_cast<size_t>(b)];
      if ((ka < 0) != (kb < 0)) return ka >= 0;
      return ka < kb;
    });
    for (size_t k = 0; k < places.size(); ++k) {
      rankOf[static_cast<size_t>(places[k])] = ordered[k];
      moved = moved || ordered[k] != places[k];
    }
  }
  return moved ? rankOf : std::vector<int32_t>{};
}

std::string describeChoice(AlgoId algo, const AlgoOptions& options, uint64_t sliceBytes) {
  std::string s = algoName(algo);
  if (static_cast<int>(algo) < algoCount() && algorithm(algo).describeOptions != nullptr) {
    s += algorithm(algo).describeOptions(options);
  }
  if (options.channels > 1) s += " channels " + std::to_string(options.channels);
  if (options.fabricHostOrder) s += " hosts in fabric order";
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
