// libcollective backend of the benchmark harness (see perf_backend_coll.h): blocking calls, and
// calls queued on one host stream for --stream.
#include "bench/perf_backend_coll.h"

#include "bench/perf_data.h"

namespace coll::perf {

std::string collErrorText(collResult_t res, collComm_t comm) {
  return std::string(collGetErrorString(res)) + ": " + collGetLastError(comm);
}

CollBackend::CollBackend(collComm_t comm) : comm_(comm) {
  if (collCommUserRank(comm, &rank_) != collSuccess || collCommCount(comm, &size_) != collSuccess) {
    rank_ = 0;
    size_ = 1;
  }
}

CollBackend::~CollBackend() {
  // Queued work (only after a failed run) still completes or ends with the communicator's abort.
  if (stream_ != nullptr) (void)collHostStreamDestroy(stream_);
}

bool CollBackend::run(const CollCall& c, std::string* error) { return issue(c, nullptr, error); }

bool CollBackend::openStream(std::string* error) {
  if (stream_ != nullptr) return true;
  collResult_t res = collHostStreamCreate(&stream_);
  if (res != collSuccess) {
    stream_ = nullptr;
    *error = "collHostStreamCreate: " + collErrorText(res, nullptr);
    return false;
  }
  return true;
}

bool CollBackend::enqueue(const CollCall& c, std::string* error) {
  if (stream_ == nullptr && !openStream(error)) return false;
  return issue(c, stream_, error);
}

bool CollBackend::enqueueDevice(const CollCall& c, void* cudaStream, std::string* error) {
  return issue(c, cudaStream, error);
}

// With device buffers the caller has synchronized the CUDA stream first: only the ops remain.
bool CollBackend::synchronize(std::string* error) {
  collResult_t res = stream_ != nullptr ? collHostStreamSynchronize(stream_) : collSuccess;
  if (res != collSuccess) *error = "collHostStreamSynchronize: " + collErrorText(res, nullptr);
  for (collRedOp_t op : pendingOps_) {
    collResult_t d = collRedOpDestroy(op, comm_);
    if (d != collSuccess && res == collSuccess) {
      *error = "collRedOpDestroy: " + collErrorText(d, comm_);
      res = d;
    }
  }
  pendingOps_.clear();
  return res == collSuccess;
}

bool CollBackend::issue(const CollCall& c, collStream_t stream, std::string* error) {
  collRedOp_t op = c.op;
  if (c.op == kPreMulSum) {
    unsigned char scalar[8];
    premulScalarBytes(c.type, rank_, scalar);
    collResult_t res = collRedOpCreatePreMulSum(&op, scalar, c.type, collScalarHostImmediate, comm_);
    if (res != collSuccess) {
      *error = "collRedOpCreatePreMulSum: " + collErrorText(res, comm_);
      return false;
    }
  }
  collResult_t res = collSuccess;
  switch (c.coll) {
    case PerfColl::AllReduce:
      res = c.compress != nullptr
                ? collAllReduceCompressed(c.send, c.recv, c.count, c.type, op, c.compress, c.residual, comm_, stream)
                : collAllReduce(c.send, c.recv, c.count, c.type, op, comm_, stream);
      break;
    case PerfColl::AllGather: res = collAllGather(c.send, c.recv, c.count, c.type, comm_, stream); break;
    case PerfColl::ReduceScatter: res = collReduceScatter(c.send, c.recv, c.count, c.type, op, comm_, stream); break;
    case PerfColl::Broadcast: res = collBroadcast(c.send, c.recv, c.count, c.type, c.root, comm_, stream); break;
    case PerfColl::Reduce: res = collReduce(c.send, c.recv, c.count, c.type, op, c.root, comm_, stream); break;
    case PerfColl::AlltoAll: res = collAlltoAll(c.send, c.recv, c.count, c.type, comm_, stream); break;
    case PerfColl::SendRecv: {
      // nccl-tests' ring: send to the right, receive from the left, both in one group.
      res = collGroupStart();
      collResult_t s = collSend(c.send, c.count, c.type, (rank_ + 1) % size_, comm_, stream);
      collResult_t r = collRecv(c.recv, c.count, c.type, (rank_ - 1 + size_) % size_, comm_, stream);
      collResult_t e = collGroupEnd();
      for (collResult_t x : {s, r, e}) {
        if (res == collSuccess) res = x;
      }
      break;
    }
    case PerfColl::Gather: res = collGather(c.send, c.recv, c.count, c.type, c.root, comm_, stream); break;
    case PerfColl::Scatter: res = collScatter(c.send, c.recv, c.count, c.type, c.root, comm_, stream); break;
  }
  if (res != collSuccess) *error = collErrorText(res, comm_);
  if (c.op == kPreMulSum && stream != nullptr && res == collSuccess) {
    pendingOps_.push_back(op);
  } else if (c.op == kPreMulSum) {
    collResult_t d = collRedOpDestroy(op, comm_);
    if (d != collSuccess && res == collSuccess) {
      *error = "collRedOpDestroy: " + collErrorText(d, comm_);
      res = d;
    }
  }
  return res == collSuccess;
}

bool CollBackend::traffic(PerfTraffic* out) {
  collCommStats_t st;
  if (collCommGetStats(comm_, &st) != collSuccess) return false;
  out->wireBytes = st.wireBytes;
  out->compressedWireBytes = st.compressedWireBytes;
  out->compressedCalls = st.compressedCalls;
  out->uncompressedFallbacks = st.uncompressedFallbacks;
  return true;
}

bool CollBackend::barrier(std::string* error) {
  int one = 1, sum = 0;
  return allReduce(&one, &sum, 1, collInt32, collSum, error);
}

}  // namespace coll::perf
