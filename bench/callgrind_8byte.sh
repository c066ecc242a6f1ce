#!/bin/bash
# Instructions per 8-byte all-reduce call: rank 0 of 2 runs under callgrind, collecting only inside
# the all-reduce entry point; runs with N and 2N timed iterations and reports (I(2N) - I(N)) / N,
# which cancels the warm-up, barrier and statistics calls. Open MPI is measured the same way
# (its MPI_Allreduce is an alias of PMPI_Allreduce, the name callgrind sees).
# Waiting loops count too, and a descheduled peer makes rank 0 spin: each count is the minimum of
# REPEATS runs (spinning only ever adds instructions).
# DEVICE=1 also measures the call on device buffers (-G 1) against the CUDA driver test double
# (DOUBLE, default $BUILD/tests/cuda_double/libcoll_cuda_double.so): still the calling thread's
# instructions inside collAllReduce (the call queues the work on the CUDA stream and returns; the
# staging runs on the progress thread, not counted), split into the double's own code (driver calls
# made on the calling thread: the calls into libcoll_cuda_double.so, inclusive) and the rest (the
# library, libc). A real driver's instructions per driver call differ from the double's.
# usage: bench/callgrind_8byte.sh          (env: BUILD, N=2000, REPEATS=3, DEVICE=0, DOUBLE)
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

# double_ir FILE: the instructions of calls into the CUDA double from other objects (inclusive),
# from callgrind's call records (the cost line after a calls= line is the call's inclusive cost).
double_ir() {
  awk '
    function obname(v,   id) {
      if (match(v, /^\([0-9]+\)/)) { id = substr(v, 1, RLENGTH); if (length(v) > RLENGTH) names[id] = substr(v, RLENGTH + 2); return id }
      return v
    }
    function isdouble(id) { return (id in names ? names[id] : id) ~ /libcoll_cuda_double/ }
    /^ob=/ { ob = obname(substr($0, 4)); next }
    /^cob=/ { cob = obname(substr($0, 5)); next }
    /^calls=/ { incall = 1; next }
    /^[0-9+*-]/ { if (incall) { callee = cob == "" ? ob : cob; if (isdouble(callee) && !isdouble(ob)) sum += $2; incall = 0; cob = "" } next }
    END { print sum + 0 }' "$1"
}

# measure_ours ITERATIONS [MEMORY]: Ir (MEMORY "device": "Ir double-Ir" with -G 1 on the double)
measure_ours() {
  local n=$1 mem=${2:-host} cg=$out/ours-${2:-host}-$1.cg
  local args=(--host)
  if [ "$mem" = device ]; then args=(-G 1); fi
  "$COLLRUN" -np 2 --timeout 900 bash -c '
    cg=$1; shift
    if [ "$COLL_RANK" = 0 ]; then
      exec valgrind --tool=callgrind --toggle-collect=collAllReduce --callgrind-out-file="$cg" "$@"
    fi
    exec "$@"' rank "$cg" "$PERF" -b 8 -e 8 -d float -o sum -n "$n" -w 10 -c 0 "${args[@]}" \
    >"$out/ours-$mem-$n.txt" 2>&1 || run_failed "$out/ours-$mem-$n.txt"
  if [ "$mem" = device ]; then echo "$(total_ir "$cg") $(double_ir "$cg")"; else total_ir "$cg"; fi
}
measure_device() { measure_ours "$1" device; }
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
# (a line "Ir extra...": the smallest Ir, with its other fields)
min_of() {
  local best="" line="" v i
  for ((i = 0; i < REPEATS; ++i)); do
    v=$("$1" "$2")
    if [ -z "$best" ] || [ "${v%% *}" -lt "$best" ]; then best=${v%% *} line=$v; fi
  done
  echo "$line"
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
if [ "${DEVICE:-0}" = 1 ]; then
  DOUBLE=${DOUBLE:-$BUILD/tests/cuda_double/libcoll_cuda_double.so}
  need "$DOUBLE"
  export COLL_CUDA_DRIVER=$DOUBLE COLL_CUDA_DOUBLE_DEVICES=1 COLL_CUDA_DOUBLE_ARENA_MB=1024  # valgrind: a smaller arena
  read -r d1 x1 < <(min_of measure_device "$N")
  read -r d2 x2 < <(min_of measure_device $((2 * N)))
  dev=$(( (d2 - d1) / N )) dbl=$(( (x2 - x1) / N ))
  line="$line
device buffers (CUDA double): $dev instructions per call on the calling thread, of which $dbl in the double's driver functions, $((dev - dbl)) library + libc (I(2N)=$d2 - I(N)=$d1; double $x2 - $x1); device/host $(ratio "$dev" "$ours"), without the double $(ratio "$((dev - dbl))" "$ours")"
  unset COLL_CUDA_DRIVER
fi
echo "$line" | tee "$out/summary.txt"
rm -f "$out"/*.cg  # large; the summary and tables stay
