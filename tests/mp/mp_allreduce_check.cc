// mp_allreduce_check: the multi-process all-reduce battery (public API only). Every dtype and op,
// counts 0/1/7/1009/1048583, in-place and out-of-place, exact results and bit-identical ranks.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/perf_data.h"
#include "collective/collective.h"

namespace {

using namespace coll::perf;

struct Checker {
  collComm_t comm = nullptr;
  int rank = 0, nranks = 1;
  int cases = 0, failures = 0;
  bool commFailed = false;

  bool call(const void* send, void* recv, size_t count, collDataType_t t, collRedOp_t op, const char* what) {
    collResult_t res = collAllReduce(send, recv, count, t, op, comm, nullptr);
    if (res == collSuccess) return true;
    fprintf(stderr, "rank %d: FAIL %s: collAllReduce(count=%zu, %s, %s) returned %s: %s\n", rank, what, count,
            typeName(t), opName(op), collGetErrorString(res), collGetLastError(comm));
    commFailed = true;
    return false;
  }

  // Returns false on a communication error (the rest of the battery cannot run).
  bool exact(size_t count, collDataType_t t, collRedOp_t op, bool inPlace) {
    ++cases;
    size_t bytes = count * typeSize(t);
    std::vector<unsigned char> send(bytes + 64), recv(bytes + 64);
    // Guard bytes after the buffer: the library must not write past count.
    memset(recv.data() + bytes, 0x5a, 64);
    fillInput(recv.data(), count, t, op, rank, nranks);
    if (!inPlace) {
      fillInput(send.data(), count, t, op, rank, nranks);
      memset(recv.data(), 0xa5, bytes);
    }
    const void* src = inPlace ? recv.data() : send.data();
    if (!call(src, recv.data(), count, t, op, inPlace ? "in-place" : "out-of-place")) return false;
    std::string first;
    size_t wrong = checkResult(recv.data(), count, t, op, nranks, &first);
    size_t touched = inPlace ? 0 : checkUnchanged(send.data(), count, t, op, rank, nranks);
    bool guardOk = true;
    for (size_t i = 0; i < 64; ++i) guardOk = guardOk && recv[bytes + i] == 0x5a;
    if (wrong || touched || !guardOk) {
      ++failures;
      fprintf(stderr, "rank %d: FAIL %s count=%zu %s %s: %zu wrong (%s), send buffer changed in %zu, guard %s\n", rank,
              inPlace ? "in-place" : "out-of-place", count, typeName(t), opName(op), wrong,
              first.empty() ? "-" : first.c_str(), touched, guardOk ? "intact" : "OVERWRITTEN");
    }
    return true;
  }

  // Random floating inputs: the result is not exact, but every rank must hold the same bits.
  bool identical(size_t count, collDataType_t t, collRedOp_t op, uint64_t seed) {
    ++cases;
    std::vector<unsigned char> send(count * typeSize(t)), recv(count * typeSize(t));
    fillRandom(send.data(), count, t, rank, seed);
    if (!call(send.data(), recv.data(), count, t, op, "bit-identity")) return false;
    uint64_t h = hashBytes(recv.data(), recv.size()), hmax = 0, hmin = 0;
    if (!call(&h, &hmax, 1, collUint64, collMax, "hash max") || !call(&h, &hmin, 1, collUint64, collMin, "hash min"))
      return false;
    if (hmax != hmin) {
      ++failures;
      fprintf(stderr, "rank %d: FAIL bit-identity count=%zu %s %s: ranks hold different results (hash %016llx)\n", rank,
              count, typeName(t), opName(op), static_cast<unsigned long long>(h));
    }
    return true;
  }
};

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else {
      fprintf(stderr,
              "usage: mp_allreduce_check [--quick]\n"
              "  run under collrun/mpirun/srun; --quick limits the 1048583-element case to a few\n"
              "  (type, op) pairs, for oversubscribed runs with many ranks\n");
      return 2;
    }
  }
  Checker c;
  collResult_t res = collCommInitFromEnv(&c.comm, nullptr);
  if (res != collSuccess) {
    fprintf(stderr, "FAIL: collCommInitFromEnv: %s: %s\n", collGetErrorString(res), collGetLastError(nullptr));
    return 2;
  }
  if (collCommUserRank(c.comm, &c.rank) != collSuccess || collCommCount(c.comm, &c.nranks) != collSuccess) {
    fprintf(stderr, "FAIL: cannot query rank/size\n");
    return 2;
  }
  const size_t counts[] = {0, 1, 7, 1009, 1048583};
  bool ok = true;
  for (size_t count : counts) {
    for (collDataType_t t : kAllTypes) {
      if (t == collFloat8e4m3 || t == collFloat8e5m2) continue;  // mp_collectives_check covers float8
      for (collRedOp_t op : kAllOps) {
        if (count > 1000000 && quick) {
          bool keep = (t == collFloat32 && op == collSum) || (t == collBfloat16 && op == collAvg) ||
                      (t == collInt8 && op == collMax) || (t == collFloat16 && op == collProd);
          if (!keep) continue;
        }
        for (bool inPlace : {false, true}) ok = ok && c.exact(count, t, op, inPlace);
      }
    }
  }
  for (collDataType_t t : {collFloat32, collFloat64, collFloat16, collBfloat16}) {
    for (size_t count : {size_t{1009}, static_cast<size_t>(quick ? 65537 : 1048583)}) {
      ok = ok && c.identical(count, t, collSum, count + 17);
      ok = ok && c.identical(count, t, collAvg, count + 29);
    }
  }
  if (!ok || c.commFailed) {
    collCommAbort(c.comm);
    fprintf(stderr, "rank %d: FAIL: communication error after %d cases\n", c.rank, c.cases);
    return 2;
  }
  res = collCommDestroy(c.comm);
  if (res != collSuccess) {
    fprintf(stderr, "rank %d: FAIL: collCommDestroy: %s\n", c.rank, collGetErrorString(res));
    return 2;
  }
  if (c.failures) {
    fprintf(stderr, "rank %d: FAIL: %d of %d cases wrong\n", c.rank, c.failures, c.cases);
    return 1;
  }
  printf("rank %d of %d: OK: %d cases passed\n", c.rank, c.nranks, c.cases);
  return 0;
}
