// Parsers of the bootstrap's remote bytes (a listener's hello header, a registration at the root,
// the rank table) as pure functions: the library and the fuzz targets (tests/fuzz) call the same code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "src/base/status.h"
#include "src/oob/bootstrap.h"

namespace coll {

constexpr size_t kBootstrapHelloBytes = 20;         // magic, type, fromRank, tag, length
constexpr size_t kBootstrapEntryBytes = 56;         // one rank-table entry (PeerInfo)
// magic, version, rank, nranks, nonce, entry, groups, group, block count
constexpr size_t kBootstrapRegistrationBytes = 92;

// What a connection to a rank's listener announces after authenticating.
struct BootstrapHello {
  uint32_t type = 0;
  int32_t fromRank = 0;
  uint32_t tag = 0;
  uint32_t length = 0;  // payload bytes that follow (0 for a data connection)
};

// Decodes the hello a rank of an `nranks`-rank communicator received and checks every field
// (type, sender rank, payload length against the 16 MiB message limit or the rank table's exact
// size). Returns nullptr when the hello is acceptable, else the reason for the log; `out` is
// filled either way so the log can show the fields.
const char* parseBootstrapHello(const uint8_t* bytes, size_t size, int nranks, BootstrapHello* out);

struct BootstrapRegistration {
  int32_t rank = -1;
  int32_t nranks = 0;
  PeerInfo info;
  // Creation with several roots (collCommInitRankScalable): the ranks are cut into `groups`
  // consecutive blocks, block g registering with root g. A block's first rank (its leader) then
  // forwards the block to root 0: a registration with `blockCount` entries following it.
  int32_t groups = 1;
  int32_t group = 0;
  uint32_t blockCount = 0;
};

// The first rank of block `group` when `nranks` ranks are cut into `groups` blocks (group ==
// groups gives nranks), and the block of `rank`.
int bootstrapGroupStart(int group, int groups, int nranks);
int bootstrapGroupOf(int rank, int groups, int nranks);

// Decodes a registration the root received. Returns the reply code for the registrant: 0 when
// acceptable; otherwise malformed, another unique id (`commNonce`), nranks out of range or not
// `knownNranks` (< 0: nobody registered yet), rank out of range, groups out of range or the rank
// not in its group (a forwarded block: not sent by the block's first rank, a count that is not the
// block's size, or block 0). Duplicates and which root takes which group are the caller's checks.
uint32_t parseBootstrapRegistration(const uint8_t* bytes, size_t size, uint64_t commNonce, int knownNranks,
                                    BootstrapRegistration* out);

// Decodes a rank table of `nranks` entries; fails on a wrong size or a malformed entry.
Status parseRankTable(const uint8_t* bytes, size_t size, int nranks, std::vector<PeerInfo>* out);

}  // namespace coll
