// Environment bootstrap (see env_bootstrap.h): launcher variables, Slurm host lists, the job
// secret, and the deterministic unique id every rank builds from them.
#include "src/oob/env_bootstrap.h"

#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <cstring>

#include "src/base/config.h"
#include "src/base/log.h"
#include "src/oob/auth.h"

namespace coll {

// Ours first (collrun sets them), then the launchers' (the rank table below reads them in order).
const StringKnob kCommId("COLL_COMM_ID", "", "host:port of the rendezvous hosted by rank 0 (collCommInitFromEnv).",
                         {KnobSection::Bootstrap, 10});
const StringKnob kCommSecret("COLL_COMM_SECRET", "",
                             "Job secret (hex or text) authenticating every connection (collCommInitFromEnv).",
                             {KnobSection::Bootstrap, 20});
const StringKnob kCommSecretFile("COLL_COMM_SECRET_FILE", "",
                                 "File holding the job secret (collrun writes one per job).",
                                 {KnobSection::Bootstrap, 30});
const IntKnob kRank("COLL_RANK", "", "This process's rank (collrun sets it).", {KnobSection::Bootstrap, 40});
const IntKnob kWorldSize("COLL_WORLD_SIZE", "", "Number of ranks (collrun sets it).", {KnobSection::Bootstrap, 50});
const IntKnob kLocalRank("COLL_LOCAL_RANK", "",
                         "Rank among the processes of this host (collrun sets it; informational).",
                         {KnobSection::Bootstrap, 60});
const IntKnob kTorchrunRank("RANK", "", "torchrun: rank.", {KnobSection::Launcher, 10});
const IntKnob kTorchrunWorldSize("WORLD_SIZE", "", "torchrun: world size.", {KnobSection::Launcher, 20});
const StringKnob kTorchrunMasterAddr("MASTER_ADDR", "", "torchrun: rendezvous host (we use MASTER_PORT + 1).",
                                     {KnobSection::Launcher, 30});
const IntKnob kTorchrunMasterPort("MASTER_PORT", "", "torchrun: its own store's port.", {KnobSection::Launcher, 40});
const IntKnob kOmpiRank("OMPI_COMM_WORLD_RANK", "", "Open MPI: rank.", {KnobSection::Launcher, 50});
const IntKnob kOmpiSize("OMPI_COMM_WORLD_SIZE", "", "Open MPI: size.", {KnobSection::Launcher, 60});
const IntKnob kPmiRank("PMI_RANK", "", "PMI (MPICH, Hydra): rank.", {KnobSection::Launcher, 70});
const IntKnob kPmiSize("PMI_SIZE", "", "PMI (MPICH, Hydra): size.", {KnobSection::Launcher, 80});
const IntKnob kSlurmProcId("SLURM_PROCID", "", "Slurm: rank.", {KnobSection::Launcher, 90});
const IntKnob kSlurmNtasks("SLURM_NTASKS", "", "Slurm: size.", {KnobSection::Launcher, 100});
const IntKnob kSlurmJobId("SLURM_JOB_ID", "", "Slurm: job id (derives the rendezvous port).",
                          {KnobSection::Launcher, 110});
const StringKnob kSlurmStepNodelist("SLURM_STEP_NODELIST", "",
                                    "Slurm: nodes of this step (first one hosts the rendezvous).",
                                    {KnobSection::Launcher, 120});
const StringKnob kSlurmJobNodelist("SLURM_JOB_NODELIST", "", "Slurm: nodes of the job (when the step list is absent).",
                                   {KnobSection::Launcher, 130});

namespace {

constexpr size_t kMaxSecretFileBytes = 4096;

std::optional<long long> parseStrictInt(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long long v = strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0') return std::nullopt;
  return v;
}

bool allDigits(const std::string& s) { return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos; }

// Splits at commas outside brackets.
Status splitTopLevel(const std::string& list, std::vector<std::string>* items) {
  items->clear();
  int depth = 0;
  std::string cur;
  for (char c : list) {
    if (c == '[') {
      if (depth++ > 0) return makeError(collInvalidUsage, "Slurm host list '%s': nested brackets", list.c_str());
    } else if (c == ']') {
      if (--depth < 0) return makeError(collInvalidUsage, "Slurm host list '%s': unbalanced ']'", list.c_str());
    }
    if (c == ',' && depth == 0) {
      if (!cur.empty()) items->push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (depth != 0) return makeError(collInvalidUsage, "Slurm host list '%s': unbalanced '['", list.c_str());
  if (!cur.empty()) items->push_back(cur);
  if (items->empty()) return makeError(collInvalidUsage, "Slurm host list is empty");
  return okStatus();
}

// One range "07" or "01-04" of a bracket group.
Status parseRange(const std::string& range, const std::string& list, long long* lo, long long* hi, size_t* width) {
  size_t dash = range.find('-');
  std::string a = dash == std::string::npos ? range : range.substr(0, dash);
  std::string b = dash == std::string::npos ? range : range.substr(dash + 1);
  if (!allDigits(a) || !allDigits(b) || a.size() > 18 || b.size() > 18) {
    return makeError(collInvalidUsage, "Slurm host list '%s': bad range '%s'", list.c_str(), range.c_str());
  }
  *lo = std::stoll(a);
  *hi = std::stoll(b);
  *width = a.size();
  if (*hi < *lo) {
    return makeError(collInvalidUsage, "Slurm host list '%s': range '%s' runs backwards", list.c_str(), range.c_str());
  }
  return okStatus();
}

std::string padded(long long v, size_t width) {
  std::string s = std::to_string(v);
  if (s.size() < width) s.insert(0, width - s.size(), '0');
  return s;
}

Status expandItem(const std::string& item, const std::string& list, size_t maxHosts, std::vector<std::string>* out) {
  size_t open = item.find('[');
  if (open == std::string::npos) {
    // Bounded like the bracket expansions below (a long list of plain names also counts).
    if (out->size() >= maxHosts) {
      return makeError(collInvalidUsage, "Slurm host list '%s' names more than %zu hosts", list.c_str(), maxHosts);
    }
    out->push_back(item);
    return okStatus();
  }
  size_t close = item.find(']', open);
  std::string prefix = item.substr(0, open);
  std::string inside = item.substr(open + 1, close - open - 1);
  std::vector<std::string> rest;
  COLL_TRY(expandItem(item.substr(close + 1), list, maxHosts, &rest));
  size_t start = 0;
  while (start <= inside.size()) {
    size_t comma = inside.find(',', start);
    if (comma == std::string::npos) comma = inside.size();
    std::string range = inside.substr(start, comma - start);
    start = comma + 1;
    long long lo, hi;
    size_t width;
    COLL_TRY(parseRange(range, list, &lo, &hi, &width));
    for (long long v = lo; v <= hi; ++v) {
      for (auto& r : rest) {
        if (out->size() >= maxHosts) {
          return makeError(collInvalidUsage, "Slurm host list '%s' names more than %zu hosts", list.c_str(), maxHosts);
        }
        out->push_back(prefix + padded(v, width) + r);
      }
    }
  }
  return okStatus();
}

Status readSecretFile(const std::string& path, std::string* text) {
  FILE* f = fopen(path.c_str(), "rbe");
  if (f == nullptr) {
    return makeError(collInvalidUsage, "cannot open COLL_COMM_SECRET_FILE=%s: %s", path.c_str(),
                     errnoText(errno).c_str());
  }
  struct stat sb {};
  if (fstat(fileno(f), &sb) == 0 && (sb.st_mode & 077) != 0) {
    COLL_WARN(-1, "COLL_COMM_SECRET_FILE=%s is readable by other users; chmod 600 it", path.c_str());
  }
  char buf[kMaxSecretFileBytes + 1];
  size_t n = fread(buf, 1, sizeof(buf), f);
  fclose(f);
  if (n > kMaxSecretFileBytes) {
    return makeError(collInvalidUsage,
                     "COLL_COMM_SECRET_FILE=%s is larger than %zu bytes; it "
                     "should hold one secret line",
                     path.c_str(), kMaxSecretFileBytes);
  }
  std::string s(buf, n);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) {
    s.pop_back();
  }
  if (s.empty()) {
    return makeError(collInvalidUsage, "COLL_COMM_SECRET_FILE=%s is empty", path.c_str());
  }
  *text = std::move(s);
  return okStatus();
}

Status resolveRankSize(EnvBootstrap* out) {
  static const IntKnob* const kPairs[][2] = {
      {&kRank, &kWorldSize},  {&kTorchrunRank, &kTorchrunWorldSize}, {&kOmpiRank, &kOmpiSize},
      {&kPmiRank, &kPmiSize}, {&kSlurmProcId, &kSlurmNtasks},
  };
  for (auto& knobs : kPairs) {
    const char* const pair[2] = {knobs[0]->name(), knobs[1]->name()};
    auto r = knobs[0]->raw();
    auto n = knobs[1]->raw();
    if (!r && !n) continue;
    if (!r || !n) {
      return makeError(collInvalidUsage, "%s is set but %s is not; set both (or neither)", r ? pair[0] : pair[1],
                       r ? pair[1] : pair[0]);
    }
    auto rv = parseStrictInt(*r), nv = parseStrictInt(*n);
    if (!rv || !nv) {
      return makeError(collInvalidUsage, "%s=%s / %s=%s: expected integers", pair[0], r->c_str(), pair[1], n->c_str());
    }
    if (*nv < 1 || *nv > kBootstrapMaxRanks || *rv < 0 || *rv >= *nv) {
      return makeError(collInvalidUsage, "%s=%lld / %s=%lld: need 0 <= rank < size <= %d", pair[0], *rv, pair[1], *nv,
                       kBootstrapMaxRanks);
    }
    out->rank = static_cast<int>(*rv);
    out->nranks = static_cast<int>(*nv);
    out->source = std::string(pair[0]) + "/" + pair[1];
    return okStatus();
  }
  return makeError(collInvalidUsage,
                   "cannot tell this process's rank: set COLL_RANK and COLL_WORLD_SIZE (or launch "
                   "with collrun, torchrun, mpirun, a PMI launcher or srun)");
}

Status resolveRendezvous(EnvBootstrap* out) {
  if (auto id = kCommId.raw()) {
    COLL_TRY(SocketAddress::parse(*id, &out->rendezvous).withContext("COLL_COMM_ID"));
    out->source += ", COLL_COMM_ID";
  } else if (auto addr = kTorchrunMasterAddr.raw()) {
    auto portText = kTorchrunMasterPort.raw();
    auto port = portText ? parseStrictInt(*portText) : std::nullopt;
    if (!port || *port < 1 || *port > 65534) {
      return makeError(collInvalidUsage,
                       "MASTER_ADDR is set but MASTER_PORT=%s is not a port in "
                       "1..65534 (we rendezvous at MASTER_PORT+1)",
                       portText ? portText->c_str() : "<unset>");
    }
    std::string host = *addr;
    if (host.find(':') != std::string::npos && host[0] != '[') host = "[" + host + "]";
    COLL_TRY(SocketAddress::parse(host + ":" + std::to_string(*port + 1), &out->rendezvous).withContext("MASTER_ADDR"));
    out->source += ", MASTER_ADDR:MASTER_PORT+1";
  } else if (auto list = kSlurmStepNodelist.raw() ? kSlurmStepNodelist.raw() : kSlurmJobNodelist.raw()) {
    auto jobText = kSlurmJobId.raw();
    auto job = jobText ? parseStrictInt(*jobText) : std::nullopt;
    if (!job || *job < 0) {
      return makeError(collInvalidUsage,
                       "a Slurm node list is set but SLURM_JOB_ID=%s is not a "
                       "job id; set COLL_COMM_ID=host:port instead",
                       jobText ? jobText->c_str() : "<unset>");
    }
    std::string host;
    COLL_TRY(firstSlurmNode(*list, &host));
    int port = 20000 + static_cast<int>(*job % 20000);
    COLL_TRY(SocketAddress::parse(host + ":" + std::to_string(port), &out->rendezvous).withContext("first Slurm node"));
    out->source += ", Slurm node list (first node, port 20000 + SLURM_JOB_ID % 20000)";
  } else {
    return makeError(collInvalidUsage,
                     "no rendezvous address: set COLL_COMM_ID=host:port (rank 0's host), or "
                     "MASTER_ADDR and MASTER_PORT (torchrun style), or run under Slurm");
  }
  if (out->rendezvous.port() == 0) {
    return makeError(collInvalidUsage, "the rendezvous address %s has port 0; give a fixed port",
                     out->rendezvous.toString().c_str());
  }
  return okStatus();
}

}  // namespace

Status expandSlurmNodeList(const std::string& list, std::vector<std::string>* hosts, size_t maxHosts) {
  std::vector<std::string> items, out;
  COLL_TRY(splitTopLevel(list, &items));
  for (auto& item : items) COLL_TRY(expandItem(item, list, maxHosts, &out));
  *hosts = std::move(out);
  return okStatus();
}

Status firstSlurmNode(const std::string& list, std::string* host) {
  std::vector<std::string> items;
  COLL_TRY(splitTopLevel(list, &items));
  const std::string& item = items.front();
  std::string first;
  size_t pos = 0;
  for (;;) {
    size_t open = item.find('[', pos);
    if (open == std::string::npos) {
      first += item.substr(pos);
      break;
    }
    size_t close = item.find(']', open);
    first += item.substr(pos, open - pos);
    std::string inside = item.substr(open + 1, close - open - 1);
    std::string range = inside.substr(0, inside.find(','));
    long long lo, hi;
    size_t width;
    COLL_TRY(parseRange(range, list, &lo, &hi, &width));
    first += padded(lo, width);
    pos = close + 1;
  }
  if (first.empty()) return makeError(collInvalidUsage, "Slurm host list '%s' has an empty name", list.c_str());
  *host = first;
  return okStatus();
}

Status resolveEnvBootstrap(EnvBootstrap* out) {
  EnvBootstrap env;
  COLL_TRY(resolveRankSize(&env));
  COLL_TRY(resolveRendezvous(&env));
  std::string secretText;
  if (auto s = kCommSecret.raw()) {
    secretText = *s;
  } else if (auto path = kCommSecretFile.raw()) {
    COLL_TRY(readSecretFile(*path, &secretText));
  }
  if (!secretText.empty()) {
    COLL_TRY(secretFromText(secretText, &env.secret));
    env.haveSecret = true;
  } else {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      COLL_WARN(env.rank,
                "no COLL_COMM_SECRET or COLL_COMM_SECRET_FILE: running unauthenticated "
                "(anyone who can reach %s can join or disturb this job)",
                env.rendezvous.toString().c_str());
    }
  }
  *out = env;
  return okStatus();
}

Status envUniqueId(const EnvBootstrap& env, bool isRoot, collUniqueId* id) {
  UniqueIdContents c;
  c.root = env.rendezvous;
  c.authenticated = env.haveSecret;
  if (env.haveSecret) c.secret = env.secret;
  // Every rank must agree without talking; derived one-way so the id's hash reveals nothing.
  if (env.haveSecret) {
    uint8_t buf[32 + 16];
    memcpy(buf, "libcollective env comm nonce v1\0", 32);
    memcpy(buf + 32, env.secret.data(), 16);
    auto d = sha256(buf, sizeof(buf));
    uint64_t nonce = 0;
    for (int i = 0; i < 8; ++i) nonce |= static_cast<uint64_t>(d[i]) << (8 * i);
    c.commNonce = nonce;
  }
  if (isRoot) {
    const Secret* secret = env.haveSecret ? &env.secret : nullptr;
    collUniqueId rootId;
    Status st = startBootstrapRoot(env.rendezvous, secret, c.commNonce, &rootId);
    if (!st.ok() && st.code() == collInvalidUsage) {
      // The rendezvous name is not one of our addresses (NAT, a VIP): listen on every interface.
      SocketAddress any = SocketAddress::wildcard(env.rendezvous.family(), env.rendezvous.port());
      COLL_INFO(env.rank, "rendezvous %s is not a local address; listening on %s", env.rendezvous.toString().c_str(),
                any.toString().c_str());
      st = startBootstrapRoot(any, secret, c.commNonce, &rootId);
    }
    COLL_TRY(st.withContext("rank " + std::to_string(env.rank) + " hosting the rendezvous (" + env.source + ")"));
  }
  return encodeUniqueId(c, id);
}

}  // namespace coll
