#!/bin/bash
# tcp multi-rail on an emulated cluster (bench/emucluster --rails 2): 2 nodes x 1 rank, each node
# with two links (rails) of RATE each way. allreduce_perf at SIZE over tcp with COLL_TCP_RAILS=1
# and 2 alternated ROUNDS times; medians of the time; speedup = one rail's time / two rails'.
# Target: >= 1.8 (the links allow 2). Both runs use COLL_NSOCKS_PERPEER=4 sockets (2 per rail with
# two rails): one flow per tbf-shaped link leaves some of it idle on this 2-core machine. Root.
# Uneven rails (RAIL_RATE below RATE: the second link slower): three runs alternate, one rail (the
# fast one), two rails striped equally (COLL_TCP_RAIL_MBPS unset: veths report equal speeds), and
# two rails weighted by COLL_TCP_RAIL_MBPS from the two rates; the links allow weighted / equal =
# (RATE + RAIL_RATE) / (2 * RAIL_RATE), 1.5 for 1gbit and 500mbit.
# usage: bench/compare_tcp_rails_emucluster.sh   (env: BUILD, ROUNDS=3, RATE=1gbit, RAIL_RATE=RATE,
#        ITERS=4, WARMUP=2, SIZE=64M, RAILS="1 2", COLL_NSOCKS_PERPEER=4)
set -euo pipefail
ROUNDS=${ROUNDS:-3}
source "$(dirname "$0")/compare_lib.sh"
RATE=${RATE:-1gbit}
ITERS=${ITERS:-4}
WARMUP=${WARMUP:-$LANES_WARMUP}  # see compare_lib.sh
SIZE=${SIZE:-64M}
RAIL_RATE=${RAIL_RATE:-$RATE}
mbit() { numfmt --from=si "$(tr a-z A-Z <<<"${1%bit}")" | awk '{ printf "%d", $1 / 1e6 }'; }
if [ "$RAIL_RATE" = "$RATE" ]; then
  RAILS=${RAILS:-1 2}
else
  RAILS=${RAILS:-1 2eq 2w}
  WEIGHTS=$(mbit "$RATE"),$(mbit "$RAIL_RATE")
fi
EMU=$ROOT/bench/emucluster
need "$COLLRUN" "$PERF"
[ "$(id -u)" = 0 ] || { echo "needs root (bench/emucluster uses ip netns)" >&2; exit 2; }
export COLLRUN

export COLL_NSOCKS_PERPEER=${COLL_NSOCKS_PERPEER:-4}
bytes=$(numfmt --from=iec "$SIZE")
name=cmprails$$
emu_down_on_exit "$name"

out=$(results_dir compare_tcp_rails_emucluster)
echo "compare_tcp_rails_emucluster: allreduce_perf $SIZE float sum over tcp ($COLL_NSOCKS_PERPEER sockets per peer), COLL_TCP_RAILS in ($RAILS) alternated $ROUNDS rounds, 2 nodes with 2 links of $RATE each; raw output in $out"
unset COLL_ALGO COLL_HOSTID COLL_TRANSPORT COLL_TCP_RAILS
summary=$out/summary.txt
: >"$summary"
"$EMU" up "$name" 2 --rate "$RATE" --rails 2 --rail-rate "$RAIL_RATE" | tee "$out/links.txt"
for ((round = 1; round <= ROUNDS; ++round)); do
  for rails in $RAILS; do
    f=$out/rails$rails-r$round.txt
    mbps=""
    [ "$rails" != 2w ] || mbps=$WEIGHTS
    COLL_DEBUG=INFO COLL_NET=tcp COLL_TCP_RAILS=${rails%%[a-z]*} COLL_TCP_RAIL_MBPS=$mbps "$EMU" run "$name" --timeout 900 -- \
      "$PERF" -b "$SIZE" -e "$SIZE" -d float -o sum -n "$ITERS" -w "$WARMUP" -c 0 >"$f" 2>&1 ||
      echo "  rails $rails round $round FAILED (see $f)"
    printf '  round %d, %s rail(s): %s us\n' "$round" "$rails" "$(column "$f" "$bytes" 6)"
  done
done
"$EMU" down "$name"
for rails in $RAILS; do
  t=$(for f in "$out/rails$rails"-r*.txt; do column "$f" "$bytes" 6; done | median)
  b=$(awk -v t="$t" -v n="$bytes" 'BEGIN { if (t + 0 > 0) printf "%.3f", n / (t * 1e3); else print "nan" }')
  printf '  %s rail(s): median time %s us, busbw %s GB/s\n' "$rails" "$t" "$b" | tee -a "$summary"
  declare "time_$rails=$t"
done
if [ -n "${time_1:-}" ] && [ -n "${time_2:-}" ]; then
  speedup=$(ratio "$time_1" "$time_2")
  verdict=$(awk -v s="$speedup" 'BEGIN { print (s != "nan" && s >= 1.8) ? "meets" : "MISSES" }')
  echo "  speedup of 2 rails over 1 (time 1 / time 2): $speedup ($verdict the target >= 1.8)" | tee -a "$summary"
fi
if [ -n "${time_2eq:-}" ] && [ -n "${time_2w:-}" ]; then
  allowed=$(awk -v a="$(mbit "$RATE")" -v b="$(mbit "$RAIL_RATE")" 'BEGIN { printf "%.3f", (a + b) / (2 * b) }')
  echo "  rails of $RATE and $RAIL_RATE, weighted $WEIGHTS over equal (time 2eq / time 2w): $(ratio "$time_2eq" "$time_2w") (the links allow $allowed)" | tee -a "$summary"
  echo "  weighted over one $RATE rail (time 1 / time 2w): $(ratio "$time_1" "$time_2w")" | tee -a "$summary"
fi
echo "summary in $summary"
