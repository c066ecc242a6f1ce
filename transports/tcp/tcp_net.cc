// The tcp NetTransport: TCP connections made through the bootstrap (tcp_connect.cc), and the
// communicator's sleep on their sockets.
#include "transports/idle_progress.h"
#include "transports/net.h"
#include "transports/tcp/tcp_transport.h"

namespace coll {

namespace {

class TcpNet final : public NetTransport {
 public:
  TcpNet(Bootstrap& bootstrap, int trafficClass, std::vector<SocketAddress> rails, std::vector<uint32_t> railMbps)
      : bootstrap_(bootstrap),
        options_(tcpOptionsFromConfig()),
        idle_(bootstrap.rank(), "tcp rails", [this] { return idleStep(); }) {
    options_.trafficClass = trafficClass;
    options_.rails = std::move(rails);
    options_.railMbps = std::move(railMbps);
  }
  NetKind kind() const override { return NetKind::Tcp; }
  std::string describe() const override {
    std::string s = "tcp (" + std::to_string(options_.streams) + " socket(s) per peer";
    for (size_t r = 0; r < options_.rails.size(); ++r) s += (r ? " + " : ", rails ") + options_.rails[r].toString();
    return s + ")";
  }
  Status connect(int peer, Deadline deadline, std::unique_ptr<Connection>* out) override {
    std::unique_ptr<Connection> conn;
    COLL_TRY(connectTcp(bootstrap_, peer, options_, deadline, &conn));
    connections_.push_back(static_cast<TcpConnection*>(conn.get()));
    *out = std::move(conn);
    return okStatus();
  }
  bool prepareSleep(std::vector<pollfd>* fds) override {
    for (const TcpConnection* c : connections_) c->appendPollFds(fds);
    return true;
  }
  // Only over several rails does a connection need progress between calls (progressBetweenCalls).
  void enterCall() override {
    if (railed()) idle_.enterCall();
  }
  void leaveCall() override {
    if (railed()) idle_.leaveCall();
  }
  void stopIdleProgress() override { idle_.stop(); }

 private:
  bool railed() const { return options_.rails.size() >= 2; }
  IdleProgress::Sleep idleStep() {
    // Detection waits for COLL_TCP_RAIL_TIMEOUT_MS anyway; answering the peer's failover records a
    // few tens of milliseconds late costs nothing next to it.
    constexpr int kStepMs = 20;
    for (TcpConnection* c : connections_) c->progressBetweenCalls();
    return IdleProgress::Sleep{-1, kStepMs};
  }

  Bootstrap& bootstrap_;
  TcpOptions options_;
  std::vector<TcpConnection*> connections_;  // owned by the communicator, which outlives none of them
  IdleProgress idle_;                        // over several rails
};

}  // namespace

Status createTcpNet(Bootstrap& bootstrap, int trafficClass, std::unique_ptr<NetTransport>* out) {
  std::vector<SocketAddress> rails;
  std::vector<uint32_t> mbps;
  COLL_TRY(tcpRailsFromConfig(&rails, &mbps));
  *out = std::make_unique<TcpNet>(bootstrap, trafficClass, std::move(rails), std::move(mbps));
  return okStatus();
}

}  // namespace coll
