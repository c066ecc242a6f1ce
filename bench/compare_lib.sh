# Helpers sourced by bench/compare_*.sh and bench/callgrind_8byte.sh (not run on its own).
# BUILD (default: <repo>/build) names the build directory; ROUNDS (default 5) the alternations.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
ROUNDS=${ROUNDS:-5}
COLLRUN=$BUILD/bench/collrun
PERF=$BUILD/bench/allreduce_perf
PERF_MPI=$BUILD/bench/allreduce_perf_mpi
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)
# The fewest warm-up calls that leave no first call of a stream lane in the timed loop: calls
# alternate between the communicator's lanes (COLL_STREAM_LANES, 2 by default) and a lane's first
# call makes it (connections, windows, buffers). With 1, 64 MiB compressed on 4 emulated nodes x 1
# timed 310 ms per call instead of 160 ms (one lane, or 2 warm-up calls: 150-170 ms).
LANES_WARMUP=2

need() {
  local f
  for f in "$@"; do
    if [ ! -x "$f" ]; then
      echo "missing $f: build first (cmake --build $BUILD) or set BUILD=<build dir>" >&2
      exit 2
    fi
  done
}

# Creates bench/results/<script>-<date>/ and prints its path.
results_dir() {
  local dir
  dir=$ROOT/bench/results/$1-$(date +%Y%m%d-%H%M%S)
  mkdir -p "$dir"
  echo "$dir"
}

# Drops collrun's "[rank] " prefix so tables parse alike from both launchers.
strip_prefix() { sed -E 's/^\[[0-9]+\] //'; }

# column FILE SIZE COL: a column of the nccl-tests row for SIZE bytes (first type/op in the file).
# Columns: 1 size 2 count 3 type 4 redop 5 root 6 time 7 algbw 8 busbw 9 #wrong (out-of-place),
# 10 time 11 algbw 12 busbw 13 #wrong (in-place).
column() { strip_prefix <"$1" | awk -v s="$2" -v c="$3" '$1 == s && $1 !~ /^#/ { print $c; exit }'; }

# algbw FILE SIZE: the out-of-place algbw in GB/s from the time column (4 digits; the printed
# column has 2, which moves a ratio near 0.9 by up to 2%).
algbw() { column "$1" "$2" 6 | awk -v s="$2" '$1 > 0 { printf "%.4f\n", s / $1 / 1000 }'; }

# median of the numbers on stdin
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# ratio A B -> A/B with 3 decimals (nan when B is 0 or missing)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0 || a == "nan" || b == "nan") print "nan"; else printf "%.3f\n", a / b }'; }

# Two network namespaces joined by a veth: netns_pair TAG SUBNET (e.g. cmp 198.18.9) sets NS_A,
# NS_B (SUBNET.1 and SUBNET.2, interfaces named TAG a/b + pid) and VA, VB, and removes them on
# exit, also on failure or interrupt. Root only.
netns_pair() {
  NS_A=$1_a_$$ NS_B=$1_b_$$ VA=$1a$$ VB=$1b$$
  trap 'ip netns del "$NS_A" 2>/dev/null || true; ip netns del "$NS_B" 2>/dev/null || true' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  ip netns add "$NS_A"; ip netns add "$NS_B"
  ip link add "$VA" type veth peer name "$VB"
  ip link set "$VA" netns "$NS_A"; ip link set "$VB" netns "$NS_B"
  ip -n "$NS_A" addr add "$2.1/24" dev "$VA"; ip -n "$NS_B" addr add "$2.2/24" dev "$VB"
  local ns
  for ns in "$NS_A" "$NS_B"; do ip -n "$ns" link set lo up; done
  ip -n "$NS_A" link set "$VA" up; ip -n "$NS_B" link set "$VB" up
}

# emu_down_on_exit NAME: bench/emucluster down NAME when the script exits, also on failure or
# interrupt; call it again for each further cluster. Root only.
EMU_CLUSTERS=()
emu_down_on_exit() {
  EMU_CLUSTERS+=("$1")
  trap emu_down_all EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}
emu_down_all() {
  local c
  for c in "${EMU_CLUSTERS[@]}"; do "$ROOT/bench/emucluster" down "$c" >/dev/null 2>&1 || true; done
}

# Progress of a long run: progress_start TOTAL before the first of TOTAL runs (or rounds), then
# progress WHAT after each: "[k/TOTAL] WHAT (elapsed, about T left)", the estimate from the mean so far.
progress_start() { PROGRESS_TOTAL=$1 PROGRESS_DONE=0 PROGRESS_T0=$SECONDS; }
progress() {
  PROGRESS_DONE=$((PROGRESS_DONE + 1))
  local el=$((SECONDS - PROGRESS_T0)) left=0
  [ "$PROGRESS_DONE" -gt 0 ] && left=$((el * (PROGRESS_TOTAL - PROGRESS_DONE) / PROGRESS_DONE))
  printf '  [%d/%d] %s (%dm%02ds elapsed, about %dm%02ds left)\n' "$PROGRESS_DONE" "$PROGRESS_TOTAL" "$1" \
    $((el / 60)) $((el % 60)) $((left / 60)) $((left % 60))
}

# plot_results DIR TITLE [plot_perf.py options]: DIR/plot.png from the benchmark tables in DIR (busbw
# and time against size, a line per label: bench/plot_perf.py); a note instead where gnuplot or
# Debian's python3 is missing.
plot_results() {
  local dir=$1 title=$2
  shift 2
  if command -v gnuplot >/dev/null && [ -x /usr/bin/python3 ]; then
    /usr/bin/python3 "$ROOT/bench/plot_perf.py" -o "$dir/plot.png" --title "$title" "$@" "$dir" || true
  else
    echo "no plot: gnuplot (apt-get install gnuplot-nox) or /usr/bin/python3 is missing"
  fi
}
