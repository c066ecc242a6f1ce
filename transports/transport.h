// The transport interface: what the executor sees of a peer (a Connection: an in-order byte
// stream in each direction with buffer-level access, so receive and reduction fuse in place) and
// of the host (HostWindows: shared memory that every local rank maps). Nothing above this header
// sees sockets, shared-memory segments or third-party transport objects.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>

#include "src/base/status.h"

namespace coll {

// A communicator's network priority (collConfig_t.trafficClass, 0..255) when none was given: each
// transport keeps its default (COLL_IB_TC, the socket's own).
constexpr int kTrafficClassUnset = -1;

// A receive the executor posts ahead of its bytes (Connection::postRecv). A transport whose
// bytes first land in a buffer of its own (UCX's active messages over tcp hand each message up in
// UCX's buffer) applies them from there to their destination, copied or reduced with the step's
// local operand, instead of copying them into its ring for the executor to read a second time.
struct PostedRecv {
  uint64_t streamPos = 0;  // stream position of the first unit (receivedBytes() when posted)
  uint64_t units = 0;      // units the transport may apply (those whose destination is ready)
  size_t unitBytes = 0;
  // Applies `n` whole units from `data`: the (applied + 1)-th unit of the post onwards.
  void (*apply)(PostedRecv* self, const std::byte* data, uint64_t n) = nullptr;
  uint64_t applied = 0;  // units applied so far: the transport adds, the poster takes them
};

// A connection to one peer. Both directions are in-order byte streams: the k-th byte committed
// by the sender is the k-th byte the receiver sees. Calls are non-blocking and made by one
// thread at a time. Spans returned stay valid until the matching commit/consume.
class Connection {
 public:
  virtual ~Connection() = default;
  virtual int peer() const = 0;

  // Contiguous space the caller may write now (empty when the peer has not drained enough), and
  // the commit of the first `bytes` of it. Buffers are multiples of 64 bytes, so when the stream
  // position is a multiple of 8 the space is too: the executor pads every step's start to 8 bytes
  // (both sides alike), so no element straddles the end of a ring buffer (StreamRing in
  // stream_ring.h keeps this alignment rule for every ring).
  virtual std::span<std::byte> sendSpace() = 0;
  virtual void sendCommit(size_t bytes) = 0;

  // Sends the next stream bytes straight from the caller's memory, when the transport can do so
  // at once; returns how many it took (a multiple of `granule`; 0 when it cannot now, or never
  // does). The bytes taken have left the caller's memory when it returns (they are in the
  // kernel's or the transport's own buffers), so the caller may change that memory at once; it
  // sends the rest through sendSpace()/sendCommit() as usual. Saves the copy into the send ring
  // where the transport's send path copies anyway (UCX's eager sends over tcp).
  virtual size_t sendDirect(const std::byte* src, size_t bytes, size_t granule) {
    (void)src;
    (void)bytes;
    (void)granule;
    return 0;
  }

  // Contiguous received bytes not yet consumed (possibly empty), and their consumption.
  virtual std::span<const std::byte> recvData() = 0;
  virtual void recvConsume(size_t bytes) = 0;

  // Stream positions: bytes committed so far / bytes consumed so far (since the connection began).
  virtual uint64_t sentBytes() const = 0;
  virtual uint64_t receivedBytes() const = 0;

  // Moves bytes where the CPU must (sockets); a no-op for shared memory. An error means the
  // peer or the link failed; the message names the peer.
  virtual Status progress(bool* progressed) = 0;

  // Called by an idle executor every ~100 ms while it still needs this connection: fails when the
  // peer is gone (a shared-memory peer whose process exited, a socket the peer closed or reset).
  // progress() does not fail on a peer's orderly close, since the peer may simply be done.
  virtual Status checkHealth() = 0;

  // True when every committed byte has left this process (sockets) or is visible to the peer.
  virtual bool sendsFlushed() const = 0;
  // The stream position before which every byte has left (sendsFlushed() for a prefix), so a
  // caller can complete a message while later ones are still queued. The default knows only
  // "all or nothing"; it may lag but never runs ahead.
  virtual uint64_t flushedBytes() const { return sendsFlushed() ? sentBytes() : 0; }

  // Posts a receive (nullptr withdraws it); false when the transport does not apply receives
  // itself. While posted, progress() may apply units that arrive: only bytes that are next in
  // the stream, with nothing left unconsumed before them, and only whole units. Those bytes are
  // consumed (receivedBytes() moves on) and never appear in recvData(); the rest of a message
  // lands in the ring as usual. The post (owned by the caller) must stay valid until withdrawn;
  // the caller withdraws it before the step's bytes are done or its buffers change.
  virtual bool postRecv(PostedRecv* post) {
    (void)post;
    return false;
  }
};

// Host-shared windows: one per local rank, each with two halves used alternately by consecutive
// calls (so a fast rank can start call n+1 while a slow one still reads call n), published
// progress slots, and a completed-call counter. Progress values encode (seq << 40) | elements.
class HostWindows {
 public:
  static constexpr int kSeqShift = 40;
  virtual ~HostWindows() = default;

  // Data area of the window half that call `seq` uses, of local rank `rank` (global rank).
  virtual std::byte* windowHalf(int rank, uint64_t seq) = 0;
  virtual uint64_t halfBytes() const = 0;
  virtual int maxPublishSlots() const = 0;
  virtual std::atomic<uint64_t>& progressSlot(int rank, int slot) = 0;
  virtual std::atomic<uint64_t>& completedCalls(int rank) = 0;
  // Wakes local ranks sleeping in Links::wait (cheap when none sleeps: no system call).
  virtual void notifyLocalPeers() = 0;
};

// What an executor needs from its communicator: connections (made lazily, on first use of a
// peer), the host windows, and a way to sleep until something may have changed.
class Links {
 public:
  virtual ~Links() = default;
  virtual int rank() const = 0;
  // Returns a ready connection to `peer`, setting it up first if needed (blocking, with the
  // communicator's deadline).
  virtual Status connection(int peer, Connection** out) = 0;
  // nullptr when the host has no shared windows (a single rank on the host, or forced tcp).
  virtual HostWindows* windows() = 0;
  // Sleep protocol: token = prepareWait(); poll once more; if still idle, wait(token, ms). A
  // notification between prepareWait and wait makes wait return at once.
  virtual uint64_t prepareWait() = 0;
  virtual void wait(uint64_t token, int maxMs) = 0;
  // Wakes local peers after this rank made progress they may wait for (shared memory).
  virtual void notifyPeers() = 0;
  // Called by an idle executor every ~100 ms: fails when a rank this one may wait on through the
  // host windows (not through a connection) has died.
  virtual Status checkHealth() { return okStatus(); }
  // True once the communicator is being aborted: waits give up at once.
  virtual bool aborting() const { return false; }
  // Scratch of at least `bytes` shared by every Execution over these links (their runs never
  // overlap), so a new call shape reuses memory earlier calls already touched instead of faulting
  // in its own; valid until the next scratch() call. nullptr: each Execution keeps its own.
  virtual std::byte* scratch(uint64_t bytes) {
    (void)bytes;
    return nullptr;
  }
};

}  // namespace coll
