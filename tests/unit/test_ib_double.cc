// Tests of the verbs test double (tests/ib_double): each HCA rule its header promises, between two
// emulated devices of one process and between processes.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/ib_double/verbs_double.h"

namespace coll::testing {
namespace {

const VerbsApi& V = verbsTestDouble();
using Clock = std::chrono::steady_clock;

struct EndpointOptions {
  int cqDepth = 256;
  uint32_t sendWr = 64;
  uint32_t recvWr = 64;
  uint32_t inlineBytes = 64;
  bool sigAll = true;
  size_t memBytes = 1 << 20;
  int mrAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  int qpAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  bool channel = false;
};

struct Endpoint {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_comp_channel* channel = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  std::vector<char> mem;
  ibv_mr* mr = nullptr;
  bool infiniband = false;
  uint16_t lid = 0;
  ibv_gid gid{};

  void close() {
    if (qp) {
      EXPECT_EQ(V.destroyQp(qp), 0);
    }
    if (mr) {
      EXPECT_EQ(V.deregMr(mr), 0);
    }
    if (cq) V.destroyCq(cq);
    if (channel) V.destroyCompChannel(channel);
    if (pd) {
      EXPECT_EQ(V.deallocPd(pd), 0);
    }
    if (ctx) {
      EXPECT_EQ(V.closeDevice(ctx), 0);
    }
    *this = Endpoint();
  }
};

// What a peer needs to reach an endpoint (what the bootstrap would carry).
struct Remote {
  uint32_t qpn;
  ibv_gid gid;
  uint16_t lid;
  uint64_t addr;
  uint32_t rkey;
};

ibv_device* deviceAt(int index) {
  int n = 0;
  ibv_device** list = V.getDeviceList(&n);
  EXPECT_GT(n, index);
  ibv_device* d = list[index];
  V.freeDeviceList(list);
  return d;
}

Endpoint openEndpoint(int device, const EndpointOptions& o = {}) {
  Endpoint e;
  e.ctx = V.openDevice(deviceAt(device));
  EXPECT_NE(e.ctx, nullptr);
  ibv_port_attr port{};
  EXPECT_EQ(V.queryPort(e.ctx, 1, &port), 0);
  e.infiniband = port.link_layer == IBV_LINK_LAYER_INFINIBAND;
  e.lid = port.lid;
  EXPECT_EQ(V.queryGid(e.ctx, 1, e.infiniband ? 0 : 3, &e.gid), 0);
  e.pd = V.allocPd(e.ctx);
  EXPECT_NE(e.pd, nullptr);
  if (o.channel) e.channel = V.createCompChannel(e.ctx);
  e.cq = V.createCq(e.ctx, o.cqDepth, nullptr, e.channel, 0);
  EXPECT_NE(e.cq, nullptr);
  e.mem.assign(o.memBytes, 0);
  e.mr = V.regMr(e.pd, e.mem.data(), e.mem.size(), o.mrAccess);
  EXPECT_NE(e.mr, nullptr);
  ibv_qp_init_attr init{};
  init.send_cq = e.cq;
  init.recv_cq = e.cq;
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = o.sigAll ? 1 : 0;
  init.cap.max_send_wr = o.sendWr;
  init.cap.max_recv_wr = o.recvWr;
  init.cap.max_send_sge = 2;
  init.cap.max_recv_sge = 2;
  init.cap.max_inline_data = o.inlineBytes;
  e.qp = V.createQp(e.pd, &init);
  EXPECT_NE(e.qp, nullptr);
  if (e.qp) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.pkey_index = 0;
    a.qp_access_flags = o.qpAccess;
    EXPECT_EQ(V.modifyQp(e.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
  }
  return e;
}

Remote describe(const Endpoint& e) {
  return Remote{e.qp->qp_num, e.gid, e.lid, reinterpret_cast<uint64_t>(e.mem.data()), e.mr->rkey};
}

struct Timing {
  uint8_t timeout = 14;  // emulated: about 1 ms per attempt
  uint8_t retryCnt = 7;
  uint8_t rnrRetry = 7;
  uint8_t minRnrTimer = 1;
  uint32_t sqPsn = 100;
  uint32_t rqPsn = 200;  // what the peer's sqPsn must be
};

int toRtr(Endpoint& e, const Remote& r, const Timing& t, bool useLid = false) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_4096;
  a.dest_qp_num = r.qpn;
  a.rq_psn = t.rqPsn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = t.minRnrTimer;
  a.ah_attr.port_num = 1;
  if (useLid) {
    a.ah_attr.dlid = r.lid;
  } else {
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = r.gid;
    a.ah_attr.grh.sgid_index = e.infiniband ? 0 : 3;
    a.ah_attr.grh.hop_limit = 1;
  }
  return V.modifyQp(e.qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

int toRts(Endpoint& e, const Timing& t) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = t.timeout;
  a.retry_cnt = t.retryCnt;
  a.rnr_retry = t.rnrRetry;
  a.sq_psn = t.sqPsn;
  a.max_rd_atomic = 1;
  return V.modifyQp(
      e.qp, &a,
      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

Timing mirrored(Timing t) {
  std::swap(t.sqPsn, t.rqPsn);
  return t;
}

void connectPair(Endpoint& a, Endpoint& b, const Timing& t = {}, bool useLid = false) {
  ASSERT_EQ(toRtr(a, describe(b), t, useLid), 0);
  ASSERT_EQ(toRtr(b, describe(a), mirrored(t), useLid), 0);
  ASSERT_EQ(toRts(a, t), 0);
  ASSERT_EQ(toRts(b, mirrored(t)), 0);
}

int postWrite(Endpoint& e, uint64_t localOff, uint32_t len, uint64_t raddr, uint32_t rkey, uint64_t wrId,
              std::optional<uint32_t> imm = std::nullopt, int flags = 0) {
  ibv_sge sge{reinterpret_cast<uint64_t>(e.mem.data()) + localOff, len, e.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = wrId;
  wr.sg_list = &sge;
  wr.num_sge = len ? 1 : 0;
  wr.opcode = imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  if (imm) wr.imm_data = htonl(*imm);
  wr.send_flags = flags;
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  return V.postSend(e.qp, &wr, &bad);
}

int postSendMsg(Endpoint& e, uint64_t localOff, uint32_t len, uint64_t wrId) {
  ibv_sge sge{reinterpret_cast<uint64_t>(e.mem.data()) + localOff, len, e.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = wrId;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  ibv_send_wr* bad = nullptr;
  return V.postSend(e.qp, &wr, &bad);
}

int postRecv(Endpoint& e, uint64_t wrId, uint64_t off = 0, uint32_t len = 0) {
  ibv_sge sge{reinterpret_cast<uint64_t>(e.mem.data()) + off, len, e.mr->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = wrId;
  wr.sg_list = &sge;
  wr.num_sge = len ? 1 : 0;
  ibv_recv_wr* bad = nullptr;
  return V.postRecv(e.qp, &wr, &bad);
}

// The next completion on `cq`, or nullopt after `ms`.
std::optional<ibv_wc> pollWc(ibv_cq* cq, int ms = 5000) {
  const auto end = Clock::now() + std::chrono::milliseconds(ms);
  ibv_wc wc{};
  while (Clock::now() < end) {
    const int n = V.pollCq(cq, 1, &wc);
    if (n < 0) return std::nullopt;
    if (n == 1) return wc;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return std::nullopt;
}

// Polls until a completion for `qpn` arrives (two endpoints of a test may share nothing, but a
// test that polls one CQ for both directions uses this to pick).
std::vector<ibv_wc> pollN(ibv_cq* cq, int n, int ms = 5000) {
  std::vector<ibv_wc> out;
  while (static_cast<int>(out.size()) < n) {
    auto wc = pollWc(cq, ms);
    if (!wc) break;
    out.push_back(*wc);
  }
  return out;
}

class IbDouble : public ::testing::Test {
 protected:
  void SetUp() override {
    VerbsDoubleOptions o;
    o.devices = 2;
    configureVerbsDouble(o);
    injectVerbsFault(VerbsFault::None);
  }
  void TearDown() override {
    a.close();
    b.close();
    injectVerbsFault(VerbsFault::None);
    configureVerbsDouble(VerbsDoubleOptions());
  }
  void openPair(const EndpointOptions& oa = {}, const EndpointOptions& ob = {}) {
    a = openEndpoint(0, oa);
    b = openEndpoint(1, ob);
  }
  Endpoint a, b;
};

TEST_F(IbDouble, DevicesPortsAndGids) {
  int n = 0;
  ibv_device** list = V.getDeviceList(&n);
  ASSERT_EQ(n, 2);
  EXPECT_STREQ(V.getDeviceName(list[0]), "verbsdouble0");
  EXPECT_STREQ(V.getDeviceName(list[1]), "verbsdouble1");
  EXPECT_EQ(list[2], nullptr);
  EXPECT_NE(V.getDeviceGuid(list[0]), V.getDeviceGuid(list[1]));
  ibv_context* ctx = V.openDevice(list[0]);
  V.freeDeviceList(list);
  ASSERT_NE(ctx, nullptr);
  EXPECT_GE(ctx->async_fd, 0);
  EXPECT_EQ(ctx->num_comp_vectors, 1);
  ibv_device_attr dev{};
  ASSERT_EQ(V.queryDevice(ctx, &dev), 0);
  EXPECT_EQ(dev.phys_port_cnt, 1);
  EXPECT_EQ(dev.max_qp_wr, 4096);
  ibv_port_attr port{};
  ASSERT_EQ(V.queryPort(ctx, 1, &port), 0);
  EXPECT_EQ(port.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(port.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_NE(V.queryPort(ctx, 2, &port), 0);
  // mlx5's order: link-local v1, v2, then IPv4-mapped v1, v2; the rest empty.
  ibv_gid_type types[4];
  for (int i = 0; i < 4; ++i) ASSERT_EQ(V.queryGidType(ctx, 1, i, &types[i]), 0);
  EXPECT_EQ(types[1], IBV_GID_TYPE_ROCE_V2);
  EXPECT_EQ(types[2], IBV_GID_TYPE_ROCE_V1);
  EXPECT_EQ(types[3], IBV_GID_TYPE_ROCE_V2);
  ibv_gid_type t;
  EXPECT_NE(V.queryGidType(ctx, 1, 4, &t), 0);
  ibv_gid gid{};
  ASSERT_EQ(V.queryGid(ctx, 1, 3, &gid), 0);
  EXPECT_EQ(gid.raw[10], 0xff);
  EXPECT_EQ(gid.raw[11], 0xff);
  EXPECT_EQ(gid.raw[12], 10);
  ASSERT_EQ(V.queryGid(ctx, 1, 0, &gid), 0);
  EXPECT_EQ(gid.raw[0], 0xfe);
  EXPECT_EQ(V.closeDevice(ctx), 0);
}

TEST_F(IbDouble, InfinibandPortsUseLids) {
  VerbsDoubleOptions o;
  o.devices = 2;
  o.infiniband = true;
  configureVerbsDouble(o);
  openPair();
  EXPECT_TRUE(a.infiniband);
  EXPECT_NE(a.lid, 0);
  EXPECT_NE(a.lid, b.lid);
  connectPair(a, b, {}, /*useLid=*/true);
  std::memcpy(a.mem.data(), "lid", 4);
  ASSERT_EQ(postRecv(b, 7), 0);
  ASSERT_EQ(postWrite(a, 0, 4, describe(b).addr, b.mr->rkey, 1, 5u), 0);
  auto wa = pollWc(a.cq);
  ASSERT_TRUE(wa);
  EXPECT_EQ(wa->status, IBV_WC_SUCCESS);
  auto wb = pollWc(b.cq);
  ASSERT_TRUE(wb);
  EXPECT_EQ(wb->status, IBV_WC_SUCCESS);
  EXPECT_STREQ(b.mem.data(), "lid");
}

TEST_F(IbDouble, MemoryRegistration) {
  openPair();
  EXPECT_NE(a.mr->lkey, a.mr->rkey);  // a swapped key is caught
  std::vector<char> buf(4096);
  errno = 0;
  EXPECT_EQ(V.regMr(a.pd, buf.data(), buf.size(), IBV_ACCESS_REMOTE_WRITE), nullptr);  // needs LOCAL_WRITE
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(V.regMr(a.pd, buf.data(), 0, IBV_ACCESS_LOCAL_WRITE), nullptr);
  ibv_mr* mr = V.regMr(a.pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(mr->addr, buf.data());
  EXPECT_EQ(mr->length, buf.size());
  ibv_pd* pd = V.allocPd(a.ctx);
  ibv_mr* mr2 = V.regMr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr2, nullptr);
  EXPECT_EQ(V.deallocPd(pd), EBUSY);  // still has a region
  EXPECT_EQ(V.deregMr(mr2), 0);
  EXPECT_EQ(V.deallocPd(pd), 0);
  EXPECT_EQ(V.deregMr(mr), 0);
}

TEST_F(IbDouble, DmabufRegionIsAddressedByIova) {
  openPair();
  connectPair(a, b);
  const size_t bytes = 8192;
  int fd = memfd_create("verbs-double-dmabuf", 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, bytes), 0);
  const uint64_t iova = 0x7000000000ull;
  ibv_mr* mr = V.regDmabufMr(b.pd, 0, bytes, iova, fd, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_NE(mr, nullptr);
  std::memcpy(a.mem.data(), "dmabuf!", 8);
  ASSERT_EQ(postWrite(a, 0, 8, iova + 4096, mr->rkey, 1), 0);
  auto wc = pollWc(a.cq);
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->status, IBV_WC_SUCCESS);
  char check[8];
  ASSERT_EQ(pread(fd, check, 8, 4096), 8);
  EXPECT_STREQ(check, "dmabuf!");
  EXPECT_EQ(V.deregMr(mr), 0);
  close(fd);
}

TEST_F(IbDouble, QpTransitionsNeedTheRightMasks) {
  openPair();
  ibv_qp_init_attr init{};
  init.send_cq = a.cq;
  init.recv_cq = a.cq;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = 4;
  init.cap.max_recv_wr = 4;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  ibv_qp* qp = V.createQp(a.pd, &init);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(qp->state, IBV_QPS_RESET);
  ibv_qp_attr at{};
  at.qp_state = IBV_QPS_INIT;
  at.port_num = 1;
  EXPECT_EQ(V.modifyQp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT), EINVAL);  // no access flags
  at.qp_state = IBV_QPS_RTR;
  EXPECT_EQ(V.modifyQp(qp, &at, IBV_QP_STATE), EINVAL);  // RESET -> RTR
  // Posting a receive in RESET fails; a send before RTS fails.
  std::swap(a.qp, qp);
  EXPECT_EQ(postRecv(a, 1), EINVAL);
  at.qp_state = IBV_QPS_INIT;
  at.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  EXPECT_EQ(V.modifyQp(a.qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
  EXPECT_EQ(a.qp->state, IBV_QPS_INIT);
  EXPECT_EQ(postRecv(a, 1), 0);
  EXPECT_EQ(postWrite(a, 0, 8, 0, 0, 1), EINVAL);
  // INIT -> RTR without the address vector; then with a timeout attribute RTR does not take.
  Timing t;
  ibv_qp_attr r{};
  r.qp_state = IBV_QPS_RTR;
  r.path_mtu = IBV_MTU_1024;
  r.dest_qp_num = b.qp->qp_num;
  EXPECT_EQ(V.modifyQp(a.qp, &r,
                       IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                           IBV_QP_MIN_RNR_TIMER),
            EINVAL);
  // RoCE needs a GRH.
  r.ah_attr.port_num = 1;
  r.ah_attr.is_global = 0;
  r.ah_attr.dlid = 5;
  EXPECT_EQ(V.modifyQp(a.qp, &r,
                       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
            EINVAL);
  EXPECT_EQ(a.qp->state, IBV_QPS_INIT);
  ASSERT_EQ(toRtr(a, describe(b), t), 0);
  EXPECT_EQ(a.qp->state, IBV_QPS_RTR);
  EXPECT_EQ(postWrite(a, 0, 8, 0, 0, 1), EINVAL);  // RTR cannot send
  ibv_qp_attr s{};
  s.qp_state = IBV_QPS_RTS;
  s.timeout = 14;
  EXPECT_EQ(V.modifyQp(a.qp, &s, IBV_QP_STATE | IBV_QP_TIMEOUT), EINVAL);  // missing retry_cnt etc.
  s.retry_cnt = 9;
  EXPECT_EQ(V.modifyQp(a.qp, &s,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                           IBV_QP_MAX_QP_RD_ATOMIC),
            EINVAL);  // retry_cnt is 3 bits
  EXPECT_EQ(V.modifyQp(a.qp, &s,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                           IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_DEST_QPN),
            EINVAL);  // an attribute RTS does not take
  ASSERT_EQ(toRts(a, t), 0);
  EXPECT_EQ(a.qp->state, IBV_QPS_RTS);
  // To the error state: the posted receive is flushed.
  ibv_qp_attr e{};
  e.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(V.modifyQp(a.qp, &e, IBV_QP_STATE), 0);
  auto wc = pollWc(a.cq);
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->wr_id, 1u);
  EXPECT_EQ(wc->status, IBV_WC_WR_FLUSH_ERR);
  // Posting in the error state flushes too.
  EXPECT_EQ(postWrite(a, 0, 8, 0, 0, 2), 0);
  wc = pollWc(a.cq);
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->status, IBV_WC_WR_FLUSH_ERR);
  e.qp_state = IBV_QPS_RESET;
  EXPECT_EQ(V.modifyQp(a.qp, &e, IBV_QP_STATE), 0);
  EXPECT_EQ(a.qp->state, IBV_QPS_RESET);
  std::swap(a.qp, qp);
  EXPECT_EQ(V.destroyQp(qp), 0);
}

TEST_F(IbDouble, WriteWithImmediateConsumesAReceive) {
  openPair();
  connectPair(a, b);
  const char msg[] = "hello through the double";
  std::memcpy(a.mem.data() + 64, msg, sizeof msg);
  ASSERT_EQ(postRecv(b, 41), 0);
  ASSERT_EQ(postRecv(b, 42), 0);
  ASSERT_EQ(postWrite(a, 64, sizeof msg, describe(b).addr + 128, b.mr->rkey, 7, 0xabcdu), 0);
  auto wa = pollWc(a.cq);
  ASSERT_TRUE(wa);
  EXPECT_EQ(wa->status, IBV_WC_SUCCESS);
  EXPECT_EQ(wa->wr_id, 7u);
  EXPECT_EQ(wa->opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(wa->qp_num, a.qp->qp_num);
  // A signaled completion means the data is in the target's memory (RC).
  EXPECT_STREQ(b.mem.data() + 128, msg);
  auto wb = pollWc(b.cq);
  ASSERT_TRUE(wb);
  EXPECT_EQ(wb->status, IBV_WC_SUCCESS);
  EXPECT_EQ(wb->wr_id, 41u);
  EXPECT_EQ(wb->opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(wb->byte_len, sizeof msg);
  EXPECT_TRUE(wb->wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(ntohl(wb->imm_data), 0xabcdu);
  EXPECT_EQ(wb->src_qp, a.qp->qp_num);
  // A plain write consumes nothing and makes no receive completion.
  ASSERT_EQ(postWrite(a, 64, 4, describe(b).addr, b.mr->rkey, 8), 0);
  ASSERT_TRUE(pollWc(a.cq));
  ibv_wc none;
  EXPECT_EQ(V.pollCq(b.cq, 1, &none), 0);
  // Zero-length write with immediate: a notification only.
  ASSERT_EQ(postWrite(a, 0, 0, 0, 0, 9, 77u), 0);
  ASSERT_TRUE(pollWc(a.cq));
  wb = pollWc(b.cq);
  ASSERT_TRUE(wb);
  EXPECT_EQ(wb->wr_id, 42u);
  EXPECT_EQ(wb->byte_len, 0u);
  EXPECT_EQ(ntohl(wb->imm_data), 77u);
}

TEST_F(IbDouble, SendLandsInThePostedReceive) {
  openPair();
  connectPair(a, b);
  std::memcpy(a.mem.data(), "send me", 8);
  ASSERT_EQ(postRecv(b, 5, 1000, 64), 0);
  ASSERT_EQ(postSendMsg(a, 0, 8, 1), 0);
  auto wa = pollWc(a.cq);
  ASSERT_TRUE(wa);
  EXPECT_EQ(wa->status, IBV_WC_SUCCESS);
  EXPECT_EQ(wa->opcode, IBV_WC_SEND);
  auto wb = pollWc(b.cq);
  ASSERT_TRUE(wb);
  EXPECT_EQ(wb->status, IBV_WC_SUCCESS);
  EXPECT_EQ(wb->opcode, IBV_WC_RECV);
  EXPECT_EQ(wb->byte_len, 8u);
  EXPECT_STREQ(b.mem.data() + 1000, "send me");
  // Longer than the receive: the responder's length error, the requester's invalid request.
  ASSERT_EQ(postRecv(b, 6, 1000, 4), 0);
  ASSERT_EQ(postSendMsg(a, 0, 8, 2), 0);
  wa = pollWc(a.cq);
  ASSERT_TRUE(wa);
  EXPECT_EQ(wa->status, IBV_WC_REM_INV_REQ_ERR);
  wb = pollWc(b.cq);
  ASSERT_TRUE(wb);
  EXPECT_EQ(wb->status, IBV_WC_LOC_LEN_ERR);
  EXPECT_EQ(a.qp->state, IBV_QPS_ERR);
  EXPECT_EQ(b.qp->state, IBV_QPS_ERR);
}

TEST_F(IbDouble, ReceiverNotReadyRetriesThenSucceeds) {
  openPair();
  connectPair(a, b);  // rnr_retry 7: forever
  ASSERT_EQ(postWrite(a, 0, 16, describe(b).addr, b.mr->rkey, 1, 1u), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  ibv_wc wc;
  EXPECT_EQ(V.pollCq(a.cq, 1, &wc), 0);  // still retrying
  ASSERT_EQ(postRecv(b, 9), 0);
  auto wa = pollWc(a.cq);
  ASSERT_TRUE(wa);
  EXPECT_EQ(wa->status, IBV_WC_SUCCESS);
  auto wb = pollWc(b.cq);
  ASSERT_TRUE(wb);
  EXPECT_EQ(wb->wr_id, 9u);
}

TEST_F(IbDouble, ReceiverNotReadyRetryExceeded) {
  openPair();
  Timing t;
  t.rnrRetry = 2;
  connectPair(a, b, t);
  ASSERT_EQ(postWrite(a, 0, 16, describe(b).addr, b.mr->rkey, 1, 1u), 0);
  ASSERT_EQ(postWrite(a, 0, 16, describe(b).addr, b.mr->rkey, 2), 0);
  auto wc = pollWc(a.cq);
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->wr_id, 1u);
  EXPECT_EQ(wc->status, IBV_WC_RNR_RETRY_EXC_ERR);
  wc = pollWc(a.cq);
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->wr_id, 2u);
  EXPECT_EQ(wc->status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(a.qp->state, IBV_QPS_ERR);
}

TEST_F(IbDouble, WriteOutsideTheRegionIsARemoteAccessError) {
  openPair();
  connectPair(a, b);
  ASSERT_EQ(postRecv(b, 3), 0);
  const uint64_t end = describe(b).addr + b.mem.size();
  ASSERT_EQ(postWrite(a, 0, 64, end - 32, b.mr->rkey, 1), 0);
  auto wc = pollWc(a.cq);
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(a.qp->state, IBV_QPS_ERR);
  // The responder's QP goes to error too (its receive flushed) with an async event.
  wc = pollWc(b.cq);
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->wr_id, 3u);
  EXPECT_EQ(wc->status, IBV_WC_WR_FLUSH_ERR);
  ibv_async_event ev{};
  ASSERT_EQ(V.getAsyncEvent(b.ctx, &ev), 0);
  EXPECT_EQ(ev.event_type, IBV_EVENT_QP_ACCESS_ERR);
  EXPECT_EQ(ev.element.qp, b.qp);
  V.ackAsyncEvent(&ev);
}

TEST_F(IbDouble, WrongRkeyOrNoRemoteWriteAccess) {
  EndpointOptions readOnly;
  readOnly.mrAccess = IBV_ACCESS_LOCAL_WRITE;
  openPair({}, readOnly);
  connectPair(a, b);
  ASSERT_EQ(postWrite(a, 0, 8, describe(b).addr, b.mr->lkey, 1), 0);  // the lkey is not the rkey
  auto wc = pollWc(a.cq);
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->status, IBV_WC_REM_ACCESS_ERR);
  a.close();
  b.close();
  openPair({}, readOnly);
  connectPair(a, b);
  ASSERT_EQ(postWrite(a, 0, 8, describe(b).addr, b.mr->rkey, 1), 0);  // region without REMOTE_WRITE
  wc = pollWc(a.cq);
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->status, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(IbDouble, LocalKeyOutsideItsRegionIsALocalProtectionError) {
  openPair();
  connectPair(a, b);
  ASSERT_EQ(postWrite(a, a.mem.size() - 4, 8, describe(b).addr, b.mr->rkey, 1), 0);
  auto wc = pollWc(a.cq);
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->status, IBV_WC_LOC_PROT_ERR);
}

TEST_F(IbDouble, SendQueueFullIsENOMEM) {
  EndpointOptions o;
  o.sendWr = 4;
  openPair(o);
  connectPair(a, b);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(postWrite(a, 0, 8, describe(b).addr, b.mr->rkey, i), 0);
  EXPECT_EQ(postWrite(a, 0, 8, describe(b).addr, b.mr->rkey, 4), ENOMEM);
  // Slots come back as completions are polled.
  auto done = pollN(a.cq, 4);
  ASSERT_EQ(done.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(done[i].wr_id, static_cast<uint64_t>(i));
  EXPECT_EQ(postWrite(a, 0, 8, describe(b).addr, b.mr->rkey, 5), 0);
  ASSERT_TRUE(pollWc(a.cq));
  // The receive queue too.
  for (int i = 0; i < 64; ++i) ASSERT_EQ(postRecv(b, i), 0);
  EXPECT_EQ(postRecv(b, 64), ENOMEM);
}

TEST_F(IbDouble, UnsignaledCompletions) {
  EndpointOptions o;
  o.sigAll = false;
  o.sendWr = 4;
  openPair(o);
  connectPair(a, b);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(postWrite(a, 0, 8, describe(b).addr, b.mr->rkey, i), 0);
  ASSERT_EQ(postWrite(a, 0, 8, describe(b).addr, b.mr->rkey, 3, std::nullopt, IBV_SEND_SIGNALED), 0);
  auto wc = pollWc(a.cq);
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->wr_id, 3u);  // only the signaled one
  ibv_wc more;
  EXPECT_EQ(V.pollCq(a.cq, 1, &more), 0);
  // Its completion freed all four slots.
  for (int i = 0; i < 4; ++i) ASSERT_EQ(postWrite(a, 0, 8, describe(b).addr, b.mr->rkey, 10 + i), 0);
  // Never signaled: the slots never come back.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(V.pollCq(a.cq, 1, &more), 0);
  EXPECT_EQ(postWrite(a, 0, 8, describe(b).addr, b.mr->rkey, 20, std::nullopt, IBV_SEND_SIGNALED), ENOMEM);
}

TEST_F(IbDouble, CompletionQueueOverflowIsAnError) {
  EndpointOptions o;
  o.cqDepth = 2;
  openPair(o);
  connectPair(a, b);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(postWrite(a, 0, 8, describe(b).addr, b.mr->rkey, i), 0);
  ibv_async_event ev{};
  ASSERT_EQ(V.getAsyncEvent(a.ctx, &ev), 0);  // blocks until the overflow
  EXPECT_EQ(ev.event_type, IBV_EVENT_CQ_ERR);
  EXPECT_EQ(ev.element.cq, a.cq);
  ASSERT_EQ(V.getAsyncEvent(a.ctx, &ev), 0);
  EXPECT_EQ(ev.event_type, IBV_EVENT_QP_FATAL);
  EXPECT_EQ(ev.element.qp, a.qp);
  ibv_wc wc;
  EXPECT_LT(V.pollCq(a.cq, 1, &wc), 0);
  EXPECT_EQ(a.qp->state, IBV_QPS_ERR);
}

TEST_F(IbDouble, InlineLimit) {
  EndpointOptions o;
  o.inlineBytes = 32;
  openPair(o);
  connectPair(a, b);
  std::vector<char> data(64, 'x');
  ibv_sge sge{reinterpret_cast<uint64_t>(data.data()), 33, 0};  // inline: no lkey needed
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_INLINE;
  wr.wr.rdma.remote_addr = describe(b).addr;
  wr.wr.rdma.rkey = b.mr->rkey;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(V.postSend(a.qp, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
  sge.length = 32;
  ASSERT_EQ(V.postSend(a.qp, &wr, &bad), 0);
  std::fill(data.begin(), data.end(), 'y');  // inline data was copied at post time
  auto wc = pollWc(a.cq);
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::string(b.mem.data(), 32), std::string(32, 'x'));
  // Asking for more than the device allows fails at create.
  ibv_qp_init_attr init{};
  init.send_cq = a.cq;
  init.recv_cq = a.cq;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = 1;
  init.cap.max_inline_data = 221;
  errno = 0;
  EXPECT_EQ(V.createQp(a.pd, &init), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(IbDouble, CompletionChannelFdBecomesReadable) {
  EndpointOptions o;
  o.channel = true;
  openPair({}, o);
  connectPair(a, b);
  ASSERT_EQ(V.reqNotifyCq(b.cq, 0), 0);
  pollfd pfd{b.channel->fd, POLLIN, 0};
  EXPECT_EQ(poll(&pfd, 1, 0), 0);
  ASSERT_EQ(postRecv(b, 1), 0);
  ASSERT_EQ(postWrite(a, 0, 8, describe(b).addr, b.mr->rkey, 1, 3u), 0);
  ASSERT_EQ(poll(&pfd, 1, 5000), 1);
  ibv_cq* cq = nullptr;
  void* cqContext = nullptr;
  ASSERT_EQ(V.getCqEvent(b.channel, &cq, &cqContext), 0);
  EXPECT_EQ(cq, b.cq);
  EXPECT_EQ(V.destroyCq(b.cq), EBUSY);  // QP attached and the event not acknowledged
  V.ackCqEvents(b.cq, 1);
  auto wc = pollWc(b.cq);
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  // Not armed: no event for the next completion.
  ASSERT_EQ(postRecv(b, 2), 0);
  ASSERT_EQ(postWrite(a, 0, 8, describe(b).addr, b.mr->rkey, 2, 4u), 0);
  ASSERT_TRUE(pollWc(b.cq));
  EXPECT_EQ(poll(&pfd, 1, 20), 0);
}

TEST_F(IbDouble, SolicitedOnlyNotification) {
  EndpointOptions o;
  o.channel = true;
  openPair({}, o);
  connectPair(a, b);
  ASSERT_EQ(V.reqNotifyCq(b.cq, 1), 0);
  pollfd pfd{b.channel->fd, POLLIN, 0};
  ASSERT_EQ(postRecv(b, 1), 0);
  ASSERT_EQ(postRecv(b, 2), 0);
  ASSERT_EQ(postWrite(a, 0, 8, describe(b).addr, b.mr->rkey, 1, 1u), 0);
  ASSERT_TRUE(pollWc(b.cq));
  EXPECT_EQ(poll(&pfd, 1, 20), 0);  // not solicited: no event
  ASSERT_EQ(postWrite(a, 0, 8, describe(b).addr, b.mr->rkey, 2, 2u, IBV_SEND_SOLICITED), 0);
  ASSERT_EQ(poll(&pfd, 1, 5000), 1);
  ibv_cq* cq = nullptr;
  void* cqContext = nullptr;
  ASSERT_EQ(V.getCqEvent(b.channel, &cq, &cqContext), 0);
  V.ackCqEvents(cq, 1);
  ASSERT_TRUE(pollWc(b.cq));
}

// Remote bytes are untrusted: garbage on a device's socket closes that connection only.
TEST_F(IbDouble, GarbageOnTheWireIsRefused) {
  openPair();
  connectPair(a, b);
  char hex[33];
  for (int i = 0; i < 16; ++i) std::snprintf(hex + 2 * i, 3, "%02x", b.gid.raw[i]);
  const std::string name = std::string("coll-verbsdouble/gid/") + hex;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  for (int round = 0; round < 3; ++round) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), len), 0);
    std::vector<uint32_t> junk(1024);
    for (size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<uint32_t>(i * 2654435761u + round);
    if (round == 1) junk[0] = 0x31424456;  // the right magic, then nonsense
    ASSERT_GT(write(fd, junk.data(), junk.size() * 4), 0);
    char c;
    pollfd pfd{fd, POLLIN, 0};
    ASSERT_EQ(poll(&pfd, 1, 5000), 1);
    EXPECT_LE(read(fd, &c, 1), 0);  // closed by the double
    close(fd);
  }
  ASSERT_EQ(postWrite(a, 0, 8, describe(b).addr, b.mr->rkey, 1), 0);
  auto wc = pollWc(a.cq);
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->status, IBV_WC_SUCCESS);
}

// Two QPs share the wire between two devices; one fails in the middle of a large write: the rest
// of that write is abandoned, and the other QP's traffic goes on.
TEST_F(IbDouble, QpFailingMidMessageLeavesTheWireUsable) {
  EndpointOptions big;
  big.memBytes = 32 << 20;
  openPair(big, big);
  Endpoint a2 = openEndpoint(0), b2 = openEndpoint(1);
  connectPair(a, b);
  connectPair(a2, b2);
  ASSERT_EQ(postRecv(b, 1), 0);
  ASSERT_EQ(postWrite(a, 0, static_cast<uint32_t>(a.mem.size()), describe(b).addr, b.mr->rkey, 1, 1u), 0);
  ibv_qp_attr e{};
  e.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(V.modifyQp(a.qp, &e, IBV_QP_STATE), 0);
  auto wc = pollWc(a.cq);
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->status, IBV_WC_WR_FLUSH_ERR);
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(postRecv(b2, i), 0);
    std::memcpy(a2.mem.data(), &i, sizeof i);
    ASSERT_EQ(postWrite(a2, 0, 4, describe(b2).addr + 4 * i, b2.mr->rkey, i, i), 0);
    wc = pollWc(a2.cq);
    ASSERT_TRUE(wc);
    ASSERT_EQ(wc->status, IBV_WC_SUCCESS);
    wc = pollWc(b2.cq);
    ASSERT_TRUE(wc);
    ASSERT_EQ(ntohl(wc->imm_data), static_cast<uint32_t>(i));
    int v;
    std::memcpy(&v, b2.mem.data() + 4 * i, sizeof v);
    ASSERT_EQ(v, i);
  }
  // b saw either the whole write or nothing of its completion.
  ibv_wc bwc;
  const int n = V.pollCq(b.cq, 1, &bwc);
  ASSERT_GE(n, 0);
  if (n == 1) {
    EXPECT_EQ(bwc.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(a.mem == b.mem);
  }
  a2.close();
  b2.close();
}

TEST_F(IbDouble, ManyWritesArriveInOrder) {
  EndpointOptions o;
  o.sendWr = 256;
  o.recvWr = 256;
  o.cqDepth = 1024;
  o.memBytes = 16 << 20;
  openPair(o, o);
  connectPair(a, b);
  // Write i carries i, into slot i % 1024, with i as immediate: the receives complete in posting
  // order and each finds its data in place (fewer receives than slots are ever posted, so a slot
  // is not written again before its receive is polled).
  const int kWrites = 2000;
  int posted = 0, done = 0, received = 0;
  uint32_t expectImm = 0;
  for (int i = 0; i < 256; ++i) ASSERT_EQ(postRecv(b, i), 0);
  while (received < kWrites) {
    while (posted < kWrites && posted - done < 200) {
      std::memcpy(a.mem.data() + 64 * (posted % 1024), &posted, sizeof posted);
      ASSERT_EQ(
          postWrite(a, 64 * (posted % 1024), 4, describe(b).addr + 4 * (posted % 1024), b.mr->rkey, posted, posted), 0);
      ++posted;
    }
    ibv_wc wc[32];
    int n = V.pollCq(a.cq, 32, wc);
    ASSERT_GE(n, 0);
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(wc[i].status, IBV_WC_SUCCESS);
      ASSERT_EQ(wc[i].wr_id, static_cast<uint64_t>(done));
      ++done;
    }
    n = V.pollCq(b.cq, 32, wc);
    ASSERT_GE(n, 0);
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(wc[i].status, IBV_WC_SUCCESS);
      ASSERT_EQ(ntohl(wc[i].imm_data), expectImm);
      int value;
      std::memcpy(&value, b.mem.data() + 4 * (expectImm % 1024), sizeof value);
      ASSERT_EQ(value, static_cast<int>(expectImm));  // the data landed before its completion
      ++expectImm;
      ++received;
      ASSERT_EQ(postRecv(b, received), 0);
    }
  }
  // One large write, several segments, exact bytes.
  for (size_t i = 0; i < a.mem.size(); ++i) a.mem[i] = static_cast<char>(i * 7 + 3);
  ASSERT_EQ(postWrite(a, 0, static_cast<uint32_t>(a.mem.size()), describe(b).addr, b.mr->rkey, kWrites, 1u), 0);
  for (; done <= kWrites; ++done) {
    auto wc = pollWc(a.cq, 20000);
    ASSERT_TRUE(wc);
    ASSERT_EQ(wc->status, IBV_WC_SUCCESS);
    ASSERT_EQ(wc->wr_id, static_cast<uint64_t>(done));
  }
  size_t firstDiff = 0;
  while (firstDiff < a.mem.size() && a.mem[firstDiff] == b.mem[firstDiff]) ++firstDiff;
  EXPECT_EQ(firstDiff, a.mem.size());
}

TEST_F(IbDouble, MismatchedPsnOrQpnFailsAfterRetries) {
  openPair();
  Timing t;
  ASSERT_EQ(toRtr(a, describe(b), t), 0);
  Timing wrong = mirrored(t);
  wrong.rqPsn -= 1;  // b expects a PSN a never sends (a higher one would be taken for a duplicate)
  ASSERT_EQ(toRtr(b, describe(a), wrong), 0);
  ASSERT_EQ(toRts(a, t), 0);
  ASSERT_EQ(toRts(b, mirrored(t)), 0);
  const auto start = Clock::now();
  ASSERT_EQ(postWrite(a, 0, 8, describe(b).addr, b.mr->rkey, 1), 0);
  auto wc = pollWc(a.cq);
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
  a.close();
  b.close();
  // A destination QPN nobody has.
  openPair();
  Remote r = describe(b);
  r.qpn ^= 0x55;
  ASSERT_EQ(toRtr(a, r, t), 0);
  ASSERT_EQ(toRts(a, t), 0);
  ASSERT_EQ(postWrite(a, 0, 8, r.addr, r.rkey, 1), 0);
  wc = pollWc(a.cq);
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->status, IBV_WC_RETRY_EXC_ERR);
}

TEST_F(IbDouble, InjectedFaults) {
  openPair();
  connectPair(a, b);
  injectVerbsFault(VerbsFault::FailNextSend);
  ASSERT_EQ(postWrite(a, 0, 8, describe(b).addr, b.mr->rkey, 1), 0);
  ASSERT_EQ(postWrite(a, 0, 8, describe(b).addr, b.mr->rkey, 2), 0);
  auto wc = pollWc(a.cq);
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->wr_id, 1u);
  EXPECT_EQ(wc->status, IBV_WC_RETRY_EXC_ERR);
  wc = pollWc(a.cq);
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->status, IBV_WC_WR_FLUSH_ERR);
  a.close();
  b.close();

  openPair();
  connectPair(a, b);
  injectVerbsFault(VerbsFault::RemoteAccessError);
  ASSERT_EQ(postWrite(a, 0, 8, describe(b).addr, b.mr->rkey, 1), 0);
  wc = pollWc(a.cq);
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->status, IBV_WC_REM_ACCESS_ERR);
  a.close();
  b.close();

  openPair();
  connectPair(a, b);
  ASSERT_EQ(postRecv(a, 5), 0);
  injectVerbsFault(VerbsFault::PortDown);
  ibv_async_event ev{};
  ASSERT_EQ(V.getAsyncEvent(a.ctx, &ev), 0);
  EXPECT_EQ(ev.event_type, IBV_EVENT_PORT_ERR);
  EXPECT_EQ(ev.element.port_num, 1);
  ibv_port_attr port{};
  ASSERT_EQ(V.queryPort(a.ctx, 1, &port), 0);
  EXPECT_EQ(port.state, IBV_PORT_DOWN);
  wc = pollWc(a.cq);
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->status, IBV_WC_WR_FLUSH_ERR);
  injectVerbsFault(VerbsFault::None);
  ASSERT_EQ(V.getAsyncEvent(a.ctx, &ev), 0);
  EXPECT_EQ(ev.event_type, IBV_EVENT_PORT_ACTIVE);
}

// Child half of the cross-process tests: a target that posts receives and checks what arrives.
struct Pipe {
  int fd[2];
  Pipe() { EXPECT_EQ(pipe(fd), 0); }
  ~Pipe() {
    close(fd[0]);
    close(fd[1]);
  }
};

template <typename T>
void sendStruct(int fd, const T& v) {
  ASSERT_EQ(write(fd, &v, sizeof v), static_cast<ssize_t>(sizeof v));
}
template <typename T>
bool recvStruct(int fd, T* v) {
  return read(fd, v, sizeof *v) == static_cast<ssize_t>(sizeof *v);
}

TEST_F(IbDouble, TwoProcessesAndAKilledPeer) {
  // The parent's device is open across fork: the child must get its own HCA, and the parent's
  // sockets must not stay open in the child.
  a = openEndpoint(0);
  Pipe toChild, toParent;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Ours is device 0 of this process: a different emulated HCA from the parent's.
    Endpoint e = openEndpoint(0);
    Remote mine = describe(e);
    Remote peer;
    if (write(toParent.fd[1], &mine, sizeof mine) != sizeof mine || !recvStruct(toChild.fd[0], &peer)) _exit(2);
    Timing t;
    if (toRtr(e, peer, mirrored(t)) || toRts(e, mirrored(t))) _exit(3);
    for (int i = 0; i < 8; ++i)
      if (postRecv(e, i)) _exit(4);
    const char ready = 'r';
    if (write(toParent.fd[1], &ready, 1) != 1) _exit(5);
    for (int i = 0; i < 8; ++i) {
      auto wc = pollWc(e.cq, 10000);
      if (!wc || wc->status != IBV_WC_SUCCESS || ntohl(wc->imm_data) != static_cast<uint32_t>(i)) _exit(6);
      uint32_t v;
      std::memcpy(&v, e.mem.data() + 4 * i, 4);
      if (v != 1000u + i) _exit(7);
    }
    if (write(toParent.fd[1], &ready, 1) != 1) _exit(8);
    pause();  // until killed
    _exit(0);
  }
  Remote peer;
  ASSERT_TRUE(recvStruct(toParent.fd[0], &peer));
  sendStruct(toChild.fd[1], describe(a));
  Timing t;
  ASSERT_EQ(toRtr(a, peer, t), 0);
  ASSERT_EQ(toRts(a, t), 0);
  char ready;
  ASSERT_EQ(read(toParent.fd[0], &ready, 1), 1);
  for (uint32_t i = 0; i < 8; ++i) {
    const uint32_t v = 1000 + i;
    std::memcpy(a.mem.data() + 4 * i, &v, 4);
    ASSERT_EQ(postWrite(a, 4 * i, 4, peer.addr + 4 * i, peer.rkey, i, i), 0);
  }
  auto done = pollN(a.cq, 8);
  ASSERT_EQ(done.size(), 8u);
  for (auto& wc : done) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_EQ(read(toParent.fd[0], &ready, 1), 1);  // the child verified the data
  kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exit code " << WEXITSTATUS(status);
  // The peer is gone: retry exceeded within (retry_cnt + 1) ACK timeouts, never a hang.
  const auto start = Clock::now();
  ASSERT_EQ(postWrite(a, 0, 4, peer.addr, peer.rkey, 50), 0);
  auto wc = pollWc(a.cq, 5000);
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
}

TEST_F(IbDouble, CutWireLooksLikeADeadPeer) {
  openPair();
  connectPair(a, b);
  ASSERT_EQ(postWrite(a, 0, 8, describe(b).addr, b.mr->rkey, 1), 0);
  ASSERT_TRUE(pollWc(a.cq));
  injectVerbsFault(VerbsFault::CutWire);
  ASSERT_EQ(postWrite(a, 0, 8, describe(b).addr, b.mr->rkey, 2), 0);
  auto wc = pollWc(a.cq);
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->status, IBV_WC_RETRY_EXC_ERR);
}

TEST_F(IbDouble, ThreadsShareOneDevice) {
  // Two contexts on the same emulated HCA (ranks as threads of one process) talk to each other.
  EndpointOptions o;
  o.recvWr = 128;
  openPair();
  b.close();
  b = openEndpoint(0, o);
  connectPair(a, b);
  std::thread t([&] {
    for (int i = 0; i < 100; ++i) ASSERT_EQ(postRecv(b, i), 0);
    for (int i = 0; i < 100; ++i) {
      auto wc = pollWc(b.cq);
      ASSERT_TRUE(wc);
      EXPECT_EQ(ntohl(wc->imm_data), static_cast<uint32_t>(i));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(postWrite(a, 0, 8, describe(b).addr, b.mr->rkey, i, i), 0);
    auto wc = pollWc(a.cq);
    ASSERT_TRUE(wc);
    EXPECT_EQ(wc->status, IBV_WC_SUCCESS);
  }
  t.join();
}

}  // namespace
}  // namespace coll::testing
