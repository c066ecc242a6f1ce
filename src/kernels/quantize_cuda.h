// CUDA launchers of the 4-bit quantization kernels (src/kernels/cuda/quantize.cu): the same
// records, residuals and dequantized values as the CPU kernels in quantize.h, bit for bit.
// Built only where the CUDA toolkit is found (target collective_cuda_kernels); includes no CUDA
// header, so callers compile with any C++ compiler.
#pragma once

#include <cstddef>
#include <cstdint>

#include "src/base/status.h"
#include "src/kernels/quantize.h"

namespace coll::kernels::cuda {

// All pointers are device pointers; `stream` is a cudaStream_t (nullptr: the legacy default
// stream). The launch is asynchronous: the Status reports launch errors (bad arguments, no
// device, a kernel image missing for this GPU), not later execution faults, which surface on the
// stream as usual. Arguments are validated as in quantize.h (invalid ones: collInvalidArgument).
// Vector loads are used where pointers allow; any alignment of an element type is accepted.
Status quantize4(void* out, const void* in, collDataType_t dtype, size_t count, const QuantParams& params,
                 uint64_t firstElement, float* residual, void* stream);
Status dequantize4(void* out, collDataType_t dtype, const void* q, size_t count, int blockSize, void* stream);
Status dequantizeAccumulate4(float* acc, const void* q, size_t count, int blockSize, void* stream);

}  // namespace coll::kernels::cuda
