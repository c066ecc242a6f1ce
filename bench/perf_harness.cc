// The shared benchmark loop for every collective (see perf_harness.h). Output follows nccl-tests' layout
// column for column so that tables from either tool line up.
#include "bench/perf_harness.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "bench/perf_data.h"

namespace coll::perf {

namespace {

void onAlarm(int) {
  static const char msg[] = "perf: a test exceeded the -T timeout; aborting\n";
  ssize_t ignored = write(STDERR_FILENO, msg, sizeof(msg) - 1);
  (void)ignored;
  _exit(3);
}

void printUsage(FILE* out, const char* program) {
  fprintf(out,
          "usage: %s [options]   (nccl-tests' flags)\n"
          "  -b, --minbytes N      smallest size in bytes (K/M/G suffixes)      [32M]\n"
          "  -e, --maxbytes N      largest size                                 [32M]\n"
          "  -f, --stepfactor F    multiply the size by F each step (F > 1)\n"
          "  -i, --stepbytes N     else add N bytes each step                   [1M]\n"
          "  -n, --iters N         timed iterations per size                    [20]\n"
          "  -w, --warmup_iters N  warm-up iterations per size                  [5]\n"
          "  -c, --check 0|1       verify results on separate check iterations  [1]\n"
          "  -o, --op OP           sum prod max min avg premulsum (mulsum) or all [sum]\n"
          "                        (reducing collectives; the others print none)\n"
          "  -d, --datatype T      int8 uint8 int32 uint32 int64 uint64 half/float16 bfloat16\n"
          "                        float/float32 double/float64 f8e4m3 f8e5m2 or all [float]\n"
          "  -r, --root R          root of broadcast/reduce/gather/scatter; -1 = every rank [0]\n"
          "  -a, --average 0..3    time over ranks: 0 rank 0, 1 mean, 2 min, 3 max [1]\n"
          "  -T, --timeout SEC     abort a test that runs longer than SEC        [0 = none]\n"
          "  -z, --blocking 0|1    with --stream or device buffers: 1 synchronizes after every\n"
          "                        call, 0 once after the timed loop; host calls without\n"
          "                        --stream always block [--stream 1, device 0]\n"
          "      --stream          queue the calls on a host stream (libcollective only); the\n"
          "                        time columns are stream times, and per size an overlap line\n"
          "                        compares the collective alone (comm), a calibrated busy loop\n"
          "                        alone (comp) and both at once (both): overlap =\n"
          "                        (comm + comp - both) / min(comm, comp) in [0,1], 1 = hidden\n"
          "  -G, --device 0|1      1: buffers in device memory (collMemAlloc on device\n"
          "                        local rank %% device count, calls on a CUDA stream per rank,\n"
          "                        the check counted on the device); 0: host memory\n"
          "                        [1 when a CUDA device is present, else 0]\n"
          "      --host            host memory (as -G 0)\n"
          "  -t, -g N              one thread, one GPU per process (must be 1)\n"
          "      --compress SPEC   all_reduce through collAllReduceCompressed (libcollective):\n"
          "                        SPEC = int4[:B][:stochastic][:feedback][:threshold], B block\n"
          "                        size 32/64/128/256 [64]; feedback = a residual buffer (error\n"
          "                        feedback); threshold = COLL_COMPRESS_MIN_BYTES decides which\n"
          "                        sizes compress (else every size does). algbw/busbw count the\n"
          "                        uncompressed size; extra columns wire(B), wire%%, relerr; #wrong\n"
          "                        counts elements beyond the format's tolerance, not inexact ones\n"
          "      --wire            extra columns: bytes sent per rank per call (wire(B)) and their\n"
          "                        share of an uncompressed ring's 2(p-1)/p*size (wire%%)\n"
          "      --per-call        also time each out-of-place timed call alone: per size a line\n"
          "                        '# calls' with call 1, call 2 and the median of calls 3..n\n"
          "                        (each call ends when its last rank returns; with -w 0, call 1\n"
          "                        is the first of that size: the cold start)\n"
          "      --json FILE       also write the results as JSON (rank 0)\n"
          "  -h, --help            this text\n",
          program);
}

const char* formatTime(double us, char* buf, size_t len) {
  if (us >= 10000.0) snprintf(buf, len, "%7.0f", us);
  else if (us >= 100.0) snprintf(buf, len, "%7.1f", us);
  else snprintf(buf, len, "%7.2f", us);
  return buf;
}

struct Placement {
  double timeUs = 0;
  double algBw = 0;
  double busBw = 0;
  double wrong = -1;   // -1 = not checked
  double relErr = -1;  // --compress: ||out - exact|| / ||exact||, the worst rank; -1 = not checked
};

// --stream: per-call times of the out-of-place collective and of the computation, alone and together.
struct Overlap {
  double commUs = -1;  // -1 = not measured
  double compUs = 0;
  double bothUs = 0;
  double fraction = 0;
};

struct Row {
  CollShape shape;
  collDataType_t type;
  collRedOp_t op;
  int root;  // -1 when the collective has none
  Placement oop, ip;
  Overlap overlap;
  double wireBytes = -1;     // --wire: mean over ranks of the bytes one out-of-place call sent; -1 = none
  double fallbackCalls = 0;  // --compress: timed calls that ran uncompressed (below minBytes)
  // --per-call: out-of-place call 1, call 2 and the median of calls 3..n (us); -1 = not measured.
  double call1Us = -1, call2Us = -1, steadyUs = -1;
  double faults1 = -1, faults2 = -1;  // minor page faults in calls 1 and 2, summed over ranks
  size_t bytes() const { return shape.extent() * typeSize(type); }
};

struct AlignedFree {
  void operator()(void* p) const { free(p); }
};

// The computation overlapped with a queued collective: dot products over a private buffer (half of
// a typical L2, so it is CPU work rather than a second memory stream), calibrated once per process.
class BusyLoop {
 public:
  BusyLoop() : a_(kElems), b_(kElems) {
    for (size_t i = 0; i < kElems; ++i) {
      a_[i] = 1.0 + static_cast<double>(i % 7) * 0.25;
      b_[i] = 0.5 + static_cast<double>(i % 5) * 0.125;
    }
  }

  // Microseconds of one unit, from runs of at least 20 ms (best of three, to skip a preemption).
  void calibrate() {
    double best = 0;
    for (int round = 0; round < 3; ++round) {
      size_t units = 0;
      auto t0 = std::chrono::steady_clock::now();
      double us = 0;
      do {
        run(16);
        units += 16;
        us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      } while (us < 20000.0);
      double perUnit = us / static_cast<double>(units);
      if (best == 0 || perUnit < best) best = perUnit;
    }
    unitUs_ = best;
  }

  size_t unitsFor(double us) const {
    double n = unitUs_ > 0 ? us / unitUs_ : 1;
    return n < 1 ? 1 : static_cast<size_t>(n + 0.5);
  }

  void run(size_t units) {
    for (size_t u = 0; u < units; ++u) {
      double sum = 0;
      for (size_t i = 0; i < kElems; ++i) sum += a_[i] * b_[i];
      sink_ = sum;
    }
  }

 private:
  static constexpr size_t kElems = 8192;
  std::vector<double> a_, b_;
  volatile double sink_ = 0;  // keeps the sums from being optimized away
  double unitUs_ = 0;
};

void jsonEscape(FILE* f, const std::string& s) {
  fputc('"', f);
  for (char c : s) {
    if (c == '"' || c == '\\') fputc('\\', f);
    if (static_cast<unsigned char>(c) < 0x20) continue;
    fputc(c, f);
  }
  fputc('"', f);
}

class Runner {
 public:
  Runner(PerfColl coll, const PerfOptions& opts, PerfBackend& backend, PerfDevice* device)
      : coll_(coll), info_(collInfo(coll)), opts_(opts), be_(backend), dev_(device) {
    blocking_ = opts.blocking >= 0 ? opts.blocking : (device != nullptr ? 0 : 1);
  }

  ~Runner() {
    if (dev_ != nullptr) {
      std::string ignored;
      (void)dev_->synchronize(&ignored);
      for (void* p : {send_, recv_, wantSend_, wantRecv_, deviceResidual_}) {
        if (p != nullptr) dev_->release(p);
      }
    } else {
      free(send_);
      free(recv_);
    }
  }

  int run() {
    rank_ = be_.rank();
    nranks_ = be_.size();
    if (info_.rooted && opts_.root >= nranks_) {
      if (rank_ == 0) fprintf(stderr, "%s: root %d is not a rank (%d ranks)\n", info_.name, opts_.root, nranks_);
      return 2;
    }
    showWire_ = opts_.wire || opts_.compress.enabled;
    if (opts_.compress.enabled && coll_ != PerfColl::AllReduce) {
      if (rank_ == 0) fprintf(stderr, "%s: --compress applies to all_reduce only\n", info_.name);
      return 2;
    }
    PerfTraffic probe;
    if (showWire_ && !be_.traffic(&probe)) {
      if (rank_ == 0) {
        fprintf(stderr, "%s: --wire and --compress need traffic statistics, which the %s backend does not give\n",
                info_.name, be_.name());
      }
      return 2;
    }
    compression_ = compressionConfig(opts_.compress);
    if (opts_.stream) {
      // Decided before any communication so that every rank leaves the same way.
      std::string why;
      if (!be_.openStream(&why)) {
        if (rank_ == 0) fprintf(stderr, "%s: --stream is not supported: %s\n", info_.name, why.c_str());
        return 2;
      }
      busy_.calibrate();
    }
    if (dev_ != nullptr && opts_.stream) {
      if (rank_ == 0) fprintf(stderr, "%s: --stream takes host buffers: add --host (or -G 0)\n", info_.name);
      return 2;
    }
    if (dev_ != nullptr && opts_.check) {
      // Decided once; a driver without the kernels' image (no nvcc at build time) checks on the host.
      std::string why;
      checkOnDevice_ = dev_->canCountOnDevice(&why);
      if (!checkOnDevice_) hostCheckWhy_ = why;
    }
    if (!printPreamble()) return 2;
    size_t bufBytes = std::max<size_t>(opts_.maxBytes, 64);
    bufBytes = (bufBytes + 4095) & ~size_t{4095};
    if (dev_ != nullptr) {
      // Device buffers, and host images of them for preparing and (without kernels) checking.
      std::string err;
      if (!dev_->alloc(bufBytes, &send_, &err) || !dev_->alloc(bufBytes, &recv_, &err) ||
          (opts_.check && checkOnDevice_ &&
           (!dev_->alloc(bufBytes, &wantSend_, &err) || !dev_->alloc(bufBytes, &wantRecv_, &err)))) {
        fprintf(stderr, "rank %d: cannot allocate device buffers of %zu bytes: %s\n", rank_, bufBytes, err.c_str());
        return 2;
      }
      hostSend_.reset(aligned_alloc(4096, bufBytes));
      hostRecv_.reset(aligned_alloc(4096, bufBytes));
      if (!hostSend_ || !hostRecv_) {
        fprintf(stderr, "rank %d: cannot allocate 2 x %zu bytes\n", rank_, bufBytes);
        return 2;
      }
      memset(hostSend_.get(), 0, bufBytes);
      if (!dev_->upload(send_, hostSend_.get(), bufBytes, &err) || !dev_->upload(recv_, hostSend_.get(), bufBytes, &err)) {
        fprintf(stderr, "rank %d: clearing the device buffers failed: %s\n", rank_, err.c_str());
        return 2;
      }
    } else {
      send_ = aligned_alloc(4096, bufBytes);
      recv_ = aligned_alloc(4096, bufBytes);
      if (send_ == nullptr || recv_ == nullptr) {
        fprintf(stderr, "rank %d: cannot allocate 2 x %zu bytes\n", rank_, bufBytes);
        return 2;
      }
      memset(send_, 0, bufBytes);
      memset(recv_, 0, bufBytes);
    }
    // Up to bufBytes / 2 elements (16-bit types), one float of residual each; with device buffers
    // the residual is device memory too (the call refuses a mix), and this one stays zero as the
    // source that clears it.
    if (opts_.compress.feedback) {
      residual_.assign(bufBytes / 2, 0.0f);
      std::string err;
      if (dev_ != nullptr && (!dev_->alloc(bufBytes * 2, &deviceResidual_, &err) ||
                              !dev_->upload(deviceResidual_, residual_.data(), bufBytes * 2, &err))) {
        fprintf(stderr, "rank %d: cannot allocate the device residual of %zu bytes: %s\n", rank_, bufBytes * 2,
                err.c_str());
        return 2;
      }
    }
    if (opts_.timeoutSec > 0) signal(SIGALRM, onAlarm);

    // Collectives without an op run once per type (nccl-tests prints "none").
    const std::vector<collRedOp_t> noOp{collSum};
    const std::vector<collRedOp_t>& ops = info_.reduces ? opts_.ops : noOp;
    int firstRoot = -1, lastRoot = -1;
    if (info_.rooted) {
      firstRoot = opts_.root < 0 ? 0 : opts_.root;
      lastRoot = opts_.root < 0 ? nranks_ - 1 : opts_.root;
    }
    for (collDataType_t type : opts_.types) {
      for (collRedOp_t op : ops) {
        std::string why = be_.unsupported(coll_, type, info_.reduces ? op : collSum);
        if (why.empty() && opts_.compress.enabled) why = compressUnsupported(type, op);
        if (!why.empty()) {
          if (rank_ == 0)
            printf("# skipping %s %s on %s: %s\n", typeName(type), info_.reduces ? opName(op) : "none", be_.name(),
                   why.c_str());
          continue;
        }
        for (int root = firstRoot; root <= lastRoot; ++root) {
          for (size_t bytes = opts_.minBytes; bytes <= opts_.maxBytes;) {
            if (opts_.timeoutSec > 0) alarm(static_cast<unsigned>(opts_.timeoutSec));
            Row row{shapeForBytes(coll_, bytes, typeSize(type), nranks_), type, op, root, {}, {}, {}};
            if (!runOne(&row)) return 2;
            if (opts_.timeoutSec > 0) alarm(0);
            printRow(row);
            rows_.push_back(row);
            size_t next = opts_.stepFactor > 1 ? static_cast<size_t>(static_cast<double>(bytes) * opts_.stepFactor)
                                               : bytes + opts_.stepBytes;
            if (next <= bytes) break;  // -i 0, or a factor too small to move
            bytes = next;
          }
        }
      }
    }
    return printFooter();
  }

 private:
  static std::string compressUnsupported(collDataType_t type, collRedOp_t op) {
    if (type != collFloat32 && type != collFloat16 && type != collBfloat16) {
      return "compression takes float32, float16 and bfloat16";
    }
    if (op != collSum && op != collAvg) return "compression supports sum and avg";
    return {};
  }

  bool clearResidual(size_t count) {
    if (residual_.empty()) return true;
    if (deviceResidual_ == nullptr) {
      std::fill(residual_.begin(), residual_.begin() + static_cast<long>(count), 0.0f);
      return true;
    }
    std::string err;
    if (!dev_->upload(deviceResidual_, residual_.data(), count * sizeof(float), &err)) {
      return fail("clearing the device residual", err);
    }
    return true;
  }

  bool fail(const std::string& what, const std::string& error) {
    fprintf(stderr, "rank %d: %s failed: %s\n", rank_, what.c_str(), error.c_str());
    return false;
  }

  // Reduces a per-rank value to one (sum, or per -a for times) with an all-reduce of a double.
  bool reduceDouble(double local, collRedOp_t op, double* out) {
    double in = local, res = 0;
    std::string err;
    if (!be_.allReduce(&in, &res, 1, collFloat64, op, &err)) return fail("all-reduce of a statistic", err);
    *out = res;
    return true;
  }

  bool reduceTime(double localUs, double* out) {
    switch (opts_.average) {
      case 0: return reduceDouble(rank_ == 0 ? localUs : 0.0, collSum, out);
      case 2: return reduceDouble(localUs, collMin, out);
      case 3: return reduceDouble(localUs, collMax, out);
      default: {
        double sum = 0;
        if (!reduceDouble(localUs, collSum, &sum)) return false;
        *out = sum / nranks_;
        return true;
      }
    }
  }

  // One call: blocking, or queued on the host stream with --stream, or on the CUDA stream with
  // device buffers (then syncStream() completes it).
  bool issue(const CollCall& call, std::string* err) {
    if (dev_ != nullptr) return be_.enqueueDevice(call, dev_->stream(), err);
    return opts_.stream ? be_.enqueue(call, err) : be_.run(call, err);
  }

  bool syncStream(std::string* err) {
    if (dev_ != nullptr) return dev_->synchronize(err) && be_.synchronize(err);
    return !opts_.stream || be_.synchronize(err);
  }
  bool queued() const { return dev_ != nullptr || opts_.stream; }

  CollCall callFor(const Row& row, bool inPlace) {
    CollCall c = makeCall(coll_, row.shape, row.type, row.op, row.root, rank_, inPlace, send_, recv_);
    if (opts_.compress.enabled) {
      c.compress = &compression_;
      c.residual = deviceResidual_ != nullptr ? static_cast<float*>(deviceResidual_)
                   : residual_.empty()        ? nullptr
                                              : residual_.data();
    }
    return c;
  }

  // Bytes this rank sent per timed call: from the compressed calls' own counters when all of them
  // ran compressed, else everything the calls sent (uncompressed fallbacks, or --wire alone).
  bool wirePerCall(const PerfTraffic& a, const PerfTraffic& b, Row* row) {
    const double iters = std::max(opts_.iters, 1);
    const unsigned long long calls = b.compressedCalls - a.compressedCalls;
    const double local =
        opts_.compress.enabled && calls > 0 && calls == static_cast<unsigned long long>(opts_.iters)
            ? static_cast<double>(b.compressedWireBytes - a.compressedWireBytes) / static_cast<double>(calls)
            : static_cast<double>(b.wireBytes - a.wireBytes) / iters;
    double sum = 0;
    if (!reduceDouble(local, collSum, &sum)) return false;
    row->wireBytes = sum / nranks_;
    return reduceDouble(static_cast<double>(b.uncompressedFallbacks - a.uncompressedFallbacks), collMax,
                        &row->fallbackCalls);
  }

  bool timed(Row& row, bool inPlace, Placement* p) {
    std::string err;
    const CollCall call = callFor(row, inPlace);
    PerfTraffic before, after;
    const bool countWire = showWire_ && !inPlace;
    for (int i = 0; i < opts_.warmup; ++i) {
      if (!issue(call, &err)) return fail(std::string("warm-up ") + info_.name, err);
    }
    if (!syncStream(&err)) return fail(std::string("warm-up ") + info_.name, err);
    if (!be_.barrier(&err)) return fail("barrier", err);
    if (countWire) (void)be_.traffic(&before);
    const bool perCall = opts_.perCall && !inPlace;
    // Per call: when this rank returned from it (the clock is the machine's monotonic one, shared
    // by every rank of a host), slot 0 the loop's start.
    if (perCall) {
      callEnds_.assign(static_cast<size_t>(opts_.iters) + 1, 0.0);
      callFaults_.assign(callEnds_.size(), 0.0);
    }
    auto t0 = std::chrono::steady_clock::now();
    if (perCall) callEnds_[0] = usSinceEpoch(t0), callFaults_[0] = minorFaults();
    for (int i = 0; i < opts_.iters; ++i) {
      if (!issue(call, &err)) return fail(std::string("timed ") + info_.name, err);
      if ((blocking_ || perCall) && queued() && !syncStream(&err)) return fail(std::string("timed ") + info_.name, err);
      if (perCall) {
        callEnds_[static_cast<size_t>(i) + 1] = usSinceEpoch(std::chrono::steady_clock::now());
        callFaults_[static_cast<size_t>(i) + 1] = minorFaults();
      }
    }
    if (!syncStream(&err)) return fail(std::string("timed ") + info_.name, err);
    auto t1 = std::chrono::steady_clock::now();
    if (perCall && !perCallTimes(&row)) return false;
    if (countWire) (void)be_.traffic(&after);
    double us = std::chrono::duration<double, std::micro>(t1 - t0).count() / std::max(opts_.iters, 1);
    if (countWire && !wirePerCall(before, after, &row)) return false;
    if (!reduceTime(us, &p->timeUs)) return false;
    double bytes = algBytes(coll_, row.shape, typeSize(row.type), nranks_);
    p->algBw = p->timeUs > 0 ? bytes / (p->timeUs * 1e-6) / 1e9 : 0;
    p->busBw = p->algBw * info_.busFactor(nranks_);
    return true;
  }

  static double usSinceEpoch(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count();
  }

  // This process's minor page faults so far (every thread's: a library's helper threads too).
  static double minorFaults() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_minflt);
  }

  // --per-call: call i ends when its last rank returns from it; its time is from the end of call
  // i-1 (the loop's start, the latest rank's, for call 1). Steady state: the median of calls 3..n.
  // Page faults: the sum over ranks of the minor faults taken during calls 1 and 2.
  bool perCallTimes(Row* row) {
    std::vector<double> ends(callEnds_.size());
    std::string err;
    if (!be_.allReduce(callEnds_.data(), ends.data(), ends.size(), collFloat64, collMax, &err))
      return fail("all-reduce of the call times", err);
    if (callFaults_.size() >= 3) {
      const double mine[2] = {callFaults_[1] - callFaults_[0], callFaults_[2] - callFaults_[1]};
      double all[2] = {0, 0};
      if (!be_.allReduce(mine, all, 2, collFloat64, collSum, &err)) return fail("all-reduce of the faults", err);
      row->faults1 = all[0], row->faults2 = all[1];
    }
    std::vector<double> each;
    for (size_t i = 1; i < ends.size(); ++i) each.push_back(ends[i] - ends[i - 1]);
    if (each.size() >= 1) row->call1Us = each[0];
    if (each.size() >= 2) row->call2Us = each[1];
    if (each.size() >= 3) {
      std::vector<double> rest(each.begin() + 2, each.end());
      std::sort(rest.begin(), rest.end());
      const size_t m = rest.size() / 2;
      row->steadyUs = rest.size() % 2 ? rest[m] : (rest[m - 1] + rest[m]) / 2;
    }
    return true;
  }

  // --compress: one call on gradient-like inputs (a zero residual), checked against the float64
  // reference within the format's tolerance (perf_compress.h); every rank must hold the same bits
  // and, out of place, an untouched send buffer.
  bool verifyCompressed(const Row& row, bool inPlace, Placement* p) {
    std::string err;
    const CollCall call = callFor(row, inPlace);
    const size_t count = row.shape.count, bytes = count * typeSize(row.type);
    const uint64_t seed = row.bytes() * 131 + static_cast<uint64_t>(row.type) * 7 + (inPlace ? 1 : 0);
    // Device buffers: prepared and checked in their host images (hostSend_, hostRecv_).
    void* send = dev_ != nullptr ? hostSend_.get() : send_;
    void* recv = dev_ != nullptr ? hostRecv_.get() : recv_;
    void* in = inPlace ? recv : send;
    fillCompressInput(in, count, row.type, rank_, seed);
    if (!inPlace) memset(recv, 0xa5, bytes);
    if (dev_ != nullptr &&
        (!dev_->upload(recv_, recv, bytes, &err) || (!inPlace && !dev_->upload(send_, send, bytes, &err))))
      return fail("uploading the check's inputs", err);
    if (!clearResidual(count)) return false;
    if (!issue(call, &err) || !syncStream(&err)) return fail(std::string("check ") + info_.name, err);
    if (dev_ != nullptr &&
        (!dev_->download(recv, recv_, bytes, &err) || (!inPlace && !dev_->download(send, send_, bytes, &err))))
      return fail("downloading the result", err);
    CompressCheck c =
        checkCompressed(static_cast<const void*>(recv), count, row.type, row.op, nranks_, opts_.compress, seed);
    size_t wrong = c.wrong;
    if (wrong > 0) {
      fprintf(stderr, "rank %d: %s: %zu elements beyond the tolerance; first: %s\n", rank_,
              inPlace ? "in-place" : "out-of-place", wrong, c.firstError.c_str());
    }
    if (!inPlace) {
      std::vector<unsigned char> fresh(bytes);
      fillCompressInput(fresh.data(), count, row.type, rank_, seed);
      if (bytes > 0 && memcmp(fresh.data(), send, bytes) != 0) {
        fprintf(stderr, "rank %d: out-of-place: the send buffer changed\n", rank_);
        ++wrong;
      }
    }
    const unsigned long long h = hashBytes(recv, bytes);
    unsigned long long hmax = 0, hmin = 0;
    if (!be_.allReduce(&h, &hmax, 1, collUint64, collMax, &err) ||
        !be_.allReduce(&h, &hmin, 1, collUint64, collMin, &err))
      return fail("all-reduce of a result hash", err);
    if (hmax != hmin) {
      fprintf(stderr, "rank %d: %s: ranks hold different results (hash %016llx)\n", rank_,
              inPlace ? "in-place" : "out-of-place", h);
      ++wrong;
    }
    if (!reduceDouble(c.relError, collMax, &p->relErr)) return false;
    return reduceDouble(static_cast<double>(wrong), collSum, &p->wrong);
  }

  // Device buffers: the inputs prepared on the host and uploaded; after the call the expected
  // buffers are uploaded once and the mismatches counted on the device (deviceCountMismatches),
  // or, without the device kernels, the buffers downloaded and checked on the host.
  bool verifyDevice(const CollCall& call, const Row& row, bool inPlace, uint64_t seed, size_t* wrong,
                    std::string* first) {
    std::string err;
    const size_t elt = typeSize(row.type);
    const size_t recvBytes = row.shape.extent() * elt, sendBytes = row.shape.sendCount * elt;
    void* hs = hostSend_.get();
    void* hr = hostRecv_.get();
    prepareCheck(call, row.shape, rank_, nranks_, inPlace, hs, hr, seed);
    if (!dev_->upload(recv_, hr, recvBytes, &err) || (!inPlace && !dev_->upload(send_, hs, sendBytes, &err)))
      return fail("uploading the check's inputs", err);
    if (!issue(call, &err) || !syncStream(&err)) return fail(std::string("check ") + info_.name, err);
    if (checkOnDevice_) {
      expectedRecv(call, row.shape, rank_, nranks_, inPlace, seed, hr);
      unsigned long long bad = 0, badSend = 0;
      if (!dev_->upload(wantRecv_, hr, recvBytes, &err) ||
          !dev_->countMismatches(recv_, wantRecv_, row.shape.extent(), row.type, &bad, &err))
        return fail("counting mismatches on the device", err);
      if (!inPlace && (!dev_->upload(wantSend_, hs, sendBytes, &err) ||
                       !dev_->countMismatches(send_, wantSend_, row.shape.sendCount, row.type, &badSend, &err)))
        return fail("counting mismatches on the device", err);
      *wrong = static_cast<size_t>(bad + badSend);
      if (*wrong == 0) return true;
      // Wrong elements: describe the first as the host check does.
      prepareCheck(call, row.shape, rank_, nranks_, inPlace, hs, hr, seed);
    }
    if (!dev_->download(hr, recv_, recvBytes, &err) || (!inPlace && !dev_->download(hs, send_, sendBytes, &err)))
      return fail("downloading the result", err);
    size_t hostWrong = checkCall(call, row.shape, rank_, nranks_, inPlace, hs, hr, seed, first);
    if (!checkOnDevice_) *wrong = hostWrong;
    return true;
  }

  // One separate call on fresh inputs; every rank checks its whole receive (and send) buffer.
  bool verify(const Row& row, bool inPlace, Placement* p) {
    if (opts_.compress.enabled) return verifyCompressed(row, inPlace, p);
    std::string err, first;
    const CollCall call = callFor(row, inPlace);
    const uint64_t seed = row.bytes() * 131 + static_cast<uint64_t>(row.type) * 7 + (inPlace ? 1 : 0);
    size_t wrong = 0;
    if (dev_ != nullptr) {
      if (!verifyDevice(call, row, inPlace, seed, &wrong, &first)) return false;
    } else {
      prepareCheck(call, row.shape, rank_, nranks_, inPlace, send_, recv_, seed);
      if (!issue(call, &err) || !syncStream(&err)) return fail(std::string("check ") + info_.name, err);
      wrong = checkCall(call, row.shape, rank_, nranks_, inPlace, send_, recv_, seed, &first);
    }
    if (wrong > 0) {
      fprintf(stderr, "rank %d: %s: %zu wrong; first: %s\n", rank_, inPlace ? "in-place" : "out-of-place", wrong,
              first.c_str());
    }
    return reduceDouble(static_cast<double>(wrong), collSum, &p->wrong);
  }

  // Per call, every rank in step: (a) the collective queued and synchronized, (b) the busy loop
  // sized to take (a), (c) the collective queued, the busy loop, then synchronize.
  bool measureOverlap(const Row& row, Overlap* o) {
    std::string err;
    const CollCall call = callFor(row, false);
    const int n = std::max(opts_.iters, 1);
    auto phase = [&](int mode, double* localUs) {
      if (!be_.barrier(&err)) return fail("barrier", err);
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < n; ++i) {
        if (mode != 1 && !be_.enqueue(call, &err)) return fail(std::string("overlapped ") + info_.name, err);
        if (mode != 0) busy_.run(units_);
        if (mode != 1 && !be_.synchronize(&err)) return fail(std::string("overlapped ") + info_.name, err);
      }
      *localUs = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / n;
      return true;
    };
    double comm = 0, comp = 0, both = 0;
    if (!phase(0, &comm)) return false;
    units_ = busy_.unitsFor(comm);
    if (!phase(1, &comp) || !phase(2, &both)) return false;
    if (!reduceTime(comm, &o->commUs) || !reduceTime(comp, &o->compUs) || !reduceTime(both, &o->bothUs)) return false;
    double shorter = std::min(o->commUs, o->compUs);
    double f = shorter > 0 ? (o->commUs + o->compUs - o->bothUs) / shorter : 0;
    o->fraction = std::clamp(f, 0.0, 1.0);
    return true;
  }

  bool runOne(Row* row) {
    if (!clearResidual(row->shape.count)) return false;
    if (!timed(*row, false, &row->oop)) return false;
    // After timed(): its warm-up calls keep connection set-up out of the overlap figures.
    if (opts_.stream && !measureOverlap(*row, &row->overlap)) return false;
    if (opts_.check && !verify(*row, false, &row->oop)) return false;
    if (!timed(*row, true, &row->ip)) return false;
    if (opts_.check && !verify(*row, true, &row->ip)) return false;
    return true;
  }

  bool printPreamble() {
    // Gather "pid host" of every rank through a byte-wise sum (each rank fills only its slot).
    constexpr size_t kSlot = 96;
    std::vector<unsigned char> mine(kSlot * nranks_, 0), all(kSlot * nranks_, 0);
    char host[64] = {};
    gethostname(host, sizeof(host) - 1);
    // "pid host|label": the label is the rank's device ("device 0 [0000:01:00.0]") or "[host]".
    const std::string label = dev_ != nullptr ? dev_->label() : std::string("device  0 [host]");
    snprintf(reinterpret_cast<char*>(&mine[kSlot * rank_]), kSlot, "%d %s|%s", static_cast<int>(getpid()), host,
             label.c_str());
    std::string err;
    if (!be_.allReduce(mine.data(), all.data(), all.size(), collUint8, collSum, &err))
      return fail("gathering rank info", err);
    if (rank_ != 0) return true;
    printf("# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: ", opts_.minBytes, opts_.maxBytes);
    if (opts_.stepFactor > 1) printf("%g(factor)", opts_.stepFactor);
    else printf("%zu(bytes)", opts_.stepBytes);
    printf(" warmup iters: %d iters: %d agg iters: 1 validation: %d graph: 0\n", opts_.warmup, opts_.iters,
           opts_.check);
    if (opts_.compress.enabled) {
      printf(
          "# compress: %s through collAllReduceCompressed (%s); algbw/busbw on the uncompressed size\n"
          "#   wire(B) = bytes one rank sends per call (mean over ranks, collCommGetStats), wire%% = of an\n"
          "#   uncompressed ring's 2(p-1)/p*size; relerr = ||out - exact|| / ||exact|| vs float64 (worst rank);\n"
          "#   #wrong = elements beyond the format's tolerance, ranks not bit-identical, send buffer changed\n",
          compressSpecName(opts_.compress).c_str(),
          opts_.compress.libraryThreshold ? "minBytes 0: COLL_COMPRESS_MIN_BYTES applies"
                                          : "minBytes 1: every size compressed");
    } else if (showWire_) {
      printf(
          "# wire: wire(B) = bytes one rank sends per call (mean over ranks), wire%% = of an uncompressed\n"
          "#   ring's 2(p-1)/p*size (shared-memory windows of the one-host direct algorithm are not counted)\n");
    }
    if (opts_.stream) {
      printf(
          "# stream: calls queued on a host stream (%s after each timed call); per size an overlap\n"
          "#   line: comm = collective alone, comp = busy loop sized to comm, both = queued collective\n"
          "#   + busy loop + synchronize; overlap = (comm + comp - both) / min(comm, comp), 1 = hidden\n",
          blocking_ ? "synchronized" : "not synchronized");
    }
    if (dev_ != nullptr) {
      printf("# buffers: device memory (collMemAlloc, device local rank %% device count), one CUDA stream per rank;\n"
             "#   time = the timed loop with the stream synchronized before and after (%s)\n",
             blocking_ ? "and after every call" : "once after the loop");
      if (opts_.check) {
        if (checkOnDevice_) printf("# check: on the device (expected values uploaded, deviceCountMismatches)\n");
        else printf("# check: on the host (buffers downloaded): %s\n", hostCheckWhy_.c_str());
      }
    } else {
      printf("# buffers: host memory\n");
    }
    printf("#\n# Using devices\n");
    for (int r = 0; r < nranks_; ++r) {
      char slot[kSlot + 1] = {};
      memcpy(slot, &all[kSlot * r], kSlot);
      int pid = atoi(slot);
      char* bar = strchr(slot, '|');
      if (bar != nullptr) *bar = '\0';
      const char* space = strchr(slot, ' ');
      printf("#  Rank %2d Group  0 Pid %6d on %10s %s %s%s\n", r, pid, space ? space + 1 : "?",
             bar ? bar + 1 : "device  0 [host]", be_.name(), dev_ != nullptr ? " (device buffers)" : " (host buffers)");
    }
    printf("#\n");
    printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "", "",
           "", "");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s", "size", "count", "type", "redop",
           "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    if (showWire_) printf("  %10s  %6s", "wire", "wire%");
    if (opts_.compress.enabled) printf("  %8s", "relerr");
    printf("\n# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s", "(B)", "(elements)", "", "", "",
           "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
    if (showWire_) printf("  %10s  %6s", "(B)", "");
    printf("\n");
    fflush(stdout);
    return true;
  }

  const char* opLabel(collRedOp_t op) const { return info_.reduces ? opName(op) : "none"; }

  void printRow(const Row& row) {
    if (rank_ != 0) return;
    printf("%12zu  %12zu  %8s  %6s  %6d", row.bytes(), row.shape.count, typeName(row.type), opLabel(row.op), row.root);
    for (const Placement* p : {&row.oop, &row.ip}) {
      char t[32], w[32];
      if (p->wrong < 0) snprintf(w, sizeof(w), "N/A");
      else snprintf(w, sizeof(w), "%.0f", p->wrong);
      printf("  %7s  %6.2f  %6.2f  %5s", formatTime(p->timeUs, t, sizeof(t)), p->algBw, p->busBw, w);
    }
    if (showWire_) {
      const double ring = ringWireBytes(static_cast<double>(row.bytes()), nranks_);
      if (row.wireBytes >= 0) printf("  %10.0f  %6.2f", row.wireBytes, ring > 0 ? 100.0 * row.wireBytes / ring : 0.0);
      else printf("  %10s  %6s", "N/A", "N/A");
    }
    if (opts_.compress.enabled) {
      const double e = std::max(row.oop.relErr, row.ip.relErr);
      if (e >= 0) printf("  %8.2e", e);
      else printf("  %8s", "N/A");
    }
    printf("\n");
    if (row.fallbackCalls > 0) {
      printf("#  %zu B ran uncompressed in %.0f of %d timed calls (below minBytes: COLL_COMPRESS_MIN_BYTES)\n",
             row.bytes(), row.fallbackCalls, opts_.iters);
    }
    if (row.call1Us >= 0) {
      char c1[32], c2[32], st[32];
      printf(
          "#  calls %12zu B: call1 %s us  call2 %s us  steady %s us  call1/steady %.2f  call2/steady %.2f  "
          "faults1 %.0f  faults2 %.0f\n",
          row.bytes(), formatTime(row.call1Us, c1, sizeof(c1)), formatTime(row.call2Us, c2, sizeof(c2)),
          formatTime(row.steadyUs, st, sizeof(st)), row.steadyUs > 0 ? row.call1Us / row.steadyUs : 0.0,
          row.steadyUs > 0 ? row.call2Us / row.steadyUs : 0.0, row.faults1, row.faults2);
    }
    if (row.overlap.commUs >= 0) {
      char c[32], p[32], b[32];
      printf("#  overlap %12zu B: comm %s us  comp %s us  both %s us  overlap %4.2f\n", row.bytes(),
             formatTime(row.overlap.commUs, c, sizeof(c)), formatTime(row.overlap.compUs, p, sizeof(p)),
             formatTime(row.overlap.bothUs, b, sizeof(b)), row.overlap.fraction);
    }
    fflush(stdout);
  }

  int printFooter() {
    double wrong = 0, bwSum = 0;
    int bwCount = 0;
    for (const Row& r : rows_) {
      for (const Placement* p : {&r.oop, &r.ip}) {
        if (p->wrong > 0) wrong += p->wrong;
        bwSum += p->busBw;
        ++bwCount;
      }
    }
    double avgBw = bwCount ? bwSum / bwCount : 0;
    double overlapSum = 0;
    for (const Row& r : rows_) overlapSum += r.overlap.fraction;
    if (rank_ == 0) {
      printf("# Out of bounds values : %.0f %s\n", wrong, wrong == 0 ? "OK" : "FAILED");
      printf("# Avg bus bandwidth    : %g \n", avgBw);
      if (opts_.stream && !rows_.empty())
        printf("# Avg overlap          : %.2f \n", overlapSum / static_cast<double>(rows_.size()));
      printf("#\n");
      fflush(stdout);
      if (!opts_.jsonPath.empty()) writeJson(avgBw, wrong);
    }
    return wrong == 0 ? 0 : 1;
  }

  void writeJson(double avgBw, double wrong) {
    FILE* f = fopen(opts_.jsonPath.c_str(), "w");
    if (f == nullptr) {
      fprintf(stderr, "cannot write %s: %s\n", opts_.jsonPath.c_str(), strerror(errno));
      return;
    }
    fprintf(f, "{\n  \"benchmark\": \"%s\",\n  \"backend\": ", info_.name);
    jsonEscape(f, be_.name());
    fprintf(f, ",\n  \"nranks\": %d,\n  \"iters\": %d,\n  \"warmup\": %d,\n  \"check\": %d,\n  \"average\": %d,\n",
            nranks_, opts_.iters, opts_.warmup, opts_.check, opts_.average);
    fprintf(f, "  \"stream\": %s,\n  \"blocking\": %d,\n", opts_.stream ? "true" : "false", blocking_);
    // "memory": where the buffers were ("device": collMemAlloc + a CUDA stream; "host").
    fprintf(f, "  \"memory\": \"%s\",\n", dev_ != nullptr ? "device" : "host");
    if (dev_ != nullptr) {
      fprintf(f, "  \"device\": %d,\n  \"check_on\": \"%s\",\n", dev_->ordinal(),
              checkOnDevice_ ? "device" : "host");
    }
    if (opts_.compress.enabled) fprintf(f, "  \"compress\": \"%s\",\n", compressSpecName(opts_.compress).c_str());
    fprintf(f, "  \"results\": [\n");
    for (size_t i = 0; i < rows_.size(); ++i) {
      const Row& r = rows_[i];
      fprintf(f, "    {\"size\": %zu, \"count\": %zu, \"type\": \"%s\", \"redop\": \"%s\", \"root\": %d", r.bytes(),
              r.shape.count, typeName(r.type), opLabel(r.op), r.root);
      const char* names[] = {"out_of_place", "in_place"};
      const Placement* ps[] = {&r.oop, &r.ip};
      for (int k = 0; k < 2; ++k) {
        fprintf(f, ", \"%s\": {\"time_us\": %.4f, \"algbw_gbs\": %.6f, \"busbw_gbs\": %.6f, \"wrong\": ", names[k],
                ps[k]->timeUs, ps[k]->algBw, ps[k]->busBw);
        if (ps[k]->wrong < 0) fprintf(f, "null}");
        else fprintf(f, "%.0f}", ps[k]->wrong);
      }
      if (r.wireBytes >= 0) {
        const double ring = ringWireBytes(static_cast<double>(r.bytes()), nranks_);
        fprintf(f, ", \"wire_bytes_per_call\": %.1f, \"wire_fraction\": %.6f", r.wireBytes,
                ring > 0 ? r.wireBytes / ring : 0.0);
      }
      if (opts_.compress.enabled && std::max(r.oop.relErr, r.ip.relErr) >= 0) {
        fprintf(f, ", \"rel_error\": %.6g", std::max(r.oop.relErr, r.ip.relErr));
      }
      if (r.overlap.commUs >= 0) {
        fprintf(f, ", \"overlap\": {\"comm_us\": %.4f, \"comp_us\": %.4f, \"both_us\": %.4f, \"fraction\": %.4f}",
                r.overlap.commUs, r.overlap.compUs, r.overlap.bothUs, r.overlap.fraction);
      }
      fprintf(f, "}%s\n", i + 1 < rows_.size() ? "," : "");
    }
    fprintf(f, "  ],\n  \"wrong_total\": %.0f,\n  \"avg_busbw_gbs\": %.6f\n}\n", wrong, avgBw);
    fclose(f);
  }

  const PerfColl coll_;
  const CollInfo& info_;
  const PerfOptions& opts_;
  PerfBackend& be_;
  int rank_ = 0, nranks_ = 1;
  PerfDevice* dev_;  // not null: device buffers
  int blocking_ = 1;
  bool checkOnDevice_ = false;
  std::string hostCheckWhy_;
  // Host memory, or device memory (with host images for the check, and the expected buffers).
  void* send_ = nullptr;
  void* recv_ = nullptr;
  void* wantSend_ = nullptr;
  void* wantRecv_ = nullptr;
  std::unique_ptr<void, AlignedFree> hostSend_, hostRecv_;
  std::vector<Row> rows_;
  BusyLoop busy_;
  size_t units_ = 1;  // busy-loop units of the current size
  bool showWire_ = false;
  std::vector<double> callEnds_;    // --per-call: this rank's end of each timed call (us), [0] the start
  std::vector<double> callFaults_;  // --per-call: this process's minor faults at the same points
  collCompression_t compression_{};
  std::vector<float> residual_;     // --compress ...:feedback (host buffers: the residual itself)
  void* deviceResidual_ = nullptr;  // ... with device buffers
};

}  // namespace

bool parseSize(const char* text, size_t* out) {
  char* end = nullptr;
  double v = strtod(text, &end);
  if (end == text || v < 0) return false;
  double mult = 1;
  switch (*end) {
    case 'K':
    case 'k':
      mult = 1024.0;
      ++end;
      break;
    case 'M':
    case 'm':
      mult = 1024.0 * 1024;
      ++end;
      break;
    case 'G':
    case 'g':
      mult = 1024.0 * 1024 * 1024;
      ++end;
      break;
    default: break;
  }
  if (*end == 'B' || *end == 'b') ++end;
  if (*end != '\0') return false;
  *out = static_cast<size_t>(v * mult);
  return true;
}

int parsePerfOptions(int argc, char** argv, const char* program, PerfOptions* opts) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string key = a, val;
    bool hasInline = false;
    // Long options may be written --name=value.
    if (a.rfind("--", 0) == 0 && a.find('=') != std::string::npos) {
      key = a.substr(0, a.find('='));
      val = a.substr(a.find('=') + 1);
      hasInline = true;
    }
    if (key == "-h" || key == "--help") {
      printUsage(stdout, program);
      return 0;
    }
    if (key == "--stream" && !hasInline) {  // a switch: takes no value
      opts->stream = true;
      continue;
    }
    if (key == "--host" && !hasInline) {
      opts->deviceBuffers = 0;
      continue;
    }
    if (key == "--wire" && !hasInline) {
      opts->wire = true;
      continue;
    }
    if (key == "--per-call" && !hasInline) {
      opts->perCall = true;
      continue;
    }
    if (!hasInline) {
      if (i + 1 >= argc) {
        fprintf(stderr, "%s: option %s needs a value (see -h)\n", program, a.c_str());
        return 2;
      }
      val = argv[++i];
    }
    auto bad = [&]() {
      fprintf(stderr, "%s: invalid value '%s' for %s (see -h)\n", program, val.c_str(), key.c_str());
      return 2;
    };
    auto toInt = [&](int* out) {
      char* end = nullptr;
      long v = strtol(val.c_str(), &end, 10);
      if (end == val.c_str() || *end != '\0') return false;
      *out = static_cast<int>(v);
      return true;
    };
    int iv = 0;
    if (key == "-b" || key == "--minbytes") {
      if (!parseSize(val.c_str(), &opts->minBytes)) return bad();
    } else if (key == "-e" || key == "--maxbytes") {
      if (!parseSize(val.c_str(), &opts->maxBytes)) return bad();
    } else if (key == "-f" || key == "--stepfactor") {
      char* end = nullptr;
      opts->stepFactor = strtod(val.c_str(), &end);
      if (end == val.c_str() || *end != '\0' || opts->stepFactor < 0) return bad();
    } else if (key == "-i" || key == "--stepbytes") {
      if (!parseSize(val.c_str(), &opts->stepBytes)) return bad();
    } else if (key == "-n" || key == "--iters") {
      if (!toInt(&opts->iters) || opts->iters < 0) return bad();
    } else if (key == "-w" || key == "--warmup_iters") {
      if (!toInt(&opts->warmup) || opts->warmup < 0) return bad();
    } else if (key == "-c" || key == "--check") {
      if (!toInt(&opts->check) || opts->check < 0) return bad();
      opts->check = opts->check ? 1 : 0;
    } else if (key == "-a" || key == "--average") {
      if (!toInt(&opts->average) || opts->average < 0 || opts->average > 3) return bad();
    } else if (key == "-T" || key == "--timeout") {
      if (!toInt(&opts->timeoutSec) || opts->timeoutSec < 0) return bad();
    } else if (key == "-z" || key == "--blocking") {
      if (!toInt(&opts->blocking)) return bad();
    } else if (key == "-t" || key == "--nthreads" || key == "-g" || key == "--ngpus") {
      if (!toInt(&iv) || iv != 1) {
        fprintf(stderr,
                "%s: %s %s: one thread and one GPU per process only (nccl-tests' -g 1); launch one rank per GPU "
                "(collrun -np N)\n",
                program, key.c_str(), val.c_str());
        return 2;
      }
    } else if (key == "-G" || key == "--device") {
      if (!toInt(&iv) || (iv != 0 && iv != 1)) return bad();
      opts->deviceBuffers = iv;
    } else if (key == "-o" || key == "--op") {
      collRedOp_t op;
      if (val == "all") opts->ops.assign(std::begin(kAllOpsPreMul), std::end(kAllOpsPreMul));
      else if (parseOp(val, &op)) opts->ops = {op};
      else return bad();
    } else if (key == "-d" || key == "--datatype") {
      collDataType_t t;
      if (val == "all") opts->types.assign(std::begin(kAllTypes), std::end(kAllTypes));
      else if (parseType(val, &t)) opts->types = {t};
      else return bad();
    } else if (key == "-r" || key == "--root") {
      if (!toInt(&opts->root) || opts->root < -1) return bad();
    } else if (key == "--stream") {
      if (!toInt(&iv)) return bad();
      opts->stream = iv != 0;
    } else if (key == "--compress") {
      std::string why;
      if (!parseCompressSpec(val, &opts->compress, &why)) {
        fprintf(stderr, "%s: --compress %s: %s\n", program, val.c_str(), why.c_str());
        return 2;
      }
    } else if (key == "--json" || key == "-J") {
      opts->jsonPath = val;
    } else {
      fprintf(stderr, "%s: unknown option %s (see -h)\n", program, a.c_str());
      return 2;
    }
  }
  if (opts->maxBytes < opts->minBytes) opts->maxBytes = opts->minBytes;
  return -1;
}

int runPerf(PerfColl coll, const PerfOptions& opts, PerfBackend& backend, PerfDevice* device) {
  if (device == nullptr && opts.deviceBuffers == 1) {
    if (backend.rank() == 0)
      fprintf(stderr, "%s: -G 1: device buffers are not available here (no CUDA device, or a backend without them)\n",
              collInfo(coll).name);
    return 2;
  }
  Runner runner(coll, opts, backend, device);
  return runner.run();
}

}  // namespace coll::perf
