// The knob registry (see config.h) and the deadline knob. A new knob is declared where it is read,
// and gets a row in docs/KNOBS.md (collinfo --markdown prints it).
#include "src/base/config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "src/base/log.h"

namespace coll {

namespace {

// A function-local static: knobs of other files register during static initialisation, in an
// order between files that C++ leaves open.
std::vector<const Knob*>& registry() {
  static std::vector<const Knob*> knobs;
  return knobs;
}

bool listedBefore(const Knob* a, const Knob* b) {
  if (a->place().section != b->place().section) return a->place().section < b->place().section;
  if (a->place().order != b->place().order) return a->place().order < b->place().order;
  return strcmp(a->name(), b->name()) < 0;
}

void warnOnce(const char* name, const std::string& value, const char* expected) {
  static std::mutex mu;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mu);
  if (warned.insert(name).second) {
    COLL_WARN(-1, "ignoring %s=%s: expected %s; using the default", name, value.c_str(), expected);
  }
}

std::optional<int64_t> parseInt(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long long v = strtoll(text.c_str(), &end, 0);
  if (errno != 0 || end == text.c_str() || *end != '\0') return std::nullopt;
  return static_cast<int64_t>(v);
}

}  // namespace

const IntKnob kTimeout(
    "COLL_TIMEOUT", "300",
    "Seconds any wait may last before it fails with collTimeout (bootstrap, connections, collectives).",
    {KnobSection::Deadlines, 10});

Knob::Knob(const char* name, KnobType type, const char* defaultValue, const char* doc, KnobPlace place)
    : name_(name), type_(type), defaultValue_(defaultValue), doc_(doc), place_(place) {
  std::vector<const Knob*>& knobs = registry();
  knobs.insert(std::upper_bound(knobs.begin(), knobs.end(), this, listedBefore), this);
}

const std::vector<const Knob*>& allKnobs() { return registry(); }

std::optional<std::string> Knob::raw() const {
  const char* v = getenv(name_);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::optional<uint64_t> parseBytes(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = strtoull(text.c_str(), &end, 0);
  if (errno != 0 || end == text.c_str() || text[0] == '-') return std::nullopt;
  uint64_t mult = 1;
  if (*end == 'K' || *end == 'k') mult = 1ull << 10, ++end;
  else if (*end == 'M' || *end == 'm') mult = 1ull << 20, ++end;
  else if (*end == 'G' || *end == 'g') mult = 1ull << 30, ++end;
  if (*end == 'B' || *end == 'b') ++end;
  if (*end != '\0') return std::nullopt;
  if (v > UINT64_MAX / mult) return std::nullopt;
  return v * mult;
}

std::optional<double> parseNumber(const std::string& text) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double v = strtod(text.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::string trimSpace(const std::string& text) {
  size_t b = 0, e = text.size();
  while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) --e;
  return text.substr(b, e - b);
}

int64_t IntKnob::get() const {
  if (auto text = raw()) {
    if (auto v = parseInt(*text)) return *v;
    warnOnce(name(), *text, "an integer");
  }
  return parseInt(defaultValue()).value_or(0);
}

bool BoolKnob::get() const {
  auto parse = [](const std::string& s) -> std::optional<bool> {
    if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
    if (s == "0" || s == "false" || s == "no" || s == "off") return false;
    return std::nullopt;
  };
  if (auto text = raw()) {
    if (auto v = parse(*text)) return *v;
    warnOnce(name(), *text, "0 or 1");
  }
  return parse(defaultValue()).value_or(false);
}

std::string StringKnob::get() const {
  if (auto text = raw()) return *text;
  return defaultValue();
}

uint64_t BytesKnob::get() const {
  if (auto text = raw()) {
    if (auto v = parseBytes(*text)) return *v;
    warnOnce(name(), *text, "a byte count such as 65536, 64K or 4M");
  }
  return parseBytes(defaultValue()).value_or(0);
}

int64_t defaultTimeoutMs() {
  int64_t s = kTimeout.get();
  if (s <= 0) s = 300;
  return s * 1000;
}

}  // namespace coll
