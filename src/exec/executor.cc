// The executor: per-slice dependency tracking, per-peer in-order send/receive queues, fused
// receive-reduce out of the transport's buffer, and the poll/spin/yield/sleep wait loop.
#include "src/exec/executor.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <thread>

#include "src/base/config.h"
#include "src/base/log.h"
#include "src/kernels/quantize.h"
#include "src/kernels/reduce.h"
#include "transports/stream_ring.h"

namespace coll {

const IntKnob kSpinCount(
    "COLL_SPIN_COUNT", "",
    "Polls before a waiting rank yields the CPU (default 2000, or 0 with more ranks on the machine than cores).",
    {KnobSection::Transports, 230});
const IntKnob kYieldCount("COLL_YIELD_COUNT", "200", "Yields before a waiting rank sleeps on a futex.",
                          {KnobSection::Transports, 240});
const BytesKnob kSliceBytes("COLL_SLICE_BYTES", "128K",
                            "Executor slice: the unit that streams through a rank. When set, the planner keeps it; "
                            "unset, pipelined trees and chains may get another chunk from the planner.",
                            {KnobSection::PlannerExecutor, 110});

namespace {

constexpr uint64_t kElemMask = (uint64_t{1} << HostWindows::kSeqShift) - 1;
constexpr int kSeqBits = 64 - HostWindows::kSeqShift;

// Published progress keeps only the low 24 bits of the call number: compare modulo 2^24 so a
// long job does not break after 16M calls. Negative = older call, positive = newer.
int32_t seqDelta(uint64_t published, uint64_t seq) {
  uint32_t d = static_cast<uint32_t>((published - seq) & ((uint64_t{1} << kSeqBits) - 1));
  return static_cast<int32_t>(d << (32 - kSeqBits)) >> (32 - kSeqBits);
}

size_t knobSliceBytes() {
  // Read once: the knob is consulted on every start() and getenv is not free.
  static const size_t bytes = [] {
    uint64_t b = kSliceBytes.get();
    return static_cast<size_t>(b == 0 ? 128 * 1024 : b);
  }();
  return bytes;
}

// Steps that count blocks of Schedule::quantBlock elements rather than elements.
bool isQuantizedStep(StepKind k) {
  return k == StepKind::Widen || k == StepKind::Quantize || k == StepKind::Dequantize ||
         k == StepKind::DequantAccumulate;
}

bool isTransportStep(StepKind k) { return k == StepKind::Send || k == StepKind::Recv || k == StepKind::RecvReduce; }

}  // namespace

std::byte* Execution::resolve(const BufRef& ref) const {
  switch (ref.kind) {
    case BufKind::Send: return const_cast<std::byte*>(static_cast<const std::byte*>(buffers_.send)) + ref.offset;
    case BufKind::Recv: return static_cast<std::byte*>(buffers_.recv) + ref.offset;
    case BufKind::Scratch: return scratchBase_ + ref.offset;
    case BufKind::Window: return windows_->windowHalf(ref.owner, seq_) + ref.offset;
    case BufKind::Extra:
      // Checked against nextra in bind(): builders and the communicator agree on the count.
      return static_cast<std::byte*>(buffers_.extra[ref.owner]) + ref.offset;
    case BufKind::Residual:
      return buffers_.residual != nullptr ? reinterpret_cast<std::byte*>(buffers_.residual) + ref.offset : nullptr;
  }
  return nullptr;
}

Status Execution::start(const Schedule& schedule, const ExecBuffers& buffers, Links& links, uint64_t seq) {
  seq_ = seq;
  if (prepared_ != &schedule || preparedVersion_ != schedule.version || preparedLinks_ != &links) {
    prepared_ = nullptr;
    COLL_TRY(prepare(schedule, links));
    prepared_ = &schedule;
    preparedVersion_ = schedule.version;
    preparedLinks_ = &links;
  } else if (schedule.scratchBytes > 0) {
    // Another plan may have grown the links' shared scratch since.
    if (std::byte* shared = links.scratch(schedule.scratchBytes)) scratchBase_ = shared;
  }
  if (hasQuantSteps_ && buffers.quant == nullptr) {
    return makeError(collInternalError,
                     "rank %d: schedule '%s' quantizes but the call carries no compression parameters", rank_,
                     schedule.algorithm);
  }
  if (buffers.nextra < extraNeeded_) {
    return makeError(collInternalError, "rank %d: schedule '%s' names %zu extra buffers, %zu given", rank_,
                     schedule.algorithm, extraNeeded_, buffers.nextra);
  }
  bind(buffers, seq);
  return okStatus();
}

Status Execution::prepare(const Schedule& schedule, Links& links) {
  const uint64_t seq = seq_;
  schedule_ = &schedule;
  links_ = &links;
  rank_ = links.rank();
  windows_ = links.windows();
  es_ = dataTypeSize(schedule.dtype);
  if (es_ == 0) {
    return makeError(collInvalidArgument, "rank %d: data type %d is not supported by the executor", rank_,
                     static_cast<int>(schedule.dtype));
  }
  if (schedule.op == collAvg || schedule.op < 0 || schedule.op >= collNumOps) {
    return makeError(collInternalError,
                     "rank %d: schedule '%s' carries op %d; builders must turn avg into sum + Divide", rank_,
                     schedule.algorithm, static_cast<int>(schedule.op));
  }

  const size_t nsteps = schedule.steps.size();
  const size_t npeers = schedule.peers.size();
  if (schedule.usesWindows) {
    if (windows_ == nullptr) {
      return makeError(collInternalError,
                       "rank %d: schedule '%s' needs host-shared windows but this rank has none (is every rank of "
                       "the call on one host, and is COLL_TRANSPORT forcing tcp?)",
                       rank_, schedule.algorithm);
    }
    if (schedule.windowBytes > windows_->halfBytes() || schedule.publishSlots > windows_->maxPublishSlots()) {
      return makeError(collInternalError,
                       "rank %d: schedule '%s' needs %" PRIu64
                       " window bytes and %d progress slots; the window half "
                       "has %" PRIu64 " bytes and %d slots (COLL_SHM_WINDOW_BYTES)",
                       rank_, schedule.algorithm, schedule.windowBytes, schedule.publishSlots, windows_->halfBytes(),
                       windows_->maxPublishSlots());
    }
  }

  conns_.resize(npeers);
  // What a post applies with is fixed per plan; postRest fills in the step's part.
  StepPost blank;
  blank.apply = &Execution::applyPosted;
  blank.dtype = schedule.dtype;
  blank.op = schedule.op;
  posts_.assign(npeers, blank);
  // Connections are made in ascending peer rank, not schedule order: a transport whose handshake
  // needs both sides at once (ib) would otherwise deadlock when ranks wait on each other in a
  // cycle (a ring whose first steps go to the next rank on every rank). Ascending order is the
  // same global order of rank pairs on every rank, so no cycle can form.
  connectOrder_.resize(npeers);
  for (size_t p = 0; p < npeers; ++p) connectOrder_[p] = static_cast<uint32_t>(p);
  std::sort(connectOrder_.begin(), connectOrder_.end(),
            [&](uint32_t a, uint32_t b) { return schedule.peers[a] < schedule.peers[b]; });
  for (uint32_t p : connectOrder_) {
    Connection* c = nullptr;
    Status st = links.connection(schedule.peers[p], &c);
    if (!st.ok()) {
      return st.withContext("rank " + std::to_string(rank_) + ": connecting to rank " +
                            std::to_string(schedule.peers[p]) + " for call " + std::to_string(seq));
    }
    conns_[p] = c;
  }

  done_.assign(nsteps, 0);
  padded_.assign(nsteps, 0);
  stepPeer_.assign(nsteps, -1);
  srcPtr_.resize(nsteps);
  dstPtr_.resize(nsteps);
  scratchBase_ = schedule.scratchBytes > 0 ? links.scratch(schedule.scratchBytes) : nullptr;
  if (scratchBase_ == nullptr) {
    scratch_.resize(schedule.scratchBytes);
    scratchBase_ = scratch_.data();
  }
  localSteps_.clear();
  extraNeeded_ = 0;
  hasQuantSteps_ = false;
  countedSteps_ = 0;
  hasZeroCountPublish_ = false;

  sendBegin_.assign(npeers + 1, 0);
  recvBegin_.assign(npeers + 1, 0);
  size_t maxSources = 0;
  for (size_t i = 0; i < nsteps; ++i) {
    const Step& s = schedule.steps[i];
    if (s.depBegin + static_cast<size_t>(s.ndeps) > schedule.deps.size() ||
        s.srcBegin + static_cast<size_t>(s.nsrcs) > schedule.srcs.size()) {
      return makeError(collInternalError,
                       "rank %d: step %zu of schedule '%s' names dependencies or sources out of range", rank_, i,
                       schedule.algorithm);
    }
    if (s.publishSlot >= schedule.publishSlots || (s.publishSlot >= 0 && windows_ == nullptr)) {
      return makeError(collInternalError, "rank %d: step %zu of schedule '%s' publishes slot %d of %d (windows %s)",
                       rank_, i, schedule.algorithm, s.publishSlot, schedule.publishSlots,
                       windows_ ? "present" : "absent");
    }
    if (isTransportStep(s.kind)) {
      auto it = std::find(schedule.peers.begin(), schedule.peers.end(), s.peer);
      if (it == schedule.peers.end()) {
        return makeError(collInternalError,
                         "rank %d: step %zu of schedule '%s' talks to rank %d, missing from "
                         "Schedule::peers (finalizePeers not called?)",
                         rank_, i, schedule.algorithm, s.peer);
      }
      int32_t p = static_cast<int32_t>(it - schedule.peers.begin());
      stepPeer_[i] = p;
      if (s.kind == StepKind::Send) sendBegin_[p + 1]++;
      else recvBegin_[p + 1]++;
    } else {
      localSteps_.push_back(static_cast<int32_t>(i));
    }
    for (const BufRef* r : {&s.src, &s.dst}) {
      if (r->kind == BufKind::Extra) extraNeeded_ = std::max(extraNeeded_, static_cast<size_t>(r->owner) + 1);
    }
    auto needsWindow = [&](const BufRef& r) { return r.kind == BufKind::Window && windows_ == nullptr; };
    if (needsWindow(s.src) || needsWindow(s.dst)) {
      return makeError(collInternalError, "rank %d: step %zu of schedule '%s' uses a window but the rank has none",
                       rank_, i, schedule.algorithm);
    }
    maxSources = std::max<size_t>(maxSources, s.nsrcs);
    if (isQuantizedStep(s.kind)) {
      hasQuantSteps_ = true;
      if (!kernels::validQuantBlockSize(schedule.quantBlock) ||
          s.elems > s.count * static_cast<uint64_t>(schedule.quantBlock)) {
        return makeError(collInternalError,
                         "rank %d: step %zu of schedule '%s' quantizes with block %d over %" PRIu64 " blocks / %" PRIu64
                         " elements",
                         rank_, i, schedule.algorithm, schedule.quantBlock, s.count, s.elems);
      }
    }
    if (s.count > 0) countedSteps_++;
    if (s.count == 0 && s.publishSlot >= 0) hasZeroCountPublish_ = true;
  }
  for (size_t p = 0; p < npeers; ++p) {
    sendBegin_[p + 1] += sendBegin_[p];
    recvBegin_[p + 1] += recvBegin_[p];
  }
  sendQueue_.resize(sendBegin_[npeers]);
  recvQueue_.resize(recvBegin_[npeers]);
  sendCursor_.assign(sendBegin_.begin(), sendBegin_.end() - 1);
  recvCursor_.assign(recvBegin_.begin(), recvBegin_.end() - 1);
  for (size_t i = 0; i < nsteps; ++i) {
    const Step& s = schedule.steps[i];
    if (!isTransportStep(s.kind)) continue;
    int32_t p = stepPeer_[i];
    if (s.kind == StepKind::Send) sendQueue_[sendCursor_[p]++] = static_cast<int32_t>(i);
    else recvQueue_[recvCursor_[p]++] = static_cast<int32_t>(i);
  }

  reduceSrcs_.resize(schedule.srcs.size());
  for (size_t k = 0; k < schedule.srcs.size(); ++k) {
    if (schedule.srcs[k].kind == BufKind::Window && windows_ == nullptr) {
      return makeError(collInternalError, "rank %d: a Reduce source of schedule '%s' is a window but the rank has none",
                       rank_, schedule.algorithm);
    }
  }
  reduceTmp_.resize(maxSources);

  depAtomic_.assign(schedule.deps.size(), nullptr);
  for (size_t k = 0; k < schedule.deps.size(); ++k) {
    const Dep& d = schedule.deps[k];
    if (d.kind == DepKind::Step) {
      if (d.step < 0 || static_cast<size_t>(d.step) >= nsteps) {
        return makeError(collInternalError, "rank %d: dependency %zu of schedule '%s' names step %d of %zu", rank_, k,
                         schedule.algorithm, d.step, nsteps);
      }
      continue;
    }
    if (windows_ == nullptr) {
      return makeError(collInternalError,
                       "rank %d: schedule '%s' waits on local rank %d but this rank has no host "
                       "windows",
                       rank_, schedule.algorithm, d.peer);
    }
    depAtomic_[k] =
        d.kind == DepKind::PeerStep ? &windows_->progressSlot(d.peer, d.slot) : &windows_->completedCalls(d.peer);
  }
  mySlots_.resize(windows_ != nullptr ? static_cast<size_t>(schedule.publishSlots) : 0);
  for (size_t k = 0; k < mySlots_.size(); ++k) mySlots_[k] = &windows_->progressSlot(rank_, static_cast<int>(k));

  return okStatus();
}

void Execution::bind(const ExecBuffers& buffers, uint64_t seq) {
  const Schedule& schedule = *schedule_;
  // A post left by a call that did not end through runToCompletion (tests driving poll()) would
  // point at the previous call's buffers.
  withdrawPosts();
  buffers_ = buffers;
  seq_ = seq;
  failedPeer_ = -1;
  size_t slice = sliceOverride_ != 0          ? sliceOverride_
                 : schedule_->sliceBytes != 0 ? schedule_->sliceBytes
                                              : knobSliceBytes();
  sliceElems_ = std::max<uint64_t>(1, slice / es_);
  const size_t nsteps = schedule.steps.size();
  for (size_t i = 0; i < nsteps; ++i) {
    const Step& s = schedule.steps[i];
    srcPtr_[i] = (s.kind == StepKind::Recv || s.kind == StepKind::Reduce) ? nullptr : resolve(s.src);
    dstPtr_[i] = s.kind == StepKind::Send ? nullptr : resolve(s.dst);
  }
  for (size_t k = 0; k < schedule.srcs.size(); ++k) reduceSrcs_[k] = resolve(schedule.srcs[k]);
  std::fill(done_.begin(), done_.end(), 0);
  std::fill(padded_.begin(), padded_.end(), 0);
  std::copy(sendBegin_.begin(), sendBegin_.end() - 1, sendCursor_.begin());
  std::copy(recvBegin_.begin(), recvBegin_.end() - 1, recvCursor_.begin());
  localFirst_ = 0;
  remaining_ = countedSteps_;
  callPublished_ = false;
  if (!hasZeroCountPublish_) return;
  // Zero-count steps are complete from the start; peers still need to see them published.
  for (size_t i = 0; i < nsteps; ++i) {
    const Step& s = schedule.steps[i];
    if (s.count == 0 && s.publishSlot >= 0) {
      mySlots_[s.publishSlot]->store((seq_ << HostWindows::kSeqShift), std::memory_order_release);
    }
  }
  links_->notifyPeers();
}

uint64_t Execution::depAvailable(const Step& s, uint32_t k) const {
  const Schedule& sc = *schedule_;
  const Dep& d = sc.deps[k];
  uint64_t a = 0;
  switch (d.kind) {
    case DepKind::Step: {
      uint64_t dn = done_[d.step];
      if (dn >= sc.steps[d.step].count) a = s.count;
      else if (!d.whole && d.unitDen > 0) a = dn * d.unitNum / d.unitDen;
      else if (!d.whole && d.lead > 0) a = d.lead + dn;
      else if (!d.whole && dn > d.offset) a = dn - d.offset;
      break;
    }
    case DepKind::PeerStep: {
      uint64_t v = depAtomic_[k]->load(std::memory_order_acquire);
      int32_t delta = seqDelta(v >> HostWindows::kSeqShift, seq_);
      uint64_t elements = v & kElemMask;
      if (delta > 0 || (delta == 0 && elements >= d.count)) a = s.count;
      else if (delta == 0 && !d.whole && elements > d.offset) a = elements - d.offset;
      break;
    }
    case DepKind::PeerCall:
      if (seq_ <= d.lag || depAtomic_[k]->load(std::memory_order_acquire) >= seq_ - d.lag) a = s.count;
      break;
  }
  return a;
}

uint64_t Execution::available(int32_t index) const {
  const Schedule& sc = *schedule_;
  const Step& s = sc.steps[index];
  uint64_t avail = s.count;
  for (uint32_t k = s.depBegin; k < s.depBegin + s.ndeps; ++k) {
    const uint64_t a = depAvailable(s, k);
    if (a < avail) {
      avail = a;
      if (avail == 0) return 0;
    }
  }
  return avail;
}

void Execution::publish(int32_t index) {
  const Step& s = schedule_->steps[index];
  if (s.publishSlot < 0) return;
  mySlots_[s.publishSlot]->store((seq_ << HostWindows::kSeqShift) | done_[index], std::memory_order_release);
  links_->notifyPeers();
}

template <bool kObserved>
void Execution::completeStep(int32_t index) {
  remaining_--;
  if constexpr (kObserved) observer_->stepDone(index, schedule_->steps[index]);
}

template <bool kObserved>
bool Execution::recordProgress(int32_t index, uint64_t done) {
  if (done == done_[index]) return false;
  if constexpr (kObserved) {
    if (done_[index] == 0) observer_->stepStarted(index, schedule_->steps[index]);
  }
  done_[index] = done;
  if (done == schedule_->steps[index].count) completeStep<kObserved>(index);
  publish(index);
  return true;
}

bool Execution::alignStream(int32_t index, Connection* c, bool sending, bool* moved) {
  // The step's first element starts at an aligned stream position: the sender pads, the
  // receiver skips the same bytes (both know the stream position), so no element straddles
  // the end of a ring (StreamRing's alignment rule).
  size_t pad = StreamRing::paddingTo(sending ? c->sentBytes() : c->receivedBytes());
  while (pad > 0) {
    size_t k = std::min(pad, sending ? c->sendSpace().size() : c->recvData().size());
    if (k == 0) return false;
    if (sending) c->sendCommit(k);
    else c->recvConsume(k);
    pad -= k;
    *moved = true;
  }
  padded_[index] = 1;
  return true;
}

template <bool kObserved>
bool Execution::progressSend(int32_t index) {
  const Step& s = schedule_->steps[index];
  Connection* c = conns_[stepPeer_[index]];
  bool moved = false;
  if (!padded_[index] && !alignStream(index, c, /*sending=*/true, &moved)) return moved;
  uint64_t limit = s.ndeps != 0 ? available(index) : s.count;
  uint64_t dn = done_[index];
  const std::byte* src = srcPtr_[index];
  const size_t unit = unitOf(s);
  const uint64_t sliceUnits = std::max<uint64_t>(1, sliceElems_ * es_ / unit);
  while (dn < limit) {
    // Straight from the source where the transport copies anyway; the ring takes what it leaves.
    const size_t direct = c->sendDirect(src + dn * unit, (limit - dn) * unit, unit);
    if (direct > 0) {
      dn += direct / unit;
      continue;
    }
    auto space = c->sendSpace();
    uint64_t n = std::min<uint64_t>({limit - dn, sliceUnits, space.size() / unit});
    if (n == 0) break;
    memcpy(space.data(), src + dn * unit, n * unit);
    c->sendCommit(n * unit);
    dn += n;
  }
  return recordProgress<kObserved>(index, dn) || moved;
}

template <bool kObserved>
bool Execution::progressRecv(int32_t index) {
  const Schedule& sc = *schedule_;
  const Step& s = sc.steps[index];
  Connection* c = conns_[stepPeer_[index]];
  bool moved = false;
  if (!padded_[index] && !alignStream(index, c, /*sending=*/false, &moved)) return moved;
  uint64_t limit = s.ndeps != 0 ? available(index) : s.count;
  uint64_t dn = done_[index];
  StepPost& post = posts_[stepPeer_[index]];
  if (post.step == index && post.applied > 0) {
    // Units the transport applied in place since the last pass.
    dn += post.applied;
    post.applied = 0;
    moved = true;
  }
  std::byte* dst = dstPtr_[index];
  const std::byte* src = srcPtr_[index];
  const bool reduce = s.kind == StepKind::RecvReduce;
  const size_t unit = unitOf(s);
  const uint64_t sliceUnits = std::max<uint64_t>(1, sliceElems_ * es_ / unit);
  while (dn < limit) {
    auto data = c->recvData();
    uint64_t n = std::min<uint64_t>({limit - dn, sliceUnits, data.size() / unit});
    if (n == 0) break;
    if (reduce) {
      // Fused receive-reduce: the bytes are reduced where the transport left them, still in cache.
      kernels::reduce2(dst + dn * es_, src + dn * es_, data.data(), n, sc.dtype, sc.op);
    } else {
      memcpy(dst + dn * unit, data.data(), n * unit);
    }
    c->recvConsume(n * unit);
    dn += n;
  }
  postRest(index, c, dn, limit);
  return recordProgress<kObserved>(index, dn) || moved;
}

void Execution::postRest(int32_t index, Connection* c, uint64_t dn, uint64_t limit) {
  StepPost& post = posts_[stepPeer_[index]];
  if (post.unsupported) return;
  const Step& s = schedule_->steps[index];
  if (dn >= s.count) {
    if (post.step >= 0) c->postRecv(nullptr);
    post.step = -1;
    return;
  }
  const size_t unit = unitOf(s);
  post.step = index;
  post.streamPos = c->receivedBytes();
  post.units = limit - dn;
  post.unitBytes = unit;
  post.applied = 0;
  post.reduce = s.kind == StepKind::RecvReduce;
  post.dst = dstPtr_[index] + dn * unit;
  post.src = post.reduce ? srcPtr_[index] + dn * unit : nullptr;
  if (!c->postRecv(&post)) {
    post.unsupported = true;
    post.step = -1;
  }
}

void Execution::applyPosted(PostedRecv* self, const std::byte* data, uint64_t n) {
  auto* post = static_cast<StepPost*>(self);
  const uint64_t at = post->applied * post->unitBytes;
  if (post->reduce) {
    kernels::reduce2(post->dst + at, post->src + at, data, n, post->dtype, post->op);
  } else {
    memcpy(post->dst + at, data, n * post->unitBytes);
  }
}

void Execution::withdrawPosts() {
  for (size_t p = 0; p < posts_.size(); ++p) {
    if (posts_[p].step >= 0) conns_[p]->postRecv(nullptr);
    posts_[p].step = -1;
    posts_[p].applied = 0;
  }
}

template <bool kObserved>
bool Execution::progressLocal(int32_t index) {
  const Schedule& sc = *schedule_;
  const Step& s = sc.steps[index];
  uint64_t limit = s.ndeps != 0 ? available(index) : s.count;
  uint64_t dn = done_[index];
  if (dn >= limit) return false;
  if constexpr (kObserved) {
    if (dn == 0) observer_->stepStarted(index, s);
  }
  std::byte* dst = dstPtr_[index];
  const std::byte* src = srcPtr_[index];
  const bool quantized = isQuantizedStep(s.kind);
  const uint64_t sliceUnits =
      quantized ? std::max<uint64_t>(1, sliceElems_ / static_cast<uint64_t>(sc.quantBlock)) : sliceElems_;
  while (dn < limit) {
    uint64_t n = std::min(limit - dn, sliceUnits);
    switch (s.kind) {
      case StepKind::Copy:
        if (src != dst) memcpy(dst + dn * es_, src + dn * es_, n * es_);
        break;
      case StepKind::Reduce:
        for (uint32_t j = 0; j < s.nsrcs; ++j) {
          reduceTmp_[j] = static_cast<const std::byte*>(reduceSrcs_[s.srcBegin + j]) + dn * es_;
        }
        kernels::reduceN(dst + dn * es_, reduceTmp_.data(), static_cast<int>(s.nsrcs), n, sc.dtype, sc.op);
        break;
      case StepKind::Divide: kernels::divide(dst + dn * es_, src + dn * es_, n, sc.dtype, sc.divisor); break;
      case StepKind::Widen:
      case StepKind::Quantize:
      case StepKind::Dequantize:
      case StepKind::DequantAccumulate: runQuantSlice(s, dst, src, dn, n); break;
      default: break;
    }
    dn += n;
    done_[index] = dn;
    // Per slice, so local peers streaming from this step can start on it.
    publish(index);
  }
  if (dn == s.count) completeStep<kObserved>(index);
  return true;
}

void Execution::runQuantSlice(const Step& s, std::byte* dst, const std::byte* src, uint64_t dn, uint64_t n) {
  const Schedule& sc = *schedule_;
  const uint64_t block = static_cast<uint64_t>(sc.quantBlock);
  const uint64_t e0 = dn * block;  // first element of the slice
  const uint64_t elems = std::min(n * block, s.elems - std::min(s.elems, e0));
  const size_t record = kernels::quantRecordBytes(sc.quantBlock);
  if (elems == 0) return;
  switch (s.kind) {
    case StepKind::Widen:
      kernels::convertToFloat(reinterpret_cast<float*>(dst) + e0, src + e0 * es_, sc.dtype, elems);
      break;
    case StepKind::Quantize: {
      const bool isFloat = (s.flags & kStepSrcFloat) != 0;
      const std::byte* in = src + e0 * (isFloat ? sizeof(float) : es_);
      if ((s.flags & kStepDivide) != 0 && sc.divisor > 1) {
        // The owner's float32 sum, in scratch: averaged in place before quantizing.
        kernels::divide(const_cast<std::byte*>(in), in, elems, collFloat32, sc.divisor);
      }
      std::byte* residual = resolve(s.aux);
      kernels::quantize4(dst + dn * record, in, isFloat ? collFloat32 : sc.dtype, elems, *buffers_.quant, s.first + e0,
                         residual != nullptr ? reinterpret_cast<float*>(residual) + e0 : nullptr);
      break;
    }
    case StepKind::Dequantize:
      kernels::dequantize4(dst + e0 * es_, sc.dtype, src + dn * record, elems, sc.quantBlock);
      break;
    case StepKind::DequantAccumulate:
      kernels::dequantizeAccumulate4(reinterpret_cast<float*>(dst) + e0, src + dn * record, elems, sc.quantBlock);
      break;
    default: break;
  }
}

Status Execution::poll(bool* done, bool* progressed) {
  // For callers that poll step by step (tests, the in-process world); runToCompletion chooses once.
  return observer_ != nullptr ? pollSteps<true>(done, progressed) : pollSteps<false>(done, progressed);
}

template <bool kObserved>
Status Execution::pollSteps(bool* done, bool* progressed) {
  *done = false;
  *progressed = false;
  const size_t npeers = conns_.size();
  for (size_t p = 0; p < npeers; ++p) {
    // Only connections this call still needs: a peer that finished and closed its end must not
    // fail a call that has nothing more to exchange with it.
    if (!peerActive(p)) continue;
    bool moved = false;
    Status st = conns_[p]->progress(&moved);
    if (!st.ok()) {
      int32_t head = sendCursor_[p] < sendBegin_[p + 1]   ? sendQueue_[sendCursor_[p]]
                     : recvCursor_[p] < recvBegin_[p + 1] ? recvQueue_[recvCursor_[p]]
                                                          : -1;
      char ctx[160];
      snprintf(ctx, sizeof(ctx), "rank %d, call %" PRIu64 ", step %d (%s) with peer %d", rank_, seq_, head,
               head >= 0 ? stepKindName(schedule_->steps[head].kind) : "none", schedule_->peers[p]);
      failedPeer_ = schedule_->peers[p];
      return st.withContext(ctx);
    }
    if (moved) *progressed = true;
  }
  const auto& steps = schedule_->steps;
  while (remaining_ > 0) {
    bool any = false;
    for (size_t p = 0; p < npeers; ++p) {
      int32_t& cur = recvCursor_[p];
      const int32_t end = recvBegin_[p + 1];
      while (cur < end) {
        int32_t i = recvQueue_[cur];
        if (done_[i] >= steps[i].count) {
          ++cur;
          continue;
        }
        any |= progressRecv<kObserved>(i);
        if (done_[i] < steps[i].count) break;
      }
    }
    for (size_t k = localFirst_; k < localSteps_.size(); ++k) {
      int32_t i = localSteps_[k];
      if (done_[i] >= steps[i].count) {
        if (k == localFirst_) ++localFirst_;
        continue;
      }
      any |= progressLocal<kObserved>(i);
    }
    for (size_t p = 0; p < npeers; ++p) {
      int32_t& cur = sendCursor_[p];
      const int32_t end = sendBegin_[p + 1];
      while (cur < end) {
        int32_t i = sendQueue_[cur];
        if (done_[i] >= steps[i].count) {
          ++cur;
          continue;
        }
        any |= progressSend<kObserved>(i);
        if (done_[i] < steps[i].count) break;
      }
    }
    if (!any) break;
    *progressed = true;
  }
  if (remaining_ > 0) return okStatus();
  if (!callPublished_) {
    // Every call publishes its completion (also calls without windows): lag-2 window reuse of
    // later calls waits on it.
    callPublished_ = true;
    if (windows_ != nullptr) {
      windows_->completedCalls(rank_).store(seq_, std::memory_order_release);
      links_->notifyPeers();
    }
    *progressed = true;
  }
  for (size_t p = 0; p < npeers; ++p) {
    if (!conns_[p]->sendsFlushed()) return okStatus();
  }
  *done = true;
  return okStatus();
}

bool Execution::peerActive(size_t p) const {
  return sendCursor_[p] < sendBegin_[p + 1] || recvCursor_[p] < recvBegin_[p + 1] || !conns_[p]->sendsFlushed();
}

Status Execution::checkHealth() {
  for (size_t p = 0; p < conns_.size(); ++p) {
    if (!peerActive(p)) continue;
    Status st = conns_[p]->checkHealth();
    if (!st.ok()) {
      failedPeer_ = schedule_->peers[p];
      return st.withContext("rank " + std::to_string(rank_) + ", call " + std::to_string(seq_) + ", peer " +
                            std::to_string(schedule_->peers[p]));
    }
  }
  return okStatus();
}

std::string Execution::describePending() const {
  std::string out;
  if (schedule_ == nullptr) return out;
  const Schedule& sc = *schedule_;
  char line[256];
  for (size_t i = 0; i < sc.steps.size(); ++i) {
    const Step& s = sc.steps[i];
    if (done_[i] >= s.count) continue;
    snprintf(line, sizeof(line), "  step %zu %s", i, stepKindName(s.kind));
    out += line;
    if (isTransportStep(s.kind)) {
      snprintf(line, sizeof(line), " peer %d", s.peer);
      out += line;
    }
    snprintf(line, sizeof(line), " %" PRIu64 "/%" PRIu64 " elements", done_[i], s.count);
    out += line;
    for (uint32_t k = s.depBegin; k < s.depBegin + s.ndeps; ++k) {
      const Dep& d = sc.deps[k];
      switch (d.kind) {
        case DepKind::Step:
          if (done_[d.step] < sc.steps[d.step].count) {
            snprintf(line, sizeof(line), "; waits for step %d (%" PRIu64 "/%" PRIu64 ")", d.step, done_[d.step],
                     sc.steps[d.step].count);
            out += line;
          }
          break;
        case DepKind::PeerStep: {
          uint64_t v = depAtomic_[k]->load(std::memory_order_acquire);
          snprintf(line, sizeof(line),
                   "; waits for rank %d slot %d (published call %" PRIu64 ", %" PRIu64 " elements; needs call %" PRIu64
                   ", %" PRIu64 ")",
                   d.peer, d.slot, v >> HostWindows::kSeqShift, v & kElemMask, seq_, d.count);
          out += line;
          break;
        }
        case DepKind::PeerCall:
          if (seq_ > d.lag) {
            snprintf(line, sizeof(line), "; waits for rank %d to finish call %" PRIu64 " (it finished %" PRIu64 ")",
                     d.peer, seq_ - d.lag, depAtomic_[k]->load(std::memory_order_acquire));
            out += line;
          }
          break;
      }
    }
    out += '\n';
  }
  if (remaining_ == 0) {
    for (size_t p = 0; p < conns_.size(); ++p) {
      if (!conns_[p]->sendsFlushed()) {
        snprintf(line, sizeof(line), "  sends to rank %d not yet flushed\n", sc.peers[p]);
        out += line;
      }
    }
  }
  return out;
}

void Execution::blockedOn(int32_t* step, int32_t* peer) const {
  *step = -1;
  *peer = -1;
  if (schedule_ == nullptr) return;
  const Schedule& sc = *schedule_;
  // Steps run in order of their dependencies, so the first pending step that is not held back by
  // another of this rank's steps is what this rank waits for: a peer's published progress, or
  // the wire (data not arrived, or no credits to send).
  for (size_t i = 0; i < sc.steps.size(); ++i) {
    const Step& s = sc.steps[i];
    if (done_[i] >= s.count) continue;
    if (*step < 0) *step = static_cast<int32_t>(i);
    bool heldLocally = false;
    for (uint32_t k = s.depBegin; k < s.depBegin + s.ndeps; ++k) {
      if (depAvailable(s, k) > done_[i]) continue;
      const Dep& d = sc.deps[k];
      if (d.kind == DepKind::Step) {
        heldLocally = true;
        continue;
      }
      *step = static_cast<int32_t>(i);
      *peer = d.peer;
      return;
    }
    if (!heldLocally && isTransportStep(s.kind)) {
      *step = static_cast<int32_t>(i);
      *peer = s.peer;
      return;
    }
  }
  if (remaining_ == 0) {
    for (size_t p = 0; p < conns_.size(); ++p) {
      if (!conns_[p]->sendsFlushed()) {
        *peer = sc.peers[p];
        return;
      }
    }
  }
}

WaitPolicy waitPolicyFor(int machineRanks) {
  WaitPolicy policy;
  // The machine's online CPUs, not this process's affinity: a rank pinned to one core still has
  // a core of its own when its peers are pinned to others.
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  // Oversubscribed, not even a short spin: a poll of a socket peer is a recv() per socket, and the
  // cores it takes are the ones the kernel's TCP work and the peers with data need. On 2 cores,
  // 8 ranks as 4 emulated nodes x 2 at 1 Gbit/s, 512 B All-Reduce: recursive doubling 1588 us
  // with 20 polls before yielding, 826 us with none; 2 x 4, tree: 628 us and 407 us; 1 x 8
  // (shared memory) and 16 MiB alike.
  if (cpus > 0 && machineRanks > cpus) policy.spins = 0;
  if (kSpinCount.raw()) policy.spins = static_cast<uint64_t>(std::max<int64_t>(0, kSpinCount.get()));
  if (kYieldCount.raw()) policy.yields = static_cast<uint64_t>(std::max<int64_t>(0, kYieldCount.get()));
  return policy;
}

namespace {

// Publishes that an execution went idle; with `text` (the sleep phase, rare) also what it waits
// for and its pending steps, which cost a scan of the schedule.
void publishIdle(const Execution& execution, ExecSnapshot* snap, bool text, bool first) {
  if (first) {
    snap->idleSinceNs.store(nowNs(), std::memory_order_release);
  }
  if (text) {
    int32_t step, peer;
    execution.blockedOn(&step, &peer);
    snap->step.store(step, std::memory_order_relaxed);
    snap->waitPeer.store(peer, std::memory_order_relaxed);
    std::string pending = execution.describePending();
    std::lock_guard<std::mutex> lock(snap->mu);
    snap->pending.swap(pending);
  }
}

void publishBusy(ExecSnapshot* snap) {
  snap->idleSinceNs.store(0, std::memory_order_relaxed);
  snap->step.store(-1, std::memory_order_relaxed);
  snap->waitPeer.store(-1, std::memory_order_relaxed);
}

// The communicator learned of a failure (or is aborting): its reason, else the abort.
Status interrupted(const Execution& execution, Links& links) {
  Status st = links.checkHealth();
  if (!st.ok()) return st;
  return makeError(collRemoteError, "rank %d: call %llu stopped: the communicator is being aborted", links.rank(),
                   static_cast<unsigned long long>(execution.seq()));
}

template <bool kObserved>
Status pollUntilDone(Execution& execution, Links& links, Deadline deadline, const WaitPolicy& policy,
                     ExecSnapshot* snap) {
  const uint64_t spinCount = policy.spins;
  const uint64_t yieldCount = policy.yields;
  uint64_t idle = 0;
  bool publishedIdle = false;
  Clock::time_point lastHealth{};
  // A wait the observer is told of: from the end of the spin phase to the next progress, or to
  // the end of the call however it ends.
  struct ObservedWait {
    ExecObserver* observer;
    int64_t startNs = 0;
    int32_t step = -1, peer = -1;
    void begin(const Execution& e) {
      if (startNs != 0) return;
      startNs = nowNs();
      e.blockedOn(&step, &peer);
    }
    void end() {
      if (startNs == 0) return;
      observer->waited(step, peer, startNs, nowNs());
      startNs = 0;
    }
    ~ObservedWait() {
      if constexpr (kObserved) end();
    }
  } wait{kObserved ? execution.observer() : nullptr};
  for (;;) {
    bool done = false, progressed = false;
    COLL_TRY(execution.pollSteps<kObserved>(&done, &progressed));
    if (done) return okStatus();
    if (progressed) {
      idle = 0;
      if constexpr (kObserved) wait.end();
      if (publishedIdle) {
        publishBusy(snap);
        publishedIdle = false;
      }
      continue;
    }
    ++idle;
    bool checkClock;
    if (idle <= spinCount) {
      checkClock = (idle & 1023) == 0;
      // A failure learned from another rank stops the call within microseconds; one relaxed load.
      if ((idle & 63) == 0 && links.aborting()) return interrupted(execution, links);
    } else if (idle <= spinCount + yieldCount) {
      if constexpr (kObserved) wait.begin(execution);
      if (snap != nullptr && !publishedIdle) {
        publishIdle(execution, snap, false, true);
        publishedIdle = true;
      }
      if (links.aborting()) return interrupted(execution, links);
      sched_yield();
      checkClock = (idle & 63) == 0;
    } else {
      Clock::time_point now = Clock::now();
      if constexpr (kObserved) wait.begin(execution);
      if (idle == spinCount + yieldCount + 1) {
        lastHealth = now;
        // What it waits for is published from the 100 ms refresh below: a pipelined transfer
        // sleeps briefly between slices all the time and must not pay for a scan each time.
        if (snap != nullptr && !publishedIdle) {
          publishIdle(execution, snap, false, true);
          publishedIdle = true;
        }
      }
      if (now - lastHealth >= std::chrono::milliseconds(100)) {
        COLL_TRY(execution.checkHealth());
        COLL_TRY(links.checkHealth());
        if (snap != nullptr) publishIdle(execution, snap, true, false);
        lastHealth = now;
      }
      checkClock = true;
      if (links.aborting()) return interrupted(execution, links);
      if (policy.napUs > 0) {
        const int64_t leftUs = int64_t{deadline.remainingMs()} * 1000;  // remainingMs() is never negative
        std::this_thread::sleep_for(std::chrono::microseconds(std::clamp<int64_t>(leftUs, 1, policy.napUs)));
      } else if (!deadline.expired()) {
        uint64_t token = links.prepareWait();
        COLL_TRY(execution.pollSteps<kObserved>(&done, &progressed));
        if (done) return okStatus();
        if (progressed) {
          idle = 0;
          if constexpr (kObserved) wait.end();
          if (publishedIdle) {
            publishBusy(snap);
            publishedIdle = false;
          }
          continue;
        }
        links.wait(token, std::min(10, deadline.remainingMs()));
      }
    }
    if (checkClock && deadline.expired()) {
      if (snap != nullptr) publishIdle(execution, snap, true, !publishedIdle);
      char head[160];
      snprintf(head, sizeof(head),
               "rank %d: collective call %llu timed out after %.1f s (raise COLL_TIMEOUT or the communicator's "
               "timeoutMs if peers are merely slow); pending:\n",
               links.rank(), static_cast<unsigned long long>(execution.seq()),
               static_cast<double>(policy.timeoutMs > 0 ? policy.timeoutMs : defaultTimeoutMs()) / 1000.0);
      // Reported (and logged) by whoever surfaces the error: the API call or the stream.
      return Status(collTimeout, head + execution.describePending());
    }
  }
}

}  // namespace

Status runToCompletion(Execution& execution, Links& links, Deadline deadline, const WaitPolicy& policy,
                       ExecSnapshot* snap) {
  Status st = execution.observer() != nullptr ? pollUntilDone<true>(execution, links, deadline, policy, snap)
                                              : pollUntilDone<false>(execution, links, deadline, policy, snap);
  execution.withdrawPosts();
  return st;
}

}  // namespace coll
