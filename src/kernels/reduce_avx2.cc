// Reduction kernels for AVX2 + FMA + F16C (this file alone is compiled with those flags; see
// CMakeLists.txt). Selected at run time by reduce.cc.
#include "src/kernels/dispatch.h"

#if defined(__AVX2__) && defined(__F16C__)
#define COLL_KERNEL_ISA avx2
#define COLL_VEC_BYTES 32
#define COLL_F16C_WIDTH 8
#include "src/kernels/reduce_impl.h"

namespace coll::kernels::detail {
const KernelTable* avx2Table() {
  static const KernelTable table = avx2::makeTable("avx2");
  return &table;
}
}  // namespace coll::kernels::detail
#else
namespace coll::kernels::detail {
const KernelTable* avx2Table() { return nullptr; }
}  // namespace coll::kernels::detail
#endif
