// The torch.distributed backend "collective": a c10d process group whose operations run on a
// libcollective communicator. Built against PyTorch 1.13 (c10d::ProcessGroup is the class a backend
// derives from); PyTorch 2.x moved backends to c10d::Backend, chosen below by the version macro.
#pragma once

#include <collective/collective.h>
#include <torch/csrc/api/include/torch/version.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace torch_collective {

#if TORCH_VERSION_MAJOR >= 2
using BackendBase = c10d::Backend;
#else
using BackendBase = c10d::ProcessGroup;
#endif

// One queued operation. Its body runs on the process group's worker thread; the Work completes
// (wait(), is_completed(), exception(), its future) when the body returns or throws.
class CollectiveWork : public c10d::Work {
 public:
  CollectiveWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs, std::function<void()> body);
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  // Runs the body (once) and completes the Work and its future with its outcome.
  void run();
  // Completes the Work with this error without running it (abort, shutdown).
  void fail(std::exception_ptr error);

 private:
  void complete(std::exception_ptr error);
  std::vector<at::Tensor> outputs_;
  std::function<void()> body_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class ProcessGroupCollective : public BackendBase {
 public:
  // Collective over the group: rank 0 makes the unique id and publishes it through the store
  // PyTorch hands the backend; every rank then joins the communicator. globalRanks: the ranks of
  // the default group that make this group (empty for the default group itself), for messages.
  static c10::intrusive_ptr<ProcessGroupCollective> create(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                           int size, std::chrono::milliseconds timeout,
                                                           std::vector<int64_t> globalRanks);
  ProcessGroupCollective(collComm_t comm, int rank, int size, std::chrono::milliseconds timeout,
                         std::vector<int64_t> globalRanks);
  ~ProcessGroupCollective() override;

  const std::string getBackendName() const override { return "collective"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts = c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputTensors,
                                           std::vector<at::Tensor>& inputTensors,
                                           const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& outputBuffer, at::Tensor& inputBuffer,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputTensorLists, std::vector<at::Tensor>& inputTensors,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputTensors,
                                        std::vector<at::Tensor>& inputTensors,
                                        const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputTensors,
                                         std::vector<std::vector<at::Tensor>>& inputTensors,
                                         const c10d::ScatterOptions& opts = c10d::ScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputTensors, std::vector<std::vector<at::Tensor>>& inputTensors,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& outputBuffer, at::Tensor& inputBuffer,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& outputBuffer, at::Tensor& inputBuffer,
                                               std::vector<int64_t>& outputSplitSizes,
                                               std::vector<int64_t>& inputSplitSizes,
                                               const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputTensors, std::vector<at::Tensor>& inputTensors,
                                          const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;
  // batch_isend_irecv: the sends and receives between the two run as one group (no ordering deadlock).
  void startCoalescing() override;
#if TORCH_VERSION_MAJOR >= 2
  c10::intrusive_ptr<c10d::Work> endCoalescing() override { return runCoalesced(); }
#else
  void endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>>&) override { (void)runCoalesced(); }
#endif

  // ---- beyond c10d (torch_collective's Python functions) ----
  // The 4-bit compressed All-Reduce with error feedback (residual: float32, tensor's numel, or undefined).
  c10::intrusive_ptr<c10d::Work> allreduceInt4(at::Tensor& tensor, at::Tensor& residual, int blockSize, bool average,
                                               int64_t minBytes);
  // A new group of the ranks not in excludeRanks (ranks of this group), made without them.
  c10::intrusive_ptr<ProcessGroupCollective> shrink(const std::vector<int64_t>& excludeRanks);
  // collCommSplit: ranks with the same color, ordered by key; null for COLL_SPLIT_NOCOLOR.
  c10::intrusive_ptr<ProcessGroupCollective> split(int color, int key);
  // Stops the communicator without waiting for peers: work in flight and queued fails.
  void abortGroup();
  std::vector<int64_t> failedRanks();
  int64_t timeoutMs() const { return timeout_.count(); }

  // Runs a wait for the worker thread without the Python interpreter lock where the caller holds
  // it (set by the Python module; the C++ part knows nothing of Python): the worker may need that
  // lock to free a tensor's Python object, so waiting for it while holding the lock deadlocks.
  static void (*outsideInterpreterLock)(const std::function<void()>& wait);

 private:
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, std::vector<at::Tensor> outputs,
                                         std::function<void()> body);
  void workerLoop();
  // Runs the calls that `issue` makes on the worker's host stream and waits for them; throws with
  // the library's message (naming the operation) on failure.
  void runOnStream(const char* what, const std::function<collResult_t(collStream_t)>& issue);
  // The error of a failed call: operation, rank, the library's message, the known failed ranks.
  std::string failureText(const char* what, collResult_t result);
  // Replaces the worker's host stream after a failed call where the communicator is still usable.
  void renewStream();
  c10::intrusive_ptr<ProcessGroupCollective> wrapNewComm(collComm_t comm);
  void requireMember(int peer, const char* what) const;

  collComm_t comm_;
  collStream_t stream_ = nullptr;  // host stream: the worker issues on it and waits on it
  const std::chrono::milliseconds timeout_;
  const std::vector<int64_t> globalRanks_;

  std::mutex mutex_;
  std::condition_variable queued_;
  std::deque<c10::intrusive_ptr<CollectiveWork>> queue_;
  bool stopping_ = false;
  std::atomic<bool> aborted_{false};
  // A send or receive: `issue` queues its calls on the stream (inside a group), `finish` checks
  // what arrived once the stream is done. Between startCoalescing and endCoalescing they gather
  // here and run as one group.
  struct PointToPoint {
    std::function<collResult_t(collStream_t)> issue;
    std::function<void()> finish;
    c10::intrusive_ptr<CollectiveWork> work;
  };
  c10::intrusive_ptr<c10d::Work> pointToPoint(c10d::OpType type, const char* what, std::vector<at::Tensor> tensors,
                                              PointToPoint op);
  // Queues the gathered sends and receives as one Work (null when there were none).
  c10::intrusive_ptr<c10d::Work> runCoalesced();
  bool coalescing_ = false;
  std::vector<PointToPoint> coalesced_;
  std::thread worker_;
};

}  // namespace torch_collective
