// The ranks of a host agree on one view of their node's hardware: the host's first rank sends its
// summary (hw_topology.h) to the others, who check it against their own and keep the first rank's.
#pragma once

#include <cstdint>
#include <vector>

#include "src/base/deadline.h"
#include "src/base/status.h"
#include "src/oob/bootstrap.h"
#include "src/topo/hw_topology.h"

namespace coll {

constexpr uint32_t kNodeTopologyTag = 0x54500001u;  // "TP": the summary, first local rank -> others
constexpr size_t kNodeTopologyMaxBytes = 1u << 20;

// `localRanks`: this host's ranks, ascending (Topology::localRanks). The first sends `mine`; every
// other rank receives it, warns when it differs from `mine` (naming both hashes) and returns the
// first rank's in `agreed`. A summary that does not parse is an error naming the sender.
Status agreeNodeTopology(Bootstrap& bootstrap, const std::vector<int32_t>& localRanks, const HwTopology& mine,
                         HwTopology* agreed, Deadline deadline);

}  // namespace coll
