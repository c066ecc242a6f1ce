// Collective table, nccl-tests' buffer shapes and the exact per-rank checks (see perf_colls.h).
#include "bench/perf_colls.h"

#include <cstdio>
#include <cstring>

#include "bench/perf_data.h"

namespace coll::perf {

namespace {

constexpr unsigned char kPoison = 0xa5;

double ringFactor(int n) { return n > 1 ? 2.0 * (n - 1) / n : 0.0; }
double spreadFactor(int n) { return n > 1 ? static_cast<double>(n - 1) / n : 0.0; }
double unitFactor(int) { return 1.0; }

bool receives(const CollCall& c, int rank) {
  return !((c.coll == PerfColl::Reduce || c.coll == PerfColl::Gather) && rank != c.root);
}

// Index in the sender's data of element k of its send buffer (blocks of all-gather and gather
// carry their place in the result).
size_t inputIndex(const CollCall& c, int rank, size_t k) {
  if (c.coll == PerfColl::AllGather || c.coll == PerfColl::Gather) return static_cast<size_t>(rank) * c.count + k;
  return k;
}

bool inputMatches(const CollCall& c, const void* buf, size_t i, int rank, int nranks, size_t k, uint64_t seed) {
  const CollInfo& info = collInfo(c.coll);
  if (info.reduces) return loadElement(buf, i, c.type) == inputElement(c.type, c.op, rank, nranks, k);
  return patternMatches(buf, i, typeSize(c.type), rank, inputIndex(c, rank, k), seed);
}

bool resultMatches(const CollCall& c, const void* buf, size_t i, int rank, int nranks, size_t j, uint64_t seed) {
  const size_t elt = typeSize(c.type);
  switch (c.coll) {
    case PerfColl::AllReduce:
    case PerfColl::Reduce: return loadElement(buf, i, c.type) == expectedElement(c.type, c.op, nranks, j);
    case PerfColl::ReduceScatter:
      return loadElement(buf, i, c.type) ==
             expectedElement(c.type, c.op, nranks, static_cast<size_t>(rank) * c.count + j);
    case PerfColl::AllGather:
    case PerfColl::Gather: return patternMatches(buf, i, elt, static_cast<int>(j / c.count), j, seed);
    case PerfColl::Broadcast: return patternMatches(buf, i, elt, c.root, j, seed);
    case PerfColl::AlltoAll:
      return patternMatches(buf, i, elt, static_cast<int>(j / c.count),
                            static_cast<size_t>(rank) * c.count + j % c.count, seed);
    case PerfColl::SendRecv: return patternMatches(buf, i, elt, (rank - 1 + nranks) % nranks, j, seed);
    case PerfColl::Scatter: return patternMatches(buf, i, elt, c.root, static_cast<size_t>(rank) * c.count + j, seed);
  }
  return false;
}

void describe(std::string* first, size_t wrong, const char* what, const CollCall& c, int rank, size_t index,
              const void* buf, size_t i) {
  if (wrong != 0 || first == nullptr) return;
  char msg[320];
  const size_t elt = typeSize(c.type);
  unsigned long long bits = 0;
  memcpy(&bits, static_cast<const unsigned char*>(buf) + i * elt, elt);
  snprintf(msg, sizeof(msg), "%s %s %s root %d count %zu, rank %d: %s element %zu wrong (value %.17g, bits 0x%llx)",
           collInfo(c.coll).name, typeName(c.type), collInfo(c.coll).reduces ? opName(c.op) : "none", c.root, c.count,
           rank, what, index, loadElement(buf, i, c.type), bits);
  *first = msg;
}

}  // namespace

const CollInfo kAllColls[9] = {
    {PerfColl::AllReduce, "all_reduce", true, false, false, ringFactor},
    {PerfColl::AllGather, "all_gather", false, false, true, spreadFactor},
    {PerfColl::ReduceScatter, "reduce_scatter", true, false, true, spreadFactor},
    {PerfColl::Broadcast, "broadcast", false, true, false, unitFactor},
    {PerfColl::Reduce, "reduce", true, true, false, unitFactor},
    {PerfColl::AlltoAll, "alltoall", false, false, true, spreadFactor},
    {PerfColl::SendRecv, "sendrecv", false, false, false, unitFactor},
    {PerfColl::Gather, "gather", false, true, true, spreadFactor},
    {PerfColl::Scatter, "scatter", false, true, true, spreadFactor},
};

const CollInfo& collInfo(PerfColl coll) { return kAllColls[static_cast<int>(coll)]; }

bool parseColl(const std::string& name, PerfColl* out) {
  for (const CollInfo& info : kAllColls) {
    if (name == info.name) {
      *out = info.coll;
      return true;
    }
  }
  if (name == "allreduce") {
    *out = PerfColl::AllReduce;
    return true;
  }
  return false;
}

CollShape shapeForCount(PerfColl coll, size_t count, int nranks) {
  const size_t n = static_cast<size_t>(nranks);
  CollShape s;
  s.count = count;
  switch (coll) {
    case PerfColl::AllGather:
    case PerfColl::Gather:
      s.sendCount = count;
      s.recvCount = count * n;
      s.sendInplaceOffset = count;
      break;
    case PerfColl::ReduceScatter:
    case PerfColl::Scatter:
      s.sendCount = count * n;
      s.recvCount = count;
      s.recvInplaceOffset = count;
      break;
    case PerfColl::AlltoAll: s.sendCount = s.recvCount = count * n; break;
    default: s.sendCount = s.recvCount = count; break;
  }
  return s;
}

CollShape shapeForBytes(PerfColl coll, size_t bytes, size_t eltSize, int nranks) {
  size_t count = eltSize ? bytes / eltSize : 0;
  if (collInfo(coll).perRankData) {
    size_t align = eltSize < 16 ? 16 / eltSize : 1;
    count = (count / static_cast<size_t>(nranks)) & ~(align - 1);
  }
  return shapeForCount(coll, count, nranks);
}

double algBytes(PerfColl coll, const CollShape& shape, size_t eltSize, int nranks) {
  double bytes = static_cast<double>(shape.count) * static_cast<double>(eltSize);
  return collInfo(coll).perRankData ? bytes * nranks : bytes;
}

CollCall makeCall(PerfColl coll, const CollShape& shape, collDataType_t type, collRedOp_t op, int root, int rank,
                  bool inPlace, void* sendBuf, void* recvBuf) {
  const size_t elt = typeSize(type);
  CollCall c;
  c.coll = coll;
  c.count = shape.count;
  c.type = type;
  c.op = collInfo(coll).reduces ? op : collSum;
  c.root = collInfo(coll).rooted ? root : -1;
  auto* r = static_cast<unsigned char*>(recvBuf);
  c.send = inPlace ? r + shape.sendInplaceOffset * static_cast<size_t>(rank) * elt : sendBuf;
  c.recv = inPlace ? r + shape.recvInplaceOffset * static_cast<size_t>(rank) * elt : recvBuf;
  return c;
}

void prepareCheck(const CollCall& c, const CollShape& shape, int rank, int nranks, bool inPlace, void* sendBuf,
                  void* recvBuf, uint64_t seed) {
  const size_t elt = typeSize(c.type);
  memset(recvBuf, kPoison, shape.extent() * elt);
  void* in = inPlace ? static_cast<unsigned char*>(recvBuf) + shape.sendInplaceOffset * static_cast<size_t>(rank) * elt
                     : sendBuf;
  if (collInfo(c.coll).reduces) fillInput(in, shape.sendCount, c.type, c.op, rank, nranks);
  else fillPattern(in, shape.sendCount, elt, rank, inputIndex(c, rank, 0), seed);
}

size_t checkCall(const CollCall& c, const CollShape& shape, int rank, int nranks, bool inPlace, const void* sendBuf,
                 const void* recvBuf, uint64_t seed, std::string* firstError) {
  const size_t elt = typeSize(c.type);
  const size_t r = static_cast<size_t>(rank);
  const size_t dst = inPlace ? shape.recvInplaceOffset * r : 0;
  const size_t src = shape.sendInplaceOffset * r;
  const bool gets = receives(c, rank);
  const auto* rb = static_cast<const unsigned char*>(recvBuf);
  size_t wrong = 0;
  for (size_t e = 0; e < shape.extent(); ++e) {
    bool ok;
    const char* what;
    size_t index;
    if (gets && e >= dst && e - dst < shape.recvCount) {
      what = "result";
      index = e - dst;
      ok = resultMatches(c, recvBuf, e, rank, nranks, index, seed);
    } else if (inPlace && e >= src && e - src < shape.sendCount) {
      what = "input (must stay unchanged)";
      index = e - src;
      ok = inputMatches(c, recvBuf, e, rank, nranks, index, seed);
    } else {
      what = "receive-buffer element outside the result (must stay unwritten)";
      index = e;
      ok = true;
      for (size_t b = 0; b < elt; ++b) ok = ok && rb[e * elt + b] == kPoison;
    }
    if (!ok) {
      describe(firstError, wrong, what, c, rank, index, recvBuf, e);
      ++wrong;
    }
  }
  if (!inPlace) {
    for (size_t k = 0; k < shape.sendCount; ++k) {
      if (!inputMatches(c, sendBuf, k, rank, nranks, k, seed)) {
        describe(firstError, wrong, "send-buffer (must stay unchanged)", c, rank, k, sendBuf, k);
        ++wrong;
      }
    }
  }
  return wrong;
}

void expectedRecv(const CollCall& c, const CollShape& shape, int rank, int nranks, bool inPlace, uint64_t seed,
                  void* out) {
  const size_t elt = typeSize(c.type);
  const size_t r = static_cast<size_t>(rank);
  const size_t dst = inPlace ? shape.recvInplaceOffset * r : 0;
  const size_t src = shape.sendInplaceOffset * r;
  const bool gets = receives(c, rank);
  const bool reduces = collInfo(c.coll).reduces;
  auto* o = static_cast<unsigned char*>(out);
  memset(out, kPoison, shape.extent() * elt);
  for (size_t e = 0; e < shape.extent(); ++e) {
    if (gets && e >= dst && e - dst < shape.recvCount) {
      const size_t j = e - dst;
      switch (c.coll) {
        case PerfColl::AllReduce:
        case PerfColl::Reduce: storeElement(out, e, c.type, expectedElement(c.type, c.op, nranks, j)); break;
        case PerfColl::ReduceScatter:
          storeElement(out, e, c.type, expectedElement(c.type, c.op, nranks, r * c.count + j));
          break;
        case PerfColl::AllGather:
        case PerfColl::Gather: fillPattern(o + e * elt, 1, elt, static_cast<int>(j / c.count), j, seed); break;
        case PerfColl::Broadcast: fillPattern(o + e * elt, 1, elt, c.root, j, seed); break;
        case PerfColl::AlltoAll:
          fillPattern(o + e * elt, 1, elt, static_cast<int>(j / c.count), r * c.count + j % c.count, seed);
          break;
        case PerfColl::SendRecv: fillPattern(o + e * elt, 1, elt, (rank - 1 + nranks) % nranks, j, seed); break;
        case PerfColl::Scatter: fillPattern(o + e * elt, 1, elt, c.root, r * c.count + j, seed); break;
      }
    } else if (inPlace && e >= src && e - src < shape.sendCount) {
      const size_t k = e - src;
      if (reduces) storeElement(out, e, c.type, inputElement(c.type, c.op, rank, nranks, k));
      else fillPattern(o + e * elt, 1, elt, rank, inputIndex(c, rank, k), seed);
    }
  }
}

}  // namespace coll::perf
