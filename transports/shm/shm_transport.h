// Shared-memory transport: one POSIX shm segment per local rank holding its doorbell, progress
// slots, one receive FIFO per local peer and its window; connections between ranks of one host.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "src/base/deadline.h"
#include "src/base/status.h"
#include "src/oob/bootstrap.h"
#include "src/topo/topology.h"
#include "transports/transport.h"

namespace coll {

// Bootstrap tag of the local-rank barrier in ShmHost::create (0x5348 = "SH").
constexpr uint32_t kShmBarrierTag = 0x53480000u;

struct ShmOptions {
  uint64_t fifoBytes = 2ull << 20;        // per ordered pair of local ranks; multiple of 64
  uint64_t windowHalfBytes = 4ull << 20;  // each of the two halves; multiple of 64
  int publishSlots = 64;
};

// COLL_SHM_FIFO_BYTES, COLL_SHM_WINDOW_BYTES (split in two halves), 64 publish slots; sizes are
// rounded up to multiples of 64.
ShmOptions shmOptionsFromConfig();

class ShmHost final : public HostWindows {
 public:
  // Collective over topo.localRanks: creates this rank's segment, maps every local peer's, and
  // unlinks its own as soon as every local rank has mapped it, so /dev/shm holds nothing after
  // this returns (or fails). The bootstrap is used only for a barrier among local ranks.
  static Status create(Bootstrap& bootstrap, const Topology& topo, const ShmOptions& options, Deadline deadline,
                       std::unique_ptr<ShmHost>* out);
  ~ShmHost() override;
  ShmHost(const ShmHost&) = delete;
  ShmHost& operator=(const ShmHost&) = delete;

  int rank() const { return rank_; }
  const std::vector<int32_t>& localRanks() const { return localRanks_; }
  // Local index of a global rank, or -1 when it is not on this host.
  int localIndex(int rank) const;
  // Segment bytes per rank for these options and local size (to size /dev/shm).
  static uint64_t segmentBytes(const ShmOptions& options, int localSize);

  // Maps now, in this process's page tables, every page this rank's calls will touch: its own
  // segment, and in each peer's its FIFO towards that peer and the window. Otherwise the first call
  // to touch a page pays for it (a page fault, and on some VMs a few microseconds more per page of
  // each mapping on first access, measured in PERFORMANCE.md). Reads only; safe beside calls.
  void prefault();
  // Bytes prefault() touches: those of this rank's mappings that its calls use.
  uint64_t prefaultBytes() const;

  // Connection to a local peer (this rank itself gives a loopback stream). Cheap, no I/O. The
  // connection points into this host's mappings: destroy connections before the host.
  Status connection(int peer, std::unique_ptr<Connection>* out);

  // Sleep protocol (see transport.h Links): the waiter marks itself sleeping and reads its
  // doorbell; notifiers that see the mark bump the doorbell and FUTEX_WAKE it. A rank that also
  // waits on sockets (TCP peers) cannot sleep on a futex: it prepares with `viaSocket`, polls
  // wakeFd() with its sockets, and notifiers send a datagram to it instead.
  uint64_t prepareWait(bool viaSocket = false);
  void wait(uint64_t token, int maxMs);
  void cancelWait();
  // The datagram socket local peers wake this rank through (-1 if it could not be made: then
  // socket waits must stay short). finishSocketWait() drains it and clears the sleeping mark.
  int wakeFd() const { return wakeFd_; }
  // True when a notifier rang since prepareWait returned `token`.
  bool doorbellMoved(uint64_t token) const;
  void finishSocketWait();
  // Rings local rank `rank` if it sleeps (no system call otherwise).
  void notifyRank(int rank);

  // Non-null error when local rank `rank`'s process has exited (names the rank and pid).
  Status checkPeerAlive(int rank);

  // HostWindows.
  std::byte* windowHalf(int rank, uint64_t seq) override;
  uint64_t halfBytes() const override { return options_.windowHalfBytes; }
  int maxPublishSlots() const override { return options_.publishSlots; }
  std::atomic<uint64_t>& progressSlot(int rank, int slot) override;
  std::atomic<uint64_t>& completedCalls(int rank) override;
  void notifyLocalPeers() override;

  // Segment internals, shared with the connection implementation.
  struct Header;
  struct FifoControl;
  Header* header(int localIdx) const;
  FifoControl* fifo(int receiverLocal, int senderLocal) const;
  std::byte* fifoData(int receiverLocal, int senderLocal) const;
  uint64_t fifoBytes() const { return options_.fifoBytes; }

 private:
  ShmHost() = default;
  void ring(int localIdx);

  int rank_ = -1;
  int localIdx_ = -1;
  std::vector<int32_t> localRanks_;
  ShmOptions options_;
  uint64_t segmentBytes_ = 0;
  uint64_t slotsOffset_ = 0;
  uint64_t fifoOffset_ = 0;
  uint64_t fifoStride_ = 0;
  uint64_t windowOffset_ = 0;
  std::vector<std::byte*> segments_;  // mapped base per local index
  std::vector<int> pidfds_;           // per local index; -1 when unavailable (then kill(pid, 0))
  std::vector<pid_t> pids_;
  int wakeFd_ = -1;  // abstract-namespace datagram socket (per comm and rank)
  uint64_t commHash_ = 0;
};

}  // namespace coll
