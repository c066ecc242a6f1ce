// collrun: the local launcher. Starts N ranks (optionally spread over network namespaces) with the
// COLL_* rendezvous environment, prefixes their output with "[rank] ", and fails fast as a job, or,
// with --respawn, replaces ranks that die so that an elastic program can take them back.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace {

constexpr int kTimeoutExit = 124;
constexpr double kKillGraceSeconds = 2.0;

int gSignalPipe[2] = {-1, -1};

void onSignal(int sig) {
  int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  // A full pipe only means a wakeup is already pending.
  ssize_t ignored = write(gSignalPipe[1], &b, 1);
  (void)ignored;
  errno = saved;
}

double nowSeconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void usage(FILE* out) {
  fprintf(out,
          "usage: collrun -np N [--netns NS1,NS2,...] [--rendezvous ADDR] [--timeout SEC] [--respawn N]\n"
          "               PROGRAM [ARGS...]\n"
          "  -np N             number of ranks to start on this machine\n"
          "  --netns LIST      network namespaces (/var/run/netns/NAME, needs root): ranks are placed in\n"
          "                    consecutive blocks, first blocks larger; a list of exactly N names places\n"
          "                    each rank explicitly\n"
          "  --rendezvous ADDR address for COLL_COMM_ID (default 127.0.0.1, or an address of rank 0's\n"
          "                    namespace: IPv4 preferred, else global IPv6)\n"
          "  --timeout SEC     kill the job after SEC seconds (exit code 124)\n"
          "  --respawn N       elastic mode: when a rank dies (nonzero exit or signal), start a replacement\n"
          "                    in its slot instead of stopping the job, up to N replacements in all; a\n"
          "                    death after that stops the job. The job succeeds when the last process of\n"
          "                    every rank exits with 0 (default 0: the first death stops the job)\n"
          "Each rank gets COLL_RANK, COLL_WORLD_SIZE, COLL_LOCAL_RANK, COLL_COMM_ID=ADDR:PORT,\n"
          "COLL_COMM_SECRET_FILE (a 0600 file with a per-job random secret, removed at exit) and\n"
          "COLL_JOB_DIR (a 0700 directory private to the job, for files the ranks share; removed with\n"
          "its contents at exit). A replacement gets the environment of the process it replaces plus\n"
          "COLL_RESTART_COUNT=K: it is the job's K-th replacement (first processes have no such variable).\n");
}

std::vector<std::string> splitList(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    if (comma > start) out.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

bool enterNamespace(const std::string& name, std::string* error) {
  std::string path = name.find('/') == std::string::npos ? "/var/run/netns/" + name : name;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *error = "cannot open " + path + ": " + strerror(errno) + " (create it with `ip netns add`)";
    return false;
  }
  if (setns(fd, CLONE_NEWNET) != 0) {
    *error = "setns(" + path + ") failed: " + strerror(errno) + " (needs root / CAP_SYS_ADMIN)";
    close(fd);
    return false;
  }
  close(fd);
  // As `ip netns exec` does: a private mount namespace with /sys remounted, so /sys/class/net
  // lists this namespace's interfaces (UCX and others enumerate devices there, not via netlink).
  if (unshare(CLONE_NEWNS) != 0 || mount("", "/", nullptr, MS_SLAVE | MS_REC, nullptr) != 0) {
    *error = std::string("a private mount namespace for ") + path + ": " + strerror(errno);
    return false;
  }
  umount2("/sys", MNT_DETACH);
  if (mount(name.c_str(), "/sys", "sysfs", 0, nullptr) != 0) {
    *error = std::string("mounting /sys in ") + path + ": " + strerror(errno);
    return false;
  }
  return true;
}

// Picks an address of the current namespace that other namespaces can reach: the first IPv4
// address of an up, non-loopback interface, else a global IPv6 one, else loopback.
std::string pickLocalAddress() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "127.0.0.1";
  std::string v4, v6;
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || !(it->ifa_flags & IFF_UP) || (it->ifa_flags & IFF_LOOPBACK)) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (it->ifa_addr->sa_family == AF_INET && v4.empty()) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(it->ifa_addr)->sin_addr, text, sizeof(text));
      v4 = text;
    } else if (it->ifa_addr->sa_family == AF_INET6 && v6.empty()) {
      const in6_addr& a = reinterpret_cast<sockaddr_in6*>(it->ifa_addr)->sin6_addr;
      if (IN6_IS_ADDR_LINKLOCAL(&a) || IN6_IS_ADDR_LOOPBACK(&a)) continue;
      inet_ntop(AF_INET6, &a, text, sizeof(text));
      v6 = text;
    }
  }
  freeifaddrs(list);
  if (!v4.empty()) return v4;
  if (!v6.empty()) return v6;
  return "127.0.0.1";
}

// Binds port 0 on `addr` to learn a free port. The root binds it again moments later; the race
// with other programs is accepted (as every launcher that exports a port does).
int findFreePort(const std::string& addr, std::string* error) {
  bool v6 = addr.find(':') != std::string::npos;
  int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::string("socket: ") + strerror(errno);
    return -1;
  }
  sockaddr_storage ss{};
  socklen_t len;
  if (v6) {
    auto* sa = reinterpret_cast<sockaddr_in6*>(&ss);
    sa->sin6_family = AF_INET6;
    if (inet_pton(AF_INET6, addr.c_str(), &sa->sin6_addr) != 1) {
      *error = "not an IPv6 address: " + addr;
      close(fd);
      return -1;
    }
    len = sizeof(sockaddr_in6);
  } else {
    auto* sa = reinterpret_cast<sockaddr_in*>(&ss);
    sa->sin_family = AF_INET;
    if (inet_pton(AF_INET, addr.c_str(), &sa->sin_addr) != 1) {
      *error = "not an IPv4 address: " + addr;
      close(fd);
      return -1;
    }
    len = sizeof(sockaddr_in);
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    *error = "bind(" + addr + "): " + strerror(errno);
    close(fd);
    return -1;
  }
  len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  int port = v6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  close(fd);
  return port;
}

// Address and port of the rendezvous, found inside rank 0's namespace by a short-lived child
// (setns affects only the caller, and the launcher itself stays in its own namespace).
bool findRendezvous(const std::string& ns, const std::string& forcedAddr, std::string* addr, int* port,
                    std::string* error) {
  if (ns.empty()) {
    *addr = forcedAddr.empty() ? "127.0.0.1" : forcedAddr;
    *port = findFreePort(*addr, error);
    return *port > 0;
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    *error = std::string("pipe: ") + strerror(errno);
    return false;
  }
  pid_t pid = fork();
  if (pid < 0) {
    *error = std::string("fork: ") + strerror(errno);
    return false;
  }
  if (pid == 0) {
    close(fds[0]);
    std::string err, reply;
    if (!enterNamespace(ns, &err)) {
      reply = "E" + err;
    } else {
      std::string a = forcedAddr.empty() ? pickLocalAddress() : forcedAddr;
      int p = findFreePort(a, &err);
      reply = p > 0 ? "A" + std::to_string(p) + " " + a : "E" + err;
    }
    ssize_t w = write(fds[1], reply.data(), reply.size());
    _exit(w == static_cast<ssize_t>(reply.size()) ? 0 : 1);
  }
  close(fds[1]);
  std::string reply;
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) reply.append(buf, n);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (reply.size() < 2 || reply[0] != 'A') {
    *error = reply.size() > 1 ? reply.substr(1) : "rendezvous probe in namespace " + ns + " failed";
    return false;
  }
  size_t space = reply.find(' ');
  *port = atoi(reply.substr(1, space - 1).c_str());
  *addr = reply.substr(space + 1);
  return *port > 0;
}

bool writeSecretFile(std::string* path, std::string* error) {
  const char* tmp = "/tmp";
  std::string tmpl = std::string(tmp) + "/collrun-secret-XXXXXX";
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  int fd = mkstemp(name.data());  // mkstemp creates the file 0600
  if (fd < 0) {
    *error = std::string("mkstemp: ") + strerror(errno);
    return false;
  }
  fchmod(fd, 0600);
  unsigned char raw[16];
  if (getrandom(raw, sizeof(raw), 0) != static_cast<ssize_t>(sizeof(raw))) {
    *error = std::string("getrandom: ") + strerror(errno);
    close(fd);
    unlink(name.data());
    return false;
  }
  char hex[33];
  for (int i = 0; i < 16; ++i) snprintf(hex + 2 * i, 3, "%02x", raw[i]);
  std::string line = std::string(hex, 32) + "\n";
  bool ok = write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  close(fd);
  if (!ok) {
    *error = "cannot write the secret file";
    unlink(name.data());
    return false;
  }
  *path = name.data();
  return true;
}

// The job's private directory for files its ranks share (a grow id, for one, which holds the job's
// secret: hence mkdtemp's 0700).
bool makeJobDir(std::string* path, std::string* error) {
  const char* tmp = getenv("TMPDIR");
  std::string tmpl = std::string(tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp") + "/collrun-job-XXXXXX";
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  if (mkdtemp(name.data()) == nullptr) {
    *error = "mkdtemp(" + tmpl + "): " + strerror(errno);
    return false;
  }
  *path = name.data();
  return true;
}

// The files collrun made for the job, removed on every way out of main (a failed start, a failed
// rank, the timeout, a signal), since the ranks may have left secrets in them.
struct JobFiles {
  std::string secretPath;
  std::string jobDir;
  ~JobFiles() {
    if (!secretPath.empty()) unlink(secretPath.c_str());
    if (!jobDir.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(jobDir, ignored);
    }
  }
};

// What every rank process of the job is started with.
struct JobSpec {
  char** argv = nullptr;  // PROGRAM ARGS..., NULL-terminated
  int np = 0;
  std::vector<std::string> rankNs;  // per rank: network namespace ("" = the launcher's own)
  std::vector<int> localRank;
  std::string commId;
  std::string secretPath;
  std::string jobDir;
};

struct Stream {
  int fd = -1;
  FILE* out = nullptr;
  std::string pending;
};

// One rank process: the first of its rank, or a replacement. A replaced process keeps its entry
// until its pipes are drained, so its last lines are not lost.
struct Proc {
  int rank = -1;
  pid_t pid = -1;
  bool running = false;
  Stream streams[2];
};

// Forks and executes the process of `rank`. restartCount 0 starts an original process; k > 0 the
// job's k-th replacement, which gets COLL_RESTART_COUNT=k on top of the same environment.
bool startRank(const JobSpec& job, int rank, int restartCount, Proc* proc, std::string* error) {
  int pipes[2][2] = {{-1, -1}, {-1, -1}};
  auto closePipes = [&]() {
    for (auto& p : pipes)
      for (int& fd : p)
        if (fd >= 0) close(fd), fd = -1;
  };
  for (auto& p : pipes) {
    if (pipe2(p, O_CLOEXEC) != 0) {
      *error = std::string("pipe: ") + strerror(errno);
      closePipes();
      return false;
    }
  }
  pid_t pid = fork();
  if (pid < 0) {
    *error = std::string("fork: ") + strerror(errno);
    closePipes();
    return false;
  }
  if (pid == 0) {
    setpgid(0, 0);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGPIPE}) sigaction(sig, &dfl, nullptr);
    dup2(pipes[0][1], STDOUT_FILENO);
    dup2(pipes[1][1], STDERR_FILENO);
    if (rank != 0) {
      int devnull = open("/dev/null", O_RDONLY);
      if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    }
    if (!job.rankNs[rank].empty()) {
      std::string err;
      if (!enterNamespace(job.rankNs[rank], &err)) {
        fprintf(stderr, "collrun: rank %d: %s\n", rank, err.c_str());
        _exit(127);
      }
    }
    setenv("COLL_RANK", std::to_string(rank).c_str(), 1);
    setenv("COLL_WORLD_SIZE", std::to_string(job.np).c_str(), 1);
    setenv("COLL_LOCAL_RANK", std::to_string(job.localRank[rank]).c_str(), 1);
    setenv("COLL_COMM_ID", job.commId.c_str(), 1);
    setenv("COLL_COMM_SECRET_FILE", job.secretPath.c_str(), 1);
    setenv("COLL_JOB_DIR", job.jobDir.c_str(), 1);
    // Set by us only: an original process must not look like a replacement because collrun
    // itself runs under an elastic launcher.
    if (restartCount > 0) {
      setenv("COLL_RESTART_COUNT", std::to_string(restartCount).c_str(), 1);
    } else {
      unsetenv("COLL_RESTART_COUNT");
    }
    execvp(job.argv[0], job.argv);
    fprintf(stderr, "collrun: cannot run %s: %s\n", job.argv[0], strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);  // also here, so a signal sent right after fork reaches the group
  close(pipes[0][1]);
  close(pipes[1][1]);
  proc->rank = rank;
  proc->pid = pid;
  proc->running = true;
  proc->streams[0] = Stream{pipes[0][0], stdout, {}};
  proc->streams[1] = Stream{pipes[1][0], stderr, {}};
  return true;
}

void emitLines(int rank, Stream& s, bool flushAll) {
  size_t start = 0;
  for (;;) {
    size_t nl = s.pending.find('\n', start);
    if (nl == std::string::npos) break;
    fprintf(s.out, "[%d] %.*s\n", rank, static_cast<int>(nl - start), s.pending.data() + start);
    start = nl + 1;
  }
  s.pending.erase(0, start);
  if (flushAll && !s.pending.empty()) {
    fprintf(s.out, "[%d] %s\n", rank, s.pending.c_str());
    s.pending.clear();
  }
  fflush(s.out);
}

std::string describeStatus(int status) {
  char buf[128];
  if (WIFEXITED(status)) {
    snprintf(buf, sizeof(buf), "exited with status %d", WEXITSTATUS(status));
  } else if (WIFSIGNALED(status)) {
    snprintf(buf, sizeof(buf), "was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
  } else {
    snprintf(buf, sizeof(buf), "ended with wait status 0x%x", status);
  }
  return buf;
}

void signalAll(std::vector<Proc>& procs, int sig) {
  for (auto& p : procs) {
    if (p.running) kill(-p.pid, sig);  // the rank's process group: its helpers too
  }
}

}  // namespace

int main(int argc, char** argv) {
  int np = 0;
  int respawnLimit = 0;
  double timeout = 0;
  std::string netnsList, forcedAddr;
  int argi = 1;
  for (; argi < argc; ++argi) {
    std::string a = argv[argi];
    auto value = [&](const char* what) -> std::string {
      if (argi + 1 >= argc) {
        fprintf(stderr, "collrun: %s needs a value\n", what);
        exit(2);
      }
      return argv[++argi];
    };
    if (a == "-np" || a == "-n") {
      np = atoi(value("-np").c_str());
    } else if (a == "--netns") {
      netnsList = value("--netns");
    } else if (a == "--rendezvous") {
      forcedAddr = value("--rendezvous");
    } else if (a == "--timeout") {
      timeout = atof(value("--timeout").c_str());
    } else if (a == "--respawn") {
      std::string v = value("--respawn");
      char* end = nullptr;
      long n = strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 0 || n > 1000000) {
        fprintf(stderr, "collrun: --respawn needs a count >= 0, not '%s'\n", v.c_str());
        return 2;
      }
      respawnLimit = static_cast<int>(n);
    } else if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    } else if (a == "--") {
      ++argi;
      break;
    } else if (!a.empty() && a[0] == '-') {
      fprintf(stderr, "collrun: unknown option %s\n", a.c_str());
      usage(stderr);
      return 2;
    } else {
      break;
    }
  }
  if (np <= 0 || argi >= argc) {
    usage(stderr);
    return 2;
  }
  // Strip brackets so "[2001:2::1]" works as well as "2001:2::1".
  if (forcedAddr.size() > 2 && forcedAddr.front() == '[' && forcedAddr.back() == ']') {
    forcedAddr = forcedAddr.substr(1, forcedAddr.size() - 2);
  }

  JobSpec job;
  job.argv = argv + argi;
  job.np = np;
  // Placement: one namespace name per rank ("" = the launcher's own).
  job.rankNs.assign(np, "");
  job.localRank.assign(np, 0);
  if (!netnsList.empty()) {
    std::vector<std::string> names = splitList(netnsList);
    if (names.empty()) {
      fprintf(stderr, "collrun: --netns list is empty\n");
      return 2;
    }
    if (static_cast<int>(names.size()) == np) {
      job.rankNs = names;
    } else {
      int k = static_cast<int>(names.size());
      int base = np / k, extra = np % k, r = 0;
      for (int b = 0; b < k; ++b) {
        int size = base + (b < extra ? 1 : 0);
        for (int i = 0; i < size; ++i) job.rankNs[r++] = names[b];
      }
    }
  }
  for (int r = 0; r < np; ++r) {
    int local = 0;
    for (int q = 0; q < r; ++q) local += job.rankNs[q] == job.rankNs[r];
    job.localRank[r] = local;
  }

  std::string error, addr;
  int port = 0;
  if (!findRendezvous(job.rankNs[0], forcedAddr, &addr, &port, &error)) {
    fprintf(stderr, "collrun: cannot choose a rendezvous address: %s\n", error.c_str());
    return 2;
  }
  job.commId = addr.find(':') != std::string::npos ? "[" + addr + "]:" + std::to_string(port)
                                                   : addr + ":" + std::to_string(port);
  JobFiles files;
  if (!writeSecretFile(&files.secretPath, &error) || !makeJobDir(&files.jobDir, &error)) {
    fprintf(stderr, "collrun: %s\n", error.c_str());
    return 2;
  }
  job.secretPath = files.secretPath;
  job.jobDir = files.jobDir;

  if (pipe2(gSignalPipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    fprintf(stderr, "collrun: pipe: %s\n", strerror(errno));
    return 2;
  }
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGCHLD, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  // Indices into procs, not references: starting a replacement appends to it.
  std::vector<Proc> procs;
  for (int r = 0; r < np; ++r) {
    procs.emplace_back();
    if (!startRank(job, r, 0, &procs.back(), &error)) {
      fprintf(stderr, "collrun: rank %d: %s\n", r, error.c_str());
      signalAll(procs, SIGKILL);
      return 2;
    }
  }

  const double start = nowSeconds();
  double killAt = 0;  // when set: the moment SIGTERM'd ranks get SIGKILL
  int exitCode = 0;
  bool failed = false;
  int respawned = 0;
  auto beginKill = [&](int code) {
    if (failed) return;
    failed = true;
    exitCode = code;
    signalAll(procs, SIGTERM);
    killAt = nowSeconds() + kKillGraceSeconds;
  };

  int runningCount = np;
  double drainUntil = 0;  // after the last rank exits, wait briefly for helpers holding a pipe
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::pair<size_t, int>> owners;  // (index into procs, stream)
    fds.push_back({gSignalPipe[0], POLLIN, 0});
    owners.push_back({0, -1});
    for (size_t p = 0; p < procs.size(); ++p) {
      for (int s = 0; s < 2; ++s) {
        if (procs[p].streams[s].fd >= 0) {
          fds.push_back({procs[p].streams[s].fd, POLLIN, 0});
          owners.push_back({p, s});
        }
      }
    }
    if (runningCount == 0) {
      if (fds.size() == 1) break;
      if (drainUntil == 0) drainUntil = nowSeconds() + 1.0;
      if (nowSeconds() > drainUntil) break;
    }
    int waitMs = 200;
    poll(fds.data(), fds.size(), waitMs);

    for (size_t i = 1; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      auto [p, s] = owners[i];
      Stream& st = procs[p].streams[s];
      char buf[65536];
      ssize_t n = read(st.fd, buf, sizeof(buf));
      if (n > 0) {
        st.pending.append(buf, n);
        emitLines(procs[p].rank, st, false);
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        emitLines(procs[p].rank, st, true);
        close(st.fd);
        st.fd = -1;
      }
    }

    if (fds[0].revents & POLLIN) {
      unsigned char sigs[64];
      ssize_t n = read(gSignalPipe[0], sigs, sizeof(sigs));
      for (ssize_t i = 0; i < n; ++i) {
        if (sigs[i] == SIGINT || sigs[i] == SIGTERM || sigs[i] == SIGHUP) {
          fprintf(stderr, "collrun: received signal %d (%s); stopping all ranks\n", sigs[i], strsignal(sigs[i]));
          if (!failed) {
            // Forward the signal itself first: the ranks may want to shut down cleanly.
            signalAll(procs, sigs[i]);
            failed = true;
            exitCode = 128 + sigs[i];
            killAt = nowSeconds() + kKillGraceSeconds;
          }
        }
      }
    }

    // By index and up to the current size: a replacement started here is appended and checked
    // in the next round.
    for (size_t p = 0, n = procs.size(); p < n; ++p) {
      if (!procs[p].running) continue;
      int status = 0;
      pid_t got = waitpid(procs[p].pid, &status, WNOHANG);
      if (got != procs[p].pid) continue;
      procs[p].running = false;
      --runningCount;
      const int rank = procs[p].rank;
      bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (ok || failed) continue;
      if (respawned < respawnLimit) {
        ++respawned;
        fprintf(stderr, "collrun: rank %d (pid %d) %s; starting replacement %d of %d\n", rank, procs[p].pid,
                describeStatus(status).c_str(), respawned, respawnLimit);
        procs.emplace_back();
        if (startRank(job, rank, respawned, &procs.back(), &error)) {
          ++runningCount;
          continue;
        }
        procs.pop_back();
        fprintf(stderr, "collrun: cannot start a replacement for rank %d: %s; terminating the other ranks\n", rank,
                error.c_str());
        beginKill(2);
        continue;
      }
      fprintf(stderr, "collrun: rank %d (pid %d) %s; %sterminating the other ranks\n", rank, procs[p].pid,
              describeStatus(status).c_str(), respawnLimit > 0 ? "no replacements left; " : "");
      int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      beginKill(code == 0 ? 1 : code);
    }

    double now = nowSeconds();
    if (timeout > 0 && !failed && now - start > timeout && runningCount > 0) {
      fprintf(stderr, "collrun: timeout: the job ran longer than %g s; killing all ranks\n", timeout);
      beginKill(kTimeoutExit);
    }
    if (failed && killAt > 0 && now > killAt && runningCount > 0) {
      signalAll(procs, SIGKILL);
      killAt = 0;
    }
  }

  for (auto& p : procs) {
    for (auto& s : p.streams) {
      if (s.fd >= 0) {
        emitLines(p.rank, s, true);
        close(s.fd);
      }
    }
  }
  return exitCode;
}
