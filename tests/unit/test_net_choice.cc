// Choosing the transport between hosts: names, the automatic choice from the masks every rank
// published, and COLL_TRANSPORT / COLL_NET precedence and errors at communicator creation.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/unit/comm_threads.h"
#include "transports/net.h"

namespace coll {
namespace {

using testutil::initAll;
using testutil::ScopedEnv;

TEST(NetChoice, Names) {
  NetKind k;
  ASSERT_TRUE(netKindFromName("socket", &k));
  EXPECT_EQ(k, NetKind::Tcp);
  ASSERT_TRUE(netKindFromName("ucx", &k));
  EXPECT_EQ(k, NetKind::Ucx);
  ASSERT_TRUE(netKindFromName("ib", &k));
  EXPECT_EQ(k, NetKind::Ib);
  EXPECT_FALSE(netKindFromName("IB", &k));
  EXPECT_FALSE(netKindFromName("", &k));
  for (NetKind kind : {NetKind::Tcp, NetKind::Ucx, NetKind::Ib}) {
    ASSERT_TRUE(netKindFromName(netKindName(kind), &k));
    EXPECT_EQ(k, kind);
  }
}

uint32_t maskOf(std::vector<NetKind> available, std::vector<NetKind> automatic) {
  uint32_t m = 0;
  for (NetKind k : available) m |= netBit(k);
  for (NetKind k : automatic) m |= netBit(k) << kNetAutoShift;
  return m;
}

TEST(NetChoice, AutomaticMaskAgreesAcrossRanks) {
  // This rank's UCX drives RDMA, the peer's does not: after AND-ing the published masks neither
  // picks UCX automatically (each deciding from its own probe alone would pick differently).
  const uint32_t mine = maskOf({NetKind::Tcp, NetKind::Ucx}, {NetKind::Tcp, NetKind::Ucx});
  const uint32_t peer = maskOf({NetKind::Tcp, NetKind::Ucx}, {NetKind::Tcp});
  EXPECT_EQ(automaticNetMask(mine), netBit(NetKind::Tcp) | netBit(NetKind::Ucx));
  EXPECT_EQ(automaticNetMask(mine & peer), netBit(NetKind::Tcp));
  // Eligible but not available is not a choice.
  EXPECT_EQ(automaticNetMask(maskOf({NetKind::Tcp}, {NetKind::Tcp, NetKind::Ib})), netBit(NetKind::Tcp));
  // This machine: tcp always; ib never (no RDMA device); UCX at most available, not automatic.
  std::string why;
  const uint32_t here = probeNetAvailability(&why);
  EXPECT_NE(here & netBit(NetKind::Tcp), 0u);
  EXPECT_EQ(automaticNetMask(here) & netBit(NetKind::Ib), 0u) << why;
}

TEST(NetChoice, ForcedTransportsAreCheckedAtCreation) {
  ScopedEnv timeout("COLL_TIMEOUT", "20");
  {
    ScopedEnv net("COLL_NET", "infiniband");
    for (const auto& [res, msg] : initAll(2)) {
      EXPECT_EQ(res, collInvalidUsage);
      EXPECT_NE(msg.find("COLL_NET=infiniband"), std::string::npos) << msg;
    }
  }
  {
    // No RDMA device here: naming ib is an error that says why, not a silent fallback to tcp.
    ScopedEnv net("COLL_NET", "ib");
    for (const auto& [res, msg] : initAll(2)) {
      EXPECT_EQ(res, collInvalidUsage);
      EXPECT_NE(msg.find("COLL_NET=ib"), std::string::npos) << msg;
      EXPECT_NE(msg.find("cannot use it"), std::string::npos) << msg;
    }
  }
  {
    // COLL_TRANSPORT wins over COLL_NET: tcp for every peer, so the bad COLL_NET is never read.
    ScopedEnv net("COLL_NET", "ib");
    ScopedEnv transport("COLL_TRANSPORT", "tcp");
    for (const auto& [res, msg] : initAll(2, [](int r, collComm_t comm) {
           std::vector<float> v(1000, static_cast<float>(r + 1));
           EXPECT_EQ(collAllReduce(v.data(), v.data(), v.size(), collFloat32, collSum, comm, nullptr), collSuccess);
           EXPECT_EQ(v[999], 3.0f);
         })) {
      EXPECT_EQ(res, collSuccess) << msg;
    }
  }
  {
    ScopedEnv transport("COLL_TRANSPORT", "carrier-pigeon");
    for (const auto& [res, msg] : initAll(2)) {
      EXPECT_EQ(res, collInvalidUsage);
      EXPECT_NE(msg.find("COLL_TRANSPORT=carrier-pigeon"), std::string::npos) << msg;
    }
  }
}

}  // namespace
}  // namespace coll
