// libFuzzer target: the NCCL plugin's parsers of remote bytes: MessageStream's frame headers and
// payload matching (fed from a fake connection in fuzz-chosen pieces) and PairBootstrap's
// control frames (read from a real socketpair, as from its control socket).
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "src/nccl_net/message_stream.h"
#include "src/nccl_net/pair_bootstrap.h"

namespace {

// Delivers the fuzz input as the received byte stream, at most `piece` bytes per recvData, so
// frame headers straddle reads; sends go nowhere.
class FeedConnection final : public coll::Connection {
 public:
  FeedConnection(const uint8_t* data, size_t size, size_t piece) : data_(data), size_(size), piece_(piece) {}
  int peer() const override { return 1; }
  std::span<std::byte> sendSpace() override { return {sink_, sizeof(sink_)}; }
  void sendCommit(size_t bytes) override { sent_ += bytes; }
  std::span<const std::byte> recvData() override {
    return {reinterpret_cast<const std::byte*>(data_) + pos_, std::min(piece_, size_ - pos_)};
  }
  void recvConsume(size_t bytes) override {
    if (bytes > std::min(piece_, size_ - pos_)) __builtin_trap();  // consumed more than it was given
    pos_ += bytes;
  }
  uint64_t sentBytes() const override { return sent_; }
  uint64_t receivedBytes() const override { return pos_; }
  coll::Status progress(bool* progressed) override {
    *progressed = false;
    return coll::okStatus();
  }
  coll::Status checkHealth() override { return coll::okStatus(); }
  bool sendsFlushed() const override { return true; }

 private:
  const uint8_t* data_;
  size_t size_, pos_ = 0, piece_;
  uint64_t sent_ = 0;
  std::byte sink_[4096];
};

// [groups][piece][per group: n, then n x (tag byte, size byte)] then the stream.
void fuzzMessageStream(const uint8_t* data, size_t size) {
  if (size < 2) return;
  const int groups = data[0] % 4 + 1;
  const size_t piece = data[1] % 64 + 1;
  size_t off = 2;
  std::vector<std::vector<uint8_t>> buffers;
  struct Group {
    int n;
    void* ptrs[coll::ncclnet::kMaxRecvs];
    uint64_t sizes[coll::ncclnet::kMaxRecvs];
    int tags[coll::ncclnet::kMaxRecvs];
  };
  std::vector<Group> posted;
  for (int g = 0; g < groups; ++g) {
    if (off >= size) return;
    Group gr{};
    gr.n = data[off++] % coll::ncclnet::kMaxRecvs + 1;
    for (int i = 0; i < gr.n; ++i) {
      if (off + 2 > size) return;
      gr.tags[i] = data[off] % 4;
      gr.sizes[i] = static_cast<uint64_t>(data[off + 1]) * 17;  // 0..4335 bytes
      off += 2;
      buffers.emplace_back(gr.sizes[i]);
      gr.ptrs[i] = buffers.back().empty() ? nullptr : buffers.back().data();
    }
    posted.push_back(gr);
  }
  FeedConnection feed(data + off, size - off, piece);
  coll::ncclnet::MessageStream stream(&feed, "fuzz peer");
  std::vector<coll::ncclnet::Request*> reqs;
  for (auto& gr : posted) {
    coll::ncclnet::Request* r = nullptr;
    // postRecv progresses the stream, so a malformed frame already fails it.
    if (!stream.postRecv(gr.n, gr.ptrs, gr.sizes, gr.tags, &r).ok()) return;
    if (r == nullptr) __builtin_trap();  // at most 4 groups: a slot is always free
    reqs.push_back(r);
  }
  for (int i = 0; i < 1 << 16; ++i) {
    const uint64_t before = feed.receivedBytes();
    if (!stream.progress().ok()) return;
    if (feed.receivedBytes() == before) break;
  }
  for (auto* r : reqs) {
    bool done = false;
    uint64_t sizes[coll::ncclnet::kMaxRecvs];
    if (!stream.test(r, &done, sizes, coll::ncclnet::kMaxRecvs).ok()) return;
  }
}

// The stream is what the peer wrote on the control socket; ask for a tag the input chooses.
void fuzzPairBootstrap(const uint8_t* data, size_t size) {
  if (size < 1) return;
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return;
  int buf = 1 << 20;
  (void)setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
  (void)setsockopt(fds[1], SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
  const uint32_t tag = data[0] % 4;
  size_t written = 0;
  while (written + 1 < size) {
    ssize_t n = ::send(fds[0], data + 1 + written, size - 1 - written, MSG_NOSIGNAL);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  ::close(fds[0]);
  coll::PeerInfo me, peer;
  coll::ncclnet::PairBootstrap pair(1, coll::Socket(fds[1]), coll::Secret{}, 7, me, peer, nullptr);
  for (int i = 0; i < 8; ++i) {
    std::vector<uint8_t> msg;
    coll::Status st = pair.recv(0, tag, &msg, 4096, coll::Deadline::afterMs(0));
    if (!st.ok()) break;
    if (msg.size() > 4096) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  if (data[0] & 1) fuzzPairBootstrap(data + 1, size - 1);
  else fuzzMessageStream(data + 1, size - 1);
  return 0;
}
