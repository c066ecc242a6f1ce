// The verbs test double: emulated HCAs (one per process and device index) implementing the
// VerbsApi table with reliable-connected semantics between processes over abstract Unix sockets.
#include "tests/ib_double/verbs_double.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "src/base/log.h"

namespace coll::testing {
namespace {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;
using std::chrono::microseconds;

constexpr uint32_t kFrameMagic = 0x31424456;  // "VDB1"
constexpr uint64_t kSegmentBytes = 256 * 1024;
constexpr uint64_t kMaxMessageBytes = 1ull << 31;
constexpr int kMaxSge = 16;
constexpr int kMaxDevices = 8;
constexpr int kGidTableLen = 8;
constexpr uint32_t kPsnMask = 0xffffff;
constexpr uint8_t kMaxRdAtomic = 16;
constexpr size_t kRxBufferBytes = 64 * 1024;
constexpr size_t kDirectReadMin = 16 * 1024;
constexpr size_t kMaxWriteBytes = 4u << 20;
constexpr int kMaxIov = 32;
constexpr uint64_t kWakeId = 1;
constexpr uint64_t kListenId0 = 2;  // kListenId0 + i: listening socket i
constexpr uint64_t kFirstConnId = 16;
constexpr const char* kNamePrefix = "coll-verbsdouble/";

enum FrameType : uint8_t { kHello = 1, kRequest, kSegment, kAck, kNak, kDrop };
enum FrameFlag : uint8_t { kFlagSolicited = 1, kFlagForceAccessError = 2, kFlagAbort = 4 };
enum NakCode : uint8_t { kNakRnr = 1, kNakRemoteAccess, kNakInvalidRequest, kNakRemoteOp };

// One unit on a wire. A request is followed by its payload as segments (so a requester whose QP
// fails mid-message can abort it cleanly); responses answer a request's PSN.
struct Frame {
  uint32_t magic;
  uint8_t type;
  uint8_t opcode;  // request: ibv_wr_opcode
  uint8_t flags;
  uint8_t code;  // request: the requester's path MTU (ibv_mtu); NAK: NakCode
  uint32_t dstQpn;
  uint32_t srcQpn;
  uint32_t psn;  // request: first PSN; ACK: next expected PSN; NAK/drop: the request's PSN
  uint32_t npackets;
  uint32_t rkey;    // hello: the sender's LID
  uint32_t imm;     // request: immediate (network order, as posted); RNR NAK: delay in microseconds
  uint64_t raddr;   // hello: the sender's GUID
  uint64_t length;  // request: message bytes; segment: payload bytes; hello: the sender's IPv4
};
static_assert(sizeof(Frame) == 48, "frame layout");

uint32_t psnAdd(uint32_t a, uint32_t n) { return (a + n) & kPsnMask; }
// a - b on the 24-bit PSN circle, in [-2^23, 2^23).
int32_t psnDiff(uint32_t a, uint32_t b) {
  int32_t d = static_cast<int32_t>((a - b) & kPsnMask);
  return d >= 0x800000 ? d - 0x1000000 : d;
}
uint64_t mtuBytes(int mtu) { return 128ull << std::clamp(mtu, 1, 5); }
uint32_t packetsFor(uint64_t len, int mtu) {
  const uint64_t m = mtuBytes(mtu);
  return static_cast<uint32_t>(std::max<uint64_t>(1, (len + m - 1) / m));
}

// Emulated local ACK timeout: 1/64 of 4.096 us * 2^timeout, kept within 1..250 ms, so that a dead
// peer fails in (retry_cnt + 1) * that: about 0.5 s with NCCL's defaults (timeout 20, retry 7).
microseconds ackTimeout(uint8_t timeout) {
  double us = 4.096 * std::ldexp(1.0, timeout) / 64.0;
  us = std::clamp(us, 1000.0, 250000.0);
  return microseconds(static_cast<int64_t>(us));
}
// The IB spec's RNR NAK timer table (min_rnr_timer), capped at 50 ms for tests.
microseconds rnrDelay(uint8_t code) {
  static const uint32_t kUs[32] = {655360, 10,    20,    30,    40,    60,     80,     120,    160,    240,   320,
                                   480,    640,   960,   1280,  1920,  2560,   3840,   5120,   7680,   10240, 15360,
                                   20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520};
  return microseconds(std::min<uint32_t>(kUs[code & 31], 50000));
}

struct Hca;
struct Context;
struct Pd;
struct Mr;
struct Cq;
struct Channel;
struct Qp;
struct Conn;

// The ibv_* structs callers see, each followed by a pointer back to the emulation's object.
struct CtxBox {
  ibv_context ctx;
  Context* impl;
};
struct PdBox {
  ibv_pd pd;
  Pd* impl;
};
struct MrBox {
  ibv_mr mr;
  Mr* impl;
};
struct CqBox {
  ibv_cq cq;
  Cq* impl;
};
struct ChannelBox {
  ibv_comp_channel channel;
  Channel* impl;
};
struct QpBox {
  ibv_qp qp;
  Qp* impl;
};

struct Pd {
  Context* ctx = nullptr;
  PdBox box{};
  int users = 0;  // MRs and QPs
};

struct Mr {
  Pd* pd = nullptr;
  MrBox box{};
  char* host = nullptr;  // where iova maps in this process
  uint64_t iova = 0;
  uint64_t length = 0;
  int access = 0;
  void* mapping = nullptr;  // dmabuf: our mmap of the fd
  size_t mappingBytes = 0;
};

struct Channel {
  Context* ctx = nullptr;
  ChannelBox box{};
  int pipe[2] = {-1, -1};
  std::deque<Cq*> events;
  int cqs = 0;
};

struct Cqe {
  ibv_wc wc;
  uint32_t sqSlots;  // send-queue slots this completion frees when polled
  uint32_t rqSlots;
};

struct Cq {
  Context* ctx = nullptr;
  CqBox box{};
  Channel* channel = nullptr;
  int capacity = 0;
  std::deque<Cqe> entries;
  bool armed = false;
  bool solicitedOnly = false;
  bool overflowed = false;
  bool destroyed = false;
  unsigned eventsRaised = 0;
  unsigned eventsAcked = 0;
  int qps = 0;
};

struct SendWr {
  uint64_t seq = 0;
  uint64_t wrId = 0;
  ibv_wr_opcode opcode = IBV_WR_SEND;
  bool signaled = false;
  bool solicited = false;
  bool forceAccessError = false;
  bool sent = false;
  int localError = -1;  // ibv_wc_status to report when this request reaches the head, or -1
  uint32_t imm = 0;
  uint32_t rkey = 0;
  uint64_t raddr = 0;
  uint64_t length = 0;
  uint32_t psn = 0;
  uint32_t npackets = 1;
  bool isInline = false;
  std::vector<ibv_sge> sge;
  std::vector<char> inlineData;
};

struct RecvWr {
  uint64_t wrId = 0;
  std::vector<ibv_sge> sge;
  uint64_t capacity = 0;
  bool badLkey = false;
};

struct Qp {
  Context* ctx = nullptr;
  QpBox box{};
  Pd* pd = nullptr;
  Cq* sendCq = nullptr;
  Cq* recvCq = nullptr;
  bool destroyed = false;
  ibv_qp_cap cap{};
  bool sigAll = false;
  ibv_qp_state state = IBV_QPS_RESET;
  uint32_t qpn = 0;
  // INIT
  int access = 0;
  // RTR
  Conn* out = nullptr;  // the wire to the remote device
  bool remoteGlobal = false;
  ibv_gid remoteGid{};
  uint16_t remoteLid = 0;
  uint32_t destQpn = 0;
  int mtu = IBV_MTU_1024;
  uint32_t epsn = 0;
  uint8_t minRnrTimer = 0;
  bool nakOutstanding = false;  // responder: out-of-sequence requests are dropped quietly
  // RTS
  uint8_t timeout = 14;
  uint8_t retryCnt = 7;
  uint8_t rnrRetry = 7;
  uint32_t sqPsn = 0;
  // queues
  std::deque<SendWr> sq;
  size_t nextTx = 0;  // index in sq of the next request to transmit
  uint64_t nextSeq = 1;
  uint32_t sqUsed = 0;
  uint32_t unsignaledDone = 0;
  std::deque<RecvWr> rq;
  uint32_t rqUsed = 0;
  // requester retries
  int retries = 0;
  int rnrRetries = 0;
  bool retryPending = false;
  bool retryIsRnr = false;
  TimePoint retryAt{};
};

struct Conn {
  uint64_t id = 0;
  int fd = -1;
  bool outgoing = false;
  bool closing = false;
  std::string name;  // outgoing: the abstract socket name of the remote address
  std::vector<Qp*> users;
  size_t rr = 0;
  bool wantOut = false;
  // incoming: who is on the other end
  bool helloSeen = false;
  uint64_t peerGuid = 0;
  uint32_t peerIpv4 = 0;
  uint16_t peerLid = 0;
  // transmit
  std::string ctrl;
  size_t ctrlOff = 0;
  bool txActive = false;
  uint32_t txQpn = 0;
  uint64_t txSeq = 0;
  bool txInline = false;
  std::vector<ibv_sge> txSge;
  std::vector<char> txInlineData;
  uint64_t txLen = 0, txOff = 0, txSegLeft = 0;
  // receive
  std::vector<char> buf;
  size_t beg = 0, end = 0;
  uint64_t rxSegLeft = 0;
  bool rxActive = false;
  bool rxDiscard = false;
  bool rxFailed = false;
  uint32_t rxQpn = 0, rxSrcQpn = 0, rxPsn = 0, rxNpackets = 0, rxRkey = 0, rxImm = 0;
  uint8_t rxOpcode = 0;
  bool rxSolicited = false;
  uint64_t rxRaddr = 0, rxLen = 0, rxGot = 0;
  std::vector<char> rxStaging;
  bool rxHasRecv = false;
  RecvWr rxRecv;
};

struct Context {
  Hca* hca = nullptr;
  CtxBox box{};
  int asyncPipe[2] = {-1, -1};
  std::deque<ibv_async_event> asyncEvents;
  std::vector<std::unique_ptr<Pd>> pds;
  std::unordered_map<Mr*, std::unique_ptr<Mr>> mrs;
  std::vector<std::unique_ptr<Channel>> channels;
  std::vector<std::unique_ptr<Cq>> cqs;  // destroyed ones stay until close (events may name them)
  std::vector<std::unique_ptr<Qp>> qps;
};

struct Hca {
  int index = 0;
  pid_t pid = 0;
  std::string name;
  uint64_t guid = 0;  // host order
  uint32_t ipv4 = 0;  // host order, 10.x.y.z
  uint16_t lid = 0;
  VerbsDoubleOptions options;
  bool portUp = true;
  bool wireCut = false;
  std::mutex mu;
  std::vector<int> listenFds;
  int epfd = -1;
  int wakeFd = -1;
  std::thread thread;
  bool stopping = false;
  std::vector<Context*> contexts;
  std::map<uint32_t, Qp*> qps;
  std::unordered_map<uint32_t, Mr*> byLkey, byRkey;
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns;
  std::map<std::string, Conn*> outConns;
  uint64_t nextConnId = kFirstConnId;
  uint32_t nextQpn = 0;
  uint32_t nextKey = 0;
};

struct Registry {
  std::mutex mu;
  VerbsDoubleOptions options;
  ibv_device devices[kMaxDevices];
  ibv_device* list[kMaxDevices + 1];
  Hca* hcas[kMaxDevices] = {};
  bool atforkInstalled = false;
};
// Never destroyed: a test may exit with devices open, and their threads must not see it die.
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

std::atomic<bool> gFailNextSend{false};
std::atomic<bool> gRemoteAccessNext{false};
std::atomic<bool> gPortDown{false};
std::atomic<bool> gWireCut{false};

Context* ctxOf(ibv_context* c) { return c ? reinterpret_cast<CtxBox*>(c)->impl : nullptr; }
Pd* pdOf(ibv_pd* p) { return p ? reinterpret_cast<PdBox*>(p)->impl : nullptr; }
Mr* mrOf(ibv_mr* m) { return m ? reinterpret_cast<MrBox*>(m)->impl : nullptr; }
Cq* cqOf(ibv_cq* c) { return c ? reinterpret_cast<CqBox*>(c)->impl : nullptr; }
Channel* channelOf(ibv_comp_channel* c) { return c ? reinterpret_cast<ChannelBox*>(c)->impl : nullptr; }
Qp* qpOf(ibv_qp* q) { return q ? reinterpret_cast<QpBox*>(q)->impl : nullptr; }

// ---- addresses ------------------------------------------------------------------------------

uint64_t defaultGuid(int index, int salt) {
  return 0x02c0110000000000ull + (static_cast<uint64_t>(salt) << 40) +
         (static_cast<uint64_t>(static_cast<uint32_t>(getpid())) << 8) + static_cast<uint64_t>(index);
}
ibv_gid linkLocalGid(uint64_t guid) {
  ibv_gid g{};
  g.raw[0] = 0xfe;
  g.raw[1] = 0x80;
  for (int i = 0; i < 8; ++i) g.raw[8 + i] = static_cast<uint8_t>(guid >> (56 - 8 * i));
  return g;
}
ibv_gid ipv4MappedGid(uint32_t ipv4) {
  ibv_gid g{};
  g.raw[10] = 0xff;
  g.raw[11] = 0xff;
  for (int i = 0; i < 4; ++i) g.raw[12 + i] = static_cast<uint8_t>(ipv4 >> (24 - 8 * i));
  return g;
}
bool sameGid(const ibv_gid& a, const ibv_gid& b) { return std::memcmp(a.raw, b.raw, 16) == 0; }
std::string gidName(const ibv_gid& g) {
  char hex[33];
  for (int i = 0; i < 16; ++i) std::snprintf(hex + 2 * i, 3, "%02x", g.raw[i]);
  return std::string(kNamePrefix) + "gid/" + hex;
}
std::string lidName(uint16_t lid) {
  char hex[8];
  std::snprintf(hex, sizeof hex, "%04x", lid);
  return std::string(kNamePrefix) + "lid/" + hex;
}
socklen_t abstractAddress(const std::string& name, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  const size_t n = std::min(name.size(), sizeof(addr->sun_path) - 1);
  std::memcpy(addr->sun_path + 1, name.data(), n);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}
// A listening socket on `name`; -1 with errno EADDRINUSE when another device holds it.
int listenOn(const std::string& name) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un addr;
  const socklen_t len = abstractAddress(name, &addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd, 256) != 0) {
    const int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}
uint32_t mix32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

// ---- events and completions (all under Hca::mu) ----------------------------------------------

void writeByte(int fd) {
  const char b = 1;
  ssize_t r;
  do r = write(fd, &b, 1);
  while (r < 0 && errno == EINTR);
}

void wake(Hca* h) {
  const uint64_t one = 1;
  ssize_t r;
  do r = write(h->wakeFd, &one, sizeof one);
  while (r < 0 && errno == EINTR);
}

void pushAsync(Context* c, const ibv_async_event& ev) {
  c->asyncEvents.push_back(ev);
  writeByte(c->asyncPipe[1]);
}

void errorQp(Hca* h, Qp* qp);

void setState(Qp* qp, ibv_qp_state s) {
  qp->state = s;
  qp->box.qp.state = s;
}

void pushCqe(Hca* h, Cq* cq, const ibv_wc& wc, uint32_t sqSlots, uint32_t rqSlots, bool solicited) {
  if (!cq || cq->destroyed || cq->overflowed) return;
  if (static_cast<int>(cq->entries.size()) >= cq->capacity) {
    // A real CQ overruns its ring; the HCA reports it and the QPs feeding it are lost.
    cq->overflowed = true;
    cq->entries.clear();
    COLL_WARN(-1, "verbs double: CQ %p overflowed (depth %d): IBV_EVENT_CQ_ERR", static_cast<void*>(&cq->box.cq),
              cq->capacity);
    ibv_async_event ev{};
    ev.event_type = IBV_EVENT_CQ_ERR;
    ev.element.cq = &cq->box.cq;
    pushAsync(cq->ctx, ev);
    for (auto& entry : h->qps) {
      Qp* q = entry.second;
      if ((q->sendCq == cq || q->recvCq == cq) && q->state != IBV_QPS_ERR && q->state != IBV_QPS_RESET) {
        ibv_async_event qev{};
        qev.event_type = IBV_EVENT_QP_FATAL;
        qev.element.qp = &q->box.qp;
        pushAsync(q->ctx, qev);
        errorQp(h, q);
      }
    }
    return;
  }
  cq->entries.push_back(Cqe{wc, sqSlots, rqSlots});
  if (cq->armed && (!cq->solicitedOnly || solicited || wc.status != IBV_WC_SUCCESS)) {
    cq->armed = false;
    if (cq->channel) {
      cq->channel->events.push_back(cq);
      cq->eventsRaised++;
      writeByte(cq->channel->pipe[1]);
    }
  }
}

uint32_t takeSlots(Qp* qp) {
  const uint32_t n = 1 + qp->unsignaledDone;
  qp->unsignaledDone = 0;
  return n;
}

ibv_wc sendWc(Qp* qp, const SendWr& wr, ibv_wc_status status) {
  ibv_wc wc{};
  wc.wr_id = wr.wrId;
  wc.status = status;
  wc.opcode = (wr.opcode == IBV_WR_SEND || wr.opcode == IBV_WR_SEND_WITH_IMM) ? IBV_WC_SEND : IBV_WC_RDMA_WRITE;
  wc.byte_len = static_cast<uint32_t>(wr.length);
  wc.qp_num = qp->qpn;
  return wc;
}

ibv_wc recvWc(Qp* qp, uint64_t wrId, ibv_wc_status status) {
  ibv_wc wc{};
  wc.wr_id = wrId;
  wc.status = status;
  wc.opcode = IBV_WC_RECV;
  wc.qp_num = qp->qpn;
  return wc;
}

// The QP enters the error state: every outstanding work request completes with a flush error.
void errorQp(Hca* h, Qp* qp) {
  if (qp->state == IBV_QPS_ERR) return;
  setState(qp, IBV_QPS_ERR);
  qp->retryPending = false;
  std::deque<SendWr> sq;
  sq.swap(qp->sq);
  qp->nextTx = 0;
  std::deque<RecvWr> rq;
  rq.swap(qp->rq);
  for (const SendWr& wr : sq) pushCqe(h, qp->sendCq, sendWc(qp, wr, IBV_WC_WR_FLUSH_ERR), takeSlots(qp), 0, false);
  for (const RecvWr& r : rq) pushCqe(h, qp->recvCq, recvWc(qp, r.wrId, IBV_WC_WR_FLUSH_ERR), 0, 1, false);
}

// The head request fails with `status`; the rest are flushed.
void failFront(Hca* h, Qp* qp, ibv_wc_status status) {
  if (qp->sq.empty()) return;
  SendWr wr = std::move(qp->sq.front());
  qp->sq.pop_front();
  if (qp->nextTx > 0) qp->nextTx--;
  COLL_INFO(-1, "verbs double: QP 0x%x request wr_id %llu failed: %s", qp->qpn,
            static_cast<unsigned long long>(wr.wrId), ibv_wc_status_str(status));
  pushCqe(h, qp->sendCq, sendWc(qp, wr, status), takeSlots(qp), 0, false);
  errorQp(h, qp);
}

void checkFrontLocalError(Hca* h, Qp* qp) {
  if (qp->state == IBV_QPS_RTS && !qp->sq.empty() && qp->sq.front().localError >= 0)
    failFront(h, qp, static_cast<ibv_wc_status>(qp->sq.front().localError));
}

// Requests up to (not including) PSN `ack` are done: signaled ones complete.
void completeUpTo(Hca* h, Qp* qp, uint32_t ack) {
  bool progress = false;
  while (qp->state == IBV_QPS_RTS && !qp->sq.empty()) {
    SendWr& head = qp->sq.front();
    if (!head.sent || head.localError >= 0) break;
    if (psnDiff(ack, psnAdd(head.psn, head.npackets)) < 0) break;
    SendWr wr = std::move(head);
    qp->sq.pop_front();
    if (qp->nextTx > 0) qp->nextTx--;
    progress = true;
    if (wr.signaled) pushCqe(h, qp->sendCq, sendWc(qp, wr, IBV_WC_SUCCESS), takeSlots(qp), 0, false);
    else qp->unsignaledDone++;
  }
  if (progress) {
    qp->retries = 0;
    qp->rnrRetries = 0;
  }
  checkFrontLocalError(h, qp);
}

// A transmission attempt of the head request was lost (dropped by the responder, or the wire is
// dead): after the ACK timeout it is retransmitted, or fails once retry_cnt retries are spent.
void failureEvent(Hca* h, Qp* qp) {
  if (qp->state != IBV_QPS_RTS || qp->retryPending || qp->sq.empty()) return;
  qp->retryPending = true;
  qp->retryIsRnr = false;
  qp->retryAt = Clock::now() + ackTimeout(qp->timeout);
  wake(h);
}

void cleanCq(Cq* cq, uint32_t qpn) {
  if (!cq) return;
  auto& e = cq->entries;
  e.erase(std::remove_if(e.begin(), e.end(), [qpn](const Cqe& c) { return c.wc.qp_num == qpn; }), e.end());
}

// ---- memory ---------------------------------------------------------------------------------

// The MR behind a local SGE: live, same PD, the range inside it, writable when asked.
Mr* localMr(Hca* h, Pd* pd, const ibv_sge& sge, bool needWrite) {
  auto it = h->byLkey.find(sge.lkey);
  if (it == h->byLkey.end()) return nullptr;
  Mr* mr = it->second;
  if (mr->pd != pd) return nullptr;
  if (needWrite && !(mr->access & IBV_ACCESS_LOCAL_WRITE)) return nullptr;
  if (sge.addr < mr->iova || sge.length > mr->length || sge.addr - mr->iova > mr->length - sge.length) return nullptr;
  return mr;
}

char* hostAddress(Mr* mr, uint64_t iova) { return mr->host + (iova - mr->iova); }

// ---- wires ----------------------------------------------------------------------------------

void setWantOut(Hca* h, Conn* c, bool want) {
  if (c->wantOut == want || c->fd < 0) return;
  c->wantOut = want;
  epoll_event ev{};
  ev.events = want ? (EPOLLIN | EPOLLOUT) : EPOLLIN;
  ev.data.u64 = c->id;
  epoll_ctl(h->epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

void appendFrame(Conn* c, const Frame& f) { c->ctrl.append(reinterpret_cast<const char*>(&f), sizeof f); }

Frame makeFrame(uint8_t type) {
  Frame f{};
  f.magic = kFrameMagic;
  f.type = type;
  return f;
}

void closeConn(Hca* h, Conn* c);

// Sends pending control bytes; false when the socket is full (EPOLLOUT armed) or closed.
bool flushCtrl(Hca* h, Conn* c) {
  while (c->fd >= 0 && c->ctrlOff < c->ctrl.size()) {
    ssize_t n = send(c->fd, c->ctrl.data() + c->ctrlOff, c->ctrl.size() - c->ctrlOff, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        setWantOut(h, c, true);
        return false;
      }
      closeConn(h, c);
      return false;
    }
    c->ctrlOff += static_cast<size_t>(n);
  }
  if (c->fd < 0) return false;
  c->ctrl.clear();
  c->ctrlOff = 0;
  if (!c->outgoing) setWantOut(h, c, false);
  return true;
}

Conn* outConn(Hca* h, const std::string& name) {
  auto it = h->outConns.find(name);
  if (it != h->outConns.end()) return it->second;
  auto conn = std::make_unique<Conn>();
  conn->id = h->nextConnId++;
  conn->outgoing = true;
  conn->name = name;
  Conn* c = conn.get();
  h->conns[c->id] = std::move(conn);
  h->outConns[name] = c;
  return c;
}

bool connectOut(Hca* h, Conn* c) {
  if (h->wireCut) return false;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr;
  const socklen_t len = abstractAddress(c->name, &addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    COLL_TRACE(-1, "verbs double: %s: connect to %s failed: %s", h->name.c_str(), c->name.c_str(), strerror(errno));
    close(fd);
    return false;
  }
  c->fd = fd;
  c->wantOut = false;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = c->id;
  epoll_ctl(h->epfd, EPOLL_CTL_ADD, fd, &ev);
  c->buf.assign(kRxBufferBytes, 0);
  c->beg = c->end = 0;
  Frame hello = makeFrame(kHello);
  hello.raddr = h->guid;
  hello.length = h->options.infiniband ? 0 : h->ipv4;
  hello.rkey = h->lid;
  appendFrame(c, hello);
  return true;
}

void abortRequest(Hca* h, Conn* c);

void closeConn(Hca* h, Conn* c) {
  if (c->fd >= 0) {
    epoll_ctl(h->epfd, EPOLL_CTL_DEL, c->fd, nullptr);
    close(c->fd);
    c->fd = -1;
  }
  c->wantOut = false;
  c->ctrl.clear();
  c->ctrlOff = 0;
  c->txActive = false;
  c->txSegLeft = 0;
  c->rxSegLeft = 0;
  c->beg = c->end = 0;
  if (c->rxActive) abortRequest(h, c);
  if (c->outgoing) {
    // Whatever was in flight on this wire is lost: its requesters retry, then give up.
    for (Qp* qp : c->users)
      if (!qp->sq.empty()) failureEvent(h, qp);
  } else {
    c->closing = true;
  }
}

bool txStillValid(Hca* h, Conn* c) {
  auto it = h->qps.find(c->txQpn);
  if (it == h->qps.end()) return false;
  Qp* qp = it->second;
  if (qp->state != IBV_QPS_RTS || qp->sq.empty()) return false;
  const uint64_t first = qp->sq.front().seq;
  return c->txSeq >= first && c->txSeq - first < qp->sq.size();
}

void startSegment(Conn* c) {
  Frame seg = makeFrame(kSegment);
  seg.length = std::min(kSegmentBytes, c->txLen - c->txOff);
  appendFrame(c, seg);
  c->txSegLeft = seg.length;
}

Qp* pickQp(Hca* h, Conn* c) {
  if (!h->portUp) return nullptr;
  const size_t n = c->users.size();
  for (size_t k = 0; k < n; ++k) {
    Qp* qp = c->users[(c->rr + k) % n];
    if (qp->state != IBV_QPS_RTS || qp->retryPending || qp->nextTx >= qp->sq.size()) continue;
    if (qp->sq[qp->nextTx].localError >= 0) continue;
    c->rr = (c->rr + k + 1) % n;
    return qp;
  }
  return nullptr;
}

void startMessage(Conn* c, Qp* qp) {
  SendWr& wr = qp->sq[qp->nextTx++];
  wr.sent = true;
  c->txActive = true;
  c->txQpn = qp->qpn;
  c->txSeq = wr.seq;
  c->txInline = wr.isInline;
  c->txSge = wr.sge;
  c->txInlineData = wr.inlineData;
  c->txLen = wr.length;
  c->txOff = 0;
  c->txSegLeft = 0;
  Frame f = makeFrame(kRequest);
  f.opcode = static_cast<uint8_t>(wr.opcode);
  f.flags =
      static_cast<uint8_t>((wr.solicited ? kFlagSolicited : 0) | (wr.forceAccessError ? kFlagForceAccessError : 0));
  f.code = static_cast<uint8_t>(qp->mtu);
  f.dstQpn = qp->destQpn;
  f.srcQpn = qp->qpn;
  f.psn = wr.psn;
  f.npackets = wr.npackets;
  f.rkey = wr.rkey;
  f.imm = wr.imm;
  f.raddr = wr.raddr;
  f.length = wr.length;
  appendFrame(c, f);
  if (c->txLen > 0) startSegment(c);
}

const char* zeroBytes() {
  static const std::vector<char> zeros(64 * 1024, 0);
  return zeros.data();
}

// iovecs for the next `want` payload bytes at txOff. A local region deregistered meanwhile reads
// as zeros (the application broke the verbs contract; we must not touch freed memory).
int payloadIov(Hca* h, Conn* c, uint64_t want, iovec* iov, int maxIov) {
  int n = 0;
  if (c->txInline) {
    iov[n].iov_base = c->txInlineData.data() + c->txOff;
    iov[n].iov_len = want;
    return 1;
  }
  uint64_t skip = c->txOff;
  for (const ibv_sge& s : c->txSge) {
    if (want == 0 || n >= maxIov) break;
    if (skip >= s.length) {
      skip -= s.length;
      continue;
    }
    uint64_t take = std::min<uint64_t>(s.length - skip, want);
    auto it = h->byLkey.find(s.lkey);
    Mr* mr = it == h->byLkey.end() ? nullptr : it->second;
    const uint64_t addr = s.addr + skip;
    if (mr && addr >= mr->iova && addr - mr->iova + take <= mr->length) {
      iov[n].iov_base = hostAddress(mr, addr);
    } else {
      take = std::min<uint64_t>(take, 64 * 1024);
      iov[n].iov_base = const_cast<char*>(zeroBytes());
    }
    iov[n].iov_len = take;
    ++n;
    want -= take;
    skip = 0;
    if (take < s.length - (addr - s.addr)) break;  // zero-filled piece: continue on the next call
  }
  return n;
}

// Moves requests from the QPs that use this wire onto it until the socket is full.
void pumpOut(Hca* h, Conn* c) {
  for (;;) {
    if (!c->txActive) {
      if (c->fd >= 0 && c->ctrlOff < c->ctrl.size()) {
        if (!flushCtrl(h, c)) return;
        continue;
      }
      Qp* qp = pickQp(h, c);
      if (!qp) {
        setWantOut(h, c, false);
        return;
      }
      if (c->fd < 0 && !connectOut(h, c)) {
        for (Qp* q : c->users)
          if (!q->sq.empty()) failureEvent(h, q);
        return;
      }
      startMessage(c, qp);
    }
    iovec iov[kMaxIov];
    int n = 0;
    uint64_t total = 0;
    if (c->ctrlOff < c->ctrl.size()) {
      iov[n].iov_base = c->ctrl.data() + c->ctrlOff;
      iov[n].iov_len = c->ctrl.size() - c->ctrlOff;
      total += iov[n].iov_len;
      ++n;
    }
    if (c->txSegLeft > 0) {
      const int k = payloadIov(h, c, std::min<uint64_t>(c->txSegLeft, kMaxWriteBytes), iov + n, kMaxIov - n);
      for (int i = 0; i < k; ++i) total += iov[n + i].iov_len;
      n += k;
    }
    if (n > 0) {
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<size_t>(n);
      ssize_t w = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          setWantOut(h, c, true);
          return;
        }
        closeConn(h, c);
        return;
      }
      uint64_t left = static_cast<uint64_t>(w);
      const uint64_t fromCtrl = std::min<uint64_t>(left, c->ctrl.size() - c->ctrlOff);
      c->ctrlOff += fromCtrl;
      left -= fromCtrl;
      if (c->ctrlOff == c->ctrl.size()) {
        c->ctrl.clear();
        c->ctrlOff = 0;
      }
      c->txOff += left;
      c->txSegLeft -= left;
      if (static_cast<uint64_t>(w) < total) continue;  // partial: the next call says EAGAIN or goes on
    }
    if (c->ctrlOff < c->ctrl.size() || c->txSegLeft > 0) continue;
    if (c->txOff == c->txLen) {
      c->txActive = false;
    } else if (!txStillValid(h, c)) {
      appendFrame(c, [] {
        Frame f = makeFrame(kSegment);
        f.flags = kFlagAbort;
        return f;
      }());
      c->txActive = false;
    } else {
      startSegment(c);
    }
  }
}

void pumpQp(Hca* h, Qp* qp) {
  if (qp->out) pumpOut(h, qp->out);
}

// ---- responder ------------------------------------------------------------------------------

void respond(Conn* c, uint8_t type, const Frame& req, uint32_t psn, uint8_t code = 0, uint32_t imm = 0) {
  Frame f = makeFrame(type);
  f.dstQpn = req.srcQpn;
  f.srcQpn = req.dstQpn;
  f.psn = psn;
  f.code = code;
  f.imm = imm;
  appendFrame(c, f);
}

bool sourceMatches(Hca* h, Conn* c, Qp* qp, uint32_t srcQpn) {
  if (srcQpn != qp->destQpn) return false;
  if (qp->remoteGlobal) {
    if (sameGid(qp->remoteGid, linkLocalGid(c->peerGuid))) return true;
    return !h->options.infiniband && c->peerIpv4 != 0 && sameGid(qp->remoteGid, ipv4MappedGid(c->peerIpv4));
  }
  return c->peerLid != 0 && qp->remoteLid == c->peerLid;
}

void fatalNak(Hca* h, Conn* c, Qp* qp, const Frame& req, uint8_t code, ibv_event_type event) {
  respond(c, kNak, req, req.psn, code);
  ibv_async_event ev{};
  ev.event_type = event;
  ev.element.qp = &qp->box.qp;
  pushAsync(qp->ctx, ev);
  errorQp(h, qp);
}

void finishRequest(Hca* h, Conn* c);

void beginRequest(Hca* h, Conn* c, const Frame& f) {
  c->rxActive = true;
  c->rxDiscard = true;
  c->rxFailed = false;
  c->rxHasRecv = false;
  c->rxQpn = f.dstQpn;
  c->rxSrcQpn = f.srcQpn;
  c->rxPsn = f.psn;
  c->rxNpackets = f.npackets;
  c->rxRkey = f.rkey;
  c->rxImm = f.imm;
  c->rxOpcode = f.opcode;
  c->rxSolicited = (f.flags & kFlagSolicited) != 0;
  c->rxRaddr = f.raddr;
  c->rxLen = f.length;
  c->rxGot = 0;
  c->rxStaging.clear();
  auto done = [&] {
    if (c->rxLen == 0) finishRequest(h, c);
  };
  auto it = h->qps.find(f.dstQpn);
  Qp* qp = it == h->qps.end() ? nullptr : it->second;
  // What a real responder silently drops; the requester notices by its ACK timeout.
  if (!qp || (qp->state != IBV_QPS_RTR && qp->state != IBV_QPS_RTS) || !h->portUp || h->wireCut ||
      !sourceMatches(h, c, qp, f.srcQpn) || f.code < IBV_MTU_256 || f.code > IBV_MTU_4096 ||
      f.npackets != packetsFor(f.length, f.code) || (f.code > qp->mtu && f.length > mtuBytes(qp->mtu))) {
    respond(c, kDrop, f, f.psn);
    return done();
  }
  const int32_t d = psnDiff(f.psn, qp->epsn);
  if (d < 0) {  // a retransmission of a request already executed: acknowledge it again
    respond(c, kAck, f, qp->epsn);
    return done();
  }
  if (d > 0) {
    if (!qp->nakOutstanding) respond(c, kDrop, f, f.psn);
    return done();
  }
  const bool write = f.opcode == IBV_WR_RDMA_WRITE || f.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  const bool send = f.opcode == IBV_WR_SEND || f.opcode == IBV_WR_SEND_WITH_IMM;
  if (!write && !send) {
    fatalNak(h, c, qp, f, kNakInvalidRequest, IBV_EVENT_QP_REQ_ERR);
    return done();
  }
  const bool needsRecv = f.opcode != IBV_WR_RDMA_WRITE;
  if (needsRecv && qp->rq.empty()) {
    respond(c, kNak, f, f.psn, kNakRnr, static_cast<uint32_t>(rnrDelay(qp->minRnrTimer).count()));
    qp->nakOutstanding = true;
    return done();
  }
  if (write && (f.length > 0 || (f.flags & kFlagForceAccessError))) {
    auto mit = h->byRkey.find(f.rkey);
    Mr* mr = mit == h->byRkey.end() ? nullptr : mit->second;
    const bool ok = !(f.flags & kFlagForceAccessError) && (qp->access & IBV_ACCESS_REMOTE_WRITE) && mr &&
                    mr->pd == qp->pd && (mr->access & IBV_ACCESS_REMOTE_WRITE) && f.raddr >= mr->iova &&
                    f.length <= mr->length && f.raddr - mr->iova <= mr->length - f.length;
    if (!ok) {
      COLL_INFO(-1, "verbs double: %s QP 0x%x: remote access error (rkey 0x%x addr 0x%llx len %llu)", h->name.c_str(),
                qp->qpn, f.rkey, static_cast<unsigned long long>(f.raddr), static_cast<unsigned long long>(f.length));
      fatalNak(h, c, qp, f, kNakRemoteAccess, IBV_EVENT_QP_ACCESS_ERR);
      return done();
    }
  }
  if (send) {
    RecvWr r = qp->rq.front();
    if (r.badLkey || f.length > r.capacity) {
      qp->rq.pop_front();
      const bool prot = r.badLkey;
      ibv_wc wc = recvWc(qp, r.wrId, prot ? IBV_WC_LOC_PROT_ERR : IBV_WC_LOC_LEN_ERR);
      pushCqe(h, qp->recvCq, wc, 0, 1, false);
      fatalNak(h, c, qp, f, prot ? kNakRemoteOp : kNakInvalidRequest, IBV_EVENT_QP_REQ_ERR);
      return done();
    }
    qp->rq.pop_front();
    c->rxRecv = std::move(r);
    c->rxHasRecv = true;
    c->rxStaging.resize(f.length);
  }
  c->rxDiscard = false;
  done();
}

void abortRequest(Hca* h, Conn* c) {
  c->rxActive = false;
  if (!c->rxHasRecv) return;
  c->rxHasRecv = false;
  auto it = h->qps.find(c->rxQpn);
  if (it != h->qps.end() && (it->second->state == IBV_QPS_RTR || it->second->state == IBV_QPS_RTS))
    it->second->rq.push_front(std::move(c->rxRecv));
}

void finishRequest(Hca* h, Conn* c) {
  c->rxActive = false;
  if (c->rxDiscard) return;
  Frame req{};
  req.srcQpn = c->rxSrcQpn;
  req.dstQpn = c->rxQpn;
  req.psn = c->rxPsn;
  auto it = h->qps.find(c->rxQpn);
  Qp* qp = it == h->qps.end() ? nullptr : it->second;
  if (!qp || (qp->state != IBV_QPS_RTR && qp->state != IBV_QPS_RTS)) return;  // gone meanwhile: no ACK
  if (c->rxFailed) {
    c->rxHasRecv = false;
    fatalNak(h, c, qp, req, kNakRemoteAccess, IBV_EVENT_QP_ACCESS_ERR);
    return;
  }
  if (c->rxOpcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
    if (qp->rq.empty()) return;
    RecvWr r = std::move(qp->rq.front());
    qp->rq.pop_front();
    ibv_wc wc = recvWc(qp, r.wrId, IBV_WC_SUCCESS);
    wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
    wc.byte_len = static_cast<uint32_t>(c->rxLen);
    wc.imm_data = c->rxImm;
    wc.wc_flags = IBV_WC_WITH_IMM;
    wc.src_qp = c->rxSrcQpn;
    wc.slid = c->peerLid;
    pushCqe(h, qp->recvCq, wc, 0, 1, c->rxSolicited);
  } else if (c->rxOpcode == IBV_WR_SEND || c->rxOpcode == IBV_WR_SEND_WITH_IMM) {
    c->rxHasRecv = false;
    RecvWr r = std::move(c->rxRecv);
    uint64_t off = 0;
    bool ok = true;
    for (const ibv_sge& s : r.sge) {
      if (off >= c->rxLen) break;
      const uint64_t take = std::min<uint64_t>(s.length, c->rxLen - off);
      Mr* mr = localMr(h, qp->pd, s, true);
      if (!mr) {
        ok = false;
        break;
      }
      std::memcpy(hostAddress(mr, s.addr), c->rxStaging.data() + off, take);
      off += take;
    }
    if (!ok) {
      pushCqe(h, qp->recvCq, recvWc(qp, r.wrId, IBV_WC_LOC_PROT_ERR), 0, 1, false);
      fatalNak(h, c, qp, req, kNakRemoteOp, IBV_EVENT_QP_REQ_ERR);
      return;
    }
    ibv_wc wc = recvWc(qp, r.wrId, IBV_WC_SUCCESS);
    wc.byte_len = static_cast<uint32_t>(c->rxLen);
    wc.src_qp = c->rxSrcQpn;
    wc.slid = c->peerLid;
    if (c->rxOpcode == IBV_WR_SEND_WITH_IMM) {
      wc.imm_data = c->rxImm;
      wc.wc_flags = IBV_WC_WITH_IMM;
    }
    pushCqe(h, qp->recvCq, wc, 0, 1, c->rxSolicited);
  }
  if (qp->state == IBV_QPS_ERR) return;  // its CQ overflowed
  qp->epsn = psnAdd(qp->epsn, c->rxNpackets);
  qp->nakOutstanding = false;
  respond(c, kAck, req, qp->epsn);
}

// Where the next payload bytes of the current request go, for a direct read; nullptr when
// they go through the buffer (send staging, discards).
char* directDest(Hca* h, Conn* c) {
  if (c->rxDiscard || c->rxFailed) return nullptr;
  if (c->rxOpcode != IBV_WR_RDMA_WRITE && c->rxOpcode != IBV_WR_RDMA_WRITE_WITH_IMM) {
    return c->rxStaging.data() + c->rxGot;
  }
  auto it = h->byRkey.find(c->rxRkey);
  if (it == h->byRkey.end()) {
    c->rxFailed = true;  // deregistered mid-request
    return nullptr;
  }
  return hostAddress(it->second, c->rxRaddr + c->rxGot);
}

void payloadArrived(Hca* h, Conn* c, const char* src, uint64_t n) {
  char* dst = directDest(h, c);
  if (dst && src) std::memcpy(dst, src, n);
  c->rxGot += n;
  c->rxSegLeft -= n;
  if (c->rxSegLeft == 0 && c->rxGot == c->rxLen) finishRequest(h, c);
}

// ---- frames ---------------------------------------------------------------------------------

void handleResponse(Hca* h, Conn* c, const Frame& f) {
  auto it = h->qps.find(f.dstQpn);
  if (it == h->qps.end()) return;
  Qp* qp = it->second;
  if (qp->out != c || qp->state != IBV_QPS_RTS || f.srcQpn != qp->destQpn) return;
  if (f.type == kAck) {
    completeUpTo(h, qp, f.psn);
    return;
  }
  if (qp->sq.empty() || !qp->sq.front().sent || qp->sq.front().psn != f.psn) return;  // stale
  if (f.type == kDrop) {
    failureEvent(h, qp);
    return;
  }
  switch (f.code) {
    case kNakRnr:
      if (qp->rnrRetry != 7 && qp->rnrRetries >= qp->rnrRetry) {
        failFront(h, qp, IBV_WC_RNR_RETRY_EXC_ERR);
      } else if (!qp->retryPending) {
        qp->rnrRetries++;
        qp->retryPending = true;
        qp->retryIsRnr = true;
        qp->retryAt = Clock::now() + microseconds(std::min<uint32_t>(f.imm, 50000));
      }
      break;
    case kNakRemoteAccess: failFront(h, qp, IBV_WC_REM_ACCESS_ERR); break;
    case kNakInvalidRequest: failFront(h, qp, IBV_WC_REM_INV_REQ_ERR); break;
    default: failFront(h, qp, IBV_WC_REM_OP_ERR); break;
  }
}

// False: a protocol error; the wire is closed.
bool handleFrame(Hca* h, Conn* c, const Frame& f) {
  if (f.magic != kFrameMagic) return false;
  if (c->outgoing) {
    if (f.type != kAck && f.type != kNak && f.type != kDrop) return false;
    handleResponse(h, c, f);
    return true;
  }
  if (!c->helloSeen) {
    if (f.type != kHello) return false;
    c->helloSeen = true;
    c->peerGuid = f.raddr;
    c->peerIpv4 = static_cast<uint32_t>(f.length);
    c->peerLid = static_cast<uint16_t>(f.rkey);
    return true;
  }
  if (f.type == kRequest) {
    if (c->rxActive || f.length > kMaxMessageBytes) return false;
    beginRequest(h, c, f);
    return true;
  }
  if (f.type == kSegment) {
    if (!c->rxActive) return false;
    if (f.flags & kFlagAbort) {
      abortRequest(h, c);
      return true;
    }
    if (f.length == 0 || f.length > kSegmentBytes || f.length > c->rxLen - c->rxGot) return false;
    c->rxSegLeft = f.length;
    return true;
  }
  return false;
}

void protocolError(Hca* h, Conn* c) {
  COLL_WARN(-1, "verbs double: %s: malformed frame on a wire; closing it", h->name.c_str());
  closeConn(h, c);
}

void readConn(Hca* h, Conn* c) {
  if (c->buf.empty()) c->buf.assign(kRxBufferBytes, 0);
  for (;;) {
    // Parse what is buffered.
    while (c->fd >= 0) {
      const size_t avail = c->end - c->beg;
      if (c->rxSegLeft > 0) {
        if (avail == 0) break;
        const uint64_t n = std::min<uint64_t>(avail, c->rxSegLeft);
        const size_t at = c->beg;
        c->beg += n;
        payloadArrived(h, c, c->buf.data() + at, n);
        continue;
      }
      if (avail < sizeof(Frame)) break;
      Frame f;
      std::memcpy(&f, c->buf.data() + c->beg, sizeof f);
      c->beg += sizeof f;
      if (!handleFrame(h, c, f)) {
        protocolError(h, c);
        return;
      }
    }
    if (c->fd < 0) return;
    if (c->beg == c->end) {
      c->beg = c->end = 0;
    } else if (c->beg > 0) {
      std::memmove(c->buf.data(), c->buf.data() + c->beg, c->end - c->beg);
      c->end -= c->beg;
      c->beg = 0;
    }
    ssize_t n;
    char* direct = (c->rxSegLeft >= kDirectReadMin && c->end == 0) ? directDest(h, c) : nullptr;
    if (direct) {
      n = read(c->fd, direct, std::min<uint64_t>(c->rxSegLeft, kMaxWriteBytes));
      if (n > 0) {
        payloadArrived(h, c, nullptr, static_cast<uint64_t>(n));
        continue;
      }
    } else {
      n = read(c->fd, c->buf.data() + c->end, c->buf.size() - c->end);
      if (n > 0) {
        c->end += static_cast<size_t>(n);
        continue;
      }
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    closeConn(h, c);  // EOF or error: the other side is gone
    return;
  }
  if (!c->outgoing && c->ctrlOff < c->ctrl.size()) flushCtrl(h, c);
}

void acceptAll(Hca* h, int lfd) {
  for (;;) {
    int fd = accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (h->wireCut) {
      close(fd);
      continue;
    }
    auto conn = std::make_unique<Conn>();
    conn->id = h->nextConnId++;
    conn->fd = fd;
    conn->buf.assign(kRxBufferBytes, 0);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = conn->id;
    epoll_ctl(h->epfd, EPOLL_CTL_ADD, fd, &ev);
    h->conns[conn->id] = std::move(conn);
  }
}

void fireTimers(Hca* h) {
  const TimePoint now = Clock::now();
  for (auto& entry : h->qps) {
    Qp* qp = entry.second;
    if (!qp->retryPending || qp->retryAt > now) continue;
    qp->retryPending = false;
    if (qp->state != IBV_QPS_RTS) continue;
    if (!qp->retryIsRnr && qp->timeout != 0) {  // timeout 0: wait forever, as the spec says
      if (qp->retries >= qp->retryCnt) {
        failFront(h, qp, IBV_WC_RETRY_EXC_ERR);
        continue;
      }
      qp->retries++;
    }
    qp->nextTx = 0;  // go back to the oldest unacknowledged request
  }
}

int nextTimeoutMs(Hca* h) {
  bool any = false;
  TimePoint first = TimePoint::max();
  for (auto& entry : h->qps)
    if (entry.second->retryPending) {
      any = true;
      first = std::min(first, entry.second->retryAt);
    }
  if (!any) return -1;
  const auto left = std::chrono::duration_cast<microseconds>(first - Clock::now()).count();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<int64_t>((left + 999) / 1000, 1000));
}

void serviceLoop(Hca* h) {
  epoll_event evs[64];
  std::unique_lock<std::mutex> lock(h->mu);
  while (!h->stopping) {
    const int timeoutMs = nextTimeoutMs(h);
    lock.unlock();
    const int n = epoll_wait(h->epfd, evs, 64, timeoutMs);
    lock.lock();
    if (h->stopping) break;
    for (int i = 0; i < n; ++i) {
      const uint64_t id = evs[i].data.u64;
      if (id == kWakeId) {
        uint64_t v;
        (void)!read(h->wakeFd, &v, sizeof v);
        continue;
      }
      if (id < kFirstConnId) {
        const size_t k = id - kListenId0;
        if (k < h->listenFds.size()) acceptAll(h, h->listenFds[k]);
        continue;
      }
      auto it = h->conns.find(id);
      if (it == h->conns.end()) continue;
      Conn* c = it->second.get();
      if (c->fd < 0) continue;
      if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) readConn(h, c);
      if (c->fd >= 0 && (evs[i].events & EPOLLOUT)) {
        if (c->outgoing) pumpOut(h, c);
        else flushCtrl(h, c);
      }
    }
    fireTimers(h);
    for (auto& entry : h->outConns) pumpOut(h, entry.second);
    for (auto it = h->conns.begin(); it != h->conns.end();) {
      if (it->second->closing) it = h->conns.erase(it);
      else ++it;
    }
  }
}

// ---- devices --------------------------------------------------------------------------------

void closeHcaFds(Hca* h) {
  for (int fd : h->listenFds) close(fd);
  h->listenFds.clear();
  for (auto& entry : h->conns)
    if (entry.second->fd >= 0) {
      close(entry.second->fd);
      entry.second->fd = -1;
    }
  if (h->epfd >= 0) close(h->epfd);
  if (h->wakeFd >= 0) close(h->wakeFd);
  h->epfd = h->wakeFd = -1;
}

Hca* gLockedForFork[kMaxDevices];

void atforkPrepare() {
  Registry& r = registry();
  r.mu.lock();
  for (int i = 0; i < kMaxDevices; ++i) {
    Hca* h = r.hcas[i];
    gLockedForFork[i] = (h && h->pid == getpid()) ? h : nullptr;
    if (gLockedForFork[i]) h->mu.lock();
  }
}
void atforkParent() {
  Registry& r = registry();
  for (Hca* h : gLockedForFork)
    if (h) h->mu.unlock();
  r.mu.unlock();
}
// The child has no service threads: its copies of the parent's devices are unusable, and their
// sockets must not keep the parent's wires looking alive after the parent dies.
void atforkChild() {
  Registry& r = registry();
  for (int i = 0; i < kMaxDevices; ++i) {
    Hca* h = gLockedForFork[i];
    if (!h) continue;
    closeHcaFds(h);
    h->mu.unlock();
    r.hcas[i] = nullptr;  // leaked on purpose: it belongs to the parent
  }
  r.mu.unlock();
}

bool bindAddresses(Hca* h) {
  // GUID (and with it the link-local GID): from pid and device index; salted when taken.
  int fd = -1;
  for (int salt = 0; salt < 32 && fd < 0; ++salt) {
    h->guid = defaultGuid(h->index, salt);
    fd = listenOn(gidName(linkLocalGid(h->guid)));
    if (fd < 0 && errno != EADDRINUSE) return false;
  }
  if (fd < 0) return false;
  h->listenFds.push_back(fd);
  if (!h->options.infiniband) {
    uint32_t x = mix32(h->guid) & 0xffffff;
    fd = -1;
    for (int probe = 0; probe < 64 && fd < 0; ++probe) {
      h->ipv4 = (10u << 24) | ((x + static_cast<uint32_t>(probe)) & 0xffffff);
      fd = listenOn(gidName(ipv4MappedGid(h->ipv4)));
      if (fd < 0 && errno != EADDRINUSE) return false;
    }
    if (fd < 0) return false;
    h->listenFds.push_back(fd);
  } else {
    uint32_t x = mix32(h->guid ^ 0x1d);
    fd = -1;
    for (int probe = 0; probe < 256 && fd < 0; ++probe) {
      h->lid = static_cast<uint16_t>(1 + (x + static_cast<uint32_t>(probe)) % 0xbffe);
      fd = listenOn(lidName(h->lid));
      if (fd < 0 && errno != EADDRINUSE) return false;
    }
    if (fd < 0) return false;
    h->listenFds.push_back(fd);
  }
  return true;
}

Hca* createHca(int index, const VerbsDoubleOptions& options) {
  auto h = std::make_unique<Hca>();
  h->index = index;
  h->pid = getpid();
  h->options = options;
  h->name = "verbsdouble" + std::to_string(index);
  h->portUp = !gPortDown.load() && options.portActive;
  h->wireCut = gWireCut.load();
  if (!bindAddresses(h.get())) {
    const int e = errno;
    closeHcaFds(h.get());
    errno = e ? e : EADDRINUSE;
    return nullptr;
  }
  h->nextQpn = (mix32(h->guid) & 0x3fff) << 8;
  if (h->nextQpn < 0x100) h->nextQpn += 0x100;
  h->nextKey = mix32(h->guid ^ 0x5a5a5a5a);
  h->epfd = epoll_create1(EPOLL_CLOEXEC);
  h->wakeFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (h->epfd < 0 || h->wakeFd < 0) {
    closeHcaFds(h.get());
    return nullptr;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeId;
  epoll_ctl(h->epfd, EPOLL_CTL_ADD, h->wakeFd, &ev);
  for (size_t i = 0; i < h->listenFds.size(); ++i) {
    ev.data.u64 = kListenId0 + i;
    epoll_ctl(h->epfd, EPOLL_CTL_ADD, h->listenFds[i], &ev);
  }
  Hca* raw = h.release();
  raw->thread = std::thread(serviceLoop, raw);
  return raw;
}

void destroyHca(Hca* h) {
  {
    std::lock_guard<std::mutex> lock(h->mu);
    h->stopping = true;
    wake(h);
  }
  h->thread.join();
  closeHcaFds(h);
  delete h;
}

void fillDevice(ibv_device* d, int i) {
  std::memset(d, 0, sizeof *d);
  d->node_type = IBV_NODE_CA;
  d->transport_type = IBV_TRANSPORT_IB;
  std::snprintf(d->name, sizeof d->name, "verbsdouble%d", i);
  std::snprintf(d->dev_name, sizeof d->dev_name, "uverbs%d", i);
  std::snprintf(d->dev_path, sizeof d->dev_path, "/nonexistent/verbs-double/uverbs%d", i);
  std::snprintf(d->ibdev_path, sizeof d->ibdev_path, "/nonexistent/verbs-double/verbsdouble%d", i);
}

int deviceIndex(ibv_device* d) {
  Registry& r = registry();
  if (!d || d < r.devices || d >= r.devices + kMaxDevices) return -1;
  return static_cast<int>(d - r.devices);
}

// ---- the table ------------------------------------------------------------------------------

ibv_device** dGetDeviceList(int* num) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.atforkInstalled) {
    pthread_atfork(atforkPrepare, atforkParent, atforkChild);
    r.atforkInstalled = true;
  }
  const int n = std::clamp(r.options.devices, 0, kMaxDevices);
  for (int i = 0; i < n; ++i) {
    // Written only when it changes (the first call): as with libibverbs, a device stays as it is
    // for the process, and another thread may be reading its name without the lock (a refill's
    // memset once let a rank read an empty name).
    ibv_device fresh;
    fillDevice(&fresh, i);
    if (std::memcmp(&fresh, &r.devices[i], sizeof fresh) != 0) r.devices[i] = fresh;
    r.list[i] = &r.devices[i];
  }
  r.list[n] = nullptr;
  if (num) *num = n;
  return r.list;
}

void dFreeDeviceList(ibv_device**) {}

const char* dGetDeviceName(ibv_device* d) { return d ? d->name : nullptr; }

uint64_t dGetDeviceGuid(ibv_device* d) {
  const int i = deviceIndex(d);
  if (i < 0) return 0;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  Hca* h = r.hcas[i];
  return htobe64(h && h->pid == getpid() ? h->guid : defaultGuid(i, 0));
}

ibv_context* dOpenDevice(ibv_device* d) {
  const int i = deviceIndex(d);
  if (i < 0) {
    errno = ENODEV;
    return nullptr;
  }
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.atforkInstalled) {
    pthread_atfork(atforkPrepare, atforkParent, atforkChild);
    r.atforkInstalled = true;
  }
  Hca* h = r.hcas[i];
  if (h && h->pid != getpid()) h = r.hcas[i] = nullptr;
  if (!h) {
    h = createHca(i, r.options);
    if (!h) return nullptr;
    r.hcas[i] = h;
  }
  auto ctx = std::make_unique<Context>();
  if (pipe2(ctx->asyncPipe, O_CLOEXEC) != 0) {
    if (h->contexts.empty()) {
      destroyHca(h);
      r.hcas[i] = nullptr;
    }
    return nullptr;
  }
  fcntl(ctx->asyncPipe[1], F_SETFL, O_NONBLOCK);
  ctx->hca = h;
  ctx->box.ctx.device = d;
  ctx->box.ctx.cmd_fd = -1;
  ctx->box.ctx.async_fd = ctx->asyncPipe[0];
  ctx->box.ctx.num_comp_vectors = 1;
  ctx->box.impl = ctx.get();
  Context* raw = ctx.release();
  std::lock_guard<std::mutex> hl(h->mu);
  h->contexts.push_back(raw);
  return &raw->box.ctx;
}

void releaseQp(Hca* h, Qp* qp) {
  if (qp->destroyed) return;
  qp->destroyed = true;
  h->qps.erase(qp->qpn);
  if (qp->out) {
    auto& u = qp->out->users;
    u.erase(std::remove(u.begin(), u.end(), qp), u.end());
    qp->out = nullptr;
  }
  cleanCq(qp->sendCq, qp->qpn);
  cleanCq(qp->recvCq, qp->qpn);
  if (qp->sendCq) qp->sendCq->qps--;
  if (qp->recvCq) qp->recvCq->qps--;
  if (qp->pd) qp->pd->users--;
  qp->sq.clear();
  qp->rq.clear();
}

void releaseMr(Hca* h, Mr* mr) {
  h->byLkey.erase(mr->box.mr.lkey);
  h->byRkey.erase(mr->box.mr.rkey);
  if (mr->mapping) munmap(mr->mapping, mr->mappingBytes);
  mr->pd->users--;
}

int dCloseDevice(ibv_context* c) {
  Context* ctx = ctxOf(c);
  if (!ctx) return EINVAL;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  Hca* h = ctx->hca;
  bool last;
  {
    std::lock_guard<std::mutex> hl(h->mu);
    for (auto& qp : ctx->qps) releaseQp(h, qp.get());
    for (auto& entry : ctx->mrs) releaseMr(h, entry.second.get());
    auto& v = h->contexts;
    v.erase(std::remove(v.begin(), v.end(), ctx), v.end());
    last = v.empty();
  }
  if (last) {
    destroyHca(h);
    for (Hca*& slot : r.hcas)
      if (slot == h) slot = nullptr;
  }
  for (auto& ch : ctx->channels) {
    close(ch->pipe[0]);
    close(ch->pipe[1]);
  }
  close(ctx->asyncPipe[0]);
  close(ctx->asyncPipe[1]);
  delete ctx;
  return 0;
}

int dQueryDevice(ibv_context* c, ibv_device_attr* a) {
  Context* ctx = ctxOf(c);
  if (!ctx || !a) return EINVAL;
  Hca* h = ctx->hca;
  std::memset(a, 0, sizeof *a);
  std::snprintf(a->fw_ver, sizeof a->fw_ver, "verbs-double-1");
  a->node_guid = htobe64(h->guid);
  a->sys_image_guid = htobe64(h->guid);
  a->max_mr_size = 1ull << 40;
  a->page_size_cap = 0xfffff000;
  a->max_qp = 1 << 16;
  a->max_qp_wr = h->options.maxQpWr;
  a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT;
  a->max_sge = kMaxSge;
  a->max_sge_rd = kMaxSge;
  a->max_cq = 1 << 16;
  a->max_cqe = h->options.maxCqe;
  a->max_mr = 1 << 20;
  a->max_pd = 1 << 16;
  a->max_qp_rd_atom = kMaxRdAtomic;
  a->max_qp_init_rd_atom = kMaxRdAtomic;
  a->max_res_rd_atom = kMaxRdAtomic * 1024;
  a->atomic_cap = IBV_ATOMIC_NONE;
  a->max_pkeys = 1;
  a->local_ca_ack_delay = 16;
  a->phys_port_cnt = 1;
  return 0;
}

int dQueryPort(ibv_context* c, uint8_t port, ibv_port_attr* a) {
  Context* ctx = ctxOf(c);
  if (!ctx || !a || port != 1) return EINVAL;
  Hca* h = ctx->hca;
  std::lock_guard<std::mutex> lock(h->mu);
  std::memset(a, 0, sizeof *a);
  a->state = h->portUp ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  a->max_mtu = IBV_MTU_4096;
  a->active_mtu = IBV_MTU_4096;
  a->gid_tbl_len = kGidTableLen;
  a->max_msg_sz = static_cast<uint32_t>(kMaxMessageBytes);
  a->pkey_tbl_len = 1;
  a->lid = h->options.infiniband ? h->lid : 0;
  a->sm_lid = h->options.infiniband ? 1 : 0;
  a->max_vl_num = 1;
  a->active_width = 2;  // 4x
  const uint8_t speed = h->index >= 0 && h->index < kMaxDevices ? h->options.activeSpeed[h->index] : 0;
  a->active_speed = speed != 0 ? speed : 32;  // EDR
  a->phys_state = h->portUp ? 5 : 3;  // LinkUp : Disabled
  a->link_layer = h->options.infiniband ? IBV_LINK_LAYER_INFINIBAND : IBV_LINK_LAYER_ETHERNET;
  return 0;
}

// The GID table: Ethernet ports list fe80::GUID and ::ffff:10.x.y.z, each as RoCE v1 then v2 (the
// order mlx5 uses); InfiniBand ports one IB GID. The rest of the table is empty.
bool gidEntry(Hca* h, int index, ibv_gid* gid, ibv_gid_type* type) {
  if (h->options.infiniband) {
    if (index != 0) return false;
    *gid = linkLocalGid(h->guid);
    *type = IBV_GID_TYPE_IB;
    return true;
  }
  if (index < 0 || index > 3) return false;
  *gid = index < 2 ? linkLocalGid(h->guid) : ipv4MappedGid(h->ipv4);
  *type = (index % 2) ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1;
  return true;
}

int dQueryGid(ibv_context* c, uint8_t port, int index, ibv_gid* gid) {
  Context* ctx = ctxOf(c);
  if (!ctx || !gid || port != 1 || index < 0 || index >= kGidTableLen) return -1;
  ibv_gid_type type;
  if (!gidEntry(ctx->hca, index, gid, &type)) std::memset(gid, 0, sizeof *gid);
  return 0;
}

int dQueryGidType(ibv_context* c, uint8_t port, int index, ibv_gid_type* type) {
  Context* ctx = ctxOf(c);
  if (!ctx || !type || port != 1) return EINVAL;
  ibv_gid gid;
  return gidEntry(ctx->hca, index, &gid, type) ? 0 : ENODATA;
}

ibv_pd* dAllocPd(ibv_context* c) {
  Context* ctx = ctxOf(c);
  if (!ctx) {
    errno = EINVAL;
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(ctx->hca->mu);
  auto pd = std::make_unique<Pd>();
  pd->ctx = ctx;
  pd->box.pd.context = c;
  pd->box.pd.handle = static_cast<uint32_t>(ctx->pds.size() + 1);
  pd->box.impl = pd.get();
  ctx->pds.push_back(std::move(pd));
  return &ctx->pds.back()->box.pd;
}

int dDeallocPd(ibv_pd* p) {
  Pd* pd = pdOf(p);
  if (!pd) return EINVAL;
  std::lock_guard<std::mutex> lock(pd->ctx->hca->mu);
  if (pd->users > 0) {
    errno = EBUSY;
    return EBUSY;
  }
  auto& v = pd->ctx->pds;
  v.erase(std::remove_if(v.begin(), v.end(), [pd](const std::unique_ptr<Pd>& x) { return x.get() == pd; }), v.end());
  return 0;
}

constexpr int kKnownAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                             IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_RELAXED_ORDERING;

ibv_mr* registerRegion(Pd* pd, char* host, uint64_t iova, size_t length, int access, void* mapping,
                       size_t mappingBytes) {
  Hca* h = pd->ctx->hca;
  std::lock_guard<std::mutex> lock(h->mu);
  auto mr = std::make_unique<Mr>();
  mr->pd = pd;
  mr->host = host;
  mr->iova = iova;
  mr->length = length;
  mr->access = access;
  mr->mapping = mapping;
  mr->mappingBytes = mappingBytes;
  uint32_t lkey, rkey;
  do {
    lkey = h->nextKey++;
    rkey = lkey ^ 0x80a5c300u;  // lkey != rkey, so a swapped key is caught
  } while (lkey == 0 || rkey == 0 || h->byLkey.count(lkey) || h->byRkey.count(rkey));
  mr->box.mr.context = pd->box.pd.context;
  mr->box.mr.pd = &pd->box.pd;
  mr->box.mr.addr = reinterpret_cast<void*>(iova);
  mr->box.mr.length = length;
  mr->box.mr.handle = lkey;
  mr->box.mr.lkey = lkey;
  mr->box.mr.rkey = rkey;
  mr->box.impl = mr.get();
  Mr* raw = mr.get();
  h->byLkey[lkey] = raw;
  h->byRkey[rkey] = raw;
  pd->users++;
  pd->ctx->mrs[raw] = std::move(mr);
  return &raw->box.mr;
}

bool validAccess(int access) {
  if (access & ~(kKnownAccess | IBV_ACCESS_OPTIONAL_RANGE)) return false;
  // Remote write and atomics need local write, as the verbs require.
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))
    return false;
  return true;
}

ibv_mr* dRegMr(ibv_pd* p, void* addr, size_t length, int access) {
  Pd* pd = pdOf(p);
  if (!pd || !addr || length == 0 || !validAccess(access)) {
    errno = EINVAL;
    return nullptr;
  }
  return registerRegion(pd, static_cast<char*>(addr), reinterpret_cast<uint64_t>(addr), length, access, nullptr, 0);
}

// dmabuf: the double maps the fd (any mmap-able fd, e.g. a memfd, stands in for GPU memory) and
// addresses the region by iova as the HCA would.
ibv_mr* dRegDmabufMr(ibv_pd* p, uint64_t offset, size_t length, uint64_t iova, int fd, int access) {
  Pd* pd = pdOf(p);
  if (!pd || fd < 0 || length == 0 || !validAccess(access)) {
    errno = EINVAL;
    return nullptr;
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t base = offset & ~(page - 1);
  const size_t bytes = static_cast<size_t>(offset - base + length);
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(base));
  if (m == MAP_FAILED) return nullptr;
  return registerRegion(pd, static_cast<char*>(m) + (offset - base), iova, length, access, m, bytes);
}

int dDeregMr(ibv_mr* m) {
  Mr* mr = mrOf(m);
  if (!mr) return EINVAL;
  Context* ctx = mr->pd->ctx;
  std::lock_guard<std::mutex> lock(ctx->hca->mu);
  releaseMr(ctx->hca, mr);
  ctx->mrs.erase(mr);
  return 0;
}

ibv_comp_channel* dCreateCompChannel(ibv_context* c) {
  Context* ctx = ctxOf(c);
  if (!ctx) {
    errno = EINVAL;
    return nullptr;
  }
  auto ch = std::make_unique<Channel>();
  if (pipe2(ch->pipe, O_CLOEXEC) != 0) return nullptr;
  fcntl(ch->pipe[1], F_SETFL, O_NONBLOCK);
  ch->ctx = ctx;
  ch->box.channel.context = c;
  ch->box.channel.fd = ch->pipe[0];
  ch->box.channel.refcnt = 0;
  ch->box.impl = ch.get();
  std::lock_guard<std::mutex> lock(ctx->hca->mu);
  ctx->channels.push_back(std::move(ch));
  return &ctx->channels.back()->box.channel;
}

int dDestroyCompChannel(ibv_comp_channel* c) {
  Channel* ch = channelOf(c);
  if (!ch) return EINVAL;
  Context* ctx = ch->ctx;
  std::lock_guard<std::mutex> lock(ctx->hca->mu);
  if (ch->cqs > 0) {
    errno = EBUSY;
    return EBUSY;
  }
  close(ch->pipe[0]);
  close(ch->pipe[1]);
  auto& v = ctx->channels;
  v.erase(std::remove_if(v.begin(), v.end(), [ch](const std::unique_ptr<Channel>& x) { return x.get() == ch; }),
          v.end());
  return 0;
}

ibv_cq* dCreateCq(ibv_context* c, int cqe, void* cqContext, ibv_comp_channel* channel, int vector) {
  Context* ctx = ctxOf(c);
  Channel* ch = channelOf(channel);
  if (!ctx || cqe < 1 || cqe > ctx->hca->options.maxCqe || vector < 0 || vector >= 1 || (ch && ch->ctx != ctx)) {
    errno = EINVAL;
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(ctx->hca->mu);
  auto cq = std::make_unique<Cq>();
  cq->ctx = ctx;
  cq->channel = ch;
  cq->capacity = cqe;
  cq->box.cq.context = c;
  cq->box.cq.channel = channel;
  cq->box.cq.cq_context = cqContext;
  cq->box.cq.cqe = cqe;
  cq->box.cq.handle = static_cast<uint32_t>(ctx->cqs.size() + 1);
  cq->box.impl = cq.get();
  if (ch) ch->cqs++;
  ctx->cqs.push_back(std::move(cq));
  return &ctx->cqs.back()->box.cq;
}

int dDestroyCq(ibv_cq* c) {
  Cq* cq = cqOf(c);
  if (!cq || cq->destroyed) return EINVAL;
  std::lock_guard<std::mutex> lock(cq->ctx->hca->mu);
  // libibverbs would block until every event is acknowledged; a test double says so instead.
  if (cq->qps > 0 || cq->eventsRaised != cq->eventsAcked) {
    errno = EBUSY;
    return EBUSY;
  }
  cq->destroyed = true;
  cq->entries.clear();
  if (cq->channel) cq->channel->cqs--;
  return 0;
}

int dReqNotifyCq(ibv_cq* c, int solicitedOnly) {
  Cq* cq = cqOf(c);
  if (!cq || cq->destroyed) return EINVAL;
  std::lock_guard<std::mutex> lock(cq->ctx->hca->mu);
  cq->armed = true;
  cq->solicitedOnly = solicitedOnly != 0;
  return 0;
}

// One event's wake byte from a completion channel's or context's pipe (blocking as the real
// calls do, unless the caller made the fd non-blocking); false with errno set otherwise.
bool takeWakeByte(int fd) {
  char b;
  ssize_t r;
  do r = read(fd, &b, 1);
  while (r < 0 && errno == EINTR);
  if (r == 1) return true;
  if (r == 0) errno = EIO;
  return false;
}

int dGetCqEvent(ibv_comp_channel* c, ibv_cq** cqOut, void** cqContext) {
  Channel* ch = channelOf(c);
  if (!ch || !cqOut || !cqContext) {
    errno = EINVAL;
    return -1;
  }
  if (!takeWakeByte(ch->pipe[0])) return -1;
  std::lock_guard<std::mutex> lock(ch->ctx->hca->mu);
  if (ch->events.empty()) {
    errno = EAGAIN;
    return -1;
  }
  Cq* cq = ch->events.front();
  ch->events.pop_front();
  *cqOut = &cq->box.cq;
  *cqContext = cq->box.cq.cq_context;
  return 0;
}

void dAckCqEvents(ibv_cq* c, unsigned int count) {
  Cq* cq = cqOf(c);
  if (!cq) return;
  std::lock_guard<std::mutex> lock(cq->ctx->hca->mu);
  cq->eventsAcked += count;
}

int dPollCq(ibv_cq* c, int entries, ibv_wc* wc) {
  Cq* cq = cqOf(c);
  if (!cq || cq->destroyed || entries < 0 || (entries > 0 && !wc)) return -1;
  Hca* h = cq->ctx->hca;
  std::lock_guard<std::mutex> lock(h->mu);
  if (cq->overflowed) return -1;  // the CQ is in error (IBV_EVENT_CQ_ERR was raised)
  int n = 0;
  while (n < entries && !cq->entries.empty()) {
    const Cqe& e = cq->entries.front();
    wc[n++] = e.wc;
    if (e.sqSlots || e.rqSlots) {
      auto it = h->qps.find(e.wc.qp_num);
      if (it != h->qps.end()) {
        Qp* qp = it->second;
        qp->sqUsed -= std::min(qp->sqUsed, e.sqSlots);
        qp->rqUsed -= std::min(qp->rqUsed, e.rqSlots);
      }
    }
    cq->entries.pop_front();
  }
  return n;
}

ibv_qp* dCreateQp(ibv_pd* p, ibv_qp_init_attr* attr) {
  Pd* pd = pdOf(p);
  if (!pd || !attr) {
    errno = EINVAL;
    return nullptr;
  }
  Context* ctx = pd->ctx;
  Hca* h = ctx->hca;
  Cq* scq = cqOf(attr->send_cq);
  Cq* rcq = cqOf(attr->recv_cq);
  const ibv_qp_cap& cap = attr->cap;
  if (attr->qp_type != IBV_QPT_RC || attr->srq || !scq || !rcq || scq->ctx != ctx || rcq->ctx != ctx ||
      scq->destroyed || rcq->destroyed || cap.max_send_wr > static_cast<uint32_t>(h->options.maxQpWr) ||
      cap.max_recv_wr > static_cast<uint32_t>(h->options.maxQpWr) || cap.max_send_sge > kMaxSge ||
      cap.max_recv_sge > kMaxSge || cap.max_inline_data > h->options.maxInlineData) {
    errno = EINVAL;
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(h->mu);
  auto qp = std::make_unique<Qp>();
  qp->ctx = ctx;
  qp->pd = pd;
  qp->sendCq = scq;
  qp->recvCq = rcq;
  qp->cap = cap;
  qp->sigAll = attr->sq_sig_all != 0;
  do {
    h->nextQpn = (h->nextQpn + 1) & 0xffffff;
  } while (h->nextQpn < 2 || h->qps.count(h->nextQpn));
  qp->qpn = h->nextQpn;
  ibv_qp& q = qp->box.qp;
  q.context = pd->box.pd.context;
  q.qp_context = attr->qp_context;
  q.pd = p;
  q.send_cq = attr->send_cq;
  q.recv_cq = attr->recv_cq;
  q.handle = qp->qpn;
  q.qp_num = qp->qpn;
  q.state = IBV_QPS_RESET;
  q.qp_type = IBV_QPT_RC;
  qp->box.impl = qp.get();
  scq->qps++;
  rcq->qps++;
  pd->users++;
  h->qps[qp->qpn] = qp.get();
  ctx->qps.push_back(std::move(qp));
  return &ctx->qps.back()->box.qp;
}

// The attribute masks libibverbs / the kernel accept for each RC transition.
bool transitionMasks(ibv_qp_state cur, ibv_qp_state next, int* required, int* optional) {
  *required = 0;
  *optional = 0;
  if (next == IBV_QPS_RESET || next == IBV_QPS_ERR) return true;
  switch (cur) {
    case IBV_QPS_RESET:
      if (next == IBV_QPS_INIT) {
        *required = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
        return true;
      }
      return false;
    case IBV_QPS_INIT:
      if (next == IBV_QPS_INIT) {
        *optional = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
        return true;
      }
      if (next == IBV_QPS_RTR) {
        *required = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                    IBV_QP_MIN_RNR_TIMER;
        *optional = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
        return true;
      }
      return false;
    case IBV_QPS_RTR:
      if (next == IBV_QPS_RTS) {
        *required = IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
        *optional =
            IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE;
        return true;
      }
      return false;
    case IBV_QPS_RTS:
      if (next == IBV_QPS_RTS) {
        *optional =
            IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE | IBV_QP_MIN_RNR_TIMER;
        return true;
      }
      return false;
    default: return false;
  }
}

void resetQp(Qp* qp) {
  setState(qp, IBV_QPS_RESET);
  qp->sq.clear();
  qp->rq.clear();
  qp->nextTx = 0;
  qp->sqUsed = qp->rqUsed = qp->unsignaledDone = 0;
  qp->retries = qp->rnrRetries = 0;
  qp->retryPending = false;
  qp->nakOutstanding = false;
  qp->access = 0;
  cleanCq(qp->sendCq, qp->qpn);
  cleanCq(qp->recvCq, qp->qpn);
  if (qp->out) {
    auto& u = qp->out->users;
    u.erase(std::remove(u.begin(), u.end(), qp), u.end());
    qp->out = nullptr;
  }
}

int invalid(const char* why, Qp* qp) {
  COLL_INFO(-1, "verbs double: modify QP 0x%x: %s", qp->qpn, why);
  errno = EINVAL;
  return EINVAL;
}

int dModifyQp(ibv_qp* q, ibv_qp_attr* attr, int mask) {
  Qp* qp = qpOf(q);
  if (!qp || !attr || qp->destroyed) return EINVAL;
  Hca* h = qp->ctx->hca;
  std::lock_guard<std::mutex> lock(h->mu);
  const ibv_qp_state cur = qp->state;
  const ibv_qp_state next = (mask & IBV_QP_STATE) ? attr->qp_state : cur;
  if ((mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != cur)
    return invalid("cur_qp_state is not the current state", qp);
  int required, optional;
  if (!transitionMasks(cur, next, &required, &optional)) return invalid("transition not allowed", qp);
  const int attrs = mask & ~IBV_QP_STATE;
  if ((attrs & required) != required) return invalid("attribute mask misses attributes this transition requires", qp);
  if (attrs & ~(required | optional)) return invalid("attribute mask has attributes this transition does not take", qp);
  // Validate everything before changing anything.
  if ((mask & IBV_QP_PORT) && attr->port_num != 1) return invalid("no such port", qp);
  if ((mask & IBV_QP_PKEY_INDEX) && attr->pkey_index != 0) return invalid("pkey_index out of range", qp);
  if ((mask & IBV_QP_ACCESS_FLAGS) && (attr->qp_access_flags & ~(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                                                 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)))
    return invalid("unknown access flags", qp);
  if ((mask & IBV_QP_PATH_MTU) && (attr->path_mtu < IBV_MTU_256 || attr->path_mtu > IBV_MTU_4096))
    return invalid("path_mtu above the port's active MTU", qp);
  if ((mask & IBV_QP_DEST_QPN) && attr->dest_qp_num > 0xffffff) return invalid("dest_qp_num above 24 bits", qp);
  if ((mask & IBV_QP_TIMEOUT) && attr->timeout > 31) return invalid("timeout above 31", qp);
  if ((mask & IBV_QP_RETRY_CNT) && attr->retry_cnt > 7) return invalid("retry_cnt above 7", qp);
  if ((mask & IBV_QP_RNR_RETRY) && attr->rnr_retry > 7) return invalid("rnr_retry above 7", qp);
  if ((mask & IBV_QP_MIN_RNR_TIMER) && attr->min_rnr_timer > 31) return invalid("min_rnr_timer above 31", qp);
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && attr->max_rd_atomic > kMaxRdAtomic)
    return invalid("max_rd_atomic too big", qp);
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && attr->max_dest_rd_atomic > kMaxRdAtomic)
    return invalid("max_dest_rd_atomic too big", qp);
  std::string remoteName;
  if (mask & IBV_QP_AV) {
    const ibv_ah_attr& ah = attr->ah_attr;
    if (ah.port_num != 1) return invalid("ah_attr.port_num is not the port", qp);
    if (ah.is_global) {
      ibv_gid g;
      ibv_gid_type t;
      if (!gidEntry(h, ah.grh.sgid_index, &g, &t)) return invalid("ah_attr.grh.sgid_index is an empty GID entry", qp);
      remoteName = gidName(ah.grh.dgid);
    } else {
      if (!h->options.infiniband) return invalid("RoCE needs a GRH (ah_attr.is_global = 1)", qp);
      if (ah.dlid == 0 || ah.dlid >= 0xc000) return invalid("ah_attr.dlid is not a unicast LID", qp);
      remoteName = lidName(ah.dlid);
    }
  }
  // Apply.
  if (next == IBV_QPS_RESET) {
    resetQp(qp);
    return 0;
  }
  if (next == IBV_QPS_ERR) {
    errorQp(h, qp);
    return 0;
  }
  if (mask & IBV_QP_ACCESS_FLAGS) qp->access = attr->qp_access_flags;
  if (mask & IBV_QP_PATH_MTU) qp->mtu = attr->path_mtu;
  if (mask & IBV_QP_DEST_QPN) qp->destQpn = attr->dest_qp_num;
  if (mask & IBV_QP_RQ_PSN) qp->epsn = attr->rq_psn & kPsnMask;
  if (mask & IBV_QP_SQ_PSN) qp->sqPsn = attr->sq_psn & kPsnMask;
  if (mask & IBV_QP_MIN_RNR_TIMER) qp->minRnrTimer = attr->min_rnr_timer;
  if (mask & IBV_QP_TIMEOUT) qp->timeout = attr->timeout;
  if (mask & IBV_QP_RETRY_CNT) qp->retryCnt = attr->retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) qp->rnrRetry = attr->rnr_retry;
  if (mask & IBV_QP_AV) {
    qp->remoteGlobal = attr->ah_attr.is_global != 0;
    qp->remoteGid = attr->ah_attr.grh.dgid;
    qp->remoteLid = attr->ah_attr.dlid;
    if (qp->out) {
      auto& u = qp->out->users;
      u.erase(std::remove(u.begin(), u.end(), qp), u.end());
    }
    qp->out = outConn(h, remoteName);
    qp->out->users.push_back(qp);
  }
  setState(qp, next);
  return 0;
}

int dDestroyQp(ibv_qp* q) {
  Qp* qp = qpOf(q);
  if (!qp || qp->destroyed) return EINVAL;
  std::lock_guard<std::mutex> lock(qp->ctx->hca->mu);
  releaseQp(qp->ctx->hca, qp);
  return 0;
}

bool isWrite(ibv_wr_opcode op) { return op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM; }

int postOneSend(Hca* h, Qp* qp, const ibv_send_wr* wr) {
  if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_ERR) return EINVAL;
  if (!isWrite(wr->opcode) && wr->opcode != IBV_WR_SEND && wr->opcode != IBV_WR_SEND_WITH_IMM) return EINVAL;
  if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > qp->cap.max_send_sge || (wr->num_sge > 0 && !wr->sg_list))
    return EINVAL;
  if (qp->sqUsed >= qp->cap.max_send_wr) return ENOMEM;
  SendWr s;
  s.wrId = wr->wr_id;
  s.opcode = wr->opcode;
  s.signaled = qp->sigAll || (wr->send_flags & IBV_SEND_SIGNALED);
  s.solicited = (wr->send_flags & IBV_SEND_SOLICITED) != 0;
  if (wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM || wr->opcode == IBV_WR_SEND_WITH_IMM) s.imm = wr->imm_data;
  if (isWrite(wr->opcode)) {
    s.raddr = wr->wr.rdma.remote_addr;
    s.rkey = wr->wr.rdma.rkey;
  }
  uint64_t len = 0;
  for (int i = 0; i < wr->num_sge; ++i) len += wr->sg_list[i].length;
  s.length = len;
  if (wr->send_flags & IBV_SEND_INLINE) {
    if (len > qp->cap.max_inline_data) return EINVAL;
    s.isInline = true;
    s.inlineData.resize(len);
    uint64_t off = 0;
    for (int i = 0; i < wr->num_sge; ++i) {
      const ibv_sge& g = wr->sg_list[i];
      if (g.length) std::memcpy(s.inlineData.data() + off, reinterpret_cast<const void*>(g.addr), g.length);
      off += g.length;
    }
  } else {
    for (int i = 0; i < wr->num_sge; ++i) {
      const ibv_sge& g = wr->sg_list[i];
      if (g.length > 0 && !localMr(h, qp->pd, g, false)) s.localError = IBV_WC_LOC_PROT_ERR;
      if (g.length > 0) s.sge.push_back(g);
    }
  }
  if (len > kMaxMessageBytes) s.localError = IBV_WC_LOC_LEN_ERR;
  if (gFailNextSend.exchange(false)) s.localError = IBV_WC_RETRY_EXC_ERR;
  if (isWrite(wr->opcode) && gRemoteAccessNext.exchange(false)) s.forceAccessError = true;
  qp->sqUsed++;
  if (qp->state == IBV_QPS_ERR) {
    pushCqe(h, qp->sendCq, sendWc(qp, s, IBV_WC_WR_FLUSH_ERR), takeSlots(qp), 0, false);
    return 0;
  }
  s.seq = qp->sq.empty() ? qp->nextSeq : qp->sq.back().seq + 1;
  qp->nextSeq = s.seq + 1;
  s.npackets = packetsFor(len, qp->mtu);
  s.psn = qp->sqPsn;
  qp->sqPsn = psnAdd(qp->sqPsn, s.npackets);
  qp->sq.push_back(std::move(s));
  if (qp->sq.size() == 1) checkFrontLocalError(h, qp);
  return 0;
}

int dPostSend(ibv_qp* q, ibv_send_wr* wr, ibv_send_wr** bad) {
  Qp* qp = qpOf(q);
  if (!qp || qp->destroyed) {
    if (bad) *bad = wr;
    errno = EINVAL;
    return EINVAL;
  }
  Hca* h = qp->ctx->hca;
  std::lock_guard<std::mutex> lock(h->mu);
  int rc = 0;
  for (; wr; wr = wr->next) {
    rc = postOneSend(h, qp, wr);
    if (rc) {
      if (bad) *bad = wr;
      errno = rc;
      break;
    }
  }
  if (qp->state == IBV_QPS_RTS) pumpQp(h, qp);
  return rc;
}

int dPostRecv(ibv_qp* q, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  Qp* qp = qpOf(q);
  if (!qp || qp->destroyed) {
    if (bad) *bad = wr;
    errno = EINVAL;
    return EINVAL;
  }
  Hca* h = qp->ctx->hca;
  std::lock_guard<std::mutex> lock(h->mu);
  for (; wr; wr = wr->next) {
    int rc = 0;
    if (qp->state == IBV_QPS_RESET) rc = EINVAL;
    else if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > qp->cap.max_recv_sge ||
             (wr->num_sge > 0 && !wr->sg_list))
      rc = EINVAL;
    else if (qp->rqUsed >= qp->cap.max_recv_wr) rc = ENOMEM;
    if (rc) {
      if (bad) *bad = wr;
      errno = rc;
      return rc;
    }
    RecvWr r;
    r.wrId = wr->wr_id;
    for (int i = 0; i < wr->num_sge; ++i) {
      const ibv_sge& g = wr->sg_list[i];
      if (g.length > 0 && !localMr(h, qp->pd, g, true)) r.badLkey = true;
      r.capacity += g.length;
      r.sge.push_back(g);
    }
    qp->rqUsed++;
    if (qp->state == IBV_QPS_ERR) {
      pushCqe(h, qp->recvCq, recvWc(qp, r.wrId, IBV_WC_WR_FLUSH_ERR), 0, 1, false);
      continue;
    }
    qp->rq.push_back(std::move(r));
  }
  return 0;
}

int dGetAsyncEvent(ibv_context* c, ibv_async_event* event) {
  Context* ctx = ctxOf(c);
  if (!ctx || !event) {
    errno = EINVAL;
    return -1;
  }
  if (!takeWakeByte(ctx->asyncPipe[0])) return -1;
  std::lock_guard<std::mutex> lock(ctx->hca->mu);
  if (ctx->asyncEvents.empty()) {
    errno = EAGAIN;
    return -1;
  }
  *event = ctx->asyncEvents.front();
  ctx->asyncEvents.pop_front();
  return 0;
}

void dAckAsyncEvent(ibv_async_event*) {}

const VerbsApi kDouble = {
    "verbs test double", dGetDeviceList, dFreeDeviceList, dGetDeviceName, dGetDeviceGuid,     dOpenDevice,
    dCloseDevice,        dQueryDevice,   dQueryPort,      dQueryGid,      dQueryGidType,      dAllocPd,
    dDeallocPd,          dRegMr,         dRegDmabufMr,    dDeregMr,       dCreateCompChannel, dDestroyCompChannel,
    dCreateCq,           dDestroyCq,     dReqNotifyCq,    dGetCqEvent,    dAckCqEvents,       dPollCq,
    dCreateQp,           dModifyQp,      dDestroyQp,      dPostSend,      dPostRecv,          dGetAsyncEvent,
    dAckAsyncEvent,
};

void setPortState(Hca* h, bool up) {
  if (h->portUp == up) return;
  h->portUp = up;
  for (Context* c : h->contexts) {
    ibv_async_event ev{};
    ev.event_type = up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR;
    ev.element.port_num = 1;
    pushAsync(c, ev);
  }
  if (!up)
    for (auto& entry : h->qps)
      if (entry.second->state != IBV_QPS_RESET) errorQp(h, entry.second);
}

void cutWire(Hca* h) {
  h->wireCut = true;
  std::vector<Conn*> all;
  for (auto& entry : h->conns) all.push_back(entry.second.get());
  for (Conn* c : all)
    if (c->fd >= 0) closeConn(h, c);
  wake(h);
}

}  // namespace

const VerbsApi& verbsTestDouble() { return kDouble; }

void configureVerbsDouble(const VerbsDoubleOptions& options) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.options = options;
}

void injectVerbsFault(VerbsFault fault) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  switch (fault) {
    case VerbsFault::FailNextSend: gFailNextSend = true; return;
    case VerbsFault::RemoteAccessError: gRemoteAccessNext = true; return;
    default: break;
  }
  if (fault == VerbsFault::PortDown) gPortDown = true;
  if (fault == VerbsFault::CutWire) gWireCut = true;
  if (fault == VerbsFault::None) {
    gFailNextSend = false;
    gRemoteAccessNext = false;
    gPortDown = false;
    gWireCut = false;
  }
  for (Hca* h : r.hcas) {
    if (!h || h->pid != getpid()) continue;
    std::lock_guard<std::mutex> hl(h->mu);
    if (fault == VerbsFault::PortDown) setPortState(h, false);
    if (fault == VerbsFault::CutWire) cutWire(h);
    if (fault == VerbsFault::None) {
      setPortState(h, h->options.portActive);
      h->wireCut = false;
    }
  }
}

void injectVerbsDeviceFault(VerbsFault fault, int device) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (device < 0 || device >= kMaxDevices) return;
  Hca* h = r.hcas[device];
  if (!h || h->pid != getpid()) return;
  std::lock_guard<std::mutex> hl(h->mu);
  if (fault == VerbsFault::PortDown) setPortState(h, false);
  if (fault == VerbsFault::CutWire) cutWire(h);
}

}  // namespace coll::testing
