// Tracing and profiling of a communicator's operations: the per-rank Chrome trace that
// COLL_TRACE_FILE asks for, and the callback of collCommSetProfiler. Both are fed by one
// CommTracer per communicator (lane), the executor's observer; with neither on, a call pays one
// test of a pointer and an atomic load.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collective/collective.h"
#include "src/base/config.h"
#include "src/base/status.h"
#include "src/exec/executor.h"

namespace coll {

extern const StringKnob kTraceFile;  // COLL_TRACE_FILE

// The profiler callback a communicator and its lanes share (the parent owns it).
struct ProfilerHook {
  std::atomic<collProfileCallback_t> callback{nullptr};
  std::atomic<void*> userData{nullptr};
};

// The file name a rank writes its trace to: %r the rank, %p the process id, %h the host name,
// %% a percent sign; without %r, ".rank<r>" goes before the extension (or at the end).
std::string expandTracePath(const std::string& pattern, int rank, int pid, const std::string& host);

class TraceFile;

class CommTracer final : public ExecObserver {
 public:
  CommTracer() = default;
  ~CommTracer();
  CommTracer(const CommTracer&) = delete;
  CommTracer& operator=(const CommTracer&) = delete;

  // Opens this rank's trace file when COLL_TRACE_FILE is set (a file that cannot be written is one
  // warning, and the communicator goes on untraced). `name` names the communicator in the trace.
  void start(int rank, const std::string& name, ProfilerHook* hook);
  // Writes what is buffered and lets go of the file (the last communicator closes it).
  void stop();

  // The observer for the next call, or nullptr when nothing traces or profiles it.
  ExecObserver* observer() {
    return (file_ != nullptr || hook_->callback.load(std::memory_order_acquire) != nullptr) ? this : nullptr;
  }
  // Around one execution (only when observer() gave this).
  // `count` elements of `dtype` (the call's); the steps count in the schedule's type.
  void beginCall(const char* what, const Schedule& schedule, uint64_t seq, uint64_t count, collDataType_t dtype);
  void endCall(const Status& status);
  // A call that ran outside the executor, from startNs until now: device buffers over CUDA IPC
  // (copies and kernels on the GPU; the host barriers it takes are traced as calls of their own,
  // inside this one). Only when observer() gave this.
  void directCall(const char* what, const char* algorithm, uint64_t seq, uint64_t count, collDataType_t dtype,
                  int64_t startNs, const Status& status);

  void stepStarted(int32_t step, const Step& s) override;
  void stepDone(int32_t step, const Step& s) override;
  void waited(int32_t step, int32_t peer, int64_t startNs, int64_t endNs) override;

 private:
  enum class Kind : uint8_t { Coll, Step, Wait, Failure };
  // The call's fields, and its start event at startNs.
  void startCall(const char* what, const char* algorithm, uint64_t seq, uint64_t count, collDataType_t dtype,
                 int64_t startNs);
  // A finished event, formatted only when flushed (off the call's path).
  struct Event {
    Kind kind;
    const char* name;
    int64_t startNs, endNs;
    uint64_t seq, count, bytes;
    int32_t peer, step;
    collDataType_t dtype;
    collResult_t result;
    const char* algorithm;
    uint32_t message;  // Failure: index into messages_
  };
  void emit(collProfileEventType_t type, collProfilePhase_t phase, const char* name, int32_t peer, int32_t step,
            uint64_t count, uint64_t bytes, int64_t ns, collResult_t result, const char* message);
  uint64_t stepBytes(const Step& s) const;
  void flush();

  int rank_ = 0;
  ProfilerHook fallbackHook_;  // before start()
  ProfilerHook* hook_ = &fallbackHook_;
  std::shared_ptr<TraceFile> file_;
  int tid_ = 0;
  std::vector<Event> events_;
  std::vector<std::string> messages_;
  // The call in progress.
  const char* what_ = "";
  const char* algorithm_ = "";
  uint64_t seq_ = 0, count_ = 0;
  collDataType_t dtype_ = collFloat32;
  size_t elemBytes_ = 1;      // the call's element
  size_t stepElemBytes_ = 1;  // the schedule's element
  int64_t callStartNs_ = 0;
  std::vector<int64_t> stepStartNs_;  // per step index of the running schedule
};

}  // namespace coll
