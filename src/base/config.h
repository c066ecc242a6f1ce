// Config: the one registry of environment knobs. Every COLL_* variable (and every launcher
// variable we read, such as RANK or SLURM_PROCID) is declared once in config.cc with its type,
// default and a line of documentation; nothing else in the library calls getenv.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace coll {

enum class KnobType { Int, Bool, String, Bytes };

struct KnobInfo {
  const char* name;
  KnobType type;
  const char* defaultValue;  // as text; "" = unset
  const char* doc;
  bool foreign;  // set by launchers (torchrun, Open MPI, Slurm, ...), not one of ours
};

// All declared knobs, in documentation order.
const std::vector<KnobInfo>& allKnobs();

// The raw value from the environment, if set and non-empty. `name` must be declared: an
// undeclared name aborts (a programming error caught by the unit tests).
std::optional<std::string> knobRaw(const char* name);

// Typed accessors: the environment value if set and valid, else the declared default. A value
// that does not parse is reported once as a warning and the default is used.
int64_t knobInt(const char* name);
bool knobBool(const char* name);
std::string knobString(const char* name);
// Bytes accept suffixes K, M, G (powers of 1024).
uint64_t knobBytes(const char* name);

// Parses "123", "4K", "2M", "1G". Returns nullopt on junk.
std::optional<uint64_t> parseBytes(const std::string& text);

// COLL_TIMEOUT in milliseconds (the default deadline for every wait).
int64_t defaultTimeoutMs();

}  // namespace coll
