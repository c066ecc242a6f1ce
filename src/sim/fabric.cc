// Fabric construction and routing. Links are directed; every family of links is laid out densely
// so a route is index arithmetic, not a graph search (routing 100,000 ranks' copies of a flow).
#include "src/sim/fabric.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>

#include "algorithms/algorithms.h"
#include "src/plan/schedule_cost.h"

namespace coll::sim {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64: ECMP and Valiant hashes
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
uint64_t pairHash(int32_t a, int32_t b, uint64_t salt) {
  return mix((static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32 | static_cast<uint32_t>(b)) ^ (salt * 0x51ed27));
}

int32_t ceilDiv(int32_t a, int32_t b) { return (a + b - 1) / b; }

}  // namespace

const char* fabricKindName(FabricKind kind) {
  switch (kind) {
    case FabricKind::NonBlocking: return "nonblocking";
    case FabricKind::FatTree2: return "fattree2";
    case FabricKind::FatTree3: return "fattree3";
    case FabricKind::Rail: return "rail";
    case FabricKind::Torus: return "torus";
    case FabricKind::Dragonfly: return "dragonfly";
  }
  return "?";
}

Status parseFabricKind(const std::string& text, FabricKind* out) {
  for (FabricKind k : {FabricKind::NonBlocking, FabricKind::FatTree2, FabricKind::FatTree3, FabricKind::Rail,
                       FabricKind::Torus, FabricKind::Dragonfly}) {
    if (text == fabricKindName(k)) {
      *out = k;
      return okStatus();
    }
  }
  return makeError(collInvalidArgument,
                   "unknown fabric '%s' (nonblocking, fattree2, fattree3, rail, torus or dragonfly)", text.c_str());
}

const char* linkTierName(LinkTier tier) {
  static const char* const names[kLinkTiers] = {"intra-out", "intra-in",  "nic-up", "nic-down", "leaf-up", "spine-down",
                                                "agg-up",    "core-down", "torus",  "local",    "global"};
  return names[static_cast<int>(tier)];
}

int32_t Fabric::addLink(double bw, LinkTier tier, int32_t from, int32_t to) {
  links_.push_back(Link{bw, tier, from, to});
  return static_cast<int32_t>(links_.size() - 1);
}

Status Fabric::make(const FabricSpec& spec, int32_t nodes, Fabric* out) {
  *out = Fabric{};
  Fabric& f = *out;
  f.spec_ = spec;
  f.nodes_ = nodes;
  if (nodes <= 0 || spec.ranksPerNode <= 0) {
    return makeError(collInvalidArgument, "fabric: %d nodes of %d ranks", nodes, spec.ranksPerNode);
  }
  if (!(spec.nicBytesPerSecond > 0) || !(spec.intraBytesPerSecond > 0) || spec.hopSeconds < 0) {
    return makeError(collInvalidArgument, "fabric: NIC and intra-node bandwidth must be > 0, hop latency >= 0");
  }
  const int64_t slots64 = static_cast<int64_t>(nodes) * spec.ranksPerNode;
  if (slots64 > (1 << 28)) return makeError(collInvalidArgument, "fabric: %lld ranks is too many", (long long)slots64);
  const int32_t slots = static_cast<int32_t>(slots64);
  f.intraOut_ = 0;
  for (int32_t s = 0; s < slots; ++s) f.addLink(spec.intraBytesPerSecond, LinkTier::IntraOut, s, s);
  f.intraIn_ = static_cast<int32_t>(f.links_.size());
  for (int32_t s = 0; s < slots; ++s) f.addLink(spec.intraBytesPerSecond, LinkTier::IntraIn, s, s);
  f.nicUp_ = static_cast<int32_t>(f.links_.size());
  for (int32_t s = 0; s < slots; ++s) f.addLink(spec.nicBytesPerSecond, LinkTier::NicUp, s, s);
  f.nicDown_ = static_cast<int32_t>(f.links_.size());
  for (int32_t s = 0; s < slots; ++s) f.addLink(spec.nicBytesPerSecond, LinkTier::NicDown, s, s);

  switch (spec.kind) {
    case FabricKind::NonBlocking: break;
    case FabricKind::FatTree2:
    case FabricKind::FatTree3:
    case FabricKind::Rail: {
      if (spec.leafPorts <= 0 || spec.leafUplinks <= 0 || !(spec.oversubscription > 0)) {
        return makeError(collInvalidArgument, "fabric: leaf ports and uplinks must be > 0, oversubscription > 0");
      }
      const int32_t U = f.leafUplinks_ = spec.leafUplinks;
      // Rail: leafPorts nodes per rail leaf, one leaf per GPU index; fat-trees: leafPorts NICs.
      f.leaves_ = spec.kind == FabricKind::Rail ? ceilDiv(nodes, spec.leafPorts) * spec.ranksPerNode
                                                : ceilDiv(slots, spec.leafPorts);
      const double upBw = spec.leafPorts * spec.nicBytesPerSecond / (spec.oversubscription * U);
      f.leafUp_ = static_cast<int32_t>(f.links_.size());
      for (int32_t l = 0; l < f.leaves_; ++l)
        for (int32_t u = 0; u < U; ++u) f.addLink(upBw, LinkTier::LeafUp, l, u);
      // The switch above: a spine (2 tiers, rail) or aggregation switch u of the leaf's pod.
      const bool three = spec.kind == FabricKind::FatTree3;
      const int32_t perGroup = three ? spec.podLeaves : f.leaves_;
      if (three && spec.podLeaves <= 0) return makeError(collInvalidArgument, "fabric: pod leaves must be > 0");
      f.pods_ = three ? ceilDiv(f.leaves_, spec.podLeaves) : 1;
      f.spineDown_ = static_cast<int32_t>(f.links_.size());
      for (int32_t p = 0; p < f.pods_; ++p)
        for (int32_t u = 0; u < U; ++u)
          for (int32_t l = 0; l < perGroup; ++l) f.addLink(upBw, LinkTier::SpineDown, p * U + u, p * perGroup + l);
      if (three) {
        if (spec.aggUplinks <= 0 || !(spec.aggOversubscription > 0)) {
          return makeError(collInvalidArgument, "fabric: aggregation uplinks must be > 0, oversubscription > 0");
        }
        const int32_t C = f.aggUplinks_ = spec.aggUplinks;
        const double aggBw = spec.podLeaves * upBw / (spec.aggOversubscription * C);
        f.aggUp_ = static_cast<int32_t>(f.links_.size());
        for (int32_t p = 0; p < f.pods_; ++p)
          for (int32_t u = 0; u < U; ++u)
            for (int32_t c = 0; c < C; ++c) f.addLink(aggBw, LinkTier::AggUp, p * U + u, u * C + c);
        f.coreDown_ = static_cast<int32_t>(f.links_.size());
        for (int32_t u = 0; u < U; ++u)
          for (int32_t c = 0; c < C; ++c)
            for (int32_t p = 0; p < f.pods_; ++p) f.addLink(aggBw, LinkTier::CoreDown, u * C + c, p * U + u);
      }
      break;
    }
    case FabricKind::Torus: {
      if (!(spec.torusLinkBytesPerSecond > 0)) return makeError(collInvalidArgument, "fabric: torus link bandwidth");
      if (spec.torusDims[0] > 0) {
        int64_t prod = 1;
        f.tdims_ = 0;
        for (int i = 0; i < 3 && spec.torusDims[i] > 0; ++i) {
          f.td_[i] = spec.torusDims[i];
          prod *= spec.torusDims[i];
          f.tdims_ = i + 1;
        }
        if (prod != nodes) {
          return makeError(collInvalidArgument, "fabric: torus dimensions multiply to %lld, not the %d nodes",
                           static_cast<long long>(prod), nodes);
        }
      } else {
        // The balanced factorisation the torus algorithm uses for a world of one rank per node.
        UniformTopologies t(nodes, 1);
        TorusDims d;
        COLL_TRY(torusDimsFor(t.at(0), "", &d));
        f.tdims_ = d.ndims;
        for (int i = 0; i < 3; ++i) f.td_[i] = d.d[i];
      }
      f.torus_ = static_cast<int32_t>(f.links_.size());
      for (int32_t n = 0; n < nodes; ++n)
        for (int32_t k = 0; k < 2 * f.tdims_; ++k) f.addLink(spec.torusLinkBytesPerSecond, LinkTier::Torus, n, k);
      break;
    }
    case FabricKind::Dragonfly: {
      const int32_t a = spec.routersPerGroup;
      if (a <= 0 || spec.nodesPerRouter <= 0 || !(spec.localLinkBytesPerSecond > 0) ||
          !(spec.globalLinkBytesPerSecond > 0)) {
        return makeError(collInvalidArgument,
                         "fabric: dragonfly routers, nodes per router and link speeds must be > 0");
      }
      f.routers_ = ceilDiv(nodes, spec.nodesPerRouter);
      f.groups_ = ceilDiv(f.routers_, a);
      f.local_ = static_cast<int32_t>(f.links_.size());
      for (int32_t r = 0; r < f.groups_ * a; ++r)
        for (int32_t j = 0; j < a; ++j) f.addLink(spec.localLinkBytesPerSecond, LinkTier::Local, r, (r / a) * a + j);
      f.global_ = static_cast<int32_t>(f.links_.size());
      for (int32_t g = 0; g < f.groups_; ++g)
        for (int32_t h = 0; h < f.groups_; ++h) f.addLink(spec.globalLinkBytesPerSecond, LinkTier::Global, g, h);
      break;
    }
  }
  return okStatus();
}

std::string Fabric::linkName(int32_t link) const {
  const Link& l = links_[link];
  char buf[96];
  switch (l.tier) {
    case LinkTier::IntraOut: snprintf(buf, sizeof buf, "rank-slot%d->nvlink", l.from); break;
    case LinkTier::IntraIn: snprintf(buf, sizeof buf, "nvlink->rank-slot%d", l.from); break;
    case LinkTier::NicUp: snprintf(buf, sizeof buf, "nic%d->switch", l.from); break;
    case LinkTier::NicDown: snprintf(buf, sizeof buf, "switch->nic%d", l.from); break;
    case LinkTier::LeafUp:
      snprintf(
          buf, sizeof buf, "leaf%d->%s%d", l.from, spec_.kind == FabricKind::FatTree3 ? "agg" : "spine",
          (l.from / std::max(spec_.kind == FabricKind::FatTree3 ? spec_.podLeaves : leaves_, 1)) * leafUplinks_ + l.to);
      break;
    case LinkTier::SpineDown:
      snprintf(buf, sizeof buf, "%s%d->leaf%d", spec_.kind == FabricKind::FatTree3 ? "agg" : "spine", l.from, l.to);
      break;
    case LinkTier::AggUp: snprintf(buf, sizeof buf, "agg%d->core%d", l.from, l.to); break;
    case LinkTier::CoreDown: snprintf(buf, sizeof buf, "core%d->agg%d", l.from, l.to); break;
    case LinkTier::Torus:
      snprintf(buf, sizeof buf, "router%d->dim%d%c", l.from, l.to / 2, l.to % 2 == 0 ? '+' : '-');
      break;
    case LinkTier::Local: snprintf(buf, sizeof buf, "router%d->router%d", l.from, l.to); break;
    case LinkTier::Global: snprintf(buf, sizeof buf, "group%d->group%d", l.from, l.to); break;
  }
  return buf;
}

void Fabric::torusRoute(int32_t na, int32_t nb, std::vector<int32_t>* path, int32_t* switches) const {
  // Dimension order: fix dimension 0 first, then 1, then 2; the shorter way round (ties: +).
  int32_t cur = na, stride = 1;
  int32_t hops = 0;
  for (int i = 0; i < tdims_; ++i) {
    const int32_t n = td_[i];
    const int32_t ca = (cur / stride) % n, cb = (nb / stride) % n;
    const int32_t fwd = ((cb - ca) % n + n) % n;
    const bool plus = fwd <= n - fwd;
    const int32_t steps = plus ? fwd : n - fwd;
    int32_t c = ca;
    for (int32_t s = 0; s < steps; ++s) {
      path->push_back(torus_ + (cur * tdims_ + i) * 2 + (plus ? 0 : 1));
      const int32_t next = plus ? (c + 1) % n : (c + n - 1) % n;
      cur += (next - c) * stride;
      c = next;
      hops++;
    }
    stride *= n;
  }
  *switches += hops + 1;
}

int32_t Fabric::gateway(int32_t group, int32_t toGroup) const {
  const int32_t a = spec_.routersPerGroup;
  const int32_t inGroup = std::min(a, routers_ - group * a);
  const int32_t idx = toGroup < group ? toGroup : toGroup - 1;  // index among the other groups
  return group * a + idx % inGroup;
}

void Fabric::dragonflyMinimal(int32_t ra, int32_t rb, std::vector<int32_t>* path, int32_t* switches) const {
  const int32_t a = spec_.routersPerGroup;
  auto local = [&](int32_t x, int32_t y) { path->push_back(local_ + x * a + (y % a)); };
  const int32_t ga = ra / a, gb = rb / a;
  *switches += 1;  // ra
  if (ga == gb) {
    if (ra != rb) {
      local(ra, rb);
      *switches += 1;
    }
    return;
  }
  const int32_t out = gateway(ga, gb), in = gateway(gb, ga);
  if (ra != out) {
    local(ra, out);
    *switches += 1;
  }
  path->push_back(global_ + ga * groups_ + gb);
  *switches += 1;  // in
  if (in != rb) {
    local(in, rb);
    *switches += 1;
  }
}

void Fabric::route(int32_t a, int32_t b, std::vector<int32_t>* path, int32_t* switches) const {
  path->clear();
  *switches = 0;
  const int32_t G = spec_.ranksPerNode;
  const int32_t na = a / G, nb = b / G;
  if (na == nb) {
    path->push_back(intraOut_ + a);
    path->push_back(intraIn_ + b);
    return;
  }
  path->push_back(nicUp_ + a);
  switch (spec_.kind) {
    case FabricKind::NonBlocking: *switches = 1; break;
    case FabricKind::FatTree2:
    case FabricKind::FatTree3:
    case FabricKind::Rail: {
      const bool rail = spec_.kind == FabricKind::Rail;
      const int32_t la = rail ? (na / spec_.leafPorts) * G + a % G : a / spec_.leafPorts;
      const int32_t lb = rail ? (nb / spec_.leafPorts) * G + b % G : b / spec_.leafPorts;
      if (la == lb) {
        *switches = 1;
        break;
      }
      const int32_t U = leafUplinks_;
      const uint64_t h = pairHash(a, b, 0);
      const int32_t u = static_cast<int32_t>(h % static_cast<uint64_t>(U));
      path->push_back(leafUp_ + la * U + u);
      if (spec_.kind != FabricKind::FatTree3) {
        path->push_back(spineDown_ + u * leaves_ + lb);
        *switches = 3;
        break;
      }
      const int32_t P = spec_.podLeaves;
      const int32_t pa = la / P, pb = lb / P;
      if (pa == pb) {
        path->push_back(spineDown_ + (pb * U + u) * P + lb % P);
        *switches = 3;
        break;
      }
      const int32_t C = aggUplinks_;
      const int32_t c = static_cast<int32_t>(pairHash(a, b, 1) % static_cast<uint64_t>(C));
      path->push_back(aggUp_ + (pa * U + u) * C + c);
      path->push_back(coreDown_ + (u * C + c) * pods_ + pb);
      path->push_back(spineDown_ + (pb * U + u) * P + lb % P);
      *switches = 5;
      break;
    }
    case FabricKind::Torus: torusRoute(na, nb, path, switches); break;
    case FabricKind::Dragonfly: {
      const int32_t ra = na / spec_.nodesPerRouter, rb = nb / spec_.nodesPerRouter;
      const int32_t A = spec_.routersPerGroup;
      const int32_t ga = ra / A, gb = rb / A;
      if (spec_.valiant && ga != gb && groups_ > 2) {
        // Valiant: minimal to a group neither end is in (by hash), then minimal from there.
        int32_t gi = static_cast<int32_t>(pairHash(a, b, 2) % static_cast<uint64_t>(groups_ - 2));
        for (int32_t skip : {std::min(ga, gb), std::max(ga, gb)}) {
          if (gi >= skip) gi++;
        }
        const int32_t mid = gateway(gi, ga);
        dragonflyMinimal(ra, mid, path, switches);
        *switches -= 1;  // mid is counted by both halves
        dragonflyMinimal(mid, rb, path, switches);
      } else {
        dragonflyMinimal(ra, rb, path, switches);
      }
      break;
    }
  }
  path->push_back(nicDown_ + b);
}

Status parsePlacement(const std::string& text, PlacementSpec* out) {
  *out = PlacementSpec{};
  if (text == "linear") return okStatus();
  if (text == "random" || text.rfind("random:", 0) == 0) {
    out->kind = PlacementKind::Random;
    if (text.size() > 7) {
      char* end = nullptr;
      out->seed = strtoull(text.c_str() + 7, &end, 10);
      if (*end != '\0') return makeError(collInvalidArgument, "placement '%s': bad seed", text.c_str());
    }
    return okStatus();
  }
  if (text.rfind("file:", 0) == 0 && text.size() > 5) {
    out->kind = PlacementKind::File;
    out->path = text.substr(5);
    return okStatus();
  }
  return makeError(collInvalidArgument, "unknown placement '%s' (linear, random[:SEED] or file:PATH)", text.c_str());
}

Status placeHosts(const PlacementSpec& spec, int32_t hosts, int32_t nodes, std::vector<int32_t>* nodeOfHost) {
  nodeOfHost->resize(static_cast<size_t>(hosts));
  if (hosts > nodes) return makeError(collInvalidArgument, "placement: %d hosts on %d nodes", hosts, nodes);
  switch (spec.kind) {
    case PlacementKind::Linear:
      for (int32_t h = 0; h < hosts; ++h) (*nodeOfHost)[h] = h;
      return okStatus();
    case PlacementKind::Random: {
      std::vector<int32_t> perm(static_cast<size_t>(nodes));
      for (int32_t n = 0; n < nodes; ++n) perm[n] = n;
      std::mt19937_64 rng(spec.seed);
      for (int32_t n = nodes - 1; n > 0; --n) std::swap(perm[n], perm[rng() % static_cast<uint64_t>(n + 1)]);
      std::copy(perm.begin(), perm.begin() + hosts, nodeOfHost->begin());
      return okStatus();
    }
    case PlacementKind::File: {
      std::ifstream in(spec.path);
      if (!in) return makeError(collInvalidArgument, "placement file %s: cannot open", spec.path.c_str());
      std::vector<char> used(static_cast<size_t>(nodes), 0);
      int32_t h = 0;
      std::string line;
      int lineNo = 0;
      while (std::getline(in, line)) {
        lineNo++;
        if (line.empty() || line[0] == '#') continue;
        char* end = nullptr;
        const long n = strtol(line.c_str(), &end, 10);
        if (end == line.c_str() || *end != '\0' || n < 0 || n >= nodes) {
          return makeError(collInvalidArgument, "placement file %s line %d: '%s' is not a node index below %d",
                           spec.path.c_str(), lineNo, line.c_str(), nodes);
        }
        if (h >= hosts) {
          return makeError(collInvalidArgument, "placement file %s: more than the %d hosts' lines", spec.path.c_str(),
                           hosts);
        }
        if (used[n]) {
          return makeError(collInvalidArgument, "placement file %s line %d: node %ld placed twice", spec.path.c_str(),
                           lineNo, n);
        }
        used[n] = 1;
        (*nodeOfHost)[h++] = static_cast<int32_t>(n);
      }
      if (h != hosts) {
        return makeError(collInvalidArgument, "placement file %s: %d lines for %d hosts", spec.path.c_str(), h, hosts);
      }
      return okStatus();
    }
  }
  return okStatus();
}

}  // namespace coll::sim
