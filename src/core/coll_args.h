// CollArgs: a validated collective call, as the API hands it to the communicator and planner.
#pragma once

#include <cstdint>

#include "collective/collective.h"

namespace coll {

enum class CollKind : uint8_t { AllReduce };

struct CollArgs {
  CollKind kind = CollKind::AllReduce;
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  uint64_t count = 0;  // elements (per rank, as NCCL counts them for this collective)
  collDataType_t dtype = collFloat32;
  collRedOp_t op = collSum;
  int32_t root = -1;
  bool inPlace() const { return sendbuff == recvbuff; }
};

}  // namespace coll
