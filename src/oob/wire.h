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
constexpr size_t kBootstrapEntryBytes = 52;         // one rank-table entry (PeerInfo)
constexpr size_t kBootstrapRegistrationBytes = 76;  // magic, version, rank, nranks, nonce, entry

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
};

// Decodes a registration the root received. Returns the reply code for the registrant: 0 when
// acceptable; otherwise malformed, another unique id (`commNonce`), nranks out of range or not
// `knownNranks` (< 0: nobody registered yet), rank out of range. Duplicates are the caller's check.
uint32_t parseBootstrapRegistration(const uint8_t* bytes, size_t size, uint64_t commNonce, int knownNranks,
                                    BootstrapRegistration* out);

// Decodes a rank table of `nranks` entries; fails on a wrong size or a malformed entry.
Status parseRankTable(const uint8_t* bytes, size_t size, int nranks, std::vector<PeerInfo>* out);

}  // namespace coll
