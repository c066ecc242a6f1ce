// COLL_CHECK: every rank compares each call's fingerprint (collective, count, type, op, root) with
// every other rank's, and a mismatch is an error naming the ranks and what differs.
#pragma once

#include <cstdint>
#include <vector>

#include "src/base/status.h"
#include "src/schedule/coll_args.h"

namespace coll {

// COLL_CHECK=1.
bool callCheckEnabled();

// COLL_CHECK's view of one call. Fixed size, so the check's own all-gather matches whatever the
// ranks called.
struct CallFingerprint {
  int32_t kind, dtype, op, root;
  uint64_t count;
};

// The fields of `args` that every rank must agree on (op only for reductions, root only for
// rooted collectives).
CallFingerprint fingerprintOf(const CollArgs& args);

// Every rank holds the same fingerprints, so every rank reports the same groups: the ranks of each
// distinct call (rank 0's first), and every field in which the calls differ.
Status describeCallMismatch(const std::vector<CallFingerprint>& all);

}  // namespace coll
