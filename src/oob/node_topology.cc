// One view of the node's hardware per host (see node_topology.h).
#include "src/oob/node_topology.h"

#include "src/base/log.h"

namespace coll {

Status agreeNodeTopology(Bootstrap& bootstrap, const std::vector<int32_t>& localRanks, const HwTopology& mine,
                         HwTopology* agreed, Deadline deadline) {
  const int rank = bootstrap.rank();
  if (localRanks.size() <= 1 || localRanks.front() == rank) {
    // Every send waits for its acknowledgement; a host has tens of ranks at most.
    if (localRanks.size() > 1) {
      std::vector<uint8_t> bytes = mine.serialize();
      for (size_t i = 1; i < localRanks.size(); ++i) {
        COLL_TRY(bootstrap.send(localRanks[i], kNodeTopologyTag, bytes.data(), bytes.size(), deadline)
                     .withContext("sending this node's topology summary to local rank " + std::to_string(i)));
      }
    }
    *agreed = mine;
    return okStatus();
  }
  const int32_t first = localRanks.front();
  std::vector<uint8_t> bytes;
  COLL_TRY(bootstrap.recv(first, kNodeTopologyTag, &bytes, kNodeTopologyMaxBytes, deadline)
               .withContext("receiving the node's topology summary from rank " + std::to_string(first)));
  HwTopology theirs;
  COLL_TRY(HwTopology::parse(bytes.data(), bytes.size(), &theirs)
               .withContext("the node topology summary from rank " + std::to_string(first)));
  if (theirs.hash() == mine.hash()) {
    *agreed = mine;
    return okStatus();
  }
  {
    COLL_WARN(rank,
              "topology: this rank sees a node of %d CPUs, %zu GPUs, %zu NICs (summary %016llx, from %s) but the "
              "host's first rank %d sees %d CPUs, %zu GPUs, %zu NICs (summary %016llx); using rank %d's (check "
              "COLL_TOPO_FILE and the ranks' cgroups)",
              mine.pus, mine.gpus.size(), mine.nics.size(), static_cast<unsigned long long>(mine.hash()),
              mine.source.c_str(), first, theirs.pus, theirs.gpus.size(), theirs.nics.size(),
              static_cast<unsigned long long>(theirs.hash()), first);
  }
  theirs.source = "rank " + std::to_string(first) + "'s view";
  *agreed = std::move(theirs);
  return okStatus();
}

}  // namespace coll
