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
    // Every connection uses the first rail: its device prepares them, once each.
    sleepFds_ = fds;
    sleepFirst_ = fds->size();
    for (size_t r = 0; r < rails_.size(); ++r) {
      if (!rails_[r]->prepareSleep(fds, r == 0)) return false;
    }
    return true;
  }
  void finishSleep() override {
    if (rails_.size() == 1) {
      rails_[0]->drainCqEvents();
      rails_[0]->pollAsyncEvents();
      return;
    }
    // With several rails, only the devices whose descriptors woke the poll (each added two: the
    // completion channel, then the async fd): the others have nothing to read.
    for (size_t r = 0; r < rails_.size(); ++r) {
      const size_t i = sleepFirst_ + 2 * r;
      if (sleepFds_ == nullptr || i + 1 >= sleepFds_->size()) break;
      if ((*sleepFds_)[i].revents != 0) rails_[r]->drainCqEvents();
      if ((*sleepFds_)[i + 1].revents != 0) rails_[r]->pollAsyncEvents();
    }
    sleepFds_ = nullptr;
  }

 private:
  Bootstrap& bootstrap_;
  std::vector<std::shared_ptr<IbDevice>> rails_;
  IbOptions options_;
  // The sleep's descriptors (the caller's vector, valid until finishSleep) and where ours start.
  std::vector<pollfd>* sleepFds_ = nullptr;
  size_t sleepFirst_ = 0;
};

}  // namespace

Status createIbNet(Bootstrap& bootstrap, int trafficClass, std::unique_ptr<NetTransport>* out) {
  IbOptions options = ibOptionsFromConfig();
  options.nearDevices = nearIbDevices(&options.nearRails);
  // As NCCL: the communicator's class replaces COLL_IB_TC; the service level stays COLL_IB_SL.
  if (trafficClass != kTrafficClassUnset) options.trafficClass = trafficClass;
  std::vector<std::shared_ptr<IbDevice>> rails;
  COLL_TRY(IbDevice::openRails(activeVerbsApi(), options, &rails));
  *out = std::make_unique<IbNet>(bootstrap, std::move(rails), options);
  return okStatus();
}

}  // namespace coll
