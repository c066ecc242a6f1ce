// In-process executor: every rank of a world in one process, connections as ring buffers in
// memory and host windows on the heap. Tests and the scale simulator run real schedules with it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "src/base/status.h"
#include "src/exec/executor.h"
#include "src/schedule/schedule.h"
#include "src/topo/topology.h"
#include "transports/stream_ring.h"
#include "transports/transport.h"

namespace coll {

// One direction of a MemoryConnection: a single-producer single-consumer byte ring.
struct MemoryRing {
  // At least `bytes`, rounded up to a capacity the alignment rule allows.
  explicit MemoryRing(size_t bytes);
  StreamRing ring;
  std::unique_ptr<std::byte[]> data;
  std::atomic<uint64_t> head{0};  // bytes committed by the sender
  std::atomic<uint64_t> tail{0};  // bytes consumed by the receiver
};

// A connection whose two directions are MemoryRings shared with the peer's MemoryConnection.
class MemoryConnection final : public Connection {
 public:
  // directSends: sendDirect takes every other offer (copied straight into the peer's ring), so
  // tests see the executor mix direct and ring sends in one stream.
  MemoryConnection(int peer, MemoryRing* out, MemoryRing* in, bool directSends = false)
      : peer_(peer), out_(out), in_(in), directSends_(directSends) {}
  int peer() const override { return peer_; }
  std::span<std::byte> sendSpace() override;
  void sendCommit(size_t bytes) override;
  size_t sendDirect(const std::byte* src, size_t bytes, size_t granule) override;
  uint64_t sentDirectBytes() const { return sentDirect_; }
  std::span<const std::byte> recvData() override;
  void recvConsume(size_t bytes) override;
  uint64_t sentBytes() const override { return out_->head.load(std::memory_order_relaxed); }
  uint64_t receivedBytes() const override { return in_->tail.load(std::memory_order_relaxed); }
  Status progress(bool* progressed) override {
    *progressed = false;
    return okStatus();
  }
  Status checkHealth() override { return okStatus(); }
  bool sendsFlushed() const override { return true; }

 private:
  int peer_;
  MemoryRing* out_;
  MemoryRing* in_;
  bool directSends_;
  bool refuseNext_ = false;
  uint64_t sentDirect_ = 0;
};

// Heap windows for the ranks [firstRank, firstRank + size) of one host (or any ascending list of
// ranks): two halves per rank (allocated on first use, so a 1000-rank world that never uses
// windows costs little), progress slots and completed-call counters, with HostWindows' semantics.
class MemoryHostWindows final : public HostWindows {
 public:
  MemoryHostWindows(int32_t firstRank, int32_t size, uint64_t halfBytes, int slots);
  MemoryHostWindows(std::vector<int32_t> ranks, uint64_t halfBytes, int slots);
  std::byte* windowHalf(int rank, uint64_t seq) override;
  uint64_t halfBytes() const override { return halfBytes_; }
  int maxPublishSlots() const override { return slots_; }
  std::atomic<uint64_t>& progressSlot(int rank, int slot) override;
  std::atomic<uint64_t>& completedCalls(int rank) override;
  void notifyLocalPeers() override {}

 private:
  size_t index(int rank) const;

  int32_t firstRank_;
  std::vector<int32_t> ranks_;  // ascending; empty = the block of ranks from firstRank_
  uint64_t halfBytes_;
  int slots_;
  std::vector<std::unique_ptr<std::byte[]>> data_;
  std::unique_ptr<std::atomic<uint64_t>[]> progress_;
  std::unique_ptr<std::atomic<uint64_t>[]> completed_;
};

class InProcessWorld;

// The Links of one rank of an InProcessWorld. Connections are made on first use.
class InProcessLinks final : public Links {
 public:
  InProcessLinks(InProcessWorld* world, int32_t rank, HostWindows* windows)
      : world_(world), rank_(rank), windows_(windows) {}
  int rank() const override { return rank_; }
  Status connection(int peer, Connection** out) override;
  HostWindows* windows() override { return windows_; }
  // One thread drives every rank: there is nobody to sleep for.
  uint64_t prepareWait() override { return 0; }
  void wait(uint64_t, int) override {}
  void notifyPeers() override {}

 private:
  InProcessWorld* world_;
  int32_t rank_;
  HostWindows* windows_;
  std::unordered_map<int, std::unique_ptr<MemoryConnection>> connections_;
};

struct InProcessOptions {
  size_t ringBytes = 4096;               // per direction of each connection; multiple of 64
  uint64_t windowHalfBytes = 64 * 1024;  // per rank and half
  int publishSlots = 4;
  size_t sliceBytes = 0;     // executor slice override (0 = COLL_SLICE_BYTES)
  bool directSends = false;  // connections take every other sendDirect offer
};

// N ranks, `ranksPerHost` consecutive ranks per host (hosts with more than one rank get
// windows). Persists across calls: the caller numbers calls 1, 2, 3, ... so windows are reused.
class InProcessWorld {
 public:
  InProcessWorld(int32_t nranks, int32_t ranksPerHost, const InProcessOptions& options = {});
  // Any placement: hostOfRank[r] labels rank r's host (uneven hosts, ranks not in host blocks);
  // hosts are renumbered in order of first rank, as Topology numbers them.
  explicit InProcessWorld(const std::vector<int32_t>& hostOfRank, const InProcessOptions& options = {});
  InProcessWorld(const InProcessWorld&) = delete;
  InProcessWorld& operator=(const InProcessWorld&) = delete;

  int32_t nranks() const { return nranks_; }
  const InProcessOptions& options() const { return options_; }
  Topology topology(int32_t rank) const;
  Links& links(int32_t rank) { return *links_[rank]; }
  Execution& execution(int32_t rank) { return executions_[rank]; }
  // The ring carrying bytes from `from` to `to` (made on first use).
  MemoryRing* ring(int32_t from, int32_t to);

 private:
  void makeLinks();

  int32_t nranks_, ranksPerHost_;
  std::vector<int32_t> hostOfRank_;  // host index per rank
  InProcessOptions options_;
  std::vector<std::unique_ptr<MemoryHostWindows>> windows_;  // per host (null: single-rank host)
  std::vector<std::unique_ptr<InProcessLinks>> links_;
  std::vector<Execution> executions_;
  std::unordered_map<uint64_t, std::unique_ptr<MemoryRing>> rings_;
};

// Runs call `seq` of every rank (schedules[r] with buffers[r]) to completion on this thread,
// polling ranks round-robin (deterministic). A full round without progress fails with
// collInternalError "deadlock" and each rank's pending steps.
Status runInProcess(const std::vector<const Schedule*>& schedules, const std::vector<ExecBuffers>& buffers,
                    InProcessWorld& world, uint64_t seq);

}  // namespace coll
