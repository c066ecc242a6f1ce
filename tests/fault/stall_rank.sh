#!/bin/bash
# A rank stops itself (SIGSTOP) mid-run: with COLL_TIMEOUT=3 every survivor must name it within
# 2 x COLL_TIMEOUT and abort promptly; then the victim is continued and must fail, not hang.
# With MODE=abort the victim stops before its first call and the survivors abort with an
# all-to-all in flight towards it: every abort must return within a second.
# With MODE=heartbeat COLL_TIMEOUT is 300 s and the heartbeat (1.5 s) must name the victim within
# 8 s: the stall detector, not the timeout, finds it.
# usage: stall_rank.sh COLLRUN FAULT_STALL NP [abort|heartbeat]
set -u
COLLRUN=${1:?usage: stall_rank.sh COLLRUN FAULT_STALL NP [abort]}
PROG=${2:?}
NP=${3:?}
MODE=${4:-}
VICTIM=$((NP / 2))
export COLL_TIMEOUT=3
STOP_AT=5
if [ "$MODE" = abort ]; then
  export COLL_TIMEOUT=20  # far beyond the test's limit: only a prompt abort passes
  export COLL_LINK_PROBE=0  # no start-up traffic: the all-to-all makes the first connections
  STOP_AT=0
fi
if [ "$MODE" = heartbeat ]; then
  export COLL_TIMEOUT=300 COLL_HEARTBEAT_MS=250 COLL_HEARTBEAT_TIMEOUT_MS=1500 FAULT_STALL_LIMIT_S=8
  MODE=""  # fault_stall runs as in the plain mode
fi
dir=$(mktemp -d)
log=$dir/log
victim_pid=""
cleanup() {
  [ -n "$victim_pid" ] && kill -KILL "$victim_pid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
"$COLLRUN" -np "$NP" --timeout 60 "$PROG" "$VICTIM" "$STOP_AT" "$dir/victim.pid" $MODE >"$log" 2>&1 &
job=$!
for _ in $(seq 1 300); do
  [ -s "$dir/victim.pid" ] && break
  sleep 0.1
done
victim_pid=$(cat "$dir/victim.pid" 2>/dev/null)
if [ -z "$victim_pid" ]; then
  cat "$log"; echo "FAIL: the victim never stopped"; exit 1
fi
# Survivors report within 2 x COLL_TIMEOUT (plus start-up slack); then the victim is continued.
for _ in $(seq 1 150); do
  [ "$(grep -c '^.*survivor rank' "$log")" -ge $((NP - 1)) ] && break
  sleep 0.1
done
kill -CONT "$victim_pid" 2>/dev/null
wait $job
rc=$?
cat "$log"
if [ "$MODE" = abort ]; then
  survivors=$(grep -c "survivor rank .* ok: abort took" "$log")
  if [ "$survivors" -ne $((NP - 1)) ]; then
    echo "FAIL: $survivors of $((NP - 1)) survivors aborted promptly"; exit 1
  fi
  echo "PASS: all $((NP - 1)) survivors aborted promptly with work in flight towards the stalled rank"
  exit 0
fi
survivors=$(grep -c "survivor rank .* ok: named rank $VICTIM" "$log")
if [ "$survivors" -ne $((NP - 1)) ]; then
  echo "FAIL: $survivors of $((NP - 1)) survivors named rank $VICTIM in time"; exit 1
fi
if ! grep -q "victim rank $VICTIM got an error" "$log"; then
  echo "FAIL: the continued victim did not fail cleanly (collrun exit $rc)"; exit 1
fi
if [ $rc -ne 0 ]; then
  echo "FAIL: collrun exited with $rc"; exit 1
fi
victim_pid=""
echo "PASS: all $((NP - 1)) survivors named the stalled rank $VICTIM; the continued victim failed cleanly"
