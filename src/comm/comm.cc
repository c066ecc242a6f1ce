// Communicator implementation (see comm.h): creation, wiring of the parts, and the call path
// from CollArgs to executor runs.
#include "src/comm/comm.h"

#include <algorithm>
#include <cstdio>

#include "algorithms/algorithms.h"
#include "src/base/config.h"
#include "src/base/log.h"
#include "src/comm/call_check.h"
#include "src/comm/lanes.h"
#include "src/kernels/quantize.h"
#include "src/kernels/reduce.h"
#include "transports/net.h"
#include "transports/shm/shm_transport.h"

namespace coll {

const BoolKnob kLazySetup("COLL_LAZY_SETUP", "0",
                          "1: leave what calls need to the first call that needs it: stream lanes k > 0 made by their "
                          "first call, shared-memory pages mapped on first touch (less memory for communicators that "
                          "make few calls; the first calls of each lane and size are slow). 0: both done by a thread "
                          "started at creation, which the first call waits for.",
                          {KnobSection::PlannerExecutor, 125});

const BytesKnob kScratchPrefaultBytes("COLL_SCRATCH_PREFAULT_BYTES", "16M",
                                      "Scratch a communicator (and its lanes, which share it) allocates and touches at "
                                      "creation, in the set-up thread (COLL_LAZY_SETUP=0): calls that need up to this "
                                      "much (a Reduce's non-root ranks: the message size) do not fault it in.",
                                      {KnobSection::PlannerExecutor, 126});

Comm::Comm()
    : links_(topo_, failure_),
      plans_(topo_),
      queue_([this](const Work& work) { return execute(work); }, failure_.abortedFlag()) {}

Comm::~Comm() {
  (void)awaitSetup();  // every rank's lanes are made together: ours must take part
  stopLanes();         // the lanes' queued work first: it may wait (stream order) for lane 0's
  queue_.stop();
  tracer_.stop();   // no call runs any more
  device_.reset();  // after the progress thread: releases any stream still waiting
  failure_.stop();  // notices out before our connections close; no handler calls after this
  // Connections first (they may reference shared memory), then the host segments, then the
  // bootstrap (its listener thread).
  links_.close();
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
  // The roots serve this rendezvous only: lanes, splits and shrinks made from this communicator's
  // configuration get their own ids.
  config_.rootIds.clear();
  laneParent_ = config.laneParent;
  timeoutMs_ = config.timeoutMs > 0 ? config.timeoutMs : defaultTimeoutMs();
  Deadline deadline = Deadline::afterMs(timeoutMs_);

  uint32_t netMask = 0;
  COLL_TRY(links_.readForcedTransport(&netMask));

  const std::string identity = localHostIdentity();
  // A lane's rendezvous gives up when its parent fails or is aborted meanwhile: a rank whose set-up
  // thread left for that reason never registers, and the others would wait for it until the deadline.
  std::function<bool()> interrupted;
  if (laneParent_ != nullptr) interrupted = [parent = laneParent_] { return parent->failure_.aborting(); };
  const std::vector<collUniqueId> ids = config.rootIds.empty() ? std::vector<collUniqueId>{id} : config.rootIds;
  // A lane runs its set-up on a thread without the rank's CUDA context: its parent's key.
  ringKey_ = laneParent_ != nullptr ? laneParent_->ringKey_ : gpuRingKey();
  COLL_TRY(Bootstrap::create(ids, rank, nranks, hashHostIdentity(identity), netMask, deadline, &bootstrap_, interrupted,
                             ringKey_)
               .withContext("rank " + std::to_string(rank) + " of " + std::to_string(nranks) + ": bootstrap"));

  std::vector<uint64_t> hashes(nranks);
  for (int r = 0; r < nranks; ++r) hashes[r] = bootstrap_->peer(r).hostHash;
  topo_ = Topology::fromHostHashes(rank, hashes);
  setTopologyMachines();
  setupLocalOrder();
  failure_.start(bootstrap_.get(), timeoutMs_, config.commName,
                 laneParent_ != nullptr ? &laneParent_->failure_ : nullptr, this);
  queue_.setIdentity(rank, timeoutMs_);
  tracer_.start(rank, config.commName.empty() ? std::string("comm") : config.commName,
                laneParent_ != nullptr ? &laneParent_->profilerHook_ : &profilerHook_);
  COLL_INFO(rank, "topology: %d ranks on %d hosts (%d on this host, local rank %d); %d on this machine of %d CPUs",
            topo_.nranks, topo_.nhosts, topo_.localSize(), topo_.localRank(), topo_.machineSize(), topo_.machineCpus());

  COLL_TRY(links_.checkForcedTransport());
  // Refuse a COLL_ALGO that cannot run here before anything shared exists: a rank failing later
  // gets its job killed by launchers, and peers killed half-way through creating shared memory
  // leave its names behind.
  COLL_TRY(PlanCache::checkAlgoKnob(topo_, links_.mayHaveWindows(), shmOptionsFromConfig().windowHalfBytes));
  COLL_TRY(setupPlacement(deadline));
  ScopedPlacementHint placed(placement_.node != nullptr ? &placement_ : nullptr);  // for the transports' choices
  const bool lazy = kLazySetup.get();
  COLL_TRY(links_.open(*bootstrap_, config_.netName, config_.trafficClass, timeoutMs_, deadline));
  links_.setSharedScratch(laneParent_ != nullptr ? &laneParent_->sharedScratch_ : &sharedScratch_);
  checkCalls_ = callCheckEnabled();

  COLL_TRY(setupPlanner());
  startLanes();
  if (!lazy) {
    // What the first calls of each lane paid for (PERFORMANCE.md, "Cold start"): the shared
    // memory's pages and the lanes' communicators. A lane's communicator does it now (it is made in
    // the background already); the communicator itself in a thread that its first call waits for,
    // so that creation stays about as fast as before.
    if (laneParent_ != nullptr) {
      prefaultMemory();
    } else {
      setupDone_.store(false, std::memory_order_relaxed);
      lanesPending_.store(lanes_ != nullptr);
      setup_ = std::thread([this] {
        setupStatus_ = setUpAhead();
        lanesPending_.store(false);
      });
    }
  }
  // As NCCL: a communicator made while a CUDA context is current uses that context's device.
  if (const gpu::CudaDriver* cu = laneParent_ ? nullptr : gpu::cudaDriver()) {
    CUcontext ctx = nullptr;
    CUdevice dev = -1;
    if (cu->cuCtxGetCurrent(&ctx) == cu::kSuccess && ctx != nullptr && cu->cuCtxGetDevice(&dev) == cu::kSuccess) {
      cudaDevice_.store(dev);
    }
  }
  return okStatus();
}

void Comm::prefaultMemory() {
  if (ShmHost* shm = links_.shm()) shm->prefault();
  // Lanes share their parent's scratch (connections.h): the parent prefaults it, for calls up to
  // COLL_SCRATCH_PREFAULT_BYTES (reduce on a non-root rank needs the message's size); larger ones
  // grow it on their first call.
  if (laneParent_ == nullptr) links_.prefaultScratch(kScratchPrefaultBytes.get());
}

Status Comm::setUpAhead() {
  prefaultMemory();
  return lanes_ ? lanes_->makeAll().withContext("making the stream lanes (COLL_LAZY_SETUP=1 makes them on first use)")
                : okStatus();
}

Status Comm::awaitSetup() {
  if (!setupDone_.load(std::memory_order_acquire)) {
    // The caller's thread and the lanes' progress threads may both get here first.
    std::call_once(setupJoined_, [this] {
      setup_.join();
      setupDone_.store(true, std::memory_order_release);
    });
  }
  return setupStatus_;
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

Status Comm::setupPlanner() {
  ShmHost* shm = links_.shm();
  COLL_TRY(plans_.setInputs(shm != nullptr, shm != nullptr ? shm->halfBytes() : 0));
  LinkProbe probe(topo_, shm != nullptr, *this);
  return probe.setLinkModel(&plans_.inputs(), laneParent_ != nullptr ? &laneParent_->plans_.inputs() : nullptr);
}

Status Comm::transfer(bool send, int peer, void* buffer, uint64_t bytes) {
  P2pCall call{send, peer, buffer, bytes};
  return pointToPoint(&call, peer >= 0 ? 1 : 0);
}

Status Comm::allGather(const void* mine, void* all, uint64_t bytes) {
  CollArgs gather;
  gather.kind = CollKind::AllGather, gather.sendbuff = mine, gather.recvbuff = all;
  gather.count = bytes, gather.dtype = collUint8;
  PlanChoice choice;
  COLL_TRY(planCollective(plans_.inputs(), gather, &choice));
  return runChecked(gather, choice);
}

void Comm::abort() {
  failure_.markAborted();
  // The lanes' rendezvous, which no call of the user's started, waits for every rank: without
  // being told, the others would wait there for this rank until COLL_TIMEOUT (their destroy too).
  if (lanesPending_.load()) failure_.revokeWithoutWaiting();
  abortLanes();
  // Queued work that has not started is dropped: its streams learn of the abort.
  queue_.abort();
  {
    // Every CUDA stream waiting on this communicator moves on (the results are undefined).
    std::lock_guard<std::mutex> lock(deviceMu_);
    if (device_) device_->gate().releaseAll();
  }
  if (bootstrap_) bootstrap_->abort();
  failure_.fail(Status(collRemoteError, "the communicator was aborted"));
}

Status Comm::runExecution(Execution& execution, const Schedule& schedule, const ExecBuffers& buffers, const char* what,
                          uint64_t count, int dtype) {
  // Two instantiations, so that an untraced call runs the code it ran before tracing existed.
  if (tracer_.observer() != nullptr) [[unlikely]] {
    return runExecutionAs<true>(execution, schedule, buffers, what, count, dtype);
  }
  return runExecutionAs<false>(execution, schedule, buffers, what, count, dtype);
}

template <bool kObserved>
Status Comm::runExecutionAs(Execution& execution, const Schedule& schedule, const ExecBuffers& buffers,
                            const char* what, uint64_t count, int dtype) {
  struct NetCall {
    NetTransport* net;
    explicit NetCall(NetTransport* n) : net(n) {
      if (net != nullptr) net->enterCall();
    }
    ~NetCall() {
      if (net != nullptr) net->leaveCall();
    }
  } netCall(links_.net());
  struct ScratchBack {
    Connections& links;
    ~ScratchBack() { links.releaseScratch(); }
  } scratchBack{links_};
  COLL_TRY(execution.start(schedule, buffers, links_, seq_));
  failure_.publishOp(what, count, dtype, seq_);
  if constexpr (kObserved) {
    execution.setObserver(&tracer_);
    tracer_.beginCall(what, schedule, seq_, count, dtype >= 0 ? static_cast<collDataType_t>(dtype) : collUint8);
  }
  Status st = runToCompletion(execution, links_, callDeadline(), links_.waitPolicy(), &failure_.snapshot());
  // The snapshot keeps saying "in this call, waiting for P" while the error is analysed: peers
  // following their own wait-for chains must not take this rank for the culprit meanwhile.
  if (!st.ok()) st = failure_.diagnose(st, execution);
  failure_.publishIdle();
  if constexpr (kObserved) {
    tracer_.endCall(st);
    execution.setObserver(nullptr);  // untraced calls leave it alone
  }
  return st;
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

Status Comm::compressedAllReduce(const CollArgs& args) {
  const uint64_t bytes = args.count * dataTypeSize(args.dtype);
  if (topo_.nranks == 1 || bytes < args.compress.minBytes) {
    if (!loggedCompressFallback_ && rank() == 0) {
      COLL_INFO(rank(),
                "compressed All-Reduce of %llu bytes runs uncompressed (below %llu bytes: the call's minBytes "
                "or COLL_COMPRESS_MIN_BYTES; logged once)",
                static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(args.compress.minBytes));
    }
    loggedCompressFallback_ = true;
    stats_.uncompressedFallbacks++;
    CollArgs plain = args;
    plain.compress = CollArgs::Compression{};
    return collective(plain);
  }
  PlanChoice choice;
  COLL_TRY(planCompressedAllReduce(plans_.inputs(), args, &choice));
  const uint64_t before = links_.wireBytes();
  COLL_TRY(runChecked(args, choice));
  stats_.compressedWireBytes += links_.wireBytes() - before;
  stats_.compressedInputBytes += bytes;
  stats_.compressedCalls++;
  return okStatus();
}

collCommStats_t Comm::stats() const {
  collCommStats_t out = stats_;
  out.wireBytes = links_.wireBytes();
  addLaneStats(&out);
  return out;
}

Status Comm::collective(const CollArgs& args, const double* deviceScalarValue) {
  COLL_TRY(failure_.checkUsable());
  if (args.compress.blockSize > 0) return compressedAllReduce(args);
  CollArgs call = args;
  double scalar = 1.0;
  const void* deviceScalar = nullptr;
  if (preMulSumScalar(args.op, &scalar, &deviceScalar)) {
    if (deviceScalar != nullptr) {
      if (deviceScalarValue == nullptr) {
        return makeError(collInvalidArgument,
                         "PreMulSum op %d has its scalar in device memory (collScalarDevice): use it with device "
                         "buffers",
                         static_cast<int>(args.op));
      }
      scalar = *deviceScalarValue;
    }
    // PreMulSum: scale this rank's contribution once, then sum. The staging buffer only grows.
    uint64_t elements = args.count;
    if (args.kind == CollKind::ReduceScatter) elements *= static_cast<uint64_t>(topo_.nranks);
    const size_t bytes = elements * dataTypeSize(args.dtype);
    if (preMulStaging_.size() < bytes) preMulStaging_.resize(bytes);
    kernels::scale(preMulStaging_.data(), args.sendbuff, elements, args.dtype, scalar);
    call.sendbuff = preMulStaging_.data();
    call.op = collSum;
  }
  const PlanChoice* choice = nullptr;
  COLL_TRY(plans_.choosePlan(call, &choice));
  COLL_TRACE(rank(), "%s seq %llu count %llu dtype %d op %d root %d: %s, predicted %.1f us", collKindName(call.kind),
             static_cast<unsigned long long>(seq_ + 1), static_cast<unsigned long long>(call.count), call.dtype,
             call.op, call.root, describeChoice(choice->algo, choice->options, choice->sliceBytes).c_str(),
             choice->predictedSeconds * 1e6);
  return runChecked(call, *choice);
}

Status Comm::runChecked(const CollArgs& args, const PlanChoice& choice) {
  Status status;
  const size_t es = dataTypeSize(args.dtype);
  if (choice.roundElems == 0 || args.count <= choice.roundElems) {
    status = runPlan(plans_.planFor(args, choice), args);
  } else {
    // The algorithm's per-call memory is bounded (the direct window): run the call as rounds.
    for (uint64_t done = 0; done < args.count && status.ok(); done += choice.roundElems) {
      CollArgs round = args;
      round.count = std::min<uint64_t>(choice.roundElems, args.count - done);
      round.sendbuff = static_cast<const char*>(args.sendbuff) + done * es;
      round.recvbuff = static_cast<char*>(args.recvbuff) + done * es;
      status = runPlan(plans_.planFor(round, choice, args.count), round);
    }
  }
  if (!status.ok()) {
    Status annotated =
        status.withContext("rank " + std::to_string(rank()) + ": " + collKindName(args.kind) + " (call " +
                           std::to_string(seq_) + ", " + std::to_string(args.count) + " elements)");
    if (status.code() == collRemoteError || status.code() == collTimeout || status.code() == collSystemError) {
      failure_.fail(annotated);
    }
    return annotated;
  }
  return okStatus();
}

Status Comm::pointToPoint(const P2pCall* calls, size_t ncalls) {
  COLL_TRY(failure_.checkUsable());
  p2p_.ops.clear();
  p2p_.buffers.clear();
  for (size_t i = 0; i < ncalls; ++i) {
    p2p_.ops.push_back(P2pOp{calls[i].send, calls[i].peer, calls[i].bytes});
    p2p_.buffers.push_back(calls[i].buffer);
  }
  // Receives that overwrite a buffer a send of this batch still reads (in-place sendrecv).
  p2p_.aliases.clear();
  for (size_t r = 0; r < ncalls; ++r) {
    if (calls[r].send || calls[r].bytes == 0) continue;
    const auto* rb = static_cast<const std::byte*>(calls[r].buffer);
    for (size_t w = 0; w < ncalls; ++w) {
      if (!calls[w].send || calls[w].bytes == 0) continue;
      const auto* sb = static_cast<const std::byte*>(calls[w].buffer);
      if (rb < sb + calls[w].bytes && sb < rb + calls[r].bytes) {
        p2p_.aliases.push_back(P2pAlias{static_cast<int32_t>(r), static_cast<int32_t>(w), rb == sb});
      }
    }
  }
  p2p_.schedule.clear();
  buildP2pBatch(topo_, p2p_.ops.data(), p2p_.ops.size(), &p2p_.schedule, p2p_.aliases.data(), p2p_.aliases.size());
  // Not a new call number: only some ranks take part, and the shared windows of every later
  // collective match ranks by it. The batch runs as "after call seq_" (it uses no window).
  ExecBuffers buffers;
  buffers.extra = p2p_.buffers.data();
  buffers.nextra = p2p_.buffers.size();
  uint64_t bytes = 0;
  for (size_t i = 0; i < ncalls; ++i) bytes += calls[i].bytes;
  Status status = runExecution(p2p_.execution, p2p_.schedule, buffers, "point-to-point", bytes, -1);
  if (!status.ok()) {
    Status annotated = status.withContext("rank " + std::to_string(rank()) + ": " + std::to_string(ncalls) +
                                          " point-to-point call(s) (after call " + std::to_string(seq_) + ")");
    if (status.code() == collRemoteError || status.code() == collTimeout || status.code() == collSystemError) {
      failure_.fail(annotated);
    }
    return annotated;
  }
  return okStatus();
}

Status Comm::execute(const Work& work) {
  COLL_TRY(awaitSetup());  // queued work waits here, on the progress thread, not in enqueue
  if (work.gate.seq != 0) return executeOnDevice(work);
  Status first;
  const std::vector<CollArgs>& calls = work.collectives;
  if (checkCalls_) {
    for (const CollArgs& args : calls) COLL_TRY(checkSameCall(args));
  }
  for (size_t i = 0; i < calls.size();) {
    size_t used = 1;
    Status s = calls.size() - i >= 2 ? runFusedPrefix(calls.data() + i, calls.size() - i, &used) : collective(calls[i]);
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
  if (failure_.asyncError() != collSuccess || !fusable(calls[0]) || !fusable(calls[1])) return collective(calls[0]);
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
      if (overlap(span(calls[k], false), span(calls[j], false)) ||
          overlap(span(calls[k], false), span(calls[j], true)) ||
          overlap(span(calls[k], true), span(calls[j], false))) {
        return true;
      }
    }
    return false;
  };
  HostWindows* w = links_.windows();
  fused_.schedule.clear();
  fused_.buffers.clear();
  size_t k = 0;
  for (; k < n && fusable(calls[k]) && !dependsOnEarlier(k); ++k) {
    const PlanChoice* choice = nullptr;
    COLL_TRY(plans_.choosePlan(calls[k], &choice));
    if (choice->roundElems != 0) break;
    const Schedule& part = plans_.planFor(calls[k], *choice).schedule;
    if (k > 0 && part.divisor != fused_.schedule.divisor) break;
    const uint64_t windowNeed = fused_.schedule.windowBytesWith(part);
    if (part.usesWindows && (w == nullptr || windowNeed > w->halfBytes() ||
                             fused_.schedule.publishSlots + part.publishSlots > w->maxPublishSlots())) {
      break;
    }
    if (k == 0) {
      fused_.schedule.dtype = part.dtype;
      fused_.schedule.op = part.op;
      fused_.schedule.divisor = part.divisor;
      fused_.schedule.algorithm = "fused";
    }
    fused_.schedule.append(part, static_cast<int32_t>(2 * k), static_cast<int32_t>(2 * k + 1));
    fused_.buffers.push_back(const_cast<void*>(calls[k].sendbuff));
    fused_.buffers.push_back(calls[k].recvbuff);
  }
  if (k < 2) return collective(calls[0]);
  fused_.schedule.finalizePeers();
  *used = k;
  ++seq_;
  COLL_TRACE(rank(), "call %llu: %zu collectives (the first a %s) fused into one schedule of %zu steps",
             static_cast<unsigned long long>(seq_), k, collKindName(calls[0].kind), fused_.schedule.steps.size());
  ExecBuffers buffers;
  buffers.extra = fused_.buffers.data();
  buffers.nextra = fused_.buffers.size();
  Status status = runExecution(fused_.execution, fused_.schedule, buffers, "fused collectives", k, calls[0].dtype);
  return annotate(status, std::to_string(k) + " fused collectives");
}

Status Comm::annotate(const Status& status, const std::string& what) {
  if (status.ok()) return status;
  Status annotated =
      status.withContext("rank " + std::to_string(rank()) + ": " + what + " (call " + std::to_string(seq_) + ")");
  if (status.code() == collRemoteError || status.code() == collTimeout || status.code() == collSystemError) {
    failure_.fail(annotated);
  }
  return annotated;
}

Status Comm::enqueue(Work work) {
  // Work index w runs on lane w mod L (lanes.cc says why that cannot deadlock). An empty piece of
  // work (a group whose calls were all no-ops) only marks its stream's order: lane 0, no index.
  if (lanes_ && !(work.collectives.empty() && work.p2p.empty())) {
    const int k = laneOf(work.collectives.empty());
    if (k != 0) return lanes_->enqueue(k, std::move(work));
  }
  return queue_.enqueue(std::move(work));
}

Comm::P2pCall Comm::p2pCallOf(const CollArgs& a) {
  const bool send = a.kind == CollKind::Send;
  return P2pCall{send, a.peer, send ? const_cast<void*>(a.sendbuff) : a.recvbuff, a.count * dataTypeSize(a.dtype)};
}

int Comm::laneOf(bool pointToPointOnly) { return pointToPointOnly ? lanes_->peek() : lanes_->take(); }

Status Comm::runNow(const CollArgs& args) {
  COLL_TRY(awaitSetup());
  const bool p2p = args.kind == CollKind::Send || args.kind == CollKind::Recv;
  if (lanes_) {
    const int k = laneOf(p2p);
    if (k != 0) return lanes_->runNow(k, args);
  }
  if (!queue_.threaded()) {
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
  COLL_TRY(awaitSetup());
  if (lanes_) {
    if (work.collectives.empty() && work.p2p.empty()) {
      // collCommFinalize: every lane's queued work completes, then lane 0's.
      Status drained = lanes_->drain();
      Status here = runNowHere(std::move(work));
      return drained.ok() ? here : drained;
    }
    const int k = laneOf(work.collectives.empty());
    if (k != 0) return lanes_->runNow(k, std::move(work));
  }
  return runNowHere(std::move(work));
}

Status Comm::runNowHere(Work work) { return queue_.runNow(std::move(work)); }

size_t Comm::streamWorkOutstanding() const { return queue_.outstanding() + (lanes_ ? lanes_->outstanding() : 0); }

void Comm::rememberGrowId(uint64_t nonce) {
  std::lock_guard<std::mutex> lock(growIdsMu_);
  growIds_.push_back(nonce);
}

bool Comm::takeGrowId(uint64_t nonce) {
  std::lock_guard<std::mutex> lock(growIdsMu_);
  auto it = std::find(growIds_.begin(), growIds_.end(), nonce);
  if (it == growIds_.end()) return false;
  growIds_.erase(it);
  return true;
}

Status Comm::bindDevice(int device) {
  int expected = -1;
  if (cudaDevice_.compare_exchange_strong(expected, device) || expected == device) return okStatus();
  return makeError(collInvalidArgument, "the buffers are on CUDA device %d, but the communicator uses device %d",
                   device, expected);
}

Status Comm::enqueueDevice(Work work, CUstream stream, int device) {
  COLL_TRY(failure_.checkUsable());
  if (failure_.aborted()) return makeError(collInvalidUsage, "the communicator was aborted");
  COLL_TRY(bindDevice(device));
  DeviceCalls* d = nullptr;
  {
    std::lock_guard<std::mutex> lock(deviceMu_);
    if (!device_) {
      const gpu::CudaDriver* cu = gpu::cudaDriver();
      if (cu == nullptr) return makeError(collInternalError, "device buffers without a CUDA driver");
      COLL_TRY(DeviceCalls::create(*cu, device, &device_).withContext("setting up CUDA device " +
                                                                       std::to_string(device)));
      device_->setRegistry(&registry_);
    }
    d = device_.get();
  }
  COLL_TRY(gpu::setCurrentDevice(d->driver(), device));
  COLL_TRY(d->gate().enter(stream, &work.gate));
  gpu::StreamGate* gate = &d->gate();
  const gpu::GateTicket ticket = work.gate;
  work.finish = [gate, ticket](const Status&) { gate->release(ticket); };
  // Lane 0 always: device work is few, large calls, and one queue keeps the gate's order simple.
  Status s = queue_.enqueue(std::move(work));
  if (!s.ok()) gate->release(ticket);
  return s;
}

Status Comm::executeOnDevice(const Work& work) {
  DeviceCalls& d = *device_;
  const std::atomic<bool>& stop = failure_.abortedFlag();
  Status first = gpu::setCurrentDevice(d.driver(), d.device());
  if (first.ok()) first = d.gate().waitReady(work.gate, callDeadline(), stop);
  if (first.ok()) {
    for (const CollArgs& args : work.collectives) {
      // collScalarDevice: the scalar is read now that the stream has reached the call, as NCCL reads it.
      double scalar = 0;
      const void* deviceScalar = nullptr;
      if (preMulSumScalar(args.op, &scalar, &deviceScalar) && deviceScalar != nullptr) {
        std::byte value[8] = {};
        Status s = d.copyToHost(value, deviceScalar, dataTypeSize(args.dtype), callDeadline(), stop);
        if (!s.ok() || !kernels::scalarToDouble(value, args.dtype, &scalar)) {
          if (first.ok()) first = s.ok() ? makeError(collInternalError, "PreMulSum scalar of no known type") : s;
          continue;
        }
      }
      // COLL_CHECK compares the user's call once, whichever path (IPC or staging) runs it.
      Status s = checkCalls_ ? checkSameCall(args) : okStatus();
      bool onIpc = false;
      const bool traced = tracer_.observer() != nullptr;
      const int64_t startNs = traced ? nowNs() : 0;
      if (s.ok()) {
        s = d.runCollective(
            args, rank(), nranks(), topo_.singleHost(), callDeadline(), stop,
            [&](const CollArgs& h) { return collective(h, deviceScalar != nullptr ? &scalar : nullptr); }, &onIpc);
      }
      // A staged call was traced as the host collective it ran; one over CUDA IPC ran no schedule.
      if (traced && onIpc)
        tracer_.directCall(collKindName(args.kind), "cuda-ipc", seq_, args.count, args.dtype, startNs, s);
      if (s.ok() && onIpc && args.compress.blockSize != 0) {
        // Staged calls count in compressedAllReduce; the IPC path's bytes never touch a link.
        stats_.compressedCalls++;
        stats_.compressedInputBytes += args.count * dataTypeSize(args.dtype);
      }
      if (!s.ok() && first.ok()) first = s;
    }
    if (!work.p2p.empty()) {
      Status s = d.stageP2p(work.p2p, callDeadline(), stop,
                            [&](const std::vector<P2pCall>& h) { return pointToPoint(h.data(), h.size()); });
      if (!s.ok() && first.ok()) first = s;
    }
  }
  // Nobody waits for this status: the stream moves on, and the error is the communicator's
  // (collCommGetAsyncError), as with NCCL.
  if (!first.ok()) failure_.fail(first);
  return first;
}

Status Comm::createPreMulSum(double scalar, const void* deviceScalar, collDataType_t dtype, collRedOp_t* op) {
  return userOps_.create(scalar, deviceScalar, dtype, op);
}

Status Comm::destroyRedOp(collRedOp_t op) { return userOps_.destroy(op); }

Status Comm::checkUserOp(collRedOp_t op, collDataType_t dtype) const {
  if (laneParent_ != nullptr) return laneParent_->checkUserOp(op, dtype);  // ops live on the parent
  return userOps_.check(op, dtype);
}

bool Comm::preMulSumScalar(collRedOp_t op, double* scalar, const void** deviceScalar) const {
  if (laneParent_ != nullptr) return laneParent_->preMulSumScalar(op, scalar, deviceScalar);  // the parent's ops
  return userOps_.scalarOf(op, scalar, deviceScalar);
}

Status Comm::checkSameCall(const CollArgs& args) {
  CallFingerprint mine = fingerprintOf(args);
  std::vector<CallFingerprint> all(static_cast<size_t>(topo_.nranks));
  CollArgs gather;
  gather.kind = CollKind::AllGather, gather.sendbuff = &mine, gather.recvbuff = all.data();
  gather.count = sizeof(CallFingerprint), gather.dtype = collUint8;
  const PlanChoice* choice = nullptr;
  COLL_TRY(plans_.choosePlan(gather, &choice));
  COLL_TRY(runChecked(gather, *choice).withContext("COLL_CHECK"));
  return describeCallMismatch(all);
}

}  // namespace coll
