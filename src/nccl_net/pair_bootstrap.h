// A two-party Bootstrap for the NCCL plugin: one authenticated TCP control socket between the two
// ends of one NCCL connection, so the tcp, ucx and ib transports set up a pair unchanged.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "src/oob/auth.h"
#include "src/oob/bootstrap.h"
#include "src/oob/socket.h"

namespace coll::ncclnet {

// Sent right after authentication on every socket a pair opens to the listener.
struct PairHello {
  static constexpr uint32_t kMagic = 0x4e435048;  // "NCPH"
  enum Kind : uint32_t { kControl = 1, kData = 2 };
  uint32_t magic = kMagic;
  uint32_t kind = kControl;
  uint64_t pairId = 0;  // the connector's random id for this pair
  uint32_t tag = 0;     // data sockets: the transport's tag
  int32_t pid = 0;
  uint64_t hostHash = 0;
  // The connector's control hello: its traffic class (-1, kTrafficClassUnset: none), which the
  // accepting end adopts as NCCL's ib transport has its receiver take the sender's.
  int32_t trafficClass = -1;
  uint32_t reserved = 0;
};
static_assert(sizeof(PairHello) == 40);

uint64_t localHostHash();

// Rank 0 is the connecting (send) side: it makes every data socket, to the listener at
// `listenerAddress`. Rank 1 is the accepting (receive) side and accepts them on `listener` (which
// must outlive the pair's setup). Messages travel on the control socket as (tag, size) frames.
class PairBootstrap final : public Bootstrap {
 public:
  PairBootstrap(int rank, Socket control, const Secret& secret, uint64_t pairId, const PeerInfo& me,
                const PeerInfo& peer, const Socket* listener);
  ~PairBootstrap() override;

  int rank() const override { return rank_; }
  int nranks() const override { return 2; }
  const PeerInfo& peer(int rank) const override { return rank == rank_ ? me_ : peer_; }
  uint64_t commHash() const override { return pairId_; }
  Status send(int peer, uint32_t tag, const void* data, size_t size, Deadline deadline) override;
  Status recv(int peer, uint32_t tag, std::vector<uint8_t>* data, size_t maxSize, Deadline deadline) override;
  Status connectData(int peer, uint32_t tag, Socket* out, Deadline deadline) override;
  Status acceptData(int peer, uint32_t tag, Socket* out, Deadline deadline) override;
  void abort() override;

  // Reads whatever the control socket has into complete frames, waiting at most until deadline
  // for the first byte. Exposed for tests.
  Status pump(Deadline deadline);

 private:
  static constexpr size_t kMaxFrame = 1u << 20;  // control messages are small (addresses, QP info)
  static constexpr size_t kMaxStashed = 4u << 20;

  int rank_;
  Socket control_;
  Secret secret_;
  uint64_t pairId_;
  PeerInfo me_, peer_;
  const Socket* listener_;
  std::mutex mu_;
  std::vector<uint8_t> inbuf_;
  std::map<uint32_t, std::vector<std::vector<uint8_t>>> stash_;  // tag -> frames in order
  size_t stashedBytes_ = 0;
  std::map<uint32_t, Socket> dataStash_;  // accepted data sockets by tag
  bool aborted_ = false;
  bool closed_ = false;
};

}  // namespace coll::ncclnet
