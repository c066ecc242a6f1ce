// libFuzzer target: the ib transport's connection data from a peer (checkIbConnectInfo), checked
// against a RoCE and an InfiniBand local port, and its lost-rail notice (checkIbRailNotice).
#include <cstddef>
#include <cstdint>

#include "transports/ib/ib_transport.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  coll::IbPortInfo local;
  local.device = "fuzz0";
  local.port = 1;
  local.ethernet = data[0] & 1;
  local.gidType = local.ethernet ? "RoCE v2" : "IB";
  uint32_t rail = 0;
  if (coll::checkIbRailNotice(data + 1, size - 1, 1 + (data[0] >> 1) % coll::kIbMaxRails, &rail).ok() &&
      rail >= static_cast<uint32_t>(coll::kIbMaxRails)) {
    __builtin_trap();
  }
  (void)coll::checkIbConnectInfo(data + 1, size - 1, std::span<const coll::IbPortInfo>(&local, 1), 1);
  return 0;
}
