#!/bin/bash
# Two builds of libcollective against each other (a change's before and after): every collective at
# SIZE, NP ranks, the two builds' <collective>_perf alternating ROUNDS times with the same flags and
# each round starting with the other build. Prints the median of each build and the ratio (> 1
# favours after): busbw, or with METRIC=time the out-of-place time per call (for small sizes,
# where busbw rounds to 0).
# usage: bench/compare_builds.sh BEFORE_BUILD AFTER_BUILD  (env: ROUNDS=5, ITERS=20, WARMUP=5, NP=4,
#        SIZE=16777216, METRIC=busbw|time, PIN=0 (1: rank i pinned to core i with taskset, for
#        latency at NP <= cores), COLLS="allreduce all_gather ...")
set -euo pipefail
source "$(dirname "$0")/compare_lib.sh"
[ $# -eq 2 ] || { echo "usage: $0 BEFORE_BUILD AFTER_BUILD" >&2; exit 2; }
BEFORE=$1 AFTER=$2
NP=${NP:-4}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
SIZE=${SIZE:-16777216}
METRIC=${METRIC:-busbw}
case $METRIC in busbw) col=8 unit="(GB/s)" ;; time) col=6 unit="(us)" ;; *) echo "METRIC: busbw or time" >&2; exit 2 ;; esac
read -r -a COLLS <<<"${COLLS:-allreduce all_gather reduce_scatter broadcast reduce alltoall sendrecv gather scatter}"
for c in "${COLLS[@]}"; do need "$BEFORE/bench/${c}_perf" "$AFTER/bench/${c}_perf"; done
need "$COLLRUN"
out=$(results_dir compare_builds)
args=(-b "$SIZE" -e "$SIZE" -d float -o sum -r 0 -n "$ITERS" -w "$WARMUP" -c 0)
echo "compare_builds: before $BEFORE, after $AFTER; $NP ranks (PIN=${PIN:-0}), float32, $SIZE B, -n $ITERS -w $WARMUP," \
  "$ROUNDS rounds; raw output in $out"
launch=()
if [ "${PIN:-0}" = 1 ]; then launch=(bash -c 'exec taskset -c "$COLL_LOCAL_RANK" "$@"' pin); fi
run() { "$COLLRUN" -np "$NP" --timeout 600 "${launch[@]}" "$2/bench/$3_perf" "${args[@]}" >"$out/$1-$3-r$4.txt" 2>&1 || true; }
progress_start "$ROUNDS"
for ((round = 1; round <= ROUNDS; ++round)); do
  for c in "${COLLS[@]}"; do
    if ((round % 2)); then
      run before "$BEFORE" "$c" "$round"; run after "$AFTER" "$c" "$round"
    else
      run after "$AFTER" "$c" "$round"; run before "$BEFORE" "$c" "$round"
    fi
  done
  progress "round $round of $ROUNDS"
done

metric() { for f in "$out/$1-$2"-r*.txt; do column "$f" "$SIZE" "$col"; done | median; }
summary=$out/summary.txt
{
  printf "%-15s  %12s  %12s  %12s\n" collective "before $METRIC" "after $METRIC" ratio
  printf "%-15s  %12s  %12s  %12s\n" "" "$unit" "$unit" "(>1: after)"
  for c in "${COLLS[@]}"; do
    b=$(metric before "$c") a=$(metric after "$c")
    if [ "$METRIC" = time ]; then r=$(ratio "$b" "$a"); else r=$(ratio "$a" "$b"); fi
    printf "%-15s  %12s  %12s  %12s\n" "$c" "$b" "$a" "$r"
  done
  echo "medians of $ROUNDS alternated rounds (out-of-place, $SIZE B); ratio > 1 favours after"
} | tee "$summary"
