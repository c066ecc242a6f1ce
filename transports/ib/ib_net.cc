// Placeholder until the ibverbs transport lands: reports itself unavailable.
#include "transports/net.h"

namespace coll {

bool ibAvailable(std::string* why) {
  *why = "the ib transport is not implemented yet";
  return false;
}
Status createIbNet(Bootstrap&, std::unique_ptr<NetTransport>*) {
  return makeError(collInvalidUsage, "the ib transport is not implemented yet");
}

}  // namespace coll
