// The ucx NetTransport: UCP context and worker per communicator, worker addresses exchanged over
// the bootstrap, endpoints with peer error handling, the worker's event fd for sleeping; and the
// availability probe (does ucp_init work, does UCX drive an RDMA device).
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "src/base/align.h"
#include "src/base/config.h"
#include "src/base/log.h"
#include "transports/ucx/ucx_transport.h"

namespace coll {

const StringKnob kUcxTls("COLL_UCX_TLS", "",
                         "UCX transports for the ucx transport, passed to UCX as UCX_TLS (e.g. tcp, sm, rc,ud; ^ "
                         "excludes). Unset: UCX_TLS from the environment, else all.",
                         {KnobSection::Transports, 160});
const BytesKnob kUcxRingBytes(
    "COLL_UCX_RING_BYTES", "4M",
    "Send and receive ring per UCX connection; a sender never has more than this unconsumed at the receiver.",
    {KnobSection::Transports, 170});
const BytesKnob kUcxMessageBytes(
    "COLL_UCX_MESSAGE_BYTES", "1M",
    "Largest UCX message the ring is cut into: bytes become visible to the receiver a whole message at a time, so "
    "smaller ones stream better; UCX sends large ones by rendezvous (zero-copy where it can).",
    {KnobSection::Transports, 180});
const StringKnob kUcxProtocol("COLL_UCX_PROTOCOL", "auto",
                              "How UCX sends ring messages: eager (copied through UCX's buffers), rndv (rendezvous: "
                              "zero-copy, a handshake per message) or auto (UCX chooses by size).",
                              {KnobSection::Transports, 190});
const StringKnob kUcxConfig(
    "COLL_UCX_CONFIG", "TX_SEG_SIZE=2M;RX_SEG_SIZE=2M;SNDBUF=4M;RCVBUF=4M",
    "UCX settings for the ucx transport's context, NAME=VALUE;... as UCX's ucp_config_modify takes them (UCX_ and a "
    "transport's prefix dropped: TX_SEG_SIZE sets UCX_TCP_TX_SEG_SIZE); they take precedence over UCX_* variables. The "
    "default gives UCX's tcp segments larger than a ring message (COLL_UCX_MESSAGE_BYTES), so a message travels in one "
    "segment instead of being reassembled in a buffer UCX allocates per message (the allocations went to mmap/munmap "
    "and halved the bandwidth), and larger socket buffers; none: UCX's own defaults.",
    {KnobSection::Transports, 200});

namespace {

constexpr uint32_t kHelloMagic = 0x636f5543u;  // "coUC"
constexpr uint32_t kHelloVersion = 1;
constexpr size_t kMaxWorkerAddress = 64u << 10;
constexpr uint64_t kMinRing = 4096;
constexpr uint64_t kMaxRing = 1ull << 32;

struct Hello {
  uint32_t magic;
  uint32_t version;
  int32_t rank;
  uint32_t addressLength;
  uint64_t ringBytes;
  uint64_t messageBytes;
};

std::string ucxVersion() {
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

}  // namespace

constexpr const char* kIbTrafficClassSetting = "IB_TRAFFIC_CLASS";

// UCX's configuration with COLL_UCX_TLS, COLL_UCX_CONFIG and the communicator's traffic class applied
// (to the configuration UCX read, not to our environment).
Status buildUcxConfig(const UcxOptions& options, ucp_config_t** out) {
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) return makeError(collSystemError, "UCX cannot read its configuration: %s", ucs_status_string(st));
  if (!options.tls.empty()) {
    st = ucp_config_modify(config, "TLS", options.tls.c_str());
    if (st != UCS_OK) {
      ucp_config_release(config);
      return makeError(collInvalidUsage,
                       "COLL_UCX_TLS=%s is not a UCX transport list (UCX_TLS syntax, e.g. tcp or "
                       "sm or rc,ud): %s",
                       options.tls.c_str(), ucs_status_string(st));
    }
  }
  std::string settings = options.config == "none" ? "" : options.config;
  // The default settings are for UCX's tcp; with a transport list without it, UCX would warn
  // that nothing used them.
  if (options.configIsDefault && !options.tls.empty() && options.tls.find("tcp") == std::string::npos &&
      options.tls.find("all") == std::string::npos) {
    settings.clear();
  }
  while (!settings.empty()) {
    const size_t end = settings.find(';');
    const std::string item = settings.substr(0, end);
    settings = end == std::string::npos ? "" : settings.substr(end + 1);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    // UCX keeps both of two settings of one name: the communicator's class (below) replaces this one.
    if (options.trafficClass != kTrafficClassUnset && item.substr(0, eq) == kIbTrafficClassSetting) continue;
    if (eq == std::string::npos || eq == 0) {
      ucp_config_release(config);
      return makeError(collInvalidUsage,
                       "COLL_UCX_CONFIG: '%s' is not NAME=VALUE (e.g. TCP_SNDBUF=4M; none for UCX's "
                       "defaults)",
                       item.c_str());
    }
    st = ucp_config_modify(config, item.substr(0, eq).c_str(), item.substr(eq + 1).c_str());
    if (st != UCS_OK) {
      ucp_config_release(config);
      return makeError(collInvalidUsage, "COLL_UCX_CONFIG: UCX refuses %s: %s", item.c_str(), ucs_status_string(st));
    }
  }
  // Last, so it wins over UCX_IB_TRAFFIC_CLASS and COLL_UCX_CONFIG as it wins over COLL_IB_TC: the
  // GRH traffic class of UCX's verbs transports (rc, dc, ud) for this context only. UCX's tcp has no
  // such setting.
  if (options.trafficClass != kTrafficClassUnset) {
    const std::string value = std::to_string(options.trafficClass);
    st = ucp_config_modify(config, kIbTrafficClassSetting, value.c_str());
    if (st != UCS_OK) {
      ucp_config_release(config);
      return makeError(collSystemError, "UCX refuses IB_TRAFFIC_CLASS=%s (config.trafficClass): %s", value.c_str(),
                       ucs_status_string(st));
    }
  }
  *out = config;
  return okStatus();
}

namespace {

// A context with buildUcxConfig's configuration.
Status initContext(const UcxOptions& options, uint64_t features, ucp_context_h* out) {
  ucp_config_t* config = nullptr;
  COLL_TRY(buildUcxConfig(options, &config));
  ucs_status_t st = UCS_OK;
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = features;
  st = ucp_init(&params, config, out);
  ucp_config_release(config);
  if (st != UCS_OK) {
    return makeError(collSystemError,
                     "UCX cannot initialise (ucp_init: %s) with transports %s; check COLL_UCX_TLS / "
                     "UCX_TLS and `ucx_info -d`",
                     ucs_status_string(st), options.tls.empty() ? "(UCX default)" : options.tls.c_str());
  }
  return okStatus();
}

// The transports of a context ("tcp", "posix", "rc_mlx5", ...), from UCX's own resource listing
// (UCP has no query for it; the listing is public and stable: "resource N : ... -- tl/dev").
std::vector<std::string> contextTransports(ucp_context_h context) {
  std::vector<std::string> tls;
  char* text = nullptr;
  size_t size = 0;
  FILE* f = open_memstream(&text, &size);
  if (f == nullptr) return tls;
  ucp_context_print_info(context, f);
  fclose(f);
  std::set<std::string> seen;
  const char* p = text;
  while (p != nullptr && *p != '\0') {
    const char* eol = strchr(p, '\n');
    std::string line(p, eol ? static_cast<size_t>(eol - p) : strlen(p));
    p = eol ? eol + 1 : nullptr;
    if (line.find("resource") == std::string::npos) continue;
    const size_t dash = line.find("-- ");
    if (dash == std::string::npos) continue;
    std::string tl = line.substr(dash + 3);
    tl = tl.substr(0, tl.find('/'));
    if (!tl.empty() && seen.insert(tl).second) tls.push_back(tl);
  }
  free(text);
  return tls;
}

bool isRdmaTransport(const std::string& tl) {
  for (const char* prefix : {"rc", "dc", "ud", "ib", "srd"}) {
    if (tl.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

}  // namespace

void ucxParkForever(const void* p) {
  static std::mutex mutex;
  static auto* parked = new std::vector<const void*>();
  std::lock_guard<std::mutex> lock(mutex);
  parked->push_back(p);
}

UcxOptions ucxOptionsFromConfig() {
  UcxOptions o;
  o.tls = kUcxTls.get();
  o.ringBytes = std::clamp<uint64_t>(roundUp(kUcxRingBytes.get(), 64), kMinRing, kMaxRing);
  o.messageBytes = std::clamp<uint64_t>(kUcxMessageBytes.get(), 64, o.ringBytes);
  o.protocol = kUcxProtocol.get();
  o.config = kUcxConfig.get();
  o.configIsDefault = !kUcxConfig.raw().has_value();
  return o;
}

namespace {

// Once per process: every communicator's probe (and collinfo) gets the same answer.
struct UcxProbe {
  bool available = false;
  bool rdma = false;
  std::string reason;
  std::vector<std::string> transports;
};

const UcxProbe& ucxProbe() {
  static std::once_flag once;
  static UcxProbe probe;
  std::call_once(once, [] {
    ucp_context_h context = nullptr;
    Status st = initContext(ucxOptionsFromConfig(), UCP_FEATURE_AM, &context);
    if (!st.ok()) {
      probe.reason = st.message();
      return;
    }
    probe.available = true;
    probe.transports = contextTransports(context);
    for (const std::string& tl : probe.transports) probe.rdma = probe.rdma || isRdmaTransport(tl);
    ucp_cleanup(context);
  });
  return probe;
}

}  // namespace

bool ucxAvailable(bool* hasRdma, std::string* why) {
  const UcxProbe& probe = ucxProbe();
  *hasRdma = probe.rdma;
  if (!probe.available && why != nullptr) *why = probe.reason;
  return probe.available;
}

std::vector<std::string> ucxDetail() {
  const UcxProbe& probe = ucxProbe();
  std::vector<std::string> lines{"UCX " + ucxVersion()};
  if (probe.available) {
    lines.push_back("transports: " + joined(probe.transports) + (probe.rdma ? "" : " (none of them RDMA)"));
  }
  return lines;
}

Status UcxNet::create(Bootstrap& bootstrap, const UcxOptions& options, std::unique_ptr<UcxNet>* out) {
  std::unique_ptr<UcxNet> net(new UcxNet(bootstrap, options));
  COLL_TRY(initContext(options, UCP_FEATURE_AM | UCP_FEATURE_WAKEUP, &net->context_));
  const std::vector<std::string> tls = contextTransports(net->context_);
  net->transports_ = joined(tls);
  for (const std::string& tl : tls) net->hasRdma_ = net->hasRdma_ || isRdmaTransport(tl);
  // auto: UCX picks by size (rendezvous for large messages; measured fastest over its tcp too).
  if (options.protocol == "eager") net->sendFlags_ = UCP_AM_SEND_FLAG_EAGER;
  else if (options.protocol == "rndv") net->sendFlags_ = UCP_AM_SEND_FLAG_RNDV;
  else if (options.protocol != "auto" && !options.protocol.empty()) {
    return makeError(collInvalidUsage, "COLL_UCX_PROTOCOL=%s is not a protocol (auto, eager, rndv)",
                     options.protocol.c_str());
  }
  // UCX's shared-memory transports cannot detect a peer's failure: asking for it with only them
  // selected would make UCX refuse the endpoint (and log an error) before we fall back.
  for (const std::string& tl : tls) {
    if (tl != "posix" && tl != "sysv" && tl != "cma" && tl != "knem" && tl != "xpmem" && tl != "self") {
      net->peerFailureCapable_ = true;
    }
  }
  // One worker per communicator, never shared: used by one thread at a time (the one running the
  // communicator's call, or between calls the net's idle progress, handed over by idle_), so
  // UCX needs no locks of its own.
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE | UCP_WORKER_PARAM_FIELD_EVENTS;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  wp.events = UCP_WAKEUP_TX | UCP_WAKEUP_RX;
  ucs_status_t st = ucp_worker_create(net->context_, &wp, &net->worker_);
  if (st != UCS_OK) return makeError(collSystemError, "UCX cannot create a worker: %s", ucs_status_string(st));
  st = ucp_worker_get_efd(net->worker_, &net->eventFd_);
  if (st != UCS_OK) {
    COLL_WARN(bootstrap.rank(), "UCX worker has no event fd (%s): idle waits poll", ucs_status_string(st));
    net->eventFd_ = -1;
  }
  st = ucp_worker_get_address(net->worker_, &net->address_, &net->addressLength_);
  if (st != UCS_OK) return makeError(collSystemError, "UCX cannot get the worker address: %s", ucs_status_string(st));
  if (net->addressLength_ == 0 || net->addressLength_ > kMaxWorkerAddress) {
    return makeError(collSystemError, "UCX worker address of %zu bytes (at most %zu expected)", net->addressLength_,
                     kMaxWorkerAddress);
  }
  for (int i = 0; i < 2; ++i) {
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG |
                    UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    hp.id = i == 0 ? kUcxAmData : kUcxAmCredit;
    hp.cb = i == 0 ? onData : onCredit;
    hp.arg = net.get();
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    st = ucp_worker_set_am_recv_handler(net->worker_, &hp);
    if (st != UCS_OK) {
      return makeError(collSystemError, "UCX cannot set an active-message handler: %s", ucs_status_string(st));
    }
  }
  net->rank_ = bootstrap.rank();
  net->byRank_.assign(bootstrap.nranks(), nullptr);
  net->owners_.resize(bootstrap.nranks());  // never resized again: endpoints point into it
  for (int p = 0; p < bootstrap.nranks(); ++p) net->owners_[p] = EndpointOwner{net.get(), p};
  *out = std::move(net);
  return okStatus();
}

void UcxNet::endpointError(void* arg, ucp_ep_h, ucs_status_t status) {
  // arg: the peer's entry in owners_, which outlives the connection (a retired endpoint may fail).
  auto* owner = static_cast<EndpointOwner*>(arg);
  UcxConnection* c = owner->net->byRank_[owner->peer];
  if (c != nullptr) c->onEndpointError(status);
}

void UcxNet::retire(ucp_ep_h ep, bool flush) {
  ucp_request_param_t p{};
  ucs_status_ptr_t req = nullptr;
  if (flush) {
    // A send completes locally before UCX has written all of it out: flush before closing.
    req = ucp_ep_flush_nbx(ep, &p);
    if (UCS_PTR_IS_ERR(req)) req = nullptr;
  }
  retired_.push_back(Retired{ep, req});
}

IdleProgress::Sleep UcxNet::idleStep() {
  constexpr int kWatchMs = 100;  // the longest sleep with the worker's event fd armed
  for (int i = 0; i < 1024 && ucp_worker_progress(worker_) != 0; ++i) {
  }
  if (eventFd_ >= 0 && ucp_worker_arm(worker_) == UCS_OK) return IdleProgress::Sleep{eventFd_, kWatchMs};
  return IdleProgress::Sleep{};
}

UcxNet::~UcxNet() {
  stopIdleProgress();
  // Every retired endpoint's flush gets one shared, bounded wait (a peer that already left
  // never answers), then all are closed by force.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1000);
  for (Retired& r : retired_) {
    if (!UCS_PTR_IS_PTR(r.request)) continue;
    while (ucp_request_check_status(r.request) == UCS_INPROGRESS && std::chrono::steady_clock::now() < until) {
      ucp_worker_progress(worker_);
    }
    ucp_request_free(r.request);
  }
  std::vector<ucs_status_ptr_t> closing;
  for (Retired& r : retired_) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t req = ucp_ep_close_nbx(r.ep, &p);
    if (UCS_PTR_IS_PTR(req)) closing.push_back(req);
  }
  const auto closeUntil = std::chrono::steady_clock::now() + std::chrono::milliseconds(1000);
  for (ucs_status_ptr_t req : closing) {
    while (ucp_request_check_status(req) == UCS_INPROGRESS && std::chrono::steady_clock::now() < closeUntil) {
      ucp_worker_progress(worker_);
    }
    ucp_request_free(req);
  }
  if (address_ != nullptr) ucp_worker_release_address(worker_, address_);
  if (stuckRequests_) {
    // A request still holds a registration of a ring (e.g. a rendezvous to a dead same-host
    // peer): UCX asserts when its context goes with a region in use, so both are left alive.
    COLL_WARN(rank_,
              "UCX: requests to a failed peer never completed; leaving this communicator's UCX worker "
              "and context allocated");
    ucxParkForever(worker_);
    ucxParkForever(context_);
    return;
  }
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  if (context_ != nullptr) ucp_cleanup(context_);
}

std::string UcxNet::describe() const {
  const char* protocol = sendFlags_ == UCP_AM_SEND_FLAG_EAGER  ? "eager"
                         : sendFlags_ == UCP_AM_SEND_FLAG_RNDV ? "rndv"
                                                               : "by size";
  return "ucx " + ucxVersion() + " (tls: " + (transports_.empty() ? "?" : transports_) + "; messages " + protocol +
         (options_.tls.empty() ? "" : "; COLL_UCX_TLS=" + options_.tls) + ")";
}

void UcxNet::progressWorker(uint64_t* seenRound) {
  // Once per round over the connections: a connection polled a second time starts a new round.
  // Each call may cost a system call (UCX's tcp polls its sockets), and one drives them all.
  if (*seenRound == round_) {
    ++round_;
    for (int i = 0; i < 16 && ucp_worker_progress(worker_) != 0; ++i) {
    }
  }
  *seenRound = round_;
}

bool UcxNet::prepareSleep(std::vector<pollfd>* fds) {
  if (eventFd_ < 0) return false;
  // Busy: events arrived since the last progress, so the caller polls again instead.
  if (ucp_worker_arm(worker_) != UCS_OK) return false;
  fds->push_back(pollfd{eventFd_, POLLIN, 0});
  return true;
}

UcxConnection* UcxNet::lookup(const void* header, size_t headerLength, size_t expected) {
  if (header == nullptr || headerLength != expected) return nullptr;
  int32_t rank;
  memcpy(&rank, static_cast<const char*>(header) + sizeof(uint32_t), sizeof(rank));
  if (rank < 0 || rank >= static_cast<int32_t>(byRank_.size())) return nullptr;
  return byRank_[rank];
}

ucs_status_t UcxNet::onData(void* arg, const void* header, size_t headerLength, void* data, size_t length,
                            const ucp_am_recv_param_t* param) {
  auto* net = static_cast<UcxNet*>(arg);
  UcxConnection* c = net->lookup(header, headerLength, sizeof(UcxConnection::DataHeader));
  UcxConnection::DataHeader h{};
  if (c != nullptr) memcpy(&h, header, sizeof(h));
  if (c == nullptr || h.magic != kDataMagic) {
    // A connection being torn down still receives what its peer had in flight.
    COLL_TRACE(net->bootstrap_.rank(), "UCX: dropped a data message (%zu-byte header) of no open connection",
               headerLength);
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ucp_am_data_release(net->worker_, data);
    return UCS_OK;
  }
  c->onData(h, data, length, param);
  return UCS_OK;
}

ucs_status_t UcxNet::onCredit(void* arg, const void* header, size_t headerLength, void* data, size_t,
                              const ucp_am_recv_param_t* param) {
  auto* net = static_cast<UcxNet*>(arg);
  UcxConnection* c = net->lookup(header, headerLength, sizeof(UcxConnection::CreditHeader));
  UcxConnection::CreditHeader h{};
  if (c != nullptr) memcpy(&h, header, sizeof(h));
  if (c == nullptr || h.magic != kCreditMagic) {
    COLL_TRACE(net->bootstrap_.rank(), "UCX: dropped a credit message (%zu-byte header) of no open connection",
               headerLength);
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ucp_am_data_release(net->worker_, data);
    return UCS_OK;
  }
  c->onCredit(h);
  return UCS_OK;
}

namespace {

// Untrusted until checked: the sizes decide our ring use and the address length a copy.
Status parseHello(const std::vector<uint8_t>& msg, int peer, const std::string& peerName, Hello* out) {
  Hello h{};
  if (msg.size() >= sizeof(Hello)) memcpy(&h, msg.data(), sizeof(h));
  if (msg.size() < sizeof(Hello) || h.magic != kHelloMagic || h.version != kHelloVersion || h.rank != peer ||
      h.addressLength == 0 || h.addressLength != msg.size() - sizeof(Hello) || h.ringBytes < kMinRing ||
      h.ringBytes > kMaxRing || h.ringBytes % 64 != 0 || h.messageBytes < 64 || h.messageBytes > h.ringBytes) {
    return makeError(collRemoteError,
                     "rank %d (%s) sent a malformed UCX handshake (%zu bytes, magic %08x, version %u, rank %d, ring "
                     "%llu, message %llu); are both ranks running the same library version?",
                     peer, peerName.c_str(), msg.size(), h.magic, h.version, h.rank,
                     static_cast<unsigned long long>(h.ringBytes), static_cast<unsigned long long>(h.messageBytes));
  }
  *out = h;
  return okStatus();
}

}  // namespace

Status checkUcxHello(const uint8_t* bytes, size_t size, int peer) {
  Hello h{};
  return parseHello(std::vector<uint8_t>(bytes, bytes + size), peer, "rank " + std::to_string(peer), &h);
}

Status UcxNet::sendHello(int peer, uint64_t ring, uint64_t message, Deadline deadline) {
  std::vector<uint8_t> hello(sizeof(Hello) + addressLength_);
  Hello mine{kHelloMagic, kHelloVersion, bootstrap_.rank(), static_cast<uint32_t>(addressLength_), ring, message};
  memcpy(hello.data(), &mine, sizeof(mine));
  memcpy(hello.data() + sizeof(mine), address_, addressLength_);
  return bootstrap_.send(peer, kUcxTagBase, hello.data(), hello.size(), deadline)
      .withContext("sending the UCX worker address to rank " + std::to_string(peer));
}

Status UcxNet::createEndpoint(UcxConnection*, int peer, const std::string& peerName, const uint8_t* address,
                              ucp_ep_h* out) {
  ucp_ep_params_t ep{};
  ep.field_mask =
      UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = reinterpret_cast<const ucp_address_t*>(address);
  // A dead peer becomes an error callback on this endpoint instead of a hang. Its price on UCX
  // 1.13's tcp: peer mode drops tcp's put lanes, so rendezvous data travels as active-message
  // fragments copied out of UCX's buffers; without it the data is put straight into our ring,
  // yet All-Reduce between namespaces measured slower (1.00 vs 1.20 GB/s), so we keep it.
  ep.err_mode = peerFailureCapable_ ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  ep.err_handler.cb = endpointError;
  ep.err_handler.arg = &owners_[peer];
  ucs_status_t st = ucp_ep_create(worker_, &ep, out);
  if (st == UCS_ERR_UNREACHABLE && ep.err_mode == UCP_ERR_HANDLING_MODE_PEER) {
    // UCX's shared-memory transports (1.13) cannot report a peer's failure: without peer error
    // handling they connect, and the connection watches a same-host peer's process instead.
    ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    st = ucp_ep_create(worker_, &ep, out);
  }
  if (st == UCS_OK && ep.err_mode == UCP_ERR_HANDLING_MODE_NONE) {
    COLL_INFO(bootstrap_.rank(),
              "UCX to rank %d: no transport with peer failure detection; a same-host peer's exit "
              "is detected through its pid",
              peer);
  }
  if (st != UCS_OK) {
    return makeError(collRemoteError,
                     "UCX cannot reach rank %d (%s): ucp_ep_create: %s; check COLL_UCX_TLS (now %s) "
                     "and that both hosts have a common UCX transport (`ucx_info -d`)",
                     peer, peerName.c_str(), ucs_status_string(st),
                     options_.tls.empty() ? "unset" : options_.tls.c_str());
  }
  return okStatus();
}

Status UcxNet::pollReply(UcxConnection* conn, bool* ready) {
  *ready = false;
  const int peer = conn->peer();
  std::vector<uint8_t> reply;
  // An expired deadline: take the reply if the bootstrap already queued it, never wait.
  Status st = bootstrap_.recv(peer, kUcxTagBase, &reply, sizeof(Hello) + kMaxWorkerAddress, Deadline::afterMs(-1));
  if (st.code() == collTimeout) return okStatus();
  const std::string peerName = bootstrap_.peer(peer).address.toString();
  COLL_TRY(st.withContext("receiving rank " + std::to_string(peer) + "'s UCX worker address"));
  Hello theirs{};
  COLL_TRY(parseHello(reply, peer, peerName, &theirs));
  if (theirs.ringBytes != conn->ringBytes() || theirs.messageBytes != conn->messageBytes()) {
    return makeError(collRemoteError,
                     "rank %d (%s) answered the UCX handshake with ring %llu / message %llu instead "
                     "of %llu / %llu; are both ranks running the same library version?",
                     peer, peerName.c_str(), static_cast<unsigned long long>(theirs.ringBytes),
                     static_cast<unsigned long long>(theirs.messageBytes),
                     static_cast<unsigned long long>(conn->ringBytes()),
                     static_cast<unsigned long long>(conn->messageBytes()));
  }
  ucp_ep_h ep = nullptr;
  COLL_TRY(createEndpoint(conn, peer, peerName, reply.data() + sizeof(Hello), &ep));
  conn->setEndpoint(ep);
  *ready = true;
  COLL_TRACE(bootstrap_.rank(), "UCX connection to rank %d (%s): endpoint ready", peer, peerName.c_str());
  return okStatus();
}

Status UcxNet::connect(int peer, Deadline deadline, std::unique_ptr<Connection>* out) {
  const int me = bootstrap_.rank();
  if (peer == me || peer < 0 || peer >= bootstrap_.nranks()) {
    return makeError(collInternalError, "rank %d: no UCX connection to rank %d", me, peer);
  }
  if (byRank_[peer] != nullptr)
    return makeError(collInternalError, "rank %d: a second UCX connection to rank %d", me, peer);
  const PeerInfo& info = bootstrap_.peer(peer);
  const std::string peerName = info.address.toString();
  const int32_t watchPid = info.hostHash == bootstrap_.peer(me).hostHash ? info.pid : 0;
  auto conn = std::make_unique<UcxConnection>(*this, me, peer, peerName, watchPid);
  // The lower rank announces its sizes and address and returns at once (its endpoint follows
  // when the reply arrives, see pollReply); the higher one waits for that announcement. So only
  // higher ranks wait for lower ones, and ranks connecting in any order cannot wait in a cycle.
  if (me < peer) {
    COLL_TRY(conn->allocate(options_.ringBytes, options_.messageBytes));
    // Registered before our address goes out: the peer may send as soon as it has it (our
    // handlers run only inside our own progress, after this returns).
    conn->setSendFlags(sendFlags_);
    byRank_[peer] = conn.get();  // the connection's destructor unregisters it, also on failure
    COLL_TRY(sendHello(peer, options_.ringBytes, options_.messageBytes, deadline));
  } else {
    std::vector<uint8_t> msg;
    COLL_TRY(bootstrap_.recv(peer, kUcxTagBase, &msg, sizeof(Hello) + kMaxWorkerAddress, deadline)
                 .withContext("receiving rank " + std::to_string(peer) + "'s UCX worker address"));
    Hello theirs{};
    COLL_TRY(parseHello(msg, peer, peerName, &theirs));
    if (theirs.ringBytes != options_.ringBytes || theirs.messageBytes != options_.messageBytes) {
      COLL_INFO(me,
                "UCX to rank %d: using its ring %llu / message %llu (COLL_UCX_RING_BYTES / COLL_UCX_MESSAGE_BYTES "
                "differ here)",
                peer, static_cast<unsigned long long>(theirs.ringBytes),
                static_cast<unsigned long long>(theirs.messageBytes));
    }
    // The lower rank's sizes are used by both: it may already be sending with them.
    COLL_TRY(conn->allocate(theirs.ringBytes, theirs.messageBytes));
    conn->setSendFlags(sendFlags_);
    byRank_[peer] = conn.get();
    ucp_ep_h ep = nullptr;
    COLL_TRY(createEndpoint(conn.get(), peer, peerName, msg.data() + sizeof(Hello), &ep));
    conn->setEndpoint(ep);
    COLL_TRY(sendHello(peer, theirs.ringBytes, theirs.messageBytes, deadline));
  }
  COLL_TRACE(me, "UCX connection to rank %d (%s): ring %llu, messages up to %llu", peer, peerName.c_str(),
             static_cast<unsigned long long>(conn->ringBytes()), static_cast<unsigned long long>(conn->messageBytes()));
  *out = std::move(conn);
  return okStatus();
}

Status createUcxNet(Bootstrap& bootstrap, int trafficClass, std::unique_ptr<NetTransport>* out) {
  UcxOptions options = ucxOptionsFromConfig();
  if (trafficClass != kTrafficClassUnset) {
    // Only UCX's verbs transports read the setting; without one UCX would warn that nothing used it.
    bool rdma = false;
    if (ucxAvailable(&rdma, nullptr) && rdma) {
      options.trafficClass = trafficClass;
    } else {
      COLL_INFO(bootstrap.rank(),
                "config.trafficClass %d is not applied by the ucx transport: UCX has no verbs transport here and its "
                "tcp has no class to set",
                trafficClass);
    }
  }
  std::unique_ptr<UcxNet> net;
  COLL_TRY(UcxNet::create(bootstrap, options, &net));
  *out = std::move(net);
  return okStatus();
}

}  // namespace coll
