#!/bin/bash
# collrun --respawn: rank 1 fails unless it is a replacement (COLL_RESTART_COUNT set). With one
# replacement allowed the job succeeds, the replacement is rank 1 with COLL_RESTART_COUNT=1 and
# the job directory is gone afterwards; without --respawn, or when the replacement fails too, the
# job fails.
# usage: collrun_respawn.sh COLLRUN
set -u
COLLRUN=${1:?usage: collrun_respawn.sh COLLRUN}
log=$(mktemp)
trap 'rm -f "$log"' EXIT

fail() {
  cat "$log"
  echo "FAIL: $*"
  exit 1
}

# Rank 1's first process dies; every process reports its restart count and job directory.
prog='echo "restart=${COLL_RESTART_COUNT-none} dir=$COLL_JOB_DIR"
[ "$COLL_RANK" != 1 ] || [ -n "${COLL_RESTART_COUNT-}" ] || exit 3'

"$COLLRUN" -np 3 --respawn 1 --timeout 30 bash -c "$prog" >"$log" 2>&1 || fail "--respawn 1: the job failed"
grep -q "rank 1 (pid [0-9]*) exited with status 3; starting replacement 1 of 1" "$log" || fail "no replacement line"
[ "$(grep -c '^\[1\] restart=1 ' "$log")" -eq 1 ] || fail "rank 1's replacement did not get COLL_RESTART_COUNT=1"
[ "$(grep -c 'restart=none' "$log")" -eq 3 ] || fail "a first process got COLL_RESTART_COUNT"
jobdir=$(sed -n 's/^\[0\] restart=none dir=//p' "$log")
[ -n "$jobdir" ] || fail "no COLL_JOB_DIR"
[ ! -e "$jobdir" ] || fail "the job directory $jobdir outlived the job"

"$COLLRUN" -np 3 --timeout 30 bash -c "$prog" >"$log" 2>&1 && fail "without --respawn the job succeeded"
# The replacement fails too: the job fails with its exit code.
"$COLLRUN" -np 3 --respawn 1 --timeout 30 bash -c 'exit $((COLL_RANK == 1 ? 3 : 0))' >"$log" 2>&1
rc=$?
[ $rc -eq 3 ] || fail "a failed replacement: the job exited with $rc, want 3"
grep -q "no replacements left" "$log" || fail "no 'no replacements left' line"
echo "PASS"
