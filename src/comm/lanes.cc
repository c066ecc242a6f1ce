// Lanes of a communicator (see lanes.h): work routing by work index, lazy creation of the lanes'
// child communicators over the parent's bootstrap, and what a lane shares with its parent
// (PreMulSum ops, failures, statistics, dumps, revocation, abort).
//
// Why lanes cannot deadlock. Every piece of work issued on a communicator gets a work index w in
// issue order; every rank issues the same work in the same order, so every rank gives a piece
// the same w and runs it on lane w mod L. Within a lane, work runs in increasing w on every rank
// (one queue, one thread, or the caller's thread while the lane has none), exactly as one
// communicator ran everything before. The only wait that crosses lanes is a host stream's
// ticket order (HostStream::waitTurn), and a stream's earlier ticket on this communicator has a
// smaller w. So every wait — for peers within the lane, for the lane's earlier work, for a
// stream's earlier work — is a wait for a smaller w or for the same w on other ranks, which
// themselves wait only for smaller w: the wait-for graph has no cycle, and the smallest w not
// yet done can always progress. Lanes are made by the communicator's set-up thread (every rank
// makes them in the same order; the first call waits for its own rank's set-up thread, which waits
// only for the other ranks' set-up threads), or with COLL_LAZY_SETUP=1 as part of a lane's first
// work (on every rank, by the thread that runs the work). Either way making a lane uses only the
// parent's bootstrap messages (no collective of the parent, which would take work indices and tie
// lanes together), and it holds no lock that other lanes' work needs.
#include "src/comm/lanes.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "src/base/byte_order.h"
#include "src/base/config.h"
#include "src/base/log.h"
#include "src/oob/auth.h"
#include "src/oob/bootstrap.h"

namespace coll {

const IntKnob kStreamLanes("COLL_STREAM_LANES", "2",
                           "Lanes per communicator (1-16): work number w runs on lane w mod N, so work on different "
                           "host streams of one communicator overlaps; lane k > 0 is an internal communicator over the "
                           "same ranks, made in the background from creation on (COLL_LAZY_SETUP=1: on first use). 1: "
                           "one lane, all work of a communicator in issue order.",
                           {KnobSection::PlannerExecutor, 120});

namespace {

constexpr int kPollMs = 50;  // how often a rendezvous wait looks at abort and failure flags

}  // namespace

int streamLanesFromConfig() {
  const int64_t v = kStreamLanes.get();
  if (v < 1) return 1;
  return v > kMaxStreamLanes ? kMaxStreamLanes : static_cast<int>(v);
}

Lanes::Lane::Lane(Lanes& lanes, int k)
    : index(k), queue([&lanes, this](const Comm::Work& work) { return lanes.run(*this, work); }, lanes.stop_) {
  queue.setIdentity(lanes.parent_.rank(), lanes.parent_.timeoutMs_, " on lane " + std::to_string(k));
}

Lanes::Lanes(Comm& parent, int count) : parent_(parent), count_(count) {
  lanes_.resize(static_cast<size_t>(count));
  for (int k = 1; k < count; ++k) lanes_[k] = std::make_unique<Lane>(*this, k);
}

Lanes::~Lanes() { shutdown(); }

Status Lanes::interrupted() {
  if (stop_.load()) return makeError(collRemoteError, "the communicator was aborted while making a stream lane");
  if (parent_.failure_.aborting()) {
    Status why = parent_.failure_.checkUsable();
    return why.ok() ? makeError(collRemoteError, "the communicator failed while making a stream lane") : why;
  }
  // Often no call of the parent runs while a lane waits here, so nothing would notice a local peer
  // that died after the parent's last call: ask (a dead one is recorded and its death propagated).
  // Thread-safe beside the parent's own calls: it only polls the peers' pid descriptors.
  return parent_.links_.checkHealth();
}

Status Lanes::recvPolling(int peer, uint32_t tag, std::vector<uint8_t>* data, size_t maxSize, Deadline deadline) {
  Bootstrap& bs = parent_.bootstrap();
  waitPeer_.store(peer);
  for (;;) {
    const int slice = std::max(1, std::min(kPollMs, deadline.remainingMs()));
    Status st = bs.recv(peer, tag, data, maxSize, Deadline::afterMs(slice));
    if (st.ok() || st.code() != collTimeout) {
      waitPeer_.store(-1);
      return st;
    }
    Status why = interrupted();
    if (!why.ok() || deadline.expired()) {
      // Still "waiting for peer" while diagnosing: others' wait-for chains must pass through us.
      if (why.ok()) why = diagnoseTimeout(peer, st);
      waitPeer_.store(-1);
      return why;
    }
  }
}

Status Lanes::sendPolling(int peer, uint32_t tag, const void* data, size_t size, Deadline deadline) {
  // In slices, so an abort or a failure elsewhere stops a sender whose peer went away (a send
  // retries refused connections until its deadline). A retried send may deliver twice: each
  // lane's tags carry one message per sender, so a duplicate is never read.
  Bootstrap& bs = parent_.bootstrap();
  for (;;) {
    const int slice = std::max(1, std::min(4 * kPollMs, deadline.remainingMs()));
    Status st = bs.send(peer, tag, data, size, Deadline::afterMs(slice));
    if (st.ok()) return st;
    Status why = interrupted();
    if (!why.ok()) return why;
    if (deadline.expired()) return st.code() == collTimeout ? diagnoseTimeout(peer, st) : st;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

Status Lanes::diagnoseTimeout(int peer, const Status& st) {
  FailureManager& f = parent_.failure_;
  int culprit = -1;
  std::string reason, cycle;
  f.followWaitChain(peer, f.snapshot().seq.load(std::memory_order_relaxed), &culprit, &reason, &cycle);
  if (f.interrupted()) return f.consequence(st);
  if (culprit >= 0 && f.awaitNotice()) return f.consequence(st);
  if (culprit >= 0) {
    (void)f.recordFailure(culprit, reason, parent_.rank(), true);
    return Status(collTimeout, f.interruption().message() + "\n  " + st.message());
  }
  if (!cycle.empty()) {
    return Status(collTimeout, st.message() + "\n  the ranks wait for each other in a cycle: " + cycle +
                                   " (mismatched calls: check that every rank makes the same calls in the same order)");
  }
  return st;
}

void Lanes::answerWaitFor(WaitForAnswer* a) const {
  const int peer = waitPeer_.load();
  if (peer < 0 || a->running) return;
  a->running = true;
  a->waitPeer = peer;
  a->step = -1;
}

Status Lanes::make(int k, std::unique_ptr<Comm>* out) {
  const int n = parent_.nranks(), me = parent_.rank();
  const Deadline deadline = parent_.callDeadline();
  const uint32_t upTag = kLaneTagBase + 2u * static_cast<uint32_t>(k), downTag = upTag + 1;
  uint8_t mark[4];
  le::put32(mark, static_cast<uint32_t>(k));
  // Up a binary tree: a rank reports ready once its subtree is, so the rendezvous below starts
  // only when every rank has reached this lane (and each wait here stays interruptible).
  const int kids[2] = {2 * me + 1, 2 * me + 2};
  for (int c : kids) {
    if (c >= n) continue;
    std::vector<uint8_t> m;
    COLL_TRY(recvPolling(c, upTag, &m, sizeof(mark), deadline).withContext("stream lane " + std::to_string(k)));
    if (m.size() != sizeof(mark) || le::get32(m.data()) != static_cast<uint32_t>(k)) {
      return makeError(collRemoteError, "rank %d sent a malformed stream-lane message (%zu bytes)", c, m.size());
    }
  }
  if (me > 0) {
    COLL_TRY(
        sendPolling((me - 1) / 2, upTag, mark, sizeof(mark), deadline).withContext("stream lane " + std::to_string(k)));
  }
  // Down: rank 0's rendezvous id, forwarded by every rank to its children.
  collUniqueId id;
  memset(&id, 0, sizeof(id));
  if (me == 0) {
    Secret secret;
    COLL_TRY(randomSecret(&secret));
    COLL_TRY(startBootstrapRoot(SocketAddress{}, &secret, &id).withContext("stream lane: starting the rendezvous"));
  } else {
    std::vector<uint8_t> m;
    COLL_TRY(
        recvPolling((me - 1) / 2, downTag, &m, sizeof(id), deadline).withContext("stream lane " + std::to_string(k)));
    if (m.size() != sizeof(id)) {
      return makeError(collRemoteError, "rank %d sent a %zu-byte stream-lane id (want %zu)", (me - 1) / 2, m.size(),
                       sizeof(id));
    }
    memcpy(&id, m.data(), sizeof(id));
  }
  for (int c : kids) {
    if (c >= n) continue;
    COLL_TRY(sendPolling(c, downTag, &id, sizeof(id), deadline).withContext("stream lane " + std::to_string(k)));
  }
  CommConfig config = parent_.config();
  config.laneParent = &parent_;
  config.commName = (config.commName.empty() ? std::string("comm") : config.commName) + "/lane" + std::to_string(k);
  COLL_TRY(Comm::create(id, n, me, config, out).withContext("making stream lane " + std::to_string(k)));
  if (me == 0) COLL_INFO(me, "stream lane %d of %d made (%d ranks)", k, count_, n);
  return okStatus();
}

Status Lanes::ready(Lane& lane) {
  if (lane.child) return parent_.failure_.checkUsable();
  if (lane.tried) return lane.made;
  COLL_TRY(parent_.failure_.checkUsable());
  lane.tried = true;
  std::unique_ptr<Comm> child;
  lane.made = make(lane.index, &child);
  if (!lane.made.ok()) {
    const collResult_t code = lane.made.code();
    if (code == collRemoteError || code == collTimeout || code == collSystemError) parent_.failure_.fail(lane.made);
    return lane.made;
  }
  lane.child = std::move(child);
  std::lock_guard<std::mutex> lock(childrenMu_);
  lane.published = lane.child.get();
  return okStatus();
}

Status Lanes::makeAll() {
  for (int k = 1; k < count_; ++k) COLL_TRY(ready(*lanes_[static_cast<size_t>(k)]));
  return okStatus();
}

Status Lanes::run(Lane& lane, const Comm::Work& work) {
  if (work.collectives.empty() && work.p2p.empty()) return okStatus();  // a drain marker
  COLL_TRY(parent_.awaitSetup());  // queued work: the set-up thread may still be making this lane
  COLL_TRY(ready(lane));
  return lane.child->execute(work);
}

Status Lanes::enqueue(int k, Comm::Work work) {
  if (parent_.failure_.aborted()) return makeError(collInvalidUsage, "the communicator was aborted");
  return lanes_[static_cast<size_t>(k)]->queue.enqueue(std::move(work));
}

Status Lanes::runNow(int k, const CollArgs& args) {
  Lane& lane = *lanes_[static_cast<size_t>(k)];
  if (!lane.queue.threaded()) {
    COLL_TRY(ready(lane));
    return lane.child->runNow(args);  // the child has no lanes and no progress thread: the fast path
  }
  Comm::Work work;
  if (args.kind == CollKind::Send || args.kind == CollKind::Recv) work.p2p.push_back(Comm::p2pCallOf(args));
  else work.collectives.push_back(args);
  return runNow(k, std::move(work));
}

Status Lanes::runNow(int k, Comm::Work work) {
  Lane& lane = *lanes_[static_cast<size_t>(k)];
  if (lane.queue.threaded() && parent_.failure_.aborted())
    return makeError(collInvalidUsage, "the communicator was aborted");
  return lane.queue.runNow(std::move(work));
}

Status Lanes::drain() {
  Status first;
  for (int k = 1; k < count_; ++k) {
    if (!lanes_[static_cast<size_t>(k)]->queue.threaded()) continue;
    Status s = runNow(k, Comm::Work{});
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

size_t Lanes::outstanding() const {
  size_t n = 0;
  for (int k = 1; k < count_; ++k) n += lanes_[static_cast<size_t>(k)]->queue.outstanding();
  return n;
}

void Lanes::abort() {
  stop_.store(true);
  for (int k = 1; k < count_; ++k) lanes_[static_cast<size_t>(k)]->queue.abort();
  forEachChild([](Comm& child) { child.abort(); });
}

void Lanes::shutdown() {
  for (int k = 1; k < count_; ++k) {
    lanes_[static_cast<size_t>(k)]->queue.stop();
  }
  for (int k = 1; k < count_; ++k) {
    Lane& lane = *lanes_[static_cast<size_t>(k)];
    {
      std::lock_guard<std::mutex> lock(childrenMu_);
      lane.published = nullptr;
    }
    // Outside the lock: the child's listener may be forwarding a failure to the parent, which
    // visits the (remaining) children.
    lane.child.reset();
  }
}

void Lanes::forEachChild(const std::function<void(Comm&)>& fn) {
  std::lock_guard<std::mutex> lock(childrenMu_);
  for (int k = 1; k < count_; ++k) {
    if (Comm* c = lanes_[static_cast<size_t>(k)]->published) fn(*c);
  }
}

// ---- the parent's side (Comm members that involve lanes) ---------------------------------------

void Comm::startLanes() {
  const int count = laneParent_ != nullptr ? 1 : streamLanesFromConfig();
  if (count > 1) lanes_ = std::make_unique<Lanes>(*this, count);
}

int Comm::lanesMade() {
  int n = 1;
  if (lanes_) lanes_->forEachChild([&](Comm&) { ++n; });
  return n;
}

void Comm::stopLanes() {
  if (lanes_) lanes_->shutdown();
}

void Comm::abortLanes() {
  if (lanes_) lanes_->abort();
}

void Comm::forwardFailure(int peer, const std::string& reason, int reportedBy) {
  // A lane's failed peer is the communicator's, and the other way round; recordFailure reports
  // news only once, so the forwarding stops after one round.
  if (laneParent_ != nullptr) (void)laneParent_->failure_.recordFailure(peer, reason, reportedBy, false);
  if (lanes_) {
    lanes_->forEachChild([&](Comm& child) { (void)child.failure_.recordFailure(peer, reason, reportedBy, false); });
  }
}

void Comm::dumpLanes(const char* why) {
  if (lanes_) lanes_->forEachChild([&](Comm& child) { child.dump(why); });
}

Status Comm::revokeLanes() {
  if (!lanes_) return okStatus();
  // Outside the children's lock (a revoke waits for its notices to go out, and the children's
  // wait-for answers take that lock); the children live until the parent's destructor, which
  // the caller does not run concurrently.
  std::vector<Comm*> children;
  lanes_->forEachChild([&](Comm& child) { children.push_back(&child); });
  Status first;
  for (Comm* child : children) {
    Status s = child->revoke();
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

void Comm::answerFromLanes(WaitForAnswer* a) {
  Comm* root = laneParent_ != nullptr ? laneParent_ : this;
  if (!root->lanes_) return;
  // Lanes of one rank progress independently, so a rank idle in this lane may be stuck in
  // another: the wait-for chain follows that wait instead of blaming an idle rank.
  auto consider = [&](Comm& c) {
    if (a->running || &c == this || !c.failure_.snapshot().running.load(std::memory_order_acquire)) return;
    a->running = true;
    a->seq = c.failure_.snapshot().seq.load(std::memory_order_relaxed);
    a->waitPeer = c.failure_.snapshot().waitPeer.load(std::memory_order_relaxed);
    a->step = c.failure_.snapshot().step.load(std::memory_order_relaxed);
  };
  consider(*root);
  root->lanes_->answerWaitFor(a);
  root->lanes_->forEachChild(consider);
}

void Comm::addLaneStats(collCommStats_t* out) const {
  if (!lanes_) return;
  lanes_->forEachChild([&](Comm& child) {
    const collCommStats_t s = child.stats();
    out->wireBytes += s.wireBytes;
    out->compressedWireBytes += s.compressedWireBytes;
    out->compressedInputBytes += s.compressedInputBytes;
    out->compressedCalls += s.compressedCalls;
    out->uncompressedFallbacks += s.uncompressedFallbacks;
  });
}

}  // namespace coll
