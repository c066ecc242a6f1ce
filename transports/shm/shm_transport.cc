// Shared-memory transport: segment creation and layout, the local barrier, host windows, the
// futex doorbell, peer-death detection, and the FIFO connection between two local ranks.
#include "transports/shm/shm_transport.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

#include "src/base/align.h"
#include "src/base/config.h"
#include "src/base/log.h"
#include "transports/stream_ring.h"

namespace coll {

const BytesKnob kShmFifoBytes("COLL_SHM_FIFO_BYTES", "2M", "Shared-memory FIFO per ordered pair of ranks on a host.",
                              {KnobSection::Transports, 210});
const BytesKnob kShmWindowBytes("COLL_SHM_WINDOW_BYTES", "8M",
                                "Shared window per rank for the direct algorithm (two halves, alternated per call).",
                                {KnobSection::Transports, 220});

namespace {

constexpr uint64_t kMagic = 0x636f6c6c53484d31ull;  // "collSHM1"
constexpr uint64_t kLine = 64;
constexpr uint64_t kMaxFifoBytes = 1ull << 32;
constexpr uint64_t kMaxHalfBytes = 1ull << 36;
constexpr int kMaxPublishSlots = 4096;

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be lock-free");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "the futex word must be lock-free");
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "futex word layout");

long futexCall(std::atomic<uint32_t>* word, int op, uint32_t val, const timespec* timeout) {
  // Not FUTEX_PRIVATE_FLAG: the word lives in MAP_SHARED memory used by several processes.
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val, timeout, nullptr, 0);
}

std::string segmentName(uint64_t commHash, int rank) {
  char name[64];
  snprintf(name, sizeof(name), "/coll-%016llx-%d", static_cast<unsigned long long>(commHash), rank);
  return name;
}

struct Layout {
  uint64_t slotsOffset;
  uint64_t fifoOffset;
  uint64_t fifoStride;
  uint64_t windowOffset;
  uint64_t total;
};

}  // namespace

struct ShmHost::Header {
  uint64_t magic;
  uint64_t segmentBytes;
  uint64_t fifoBytes;
  uint64_t windowHalfBytes;
  int32_t pid;
  int32_t localIndex;
  int32_t localSize;
  int32_t publishSlots;
  // Doorbell and sleeping mark share a line: the waiter writes both, notifiers read the mark.
  alignas(64) std::atomic<uint32_t> doorbell;
  std::atomic<uint32_t> sleeping;
  alignas(64) std::atomic<uint64_t> completedCalls;
};

namespace {

// Sleeping marks: 0 awake, a futex sleeper, or a poll() sleeper woken through its socket.
constexpr uint32_t kSleepFutex = 1;
constexpr uint32_t kSleepSocket = 2;

// Linux abstract socket name: per communicator and rank, gone when the socket closes.
sockaddr_un wakeAddress(uint64_t commHash, int rank, socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  int n = snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, "coll-wake-%016llx-%d",
                   static_cast<unsigned long long>(commHash), rank);
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return a;
}

}  // namespace

// Head (written by the sender) and tail (written by the receiver) on separate lines so neither
// side's stores invalidate the line the other side writes.
struct ShmHost::FifoControl {
  alignas(64) std::atomic<uint64_t> head;
  alignas(64) std::atomic<uint64_t> tail;
};

namespace {

Layout layoutFor(const ShmOptions& o, int localSize) {
  Layout l{};
  l.slotsOffset = roundUp(sizeof(ShmHost::Header), kLine);
  l.fifoOffset = l.slotsOffset + kLine * static_cast<uint64_t>(o.publishSlots);
  l.fifoStride = sizeof(ShmHost::FifoControl) + o.fifoBytes;
  // Page-aligned window: algorithms reduce straight out of it with wide vector loads.
  l.windowOffset = roundUp(l.fifoOffset + l.fifoStride * static_cast<uint64_t>(localSize), 4096);
  l.total = roundUp(l.windowOffset + 2 * o.windowHalfBytes, 4096);
  return l;
}

// Barrier among the local ranks through the local leader; carries each rank's success so a
// failure on one rank fails all of them at once instead of at the deadline.
Status localBarrier(Bootstrap& bootstrap, const std::vector<int32_t>& localRanks, int me, uint8_t phase, bool ok,
                    bool* allOk, Deadline deadline) {
  *allOk = ok;
  if (localRanks.size() <= 1) return okStatus();
  const int leader = localRanks[0];
  std::vector<uint8_t> msg;
  if (me != leader) {
    uint8_t out[2] = {phase, static_cast<uint8_t>(ok ? 1 : 0)};
    COLL_TRY(
        bootstrap.send(leader, kShmBarrierTag, out, sizeof(out), deadline).withContext("shared-memory setup barrier"));
    COLL_TRY(bootstrap.recv(leader, kShmBarrierTag, &msg, 16, deadline).withContext("shared-memory setup barrier"));
    if (msg.size() != 2 || msg[0] != phase) {
      return makeError(collRemoteError, "shared-memory setup: malformed barrier message from rank %d", leader);
    }
    *allOk = msg[1] == 1;
    return okStatus();
  }
  bool all = ok;
  for (size_t i = 1; i < localRanks.size(); ++i) {
    COLL_TRY(
        bootstrap.recv(localRanks[i], kShmBarrierTag, &msg, 16, deadline).withContext("shared-memory setup barrier"));
    if (msg.size() != 2 || msg[0] != phase) {
      return makeError(collRemoteError, "shared-memory setup: malformed barrier message from rank %d", localRanks[i]);
    }
    all = all && msg[1] == 1;
  }
  uint8_t out[2] = {phase, static_cast<uint8_t>(all ? 1 : 0)};
  for (size_t i = 1; i < localRanks.size(); ++i) {
    COLL_TRY(bootstrap.send(localRanks[i], kShmBarrierTag, out, sizeof(out), deadline)
                 .withContext("shared-memory setup barrier"));
  }
  *allOk = all;
  return okStatus();
}

Status createOwnSegment(const std::string& name, uint64_t bytes, std::byte** base) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0 && errno == EEXIST) {
    // A leftover of a crashed process with the same communicator hash: it is ours to replace.
    shm_unlink(name.c_str());
    fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  }
  if (fd < 0) {
    int err = errno;
    return makeError(collSystemError, "shm_open(%s) failed: %s; check that /dev/shm is mounted and writable",
                     name.c_str(), errnoText(err).c_str());
  }
  // Reserve the pages now: a full /dev/shm must fail here, not as SIGBUS in the middle of a call.
  int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (rc != 0) {
    close(fd);
    shm_unlink(name.c_str());
    return makeError(collSystemError,
                     "cannot reserve %llu bytes in /dev/shm for %s: %s; enlarge /dev/shm (docker: "
                     "--shm-size) or lower COLL_SHM_FIFO_BYTES / COLL_SHM_WINDOW_BYTES",
                     static_cast<unsigned long long>(bytes), name.c_str(), errnoText(rc).c_str());
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name.c_str());
    return makeError(collSystemError, "mmap of %llu bytes of shared memory failed: %s",
                     static_cast<unsigned long long>(bytes), errnoText(err).c_str());
  }
  *base = static_cast<std::byte*>(p);
  return okStatus();
}

Status mapPeerSegment(const std::string& name, int peerRank, uint64_t bytes, std::byte** base) {
  int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    int err = errno;
    return makeError(collSystemError,
                     "cannot open the shared memory of local rank %d (%s): %s; do all ranks of this host "
                     "share /dev/shm (same container or IPC namespace)?",
                     peerRank, name.c_str(), errnoText(err).c_str());
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != bytes) {
    close(fd);
    return makeError(collInvalidUsage,
                     "the shared memory of local rank %d has %lld bytes, expected %llu: set "
                     "COLL_SHM_FIFO_BYTES and COLL_SHM_WINDOW_BYTES alike on every rank",
                     peerRank, static_cast<long long>(st.st_size), static_cast<unsigned long long>(bytes));
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (p == MAP_FAILED) {
    return makeError(collSystemError, "mmap of local rank %d's shared memory failed: %s", peerRank,
                     errnoText(err).c_str());
  }
  *base = static_cast<std::byte*>(p);
  return okStatus();
}

int openPidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  long fd = syscall(SYS_pidfd_open, pid, 0);
  if (fd >= 0) return static_cast<int>(fd);
#endif
  (void)pid;
  return -1;
}

}  // namespace

ShmOptions shmOptionsFromConfig() {
  ShmOptions o;
  o.fifoBytes = std::max<uint64_t>(roundUp(kShmFifoBytes.get(), kLine), 4096);
  o.windowHalfBytes = roundUp(kShmWindowBytes.get() / 2, kLine);
  o.publishSlots = 64;
  return o;
}

uint64_t ShmHost::segmentBytes(const ShmOptions& options, int localSize) { return layoutFor(options, localSize).total; }

Status ShmHost::create(Bootstrap& bootstrap, const Topology& topo, const ShmOptions& options, Deadline deadline,
                       std::unique_ptr<ShmHost>* out) {
  if (options.fifoBytes == 0 || options.fifoBytes % kLine != 0 || options.fifoBytes > kMaxFifoBytes ||
      options.windowHalfBytes % kLine != 0 || options.windowHalfBytes > kMaxHalfBytes || options.publishSlots < 1 ||
      options.publishSlots > kMaxPublishSlots) {
    return makeError(collInvalidArgument,
                     "shared-memory options out of range (fifo %llu bytes, window half %llu bytes, "
                     "%d slots): sizes must be multiples of 64",
                     static_cast<unsigned long long>(options.fifoBytes),
                     static_cast<unsigned long long>(options.windowHalfBytes), options.publishSlots);
  }
  const auto& local = topo.localRanks;
  const int me = topo.rank;
  auto it = std::lower_bound(local.begin(), local.end(), me);
  if (local.empty() || it == local.end() || *it != me) {
    return makeError(collInternalError, "shared-memory setup: rank %d is not among its host's local ranks", me);
  }
  std::unique_ptr<ShmHost> host(new ShmHost());
  host->rank_ = me;
  host->localIdx_ = static_cast<int>(it - local.begin());
  host->localRanks_ = local;
  host->options_ = options;
  const int n = static_cast<int>(local.size());
  const Layout layout = layoutFor(options, n);
  host->segmentBytes_ = layout.total;
  host->slotsOffset_ = layout.slotsOffset;
  host->fifoOffset_ = layout.fifoOffset;
  host->fifoStride_ = layout.fifoStride;
  host->windowOffset_ = layout.windowOffset;
  host->segments_.assign(n, nullptr);
  host->pidfds_.assign(n, -1);
  host->pids_.assign(n, 0);

  const uint64_t commHash = bootstrap.commHash();
  auto unlinkAll = [&]() {
    for (int r : local) shm_unlink(segmentName(commHash, r).c_str());
  };

  // Phase 1: create and initialise our own segment.
  std::byte* own = nullptr;
  Status st = createOwnSegment(segmentName(commHash, me), layout.total, &own);
  if (st.ok()) {
    host->segments_[host->localIdx_] = own;
    auto* h = new (own) Header();
    h->segmentBytes = layout.total;
    h->fifoBytes = options.fifoBytes;
    h->windowHalfBytes = options.windowHalfBytes;
    h->pid = static_cast<int32_t>(getpid());
    h->localIndex = host->localIdx_;
    h->localSize = n;
    h->publishSlots = options.publishSlots;
    h->doorbell.store(0, std::memory_order_relaxed);
    h->sleeping.store(0, std::memory_order_relaxed);
    h->completedCalls.store(0, std::memory_order_relaxed);
    for (int s = 0; s < options.publishSlots; ++s) {
      new (own + layout.slotsOffset + kLine * s) std::atomic<uint64_t>(0);
    }
    for (int j = 0; j < n; ++j) {
      new (own + layout.fifoOffset + layout.fifoStride * j) FifoControl();
    }
    std::atomic_thread_fence(std::memory_order_release);
    h->magic = kMagic;
  }
  bool allOk = false;
  Status bst = localBarrier(bootstrap, local, me, 1, st.ok(), &allOk, deadline);
  if (!bst.ok() || !allOk || !st.ok()) {
    unlinkAll();
    if (!st.ok()) return st;
    if (!bst.ok()) return bst;
    return makeError(collRemoteError, "shared-memory setup failed on another rank of this host; see that rank's error");
  }

  // Phase 2: map every peer's segment and check that it was built with the same options.
  for (int j = 0; j < n && st.ok(); ++j) {
    if (j == host->localIdx_) continue;
    st = mapPeerSegment(segmentName(commHash, local[j]), local[j], layout.total, &host->segments_[j]);
    if (!st.ok()) break;
    const Header* ph = host->header(j);
    if (ph->magic != kMagic || ph->segmentBytes != layout.total || ph->fifoBytes != options.fifoBytes ||
        ph->windowHalfBytes != options.windowHalfBytes || ph->publishSlots != options.publishSlots ||
        ph->localSize != n || ph->localIndex != j) {
      st = makeError(collInvalidUsage,
                     "local rank %d built its shared memory with other settings: set COLL_SHM_FIFO_BYTES "
                     "and COLL_SHM_WINDOW_BYTES alike on every rank",
                     local[j]);
      break;
    }
    host->pids_[j] = ph->pid;
  }
  bst = localBarrier(bootstrap, local, me, 2, st.ok(), &allOk, deadline);
  // Everyone has mapped everything (or we are failing): the names are no longer needed. Every
  // rank unlinks every name (ENOENT is fine), so none is left once create returns on any rank.
  unlinkAll();
  if (!bst.ok() || !allOk || !st.ok()) {
    if (!st.ok()) return st;
    if (!bst.ok()) return bst;
    return makeError(collRemoteError, "shared-memory setup failed on another rank of this host; see that rank's error");
  }

  host->pids_[host->localIdx_] = getpid();
  for (int j = 0; j < n; ++j) {
    if (j == host->localIdx_) continue;
    host->pidfds_[j] = openPidfd(host->pids_[j]);
    if (host->pidfds_[j] < 0 && errno == ESRCH) {
      // Either it already exited, or it lives in another PID namespace; kill(pid, 0) decides later.
      COLL_INFO(me, "no pidfd for local rank %d (pid %d); peer-death checks use kill()", local[j], host->pids_[j]);
    }
  }
  host->commHash_ = commHash;
  host->wakeFd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (host->wakeFd_ >= 0) {
    socklen_t len = 0;
    sockaddr_un a = wakeAddress(commHash, me, &len);
    if (bind(host->wakeFd_, reinterpret_cast<sockaddr*>(&a), len) != 0) {
      COLL_INFO(me, "no wake socket (%s): waits on TCP and shared memory together poll briefly", strerror(errno));
      close(host->wakeFd_);
      host->wakeFd_ = -1;
    }
  }
  COLL_INFO(me, "shared memory: %d local ranks, %llu bytes per segment", n,
            static_cast<unsigned long long>(layout.total));
  *out = std::move(host);
  return okStatus();
}

ShmHost::~ShmHost() {
  for (std::byte* s : segments_) {
    if (s != nullptr) munmap(s, segmentBytes_);
  }
  for (int fd : pidfds_) {
    if (fd >= 0) close(fd);
  }
  if (wakeFd_ >= 0) close(wakeFd_);
}

namespace {

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

// Maps [begin, end) in this process's page tables and touches one byte per page. The page-table
// fill is one system call (where the kernel has MADV_POPULATE_WRITE; else the reads fault the pages
// in); the reads are for VMs where a page's first access through a new mapping costs microseconds
// even with its entry present. Peers may write these bytes meanwhile and the values are discarded,
// so the reads are not instrumented (a thread sanitizer would see a race that changes nothing).
#if defined(__clang__) || defined(__GNUC__)
__attribute__((no_sanitize("thread")))
#endif
void touchRange(std::byte* begin, std::byte* end) {
  constexpr uintptr_t kPage = 4096;
  auto* first = reinterpret_cast<std::byte*>(reinterpret_cast<uintptr_t>(begin) & ~(kPage - 1));
  if (end <= first) return;
  (void)madvise(first, static_cast<size_t>(end - first), MADV_POPULATE_WRITE);
  unsigned sink = 0;
  for (const std::byte* p = first; p < end; p += kPage)
    sink += static_cast<unsigned>(*reinterpret_cast<const volatile std::byte*>(p));
  asm volatile("" : : "r"(sink));
}

}  // namespace

void ShmHost::prefault() {
  const int n = static_cast<int>(segments_.size());
  for (int j = 0; j < n; ++j) {
    std::byte* base = segments_[j];
    if (j == localIdx_) {
      touchRange(base, base + segmentBytes_);
      continue;
    }
    auto* f = reinterpret_cast<std::byte*>(fifo(j, localIdx_));
    touchRange(f, f + fifoStride_);
    touchRange(base + windowOffset_, base + windowOffset_ + 2 * options_.windowHalfBytes);
  }
}

uint64_t ShmHost::prefaultBytes() const {
  const uint64_t peers = segments_.empty() ? 0 : segments_.size() - 1;
  return segmentBytes_ + peers * (fifoStride_ + 2 * options_.windowHalfBytes);
}

int ShmHost::localIndex(int rank) const {
  auto it = std::lower_bound(localRanks_.begin(), localRanks_.end(), rank);
  if (it == localRanks_.end() || *it != rank) return -1;
  return static_cast<int>(it - localRanks_.begin());
}

ShmHost::Header* ShmHost::header(int localIdx) const { return reinterpret_cast<Header*>(segments_[localIdx]); }

ShmHost::FifoControl* ShmHost::fifo(int receiverLocal, int senderLocal) const {
  return reinterpret_cast<FifoControl*>(segments_[receiverLocal] + fifoOffset_ + fifoStride_ * senderLocal);
}

std::byte* ShmHost::fifoData(int receiverLocal, int senderLocal) const {
  return reinterpret_cast<std::byte*>(fifo(receiverLocal, senderLocal)) + sizeof(FifoControl);
}

std::byte* ShmHost::windowHalf(int rank, uint64_t seq) {
  int idx = localIndex(rank);
  if (idx < 0) return nullptr;
  return segments_[idx] + windowOffset_ + (seq & 1) * options_.windowHalfBytes;
}

std::atomic<uint64_t>& ShmHost::progressSlot(int rank, int slot) {
  int idx = localIndex(rank);
  return *reinterpret_cast<std::atomic<uint64_t>*>(segments_[idx] + slotsOffset_ + kLine * slot);
}

std::atomic<uint64_t>& ShmHost::completedCalls(int rank) { return header(localIndex(rank))->completedCalls; }

uint64_t ShmHost::prepareWait(bool viaSocket) {
  Header* h = header(localIdx_);
  h->sleeping.store(viaSocket && wakeFd_ >= 0 ? kSleepSocket : kSleepFutex, std::memory_order_seq_cst);
  // Pairs with the fence in ring(): either the notifier sees our mark, or we see its data.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return h->doorbell.load(std::memory_order_seq_cst);
}

void ShmHost::wait(uint64_t token, int maxMs) {
  Header* h = header(localIdx_);
  if (maxMs > 0 && h->doorbell.load(std::memory_order_acquire) == static_cast<uint32_t>(token)) {
    timespec ts{maxMs / 1000, static_cast<long>(maxMs % 1000) * 1000000L};
    // Returns at once with EAGAIN if the doorbell already moved past the token.
    futexCall(&h->doorbell, FUTEX_WAIT, static_cast<uint32_t>(token), &ts);
  }
  h->sleeping.store(0, std::memory_order_relaxed);
}

void ShmHost::cancelWait() { header(localIdx_)->sleeping.store(0, std::memory_order_relaxed); }

bool ShmHost::doorbellMoved(uint64_t token) const {
  return header(localIdx_)->doorbell.load(std::memory_order_acquire) != static_cast<uint32_t>(token);
}

void ShmHost::finishSocketWait() {
  char buf[64];
  while (wakeFd_ >= 0 && recv(wakeFd_, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
  }
  cancelWait();
}

void ShmHost::ring(int idx) {
  Header* h = header(idx);
  const uint32_t mark = h->sleeping.load(std::memory_order_relaxed);
  if (mark == 0) return;
  h->doorbell.fetch_add(1, std::memory_order_seq_cst);
  if (mark == kSleepSocket) {
    socklen_t len = 0;
    sockaddr_un a = wakeAddress(commHash_, localRanks_[idx], &len);
    // One pending datagram is enough to wake it; a full queue (EAGAIN) already will.
    const int fd = wakeFd_ >= 0 ? wakeFd_ : socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    (void)sendto(fd, "w", 1, MSG_DONTWAIT | MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&a), len);
    if (fd != wakeFd_ && fd >= 0) close(fd);
  } else {
    futexCall(&h->doorbell, FUTEX_WAKE, INT_MAX, nullptr);
  }
}

void ShmHost::notifyRank(int rank) {
  int idx = localIndex(rank);
  if (idx < 0) return;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  ring(idx);
}

void ShmHost::notifyLocalPeers() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (size_t j = 0; j < segments_.size(); ++j) {
    if (static_cast<int>(j) != localIdx_) ring(static_cast<int>(j));
  }
}

Status ShmHost::checkPeerAlive(int rank) {
  int idx = localIndex(rank);
  if (idx < 0 || idx == localIdx_) return okStatus();
  bool dead = false;
  if (pidfds_[idx] >= 0) {
    pollfd p{pidfds_[idx], POLLIN, 0};
    dead = poll(&p, 1, 0) > 0;
  } else if (pids_[idx] > 0) {
    dead = kill(pids_[idx], 0) != 0 && errno == ESRCH;
  }
  if (dead) {
    return makeError(collRemoteError,
                     "local rank %d (pid %d) exited while connected through shared memory; see that "
                     "rank's log for the cause",
                     rank, static_cast<int>(pids_[idx]));
  }
  return okStatus();
}

namespace {

// The connection (me -> peer) writes into the FIFO in the peer's segment and reads the FIFO
// in ours. Each side owns one counter of each FIFO and caches the other one.
class ShmConnection final : public Connection {
 public:
  ShmConnection(ShmHost* host, int peer, int peerLocal, int myLocal)
      : host_(host), peer_(peer), ring_(host->fifoBytes()) {
    sendCtl_ = host->fifo(peerLocal, myLocal);
    sendBuf_ = host->fifoData(peerLocal, myLocal);
    recvCtl_ = host->fifo(myLocal, peerLocal);
    recvBuf_ = host->fifoData(myLocal, peerLocal);
    // A second connection object to the same peer continues the stream where the first stopped.
    sendHead_ = sendCtl_->head.load(std::memory_order_acquire);
    sendTailCache_ = sendCtl_->tail.load(std::memory_order_acquire);
    recvTail_ = recvCtl_->tail.load(std::memory_order_acquire);
    recvHeadCache_ = recvCtl_->head.load(std::memory_order_acquire);
  }

  int peer() const override { return peer_; }

  std::span<std::byte> sendSpace() override {
    if (ring_.freeBytes(sendHead_, sendTailCache_) < ring_.toWrap(sendHead_)) {
      sendTailCache_ = sendCtl_->tail.load(std::memory_order_acquire);
      // A tail ahead of our head: the peer's process corrupted the segment.
      if (sendHead_ - sendTailCache_ > ring_.capacity()) {
        corrupt_ = true;
        return {};
      }
    }
    return {sendBuf_ + ring_.offset(sendHead_), ring_.writable(sendHead_, sendTailCache_)};
  }

  void sendCommit(size_t bytes) override {
    if (bytes == 0) return;
    sendHead_ += bytes;
    sendCtl_->head.store(sendHead_, std::memory_order_release);
    host_->notifyRank(peer_);
  }

  std::span<const std::byte> recvData() override {
    recvHeadCache_ = recvCtl_->head.load(std::memory_order_acquire);
    if (recvHeadCache_ - recvTail_ > ring_.capacity()) {
      corrupt_ = true;
      return {};
    }
    return {recvBuf_ + ring_.offset(recvTail_), ring_.readable(recvTail_, recvHeadCache_)};
  }

  void recvConsume(size_t bytes) override {
    if (bytes == 0) return;
    recvTail_ += bytes;
    recvCtl_->tail.store(recvTail_, std::memory_order_release);
    host_->notifyRank(peer_);
  }

  uint64_t sentBytes() const override { return sendHead_; }
  uint64_t receivedBytes() const override { return recvTail_; }

  Status progress(bool* progressed) override {
    if (progressed != nullptr) *progressed = false;
    return okStatus();
  }

  Status checkHealth() override {
    if (corrupt_) {
      return makeError(collRemoteError,
                       "the shared-memory FIFO with local rank %d holds inconsistent counters (memory "
                       "corruption in one of the two processes)",
                       peer_);
    }
    return host_->checkPeerAlive(peer_);
  }

  bool sendsFlushed() const override { return true; }

 private:
  ShmHost* host_;
  int peer_;
  StreamRing ring_;  // both FIFOs
  ShmHost::FifoControl* sendCtl_;
  std::byte* sendBuf_;
  ShmHost::FifoControl* recvCtl_;
  std::byte* recvBuf_;
  uint64_t sendHead_ = 0;
  uint64_t sendTailCache_ = 0;
  uint64_t recvTail_ = 0;
  uint64_t recvHeadCache_ = 0;
  bool corrupt_ = false;
};

}  // namespace

Status ShmHost::connection(int peer, std::unique_ptr<Connection>* out) {
  int peerLocal = localIndex(peer);
  if (peerLocal < 0) {
    return makeError(collInternalError, "rank %d is not on the host of rank %d: no shared-memory connection", peer,
                     rank_);
  }
  *out = std::make_unique<ShmConnection>(this, peer, peerLocal, localIdx_);
  return okStatus();
}

}  // namespace coll
