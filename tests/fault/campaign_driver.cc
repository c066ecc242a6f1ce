// fault_campaign: the fault campaign's driver. Each seeded trial starts 2-8 fault_loop ranks (shm,
// tcp, or tcp across network namespaces), strikes one (kill -9, SIGSTOP, a cut link) and checks that
// every survivor reports an error within 2 x COLL_TIMEOUT naming the failed rank, and that nothing hangs.
//
// The ranks are started here, not through collrun: collrun stops the whole job as soon as one rank
// dies, which is exactly what a fault campaign must not do. tests/fault/campaign is the wrapper.
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

volatile sig_atomic_t gInterrupted = 0;
void onSignal(int sig) { gInterrupted = sig; }

long long monoMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

std::vector<std::string> splitList(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// Runs a command quietly; true when it exited 0.
bool sh(const std::string& cmd) {
  std::string quiet = cmd + " >/dev/null 2>&1";
  return system(quiet.c_str()) == 0;
}

std::string shOut(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>/dev/null").c_str(), "r");
  if (!p) return out;
  char buf[512];
  while (fgets(buf, sizeof(buf), p)) out += buf;
  pclose(p);
  return out;
}

struct Options {
  int trials = 10;
  uint64_t seed = 1;
  std::vector<std::string> transports{"shm", "tcp", "netns"};
  std::vector<std::string> faults{"kill", "stop", "linkdown"};
  int timeoutS = 3;  // COLL_TIMEOUT of the ranks
  int minRanks = 2, maxRanks = 8;
  size_t maxCount = 65536;
  std::string loop, emucluster, logDir;
  bool verbose = false;
};

void usage(FILE* out) {
  fprintf(out,
          "usage: fault_campaign --loop FAULT_LOOP [--trials N] [--seed S] [--transports shm,tcp,netns]\n"
          "                      [--faults kill,stop,linkdown] [--timeout-s T] [--min-ranks A] [--max-ranks B]\n"
          "                      [--max-count N] [--emucluster PATH] [--log-dir DIR] [--verbose]\n"
          "  Each trial: A..B ranks of FAULT_LOOP over one transport (netns: tcp between network\n"
          "  namespaces, needs root and PATH = bench/emucluster), one fault at a random moment\n"
          "  (linkdown only with netns), COLL_TIMEOUT=T. A survivor passes when it reports an error\n"
          "  within 2 x T naming the failed rank (a cut link: a rank across the cut) and its abort returns.\n"
          "  Exit: 0 every trial passed, 1 some failed, 77 nothing could run here, 2 usage or setup error.\n");
}

bool parseOptions(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        fprintf(stderr, "fault_campaign: %s needs a value\n", a.c_str());
        exit(2);
      }
      return argv[++i];
    };
    if (a == "--trials") o->trials = atoi(value().c_str());
    else if (a == "--seed") o->seed = strtoull(value().c_str(), nullptr, 10);
    else if (a == "--transports") o->transports = splitList(value());
    else if (a == "--faults") o->faults = splitList(value());
    else if (a == "--timeout-s") o->timeoutS = atoi(value().c_str());
    else if (a == "--min-ranks") o->minRanks = atoi(value().c_str());
    else if (a == "--max-ranks") o->maxRanks = atoi(value().c_str());
    else if (a == "--max-count") o->maxCount = strtoull(value().c_str(), nullptr, 10);
    else if (a == "--loop") o->loop = value();
    else if (a == "--emucluster") o->emucluster = value();
    else if (a == "--log-dir") o->logDir = value();
    else if (a == "--verbose" || a == "-v") o->verbose = true;
    else if (a == "-h" || a == "--help") {
      usage(stdout);
      exit(0);
    } else {
      fprintf(stderr, "fault_campaign: unknown option %s\n", a.c_str());
      return false;
    }
  }
  for (const auto& t : o->transports) {
    if (t != "shm" && t != "tcp" && t != "netns") {
      fprintf(stderr, "fault_campaign: unknown transport %s (shm, tcp, netns)\n", t.c_str());
      return false;
    }
  }
  for (const auto& f : o->faults) {
    if (f != "kill" && f != "stop" && f != "linkdown") {
      fprintf(stderr, "fault_campaign: unknown fault %s (kill, stop, linkdown)\n", f.c_str());
      return false;
    }
  }
  if (o->loop.empty() || o->trials < 0 || o->timeoutS < 1 || o->minRanks < 2 || o->maxRanks < o->minRanks ||
      o->maxRanks > 64) {
    return false;
  }
  return true;
}

// The emulated cluster for netns trials: bench/emucluster's namespaces NAME-0..K-1 joined by a
// bridge in NAME-sw; node i's link is emu<i> (node side) / n<i> (switch side).
struct Cluster {
  std::string script, name;
  int nodes = 0;
  std::vector<std::string> addrs;
  bool up = false;

  std::string ns(int i) const { return name + "-" + std::to_string(i); }

  // Empty on success, else why netns trials cannot run here.
  std::string start(const std::string& emucluster, int k) {
    if (geteuid() != 0) return "not root";
    if (emucluster.empty() || access(emucluster.c_str(), X_OK) != 0) return "no emucluster script (--emucluster)";
    if (!sh("command -v ip")) return "iproute2 (ip) not installed";
    script = emucluster;
    name = "fc" + std::to_string(getpid());
    nodes = k;
    up = true;  // from here on, stop() tears down whatever part was made
    std::string cmd = "'" + script + "' up " + name + " " + std::to_string(k) + " --no-measure";
    int rc = system((cmd + " >/tmp/" + name + ".up.log 2>&1").c_str());
    if (!WIFEXITED(rc) || WEXITSTATUS(rc) != 0) {
      std::string why = shOut("tail -n 3 /tmp/" + name + ".up.log");
      unlink(("/tmp/" + name + ".up.log").c_str());
      stop();
      return "emucluster up failed: " + why;
    }
    unlink(("/tmp/" + name + ".up.log").c_str());
    for (int i = 0; i < k; ++i) {
      std::string out = shOut("ip -n " + ns(i) + " -4 -o addr show dev emu" + std::to_string(i));
      size_t inet = out.find("inet ");
      if (inet == std::string::npos) {
        stop();
        return "no address on emu" + std::to_string(i);
      }
      size_t b = inet + 5, e = out.find('/', b);
      addrs.push_back(out.substr(b, e - b));
    }
    return "";
  }
  void setLink(int node, bool on) const {
    sh("ip -n " + name + "-sw link set n" + std::to_string(node) + (on ? " up" : " down"));
  }
  void stop() {
    if (!up) return;
    sh("'" + script + "' down " + name);
    up = false;
  }
};

Cluster gCluster;

// Clusters of earlier campaigns whose driver died without cleaning up (SIGKILL): fc<pid>-sw with
// no process <pid>.
void reapStaleClusters(const std::string& emucluster) {
  if (geteuid() != 0 || emucluster.empty()) return;
  std::istringstream list(shOut("ip netns list"));
  std::string line;
  while (std::getline(list, line)) {
    if (line.rfind("fc", 0) != 0) continue;
    size_t dash = line.find("-sw");
    if (dash == std::string::npos || dash < 3) continue;
    std::string pid = line.substr(2, dash - 2);
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (access(("/proc/" + pid).c_str(), F_OK) == 0) continue;
    sh("'" + emucluster + "' down fc" + pid);
  }
}

struct RankProc {
  pid_t pid = -1;
  int fd = -1;
  bool running = false;
  int status = 0;
  std::string out, pending;
  bool ready = false, result = false, aborted = false, wrong = false, noError = false, initFailed = false;
  long long resultMono = 0, abortMs = -1;
  std::vector<int> failed;
  bool byMessage = false;
  std::string resultLine;
};

std::string field(const std::string& line, const std::string& key) {
  std::string k = " " + key + "=";
  size_t p = line.find(k);
  if (p == std::string::npos) return "";
  p += k.size();
  if (p < line.size() && line[p] == '"') {
    size_t e = line.find('"', p + 1);
    return line.substr(p + 1, e == std::string::npos ? std::string::npos : e - p - 1);
  }
  size_t e = line.find(' ', p);
  return line.substr(p, e == std::string::npos ? std::string::npos : e - p);
}

void parseLine(RankProc& r, const std::string& line) {
  if (line.rfind("FAULT_READY", 0) == 0) {
    r.ready = true;
  } else if (line.rfind("FAULT_RESULT", 0) == 0 && !r.result) {
    r.result = true;
    r.resultLine = line;
    r.resultMono = atoll(field(line, "mono_ms").c_str());
    // The communicator's list of failed ranks when it has one, else the ranks its message names.
    for (const auto& s : splitList(field(line, "failed"))) r.failed.push_back(atoi(s.c_str()));
    r.byMessage = r.failed.empty();
    if (r.byMessage) {
      for (const auto& s : splitList(field(line, "msg_ranks"))) r.failed.push_back(atoi(s.c_str()));
    }
  } else if (line.rfind("FAULT_ABORT", 0) == 0) {
    r.aborted = true;
    r.abortMs = atoll(field(line, "abort_ms").c_str());
  } else if (line.rfind("FAULT_WRONG", 0) == 0) {
    r.wrong = true;
    r.resultLine = line;
  } else if (line.rfind("FAULT_NOERROR", 0) == 0) {
    r.noError = true;
  } else if (line.rfind("FAULT_INIT_FAILED", 0) == 0) {
    r.initFailed = true;
    r.resultLine = line;
  }
}

void drain(RankProc& r) {
  if (r.fd < 0) return;
  char buf[16384];
  for (;;) {
    ssize_t n = read(r.fd, buf, sizeof(buf));
    if (n > 0) {
      if (r.out.size() < (1u << 20)) r.out.append(buf, static_cast<size_t>(n));
      r.pending.append(buf, static_cast<size_t>(n));
      size_t nl;
      while ((nl = r.pending.find('\n')) != std::string::npos) {
        parseLine(r, r.pending.substr(0, nl));
        r.pending.erase(0, nl + 1);
      }
      continue;
    }
    if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      close(r.fd);
      r.fd = -1;
    }
    return;
  }
}

int freeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sa);
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), len) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0) {
    port = ntohs(sa.sin_port);
  }
  close(fd);
  return port;
}

// The library's /dev/shm segments (coll-*) and which of them some live process maps.
std::set<std::string> shmSegments(std::set<std::string>* mapped) {
  if (DIR* proc = opendir("/proc")) {
    while (dirent* e = readdir(proc)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      std::ifstream maps(std::string("/proc/") + e->d_name + "/maps");
      std::string line;
      while (std::getline(maps, line)) {
        size_t p = line.find("/dev/shm/coll-");
        if (p != std::string::npos) mapped->insert(line.substr(p + 9, line.find(' ', p) - p - 9));
      }
    }
    closedir(proc);
  }
  std::set<std::string> names;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) {
      if (std::string(e->d_name).rfind("coll-", 0) == 0) names.insert(e->d_name);
    }
    closedir(d);
  }
  return names;
}

// Segments left by killed ranks. Other tests may run at the same time (ctest -j), so a segment is
// removed only when it appeared during one of our trials (not in that trial's snapshot), no live
// process maps it, and it has stayed so for 2 s (a job maps its segments right after creating them).
// Candidates too young are kept for a later sweep (the final one waits for them).
std::set<std::string> gLeakCandidates;
void sweepLeakedSegments(const std::set<std::string>& before, bool waitForYoung) {
  std::set<std::string> mapped;
  for (const std::string& n : shmSegments(&mapped)) {
    if (!before.count(n)) gLeakCandidates.insert(n);
  }
  for (int pass = 0; pass < 2; ++pass) {
    mapped.clear();
    const std::set<std::string> present = shmSegments(&mapped);
    bool young = false;
    for (auto it = gLeakCandidates.begin(); it != gLeakCandidates.end();) {
      struct stat st;
      const std::string path = "/dev/shm/" + *it;
      if (!present.count(*it) || stat(path.c_str(), &st) != 0) {
        it = gLeakCandidates.erase(it);
        continue;
      }
      if (mapped.count(*it) || time(nullptr) - st.st_mtime < 2) {
        young = young || !mapped.count(*it);
        ++it;
        continue;
      }
      unlink(path.c_str());
      it = gLeakCandidates.erase(it);
    }
    if (!waitForYoung || !young) break;
    sleep(2);
  }
}

struct TrialPlan {
  int np = 2;
  std::string transport, fault;
  int victim = 0;           // kill/stop: the rank; linkdown: the node whose link is cut
  int nodes = 1;            // netns: namespaces used (ranks in consecutive blocks)
  std::vector<int> nodeOf;  // rank -> node
  int delayMs = 0;
  uint64_t loopSeed = 0;
};

struct Tally {
  int trials = 0, passed = 0, failed = 0;
  int hangs = 0, noError = 0, wrongName = 0, late = 0, wrongResult = 0, slowAbort = 0, setupFailures = 0,
      earlyErrors = 0, judgedByMessage = 0;
  long long slowestMs = 0, slowestAbortMs = 0;
  std::string slowestWhat;
  std::map<std::string, std::pair<int, int>> byFault, byTransport;  // passed, run
};

enum class Outcome { Pass, Fail, Setup };

std::string joinInts(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s.empty() ? "-" : s;
}

void killAll(std::vector<RankProc>& ranks, bool cont) {
  for (auto& r : ranks) {
    if (!r.running) continue;
    if (cont) kill(-r.pid, SIGCONT);
    kill(-r.pid, SIGKILL);
  }
}

void reapAll(std::vector<RankProc>& ranks) {
  for (auto& r : ranks) {
    if (!r.running) continue;
    if (waitpid(r.pid, &r.status, 0) == r.pid) r.running = false;
    drain(r);
  }
}

Outcome runTrial(int index, int attempt, const TrialPlan& plan, const Options& opt, Tally* tally, std::string* report) {
  const int np = plan.np;
  const bool netns = plan.transport == "netns";
  std::set<std::string> mappedBefore;
  const std::set<std::string> segmentsBefore = shmSegments(&mappedBefore);
  std::string commId;
  if (netns) {
    // Below the namespaces' ephemeral range (32768-60999), where the ranks' own listeners land.
    std::mt19937 portRng(static_cast<unsigned>(plan.loopSeed) + static_cast<unsigned>(attempt) * 7919u);
    commId = gCluster.addrs[0] + ":" + std::to_string(20000 + portRng() % 12000);
    for (int i = 0; i < gCluster.nodes; ++i) gCluster.setLink(i, true);
  } else {
    int port = freeLoopbackPort();
    if (port <= 0) {
      *report = "cannot find a free loopback port";
      return Outcome::Setup;
    }
    commId = "127.0.0.1:" + std::to_string(port);
  }
  unsigned char raw[16];
  if (getrandom(raw, sizeof(raw), 0) != static_cast<ssize_t>(sizeof(raw))) memset(raw, 0x5a, sizeof(raw));
  char secret[33];
  for (int i = 0; i < 16; ++i) snprintf(secret + 2 * i, 3, "%02x", raw[i]);

  std::vector<RankProc> ranks(static_cast<size_t>(np));
  for (int r = 0; r < np; ++r) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
      killAll(ranks, true);
      reapAll(ranks);
      *report = std::string("pipe: ") + strerror(errno);
      return Outcome::Setup;
    }
    int localRank = 0;
    for (int q = 0; q < r; ++q) localRank += plan.nodeOf[q] == plan.nodeOf[r];
    pid_t pid = fork();
    if (pid == 0) {
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // a driver killed by ctest's timeout takes its ranks along
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      signal(SIGPIPE, SIG_DFL);
      dup2(p[1], STDOUT_FILENO);
      dup2(p[1], STDERR_FILENO);
      int devnull = open("/dev/null", O_RDONLY);
      if (devnull >= 0) dup2(devnull, STDIN_FILENO);
      if (netns) {
        std::string path = "/var/run/netns/" + gCluster.ns(plan.nodeOf[r]);
        int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
          fprintf(stderr, "FAULT_INIT_FAILED code=setns msg=\"%s: %s\"\n", path.c_str(), strerror(errno));
          _exit(127);
        }
        setenv("COLL_NET", "tcp", 1);
        setenv("COLL_SOCKET_IFNAME", "emu", 1);
        unsetenv("COLL_TRANSPORT");
      } else {
        setenv("COLL_TRANSPORT", plan.transport.c_str(), 1);
      }
      setenv("COLL_RANK", std::to_string(r).c_str(), 1);
      setenv("COLL_WORLD_SIZE", std::to_string(np).c_str(), 1);
      setenv("COLL_LOCAL_RANK", std::to_string(localRank).c_str(), 1);
      setenv("COLL_COMM_ID", commId.c_str(), 1);
      setenv("COLL_COMM_SECRET", secret, 1);
      setenv("COLL_TIMEOUT", std::to_string(opt.timeoutS).c_str(), 1);
      unsetenv("COLL_COMM_SECRET_FILE");
      std::string seed = std::to_string(plan.loopSeed), maxCount = std::to_string(opt.maxCount);
      std::string maxSeconds = std::to_string(60 + 4 * opt.timeoutS);
      execl(opt.loop.c_str(), opt.loop.c_str(), "--seed", seed.c_str(), "--max-count", maxCount.c_str(),
            "--max-seconds", maxSeconds.c_str(), static_cast<char*>(nullptr));
      fprintf(stderr, "FAULT_INIT_FAILED code=exec msg=\"%s: %s\"\n", opt.loop.c_str(), strerror(errno));
      _exit(127);
    }
    close(p[1]);
    if (pid < 0) {
      close(p[0]);
      killAll(ranks, true);
      reapAll(ranks);
      *report = std::string("fork: ") + strerror(errno);
      return Outcome::Setup;
    }
    setpgid(pid, pid);
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    ranks[r].pid = pid;
    ranks[r].fd = p[0];
    ranks[r].running = true;
  }

  // Survivors: every rank still alive after the fault (a cut link kills nobody).
  auto isSurvivor = [&](int r) { return plan.fault == "linkdown" || r != plan.victim; };
  const long long launched = monoMs();
  const long long readyLimitMs = 20000 + 2000LL * opt.timeoutS;
  const long long detectLimitMs = 2000LL * opt.timeoutS;
  const long long exitGraceMs = 1000LL * opt.timeoutS + 3000;  // after the detection limit: abort + exit
  long long faultAt = -1, strikeAt = -1;
  std::string setupProblem, earlyProblem;
  auto pump = [&](int waitMs) {
    std::vector<pollfd> fds;
    for (auto& r : ranks)
      if (r.fd >= 0) fds.push_back({r.fd, POLLIN, 0});
    if (fds.empty()) usleep(static_cast<useconds_t>(waitMs) * 1000);
    else poll(fds.data(), fds.size(), waitMs);
    for (auto& r : ranks) {
      drain(r);
      if (r.running && waitpid(r.pid, &r.status, WNOHANG) == r.pid) {
        r.running = false;
        drain(r);
      }
    }
  };
  for (;;) {
    if (gInterrupted) break;
    pump(20);
    const long long now = monoMs();
    if (faultAt < 0) {
      // Before the fault nothing may fail.
      for (int r = 0; r < np; ++r) {
        RankProc& rp = ranks[r];
        if (rp.result || rp.wrong || rp.initFailed || (!rp.running && rp.fd < 0)) {
          std::string what = rp.resultLine.empty() ? "exited early (" + std::to_string(rp.status) + ")" : rp.resultLine;
          (rp.ready ? earlyProblem : setupProblem) = "rank " + std::to_string(r) + ": " + what;
        }
      }
      if (!setupProblem.empty() || !earlyProblem.empty()) break;
      bool allReady = std::all_of(ranks.begin(), ranks.end(), [](const RankProc& r) { return r.ready; });
      if (!allReady) {
        if (now - launched > readyLimitMs) {
          setupProblem = "not every rank became ready within " + std::to_string(readyLimitMs) + " ms";
          break;
        }
        continue;
      }
      if (strikeAt < 0) strikeAt = now + plan.delayMs;
      if (now < strikeAt) continue;
      if (plan.fault == "kill") {
        kill(ranks[plan.victim].pid, SIGKILL);
      } else if (plan.fault == "stop") {
        kill(ranks[plan.victim].pid, SIGSTOP);
      } else {
        gCluster.setLink(plan.victim, false);
      }
      faultAt = monoMs();
      continue;
    }
    bool pending = false;
    for (int r = 0; r < np; ++r) {
      if (!isSurvivor(r)) continue;
      const RankProc& rp = ranks[r];
      if (rp.running || rp.fd >= 0) pending = true;
    }
    if (!pending || now - faultAt > detectLimitMs + exitGraceMs) break;
  }
  std::vector<bool> stillRunning(static_cast<size_t>(np));
  for (int r = 0; r < np; ++r) stillRunning[r] = ranks[r].running;
  // Stopped ranks get SIGCONT first so that SIGKILL is not left queued behind the stop.
  killAll(ranks, true);
  reapAll(ranks);
  if (netns) {
    for (int i = 0; i < gCluster.nodes; ++i) gCluster.setLink(i, true);
  }
  sweepLeakedSegments(segmentsBefore, false);

  char head[256];
  snprintf(head, sizeof(head), "trial %d: np=%d %s%s %s victim=%s%d at +%dms", index, np, plan.transport.c_str(),
           netns ? ("(" + std::to_string(plan.nodes) + " nodes)").c_str() : "", plan.fault.c_str(),
           plan.fault == "linkdown" ? "node" : "rank", plan.victim, plan.delayMs);
  std::string line = head;
  auto dumpTails = [&](std::string* out) {
    for (int r = 0; r < np; ++r) {
      std::string& o = ranks[r].out;
      size_t from = o.size() > 600 ? o.size() - 600 : 0;
      std::string tail = o.substr(from);
      for (char& c : tail)
        if (c == '\n') c = '|';
      *out += "\n    [" + std::to_string(r) + "] " + tail;
    }
  };
  if (gInterrupted) {
    *report = line + ": interrupted";
    return Outcome::Setup;
  }
  if (!setupProblem.empty()) {
    ++tally->setupFailures;
    *report = line + ": SETUP FAILURE: " + setupProblem;
    dumpTails(report);
    return Outcome::Setup;
  }
  if (!earlyProblem.empty()) {
    ++tally->earlyErrors;
    *report = line + ": FAIL: an error before the fault: " + earlyProblem;
    if (opt.verbose) dumpTails(report);
    return Outcome::Fail;
  }

  // Which ranks each survivor may blame.
  auto acceptable = [&](int who, int blamed) {
    if (plan.fault != "linkdown") return blamed == plan.victim;
    const bool whoCut = plan.nodeOf[who] == plan.victim, blamedCut = plan.nodeOf[blamed] == plan.victim;
    return whoCut != blamedCut;
  };
  std::vector<std::string> problems;
  long long slowest = 0;
  int named = 0, survivors = 0;
  for (int r = 0; r < np; ++r) {
    if (!isSurvivor(r)) continue;
    ++survivors;
    const RankProc& rp = ranks[r];
    const std::string who = "rank " + std::to_string(r);
    if (rp.wrong) {
      ++tally->wrongResult;
      problems.push_back(who + " WRONG RESULT: " + rp.resultLine);
      continue;
    }
    if (!rp.result) {
      // Still running when the driver gave up on it: a hang. Gone without a word: no error.
      if (stillRunning[r]) {
        ++tally->hangs;
        problems.push_back(who + " HANG: no error within " + std::to_string(detectLimitMs + exitGraceMs) + " ms");
      } else {
        ++tally->noError;
        problems.push_back(
            who + " NO ERROR: " +
            (rp.noError ? "never saw one" : "ended without a FAULT_RESULT line (" + std::to_string(rp.status) + ")"));
      }
      continue;
    }
    const long long detect = rp.resultMono - faultAt;
    if (detect > slowest) slowest = detect;
    if (detect > tally->slowestMs) {
      tally->slowestMs = detect;
      tally->slowestWhat = "trial " + std::to_string(index) + " " + plan.transport + " " + plan.fault;
    }
    if (detect > detectLimitMs) {
      ++tally->late;
      problems.push_back(who + " LATE: error after " + std::to_string(detect) + " ms (limit " +
                         std::to_string(detectLimitMs) + ")");
    }
    // The list is in the order the communicator learned of failures: its first entry is what the
    // error is about. Later entries may be survivors that aborted after the fault (true, but secondary).
    const bool ok = !rp.failed.empty() && rp.failed[0] >= 0 && rp.failed[0] < np && acceptable(r, rp.failed[0]);
    if (rp.byMessage) ++tally->judgedByMessage;
    if (ok) {
      ++named;
    } else {
      ++tally->wrongName;
      std::string msg = field(rp.resultLine, "msg");
      if (msg.size() > 300) msg = msg.substr(0, 300) + "...";
      problems.push_back(who + " WRONG NAME: blamed " + joinInts(rp.failed) + " (" +
                         (rp.byMessage ? "by its message" : "collCommGetFailedRanks") + ", " +
                         field(rp.resultLine, "code") + " in " + field(rp.resultLine, "op") + "): " + msg);
    }
    if (rp.aborted) tally->slowestAbortMs = std::max(tally->slowestAbortMs, rp.abortMs);
    if (!rp.aborted && stillRunning[r]) {
      ++tally->hangs;
      problems.push_back(who + " HANG in collCommAbort (no FAULT_ABORT line)");
    } else if (!rp.aborted) {
      ++tally->hangs;
      problems.push_back(who + " CRASH after its error (no FAULT_ABORT line, wait status " + std::to_string(rp.status) +
                         ")");
    } else if (rp.abortMs > 1000LL * opt.timeoutS) {
      ++tally->slowAbort;
      problems.push_back(who + " SLOW ABORT: " + std::to_string(rp.abortMs) + " ms");
    }
  }
  char tail[128];
  snprintf(tail, sizeof(tail), ": %s slowest=%lldms named=%d/%d", problems.empty() ? "PASS" : "FAIL", slowest, named,
           survivors);
  line += tail;
  for (const auto& p : problems) line += "\n    " + p;
  if (!problems.empty() && opt.verbose) dumpTails(&line);
  if (!opt.logDir.empty() && !problems.empty()) {
    std::string path = opt.logDir + "/trial" + std::to_string(index) + ".log";
    if (FILE* f = fopen(path.c_str(), "w")) {
      fprintf(f, "%s\n", line.c_str());
      for (int r = 0; r < np; ++r) {
        std::istringstream in(ranks[r].out);
        std::string l;
        while (std::getline(in, l)) fprintf(f, "[%d] %s\n", r, l.c_str());
      }
      fclose(f);
    }
  }
  *report = line;
  return problems.empty() ? Outcome::Pass : Outcome::Fail;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (!parseOptions(argc, argv, &opt)) {
    usage(stderr);
    return 2;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  if (!opt.logDir.empty()) mkdir(opt.logDir.c_str(), 0755);

  reapStaleClusters(opt.emucluster);
  std::vector<std::string> transports = opt.transports;
  const bool wantNetns = std::find(transports.begin(), transports.end(), "netns") != transports.end();
  if (wantNetns) {
    std::string why = gCluster.start(opt.emucluster, std::min(4, opt.maxRanks));
    if (!why.empty()) {
      printf("SKIP netns trials: %s\n", why.c_str());
      transports.erase(std::find(transports.begin(), transports.end(), "netns"));
    } else {
      printf("netns: emulated cluster %s, %d nodes (%s ...)\n", gCluster.name.c_str(), gCluster.nodes,
             gCluster.addrs[0].c_str());
    }
  }
  // Every (transport, fault) pair that can run: a cut link needs namespaces.
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const auto& t : transports)
    for (const auto& f : opt.faults)
      if (f != "linkdown" || t == "netns") pairs.emplace_back(t, f);
  if (pairs.empty()) {
    printf("SKIP: no transport/fault pair can run here (linkdown needs netns)\n");
    gCluster.stop();
    return 77;
  }
  printf("fault campaign: %d trials, seed %llu, COLL_TIMEOUT=%d s (detection limit %d s), %d-%d ranks\n", opt.trials,
         static_cast<unsigned long long>(opt.seed), opt.timeoutS, 2 * opt.timeoutS, opt.minRanks, opt.maxRanks);

  Tally tally;
  const long long campaignStart = monoMs();
  for (int t = 0; t < opt.trials && !gInterrupted; ++t) {
    std::mt19937_64 rng(opt.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(t) * 0xBF58476D1CE4E5B9ull + 1);
    TrialPlan plan;
    plan.np = opt.minRanks + static_cast<int>(rng() % static_cast<uint64_t>(opt.maxRanks - opt.minRanks + 1));
    // The first trials take every pair once, so even a short campaign covers them all.
    const uint64_t draw = rng();
    const auto& pick =
        static_cast<size_t>(t) < pairs.size() ? pairs[static_cast<size_t>(t)] : pairs[draw % pairs.size()];
    plan.transport = pick.first;
    plan.fault = pick.second;
    plan.delayMs = 100 + static_cast<int>(rng() % 1400);
    plan.loopSeed = rng();
    plan.nodeOf.assign(static_cast<size_t>(plan.np), 0);
    if (plan.transport == "netns") {
      const int maxNodes = std::min(plan.np, gCluster.nodes);
      plan.nodes = 2 + static_cast<int>(rng() % static_cast<uint64_t>(maxNodes - 1));
      const int base = plan.np / plan.nodes, extra = plan.np % plan.nodes;
      for (int b = 0, r = 0; b < plan.nodes; ++b)
        for (int i = 0; i < base + (b < extra ? 1 : 0); ++i) plan.nodeOf[static_cast<size_t>(r++)] = b;
    }
    plan.victim = plan.fault == "linkdown" ? static_cast<int>(rng() % static_cast<uint64_t>(plan.nodes))
                                           : static_cast<int>(rng() % static_cast<uint64_t>(plan.np));
    std::string report;
    Outcome o = runTrial(t, 0, plan, opt, &tally, &report);
    // The rendezvous port raced with another socket: not the library's fault; run the trial again.
    for (int attempt = 1; attempt <= 2 && o == Outcome::Setup && !gInterrupted &&
                          report.find("Address already in use") != std::string::npos;
         ++attempt) {
      --tally.setupFailures;
      printf("%s\n    (the rendezvous port was taken; trying again)\n", report.substr(0, report.find('\n')).c_str());
      o = runTrial(t, attempt, plan, opt, &tally, &report);
    }
    printf("%s\n", report.c_str());
    {
      // Progress of a long campaign: how far, and the time left at the mean pace so far.
      const double elapsedS = (monoMs() - campaignStart) / 1000.0;
      const double leftS = elapsedS / (t + 1) * (opt.trials - t - 1);
      printf("  [%d/%d trials, %.0f s elapsed, about %.0f s left]\n", t + 1, opt.trials, elapsedS, leftS);
      fflush(stdout);
    }
    if (gInterrupted) break;
    ++tally.trials;
    auto& bf = tally.byFault[plan.fault];
    auto& bt = tally.byTransport[plan.transport];
    ++bf.second, ++bt.second;
    if (o == Outcome::Pass) {
      ++tally.passed, ++bf.first, ++bt.first;
    } else {
      ++tally.failed;
    }
  }
  gCluster.stop();
  std::set<std::string> ignored;
  sweepLeakedSegments(shmSegments(&ignored), true);  // only what earlier trials left as candidates
  const double minutes = (monoMs() - campaignStart) / 60000.0;
  printf("==== fault campaign summary (seed %llu, COLL_TIMEOUT=%d s, %.1f min) ====\n",
         static_cast<unsigned long long>(opt.seed), opt.timeoutS, minutes);
  printf("trials=%d passed=%d failed=%d\n", tally.trials, tally.passed, tally.failed);
  printf(
      "hangs=%d survivors_without_error=%d wrong_names=%d late=%d wrong_results=%d slow_aborts=%d "
      "errors_before_fault=%d setup_failures=%d\n",
      tally.hangs, tally.noError, tally.wrongName, tally.late, tally.wrongResult, tally.slowAbort, tally.earlyErrors,
      tally.setupFailures);
  printf("survivors judged by their error message (collCommGetFailedRanks empty or missing): %d\n",
         tally.judgedByMessage);
  printf("slowest_detection_ms=%lld (%s; limit %d) slowest_abort_ms=%lld (limit %d)\n", tally.slowestMs,
         tally.slowestWhat.empty() ? "-" : tally.slowestWhat.c_str(), 2000 * opt.timeoutS, tally.slowestAbortMs,
         1000 * opt.timeoutS);
  std::string by;
  for (const auto& [k, v] : tally.byFault)
    by += " " + k + "=" + std::to_string(v.first) + "/" + std::to_string(v.second);
  by += " |";
  for (const auto& [k, v] : tally.byTransport)
    by += " " + k + "=" + std::to_string(v.first) + "/" + std::to_string(v.second);
  printf("passed by fault and transport:%s\n", by.c_str());
  if (gInterrupted) {
    printf("interrupted by signal %d\n", static_cast<int>(gInterrupted));
    return 130;
  }
  return tally.failed == 0 ? 0 : 1;
}
