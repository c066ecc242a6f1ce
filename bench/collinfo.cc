// collinfo: prints the library version, the SIMD level the kernels picked, the algorithms COLL_ALGO
// can name, and every knob of the config registry with its current value; --markdown prints
// docs/KNOBS.md's knob table; --topo prints this node's topology (or COLL_TOPO_FILE's) and the
// placement it gives.
#include <cstdio>
#include <cstring>
#include <string>

#include "algorithms/registry.h"
#include "collective/collective.h"
#include "src/base/config.h"
#include "src/kernels/reduce.h"
#include "src/topo/hw_topology.h"
#include "src/topo/placement.h"

namespace {

const char* typeName(coll::KnobType t) {
  switch (t) {
    case coll::KnobType::Int: return "int";
    case coll::KnobType::Bool: return "bool";
    case coll::KnobType::String: return "string";
    case coll::KnobType::Bytes: return "bytes";
  }
  return "?";
}

// Markdown cells must not contain a bare '|'.
std::string cell(const char* text) {
  std::string out;
  for (const char* p = text; *p; ++p) {
    if (*p == '|') out += "\\|";
    else out += *p;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  bool markdown = false;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--markdown") == 0) {
      markdown = true;
    } else if (strcmp(argv[i], "--topo") == 0) {
      const coll::HwTopology* topo = nullptr;
      coll::Status st = coll::nodeTopology(&topo);
      if (!st.ok()) {
        fprintf(stderr, "collinfo: %s\n", st.message().c_str());
        return 1;
      }
      printf("%s%s", topo->describe().c_str(), coll::describePlacement(*topo).c_str());
      return 0;
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      printf(
          "usage: collinfo [--markdown | --topo]\n  prints version, SIMD level and all environment knobs\n"
          "  --markdown  the knob table for docs/KNOBS.md\n"
          "  --topo      this node's topology (COLL_TOPO_FILE: an hwloc XML file instead) and placement\n");
      return 0;
    } else {
      fprintf(stderr, "collinfo: unknown argument %s (see --help)\n", argv[i]);
      return 2;
    }
  }
  const auto& knobs = coll::allKnobs();
  if (markdown) {
    printf("| Variable | Type | Default | Description |\n|---|---|---|---|\n");
    for (const coll::Knob* k : knobs) {
      std::string def = k->defaultValue()[0] ? std::string("`") + k->defaultValue() + "`" : "";
      printf("| `%s` | %s | %s | %s%s |\n", k->name(), typeName(k->type()), def.c_str(),
             k->foreign() ? "(launcher) " : "", cell(k->doc()).c_str());
    }
    return 0;
  }
  int version = 0;
  if (collGetVersion(&version) != collSuccess) version = COLL_VERSION_CODE;
  printf("libcollective %d.%d.%d\n", version / 10000, (version / 100) % 100, version % 100);
  printf("SIMD level: %s\n", coll::kernels::simdLevel());
  printf("\nAlgorithms (COLL_ALGO):\n");
  for (const coll::AlgorithmDescriptor* d : coll::allAlgorithms()) {
    std::string serves;
    for (int k = 0; k <= static_cast<int>(coll::CollKind::Barrier); ++k) {
      const auto kind = static_cast<coll::CollKind>(k);
      if (d->serves & coll::collBit(kind)) serves += std::string(serves.empty() ? "" : ", ") + coll::collKindName(kind);
    }
    printf("  %-24s %s\n", d->name, serves.c_str());
  }
  printf("\nEnvironment knobs (value shown when set):\n");
  for (const coll::Knob* k : knobs) {
    auto raw = k->raw();
    printf("  %-24s %-6s default=%-8s %s%s\n", k->name(), typeName(k->type()),
           k->defaultValue()[0] ? k->defaultValue() : "-", raw ? "value=" : "",
           // The job secret is never printed: collinfo output lands in logs and bug reports.
           !raw                                           ? ""
           : std::string(k->name()) == "COLL_COMM_SECRET" ? "(set, hidden)"
                                                          : raw->c_str());
    printf("      %s%s\n", k->foreign() ? "(set by launchers) " : "", k->doc());
  }
  return 0;
}
