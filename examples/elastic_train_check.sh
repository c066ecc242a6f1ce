#!/bin/bash
# elastic_train end to end: a run where rank 3 raises SIGKILL at step 25 and collrun starts a
# replacement must recover (shrink to 5, grow back to 6) and end with the same parameters, bit for
# bit, as a run without the failure.
# usage: elastic_train_check.sh COLLRUN ELASTIC_TRAIN
set -u
COLLRUN=${1:?usage: elastic_train_check.sh COLLRUN ELASTIC_TRAIN}
PROG=${2:?usage: elastic_train_check.sh COLLRUN ELASTIC_TRAIN}

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

fail() {
  echo "FAIL: $*"
  exit 1
}

"$COLLRUN" -np 6 --timeout 60 "$PROG" --out "$dir/A" >"$dir/a.log" 2>&1
rc=$?
cat "$dir/a.log"
[ $rc -eq 0 ] || fail "the uninterrupted run exited with $rc"

"$COLLRUN" -np 6 --respawn 1 --timeout 90 "$PROG" --kill-rank 3 --kill-at 25 --out "$dir/B" >"$dir/b.log" 2>&1
rc=$?
cat "$dir/b.log"
[ $rc -eq 0 ] || fail "the run with a failure exited with $rc"
grep -q "starting replacement 1 of 1" "$dir/b.log" || fail "collrun started no replacement"
grep -q "shrunk to 5 ranks" "$dir/b.log" || fail "no 'shrunk to 5 ranks' line"
grep -q "grown back to 6 ranks" "$dir/b.log" || fail "no 'grown back to 6 ranks' line"
cmp "$dir/A" "$dir/B" || fail "the final parameters differ"
echo "PASS: recovered from the death of rank 3; final parameters identical to the uninterrupted run"
