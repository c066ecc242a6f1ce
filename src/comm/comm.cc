// Communicator implementation (see comm.h).
#include "src/comm/comm.h"

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "algorithms/algorithms.h"
#include "algorithms/registry.h"
#include "src/base/config.h"
#include "src/comm/lanes.h"
#include "src/base/log.h"
#include "src/kernels/quantize.h"
#include "src/kernels/reduce.h"
#include "transports/net.h"
#include "transports/shm/shm_transport.h"

namespace coll {

namespace {

// Swaps a communicator's wait policy for one scope (the link probe's).
class ScopedWaitPolicy {
 public:
  ScopedWaitPolicy(WaitPolicy* slot, const WaitPolicy& policy) : slot_(slot), saved_(*slot) { *slot_ = policy; }
  ~ScopedWaitPolicy() { *slot_ = saved_; }
  ScopedWaitPolicy(const ScopedWaitPolicy&) = delete;
  ScopedWaitPolicy& operator=(const ScopedWaitPolicy&) = delete;

 private:
  WaitPolicy* slot_;
  WaitPolicy saved_;
};

}  // namespace

Comm::~Comm() {
  stopLanes();  // the lanes' queued work first: it may wait (stream order) for lane 0's
  stopProgressThread();
  stopFailureHandling();  // notices out before our connections close; no handler calls after this
  // Connections first (they may reference shared memory), then the host segments, then the
  // bootstrap (its listener thread).
  madeConnections_.clear();
  connections_.clear();
  net_.reset();
  shm_.reset();
  bootstrap_.reset();
}

Status Comm::create(const collUniqueId& id, int nranks, int rank, const CommConfig& config,
                    std::unique_ptr<Comm>* out) {
  std::unique_ptr<Comm> comm(new Comm());
  COLL_TRY(comm->init(id, nranks, rank, config));
  *out = std::move(comm);
  return okStatus();
}

Status Comm::init(const collUniqueId& id, int nranks, int rank, const CommConfig& config) {
  config_ = config;
  laneParent_ = config.laneParent;
  timeoutMs_ = config.timeoutMs > 0 ? config.timeoutMs : defaultTimeoutMs();
  name_ = config.commName;
  Deadline deadline = Deadline::afterMs(timeoutMs_);

  // COLL_TRANSPORT names one transport for every peer; shm is special (no net at all).
  const std::string forced = knobString("COLL_TRANSPORT");
  NetKind ignored;
  if (forced == "shm") forced_ = TransportKind::Shm;
  else if (netKindFromName(forced, &ignored)) forced_ = TransportKind::Net;
  else if (!forced.empty())
    return makeError(collInvalidUsage, "COLL_TRANSPORT=%s is not a transport (known: shm, tcp, ucx, ib)", forced.c_str());
  const uint32_t netMask = probeNetAvailability(&netUnavailable_);

  const std::string identity = localHostIdentity();
  COLL_TRY(Bootstrap::create(id, rank, nranks, hashHostIdentity(identity), netMask, deadline, &bootstrap_)
               .withContext("rank " + std::to_string(rank) + " of " + std::to_string(nranks) + ": bootstrap"));

  std::vector<uint64_t> hashes(nranks);
  for (int r = 0; r < nranks; ++r) hashes[r] = bootstrap_->peer(r).hostHash;
  topo_ = Topology::fromHostHashes(rank, hashes);
  setTopologyMachines();
  startFailureHandling();
  COLL_INFO(rank, "topology: %d ranks on %d hosts (%d on this host, local rank %d); %d on this machine of %d CPUs",
            topo_.nranks, topo_.nhosts, topo_.localSize(), topo_.localRank(), topo_.machineSize(),
            topo_.machineCpus());

  if (forced_ == TransportKind::Shm && !topo_.singleHost()) {
    return makeError(collInvalidUsage,
                     "COLL_TRANSPORT=shm but the ranks are on %d hosts; shared memory only reaches ranks on one host",
                     topo_.nhosts);
  }
  {
    // Refuse a COLL_ALGO that cannot run here before anything shared exists: a rank failing later
    // gets its job killed by launchers, and peers killed half-way through creating shared memory
    // leave its names behind.
    PlannerInputs early;
    early.topo = &topo_;
    early.haveWindows = forced_ != TransportKind::Net;
    early.windowHalfBytes = shmOptionsFromConfig().windowHalfBytes;
    early.forcedAlgo = knobString("COLL_ALGO");
    early.torusDims = knobString("COLL_TORUS_DIMS");
    finalizePlannerInputs(&early);
    COLL_TRY(checkForcedAlgo(early));
  }
  COLL_TRY(chooseNet());
  if (forced_ != TransportKind::Net) {
    ShmOptions shmOptions = shmOptionsFromConfig();
    COLL_TRY(ShmHost::create(*bootstrap_, topo_, shmOptions, deadline, &shm_).withContext("shared memory setup"));
  }
  connections_.resize(nranks);
  // The machine's ranks, not the host's: ranks in other network namespaces or containers of this
  // machine spin on the same cores.
  waitPolicy_ = waitPolicyFor(topo_.machineSize());
  waitPolicy_.timeoutMs = timeoutMs_;
  checkCalls_ = knobBool("COLL_CHECK");

  COLL_TRY(setupPlanner());
  startLanes();
  return okStatus();
}

void Comm::setTopologyMachines() {
  std::vector<uint64_t> machines(static_cast<size_t>(topo_.nranks));
  std::vector<int32_t> cpus(machines.size());
  for (int r = 0; r < topo_.nranks; ++r) {
    machines[static_cast<size_t>(r)] = bootstrap_->peer(r).machineHash;
    cpus[static_cast<size_t>(r)] = bootstrap_->peer(r).cpus;
  }
  topo_.setMachines(machines, cpus);
}

Status Comm::chooseNet() {
  if (forced_ == TransportKind::Shm) return okStatus();
  // Precedence: COLL_TRANSPORT (every peer), then COLL_NET, then the config's netName, then the
  // best transport that every rank published as available.
  std::string source, wanted = knobString("COLL_TRANSPORT");
  if (!wanted.empty()) source = "COLL_TRANSPORT";
  else if (!(wanted = knobString("COLL_NET")).empty()) source = "COLL_NET";
  else if (!config_.netName.empty()) source = "config.netName", wanted = config_.netName;
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
      return makeError(collInvalidUsage, "%s=%s is not a transport between hosts (known: ib, ucx, tcp)",
                       source.c_str(), wanted.c_str());
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
  COLL_TRY(createNet(kind, *bootstrap_, &net_).withContext(std::string("creating the ") + netKindName(kind) +
                                                            " transport"));
  if (rank() == 0 && (topo_.nhosts > 1 || forced_ == TransportKind::Net)) {
    COLL_INFO(rank(), "transport between hosts: %s (%s)", net_->describe().c_str(),
              source.empty() ? "automatic: the best one every rank has" : source.c_str());
  }
  return okStatus();
}

namespace {

// A COLL_LINK_* knob: a positive number, or unset (0).
Status linkKnob(const char* name, double* out) {
  *out = 0;
  const std::string text = knobString(name);
  if (text.empty()) return okStatus();
  char* end = nullptr;
  const double v = strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(v > 0) || !std::isfinite(v)) {
    return makeError(collInvalidUsage, "%s=%s is not a positive number", name, text.c_str());
  }
  *out = v;
  return okStatus();
}

double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

Status Comm::setupPlanner() {
  PlannerInputs& in = plannerInputs_;
  in.topo = &topo_;
  in.haveWindows = shm_ != nullptr;
  in.windowHalfBytes = shm_ ? shm_->halfBytes() : 0;
  in.forcedAlgo = knobString("COLL_ALGO");
  in.torusDims = knobString("COLL_TORUS_DIMS");
  in.directMaxBytes = knobBytes("COLL_DIRECT_MAX_BYTES");
  // An explicit COLL_SLICE_BYTES is the user's chunk: the planner keeps it.
  in.sliceBytes = knobRaw("COLL_SLICE_BYTES") ? knobBytes("COLL_SLICE_BYTES") : 0;
  const int64_t nics = knobInt("COLL_LINK_NICS_PER_HOST");
  if (nics < 0 || nics > 65536) {
    return makeError(collInvalidUsage, "COLL_LINK_NICS_PER_HOST=%lld: want 0 (one NIC per rank) or a count of NICs per host",
                     static_cast<long long>(nics));
  }
  in.nicsPerHost = static_cast<int32_t>(nics);
  finalizePlannerInputs(&in);
  COLL_TRY(checkForcedAlgo(in));
  if (!in.torusDims.empty() && !in.shape.torusOk && rank() == 0) {
    COLL_WARN(rank(), "COLL_TORUS_DIMS=%s: %s; the planner will not use torus", in.torusDims.c_str(),
              in.shape.torusProblem.c_str());
  }

  double intraAlphaUs, intraGBps, interAlphaUs, interGBps, gammaGBps;
  COLL_TRY(linkKnob("COLL_LINK_INTRA_ALPHA_US", &intraAlphaUs));
  COLL_TRY(linkKnob("COLL_LINK_INTRA_GBPS", &intraGBps));
  COLL_TRY(linkKnob("COLL_LINK_INTER_ALPHA_US", &interAlphaUs));
  COLL_TRY(linkKnob("COLL_LINK_INTER_GBPS", &interGBps));
  COLL_TRY(linkKnob("COLL_LINK_GAMMA_GBPS", &gammaGBps));

  // What each class needs measured: a class that exists here and that the knobs leave open.
  // A stream lane takes its parent's measured model: the same ranks over the same links.
  const bool probe = knobBool("COLL_LINK_PROBE") && topo_.nranks > 1 && laneParent_ == nullptr;
  const bool intraExists = in.shape.maxLocal > 1;
  const bool needIntra = probe && intraExists && (intraAlphaUs == 0 || intraGBps == 0);
  const bool needInter = probe && topo_.nhosts > 1 && (interAlphaUs == 0 || interGBps == 0);
  const bool needGamma = probe && gammaGBps == 0;
  LinkProbe measured;
  if (needIntra || needInter || needGamma) {
    COLL_TRY(probeLinks(needIntra, needInter, needGamma, &measured).withContext("link probe (COLL_LINK_PROBE=0 skips it)"));
  }
  auto pick = [](double knob, double fromKnob, double probed, double fallback, const char** from) {
    if (knob > 0) return *from = "knob", fromKnob;
    if (probed > 0) return *from = "probe", probed;
    return *from = "default", fallback;
  };
  auto inv = [](double gbps) { return gbps > 0 ? 1e-9 / gbps : 0.0; };
  const char *fromIa, *fromIb, *fromEa, *fromEb, *fromG;
  in.intraHost.alpha = pick(intraAlphaUs, intraAlphaUs * 1e-6, measured.intraAlpha, kDefaultIntraLink.alpha, &fromIa);
  in.intraHost.beta = pick(intraGBps, inv(intraGBps), measured.intraBeta, kDefaultIntraLink.beta, &fromIb);
  in.interHost.alpha = pick(interAlphaUs, interAlphaUs * 1e-6, measured.interAlpha, kDefaultInterLink.alpha, &fromEa);
  in.interHost.beta = pick(interGBps, inv(interGBps), measured.interBeta, kDefaultInterLink.beta, &fromEb);
  in.gamma = pick(gammaGBps, inv(gammaGBps), measured.gamma, kDefaultGamma, &fromG);
  if (laneParent_ != nullptr) {
    in.intraHost = laneParent_->plannerInputs_.intraHost;
    in.interHost = laneParent_->plannerInputs_.interHost;
    in.gamma = laneParent_->plannerInputs_.gamma;
    return okStatus();
  }
  if (rank() == 0) {
    COLL_INFO(rank(),
              "link model: intra-host %.2f us (%s) %.2f GB/s (%s); inter-host %.2f us (%s) %.3f GB/s per NIC "
              "(%s), %s; reduction %.2f GB/s (%s)",
              in.intraHost.alpha * 1e6, fromIa, 1e-9 / in.intraHost.beta, fromIb, in.interHost.alpha * 1e6, fromEa,
              1e-9 / in.interHost.beta, fromEb,
              in.nicsPerHost == 0 ? "one NIC per rank" : (std::to_string(in.nicsPerHost) + " NIC(s) per host").c_str(),
              1e-9 / in.gamma, fromG);
  }
  return okStatus();
}

Status Comm::pingPong(int peer, bool initiator, uint64_t bigBytes, uint64_t spins, double* alpha, double* beta) {
  // The smallest of many round trips: with more ranks than cores, peers' activity only ever adds
  // to a sample, and the model wants the link's own latency.
  constexpr int kWarm = 2, kSmall = 24, kBig = 2;
  // The pair polls about one hop's time before it yields, oversubscribed or not: yielding at once
  // (the oversubscribed policy) measured the scheduler, an intra-host alpha anywhere from 0.3 to
  // 100 us from launch to launch (8 ranks, 2 cores). Longer spins cost more than they save when
  // the two share a core: 2000 polls on shared memory measured 62 us per hop.
  WaitPolicy pair = waitPolicy_;
  if (!knobRaw("COLL_SPIN_COUNT")) pair.spins = spins;
  ScopedWaitPolicy scoped(&waitPolicy_, pair);
  std::vector<std::byte> big(peer >= 0 ? bigBytes : 0), small(8);
  // Ranks outside the pair run empty batches in step, so every rank's call count (which names
  // window halves and published progress) stays the same.
  auto xfer = [&](bool send, std::vector<std::byte>& buf) {
    P2pCall call{send, peer, buf.data(), buf.size()};
    return pointToPoint(&call, peer >= 0 ? 1 : 0);
  };
  std::vector<double> rtts;
  for (int i = 0; i < kWarm + kSmall; ++i) {
    const auto t0 = Clock::now();
    COLL_TRY(xfer(initiator, small));
    COLL_TRY(xfer(!initiator, small));
    if (i >= kWarm) rtts.push_back(secondsSince(t0));
  }
  double bigBest = 0;
  for (int i = 0; i < 1 + kBig; ++i) {  // the first one warms the connection (TCP slow start)
    const auto t0 = Clock::now();
    COLL_TRY(xfer(initiator, big));
    COLL_TRY(xfer(!initiator, small));
    const double t = secondsSince(t0);
    if (i >= 1 && (bigBest == 0 || t < bigBest)) bigBest = t;
  }
  if (!initiator || peer < 0) return okStatus();
  // The fastest round trip: on a busy machine the others measure the neighbours, not the link.
  *alpha = *std::min_element(rtts.begin(), rtts.end()) / 2;
  // The ack's round trip is latency, not bandwidth; never let noise make the link look free.
  *beta = std::max(bigBest - 2 * *alpha, bigBest / 4) / static_cast<double>(bigBytes);
  return okStatus();
}

Status Comm::probeLinks(bool intra, bool inter, bool gamma, LinkProbe* out) {
  // Polls before a measuring rank yields: about one round trip on shared memory; a socket's poll
  // is a recv() per socket, so fewer (200 measured 500 us per hop when the pair shared a core).
  constexpr uint64_t kShmProbeSpins = 200, kNetProbeSpins = 20;
  const auto start = Clock::now();
  LinkProbe mine;
  // Intra: the first two ranks of the first host holding more than one. Inter: rank 0 and the
  // first rank of another host. The same pairs on every rank, intra first, so nobody waits on a
  // rank that is busy with the other pair in the opposite order.
  std::vector<int32_t> perHost(static_cast<size_t>(topo_.nhosts));
  for (int32_t h : topo_.hostOfRank) ++perHost[static_cast<size_t>(h)];
  int intraA = -1, intraB = -1, interB = -1;
  for (int r = 0; r < topo_.nranks; ++r) {
    const int32_t h = topo_.hostOfRank[static_cast<size_t>(r)];
    if (intraA < 0 && perHost[static_cast<size_t>(h)] > 1) {
      intraA = r;
    } else if (intraA >= 0 && intraB < 0 && topo_.sameHost(intraA, r)) {
      intraB = r;
    }
    if (interB < 0 && !topo_.sameHost(0, r)) interB = r;
  }
  if (intra && intraB >= 0) {
    const int peer = rank() == intraA ? intraB : rank() == intraB ? intraA : -1;
    const uint64_t spins = shm_ != nullptr ? kShmProbeSpins : kNetProbeSpins;
    COLL_TRY(pingPong(peer, rank() == intraA, 1 << 20, spins, &mine.intraAlpha, &mine.intraBeta));
  }
  if (inter && interB >= 0) {
    const int peer = rank() == 0 ? interB : rank() == interB ? 0 : -1;
    COLL_TRY(pingPong(peer, rank() == 0, 2 << 20, kNetProbeSpins, &mine.interAlpha, &mine.interBeta));
  }
  if (gamma && rank() == 0) {
    constexpr size_t kFloats = 256 * 1024;
    std::vector<float> a(kFloats, 1.0f), b(kFloats, 2.0f);
    double best = 0;
    for (int i = 0; i < 4; ++i) {
      const auto t0 = Clock::now();
      kernels::reduce2(a.data(), a.data(), b.data(), kFloats, collFloat32, collSum);
      const double t = secondsSince(t0);
      if (i > 0 && (best == 0 || t < best)) best = t;
    }
    mine.gamma = std::max(best, 1e-9) / (kFloats * sizeof(float));
  }
  // Everyone takes the measuring ranks' values: plans must be identical on every rank.
  std::vector<LinkProbe> all(static_cast<size_t>(topo_.nranks));
  CollArgs gather;
  gather.kind = CollKind::AllGather, gather.sendbuff = &mine, gather.recvbuff = all.data();
  gather.count = sizeof(LinkProbe), gather.dtype = collUint8;
  PlanChoice choice;
  COLL_TRY(planCollective(plannerInputs_, gather, &choice));
  {
    // Ranks outside the pairs wait here while the pairs measure. Sleeping on the links, every call
    // a pair completes would wake them, and the pair would wait for the woken ranks to leave the
    // CPUs; napping, they stay out of the way.
    WaitPolicy napping = waitPolicy_;
    napping.spins = 0, napping.yields = 0, napping.napUs = 1000;
    ScopedWaitPolicy scoped(&waitPolicy_, napping);
    COLL_TRY(runChecked(gather, choice));
  }
  // Remote bytes: a value that is not a plausible time is ignored (the default stays).
  auto sane = [](double v) { return std::isfinite(v) && v > 0 && v < 1 ? v : 0.0; };
  *out = LinkProbe{};
  if (intraA >= 0) out->intraAlpha = sane(all[static_cast<size_t>(intraA)].intraAlpha);
  if (intraA >= 0) out->intraBeta = sane(all[static_cast<size_t>(intraA)].intraBeta);
  out->interAlpha = sane(all[0].interAlpha);
  out->interBeta = sane(all[0].interBeta);
  out->gamma = sane(all[0].gamma);
  if (rank() == 0) COLL_INFO(rank(), "link probe took %.1f ms", secondsSince(start) * 1e3);
  return okStatus();
}

void Comm::fail(const Status& status) {
  {
    std::lock_guard<std::mutex> lock(failMu_);
    collResult_t expected = collSuccess;
    if (asyncError_.compare_exchange_strong(expected, status.code())) failureMessage_ = status.message();
  }
  if (laneParent_ != nullptr) {
    // A lane's failure is the communicator's. The failed peers go first: a caller that sees the
    // communicator failed must find them in collCommGetFailedRanks (the lane records a peer
    // before it forwards it, and its failed call can return in between).
    for (const FailedPeer& f : failures_.peers()) (void)laneParent_->recordFailure(f.rank, f.reason, f.reportedBy, false);
    laneParent_->fail(status);
  }
}

void Comm::abort() {
  aborted_.store(true);
  abortLanes();
  {
    // Queued work that has not started is dropped: its streams learn of the abort.
    std::lock_guard<std::mutex> lock(queueMu_);
    for (Work& w : queue_) {
      if (w.stream) w.stream->complete(w.ticket, Status(collRemoteError, "the communicator was aborted"));
    }
    queue_.clear();
  }
  if (bootstrap_) bootstrap_->abort();
  fail(Status(collRemoteError, "the communicator was aborted"));
}

Status Comm::connection(int peer, Connection** out) {
  if (peer < 0 || peer >= topo_.nranks) return makeError(collInternalError, "no rank %d", peer);
  std::unique_ptr<Connection>& slot = connections_[peer];
  if (!slot) {
    bool useShm = forced_ == TransportKind::Shm || (forced_ == TransportKind::Auto && topo_.sameHost(rank(), peer));
    if (useShm) {
      COLL_TRY(shm_->connection(peer, &slot));
      COLL_INFO(rank(), "connected to rank %d over shm", peer);
    } else {
      const char* via = netKindName(net_->kind());
      Status st = net_->connect(peer, callDeadline(), &slot)
                      .withContext("connecting to rank " + std::to_string(peer) + " (" +
                                   bootstrap_->peer(peer).address.toString() + ") over " + via);
      if (!st.ok()) return connectFailed(peer, st);
      netUsed_ = true;
      COLL_INFO(rank(), "connected to rank %d (%s) over %s", peer, bootstrap_->peer(peer).address.toString().c_str(),
                via);
    }
    madeConnections_.push_back(slot.get());
  }
  *out = slot.get();
  return okStatus();
}

HostWindows* Comm::windows() { return shm_.get(); }

uint64_t Comm::prepareWait() { return shm_ ? shm_->prepareWait(netUsed_) : 0; }

void Comm::wait(uint64_t token, int maxMs) {
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

Status Comm::checkHealth() {
  if (failures_.interrupted()) return failures_.interruption(rank());
  if (!shm_) return okStatus();
  for (int peer : topo_.localRanks) {
    if (peer == rank()) continue;
    Status st = shm_->checkPeerAlive(peer);
    if (!st.ok()) {
      (void)recordFailure(peer, st.message(), rank(), true);
      return st;
    }
  }
  return okStatus();
}

void Comm::notifyPeers() {
  if (shm_) shm_->notifyLocalPeers();
}

Status Comm::choosePlan(const CollArgs& args, PlanChoice* out) {
  for (const ChoiceEntry& e : choices_) {
    if (e.kind == args.kind && e.count == args.count && e.dtype == args.dtype && e.op == args.op &&
        e.root == args.root) {
      *out = e.choice;
      return okStatus();
    }
  }
  COLL_TRY(planCollective(plannerInputs_, args, out));
  ChoiceEntry entry{args.kind, args.count, args.dtype, args.op, args.root, *out};
  if (choices_.size() < kMaxChoices) {
    choices_.push_back(entry);
  } else {
    choices_[nextChoice_] = entry;
    nextChoice_ = (nextChoice_ + 1) % kMaxChoices;
  }
  return okStatus();
}

Comm::PlanEntry& Comm::planFor(const CollArgs& args, const PlanChoice& choice, uint64_t callCount) {
  const PlanKey key = planKeyOf(args, choice);
  for (auto it = plans_.begin(); it != plans_.end(); ++it) {
    if (it->key == key) {
      if (it != plans_.begin()) plans_.splice(plans_.begin(), plans_, it);
      return plans_.front();
    }
  }
  if (plans_.size() >= kMaxPlans) {
    // Reuse the least recently used entry's storage.
    plans_.splice(plans_.begin(), plans_, std::prev(plans_.end()));
  } else {
    plans_.emplace_front();
  }
  PlanEntry& entry = plans_.front();
  entry.key = key;
  entry.schedule.clear();
  buildPlan(args, choice, &entry.schedule);
  if (rank() == 0 && logEnabled(LogLevel::Info)) logPlan(args, choice, callCount);
  return entry;
}

void Comm::logPlan(const CollArgs& args, const PlanChoice& choice, uint64_t callCount) const {
  std::string others;
  for (int i = 0; i < choice.ncandidates; ++i) {
    const Candidate& c = choice.candidates[i];
    char buf[160];
    snprintf(buf, sizeof(buf), "%s%s %.1f", others.empty() ? "" : ", ",
             describeChoice(c.algo, c.options, 0).c_str(), c.seconds * 1e6);
    others += buf;
  }
  // A call run in rounds is logged under its own count (the one the user passed), with the round's.
  char rounds[64] = "";
  if (callCount > args.count) {
    snprintf(rounds, sizeof(rounds), ", in rounds (this one %llu)", static_cast<unsigned long long>(args.count));
  }
  COLL_INFO(rank(), "plan %s %llu x %s: %s predicted %.1f us [%s]%s", collKindName(args.kind),
            static_cast<unsigned long long>(std::max(callCount, args.count)), dataTypeName(args.dtype),
            describeChoice(choice.algo, choice.options, choice.sliceBytes).c_str(), choice.predictedSeconds * 1e6,
            others.c_str(), rounds);
}

void Comm::buildPlan(const CollArgs& args, const PlanChoice& choice, Schedule* out) const {
  if (args.kind == CollKind::Send || args.kind == CollKind::Recv) return;  // point-to-point calls go through pointToPoint()
  const BuildRequest request{topo_, args, choice.options, plannerInputs_.windowHalfBytes, choice.reduceAllBelowBytes};
  algorithm(choice.algo).build(request, out);
  if (choice.sliceBytes != 0) out->sliceBytes = choice.sliceBytes;
}

Status Comm::runPlan(PlanEntry& plan, const CollArgs& args) {
  ++seq_;
  ExecBuffers buffers{args.sendbuff, args.recvbuff};
  kernels::QuantParams quant;
  if (args.compress.blockSize > 0) {
    quant.blockSize = args.compress.blockSize;
    quant.stochastic = args.compress.stochastic;
    quant.seed = args.compress.seed;
    quant.step = args.compress.step;
    quant.rank = static_cast<uint32_t>(rank());
    buffers.quant = &quant;
    buffers.residual = args.compress.residual;
  }
  return runExecution(plan.execution, plan.schedule, buffers, collKindName(args.kind), args.count, args.dtype);
}

uint64_t Comm::wireBytes() const {
  uint64_t sum = 0;
  for (const Connection* c : madeConnections_) sum += c->sentBytes();
  return sum;
}

Status Comm::compressedAllReduce(const CollArgs& args) {
  const uint64_t bytes = args.count * dataTypeSize(args.dtype);
  if (topo_.nranks == 1 || bytes < args.compress.minBytes) {
    if (!loggedCompressFallback_ && rank() == 0) {
      COLL_INFO(rank(), "compressed All-Reduce of %llu bytes runs uncompressed (below %llu bytes: the call's minBytes "
                "or COLL_COMPRESS_MIN_BYTES; logged once)", static_cast<unsigned long long>(bytes),
                static_cast<unsigned long long>(args.compress.minBytes));
    }
    loggedCompressFallback_ = true;
    stats_.uncompressedFallbacks++;
    CollArgs plain = args;
    plain.compress = CollArgs::Compression{};
    return collective(plain);
  }
  PlanChoice choice;
  COLL_TRY(planCompressedAllReduce(plannerInputs_, args, &choice));
  const uint64_t before = wireBytes();
  COLL_TRY(runChecked(args, choice));
  stats_.compressedWireBytes += wireBytes() - before;
  stats_.compressedInputBytes += bytes;
  stats_.compressedCalls++;
  return okStatus();
}

collCommStats_t Comm::stats() const {
  collCommStats_t out = stats_;
  out.wireBytes = wireBytes();
  addLaneStats(&out);
  return out;
}

Status Comm::collective(const CollArgs& args) {
  COLL_TRY(checkUsable());
  if (args.compress.blockSize > 0) return compressedAllReduce(args);
  CollArgs call = args;
  double scalar = 1.0;
  if (preMulSumScalar(args.op, &scalar)) {
    // PreMulSum: scale this rank's contribution once, then sum. The staging buffer only grows.
    uint64_t elements = args.count;
    if (args.kind == CollKind::ReduceScatter) elements *= static_cast<uint64_t>(topo_.nranks);
    const size_t bytes = elements * dataTypeSize(args.dtype);
    if (preMulStaging_.size() < bytes) preMulStaging_.resize(bytes);
    kernels::scale(preMulStaging_.data(), args.sendbuff, elements, args.dtype, scalar);
    call.sendbuff = preMulStaging_.data();
    call.op = collSum;
  }
  PlanChoice choice;
  COLL_TRY(choosePlan(call, &choice));
  COLL_TRACE(rank(), "%s seq %llu count %llu dtype %d op %d root %d: %s, predicted %.1f us", collKindName(call.kind),
             static_cast<unsigned long long>(seq_ + 1), static_cast<unsigned long long>(call.count), call.dtype,
             call.op, call.root, describeChoice(choice.algo, choice.options, choice.sliceBytes).c_str(),
             choice.predictedSeconds * 1e6);
  return runChecked(call, choice);
}

Status Comm::runChecked(const CollArgs& args, const PlanChoice& choice) {
  Status status;
  const size_t es = dataTypeSize(args.dtype);
  if (choice.roundElems == 0 || args.count <= choice.roundElems) {
    status = runPlan(planFor(args, choice), args);
  } else {
    // The algorithm's per-call memory is bounded (the direct window): run the call as rounds.
    for (uint64_t done = 0; done < args.count && status.ok(); done += choice.roundElems) {
      CollArgs round = args;
      round.count = std::min<uint64_t>(choice.roundElems, args.count - done);
      round.sendbuff = static_cast<const char*>(args.sendbuff) + done * es;
      round.recvbuff = static_cast<char*>(args.recvbuff) + done * es;
      status = runPlan(planFor(round, choice, args.count), round);
    }
  }
  if (!status.ok()) {
    Status annotated = status.withContext("rank " + std::to_string(rank()) + ": " + collKindName(args.kind) +
                                          " (call " + std::to_string(seq_) + ", " + std::to_string(args.count) +
                                          " elements)");
    if (status.code() == collRemoteError || status.code() == collTimeout || status.code() == collSystemError) {
      fail(annotated);
    }
    return annotated;
  }
  return okStatus();
}

Status Comm::pointToPoint(const P2pCall* calls, size_t ncalls) {
  COLL_TRY(checkUsable());
  p2pOps_.clear();
  p2pBuffers_.clear();
  for (size_t i = 0; i < ncalls; ++i) {
    p2pOps_.push_back(P2pOp{calls[i].send, calls[i].peer, calls[i].bytes});
    p2pBuffers_.push_back(calls[i].buffer);
  }
  // Receives that overwrite a buffer a send of this batch still reads (in-place sendrecv).
  p2pAliases_.clear();
  for (size_t r = 0; r < ncalls; ++r) {
    if (calls[r].send || calls[r].bytes == 0) continue;
    const auto* rb = static_cast<const std::byte*>(calls[r].buffer);
    for (size_t w = 0; w < ncalls; ++w) {
      if (!calls[w].send || calls[w].bytes == 0) continue;
      const auto* sb = static_cast<const std::byte*>(calls[w].buffer);
      if (rb < sb + calls[w].bytes && sb < rb + calls[r].bytes) {
        p2pAliases_.push_back(P2pAlias{static_cast<int32_t>(r), static_cast<int32_t>(w), rb == sb});
      }
    }
  }
  p2pSchedule_.clear();
  buildP2pBatch(topo_, p2pOps_.data(), p2pOps_.size(), &p2pSchedule_, p2pAliases_.data(), p2pAliases_.size());
  ++seq_;
  ExecBuffers buffers;
  buffers.extra = p2pBuffers_.data();
  buffers.nextra = p2pBuffers_.size();
  uint64_t bytes = 0;
  for (size_t i = 0; i < ncalls; ++i) bytes += calls[i].bytes;
  Status status = runExecution(p2pExecution_, p2pSchedule_, buffers, "point-to-point", bytes, -1);
  if (!status.ok()) {
    Status annotated = status.withContext("rank " + std::to_string(rank()) + ": " + std::to_string(ncalls) +
                                          " point-to-point call(s) (call " + std::to_string(seq_) + ")");
    if (status.code() == collRemoteError || status.code() == collTimeout || status.code() == collSystemError) {
      fail(annotated);
    }
    return annotated;
  }
  return okStatus();
}

Status Comm::createPreMulSum(double scalar, collDataType_t dtype, collRedOp_t* op) {
  size_t index = 0;
  while (index < userOps_.size() && userOps_[index].live) ++index;
  if (index == userOps_.size()) {
    if (userOps_.size() >= 1024) {
      return makeError(collInvalidUsage, "too many live PreMulSum ops (1024) on this communicator; destroy unused ones");
    }
    userOps_.emplace_back();
  }
  userOps_[index] = UserOp{true, dtype, scalar};
  *op = static_cast<collRedOp_t>(collNumOps + static_cast<int>(index));
  return okStatus();
}

Status Comm::destroyRedOp(collRedOp_t op) {
  int index = static_cast<int>(op) - collNumOps;
  if (index < 0 || index >= static_cast<int>(userOps_.size()) || !userOps_[index].live) {
    return makeError(collInvalidArgument, "reduction op %d is not a live user op of this communicator",
                     static_cast<int>(op));
  }
  userOps_[index].live = false;
  return okStatus();
}

Status Comm::checkUserOp(collRedOp_t op, collDataType_t dtype) const {
  if (laneParent_ != nullptr) return laneParent_->checkUserOp(op, dtype);  // ops live on the parent
  int index = static_cast<int>(op) - collNumOps;
  if (index < 0 || index >= static_cast<int>(userOps_.size()) || !userOps_[index].live) {
    return makeError(collInvalidArgument, "reduction op %d is neither a built-in op nor a live PreMulSum op of this "
                     "communicator", static_cast<int>(op));
  }
  if (userOps_[index].dtype != dtype) {
    return makeError(collInvalidArgument, "PreMulSum op %d was created for datatype %d, used with datatype %d",
                     static_cast<int>(op), userOps_[index].dtype, dtype);
  }
  return okStatus();
}

bool Comm::preMulSumScalar(collRedOp_t op, double* scalar) const {
  if (laneParent_ != nullptr) return laneParent_->preMulSumScalar(op, scalar);  // ops live on the parent
  int index = static_cast<int>(op) - collNumOps;
  if (index < 0 || index >= static_cast<int>(userOps_.size()) || !userOps_[index].live) return false;
  *scalar = userOps_[index].scalar;
  return true;
}

namespace {

// COLL_CHECK's view of one call. Fixed size, so the check's own all-gather matches whatever the
// ranks called.
struct CallFingerprint {
  int32_t kind, dtype, op, root;
  uint64_t count;
};

// Every rank holds the same fingerprints, so every rank reports the same groups: the ranks of each
// distinct call (rank 0's first), and every field in which the calls differ.
Status describeCallMismatch(const std::vector<CallFingerprint>& all) {
  auto same = [](const CallFingerprint& a, const CallFingerprint& b) {
    return a.kind == b.kind && a.count == b.count && a.dtype == b.dtype && a.op == b.op && a.root == b.root;
  };
  std::vector<std::vector<int>> groups;  // ranks per distinct call, in order of first appearance
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    size_t g = 0;
    while (g < groups.size() && !same(all[static_cast<size_t>(groups[g][0])], all[static_cast<size_t>(r)])) ++g;
    if (g == groups.size()) groups.emplace_back();
    groups[g].push_back(r);
  }
  if (groups.size() < 2) return okStatus();
  auto rankList = [](const std::vector<int>& ranks) {
    std::string s = ranks.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0, shown = 0; i < ranks.size(); ++shown) {
      size_t j = i;
      while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
      if (shown == 16) return s + ",...";
      s += (i ? "," : "") + std::to_string(ranks[i]) + (j > i ? "-" + std::to_string(ranks[j]) : "");
      i = j + 1;
    }
    return s;
  };
  auto describe = [](const CallFingerprint& f) {
    static const char* kOps[] = {"sum", "prod", "max", "min", "avg"};
    const auto kind = static_cast<CollKind>(f.kind);
    std::string s = std::string(collKindName(kind)) + "(count " + std::to_string(f.count) + ", " +
                    dataTypeName(static_cast<collDataType_t>(f.dtype));
    if (kind == CollKind::AllReduce || kind == CollKind::Reduce || kind == CollKind::ReduceScatter) {
      s += std::string(", op ") + (f.op >= 0 && f.op < 5 ? kOps[f.op] : "premulsum");
    }
    if (f.root >= 0) s += ", root " + std::to_string(f.root);
    return s + ")";
  };
  const CallFingerprint& first = all[static_cast<size_t>(groups[0][0])];
  bool kind = false, count = false, dtype = false, op = false, root = false;
  std::string calls;
  for (size_t g = 0; g < groups.size() && g < 4; ++g) {
    const CallFingerprint& f = all[static_cast<size_t>(groups[g][0])];
    kind |= f.kind != first.kind, count |= f.count != first.count, dtype |= f.dtype != first.dtype;
    op |= f.op != first.op, root |= f.root != first.root;
    calls += (g ? "; " : "") + rankList(groups[g]) + " called " + describe(f);
  }
  if (groups.size() > 4) calls += "; and " + std::to_string(groups.size() - 4) + " more different calls";
  std::string what;
  for (auto [differs, name] : {std::pair{kind, "collective"}, {count, "count"}, {dtype, "datatype"},
                               {op, "reduction op"}, {root, "root"}}) {
    if (differs) what += (what.empty() ? "" : " and ") + std::string(name);
  }
  return makeError(collInvalidUsage,
                   "COLL_CHECK: ranks disagree on the %s: %s. Every rank must issue the same collectives in the same "
                   "order with the same count, datatype, op and root",
                   what.c_str(), calls.c_str());
}

}  // namespace

Status Comm::checkSameCall(const CollArgs& args) {
  CallFingerprint mine{static_cast<int32_t>(args.kind), static_cast<int32_t>(args.dtype),
                       args.op < collNumOps ? static_cast<int32_t>(args.op) : -1, args.root, args.count};
  const bool reducing = args.kind == CollKind::AllReduce || args.kind == CollKind::Reduce ||
                        args.kind == CollKind::ReduceScatter;
  if (!reducing) mine.op = 0;
  const bool rooted = args.kind == CollKind::Broadcast || args.kind == CollKind::Reduce ||
                      args.kind == CollKind::Gather || args.kind == CollKind::Scatter;
  if (!rooted) mine.root = -1;
  std::vector<CallFingerprint> all(static_cast<size_t>(topo_.nranks));
  CollArgs gather;
  gather.kind = CollKind::AllGather, gather.sendbuff = &mine, gather.recvbuff = all.data();
  gather.count = sizeof(CallFingerprint), gather.dtype = collUint8;
  PlanChoice choice;
  COLL_TRY(choosePlan(gather, &choice));
  COLL_TRY(runChecked(gather, choice).withContext("COLL_CHECK"));
  return describeCallMismatch(all);
}

Status Comm::execute(const Work& work) {
  Status first;
  const std::vector<CollArgs>& calls = work.collectives;
  if (checkCalls_) {
    for (const CollArgs& args : calls) COLL_TRY(checkSameCall(args));
  }
  for (size_t i = 0; i < calls.size();) {
    size_t used = 1;
    Status s = calls.size() - i >= 2 ? runFusedPrefix(calls.data() + i, calls.size() - i, &used)
                                     : collective(calls[i]);
    if (!s.ok() && first.ok()) first = s;
    i += used;
  }
  if (!work.p2p.empty()) {
    Status s = pointToPoint(work.p2p.data(), work.p2p.size());
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

Status Comm::runFusedPrefix(const CollArgs* calls, size_t n, size_t* used) {
  *used = 1;
  auto fusable = [&](const CollArgs& a) {
    return a.kind != CollKind::Barrier && a.count > 0 && a.op < collNumOps && a.dtype == calls[0].dtype &&
           a.op == calls[0].op && a.compress.blockSize == 0;
  };
  if (asyncError_.load() != collSuccess || !fusable(calls[0]) || !fusable(calls[1])) return collective(calls[0]);
  // Fused parts run concurrently, so a call whose buffers depend on an earlier one's (it reads
  // what that one writes, or writes what it reads or writes) ends the prefix: order is kept.
  const uint64_t p = static_cast<uint64_t>(topo_.nranks);
  auto span = [&](const CollArgs& a, bool send) {
    uint64_t elems = a.count;
    switch (a.kind) {
      case CollKind::AllGather:
      case CollKind::Gather: elems = send ? a.count : a.count * p; break;
      case CollKind::ReduceScatter:
      case CollKind::Scatter: elems = send ? a.count * p : a.count; break;
      case CollKind::AlltoAll: elems = a.count * p; break;
      default: break;
    }
    const auto* base = static_cast<const std::byte*>(send ? a.sendbuff : a.recvbuff);
    return std::make_pair(base, base + elems * dataTypeSize(a.dtype));
  };
  auto overlap = [](std::pair<const std::byte*, const std::byte*> x, std::pair<const std::byte*, const std::byte*> y) {
    return x.first != nullptr && y.first != nullptr && x.first < y.second && y.first < x.second;
  };
  auto dependsOnEarlier = [&](size_t k) {
    for (size_t j = 0; j < k; ++j) {
      if (overlap(span(calls[k], false), span(calls[j], false)) || overlap(span(calls[k], false), span(calls[j], true)) ||
          overlap(span(calls[k], true), span(calls[j], false))) {
        return true;
      }
    }
    return false;
  };
  HostWindows* w = windows();
  fused_.clear();
  fusedBuffers_.clear();
  size_t k = 0;
  for (; k < n && fusable(calls[k]) && !dependsOnEarlier(k); ++k) {
    PlanChoice choice;
    COLL_TRY(choosePlan(calls[k], &choice));
    if (choice.roundElems != 0) break;
    const Schedule& part = planFor(calls[k], choice).schedule;
    if (k > 0 && part.divisor != fused_.divisor) break;
    const uint64_t windowNeed = (fused_.windowBytes + 63) / 64 * 64 + part.windowBytes;
    if (part.usesWindows && (w == nullptr || windowNeed > w->halfBytes() ||
                             fused_.publishSlots + part.publishSlots > w->maxPublishSlots())) {
      break;
    }
    if (k == 0) {
      fused_.dtype = part.dtype;
      fused_.op = part.op;
      fused_.divisor = part.divisor;
      fused_.algorithm = "fused";
    }
    fused_.append(part, static_cast<int32_t>(2 * k), static_cast<int32_t>(2 * k + 1));
    fusedBuffers_.push_back(const_cast<void*>(calls[k].sendbuff));
    fusedBuffers_.push_back(calls[k].recvbuff);
  }
  if (k < 2) return collective(calls[0]);
  fused_.finalizePeers();
  *used = k;
  ++seq_;
  COLL_TRACE(rank(), "call %llu: %zu collectives (the first a %s) fused into one schedule of %zu steps",
             static_cast<unsigned long long>(seq_), k, collKindName(calls[0].kind), fused_.steps.size());
  ExecBuffers buffers;
  buffers.extra = fusedBuffers_.data();
  buffers.nextra = fusedBuffers_.size();
  Status status = runExecution(fusedExecution_, fused_, buffers, "fused collectives", k, calls[0].dtype);
  return annotate(status, std::to_string(k) + " fused collectives");
}

Status Comm::annotate(const Status& status, const std::string& what) {
  if (status.ok()) return status;
  Status annotated =
      status.withContext("rank " + std::to_string(rank()) + ": " + what + " (call " + std::to_string(seq_) + ")");
  if (status.code() == collRemoteError || status.code() == collTimeout || status.code() == collSystemError) {
    fail(annotated);
  }
  return annotated;
}

Status Comm::enqueue(Work work) {
  // Work index w runs on lane w mod L (lanes.cc says why that cannot deadlock). An empty piece of
  // work (a group whose calls were all no-ops) only marks its stream's order: lane 0, no index.
  if (lanes_ && !(work.collectives.empty() && work.p2p.empty())) {
    const int k = lanes_->take();
    if (k != 0) return lanes_->enqueue(k, std::move(work));
  }
  return enqueueHere(std::move(work));
}

Status Comm::enqueueHere(Work work) {
  std::lock_guard<std::mutex> lock(queueMu_);
  if (aborted_.load()) return makeError(collInvalidUsage, "the communicator was aborted");
  if (!progressThread_.joinable()) {
    progressThread_ = std::thread([this] { progressLoop(); });
    threaded_.store(true, std::memory_order_release);
  }
  queue_.push_back(std::move(work));
  queueCv_.notify_one();
  return okStatus();
}

Comm::P2pCall Comm::p2pCallOf(const CollArgs& a) {
  const bool send = a.kind == CollKind::Send;
  return P2pCall{send, a.peer, send ? const_cast<void*>(a.sendbuff) : a.recvbuff, a.count * dataTypeSize(a.dtype)};
}

Status Comm::runNow(const CollArgs& args) {
  if (lanes_) {
    const int k = lanes_->take();
    if (k != 0) return lanes_->runNow(k, args);
  }
  const bool p2p = args.kind == CollKind::Send || args.kind == CollKind::Recv;
  if (!threaded_.load(std::memory_order_acquire)) {
    if (p2p) {
      P2pCall call = p2pCallOf(args);
      return pointToPoint(&call, 1);
    }
    if (checkCalls_) COLL_TRY(checkSameCall(args));
    return collective(args);
  }
  Work work;
  if (p2p) work.p2p.push_back(p2pCallOf(args));
  else work.collectives.push_back(args);
  return runNowHere(std::move(work));
}

Status Comm::runNow(Work work) {
  if (lanes_) {
    if (work.collectives.empty() && work.p2p.empty()) {
      // collCommFinalize: every lane's queued work completes, then lane 0's.
      Status drained = lanes_->drain();
      Status here = runNowHere(std::move(work));
      return drained.ok() ? here : drained;
    }
    const int k = lanes_->take();
    if (k != 0) return lanes_->runNow(k, std::move(work));
  }
  return runNowHere(std::move(work));
}

Status Comm::runNowHere(Work work) {
  if (!threaded_.load(std::memory_order_acquire)) return execute(work);
  // A private stream carries the completion of this one piece of work.
  auto done = std::make_shared<HostStream>();
  work.stream = done;
  work.ticket = done->enqueue();
  COLL_TRY(enqueueHere(std::move(work)));
  return done->synchronize(Deadline::afterMs(timeoutMs_ * 2));
}

void Comm::progressLoop() {
  for (;;) {
    Work work;
    {
      std::unique_lock<std::mutex> lock(queueMu_);
      queueCv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued has run
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    Status status;
    if (work.stream) status = work.stream->waitTurn(work.ticket, callDeadline());
    if (status.ok()) status = execute(work);
    if (!status.ok()) COLL_WARN(rank(), "stream-ordered work failed: %s", status.message().c_str());
    if (work.stream) work.stream->complete(work.ticket, status);
  }
}

void Comm::stopProgressThread() {
  {
    std::lock_guard<std::mutex> lock(queueMu_);
    stopping_ = true;
    queueCv_.notify_all();
  }
  if (progressThread_.joinable()) progressThread_.join();
}

}  // namespace coll
