// libFuzzer target: the node topology summary a host's first rank sends its other ranks
// (HwTopology::parse); whatever it accepts must re-encode to the same bytes and be safe to use.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "src/topo/hw_topology.h"
#include "src/topo/placement.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  coll::HwTopology t;
  if (!coll::HwTopology::parse(data, size, &t).ok()) return 0;
  std::vector<uint8_t> again = t.serialize();
  if (again.size() != size || !std::equal(again.begin(), again.end(), data)) __builtin_trap();
  // Every index placement follows must be in range: these walk all of them.
  (void)t.describe();
  if (t.pci.size() < 64 && t.gpus.size() <= 8 && t.nics.size() < 16) (void)coll::describePlacement(t);
  return 0;
}
