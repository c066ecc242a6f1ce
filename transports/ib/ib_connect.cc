// ib connection setup: CQ, RC queue pairs and registered rings, connection data exchanged over
// the bootstrap (validated field by field), QPs taken to RTR/RTS, then a ready handshake.
#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <random>

#include "src/base/align.h"
#include "src/base/log.h"
#include "transports/ib/ib_transport.h"

namespace coll {

namespace {

constexpr uint32_t kInfoMagic = 0x6f434249u;  // "IBCo"
constexpr uint32_t kInfoVersion = 1;
constexpr uint32_t kReadyMagic = 0x59444252u;  // "RBDY"
constexpr uint32_t kMinRingLog2 = 12;
constexpr uint32_t kMaxRingLog2 = 30;
constexpr uint64_t kMaxChunk = 512ull << 10;

// Sent once by each side (native byte order, as every bootstrap message).
struct IbWireInfo {
  uint32_t magic;
  uint32_t version;
  uint32_t qps;
  uint32_t ringLog2;
  uint32_t recvDepth;
  uint32_t mtu;       // ibv_mtu of the port
  uint32_t ethernet;  // 1: RoCE (GID), 0: InfiniBand (LID)
  uint32_t lid;
  uint8_t gid[16];
  uint64_t ringAddr;
  uint64_t creditAddr;
  uint32_t ringRkey;
  uint32_t creditRkey;
  uint32_t qpn[kIbMaxQps];
  uint32_t psn[kIbMaxQps];
};

static_assert(offsetof(IbWireInfo, qpn) == 72, "tests/unit/test_ib_transport.cc damages fields by offset");

uint32_t log2Ceil(uint64_t v) {
  uint32_t l = 0;
  while ((uint64_t{1} << l) < v) ++l;
  return l;
}

uint32_t randomPsn() {
  static thread_local std::mt19937 rng(std::random_device{}());
  return rng() & 0xffffff;
}

Status validate(const IbWireInfo& in, const IbPortInfo& local, int peer) {
  auto bad = [&](const char* what, unsigned long long v) {
    return makeError(collRemoteError,
                     "rank %d sent malformed ib connection data (%s: %llu); are both ranks "
                     "running the same library version?",
                     peer, what, v);
  };
  if (in.magic != kInfoMagic) return bad("magic", in.magic);
  if (in.version != kInfoVersion) return bad("version", in.version);
  if (in.qps < 1 || in.qps > static_cast<uint32_t>(kIbMaxQps)) return bad("queue pairs", in.qps);
  if (in.ringLog2 < kMinRingLog2 || in.ringLog2 > kMaxRingLog2) return bad("ring size log2", in.ringLog2);
  if (in.recvDepth < 2 || in.recvDepth > (1u << 16)) return bad("receive depth", in.recvDepth);
  if (in.mtu < IBV_MTU_256 || in.mtu > IBV_MTU_4096) return bad("MTU", in.mtu);
  if (in.ethernet > 1) return bad("link layer", in.ethernet);
  if (in.ringAddr == 0 || in.creditAddr == 0) return bad("ring or credit address", 0);
  for (uint32_t q = 0; q < in.qps; ++q) {
    if (in.qpn[q] == 0 || in.qpn[q] > 0xffffff) return bad("QP number", in.qpn[q]);
    if (in.psn[q] > 0xffffff) return bad("PSN", in.psn[q]);
  }
  if ((in.ethernet == 1) != local.ethernet) {
    return makeError(collInvalidUsage,
                     "rank %d uses %s but this rank uses %s (%s): both ends of an ib connection "
                     "need the same link layer; set COLL_IB_HCA",
                     peer, in.ethernet ? "RoCE" : "InfiniBand", local.ethernet ? "RoCE" : "InfiniBand",
                     local.describe().c_str());
  }
  if (!local.ethernet && (in.lid == 0 || in.lid >= 0xc000)) return bad("LID", in.lid);
  return okStatus();
}

}  // namespace

Status checkIbConnectInfo(const uint8_t* bytes, size_t size, const IbPortInfo& local, int peer) {
  if (size != sizeof(IbWireInfo)) {
    return makeError(collRemoteError,
                     "rank %d sent %zu bytes of ib connection data (expected %zu); are both ranks "
                     "running the same library version?",
                     peer, size, sizeof(IbWireInfo));
  }
  IbWireInfo in;
  memcpy(&in, bytes, sizeof(in));
  return validate(in, local, peer);
}

namespace {

Status allocRegistered(IbDevice& dev, size_t bytes, int access, const char* what, void** mem, ibv_mr** mr) {
  const size_t rounded = (bytes + 4095) & ~size_t{4095};
  *mem = aligned_alloc(4096, rounded);
  if (*mem == nullptr) {
    return makeError(collSystemError, "cannot allocate %zu bytes for the ib %s; lower COLL_IB_STAGING_BYTES", rounded,
                     what);
  }
  // The credit block must start at zero; zeroing the rings too keeps stale heap bytes off the wire.
  memset(*mem, 0, rounded);
  return dev.mrCache().registerHost(*mem, rounded, access, mr).withContext(std::string("ib ") + what);
}

}  // namespace

Status connectIb(Bootstrap& bootstrap, const std::shared_ptr<IbDevice>& device, int peer, const IbOptions& options,
                 Deadline deadline, std::unique_ptr<IbConnection>* out) {
  const int me = bootstrap.rank();
  if (peer == me || peer < 0 || peer >= bootstrap.nranks()) {
    return makeError(collInternalError, "rank %d: no ib connection to rank %d", me, peer);
  }
  const VerbsApi& api = device->api();
  const ibv_device_attr& dattr = device->attr();
  const IbPortInfo& port = device->port();
  std::unique_ptr<IbConnection> c(new IbConnection());
  c->device_ = device;
  c->api_ = &api;
  c->bootstrap_ = &bootstrap;
  c->peer_ = peer;
  c->options_ = options;
  const std::string name = device->name();
  auto sysErr = [&](const char* what) {
    const int err = errno;
    return makeError(collSystemError, "%s: %s for the connection to rank %d failed: %s", name.c_str(), what, peer,
                     errnoText(err).c_str());
  };

  const int qps = std::clamp(options.qps, 1, kIbMaxQps);
  const int maxWr = std::max(dattr.max_qp_wr, 4);
  c->sendDepth_ = std::clamp(options.sendDepth, 4, maxWr);
  const int recvDepth = std::clamp(options.recvDepth, 2, std::min(maxWr, 1 << 16));
  c->recvDepth_ = recvDepth;
  c->signalEvery_ = static_cast<uint32_t>(std::max(1, c->sendDepth_ / 4));
  const uint32_t ringLog2 = std::clamp(log2Ceil(std::max<uint64_t>(options.ringBytes, 1)), kMinRingLog2, kMaxRingLog2);
  const uint64_t ownRing = uint64_t{1} << ringLog2;
  c->cqEntries_ = qps * (c->sendDepth_ + recvDepth) + 16;
  if (dattr.max_cqe > 0 && c->cqEntries_ > dattr.max_cqe) {
    return makeError(collInvalidUsage,
                     "%s: %d QPs need %d completion-queue entries but the device allows %d; lower "
                     "COLL_IB_QPS_PER_CONNECTION",
                     name.c_str(), qps, c->cqEntries_, dattr.max_cqe);
  }
  c->cq_ = api.createCq(device->context(), c->cqEntries_, c.get(), device->channel(), 0);
  if (c->cq_ == nullptr) return sysErr("creating a completion queue");

  uint32_t granted = options.maxInline;
  std::vector<ibv_qp*> created;
  for (int q = 0; q < qps; ++q) {
    ibv_qp_init_attr ia{};
    ia.send_cq = c->cq_;
    ia.recv_cq = c->cq_;
    ia.qp_type = IBV_QPT_RC;
    ia.sq_sig_all = 0;
    ia.cap.max_send_wr = static_cast<uint32_t>(c->sendDepth_);
    ia.cap.max_recv_wr = static_cast<uint32_t>(recvDepth);
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    ia.cap.max_inline_data = granted;
    ibv_qp* qp = api.createQp(device->pd(), &ia);
    if (qp == nullptr && granted > 0) {  // some devices have no inline data at all
      ia.cap.max_inline_data = granted = 0;
      qp = api.createQp(device->pd(), &ia);
    }
    if (qp == nullptr) {
      for (ibv_qp* p : created) api.destroyQp(p);
      return sysErr("creating a queue pair");
    }
    granted = std::min(granted, ia.cap.max_inline_data);
    created.push_back(qp);
  }
  // From here the connection owns the QPs (the destructor destroys them on any failure).
  c->qps_.resize(qps);
  for (int q = 0; q < qps; ++q) c->qps_[q].qp = created[q];
  c->maxInline_ = granted;

  for (int q = 0; q < qps; ++q) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = static_cast<uint8_t>(port.port);
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    if (api.modifyQp(c->qps_[q].qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
      return sysErr("moving a queue pair to INIT");
    }
  }

  c->ringAlloc_ = ownRing;
  c->creditSrcBytes_ = static_cast<size_t>(c->sendDepth_) * (1 + kIbMaxQps) * sizeof(uint64_t);
  void* mem = nullptr;
  COLL_TRY(allocRegistered(*device, ownRing, IBV_ACCESS_LOCAL_WRITE, "send ring", &mem, &c->sendMr_));
  c->sendRing_ = static_cast<std::byte*>(mem);
  COLL_TRY(allocRegistered(*device, ownRing, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, "receive ring", &mem,
                           &c->recvMr_));
  c->recvRing_ = static_cast<std::byte*>(mem);
  COLL_TRY(allocRegistered(*device, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, "credit block", &mem,
                           &c->creditMr_));
  c->credit_ = static_cast<volatile uint64_t*>(mem);
  COLL_TRY(
      allocRegistered(*device, c->creditSrcBytes_, IBV_ACCESS_LOCAL_WRITE, "credit sources", &mem, &c->creditSrcMr_));
  c->creditSrc_ = static_cast<uint64_t*>(mem);

  // Receives first: the peer may write as soon as it has our data and has reached RTS.
  for (int q = 0; q < qps; ++q) COLL_TRY(c->postRecvs(q, recvDepth));

  IbWireInfo mine{};
  mine.magic = kInfoMagic;
  mine.version = kInfoVersion;
  mine.qps = static_cast<uint32_t>(qps);
  mine.ringLog2 = ringLog2;
  mine.recvDepth = static_cast<uint32_t>(recvDepth);
  mine.mtu = static_cast<uint32_t>(port.activeMtu);
  mine.ethernet = port.ethernet ? 1 : 0;
  mine.lid = port.lid;
  memcpy(mine.gid, port.gid.raw, sizeof(mine.gid));
  mine.ringAddr = reinterpret_cast<uint64_t>(c->recvRing_);
  mine.ringRkey = c->recvMr_->rkey;
  mine.creditAddr = reinterpret_cast<uint64_t>(c->credit_);
  mine.creditRkey = c->creditMr_->rkey;
  for (int q = 0; q < qps; ++q) {
    mine.qpn[q] = c->qps_[q].qp->qp_num;
    mine.psn[q] = randomPsn();
  }
  COLL_TRY(bootstrap.send(peer, kIbTagInfo, &mine, sizeof(mine), deadline));
  std::vector<uint8_t> raw;
  COLL_TRY(bootstrap.recv(peer, kIbTagInfo, &raw, sizeof(IbWireInfo), deadline));
  COLL_TRY(checkIbConnectInfo(raw.data(), raw.size(), port, peer));
  IbWireInfo theirs;
  memcpy(&theirs, raw.data(), sizeof(theirs));

  // Both sides compute the same agreement from the two proposals.
  const int agreed = std::min(qps, static_cast<int>(theirs.qps));
  c->nqps_ = agreed;
  c->ring_ = StreamRing(std::min(ownRing, uint64_t{1} << theirs.ringLog2));
  c->chunk_ = std::clamp<uint64_t>(floorPow2(c->ringBytes() / (2 * static_cast<uint64_t>(agreed))), 64, kMaxChunk);
  c->skip_ = static_cast<uint64_t>(agreed - 1) * c->chunk_;
  c->peerRecvDepth_ = static_cast<int>(theirs.recvDepth);
  c->creditBlockBytes_ = sizeof(uint64_t) * (1 + static_cast<size_t>(agreed));
  c->peerRingAddr_ = theirs.ringAddr;
  c->peerRingRkey_ = theirs.ringRkey;
  c->peerCreditAddr_ = theirs.creditAddr;
  c->peerCreditRkey_ = theirs.creditRkey;
  while (static_cast<int>(c->qps_.size()) > agreed) {
    c->unusedQps_.push_back(c->qps_.back().qp);
    c->qps_.pop_back();
  }
  if (agreed != qps) {
    COLL_INFO(me, "ib to rank %d: using its %d QPs (COLL_IB_QPS_PER_CONNECTION=%d here)", peer, agreed, qps);
  }
  const ibv_mtu mtu = static_cast<ibv_mtu>(std::min<uint32_t>(theirs.mtu, static_cast<uint32_t>(port.activeMtu)));
  for (int q = 0; q < agreed; ++q) {
    IbConnection::Qp& Q = c->qps_[q];
    Q.recvPos = static_cast<uint64_t>(q) * c->chunk_;
    Q.inflight.assign(static_cast<size_t>(c->sendDepth_), {0, 0});
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = mtu;
    a.dest_qp_num = theirs.qpn[q];
    a.rq_psn = theirs.psn[q];
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.port_num = static_cast<uint8_t>(port.port);
    a.ah_attr.sl = static_cast<uint8_t>(options.serviceLevel);
    if (port.ethernet) {
      a.ah_attr.is_global = 1;
      memcpy(a.ah_attr.grh.dgid.raw, theirs.gid, sizeof(theirs.gid));
      a.ah_attr.grh.sgid_index = static_cast<uint8_t>(port.gidIndex);
      a.ah_attr.grh.hop_limit = 255;
      a.ah_attr.grh.traffic_class = static_cast<uint8_t>(options.trafficClass);
    } else {
      a.ah_attr.dlid = static_cast<uint16_t>(theirs.lid);
    }
    if (api.modifyQp(Q.qp, &a,
                     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0) {
      return sysErr(
          "moving a queue pair to RTR (check COLL_IB_GID_INDEX, config.trafficClass or COLL_IB_TC, COLL_IB_SL)");
    }
    ibv_qp_attr r{};
    r.qp_state = IBV_QPS_RTS;
    r.timeout = static_cast<uint8_t>(options.timeout);
    r.retry_cnt = static_cast<uint8_t>(options.retryCount);
    r.rnr_retry = 7;  // 7 = retry forever: receives are reposted as they are consumed
    r.sq_psn = mine.psn[q];
    r.max_rd_atomic = 1;
    if (api.modifyQp(Q.qp, &r,
                     IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                         IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
      return sysErr("moving a queue pair to RTS (check COLL_IB_TIMEOUT, COLL_IB_RETRY_CNT)");
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
  device->addConnection(c.get());
  COLL_TRACE(me, "ib connection to rank %d on %s: %d QPs, ring %llu, chunk %llu, inline %u", peer,
             port.describe().c_str(), agreed, static_cast<unsigned long long>(c->ringBytes()),
             static_cast<unsigned long long>(c->chunk_), c->maxInline_);
  *out = std::move(c);
  return okStatus();
}

}  // namespace coll
