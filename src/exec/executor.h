// Executor: runs one rank's Schedule over the links of its communicator. It cuts steps into
// slices, keeps every slice whose dependencies are met in flight, progresses sends and receives
// together, fuses receive with reduce (data is reduced straight out of the transport's buffer),
// and reports the first error with the step and peer. It is the only code that calls both
// transports and kernels. The core is non-blocking (poll), so one thread can drive many ranks
// (the in-process executor) or many calls (a progress thread).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "src/base/config.h"
#include "src/base/deadline.h"
#include "src/base/status.h"
#include "src/schedule/schedule.h"
#include "transports/transport.h"

namespace coll::kernels {
struct QuantParams;
}

namespace coll {

// The executor's knobs (the wait policy, the slice), which the planner and the link probe read too.
extern const IntKnob kSpinCount;     // COLL_SPIN_COUNT
extern const IntKnob kYieldCount;    // COLL_YIELD_COUNT
extern const BytesKnob kSliceBytes;  // COLL_SLICE_BYTES

struct ExecBuffers {
  const void* send = nullptr;
  void* recv = nullptr;
  // BufKind::Extra buffers (grouped point-to-point calls); must outlive the execution.
  void* const* extra = nullptr;
  size_t nextra = 0;
  // Compressed calls: rounding, seed and step of this call, and the error-feedback buffer.
  const kernels::QuantParams* quant = nullptr;
  float* residual = nullptr;
};

// Told of a step's first progress and its completion, and of the waits of runToCompletion (the
// rank idle past its spin phase, then progressing again), on the executing thread. Tracing and
// profiling (src/comm/trace.h) implement it. The step machinery is instantiated with and without
// one, so an execution without an observer runs no hook at all.
class ExecObserver {
 public:
  virtual void stepStarted(int32_t step, const Step& s) = 0;
  virtual void stepDone(int32_t step, const Step& s) = 0;
  // The rank was idle from startNs to endNs (steady clock), its first pending step `step` waiting
  // on `peer` (-1: local work or nothing remote).
  virtual void waited(int32_t step, int32_t peer, int64_t startNs, int64_t endNs) = 0;

 protected:
  ~ExecObserver() = default;
};

class Execution {
 public:
  // Binds `schedule` (which must outlive the execution) to buffers and links for call number
  // `seq` (>= 1, the same on all ranks for the same call). Resolves the schedule's connections.
  // Internal state keeps its capacity: a warmed-up Execution does not allocate.
  Status start(const Schedule& schedule, const ExecBuffers& buffers, Links& links, uint64_t seq);

  // Makes all the progress possible now without blocking.
  Status poll(bool* done, bool* progressed);
  // The same, instantiated with and without an observer: runToCompletion picks one per call, so
  // an unobserved call's polls run the code they ran before observers existed (no choice per poll).
  template <bool kObserved>
  Status pollSteps(bool* done, bool* progressed);

  // One line per unfinished step (kind, peer, progress, what it waits for), for timeout
  // messages and dumps.
  std::string describePending() const;

  // Asks every connection in use whether its peer is still alive (idle waits call this).
  Status checkHealth();

  // Withdraws the receives this execution posted to its connections (Connection::postRecv):
  // runToCompletion does, however the call ends, before the buffers may change.
  void withdrawPosts();

  // Overrides COLL_SLICE_BYTES for this execution (tests); 0 restores the knob.
  void setSliceBytes(size_t bytes) { sliceOverride_ = bytes; }

  uint64_t seq() const { return seq_; }

  // Observes the following calls (nullptr: none); set between calls.
  void setObserver(ExecObserver* observer) { observer_ = observer; }
  ExecObserver* observer() const { return observer_; }

  // The peer whose connection failed the last poll()/checkHealth() (-1: none, or not a peer's).
  int32_t failedPeer() const { return failedPeer_; }
  // What this rank waits for now: the first pending step and the peer it waits on (-1 when it
  // waits on nothing remote). For dumps and wait-for queries; call from the executing thread.
  void blockedOn(int32_t* step, int32_t* peer) const;

 private:
  uint64_t available(int32_t step) const;
  uint64_t depAvailable(const Step& s, uint32_t dep) const;
  bool alignStream(int32_t step, Connection* c, bool sending, bool* moved);
  // The step machinery, instantiated with and without an observer (see pollSteps).
  template <bool kObserved>
  bool progressSend(int32_t step);
  template <bool kObserved>
  bool progressRecv(int32_t step);
  // Posts the rest of receive step `step` to its connection, or withdraws the post when done.
  void postRest(int32_t step, Connection* c, uint64_t done, uint64_t limit);
  template <bool kObserved>
  bool progressLocal(int32_t step);
  // Quantized local steps: `n` blocks from block `dn` of step `s`.
  void runQuantSlice(const Step& s, std::byte* dst, const std::byte* src, uint64_t dn, uint64_t n);
  size_t unitOf(const Step& s) const { return s.unitBytes != 0 ? s.unitBytes : es_; }
  template <bool kObserved>
  void completeStep(int32_t step);
  // Stores a step's new progress (publishing it where the step is published); false if none.
  template <bool kObserved>
  bool recordProgress(int32_t step, uint64_t done);
  bool peerActive(size_t peerIndex) const;
  void publish(int32_t step);
  std::byte* resolve(const BufRef& ref) const;
  // Everything that depends on the schedule only (queues, dependency words, connections).
  Status prepare(const Schedule& schedule, Links& links);
  // Everything that depends on the call: pointers, progress, published zero-count steps.
  void bind(const ExecBuffers& buffers, uint64_t seq);

  const Schedule* schedule_ = nullptr;
  ExecBuffers buffers_;
  Links* links_ = nullptr;
  HostWindows* windows_ = nullptr;
  uint64_t seq_ = 0;
  int32_t rank_ = -1;
  size_t es_ = 1;
  uint64_t sliceElems_ = 1;
  size_t sliceOverride_ = 0;

  std::vector<uint64_t> done_;                     // elements done per step
  std::vector<uint8_t> padded_;                    // per step: stream padding handled (Send/Recv kinds)
  std::vector<int32_t> stepPeer_;                  // per step: index into conns_ (-1 for local steps)
  std::vector<std::byte*> srcPtr_, dstPtr_;        // per step, resolved at start
  std::vector<const void*> reduceSrcs_;            // per Schedule::srcs entry, resolved at start
  std::vector<const void*> reduceTmp_;             // shifted source pointers of one Reduce slice
  std::vector<std::atomic<uint64_t>*> depAtomic_;  // per dep: progress slot / completed-call word
  std::vector<std::atomic<uint64_t>*> mySlots_;    // this rank's published progress slots
  std::vector<Connection*> conns_;                 // per distinct peer (Schedule::peers order)
  // A receive posted to a connection: the head of its peer's receive queue, what its units are
  // applied to, and how (see PostedRecv; the transport calls applyPosted).
  struct StepPost : PostedRecv {
    int32_t step = -1;         // -1: nothing posted
    bool unsupported = false;  // the connection does not take posts
    bool reduce = false;
    std::byte* dst = nullptr;        // where the post's first unit goes
    const std::byte* src = nullptr;  // reduce: its local operand
    collDataType_t dtype = collFloat32;
    collRedOp_t op = collSum;
  };
  static void applyPosted(PostedRecv* self, const std::byte* data, uint64_t n);
  std::vector<StepPost> posts_;         // per distinct peer
  std::vector<uint32_t> connectOrder_;  // indices into conns_ by ascending peer rank (start)
  std::vector<std::byte> scratch_;      // when the links keep no shared scratch (Links::scratch)
  std::byte* scratchBase_ = nullptr;
  std::vector<int32_t> sendCursor_, recvCursor_;  // per distinct peer: position in its queue
  std::vector<int32_t> sendQueue_, recvQueue_;    // flattened per-peer step lists
  std::vector<int32_t> sendBegin_, recvBegin_;    // per peer offsets into the queues (+1 entry)
  std::vector<int32_t> localSteps_;               // Copy / Reduce / Divide steps, in order
  size_t localFirst_ = 0;                         // first possibly unfinished entry of localSteps_
  size_t remaining_ = 0;                          // unfinished steps
  bool callPublished_ = false;
  // What prepare() was done for: a call with the same schedule (same version) and links only binds.
  const Schedule* prepared_ = nullptr;
  uint64_t preparedVersion_ = 0;
  Links* preparedLinks_ = nullptr;
  size_t countedSteps_ = 0;  // steps with count > 0
  size_t extraNeeded_ = 0;   // 1 + the largest BufKind::Extra index the schedule names
  bool hasZeroCountPublish_ = false;
  bool hasQuantSteps_ = false;
  int32_t failedPeer_ = -1;
  ExecObserver* observer_ = nullptr;
};

// How long an idle rank polls before yielding the CPU, and yields before sleeping. With more
// ranks than cores on the machine, spinning steals the core a peer needs, so the communicator
// yields at once there (waitPolicyFor).
struct WaitPolicy {
  uint64_t spins = 2000;
  uint64_t yields = 200;
  // > 0: once done yielding, sleep this long between polls instead of waiting on the links. A
  // napping rank is not a sleeper that a peer's progress wakes, so it costs the ranks that work
  // nothing (the link probe's bystanders: waking them at every call of the measuring pair made
  // the measured latency that of the wake-ups).
  int64_t napUs = 0;
  int64_t timeoutMs = 0;  // the deadline's length, for the timeout message (0 = COLL_TIMEOUT)
};
// COLL_SPIN_COUNT / COLL_YIELD_COUNT when set; otherwise spin only when every rank of the
// machine (Topology::machineSize: every host on it, network namespaces included) can have its
// own core, and go straight to yielding when it cannot.
WaitPolicy waitPolicyFor(int machineRanks);

// What an execution is doing, for other threads (collCommDump, SIGUSR1, peers' wait-for queries):
// written by runToCompletion when the rank goes idle (never on the fast path), read anywhere.
struct ExecSnapshot {
  std::atomic<bool> running{false};
  std::atomic<uint64_t> seq{0};           // the call running, or the last one
  std::atomic<const char*> what{"none"};  // the collective's name (a static string)
  std::atomic<uint64_t> count{0};
  std::atomic<int32_t> dtype{-1};
  std::atomic<int32_t> step{-1};        // first pending step (-1: progressing)
  std::atomic<int32_t> waitPeer{-1};    // the peer that step waits on (-1: none / progressing)
  std::atomic<int64_t> idleSinceNs{0};  // steady-clock time it went idle (0: progressing)
  std::mutex mu;
  std::string pending;  // describePending() as of the last idle refresh
};

// Runs `execution` to completion on this thread: polls, spins, yields, then sleeps on the
// links' wait. Fails with collTimeout at the deadline (message lists the pending steps) and
// with the transport's error when a peer fails.
Status runToCompletion(Execution& execution, Links& links, Deadline deadline, const WaitPolicy& policy = WaitPolicy{},
                       ExecSnapshot* snapshot = nullptr);

}  // namespace coll
