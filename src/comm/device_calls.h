// DeviceCalls: a communicator's GPU side. Calls on device buffers pass the stream gate
// (src/gpu/stream_gate.h) and run on the progress thread by staging: the inputs are copied to
// pinned host memory, the host collective runs there over whatever transports the communicator
// uses, and the results are copied back. Contiguous collectives (All-Reduce, Broadcast, Reduce) are
// pipelined: chunk i+1 is copied in and chunk i-1 copied out while chunk i is reduced.
// When every rank is on this host and can map the others' device memory, All-Reduce (plain and
// compressed) instead runs device to device over CUDA IPC (device_ipc.h); runCollective picks the path.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "src/base/deadline.h"
#include "src/base/status.h"
#include "src/comm/device_ipc.h"
#include "src/comm/work_queue.h"
#include "src/gpu/cuda_driver.h"
#include "src/gpu/stream_gate.h"
#include "src/schedule/coll_args.h"
#include "src/schedule/schedule.h"

namespace coll {

class DeviceCalls {
 public:
  // The communicator's device: the gate, two copy streams (non-blocking, so they never wait for
  // the legacy default stream, which may itself wait on the gate) and chunk events.
  static Status create(const gpu::CudaDriver& cu, int device, std::unique_ptr<DeviceCalls>* out);
  ~DeviceCalls();

  int device() const { return device_; }
  gpu::StreamGate& gate() { return *gate_; }
  const gpu::CudaDriver& driver() const { return cu_; }

  using HostRun = std::function<Status(const CollArgs&)>;
  // Runs one collective whose buffers are device memory: `run` sees host copies. `rank`/`nranks`
  // size the buffers.
  Status stageCollective(const CollArgs& a, int rank, int nranks, Deadline deadline, const std::atomic<bool>& stop,
                         const HostRun& run);
  // Runs one collective on device buffers: over CUDA IPC when the call has that path and every
  // rank can use it (`singleHost`: all ranks on this host; set up at the first such call, which
  // is collective: every rank must issue the same device calls, as it does), else staged. `run`
  // runs host collectives on the communicator (also the IPC path's all-gathers and barriers).
  // *onIpc (when given) is set when the call ran over IPC.
  Status runCollective(const CollArgs& a, int rank, int nranks, bool singleHost, Deadline deadline,
                       const std::atomic<bool>& stop, const HostRun& run, bool* onIpc = nullptr);
  // Whether the IPC path is set up (after the first call that could use it).
  bool ipcActive() const { return ipc_ != nullptr; }
  // The communicator's registered buffers (All-Reduce over IPC uses them in place); outlives this.
  void setRegistry(const BufferRegistry* registry) { registry_ = registry; }
  // The same for a batch of point-to-point calls.
  Status stageP2p(const std::vector<P2pCall>& calls, Deadline deadline, const std::atomic<bool>& stop,
                  const std::function<Status(const std::vector<P2pCall>&)>& run);
  // Copies `bytes` from device memory at `src` to the host now (a PreMulSum scalar, a residual).
  Status copyToHost(void* dst, const void* src, size_t bytes, Deadline deadline, const std::atomic<bool>& stop);

 private:
  DeviceCalls(const gpu::CudaDriver& cu, int device) : cu_(cu), device_(device) {}
  // Pinned host memory of at least `bytes` (grow-only), `which` of two regions.
  Status pinned(int which, size_t bytes, std::byte** out);
  Status copy(void* dst, const void* src, size_t bytes, CUstream stream);
  Status waitStream(CUstream stream, Deadline deadline, const std::atomic<bool>& stop);
  Status waitEvent(CUevent event, Deadline deadline, const std::atomic<bool>& stop);
  Status pipelined(const CollArgs& a, bool hasSend, bool hasRecv, std::byte* host, size_t bytes, size_t es,
                   Deadline deadline, const std::atomic<bool>& stop, const HostRun& run);

  const gpu::CudaDriver& cu_;
  int device_;
  std::unique_ptr<gpu::StreamGate> gate_;
  CUstream copyIn_ = nullptr, copyOut_ = nullptr;
  CUevent chunkReady_[2] = {nullptr, nullptr};
  struct Region {
    std::byte* data = nullptr;
    size_t size = 0;
  } regions_[2];
  enum class IpcState { Unknown, On, Off } ipcState_ = IpcState::Unknown;
  std::unique_ptr<DeviceIpc> ipc_;
  const BufferRegistry* registry_ = nullptr;
};

}  // namespace coll
