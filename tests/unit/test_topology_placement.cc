// Placement over the node designs of tests/topo: the NIC every GPU (or host rank) gets, the
// intra-node ring order, and the CPUs a rank's threads are bound to.
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <string>

#include "src/topo/hw_topology.h"
#include "src/topo/placement.h"

namespace coll {
namespace {

#if COLL_HAVE_HWLOC

HwTopology load(const char* name, const NvlinkProbe& probe = nullptr) {
  HwTopology t;
  Status st = loadHwTopology(std::string(COLL_TOPO_FIXTURES) + "/" + name, probe, &t);
  EXPECT_TRUE(st.ok()) << st.message();
  return t;
}

RankPlace onGpu(int32_t gpu) {
  RankPlace p;
  p.gpu = gpu;
  return p;
}

std::vector<int32_t> range(int32_t first, int32_t last) {
  std::vector<int32_t> v(static_cast<size_t>(last - first + 1));
  std::iota(v.begin(), v.end(), first);
  return v;
}

TEST(Placement, DgxH100EveryGpuGetsTheNicOnItsSwitch) {
  HwTopology t = load("dgx_h100.xml");
  ASSERT_EQ(t.gpus.size(), 8u);
  for (int32_t g = 0; g < 8; ++g) {
    for (int32_t spread : {0, 3}) {
      int32_t nic = closestNic(t, onGpu(g), {}, spread);
      ASSERT_GE(nic, 0);
      EXPECT_EQ(t.nics[static_cast<size_t>(nic)].name, "mlx5_" + std::to_string(g)) << "gpu " << g;
    }
    EXPECT_EQ(nicPath(t, onGpu(g), g), PathType::Pix);
    EXPECT_EQ(nicPath(t, onGpu(g), (g + 1) % 4 + (g / 4) * 4), PathType::Node);  // same socket
    EXPECT_EQ(nicPath(t, onGpu(g), (g + 4) % 8), PathType::Sys);                 // other socket
  }
  // The GPU's bus id as the CUDA driver gives it finds the GPU.
  RankPlace p = rankPlace(t, "0000:BA:00.0", {});
  EXPECT_EQ(p.gpu, 6);
  EXPECT_EQ(rankPlace(t, "0000:ba:00.1", {}).gpu, -1);
  // Its own NIC unusable (port down, or not listed): the nearest of the rest, on its socket.
  int32_t other = closestNic(t, p, {0, 1, 4, 5, 7}, 0);
  EXPECT_EQ(nicPath(t, p, other), PathType::Node);
  EXPECT_EQ(other, 4);
}

TEST(Placement, PcieNodeGpusShareTheNicOfTheirSwitch) {
  HwTopology t = load("pcie_4gpu_2nic.xml");
  const char* expected[] = {"mlx5_0", "mlx5_0", "mlx5_1", "mlx5_1"};
  for (int32_t g = 0; g < 4; ++g) {
    int32_t nic = closestNic(t, onGpu(g), {}, g);  // the spread does not override distance
    EXPECT_EQ(t.nics[static_cast<size_t>(nic)].name, expected[g]) << "gpu " << g;
  }
  EXPECT_EQ(nicPath(t, onGpu(0), 1), PathType::Phb);
  EXPECT_EQ(pciPath(t, t.gpus[0].pci, t.gpus[1].pci), PathType::Pix);
  EXPECT_EQ(pciPath(t, t.gpus[1].pci, t.gpus[2].pci), PathType::Phb);
}

TEST(Placement, CpuOnlyNodeHostRanksUseTheirSocketsNic) {
  HwTopology t = load("cpu_2socket_2nic.xml");
  RankPlace s0, s1, both, unbound;
  s0.cpus = range(0, 31), s1.cpus = range(40, 47), both.cpus = {30, 33};
  EXPECT_EQ(closestNic(t, s0, {}, 1), 0);
  EXPECT_EQ(closestNic(t, s1, {}, 0), 1);
  EXPECT_EQ(nicPath(t, s0, 1), PathType::Sys);
  // Not bound to one socket: equally near both, so local ranks take turns.
  EXPECT_EQ(closestNic(t, unbound, {}, 0), 0);
  EXPECT_EQ(closestNic(t, unbound, {}, 1), 1);
  EXPECT_EQ(closestNic(t, both, {}, 2), 0);
  EXPECT_EQ(closestNic(t, s0, {7, -1}, 0), -1);  // no valid candidate
  EXPECT_EQ(nicsByDistance(t, s1, {}, 0), (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(nicsByDistance(t, unbound, {}, 1), (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(nicsByDistance(t, s0, {1}, 0), (std::vector<int32_t>{1}));
}

// How many ring edges cross each PCIe switch's uplink (the upstream port's link to its parent):
// an edge crosses when exactly one end is under the switch.
std::map<int32_t, int> uplinkLoads(const HwTopology& t, const std::vector<int32_t>& gpuOf,
                                   const std::vector<int32_t>& order) {
  auto under = [&](int32_t node, int32_t sw) {
    for (; node >= 0; node = t.pci[static_cast<size_t>(node)].parent) {
      if (node == sw) return true;
    }
    return false;
  };
  std::map<int32_t, int> loads;
  for (size_t p = 0; p < t.pci.size(); ++p) {
    const HwPciNode& n = t.pci[p];
    if (n.kind != PciKind::Bridge) continue;
    for (size_t i = 0; i < order.size(); ++i) {
      int32_t a = t.gpus[static_cast<size_t>(gpuOf[static_cast<size_t>(order[i])])].pci;
      int32_t b = t.gpus[static_cast<size_t>(gpuOf[static_cast<size_t>(order[(i + 1) % order.size()])])].pci;
      if (under(a, static_cast<int32_t>(p)) != under(b, static_cast<int32_t>(p))) ++loads[static_cast<int32_t>(p)];
    }
  }
  return loads;
}

TEST(Placement, PcieRingKeepsEachSwitchsGpusTogether) {
  HwTopology t = load("pcie_4gpu_2nic.xml");
  // Local ranks 0..3 drove GPUs 0, 2, 1, 3: rank order would cross each switch's uplink four
  // times (twice each way).
  std::vector<int32_t> gpuOf{0, 2, 1, 3};
  std::vector<int32_t> rankOrder{0, 1, 2, 3};
  int worst = 0;
  for (auto [bridge, load] : uplinkLoads(t, gpuOf, rankOrder)) worst = std::max(worst, load);
  EXPECT_EQ(worst, 4);
  std::vector<int32_t> ring = intraNodeRing(t, gpuOf);
  EXPECT_EQ(ring, (std::vector<int32_t>{0, 2, 1, 3}));
  for (auto [bridge, load] : uplinkLoads(t, gpuOf, ring)) EXPECT_LE(load, 2) << "bridge " << bridge;
}

TEST(Placement, NvswitchRingIsRankOrder) {
  HwTopology t = load("dgx_h100.xml");
  std::vector<int32_t> gpuOf{5, 3, 0, 7, 1, 6, 2, 4};
  std::vector<int32_t> ring = intraNodeRing(t, gpuOf);
  EXPECT_EQ(ring, range(0, 7));
}

TEST(Placement, PartialNvlinkRingFollowsTheLinks) {
  // NVLink bridges 0-2, 2-1, 1-3, 3-0 (a cycle that rank order does not follow).
  auto probe = [](const std::vector<PciBusId>& g) {
    std::vector<NvlinkEdge> edges;
    int pairs[4][2] = {{0, 2}, {2, 1}, {1, 3}, {3, 0}};
    for (auto& p : pairs) {
      edges.push_back({g[static_cast<size_t>(p[0])], g[static_cast<size_t>(p[1])], 2});
      edges.push_back({g[static_cast<size_t>(p[1])], g[static_cast<size_t>(p[0])], 2});
    }
    return edges;
  };
  HwTopology t = load("pcie_4gpu_2nic.xml", probe);
  std::vector<int32_t> gpuOf{0, 1, 2, 3};
  std::vector<int32_t> ring = intraNodeRing(t, gpuOf);
  ASSERT_EQ(ring.size(), 4u);
  for (size_t i = 0; i < ring.size(); ++i) {
    int32_t a = gpuOf[static_cast<size_t>(ring[i])], b = gpuOf[static_cast<size_t>(ring[(i + 1) % 4])];
    EXPECT_GT(t.gpus[static_cast<size_t>(a)].nvlinks[static_cast<size_t>(b)], 0) << a << "-" << b;
  }
  // Only a pair linked: no NVLink cycle, so the PCI order.
  auto pair = [](const std::vector<PciBusId>& g) { return std::vector<NvlinkEdge>{{g[0], g[3], 2}, {g[3], g[0], 2}}; };
  t = load("pcie_4gpu_2nic.xml", pair);
  EXPECT_EQ(intraNodeRing(t, {0, 2, 1, 3}), (std::vector<int32_t>{0, 2, 1, 3}));
}

TEST(Placement, HostRanksKeepRankOrder) {
  HwTopology t = load("cpu_2socket_2nic.xml");
  EXPECT_EQ(intraNodeRing(t, {-1, -1, -1}), range(0, 2));
}

TEST(Placement, ThreadsBindNearTheGpuOrNic) {
  HwTopology t = load("dgx_h100.xml");
  EXPECT_EQ(cpusNear(t, onGpu(5), 5, {}), range(56, 111));
  EXPECT_EQ(cpusNear(t, onGpu(1), 1, range(0, 111)), range(0, 55));
  // Already confined near it, or allowed nowhere near it: nothing narrower.
  EXPECT_TRUE(cpusNear(t, onGpu(1), 1, range(8, 15)).empty());
  EXPECT_TRUE(cpusNear(t, onGpu(1), 1, range(60, 63)).empty());
  EXPECT_EQ(cpusNear(t, onGpu(6), 6, {1, 2, 70, 71}), (std::vector<int32_t>{70, 71}));

  HwTopology cpu = load("cpu_2socket_2nic.xml");
  RankPlace unbound;
  EXPECT_EQ(cpusNear(cpu, unbound, 1, range(0, 63)), range(32, 63));
  EXPECT_TRUE(cpusNear(cpu, unbound, -1, range(0, 63)).empty());  // no NIC: stay
}

#endif

TEST(Placement, PathTypeNames) {
  EXPECT_STREQ(pathTypeName(PathType::Pix), "PIX");
  EXPECT_STREQ(pathTypeName(PathType::Sys), "SYS");
}

}  // namespace
}  // namespace coll
