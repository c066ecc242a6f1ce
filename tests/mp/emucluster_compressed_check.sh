#!/bin/bash
# The compressed All-Reduce on an emulated cluster (bench/emucluster, 4 nodes x 1 rank, tcp between
# namespaces): mp_compressed_check on every rank, then allreduce_perf --compress with its checks.
# usage: emucluster_compressed_check.sh EMUCLUSTER COLLRUN MP_COMPRESSED_CHECK ALLREDUCE_PERF
#   Root; exit 77 = skipped (not root, no ip netns), 1 = a failure.
set -u
EMUCLUSTER=${1:?usage: emucluster_compressed_check.sh EMUCLUSTER COLLRUN MP_COMPRESSED_CHECK ALLREDUCE_PERF}
COLLRUN=${2:?collrun missing}
CHECK=${3:?mp_compressed_check missing}
PERF=${4:?allreduce_perf missing}
NODES=4

skip() {
  echo "SKIP: emucluster_compressed_check: $* (needs root and 'ip netns'; not a failure)"
  exit 77
}
[ "$(id -u)" = 0 ] || skip "not root"
command -v ip >/dev/null || skip "iproute2 (ip) not installed"

NAME=emucmp$$
LOG=$(mktemp)
cleanup() { "$EMUCLUSTER" down "$NAME" >/dev/null 2>&1; rm -f "$LOG"; return 0; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
"$EMUCLUSTER" up "$NAME" $NODES --no-measure
rc=$?
[ $rc = 77 ] && skip "cannot create network namespaces here"
[ $rc = 0 ] || { echo "FAIL: emucluster up $NAME $NODES exited with $rc"; exit 1; }

unset COLL_HOSTID COLL_TRANSPORT COLL_ALGO COLL_SOCKET_IFNAME COLL_COMPRESS_MIN_BYTES
export COLL_DEBUG=INFO COLL_TIMEOUT=60 COLLRUN
failures=0

# run LABEL PROGRAM ARGS...: one job, one rank per node; output in $LOG.
run() {
  local label=$1 t0=$SECONDS
  shift
  "$EMUCLUSTER" run "$NAME" --timeout 150 -- "$@" >"$LOG" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then
    echo "FAIL: $label: collrun exited with $rc"
    grep -v " INFO " "$LOG" | tail -n 25
    failures=$((failures + 1))
    return 1
  fi
  if ! grep -q "topology: $NODES ranks on $NODES hosts" "$LOG"; then
    echo "FAIL: $label: no 'topology: $NODES ranks on $NODES hosts' line at COLL_DEBUG=INFO"
    failures=$((failures + 1))
    return 1
  fi
  echo "PASS: $label ($((SECONDS - t0)) s)"
  return 0
}

if run "mp_compressed_check, $NODES nodes x 1 rank" "$CHECK" --quick; then
  n=$(grep -c ': OK: ' "$LOG")
  if [ "$n" -ne $NODES ]; then
    echo "FAIL: only $n of $NODES ranks reported OK"
    failures=$((failures + 1))
  else
    grep -m1 ': OK: ' "$LOG" | sed 's/^\[[0-9]*\] /  /'
  fi
fi
# The benchmark's own check (#wrong against the format's tolerance, bit-identical ranks) and its
# wire column: at most 14% of an uncompressed ring's at B = 64.
if run "allreduce_perf --compress int4:64:feedback" "$PERF" -b 1M -e 8M -f 8 -n 2 -w 1 --compress int4:64:feedback; then
  table=$(sed -E 's/^\[[0-9]+\] //' "$LOG" | grep -E '^ +[0-9]+ ')
  echo "$table" | sed 's/^/  /'
  bad=$(awk '$9 != 0 || $13 != 0 || $15 > 14 { n++ } END { print n + 0 }' <<<"$table")
  rows=$(grep -c . <<<"$table")
  if [ "$rows" -lt 2 ] || [ "$bad" -ne 0 ]; then
    echo "FAIL: allreduce_perf --compress: $bad of $rows rows with wrong elements or wire% > 14"
    failures=$((failures + 1))
  fi
fi
if [ $failures -ne 0 ]; then
  echo "emucluster_compressed_check: $failures run(s) failed"
  exit 1
fi
echo "emucluster_compressed_check: all runs passed"
exit 0
