// The libcollective backend of the benchmarks and multi-process tests: one blocking call of any
// collective through the public API (sendrecv as nccl-tests does it: a group of send and receive).
#pragma once

#include <string>
#include <vector>

#include "bench/perf_harness.h"
#include "collective/collective.h"

namespace coll::perf {

class CollBackend : public PerfBackend {
 public:
  explicit CollBackend(collComm_t comm);
  ~CollBackend() override;
  CollBackend(const CollBackend&) = delete;
  CollBackend& operator=(const CollBackend&) = delete;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "libcollective"; }
  bool run(const CollCall& call, std::string* error) override;
  // A one-element all-reduce: every rank must have arrived before any returns.
  bool barrier(std::string* error) override;
  // --stream: one host stream (collHostStreamCreate) for every queued call of this backend.
  bool openStream(std::string* error) override;
  bool enqueue(const CollCall& call, std::string* error) override;
  bool synchronize(std::string* error) override;
  // Device buffers: the call queued on the CUDA stream `cudaStream` (a cudaStream_t).
  bool enqueueDevice(const CollCall& call, void* cudaStream, std::string* error) override;
  bool traffic(PerfTraffic* out) override;

 private:
  bool issue(const CollCall& call, collStream_t stream, std::string* error);

  collComm_t comm_;
  int rank_ = 0, size_ = 1;
  collStream_t stream_ = nullptr;
  // PreMulSum ops of queued calls (host or CUDA stream): destroyed at synchronize(), once the
  // stream has run them.
  std::vector<collRedOp_t> pendingOps_;
};

// collGetErrorString and collGetLastError of a failed call, in one sentence.
std::string collErrorText(collResult_t res, collComm_t comm);

}  // namespace coll::perf
