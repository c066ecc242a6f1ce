// A cluster network described in text: the fabric, where the hosts sit on it and the per-rank
// link parameters. COLL_TOPO_FABRIC (the planner's fabric tuner) and collsim's options use the
// same keys, parsed here only.
#pragma once

#include <cstdint>
#include <string>

#include "src/base/status.h"
#include "src/plan/schedule_cost.h"
#include "src/sim/fabric.h"

namespace coll::sim {

struct FabricDescription {
  FabricSpec fabric;  // ranksPerNode is the communicator's (collsim: -g), not a key
  int32_t nodes = 0;  // fabric nodes (0 = one per host)
  PlacementSpec placement;
  LinkModel model;  // per-message latencies, memory bandwidth, default slice (the bandwidths are fabric's)
  // How much the fabric tuner may simulate per candidate (deterministic budgets, never wall time,
  // so that every rank reaches the same verdict): exact runs up to exactSteps steps, and any run
  // up to maxWork units of rate solving (a flow's link visited once); past either, no opinion.
  uint64_t exactSteps = 1'000'000;
  uint64_t maxWork = 10'000'000;
};

// The keys (values as collsim's options take them): fabric (nonblocking, fattree2, fattree3, rail,
// torus, dragonfly), nodes, placement (linear, random[:SEED], file:PATH), nic, intra, mem,
// torus-link, local-link, global-link (GB/s), alpha-intra, alpha-inter (us), hop (ns), slice
// (bytes: 128K), leaf-ports, uplinks, oversub, pod-leaves, agg-uplinks, agg-oversub, torus (XxY or
// XxYxZ), routers, nodes-per-router, routing (minimal, valiant), exact-steps, work.
// *known = false (and ok) for a key that is not one of them; a bad value is collInvalidArgument.
Status applyFabricOption(const std::string& key, const std::string& value, FabricDescription* d, bool* known);

// "KIND[,key=value...]" (or key=value items only, fabric= among them), or "@PATH": a file of the
// same items separated by commas or newlines, '#' starting a comment. Unknown keys are errors.
Status parseFabricDescription(const std::string& text, FabricDescription* d);

// "fattree2, 50 GB/s NIC, oversubscription 2" (logs).
std::string describeFabric(const FabricDescription& d);

}  // namespace coll::sim
