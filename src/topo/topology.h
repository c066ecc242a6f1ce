// Topology: which ranks share a host. Built from the bootstrap's rank table; what algorithms
// and the planner see of the machine (they never see transports).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace coll {

struct Topology {
  int32_t nranks = 0;
  int32_t rank = 0;
  std::vector<int32_t> hostOfRank;  // host index (0..nhosts-1, in order of first rank) per rank
  int32_t nhosts = 0;
  std::vector<int32_t> localRanks;  // global ranks on this rank's host, ascending

  // Machines: ranks that share CPUs (one kernel), which hosts do not say: ranks in different
  // network namespaces or containers of one machine are different hosts but compete for its
  // cores. Unknown (setMachines not called): every host is a machine of unknown CPU count.
  std::vector<int32_t> machineOfRank;  // machine index (in order of first rank) per rank
  int32_t nmachines = 0;
  std::vector<int32_t> cpusOfMachine;  // online CPUs per machine (0 = unknown)

  int32_t localRank() const;  // index of `rank` in localRanks
  int32_t localSize() const { return static_cast<int32_t>(localRanks.size()); }
  bool sameHost(int32_t a, int32_t b) const { return hostOfRank[a] == hostOfRank[b]; }
  bool singleHost() const { return nhosts == 1; }

  // Ranks on `rank`'s machine (its host's ranks when machines are unknown).
  int32_t machineSize() const;
  // CPUs of `rank`'s machine (0 = unknown).
  int32_t machineCpus() const;

  // From per-rank host hashes (index = rank).
  static Topology fromHostHashes(int32_t rank, const std::vector<uint64_t>& hostHashes);
  // Records which ranks share a machine: per-rank machine hashes and the CPUs each rank saw
  // (a machine takes the fewest its ranks report; <= 0 = unknown). Sizes must be nranks.
  void setMachines(const std::vector<uint64_t>& machineHashes, const std::vector<int32_t>& cpus);
  // All ranks on one host, or `ranksPerHost` consecutive ranks per host (tests, simulation).
  static Topology uniform(int32_t rank, int32_t nranks, int32_t ranksPerHost);
};

// This process's host identity: COLL_HOSTID, else hostname + boot id + network namespace inode,
// so ranks in different network namespaces count as different hosts.
std::string localHostIdentity();
uint64_t hashHostIdentity(const std::string& identity);
// This process's machine identity: hostname + boot id, whatever the network namespace or
// COLL_HOSTID say (those name hosts; the CPUs are the kernel's).
std::string localMachineIdentity();
// This machine's online CPUs (at least 1).
int32_t localMachineCpus();

}  // namespace coll
