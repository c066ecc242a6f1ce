// mp_collectives_check: every collective x dtype x op x root x count, in place and out of place,
// every rank's buffers checked exactly (bench/perf_colls); plus groups: an all-to-all made of
// Send/Recv, and several collectives with a send/recv ring in one group. Public API only.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench/perf_backend_coll.h"
#include "bench/perf_colls.h"
#include "bench/perf_data.h"
#include "collective/collective.h"

namespace {

using namespace coll::perf;

constexpr size_t kGuard = 64;
constexpr unsigned char kGuardByte = 0x5a;

// The buffers of one checked call, with guard bytes after each extent.
struct Buffers {
  std::vector<unsigned char> send, recv;
  size_t bytes = 0;
  explicit Buffers(size_t extentBytes)
      : send(extentBytes + kGuard, 0), recv(extentBytes + kGuard, 0), bytes(extentBytes) {
    memset(send.data() + bytes, kGuardByte, kGuard);
    memset(recv.data() + bytes, kGuardByte, kGuard);
  }
  bool guardsIntact() const {
    for (size_t i = 0; i < kGuard; ++i) {
      if (send[bytes + i] != kGuardByte || recv[bytes + i] != kGuardByte) return false;
    }
    return true;
  }
};

// One prepared call and its buffers (the group tests prepare several before running any).
struct Case {
  CollShape shape;
  Buffers buf;
  CollCall call;
  bool inPlace;
  uint64_t seed;
  Case(PerfColl coll, size_t count, collDataType_t t, collRedOp_t op, int root, bool ip, int rank, int nranks,
       uint64_t sd)
      : shape(shapeForCount(coll, count, nranks)), buf(shape.extent() * typeSize(t)), inPlace(ip), seed(sd) {
    call = makeCall(coll, shape, t, op, root, rank, ip, buf.send.data(), buf.recv.data());
    prepareCheck(call, shape, rank, nranks, ip, buf.send.data(), buf.recv.data(), seed);
  }
  // Number of wrong elements (a broken guard counts as one); describes the first.
  size_t check(int rank, int nranks, std::string* first) const {
    size_t wrong = checkCall(call, shape, rank, nranks, inPlace, buf.send.data(), buf.recv.data(), seed, first);
    if (!buf.guardsIntact()) {
      if (wrong == 0) *first = "bytes written past the end of a buffer";
      ++wrong;
    }
    return wrong;
  }
  std::string label() const {
    char s[160];
    snprintf(s, sizeof(s), "%s %s %s root %d count %zu %s", collInfo(call.coll).name, typeName(call.type),
             collInfo(call.coll).reduces ? opName(call.op) : "none", call.root, call.count,
             inPlace ? "in-place" : "out-of-place");
    return s;
  }
};

struct Battery {
  collComm_t comm = nullptr;
  CollBackend* backend = nullptr;
  int rank = 0, nranks = 1;
  int cases = 0, failures = 0;
  // (collective, premulsum) pairs that returned an error: the rest of them is skipped.
  std::set<std::pair<PerfColl, bool>> broken;

  void fail(const std::string& what, const std::string& why) {
    ++failures;
    fprintf(stderr, "rank %d: FAIL %s: %s\n", rank, what.c_str(), why.c_str());
  }

  void one(PerfColl coll, size_t count, collDataType_t t, collRedOp_t op, int root, bool inPlace) {
    const std::pair<PerfColl, bool> key{coll, op == kPreMulSum};
    if (broken.count(key)) return;
    ++cases;
    Case c(coll, count, t, op, root, inPlace, rank, nranks, count * 977 + static_cast<uint64_t>(t) * 31 + cases);
    std::string err, first;
    if (!backend->run(c.call, &err)) {
      fail(c.label(), "call failed: " + err + " (skipping the rest of " + collInfo(coll).name + ")");
      broken.insert(key);
      return;
    }
    size_t wrong = c.check(rank, nranks, &first);
    if (wrong) fail(c.label(), std::to_string(wrong) + " wrong elements; first: " + first);
  }

  // All-to-all as Send/Recv pairs (self included) in one group, checked as alltoall.
  void alltoallFromP2p(size_t count, collDataType_t t) {
    ++cases;
    Case c(PerfColl::AlltoAll, count, t, collSum, -1, false, rank, nranks, 4242 + count);
    const char* what = "group: all-to-all from Send/Recv";
    const size_t block = count * typeSize(t);
    collResult_t res = collGroupStart();
    for (int peer = 0; peer < nranks && res == collSuccess; ++peer) {
      res = collSend(static_cast<const unsigned char*>(c.call.send) + peer * block, count, t, peer, comm, nullptr);
      if (res == collSuccess)
        res = collRecv(static_cast<unsigned char*>(c.call.recv) + peer * block, count, t, peer, comm, nullptr);
    }
    collResult_t end = collGroupEnd();
    if (res == collSuccess) res = end;
    if (res != collSuccess) return fail(what, collErrorText(res, comm));
    std::string first;
    if (size_t wrong = c.check(rank, nranks, &first)) fail(what, std::to_string(wrong) + " wrong; first: " + first);
  }

  // Several collectives and a send/recv ring queued in one group.
  void mixedGroup() {
    ++cases;
    const char* what = "group: all_reduce + all_gather + broadcast + reduce_scatter + sendrecv";
    std::vector<Case> group;
    group.reserve(5);
    group.emplace_back(PerfColl::AllReduce, 1009, collFloat32, collSum, -1, false, rank, nranks, 1);
    group.emplace_back(PerfColl::AllGather, 7, collInt32, collSum, -1, true, rank, nranks, 2);
    group.emplace_back(PerfColl::Broadcast, 1009, collUint8, collSum, nranks - 1, false, rank, nranks, 3);
    group.emplace_back(PerfColl::ReduceScatter, 7, collBfloat16, collMax, -1, false, rank, nranks, 4);
    group.emplace_back(PerfColl::SendRecv, 1009, collInt64, collSum, -1, false, rank, nranks, 5);
    collResult_t res = collGroupStart();
    std::string err;
    for (Case& c : group) {
      if (res == collSuccess && !backend->run(c.call, &err)) res = collInternalError;
    }
    collResult_t end = collGroupEnd();
    if (res != collSuccess) return fail(what, "queueing failed: " + err);
    if (end != collSuccess) return fail(what, collErrorText(end, comm));
    for (const Case& c : group) {
      std::string first;
      if (size_t wrong = c.check(rank, nranks, &first))
        fail(std::string(what) + ": " + c.label(), std::to_string(wrong) + " wrong; first: " + first);
    }
  }
};

bool parseColls(const std::string& list, std::vector<PerfColl>* out) {
  std::stringstream ss(list);
  std::string name;
  while (std::getline(ss, name, ',')) {
    PerfColl c;
    if (!parseColl(name, &c)) return false;
    out->push_back(c);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, groups = true;
  std::vector<PerfColl> colls;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (strcmp(argv[i], "--no-groups") == 0) {
      groups = false;
    } else if (strcmp(argv[i], "--colls") == 0 && i + 1 < argc && parseColls(argv[++i], &colls)) {
    } else {
      fprintf(stderr,
              "usage: mp_collectives_check [--quick] [--colls all_reduce,broadcast,...] [--no-groups]\n"
              "  run under collrun/mpirun/srun. --quick: a subset of types and no > 1M-element cases\n"
              "  (for oversubscribed runs with many ranks)\n");
      return 2;
    }
  }
  if (colls.empty()) {
    for (const CollInfo& info : kAllColls) colls.push_back(info.coll);
  }
  Battery b;
  collResult_t res = collCommInitFromEnv(&b.comm, nullptr);
  if (res != collSuccess) {
    fprintf(stderr, "FAIL: collCommInitFromEnv: %s\n", collErrorText(res, nullptr).c_str());
    return 2;
  }
  CollBackend backend(b.comm);
  b.backend = &backend;
  b.rank = backend.rank();
  b.nranks = backend.size();

  const std::vector<collDataType_t> quickTypes{collInt8,    collUint32,   collFloat16,
                                               collFloat32, collBfloat16, collFloat8e4m3};
  std::vector<collDataType_t> types(std::begin(kAllTypes), std::end(kAllTypes));
  if (quick) types = quickTypes;
  for (PerfColl coll : colls) {
    const CollInfo& info = collInfo(coll);
    std::vector<int> roots{-1};
    if (info.rooted) roots = b.nranks > 1 ? std::vector<int>{0, b.nranks - 1} : std::vector<int>{0};
    for (collDataType_t t : types) {
      std::vector<collRedOp_t> ops{collSum};
      if (info.reduces) ops.assign(std::begin(kAllOpsPreMul), std::end(kAllOpsPreMul));
      for (collRedOp_t op : ops) {
        for (int root : roots) {
          for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1009}}) {
            for (bool inPlace : {false, true}) b.one(coll, count, t, op, root, inPlace);
          }
        }
      }
    }
  }
  if (!quick) {
    // Large cases (several slices, pipelining) for a few collectives.
    const size_t big = 1048583;
    for (PerfColl coll : colls) {
      for (bool inPlace : {false, true}) {
        if (coll == PerfColl::AllGather) b.one(coll, big / b.nranks, collFloat32, collSum, -1, inPlace);
        if (coll == PerfColl::ReduceScatter) b.one(coll, big / b.nranks, collBfloat16, collSum, -1, inPlace);
        if (coll == PerfColl::Broadcast) b.one(coll, big, collUint8, collSum, b.nranks - 1, inPlace);
        if (coll == PerfColl::Reduce) b.one(coll, big, collFloat32, kPreMulSum, 0, inPlace);
      }
    }
  }
  if (groups) {
    b.alltoallFromP2p(1009, collInt32);
    b.alltoallFromP2p(0, collInt32);
    b.mixedGroup();
  }
  res = b.failures ? collCommAbort(b.comm) : collCommDestroy(b.comm);
  if (res != collSuccess && b.failures == 0) {
    fprintf(stderr, "rank %d: FAIL: collCommDestroy: %s\n", b.rank, collGetErrorString(res));
    return 2;
  }
  if (b.failures) {
    fprintf(stderr, "rank %d: FAIL: %d of %d cases failed\n", b.rank, b.failures, b.cases);
    return 1;
  }
  printf("rank %d of %d: OK: %d cases passed\n", b.rank, b.nranks, b.cases);
  return 0;
}
