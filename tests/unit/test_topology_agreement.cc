// The ranks of a host agree on the node's topology through the bootstrap: the host's first rank's
// view wins, a rank that sees another one keeps going with it, and a malformed summary is an
// error naming its sender.
#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "collective/collective.h"
#include "src/oob/auth.h"
#include "src/oob/bootstrap.h"
#include "src/oob/node_topology.h"
#include "tests/unit/comm_threads.h"

namespace coll {
namespace {

std::vector<std::unique_ptr<Bootstrap>> createAll(int nranks) {
  SocketAddress loopback;
  EXPECT_TRUE(SocketAddress::parse("127.0.0.1:0", &loopback).ok());
  Secret secret{};
  EXPECT_TRUE(randomSecret(&secret).ok());
  collUniqueId id;
  EXPECT_TRUE(startBootstrapRoot(loopback, &secret, &id).ok());
  std::vector<std::unique_ptr<Bootstrap>> bs(static_cast<size_t>(nranks));
  std::vector<std::thread> ts;
  for (int r = 0; r < nranks; ++r) {
    ts.emplace_back([&, r] {
      Status st = Bootstrap::create(id, r, nranks, 7, Deadline::afterMs(10000), &bs[static_cast<size_t>(r)]);
      EXPECT_TRUE(st.ok()) << st.message();
    });
  }
  for (auto& t : ts) t.join();
  return bs;
}

HwTopology cpus(int32_t n) {
  HwTopology t;
  t.source = "test";
  t.pus = t.cores = n, t.sockets = 1;
  t.numa.resize(1);
  for (int32_t c = 0; c < n; ++c) t.numa[0].cpus.push_back(c);
  return t;
}

TEST(NodeTopology, LocalRanksTakeTheFirstRanksView) {
  auto bs = createAll(3);
  ASSERT_TRUE(bs[2]);
  // Ranks 0 and 2 share a host; rank 2 (say, in another cgroup) sees fewer CPUs. Rank 1 is alone.
  std::vector<HwTopology> mine{cpus(8), cpus(4), cpus(6)}, agreed(3);
  std::vector<Status> sts(3);
  std::vector<std::vector<int32_t>> local{{0, 2}, {1}, {0, 2}};
  std::vector<std::thread> ts;
  for (size_t r = 0; r < 3; ++r) {
    ts.emplace_back(
        [&, r] { sts[r] = agreeNodeTopology(*bs[r], local[r], mine[r], &agreed[r], Deadline::afterMs(10000)); });
  }
  for (auto& t : ts) t.join();
  for (size_t r = 0; r < 3; ++r) ASSERT_TRUE(sts[r].ok()) << r << ": " << sts[r].message();
  EXPECT_EQ(agreed[0].hash(), mine[0].hash());
  EXPECT_EQ(agreed[1].hash(), mine[1].hash());
  EXPECT_EQ(agreed[2].hash(), mine[0].hash());
  EXPECT_EQ(agreed[2].pus, 8);
}

TEST(NodeTopology, MalformedSummaryIsAnErrorNamingItsSender) {
  auto bs = createAll(2);
  ASSERT_TRUE(bs[1]);
  std::vector<uint8_t> bytes = cpus(4).serialize();
  bytes.resize(bytes.size() - 3);
  std::thread sender([&] {
    Status st = bs[0]->send(1, kNodeTopologyTag, bytes.data(), bytes.size(), Deadline::afterMs(10000));
    EXPECT_TRUE(st.ok()) << st.message();
  });
  HwTopology agreed;
  Status st = agreeNodeTopology(*bs[1], {0, 1}, cpus(4), &agreed, Deadline::afterMs(10000));
  sender.join();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("rank 0"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("malformed"), std::string::npos) << st.message();
}

// A communicator given a topology file loads it, agrees on it and still works; one that names a
// file that is not hwloc XML is refused at creation with the file's name.
TEST(NodeTopology, CommunicatorsUseTheTopologyFile) {
#if COLL_HAVE_HWLOC
  testutil::ScopedEnv file("COLL_TOPO_FILE", COLL_TOPO_FIXTURES "/cpu_2socket_2nic.xml");
  testutil::withComms(2, [](int, collComm_t comm) {
    int n = 0;
    EXPECT_EQ(collCommCount(comm, &n), collSuccess);
    EXPECT_EQ(n, 2);
  });
#endif
}

TEST(NodeTopology, CommunicatorRefusesABadTopologyFile) {
  testutil::ScopedEnv file("COLL_TOPO_FILE", COLL_TOPO_FIXTURES "/make_fixtures.py");
  auto results = testutil::initAll(2, [](int, collComm_t) {});
  for (auto& [code, text] : results) {
    EXPECT_NE(code, collSuccess);
    EXPECT_NE(text.find("make_fixtures.py"), std::string::npos) << text;
  }
}

}  // namespace
}  // namespace coll
