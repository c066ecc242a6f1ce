// In-process links, memory connections and heap windows, and the round-robin driver.
#include "src/exec/inprocess.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace coll {

MemoryRing::MemoryRing(size_t bytes) : ring(StreamRing::capacityFor(bytes)), data(new std::byte[ring.capacity()]) {}

std::span<std::byte> MemoryConnection::sendSpace() {
  const uint64_t head = out_->head.load(std::memory_order_relaxed);
  const uint64_t tail = out_->tail.load(std::memory_order_acquire);
  return {out_->data.get() + out_->ring.offset(head), out_->ring.writable(head, tail)};
}

void MemoryConnection::sendCommit(size_t bytes) {
  out_->head.store(out_->head.load(std::memory_order_relaxed) + bytes, std::memory_order_release);
}

size_t MemoryConnection::sendDirect(const std::byte* src, size_t bytes, size_t granule) {
  if (!directSends_ || granule == 0) return 0;
  refuseNext_ = !refuseNext_;
  if (!refuseNext_) return 0;
  auto space = sendSpace();
  const size_t n = std::min(bytes, space.size()) / granule * granule;
  memcpy(space.data(), src, n);
  sendCommit(n);
  sentDirect_ += n;
  return n;
}

std::span<const std::byte> MemoryConnection::recvData() {
  const uint64_t tail = in_->tail.load(std::memory_order_relaxed);
  const uint64_t head = in_->head.load(std::memory_order_acquire);
  return {in_->data.get() + in_->ring.offset(tail), in_->ring.readable(tail, head)};
}

void MemoryConnection::recvConsume(size_t bytes) {
  in_->tail.store(in_->tail.load(std::memory_order_relaxed) + bytes, std::memory_order_release);
}

MemoryHostWindows::MemoryHostWindows(int32_t firstRank, int32_t size, uint64_t halfBytes, int slots)
    : firstRank_(firstRank),
      halfBytes_(halfBytes),
      slots_(slots),
      data_(size),
      progress_(new std::atomic<uint64_t>[static_cast<size_t>(size) * slots]),
      completed_(new std::atomic<uint64_t>[size]) {
  for (size_t i = 0; i < static_cast<size_t>(size) * slots; ++i) progress_[i].store(0);
  for (int32_t i = 0; i < size; ++i) completed_[i].store(0);
}

MemoryHostWindows::MemoryHostWindows(std::vector<int32_t> ranks, uint64_t halfBytes, int slots)
    : MemoryHostWindows(ranks.empty() ? 0 : ranks.front(), static_cast<int32_t>(ranks.size()), halfBytes, slots) {
  ranks_ = std::move(ranks);
}

size_t MemoryHostWindows::index(int rank) const {
  if (ranks_.empty()) return static_cast<size_t>(rank - firstRank_);
  return static_cast<size_t>(std::lower_bound(ranks_.begin(), ranks_.end(), rank) - ranks_.begin());
}

std::byte* MemoryHostWindows::windowHalf(int rank, uint64_t seq) {
  auto& d = data_[index(rank)];
  if (!d) d.reset(new std::byte[2 * halfBytes_]);
  return d.get() + (seq & 1) * halfBytes_;
}

std::atomic<uint64_t>& MemoryHostWindows::progressSlot(int rank, int slot) {
  return progress_[index(rank) * slots_ + slot];
}

std::atomic<uint64_t>& MemoryHostWindows::completedCalls(int rank) { return completed_[index(rank)]; }

Status InProcessLinks::connection(int peer, Connection** out) {
  if (peer < 0 || peer >= world_->nranks() || peer == rank_) {
    return makeError(collInternalError, "rank %d: no connection to rank %d in a world of %d", rank_, peer,
                     world_->nranks());
  }
  auto& c = connections_[peer];
  if (!c)
    c = std::make_unique<MemoryConnection>(peer, world_->ring(rank_, peer), world_->ring(peer, rank_),
                                           world_->options().directSends);
  *out = c.get();
  return okStatus();
}

InProcessWorld::InProcessWorld(int32_t nranks, int32_t ranksPerHost, const InProcessOptions& options)
    : nranks_(nranks), ranksPerHost_(std::max(1, ranksPerHost)), options_(options), executions_(nranks) {
  int32_t nhosts = (nranks + ranksPerHost_ - 1) / ranksPerHost_;
  windows_.resize(nhosts);
  for (int32_t h = 0; h < nhosts; ++h) {
    int32_t first = h * ranksPerHost_;
    int32_t size = std::min(ranksPerHost_, nranks - first);
    if (size > 1) {
      windows_[h] = std::make_unique<MemoryHostWindows>(first, size, options.windowHalfBytes, options.publishSlots);
    }
  }
  hostOfRank_.resize(nranks);
  for (int32_t r = 0; r < nranks; ++r) hostOfRank_[r] = r / ranksPerHost_;
  makeLinks();
}

InProcessWorld::InProcessWorld(const std::vector<int32_t>& hostOfRank, const InProcessOptions& options)
    : nranks_(static_cast<int32_t>(hostOfRank.size())),
      ranksPerHost_(0),
      options_(options),
      executions_(hostOfRank.size()) {
  std::unordered_map<int32_t, int32_t> number;
  std::vector<std::vector<int32_t>> members;
  hostOfRank_.resize(hostOfRank.size());
  for (int32_t r = 0; r < nranks_; ++r) {
    auto [it, inserted] = number.emplace(hostOfRank[r], static_cast<int32_t>(members.size()));
    if (inserted) members.emplace_back();
    hostOfRank_[r] = it->second;
    members[it->second].push_back(r);
  }
  windows_.resize(members.size());
  for (size_t h = 0; h < members.size(); ++h) {
    if (members[h].size() > 1) {
      windows_[h] =
          std::make_unique<MemoryHostWindows>(std::move(members[h]), options.windowHalfBytes, options.publishSlots);
    }
  }
  makeLinks();
}

void InProcessWorld::makeLinks() {
  links_.reserve(nranks_);
  for (int32_t r = 0; r < nranks_; ++r) {
    links_.push_back(std::make_unique<InProcessLinks>(this, r, windows_[hostOfRank_[r]].get()));
    executions_[r].setSliceBytes(options_.sliceBytes);
  }
}

Topology InProcessWorld::topology(int32_t rank) const {
  if (ranksPerHost_ > 0) return Topology::uniform(rank, nranks_, ranksPerHost_);
  return Topology::fromHostHashes(rank, std::vector<uint64_t>(hostOfRank_.begin(), hostOfRank_.end()));
}

MemoryRing* InProcessWorld::ring(int32_t from, int32_t to) {
  auto& r = rings_[static_cast<uint64_t>(from) * static_cast<uint64_t>(nranks_) + static_cast<uint64_t>(to)];
  if (!r) r = std::make_unique<MemoryRing>(options_.ringBytes);
  return r.get();
}

Status runInProcess(const std::vector<const Schedule*>& schedules, const std::vector<ExecBuffers>& buffers,
                    InProcessWorld& world, uint64_t seq) {
  const int32_t n = world.nranks();
  if (static_cast<int32_t>(schedules.size()) != n || static_cast<int32_t>(buffers.size()) != n) {
    return makeError(collInvalidArgument, "runInProcess: %zu schedules and %zu buffers for a world of %d ranks",
                     schedules.size(), buffers.size(), n);
  }
  for (int32_t r = 0; r < n; ++r) {
    Status st = world.execution(r).start(*schedules[r], buffers[r], world.links(r), seq);
    if (!st.ok()) return st.withContext("runInProcess: starting rank " + std::to_string(r));
  }
  std::vector<uint8_t> finished(n, 0);
  int32_t left = n;
  while (left > 0) {
    bool any = false;
    for (int32_t r = 0; r < n; ++r) {
      if (finished[r]) continue;
      bool done = false, progressed = false;
      COLL_TRY(world.execution(r).poll(&done, &progressed));
      any |= progressed;
      if (done) {
        finished[r] = 1;
        --left;
        any = true;
      }
    }
    if (!any && left > 0) {
      std::string msg = "deadlock in call " + std::to_string(seq) + ": a full round over " + std::to_string(n) +
                        " ranks made no progress; pending:\n";
      int shown = 0;
      for (int32_t r = 0; r < n; ++r) {
        if (finished[r]) continue;
        if (++shown > 16) {
          msg += "  ... (" + std::to_string(left - 16) + " more ranks)\n";
          break;
        }
        msg += " rank " + std::to_string(r) + ":\n" + world.execution(r).describePending();
      }
      return Status(collInternalError, msg);
    }
  }
  return okStatus();
}

}  // namespace coll
