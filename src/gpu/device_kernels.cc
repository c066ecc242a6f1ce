#include "src/gpu/device_kernels.h"

#include <mutex>
#include <unordered_map>

#include "src/kernels/device_kernel_abi.h"

namespace coll::gpu {
namespace {

namespace abi = kernels::devabi;

constexpr unsigned kThreads = 256;             // the kernels' __launch_bounds__
constexpr size_t kMaxBlocks = size_t{1} << 16;  // grid-stride loops cover the rest; enough for any GPU

// The quantization types, in device_kernel_abi.h's COLL_DEV_QUANT_TYPES order.
int quantIndex(collDataType_t t) { return t == collFloat32 ? 0 : t == collFloat16 ? 1 : t == collBfloat16 ? 2 : -1; }
constexpr collDataType_t kQuantTypes[] = {collFloat32, collFloat16, collBfloat16};

// The image's functions in one context, resolved once.
struct Kernels {
  bool ok = false;
  std::string why;
  CUfunction copy = nullptr;
  CUfunction reduce[collNumTypes] = {};
  CUfunction scale[collNumTypes] = {};
  CUfunction divide[collNumTypes] = {};
  CUfunction mismatch[collNumTypes] = {};
  CUfunction quantize[3][4] = {};  // [type][stochastic + 2 * residual]
  CUfunction dequantize[3] = {};
  CUfunction widen[3] = {};
  CUfunction accumulate = nullptr;
};

void load(const CudaDriver& cu, Kernels* k) {
  CUmodule module = nullptr;
  Status st = cudaCheck(cu.cuModuleLoadData(&module, kCollDeviceKernelImage), "cuModuleLoadData");
  if (!st.ok()) {
    k->why = "the device kernels did not load" +
             std::string(kCollDeviceKernelImageSize == 0 ? " (this build has no fatbin: nvcc was not found)" : "") +
             ": " + st.message();
    return;
  }
  // The module stays loaded for the process: its context is a retained primary context.
  auto get = [&](const char* name, CUfunction* f) {
    if (!st.ok()) return;
    st = cudaCheck(cu.cuModuleGetFunction(f, module, name), name);
  };
  get(abi::kCopyKernel, &k->copy);
  for (int t = 0; t < collNumTypes; ++t) {
    const auto dt = static_cast<collDataType_t>(t);
    get(abi::reduceKernelName(dt), &k->reduce[t]);
    get(abi::scaleKernelName(dt), &k->scale[t]);
    get(abi::divideKernelName(dt), &k->divide[t]);
    get(abi::countMismatchKernelName(dt), &k->mismatch[t]);
  }
  for (int q = 0; q < 3; ++q) {
    for (int mode = 0; mode < 4; ++mode) get(abi::quantize4KernelName(kQuantTypes[q], mode & 1, mode & 2), &k->quantize[q][mode]);
    get(abi::dequantize4KernelName(kQuantTypes[q]), &k->dequantize[q]);
    get(abi::widenKernelName(kQuantTypes[q]), &k->widen[q]);
  }
  get(abi::kDequantizeAccumulate4Kernel, &k->accumulate);
  if (!st.ok()) {
    k->why = "the device kernel image lacks a kernel: " + st.message();
    return;
  }
  k->ok = true;
}

// The current context's kernels (loaded on first use; a failure is remembered, not retried).
Status kernelsHere(const CudaDriver& cu, const Kernels** out) {
  CUcontext ctx = nullptr;
  COLL_CU_TRY(cu, cuCtxGetCurrent, &ctx);
  if (ctx == nullptr) return makeError(collInvalidUsage, "device kernels: no current CUDA context on this thread");
  static std::mutex mu;
  static auto* byContext = new std::unordered_map<CUcontext, Kernels*>();  // lives for the process
  std::lock_guard<std::mutex> lock(mu);
  Kernels*& k = (*byContext)[ctx];
  if (k == nullptr) {
    k = new Kernels();
    load(cu, k);
  }
  if (!k->ok) return makeError(collUnhandledCudaError, "%s", k->why.c_str());
  *out = k;
  return okStatus();
}

Status launch(const CudaDriver& cu, CUfunction f, size_t threads, void** params, CUstream stream, const char* what) {
  size_t blocks = (threads + kThreads - 1) / kThreads;
  blocks = blocks == 0 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks);
  return cudaCheck(
      cu.cuLaunchKernel(f, static_cast<unsigned>(blocks), 1, 1, kThreads, 1, 1, 0, stream, params, nullptr), what);
}

bool validType(collDataType_t t) { return static_cast<unsigned>(t) < static_cast<unsigned>(collNumTypes); }
bool aligned(const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }

}  // namespace

bool deviceKernelsAvailable(const CudaDriver& cu, std::string* why) {
  const Kernels* k = nullptr;
  Status st = kernelsHere(cu, &k);
  if (!st.ok() && why) *why = st.message();
  return st.ok();
}

Status deviceCopy(const CudaDriver& cu, void* dst, const void* src, size_t bytes, CUstream stream) {
  if (bytes == 0) return okStatus();
  const Kernels* k = nullptr;
  COLL_TRY(kernelsHere(cu, &k));
  uint64_t n = bytes;
  void* params[] = {&dst, &src, &n};
  return launch(cu, k->copy, (bytes + 15) / 16, params, stream, "deviceCopy");
}

Status deviceReduce(const CudaDriver& cu, void* dst, const void* const* srcs, int n, size_t count,
                    collDataType_t dtype, collRedOp_t op, CUstream stream) {
  if (!validType(dtype) || static_cast<unsigned>(op) > collMin || n < 1 || srcs == nullptr) {
    return makeError(collInvalidArgument, "deviceReduce: dtype %d / op %d / %d inputs: need a type, sum/prod/max/min "
                     "and at least one input", dtype, op, n);
  }
  if (count == 0) return okStatus();
  const Kernels* k = nullptr;
  COLL_TRY(kernelsHere(cu, &k));
  uint64_t cnt = count;
  int opArg = op;
  // Up to kMaxSources inputs per launch; each further launch starts from the previous result.
  for (int done = 0; done < n;) {
    abi::DevSources s{};
    int used = 0;
    if (done > 0) s.p[used++] = dst;
    while (used < abi::kMaxSources && done < n) s.p[used++] = srcs[done++];
    s.n = used;
    void* params[] = {&dst, &s, &cnt, &opArg};
    COLL_TRY(launch(cu, k->reduce[dtype], count, params, stream, "deviceReduce"));
  }
  return okStatus();
}

Status deviceScale(const CudaDriver& cu, void* dst, const void* src, size_t count, collDataType_t dtype,
                   double hostScalar, const void* deviceScalar, CUstream stream) {
  if (!validType(dtype)) return makeError(collInvalidArgument, "deviceScale: dtype %d", dtype);
  if (count == 0) return okStatus();
  const Kernels* k = nullptr;
  COLL_TRY(kernelsHere(cu, &k));
  uint64_t cnt = count;
  abi::DevScalar s{hostScalar, deviceScalar};
  void* params[] = {&dst, &src, &cnt, &s};
  return launch(cu, k->scale[dtype], count, params, stream, "deviceScale");
}

Status deviceDivide(const CudaDriver& cu, void* dst, const void* src, size_t count, collDataType_t dtype,
                    uint64_t divisor, CUstream stream) {
  if (!validType(dtype)) return makeError(collInvalidArgument, "deviceDivide: dtype %d", dtype);
  if (count == 0) return okStatus();
  const Kernels* k = nullptr;
  COLL_TRY(kernelsHere(cu, &k));
  uint64_t cnt = count;
  void* params[] = {&dst, &src, &cnt, &divisor};
  return launch(cu, k->divide[dtype], count, params, stream, "deviceDivide");
}

Status deviceCountMismatches(const CudaDriver& cu, const void* got, const void* want, size_t count,
                             collDataType_t dtype, unsigned long long* deviceCounter, CUstream stream) {
  if (!validType(dtype) || deviceCounter == nullptr) {
    return makeError(collInvalidArgument, "deviceCountMismatches: dtype %d / counter %p", dtype,
                     static_cast<void*>(deviceCounter));
  }
  if (count == 0) return okStatus();
  const Kernels* k = nullptr;
  COLL_TRY(kernelsHere(cu, &k));
  uint64_t cnt = count;
  void* params[] = {&got, &want, &cnt, &deviceCounter};
  return launch(cu, k->mismatch[dtype], count, params, stream, "deviceCountMismatches");
}

Status deviceQuantize4(const CudaDriver& cu, void* out, const void* in, collDataType_t dtype, size_t count,
                       const kernels::QuantParams& params, uint64_t firstElement, float* residual, CUstream stream) {
  const int q = quantIndex(dtype);
  if (q < 0 || !kernels::validQuantBlockSize(params.blockSize) ||
      firstElement % static_cast<uint64_t>(params.blockSize) != 0) {
    return makeError(collInvalidArgument,
                     "deviceQuantize4: dtype %d / block size %d / first element %llu: need float32, float16 or "
                     "bfloat16, a block size of 32/64/128/256 and a first element that is a multiple of it",
                     dtype, params.blockSize, static_cast<unsigned long long>(firstElement));
  }
  if (count == 0) return okStatus();
  const Kernels* k = nullptr;
  COLL_TRY(kernelsHere(cu, &k));
  auto* o = static_cast<uint8_t*>(out);
  uint64_t cnt = count, first = firstElement;
  int bs = params.blockSize;
  abi::DevQuantParams dp{static_cast<uint32_t>(params.seed), static_cast<uint32_t>(params.seed >> 32), params.rank,
                         static_cast<uint32_t>(params.step)};
  bool vecIn = aligned(in, 16), vecRes = residual != nullptr && aligned(residual, 16), al2 = aligned(out, 2);
  void* args[] = {&o, &in, &cnt, &bs, &dp, &first, &residual, &vecIn, &vecRes, &al2};
  // One thread per 8 elements of a block: the lanes of a block share a warp.
  const size_t threads = (count + bs - 1) / bs * (static_cast<size_t>(bs) / 8);
  const int mode = (params.stochastic ? 1 : 0) + (residual != nullptr ? 2 : 0);
  return launch(cu, k->quantize[q][mode], threads, args, stream, "deviceQuantize4");
}

Status deviceDequantize4(const CudaDriver& cu, void* out, collDataType_t dtype, const void* q, size_t count,
                         int blockSize, CUstream stream) {
  const int qi = quantIndex(dtype);
  if (qi < 0 || !kernels::validQuantBlockSize(blockSize)) {
    return makeError(collInvalidArgument,
                     "deviceDequantize4: dtype %d / block size %d: need float32, float16 or bfloat16 and a block "
                     "size of 32/64/128/256",
                     dtype, blockSize);
  }
  if (count == 0) return okStatus();
  const Kernels* k = nullptr;
  COLL_TRY(kernelsHere(cu, &k));
  auto* qb = static_cast<const uint8_t*>(q);
  uint64_t cnt = count;
  bool vec = aligned(out, 16), al2 = aligned(q, 2);
  void* args[] = {&out, &qb, &cnt, &blockSize, &vec, &al2};
  return launch(cu, k->dequantize[qi], (count + 7) / 8, args, stream, "deviceDequantize4");
}

Status deviceDequantizeAccumulate4(const CudaDriver& cu, float* acc, const void* q, size_t count, int blockSize,
                                   CUstream stream) {
  if (!kernels::validQuantBlockSize(blockSize)) {
    return makeError(collInvalidArgument, "deviceDequantizeAccumulate4: block size %d: need 32/64/128/256", blockSize);
  }
  if (count == 0) return okStatus();
  const Kernels* k = nullptr;
  COLL_TRY(kernelsHere(cu, &k));
  auto* qb = static_cast<const uint8_t*>(q);
  uint64_t cnt = count;
  bool vec = aligned(acc, 16), al2 = aligned(q, 2);
  void* args[] = {&acc, &qb, &cnt, &blockSize, &vec, &al2};
  return launch(cu, k->accumulate, (count + 7) / 8, args, stream, "deviceDequantizeAccumulate4");
}

Status deviceWiden(const CudaDriver& cu, float* dst, const void* src, collDataType_t dtype, size_t count,
                   CUstream stream) {
  const int qi = quantIndex(dtype);
  if (qi < 0) {
    return makeError(collInvalidArgument, "deviceWiden: dtype %d: need float32, float16 or bfloat16", dtype);
  }
  if (count == 0) return okStatus();
  const Kernels* k = nullptr;
  COLL_TRY(kernelsHere(cu, &k));
  uint64_t cnt = count;
  void* args[] = {&dst, &src, &cnt};
  return launch(cu, k->widen[qi], count, args, stream, "deviceWiden");
}

}  // namespace coll::gpu
