// UCX connection: the byte stream over UCP active messages between registered rings, credits
// returned by the receiver, and teardown that never frees memory a UCX request still targets.
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "src/base/align.h"
#include "src/base/log.h"
#include "transports/ucx/ucx_transport.h"

namespace coll {

namespace {

constexpr int kTeardownMs = 2000;

}  // namespace

// Why active messages: one call carries the stream position in its header and UCX chooses eager
// (copied once into the ring) or rendezvous (zero-copy into the ring position, RDMA where the
// transport has it) by size, so large slices move without a bounce and small ones without a
// handshake. Tag matching would add a match per message; put + flag needs rkeys per peer and an
// RMA-capable transport (UCX over tcp has none in 1.13).

UcxConnection::UcxConnection(UcxNet& net, int rank, int peer, std::string peerName, int32_t watchPid)
    : net_(net), rank_(rank), peer_(peer), peerName_(std::move(peerName)), watchPid_(watchPid) {}

Status UcxConnection::allocate(uint64_t ringBytes, uint64_t messageBytes) {
  if (ringBytes == 0 || ringBytes % StreamRing::kCapacityGranule != 0 || messageBytes == 0) {
    return makeError(collInternalError, "UCX connection to rank %d: ring of %llu bytes, messages of %llu", peer_,
                     static_cast<unsigned long long>(ringBytes), static_cast<unsigned long long>(messageBytes));
  }
  ring_ = StreamRing(ringBytes);
  messageBytes_ = std::min(messageBytes, ringBytes);
  const uint64_t capacity = roundUp(ringBytes, 4096);
  slots_ = new Slots();
  for (SendSlot& s : slots_->sends) s.conn = this;
  for (RecvSlot& s : slots_->recvs) s.conn = this;
  for (CreditSlot& s : slots_->credits) s.conn = this;
  sendRing_ = static_cast<std::byte*>(aligned_alloc(4096, capacity));
  recvRing_ = static_cast<std::byte*>(aligned_alloc(4096, capacity));
  if (sendRing_ == nullptr || recvRing_ == nullptr) {
    return makeError(collSystemError,
                     "cannot allocate 2 x %llu bytes of UCX rings for rank %d; lower "
                     "COLL_UCX_RING_BYTES",
                     static_cast<unsigned long long>(capacity), peer_);
  }
  // Registered once here so neither eager copies nor rendezvous transfers register per message.
  for (int i = 0; i < 2; ++i) {
    ucp_mem_map_params_t p{};
    p.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    p.address = i == 0 ? sendRing_ : recvRing_;
    p.length = capacity;
    ucs_status_t st = ucp_mem_map(net_.context(), &p, i == 0 ? &sendMemh_ : &recvMemh_);
    if (st != UCS_OK) {
      return makeError(collSystemError,
                       "UCX cannot register the %llu-byte ring for rank %d: %s; lower "
                       "COLL_UCX_RING_BYTES or check the locked-memory limit (ulimit -l)",
                       static_cast<unsigned long long>(capacity), peer_, ucs_status_string(st));
    }
  }
  return okStatus();
}

UcxConnection::~UcxConnection() {
  COLL_INFO(rank_,
            "UCX connection to rank %d: received %llu bytes, %llu of them applied in place to posted receives; "
            "sent %llu bytes, %llu of them straight from the caller's memory",
            peer_, static_cast<unsigned long long>(consumed_), static_cast<unsigned long long>(appliedInPlace_),
            static_cast<unsigned long long>(committed_), static_cast<unsigned long long>(sentDirect_));
  net_.stopIdleProgress();  // teardown progresses the worker on this thread
  net_.forget(peer_);
  closeEndpoint();
  if (outstanding_ > 0) {
    // UCX still holds requests into our rings (a peer that neither answers nor fails): leave the
    // rings and slots allocated; the callbacks see conn == nullptr and only free the request.
    COLL_WARN(rank_,
              "UCX connection to rank %d: %llu request(s) still pending after %d ms at teardown; "
              "leaving their buffers allocated",
              peer_, static_cast<unsigned long long>(outstanding_), kTeardownMs);
    net_.noteStuckRequests();
    ucxParkForever(sendRing_);
    ucxParkForever(recvRing_);
    ucxParkForever(slots_);
    for (SendSlot& s : slots_->sends) s.conn = nullptr;
    for (RecvSlot& s : slots_->recvs) s.conn = nullptr;
    for (CreditSlot& s : slots_->credits) s.conn = nullptr;
    return;
  }
  if (sendMemh_ != nullptr) (void)ucp_mem_unmap(net_.context(), sendMemh_);
  if (recvMemh_ != nullptr) (void)ucp_mem_unmap(net_.context(), recvMemh_);
  free(sendRing_);
  free(recvRing_);
  delete slots_;
}

void UcxConnection::closeEndpoint() {
  if (ep_ == nullptr) return;
  // Requests into our rings and slots must finish before they are freed (normally none is left:
  // the executor waited for its sends; a credit may still be on its way).
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kTeardownMs);
  while (outstanding_ > 0 && error_.ok() && std::chrono::steady_clock::now() < until) {
    ucp_worker_progress(net_.worker());
  }
  if (outstanding_ == 0) {
    // The net flushes and closes every retired endpoint together when the communicator goes.
    net_.retire(ep_, error_.ok());
    ep_ = nullptr;
    return;
  }
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  ucs_status_ptr_t req = ucp_ep_close_nbx(ep_, &p);
  ep_ = nullptr;
  if (UCS_PTR_IS_PTR(req)) {
    while (ucp_request_check_status(req) == UCS_INPROGRESS && std::chrono::steady_clock::now() < until) {
      ucp_worker_progress(net_.worker());
    }
    ucp_request_free(req);
  }
  while (outstanding_ > 0 && std::chrono::steady_clock::now() < until) ucp_worker_progress(net_.worker());
}

void UcxConnection::fail(Status status) {
  if (error_.ok()) error_ = std::move(status);
  ++events_;
}

void UcxConnection::onEndpointError(ucs_status_t status) {
  fail(makeError(collRemoteError,
                 "rank %d (%s) is unreachable over UCX (%s): it exited or the network between "
                 "the hosts failed; check that rank's log (and COLL_UCX_TLS)",
                 peer_, peerName_.c_str(), ucs_status_string(status)));
}

std::span<std::byte> UcxConnection::sendSpace() {
  // Not ahead of the receiver's window while direct sends work: bytes copied into the ring now
  // could only wait there, while those the window opens for later can go straight from the
  // caller (sendDirect). A caller that never offers direct sends, or one whose offers UCX keeps
  // refusing (its messages are too large for an eager short send), may copy ahead. The ring is
  // free from whichever of the two positions is further behind.
  const bool keepToWindow = directSends_ && directOffered_ && directRefusals_ < kDirectTrials;
  const uint64_t drained = keepToWindow ? std::min(sendFreed_, peerConsumed_) : sendFreed_;
  return {sendRing_ + ring_.offset(committed_), ring_.writable(committed_, drained)};
}

std::span<const std::byte> UcxConnection::recvData() {
  return {recvRing_ + ring_.offset(consumed_), ring_.readable(consumed_, received_)};
}

void UcxConnection::sendDone(void* request, ucs_status_t status, void* user) {
  auto* slot = static_cast<SendSlot*>(user);
  ucp_request_free(request);
  UcxConnection* c = slot->conn;
  if (c == nullptr) return;
  --c->outstanding_;
  slot->done = true;
  ++c->events_;
  if (status != UCS_OK) c->onEndpointError(status);
  c->advanceSends();
}

void UcxConnection::advanceSends() {
  while (sendDoneSeq_ < sendSeq_) {
    const SendSlot& s = slots_->sends[sendDoneSeq_ % kMaxSends];
    if (!s.done) break;
    sendFreed_ = s.end;
    ++sendDoneSeq_;
  }
}

uint64_t UcxConnection::messageRoom() const {
  if (sendSeq_ - sendDoneSeq_ >= kMaxSends || sendSeq_ - peerMessages_ >= kMaxMessages) return 0;
  return std::min({ring_.toWrap(posted_), ring_.freeBytes(posted_, peerConsumed_), messageBytes_});
}

UcxConnection::SendSlot& UcxConnection::startMessage(uint64_t len, ucp_request_param_t* p) {
  SendSlot& slot = slots_->sends[sendSeq_ % kMaxSends];
  slot.header = DataHeader{kDataMagic, rank_, sendSeq_, posted_, len};
  slot.end = posted_ + len;
  slot.done = true;
  if (sendFlags_ != 0) {
    p->op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
    p->flags = sendFlags_;
  }
  return slot;
}

void UcxConnection::messagePosted(uint64_t len) {
  posted_ += len;
  ++sendSeq_;
  ++events_;
}

void UcxConnection::postSends() {
  while (posted_ < committed_ && error_.ok() && ep_ != nullptr) {
    const uint64_t len = std::min(committed_ - posted_, messageRoom());
    if (len == 0) return;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH;
    SendSlot& slot = startMessage(len, &p);
    p.cb.send = sendDone;
    p.user_data = &slot;
    p.memh = sendMemh_;
    ucs_status_ptr_t r =
        ucp_am_send_nbx(ep_, kUcxAmData, &slot.header, sizeof(slot.header), sendRing_ + ring_.offset(posted_), len, &p);
    messagePosted(len);
    if (UCS_PTR_IS_PTR(r)) {
      slot.done = false;
      ++outstanding_;
    } else if (UCS_PTR_IS_ERR(r)) {
      onEndpointError(UCS_PTR_STATUS(r));
    }
  }
}

size_t UcxConnection::sendDirect(const std::byte* src, size_t bytes, size_t granule) {
  directOffered_ = true;
  if (sendFlags_ == UCP_AM_SEND_FLAG_RNDV) directSends_ = false;  // rendezvous holds the caller's memory
  if (!directSends_ || ep_ == nullptr || !error_.ok() || granule == 0) return 0;
  // A direct message must be the stream's next: whatever the ring holds goes first.
  postSends();
  size_t took = 0;
  while (posted_ == committed_) {
    // A ring message's limits, and the send ring's view of the stream (sendSpace counts these
    // bytes as in use until they complete, which is at once).
    uint64_t len =
        std::min({static_cast<uint64_t>(bytes - took), messageRoom(), ring_.freeBytes(committed_, sendFreed_)});
    len -= len % granule;
    if (len == 0) break;
    ucp_request_param_t p{};
    // Immediate completion or nothing: UCX either sends the bytes or copies what the socket does
    // not take before returning (its eager short protocol), or refuses with UCS_ERR_NO_RESOURCE.
    // It never keeps a reference to the caller's memory, which may change once we return.
    p.op_attr_mask = UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
    SendSlot& slot = startMessage(len, &p);
    ucs_status_ptr_t r = ucp_am_send_nbx(ep_, kUcxAmData, &slot.header, sizeof(slot.header), src + took, len, &p);
    if (r != nullptr) {
      if (UCS_PTR_IS_PTR(r)) {
        // Against UCX's contract for FORCE_IMM_CMPL: the request may still read the caller's
        // memory, so it is finished here before returning (bounded; a failure fails the peer).
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kTeardownMs);
        ucs_status_t st;
        while ((st = ucp_request_check_status(r)) == UCS_INPROGRESS && std::chrono::steady_clock::now() < until) {
          ucp_worker_progress(net_.worker());
        }
        ucp_request_free(r);
        if (st != UCS_OK) {
          onEndpointError(st == UCS_INPROGRESS ? UCS_ERR_TIMED_OUT : st);
          break;
        }
      } else {
        if (UCS_PTR_STATUS(r) != UCS_ERR_NO_RESOURCE) {
          onEndpointError(UCS_PTR_STATUS(r));
        } else if (++directRefusals_ >= kDirectTrials && !directEverTaken_) {
          directSends_ = false;
          COLL_INFO(rank_,
                    "UCX connection to rank %d: UCX refused %d immediate sends in a row; sending through the "
                    "ring only",
                    peer_, kDirectTrials);
        }
        break;
      }
    }
    directEverTaken_ = true;
    directRefusals_ = 0;
    committed_ += len;
    messagePosted(len);
    sentDirect_ += len;
    took += len;
    advanceSends();
  }
  return took;
}

void UcxConnection::creditDone(void* request, ucs_status_t status, void* user) {
  auto* slot = static_cast<CreditSlot*>(user);
  ucp_request_free(request);
  UcxConnection* c = slot->conn;
  if (c == nullptr) return;
  --c->outstanding_;
  slot->busy = false;
  if (status != UCS_OK) c->onEndpointError(status);
}

void UcxConnection::maybeReturnCredit() {
  if (ep_ == nullptr || !error_.ok()) return;
  // Batched: a quarter ring or a quarter of the message window. The sender blocks only with a
  // full ring or a full message window at this end, and both thresholds fire before either.
  if (consumed_ - creditConsumed_ < ring_.capacity() / 4 && recvSeq_ - creditMessages_ < kMaxMessages / 4) return;
  CreditSlot* slot = nullptr;
  for (CreditSlot& s : slots_->credits) {
    if (!s.busy) {
      slot = &s;
      break;
    }
  }
  if (slot == nullptr) return;  // the next progress() retries
  slot->header = CreditHeader{kCreditMagic, rank_, consumed_, recvSeq_};
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  p.cb.send = creditDone;
  p.user_data = slot;
  p.flags = UCP_AM_SEND_FLAG_EAGER;
  ucs_status_ptr_t r = ucp_am_send_nbx(ep_, kUcxAmCredit, &slot->header, sizeof(slot->header), nullptr, 0, &p);
  creditConsumed_ = consumed_;
  creditMessages_ = recvSeq_;
  if (UCS_PTR_IS_ERR(r)) {
    onEndpointError(UCS_PTR_STATUS(r));
  } else if (r != nullptr) {
    slot->busy = true;
    ++outstanding_;
  }
}

void UcxConnection::onCredit(const CreditHeader& h) {
  // Untrusted: a credit may not release bytes or messages this side never sent.
  if (h.consumed > posted_ || h.messages > sendSeq_) {
    protocolError_ = true;
    fail(makeError(collRemoteError,
                   "rank %d (%s) sent a UCX credit for %llu bytes / %llu messages, but only %llu / "
                   "%llu were sent; are both ranks running the same library version?",
                   peer_, peerName_.c_str(), static_cast<unsigned long long>(h.consumed),
                   static_cast<unsigned long long>(h.messages), static_cast<unsigned long long>(posted_),
                   static_cast<unsigned long long>(sendSeq_)));
    return;
  }
  peerConsumed_ = std::max(peerConsumed_, h.consumed);
  peerMessages_ = std::max(peerMessages_, h.messages);
  ++events_;
}

void UcxConnection::recvDone(void* request, ucs_status_t status, size_t, void* user) {
  auto* slot = static_cast<RecvSlot*>(user);
  ucp_request_free(request);
  UcxConnection* c = slot->conn;
  if (c == nullptr) return;
  --c->outstanding_;
  ++c->events_;
  if (status != UCS_OK) {
    c->onEndpointError(status);
    return;
  }
  slot->state = 2;
  c->advanceReceived();
}

void UcxConnection::advanceReceived() {
  for (;;) {
    RecvSlot& s = slots_->recvs[recvSeq_ % kMaxMessages];
    if (s.state != 2 || s.seq != recvSeq_) return;
    if (s.pos != received_) {
      protocolError_ = true;
      fail(makeError(collRemoteError,
                     "rank %d (%s) sent UCX message %llu at stream position %llu, expected %llu; "
                     "are both ranks running the same library version?",
                     peer_, peerName_.c_str(), static_cast<unsigned long long>(s.seq),
                     static_cast<unsigned long long>(s.pos), static_cast<unsigned long long>(received_)));
      return;
    }
    received_ = s.end;
    s.state = 0;
    ++recvSeq_;
    ++events_;
  }
}

uint64_t UcxConnection::applyPosted(const DataHeader& h, const std::byte* data) {
  // Only the stream's next bytes, with nothing before them waiting in the ring (the ring's bytes
  // are the executor's to read first), and where the post's next unit starts.
  PostedRecv* p = post_;
  if (p == nullptr || p->unitBytes == 0 || h.seq != recvSeq_ || h.pos != received_ || consumed_ != received_ ||
      p->streamPos + p->applied * p->unitBytes != consumed_ || p->applied >= p->units) {
    return 0;
  }
  const uint64_t n = std::min<uint64_t>(h.len / p->unitBytes, p->units - p->applied);
  if (n == 0) return 0;
  p->apply(p, data, n);
  p->applied += n;
  appliedInPlace_ += n * p->unitBytes;
  return n * p->unitBytes;
}

bool UcxConnection::dataHeaderFits(const DataHeader& h, size_t length, const RecvWindow& w) {
  if (w.ring == 0) return false;
  const StreamRing ring(w.ring);
  return h.len == length && h.len > 0 && h.len <= ring.toWrap(h.pos) && h.pos >= w.received &&
         h.len <= ring.freeBytes(h.pos, w.consumed) && h.seq >= w.recvSeq && h.seq - w.recvSeq < kMaxMessages;
}

void UcxConnection::onData(const DataHeader& h, void* data, size_t length, const ucp_am_recv_param_t* param) {
  const bool rendezvous = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  // Untrusted until checked: the position and length decide where in our ring bytes land.
  RecvSlot& slot = slots_->recvs[h.seq % kMaxMessages];
  const bool valid = error_.ok() && slot.state == 0 &&
                     dataHeaderFits(h, length, RecvWindow{ring_.capacity(), consumed_, received_, recvSeq_});
  if (!valid) {
    if (rendezvous) ucp_am_data_release(net_.worker(), data);
    if (!error_.ok()) return;
    protocolError_ = true;
    fail(makeError(collRemoteError,
                   "rank %d (%s) sent a UCX message out of bounds (seq %llu, position %llu, %llu "
                   "bytes, %zu delivered; ring %llu, consumed %llu, received %llu); are both ranks running the same "
                   "library version?",
                   peer_, peerName_.c_str(), static_cast<unsigned long long>(h.seq),
                   static_cast<unsigned long long>(h.pos), static_cast<unsigned long long>(h.len), length,
                   static_cast<unsigned long long>(ring_.capacity()), static_cast<unsigned long long>(consumed_),
                   static_cast<unsigned long long>(received_)));
    return;
  }
  std::byte* dst = recvRing_ + ring_.offset(h.pos);
  slot.seq = h.seq;
  slot.pos = h.pos;
  slot.end = h.pos + h.len;
  ++events_;
  if (!rendezvous) {
    const uint64_t direct = applyPosted(h, static_cast<const std::byte*>(data));
    if (direct < h.len) memcpy(dst + direct, static_cast<const std::byte*>(data) + direct, h.len - direct);
    slot.state = 2;
    advanceReceived();
    consumed_ += direct;
    return;
  }
  slot.state = 1;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH;
  p.cb.recv_am = recvDone;
  p.user_data = &slot;
  p.memh = recvMemh_;
  ucs_status_ptr_t r = ucp_am_recv_data_nbx(net_.worker(), data, dst, h.len, &p);
  if (r == nullptr) {
    slot.state = 2;
    advanceReceived();
  } else if (UCS_PTR_IS_ERR(r)) {
    slot.state = 0;
    onEndpointError(UCS_PTR_STATUS(r));
  } else {
    ++outstanding_;
  }
}

Status UcxConnection::progress(bool* progressed) {
  if (ep_ == nullptr && error_.ok()) {
    bool ready = false;
    Status st = net_.pollReply(this, &ready);
    if (!st.ok()) {
      protocolError_ = true;
      fail(st);
    }
    if (ready) ++events_;
  }
  net_.progressWorker(&seenRound_);
  advanceSends();
  postSends();
  advanceSends();
  maybeReturnCredit();
  if (progressed != nullptr) *progressed = events_ != seenEvents_;
  seenEvents_ = events_;
  // A failed endpoint is reported by checkHealth (the peer may simply have finished and left); a
  // peer that breaks the protocol is an error at once.
  if (protocolError_) return error_;
  return okStatus();
}

Status UcxConnection::checkHealth() {
  if (error_.ok() && watchPid_ > 0 && kill(watchPid_, 0) != 0 && errno == ESRCH) {
    fail(makeError(collRemoteError, "rank %d (%s, pid %d on this host) exited; check that rank's log for why", peer_,
                   peerName_.c_str(), static_cast<int>(watchPid_)));
  }
  return error_;
}

}  // namespace coll
