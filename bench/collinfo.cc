// collinfo: an engineer's first stop. By default: versions (the library, its build, and what it
// runs on: UCX, hwloc, OpenSSL, the CUDA driver), the transports this build has and this machine
// can use (RDMA devices and ports, UCX's transports, interfaces), the kernels (SIMD levels, CUDA),
// the node's topology in brief, the knobs that are set and the algorithms COLL_ALGO can name.
// --knobs lists every knob with its value; --markdown prints docs/KNOBS.md's knob table; --topo
// prints this node's topology (or COLL_TOPO_FILE's) and the placement it gives.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/registry.h"
#include "collective/collective.h"
#include "src/base/config.h"
#include "src/gpu/cuda_driver.h"
#include "src/gpu/device_kernels.h"
#include "src/kernels/quantize.h"
#include "src/kernels/reduce.h"
#include "src/oob/auth.h"
#include "src/topo/hw_topology.h"
#include "src/topo/placement.h"
#include "transports/net.h"

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

void printKnob(const coll::Knob* k, bool withDoc) {
  auto raw = k->raw();
  printf("  %-24s %-6s default=%-8s %s%s\n", k->name(), typeName(k->type()),
         k->defaultValue()[0] ? k->defaultValue() : "-", raw ? "value=" : "",
         // The job secret is never printed: collinfo output lands in logs and bug reports.
         !raw                                           ? ""
         : std::string(k->name()) == "COLL_COMM_SECRET" ? "(set, hidden)"
                                                        : raw->c_str());
  if (withDoc) printf("      %s%s\n", k->foreign() ? "(set by launchers) " : "", k->doc());
}

void printVersions() {
  int version = 0;
  if (collGetVersion(&version) != collSuccess) version = COLL_VERSION_CODE;
  printf("libcollective %d.%d.%d\n", version / 10000, (version / 100) % 100, version % 100);
#if defined(__clang__)
  const char* compiler = "clang " __clang_version__;
#elif defined(__GNUC__)
  const char* compiler = "g++ " __VERSION__;
#else
  const char* compiler = "an unknown compiler";
#endif
#ifdef NDEBUG
  const char* assertions = "assertions off";
#else
  const char* assertions = "assertions on";
#endif
  printf("  built with %s (C++ %ld, %s)\n", compiler, static_cast<long>(__cplusplus), assertions);
  printf("  %s; %s\n", coll::hwlocVersion().c_str(), coll::cryptoLibraryVersion().c_str());
  printf("  NCCL net plugin: libnccl-net-collective.so (ncclNetPlugin_v8 to _v11)\n");
}

void printTransports() {
  printf("\nTransports (COLL_TRANSPORT, COLL_NET):\n");
  printf("  %-5s built, available: between the ranks of a host (/dev/shm)\n", "shm");
  for (const coll::NetReport& r : coll::reportNets()) {
    const char* name = coll::netKindName(r.kind);
    if (!r.built) {
      printf("  %-5s not built: %s\n", name, r.why.c_str());
      continue;
    }
    if (r.available) printf("  %-5s built, available%s\n", name, r.automatic ? "" : " (not an automatic choice)");
    else printf("  %-5s built, not available: %s\n", name, r.why.c_str());
    for (const std::string& line : r.detail) printf("        %s\n", line.c_str());
  }
}

void printGpu() {
  printf("\nGPU:\n");
  const bool image = coll::gpu::kCollDeviceKernelImageSize > 0;
  printf("  device kernels: %s\n",
         image ? "built (sm_80, sm_90, compute_90 PTX)" : "not built (no working nvcc at configure time)");
  std::string why;
  const coll::gpu::CudaDriver* cu = coll::gpu::cudaDriver(&why);
  if (cu == nullptr) {
    printf("  CUDA driver: not loaded: %s (device buffers are an error saying so)\n", why.c_str());
    return;
  }
  printf("  CUDA driver: %s, CUDA %d.%d, %d device(s)%s\n", cu->path.c_str(), cu->version / 1000,
         (cu->version % 1000) / 10, cu->deviceCount,
         cu->hasVirtualMemory() ? ", virtual memory management (cuMem IPC by file descriptor)" : "");
  for (int d = 0; d < cu->deviceCount; ++d) {
    char bus[32] = "?";
    CUdevice dev = 0;
    if (cu->cuDeviceGet(&dev, d) != coll::cu::kSuccess ||
        cu->cuDeviceGetPCIBusId(bus, sizeof(bus), dev) != coll::cu::kSuccess) {
      snprintf(bus, sizeof(bus), "?");
    }
    printf("    device %d: PCI %s\n", d, bus);
  }
  if (cu->deviceCount > 0 && image) {
    std::string kernelsWhy;
    if (coll::gpu::setCurrentDevice(*cu, 0).ok() && !coll::gpu::deviceKernelsAvailable(*cu, &kernelsWhy)) {
      printf("  device kernels do not load on device 0: %s\n", kernelsWhy.c_str());
    }
  }
}

void printTopologySummary() {
  printf("\nTopology (collinfo --topo for the whole view):\n");
  const coll::HwTopology* topo = nullptr;
  coll::Status st = coll::nodeTopology(&topo);
  if (!st.ok()) {
    printf("  cannot be loaded: %s\n", st.message().c_str());
    return;
  }
  printf("  %s: %d socket(s), %zu NUMA node(s), %d cores, %d CPUs, %zu GPU(s), %zu NIC(s)\n", topo->source.c_str(),
         topo->sockets, topo->numa.size(), topo->cores, topo->pus, topo->gpus.size(), topo->nics.size());
}

}  // namespace

int main(int argc, char** argv) {
  bool markdown = false, allKnobs = false;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--markdown") == 0) {
      markdown = true;
    } else if (strcmp(argv[i], "--knobs") == 0) {
      allKnobs = true;
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
          "usage: collinfo [--knobs | --markdown | --topo]\n"
          "  prints versions, the transports (built, available, devices and ports), kernels, GPU,\n"
          "  the topology in brief, the knobs that are set and the algorithms\n"
          "  --knobs     every knob with its default, its value where set and its description\n"
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
  if (allKnobs) {
    printf("Environment knobs (value shown when set):\n");
    for (const coll::Knob* k : knobs) printKnob(k, true);
    return 0;
  }
  printVersions();
  printTransports();
  printf("\nKernels: reduction %s, int4 quantization %s (chosen from CPUID)\n", coll::kernels::simdLevel(),
         coll::kernels::quantKernelLevel());
  printGpu();
  printTopologySummary();
  printf("\nKnobs set (collinfo --knobs lists all %zu):\n", knobs.size());
  int set = 0;
  for (const coll::Knob* k : knobs) {
    if (k->raw()) printKnob(k, false), ++set;
  }
  if (set == 0) printf("  none\n");
  printf("\nAlgorithms (COLL_ALGO):\n");
  for (const coll::AlgorithmDescriptor* d : coll::allAlgorithms()) {
    std::string serves;
    for (int k = 0; k <= static_cast<int>(coll::CollKind::Barrier); ++k) {
      const auto kind = static_cast<coll::CollKind>(k);
      if (d->serves & coll::collBit(kind)) serves += std::string(serves.empty() ? "" : ", ") + coll::collKindName(kind);
    }
    printf("  %-24s %s\n", d->name, serves.c_str());
  }
  return 0;
}
