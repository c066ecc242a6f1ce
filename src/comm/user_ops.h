// UserOps: a communicator's PreMulSum reduction ops (collNumOps + index), each made for one
// datatype with its scalar: a value read at creation, or the address of one in device memory
// (collScalarDevice), read by each call when its stream reaches it.
#pragma once

#include <vector>

#include "collective/collective.h"
#include "src/base/status.h"

namespace coll {

class UserOps {
 public:
  Status create(double scalar, const void* deviceScalar, collDataType_t dtype, collRedOp_t* op);
  Status destroy(collRedOp_t op);
  // True for a live op (sets *scalar, and *deviceScalar: nullptr for a host scalar).
  bool scalarOf(collRedOp_t op, double* scalar, const void** deviceScalar = nullptr) const;
  // A user op (>= collNumOps) must be live and made for `dtype`.
  Status check(collRedOp_t op, collDataType_t dtype) const;

 private:
  struct UserOp {
    bool live = false;
    collDataType_t dtype = collFloat32;
    double scalar = 1.0;
    const void* deviceScalar = nullptr;
  };
  std::vector<UserOp> ops_;
};

}  // namespace coll
