#!/bin/bash
# allreduce_perf --compress over shared memory: no element beyond the format's tolerance, ranks
# bit-identical, wire bytes <= 14% of an uncompressed float32 ring's at B = 64 (16-bit types: the
# ring sends 16 bits per element, so 4.5 / 16 = 28.1% at B = 32, 4.06 / 16 = 25.4% at B = 256),
# the JSON fields, and a bad SPEC refused in words.
# usage: perf_compress.sh COLLRUN PERF
set -uo pipefail
COLLRUN=$1 PERF=$2
json=$(mktemp)
log=$(mktemp)
trap 'rm -f "$json" "$log"' EXIT
fail() { echo "FAIL: $*"; cat "$log"; exit 1; }

# rows SPEC MAXWIRE ARGS...: every table row has #wrong 0 (both placements) and wire% <= MAXWIRE.
rows() {
  local spec=$1 maxwire=$2
  shift 2
  "$COLLRUN" -np 3 --timeout 60 "$PERF" -n 2 -w 1 --compress "$spec" "$@" >"$log" 2>&1 || fail "--compress $spec $* exited with $?"
  local table n bad
  table=$(sed -E 's/^\[[0-9]+\] //' "$log" | grep -E '^ +[0-9]+ ')
  n=$(grep -c . <<<"$table")
  bad=$(awk -v w="$maxwire" '$9 != 0 || $13 != 0 || $15 > w { n++ } END { print n + 0 }' <<<"$table")
  [ "$n" -ge 2 ] || fail "--compress $spec: expected table rows, got $n"
  [ "$bad" = 0 ] || fail "--compress $spec: $bad of $n rows with wrong elements or wire% > $maxwire"
  echo "PASS: --compress $spec $* ($n rows)"
}

rows int4:64:feedback 14 -b 64K -e 4M -f 8 --json "$json"
grep -q '"compress": "int4:64:nearest:feedback"' "$json" || fail "no compress field in the JSON"
[ "$(grep -c '"wire_fraction"' "$json")" = 3 ] || fail "expected 3 JSON rows with wire_fraction"
rows int4:32:stochastic 29 -b 100K -e 1M -f 10 -d half -o avg
rows int4:256 26 -b 256K -e 1M -f 4 -d bfloat16
"$PERF" --compress int4:48 >"$log" 2>&1 && fail "--compress int4:48 was accepted"
grep -q "block size" "$log" || fail "--compress int4:48 refused without naming the block size"
echo "perf_compress: all checks passed"
