// Test-only hook of libnccl-net-collective-ibdouble.so: installs the verbs test double in the same
// library image as the plugin's ibverbs transport, before NCCL (or the driver) calls init.
#include "tests/ib_double/verbs_double.h"
#include "transports/ib/verbs_api.h"

namespace {

// A dlopen'ed plugin has its own hidden copy of the transport, so only code linked into that image
// can reach its VerbsApi table; a load-time constructor is the one entry point that needs no export.
__attribute__((constructor)) void installVerbsDouble() {
  coll::setVerbsApiForTesting(&coll::testing::verbsTestDouble());
}

}  // namespace
