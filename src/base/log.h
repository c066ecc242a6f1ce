// Logging: COLL_DEBUG=WARN|INFO|TRACE, lines prefixed "host:pid:tid [rank]" like NCCL's.
#pragma once

#include <string>

namespace coll {

enum class LogLevel { None = 0, Warn = 1, Info = 2, Trace = 3 };

// Level from COLL_DEBUG, read once.
LogLevel logLevel();
inline bool logEnabled(LogLevel level) { return static_cast<int>(level) <= static_cast<int>(logLevel()); }

// rank < 0 prints no rank. Never pass secrets.
void logPrintf(LogLevel level, int rank, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

// A file name from a pattern (COLL_DEBUG_FILE, COLL_TRACE_FILE): %h the host, %p the process id,
// %r `rank` (rank >= 0; otherwise left as it is), %% a percent sign. *usedRank, when given, says
// whether %r was expanded.
std::string expandFilePattern(const std::string& pattern, const std::string& host, int pid, int rank = -1,
                              bool* usedRank = nullptr);

// Text that came off the wire (a peer's error message, a failure reason), made fit for our logs:
// every byte outside printable ASCII becomes '?'.
std::string printableText(const char* data, size_t size);

// Re-reads COLL_DEBUG (tests).
void logReset();

// Sends every line that passes the level to `sink` instead of the log file (the NCCL net plugin
// routes ours into NCCL's logger); nullptr restores the file.
using LogSink = void (*)(LogLevel level, const char* message);
void setLogSink(LogSink sink);

}  // namespace coll

#define COLL_LOG(level, rank, ...)                                                                                  \
  do {                                                                                                              \
    if (::coll::logEnabled(::coll::LogLevel::level)) ::coll::logPrintf(::coll::LogLevel::level, rank, __VA_ARGS__); \
  } while (0)
#define COLL_WARN(rank, ...) COLL_LOG(Warn, rank, __VA_ARGS__)
#define COLL_INFO(rank, ...) COLL_LOG(Info, rank, __VA_ARGS__)
#define COLL_TRACE(rank, ...) COLL_LOG(Trace, rank, __VA_ARGS__)
