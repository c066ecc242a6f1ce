// Comm: one rank's communicator, the facade the API calls. It owns the bootstrap and the topology,
// and wires the parts that do the work: the links to the peers (connections.h), the planner's
// inputs and plans (plan_cache.h), failure handling (failure_manager.h), the stream-ordered work
// queue (work_queue.h) and the stream lanes (lanes.h). Collectives arrive as CollArgs from the API
// and leave as schedules run by the executor.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "src/base/deadline.h"
#include "src/base/status.h"
#include "src/comm/buffer_registry.h"
#include "src/comm/connections.h"
#include "src/comm/device_calls.h"
#include "src/comm/failure_manager.h"
#include "src/comm/plan_cache.h"
#include "src/comm/trace.h"
#include "src/comm/user_ops.h"
#include "src/comm/work_queue.h"
#include "src/exec/executor.h"
#include "src/oob/bootstrap.h"
#include "src/plan/link_probe.h"
#include "src/schedule/coll_args.h"
#include "src/schedule/schedule.h"
#include "src/topo/placement.h"
#include "src/topo/topology.h"

namespace coll {

class Lanes;

struct CommConfig {
  int64_t timeoutMs = 0;  // 0 = COLL_TIMEOUT
  std::string netName;    // "" = automatic
  // 0..255 (collConfig_t.trafficClass), applied by the net transport to its connections.
  int trafficClass = kTrafficClassUnset;
  std::string commName;
  // collCommInitRankScalable: every root's id (the first is the communicator's); empty: one root.
  std::vector<collUniqueId> rootIds;
  // Internal (lanes.h): set when this communicator is a stream lane of `laneParent`. The lane takes
  // its parent's link model (no probe), PreMulSum ops and failures, and has no lanes of its own.
  class Comm* laneParent = nullptr;
};

class Comm final : private LaneFailureHooks, private ProbeChannel {
 public:
  static Status create(const collUniqueId& id, int nranks, int rank, const CommConfig& config,
                       std::unique_ptr<Comm>* out);
  ~Comm();

  int rank() const { return topo_.rank; }
  int nranks() const { return topo_.nranks; }
  const Topology& topology() const { return topo_; }

  // Blocking host collective (the caller's thread runs the executor). `scalar`: the value of a
  // PreMulSum op's device scalar, read by the caller (device calls); nullptr otherwise.
  Status collective(const CollArgs& args, const double* scalar = nullptr);

  // A batch of point-to-point calls (one group, or one call alone): all progress together.
  using P2pCall = coll::P2pCall;
  Status pointToPoint(const P2pCall* calls, size_t ncalls);
  static P2pCall p2pCallOf(const CollArgs& sendOrRecv);

  // PreMulSum ops of this communicator (a lane's are its parent's): collNumOps + index.
  // deviceScalar: collScalarDevice's address (read per call), else nullptr and `scalar` is the value.
  Status createPreMulSum(double scalar, const void* deviceScalar, collDataType_t dtype, collRedOp_t* op);
  Status destroyRedOp(collRedOp_t op);
  // True for a live PreMulSum op of this communicator (sets *scalar, and *deviceScalar when given).
  bool preMulSumScalar(collRedOp_t op, double* scalar, const void** deviceScalar = nullptr) const;
  // A user op (>= collNumOps) must be live here and made for `dtype`.
  Status checkUserOp(collRedOp_t op, collDataType_t dtype) const;

  // Stream-ordered work: one group (or one call) for this communicator. It runs on the
  // communicator's progress thread, started on first use, in issue order (every rank issues
  // work on a communicator in the same order, as NCCL requires); `stream` orders it against
  // other work on the same stream and reports completion.
  using Work = CommWork;
  Status enqueue(Work work);
  // Runs work now on this thread, or, once a progress thread exists, through it (so calls on
  // one communicator never run concurrently) and waits.
  Status runNow(Work work);
  // One call (collective or point-to-point): the blocking fast path, allocation-free while the
  // communicator has no progress thread.
  Status runNow(const CollArgs& args);
  // Stream-ordered work (host or device streams) queued or running on this communicator or its
  // lanes now: calls that need the communicator to themselves refuse to start beside it.
  size_t streamWorkOutstanding() const;

  // Work on device buffers (device_calls.h): passes the stream gate on `stream` now, runs on the
  // progress thread (lane 0) when the stream reaches it. The first such call binds the
  // communicator to `device` (unless collCommInitAll or the current context at creation did);
  // buffers of another device are refused.
  Status enqueueDevice(Work work, CUstream stream, int device);
  // The CUDA device this communicator is bound to (-1: none yet).
  int cudaDevice() const { return cudaDevice_.load(std::memory_order_acquire); }
  // Binds the communicator to `device` (collCommInitAll's device list); fails if bound to another.
  Status bindDevice(int device);
  // Buffers registered with this communicator (collCommRegister).
  BufferRegistry& registry() { return registry_; }

  const CommConfig& config() const { return config_; }
  // The deadline of every wait: the config's timeoutMs, else COLL_TIMEOUT.
  int64_t timeoutMs() const { return timeoutMs_; }
  Bootstrap& bootstrap() { return *bootstrap_; }
  // Numbers this communicator's collCommShrink calls: each shrink's bootstrap messages get their own tag.
  uint32_t nextShrinkSeq() { return shrinkSeq_.fetch_add(1, std::memory_order_relaxed); }
  // The grow ids this communicator's rank 0 made (collCommGetUniqueId), by their nonce: collCommGrow
  // takes only those, each once.
  void rememberGrowId(uint64_t nonce);
  bool takeGrowId(uint64_t nonce);

  // Stops every wait (peers may still be waiting for us: they will see the failure).
  void abort();
  // First fatal error of this communicator (collSuccess while healthy).
  collResult_t asyncError() const { return failure_.asyncError(); }
  const std::string& failureMessage() const { return failure_.failureMessage(); }

  // Fault tolerance (failure_manager.h). The ranks known to have failed, in the order learned;
  // safe from any thread.
  std::vector<int> failedRanks() const { return failure_.failedRanks(); }
  // Logs what this rank is doing (op, pending steps, waited-for peers, failure record); any thread.
  void dump(const char* why) { failure_.dump(why); }
  // Marks the communicator unusable here and on every rank.
  Status revoke() { return failure_.revoke(); }
  // The same for the communicator's stream lanes (lanes.h): collCommDump and collCommRevoke.
  void dumpLanes(const char* why);
  Status revokeLanes();
  // collCommGetStats (read by the thread that issues calls, or after synchronizing the stream).
  collCommStats_t stats() const;
  // How many stream lanes exist now: 1 (this communicator) plus the lanes' communicators made so
  // far (all of them once the first call has started, unless COLL_LAZY_SETUP=1). Any thread.
  int lanesMade();
  // collCommSetProfiler: the callback of this communicator's and its lanes' operations.
  void setProfiler(collProfileCallback_t callback, void* userData) {
    profilerHook_.userData.store(userData, std::memory_order_release);
    profilerHook_.callback.store(callback, std::memory_order_release);
  }

 private:
  friend class Lanes;
  Comm();
  Status init(const collUniqueId& id, int nranks, int rank, const CommConfig& config);
  Deadline callDeadline() const { return Deadline::afterMs(timeoutMs_); }
  // Which ranks share this machine's CPUs, from the rank table (topology.h setMachines).
  void setTopologyMachines();
  // Planner inputs: topology, windows, the planner's knobs, the link model (knobs, else the probe).
  Status setupPlanner();
  // COLL_LAZY_SETUP=0: what the first calls would otherwise pay for (the shared memory's pages, the
  // lanes' communicators), run by setup_ from the end of init; every rank's setup_ takes part in
  // making the lanes. awaitSetup: the first blocking call (on the caller's thread), the first
  // queued work (on a progress thread: enqueue does not block) and the destructor wait for it;
  // its failure is theirs.
  Status setUpAhead();
  Status awaitSetup();
  // The shared memory's pages this rank uses, and scratch for calls up to a window half.
  void prefaultMemory();
  // The node's hardware, agreed with this host's ranks, and this rank's place in it, for the
  // transports' choices (comm_placement.cc).
  Status setupPlacement(Deadline deadline);
  // Where this rank's GPU sits in its node's ring order (intraNodeRing over all the node's GPUs),
  // published in the rank table (PeerInfo::ringKey); -1 for a host rank or a GPU the node's
  // topology does not show (comm_placement.cc).
  static int32_t gpuRingKey();
  // Each host's ranks in the order of their ring keys, for every plan (PlanCache::setLocalOrder).
  void setupLocalOrder();

  using PlanEntry = PlanCache::PlanEntry;
  Status runPlan(PlanEntry& plan, const CollArgs& args);
  Status runChecked(const CollArgs& args, const PlanChoice& choice);
  // collAllReduceCompressed: the two-shot plan, or the plain All-Reduce below the size threshold.
  Status compressedAllReduce(const CollArgs& args);
  // Every executor run of this communicator: starts `execution` on the schedule (connecting to
  // its peers), publishes the op, runs it to completion with the snapshot, then diagnoses a
  // failure; the inter-host transport knows the call is on (NetTransport::enterCall) throughout.
  Status runExecution(Execution& execution, const Schedule& schedule, const ExecBuffers& buffers, const char* what,
                      uint64_t count, int dtype);
  template <bool kObserved>
  Status runExecutionAs(Execution& execution, const Schedule& schedule, const ExecBuffers& buffers, const char* what,
                        uint64_t count, int dtype);
  Status execute(const Work& work);
  // A piece of device work on the progress thread: wait for the user's stream, stage, run.
  Status executeOnDevice(const Work& work);
  // Runs calls[0..n) as one schedule when they can be fused (same type and op, no rounds, the
  // host windows large enough); sets *used to how many calls it ran (at least 1).
  Status runFusedPrefix(const CollArgs* calls, size_t n, size_t* used);
  Status annotate(const Status& status, const std::string& what);
  // COLL_CHECK: every rank compares this call's fingerprint with every other rank's.
  Status checkSameCall(const CollArgs& args);
  // Lane 0's own queue and fast path (enqueue/runNow pick the lane first).
  Status runNowHere(Work work);
  // The stream lane of the next piece of work (lanes_ set): point-to-point-only work does not
  // advance the lane index (Lanes::peek).
  int laneOf(bool pointToPointOnly);

  // ProbeChannel (the link probe's calls).
  Status transfer(bool send, int peer, void* buffer, uint64_t bytes) override;
  Status allGather(const void* mine, void* all, uint64_t bytes) override;
  WaitPolicy& waitPolicy() override { return links_.waitPolicy(); }

  // ---- stream lanes (lanes.h, lanes.cc) ----
  void startLanes();
  void stopLanes();
  void abortLanes();
  void addLaneStats(collCommStats_t* out) const;
  // LaneFailureHooks: a failed peer learned by a lane reaches its parent, and the parent's every
  // lane; a wait-for query finds this lane idle: what the rank's other lanes (or a lane being made)
  // wait for.
  void forwardFailure(int peer, const std::string& reason, int reportedBy) override;
  void answerFromLanes(WaitForAnswer* a) override;

  CommConfig config_;
  Comm* laneParent_ = nullptr;  // set on a lane's child communicator
  int64_t timeoutMs_ = 0;
  std::unique_ptr<Bootstrap> bootstrap_;
  Topology topo_;
  HwTopology node_;          // the node's hardware (setupPlacement; empty where nothing needed it)
  int32_t ringKey_ = -1;     // gpuRingKey(), or a lane's parent's
  PlacementHint placement_;  // node == nullptr: no placement
  FailureManager failure_;
  ProfilerHook profilerHook_;  // a lane uses its parent's
  CommTracer tracer_;
  Connections links_;
  PlanCache plans_;
  WorkQueue queue_;
  std::unique_ptr<Lanes> lanes_;  // COLL_STREAM_LANES > 1: lanes 1..L-1
  std::thread setup_;             // setUpAhead, until awaitSetup joins it
  std::once_flag setupJoined_;
  std::atomic<bool> setupDone_{true};  // false while setup_ may still run
  std::atomic<bool> lanesPending_{false};  // setup_ has yet to make the lanes (or fail to)
  Status setupStatus_;
  SharedScratch sharedScratch_;  // this communicator's and its lanes' (a lane uses its parent's)
  UserOps userOps_;
  bool checkCalls_ = false;  // COLL_CHECK
  uint64_t seq_ = 0;         // collective calls so far (every rank's same count; point-to-point batches do not count)
  collCommStats_t stats_{};
  bool loggedCompressFallback_ = false;
  std::vector<std::byte> preMulStaging_;  // scaled copy of the send buffer (PreMulSum)

  // Kept storage, rebuilt per call: fused groups of collectives, and point-to-point batches.
  struct FusedBatch {
    Schedule schedule;
    Execution execution;
    std::vector<void*> buffers;
  } fused_;
  struct P2pBatch {
    Schedule schedule;
    Execution execution;
    std::vector<P2pOp> ops;
    std::vector<void*> buffers;
    std::vector<P2pAlias> aliases;
  } p2p_;
  std::atomic<uint32_t> shrinkSeq_{0};
  std::mutex growIdsMu_;
  std::vector<uint64_t> growIds_;  // growIdsMu_
  // GPU side: made by the first call on device buffers; destroyed after the progress thread.
  std::mutex deviceMu_;
  std::unique_ptr<DeviceCalls> device_;
  std::atomic<int> cudaDevice_{-1};
  BufferRegistry registry_;
};

}  // namespace coll
