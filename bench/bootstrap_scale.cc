// bootstrap_scale: the rendezvous (Bootstrap::create, real sockets on loopback) of N thread ranks
// in one process, with one root and with ~sqrt(N) roots (collCommInitRankScalable's), alternated
// REPS times. Prints per N and root count: the median rendezvous time, the most messages one root
// handled, the most one rank sent, and the time's growth per doubling of N. Then, for the failure
// notices, the notice tree the library uses (COLL_NOTICE_FANOUT 32) walked at N up to 102,400:
// hops and the most messages one rank sends for one notice.
// usage: bootstrap_scale [REPS=3] [N...=256 1024 4096]
// A rank gives up after 120 s; the roots, after COLL_TIMEOUT (set to 110 s here unless set), so a
// root that is still missing registrations says which before the ranks' errors are printed (each
// kind of error once, with how many ranks had it).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "src/oob/auth.h"
#include "src/oob/bootstrap.h"
#include "src/oob/failure.h"

namespace {

constexpr int64_t kRankDeadlineMs = 120000;

// The failed ranks' errors, one line per kind (the message with its numbers as '#'), most common
// first: a timeout shows whether every rank waited for the table or a few never registered.
void reportFailures(const std::vector<coll::Status>& sts, double seconds) {
  std::map<std::string, std::pair<int, int>> kinds;  // shape -> (count, first rank)
  int failed = 0;
  for (size_t r = 0; r < sts.size(); ++r) {
    if (sts[r].ok()) continue;
    ++failed;
    std::string shape;
    for (char c : sts[r].message()) {
      if (c >= '0' && c <= '9') {
        if (shape.empty() || shape.back() != '#') shape += '#';
      } else {
        shape += c;
      }
    }
    auto [it, fresh] = kinds.try_emplace(shape, 0, static_cast<int>(r));
    ++it->second.first;
  }
  std::vector<std::pair<int, int>> order;  // (count, first rank)
  for (auto& [shape, v] : kinds) order.push_back(v);
  std::sort(order.begin(), order.end(), [](auto& a, auto& b) { return a.first > b.first; });
  fprintf(stderr, "%d of %zu ranks failed after %.1f s, %zu kinds of error:\n", failed, sts.size(), seconds,
          order.size());
  for (size_t i = 0; i < order.size() && i < 8; ++i) {
    fprintf(stderr, "  %d ranks, e.g. rank %d: %s\n", order[i].first, order[i].second,
            sts[static_cast<size_t>(order[i].second)].message().c_str());
  }
}

struct Run {
  double seconds = 0;
  uint32_t rootMessages = 0, rankMessages = 0;
};

bool rendezvous(int n, int roots, Run* out) {
  using namespace coll;
  Secret secret;
  SocketAddress loopback;
  if (!randomSecret(&secret).ok() || !SocketAddress::parse("127.0.0.1:0", &loopback).ok()) return false;
  std::vector<collUniqueId> ids(static_cast<size_t>(roots));
  for (auto& id : ids) {
    Status st = startBootstrapRoot(loopback, &secret, &id);
    if (!st.ok()) return fprintf(stderr, "root: %s\n", st.message().c_str()), false;
  }
  (void)bootstrapRootMessagesMax(true);
  std::vector<std::unique_ptr<Bootstrap>> bs(static_cast<size_t>(n));
  std::vector<Status> sts(static_cast<size_t>(n));
  const auto t0 = std::chrono::steady_clock::now();
  {
    std::vector<std::thread> ts;
    ts.reserve(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      ts.emplace_back(
          [&, r] { sts[r] = Bootstrap::create(ids, r, n, 1, 0, Deadline::afterMs(kRankDeadlineMs), &bs[r]); });
    }
    for (auto& t : ts) t.join();
  }
  out->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int r = 0; r < n; ++r) {
    if (!sts[r].ok()) return reportFailures(sts, out->seconds), false;
    out->rankMessages = std::max(out->rankMessages, bs[r]->rendezvousMessagesSent());
  }
  // A root counts its last message after the ranks it served can finish: give it a moment.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  out->rootMessages = bootstrapRootMessagesMax(true);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  setenv("COLL_TIMEOUT", "110", 0);  // the roots' lifetime: shorter than kRankDeadlineMs
  const int reps = argc > 1 ? atoi(argv[1]) : 3;
  std::vector<int> sizes;
  for (int i = 2; i < argc; ++i) sizes.push_back(atoi(argv[i]));
  if (sizes.empty()) sizes = {256, 1024, 4096};
  if (reps < 1) return fprintf(stderr, "usage: bootstrap_scale [REPS] [N...]\n"), 2;
  printf("%8s %6s %10s %14s %14s %10s\n", "ranks", "roots", "median_s", "root_msgs_max", "rank_msgs_max", "x/doubling");
  std::map<int, double> previous;  // roots kind (0: one, 1: sqrt) -> last median
  int previousN = 0;
  for (int n : sizes) {
    const int sqrtRoots = std::max(1, static_cast<int>(std::lround(std::sqrt(n))));
    std::vector<Run> runs[2];
    for (int rep = 0; rep < reps; ++rep) {
      for (int kind = 0; kind < 2; ++kind) {  // alternated, so drift hits both alike
        Run run;
        if (!rendezvous(n, kind == 0 ? 1 : sqrtRoots, &run)) return 1;
        runs[kind].push_back(run);
      }
    }
    for (int kind = 0; kind < 2; ++kind) {
      std::vector<double> t;
      uint32_t rootMax = 0, rankMax = 0;
      for (const Run& r : runs[kind]) {
        t.push_back(r.seconds);
        rootMax = std::max(rootMax, r.rootMessages);
        rankMax = std::max(rankMax, r.rankMessages);
      }
      std::sort(t.begin(), t.end());
      const double median = t[t.size() / 2];
      char growth[32] = "-";
      if (previous.count(kind) && previousN > 0) {
        const double doublings = std::log2(static_cast<double>(n) / previousN);
        snprintf(growth, sizeof(growth), "%.2f", std::pow(median / previous[kind], 1.0 / doublings));
      }
      printf("%8d %6d %10.3f %14u %14u %10s\n", n, kind == 0 ? 1 : sqrtRoots, median, rootMax, rankMax, growth);
      previous[kind] = median;
    }
    previousN = n;
    fflush(stdout);
  }
  printf("\nnotice tree (fan-out 32): one notice from rank 0\n%8s %6s %14s\n", "ranks", "hops", "rank_msgs_max");
  for (int n : {256, 1024, 4096, 16384, 102400}) {
    std::vector<int> frontier{0}, children;
    size_t most = 0;
    int hops = 0;
    while (!frontier.empty()) {
      std::vector<int> next;
      for (int r : frontier) {
        coll::noticeTreeChildren(0, r, n, 32, &children);
        most = std::max(most, children.size());
        next.insert(next.end(), children.begin(), children.end());
      }
      if (!next.empty()) ++hops;
      frontier = std::move(next);
    }
    printf("%8d %6d %14zu\n", n, hops, most);
  }
  return 0;
}
