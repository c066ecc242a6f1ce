// Tests of the environment bootstrap: launcher variables, rendezvous and secret resolution,
// Slurm host lists, and a whole rendezvous driven by environment variables.
#include <gtest/gtest.h>

#include <cstdio>
#include <thread>

#include "src/oob/auth.h"
#include "src/oob/env_bootstrap.h"

namespace coll {
namespace {

const char* const kVars[] = {"COLL_RANK",
                             "COLL_WORLD_SIZE",
                             "RANK",
                             "WORLD_SIZE",
                             "OMPI_COMM_WORLD_RANK",
                             "OMPI_COMM_WORLD_SIZE",
                             "PMI_RANK",
                             "PMI_SIZE",
                             "SLURM_PROCID",
                             "SLURM_NTASKS",
                             "COLL_COMM_ID",
                             "MASTER_ADDR",
                             "MASTER_PORT",
                             "SLURM_STEP_NODELIST",
                             "SLURM_JOB_NODELIST",
                             "SLURM_JOB_ID",
                             "COLL_COMM_SECRET",
                             "COLL_COMM_SECRET_FILE"};

class EnvTest : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    for (const char* v : kVars) unsetenv(v);
  }
  static void set(const char* k, const char* v) { setenv(k, v, 1); }
};

TEST_F(EnvTest, RankAndSizeFromEachLauncher) {
  set("COLL_COMM_ID", "127.0.0.1:4000");
  struct Case {
    const char *rankVar, *sizeVar;
  } cases[] = {{"COLL_RANK", "COLL_WORLD_SIZE"},
               {"RANK", "WORLD_SIZE"},
               {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
               {"PMI_RANK", "PMI_SIZE"},
               {"SLURM_PROCID", "SLURM_NTASKS"}};
  // Set from the lowest priority up: each newly set pair must win.
  for (int i = 4; i >= 0; --i) {
    set(cases[i].rankVar, std::to_string(i).c_str());
    set(cases[i].sizeVar, std::to_string(10 + i).c_str());
    EnvBootstrap env;
    Status st = resolveEnvBootstrap(&env);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(env.rank, i);
    EXPECT_EQ(env.nranks, 10 + i);
    EXPECT_NE(env.source.find(cases[i].rankVar), std::string::npos);
    EXPECT_EQ(env.rendezvous.toString(), "127.0.0.1:4000");
    EXPECT_FALSE(env.haveSecret);
  }
}

TEST_F(EnvTest, BadRankSizeIsAClearError) {
  set("COLL_COMM_ID", "127.0.0.1:4000");
  EnvBootstrap env;
  Status st = resolveEnvBootstrap(&env);
  EXPECT_EQ(st.code(), collInvalidUsage);
  EXPECT_NE(st.message().find("COLL_RANK"), std::string::npos);
  set("RANK", "1");
  st = resolveEnvBootstrap(&env);
  EXPECT_EQ(st.code(), collInvalidUsage);
  EXPECT_NE(st.message().find("WORLD_SIZE"), std::string::npos);
  set("WORLD_SIZE", "1");
  EXPECT_EQ(resolveEnvBootstrap(&env).code(), collInvalidUsage);  // rank >= size
  set("WORLD_SIZE", "two");
  EXPECT_EQ(resolveEnvBootstrap(&env).code(), collInvalidUsage);
  set("WORLD_SIZE", "2");
  EXPECT_TRUE(resolveEnvBootstrap(&env).ok());
}

TEST_F(EnvTest, RendezvousSources) {
  set("COLL_RANK", "0");
  set("COLL_WORLD_SIZE", "2");
  EnvBootstrap env;
  Status st = resolveEnvBootstrap(&env);
  EXPECT_EQ(st.code(), collInvalidUsage);
  EXPECT_NE(st.message().find("COLL_COMM_ID"), std::string::npos);
  EXPECT_NE(st.message().find("MASTER_ADDR"), std::string::npos);

  set("SLURM_JOB_NODELIST", "no-such-host.invalid");
  set("SLURM_STEP_NODELIST", "localhost,node[01-02]");
  set("SLURM_JOB_ID", "123456");
  ASSERT_TRUE(resolveEnvBootstrap(&env).ok());
  EXPECT_TRUE(env.rendezvous.isLoopback());
  EXPECT_EQ(env.rendezvous.port(), 20000 + 123456 % 20000);
  unsetenv("SLURM_JOB_ID");
  EXPECT_EQ(resolveEnvBootstrap(&env).code(), collInvalidUsage);

  set("MASTER_ADDR", "127.0.0.1");
  set("MASTER_PORT", "29500");
  ASSERT_TRUE(resolveEnvBootstrap(&env).ok());
  EXPECT_EQ(env.rendezvous.toString(), "127.0.0.1:29501");
  set("MASTER_ADDR", "::1");
  ASSERT_TRUE(resolveEnvBootstrap(&env).ok());
  EXPECT_EQ(env.rendezvous.toString(), "[::1]:29501");
  set("MASTER_PORT", "65535");
  EXPECT_EQ(resolveEnvBootstrap(&env).code(), collInvalidUsage);

  set("COLL_COMM_ID", "127.0.0.2:777");
  ASSERT_TRUE(resolveEnvBootstrap(&env).ok());
  EXPECT_EQ(env.rendezvous.toString(), "127.0.0.2:777");
  set("COLL_COMM_ID", "127.0.0.2");
  EXPECT_FALSE(resolveEnvBootstrap(&env).ok());
  set("COLL_COMM_ID", "127.0.0.2:0");
  EXPECT_EQ(resolveEnvBootstrap(&env).code(), collInvalidUsage);
}

TEST_F(EnvTest, SecretFromTextHexAndFile) {
  set("COLL_RANK", "0");
  set("COLL_WORLD_SIZE", "1");
  set("COLL_COMM_ID", "127.0.0.1:4000");
  set("COLL_COMM_SECRET", "000102030405060708090a0b0c0d0e0f");
  EnvBootstrap env;
  ASSERT_TRUE(resolveEnvBootstrap(&env).ok());
  ASSERT_TRUE(env.haveSecret);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(env.secret[i], i);

  set("COLL_COMM_SECRET", "my job secret");
  ASSERT_TRUE(resolveEnvBootstrap(&env).ok());
  Secret fromText = env.secret;
  unsetenv("COLL_COMM_SECRET");

  char path[] = "/tmp/coll_secret_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  FILE* f = fdopen(fd, "w");
  fputs("my job secret\n", f);
  fclose(f);
  set("COLL_COMM_SECRET_FILE", path);
  ASSERT_TRUE(resolveEnvBootstrap(&env).ok());
  EXPECT_TRUE(env.haveSecret);
  EXPECT_EQ(env.secret, fromText);

  f = fopen(path, "w");
  std::string big(10000, 'a');
  fputs(big.c_str(), f);
  fclose(f);
  EXPECT_EQ(resolveEnvBootstrap(&env).code(), collInvalidUsage);
  f = fopen(path, "w");
  fputs("\n", f);
  fclose(f);
  EXPECT_EQ(resolveEnvBootstrap(&env).code(), collInvalidUsage);
  unlink(path);
  Status st = resolveEnvBootstrap(&env);
  EXPECT_EQ(st.code(), collInvalidUsage);
  EXPECT_NE(st.message().find(path), std::string::npos);
}

TEST(SlurmNodeList, ExpandsCompressedLists) {
  std::vector<std::string> hosts;
  ASSERT_TRUE(expandSlurmNodeList("node[01-04,07],gpu5", &hosts).ok());
  EXPECT_EQ(hosts, std::vector<std::string>({"node01", "node02", "node03", "node04", "node07", "gpu5"}));
  ASSERT_TRUE(expandSlurmNodeList("rack[1-2]-n[3,5]", &hosts).ok());
  EXPECT_EQ(hosts, std::vector<std::string>({"rack1-n3", "rack1-n5", "rack2-n3", "rack2-n5"}));
  ASSERT_TRUE(expandSlurmNodeList("n[098-101]", &hosts).ok());
  EXPECT_EQ(hosts, std::vector<std::string>({"n098", "n099", "n100", "n101"}));
  ASSERT_TRUE(expandSlurmNodeList("single", &hosts).ok());
  EXPECT_EQ(hosts, std::vector<std::string>({"single"}));

  std::string first;
  ASSERT_TRUE(firstSlurmNode("node[01-04,07],gpu5", &first).ok());
  EXPECT_EQ(first, "node01");
  ASSERT_TRUE(firstSlurmNode("a[9-10]b[3-4]", &first).ok());
  EXPECT_EQ(first, "a9b3");
  ASSERT_TRUE(firstSlurmNode("gpu5,node[1-2]", &first).ok());
  EXPECT_EQ(first, "gpu5");

  for (const char* bad : {"node[1-", "node]", "n[4-2]", "n[a-b]", "", "n[[1]]", "n[1-2"}) {
    EXPECT_FALSE(expandSlurmNodeList(bad, &hosts).ok()) << bad;
    EXPECT_FALSE(firstSlurmNode(bad, &first).ok()) << bad;
  }
  EXPECT_FALSE(expandSlurmNodeList("n[1-1000000]", &hosts, 100).ok());
}

uint16_t freePort() {
  Socket s;
  SocketAddress a, bound;
  EXPECT_TRUE(SocketAddress::parse("127.0.0.1:0", &a).ok());
  EXPECT_TRUE(Socket::listen(a, 1, &s, &bound).ok());
  return bound.port();
}

void rendezvousFromEnv(int n) {
  EnvBootstrap base;
  Status st = resolveEnvBootstrap(&base);
  ASSERT_TRUE(st.ok()) << st.message();
  std::vector<collUniqueId> ids(n);
  std::vector<std::unique_ptr<Bootstrap>> bs(n);
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) {
    ts.emplace_back([&, r] {
      EnvBootstrap env = base;
      env.rank = r;
      Status s = envUniqueId(env, r == 0, &ids[r]);
      ASSERT_TRUE(s.ok()) << s.message();
      s = Bootstrap::create(ids[r], r, n, 1, Deadline::afterMs(10000), &bs[r]);
      ASSERT_TRUE(s.ok()) << "rank " << r << ": " << s.message();
    });
  }
  for (auto& t : ts) t.join();
  for (int r = 0; r < n; ++r) {
    ASSERT_NE(bs[r], nullptr);
    EXPECT_EQ(memcmp(&ids[r], &ids[0], sizeof(collUniqueId)), 0);
    EXPECT_EQ(bs[r]->commHash(), bs[0]->commHash());
  }
  const char msg[] = "hello";
  ASSERT_TRUE(bs[n - 1]->send(0, 1, msg, sizeof(msg), Deadline::afterMs(2000)).ok());
  std::vector<uint8_t> got;
  ASSERT_TRUE(bs[0]->recv(n - 1, 1, &got, 64, Deadline::afterMs(2000)).ok());
  EXPECT_STREQ(reinterpret_cast<const char*>(got.data()), msg);
}

TEST_F(EnvTest, WholeRendezvousWithSecret) {
  set("RANK", "0");
  set("WORLD_SIZE", "3");
  set("MASTER_ADDR", "127.0.0.1");
  set("MASTER_PORT", std::to_string(freePort() - 1).c_str());
  set("COLL_COMM_SECRET", "whole rendezvous");
  rendezvousFromEnv(3);
}

TEST_F(EnvTest, WholeRendezvousUnauthenticated) {
  set("COLL_RANK", "0");
  set("COLL_WORLD_SIZE", "2");
  set("COLL_COMM_ID", ("127.0.0.1:" + std::to_string(freePort())).c_str());
  rendezvousFromEnv(2);
}

TEST_F(EnvTest, RootBindsTheWildcardWhenTheRendezvousIsNotLocal) {
  EnvBootstrap env;
  env.rank = 0;
  env.nranks = 2;
  ASSERT_TRUE(SocketAddress::parse("198.18.200.1:" + std::to_string(freePort()), &env.rendezvous).ok());
  collUniqueId id;
  Status st = envUniqueId(env, true, &id);
  EXPECT_TRUE(st.ok()) << st.message();
  UniqueIdContents c;
  ASSERT_TRUE(decodeUniqueId(id, &c).ok());
  EXPECT_TRUE(c.root == env.rendezvous);
  EXPECT_FALSE(c.authenticated);
}

}  // namespace
}  // namespace coll
