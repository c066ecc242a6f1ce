// Schedule cost: per-rank counts of a schedule (steps, messages and bytes per link class) and a
// modelled completion time of a collective evaluated from the actual schedules of its ranks.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "src/base/status.h"
#include "src/schedule/schedule.h"
#include "src/topo/topology.h"

namespace coll {

enum class LinkClass : uint8_t { SameHost = 0, CrossHost = 1 };
inline constexpr int kLinkClasses = 2;
// StepKind values; DequantAccumulate is the last (schedule.h), so this grows with the enum.
inline constexpr int kStepKinds = static_cast<int>(StepKind::DequantAccumulate) + 1;

// What one rank's schedule does. A message is a Send step with count > 0 (zero-count steps are
// complete from the start in the executor and move nothing).
struct ScheduleCounts {
  uint64_t steps = 0;
  uint64_t byKind[kStepKinds] = {};
  uint64_t messages[kLinkClasses] = {};
  uint64_t bytesSent[kLinkClasses] = {};
  uint64_t receives[kLinkClasses] = {};
  uint64_t bytesReceived[kLinkClasses] = {};

  uint64_t kind(StepKind k) const { return byKind[static_cast<int>(k)]; }
  uint64_t totalMessages() const { return messages[0] + messages[1]; }
  uint64_t totalBytesSent() const { return bytesSent[0] + bytesSent[1]; }
  uint64_t totalBytesReceived() const { return bytesReceived[0] + bytesReceived[1]; }
};
ScheduleCounts countSchedule(const Schedule& s, const Topology& topo);

// Topologies of the ranks of a uniform world (`ranksPerHost` consecutive ranks per host, as
// Topology::uniform) one after another, without rebuilding the O(p) rank table per rank: at
// 100,000 ranks Topology::uniform per rank alone would be O(p^2).
class UniformTopologies {
 public:
  UniformTopologies(int32_t nranks, int32_t ranksPerHost);
  // Valid until the next call.
  const Topology& at(int32_t rank);

 private:
  Topology topo_;
  int32_t ranksPerHost_;
};

// Alpha-beta link: a message of n bytes occupies the sender's and the receiver's port of its
// class for n / bytesPerSecond and arrives alphaSeconds after that.
struct LinkParams {
  double alphaSeconds = 0;
  double bytesPerSecond = 1;
};
struct LinkModel {
  // Indexed by LinkClass; the defaults describe a GPU cluster: 1 us and 200 GB/s per rank inside a node,
  // 5 us and 50 GB/s per rank across nodes.
  LinkParams link[kLinkClasses] = {{1e-6, 200e9}, {5e-6, 50e9}};
  double memoryBytesPerSecond = 200e9;     // local Copy / Reduce / Divide
  uint64_t defaultSliceBytes = 128 << 10;  // when Schedule::sliceBytes is 0 (COLL_SLICE_BYTES' default)
};

// Builds the schedule of rank topo.rank.
using ScheduleBuilder = std::function<void(const Topology& topo, Schedule* out)>;

enum class CostMode : uint8_t {
  Exact,      // every rank's schedule, every message
  Symmetric,  // the ranks of host 0 only; every other host runs in lockstep with it
};

// The symmetry a Symmetric evaluation assumes: hosts form a grid (fastest dimension first,
// product = number of hosts; ndims = 0 means one cycle of all hosts) and the schedule of host g's
// ranks is host 0's translated by g (peers' hosts shifted in the grid, local indices kept). A flat
// ring, a ring across hosts and a torus whose slowest dimension is the hosts are translation
// invariant on the cycle; a torus over hosts on its own grid. Trees are not (their root is
// special): evaluate them exactly.
struct HostSymmetry {
  int32_t ndims = 0;
  int32_t d[3] = {1, 1, 1};
};

struct CostOptions {
  CostMode mode = CostMode::Exact;
  HostSymmetry symmetry;
  // Evaluations that would hold more steps than this fail with collInvalidUsage (memory: about
  // 100 bytes per step) instead of swapping.
  uint64_t maxSteps = 16'000'000;
};

struct CostResult {
  double seconds = 0;  // completion of the last step of any evaluated rank
  CostMode mode = CostMode::Exact;
  int32_t ranksEvaluated = 0;
  uint64_t stepsEvaluated = 0;
  uint64_t transfers = 0;
  std::vector<double> rankSeconds;  // per evaluated rank (ranks 0 .. ranksEvaluated-1)
  ScheduleCounts maxPerRank;        // component-wise maximum over the evaluated ranks
  // Symmetric only: transfers whose two ends on host 0 disagree on the byte count (chunks cut at
  // rank-indexed boundaries of a count that does not divide evenly); the larger count is used.
  uint64_t asymmetricTransfers = 0;
};

// Models the completion time of one collective: `build` makes every evaluated rank's schedule
// (nranks ranks, ranksPerHost consecutive ranks per host) and a discrete-event evaluation runs
// them all under `model`. See schedule_cost.cc for the rules of the model.
Status modelScheduleTime(const ScheduleBuilder& build, int32_t nranks, int32_t ranksPerHost, const LinkModel& model,
                         const CostOptions& options, CostResult* out);

// The graph modelScheduleTime evaluates, for other evaluators of the same schedules (the fabric
// simulator, src/sim): a wire per transfer (the Send step and its bytes in flight), a receive per
// receive step, a node per non-inert local step; edges say how a dependent waits (schedule_cost.cc).
enum class GraphNodeKind : uint8_t { Wire, Receive, Local };
struct GraphNode {
  double occupancy = 0;     // wire: port time at the class bandwidth; local: duration
  double lag = 0;           // one slice of this node (wire: alpha included)
  uint64_t bytes = 0;       // wire: bytes carried
  uint64_t firstBytes = 0;  // wire: bytes of its first slice
  uint64_t key = 0;         // tie order: (local index of the rank << 32) | step index in its schedule
  uint32_t sender = 0;      // wire: evaluated sending rank; receive, local: the rank
  uint32_t receiver = 0;    // wire: evaluated receiving rank (symmetric: host 0's translate)
  int32_t peer = -1;        // wire: the global rank receiving (the Send step's peer)
  uint32_t pending = 0;     // incoming edges
  uint8_t cls = 0;          // wire: LinkClass
  GraphNodeKind kind = GraphNodeKind::Local;
};
// An edge is the dependent node's index tagged (bits 30-31) with how it waits.
inline constexpr uint32_t kGraphEdgeSlice = 0, kGraphEdgeWhole = 1u << 30, kGraphEdgeStream = 2u << 30,
                          kGraphEdgeArrival = 3u << 30, kGraphEdgeMask = 3u << 30;
struct ScheduleGraph {
  std::vector<GraphNode> nodes;
  std::vector<uint32_t> edgeBegin;  // CSR by source node
  std::vector<uint32_t> edges;
  int32_t nranks = 0;
  int32_t ranksPerHost = 0;
  int32_t ranksEvaluated = 0;
};
// Builds the graph of one collective as modelScheduleTime does (same checks and errors); `out`
// gets everything but the times.
Status buildScheduleGraph(const ScheduleBuilder& build, int32_t nranks, int32_t ranksPerHost, const LinkModel& model,
                          const CostOptions& options, ScheduleGraph* graph, CostResult* out);

// Steps of rank 0's schedule times nranks: what an exact evaluation would hold (to choose a mode).
uint64_t estimateTotalSteps(const ScheduleBuilder& build, int32_t nranks, int32_t ranksPerHost);

}  // namespace coll
