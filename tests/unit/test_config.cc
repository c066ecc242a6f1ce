// The knob registry: parsing, defaults, bad values, and that undeclared names are caught.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>

#include "src/base/config.h"

namespace coll {
namespace {

TEST(Config, ParsesByteSizes) {
  EXPECT_EQ(parseBytes("0"), 0u);
  EXPECT_EQ(parseBytes("65536"), 65536u);
  EXPECT_EQ(parseBytes("64K"), 65536u);
  EXPECT_EQ(parseBytes("4M"), 4u << 20);
  EXPECT_EQ(parseBytes("2G"), 2ull << 30);
  EXPECT_EQ(parseBytes("8MB"), 8u << 20);
  EXPECT_FALSE(parseBytes(""));
  EXPECT_FALSE(parseBytes("-1"));
  EXPECT_FALSE(parseBytes("12Q"));
  EXPECT_FALSE(parseBytes("99999999999999999999G"));
}

TEST(Config, TypedAccessorsUseEnvironmentThenDefault) {
  unsetenv("COLL_NSOCKS_PERPEER");
  EXPECT_EQ(knobInt("COLL_NSOCKS_PERPEER"), 2);
  setenv("COLL_NSOCKS_PERPEER", "4", 1);
  EXPECT_EQ(knobInt("COLL_NSOCKS_PERPEER"), 4);
  setenv("COLL_NSOCKS_PERPEER", "four", 1);  // junk: warning and default
  EXPECT_EQ(knobInt("COLL_NSOCKS_PERPEER"), 2);
  unsetenv("COLL_NSOCKS_PERPEER");

  setenv("COLL_SHM_FIFO_BYTES", "1M", 1);
  EXPECT_EQ(knobBytes("COLL_SHM_FIFO_BYTES"), 1u << 20);
  unsetenv("COLL_SHM_FIFO_BYTES");
  EXPECT_EQ(knobBytes("COLL_SHM_FIFO_BYTES"), 2u << 20);

  setenv("COLL_TIMEOUT", "7", 1);
  EXPECT_EQ(defaultTimeoutMs(), 7000);
  setenv("COLL_TIMEOUT", "0", 1);  // nonsense: the default deadline stays
  EXPECT_EQ(defaultTimeoutMs(), 300000);
  unsetenv("COLL_TIMEOUT");

  EXPECT_FALSE(knobRaw("COLL_COMM_ID"));
  setenv("COLL_COMM_ID", "", 1);  // empty counts as unset
  EXPECT_FALSE(knobRaw("COLL_COMM_ID"));
  unsetenv("COLL_COMM_ID");
}

TEST(Config, EveryKnobIsDocumentedOnce) {
  std::set<std::string> names;
  for (const KnobInfo& k : allKnobs()) {
    EXPECT_TRUE(names.insert(k.name).second) << "declared twice: " << k.name;
    EXPECT_GT(std::string(k.doc).size(), 5u) << k.name;
    if (!k.foreign) {
      EXPECT_EQ(std::string(k.name).rfind("COLL_", 0), 0u) << k.name;
    }
  }
}

TEST(ConfigDeathTest, UndeclaredKnobAborts) {
  EXPECT_DEATH((void)knobInt("COLL_NOT_A_KNOB"), "not declared");
}

}  // namespace
}  // namespace coll
