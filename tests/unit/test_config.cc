// The knob registry: parsing, defaults, bad values, and that every part's knobs are registered
// in documentation order.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>

#include "src/base/config.h"

namespace coll {
namespace {

// Tests look knobs up by name; the library only ever uses the handles.
const Knob* findKnob(const char* name) {
  for (const Knob* k : allKnobs()) {
    if (std::string(k->name()) == name) return k;
  }
  return nullptr;
}

template <class Typed>
const Typed& knobNamed(const char* name, KnobType type) {
  const Knob* k = findKnob(name);
  EXPECT_NE(k, nullptr) << name;
  EXPECT_EQ(k->type(), type) << name;
  return *static_cast<const Typed*>(k);
}

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

TEST(Config, NumbersAndTrimming) {
  EXPECT_EQ(parseNumber("2.5"), 2.5);
  EXPECT_EQ(parseNumber("1e6"), 1e6);
  EXPECT_EQ(parseNumber("-3"), -3.0);
  for (const char* bad : {"", "x", "2.5x", "1e999", "nan", " 1"}) EXPECT_FALSE(parseNumber(bad).has_value()) << bad;
  EXPECT_EQ(trimSpace("  a b \t"), "a b");
  EXPECT_EQ(trimSpace(" \r\n"), "");
}

TEST(Config, TypedAccessorsUseEnvironmentThenDefault) {
  const IntKnob& sockets = knobNamed<IntKnob>("COLL_NSOCKS_PERPEER", KnobType::Int);
  unsetenv("COLL_NSOCKS_PERPEER");
  EXPECT_EQ(sockets.get(), 2);
  setenv("COLL_NSOCKS_PERPEER", "4", 1);
  EXPECT_EQ(sockets.get(), 4);
  setenv("COLL_NSOCKS_PERPEER", "four", 1);  // junk: warning and default
  EXPECT_EQ(sockets.get(), 2);
  unsetenv("COLL_NSOCKS_PERPEER");

  const BytesKnob& fifo = knobNamed<BytesKnob>("COLL_SHM_FIFO_BYTES", KnobType::Bytes);
  setenv("COLL_SHM_FIFO_BYTES", "1M", 1);
  EXPECT_EQ(fifo.get(), 1u << 20);
  unsetenv("COLL_SHM_FIFO_BYTES");
  EXPECT_EQ(fifo.get(), 2u << 20);

  const BoolKnob& check = knobNamed<BoolKnob>("COLL_CHECK", KnobType::Bool);
  setenv("COLL_CHECK", "yes", 1);
  EXPECT_TRUE(check.get());
  unsetenv("COLL_CHECK");
  EXPECT_FALSE(check.get());

  setenv("COLL_TIMEOUT", "7", 1);
  EXPECT_EQ(defaultTimeoutMs(), 7000);
  setenv("COLL_TIMEOUT", "0", 1);  // nonsense: the default deadline stays
  EXPECT_EQ(defaultTimeoutMs(), 300000);
  unsetenv("COLL_TIMEOUT");

  const Knob* commId = findKnob("COLL_COMM_ID");
  ASSERT_NE(commId, nullptr);
  EXPECT_FALSE(commId->raw());
  setenv("COLL_COMM_ID", "", 1);  // empty counts as unset
  EXPECT_FALSE(commId->raw());
  setenv("COLL_COMM_ID", "host:1", 1);
  EXPECT_EQ(commId->raw(), "host:1");
  unsetenv("COLL_COMM_ID");
}

TEST(Config, EveryKnobIsDocumentedOnce) {
  std::set<std::string> names;
  for (const Knob* k : allKnobs()) {
    EXPECT_TRUE(names.insert(k->name()).second) << "declared twice: " << k->name();
    EXPECT_GT(std::string(k->doc()).size(), 5u) << k->name();
    if (!k->foreign()) {
      EXPECT_EQ(std::string(k->name()).rfind("COLL_", 0), 0u) << k->name();
    }
  }
}

// Knobs register themselves from the file of the part that reads them: each of these lives in a
// file that a program may not otherwise reference, so a missing one means the linker dropped it.
TEST(Config, EveryPartsKnobsAreRegistered) {
  for (const char* name :
       {"COLL_DEBUG", "COLL_TIMEOUT", "COLL_COMM_ID", "COLL_HOSTID", "COLL_TRANSPORT", "COLL_COMPRESS_MIN_BYTES",
        "COLL_NCCL_NET", "COLL_NSOCKS_PERPEER", "COLL_SHM_FIFO_BYTES", "COLL_SPIN_COUNT", "COLL_ALGO",
        "COLL_LINK_PROBE", "COLL_STREAM_LANES", "COLL_CHECK", "COLL_DUMP_ON_SIGNAL", "RANK", "SLURM_JOB_NODELIST"}) {
    EXPECT_NE(findKnob(name), nullptr) << name;
  }
#if COLL_HAVE_IBVERBS
  EXPECT_NE(findKnob("COLL_IB_TIMEOUT"), nullptr);
#endif
#if COLL_HAVE_UCX
  EXPECT_NE(findKnob("COLL_UCX_CONFIG"), nullptr);
#endif
}

TEST(Config, KnobsAreListedBySection) {
  const std::vector<const Knob*>& knobs = allKnobs();
  ASSERT_FALSE(knobs.empty());
  EXPECT_STREQ(knobs.front()->name(), "COLL_DEBUG");
  for (size_t i = 1; i < knobs.size(); ++i) {
    const KnobPlace a = knobs[i - 1]->place(), b = knobs[i]->place();
    EXPECT_TRUE(a.section < b.section || (a.section == b.section && a.order <= b.order)) << knobs[i]->name();
  }
}

}  // namespace
}  // namespace coll
