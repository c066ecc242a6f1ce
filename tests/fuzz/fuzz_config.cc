// libFuzzer target: parsers of configuration text that arrives from outside the program (the
// environment, launchers): COLL_ALGO, COLL_SOCKET_IFNAME, COLL_SOCKET_FAMILY, byte sizes,
// COLL_TORUS_DIMS, Slurm host lists, COLL_COMM_SECRET, COLL_IB_HCA and rendezvous addresses.
#include <arpa/inet.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/algorithms.h"
#include "src/base/config.h"
#include "src/oob/auth.h"
#include "src/oob/env_bootstrap.h"
#include "src/oob/socket.h"
#include "src/plan/planner.h"
#include "src/topo/topology.h"
#if COLL_HAVE_IBVERBS
#include "transports/ib/ib_transport.h"
#endif

namespace {

// Only numeric addresses: a host name would make getaddrinfo ask DNS, which is slow and not ours.
bool numericAddress(const std::string& text) {
  std::string host;
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos) return true;  // rejected before any lookup
    host = text.substr(1, close - 1);
    in6_addr a6;
    return inet_pton(AF_INET6, host.c_str(), &a6) == 1 && host.find('\0') == std::string::npos;
  }
  size_t colon = text.rfind(':');
  if (colon == std::string::npos) return true;
  host = text.substr(0, colon);
  in_addr a4;
  return host.empty() || (inet_pton(AF_INET, host.c_str(), &a4) == 1 && host.find('\0') == std::string::npos);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t selector = data[0];
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (selector % 10) {
    case 0: {
      coll::AlgoMask allowed[coll::kCollKindCount];
      (void)coll::parseAlgoFilter(text, allowed);
      break;
    }
    case 1: {
      // "spec\nname": the COLL_SOCKET_IFNAME matcher against one interface name.
      size_t nl = text.find('\n');
      std::string spec = text.substr(0, nl), name = nl == std::string::npos ? "eth0" : text.substr(nl + 1);
      (void)coll::interfaceMatches(spec, name);
      break;
    }
    case 2: {
      int family = 0;
      (void)coll::parseSocketFamily(text, &family);
      break;
    }
    case 3: (void)coll::parseBytes(text); break;
    case 4: {
      std::vector<std::string> hosts;
      if (coll::expandSlurmNodeList(text, &hosts, 4096).ok() && hosts.size() > 4096) __builtin_trap();
      std::string first;
      (void)coll::firstSlurmNode(text, &first);
      break;
    }
    case 5: {
      coll::Secret secret;
      (void)coll::secretFromText(text, &secret);
      std::vector<uint8_t> bytes;
      if (coll::hexDecode(text, &bytes) && coll::hexEncode(bytes.data(), bytes.size()).size() != text.size()) {
        __builtin_trap();
      }
      break;
    }
    case 6: {
      // "N:dims": the torus grid for N ranks.
      if (text.size() < 2) break;
      const int nranks = (static_cast<uint8_t>(text[0]) | static_cast<uint8_t>(text[1]) << 8) % 4096 + 1;
      coll::Topology topo = coll::Topology::uniform(0, nranks, nranks % 8 == 0 ? 8 : nranks);
      coll::TorusDims dims;
      if (coll::torusDimsFor(topo, text.substr(2), &dims).ok() && dims.product() != nranks) __builtin_trap();
      break;
    }
    case 7: {
#if COLL_HAVE_IBVERBS
      coll::IbHcaFilter filter;
      if (coll::parseIbHcaList(text, &filter).ok()) {
        (void)filter.matches("mlx5_0", 1);
        (void)filter.matches("rxe0", 2);
      }
#endif
      break;
    }
    case 8: {
      if (!numericAddress(text)) break;
      coll::SocketAddress a;
      if (coll::SocketAddress::parse(text, &a).ok()) (void)a.toString();
      break;
    }
    default: {
      std::string first;
      (void)coll::firstSlurmNode(text, &first);
      break;
    }
  }
  return 0;
}
