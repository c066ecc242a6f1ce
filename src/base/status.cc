// Status helpers.
#include "src/base/status.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace coll {

Status makeError(collResult_t code, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return Status(code, buf);
}

std::string errnoText(int err) {
  char buf[256];
  // GNU strerror_r returns a pointer that may or may not be buf.
  const char* text = strerror_r(err, buf, sizeof(buf));
  return text;
}

}  // namespace coll
