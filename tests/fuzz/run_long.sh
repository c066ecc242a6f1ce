#!/bin/bash
# Long fuzzing runs (the bar is 10 million executions per target without a finding):
#   tests/fuzz/run_long.sh TARGET|all [RUNS] [libFuzzer flags...]
# TARGET is bootstrap, unique_id, tcp_hello, nccl_net, config or ib_connect. The targets come from
# a COLL_FUZZ=ON clang build in $FUZZ_BUILD (default build-fuzz next to this repository's root):
#   cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCOLL_FUZZ=ON
#   cmake --build build-fuzz --target fuzz_bootstrap fuzz_unique_id ...
# Each run starts from corpus/<target>/ plus the corpus earlier runs grew in $FUZZ_WORK/<target>
# (default /tmp/coll-fuzz); findings (crash-*, leak-*, timeout-*, oom-*) land there too. Add -jobs=N
# -workers=N to use more cores. Prints executions and executions per second per target.
set -u
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=${FUZZ_BUILD:-$repo/build-fuzz}
work=${FUZZ_WORK:-/tmp/coll-fuzz}
what=${1:?usage: run_long.sh TARGET|all [RUNS] [libFuzzer flags...]}
runs=${2:-10000000}
shift; [ $# -gt 0 ] && shift
if [ "$what" = all ]; then
  targets=$(ls "$here"/corpus)
else
  targets=$what
fi
rc=0
for t in $targets; do
  bin=$(find "$build" -name "fuzz_$t" -type f -perm -u+x | head -n 1)
  if [ -z "$bin" ]; then
    echo "fuzz_$t: not built in $build (COLL_FUZZ=ON, clang; ib_connect needs libibverbs)"; rc=1; continue
  fi
  start=$(date +%s)
  KEEP_CORPUS=1 "$here/run_target.sh" "$bin" "$here/corpus/$t" "$work/$t" "$runs" "$@" || rc=1
  echo "  ($(( $(date +%s) - start )) s; corpus now $(ls "$work/$t" | wc -l) inputs in $work/$t)"
done
exit $rc
