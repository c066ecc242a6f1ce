#include "src/comm/device_calls.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "src/base/align.h"
#include "src/base/config.h"

namespace coll {

const BytesKnob kGpuStagingChunk("COLL_GPU_STAGING_CHUNK", "4M",
                                 "Device buffers staged through host memory (All-Reduce, Broadcast, Reduce): "
                                 "the pipeline's chunk; copies of the next and previous chunks overlap the "
                                 "collective on this one. 0 = one piece.",
                                 {KnobSection::Transports, 61});

namespace {
uintptr_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }
CUdeviceptr dptr(const void* p) { return static_cast<CUdeviceptr>(addr(p)); }
}  // namespace

Status DeviceCalls::create(const gpu::CudaDriver& cu, int device, std::unique_ptr<DeviceCalls>* out) {
  COLL_TRY(gpu::setCurrentDevice(cu, device));
  std::unique_ptr<DeviceCalls> d(new DeviceCalls(cu, device));
  COLL_TRY(gpu::StreamGate::create(cu, device, &d->gate_));
  COLL_CU_TRY(cu, cuStreamCreate, &d->copyIn_, cu::kStreamNonBlocking);
  COLL_CU_TRY(cu, cuStreamCreate, &d->copyOut_, cu::kStreamNonBlocking);
  for (CUevent& e : d->chunkReady_) COLL_CU_TRY(cu, cuEventCreate, &e, cu::kEventDisableTiming);
  *out = std::move(d);
  return okStatus();
}

DeviceCalls::~DeviceCalls() {
  if (gate_) gate_->releaseAll();
  ipc_.reset();
  for (CUevent e : chunkReady_) {
    if (e) (void)cu_.cuEventDestroy(e);
  }
  for (CUstream s : {copyIn_, copyOut_}) {
    if (s) (void)cu_.cuStreamDestroy(s);
  }
  for (Region& r : regions_) {
    if (r.data) (void)cu_.cuMemFreeHost(r.data);
  }
}

Status DeviceCalls::pinned(int which, size_t bytes, std::byte** out) {
  Region& r = regions_[which];
  if (r.size < bytes) {
    if (r.data) COLL_CU_TRY(cu_, cuMemFreeHost, r.data);
    r.data = nullptr, r.size = 0;
    void* p = nullptr;
    const size_t size = std::max<size_t>(roundUp(bytes, size_t{1} << 20), size_t{1} << 20);
    COLL_CU_TRY(cu_, cuMemHostAlloc, &p, size, cu::kMemHostAllocPortable);
    r.data = static_cast<std::byte*>(p), r.size = size;
  }
  *out = r.data;
  return okStatus();
}

Status DeviceCalls::copy(void* dst, const void* src, size_t bytes, CUstream stream) {
  if (bytes == 0) return okStatus();
  return gpu::cudaCheck(cu_.cuMemcpyAsync(dptr(dst), dptr(src), bytes, stream), "cuMemcpyAsync (staging)");
}

Status DeviceCalls::waitStream(CUstream stream, Deadline deadline, const std::atomic<bool>& stop) {
  for (int round = 0;; ++round) {
    const CUresult r = cu_.cuStreamQuery(stream);
    if (r == cu::kSuccess) return okStatus();
    if (r != cu::kErrorNotReady) return gpu::cudaCheck(r, "staging copy");
    if (stop.load(std::memory_order_relaxed)) return makeError(collRemoteError, "the communicator was aborted");
    if (deadline.expired()) return makeError(collTimeout, "a staging copy did not finish within the timeout");
    if (round < 64) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

Status DeviceCalls::waitEvent(CUevent event, Deadline deadline, const std::atomic<bool>& stop) {
  for (int round = 0;; ++round) {
    const CUresult r = cu_.cuEventQuery(event);
    if (r == cu::kSuccess) return okStatus();
    if (r != cu::kErrorNotReady) return gpu::cudaCheck(r, "staging copy");
    if (stop.load(std::memory_order_relaxed)) return makeError(collRemoteError, "the communicator was aborted");
    if (deadline.expired()) return makeError(collTimeout, "a staging copy did not finish within the timeout");
    if (round < 64) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

Status DeviceCalls::copyToHost(void* dst, const void* src, size_t bytes, Deadline deadline,
                               const std::atomic<bool>& stop) {
  COLL_TRY(copy(dst, src, bytes, copyIn_));
  return waitStream(copyIn_, deadline, stop);
}

Status DeviceCalls::runCollective(const CollArgs& a, int rank, int nranks, bool singleHost, Deadline deadline,
                                  const std::atomic<bool>& stop, const HostRun& run, bool* onIpc) {
  if (onIpc != nullptr) *onIpc = false;
  if (ipcState_ != IpcState::Off && singleHost && DeviceIpc::supports(a, nranks)) {
    DeviceIpc::HostOps ops;
    ops.allGather = [&](const void* mine, void* all, size_t bytes) {
      CollArgs g;
      g.kind = CollKind::AllGather, g.sendbuff = mine, g.recvbuff = all, g.count = bytes, g.dtype = collUint8;
      return run(g);
    };
    ops.barrier = [&] {
      CollArgs b;
      b.kind = CollKind::Barrier, b.dtype = collUint8, b.count = 0;
      return run(b);
    };
    ops.sync = [&](CUstream s) { return waitStream(s, deadline, stop); };
    ops.deadline = deadline;
    if (ipcState_ == IpcState::Unknown) {
      if (!DeviceIpc::enabled()) {
        ipcState_ = IpcState::Off;
      } else {
        COLL_TRY(DeviceIpc::setup(cu_, device_, rank, nranks, ops, &ipc_).withContext("setting up GPU IPC"));
        ipcState_ = ipc_ ? IpcState::On : IpcState::Off;
      }
    }
    if (ipc_ && ipc_->handles(a)) {
      if (onIpc != nullptr) *onIpc = true;
      return ipc_->run(a, copyIn_, ops, registry_);
    }
  }
  return stageCollective(a, rank, nranks, deadline, stop, run);
}

Status DeviceCalls::stageCollective(const CollArgs& a, int rank, int nranks, Deadline deadline,
                                    const std::atomic<bool>& stop, const HostRun& run) {
  uint64_t sendElems = 0, recvElems = 0;
  bufferElements(a, rank, nranks, &sendElems, &recvElems);
  const size_t es = dataTypeSize(a.dtype);
  const size_t sendBytes = sendElems * es, recvBytes = recvElems * es;
  const uintptr_t s = addr(a.sendbuff), r = addr(a.recvbuff);
  const bool sendInRecv = sendBytes > 0 && recvBytes > 0 && s >= r && s + sendBytes <= r + recvBytes;
  const bool recvInSend = !sendInRecv && sendBytes > 0 && recvBytes > 0 && r >= s && r + recvBytes <= s + sendBytes;

  // Element-wise collectives whose buffers are one contiguous span each: pipelined by chunks.
  const bool contiguous = (a.kind == CollKind::AllReduce || a.kind == CollKind::Broadcast ||
                           a.kind == CollKind::Reduce) &&
                          a.compress.blockSize == 0;
  const uint64_t chunk = kGpuStagingChunk.get();
  if (contiguous && chunk > 0 && std::max(sendBytes, recvBytes) > chunk) {
    std::byte* host = nullptr;
    COLL_TRY(pinned(0, std::max(sendBytes, recvBytes) * (a.inPlace() ? 1 : 2), &host));
    return pipelined(a, sendBytes > 0, recvBytes > 0, host, std::max(sendBytes, recvBytes), es, deadline, stop, run);
  }

  CollArgs h = a;
  std::byte* recvHost = nullptr;
  std::byte* sendHost = nullptr;
  // Region 1 holds a separate send buffer and, after it, the residual of a compressed call (device
  // floats, read and written), aligned for the CPU kernels. It is sized once: growing it later would
  // move the send buffer already handed out.
  const bool separateSend = !sendInRecv && !recvInSend && sendBytes > 0;
  const size_t residualBytes = a.compress.residual ? a.count * sizeof(float) : 0;
  const size_t residualOffset = separateSend ? roundUp(sendBytes, size_t{64}) : 0;
  const size_t region1Bytes = residualBytes > 0 ? residualOffset + residualBytes : (separateSend ? sendBytes : 0);
  std::byte* region1 = nullptr;
  if (region1Bytes > 0) COLL_TRY(pinned(1, region1Bytes, &region1));
  if (sendInRecv) {
    COLL_TRY(pinned(0, recvBytes, &recvHost));
    sendHost = recvHost + (s - r);
  } else if (recvInSend) {
    COLL_TRY(pinned(0, sendBytes, &sendHost));
    recvHost = sendHost + (r - s);
  } else {
    if (recvBytes > 0) COLL_TRY(pinned(0, recvBytes, &recvHost));
    if (sendBytes > 0) sendHost = region1;
  }
  if (sendBytes > 0) h.sendbuff = sendHost;
  if (recvBytes > 0) h.recvbuff = recvHost;
  // A buffer this rank does not use keeps the caller's pointer out of host code: none at all.
  if (sendBytes == 0 && a.sendbuff == a.recvbuff) h.sendbuff = h.recvbuff;
  else if (sendBytes == 0) h.sendbuff = nullptr;
  if (recvBytes == 0) h.recvbuff = nullptr;
  std::byte* residualHost = residualBytes > 0 ? region1 + residualOffset : nullptr;
  if (residualHost) h.compress.residual = reinterpret_cast<float*>(residualHost);

  COLL_TRY(copy(sendHost, a.sendbuff, sendBytes, copyIn_));
  COLL_TRY(copy(residualHost, a.compress.residual, residualBytes, copyIn_));
  COLL_TRY(waitStream(copyIn_, deadline, stop));
  COLL_TRY(run(h));
  COLL_TRY(copy(a.recvbuff, recvHost, recvBytes, copyOut_));
  COLL_TRY(copy(a.compress.residual, residualHost, residualBytes, copyOut_));
  return waitStream(copyOut_, deadline, stop);
}

Status DeviceCalls::pipelined(const CollArgs& a, bool hasSend, bool hasRecv, std::byte* host, size_t bytes, size_t es,
                              Deadline deadline, const std::atomic<bool>& stop, const HostRun& run) {
  std::byte* sendHost = host;
  std::byte* recvHost = a.inPlace() ? host : host + bytes;
  const size_t chunk = std::max<size_t>(roundDown(kGpuStagingChunk.get(), es), es);
  const size_t nchunks = ceilDiv(bytes, chunk);
  auto piece = [&](size_t i) { return std::min(chunk, bytes - i * chunk); };
  auto copyIn = [&](size_t i) -> Status {
    if (hasSend) COLL_TRY(copy(sendHost + i * chunk, static_cast<const std::byte*>(a.sendbuff) + i * chunk, piece(i),
                               copyIn_));
    return gpu::cudaCheck(cu_.cuEventRecord(chunkReady_[i % 2], copyIn_), "cuEventRecord (staging)");
  };
  COLL_TRY(copyIn(0));
  for (size_t i = 0; i < nchunks; ++i) {
    COLL_TRY(waitEvent(chunkReady_[i % 2], deadline, stop));
    if (i + 1 < nchunks) COLL_TRY(copyIn(i + 1));
    CollArgs h = a;
    h.count = piece(i) / es;
    h.sendbuff = hasSend || a.inPlace() ? sendHost + i * chunk : nullptr;
    h.recvbuff = hasRecv ? recvHost + i * chunk : nullptr;
    COLL_TRY(run(h));
    if (hasRecv) COLL_TRY(copy(static_cast<std::byte*>(a.recvbuff) + i * chunk, recvHost + i * chunk, piece(i),
                               copyOut_));
  }
  return waitStream(copyOut_, deadline, stop);
}

Status DeviceCalls::stageP2p(const std::vector<P2pCall>& calls, Deadline deadline, const std::atomic<bool>& stop,
                             const std::function<Status(const std::vector<P2pCall>&)>& run) {
  size_t total = 0;
  for (const P2pCall& c : calls) total += roundUp(c.bytes, uint64_t{64});
  std::byte* host = nullptr;
  COLL_TRY(pinned(0, std::max<size_t>(total, 1), &host));
  std::vector<P2pCall> h = calls;
  size_t offset = 0;
  for (P2pCall& c : h) {
    std::byte* mine = host + offset;
    offset += roundUp(c.bytes, uint64_t{64});
    if (c.send) COLL_TRY(copy(mine, c.buffer, c.bytes, copyIn_));
    c.buffer = mine;
  }
  COLL_TRY(waitStream(copyIn_, deadline, stop));
  COLL_TRY(run(h));
  for (size_t i = 0; i < calls.size(); ++i) {
    if (!calls[i].send) COLL_TRY(copy(calls[i].buffer, h[i].buffer, calls[i].bytes, copyOut_));
  }
  return waitStream(copyOut_, deadline, stop);
}

}  // namespace coll
