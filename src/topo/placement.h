// Placement: pure choices over a node's topology (hw_topology.h): how far a GPU or a rank's CPUs
// are from each NIC, which NIC a rank uses, the intra-node ring order, the CPUs a rank's threads
// run on. No I/O: the transports and the communicator apply what these return.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/topo/hw_topology.h"

namespace coll {

// How far apart two devices are, nearest first (NCCL's path types): through at most one PCIe
// switch (PIX), several switches (PXB), a host bridge (PHB), two host bridges of one NUMA node
// (NODE), the link between NUMA nodes or sockets (SYS).
enum class PathType : uint8_t { Pix = 0, Pxb = 1, Phb = 2, Node = 3, Sys = 4 };
const char* pathTypeName(PathType type);

// Between two nodes of the PCI tree (indexes into HwTopology::pci).
PathType pciPath(const HwTopology& topo, int32_t a, int32_t b);

// Where a rank runs: its GPU (index into HwTopology::gpus), or for a host rank (gpu < 0) the CPUs
// it may run on (empty: all of them).
struct RankPlace {
  int32_t gpu = -1;
  std::vector<int32_t> cpus;
};
// The place of a rank using the GPU with this bus id (busId empty or unknown: host rank on `cpus`).
RankPlace rankPlace(const HwTopology& topo, const std::string& gpuBusId, std::vector<int32_t> cpus);

PathType nicPath(const HwTopology& topo, const RankPlace& place, int32_t nic);

// The NIC among `candidates` (indexes into HwTopology::nics; empty: every NIC) nearest to `place`;
// among equally near ones the (spread mod n)-th, so ranks that share a socket share the NICs out
// (pass the local rank). -1 when there is no candidate.
int32_t closestNic(const HwTopology& topo, const RankPlace& place, const std::vector<int32_t>& candidates,
                   int32_t spread);

// The `candidates` (empty: every NIC), nearest to `place` first; equally near ones rotated by
// `spread` (as closestNic).
std::vector<int32_t> nicsByDistance(const HwTopology& topo, const RankPlace& place, std::vector<int32_t> candidates,
                                    int32_t spread);

// The order of a node's ranks around the intra-node ring (and the chain the intra-node trees
// follow), given each local rank's GPU (-1: host rank). Fully connected NVLink (NVSwitch): rank
// order. Partial NVLink: a cycle over NVLinks when one exists. Otherwise the PCI tree's order, so
// ranks under one switch are neighbours and each switch's uplink carries the ring once each way.
// Returns local-rank indexes; rank order when nothing is known.
std::vector<int32_t> intraNodeRing(const HwTopology& topo, const std::vector<int32_t>& gpuOfLocalRank);

// The CPUs a rank's threads (progress, proxy) should run on: those of the NUMA node of its GPU,
// else of its NIC (nic < 0: none), within `allowed` (the process's affinity). Empty when that
// gives nothing narrower than `allowed` (leave the threads where they are).
std::vector<int32_t> cpusNear(const HwTopology& topo, const RankPlace& place, int32_t nic,
                              const std::vector<int32_t>& allowed);

// What the thread creating a communicator knows of its rank, for the choices the transports make
// while it sets them up (they are made on that thread; the layers between do not carry it).
struct PlacementHint {
  const HwTopology* node = nullptr;  // the node's agreed topology
  RankPlace place;
  int32_t localRank = 0;
  std::vector<int32_t> threadCpus;  // where its progress threads run (cpusNear; empty: unchanged)
};
// The hint of the calling thread while a ScopedPlacementHint lives on it, else nullptr.
const PlacementHint* currentPlacementHint();
class ScopedPlacementHint {
 public:
  explicit ScopedPlacementHint(const PlacementHint* hint);  // nullptr: no hint
  ~ScopedPlacementHint();
  ScopedPlacementHint(const ScopedPlacementHint&) = delete;
  ScopedPlacementHint& operator=(const ScopedPlacementHint&) = delete;

 private:
  const PlacementHint* previous_;
};

// The GPU x NIC path matrix and each GPU's NIC (collinfo --topo).
std::string describePlacement(const HwTopology& topo);

}  // namespace coll
