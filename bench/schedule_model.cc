// schedule_model: modelled All-Reduce time of the actual schedules (ring, tree, torus,
// hierarchical, recursive doubling, Rabenseifner) at large rank counts, as the README's markdown
// table with the planner's choice marked. The times come from src/plan/schedule_cost.h.
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/algorithms.h"
#include "src/plan/planner.h"
#include "src/plan/schedule_cost.h"

namespace coll {
namespace {

struct Row {
  const char* name;
  AlgoId algo;
  AlgoId inter;  // Hierarchical only
};

const Row kRows[] = {
    {"ring", AlgoId::Ring, AlgoId::Ring},
    {"tree", AlgoId::Tree, AlgoId::Ring},
    {"torus", AlgoId::Torus, AlgoId::Ring},
    {"hier(ring)", AlgoId::Hierarchical, AlgoId::Ring},
    {"hier(tree)", AlgoId::Hierarchical, AlgoId::Tree},
    {"hier(torus)", AlgoId::Hierarchical, AlgoId::Torus},
    {"hier(recdoubling)", AlgoId::Hierarchical, AlgoId::RecursiveDoubling},
    {"hier(rabenseifner)", AlgoId::Hierarchical, AlgoId::Rabenseifner},
    {"recdoubling", AlgoId::RecursiveDoubling, AlgoId::Ring},
    {"rabenseifner", AlgoId::Rabenseifner, AlgoId::Ring},
};
constexpr int kNumRows = sizeof(kRows) / sizeof(kRows[0]);

struct Options {
  std::vector<int32_t> ranks = {1024, 10240, 102400};
  int32_t perNode = 8;
  std::vector<uint64_t> sizes = {8, 1ull << 20, 64ull << 20, 1ull << 30};
  LinkModel model;
  uint64_t exactSteps = 10'000'000;  // exact evaluation up to this many steps in all
  std::vector<int> rows;             // indices into kRows
  bool counts = false;
  bool predictions = false;  // also print the planner's prediction of every entry
};

bool parseBytes(const std::string& t, uint64_t* out) {
  char* end = nullptr;
  const double v = strtod(t.c_str(), &end);
  if (end == t.c_str() || v < 0) return false;
  double mult = 1;
  switch (*end) {
    case 'k':
    case 'K':
      mult = 1024.0;
      ++end;
      break;
    case 'm':
    case 'M':
      mult = 1024.0 * 1024;
      ++end;
      break;
    case 'g':
    case 'G':
      mult = 1024.0 * 1024 * 1024;
      ++end;
      break;
    default: break;
  }
  if (*end == 'B' || *end == 'b') ++end;
  if (*end != '\0') return false;
  *out = static_cast<uint64_t>(v * mult);
  return true;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    size_t e = s.find(sep, b);
    if (e == std::string::npos) e = s.size();
    out.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

std::string sizeLabel(uint64_t bytes) {
  char buf[32];
  if (bytes >= (1ull << 30) && bytes % (1ull << 30) == 0)
    snprintf(buf, sizeof buf, "%llu GiB", static_cast<unsigned long long>(bytes >> 30));
  else if (bytes >= (1ull << 20) && bytes % (1ull << 20) == 0)
    snprintf(buf, sizeof buf, "%llu MiB", static_cast<unsigned long long>(bytes >> 20));
  else if (bytes >= 1024 && bytes % 1024 == 0)
    snprintf(buf, sizeof buf, "%llu KiB", static_cast<unsigned long long>(bytes >> 10));
  else snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  return buf;
}

std::string timeLabel(double s) {
  char buf[32];
  if (s < 1e-3) snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  else if (s < 1) snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
  else snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

std::string rankLabel(int32_t p) {
  std::string s = std::to_string(p), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

void usage() {
  printf(
      "usage: schedule_model [options]\n"
      "  Modelled All-Reduce time (float32 sum) of the actual schedules, markdown on stdout.\n"
      "  --ranks LIST      rank counts (default 1024,10240,102400)\n"
      "  --per-node N      ranks per node (default 8)\n"
      "  --sizes LIST      message sizes, K/M/G = KiB/MiB/GiB (default 8,1M,64M,1G)\n"
      "  --link A,B,C,D    intra alpha us, intra GB/s per rank, inter alpha us, inter GB/s per rank\n"
      "                    (default 1,200,5,50)\n"
      "  --mem GBPS        local copy/reduce bandwidth (default 200)\n"
      "  --slice BYTES     slice when the schedule names none (default 128K)\n"
      "  --algos LIST      rows: ring,tree,torus,hier(ring),hier(tree),hier(torus),hier(recdoubling),\n"
      "                    hier(rabenseifner),recdoubling,rabenseifner (default all)\n"
      "  --exact-steps N   evaluate exactly up to N steps in all, else by host symmetry (default 1e7)\n"
      "  --counts          also print per-rank step, message and byte counts (maximum over ranks)\n"
      "  --predictions     also print the planner's prediction of every entry and its ratio to the\n"
      "                    schedule model's time\n");
}

int parseOptions(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](std::string* v) {
      if (i + 1 >= argc) {
        fprintf(stderr, "schedule_model: %s needs a value\n", a.c_str());
        return false;
      }
      *v = argv[++i];
      return true;
    };
    std::string v;
    if (a == "-h" || a == "--help") {
      usage();
      return 0;
    } else if (a == "--counts") {
      o->counts = true;
    } else if (a == "--predictions") {
      o->predictions = true;
    } else if (a == "--ranks") {
      if (!value(&v)) return 2;
      o->ranks.clear();
      for (const std::string& t : split(v, ',')) {
        const long r = strtol(t.c_str(), nullptr, 10);
        if (r < 1 || r > 10'000'000) {
          fprintf(stderr, "schedule_model: bad rank count '%s'\n", t.c_str());
          return 2;
        }
        o->ranks.push_back(static_cast<int32_t>(r));
      }
    } else if (a == "--per-node") {
      if (!value(&v)) return 2;
      o->perNode = static_cast<int32_t>(strtol(v.c_str(), nullptr, 10));
      if (o->perNode < 1) {
        fprintf(stderr, "schedule_model: --per-node must be >= 1\n");
        return 2;
      }
    } else if (a == "--sizes") {
      if (!value(&v)) return 2;
      o->sizes.clear();
      for (const std::string& t : split(v, ',')) {
        uint64_t b = 0;
        if (!parseBytes(t, &b) || b == 0) {
          fprintf(stderr, "schedule_model: bad size '%s'\n", t.c_str());
          return 2;
        }
        o->sizes.push_back(b);
      }
    } else if (a == "--link") {
      if (!value(&v)) return 2;
      const auto parts = split(v, ',');
      double x[4];
      bool ok = parts.size() == 4;
      for (size_t k = 0; ok && k < 4; ++k) {
        char* end = nullptr;
        x[k] = strtod(parts[k].c_str(), &end);
        ok = end != parts[k].c_str() && *end == '\0' && x[k] >= 0 && (k % 2 == 0 || x[k] > 0);
      }
      if (!ok) {
        fprintf(stderr, "schedule_model: --link wants intra_alpha_us,intra_GBps,inter_alpha_us,inter_GBps\n");
        return 2;
      }
      o->model.link[0] = LinkParams{x[0] * 1e-6, x[1] * 1e9};
      o->model.link[1] = LinkParams{x[2] * 1e-6, x[3] * 1e9};
    } else if (a == "--mem") {
      if (!value(&v)) return 2;
      o->model.memoryBytesPerSecond = strtod(v.c_str(), nullptr) * 1e9;
      if (!(o->model.memoryBytesPerSecond > 0)) {
        fprintf(stderr, "schedule_model: --mem must be > 0\n");
        return 2;
      }
    } else if (a == "--slice") {
      if (!value(&v)) return 2;
      if (!parseBytes(v, &o->model.defaultSliceBytes) || o->model.defaultSliceBytes == 0) {
        fprintf(stderr, "schedule_model: bad slice '%s'\n", v.c_str());
        return 2;
      }
    } else if (a == "--exact-steps") {
      if (!value(&v)) return 2;
      o->exactSteps = static_cast<uint64_t>(strtod(v.c_str(), nullptr));
    } else if (a == "--algos") {
      if (!value(&v)) return 2;
      for (const std::string& t : split(v, ',')) {
        int found = -1;
        for (int r = 0; r < kNumRows; ++r) {
          if (t == kRows[r].name) found = r;
        }
        if (found < 0) {
          fprintf(stderr, "schedule_model: unknown algorithm '%s' (see --help)\n", t.c_str());
          return 2;
        }
        o->rows.push_back(found);
      }
    } else {
      fprintf(stderr, "schedule_model: unknown argument %s (see --help)\n", a.c_str());
      return 2;
    }
  }
  if (o->rows.empty()) {
    for (int r = 0; r < kNumRows; ++r) o->rows.push_back(r);
  }
  return -1;
}

// The torus over hosts that hierarchical's inter-host phase uses (hosts x 1 rank).
TorusDims hostTorus(int32_t hosts) {
  TorusDims d;
  UniformTopologies t(hosts, 1);
  if (!torusDimsFor(t.at(0), "", &d).ok()) d = TorusDims{};
  return d;
}

struct Entry {
  bool valid = false;
  std::string why;  // when not valid
  double seconds = 0;
  CostMode mode = CostMode::Exact;
  uint64_t asymmetric = 0;
  ScheduleCounts counts;
};

// Model one (row, p, bytes) entry.
Entry evaluate(const Options& o, const Row& row, int32_t p, uint64_t bytes) {
  Entry e;
  const int32_t L = std::min(o.perNode, p);
  const int32_t hosts = (p + L - 1) / L;
  CollArgs args;
  args.kind = CollKind::AllReduce;
  args.count = std::max<uint64_t>(bytes / 4, 1);
  args.dtype = collFloat32;
  args.op = collSum;
  TorusDims flatDims;
  {
    UniformTopologies t(p, L);
    if (row.algo == AlgoId::Torus && !torusDimsFor(t.at(0), "", &flatDims).ok()) {
      e.why = "no torus dims";
      return e;
    }
  }
  AlgoOptions hopt;
  hopt.interHost = row.inter;
  HostSymmetry sym;  // one cycle of hosts
  bool symmetricOk = false;
  if (row.algo == AlgoId::Ring) symmetricOk = true;
  if (row.algo == AlgoId::Torus) symmetricOk = flatDims.d[0] == L && flatDims.product() == p && flatDims.ndims == 2;
  if (row.algo == AlgoId::Hierarchical) {
    if (hosts < 2 || L < 2) {
      e.why = "one host or one rank per host";
      return e;
    }
    if (row.inter == AlgoId::Ring) symmetricOk = true;
    if (row.inter == AlgoId::Torus) {
      hopt.torus = hostTorus(hosts);
      if (hopt.torus.ndims < 2) {
        e.why = "hosts form no grid";
        return e;
      }
      sym.ndims = hopt.torus.ndims;
      for (int i = 0; i < 3; ++i) sym.d[i] = hopt.torus.d[i];
      symmetricOk = true;
    }
  }
  ScheduleBuilder build = [&](const Topology& topo, Schedule* s) {
    switch (row.algo) {
      case AlgoId::Ring: buildRingAllReduce(topo, args, s, 1); break;
      case AlgoId::Tree: buildDoubleBinaryTreeAllReduce(topo, args, s); break;
      case AlgoId::Torus: buildTorusAllReduce(topo, args, flatDims, s); break;
      case AlgoId::Hierarchical: buildHierarchicalAllReduce(topo, args, hopt, s); break;
      case AlgoId::RecursiveDoubling: buildRecursiveDoublingAllReduce(topo, args, s); break;
      case AlgoId::Rabenseifner: buildRabenseifnerAllReduce(topo, args, s); break;
      default: break;
    }
  };
  CostOptions co;
  const uint64_t est = estimateTotalSteps(build, p, L);
  if (est <= o.exactSteps) {
    co.mode = CostMode::Exact;
    co.maxSteps = std::max<uint64_t>(o.exactSteps, co.maxSteps);
  } else if (symmetricOk && p % L == 0) {
    co.mode = CostMode::Symmetric;
    co.symmetry = sym;
    co.maxSteps = 64'000'000;
  } else {
    e.why = "too large for exact (" + std::to_string(est) + " steps), not host-symmetric";
    return e;
  }
  CostResult r;
  const Status st = modelScheduleTime(build, p, L, o.model, co, &r);
  if (!st.ok()) {
    e.why = st.message();
    return e;
  }
  e.valid = true;
  e.seconds = r.seconds;
  e.mode = r.mode;
  e.asymmetric = r.asymmetricTransfers;
  e.counts = r.maxPerRank;
  return e;
}

// Which row the planner's choice is ("" when none of the table's rows).
std::string plannerRow(const PlanChoice& c) {
  for (const Row& r : kRows) {
    if (r.algo != c.algo) continue;
    if (c.algo == AlgoId::Hierarchical && r.inter != c.options.interHost) continue;
    return r.name;
  }
  return "";
}

int run(const Options& o) {
  printf(
      "Modelled All-Reduce time (float32 sum), %d ranks per node; inside a node %.3g us and %.3g GB/s per rank, "
      "across nodes %.3g us and %.3g GB/s per rank; slice %s. Computed by `bench/schedule_model` from the "
      "step and byte counts of the actual schedules (src/plan/schedule_cost.h).\n\n",
      o.perNode, o.model.link[0].alphaSeconds * 1e6, o.model.link[0].bytesPerSecond / 1e9,
      o.model.link[1].alphaSeconds * 1e6, o.model.link[1].bytesPerSecond / 1e9,
      sizeLabel(o.model.defaultSliceBytes).c_str());
  std::vector<std::string> notes;
  std::vector<std::string> countLines;
  for (int32_t p : o.ranks) {
    const int32_t L = std::min(o.perNode, p);
    // Planner inputs with the same links: a NIC per rank (the schedule model gives every rank its
    // own port of each class), reductions beside transfers (as the schedule model runs them), and
    // the pure model (no factors measured on another machine).
    UniformTopologies topos(p, L);
    Topology topo0 = topos.at(0);
    PlannerInputs in;
    in.topo = &topo0;
    in.haveWindows = true;
    in.windowHalfBytes = 4u << 20;
    in.intraHost = LinkCost{o.model.link[0].alphaSeconds, 1.0 / o.model.link[0].bytesPerSecond};
    in.interHost = LinkCost{o.model.link[1].alphaSeconds, 1.0 / o.model.link[1].bytesPerSecond};
    in.nicsPerHost = 0;
    in.implementationFactors = false;
    in.reductionOverlaps = true;
    in.gamma = 1.0 / o.model.memoryBytesPerSecond;
    finalizePlannerInputs(&in);

    std::vector<std::vector<Entry>> grid(o.rows.size(), std::vector<Entry>(o.sizes.size()));
    std::vector<std::string> planned(o.sizes.size());
    std::vector<PlanChoice> choices(o.sizes.size());
    for (size_t si = 0; si < o.sizes.size(); ++si) {
      CollArgs args;
      args.kind = CollKind::AllReduce;
      args.count = std::max<uint64_t>(o.sizes[si] / 4, 1);
      args.dtype = collFloat32;
      args.op = collSum;
      int dummy = 0;
      args.sendbuff = &dummy;
      args.recvbuff = &dummy;
      if (planAllReduce(in, args, &choices[si]).ok()) planned[si] = plannerRow(choices[si]);
      for (size_t ri = 0; ri < o.rows.size(); ++ri) {
        const auto t0 = std::chrono::steady_clock::now();
        grid[ri][si] = evaluate(o, kRows[o.rows[ri]], p, o.sizes[si]);
        const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        fprintf(stderr, "schedule_model: p=%d %s %s: %s (%.1f s)\n", p, kRows[o.rows[ri]].name,
                sizeLabel(o.sizes[si]).c_str(),
                grid[ri][si].valid ? timeLabel(grid[ri][si].seconds).c_str() : grid[ri][si].why.c_str(), wall);
      }
    }
    printf("**%s ranks** (%s nodes)\n\n| algorithm |", rankLabel(p).c_str(), rankLabel((p + L - 1) / L).c_str());
    for (uint64_t b : o.sizes) printf(" %s |", sizeLabel(b).c_str());
    printf("\n|---|");
    for (size_t si = 0; si < o.sizes.size(); ++si) printf("---:|");
    printf("\n");
    std::vector<int> best(o.sizes.size(), -1);
    for (size_t si = 0; si < o.sizes.size(); ++si) {
      for (size_t ri = 0; ri < o.rows.size(); ++ri) {
        if (grid[ri][si].valid && (best[si] < 0 || grid[ri][si].seconds < grid[best[si]][si].seconds)) {
          best[si] = static_cast<int>(ri);
        }
      }
    }
    for (size_t ri = 0; ri < o.rows.size(); ++ri) {
      printf("| %s |", kRows[o.rows[ri]].name);
      for (size_t si = 0; si < o.sizes.size(); ++si) {
        const Entry& e = grid[ri][si];
        if (!e.valid) {
          printf(" n/a |");
          continue;
        }
        const bool chosen = planned[si] == kRows[o.rows[ri]].name;
        std::string cell = timeLabel(e.seconds);
        if (e.mode == CostMode::Symmetric) cell.insert(cell.begin(), '~');
        if (static_cast<int>(ri) == best[si]) cell += " ✓";
        if (chosen) cell = "**" + cell + "**";
        printf(" %s |", cell.c_str());
      }
      printf("\n");
      if (o.counts) {
        for (size_t si = 0; si < o.sizes.size(); ++si) {
          const Entry& e = grid[ri][si];
          if (!e.valid) continue;
          char line[320];
          snprintf(line, sizeof line, "| %s | %s | %s | %llu | %llu | %llu | %llu | %llu |", rankLabel(p).c_str(),
                   kRows[o.rows[ri]].name, sizeLabel(o.sizes[si]).c_str(),
                   static_cast<unsigned long long>(e.counts.steps),
                   static_cast<unsigned long long>(e.counts.messages[0]),
                   static_cast<unsigned long long>(e.counts.messages[1]),
                   static_cast<unsigned long long>(e.counts.bytesSent[0]),
                   static_cast<unsigned long long>(e.counts.bytesSent[1]));
          countLines.push_back(line);
        }
      }
    }
    // How much the planner's choice costs against the schedule model's best, per column.
    printf("| *planner's choice ÷ best* |");
    for (size_t si = 0; si < o.sizes.size(); ++si) {
      double chosen = -1;
      for (size_t ri = 0; ri < o.rows.size(); ++ri) {
        if (planned[si] == kRows[o.rows[ri]].name && grid[ri][si].valid) chosen = grid[ri][si].seconds;
      }
      if (chosen < 0 || best[si] < 0) printf(" n/a |");
      else printf(" %.2f |", chosen / grid[best[si]][si].seconds);
    }
    printf("\n\n");
    if (o.predictions) {
      printf("Planner's prediction (schedule model ÷ prediction), %s ranks:\n\n| algorithm |", rankLabel(p).c_str());
      for (uint64_t b : o.sizes) printf(" %s |", sizeLabel(b).c_str());
      printf("\n|---|");
      for (size_t si = 0; si < o.sizes.size(); ++si) printf("---:|");
      printf("\n");
      for (size_t ri = 0; ri < o.rows.size(); ++ri) {
        const Row& row = kRows[o.rows[ri]];
        printf("| %s |", row.name);
        for (size_t si = 0; si < o.sizes.size(); ++si) {
          Candidate c;
          c.seconds = -1;
          if (row.algo == AlgoId::Hierarchical) {
            if (algoApplicable(in, CollKind::AllReduce, row.algo))
              c = predictHierarchicalAllReduce(in, row.inter, o.sizes[si]);
          } else if (algoApplicable(in, CollKind::AllReduce, row.algo)) {
            c = predictAlgo(in, CollKind::AllReduce, row.algo, o.sizes[si]);
          }
          const Entry& e = grid[ri][si];
          if (c.seconds < 0) printf(" n/a |");
          else if (!e.valid) printf(" %s |", timeLabel(c.seconds).c_str());
          else printf(" %s (%.2f) |", timeLabel(c.seconds).c_str(), c.seconds > 0 ? e.seconds / c.seconds : 0.0);
        }
        printf("\n");
      }
      printf("\n");
    }
    for (size_t si = 0; si < o.sizes.size(); ++si) {
      const PlanChoice& c = choices[si];
      const std::string what = describeChoice(c.algo, c.options, c.sliceBytes);
      if (planned[si].empty()) {
        notes.push_back(rankLabel(p) + " ranks, " + sizeLabel(o.sizes[si]) + ": the planner picks " + what +
                        ", which is not a row of the table");
        continue;
      }
      if (best[si] < 0 || planned[si] == kRows[o.rows[best[si]]].name) continue;
      double plannedSeconds = -1;
      for (size_t ri = 0; ri < o.rows.size(); ++ri) {
        if (planned[si] == kRows[o.rows[ri]].name && grid[ri][si].valid) plannedSeconds = grid[ri][si].seconds;
      }
      char ratio[48] = "";
      if (plannedSeconds > 0)
        snprintf(ratio, sizeof ratio, ": %.2fx slower", plannedSeconds / grid[best[si]][si].seconds);
      char buf[400];
      snprintf(buf, sizeof buf,
               "%s ranks, %s: the planner picks %s (its prediction %s; schedule model %s), the schedule model's "
               "best is %s (%s)%s",
               rankLabel(p).c_str(), sizeLabel(o.sizes[si]).c_str(), what.c_str(),
               timeLabel(c.predictedSeconds).c_str(), plannedSeconds < 0 ? "n/a" : timeLabel(plannedSeconds).c_str(),
               kRows[o.rows[best[si]]].name, timeLabel(grid[best[si]][si].seconds).c_str(), ratio);
      notes.push_back(buf);
    }
  }
  printf(
      "Legend: **bold** = the planner's choice (planAllReduce with the same link parameters, one NIC per rank "
      "(COLL_LINK_NICS_PER_HOST=0), reductions overlapping transfers and no implementation factors); ✓ = fastest in "
      "the schedule model; "
      "~ = evaluated by host symmetry (host 0's ranks; every other host in lockstep), otherwise exact (every "
      "rank, every message); n/a = not applicable or too large to evaluate.\n");
  if (!notes.empty()) {
    printf("\nWhere the planner disagrees with the schedule model:\n\n");
    for (const std::string& n : notes) printf("- %s\n", n.c_str());
  }
  if (!countLines.empty()) {
    printf(
        "\nPer-rank counts (maximum over evaluated ranks):\n\n| ranks | algorithm | size | steps | messages in "
        "node | messages across | bytes sent in node | bytes sent across |\n|---|---|---|---:|---:|---:|---:|---:|\n");
    for (const std::string& l : countLines) printf("%s\n", l.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace coll

int main(int argc, char** argv) {
  coll::Options o;
  const int rc = coll::parseOptions(argc, argv, &o);
  if (rc >= 0) return rc;
  return coll::run(o);
}
