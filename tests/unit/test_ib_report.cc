// What collinfo reports of the net transports (transports/net.h reportNets): the ib entry on the
// verbs test double's devices and ports (active, down), tcp's interfaces, and the transports this
// build lacks named as such.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/ib_double/verbs_double.h"
#include "transports/ib/ib_transport.h"
#include "transports/net.h"

namespace coll {
namespace {

class NetReportTest : public ::testing::Test {
 protected:
  void use(int devices, bool active) {
    testing::VerbsDoubleOptions vo;
    vo.devices = devices;
    vo.portActive = active;
    testing::configureVerbsDouble(vo);
    testing::injectVerbsFault(testing::VerbsFault::None);
    setVerbsApiForTesting(&testing::verbsTestDouble());
  }
  void TearDown() override {
    testing::configureVerbsDouble(testing::VerbsDoubleOptions{});
    setVerbsApiForTesting(nullptr);
  }
};

const NetReport& find(const std::vector<NetReport>& reports, NetKind kind) {
  for (const NetReport& r : reports) {
    if (r.kind == kind) return r;
  }
  static const NetReport none;
  ADD_FAILURE() << "no report for " << netKindName(kind);
  return none;
}

TEST_F(NetReportTest, EveryRdmaPortWithItsStateLinkAndRate) {
  use(2, true);
  const std::vector<NetReport> reports = reportNets();
  ASSERT_EQ(reports.size(), 3u);
  const NetReport& ib = find(reports, NetKind::Ib);
  EXPECT_TRUE(ib.built);
  EXPECT_TRUE(ib.available);
  EXPECT_TRUE(ib.automatic);
  EXPECT_TRUE(ib.why.empty()) << ib.why;
  ASSERT_EQ(ib.detail.size(), 2u);
  // The double's ports: 4x EDR (4 lanes of 25 Gb/s), RoCE, MTU 4096.
  EXPECT_EQ(ib.detail[0], "verbsdouble0:1 ACTIVE, Ethernet (RoCE), 100 Gb/s, MTU 4096");
  EXPECT_EQ(ib.detail[1], "verbsdouble1:1 ACTIVE, Ethernet (RoCE), 100 Gb/s, MTU 4096");
}

TEST_F(NetReportTest, PortsDownMakeIbUnavailableAndSayWhy) {
  use(1, false);
  const NetReport ib = find(reportNets(), NetKind::Ib);
  EXPECT_TRUE(ib.built);
  EXPECT_FALSE(ib.available);
  EXPECT_FALSE(ib.automatic);
  EXPECT_NE(ib.why.find("verbsdouble0:1 DOWN"), std::string::npos) << ib.why;
  ASSERT_EQ(ib.detail.size(), 1u);
  EXPECT_EQ(ib.detail[0].rfind("verbsdouble0:1 DOWN", 0), 0u) << ib.detail[0];
}

TEST_F(NetReportTest, NoDeviceIsTheReasonAndNoDetail) {
  use(0, true);
  const NetReport ib = find(reportNets(), NetKind::Ib);
  EXPECT_FALSE(ib.available);
  EXPECT_NE(ib.why.find("no RDMA device"), std::string::npos) << ib.why;
  EXPECT_TRUE(ib.detail.empty());
}

TEST_F(NetReportTest, TcpNamesTheInterfaceItWouldUse) {
  use(1, true);
  const NetReport tcp = find(reportNets(), NetKind::Tcp);
  EXPECT_TRUE(tcp.built);
  EXPECT_TRUE(tcp.available);
  ASSERT_FALSE(tcp.detail.empty());
  NetInterface chosen;
  ASSERT_TRUE(selectInterface(&chosen).ok());
  EXPECT_EQ(tcp.detail[0].rfind("between hosts: " + chosen.name + " ", 0), 0u) << tcp.detail[0];
  EXPECT_EQ(tcp.detail[0].find(":0 "), std::string::npos) << "an interface address has no port: " << tcp.detail[0];
}

}  // namespace
}  // namespace coll
