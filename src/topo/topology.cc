// Topology construction and host identity.
#include "src/topo/topology.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <unordered_map>

#include "src/base/config.h"

namespace coll {

const StringKnob kHostId("COLL_HOSTID", "",
                         "Overrides host identity (default: hostname + boot id + network namespace).",
                         {KnobSection::Bootstrap, 100});

int32_t Topology::localRank() const {
  auto it = std::lower_bound(localRanks.begin(), localRanks.end(), rank);
  return static_cast<int32_t>(it - localRanks.begin());
}

Topology Topology::fromHostHashes(int32_t rank, const std::vector<uint64_t>& hostHashes) {
  Topology t;
  t.rank = rank;
  t.nranks = static_cast<int32_t>(hostHashes.size());
  t.hostOfRank.resize(hostHashes.size());
  std::unordered_map<uint64_t, int32_t> index;
  for (size_t r = 0; r < hostHashes.size(); ++r) {
    auto [it, inserted] = index.emplace(hostHashes[r], static_cast<int32_t>(index.size()));
    t.hostOfRank[r] = it->second;
  }
  t.nhosts = static_cast<int32_t>(index.size());
  for (int32_t r = 0; r < t.nranks; ++r) {
    if (t.hostOfRank[r] == t.hostOfRank[rank]) t.localRanks.push_back(r);
  }
  t.machineOfRank = t.hostOfRank;
  t.nmachines = t.nhosts;
  t.cpusOfMachine.assign(static_cast<size_t>(t.nhosts), 0);
  return t;
}

void Topology::setMachines(const std::vector<uint64_t>& machineHashes, const std::vector<int32_t>& cpus) {
  if (machineHashes.size() != static_cast<size_t>(nranks) || cpus.size() != machineHashes.size()) return;
  std::unordered_map<uint64_t, int32_t> index;
  machineOfRank.assign(machineHashes.size(), 0);
  cpusOfMachine.clear();
  for (size_t r = 0; r < machineHashes.size(); ++r) {
    auto [it, inserted] = index.emplace(machineHashes[r], static_cast<int32_t>(index.size()));
    machineOfRank[r] = it->second;
    if (inserted) cpusOfMachine.push_back(std::max(cpus[r], 0));
    int32_t& c = cpusOfMachine[static_cast<size_t>(it->second)];
    // Any rank not knowing makes the machine unknown; otherwise the most conservative report.
    c = (c <= 0 || cpus[r] <= 0) ? 0 : std::min(c, cpus[r]);
  }
  nmachines = static_cast<int32_t>(index.size());
}

int32_t Topology::machineSize() const {
  if (machineOfRank.size() != static_cast<size_t>(nranks) || nranks == 0) return localSize();
  const int32_t m = machineOfRank[static_cast<size_t>(rank)];
  return static_cast<int32_t>(std::count(machineOfRank.begin(), machineOfRank.end(), m));
}

int32_t Topology::machineCpus() const {
  if (machineOfRank.size() != static_cast<size_t>(nranks) || nranks == 0) return 0;
  const size_t m = static_cast<size_t>(machineOfRank[static_cast<size_t>(rank)]);
  return m < cpusOfMachine.size() ? cpusOfMachine[m] : 0;
}

Topology Topology::uniform(int32_t rank, int32_t nranks, int32_t ranksPerHost) {
  std::vector<uint64_t> hashes(nranks);
  for (int32_t r = 0; r < nranks; ++r) hashes[r] = static_cast<uint64_t>(r / ranksPerHost);
  return fromHostHashes(rank, hashes);
}

std::string localHostIdentity() {
  std::string override = kHostId.get();
  if (!override.empty()) return override;
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::string id = host;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string bootId;
  if (boot >> bootId) id += "/" + bootId;
  struct stat st;
  if (stat("/proc/self/ns/net", &st) == 0) id += "/netns:" + std::to_string(st.st_ino);
  return id;
}

std::string localMachineIdentity() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::string id = host;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string bootId;
  if (boot >> bootId) id += "/" + bootId;
  return id;
}

int32_t localMachineCpus() {
  // Online CPUs, not this process's affinity mask: ranks pinned to different cores still share
  // the machine's set (as waitPolicyFor counts them).
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  return cpus > 0 ? static_cast<int32_t>(std::min<long>(cpus, 1 << 20)) : 1;
}

uint64_t hashHostIdentity(const std::string& identity) {
  // FNV-1a: stable across processes and builds.
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : identity) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace coll
