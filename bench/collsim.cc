// collsim: the actual schedules of a collective (the planner's choice or a named algorithm) run
// through a flow-level simulation of a cluster fabric (src/sim/flow_sim.h), printed as an
// nccl-tests table with per-link utilisation; --json for scripts.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/perf_colls.h"
#include "bench/perf_data.h"
#include "bench/perf_harness.h"
#include "src/base/config.h"
#include "src/sim/fabric_description.h"
#include "src/sim/fabric_tuner.h"
#include "src/sim/flow_sim.h"

namespace coll {
namespace {

using perf::PerfColl;

struct Options {
  PerfColl coll = PerfColl::AllReduce;
  std::vector<uint64_t> sizes;
  uint64_t minBytes = 1 << 20, maxBytes = 1 << 20, factor = 2;
  collDataType_t dtype = collFloat32;
  sim::CollectiveSim sim;
  std::string mode = "auto";
  std::string jsonPath;
  bool compare = false;
  sim::FabricDescription net;  // the fabric options (as COLL_TOPO_FABRIC), for --compare's tuner
};

// A number >= 0 (the options take no negative values).
bool nonNegative(const char* t, double* out) {
  const std::optional<double> n = parseNumber(t);
  if (!n || *n < 0) return false;
  *out = *n;
  return true;
}

void usage() {
  printf(
      "usage: collsim [options]\n"
      "  Simulates one collective's actual schedules on a cluster fabric (flows sharing links max-min\n"
      "  fairly) and prints an nccl-tests table, the links' utilisation and the busiest links.\n"
      "  -c, --coll NAME        all_reduce, all_gather, reduce_scatter, broadcast, reduce, alltoall\n"
      "  -n, --ranks N          ranks (default 1024)\n"
      "  -g, --per-node N       ranks (GPUs) per node, each with its own NIC (default 8)\n"
      "  -b, -e, -f             min bytes, max bytes, step factor as nccl-tests (default 1M 1M 2)\n"
      "  -d, --dtype TYPE       nccl-tests' type names (default float)\n"
      "  --algo NAME            COLL_ALGO's spelling (default: the planner's choice)\n"
      "  --torus-dims XxY[xZ]   the torus algorithm's grid over ranks, COLL_TORUS_DIMS' spelling\n"
      "  --fabric KIND          nonblocking, fattree2, fattree3, rail, torus, dragonfly (default fattree2)\n"
      "  --nodes N              nodes of the fabric (default: as many as the ranks fill)\n"
      "  --placement P          linear, random[:SEED], file:PATH (a node index per host)\n"
      "  --nic GBPS             NIC bandwidth per rank (default 50)\n"
      "  --intra GBPS           intra-node (NVLink/PCIe) bandwidth per rank (default 200)\n"
      "  --mem GBPS             local copy/reduce bandwidth (default 200)\n"
      "  --alpha-intra US, --alpha-inter US   per-message latency (default 1, 5)\n"
      "  --hop NS               latency per switch or router crossed (default 0)\n"
      "  --slice BYTES          slice where the plan names none (default 128K)\n"
      "  --leaf-ports N         NICs per leaf (rail: nodes per rail leaf) (default 32)\n"
      "  --uplinks N            uplinks per leaf = spines / aggregation switches per pod (default 16)\n"
      "  --oversub X            leaf oversubscription (default 1)\n"
      "  --pod-leaves N         leaves per pod, 3 tiers (default 16)\n"
      "  --agg-uplinks N        core uplinks per aggregation switch (default 16)\n"
      "  --agg-oversub X        aggregation oversubscription (default 1)\n"
      "  --torus XxY[xZ]        torus over nodes (default: balanced); --torus-link GBPS (default 100)\n"
      "  --routers N            dragonfly routers per group (default 8); --nodes-per-router N (default 4)\n"
      "  --local-link GBPS, --global-link GBPS   dragonfly links (default 100, 100)\n"
      "  --routing minimal|valiant               dragonfly routing (default minimal)\n"
      "  --mode auto|exact|symmetric             auto: exact up to --exact-steps steps (default 1e6)\n"
      "  --top N                busiest links listed (default 5)\n"
      "  --work N               stop a run past N units of rate solving (default: no limit)\n"
      "  --compare 1            every applicable algorithm simulated (hier: each split across hosts), the\n"
      "                         model's choice and the fabric tuner's (COLL_TOPO_FABRIC) against the best\n"
      "  --json PATH            also write the results as JSON ('-' = stdout instead of the table)\n");
}

int fail(const char* what, const char* value) {
  fprintf(stderr, "collsim: bad %s '%s' (see --help)\n", what, value);
  return 2;
}

int parseOptions(int argc, char** argv, Options* o) {
  sim::CollectiveSim& s = o->sim;
  s.nranks = 1024;
  sim::FabricDescription& net = o->net;
  net.fabric.kind = sim::FabricKind::FatTree2;
  net.maxWork = 0;
  s.topLinks = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      usage();
      return 0;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "collsim: %s needs a value (see --help)\n", a.c_str());
      return 2;
    }
    const char* v = argv[++i];
    double x = 0;
    auto count = [&](int32_t* out) {
      if (!nonNegative(v, &x) || x < 1 || x > 1e8 || x != static_cast<int32_t>(x)) return false;
      *out = static_cast<int32_t>(x);
      return true;
    };
    if (a == "-c" || a == "--coll") {
      if (!perf::parseColl(v, &o->coll)) return fail("collective", v);
    } else if (a == "-n" || a == "--ranks") {
      if (!nonNegative(v, &x) || x != static_cast<int32_t>(x)) return fail("rank count", v);
      s.nranks = static_cast<int32_t>(x);
    } else if (a == "-g" || a == "--per-node") {
      if (!count(&s.fabric.ranksPerNode)) return fail("ranks per node", v);
    } else if (a == "-b") {
      if (!perf::parseSize(v, &o->minBytes)) return fail("size", v);
    } else if (a == "-e") {
      if (!perf::parseSize(v, &o->maxBytes)) return fail("size", v);
    } else if (a == "-f") {
      if (!perf::parseSize(v, &o->factor) || o->factor < 2) return fail("step factor", v);
    } else if (a == "-d" || a == "--dtype") {
      if (!perf::parseType(v, &o->dtype)) return fail("type", v);
    } else if (a == "--algo") {
      s.algo = v;
    } else if (a == "--torus-dims") {
      s.torusDims = v;
    } else if (a == "--mode") {
      o->mode = v;
      if (o->mode == "auto") s.autoMode = true;
      else if (o->mode == "exact" || o->mode == "symmetric") {
        s.autoMode = false;
        s.params.cost.mode = o->mode == "exact" ? CostMode::Exact : CostMode::Symmetric;
        s.params.cost.maxSteps = 1ull << 31;
      } else return fail("mode", v);
    } else if (a == "--exact-steps") {
      if (!nonNegative(v, &x)) return fail("step count", v);
      s.exactSteps = static_cast<uint64_t>(x);
    } else if (a == "--top") {
      if (!nonNegative(v, &x)) return fail("count", v);
      s.topLinks = static_cast<int32_t>(x);
    } else if (a == "--json") {
      o->jsonPath = v;
    } else if (a == "--compare") {
      if (strcmp(v, "1") != 0 && strcmp(v, "0") != 0) return fail("--compare (0 or 1)", v);
      o->compare = strcmp(v, "1") == 0;
    } else {
      bool known = false;
      const Status st = a.rfind("--", 0) == 0 ? sim::applyFabricOption(a.substr(2), v, &net, &known) : okStatus();
      if (!st.ok()) {
        fprintf(stderr, "collsim: %s\n", st.message().c_str());
        return 2;
      }
      if (!known) {
        fprintf(stderr, "collsim: unknown argument %s (see --help)\n", a.c_str());
        return 2;
      }
    }
  }
  // The fabric options, as COLL_TOPO_FABRIC spells them (src/sim/fabric_description.h).
  const int32_t perNode = s.fabric.ranksPerNode;
  s.fabric = net.fabric;
  s.fabric.ranksPerNode = perNode;
  s.fabricNodes = net.nodes;
  s.placement = net.placement;
  s.params.model = net.model;
  s.params.maxWork = net.maxWork;
  net.exactSteps = s.exactSteps;
  if (s.nranks < 1) {
    fprintf(stderr, "collsim: %d ranks; want at least 1\n", s.nranks);
    return 2;
  }
  for (uint64_t b = o->minBytes; b <= o->maxBytes; b *= o->factor) {
    o->sizes.push_back(b);
    if (b == 0) break;
  }
  return -1;
}

CollKind kindOf(PerfColl c) {
  switch (c) {
    case PerfColl::AllGather: return CollKind::AllGather;
    case PerfColl::ReduceScatter: return CollKind::ReduceScatter;
    case PerfColl::Broadcast: return CollKind::Broadcast;
    case PerfColl::Reduce: return CollKind::Reduce;
    case PerfColl::AlltoAll: return CollKind::AlltoAll;
    default: return CollKind::AllReduce;
  }
}

struct Row {
  uint64_t bytes = 0;
  uint64_t count = 0;
  double us = 0, algbw = 0, busbw = 0;
  double wall = 0;
  sim::CollectiveSimResult r;
};

// --compare: what COLL_TOPO_FABRIC changes. Every algorithm the planner considers, priced by the
// fabric tuner (hierarchical at its fastest split), against the planner's model-only choice.
int runCompare(Options& o) {
  const perf::CollInfo& info = perf::collInfo(o.coll);
  const size_t elt = perf::typeSize(o.dtype);
  const int32_t p = o.sim.nranks;
  const int32_t L = o.sim.fabric.ranksPerNode;
  if (p % L != 0) {
    fprintf(stderr, "collsim: --compare needs whole nodes (%d ranks, %d per node)\n", p, L);
    return 2;
  }
  UniformTopologies topos(p, L);
  const Topology topo0 = topos.at(0);
  std::shared_ptr<const sim::FabricTuner> tuner;
  sim::FabricDescription net = o.net;
  net.fabric.ranksPerNode = L;
  if (net.maxWork == 0) net.maxWork = ~0ull;
  Status st = sim::FabricTuner::make(net, topo0, &tuner);
  if (!st.ok()) {
    fprintf(stderr, "collsim: %s\n", st.message().c_str());
    return 1;
  }
  printf("# collsim --compare: %s, %d ranks, %d per node, fabric %s\n", info.name, p, L,
         sim::describeFabric(net).c_str());
  printf("#%11s  %-34s %12s %12s %8s\n", "size", "algorithm", "model(us)", "sim(us)", "÷best");
  for (uint64_t bytes : o.sizes) {
    const perf::CollShape shape = perf::shapeForBytes(o.coll, bytes, elt, p);
    sim::CollectiveSim cs = o.sim;
    cs.kind = kindOf(o.coll);
    cs.count = shape.count;
    cs.dtype = o.dtype;
    PlannerInputs pin;
    sim::plannerInputsFor(cs, &topo0, &pin);
    const CollArgs args = sim::callArgsFor(cs);
    PlanChoice choice;
    st = planCollective(pin, args, &choice);
    if (!st.ok()) {
      fprintf(stderr, "collsim: %s\n", st.message().c_str());
      return 1;
    }
    std::vector<sim::FabricTuner::Priced> priced;
    std::string why;
    const bool opinion = tuner->priceAll(pin, args, choice.candidates, choice.ncandidates, &priced, &why);
    double best = -1;
    int bestRow = -1;
    for (int i = 0; i < choice.ncandidates; ++i) {
      const sim::FabricTuner::Priced& q = priced[static_cast<size_t>(i)];
      if (q.status.ok() && (best < 0 || q.candidate.seconds < best)) {
        best = q.candidate.seconds;
        bestRow = i;
      }
    }
    for (int i = 0; i < choice.ncandidates; ++i) {
      const sim::FabricTuner::Priced& q = priced[static_cast<size_t>(i)];
      const std::string name = describeChoice(q.candidate.algo, q.candidate.options, 0);
      const double model = choice.candidates[i].seconds * 1e6;
      if (q.status.ok()) {
        printf("%12llu  %-34s %12.2f %12.2f %8.2f\n", static_cast<unsigned long long>(bytes), name.c_str(), model,
               q.candidate.seconds * 1e6, q.candidate.seconds / best);
      } else if (q.lowerBound) {
        printf("%12llu  %-34s %12.2f %12s %8s  # stopped by the work budget\n", static_cast<unsigned long long>(bytes),
               name.c_str(), model, (">" + std::to_string(static_cast<int64_t>(q.candidate.seconds * 1e6))).c_str(),
               "-");
      } else {
        printf("%12llu  %-34s %12.2f %12s %8s  # %s\n", static_cast<unsigned long long>(bytes), name.c_str(), model,
               "-", "-", q.status.message().c_str());
      }
    }
    // The model's own choice as it would run (its split for hier), simulated.
    sim::CollectiveSimResult mr;
    st = sim::simulateCollective(cs, &mr);
    if (st.ok() && best > 0) {
      printf("%12llu  model's choice %s: %.2f us, %.2f x best\n", static_cast<unsigned long long>(bytes),
             mr.algorithm.c_str(), mr.sim.seconds * 1e6, mr.sim.seconds / best);
    } else if (!st.ok()) {
      printf("%12llu  model's choice %s: not simulated (%s)\n", static_cast<unsigned long long>(bytes),
             describeChoice(choice.algo, choice.options, choice.sliceBytes).c_str(), st.message().c_str());
    }
    if (opinion && bestRow >= 0) {
      printf("%12llu  fabric tuner's choice %s: 1.00 x best\n", static_cast<unsigned long long>(bytes),
             describeChoice(priced[static_cast<size_t>(bestRow)].candidate.algo,
                            priced[static_cast<size_t>(bestRow)].candidate.options, 0)
                 .c_str());
    } else {
      printf("%12llu  fabric tuner: no opinion (%s); the model's choice stands\n",
             static_cast<unsigned long long>(bytes), why.c_str());
    }
  }
  return 0;
}

int run(Options& o) {
  const perf::CollInfo& info = perf::collInfo(o.coll);
  if (o.coll == PerfColl::SendRecv || o.coll == PerfColl::Gather || o.coll == PerfColl::Scatter) {
    fprintf(stderr,
            "collsim: %s is not simulated (all_reduce, all_gather, reduce_scatter, broadcast, reduce, alltoall)\n",
            info.name);
    return 2;
  }
  const size_t elt = perf::typeSize(o.dtype);
  const int32_t p = o.sim.nranks;
  std::vector<Row> rows;
  for (uint64_t bytes : o.sizes) {
    const perf::CollShape shape = perf::shapeForBytes(o.coll, bytes, elt, p);
    Row row;
    row.bytes = bytes;
    row.count = shape.count;
    o.sim.kind = kindOf(o.coll);
    o.sim.count = shape.count;
    o.sim.dtype = o.dtype;
    const auto t0 = std::chrono::steady_clock::now();
    const Status st = sim::simulateCollective(o.sim, &row.r);
    row.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!st.ok()) {
      fprintf(stderr, "collsim: %s\n", st.message().c_str());
      return 1;
    }
    row.us = row.r.sim.seconds * 1e6;
    const double algBytes = perf::algBytes(o.coll, shape, elt, p);
    row.algbw = row.r.sim.seconds > 0 ? algBytes / row.r.sim.seconds / 1e9 : 0.0;
    row.busbw = row.algbw * info.busFactor(p);
    rows.push_back(std::move(row));
  }
  const sim::FabricSpec& f = o.sim.fabric;
  const bool tableOut = o.jsonPath != "-";
  if (tableOut) {
    printf(
        "# collsim: %s, %d ranks, %d per node, fabric %s (NIC %.4g GB/s, intra %.4g GB/s, oversubscription %.3g, "
        "hop %.3g ns), placement %s\n",
        info.name, p, f.ranksPerNode, sim::fabricKindName(f.kind), f.nicBytesPerSecond / 1e9,
        f.intraBytesPerSecond / 1e9, f.oversubscription, f.hopSeconds * 1e9,
        o.sim.placement.kind == sim::PlacementKind::Linear   ? "linear"
        : o.sim.placement.kind == sim::PlacementKind::Random ? "random"
                                                             : o.sim.placement.path.c_str());
    printf("#\n# %10s %12s %8s %11s %8s %8s  %-5s %9s  %s\n", "size", "count", "type", "time(us)", "algbw", "busbw",
           "mode", "wall(s)", "algorithm");
    for (const Row& r : rows) {
      printf("  %10llu %12llu %8s %11.1f %8.2f %8.2f  %-5s %9.2f  %s\n", static_cast<unsigned long long>(r.bytes),
             static_cast<unsigned long long>(r.count), perf::typeName(o.dtype), r.us, r.algbw, r.busbw,
             r.r.sim.mode == CostMode::Symmetric ? "sym" : "exact", r.wall, r.r.algorithm.c_str());
    }
    for (const Row& r : rows) {
      printf(
          "#\n# links at %llu bytes (utilisation = bytes / (bandwidth x time); %llu flows, %llu rate solves, %llu "
          "reused)\n",
          static_cast<unsigned long long>(r.bytes), static_cast<unsigned long long>(r.r.sim.flows),
          static_cast<unsigned long long>(r.r.sim.rateSolves), static_cast<unsigned long long>(r.r.sim.rateReuses));
      printf("# %-11s %8s %8s %12s %9s %9s\n", "tier", "links", "used", "GB", "mean", "max");
      for (int t = 0; t < sim::kLinkTiers; ++t) {
        const sim::TierLoad& l = r.r.sim.tiers[t];
        if (l.links == 0) continue;
        printf("# %-11s %8d %8d %12.3f %8.1f%% %8.1f%%\n", sim::linkTierName(static_cast<sim::LinkTier>(t)), l.links,
               l.used, l.bytes / 1e9, l.meanUtil * 100, l.maxUtil * 100);
      }
      if (!r.r.sim.busiest.empty()) printf("# busiest links:");
      for (const sim::LinkLoad& l : r.r.sim.busiest) printf(" %s %.1f%%", l.name.c_str(), l.util * 100);
      if (!r.r.sim.busiest.empty()) printf("\n");
    }
  }
  if (!o.jsonPath.empty()) {
    FILE* out = o.jsonPath == "-" ? stdout : fopen(o.jsonPath.c_str(), "w");
    if (out == nullptr) {
      fprintf(stderr, "collsim: cannot write %s\n", o.jsonPath.c_str());
      return 1;
    }
    fprintf(out, "{\n  \"collective\": \"%s\",\n  \"ranks\": %d,\n  \"ranks_per_node\": %d,\n  \"fabric\": \"%s\",\n",
            info.name, p, f.ranksPerNode, sim::fabricKindName(f.kind));
    fprintf(out, "  \"type\": \"%s\",\n  \"results\": [\n", perf::typeName(o.dtype));
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      fprintf(out,
              "    {\"size\": %llu, \"count\": %llu, \"time_us\": %.4f, \"algbw_gbs\": %.6f, \"busbw_gbs\": %.6f, "
              "\"algorithm\": \"%s\", \"predicted_us\": %.4f, \"mode\": \"%s\", \"ranks_evaluated\": %d, \"steps\": "
              "%llu, \"flows\": %llu, \"wall_s\": %.3f,\n     \"tiers\": [",
              static_cast<unsigned long long>(r.bytes), static_cast<unsigned long long>(r.count), r.us, r.algbw,
              r.busbw, r.r.algorithm.c_str(), r.r.predictedSeconds * 1e6,
              r.r.sim.mode == CostMode::Symmetric ? "symmetric" : "exact", r.r.sim.ranksEvaluated,
              static_cast<unsigned long long>(r.r.sim.steps), static_cast<unsigned long long>(r.r.sim.flows), r.wall);
      bool firstTier = true;
      for (int t = 0; t < sim::kLinkTiers; ++t) {
        const sim::TierLoad& l = r.r.sim.tiers[t];
        if (l.links == 0) continue;
        fprintf(out,
                "%s{\"tier\": \"%s\", \"links\": %d, \"used\": %d, \"bytes\": %.0f, \"mean_util\": %.6f, \"max_util\": "
                "%.6f}",
                firstTier ? "" : ", ", sim::linkTierName(static_cast<sim::LinkTier>(t)), l.links, l.used, l.bytes,
                l.meanUtil, l.maxUtil);
        firstTier = false;
      }
      fprintf(out, "],\n     \"busiest\": [");
      for (size_t k = 0; k < r.r.sim.busiest.size(); ++k) {
        const sim::LinkLoad& l = r.r.sim.busiest[k];
        fprintf(out, "%s{\"link\": \"%s\", \"bytes\": %.0f, \"util\": %.6f}", k ? ", " : "", l.name.c_str(), l.bytes,
                l.util);
      }
      fprintf(out, "]}%s\n", i + 1 < rows.size() ? "," : "");
    }
    fprintf(out, "  ]\n}\n");
    if (out != stdout) fclose(out);
  }
  return 0;
}

}  // namespace
}  // namespace coll

int main(int argc, char** argv) {
  coll::Options o;
  const int rc = coll::parseOptions(argc, argv, &o);
  if (rc >= 0) return rc;
  return o.compare ? coll::runCompare(o) : coll::run(o);
}
