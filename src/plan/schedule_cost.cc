// Schedule cost: counting a schedule's steps and bytes per link class, and a discrete-event
// evaluation of the actual schedules of all ranks (or of one host, by symmetry) under an
// alpha-beta link model.
//
// The model (why each rule is what it is):
// - A transfer is one Send step and the receive step that takes its bytes (the k-th Send from a
//   to q meets the k-th receive on q from a: the stream-order rule of schedule.h). The wire
//   starts streaming when the Send's dependencies allow (senders do not wait for receivers:
//   streams are buffered); its bytes occupy the sender's egress port and the receiver's ingress
//   port of its link class for bytes / bandwidth, each port after the bytes of wires that became
//   ready before it there, and the last byte arrives alpha after both ports have carried it.
//   Ports are per rank and per class (the bandwidths are per rank) and work-conserving:
//   concurrent wires of one rank share its bandwidth (a port's total work is exact; how it splits
//   between concurrent wires is first come, first served, and a wire's first slice is not delayed
//   by the others, so pipelines through a tree keep streaming). Consecutive wires of one stream
//   (ordered pair) keep their order. The receive step completes when the bytes have arrived and
//   its own dependencies allow.
// - A per-slice dependency lets the dependent start once the dependency's first slice is done
//   and finish no earlier than one of its own slice times after the dependency finished: slices
//   stream through a rank. A slice time is alpha + slice * beta for a transfer, slice / memory
//   bandwidth for a local step; the slice is Schedule::sliceBytes or LinkModel::defaultSliceBytes.
//   Whole dependencies wait for completion. "Done" is as the dependent's rank sees it: a Send is
//   done for its own rank when its bytes have left (no alpha), a receive when they have arrived.
// - Local steps (Copy, Reduce, Divide) take bytes (times sources for Reduce) / memory bandwidth
//   and share nothing; a copy onto itself (joins, in-place) is free. Reductions inside
//   RecvReduce are taken to overlap the transfer.
// - Exact mode: zero-count steps are complete from the start, as in the executor, and carry no
//   message. Symmetric mode: zero-count transport steps are costed as messages of 0 bytes (alpha),
//   because their byte count is a property of host 0's chunk indices only; on other hosts the same
//   step carries data (8 B over a 100,000-rank ring: the element travels the whole ring).
#include "src/plan/schedule_cost.h"

#include <algorithm>
#include <cstring>
#include <queue>
#include <string>
#include <unordered_map>

namespace coll {
namespace {

constexpr uint32_t kNone = UINT32_MAX;

bool isTransport(StepKind k) { return k == StepKind::Send || k == StepKind::Recv || k == StepKind::RecvReduce; }

bool sameRef(const BufRef& a, const BufRef& b) {
  return a.kind == b.kind && a.owner == b.owner && a.offset == b.offset;
}

struct ModelStep {
  uint64_t bytes = 0;
  int32_t peer = -1;
  uint32_t depBegin = 0;
  uint32_t ndeps = 0;
  uint32_t rank = 0;  // evaluated rank
  uint32_t nsrcs = 0;
  StepKind kind = StepKind::Copy;
  uint8_t cls = 0;
  bool selfCopy = false;
  bool inert = false;
};

struct ModelDep {
  uint32_t step = kNone;  // global step index, or kNone until a PeerStep is resolved
  int32_t peer = -1;      // PeerStep: rank whose slot is named
  int32_t slot = -1;
  bool whole = false;
};

struct StreamKey {
  uint32_t a, q, k, step;
  bool operator<(const StreamKey& o) const {
    if (a != o.a) return a < o.a;
    if (q != o.q) return q < o.q;
    return k < o.k;
  }
  bool sameKey(const StreamKey& o) const { return a == o.a && q == o.q && k == o.k; }
};

// Host arithmetic of a HostSymmetry grid.
struct HostGrid {
  int32_t ndims = 1;
  int32_t d[3] = {1, 1, 1};
  int32_t negate(int32_t h) const {
    int32_t out = 0, stride = 1;
    for (int i = 0; i < ndims; ++i) {
      const int32_t c = h % d[i];
      h /= d[i];
      out += ((d[i] - c) % d[i]) * stride;
      stride *= d[i];
    }
    return out;
  }
};

void maxInto(ScheduleCounts* m, const ScheduleCounts& c) {
  m->steps = std::max(m->steps, c.steps);
  for (int k = 0; k < kStepKinds; ++k) m->byKind[k] = std::max(m->byKind[k], c.byKind[k]);
  for (int k = 0; k < kLinkClasses; ++k) {
    m->messages[k] = std::max(m->messages[k], c.messages[k]);
    m->bytesSent[k] = std::max(m->bytesSent[k], c.bytesSent[k]);
    m->receives[k] = std::max(m->receives[k], c.receives[k]);
    m->bytesReceived[k] = std::max(m->bytesReceived[k], c.bytesReceived[k]);
  }
}

}  // namespace

ScheduleCounts countSchedule(const Schedule& s, const Topology& topo) {
  ScheduleCounts c;
  const uint64_t es = dataTypeSize(s.dtype);
  for (const Step& st : s.steps) {
    c.steps++;
    c.byKind[static_cast<int>(st.kind)]++;
    if (!isTransport(st.kind) || st.count == 0) continue;
    const int cls = topo.sameHost(topo.rank, st.peer) ? 0 : 1;
    if (st.kind == StepKind::Send) {
      c.messages[cls]++;
      c.bytesSent[cls] += st.count * es;
    } else {
      c.receives[cls]++;
      c.bytesReceived[cls] += st.count * es;
    }
  }
  return c;
}

UniformTopologies::UniformTopologies(int32_t nranks, int32_t ranksPerHost) : ranksPerHost_(std::max(ranksPerHost, 1)) {
  topo_.nranks = nranks;
  topo_.hostOfRank.resize(static_cast<size_t>(nranks));
  for (int32_t r = 0; r < nranks; ++r) topo_.hostOfRank[r] = r / ranksPerHost_;
  topo_.nhosts = nranks == 0 ? 0 : (nranks - 1) / ranksPerHost_ + 1;
  topo_.rank = -1;
}

const Topology& UniformTopologies::at(int32_t rank) {
  const int32_t host = rank / ranksPerHost_;
  if (topo_.rank < 0 || topo_.hostOfRank[topo_.rank] != host) {
    topo_.localRanks.clear();
    for (int32_t r = host * ranksPerHost_; r < std::min(topo_.nranks, (host + 1) * ranksPerHost_); ++r) {
      topo_.localRanks.push_back(r);
    }
  }
  topo_.rank = rank;
  return topo_;
}

uint64_t estimateTotalSteps(const ScheduleBuilder& build, int32_t nranks, int32_t ranksPerHost) {
  if (nranks <= 0) return 0;
  UniformTopologies topos(nranks, ranksPerHost);
  Schedule s;
  build(topos.at(0), &s);
  return static_cast<uint64_t>(s.steps.size()) * static_cast<uint64_t>(nranks);
}

Status buildScheduleGraph(const ScheduleBuilder& build, int32_t nranks, int32_t ranksPerHost, const LinkModel& model,
                          const CostOptions& options, ScheduleGraph* graph, CostResult* out) {
  *out = CostResult{};
  *graph = ScheduleGraph{};
  graph->nranks = nranks;
  graph->ranksPerHost = ranksPerHost;
  out->mode = options.mode;
  if (nranks <= 0 || ranksPerHost <= 0) {
    return makeError(collInvalidArgument, "schedule cost: %d ranks with %d per host", nranks, ranksPerHost);
  }
  for (const LinkParams& l : model.link) {
    if (!(l.bytesPerSecond > 0) || l.alphaSeconds < 0) {
      return makeError(collInvalidArgument, "schedule cost: link bandwidth must be > 0 and alpha >= 0");
    }
  }
  if (!(model.memoryBytesPerSecond > 0)) {
    return makeError(collInvalidArgument, "schedule cost: memory bandwidth must be > 0");
  }
  const bool symmetric = options.mode == CostMode::Symmetric;
  const int32_t L = ranksPerHost;
  HostGrid grid;
  if (symmetric) {
    if (nranks % L != 0) {
      return makeError(collInvalidUsage,
                       "schedule cost: a symmetric evaluation needs equal hosts, but %d ranks do not divide into "
                       "hosts of %d; evaluate exactly",
                       nranks, L);
    }
    const int32_t hosts = nranks / L;
    if (options.symmetry.ndims <= 0) {
      grid.ndims = 1;
      grid.d[0] = hosts;
    } else {
      grid.ndims = std::min(options.symmetry.ndims, 3);
      int64_t prod = 1;
      for (int i = 0; i < grid.ndims; ++i) {
        grid.d[i] = options.symmetry.d[i];
        prod *= grid.d[i];
      }
      if (prod != hosts || grid.d[0] <= 0) {
        return makeError(collInvalidUsage, "schedule cost: host symmetry grid multiplies to %lld, not the %d hosts",
                         static_cast<long long>(prod), hosts);
      }
    }
  }
  const int32_t nEval = symmetric ? L : nranks;
  out->ranksEvaluated = graph->ranksEvaluated = nEval;

  // ---- build every evaluated rank's schedule into a compact form.
  std::vector<ModelStep> steps;
  std::vector<ModelDep> deps;
  std::vector<uint32_t> rankBegin(static_cast<size_t>(nEval) + 1, 0);
  std::vector<uint64_t> rankSlice(static_cast<size_t>(nEval), model.defaultSliceBytes);
  std::vector<std::vector<uint32_t>> slotStep(static_cast<size_t>(nEval));
  UniformTopologies topos(nranks, L);
  Schedule s;
  for (int32_t e = 0; e < nEval; ++e) {
    const Topology& topo = topos.at(e);
    build(topo, &s);
    rankBegin[e] = static_cast<uint32_t>(steps.size());
    if (steps.size() + s.steps.size() > options.maxSteps) {
      return makeError(collInvalidUsage,
                       "schedule cost: '%s' at %d ranks holds more than %llu steps by rank %d; use a symmetric "
                       "evaluation or raise CostOptions::maxSteps",
                       s.algorithm, nranks, static_cast<unsigned long long>(options.maxSteps), e);
    }
    if (s.sliceBytes != 0) rankSlice[e] = s.sliceBytes;
    maxInto(&out->maxPerRank, countSchedule(s, topo));
    const uint64_t es = dataTypeSize(s.dtype);
    slotStep[e].assign(static_cast<size_t>(std::max(s.publishSlots, 0)), kNone);
    for (size_t i = 0; i < s.steps.size(); ++i) {
      const Step& st = s.steps[i];
      ModelStep m;
      m.kind = st.kind;
      m.rank = static_cast<uint32_t>(e);
      m.bytes = st.count * es;
      m.nsrcs = st.nsrcs;
      m.selfCopy = st.kind == StepKind::Copy && sameRef(st.src, st.dst);
      m.inert = st.count == 0 && (!symmetric || !isTransport(st.kind));
      if (isTransport(st.kind)) {
        if (st.peer < 0 || st.peer >= nranks || st.peer == e) {
          return makeError(collInternalError, "schedule cost: rank %d step %zu of '%s' names peer %d of %d", e, i,
                           s.algorithm, st.peer, nranks);
        }
        m.peer = st.peer;
        m.cls = topo.sameHost(e, st.peer) ? 0 : 1;
      }
      m.depBegin = static_cast<uint32_t>(deps.size());
      for (uint32_t k = st.depBegin; k < st.depBegin + st.ndeps; ++k) {
        const Dep& d = s.deps[k];
        ModelDep md;
        md.whole = d.whole;
        if (d.kind == DepKind::Step) {
          if (d.step < 0 || static_cast<size_t>(d.step) >= s.steps.size()) {
            return makeError(collInternalError, "schedule cost: rank %d step %zu of '%s' depends on step %d of %zu", e,
                             i, s.algorithm, d.step, s.steps.size());
          }
          md.step = rankBegin[e] + static_cast<uint32_t>(d.step);
        } else if (d.kind == DepKind::PeerStep) {
          // Local peers only; on host 0 in a symmetric evaluation, so always evaluated.
          if (d.peer < 0 || d.peer >= nranks || !topo.sameHost(e, d.peer) || d.slot < 0) {
            return makeError(collInternalError, "schedule cost: rank %d step %zu of '%s' waits on rank %d slot %d", e,
                             i, s.algorithm, d.peer, d.slot);
          }
          md.peer = d.peer;
          md.slot = d.slot;
        } else {
          continue;  // the previous call: complete before this one starts
        }
        deps.push_back(md);
        m.ndeps++;
      }
      if (st.publishSlot >= 0 && static_cast<size_t>(st.publishSlot) < slotStep[e].size()) {
        slotStep[e][st.publishSlot] = rankBegin[e] + static_cast<uint32_t>(i);
      }
      steps.push_back(m);
    }
  }
  rankBegin[nEval] = static_cast<uint32_t>(steps.size());
  s = Schedule{};
  out->stepsEvaluated = steps.size();
  for (ModelDep& d : deps) {
    if (d.step != kNone) continue;
    const auto& slots = slotStep[d.peer];
    if (static_cast<size_t>(d.slot) >= slots.size() || slots[d.slot] == kNone) {
      return makeError(collInternalError, "schedule cost: a step waits on rank %d slot %d, which no step publishes",
                       d.peer, d.slot);
    }
    d.step = slots[d.slot];
  }
  slotStep.clear();
  slotStep.shrink_to_fit();

  // ---- match sends and receives into transfers.
  std::vector<StreamKey> sends, recvs;
  {
    std::unordered_map<int32_t, uint32_t> sendOrd, recvOrd;
    for (int32_t e = 0; e < nEval; ++e) {
      sendOrd.clear();
      recvOrd.clear();
      for (uint32_t i = rankBegin[e]; i < rankBegin[e + 1]; ++i) {
        const ModelStep& m = steps[i];
        if (m.inert || !isTransport(m.kind)) continue;
        if (m.kind == StepKind::Send) {
          sends.push_back(StreamKey{static_cast<uint32_t>(e), static_cast<uint32_t>(m.peer), sendOrd[m.peer]++, i});
          continue;
        }
        const uint32_t k = recvOrd[m.peer]++;
        const int32_t host = m.peer / L;
        if (!symmetric || host == 0) {
          recvs.push_back(StreamKey{static_cast<uint32_t>(m.peer), static_cast<uint32_t>(e), k, i});
        } else {
          // The stream (peer -> e) translated by -host(peer): from host 0's rank (peer's local
          // index) to rank e's local index on host -host(peer).
          const uint32_t a = static_cast<uint32_t>(m.peer % L);
          const uint32_t q = static_cast<uint32_t>(grid.negate(host) * L + e);
          recvs.push_back(StreamKey{a, q, k, i});
        }
      }
    }
  }
  std::sort(sends.begin(), sends.end());
  std::sort(recvs.begin(), recvs.end());
  auto describeKey = [&](const StreamKey& k, bool send) {
    return std::string(send ? "send" : "receive") + " #" + std::to_string(k.k) + " of stream " + std::to_string(k.a) +
           " -> " + std::to_string(k.q);
  };
  for (size_t i = 0; i < std::max(sends.size(), recvs.size()); ++i) {
    if (i >= sends.size() || i >= recvs.size() || !sends[i].sameKey(recvs[i])) {
      const bool sendMissing = i >= sends.size() || (i < recvs.size() && recvs[i] < sends[i]);
      const StreamKey& k = sendMissing ? recvs[i] : sends[i];
      return makeError(collInternalError, "schedule cost: %s has no matching %s%s",
                       describeKey(k, !sendMissing).c_str(), sendMissing ? "send" : "receive",
                       symmetric ? " (is the schedule the same on every host up to translation?)" : "");
    }
  }

  // ---- nodes: a wire per transfer (the Send step and the bytes in flight), a receive per
  // receive step (it needs the bytes and its own dependencies: senders do not wait for
  // receivers, as the executor's buffered streams let them), one per non-inert local step.
  std::vector<uint32_t> nodeOf(steps.size(), kNone);
  std::vector<GraphNode>& nodes = graph->nodes;
  nodes.reserve(2 * sends.size() + steps.size() / 8);
  // Ties go by (local index of the rank, step index in its schedule), which a translation between
  // hosts keeps: a symmetric evaluation then orders every port's wires as the exact one does.
  auto keyOf = [&](uint32_t step) {
    const uint32_t rank = steps[step].rank;
    return (static_cast<uint64_t>(rank % static_cast<uint32_t>(L)) << 32) | (step - rankBegin[rank]);
  };
  auto sliceTime = [&](uint64_t bytes, uint64_t slice, double bytesPerSecond) {
    return static_cast<double>(std::min(bytes, slice)) / bytesPerSecond;
  };
  std::vector<uint32_t> wireOf(sends.size());
  for (size_t i = 0; i < sends.size(); ++i) {
    const ModelStep& sm = steps[sends[i].step];
    const ModelStep& rm = steps[recvs[i].step];
    if (sm.bytes != rm.bytes) {
      if (!symmetric) {
        return makeError(collInternalError, "schedule cost: %s carries %llu bytes but its receive expects %llu",
                         describeKey(sends[i], true).c_str(), static_cast<unsigned long long>(sm.bytes),
                         static_cast<unsigned long long>(rm.bytes));
      }
      out->asymmetricTransfers++;
    }
    const LinkParams& l = model.link[sm.cls];
    const uint64_t bytes = std::max(sm.bytes, rm.bytes);
    GraphNode w;
    w.kind = GraphNodeKind::Wire;
    w.cls = sm.cls;
    w.sender = sm.rank;
    w.receiver = rm.rank;
    w.peer = sm.peer;
    w.bytes = bytes;
    w.firstBytes = std::min(bytes, rankSlice[sm.rank]);
    w.key = keyOf(sends[i].step);
    w.occupancy = static_cast<double>(bytes) / l.bytesPerSecond;
    w.lag = l.alphaSeconds + sliceTime(bytes, rankSlice[sm.rank], l.bytesPerSecond);
    wireOf[i] = nodeOf[sends[i].step] = static_cast<uint32_t>(nodes.size());
    nodes.push_back(w);
    GraphNode r;
    r.kind = GraphNodeKind::Receive;
    r.sender = r.receiver = rm.rank;
    r.key = keyOf(recvs[i].step);
    r.lag = sliceTime(bytes, rankSlice[rm.rank], model.memoryBytesPerSecond);
    nodeOf[recvs[i].step] = static_cast<uint32_t>(nodes.size());
    nodes.push_back(r);
  }
  out->transfers = sends.size();
  recvs.clear();
  recvs.shrink_to_fit();
  for (uint32_t i = 0; i < steps.size(); ++i) {
    const ModelStep& m = steps[i];
    if (m.inert || isTransport(m.kind)) continue;
    GraphNode n;
    n.sender = n.receiver = m.rank;
    n.key = keyOf(i);
    const double work = m.selfCopy ? 0.0 : static_cast<double>(m.bytes) * std::max<uint32_t>(m.nsrcs, 1);
    n.occupancy = work / model.memoryBytesPerSecond;
    n.lag = m.selfCopy ? 0.0 : sliceTime(m.bytes, rankSlice[m.rank], model.memoryBytesPerSecond);
    nodeOf[i] = static_cast<uint32_t>(nodes.size());
    nodes.push_back(n);
  }
  if (nodes.size() >= (1u << 30)) {
    return makeError(collInvalidUsage, "schedule cost: %zu nodes exceed the evaluator's index range", nodes.size());
  }

  // ---- edges (CSR by source node): dependencies, arrivals and stream order.
  std::vector<uint32_t>& edgeBegin = graph->edgeBegin;
  edgeBegin.assign(nodes.size() + 1, 0);
  auto forEachEdge = [&](auto&& fn) {
    for (uint32_t i = 0; i < steps.size(); ++i) {
      const uint32_t to = nodeOf[i];
      if (to == kNone) continue;
      const ModelStep& m = steps[i];
      for (uint32_t k = m.depBegin; k < m.depBegin + m.ndeps; ++k) {
        const uint32_t from = nodeOf[deps[k].step];
        if (from == kNone || from == to) continue;
        fn(from, to | (deps[k].whole ? kGraphEdgeWhole : kGraphEdgeSlice));
      }
    }
    for (size_t i = 0; i < sends.size(); ++i) {
      fn(wireOf[i], (wireOf[i] + 1) | kGraphEdgeArrival);
      if (i > 0 && sends[i].a == sends[i - 1].a && sends[i].q == sends[i - 1].q) {
        fn(wireOf[i - 1], wireOf[i] | kGraphEdgeStream);
      }
    }
  };
  forEachEdge([&](uint32_t from, uint32_t) { edgeBegin[from + 1]++; });
  for (size_t n = 0; n < nodes.size(); ++n) edgeBegin[n + 1] += edgeBegin[n];
  std::vector<uint32_t>& edges = graph->edges;
  edges.assign(edgeBegin.back(), 0);
  {
    std::vector<uint32_t> cursor(edgeBegin.begin(), edgeBegin.end() - 1);
    forEachEdge([&](uint32_t from, uint32_t tagged) {
      edges[cursor[from]++] = tagged;
      nodes[tagged & ~kGraphEdgeMask].pending++;
    });
  }
  sends.clear();
  sends.shrink_to_fit();
  wireOf.clear();
  wireOf.shrink_to_fit();
  return okStatus();
}

Status modelScheduleTime(const ScheduleBuilder& build, int32_t nranks, int32_t ranksPerHost, const LinkModel& model,
                         const CostOptions& options, CostResult* out) {
  ScheduleGraph graph;
  COLL_TRY(buildScheduleGraph(build, nranks, ranksPerHost, model, options, &graph, out));
  const std::vector<GraphNode>& nodes = graph.nodes;
  const std::vector<uint32_t>& edgeBegin = graph.edgeBegin;
  const std::vector<uint32_t>& edges = graph.edges;
  const int32_t nEval = graph.ranksEvaluated;

  // ---- discrete-event evaluation in order of readiness (ties by GraphNode::key).
  struct State {
    double earliest = 0;
    double finishMin = 0;
    double start = 0;
    double finish = 0;
    uint32_t pending = 0;
  };
  std::vector<State> state(nodes.size());
  for (size_t n = 0; n < nodes.size(); ++n) state[n].pending = nodes[n].pending;
  struct Ready {
    double time;
    uint64_t key;
    uint32_t node;
    bool operator>(const Ready& o) const {
      if (time != o.time) return time > o.time;
      if (key != o.key) return key > o.key;
      return node > o.node;
    }
  };
  auto readyAt = [&](double time, uint32_t id) { return Ready{time, nodes[id].key, id}; };
  std::priority_queue<Ready, std::vector<Ready>, std::greater<Ready>> ready;
  for (uint32_t n = 0; n < nodes.size(); ++n) {
    if (state[n].pending == 0) ready.push(readyAt(0.0, n));
  }
  std::vector<double> egress(static_cast<size_t>(nEval) * kLinkClasses, 0.0);
  std::vector<double> ingress(static_cast<size_t>(nEval) * kLinkClasses, 0.0);
  out->rankSeconds.assign(static_cast<size_t>(nEval), 0.0);
  size_t resolved = 0;
  double makespan = 0;
  while (!ready.empty()) {
    const uint32_t id = ready.top().node;
    ready.pop();
    const GraphNode& g = nodes[id];
    State& n = state[id];
    double alpha = 0;
    switch (g.kind) {
      case GraphNodeKind::Wire: {
        alpha = model.link[g.cls].alphaSeconds;
        double& eg = egress[static_cast<size_t>(g.sender) * kLinkClasses + g.cls];
        double& in = ingress[static_cast<size_t>(g.receiver) * kLinkClasses + g.cls];
        // Streams from when it is ready; its bytes pass the ports after those already queued.
        n.start = n.earliest;
        eg = std::max(n.earliest, eg) + g.occupancy;
        in = std::max(n.earliest, in) + g.occupancy;
        const double sent = std::max(eg, in);
        n.finish = std::max(sent + alpha, n.finishMin);
        out->rankSeconds[g.sender] = std::max(out->rankSeconds[g.sender], n.finish - alpha);
        break;
      }
      case GraphNodeKind::Receive:
      case GraphNodeKind::Local:
        n.start = n.earliest;
        n.finish = std::max(n.start + g.occupancy, n.finishMin);
        out->rankSeconds[g.receiver] = std::max(out->rankSeconds[g.receiver], n.finish);
        break;
    }
    makespan = std::max(makespan, n.finish);
    resolved++;
    // How a dependent sees this node: a wire, from its sending rank, is done once the bytes have
    // left and has read its first slice without the latency; its receive sees the first slice
    // after lag and the whole at finish; receives and local steps likewise.
    const bool wire = g.kind == GraphNodeKind::Wire;
    const double done = wire ? n.finish - alpha : n.finish;
    const double first = n.start + g.lag - alpha;
    for (uint32_t k = edgeBegin[id]; k < edgeBegin[id + 1]; ++k) {
      const uint32_t kind = edges[k] & kGraphEdgeMask;
      const uint32_t to = edges[k] & ~kGraphEdgeMask;
      State& d = state[to];
      switch (kind) {
        case kGraphEdgeWhole: d.earliest = std::max(d.earliest, done); break;
        case kGraphEdgeStream:
          d.earliest = std::max(d.earliest, done);
          d.finishMin = std::max(d.finishMin, n.finish);
          break;
        case kGraphEdgeArrival:
          d.earliest = std::max(d.earliest, n.start + g.lag);
          d.finishMin = std::max(d.finishMin, n.finish);
          break;
        default:
          d.earliest = std::max(d.earliest, first);
          d.finishMin = std::max(d.finishMin, done + nodes[to].lag);
          break;
      }
      if (--d.pending == 0) ready.push(readyAt(d.earliest, to));
    }
  }
  if (resolved != nodes.size()) {
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (state[i].pending == 0) continue;
      return makeError(collInternalError,
                       "schedule cost: %zu of %zu steps never become ready (a dependency cycle); e.g. rank %u step %u",
                       nodes.size() - resolved, nodes.size(), nodes[i].sender,
                       static_cast<uint32_t>(nodes[i].key & 0xffffffffu));
    }
  }
  out->seconds = makespan;
  return okStatus();
}

}  // namespace coll
