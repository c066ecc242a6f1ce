// A communicator's view of its node's hardware and its rank's place in it (docs/ARCHITECTURE.md,
// "Topology and placement"): loaded and agreed at creation where a choice depends on it.
#include <sched.h>

#include <algorithm>
#include <numeric>

#include "src/base/config.h"
#include "src/base/log.h"
#include "src/comm/comm.h"
#include "src/gpu/cuda_driver.h"
#include "src/oob/node_topology.h"
#include "src/plan/planner.h"

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

int32_t Comm::gpuRingKey() {
  const std::string busId = currentGpuBusId();
  if (busId.empty()) return -1;
  const HwTopology* node = nullptr;
  if (!nodeTopology(&node).ok()) return -1;  // setupPlacement says why, where it matters
  const int32_t gpu = rankPlace(*node, busId, {}).gpu;
  if (gpu < 0) return -1;
  // The ring over every GPU of the node: the ranks of a host use some of them, and that ring's
  // order restricted to theirs keeps each PCIe switch's GPUs together (and NVLink neighbours
  // where all are used), whichever GPUs they are.
  std::vector<int32_t> all(node->gpus.size());
  std::iota(all.begin(), all.end(), 0);
  const std::vector<int32_t> ring = intraNodeRing(*node, all);
  const auto at = std::find(ring.begin(), ring.end(), gpu);
  if (at == ring.end()) return -1;
  return std::min<int32_t>(static_cast<int32_t>(at - ring.begin()), kBootstrapMaxRingKey);
}

void Comm::setupLocalOrder() {
  std::vector<int32_t> keys(static_cast<size_t>(topo_.nranks));
  for (int r = 0; r < topo_.nranks; ++r) keys[static_cast<size_t>(r)] = bootstrap_->peer(r).ringKey;
  std::vector<int32_t> rankOf = ranksInLocalOrder(topo_, keys);
  if (!rankOf.empty() && topo_.localRank() == 0 && laneParent_ == nullptr) {
    // The host's places hold its ranks in ring order.
    std::string order;
    for (int32_t place : topo_.localRanks) order += " " + std::to_string(rankOf[static_cast<size_t>(place)]);
    COLL_INFO(topo_.rank, "topology: this host's ranks in ring order (their GPUs' places in the node):%s",
              order.c_str());
  }
  plans_.setLocalOrder(std::move(rankOf));
}

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
