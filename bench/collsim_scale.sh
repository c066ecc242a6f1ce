#!/bin/bash
# collsim's speed at scale: a 1 GiB All-Reduce (the torus: symmetric under host translation; the
# planner's hierarchical choices at these sizes are not, and run only exactly) on a 3-tier fat-tree at
# 1,024 / 4,096 / 16,384 / 102,400 ranks (8 per node), each timed with /usr/bin/time -v (wall
# time, peak RSS), then the 4,096-rank run exact (every rank, every message) against the symmetric
# one (host 0's ranks, flow classes), which is what the larger runs use.
# usage: bench/collsim_scale.sh   (env: BUILD=build, RANKS="1024 4096 16384 102400", SIZE=1G,
#        FABRIC_ARGS="--fabric fattree3", ALGO=torus (COLL_ALGO spelling; empty: the planner's),
#        MODE=symmetric (collsim --mode of the scale runs), COMPARE=4096 (empty: skip the
#        exact-vs-symmetric run; the exact run at 4,096 takes about 5 minutes and 3 GiB))
set -euo pipefail
BUILD=${BUILD:-build}
RANKS=${RANKS:-1024 4096 16384 102400}
SIZE=${SIZE:-1G}
FABRIC_ARGS=${FABRIC_ARGS:---fabric fattree3}
ALGO=${ALGO-torus}
COMPARE=${COMPARE-4096}
MODE=${MODE:-symmetric}
SIM=$BUILD/bench/collsim
[ -x "$SIM" ] || { echo "collsim_scale: $SIM not built (cmake --build $BUILD --target collsim)" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
algoArgs=()
[ -n "$ALGO" ] && algoArgs=(--algo "$ALGO")

# run LABEL ARGS...: one collsim run; prints a table row, keeps the time in $TMP/LABEL.us
run() {
  local label=$1
  shift
  /usr/bin/time -v "$SIM" -b "$SIZE" -e "$SIZE" $FABRIC_ARGS "${algoArgs[@]}" --json "$TMP/$label.json" "$@" \
    >"$TMP/$label.out" 2>"$TMP/$label.time" || { cat "$TMP/$label.out" "$TMP/$label.time" >&2; return 1; }
  local wall rss us algo mode
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$TMP/$label.time")
  rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.0f", $2 / 1024}' "$TMP/$label.time")
  us=$(sed -n 's/.*"time_us": \([0-9.]*\).*/\1/p' "$TMP/$label.json")
  algo=$(sed -n 's/.*"algorithm": "\([^"]*\)".*/\1/p' "$TMP/$label.json")
  mode=$(sed -n 's/.*"mode": "\([a-z]*\)".*/\1/p' "$TMP/$label.json")
  echo "$us" >"$TMP/$label.us"
  printf "| %s | %s | %s | %s | %s | %s MiB |\n" "$label" "$algo" "$mode" "$us" "$wall" "$rss"
}

echo "| run | algorithm | mode | simulated time (us) | wall (m:ss) | peak RSS |"
echo "|---|---|---|---:|---:|---:|"
for n in $RANKS; do run "$n" -n "$n" --mode "$MODE"; done
if [ -n "$COMPARE" ]; then
  run "$COMPARE-exact" -n "$COMPARE" --mode exact
  run "$COMPARE-symmetric" -n "$COMPARE" --mode symmetric
  awk -v e="$(cat "$TMP/$COMPARE-exact.us")" -v s="$(cat "$TMP/$COMPARE-symmetric.us")" \
    'BEGIN { printf "\nsymmetric / exact at '"$COMPARE"' ranks: %.4f (%+.2f%%)\n", s / e, (s / e - 1) * 100 }'
fi
