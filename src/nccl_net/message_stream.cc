// NCCL plugin messages over a Connection: framing, matching and request pools (message_stream.h).
#include "src/nccl_net/message_stream.h"

#include <algorithm>
#include <cstring>

#include "src/base/deadline.h"

namespace coll::ncclnet {

MessageStream::MessageStream(Connection* conn, const char* name)
    : conn_(conn), name_(name), sends_(new Request[kMaxSends]), recvs_(new Request[kMaxRequests]) {}

MessageStream::~MessageStream() = default;

Status MessageStream::fail(Status st) {
  if (error_.ok()) error_ = st;
  return error_;
}

bool MessageStream::owns(const Request* req) const {
  return (req >= sends_.get() && req < sends_.get() + kMaxSends) ||
         (req >= recvs_.get() && req < recvs_.get() + kMaxRequests);
}

Status MessageStream::postSend(const void* data, uint64_t size, int tag, Request** out) {
  *out = nullptr;
  if (!error_.ok()) return error_;
  if (size > kMaxMessageBytes) {
    return makeError(collInvalidArgument, "send of %llu bytes to %s is larger than maxP2pBytes (%llu)",
                     static_cast<unsigned long long>(size), name_, static_cast<unsigned long long>(kMaxMessageBytes));
  }
  Request& r = sends_[sendHead_ % kMaxSends];
  if (r.kind != Request::Kind::Free) return okStatus();  // out of requests: NCCL retries
  r = Request{};
  r.kind = Request::Kind::Send;
  r.n = 1;
  r.tags[0] = tag;
  r.data[0] = const_cast<void*>(data);
  r.capacity[0] = size;
  r.postSeq = sendHead_++;
  r.owner = this;
  ++sendsInFlight_;
  *out = &r;
  return progress();
}

Status MessageStream::postRecv(int n, void* const* data, const uint64_t* sizes, const int* tags, Request** out) {
  *out = nullptr;
  if (!error_.ok()) return error_;
  if (n < 1 || n > kMaxRecvs) {
    return makeError(collInvalidArgument, "irecv of %d grouped receives from %s (1..%d allowed)", n, name_, kMaxRecvs);
  }
  Request* r = nullptr;
  for (int i = 0; i < kMaxRequests && !r; ++i)
    if (recvs_[i].kind == Request::Kind::Free) r = &recvs_[i];
  if (!r) return okStatus();
  *r = Request{};
  r->kind = Request::Kind::Recv;
  r->n = n;
  for (int i = 0; i < n; ++i) {
    r->data[i] = data[i];
    r->capacity[i] = sizes[i];
    r->tags[i] = tags[i];
  }
  r->postSeq = recvSeq_++;
  r->owner = this;
  ++recvsInFlight_;
  *out = r;
  return progress();
}

Status MessageStream::progressSends(bool* moved) {
  while (sendTail_ < sendHead_) {
    Request& r = sends_[sendTail_ % kMaxSends];
    const uint64_t total = sizeof(FrameHeader) + r.capacity[0];
    while (sendWritten_ < total) {
      std::span<std::byte> space = conn_->sendSpace();
      if (space.empty()) return okStatus();
      size_t n = 0;
      // The header may straddle the end of a ring buffer, so it is copied like payload.
      if (sendWritten_ < sizeof(FrameHeader)) {
        FrameHeader h{kFrameMagic, r.tags[0], r.capacity[0]};
        n = std::min(space.size(), static_cast<size_t>(sizeof(FrameHeader) - sendWritten_));
        std::memcpy(space.data(), reinterpret_cast<const std::byte*>(&h) + sendWritten_, n);
      } else {
        const uint64_t off = sendWritten_ - sizeof(FrameHeader);
        n = static_cast<size_t>(std::min<uint64_t>(space.size(), r.capacity[0] - off));
        std::memcpy(space.data(), static_cast<const std::byte*>(r.data[0]) + off, n);
      }
      conn_->sendCommit(n);
      sendWritten_ += n;
      *moved = true;
    }
    r.received[0] = r.capacity[0];
    r.endPos = conn_->sentBytes();
    ++sendTail_;
    sendWritten_ = 0;
  }
  return okStatus();
}

Request* MessageStream::matchSlot(int tag, int* slot) {
  Request* best = nullptr;
  int bestSlot = 0;
  for (int i = 0; i < kMaxRequests; ++i) {
    Request& r = recvs_[i];
    if (r.kind != Request::Kind::Recv || (best && r.postSeq > best->postSeq)) continue;
    for (int s = 0; s < r.n; ++s) {
      if (!r.matched[s] && r.tags[s] == tag) {
        best = &r;
        bestSlot = s;
        break;
      }
    }
  }
  *slot = bestSlot;
  return best;
}

Status MessageStream::progressRecvs(bool* moved) {
  for (;;) {
    std::span<const std::byte> in = conn_->recvData();
    if (!haveHeader_) {
      if (in.empty()) return okStatus();
      size_t n = std::min(in.size(), sizeof(FrameHeader) - headerBytes_);
      std::memcpy(reinterpret_cast<std::byte*>(&header_) + headerBytes_, in.data(), n);
      conn_->recvConsume(n);
      headerBytes_ += n;
      *moved = true;
      if (headerBytes_ < sizeof(FrameHeader)) continue;
      if (header_.magic != kFrameMagic || header_.size > kMaxMessageBytes) {
        return makeError(collRemoteError,
                         "malformed message header from %s (magic %08x, %llu bytes); is the peer running the "
                         "same plugin version?",
                         name_, header_.magic, static_cast<unsigned long long>(header_.size));
      }
      haveHeader_ = true;
      target_ = nullptr;
    }
    if (!target_) {
      int slot = 0;
      Request* r = matchSlot(header_.tag, &slot);
      if (!r) return okStatus();  // no receive posted for it yet: it waits in the stream
      if (header_.size > r->capacity[slot]) {
        return makeError(collInternalError,
                         "a %llu-byte send with tag %d from %s is larger than the %llu-byte receive posted for it "
                         "(a receive may be larger than the send, never smaller)",
                         static_cast<unsigned long long>(header_.size), header_.tag, name_,
                         static_cast<unsigned long long>(r->capacity[slot]));
      }
      r->matched[slot] = true;
      target_ = r;
      targetSlot_ = slot;
      payloadDone_ = 0;
    }
    while (payloadDone_ < header_.size) {
      in = conn_->recvData();
      if (in.empty()) return okStatus();
      size_t n = static_cast<size_t>(std::min<uint64_t>(in.size(), header_.size - payloadDone_));
      std::memcpy(static_cast<std::byte*>(target_->data[targetSlot_]) + payloadDone_, in.data(), n);
      conn_->recvConsume(n);
      payloadDone_ += n;
      *moved = true;
    }
    target_->received[targetSlot_] = header_.size;
    if (++target_->filled == target_->n) target_->done = true;
    target_ = nullptr;
    haveHeader_ = false;
    headerBytes_ = 0;
  }
}

Status MessageStream::progress() {
  if (!error_.ok()) return error_;
  bool moved = false;
  for (int round = 0; round < 4; ++round) {
    bool progressed = false;
    Status st = conn_->progress(&progressed);
    if (!st.ok()) return fail(st.withContext(std::string("connection to ") + name_));
    bool m = false;
    st = progressSends(&m);
    if (st.ok()) st = progressRecvs(&m);
    if (!st.ok()) return fail(st);
    moved = moved || m || progressed;
    if (!m && !progressed) break;
  }
  if (sendDoneTail_ < sendTail_) {
    const uint64_t flushed = conn_->flushedBytes();
    while (sendDoneTail_ < sendTail_ && sends_[sendDoneTail_ % kMaxSends].endPos <= flushed) {
      sends_[sendDoneTail_++ % kMaxSends].done = true;
    }
  }
  // A peer that closed or died shows only in checkHealth (and a transport may keep reporting
  // events while failed), so ask every ~100 ms while work is pending, as the executor does.
  if ((sendsInFlight_ > 0 || recvsInFlight_ > 0)) {
    const auto now = Clock::now();
    if (now - lastHealthCheck_ > std::chrono::milliseconds(100)) {
      lastHealthCheck_ = now;
      Status st = conn_->checkHealth();
      if (!st.ok()) return fail(st.withContext(std::string("connection to ") + name_));
    }
  }
  (void)moved;
  return okStatus();
}

void MessageStream::release(Request* req) {
  if (req->kind == Request::Kind::Send) --sendsInFlight_;
  if (req->kind == Request::Kind::Recv) --recvsInFlight_;
  req->kind = Request::Kind::Free;
  req->done = false;
}

Status MessageStream::test(Request* req, bool* done, uint64_t* sizes, int maxSizes) {
  *done = false;
  if (!owns(req) || req->kind == Request::Kind::Free) {
    return makeError(collInternalError, "test of a request that is not in flight on the comm to %s", name_);
  }
  COLL_TRY(progress());
  if (!req->done) return okStatus();
  if (sizes) {
    for (int i = 0; i < std::min(req->n, maxSizes); ++i) sizes[i] = req->received[i];
  }
  *done = true;
  release(req);
  return okStatus();
}

}  // namespace coll::ncclnet
