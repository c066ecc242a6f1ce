// Launching the device kernels (src/kernels/cuda/device_kernels.cuh) through the CUDA driver: the
// embedded fatbin is loaded once per context (cuModuleLoadData), its kernels are looked up by the
// names of src/kernels/device_kernel_abi.h and launched with cuLaunchKernel. No CUDA runtime.
//
// Every function works on the calling thread's current context (setCurrentDevice). Pointers are
// device addresses, element pointers element-aligned; `stream` is a CUstream (nullptr: the legacy
// stream). Launches are asynchronous: the Status reports what the launch itself reports (no
// kernels in the image for this GPU, an invalid argument), not faults during execution, which
// surface on the stream. The results are the CPU kernels' (src/kernels/reduce.h, quantize.h) bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "collective/collective.h"
#include "src/base/status.h"
#include "src/gpu/cuda_driver.h"
#include "src/kernels/quantize.h"

namespace coll::gpu {

// The fatbin of device_kernels.cu (sm_80, sm_90, compute_90 PTX), generated into the build tree by
// cmake/CollEmbedBinary.cmake; size 0 in a build without nvcc.
extern const unsigned char kCollDeviceKernelImage[];
extern const size_t kCollDeviceKernelImageSize;

// Whether the kernels load in the current context (loading them on first use); when not, why.
bool deviceKernelsAvailable(const CudaDriver& cu, std::string* why);

// dst = src, `bytes` bytes (no overlap).
Status deviceCopy(const CudaDriver& cu, void* dst, const void* src, size_t bytes, CUstream stream);

// dst[i] = srcs[0][i] op ... op srcs[n-1][i], left to right; op sum, prod, max or min; n >= 1
// (more than 8 inputs: launches in a chain, each on the previous result, which matches the CPU's
// single pass for integers and float32/64 but rounds float16/bfloat16/float8 once per launch).
// dst may alias srcs[0]. The array `srcs` itself is host memory.
Status deviceReduce(const CudaDriver& cu, void* dst, const void* const* srcs, int n, size_t count,
                    collDataType_t dtype, collRedOp_t op, CUstream stream);

// dst[i] = src[i] * scalar (kernels::scale's rules): the scalar is read on the device from
// `deviceScalar` (one element of dtype) when that is not null, else it is `hostScalar`.
Status deviceScale(const CudaDriver& cu, void* dst, const void* src, size_t count, collDataType_t dtype,
                   double hostScalar, const void* deviceScalar, CUstream stream);

// dst[i] = src[i] / divisor (kernels::divide's rules: collAvg's last step).
Status deviceDivide(const CudaDriver& cu, void* dst, const void* src, size_t count, collDataType_t dtype,
                    uint64_t divisor, CUstream stream);

// *deviceCounter += the number of elements whose bytes differ between got and want.
Status deviceCountMismatches(const CudaDriver& cu, const void* got, const void* want, size_t count,
                             collDataType_t dtype, unsigned long long* deviceCounter, CUstream stream);

// The 4-bit quantization (quantize.h's arguments and validation).
Status deviceQuantize4(const CudaDriver& cu, void* out, const void* in, collDataType_t dtype, size_t count,
                       const kernels::QuantParams& params, uint64_t firstElement, float* residual, CUstream stream);
Status deviceDequantize4(const CudaDriver& cu, void* out, collDataType_t dtype, const void* q, size_t count,
                         int blockSize, CUstream stream);
// dst[i] = src[i] as float32 (kernels::convertToFloat), for the quantization types.
Status deviceWiden(const CudaDriver& cu, float* dst, const void* src, collDataType_t dtype, size_t count,
                   CUstream stream);
Status deviceDequantizeAccumulate4(const CudaDriver& cu, float* acc, const void* q, size_t count, int blockSize,
                                   CUstream stream);

}  // namespace coll::gpu
