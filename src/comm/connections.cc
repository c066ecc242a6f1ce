// The links of a communicator (see connections.h).
#include "src/comm/connections.h"

#include <poll.h>

#include <algorithm>

#include "src/base/align.h"
#include "src/base/config.h"
#include "src/base/log.h"
#include "transports/net.h"
#include "transports/shm/shm_transport.h"

namespace coll {

const StringKnob kTransport("COLL_TRANSPORT", "",
                            "Force one transport for every peer, same host included: shm, tcp, ucx or ib (testing). "
                            "Takes precedence over COLL_NET.",
                            {KnobSection::Transports, 10});
const StringKnob kNet("COLL_NET", "",
                      "Transport between hosts: ib, ucx or tcp. Unset: the best one every rank has (ib, then ucx where "
                      "UCX drives an RDMA device, then tcp), logged at INFO. Ignored when COLL_TRANSPORT is set.",
                      {KnobSection::Transports, 30});
Connections::Connections(const Topology& topo, FailureManager& failure) : topo_(topo), failure_(failure) {}

Connections::~Connections() { close(); }

void Connections::close() {
  if (net_) net_->stopIdleProgress();  // its thread may be progressing the connections
  madeConnections_.clear();
  connections_.clear();
  net_.reset();
  shm_.reset();
}

Status Connections::readForcedTransport(uint32_t* availableNets) {
  // COLL_TRANSPORT names one transport for every peer; shm is special (no net at all).
  const std::string forced = kTransport.get();
  NetKind ignored;
  if (forced == "shm") forced_ = TransportKind::Shm;
  else if (netKindFromName(forced, &ignored)) forced_ = TransportKind::Net;
  else if (!forced.empty())
    return makeError(collInvalidUsage, "COLL_TRANSPORT=%s is not a transport (known: shm, tcp, ucx, ib)",
                     forced.c_str());
  *availableNets = probeNetAvailability(&netUnavailable_);
  return okStatus();
}

Status Connections::checkForcedTransport() const {
  if (forced_ == TransportKind::Shm && !topo_.singleHost()) {
    return makeError(collInvalidUsage,
                     "COLL_TRANSPORT=shm but the ranks are on %d hosts; shared memory only reaches ranks on one host",
                     topo_.nhosts);
  }
  return okStatus();
}

Status Connections::open(Bootstrap& bootstrap, const std::string& configNetName, int trafficClass, int64_t timeoutMs,
                         Deadline deadline) {
  bootstrap_ = &bootstrap;
  timeoutMs_ = timeoutMs;
  COLL_TRY(chooseNet(configNetName, trafficClass));
  if (forced_ != TransportKind::Net) {
    ShmOptions shmOptions = shmOptionsFromConfig();
    COLL_TRY(ShmHost::create(bootstrap, topo_, shmOptions, deadline, &shm_).withContext("shared memory setup"));
  }
  connections_.resize(static_cast<size_t>(topo_.nranks));
  // The machine's ranks, not the host's: ranks in other network namespaces or containers of this
  // machine spin on the same cores.
  waitPolicy_ = waitPolicyFor(topo_.machineSize());
  waitPolicy_.timeoutMs = timeoutMs;
  return okStatus();
}

Status Connections::chooseNet(const std::string& configNetName, int trafficClass) {
  if (forced_ == TransportKind::Shm) return okStatus();
  // Precedence: COLL_TRANSPORT (every peer), then COLL_NET, then the config's netName, then the
  // best transport that every rank published as available.
  std::string source, wanted = kTransport.get();
  if (!wanted.empty()) source = "COLL_TRANSPORT";
  else if (!(wanted = kNet.get()).empty()) source = "COLL_NET";
  else if (!configNetName.empty()) source = "config.netName", wanted = configNetName;
  uint32_t everyone = ~0u;
  int lacking[kNetKinds] = {-1, -1, -1};  // a rank without each transport, for the error
  for (int r = 0; r < topo_.nranks; ++r) {
    const uint32_t m = bootstrap_->peer(r).netMask;
    everyone &= m;
    for (int k = 0; k < kNetKinds; ++k)
      if (!(m & (1u << k)) && lacking[k] < 0) lacking[k] = r;
  }
  NetKind kind = NetKind::Tcp;
  if (!source.empty()) {
    if (!netKindFromName(wanted, &kind)) {
      return makeError(collInvalidUsage, "%s=%s is not a transport between hosts (known: ib, ucx, tcp)", source.c_str(),
                       wanted.c_str());
    }
    const int missing = lacking[static_cast<int>(kind)];
    if (missing >= 0) {
      if (missing == rank()) {
        return makeError(collInvalidUsage, "%s=%s, but this rank cannot use it: %s", source.c_str(), wanted.c_str(),
                         netUnavailable_.c_str());
      }
      return makeError(collInvalidUsage, "%s=%s, but rank %d (%s) cannot use it (its log says why)", source.c_str(),
                       wanted.c_str(), missing, bootstrap_->peer(missing).address.toString().c_str());
    }
  } else {
    const uint32_t candidates = automaticNetMask(everyone);
    for (int k = 0; k < kNetKinds; ++k) {
      if (candidates & (1u << k)) {
        kind = static_cast<NetKind>(k);
        break;
      }
    }
  }
  COLL_TRY(createNet(kind, *bootstrap_, trafficClass, &net_)
               .withContext(std::string("creating the ") + netKindName(kind) + " transport"));
  if (rank() == 0 && (topo_.nhosts > 1 || forced_ == TransportKind::Net)) {
    COLL_INFO(rank(), "transport between hosts: %s (%s)", net_->describe().c_str(),
              source.empty() ? "automatic: the best one every rank has" : source.c_str());
  }
  return okStatus();
}

Status Connections::connection(int peer, Connection** out) {
  if (peer < 0 || peer >= topo_.nranks) return makeError(collInternalError, "no rank %d", peer);
  std::unique_ptr<Connection>& slot = connections_[peer];
  if (!slot) {
    bool useShm = forced_ == TransportKind::Shm || (forced_ == TransportKind::Auto && topo_.sameHost(rank(), peer));
    if (useShm) {
      COLL_TRY(shm_->connection(peer, &slot));
      COLL_INFO(rank(), "connected to rank %d over shm", peer);
    } else {
      const char* via = netKindName(net_->kind());
      Status st = net_->connect(peer, Deadline::afterMs(timeoutMs_), &slot)
                      .withContext("connecting to rank " + std::to_string(peer) + " (" +
                                   bootstrap_->peer(peer).address.toString() + ") over " + via);
      if (!st.ok()) return failure_.connectFailed(peer, st);
      netUsed_ = true;
      COLL_INFO(rank(), "connected to rank %d (%s) over %s", peer, bootstrap_->peer(peer).address.toString().c_str(),
                via);
    }
    madeConnections_.push_back(slot.get());
  }
  *out = slot.get();
  return okStatus();
}

HostWindows* Connections::windows() { return shm_.get(); }

uint64_t Connections::prepareWait() { return shm_ ? shm_->prepareWait(netUsed_) : 0; }

void Connections::wait(uint64_t token, int maxMs) {
  if (!netUsed_) {
    if (shm_) shm_->wait(token, maxMs);
    return;
  }
  // Descriptors and futexes cannot be waited on together: local peers wake us through the shared
  // memory's wake socket, polled with the transport's descriptors (without one, poll briefly).
  thread_local std::vector<pollfd> fds;
  fds.clear();
  int timeout = maxMs;
  if (!net_->prepareSleep(&fds)) timeout = 0;
  if (shm_ && topo_.localSize() > 1) {
    if (shm_->wakeFd() >= 0) {
      fds.push_back(pollfd{shm_->wakeFd(), POLLIN, 0});
      if (shm_->doorbellMoved(token)) timeout = 0;
    } else {
      timeout = std::min(timeout, 1);
    }
  }
  (void)::poll(fds.data(), fds.size(), timeout);
  net_->finishSleep();
  if (shm_) shm_->finishSocketWait();
}

Status Connections::checkHealth() {
  if (failure_.interrupted()) return failure_.interruption();
  if (!shm_) return okStatus();
  for (int peer : topo_.localRanks) {
    if (peer == rank()) continue;
    Status st = shm_->checkPeerAlive(peer);
    if (!st.ok()) {
      (void)failure_.recordFailure(peer, st.message(), rank(), true);
      return st;
    }
  }
  return okStatus();
}

void Connections::notifyPeers() {
  if (shm_) shm_->notifyLocalPeers();
}

namespace {

std::byte* grownScratch(SharedScratch& s, uint64_t bytes) {
  if (bytes > s.bytes) {
    // To the next MiB: sizes that creep up by a few elements do not allocate every call.
    const uint64_t grown = roundUp(bytes, uint64_t{1} << 20);
    s.data.reset(new std::byte[grown]);
    s.bytes = grown;
  }
  return s.data.get();
}

}  // namespace

std::byte* Connections::scratch(uint64_t bytes) {
  if (family_ != nullptr && (holding_ || !family_->busy.exchange(true, std::memory_order_acquire))) {
    holding_ = true;
    return grownScratch(*family_, bytes);
  }
  return grownScratch(own_, bytes);
}

void Connections::prefaultScratch(uint64_t bytes) {
  SharedScratch& s = family_ != nullptr ? *family_ : own_;
  std::byte* p = grownScratch(s, bytes);
  for (uint64_t i = 0; i < s.bytes; i += 4096) p[i] = std::byte{0};
}

uint64_t Connections::wireBytes() const {
  uint64_t sum = 0;
  for (const Connection* c : madeConnections_) sum += c->sentBytes();
  return sum;
}

}  // namespace coll
