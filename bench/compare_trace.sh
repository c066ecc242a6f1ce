#!/bin/bash
# The cost of tracing: each collective at SIZE on NP ranks with COLL_TRACE_FILE set (a Chrome trace
# per rank, written to a scratch folder) against the same build without it, alternating ROUNDS
# times, each round starting with the other setting. Prints the median out-of-place time per call
# of each and the ratio traced / untraced (the overhead; 1.05 = 5%), and the size of the traces.
# usage: bench/compare_trace.sh  (env: BUILD, ROUNDS=5, ITERS=50, WARMUP=5, NP=4, SIZE=1048576,
#        COLLS="allreduce all_gather ...")
set -euo pipefail
source "$(dirname "$0")/compare_lib.sh"
NP=${NP:-4}
ITERS=${ITERS:-50}
WARMUP=${WARMUP:-5}
SIZE=${SIZE:-1048576}
read -r -a COLLS <<<"${COLLS:-allreduce all_gather reduce_scatter broadcast alltoall}"
for c in "${COLLS[@]}"; do need "$BUILD/bench/${c}_perf"; done
need "$COLLRUN"
out=$(results_dir compare_trace)
traces=$(mktemp -d)
trap 'rm -rf "$traces"' EXIT
args=(-b "$SIZE" -e "$SIZE" -d float -o sum -r 0 -n "$ITERS" -w "$WARMUP" -c 0)
echo "compare_trace: $BUILD, $NP ranks, float32, $SIZE B, -n $ITERS -w $WARMUP, $ROUNDS rounds, COLL_TRACE_FILE on" \
  "against off; raw output in $out"
run() {  # run on|off COLL ROUND
  if [ "$1" = on ]; then
    COLL_TRACE_FILE="$traces/$2-r$3.json" "$COLLRUN" -np "$NP" --timeout 600 "$BUILD/bench/$2_perf" "${args[@]}" \
      >"$out/$1-$2-r$3.txt" 2>&1 || true
  else
    "$COLLRUN" -np "$NP" --timeout 600 "$BUILD/bench/$2_perf" "${args[@]}" >"$out/$1-$2-r$3.txt" 2>&1 || true
  fi
}
progress_start "$ROUNDS"
for ((round = 1; round <= ROUNDS; ++round)); do
  for c in "${COLLS[@]}"; do
    if ((round % 2)); then
      run off "$c" "$round"; run on "$c" "$round"
    else
      run on "$c" "$round"; run off "$c" "$round"
    fi
  done
  progress "round $round of $ROUNDS"
done

metric() { for f in "$out/$1-$2"-r*.txt; do column "$f" "$SIZE" 6; done | median; }
summary=$out/summary.txt
{
  printf "%-15s  %12s  %12s  %14s\n" collective "off (us)" "traced (us)" "traced / off"
  for c in "${COLLS[@]}"; do
    off=$(metric off "$c") on=$(metric on "$c")
    printf "%-15s  %12s  %12s  %14s\n" "$c" "$off" "$on" "$(ratio "$on" "$off")"
  done
  echo "medians of $ROUNDS alternated rounds (out-of-place time per call, $SIZE B, $NP ranks)"
  echo "trace files of the last round: $(cat "$traces"/*-r"$ROUNDS".rank*.json | wc -c) bytes"
} | tee "$summary"
