// Memory registration cache of the ib transport: host ranges registered once (page-rounded) and
// found by address, dmabuf regions (GPU memory) by (fd, offset, length); eviction deregisters.
#include <unistd.h>

#include <cerrno>

#include "src/base/log.h"
#include "transports/ib/ib_transport.h"

namespace coll {

namespace {

uintptr_t pageSize() {
  static const uintptr_t p = [] {
    long v = sysconf(_SC_PAGESIZE);
    return static_cast<uintptr_t>(v > 0 ? v : 4096);
  }();
  return p;
}

}  // namespace

IbMrCache::~IbMrCache() {
  for (auto& [start, r] : host_) api_.deregMr(r.mr);
  for (auto& r : dmabuf_) api_.deregMr(r.mr);
}

Status IbMrCache::registerHost(void* addr, size_t length, int access, ibv_mr** out) {
  if (addr == nullptr || length == 0) {
    return makeError(collInvalidArgument, "cannot register %zu bytes at %p for RDMA", length, addr);
  }
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  if (a + length < a) return makeError(collInvalidArgument, "RDMA registration range at %p wraps around", addr);
  std::lock_guard<std::mutex> lock(mu_);
  // Only the region starting closest below addr is looked at: regions may overlap after
  // page rounding, and a miss merely registers the range once more.
  auto it = host_.upper_bound(a);
  if (it != host_.begin()) {
    --it;
    if (it->second.end >= a + length && (it->second.access & access) == access) {
      ++hits_;
      *out = it->second.mr;
      return okStatus();
    }
  }
  ++misses_;
  // Page-rounded, so neighbouring buffers in the same pages share the registration.
  const uintptr_t start = a & ~(pageSize() - 1);
  const uintptr_t end = (a + length + pageSize() - 1) & ~(pageSize() - 1);
  ibv_mr* mr = api_.regMr(pd_, reinterpret_cast<void*>(start), end - start, access);
  if (mr == nullptr) {
    const int err = errno;
    return makeError(collSystemError,
                     "registering %zu bytes of host memory for RDMA failed: %s (check `ulimit -l`: "
                     "registered memory is locked)",
                     static_cast<size_t>(end - start), errnoText(err).c_str());
  }
  auto existing = host_.find(start);
  if (existing != host_.end()) {  // same start, smaller range or fewer rights: replace it
    api_.deregMr(existing->second.mr);
    host_.erase(existing);
  }
  host_.emplace(start, Region{end, access, mr});
  *out = mr;
  return okStatus();
}

Status IbMrCache::registerDmabuf(int fd, uint64_t offset, size_t length, uint64_t iova, int access, ibv_mr** out) {
  if (fd < 0 || length == 0) {
    return makeError(collInvalidArgument, "cannot register dmabuf fd %d (%zu bytes) for RDMA", fd, length);
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const DmabufRegion& r : dmabuf_) {
    if (r.fd == fd && r.offset <= offset && offset + length <= r.offset + r.length && (r.access & access) == access) {
      ++hits_;
      *out = r.mr;
      return okStatus();
    }
  }
  ++misses_;
  if (api_.regDmabufMr == nullptr) {
    return makeError(collSystemError, "this verbs library cannot register dmabuf memory (GPUDirect RDMA)");
  }
  ibv_mr* mr = api_.regDmabufMr(pd_, offset, length, iova, fd, access);
  if (mr == nullptr) {
    const int err = errno;
    return makeError(collSystemError,
                     "registering dmabuf fd %d (%zu bytes) for RDMA failed: %s (GPUDirect RDMA needs "
                     "a kernel and driver with dmabuf support)",
                     fd, length, errnoText(err).c_str());
  }
  dmabuf_.push_back(DmabufRegion{fd, offset, length, access, mr});
  *out = mr;
  return okStatus();
}

void IbMrCache::evict(const void* addr, size_t length) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  const uintptr_t e = a + length;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = host_.begin(); it != host_.end() && it->first < e;) {
    if (it->second.end > a) {
      api_.deregMr(it->second.mr);
      it = host_.erase(it);
    } else {
      ++it;
    }
  }
}

void IbMrCache::evictDmabuf(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = dmabuf_.begin(); it != dmabuf_.end();) {
    if (it->fd == fd) {
      api_.deregMr(it->mr);
      it = dmabuf_.erase(it);
    } else {
      ++it;
    }
  }
}

size_t IbMrCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return host_.size() + dmabuf_.size();
}

}  // namespace coll
