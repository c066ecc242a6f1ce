// The knob registry (see config.h). Add a knob here, and to the README's table.
#include "src/base/config.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "src/base/log.h"

namespace coll {

namespace {

const std::vector<KnobInfo> kKnobs = {
    // Logging and diagnostics.
    {"COLL_DEBUG", KnobType::String, "WARN", "Log level: NONE, WARN, INFO or TRACE.", false},
    {"COLL_DEBUG_FILE", KnobType::String, "", "Write log lines to this file (%h = host, %p = pid) instead of stderr.", false},
    // Deadlines.
    {"COLL_TIMEOUT", KnobType::Int, "300", "Seconds any wait may last before it fails with collTimeout (bootstrap, connections, collectives).", false},
    // Bootstrap and rendezvous.
    {"COLL_COMM_ID", KnobType::String, "", "host:port of the rendezvous hosted by rank 0 (collCommInitFromEnv).", false},
    {"COLL_COMM_SECRET", KnobType::String, "", "Job secret (hex or text) authenticating every connection (collCommInitFromEnv).", false},
    {"COLL_COMM_SECRET_FILE", KnobType::String, "", "File holding the job secret (collrun writes one per job).", false},
    {"COLL_RANK", KnobType::Int, "", "This process's rank (collrun sets it).", false},
    {"COLL_WORLD_SIZE", KnobType::Int, "", "Number of ranks (collrun sets it).", false},
    {"COLL_LOCAL_RANK", KnobType::Int, "", "Rank among the processes of this host (collrun sets it; informational).", false},
    {"COLL_SOCKET_IFNAME", KnobType::String, "", "Interfaces to use: prefix list (eth,ib), ^ to exclude, = for exact names.", false},
    {"COLL_SOCKET_FAMILY", KnobType::String, "", "AF_INET or AF_INET6 to force the address family of the chosen interface.", false},
    {"COLL_BOOTSTRAP_FANOUT", KnobType::Int, "8", "Fan-out of the tree that distributes the rank table at init.", false},
    {"COLL_HOSTID", KnobType::String, "", "Overrides host identity (default: hostname + boot id + network namespace).", false},
    // Transports.
    {"COLL_TRANSPORT", KnobType::String, "", "Force one transport for every peer, same host included: shm, tcp, ucx or ib (testing). Takes precedence over COLL_NET.", false},
    {"COLL_COMPRESS_MIN_BYTES", KnobType::Bytes, "64K", "collAllReduceCompressed: tensors smaller than this run uncompressed (when the call's minBytes is 0), logged once per communicator.", false},
    {"COLL_NET", KnobType::String, "", "Transport between hosts: ib, ucx or tcp. Unset: the best one every rank has (ib, then ucx where UCX drives an RDMA device, then tcp), logged at INFO. Ignored when COLL_TRANSPORT is set.", false},
    {"COLL_NCCL_NET", KnobType::String, "", "NCCL net plugin (libnccl-net-collective.so): transport behind it, tcp, ucx or ib. Unset: the best available (ib, then ucx where UCX drives an RDMA device, then tcp), logged through NCCL's logger.", false},
    {"COLL_NSOCKS_PERPEER", KnobType::Int, "2", "TCP streams per peer connection; large transfers are striped over them.", false},
    {"COLL_SOCKET_BUFFSIZE", KnobType::Bytes, "4M", "SO_SNDBUF / SO_RCVBUF of data sockets (0 = kernel default).", false},
    {"COLL_TCP_STAGING_BYTES", KnobType::Bytes, "1M", "Send and receive staging ring per TCP connection (small enough that received slices are reduced while still in cache).", false},
    {"COLL_IB_HCA", KnobType::String, "", "RDMA ports for the ib transport, NCCL syntax: mlx5_0:1,mlx5_1 (name prefixes, optional port), ^ to exclude, = for exact names. Unset: the first active port.", false},
    {"COLL_IB_GID_INDEX", KnobType::Int, "-1", "RoCE GID table index. -1: automatic, preferring RoCE v2 with an IPv4-mapped address.", false},
    {"COLL_IB_QPS_PER_CONNECTION", KnobType::Int, "2", "RC queue pairs per ib connection (1-16); chunks of the stream are striped over them.", false},
    {"COLL_IB_TC", KnobType::Int, "0", "Traffic class of ib connections (RoCE: DSCP << 2).", false},
    {"COLL_IB_SL", KnobType::Int, "0", "Service level of ib connections.", false},
    {"COLL_IB_TIMEOUT", KnobType::Int, "20", "ib ACK timeout: the HCA retransmits after 4.096 us * 2^value (0-31).", false},
    {"COLL_IB_RETRY_CNT", KnobType::Int, "7", "ib retransmissions before a write fails with retry exceeded (0-7).", false},
    {"COLL_IB_STAGING_BYTES", KnobType::Bytes, "4M", "Send and receive ring per ib connection (registered memory, rounded up to a power of two, at least 4K).", false},
    {"COLL_UCX_TLS", KnobType::String, "", "UCX transports for the ucx transport, passed to UCX as UCX_TLS (e.g. tcp, sm, rc,ud; ^ excludes). Unset: UCX_TLS from the environment, else all.", false},
    {"COLL_UCX_RING_BYTES", KnobType::Bytes, "4M", "Send and receive ring per UCX connection; a sender never has more than this unconsumed at the receiver.", false},
    {"COLL_UCX_MESSAGE_BYTES", KnobType::Bytes, "1M", "Largest UCX message the ring is cut into: bytes become visible to the receiver a whole message at a time, so smaller ones stream better; UCX sends large ones by rendezvous (zero-copy where it can).", false},
    {"COLL_UCX_PROTOCOL", KnobType::String, "auto", "How UCX sends ring messages: eager (copied through UCX's buffers), rndv (rendezvous: zero-copy, a handshake per message) or auto (UCX chooses by size).", false},
    {"COLL_UCX_CONFIG", KnobType::String, "TX_SEG_SIZE=2M;RX_SEG_SIZE=2M;SNDBUF=4M;RCVBUF=4M", "UCX settings for the ucx transport's context, NAME=VALUE;... as UCX's ucp_config_modify takes them (UCX_ and a transport's prefix dropped: TX_SEG_SIZE sets UCX_TCP_TX_SEG_SIZE); they take precedence over UCX_* variables. The default gives UCX's tcp segments larger than a ring message (COLL_UCX_MESSAGE_BYTES), so a message travels in one segment instead of being reassembled in a buffer UCX allocates per message (the allocations went to mmap/munmap and halved the bandwidth), and larger socket buffers; none: UCX's own defaults.", false},
    {"COLL_SHM_FIFO_BYTES", KnobType::Bytes, "2M", "Shared-memory FIFO per ordered pair of ranks on a host.", false},
    {"COLL_SHM_WINDOW_BYTES", KnobType::Bytes, "8M", "Shared window per rank for the direct algorithm (two halves, alternated per call).", false},
    {"COLL_SPIN_COUNT", KnobType::Int, "", "Polls before a waiting rank yields the CPU (default 2000, or 0 with more ranks on the machine than cores).", false},
    {"COLL_YIELD_COUNT", KnobType::Int, "200", "Yields before a waiting rank sleeps on a futex.", false},
    // Planner and executor.
    {"COLL_ALGO", KnobType::String, "", "Restrict the planner's algorithms, NCCL syntax: ring (every collective that has it), allreduce:tree,ring;allgather:bruck (per collective), ^tree or allreduce:^ring (exclude). Algorithms: ring, direct, tree, recdoubling, rabenseifner, torus, hier, bruck, pairwise, linear, dissemination. A filter that leaves a collective nothing that can run is an error at init.", false},
    {"COLL_TORUS_DIMS", KnobType::String, "", "Torus All-Reduce grid, XxY or XxYxZ, multiplying to the rank count (default: ranks per host x hosts, else the most balanced factorisation).", false},
    {"COLL_LINK_PROBE", KnobType::Bool, "1", "1: measure the link model's parameters at communicator creation (a short ping-pong per link class, well under a second); 0: COLL_LINK_* knobs or built-in leads.", false},
    {"COLL_LINK_INTRA_ALPHA_US", KnobType::String, "", "Planner: latency of one hop between ranks of a host, microseconds (default: probed).", false},
    {"COLL_LINK_INTRA_GBPS", KnobType::String, "", "Planner: bandwidth of one hop between ranks of a host, GB/s = 1e9 bytes/s (default: probed).", false},
    {"COLL_LINK_INTER_ALPHA_US", KnobType::String, "", "Planner: latency of one message between hosts, microseconds (default: probed).", false},
    {"COLL_LINK_INTER_GBPS", KnobType::String, "", "Planner: bandwidth of one network link (NIC) between hosts, GB/s (default: probed; the probe measures one pair of ranks, i.e. one NIC).", false},
    {"COLL_LINK_NICS_PER_HOST", KnobType::Int, "1", "Planner: network links per host that inter-host traffic spreads over (local rank i uses link i*N/ranks-on-host). 1 (default): one link shared by all of a host's ranks, as on an emulated cluster; 0: one per rank (a NIC per GPU, as real GPU clusters).", false},
    {"COLL_LINK_GAMMA_GBPS", KnobType::String, "", "Planner: local reduction speed, GB/s of reduced data (default: probed).", false},
    {"COLL_DIRECT_MAX_BYTES", KnobType::Bytes, "", "Largest message the planner sends through the direct algorithm (default: what fits in a window half).", false},
    {"COLL_SLICE_BYTES", KnobType::Bytes, "128K", "Executor slice: the unit that streams through a rank. When set, the planner keeps it; unset, pipelined trees and chains may get another chunk from the planner.", false},
    {"COLL_STREAM_LANES", KnobType::Int, "2", "Lanes per communicator (1-16): work number w runs on lane w mod N, so work on different host streams of one communicator overlaps; lane k > 0 is an internal communicator over the same ranks, made on first use. 1: one lane, all work of a communicator in issue order.", false},
    {"COLL_CHECK", KnobType::Bool, "0", "1: before each collective, ranks compare collective, count, type, op and root, and a mismatch is collInvalidUsage naming the ranks (costs one small all-gather per call).", false},
    {"COLL_DUMP_ON_SIGNAL", KnobType::Bool, "0", "1: SIGUSR1 makes every live communicator log what it is doing (as collCommDump): the operation, its pending steps and the peers it waits for.", false},
    // Launcher variables read by collCommInitFromEnv.
    {"RANK", KnobType::Int, "", "torchrun: rank.", true},
    {"WORLD_SIZE", KnobType::Int, "", "torchrun: world size.", true},
    {"MASTER_ADDR", KnobType::String, "", "torchrun: rendezvous host (we use MASTER_PORT + 1).", true},
    {"MASTER_PORT", KnobType::Int, "", "torchrun: its own store's port.", true},
    {"OMPI_COMM_WORLD_RANK", KnobType::Int, "", "Open MPI: rank.", true},
    {"OMPI_COMM_WORLD_SIZE", KnobType::Int, "", "Open MPI: size.", true},
    {"PMI_RANK", KnobType::Int, "", "PMI (MPICH, Hydra): rank.", true},
    {"PMI_SIZE", KnobType::Int, "", "PMI (MPICH, Hydra): size.", true},
    {"SLURM_PROCID", KnobType::Int, "", "Slurm: rank.", true},
    {"SLURM_NTASKS", KnobType::Int, "", "Slurm: size.", true},
    {"SLURM_JOB_ID", KnobType::Int, "", "Slurm: job id (derives the rendezvous port).", true},
    {"SLURM_STEP_NODELIST", KnobType::String, "", "Slurm: nodes of this step (first one hosts the rendezvous).", true},
    {"SLURM_JOB_NODELIST", KnobType::String, "", "Slurm: nodes of the job (when the step list is absent).", true},
};

const KnobInfo& findKnob(const char* name) {
  for (const auto& k : kKnobs) {
    if (strcmp(k.name, name) == 0) return k;
  }
  fprintf(stderr, "libcollective: internal error: knob %s is not declared in config.cc\n", name);
  abort();
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

const std::vector<KnobInfo>& allKnobs() { return kKnobs; }

std::optional<std::string> knobRaw(const char* name) {
  findKnob(name);
  const char* v = getenv(name);
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

int64_t knobInt(const char* name) {
  const KnobInfo& k = findKnob(name);
  if (auto raw = knobRaw(name)) {
    if (auto v = parseInt(*raw)) return *v;
    warnOnce(name, *raw, "an integer");
  }
  return parseInt(k.defaultValue).value_or(0);
}

bool knobBool(const char* name) {
  const KnobInfo& k = findKnob(name);
  auto parse = [](const std::string& s) -> std::optional<bool> {
    if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
    if (s == "0" || s == "false" || s == "no" || s == "off") return false;
    return std::nullopt;
  };
  if (auto raw = knobRaw(name)) {
    if (auto v = parse(*raw)) return *v;
    warnOnce(name, *raw, "0 or 1");
  }
  return parse(k.defaultValue).value_or(false);
}

std::string knobString(const char* name) {
  const KnobInfo& k = findKnob(name);
  if (auto raw = knobRaw(name)) return *raw;
  return k.defaultValue;
}

uint64_t knobBytes(const char* name) {
  const KnobInfo& k = findKnob(name);
  if (auto raw = knobRaw(name)) {
    if (auto v = parseBytes(*raw)) return *v;
    warnOnce(name, *raw, "a byte count such as 65536, 64K or 4M");
  }
  return parseBytes(k.defaultValue).value_or(0);
}

int64_t defaultTimeoutMs() {
  int64_t s = knobInt("COLL_TIMEOUT");
  if (s <= 0) s = 300;
  return s * 1000;
}

}  // namespace coll
