// ib connection data path: RDMA writes with immediate from the send staging ring into the peer's
// receive ring, striped over the QPs by chunk, credits written back by the receiver, selective
// signaling, completion errors turned into actionable statuses.
#include <arpa/inet.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>

#include "src/base/log.h"
#include "transports/ib/ib_transport.h"

namespace coll {

namespace {

// wr_id: bits 0-4 QP index, bit 6 credit write, bit 7 receive, bits 8+ the QP's WR sequence.
constexpr uint64_t kRecvBit = uint64_t{1} << 7;
constexpr uint64_t kCreditBit = uint64_t{1} << 6;
constexpr uint64_t kQpMask = 0x1f;
constexpr int kPollBatch = 32;
// The immediate of a repair write (a lost rail's bytes written again): its length | kRepairImm.
constexpr uint32_t kRepairImm = 1u << 31;
// How long an end waits for the peer's notice about a lost rail (the peer notices at its next
// progress or health check, or when its own writes on the rail fail).
constexpr int64_t kRailNoticeWaitMs = 30000;
constexpr uint32_t kRailNoticeMagic = 0x4c494152u;  // "RAIL"

// Over the bootstrap, when a rail is lost: the sender's switch position and, per lane of the
// rail, how far this end received (native byte order, as every bootstrap message).
struct RailNotice {
  uint32_t magic;
  uint32_t rail;
  uint64_t switchPos;
  uint64_t recvPos[kIbMaxQps];
};

const char* wcStatusName(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_SUCCESS: return "success";
    case IBV_WC_LOC_LEN_ERR: return "local length error";
    case IBV_WC_LOC_QP_OP_ERR: return "local QP operation error";
    case IBV_WC_LOC_PROT_ERR: return "local protection error";
    case IBV_WC_WR_FLUSH_ERR: return "work request flushed";
    case IBV_WC_REM_INV_REQ_ERR: return "remote invalid request";
    case IBV_WC_REM_ACCESS_ERR: return "remote access error";
    case IBV_WC_REM_OP_ERR: return "remote operation error";
    case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded";
    case IBV_WC_RNR_RETRY_EXC_ERR: return "receiver-not-ready retry counter exceeded";
    case IBV_WC_FATAL_ERR: return "fatal error";
    case IBV_WC_GENERAL_ERR: return "general error";
    default: return "error";
  }
}

}  // namespace

Status checkIbRailNotice(const uint8_t* bytes, size_t size, int rails, uint32_t* rail) {
  RailNotice notice{};
  if (size != sizeof(notice)) {
    return makeError(collRemoteError,
                     "a rail notice of %zu bytes instead of %zu; are both ranks running the same "
                     "library version?",
                     size, sizeof(notice));
  }
  memcpy(&notice, bytes, sizeof(notice));
  if (notice.magic != kRailNoticeMagic || notice.rail >= static_cast<uint32_t>(rails)) {
    return makeError(collRemoteError, "a malformed rail notice (magic %08x, rail %u of %d)", notice.magic, notice.rail,
                     rails);
  }
  *rail = notice.rail;
  return okStatus();
}

IbConnection::~IbConnection() {
  for (Rail& R : rails_) R.device->removeConnection(this);
  for (Qp& q : qps_) {
    if (q.qp) api_->destroyQp(q.qp);
  }
  for (ibv_qp* qp : unusedQps_) api_->destroyQp(qp);
  for (Rail& R : rails_) {
    if (R.cq) api_->destroyCq(R.cq);
  }
  release(sendRing_, ringAlloc_);
  release(recvRing_, ringAlloc_);
  release(const_cast<uint64_t*>(credit_), 4096);
  release(creditSrc_, creditSrcBytes_);
}

void IbConnection::release(void* p, size_t bytes) {
  if (p == nullptr) return;
  for (Rail& R : rails_) R.device->mrCache().evict(p, bytes);
  free(p);
}

std::string IbConnection::where() const {
  std::string s;
  const int n = usedRails_ > 0 ? usedRails_ : static_cast<int>(rails_.size());
  for (int r = 0; r < n; ++r) s += (r ? "+" : "") + rails_[r].device->name();
  return s + " to rank " + std::to_string(peer_);
}

std::string IbConnection::railWhere(int rail) const {
  return rails_[static_cast<size_t>(rail)].device->name() + " to rank " + std::to_string(peer_);
}

bool IbConnection::ownsCq(const ibv_cq* cq) const {
  for (const Rail& R : rails_)
    if (R.cq == cq) return true;
  return false;
}

void IbConnection::onCqEvent(const ibv_cq* cq) {
  for (Rail& R : rails_)
    if (R.cq == cq) R.armed = false;
}

bool IbConnection::ownsQp(const ibv_qp* qp) const {
  for (const Qp& q : qps_)
    if (q.qp == qp) return true;
  for (const ibv_qp* u : unusedQps_)
    if (u == qp) return true;
  return false;
}

std::span<std::byte> IbConnection::sendSpace() {
  return {sendRing_ + ring_.offset(committed_), ring_.writable(committed_, sendDone_)};
}

std::span<const std::byte> IbConnection::recvData() {
  return {recvRing_ + ring_.offset(consumed_), ring_.readable(consumed_, received_)};
}

void IbConnection::setError(const Status& status) {
  if (error_.ok() && !status.ok()) error_ = status;
}

void IbConnection::fail(const Status& status) { setError(status); }

void IbConnection::railFailed(const IbDevice* device, const Status& status) {
  for (int r = 0; r < usedRails_; ++r) {
    if (rails_[r].device.get() == device) setError(railLost(r, status));
  }
}

void IbConnection::notifyPeerOnce() {
  if (peerNotified_ || error_.ok()) return;
  peerNotified_ = true;
  // Best effort: a peer blocked on our data learns of the failure now instead of at its timeout.
  std::string text = error_.message().substr(0, 480);
  (void)bootstrap_->send(peer_, kIbTagFailure, text.data(), text.size(), Deadline::afterMs(1000));
}

Status IbConnection::protocolError(const char* what, unsigned long long a, unsigned long long b) {
  return makeError(collRemoteError,
                   "%s: rank %d broke the ib protocol (%s: %llu, %llu); are both ranks running "
                   "the same library version?",
                   where().c_str(), peer_, what, a, b);
}

Status IbConnection::completionError(const ibv_wc& wc) {
  // A port that went down flushes everything: report the cause, not the flush.
  IbDevice* device = rails_[static_cast<size_t>(qps_[wc.wr_id & kQpMask].rail)].device.get();
  device->pollAsyncEvents();
  if (device->failed()) return device->failure();
  const bool recv = (wc.wr_id & kRecvBit) != 0;
  const char* op = recv ? "receiving an RDMA write from" : "an RDMA write to";
  const unsigned vendor = wc.vendor_err;
  switch (wc.status) {
    case IBV_WC_RETRY_EXC_ERR:
      return makeError(collRemoteError,
                       "%s: %s rank %d failed: %s (vendor error 0x%x): the peer stopped "
                       "acknowledging (it exited, or the fabric drops packets); check that rank's log and the link. "
                       "COLL_IB_TIMEOUT=%d and COLL_IB_RETRY_CNT=%d set how long the HCA retries",
                       device->name().c_str(), op, peer_, wcStatusName(wc.status), vendor, options_.timeout,
                       options_.retryCount);
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return makeError(collRemoteError,
                       "%s: %s rank %d failed: %s: the peer had no receive posted (is it still "
                       "running?); check that rank's log",
                       device->name().c_str(), op, peer_, wcStatusName(wc.status));
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_REM_OP_ERR:
      return makeError(collRemoteError,
                       "%s: %s rank %d failed: %s (vendor error 0x%x): the peer refused the "
                       "write (its ring was deregistered: it exited or aborted?); check that rank's log",
                       device->name().c_str(), op, peer_, wcStatusName(wc.status), vendor);
    case IBV_WC_WR_FLUSH_ERR:
      return makeError(collRemoteError,
                       "%s: %s rank %d was flushed: the queue pair went into the error state "
                       "(the peer failed or the link broke); check that rank's log, the link (`ibv_devinfo`) and "
                       "COLL_IB_HCA",
                       device->name().c_str(), op, peer_);
    default:
      return makeError(collSystemError,
                       "%s: %s rank %d failed: %s (status %d, vendor error 0x%x); check the "
                       "device with `ibv_devinfo` and COLL_IB_HCA",
                       device->name().c_str(), op, peer_, wcStatusName(wc.status), static_cast<int>(wc.status), vendor);
  }
}

Status IbConnection::handleCompletion(const ibv_wc& wc, int* reposts) {
  const int q = static_cast<int>(wc.wr_id & kQpMask);
  if (q >= nqps_) return makeError(collInternalError, "%s: completion for unknown QP %d", where().c_str(), q);
  Qp& Q = qps_[q];
  // A lost rail's completions count only while its CQ is drained (freezeRail: what it delivered
  // before its QPs went to the error state); its failures and anything later change nothing.
  if (rails_[static_cast<size_t>(Q.rail)].dead && (wc.status != IBV_WC_SUCCESS || Q.rail != failing_ || frozen_)) {
    return okStatus();
  }
  if (wc.status != IBV_WC_SUCCESS) {
    const bool recv = (wc.wr_id & kRecvBit) != 0;
    const bool credit = !recv && (wc.wr_id & kCreditBit) != 0;
    // A peer that finished and tore its end down refuses our last credit writes; like a socket's
    // orderly close that is no error by itself (the bytes it sent are all here). checkHealth()
    // reports it if this rank still waits for the peer; a data write that fails is an error.
    if (credit && wc.status != IBV_WC_WR_FLUSH_ERR && closedReason_.ok()) {
      IbDevice& device = *rails_[static_cast<size_t>(Q.rail)].device;
      device.pollAsyncEvents();
      if (device.failed()) return device.failure();
      closedReason_ =
          makeError(collRemoteError,
                    "%s: rank %d closed its end of the connection or died (a credit "
                    "write failed: %s); check that rank's log and the link (COLL_IB_TIMEOUT=%d and "
                    "COLL_IB_RETRY_CNT=%d set how soon a dead peer is noticed)",
                    railWhere(Q.rail).c_str(), peer_, wcStatusName(wc.status), options_.timeout, options_.retryCount);
    }
    if (!closedReason_.ok() && (recv || credit)) {
      if (!recv) reap(Q, wc.wr_id >> 8);
      return okStatus();
    }
    return railLost(Q.rail, completionError(wc));
  }
  if (wc.wr_id & kRecvBit) {
    if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc.wc_flags & IBV_WC_WITH_IMM)) {
      return protocolError("receive completion without immediate (opcode, flags)", wc.opcode, wc.wc_flags);
    }
    const uint32_t imm = ntohl(wc.imm_data);
    if (imm & kRepairImm) {
      // Remote input: a repair write must be the next bytes of the agreed repair ranges.
      const uint64_t len = imm & ~kRepairImm;
      const uint64_t pos = recvRepair_.pos;
      if (pos == UINT64_MAX || len == 0 || pos + len > recvRepair_.ranges[recvRepair_.index].second ||
          pos + len > ring_.limit(consumed_)) {
        return protocolError("repair write outside the lost rail's ranges (length, stream position)", len, pos);
      }
      recvRepair_.advance(len);
      ++Q.recvsDone;
      ++recvsDoneTotal_;
      ++reposts[q];
      recvSeen_ = true;
      return okStatus();
    }
    // Remote input: the length must stay in the QP's current chunk and inside the credit given.
    const uint64_t len = imm;
    const uint64_t pos = Q.recvPos;
    const uint64_t chunkEnd = (pos | (chunk_ - 1)) + 1;
    if (len == 0 || pos + len > chunkEnd || pos + len > ring_.limit(consumed_)) {
      return protocolError("write length beyond its chunk or credit (length, stream position)", len, pos);
    }
    if (pos + len == chunkEnd) {
      const uint64_t next = recvMap_.nextOnLane(pos / chunk_);
      Q.recvPos = next == StripeSchedule::kNone ? UINT64_MAX : next * chunk_;
    } else {
      Q.recvPos = pos + len;
    }
    ++Q.recvsDone;
    ++recvsDoneTotal_;
    ++reposts[q];
    recvSeen_ = true;
    return okStatus();
  }
  const uint64_t seq = wc.wr_id >> 8;
  if (seq < Q.reapedWrs || seq >= Q.postedWrs) {
    return makeError(collInternalError, "%s: completion for work request %llu outside [%llu, %llu)", where().c_str(),
                     static_cast<unsigned long long>(seq), static_cast<unsigned long long>(Q.reapedWrs),
                     static_cast<unsigned long long>(Q.postedWrs));
  }
  reap(Q, seq);
  return okStatus();
}

void IbConnection::reap(Qp& Q, uint64_t seq) {
  // Completions of a QP come in order: this one also completes the unsignaled ones before it.
  Q.reapedWrs = std::max(Q.reapedWrs, seq + 1);
  while (Q.inflightCount > 0 && Q.inflight[Q.inflightHead].first <= seq) {
    Q.inflightHead = (Q.inflightHead + 1) % Q.inflight.size();
    --Q.inflightCount;
  }
  if (!repairInflight_.empty() && &Q == &qps_[static_cast<size_t>(creditLane_)]) {
    size_t done = 0;
    while (done < repairInflight_.size() && repairInflight_[done].first <= seq)
      repairAcked_ = repairInflight_[done++].second;
    repairInflight_.erase(repairInflight_.begin(), repairInflight_.begin() + static_cast<ptrdiff_t>(done));
  }
}

bool IbConnection::signaledPending(int rail) const {
  for (int k = 0; k < perRail_; ++k) {
    const Qp& Q = qps_[static_cast<size_t>(rail * perRail_ + k)];
    if (Q.signaledUpTo > Q.reapedWrs) return true;
  }
  return false;
}

Status IbConnection::pollCompletions(bool* progressed, uint32_t force) {
  int reposts[kIbMaxQps] = {};
  ibv_wc wc[kPollBatch];
  // Polling an empty CQ costs a small message as much as the rest of its path, so with several
  // rails each pass polls only where a completion is owed: the rail carrying the next stream byte
  // this end waits for, and rails with a signaled write not yet reaped. The others (receives of
  // later chunks, which the stream reaches in order anyway, and errors of unsignaled writes) wait
  // for every 64th pass, or for the rail to carry the next byte.
  uint32_t due = liveRails_;
  if (usedRails_ > 1 && (++pollPass_ & 63) != 0 && recvRepair_.pos == UINT64_MAX) {
    due &= force | signaledRails_ | 1u << hotRail_;
  }
  while (due != 0) {
    const int r = std::countr_zero(due);
    due &= due - 1;
    for (;;) {
      const int n = api_->pollCq(rails_[r].cq, kPollBatch, wc);
      if (n < 0) return makeError(collSystemError, "%s: polling the completion queue failed", railWhere(r).c_str());
      for (int i = 0; i < n; ++i) COLL_TRY(handleCompletion(wc[i], reposts));
      if (n > 0) *progressed = true;
      if (n < kPollBatch) break;
    }
    if ((signaledRails_ >> r & 1) && !signaledPending(r)) signaledRails_ &= ~(1u << r);
  }
  if (recvSeen_) {  // positions move only with receive completions (or a rail switch)
    recvSeen_ = false;
    uint64_t minRecv = UINT64_MAX;
    for (int q = 0; q < nqps_; ++q) {
      if (reposts[q] > 0 && !rails_[static_cast<size_t>(qps_[q].rail)].dead) COLL_TRY(postRecvs(q, reposts[q]));
      minRecv = std::min(minRecv, qps_[q].recvPos);
    }
    // A byte before every QP's next position has arrived: each QP moves only through its own
    // chunks (a lost rail's lanes stop at UINT64_MAX once their bytes are in the repair ranges).
    received_ = std::min(minRecv, recvRepair_.pos);
    if (usedRails_ > 1) hotRail_ = qps_[recvMap_.laneOf(received_ / chunk_)].rail;
  }
  // The credit block is written by the peer's HCA at any time; each word only grows.
  const uint64_t consumed = credit_[0];
  if (consumed != peerConsumed_) {
    if (consumed < peerConsumed_ || consumed > posted_) {
      return protocolError("consumed position out of range (reported, posted)", consumed, posted_);
    }
    peerConsumed_ = consumed;
  }

  std::atomic_thread_fence(std::memory_order_acquire);
  return okStatus();
}

Status IbConnection::peerRecvsFree(int q, bool* free) {
  Qp& Q = qps_[static_cast<size_t>(q)];
  const uint64_t depth = static_cast<uint64_t>(peerRecvDepth_);
  // The peer's count is read only when the last one read leaves no room: one load per lane that
  // runs short instead of one per lane and pass.
  if (Q.immWrites - Q.peerRecvsDone >= depth) {
    const uint64_t done = credit_[1 + q];
    std::atomic_thread_fence(std::memory_order_acquire);
    if (done != Q.peerRecvsDone) {
      if (done < Q.peerRecvsDone || done > Q.immWrites) {
        return protocolError("receives done out of range (reported, written)", done, Q.immWrites);
      }
      Q.peerRecvsDone = done;
    }
  }
  *free = Q.immWrites - Q.peerRecvsDone < depth;
  return okStatus();
}

Status IbConnection::postRecvs(int q, int count) {
  ibv_recv_wr wrs[kPollBatch];
  while (count > 0) {
    const int n = std::min(count, kPollBatch);
    for (int i = 0; i < n; ++i) {
      // Writes with immediate place their data themselves: the receive needs no buffer.
      wrs[i] = ibv_recv_wr{};
      wrs[i].wr_id = kRecvBit | static_cast<uint64_t>(q);
      wrs[i].next = i + 1 < n ? &wrs[i + 1] : nullptr;
    }
    ibv_recv_wr* bad = nullptr;
    const int rc = api_->postRecv(qps_[q].qp, wrs, &bad);
    if (rc != 0) {
      return makeError(collSystemError, "%s: posting receives failed: %s", where().c_str(), errnoText(rc).c_str());
    }
    count -= n;
  }
  return okStatus();
}

Status IbConnection::postWrite(int q, uint64_t localAddr, uint32_t lkey, uint32_t length, uint64_t remoteAddr,
                               uint32_t rkey, bool withImm, uint64_t streamStart, bool forceSignal, bool repair) {
  Qp& Q = qps_[q];
  ++Q.unsignaledRun;
  Q.unsignaledBytes += length;
  // Selective signaling: a completion every signalEvery_ requests or per quarter ring of bytes,
  // so the send queue and the staging ring are always freed by a later completion, and on the
  // write that drains the committed bytes, so sendsFlushed() comes true.
  const bool signaled =
      forceSignal || Q.unsignaledRun >= signalEvery_ || Q.unsignaledBytes >= ring_.capacity() / (4 * nqps_);
  ibv_sge sge{localAddr, length, lkey};
  ibv_send_wr wr{};
  wr.wr_id = (Q.postedWrs << 8) | (withImm ? 0 : kCreditBit) | static_cast<uint64_t>(q);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = withImm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  if (withImm) wr.imm_data = htonl(length | (repair ? kRepairImm : 0));
  wr.send_flags = (signaled ? IBV_SEND_SIGNALED : 0) | (length <= maxInline_ ? IBV_SEND_INLINE : 0);
  wr.wr.rdma.remote_addr = remoteAddr;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  const int rc = api_->postSend(Q.qp, &wr, &bad);
  if (rc != 0) {
    return railLost(Q.rail, makeError(collSystemError, "%s: posting an RDMA write of %u bytes failed: %s",
                                      railWhere(Q.rail).c_str(), length, errnoText(rc).c_str()));
  }
  if (signaled) {
    Q.unsignaledRun = 0, Q.unsignaledBytes = 0, Q.signaledUpTo = Q.postedWrs + 1;
    signaledRails_ |= 1u << Q.rail;
  }
  if (repair) {
    ++Q.immWrites;
  } else if (withImm) {
    Q.inflight[(Q.inflightHead + Q.inflightCount) % Q.inflight.size()] = {Q.postedWrs, streamStart};
    ++Q.inflightCount;
    ++Q.immWrites;
  }
  ++Q.postedWrs;
  return okStatus();
}

Status IbConnection::postData(bool* progressed) {
  if (!closedReason_.ok()) return posted_ < committed_ ? closedReason_ : okStatus();
  const uint64_t sendLimit = static_cast<uint64_t>(sendDepth_) - 1;  // one slot kept for credits
  if (sendRepair_.pos != UINT64_MAX) COLL_TRY(postRepairs(progressed));
  while (posted_ < committed_) {
    const uint64_t chunkIndex = posted_ / chunk_;
    const int q = static_cast<int>(sendMap_.laneOf(chunkIndex));
    Qp& Q = qps_[q];
    Rail& R = rails_[static_cast<size_t>(Q.rail)];
    if (R.dead) {
      // Before the switch both ends agreed on, a lost rail's chunk: its bytes go as repair writes.
      if (failing_ >= 0) break;
      posted_ = std::min(committed_, (chunkIndex + 1) * chunk_);
      *progressed = true;
      continue;
    }
    const uint64_t end = std::min({committed_, (chunkIndex + 1) * chunk_, ring_.limit(peerConsumed_)});
    if (end <= posted_) break;  // the peer's ring is full
    if (Q.postedWrs - Q.reapedWrs >= sendLimit) break;
    bool free = false;
    COLL_TRY(peerRecvsFree(q, &free));
    if (!free) break;
    const uint64_t offset = ring_.offset(posted_);
    // The last write a QP gets from the committed bytes is signaled: each QP's completions free
    // only its own writes, and sendsFlushed() needs them all.
    const uint64_t nextChunk = sendMap_.nextOnLane(chunkIndex);
    const uint64_t nextOnQp = (end & (chunk_ - 1)) != 0            ? end
                              : nextChunk == StripeSchedule::kNone ? UINT64_MAX
                                                                   : nextChunk * chunk_;
    COLL_TRY(postWrite(q, reinterpret_cast<uint64_t>(sendRing_ + offset), R.sendMr->lkey,
                       static_cast<uint32_t>(end - posted_), peerRingAddr_ + offset, R.peerRingRkey, true, posted_,
                       nextOnQp >= committed_));
    if (R.dead) break;  // the post failed and lost the rail: these bytes wait for the switch
    R.bytesSent += end - posted_;
    posted_ = end;
    *progressed = true;
  }
  return okStatus();
}

Status IbConnection::postCreditBlock(uint64_t consumed, bool useRecvsDone, bool forceSignal) {
  Qp& Q0 = qps_[static_cast<size_t>(creditLane_)];
  const Rail& R = rails_[static_cast<size_t>(Q0.rail)];
  uint64_t inlineBlock[1 + kIbMaxQps];
  const bool inl = creditBlockBytes_ <= maxInline_;
  // Not inline: one source block per send-queue slot, so a block is not rewritten while queued.
  uint64_t* block =
      inl ? inlineBlock : creditSrc_ + (Q0.postedWrs % static_cast<uint64_t>(sendDepth_)) * (1 + kIbMaxQps);
  block[0] = consumed;
  for (int q = 0; q < nqps_; ++q) block[1 + q] = useRecvsDone ? qps_[q].recvsDone : qps_[q].recvsPublished;
  return postWrite(creditLane_, reinterpret_cast<uint64_t>(block), inl ? 0 : R.creditSrcMr->lkey,
                   static_cast<uint32_t>(creditBlockBytes_), peerCreditAddr_, R.peerCreditRkey, false, 0, forceSignal);
}

Status IbConnection::publishCredits() {
  // Batched: a quarter ring consumed, or half the receives posted here used up. Either way a
  // sender blocked on credit always gets them (it is blocked only once one threshold is crossed).
  bool due = creditsDirty_ || consumed_ - consumedPublished_ >= ring_.capacity() / 4;
  const uint64_t recvThreshold = static_cast<uint64_t>(std::max(1, recvDepth_ / 2));
  // No lane can be past the threshold while all of them together are not.
  if (!due && recvsDoneTotal_ - recvsPublishedTotal_ >= recvThreshold) {
    for (int q = 0; q < nqps_ && !due; ++q) due = qps_[q].recvsDone - qps_[q].recvsPublished >= recvThreshold;
  }
  if (!due || !closedReason_.ok() || failing_ >= 0) return okStatus();
  Qp& Q0 = qps_[static_cast<size_t>(creditLane_)];
  if (Q0.postedWrs - Q0.reapedWrs >= static_cast<uint64_t>(sendDepth_)) return okStatus();  // next time
  COLL_TRY(postCreditBlock(consumed_, true, false));
  if (rails_[static_cast<size_t>(Q0.rail)].dead) return okStatus();  // lost with the rail: again later
  creditsDirty_ = false;
  consumedPublished_ = consumed_;
  for (int q = 0; q < nqps_; ++q) qps_[q].recvsPublished = qps_[q].recvsDone;
  recvsPublishedTotal_ = recvsDoneTotal_;
  ++creditWrites_;
  return okStatus();
}

Status IbConnection::probePeer() {
  // A rank that only waits for data would never notice a dead peer (it posts nothing that could
  // fail): while idle, keep one signaled credit write in flight. It repeats values the peer
  // already has, so a live peer ignores it; a dead one fails it after the HCA's retries.
  Qp& Q0 = qps_[static_cast<size_t>(creditLane_)];
  if (!closedReason_.ok() || failing_ >= 0 || Q0.signaledUpTo > Q0.reapedWrs) return okStatus();
  if (Q0.postedWrs - Q0.reapedWrs >= static_cast<uint64_t>(sendDepth_)) return okStatus();
  return postCreditBlock(consumedPublished_, false, true);
}

void IbConnection::updateSendDone() {
  // Bytes of a lost rail stay in the ring until their repair writes are acknowledged.
  uint64_t done = std::min(posted_, repairAcked_);
  for (int q = 0; q < nqps_; ++q) {
    const Qp& Q = qps_[q];
    if (Q.inflightCount > 0) done = std::min(done, Q.inflight[Q.inflightHead].second);
  }
  sendDone_ = done;
}

Status IbConnection::railLost(int rail, const Status& why) {
  Rail& R = rails_[static_cast<size_t>(rail)];
  if (usedRails_ <= 1) return why;  // nowhere to move it: the error, as on a single port
  if (R.dead) return okStatus();
  R.dead = true;
  R.why = why;
  liveRails_ &= ~(1u << rail);
  int live = 0;
  for (int r = 0; r < usedRails_; ++r) live += rails_[r].dead ? 0 : 1;
  if (live == 0) {
    std::string all;
    for (int r = 0; r < usedRails_; ++r) all += (r ? "; " : "") + rails_[r].why.message();
    return makeError(why.code(), "ib connection to rank %d lost every rail (%s): %s", peer_, where().c_str(),
                     all.c_str());
  }
  // One move at a time: a second rail lost while the first one's bytes are still being moved or
  // repaired fails the connection (rare enough to keep the protocol small).
  if (failing_ >= 0 || sendRepair_.pos != UINT64_MAX || recvRepair_.pos != UINT64_MAX) {
    return makeError(why.code(), "%s: lost rail %s while moving another rail's traffic: %s", where().c_str(),
                     R.device->name().c_str(), why.message().c_str());
  }
  failing_ = rail;
  frozen_ = false;
  failoverDeadline_ = Deadline::afterMs(kRailNoticeWaitMs);
  COLL_WARN(bootstrap_->rank(), "%s: lost rail %s, moving its traffic to the other %d rail(s): %s", where().c_str(),
            R.device->name().c_str(), live, why.message().c_str());
  return okStatus();
}

Status IbConnection::freezeRail() {
  if (frozen_) return okStatus();
  Rail& R = rails_[static_cast<size_t>(failing_)];
  // Its QPs to the error state: nothing more lands through them, so the completions in its CQ
  // now are all the rail delivered here, and its lanes' positions are final.
  for (int k = 0; k < perRail_; ++k) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    (void)api_->modifyQp(qps_[static_cast<size_t>(failing_ * perRail_ + k)].qp, &a, IBV_QP_STATE);
  }
  int reposts[kIbMaxQps] = {};
  ibv_wc wc[kPollBatch];
  for (;;) {
    const int n = api_->pollCq(R.cq, kPollBatch, wc);
    for (int i = 0; i < n; ++i) COLL_TRY(handleCompletion(wc[i], reposts));
    if (n < kPollBatch) break;
  }
  frozen_ = true;
  sendSwitch_ = (posted_ + chunk_ - 1) / chunk_ * chunk_;
  RailNotice notice{};
  notice.magic = kRailNoticeMagic;
  notice.rail = static_cast<uint32_t>(failing_);
  notice.switchPos = sendSwitch_;
  for (int k = 0; k < perRail_; ++k) notice.recvPos[k] = qps_[static_cast<size_t>(failing_ * perRail_ + k)].recvPos;
  COLL_TRY(bootstrap_->send(peer_, kIbTagRailLost, &notice, sizeof(notice), Deadline::afterMs(1000))
               .withContext(where() + ": telling rank " + std::to_string(peer_) + " that rail " + R.device->name() +
                            " was lost"));
  if (!peerNotice_.empty()) return installFailover(peerNotice_);
  return okStatus();
}

Status IbConnection::checkRailNotice() {
  std::vector<uint8_t> msg;
  Status st = bootstrap_->recv(peer_, kIbTagRailLost, &msg, sizeof(RailNotice), Deadline::afterMs(0));
  if (!st.ok()) {
    if (st.code() != collTimeout) return st;
    if (failing_ >= 0 && failoverDeadline_.expired()) {
      return makeError(collTimeout,
                       "%s: rank %d did not answer within %lld s about the lost rail %s (%s); check that rank's log",
                       where().c_str(), peer_, static_cast<long long>(kRailNoticeWaitMs / 1000),
                       rails_[static_cast<size_t>(failing_)].device->name().c_str(),
                       rails_[static_cast<size_t>(failing_)].why.message().c_str());
    }
    return okStatus();
  }
  // Remote input: size, magic and rail checked before anything is used (positions by the install).
  uint32_t rail32 = 0;
  COLL_TRY(checkIbRailNotice(msg.data(), msg.size(), usedRails_, &rail32).withContext(where()));
  const int rail = static_cast<int>(rail32);
  if (rail != failing_) {
    if (rails_[static_cast<size_t>(rail)].dead) return protocolError("a second notice for a lost rail (rail)", rail, 0);
    COLL_TRY(railLost(rail, makeError(collRemoteError, "rank %d lost rail %s of its connection to this rank", peer_,
                                      rails_[static_cast<size_t>(rail)].device->name().c_str())));
  }
  if (!frozen_) {
    peerNotice_ = std::move(msg);
    return freezeRail();
  }
  return installFailover(msg);
}

StripePattern IbConnection::livePattern(std::vector<uint32_t>* laneIds) const {
  std::vector<uint32_t> weights;
  for (int r = 0; r < usedRails_; ++r) {
    if (rails_[r].dead) continue;
    weights.push_back(rails_[r].weight);
    for (int k = 0; k < perRail_; ++k) laneIds->push_back(static_cast<uint32_t>(r * perRail_ + k));
  }
  return StripePattern(weights, static_cast<uint32_t>(perRail_));
}

Status IbConnection::orphanRanges(const StripeSchedule& map, uint32_t lane, uint64_t from, uint64_t switchPos,
                                  std::vector<std::pair<uint64_t, uint64_t>>* out) {
  uint64_t p = from;
  while (p < switchPos) {
    const uint64_t c = p / chunk_;
    if (map.laneOf(c) != lane) return protocolError("a lost lane's position off its chunks (lane, position)", lane, p);
    out->push_back({p, (c + 1) * chunk_});
    const uint64_t next = map.nextOnLane(c);
    if (next == StripeSchedule::kNone) break;
    p = next * chunk_;
  }
  return okStatus();
}

Status IbConnection::installFailover(const std::vector<uint8_t>& raw) {
  RailNotice notice{};
  memcpy(&notice, raw.data(), sizeof(notice));
  const int lost = failing_;
  std::vector<uint32_t> ids;
  const StripePattern live = livePattern(&ids);

  // What this end receives: the peer's stream switches at its position; the lost lanes' bytes
  // from where they stopped here up to it come as repair writes. Remote input: the switch is a
  // chunk boundary no earlier than what arrived here and within one ring of it.
  const uint64_t peerSwitch = notice.switchPos;
  if (peerSwitch % chunk_ != 0 || peerSwitch < received_ || peerSwitch > consumed_ + ring_.capacity() + chunk_) {
    return protocolError("rail switch position (position, received)", peerSwitch, received_);
  }
  recvMap_.switchAt(peerSwitch / chunk_, live, ids);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (int k = 0; k < perRail_; ++k) {
    Qp& Q = qps_[static_cast<size_t>(lost * perRail_ + k)];
    COLL_TRY(orphanRanges(recvMap_, static_cast<uint32_t>(lost * perRail_ + k), Q.recvPos, peerSwitch, &ranges));
    Q.recvPos = UINT64_MAX;
  }
  std::sort(ranges.begin(), ranges.end());
  recvRepair_.ranges = std::move(ranges);
  recvRepair_.index = 0;
  recvRepair_.start();
  for (int l = 0; l < nqps_; ++l) {
    Qp& Q = qps_[static_cast<size_t>(l)];
    if (rails_[static_cast<size_t>(Q.rail)].dead || Q.recvPos < peerSwitch) continue;
    // A live lane waiting at or past the switch: its next chunk is by the new pattern.
    if (Q.recvPos % chunk_ != 0)
      return protocolError("a write past the rail switch (position, switch)", Q.recvPos, peerSwitch);
    Q.recvPos = recvMap_.firstOnLaneFrom(peerSwitch / chunk_, static_cast<uint32_t>(l)) * chunk_;
  }

  // What this end sends: from sendSwitch_ on, the new pattern; the lost lanes' bytes the peer
  // lacks go again. Remote input: each position must be on that lane's chunks and still in the ring.
  sendMap_.switchAt(sendSwitch_ / chunk_, live, ids);
  ranges.clear();
  for (int k = 0; k < perRail_; ++k) {
    const uint64_t from = notice.recvPos[k];
    if (from < sendSwitch_ && from < sendDone_) {
      return protocolError("a lost lane's position already acknowledged (position, acknowledged)", from, sendDone_);
    }
    COLL_TRY(orphanRanges(sendMap_, static_cast<uint32_t>(lost * perRail_ + k), from, sendSwitch_, &ranges));
    qps_[static_cast<size_t>(lost * perRail_ + k)].inflightCount = 0;
  }
  std::sort(ranges.begin(), ranges.end());
  sendRepair_.ranges = std::move(ranges);
  sendRepair_.index = 0;
  sendRepair_.start();
  repairAcked_ = sendRepair_.pos;
  repairInflight_.clear();
  if (rails_[static_cast<size_t>(qps_[static_cast<size_t>(creditLane_)].rail)].dead) {
    for (int l = 0; l < nqps_; ++l) {
      if (!rails_[static_cast<size_t>(qps_[static_cast<size_t>(l)].rail)].dead) {
        creditLane_ = l;
        break;
      }
    }
  }
  creditsDirty_ = true;  // the last ones may have gone down with the rail
  uint64_t toSend = 0, toReceive = 0;
  for (const auto& r : sendRepair_.ranges) toSend += r.second - r.first;
  for (const auto& r : recvRepair_.ranges) toReceive += r.second - r.first;
  COLL_INFO(bootstrap_->rank(), "%s: rail %s dropped; %llu bytes go again to rank %d, %llu come again from it",
            where().c_str(), rails_[static_cast<size_t>(lost)].device->name().c_str(),
            static_cast<unsigned long long>(toSend), peer_, static_cast<unsigned long long>(toReceive));
  failing_ = -1;
  frozen_ = false;
  peerNotice_.clear();
  recvSeen_ = true;  // received_ from the new positions at the next poll
  updateSendDone();
  return okStatus();
}

Status IbConnection::postRepairs(bool* progressed) {
  Qp& Q = qps_[static_cast<size_t>(creditLane_)];
  Rail& R = rails_[static_cast<size_t>(Q.rail)];
  const uint64_t sendLimit = static_cast<uint64_t>(sendDepth_) - 1;  // one slot kept for credits
  while (sendRepair_.pos != UINT64_MAX) {
    const uint64_t pos = sendRepair_.pos;
    // Within one chunk, so within the ring without wrapping.
    const uint64_t end =
        std::min({sendRepair_.ranges[sendRepair_.index].second, committed_, ring_.limit(peerConsumed_)});
    if (end <= pos) break;
    if (Q.postedWrs - Q.reapedWrs >= sendLimit) break;
    bool free = false;
    COLL_TRY(peerRecvsFree(creditLane_, &free));
    if (!free) break;
    const uint64_t offset = ring_.offset(pos);
    const uint64_t seq = Q.postedWrs;
    COLL_TRY(postWrite(creditLane_, reinterpret_cast<uint64_t>(sendRing_ + offset), R.sendMr->lkey,
                       static_cast<uint32_t>(end - pos), peerRingAddr_ + offset, R.peerRingRkey, true, pos, true,
                       true));
    if (R.dead) break;
    R.bytesSent += end - pos;
    sendRepair_.advance(end - pos);
    repairInflight_.push_back({seq, sendRepair_.pos});  // a rare path: the allocation is fine
    *progressed = true;
  }
  return okStatus();
}

Status IbConnection::progress(bool* progressed) {
  bool any = false;
  // A device's failure reaches the connections over several rails through railFailed (its async
  // events are read on this thread); one rail checks its flag here, as it always did.
  if (usedRails_ == 1 && error_.ok() && rails_[0].device->failed()) setError(rails_[0].device->failure());
  // A peer's notice of a lost rail is looked for while a failover runs, and now and then when
  // this end is idle (a rail can die with nothing of this end's on it).
  if (error_.ok() && usedRails_ > 1 && (failing_ >= 0 || ++idlePolls_ % 256 == 0)) setError(checkRailNotice());
  if (error_.ok() && failing_ >= 0) setError(freezeRail());
  if (error_.ok() && failing_ < 0) {
    Status st = pollCompletions(&any);
    if (st.ok() && failing_ >= 0) st = freezeRail();
    if (st.ok() && failing_ < 0) st = postData(&any);
    if (st.ok() && failing_ >= 0) st = freezeRail();
    if (st.ok() && failing_ < 0) st = publishCredits();
    if (st.ok() && failing_ >= 0) st = freezeRail();
    setError(st);
    if (any) updateSendDone();  // it moves only with a completion reaped or a write posted
  }
  if (any) idlePolls_ = 0;
  if (!error_.ok()) {
    notifyPeerOnce();
    return error_;
  }
  if (progressed != nullptr) *progressed = any;
  return okStatus();
}

Status IbConnection::checkHealth() {
  for (int r = 0; r < usedRails_ && error_.ok(); ++r) {
    IbDevice& device = *rails_[r].device;
    device.pollAsyncEvents();
    if (!rails_[r].dead && device.failed()) setError(railLost(r, device.failure()));
  }
  if (error_.ok() && usedRails_ > 1) setError(checkRailNotice());
  if (error_.ok() && failing_ >= 0) setError(freezeRail());
  if (error_.ok() && failing_ < 0) {
    bool any = false;
    Status st = pollCompletions(&any, ~0u);
    if (st.ok()) st = probePeer();
    setError(st);
  }
  if (error_.ok()) {
    std::vector<uint8_t> notice;
    if (bootstrap_->recv(peer_, kIbTagFailure, &notice, 1024, Deadline::afterMs(0)).ok()) {
      std::string text(notice.begin(), notice.end());
      for (char& ch : text)
        if (ch < 0x20 || ch > 0x7e) ch = '?';
      peerNotified_ = true;  // it knows
      setError(makeError(collRemoteError, "%s: rank %d reported that its ib connection to this rank failed: %s",
                         where().c_str(), peer_, text.c_str()));
    }
  }
  if (!error_.ok()) {
    notifyPeerOnce();
    return error_;
  }
  return closedReason_;
}

bool IbConnection::creditBlocked() const {
  if (failing_ >= 0 || sendRepair_.pos != UINT64_MAX) return error_.ok();  // no completion event ends these
  if (posted_ >= committed_ || !error_.ok()) return false;
  if (ring_.freeBytes(posted_, peerConsumed_) == 0) return true;
  const uint32_t q = sendMap_.laneOf(posted_ / chunk_);
  const Qp& Q = qps_[q];
  if (rails_[static_cast<size_t>(Q.rail)].dead) return false;
  // The peer's latest count (checked when postData takes it); a stale one could sleep through it.
  const uint64_t reported = credit_[1 + q];
  const uint64_t done = std::max(Q.peerRecvsDone, reported);
  return Q.immWrites - std::min(done, Q.immWrites) >= static_cast<uint64_t>(peerRecvDepth_);
}

bool IbConnection::armAndPoll() {
  if (!error_.ok() || failing_ >= 0) return true;
  uint32_t armedNow = 0;
  for (int r = 0; r < usedRails_; ++r) {
    Rail& R = rails_[r];
    if (R.armed || R.dead) continue;
    const int rc = api_->reqNotifyCq(R.cq, 0);
    if (rc != 0) {
      setError(makeError(collSystemError, "%s: arming the completion queue failed: %s", railWhere(r).c_str(),
                         errnoText(rc).c_str()));
      return true;
    }
    R.armed = true;
    armedNow |= 1u << r;
  }
  // A completion that arrived before the arming raises no event: look once more at the CQs just
  // armed (one armed earlier raises an event for anything since) and the due ones.
  bool any = false;
  Status st = pollCompletions(&any, armedNow);
  if (!st.ok()) {
    setError(st);
    return true;
  }
  updateSendDone();
  return any;
}

}  // namespace coll
