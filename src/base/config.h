// Config: the one registry of environment knobs. Each knob (every COLL_* variable, and every
// launcher variable we read, such as RANK or SLURM_PROCID) is a typed handle declared once by the
// part that reads it, with its default, a line of documentation and its place in docs/KNOBS.md;
// code reads it through the handle, so a misspelt knob does not compile. Nothing else in the
// library calls getenv.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace coll {

enum class KnobType { Int, Bool, String, Bytes };

// The documentation's sections, in their order (collinfo, docs/KNOBS.md).
enum class KnobSection { Logging, Deadlines, Bootstrap, Transports, PlannerExecutor, Launcher };

// Where a knob is listed: its section, then `order` within it (gaps leave room for new knobs).
struct KnobPlace {
  KnobSection section;
  int order;
};

// One environment variable. Handles are namespace-scope objects that register themselves at
// static initialisation, so they are read only from functions (never from another static's
// initialiser).
class Knob {
 public:
  Knob(const Knob&) = delete;
  Knob& operator=(const Knob&) = delete;

  const char* name() const { return name_; }
  KnobType type() const { return type_; }
  const char* defaultValue() const { return defaultValue_; }  // as text; "" = unset
  const char* doc() const { return doc_; }
  KnobPlace place() const { return place_; }
  // A launcher's variable (torchrun, Open MPI, Slurm, ...), not one of ours.
  bool foreign() const { return place_.section == KnobSection::Launcher; }
  // The value from the environment, if set and non-empty.
  std::optional<std::string> raw() const;

 protected:
  Knob(const char* name, KnobType type, const char* defaultValue, const char* doc, KnobPlace place);
  ~Knob() = default;

 private:
  const char* name_;
  KnobType type_;
  const char* defaultValue_;
  const char* doc_;
  KnobPlace place_;
};

// The typed handles: get() is the environment value if set and valid, else the default; a value
// that does not parse is reported once as a warning and the default is used.
class IntKnob : public Knob {
 public:
  IntKnob(const char* name, const char* defaultValue, const char* doc, KnobPlace place)
      : Knob(name, KnobType::Int, defaultValue, doc, place) {}
  int64_t get() const;
};

class BoolKnob : public Knob {
 public:
  BoolKnob(const char* name, const char* defaultValue, const char* doc, KnobPlace place)
      : Knob(name, KnobType::Bool, defaultValue, doc, place) {}
  bool get() const;
};

class StringKnob : public Knob {
 public:
  StringKnob(const char* name, const char* defaultValue, const char* doc, KnobPlace place)
      : Knob(name, KnobType::String, defaultValue, doc, place) {}
  std::string get() const;
};

// Bytes accept suffixes K, M, G (powers of 1024).
class BytesKnob : public Knob {
 public:
  BytesKnob(const char* name, const char* defaultValue, const char* doc, KnobPlace place)
      : Knob(name, KnobType::Bytes, defaultValue, doc, place) {}
  uint64_t get() const;
};

// Every registered knob, in documentation order (section, then order, then name).
const std::vector<const Knob*>& allKnobs();

// Parses "123", "4K", "2M", "1G". Returns nullopt on junk.
std::optional<uint64_t> parseBytes(const std::string& text);
// Parses a whole string as a finite decimal number ("2.5", "1e6"). Returns nullopt on junk.
std::optional<double> parseNumber(const std::string& text);
// `text` without the white space around it.
std::string trimSpace(const std::string& text);

// COLL_TIMEOUT in milliseconds (the default deadline for every wait).
int64_t defaultTimeoutMs();

}  // namespace coll
