// libcollective backend of the benchmark harness (see perf_backend_coll.h).
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

bool CollBackend::run(const CollCall& c, std::string* error) {
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
    case PerfColl::AllReduce: res = collAllReduce(c.send, c.recv, c.count, c.type, op, comm_, nullptr); break;
    case PerfColl::AllGather:
      res = collAllGather(c.send, c.recv, c.count, c.type, comm_, nullptr);
      break;
    case PerfColl::ReduceScatter:
      res = collReduceScatter(c.send, c.recv, c.count, c.type, op, comm_, nullptr);
      break;
    case PerfColl::Broadcast:
      res = collBroadcast(c.send, c.recv, c.count, c.type, c.root, comm_, nullptr);
      break;
    case PerfColl::Reduce:
      res = collReduce(c.send, c.recv, c.count, c.type, op, c.root, comm_, nullptr);
      break;
    case PerfColl::AlltoAll:
      res = collAlltoAll(c.send, c.recv, c.count, c.type, comm_, nullptr);
      break;
    case PerfColl::SendRecv: {
      // nccl-tests' ring: send to the right, receive from the left, both in one group.
      res = collGroupStart();
      collResult_t s = collSend(c.send, c.count, c.type, (rank_ + 1) % size_, comm_, nullptr);
      collResult_t r = collRecv(c.recv, c.count, c.type, (rank_ - 1 + size_) % size_, comm_, nullptr);
      collResult_t e = collGroupEnd();
      for (collResult_t x : {s, r, e}) {
        if (res == collSuccess) res = x;
      }
      break;
    }
    case PerfColl::Gather:
      res = collGather(c.send, c.recv, c.count, c.type, c.root, comm_, nullptr);
      break;
    case PerfColl::Scatter:
      res = collScatter(c.send, c.recv, c.count, c.type, c.root, comm_, nullptr);
      break;
  }
  if (res != collSuccess) *error = collErrorText(res, comm_);
  if (c.op == kPreMulSum) {
    collResult_t d = collRedOpDestroy(op, comm_);
    if (d != collSuccess && res == collSuccess) {
      *error = "collRedOpDestroy: " + collErrorText(d, comm_);
      res = d;
    }
  }
  return res == collSuccess;
}

bool CollBackend::barrier(std::string* error) {
  int one = 1, sum = 0;
  return allReduce(&one, &sum, 1, collInt32, collSum, error);
}

}  // namespace coll::perf
