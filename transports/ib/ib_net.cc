// The ib NetTransport: the opened device ports (rails) of a communicator, connections made through the
// bootstrap (ib_connect.cc), and the communicator's sleep on the completion channel and async fd.
#include "src/base/config.h"
#include "transports/ib/ib_transport.h"
#include "transports/net.h"

namespace coll {

namespace {

class IbNet final : public NetTransport {
 public:
  IbNet(Bootstrap& bootstrap, std::vector<std::shared_ptr<IbDevice>> rails, const IbOptions& options)
      : bootstrap_(bootstrap), rails_(std::move(rails)), options_(options) {}
  NetKind kind() const override { return NetKind::Ib; }
  std::string describe() const override {
    std::string s = "ib ";
    for (size_t r = 0; r < rails_.size(); ++r) s += (r ? " + " : "") + rails_[r]->port().describe();
    s += ", " + std::to_string(options_.qps) + " QP(s) per peer" + (rails_.size() > 1 ? " and rail" : "");
    if (&rails_[0]->api() != &realVerbsApi()) s += std::string(", ") + rails_[0]->api().name;
    return s;
  }
  Status connect(int peer, Deadline deadline, std::unique_ptr<Connection>* out) override {
    std::unique_ptr<IbConnection> conn;
    COLL_TRY(connectIb(bootstrap_, rails_, peer, options_, deadline, &conn));
    *out = std::move(conn);
    return okStatus();
  }
  bool prepareSleep(std::vector<pollfd>* fds) override {
    for (const auto& rail : rails_) {
      if (!rail->prepareSleep(fds)) return false;
    }
    return true;
  }
  void finishSleep() override {
    for (const auto& rail : rails_) {
      rail->drainCqEvents();
      rail->pollAsyncEvents();
    }
  }

 private:
  Bootstrap& bootstrap_;
  std::vector<std::shared_ptr<IbDevice>> rails_;
  IbOptions options_;
};

}  // namespace

Status createIbNet(Bootstrap& bootstrap, int trafficClass, std::unique_ptr<NetTransport>* out) {
  IbOptions options = ibOptionsFromConfig();
  options.nearDevices = nearIbDevices();
  // As NCCL: the communicator's class replaces COLL_IB_TC; the service level stays COLL_IB_SL.
  if (trafficClass != kTrafficClassUnset) options.trafficClass = trafficClass;
  std::vector<std::shared_ptr<IbDevice>> rails;
  COLL_TRY(IbDevice::openRails(activeVerbsApi(), options, &rails));
  *out = std::make_unique<IbNet>(bootstrap, std::move(rails), options);
  return okStatus();
}

}  // namespace coll
