// LinkProbe: the planner's link model (latency and bandwidth within and between hosts, reduction
// speed): each parameter from its COLL_LINK_* knob, else measured at communicator creation
// (COLL_LINK_PROBE: a short ping-pong per link class), else the built-in leads.
#pragma once

#include <cstdint>

#include "src/base/status.h"
#include "src/exec/executor.h"
#include "src/plan/planner.h"
#include "src/topo/topology.h"

namespace coll {

// What the probe needs of a communicator: blocking transfers, one all-gather, and the wait
// policy its calls use.
class ProbeChannel {
 public:
  // One blocking batch of one transfer with `peer`; peer < 0: an empty batch (every rank's call
  // count must stay the same).
  virtual Status transfer(bool send, int peer, void* buffer, uint64_t bytes) = 0;
  // Every rank's `bytes` from `mine` into `all` (rank order), planned by planCollective.
  virtual Status allGather(const void* mine, void* all, uint64_t bytes) = 0;
  virtual WaitPolicy& waitPolicy() = 0;

 protected:
  ~ProbeChannel() = default;
};

class LinkProbe {
 public:
  // `haveShm`: ranks of a host talk through shared memory (it sets how long a measuring pair
  // polls before it yields).
  LinkProbe(const Topology& topo, bool haveShm, ProbeChannel& channel)
      : topo_(topo), haveShm_(haveShm), channel_(channel) {}

  // Sets in->intraHost, interHost and gamma. `inherited`: a stream lane's parent, whose model the
  // lane takes (the same ranks over the same links: no probe, no log); the knobs are still checked.
  Status setLinkModel(PlannerInputs* in, const PlannerInputs* inherited);

 private:
  // Measured parameters (0 = not measured).
  struct Measured {
    double intraAlpha = 0, intraBeta = 0, interAlpha = 0, interBeta = 0, gamma = 0;
  };
  int rank() const { return topo_.rank; }
  // Measures the link classes the knobs leave open and agrees on them: every rank ends with the
  // measuring ranks' values, so every rank plans alike.
  Status probeLinks(bool intra, bool inter, bool gamma, Measured* out);
  // `spins`: polls before the pair yields the CPU, about one round trip of the link measured.
  Status pingPong(int peer, bool initiator, uint64_t bigBytes, uint64_t spins, double* alpha, double* beta);

  const Topology& topo_;
  const bool haveShm_;
  ProbeChannel& channel_;
};

}  // namespace coll
