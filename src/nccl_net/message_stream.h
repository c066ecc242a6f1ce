// The NCCL plugin's messages on one of our byte-stream Connections: framing (a 16-byte header per
// message), NCCL's send/receive matching (grouped receives, tags within a group, posting order)
// and the request pools that bound what NCCL may have in flight on a comm.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "collective/nccl_net_profiler.h"
#include "src/base/deadline.h"
#include "src/base/status.h"
#include "transports/transport.h"

namespace coll::ncclnet {

constexpr int kMaxRequests = 32;                          // receive groups (and flushes) in flight per comm
constexpr int kMaxRecvs = 8;                              // receives one irecv may group (maxRecvs)
constexpr int kMaxSends = kMaxRequests * kMaxRecvs;       // sends in flight per comm
constexpr uint64_t kMaxMessageBytes = uint64_t{1} << 31;  // also reported as maxP2pBytes
constexpr uint32_t kFrameMagic = 0x4e434d31;              // "NCM1"

// On the wire before each message's payload. Remote bytes: size is checked against the matched
// receive (and kMaxMessageBytes) before a byte of payload is stored.
struct FrameHeader {
  uint32_t magic;
  int32_t tag;
  uint64_t size;
};
static_assert(sizeof(FrameHeader) == 16);

// A request as NCCL holds it (void*). `comm` lets test() reject a request of a closed comm.
struct Request {
  enum class Kind : uint8_t { Free, Send, Recv } kind = Kind::Free;
  bool done = false;
  int n = 0;  // receives in the group (1 for a send)
  int tags[kMaxRecvs] = {};
  void* data[kMaxRecvs] = {};
  uint64_t capacity[kMaxRecvs] = {};  // receive sizes (a send: its size)
  uint64_t received[kMaxRecvs] = {};  // bytes that arrived (a send: bytes written)
  bool matched[kMaxRecvs] = {};       // a message has been assigned to this slot
  int filled = 0;                     // slots whose whole message has arrived
  uint64_t postSeq = 0;               // posting order (receive matching, send ordering)
  uint64_t endPos = 0;                // a send: stream position after its last byte
  void* owner = nullptr;
  // The plugin's: NCCL profiler events of this request's sends / receives (null: none), and what
  // they describe (the profiler may keep the pointer until the event stops).
  void* profilerEvents[kMaxRecvs] = {};
  collProfilerNetDescr_v1_t profilerDescr[kMaxRecvs] = {};
};

// Sends and receives of one direction. The send side writes frames in posting order; the receive
// side assigns each arriving message to the earliest posted receive group that has an unmatched
// slot with the message's tag, and leaves it in the stream (back-pressure) until one exists.
class MessageStream {
 public:
  // `conn` is owned by the caller and outlives this object. `name` names the peer in errors.
  MessageStream(Connection* conn, const char* name);
  ~MessageStream();
  MessageStream(const MessageStream&) = delete;
  MessageStream& operator=(const MessageStream&) = delete;

  // *out == nullptr when every send slot is in use (NCCL retries later). Errors: a size over
  // kMaxMessageBytes (invalid argument), or the comm has already failed.
  Status postSend(const void* data, uint64_t size, int tag, Request** out);
  // n in 1..kMaxRecvs; *out == nullptr when kMaxRequests groups are in flight.
  Status postRecv(int n, void* const* data, const uint64_t* sizes, const int* tags, Request** out);

  // Moves bytes (both directions of this stream's role) and reports the first failure for good.
  Status progress();
  // Progresses, then says whether `req` (of this stream) is complete; a complete request is
  // released (its sizes copied out first, when sizes != nullptr, as NCCL's test does).
  Status test(Request* req, bool* done, uint64_t* sizes, int maxSizes);

  bool owns(const Request* req) const;
  int sendsInFlight() const { return sendsInFlight_; }
  int recvsInFlight() const { return recvsInFlight_; }

 private:
  Status fail(Status st);
  Status progressSends(bool* moved);
  Status progressRecvs(bool* moved);
  Request* matchSlot(int tag, int* slot);
  void release(Request* req);

  Connection* conn_;
  const char* name_;
  Status error_;
  std::unique_ptr<Request[]> sends_;      // ring in posting order
  std::unique_ptr<Request[]> recvs_;      // pool; matched through postSeq order
  uint64_t sendHead_ = 0, sendTail_ = 0;  // ring positions: next to post / oldest not yet written
  uint64_t sendWritten_ = 0;              // bytes of sends_[sendTail_] (header + payload) written
  // Sends [sendDoneTail_, sendTail_) are written but may still sit in the connection: NCCL stops
  // testing a comm whose requests are done, so a send completes only once its bytes have left.
  uint64_t sendDoneTail_ = 0;
  int sendsInFlight_ = 0, recvsInFlight_ = 0;
  uint64_t recvSeq_ = 0;
  // Receive parser: a header being assembled, then the payload of one matched slot.
  FrameHeader header_{};
  size_t headerBytes_ = 0;
  bool haveHeader_ = false;
  Request* target_ = nullptr;
  int targetSlot_ = 0;
  uint64_t payloadDone_ = 0;
  Clock::time_point lastHealthCheck_{};
};

}  // namespace coll::ncclnet
