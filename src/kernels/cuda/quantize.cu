// CUDA 4-bit quantization (sm_80, sm_90): the launchers of quantize_cuda.h over the kernels in
// quantize_kernels.cuh. Built with -fmad=false -prec-div=true -ftz=false; the kernels also spell out
// every rounding (__fdiv_rn, __fadd_rn, ...) so no contraction or approximate division can creep in.
#include <cuda_runtime.h>

#include <cstdint>

#include "src/kernels/cuda/quantize_kernels.cuh"
#include "src/kernels/quantize_cuda.h"

namespace coll::kernels::cuda {
namespace {

using namespace dev;

bool quantType(collDataType_t t) { return t == collFloat32 || t == collFloat16 || t == collBfloat16; }
bool aligned(const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }

unsigned gridFor(size_t threads) {
  const size_t blocks = (threads + kThreads - 1) / kThreads;
  // Grid-stride loops cover the rest; this many blocks saturate any current GPU.
  return static_cast<unsigned>(blocks < (size_t{1} << 20) ? (blocks ? blocks : 1) : (size_t{1} << 20));
}

Status launchStatus(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return okStatus();
  return makeError(collUnhandledCudaError,
                   "%s: kernel launch failed: %s (check that the GPU is sm_80 or newer and "
                   "that the pointers are device memory)",
                   what, cudaGetErrorString(err));
}

template <int DT>
void launchQuantize(unsigned grid, cudaStream_t st, void* out, const void* in, size_t count, const QuantParams& p,
                    DeviceParams dp, uint64_t first, float* res, bool vecIn, bool vecRes, bool al2) {
  auto* o = static_cast<uint8_t*>(out);
  const int bs = p.blockSize;
  if (p.stochastic) {
    if (res) {
      quantizeKernel<DT, true, true><<<grid, kThreads, 0, st>>>(o, in, count, bs, dp, first, res, vecIn, vecRes, al2);
    } else {
      quantizeKernel<DT, true, false><<<grid, kThreads, 0, st>>>(o, in, count, bs, dp, first, res, vecIn, vecRes, al2);
    }
  } else if (res) {
    quantizeKernel<DT, false, true><<<grid, kThreads, 0, st>>>(o, in, count, bs, dp, first, res, vecIn, vecRes, al2);
  } else {
    quantizeKernel<DT, false, false><<<grid, kThreads, 0, st>>>(o, in, count, bs, dp, first, res, vecIn, vecRes, al2);
  }
}

}  // namespace

Status quantize4(void* out, const void* in, collDataType_t dtype, size_t count, const QuantParams& params,
                 uint64_t firstElement, float* residual, void* stream) {
  if (!quantType(dtype) || !validQuantBlockSize(params.blockSize) ||
      firstElement % static_cast<uint64_t>(params.blockSize) != 0) {
    return makeError(collInvalidArgument,
                     "quantize4 (CUDA): dtype %d / block size %d / first element %llu: need "
                     "float32, float16 or bfloat16, a block size of 32/64/128/256 and a first element that is a "
                     "multiple of it",
                     dtype, params.blockSize, static_cast<unsigned long long>(firstElement));
  }
  if (count == 0) return okStatus();
  const DeviceParams dp{static_cast<uint32_t>(params.seed), static_cast<uint32_t>(params.seed >> 32), params.rank,
                        static_cast<uint32_t>(params.step)};
  const size_t threads = (count + params.blockSize - 1) / params.blockSize * (params.blockSize / kPerThread);
  const unsigned grid = gridFor(threads);
  auto st = static_cast<cudaStream_t>(stream);
  const bool vecIn = aligned(in, 16), vecRes = residual && aligned(residual, 16), al2 = aligned(out, 2);
  switch (dtype) {
    case collFloat16:
      launchQuantize<collFloat16>(grid, st, out, in, count, params, dp, firstElement, residual, vecIn, vecRes, al2);
      break;
    case collBfloat16:
      launchQuantize<collBfloat16>(grid, st, out, in, count, params, dp, firstElement, residual, vecIn, vecRes, al2);
      break;
    default:
      launchQuantize<collFloat32>(grid, st, out, in, count, params, dp, firstElement, residual, vecIn, vecRes, al2);
      break;
  }
  return launchStatus("quantize4 (CUDA)");
}

Status dequantize4(void* out, collDataType_t dtype, const void* q, size_t count, int blockSize, void* stream) {
  if (!quantType(dtype) || !validQuantBlockSize(blockSize)) {
    return makeError(collInvalidArgument,
                     "dequantize4 (CUDA): dtype %d / block size %d: need float32, float16 or "
                     "bfloat16 and a block size of 32/64/128/256",
                     dtype, blockSize);
  }
  if (count == 0) return okStatus();
  const unsigned grid = gridFor((count + kPerThread - 1) / kPerThread);
  auto st = static_cast<cudaStream_t>(stream);
  const auto* qb = static_cast<const uint8_t*>(q);
  const bool vec = aligned(out, 16), al2 = aligned(q, 2);
  switch (dtype) {
    case collFloat16:
      dequantizeKernel<collFloat16><<<grid, kThreads, 0, st>>>(out, qb, count, blockSize, vec, al2);
      break;
    case collBfloat16:
      dequantizeKernel<collBfloat16><<<grid, kThreads, 0, st>>>(out, qb, count, blockSize, vec, al2);
      break;
    default: dequantizeKernel<collFloat32><<<grid, kThreads, 0, st>>>(out, qb, count, blockSize, vec, al2); break;
  }
  return launchStatus("dequantize4 (CUDA)");
}

Status dequantizeAccumulate4(float* acc, const void* q, size_t count, int blockSize, void* stream) {
  if (!validQuantBlockSize(blockSize)) {
    return makeError(collInvalidArgument, "dequantizeAccumulate4 (CUDA): block size %d: need 32/64/128/256", blockSize);
  }
  if (count == 0) return okStatus();
  const unsigned grid = gridFor((count + kPerThread - 1) / kPerThread);
  dequantizeAccumulateKernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      acc, static_cast<const uint8_t*>(q), count, blockSize, aligned(acc, 16), aligned(q, 2));
  return launchStatus("dequantizeAccumulate4 (CUDA)");
}

}  // namespace coll::kernels::cuda
