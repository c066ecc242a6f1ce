// Algorithm builders: each is a pure function (rank, topology, call) -> Schedule. No I/O, no
// threads, no globals; the executor runs what they build.
#pragma once

#include <cstdint>

#include "core/coll_args.h"
#include "exec/schedule.h"
#include "topo/topology.h"

namespace coll {

// Pipelined ring All-Reduce over all ranks: reduce-scatter then all-gather, p-1 steps each, with
// per-slice dependencies so a chunk moves on as soon as a slice has been reduced. collAvg
// becomes a sum plus one Divide of the rank's own chunk before the all-gather, so every rank
// ends with bit-identical results.
void buildRingAllReduce(const Topology& topo, const CollArgs& args, Schedule* out);

// Direct All-Reduce for ranks that share one host (topo.singleHost()): each rank copies its input
// into its host window; each rank reduces its slice reading every local window in rank order
// (or, below `reduceAllBelowBytes`, every rank reduces the whole vector, saving one hop), and
// copies the result out. Requires args.count * typesize to fit `maxWindowBytes` per rank (the
// planner splits larger calls into rounds). Dependencies between ranks use published progress
// slots and the previous-call counters, never messages.
struct DirectOptions {
  uint64_t windowHalfBytes = 0;      // bytes of each rank's window half
  uint64_t reduceAllBelowBytes = 0;  // every rank reduces everything below this size
};
void buildDirectAllReduce(const Topology& topo, const CollArgs& args, const DirectOptions& options,
                          Schedule* out);
// Largest message (bytes) one direct call can carry with this window half.
uint64_t directMaxBytes(uint64_t windowHalfBytes, int32_t localSize);

}  // namespace coll
