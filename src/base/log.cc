// Logging implementation (see log.h).
#include "src/base/log.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "src/base/config.h"

namespace coll {

const StringKnob kDebug("COLL_DEBUG", "WARN", "Log level: NONE, WARN, INFO or TRACE.", {KnobSection::Logging, 10});
const StringKnob kDebugFile("COLL_DEBUG_FILE", "",
                            "Write log lines to this file (%h = host, %p = pid) instead of stderr.",
                            {KnobSection::Logging, 20});

namespace {

std::atomic<int> gLevel{-1};
std::mutex gFileMu;
FILE* gFile = nullptr;
std::atomic<LogSink> gSink{nullptr};

int parseLevel() {
  std::string v = kDebug.get();
  for (auto& c : v) c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
  if (v == "NONE" || v == "0") return 0;
  if (v == "INFO") return 2;
  if (v == "TRACE") return 3;
  return 1;
}

FILE* logFile() {
  if (gFile) return gFile;
  std::string path = kDebugFile.get();
  if (!path.empty()) {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    gFile = fopen(expandFilePattern(path, host, static_cast<int>(getpid())).c_str(), "a");
  }
  if (!gFile) gFile = stderr;
  return gFile;
}

}  // namespace

std::string printableText(const char* data, size_t size) {
  std::string s(data, size);
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
  }
  return s;
}

std::string expandFilePattern(const std::string& pattern, const std::string& host, int pid, int rank, bool* usedRank) {
  std::string out;
  if (usedRank != nullptr) *usedRank = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char next = i + 1 < pattern.size() ? pattern[i + 1] : '\0';
    if (pattern[i] != '%' || (next != 'h' && next != 'p' && next != '%' && (next != 'r' || rank < 0))) {
      out += pattern[i];
      continue;
    }
    ++i;
    if (next == 'h') {
      out += host;
    } else if (next == 'p') {
      out += std::to_string(pid);
    } else if (next == '%') {
      out += '%';
    } else {
      out += std::to_string(rank);
      if (usedRank != nullptr) *usedRank = true;
    }
  }
  return out;
}

LogLevel logLevel() {
  int level = gLevel.load(std::memory_order_relaxed);
  if (level < 0) {
    level = parseLevel();
    gLevel.store(level, std::memory_order_relaxed);
  }
  return static_cast<LogLevel>(level);
}

void logReset() { gLevel.store(-1); }

void setLogSink(LogSink sink) { gSink.store(sink); }

void logPrintf(LogLevel level, int rank, const char* fmt, ...) {
  static const char* kNames[] = {"NONE", "WARN", "INFO", "TRACE"};
  char host[64] = {0};
  gethostname(host, sizeof(host) - 1);
  char* dot = strchr(host, '.');
  if (dot) *dot = '\0';
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (LogSink sink = gSink.load()) {
    sink(level, msg);
    return;
  }
  char rankText[16] = "";
  if (rank >= 0) snprintf(rankText, sizeof(rankText), " [%d]", rank);
  std::lock_guard<std::mutex> lock(gFileMu);
  FILE* f = logFile();
  fprintf(f, "%s:%d:%ld%s COLL %s %s\n", host, static_cast<int>(getpid()), static_cast<long>(syscall(SYS_gettid)),
          rankText, kNames[static_cast<int>(level)], msg);
  fflush(f);
}

}  // namespace coll
