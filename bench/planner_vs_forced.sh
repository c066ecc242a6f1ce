#!/bin/bash
# The planner's automatic All-Reduce choice against every algorithm forced with COLL_ALGO, per size
# from 8 B to 64 MiB, on 2 emulated nodes x 4 ranks and 4 x 2 (bench/emucluster, RATE node links,
# ranks in blocks) and on 8 ranks of one host. Auto and the forced algorithms alternate within each
# of ROUNDS rounds (each round in another order); medians of the out-of-place and in-place times.
# Flags every size where auto > 1.10 x the best.
# usage: bench/planner_vs_forced.sh   (root for the emulated setups; env: BUILD, ROUNDS=3,
#        RATE=1gbit, SETUPS="2x4 4x2 1x8", ALGOS (default: all), BANDS (see below), TOLERANCE=1.10,
#        PIN=1 (bind ranks to cores, see launch; 0: leave placement to the kernel),
#        SUMMARIZE=<results folder>: only print the table of an earlier run)
set -euo pipefail
ROUNDS=${ROUNDS:-3}
source "$(dirname "$0")/compare_lib.sh"
RATE=${RATE:-1gbit}
SETUPS=${SETUPS:-2x4 4x2 1x8}
ALGOS=${ALGOS:-ring tree recdoubling rabenseifner torus hier direct}
TOLERANCE=${TOLERANCE:-1.10}
PIN=${PIN:-1}
ALGO_FORMAT=${ALGO_FORMAT:-allreduce:%s}
# One allreduce_perf invocation per band, "MIN:MAX:ITERS:WARMUP" (x8 steps inside a band): many
# iterations where calls are cheap, few at 16-64 MiB where one call takes about a second at 1 Gbit/s.
# Warm-up is what reaches the steady state a training loop sees. At least 2 calls per size: calls
# alternate between the communicator's two stream lanes (COLL_STREAM_LANES), and the first call on
# a lane creates it and first-touches its shared windows (with 1 warm-up call, an 8-rank direct
# All-Reduce at 16 MiB timed 95 ms instead of 13 ms). 1000 below 32 KiB: on the emulated links the
# kernel's TCP needs that many small calls to settle, whatever the algorithm (2 x 4, tree forced,
# bound ranks: 4 KiB took 1.28 ms per call after 300 warm-up calls, 0.69 ms after 1000; 32 KiB
# 2.46 ms after 10, 0.64 ms after 300; no drops or retransmissions at the tbf meanwhile). From
# 16 MiB, a few calls: 8 ranks on 2 cores timed a direct All-Reduce (rounds through the windows)
# at 21 ms per call with 2 warm-up calls and 3 timed, 12-14 ms with 5 and 10.
BANDS=${BANDS:-8:32K:100:1000 256K:2M:8:4 16M:16M:5:5 64M:64M:2:3}
EMU=$ROOT/bench/emucluster
need "$COLLRUN" "$PERF"
export COLLRUN

CLUSTERS=()
cleanup() {
  local c
  for c in "${CLUSTERS[@]}"; do "$EMU" down "$c" >/dev/null 2>&1 || true; done
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ -n "${SUMMARIZE:-}" ]; then
  out=$SUMMARIZE  # only recompute the table of an earlier run's folder
else
  out=$(results_dir planner_vs_forced)
  echo "planner_vs_forced: setups $SETUPS, $ROUNDS rounds, node links $RATE; raw output in $out"
fi
unset COLL_ALGO COLL_HOSTID COLL_TRANSPORT
start=$SECONDS

# launch SETUP CLUSTER PER ALGO MIN MAX ITERS WARMUP FILE: one allreduce_perf run ("auto" = no COLL_ALGO).
launch() {
  local setup=$1 cluster=$2 per=$3 algo=$4 min=$5 max=$6 iters=$7 warm=$8 file=$9
  local -a env=(COLL_DEBUG=INFO)
  # shellcheck disable=SC2059
  [ "$algo" = auto ] || env+=("COLL_ALGO=$(printf "$ALGO_FORMAT" "$algo")")
  local -a perf=("$PERF" -b "$min" -e "$max" -f 8 -d float -o sum -n "$iters" -w "$warm" -c 0)
  # PIN=1: each rank bound to core (local rank mod cores), the same for auto and every forced run.
  # Unbound, the kernel's placement of 8 ranks on 2 cores changes from launch to launch and moved
  # the same forced plan by up to 2x at 64-512 B on 2 x 4 (346-730 us); bound, within about 10%.
  # shellcheck disable=SC2016
  [ "$PIN" = 0 ] || perf=(sh -c 'exec taskset -c $((COLL_LOCAL_RANK % $(nproc))) "$@"' sh "${perf[@]}")
  if [ -z "$cluster" ]; then
    env "${env[@]}" "$COLLRUN" -np "$per" --timeout 900 "${perf[@]}" >"$file" 2>&1
  else
    env "${env[@]}" "$EMU" run "$cluster" --ranks-per-node "$per" --timeout 900 -- "${perf[@]}" >"$file" 2>&1
  fi
}

for setup in $SETUPS; do
  [ -z "${SUMMARIZE:-}" ] || break
  nodes=${setup%x*} per=${setup#*x}
  cluster=""
  if [ "$nodes" -gt 1 ]; then
    if [ "$(id -u)" != 0 ]; then
      echo "== $setup: skipped (the emulated cluster needs root)"
      continue
    fi
    cluster=pvf$$_$nodes
    CLUSTERS+=("$cluster")
    "$EMU" up "$cluster" "$nodes" --rate "$RATE" | tee "$out/$setup-links.txt"
  else
    per=$((nodes * per))
  fi
  echo "== $setup: $nodes node(s) x ${setup#*x} ranks"
  declare -A inapplicable=()
  for ((round = 1; round <= ROUNDS; ++round)); do
    for band in $BANDS; do
      IFS=: read -r min max iters warm <<<"$band"
      # Each round starts at another place in the list, so no algorithm always runs first in a
      # band (right after the previous band's largest calls, or the cluster's iperf3 check).
      read -r -a order <<<"auto $ALGOS"
      shift_by=$(((round - 1) * ${#order[@]} / ROUNDS))
      for ((k = 0; k < ${#order[@]}; ++k)); do
        algo=${order[$(((k + shift_by) % ${#order[@]}))]}
        [ -z "${inapplicable[$algo]:-}" ] || continue
        f=$out/$setup-$min-$algo-r$round.txt
        if ! launch "$setup" "$cluster" "$per" "$algo" "$min" "$max" "$iters" "$warm" "$f"; then
          if grep -qi "invalid usage" "$f"; then
            # Refused at communicator creation (e.g. direct across hosts, hier on one host).
            inapplicable[$algo]=1
            echo "  $algo: not applicable here: $(grep -m1 -o 'COLL_ALGO[^(]*' "$f" | head -c 150)"
            echo "$algo" >>"$out/$setup-inapplicable.txt"
          else
            echo "  $setup $algo $min..$max round $round FAILED (see $f)"
          fi
        fi
      done
    done
    echo "  round $round done ($((SECONDS - start)) s so far)"
  done
  unset inapplicable
  if [ -n "$cluster" ]; then "$EMU" down "$cluster"; fi
done

# The table: per setup and size, over rounds, the out-of-place and in-place times of each run are
# the samples; auto's plan comes from its INFO "plan allreduce N x float32: ..." lines. The ratio is
# auto's median over the best forced median (min-of-samples ratio beside it: interference only ever
# slows a run down). A flagged size says whether the forced run of auto's own algorithm was as
# fast as the best (then auto chose right and the gap is noise or plan options) or not (a wrong choice).
python3 - "$out" "$TOLERANCE" "$SETUPS" <<'PY' | tee "$out/summary.txt"
import glob, os, re, statistics, sys

out, tol, setups = sys.argv[1], float(sys.argv[2]), sys.argv[3].split()
row = re.compile(r"^\s*(\d+)\s+\d+\s+\w+\s+\w+\s+-?\d+\s+([0-9.]+)\s+\S+\s+\S+\s+\S+\s+([0-9.]+)\s")
plan = re.compile(r"^\[0\] .*plan allreduce (\d+) x float32: ([A-Za-z_]+(?:\([^)]*\))?)")
flagged = wrong = 0
for setup in setups:
    times, chosen = {}, {}
    for f in glob.glob(os.path.join(out, setup + "-*-r*.txt")):
        algo = os.path.basename(f)[len(setup) + 1:].rsplit("-r", 1)[0].split("-", 1)[1]
        for line in open(f, errors="replace"):
            # The table is rank 0's (collrun prefixes "[rank] ").
            body = line[4:] if line.startswith("[0] ") else line
            m = None if body.startswith("[") else row.match(body)
            if m:
                times.setdefault((int(m.group(1)), algo), []).extend([float(m.group(2)), float(m.group(3))])
            if algo == "auto":
                p = plan.match(line)
                if p:
                    chosen.setdefault(int(p.group(1)) * 4, set()).add(p.group(2))
    if not times:
        continue
    algos = sorted({a for (_, a) in times})
    sizes = sorted({s for (s, _) in times})
    med = {k: statistics.median(v) for k, v in times.items()}
    low = {k: min(v) for k, v in times.items()}
    print("== %s: time (us), median of the out-of-place and in-place times of every round" % setup)
    print("%9s %-24s %10s %10s  %-12s %10s %6s %6s" % ("bytes", "auto's plan", "auto", "same forced", "best forced", "best", "ratio", "min-r"))
    for s in sizes:
        forced = [(med[(s, a)], a) for a in algos if a != "auto" and (s, a) in med]
        if (s, "auto") not in med or not forced:
            continue
        bt, ba = min(forced)
        at = med[(s, "auto")]
        plans = sorted(chosen.get(s, {"?"}))
        base = {p.split("(")[0] for p in plans}
        same = [med[(s, a)] for a in base if (s, a) in med]
        st = min(same) if same else float("nan")
        r = at / bt if bt > 0 else float("nan")
        bl = min(low[(s, a)] for a in algos if a != "auto" and (s, a) in low)
        rl = low[(s, "auto")] / bl if bl > 0 else float("nan")
        flag = ""
        if r > tol:
            flagged += 1
            if same and st <= tol * bt:
                flag = "  <-- > %.2f x best; auto's algorithm forced is within it: noise/options" % tol
            else:
                wrong += 1
                flag = "  <-- > %.2f x best: %s beats auto's choice" % (tol, ba)
        print("%9d %-24s %10.1f %10.1f  %-12s %10.1f %6.3f %6.3f%s" % (s, ",".join(plans)[:24], at, st, ba, bt, r, rl, flag))
    print("all algorithms, median (us):")
    print("%9s " % "bytes" + " ".join("%12s" % a for a in algos))
    for s in sizes:
        print("%9d " % s + " ".join("%12s" % ("%.1f" % med[(s, a)] if (s, a) in med else "-") for a in algos))
    print()
print("sizes where auto > %.2f x the best forced algorithm: %d (of them, a faster algorithm than auto's own: %d)" % (tol, flagged, wrong))
PY
echo "total $((SECONDS - start)) s; summary in $out/summary.txt"
