// <collective>_perf_mpi: the same benchmark loop over Open MPI's collectives, the reference our
// numbers are compared with; the build names the collective (COLL_PERF_COLL). 16-bit and float8
// reductions use user-defined ops; avg is sum then divide; PreMulSum has no MPI counterpart.
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/perf_data.h"
#include "bench/perf_harness.h"

#ifndef COLL_PERF_COLL
#error "COLL_PERF_COLL must name the collective (all_reduce, all_gather, ...)"
#endif
#ifndef COLL_PERF_PROGRAM
#error "COLL_PERF_PROGRAM must name the program"
#endif

namespace {

using namespace coll::perf;

// Narrow floating types reduced in float and rounded once per step, as libcollective does.
enum NarrowKind { kHalf, kBf16, kE4m3, kE5m2, kNarrowKinds };

template <int kKind>
float narrowLoad(const void* p, int i) {
  if constexpr (kKind == kHalf) return halfToFloat(static_cast<const uint16_t*>(p)[i]);
  if constexpr (kKind == kBf16) return bf16ToFloat(static_cast<const uint16_t*>(p)[i]);
  if constexpr (kKind == kE4m3) return fp8e4m3ToFloat(static_cast<const uint8_t*>(p)[i]);
  return fp8e5m2ToFloat(static_cast<const uint8_t*>(p)[i]);
}

template <int kKind>
void narrowStore(void* p, int i, float v) {
  if constexpr (kKind == kHalf) static_cast<uint16_t*>(p)[i] = floatToHalf(v);
  if constexpr (kKind == kBf16) static_cast<uint16_t*>(p)[i] = floatToBf16(v);
  if constexpr (kKind == kE4m3) static_cast<uint8_t*>(p)[i] = floatToFp8e4m3(v);
  if constexpr (kKind == kE5m2) static_cast<uint8_t*>(p)[i] = floatToFp8e5m2(v);
}

// MPI user functions get no context argument: the op and type are template parameters.
template <int kOp, int kKind>
void reduceNarrow(void* in, void* inout, int* len, MPI_Datatype*) {
  for (int i = 0; i < *len; ++i) {
    float x = narrowLoad<kKind>(in, i), y = narrowLoad<kKind>(inout, i);
    float r = kOp == collSum ? x + y : kOp == collProd ? x * y : kOp == collMax ? (x > y ? x : y) : (x < y ? x : y);
    narrowStore<kKind>(inout, i, r);
  }
}

template <int kKind>
void createNarrowOps(MPI_Op* ops) {
  MPI_Op_create(reduceNarrow<collSum, kKind>, 1, &ops[0]);
  MPI_Op_create(reduceNarrow<collProd, kKind>, 1, &ops[1]);
  MPI_Op_create(reduceNarrow<collMax, kKind>, 1, &ops[2]);
  MPI_Op_create(reduceNarrow<collMin, kKind>, 1, &ops[3]);
}

int narrowKind(collDataType_t t) {
  switch (t) {
    case collFloat16: return kHalf;
    case collBfloat16: return kBf16;
    case collFloat8e4m3: return kE4m3;
    case collFloat8e5m2: return kE5m2;
    default: return -1;
  }
}

class MpiBackend : public PerfBackend {
 public:
  MpiBackend() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Type_contiguous(2, MPI_BYTE, &type16_);
    MPI_Type_commit(&type16_);
    createNarrowOps<kHalf>(narrowOps_[kHalf]);
    createNarrowOps<kBf16>(narrowOps_[kBf16]);
    createNarrowOps<kE4m3>(narrowOps_[kE4m3]);
    createNarrowOps<kE5m2>(narrowOps_[kE5m2]);
  }
  ~MpiBackend() override {
    for (auto& row : narrowOps_)
      for (auto& op : row) MPI_Op_free(&op);
    MPI_Type_free(&type16_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "Open MPI"; }

  std::string unsupported(PerfColl, collDataType_t, collRedOp_t op) const override {
    if (op == kPreMulSum) return "MPI has no PreMulSum";
    return {};
  }

  bool run(const CollCall& c, std::string* error) override {
    if (c.count > static_cast<size_t>(INT32_MAX) / static_cast<size_t>(size_)) {
      *error = "count exceeds MPI's int";
      return false;
    }
    const int n = static_cast<int>(c.count);
    const MPI_Datatype dt = mpiType(c.type);
    const size_t bytes = c.count * typeSize(c.type);
    const int kind = narrowKind(c.type);
    const collRedOp_t base = c.op == collAvg ? collSum : c.op;
    const MPI_Op mop = kind >= 0 ? narrowOps_[kind][base] : mpiOp(base);
    const bool inPlace = c.send == c.recv;
    auto* recv = static_cast<char*>(c.recv);
    int rc = MPI_SUCCESS;
    switch (c.coll) {
      case PerfColl::AllReduce:
        rc = MPI_Allreduce(inPlace ? MPI_IN_PLACE : c.send, recv, n, dt, mop, MPI_COMM_WORLD);
        if (c.op == collAvg) divide(recv, c.count, c.type);
        break;
      case PerfColl::Reduce: {
        bool ip = inPlace && rank_ == c.root;
        rc = MPI_Reduce(ip ? MPI_IN_PLACE : c.send, recv, n, dt, mop, c.root, MPI_COMM_WORLD);
        if (c.op == collAvg && rank_ == c.root) divide(recv, c.count, c.type);
        break;
      }
      case PerfColl::ReduceScatter:
        // MPI's in-place reduce-scatter leaves the result at the buffer's start and overwrites
        // input NCCL keeps: reduce into scratch and copy to NCCL's place instead.
        if (c.send == recv - static_cast<size_t>(rank_) * bytes && bytes > 0) {
          if (scratch_.size() < bytes) scratch_.resize(bytes);
          rc = MPI_Reduce_scatter_block(c.send, scratch_.data(), n, dt, mop, MPI_COMM_WORLD);
          memcpy(recv, scratch_.data(), bytes);
        } else {
          rc = MPI_Reduce_scatter_block(c.send, recv, n, dt, mop, MPI_COMM_WORLD);
        }
        if (c.op == collAvg) divide(recv, c.count, c.type);
        break;
      case PerfColl::AllGather: {
        bool ip = c.send == recv + static_cast<size_t>(rank_) * bytes;
        rc = MPI_Allgather(ip ? MPI_IN_PLACE : c.send, n, dt, recv, n, dt, MPI_COMM_WORLD);
        break;
      }
      case PerfColl::Broadcast:
        if (rank_ == c.root && !inPlace && bytes > 0) memcpy(recv, c.send, bytes);
        rc = MPI_Bcast(recv, n, dt, c.root, MPI_COMM_WORLD);
        break;
      case PerfColl::AlltoAll:
        rc = MPI_Alltoall(inPlace ? MPI_IN_PLACE : c.send, n, dt, recv, n, dt, MPI_COMM_WORLD);
        break;
      case PerfColl::SendRecv: {
        int right = (rank_ + 1) % size_, left = (rank_ - 1 + size_) % size_;
        if (inPlace) rc = MPI_Sendrecv_replace(recv, n, dt, right, 0, left, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        else rc = MPI_Sendrecv(c.send, n, dt, right, 0, recv, n, dt, left, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        break;
      }
      case PerfColl::Gather: {
        bool ip = rank_ == c.root && c.send == recv + static_cast<size_t>(rank_) * bytes;
        rc = MPI_Gather(ip ? MPI_IN_PLACE : c.send, n, dt, recv, n, dt, c.root, MPI_COMM_WORLD);
        break;
      }
      case PerfColl::Scatter: {
        bool ip = rank_ == c.root && recv == static_cast<const char*>(c.send) + static_cast<size_t>(rank_) * bytes;
        rc = MPI_Scatter(c.send, n, dt, ip ? MPI_IN_PLACE : recv, n, dt, c.root, MPI_COMM_WORLD);
        break;
      }
    }
    if (rc != MPI_SUCCESS) {
      char msg[MPI_MAX_ERROR_STRING];
      int len = 0;
      MPI_Error_string(rc, msg, &len);
      *error = std::string(msg, len);
      return false;
    }
    return true;
  }

  bool barrier(std::string* error) override {
    if (MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS) return true;
    *error = "MPI_Barrier failed";
    return false;
  }

 private:
  MPI_Datatype mpiType(collDataType_t t) const {
    switch (t) {
      case collInt8: return MPI_INT8_T;
      case collUint8:
      case collFloat8e4m3:
      case collFloat8e5m2: return MPI_UINT8_T;
      case collInt32: return MPI_INT32_T;
      case collUint32: return MPI_UINT32_T;
      case collInt64: return MPI_INT64_T;
      case collUint64: return MPI_UINT64_T;
      case collFloat32: return MPI_FLOAT;
      case collFloat16:
      case collBfloat16: return type16_;
      default: return MPI_DOUBLE;
    }
  }
  static MPI_Op mpiOp(collRedOp_t op) {
    switch (op) {
      case collProd: return MPI_PROD;
      case collMax: return MPI_MAX;
      case collMin: return MPI_MIN;
      default: return MPI_SUM;
    }
  }
  // avg = sum / n: integers truncate toward zero, floats divide in float (narrow types via
  // float, rounded once), as libcollective's avg does.
  void divide(void* buf, size_t count, collDataType_t t) {
    for (size_t i = 0; i < count; ++i) {
      double v = loadElement(buf, i, t);
      if (isFloatType(t)) {
        if (t == collFloat64) storeElement(buf, i, t, v / size_);
        else storeElement(buf, i, t, static_cast<float>(v) / static_cast<float>(size_));
      } else {
        storeElement(buf, i, t, static_cast<double>(static_cast<int64_t>(v) / size_));
      }
    }
  }

  int rank_ = 0, size_ = 1;
  MPI_Datatype type16_;
  MPI_Op narrowOps_[kNarrowKinds][4];
  std::vector<char> scratch_;
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const char* program = COLL_PERF_PROGRAM;
  PerfColl coll = PerfColl::AllReduce;
  int rc = 2;
  if (!parseColl(COLL_PERF_COLL, &coll)) {
    fprintf(stderr, "%s: built for an unknown collective %s\n", program, COLL_PERF_COLL);
  } else {
    PerfOptions opts;
    rc = parsePerfOptions(argc, argv, program, &opts);
    if (rc < 0 && opts.stream) {
      // Not a failure of the run: every rank leaves the same way, without MPI_Abort's noise.
      int rank = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      if (rank == 0) {
        fprintf(stderr,
                "%s: --stream is not supported by the MPI backend (no host streams); "
                "drop --stream, or run %.*s --stream (libcollective)\n",
                program, static_cast<int>(strlen(program) - 4), program);
      }
      MPI_Finalize();
      return 2;
    }
    if (rc < 0 && (opts.compress.enabled || opts.wire)) {
      int rank = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      if (rank == 0) {
        fprintf(stderr,
                "%s: %s is not supported by the MPI backend (MPI has no compressed All-Reduce and no "
                "traffic statistics); run %.*s %s (libcollective) instead\n",
                program, opts.compress.enabled ? "--compress" : "--wire", static_cast<int>(strlen(program) - 4),
                program, opts.compress.enabled ? "--compress ..." : "--wire");
      }
      MPI_Finalize();
      return 2;
    }
    if (rc < 0) {
      MpiBackend backend;
      rc = runPerf(coll, opts, backend);
    }
  }
  if (rc == 2) MPI_Abort(MPI_COMM_WORLD, 2);
  MPI_Finalize();
  return rc;
}
