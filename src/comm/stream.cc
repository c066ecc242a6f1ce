// Host streams (see stream.h).
#include "src/comm/stream.h"

#include <memory>
#include <unordered_map>

namespace coll {

uint64_t HostStream::enqueue() {
  std::lock_guard<std::mutex> lock(mu_);
  return ++issued_;
}

Status HostStream::waitTurn(uint64_t ticket, Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_until(lock, deadline.when(), [&] { return completed_ + 1 >= ticket; })) {
    return makeError(collTimeout,
                     "a host stream's earlier operation (on another communicator) did not complete "
                     "within COLL_TIMEOUT");
  }
  return okStatus();
}

void HostStream::complete(uint64_t ticket, const Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ticket > completed_) completed_ = ticket;
  if (!status.ok() && firstError_.ok()) firstError_ = status;
  cv_.notify_all();
}

Status HostStream::synchronize(Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_until(lock, deadline.when(), [&] { return completed_ >= issued_; })) {
    return makeError(collTimeout, "host stream synchronize: %llu operation(s) still pending after COLL_TIMEOUT",
                     static_cast<unsigned long long>(issued_ - completed_));
  }
  return firstError_;
}

collResult_t HostStream::query(std::string* message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!firstError_.ok()) {
    *message = firstError_.message();
    return firstError_.code();
  }
  return completed_ >= issued_ ? collSuccess : collInProgress;
}

namespace {

std::mutex gStreamsMu;
std::unordered_map<collStream_t, std::shared_ptr<HostStream>>& streams() {
  static auto* map = new std::unordered_map<collStream_t, std::shared_ptr<HostStream>>();
  return *map;
}

}  // namespace

Status createHostStream(collStream_t* out) {
  auto stream = std::make_shared<HostStream>();
  std::lock_guard<std::mutex> lock(gStreamsMu);
  collStream_t handle = stream.get();
  streams()[handle] = std::move(stream);
  *out = handle;
  return okStatus();
}

Status destroyHostStream(collStream_t handle) {
  std::shared_ptr<HostStream> stream;
  {
    std::lock_guard<std::mutex> lock(gStreamsMu);
    auto it = streams().find(handle);
    if (it == streams().end()) {
      return makeError(collInvalidArgument, "stream %p is not a live host stream", handle);
    }
    stream = std::move(it->second);
    streams().erase(it);
  }
  // Work still queued keeps its own reference; the handle is gone for new calls.
  return okStatus();
}

Status findHostStream(collStream_t handle, std::shared_ptr<HostStream>* out) {
  std::lock_guard<std::mutex> lock(gStreamsMu);
  auto it = streams().find(handle);
  if (it == streams().end()) {
    return makeError(collInvalidArgument,
                     "stream %p is not a host stream made by collHostStreamCreate (GPU streams need GPU buffers, "
                     "which this build does not support yet)",
                     handle);
  }
  *out = it->second;
  return okStatus();
}

}  // namespace coll
