// allreduce_perf_mpi: the same benchmark loop over MPI_Allreduce (Open MPI), the reference that
// our numbers are compared with. float16/bfloat16 use user-defined ops; avg is sum then divide.
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/perf_data.h"
#include "bench/perf_harness.h"

namespace {

using coll::perf::bf16ToFloat;
using coll::perf::floatToBf16;
using coll::perf::floatToHalf;
using coll::perf::halfToFloat;

// Which reduction the 16-bit user ops apply (MPI user functions get no context argument).
template <int kOp, bool kBf16>
void reduce16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    float x = kBf16 ? bf16ToFloat(a[i]) : halfToFloat(a[i]);
    float y = kBf16 ? bf16ToFloat(b[i]) : halfToFloat(b[i]);
    float r = kOp == collSum ? x + y : kOp == collProd ? x * y : kOp == collMax ? (x > y ? x : y) : (x < y ? x : y);
    b[i] = kBf16 ? floatToBf16(r) : floatToHalf(r);
  }
}

class MpiBackend : public coll::perf::PerfBackend {
 public:
  MpiBackend() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Type_contiguous(2, MPI_BYTE, &type16_);
    MPI_Type_commit(&type16_);
    MPI_Op_create(reduce16<collSum, false>, 1, &ops16_[0][0]);
    MPI_Op_create(reduce16<collProd, false>, 1, &ops16_[0][1]);
    MPI_Op_create(reduce16<collMax, false>, 1, &ops16_[0][2]);
    MPI_Op_create(reduce16<collMin, false>, 1, &ops16_[0][3]);
    MPI_Op_create(reduce16<collSum, true>, 1, &ops16_[1][0]);
    MPI_Op_create(reduce16<collProd, true>, 1, &ops16_[1][1]);
    MPI_Op_create(reduce16<collMax, true>, 1, &ops16_[1][2]);
    MPI_Op_create(reduce16<collMin, true>, 1, &ops16_[1][3]);
  }
  ~MpiBackend() override {
    for (auto& row : ops16_)
      for (auto& op : row) MPI_Op_free(&op);
    MPI_Type_free(&type16_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "Open MPI"; }

  bool allReduce(const void* send, void* recv, size_t count, collDataType_t type, collRedOp_t op,
                 std::string* error) override {
    if (count > static_cast<size_t>(INT32_MAX)) {
      *error = "count exceeds MPI's int";
      return false;
    }
    bool is16 = type == collFloat16 || type == collBfloat16;
    MPI_Datatype dt = is16 ? type16_ : mpiType(type);
    collRedOp_t base = op == collAvg ? collSum : op;
    MPI_Op mop = is16 ? ops16_[type == collBfloat16][base] : mpiOp(base);
    const void* src = send == recv ? MPI_IN_PLACE : send;
    int rc = MPI_Allreduce(src, recv, static_cast<int>(count), dt, mop, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) {
      char msg[MPI_MAX_ERROR_STRING];
      int len = 0;
      MPI_Error_string(rc, msg, &len);
      *error = std::string(msg, len);
      return false;
    }
    if (op == collAvg) divide(recv, count, type);
    return true;
  }
  bool barrier(std::string* error) override {
    if (MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS) return true;
    *error = "MPI_Barrier failed";
    return false;
  }

 private:
  static MPI_Datatype mpiType(collDataType_t t) {
    switch (t) {
      case collInt8: return MPI_INT8_T;
      case collUint8: return MPI_UINT8_T;
      case collInt32: return MPI_INT32_T;
      case collUint32: return MPI_UINT32_T;
      case collInt64: return MPI_INT64_T;
      case collUint64: return MPI_UINT64_T;
      case collFloat32: return MPI_FLOAT;
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
  // avg = sum / n: integers truncate toward zero, floats divide in float (16-bit types via
  // float, rounded once), as libcollective's avg does.
  void divide(void* buf, size_t count, collDataType_t t) {
    using namespace coll::perf;
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
  MPI_Op ops16_[2][4];
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  coll::perf::PerfOptions opts;
  int rc = coll::perf::parsePerfOptions(argc, argv, "allreduce_perf_mpi", &opts);
  if (rc < 0) {
    MpiBackend backend;
    rc = coll::perf::runAllReducePerf(opts, backend);
  }
  if (rc == 2) MPI_Abort(MPI_COMM_WORLD, 2);
  MPI_Finalize();
  return rc;
}
