// Planner: picks the algorithm for a call from an alpha-beta cost model per link class (same
// host through shared memory, across hosts through the network), unless COLL_ALGO forces one.
#pragma once

#include <cstdint>
#include <string>

#include "algorithms/algorithms.h"
#include "core/coll_args.h"
#include "core/status.h"
#include "topo/topology.h"

namespace coll {


// Cost of moving a message over one link class: alpha seconds per message, beta seconds per byte.
struct LinkCost {
  double alpha = 0;
  double beta = 0;
};

struct PlannerInputs {
  Topology const* topo = nullptr;
  bool haveWindows = false;      // shared windows exist (all local ranks share memory)
  uint64_t windowHalfBytes = 0;  // per rank
  LinkCost intraHost;            // shared memory
  LinkCost interHost;            // network
  std::string forcedAlgo;        // COLL_ALGO ("" = choose)
  uint64_t directMaxBytes = 0;   // COLL_DIRECT_MAX_BYTES (0 = window bound)
  uint64_t directLimit = 0;      // derived by finalizePlannerInputs: largest direct call in bytes
};

// Derives what the planner would otherwise recompute on every call.
void finalizePlannerInputs(PlannerInputs* in);

struct PlanChoice {
  AlgoId algo = AlgoId::Ring;
  uint64_t roundElems = 0;        // > 0: the call runs as rounds of at most this many elements
  uint64_t reduceAllBelowBytes = 0;  // direct: every rank reduces everything below this size
  double predictedSeconds = 0;
};

// Validates COLL_ALGO once (an unknown or unusable algorithm is an error, not a silent fallback).
Status checkForcedAlgo(const PlannerInputs& in);
Status planAllReduce(const PlannerInputs& in, const CollArgs& args, PlanChoice* out);
// Any collective (AllReduce goes to planAllReduce). Point-to-point calls are not planned.
Status planCollective(const PlannerInputs& in, const CollArgs& args, PlanChoice* out);

// The model's predictions (exposed for tests and COLL_DEBUG=INFO).
double predictRing(const PlannerInputs& in, uint64_t bytes);
double predictDirect(const PlannerInputs& in, uint64_t bytes);
// Binomial tree vs pipelined chain (broadcast, reduce) and Bruck vs ring (all-gather); bytes is
// the message (broadcast/reduce) or one rank's block (all-gather).
double predictTree(const PlannerInputs& in, uint64_t bytes);
double predictChain(const PlannerInputs& in, uint64_t bytes);
double predictBruck(const PlannerInputs& in, uint64_t blockBytes);
double predictRingAllGather(const PlannerInputs& in, uint64_t blockBytes);

}  // namespace coll
