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

  int32_t localRank() const;   // index of `rank` in localRanks
  int32_t localSize() const { return static_cast<int32_t>(localRanks.size()); }
  bool sameHost(int32_t a, int32_t b) const { return hostOfRank[a] == hostOfRank[b]; }
  bool singleHost() const { return nhosts == 1; }

  // From per-rank host hashes (index = rank).
  static Topology fromHostHashes(int32_t rank, const std::vector<uint64_t>& hostHashes);
  // All ranks on one host, or `ranksPerHost` consecutive ranks per host (tests, simulation).
  static Topology uniform(int32_t rank, int32_t nranks, int32_t ranksPerHost);
};

// This process's host identity: COLL_HOSTID, else hostname + boot id + network namespace inode,
// so ranks in different network namespaces count as different hosts.
std::string localHostIdentity();
uint64_t hashHostIdentity(const std::string& identity);

}  // namespace coll
