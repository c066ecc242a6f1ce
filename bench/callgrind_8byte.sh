#!/bin/bash
# Instructions per 8-byte all-reduce call: rank 0 of 2 runs under callgrind, collecting only inside
# the all-reduce entry point; runs with N and 2N timed iterations and reports (I(2N) - I(N)) / N,
# which cancels the warm-up, barrier and statistics calls. Open MPI is measured the same way
# (its MPI_Allreduce is an alias of PMPI_Allreduce, the name callgrind sees).
# Waiting loops count too, and a descheduled peer makes rank 0 spin: each count is the minimum of
# REPEATS runs (spinning only ever adds instructions).
# usage: bench/callgrind_8byte.sh          (env: BUILD, N=2000, REPEATS=3)
set -euo pipefail
shopt -s inherit_errexit  # a failed run inside $(...) stops the script
source "$(dirname "$0")/compare_lib.sh"
N=${N:-2000}
REPEATS=${REPEATS:-3}
need "$COLLRUN" "$PERF"
command -v valgrind >/dev/null || { echo "valgrind not installed" >&2; exit 2; }
out=$(results_dir callgrind_8byte)

# total_ir FILE: the instruction count callgrind collected.
total_ir() { awk '/^(summary|totals):/ { print $2; exit }' "$1"; }

run_failed() {  # LOG: a measurement run failed; say why and stop (inside $(...): exit ends the script)
  echo "callgrind_8byte: a run failed; its output is in $1" >&2
  if grep -q "Unrecognised instruction" "$1"; then
    echo "valgrind cannot execute an instruction the program uses (AVX-512 kernels on an older valgrind?)" >&2
  fi
  exit 1
}

measure_ours() {  # iterations -> Ir
  local n=$1 cg=$out/ours-$1.cg
  "$COLLRUN" -np 2 --timeout 900 bash -c '
    cg=$1; shift
    if [ "$COLL_RANK" = 0 ]; then
      exec valgrind --tool=callgrind --toggle-collect=collAllReduce --callgrind-out-file="$cg" "$@"
    fi
    exec "$@"' rank "$cg" "$PERF" -b 8 -e 8 -d float -o sum -n "$n" -w 10 -c 0 >"$out/ours-$n.txt" 2>&1 ||
    run_failed "$out/ours-$n.txt"
  total_ir "$cg"
}
measure_mpi() {
  local n=$1 cg=$out/mpi-$1.cg
  "${MPIRUN[@]}" -np 2 --mca pml ob1 --mca btl vader,self bash -c '
    cg=$1; shift
    if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then
      exec valgrind --tool=callgrind --toggle-collect=PMPI_Allreduce --callgrind-out-file="$cg" "$@"
    fi
    exec "$@"' rank "$cg" "$PERF_MPI" -b 8 -e 8 -d float -o sum -n "$n" -w 10 -c 0 >"$out/mpi-$n.txt" 2>&1 ||
    run_failed "$out/mpi-$n.txt"
  total_ir "$cg"
}

# min_of FUNCTION ITERATIONS: the smallest count over REPEATS runs.
min_of() {
  local best="" v i
  for ((i = 0; i < REPEATS; ++i)); do
    v=$("$1" "$2")
    if [ -z "$best" ] || [ "$v" -lt "$best" ]; then best=$v; fi
  done
  echo "$best"
}

o1=$(min_of measure_ours "$N"); o2=$(min_of measure_ours $((2 * N)))
ours=$(( (o2 - o1) / N ))
line="ours: $ours instructions per 8-byte all-reduce (rank 0 of 2; I(2N)=$o2 - I(N)=$o1, N=$N)"
if [ -x "$PERF_MPI" ]; then
  m1=$(min_of measure_mpi "$N"); m2=$(min_of measure_mpi $((2 * N)))
  mpi=$(( (m2 - m1) / N ))
  line="$line
Open MPI: $mpi instructions per call; ours/mpi $(ratio "$ours" "$mpi")"
fi
echo "$line" | tee "$out/summary.txt"
rm -f "$out"/*.cg  # large; the summary and tables stay
