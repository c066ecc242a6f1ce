// A communicator's fault tolerance (see failure_manager.h): recording and spreading failed ranks,
// the wait-for chain on a timeout, revocation, and dumps of what this rank is doing (collCommDump,
// SIGUSR1).
#include "src/comm/failure_manager.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "src/base/config.h"
#include "src/base/log.h"
#include "src/base/parallel.h"
#include "src/plan/planner.h"
#include "transports/net.h"

namespace coll {

const BoolKnob kDumpOnSignal("COLL_DUMP_ON_SIGNAL", "0",
                             "1: SIGUSR1 makes every live communicator log what it is doing (as collCommDump): the "
                             "operation, its pending steps and the peers it waits for.",
                             {KnobSection::PlannerExecutor, 140});

const IntKnob kNoticeFanout("COLL_NOTICE_FANOUT", "32",
                            "Fan-out of the tree along which failure and revocation notices spread: the rank that "
                            "detects a failure tells this many ranks, each of them as many more. Up to fan-out + 1 "
                            "ranks, the detecting rank tells everyone itself.",
                            {KnobSection::Bootstrap, 91});

namespace {

// ---- live communicators, for the SIGUSR1 dump -------------------------------------------------

std::mutex gLiveMu;
std::set<FailureManager*>& liveComms() {
  static auto* comms = new std::set<FailureManager*>();  // never destroyed: safe at exit
  return *comms;
}

int gSignalPipe[2] = {-1, -1};

void onDumpSignal(int) {
  const int saved = errno;
  const char byte = 1;
  ssize_t n = ::write(gSignalPipe[1], &byte, 1);  // async-signal-safe; the dump thread does the rest
  (void)n;
  errno = saved;
}

void dumpThread() {
  for (;;) {
    char buf[64];
    const ssize_t n = ::read(gSignalPipe[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    std::lock_guard<std::mutex> lock(gLiveMu);
    for (FailureManager* c : liveComms()) c->dump("SIGUSR1");
  }
}

// COLL_DUMP_ON_SIGNAL=1: installs the handler and its thread once per process.
void maybeInstallDumpSignal() {
  if (!kDumpOnSignal.get()) return;
  static std::once_flag once;
  std::call_once(once, [] {
    if (::pipe2(gSignalPipe, O_CLOEXEC) != 0) {
      COLL_WARN(-1, "COLL_DUMP_ON_SIGNAL: pipe failed (%s); SIGUSR1 dumps are off", errnoText(errno).c_str());
      return;
    }
    (void)::fcntl(gSignalPipe[1], F_SETFL, O_NONBLOCK);  // a burst of signals must never block
    std::thread(dumpThread).detach();
    struct sigaction sa {};
    sa.sa_handler = onDumpSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (::sigaction(SIGUSR1, &sa, nullptr) != 0) {
      COLL_WARN(-1, "COLL_DUMP_ON_SIGNAL: sigaction failed (%s)", errnoText(errno).c_str());
    }
  });
}

}  // namespace

constexpr size_t kNotifyThreads = 16;  // notices in flight at once
constexpr int kNoticeGraceMs = 100;    // how long a rank about to blame a peer waits for a notice
constexpr int kAbortNoticeGraceMs = 300;  // how long an aborting communicator waits for its notices

int FailureManager::controlTimeoutMs() const {
  return static_cast<int>(std::clamp<int64_t>(timeoutMs_ / 8, 200, 2000));
}

std::string FailureManager::hostOf(int peer) const {
  if (!bootstrap_ || peer < 0 || peer >= bootstrap_->nranks()) return std::string();
  const PeerInfo& p = bootstrap_->peer(peer);
  return hostOfAddress(p.address.toString()) + ", pid " + std::to_string(p.pid);
}

void FailureManager::start(Bootstrap* bootstrap, int64_t timeoutMs, const std::string& name, FailureManager* laneParent,
                           LaneFailureHooks* lanes) {
  bootstrap_ = bootstrap;
  rank_ = bootstrap->rank();
  nranks_ = bootstrap->nranks();
  timeoutMs_ = timeoutMs;
  name_ = name;
  laneParent_ = laneParent;
  lanes_ = lanes;
  started_ = true;
  noticeFanout_ = static_cast<int>(std::clamp<int64_t>(kNoticeFanout.get(), 1, 1 << 20));
  bootstrap_->setControlHandler(
      [this](int from, uint32_t tag, const std::vector<uint8_t>& payload) { return onControl(from, tag, payload); });
  notifier_ = std::thread([this] { notifyLoop(); });
  if (laneParent == nullptr) {
    HeartbeatHooks hooks;
    hooks.isFailed = [this](int r) { return failures_.isFailed(r); };
    hooks.interrupted = [this] { return aborting(); };
    hooks.blame = [this](int r, const std::string& reason) { (void)recordFailure(r, reason, rank(), true); };
    heartbeat_.start(bootstrap, heartbeatOptionsFromConfig(noticeFanout_, controlTimeoutMs()), std::move(hooks));
  }
  {
    std::lock_guard<std::mutex> lock(gLiveMu);
    liveComms().insert(this);
  }
  maybeInstallDumpSignal();
}

void FailureManager::stop() {
  if (!started_) return;
  started_ = false;
  heartbeat_.stop(aborted_.load());
  {
    std::lock_guard<std::mutex> lock(gLiveMu);
    liveComms().erase(this);
  }
  if (bootstrap_) bootstrap_->setControlHandler(nullptr);
  {
    // Queued notices still go out (each bounded by a short deadline): peers must hear of a
    // failure before they see this rank's connections close.
    std::unique_lock<std::mutex> lock(notifyMu_);
    notifyStop_ = true;
    if (aborted_.load() && bootstrap_) {
      // An abort waits for them only so long: a notice that went out before the abort has its
      // full control deadline, and a stalled peer would hold collCommAbort for all of it.
      notifyCv_.wait_for(lock, std::chrono::milliseconds(kAbortNoticeGraceMs),
                         [&] { return noticesSent_ == noticesQueued_; });
      if (noticesSent_ != noticesQueued_) bootstrap_->breakControls();
    }
  }
  notifyCv_.notify_all();
  if (notifier_.joinable()) notifier_.join();
}

void FailureManager::notifyAll(uint32_t tag, std::vector<uint8_t> payload, int subject) {
  (void)queueNotice(Notice{tag, std::move(payload), 0, subject, rank()});
}

bool FailureManager::queueNotice(Notice notice) {
  {
    std::lock_guard<std::mutex> lock(notifyMu_);
    if (notifyStop_) return false;
    notice.id = ++noticesQueued_;
    notifyQueue_.push_back(std::move(notice));
  }
  notifyCv_.notify_all();
  return true;
}

void FailureManager::notifyLoop() {
  for (;;) {
    Notice notice;
    {
      std::unique_lock<std::mutex> lock(notifyMu_);
      notifyCv_.wait(lock, [&] { return notifyStop_ || !notifyQueue_.empty(); });
      if (notifyQueue_.empty()) return;
      notice = std::move(notifyQueue_.front());
      notifyQueue_.pop_front();
    }
    sendDownTree(notice);
    {
      std::lock_guard<std::mutex> lock(notifyMu_);
      noticesSent_ = notice.id;
    }
    notifyCv_.notify_all();
  }
}

void FailureManager::sendDownTree(const Notice& notice) {
  const std::vector<uint8_t> wire = encodeRelay(RelayMessage{notice.origin, notice.tag, notice.payload});
  const int n = nranks();
  std::atomic<uint64_t> sent{0};
  // Each with a short deadline (a stalled rank accepts the connection but never answers).
  auto tell = [&](int r) {
    // Once aborting, collCommAbort waits for this loop: keep each attempt short.
    const int ms = aborted_.load() ? std::min(controlTimeoutMs(), 100) : controlTimeoutMs();
    std::vector<uint8_t> reply;
    sent++;
    Status st = bootstrap_->control(r, kCtlTagRelay, wire.data(), wire.size(), &reply, Deadline::afterMs(ms));
    if (!st.ok()) COLL_INFO(rank(), "could not tell rank %d of the failure: %s", r, st.message().c_str());
    return st.ok();
  };
  // The subject is told by the origin alone, last; failed ranks are not told. Either way their
  // children are, by whoever would have told them.
  auto skip = [&](int r) { return r == notice.subject || failures_.isFailed(r); };
  std::vector<int> children, round;
  noticeTreeChildren(notice.origin, rank(), n, noticeFanout_, &children);
  expandNoticeTargets(notice.origin, n, noticeFanout_, children, skip, &round);
  // A round at a time, from several threads: a rank that learns of the failure may return, abort
  // and exit at once, and the ranks told after it must not see its connections close first. A rank
  // that does not answer cannot pass the notice on: the next round covers its children.
  while (!round.empty()) {
    std::vector<char> told(round.size(), 0);
    runInParallel(round.size(), kNotifyThreads, [&](size_t i) { told[i] = tell(round[i]) ? 1 : 0; });
    std::vector<int> orphans;
    for (size_t i = 0; i < round.size(); ++i) {
      if (told[i]) continue;
      noticeTreeChildren(notice.origin, round[i], n, noticeFanout_, &children);
      orphans.insert(orphans.end(), children.begin(), children.end());
    }
    round.clear();
    expandNoticeTargets(notice.origin, n, noticeFanout_, std::move(orphans), skip, &round);
  }
  // Told, a stalled subject stops instead of carrying on alone once it resumes.
  if (notice.origin == rank() && notice.subject >= 0 && notice.subject != rank()) (void)tell(notice.subject);
  COLL_INFO(rank(), "notice of rank %d passed on to %" PRIu64 " rank(s) (fan-out %d of %d ranks)", notice.origin,
            sent.load(), noticeFanout_, n);
}

void FailureManager::fail(const Status& status) {
  {
    std::lock_guard<std::mutex> lock(failMu_);
    collResult_t expected = collSuccess;
    if (asyncError_.compare_exchange_strong(expected, status.code())) failureMessage_ = status.message();
  }
  if (laneParent_ != nullptr) {
    // A lane's failure is the communicator's. The failed peers go first: a caller that sees the
    // communicator failed must find them in collCommGetFailedRanks (the lane records a peer
    // before it forwards it, and its failed call can return in between).
    for (const FailedPeer& f : failures_.peers())
      (void)laneParent_->recordFailure(f.rank, f.reason, f.reportedBy, false);
    // So does a revocation: a revoking rank revokes its lanes after the communicator, and down a
    // notice tree the lane's notice may arrive first.
    const int revokedBy = failures_.revokedBy();
    if (revokedBy >= 0) (void)laneParent_->failures_.revoke(revokedBy);
    laneParent_->fail(status);
  }
}

bool FailureManager::recordFailure(int peer, const std::string& reason, int reportedBy, bool propagate) {
  FailedPeer f;
  f.rank = peer;
  f.host = hostOf(peer);
  f.reason = reason.size() > kCtlMaxReason ? reason.substr(0, kCtlMaxReason) : reason;
  f.reportedBy = reportedBy;
  if (!failures_.record(f)) return false;
  std::string text = describeFailedPeer(f);
  if (reportedBy >= 0 && reportedBy != rank()) text += " (reported by rank " + std::to_string(reportedBy) + ")";
  COLL_WARN(rank(), "%s", text.c_str());
  fail(Status(collRemoteError, text));
  if (propagate) notifyAll(kCtlTagFailed, encodeFailed(FailedMessage{peer, f.reason}), peer);
  if (lanes_ != nullptr) lanes_->forwardFailure(peer, f.reason, reportedBy);
  return true;
}

std::vector<uint8_t> FailureManager::onControl(int from, uint32_t tag, const std::vector<uint8_t>& payload) {
  switch (tag) {
    case kCtlTagRelay: {
      RelayMessage m;
      if (!decodeRelay(payload.data(), payload.size(), nranks(), &m) || m.origin == rank()) {
        COLL_WARN(rank(), "dropping a malformed notice from rank %d (%zu bytes)", from, payload.size());
        return {};
      }
      onRelay(m);
      return {};
    }
    case kCtlTagHeartbeat: heartbeat_.onMessage(from, payload); return {};
    case kCtlTagWaitFor: {
      WaitForAnswer a;
      a.running = snapshot_.running.load(std::memory_order_acquire);
      a.seq = snapshot_.seq.load(std::memory_order_relaxed);
      a.waitPeer = snapshot_.waitPeer.load(std::memory_order_relaxed);
      a.step = snapshot_.step.load(std::memory_order_relaxed);
      const int64_t since = snapshot_.idleSinceNs.load(std::memory_order_acquire);
      a.idleMs = since > 0 ? static_cast<uint32_t>(std::clamp<int64_t>((nowNs() - since) / 1000000, 0, UINT32_MAX)) : 0;
      FailedPeer f;
      if (failures_.first(&f)) a.failedRank = f.rank;
      if (!a.running && lanes_ != nullptr)
        lanes_->answerFromLanes(&a);  // idle here, but this rank may wait in another stream lane
      std::vector<uint8_t> out(kWaitForWire);
      encodeWaitFor(a, out.data());
      return out;
    }
    default: return {};
  }
}

void FailureManager::onRelay(const RelayMessage& m) {
  // Recorded before the acknowledgement: once the sender has it, this rank knows.
  int subject = -1;
  switch (m.tag) {
    case kCtlTagFailed: {
      FailedMessage f;
      if (!decodeFailed(m.payload.data(), m.payload.size(), nranks(), &f)) {
        COLL_WARN(rank(), "dropping a malformed failure notice of rank %d", m.origin);
        return;
      }
      subject = f.rank;
      (void)recordFailure(f.rank, f.reason, m.origin, false);
      break;
    }
    case kCtlTagRevoked:
      if (failures_.revoke(m.origin)) {
        COLL_WARN(rank(), "the communicator was revoked by rank %d", m.origin);
        fail(Status(collRemoteError, "the communicator was revoked by rank " + std::to_string(m.origin)));
      }
      break;
    case kCtlTagCycle: {
      const std::string text = printableText(reinterpret_cast<const char*>(m.payload.data()), m.payload.size());
      if (failures_.noteCycle(m.origin, text))
        COLL_WARN(rank(), "rank %d found a wait-for cycle: %s", m.origin, text.c_str());
      break;
    }
    default: return;
  }
  std::vector<int> children;
  noticeTreeChildren(m.origin, rank(), nranks(), noticeFanout_, &children);
  if (children.empty()) return;
  {
    std::lock_guard<std::mutex> lock(notifyMu_);
    if (!forwarded_.emplace(m.origin, m.tag, subject).second) return;
  }
  (void)queueNotice(Notice{m.tag, m.payload, 0, subject, m.origin});
}

Status FailureManager::checkUsable() {
  if (failures_.interrupted()) {
    Status why = failures_.interruption(rank());
    if (!why.ok()) return why.withContext("the communicator cannot be used (abort, destroy or shrink it)");
  }
  if (asyncError_.load() != collSuccess) {
    std::lock_guard<std::mutex> lock(failMu_);
    return makeError(collInvalidUsage, "this communicator failed earlier (%s); destroy or abort it",
                     failureMessage_.c_str());
  }
  return okStatus();
}

void FailureManager::publishOp(const char* what, uint64_t count, int dtype, uint64_t seq) {
  snapshot_.what.store(what, std::memory_order_relaxed);
  snapshot_.count.store(count, std::memory_order_relaxed);
  snapshot_.dtype.store(dtype, std::memory_order_relaxed);
  snapshot_.seq.store(seq, std::memory_order_relaxed);
  snapshot_.running.store(true, std::memory_order_release);
}

void FailureManager::publishIdle() {
  snapshot_.running.store(false, std::memory_order_release);
  snapshot_.idleSinceNs.store(0, std::memory_order_relaxed);
  snapshot_.waitPeer.store(-1, std::memory_order_relaxed);
  snapshot_.step.store(-1, std::memory_order_relaxed);
}

Status FailureManager::consequence(const Status& st) {
  Status why = failures_.interruption(rank());
  if (why.ok()) return st;
  if (st.message() == why.message()) return st;
  return Status(why.code(), why.message() + "\n  (this rank saw: " + st.message() + ")");
}

bool FailureManager::awaitNotice() {
  const Deadline grace = Deadline::afterMs(kNoticeGraceMs);
  while (!failures_.interrupted() && !grace.expired()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  return failures_.interrupted();
}

Status FailureManager::connectFailed(int peer, const Status& st) {
  if (aborted_.load()) return st;
  if (failures_.interrupted()) return consequence(st);
  if (st.code() == collRemoteError || st.code() == collSystemError || st.code() == collTimeout) {
    (void)recordFailure(peer, st.message(), rank(), true);
    return consequence(st);
  }
  return st;
}

Status FailureManager::diagnose(const Status& st, const Execution& execution) {
  if (aborted_.load()) return st;
  if (failures_.interrupted()) return consequence(st);
  const int peer = execution.failedPeer();
  if ((st.code() == collRemoteError || st.code() == collSystemError) && peer >= 0) {
    // A peer that closed its end may only have exited after learning of another rank's failure;
    // its notice is sent before its connections close, so a short grace settles the order.
    if (awaitNotice()) return consequence(st);
    (void)recordFailure(peer, st.message(), rank(), true);
    return consequence(st);
  }
  if (st.code() != collTimeout) return st;
  dump("timeout");
  int32_t step = -1, waitPeer = -1;
  execution.blockedOn(&step, &waitPeer);
  if (waitPeer < 0 || waitPeer == rank()) return st;
  std::string cycle;
  int culprit = -1;
  std::string reason;
  followWaitChain(waitPeer, execution.seq(), &culprit, &reason, &cycle);
  if (failures_.interrupted()) return consequence(st);
  // A culprit that left or is idle may have diagnosed the same hang a moment earlier (a failure
  // or a cycle) and left: its notice is on the way.
  if (culprit >= 0 && awaitNotice()) return consequence(st);
  if (culprit >= 0) {
    (void)recordFailure(culprit, reason, rank(), true);
    Status why = failures_.interruption(rank());
    return Status(collTimeout, why.message() + "\n  " + st.message());
  }
  if (!cycle.empty()) {
    // Nobody failed, but the ranks on the cycle are stuck too: tell everyone, so they report the
    // cycle instead of blaming this rank once it has left.
    if (failures_.noteCycle(rank(), cycle)) {
      const std::string text = cycle.size() > kCtlMaxReason ? cycle.substr(0, kCtlMaxReason) : cycle;
      notifyAll(kCtlTagCycle, std::vector<uint8_t>(text.begin(), text.end()), -1);
    }
    return Status(collTimeout, st.message() + "\n  the ranks wait for each other in a cycle: " + cycle +
                                   " (mismatched calls: check that every rank makes the same calls in the same "
                                   "order; COLL_CHECK=1 compares collectives)");
  }
  return st;
}

void FailureManager::followWaitChain(int first, uint64_t mySeq, int* culprit, std::string* reason, std::string* cycle) {
  std::vector<int> path{rank()};
  int cur = first;
  const int ms = controlTimeoutMs();
  for (int hops = 0; hops < nranks() && !failures_.interrupted(); ++hops) {
    if (std::find(path.begin(), path.end(), cur) != path.end()) {
      for (int r : path) *cycle += std::to_string(r) + " -> ";
      *cycle += std::to_string(cur);
      return;
    }
    path.push_back(cur);
    std::vector<uint8_t> reply;
    Status st = bootstrap_->control(cur, kCtlTagWaitFor, nullptr, 0, &reply, Deadline::afterMs(ms));
    char buf[256];
    if (!st.ok()) {
      snprintf(buf, sizeof(buf), "did not answer a wait-for query within %d ms (stalled, dead or unreachable)", ms);
      *culprit = cur, *reason = buf;
      return;
    }
    WaitForAnswer a;
    if (!decodeWaitFor(reply.data(), reply.size(), nranks(), &a)) {
      *culprit = cur, *reason = "sent a malformed answer to a wait-for query";
      return;
    }
    if (a.failedRank >= 0) {
      // It already knows the culprit (its notice may still be on the way): adopt it.
      (void)recordFailure(a.failedRank, "reported by rank " + std::to_string(cur) + " during a wait-for query", cur,
                          false);
      return;
    }
    if (!a.running) {
      snprintf(buf, sizeof(buf),
               "is alive but not in a collective call (its last call is %" PRIu64 ", this rank waits in call %" PRIu64
               ")",
               a.seq, mySeq);
      *culprit = cur, *reason = buf;
      return;
    }
    if (a.waitPeer < 0) {
      snprintf(buf, sizeof(buf),
               "is in call %" PRIu64
               " but waits for no peer (still progressing: too slow for "
               "COLL_TIMEOUT?)",
               a.seq);
      *culprit = cur, *reason = buf;
      return;
    }
    COLL_INFO(rank(), "wait-for chain: rank %d (call %" PRIu64 ", step %d, idle %u ms) waits for rank %d", cur, a.seq,
              a.step, a.idleMs, a.waitPeer);
    cur = a.waitPeer;
  }
}

void FailureManager::dump(const char* why) {
  const bool running = snapshot_.running.load(std::memory_order_acquire);
  const char* what = snapshot_.what.load(std::memory_order_relaxed);
  const uint64_t count = snapshot_.count.load(std::memory_order_relaxed);
  const int dtype = snapshot_.dtype.load(std::memory_order_relaxed);
  const uint64_t seq = snapshot_.seq.load(std::memory_order_relaxed);
  const int step = snapshot_.step.load(std::memory_order_relaxed);
  const int waitPeer = snapshot_.waitPeer.load(std::memory_order_relaxed);
  const int64_t since = snapshot_.idleSinceNs.load(std::memory_order_acquire);
  std::string pending;
  if (running) {
    std::lock_guard<std::mutex> lock(snapshot_.mu);
    pending = snapshot_.pending;
  }
  std::string op;
  char buf[512];
  if (running) {
    snprintf(buf, sizeof(buf), "in %s (count %" PRIu64 ", datatype %s, call %" PRIu64 ")", what, count,
             dtype >= 0 && dtype < collNumTypes ? dataTypeName(static_cast<collDataType_t>(dtype)) : "bytes", seq);
    op = buf;
    if (waitPeer >= 0) {
      snprintf(buf, sizeof(buf), "; step %d waits for rank %d (host %s) for %.1f s", step, waitPeer,
               hostOf(waitPeer).c_str(), since > 0 ? static_cast<double>(nowNs() - since) / 1e9 : 0.0);
      op += buf;
    } else if (step >= 0) {
      snprintf(buf, sizeof(buf), "; first pending step %d", step);
      op += buf;
    } else {
      op += "; progressing";
    }
  } else {
    snprintf(buf, sizeof(buf), "idle (last call %" PRIu64 ", %s)", seq, what);
    op = buf;
  }
  std::string failed = failures_.describe();
  const int revokedBy = failures_.revokedBy();
  COLL_WARN(rank(), "dump (%s) of communicator %s, rank %d of %d: %s\n pending steps:\n%s failed ranks:\n%s%s", why,
            name_.empty() ? "(unnamed)" : name_.c_str(), rank(), nranks(), op.c_str(),
            pending.empty() ? "  none\n" : pending.c_str(), failed.empty() ? "  none\n" : failed.c_str(),
            revokedBy >= 0 ? (" revoked by rank " + std::to_string(revokedBy)).c_str() : "");
}

uint64_t FailureManager::queueRevocation(const char* why) {
  if (!failures_.revoke(rank())) return 0;
  COLL_WARN(rank(), "revoking the communicator (%s)", why);
  fail(Status(collRemoteError, "the communicator was revoked by rank " + std::to_string(rank())));
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(notifyMu_);
    if (notifyStop_) return 0;
    notifyQueue_.push_back(Notice{kCtlTagRevoked, {}, ++noticesQueued_, -1, rank()});
    id = noticesQueued_;
  }
  notifyCv_.notify_all();
  return id;
}

void FailureManager::revokeWithoutWaiting() {
  if (started_) (void)queueRevocation("aborted while its stream lanes were being made");
}

Status FailureManager::revoke() {
  const uint64_t id = queueRevocation("collCommRevoke");
  if (id == 0) return okStatus();
  // Every rank hears of it before this call returns (a stalled one costs a short deadline).
  std::unique_lock<std::mutex> lock(notifyMu_);
  const Deadline deadline = callDeadline();
  while (noticesSent_ < id && !deadline.expired()) notifyCv_.wait_for(lock, std::chrono::milliseconds(10));
  return okStatus();
}

}  // namespace coll
