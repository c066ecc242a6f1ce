// fault_loop: the fault campaign's workload. Every rank runs the same seeded, endless mix of
// collectives with exactly checkable results until one fails, then prints one FAULT_RESULT line
// (what failed, which ranks it blames), aborts the communicator, checks the abort was prompt, exits 0.
//
// usage: fault_loop [--seed S] [--max-count N] [--ready-after K] [--max-seconds SEC]
// Lines (stdout, one each, flushed):
//   FAULT_READY rank=R iter=K mono_ms=T          after K calls succeeded (the driver may strike)
//   FAULT_RESULT rank=R code=NAME iter=I op=OP count=N elapsed_ms=T mono_ms=M failed=3,5 failed_src=api|none
//                msg_ranks=3 msg="..."
//   FAULT_ABORT rank=R abort_ms=T                collCommAbort returned after T ms
//   FAULT_WRONG rank=R iter=I op=OP index=J got=G want=W    a wrong result (exit 1)
//   FAULT_NOERROR rank=R iters=N                 --max-seconds passed without an error (exit 3)
// failed= is collCommGetFailedRanks (failed_src=api; none when the library lacks it); msg_ranks= the
// ranks other than this one that the error message names ("rank N", "peer N").
#include <time.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "collective/collective.h"

// Weak, so this program also links against a library that does not have it yet; the address is
// null at run time then and the message is parsed instead.
#pragma weak collCommGetFailedRanks

namespace {

enum class Op { AllReduce, AllGather, ReduceScatter, Broadcast, AlltoAll, SendRecvRing, Barrier, kCount };

const char* opName(Op op) {
  switch (op) {
    case Op::AllReduce: return "allreduce";
    case Op::AllGather: return "allgather";
    case Op::ReduceScatter: return "reducescatter";
    case Op::Broadcast: return "broadcast";
    case Op::AlltoAll: return "alltoall";
    case Op::SendRecvRing: return "sendrecv_ring";
    case Op::Barrier: return "barrier";
    default: return "?";
  }
}

const char* resultName(collResult_t r) {
  switch (r) {
    case collSuccess: return "collSuccess";
    case collUnhandledCudaError: return "collUnhandledCudaError";
    case collSystemError: return "collSystemError";
    case collInternalError: return "collInternalError";
    case collInvalidArgument: return "collInvalidArgument";
    case collInvalidUsage: return "collInvalidUsage";
    case collRemoteError: return "collRemoteError";
    case collInProgress: return "collInProgress";
    case collTimeout: return "collTimeout";
    default: return "collUnknown";
  }
}

long long monoMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// A value every rank can recompute: 20 bits, so sums over 8 ranks stay exact in int32 and float32.
int32_t value(int rank, uint64_t iter, uint64_t index) {
  uint64_t x = (static_cast<uint64_t>(rank) + 1) * 1000003u + iter * 7919u + index * 31u;
  x ^= x >> 7;
  return static_cast<int32_t>(x & 0xfffff);
}

// Ranks named in an error message other than `self`: "rank N" and "peer N" (the library's phrasing).
std::vector<int> ranksInMessage(const std::string& msg, int self, int nranks) {
  std::vector<int> out;
  for (const char* word : {"rank ", "peer ", "ranks "}) {
    size_t pos = 0;
    while ((pos = msg.find(word, pos)) != std::string::npos) {
      pos += strlen(word);
      size_t end = pos;
      while (end < msg.size() && msg[end] >= '0' && msg[end] <= '9' && end - pos < 7) ++end;
      if (end == pos) continue;
      int r = atoi(msg.substr(pos, end - pos).c_str());
      if (r == self || r < 0 || r >= nranks) continue;
      bool seen = false;
      for (int q : out) seen = seen || q == r;
      if (!seen) out.push_back(r);
    }
  }
  return out;
}

struct Args {
  uint64_t seed = 1;
  size_t maxCount = 65536;
  int readyAfter = 3;
  double maxSeconds = 120;
};

Args parseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (s == "--seed" && v) a.seed = strtoull(v, nullptr, 10), ++i;
    else if (s == "--max-count" && v) a.maxCount = strtoull(v, nullptr, 10), ++i;
    else if (s == "--ready-after" && v) a.readyAfter = atoi(v), ++i;
    else if (s == "--max-seconds" && v) a.maxSeconds = atof(v), ++i;
    else {
      fprintf(stderr, "usage: fault_loop [--seed S] [--max-count N] [--ready-after K] [--max-seconds SEC]\n");
      exit(2);
    }
  }
  if (a.maxCount == 0) a.maxCount = 1;
  return a;
}

class Loop {
 public:
  Loop(collComm_t comm, int rank, int nranks, const Args& args)
      : comm_(comm),
        rank_(rank),
        n_(nranks),
        args_(args),
        send_(args.maxCount * static_cast<size_t>(nranks)),
        recv_(args.maxCount * static_cast<size_t>(nranks)),
        fsend_(args.maxCount),
        frecv_(args.maxCount) {}

  // Runs one iteration: collSuccess and a checked result, or the call's error. A wrong result
  // prints FAULT_WRONG and exits.
  collResult_t step(uint64_t iter, Op op, size_t count) {
    const uint64_t n = static_cast<uint64_t>(n_);
    switch (op) {
      case Op::AllReduce: {
        const bool useFloat = iter % 3 == 0;
        if (useFloat) {
          for (size_t j = 0; j < count; ++j) fsend_[j] = static_cast<float>(value(rank_, iter, j));
          collResult_t r = collAllReduce(fsend_.data(), frecv_.data(), count, collFloat32, collSum, comm_, nullptr);
          if (r != collSuccess) return r;
          for (size_t j = 0; j < count; ++j) {
            int64_t want = 0;
            for (int p = 0; p < n_; ++p) want += value(p, iter, j);
            check(iter, op, j, static_cast<int64_t>(frecv_[j]), want);
          }
          return r;
        }
        const collRedOp_t red = iter % 3 == 1 ? collSum : collMax;
        for (size_t j = 0; j < count; ++j) send_[j] = value(rank_, iter, j);
        collResult_t r = collAllReduce(send_.data(), recv_.data(), count, collInt32, red, comm_, nullptr);
        if (r != collSuccess) return r;
        for (size_t j = 0; j < count; ++j) {
          int64_t want = red == collSum ? 0 : INT32_MIN;
          for (int p = 0; p < n_; ++p) {
            want = red == collSum ? want + value(p, iter, j) : std::max<int64_t>(want, value(p, iter, j));
          }
          check(iter, op, j, recv_[j], want);
        }
        return r;
      }
      case Op::AllGather: {
        for (size_t j = 0; j < count; ++j) send_[j] = value(rank_, iter, j);
        collResult_t r = collAllGather(send_.data(), recv_.data(), count, collInt32, comm_, nullptr);
        if (r != collSuccess) return r;
        for (int p = 0; p < n_; ++p)
          for (size_t j = 0; j < count; ++j) check(iter, op, p * count + j, recv_[p * count + j], value(p, iter, j));
        return r;
      }
      case Op::ReduceScatter: {
        for (size_t k = 0; k < count * n; ++k) send_[k] = value(rank_, iter, k);
        collResult_t r = collReduceScatter(send_.data(), recv_.data(), count, collInt32, collSum, comm_, nullptr);
        if (r != collSuccess) return r;
        for (size_t j = 0; j < count; ++j) {
          int64_t want = 0;
          for (int p = 0; p < n_; ++p) want += value(p, iter, rank_ * count + j);
          check(iter, op, j, recv_[j], want);
        }
        return r;
      }
      case Op::Broadcast: {
        const int root = static_cast<int>(iter % n);
        for (size_t j = 0; j < count; ++j) recv_[j] = rank_ == root ? value(root, iter, j) : -1;
        collResult_t r = collBroadcast(recv_.data(), recv_.data(), count, collInt32, root, comm_, nullptr);
        if (r != collSuccess) return r;
        for (size_t j = 0; j < count; ++j) check(iter, op, j, recv_[j], value(root, iter, j));
        return r;
      }
      case Op::AlltoAll: {
        // Block p of rank q's input goes to rank p: its values encode (sender, destination).
        for (int p = 0; p < n_; ++p)
          for (size_t j = 0; j < count; ++j) send_[p * count + j] = value(rank_ * n_ + p, iter, j);
        collResult_t r = collAlltoAll(send_.data(), recv_.data(), count, collInt32, comm_, nullptr);
        if (r != collSuccess) return r;
        for (int p = 0; p < n_; ++p)
          for (size_t j = 0; j < count; ++j)
            check(iter, op, p * count + j, recv_[p * count + j], value(p * n_ + rank_, iter, j));
        return r;
      }
      case Op::SendRecvRing: {
        const int next = (rank_ + 1) % n_, prev = (rank_ + n_ - 1) % n_;
        for (size_t j = 0; j < count; ++j) send_[j] = value(rank_, iter, j);
        collResult_t r = collGroupStart();
        if (r != collSuccess) return r;
        collResult_t rs = collSend(send_.data(), count, collInt32, next, comm_, nullptr);
        collResult_t rr = collRecv(recv_.data(), count, collInt32, prev, comm_, nullptr);
        r = collGroupEnd();
        if (rs != collSuccess) return rs;
        if (rr != collSuccess) return rr;
        if (r != collSuccess) return r;
        for (size_t j = 0; j < count; ++j) check(iter, op, j, recv_[j], value(prev, iter, j));
        return r;
      }
      case Op::Barrier:
      default: return collBarrier(comm_, nullptr);
    }
  }

 private:
  void check(uint64_t iter, Op op, size_t index, int64_t got, int64_t want) {
    if (got == want) return;
    printf("FAULT_WRONG rank=%d iter=%llu op=%s index=%zu got=%lld want=%lld\n", rank_,
           static_cast<unsigned long long>(iter), opName(op), index, static_cast<long long>(got),
           static_cast<long long>(want));
    fflush(stdout);
    collCommAbort(comm_);
    exit(1);
  }

  collComm_t comm_;
  int rank_, n_;
  Args args_;
  std::vector<int32_t> send_, recv_;
  std::vector<float> fsend_, frecv_;
};

std::string quoted(const char* text) {
  std::string out;
  for (const char* p = text; p && *p; ++p) out += *p == '"' ? '\'' : (*p == '\n' ? ' ' : *p);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parseArgs(argc, argv);
  collComm_t comm = nullptr;
  collResult_t res = collCommInitFromEnv(&comm, nullptr);
  if (res != collSuccess) {
    printf("FAULT_INIT_FAILED code=%s msg=\"%s\"\n", resultName(res), quoted(collGetLastError(nullptr)).c_str());
    fflush(stdout);
    return 2;
  }
  int rank = 0, nranks = 1;
  if (collCommUserRank(comm, &rank) != collSuccess || collCommCount(comm, &nranks) != collSuccess) return 2;
  Loop loop(comm, rank, nranks, args);
  std::mt19937_64 rng(args.seed);  // the same stream on every rank: the same calls in the same order
  const long long start = monoMs();
  for (uint64_t iter = 0;; ++iter) {
    const Op op = static_cast<Op>(rng() % static_cast<uint64_t>(Op::kCount));
    // Log-uniform sizes from 1 element to maxCount: small-message and bulk paths both get hit.
    const double scale = std::ldexp(static_cast<double>(rng() >> 11), -53);
    size_t count = static_cast<size_t>(std::pow(static_cast<double>(args.maxCount), scale));
    count = std::max<size_t>(1, std::min(count, args.maxCount));
    const long long callStart = monoMs();
    res = loop.step(iter, op, count);
    if (res != collSuccess) {
      const long long now = monoMs();
      const std::string msg = quoted(collGetLastError(comm));
      std::vector<int> failed;
      const char* source = "none";  // the library lacks collCommGetFailedRanks
      if (collCommGetFailedRanks != nullptr) {
        int total = 0;
        std::vector<int> buf(static_cast<size_t>(nranks));
        if (collCommGetFailedRanks(comm, buf.data(), nranks, &total) == collSuccess) {
          source = "api";
          failed.assign(buf.begin(), buf.begin() + std::max(0, std::min(total, nranks)));
        }
      }
      auto join = [](const std::vector<int>& v) {
        std::string list;
        for (int r : v) list += (list.empty() ? "" : ",") + std::to_string(r);
        return list;
      };
      printf(
          "FAULT_RESULT rank=%d code=%s iter=%llu op=%s count=%zu elapsed_ms=%lld mono_ms=%lld failed=%s "
          "failed_src=%s msg_ranks=%s msg=\"%s\"\n",
          rank, resultName(res), static_cast<unsigned long long>(iter), opName(op), count, now - callStart, now,
          join(failed).c_str(), source, join(ranksInMessage(msg, rank, nranks)).c_str(), msg.c_str());
      fflush(stdout);
      const long long abortStart = monoMs();
      collResult_t ar = collCommAbort(comm);
      printf("FAULT_ABORT rank=%d abort_ms=%lld code=%s\n", rank, monoMs() - abortStart, resultName(ar));
      fflush(stdout);
      return 0;
    }
    if (iter + 1 == static_cast<uint64_t>(args.readyAfter)) {
      printf("FAULT_READY rank=%d iter=%llu mono_ms=%lld\n", rank, static_cast<unsigned long long>(iter + 1), monoMs());
      fflush(stdout);
    }
    if (monoMs() - start > static_cast<long long>(args.maxSeconds * 1000)) {
      printf("FAULT_NOERROR rank=%d iters=%llu\n", rank, static_cast<unsigned long long>(iter + 1));
      fflush(stdout);
      collCommAbort(comm);
      return 3;
    }
  }
}
