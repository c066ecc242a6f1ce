#!/bin/bash
# Ours vs Open MPI on one machine: 4 ranks (oversubscribed on 2 cores), float32 sum, at 8 B, 1 MiB,
# 16 MiB and 64 MiB; the two alternate ROUNDS times with the same -n/-w. Prints medians and ratios.
# usage: bench/compare_mpi_shm.sh        (env: BUILD, ROUNDS=5, ITERS=20, WARMUP=5, NP=4, CHECK=0)
set -euo pipefail
source "$(dirname "$0")/compare_lib.sh"
NP=${NP:-4}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
CHECK=${CHECK:-0}
SIZES=(8 1048576 16777216 67108864)
need "$COLLRUN" "$PERF" "$PERF_MPI"
out=$(results_dir compare_mpi_shm)
args=(-d float -o sum -n "$ITERS" -w "$WARMUP" -c "$CHECK")
echo "compare_mpi_shm: $NP ranks, float32 sum, -n $ITERS -w $WARMUP, $ROUNDS rounds; raw output in $out"
progress_start $((ROUNDS * ${#SIZES[@]}))
for ((round = 1; round <= ROUNDS; ++round)); do
  for size in "${SIZES[@]}"; do
    "$COLLRUN" -np "$NP" --timeout 600 "$PERF" -b "$size" -e "$size" "${args[@]}" >"$out/ours-$size-r$round.txt" 2>&1
    "${MPIRUN[@]}" -np "$NP" --mca pml ob1 --mca btl vader,self "$PERF_MPI" -b "$size" -e "$size" "${args[@]}" \
      >"$out/mpi-$size-r$round.txt" 2>&1
    progress "round $round, $size B: ours and Open MPI"
  done
done

summary=$out/summary.txt
{
  printf "%12s  %12s  %12s  %8s   %12s  %12s  %8s\n" size "ours busbw" "mpi busbw" "ratio" "ours time" "mpi time" "ratio"
  printf "%12s  %12s  %12s  %8s   %12s  %12s  %8s\n" "(B)" "(GB/s)" "(GB/s)" "ours/mpi" "(us)" "(us)" "ours/mpi"
  for size in "${SIZES[@]}"; do
    ob=$(for f in "$out"/ours-$size-r*.txt; do column "$f" "$size" 8; done | median)
    mb=$(for f in "$out"/mpi-$size-r*.txt; do column "$f" "$size" 8; done | median)
    ot=$(for f in "$out"/ours-$size-r*.txt; do column "$f" "$size" 6; done | median)
    mt=$(for f in "$out"/mpi-$size-r*.txt; do column "$f" "$size" 6; done | median)
    printf "%12s  %12s  %12s  %8s   %12s  %12s  %8s\n" "$size" "$ob" "$mb" "$(ratio "$ob" "$mb")" "$ot" "$mt" "$(ratio "$ot" "$mt")"
  done
  echo "medians of $ROUNDS alternated rounds (out-of-place); busbw ratio > 1 and time ratio < 1 favour ours"
} | tee "$summary"
plot_results "$out" "All-Reduce, $NP ranks on one machine: ours vs Open MPI (vader)"
