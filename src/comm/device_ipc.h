// DeviceIpc: the intra-node device path. When every rank of a communicator is on this host and on
// devices that can reach each other (the same device, or peers), each rank allocates a device
// scratch region and exports it: a cuMem allocation as a POSIX file descriptor where the driver
// supports it (COLL_GPU_IPC_HANDLE), else cuMemAlloc memory with a legacy CUDA IPC handle. The
// ranks exchange (handle, pointer, pid, device, socket name) in one host all-gather; descriptors go
// to the ranks of other processes over abstract Unix sockets (src/base/fd_passing.h). Each rank
// maps every peer's region once (cuMemImportFromShareableHandle + cuMemMap, or cuIpcOpenMemHandle;
// a peer in this very process by its pointer).
// Collectives on device buffers then move and reduce data device to device with the device
// kernels, synchronised by host barriers; the host never sees the data.
//
// All-Reduce, per chunk of COLL_GPU_IPC_CHUNK bytes, double-buffered in the scratch:
//   1. every rank copies its chunk of the input into its scratch's input area;   barrier
//   2. rank r reduces shard r of the chunk from every rank's input area, in rank order (so every
//      element is reduced once, by one rank: bit-identical results everywhere), into its own
//      output area (avg: then divides);                                           barrier
//   3. every rank copies all shards from the ranks' output areas into its receive buffer.
// Reduce is the same with step 3 at the root only. Reduce-Scatter copies slot q of each chunk
// from segment q of the send buffer, and rank r reduces slot r of every rank's input straight into
// its receive buffer. The data movers copy their chunk (All-to-All and Scatter: one slot per
// destination) into the input area; barrier; each receiver copies its part from every source's
// input area (Broadcast and Scatter: the root's; Gather: only the root receives).
// The compressed (4-bit) All-Reduce runs the host's two-shot (algorithms/compressed.cc) with the
// same shards, stochastic counters, residual updates and summation order, so its bytes are the
// host path's: in rounds over the same range of every shard,
//   1. every rank quantizes (with its residual) its part of every other rank's shard into slot j of
//      its input area;                                                            barrier
//   2. rank r widens its own part of shard r to float32 in its output area, adds every peer's
//      dequantized slot r (peers r-1, r-2, ... in turn), averages, quantizes the sum (with its
//      residual) into its output area and dequantizes it into its receive buffer;  barrier
//   3. every rank dequantizes every other shard from its owner's output area.
// Registered buffers (collCommRegister on every rank): the first chunk's barrier becomes an
// all-gather of each rank's registered send and receive allocations (IPC handle, base, offset);
// when every rank's are registered, the call runs on the user's buffers with no copies through the
// scratch (only the first chunk's copy-in, made before the ranks know, is wasted): rank r reduces
// shard r straight from every rank's send buffer into its receive buffer (Reduce: into the root's;
// All-Reduce: then copies the other shards from their owners), and receivers copy straight from
// the sources' send buffers. A rank that cannot map a peer's allocation makes every rank take the
// chunked path.
// A chunk's two halves alternate, so the barrier after step 1 of chunk k+1 also says that step 3 of
// chunk k is done everywhere; one last barrier per call lets a rank free its scratch safely.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/base/deadline.h"
#include "src/base/fd_passing.h"
#include "src/base/status.h"
#include "src/comm/buffer_registry.h"
#include "src/gpu/cuda_driver.h"
#include "src/schedule/coll_args.h"
#include "src/schedule/schedule.h"

namespace coll {

class DeviceIpc {
 public:
  // What the path needs from the communicator, all run as host collectives on it (every rank
  // runs device work in issue order on its progress thread, so these match on every rank).
  struct HostOps {
    std::function<Status(const void* mine, void* all, size_t bytes)> allGather;
    std::function<Status()> barrier;
    // Waits until `stream` has run everything queued (with the call's deadline and abort flag).
    std::function<Status(CUstream)> sync;
    Deadline deadline = Deadline::never();  // the call's (the setup waits for file descriptors with it)
  };

  // COLL_GPU_IPC: 0 = never, 1 or auto = when it can be set up (1 warns when it cannot).
  static bool enabled();
  // Collective over the communicator (every rank calls it at the same call). Sets *out to the
  // path when every rank could set it up, else leaves it null and logs why at INFO (WARN with
  // COLL_GPU_IPC=1) on rank 0; a Status error only for a failed host collective.
  static Status setup(const gpu::CudaDriver& cu, int device, int rank, int nranks, const HostOps& ops,
                      std::unique_ptr<DeviceIpc>* out);
  ~DeviceIpc();

  // Whether `a` can run on this path on `nranks` ranks (the same answer on every rank: it depends
  // on the call and the rank count only); decides whether the path is set up.
  static bool supports(const CollArgs& a, int nranks);
  // Whether this path runs `a` (supports it, and its scratch holds a round of it).
  bool handles(const CollArgs& a) const;
  // Runs `a` (handles(a)) on `stream`, returning when the receive buffer holds the result.
  // `registry` (may be null): this rank's registered buffers.
  Status run(const CollArgs& a, CUstream stream, const HostOps& ops, const BufferRegistry* registry = nullptr);

  size_t chunkBytes() const { return chunk_; }

 private:
  DeviceIpc(const gpu::CudaDriver& cu, int rank, int nranks) : cu_(cu), rank_(rank), nranks_(nranks) {}
  // The kinds, chunk by chunk through the scratch (each first tries the registered buffers):
  // All-Reduce and Reduce (sharded reduction), Reduce-Scatter, and the data movers (Broadcast,
  // All-Gather, Gather, Scatter, All-to-All).
  Status reduce(const CollArgs& a, CUstream stream, const HostOps& ops, const BufferRegistry* registry);
  Status reduceScatter(const CollArgs& a, CUstream stream, const HostOps& ops, const BufferRegistry* registry);
  Status move(const CollArgs& a, CUstream stream, const HostOps& ops, const BufferRegistry* registry);
  // Whether a kind's send buffer holds one segment per rank (its chunks hold a slot per rank).
  static bool segmented(CollKind kind);
  // After a chunk's copy-in: waits for it, then the barrier; on the first chunk, tryRegistered
  // instead (*done: it ran the whole call).
  Status afterCopyIn(const CollArgs& a, CUstream stream, const HostOps& ops, const BufferRegistry* registry,
                     bool firstChunk, bool* done);
  // Exchanges the ranks' registered buffers (in place of the first chunk's barrier) and, when
  // every rank's are registered and mapped, runs the whole call on them (*done = true).
  Status tryRegistered(const CollArgs& a, CUstream stream, const HostOps& ops, const BufferRegistry* registry,
                       bool* done);
  // Elements [done, done + m) of each of the first `segments` segments (of a.count elements) of
  // our send buffer into consecutive slots of our input area of half `half`.
  Status copyIn(const CollArgs& a, uint64_t segments, uint64_t done, uint64_t m, int half, CUstream stream);
  // An async device copy; nothing for 0 bytes or the same address.
  Status copyAsync(void* dst, const void* src, uint64_t bytes, CUstream stream, const char* what);
  // dst = every rank's srcs reduced in rank order (the call's op; avg divides).
  Status reduceInto(const CollArgs& a, void* dst, const void* const* srcs, uint64_t count, CUstream stream);
  // A peer's registered allocation (legacy IPC handle) mapped here, opened once per communicator.
  bool mapPeerAllocation(int peer, const CUipcMemHandle& handle, uint64_t base, std::byte** out);
  // The scratch: a cuMem allocation exported as a POSIX file descriptor (*exportFd valid) where
  // COLL_GPU_IPC_HANDLE and the device allow, else cuMemAlloc memory with a legacy handle.
  Status allocateScratch(int device, CUipcMemHandle* legacyHandle, UniqueFd* exportFd, uint64_t* bytes);
  // Reserves an address range, maps `handle` there and gives `device` read-write access; the
  // mapping (and the handle) are released on destruction.
  Status mapAllocation(CUmemGenericAllocationHandle handle, size_t bytes, int device, CUdeviceptr* out);
  Status compressedAllReduce(const CollArgs& a, CUstream stream, const HostOps& ops);
  // Quantization blocks per round of a compressed All-Reduce (0: the scratch is too small).
  uint64_t compressedRoundBlocks(int blockSize) const;
  std::byte* input(int peer, int half) const { return peers_[static_cast<size_t>(peer)] + half * 2 * chunk_; }
  std::byte* output(int peer, int half) const { return input(peer, half) + chunk_; }

  const gpu::CudaDriver& cu_;
  int rank_, nranks_;
  size_t chunk_ = 0;
  CUcontext ctx_ = nullptr;            // the context the scratch and mappings belong to
  CUdeviceptr scratch_ = 0;            // ours: 2 halves of (input, output), chunk_ bytes each
  std::vector<std::byte*> peers_;      // every rank's scratch as mapped here (ours included)
  bool scratchMapped_ = false;         // the scratch is one of mappings_ (not cuMemAlloc memory)
  std::vector<CUdeviceptr> opened_;    // cuIpcOpenMemHandle results, closed on destruction
  struct Mapping {
    CUdeviceptr ptr;
    size_t bytes;
    CUmemGenericAllocationHandle handle;
  };
  std::vector<Mapping> mappings_;  // cuMem allocations mapped here (ours, peers' by descriptor)
  std::vector<bool> local_;        // peers in this process (their pointers are valid here)
  struct PeerAllocation {
    int peer;
    CUipcMemHandle handle;
    std::byte* mapped;
  };
  std::vector<PeerAllocation> peerAllocations_;  // registered buffers of peers, mapped (in opened_)
  uint64_t half_ = 0;                  // chunks run so far (their parity picks the half)
};

// Calls run on the IPC path in this process (tests; all communicators together), and those of
// them run in place on registered buffers.
uint64_t deviceIpcCollectives();
uint64_t deviceIpcRegisteredCollectives();

}  // namespace coll
