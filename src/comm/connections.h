// Connections: a communicator's links to its peers, the executor's Links: the transports (the
// host's shared memory, the one transport between hosts), the connections made lazily on first
// use of a peer, the windows, and how a waiting rank sleeps.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/base/deadline.h"
#include "src/base/status.h"
#include "src/comm/failure_manager.h"
#include "src/exec/executor.h"
#include "src/oob/bootstrap.h"
#include "src/topo/topology.h"
#include "transports/transport.h"

namespace coll {

class ShmHost;
class NetTransport;

// Scratch shared by a communicator and its stream lanes (Links::scratch). A call takes it when no
// other lane's call holds it — blocking calls alternate lanes on one thread, so every lane reuses
// one buffer that earlier calls already touched — else its own links' scratch.
struct SharedScratch {
  std::atomic<bool> busy{false};
  std::unique_ptr<std::byte[]> data;  // grown, never shrunk
  uint64_t bytes = 0;
};

class Connections final : public Links {
 public:
  Connections(const Topology& topo, FailureManager& failure);
  ~Connections() override;
  Connections(const Connections&) = delete;
  Connections& operator=(const Connections&) = delete;

  // Before the bootstrap: COLL_TRANSPORT, and the transports between hosts this rank can use
  // (*availableNets, which the bootstrap publishes to every rank).
  Status readForcedTransport(uint32_t* availableNets);
  // After the bootstrap: a forced shm must reach every rank.
  Status checkForcedTransport() const;
  // Whether the host's shared memory (and with it the windows) will exist.
  bool mayHaveWindows() const { return forced_ != TransportKind::Net; }
  // Picks the transport between hosts, makes the host's shared memory (unless every peer goes
  // over the network) and the wait policy.
  // trafficClass: the communicator's (kTrafficClassUnset: each transport's default).
  Status open(Bootstrap& bootstrap, const std::string& configNetName, int trafficClass, int64_t timeoutMs,
              Deadline deadline);
  // Connections first (they may reference shared memory), then the transports.
  void close();

  ShmHost* shm() { return shm_.get(); }
  NetTransport* net() { return net_.get(); }
  // The waits of this communicator's calls (the link probe swaps it for its own).
  WaitPolicy& waitPolicy() { return waitPolicy_; }
  // Bytes sent over every connection so far.
  uint64_t wireBytes() const;

  // Links (for the executor).
  int rank() const override { return topo_.rank; }
  Status connection(int peer, Connection** out) override;
  HostWindows* windows() override;
  uint64_t prepareWait() override;
  void wait(uint64_t token, int maxMs) override;
  void notifyPeers() override;
  Status checkHealth() override;
  bool aborting() const override { return failure_.aborting(); }
  std::byte* scratch(uint64_t bytes) override;
  // The family's scratch (the communicator's, for a lane its parent's); it outlives these links.
  void setSharedScratch(SharedScratch* family) { family_ = family; }
  // After each executor run: gives back the family's scratch if this run took it.
  void releaseScratch() {
    if (holding_) family_->busy.store(false, std::memory_order_release), holding_ = false;
  }
  // Grows the family's scratch to `bytes` and touches every page (the set-up thread, before any
  // call), so calls that need up to that much find it mapped.
  void prefaultScratch(uint64_t bytes);

 private:
  // COLL_TRANSPORT: Auto (shm on the host, net_ between hosts), Shm (every peer; one host only) or
  // Net (net_ for every peer, the same host included).
  enum class TransportKind { Auto, Shm, Net };
  // Picks net_ (COLL_TRANSPORT, COLL_NET, config.netName, the ranks' published availability).
  Status chooseNet(const std::string& configNetName, int trafficClass);

  const Topology& topo_;
  FailureManager& failure_;
  Bootstrap* bootstrap_ = nullptr;
  int64_t timeoutMs_ = 0;
  TransportKind forced_ = TransportKind::Auto;
  std::unique_ptr<ShmHost> shm_;
  std::unique_ptr<NetTransport> net_;                     // between hosts (or everywhere when forced)
  bool netUsed_ = false;                                  // a connection of net_ exists: sleep in poll()
  std::string netUnavailable_;                            // why this rank lacks ucx / ib (for errors)
  std::vector<std::unique_ptr<Connection>> connections_;  // by peer rank, lazily made
  std::vector<Connection*> madeConnections_;              // the non-null entries of connections_
  WaitPolicy waitPolicy_;
  SharedScratch* family_ = nullptr;
  bool holding_ = false;  // this run uses family_'s scratch
  SharedScratch own_;     // when another lane's call holds family_'s (busy unused)
};

}  // namespace coll
