#!/bin/bash
# elastic_train end to end: a run where rank 3 raises SIGKILL at step 25 and collrun starts a
# replacement must recover (shrink to 5, grow back to 6) and end with the same parameters, bit for
# bit, as a run without the failure. A third run has the first replacement die inside the grow:
# the survivors' grow fails, their shrunk communicator still works, and the second replacement
# joins their next grow; the same parameters again.
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

# The survivors join each grow 1 s after publishing its id, so the first replacement is in the
# rendezvous, alone, when it dies; the grown communicator's timeout (3 s) is below the shrunk
# one's (10 s), so every survivor is back in the shrunk communicator's check in time.
COLL_TIMEOUT=10 "$COLLRUN" -np 6 --respawn 2 --timeout 90 "$PROG" --kill-rank 3 --kill-at 25 --die-in-grow 1 \
  --grow-delay-ms 1000 --grow-timeout-ms 3000 --out "$dir/C" >"$dir/c.log" 2>&1
rc=$?
cat "$dir/c.log"
[ $rc -eq 0 ] || fail "the run with a replacement dying in the grow exited with $rc"
grep -q "raising SIGKILL inside collCommGrow" "$dir/c.log" || fail "the first replacement did not die in the grow"
grep -q "grow attempt 1 failed .*the shrunk communicator still works" "$dir/c.log" ||
  fail "no failed first grow followed by a working shrunk communicator"
grep -q "starting replacement 2 of 2" "$dir/c.log" || fail "collrun started no second replacement"
grep -q "grown back to 6 ranks" "$dir/c.log" || fail "no 'grown back to 6 ranks' line in the third run"
cmp "$dir/A" "$dir/C" || fail "the final parameters differ after a replacement died in the grow"
echo "PASS: recovered from the death of rank 3, also with a replacement dying in the grow; final parameters identical to the uninterrupted run"
