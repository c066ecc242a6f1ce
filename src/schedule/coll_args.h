// CollArgs: a validated collective call, as the API hands it to the communicator and planner.
#pragma once

#include <cstdint>

#include "collective/collective.h"

namespace coll {

enum class CollKind : uint8_t {
  AllReduce,
  Broadcast,
  Reduce,
  AllGather,      // count = elements each rank contributes (NCCL's sendcount)
  ReduceScatter,  // count = elements each rank receives (NCCL's recvcount)
  AlltoAll,       // count = elements to and from each rank
  Gather,         // count = elements each rank contributes
  Scatter,        // count = elements each rank receives
  Send,
  Recv,
  Barrier,
};
const char* collKindName(CollKind kind);

struct CollArgs {
  CollKind kind = CollKind::AllReduce;
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  uint64_t count = 0;  // elements (per rank, as NCCL counts them for this collective)
  collDataType_t dtype = collFloat32;
  collRedOp_t op = collSum;
  int32_t root = -1;  // Broadcast, Reduce, Gather, Scatter
  int32_t peer = -1;  // Send, Recv
  // Compressed All-Reduce (collAllReduceCompressed): blockSize 0 = not compressed.
  struct Compression {
    int32_t blockSize = 0;
    bool stochastic = false;
    uint64_t seed = 0;
    uint64_t step = 0;
    uint64_t minBytes = 0;  // resolved: below it the call runs uncompressed
    float* residual = nullptr;
  } compress;
  bool inPlace() const { return sendbuff == recvbuff; }
};

// How many elements each buffer of a call holds on `rank` (0 = not used there), per NCCL.
void bufferElements(const CollArgs& a, int rank, int nranks, uint64_t* sendElems, uint64_t* recvElems);

}  // namespace coll
