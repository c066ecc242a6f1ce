// COLL_CHECK's fingerprints and the error naming the disagreeing ranks (see call_check.h).
#include "src/comm/call_check.h"

#include <string>
#include <utility>

#include "src/base/config.h"
#include "src/plan/planner.h"

namespace coll {

const BoolKnob kCheck("COLL_CHECK", "0",
                      "1: before each collective, ranks compare collective, count, type, op and root, and a mismatch "
                      "is collInvalidUsage naming the ranks (costs one small all-gather per call).",
                      {KnobSection::PlannerExecutor, 130});

bool callCheckEnabled() { return kCheck.get(); }

CallFingerprint fingerprintOf(const CollArgs& args) {
  CallFingerprint mine{static_cast<int32_t>(args.kind), static_cast<int32_t>(args.dtype),
                       args.op < collNumOps ? static_cast<int32_t>(args.op) : -1, args.root, args.count};
  const bool reducing =
      args.kind == CollKind::AllReduce || args.kind == CollKind::Reduce || args.kind == CollKind::ReduceScatter;
  if (!reducing) mine.op = 0;
  const bool rooted = args.kind == CollKind::Broadcast || args.kind == CollKind::Reduce ||
                      args.kind == CollKind::Gather || args.kind == CollKind::Scatter;
  if (!rooted) mine.root = -1;
  return mine;
}

Status describeCallMismatch(const std::vector<CallFingerprint>& all) {
  auto same = [](const CallFingerprint& a, const CallFingerprint& b) {
    return a.kind == b.kind && a.count == b.count && a.dtype == b.dtype && a.op == b.op && a.root == b.root;
  };
  std::vector<std::vector<int>> groups;  // ranks per distinct call, in order of first appearance
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    size_t g = 0;
    while (g < groups.size() && !same(all[static_cast<size_t>(groups[g][0])], all[static_cast<size_t>(r)])) ++g;
    if (g == groups.size()) groups.emplace_back();
    groups[g].push_back(r);
  }
  if (groups.size() < 2) return okStatus();
  auto rankList = [](const std::vector<int>& ranks) {
    std::string s = ranks.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0, shown = 0; i < ranks.size(); ++shown) {
      size_t j = i;
      while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
      if (shown == 16) return s + ",...";
      s += (i ? "," : "") + std::to_string(ranks[i]) + (j > i ? "-" + std::to_string(ranks[j]) : "");
      i = j + 1;
    }
    return s;
  };
  auto describe = [](const CallFingerprint& f) {
    static const char* kOps[] = {"sum", "prod", "max", "min", "avg"};
    const auto kind = static_cast<CollKind>(f.kind);
    std::string s = std::string(collKindName(kind)) + "(count " + std::to_string(f.count) + ", " +
                    dataTypeName(static_cast<collDataType_t>(f.dtype));
    if (kind == CollKind::AllReduce || kind == CollKind::Reduce || kind == CollKind::ReduceScatter) {
      s += std::string(", op ") + (f.op >= 0 && f.op < 5 ? kOps[f.op] : "premulsum");
    }
    if (f.root >= 0) s += ", root " + std::to_string(f.root);
    return s + ")";
  };
  const CallFingerprint& first = all[static_cast<size_t>(groups[0][0])];
  bool kind = false, count = false, dtype = false, op = false, root = false;
  std::string calls;
  for (size_t g = 0; g < groups.size() && g < 4; ++g) {
    const CallFingerprint& f = all[static_cast<size_t>(groups[g][0])];
    kind |= f.kind != first.kind, count |= f.count != first.count, dtype |= f.dtype != first.dtype;
    op |= f.op != first.op, root |= f.root != first.root;
    calls += (g ? "; " : "") + rankList(groups[g]) + " called " + describe(f);
  }
  if (groups.size() > 4) calls += "; and " + std::to_string(groups.size() - 4) + " more different calls";
  std::string what;
  for (auto [differs, name] :
       {std::pair{kind, "collective"}, {count, "count"}, {dtype, "datatype"}, {op, "reduction op"}, {root, "root"}}) {
    if (differs) what += (what.empty() ? "" : " and ") + std::string(name);
  }
  return makeError(collInvalidUsage,
                   "COLL_CHECK: ranks disagree on the %s: %s. Every rank must issue the same collectives in the same "
                   "order with the same count, datatype, op and root",
                   what.c_str(), calls.c_str());
}

}  // namespace coll
