// Inter-host transport selection: names, availability probes and the factory (see net.h). The
// ucx and ib factories are compiled only where their libraries were found; otherwise the stubs
// here say so.
#include "transports/net.h"

#include <sys/socket.h>

#include "src/base/config.h"
#include "src/oob/socket.h"

namespace coll {

namespace {
#if COLL_HAVE_UCX
constexpr bool kUcxBuilt = true;
#else
constexpr bool kUcxBuilt = false;
#endif
#if COLL_HAVE_IBVERBS
constexpr bool kIbBuilt = true;
#else
constexpr bool kIbBuilt = false;
#endif
}  // namespace

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

std::vector<NetReport> reportNets() {
  std::string why;
  const uint32_t mask = probeNetAvailability(&why);
  std::vector<NetReport> out;
  for (NetKind kind : {NetKind::Ib, NetKind::Ucx, NetKind::Tcp}) {
    NetReport r;
    r.kind = kind;
    r.built = kind == NetKind::Tcp || (kind == NetKind::Ucx ? kUcxBuilt : kIbBuilt);
    r.available = (mask & netBit(kind)) != 0;
    r.automatic = (automaticNetMask(mask) & netBit(kind)) != 0;
    // probeNetAvailability's reasons: one "name: reason" line per unavailable transport.
    const std::string prefix = std::string(netKindName(kind)) + ": ";
    for (size_t at = why.find(prefix); at != std::string::npos && r.why.empty(); at = why.find(prefix, at + 1)) {
      if (at != 0 && why[at - 1] != '\n') continue;
      const size_t end = why.find('\n', at);
      r.why = why.substr(at + prefix.size(), end == std::string::npos ? std::string::npos : end - at - prefix.size());
    }
    if (r.built) r.detail = kind == NetKind::Ib ? ibDetail() : kind == NetKind::Ucx ? ucxDetail() : tcpDetail();
    out.push_back(std::move(r));
  }
  return out;
}

namespace {

// "192.0.2.2" or "[fd00::2]": an interface's address, which has no port.
std::string hostPart(const SocketAddress& a) {
  const std::string s = a.toString();
  const size_t colon = s.rfind(':');
  return colon == std::string::npos ? s : s.substr(0, colon);
}

}  // namespace

std::vector<std::string> tcpDetail() {
  std::vector<std::string> lines;
  NetInterface chosen;
  Status st = selectInterface(&chosen);
  if (!st.ok()) {
    lines.push_back("no interface: " + st.message());
    return lines;
  }
  lines.push_back("between hosts: " + chosen.name + " " + hostPart(chosen.address) +
                  (kSocketIfname.raw() ? " (COLL_SOCKET_IFNAME)" : " (the first usable; COLL_SOCKET_IFNAME chooses)"));
  std::vector<NetInterface> all;
  if (findInterfaces("", AF_UNSPEC, &all).ok()) {
    std::string names;
    for (const NetInterface& ni : all) names += (names.empty() ? "" : ", ") + ni.name + " " + hostPart(ni.address);
    if (!names.empty()) lines.push_back("usable interfaces: " + names);
  }
  return lines;
}

Status createNet(NetKind kind, Bootstrap& bootstrap, int trafficClass, std::unique_ptr<NetTransport>* out) {
  switch (kind) {
    case NetKind::Ib: return createIbNet(bootstrap, trafficClass, out);
    case NetKind::Ucx: return createUcxNet(bootstrap, trafficClass, out);
    case NetKind::Tcp: return createTcpNet(bootstrap, trafficClass, out);
  }
  return makeError(collInternalError, "unknown transport %u", static_cast<unsigned>(kind));
}

#if !COLL_HAVE_UCX
std::vector<std::string> ucxDetail() { return {}; }
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
std::vector<std::string> ibDetail() { return {}; }
bool ibAvailable(std::string* why) {
  *why = "not built (libibverbs was not found at configure time: install libibverbs-dev and rebuild)";
  return false;
}
Status createIbNet(Bootstrap&, int, std::unique_ptr<NetTransport>*) {
  return makeError(collInvalidUsage, "the ib transport is not in this build (install libibverbs-dev and rebuild)");
}
#endif

}  // namespace coll
