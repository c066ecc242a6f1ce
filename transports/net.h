// Inter-host transports (tcp, ucx, ib): what a communicator needs to reach ranks on other hosts.
// One NetTransport per communicator, chosen once at creation (COLL_NET / COLL_TRANSPORT); it makes
// Connections (transport.h) to peers lazily and tells the communicator how to sleep on it.
#pragma once

#include <poll.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/base/config.h"
#include "src/base/deadline.h"
#include "src/base/status.h"
#include "src/oob/bootstrap.h"
#include "transports/transport.h"

namespace coll {

// The NCCL net plugin's transport (src/nccl_net).
extern const StringKnob kNcclNet;  // COLL_NCCL_NET

// In order of preference for COLL_NET's automatic choice (the best one every rank has).
enum class NetKind : uint32_t { Ib = 0, Ucx = 1, Tcp = 2 };
constexpr int kNetKinds = 3;
constexpr uint32_t netBit(NetKind kind) { return 1u << static_cast<uint32_t>(kind); }
const char* netKindName(NetKind kind);  // "ib", "ucx", "tcp"
// "ib", "ucx", "tcp" (and "socket", NCCL's name for tcp); false for anything else.
bool netKindFromName(const std::string& name, NetKind* out);

class NetTransport {
 public:
  virtual ~NetTransport() = default;
  virtual NetKind kind() const = 0;
  // For logs: the transport and what it runs on ("ucx 1.13.1 (tls: tcp,sm)", "ib mlx5_0:1 RoCE v2").
  virtual std::string describe() const = 0;

  // Both ranks of a pair call this when they first need each other (each from its own executor,
  // in any order relative to other pairs); they agree through bootstrap messages and data sockets
  // with tags in the transport's own range. Returns a ready connection or an error naming the
  // peer; never waits past `deadline`.
  virtual Status connect(int peer, Deadline deadline, std::unique_ptr<Connection>* out) = 0;

  // The communicator's sleep, for connections of this transport: adds the descriptors that become
  // readable when a connection may progress (sockets, a UCX worker's event fd, a completion
  // channel) and arms their notification. Returns false when progress is already possible, so the
  // caller polls again instead of sleeping. After poll() returns, the caller calls finishSleep().
  virtual bool prepareSleep(std::vector<pollfd>* fds) = 0;
  virtual void finishSleep() {}

  // The communicator brackets every call's use of this transport (connections made, progressed,
  // slept on) with these, on the thread that runs the call. Between calls a transport whose
  // connections need progress after a call completed (UCX's sends, tcp over several rails) drives
  // itself (IdleProgress); inside, only the caller.
  virtual void enterCall() {}
  virtual void leaveCall() {}
  // The communicator calls this before it destroys the connections: the transport's own progress
  // between calls ends for good.
  virtual void stopIdleProgress() {}
};

// Availability on this process, probed before the bootstrap (each rank publishes its mask in the
// rank table, so every rank picks the same transport without another exchange). tcp is always
// available; ucx when built with UCX and a UCP context initialises (an automatic choice only when
// it has an RDMA-capable transport); ib when built with libibverbs and an active port exists.
// `why` collects a line per unavailable transport, for the error when COLL_NET names one.
// The mask holds two sets: netBit(kind) = available, netBit(kind) << kNetAutoShift = one the
// automatic choice may pick. Both travel in the rank table, so ranks AND-ing their masks agree on
// both (a rank whose UCX has RDMA and one whose UCX has not choose alike).
constexpr uint32_t kNetAutoShift = 8;
constexpr uint32_t kNetAvailableBits = (1u << kNetAutoShift) - 1;
uint32_t probeNetAvailability(std::string* why);
// The transports COLL_NET's automatic choice may pick, from a (possibly AND-ed) probe mask.
uint32_t automaticNetMask(uint32_t mask);

// Factories (ucx and ib exist only in builds that have them; the others return an error).
// trafficClass (0..255, checked by the caller) is the communicator's network priority, applied to
// every connection the transport makes: ib's GRH traffic class, tcp's IP_TOS and SO_PRIORITY; ucx
// has none to set (collective.h). kTrafficClassUnset keeps each transport's default.
Status createTcpNet(Bootstrap& bootstrap, int trafficClass, std::unique_ptr<NetTransport>* out);
Status createUcxNet(Bootstrap& bootstrap, int trafficClass, std::unique_ptr<NetTransport>* out);
Status createIbNet(Bootstrap& bootstrap, int trafficClass, std::unique_ptr<NetTransport>* out);
Status createNet(NetKind kind, Bootstrap& bootstrap, int trafficClass, std::unique_ptr<NetTransport>* out);

// Per-transport probes used by probeNetAvailability (same build conditions as the factories).
bool ucxAvailable(bool* hasRdma, std::string* why);
bool ibAvailable(std::string* why);

// What this build and this machine offer of one net transport, for a person (collinfo): whether it
// is built in, whether this process could use it now, whether the automatic choice would, and
// what it would run on (devices and ports, UCX's version and transports, interfaces), one item a
// line.
struct NetReport {
  NetKind kind = NetKind::Tcp;
  bool built = false;
  bool available = false;
  bool automatic = false;
  std::string why;                  // not built or not available: the reason
  std::vector<std::string> detail;  // e.g. "mlx5_0 port 1: active, InfiniBand, 4x HDR (200 Gb/s)"
};
std::vector<NetReport> reportNets();
// The detail lines of each (same build conditions as the factories).
std::vector<std::string> tcpDetail();
std::vector<std::string> ucxDetail();
std::vector<std::string> ibDetail();

}  // namespace coll
