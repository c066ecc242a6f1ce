// A communicator's PreMulSum ops (see user_ops.h).
#include "src/comm/user_ops.h"

namespace coll {

Status UserOps::create(double scalar, const void* deviceScalar, collDataType_t dtype, collRedOp_t* op) {
  size_t index = 0;
  while (index < ops_.size() && ops_[index].live) ++index;
  if (index == ops_.size()) {
    if (ops_.size() >= 1024) {
      return makeError(collInvalidUsage,
                       "too many live PreMulSum ops (1024) on this communicator; destroy unused ones");
    }
    ops_.emplace_back();
  }
  ops_[index] = UserOp{true, dtype, scalar, deviceScalar};
  *op = static_cast<collRedOp_t>(collNumOps + static_cast<int>(index));
  return okStatus();
}

Status UserOps::destroy(collRedOp_t op) {
  int index = static_cast<int>(op) - collNumOps;
  if (index < 0 || index >= static_cast<int>(ops_.size()) || !ops_[index].live) {
    return makeError(collInvalidArgument, "reduction op %d is not a live user op of this communicator",
                     static_cast<int>(op));
  }
  ops_[index].live = false;
  return okStatus();
}

Status UserOps::check(collRedOp_t op, collDataType_t dtype) const {
  int index = static_cast<int>(op) - collNumOps;
  if (index < 0 || index >= static_cast<int>(ops_.size()) || !ops_[index].live) {
    return makeError(collInvalidArgument,
                     "reduction op %d is neither a built-in op nor a live PreMulSum op of this "
                     "communicator",
                     static_cast<int>(op));
  }
  if (ops_[index].dtype != dtype) {
    return makeError(collInvalidArgument, "PreMulSum op %d was created for datatype %d, used with datatype %d",
                     static_cast<int>(op), ops_[index].dtype, dtype);
  }
  return okStatus();
}

bool UserOps::scalarOf(collRedOp_t op, double* scalar, const void** deviceScalar) const {
  int index = static_cast<int>(op) - collNumOps;
  if (index < 0 || index >= static_cast<int>(ops_.size()) || !ops_[index].live) return false;
  *scalar = ops_[index].scalar;
  if (deviceScalar) *deviceScalar = ops_[index].deviceScalar;
  return true;
}

}  // namespace coll
