#!/bin/bash
# Hierarchical vs flat ring All-Reduce on emulated clusters (bench/emucluster): 2 nodes x 4 ranks,
# then 4 nodes x 2 ranks, RATE per node link, ranks in blocks (the ring crosses each node link once
# per direction). allreduce_perf at 64 MiB with COLL_ALGO=allreduce:ring and allreduce:hier
# alternated ROUNDS times; medians of time and busbw; speedup = ring time / hier time.
# Targets: >= 1.5 on 2x4 (the bandwidth model's ceiling is 1.75), >= 1.0 on 4x2. Root.
# usage: bench/compare_hier_emucluster.sh   (env: BUILD, ROUNDS=3, RATE=1gbit, ITERS=4, WARMUP=2,
#        SETUPS="2x4 4x2", ALGOS="ring hier", SIZE=64M, ALGO_FORMAT="allreduce:%s" the COLL_ALGO value)
set -euo pipefail
ROUNDS=${ROUNDS:-3}
source "$(dirname "$0")/compare_lib.sh"
RATE=${RATE:-1gbit}
ITERS=${ITERS:-4}
WARMUP=${WARMUP:-$LANES_WARMUP}  # see compare_lib.sh
SETUPS=${SETUPS:-2x4 4x2}
ALGOS=${ALGOS:-ring hier}
SIZE=${SIZE:-64M}
ALGO_FORMAT=${ALGO_FORMAT:-allreduce:%s}
EMU=$ROOT/bench/emucluster
need "$COLLRUN" "$PERF"
[ "$(id -u)" = 0 ] || { echo "needs root (bench/emucluster uses ip netns)" >&2; exit 2; }
export COLLRUN

bytes=$(numfmt --from=iec "$SIZE")

out=$(results_dir compare_hier_emucluster)
echo "compare_hier_emucluster: allreduce_perf $SIZE float sum, $ALGOS alternated $ROUNDS rounds, $RATE node links; raw output in $out"
unset COLL_ALGO COLL_HOSTID COLL_TRANSPORT
summary=$out/summary.txt
: >"$summary"
for setup in $SETUPS; do
  nodes=${setup%x*} per=${setup#*x}
  name=cmphier$$_$nodes
  emu_down_on_exit "$name"
  echo "== $setup: $nodes nodes x $per ranks" | tee -a "$summary"
  "$EMU" up "$name" "$nodes" --rate "$RATE" | tee "$out/$setup-links.txt"
  "$EMU" status "$name" >>"$out/$setup-links.txt"
  for ((round = 1; round <= ROUNDS; ++round)); do
    for algo in $ALGOS; do
      f=$out/$setup-$algo-r$round.txt
      # shellcheck disable=SC2059
      COLL_DEBUG=INFO COLL_ALGO=$(printf "$ALGO_FORMAT" "$algo") "$EMU" run "$name" --ranks-per-node "$per" --timeout 900 -- \
        "$PERF" -b "$SIZE" -e "$SIZE" -d float -o sum -n "$ITERS" -w "$WARMUP" -c 0 >"$f" 2>&1 ||
        echo "  $setup $algo round $round FAILED (see $f)"
      printf '  round %d %-5s %s us\n' "$round" "$algo" "$(column "$f" "$bytes" 6)"
    done
  done
  "$EMU" down "$name"
  unset time_ring time_hier
  for algo in $ALGOS; do
    t=$(for f in "$out/$setup-$algo"-r*.txt; do column "$f" "$bytes" 6; done | median)
    # busbw from the median time (the table rounds it to 0.01 GB/s): 2(p-1)/p bytes per rank.
    b=$(awk -v t="$t" -v n="$bytes" -v p=$((nodes * per)) 'BEGIN { if (t + 0 > 0) printf "%.3f", 2 * (p - 1) / p * n / (t * 1e3); else print "nan" }')
    lo=$(for f in "$out/$setup-$algo"-r*.txt; do column "$f" "$bytes" 6; done | sort -g | head -n 1)
    hi=$(for f in "$out/$setup-$algo"-r*.txt; do column "$f" "$bytes" 6; done | sort -g | tail -n 1)
    printf '  %-5s median time %s us (min %s, max %s), busbw %s GB/s\n' "$algo" "$t" "$lo" "$hi" "$b" | tee -a "$summary"
    declare "time_$algo=$t"
  done
  # What the links allow: each node link carries 2(p-1)/p of the data for the ring (one crossing
  # per direction) and 2(H-1)/H for hier (H nodes), at RATE (tc's units: 1gbit = 1e9 bit/s).
  awk -v r="$RATE" -v n="$bytes" -v p=$((nodes * per)) -v h="$nodes" 'BEGIN {
    v = r + 0; u = tolower(r); sub(/^[0-9.]+/, "", u)
    m = (u ~ /^k/) ? 1e3 : (u ~ /^m/) ? 1e6 : (u ~ /^g/) ? 1e9 : (u ~ /^t/) ? 1e12 : 1
    if (u ~ /bps$/) m *= 8
    bps = v * m / 8
    printf "  link-bound times at %s: ring %.0f us, hier %.0f us (ceiling of the speedup %.2f)\n",
      r, 2 * (p - 1) / p * n / bps * 1e6, 2 * (h - 1) / h * n / bps * 1e6, ((p - 1) / p) / ((h - 1) / h) }' |
    tee -a "$summary"
  if [ -n "${time_ring:-}" ] && [ -n "${time_hier:-}" ]; then
    target=1.0
    [ "$setup" != 2x4 ] || target=1.5
    speedup=$(ratio "$time_ring" "$time_hier")
    verdict=$(awk -v s="$speedup" -v t="$target" 'BEGIN { print (s != "nan" && s >= t) ? "meets" : "MISSES" }')
    echo "  speedup hier over ring (ring time / hier time): $speedup ($verdict the target >= $target)" | tee -a "$summary"
  fi
done
echo "summary in $summary"
