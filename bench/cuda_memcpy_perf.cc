// cuda_memcpy_perf: the copy bandwidths of one GPU, the reference the other GPU figures are stated
// against: device to device (cuMemcpyAsync within one device), pinned host to device and device to
// pinned host, over nccl-tests' sizes (-b/-e/-f). Through the library's CUDA driver (loaded at run
// time, COLL_CUDA_DRIVER), so it builds without the CUDA toolkit.
//
// GB/s = bytes copied / time (1 GB = 1e9 B), as nccl-tests' algbw and nvbandwidth count it; a
// device-to-device copy reads and writes, so it moves twice that through device memory.
// Time: n copies queued on one non-blocking stream, the stream synchronized before and after.
//
// Exit status: 0 measured; 77 no CUDA driver or no device (the reason on stderr); 2 bad usage or a
// CUDA error.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "src/gpu/cuda_driver.h"

namespace {

using coll::gpu::CudaDriver;
namespace cu = coll::cu;

bool parseSize(const char* text, size_t* out) {
  char* end = nullptr;
  double v = strtod(text, &end);
  if (end == text || v < 0) return false;
  double mult = 1;
  if (*end == 'K' || *end == 'k') mult = 1024.0, ++end;
  else if (*end == 'M' || *end == 'm') mult = 1024.0 * 1024, ++end;
  else if (*end == 'G' || *end == 'g') mult = 1024.0 * 1024 * 1024, ++end;
  if (*end == 'B' || *end == 'b') ++end;
  if (*end != '\0') return false;
  *out = static_cast<size_t>(v * mult);
  return true;
}

int usage(FILE* f, int rc) {
  fprintf(f,
          "usage: cuda_memcpy_perf [options]\n"
          "  -b N   smallest size (K/M/G)   [64K]\n"
          "  -e N   largest size            [256M]\n"
          "  -f F   size factor             [4]\n"
          "  -n N   timed copies per size   [20]\n"
          "  -w N   warm-up copies          [5]\n"
          "  -d D   device ordinal          [0]\n"
          "Prints GB/s (bytes / time) of device-to-device, pinned host-to-device and device-to-host\n"
          "copies, then '# summary d2d_GBps X h2d_GBps Y d2h_GBps Z' at the largest size.\n"
          "Exit: 0 done, 77 no CUDA driver or device, 2 usage or CUDA error.\n");
  return rc;
}

bool check(CUresult r, const char* what) {
  if (r == cu::kSuccess) return true;
  fprintf(stderr, "cuda_memcpy_perf: %s\n", coll::gpu::cudaCheck(r, what).message().c_str());
  return false;
}

// Microseconds per copy: warm-up, synchronize, n copies, synchronize.
bool timeCopies(const CudaDriver& d, CUstream s, void* dst, const void* src, size_t bytes, int warmup, int iters,
                double* us) {
  const auto dp = reinterpret_cast<CUdeviceptr>(dst);
  const auto sp = reinterpret_cast<CUdeviceptr>(src);
  for (int i = 0; i < warmup; ++i) {
    if (!check(d.cuMemcpyAsync(dp, sp, bytes, s), "cuMemcpyAsync")) return false;
  }
  if (!check(d.cuStreamSynchronize(s), "cuStreamSynchronize")) return false;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    if (!check(d.cuMemcpyAsync(dp, sp, bytes, s), "cuMemcpyAsync")) return false;
  }
  if (!check(d.cuStreamSynchronize(s), "cuStreamSynchronize")) return false;
  *us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / std::max(iters, 1);
  return true;
}

double gbps(size_t bytes, double us) { return us > 0 ? static_cast<double>(bytes) / (us * 1e-6) / 1e9 : 0; }

}  // namespace

int main(int argc, char** argv) {
  size_t minBytes = 64u << 10, maxBytes = 256u << 20;
  double factor = 4;
  int iters = 20, warmup = 5, ordinal = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") return usage(stdout, 0);
    if (i + 1 >= argc) return usage(stderr, 2);
    const char* v = argv[++i];
    bool ok = true;
    if (a == "-b") ok = parseSize(v, &minBytes);
    else if (a == "-e") ok = parseSize(v, &maxBytes);
    else if (a == "-f") ok = (factor = atof(v)) > 1;
    else if (a == "-n") ok = (iters = atoi(v)) > 0;
    else if (a == "-w") ok = (warmup = atoi(v)) >= 0;
    else if (a == "-d") ok = (ordinal = atoi(v)) >= 0;
    else ok = false;
    if (!ok) {
      fprintf(stderr, "cuda_memcpy_perf: bad option %s %s\n", a.c_str(), v);
      return usage(stderr, 2);
    }
  }
  if (maxBytes < minBytes) maxBytes = minBytes;
  if (minBytes == 0) minBytes = 1;

  std::string why;
  const CudaDriver* d = coll::gpu::cudaDriver(&why);
  if (d == nullptr) {
    fprintf(stderr, "cuda_memcpy_perf: no CUDA driver (%s); nothing measured\n", why.c_str());
    return 77;
  }
  if (d->deviceCount <= 0 || ordinal >= d->deviceCount) {
    fprintf(stderr, "cuda_memcpy_perf: %s has %d device(s), no device %d; nothing measured\n", d->path.c_str(),
            d->deviceCount, ordinal);
    return 77;
  }
  coll::Status st = coll::gpu::setCurrentDevice(*d, ordinal);
  if (!st.ok()) {
    fprintf(stderr, "cuda_memcpy_perf: %s\n", st.message().c_str());
    return 2;
  }
  CUstream s = nullptr;
  CUdeviceptr a = 0, b = 0;
  void* pinned = nullptr;
  if (!check(d->cuStreamCreate(&s, cu::kStreamNonBlocking), "cuStreamCreate") ||
      !check(d->cuMemAlloc(&a, maxBytes), "cuMemAlloc") || !check(d->cuMemAlloc(&b, maxBytes), "cuMemAlloc") ||
      !check(d->cuMemHostAlloc(&pinned, maxBytes, cu::kMemHostAllocPortable), "cuMemHostAlloc")) {
    return 2;
  }
  memset(pinned, 1, maxBytes);
  if (!check(d->cuMemsetD8Async(a, 2, maxBytes, s), "cuMemsetD8Async") ||
      !check(d->cuStreamSynchronize(s), "cuStreamSynchronize"))
    return 2;
  char bus[32] = "?";
  CUdevice dev = 0;
  if (d->cuDeviceGet(&dev, ordinal) == cu::kSuccess) (void)d->cuDeviceGetPCIBusId(bus, sizeof(bus) - 1, dev);
  printf("# cuda_memcpy_perf: device %d [%s], driver %s (version %d); %d copies per size after %d warm-up\n", ordinal,
         bus, d->path.c_str(), d->version, iters, warmup);
  printf("# GB/s = bytes / time per copy (a device-to-device copy also reads them: 2x through memory)\n");
  printf("# %12s  %9s %8s  %9s %8s  %9s %8s\n", "size(B)", "d2d(us)", "GB/s", "h2d(us)", "GB/s", "d2h(us)", "GB/s");
  void* da = reinterpret_cast<void*>(a);
  void* db = reinterpret_cast<void*>(b);
  double last[3] = {0, 0, 0};
  for (size_t bytes = minBytes; bytes <= maxBytes;) {
    double t[3];
    if (!timeCopies(*d, s, db, da, bytes, warmup, iters, &t[0]) ||
        !timeCopies(*d, s, da, pinned, bytes, warmup, iters, &t[1]) ||
        !timeCopies(*d, s, pinned, da, bytes, warmup, iters, &t[2]))
      return 2;
    printf("  %12zu  %9.2f %8.2f  %9.2f %8.2f  %9.2f %8.2f\n", bytes, t[0], gbps(bytes, t[0]), t[1], gbps(bytes, t[1]),
           t[2], gbps(bytes, t[2]));
    fflush(stdout);
    for (int k = 0; k < 3; ++k) last[k] = gbps(bytes, t[k]);
    size_t next = static_cast<size_t>(static_cast<double>(bytes) * factor);
    if (next <= bytes) break;
    bytes = next;
  }
  printf("# summary d2d_GBps %.2f h2d_GBps %.2f d2h_GBps %.2f\n", last[0], last[1], last[2]);
  (void)d->cuMemFreeHost(pinned);
  (void)d->cuMemFree(a);
  (void)d->cuMemFree(b);
  (void)d->cuStreamDestroy(s);
  return 0;
}
