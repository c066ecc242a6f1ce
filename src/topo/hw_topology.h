// A node's hardware as placement sees it: NUMA nodes and their CPUs, GPUs, NICs and the PCI tree
// between them, loaded from hwloc (this machine, or the XML file COLL_TOPO_FILE names) plus NVLink
// from NVML; serialised compactly so the ranks of a node can check they share one view.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "src/base/status.h"

namespace coll {

// A PCI bus id packed as domain:bus:device.function (16:8:5:3 bits).
using PciBusId = uint32_t;
std::string formatPciBusId(PciBusId id);
// "0000:3b:00.0" (or "3b:00.0", domain 0; case-insensitive); false when it is not one.
bool parsePciBusId(const std::string& text, PciBusId* out);

enum class PciKind : uint8_t { HostBridge = 0, Bridge = 1, Gpu = 2, Nic = 3 };

// One node of the PCI tree between the CPUs and the devices placement cares about. Nodes are
// stored parents first, in hwloc's (bus) order.
struct HwPciNode {
  int32_t parent = -1;  // index into HwTopology::pci; -1 for a host bridge
  PciKind kind = PciKind::Bridge;
  PciBusId busId = 0;   // the device's own id (a bridge's upstream id; 0 for a host bridge)
  int32_t numa = -1;    // host bridges: index into HwTopology::numa of their NUMA node (-1: several)
  int32_t socket = -1;  // host bridges: the package they hang off (-1: unknown)
};

struct HwNuma {
  int32_t osIndex = 0;
  int32_t socket = -1;        // package index (-1: unknown)
  std::vector<int32_t> cpus;  // the OS indexes of its PUs, ascending
};

struct HwGpu {
  int32_t pci = -1;  // index into pci
  std::string name;  // hwloc's OS device name where one exists (cuda0, nvml0), else ""
  // NVLink: links to each other GPU (index = GPU index; empty: no NVLink information) and to
  // NVSwitches.
  std::vector<int32_t> nvlinks;
  int32_t switchLinks = 0;
};

struct HwNic {
  int32_t pci = -1;
  std::string name;          // the RDMA device (mlx5_0), else the network interface (eth0)
  std::string netdev;        // its network interface where it has one (ib0, ens1f0), else ""
  int32_t ports = 0;         // RDMA ports hwloc reports (0 for an Ethernet-only NIC)
  uint32_t activePorts = 0;  // bit p-1 set: port p is ACTIVE
};

// One NVLink as NVML reports it: from a GPU to another GPU or to an NVSwitch.
struct NvlinkEdge {
  PciBusId gpu = 0;
  PciBusId remote = 0;  // the peer's bus id (a GPU, or any other device: an NVSwitch)
  int32_t links = 1;
};
// Where NVLink information comes from: given the GPUs' bus ids, the links between them. The real
// one reads NVML (dlopen of libnvidia-ml.so.1); tests pass their own.
using NvlinkProbe = std::function<std::vector<NvlinkEdge>(const std::vector<PciBusId>& gpus)>;
std::vector<NvlinkEdge> nvmlNvlinkProbe(const std::vector<PciBusId>& gpus);

struct HwTopology {
  std::string source;  // "this machine", the XML file, or why there is no hwloc view
  bool hwloc = false;  // false: CPUs only (no hwloc in this build), from the OS
  int32_t sockets = 0;
  int32_t cores = 0;
  int32_t pus = 0;
  std::vector<HwNuma> numa;
  std::vector<HwPciNode> pci;
  std::vector<HwGpu> gpus;
  std::vector<HwNic> nics;

  // The compact form exchanged between ranks (source excluded) and its hash.
  std::vector<uint8_t> serialize() const;
  uint64_t hash() const;
  // Decodes serialize()'s bytes; every count and index is checked (remote bytes).
  static Status parse(const uint8_t* bytes, size_t size, HwTopology* out);

  int32_t gpuByBusId(PciBusId id) const;             // -1 when no GPU has it
  int32_t nicByName(const std::string& name) const;  // by RDMA name or netdev; -1 when none
  int32_t numaOfCpu(int32_t cpu) const;              // index into numa, -1 when no node has it
  // The host bridge above a PCI node (itself for a host bridge).
  int32_t hostBridgeOf(int32_t pciIndex) const;

  std::string describe() const;  // the human-readable dump (collinfo --topo)
};

// Loads a topology through hwloc: the XML file `xmlPath`, or this machine when it is empty.
// NVLink comes from hwloc's "NVLinkBandwidth" matrix where the topology has one (an XML file, hwloc's NVML
// backend), else from `probe` (may be empty: none). A file that does not exist or does not parse is
// an error naming it. Without hwloc in the build: this machine's CPUs only, and an error for a file.
Status loadHwTopology(const std::string& xmlPath, const NvlinkProbe& probe, HwTopology* out);

// "hwloc 2.9.0" (the headers built against; the running library's API version where it differs),
// or why this build has none.
std::string hwlocVersion();

// COLL_TOPO_FILE ("" when unset).
std::string topologyFile();

// This node's topology: COLL_TOPO_FILE or the machine, with NVML; loaded once per process (per file). A file
// that fails to load is an error every time it is asked for (never a silent fallback).
Status nodeTopology(const HwTopology** out);

}  // namespace coll
