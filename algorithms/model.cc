// The cost model's shared primitives: how many alphas a round's messages across hosts take, a
// round's cost, and steps whose slices stream through a rank.
#include "algorithms/model.h"

namespace coll {

namespace {

// The share of a message's inter-host alpha that is CPU time on an oversubscribed machine (below).
// Fitted on the emulated 4 x 2 cluster (2 CPUs, 8 and 64 B): recursive doubling's rounds of 8
// messages across hosts took 3.0 alphas each, Rabenseifner's of 4 (8 B) 1.4-1.5;
// 0.75 * 8 / 2 = 3 and 0.75 * 4 / 2 = 1.5.
constexpr double kInterMessageCpuShare = 0.75;

// The same share for the steps of a ring, where every connection carries bytes one way: fitted on
// 4 x 2 emulated hosts at 32 KiB (inter-host alpha probed at 32-35 us), where ring choices are
// decided: the flat ring's steps of 4 messages across hosts ran 34 us (0.5 * 4 / 2 = 1 alpha),
// hierarchical's ring across hosts, 8 messages a step (two flows per NIC), 66-70 us (2 alphas,
// about its bytes, 65.5 us at 1 Gbit/s). At 8-64 B on that cluster the ring's steps cost their
// floors under either share (one alpha a step in streamedSteps, at least one a crossing in
// interAlphas), so the 8-64 B fit above does not move them.
constexpr double kRingMessageCpuShare = 0.5;

double sliceBytesOf(const ModelInputs& in) {
  return static_cast<double>(in.sliceBytes != 0 ? in.sliceBytes : kDefaultSliceBytes);
}

}  // namespace

int log2Floor(int64_t v) {
  int k = 0;
  while ((int64_t{2} << k) <= v) ++k;
  return k;
}

int log2Ceil(int64_t v) {
  int k = 0;
  while ((int64_t{1} << k) < v) ++k;
  return k;
}

// A shared NIC handles the messages of the ranks crossing through it one after another: k ranks
// sending at once pay k alphas (their per-message cost, as well as their bytes); one rank's own
// concurrent messages (both directions of a torus ring) overlap, as on a NIC of its own. On a
// machine with fewer CPUs than ranks (an emulated cluster: namespaces whose "NICs" are veth pairs
// of one kernel) an inter-host alpha is mostly CPU time (system calls, the kernel's TCP stack,
// waking the receiver): the round's messages from that machine share its CPUs, not a NIC, so a
// round costs its messages' CPU time spread over the CPUs, and at least one alpha.
double interAlphas(const ModelInputs& in, const StepLoad& l, StepFlow flow) {
  const PlannerShape& sh = in.shape;
  if (sh.machineCpus > 0) {
    const double share = flow == StepFlow::Ring ? kRingMessageCpuShare : kInterMessageCpuShare;
    return std::max(1.0, share * l.machineInter * l.sendingShare / sh.machineCpus);
  }
  return std::max(1.0, std::min(l.interPerNic, static_cast<double>(sh.ranksPerNic)));
}

double stepCost(const ModelInputs& in, const StepLoad& l, double bytes) {
  double t = 0;
  if (l.intraPerRank > 0) t = in.intraHost.alpha + l.intraPerRank * bytes * in.intraHost.beta;
  if (l.interPerNic > 0) {
    t = std::max(t, interAlphas(in, l) * in.interHost.alpha + l.interPerNic * bytes * in.interHost.beta);
  }
  return t;
}

// The executor streams slices through a rank (dependencies are per slice), so within a phase the
// latency of successive slices overlaps their transfer (and their reduction, where
// reductionOverlaps): a step of `chunk` bytes costs the busiest resource's time for the whole
// chunk, or, when that is shorter, the latency of one slice through one hop (the next step's
// first slice waits for it).
double streamedSteps(const ModelInputs& in, double steps, const StepLoad& l, double interFraction, double chunk,
                     double reduce, StepFlow flow) {
  if (steps <= 0) return 0;
  const double s = std::min(chunk, sliceBytesOf(in));
  const double g = reduce > 0 ? in.gamma : 0;
  double ports = std::max(l.intraPerRank * chunk * in.intraHost.beta, l.interPerNic * chunk * in.interHost.beta);
  // On an oversubscribed machine an inter-host alpha is CPU time the receiving rank spends on each
  // message, one message after another as bytes cross a wire: a step with a hop across hosts
  // takes at least one alpha, whatever share of its hops cross (a ring advances at the pace of
  // its links across hosts; rounds whose every hop crosses pay it in `hop` already). A link that
  // carries a message in only some steps (a ring of fewer elements than ranks) is busy that
  // share of them.
  if (in.shape.machineCpus > 0 && l.interPerNic > 0) ports = std::max(ports, l.sendingShare * in.interHost.alpha);
  const double busy = in.reductionOverlaps ? std::max(ports, reduce * chunk * g) : ports + reduce * chunk * g;
  const double f = interFraction;
  // A step of one slice does not pipeline: it ends when the last message through the busiest
  // link arrives, after every message sharing that link (their bytes as well as their alphas).
  const bool oneSlice = chunk <= s;
  const double intraBytes = s * (oneSlice ? std::max(1, l.intraPerRank) : 1);
  const double interBytes = s * (oneSlice ? std::max(1.0, l.interPerNic) : 1.0);
  // On an oversubscribed machine a ring's messages across hosts cost their CPU time or their
  // bytes on the NIC, whichever is longer, not both: while the CPUs handle one step's messages the
  // NIC (here a token bucket, which fills while the link idles) sends what the previous handed
  // it. Measured on 4 x 2 emulated hosts at 32 KiB (inter-host alpha 32-35 us): the flat ring's
  // steps ran at their bytes alone, 34 us for 32.8 us of bytes; hierarchical's ring across hosts
  // at 66-70 us for 65.5 us of bytes, where the sum priced it at 102 + 65.5 us and the planner took
  // hierarchical's recursive doubling (555 us measured) or the flat ring (485 us) over it (435 us).
  // Pairwise exchanges pay both: recursive doubling's rounds there ran their bytes + 1-1.5 alphas.
  const double interAlpha = interAlphas(in, l, flow) * in.interHost.alpha;
  const double interHop = flow == StepFlow::Ring && in.shape.machineCpus > 0
                              ? std::max(interAlpha, interBytes * in.interHost.beta)
                              : interAlpha + interBytes * in.interHost.beta;
  const double hop = (1 - f) * (in.intraHost.alpha + intraBytes * in.intraHost.beta) + f * interHop;
  return steps * std::max(busy, hop + s * g);
}

double streamedStep(const ModelInputs& in, const StepLoad& l, double chunk, double reduce) {
  return streamedSteps(in, 1, l, l.interPerNic > 0 ? 1.0 : 0.0, chunk, reduce);
}

}  // namespace coll
