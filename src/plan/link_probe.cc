// The planner's link model: knobs, else the probe, else the built-in leads (see link_probe.h).
#include "src/plan/link_probe.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "src/base/config.h"
#include "src/base/log.h"
#include "src/kernels/reduce.h"

namespace coll {

const BoolKnob kLinkProbe("COLL_LINK_PROBE", "1",
                          "1: measure the link model's parameters at communicator creation (a short ping-pong per link "
                          "class, well under a second); 0: COLL_LINK_* knobs or built-in leads.",
                          {KnobSection::PlannerExecutor, 30});
const StringKnob kLinkIntraAlphaUs(
    "COLL_LINK_INTRA_ALPHA_US", "",
    "Planner: latency of one hop between ranks of a host, microseconds (default: probed).",
    {KnobSection::PlannerExecutor, 40});
const StringKnob kLinkIntraGbps(
    "COLL_LINK_INTRA_GBPS", "",
    "Planner: bandwidth of one hop between ranks of a host, GB/s = 1e9 bytes/s (default: probed).",
    {KnobSection::PlannerExecutor, 50});
const StringKnob kLinkInterAlphaUs("COLL_LINK_INTER_ALPHA_US", "",
                                   "Planner: latency of one message between hosts, microseconds (default: probed).",
                                   {KnobSection::PlannerExecutor, 60});
const StringKnob kLinkInterGbps("COLL_LINK_INTER_GBPS", "",
                                "Planner: bandwidth of one network link (NIC) between hosts, GB/s (default: probed; "
                                "the probe measures one pair of ranks, i.e. one NIC).",
                                {KnobSection::PlannerExecutor, 70});
const StringKnob kLinkGammaGbps("COLL_LINK_GAMMA_GBPS", "",
                                "Planner: local reduction speed, GB/s of reduced data (default: probed).",
                                {KnobSection::PlannerExecutor, 90});

namespace {

// Swaps a communicator's wait policy for one scope (the link probe's).
class ScopedWaitPolicy {
 public:
  ScopedWaitPolicy(WaitPolicy* slot, const WaitPolicy& policy) : slot_(slot), saved_(*slot) { *slot_ = policy; }
  ~ScopedWaitPolicy() { *slot_ = saved_; }
  ScopedWaitPolicy(const ScopedWaitPolicy&) = delete;
  ScopedWaitPolicy& operator=(const ScopedWaitPolicy&) = delete;

 private:
  WaitPolicy* slot_;
  WaitPolicy saved_;
};

// A COLL_LINK_* knob: a positive number, or unset (0).
Status linkKnob(const StringKnob& knob, double* out) {
  *out = 0;
  const std::string text = knob.get();
  if (text.empty()) return okStatus();
  char* end = nullptr;
  const double v = strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(v > 0) || !std::isfinite(v)) {
    return makeError(collInvalidUsage, "%s=%s is not a positive number", knob.name(), text.c_str());
  }
  *out = v;
  return okStatus();
}

double secondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

Status LinkProbe::setLinkModel(PlannerInputs* inputs, const PlannerInputs* inherited) {
  PlannerInputs& in = *inputs;
  double intraAlphaUs, intraGBps, interAlphaUs, interGBps, gammaGBps;
  COLL_TRY(linkKnob(kLinkIntraAlphaUs, &intraAlphaUs));
  COLL_TRY(linkKnob(kLinkIntraGbps, &intraGBps));
  COLL_TRY(linkKnob(kLinkInterAlphaUs, &interAlphaUs));
  COLL_TRY(linkKnob(kLinkInterGbps, &interGBps));
  COLL_TRY(linkKnob(kLinkGammaGbps, &gammaGBps));

  // What each class needs measured: a class that exists here and that the knobs leave open.
  // A stream lane takes its parent's measured model: the same ranks over the same links.
  const bool probe = kLinkProbe.get() && topo_.nranks > 1 && inherited == nullptr;
  const bool intraExists = in.shape.maxLocal > 1;
  const bool needIntra = probe && intraExists && (intraAlphaUs == 0 || intraGBps == 0);
  const bool needInter = probe && topo_.nhosts > 1 && (interAlphaUs == 0 || interGBps == 0);
  const bool needGamma = probe && gammaGBps == 0;
  Measured measured;
  if (needIntra || needInter || needGamma) {
    COLL_TRY(
        probeLinks(needIntra, needInter, needGamma, &measured).withContext("link probe (COLL_LINK_PROBE=0 skips it)"));
  }
  auto pick = [](double knob, double fromKnob, double probed, double fallback, const char** from) {
    if (knob > 0) return *from = "knob", fromKnob;
    if (probed > 0) return *from = "probe", probed;
    return *from = "default", fallback;
  };
  auto inv = [](double gbps) { return gbps > 0 ? 1e-9 / gbps : 0.0; };
  const char *fromIa, *fromIb, *fromEa, *fromEb, *fromG;
  in.intraHost.alpha = pick(intraAlphaUs, intraAlphaUs * 1e-6, measured.intraAlpha, kDefaultIntraLink.alpha, &fromIa);
  in.intraHost.beta = pick(intraGBps, inv(intraGBps), measured.intraBeta, kDefaultIntraLink.beta, &fromIb);
  in.interHost.alpha = pick(interAlphaUs, interAlphaUs * 1e-6, measured.interAlpha, kDefaultInterLink.alpha, &fromEa);
  in.interHost.beta = pick(interGBps, inv(interGBps), measured.interBeta, kDefaultInterLink.beta, &fromEb);
  in.gamma = pick(gammaGBps, inv(gammaGBps), measured.gamma, kDefaultGamma, &fromG);
  if (inherited != nullptr) {
    in.intraHost = inherited->intraHost;
    in.interHost = inherited->interHost;
    in.gamma = inherited->gamma;
    return okStatus();
  }
  if (rank() == 0) {
    COLL_INFO(rank(),
              "link model: intra-host %.2f us (%s) %.2f GB/s (%s); inter-host %.2f us (%s) %.3f GB/s per NIC "
              "(%s), %s; reduction %.2f GB/s (%s)",
              in.intraHost.alpha * 1e6, fromIa, 1e-9 / in.intraHost.beta, fromIb, in.interHost.alpha * 1e6, fromEa,
              1e-9 / in.interHost.beta, fromEb,
              in.nicsPerHost == 0 ? "one NIC per rank" : (std::to_string(in.nicsPerHost) + " NIC(s) per host").c_str(),
              1e-9 / in.gamma, fromG);
  }
  return okStatus();
}

Status LinkProbe::pingPong(int peer, bool initiator, uint64_t bigBytes, uint64_t spins, double* alpha, double* beta) {
  // The smallest of many round trips: with more ranks than cores, peers' activity only ever adds
  // to a sample, and the model wants the link's own latency.
  constexpr int kWarm = 2, kSmall = 24, kBig = 2;
  // The pair polls about one hop's time before it yields, oversubscribed or not: yielding at once
  // (the oversubscribed policy) measured the scheduler, an intra-host alpha anywhere from 0.3 to
  // 100 us from launch to launch (8 ranks, 2 cores). Longer spins cost more than they save when
  // the two share a core: 2000 polls on shared memory measured 62 us per hop.
  WaitPolicy pair = channel_.waitPolicy();
  if (!kSpinCount.raw()) pair.spins = spins;
  ScopedWaitPolicy scoped(&channel_.waitPolicy(), pair);
  std::vector<std::byte> big(peer >= 0 ? bigBytes : 0), small(8);
  // Ranks outside the pair run empty batches in step, so every rank's call count (which names
  // window halves and published progress) stays the same.
  auto xfer = [&](bool send, std::vector<std::byte>& buf) {
    return channel_.transfer(send, peer, buf.data(), buf.size());
  };
  std::vector<double> rtts;
  for (int i = 0; i < kWarm + kSmall; ++i) {
    const auto t0 = Clock::now();
    COLL_TRY(xfer(initiator, small));
    COLL_TRY(xfer(!initiator, small));
    if (i >= kWarm) rtts.push_back(secondsSince(t0));
  }
  double bigBest = 0;
  for (int i = 0; i < 1 + kBig; ++i) {  // the first one warms the connection (TCP slow start)
    const auto t0 = Clock::now();
    COLL_TRY(xfer(initiator, big));
    COLL_TRY(xfer(!initiator, small));
    const double t = secondsSince(t0);
    if (i >= 1 && (bigBest == 0 || t < bigBest)) bigBest = t;
  }
  if (!initiator || peer < 0) return okStatus();
  // The fastest round trip: on a busy machine the others measure the neighbours, not the link.
  *alpha = *std::min_element(rtts.begin(), rtts.end()) / 2;
  // The ack's round trip is latency, not bandwidth; never let noise make the link look free.
  *beta = std::max(bigBest - 2 * *alpha, bigBest / 4) / static_cast<double>(bigBytes);
  return okStatus();
}

Status LinkProbe::probeLinks(bool intra, bool inter, bool gamma, Measured* out) {
  // Polls before a measuring rank yields: about one round trip on shared memory; a socket's poll
  // is a recv() per socket, so fewer (200 measured 500 us per hop when the pair shared a core).
  constexpr uint64_t kShmProbeSpins = 200, kNetProbeSpins = 20;
  const auto start = Clock::now();
  Measured mine;
  // Intra: the first two ranks of the first host holding more than one. Inter: rank 0 and the
  // first rank of another host. The same pairs on every rank, intra first, so nobody waits on a
  // rank that is busy with the other pair in the opposite order.
  std::vector<int32_t> perHost(static_cast<size_t>(topo_.nhosts));
  for (int32_t h : topo_.hostOfRank) ++perHost[static_cast<size_t>(h)];
  int intraA = -1, intraB = -1, interB = -1;
  for (int r = 0; r < topo_.nranks; ++r) {
    const int32_t h = topo_.hostOfRank[static_cast<size_t>(r)];
    if (intraA < 0 && perHost[static_cast<size_t>(h)] > 1) {
      intraA = r;
    } else if (intraA >= 0 && intraB < 0 && topo_.sameHost(intraA, r)) {
      intraB = r;
    }
    if (interB < 0 && !topo_.sameHost(0, r)) interB = r;
  }
  if (intra && intraB >= 0) {
    const int peer = rank() == intraA ? intraB : rank() == intraB ? intraA : -1;
    const uint64_t spins = haveShm_ ? kShmProbeSpins : kNetProbeSpins;
    COLL_TRY(pingPong(peer, rank() == intraA, 1 << 20, spins, &mine.intraAlpha, &mine.intraBeta));
  }
  if (inter && interB >= 0) {
    const int peer = rank() == 0 ? interB : rank() == interB ? 0 : -1;
    COLL_TRY(pingPong(peer, rank() == 0, 2 << 20, kNetProbeSpins, &mine.interAlpha, &mine.interBeta));
  }
  if (gamma && rank() == 0) {
    constexpr size_t kFloats = 256 * 1024;
    std::vector<float> a(kFloats, 1.0f), b(kFloats, 2.0f);
    double best = 0;
    for (int i = 0; i < 4; ++i) {
      const auto t0 = Clock::now();
      kernels::reduce2(a.data(), a.data(), b.data(), kFloats, collFloat32, collSum);
      const double t = secondsSince(t0);
      if (i > 0 && (best == 0 || t < best)) best = t;
    }
    mine.gamma = std::max(best, 1e-9) / (kFloats * sizeof(float));
  }
  // Everyone takes the measuring ranks' values: plans must be identical on every rank.
  std::vector<Measured> all(static_cast<size_t>(topo_.nranks));
  {
    // Ranks outside the pairs wait here while the pairs measure. Sleeping on the links, every call
    // a pair completes would wake them, and the pair would wait for the woken ranks to leave the
    // CPUs; napping, they stay out of the way.
    WaitPolicy napping = channel_.waitPolicy();
    napping.spins = 0, napping.yields = 0, napping.napUs = 1000;
    ScopedWaitPolicy scoped(&channel_.waitPolicy(), napping);
    COLL_TRY(channel_.allGather(&mine, all.data(), sizeof(Measured)));
  }
  // Remote bytes: a value that is not a plausible time is ignored (the default stays).
  auto sane = [](double v) { return std::isfinite(v) && v > 0 && v < 1 ? v : 0.0; };
  *out = Measured{};
  if (intraA >= 0) out->intraAlpha = sane(all[static_cast<size_t>(intraA)].intraAlpha);
  if (intraA >= 0) out->intraBeta = sane(all[static_cast<size_t>(intraA)].intraBeta);
  out->interAlpha = sane(all[0].interAlpha);
  out->interBeta = sane(all[0].interBeta);
  out->gamma = sane(all[0].gamma);
  if (rank() == 0) COLL_INFO(rank(), "link probe took %.1f ms", secondsSince(start) * 1e3);
  return okStatus();
}

}  // namespace coll
