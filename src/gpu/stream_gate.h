// StreamGate: how a call on device buffers follows NCCL's stream semantics while a host thread
// does the work. At the call, the user's CUDA stream gets an event ("the stream reached the call")
// and a wait on a word of pinned host memory ("the call is done"); the call returns at once. The
// communicator's progress thread waits for the event, runs the collective, and writes the word:
// the stream, and all later work on it, moves on. Each call has its own slot (a ring of words), so
// calls finishing out of order (stream lanes) release exactly their own streams. Abort writes
// every slot: no stream stays blocked on a communicator that is gone.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "src/base/deadline.h"
#include "src/base/status.h"
#include "src/gpu/cuda_driver.h"

namespace coll::gpu {

// One call's passage through the gate.
struct GateTicket {
  uint32_t seq = 0;
  CUevent ready = nullptr;
};

class StreamGate {
 public:
  // Allocates the pinned slot ring on `device` (which must be current on this thread).
  static Status create(const CudaDriver& cu, int device, std::unique_ptr<StreamGate>* out);
  ~StreamGate();
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;

  // At the call (device current): refuses a stream under graph capture, then records the ready
  // event and makes `stream` wait for the call's slot.
  Status enter(CUstream stream, GateTicket* ticket);
  // On the progress thread: waits until the user's stream reached the call (or the deadline /
  // `stop` says otherwise).
  Status waitReady(const GateTicket& ticket, Deadline deadline, const std::atomic<bool>& stop);
  // The call is over, whatever its status: its stream moves on. Recycles the event.
  void release(const GateTicket& ticket);
  // Releases every stream waiting on this gate (abort, destruction).
  void releaseAll();
  int device() const { return device_; }

 private:
  StreamGate(const CudaDriver& cu, int device) : cu_(cu), device_(device) {}
  static constexpr uint32_t kSlots = 1024;  // calls in flight on one communicator, at most

  const CudaDriver& cu_;
  int device_;
  volatile uint32_t* slots_ = nullptr;  // pinned, mapped: the device reads, the host writes
  CUdeviceptr slotsDevice_ = 0;
  std::mutex mu_;
  uint32_t issued_ = 0;
  std::vector<CUevent> freeEvents_;
};

}  // namespace coll::gpu
