// Names of collectives (for logs and errors) and the size of each buffer of a call.
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

void bufferElements(const CollArgs& a, int rank, int nranks, uint64_t* sendElems, uint64_t* recvElems) {
  const uint64_t n = static_cast<uint64_t>(nranks), c = a.count;
  const bool root = rank == a.root;
  switch (a.kind) {
    case CollKind::AllReduce: *sendElems = c, *recvElems = c; break;
    case CollKind::Broadcast: *sendElems = root ? c : 0, *recvElems = c; break;
    case CollKind::Reduce: *sendElems = c, *recvElems = root ? c : 0; break;
    case CollKind::AllGather: *sendElems = c, *recvElems = c * n; break;
    case CollKind::ReduceScatter: *sendElems = c * n, *recvElems = c; break;
    case CollKind::AlltoAll: *sendElems = c * n, *recvElems = c * n; break;
    case CollKind::Gather: *sendElems = c, *recvElems = root ? c * n : 0; break;
    case CollKind::Scatter: *sendElems = root ? c * n : 0, *recvElems = c; break;
    case CollKind::Send: *sendElems = c, *recvElems = 0; break;
    case CollKind::Recv: *sendElems = 0, *recvElems = c; break;
    case CollKind::Barrier: *sendElems = 0, *recvElems = 0; break;
  }
}

}  // namespace coll
