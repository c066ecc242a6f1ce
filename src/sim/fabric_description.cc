// Parsing of fabric descriptions (see fabric_description.h).
#include "src/sim/fabric_description.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include "src/base/config.h"

namespace coll::sim {
namespace {

Status bad(const std::string& key, const std::string& value, const char* want) {
  return makeError(collInvalidArgument, "fabric option %s=%s: want %s", key.c_str(), value.c_str(), want);
}

// Comma-separated items; the first may be a bare fabric kind.
Status applyItems(const std::string& items, FabricDescription* d) {
  std::stringstream in(items);
  std::string item;
  bool first = true;
  while (std::getline(in, item, ',')) {
    item = trimSpace(item);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    std::string key, value;
    if (eq == std::string::npos) {
      if (!first) {
        return makeError(collInvalidArgument, "fabric description: '%s' is not key=value", item.c_str());
      }
      key = "fabric";
      value = item;
    } else {
      key = trimSpace(item.substr(0, eq));
      value = trimSpace(item.substr(eq + 1));
    }
    first = false;
    bool known = false;
    COLL_TRY(applyFabricOption(key, value, d, &known));
    if (!known) {
      return makeError(collInvalidArgument,
                       "fabric description: unknown key '%s' (fabric, nodes, placement, nic, intra, mem, alpha-intra, "
                       "alpha-inter, hop, slice, leaf-ports, uplinks, oversub, pod-leaves, agg-uplinks, agg-oversub, "
                       "torus, torus-link, routers, nodes-per-router, local-link, global-link, routing, exact-steps, "
                       "work)",
                       key.c_str());
    }
  }
  return okStatus();
}

}  // namespace

Status applyFabricOption(const std::string& key, const std::string& value, FabricDescription* d, bool* known) {
  *known = true;
  FabricSpec& f = d->fabric;
  double x = 0;
  auto number = [](const std::string& v, double* out) {
    const std::optional<double> n = parseNumber(v);
    if (n) *out = *n;
    return n.has_value();
  };
  auto gbps = [&](double* out) {
    if (!number(value, &x) || x <= 0) return bad(key, value, "a positive bandwidth in GB/s");
    *out = x * 1e9;
    return okStatus();
  };
  auto count = [&](int32_t* out) {
    if (!number(value, &x) || x < 1 || x > 1e8 || x != static_cast<int32_t>(x)) {
      return bad(key, value, "a whole number from 1");
    }
    *out = static_cast<int32_t>(x);
    return okStatus();
  };
  auto budget = [&](uint64_t* out) {
    if (!number(value, &x) || x < 1 || x > 1e18) return bad(key, value, "a count from 1");
    *out = static_cast<uint64_t>(x);
    return okStatus();
  };
  if (key == "fabric") return parseFabricKind(value, &f.kind);
  if (key == "nodes") return count(&d->nodes);
  if (key == "placement") return parsePlacement(value, &d->placement);
  if (key == "nic") return gbps(&f.nicBytesPerSecond);
  if (key == "intra") return gbps(&f.intraBytesPerSecond);
  if (key == "mem") return gbps(&d->model.memoryBytesPerSecond);
  if (key == "torus-link") return gbps(&f.torusLinkBytesPerSecond);
  if (key == "local-link") return gbps(&f.localLinkBytesPerSecond);
  if (key == "global-link") return gbps(&f.globalLinkBytesPerSecond);
  if (key == "alpha-intra" || key == "alpha-inter") {
    if (!number(value, &x) || x < 0) return bad(key, value, "a latency in microseconds");
    d->model.link[key == "alpha-intra" ? 0 : 1].alphaSeconds = x * 1e-6;
    return okStatus();
  }
  if (key == "hop") {
    if (!number(value, &x) || x < 0) return bad(key, value, "a latency in nanoseconds");
    f.hopSeconds = x * 1e-9;
    return okStatus();
  }
  if (key == "slice") {
    const std::optional<uint64_t> b = parseBytes(value);
    if (!b || *b == 0) return bad(key, value, "a size in bytes (128K)");
    d->model.defaultSliceBytes = *b;
    return okStatus();
  }
  if (key == "leaf-ports") return count(&f.leafPorts);
  if (key == "uplinks") return count(&f.leafUplinks);
  if (key == "pod-leaves") return count(&f.podLeaves);
  if (key == "agg-uplinks") return count(&f.aggUplinks);
  if (key == "routers") return count(&f.routersPerGroup);
  if (key == "nodes-per-router") return count(&f.nodesPerRouter);
  if (key == "oversub" || key == "agg-oversub") {
    if (!number(value, &x) || x <= 0) return bad(key, value, "a positive oversubscription (2 = half the uplink rate)");
    (key == "oversub" ? f.oversubscription : f.aggOversubscription) = x;
    return okStatus();
  }
  if (key == "torus") {
    int t[3] = {0, 0, 0};
    char tail = 0;
    const int n = sscanf(value.c_str(), "%dx%dx%d%c", &t[0], &t[1], &t[2], &tail);
    if (n < 2 || n > 3 || t[0] < 1 || t[1] < 1 || (n == 3 && t[2] < 1)) return bad(key, value, "XxY or XxYxZ");
    for (int k = 0; k < 3; ++k) f.torusDims[k] = n > k ? t[k] : 0;
    return okStatus();
  }
  if (key == "routing") {
    if (value != "minimal" && value != "valiant") return bad(key, value, "minimal or valiant");
    f.valiant = value == "valiant";
    return okStatus();
  }
  if (key == "exact-steps") return budget(&d->exactSteps);
  if (key == "work") return budget(&d->maxWork);
  *known = false;
  return okStatus();
}

Status parseFabricDescription(const std::string& text, FabricDescription* d) {
  const std::string t = trimSpace(text);
  if (t.empty()) return makeError(collInvalidArgument, "fabric description is empty");
  if (t[0] != '@') return applyItems(t, d);
  std::ifstream file(t.substr(1));
  if (!file) return makeError(collInvalidArgument, "fabric description file '%s' cannot be read", t.c_str() + 1);
  std::stringstream all;
  all << file.rdbuf();
  // Comments run to the end of their line, so strip them before lines become items.
  std::stringstream lines(all.str());
  std::string line, joined;
  while (std::getline(lines, line)) {
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    joined += line + ",";
  }
  return applyItems(joined, d);
}

std::string describeFabric(const FabricDescription& d) {
  const FabricSpec& f = d.fabric;
  char buf[256];
  snprintf(buf, sizeof buf, "%s, NIC %.4g GB/s, intra %.4g GB/s, oversubscription %.3g, placement %s",
           fabricKindName(f.kind), f.nicBytesPerSecond / 1e9, f.intraBytesPerSecond / 1e9, f.oversubscription,
           d.placement.kind == PlacementKind::Linear   ? "linear"
           : d.placement.kind == PlacementKind::Random ? "random"
                                                       : d.placement.path.c_str());
  return buf;
}

}  // namespace coll::sim
