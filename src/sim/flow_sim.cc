// The flow-level simulator. The rules (why each is what it is):
// - The graph is schedule_cost's (buildScheduleGraph): a wire per transfer, a receive per receive
//   step, a node per local step, and edges saying how a dependent waits. Only the wires change:
//   instead of occupying two per-rank ports first come first served, a wire is a flow over its
//   route's links at the max-min fair rate (progressive filling), recomputed whenever the set of
//   flows changes, and its last byte arrives the message latency plus a hop latency per switch
//   after it has left. Receives and local steps take their graph durations (memory bandwidth),
//   as in the schedule model.
// - Slices: a per-slice dependency releases the dependent when the dependency's first slice is
//   done (a wire's first slice when that many bytes have left at the flow's actual rate; a local
//   step's after its slice time) and lets it finish no earlier than its own slice time after the
//   dependency finished: the schedule model's rule, with flows instead of ports. Slices are not
//   separate flows, so a pipeline's flows overlap on their links as whole messages.
// - Symmetric mode: host 0's ranks only. A message of host 0 stands for its copies on every host
//   (the schedule translated by the host symmetry); the copies' routes are summed into one flow
//   class whose links carry it with multiplicity, so a link crossed by k copies gives each 1/k.
//   All copies get the class's rate, the rate of its most loaded copy: exact when the fabric and
//   placement are symmetric under the translation, otherwise every host runs at the pace of the
//   slowest (lockstep), which the schedules' dependencies enforce within a few steps anyway.
#include "src/sim/flow_sim.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>
#include <unordered_map>

#include "algorithms/registry.h"
#include "src/plan/planner.h"

namespace coll::sim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Grid {  // HostSymmetry arithmetic: host h translated by host g
  int32_t ndims = 1;
  int32_t d[3] = {1, 1, 1};
  int32_t add(int32_t h, int32_t g) const {
    int32_t out = 0, stride = 1;
    for (int i = 0; i < ndims; ++i) {
      out += ((h % d[i] + g % d[i]) % d[i]) * stride;
      h /= d[i];
      g /= d[i];
      stride *= d[i];
    }
    return out;
  }
};

// A flow class: the links its copies cross, with how many copies cross each.
struct FlowClass {
  uint32_t begin = 0;
  uint32_t count = 0;
  int32_t switches = 0;  // most switches a copy crosses
};

// A wire's flow while it moves bytes: remaining bytes as of t0, at `rate` since then.
struct FlowState {
  double remaining = 0;
  double t0 = 0;
  double rate = 0;
  uint32_t version = 0;  // bumped at every new rate: older milestone events are stale
  uint32_t pos = 0;      // index in the active list
  bool firstDone = false;
};

enum class EventKind : uint8_t { Start, Release, First, WorkDone, Done, FlowMilestone };
struct Event {
  double time;
  uint64_t seq;
  uint32_t node;
  uint32_t version;
  EventKind kind;
  bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};

struct NodeState {
  double earliest = 0;
  double finishMin = 0;  // wire: on its finish (arrival)
  double start = 0;
  double finish = 0;
  double alpha = 0;  // wire: message latency plus hops
  uint32_t startPending = 0;
  uint32_t finishPending = 0;
  bool workDone = false;
};

class Simulator {
 public:
  Simulator(const ScheduleGraph& g, const Fabric& f, const std::vector<int32_t>& nodeOfHost, const SimParams& p,
            const Grid& grid)
      : g_(g), f_(f), nodeOfHost_(nodeOfHost), p_(p), grid_(grid) {}

  Status run(SimResult* out, int32_t topLinks);

 private:
  int32_t slotOf(int32_t rank) const {
    const int32_t L = g_.ranksPerHost;
    return nodeOfHost_[rank / L] * f_.spec().ranksPerNode + rank % L;
  }
  uint32_t classOf(uint32_t sender, int32_t peer);
  void solveRates();
  void fill(const std::vector<uint32_t>& flows, std::vector<double>* rates);
  void setRates(const std::vector<uint32_t>& flows, const std::vector<double>& rates);
  void milestone(uint32_t node);
  void push(double t, uint32_t node, EventKind k, uint32_t version = 0) {
    queue_.push(Event{t, seq_++, node, version, k});
  }
  void start(uint32_t id);
  void first(uint32_t id);
  void release(uint32_t id, double t);
  void workDone(uint32_t id);
  void done(uint32_t id);
  void tryComplete(uint32_t id);

  const ScheduleGraph& g_;
  const Fabric& f_;
  const std::vector<int32_t>& nodeOfHost_;
  const SimParams& p_;
  Grid grid_;
  double now_ = 0;
  uint64_t seq_ = 0;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> queue_;
  std::vector<NodeState> st_;
  std::vector<uint32_t> wireClass_;
  std::vector<FlowState> flow_;   // by node (wires)
  std::vector<uint32_t> active_;  // wire nodes moving bytes
  bool dirty_ = false;
  // Exact mode: flows share links only with flows of their component (linked by common links), so
  // a change re-solves that component alone; seeds are the links of flows started or ended.
  bool components_ = false;
  std::vector<std::vector<uint32_t>> linkFlows_;
  std::vector<int32_t> seeds_;
  std::vector<uint32_t> linkMark_, flowMark_;
  uint32_t mark_ = 0;
  std::vector<double> linkLoad_, share_;  // exact mode: rates crossing a link; a fill's share
  std::vector<uint32_t> bottlenecks_;     // links where the last fill froze flows

  std::unordered_map<uint64_t, uint32_t> classIndex_;
  std::vector<FlowClass> classes_;
  std::vector<std::pair<int32_t, uint32_t>> entries_;  // (link, copies)
  std::vector<double> linkBytes_;
  // Bytes each class carried, spread over its links once at the end: a symmetric class crosses
  // links of every host, so doing it per message would cost O(hosts) each.
  std::vector<double> classBytes_;

  // Solver scratch, per link.
  std::vector<double> rem_, weight_;
  std::vector<uint32_t> adjBegin_, adjFill_, touched_;
  std::vector<uint32_t> adj_;
  // Rates of active sets seen before: sorted class list -> rates in that order.
  std::unordered_map<uint64_t, std::vector<std::pair<std::vector<uint32_t>, std::vector<double>>>> cache_;
  size_t cachedIds_ = 0;
  double makespan_ = 0;
  uint64_t flows_ = 0, solves_ = 0, reuses_ = 0;
  uint64_t work_ = 0;  // flow-link visits of rate solving (SimParams::maxWork)
  size_t resolved_ = 0;
};

uint32_t Simulator::classOf(uint32_t sender, int32_t peer) {
  const uint64_t key = (static_cast<uint64_t>(sender) << 32) | static_cast<uint32_t>(peer);
  auto it = classIndex_.find(key);
  if (it != classIndex_.end()) return it->second;
  FlowClass c;
  c.begin = static_cast<uint32_t>(entries_.size());
  std::vector<int32_t> path;
  int32_t switches = 0;
  const int32_t L = g_.ranksPerHost;
  if (g_.ranksEvaluated == g_.nranks) {
    f_.route(slotOf(static_cast<int32_t>(sender)), slotOf(peer), &path, &switches);
    for (int32_t l : path) entries_.emplace_back(l, 1u);
    c.switches = switches;
  } else {
    // Every host's copy: sender on host g, the peer's host translated by g.
    const int32_t hosts = g_.nranks / L;
    std::unordered_map<int32_t, uint32_t> copies;
    for (int32_t h = 0; h < hosts; ++h) {
      const int32_t a = grid_.add(0, h) * L + static_cast<int32_t>(sender);
      const int32_t b = grid_.add(peer / L, h) * L + peer % L;
      f_.route(slotOf(a), slotOf(b), &path, &switches);
      c.switches = std::max(c.switches, switches);
      for (int32_t l : path) copies[l]++;
    }
    for (const auto& [l, n] : copies) entries_.emplace_back(l, n);
    std::sort(entries_.begin() + c.begin, entries_.end());
  }
  c.count = static_cast<uint32_t>(entries_.size() - c.begin);
  classes_.push_back(c);
  classBytes_.push_back(0.0);
  classIndex_.emplace(key, static_cast<uint32_t>(classes_.size() - 1));
  return static_cast<uint32_t>(classes_.size() - 1);
}

// Max-min fair rates by progressive filling: raise every unfrozen flow's rate together until a
// link fills (its remaining capacity over the copies of unfrozen flows crossing it is the smallest
// share), freeze the flows crossing it at that share, repeat.
//
// Symmetric mode (a few classes, each over many links) solves all active flows, and remembers the
// rates of every active set it has seen (lockstep schedules repeat them). Exact mode solves only
// the flows a change can affect: those on the changed flows' links and, from them, across
// saturated links; the other flows keep their rates and the capacity they use. That is max-min
// fair as long as no kept flow runs faster than the share of a link it shares with a re-solved
// flow that froze there; such flows are added and the solve repeated until none is left.
void Simulator::solveRates() {
  std::vector<uint32_t> flows;
  if (!components_) {
    flows = active_;
    if (flows.empty()) return;
    std::sort(flows.begin(), flows.end(), [&](uint32_t x, uint32_t y) {
      return wireClass_[x] != wireClass_[y] ? wireClass_[x] < wireClass_[y] : x < y;
    });
    std::vector<uint32_t> key(flows.size());
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < flows.size(); ++i) {
      key[i] = wireClass_[flows[i]];
      h = (h ^ key[i]) * 1099511628211ull;
    }
    auto& bucket = cache_[h];
    for (const auto& [k, rates] : bucket) {
      if (k != key) continue;
      reuses_++;
      setRates(flows, rates);
      return;
    }
    std::vector<double> rates;
    fill(flows, &rates);
    setRates(flows, rates);
    // Bounded memory: forget every active set once the cache holds this many class ids.
    cachedIds_ += key.size();
    if (cachedIds_ > 20'000'000) {
      cache_.clear();
      cachedIds_ = key.size();
    }
    cache_[h].emplace_back(std::move(key), std::move(rates));
    return;
  }
  if (++mark_ == 0) {
    std::fill(linkMark_.begin(), linkMark_.end(), 0);
    std::fill(flowMark_.begin(), flowMark_.end(), 0);
    mark_ = 1;
  }
  const std::vector<Link>& links = f_.links();
  auto saturated = [&](int32_t l) { return linkLoad_[l] >= links[l].bytesPerSecond * (1 - 1e-9); };
  std::vector<int32_t> stack;
  auto visit = [&](int32_t l) {
    if (linkMark_[l] == mark_) return;
    linkMark_[l] = mark_;
    stack.push_back(l);
  };
  auto addFlow = [&](uint32_t node) {
    if (flowMark_[node] == mark_) return;
    flowMark_[node] = mark_;
    flows.push_back(node);
    const FlowClass& c = classes_[wireClass_[node]];
    for (uint32_t e = c.begin; e < c.begin + c.count; ++e) {
      if (saturated(entries_[e].first)) visit(entries_[e].first);
    }
  };
  auto expand = [&]() {
    while (!stack.empty()) {
      const int32_t l = stack.back();
      stack.pop_back();
      for (uint32_t node : linkFlows_[l]) addFlow(node);
    }
  };
  for (int32_t l : seeds_) visit(l);
  seeds_.clear();
  expand();
  if (flows.empty()) return;
  std::vector<double> rates;
  while (true) {
    fill(flows, &rates);
    // Kept flows faster than a share a re-solved flow froze at on a link they share.
    bool grew = false;
    for (uint32_t l : bottlenecks_) {
      for (uint32_t node : linkFlows_[l]) {
        if (flowMark_[node] == mark_ || flow_[node].rate <= share_[l] * (1 + 1e-9)) continue;
        addFlow(node);
        grew = true;
      }
    }
    if (!grew) break;
    expand();
  }
  setRates(flows, rates);
}

// Progressive filling of `flows` over the capacity that flows not among them leave (exact mode:
// their present rates; symmetric mode: all flows are among them).
void Simulator::fill(const std::vector<uint32_t>& flows, std::vector<double>* rates) {
  solves_++;
  const std::vector<Link>& links = f_.links();
  for (uint32_t node : flows) {
    const FlowClass& c = classes_[wireClass_[node]];
    work_ += c.count;
    for (uint32_t e = c.begin; e < c.begin + c.count; ++e) {
      const int32_t l = entries_[e].first;
      if (adjFill_[l] == 0) {
        touched_.push_back(static_cast<uint32_t>(l));
        rem_[l] = components_ ? links[l].bytesPerSecond - linkLoad_[l] : links[l].bytesPerSecond;
        weight_[l] = 0;
      }
      // Its own present rate is not the others' load.
      if (components_) rem_[l] += flow_[node].rate * entries_[e].second;
      weight_[l] += entries_[e].second;
      adjFill_[l]++;
    }
  }
  uint32_t total = 0;
  for (uint32_t l : touched_) {
    adjBegin_[l] = total;
    total += adjFill_[l];
    adjFill_[l] = adjBegin_[l];
  }
  adj_.resize(total);
  for (uint32_t i = 0; i < flows.size(); ++i) {
    const FlowClass& c = classes_[wireClass_[flows[i]]];
    for (uint32_t e = c.begin; e < c.begin + c.count; ++e) adj_[adjFill_[entries_[e].first]++] = i;
  }
  std::vector<char> frozen(flows.size(), 0);
  rates->assign(flows.size(), 0.0);
  bottlenecks_.clear();
  using Share = std::pair<double, uint32_t>;
  std::priority_queue<Share, std::vector<Share>, std::greater<Share>> heap;
  for (uint32_t l : touched_) heap.push({std::max(rem_[l], 0.0) / weight_[l], l});
  size_t left = flows.size();
  while (!heap.empty() && left > 0) {
    const auto [share, l] = heap.top();
    heap.pop();
    if (weight_[l] <= 0) continue;
    const double current = std::max(rem_[l], 0.0) / weight_[l];
    if (current > share * (1 + 1e-12) + 1e-300) {  // stale: re-queue at its present share
      heap.push({current, l});
      continue;
    }
    share_[l] = current;
    bottlenecks_.push_back(l);
    for (uint32_t k = adjBegin_[l]; k < adjFill_[l]; ++k) {
      const uint32_t i = adj_[k];
      if (frozen[i]) continue;
      frozen[i] = 1;
      left--;
      (*rates)[i] = current;
      const FlowClass& c = classes_[wireClass_[flows[i]]];
      for (uint32_t e = c.begin; e < c.begin + c.count; ++e) {
        const int32_t l2 = entries_[e].first;
        rem_[l2] -= current * entries_[e].second;
        weight_[l2] -= entries_[e].second;
      }
    }
  }
  for (uint32_t l : touched_) adjFill_[l] = 0;
  touched_.clear();
}

// New rates from now on: bytes moved so far at the old rates are settled first.
void Simulator::setRates(const std::vector<uint32_t>& flows, const std::vector<double>& rates) {
  for (size_t i = 0; i < flows.size(); ++i) {
    FlowState& fs = flow_[flows[i]];
    fs.remaining = std::max(fs.remaining - fs.rate * (now_ - fs.t0), 0.0);
    fs.t0 = now_;
    if (fs.rate == rates[i] && fs.version != 0) continue;  // its milestone event stands
    if (components_) {
      const FlowClass& c = classes_[wireClass_[flows[i]]];
      for (uint32_t e = c.begin; e < c.begin + c.count; ++e) {
        linkLoad_[entries_[e].first] += (rates[i] - fs.rate) * entries_[e].second;
      }
    }
    fs.rate = rates[i];
    fs.version++;
    const GraphNode& n = g_.nodes[flows[i]];
    const double target = fs.firstDone ? 0.0 : static_cast<double>(n.bytes - n.firstBytes);
    push(now_ + std::max(fs.remaining - target, 0.0) / fs.rate, flows[i], EventKind::FlowMilestone, fs.version);
  }
}

// A flow reached its first slice or its end.
void Simulator::milestone(uint32_t id) {
  FlowState& fs = flow_[id];
  const GraphNode& n = g_.nodes[id];
  fs.t0 = now_;
  if (!fs.firstDone) {
    fs.firstDone = true;
    fs.remaining = static_cast<double>(n.bytes - n.firstBytes);
    first(id);
    if (fs.remaining > 0) {
      push(now_ + fs.remaining / fs.rate, id, EventKind::FlowMilestone, fs.version);
      return;
    }
  }
  fs.remaining = 0;
  const FlowClass& c = classes_[wireClass_[id]];
  classBytes_[wireClass_[id]] += static_cast<double>(n.bytes);
  if (components_) {
    for (uint32_t e = c.begin; e < c.begin + c.count; ++e) {
      const int32_t l = entries_[e].first;
      auto& v = linkFlows_[l];
      v.erase(std::find(v.begin(), v.end(), id));
      seeds_.push_back(l);
      linkLoad_[l] = v.empty() ? 0.0 : linkLoad_[l] - fs.rate * entries_[e].second;
    }
  }
  const uint32_t last = active_.back();
  active_[fs.pos] = last;
  flow_[last].pos = fs.pos;
  active_.pop_back();
  dirty_ = true;
  workDone(id);
}

void Simulator::release(uint32_t id, double t) {
  NodeState& s = st_[id];
  s.earliest = std::max(s.earliest, t);
  if (--s.startPending == 0) push(std::max(s.earliest, now_), id, EventKind::Start);
}

void Simulator::start(uint32_t id) {
  const GraphNode& n = g_.nodes[id];
  NodeState& s = st_[id];
  s.start = now_;
  if (n.kind != GraphNodeKind::Wire) {
    push(now_ + n.lag, id, EventKind::First);
    push(now_ + n.occupancy, id, EventKind::WorkDone);
    return;
  }
  flows_++;
  if (n.bytes == 0) {
    push(now_, id, EventKind::First);
    push(now_, id, EventKind::WorkDone);
    return;
  }
  FlowState& fs = flow_[id];
  fs.remaining = static_cast<double>(n.bytes);
  fs.t0 = now_;
  fs.pos = static_cast<uint32_t>(active_.size());
  active_.push_back(id);
  if (components_) {
    const FlowClass& c = classes_[wireClass_[id]];
    for (uint32_t e = c.begin; e < c.begin + c.count; ++e) {
      linkFlows_[entries_[e].first].push_back(id);
      seeds_.push_back(entries_[e].first);
    }
  }
  dirty_ = true;
}

// The first slice is done (a wire: has left): per-slice dependents may start, the receive once
// it has arrived.
void Simulator::first(uint32_t id) {
  const GraphNode& n = g_.nodes[id];
  for (uint32_t k = g_.edgeBegin[id]; k < g_.edgeBegin[id + 1]; ++k) {
    const uint32_t kind = g_.edges[k] & kGraphEdgeMask;
    const uint32_t to = g_.edges[k] & ~kGraphEdgeMask;
    if (kind == kGraphEdgeSlice) release(to, now_);
    if (kind == kGraphEdgeArrival) {
      if (n.kind == GraphNodeKind::Wire && st_[id].alpha > 0) push(now_ + st_[id].alpha, to, EventKind::Release);
      else release(to, now_);
    }
  }
}

void Simulator::workDone(uint32_t id) {
  st_[id].workDone = true;
  tryComplete(id);
}

void Simulator::tryComplete(uint32_t id) {
  NodeState& s = st_[id];
  if (!s.workDone || s.finishPending > 0) return;
  const double doneAt = std::max(now_, s.finishMin - s.alpha);
  if (doneAt > now_) push(doneAt, id, EventKind::Done);
  else done(id);
}

// Done as its own rank sees it (a wire: its bytes have left; they arrive alpha later).
void Simulator::done(uint32_t id) {
  NodeState& s = st_[id];
  s.finish = now_ + s.alpha;
  makespan_ = std::max(makespan_, s.finish);
  resolved_++;
  for (uint32_t k = g_.edgeBegin[id]; k < g_.edgeBegin[id + 1]; ++k) {
    const uint32_t kind = g_.edges[k] & kGraphEdgeMask;
    const uint32_t to = g_.edges[k] & ~kGraphEdgeMask;
    NodeState& d = st_[to];
    switch (kind) {
      case kGraphEdgeWhole: break;
      case kGraphEdgeStream:
      case kGraphEdgeArrival: d.finishMin = std::max(d.finishMin, s.finish); break;
      default: d.finishMin = std::max(d.finishMin, now_ + g_.nodes[to].lag); break;
    }
    if (kind == kGraphEdgeWhole || kind == kGraphEdgeStream) release(to, now_);
    d.finishPending--;
    tryComplete(to);
  }
}

Status Simulator::run(SimResult* out, int32_t topLinks) {
  const size_t nnodes = g_.nodes.size();
  const size_t nlinks = f_.links().size();
  st_.assign(nnodes, NodeState{});
  rem_.assign(nlinks, 0.0);
  weight_.assign(nlinks, 0.0);
  adjBegin_.assign(nlinks, 0);
  adjFill_.assign(nlinks, 0);
  linkBytes_.assign(nlinks, 0.0);
  wireClass_.assign(nnodes, 0);
  flow_.assign(nnodes, FlowState{});
  components_ = g_.ranksEvaluated == g_.nranks;
  if (components_) {
    linkFlows_.assign(nlinks, {});
    linkMark_.assign(nlinks, 0);
    flowMark_.assign(nnodes, 0);
    linkLoad_.assign(nlinks, 0.0);
  }
  share_.assign(nlinks, 0.0);
  for (size_t i = 0; i < nnodes; ++i) {
    const GraphNode& n = g_.nodes[i];
    st_[i].startPending = st_[i].finishPending = n.pending;
    if (n.kind == GraphNodeKind::Wire) {
      wireClass_[i] = classOf(n.sender, n.peer);
      st_[i].alpha = p_.model.link[n.cls].alphaSeconds + classes_[wireClass_[i]].switches * f_.spec().hopSeconds;
    }
    if (n.pending == 0) push(0.0, static_cast<uint32_t>(i), EventKind::Start);
  }
  // Events in time order; rates are re-solved once all events of an instant are in, before time
  // moves on (flows starting and ending together cost one solve).
  while (true) {
    if (dirty_ && (queue_.empty() || queue_.top().time > now_)) {
      solveRates();
      dirty_ = false;
      if (p_.maxWork > 0 && work_ > p_.maxWork) {
        out->stoppedAt = now_;  // nothing has finished yet: the run takes at least this long
        return makeError(collInvalidUsage, "collsim: past the work budget of %llu units of rate solving at %.6g s",
                         static_cast<unsigned long long>(p_.maxWork), now_);
      }
      continue;
    }
    if (queue_.empty()) break;
    const Event e = queue_.top();
    queue_.pop();
    now_ = std::max(now_, e.time);
    switch (e.kind) {
      case EventKind::Start: start(e.node); break;
      case EventKind::Release: release(e.node, now_); break;
      case EventKind::First: first(e.node); break;
      case EventKind::WorkDone: workDone(e.node); break;
      case EventKind::Done: done(e.node); break;
      case EventKind::FlowMilestone:
        if (e.version == flow_[e.node].version) milestone(e.node);
        break;
    }
  }
  if (resolved_ != nnodes) {
    return makeError(collInternalError, "collsim: %zu of %zu steps never completed (a dependency cycle?)",
                     nnodes - resolved_, nnodes);
  }
  for (size_t k = 0; k < classes_.size(); ++k) {
    const FlowClass& c = classes_[k];
    for (uint32_t e = c.begin; e < c.begin + c.count; ++e) {
      linkBytes_[entries_[e].first] += classBytes_[k] * entries_[e].second;
    }
  }
  out->seconds = makespan_;
  out->flows = flows_;
  out->rateSolves = solves_;
  out->rateReuses = reuses_;
  const std::vector<Link>& links = f_.links();
  std::vector<LinkLoad> loads;
  for (size_t l = 0; l < nlinks; ++l) {
    TierLoad& t = out->tiers[static_cast<int>(links[l].tier)];
    t.links++;
    if (linkBytes_[l] <= 0) continue;
    const double util = makespan_ > 0 ? linkBytes_[l] / (links[l].bytesPerSecond * makespan_) : 0.0;
    t.used++;
    t.bytes += linkBytes_[l];
    t.meanUtil += util;
    t.maxUtil = std::max(t.maxUtil, util);
    loads.push_back(LinkLoad{static_cast<int32_t>(l), std::string(), linkBytes_[l], util});
  }
  for (TierLoad& t : out->tiers) {
    if (t.used > 0) t.meanUtil /= t.used;
  }
  const size_t top = std::min(loads.size(), static_cast<size_t>(std::max(topLinks, 0)));
  std::partial_sort(
      loads.begin(), loads.begin() + static_cast<ptrdiff_t>(top), loads.end(),
      [](const LinkLoad& x, const LinkLoad& y) { return x.util != y.util ? x.util > y.util : x.link < y.link; });
  loads.resize(top);
  for (LinkLoad& l : loads) l.name = f_.linkName(l.link);
  out->busiest = std::move(loads);
  return okStatus();
}

}  // namespace

Status simulateSchedules(const ScheduleBuilder& build, int32_t nranks, const Fabric& fabric,
                         const std::vector<int32_t>& nodeOfHost, const SimParams& params, SimResult* out,
                         int32_t topLinks) {
  *out = SimResult{};
  const int32_t L = fabric.spec().ranksPerNode;
  if (nranks <= 0) return makeError(collInvalidArgument, "collsim: %d ranks; want at least 1", nranks);
  const int32_t hosts = (nranks + L - 1) / L;
  if (static_cast<int32_t>(nodeOfHost.size()) != hosts) {
    return makeError(collInvalidArgument, "collsim: placement has %zu hosts, the ranks need %d", nodeOfHost.size(),
                     hosts);
  }
  for (int32_t n : nodeOfHost) {
    if (n < 0 || n >= fabric.nodes()) {
      return makeError(collInvalidArgument, "collsim: placement names node %d of %d", n, fabric.nodes());
    }
  }
  ScheduleGraph graph;
  CostResult counts;
  COLL_TRY(buildScheduleGraph(build, nranks, L, params.model, params.cost, &graph, &counts));
  Grid grid;
  if (params.cost.mode == CostMode::Symmetric) {
    if (params.cost.symmetry.ndims <= 0) {
      grid.d[0] = hosts;
    } else {
      grid.ndims = std::min(params.cost.symmetry.ndims, 3);
      for (int i = 0; i < 3; ++i) grid.d[i] = params.cost.symmetry.d[i];
    }
  }
  Simulator sim(graph, fabric, nodeOfHost, params, grid);
  COLL_TRY(sim.run(out, topLinks));
  out->mode = counts.mode;
  out->ranksEvaluated = counts.ranksEvaluated;
  out->steps = counts.stepsEvaluated;
  out->asymmetricTransfers = counts.asymmetricTransfers;
  return okStatus();
}

void plannerInputsFor(const CollectiveSim& in, const Topology* topo, PlannerInputs* pin) {
  *pin = PlannerInputs{};
  pin->topo = topo;
  pin->haveWindows = true;
  pin->windowHalfBytes = 4u << 20;
  pin->intraHost = LinkCost{in.params.model.link[0].alphaSeconds, 1.0 / in.fabric.intraBytesPerSecond};
  pin->interHost = LinkCost{in.params.model.link[1].alphaSeconds, 1.0 / in.fabric.nicBytesPerSecond};
  pin->nicsPerHost = 0;
  pin->implementationFactors = false;
  pin->reductionOverlaps = true;
  pin->gamma = 1.0 / in.params.model.memoryBytesPerSecond;
  pin->forcedAlgo = in.algo;
  pin->torusDims = in.torusDims;
  finalizePlannerInputs(pin);
}

CollArgs callArgsFor(const CollectiveSim& in) {
  CollArgs args;
  args.kind = in.kind;
  args.count = in.count;
  args.dtype = in.dtype;
  args.op = collSum;
  // Distinct buffers (out of place); the schedules never touch them here.
  static int dummy[2];
  args.sendbuff = &dummy[0];
  args.recvbuff = &dummy[1];
  if (in.kind == CollKind::Broadcast || in.kind == CollKind::Reduce) args.root = 0;
  return args;
}

Status simulateCollective(const CollectiveSim& in, CollectiveSimResult* out) {
  *out = CollectiveSimResult{};
  const int32_t L = in.fabric.ranksPerNode;
  if (in.nranks <= 0) return makeError(collInvalidArgument, "collsim: %d ranks; want at least 1", in.nranks);
  if (L <= 0) return makeError(collInvalidArgument, "collsim: %d ranks per node; want at least 1", L);
  const int32_t hosts = (in.nranks + L - 1) / L;
  const int32_t nodes = in.fabricNodes > 0 ? in.fabricNodes : hosts;
  if (nodes < hosts) {
    return makeError(collInvalidArgument, "collsim: %d hosts of %d ranks do not fit on %d nodes", hosts, L, nodes);
  }
  Fabric fabric;
  COLL_TRY(Fabric::make(in.fabric, nodes, &fabric));
  std::vector<int32_t> nodeOfHost;
  COLL_TRY(placeHosts(in.placement, hosts, nodes, &nodeOfHost));

  UniformTopologies topos(in.nranks, L);
  const Topology topo0 = topos.at(0);
  PlannerInputs pin;
  plannerInputsFor(in, &topo0, &pin);
  COLL_TRY(checkForcedAlgo(pin));
  const CollArgs args = callArgsFor(in);
  PlanChoice choice;
  COLL_TRY(planCollective(pin, args, &choice));
  out->algorithm = describeChoice(choice.algo, choice.options, choice.sliceBytes);
  out->predictedSeconds = choice.predictedSeconds;
  Candidate plan;
  plan.algo = choice.algo;
  plan.options = choice.options;
  plan.sliceBytes = choice.sliceBytes;
  const SimMode mode{in.autoMode, in.exactSteps};
  return simulatePlan(pin, args, plan, fabric, nodeOfHost, in.params, mode, &out->sim, in.topLinks);
}

Status simulatePlan(const PlannerInputs& pin, const CollArgs& args, const Candidate& plan, const Fabric& fabric,
                    const std::vector<int32_t>& nodeOfHost, SimParams params, const SimMode& mode, SimResult* out,
                    int32_t topLinks) {
  *out = SimResult{};
  const int32_t nranks = pin.topo->nranks;
  const int32_t L = fabric.spec().ranksPerNode;
  params.model.link[0].bytesPerSecond = fabric.spec().intraBytesPerSecond;
  params.model.link[1].bytesPerSecond = fabric.spec().nicBytesPerSecond;
  // What the planner derives for the call from the algorithm (rounds, direct's reduce-all size).
  CallShape shape;
  const AlgorithmDescriptor& algo = algorithm(plan.algo);
  if (algo.shapeCall != nullptr && nranks > 1) COLL_TRY(algo.shapeCall(pin, args, &shape));
  // A call planned in rounds runs them one after another: simulate a full round and the rest.
  const uint64_t round = shape.roundElems > 0 && shape.roundElems < args.count ? shape.roundElems : args.count;
  const uint64_t fullRounds = args.count / std::max<uint64_t>(round, 1);
  const uint64_t rest = args.count - fullRounds * round;
  for (int part = 0; part < 2; ++part) {
    const uint64_t count = part == 0 ? round : rest;
    const uint64_t times = part == 0 ? std::max<uint64_t>(fullRounds, 1) : 1;
    if (part == 1 && rest == 0) break;
    CollArgs a = args;
    a.count = count;
    ScheduleBuilder build = [&](const Topology& topo, Schedule* s) {
      const BuildRequest req{topo, a, plan.options, pin.windowHalfBytes, shape.reduceAllBelowBytes};
      algo.build(req, s);
      if (plan.sliceBytes != 0) s->sliceBytes = plan.sliceBytes;
    };
    if (mode.autoMode) {
      const uint64_t est = estimateTotalSteps(build, nranks, L);
      if (est <= mode.exactSteps) {
        params.cost.mode = CostMode::Exact;
        params.cost.maxSteps = std::max(params.cost.maxSteps, mode.exactSteps);
      } else {
        params.cost.mode = CostMode::Symmetric;
        params.cost.symmetry = HostSymmetry{};
        // A torus whose fastest dimension is a host's ranks, or hierarchical's torus over hosts,
        // is symmetric on its grid of hosts; rings and the rest on one cycle of hosts.
        if (plan.algo == AlgoId::Torus && plan.options.torus.d[0] == L && plan.options.torus.ndims >= 2) {
          params.cost.symmetry.ndims = plan.options.torus.ndims - 1;
          for (int i = 1; i < 3; ++i) params.cost.symmetry.d[i - 1] = plan.options.torus.d[i];
        } else if (plan.algo == AlgoId::Hierarchical && plan.options.interHost == AlgoId::Torus) {
          params.cost.symmetry.ndims = plan.options.torus.ndims;
          for (int i = 0; i < 3; ++i) params.cost.symmetry.d[i] = plan.options.torus.d[i];
        }
      }
    }
    SimResult r;
    const Status st = simulateSchedules(build, nranks, fabric, nodeOfHost, params, &r, topLinks);
    if (!st.ok()) {
      // The call takes at least its first round, and that at least as long as it ran.
      if (r.stoppedAt > 0) out->stoppedAt = (part == 0 ? 0.0 : out->seconds) + r.stoppedAt;
      if (params.cost.mode == CostMode::Symmetric) {
        return makeError(st.code(),
                         "%s (%s is not simulated by host symmetry; at %d ranks an exact run holds %llu steps)",
                         st.message().c_str(), describeChoice(plan.algo, plan.options, plan.sliceBytes).c_str(), nranks,
                         static_cast<unsigned long long>(estimateTotalSteps(build, nranks, L)));
      }
      return st;
    }
    if (part == 0) {
      *out = r;
      out->seconds *= static_cast<double>(times);
      for (TierLoad& t : out->tiers) t.bytes *= static_cast<double>(times);
    } else {
      out->seconds += r.seconds;
      out->flows += r.flows;
    }
  }
  return okStatus();
}

}  // namespace coll::sim
