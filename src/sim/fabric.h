// Fabric: the links of a cluster network and the route of a message between two ranks, for the
// flow-level simulator (flow_sim.h). Ranks sit on nodes (ranksPerNode GPUs each); every rank has
// its own NIC (an up and a down link to its switch or router) and its own intra-node port (NVLink
// or PCIe, an out and an in link), as LinkModel gives every rank its own port of each class.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/base/status.h"

namespace coll::sim {

enum class FabricKind : uint8_t {
  NonBlocking,  // one switch of infinite capacity: only the NICs limit (the alpha-beta model's world)
  FatTree2,     // leaves and spines; ECMP picks the spine
  FatTree3,     // leaves, aggregation switches in pods, cores; ECMP picks both
  Rail,         // rail-optimized: GPU i of every node on rail leaf i; cross-rail through the spines
  Torus,        // 2D/3D torus of nodes (a router per node), wrap links, dimension-order routing
  Dragonfly,    // groups of routers, all-to-all inside a group, global links between groups
};
const char* fabricKindName(FabricKind kind);
// "nonblocking", "fattree2", "fattree3", "rail", "torus", "dragonfly".
Status parseFabricKind(const std::string& text, FabricKind* out);

struct FabricSpec {
  FabricKind kind = FabricKind::NonBlocking;
  int32_t ranksPerNode = 8;
  double nicBytesPerSecond = 50e9;     // per rank, each direction
  double intraBytesPerSecond = 200e9;  // NVLink / PCIe per rank, each direction
  double hopSeconds = 0;               // per switch or router a message crosses
  // Fat-trees and rail: NICs per leaf, uplinks per leaf (one per spine or aggregation switch) and
  // oversubscription (a leaf's uplinks carry its downlinks' bandwidth divided by it).
  int32_t leafPorts = 32;
  int32_t leafUplinks = 16;
  double oversubscription = 1;
  // Three tiers: leaves per pod, uplinks per aggregation switch (to cores) and their oversubscription.
  int32_t podLeaves = 16;
  int32_t aggUplinks = 16;
  double aggOversubscription = 1;
  // Torus: dimensions over nodes (fastest first; 0 = a balanced 2D/3D factorisation) and link speed.
  int32_t torusDims[3] = {0, 0, 0};
  double torusLinkBytesPerSecond = 100e9;
  // Dragonfly: routers per group, nodes per router, local and global link speeds, routing.
  int32_t routersPerGroup = 8;
  int32_t nodesPerRouter = 4;
  double localLinkBytesPerSecond = 100e9;
  double globalLinkBytesPerSecond = 100e9;
  bool valiant = false;
};

// A link's place in the fabric, for the utilisation report.
enum class LinkTier : uint8_t {
  IntraOut,
  IntraIn,
  NicUp,
  NicDown,
  LeafUp,
  SpineDown,
  AggUp,
  CoreDown,
  Torus,
  Local,
  Global
};
inline constexpr int kLinkTiers = static_cast<int>(LinkTier::Global) + 1;
const char* linkTierName(LinkTier tier);

struct Link {
  double bytesPerSecond = 0;
  LinkTier tier = LinkTier::NicUp;
  int32_t from = 0;  // switch, router, rank or node index in its tier (for names)
  int32_t to = 0;
};

class Fabric {
 public:
  // A fabric for `nodes` nodes of spec.ranksPerNode ranks; a rank's slot is node * ranksPerNode + GPU.
  static Status make(const FabricSpec& spec, int32_t nodes, Fabric* out);

  const FabricSpec& spec() const { return spec_; }
  int32_t nodes() const { return nodes_; }
  int32_t slots() const { return nodes_ * spec_.ranksPerNode; }
  const std::vector<Link>& links() const { return links_; }
  // "leaf3->spine1" (reports).
  std::string linkName(int32_t link) const;

  // The links a message from slot a to slot b crosses, in order, and the switches or routers it
  // passes (the per-hop latency). Deterministic: ECMP and Valiant pick by a hash of (a, b).
  void route(int32_t a, int32_t b, std::vector<int32_t>* path, int32_t* switches) const;

  // Grid of a torus (fastest dimension first).
  int32_t torusDims() const { return tdims_; }
  int32_t torusDim(int i) const { return td_[i]; }
  int32_t groups() const { return groups_; }

 private:
  int32_t addLink(double bw, LinkTier tier, int32_t from, int32_t to);
  void torusRoute(int32_t na, int32_t nb, std::vector<int32_t>* path, int32_t* switches) const;
  // Dragonfly: from router ra to router rb by the minimal route.
  void dragonflyMinimal(int32_t ra, int32_t rb, std::vector<int32_t>* path, int32_t* switches) const;
  int32_t gateway(int32_t group, int32_t toGroup) const;

  FabricSpec spec_;
  int32_t nodes_ = 0;
  std::vector<Link> links_;
  // First link of each family; families index by (owner * fanout + k).
  int32_t intraOut_ = 0, intraIn_ = 0, nicUp_ = 0, nicDown_ = 0;
  int32_t leafUp_ = 0, spineDown_ = 0, aggUp_ = 0, coreDown_ = 0;
  int32_t leaves_ = 0, pods_ = 0, leafUplinks_ = 0, aggUplinks_ = 0;
  int32_t torus_ = 0, tdims_ = 0, td_[3] = {1, 1, 1};
  int32_t local_ = 0, global_ = 0, routers_ = 0, groups_ = 0;
};

// Where ranks sit: a host (ranksPerNode consecutive ranks, as the schedules assume) is placed on
// one node whole. Linear: host h on node h. Random: a seeded permutation of the nodes. File: one
// node index per line, one line per host, all distinct.
enum class PlacementKind : uint8_t { Linear, Random, File };
struct PlacementSpec {
  PlacementKind kind = PlacementKind::Linear;
  uint64_t seed = 1;
  std::string path;
};
Status parsePlacement(const std::string& text, PlacementSpec* out);  // linear, random[:seed], file:PATH
// The node of each of `hosts` hosts on a fabric of `nodes` nodes.
Status placeHosts(const PlacementSpec& spec, int32_t hosts, int32_t nodes, std::vector<int32_t>* nodeOfHost);

}  // namespace coll::sim
