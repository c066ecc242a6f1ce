// Reduction kernels for AVX-512 F/BW/VL/DQ (this file alone is compiled with those flags; see
// CMakeLists.txt). Selected at run time by reduce.cc.
#include "src/kernels/dispatch.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__F16C__)
#define COLL_KERNEL_ISA avx512
#define COLL_VEC_BYTES 64
#define COLL_F16C_WIDTH 16
#include "src/kernels/reduce_impl.h"

namespace coll::kernels::detail {
const KernelTable* avx512Table() {
  static const KernelTable table = avx512::makeTable("avx512");
  return &table;
}
}  // namespace coll::kernels::detail
#else
namespace coll::kernels::detail {
const KernelTable* avx512Table() { return nullptr; }
}  // namespace coll::kernels::detail
#endif
