// collCommShrink's agreement: the survivors form an 8-ary tree in parent-rank order; each sends its
// parent its exclude list and what its subtree found wrong, each parent checks its children's lists
// against its own; the leader (the lowest survivor) starts the new rendezvous and its answer (the
// unique id, or why not) goes back down the tree; all join the new communicator.
#include "src/comm/shrink.h"

#include <algorithm>
#include <cstring>
#include <iterator>

#include "src/base/byte_order.h"
#include "src/base/config.h"
#include "src/base/log.h"
#include "src/oob/auth.h"
#include "src/oob/bootstrap.h"
#include "src/oob/socket.h"
#include "src/oob/wire.h"

namespace coll {
namespace {

constexpr uint32_t kRequestMagic = 0x51524853u;                            // "SHRQ" as little-endian bytes
constexpr uint32_t kReplyMagic = 0x50524853u;                              // "SHRP"
constexpr size_t kRequestHeader = 4 + 4 + 4 + 4 + 8 + 4;                   // magic seq nranks count digest listed
constexpr size_t kRequestTrailer = 4 + 4 + 4;                              // after the list: code problems textLen
constexpr size_t kReplyHeader = 4 + 4 + 4 + 4 + 4 + 4;                     // magic seq code newNranks ids textLen
constexpr size_t kRootWire = 4 + sizeof(collUniqueId);                     // a request's root: block, id

using le::get32;
using le::get64;
using le::put32;
using le::put64;

// "{2, 5, 7}", shortened for long lists: error messages stay readable at 100,000 ranks.
std::string rankSet(const std::vector<int>& ranks) {
  constexpr size_t kShown = 8;
  std::string s = "{";
  for (size_t i = 0; i < ranks.size() && i < kShown; ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > kShown) s += ", ... (" + std::to_string(ranks.size()) + " in all)";
  return s + "}";
}

// What differs between this rank's list and a survivor's (its child in the agreement's tree), in words.
std::string listDifference(const std::vector<int>& mine, int me, const ShrinkRequest& theirs, int them) {
  std::string head = "rank " + std::to_string(them) + " passed different excludeRanks than rank " + std::to_string(me);
  if (theirs.listed.size() != theirs.excludeCount || mine.size() > kShrinkMaxListed) {
    return head + ": " + std::to_string(theirs.excludeCount) + " against " + std::to_string(mine.size()) +
           " ranks excluded (the lists are too long to compare rank by rank)";
  }
  std::vector<int> onlyTheirs, onlyMine;
  std::vector<int> other(theirs.listed.begin(), theirs.listed.end());
  std::set_difference(other.begin(), other.end(), mine.begin(), mine.end(), std::back_inserter(onlyTheirs));
  std::set_difference(mine.begin(), mine.end(), other.begin(), other.end(), std::back_inserter(onlyMine));
  std::string s = head + ":";
  if (!onlyTheirs.empty()) s += " " + rankSet(onlyTheirs) + " only in rank " + std::to_string(them) + "'s list";
  if (!onlyTheirs.empty() && !onlyMine.empty()) s += ",";
  if (!onlyMine.empty()) s += " " + rankSet(onlyMine) + " only in rank " + std::to_string(me) + "'s list";
  return s + "; every survivor must pass the same excludeRanks";
}

Status joinNew(const std::vector<collUniqueId>& ids, int newNranks, int newRank, CommConfig config,
               std::unique_ptr<Comm>* out) {
  if (ids.size() > 1) config.rootIds = ids;
  return Comm::create(ids[0], newNranks, newRank, config, out)
      .withContext("collCommShrink: joining the survivors' communicator as rank " + std::to_string(newRank) + " of " +
                   std::to_string(newNranks));
}

// The agreement runs along a tree of the survivors in parent-rank order: survivor i has children
// kTreeFanout * i + 1 .. kTreeFanout * i + kTreeFanout and parent (i - 1) / kTreeFanout, so no rank
// handles more than kTreeFanout + 1 requests and answers, whatever the size.
constexpr size_t kTreeFanout = 8;
// A rank of height h (levels below it) waits this many timeouts for its children's requests:
// survivors learn of a failure at different times (a peer's EOF at once, a propagated failure
// later, a timeout last), up to about two timeouts apart, and each level below may add the wait of
// its own. A survivor waits for the answer this many timeouts plus the tree's height, as it may
// have come first.
constexpr int64_t kGatherTimeouts = 2;
constexpr int64_t kAnswerTimeouts = 4;
// Error answers are best effort: a survivor that went away meanwhile must not hold up the others.
constexpr int64_t kErrorAnswerMs = 2000;

// The levels below survivor `i` of `n` (the leftmost path is the deepest).
int64_t treeHeight(size_t i, size_t n) {
  int64_t h = 0;
  for (size_t first = i; kTreeFanout * first + 1 < n; first = kTreeFanout * first + 1) ++h;
  return h;
}

// What a subtree found wrong (the first problem and how many there were), and the rendezvous
// roots started in it.
struct Problems {
  Status first;
  uint32_t count = 0;
  std::vector<ShrinkRequest::Root> roots;
  void add(const Status& st, uint32_t n = 1) {
    if (first.ok()) first = st;
    count += n;
  }
};

// Starts a root of the survivors' rendezvous where this rank's listener is (the survivors can reach
// it), with its own secret.
Status startRendezvousRoot(Bootstrap& bs, collUniqueId* id) {
  Secret secret;
  COLL_TRY(randomSecret(&secret));
  SocketAddress bind = bs.peer(bs.rank()).address;
  bind.setPort(0);
  return startBootstrapRoot(bind, &secret, id).withContext("starting the survivors' rendezvous");
}

// The answer a rank that failed below the leader gives its children: why, in its own name.
std::vector<uint8_t> errorReply(int me, uint32_t seq, const Status& why) {
  static const std::string kPrefix = "collCommShrink: ";
  std::string text = why.message();
  if (text.compare(0, kPrefix.size(), kPrefix) == 0) text.erase(0, kPrefix.size());
  ShrinkReply reply;
  reply.seq = seq;
  reply.code = why.code();
  reply.message = ("rank " + std::to_string(me) + ": " + text).substr(0, kShrinkMaxText);
  return encodeShrinkReply(reply);
}

// Passes the answer down. A child that cannot be given a success leaves its subtree out of the
// new rendezvous, where the others would wait for it until their timeout: that fails this rank.
Status answerChildren(Bootstrap& bs, uint32_t tag, int64_t timeoutMs, const std::vector<int>& children,
                      const std::vector<uint8_t>& bytes, bool success) {
  Status failed;
  for (int c : children) {
    Deadline d = Deadline::afterMs(success ? timeoutMs : std::min(timeoutMs, kErrorAnswerMs));
    Status st = bs.send(c, tag, bytes.data(), bytes.size(), d);
    if (st.ok()) continue;
    if (!success) {
      COLL_WARN(bs.rank(), "collCommShrink: could not tell rank %d why the shrink failed: %s", c, st.message().c_str());
    } else if (failed.ok()) {
      failed = Status(st.code(), "collCommShrink: could not give rank " + std::to_string(c) +
                                     " the survivors' rendezvous: " + st.message());
    }
  }
  return failed;
}

// This rank's children's requests, each checked against this rank's own list, with what their
// subtrees found.
Problems gatherChildren(Bootstrap& bs, uint32_t seq, int64_t gatherMs, const std::vector<int>& excluded,
                        const std::vector<int>& children) {
  const int me = bs.rank(), n = bs.nranks();
  const uint32_t tag = shrinkTag(seq);
  const uint64_t digest = shrinkDigest(n, excluded);
  Deadline gather = Deadline::afterMs(gatherMs);
  Problems problems;
  for (int c : children) {
    std::vector<uint8_t> msg;
    ShrinkRequest req;
    Status st = bs.recv(c, tag, &msg, shrinkRequestMaxBytes(n), gather);
    if (st.code() == collTimeout) {
      st = makeError(collTimeout,
                     "rank %d did not join within %lld ms: every rank not in excludeRanks must call "
                     "collCommShrink; if rank %d failed or is stalled, add it to excludeRanks",
                     c, static_cast<long long>(gatherMs), c);
    } else if (st.ok()) {
      st = decodeShrinkRequest(msg.data(), msg.size(), n, &req).withContext("the request of rank " + std::to_string(c));
    }
    if (st.ok() && req.seq != seq) {
      st = makeError(collInvalidUsage,
                     "rank %d is at its shrink #%u of this communicator and rank %d at #%u: every survivor must "
                     "make the same collCommShrink calls",
                     c, req.seq + 1, me, seq + 1);
    }
    if (st.ok() && (req.excludeCount != excluded.size() || req.digest != digest)) {
      st = Status(collInvalidUsage, listDifference(excluded, me, req, c));
    }
    if (!st.ok()) {
      problems.add(st);
      continue;
    }
    if (req.problems > 0) {
      problems.add(Status(req.code, printableText(req.message.data(), req.message.size())), req.problems);
    }
    problems.roots.insert(problems.roots.end(), req.roots.begin(), req.roots.end());
  }
  return problems;
}

// The leader: decides, and hands out every block's rendezvous root when all is well.
Status decide(uint32_t seq, size_t survivors, Problems problems, ShrinkReply* reply) {
  reply->seq = seq;
  if (problems.first.ok()) {
    // Every block's root, each once (a survivor whose list differs would have been a problem).
    const int roots = shrinkRootCount(static_cast<int>(survivors));
    bool complete = problems.roots.size() == static_cast<size_t>(roots);
    for (size_t g = 0; complete && g < problems.roots.size(); ++g) complete = problems.roots[g].block == g;
    if (!complete) {
      problems.add(makeError(collInternalError, "the survivors' rendezvous has %zu of its %d roots",
                             problems.roots.size(), roots));
    } else {
      for (const ShrinkRequest::Root& r : problems.roots) reply->ids.push_back(r.id);
    }
  }
  if (problems.first.ok()) {
    reply->newNranks = static_cast<uint32_t>(survivors);
    return okStatus();
  }
  reply->ids.clear();
  reply->code = problems.first.code();
  reply->message = problems.first.message();
  if (problems.count > 1) reply->message += " (and " + std::to_string(problems.count - 1) + " more problems)";
  if (reply->message.size() > kShrinkMaxText) reply->message.resize(kShrinkMaxText);
  return Status(reply->code, "collCommShrink: " + reply->message);
}

// A survivor below the leader: reports to its parent and waits for the answer (*answer: its bytes,
// to pass on unchanged; *reply: what they say). Fails when no well-formed answer came.
Status report(Bootstrap& bs, uint32_t seq, int64_t timeoutMs, const std::vector<int>& excluded,
              const std::vector<int>& survivors, int parent, const Problems& problems, std::vector<uint8_t>* answer,
              ShrinkReply* reply) {
  const int n = bs.nranks(), leader = survivors[0];
  const uint32_t tag = shrinkTag(seq);
  ShrinkRequest req;
  req.seq = seq;
  req.parentNranks = static_cast<uint32_t>(n);
  req.excludeCount = static_cast<uint32_t>(excluded.size());
  req.digest = shrinkDigest(n, excluded);
  if (excluded.size() <= kShrinkMaxListed) req.listed.assign(excluded.begin(), excluded.end());
  if (problems.count > 0) {
    req.code = problems.first.code();
    req.problems = problems.count;
    req.message = problems.first.message().substr(0, kShrinkMaxText);
  }
  req.roots = problems.roots;
  const std::vector<uint8_t> bytes = encodeShrinkRequest(req);
  const std::string whom = "rank " + std::to_string(parent) +
                           (parent == leader ? " (the leader: the lowest rank not excluded)"
                                             : " (this rank's parent in the agreement's tree)");
  Status st = bs.send(parent, tag, bytes.data(), bytes.size(), Deadline::afterMs(timeoutMs));
  if (!st.ok()) {
    return Status(st.code(), "collCommShrink: could not reach " + whom + ": " + st.message() + "; if rank " +
                                 std::to_string(parent) + " failed, add it to excludeRanks");
  }
  const int64_t answerMs = (kAnswerTimeouts + treeHeight(0, survivors.size())) * timeoutMs;
  st = bs.recv(parent, tag, answer, shrinkReplyMaxBytes(n), Deadline::afterMs(answerMs));
  if (st.code() == collTimeout) {
    return makeError(collTimeout,
                     "collCommShrink: no answer from %s within %lld ms: every survivor must pass the same "
                     "excludeRanks",
                     whom.c_str(), static_cast<long long>(answerMs));
  }
  if (st.ok()) st = decodeShrinkReply(answer->data(), answer->size(), n, reply);
  if (!st.ok()) return st.withContext("collCommShrink: the answer of " + whom);
  if (reply->seq != seq) {
    return makeError(collInvalidUsage, "collCommShrink: %s answered shrink #%u where this rank is at #%u", whom.c_str(),
                     reply->seq + 1, seq + 1);
  }
  return okStatus();
}

}  // namespace

Status checkExcludeList(int nranks, int rank, const int* excludeRanks, int excludeCount, std::vector<int>* sorted) {
  if (excludeCount < 0)
    return makeError(collInvalidArgument, "collCommShrink: excludeCount %d is negative", excludeCount);
  if (excludeCount > 0 && excludeRanks == nullptr) {
    return makeError(collInvalidArgument, "collCommShrink: excludeRanks is NULL with excludeCount %d", excludeCount);
  }
  if (excludeCount >= nranks) {
    return makeError(collInvalidArgument,
                     "collCommShrink: excludeCount %d would exclude every rank of this %d-rank communicator",
                     excludeCount, nranks);
  }
  sorted->assign(excludeRanks, excludeRanks + excludeCount);
  for (int i = 0; i < excludeCount; ++i) {
    if (excludeRanks[i] < 0 || excludeRanks[i] >= nranks) {
      return makeError(collInvalidArgument,
                       "collCommShrink: excludeRanks[%d] = %d is not a rank of this %d-rank "
                       "communicator (0..%d)",
                       i, excludeRanks[i], nranks, nranks - 1);
    }
  }
  std::sort(sorted->begin(), sorted->end());
  auto dup = std::adjacent_find(sorted->begin(), sorted->end());
  if (dup != sorted->end()) {
    return makeError(collInvalidArgument, "collCommShrink: rank %d is listed twice in excludeRanks", *dup);
  }
  if (std::binary_search(sorted->begin(), sorted->end(), rank)) {
    return makeError(collInvalidArgument,
                     "collCommShrink: rank %d excludes itself: an excluded rank must not call collCommShrink "
                     "(destroy or abort its communicator instead)",
                     rank);
  }
  return okStatus();
}

Status agreeShrink(Bootstrap& bs, uint32_t seq, int64_t timeoutMs, const std::vector<int>& excluded,
                   ShrinkAgreement* out) {
  const int n = bs.nranks(), me = bs.rank();
  std::vector<int> survivors;
  survivors.reserve(static_cast<size_t>(n) - excluded.size());
  for (int r = 0, x = 0; r < n; ++r) {
    if (x < static_cast<int>(excluded.size()) && excluded[x] == r) {
      ++x;
      continue;
    }
    survivors.push_back(r);
  }
  COLL_INFO(me, "collCommShrink #%u: %zu of %d ranks remain (excluded %s); leader rank %d", seq + 1, survivors.size(),
            n, rankSet(excluded).c_str(), survivors[0]);
  const size_t i = static_cast<size_t>(std::lower_bound(survivors.begin(), survivors.end(), me) - survivors.begin());
  std::vector<int> children;
  for (size_t c = kTreeFanout * i + 1; c <= kTreeFanout * i + kTreeFanout && c < survivors.size(); ++c) {
    children.push_back(survivors[c]);
  }
  const uint32_t tag = shrinkTag(seq);
  // Up the tree: each rank checks its children's lists against its own and passes on what its
  // subtree found; the leader decides. Down: the answer, as the leader made it.
  Problems problems =
      gatherChildren(bs, seq, (kGatherTimeouts + treeHeight(i, survivors.size())) * timeoutMs, excluded, children);
  const int count = static_cast<int>(survivors.size()), roots = shrinkRootCount(count);
  const int block = bootstrapGroupOf(static_cast<int>(i), roots, count);
  if (problems.count == 0 && bootstrapGroupStart(block, roots, count) == static_cast<int>(i)) {
    // The first survivor of its block serves the block's registrations.
    ShrinkRequest::Root root;
    root.block = static_cast<uint32_t>(block);
    Status started = startRendezvousRoot(bs, &root.id);
    if (started.ok()) problems.roots.push_back(root);
    else problems.add(started);
  }
  // By rising block: as a request carries them, and as the leader hands them out.
  std::sort(problems.roots.begin(), problems.roots.end(),
            [](const ShrinkRequest::Root& a, const ShrinkRequest::Root& b) { return a.block < b.block; });
  std::vector<uint8_t> answer;
  Status st;
  ShrinkReply reply;
  if (i == 0) {
    st = decide(seq, survivors.size(), problems, &reply);
    answer = encodeShrinkReply(reply);
  } else {
    const int parent = survivors[(i - 1) / kTreeFanout];
    st = report(bs, seq, timeoutMs, excluded, survivors, parent, problems, &answer, &reply);
    if (!st.ok()) {
      answer = errorReply(me, seq, st);
    } else if (reply.code != collSuccess) {
      // The leader's answer goes on as it is.
      st = Status(reply.code, "collCommShrink: " + printableText(reply.message.data(), reply.message.size()) +
                                  " (the leader's answer, from rank " + std::to_string(parent) + ")");
    } else if (reply.newNranks != survivors.size()) {
      st = makeError(collInvalidUsage,
                     "collCommShrink: the leader, rank %d, counts %u survivors where rank %d counts %zu", survivors[0],
                     reply.newNranks, me, survivors.size());
      answer = errorReply(me, seq, st);
    }
  }
  Status passed = answerChildren(bs, tag, timeoutMs, children, answer, st.ok());
  if (!st.ok()) return st;
  COLL_TRY(passed);
  out->ids = reply.ids;
  out->newNranks = static_cast<int>(survivors.size());
  out->newRank = static_cast<int>(i);
  return okStatus();
}

Status shrinkComm(Comm& parent, const int* excludeRanks, int excludeCount, const CommConfig& config,
                  std::unique_ptr<Comm>* out) {
  std::vector<int> excluded;
  COLL_TRY(checkExcludeList(parent.nranks(), parent.rank(), excludeRanks, excludeCount, &excluded));
  // No check of the parent's health: a failed or revoked communicator is what shrink is for, and
  // its bootstrap (the only part used here) outlives both.
  const uint32_t seq = parent.nextShrinkSeq();
  ShrinkAgreement agreed;
  COLL_TRY(agreeShrink(parent.bootstrap(), seq, parent.timeoutMs(), excluded, &agreed));
  COLL_TRY(joinNew(agreed.ids, agreed.newNranks, agreed.newRank, config, out));
  COLL_INFO(parent.rank(), "collCommShrink #%u: now rank %d of %d", seq + 1, (*out)->rank(), agreed.newNranks);
  return okStatus();
}

uint64_t shrinkDigest(int nranks, const std::vector<int>& sortedExcluded) {
  // FNV-1a: the list travels too; this only has to make different lists differ.
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) {
      h ^= static_cast<uint8_t>(v >> (8 * i));
      h *= 0x100000001b3ull;
    }
  };
  mix(static_cast<uint32_t>(nranks));
  mix(static_cast<uint32_t>(sortedExcluded.size()));
  for (int r : sortedExcluded) mix(static_cast<uint32_t>(r));
  return h;
}

size_t shrinkRequestMaxBytes(int nranks) {
  const size_t n = static_cast<size_t>(nranks > 0 ? nranks : 0);
  return kRequestHeader + 4 * std::min<size_t>(n, kShrinkMaxListed) + kRequestTrailer + kShrinkMaxText + 4 +
         kRootWire * static_cast<size_t>(shrinkRootCount(static_cast<int>(n)));
}
size_t shrinkReplyMaxBytes(int nranks) {
  return kReplyHeader + sizeof(collUniqueId) * static_cast<size_t>(shrinkRootCount(nranks > 0 ? nranks : 0)) +
         kShrinkMaxText;
}

std::vector<uint8_t> encodeShrinkRequest(const ShrinkRequest& r) {
  std::vector<uint8_t> b;
  const size_t textLen = std::min<size_t>(r.message.size(), kShrinkMaxText);
  b.reserve(kRequestHeader + 4 * r.listed.size() + kRequestTrailer + textLen + 4 + kRootWire * r.roots.size());
  put32(b, kRequestMagic);
  put32(b, r.seq);
  put32(b, r.parentNranks);
  put32(b, r.excludeCount);
  put64(b, r.digest);
  put32(b, static_cast<uint32_t>(r.listed.size()));
  for (int32_t x : r.listed) put32(b, static_cast<uint32_t>(x));
  put32(b, static_cast<uint32_t>(r.code));
  put32(b, r.problems);
  put32(b, static_cast<uint32_t>(textLen));
  b.insert(b.end(), r.message.begin(), r.message.begin() + static_cast<std::ptrdiff_t>(textLen));
  put32(b, static_cast<uint32_t>(r.roots.size()));
  for (const ShrinkRequest::Root& root : r.roots) {
    put32(b, root.block);
    const uint8_t* id = reinterpret_cast<const uint8_t*>(&root.id);
    b.insert(b.end(), id, id + sizeof(collUniqueId));
  }
  return b;
}

Status decodeShrinkRequest(const uint8_t* data, size_t size, int parentNranks, ShrinkRequest* out) {
  if (size < kRequestHeader || get32(data) != kRequestMagic) {
    return makeError(collRemoteError, "malformed shrink request (%zu bytes; mismatched library versions?)", size);
  }
  ShrinkRequest r;
  r.seq = get32(data + 4);
  r.parentNranks = get32(data + 8);
  r.excludeCount = get32(data + 12);
  r.digest = get64(data + 16);
  const uint32_t listed = get32(data + 24);
  if (r.parentNranks != static_cast<uint32_t>(parentNranks)) {
    return makeError(collRemoteError, "shrink request for a %u-rank communicator where this one has %d ranks",
                     r.parentNranks, parentNranks);
  }
  const size_t listEnd = kRequestHeader + 4 * static_cast<size_t>(listed);
  if (r.excludeCount >= r.parentNranks || (listed != 0 && listed != r.excludeCount) || listed > kShrinkMaxListed ||
      size < listEnd + kRequestTrailer) {
    return makeError(collRemoteError, "malformed shrink request (%u excluded, %u listed, %zu bytes)", r.excludeCount,
                     listed, size);
  }
  const uint32_t code = get32(data + listEnd);
  r.problems = get32(data + listEnd + 4);
  const uint32_t textLen = get32(data + listEnd + 8);
  const size_t textEnd = listEnd + kRequestTrailer + textLen;
  // What the sender's subtree found: none and no text, or a count and an error code.
  if (code >= collNumResults || code == collInProgress || (code == collSuccess) != (r.problems == 0) ||
      r.problems > r.parentNranks || textLen > kShrinkMaxText || (code == collSuccess && textLen != 0) ||
      size < textEnd + 4) {
    return makeError(collRemoteError, "malformed shrink request (code %u, %u problems, %u text bytes, %zu bytes)", code,
                     r.problems, textLen, size);
  }
  r.code = static_cast<collResult_t>(code);
  r.message.assign(reinterpret_cast<const char*>(data + listEnd + kRequestTrailer), textLen);
  // The roots started below the sender: at most one per block, by rising block.
  const uint32_t roots = get32(data + textEnd);
  const uint32_t maxRoots = static_cast<uint32_t>(shrinkRootCount(parentNranks));
  if (roots > maxRoots || size != textEnd + 4 + kRootWire * static_cast<size_t>(roots)) {
    return makeError(collRemoteError, "malformed shrink request (%u roots, %zu bytes)", roots, size);
  }
  r.roots.resize(roots);
  for (uint32_t k = 0; k < roots; ++k) {
    const uint8_t* p = data + textEnd + 4 + kRootWire * static_cast<size_t>(k);
    r.roots[k].block = get32(p);
    if (r.roots[k].block >= maxRoots || (k > 0 && r.roots[k].block <= r.roots[k - 1].block)) {
      return makeError(collRemoteError, "malformed shrink request: root of block %u at %u is out of order or range",
                       r.roots[k].block, k);
    }
    memcpy(&r.roots[k].id, p + 4, sizeof(collUniqueId));
  }
  r.listed.resize(listed);
  for (uint32_t i = 0; i < listed; ++i) {
    const int32_t x = static_cast<int32_t>(get32(data + kRequestHeader + 4 * static_cast<size_t>(i)));
    // Sorted and in range: the leader compares lists with set operations.
    if (x < 0 || x >= parentNranks || (i > 0 && x <= r.listed[i - 1])) {
      return makeError(collRemoteError, "malformed shrink request: excluded rank %d at %u is out of order or range", x,
                       i);
    }
    r.listed[i] = x;
  }
  *out = std::move(r);
  return okStatus();
}

std::vector<uint8_t> encodeShrinkReply(const ShrinkReply& r) {
  std::vector<uint8_t> b;
  const size_t textLen = std::min<size_t>(r.message.size(), kShrinkMaxText);
  b.reserve(kReplyHeader + sizeof(collUniqueId) * r.ids.size() + textLen);
  put32(b, kReplyMagic);
  put32(b, r.seq);
  put32(b, static_cast<uint32_t>(r.code));
  put32(b, r.newNranks);
  put32(b, static_cast<uint32_t>(r.ids.size()));
  put32(b, static_cast<uint32_t>(textLen));
  for (const collUniqueId& id : r.ids) {
    const uint8_t* p = reinterpret_cast<const uint8_t*>(&id);
    b.insert(b.end(), p, p + sizeof(collUniqueId));
  }
  b.insert(b.end(), r.message.begin(), r.message.begin() + static_cast<std::ptrdiff_t>(textLen));
  return b;
}

Status decodeShrinkReply(const uint8_t* data, size_t size, int parentNranks, ShrinkReply* out) {
  if (size < kReplyHeader || get32(data) != kReplyMagic) {
    return makeError(collRemoteError, "malformed shrink answer (%zu bytes; mismatched library versions?)", size);
  }
  ShrinkReply r;
  r.seq = get32(data + 4);
  const uint32_t code = get32(data + 8);
  r.newNranks = get32(data + 12);
  const uint32_t ids = get32(data + 16);
  const uint32_t textLen = get32(data + 20);
  // A success names every root of the new size's rendezvous; an error none.
  const bool success = code == collSuccess;
  const bool sized = success ? r.newNranks >= 1 && r.newNranks <= static_cast<uint32_t>(parentNranks) &&
                                   ids == static_cast<uint32_t>(shrinkRootCount(static_cast<int>(r.newNranks)))
                             : ids == 0;
  if (code >= collNumResults || code == collInProgress || !sized || textLen > kShrinkMaxText ||
      size != kReplyHeader + sizeof(collUniqueId) * static_cast<size_t>(ids) + textLen) {
    return makeError(collRemoteError, "malformed shrink answer (code %u, %u ranks, %u roots, %u text bytes, %zu bytes)",
                     code, r.newNranks, ids, textLen, size);
  }
  r.code = static_cast<collResult_t>(code);
  r.ids.resize(ids);
  for (uint32_t k = 0; k < ids; ++k)
    memcpy(&r.ids[k], data + kReplyHeader + sizeof(collUniqueId) * k, sizeof(collUniqueId));
  r.message.assign(reinterpret_cast<const char*>(data + kReplyHeader + sizeof(collUniqueId) * ids), textLen);
  *out = std::move(r);
  return okStatus();
}

}  // namespace coll
