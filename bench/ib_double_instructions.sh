#!/bin/bash
# CPU instructions per small message through the executor and the ib transport, on the verbs test
# double: the 8-byte send/receive ping-pong of test_ib_collectives (IbPingPong.SmallMessages, two
# ranks as threads, COLL_TRANSPORT=ib) under callgrind, collecting only inside collSend/collRecv,
# run with N and 2N round trips: (I(2N) - I(N)) / (2N) per message cancels setup and warm-up.
# Ranks sleep on the completion channel as soon as they are idle (COLL_SPIN_COUNT=0,
# COLL_YIELD_COUNT=0), so waiting costs a sleep, not a scheduling-dependent spin. The figure is
# also given without the double's own verbs calls (work a real HCA does in hardware or in its
# provider library), which is what a run on real RoCE compares with. Each count is the minimum of
# REPEATS runs. With RAILS="1 2 4" (the default) it measures each rail count (COLL_IB_RAILS over
# that many double devices) and states each against one rail: multi-rail must not cost a small
# message more than 1.1x.
# usage: bench/ib_double_instructions.sh      (env: BUILD, N=2000, REPEATS=3, RAILS="1 2 4")
set -euo pipefail
shopt -s inherit_errexit
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
N=${N:-2000}
REPEATS=${REPEATS:-3}
RAILS=${RAILS:-1 2 4}
TEST=$BUILD/tests/test_ib_collectives
[ -x "$TEST" ] || { echo "missing $TEST: build it (cmake --build $BUILD --target test_ib_collectives)" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "valgrind not installed" >&2; exit 2; }
out=$ROOT/bench/results/ib_double_instructions-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"

# The verbs calls of the VerbsApi table, as the double names its implementations.
VERBS='d?(postSend|postRecv|pollCq|reqNotifyCq|getCqEvent|ackCqEvents|getAsyncEvent|ackAsyncEvent)'

total_ir() { awk '/^(summary|totals):/ { print $2; exit }' "$1"; }

# Inclusive instructions of the double's verbs entry points (coll::testing namespace).
double_ir() {
  callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
    grep -iE "coll::testing::.*\\b($VERBS)\\(" | awk '{ gsub(",", "", $1); s += $1 } END { print s + 0 }'
}

measure() {  # round trips, rails -> "total double"
  local n=$1 rails=$2 cg=$out/pingpong-$1-$2.cg
  COLL_SPIN_COUNT=0 COLL_YIELD_COUNT=0 IB_PINGPONG_ITERS=$n IB_PINGPONG_RAILS=$rails \
    valgrind --tool=callgrind --toggle-collect=collSend --toggle-collect=collRecv --callgrind-out-file="$cg" \
    "$TEST" --gtest_filter=IbPingPong.SmallMessages >"$out/pingpong-$n-$rails.txt" 2>&1 || {
    echo "ib_double_instructions: the run failed; see $out/pingpong-$n-$rails.txt" >&2
    exit 1
  }
  echo "$(total_ir "$cg") $(double_ir "$cg")"
}

min_of() {  # round trips, rails -> minimum "total double" over REPEATS runs (by total)
  local best="" bestd="" t d i
  for ((i = 0; i < REPEATS; ++i)); do
    read -r t d < <(measure "$1" "$2")
    if [ -z "$best" ] || [ "$t" -lt "$best" ]; then best=$t; bestd=$d; fi
  done
  echo "$best $bestd"
}

msgs=$((2 * N))
base=""
for rails in $RAILS; do
  read -r t1 d1 < <(min_of "$N" "$rails")
  read -r t2 d2 < <(min_of $((2 * N)) "$rails")
  per=$(((t2 - t1) / msgs))
  perDouble=$(((d2 - d1) / msgs))
  [ -n "$base" ] || base=$per
  {
    echo "ib transport on the verbs test double, $rails rail(s), 8-byte send/receive ping-pong, 2 ranks (threads):"
    echo "  $per instructions per message in collSend/collRecv (API + executor + ib transport + double)"
    echo "  $((per - perDouble)) instructions per message without the double's verbs calls ($perDouble in them)"
    echo "  $(awk -v a="$per" -v b="$base" 'BEGIN { printf "%.3f", a / b }')x the first rail count's figure"
    echo "  (I(2N)=$t2 - I(N)=$t1 over 2N=$msgs messages, N=$N, min of $REPEATS runs)"
  } | tee -a "$out/summary.txt"
done
rm -f "$out"/*.cg
