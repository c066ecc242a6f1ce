// The real libibverbs behind the VerbsApi table (several verbs are inline functions or macros in
// verbs.h, so the table holds small wrappers), and the test hook that swaps the table.
#include "transports/ib/verbs_api.h"

#include <atomic>

namespace coll {

namespace {

ibv_device** getDeviceList(int* num) { return ibv_get_device_list(num); }
void freeDeviceList(ibv_device** list) { ibv_free_device_list(list); }
const char* getDeviceName(ibv_device* d) { return ibv_get_device_name(d); }
uint64_t getDeviceGuid(ibv_device* d) { return ibv_get_device_guid(d); }
ibv_context* openDevice(ibv_device* d) { return ibv_open_device(d); }
int closeDevice(ibv_context* c) { return ibv_close_device(c); }
int queryDevice(ibv_context* c, ibv_device_attr* a) { return ibv_query_device(c, a); }
int queryPort(ibv_context* c, uint8_t port, ibv_port_attr* a) { return ibv_query_port(c, port, a); }
int queryGid(ibv_context* c, uint8_t port, int index, ibv_gid* gid) { return ibv_query_gid(c, port, index, gid); }
int queryGidType(ibv_context* c, uint8_t port, int index, ibv_gid_type* type) {
  ibv_gid_entry entry{};
  const int rc = ibv_query_gid_ex(c, port, static_cast<uint32_t>(index), &entry, 0);
  if (rc == 0) *type = static_cast<ibv_gid_type>(entry.gid_type);
  return rc;
}
ibv_pd* allocPd(ibv_context* c) { return ibv_alloc_pd(c); }
int deallocPd(ibv_pd* pd) { return ibv_dealloc_pd(pd); }
ibv_mr* regMr(ibv_pd* pd, void* addr, size_t length, int access) { return ibv_reg_mr(pd, addr, length, access); }
ibv_mr* regDmabufMr(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd, int access) {
  return ibv_reg_dmabuf_mr(pd, offset, length, iova, fd, access);
}
int deregMr(ibv_mr* mr) { return ibv_dereg_mr(mr); }
ibv_comp_channel* createCompChannel(ibv_context* c) { return ibv_create_comp_channel(c); }
int destroyCompChannel(ibv_comp_channel* ch) { return ibv_destroy_comp_channel(ch); }
ibv_cq* createCq(ibv_context* c, int cqe, void* ctx, ibv_comp_channel* ch, int vector) {
  return ibv_create_cq(c, cqe, ctx, ch, vector);
}
int destroyCq(ibv_cq* cq) { return ibv_destroy_cq(cq); }
int reqNotifyCq(ibv_cq* cq, int solicitedOnly) { return ibv_req_notify_cq(cq, solicitedOnly); }
int getCqEvent(ibv_comp_channel* ch, ibv_cq** cq, void** ctx) { return ibv_get_cq_event(ch, cq, ctx); }
void ackCqEvents(ibv_cq* cq, unsigned int n) { ibv_ack_cq_events(cq, n); }
int pollCq(ibv_cq* cq, int n, ibv_wc* wc) { return ibv_poll_cq(cq, n, wc); }
ibv_qp* createQp(ibv_pd* pd, ibv_qp_init_attr* a) { return ibv_create_qp(pd, a); }
int modifyQp(ibv_qp* qp, ibv_qp_attr* a, int mask) { return ibv_modify_qp(qp, a, mask); }
int destroyQp(ibv_qp* qp) { return ibv_destroy_qp(qp); }
int postSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) { return ibv_post_send(qp, wr, bad); }
int postRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) { return ibv_post_recv(qp, wr, bad); }
int getAsyncEvent(ibv_context* c, ibv_async_event* e) { return ibv_get_async_event(c, e); }
void ackAsyncEvent(ibv_async_event* e) { ibv_ack_async_event(e); }

const VerbsApi kReal = {
    "libibverbs",  getDeviceList, freeDeviceList, getDeviceName, getDeviceGuid,     openDevice,
    closeDevice,   queryDevice,   queryPort,      queryGid,      queryGidType,      allocPd,
    deallocPd,     regMr,         regDmabufMr,    deregMr,       createCompChannel, destroyCompChannel,
    createCq,      destroyCq,     reqNotifyCq,    getCqEvent,    ackCqEvents,       pollCq,
    createQp,      modifyQp,      destroyQp,      postSend,      postRecv,          getAsyncEvent,
    ackAsyncEvent,
};

std::atomic<const VerbsApi*> testApi{nullptr};

}  // namespace

const VerbsApi& realVerbsApi() { return kReal; }

const VerbsApi& activeVerbsApi() {
  const VerbsApi* t = testApi.load(std::memory_order_acquire);
  return t ? *t : kReal;
}

void setVerbsApiForTesting(const VerbsApi* api) { testApi.store(api, std::memory_order_release); }

}  // namespace coll
