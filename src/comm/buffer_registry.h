// Buffers registered with a communicator (collCommRegister / collCommDeregister, as NCCL's). The
// device path looks them up when a call runs: an All-Reduce whose buffers are registered on every
// rank of a host runs in place over CUDA IPC, without copies into the IPC scratch (device_ipc.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "src/gpu/memory.h"

namespace coll {

class BufferRegistry {
 public:
  struct Entry {
    uintptr_t begin = 0;
    size_t size = 0;
    gpu::MemKind kind = gpu::MemKind::Host;
    uintptr_t allocationBegin = 0;  // device memory: the allocation holding it (for its IPC handle)
  };

  // Returns the registration's handle (never null).
  void* add(const Entry& e);
  // False when `handle` is not one of this registry's.
  bool remove(void* handle);
  // Whether [p, p + bytes) lies inside one registered buffer of device memory (cuMemAlloc: managed
  // memory has no IPC handle); sets *entry to it.
  bool findDevice(const void* p, size_t bytes, Entry* entry) const;

 private:
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_;
};

}  // namespace coll
