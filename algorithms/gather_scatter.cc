// Linear gather and scatter: the root exchanges every rank's block directly; the others do one
// step. Non-roots never touch the buffer only the root has (recv for gather, send for scatter).
// Also the linear descriptor.
#include "algorithms/algorithms.h"
#include "algorithms/registry.h"

namespace coll {

void buildLinearGather(const Topology& topo, const CollArgs& args, Schedule* out) {
  Schedule& s = *out;
  s.begin("linear", args.dtype, collSum);
  const int32_t p = topo.nranks;
  const int32_t r = topo.rank;
  const int32_t root = args.root;
  const uint64_t blockBytes = args.count * dataTypeSize(args.dtype);
  if (r != root) {
    Step snd;
    snd.kind = StepKind::Send;
    snd.peer = root;
    snd.src = sendAt(0);
    snd.count = args.count;
    s.addStep(snd);
    s.finalizePeers();
    return;
  }
  // In place the input is recv block root and the copy is skipped.
  Step own;
  own.kind = StepKind::Copy;
  own.src = sendAt(0);
  own.dst = recvAt(root * blockBytes);
  own.count = args.count;
  s.addStep(own);
  s.steps.reserve(static_cast<size_t>(p));
  // Starting after the root spreads the order in which concurrent roots are served.
  for (int32_t k = 1; k < p; ++k) {
    const int32_t j = (root + k) % p;
    Step rv;
    rv.kind = StepKind::Recv;
    rv.peer = j;
    rv.dst = recvAt(j * blockBytes);
    rv.count = args.count;
    s.addStep(rv);
  }
  s.finalizePeers();
}

void buildLinearScatter(const Topology& topo, const CollArgs& args, Schedule* out) {
  Schedule& s = *out;
  s.begin("linear", args.dtype, collSum);
  const int32_t p = topo.nranks;
  const int32_t r = topo.rank;
  const int32_t root = args.root;
  const uint64_t blockBytes = args.count * dataTypeSize(args.dtype);
  if (r != root) {
    Step rv;
    rv.kind = StepKind::Recv;
    rv.peer = root;
    rv.dst = recvAt(0);
    rv.count = args.count;
    s.addStep(rv);
    s.finalizePeers();
    return;
  }
  s.steps.reserve(static_cast<size_t>(p));
  for (int32_t k = 1; k < p; ++k) {
    const int32_t j = (root + k) % p;
    Step snd;
    snd.kind = StepKind::Send;
    snd.peer = j;
    snd.src = sendAt(j * blockBytes);
    snd.count = args.count;
    s.addStep(snd);
  }
  // In place recv is send block root and the copy is skipped.
  Step own;
  own.kind = StepKind::Copy;
  own.src = sendAt(root * blockBytes);
  own.dst = recvAt(0);
  own.count = args.count;
  s.addStep(own);
  s.finalizePeers();
}

namespace {

Candidate linearModel(const ModelInputs& in, CollKind /*kind*/, uint64_t bytes, uint64_t /*count*/) {
  const LinkCost& slow = in.topo->singleHost() ? in.intraHost : in.interHost;
  Candidate c;
  c.seconds = (in.topo->nranks - 1) * (slow.alpha + static_cast<double>(bytes) * slow.beta);
  return c;
}

void linearBuild(const BuildRequest& r, Schedule* out) {
  if (r.args.kind == CollKind::Scatter) buildLinearScatter(r.topo, r.args, out);
  else buildLinearGather(r.topo, r.args, out);
}

}  // namespace

extern const AlgorithmDescriptor kLinearAlgorithm{
    .name = "linear",
    .serves = collBit(CollKind::Gather) | collBit(CollKind::Scatter),
    .applies = nullptr,
    .predict = linearModel,
    .allReduceFactor = {},
    .build = linearBuild,
};

}  // namespace coll
