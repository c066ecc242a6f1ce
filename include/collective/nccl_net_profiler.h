/* The events libnccl-net-collective reports through NCCL's profiler callback (net plugin ABI v10
 * and later): each isend and irecv that NCCL gives a profiler handle starts an event when it is
 * posted and ends it when test() finds it done, with an update that says how many bytes the
 * message moved (ncclProfilerNetEventUpdateAndStop). NCCL hands pluginId and extData to the profiler
 * plugin (ncclProfileNetPlugin events, and recordEventState's netPlugin.data for the update), which
 * tells our events by the type bits of pluginId and reads extData as the descriptor below (start)
 * or the state below (update). */
#ifndef COLLECTIVE_NCCL_NET_PROFILER_H_
#define COLLECTIVE_NCCL_NET_PROFILER_H_

#include <stddef.h>
#include <stdint.h>

/* pluginId = COLL_PROFILER_NET_TYPE | COLL_PROFILER_NET_VERSION. NCCL's own plugins use the type
 * values 1 (IB) and 2 (socket) in the same bits (above the low 16). */
#define COLL_PROFILER_NET_TYPE (0x43U << 16)
#define COLL_PROFILER_NET_VERSION 1

enum { collProfileNetSend = 1, collProfileNetRecv = 2 };

typedef struct {
  uint8_t type;  /* collProfileNetSend or collProfileNetRecv */
  int device;    /* the plugin's device index the connection was made on */
  int tag;       /* NCCL's tag */
  size_t length; /* a send's bytes; a receive's buffer size */
} collProfilerNetDescr_v1_t;

typedef struct {
  size_t bytes; /* what the message moved: a send's bytes, a receive's actual size (at most its buffer) */
} collProfilerNetState_v1_t;

#endif /* COLLECTIVE_NCCL_NET_PROFILER_H_ */
