// The collectives the benchmarks and multi-process tests run: nccl-tests' buffer shapes, bandwidth
// factors and in-place pointers, and the exact check of every rank's buffers after one call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "collective/collective.h"

namespace coll::perf {

enum class PerfColl { AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AlltoAll, SendRecv, Gather, Scatter };

struct CollInfo {
  PerfColl coll;
  const char* name;  // nccl-tests' name: all_reduce, all_gather, ..., sendrecv
  bool reduces;      // takes an op (-o); the others print "none"
  bool rooted;       // takes a root (-r); the others print -1
  bool perRankData;  // algbw counts nranks blocks of `count` elements (all_gather, alltoall, ...)
  double (*busFactor)(int nranks);
};

extern const CollInfo kAllColls[9];
const CollInfo& collInfo(PerfColl coll);
bool parseColl(const std::string& name, PerfColl* out);

// Element counts of one call, as nccl-tests sets them up (setupArgs/getCollByteCount).
struct CollShape {
  size_t count = 0;      // the count argument of the call
  size_t sendCount = 0;  // elements of the send buffer
  size_t recvCount = 0;  // elements of the receive buffer
  // NCCL's in-place pointers, in elements per rank: send = recv + sendInplaceOffset * rank and the
  // result goes to recv + recvInplaceOffset * rank (all_gather, gather / reduce_scatter, scatter).
  size_t sendInplaceOffset = 0;
  size_t recvInplaceOffset = 0;
  size_t extent() const { return sendCount > recvCount ? sendCount : recvCount; }
};

// For a benchmark size in bytes (per-rank blocks rounded down to 16 bytes, as nccl-tests does).
CollShape shapeForBytes(PerfColl coll, size_t bytes, size_t eltSize, int nranks);
// For an exact count argument (tests use odd counts).
CollShape shapeForCount(PerfColl coll, size_t count, int nranks);
// nccl-tests' algbw numerator: the bytes one call moves per rank as nccl-tests counts them.
double algBytes(PerfColl coll, const CollShape& shape, size_t eltSize, int nranks);

// One call as a backend runs it. op is a collRedOp_t or kPreMulSum; root is -1 when unused.
struct CollCall {
  PerfColl coll = PerfColl::AllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  collDataType_t type = collFloat32;
  collRedOp_t op = collSum;
  int root = -1;
  // All-Reduce only: not null = collAllReduceCompressed with this configuration and residual
  // (null or count floats).
  const collCompression_t* compress = nullptr;
  void* residual = nullptr;
};

// The call with NCCL's pointers for `inPlace` over buffers of at least shape.extent() elements
// (sendBuf is not used in place).
CollCall makeCall(PerfColl coll, const CollShape& shape, collDataType_t type, collRedOp_t op, int root, int rank,
                  bool inPlace, void* sendBuf, void* recvBuf);

// Fills the inputs of `rank` and poisons the rest of recvBuf's extent, so a result that was not
// written, written to the wrong place or computed from the wrong data is caught.
void prepareCheck(const CollCall& call, const CollShape& shape, int rank, int nranks, bool inPlace, void* sendBuf,
                  void* recvBuf, uint64_t seed);
// Checks every element of recvBuf's extent (result, untouched input, untouched poison) and, out of
// place, the send buffer. Returns the number of wrong elements; describes the first.
size_t checkCall(const CollCall& call, const CollShape& shape, int rank, int nranks, bool inPlace, const void* sendBuf,
                 const void* recvBuf, uint64_t seed, std::string* firstError);

// The bytes checkCall accepts in recvBuf's extent after the call (result, untouched in-place
// input, poison elsewhere), written to `out` (shape.extent() elements): what a device check compares
// against byte for byte.
void expectedRecv(const CollCall& call, const CollShape& shape, int rank, int nranks, bool inPlace, uint64_t seed,
                  void* out);

}  // namespace coll::perf
