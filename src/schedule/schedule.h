// Schedule: one rank's ordered steps of a collective, built by an algorithm (algorithms/) as a
// pure function of (rank, topology, call arguments) and run by an executor (src/exec/). No I/O,
// no threads, no globals: this is what lets tests run thousands of ranks in one process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collective/collective.h"
#include "src/base/align.h"

namespace coll {

// Which memory a step reads or writes. Offsets are in bytes from the start of that memory.
enum class BufKind : uint8_t {
  Send,      // the user's send buffer (read only)
  Recv,      // the user's receive buffer
  Scratch,   // per-call scratch of Schedule::scratchBytes, owned by the executor
  Window,    // the host-shared window of local rank `owner` (current half; see HostWindows)
  Extra,     // user buffer number `owner` of ExecBuffers::extra (grouped point-to-point calls)
  Residual,  // the error-feedback buffer of a compressed call (float32 per element; may be absent)
};

struct BufRef {
  BufKind kind = BufKind::Send;
  int32_t owner = -1;   // global rank owning the window (BufKind::Window only)
  uint64_t offset = 0;  // bytes
};

enum class StepKind : uint8_t {
  Send,        // send `count` elements read from src to `peer`
  Recv,        // receive `count` elements from `peer` into dst
  RecvReduce,  // dst = src (op) data received from `peer`; dst may equal src
  Copy,        // dst = src, local
  Reduce,      // dst = op over the `nsrcs` spans srcs[srcBegin ..), in that order, local / windows
  Divide,      // dst = src / divisor (the average of collAvg), local
  // 4-bit compression (src/kernels/quantize.h). Counts of these are in blocks of
  // Schedule::quantBlock elements (Step::elems says how many elements, the last block may be
  // partial); quantized data moves as Send/Recv steps of 8-byte units (Step::unitBytes).
  Widen,              // float32 dst = src (schedule dtype), `elems` elements, counted in blocks
  Quantize,           // dst records = quantize(src [/ divisor] + residual aux), residual updated
  Dequantize,         // dst (schedule dtype) = dequantize(src records)
  DequantAccumulate,  // float32 dst += dequantize(src records)
};

// Step::flags
inline constexpr uint8_t kStepSrcFloat = 1;  // Quantize: src is float32 (not the schedule dtype)
inline constexpr uint8_t kStepDivide = 2;    // Quantize: divide src by Schedule::divisor first (avg)

// What a step waits for. The dependent step may process its element i only when the dependency
// covers element `offset + i` (sliced) or is complete (whole). Dependencies are per slice: data
// streams through a rank instead of being stored and forwarded step by step.
enum class DepKind : uint8_t {
  Step,      // an earlier step of this schedule
  PeerStep,  // a step of local rank `peer`'s schedule for the same call, read from its
             // published progress slot `slot` (only steps with publishSlot >= 0 can be named)
  PeerCall,  // local rank `peer` has completed the call `lag` calls back (window reuse)
};

struct Dep {
  DepKind kind = DepKind::Step;
  bool whole = false;   // wait for completion rather than per element
  int32_t step = -1;    // DepKind::Step: step index
  int32_t peer = -1;    // PeerStep / PeerCall: global rank of a rank on this host
  int32_t slot = -1;    // PeerStep: published progress slot
  uint64_t offset = 0;  // elements: element i of the dependent needs element offset+i done
  uint64_t count = 0;   // PeerStep: the named step's element count (completion = count)
  uint32_t lag = 0;     // PeerCall: 1 = the previous call, 2 = the one before
  // Step, per element, with offset 0: the dependent's first `lead` elements do not need this
  // dependency, and element i >= lead needs element i - lead (a dependency that produces only a
  // later part of the dependent's range; one such dep per part covers a range made in pieces).
  uint64_t lead = 0;
  // Step, per element, between steps that count in different units (quantized blocks and the
  // 8-byte units they travel in): with `done` elements of the dependency complete, the dependent
  // may process done * unitNum / unitDen of its own (rounded down). 0 = the same unit.
  uint32_t unitNum = 0;
  uint32_t unitDen = 0;
};

struct Step {
  StepKind kind = StepKind::Copy;
  int32_t peer = -1;      // Send / Recv / RecvReduce
  BufRef src;             // Send, RecvReduce, Copy, Divide
  BufRef dst;             // Recv, RecvReduce, Copy, Reduce, Divide
  uint64_t count = 0;     // elements
  uint32_t srcBegin = 0;  // Reduce: index into Schedule::srcs
  uint32_t nsrcs = 0;     // Reduce: number of sources
  uint32_t depBegin = 0;  // index into Schedule::deps
  uint32_t ndeps = 0;
  int32_t publishSlot = -1;  // >= 0: progress is published to local peers in this slot
  uint32_t unitBytes = 0;    // Send / Recv: bytes per counted unit (0 = the schedule dtype's size)
  uint8_t flags = 0;         // kStep* bits
  uint64_t elems = 0;        // quantized steps: elements covered
  uint64_t first = 0;        // Quantize: index of the first element in the whole tensor
  BufRef aux;                // Quantize: the residual (BufKind::Residual), or kind Send = none
};

// One rank's steps for one call. Sends to one peer happen in step order, and so do receives
// from one peer: the k-th byte this rank sends to q is the k-th byte q's schedule receives from
// this rank. Builders append with the helpers below; clear() keeps capacity so a reused plan
// does not allocate.
struct Schedule {
  std::vector<Step> steps;
  std::vector<Dep> deps;
  std::vector<BufRef> srcs;    // sources of Reduce steps
  std::vector<int32_t> peers;  // distinct peers of Send/Recv steps (connections to prepare)
  uint64_t scratchBytes = 0;
  uint64_t windowBytes = 0;  // bytes of this rank's window half the schedule uses
  int32_t publishSlots = 0;  // number of published progress slots used
  bool usesWindows = false;
  collDataType_t dtype = collFloat32;
  collRedOp_t op = collSum;    // never collAvg: builders turn it into collSum + Divide steps
  uint64_t divisor = 1;        // for Divide steps
  int32_t quantBlock = 0;      // block size of the quantized steps (0 = none)
  uint64_t sliceBytes = 0;     // executor slice for this plan (the planner's chunk size; 0 = COLL_SLICE_BYTES)
  const char* algorithm = "";  // name, for logs
  uint64_t version = 0;        // bumped by clear(): an Execution prepared for an older version re-prepares

  void clear();
  // clear() and name the schedule. Reducing builders pass their op and the divisor of collAvg
  // (which becomes collSum plus Divide steps); data-moving ones pass collSum (nothing is reduced,
  // but a valid op keeps the executor's checks simple).
  void begin(const char* name, collDataType_t type, collRedOp_t redOp, uint64_t avgDivisor = 1);
  // Append a step; returns its index. Dependencies are added right after with addDep().
  int32_t addStep(const Step& step);
  void addDep(int32_t stepIndex, const Dep& dep);
  // Reduce step with the given sources (in reduction order).
  int32_t addReduce(const BufRef& dst, const BufRef* sources, uint32_t nsources, uint64_t count);
  // A local no-op step that completes once every step in [firstStep, now) has completed: the gate
  // between phases of a composed algorithm (the next phase's steps wait for it instead of each of
  // the previous phase's steps, which also covers write-after-read of shared buffers).
  int32_t addJoin(int32_t firstStep);
  // Fills `peers` from the steps.
  void finalizePeers();
  // Renames every rank the schedule names (Send/Recv peers, window owners, local peers of
  // dependencies, `peers`): rank v becomes rankOf[v]. For a schedule built on a topology whose
  // ranks are a permutation of the real ones (hosts reordered whole), so data moves between the
  // same positions of the order; the order of steps to one peer is kept.
  void renameRanks(const std::vector<int32_t>& rankOf);
  // Appends another call's schedule (same dtype, op and divisor) so both run as one: its send
  // and receive buffers become Extra buffers `sendExtra` / `recvExtra`, its scratch, window
  // bytes, progress slots and step indices move past this schedule's. Every rank fuses the same
  // calls in the same order, so peers' slots and streams line up. Call finalizePeers() after.
  void append(const Schedule& part, int32_t sendExtra, int32_t recvExtra);
  // The window bytes this schedule needs once `part` is appended (its window starts aligned).
  uint64_t windowBytesWith(const Schedule& part) const { return roundUp(windowBytes, kAppendAlign) + part.windowBytes; }
  static constexpr uint64_t kAppendAlign = 64;  // where an appended part's scratch and window start
  // The whole plan of a rank that reduces with nobody: recv = send. The copy stays in in-place
  // plans too (the executor skips it when source and destination coincide), since plans are
  // reused with other pointers.
  void addSelfCopy(uint64_t count);
};

// Helpers for the common shapes.
inline BufRef sendAt(uint64_t offset) { return BufRef{BufKind::Send, -1, offset}; }
inline BufRef recvAt(uint64_t offset) { return BufRef{BufKind::Recv, -1, offset}; }
inline BufRef scratchAt(uint64_t offset) { return BufRef{BufKind::Scratch, -1, offset}; }
inline BufRef windowAt(int32_t owner, uint64_t offset) { return BufRef{BufKind::Window, owner, offset}; }
inline BufRef extraAt(int32_t index, uint64_t offset) { return BufRef{BufKind::Extra, index, offset}; }

inline Dep stepDep(int32_t step, uint64_t offset = 0) {
  Dep d;
  d.kind = DepKind::Step;
  d.step = step;
  d.offset = offset;
  return d;
}
inline Dep stepDepFrom(int32_t step, uint64_t lead) {
  Dep d;
  d.kind = DepKind::Step;
  d.step = step;
  d.lead = lead;
  return d;
}
// Per element across units: the dependency's `den` elements make `num` of the dependent's.
inline Dep unitStepDep(int32_t step, uint32_t num, uint32_t den) {
  Dep d;
  d.kind = DepKind::Step;
  d.step = step;
  d.unitNum = num;
  d.unitDen = den;
  return d;
}
inline Dep wholeStepDep(int32_t step) {
  Dep d;
  d.kind = DepKind::Step;
  d.step = step;
  d.whole = true;
  return d;
}
// Dependencies on a local peer through the host windows: per element on its published step
// (element i needs element offset+i of a `count`-element step), on the whole of it (a marker), or on
// its completed-call counter `lag` calls back.
inline Dep peerStepDep(int32_t peer, int32_t slot, uint64_t offset, uint64_t count) {
  Dep d;
  d.kind = DepKind::PeerStep;
  d.peer = peer;
  d.slot = slot;
  d.offset = offset;
  d.count = count;
  return d;
}
inline Dep peerMarkerDep(int32_t peer, int32_t slot, uint64_t count) {
  Dep d = peerStepDep(peer, slot, 0, count);
  d.whole = true;
  return d;
}
inline Dep peerCallDep(int32_t peer, uint32_t lag) {
  Dep d;
  d.kind = DepKind::PeerCall;
  d.peer = peer;
  d.lag = lag;
  return d;
}

size_t dataTypeSize(collDataType_t dtype);
// "Send", "RecvReduce", ...: a step kind in messages, dumps and traces.
const char* stepKindName(StepKind kind);

}  // namespace coll
