// ibverbs transport internals: options and COLL_IB_HCA parsing, the opened device (port, GID,
// protection domain, completion channel, async events), the registration cache and connections.
#pragma once

#include <infiniband/verbs.h>
#include <poll.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "src/base/deadline.h"
#include "src/base/status.h"
#include "src/oob/bootstrap.h"
#include "transports/ib/verbs_api.h"
#include "transports/stream_ring.h"
#include "transports/stripe_pattern.h"
#include "transports/transport.h"

namespace coll {

// Bootstrap tags of the ib transport (0x4942 = "IB"): connection data, ready, failure notice.
constexpr uint32_t kIbTagBase = 0x49420000u;
constexpr uint32_t kIbTagInfo = kIbTagBase + 0;
constexpr uint32_t kIbTagReady = kIbTagBase + 1;
constexpr uint32_t kIbTagFailure = kIbTagBase + 2;
constexpr uint32_t kIbTagRailLost = kIbTagBase + 3;
constexpr int kIbMaxQps = 16;  // queue pairs of a connection over all its rails together
constexpr int kIbMaxRails = 8;

// COLL_IB_HCA: "mlx5_0:1,mlx5_1" (prefixes, optional port), "^..." excludes, "=..." matches whole
// names; "^=..." does both. An empty filter matches everything.
struct IbHcaEntry {
  std::string name;
  int port = -1;  // -1: any port
};
struct IbHcaFilter {
  bool exclude = false;
  bool exact = false;
  std::vector<IbHcaEntry> entries;
  bool matches(const std::string& device, int port) const;
};
Status parseIbHcaList(const std::string& text, IbHcaFilter* out);

struct IbOptions {
  std::string hca;                  // COLL_IB_HCA
  int gidIndex = -1;                // COLL_IB_GID_INDEX; -1: prefer RoCE v2 with an IPv4-mapped address
  int qps = 2;                      // COLL_IB_QPS_PER_CONNECTION (per rail)
  int rails = 1;  // COLL_IB_RAILS: ports per connection; 0: every admitted active port; -1: the equally near
  int trafficClass = 0;             // the communicator's, else COLL_IB_TC (GRH: RoCE only)
  int serviceLevel = 0;             // COLL_IB_SL
  int timeout = 20;                 // COLL_IB_TIMEOUT: ACK timeout 4.096 us * 2^timeout
  int retryCount = 7;               // COLL_IB_RETRY_CNT
  uint64_t ringBytes = 4ull << 20;  // COLL_IB_STAGING_BYTES (rounded up to a power of two)
  int sendDepth = 256;              // work requests per send queue
  int recvDepth = 256;              // receives posted per QP
  uint32_t maxInline = 128;         // asked for; the QP reports what it grants
  // Devices to try first, nearest to the rank first (placement); only when COLL_IB_HCA is unset.
  // Devices not named are tried after them, in the order verbs lists them.
  std::vector<std::string> nearDevices;
  int nearRails = 0;  // how many of them, from the front, are equally near (COLL_IB_RAILS=-1)
};
IbOptions ibOptionsFromConfig();
// The RDMA devices of the node's topology ordered by their distance to this rank, from the
// placement hint of the communicator being created (empty without one).
// `equallyNear` (optional): how many at the front share the nearest path type.
std::vector<std::string> nearIbDevices(int* equallyNear = nullptr);

// What discovery chose.
struct IbPortInfo {
  std::string device;
  int port = 0;
  bool ethernet = false;  // RoCE (GID addressing); false: InfiniBand (LID addressing)
  int gidIndex = -1;
  ibv_gid gid{};
  std::string gidType;  // "RoCE v2", "RoCE v1", "IB"
  uint16_t lid = 0;
  ibv_mtu activeMtu = IBV_MTU_1024;
  uint32_t rateMbps = 0;         // signalling rate (width x lane speed); 0: unknown. Weighs the rail.
  std::string describe() const;  // "mlx5_0:1 RoCE v2 (GID index 3)"
};

// The connection data a peer sends over the bootstrap (per rail: QPNs, PSNs, GID/LID, MTU, rate,
// keys; ring addresses): remote bytes, checked field by field against this rank's rails (as many
// as both have) before any is used (tests/fuzz calls it too).
Status checkIbConnectInfo(const uint8_t* bytes, size_t size, std::span<const IbPortInfo> local, int peer);
// A peer's notice that it lost a rail (multi-rail failover): size, magic and a rail below `rails`
// (the positions in it are checked against the connection when used). tests/fuzz calls it too.
Status checkIbRailNotice(const uint8_t* bytes, size_t size, int rails, uint32_t* rail);

// Registration cache: a buffer range is registered once and found again by address; evict()
// (memory about to be freed) and the destructor deregister. dmabuf regions (GPU memory exported
// by the CUDA driver) are cached by (fd, offset, length).
class IbMrCache {
 public:
  IbMrCache(const VerbsApi& api, ibv_pd* pd) : api_(api), pd_(pd) {}
  ~IbMrCache();
  IbMrCache(const IbMrCache&) = delete;
  IbMrCache& operator=(const IbMrCache&) = delete;

  Status registerHost(void* addr, size_t length, int access, ibv_mr** out);
  Status registerDmabuf(int fd, uint64_t offset, size_t length, uint64_t iova, int access, ibv_mr** out);
  void evict(const void* addr, size_t length);  // every host region overlapping the range
  void evictDmabuf(int fd);
  size_t size() const;
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }

 private:
  struct Region {
    uintptr_t end = 0;
    int access = 0;
    ibv_mr* mr = nullptr;
  };
  struct DmabufRegion {
    int fd;
    uint64_t offset;
    size_t length;
    int access;
    ibv_mr* mr;
  };
  const VerbsApi& api_;
  ibv_pd* pd_;
  mutable std::mutex mu_;
  std::map<uintptr_t, Region> host_;  // by start address
  std::vector<DmabufRegion> dmabuf_;
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
};

class IbConnection;

// One opened device port per communicator: context, protection domain, completion channel (one
// fd for every connection's CQ), async events routed to the connections they concern.
class IbDevice {
 public:
  // Discovery: the first active port that COLL_IB_HCA admits, and its GID. The error says what
  // to check ("no RDMA device ...").
  static Status open(const VerbsApi& api, const IbOptions& options, std::shared_ptr<IbDevice>* out);
  // The rails of a connection: options.rails active ports that COLL_IB_HCA admits (every one for
  // 0), each opened as its own device. Fewer than asked for is an error naming every port looked
  // at and why it was not taken, as is a COLL_IB_HCA name that no device has.
  static Status openRails(const VerbsApi& api, const IbOptions& options, std::vector<std::shared_ptr<IbDevice>>* out);
  ~IbDevice();
  IbDevice(const IbDevice&) = delete;
  IbDevice& operator=(const IbDevice&) = delete;

  const VerbsApi& api() const { return api_; }
  ibv_context* context() const { return context_; }
  ibv_pd* pd() const { return pd_; }
  ibv_comp_channel* channel() const { return channel_; }
  const IbPortInfo& port() const { return port_; }
  const ibv_device_attr& attr() const { return attr_; }
  IbMrCache& mrCache() { return *mrCache_; }
  std::string name() const { return port_.device + ":" + std::to_string(port_.port); }

  // Set once the port went down or the device failed (async events): every connection fails.
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  Status failure() const;

  void addConnection(IbConnection* c);
  void removeConnection(IbConnection* c);
  // Reads pending async events (non-blocking) and hands them to the connections they name.
  void pollAsyncEvents();
  // Reads pending completion-channel events (non-blocking), acknowledges them, re-arms nothing.
  void drainCqEvents();
  // The communicator's sleep: false when some connection can progress now. `connections` false:
  // only this device's fds (a connection over several rails is prepared once, through its first
  // rail's device; this device's pending events make its async fd readable, so the sleep ends).
  bool prepareSleep(std::vector<pollfd>* fds, bool connections = true);

 private:
  IbDevice(const VerbsApi& api) : api_(api) {}
  Status finishOpen();  // protection domain, completion channel, registration cache
  const VerbsApi& api_;
  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  IbPortInfo port_;
  ibv_device_attr attr_{};
  std::unique_ptr<IbMrCache> mrCache_;
  std::atomic<bool> failed_{false};
  mutable std::mutex mu_;  // connections_, failure_, async event handling
  Status failure_;
  std::vector<IbConnection*> connections_;
  std::vector<IbConnection*> sleepScratch_;  // prepareSleep's copy (no allocation per sleep)
};

// A connection to one peer over one or more rails (ports, each its own opened device) and `qps` RC
// queue pairs on each: its lanes, numbered rail-major. The byte stream lives in a send staging ring
// here and a receive ring at the peer of the same size R (a power of two), both registered with
// every rail; byte k of the stream is at offset k mod R in both. It is cut into chunks of C bytes
// (C divides R); chunk i travels on lane pattern.laneOf(i) (stripe_pattern.h: round-robin over
// the lanes, rails weighted by their agreed rate) as RDMA writes with immediate (the immediate is
// the write's length), so each lane carries its chunks in order and the receiver advances per
// lane as over TCP's striped sockets.
//
// A lost rail (completion errors or a port that went down on one of its lanes, or the peer saying
// so) moves its traffic to the others when any is left (docs/ARCHITECTURE.md, "Multi-rail"): each
// end puts the rail's QPs in the error state, tells the other over the bootstrap where its send
// stream switches to a pattern without the rail and how far each of the rail's lanes got here, and
// waits for the same from the peer; the bytes of the rail's chunks the peer lacks are then written
// again over a live lane as repair writes (flagged immediates), in stream order.
// Flow control: the receiver RDMA-writes its consumed position and, per QP, the receives it has
// reposted into the sender's credit block; the sender never writes past consumed + R nor more
// writes with immediate than the peer has receives posted.
class IbConnection final : public Connection {
 public:
  ~IbConnection() override;
  IbConnection(const IbConnection&) = delete;
  IbConnection& operator=(const IbConnection&) = delete;

  int peer() const override { return peer_; }
  std::span<std::byte> sendSpace() override;
  void sendCommit(size_t bytes) override { committed_ += bytes; }
  std::span<const std::byte> recvData() override;
  void recvConsume(size_t bytes) override { consumed_ += bytes; }
  uint64_t sentBytes() const override { return committed_; }
  uint64_t receivedBytes() const override { return consumed_; }
  Status progress(bool* progressed) override;
  Status checkHealth() override;
  // Acknowledged by the peer's HCA, not merely posted: a connection torn down right after its
  // last call must not abort writes still on the wire.
  bool sendsFlushed() const override { return sendDone_ >= committed_ || !error_.ok(); }
  uint64_t flushedBytes() const override { return error_.ok() ? sendDone_ : committed_; }

  int qps() const { return nqps_; }         // lanes: queue pairs over all rails
  int rails() const { return usedRails_; }  // carrying lanes (those both ends have)
  std::string railName(int rail) const { return rails_[static_cast<size_t>(rail)].device->name(); }
  // Stream bytes handed to the rail's HCA so far: how the stripes were spread.
  uint64_t railBytesSent(int rail) const { return rails_[static_cast<size_t>(rail)].bytesSent; }
  uint64_t ringBytes() const { return ring_.capacity(); }
  uint64_t chunkBytes() const { return chunk_; }
  uint32_t maxInline() const { return maxInline_; }
  uint64_t creditWrites() const { return creditWrites_; }

  // Sleep support (IbDevice::prepareSleep): a sender waiting for the peer's credit gets no
  // completion event when it arrives, so it must not sleep; otherwise arm the CQ and poll once
  // more (true: something arrived, do not sleep).
  bool creditBlocked() const;
  bool armAndPoll();
  void onCqEvent(const ibv_cq* cq);
  bool ownsCq(const ibv_cq* cq) const;
  bool ownsQp(const ibv_qp* qp) const;
  // An async event (QP fatal, CQ error, port down) failed this connection.
  void fail(const Status& status);
  // The port `device` went down or one of its QPs failed: that rail is lost (the connection fails
  // when it was the last).
  void railFailed(const IbDevice* device, const Status& status);

 private:
  friend Status connectIb(Bootstrap& bootstrap, std::span<const std::shared_ptr<IbDevice>> devices, int peer,
                          const IbOptions& options, Deadline deadline, std::unique_ptr<IbConnection>* out);
  IbConnection() = default;

  // One port: its CQ (a CQ belongs to one device), the rings' registrations with its protection
  // domain, and the peer's keys for its rings on the matching port.
  struct Rail {
    std::shared_ptr<IbDevice> device;
    ibv_cq* cq = nullptr;
    bool armed = false;
    ibv_mr* sendMr = nullptr;
    ibv_mr* recvMr = nullptr;
    ibv_mr* creditMr = nullptr;
    ibv_mr* creditSrcMr = nullptr;
    uint32_t peerRingRkey = 0;
    uint32_t peerCreditRkey = 0;
    uint64_t bytesSent = 0;
    uint32_t weight = 1;
    bool dead = false;
    Status why;  // what killed it
  };
  // One direction's repair: the ranges [first, second) of the lost rail's chunks the receiver
  // lacks, in stream order, and the next byte to write (sender) or expect (receiver).
  struct Repair {
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    size_t index = 0;
    uint64_t pos = UINT64_MAX;  // UINT64_MAX: nothing (left) to repair
    void start() { pos = ranges.empty() ? UINT64_MAX : ranges[0].first; }
    void advance(uint64_t len) {
      pos += len;
      if (pos == ranges[index].second) pos = ++index < ranges.size() ? ranges[index].first : UINT64_MAX;
    }
  };

  struct Qp {
    ibv_qp* qp = nullptr;
    int rail = 0;
    uint64_t postedWrs = 0;     // work requests posted (data and credit)
    uint64_t reapedWrs = 0;     // of them, known complete (signaled completion reaped)
    uint64_t signaledUpTo = 0;  // 1 + sequence of the last signaled one
    uint32_t unsignaledRun = 0;
    uint64_t unsignaledBytes = 0;
    uint64_t immWrites = 0;      // writes with immediate posted (consume a peer receive each)
    uint64_t peerRecvsDone = 0;  // receives the peer reported consumed and reposted
    uint64_t recvPos = 0;        // stream position of the next byte this QP receives
    uint64_t recvsDone = 0;      // receives consumed here (and reposted)
    uint64_t recvsPublished = 0;
    // Data writes not yet reaped: (WR sequence, stream start), oldest first, a ring of sendDepth.
    std::vector<std::pair<uint64_t, uint64_t>> inflight;
    size_t inflightHead = 0;
    size_t inflightCount = 0;
  };

  void reap(Qp& Q, uint64_t seq);
  // Polls the due rails' CQs (railDue) and those in `force` (a bit per rail).
  Status pollCompletions(bool* progressed, uint32_t force = 0);
  bool signaledPending(int rail) const;  // a signaled write on the rail not yet reaped
  // Room for another write with immediate on lane q at the peer (its receive count refreshed
  // from the credit block when needed, and checked).
  Status peerRecvsFree(int q, bool* free);
  Status handleCompletion(const ibv_wc& wc, int* reposts);
  Status postData(bool* progressed);
  Status publishCredits();
  Status probePeer();
  Status postCreditBlock(uint64_t consumed, bool useRecvsDone, bool forceSignal);
  Status postWrite(int q, uint64_t localAddr, uint32_t lkey, uint32_t length, uint64_t remoteAddr, uint32_t rkey,
                   bool withImm, uint64_t streamStart, bool forceSignal, bool repair = false);
  Status postRepairs(bool* progressed);
  Status postRecvs(int q, int count);
  Status completionError(const ibv_wc& wc);
  // Multi-rail failover (ib_connection.cc): railLost marks the rail (an error when it was the
  // last); freezeRail stops it and tells the peer; installFailover switches both directions' maps
  // once the peer's notice is here.
  Status railLost(int rail, const Status& why);
  Status freezeRail();
  Status checkRailNotice();
  Status installFailover(const std::vector<uint8_t>& notice);
  Status orphanRanges(const StripeSchedule& map, uint32_t lane, uint64_t from, uint64_t switchPos,
                      std::vector<std::pair<uint64_t, uint64_t>>* out);
  StripePattern livePattern(std::vector<uint32_t>* laneIds) const;
  Status protocolError(const char* what, unsigned long long a, unsigned long long b);
  void setError(const Status& status);
  void notifyPeerOnce();
  std::string where() const;              // "mlx5_0:1 to rank 3", "mlx5_0:1+mlx5_1:1 to rank 3"
  std::string railWhere(int rail) const;  // "mlx5_1:1 to rank 3"
  void release(void* p, size_t bytes);
  void updateSendDone();

  std::vector<Rail> rails_;
  Bootstrap* bootstrap_ = nullptr;
  const VerbsApi* api_ = nullptr;
  int peer_ = -1;
  int nqps_ = 0;       // lanes
  int usedRails_ = 0;  // rails_[0, usedRails_) carry lanes; the rest the peer lacks
  std::vector<Qp> qps_;
  std::vector<ibv_qp*> unusedQps_;  // created beyond what the peer agreed to
  int cqEntries_ = 0;
  int sendDepth_ = 0;
  int recvDepth_ = 0;      // receives posted per QP here
  int peerRecvDepth_ = 0;  // and at the peer: the most writes with immediate in flight per QP
  uint32_t signalEvery_ = 1;
  uint32_t maxInline_ = 0;
  IbOptions options_;

  StreamRing ring_;         // R, of both rings at both ends
  uint64_t chunk_ = 0;      // C
  StripeSchedule sendMap_;  // chunk -> lane, for the stream this end sends
  StripeSchedule recvMap_;  // and the one it receives (the two switch at different chunks)
  int perRail_ = 0;         // lanes per rail
  int creditLane_ = 0;      // the lane credit writes, probes and repair writes go on
  // Failover in progress: the rail, whether this end stopped it and told the peer, and by when the
  // peer's notice must be here.
  int failing_ = -1;
  bool frozen_ = false;
  uint64_t sendSwitch_ = 0;  // stream position from which this end's sends skip the lost rail
  Deadline failoverDeadline_ = Deadline::never();
  std::vector<uint8_t> peerNotice_;  // the peer's notice, when it came before this end froze
  uint32_t idlePolls_ = 0;
  uint32_t pollPass_ = 0;
  uint32_t signaledRails_ = 0;  // rails that may owe a send completion (a bit per rail)
  uint32_t liveRails_ = 1;      // rails in use and not lost (a bit per rail)
  int hotRail_ = 0;             // the rail carrying the next stream byte this end waits for
  bool recvSeen_ = false;       // a receive completion since received_ was last computed
  uint64_t recvsDoneTotal_ = 0;
  uint64_t recvsPublishedTotal_ = 0;
  Repair sendRepair_;
  Repair recvRepair_;
  // Repair writes in flight on creditLane_: (WR sequence, the first byte not yet acknowledged
  // once it completes), oldest first; sendDone_ stays below the first such byte.
  std::vector<std::pair<uint64_t, uint64_t>> repairInflight_;
  uint64_t repairAcked_ = UINT64_MAX;
  bool creditsDirty_ = false;  // credit writes may have been lost with a rail: send them again
  uint64_t ringAlloc_ = 0;  // bytes allocated for each ring (at least ring_)
  size_t creditSrcBytes_ = 0;
  std::byte* sendRing_ = nullptr;
  std::byte* recvRing_ = nullptr;
  // Credit block written here by the peer: [0] its consumed position, [1 + q] its receives done.
  volatile uint64_t* credit_ = nullptr;
  // Sources of credit writes when they cannot go inline: one block per send-queue slot of QP 0.
  uint64_t* creditSrc_ = nullptr;
  size_t creditBlockBytes_ = 0;
  uint64_t peerRingAddr_ = 0;
  uint64_t peerCreditAddr_ = 0;

  uint64_t committed_ = 0;
  uint64_t posted_ = 0;    // every byte before this was handed to the HCA
  uint64_t sendDone_ = 0;  // every byte before this was read by the HCA (send ring reusable)
  uint64_t peerConsumed_ = 0;
  uint64_t consumed_ = 0;
  uint64_t received_ = 0;
  uint64_t consumedPublished_ = 0;
  uint64_t creditWrites_ = 0;
  Status error_;         // sticky: progress() and checkHealth() fail with it
  Status closedReason_;  // the peer tore its end down; reported by checkHealth() only
  bool peerNotified_ = false;
};

// Over every rail in `devices` (at least one; rail r pairs with the peer's rail r, and the pair
// uses as many rails as both have).
Status connectIb(Bootstrap& bootstrap, std::span<const std::shared_ptr<IbDevice>> devices, int peer,
                 const IbOptions& options, Deadline deadline, std::unique_ptr<IbConnection>* out);
inline Status connectIb(Bootstrap& bootstrap, const std::shared_ptr<IbDevice>& device, int peer,
                        const IbOptions& options, Deadline deadline, std::unique_ptr<IbConnection>* out) {
  return connectIb(bootstrap, std::span<const std::shared_ptr<IbDevice>>(&device, 1), peer, options, deadline, out);
}

}  // namespace coll
