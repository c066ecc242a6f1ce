// The verbs calls the ibverbs transport makes, as one table. The library's table calls the real
// libibverbs (verbs_api.cc); tests substitute the verbs test double (tests/ib_double) to run the
// transport's logic where no RDMA device exists. Nothing in the transport calls ibv_* directly.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>

namespace coll {

struct VerbsApi {
  const char* name;  // "libibverbs" or "verbs test double": appears in logs

  ibv_device** (*getDeviceList)(int* num);
  void (*freeDeviceList)(ibv_device** list);
  const char* (*getDeviceName)(ibv_device* device);
  uint64_t (*getDeviceGuid)(ibv_device* device);  // network byte order, as libibverbs returns it
  ibv_context* (*openDevice)(ibv_device* device);
  int (*closeDevice)(ibv_context* context);
  int (*queryDevice)(ibv_context* context, ibv_device_attr* attr);
  int (*queryPort)(ibv_context* context, uint8_t port, ibv_port_attr* attr);
  int (*queryGid)(ibv_context* context, uint8_t port, int index, ibv_gid* gid);
  // GID type of an entry (IBV_GID_TYPE_IB, IBV_GID_TYPE_ROCE_V1, IBV_GID_TYPE_ROCE_V2); nonzero
  // return when the entry is empty or unreadable.
  int (*queryGidType)(ibv_context* context, uint8_t port, int index, ibv_gid_type* type);

  ibv_pd* (*allocPd)(ibv_context* context);
  int (*deallocPd)(ibv_pd* pd);
  ibv_mr* (*regMr)(ibv_pd* pd, void* addr, size_t length, int access);
  // GPU memory (GPUDirect RDMA): a dmabuf fd exported by the CUDA driver.
  ibv_mr* (*regDmabufMr)(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd, int access);
  int (*deregMr)(ibv_mr* mr);

  ibv_comp_channel* (*createCompChannel)(ibv_context* context);
  int (*destroyCompChannel)(ibv_comp_channel* channel);
  ibv_cq* (*createCq)(ibv_context* context, int cqe, void* cqContext, ibv_comp_channel* channel, int vector);
  int (*destroyCq)(ibv_cq* cq);
  int (*reqNotifyCq)(ibv_cq* cq, int solicitedOnly);
  int (*getCqEvent)(ibv_comp_channel* channel, ibv_cq** cq, void** cqContext);
  void (*ackCqEvents)(ibv_cq* cq, unsigned int count);
  int (*pollCq)(ibv_cq* cq, int entries, ibv_wc* wc);

  ibv_qp* (*createQp)(ibv_pd* pd, ibv_qp_init_attr* attr);
  int (*modifyQp)(ibv_qp* qp, ibv_qp_attr* attr, int mask);
  int (*destroyQp)(ibv_qp* qp);
  int (*postSend)(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad);
  int (*postRecv)(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad);

  int (*getAsyncEvent)(ibv_context* context, ibv_async_event* event);  // context->async_fd is pollable
  void (*ackAsyncEvent)(ibv_async_event* event);
};

// The real libibverbs.
const VerbsApi& realVerbsApi();

// The table the ibverbs transport uses: the real one unless a test installed another (before
// creating communicators; not thread-safe against communicators being created).
const VerbsApi& activeVerbsApi();
void setVerbsApiForTesting(const VerbsApi* api);  // nullptr restores the real one

}  // namespace coll
