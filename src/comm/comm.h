// Comm: one rank's communicator. Owns the bootstrap, the topology, the host's shared memory,
// the connections (made lazily, on first use of a peer), the planner's inputs, the plan cache and
// the executor. Collectives arrive as CollArgs from the API and leave as schedules.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <thread>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "algorithms/algorithms.h"
#include "src/oob/bootstrap.h"
#include "src/schedule/coll_args.h"
#include "src/base/deadline.h"
#include "src/oob/failure.h"
#include "src/plan/planner.h"
#include "src/base/status.h"
#include "src/comm/stream.h"
#include "src/exec/executor.h"
#include "src/schedule/schedule.h"
#include "src/topo/topology.h"
#include "transports/transport.h"

namespace coll {

class ShmHost;
class NetTransport;
class Lanes;

struct CommConfig {
  int64_t timeoutMs = 0;  // 0 = COLL_TIMEOUT
  std::string netName;    // "" = automatic
  std::string commName;
  // Internal (lanes.h): set when this communicator is a stream lane of `laneParent`. The lane takes
  // its parent's link model (no probe), PreMulSum ops and failures, and has no lanes of its own.
  class Comm* laneParent = nullptr;
};

class Comm final : public Links {
 public:
  static Status create(const collUniqueId& id, int nranks, int rank, const CommConfig& config,
                       std::unique_ptr<Comm>* out);
  ~Comm() override;

  int nranks() const { return topo_.nranks; }
  const Topology& topology() const { return topo_; }

  // Blocking host collective (the caller's thread runs the executor).
  Status collective(const CollArgs& args);

  // A batch of point-to-point calls (one group, or one call alone): all progress together.
  struct P2pCall {
    bool send;
    int32_t peer;
    void* buffer;
    uint64_t bytes;
  };
  Status pointToPoint(const P2pCall* calls, size_t ncalls);
  static P2pCall p2pCallOf(const CollArgs& sendOrRecv);

  // PreMulSum ops of this communicator: collNumOps + index.
  Status createPreMulSum(double scalar, collDataType_t dtype, collRedOp_t* op);
  Status destroyRedOp(collRedOp_t op);
  // True for a live PreMulSum op of this communicator (sets *scalar).
  bool preMulSumScalar(collRedOp_t op, double* scalar) const;
  // A user op (>= collNumOps) must be live here and made for `dtype`.
  Status checkUserOp(collRedOp_t op, collDataType_t dtype) const;

  // Stream-ordered work: one group (or one call) for this communicator. It runs on the
  // communicator's progress thread, started on first use, in issue order (every rank issues
  // work on a communicator in the same order, as NCCL requires); `stream` orders it against
  // other work on the same stream and reports completion.
  struct Work {
    std::vector<CollArgs> collectives;
    std::vector<P2pCall> p2p;
    std::shared_ptr<HostStream> stream;
    uint64_t ticket = 0;
  };
  Status enqueue(Work work);
  // Runs work now on this thread, or, once a progress thread exists, through it (so calls on
  // one communicator never run concurrently) and waits.
  Status runNow(Work work);
  // One call (collective or point-to-point): the blocking fast path, allocation-free while the
  // communicator has no progress thread.
  Status runNow(const CollArgs& args);

  const CommConfig& config() const { return config_; }
  Bootstrap& bootstrap() { return *bootstrap_; }
  // Numbers this communicator's collCommShrink calls: each shrink's bootstrap messages get their own tag.
  uint32_t nextShrinkSeq() { return shrinkSeq_.fetch_add(1, std::memory_order_relaxed); }

  // Stops every wait (peers may still be waiting for us: they will see the failure).
  void abort();
  // First fatal error of this communicator (collSuccess while healthy).
  collResult_t asyncError() const { return asyncError_.load(); }
  const std::string& failureMessage() const { return failureMessage_; }

  // Fault tolerance (failure.h; comm_failure.cc). The ranks known to have failed, in the order
  // learned; safe from any thread.
  std::vector<int> failedRanks() const { return failures_.ranks(); }
  // Logs what this rank is doing (op, pending steps, waited-for peers, failure record); any thread.
  void dump(const char* why);
  // Marks the communicator unusable here and on every rank.
  Status revoke();
  // The same for the communicator's stream lanes (lanes.h): collCommDump and collCommRevoke.
  void dumpLanes(const char* why);
  Status revokeLanes();
  // collCommGetStats (read by the thread that issues calls, or after synchronizing the stream).
  collCommStats_t stats() const;

  // Links (for the executor).
  int rank() const override { return topo_.rank; }
  Status connection(int peer, Connection** out) override;
  HostWindows* windows() override;
  uint64_t prepareWait() override;
  void wait(uint64_t token, int maxMs) override;
  void notifyPeers() override;
  Status checkHealth() override;
  bool aborting() const override {
    return aborted_.load(std::memory_order_relaxed) || failures_.interrupted();
  }

 private:
  friend class Lanes;
  Comm() = default;
  Status init(const collUniqueId& id, int nranks, int rank, const CommConfig& config);
  Deadline callDeadline() const { return Deadline::afterMs(timeoutMs_); }
  struct PlanEntry;
  Status runPlan(PlanEntry& plan, const CollArgs& args);
  // collAllReduceCompressed: the two-shot plan, or the plain All-Reduce below the size threshold.
  Status compressedAllReduce(const CollArgs& args);
  uint64_t wireBytes() const;
  // The planner's choice for this call: the one made for the last call of the same signature
  // (kind, count, type, op, root), else planCollective's, kept. The planner's inputs are fixed once
  // setupPlanner returns (the link probe, which runs before, plans with planCollective), and
  // evaluating every algorithm's model on every call (about 0.3 us a call) added about 1 us to an
  // 8 B All-Reduce of 8 ranks on 2 CPUs (7.3 us automatic, 6.3 us direct forced).
  Status choosePlan(const CollArgs& args, PlanChoice* out);
  // The plan for this call shape, from the cache or built now (the only allocation on a new shape).
  // callCount: the whole call's count when `args` is one round of it (for the INFO log only).
  PlanEntry& planFor(const CollArgs& args, const PlanChoice& choice, uint64_t callCount = 0);
  void buildPlan(const CollArgs& args, const PlanChoice& choice, Schedule* out) const;
  void logPlan(const CollArgs& args, const PlanChoice& choice, uint64_t callCount) const;
  // Planner inputs: topology, windows, COLL_ALGO, link parameters (knobs, else the probe).
  Status setupPlanner();
  // Measures the link classes the knobs leave open (COLL_LINK_PROBE) and agrees on them: every
  // rank ends with the measuring ranks' values, so every rank plans alike.
  struct LinkProbe {
    double intraAlpha = 0, intraBeta = 0, interAlpha = 0, interBeta = 0, gamma = 0;  // 0 = not measured
  };
  Status probeLinks(bool intra, bool inter, bool gamma, LinkProbe* out);
  // Which ranks share this machine's CPUs, from the rank table (topology.h setMachines).
  void setTopologyMachines();
  // `spins`: polls before the pair yields the CPU, about one round trip of the link measured.
  Status pingPong(int peer, bool initiator, uint64_t bigBytes, uint64_t spins, double* alpha, double* beta);
  Status runChecked(const CollArgs& args, const PlanChoice& choice);
  void fail(const Status& status);
  Status execute(const Work& work);
  // Runs calls[0..n) as one schedule when they can be fused (same type and op, no rounds, the
  // host windows large enough); sets *used to how many calls it ran (at least 1).
  Status runFusedPrefix(const CollArgs* calls, size_t n, size_t* used);
  Status annotate(const Status& status, const std::string& what);
  // COLL_CHECK: every rank compares this call's fingerprint with rank 0's.
  Status checkSameCall(const CollArgs& args);
  void progressLoop();
  void stopProgressThread();
  // Lane 0's own queue and fast path (enqueue/runNow pick the lane first).
  Status enqueueHere(Work work);
  Status runNowHere(Work work);

  // ---- stream lanes (lanes.h, lanes.cc) ----
  void startLanes();
  void stopLanes();
  void abortLanes();
  // A failed peer learned by a lane reaches its parent, and the parent's reaches every lane.
  void forwardFailure(int peer, const std::string& reason, int reportedBy);
  void addLaneStats(collCommStats_t* out) const;
  // A wait-for query finds this lane idle: what the rank's other lanes (or a lane being made) wait for.
  void answerFromLanes(WaitForAnswer* a);
  std::unique_ptr<Lanes> lanes_;  // COLL_STREAM_LANES > 1: lanes 1..L-1
  Comm* laneParent_ = nullptr;    // set on a lane's child communicator

  // COLL_TRANSPORT: Auto (shm on the host, net_ between hosts), Shm (every peer; one host only) or
  // Net (net_ for every peer, the same host included).
  enum class TransportKind { Auto, Shm, Net };
  // Picks net_ (COLL_TRANSPORT, COLL_NET, config.netName, the ranks' published availability).
  Status chooseNet();

  std::unique_ptr<Bootstrap> bootstrap_;
  Topology topo_;
  std::unique_ptr<ShmHost> shm_;
  TransportKind forced_ = TransportKind::Auto;
  std::vector<std::unique_ptr<Connection>> connections_;  // by peer rank, lazily made
  std::vector<Connection*> madeConnections_;               // the non-null entries of connections_
  collCommStats_t stats_{};
  bool loggedCompressFallback_ = false;
  std::unique_ptr<NetTransport> net_;                      // between hosts (or everywhere when forced)
  bool netUsed_ = false;                                   // a connection of net_ exists: sleep in poll()
  std::string netUnavailable_;                             // why this rank lacks ucx / ib (for errors)
  PlannerInputs plannerInputs_;
  int64_t timeoutMs_ = 0;
  std::string name_;
  uint64_t seq_ = 0;  // calls so far; the executor's call number is seq_ after increment
  WaitPolicy waitPolicy_;
  bool checkCalls_ = false;  // COLL_CHECK

  // A cached plan keeps its own prepared Execution: a repeated call only rebinds pointers.
  struct PlanEntry {
    PlanKey key;
    Schedule schedule;
    Execution execution;
  };
  std::list<PlanEntry> plans_;  // most recently used first, at most kMaxPlans
  static constexpr size_t kMaxPlans = 16;
  // choosePlan's recent choices, replaced round robin.
  struct ChoiceEntry {
    CollKind kind;
    uint64_t count;
    collDataType_t dtype;
    collRedOp_t op;
    int32_t root;
    PlanChoice choice;
  };
  std::vector<ChoiceEntry> choices_;
  size_t nextChoice_ = 0;
  static constexpr size_t kMaxChoices = 16;

  // Fused groups of collectives: rebuilt per group into kept storage.
  Schedule fused_;
  Execution fusedExecution_;
  std::vector<void*> fusedBuffers_;

  // Point-to-point batches: rebuilt per call into kept storage.
  Schedule p2pSchedule_;
  Execution p2pExecution_;
  std::vector<P2pOp> p2pOps_;
  std::vector<void*> p2pBuffers_;
  std::vector<P2pAlias> p2pAliases_;

  struct UserOp {
    bool live = false;
    collDataType_t dtype = collFloat32;
    double scalar = 1.0;
  };
  std::vector<UserOp> userOps_;
  std::vector<std::byte> preMulStaging_;  // scaled copy of the send buffer (PreMulSum)

  std::mutex queueMu_;
  std::condition_variable queueCv_;
  std::deque<Work> queue_;
  bool stopping_ = false;
  std::thread progressThread_;
  std::atomic<bool> threaded_{false};  // progressThread_ started (read without the lock)

  CommConfig config_;
  std::atomic<collResult_t> asyncError_{collSuccess};
  std::string failureMessage_;
  std::atomic<bool> aborted_{false};
  // ---- fault tolerance (comm_failure.cc) ----
  FailureRecord failures_;
  ExecSnapshot snapshot_;  // what the executor is doing, for dumps and peers' wait-for queries
  std::mutex failMu_;      // guards failureMessage_ (written by the listener thread too)
  struct Notice {
    uint32_t tag = 0;
    std::vector<uint8_t> payload;
    uint64_t id = 0;
    int subject = -1;  // the failed rank a FAILED notice names (told last)
  };
  std::mutex notifyMu_;
  std::condition_variable notifyCv_;
  std::deque<Notice> notifyQueue_;
  uint64_t noticesQueued_ = 0, noticesSent_ = 0;
  bool notifyStop_ = false;
  std::thread notifier_;  // sends FAILED / REVOKED notices to every rank, off the caller's path

  void startFailureHandling();
  void stopFailureHandling();
  int controlTimeoutMs() const;  // per control message: clamp(timeout / 8, 200 ms, 2 s)
  std::string hostOf(int peer) const;  // "198.18.0.4, pid 1234"
  void notifyAll(uint32_t tag, std::vector<uint8_t> payload, int subject);
  void notifyLoop();
  // Records `peer` failed (first failure wins); with `propagate`, tells every rank. True if news.
  bool recordFailure(int peer, const std::string& reason, int reportedBy, bool propagate);
  std::vector<uint8_t> onControl(int from, uint32_t tag, const std::vector<uint8_t>& payload);
  // collRemoteError naming the failed rank (or the revoker), or the earlier failure.
  Status checkUsable();
  void publishOp(const char* what, uint64_t count, int dtype);
  // Every executor run of this communicator: starts `execution` on the schedule (connecting to
  // its peers), publishes the op, runs it to completion with the snapshot, then diagnose(); the
  // inter-host transport knows the call is on (NetTransport::enterCall) throughout.
  Status runExecution(Execution& execution, const Schedule& schedule, const ExecBuffers& buffers, const char* what,
                      uint64_t count, int dtype);
  Status diagnose(const Status& st, const Execution& execution);
  Status consequence(const Status& st);
  // Waits briefly for a notice from another rank; true when one arrived (or the comm was revoked).
  bool awaitNotice();
  // A connection to `peer` could not be made: the peer is recorded failed (unless aborting).
  Status connectFailed(int peer, const Status& st);
  void followWaitChain(int first, uint64_t mySeq, int* culprit, std::string* reason, std::string* cycle);
  std::atomic<uint32_t> shrinkSeq_{0};
};

}  // namespace coll
