// Algorithm builders: each is a pure function (rank, topology, call) -> Schedule. No I/O, no
// threads, no globals; the executor runs what they build.
#pragma once

#include <cstdint>
#include <string>

#include "src/base/status.h"

#include "src/schedule/coll_args.h"
#include "src/schedule/schedule.h"
#include "src/topo/topology.h"

namespace coll {

// An algorithm, by its position in the registry (algorithms/registry.cc). The named ids are the
// algorithms other code refers to by name; an algorithm added to the registry needs no name here.
// COLL_ALGO uses algoName()'s spelling.
enum class AlgoId : uint8_t {
  Ring,               // pipelined ring (All-Reduce, Broadcast/Reduce chain, All-Gather, Reduce-Scatter)
  Direct,             // one host: shared windows, every rank reduces a slice (All-Reduce)
  Tree,               // All-Reduce: double binary tree; Broadcast/Reduce: binomial tree
  Bruck,              // All-Gather, small blocks
  Pairwise,           // All-to-All
  Linear,             // Gather, Scatter
  Dissemination,      // Barrier
  RecursiveDoubling,  // All-Reduce, small messages: ceil(log2 p) exchanges of the whole vector
  Rabenseifner,       // All-Reduce, medium: recursive-halving reduce-scatter + recursive-doubling all-gather
  Torus,              // All-Reduce over a 2D/3D grid, bidirectional rings per dimension
  Hierarchical,       // reduce-scatter inside each host, across hosts per shard, all-gather inside
  TwoShot,            // compressed All-Reduce: quantized all-to-all reduce-scatter + all-gather
};
const char* algoName(AlgoId algo);
// Parses algoName()'s spelling; false if unknown.
bool algoFromName(const std::string& name, AlgoId* out);

// Torus dimensions, fastest-varying first: rank = x + d[0] * (y + d[1] * z).
struct TorusDims {
  int32_t ndims = 0;  // 1, 2 or 3 (0 = unset)
  int32_t d[3] = {1, 1, 1};
  int64_t product() const { return static_cast<int64_t>(d[0]) * d[1] * d[2]; }
};
// The grid for `nranks` ranks: `forced` ("XxY" or "XxYxZ", from COLL_TORUS_DIMS) when given, which
// must multiply to nranks (else collInvalidUsage naming both); else localSize x nhosts when every
// host holds the same number of ranks (> 1 each, > 1 host) numbered in host blocks; else the most
// balanced factorisation into two or three factors (a prime rank count gives one dimension: a ring).
Status torusDimsFor(const Topology& topo, const std::string& forced, TorusDims* out);
// "4x2" (logs).
std::string torusDimsText(const TorusDims& dims);

// Planner choices a builder uses beyond the call itself.
struct AlgoOptions {
  int32_t channels = 1;             // ring-based: 2 = half the data each way round (both link directions)
  TorusDims torus;                  // Torus, and Hierarchical with interHost == Torus (dims over hosts)
  AlgoId interHost = AlgoId::Ring;  // Hierarchical: All-Reduce of each shard across hosts
                                    // (Ring, Tree, Torus, RecursiveDoubling or Rabenseifner)
  // All-Reduce: the schedule is built with the hosts in the planner's tuner's fabric order
  // (PlanTuner::hostOrder) instead of rank order, and its peers renamed back to real ranks
  // (Schedule::renameRanks). Builders never see it: the communicator applies it around them.
  bool fabricHostOrder = false;
};

// A rank with nobody to talk to: its result is its input (the average over one rank too).
// Returns true when it has completed the plan, so builders start with
// `if (planAlone(topo, count, &s)) return;`.
inline bool planAlone(const Topology& topo, uint64_t count, Schedule* s) {
  if (topo.nranks > 1) return false;
  s->addSelfCopy(count);
  s->finalizePeers();
  return true;
}

// Compressed All-Reduce, "two-shot": every rank quantizes each other rank's shard once
// (error feedback from the Residual buffer) and sends it to the shard's owner; the owner
// dequantizes and sums in float32 (its own shard at full precision), averages for collAvg, adds
// its residual, requantizes once and sends the result to every rank; every rank, the owner
// included, dequantizes the same bytes, so results are bit-identical everywhere. Shards are
// multiples of `blockSize` elements. Sum or avg of float32, float16 or bfloat16.
void buildCompressedAllReduce(const Topology& topo, const CollArgs& args, int blockSize, Schedule* out);
// The hierarchical variant: reduce-scatter inside each host at full precision (local rank i owns
// chunk i of whole blocks), the two-shot across hosts among the ranks with the same local index
// (so only inter-host traffic is compressed, and every NIC's ranks share the work), all-gather
// inside the host. Needs hosts with equal rank counts (compressedHierarchyApplies); otherwise it
// builds the flat two-shot.
bool compressedHierarchyApplies(const Topology& topo);
void buildHierarchicalCompressedAllReduce(const Topology& topo, const CollArgs& args, int blockSize, Schedule* out);

// Pipelined ring All-Reduce over all ranks: reduce-scatter then all-gather, p-1 steps each, with
// per-slice dependencies so a chunk moves on as soon as a slice has been reduced. collAvg
// becomes a sum plus one Divide of the rank's own chunk before the all-gather, so every rank
// ends with bit-identical results.
// channels == 2 runs half the data each way round the ring (uses both directions of every link).
void buildRingAllReduce(const Topology& topo, const CollArgs& args, Schedule* out, int32_t channels = 1);

// ---- algorithms for scale. All correct for any rank count; collAvg divides once, so
// every rank ends with bit-identical results.

// Recursive doubling: ceil(log2 p) exchanges of the whole vector (non-powers of two: the first
// 2(p - p') ranks pair up before and after, p' the largest power of two <= p).
void buildRecursiveDoublingAllReduce(const Topology& topo, const CollArgs& args, Schedule* out);
// Rabenseifner: recursive-halving reduce-scatter then recursive-doubling all-gather (same
// non-power-of-two pairing), 2 log2 p' steps moving 2(p'-1)/p' of the vector.
void buildRabenseifnerAllReduce(const Topology& topo, const CollArgs& args, Schedule* out);
// NCCL's double binary tree: two complementary binary trees over the hosts, each carrying half
// the data, pipelined (reduce up, broadcast down); inside each host a chain. Depth floor(log2 H)
// edges plus the chain (L - 1 edges for L ranks per host).
void buildDoubleBinaryTreeAllReduce(const Topology& topo, const CollArgs& args, Schedule* out);
// Torus: reduce-scatter along each dimension in turn, then all-gather back in reverse order,
// each as two half-size rings running in opposite directions. 2 * sum(d_i - 1) steps per direction.
void buildTorusAllReduce(const Topology& topo, const CollArgs& args, const TorusDims& dims, Schedule* out);
// Hierarchical: ring reduce-scatter inside each host, an All-Reduce of every shard across hosts
// (options.interHost, among the ranks that own that shard on each host, so every local rank
// drives its own shard), ring all-gather inside each host. Hosts may hold different numbers of
// ranks (shards are cut at every host's chunk boundaries).
void buildHierarchicalAllReduce(const Topology& topo, const CollArgs& args, const AlgoOptions& options, Schedule* out);
// The same hierarchy for the other collectives where it pays (uniform hosts: every host holds the
// same number of ranks, ranks in blocks; the builders assert it and the planner checks it):
// Reduce-Scatter: inside each host, reduce-scatter into per-local-index pieces; then
// reduce-scatter across hosts among equal local indices. All-Gather: the reverse. Broadcast: the
// root's data goes across hosts (one rank per host, tree or chain), then inside each host.
void buildHierarchicalReduceScatter(const Topology& topo, const CollArgs& args, Schedule* out);
void buildHierarchicalAllGather(const Topology& topo, const CollArgs& args, Schedule* out);
void buildHierarchicalBroadcast(const Topology& topo, const CollArgs& args, Schedule* out);
// True when every host holds the same number of ranks and ranks are numbered in host blocks.
bool uniformBlockHosts(const Topology& topo);

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
void buildDirectAllReduce(const Topology& topo, const CollArgs& args, const DirectOptions& options, Schedule* out);
// Largest message (bytes) one direct call can carry with this window half.
uint64_t directMaxBytes(uint64_t windowHalfBytes, int32_t localSize);

// Direct Reduce-Scatter for ranks that share one host: each rank copies the blocks its peers own
// into its window (a region per peer), each rank sums its own block (its send block first, then
// the peers' regions in local-rank order) straight into the receive buffer. Calls larger than the
// window run as rounds inside the one schedule, two buffers of regions alternating, so a rank
// copies round k+1 while its peers still read round k; a marker step per round (published) says
// "my copies of round k and my reduction of round k-1 are done". Uses options.windowHalfBytes.
void buildDirectReduceScatter(const Topology& topo, const CollArgs& args, const DirectOptions& options, Schedule* out);
// How a direct Reduce-Scatter of `count` elements per rank cuts into rounds (rounds 0: count 0).
struct DirectReduceScatterShape {
  uint64_t rounds = 0;
  uint64_t roundElems = 0;   // elements per block per round (the last round may hold fewer)
  uint64_t regionBytes = 0;  // one peer's region of one buffer
  int32_t buffers = 0;       // 1 (one round) or 2
  uint64_t windowBytes = 0;  // of the window half
};
DirectReduceScatterShape directReduceScatterShape(uint64_t count, uint64_t elemBytes, uint64_t windowHalfBytes,
                                                  int32_t localSize);

// Direct All-Gather for ranks that share one host: each rank copies its block into its window
// once, then copies every peer's block straight from the peer's window into its receive buffer
// (its own from the send buffer; nothing in place). Calls larger than the window half run as
// rounds, two buffers alternating, with one published marker per round as in the direct
// Reduce-Scatter. Uses options.windowHalfBytes.
void buildDirectAllGather(const Topology& topo, const CollArgs& args, const DirectOptions& options, Schedule* out);
// How a direct All-Gather of `count` elements per rank cuts into rounds (regionBytes: one buffer).
using DirectAllGatherShape = DirectReduceScatterShape;
DirectAllGatherShape directAllGatherShape(uint64_t count, uint64_t elemBytes, uint64_t windowHalfBytes);

// ---- the other collectives. Each builder takes NCCL's per-collective count (see
// CollKind) and turns collAvg into collSum + Divide where it reduces. Builders that talk to a
// root take args.root; every rank's schedule of one call must agree on the transfers between
// every pair (the stream order rule of schedule.h).

// Pipelined chain from the root around the ring (large messages: every link carries the data
// once, slices stream through).
void buildRingBroadcast(const Topology& topo, const CollArgs& args, Schedule* out);
// Binomial tree rooted at args.root (small messages: ceil(log2 p) hops).
void buildTreeBroadcast(const Topology& topo, const CollArgs& args, Schedule* out);
// Pipelined chain towards the root, each rank reducing as slices pass (large messages).
void buildRingReduce(const Topology& topo, const CollArgs& args, Schedule* out);
// Binomial tree towards the root (small messages).
void buildTreeReduce(const Topology& topo, const CollArgs& args, Schedule* out);
// Ring all-gather: p-1 steps, forwarding what arrived.
void buildRingAllGather(const Topology& topo, const CollArgs& args, Schedule* out);
// Bruck all-gather: ceil(log2 p) steps for any p, in scratch, then rotated into place (small).
void buildBruckAllGather(const Topology& topo, const CollArgs& args, Schedule* out);
// Ring reduce-scatter: p-1 steps; collAvg divides the rank's own block at the end.
void buildRingReduceScatter(const Topology& topo, const CollArgs& args, Schedule* out);
// Pairwise all-to-all: in step k rank r sends to r+k and receives from r-k; no step waits for
// another, so the executor keeps them all in flight.
void buildPairwiseAlltoAll(const Topology& topo, const CollArgs& args, Schedule* out);
// Root receives (gather) / sends (scatter) every rank's block directly; the others one step.
void buildLinearGather(const Topology& topo, const CollArgs& args, Schedule* out);
void buildLinearScatter(const Topology& topo, const CollArgs& args, Schedule* out);
// Dissemination barrier: ceil(log2 p) rounds of 8-byte tokens through scratch.
void buildDisseminationBarrier(const Topology& topo, Schedule* out);

// A batch of point-to-point operations issued in one group (or one alone), as one schedule of
// bytes: op i reads or writes ExecBuffers::extra[i]. All of them progress together, so any mix
// of sends and receives completes as long as the peers issued the matching operations;
// operations between one pair match in issue order.
struct P2pOp {
  bool send = true;
  int32_t peer = -1;
  uint64_t bytes = 0;
};
// A receive whose buffer overlaps a send's buffer in the same batch (nccl-tests' in-place
// sendrecv passes one buffer to both): the receive may overwrite byte i only after the send has
// read it. `sameStart` (the buffers start at the same address) allows a per-byte dependency,
// so both directions keep streaming; otherwise the receive waits for the whole send.
struct P2pAlias {
  int32_t recvOp = -1;
  int32_t sendOp = -1;
  bool sameStart = true;
};
void buildP2pBatch(const Topology& topo, const P2pOp* ops, size_t nops, Schedule* out,
                   const P2pAlias* aliases = nullptr, size_t naliases = 0);

}  // namespace coll
