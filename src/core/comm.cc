// Communicator implementation (see comm.h).
#include "core/comm.h"

#include <poll.h>

#include <algorithm>

#include "algorithms/algorithms.h"
#include "core/config.h"
#include "core/log.h"
#include "transports/shm/shm_transport.h"
#include "transports/tcp/tcp_transport.h"

namespace coll {

Comm::~Comm() {
  // Connections first (they may reference shared memory), then the host segments, then the
  // bootstrap (its listener thread).
  connections_.clear();
  tcpConnections_.clear();
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
  timeoutMs_ = config.timeoutMs > 0 ? config.timeoutMs : defaultTimeoutMs();
  name_ = config.commName;
  Deadline deadline = Deadline::afterMs(timeoutMs_);

  std::string forced = knobString("COLL_TRANSPORT");
  if (forced == "shm") forced_ = TransportKind::Shm;
  else if (forced == "tcp") forced_ = TransportKind::Tcp;
  else if (!forced.empty())
    return makeError(collInvalidUsage, "COLL_TRANSPORT=%s is not a transport (known: shm, tcp)", forced.c_str());
  if (!config.netName.empty() && config.netName != "tcp" && config.netName != "socket") {
    return makeError(collInvalidArgument,
                     "config.netName=%s is not available in this build (available: tcp)", config.netName.c_str());
  }

  const std::string identity = localHostIdentity();
  COLL_TRY(Bootstrap::create(id, rank, nranks, hashHostIdentity(identity), deadline, &bootstrap_)
               .withContext("rank " + std::to_string(rank) + " of " + std::to_string(nranks) + ": bootstrap"));

  std::vector<uint64_t> hashes(nranks);
  for (int r = 0; r < nranks; ++r) hashes[r] = bootstrap_->peer(r).hostHash;
  topo_ = Topology::fromHostHashes(rank, hashes);
  COLL_INFO(rank, "topology: %d ranks on %d hosts (%d on this host, local rank %d)", topo_.nranks, topo_.nhosts,
            topo_.localSize(), topo_.localRank());

  if (forced_ == TransportKind::Shm && !topo_.singleHost()) {
    return makeError(collInvalidUsage,
                     "COLL_TRANSPORT=shm but the ranks are on %d hosts; shared memory only reaches ranks on one host",
                     topo_.nhosts);
  }
  if (forced_ != TransportKind::Tcp) {
    ShmOptions shmOptions = shmOptionsFromConfig();
    COLL_TRY(ShmHost::create(*bootstrap_, topo_, shmOptions, deadline, &shm_).withContext("shared memory setup"));
  }
  connections_.resize(nranks);
  waitPolicy_ = waitPolicyFor(topo_.localSize());

  plannerInputs_.topo = &topo_;
  plannerInputs_.haveWindows = shm_ != nullptr;
  plannerInputs_.windowHalfBytes = shm_ ? shm_->halfBytes() : 0;
  // Leads measured on this class of machine; issue #4 replaces them with a probe at creation.
  plannerInputs_.intraHost = LinkCost{1.0e-6, 1.0 / 8.0e9};
  plannerInputs_.interHost = LinkCost{25.0e-6, 1.0 / 1.2e9};
  plannerInputs_.forcedAlgo = knobString("COLL_ALGO");
  plannerInputs_.directMaxBytes = knobBytes("COLL_DIRECT_MAX_BYTES");
  finalizePlannerInputs(&plannerInputs_);
  COLL_TRY(checkForcedAlgo(plannerInputs_));
  return okStatus();
}

void Comm::fail(const Status& status) {
  collResult_t expected = collSuccess;
  if (asyncError_.compare_exchange_strong(expected, status.code())) failureMessage_ = status.message();
}

void Comm::abort() {
  aborted_.store(true);
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
      COLL_TRY(connectTcp(*bootstrap_, peer, tcpOptionsFromConfig(), callDeadline(), &slot)
                   .withContext("connecting to rank " + std::to_string(peer) + " (" +
                                bootstrap_->peer(peer).address.toString() + ") over tcp"));
      tcpConnections_.push_back(slot.get());
      COLL_INFO(rank(), "connected to rank %d (%s) over tcp", peer, bootstrap_->peer(peer).address.toString().c_str());
    }
  }
  *out = slot.get();
  return okStatus();
}

HostWindows* Comm::windows() { return shm_.get(); }

uint64_t Comm::prepareWait() { return shm_ ? shm_->prepareWait() : 0; }

void Comm::wait(uint64_t token, int maxMs) {
  if (tcpConnections_.empty()) {
    if (shm_) shm_->wait(token, maxMs);
    return;
  }
  // Sockets and futexes cannot be waited on together: poll the sockets, briefly if shared memory
  // peers may also wake us.
  if (shm_) shm_->cancelWait();
  thread_local std::vector<pollfd> fds;
  fds.clear();
  for (Connection* c : tcpConnections_) static_cast<TcpConnection*>(c)->appendPollFds(&fds);
  int timeout = shm_ && topo_.localSize() > 1 ? std::min(maxMs, 1) : maxMs;
  (void)::poll(fds.data(), fds.size(), timeout);
}

Status Comm::checkHealth() {
  if (!shm_) return okStatus();
  for (int peer : topo_.localRanks) {
    if (peer != rank()) COLL_TRY(shm_->checkPeerAlive(peer));
  }
  return okStatus();
}

void Comm::notifyPeers() {
  if (shm_) shm_->notifyLocalPeers();
}

Comm::PlanEntry& Comm::planFor(const CollArgs& args, const PlanChoice& choice) {
  PlanKey key{args.count, args.dtype, args.op, choice.algo};
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
  if (choice.algo == AlgoId::Direct) {
    DirectOptions options;
    options.windowHalfBytes = plannerInputs_.windowHalfBytes;
    options.reduceAllBelowBytes = choice.reduceAllBelowBytes;
    buildDirectAllReduce(topo_, args, options, &entry.schedule);
  } else {
    buildRingAllReduce(topo_, args, &entry.schedule);
  }
  return entry;
}

Status Comm::runPlan(PlanEntry& plan, const void* send, void* recv) {
  ++seq_;
  ExecBuffers buffers{send, recv};
  COLL_TRY(plan.execution.start(plan.schedule, buffers, *this, seq_));
  return runToCompletion(plan.execution, *this, callDeadline(), waitPolicy_);
}

Status Comm::allReduce(const CollArgs& args) {
  if (asyncError_.load() != collSuccess) {
    return makeError(collInvalidUsage, "this communicator failed earlier (%s); destroy or abort it",
                     failureMessage_.c_str());
  }
  PlanChoice choice;
  COLL_TRY(planAllReduce(plannerInputs_, args, &choice));
  COLL_TRACE(rank(), "allreduce seq %llu count %llu dtype %d op %d: %s, predicted %.1f us",
             static_cast<unsigned long long>(seq_ + 1), static_cast<unsigned long long>(args.count), args.dtype,
             args.op, algoName(choice.algo), choice.predictedSeconds * 1e6);
  Status status;
  const size_t es = dataTypeSize(args.dtype);
  if (choice.roundElems == 0 || args.count <= choice.roundElems) {
    status = runPlan(planFor(args, choice), args.sendbuff, args.recvbuff);
  } else {
    // The algorithm's per-call memory is bounded (the direct window): run the call as rounds.
    for (uint64_t done = 0; done < args.count && status.ok(); done += choice.roundElems) {
      CollArgs round = args;
      round.count = std::min<uint64_t>(choice.roundElems, args.count - done);
      round.sendbuff = static_cast<const char*>(args.sendbuff) + done * es;
      round.recvbuff = static_cast<char*>(args.recvbuff) + done * es;
      status = runPlan(planFor(round, choice), round.sendbuff, round.recvbuff);
    }
  }
  if (!status.ok()) {
    Status annotated = status.withContext("rank " + std::to_string(rank()) + ": allreduce (call " +
                                          std::to_string(seq_) + ", " + std::to_string(args.count) + " elements)");
    if (status.code() == collRemoteError || status.code() == collTimeout || status.code() == collSystemError) {
      fail(annotated);
    }
    return annotated;
  }
  return okStatus();
}

}  // namespace coll
