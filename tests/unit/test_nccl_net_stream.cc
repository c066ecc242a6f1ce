// The NCCL plugin's message layer (src/nccl_net/message_stream.h) over in-memory connections:
// framing across ring wrap-around, NCCL's matching rules, bounds and out-of-resources answers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "src/exec/inprocess.h"
#include "src/nccl_net/message_stream.h"

namespace coll::ncclnet {
namespace {

struct Link {
  explicit Link(size_t ringBytes) : ab(ringBytes), ba(ringBytes), a(1, &ab, &ba), b(0, &ba, &ab) {}
  MemoryRing ab, ba;
  MemoryConnection a, b;  // a sends on ab, b receives from it
  MessageStream sender{&a, "peer-b"};
  MessageStream receiver{&b, "peer-a"};
};

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

// Polls both ends until `req` (of `stream`) completes; returns its sizes.
std::vector<uint64_t> waitFor(Link& l, MessageStream& stream, Request* req, int n) {
  std::vector<uint64_t> sizes(n, ~0ull);
  for (int i = 0; i < 1000000; ++i) {
    bool done = false;
    EXPECT_TRUE(l.sender.progress().ok());
    EXPECT_TRUE(l.receiver.progress().ok());
    Status st = stream.test(req, &done, sizes.data(), n);
    EXPECT_TRUE(st.ok()) << st.message();
    if (!st.ok() || done) return sizes;
  }
  ADD_FAILURE() << "request never completed";
  return sizes;
}

TEST(NcclNetStream, LargeMessageThroughSmallRingAndLargerReceive) {
  Link l(1024);
  auto src = pattern(100000, 3);
  std::vector<uint8_t> dst(131072, 0);
  Request *s = nullptr, *r = nullptr;
  ASSERT_TRUE(l.sender.postSend(src.data(), src.size(), 9, &s).ok());
  ASSERT_NE(s, nullptr);
  void* data[1] = {dst.data()};
  uint64_t size[1] = {dst.size()};
  int tag[1] = {9};
  ASSERT_TRUE(l.receiver.postRecv(1, data, size, tag, &r).ok());
  ASSERT_NE(r, nullptr);
  auto got = waitFor(l, l.receiver, r, 1);
  EXPECT_EQ(got[0], src.size());
  EXPECT_EQ(0, std::memcmp(dst.data(), src.data(), src.size()));
  EXPECT_EQ(waitFor(l, l.sender, s, 1)[0], src.size());
  EXPECT_EQ(l.sender.sendsInFlight(), 0);
  EXPECT_EQ(l.receiver.recvsInFlight(), 0);
}

TEST(NcclNetStream, OddSizesStraddleTheRingEnd) {
  Link l(128);  // headers (16 B) and payloads wrap around constantly
  for (size_t n : {0, 1, 13, 47, 64, 65, 127, 128, 129, 300, 5}) {
    auto src = pattern(n, static_cast<uint8_t>(n));
    std::vector<uint8_t> dst(n + 3, 0xee);
    Request *s = nullptr, *r = nullptr;
    ASSERT_TRUE(l.sender.postSend(src.data(), n, 1, &s).ok());
    void* data[1] = {dst.data()};
    uint64_t size[1] = {dst.size()};
    int tag[1] = {1};
    ASSERT_TRUE(l.receiver.postRecv(1, data, size, tag, &r).ok());
    EXPECT_EQ(waitFor(l, l.receiver, r, 1)[0], n);
    EXPECT_TRUE(std::equal(src.begin(), src.begin() + n, dst.begin())) << n;  // n = 0: src.data() is null
    EXPECT_EQ(dst[n], 0xee);                                                  // nothing past the message is written
    waitFor(l, l.sender, s, 1);
  }
}

TEST(NcclNetStream, TagsSelectWithinAGroup) {
  Link l(4096);
  auto a = pattern(100, 1), b = pattern(200, 2), c = pattern(300, 3);
  std::vector<uint8_t> d5(512), d6(512), d7(512);
  void* data[3] = {d5.data(), d6.data(), d7.data()};
  uint64_t sizes[3] = {512, 512, 512};
  int tags[3] = {5, 6, 7};
  Request* r = nullptr;
  ASSERT_TRUE(l.receiver.postRecv(3, data, sizes, tags, &r).ok());
  Request *s1, *s2, *s3;
  ASSERT_TRUE(l.sender.postSend(c.data(), c.size(), 7, &s1).ok());
  ASSERT_TRUE(l.sender.postSend(a.data(), a.size(), 5, &s2).ok());
  ASSERT_TRUE(l.sender.postSend(b.data(), b.size(), 6, &s3).ok());
  auto got = waitFor(l, l.receiver, r, 3);
  EXPECT_EQ(got, (std::vector<uint64_t>{100, 200, 300}));
  EXPECT_EQ(0, std::memcmp(d5.data(), a.data(), a.size()));
  EXPECT_EQ(0, std::memcmp(d6.data(), b.data(), b.size()));
  EXPECT_EQ(0, std::memcmp(d7.data(), c.data(), c.size()));
}

TEST(NcclNetStream, SameTagMatchesInPostingOrderEvenWhenReceivesComeLate) {
  Link l(4096);
  auto first = pattern(64, 10), second = pattern(32, 20);
  Request *s1, *s2;
  ASSERT_TRUE(l.sender.postSend(first.data(), first.size(), 4, &s1).ok());
  ASSERT_TRUE(l.sender.postSend(second.data(), second.size(), 4, &s2).ok());
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(l.receiver.progress().ok());  // data waits in the stream
  std::vector<uint8_t> d1(64), d2(64);
  void* p1[1] = {d1.data()};
  void* p2[1] = {d2.data()};
  uint64_t sz[1] = {64};
  int tag[1] = {4};
  Request *r1, *r2;
  ASSERT_TRUE(l.receiver.postRecv(1, p1, sz, tag, &r1).ok());
  ASSERT_TRUE(l.receiver.postRecv(1, p2, sz, tag, &r2).ok());
  EXPECT_EQ(waitFor(l, l.receiver, r2, 1)[0], 32u);  // testing out of order is allowed
  EXPECT_EQ(waitFor(l, l.receiver, r1, 1)[0], 64u);
  EXPECT_EQ(0, std::memcmp(d1.data(), first.data(), 64));
  EXPECT_EQ(0, std::memcmp(d2.data(), second.data(), 32));
}

TEST(NcclNetStream, ReceiveSmallerThanSendFails) {
  Link l(4096);
  auto src = pattern(100, 1);
  std::vector<uint8_t> dst(50);
  Request *s, *r;
  ASSERT_TRUE(l.sender.postSend(src.data(), src.size(), 0, &s).ok());
  void* data[1] = {dst.data()};
  uint64_t size[1] = {50};
  int tag[1] = {0};
  Status st = l.receiver.postRecv(1, data, size, tag, &r);
  if (st.ok()) {
    bool done = false;
    st = l.receiver.test(r, &done, nullptr, 0);
  }
  EXPECT_EQ(st.code(), collInternalError);
  EXPECT_NE(st.message().find("never smaller"), std::string::npos) << st.message();
  bool done = false;
  EXPECT_FALSE(l.receiver.test(r, &done, nullptr, 0).ok());  // the comm stays failed
}

TEST(NcclNetStream, OutOfRequestsGivesNullAndRecovers) {
  Link l(256);
  std::vector<uint8_t> buf(64);
  void* data[1] = {buf.data()};
  uint64_t size[1] = {64};
  int tag[1] = {1};
  std::vector<Request*> recvs;
  for (int i = 0; i < kMaxRequests; ++i) {
    Request* r = nullptr;
    ASSERT_TRUE(l.receiver.postRecv(1, data, size, tag, &r).ok());
    ASSERT_NE(r, nullptr) << i;
    recvs.push_back(r);
  }
  Request* extra = reinterpret_cast<Request*>(1);
  ASSERT_TRUE(l.receiver.postRecv(1, data, size, tag, &extra).ok());
  EXPECT_EQ(extra, nullptr);

  // Sends: the ring is tiny and nobody drains it, so they stay in flight until the pool is full.
  std::vector<Request*> sends;
  for (int i = 0; i < kMaxSends; ++i) {
    Request* s = nullptr;
    ASSERT_TRUE(l.sender.postSend(buf.data(), 64, 1, &s).ok());
    ASSERT_NE(s, nullptr) << i;
    sends.push_back(s);
  }
  Request* s = reinterpret_cast<Request*>(1);
  ASSERT_TRUE(l.sender.postSend(buf.data(), 64, 1, &s).ok());
  EXPECT_EQ(s, nullptr);
  // Completing the receives frees both pools.
  for (Request* r : recvs) waitFor(l, l.receiver, r, 1);
  ASSERT_TRUE(l.receiver.postRecv(1, data, size, tag, &extra).ok());
  EXPECT_NE(extra, nullptr);
}

TEST(NcclNetStream, GroupLimitsAndOversizedSendsAreRejected) {
  Link l(256);
  std::vector<uint8_t> buf(8);
  void* data[kMaxRecvs + 1];
  uint64_t sizes[kMaxRecvs + 1];
  int tags[kMaxRecvs + 1];
  for (int i = 0; i <= kMaxRecvs; ++i) data[i] = buf.data(), sizes[i] = 8, tags[i] = i;
  Request* r = nullptr;
  EXPECT_EQ(l.receiver.postRecv(kMaxRecvs + 1, data, sizes, tags, &r).code(), collInvalidArgument);
  EXPECT_EQ(l.receiver.postRecv(0, data, sizes, tags, &r).code(), collInvalidArgument);
  EXPECT_EQ(r, nullptr);
  Request* s = nullptr;
  EXPECT_EQ(l.sender.postSend(buf.data(), kMaxMessageBytes + 1, 0, &s).code(), collInvalidArgument);
  EXPECT_EQ(s, nullptr);
}

TEST(NcclNetStream, MalformedHeaderIsARemoteError) {
  Link l(256);
  FrameHeader bad{0x12345678, 0, 8};
  auto space = l.a.sendSpace();
  std::memcpy(space.data(), &bad, sizeof(bad));
  l.a.sendCommit(sizeof(bad));
  EXPECT_EQ(l.receiver.progress().code(), collRemoteError);
  Link l2(256);
  FrameHeader huge{kFrameMagic, 0, kMaxMessageBytes + 1};
  space = l2.a.sendSpace();
  std::memcpy(space.data(), &huge, sizeof(huge));
  l2.a.sendCommit(sizeof(huge));
  EXPECT_EQ(l2.receiver.progress().code(), collRemoteError);
}

// A connection that keeps committed bytes until told to let them go (as a socket ring does while
// the kernel is busy, or UCX before its endpoint is up).
class HeldConnection final : public Connection {
 public:
  explicit HeldConnection(Connection* inner) : inner_(inner) {}
  int peer() const override { return inner_->peer(); }
  std::span<std::byte> sendSpace() override { return inner_->sendSpace(); }
  void sendCommit(size_t bytes) override { inner_->sendCommit(bytes); }
  std::span<const std::byte> recvData() override { return inner_->recvData(); }
  void recvConsume(size_t bytes) override { inner_->recvConsume(bytes); }
  uint64_t sentBytes() const override { return inner_->sentBytes(); }
  uint64_t receivedBytes() const override { return inner_->receivedBytes(); }
  Status progress(bool* progressed) override { return inner_->progress(progressed); }
  Status checkHealth() override { return okStatus(); }
  bool sendsFlushed() const override { return flushed >= sentBytes(); }
  uint64_t flushedBytes() const override { return flushed; }
  uint64_t flushed = 0;

 private:
  Connection* inner_;
};

TEST(NcclNetStream, SendCompletesOnlyOnceItsBytesLeft) {
  MemoryRing ab(4096), ba(4096);
  MemoryConnection a(1, &ab, &ba);
  HeldConnection held(&a);
  MessageStream sender(&held, "peer");
  std::vector<uint8_t> m1(100), m2(200);
  Request *s1, *s2;
  ASSERT_TRUE(sender.postSend(m1.data(), m1.size(), 0, &s1).ok());
  ASSERT_TRUE(sender.postSend(m2.data(), m2.size(), 0, &s2).ok());
  bool done = true;
  ASSERT_TRUE(sender.test(s1, &done, nullptr, 0).ok());
  EXPECT_FALSE(done);  // written into the connection, not yet gone
  held.flushed = sizeof(FrameHeader) + m1.size();
  ASSERT_TRUE(sender.test(s1, &done, nullptr, 0).ok());
  EXPECT_TRUE(done);
  ASSERT_TRUE(sender.test(s2, &done, nullptr, 0).ok());
  EXPECT_FALSE(done);
  held.flushed = held.sentBytes();
  ASSERT_TRUE(sender.test(s2, &done, nullptr, 0).ok());
  EXPECT_TRUE(done);
}

TEST(NcclNetStream, TestOfAForeignRequestIsAnInternalError) {
  Link l(256);
  Request stray;
  bool done = false;
  EXPECT_EQ(l.receiver.test(&stray, &done, nullptr, 0).code(), collInternalError);
}

}  // namespace
}  // namespace coll::ncclnet
