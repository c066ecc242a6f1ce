// A communicator's view of its node's hardware and its rank's place in it (docs/ARCHITECTURE.md,
// "Topology and placement"): loaded and agreed at creation where a choice depends on it.
#include <sched.h>

#include "src/base/config.h"
#include "src/base/log.h"
#include "src/comm/comm.h"
#include "src/gpu/cuda_driver.h"
#include "src/oob/node_topology.h"

namespace coll {

const BoolKnob kBindThreads("COLL_BIND_THREADS", "1",
                            "Bind a communicator's progress thread to the CPUs of the NUMA node of its GPU (else of "
                            "its NIC), where the node's topology is loaded and that is narrower than the process's "
                            "CPUs. 0: leave threads where the process runs.",
                            {KnobSection::PlannerExecutor, 135});

namespace {

// The CPUs this process may run on (empty when unknown).
std::vector<int32_t> processCpus() {
  std::vector<int32_t> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

// The PCI bus id of the current CUDA context's device ("" for a host rank).
std::string currentGpuBusId() {
  const gpu::CudaDriver* cu = gpu::cudaDriver();
  CUcontext ctx = nullptr;
  CUdevice dev = -1;
  if (cu == nullptr || cu->cuCtxGetCurrent(&ctx) != cu::kSuccess || ctx == nullptr ||
      cu->cuCtxGetDevice(&dev) != cu::kSuccess) {
    return "";
  }
  char busId[32] = {};
  if (cu->cuDeviceGetPCIBusId(busId, sizeof busId - 1, dev) != cu::kSuccess) return "";
  return busId;
}

}  // namespace

Status Comm::setupPlacement(Deadline deadline) {
  if (laneParent_ != nullptr) {  // a lane: its parent's node and place, so both use one NIC
    node_ = laneParent_->node_;
    placement_ = laneParent_->placement_;
    if (placement_.node != nullptr) placement_.node = &node_;
    queue_.setCpus(placement_.threadCpus);
    return okStatus();
  }
  // Loading the node through hwloc takes a tenth of a second or more; only a choice between NICs
  // (several hosts) or a topology file asked for needs it. Both are the same on every rank of a
  // host, so its ranks exchange summaries or none do.
  if (topo_.singleHost() && topologyFile().empty()) return okStatus();
  const HwTopology* mine = nullptr;
  COLL_TRY(nodeTopology(&mine).withContext("rank " + std::to_string(topo_.rank)));
  COLL_TRY(agreeNodeTopology(*bootstrap_, topo_.localRanks, *mine, &node_, deadline));
  placement_.node = &node_;
  placement_.localRank = topo_.localRank();
  const std::string busId = currentGpuBusId();
  placement_.place = rankPlace(node_, busId, processCpus());
  if (!busId.empty() && placement_.place.gpu < 0) {
    COLL_WARN(topo_.rank, "topology: this rank's GPU %s is not in the node's topology (%s): placed by its CPUs",
              busId.c_str(), node_.source.c_str());
  }
  const int32_t nic = closestNic(node_, placement_.place, {}, placement_.localRank);
  if (kBindThreads.get()) {
    placement_.threadCpus = cpusNear(node_, placement_.place, nic, processCpus());
    queue_.setCpus(placement_.threadCpus);
  }
  if (nic >= 0) {
    COLL_INFO(topo_.rank, "topology: %s; nearest NIC %s (%s)",
              placement_.place.gpu >= 0 ? ("GPU " + busId).c_str() : "host rank",
              node_.nics[static_cast<size_t>(nic)].name.c_str(), pathTypeName(nicPath(node_, placement_.place, nic)));
  }
  return okStatus();
}

}  // namespace coll
