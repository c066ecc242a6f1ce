#!/bin/bash
# The planner on each fabric at 1k, 10k and 100k ranks (docs/PERFORMANCE.md, "The planner on a
# fabric"): for an All-Reduce of each size, every algorithm's simulated time (hierarchical at its
# fastest split across hosts), the model-only planner's choice ÷ the best, and the choice
# COLL_TOPO_FABRIC makes (* = with the hosts in fabric order; >T = stopped by the work budget
# once its simulated clock had passed T, a lower bound). Cells the simulator cannot price within the budget (schedules that are
# not translation invariant at sizes where an exact run is too large) print "-".
#
# usage: bench/collsim_fabric_table.sh [SIZES...]   (default: 1M 1G)
#   COLLSIM (default build/bench/collsim), RANKS (default "1024 10240 102400"), FABRICS (names below),
#   WORK (rate-solving budget per run, default 3e7), EXACT_STEPS (default 1e6).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
COLLSIM=${COLLSIM:-$ROOT/build/bench/collsim}
RANKS=${RANKS:-"1024 10240 102400"}
WORK=${WORK:-3e7}
EXACT_STEPS=${EXACT_STEPS:-1e6}
SIZES=("$@")
[ ${#SIZES[@]} -gt 0 ] || SIZES=(1M 1G)
[ -x "$COLLSIM" ] || { echo "collsim not found at $COLLSIM (build it, or set COLLSIM)" >&2; exit 1; }

# name: collsim options (8 GPUs per node, each with a 50 GB/s NIC, 200 GB/s NVLink; collsim's defaults).
declare -A FABRIC=(
  [nonblocking]="--fabric nonblocking"
  [fattree2]="--fabric fattree2 --leaf-ports 32 --uplinks 16"
  [fattree2-4:1]="--fabric fattree2 --leaf-ports 32 --uplinks 16 --oversub 4"
  [fattree3-4:1]="--fabric fattree3 --leaf-ports 32 --uplinks 16 --pod-leaves 16 --agg-uplinks 16 --agg-oversub 4"
  [rail]="--fabric rail --leaf-ports 32 --uplinks 16"
  [torus3d]="--fabric torus"
  [dragonfly]="--fabric dragonfly --routers 16 --nodes-per-router 8"
  [fattree2-4:1-random]="--fabric fattree2 --leaf-ports 32 --uplinks 16 --oversub 4 --placement random:1"
)
ORDER=${FABRICS:-"nonblocking fattree2 fattree2-4:1 fattree2-4:1-random fattree3-4:1 rail torus3d dragonfly"}
ALGOS="ring tree recdoubling rabenseifner torus hier"

for size in "${SIZES[@]}"; do
  echo
  echo "All-Reduce of $size, 8 ranks per node; simulated time in ms (hier: its best split)"
  echo
  echo "| fabric | ranks | $(sed 's/ / | /g' <<<"$ALGOS") | model's choice | ÷ best | with COLL_TOPO_FABRIC |"
  echo "|---|---:|$(for _ in $ALGOS; do printf -- '---:|'; done)---|---:|---|"
  for name in $ORDER; do
    for n in $RANKS; do
      # shellcheck disable=SC2086
      out=$("$COLLSIM" -c all_reduce -n "$n" -g 8 -b "$size" -e "$size" ${FABRIC[$name]} --compare 1 \
        --work "$WORK" --exact-steps "$EXACT_STEPS" 2>&1) || { echo "| $name | $n | collsim failed: $(tail -1 <<<"$out") |"; continue; }
      awk -v fabric="$name" -v n="$n" -v algos="$ALGOS" '
        /^#/ { next }
        /^ *[0-9]+ +model.s choice / {
          line = $0; sub(/^ *[0-9]+ +model.s choice /, "", line)
          if (match(line, /: not simulated/)) { mchoice = substr(line, 1, RSTART - 1); mratio = "-" }
          else { split(line, p, ": "); mchoice = p[1]; r = line; sub(/.*us, /, "", r); sub(/ x best.*/, "", r); mratio = r }
          next
        }
        /^ *[0-9]+ +fabric tuner.s choice / { tc = $0; sub(/^ *[0-9]+ +fabric tuner.s choice /, "", tc); sub(/: 1.00 x best/, "", tc); tuner = tc; next }
        /^ *[0-9]+ +fabric tuner: no opinion/ { tuner = "model (not all simulated)"; next }
        {
          label = substr($0, 15, 34); gsub(/ +$/, "", label)
          rest = substr($0, 49); split(rest, f, " ")
          base = label; sub(/[( ].*/, "", base)
          cell = (f[2] == "-") ? "-" : (f[2] ~ /^>/) ? sprintf(">%.3f", substr(f[2], 2) / 1000) : sprintf("%.3f", f[2] / 1000)
          if (base == "hier" && f[2] != "-" && f[2] !~ /^>/) { split_ = label; sub(/^hier\(inter=/, "", split_); sub(/\).*$/, "", split_); cell = cell " (" split_ ")" }
          if (index(label, "hosts in fabric order") > 0 && f[2] != "-" && f[2] !~ /^>/) cell = cell "*"
          cells[base] = cell
        }
        END {
          printf "| %s | %s |", fabric, n
          na = split(algos, a, " ")
          for (i = 1; i <= na; i++) printf " %s |", (a[i] in cells) ? cells[a[i]] : "n/a"
          printf " %s | %s | %s |\n", mchoice, mratio, tuner
        }' <<<"$out"
    done
  done
done
