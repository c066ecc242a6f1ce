// Chrome traces and profiler callbacks of a communicator's operations (trace.h).
#include "src/comm/trace.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include "src/base/deadline.h"
#include "src/base/log.h"
#include "src/plan/planner.h"

namespace coll {

const StringKnob kTraceFile("COLL_TRACE_FILE", "",
                            "Write a Chrome trace (Perfetto, chrome://tracing) of every operation per rank: calls, "
                            "their steps with peers and bytes, waits, failures. %r rank, %p pid, %h host; without "
                            "%r the rank is added before the extension (docs/TRACING.md).",
                            {KnobSection::Logging, 30});

std::string expandTracePath(const std::string& pattern, int rank, int pid, const std::string& host) {
  bool hasRank = false;
  std::string out = expandFilePattern(pattern, host, pid, rank, &hasRank);
  if (!hasRank) {
    const size_t slash = out.rfind('/');
    const size_t dot = out.rfind('.');
    const std::string tag = ".rank" + std::to_string(rank);
    if (dot != std::string::npos && (slash == std::string::npos || dot > slash + 1)) out.insert(dot, tag);
    else out += tag;
  }
  return out;
}

// One trace file of this process, shared by the communicators whose ranks expand to its path:
// a JSON array of trace events, each communicator a thread (tid) of the rank's process (pid).
class TraceFile {
 public:
  static std::shared_ptr<TraceFile> open(const std::string& path, int rank) {
    static std::mutex mu;
    static auto* files = new std::map<std::string, std::weak_ptr<TraceFile>>();  // never destroyed
    static auto* warned = new std::map<std::string, bool>();
    std::lock_guard<std::mutex> lock(mu);
    if (auto f = (*files)[path].lock()) return f;
    FILE* fp = fopen(path.c_str(), "w");
    if (fp == nullptr) {
      if (!(*warned)[path]) {
        COLL_WARN(rank, "COLL_TRACE_FILE: cannot write %s (%s); this rank runs untraced", path.c_str(),
                  strerror(errno));
        (*warned)[path] = true;
      }
      return nullptr;
    }
    fputs("[\n", fp);
    auto f = std::shared_ptr<TraceFile>(new TraceFile(fp));
    (*files)[path] = f;
    return f;
  }
  ~TraceFile() {
    fputs("\n]\n", fp_);
    fclose(fp_);
  }
  // A new thread of process `rank`, named in the trace's metadata.
  int addThread(int rank, const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    const int tid = ++threads_;
    char head[96];
    snprintf(head, sizeof(head),
             "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":", rank, tid);
    std::string text = head;
    text += "\"rank " + std::to_string(rank) + "\"}},\n";
    snprintf(head, sizeof(head),
             "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":", rank, tid);
    text += head;
    appendJsonString(&text, name);
    text += "}}";
    writeLocked(text);
    return tid;
  }
  void write(const std::string& events) {
    if (events.empty()) return;
    std::lock_guard<std::mutex> lock(mu_);
    writeLocked(events);
  }
  static void appendJsonString(std::string* out, const std::string& s) {
    *out += '"';
    for (unsigned char c : s) {
      if (c == '"' || c == '\\') {
        *out += '\\';
        *out += static_cast<char>(c);
      } else if (c < 0x20) {
        char esc[8];
        snprintf(esc, sizeof(esc), "\\u%04x", c);
        *out += esc;
      } else {
        *out += static_cast<char>(c);
      }
    }
    *out += '"';
  }

 private:
  explicit TraceFile(FILE* fp) : fp_(fp) {}
  void writeLocked(const std::string& text) {
    if (!first_) fputs(",\n", fp_);
    first_ = false;
    fwrite(text.data(), 1, text.size(), fp_);
    fflush(fp_);  // a job that dies keeps what was written (the closing bracket is optional)
  }
  FILE* fp_;
  std::mutex mu_;
  bool first_ = true;
  int threads_ = 0;
};

namespace {

constexpr size_t kFlushEvents = 8192;  // buffered events written at the end of a call

int32_t stepPeer(const Step& s) {
  return (s.kind == StepKind::Send || s.kind == StepKind::Recv || s.kind == StepKind::RecvReduce) ? s.peer : -1;
}

}  // namespace

CommTracer::~CommTracer() { stop(); }

void CommTracer::start(int rank, const std::string& name, ProfilerHook* hook) {
  rank_ = rank;
  if (hook != nullptr) hook_ = hook;
  const std::string pattern = kTraceFile.get();
  if (pattern.empty()) return;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  file_ = TraceFile::open(expandTracePath(pattern, rank, static_cast<int>(getpid()), host), rank);
  if (file_ != nullptr) {
    tid_ = file_->addThread(rank, name.empty() ? std::string("comm") : name);
    events_.reserve(kFlushEvents);
  }
}

void CommTracer::stop() {
  if (file_ == nullptr) return;
  flush();
  file_.reset();
}

void CommTracer::emit(collProfileEventType_t type, collProfilePhase_t phase, const char* name, int32_t peer,
                      int32_t step, uint64_t count, uint64_t bytes, int64_t ns, collResult_t result,
                      const char* message) {
  collProfileCallback_t cb = hook_->callback.load(std::memory_order_acquire);
  if (cb == nullptr) return;
  collProfileEvent_t e;
  e.type = type;
  e.phase = phase;
  e.rank = rank_;
  e.seq = seq_;
  e.name = name;
  e.algorithm = algorithm_;
  e.peer = peer;
  e.step = step;
  e.count = count;
  e.datatype = dtype_;
  e.bytes = bytes;
  e.result = result;
  e.message = message;
  e.timeNs = ns;
  cb(&e, hook_->userData.load(std::memory_order_acquire));
}

uint64_t CommTracer::stepBytes(const Step& s) const {
  return s.count * (s.unitBytes != 0 ? s.unitBytes : stepElemBytes_);
}

void CommTracer::beginCall(const char* what, const Schedule& schedule, uint64_t seq, uint64_t count,
                           collDataType_t dtype) {
  stepElemBytes_ = dataTypeSize(schedule.dtype);
  std::fill(stepStartNs_.begin(), stepStartNs_.end(), 0);
  startCall(what, schedule.algorithm != nullptr ? schedule.algorithm : "", seq, count, dtype, nowNs());
}

void CommTracer::directCall(const char* what, const char* algorithm, uint64_t seq, uint64_t count, collDataType_t dtype,
                            int64_t startNs, const Status& status) {
  startCall(what, algorithm, seq, count, dtype, startNs);
  endCall(status);
}

void CommTracer::startCall(const char* what, const char* algorithm, uint64_t seq, uint64_t count, collDataType_t dtype,
                           int64_t startNs) {
  what_ = what;
  algorithm_ = algorithm;
  seq_ = seq;
  count_ = count;
  dtype_ = dtype;
  elemBytes_ = dataTypeSize(dtype);
  callStartNs_ = startNs;
  emit(collProfileColl, collProfileStart, what_, -1, -1, count_, count_ * elemBytes_, callStartNs_, collSuccess,
       nullptr);
}

void CommTracer::endCall(const Status& status) {
  const int64_t end = nowNs();
  if (!status.ok()) {
    emit(collProfileFailure, collProfileInstant, what_, -1, -1, count_, 0, end, status.code(),
         status.message().c_str());
  }
  emit(collProfileColl, collProfileStop, what_, -1, -1, count_, count_ * elemBytes_, end, status.code(), nullptr);
  if (file_ == nullptr) return;
  uint32_t message = 0;
  if (!status.ok()) {
    message = static_cast<uint32_t>(messages_.size());
    messages_.push_back(status.message());
    events_.push_back(
        Event{Kind::Failure, what_, end, end, seq_, count_, 0, -1, -1, dtype_, status.code(), algorithm_, message});
  }
  events_.push_back(Event{Kind::Coll, what_, callStartNs_, end, seq_, count_, count_ * elemBytes_, -1, -1, dtype_,
                          status.code(), algorithm_, 0});
  if (events_.size() >= kFlushEvents) flush();
}

void CommTracer::stepStarted(int32_t step, const Step& s) {
  const int64_t now = nowNs();
  if (static_cast<size_t>(step) >= stepStartNs_.size()) stepStartNs_.resize(static_cast<size_t>(step) + 1, 0);
  stepStartNs_[static_cast<size_t>(step)] = now;
  emit(collProfileStep, collProfileStart, stepKindName(s.kind), stepPeer(s), step, s.count, stepBytes(s), now,
       collSuccess, nullptr);
}

void CommTracer::stepDone(int32_t step, const Step& s) {
  const int64_t now = nowNs();
  emit(collProfileStep, collProfileStop, stepKindName(s.kind), stepPeer(s), step, s.count, stepBytes(s), now,
       collSuccess, nullptr);
  if (file_ == nullptr) return;
  const size_t i = static_cast<size_t>(step);
  // A step done in one go (no earlier progress) starts and ends at once.
  const int64_t start = i < stepStartNs_.size() && stepStartNs_[i] != 0 ? stepStartNs_[i] : now;
  events_.push_back(Event{Kind::Step, stepKindName(s.kind), start, now, seq_, s.count, stepBytes(s), stepPeer(s), step,
                          dtype_, collSuccess, algorithm_, 0});
}

void CommTracer::waited(int32_t step, int32_t peer, int64_t startNs, int64_t endNs) {
  emit(collProfileWait, collProfileStart, "wait", peer, step, 0, 0, startNs, collSuccess, nullptr);
  emit(collProfileWait, collProfileStop, "wait", peer, step, 0, 0, endNs, collSuccess, nullptr);
  if (file_ == nullptr) return;
  events_.push_back(
      Event{Kind::Wait, "wait", startNs, endNs, seq_, 0, 0, peer, step, dtype_, collSuccess, algorithm_, 0});
}

void CommTracer::flush() {
  if (file_ == nullptr || events_.empty()) return;
  std::string text;
  text.reserve(events_.size() * 160);
  char buf[512];
  for (const Event& e : events_) {
    if (!text.empty()) text += ",\n";
    // Microseconds with nanosecond digits: the trace viewers' unit.
    const double ts = static_cast<double>(e.startNs) / 1e3;
    const double dur = static_cast<double>(e.endNs - e.startNs) / 1e3;
    switch (e.kind) {
      case Kind::Coll:
        snprintf(buf, sizeof(buf),
                 "{\"ph\":\"X\",\"cat\":\"coll\",\"name\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                 "\"args\":{\"seq\":%" PRIu64 ",\"count\":%" PRIu64 ",\"datatype\":\"%s\",\"bytes\":%" PRIu64
                 ",\"algorithm\":\"%s\",\"result\":%d}}",
                 e.name, rank_, tid_, ts, dur, e.seq, e.count, dataTypeName(e.dtype), e.bytes, e.algorithm,
                 static_cast<int>(e.result));
        break;
      case Kind::Step:
        snprintf(buf, sizeof(buf),
                 "{\"ph\":\"X\",\"cat\":\"step\",\"name\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                 "\"args\":{\"seq\":%" PRIu64 ",\"step\":%d,\"peer\":%d,\"count\":%" PRIu64 ",\"bytes\":%" PRIu64 "}}",
                 e.name, rank_, tid_, ts, dur, e.seq, e.step, e.peer, e.count, e.bytes);
        break;
      case Kind::Wait:
        snprintf(buf, sizeof(buf),
                 "{\"ph\":\"X\",\"cat\":\"wait\",\"name\":\"wait\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                 "\"args\":{\"seq\":%" PRIu64 ",\"step\":%d,\"peer\":%d}}",
                 rank_, tid_, ts, dur, e.seq, e.step, e.peer);
        break;
      case Kind::Failure: {
        snprintf(buf, sizeof(buf),
                 "{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"failure\",\"name\":\"%s failed\",\"pid\":%d,\"tid\":%d,"
                 "\"ts\":%.3f,\"args\":{\"seq\":%" PRIu64 ",\"result\":%d,\"message\":",
                 e.name, rank_, tid_, ts, e.seq, static_cast<int>(e.result));
        text += buf;
        TraceFile::appendJsonString(&text, messages_[e.message]);
        text += "}}";
        continue;
      }
    }
    text += buf;
  }
  events_.clear();
  messages_.clear();
  file_->write(text);
}

}  // namespace coll
