// Executor: runs one rank's Schedule over the links of its communicator. It cuts steps into
// slices, keeps every slice whose dependencies are met in flight, progresses sends and receives
// together, fuses receive with reduce (data is reduced straight out of the transport's buffer),
// and reports the first error with the step and peer. It is the only code that calls both
// transports and kernels. The core is non-blocking (poll), so one thread can drive many ranks
// (the in-process executor) or many calls (a progress thread).
#pragma once

#include <cstdint>
#include <vector>

#include "core/deadline.h"
#include "core/status.h"
#include "exec/schedule.h"
#include "transports/transport.h"

namespace coll {

struct ExecBuffers {
  const void* send = nullptr;
  void* recv = nullptr;
};

class Execution {
 public:
  // Binds `schedule` (which must outlive the execution) to buffers and links for call number
  // `seq` (>= 1, the same on all ranks for the same call). Resolves the schedule's connections.
  // Internal state keeps its capacity: a warmed-up Execution does not allocate.
  Status start(const Schedule& schedule, const ExecBuffers& buffers, Links& links, uint64_t seq);

  // Makes all the progress possible now without blocking.
  Status poll(bool* done, bool* progressed);

  // One line per unfinished step (kind, peer, progress), for timeout messages and dumps.
  std::string describePending() const;

 private:
  struct StepState;
  // implementation-defined members
  const Schedule* schedule_ = nullptr;
  ExecBuffers buffers_;
  Links* links_ = nullptr;
  uint64_t seq_ = 0;
  std::vector<uint64_t> done_;              // elements done per step
  std::vector<Connection*> conns_;          // per step (Send/Recv kinds)
  std::vector<std::byte> scratch_;
  std::vector<int32_t> sendCursor_, recvCursor_;  // per distinct peer: index of the head step
  std::vector<int32_t> sendQueue_, recvQueue_;    // flattened per-peer step lists
  std::vector<int32_t> sendBegin_, recvBegin_;    // per peer offsets into the queues
  size_t remaining_ = 0;
  size_t sliceBytes_ = 0;
};

// Runs `execution` to completion on this thread: polls, spins, yields, then sleeps on the
// links' wait. Fails with collTimeout at the deadline (message lists the pending steps) and
// with the transport's error when a peer fails.
Status runToCompletion(Execution& execution, Links& links, Deadline deadline);

}  // namespace coll
