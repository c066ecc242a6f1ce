// collCommGetUniqueId and collCommGrow: a communicator's ranks and newcomers make a larger
// communicator. Rank 0 starts a grow rendezvous (a bootstrap root whose id is marked as growing an
// n-rank communicator); collCommGrow gives its id to the other ranks over the old communicator, they
// agree on the new size, and everyone joins the rendezvous: old ranks keep their rank, newcomers take
// the ranks after them. The old communicator is only read, so it stays usable if the grow fails.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collective/collective.h"
#include "src/base/status.h"

namespace coll {

class Comm;
struct CommConfig;

// How long a grow id stays valid, in timeouts of the communicator that made it: newcomers start
// after the id exists (a replacement process launched, its libraries loaded) and must be in time.
constexpr int64_t kGrowIdLifetimeTimeouts = 4;

// collCommGetUniqueId: rank 0 of `comm` only, on a communicator that has not failed.
Status makeGrowId(Comm& comm, collUniqueId* growId);

// collCommGrow on a rank of `comm` (growId: rank 0's id, or NULL on the other ranks).
Status growExisting(Comm& comm, int nranks, const collUniqueId* growId, const CommConfig& config,
                    std::unique_ptr<Comm>* out);

// collCommGrow on a newcomer: joins as `rank` (one of the ranks after the old communicator's).
Status growNewcomer(int nranks, const collUniqueId& growId, int rank, const CommConfig& config,
                    std::unique_ptr<Comm>* out);

// What rank 0 tells the old ranks (a broadcast over the old communicator): the grow id and the new
// size, or why rank 0 refused. Fixed size; decoded as remote bytes.
struct GrowAnnouncement {
  collResult_t code = collSuccess;
  uint32_t nranks = 0;
  collUniqueId id{};
  std::string message;  // why not (code != collSuccess)
};
constexpr size_t kGrowMaxText = 256;
constexpr size_t kGrowAnnouncementBytes = 4 + 4 + 4 + sizeof(collUniqueId) + 4 + kGrowMaxText;
void encodeGrowAnnouncement(const GrowAnnouncement& a, uint8_t* out);
Status decodeGrowAnnouncement(const uint8_t* data, size_t size, GrowAnnouncement* out);

}  // namespace coll
