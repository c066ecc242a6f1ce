// The benchmark loop shared by every collective and backend (libcollective, Open MPI): nccl-tests'
// flags, timing, verification, table and JSON in one place, so backends compare like for like.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "bench/perf_colls.h"
#include "bench/perf_compress.h"
#include "collective/collective.h"

namespace coll::perf {

struct PerfOptions {
  size_t minBytes = 32u << 20;
  size_t maxBytes = 32u << 20;
  double stepFactor = 1;  // > 1: multiply; otherwise add stepBytes
  size_t stepBytes = 1u << 20;
  int iters = 20;
  int warmup = 5;
  int check = 1;
  int average = 1;  // 0 = rank 0, 1 = mean, 2 = min, 3 = max over ranks
  int timeoutSec = 0;
  // -z: 1 synchronizes the stream after every timed call, 0 once per timed loop; -1 (not given):
  // 1 with --stream, 0 with device buffers (nccl-tests' default). Host calls without --stream block.
  int blocking = -1;
  bool stream = false;  // --stream: queue calls on a host stream and measure overlap with compute
  int root = 0;         // -1: every root in turn (rooted collectives)
  std::vector<collRedOp_t> ops{collSum};
  std::vector<collDataType_t> types{collFloat32};
  std::string jsonPath;
  // --compress: collAllReduceCompressed instead of collAllReduce (all_reduce, libcollective only).
  CompressSpec compress;
  // --wire (implied by --compress): wire bytes per call and their fraction of an uncompressed ring's.
  bool wire = false;
  // --per-call: each out-of-place timed call timed alone (cold start: call 1, call 2, the median
  // of the rest), printed as a "# calls" line per size.
  bool perCall = false;
  // -G 0|1 / --host: where the buffers live. -1 (neither given): device memory when a CUDA device
  // is present (and neither --stream nor --compress asks for host memory), else host memory.
  int deviceBuffers = -1;
};

// Device buffers and the CUDA stream of one rank (bench/perf_device.h implements it for
// libcollective). Pointers are device addresses; host pointers are ordinary host memory.
class PerfDevice {
 public:
  virtual ~PerfDevice() = default;
  virtual int ordinal() const = 0;
  // "device 0 [0000:01:00.0]": for the "Using devices" lines.
  virtual std::string label() const = 0;
  virtual void* stream() const = 0;  // the cudaStream_t the calls are queued on
  virtual bool alloc(size_t bytes, void** ptr, std::string* error) = 0;
  virtual void release(void* ptr) = 0;
  // Copies between host and device memory, complete on return.
  virtual bool upload(void* device, const void* host, size_t bytes, std::string* error) = 0;
  virtual bool download(void* host, const void* device, size_t bytes, std::string* error) = 0;
  virtual bool synchronize(std::string* error) = 0;
  // Whether mismatches can be counted on the device; when not, why.
  virtual bool canCountOnDevice(std::string* why) = 0;
  // Elements of `got` whose bytes differ from `want` (count elements of `type`, device memory).
  virtual bool countMismatches(const void* got, const void* want, size_t count, collDataType_t type,
                               unsigned long long* wrong, std::string* error) = 0;
};

// Bytes a rank handed to transports (collCommGetStats), for the wire columns.
struct PerfTraffic {
  unsigned long long wireBytes = 0;
  unsigned long long compressedWireBytes = 0;
  unsigned long long compressedCalls = 0;
  unsigned long long uncompressedFallbacks = 0;
};

// Parses nccl-tests' flags. Returns -1 to continue, else an exit code (0 after -h).
int parsePerfOptions(int argc, char** argv, const char* program, PerfOptions* opts);
// A size as the benchmarks' flags take it: "1024", "64K", "1.5M", "1G" (optional B); false on junk.
bool parseSize(const char* text, size_t* out);

class PerfBackend {
 public:
  virtual ~PerfBackend() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* name() const = 0;
  // Why this backend cannot run (coll, type, op) at all, or "" when it can (the row is skipped).
  virtual std::string unsupported(PerfColl, collDataType_t, collRedOp_t) const { return {}; }
  // One blocking call; false with a message on failure.
  virtual bool run(const CollCall& call, std::string* error) = 0;
  virtual bool barrier(std::string* error) = 0;
  // --stream: calls queued on a host stream return at once and finish at synchronize(). A backend
  // without host streams keeps these defaults; openStream's message says why.
  virtual bool openStream(std::string* error) {
    *error = std::string("the ") + name() + " backend has no host streams";
    return false;
  }
  virtual bool enqueue(const CollCall&, std::string* error) {
    *error = "no host stream";
    return false;
  }
  virtual bool synchronize(std::string*) { return true; }
  // Device buffers: the call queued on a CUDA stream (returns at once). synchronize() afterwards
  // releases what the queued calls held once the caller has synchronized the CUDA stream.
  virtual bool enqueueDevice(const CollCall&, void* /*cudaStream*/, std::string* error) {
    *error = std::string("the ") + name() + " backend takes no device buffers";
    return false;
  }
  // --wire / --compress: this rank's traffic so far; false when the backend cannot tell.
  virtual bool traffic(PerfTraffic*) { return false; }

  bool allReduce(const void* send, void* recv, size_t count, collDataType_t type, collRedOp_t op, std::string* error) {
    CollCall c;
    c.send = send;
    c.recv = recv;
    c.count = count;
    c.type = type;
    c.op = op;
    return run(c, error);
  }
};

// Runs every (type, op, root, size) of opts for `coll` and prints the table on rank 0. Returns
// the process exit code: 0 when every check passed, 1 on wrong results, 2 on communication errors.
// With `device`, the buffers are device memory and the calls are queued on its stream.
int runPerf(PerfColl coll, const PerfOptions& opts, PerfBackend& backend, PerfDevice* device = nullptr);

}  // namespace coll::perf
