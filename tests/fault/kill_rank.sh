#!/bin/bash
# A rank dies mid-run: with COLL_TIMEOUT=10 every survivor must report an error, and the whole
# job must end well within the limit (no hang, no survivor stuck in collCommAbort).
# usage: kill_rank.sh COLLRUN FAULT_KILL_RANK NP [COUNT [DIE_AFTER [LIMIT]]]
# DIE_AFTER: the victim's successful calls before it dies (5); LIMIT: seconds the job may take (25:
# COLL_TIMEOUT plus start-up and teardown slack; below 10, the death must be found as a death).
set -u
COLLRUN=${1:?usage: kill_rank.sh COLLRUN FAULT_KILL_RANK NP [COUNT [DIE_AFTER [LIMIT]]]}
PROG=${2:?}
NP=${3:?}
COUNT=${4:-4096}
DIE_AFTER=${5:-5}
LIMIT=${6:-25}

export COLL_TIMEOUT=10
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s%N)
"$COLLRUN" -np "$NP" --timeout 60 "$PROG" "$DIE_AFTER" "$COUNT" >"$log" 2>&1
rc=$?
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
elapsed="$((elapsed_ms / 1000)).$(printf %03d $((elapsed_ms % 1000)))"
cat "$log"
echo "kill_rank: collrun exit $rc after ${elapsed}s"
survivors=$(grep -c "got the expected error" "$log")
if [ $rc -eq 124 ]; then
  echo "FAIL: the job hung until collrun's timeout"
  exit 1
fi
if [ $rc -ne 0 ]; then
  echo "FAIL: collrun exited with $rc (a survivor failed in an unexpected way)"
  exit 1
fi
if [ "$survivors" -ne $((NP - 1)) ]; then
  echo "FAIL: $survivors of $((NP - 1)) survivors reported the error"
  exit 1
fi
if [ "$elapsed_ms" -gt $((LIMIT * 1000)) ]; then
  echo "FAIL: took ${elapsed}s, limit ${LIMIT}s"
  exit 1
fi
echo "PASS: all $((NP - 1)) survivors returned an error in ${elapsed}s"
