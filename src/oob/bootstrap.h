// Bootstrap: rendezvous through the root named in the unique id, then the rank table (each
// rank's listening address and host hash) distributed down a tree, authenticated point-to-point
// messages for connection setup, and authenticated data sockets. Designed for 100,000 ranks:
// the root handles one small message per rank; connections between ranks are made only when
// first needed. See docs/ARCHITECTURE.md for the cost.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collective/collective.h"
#include "src/base/deadline.h"
#include "src/base/status.h"
#include "src/oob/socket.h"

namespace coll {

using Secret = std::array<uint8_t, 16>;

// The contents of collUniqueId (serialised into its 128 bytes by encode/decode).
struct UniqueIdContents {
  SocketAddress root;
  Secret secret{};
  bool authenticated = true;  // false: no secret (environment bootstrap without one)
  uint64_t commNonce = 0;     // distinguishes communicators that share a root address
  uint32_t growFrom = 0;      // a grow id (collCommGetUniqueId): the size of the communicator that grows; 0: not one
};
Status encodeUniqueId(const UniqueIdContents& contents, collUniqueId* out);
Status decodeUniqueId(const collUniqueId& id, UniqueIdContents* out);

// Starts a root listener (a thread that serves one rendezvous and exits) on the selected
// interface (port 0 = any) and returns its id. collGetUniqueId calls this with a random secret.
Status startBootstrapRoot(const SocketAddress& bindAddress, const Secret* secret, collUniqueId* id);
// The most messages (registrations, forwarded blocks and the table or block it sent) one root of
// this process handled in a finished rendezvous since the last reset (the scale benchmark's count).
uint32_t bootstrapRootMessagesMax(bool reset);
// As above with a chosen commNonce (the environment bootstrap: every rank derives the same id).
// An empty bindAddress (length 0) means the selected interface, port 0. A wildcard bindAddress
// listens everywhere and publishes the selected interface's address in the id.
Status startBootstrapRoot(const SocketAddress& bindAddress, const Secret* secret, uint64_t commNonce, collUniqueId* id);
// The rendezvous of collCommGrow: an authenticated root whose id says it grows a growFrom-rank
// communicator; it serves until lifetimeMs have passed. *nonce: the id's commNonce.
Status startGrowRoot(const SocketAddress& bindAddress, const Secret& secret, uint32_t growFrom, int64_t lifetimeMs,
                     collUniqueId* id, uint64_t* nonce);

// Largest bootstrap message (recv's maxSize is also applied) and largest communicator.
constexpr size_t kBootstrapMaxMessage = 16u << 20;
constexpr int kBootstrapMaxRanks = 1 << 24;

struct PeerInfo {
  SocketAddress address;  // the rank's listener (bootstrap messages and data connections)
  uint64_t hostHash = 0;
  int32_t pid = 0;
  uint32_t netMask = 0;      // inter-host transports this rank can use (transports/net.h netBit)
  uint64_t machineHash = 0;  // ranks with equal hashes share CPUs (topology.h localMachineIdentity)
  int32_t cpus = 0;          // that machine's online CPUs as this rank saw them (0 = unknown)
  // Where the rank's GPU sits in its node's ring order (comm_placement.cc gpuRingKey), -1: none.
  // Every rank orders each host's ranks by it (ranksInLocalOrder), so all agree.
  int32_t ringKey = -1;
};

// Most CPUs a rank-table entry may claim (remote bytes: bounded before the topology uses them),
// and the largest ring key (a GPU's place among its node's GPUs).
constexpr int32_t kBootstrapMaxCpus = 1 << 20;
constexpr int32_t kBootstrapMaxRingKey = 1 << 16;

class Bootstrap {
 public:
  // Rendezvous: registers with the root, receives the rank table, starts the listener thread.
  static Status create(const collUniqueId& id, int rank, int nranks, uint64_t hostHash, Deadline deadline,
                       std::unique_ptr<Bootstrap>* out);
  // As above, publishing this rank's netMask in the rank table. `interrupted`, when given, is asked
  // while the rendezvous waits for the rank table: true gives up at once (a stream lane being made
  // for a communicator that failed or was aborted meanwhile: the rank that left never registers).
  static Status create(const collUniqueId& id, int rank, int nranks, uint64_t hostHash, uint32_t netMask,
                       Deadline deadline, std::unique_ptr<Bootstrap>* out,
                       const std::function<bool()>& interrupted = {});
  // With several roots (collCommInitRankScalable): `ids` are every root's unique id, the same on
  // every rank and in the same order; the ranks are cut into ids.size() consecutive blocks
  // (bootstrapGroupStart), block g registering with root g, whose first rank forwards the block to
  // root 0. One id is the single-root rendezvous above.
  // `ringKey`: this rank's PeerInfo::ringKey.
  static Status create(const std::vector<collUniqueId>& ids, int rank, int nranks, uint64_t hostHash, uint32_t netMask,
                       Deadline deadline, std::unique_ptr<Bootstrap>* out,
                       const std::function<bool()>& interrupted = {}, int32_t ringKey = -1);
  virtual ~Bootstrap() = default;

  virtual int rank() const = 0;
  virtual int nranks() const = 0;
  virtual const PeerInfo& peer(int rank) const = 0;
  // A stable identifier of this communicator (same on all ranks), for naming shared memory.
  virtual uint64_t commHash() const = 0;

  // Small control messages (connection setup). Messages from one peer with one tag arrive in
  // order; recv rejects anything larger than maxSize.
  virtual Status send(int peer, uint32_t tag, const void* data, size_t size, Deadline deadline) = 0;
  virtual Status recv(int peer, uint32_t tag, std::vector<uint8_t>* data, size_t maxSize, Deadline deadline) = 0;

  // An authenticated socket for data: the active side connects, the passive side accepts the
  // connection the peer made for the same tag.
  virtual Status connectData(int peer, uint32_t tag, Socket* out, Deadline deadline) = 0;
  virtual Status acceptData(int peer, uint32_t tag, Socket* out, Deadline deadline) = 0;

  // Wakes every waiter with an error and stops the listener (collCommAbort).
  virtual void abort() = 0;

  // Control messages (failure.h's reserved tags) go to this handler on the listener thread
  // instead of being queued; its reply (at most kCtlMaxReply bytes) travels back in the
  // acknowledgement. It must be quick and must not send bootstrap messages. An empty handler
  // (the default) answers with an empty reply; setting one waits for a call in progress.
  using ControlHandler =
      std::function<std::vector<uint8_t>(int fromRank, uint32_t tag, const std::vector<uint8_t>& payload)>;
  virtual void setControlHandler(ControlHandler handler) { (void)handler; }
  // Sends a control message and returns the peer handler's reply.
  virtual Status control(int peer, uint32_t tag, const void* data, size_t size, std::vector<uint8_t>* reply,
                         Deadline deadline) {
    (void)peer, (void)tag, (void)data, (void)size, (void)reply, (void)deadline;
    return makeError(collInvalidUsage, "this bootstrap has no control messages");
  }
  // Messages this rank sent during the rendezvous (registrations, its block forwarded to root 0,
  // rank-table copies to its children): what the scale benchmark counts.
  virtual uint32_t rendezvousMessagesSent() const { return 0; }
  // Breaks the control exchanges in progress and fails later ones at once: an aborting
  // communicator's last notices, past their grace, must not hold collCommAbort up to a stalled
  // peer that accepted the connection and never answers. (Without control messages: nothing to do.)
  virtual void breakControls() {}
};

}  // namespace coll
