// The verbs test double: an in-tree emulation of the verbs calls the ib transport uses
// (transports/ib/verbs_api.h), with reliable-connected semantics between processes, for testing
// the transport where no RDMA device exists (this machine, CI). It is linked only into tests and
// installed with setVerbsApiForTesting(&verbsTestDouble()); the library always links the real
// libibverbs. It enforces what real HCAs enforce (see tests/ib_double/README.md):
//  - memory registration: lkey/rkey, access flags, bounds; a local SGE outside its region is a
//    local protection error, an RDMA write outside the remote region or without
//    IBV_ACCESS_REMOTE_WRITE is a remote access error (the sender's completion IBV_WC_REM_ACCESS_ERR,
//    both QPs to the error state);
//  - RC QP state machine RESET -> INIT -> RTR -> RTS with the attribute masks libibverbs requires
//    (EINVAL otherwise); posting in the wrong state fails; the error state flushes outstanding work
//    requests with IBV_WC_WR_FLUSH_ERR;
//  - IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM (consumes a posted receive at the target;
//    none posted: receiver-not-ready, retried rnr_retry times, then IBV_WC_RNR_RETRY_EXC_ERR),
//    IBV_WR_SEND / IBV_WR_SEND_WITH_IMM, delivered in order per QP; completions in order per QP;
//  - send-queue depth (max_send_wr: ENOMEM when full), receive-queue depth, CQ depth (a CQ that
//    overflows is an error: IBV_EVENT_CQ_ERR async event and the QPs using it go to error),
//    max_inline_data (IBV_SEND_INLINE above it: EINVAL), unsignaled completions
//    (sq_sig_all = 0 without IBV_SEND_SIGNALED: no completion, the slot freed by a later
//    signaled one);
//  - completion channels and async events with pollable file descriptors;
//  - a request nobody accepts (peer process gone, no such QP, QP not ready, wrong PSN or source)
//    ends in IBV_WC_RETRY_EXC_ERR after (retry_cnt + 1) ACK timeouts, emulated at 1/64 of
//    4.096 us * 2^timeout (1..250 ms each); never a hang.
#pragma once

#include <cstdint>

#include "transports/ib/verbs_api.h"

namespace coll::testing {

// The double's table (one emulated device per process: "verbsdouble0", port 1, RoCE v2 GIDs).
const VerbsApi& verbsTestDouble();

struct VerbsDoubleOptions {
  int devices = 1;         // emulated devices per process ("verbsdouble0", "verbsdouble1", ...)
  bool portActive = true;  // false: ports report IBV_PORT_DOWN
  uint32_t maxInlineData = 220;
  int maxQpWr = 4096;  // device limits reported by queryDevice and enforced at create
  int maxCqe = 65536;
  bool infiniband = false;  // true: ports report the InfiniBand link layer (LID addressing, one
                            // IB GID); false: Ethernet (RoCE v1/v2 GIDs, GRH required)
  // Per device, the lane speed its port reports (ibv_port_attr.active_speed codes: 2 DDR, 4 QDR,
  // 16 FDR, 32 EDR, 64 HDR; 4x width); 0: EDR. Only reported (it weighs multi-rail striping): the
  // double moves every device's bytes as fast as it can.
  uint8_t activeSpeed[8] = {};
};
// Applies to devices opened after the call.
void configureVerbsDouble(const VerbsDoubleOptions& options);

// Injected faults, for the error-path tests. Each applies to this process's double from now on.
enum class VerbsFault {
  None,
  FailNextSend,       // the next posted send work request completes with IBV_WC_RETRY_EXC_ERR
  RemoteAccessError,  // the next RDMA write is answered as if outside the target's region
  PortDown,           // every port of this process goes down: IBV_EVENT_PORT_ERR, QPs to error
  CutWire,            // this process's devices stop answering (connections cut, none accepted):
                      // peers and local QPs see a dead link, IBV_WC_RETRY_EXC_ERR after the retry time
};
// None clears the pending faults and brings ports and wires back up (IBV_EVENT_PORT_ACTIVE).
void injectVerbsFault(VerbsFault fault);
// PortDown or CutWire of one device ("verbsdouble<device>") of this process, already open: a
// rail lost while the others carry on.
void injectVerbsDeviceFault(VerbsFault fault, int device);

}  // namespace coll::testing
