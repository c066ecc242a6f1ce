#include "src/gpu/stream_gate.h"

#include <thread>

namespace coll::gpu {

Status StreamGate::create(const CudaDriver& cu, int device, std::unique_ptr<StreamGate>* out) {
  std::unique_ptr<StreamGate> gate(new StreamGate(cu, device));
  void* host = nullptr;
  COLL_CU_TRY(cu, cuMemHostAlloc, &host, kSlots * sizeof(uint32_t),
              cu::kMemHostAllocDeviceMap | cu::kMemHostAllocPortable);
  gate->slots_ = static_cast<volatile uint32_t*>(host);
  for (uint32_t i = 0; i < kSlots; ++i) gate->slots_[i] = 0;
  COLL_CU_TRY(cu, cuMemHostGetDevicePointer, &gate->slotsDevice_, host, 0);
  *out = std::move(gate);
  return okStatus();
}

StreamGate::~StreamGate() {
  releaseAll();
  for (CUevent e : freeEvents_) (void)cu_.cuEventDestroy(e);
  // The slots stay mapped: a stream may still be reading its word (the process owns them).
}

Status StreamGate::enter(CUstream stream, GateTicket* ticket) {
  int capture = cu::kCaptureStatusNone;
  COLL_CU_TRY(cu_, cuStreamIsCapturing, stream, &capture);
  if (capture != cu::kCaptureStatusNone) {
    return makeError(collInvalidUsage,
                     "the stream is being captured into a CUDA graph: calls on device buffers cannot be captured "
                     "(the work runs on the library's progress thread); call outside the capture");
  }
  CUevent ev = nullptr;
  uint32_t seq = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!freeEvents_.empty()) {
      ev = freeEvents_.back();
      freeEvents_.pop_back();
    }
    seq = ++issued_;
    if (seq == 0) seq = ++issued_;  // 0 is every slot's initial value
  }
  if (ev == nullptr) COLL_CU_TRY(cu_, cuEventCreate, &ev, cu::kEventDisableTiming);
  Status s = cudaCheck(cu_.cuEventRecord(ev, stream), "cuEventRecord");
  if (s.ok()) {
    const CUdeviceptr slot = slotsDevice_ + (seq % kSlots) * sizeof(uint32_t);
    s = cudaCheck(cu_.cuStreamWaitValue32(stream, slot, seq, cu::kStreamWaitValueGeq), "cuStreamWaitValue32");
  }
  if (!s.ok()) {
    // Nothing waits on this slot; the sequence number is simply skipped.
    std::lock_guard<std::mutex> lock(mu_);
    freeEvents_.push_back(ev);
    return s;
  }
  ticket->seq = seq;
  ticket->ready = ev;
  return okStatus();
}

Status StreamGate::waitReady(const GateTicket& ticket, Deadline deadline, const std::atomic<bool>& stop) {
  // Short waits first (the stream is usually there already), then sleeps that grow to 1 ms.
  for (int round = 0;; ++round) {
    const CUresult r = cu_.cuEventQuery(ticket.ready);
    if (r == cu::kSuccess) return okStatus();
    if (r != cu::kErrorNotReady) return cudaCheck(r, "cuEventQuery (waiting for the stream to reach the call)");
    if (stop.load(std::memory_order_relaxed)) return makeError(collRemoteError, "the communicator was aborted");
    if (deadline.expired()) {
      return makeError(collTimeout,
                       "the CUDA stream did not reach the call within the timeout (work queued before it on the "
                       "stream is still running)");
    }
    if (round < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(round < 1000 ? 20 : 1000));
    }
  }
}

void StreamGate::release(const GateTicket& ticket) {
  // The slot only moves forward (a later call sharing it may have finished first).
  uint32_t* slot = const_cast<uint32_t*>(&slots_[ticket.seq % kSlots]);
  uint32_t old = __atomic_load_n(slot, __ATOMIC_RELAXED);
  while (static_cast<int32_t>(old - ticket.seq) < 0 &&
         !__atomic_compare_exchange_n(slot, &old, ticket.seq, true, __ATOMIC_RELEASE, __ATOMIC_RELAXED)) {
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (ticket.ready) freeEvents_.push_back(ticket.ready);
}

void StreamGate::releaseAll() {
  std::lock_guard<std::mutex> lock(mu_);
  // Every slot at the newest sequence number: (int32)(slot - seq) >= 0 for every call issued.
  for (uint32_t i = 0; i < kSlots; ++i) __atomic_store_n(const_cast<uint32_t*>(&slots_[i]), issued_, __ATOMIC_RELEASE);
}

}  // namespace coll::gpu
