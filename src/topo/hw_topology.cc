// Loading a node's topology from hwloc (or the OS alone), NVLink from NVML, and the summary's
// compact form.
#include "src/topo/hw_topology.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "src/base/byte_order.h"
#include "src/base/config.h"
#include "src/base/log.h"

#if COLL_HAVE_HWLOC
#include <hwloc.h>
#endif

namespace coll {

std::string hwlocVersion() {
#if COLL_HAVE_HWLOC
  std::string v = std::string("hwloc ") + HWLOC_VERSION;
  const unsigned running = hwloc_get_api_version();
  if (running != HWLOC_API_VERSION) {
    char buf[64];
    snprintf(buf, sizeof(buf), " (running API %#x, built for %#x)", running, static_cast<unsigned>(HWLOC_API_VERSION));
    v += buf;
  }
  return v;
#else
  return "hwloc: not in this build (install libhwloc-dev and rebuild)";
#endif
}

const StringKnob kTopoFile("COLL_TOPO_FILE", "",
                           "hwloc XML file describing this node, used instead of discovering it "
                           "(lstopo --of xml); collinfo --topo prints what it gives.",
                           {KnobSection::Transports, 5});

std::string topologyFile() { return kTopoFile.get(); }

std::string formatPciBusId(PciBusId id) {
  char text[16];
  snprintf(text, sizeof text, "%04x:%02x:%02x.%x", id >> 16, (id >> 8) & 0xff, (id >> 3) & 0x1f, id & 7);
  return text;
}

bool parsePciBusId(const std::string& text, PciBusId* out) {
  // Hex fields only (sscanf would take signs, spaces and "0x").
  std::vector<uint32_t> fields(1, 0);
  std::vector<size_t> digits(1, 0);
  std::string seps;
  for (char c : text) {
    if (c == ':' || c == '.') {
      seps += c, fields.push_back(0), digits.push_back(0);
    } else if (isxdigit(static_cast<unsigned char>(c)) && digits.back() < 4) {
      fields.back() = fields.back() * 16 +
                      static_cast<uint32_t>(isdigit(static_cast<unsigned char>(c)) ? c - '0' : (c | 0x20) - 'a' + 10);
      ++digits.back();
    } else {
      return false;
    }
  }
  if (seps == "::.") {
  } else if (seps == ":.") {
    fields.insert(fields.begin(), 0), digits.insert(digits.begin(), 1);
  } else {
    return false;
  }
  if (std::find(digits.begin(), digits.end(), 0u) != digits.end()) return false;
  if (fields[1] > 0xff || fields[2] > 0x1f || fields[3] > 7) return false;
  *out = fields[0] << 16 | fields[1] << 8 | fields[2] << 3 | fields[3];
  return true;
}

int32_t HwTopology::gpuByBusId(PciBusId id) const {
  for (size_t g = 0; g < gpus.size(); ++g) {
    if (pci[static_cast<size_t>(gpus[g].pci)].busId == id) return static_cast<int32_t>(g);
  }
  return -1;
}

int32_t HwTopology::nicByName(const std::string& name) const {
  for (size_t n = 0; n < nics.size(); ++n) {
    if (nics[n].name == name || (!nics[n].netdev.empty() && nics[n].netdev == name)) return static_cast<int32_t>(n);
  }
  return -1;
}

int32_t HwTopology::numaOfCpu(int32_t cpu) const {
  for (size_t n = 0; n < numa.size(); ++n) {
    if (std::binary_search(numa[n].cpus.begin(), numa[n].cpus.end(), cpu)) return static_cast<int32_t>(n);
  }
  return -1;
}

int32_t HwTopology::hostBridgeOf(int32_t i) const {
  while (i >= 0 && pci[static_cast<size_t>(i)].parent >= 0) i = pci[static_cast<size_t>(i)].parent;
  return i;
}

// ---- the compact form -----------------------------------------------------------------------

namespace {

constexpr uint32_t kTopoMagic = 0x504f5443;  // "CTOP"
constexpr uint32_t kTopoVersion = 1;
// Bounds on what a remote summary may claim, far above any real node.
constexpr uint32_t kMaxObjects = 1u << 16;
constexpr uint32_t kMaxCpu = 1u << 20;
constexpr uint32_t kMaxName = 256;

void putI(std::vector<uint8_t>& b, int32_t v) { le::put32(b, static_cast<uint32_t>(v)); }
void putS(std::vector<uint8_t>& b, const std::string& s) {
  le::put32(b, static_cast<uint32_t>(s.size()));
  b.insert(b.end(), s.begin(), s.end());
}

// Reads fields off untrusted bytes; the first short read makes every later one fail.
struct Reader {
  const uint8_t* p;
  size_t left;
  bool ok = true;
  uint32_t u32() {
    if (!ok || left < 4) return ok = false, 0;
    uint32_t v = le::get32(p);
    p += 4, left -= 4;
    return v;
  }
  int32_t i32() { return static_cast<int32_t>(u32()); }
  // A count of entries of at least `minBytes` each: never more than the bytes left can hold, so
  // nothing is sized from a claim the message cannot back.
  uint32_t count(uint32_t max, size_t minBytes = 1) {
    uint32_t n = u32();
    if (n > max || static_cast<uint64_t>(n) * minBytes > left) ok = false;
    return ok ? n : 0;
  }
  std::string str() {
    uint32_t n = count(kMaxName);
    if (!ok) return std::string();
    std::string s(reinterpret_cast<const char*>(p), n);
    p += n, left -= n;
    return s;
  }
};

}  // namespace

std::vector<uint8_t> HwTopology::serialize() const {
  std::vector<uint8_t> b;
  le::put32(b, kTopoMagic), le::put32(b, kTopoVersion);
  putI(b, hwloc ? 1 : 0), putI(b, sockets), putI(b, cores), putI(b, pus);
  le::put32(b, static_cast<uint32_t>(numa.size()));
  for (const HwNuma& n : numa) {
    putI(b, n.osIndex), putI(b, n.socket);
    // CPUs as runs (first, length): a node's CPUs are mostly contiguous.
    std::vector<std::pair<int32_t, int32_t>> runs;
    for (int32_t c : n.cpus) {
      if (!runs.empty() && runs.back().first + runs.back().second == c) {
        ++runs.back().second;
      } else {
        runs.push_back({c, 1});
      }
    }
    le::put32(b, static_cast<uint32_t>(runs.size()));
    for (auto [first, length] : runs) putI(b, first), putI(b, length);
  }
  le::put32(b, static_cast<uint32_t>(pci.size()));
  for (const HwPciNode& n : pci) {
    putI(b, n.parent), le::put32(b, static_cast<uint32_t>(n.kind)), le::put32(b, n.busId), putI(b, n.numa);
    putI(b, n.socket);
  }
  le::put32(b, static_cast<uint32_t>(gpus.size()));
  for (const HwGpu& g : gpus) {
    putI(b, g.pci), putS(b, g.name), putI(b, g.switchLinks);
    le::put32(b, static_cast<uint32_t>(g.nvlinks.size()));
    for (int32_t l : g.nvlinks) putI(b, l);
  }
  le::put32(b, static_cast<uint32_t>(nics.size()));
  for (const HwNic& n : nics) {
    putI(b, n.pci), putS(b, n.name), putS(b, n.netdev), putI(b, n.ports), le::put32(b, n.activePorts);
  }
  return b;
}

uint64_t HwTopology::hash() const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (uint8_t byte : serialize()) h = (h ^ byte) * 1099511628211ull;
  return h;
}

Status HwTopology::parse(const uint8_t* bytes, size_t size, HwTopology* out) {
  Reader r{bytes, size};
  HwTopology t;
  auto bad = [](const char* what) {
    return makeError(collInternalError, "a node topology summary is malformed: %s", what);
  };
  if (r.u32() != kTopoMagic || r.u32() != kTopoVersion) return bad("not a summary of this version");
  uint32_t hwloc = r.u32();
  if (hwloc > 1) return bad("the hwloc flag");
  t.hwloc = hwloc == 1;
  t.sockets = r.i32(), t.cores = r.i32(), t.pus = r.i32();
  if (t.sockets < 0 || t.cores < 0 || t.pus < 0 || static_cast<uint32_t>(t.pus) > kMaxCpu) return bad("counts");
  size_t totalCpus = 0;
  t.numa.resize(r.count(kMaxObjects, 12));
  for (HwNuma& n : t.numa) {
    n.osIndex = r.i32(), n.socket = r.i32();
    if (n.socket < -1 || n.socket >= std::max(t.sockets, 1)) return bad("a NUMA node's socket");
    uint32_t runs = r.count(kMaxCpu, 8);
    for (uint32_t i = 0; i < runs && r.ok; ++i) {
      int64_t first = r.i32(), length = r.i32();
      int64_t last = n.cpus.empty() ? -2 : n.cpus.back();
      // Runs ascend with gaps between them (serialize's form, so a summary has one encoding).
      if (first <= last + 1 || length <= 0 || first + length > kMaxCpu) return bad("a CPU run");
      totalCpus += static_cast<size_t>(length);
      if (totalCpus > kMaxCpu) return bad("too many CPUs");
      for (int64_t c = first; c < first + length; ++c) n.cpus.push_back(static_cast<int32_t>(c));
    }
  }
  t.pci.resize(r.count(kMaxObjects, 20));
  for (size_t i = 0; i < t.pci.size() && r.ok; ++i) {
    HwPciNode& n = t.pci[i];
    n.parent = r.i32();
    uint32_t kind = r.u32();
    n.busId = r.u32(), n.numa = r.i32(), n.socket = r.i32();
    if (n.parent < -1 || n.parent >= static_cast<int32_t>(i)) return bad("a PCI parent");
    if (kind > static_cast<uint32_t>(PciKind::Nic)) return bad("a PCI kind");
    n.kind = static_cast<PciKind>(kind);
    if ((n.parent == -1) != (n.kind == PciKind::HostBridge)) return bad("a PCI root");
    if (n.parent >= 0 && t.pci[static_cast<size_t>(n.parent)].kind > PciKind::Bridge) return bad("a PCI parent kind");
    if (n.numa < -1 || n.numa >= static_cast<int32_t>(t.numa.size())) return bad("a PCI NUMA node");
    if (n.socket < -1 || n.socket >= std::max(t.sockets, 1)) return bad("a PCI socket");
  }
  t.gpus.resize(r.count(kMaxObjects, 16));
  for (HwGpu& g : t.gpus) {
    g.pci = r.i32(), g.name = r.str(), g.switchLinks = r.i32();
    if (!r.ok) break;
    if (g.pci < 0 || g.pci >= static_cast<int32_t>(t.pci.size()) ||
        t.pci[static_cast<size_t>(g.pci)].kind != PciKind::Gpu) {
      return bad("a GPU's PCI node");
    }
    uint32_t links = r.count(kMaxObjects, 4);
    if (links != 0 && links != t.gpus.size()) return bad("a GPU's NVLink count");
    g.nvlinks.resize(links);
    for (int32_t& l : g.nvlinks) {
      l = r.i32();
      if (l < 0) return bad("an NVLink count");
    }
    if (g.switchLinks < 0) return bad("an NVSwitch link count");
  }
  t.nics.resize(r.count(kMaxObjects, 20));
  for (HwNic& n : t.nics) {
    n.pci = r.i32(), n.name = r.str(), n.netdev = r.str(), n.ports = r.i32(), n.activePorts = r.u32();
    if (!r.ok) break;
    if (n.pci < 0 || n.pci >= static_cast<int32_t>(t.pci.size()) ||
        t.pci[static_cast<size_t>(n.pci)].kind != PciKind::Nic) {
      return bad("a NIC's PCI node");
    }
    if (n.ports < 0 || n.ports > 32) return bad("a NIC's port count");
  }
  if (!r.ok) return bad("truncated or a count out of range");
  if (r.left != 0) return bad("trailing bytes");
  t.source = "a peer's summary";
  *out = std::move(t);
  return okStatus();
}

// ---- the dump -------------------------------------------------------------------------------

namespace {

std::string cpuList(const std::vector<int32_t>& cpus) {
  std::string s;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!s.empty()) s += ",";
    s += std::to_string(cpus[i]);
    if (j > i) s += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return s.empty() ? "none" : s;
}

}  // namespace

std::string HwTopology::describe() const {
  std::string s = "topology: " + source + (hwloc ? "" : " (hwloc unavailable: CPUs only)") + "\n";
  s += "  sockets " + std::to_string(sockets) + ", cores " + std::to_string(cores) + ", PUs " + std::to_string(pus) +
       ", NUMA nodes " + std::to_string(numa.size()) + ", summary hash " +
       [&] {
         char h[20];
         snprintf(h, sizeof h, "%016llx", static_cast<unsigned long long>(hash()));
         return std::string(h);
       }() +
       "\n";
  for (const HwNuma& n : numa) {
    s += "  numa " + std::to_string(n.osIndex) + " socket " + std::to_string(n.socket) + ": cpus " + cpuList(n.cpus) +
         "\n";
  }
  auto where = [&](int32_t p) {
    std::string w = formatPciBusId(pci[static_cast<size_t>(p)].busId);
    const HwPciNode& hb = pci[static_cast<size_t>(hostBridgeOf(p))];
    w += " numa " + (hb.numa >= 0 ? std::to_string(numa[static_cast<size_t>(hb.numa)].osIndex) : std::string("?"));
    int depth = 0;
    for (int32_t q = pci[static_cast<size_t>(p)].parent; q >= 0; q = pci[static_cast<size_t>(q)].parent) ++depth;
    w += " pci depth " + std::to_string(depth);
    return w;
  };
  for (size_t g = 0; g < gpus.size(); ++g) {
    s += "  gpu " + std::to_string(g) + " " + where(gpus[g].pci) + (gpus[g].name.empty() ? "" : " " + gpus[g].name);
    if (gpus[g].switchLinks > 0) s += " nvswitch x" + std::to_string(gpus[g].switchLinks);
    for (size_t o = 0; o < gpus[g].nvlinks.size(); ++o) {
      if (gpus[g].nvlinks[o] > 0) s += " nvlink gpu" + std::to_string(o) + " x" + std::to_string(gpus[g].nvlinks[o]);
    }
    s += "\n";
  }
  for (size_t n = 0; n < nics.size(); ++n) {
    s += "  nic " + std::to_string(n) + " " + nics[n].name +
         (nics[n].netdev.empty() ? "" : " (" + nics[n].netdev + ")") + " " + where(nics[n].pci);
    if (nics[n].ports > 0) {
      s += " ports " + std::to_string(nics[n].ports) + " active";
      for (int p = 1; p <= nics[n].ports; ++p) {
        if (nics[n].activePorts >> (p - 1) & 1) s += " " + std::to_string(p);
      }
    }
    s += "\n";
  }
  return s;
}

// ---- NVML -----------------------------------------------------------------------------------

namespace {

// The subset of NVML's ABI used here (nvml.h is not needed to build).
struct NvmlPciInfo {
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
constexpr unsigned kNvmlMaxLinks = 18;  // NVML_NVLINK_MAX_LINKS (H100)

}  // namespace

std::vector<NvlinkEdge> nvmlNvlinkProbe(const std::vector<PciBusId>& gpus) {
  std::vector<NvlinkEdge> edges;
  if (gpus.empty()) return edges;
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    COLL_INFO(-1, "topology: libnvidia-ml.so.1 not loadable (%s): no NVLink information", dlerror());
    return edges;
  }
  using Init = int (*)();
  using ByBusId = int (*)(const char*, void**);
  using LinkState = int (*)(void*, unsigned, int*);
  using Remote = int (*)(void*, unsigned, NvmlPciInfo*);
  auto init = reinterpret_cast<Init>(dlsym(lib, "nvmlInit_v2"));
  auto shutdown = reinterpret_cast<Init>(dlsym(lib, "nvmlShutdown"));
  auto byBusId = reinterpret_cast<ByBusId>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
  auto state = reinterpret_cast<LinkState>(dlsym(lib, "nvmlDeviceGetNvLinkState"));
  auto remote = reinterpret_cast<Remote>(dlsym(lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2"));
  if (init == nullptr || byBusId == nullptr || state == nullptr || remote == nullptr || init() != 0) {
    COLL_WARN(-1, "topology: NVML found but unusable (missing symbols or nvmlInit failed): no NVLink information");
    dlclose(lib);
    return edges;
  }
  for (PciBusId gpu : gpus) {
    void* dev = nullptr;
    if (byBusId(formatPciBusId(gpu).c_str(), &dev) != 0) continue;
    std::map<PciBusId, int32_t> links;
    for (unsigned l = 0; l < kNvmlMaxLinks; ++l) {
      int active = 0;
      NvmlPciInfo info{};
      PciBusId peer = 0;
      if (state(dev, l, &active) != 0 || active == 0 || remote(dev, l, &info) != 0) continue;
      if (!parsePciBusId(info.busId, &peer)) continue;
      ++links[peer];
    }
    for (auto [peer, n] : links) edges.push_back({gpu, peer, n});
  }
  if (shutdown != nullptr) shutdown();
  dlclose(lib);
  return edges;
}

// ---- loading --------------------------------------------------------------------------------

namespace {

// This machine's CPUs alone, when hwloc is not in the build: one NUMA node of all online CPUs.
void loadCpusOnly(HwTopology* t) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  t->hwloc = false;
  t->sockets = 1, t->pus = static_cast<int32_t>(std::max(n, 1L)), t->cores = t->pus;
  t->numa.assign(1, HwNuma{});
  for (int32_t c = 0; c < t->pus; ++c) t->numa[0].cpus.push_back(c);
  t->numa[0].socket = 0;
}

void applyNvlinks(const std::vector<NvlinkEdge>& edges, HwTopology* t) {
  if (edges.empty()) return;
  for (HwGpu& g : t->gpus) g.nvlinks.assign(t->gpus.size(), 0);
  for (const NvlinkEdge& e : edges) {
    int32_t from = t->gpuByBusId(e.gpu);
    if (from < 0 || e.links <= 0) continue;
    int32_t to = t->gpuByBusId(e.remote);
    HwGpu& g = t->gpus[static_cast<size_t>(from)];
    // Anything at the other end that is not one of our GPUs is an NVSwitch.
    if (to >= 0) {
      g.nvlinks[static_cast<size_t>(to)] += e.links;
    } else {
      g.switchLinks += e.links;
    }
  }
}

#if COLL_HAVE_HWLOC

PciBusId busIdOf(const hwloc_obj_attr_u::hwloc_pcidev_attr_s& a) {
  return static_cast<PciBusId>(a.domain) << 16 | static_cast<PciBusId>(a.bus) << 8 |
         static_cast<PciBusId>(a.dev & 0x1f) << 3 | (a.func & 7);
}

void cpusOf(hwloc_const_cpuset_t set, std::vector<int32_t>* out) {
  for (int c = hwloc_bitmap_first(set); c >= 0; c = hwloc_bitmap_next(set, c)) out->push_back(c);
}

int32_t socketOf(hwloc_topology_t topo, hwloc_obj_t obj) {
  hwloc_obj_t pkg = obj->type == HWLOC_OBJ_PACKAGE ? obj : hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_PACKAGE, obj);
  return pkg != nullptr ? static_cast<int32_t>(pkg->logical_index) : -1;
}

bool nvlinksFromHwloc(hwloc_topology_t topo, const std::map<hwloc_obj_t, int32_t>& gpuOfObj, HwTopology* t);

// Reads what placement needs out of a loaded hwloc topology; true when it had NVLink information.
bool summarise(hwloc_topology_t topo, HwTopology* t) {
  t->hwloc = true;
  t->sockets = std::max(hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE), 0);
  t->cores = std::max(hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE), 0);
  t->pus = std::max(hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU), 0);
  int nnuma = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < nnuma; ++i) {
    hwloc_obj_t n = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    HwNuma numa;
    numa.osIndex = static_cast<int32_t>(n->os_index);
    numa.socket = socketOf(topo, n);
    cpusOf(n->cpuset, &numa.cpus);
    t->numa.push_back(std::move(numa));
  }

  std::map<hwloc_obj_t, int32_t> index;     // hwloc object -> pci index
  std::map<hwloc_obj_t, int32_t> gpuOfObj;  // a GPU's PCI device -> gpus index
  // Adds `obj` (a bridge or PCI device) after its ancestors; returns its index.
  std::function<int32_t(hwloc_obj_t, PciKind)> add = [&](hwloc_obj_t obj, PciKind kind) -> int32_t {
    if (auto it = index.find(obj); it != index.end()) return it->second;
    HwPciNode node;
    node.kind = kind;
    bool host = obj->type == HWLOC_OBJ_BRIDGE && obj->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST;
    hwloc_obj_t parent = obj->parent;
    if (host || parent == nullptr || (parent->type != HWLOC_OBJ_BRIDGE && parent->type != HWLOC_OBJ_PCI_DEVICE)) {
      // A root of the PCI tree: where it meets the CPUs. A device without a host bridge above it
      // gets one made up (its own root) so every path has one.
      node.kind = host ? PciKind::HostBridge : kind;
      hwloc_obj_t cpuSide = hwloc_get_non_io_ancestor_obj(topo, obj);
      int32_t numa = -1, socket = -1;
      if (cpuSide != nullptr) {
        socket = socketOf(topo, cpuSide);
        if (cpuSide->nodeset != nullptr && hwloc_bitmap_weight(cpuSide->nodeset) == 1) {
          unsigned os = static_cast<unsigned>(hwloc_bitmap_first(cpuSide->nodeset));
          for (size_t n = 0; n < t->numa.size(); ++n) {
            if (t->numa[n].osIndex == static_cast<int32_t>(os)) numa = static_cast<int32_t>(n);
          }
        }
      }
      if (!host) {
        HwPciNode root;
        root.kind = PciKind::HostBridge, root.numa = numa, root.socket = socket;
        t->pci.push_back(root);
        node.parent = static_cast<int32_t>(t->pci.size() - 1);
      } else {
        node.numa = numa, node.socket = socket;
      }
    } else {
      node.parent = add(parent, PciKind::Bridge);
    }
    if (obj->type == HWLOC_OBJ_PCI_DEVICE) node.busId = busIdOf(obj->attr->pcidev);
    if (obj->type == HWLOC_OBJ_BRIDGE && !host) node.busId = busIdOf(obj->attr->bridge.upstream.pci);
    t->pci.push_back(node);
    int32_t i = static_cast<int32_t>(t->pci.size() - 1);
    index[obj] = i;
    return i;
  };

  for (hwloc_obj_t dev = hwloc_get_next_pcidev(topo, nullptr); dev != nullptr; dev = hwloc_get_next_pcidev(topo, dev)) {
    unsigned cls = dev->attr->pcidev.class_id, vendor = dev->attr->pcidev.vendor_id;
    std::string gpuName, rdma, netdev;
    HwNic nic;
    for (hwloc_obj_t os = dev->io_first_child; os != nullptr; os = os->next_sibling) {
      if (os->type != HWLOC_OBJ_OS_DEVICE || os->name == nullptr) continue;
      switch (os->attr->osdev.type) {
        case HWLOC_OBJ_OSDEV_GPU:
        case HWLOC_OBJ_OSDEV_COPROC:
          if (gpuName.empty() || strncmp(os->name, "cuda", 4) == 0) gpuName = os->name;
          break;
        case HWLOC_OBJ_OSDEV_OPENFABRICS:
          rdma = os->name;
          for (int p = 1; p <= 32; ++p) {
            char key[24];
            snprintf(key, sizeof key, "Port%dState", p);
            const char* st = hwloc_obj_get_info_by_name(os, key);
            if (st == nullptr) break;
            nic.ports = p;
            if (strcmp(st, "4") == 0) nic.activePorts |= 1u << (p - 1);  // IBV_PORT_ACTIVE
          }
          break;
        case HWLOC_OBJ_OSDEV_NETWORK:
          if (netdev.empty()) netdev = os->name;
          break;
        default: break;
      }
    }
    // GPUs: NVIDIA's or AMD's display/3D controllers (a virtual machine's VGA is no GPU), or any
    // device hwloc names as one.
    bool gpu = ((cls == 0x0300 || cls == 0x0302) && (vendor == 0x10de || vendor == 0x1002)) || !gpuName.empty();
    bool isNic = !rdma.empty() || !netdev.empty();
    if (gpu) {
      HwGpu g;
      g.pci = add(dev, PciKind::Gpu);
      g.name = gpuName;
      gpuOfObj[dev] = static_cast<int32_t>(t->gpus.size());
      t->gpus.push_back(g);
    } else if (isNic) {
      nic.pci = add(dev, PciKind::Nic);
      nic.name = rdma.empty() ? netdev : rdma;
      nic.netdev = netdev;
      t->nics.push_back(nic);
    }
  }
  return nvlinksFromHwloc(topo, gpuOfObj, t);
}

// NVLink as hwloc's NVML backend records it (and XML files carry it): the "NVLinkBandwidth"
// matrix, in MB/s, between GPUs (OS devices or PCI devices) and NVSwitches (anything else).
// Returns false when there is none.
bool nvlinksFromHwloc(hwloc_topology_t topo, const std::map<hwloc_obj_t, int32_t>& gpuOfObj, HwTopology* t) {
  unsigned nr = 1;
  hwloc_distances_s* dist = nullptr;
  if (hwloc_distances_get_by_name(topo, "NVLinkBandwidth", &nr, &dist, 0) != 0 || nr == 0) return false;
  auto gpuOf = [&](hwloc_obj_t obj) {
    if (obj != nullptr && obj->type == HWLOC_OBJ_OS_DEVICE) obj = obj->parent;
    auto it = gpuOfObj.find(obj);
    return it == gpuOfObj.end() ? -1 : it->second;
  };
  for (HwGpu& g : t->gpus) g.nvlinks.assign(t->gpus.size(), 0);
  for (unsigned i = 0; i < dist->nbobjs; ++i) {
    int32_t from = gpuOf(dist->objs[i]);
    for (unsigned j = 0; j < dist->nbobjs && from >= 0; ++j) {
      hwloc_uint64_t bw = dist->values[i * dist->nbobjs + j];
      if (i == j || bw == 0) continue;
      // One NVLink carries 25 GB/s each way (NVLink 2 to 4).
      int32_t links = static_cast<int32_t>(std::max<hwloc_uint64_t>(1, (bw + 12500) / 25000));
      int32_t to = gpuOf(dist->objs[j]);
      if (to >= 0) {
        t->gpus[static_cast<size_t>(from)].nvlinks[static_cast<size_t>(to)] += links;
      } else {
        t->gpus[static_cast<size_t>(from)].switchLinks += links;
      }
    }
  }
  hwloc_distances_release(topo, dist);
  return true;
}

#endif  // COLL_HAVE_HWLOC

}  // namespace

Status loadHwTopology(const std::string& xmlPath, const NvlinkProbe& probe, HwTopology* out) {
  HwTopology t;
  t.source = xmlPath.empty() ? "this machine" : xmlPath;
#if COLL_HAVE_HWLOC
  hwloc_topology_t topo = nullptr;
  if (hwloc_topology_init(&topo) != 0) return makeError(collSystemError, "topology: hwloc_topology_init failed");
  struct Destroy {
    hwloc_topology_t t;
    ~Destroy() { hwloc_topology_destroy(t); }
  } destroy{topo};
  // Bridges and PCI devices are dropped by default: placement needs them.
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_ALL);
  // GPUs are found by PCI class and CUDA's names; OpenCL's and the X server's discovery would
  // load the OpenCL ICDs and X11 into every communicator's process for nothing (and the OpenCL
  // runtime's threads crash LeakSanitizer's stop-the-world in network namespaces).
  for (const char* unused : {"opencl", "gl"}) {
    (void)hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, unused);
  }
  if (!xmlPath.empty()) {
    if (access(xmlPath.c_str(), R_OK) != 0) {
      return makeError(collInvalidArgument, "topology: cannot read the hwloc XML file %s (COLL_TOPO_FILE): %s",
                       xmlPath.c_str(), strerror(errno));
    }
    if (hwloc_topology_set_xml(topo, xmlPath.c_str()) != 0) {
      return makeError(collInvalidArgument, "topology: hwloc cannot use %s as XML (COLL_TOPO_FILE): %s",
                       xmlPath.c_str(), strerror(errno));
    }
  }
  if (hwloc_topology_load(topo) != 0) {
    return makeError(collInvalidArgument, "topology: hwloc could not load %s%s: %s",
                     xmlPath.empty() ? "this machine" : xmlPath.c_str(),
                     xmlPath.empty() ? "" : " (COLL_TOPO_FILE: not a valid hwloc XML topology)", strerror(errno));
  }
  bool haveNvlinks = summarise(topo, &t);
#else
  bool haveNvlinks = false;
  if (!xmlPath.empty()) {
    return makeError(collInvalidUsage,
                     "topology: COLL_TOPO_FILE=%s needs hwloc, and this build has none (COLL_ENABLE_HWLOC)",
                     xmlPath.c_str());
  }
  loadCpusOnly(&t);
#endif
  if (probe && !haveNvlinks && !t.gpus.empty()) {
    std::vector<PciBusId> ids;
    for (const HwGpu& g : t.gpus) ids.push_back(t.pci[static_cast<size_t>(g.pci)].busId);
    applyNvlinks(probe(ids), &t);
  }
  *out = std::move(t);
  return okStatus();
}

Status nodeTopology(const HwTopology** out) {
  // Loaded once per process and kept (communicators point into it); again only if COLL_TOPO_FILE
  // names another file (tests), the earlier views staying alive.
  static std::mutex mu;
  struct Loaded {
    std::string file;
    HwTopology topo;
    Status status;
  };
  static std::vector<std::unique_ptr<Loaded>> loaded;
  const std::string file = topologyFile();
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& l : loaded) {
    if (l->file != file) continue;
    if (!l->status.ok()) return l->status;
    *out = &l->topo;
    return okStatus();
  }
  auto l = std::make_unique<Loaded>();
  l->file = file;
  HwTopology& topo = l->topo;
  Status& status = l->status;
  status = loadHwTopology(file, nvmlNvlinkProbe, &topo);
  if (!status.ok() && file.empty()) {
    // This machine defeats hwloc (a restricted container): its CPUs still place threads, said.
    COLL_WARN(-1, "topology: %s; placing by this machine's CPUs only", status.message().c_str());
    topo = HwTopology{};
    topo.source = "this machine (hwloc failed)";
    loadCpusOnly(&topo);
    status = okStatus();
  }
  if (status.ok() && !file.empty()) {
    // A file describing another machine is allowed (tests, a node type's reference file), but
    // said: its CPUs and devices drive placement here.
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (online > 0 && topo.pus != online) {
      COLL_WARN(-1,
                "topology: COLL_TOPO_FILE=%s describes %d CPUs but this machine has %ld online: placement "
                "follows the file",
                file.c_str(), topo.pus, online);
    }
  }
  loaded.push_back(std::move(l));
  if (!status.ok()) return status;
  *out = &topo;
  return okStatus();
}

}  // namespace coll
