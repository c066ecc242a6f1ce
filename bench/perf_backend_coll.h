// The libcollective backend of the benchmarks and multi-process tests: one blocking call of any
// collective through the public API (sendrecv as nccl-tests does it: a group of send and receive).
#pragma once

#include <string>

#include "bench/perf_harness.h"
#include "collective/collective.h"

namespace coll::perf {

class CollBackend : public PerfBackend {
 public:
  explicit CollBackend(collComm_t comm);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "libcollective"; }
  bool run(const CollCall& call, std::string* error) override;
  // A one-element all-reduce: every rank must have arrived before any returns.
  bool barrier(std::string* error) override;

 private:
  collComm_t comm_;
  int rank_ = 0, size_ = 1;
};

// collGetErrorString and collGetLastError of a failed call, in one sentence.
std::string collErrorText(collResult_t res, collComm_t comm);

}  // namespace coll::perf
