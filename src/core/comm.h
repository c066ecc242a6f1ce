// Comm: one rank's communicator. Owns the bootstrap, the topology, the host's shared memory,
// the connections (made lazily, on first use of a peer), the planner's inputs, the plan cache and
// the executor. Collectives arrive as CollArgs from the API and leave as schedules.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/bootstrap.h"
#include "core/coll_args.h"
#include "core/deadline.h"
#include "core/planner.h"
#include "core/status.h"
#include "exec/executor.h"
#include "exec/schedule.h"
#include "topo/topology.h"
#include "transports/transport.h"

namespace coll {

class ShmHost;
class TcpConnectionBase;

struct CommConfig {
  int64_t timeoutMs = 0;  // 0 = COLL_TIMEOUT
  std::string netName;    // "" = automatic
  std::string commName;
};

class Comm final : public Links {
 public:
  static Status create(const collUniqueId& id, int nranks, int rank, const CommConfig& config,
                       std::unique_ptr<Comm>* out);
  ~Comm() override;

  int nranks() const { return topo_.nranks; }
  const Topology& topology() const { return topo_; }

  // Blocking host All-Reduce (the caller's thread runs the executor).
  Status allReduce(const CollArgs& args);

  // Stops every wait (peers may still be waiting for us: they will see the failure).
  void abort();
  // First fatal error of this communicator (collSuccess while healthy).
  collResult_t asyncError() const { return asyncError_.load(); }
  const std::string& failureMessage() const { return failureMessage_; }

  // Links (for the executor).
  int rank() const override { return topo_.rank; }
  Status connection(int peer, Connection** out) override;
  HostWindows* windows() override;
  uint64_t prepareWait() override;
  void wait(uint64_t token, int maxMs) override;
  void notifyPeers() override;
  Status checkHealth() override;

 private:
  Comm() = default;
  Status init(const collUniqueId& id, int nranks, int rank, const CommConfig& config);
  Deadline callDeadline() const { return Deadline::afterMs(timeoutMs_); }
  struct PlanEntry;
  Status runPlan(PlanEntry& plan, const void* send, void* recv);
  // The plan for this call shape, from the cache or built now (the only allocation on a new shape).
  PlanEntry& planFor(const CollArgs& args, const PlanChoice& choice);
  void fail(const Status& status);

  enum class TransportKind { Auto, Shm, Tcp };

  std::unique_ptr<Bootstrap> bootstrap_;
  Topology topo_;
  std::unique_ptr<ShmHost> shm_;
  TransportKind forced_ = TransportKind::Auto;
  std::vector<std::unique_ptr<Connection>> connections_;  // by peer rank, lazily made
  std::vector<Connection*> tcpConnections_;                // the ones that need poll() to sleep
  PlannerInputs plannerInputs_;
  int64_t timeoutMs_ = 0;
  std::string name_;
  uint64_t seq_ = 0;  // calls so far; the executor's call number is seq_ after increment
  WaitPolicy waitPolicy_;

  struct PlanKey {
    uint64_t count;
    collDataType_t dtype;
    collRedOp_t op;
    AlgoId algo;
    bool operator==(const PlanKey&) const = default;
  };
  // A cached plan keeps its own prepared Execution: a repeated call only rebinds pointers.
  struct PlanEntry {
    PlanKey key;
    Schedule schedule;
    Execution execution;
  };
  std::list<PlanEntry> plans_;  // most recently used first, at most kMaxPlans
  static constexpr size_t kMaxPlans = 16;

  std::atomic<collResult_t> asyncError_{collSuccess};
  std::string failureMessage_;
  std::atomic<bool> aborted_{false};
};

}  // namespace coll
