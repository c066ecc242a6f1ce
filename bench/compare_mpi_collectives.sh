#!/bin/bash
# Every collective, ours vs Open MPI (vader) on one machine: NP=4 ranks (oversubscribed on 2 cores),
# float32 (sum where there is an op, root 0 where there is a root) at SIZE=16 MiB; the two alternate
# ROUNDS times with the same -n/-w. Prints median busbw and ratios, and our reduce-scatter and
# all-gather busbw as a fraction of our all-reduce busbw.
# usage: bench/compare_mpi_collectives.sh  (env: BUILD, ROUNDS=5, ITERS=20, WARMUP=5, NP=4, SIZE=16777216,
#        CHECK=0, COLLS="allreduce all_gather ...")
set -euo pipefail
source "$(dirname "$0")/compare_lib.sh"
NP=${NP:-4}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
CHECK=${CHECK:-0}
SIZE=${SIZE:-16777216}
read -r -a COLLS <<<"${COLLS:-allreduce all_gather reduce_scatter broadcast reduce alltoall sendrecv gather scatter}"
for c in "${COLLS[@]}"; do need "$BUILD/bench/${c}_perf" "$BUILD/bench/${c}_perf_mpi"; done
need "$COLLRUN"
out=$(results_dir compare_mpi_collectives)
args=(-b "$SIZE" -e "$SIZE" -d float -o sum -r 0 -n "$ITERS" -w "$WARMUP" -c "$CHECK")
echo "compare_mpi_collectives: $NP ranks, float32, $SIZE B, -n $ITERS -w $WARMUP, $ROUNDS rounds; raw output in $out"
progress_start $((ROUNDS * ${#COLLS[@]}))
for ((round = 1; round <= ROUNDS; ++round)); do
  for c in "${COLLS[@]}"; do
    "$COLLRUN" -np "$NP" --timeout 600 "$BUILD/bench/${c}_perf" "${args[@]}" >"$out/ours-$c-r$round.txt" 2>&1 || true
    "${MPIRUN[@]}" -np "$NP" --mca pml ob1 --mca btl vader,self "$BUILD/bench/${c}_perf_mpi" "${args[@]}" \
      >"$out/mpi-$c-r$round.txt" 2>&1 || true
    progress "round $round, $c: ours and Open MPI"
  done
done

# median busbw (out-of-place) of one side for one collective; nan when no run produced the row
busbw() { for f in "$out/$1-$2"-r*.txt; do column "$f" "$SIZE" 8; done | median; }

summary=$out/summary.txt
{
  printf "%-15s  %12s  %12s  %8s\n" collective "ours busbw" "mpi busbw" ratio
  printf "%-15s  %12s  %12s  %8s\n" "" "(GB/s)" "(GB/s)" "ours/mpi"
  declare -A ours
  for c in "${COLLS[@]}"; do
    ours[$c]=$(busbw ours "$c")
    mb=$(busbw mpi "$c")
    printf "%-15s  %12s  %12s  %8s\n" "$c" "${ours[$c]}" "$mb" "$(ratio "${ours[$c]}" "$mb")"
  done
  echo "medians of $ROUNDS alternated rounds (out-of-place, $SIZE B); ratio > 1 favours ours; nan = no result (see raw files)"
  if [ -n "${ours[allreduce]:-}" ]; then
    for c in reduce_scatter all_gather; do
      [ -n "${ours[$c]:-}" ] && echo "ours: $c busbw / allreduce busbw = $(ratio "${ours[$c]}" "${ours[allreduce]}")"
    done
  fi
} | tee "$summary"
plot_results "$out" "Every collective, $NP ranks, ours vs Open MPI (vader), $SIZE B"
