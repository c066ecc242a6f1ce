// Placement choices over a node's topology (see placement.h).
#include "src/topo/placement.h"

#include <algorithm>
#include <functional>
#include <iterator>
#include <numeric>

namespace coll {

const char* pathTypeName(PathType type) {
  switch (type) {
    case PathType::Pix: return "PIX";
    case PathType::Pxb: return "PXB";
    case PathType::Phb: return "PHB";
    case PathType::Node: return "NODE";
    case PathType::Sys: return "SYS";
  }
  return "?";
}

namespace {

// `i` and its ancestors, from `i` up to its host bridge.
std::vector<int32_t> chainUp(const HwTopology& topo, int32_t i) {
  std::vector<int32_t> chain;
  for (; i >= 0; i = topo.pci[static_cast<size_t>(i)].parent) chain.push_back(i);
  return chain;
}

// Between two host bridges (or the CPU side of two places).
PathType betweenRoots(const HwPciNode& a, const HwPciNode& b) {
  if (a.numa >= 0 && a.numa == b.numa) return PathType::Node;
  if ((a.numa < 0 || b.numa < 0) && a.socket >= 0 && a.socket == b.socket) return PathType::Node;
  return PathType::Sys;
}

// The NUMA nodes (indexes) that `cpus` touch; all of them for an empty set.
std::vector<int32_t> numaOfCpus(const HwTopology& topo, const std::vector<int32_t>& cpus) {
  std::vector<int32_t> nodes;
  if (cpus.empty()) {
    nodes.resize(topo.numa.size());
    std::iota(nodes.begin(), nodes.end(), 0);
    return nodes;
  }
  for (int32_t c : cpus) {
    int32_t n = topo.numaOfCpu(c);
    if (n >= 0 && std::find(nodes.begin(), nodes.end(), n) == nodes.end()) nodes.push_back(n);
  }
  return nodes;
}

}  // namespace

PathType pciPath(const HwTopology& topo, int32_t a, int32_t b) {
  std::vector<int32_t> up = chainUp(topo, a), down = chainUp(topo, b);
  if (up.back() != down.back()) {
    return betweenRoots(topo.pci[static_cast<size_t>(up.back())], topo.pci[static_cast<size_t>(down.back())]);
  }
  // The lowest common ancestor, and how many links each side climbs to it.
  size_t da = 0, db = 0;
  for (da = 0; da < up.size(); ++da) {
    auto it = std::find(down.begin(), down.end(), up[da]);
    if (it != down.end()) {
      db = static_cast<size_t>(it - down.begin());
      break;
    }
  }
  int32_t common = up[da];
  if (topo.pci[static_cast<size_t>(common)].kind == PciKind::HostBridge) return PathType::Phb;
  // Device -> downstream port -> upstream port is one switch; more is several.
  return std::max(da, db) <= 2 ? PathType::Pix : PathType::Pxb;
}

RankPlace rankPlace(const HwTopology& topo, const std::string& gpuBusId, std::vector<int32_t> cpus) {
  RankPlace place;
  PciBusId id = 0;
  if (!gpuBusId.empty() && parsePciBusId(gpuBusId, &id)) place.gpu = topo.gpuByBusId(id);
  place.cpus = std::move(cpus);
  return place;
}

PathType nicPath(const HwTopology& topo, const RankPlace& place, int32_t nic) {
  int32_t nicPci = topo.nics[static_cast<size_t>(nic)].pci;
  if (place.gpu >= 0) return pciPath(topo, topo.gpus[static_cast<size_t>(place.gpu)].pci, nicPci);
  // A host rank: its memory is on its CPUs' NUMA nodes; the nearest of them counts.
  const HwPciNode& root = topo.pci[static_cast<size_t>(topo.hostBridgeOf(nicPci))];
  PathType best = PathType::Sys;
  for (int32_t n : numaOfCpus(topo, place.cpus)) {
    if (n == root.numa) return PathType::Phb;
    HwPciNode cpuSide;
    cpuSide.numa = n, cpuSide.socket = topo.numa[static_cast<size_t>(n)].socket;
    best = std::min(best, betweenRoots(cpuSide, root));
  }
  return best;
}

int32_t closestNic(const HwTopology& topo, const RankPlace& place, const std::vector<int32_t>& candidates,
                   int32_t spread) {
  std::vector<int32_t> all = candidates;
  if (all.empty()) {
    all.resize(topo.nics.size());
    std::iota(all.begin(), all.end(), 0);
  }
  std::vector<int32_t> nearest;
  PathType best = PathType::Sys;
  for (int32_t n : all) {
    if (n < 0 || n >= static_cast<int32_t>(topo.nics.size())) continue;
    PathType p = nicPath(topo, place, n);
    if (nearest.empty() || p < best) {
      nearest.assign(1, n), best = p;
    } else if (p == best) {
      nearest.push_back(n);
    }
  }
  if (nearest.empty()) return -1;
  return nearest[static_cast<size_t>(std::max(spread, 0)) % nearest.size()];
}

std::vector<int32_t> nicsByDistance(const HwTopology& topo, const RankPlace& place, std::vector<int32_t> candidates,
                                    int32_t spread) {
  std::vector<int32_t> order;
  std::vector<int32_t> rest;
  for (int32_t n : candidates) {
    if (n >= 0 && n < static_cast<int32_t>(topo.nics.size())) rest.push_back(n);
  }
  if (candidates.empty()) {
    rest.resize(topo.nics.size());
    std::iota(rest.begin(), rest.end(), 0);
  }
  while (!rest.empty()) {
    int32_t next = closestNic(topo, place, rest, spread);
    order.push_back(next);
    rest.erase(std::find(rest.begin(), rest.end(), next));
  }
  return order;
}

namespace {

thread_local const PlacementHint* tCurrentHint = nullptr;

}  // namespace

const PlacementHint* currentPlacementHint() { return tCurrentHint; }
ScopedPlacementHint::ScopedPlacementHint(const PlacementHint* hint) : previous_(tCurrentHint) { tCurrentHint = hint; }
ScopedPlacementHint::~ScopedPlacementHint() { tCurrentHint = previous_; }

namespace {

// A cycle through every local rank over NVLinks (backtracking; nodes have at most a few dozen
// GPUs), or empty when there is none.
std::vector<int32_t> nvlinkCycle(const HwTopology& topo, const std::vector<int32_t>& gpuOf) {
  size_t n = gpuOf.size();
  auto linked = [&](size_t a, size_t b) {
    const HwGpu& ga = topo.gpus[static_cast<size_t>(gpuOf[a])];
    const HwGpu& gb = topo.gpus[static_cast<size_t>(gpuOf[b])];
    if (ga.switchLinks > 0 && gb.switchLinks > 0) return true;
    return !ga.nvlinks.empty() && ga.nvlinks[static_cast<size_t>(gpuOf[b])] > 0;
  };
  std::vector<int32_t> path{0};
  std::vector<bool> used(n, false);
  used[0] = true;
  size_t budget = 1u << 20;  // a bound on the search, never reached by real nodes
  std::function<bool()> extend = [&]() -> bool {
    if (budget-- == 0) return false;
    if (path.size() == n) return n < 3 || linked(static_cast<size_t>(path.back()), 0);
    for (size_t next = 0; next < n; ++next) {
      if (used[next] || !linked(static_cast<size_t>(path.back()), next)) continue;
      used[next] = true, path.push_back(static_cast<int32_t>(next));
      if (extend()) return true;
      used[next] = false, path.pop_back();
    }
    return false;
  };
  return extend() ? path : std::vector<int32_t>();
}

}  // namespace

std::vector<int32_t> intraNodeRing(const HwTopology& topo, const std::vector<int32_t>& gpuOfLocalRank) {
  std::vector<int32_t> order(gpuOfLocalRank.size());
  std::iota(order.begin(), order.end(), 0);
  for (int32_t g : gpuOfLocalRank) {
    if (g < 0 || g >= static_cast<int32_t>(topo.gpus.size())) return order;  // host ranks: rank order
  }
  if (order.size() < 3) return order;
  bool anyNvlink = false;
  for (int32_t g : gpuOfLocalRank) {
    const HwGpu& gpu = topo.gpus[static_cast<size_t>(g)];
    anyNvlink = anyNvlink || gpu.switchLinks > 0 ||
                std::any_of(gpu.nvlinks.begin(), gpu.nvlinks.end(), [](int32_t l) { return l > 0; });
  }
  if (anyNvlink) {
    // Rank order first: with NVSwitch (every pair linked) it is the cycle found, unchanged.
    std::vector<int32_t> cycle = nvlinkCycle(topo, gpuOfLocalRank);
    if (!cycle.empty()) return cycle;
  }
  // The PCI tree's order: by the chain from the host bridge down (parents come first in `pci`,
  // so comparing the chains top-down keeps each switch's GPUs together, and host bridges by NUMA).
  auto key = [&](int32_t local) {
    std::vector<int32_t> chain =
        chainUp(topo, topo.gpus[static_cast<size_t>(gpuOfLocalRank[static_cast<size_t>(local)])].pci);
    std::reverse(chain.begin(), chain.end());
    const HwPciNode& root = topo.pci[static_cast<size_t>(chain.front())];
    chain.insert(chain.begin(), {root.socket, root.numa});
    return chain;
  };
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return key(a) < key(b); });
  return order;
}

std::vector<int32_t> cpusNear(const HwTopology& topo, const RankPlace& place, int32_t nic,
                              const std::vector<int32_t>& allowed) {
  int32_t anchor = -1;  // the PCI node whose host bridge says where the rank's data lives
  if (place.gpu >= 0) {
    anchor = topo.gpus[static_cast<size_t>(place.gpu)].pci;
  } else if (nic >= 0) {
    anchor = topo.nics[static_cast<size_t>(nic)].pci;
  }
  if (anchor < 0) return {};
  const HwPciNode& root = topo.pci[static_cast<size_t>(topo.hostBridgeOf(anchor))];
  std::vector<int32_t> near;
  for (size_t n = 0; n < topo.numa.size(); ++n) {
    bool local = root.numa >= 0 ? static_cast<int32_t>(n) == root.numa
                                : (root.socket >= 0 && topo.numa[n].socket == root.socket);
    if (local) near.insert(near.end(), topo.numa[n].cpus.begin(), topo.numa[n].cpus.end());
  }
  std::sort(near.begin(), near.end());
  std::vector<int32_t> within;
  if (allowed.empty()) {
    within = near;
  } else {
    std::vector<int32_t> sortedAllowed = allowed;
    std::sort(sortedAllowed.begin(), sortedAllowed.end());
    std::set_intersection(near.begin(), near.end(), sortedAllowed.begin(), sortedAllowed.end(),
                          std::back_inserter(within));
    // Nothing near is allowed, or everything allowed is near: no narrower choice.
    if (within.size() == sortedAllowed.size()) return {};
  }
  return within;
}

std::string describePlacement(const HwTopology& topo) {
  std::string s;
  if (topo.gpus.empty()) {
    for (size_t n = 0; n < topo.numa.size() && !topo.nics.empty(); ++n) {
      RankPlace place;
      place.cpus = topo.numa[n].cpus;
      int32_t nic = closestNic(topo, place, {}, 0);
      s += "  host rank on numa " + std::to_string(topo.numa[n].osIndex) + ": nic " +
           topo.nics[static_cast<size_t>(nic)].name + " (" + pathTypeName(nicPath(topo, place, nic)) + ")\n";
    }
    return s;
  }
  if (!topo.nics.empty()) {
    s += "  paths ";
    for (const HwNic& nic : topo.nics) s += " " + nic.name;
    s += "\n";
  }
  for (size_t g = 0; g < topo.gpus.size() && !topo.nics.empty(); ++g) {
    RankPlace place;
    place.gpu = static_cast<int32_t>(g);
    s += "  gpu " + std::to_string(g) + ":";
    for (size_t n = 0; n < topo.nics.size(); ++n) {
      s += " " + std::string(pathTypeName(nicPath(topo, place, static_cast<int32_t>(n))));
    }
    int32_t nic = closestNic(topo, place, {}, static_cast<int32_t>(g));
    s += "  -> nic " + topo.nics[static_cast<size_t>(nic)].name + "\n";
  }
  std::vector<int32_t> gpus(topo.gpus.size());
  std::iota(gpus.begin(), gpus.end(), 0);
  s += "  ring (one rank per GPU):";
  for (int32_t r : intraNodeRing(topo, gpus)) s += " " + std::to_string(r);
  s += "\n";
  return s;
}

}  // namespace coll
