#!/bin/bash
# collsim against measured runs on an emulated two-tier fat-tree (bench/emucluster up --leaves):
# NODES nodes x 1 rank in LEAVES leaves of consecutive nodes, node links at RATE each way, each
# leaf's uplink at (nodes per leaf x RATE / OVERSUB) each way. For every All-Reduce algorithm in
# ALGOS (COLL_ALGO=allreduce:<algo>): allreduce_perf SIZE float sum over tcp, algorithms
# alternated ROUNDS times, the median time; then collsim with the matching fabric (fattree2,
# --leaf-ports = nodes per leaf, --uplinks 1) and the measured parameters:
#   --nic     the median iperf3 node-link rate measured when the cluster came up (goodput);
#   --oversub OVERSUB, as configured: uplink and node links are shaped alike, so their goodputs
#             keep the ratio; the uplinks' iperf3 sum (4 pairs at once) is printed as a check but
#             not used, since a busy CPU lowers it (302 instead of 378 Mbit/s in one run);
#   --alpha-inter  the per-message latency that makes collsim's ring at SMALL equal the measured
#             median ring time at SMALL (collsim's time is linear in it: solved from two runs).
# The default ALGOS are the All-Reduce algorithms that apply to 8 hosts x 1 rank (direct needs one
# host, hier more than one rank per host, twoshot is the compressed All-Reduce).
# LEAVES=1 is the control: one bridge, no uplinks, collsim's non-blocking fabric.
# One calibration for all algorithms; nothing is fitted per algorithm. Prints a table (algorithm,
# measured median and fastest round, simulated, simulated / median, the bytes that crossed the
# uplinks per call measured on the uplinks' counters against collsim's) and exits 1 when any
# median is more than TOL (0.15) off. The ring is the control: its model is a plain chain of
# full-rate messages, so a ring far off means the machine was too busy for the others to mean much
# (other processes on these 2 cores slow every rank; the fastest round is then the better guide).
# Root; exit 77 where network namespaces cannot be made (bench/emucluster's convention).
# usage: bench/compare_fattree_emucluster.sh   (env: BUILD, ROUNDS=3, RATE=200mbit, NODES=8,
#        LEAVES=2, OVERSUB=2, SIZE=16M, SMALL=8, ITERS=3, WARMUP=2, SMALL_ITERS=50,
#        ALGOS="ring tree recdoubling rabenseifner torus", TOL=0.15, CC (emucluster --cc),
#        SLICE (COLL_SLICE_BYTES and collsim --slice), EMUCLUSTER_LATENCY)
set -euo pipefail
ROUNDS=${ROUNDS:-3}
source "$(dirname "$0")/compare_lib.sh"
RATE=${RATE:-200mbit}
NODES=${NODES:-8}
LEAVES=${LEAVES:-2}
OVERSUB=${OVERSUB:-2}
SIZE=${SIZE:-16M}
SMALL=${SMALL:-8}
ITERS=${ITERS:-3}
WARMUP=${WARMUP:-$LANES_WARMUP}  # see compare_lib.sh
SMALL_ITERS=${SMALL_ITERS:-50}
ALGOS=${ALGOS:-ring tree recdoubling rabenseifner torus}
TOL=${TOL:-0.15}
CC=${CC:-}
SLICE=${SLICE:-}  # COLL_SLICE_BYTES for the runs and collsim's --slice (default: the library's)
EMU=$ROOT/bench/emucluster
COLLSIM=$BUILD/bench/collsim
need "$COLLRUN" "$PERF" "$COLLSIM"
if [ "$(id -u)" != 0 ]; then
  echo "needs root (bench/emucluster uses ip netns)" >&2
  exit 77
fi
command -v iperf3 >/dev/null || { echo "needs iperf3 (the link rates are measured)" >&2; exit 77; }
export COLLRUN

[[ "$RATE" =~ ^([0-9]+)mbit$ ]] || { echo "RATE=$RATE: give it in mbit, e.g. 200mbit" >&2; exit 2; }
rateMbit=${BASH_REMATCH[1]}
perLeaf=$(((NODES + LEAVES - 1) / LEAVES))
uplinkRate=$(awk -v r="$rateMbit" -v p="$perLeaf" -v o="$OVERSUB" 'BEGIN { printf "%dmbit", r * p / o }')
bytes=$(numfmt --from=iec "$SIZE")
smallBytes=$(numfmt --from=iec "$SMALL")
name=cmpfat$$
emu_down_on_exit "$name"

out=$(results_dir compare_fattree_emucluster)
summary=$out/summary.txt
: >"$summary"
echo "compare_fattree_emucluster: $NODES nodes x 1 rank, $LEAVES leaves, node links $RATE, uplinks $uplinkRate" \
  "(oversubscription $OVERSUB); allreduce_perf $SIZE float sum over tcp, algorithms ($ALGOS) alternated" \
  "$ROUNDS rounds; raw output in $out" | tee -a "$summary"
unset COLL_ALGO COLL_HOSTID COLL_TRANSPORT COLL_TCP_RAILS
fabric=(--fabric fattree2 --leaf-ports "$perLeaf" --uplinks 1)
tiers=(--leaves "$LEAVES" --uplink-rate "$uplinkRate")
if [ "$LEAVES" = 1 ]; then
  fabric=(--fabric nonblocking)
  tiers=()
fi
[ -z "$CC" ] || tiers+=(--cc "$CC")
set +e
"$EMU" up "$name" "$NODES" --rate "$RATE" "${tiers[@]}" | tee "$out/links.txt"
rc=${PIPESTATUS[0]}
set -e
[ "$rc" = 0 ] || exit "$rc"

# The measured rates (Mbit/s of TCP goodput): medians over the node links' up and down, and over
# the uplinks' up and down.
nicMbit=$(grep -E '^node [0-9]+: up' "$out/links.txt" | sed -E 's/.* up ([0-9.]+) Mbit\/s, down ([0-9.]+) .*/\1\n\2/' | median)
if [ "$LEAVES" = 1 ]; then
  upMbit=$(awk -v n="$nicMbit" -v p="$perLeaf" -v o="$OVERSUB" 'BEGIN { print n * p / o }')
else
  upMbit=$({ grep -E '^leaf [0-9]+: uplink' "$out/links.txt" || true; } |
    sed -E 's/.* up ([0-9.]+) Mbit\/s, down ([0-9.]+) .*/\1\n\2/' | median)
fi
[ "$nicMbit" != nan ] && [ "$upMbit" != nan ] || { echo "the link measurement failed (see $out/links.txt)" >&2; exit 1; }
nicGBps=$(awk -v m="$nicMbit" 'BEGIN { printf "%.6f", m / 8000 }')
simOversub=$OVERSUB
measuredOversub=$(awk -v n="$nicMbit" -v u="$upMbit" -v p="$perLeaf" 'BEGIN { printf "%.3f", p * n / u }')
echo "measured: node link $nicMbit Mbit/s ($nicGBps GB/s), uplink $upMbit Mbit/s (oversubscription as measured $measuredOversub; collsim gets $OVERSUB)" |
  tee -a "$summary"

# Bytes that left every leaf through its uplink so far (the up<l> ends' transmit counters).
uplinkBytes() {
  local l sum=0 b
  for ((l = 0; l < LEAVES; ++l)); do
    b=$(ip netns exec "$name-sw" cat "/sys/class/net/up$l/statistics/tx_bytes" 2>/dev/null || echo 0)
    sum=$((sum + b))
  done
  echo "$sum"
}

simSlice=()
if [ -n "$SLICE" ]; then
  export COLL_SLICE_BYTES=$SLICE
  simSlice=(--slice "$SLICE")
fi

perfRun() {  # perfRun ALGO SIZE ITERS WARMUP FILE
  COLL_DEBUG=INFO COLL_NET=tcp COLL_HEARTBEAT_TIMEOUT_MS=${COLL_HEARTBEAT_TIMEOUT_MS:-60000} COLL_ALGO="allreduce:$1" "$EMU" run "$name" --timeout 900 -- \
    "$PERF" -b "$2" -e "$2" -d float -o sum -n "$3" -w "$4" -c 0 >"$5" 2>&1 ||
    echo "  $1 at $2 bytes FAILED (see $5)"
}

read -r -a algos <<<"$ALGOS"
progress_start $((ROUNDS * (${#algos[@]} + 1)))
for ((round = 1; round <= ROUNDS; ++round)); do
  perfRun ring "$smallBytes" "$SMALL_ITERS" 5 "$out/small-ring-r$round.txt"
  progress "round $round: ring at $SMALL bytes: $(column "$out/small-ring-r$round.txt" "$smallBytes" 6) us"
  # Rotate the order every round, so no algorithm always runs first or after the same one.
  for ((a = 0; a < ${#algos[@]}; ++a)); do
    algo=${algos[(a + round - 1) % ${#algos[@]}]}
    f=$out/$algo-r$round.txt
    b0=$(uplinkBytes)
    perfRun "$algo" "$bytes" "$ITERS" "$WARMUP" "$f"
    # Per call: allreduce_perf makes WARMUP + ITERS calls out of place, then as many in place (the
    # few small calls around them are left in, and so are headers, ACKs and retransmissions).
    echo "$(($(uplinkBytes) - b0)) $((2 * (ITERS + WARMUP)))" | awk '{ printf "%.0f\n", $1 / $2 }' >"$out/$algo-r$round.uplink"
    progress "round $round: $algo: $(column "$f" "$bytes" 6) us"
  done
done
"$EMU" down "$name"

simTime() {  # simTime ALGO BYTES ALPHA_US [JSON] -> collsim's time in us (and its JSON kept in JSON)
  "$COLLSIM" -c all_reduce -n "$NODES" -g 1 -b "$2" -e "$2" -d float --algo "$1" "${fabric[@]}" \
    --oversub "$simOversub" --nic "$nicGBps" --alpha-inter "$3" "${simSlice[@]}" --json - | tee "${4:-/dev/null}" |
    python3 -c 'import json, sys; print("%.3f" % json.load(sys.stdin)["results"][0]["time_us"])'
}
# simUplinkBytes JSON: the bytes collsim sends leaf to spine, over all leaves.
simUplinkBytes() {
  python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))["results"][0]
print("%.0f" % sum(t["bytes"] for t in r["tiers"] if t["tier"] == "leaf-up"))' "$1"
}

# Per-message latency: collsim's ring at SMALL is t0 + k * alpha; solve for the measured time.
smallMeas=$(for f in "$out"/small-ring-r*.txt; do column "$f" "$smallBytes" 6; done | median)
s0=$(simTime ring "$smallBytes" 0)
s1=$(simTime ring "$smallBytes" 100)
alpha=$(awk -v m="$smallMeas" -v a="$s0" -v b="$s1" 'BEGIN { k = (b - a) / 100; v = (m - a) / k; if (v < 0) v = 0; printf "%.3f", v }')
echo "calibration: ring at $SMALL bytes measured $smallMeas us (median); collsim's per-message latency $alpha us" |
  tee -a "$summary"

printf '\n| algorithm | measured median (us) | fastest round (us) | simulated (us) | simulated / median | within %s | simulated / fastest | uplink MB per call, measured / simulated |\n|---|---:|---:|---:|---:|---|---:|---|\n' \
  "$(awk -v t="$TOL" 'BEGIN { printf "%d%%", t * 100 }')" | tee -a "$summary"
bad=0
for algo in "${algos[@]}"; do
  meas=$(for f in "$out/$algo"-r*.txt; do column "$f" "$bytes" 6; done | median)
  best=$(for f in "$out/$algo"-r*.txt; do column "$f" "$bytes" 6; done | sort -g | head -n 1)
  sim=$(simTime "$algo" "$bytes" "$alpha" "$out/collsim-$algo.json" 2>"$out/collsim-$algo.err") || sim=nan
  upMeas=$(cat "$out/$algo"-r*.uplink 2>/dev/null | median)
  upSim=$(simUplinkBytes "$out/collsim-$algo.json" 2>/dev/null || echo nan)
  upCol=$(awk -v m="$upMeas" -v s="$upSim" 'BEGIN { if (m == "nan" || s == "nan") print "-"; else printf "%.1f / %.1f", m / 1e6, s / 1e6 }')
  r=$(ratio "$sim" "$meas")
  ok=$(awk -v r="$r" -v t="$TOL" 'BEGIN { print (r != "nan" && r >= 1 - t && r <= 1 + t) ? "yes" : "NO" }')
  [ "$ok" = yes ] || bad=$((bad + 1))
  printf '| %s | %.0f | %.0f | %.0f | %s | %s | %s | %s |\n' "$algo" "$meas" "${best:-0}" "$sim" "$r" "$ok" \
    "$(ratio "$sim" "${best:-nan}")" "$upCol" | tee -a "$summary"
  all=$(for f in "$out/$algo"-r*.txt; do column "$f" "$bytes" 6; done | tr '\n' ' ')
  echo "  $algo: measured per round: $all" >>"$out/rounds.txt"
done
cat "$out/rounds.txt" | tee -a "$summary"
echo "reproduce collsim: $COLLSIM -c all_reduce -n $NODES -g 1 -b $SIZE -e $SIZE ${fabric[*]}" \
  "--oversub $simOversub --nic $nicGBps --alpha-inter $alpha ${simSlice[*]} --algo ALGO" |
  tee -a "$summary"
if [ "${algos[0]}" = ring ] || [[ " $ALGOS " == *" ring "* ]]; then
  ringMeas=$(for f in "$out"/ring-r*.txt; do column "$f" "$bytes" 6; done | median)
  ringSim=$(simTime ring "$bytes" "$alpha")
  awk -v r="$(ratio "$ringSim" "$ringMeas")" -v t="$TOL" 'BEGIN { if (r == "nan" || r < 1 - t) exit 1 }' ||
    echo "warning: the ring (the control) is off too: the machine was busy; look at the fastest rounds" | tee -a "$summary"
fi
echo "summary in $summary"
if [ "$bad" -gt 0 ]; then
  echo "$bad algorithm(s) more than $TOL off" >&2
  exit 1
fi
