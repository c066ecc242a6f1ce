// Grouped point-to-point: a batch of sends and receives as one schedule of bytes, all in flight
// together. Operations with one peer keep their issue order (the executor's per-peer queues).
#include "algorithms/algorithms.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace coll {

void buildP2pBatch(const Topology& topo, const P2pOp* ops, size_t nops, Schedule* out, const P2pAlias* aliases,
                   size_t naliases) {
  Schedule& s = *out;
  s.begin("p2p", collUint8, collSum);
  s.steps.reserve(nops);
  // A rank exchanging with itself needs no connection: its k-th send to itself pairs with its
  // k-th receive from itself as a local copy (the ops' order, like any peer's stream).
  std::vector<size_t> selfSends, selfRecvs;
  for (size_t i = 0; i < nops; ++i) {
    if (ops[i].peer != topo.rank) continue;
    (ops[i].send ? selfSends : selfRecvs).push_back(i);
  }
  const size_t selfPairs = std::min(selfSends.size(), selfRecvs.size());
  std::vector<uint8_t> pairedSend(nops, 0);
  for (size_t k = 0; k < selfPairs; ++k) pairedSend[selfSends[k]] = 1;
  // Step index of every op that becomes a transport step (known up front, so a receive can name
  // a send issued after it).
  std::vector<int32_t> stepOf(nops, -1);
  {
    size_t seen = 0;
    int32_t next = 0;
    for (size_t i = 0; i < nops; ++i) {
      const bool selfCopy = ops[i].peer == topo.rank && !ops[i].send && seen < selfPairs;
      if (ops[i].peer == topo.rank && !ops[i].send) seen++;
      if (ops[i].peer == topo.rank && ops[i].send && pairedSend[i]) continue;
      if (!selfCopy) stepOf[i] = next;
      next++;
    }
  }
  size_t selfRecvSeen = 0;
  for (size_t i = 0; i < nops; ++i) {
    const P2pOp& op = ops[i];
    const int32_t index = static_cast<int32_t>(i);
    if (op.peer == topo.rank) {
      if (op.send) {
        // A paired self send is the source of its receive's copy; an unpaired one goes to the
        // transport like any send (and waits there, as NCCL's would, for a matching receive).
        if (pairedSend[i]) continue;
      } else if (selfRecvSeen < selfPairs) {
        const P2pOp& from = ops[selfSends[selfRecvSeen]];
        Step c;
        c.kind = StepKind::Copy;
        c.src = extraAt(static_cast<int32_t>(selfSends[selfRecvSeen]), 0);
        c.dst = extraAt(index, 0);
        c.count = std::min(from.bytes, op.bytes);
        s.addStep(c);
        ++selfRecvSeen;
        continue;
      }
    }
    Step st;
    st.kind = op.send ? StepKind::Send : StepKind::Recv;
    st.peer = op.peer;
    if (op.send) st.src = extraAt(index, 0);
    else st.dst = extraAt(index, 0);
    st.count = op.bytes;
    const int32_t step = s.addStep(st);
    for (size_t a = 0; a < naliases && !op.send; ++a) {
      if (aliases[a].recvOp != index || aliases[a].sendOp < 0 || stepOf[aliases[a].sendOp] < 0) continue;
      const int32_t sendStep = stepOf[aliases[a].sendOp];
      s.addDep(step, aliases[a].sameStart ? stepDep(sendStep) : wholeStepDep(sendStep));
    }
  }
  s.finalizePeers();
}

}  // namespace coll
