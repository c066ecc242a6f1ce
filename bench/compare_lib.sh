# Helpers sourced by bench/compare_*.sh and bench/callgrind_8byte.sh (not run on its own).
# BUILD (default: <repo>/build) names the build directory; ROUNDS (default 5) the alternations.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
ROUNDS=${ROUNDS:-5}
COLLRUN=$BUILD/bench/collrun
PERF=$BUILD/bench/allreduce_perf
PERF_MPI=$BUILD/bench/allreduce_perf_mpi
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)

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

# median of the numbers on stdin
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# ratio A B -> A/B with 3 decimals (nan when B is 0 or missing)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0 || a == "nan" || b == "nan") print "nan"; else printf "%.3f\n", a / b }'; }
