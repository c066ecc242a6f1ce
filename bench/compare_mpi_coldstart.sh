#!/bin/bash
# Cold start, ours vs Open MPI (vader) in the same harness: NP=4 ranks on one machine, every
# collective at SIZES (8 B, 1 MiB, 16 MiB), each in a fresh job, float32 (sum, root 0). Reports
# the time of call 1, call 2 and the median of calls 3..ITERS (`*_perf --per-call -w 0`; a call
# ends when its last rank returns), and, at 16 MiB, the short run many people use (-w 1 -n 5)
# against a long one (-w 20 -n 50). Ours and MPI alternate ROUNDS times; medians over rounds.
# Targets: call 2 within 1.25x of steady; -w 1 -n 5 within 10% of -w 20 -n 50. LAZY=1 adds a third
# side, alternated with the others: ours with COLL_LAZY_SETUP=1 (set-up left to the first calls,
# as before the set-up thread existed). Last, communicator creation at INIT_NP=8 ranks
# (comm_init_perf), COLL_LAZY_SETUP=1 against the default, alternated ROUNDS times.
# usage: bench/compare_mpi_coldstart.sh  (env: BUILD, ROUNDS=3, NP=4, ITERS=20, SIZES="8 1048576 16777216",
#        COLLS="allreduce all_gather ...", SHORT=1 (0 skips the short/long runs), LAZY=0)
set -euo pipefail
source "$(dirname "$0")/compare_lib.sh"
ROUNDS=${ROUNDS:-3}
NP=${NP:-4}
ITERS=${ITERS:-20}
SHORT=${SHORT:-1}
LONG_SIZE=16777216
read -r -a SIZES <<<"${SIZES:-8 1048576 16777216}"
read -r -a COLLS <<<"${COLLS:-allreduce all_gather reduce_scatter broadcast reduce alltoall sendrecv gather scatter}"
LAZY=${LAZY:-0}
SIDES=(ours mpi)
[ "$LAZY" = 1 ] && SIDES=(ours lazy mpi)
INIT_NP=${INIT_NP:-8}
for c in "${COLLS[@]}"; do need "$BUILD/bench/${c}_perf" "$BUILD/bench/${c}_perf_mpi"; done
need "$COLLRUN" "$BUILD/bench/comm_init_perf"
out=$(results_dir compare_mpi_coldstart)
common=(-d float -o sum -r 0 -c 0)
echo "compare_mpi_coldstart: $NP ranks, float32, sizes ${SIZES[*]}, calls 1..$ITERS, $ROUNDS rounds; raw output in $out"

ours() { "$COLLRUN" -np "$NP" --timeout 600 "$@"; }
lazy() { COLL_LAZY_SETUP=1 "$COLLRUN" -np "$NP" --timeout 600 "$@"; }
mpi() { "${MPIRUN[@]}" -np "$NP" --mca pml ob1 --mca btl vader,self "$@"; }

progress_start "$ROUNDS"
for ((round = 1; round <= ROUNDS; ++round)); do
  for c in "${COLLS[@]}"; do
    for s in "${SIZES[@]}"; do
      for side in "${SIDES[@]}"; do
        bin=$BUILD/bench/${c}_perf
        [ "$side" = mpi ] && bin=${bin}_mpi
        $side "$bin" -b "$s" -e "$s" -w 0 -n "$ITERS" --per-call "${common[@]}" >"$out/$side-$c-$s-r$round.txt" 2>&1 || true
      done
    done
    if [ "$SHORT" = 1 ]; then
      for side in "${SIDES[@]}"; do
        bin=$BUILD/bench/${c}_perf
        [ "$side" = mpi ] && bin=${bin}_mpi
        $side "$bin" -b $LONG_SIZE -e $LONG_SIZE -w 1 -n 5 "${common[@]}" >"$out/$side-$c-short-r$round.txt" 2>&1 || true
        $side "$bin" -b $LONG_SIZE -e $LONG_SIZE -w 20 -n 50 "${common[@]}" >"$out/$side-$c-long-r$round.txt" 2>&1 || true
      done
    fi
  done
  for lz in 1 0; do
    COLL_LAZY_SETUP=$lz "$COLLRUN" -np "$INIT_NP" --timeout 600 "$BUILD/bench/comm_init_perf" 5 \
      >"$out/init-lazy$lz-r$round.txt" 2>&1 || true
  done
  progress "round $round of $ROUNDS"
done

# calls FILE FIELD: call1, call2 or steady (us) from the "# calls" line
calls() { strip_prefix <"$1" | awk -v f="$2" '$1 == "#" && $2 == "calls" { for (i = 3; i < NF; ++i) if ($i == f) { print $(i + 1); exit } }'; }
med() { # med SIDE COLL SIZE FIELD
  for f in "$out/$1-$2-$3"-r*.txt; do calls "$f" "$4"; done | median
}
# out-of-place time (us) of a short or long run
runtime() { for f in "$out/$1-$2-$3"-r*.txt; do column "$f" $LONG_SIZE 6; done | median; }

summary=$out/summary.txt
{
  for side in "${SIDES[@]}"; do
    echo "$side:"
    printf "  %-15s %9s  %9s %9s %9s %7s %7s %8s\n" collective size call1 call2 steady c1/st c2/st faults1
    for c in "${COLLS[@]}"; do
      for s in "${SIZES[@]}"; do
        c1=$(med "$side" "$c" "$s" call1) c2=$(med "$side" "$c" "$s" call2) st=$(med "$side" "$c" "$s" steady)
        printf "  %-15s %9s  %9s %9s %9s %7s %7s %8s\n" "$c" "$s" "$c1" "$c2" "$st" "$(ratio "$c1" "$st")" \
          "$(ratio "$c2" "$st")" "$(med "$side" "$c" "$s" faults1)"
      done
    done
  done
  echo "times in us, medians of $ROUNDS alternated rounds; call1/call2 = calls 1 and 2 of a size in a fresh job,"
  echo "steady = median of calls 3..$ITERS; faults1 = minor page faults during call 1, all ranks; target: ours c2/st <= 1.25"
  if [ "$SHORT" = 1 ]; then
    echo
    printf "%-15s" collective
    for side in "${SIDES[@]}"; do printf " %12s %12s %9s" "$side -w1 -n5" "-w20 -n50" short/long; done
    echo
    for c in "${COLLS[@]}"; do
      printf "%-15s" "$c"
      for side in "${SIDES[@]}"; do
        sh=$(runtime "$side" "$c" short) lo=$(runtime "$side" "$c" long)
        printf " %12s %12s %9s" "$sh" "$lo" "$(ratio "$sh" "$lo")"
      done
      echo
    done
    echo "out-of-place time per call (us) at $LONG_SIZE B, medians of $ROUNDS rounds; target: ours short/long <= 1.10"
  fi
  echo
  initms() { for f in "$out/init-lazy$1"-r*.txt; do strip_prefix <"$f" | awk '$1 == "comm_init" { print $5 }'; done | median; }
  il=$(initms 1) ie=$(initms 0)
  echo "communicator creation, $INIT_NP ranks (median ms of $ROUNDS rounds of 5): COLL_LAZY_SETUP=1 $il, default $ie," \
    "ratio $(ratio "$ie" "$il") (target <= 2)"
} | tee "$summary"
