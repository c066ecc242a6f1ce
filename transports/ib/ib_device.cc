// ibverbs device discovery: COLL_IB_HCA parsing, the active port and its GID (RoCE v2 preferred,
// LID addressing on InfiniBand), the opened device with its async events, and ibAvailable().
#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <cstring>

#include "src/base/config.h"
#include "src/base/log.h"
#include "src/topo/placement.h"
#include "transports/ib/ib_transport.h"
#include "transports/net.h"

namespace coll {

const StringKnob kIbHca("COLL_IB_HCA", "",
                        "RDMA ports for the ib transport, NCCL syntax: mlx5_0:1,mlx5_1 (name prefixes, optional port), "
                        "^ to exclude, = for exact names. Unset: the first active port.",
                        {KnobSection::Transports, 80});
const IntKnob kIbRails("COLL_IB_RAILS", "1",
                       "Rails (active ports COLL_IB_HCA admits, nearest first) each ib connection stripes over, 1-8; "
                       "0: every one; -1: the RDMA NICs placement finds equally near the rank. Fewer available than "
                       "asked is an error.",
                       {KnobSection::Transports, 85});
const IntKnob kIbGidIndex("COLL_IB_GID_INDEX", "-1",
                          "RoCE GID table index. -1: automatic, preferring RoCE v2 with an IPv4-mapped address.",
                          {KnobSection::Transports, 90});
const IntKnob kIbQpsPerConnection(
    "COLL_IB_QPS_PER_CONNECTION", "2",
    "RC queue pairs per ib connection (1-16); chunks of the stream are striped over them.",
    {KnobSection::Transports, 100});
const IntKnob kIbTrafficClass("COLL_IB_TC", "0",
                              "Traffic class of ib connections (RoCE: DSCP << 2) of communicators whose config sets no "
                              "trafficClass.",
                              {KnobSection::Transports, 110});
const IntKnob kIbServiceLevel("COLL_IB_SL", "0", "Service level of ib connections.", {KnobSection::Transports, 120});
const IntKnob kIbTimeout("COLL_IB_TIMEOUT", "20",
                         "ib ACK timeout: the HCA retransmits after 4.096 us * 2^value (0-31).",
                         {KnobSection::Transports, 130});
const IntKnob kIbRetryCount("COLL_IB_RETRY_CNT", "7",
                            "ib retransmissions before a write fails with retry exceeded (0-7).",
                            {KnobSection::Transports, 140});
const BytesKnob kIbStagingBytes(
    "COLL_IB_STAGING_BYTES", "4M",
    "Send and receive ring per ib connection (registered memory, rounded up to a power of two, at least 4K).",
    {KnobSection::Transports, 150});

namespace {

bool readable(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & POLLIN);
}

void setNonBlocking(int fd) {
  if (fd < 0) return;
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags >= 0) (void)fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

const char* portStateName(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_NOP: return "NOP";
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
  }
  return "?";
}

bool gidIsZero(const ibv_gid& g) {
  for (uint8_t b : g.raw)
    if (b != 0) return false;
  return true;
}

bool gidIsIpv4Mapped(const ibv_gid& g) {
  for (int i = 0; i < 10; ++i)
    if (g.raw[i] != 0) return false;
  return g.raw[10] == 0xff && g.raw[11] == 0xff;
}

bool gidIsLinkLocal(const ibv_gid& g) { return g.raw[0] == 0xfe && (g.raw[1] & 0xc0) == 0x80; }

const char* gidTypeName(ibv_gid_type t) {
  switch (t) {
    case IBV_GID_TYPE_IB: return "IB";
    case IBV_GID_TYPE_ROCE_V1: return "RoCE v1";
    case IBV_GID_TYPE_ROCE_V2: return "RoCE v2";
  }
  return "?";
}

// RoCE: the GID to use. Preference: RoCE v2 with an IPv4-mapped address (routable, what NCCL
// picks), RoCE v2 global IPv6, RoCE v2 link-local, then RoCE v1.
Status selectGid(const VerbsApi& api, ibv_context* ctx, const std::string& dev, int port, int tableLen, int forced,
                 IbPortInfo* info) {
  if (forced >= 0) {
    ibv_gid gid{};
    ibv_gid_type type = IBV_GID_TYPE_ROCE_V2;
    if (forced >= tableLen || api.queryGid(ctx, static_cast<uint8_t>(port), forced, &gid) != 0 || gidIsZero(gid)) {
      return makeError(collInvalidUsage,
                       "COLL_IB_GID_INDEX=%d: %s:%d has no GID at that index (table of %d); "
                       "see `show_gids` or unset COLL_IB_GID_INDEX",
                       forced, dev.c_str(), port, tableLen);
    }
    if (api.queryGidType(ctx, static_cast<uint8_t>(port), forced, &type) != 0) type = IBV_GID_TYPE_ROCE_V2;
    info->gidIndex = forced;
    info->gid = gid;
    info->gidType = gidTypeName(type);
    return okStatus();
  }
  int best = -1, bestScore = -1;
  for (int i = 0; i < tableLen; ++i) {
    ibv_gid gid{};
    ibv_gid_type type;
    if (api.queryGid(ctx, static_cast<uint8_t>(port), i, &gid) != 0 || gidIsZero(gid)) continue;
    if (api.queryGidType(ctx, static_cast<uint8_t>(port), i, &type) != 0) continue;
    int score = 0;
    if (type == IBV_GID_TYPE_ROCE_V2) score = gidIsIpv4Mapped(gid) ? 4 : gidIsLinkLocal(gid) ? 2 : 3;
    else if (type == IBV_GID_TYPE_ROCE_V1) score = 1;
    if (score > bestScore) {
      bestScore = score;
      best = i;
      info->gid = gid;
      info->gidType = gidTypeName(type);
    }
  }
  if (best < 0) {
    return makeError(collSystemError,
                     "no RDMA device usable: %s:%d (RoCE) has no GID; give the interface an IP "
                     "address or set COLL_IB_GID_INDEX",
                     dev.c_str(), port);
  }
  info->gidIndex = best;
  return okStatus();
}

}  // namespace

bool IbHcaFilter::matches(const std::string& device, int port) const {
  if (entries.empty()) return true;
  bool hit = false;
  for (const IbHcaEntry& e : entries) {
    const bool nameOk = exact ? device == e.name : device.compare(0, e.name.size(), e.name) == 0;
    if (nameOk && (e.port < 0 || e.port == port)) {
      hit = true;
      break;
    }
  }
  return exclude ? !hit : hit;
}

Status parseIbHcaList(const std::string& text, IbHcaFilter* out) {
  IbHcaFilter f;
  size_t i = 0;
  if (i < text.size() && text[i] == '^') f.exclude = true, ++i;
  if (i < text.size() && text[i] == '=') f.exact = true, ++i;
  std::string rest = text.substr(i);
  auto bad = [&](const char* why) {
    return makeError(collInvalidUsage, "COLL_IB_HCA=%s: %s (expected e.g. mlx5_0:1,mlx5_1, ^mlx5_2 or =mlx5_0)",
                     text.c_str(), why);
  };
  if (rest.empty()) {
    if (f.exclude || f.exact) return bad("no device after ^ or =");
    *out = f;
    return okStatus();
  }
  size_t start = 0;
  while (start <= rest.size()) {
    size_t comma = rest.find(',', start);
    if (comma == std::string::npos) comma = rest.size();
    std::string item = rest.substr(start, comma - start);
    // Surrounding blanks are a typing slip, not part of a device name.
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.erase(item.begin());
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.pop_back();
    if (item.empty()) return bad("empty entry");
    IbHcaEntry e;
    size_t colon = item.find(':');
    e.name = item.substr(0, colon);
    if (e.name.empty()) return bad("an entry without a device name");
    if (e.name.find_first_of("^=") != std::string::npos) return bad("^ and = go once, before the whole list");
    if (colon != std::string::npos) {
      std::string p = item.substr(colon + 1);
      if (p.empty() || p.size() > 3 || p.find_first_not_of("0123456789") != std::string::npos) return bad("bad port");
      e.port = std::stoi(p);
      if (e.port < 1 || e.port > 255) return bad("port out of range 1..255");
    }
    f.entries.push_back(e);
    start = comma + 1;
    if (comma == rest.size()) break;
  }
  *out = std::move(f);
  return okStatus();
}

IbOptions ibOptionsFromConfig() {
  IbOptions o;
  o.hca = kIbHca.get();
  o.gidIndex = static_cast<int>(std::clamp<int64_t>(kIbGidIndex.get(), -1, 1 << 20));
  o.qps = static_cast<int>(std::clamp<int64_t>(kIbQpsPerConnection.get(), 1, kIbMaxQps));
  o.rails = static_cast<int>(std::clamp<int64_t>(kIbRails.get(), -1, kIbMaxRails));
  o.trafficClass = static_cast<int>(std::clamp<int64_t>(kIbTrafficClass.get(), 0, 255));
  o.serviceLevel = static_cast<int>(std::clamp<int64_t>(kIbServiceLevel.get(), 0, 15));
  o.timeout = static_cast<int>(std::clamp<int64_t>(kIbTimeout.get(), 0, 31));
  o.retryCount = static_cast<int>(std::clamp<int64_t>(kIbRetryCount.get(), 0, 7));
  o.ringBytes = kIbStagingBytes.get();
  return o;
}

std::vector<std::string> nearIbDevices(int* equallyNear) {
  std::vector<std::string> names;
  if (equallyNear != nullptr) *equallyNear = 0;
  const PlacementHint* hint = currentPlacementHint();
  if (hint == nullptr || hint->node == nullptr) return names;
  std::vector<int32_t> rdma;  // the local ranks share out RDMA devices, not Ethernet-only NICs
  for (size_t n = 0; n < hint->node->nics.size(); ++n) {
    if (hint->node->nics[n].ports > 0) rdma.push_back(static_cast<int32_t>(n));
  }
  if (rdma.empty()) return names;
  const std::vector<int32_t> order = nicsByDistance(*hint->node, hint->place, rdma, hint->localRank);
  for (int32_t n : order) names.push_back(hint->node->nics[static_cast<size_t>(n)].name);
  if (equallyNear != nullptr) {
    const PathType nearest = nicPath(*hint->node, hint->place, order[0]);
    while (*equallyNear < static_cast<int>(order.size()) &&
           nicPath(*hint->node, hint->place, order[static_cast<size_t>(*equallyNear)]) == nearest) {
      ++*equallyNear;
    }
  }
  return names;
}

namespace {

// A port's signalling rate in Gb/s from its width and per-lane speed codes (ibv_port_attr); 0 where
// a code is unknown.
double portRateGbps(uint8_t width, uint8_t speed) {
  int lanes = 0;
  switch (width) {
    case 1: lanes = 1; break;
    case 2: lanes = 4; break;
    case 4: lanes = 8; break;
    case 8: lanes = 12; break;
    case 16: lanes = 2; break;
    default: return 0;
  }
  double lane = 0;
  switch (speed) {
    case 1: lane = 2.5; break;    // SDR
    case 2: lane = 5; break;      // DDR
    case 4: lane = 10; break;     // QDR
    case 8: lane = 10; break;     // FDR10
    case 16: lane = 14; break;    // FDR
    case 32: lane = 25; break;    // EDR
    case 64: lane = 50; break;    // HDR
    case 128: lane = 100; break;  // NDR
    default: return 0;
  }
  return lanes * lane;
}

}  // namespace

std::string IbPortInfo::describe() const {
  std::string s = device + ":" + std::to_string(port) + " ";
  if (ethernet) s += gidType + " (GID index " + std::to_string(gidIndex) + ")";
  else s += "InfiniBand (LID " + std::to_string(lid) + ")";
  return s;
}

Status IbDevice::open(const VerbsApi& api, const IbOptions& options, std::shared_ptr<IbDevice>* out) {
  IbOptions one = options;
  one.rails = 1;
  std::vector<std::shared_ptr<IbDevice>> rails;
  COLL_TRY(openRails(api, one, &rails));
  *out = std::move(rails[0]);
  return okStatus();
}

Status IbDevice::openRails(const VerbsApi& api, const IbOptions& options, std::vector<std::shared_ptr<IbDevice>>* out) {
  IbHcaFilter filter;
  COLL_TRY(parseIbHcaList(options.hca, &filter));
  const std::string hcaKnob = options.hca.empty() ? std::string("COLL_IB_HCA") : "COLL_IB_HCA=" + options.hca;
  // -1: as many as placement found equally near (one without a topology), each required.
  const int asked = options.rails < 0 ? std::clamp(options.nearRails, 1, kIbMaxRails) : options.rails;
  const int want = asked == 0 ? kIbMaxRails : std::min(asked, kIbMaxRails);
  int num = 0;
  ibv_device** list = api.getDeviceList(&num);
  if (list == nullptr || num <= 0) {
    if (list) api.freeDeviceList(list);
    return makeError(collSystemError,
                     "no RDMA device (%s found none: check `ibv_devices`, that the HCA driver and "
                     "the rdma kernel modules are loaded, or set up SoftRoCE with bench/softroce.sh up)",
                     api.name);
  }
  std::string names;  // every device verbs lists, for the errors
  for (int d = 0; d < num; ++d) {
    const char* n = api.getDeviceName(list[d]);
    names += (names.empty() ? "" : ", ") + std::string(n ? n : "?");
  }
  // A name in an include list that no device has is a typo or a missing device, never a reason
  // to carry on quietly with whatever else matched.
  if (!filter.exclude) {
    for (const IbHcaEntry& e : filter.entries) {
      IbHcaFilter single;
      single.exact = filter.exact;
      single.entries.push_back(IbHcaEntry{e.name, -1});
      bool found = false;
      for (int d = 0; d < num && !found; ++d) {
        const char* n = api.getDeviceName(list[d]);
        found = n != nullptr && single.matches(n, 1);
      }
      if (!found) {
        api.freeDeviceList(list);
        return makeError(collInvalidUsage, "%s: no RDMA device is named %s%s (devices: %s); check `ibv_devices`",
                         hcaKnob.c_str(), e.name.c_str(), filter.exact ? "" : "*", names.c_str());
      }
    }
  }
  // The order devices are tried in: the nearest first where placement knows (COLL_IB_HCA, when
  // set, is the user's choice and keeps verbs' order), then the rest as verbs lists them.
  std::vector<int> order;
  if (options.hca.empty()) {
    for (const std::string& near : options.nearDevices) {
      for (int d = 0; d < num; ++d) {
        const char* n = api.getDeviceName(list[d]);
        if (n != nullptr && near == n && std::find(order.begin(), order.end(), d) == order.end()) order.push_back(d);
      }
    }
  }
  for (int d = 0; d < num; ++d) {
    if (std::find(order.begin(), order.end(), d) == order.end()) order.push_back(d);
  }
  std::string seen;     // for the error: every device and port looked at
  std::string skipped;  // admitted ports that could not be used, for the warning with COLL_IB_RAILS=0
  std::vector<std::shared_ptr<IbDevice>> rails;
  auto note = [&](const std::string& what, bool admitted) {
    seen += (seen.empty() ? "" : ", ") + what;
    if (admitted) skipped += (skipped.empty() ? "" : ", ") + what;
  };
  for (int d : order) {
    if (static_cast<int>(rails.size()) >= want) break;
    const char* rawName = api.getDeviceName(list[d]);
    const std::string name = rawName ? rawName : "?";
    ibv_context* ctx = api.openDevice(list[d]);
    if (ctx == nullptr) {
      note(name + " (cannot open)", filter.matches(name, 1));
      continue;
    }
    ibv_device_attr attr{};
    if (api.queryDevice(ctx, &attr) != 0) {
      note(name + " (query failed)", filter.matches(name, 1));
      api.closeDevice(ctx);
      continue;
    }
    for (int port = 1; port <= attr.phys_port_cnt && static_cast<int>(rails.size()) < want; ++port) {
      ibv_port_attr pa{};
      if (api.queryPort(ctx, static_cast<uint8_t>(port), &pa) != 0) continue;
      std::string label = name + ":" + std::to_string(port);
      if (!filter.matches(name, port)) {
        note(label + " (excluded by COLL_IB_HCA)", false);
        continue;
      }
      if (pa.state != IBV_PORT_ACTIVE) {
        note(label + " " + portStateName(pa.state), true);
        continue;
      }
      IbPortInfo info;
      info.device = name;
      info.port = port;
      info.ethernet = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
      info.activeMtu = pa.active_mtu;
      info.lid = pa.lid;
      info.rateMbps = static_cast<uint32_t>(portRateGbps(pa.active_width, pa.active_speed) * 1000);
      if (info.ethernet) {
        Status st = selectGid(api, ctx, name, port, pa.gid_tbl_len, options.gidIndex, &info);
        if (!st.ok()) {
          if (options.gidIndex >= 0) {
            api.closeDevice(ctx);
            api.freeDeviceList(list);
            return st;
          }
          note(label + " (no usable GID)", true);
          continue;
        }
      } else {
        if (info.lid == 0) {
          note(label + " (InfiniBand without a LID: is the subnet manager running?)", true);
          continue;
        }
        info.gidType = "IB";
        info.gidIndex = 0;
        (void)api.queryGid(ctx, static_cast<uint8_t>(port), 0, &info.gid);
      }
      // Each rail its own context (and so its own protection domain, completion channel and async
      // events), also for a second port of the same device.
      ibv_context* railCtx = api.openDevice(list[d]);
      if (railCtx == nullptr) {
        note(label + " (cannot open)", true);
        continue;
      }
      std::shared_ptr<IbDevice> dev(new IbDevice(api));
      dev->context_ = railCtx;
      dev->attr_ = attr;
      dev->port_ = info;
      Status st = dev->finishOpen();
      if (!st.ok()) {
        api.closeDevice(ctx);
        api.freeDeviceList(list);
        return st;
      }
      rails.push_back(std::move(dev));
    }
    api.closeDevice(ctx);
  }
  api.freeDeviceList(list);
  if (rails.empty()) {
    return makeError(collSystemError,
                     "no RDMA device with an active port that %s admits (%s); check "
                     "`ibv_devinfo` and COLL_IB_HCA",
                     hcaKnob.c_str(), seen.c_str());
  }
  if (asked > 0 && static_cast<int>(rails.size()) < asked) {
    std::string taken;
    for (const auto& r : rails) taken += (taken.empty() ? "" : ", ") + r->name();
    return makeError(collSystemError,
                     "COLL_IB_RAILS=%d (%d rails) but only %zu active port(s) that %s admits: %s (not usable: %s); "
                     "check `ibv_devinfo`, COLL_IB_HCA and COLL_IB_RAILS",
                     options.rails, asked, rails.size(), hcaKnob.c_str(), taken.c_str(),
                     skipped.empty() ? "none" : skipped.c_str());
  }
  if (asked == 0 && !skipped.empty()) {
    COLL_WARN(-1, "COLL_IB_RAILS=0: using %zu rail(s); these ports that %s admits are not usable: %s", rails.size(),
              hcaKnob.c_str(), skipped.c_str());
  }
  *out = std::move(rails);
  return okStatus();
}

Status IbDevice::finishOpen() {
  pd_ = api_.allocPd(context_);
  if (pd_ == nullptr) {
    return makeError(collSystemError, "%s: cannot allocate a protection domain (errno %d)", name().c_str(), errno);
  }
  channel_ = api_.createCompChannel(context_);
  if (channel_ == nullptr) {
    return makeError(collSystemError, "%s: cannot create a completion channel (errno %d)", name().c_str(), errno);
  }
  setNonBlocking(channel_->fd);
  setNonBlocking(context_->async_fd);
  mrCache_ = std::make_unique<IbMrCache>(api_, pd_);
  return okStatus();
}

IbDevice::~IbDevice() {
  mrCache_.reset();
  if (channel_) api_.destroyCompChannel(channel_);
  if (pd_) api_.deallocPd(pd_);
  if (context_) api_.closeDevice(context_);
}

Status IbDevice::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void IbDevice::addConnection(IbConnection* c) {
  std::lock_guard<std::mutex> lock(mu_);
  connections_.push_back(c);
}

void IbDevice::removeConnection(IbConnection* c) {
  std::lock_guard<std::mutex> lock(mu_);
  connections_.erase(std::remove(connections_.begin(), connections_.end(), c), connections_.end());
}

void IbDevice::pollAsyncEvents() {
  std::lock_guard<std::mutex> lock(mu_);
  while (readable(context_->async_fd)) {
    ibv_async_event ev{};
    if (api_.getAsyncEvent(context_, &ev) != 0) break;
    switch (ev.event_type) {
      case IBV_EVENT_PORT_ERR:
      case IBV_EVENT_DEVICE_FATAL: {
        const bool portErr = ev.event_type == IBV_EVENT_PORT_ERR;
        if (failure_.ok()) {
          failure_ = makeError(collSystemError,
                               "%s: %s (%s); check the link with `ibv_devinfo` or choose another "
                               "port with COLL_IB_HCA",
                               name().c_str(), portErr ? "the port went down" : "the device failed",
                               portErr ? "IBV_EVENT_PORT_ERR" : "IBV_EVENT_DEVICE_FATAL");
          failed_.store(true, std::memory_order_release);
          COLL_WARN(-1, "%s", failure_.message().c_str());
        }
        for (IbConnection* c : connections_) c->railFailed(this, failure_);
        break;
      }
      case IBV_EVENT_QP_FATAL:
      case IBV_EVENT_QP_REQ_ERR:
      case IBV_EVENT_QP_ACCESS_ERR:
      case IBV_EVENT_PATH_MIG_ERR:
        for (IbConnection* c : connections_) {
          if (c->ownsQp(ev.element.qp)) {
            c->railFailed(this, makeError(collRemoteError,
                                          "%s: queue pair to rank %d failed (async event %d); check that "
                                          "rank's log and the fabric (COLL_IB_TIMEOUT, COLL_IB_RETRY_CNT)",
                                          name().c_str(), c->peer(), static_cast<int>(ev.event_type)));
          }
        }
        break;
      case IBV_EVENT_CQ_ERR:
        for (IbConnection* c : connections_) {
          if (c->ownsCq(ev.element.cq)) {
            c->fail(makeError(collInternalError,
                              "%s: completion queue of the connection to rank %d overflowed "
                              "(IBV_EVENT_CQ_ERR)",
                              name().c_str(), c->peer()));
          }
        }
        break;
      default: COLL_INFO(-1, "%s: async event %d", name().c_str(), static_cast<int>(ev.event_type)); break;
    }
    api_.ackAsyncEvent(&ev);
  }
}

void IbDevice::drainCqEvents() {
  std::lock_guard<std::mutex> lock(mu_);
  while (readable(channel_->fd)) {
    ibv_cq* cq = nullptr;
    void* ctx = nullptr;
    if (api_.getCqEvent(channel_, &cq, &ctx) != 0) break;
    api_.ackCqEvents(cq, 1);
    for (IbConnection* c : connections_) c->onCqEvent(cq);
  }
}

bool IbDevice::prepareSleep(std::vector<pollfd>* fds, bool connections) {
  if (connections) {
    pollAsyncEvents();
    {
      std::lock_guard<std::mutex> lock(mu_);
      sleepScratch_.assign(connections_.begin(), connections_.end());
    }
    for (IbConnection* c : sleepScratch_) {
      if (c->creditBlocked() || c->armAndPoll()) return false;
    }
  }
  fds->push_back(pollfd{channel_->fd, POLLIN, 0});
  fds->push_back(pollfd{context_->async_fd, POLLIN, 0});
  return true;
}

std::vector<std::string> ibDetail() {
  const VerbsApi& api = activeVerbsApi();
  std::vector<std::string> lines;
  int num = 0;
  ibv_device** list = api.getDeviceList(&num);
  if (list == nullptr || num <= 0) {
    if (list) api.freeDeviceList(list);
    return lines;  // the transport's unavailability says so
  }
  for (int d = 0; d < num; ++d) {
    const char* rawName = api.getDeviceName(list[d]);
    const std::string name = rawName ? rawName : "?";
    ibv_context* ctx = api.openDevice(list[d]);
    ibv_device_attr attr{};
    if (ctx == nullptr || api.queryDevice(ctx, &attr) != 0) {
      lines.push_back(name + ": " + (ctx == nullptr ? "cannot be opened" : "cannot be queried"));
      if (ctx) api.closeDevice(ctx);
      continue;
    }
    for (int port = 1; port <= attr.phys_port_cnt; ++port) {
      ibv_port_attr pa{};
      if (api.queryPort(ctx, static_cast<uint8_t>(port), &pa) != 0) {
        lines.push_back(name + ":" + std::to_string(port) + " cannot be queried");
        continue;
      }
      char rate[48] = "";
      const double gbps = portRateGbps(pa.active_width, pa.active_speed);
      if (gbps > 0) snprintf(rate, sizeof(rate), ", %.0f Gb/s", gbps);
      lines.push_back(name + ":" + std::to_string(port) + " " + portStateName(pa.state) + ", " +
                      (pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet (RoCE)" : "InfiniBand") + rate + ", MTU " +
                      std::to_string(128 << pa.active_mtu));
    }
    api.closeDevice(ctx);
  }
  api.freeDeviceList(list);
  return lines;
}

bool ibAvailable(std::string* why) {
  std::vector<std::shared_ptr<IbDevice>> dev;
  Status st = IbDevice::openRails(activeVerbsApi(), ibOptionsFromConfig(), &dev);
  if (!st.ok()) {
    *why = st.message();
    return false;
  }
  return true;
}

}  // namespace coll
