// Names of collectives, for logs and errors.
#include "src/schedule/coll_args.h"

namespace coll {

const char* collKindName(CollKind kind) {
  switch (kind) {
    case CollKind::AllReduce: return "allreduce";
    case CollKind::Broadcast: return "broadcast";
    case CollKind::Reduce: return "reduce";
    case CollKind::AllGather: return "allgather";
    case CollKind::ReduceScatter: return "reducescatter";
    case CollKind::AlltoAll: return "alltoall";
    case CollKind::Gather: return "gather";
    case CollKind::Scatter: return "scatter";
    case CollKind::Send: return "send";
    case CollKind::Recv: return "recv";
    case CollKind::Barrier: return "barrier";
  }
  return "?";
}

}  // namespace coll
