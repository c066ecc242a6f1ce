// collCommGrow: rank 0's grow id reaches the old ranks by a broadcast over the old communicator, an
// all-gather checks that every old rank asks for the same size (so a disagreement fails everywhere at
// once instead of at the rendezvous timeout), then old ranks and newcomers join the grow rendezvous.
#include "src/comm/grow.h"

#include <cstring>

#include "src/base/byte_order.h"
#include "src/base/log.h"
#include "src/comm/comm.h"
#include "src/oob/auth.h"
#include "src/oob/bootstrap.h"
#include "src/schedule/coll_args.h"

namespace coll {
namespace {

constexpr uint32_t kAnnouncementMagic = 0x57524743u;  // "CGRW" as little-endian bytes

using le::get32;
using le::put32;

// Rank 0's checks of the grow id it passed: made by this communicator's collCommGetUniqueId, not
// used before.
Status checkRootGrowId(Comm& comm, const collUniqueId* growId, collUniqueId* out) {
  if (growId == nullptr) {
    return makeError(collInvalidArgument,
                     "rank 0 passed growId NULL: rank 0 passes the id from its collCommGetUniqueId (the other "
                     "ranks pass NULL)");
  }
  UniqueIdContents c;
  COLL_TRY(decodeUniqueId(*growId, &c).withContext("rank 0's growId"));
  if (c.growFrom == 0) {
    return makeError(collInvalidArgument,
                     "rank 0's growId is a unique id from collGetUniqueId, not a grow id: make it with "
                     "collCommGetUniqueId on this communicator");
  }
  if (c.growFrom != static_cast<uint32_t>(comm.nranks()) || !comm.takeGrowId(c.commNonce)) {
    return makeError(collInvalidArgument,
                     "rank 0's growId was not made by this communicator's collCommGetUniqueId, or has served a grow "
                     "already (a grow id serves one grow)");
  }
  *out = *growId;
  return okStatus();
}

Status join(const collUniqueId& id, int nranks, int rank, const CommConfig& config, const char* who,
            std::unique_ptr<Comm>* out) {
  Status st = Comm::create(id, nranks, rank, config, out);
  if (st.ok()) return st;
  std::string context = std::string("collCommGrow: joining the grown communicator as rank ") + std::to_string(rank) +
                        " of " + std::to_string(nranks) + " (" + who + ")";
  if (st.code() == collTimeout) {
    context += "; the rendezvous needs every rank: did each newcomer call collCommGrow with the grow id in time?";
  }
  return st.withContext(context);
}

}  // namespace

void encodeGrowAnnouncement(const GrowAnnouncement& a, uint8_t* out) {
  memset(out, 0, kGrowAnnouncementBytes);
  put32(out, kAnnouncementMagic);
  put32(out + 4, static_cast<uint32_t>(a.code));
  put32(out + 8, a.nranks);
  memcpy(out + 12, &a.id, sizeof(collUniqueId));
  const size_t textLen = std::min(a.message.size(), kGrowMaxText);
  put32(out + 12 + sizeof(collUniqueId), static_cast<uint32_t>(textLen));
  memcpy(out + 16 + sizeof(collUniqueId), a.message.data(), textLen);
}

Status decodeGrowAnnouncement(const uint8_t* data, size_t size, GrowAnnouncement* out) {
  if (size != kGrowAnnouncementBytes || get32(data) != kAnnouncementMagic) {
    return makeError(collRemoteError, "malformed grow announcement from rank 0 (%zu bytes)", size);
  }
  GrowAnnouncement a;
  const uint32_t code = get32(data + 4);
  a.nranks = get32(data + 8);
  memcpy(&a.id, data + 12, sizeof(collUniqueId));
  const uint32_t textLen = get32(data + 12 + sizeof(collUniqueId));
  if (code >= collNumResults || code == collInProgress || textLen > kGrowMaxText ||
      (code == collSuccess && (a.nranks < 2 || a.nranks > static_cast<uint32_t>(kBootstrapMaxRanks)))) {
    return makeError(collRemoteError, "malformed grow announcement from rank 0 (code %u, %u ranks, %u text bytes)",
                     code, a.nranks, textLen);
  }
  a.code = static_cast<collResult_t>(code);
  a.message = printableText(reinterpret_cast<const char*>(data + 16 + sizeof(collUniqueId)), textLen);
  *out = std::move(a);
  return okStatus();
}

Status makeGrowId(Comm& comm, collUniqueId* growId) {
  if (comm.rank() != 0) {
    return makeError(collInvalidUsage,
                     "collCommGetUniqueId: this is rank %d; rank 0 of the communicator makes the grow id (the other "
                     "ranks pass NULL to collCommGrow)",
                     comm.rank());
  }
  if (comm.asyncError() != collSuccess) {
    return makeError(collInvalidUsage,
                     "collCommGetUniqueId: the communicator has failed (%s): shrink it without the failed ranks, "
                     "then grow the shrunk communicator",
                     comm.failureMessage().c_str());
  }
  Secret secret;
  COLL_TRY(randomSecret(&secret));
  // Where rank 0's bootstrap listens, which the job's hosts reach, as collCommShrink's leader does.
  SocketAddress bind = comm.bootstrap().peer(0).address;
  bind.setPort(0);
  uint64_t nonce = 0;
  COLL_TRY(startGrowRoot(bind, secret, static_cast<uint32_t>(comm.nranks()), kGrowIdLifetimeTimeouts * comm.timeoutMs(),
                         growId, &nonce)
               .withContext("collCommGetUniqueId: starting the grow rendezvous"));
  comm.rememberGrowId(nonce);
  COLL_INFO(0, "collCommGetUniqueId: grow id for this %d-rank communicator, valid %lld ms", comm.nranks(),
            static_cast<long long>(kGrowIdLifetimeTimeouts * comm.timeoutMs()));
  return okStatus();
}

Status growExisting(Comm& comm, int nranks, const collUniqueId* growId, const CommConfig& config,
                    std::unique_ptr<Comm>* out) {
  const int n = comm.nranks(), me = comm.rank();
  // Checks of what every rank passes alike: each refuses alone, before any message.
  if (nranks <= n || nranks > kBootstrapMaxRanks) {
    return makeError(collInvalidArgument,
                     "collCommGrow: nranks %d must be larger than the communicator's %d (and at most %d)", nranks, n,
                     kBootstrapMaxRanks);
  }
  if (const size_t busy = comm.streamWorkOutstanding()) {
    return makeError(collInvalidUsage,
                     "collCommGrow: %zu stream-ordered operations are still queued or running on the communicator; "
                     "synchronize its streams before growing it",
                     busy);
  }
  if (comm.asyncError() != collSuccess) {
    return makeError(collInvalidUsage,
                     "collCommGrow: the communicator has failed (%s): shrink it without the failed ranks, then grow "
                     "the shrunk communicator",
                     comm.failureMessage().c_str());
  }

  // Rank 0 announces the id (or why not) to every old rank.
  uint8_t wire[kGrowAnnouncementBytes];
  if (me == 0) {
    GrowAnnouncement a;
    a.nranks = static_cast<uint32_t>(nranks);
    Status st = checkRootGrowId(comm, growId, &a.id);
    if (!st.ok()) {
      a.code = st.code();
      a.message = st.message();
    }
    encodeGrowAnnouncement(a, wire);
  }
  CollArgs bcast;
  bcast.kind = CollKind::Broadcast, bcast.sendbuff = wire, bcast.recvbuff = wire;
  bcast.count = kGrowAnnouncementBytes, bcast.dtype = collUint8, bcast.root = 0;
  COLL_TRY(comm.runNow(bcast).withContext("collCommGrow: rank 0 announcing the grow id"));
  GrowAnnouncement a;
  COLL_TRY(decodeGrowAnnouncement(wire, sizeof(wire), &a).withContext("collCommGrow"));
  if (a.code != collSuccess) {
    return Status(a.code, "collCommGrow: " + (me == 0 ? a.message : "rank 0 refused the grow: " + a.message));
  }

  // Every old rank asks for the same size and, where it passed an id, rank 0's.
  const bool idAgrees = growId == nullptr || memcmp(growId, &a.id, sizeof(collUniqueId)) == 0;
  int32_t mine[2] = {nranks, idAgrees ? 1 : 0};
  std::vector<int32_t> all(2 * static_cast<size_t>(n));
  CollArgs gather;
  gather.kind = CollKind::AllGather, gather.sendbuff = mine, gather.recvbuff = all.data();
  gather.count = 2, gather.dtype = collInt32;
  COLL_TRY(comm.runNow(gather).withContext("collCommGrow: agreeing on the new size"));
  for (int r = 0; r < n; ++r) {
    if (all[2 * static_cast<size_t>(r)] != static_cast<int32_t>(a.nranks)) {
      return makeError(
          collInvalidUsage,
          "collCommGrow: rank %d passed nranks %d where rank 0 passed %u: every rank passes the same nranks", r,
          all[2 * static_cast<size_t>(r)], a.nranks);
    }
    if (all[2 * static_cast<size_t>(r) + 1] == 0) {
      return makeError(collInvalidUsage,
                       "collCommGrow: rank %d passed a growId other than rank 0's (pass NULL on ranks other than 0)",
                       r);
    }
  }
  COLL_INFO(me, "collCommGrow: %d -> %d ranks, this rank keeps rank %d", n, nranks, me);
  return join(a.id, nranks, me, config, "a rank of the old communicator", out);
}

Status growNewcomer(int nranks, const collUniqueId& growId, int rank, const CommConfig& config,
                    std::unique_ptr<Comm>* out) {
  UniqueIdContents c;
  COLL_TRY(decodeUniqueId(growId, &c).withContext("collCommGrow: growId"));
  if (c.growFrom == 0) {
    return makeError(collInvalidArgument,
                     "collCommGrow: growId is a unique id from collGetUniqueId, not a grow id: newcomers need the id "
                     "rank 0 of the growing communicator made with collCommGetUniqueId");
  }
  const int from = static_cast<int>(c.growFrom);
  if (nranks <= from || nranks > kBootstrapMaxRanks) {
    return makeError(collInvalidArgument,
                     "collCommGrow: nranks %d must be larger than the %d ranks of the communicator that grows", nranks,
                     from);
  }
  if (rank < from || rank >= nranks) {
    return makeError(collInvalidArgument,
                     "collCommGrow: a newcomer's rank must be one of %d..%d (after the %d ranks of the communicator "
                     "that grows), not %d",
                     from, nranks - 1, from, rank);
  }
  COLL_INFO(rank, "collCommGrow: joining a %d -> %d rank grow as rank %d", from, nranks, rank);
  return join(growId, nranks, rank, config, "a newcomer", out);
}

}  // namespace coll
