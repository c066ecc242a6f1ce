#include "src/comm/device_ipc.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>

#include "src/base/align.h"
#include "src/base/config.h"
#include "src/base/log.h"
#include "src/gpu/device_kernels.h"
#include "src/kernels/device_kernel_abi.h"
#include "src/kernels/quantize.h"

namespace coll {

const StringKnob kGpuIpc(
    "COLL_GPU_IPC", "auto",
    "Device buffers of ranks all on one host: collectives device to device through CUDA IPC "
    "(all but point-to-point) instead of staging through host memory. auto or 1: when every rank can map "
    "every other's memory (1 warns when not), 0: never. Set it alike on every rank.",
    {KnobSection::Transports, 62});
const BytesKnob kGpuIpcChunk("COLL_GPU_IPC_CHUNK", "2M",
                             "The CUDA IPC path's chunk: each rank's device scratch is 4 chunks (two halves of "
                             "input and output); one chunk of every rank's input is reduced per step.",
                             {KnobSection::Transports, 63});

const StringKnob kGpuIpcHandle("COLL_GPU_IPC_HANDLE", "auto",
                               "How the CUDA IPC path shares each rank's device scratch with the other processes: "
                               "auto = a cuMem allocation exported as a POSIX file descriptor (passed over an "
                               "abstract Unix socket) where the driver supports it, else a legacy IPC handle; fd = "
                               "file descriptors only; legacy = legacy cuIpc handles only. Set it alike on every rank.",
                               {KnobSection::Transports, 64});

namespace {

std::atomic<uint64_t> gIpcCollectives{0};
std::atomic<uint64_t> gIpcRegistered{0};

CUdeviceptr dptr(const void* p) { return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p)); }

// Tells this process from another with the same pid (another pid namespace on the host).
uint64_t processNonce() {
  static const uint64_t nonce = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(getpid());
  }();
  return nonce;
}

// One rank's part of the setup all-gather (fixed layout: every rank is this build).
struct IpcRecord {
  CUipcMemHandle handle;  // legacy handle
  uint64_t ptr;
  uint64_t nonce;
  int64_t pid;
  uint64_t bytes;  // the scratch's allocation (a file descriptor's mapping size)
  char bus[32];
  char socket[64];  // the abstract socket this rank receives file descriptors on ("": none)
  int32_t device;
  int32_t ok;        // this rank set its side up
  int32_t fdShared;  // 1: the scratch is a cuMem allocation shared by file descriptor; 0: legacy handle
  int32_t pad;
};

// What comes with a file descriptor over the socket.
struct FdHeader {
  uint64_t nonce;  // the sender's process nonce, as in its record
  int32_t rank;
  int32_t pad;
};

bool sameProcess(const IpcRecord& a, const IpcRecord& b) { return a.pid == b.pid && a.nonce == b.nonce; }

// Whether `device` supports cuMem allocations exportable as POSIX file descriptors.
bool fdSharingSupported(const gpu::CudaDriver& cu, int device) {
  CUdevice dev = -1;
  int vmm = 0, fd = 0;
  return cu.hasVirtualMemory() && cu.cuDeviceGet(&dev, device) == cu::kSuccess &&
         cu.cuDeviceGetAttribute(&vmm, cu::kDeviceAttributeVirtualMemoryManagementSupported, dev) == cu::kSuccess &&
         cu.cuDeviceGetAttribute(&fd, cu::kDeviceAttributeHandleTypePosixFileDescriptorSupported, dev) ==
             cu::kSuccess &&
         vmm != 0 && fd != 0;
}

// A name for this rank's abstract socket, unique on the host (pid, process nonce, a counter).
std::string socketName(int rank) {
  static std::atomic<uint64_t> serial{0};
  char name[64];
  snprintf(name, sizeof name, "collective-ipc-%lld-%016llx-%llu-%d", static_cast<long long>(getpid()),
           static_cast<unsigned long long>(processNonce()), static_cast<unsigned long long>(serial++), rank);
  return name;
}

// Hands the file descriptors of the ranks' cuMem scratches to the ranks of other processes:
// every exporting rank sends first, the ranks agree that every send worked (so nobody waits for a
// descriptor that will not come), then each rank receives the ones it expects into (*received)[q].
// *ok and *why: this rank lacks a descriptor. A Status error only for a failed host collective.
Status exchangeDescriptors(const std::vector<IpcRecord>& all, int rank, UniqueFd exportFd, FdListener& listener,
                           const DeviceIpc::HostOps& ops, std::vector<UniqueFd>* received, bool* ok, std::string* why) {
  const int nranks = static_cast<int>(all.size());
  const IpcRecord& mine = all[static_cast<size_t>(rank)];
  int32_t sent = 1;
  std::string sendWhy;
  const FdHeader header{mine.nonce, rank, 0};
  for (int p = 0; p < nranks && exportFd.valid(); ++p) {
    const IpcRecord& r = all[static_cast<size_t>(p)];
    if (sameProcess(r, mine)) continue;
    Status s = r.socket[0] == '\0' ? makeError(collSystemError, "rank %d has no socket for descriptors", p)
                                   : sendFd(r.socket, &header, sizeof header, exportFd.get());
    if (!s.ok()) {
      sent = 0, sendWhy = "sending the scratch's file descriptor to rank " + std::to_string(p) + ": " + s.message();
      break;
    }
  }
  exportFd.reset();  // the receivers hold their own copies
  std::vector<int32_t> sentAll(static_cast<size_t>(nranks));
  COLL_TRY(ops.allGather(&sent, sentAll.data(), sizeof sent));
  for (int p = 0; p < nranks; ++p) {
    if (sentAll[static_cast<size_t>(p)] == 0) {
      *ok = false, *why = p == rank ? sendWhy : "rank " + std::to_string(p) + " could not send its file descriptor";
      return okStatus();
    }
  }
  int expected = 0;
  for (const IpcRecord& r : all) expected += r.fdShared && !sameProcess(r, mine) ? 1 : 0;
  for (int i = 0; i < expected; ++i) {
    FdHeader h{};
    UniqueFd fd;
    pid_t pid = 0;
    Status s = listener.receive(&h, sizeof h, &fd, &pid, ops.deadline);
    if (!s.ok()) {
      *ok = false, *why = "receiving file descriptors: " + s.message();
      return okStatus();
    }
    // Anyone on the host may connect: the kernel's word on the sender's pid must match the rank's record.
    const IpcRecord* from = h.rank >= 0 && h.rank < nranks ? &all[static_cast<size_t>(h.rank)] : nullptr;
    if (from == nullptr || !from->fdShared || from->pid != pid || from->nonce != h.nonce ||
        (*received)[static_cast<size_t>(h.rank)].valid()) {
      *ok = false, *why = "a file descriptor from an unexpected sender";
      return okStatus();
    }
    (*received)[static_cast<size_t>(h.rank)] = std::move(fd);
  }
  return okStatus();
}

// The ordinal of the device with PCI bus id `bus` in this process (-1: not visible here).
int localOrdinalOf(const gpu::CudaDriver& cu, const char* bus) {
  for (int i = 0; i < cu.deviceCount; ++i) {
    CUdevice d = -1;
    char mine[32] = {};
    if (cu.cuDeviceGet(&d, i) != cu::kSuccess || cu.cuDeviceGetPCIBusId(mine, sizeof mine, d) != cu::kSuccess) continue;
    if (strncmp(mine, bus, sizeof mine) == 0) return i;
  }
  return -1;
}

// One rank's registered buffers of a call, as the ranks exchange them: each buffer's
// allocation (its IPC handle and base address in the owner's process) and offset in it.
struct RegisteredRecord {
  CUipcMemHandle sendHandle;
  CUipcMemHandle recvHandle;
  uint64_t sendBase;
  uint64_t sendOffset;
  uint64_t recvBase;
  uint64_t recvOffset;
  int32_t ok;        // every buffer this rank uses is registered device memory, exported
  int32_t overlaps;  // its send and receive buffers overlap (in place)
};

}  // namespace

uint64_t deviceIpcCollectives() { return gIpcCollectives.load(std::memory_order_relaxed); }
uint64_t deviceIpcRegisteredCollectives() { return gIpcRegistered.load(std::memory_order_relaxed); }

bool DeviceIpc::enabled() { return kGpuIpc.get() != "0"; }

bool DeviceIpc::supports(const CollArgs& a, int nranks) {
  if (a.count == 0) return false;
  switch (a.kind) {
    case CollKind::AllReduce:
      if (a.compress.blockSize == 0) return a.op < collNumOps;
      // Compressed: where the host path would compress (Comm::compressedAllReduce runs it plain
      // on one rank or below minBytes; the staged path does that).
      return nranks > 1 && (a.op == collSum || a.op == collAvg) &&
             a.count * dataTypeSize(a.dtype) >= a.compress.minBytes;
    case CollKind::Reduce:
    case CollKind::ReduceScatter: return a.compress.blockSize == 0 && a.op < collNumOps;
    case CollKind::Broadcast:
    case CollKind::AllGather:
    case CollKind::Gather:
    case CollKind::Scatter:
    case CollKind::AlltoAll: return true;
    default: return false;
  }
}

bool DeviceIpc::segmented(CollKind kind) {
  return kind == CollKind::ReduceScatter || kind == CollKind::AlltoAll || kind == CollKind::Scatter;
}

bool DeviceIpc::handles(const CollArgs& a) const {
  if (!supports(a, nranks_)) return false;
  if (segmented(a.kind)) return chunk_ >= static_cast<size_t>(nranks_) * dataTypeSize(a.dtype);
  return a.compress.blockSize == 0 || compressedRoundBlocks(a.compress.blockSize) > 0;
}

uint64_t DeviceIpc::compressedRoundBlocks(int blockSize) const {
  // K blocks per round: the input area holds nranks slots of K records; the output area K records
  // and then the float32 sum of K blocks.
  const uint64_t record = kernels::quantRecordBytes(blockSize), P = static_cast<uint64_t>(nranks_);
  const uint64_t B = static_cast<uint64_t>(blockSize), chunk = chunk_;
  auto slot = [&](uint64_t k) { return roundUp(k * record, uint64_t{16}); };
  uint64_t k = std::min(chunk / P / record, chunk / (record + 4 * B));
  while (k > 0 && (P * slot(k) > chunk || slot(k) + k * B * 4 > chunk)) --k;
  return k;
}

Status DeviceIpc::mapAllocation(CUmemGenericAllocationHandle handle, size_t bytes, int device, CUdeviceptr* out) {
  CUdeviceptr p = 0;
  COLL_CU_TRY(cu_, cuMemAddressReserve, &p, bytes, 0, 0, 0);
  CUresult r = cu_.cuMemMap(p, bytes, 0, handle, 0);
  if (r == cu::kSuccess) {
    CUmemAccessDesc access{};
    access.location.type = cu::kMemLocationTypeDevice, access.location.id = device;
    access.flags = cu::kMemAccessFlagsProtReadWrite;
    r = cu_.cuMemSetAccess(p, bytes, &access, 1);
    if (r != cu::kSuccess) (void)cu_.cuMemUnmap(p, bytes);
  }
  if (r != cu::kSuccess) {
    (void)cu_.cuMemAddressFree(p, bytes);
    return gpu::cudaCheck(r, "cuMemMap/cuMemSetAccess");
  }
  mappings_.push_back({p, bytes, handle});
  *out = p;
  return okStatus();
}

Status DeviceIpc::allocateScratch(int device, CUipcMemHandle* legacyHandle, UniqueFd* exportFd, uint64_t* bytes) {
  const std::string how = kGpuIpcHandle.get();
  if (how != "legacy" && fdSharingSupported(cu_, device)) {
    CUmemAllocationProp prop{};
    prop.type = cu::kMemAllocationTypePinned;
    prop.requestedHandleTypes = cu::kMemHandleTypePosixFileDescriptor;
    prop.location.type = cu::kMemLocationTypeDevice, prop.location.id = device;
    size_t granularity = 0;
    COLL_CU_TRY(cu_, cuMemGetAllocationGranularity, &granularity, &prop, cu::kMemAllocGranularityMinimum);
    *bytes = roundUp(4 * chunk_, std::max<size_t>(granularity, 1));
    CUmemGenericAllocationHandle handle = 0;
    COLL_CU_TRY(cu_, cuMemCreate, &handle, *bytes, &prop, 0);
    Status s = mapAllocation(handle, *bytes, device, &scratch_);
    if (!s.ok()) {
      (void)cu_.cuMemRelease(handle);
      return s;
    }
    scratchMapped_ = true;
    int fd = -1;
    COLL_CU_TRY(cu_, cuMemExportToShareableHandle, &fd, handle, cu::kMemHandleTypePosixFileDescriptor, 0);
    exportFd->reset(fd);
    return okStatus();
  }
  if (how == "fd") {
    return makeError(collInvalidUsage,
                     "COLL_GPU_IPC_HANDLE=fd, but device %d (or the driver) cannot share cuMem "
                     "allocations as POSIX file descriptors",
                     device);
  }
  *bytes = 4 * chunk_;
  COLL_CU_TRY(cu_, cuMemAlloc, &scratch_, *bytes);
  return gpu::cudaCheck(cu_.cuIpcGetMemHandle(legacyHandle, scratch_), "cuIpcGetMemHandle");
}

Status DeviceIpc::setup(const gpu::CudaDriver& cu, int device, int rank, int nranks, const HostOps& ops,
                        std::unique_ptr<DeviceIpc>* out) {
  out->reset();
  std::unique_ptr<DeviceIpc> ipc(new DeviceIpc(cu, rank, nranks));
  (void)cu.cuCtxGetCurrent(&ipc->ctx_);  // the progress thread's: the device's primary context
  ipc->chunk_ = std::max<size_t>(roundUp(kGpuIpcChunk.get(), size_t{256}), 256);
  std::string why;

  IpcRecord mine{};
  mine.nonce = processNonce();
  mine.pid = getpid();
  mine.device = device;
  UniqueFd exportFd;
  FdListener listener;
  {
    CUdevice dev = -1;
    std::string kernelsWhy;
    Status s;
    if (!gpu::deviceKernelsAvailable(cu, &kernelsWhy)) {
      why = "the device kernels do not load: " + kernelsWhy;
    } else if (cu.cuDeviceGet(&dev, device) != cu::kSuccess ||
               cu.cuDeviceGetPCIBusId(mine.bus, sizeof mine.bus, dev) != cu::kSuccess) {
      why = "no PCI bus id for device " + std::to_string(device);
    } else if (s = ipc->allocateScratch(device, &mine.handle, &exportFd, &mine.bytes); !s.ok()) {
      why = "the scratch: " + s.message();
    } else {
      mine.ptr = ipc->scratch_;
      mine.fdShared = exportFd.valid() ? 1 : 0;
      mine.ok = 1;
      // Peers that share by file descriptor send theirs here (unless every rank is legacy-only).
      if (kGpuIpcHandle.get() != "legacy") {
        const std::string name = socketName(rank);
        if (listener.listen(name, nranks + 8).ok()) snprintf(mine.socket, sizeof mine.socket, "%s", name.c_str());
      }
    }
  }
  std::vector<IpcRecord> all(static_cast<size_t>(nranks));
  COLL_TRY(ops.allGather(&mine, all.data(), sizeof(IpcRecord)));

  // Map every peer's scratch (a peer that failed its side: nobody uses the path).
  bool ok = mine.ok != 0;
  for (int p = 0; p < nranks && ok; ++p) {
    if (all[static_cast<size_t>(p)].ok == 0) ok = false, why = "rank " + std::to_string(p) + " could not set up";
  }
  for (IpcRecord& r : all) r.bus[sizeof r.bus - 1] = '\0', r.socket[sizeof r.socket - 1] = '\0';
  ipc->peers_.assign(static_cast<size_t>(nranks), nullptr);
  ipc->local_.assign(static_cast<size_t>(nranks), false);

  // Descriptors travel when a scratch is shared by one and not every rank is in one process (the
  // same answer on every rank: it reads the records only).
  std::vector<UniqueFd> received(static_cast<size_t>(nranks));
  const bool anyFd = std::any_of(all.begin(), all.end(), [](const IpcRecord& r) { return r.fdShared != 0; });
  const bool oneProcess =
      std::all_of(all.begin(), all.end(), [&](const IpcRecord& r) { return sameProcess(r, all[0]); });
  if (ok && anyFd && !oneProcess) {
    COLL_TRY(exchangeDescriptors(all, rank, std::move(exportFd), listener, ops, &received, &ok, &why));
  }
  exportFd.reset();

  for (int p = 0; p < nranks && ok; ++p) {
    const IpcRecord& r = all[static_cast<size_t>(p)];
    const bool sameDevice = strncmp(r.bus, mine.bus, sizeof r.bus) == 0;
    if (sameProcess(r, mine)) {
      // This process: CUDA refuses to open our own handles; the pointer is valid as it is. Another
      // device of this process would need peer access enabled (not among the driver calls used).
      if (!sameDevice) {
        ok = false, why = "rank " + std::to_string(p) + " is on another device of this process";
        break;
      }
      ipc->peers_[static_cast<size_t>(p)] = reinterpret_cast<std::byte*>(static_cast<uintptr_t>(r.ptr));
      ipc->local_[static_cast<size_t>(p)] = true;
      continue;
    }
    if (!sameDevice) {
      const int ordinal = localOrdinalOf(cu, r.bus);
      CUdevice mineDev = -1, peerDev = -1;
      int can = 0;
      if (ordinal < 0 || cu.cuDeviceGet(&mineDev, device) != cu::kSuccess ||
          cu.cuDeviceGet(&peerDev, ordinal) != cu::kSuccess ||
          cu.cuDeviceCanAccessPeer(&can, mineDev, peerDev) != cu::kSuccess || can == 0) {
        ok = false, why = "rank " + std::to_string(p) + "'s device (" + r.bus + ") cannot be reached from device " +
                          std::to_string(device);
        break;
      }
    }
    CUdeviceptr mapped = 0;
    if (r.fdShared) {
      CUmemGenericAllocationHandle handle = 0;
      const int fd = received[static_cast<size_t>(p)].get();
      CUresult res = r.bytes < 4 * ipc->chunk_ ? cu::kErrorInvalidValue
                                               : cu.cuMemImportFromShareableHandle(
                                                     &handle, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                                                     cu::kMemHandleTypePosixFileDescriptor);
      Status s = gpu::cudaCheck(res, "cuMemImportFromShareableHandle");
      if (s.ok()) {
        s = ipc->mapAllocation(handle, r.bytes, device, &mapped);
        if (!s.ok()) (void)cu.cuMemRelease(handle);
      }
      if (!s.ok()) {
        ok = false, why = "mapping rank " + std::to_string(p) + "'s scratch from its file descriptor: " + s.message();
        break;
      }
    } else {
      const CUresult res = cu.cuIpcOpenMemHandle(&mapped, r.handle, cu::kIpcMemLazyEnablePeerAccess);
      if (res != cu::kSuccess) {
        ok = false, why = "cuIpcOpenMemHandle of rank " + std::to_string(p) +
                          "'s scratch failed: " + gpu::cudaCheck(res, "cuIpcOpenMemHandle").message();
        break;
      }
      ipc->opened_.push_back(mapped);
    }
    ipc->peers_[static_cast<size_t>(p)] = reinterpret_cast<std::byte*>(static_cast<uintptr_t>(mapped));
  }
  received.clear();  // an imported allocation holds its own reference

  // Every rank learns whether every rank mapped every peer: all use the path or none does.
  std::vector<int32_t> flags(static_cast<size_t>(nranks));
  const int32_t myFlag = ok ? 1 : 0;
  COLL_TRY(ops.allGather(&myFlag, flags.data(), sizeof myFlag));
  int failed = -1;
  for (int p = 0; p < nranks; ++p) {
    if (flags[static_cast<size_t>(p)] == 0 && failed < 0) failed = p;
  }
  if (failed >= 0) {
    if (rank == failed || rank == 0) {
      const std::string text = rank == failed ? why : "rank " + std::to_string(failed) + " could not map its peers";
      if (kGpuIpc.get() == "1") {
        COLL_WARN(rank, "GPU IPC: not used (%s); device buffers are staged through host memory", text.c_str());
      } else {
        COLL_INFO(rank, "GPU IPC: not used (%s); device buffers are staged through host memory", text.c_str());
      }
    }
    return okStatus();  // ipc's destructor closes and frees what was made
  }
  if (rank == 0) {
    COLL_INFO(rank,
              "GPU IPC: on for %d ranks of this host (chunk %zu bytes, %zu bytes of device scratch per rank, "
              "shared by %s)",
              nranks, ipc->chunk_, static_cast<size_t>(mine.bytes),
              mine.fdShared ? "POSIX file descriptor" : "legacy IPC handle");
  }
  *out = std::move(ipc);
  return okStatus();
}

DeviceIpc::~DeviceIpc() {
  // The destroying thread may have no context, or another one: ours for the frees only.
  const bool pushed = ctx_ != nullptr && cu_.cuCtxPushCurrent(ctx_) == cu::kSuccess;
  for (CUdeviceptr p : opened_) (void)cu_.cuIpcCloseMemHandle(p);
  for (const Mapping& m : mappings_) {
    (void)cu_.cuMemUnmap(m.ptr, m.bytes);
    (void)cu_.cuMemAddressFree(m.ptr, m.bytes);
    (void)cu_.cuMemRelease(m.handle);
  }
  if (scratch_ != 0 && !scratchMapped_) (void)cu_.cuMemFree(scratch_);
  CUcontext popped = nullptr;
  if (pushed) (void)cu_.cuCtxPopCurrent(&popped);
}

Status DeviceIpc::run(const CollArgs& a, CUstream stream, const HostOps& ops, const BufferRegistry* registry) {
  gIpcCollectives.fetch_add(1, std::memory_order_relaxed);
  switch (a.kind) {
    case CollKind::AllReduce:
      if (a.compress.blockSize != 0) return compressedAllReduce(a, stream, ops);
      return reduce(a, stream, ops, registry);
    case CollKind::Reduce: return reduce(a, stream, ops, registry);
    case CollKind::ReduceScatter: return reduceScatter(a, stream, ops, registry);
    default: return move(a, stream, ops, registry);
  }
}

Status DeviceIpc::afterCopyIn(const CollArgs& a, CUstream stream, const HostOps& ops, const BufferRegistry* registry,
                              bool firstChunk, bool* done) {
  *done = false;
  COLL_TRY(ops.sync(stream));
  return firstChunk ? tryRegistered(a, stream, ops, registry, done) : ops.barrier();
}

Status DeviceIpc::copyIn(const CollArgs& a, uint64_t segments, uint64_t done, uint64_t m, int half, CUstream stream) {
  const size_t es = dataTypeSize(a.dtype);
  const auto* send = static_cast<const std::byte*>(a.sendbuff);
  for (uint64_t g = 0; g < segments; ++g) {
    COLL_TRY(copyAsync(input(rank_, half) + g * m * es, send + (g * a.count + done) * es, m * es, stream,
                       "cuMemcpyAsync (IPC input)"));
  }
  return okStatus();
}

Status DeviceIpc::copyAsync(void* dst, const void* src, uint64_t bytes, CUstream stream, const char* what) {
  if (bytes == 0 || dst == src) return okStatus();
  return gpu::cudaCheck(cu_.cuMemcpyAsync(dptr(dst), dptr(src), bytes, stream), what);
}

Status DeviceIpc::reduceInto(const CollArgs& a, void* dst, const void* const* srcs, uint64_t count, CUstream stream) {
  if (count == 0) return okStatus();
  const collRedOp_t op = a.op == collAvg ? collSum : a.op;
  COLL_TRY(gpu::deviceReduce(cu_, dst, srcs, nranks_, count, a.dtype, op, stream));
  if (a.op == collAvg)
    COLL_TRY(gpu::deviceDivide(cu_, dst, dst, count, a.dtype, static_cast<uint64_t>(nranks_), stream));
  return okStatus();
}

bool DeviceIpc::mapPeerAllocation(int peer, const CUipcMemHandle& handle, uint64_t base, std::byte** out) {
  if (local_[static_cast<size_t>(peer)]) {  // this process: its address is ours
    *out = reinterpret_cast<std::byte*>(static_cast<uintptr_t>(base));
    return true;
  }
  for (const PeerAllocation& m : peerAllocations_) {
    if (m.peer == peer && std::memcmp(&m.handle, &handle, sizeof handle) == 0) {
      *out = m.mapped;
      return true;
    }
  }
  CUdeviceptr mapped = 0;
  const CUresult res = cu_.cuIpcOpenMemHandle(&mapped, handle, cu::kIpcMemLazyEnablePeerAccess);
  if (res != cu::kSuccess) {
    COLL_INFO(rank_,
              "GPU IPC: rank %d's registered buffer cannot be mapped here (%s); the call goes through the "
              "scratch",
              peer, gpu::cudaCheck(res, "cuIpcOpenMemHandle").message().c_str());
    return false;
  }
  // Kept open for the communicator's life: a peer registers a buffer to use it again.
  opened_.push_back(mapped);
  peerAllocations_.push_back({peer, handle, reinterpret_cast<std::byte*>(static_cast<uintptr_t>(mapped))});
  *out = peerAllocations_.back().mapped;
  return true;
}

Status DeviceIpc::tryRegistered(const CollArgs& a, CUstream stream, const HostOps& ops, const BufferRegistry* registry,
                                bool* done) {
  *done = false;
  const size_t es = dataTypeSize(a.dtype), n = static_cast<size_t>(nranks_), me = static_cast<size_t>(rank_);
  const bool moves = a.kind != CollKind::AllReduce && a.kind != CollKind::Reduce && a.kind != CollKind::ReduceScatter;
  uint64_t sendElems = 0, recvElems = 0;
  bufferElements(a, rank_, nranks_, &sendElems, &recvElems);
  RegisteredRecord mine{};
  // A buffer this rank uses: registered device memory, exported; an unused one passes.
  auto exported = [&](const void* p, uint64_t bytes, CUipcMemHandle* handle, uint64_t* base, uint64_t* offset) {
    if (bytes == 0) return true;
    BufferRegistry::Entry e;
    if (!registry->findDevice(p, bytes, &e) ||
        cu_.cuIpcGetMemHandle(handle, static_cast<CUdeviceptr>(e.allocationBegin)) != cu::kSuccess) {
      return false;
    }
    *base = e.allocationBegin, *offset = reinterpret_cast<uintptr_t>(p) - e.allocationBegin;
    return true;
  };
  if (registry != nullptr && exported(a.sendbuff, sendElems * es, &mine.sendHandle, &mine.sendBase, &mine.sendOffset) &&
      exported(a.recvbuff, recvElems * es, &mine.recvHandle, &mine.recvBase, &mine.recvOffset)) {
    mine.ok = 1;
    const uintptr_t s = reinterpret_cast<uintptr_t>(a.sendbuff), r = reinterpret_cast<uintptr_t>(a.recvbuff);
    mine.overlaps = sendElems > 0 && recvElems > 0 && s < r + recvElems * es && r < s + sendElems * es;
  }
  std::vector<RegisteredRecord> all(n);
  COLL_TRY(ops.allGather(&mine, all.data(), sizeof mine));
  bool overlaps = false;
  for (const RegisteredRecord& rec : all) {
    if (rec.ok == 0) return okStatus();  // the exchange was this chunk's barrier
    overlaps = overlaps || rec.overlaps != 0;
  }
  // In place, a rank's send buffer is rewritten while the call runs. An All-to-All's peers would
  // read it after its owner overwrote it; a reduction with more inputs than one kernel launch takes
  // reads this rank's input in a second launch, after the first overwrote it. Both take the scratch.
  if (overlaps && (a.kind == CollKind::AlltoAll || (!moves && nranks_ > kernels::devabi::kMaxSources))) {
    return okStatus();
  }
  // Every rank's buffers as addressed here; every rank learns whether every rank mapped them all.
  std::vector<const std::byte*> sends(n);
  std::vector<std::byte*> recvs(n);
  int32_t mapped = 1;
  for (size_t p = 0; p < n && mapped; ++p) {
    const RegisteredRecord& rec = all[p];
    uint64_t se = 0, re = 0;
    bufferElements(a, static_cast<int>(p), nranks_, &se, &re);
    std::byte *sendBase = nullptr, *recvBase = nullptr;
    if ((se > 0 && !mapPeerAllocation(static_cast<int>(p), rec.sendHandle, rec.sendBase, &sendBase)) ||
        (re > 0 && !mapPeerAllocation(static_cast<int>(p), rec.recvHandle, rec.recvBase, &recvBase))) {
      mapped = 0;
      break;
    }
    if (se > 0) sends[p] = sendBase + rec.sendOffset;
    if (re > 0) recvs[p] = recvBase + rec.recvOffset;
  }
  std::vector<int32_t> flags(n);
  COLL_TRY(ops.allGather(&mapped, flags.data(), sizeof mapped));
  for (int32_t f : flags) {
    if (f == 0) return okStatus();
  }

  // The whole call on the user's buffers (the caller's last barrier keeps them alive for peers).
  const uint64_t count = a.count, bytes = count * es;
  const auto root = static_cast<size_t>(std::max(a.root, 0));
  std::vector<const void*> srcs(n);
  auto sourcesAt = [&](uint64_t first) {
    for (size_t q = 0; q < n; ++q) srcs[q] = sends[q] + first * es;
    return srcs.data();
  };
  const char* what = "cuMemcpyAsync (IPC registered)";
  const uint64_t per = ceilDiv(count, static_cast<uint64_t>(n));
  auto shardBegin = [&](size_t q) { return std::min<uint64_t>(q * per, count); };
  auto shardEnd = [&](size_t q) { return std::min<uint64_t>((q + 1) * per, count); };
  switch (a.kind) {
    case CollKind::AllReduce:
      // Shard `me` of every send buffer into our receive buffer; barrier; the others from their owners.
      COLL_TRY(reduceInto(a, recvs[me] + shardBegin(me) * es, sourcesAt(shardBegin(me)), shardEnd(me) - shardBegin(me),
                          stream));
      COLL_TRY(ops.sync(stream));
      COLL_TRY(ops.barrier());
      for (size_t q = 0; q < n; ++q) {
        if (q != me)
          COLL_TRY(copyAsync(recvs[me] + shardBegin(q) * es, recvs[q] + shardBegin(q) * es,
                             (shardEnd(q) - shardBegin(q)) * es, stream, what));
      }
      break;
    case CollKind::Reduce:  // every rank reduces its shard straight into the root's receive buffer
      COLL_TRY(reduceInto(a, recvs[root] + shardBegin(me) * es, sourcesAt(shardBegin(me)),
                          shardEnd(me) - shardBegin(me), stream));
      break;
    case CollKind::ReduceScatter: COLL_TRY(reduceInto(a, recvs[me], sourcesAt(me * count), count, stream)); break;
    case CollKind::AllGather:
    case CollKind::AlltoAll:
      for (size_t q = 0; q < n; ++q) {
        const uint64_t from = a.kind == CollKind::AlltoAll ? me * bytes : 0;
        COLL_TRY(copyAsync(recvs[me] + q * bytes, sends[q] + from, bytes, stream, what));
      }
      break;
    case CollKind::Gather:
      if (me == root) {
        for (size_t q = 0; q < n; ++q) COLL_TRY(copyAsync(recvs[me] + q * bytes, sends[q], bytes, stream, what));
      }
      break;
    case CollKind::Broadcast: COLL_TRY(copyAsync(recvs[me], sends[root], bytes, stream, what)); break;
    case CollKind::Scatter: COLL_TRY(copyAsync(recvs[me], sends[root] + me * bytes, bytes, stream, what)); break;
    default: return makeError(collInternalError, "GPU IPC: no registered path for this collective");
  }
  gIpcRegistered.fetch_add(1, std::memory_order_relaxed);
  *done = true;
  return okStatus();
}

Status DeviceIpc::compressedAllReduce(const CollArgs& a, CUstream stream, const HostOps& ops) {
  const int blockSize = a.compress.blockSize;
  const uint64_t P = static_cast<uint64_t>(nranks_), B = static_cast<uint64_t>(blockSize), n = a.count;
  const uint64_t me = static_cast<uint64_t>(rank_);
  const size_t es = dataTypeSize(a.dtype);
  kernels::QuantParams qp;
  qp.blockSize = blockSize;
  qp.stochastic = a.compress.stochastic;
  qp.seed = a.compress.seed;
  qp.step = a.compress.step;
  qp.rank = static_cast<uint32_t>(rank_);
  const uint64_t K = compressedRoundBlocks(blockSize);
  if (K == 0) return makeError(collInternalError, "GPU IPC: COLL_GPU_IPC_CHUNK cannot hold a compressed round");
  const uint64_t slot = roundUp(K * kernels::quantRecordBytes(blockSize), uint64_t{16}), R = K * B;
  // The two-shot's shards: shard j = [lo(j), lo(j + 1)), whole blocks.
  const uint64_t S = roundUp(ceilDiv(n, P), B);
  auto lo = [&](uint64_t j) { return std::min(j * S, n); };
  const auto* send = static_cast<const std::byte*>(a.sendbuff);
  auto* recv = static_cast<std::byte*>(a.recvbuff);
  float* residual = a.compress.residual;
  auto residualAt = [&](uint64_t e) { return residual != nullptr ? residual + e : nullptr; };
  for (uint64_t o = 0; o < S; o += R) {
    const int half = static_cast<int>(half_++ & 1);
    // This round: elements [lo(j) + o, lo(j) + o + len(j)) of every shard j.
    auto len = [&](uint64_t j) {
      const uint64_t size = lo(j + 1) - lo(j);
      return size > o ? std::min(R, size - o) : 0;
    };
    // 1. My part of every other shard, quantized for its owner.
    for (uint64_t j = 0; j < P; ++j) {
      if (j == me || len(j) == 0) continue;
      COLL_TRY(gpu::deviceQuantize4(cu_, input(rank_, half) + j * slot, send + (lo(j) + o) * es, a.dtype, len(j), qp,
                                    lo(j) + o, residualAt(lo(j) + o), stream));
    }
    COLL_TRY(ops.sync(stream));
    COLL_TRY(ops.barrier());
    // 2. My shard: my part at full precision plus every peer's dequantized part, in the host's order.
    if (const uint64_t m = len(me); m > 0) {
      const uint64_t at = lo(me) + o;
      std::byte* records = output(rank_, half);
      auto* acc = reinterpret_cast<float*>(records + slot);
      COLL_TRY(gpu::deviceWiden(cu_, acc, send + at * es, a.dtype, m, stream));
      for (uint64_t k = 1; k < P; ++k) {
        const uint64_t j = (me + P - k) % P;
        COLL_TRY(gpu::deviceDequantizeAccumulate4(cu_, acc, input(static_cast<int>(j), half) + me * slot, m,
                                                  blockSize, stream));
      }
      if (a.op == collAvg) COLL_TRY(gpu::deviceDivide(cu_, acc, acc, m, collFloat32, P, stream));
      COLL_TRY(gpu::deviceQuantize4(cu_, records, acc, collFloat32, m, qp, at, residualAt(at), stream));
      COLL_TRY(gpu::deviceDequantize4(cu_, recv + at * es, a.dtype, records, m, blockSize, stream));
    }
    COLL_TRY(ops.sync(stream));
    COLL_TRY(ops.barrier());
    // 3. Every other shard, dequantized from its owner's records.
    for (uint64_t j = 0; j < P; ++j) {
      if (j == me || len(j) == 0) continue;
      COLL_TRY(gpu::deviceDequantize4(cu_, recv + (lo(j) + o) * es, a.dtype, output(static_cast<int>(j), half),
                                      len(j), blockSize, stream));
    }
  }
  COLL_TRY(ops.sync(stream));
  // No rank leaves while another may still read its scratch (it may be freed next).
  return ops.barrier();
}

Status DeviceIpc::reduce(const CollArgs& a, CUstream stream, const HostOps& ops, const BufferRegistry* registry) {
  const size_t es = dataTypeSize(a.dtype);
  const size_t chunkElems = std::max<size_t>(chunk_ / es, 1);
  auto* recv = static_cast<std::byte*>(a.recvbuff);  // unused on a Reduce's other ranks
  const bool receives = a.kind == CollKind::AllReduce || rank_ == a.root;
  const size_t n = static_cast<size_t>(nranks_);
  std::vector<const void*> srcs(n);
  for (uint64_t done = 0; done < a.count;) {
    const size_t m = static_cast<size_t>(std::min<uint64_t>(chunkElems, a.count - done));
    const int half = static_cast<int>(half_++ & 1);
    // Shard q of the chunk: [q * per, min((q + 1) * per, m)).
    const size_t per = ceilDiv(m, n);
    auto shardBegin = [&](size_t q) { return std::min(q * per, m); };
    auto shardEnd = [&](size_t q) { return std::min((q + 1) * per, m); };

    // 1. This rank's chunk into its input area.
    COLL_TRY(copyIn(a, 1, done, m, half, stream));
    bool registered = false;
    COLL_TRY(afterCopyIn(a, stream, ops, registry, done == 0, &registered));
    if (registered) break;
    // 2. Shard `rank_` of every rank's input, reduced in rank order into our output area.
    const size_t b = shardBegin(static_cast<size_t>(rank_)), e = shardEnd(static_cast<size_t>(rank_));
    for (size_t q = 0; q < n; ++q) srcs[q] = input(static_cast<int>(q), half) + b * es;
    COLL_TRY(reduceInto(a, output(rank_, half) + b * es, srcs.data(), e - b, stream));
    COLL_TRY(ops.sync(stream));
    COLL_TRY(ops.barrier());
    // 3. Every shard from its owner's output area into the receive buffer.
    for (size_t q = 0; q < n && receives; ++q) {
      COLL_TRY(copyAsync(recv + (done + shardBegin(q)) * es, output(static_cast<int>(q), half) + shardBegin(q) * es,
                         (shardEnd(q) - shardBegin(q)) * es, stream, "cuMemcpyAsync (IPC output)"));
    }
    done += m;
  }
  COLL_TRY(ops.sync(stream));
  // No rank leaves while another may still read its scratch (it may be freed next) or buffers.
  return ops.barrier();
}

Status DeviceIpc::reduceScatter(const CollArgs& a, CUstream stream, const HostOps& ops,
                                const BufferRegistry* registry) {
  const size_t es = dataTypeSize(a.dtype), n = static_cast<size_t>(nranks_), me = static_cast<size_t>(rank_);
  const uint64_t chunkElems = std::max<uint64_t>(chunk_ / (es * n), 1);  // of each rank's segment
  auto* recv = static_cast<std::byte*>(a.recvbuff);
  std::vector<const void*> srcs(n);
  for (uint64_t done = 0; done < a.count;) {
    const uint64_t m = std::min(chunkElems, a.count - done);
    const int half = static_cast<int>(half_++ & 1);
    // 1. Elements [done, done + m) of each segment q of our send buffer into slot q of our input area.
    COLL_TRY(copyIn(a, n, done, m, half, stream));
    bool registered = false;
    COLL_TRY(afterCopyIn(a, stream, ops, registry, done == 0, &registered));
    if (registered) break;
    // 2. Slot `me` of every rank's input, reduced in rank order into our receive buffer.
    for (size_t q = 0; q < n; ++q) srcs[q] = input(static_cast<int>(q), half) + me * m * es;
    COLL_TRY(reduceInto(a, recv + done * es, srcs.data(), m, stream));
    done += m;
  }
  COLL_TRY(ops.sync(stream));
  return ops.barrier();
}

Status DeviceIpc::move(const CollArgs& a, CUstream stream, const HostOps& ops, const BufferRegistry* registry) {
  const size_t es = dataTypeSize(a.dtype), n = static_cast<size_t>(nranks_), me = static_cast<size_t>(rank_);
  const size_t root = static_cast<size_t>(std::max(a.root, 0));
  // Per kind: which ranks' data moves, who receives, where each source lands in the receive buffer.
  const bool fromRootOnly = a.kind == CollKind::Broadcast || a.kind == CollKind::Scatter;
  const bool receives = a.kind != CollKind::Gather || me == root;
  const bool slotPerSource =
      a.kind == CollKind::AllGather || a.kind == CollKind::Gather || a.kind == CollKind::AlltoAll;
  uint64_t sendElems = 0, recvElems = 0;
  bufferElements(a, rank_, nranks_, &sendElems, &recvElems);
  // Segmented sends (All-to-All, Scatter) hold one segment per destination: a chunk has n slots.
  const uint64_t segments = segmented(a.kind) ? n : 1;
  const uint64_t chunkElems = std::max<uint64_t>(chunk_ / (es * segments), 1);
  const auto* send = static_cast<const std::byte*>(a.sendbuff);
  auto* recv = static_cast<std::byte*>(a.recvbuff);
  for (uint64_t done = 0; done < a.count;) {
    const uint64_t m = std::min(chunkElems, a.count - done);
    const int half = static_cast<int>(half_++ & 1);
    // 1. Elements [done, done + m) of each of our send segments into our input area.
    if (sendElems > 0) COLL_TRY(copyIn(a, segments, done, m, half, stream));
    bool registered = false;
    COLL_TRY(afterCopyIn(a, stream, ops, registry, done == 0, &registered));
    if (registered) break;
    // 2. Each source's part for us (ours straight from our send buffer) into the receive buffer.
    const uint64_t segment = segments > 1 ? me : 0;
    for (size_t q = 0; q < n && receives; ++q) {
      if (fromRootOnly && q != root) continue;
      std::byte* dst = recv + ((slotPerSource ? q : 0) * a.count + done) * es;
      const std::byte* src =
          q == me ? send + (segment * a.count + done) * es : input(static_cast<int>(q), half) + segment * m * es;
      COLL_TRY(copyAsync(dst, src, m * es, stream, "cuMemcpyAsync (IPC output)"));
    }
    done += m;
  }
  COLL_TRY(ops.sync(stream));
  return ops.barrier();
}

}  // namespace coll
