// Host streams: library-made stream objects for host buffers. Work enqueued on a stream runs in
// order on its communicator's progress thread, so the application computes while the library
// communicates; synchronize/query report completion and the first asynchronous error.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "collective/collective.h"
#include "src/base/deadline.h"
#include "src/base/status.h"

namespace coll {

class HostStream {
 public:
  // A ticket per enqueued operation, in issue order.
  uint64_t enqueue();
  // Blocks until every ticket before `ticket` completed (stream order across communicators), or
  // the deadline passes (collTimeout).
  Status waitTurn(uint64_t ticket, Deadline deadline);
  // Marks `ticket` complete with its status (the first error sticks).
  void complete(uint64_t ticket, const Status& status);
  // All enqueued work done: the first error, or success. Bounded by the deadline.
  Status synchronize(Deadline deadline);
  // collSuccess when idle, collInProgress while work is pending, else the first error's code.
  collResult_t query(std::string* message);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t issued_ = 0;
  uint64_t completed_ = 0;
  Status firstError_;
};

// Registry of live host streams: a collStream_t is a host stream only if it is registered here,
// so a stale or foreign pointer is a clean error and never dereferenced.
Status createHostStream(collStream_t* out);
Status destroyHostStream(collStream_t stream);
// The stream behind a handle (kept alive by the returned reference count while in use).
Status findHostStream(collStream_t stream, std::shared_ptr<HostStream>* out);

}  // namespace coll
