#!/bin/bash
# --stream on the shared benchmark harness: 2 ranks queue all-reduces on a host stream; the run
# must pass its verification and print the per-size overlap line (its value is not judged here).
# usage: perf_stream_overlap.sh COLLRUN ALLREDUCE_PERF
set -uo pipefail
collrun=$1
perf=$2
out=$("$collrun" -np 2 --timeout 60 "$perf" --stream -b 1M -e 1M -n 5 -w 1 -c 1 2>&1)
rc=$?
echo "$out"
if [ $rc -ne 0 ]; then echo "FAIL: exit code $rc"; exit 1; fi
grep -q "Out of bounds values : 0 OK" <<<"$out" || { echo "FAIL: verification line missing"; exit 1; }
grep -Eq "#  overlap +1048576 B: comm .* overlap [01]\.[0-9]{2}$" <<<"$out" ||
  { echo "FAIL: no overlap line for 1048576 bytes"; exit 1; }
echo "PASS"
