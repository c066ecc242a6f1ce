// Placeholder until the UCX transport lands: reports itself unavailable.
#include "transports/net.h"

namespace coll {

bool ucxAvailable(bool* hasRdma, std::string* why) {
  *hasRdma = false;
  *why = "the ucx transport is not implemented yet";
  return false;
}
Status createUcxNet(Bootstrap&, std::unique_ptr<NetTransport>*) {
  return makeError(collInvalidUsage, "the ucx transport is not implemented yet");
}

}  // namespace coll
