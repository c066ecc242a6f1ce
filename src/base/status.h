// Status: the [[nodiscard]] result of every internal function that can fail. Carries a
// collResult_t and a sentence a user can act on; no exceptions cross module boundaries.
#pragma once

#include <string>
#include <utility>

#include "collective/collective.h"

namespace coll {

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(collResult_t code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == collSuccess; }
  collResult_t code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prepends context ("while connecting to rank 3: ") to the message, keeping the code.
  Status withContext(const std::string& context) const {
    if (ok()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  collResult_t code_ = collSuccess;
  std::string message_;
};

inline Status okStatus() { return Status(); }

// printf-style constructor for error statuses.
Status makeError(collResult_t code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// errno text for system-call failures ("Connection refused").
std::string errnoText(int err);

}  // namespace coll

#define COLL_TRY(expr)                                   \
  do {                                                   \
    ::coll::Status coll_try_status_ = (expr);            \
    if (!coll_try_status_.ok()) return coll_try_status_; \
  } while (0)
