// The ib NetTransport: one opened device port per communicator, connections made through the
// bootstrap (ib_connect.cc), and the communicator's sleep on the completion channel and async fd.
#include "src/base/config.h"
#include "transports/ib/ib_transport.h"
#include "transports/net.h"

namespace coll {

namespace {

class IbNet final : public NetTransport {
 public:
  IbNet(Bootstrap& bootstrap, std::shared_ptr<IbDevice> device, const IbOptions& options)
      : bootstrap_(bootstrap), device_(std::move(device)), options_(options) {}
  NetKind kind() const override { return NetKind::Ib; }
  std::string describe() const override {
    std::string s = "ib " + device_->port().describe() + ", " + std::to_string(options_.qps) + " QP(s) per peer";
    if (&device_->api() != &realVerbsApi()) s += std::string(", ") + device_->api().name;
    return s;
  }
  Status connect(int peer, Deadline deadline, std::unique_ptr<Connection>* out) override {
    std::unique_ptr<IbConnection> conn;
    COLL_TRY(connectIb(bootstrap_, device_, peer, options_, deadline, &conn));
    *out = std::move(conn);
    return okStatus();
  }
  bool prepareSleep(std::vector<pollfd>* fds) override { return device_->prepareSleep(fds); }
  void finishSleep() override {
    device_->drainCqEvents();
    device_->pollAsyncEvents();
  }

 private:
  Bootstrap& bootstrap_;
  std::shared_ptr<IbDevice> device_;
  IbOptions options_;
};

}  // namespace

Status createIbNet(Bootstrap& bootstrap, int trafficClass, std::unique_ptr<NetTransport>* out) {
  IbOptions options = ibOptionsFromConfig();
  options.nearDevices = nearIbDevices();
  // As NCCL: the communicator's class replaces COLL_IB_TC; the service level stays COLL_IB_SL.
  if (trafficClass != kTrafficClassUnset) options.trafficClass = trafficClass;
  std::shared_ptr<IbDevice> device;
  COLL_TRY(IbDevice::open(activeVerbsApi(), options, &device));
  *out = std::make_unique<IbNet>(bootstrap, std::move(device), options);
  return okStatus();
}

}  // namespace coll
