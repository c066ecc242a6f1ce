// UCX transport (UCP active messages): one context and worker per communicator, an endpoint per
// peer, and connections that keep the executor's byte-stream semantics over ring buffers.
#pragma once

#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/base/deadline.h"
#include "src/base/status.h"
#include "src/oob/bootstrap.h"
#include "transports/idle_progress.h"
#include "transports/net.h"
#include "transports/stream_ring.h"
#include "transports/transport.h"

namespace coll {

// Bootstrap tags of the worker-address exchange (0x5543 = "UC").
constexpr uint32_t kUcxTagBase = 0x55430000u;
// Active-message ids and header magics of the data stream and of the credits returned.
constexpr unsigned kUcxAmData = 0x4c43;
constexpr unsigned kUcxAmCredit = 0x4c44;
constexpr uint32_t kDataMagic = 0x55434461u;    // "UCDa"
constexpr uint32_t kCreditMagic = 0x55434372u;  // "UCCr"

// Checks the handshake a peer sends over the bootstrap (sizes, rank, worker-address length): the
// parser connect uses, callable on bytes (tests/fuzz).
Status checkUcxHello(const uint8_t* bytes, size_t size, int peer);

// Keeps memory UCX may still reference after a failed teardown alive for the rest of the process,
// referenced from a list here (so leak checkers do not report what is left on purpose).
void ucxParkForever(const void* p);

struct UcxOptions {
  std::string tls;                     // COLL_UCX_TLS; empty = UCX's own choice
  uint64_t ringBytes = 4ull << 20;     // COLL_UCX_RING_BYTES (each of send and receive)
  uint64_t messageBytes = 1ull << 20;  // COLL_UCX_MESSAGE_BYTES
  std::string protocol = "auto";       // COLL_UCX_PROTOCOL: auto, eager or rndv
  std::string config;                  // COLL_UCX_CONFIG: NAME=VALUE;... for ucp_config_modify
  bool configIsDefault = true;         // COLL_UCX_CONFIG unset: its default tunes UCX's tcp only
  int trafficClass = kTrafficClassUnset;  // the communicator's config.trafficClass
};
UcxOptions ucxOptionsFromConfig();
// UCX's configuration for a context with these options (the caller releases it with
// ucp_config_release).
Status buildUcxConfig(const UcxOptions& options, ucp_config_t** out);

class UcxConnection;

// The UCX net: what one communicator owns (context, worker, its address, the endpoints' owners).
class UcxNet final : public NetTransport {
 public:
  static Status create(Bootstrap& bootstrap, const UcxOptions& options, std::unique_ptr<UcxNet>* out);
  ~UcxNet() override;
  UcxNet(const UcxNet&) = delete;
  UcxNet& operator=(const UcxNet&) = delete;

  NetKind kind() const override { return NetKind::Ucx; }
  std::string describe() const override;
  Status connect(int peer, Deadline deadline, std::unique_ptr<Connection>* out) override;
  bool prepareSleep(std::vector<pollfd>* fds) override;
  void enterCall() override { idle_.enterCall(); }
  void leaveCall() override { idle_.leaveCall(); }
  // Ends the idle progress: before the owner tears anything down.
  void stopIdleProgress() override { idle_.stop(); }

  // Drives the worker at most once per round over the connections (see UcxConnection::progress).
  void progressWorker(uint64_t* seenRound);
  ucp_worker_h worker() const { return worker_; }
  ucp_context_h context() const { return context_; }
  // The transports UCX selected for this context ("tcp,posix,sysv,cma,self").
  const std::string& transports() const { return transports_; }
  // One of them drives an RDMA device (rc, dc, ud, ...).
  bool hasRdma() const { return hasRdma_; }
  // The lower rank of a pair: takes the peer's reply if it arrived and creates the endpoint.
  Status pollReply(UcxConnection* conn, bool* ready);
  // Takes over a closing connection's endpoint: flushed (when healthy) and closed with the net.
  void retire(ucp_ep_h ep, bool flush);
  void forget(int peer) {
    if (peer >= 0 && peer < static_cast<int>(byRank_.size())) byRank_[peer] = nullptr;
  }
  // A closing connection left requests UCX still holds (a dead peer that UCX cannot detect).
  void noteStuckRequests() { stuckRequests_ = true; }

 private:
  UcxNet(Bootstrap& bootstrap, const UcxOptions& options)
      : bootstrap_(bootstrap), options_(options), idle_(bootstrap.rank(), "UCX", [this] { return idleStep(); }) {}
  static ucs_status_t onData(void* arg, const void* header, size_t headerLength, void* data, size_t length,
                             const ucp_am_recv_param_t* param);
  static ucs_status_t onCredit(void* arg, const void* header, size_t headerLength, void* data, size_t length,
                               const ucp_am_recv_param_t* param);
  UcxConnection* lookup(const void* header, size_t headerLength, size_t expected);
  static void endpointError(void* arg, ucp_ep_h ep, ucs_status_t status);
  Status sendHello(int peer, uint64_t ring, uint64_t message, Deadline deadline);
  Status createEndpoint(UcxConnection* conn, int peer, const std::string& peerName, const uint8_t* address,
                        ucp_ep_h* out);

  IdleProgress::Sleep idleStep();

  Bootstrap& bootstrap_;
  UcxOptions options_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_address_t* address_ = nullptr;
  size_t addressLength_ = 0;
  int eventFd_ = -1;
  bool peerFailureCapable_ = false;  // a selected transport can report a peer's failure
  uint32_t sendFlags_ = 0;           // from COLL_UCX_PROTOCOL
  uint64_t round_ = 1;
  std::string transports_;
  bool hasRdma_ = false;
  std::vector<UcxConnection*> byRank_;  // connections by peer rank, for the message handlers
  struct EndpointOwner {
    UcxNet* net;
    int peer;
  };
  std::vector<EndpointOwner> owners_;  // error-handler arguments, one per rank
  struct Retired {
    ucp_ep_h ep;
    ucs_status_ptr_t request;  // its flush, or null
  };
  std::vector<Retired> retired_;
  bool stuckRequests_ = false;  // then the worker and context are left alive (see ~UcxNet)
  int rank_ = -1;

  // UCX moves a message only inside its worker's progress, and a send completes once UCX has
  // copied it, perhaps to its own buffer with part of it not yet in the socket: between calls the
  // idle progress drives the worker (idleStep), handed over with the owner's calls.
  IdleProgress idle_;
};

// A connection to one peer. Data is sent as active messages from the send ring at the same ring
// position it lands at in the receiver's ring, so bytes never move between the two rings' slots.
class UcxConnection final : public Connection {
 public:
  // Header of a data message: the stream position and length of its bytes, and its sequence
  // number (messages may complete out of order: a rendezvous one after a later eager one).
  struct DataHeader {
    uint32_t magic;
    int32_t rank;  // the sender
    uint64_t seq;
    uint64_t pos;
    uint64_t len;
  };
  // Header of a credit message: how far the receiver consumed, and how many messages it has.
  struct CreditHeader {
    uint32_t magic;
    int32_t rank;
    uint64_t consumed;
    uint64_t messages;
  };
  // The most messages a sender has outstanding that the receiver has not yet completed.
  static constexpr uint64_t kMaxMessages = 256;
  static constexpr uint64_t kMaxSends = 64;  // send requests in flight
  static constexpr int kCreditSlots = 8;

  // Where an arriving data message may land (the receiver's state; remote bytes are checked
  // against it by dataHeaderFits, which tests/fuzz calls too).
  struct RecvWindow {
    uint64_t ring = 0;      // ring bytes (0: not allocated)
    uint64_t consumed = 0;  // stream bytes the executor has consumed
    uint64_t received = 0;  // stream bytes received in order
    uint64_t recvSeq = 0;   // the next message expected in order
  };
  // True when the header's bytes fit: length as delivered, inside the ring without wrapping, not
  // before what was received nor over bytes not yet consumed, and within kMaxMessages of recvSeq.
  static bool dataHeaderFits(const DataHeader& h, size_t length, const RecvWindow& w);

  // watchPid: the peer's process when it runs on this host (0 otherwise), checked by checkHealth.
  UcxConnection(UcxNet& net, int rank, int peer, std::string peerName, int32_t watchPid);
  ~UcxConnection() override;
  UcxConnection(const UcxConnection&) = delete;
  UcxConnection& operator=(const UcxConnection&) = delete;

  // Allocates and registers the rings; both ends use the same sizes.
  Status allocate(uint64_t ringBytes, uint64_t messageBytes);
  // UCP_AM_SEND_FLAG_EAGER / _RNDV for data messages, or 0 to let UCX choose by size.
  void setSendFlags(uint32_t flags) { sendFlags_ = flags; }
  // The endpoint to the peer (the lower rank of a pair gets it after connect returned).
  void setEndpoint(ucp_ep_h ep) { ep_ = ep; }
  uint64_t ringBytes() const { return ring_.capacity(); }
  uint64_t messageBytes() const { return messageBytes_; }

  int peer() const override { return peer_; }
  std::span<std::byte> sendSpace() override;
  void sendCommit(size_t bytes) override { committed_ += bytes; }
  size_t sendDirect(const std::byte* src, size_t bytes, size_t granule) override;
  std::span<const std::byte> recvData() override;
  void recvConsume(size_t bytes) override { consumed_ += bytes; }
  uint64_t sentBytes() const override { return committed_; }
  uint64_t receivedBytes() const override { return consumed_; }
  Status progress(bool* progressed) override;
  Status checkHealth() override;
  bool sendsFlushed() const override { return sendFreed_ >= committed_; }
  uint64_t flushedBytes() const override { return sendFreed_; }
  bool postRecv(PostedRecv* post) override {
    post_ = post;
    return true;
  }
  // Received bytes applied straight from UCX's buffers to a posted receive (not via the ring).
  uint64_t appliedInPlaceBytes() const { return appliedInPlace_; }
  // Sent bytes UCX took straight from the caller's memory (sendDirect, not via the ring).
  uint64_t sentDirectBytes() const { return sentDirect_; }

  // Message handlers (called from inside ucp_worker_progress).
  void onData(const DataHeader& h, void* data, size_t length, const ucp_am_recv_param_t* param);
  void onCredit(const CreditHeader& h);
  void onEndpointError(ucs_status_t status);

 private:
  struct SendSlot {
    UcxConnection* conn = nullptr;  // null once the connection is gone (late callbacks)
    DataHeader header{};
    uint64_t end = 0;
    bool done = true;
  };
  struct RecvSlot {
    UcxConnection* conn = nullptr;
    uint64_t seq = 0;
    uint64_t pos = 0;
    uint64_t end = 0;
    int state = 0;  // 0 free, 1 arriving (rendezvous), 2 arrived
  };
  struct CreditSlot {
    UcxConnection* conn = nullptr;
    CreditHeader header{};
    bool busy = false;
  };
  // Everything a UCX callback may touch, apart from the connection: when teardown cannot wait
  // for every request (a stuck peer), this and the rings are left allocated rather than freed
  // under a request UCX still holds.
  struct Slots {
    SendSlot sends[kMaxSends];
    RecvSlot recvs[kMaxMessages];
    CreditSlot credits[kCreditSlots];
  };
  static void sendDone(void* request, ucs_status_t status, void* user);
  static void recvDone(void* request, ucs_status_t status, size_t length, void* user);
  static void creditDone(void* request, ucs_status_t status, void* user);
  void fail(Status status);
  // The longest message that may start at posted_ now: the message and send windows, the
  // receiver's credit, its ring's end, COLL_UCX_MESSAGE_BYTES (0: none may).
  uint64_t messageRoom() const;
  // The next message's slot (header for `len` bytes at posted_, done until a request holds it)
  // and the send flags in `p`; messagePosted moves the stream on once UCX has it.
  SendSlot& startMessage(uint64_t len, ucp_request_param_t* p);
  void messagePosted(uint64_t len);
  void postSends();
  void maybeReturnCredit();
  void advanceReceived();
  // Applies the whole units of an eager message that the posted receive takes (see postRecv);
  // returns the bytes applied.
  uint64_t applyPosted(const DataHeader& h, const std::byte* data);
  void advanceSends();
  void closeEndpoint();

  UcxNet& net_;
  int rank_;
  int peer_;
  std::string peerName_;
  int32_t watchPid_ = 0;
  bool protocolError_ = false;  // the peer broke the protocol: progress() fails too
  ucp_ep_h ep_ = nullptr;
  StreamRing ring_;  // both the send and the receive ring
  uint64_t messageBytes_ = 0;
  uint32_t sendFlags_ = 0;
  // sendDirect: off for good once UCX has refused kDirectTrials offers in a row without ever
  // taking one (its transports have no eager short protocol for messages this size, e.g. rc).
  static constexpr int kDirectTrials = 64;
  bool directSends_ = true;
  bool directOffered_ = false;  // the caller sends direct (then sendSpace keeps to the window)
  bool directEverTaken_ = false;
  int directRefusals_ = 0;  // in a row (UCS_ERR_NO_RESOURCE)
  uint64_t sentDirect_ = 0;
  std::byte* sendRing_ = nullptr;
  std::byte* recvRing_ = nullptr;
  ucp_mem_h sendMemh_ = nullptr;
  ucp_mem_h recvMemh_ = nullptr;
  Status error_;         // the endpoint failed or the peer broke the protocol; checkHealth reports it
  uint64_t events_ = 0;  // bumped by every handler: progress() reports whether anything happened
  uint64_t seenEvents_ = 0;
  uint64_t seenRound_ = 0;
  uint64_t outstanding_ = 0;  // UCX requests whose callbacks still reference this connection

  // Send side: committed_ >= posted_ >= sendFreed_ (stream positions).
  uint64_t committed_ = 0;
  uint64_t posted_ = 0;
  uint64_t sendFreed_ = 0;
  uint64_t sendSeq_ = 0;       // next message sequence number
  uint64_t sendDoneSeq_ = 0;   // every message before this has completed locally
  uint64_t peerConsumed_ = 0;  // credit: the receiver consumed every byte before this
  uint64_t peerMessages_ = 0;  // credit: the receiver completed every message before this

  // Receive side.
  uint64_t consumed_ = 0;
  uint64_t received_ = 0;        // every byte before this has arrived
  uint64_t recvSeq_ = 0;         // every message before this has arrived
  uint64_t creditConsumed_ = 0;  // last values returned to the sender
  uint64_t creditMessages_ = 0;
  PostedRecv* post_ = nullptr;
  uint64_t appliedInPlace_ = 0;
  Slots* slots_ = nullptr;
};

}  // namespace coll
