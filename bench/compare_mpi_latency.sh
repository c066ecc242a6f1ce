#!/bin/bash
# 8-byte all-reduce latency, ours vs Open MPI: 2 ranks, each pinned to its own core with taskset
# in both launchers, alternated ROUNDS times. Prints the medians and ours/mpi.
# usage: bench/compare_mpi_latency.sh      (env: BUILD, ROUNDS=5, ITERS=20000, WARMUP=1000)
set -euo pipefail
source "$(dirname "$0")/compare_lib.sh"
ITERS=${ITERS:-20000}
WARMUP=${WARMUP:-1000}
need "$COLLRUN" "$PERF" "$PERF_MPI"
out=$(results_dir compare_mpi_latency)
args=(-b 8 -e 8 -d float -o sum -n "$ITERS" -w "$WARMUP" -c 0)
# Rank r runs on core r (local rank from each launcher's own variable).
pin_ours='exec taskset -c "$COLL_LOCAL_RANK" "$@"'
pin_mpi='exec taskset -c "$OMPI_COMM_WORLD_LOCAL_RANK" "$@"'
echo "compare_mpi_latency: 2 pinned ranks, 8 B float sum, -n $ITERS -w $WARMUP, $ROUNDS rounds; raw output in $out"
for ((round = 1; round <= ROUNDS; ++round)); do
  "$COLLRUN" -np 2 --timeout 300 bash -c "$pin_ours" pin "$PERF" "${args[@]}" >"$out/ours-r$round.txt" 2>&1
  "${MPIRUN[@]}" -np 2 --bind-to none --mca pml ob1 --mca btl vader,self bash -c "$pin_mpi" pin "$PERF_MPI" "${args[@]}" \
    >"$out/mpi-r$round.txt" 2>&1
done
ot=$(for f in "$out"/ours-r*.txt; do column "$f" 8 6; done | median)
mt=$(for f in "$out"/mpi-r*.txt; do column "$f" 8 6; done | median)
{
  echo "8-byte all-reduce, 2 ranks pinned to cores 0 and 1, median of $ROUNDS rounds (out-of-place time):"
  printf "  ours %s us   Open MPI %s us   ours/mpi %s  (< 1 favours ours)\n" "$ot" "$mt" "$(ratio "$ot" "$mt")"
} | tee "$out/summary.txt"
