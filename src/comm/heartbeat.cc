// The heartbeat along the notice tree (heartbeat.h).
#include "src/comm/heartbeat.h"

#include <algorithm>
#include <chrono>

#include "src/base/config.h"
#include "src/base/deadline.h"
#include "src/base/log.h"
#include "src/base/parallel.h"
#include "src/oob/failure.h"

namespace coll {

const IntKnob kHeartbeatMs("COLL_HEARTBEAT_MS", "1000",
                           "Interval of the heartbeat each rank sends its parent in the notice tree, in ms; 0 turns "
                           "the stall detector off (for example under a debugger, where stopped ranks are expected).",
                           {KnobSection::Deadlines, 20});
const IntKnob kHeartbeatTimeoutMs("COLL_HEARTBEAT_TIMEOUT_MS", "6000",
                                  "A rank that neither beats nor answers for this long (ms) is named failed, as a "
                                  "stalled (stopped, frozen, cut off) or dead rank, without waiting for COLL_TIMEOUT. "
                                  "At least twice COLL_HEARTBEAT_MS.",
                                  {KnobSection::Deadlines, 21});

namespace {

// A beat that is not acknowledged within this is missed (the next one tries again); short, so that
// a stalled parent never holds the beating thread (and a stopping communicator) for long.
constexpr int kBeatDeadlineMs = 200;
constexpr int kLeavingDeadlineMs = 200, kAbortingLeavingDeadlineMs = 100;

double seconds(int64_t ns) { return static_cast<double>(ns) / 1e9; }

}  // namespace

HeartbeatOptions heartbeatOptionsFromConfig(int fanout, int queryMs) {
  HeartbeatOptions o;
  o.intervalMs = static_cast<int>(std::clamp<int64_t>(kHeartbeatMs.get(), 0, 3600 * 1000));
  o.timeoutMs =
      static_cast<int>(std::clamp<int64_t>(kHeartbeatTimeoutMs.get(), 2LL * o.intervalMs, 24LL * 3600 * 1000));
  o.fanout = std::max(fanout, 1);
  o.queryMs = std::max(queryMs, 1);
  return o;
}

void Heartbeat::start(Bootstrap* bootstrap, const HeartbeatOptions& options, HeartbeatHooks hooks) {
  const int n = bootstrap->nranks();
  if (options.intervalMs <= 0 || n <= 1) return;
  bootstrap_ = bootstrap;
  options_ = options;
  hooks_ = std::move(hooks);
  const int me = bootstrap->rank();
  parent_ = noticeTreeParent(0, me, n, options.fanout);
  noticeTreeChildren(0, me, n, options.fanout, &children_);
  const int64_t now = nowNs();
  childBeatNs_ = std::make_unique<std::atomic<int64_t>[]>(children_.size());
  childLeft_ = std::make_unique<std::atomic<bool>[]>(children_.size());
  for (size_t i = 0; i < children_.size(); ++i) childBeatNs_[i].store(now), childLeft_[i].store(false);
  parentAckNs_ = now;
  started_.store(true, std::memory_order_release);
  thread_ = std::thread([this] { loop(); });
}

int Heartbeat::childIndex(int rank) const {
  auto it = std::find(children_.begin(), children_.end(), rank);
  return it == children_.end() ? -1 : static_cast<int>(it - children_.begin());
}

void Heartbeat::onMessage(int from, const std::vector<uint8_t>& payload) {
  if (!started_.load(std::memory_order_acquire)) return;
  HeartbeatKind kind;
  if (!decodeHeartbeat(payload.data(), payload.size(), &kind)) {
    COLL_WARN(bootstrap_->rank(), "dropping a malformed heartbeat from rank %d (%zu bytes)", from, payload.size());
    return;
  }
  const int child = childIndex(from);
  if (kind == HeartbeatKind::Leaving && from == parent_) {
    parentLeft_.store(true);
    return;
  }
  if (child < 0) return;  // not a rank this one watches (another tree shape: a stale message)
  if (kind == HeartbeatKind::Leaving) {
    childLeft_[child].store(true);
  } else {
    childBeatNs_[child].store(nowNs(), std::memory_order_relaxed);
  }
}

void Heartbeat::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  int64_t lastWakeNs = nowNs();
  for (;;) {
    cv_.wait_for(lock, std::chrono::milliseconds(options_.intervalMs), [&] { return stop_; });
    if (stop_) return;
    lock.unlock();
    const int64_t now = nowNs();
    if (now - lastWakeNs > static_cast<int64_t>(options_.timeoutMs) * 1000000 / 2) {
      // This rank itself was stopped (SIGSTOP, a debugger, a frozen VM): the silence it sees is
      // its own. It starts watching afresh instead of blaming its peers.
      COLL_INFO(bootstrap_->rank(), "heartbeat: this rank did not run for %.1f s; watching afresh",
                seconds(now - lastWakeNs));
      parentAckNs_ = now;
      for (size_t i = 0; i < children_.size(); ++i) childBeatNs_[i].store(now, std::memory_order_relaxed);
    } else if (!hooks_.interrupted()) {
      // A failed or revoked communicator is unusable anyway: nothing more to find (and its failed
      // ranks would be blamed again).
      beatParent(now);
      if (!hooks_.interrupted()) watchChildren(now);
    }
    lastWakeNs = nowNs();
    lock.lock();
  }
}

void Heartbeat::beatParent(int64_t now) {
  if (parent_ < 0 || parentLeft_.load() || hooks_.isFailed(parent_)) return;
  uint8_t wire[kHeartbeatWire];
  encodeHeartbeat(HeartbeatKind::Beat, wire);
  std::vector<uint8_t> reply;
  const Status st =
      bootstrap_->control(parent_, kCtlTagHeartbeat, wire, sizeof(wire), &reply, Deadline::afterMs(kBeatDeadlineMs));
  if (st.ok()) {
    parentAckNs_ = nowNs();
    return;
  }
  const int64_t silent = now - parentAckNs_;
  if (silent < static_cast<int64_t>(options_.timeoutMs) * 1000000 || parentLeft_.load()) return;
  char reason[256];
  snprintf(reason, sizeof(reason),
           "acknowledged no heartbeat for %.1f s (stalled, dead or unreachable; COLL_HEARTBEAT_TIMEOUT_MS=%d)",
           seconds(silent), options_.timeoutMs);
  hooks_.blame(parent_, reason);
}

void Heartbeat::watchChildren(int64_t now) {
  const int64_t limitNs = static_cast<int64_t>(options_.timeoutMs) * 1000000;
  for (size_t i = 0; i < children_.size() && !hooks_.interrupted(); ++i) {
    const int child = children_[i];
    if (childLeft_[i].load() || hooks_.isFailed(child)) continue;
    const int64_t silent = now - childBeatNs_[i].load(std::memory_order_relaxed);
    if (silent < limitNs) continue;
    // Its beats may only be late (a starved thread): a rank whose listener answers is alive.
    std::vector<uint8_t> reply;
    const Status st =
        bootstrap_->control(child, kCtlTagWaitFor, nullptr, 0, &reply, Deadline::afterMs(options_.queryMs));
    if (st.ok() || childLeft_[i].load()) {
      childBeatNs_[i].store(nowNs(), std::memory_order_relaxed);
      continue;
    }
    char reason[256];
    snprintf(reason, sizeof(reason),
             "sent no heartbeat for %.1f s and did not answer a query within %d ms (stalled, dead or unreachable; "
             "COLL_HEARTBEAT_TIMEOUT_MS=%d)",
             seconds(silent), options_.queryMs, options_.timeoutMs);
    hooks_.blame(child, reason);
  }
}

void Heartbeat::stop(bool aborting) {
  if (!started_.load()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Those who watch this rank stop watching it: it leaves, it did not fail.
  std::vector<int> watchers = children_;
  if (parent_ >= 0) watchers.push_back(parent_);
  watchers.erase(std::remove_if(watchers.begin(), watchers.end(), [&](int r) { return hooks_.isFailed(r); }),
                 watchers.end());
  uint8_t wire[kHeartbeatWire];
  encodeHeartbeat(HeartbeatKind::Leaving, wire);
  const int ms = aborting ? kAbortingLeavingDeadlineMs : kLeavingDeadlineMs;
  runInParallel(watchers.size(), 16, [&](size_t i) {
    std::vector<uint8_t> reply;
    (void)bootstrap_->control(watchers[i], kCtlTagHeartbeat, wire, sizeof(wire), &reply, Deadline::afterMs(ms));
  });
}

}  // namespace coll
