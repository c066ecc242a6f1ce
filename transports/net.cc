// Inter-host transport selection: names, availability probes and the factory (see net.h). The
// ucx and ib factories are compiled only where their libraries were found; otherwise the stubs
// here say so.
#include "transports/net.h"

#include "src/base/config.h"

namespace coll {

// Read by the NCCL net plugin (src/nccl_net), declared here so that collinfo lists it.
const StringKnob kNcclNet(
    "COLL_NCCL_NET", "",
    "NCCL net plugin (libnccl-net-collective.so): transport behind it, tcp, ucx or ib. Unset: the best available (ib, "
    "then ucx where UCX drives an RDMA device, then tcp), logged through NCCL's logger.",
    {KnobSection::Transports, 40});

const char* netKindName(NetKind kind) {
  switch (kind) {
    case NetKind::Ib: return "ib";
    case NetKind::Ucx: return "ucx";
    case NetKind::Tcp: return "tcp";
  }
  return "?";
}

bool netKindFromName(const std::string& name, NetKind* out) {
  if (name == "ib") *out = NetKind::Ib;
  else if (name == "ucx") *out = NetKind::Ucx;
  else if (name == "tcp" || name == "socket") *out = NetKind::Tcp;
  else return false;
  return true;
}

uint32_t probeNetAvailability(std::string* why) {
  uint32_t mask = netBit(NetKind::Tcp) | netBit(NetKind::Tcp) << kNetAutoShift;
  std::string reason;
  if (ibAvailable(&reason)) mask |= netBit(NetKind::Ib) | netBit(NetKind::Ib) << kNetAutoShift;
  else if (why) *why += "ib: " + reason + "\n";
  reason.clear();
  bool rdma = false;
  if (ucxAvailable(&rdma, &reason)) {
    mask |= netBit(NetKind::Ucx);
    // UCX over plain sockets brings nothing over our own tcp transport: it is an automatic choice
    // only where it drives an RDMA device.
    if (rdma) mask |= netBit(NetKind::Ucx) << kNetAutoShift;
  } else if (why) {
    *why += "ucx: " + reason + "\n";
  }
  return mask;
}

uint32_t automaticNetMask(uint32_t mask) { return mask & (mask >> kNetAutoShift) & kNetAvailableBits; }

Status createNet(NetKind kind, Bootstrap& bootstrap, int trafficClass, std::unique_ptr<NetTransport>* out) {
  switch (kind) {
    case NetKind::Ib: return createIbNet(bootstrap, trafficClass, out);
    case NetKind::Ucx: return createUcxNet(bootstrap, trafficClass, out);
    case NetKind::Tcp: return createTcpNet(bootstrap, trafficClass, out);
  }
  return makeError(collInternalError, "unknown transport %u", static_cast<unsigned>(kind));
}

#if !COLL_HAVE_UCX
bool ucxAvailable(bool* hasRdma, std::string* why) {
  *hasRdma = false;
  *why = "not built (UCX was not found at configure time: install libucx-dev and rebuild)";
  return false;
}
Status createUcxNet(Bootstrap&, int, std::unique_ptr<NetTransport>*) {
  return makeError(collInvalidUsage, "the ucx transport is not in this build (install libucx-dev and rebuild)");
}
#endif

#if !COLL_HAVE_IBVERBS
bool ibAvailable(std::string* why) {
  *why = "not built (libibverbs was not found at configure time: install libibverbs-dev and rebuild)";
  return false;
}
Status createIbNet(Bootstrap&, int, std::unique_ptr<NetTransport>*) {
  return makeError(collInvalidUsage, "the ib transport is not in this build (install libibverbs-dev and rebuild)");
}
#endif

}  // namespace coll
