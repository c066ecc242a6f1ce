// ib connection setup: CQ, RC queue pairs and registered rings, connection data exchanged over
// the bootstrap (validated field by field), QPs taken to RTR/RTS, then a ready handshake.
#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "src/base/align.h"
#include "src/base/log.h"
#include "transports/ib/ib_transport.h"

namespace coll {

namespace {

constexpr uint32_t kInfoMagic = 0x6f434249u;  // "IBCo"
constexpr uint32_t kInfoVersion = 2;
constexpr uint32_t kReadyMagic = 0x59444252u;  // "RBDY"
constexpr uint32_t kMinRingLog2 = 12;
constexpr uint32_t kMaxRingLog2 = 30;
constexpr uint64_t kMaxChunk = 512ull << 10;

// Sent once by each side (native byte order, as every bootstrap message): the header, then one
// IbWireRail per rail.
struct IbWireHeader {
  uint32_t magic;
  uint32_t version;
  uint32_t qps;  // per rail
  uint32_t ringLog2;
  uint32_t recvDepth;
  uint32_t rails;
  uint64_t ringAddr;
  uint64_t creditAddr;
};
struct IbWireRail {
  uint32_t mtu;       // ibv_mtu of the port
  uint32_t ethernet;  // 1: RoCE (GID), 0: InfiniBand (LID)
  uint32_t lid;
  uint32_t rateMbps;  // 0: unknown
  uint8_t gid[16];
  uint32_t ringRkey;
  uint32_t creditRkey;
  uint32_t qpn[kIbMaxQps];
  uint32_t psn[kIbMaxQps];
};
struct IbWireInfo {
  IbWireHeader h;
  IbWireRail rail[kIbMaxRails];
  static size_t bytesFor(uint32_t rails) { return sizeof(IbWireHeader) + rails * sizeof(IbWireRail); }
};

static_assert(sizeof(IbWireHeader) == 40 && offsetof(IbWireRail, qpn) == 40,
              "tests/unit/test_ib_transport.cc damages fields by offset");

uint32_t log2Ceil(uint64_t v) {
  uint32_t l = 0;
  while ((uint64_t{1} << l) < v) ++l;
  return l;
}

uint32_t randomPsn() {
  static thread_local std::mt19937 rng(std::random_device{}());
  return rng() & 0xffffff;
}

Status validate(const IbWireInfo& in, std::span<const IbPortInfo> local, int peer) {
  auto bad = [&](const char* what, unsigned long long v) {
    return makeError(collRemoteError,
                     "rank %d sent malformed ib connection data (%s: %llu); are both ranks "
                     "running the same library version?",
                     peer, what, v);
  };
  const IbWireHeader& h = in.h;
  if (h.magic != kInfoMagic) return bad("magic", h.magic);
  if (h.version != kInfoVersion) return bad("version", h.version);
  if (h.rails < 1 || h.rails > static_cast<uint32_t>(kIbMaxRails)) return bad("rails", h.rails);
  if (h.qps < 1 || h.qps * h.rails > static_cast<uint32_t>(kIbMaxQps)) return bad("queue pairs", h.qps);
  if (h.ringLog2 < kMinRingLog2 || h.ringLog2 > kMaxRingLog2) return bad("ring size log2", h.ringLog2);
  if (h.recvDepth < 2 || h.recvDepth > (1u << 16)) return bad("receive depth", h.recvDepth);
  if (h.ringAddr == 0 || h.creditAddr == 0) return bad("ring or credit address", 0);
  for (uint32_t r = 0; r < h.rails; ++r) {
    const IbWireRail& w = in.rail[r];
    if (w.mtu < IBV_MTU_256 || w.mtu > IBV_MTU_4096) return bad("MTU", w.mtu);
    if (w.ethernet > 1) return bad("link layer", w.ethernet);
    for (uint32_t q = 0; q < h.qps; ++q) {
      if (w.qpn[q] == 0 || w.qpn[q] > 0xffffff) return bad("QP number", w.qpn[q]);
      if (w.psn[q] > 0xffffff) return bad("PSN", w.psn[q]);
    }
    if (!w.ethernet && (w.lid == 0 || w.lid >= 0xc000)) return bad("LID", w.lid);
    if (r < local.size() && (w.ethernet == 1) != local[r].ethernet) {
      return makeError(collInvalidUsage,
                       "rank %d uses %s on its rail %u but this rank uses %s (%s): both ends of an ib "
                       "connection need the same link layer on each rail; set COLL_IB_HCA",
                       peer, w.ethernet ? "RoCE" : "InfiniBand", r, local[r].ethernet ? "RoCE" : "InfiniBand",
                       local[r].describe().c_str());
    }
  }
  return okStatus();
}

}  // namespace

Status checkIbConnectInfo(const uint8_t* bytes, size_t size, std::span<const IbPortInfo> local, int peer) {
  IbWireInfo in{};
  uint32_t rails = 0;
  if (size >= sizeof(IbWireHeader)) memcpy(&rails, bytes + offsetof(IbWireHeader, rails), sizeof(rails));
  if (size < sizeof(IbWireHeader) || rails > static_cast<uint32_t>(kIbMaxRails) ||
      size != IbWireInfo::bytesFor(rails)) {
    return makeError(collRemoteError,
                     "rank %d sent %zu bytes of ib connection data (expected %zu + %zu per rail, at most %d "
                     "rails); are both ranks running the same library version?",
                     peer, size, sizeof(IbWireHeader), sizeof(IbWireRail), kIbMaxRails);
  }
  memcpy(&in, bytes, size);
  return validate(in, local, peer);
}

namespace {

// Zeroed, page-aligned memory for a ring or credit block: the credit block must start at zero,
// and zeroing the rings too keeps stale heap bytes off the wire.
Status allocZeroed(size_t bytes, const char* what, void** mem) {
  const size_t rounded = (bytes + 4095) & ~size_t{4095};
  *mem = aligned_alloc(4096, rounded);
  if (*mem == nullptr) {
    return makeError(collSystemError, "cannot allocate %zu bytes for the ib %s; lower COLL_IB_STAGING_BYTES", rounded,
                     what);
  }
  memset(*mem, 0, rounded);
  return okStatus();
}

Status registerOn(IbDevice& dev, void* mem, size_t bytes, int access, const char* what, ibv_mr** mr) {
  const size_t rounded = (bytes + 4095) & ~size_t{4095};
  return dev.mrCache().registerHost(mem, rounded, access, mr).withContext(dev.name() + ": ib " + what);
}

}  // namespace

Status connectIb(Bootstrap& bootstrap, std::span<const std::shared_ptr<IbDevice>> devices, int peer,
                 const IbOptions& options, Deadline deadline, std::unique_ptr<IbConnection>* out) {
  const int me = bootstrap.rank();
  if (peer == me || peer < 0 || peer >= bootstrap.nranks()) {
    return makeError(collInternalError, "rank %d: no ib connection to rank %d", me, peer);
  }
  if (devices.empty() || devices.size() > static_cast<size_t>(kIbMaxRails)) {
    return makeError(collInternalError, "ib connection to rank %d over %zu rails (1..%d)", peer, devices.size(),
                     kIbMaxRails);
  }
  const int nrails = static_cast<int>(devices.size());
  const VerbsApi& api = devices[0]->api();
  std::unique_ptr<IbConnection> c(new IbConnection());
  c->api_ = &api;
  c->bootstrap_ = &bootstrap;
  c->peer_ = peer;
  c->options_ = options;
  c->rails_.resize(static_cast<size_t>(nrails));
  std::vector<IbPortInfo> ports;
  int maxWr = INT32_MAX;
  int maxCqe = INT32_MAX;
  for (int r = 0; r < nrails; ++r) {
    c->rails_[r].device = devices[r];
    ports.push_back(devices[r]->port());
    maxWr = std::min(maxWr, std::max(devices[r]->attr().max_qp_wr, 4));
    if (devices[r]->attr().max_cqe > 0) maxCqe = std::min(maxCqe, devices[r]->attr().max_cqe);
  }
  auto sysErr = [&](int r, const char* what) {
    const int err = errno;
    return makeError(collSystemError, "%s: %s for the connection to rank %d failed: %s", devices[r]->name().c_str(),
                     what, peer, errnoText(err).c_str());
  };

  // COLL_IB_QPS_PER_CONNECTION is per rail; all rails together stay within kIbMaxQps lanes.
  const int qps = std::clamp(options.qps, 1, kIbMaxQps / nrails);
  c->sendDepth_ = std::clamp(options.sendDepth, 4, maxWr);
  const int recvDepth = std::clamp(options.recvDepth, 2, std::min(maxWr, 1 << 16));
  c->recvDepth_ = recvDepth;
  c->signalEvery_ = static_cast<uint32_t>(std::max(1, c->sendDepth_ / 4));
  const uint32_t ringLog2 = std::clamp(log2Ceil(std::max<uint64_t>(options.ringBytes, 1)), kMinRingLog2, kMaxRingLog2);
  const uint64_t ownRing = uint64_t{1} << ringLog2;
  c->cqEntries_ = qps * (c->sendDepth_ + recvDepth) + 16;
  if (c->cqEntries_ > maxCqe) {
    return makeError(collInvalidUsage,
                     "%s: %d QPs need %d completion-queue entries but the device allows %d; lower "
                     "COLL_IB_QPS_PER_CONNECTION",
                     c->where().c_str(), qps, c->cqEntries_, maxCqe);
  }

  // QPs rail-major: index r * qps + q. From here the connection owns what it creates (the
  // destructor destroys it on any failure).
  uint32_t granted = options.maxInline;
  for (int r = 0; r < nrails; ++r) {
    IbDevice& dev = *devices[r];
    c->rails_[r].cq = api.createCq(dev.context(), c->cqEntries_, c.get(), dev.channel(), 0);
    if (c->rails_[r].cq == nullptr) return sysErr(r, "creating a completion queue");
    for (int q = 0; q < qps; ++q) {
      ibv_qp_init_attr ia{};
      ia.send_cq = c->rails_[r].cq;
      ia.recv_cq = c->rails_[r].cq;
      ia.qp_type = IBV_QPT_RC;
      ia.sq_sig_all = 0;
      ia.cap.max_send_wr = static_cast<uint32_t>(c->sendDepth_);
      ia.cap.max_recv_wr = static_cast<uint32_t>(recvDepth);
      ia.cap.max_send_sge = 1;
      ia.cap.max_recv_sge = 1;
      ia.cap.max_inline_data = granted;
      ibv_qp* qp = api.createQp(dev.pd(), &ia);
      if (qp == nullptr && granted > 0) {  // some devices have no inline data at all
        ia.cap.max_inline_data = granted = 0;
        qp = api.createQp(dev.pd(), &ia);
      }
      if (qp == nullptr) return sysErr(r, "creating a queue pair");
      granted = std::min(granted, ia.cap.max_inline_data);
      IbConnection::Qp Q;
      Q.qp = qp;
      Q.rail = r;
      c->qps_.push_back(std::move(Q));
    }
  }
  c->maxInline_ = granted;

  for (IbConnection::Qp& Q : c->qps_) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = static_cast<uint8_t>(ports[Q.rail].port);
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    if (api.modifyQp(Q.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
      return sysErr(Q.rail, "moving a queue pair to INIT");
    }
  }

  // One copy of each ring, registered with every rail: a chunk lands at the same offset whichever
  // rail carries it.
  c->ringAlloc_ = ownRing;
  c->creditSrcBytes_ = static_cast<size_t>(c->sendDepth_) * (1 + kIbMaxQps) * sizeof(uint64_t);
  void* mem = nullptr;
  COLL_TRY(allocZeroed(ownRing, "send ring", &mem));
  c->sendRing_ = static_cast<std::byte*>(mem);
  COLL_TRY(allocZeroed(ownRing, "receive ring", &mem));
  c->recvRing_ = static_cast<std::byte*>(mem);
  COLL_TRY(allocZeroed(4096, "credit block", &mem));
  c->credit_ = static_cast<volatile uint64_t*>(mem);
  COLL_TRY(allocZeroed(c->creditSrcBytes_, "credit sources", &mem));
  c->creditSrc_ = static_cast<uint64_t*>(mem);
  const int remote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  for (IbConnection::Rail& R : c->rails_) {
    IbDevice& dev = *R.device;
    COLL_TRY(registerOn(dev, c->sendRing_, ownRing, IBV_ACCESS_LOCAL_WRITE, "send ring", &R.sendMr));
    COLL_TRY(registerOn(dev, c->recvRing_, ownRing, remote, "receive ring", &R.recvMr));
    COLL_TRY(registerOn(dev, const_cast<uint64_t*>(c->credit_), 4096, remote, "credit block", &R.creditMr));
    COLL_TRY(
        registerOn(dev, c->creditSrc_, c->creditSrcBytes_, IBV_ACCESS_LOCAL_WRITE, "credit sources", &R.creditSrcMr));
  }

  // Receives first: the peer may write as soon as it has our data and has reached RTS.
  for (int q = 0; q < static_cast<int>(c->qps_.size()); ++q) COLL_TRY(c->postRecvs(q, recvDepth));

  IbWireInfo mine{};
  mine.h.magic = kInfoMagic;
  mine.h.version = kInfoVersion;
  mine.h.qps = static_cast<uint32_t>(qps);
  mine.h.ringLog2 = ringLog2;
  mine.h.recvDepth = static_cast<uint32_t>(recvDepth);
  mine.h.rails = static_cast<uint32_t>(nrails);
  mine.h.ringAddr = reinterpret_cast<uint64_t>(c->recvRing_);
  mine.h.creditAddr = reinterpret_cast<uint64_t>(c->credit_);
  for (int r = 0; r < nrails; ++r) {
    IbWireRail& w = mine.rail[r];
    w.mtu = static_cast<uint32_t>(ports[r].activeMtu);
    w.ethernet = ports[r].ethernet ? 1 : 0;
    w.lid = ports[r].lid;
    w.rateMbps = ports[r].rateMbps;
    memcpy(w.gid, ports[r].gid.raw, sizeof(w.gid));
    w.ringRkey = c->rails_[r].recvMr->rkey;
    w.creditRkey = c->rails_[r].creditMr->rkey;
    for (int q = 0; q < qps; ++q) {
      w.qpn[q] = c->qps_[r * qps + q].qp->qp_num;
      w.psn[q] = randomPsn();
    }
  }
  COLL_TRY(bootstrap.send(peer, kIbTagInfo, &mine, IbWireInfo::bytesFor(mine.h.rails), deadline));
  std::vector<uint8_t> raw;
  COLL_TRY(bootstrap.recv(peer, kIbTagInfo, &raw, sizeof(IbWireInfo), deadline));
  COLL_TRY(checkIbConnectInfo(raw.data(), raw.size(), ports, peer));
  IbWireInfo theirs{};
  memcpy(&theirs, raw.data(), raw.size());

  // Both sides compute the same agreement from the two proposals.
  const int agreedRails = std::min(nrails, static_cast<int>(theirs.h.rails));
  const int perRail = std::min(qps, static_cast<int>(theirs.h.qps));
  if (agreedRails != nrails) {
    // Not silent: this rank was told to use more rails than the pair can.
    std::string unused;
    for (int r = agreedRails; r < nrails; ++r) unused += (unused.empty() ? "" : ", ") + devices[r]->name();
    COLL_WARN(me,
              "ib to rank %d: it has %u rail(s) and this rank %d, so %s stay unused on this connection; set "
              "COLL_IB_RAILS and COLL_IB_HCA alike on every rank",
              peer, theirs.h.rails, nrails, unused.c_str());
  }
  std::vector<IbConnection::Qp> lanes;
  for (int r = 0; r < nrails; ++r) {
    for (int q = 0; q < qps; ++q) {
      IbConnection::Qp& Q = c->qps_[r * qps + q];
      if (r < agreedRails && q < perRail) lanes.push_back(std::move(Q));
      else c->unusedQps_.push_back(Q.qp);
    }
  }
  c->qps_ = std::move(lanes);
  c->usedRails_ = agreedRails;
  c->liveRails_ = (1u << agreedRails) - 1;
  const int nlanes = agreedRails * perRail;
  c->nqps_ = nlanes;
  std::vector<uint64_t> rates;
  for (int r = 0; r < agreedRails; ++r) rates.push_back(std::min(ports[r].rateMbps, theirs.rail[r].rateMbps));
  const std::vector<uint32_t> weights = stripeWeights(rates);
  c->perRail_ = perRail;
  for (int r = 0; r < agreedRails; ++r) c->rails_[r].weight = weights[r];
  std::vector<uint32_t> laneIds(static_cast<size_t>(nlanes));
  for (int l = 0; l < nlanes; ++l) laneIds[l] = static_cast<uint32_t>(l);
  c->sendMap_.switchAt(0, StripePattern(weights, static_cast<uint32_t>(perRail)), laneIds);
  c->recvMap_.switchAt(0, StripePattern(weights, static_cast<uint32_t>(perRail)), laneIds);
  c->ring_ = StreamRing(std::min(ownRing, uint64_t{1} << theirs.h.ringLog2));
  c->chunk_ = std::clamp<uint64_t>(floorPow2(c->ringBytes() / (2 * static_cast<uint64_t>(c->sendMap_.first().size()))),
                                   64, kMaxChunk);
  c->peerRecvDepth_ = static_cast<int>(theirs.h.recvDepth);
  c->creditBlockBytes_ = sizeof(uint64_t) * (1 + static_cast<size_t>(nlanes));
  c->peerRingAddr_ = theirs.h.ringAddr;
  c->peerCreditAddr_ = theirs.h.creditAddr;
  for (int r = 0; r < agreedRails; ++r) {
    c->rails_[r].peerRingRkey = theirs.rail[r].ringRkey;
    c->rails_[r].peerCreditRkey = theirs.rail[r].creditRkey;
  }
  if (perRail != qps) {
    COLL_INFO(me, "ib to rank %d: using its %d QPs per rail (COLL_IB_QPS_PER_CONNECTION=%d here)", peer, perRail, qps);
  }
  for (int lane = 0; lane < nlanes; ++lane) {
    IbConnection::Qp& Q = c->qps_[lane];
    const int r = Q.rail;
    const int q = lane % perRail;
    const IbPortInfo& port = ports[r];
    const IbWireRail& w = theirs.rail[r];
    Q.recvPos = static_cast<uint64_t>(c->recvMap_.first().first[lane]) * c->chunk_;
    Q.inflight.assign(static_cast<size_t>(c->sendDepth_), {0, 0});
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = static_cast<ibv_mtu>(std::min<uint32_t>(w.mtu, static_cast<uint32_t>(port.activeMtu)));
    a.dest_qp_num = w.qpn[q];
    a.rq_psn = w.psn[q];
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.port_num = static_cast<uint8_t>(port.port);
    a.ah_attr.sl = static_cast<uint8_t>(options.serviceLevel);
    if (port.ethernet) {
      a.ah_attr.is_global = 1;
      memcpy(a.ah_attr.grh.dgid.raw, w.gid, sizeof(w.gid));
      a.ah_attr.grh.sgid_index = static_cast<uint8_t>(port.gidIndex);
      a.ah_attr.grh.hop_limit = 255;
      a.ah_attr.grh.traffic_class = static_cast<uint8_t>(options.trafficClass);
    } else {
      a.ah_attr.dlid = static_cast<uint16_t>(w.lid);
    }
    if (api.modifyQp(Q.qp, &a,
                     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0) {
      return sysErr(r,
                    "moving a queue pair to RTR (check COLL_IB_GID_INDEX, config.trafficClass or COLL_IB_TC, "
                    "COLL_IB_SL)");
    }
    ibv_qp_attr rts{};
    rts.qp_state = IBV_QPS_RTS;
    rts.timeout = static_cast<uint8_t>(options.timeout);
    rts.retry_cnt = static_cast<uint8_t>(options.retryCount);
    rts.rnr_retry = 7;  // 7 = retry forever: receives are reposted as they are consumed
    rts.sq_psn = mine.rail[r].psn[q];
    rts.max_rd_atomic = 1;
    if (api.modifyQp(Q.qp, &rts,
                     IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                         IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
      return sysErr(r, "moving a queue pair to RTS (check COLL_IB_TIMEOUT, COLL_IB_RETRY_CNT)");
    }
  }
  // Neither side writes before both reached RTS: a write into a QP still in INIT is dropped.
  const uint32_t ready = kReadyMagic;
  COLL_TRY(bootstrap.send(peer, kIbTagReady, &ready, sizeof(ready), deadline));
  COLL_TRY(bootstrap.recv(peer, kIbTagReady, &raw, sizeof(ready), deadline));
  uint32_t theirReady = 0;
  if (raw.size() == sizeof(theirReady)) memcpy(&theirReady, raw.data(), sizeof(theirReady));
  if (theirReady != kReadyMagic) {
    return makeError(collRemoteError, "rank %d sent a malformed ib ready message", peer);
  }
  for (int r = 0; r < agreedRails; ++r) devices[r]->addConnection(c.get());
  if (logEnabled(LogLevel::Trace)) {
    std::string spread;
    for (int r = 0; r < agreedRails; ++r) {
      spread += (r ? ", " : "") + ports[r].describe() + " x" + std::to_string(weights[r]);
    }
    COLL_TRACE(me, "ib connection to rank %d on %s: %d QPs per rail, ring %llu, chunk %llu, inline %u", peer,
               spread.c_str(), perRail, static_cast<unsigned long long>(c->ringBytes()),
               static_cast<unsigned long long>(c->chunk_), c->maxInline_);
  }
  *out = std::move(c);
  return okStatus();
}

}  // namespace coll
