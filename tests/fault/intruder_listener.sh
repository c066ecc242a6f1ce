#!/bin/bash
# Raw-socket intruders against the listeners of a running 2-rank job (each rank's bootstrap port,
# which is also where its data connections are accepted): connect-and-close, random bytes, a
# truncated auth prologue, a client without the secret, a forged MAC, a 1 MiB oversized frame and
# an idle connection, aimed at every rank while the all-reduce battery runs. The job must complete
# with exact results, or fail cleanly (an error, no signal); it must never crash or hang.
# usage: intruder_listener.sh COLLRUN MP_ALLREDUCE_CHECK
set -u
COLLRUN=${1:?usage: intruder_listener.sh COLLRUN MP_ALLREDUCE_CHECK}
CHECK=${2:?}
work=$(mktemp -d)
idle=""
trap 'kill $idle 2>/dev/null; rm -rf "$work"' EXIT
export COLL_TIMEOUT=30 COLL_DEBUG=INFO COLL_DEBUG_FILE="$work/log.%p"

"$COLLRUN" -np 2 --timeout 100 "$CHECK" >"$work/job.out" 2>&1 &
job=$!

# Each rank logs "bootstrap: 2 ranks, listening on ADDR:PORT" once its listener is up.
addrs=""
for _ in $(seq 300); do
  addrs=$(grep -ho "bootstrap: 2 ranks, listening on [0-9.]*:[0-9]*" "$work"/log.* 2>/dev/null | awk '{print $NF}' | sort -u)
  [ "$(echo "$addrs" | grep -c :)" -ge 2 ] && break
  kill -0 $job 2>/dev/null || break
  sleep 0.1
done
[ -n "$addrs" ] || { echo "FAIL: no rank logged its listener"; cat "$work/job.out"; exit 1; }

attack() {  # attack HOST PORT NAME: sends stdin to the listener, then hangs up
  { exec 3<>"/dev/tcp/$1/$2" && cat >&3; exec 3>&-; } 2>/dev/null
  echo "intruder: $3 -> $1:$2"
}
prologue_auth=$'\x43\x4c\x43\x41\x01\x01\x00\x00'    # magic "CLCA", version 1, authenticated
prologue_open=$'\x43\x4c\x43\x41\x01\x00\x00\x00'    # ... claiming no secret
for a in $addrs; do
  host=${a%:*}; port=${a##*:}
  attack "$host" "$port" "connect-and-close" </dev/null
  head -c 64 /dev/urandom | attack "$host" "$port" "64 random bytes"
  printf 'CLC' | attack "$host" "$port" "truncated prologue"
  printf '%s' "$prologue_open" | attack "$host" "$port" "no secret"
  { printf '%s' "$prologue_auth"; head -c 64 /dev/urandom; } | attack "$host" "$port" "forged nonce and MAC"
  head -c $((1 << 20)) /dev/urandom | attack "$host" "$port" "1 MiB oversized frame"
done
# An idle connection that never speaks (held for a few seconds on rank 0's listener).
first=$(echo "$addrs" | head -n 1)
( exec 3<>"/dev/tcp/${first%:*}/${first##*:}"; sleep 4 ) >/dev/null 2>&1 &
idle=$!

wait $job
rc=$?
tail -n 4 "$work/job.out"
if grep -q -E "AddressSanitizer|UndefinedBehaviorSanitizer|Segmentation|core dumped|terminate called" "$work/job.out"; then
  echo "FAIL: a rank crashed under the intruders"; exit 1
fi
if [ $rc -eq 0 ]; then
  grep -h "dropping" "$work"/log.* | head -n 3 | sed 's/^/  rank log: /'
  echo "PASS: the job completed with exact results despite the intruders"
  exit 0
fi
# collrun reports a rank killed by a signal or its --timeout as a failure like any other; tell them apart.
if grep -q -E "signal|timed out|timeout" "$work/job.out"; then
  echo "FAIL: the job crashed or hung under the intruders (collrun exit $rc)"; exit 1
fi
echo "PASS (clean failure): the job reported an error (collrun exit $rc) and did not crash or hang"
