// Failure record and the control-message codecs (see failure.h).
#include "src/oob/failure.h"

#include <algorithm>
#include <cstring>

#include "src/base/byte_order.h"
#include "src/base/log.h"

namespace coll {

namespace {

using le::get32;
using le::get64;
using le::put32;
using le::put64;

}  // namespace

bool FailureRecord::record(const FailedPeer& peer) {
  bool news = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto known = std::find_if(failed_.begin(), failed_.end(), [&](const FailedPeer& f) { return f.rank == peer.rank; });
    if (known == failed_.end()) {
      failed_.push_back(peer);
      count_.store(failed_.size(), std::memory_order_release);
      news = true;
    }
  }
  interrupted_.store(true, std::memory_order_release);
  return news;
}

bool FailureRecord::revoke(int byRank) {
  int expected = -1;
  const bool news = revokedBy_.compare_exchange_strong(expected, byRank, std::memory_order_acq_rel);
  interrupted_.store(true, std::memory_order_release);
  return news;
}

bool FailureRecord::noteCycle(int byRank, const std::string& cycle) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cycleBy_ >= 0) return false;
    cycleBy_ = byRank;
    cycle_ = cycle;
  }
  interrupted_.store(true, std::memory_order_release);
  return true;
}

bool FailureRecord::isFailed(int rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::any_of(failed_.begin(), failed_.end(), [&](const FailedPeer& f) { return f.rank == rank; });
}

std::vector<int> FailureRecord::ranks() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> out;
  out.reserve(failed_.size());
  for (const FailedPeer& f : failed_) out.push_back(f.rank);
  return out;
}

std::vector<FailedPeer> FailureRecord::peers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

bool FailureRecord::first(FailedPeer* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (failed_.empty()) return false;
  *out = failed_.front();
  return true;
}

Status FailureRecord::interruption(int myRank) const {
  FailedPeer f;
  if (first(&f)) {
    std::string by =
        f.reportedBy >= 0 && f.reportedBy != myRank ? " (reported by rank " + std::to_string(f.reportedBy) + ")" : "";
    return Status(collRemoteError, "rank " + std::to_string(myRank) + ": " + describeFailedPeer(f) + by);
  }
  const int by = revokedBy();
  if (by >= 0) {
    return makeError(collRemoteError,
                     "rank %d: the communicator was revoked by rank %d (collCommRevoke); abort, "
                     "destroy or shrink it",
                     myRank, by);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (cycleBy_ >= 0) {
    return makeError(collTimeout,
                     "rank %d: rank %d found the ranks waiting for each other in a cycle: %s "
                     "(mismatched calls: check that every rank makes the same calls in the same order; COLL_CHECK=1 "
                     "compares collectives)",
                     myRank, cycleBy_, cycle_.c_str());
  }
  return okStatus();
}

std::string FailureRecord::describe() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const FailedPeer& f : failed_) {
    out += "  " + describeFailedPeer(f);
    if (f.reportedBy >= 0) out += " (detected by rank " + std::to_string(f.reportedBy) + ")";
    out += '\n';
  }
  return out;
}

std::string describeFailedPeer(const FailedPeer& peer) {
  std::string s = "peer rank " + std::to_string(peer.rank);
  if (!peer.host.empty()) s += " (host " + peer.host + ")";
  s += " failed: " + (peer.reason.empty() ? std::string("unknown reason") : peer.reason);
  return s;
}

std::vector<uint8_t> encodeFailed(const FailedMessage& m) {
  const size_t n = std::min(m.reason.size(), kCtlMaxReason);
  std::vector<uint8_t> out(8 + n);
  put32(out.data(), static_cast<uint32_t>(m.rank));
  put32(out.data() + 4, static_cast<uint32_t>(n));
  if (n) memcpy(out.data() + 8, m.reason.data(), n);
  return out;
}

bool decodeFailed(const uint8_t* data, size_t size, int nranks, FailedMessage* out) {
  if (size < 8) return false;
  const int32_t rank = static_cast<int32_t>(get32(data));
  const uint32_t n = get32(data + 4);
  if (rank < 0 || rank >= nranks || n > kCtlMaxReason || n != size - 8) return false;
  out->rank = rank;
  out->reason = printableText(reinterpret_cast<const char*>(data + 8), n);
  return true;
}

std::vector<uint8_t> encodeRelay(const RelayMessage& m) {
  std::vector<uint8_t> out(kRelayHeaderBytes + m.payload.size());
  put32(out.data(), static_cast<uint32_t>(m.origin));
  put32(out.data() + 4, m.tag);
  put32(out.data() + 8, static_cast<uint32_t>(m.payload.size()));
  if (!m.payload.empty()) memcpy(out.data() + kRelayHeaderBytes, m.payload.data(), m.payload.size());
  return out;
}

bool decodeRelay(const uint8_t* data, size_t size, int nranks, RelayMessage* out) {
  if (size < kRelayHeaderBytes) return false;
  const int32_t origin = static_cast<int32_t>(get32(data));
  const uint32_t tag = get32(data + 4);
  const uint32_t n = get32(data + 8);
  if (origin < 0 || origin >= nranks || n != size - kRelayHeaderBytes) return false;
  // The largest inner payload is a FAILED notice with the longest reason.
  if (n > 8 + kCtlMaxReason) return false;
  if (tag != kCtlTagFailed && tag != kCtlTagRevoked && tag != kCtlTagCycle) return false;
  if (tag == kCtlTagRevoked && n != 0) return false;
  if (tag == kCtlTagCycle && n > kCtlMaxReason) return false;
  out->origin = origin;
  out->tag = tag;
  out->payload.assign(data + kRelayHeaderBytes, data + size);
  return true;
}

void noticeTreeChildren(int origin, int self, int nranks, int fanout, std::vector<int>* out) {
  out->clear();
  if (nranks <= 1 || fanout < 1) return;
  const int64_t n = nranks;
  const int64_t pos = ((static_cast<int64_t>(self) - origin) % n + n) % n;
  const int64_t first = pos * fanout + 1;
  for (int64_t c = first; c < first + fanout && c < n; ++c) out->push_back(static_cast<int>((c + origin) % n));
}

int noticeTreeParent(int origin, int self, int nranks, int fanout) {
  if (nranks <= 1 || fanout < 1) return -1;
  const int64_t n = nranks;
  const int64_t pos = ((static_cast<int64_t>(self) - origin) % n + n) % n;
  if (pos == 0) return -1;
  return static_cast<int>(((pos - 1) / fanout + origin) % n);
}

void encodeHeartbeat(HeartbeatKind kind, uint8_t out[kHeartbeatWire]) { put32(out, static_cast<uint32_t>(kind)); }

bool decodeHeartbeat(const uint8_t* data, size_t size, HeartbeatKind* out) {
  if (size != kHeartbeatWire) return false;
  const uint32_t v = get32(data);
  if (v != static_cast<uint32_t>(HeartbeatKind::Beat) && v != static_cast<uint32_t>(HeartbeatKind::Leaving))
    return false;
  *out = static_cast<HeartbeatKind>(v);
  return true;
}

void expandNoticeTargets(int origin, int nranks, int fanout, std::vector<int> candidates,
                         const std::function<bool(int)>& skip, std::vector<int>* out) {
  std::vector<int> children;
  while (!candidates.empty()) {
    const int r = candidates.back();
    candidates.pop_back();
    if (!skip(r)) {
      out->push_back(r);
      continue;
    }
    noticeTreeChildren(origin, r, nranks, fanout, &children);
    candidates.insert(candidates.end(), children.begin(), children.end());
  }
}

void encodeWaitFor(const WaitForAnswer& a, uint8_t out[kWaitForWire]) {
  memset(out, 0, kWaitForWire);
  put32(out, a.running ? 1 : 0);
  put64(out + 4, a.seq);
  put32(out + 12, static_cast<uint32_t>(a.waitPeer));
  put32(out + 16, static_cast<uint32_t>(a.step));
  put32(out + 20, a.idleMs);
  put32(out + 24, static_cast<uint32_t>(a.failedRank));
}

bool decodeWaitFor(const uint8_t* data, size_t size, int nranks, WaitForAnswer* out) {
  if (size != kWaitForWire) return false;
  WaitForAnswer a;
  const uint32_t running = get32(data);
  if (running > 1) return false;
  a.running = running == 1;
  a.seq = get64(data + 4);
  a.waitPeer = static_cast<int32_t>(get32(data + 12));
  a.step = static_cast<int32_t>(get32(data + 16));
  a.idleMs = get32(data + 20);
  a.failedRank = static_cast<int32_t>(get32(data + 24));
  if (get32(data + 28) != 0) return false;  // reserved
  if (a.waitPeer < -1 || a.waitPeer >= nranks || a.failedRank < -1 || a.failedRank >= nranks || a.step < -1) {
    return false;
  }
  *out = a;
  return true;
}

std::string hostOfAddress(const std::string& a) {
  if (!a.empty() && a.front() == '[') {
    const size_t close = a.find(']');
    return close == std::string::npos ? a : a.substr(1, close - 1);
  }
  const size_t colon = a.rfind(':');
  return colon == std::string::npos ? a : a.substr(0, colon);
}

}  // namespace coll
