// Schedule building helpers.
#include "src/schedule/schedule.h"

#include <algorithm>

namespace coll {

const char* stepKindName(StepKind k) {
  switch (k) {
    case StepKind::Send: return "Send";
    case StepKind::Recv: return "Recv";
    case StepKind::RecvReduce: return "RecvReduce";
    case StepKind::Copy: return "Copy";
    case StepKind::Reduce: return "Reduce";
    case StepKind::Divide: return "Divide";
    case StepKind::Widen: return "Widen";
    case StepKind::Quantize: return "Quantize";
    case StepKind::Dequantize: return "Dequantize";
    case StepKind::DequantAccumulate: return "DequantAccumulate";
  }
  return "?";
}

size_t dataTypeSize(collDataType_t dtype) {
  switch (dtype) {
    case collInt8:
    case collUint8:
    case collFloat8e4m3:
    case collFloat8e5m2: return 1;
    case collFloat16:
    case collBfloat16: return 2;
    case collInt32:
    case collUint32:
    case collFloat32: return 4;
    case collInt64:
    case collUint64:
    case collFloat64: return 8;
    default: return 0;
  }
}

void Schedule::clear() {
  steps.clear();
  deps.clear();
  srcs.clear();
  peers.clear();
  scratchBytes = 0;
  windowBytes = 0;
  publishSlots = 0;
  usesWindows = false;
  divisor = 1;
  quantBlock = 0;
  sliceBytes = 0;
  algorithm = "";
  version++;
}

void Schedule::begin(const char* name, collDataType_t type, collRedOp_t redOp, uint64_t avgDivisor) {
  clear();
  algorithm = name;
  dtype = type;
  op = redOp == collAvg ? collSum : redOp;
  divisor = redOp == collAvg ? avgDivisor : 1;
}

int32_t Schedule::addStep(const Step& step) {
  Step s = step;
  s.depBegin = static_cast<uint32_t>(deps.size());
  s.ndeps = 0;
  steps.push_back(s);
  return static_cast<int32_t>(steps.size() - 1);
}

void Schedule::addDep(int32_t stepIndex, const Dep& dep) {
  // Dependencies of a step are contiguous: they must be added right after the step.
  Step& s = steps[stepIndex];
  deps.push_back(dep);
  s.ndeps++;
}

int32_t Schedule::addReduce(const BufRef& dst, const BufRef* sources, uint32_t nsources, uint64_t count) {
  Step s;
  s.kind = StepKind::Reduce;
  s.dst = dst;
  s.count = count;
  s.srcBegin = static_cast<uint32_t>(srcs.size());
  s.nsrcs = nsources;
  srcs.insert(srcs.end(), sources, sources + nsources);
  return addStep(s);
}

int32_t Schedule::addJoin(int32_t firstStep) {
  // A one-element copy onto itself: the executor skips the memcpy (source == destination) but
  // completes the step only when its dependencies have.
  Step j;
  j.kind = StepKind::Copy;
  j.src = scratchAt(0);
  j.dst = scratchAt(0);
  j.count = 1;
  const int32_t last = static_cast<int32_t>(steps.size());
  const int32_t index = addStep(j);
  for (int32_t k = std::max(firstStep, 0); k < last; ++k) {
    if (steps[k].count > 0) addDep(index, wholeStepDep(k));
  }
  return index;
}

void Schedule::addSelfCopy(uint64_t count) {
  if (count == 0) return;
  Step c;
  c.kind = StepKind::Copy;
  c.src = sendAt(0);
  c.dst = recvAt(0);
  c.count = count;
  addStep(c);
}

void Schedule::append(const Schedule& part, int32_t sendExtra, int32_t recvExtra) {
  const uint64_t scratchBase = roundUp(scratchBytes, kAppendAlign);
  const uint64_t windowBase = roundUp(windowBytes, kAppendAlign);
  const int32_t stepBase = static_cast<int32_t>(steps.size());
  const int32_t slotBase = publishSlots;
  auto remap = [&](BufRef r) {
    switch (r.kind) {
      case BufKind::Send: return extraAt(sendExtra, r.offset);
      case BufKind::Recv: return extraAt(recvExtra, r.offset);
      case BufKind::Scratch: r.offset += scratchBase; return r;
      case BufKind::Window: r.offset += windowBase; return r;
      case BufKind::Extra: break;     // parts are single calls: they name no extra buffers
      case BufKind::Residual: break;  // compressed calls are never fused
    }
    return r;
  };
  for (const Step& src : part.steps) {
    Step st = src;
    st.src = remap(src.src);
    st.dst = remap(src.dst);
    st.srcBegin = static_cast<uint32_t>(srcs.size());
    for (uint32_t k = 0; k < src.nsrcs; ++k) srcs.push_back(remap(part.srcs[src.srcBegin + k]));
    if (st.publishSlot >= 0) st.publishSlot += slotBase;
    const int32_t index = addStep(st);
    for (uint32_t k = 0; k < src.ndeps; ++k) {
      Dep d = part.deps[src.depBegin + k];
      if (d.kind == DepKind::Step) d.step += stepBase;
      if (d.kind == DepKind::PeerStep) d.slot += slotBase;
      addDep(index, d);
    }
  }
  if (part.scratchBytes > 0) scratchBytes = scratchBase + part.scratchBytes;
  if (part.usesWindows) windowBytes = windowBase + part.windowBytes;
  publishSlots += part.publishSlots;
  usesWindows = usesWindows || part.usesWindows;
}

void Schedule::renameRanks(const std::vector<int32_t>& rankOf) {
  auto rename = [&](int32_t r) { return r >= 0 && static_cast<size_t>(r) < rankOf.size() ? rankOf[r] : r; };
  auto renameBuf = [&](BufRef* b) {
    if (b->kind == BufKind::Window) b->owner = rename(b->owner);
  };
  for (Step& s : steps) {
    if (s.kind == StepKind::Send || s.kind == StepKind::Recv || s.kind == StepKind::RecvReduce) s.peer = rename(s.peer);
    renameBuf(&s.src);
    renameBuf(&s.dst);
    renameBuf(&s.aux);
  }
  for (BufRef& b : srcs) renameBuf(&b);
  for (Dep& d : deps) {
    if (d.kind == DepKind::PeerStep || d.kind == DepKind::PeerCall) d.peer = rename(d.peer);
  }
  for (int32_t& p : peers) p = rename(p);
}

void Schedule::finalizePeers() {
  peers.clear();
  for (const Step& s : steps) {
    if (s.kind == StepKind::Send || s.kind == StepKind::Recv || s.kind == StepKind::RecvReduce) {
      if (std::find(peers.begin(), peers.end(), s.peer) == peers.end()) peers.push_back(s.peer);
    }
  }
}

}  // namespace coll
