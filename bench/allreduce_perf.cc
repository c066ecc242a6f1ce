// allreduce_perf: the all-reduce benchmark on libcollective (public API only). Rank and size come
// from the launcher's environment (collrun, mpirun, srun, torchrun) via collCommInitFromEnv.
#include <cstdio>
#include <string>

#include "bench/perf_harness.h"
#include "collective/collective.h"

namespace {

class CollBackend : public coll::perf::PerfBackend {
 public:
  explicit CollBackend(collComm_t comm) : comm_(comm) {
    if (collCommUserRank(comm, &rank_) != collSuccess || collCommCount(comm, &size_) != collSuccess) {
      rank_ = 0;
      size_ = 1;
    }
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "libcollective"; }
  bool allReduce(const void* send, void* recv, size_t count, collDataType_t type, collRedOp_t op,
                 std::string* error) override {
    collResult_t res = collAllReduce(send, recv, count, type, op, comm_, nullptr);
    if (res == collSuccess) return true;
    *error = std::string(collGetErrorString(res)) + ": " + collGetLastError(comm_);
    return false;
  }
  // A one-element all-reduce is our barrier: every rank must have arrived before any returns.
  bool barrier(std::string* error) override {
    int one = 1, sum = 0;
    return allReduce(&one, &sum, 1, collInt32, collSum, error);
  }

 private:
  collComm_t comm_;
  int rank_ = 0, size_ = 1;
};

}  // namespace

int main(int argc, char** argv) {
  coll::perf::PerfOptions opts;
  int rc = coll::perf::parsePerfOptions(argc, argv, "allreduce_perf", &opts);
  if (rc >= 0) return rc;

  collConfig_t config = COLL_CONFIG_INITIALIZER;
  if (opts.timeoutSec > 0) config.timeoutMs = opts.timeoutSec * 1000;
  collComm_t comm = nullptr;
  collResult_t res = collCommInitFromEnv(&comm, &config);
  if (res != collSuccess) {
    fprintf(stderr, "allreduce_perf: collCommInitFromEnv failed: %s: %s\n", collGetErrorString(res),
            collGetLastError(nullptr));
    return 2;
  }
  int exitCode;
  {
    CollBackend backend(comm);
    exitCode = coll::perf::runAllReducePerf(opts, backend);
  }
  // After a failure the peers may be gone: abort rather than wait for them.
  res = exitCode == 2 ? collCommAbort(comm) : collCommDestroy(comm);
  if (res != collSuccess && exitCode == 0) {
    fprintf(stderr, "allreduce_perf: destroying the communicator failed: %s\n", collGetErrorString(res));
    exitCode = 2;
  }
  return exitCode;
}
