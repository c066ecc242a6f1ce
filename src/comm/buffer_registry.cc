#include "src/comm/buffer_registry.h"

#include <algorithm>

namespace coll {

void* BufferRegistry::add(const Entry& e) {
  auto owned = std::make_unique<Entry>(e);
  void* handle = owned.get();
  std::lock_guard<std::mutex> lock(mu_);
  entries_.push_back(std::move(owned));
  return handle;
}

bool BufferRegistry::remove(void* handle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const auto& e) { return e.get() == handle; });
  if (it == entries_.end()) return false;
  entries_.erase(it);
  return true;
}

bool BufferRegistry::findDevice(const void* p, size_t bytes, Entry* entry) const {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& e : entries_) {
    const bool inside = a >= e->begin && a - e->begin <= e->size && bytes <= e->size - (a - e->begin);
    if (e->kind != gpu::MemKind::Device || !inside) continue;
    *entry = *e;
    return true;
  }
  return false;
}

}  // namespace coll
