// The ib transport's device choice follows placement: with COLL_IB_HCA unset it tries the RDMA
// devices nearest to the rank first (on the verbs test double's several devices), and
// COLL_IB_RAILS=-1 takes the equally near ones as rails; COLL_IB_HCA, when set, keeps its meaning.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "src/topo/placement.h"
#include "tests/ib_double/verbs_double.h"
#include "transports/ib/ib_transport.h"

namespace coll {
namespace {

class IbPlacement : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::VerbsDoubleOptions vo;
    vo.devices = 3;
    testing::configureVerbsDouble(vo);
    testing::injectVerbsFault(testing::VerbsFault::None);
    setVerbsApiForTesting(&testing::verbsTestDouble());
  }
  void TearDown() override {
    testing::configureVerbsDouble(testing::VerbsDoubleOptions{});
    setVerbsApiForTesting(nullptr);
  }
};

std::string opened(const IbOptions& o) {
  std::shared_ptr<IbDevice> dev;
  Status st = IbDevice::open(activeVerbsApi(), o, &dev);
  EXPECT_TRUE(st.ok()) << st.message();
  return st.ok() ? dev->port().device : "";
}

// A two-socket node: verbsdouble0 on socket 0, verbsdouble1 and verbsdouble2 on socket 1 (each on
// its own host bridge), and an Ethernet-only NIC that is no RDMA device.
HwTopology twoSocketNode() {
  HwTopology t;
  t.sockets = 2, t.pus = 8, t.cores = 8;
  t.numa.resize(2);
  for (int32_t c = 0; c < 8; ++c) t.numa[static_cast<size_t>(c / 4)].cpus.push_back(c);
  t.numa[0].socket = 0, t.numa[1].socket = 1;
  auto nic = [&](int32_t numa, const char* name, int32_t ports) {
    HwPciNode root;
    root.kind = PciKind::HostBridge, root.numa = numa, root.socket = numa;
    t.pci.push_back(root);
    HwPciNode dev;
    dev.kind = PciKind::Nic, dev.parent = static_cast<int32_t>(t.pci.size() - 1);
    t.pci.push_back(dev);
    HwNic n;
    n.pci = static_cast<int32_t>(t.pci.size() - 1), n.name = name, n.ports = ports, n.activePorts = ports ? 1 : 0;
    t.nics.push_back(n);
  };
  nic(1, "eno1", 0);
  nic(0, "verbsdouble0", 1);
  nic(1, "verbsdouble2", 1);
  nic(1, "verbsdouble1", 1);
  return t;
}

TEST_F(IbPlacement, WithoutAHintVerbsOrder) {
  EXPECT_TRUE(nearIbDevices().empty());
  EXPECT_EQ(opened(IbOptions{}), "verbsdouble0");
}

TEST_F(IbPlacement, NearestDeviceFirstAndRanksShareASocketsDevices) {
  HwTopology node = twoSocketNode();
  PlacementHint hint;
  hint.node = &node;
  hint.place.cpus = {5, 6};  // socket 1
  for (int32_t local : {0, 1}) {
    hint.localRank = local;
    ScopedPlacementHint scoped(&hint);
    std::vector<std::string> near = nearIbDevices();
    ASSERT_EQ(near.size(), 3u);          // RDMA devices only
    EXPECT_EQ(near[2], "verbsdouble0");  // the other socket's, last
    IbOptions o;
    o.nearDevices = near;
    // Two devices on socket 1: local ranks take turns.
    EXPECT_EQ(opened(o), local == 0 ? "verbsdouble2" : "verbsdouble1") << "local rank " << local;
  }
  EXPECT_TRUE(nearIbDevices().empty());  // the hint ends with its scope
}

TEST_F(IbPlacement, EquallyNearNicsAreTheRails) {
  HwTopology node = twoSocketNode();
  PlacementHint hint;
  hint.node = &node;
  hint.place.cpus = {5, 6};  // socket 1: verbsdouble2 and verbsdouble1 are equally near
  for (int32_t local : {0, 1}) {
    hint.localRank = local;
    ScopedPlacementHint scoped(&hint);
    IbOptions o;
    o.rails = -1;
    o.nearDevices = nearIbDevices(&o.nearRails);
    EXPECT_EQ(o.nearRails, 2);
    std::vector<std::shared_ptr<IbDevice>> rails;
    Status st = IbDevice::openRails(activeVerbsApi(), o, &rails);
    ASSERT_TRUE(st.ok()) << st.message();
    ASSERT_EQ(rails.size(), 2u);
    // Both socket-1 devices, the local rank's turn first; never the other socket's.
    EXPECT_EQ(rails[0]->port().device, local == 0 ? "verbsdouble2" : "verbsdouble1");
    EXPECT_EQ(rails[1]->port().device, local == 0 ? "verbsdouble1" : "verbsdouble2");
  }
  IbOptions none;  // no topology: one rail
  none.rails = -1;
  std::vector<std::shared_ptr<IbDevice>> rails;
  ASSERT_TRUE(IbDevice::openRails(activeVerbsApi(), none, &rails).ok());
  EXPECT_EQ(rails.size(), 1u);
}

TEST_F(IbPlacement, HcaKnobOverridesAndUnknownNamesFallThrough) {
  IbOptions o;
  o.nearDevices = {"verbsdouble2"};
  o.hca = "verbsdouble1";
  EXPECT_EQ(opened(o), "verbsdouble1");
  o.hca = "";
  o.nearDevices = {"mlx5_9", "verbsdouble1"};  // not on this host: skipped
  EXPECT_EQ(opened(o), "verbsdouble1");
  // An HCA name that matches nothing is an error naming the knob, never a silent fallback.
  o.hca = "=mlx5_9";
  std::shared_ptr<IbDevice> dev;
  Status st = IbDevice::open(activeVerbsApi(), o, &dev);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("COLL_IB_HCA==mlx5_9"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace coll
