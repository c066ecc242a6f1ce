#!/bin/bash
# Runs one libFuzzer target for RUNS executions from its seed corpus. New inputs go to WORK_DIR
# (recreated unless KEEP_CORPUS=1), never into the seed corpus in the source tree. Fails on any
# crash, leak, sanitizer report, timeout or oversized allocation; prints executions per second.
# usage: run_target.sh FUZZ_BINARY SEED_DIR WORK_DIR RUNS [libFuzzer flags...]
set -u
bin=${1:?usage: run_target.sh FUZZ_BINARY SEED_DIR WORK_DIR RUNS [flags...]}
seeds=${2:?}; work=${3:?}; runs=${4:?}
shift 4
# KEEP_CORPUS=1 (run_long.sh) continues from the corpus a previous run grew there.
if [ "${KEEP_CORPUS:-0}" != 1 ]; then rm -rf "$work"; fi
mkdir -p "$work" || exit 1
log="$work.log"
t0=$(date +%s.%N)
# UCX (linked in when found) would catch the fatal signals before libFuzzer and ASan report them.
export UCX_HANDLE_ERRORS=none
# -malloc_limit_mb: a parser that sizes an allocation from remote bytes shows up as a failure.
"$bin" -runs="$runs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=128 -max_len=4096 \
  -print_final_stats=1 -artifact_prefix="$work/" "$@" "$work" "$seeds" >"$log" 2>&1
rc=$?
t1=$(date +%s.%N)
execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
speed=$(awk -v n="${execs:-0}" -v a="$t0" -v b="$t1" 'BEGIN { if (b > a) printf "%d", n / (b - a); else print "?" }')
cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1)
echo "$(basename "$bin"): rc=$rc executions=${execs:-?} exec/s=${speed:-?} ${cov}"
if [ $rc -ne 0 ]; then
  tail -n 60 "$log"
  ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-* 2>/dev/null
  exit 1
fi
