#!/bin/bash
# A tcp rail that goes down mid-run: 2 emulated nodes with 2 links each (bench/emucluster --rails 2),
# allreduce_perf over tcp with COLL_TCP_RAILS=2, and one node's second link set down while the
# benchmark runs. The run must complete with every result right (#wrong 0), both ranks must say
# which rail they lost and that its traffic moved, and the run after it must not have waited for
# the call timeout. Root; exit 77 = skipped.
# usage: tcp_rail_failover.sh EMUCLUSTER ALLREDUCE_PERF   (env: COLLRUN, passed to emucluster)
set -u
EMUCLUSTER=${1:?usage: tcp_rail_failover.sh EMUCLUSTER ALLREDUCE_PERF}
PERF=${2:?allreduce_perf missing}

skip() {
  echo "SKIP: tcp_rail_failover: $* (needs root and 'ip netns'; not a failure)"
  exit 77
}
[ "$(id -u)" = 0 ] || skip "not root"

name=railfo$$
log=$(mktemp)
cleanup() {
  "$EMUCLUSTER" down "$name" >/dev/null 2>&1
  rm -f "$log"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

out=$("$EMUCLUSTER" up "$name" 2 --rails 2 --rate 1gbit --no-measure 2>&1)
rc=$?
[ $rc = 77 ] && skip "cannot create network namespaces here"
[ $rc = 0 ] || {
  echo "FAIL: emucluster up: $out"
  exit 1
}

# 16 MiB at 1 Gbit/s per rail: about 0.1 s per call, so the link goes down around call 10 of 60.
# The rail is found lost when its bytes stay unacknowledged for COLL_TCP_RAIL_TIMEOUT_MS.
start=$(date +%s)
COLL_NET=tcp COLL_TCP_RAILS=2 COLL_NSOCKS_PERPEER=4 COLL_TCP_RAIL_TIMEOUT_MS=1000 COLL_TIMEOUT=60 COLL_DEBUG=WARN \
  "$EMUCLUSTER" run "$name" --timeout 150 -- "$PERF" -b 16M -e 16M -d float -o sum -n 60 -w 2 -c 1 >"$log" 2>&1 &
run=$!
sleep 2
ip -n "$name-1" link set "emu1r1" down || echo "FAIL: could not set emu1r1 down"
wait "$run"
rc=$?
elapsed=$(($(date +%s) - start))
cat "$log"
bad=0
fail() {
  echo "FAIL: $*"
  bad=$((bad + 1))
}
[ $rc = 0 ] || fail "allreduce_perf exited with $rc"
# The data line: "size count type redop root time algbw busbw #wrong time algbw busbw #wrong".
row=$(grep -E '^\[0\] +16777216 ' "$log" | head -n 1)
[ -n "$row" ] || fail "no result line for 16 MiB"
wrong=$(awk '{ print $10 + $14 }' <<<"$row")
[ "${wrong:-1}" = 0 ] || fail "#wrong is not 0: $row"
for r in 0 1; do
  grep -q "tcp connection to rank $((1 - r)): rail 1 .* lost .*moving its traffic" "$log" ||
    fail "no rank said it lost rail 1 to rank $((1 - r))"
done
[ "$elapsed" -lt 60 ] || fail "the run took $elapsed s: it waited for a timeout instead of moving the traffic"
[ $bad = 0 ] && echo "PASS: tcp_rail_failover (rail 1 of node 1 down mid-run; $elapsed s)"
[ $bad = 0 ]
