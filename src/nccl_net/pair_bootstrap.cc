// The plugin's two-party Bootstrap over one control socket (pair_bootstrap.h).
#include "src/nccl_net/pair_bootstrap.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "src/base/log.h"

namespace coll::ncclnet {

uint64_t localHostHash() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  auto digest = sha256(host, strlen(host));
  uint64_t h = 0;
  std::memcpy(&h, digest.data(), sizeof(h));
  return h;
}

PairBootstrap::PairBootstrap(int rank, Socket control, const Secret& secret, uint64_t pairId, const PeerInfo& me,
                             const PeerInfo& peer, const Socket* listener)
    : rank_(rank),
      control_(std::move(control)),
      secret_(secret),
      pairId_(pairId),
      me_(me),
      peer_(peer),
      listener_(listener) {
  (void)control_.setNonBlocking(true);
}

PairBootstrap::~PairBootstrap() = default;

void PairBootstrap::abort() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = true;
  if (control_.valid()) ::shutdown(control_.fd(), SHUT_RDWR);
}

Status PairBootstrap::send(int peer, uint32_t tag, const void* data, size_t size, Deadline deadline) {
  if (peer != 1 - rank_) return makeError(collInternalError, "pair bootstrap: no rank %d", peer);
  if (size > kMaxFrame) return makeError(collInternalError, "pair bootstrap: %zu-byte message is too large", size);
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_) return makeError(collInternalError, "pair bootstrap aborted");
  uint32_t head[2] = {tag, static_cast<uint32_t>(size)};
  COLL_TRY(control_.sendAll(head, sizeof(head), deadline).withContext("NCCL plugin control socket"));
  if (size) COLL_TRY(control_.sendAll(data, size, deadline).withContext("NCCL plugin control socket"));
  return okStatus();
}

Status PairBootstrap::pump(Deadline deadline) {
  pollfd p{control_.fd(), POLLIN, 0};
  int rc = ::poll(&p, 1, deadline.remainingMs());
  if (rc < 0 && errno != EINTR) return makeError(collSystemError, "poll: %s", errnoText(errno).c_str());
  if (rc <= 0) return okStatus();
  uint8_t buf[64 << 10];
  for (;;) {
    ssize_t n = ::recv(control_.fd(), buf, sizeof(buf), 0);
    if (n > 0) {
      inbuf_.insert(inbuf_.end(), buf, buf + n);
      // Bounded: at most one whole frame is buffered unparsed; the rest waits in the socket.
      if (inbuf_.size() >= kMaxFrame + 8) break;
      continue;
    }
    if (n == 0) {
      closed_ = true;  // frames already read still count; recv reports the close after them
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    return makeError(collSystemError, "NCCL plugin control socket to %s: %s", peer_.address.toString().c_str(),
                     errnoText(errno).c_str());
  }
  size_t off = 0;
  while (inbuf_.size() - off >= 8) {
    uint32_t head[2];
    std::memcpy(head, inbuf_.data() + off, 8);
    if (head[1] > kMaxFrame) {
      return makeError(collRemoteError, "NCCL plugin peer %s sent a %u-byte control frame (limit %zu)",
                       peer_.address.toString().c_str(), head[1], kMaxFrame);
    }
    if (inbuf_.size() - off - 8 < head[1]) break;
    if (stashedBytes_ + head[1] > kMaxStashed) {
      return makeError(collRemoteError, "NCCL plugin peer %s sent more unclaimed control data than %zu bytes",
                       peer_.address.toString().c_str(), kMaxStashed);
    }
    COLL_TRACE(-1, "pair bootstrap: control message tag %u, %u bytes", head[0], head[1]);
    stash_[head[0]].emplace_back(inbuf_.begin() + off + 8, inbuf_.begin() + off + 8 + head[1]);
    stashedBytes_ += head[1];
    off += 8 + head[1];
  }
  inbuf_.erase(inbuf_.begin(), inbuf_.begin() + off);
  return okStatus();
}

Status PairBootstrap::recv(int peer, uint32_t tag, std::vector<uint8_t>* data, size_t maxSize, Deadline deadline) {
  if (peer != 1 - rank_) return makeError(collInternalError, "pair bootstrap: no rank %d", peer);
  std::lock_guard<std::mutex> lock(mu_);
  for (bool first = true;; first = false) {
    auto it = stash_.find(tag);
    if (it != stash_.end() && !it->second.empty()) {
      std::vector<uint8_t>& msg = it->second.front();
      if (msg.size() > maxSize) {
        return makeError(collRemoteError, "NCCL plugin peer %s sent a %zu-byte message where at most %zu fit",
                         peer_.address.toString().c_str(), msg.size(), maxSize);
      }
      stashedBytes_ -= msg.size();
      *data = std::move(msg);
      it->second.erase(it->second.begin());
      return okStatus();
    }
    if (aborted_) return makeError(collInternalError, "pair bootstrap aborted");
    if (closed_) {
      return makeError(collRemoteError, "NCCL plugin peer %s closed its control socket",
                       peer_.address.toString().c_str());
    }
    if (!first && deadline.expired()) {
      return makeError(collTimeout, "NCCL plugin: no control message (tag %u) from %s before the deadline", tag,
                       peer_.address.toString().c_str());
    }
    COLL_TRY(pump(deadline));
  }
}

Status PairBootstrap::connectData(int peer, uint32_t tag, Socket* out, Deadline deadline) {
  if (peer != 1 - rank_ || rank_ != 0) {
    return makeError(collInternalError, "pair bootstrap: only the connecting side makes data sockets");
  }
  Socket s;
  COLL_TRY(Socket::connect(peer_.address, deadline, &s));
  const std::string name = peer_.address.toString();
  COLL_TRY(authenticate(s, &secret_, AuthRole::Connector, deadline, name));
  PairHello hello;
  hello.kind = PairHello::kData;
  hello.pairId = pairId_;
  hello.tag = tag;
  hello.pid = me_.pid;
  hello.hostHash = me_.hostHash;
  COLL_TRY(s.sendAll(&hello, sizeof(hello), deadline));
  *out = std::move(s);
  return okStatus();
}

Status PairBootstrap::acceptData(int peer, uint32_t tag, Socket* out, Deadline deadline) {
  if (peer != 1 - rank_ || rank_ != 1 || !listener_) {
    return makeError(collInternalError, "pair bootstrap: only the listening side accepts data sockets");
  }
  for (;;) {
    auto it = dataStash_.find(tag);
    if (it != dataStash_.end()) {
      *out = std::move(it->second);
      dataStash_.erase(it);
      return okStatus();
    }
    Socket s;
    SocketAddress from;
    COLL_TRY(listener_->accept(deadline, &s, &from));
    if (!authenticate(s, &secret_, AuthRole::Acceptor, deadline, from.toString()).ok()) continue;
    PairHello hello;
    if (!s.recvAll(&hello, sizeof(hello), deadline).ok()) continue;
    // Another pair's or a stray socket: not ours to use.
    if (hello.magic != PairHello::kMagic || hello.kind != PairHello::kData || hello.pairId != pairId_) continue;
    if (dataStash_.size() >= 64) return makeError(collRemoteError, "NCCL plugin peer opened too many data sockets");
    dataStash_[hello.tag] = std::move(s);
  }
}

}  // namespace coll::ncclnet
