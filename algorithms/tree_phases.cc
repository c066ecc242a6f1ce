// Tree and recursive All-Reduce: the double binary tree, recursive doubling and Rabenseifner
// phases over a rank group, the full builders made of them (NCCL's tree shape over hosts), and
// the three algorithms' descriptors (the tree's also serve Broadcast and Reduce, binomial).
#include <cstdint>
#include <vector>

#include "algorithms/phases.h"
#include "algorithms/registry.h"

namespace coll {

namespace {

// A step whose element i makes element `offset + i` of it final; step -1 = nothing to wait for.
struct Ready {
  int32_t step = -1;
  uint64_t offset = 0;
};

// Appends a step waiting for the gate (whole) and for each `ready` that names a step (per slice).
int32_t addGated(Schedule* s, const Step& st, int32_t gate, Ready a = {}, Ready b = {}) {
  const int32_t i = s->addStep(st);
  if (gate >= 0) s->addDep(i, wholeStepDep(gate));
  if (a.step >= 0) s->addDep(i, stepDep(a.step, a.offset));
  if (b.step >= 0) s->addDep(i, stepDep(b.step, b.offset));
  return i;
}

Step transfer(StepKind kind, int32_t peer, BufRef src, BufRef dst, uint64_t count) {
  Step st;
  st.kind = kind;
  st.peer = peer;
  st.src = src;
  st.dst = dst;
  st.count = count;
  return st;
}

Step local(StepKind kind, BufRef src, BufRef dst, uint64_t count) { return transfer(kind, -1, src, dst, count); }

int64_t highestPowerOfTwoAtMost(int64_t n) {
  int64_t p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

Ready copyAlone(const PhaseSpan& span, int32_t gate, Ready in, bool divide, Schedule* s) {
  return Ready{addOwnResult(span, gate, divide, s, in.step, in.offset).ready};
}

// ---- binary trees

struct TreeNode {
  int32_t parent = -1;
  int32_t child[2] = {-1, -1};  // in reduction order
};

// In-order binary tree over positions 0..n-1, in 1-based terms x = position + 1: node x has height
// ctz(x), its left child is x - 2^(h-1) and its right child x + 2^k for the largest k < h that
// stays <= n; the root is the largest power of two <= n. Leaves are exactly the odd x (even
// positions), which is what makes the complementary tree below work. Depth floor(log2 n).
void treeChildren(int64_t n, int64_t x, int64_t* left, int64_t* right) {
  *left = *right = 0;
  if (x & 1) return;
  int h = 0;
  while (((x >> h) & 1) == 0) ++h;
  *left = x - (int64_t{1} << (h - 1));
  for (int k = h - 1; k >= 0; --k) {
    if (x + (int64_t{1} << k) <= n) {
      *right = x + (int64_t{1} << k);
      break;
    }
  }
}

TreeNode inOrderTreeNode(int64_t n, int64_t pos) {
  TreeNode t;
  const int64_t x = pos + 1;
  int64_t l = 0, r = 0;
  treeChildren(n, x, &l, &r);
  t.child[0] = static_cast<int32_t>(l - 1);
  t.child[1] = static_cast<int32_t>(r - 1);
  // Descend from the root: O(log n), no per-rank O(n) table.
  int64_t cur = highestPowerOfTwoAtMost(n);
  while (cur != x) {
    treeChildren(n, cur, &l, &r);
    const int64_t next = x < cur ? l : r;
    if (next == x) t.parent = static_cast<int32_t>(cur - 1);
    cur = next;
  }
  return t;
}

// Member m's position in tree t, and back. Tree 1 mirrors tree 0 (even n) or shifts it by one
// (odd n): either way a member interior (odd position) in tree 0 sits at an even position, a
// leaf, in tree 1, so every member forwards data for at most one tree.
int64_t treePosition(int64_t n, int t, int64_t m) {
  if (t == 0) return m;
  return n % 2 == 0 ? n - 1 - m : (m + 1) % n;
}
int64_t treeMember(int64_t n, int t, int64_t pos) {
  if (t == 0) return pos;
  return n % 2 == 0 ? n - 1 - pos : (pos + n - 1) % n;
}

// Member m's parent and children (member indices, -1 none) in tree t of the double binary tree.
TreeNode doubleTreeNode(int64_t n, int t, int64_t m) {
  TreeNode node = inOrderTreeNode(n, treePosition(n, t, m));
  auto member = [&](int32_t pos) { return pos < 0 ? -1 : static_cast<int32_t>(treeMember(n, t, pos)); };
  node.parent = member(node.parent);
  node.child[0] = member(node.child[0]);
  node.child[1] = member(node.child[1]);
  return node;
}

struct TreeResult {
  Ready ready[2];  // per half: out is final (per slice) from this step
};

// The double binary tree over g, with this member's `in` readable per slice from `in` (span
// element i = element in.offset + i of that step; step -1: readable at the gate). Steps of both
// trees' reductions come before both trees' broadcasts: every per-peer stream then carries
// reduce traffic before broadcast traffic, which both ends agree on and which no reduction can
// wait behind, so the trees run concurrently on links they share without deadlock.
TreeResult addDoubleTree(const RankGroup& g, const PhaseSpan& span, int32_t gate, Ready in, bool divide, Schedule* s) {
  TreeResult res;
  const int32_t n = g.size();
  if (n == 1) {
    Ready r = copyAlone(span, gate, in, divide, s);
    res.ready[0] = r;
    res.ready[1] = Ready{r.step, span.count / 2};
    return res;
  }
  const uint64_t half[3] = {0, span.count / 2, span.count};
  TreeNode node[2];
  int32_t upSend[2] = {-1, -1};
  for (int t = 0; t < 2; ++t) {
    node[t] = doubleTreeNode(n, t, g.me);
    const uint64_t count = half[t + 1] - half[t];
    if (count == 0) continue;
    const PhaseSpan sub = subSpan(span, half[t], count);
    const Ready inHalf{in.step, in.offset + half[t]};
    Ready cur;  // out holds this member's partial sum (per slice) from this step
    for (int32_t c : node[t].child) {
      if (c < 0) continue;
      Step rr = transfer(StepKind::RecvReduce, g.ranks[c], cur.step < 0 ? sub.in : sub.out, sub.out, count);
      cur = Ready{addGated(s, rr, gate, cur.step < 0 ? inHalf : cur)};
    }
    if (node[t].parent >= 0) {
      Step up = transfer(StepKind::Send, g.ranks[node[t].parent], cur.step < 0 ? sub.in : sub.out, {}, count);
      upSend[t] = addGated(s, up, gate, cur.step < 0 ? inHalf : cur);
    } else {
      // The root (n >= 2 gives it a child, so cur is a step): its result is final here.
      if (divide) cur = Ready{addGated(s, local(StepKind::Divide, sub.out, sub.out, count), gate, cur)};
      res.ready[t] = cur;
    }
  }
  for (int t = 0; t < 2; ++t) {
    const uint64_t count = half[t + 1] - half[t];
    if (count == 0) continue;
    const PhaseSpan sub = subSpan(span, half[t], count);
    if (node[t].parent >= 0) {
      // Overwrites out only where the send to the parent has read it (in may be out).
      Step down = transfer(StepKind::Recv, g.ranks[node[t].parent], {}, sub.out, count);
      res.ready[t] = Ready{addGated(s, down, gate, Ready{upSend[t]})};
    }
    for (int32_t c : node[t].child) {
      if (c < 0) continue;
      addGated(s, transfer(StepKind::Send, g.ranks[c], sub.out, {}, count), gate, res.ready[t]);
    }
  }
  return res;
}

// ---- recursive doubling / halving

// Non-powers of two: the first 2r members (r = n - p') pair up, the even one handing its vector
// to the odd one, which joins the p' core members. Core index c <-> member.
struct CoreLayout {
  int32_t n = 0, pp = 0, r = 0;
  int32_t member(int32_t c) const { return c < r ? 2 * c + 1 : c + r; }
  // -1: a member outside the core (an even member of a pair).
  int32_t core(int32_t m) const { return m < 2 * r ? (m % 2 == 1 ? m / 2 : -1) : m - r; }
};

CoreLayout coreLayout(int32_t n) {
  CoreLayout l;
  l.n = n;
  l.pp = static_cast<int32_t>(highestPowerOfTwoAtMost(n));
  l.r = n - l.pp;
  return l;
}

// The even member of a pair: its vector goes to the odd one, the result comes back.
void addOutsideCore(const RankGroup& g, const PhaseSpan& span, int32_t gate, Schedule* s) {
  const int32_t partner = g.ranks[g.me + 1];
  const int32_t snd = addGated(s, transfer(StepKind::Send, partner, span.in, {}, span.count), gate);
  addGated(s, transfer(StepKind::Recv, partner, {}, span.out, span.count), gate, Ready{snd});
}

// The odd member of a pair folds its partner's vector into out; returns the step (or none).
Ready addPairFold(const RankGroup& g, const CoreLayout& l, const PhaseSpan& span, int32_t gate, Schedule* s) {
  if (g.me >= 2 * l.r) return {};
  Step rr = transfer(StepKind::RecvReduce, g.ranks[g.me - 1], span.in, span.out, span.count);
  return Ready{addGated(s, rr, gate)};
}

}  // namespace

void addDoubleBinaryTreeAllReduce(const RankGroup& g, const PhaseSpan& span, int32_t gate, bool divide, Schedule* s) {
  if (span.count == 0) return;
  (void)addDoubleTree(g, span, gate, Ready{}, divide, s);
}

void addRecursiveDoublingAllReduce(const RankGroup& g, const PhaseSpan& span, int32_t gate, bool divide, Schedule* s) {
  if (span.count == 0) return;
  const CoreLayout l = coreLayout(g.size());
  if (l.n == 1) {
    (void)copyAlone(span, gate, Ready{}, divide, s);
    return;
  }
  const int32_t c = l.core(g.me);
  if (c < 0) {
    addOutsideCore(g, span, gate, s);
    return;
  }
  Ready cur = addPairFold(g, l, span, gate, s);
  for (int32_t bit = 1; bit < l.pp; bit <<= 1) {
    const int32_t peer = g.ranks[l.member(c ^ bit)];
    const BufRef src = cur.step < 0 ? span.in : span.out;
    const int32_t snd = addGated(s, transfer(StepKind::Send, peer, src, {}, span.count), gate, cur);
    // Both members compute a op b from the same two vectors (commutative: the same bits), and
    // write out[i] only once the send has read it (in may be out).
    Step rr = transfer(StepKind::RecvReduce, peer, src, span.out, span.count);
    cur = Ready{addGated(s, rr, gate, Ready{snd})};
  }
  if (divide) cur = Ready{addGated(s, local(StepKind::Divide, span.out, span.out, span.count), gate, cur)};
  if (g.me < 2 * l.r) addGated(s, transfer(StepKind::Send, g.ranks[g.me - 1], span.out, {}, span.count), gate, cur);
}

void addRabenseifnerAllReduce(const RankGroup& g, const PhaseSpan& span, int32_t gate, bool divide, Schedule* s) {
  if (span.count == 0) return;
  const CoreLayout l = coreLayout(g.size());
  if (l.n == 1) {
    (void)copyAlone(span, gate, Ready{}, divide, s);
    return;
  }
  const int32_t c = l.core(g.me);
  if (c < 0) {
    addOutsideCore(g, span, gate, s);
    return;
  }
  // The span is cut into p' parts; ranges below are in parts [lo, hi).
  auto first = [&](int32_t part) { return partStart(span.count, l.pp, part); };
  int levels = 0;
  while ((1 << levels) < l.pp) ++levels;

  // Recursive halving: at mask m the current range (aligned block of 2m parts holding c) splits;
  // c keeps the half holding c, sends the other half to c ^ m. Ends with part c fully reduced.
  Ready cur = addPairFold(g, l, span, gate, s);
  uint64_t curFirst = 0;  // element of the span where `cur` starts
  std::vector<int32_t> halvingSend(static_cast<size_t>(levels), -1);
  int32_t lo = 0, hi = l.pp;
  for (int level = levels - 1; level >= 0; --level) {
    const int32_t mask = 1 << level;
    const int32_t mid = lo + mask;
    const bool upper = (c & mask) != 0;
    const int32_t keepLo = upper ? mid : lo, keepHi = upper ? hi : mid;
    const int32_t giveLo = upper ? lo : mid, giveHi = upper ? mid : hi;
    const int32_t peer = g.ranks[l.member(c ^ mask)];
    const BufRef src = cur.step < 0 ? span.in : span.out;
    const uint64_t give = first(giveLo), giveCount = first(giveHi) - give;
    if (giveCount > 0) {
      Step snd = transfer(StepKind::Send, peer, offsetBy(src, give * span.es), {}, giveCount);
      halvingSend[static_cast<size_t>(level)] =
          addGated(s, snd, gate, cur.step < 0 ? Ready{} : Ready{cur.step, give - curFirst});
    }
    const uint64_t keep = first(keepLo), keepCount = first(keepHi) - keep;
    if (keepCount > 0) {
      Step rr = transfer(StepKind::RecvReduce, peer, offsetBy(src, keep * span.es), offsetBy(span.out, keep * span.es),
                         keepCount);
      cur = Ready{addGated(s, rr, gate, cur.step < 0 ? Ready{} : Ready{cur.step, keep - curFirst})};
      curFirst = keep;
    }
    lo = keepLo;
    hi = keepHi;
  }

  // What out holds, as blocks of parts and the step that finished each. Part c first.
  struct Block {
    int32_t lo, hi;
    int32_t step;
  };
  std::vector<Block> blocks;
  blocks.reserve(static_cast<size_t>(levels) + 1);
  const uint64_t own = first(c), ownCount = first(c + 1) - own;
  if (ownCount > 0 && divide) {
    const BufRef part = offsetBy(span.out, own * span.es);
    cur = Ready{addGated(s, local(StepKind::Divide, part, part, ownCount), gate, cur)};
  }
  blocks.push_back(Block{c, c + 1, ownCount > 0 ? cur.step : -1});
  // A send over parts [lo, hi) streams per slice from the block at its start; the others are
  // older (received in earlier steps) and are waited for whole, since a dependency cannot start
  // part way into the dependent step.
  auto addRangeSend = [&](int32_t peer, int32_t rlo, int32_t rhi) {
    const uint64_t start = first(rlo), count = first(rhi) - start;
    if (count == 0) return;
    Step snd = transfer(StepKind::Send, peer, offsetBy(span.out, start * span.es), {}, count);
    const int32_t i = addGated(s, snd, gate);
    for (const Block& b : blocks) {
      if (b.step < 0 || b.hi <= rlo || b.lo >= rhi) continue;
      s->addDep(i, b.lo == rlo ? stepDep(b.step) : wholeStepDep(b.step));
    }
  };

  // Recursive doubling all-gather: at mask m, c sends its block (m parts) to c ^ m and receives
  // the partner's block, the half c sent it while halving (written only once that send read it).
  for (int level = 0; level < levels; ++level) {
    const int32_t mask = 1 << level;
    const int32_t peer = g.ranks[l.member(c ^ mask)];
    const int32_t mineLo = c & ~(mask - 1);
    const int32_t theirsLo = (c ^ mask) & ~(mask - 1);
    addRangeSend(peer, mineLo, mineLo + mask);
    const uint64_t start = first(theirsLo), count = first(theirsLo + mask) - start;
    int32_t rv = -1;
    if (count > 0) {
      Step recv = transfer(StepKind::Recv, peer, {}, offsetBy(span.out, start * span.es), count);
      rv = addGated(s, recv, gate, Ready{halvingSend[static_cast<size_t>(level)]});
    }
    blocks.push_back(Block{theirsLo, theirsLo + mask, rv});
  }
  if (g.me < 2 * l.r) addRangeSend(g.ranks[g.me - 1], 0, l.pp);
}

namespace {

using GroupPhase = void (*)(const RankGroup&, const PhaseSpan&, int32_t, bool, Schedule*);

void buildFlat(const char* name, GroupPhase phase, const Topology& topo, const CollArgs& args, Schedule* out) {
  Schedule& s = *out;
  s.begin(name, args.dtype, args.op, static_cast<uint64_t>(topo.nranks));
  if (planAlone(topo, args.count, &s)) return;
  phase(allRanksGroup(topo), PhaseSpan{sendAt(0), recvAt(0), args.count, dataTypeSize(args.dtype)}, -1,
        args.op == collAvg, &s);
  s.finalizePeers();
}

}  // namespace

void buildRecursiveDoublingAllReduce(const Topology& topo, const CollArgs& args, Schedule* out) {
  buildFlat("recdoubling", addRecursiveDoublingAllReduce, topo, args, out);
}

void buildRabenseifnerAllReduce(const Topology& topo, const CollArgs& args, Schedule* out) {
  buildFlat("rabenseifner", addRabenseifnerAllReduce, topo, args, out);
}

void buildDoubleBinaryTreeAllReduce(const Topology& topo, const CollArgs& args, Schedule* out) {
  if (topo.nhosts <= 1) {
    buildFlat("tree", addDoubleBinaryTreeAllReduce, topo, args, out);
    return;
  }
  Schedule* s = out;
  s->begin("tree", args.dtype, args.op, static_cast<uint64_t>(topo.nranks));
  const uint64_t count = args.count;
  const size_t es = dataTypeSize(args.dtype);
  if (count == 0) {
    s->finalizePeers();
    return;
  }
  const bool divide = args.op == collAvg;
  // One member per host, its first local rank, in host order.
  RankGroup heads;
  heads.ranks.assign(static_cast<size_t>(topo.nhosts), -1);
  for (int32_t r = 0; r < topo.nranks; ++r) {
    int32_t& head = heads.ranks[static_cast<size_t>(topo.hostOfRank[r])];
    if (head < 0) head = r;
  }
  heads.me = topo.hostOfRank[topo.rank];
  const std::vector<int32_t>& chain = topo.localRanks;
  const int32_t l = topo.localRank(), lsize = topo.localSize();
  const uint64_t half[3] = {0, count / 2, count};

  // Up the chain: local l folds l+1's partial sum into out and passes it to l-1.
  Ready up;
  if (l + 1 < lsize) {
    up = Ready{addGated(s, transfer(StepKind::RecvReduce, chain[l + 1], sendAt(0), recvAt(0), count), -1)};
  }
  const BufRef partial = up.step < 0 ? sendAt(0) : recvAt(0);
  Ready ready[2];
  if (l > 0) {
    const int32_t snd = addGated(s, transfer(StepKind::Send, chain[l - 1], partial, {}, count), -1, up);
    for (int h = 0; h < 2; ++h) {
      const uint64_t n = half[h + 1] - half[h];
      if (n == 0) continue;
      Step down = transfer(StepKind::Recv, chain[l - 1], {}, recvAt(half[h] * es), n);
      ready[h] = Ready{addGated(s, down, -1, Ready{snd, half[h]})};
    }
  } else {
    TreeResult t = addDoubleTree(heads, PhaseSpan{partial, recvAt(0), count, es}, -1, up, divide, s);
    ready[0] = t.ready[0];
    ready[1] = t.ready[1];
  }
  // Down the chain, each tree's half as soon as it is final.
  if (l + 1 < lsize) {
    for (int h = 0; h < 2; ++h) {
      const uint64_t n = half[h + 1] - half[h];
      if (n == 0) continue;
      addGated(s, transfer(StepKind::Send, chain[l + 1], recvAt(half[h] * es), {}, n), -1, ready[h]);
    }
  }
  s->finalizePeers();
}

namespace {

Candidate treeModel(const ModelInputs& in, CollKind kind, uint64_t bytes, uint64_t /*count*/) {
  const PlannerShape& sh = in.shape;
  const Topology& t = *in.topo;
  const double n = static_cast<double>(bytes);
  const double g = in.gamma;
  Candidate c;
  if (kind == CollKind::Broadcast || kind == CollKind::Reduce) {
    const double red = kind == CollKind::Reduce ? g : 0;
    for (const StepLoad& l : sh.binomial) c.seconds += stepCost(in, l, n) + n * red;
    return c;
  }
  if (kind != CollKind::AllReduce) return c;
  // Two complementary trees, half the data each: per chunk a busy node sends and receives
  // twice the chunk (up, and down to two children); inside a host a chain does the same.
  // The first chunk goes up and down the tree over the hosts (or ranks) and the chains.
  const bool hosts = t.nhosts > 1;
  const int64_t treeHops = sh.treeHeight, chainHops = hosts ? sh.maxLocal - 1 : 0;
  const LinkCost& l = hosts ? in.interHost : in.intraHost;
  // An interior node's two children reach it through its one link, one message after the
  // other (and it sends to both on the way down), as ranks sharing a NIC do (interAlphas).
  const double fanIn = treeBusyFactor(hosts ? t.nhosts : t.nranks);
  c.seconds = streamedPipeline(
      in, n,
      [&](double s) {
        // Each tree carries half of every chunk up and down.
        const double h = s / 2;
        return 2.0 * (treeHops * fanIn * (l.alpha + h * l.beta) +
                      chainHops * (in.intraHost.alpha + h * in.intraHost.beta)) +
               static_cast<double>(treeHops + chainHops) * h * g;
      },
      [&](double s) {
        double ports = treeBusyFactor(hosts ? t.nhosts : t.nranks) * s * l.beta;
        if (chainHops > 0) ports = std::max(ports, 2 * s * in.intraHost.beta);
        return in.reductionOverlaps ? std::max(ports, s * g) : ports + s * g;
      },
      &c.sliceBytes);
  return c;
}

void treeBuild(const BuildRequest& r, Schedule* out) {
  switch (r.args.kind) {
    case CollKind::Broadcast: buildTreeBroadcast(r.topo, r.args, out); break;
    case CollKind::Reduce: buildTreeReduce(r.topo, r.args, out); break;
    default: buildDoubleBinaryTreeAllReduce(r.topo, r.args, out); break;
  }
}

// The first 2(p - p') ranks folding into the p' core members before and after (p' < p).
double foldTime(const ModelInputs& in, double n) {
  const PlannerShape& sh = in.shape;
  return sh.core < in.topo->nranks ? streamedStep(in, sh.fold, n, 1) + streamedStep(in, sh.fold, n, 0) : 0;
}

Candidate recursiveDoublingModel(const ModelInputs& in, CollKind kind, uint64_t bytes, uint64_t /*count*/) {
  Candidate c;
  if (kind != CollKind::AllReduce) return c;
  const double n = static_cast<double>(bytes);
  double t = foldTime(in, n);
  for (const StepLoad& l : in.shape.pairSteps) t += streamedStep(in, l, n, 1);
  c.seconds = t;
  return c;
}

void recursiveDoublingBuild(const BuildRequest& r, Schedule* out) {
  buildRecursiveDoublingAllReduce(r.topo, r.args, out);
}

// The share of the p' core members that send in Rabenseifner's round at mask m (halving and
// doubling alike): a member sends an aligned block of m of the p' parts, and with fewer elements
// than parts only the first `count` parts hold any (partStart), so only the members whose block
// starts below `count` have something to send: min(p', m * ceil(count / m)) of them.
double rabenseifnerSenders(uint64_t count, int64_t core, int64_t mask) {
  if (count == 0 || static_cast<int64_t>(count) >= core) return 1.0;
  const int64_t blocks = (static_cast<int64_t>(count) + mask - 1) / mask;
  return static_cast<double>(std::min(core, mask * blocks)) / static_cast<double>(core);
}

Candidate rabenseifnerModel(const ModelInputs& in, CollKind kind, uint64_t bytes, uint64_t count) {
  const PlannerShape& sh = in.shape;
  Candidate c;
  if (kind != CollKind::AllReduce) return c;
  const double n = static_cast<double>(bytes);
  double t = foldTime(in, n);
  // Halving starts with the farthest partner and half the vector (doubling ends there).
  double part = n;
  for (size_t k = sh.pairSteps.size(); k-- > 0;) {
    part /= 2;
    const StepLoad l = withSendingShare(sh.pairSteps[k], rabenseifnerSenders(count, sh.core, int64_t{1} << k));
    t += streamedStep(in, l, part, 1) + streamedStep(in, l, part, 0);
  }
  c.seconds = t;
  return c;
}

void rabenseifnerBuild(const BuildRequest& r, Schedule* out) { buildRabenseifnerAllReduce(r.topo, r.args, out); }

}  // namespace

extern const AlgorithmDescriptor kTreeAlgorithm{
    .name = "tree",
    .serves = collBit(CollKind::AllReduce) | collBit(CollKind::Broadcast) | collBit(CollKind::Reduce),
    .applies = nullptr,
    .predict = treeModel,
    .allReduceFactor = {},
    .build = treeBuild,
};

extern const AlgorithmDescriptor kRecursiveDoublingAlgorithm{
    .name = "recdoubling",
    .serves = collBit(CollKind::AllReduce),
    .applies = nullptr,
    .predict = recursiveDoublingModel,
    .allReduceFactor = {},
    .build = recursiveDoublingBuild,
};

// Rabenseifner ran 1.5x its model on the bytes everywhere it was measured (2-core VM, 8 ranks,
// 4 MiB and 16 MiB, one host and emulated 2x4 and 4x2 hosts at 1 Gbit/s), and 8-64 B at its
// unscaled model on the emulated 4 x 2 cluster.
extern const AlgorithmDescriptor kRabenseifnerAlgorithm{
    .name = "rabenseifner",
    .serves = collBit(CollKind::AllReduce),
    .applies = nullptr,
    .predict = rabenseifnerModel,
    .allReduceFactor = {1.5, false},
    .build = rabenseifnerBuild,
};

}  // namespace coll
