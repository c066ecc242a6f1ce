#!/bin/bash
# allreduce_perf --json writes one result row per size with both timing columns and #wrong.
# usage: perf_json.sh COLLRUN PERF
set -euo pipefail
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$1" -np 2 --timeout 60 "$2" -b 8 -e 1K -f 4 -n 2 -w 1 -c 1 --json "$out" >/dev/null
rows=$(grep -c '"out_of_place": {"time_us"' "$out" || true)
[ "$rows" = 4 ] || { echo "expected 4 rows (8, 32, 128, 512 B), found $rows"; cat "$out"; exit 1; }
grep -q '"benchmark": "all_reduce"' "$out" || { echo "no benchmark name"; exit 1; }
if grep -q '"wrong": [1-9]' "$out"; then echo "wrong elements reported"; exit 1; fi
echo "perf_json: 4 rows, no wrong elements"
