// The node topology from hwloc: the XML node designs of tests/topo load into the summary placement
// reads (GPUs, NICs, ports, PCI tree, NUMA), NVLink through the probe seam, the summary's compact
// form round-trips and its parser refuses malformed bytes, and bad files are named in the error.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "src/topo/hw_topology.h"

namespace coll {
namespace {

std::string fixture(const char* name) { return std::string(COLL_TOPO_FIXTURES) + "/" + name; }

#if COLL_HAVE_HWLOC

HwTopology load(const char* name, const NvlinkProbe& probe = nullptr) {
  HwTopology t;
  Status st = loadHwTopology(fixture(name), probe, &t);
  EXPECT_TRUE(st.ok()) << st.message();
  return t;
}

// Every GPU on NVSwitch, as NVML reports a DGX H100: 18 links per GPU to switches (bus ids that
// are no GPU's).
std::vector<NvlinkEdge> nvswitchProbe(const std::vector<PciBusId>& gpus) {
  std::vector<NvlinkEdge> edges;
  for (PciBusId g : gpus) {
    for (PciBusId sw = 0; sw < 4; ++sw) edges.push_back({g, 0x00ff0000u + sw, sw < 2 ? 5 : 4});
  }
  return edges;
}

TEST(HwTopology, LoadsDgxH100Design) {
  HwTopology t = load("dgx_h100.xml");  // NVSwitch links from the file's NVLinkBandwidth matrix
  EXPECT_TRUE(t.hwloc);
  EXPECT_EQ(t.sockets, 2);
  EXPECT_EQ(t.pus, 112);
  ASSERT_EQ(t.numa.size(), 2u);
  EXPECT_EQ(t.numa[1].cpus.front(), 56);
  EXPECT_EQ(t.numa[1].socket, 1);
  ASSERT_EQ(t.gpus.size(), 8u);
  ASSERT_EQ(t.nics.size(), 8u);
  EXPECT_EQ(formatPciBusId(t.pci[static_cast<size_t>(t.gpus[0].pci)].busId), "0000:18:00.0");
  EXPECT_EQ(t.gpus[0].name, "cuda0");
  EXPECT_EQ(t.gpus[5].switchLinks, 18);
  EXPECT_EQ(t.nics[3].name, "mlx5_3");
  EXPECT_EQ(t.nics[3].netdev, "ibp93s0");
  EXPECT_EQ(t.nics[3].ports, 1);
  EXPECT_EQ(t.nics[3].activePorts, 1u);
  // GPU 6 and NIC 6 share a switch: one upstream port above both, under one host bridge local
  // to socket 1.
  int32_t g = t.gpus[6].pci, n = t.nics[6].pci;
  EXPECT_EQ(t.pci[static_cast<size_t>(t.pci[static_cast<size_t>(g)].parent)].parent,
            t.pci[static_cast<size_t>(t.pci[static_cast<size_t>(n)].parent)].parent);
  const HwPciNode& root = t.pci[static_cast<size_t>(t.hostBridgeOf(g))];
  EXPECT_EQ(root.kind, PciKind::HostBridge);
  EXPECT_EQ(root.numa, 1);
  EXPECT_EQ(root.socket, 1);
  EXPECT_EQ(t.gpuByBusId(0x00ab0000u), -1);  // domain 0xab: no GPU of ours
  PciBusId id = 0;
  ASSERT_TRUE(parsePciBusId("0000:ab:00.0", &id));
  EXPECT_EQ(t.gpuByBusId(id), 5);
  EXPECT_EQ(t.nicByName("ibp171s0"), 5);
  EXPECT_EQ(t.nicByName("mlx5_9"), -1);
}

TEST(HwTopology, NvlinkProbeFillsLinksWhereTheFileHasNone) {
  HwTopology t = load("cpu_2socket_2nic.xml", nvswitchProbe);  // no GPUs: nothing asked
  EXPECT_TRUE(t.gpus.empty());
  t = load("pcie_4gpu_2nic.xml", nvswitchProbe);
  ASSERT_EQ(t.gpus.size(), 4u);
  EXPECT_EQ(t.gpus[2].switchLinks, 18);
  EXPECT_EQ(t.gpus[2].nvlinks, std::vector<int32_t>(4, 0));
}

TEST(HwTopology, DirectNvlinksCountPerPeer) {
  // Two GPUs of the PCIe node bridged by NVLink (2 links), the others without.
  auto probe = [](const std::vector<PciBusId>& gpus) {
    return std::vector<NvlinkEdge>{{gpus[0], gpus[1], 2}, {gpus[1], gpus[0], 2}};
  };
  HwTopology t = load("pcie_4gpu_2nic.xml", probe);
  ASSERT_EQ(t.gpus.size(), 4u);
  ASSERT_EQ(t.gpus[0].nvlinks.size(), 4u);
  EXPECT_EQ(t.gpus[0].nvlinks[1], 2);
  EXPECT_EQ(t.gpus[1].nvlinks[0], 2);
  EXPECT_EQ(t.gpus[2].nvlinks[3], 0);
  EXPECT_EQ(t.gpus[0].switchLinks, 0);
}

TEST(HwTopology, CpuOnlyNodeHasNicsPerSocket) {
  HwTopology t = load("cpu_2socket_2nic.xml");
  EXPECT_TRUE(t.gpus.empty());
  ASSERT_EQ(t.nics.size(), 2u);
  EXPECT_EQ(t.pci[static_cast<size_t>(t.hostBridgeOf(t.nics[0].pci))].numa, 0);
  EXPECT_EQ(t.pci[static_cast<size_t>(t.hostBridgeOf(t.nics[1].pci))].numa, 1);
  EXPECT_EQ(t.numaOfCpu(40), 1);
  EXPECT_EQ(t.numaOfCpu(64), -1);
}

TEST(HwTopology, ThisMachineLoads) {
  HwTopology t;
  Status st = loadHwTopology("", nvmlNvlinkProbe, &t);  // no NVML here: no NVLink, no error
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_GE(t.pus, 1);
  EXPECT_FALSE(t.numa.empty());
  EXPECT_NE(t.describe().find("this machine"), std::string::npos);
}

TEST(HwTopology, BadFilesAreNamed) {
  HwTopology t;
  Status missing = loadHwTopology("/nonexistent/node.xml", nullptr, &t);
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("/nonexistent/node.xml"), std::string::npos) << missing.message();

  std::string bad = testing::TempDir() + "coll_topo_bad.xml";
  FILE* f = fopen(bad.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs("<?xml version=\"1.0\"?>\n<topology version=\"2.0\"><object type=\"Machine\"", f);
  fclose(f);
  Status garbled = loadHwTopology(bad, nullptr, &t);
  EXPECT_FALSE(garbled.ok());
  EXPECT_NE(garbled.message().find(bad), std::string::npos) << garbled.message();
  std::remove(bad.c_str());
}

TEST(HwTopology, SummaryRoundTripsAndHashes) {
  HwTopology t = load("dgx_h100.xml");
  std::vector<uint8_t> bytes = t.serialize();
  EXPECT_LT(bytes.size(), 4096u);  // compact: runs of CPUs, no names twice
  HwTopology back;
  Status st = HwTopology::parse(bytes.data(), bytes.size(), &back);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(back.serialize(), bytes);
  EXPECT_EQ(back.hash(), t.hash());
  EXPECT_NE(load("pcie_4gpu_2nic.xml").hash(), t.hash());
}

TEST(HwTopology, ParserRefusesMalformedSummaries) {
  HwTopology t = load("pcie_4gpu_2nic.xml");
  std::vector<uint8_t> bytes = t.serialize();
  HwTopology out;
  // Every truncation fails cleanly.
  for (size_t n = 0; n < bytes.size(); ++n) EXPECT_FALSE(HwTopology::parse(bytes.data(), n, &out).ok()) << n;
  // Trailing bytes, and every single-byte corruption either fails or yields a consistent topology.
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  EXPECT_FALSE(HwTopology::parse(longer.data(), longer.size(), &out).ok());
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::vector<uint8_t> bad = bytes;
    bad[i] ^= 0xff;
    if (HwTopology::parse(bad.data(), bad.size(), &out).ok()) {
      for (const HwGpu& g : out.gpus) ASSERT_LT(static_cast<size_t>(g.pci), out.pci.size());
      for (const HwNic& n : out.nics) ASSERT_LT(static_cast<size_t>(n.pci), out.pci.size());
      for (size_t p = 0; p < out.pci.size(); ++p) ASSERT_LT(out.pci[p].parent, static_cast<int32_t>(p));
      (void)out.describe();
    }
  }
}

#else

TEST(HwTopology, WithoutHwlocCpusOnlyAndFilesRefused) {
  HwTopology t;
  ASSERT_TRUE(loadHwTopology("", nullptr, &t).ok());
  EXPECT_FALSE(t.hwloc);
  EXPECT_GE(t.pus, 1);
  Status st = loadHwTopology(fixture("dgx_h100.xml"), nullptr, &t);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("dgx_h100.xml"), std::string::npos);
}

#endif

TEST(HwTopology, PciBusIds) {
  PciBusId id = 0;
  ASSERT_TRUE(parsePciBusId("0000:3B:00.1", &id));
  EXPECT_EQ(formatPciBusId(id), "0000:3b:00.1");
  ASSERT_TRUE(parsePciBusId("3b:1f.7", &id));
  EXPECT_EQ(formatPciBusId(id), "0000:3b:1f.7");
  EXPECT_FALSE(parsePciBusId("3b:20.0", &id));
  EXPECT_FALSE(parsePciBusId("0000:3b:00.0x", &id));
  EXPECT_FALSE(parsePciBusId("mlx5_0", &id));
}

}  // namespace
}  // namespace coll
