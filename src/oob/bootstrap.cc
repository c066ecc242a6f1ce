// Bootstrap (see bootstrap.h): unique ids, the root's registration service, the rank table's
// tree distribution, and each rank's listener for authenticated control messages and data sockets.
#include "src/oob/bootstrap.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "src/base/byte_order.h"
#include "src/base/config.h"
#include "src/base/log.h"
#include "src/oob/auth.h"
#include "src/oob/failure.h"
#include "src/oob/wire.h"
#include "src/topo/topology.h"

namespace coll {

const IntKnob kBootstrapFanout("COLL_BOOTSTRAP_FANOUT", "8",
                               "Fan-out of the tree that distributes the rank table at init.",
                               {KnobSection::Bootstrap, 90});

namespace {

// ---- wire format: fixed-size little-endian fields -------------------------------------------

constexpr uint32_t kIdMagic = 0x44494c43;     // "CLID"
constexpr uint16_t kIdVersion = 2;            // 2: rank-table entries carry the machine (kRegVersion 2)
constexpr uint32_t kRegMagic = 0x47524c43;    // "CLRG"
constexpr uint32_t kRegVersion = 4;           // 2: entries carry the machine hash and CPUs; 3: groups; 4: ring key
constexpr uint32_t kHelloMagic = 0x4c484c43;  // "CLHL"
constexpr size_t kAddrWire = kSocketAddressWire;
constexpr size_t kEntryWire = kAddrWire + 32;      // address, hostHash, pid, netMask, machineHash, cpus, ringKey
constexpr size_t kRegWire = 24 + kEntryWire + 12;  // + groups, group, block count
constexpr size_t kHelloWire = 20;
constexpr int kHandshakeMs = 5000;  // a connection must authenticate and say hello by then
constexpr int kPayloadMs = 30000;   // and deliver its (<= 16 MiB) payload by then
constexpr int kRootSender = -1;     // fromRank of the table sent by the root

enum HelloType : uint32_t { kHelloMessage = 1, kHelloData = 2, kHelloTable = 3 };

enum RegReply : uint32_t {
  kRegOk = 0,
  kRegBadRank = 1,
  kRegNranksMismatch = 2,
  kRegDuplicate = 3,
  kRegNonceMismatch = 4,
  kRegMalformed = 5,
  kRegGroupMismatch = 6,
};

const char* regReplyText(uint32_t code) {
  switch (code) {
    case kRegOk: return "accepted";
    case kRegBadRank: return "rank out of range";
    case kRegNranksMismatch:
      return "nranks out of range or different from other ranks' (every rank must pass the same nranks)";
    case kRegDuplicate: return "another process already registered this rank (two processes with one rank?)";
    case kRegNonceMismatch: return "the unique id differs from other ranks' (two jobs sharing one rendezvous address?)";
    case kRegMalformed: return "malformed registration";
    case kRegGroupMismatch:
      return "the rank's group differs from other ranks' or belongs to another root (collCommInitRankScalable: "
             "every rank must pass the same nId and the same ids in the same order)";
    default: return "unknown reply";
  }
}

using le::get16;
using le::get32;
using le::get64;
using le::put16;
using le::put32;
using le::put64;

void putEntry(uint8_t* p, const PeerInfo& info) {
  putSocketAddress(p, info.address);
  put64(p + kAddrWire, info.hostHash);
  put32(p + kAddrWire + 8, static_cast<uint32_t>(info.pid));
  put32(p + kAddrWire + 12, info.netMask);
  put64(p + kAddrWire + 16, info.machineHash);
  put32(p + kAddrWire + 24, static_cast<uint32_t>(info.cpus));
  put32(p + kAddrWire + 28, static_cast<uint32_t>(info.ringKey));
}

bool getEntry(const uint8_t* p, PeerInfo* out) {
  PeerInfo info;
  if (!getSocketAddress(p, &info.address)) return false;
  info.hostHash = get64(p + kAddrWire);
  info.pid = static_cast<int32_t>(get32(p + kAddrWire + 8));
  info.netMask = get32(p + kAddrWire + 12);
  info.machineHash = get64(p + kAddrWire + 16);
  const uint32_t cpus = get32(p + kAddrWire + 24);
  if (cpus > static_cast<uint32_t>(kBootstrapMaxCpus)) return false;
  info.cpus = static_cast<int32_t>(cpus);
  info.ringKey = static_cast<int32_t>(get32(p + kAddrWire + 28));
  if (info.ringKey < -1 || info.ringKey > kBootstrapMaxRingKey) return false;
  *out = info;
  return true;
}

void putRegistration(uint8_t* p, const BootstrapRegistration& r, uint64_t commNonce) {
  put32(p, kRegMagic);
  put32(p + 4, kRegVersion);
  put32(p + 8, static_cast<uint32_t>(r.rank));
  put32(p + 12, static_cast<uint32_t>(r.nranks));
  put64(p + 16, commNonce);
  putEntry(p + 24, r.info);
  put32(p + 24 + kEntryWire, static_cast<uint32_t>(r.groups));
  put32(p + 28 + kEntryWire, static_cast<uint32_t>(r.group));
  put32(p + 32 + kEntryWire, r.blockCount);
}

void putHello(uint8_t* p, HelloType type, int32_t fromRank, uint32_t tag, uint32_t length) {
  put32(p, kHelloMagic);
  put32(p + 4, type);
  put32(p + 8, static_cast<uint32_t>(fromRank));
  put32(p + 12, tag);
  put32(p + 16, length);
}

Deadline shorter(Deadline a, int ms) { return a.remainingMs() < ms ? a : Deadline::afterMs(ms); }

uint64_t hashOfId(const UniqueIdContents& c) {
  uint8_t buf[kAddrWire + 8];
  putSocketAddress(buf, c.root);
  put64(buf + kAddrWire, c.commNonce);
  auto d = sha256(buf, sizeof(buf));
  return get64(d.data());
}

// Opens an authenticated connection to `address` and sends a hello.
// Outbound exchanges in progress, so abort() can break them: a stalled peer accepts the TCP
// connection but never answers, and collCommAbort must not wait out the deadline.
class Outbound {
 public:
  bool add(int fd) {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.load(std::memory_order_relaxed)) return false;
    fds_.push_back(fd);
    return true;
  }
  // Set by abortAll(): a connect still retrying towards a peer that has gone stops.
  const std::atomic<bool>* abortedFlag() const { return &aborted_; }
  void remove(int fd) {
    std::lock_guard<std::mutex> lock(mu_);
    fds_.erase(std::remove(fds_.begin(), fds_.end(), fd), fds_.end());
  }
  void abortAll() {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_.store(true, std::memory_order_release);
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
  }

 private:
  std::mutex mu_;
  std::vector<int> fds_;
  std::atomic<bool> aborted_{false};
};

// Declared after the Socket it tracks, so the fd leaves the list before the socket closes.
struct OutboundGuard {
  Outbound* outbound = nullptr;
  int fd = -1;
  ~OutboundGuard() {
    if (outbound && fd >= 0) outbound->remove(fd);
  }
};

// connectDeadline (when shorter) bounds the connect alone: control messages go to ranks whose
// listener exists, so a refused connection there is final, not a start-up race worth retrying.
Status openAndHello(const SocketAddress& address, const Secret* secret, HelloType type, int32_t fromRank, uint32_t tag,
                    uint32_t length, Deadline deadline, Socket* out, Deadline connectDeadline = Deadline::never(),
                    OutboundGuard* guard = nullptr) {
  Socket s;
  COLL_TRY(Socket::connect(address, connectDeadline.when() < deadline.when() ? connectDeadline : deadline, &s,
                           guard != nullptr && guard->outbound != nullptr ? guard->outbound->abortedFlag() : nullptr));
  if (guard != nullptr && guard->outbound != nullptr) {
    if (!guard->outbound->add(s.fd())) return makeError(collRemoteError, "bootstrap aborted");
    guard->fd = s.fd();
  }
  (void)s.setNoDelay(true);  // small request/reply exchanges: no Nagle/delayed-ACK stalls
  Status st = authenticate(s, secret, AuthRole::Connector, deadline, address.toString());
  uint8_t hello[kHelloWire];
  putHello(hello, type, fromRank, tag, length);
  if (st.ok()) st = s.sendAll(hello, sizeof(hello), deadline);
  if (!st.ok()) {
    if (guard != nullptr && guard->fd >= 0) guard->outbound->remove(guard->fd), guard->fd = -1;
    return st;
  }
  *out = std::move(s);
  return okStatus();
}

Status readReply(Socket& s, Deadline deadline) {
  uint8_t reply[4];
  COLL_TRY(s.recvAll(reply, sizeof(reply), deadline));
  if (get32(reply) != 0) {
    return makeError(collRemoteError, "the peer refused the message (code %u)", get32(reply));
  }
  return okStatus();
}

// ---- the root ---------------------------------------------------------------------------------

struct RootState {
  Socket listener;
  SocketAddress published;
  std::optional<Secret> secret;
  uint64_t commNonce = 0;
};

// A root serves one rendezvous. With one unique id it is root 0: every rank registers with it, and
// it sends the rank table to rank 0. With several (collCommInitRankScalable) root g serves block g
// of the ranks and sends the block back to the block's first rank (its leader, which waits on its
// registration's connection), and the leaders forward their blocks to root 0, so no root handles
// more than its block's registrations plus one message per block. Which root it is, it learns from
// the first registration.
std::atomic<uint32_t> gRootMessagesMax{0};

void serveRoot(std::unique_ptr<RootState> st, Deadline deadline) {
  const Secret* secret = st->secret ? &*st->secret : nullptr;
  const std::string where = st->published.toString();
  int nranks = -1, groups = -1, myGroup = -1, expected = -1;
  uint32_t messages = 1;  // the table or block it sends at the end
  // Keyed by rank: memory grows with registrations, not with a claimed nranks.
  std::map<int, PeerInfo> registered;
  Socket leader;  // root g > 0: the block's first rank, waiting for the block
  while (expected < 0 || static_cast<int>(registered.size()) < expected) {
    Socket c;
    SocketAddress peer;
    Status s = st->listener.accept(deadline, &c, &peer);
    if (!s.ok()) {
      if (s.code() == collTimeout) break;
      COLL_WARN(-1, "bootstrap root %s: %s", where.c_str(), s.message().c_str());
      continue;
    }
    (void)c.setNoDelay(true);
    Deadline hs = shorter(deadline, kHandshakeMs);
    const std::string from = peer.toString();
    if (!authenticate(c, secret, AuthRole::Acceptor, hs, from).ok()) continue;
    uint8_t reg[kRegWire];
    s = c.recvAll(reg, sizeof(reg), hs);
    if (!s.ok()) {
      COLL_WARN(-1, "bootstrap root %s: dropping %s: %s", where.c_str(), from.c_str(), s.message().c_str());
      continue;
    }
    BootstrapRegistration parsed;
    uint32_t code = parseBootstrapRegistration(reg, sizeof(reg), st->commNonce, nranks, &parsed);
    const int32_t rank = parsed.rank, claimed = parsed.nranks;
    // A forwarded block goes to root 0 only; a rank registers with its own block's root.
    const int role = parsed.blockCount > 0 ? 0 : parsed.group;
    if (code == kRegOk && ((groups >= 0 && parsed.groups != groups) || (myGroup >= 0 && role != myGroup))) {
      code = kRegGroupMismatch;
    }
    std::vector<PeerInfo> block;
    if (code == kRegOk && parsed.blockCount > 0) {
      std::vector<uint8_t> bytes(static_cast<size_t>(parsed.blockCount) * kEntryWire);
      if (!c.recvAll(bytes.data(), bytes.size(), shorter(deadline, kPayloadMs)).ok() ||
          !parseRankTable(bytes.data(), bytes.size(), static_cast<int>(parsed.blockCount), &block).ok()) {
        code = kRegMalformed;
      }
      for (size_t i = 0; code == kRegOk && i < block.size(); ++i) {
        if (registered.count(rank + static_cast<int>(i))) code = kRegDuplicate;
      }
    } else if (code == kRegOk && registered.count(rank)) {
      code = kRegDuplicate;
    }
    uint8_t reply[4];
    put32(reply, code);
    (void)c.sendAll(reply, sizeof(reply), hs);
    if (code != kRegOk) {
      COLL_WARN(-1, "bootstrap root %s: refused registration from %s (rank %d, nranks %d): %s", where.c_str(),
                from.c_str(), rank, claimed, regReplyText(code));
      continue;
    }
    if (nranks < 0) {
      nranks = claimed, groups = parsed.groups, myGroup = role;
      expected = myGroup == 0
                     ? nranks
                     : bootstrapGroupStart(myGroup + 1, groups, nranks) - bootstrapGroupStart(myGroup, groups, nranks);
    }
    ++messages;
    if (parsed.blockCount > 0) {
      for (size_t i = 0; i < block.size(); ++i) registered[rank + static_cast<int>(i)] = block[i];
    } else {
      registered[rank] = parsed.info;
      if (myGroup > 0 && rank == bootstrapGroupStart(myGroup, groups, nranks)) leader = std::move(c);
    }
    COLL_TRACE(-1, "bootstrap root %s: rank %d registered from %s (%zu of %d)", where.c_str(), rank, from.c_str(),
               registered.size(), expected);
  }
  st->listener.close();
  if (expected < 0 || static_cast<int>(registered.size()) < expected) {
    std::string missing;
    int shown = 0;
    const int first = myGroup > 0 ? bootstrapGroupStart(myGroup, groups, nranks) : 0;
    for (int r = first; r < first + std::max(expected, 0) && shown < 8; ++r) {
      if (!registered.count(r)) missing += (shown++ ? "," : "") + std::to_string(r);
    }
    COLL_WARN(-1,
              "bootstrap root %s: gave up at its deadline (COLL_TIMEOUT) with %zu of %d ranks "
              "registered; missing ranks include %s",
              where.c_str(), registered.size(), expected, missing.empty() ? "all" : missing.c_str());
    return;
  }
  // Entries in rank order: the whole table (root 0) or the block.
  std::vector<uint8_t> table(static_cast<size_t>(expected) * kEntryWire);
  size_t at = 0;
  for (auto& [r, info] : registered) putEntry(table.data() + kEntryWire * at++, info);
  Status st2;
  std::string to;
  if (myGroup > 0) {
    to = "its block to the block's first rank";
    st2 = leader.sendAll(table.data(), table.size(), deadline);
  } else {
    to = "the rank table to rank 0 at " + registered[0].address.toString();
    Socket s;
    st2 = openAndHello(registered[0].address, secret, kHelloTable, kRootSender, 0, static_cast<uint32_t>(table.size()),
                       deadline, &s);
    if (st2.ok()) st2 = s.sendAll(table.data(), table.size(), deadline);
    if (st2.ok()) st2 = readReply(s, deadline);
  }
  if (!st2.ok())
    COLL_WARN(-1, "bootstrap root %s: cannot send %s: %s", where.c_str(), to.c_str(), st2.message().c_str());
  uint32_t seen = gRootMessagesMax.load();
  while (seen < messages && !gRootMessagesMax.compare_exchange_weak(seen, messages)) {
  }
}

// ---- a rank's bootstrap ----------------------------------------------------------------------

class BootstrapImpl final : public Bootstrap {
 public:
  // `ids`: one per root (collCommInitRankScalable), else one. The communicator is ids[0]'s (its
  // secret authenticates every connection between ranks, its nonce names the communicator); a rank
  // registers with the root of its block.
  BootstrapImpl(int rank, int nranks, const std::vector<UniqueIdContents>& ids)
      : rank_(rank),
        nranks_(nranks),
        id_(ids[0]),
        groups_(static_cast<int>(ids.size())),
        group_(bootstrapGroupOf(rank, static_cast<int>(ids.size()), nranks)),
        rootId_(ids[static_cast<size_t>(group_)]),
        commHash_(hashOfId(ids[0])) {}

  ~BootstrapImpl() override {
    stopListener();
    if (listenerThread_.joinable()) listenerThread_.join();
    if (wakeFd_ >= 0) ::close(wakeFd_);
  }

  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }
  const PeerInfo& peer(int rank) const override { return peers_[rank]; }
  uint64_t commHash() const override { return commHash_; }

  Status init(uint64_t hostHash, uint32_t netMask, int32_t ringKey, Deadline deadline,
              const std::function<bool()>& interrupted);

  Status send(int peer, uint32_t tag, const void* data, size_t size, Deadline deadline) override {
    COLL_TRY(checkPeer(peer, "send"));
    if (size > kBootstrapMaxMessage) {
      return makeError(collInvalidArgument, "bootstrap send of %zu bytes exceeds the %zu-byte limit", size,
                       kBootstrapMaxMessage);
    }
    Socket s;
    OutboundGuard guard{&outbound_};
    Status st = openAndHello(peers_[peer].address, secret(), kHelloMessage, rank_, tag, static_cast<uint32_t>(size),
                             deadline, &s, Deadline::never(), &guard);
    if (st.ok()) st = s.sendAll(data, size, deadline);
    if (st.ok()) st = readReply(s, deadline);
    return st.withContext(peerContext("bootstrap send to", peer));
  }

  Status recv(int peer, uint32_t tag, std::vector<uint8_t>* data, size_t maxSize, Deadline deadline) override {
    COLL_TRY(checkPeer(peer, "recv"));
    std::unique_lock<std::mutex> lock(mu_);
    auto& q = messages_[{peer, tag}];
    COLL_TRY(waitFor(
        lock, [&] { return !q.empty(); }, deadline, peer, "a message"));
    std::vector<uint8_t> m = std::move(q.front());
    q.pop_front();
    if (m.size() > maxSize) {
      return makeError(collRemoteError,
                       "rank %d (%s) sent a %zu-byte bootstrap message (tag %u) where at most %zu "
                       "were expected (mismatched library versions?)",
                       peer, peers_[peer].address.toString().c_str(), m.size(), tag, maxSize);
    }
    *data = std::move(m);
    return okStatus();
  }

  Status connectData(int peer, uint32_t tag, Socket* out, Deadline deadline) override {
    COLL_TRY(checkPeer(peer, "connectData"));
    Socket s;
    OutboundGuard guard{&outbound_};
    Status st = openAndHello(peers_[peer].address, secret(), kHelloData, rank_, tag, 0, deadline, &s, Deadline::never(),
                             &guard);
    if (st.ok()) st = readReply(s, deadline);
    COLL_TRY(st.withContext(peerContext("data connection to", peer)));
    *out = std::move(s);
    return okStatus();
  }

  Status acceptData(int peer, uint32_t tag, Socket* out, Deadline deadline) override {
    COLL_TRY(checkPeer(peer, "acceptData"));
    std::unique_lock<std::mutex> lock(mu_);
    auto& q = data_[{peer, tag}];
    COLL_TRY(waitFor(
        lock, [&] { return !q.empty(); }, deadline, peer, "a data connection"));
    *out = std::move(q.front());
    q.pop_front();
    return okStatus();
  }

  void abort() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      aborted_ = true;
    }
    cv_.notify_all();
    stopListener();
    outbound_.abortAll();
  }

  void breakControls() override { controls_.abortAll(); }

  void setControlHandler(ControlHandler handler) override {
    std::lock_guard<std::mutex> lock(controlMu_);  // waits for a handler call in progress
    controlHandler_ = std::move(handler);
  }

  Status control(int peer, uint32_t tag, const void* data, size_t size, std::vector<uint8_t>* reply,
                 Deadline deadline) override {
    COLL_TRY(checkPeer(peer, "control"));
    if (!isControlTag(tag) || size > kControlMaxPayload) {
      return makeError(collInternalError, "bootstrap control message: tag %#x / %zu bytes", tag, size);
    }
    // Not broken by abort(): notices still go out while a communicator aborts (short deadlines),
    // until breakControls().
    Socket s;
    OutboundGuard guard{&controls_};
    Status st = openAndHello(peers_[peer].address, secret(), kHelloMessage, rank_, tag, static_cast<uint32_t>(size),
                             deadline, &s, Deadline::afterMs(kControlConnectMs), &guard);
    if (st.ok() && size > 0) st = s.sendAll(data, size, deadline);
    uint8_t head[8];
    if (st.ok()) st = s.recvAll(head, sizeof(head), deadline);
    if (st.ok() && get32(head) != 0)
      st = makeError(collRemoteError, "the peer refused the message (code %u)", get32(head));
    const uint32_t n = st.ok() ? get32(head + 4) : 0;
    if (st.ok() && n > kCtlMaxReply)
      st = makeError(collRemoteError, "control reply of %u bytes (at most %zu)", n, kCtlMaxReply);
    if (st.ok()) {
      reply->resize(n);
      if (n > 0) st = s.recvAll(reply->data(), n, deadline);
    }
    return st.withContext("control message to rank " + std::to_string(peer) + " at " + peers_[peer].address.toString());
  }

 private:
  const Secret* secret() const { return id_.authenticated ? &id_.secret : nullptr; }
  const Secret* rootSecret() const { return rootId_.authenticated ? &rootId_.secret : nullptr; }
  uint32_t rendezvousMessagesSent() const override { return rendezvousMessages_; }
  // Registers `reg` (and a forwarded block's entries) with the root of `root`; `s` stays open.
  Status registerWith(const UniqueIdContents& root, const Secret* rootSecret, const BootstrapRegistration& reg,
                      const std::vector<uint8_t>& block, Deadline deadline, Socket* s);

  std::string peerContext(const char* what, int peer) const {
    return std::string(what) + " rank " + std::to_string(peer) + " at " + peers_[peer].address.toString() +
           " (check that it is alive and reachable: "
           "COLL_SOCKET_IFNAME, COLL_TIMEOUT)";
  }

  Status checkPeer(int peer, const char* op) const {
    if (peer < 0 || peer >= nranks_ || peers_.empty()) {
      return makeError(collInvalidArgument,
                       "bootstrap %s: peer %d is not a rank of this %d-rank "
                       "communicator",
                       op, peer, nranks_);
    }
    return okStatus();
  }

  template <typename Pred>
  Status waitFor(std::unique_lock<std::mutex>& lock, Pred ready, Deadline deadline, int peer, const char* what) {
    while (!ready()) {
      if (aborted_) return makeError(collRemoteError, "bootstrap aborted while waiting for %s", what);
      if (deadline.expired()) {
        std::string from = peer == kRootSender ? std::string("the root/tree parent")
                                               : "rank " + std::to_string(peer) +
                                                     (peers_.empty() ? "" : " at " + peers_[peer].address.toString());
        return makeError(collTimeout,
                         "rank %d: timed out waiting for %s from %s (check that it is "
                         "alive and reachable: COLL_SOCKET_IFNAME, COLL_TIMEOUT)",
                         rank_, what, from.c_str());
      }
      cv_.wait_for(lock, std::chrono::milliseconds(std::min(deadline.remainingMs(), 1000) + 1));
    }
    return okStatus();
  }

  void stopListener() {
    stopping_.store(true);
    if (wakeFd_ >= 0) {
      uint64_t one = 1;
      ssize_t n = ::write(wakeFd_, &one, sizeof(one));
      (void)n;
    }
    // Break a handshake in progress so destruction is prompt even with a stalled client.
    std::lock_guard<std::mutex> lock(handshakeMu_);
    if (handshakeFd_ >= 0) ::shutdown(handshakeFd_, SHUT_RDWR);
  }

  void listenLoop();
  void handleConnection(Socket& s, const SocketAddress& from);
  // A control message (failure.h tags): answered on this thread, its reply in the acknowledgement.
  void handleControl(Socket& s, int32_t fromRank, uint32_t tag, uint32_t length, Deadline deadline);
  static constexpr size_t kControlMaxPayload = 8 + kCtlMaxReason;
  static constexpr int kControlConnectMs = 100;
  void clearHandshakeFd() {
    std::lock_guard<std::mutex> lock(handshakeMu_);
    handshakeFd_ = -1;
  }
  size_t tableBytes() const { return static_cast<size_t>(nranks_) * kEntryWire; }

  const int rank_, nranks_;
  const UniqueIdContents id_;
  const int groups_, group_;  // roots (ids) and this rank's block
  const UniqueIdContents rootId_;
  const uint64_t commHash_;
  uint32_t rendezvousMessages_ = 0;  // written by init only
  std::vector<PeerInfo> peers_;  // written once in init, read-only afterwards
  Socket listener_;
  SocketAddress myAddress_;
  int wakeFd_ = -1;
  std::thread listenerThread_;
  std::atomic<bool> stopping_{false};
  std::mutex handshakeMu_;
  int handshakeFd_ = -1;

  std::mutex mu_;
  std::condition_variable cv_;
  bool aborted_ = false;
  std::map<std::pair<int, uint32_t>, std::deque<std::vector<uint8_t>>> messages_;
  std::map<std::pair<int, uint32_t>, std::deque<Socket>> data_;
  std::optional<std::vector<uint8_t>> table_;
  Outbound outbound_;     // exchanges abort() breaks
  Outbound controls_;     // control exchanges, which breakControls() breaks
  std::mutex controlMu_;  // held while the handler runs, so clearing it waits for a call in progress
  ControlHandler controlHandler_;
};

void BootstrapImpl::listenLoop() {
  while (!stopping_.load()) {
    pollfd fds[2] = {{listener_.fd(), POLLIN, 0}, {wakeFd_, POLLIN, 0}};
    int rc = ::poll(fds, 2, 1000);
    if (rc < 0 && errno != EINTR) {
      COLL_WARN(rank_, "bootstrap listener: poll failed: %s", errnoText(errno).c_str());
      break;
    }
    if (rc <= 0) continue;
    if (fds[1].revents) break;
    Socket s;
    SocketAddress from;
    if (!listener_.accept(Deadline::afterMs(0), &s, &from).ok()) continue;
    {
      std::lock_guard<std::mutex> lock(handshakeMu_);
      if (stopping_.load()) break;
      handshakeFd_ = s.fd();
    }
    handleConnection(s, from);
    clearHandshakeFd();  // before `s` closes, so stopListener never touches a reused fd number
  }
  listener_.close();
}

void BootstrapImpl::handleConnection(Socket& s, const SocketAddress& fromAddress) {
  const std::string from = fromAddress.toString();
  (void)s.setNoDelay(true);
  Deadline hs = Deadline::afterMs(kHandshakeMs);
  if (!authenticate(s, secret(), AuthRole::Acceptor, hs, from).ok()) return;
  uint8_t hello[kHelloWire];
  Status st = s.recvAll(hello, sizeof(hello), hs);
  if (!st.ok()) {
    COLL_WARN(rank_, "bootstrap listener: dropping %s: %s", from.c_str(), st.message().c_str());
    return;
  }
  BootstrapHello parsed;
  const char* bad = parseBootstrapHello(hello, sizeof(hello), nranks_, &parsed);
  const uint32_t type = parsed.type, tag = parsed.tag, length = parsed.length;
  const int32_t fromRank = parsed.fromRank;
  if (bad) {
    COLL_WARN(rank_,
              "bootstrap listener: dropping connection from %s: %s (type %u, rank %d, "
              "length %u)",
              from.c_str(), bad, type, fromRank, length);
    return;
  }
  uint8_t ok[4];
  put32(ok, 0);
  if (type == kHelloData) {
    if (!s.sendAll(ok, sizeof(ok), hs).ok()) return;
    clearHandshakeFd();  // the socket now belongs to acceptData's caller: stop must not shut it
    {
      std::lock_guard<std::mutex> lock(mu_);
      data_[{fromRank, tag}].push_back(std::move(s));
    }
    cv_.notify_all();
    return;
  }
  if (type == kHelloMessage && isControlTag(tag)) {
    handleControl(s, fromRank, tag, length, hs);
    return;
  }
  std::vector<uint8_t> payload(length);
  st = s.recvAll(payload.data(), payload.size(), Deadline::afterMs(kPayloadMs));
  if (!st.ok()) {
    COLL_WARN(rank_, "bootstrap listener: dropping a message from rank %d at %s: %s", fromRank, from.c_str(),
              st.message().c_str());
    return;
  }
  // Acknowledge before filing: once filed, the receiver may finish and close this listener, and
  // the sender must not see that as a lost message.
  if (!s.sendAll(ok, sizeof(ok), hs).ok()) {
    COLL_WARN(rank_, "bootstrap listener: could not acknowledge a message from rank %d at %s", fromRank, from.c_str());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (type == kHelloTable) {
      if (!table_) table_ = std::move(payload);
    } else {
      messages_[{fromRank, tag}].push_back(std::move(payload));
    }
  }
  cv_.notify_all();
}

void BootstrapImpl::handleControl(Socket& s, int32_t fromRank, uint32_t tag, uint32_t length, Deadline deadline) {
  if (length > kControlMaxPayload) {
    COLL_WARN(rank_, "bootstrap listener: dropping a %u-byte control message (tag %#x) from rank %d", length, tag,
              fromRank);
    return;
  }
  std::vector<uint8_t> payload(length);
  if (length > 0 && !s.recvAll(payload.data(), payload.size(), deadline).ok()) return;
  std::vector<uint8_t> reply;
  {
    std::lock_guard<std::mutex> lock(controlMu_);
    if (controlHandler_) reply = controlHandler_(fromRank, tag, payload);
  }
  if (reply.size() > kCtlMaxReply) reply.resize(kCtlMaxReply);
  std::vector<uint8_t> out(8 + reply.size());
  put32(out.data(), 0);
  put32(out.data() + 4, static_cast<uint32_t>(reply.size()));
  if (!reply.empty()) memcpy(out.data() + 8, reply.data(), reply.size());
  (void)s.sendAll(out.data(), out.size(), deadline);
}

Status BootstrapImpl::init(uint64_t hostHash, uint32_t netMask, int32_t ringKey, Deadline deadline,
                           const std::function<bool()>& interrupted) {
  // Where to listen: COLL_SOCKET_IFNAME wins; a root on loopback means a single-host job;
  // otherwise the selected interface, preferring the root's address family.
  NetInterface ni;
  if (kSocketIfname.raw()) {
    COLL_TRY(selectInterface(&ni));
  } else if (id_.root.isLoopback()) {
    COLL_TRY(localAddressTowards(id_.root, &ni.address));
  } else {
    COLL_TRY(selectInterfacePreferring(id_.root.family(), &ni));
  }
  ni.address.setPort(0);
  COLL_TRY(Socket::listen(ni.address, SOMAXCONN, &listener_, &myAddress_));
  wakeFd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wakeFd_ < 0) return makeError(collSystemError, "eventfd failed: %s", errnoText(errno).c_str());
  listenerThread_ = std::thread([this] { listenLoop(); });

  PeerInfo me;
  me.address = myAddress_;
  me.hostHash = hostHash;
  me.pid = static_cast<int32_t>(getpid());
  me.netMask = netMask;
  me.ringKey = ringKey;
  me.machineHash = hashHostIdentity(localMachineIdentity());
  me.cpus = localMachineCpus();
  BootstrapRegistration reg;
  reg.rank = rank_;
  reg.nranks = nranks_;
  reg.info = me;
  reg.groups = groups_;
  reg.group = group_;
  {
    Socket s;
    COLL_TRY(registerWith(rootId_, rootSecret(), reg, {}, deadline, &s));
    const int start = bootstrapGroupStart(group_, groups_, nranks_);
    if (group_ > 0 && rank_ == start) {
      // This rank leads its block: its root sends the block back when complete, and the rank
      // forwards it to root 0.
      const int count = bootstrapGroupStart(group_ + 1, groups_, nranks_) - start;
      std::vector<uint8_t> block(static_cast<size_t>(count) * kEntryWire);
      std::vector<PeerInfo> entries;
      COLL_TRY(s.recvAll(block.data(), block.size(), deadline)
                   .withContext("rank " + std::to_string(rank_) + ": waiting for block " + std::to_string(group_) +
                                " from its bootstrap root at " + rootId_.root.toString()));
      COLL_TRY(parseRankTable(block.data(), block.size(), count, &entries)
                   .withContext("rank " + std::to_string(rank_) + ": the block from its root"));
      if (!(entries[0].address == myAddress_) || entries[0].pid != me.pid) {
        return makeError(collRemoteError, "rank %d: its root's block lists %s for this rank, not our listener %s",
                         rank_, entries[0].address.toString().c_str(), myAddress_.toString().c_str());
      }
      s.close();
      BootstrapRegistration forward = reg;
      forward.blockCount = static_cast<uint32_t>(count);
      Socket s0;
      COLL_TRY(registerWith(id_, secret(), forward, block, deadline, &s0));
    }
  }

  std::vector<uint8_t> table;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (interrupted) {
      // In slices, asking between them (the interruption is another object's state: no notify).
      constexpr int kSliceMs = 50;
      while (!table_.has_value()) {
        if (interrupted()) {
          return makeError(collRemoteError, "rank %d: the rendezvous was given up while waiting for the rank table",
                           rank_);
        }
        const Deadline slice = Deadline::afterMs(std::min(kSliceMs, deadline.remainingMs()));
        Status st = waitFor(
            lock, [&] { return table_.has_value(); }, slice, kRootSender, "the rank table");
        if (!st.ok() && (st.code() != collTimeout || deadline.expired())) return st;
      }
    } else {
      COLL_TRY(waitFor(
          lock, [&] { return table_.has_value(); }, deadline, kRootSender, "the rank table"));
    }
    table = *table_;
  }
  std::vector<PeerInfo> peers;
  COLL_TRY(parseRankTable(table.data(), table.size(), nranks_, &peers)
               .withContext("rank " + std::to_string(rank_) + ": the rank table from the root"));
  if (!(peers[rank_].address == myAddress_) || peers[rank_].pid != me.pid) {
    return makeError(collRemoteError,
                     "rank %d: the rank table lists %s for this rank, not our "
                     "listener %s (two processes registered as rank %d?)",
                     rank_, peers[rank_].address.toString().c_str(), myAddress_.toString().c_str(), rank_);
  }
  peers_ = std::move(peers);

  int64_t fanout = std::clamp<int64_t>(kBootstrapFanout.get(), 1, 1 << 16);
  for (int64_t c = static_cast<int64_t>(rank_) * fanout + 1;
       c <= static_cast<int64_t>(rank_) * fanout + fanout && c < nranks_; ++c) {
    int child = static_cast<int>(c);
    Socket s;
    Status st = openAndHello(peers_[child].address, secret(), kHelloTable, rank_, 0,
                             static_cast<uint32_t>(table.size()), deadline, &s);
    if (st.ok()) st = s.sendAll(table.data(), table.size(), deadline);
    if (st.ok()) st = readReply(s, deadline);
    COLL_TRY(st.withContext(peerContext("forwarding the rank table to", child)));
    ++rendezvousMessages_;
  }
  COLL_INFO(rank_, "bootstrap: %d ranks, listening on %s", nranks_, myAddress_.toString().c_str());
  return okStatus();
}

Status BootstrapImpl::registerWith(const UniqueIdContents& root, const Secret* rootSecret,
                                   const BootstrapRegistration& reg, const std::vector<uint8_t>& block,
                                   Deadline deadline, Socket* s) {
  const std::string where = root.root.toString();
  auto ctx = [&](const char* what) {
    return "rank " + std::to_string(rank_) + ": " + what + " the bootstrap root at " + where +
           " (is rank 0 / the root running and reachable? check COLL_SOCKET_IFNAME, COLL_TIMEOUT)";
  };
  ++rendezvousMessages_;
  COLL_TRY(Socket::connect(root.root, deadline, s).withContext(ctx("cannot reach")));
  (void)s->setNoDelay(true);
  COLL_TRY(
      authenticate(*s, rootSecret, AuthRole::Connector, deadline, where).withContext(ctx("cannot authenticate with")));
  std::vector<uint8_t> bytes(kRegWire + block.size());
  putRegistration(bytes.data(), reg, root.commNonce);
  if (!block.empty()) memcpy(bytes.data() + kRegWire, block.data(), block.size());
  COLL_TRY(s->sendAll(bytes.data(), bytes.size(), deadline).withContext(ctx("cannot register with")));
  uint8_t reply[4];
  COLL_TRY(s->recvAll(reply, sizeof(reply), deadline).withContext(ctx("no reply from")));
  if (get32(reply) != kRegOk) {
    return makeError(collInvalidUsage,
                     "rank %d: the bootstrap root at %s refused the registration (rank %d of %d%s): %s", rank_,
                     where.c_str(), reg.rank, reg.nranks, reg.blockCount > 0 ? ", forwarding its block" : "",
                     regReplyText(get32(reply)));
  }
  return okStatus();
}

}  // namespace

// ---- unique ids -------------------------------------------------------------------------------

Status encodeUniqueId(const UniqueIdContents& c, collUniqueId* out) {
  uint8_t* p = reinterpret_cast<uint8_t*>(out->internal);
  memset(p, 0, COLL_UNIQUE_ID_BYTES);
  put32(p, kIdMagic);
  put16(p + 4, kIdVersion);
  p[6] = c.authenticated ? 1 : 0;
  if (!putSocketAddress(p + 8, c.root) || c.root.port() == 0) {
    return makeError(collInvalidArgument,
                     "unique id: the root address %s is not an IPv4/IPv6 "
                     "address with a port",
                     c.root.toString().c_str());
  }
  memcpy(p + 32, c.secret.data(), c.secret.size());
  put64(p + 48, c.commNonce);
  put32(p + 56, c.growFrom);
  return okStatus();
}

Status decodeUniqueId(const collUniqueId& id, UniqueIdContents* out) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(id.internal);
  if (get32(p) != kIdMagic) {
    return makeError(collInvalidArgument,
                     "not a unique id (bad magic): pass the collUniqueId that "
                     "collGetUniqueId filled on the root, unmodified, to every rank");
  }
  if (get16(p + 4) != kIdVersion) {
    return makeError(collInvalidArgument,
                     "unique id version %u is not %u: all ranks must run the "
                     "same libcollective version",
                     get16(p + 4), kIdVersion);
  }
  if (p[6] > 1) return makeError(collInvalidArgument, "unique id: corrupt flags");
  UniqueIdContents c;
  if (!getSocketAddress(p + 8, &c.root)) {
    return makeError(collInvalidArgument, "unique id: corrupt root address (family code %u)", p[8]);
  }
  c.authenticated = p[6] == 1;
  memcpy(c.secret.data(), p + 32, c.secret.size());
  c.commNonce = get64(p + 48);
  c.growFrom = get32(p + 56);
  if (c.growFrom > static_cast<uint32_t>(kBootstrapMaxRanks)) {
    return makeError(collInvalidArgument, "unique id: corrupt grow size %u", c.growFrom);
  }
  *out = c;
  return okStatus();
}

// ---- parsers of remote bytes (wire.h) ----------------------------------------------------------

static_assert(kBootstrapHelloBytes == kHelloWire && kBootstrapEntryBytes == kEntryWire &&
              kBootstrapRegistrationBytes == kRegWire);

const char* parseBootstrapHello(const uint8_t* p, size_t size, int nranks, BootstrapHello* out) {
  *out = BootstrapHello{};
  if (size != kHelloWire) return "truncated hello";
  out->type = get32(p + 4);
  out->fromRank = static_cast<int32_t>(get32(p + 8));
  out->tag = get32(p + 12);
  out->length = get32(p + 16);
  const uint32_t type = out->type, length = out->length;
  const int32_t fromRank = out->fromRank;
  const bool rankOk = fromRank >= 0 && fromRank < nranks;
  if (get32(p) != kHelloMagic) return "bad magic";
  if (nranks < 1 || nranks > kBootstrapMaxRanks) return "no communicator to receive for";
  if (type == kHelloMessage) {
    if (!rankOk) return "sender rank out of range";
    if (length > kBootstrapMaxMessage) return "message larger than 16 MiB";
    return nullptr;
  }
  if (type == kHelloData) return rankOk && length == 0 ? nullptr : "bad data hello";
  if (type == kHelloTable) {
    if (length != static_cast<uint64_t>(nranks) * kEntryWire || (fromRank != kRootSender && !rankOk)) {
      return "rank table of the wrong size (ranks disagree on nranks?)";
    }
    return nullptr;
  }
  return "unknown type";
}

uint32_t parseBootstrapRegistration(const uint8_t* p, size_t size, uint64_t commNonce, int knownNranks,
                                    BootstrapRegistration* out) {
  *out = BootstrapRegistration{};
  if (size != kRegWire) return kRegMalformed;
  out->rank = static_cast<int32_t>(get32(p + 8));
  out->nranks = static_cast<int32_t>(get32(p + 12));
  if (get32(p) != kRegMagic || get32(p + 4) != kRegVersion || !getEntry(p + 24, &out->info)) {
    return kRegMalformed;
  }
  if (get64(p + 16) != commNonce) return kRegNonceMismatch;
  const int32_t claimed = out->nranks;
  if (claimed < 1 || claimed > kBootstrapMaxRanks || (knownNranks >= 0 && claimed != knownNranks)) {
    return kRegNranksMismatch;
  }
  if (out->rank < 0 || out->rank >= claimed) return kRegBadRank;
  out->groups = static_cast<int32_t>(get32(p + 24 + kEntryWire));
  out->group = static_cast<int32_t>(get32(p + 28 + kEntryWire));
  out->blockCount = get32(p + 32 + kEntryWire);
  if (out->groups < 1 || out->groups > claimed || out->group < 0 || out->group >= out->groups) {
    return kRegGroupMismatch;
  }
  const int start = bootstrapGroupStart(out->group, out->groups, claimed);
  const int end = bootstrapGroupStart(out->group + 1, out->groups, claimed);
  if (out->blockCount == 0) return out->rank >= start && out->rank < end ? kRegOk : kRegGroupMismatch;
  // A forwarded block: from its first rank, whole, and never block 0 (root 0 has that itself).
  if (out->group == 0 || out->rank != start || out->blockCount != static_cast<uint32_t>(end - start)) {
    return kRegGroupMismatch;
  }
  return kRegOk;
}

int bootstrapGroupStart(int group, int groups, int nranks) {
  return static_cast<int>(static_cast<int64_t>(group) * nranks / std::max(groups, 1));
}

int bootstrapGroupOf(int rank, int groups, int nranks) {
  int g = static_cast<int>(static_cast<int64_t>(rank) * groups / std::max(nranks, 1));
  while (g + 1 < groups && bootstrapGroupStart(g + 1, groups, nranks) <= rank) ++g;
  while (g > 0 && bootstrapGroupStart(g, groups, nranks) > rank) --g;
  return g;
}

Status parseRankTable(const uint8_t* p, size_t size, int nranks, std::vector<PeerInfo>* out) {
  if (nranks < 1 || nranks > kBootstrapMaxRanks || size != static_cast<size_t>(nranks) * kEntryWire) {
    return makeError(collRemoteError, "rank table of %zu bytes for %d ranks (ranks disagree on nranks?)", size, nranks);
  }
  std::vector<PeerInfo> peers(static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) {
    if (!getEntry(p + static_cast<size_t>(r) * kEntryWire, &peers[static_cast<size_t>(r)])) {
      return makeError(collRemoteError, "the rank table has a malformed entry for rank %d", r);
    }
  }
  *out = std::move(peers);
  return okStatus();
}

// ---- root -------------------------------------------------------------------------------------

namespace {

// A root listener serving one rendezvous until lifetimeMs have passed; its id carries `contents`
// with the published address.
Status startRoot(const SocketAddress& bindAddress, const Secret* secret, UniqueIdContents contents, int64_t lifetimeMs,
                 collUniqueId* id) {
  SocketAddress bind = bindAddress;
  if (bind.length == 0) {
    NetInterface ni;
    COLL_TRY(selectInterface(&ni));
    bind = ni.address;
    bind.setPort(0);
  }
  auto st = std::make_unique<RootState>();
  SocketAddress bound;
  COLL_TRY(Socket::listen(bind, SOMAXCONN, &st->listener, &bound));
  st->published = bound;
  if (bound.isWildcard()) {
    NetInterface ni;
    COLL_TRY(selectInterfacePreferring(bound.family(), &ni));
    st->published = ni.address;
    st->published.setPort(bound.port());
  }
  if (secret) st->secret = *secret;
  st->commNonce = contents.commNonce;
  contents.root = st->published;
  if (secret) contents.secret = *secret;
  contents.authenticated = secret != nullptr;
  COLL_TRY(encodeUniqueId(contents, id));
  Deadline deadline = Deadline::afterMs(lifetimeMs);
  COLL_INFO(-1, "bootstrap root listening on %s (%s%s)", st->published.toString().c_str(),
            secret ? "authenticated" : "unauthenticated", contents.growFrom ? ", grow" : "");
  std::thread(serveRoot, std::move(st), deadline).detach();
  return okStatus();
}

Status randomNonce(uint64_t* out) {
  Secret bytes;
  COLL_TRY(randomSecret(&bytes));
  *out = get64(bytes.data());
  return okStatus();
}

}  // namespace

Status startBootstrapRoot(const SocketAddress& bindAddress, const Secret* secret, uint64_t commNonce,
                          collUniqueId* id) {
  UniqueIdContents c;
  c.commNonce = commNonce;
  return startRoot(bindAddress, secret, c, defaultTimeoutMs(), id);
}

uint32_t bootstrapRootMessagesMax(bool reset) { return reset ? gRootMessagesMax.exchange(0) : gRootMessagesMax.load(); }

Status startBootstrapRoot(const SocketAddress& bindAddress, const Secret* secret, collUniqueId* id) {
  uint64_t nonce = 0;
  COLL_TRY(randomNonce(&nonce));
  return startBootstrapRoot(bindAddress, secret, nonce, id);
}

Status startGrowRoot(const SocketAddress& bindAddress, const Secret& secret, uint32_t growFrom, int64_t lifetimeMs,
                     collUniqueId* id, uint64_t* nonce) {
  UniqueIdContents c;
  c.growFrom = growFrom;
  COLL_TRY(randomNonce(&c.commNonce));
  COLL_TRY(startRoot(bindAddress, &secret, c, lifetimeMs, id));
  *nonce = c.commNonce;
  return okStatus();
}

// ---- Bootstrap::create ------------------------------------------------------------------------

Status Bootstrap::create(const collUniqueId& id, int rank, int nranks, uint64_t hostHash, Deadline deadline,
                         std::unique_ptr<Bootstrap>* out) {
  return create(id, rank, nranks, hostHash, 0, deadline, out);
}

Status Bootstrap::create(const collUniqueId& id, int rank, int nranks, uint64_t hostHash, uint32_t netMask,
                         Deadline deadline, std::unique_ptr<Bootstrap>* out, const std::function<bool()>& interrupted) {
  return create(std::vector<collUniqueId>{id}, rank, nranks, hostHash, netMask, deadline, out, interrupted);
}

Status Bootstrap::create(const std::vector<collUniqueId>& ids, int rank, int nranks, uint64_t hostHash,
                         uint32_t netMask, Deadline deadline, std::unique_ptr<Bootstrap>* out,
                         const std::function<bool()>& interrupted, int32_t ringKey) {
  if (nranks < 1 || nranks > kBootstrapMaxRanks) {
    return makeError(collInvalidArgument, "nranks %d is outside 1..%d", nranks, kBootstrapMaxRanks);
  }
  if (rank < 0 || rank >= nranks) {
    return makeError(collInvalidArgument, "rank %d is outside 0..%d", rank, nranks - 1);
  }
  if (ids.empty() || ids.size() > static_cast<size_t>(nranks)) {
    return makeError(collInvalidArgument, "%zu unique ids for %d ranks: pass 1 to nranks ids", ids.size(), nranks);
  }
  std::vector<UniqueIdContents> contents(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    COLL_TRY(decodeUniqueId(ids[i], &contents[i]).withContext("unique id " + std::to_string(i)));
    if (ids.size() > 1 && (contents[i].growFrom != 0 || contents[i].authenticated != contents[0].authenticated)) {
      return makeError(collInvalidArgument, "unique id %zu cannot be one of several roots: %s", i,
                       contents[i].growFrom != 0 ? "it is a grow id" : "ids with and without a secret are mixed");
    }
  }
  auto b = std::make_unique<BootstrapImpl>(rank, nranks, contents);
  if (ringKey < -1 || ringKey > kBootstrapMaxRingKey) {
    return makeError(collInternalError, "ring key %d is outside -1..%d", ringKey, kBootstrapMaxRingKey);
  }
  COLL_TRY(b->init(hostHash, netMask, ringKey, deadline, interrupted));
  *out = std::move(b);
  return okStatus();
}

}  // namespace coll
