#!/bin/bash
# bench/plot_perf.py: nccl-tests tables (three rounds of one label: the medians plotted) and a real
# allreduce_perf --json file turn into a PNG with the data it plotted beside it; no rows, a
# missing file and a bad --label fail with a message.
# usage: plot_perf_test.sh PLOT_PERF COLLRUN ALLREDUCE_PERF
set -u
plot=$1 collrun=$2 perf=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
table() {  # table FILE TIME_AT_1M BUSBW_AT_1M: a two-row nccl-tests table (collrun's prefixes included)
  {
    echo "# nccl-tests style"
    echo "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong"
    echo "[0]         1024           256     float     sum      -1     5.00    0.20    0.31      0     5.00    0.20    0.31      0"
    echo "[0]      1048576        262144     float     sum      -1    $2    1.00    $3      0    $2    1.00    $3      0"
  } >"$1"
}
table "$dir/ours-r1.txt" 100.0 4.0
table "$dir/ours-r2.txt" 300.0 1.0
table "$dir/ours-r3.txt" 200.0 2.0
table "$dir/mpi-r1.txt" 500.0 0.5
out=$(/usr/bin/python3 "$plot" -o "$dir/p.png" --title t "$dir" 2>&1) || { echo "FAIL: $out"; fail=1; }
[ "$(head -c 4 "$dir/p.png" | od -An -tx1 | tr -d ' ')" = 89504e47 ] || { echo "FAIL: p.png is not a PNG"; fail=1; }
# ours at 1 MiB: medians of (100, 300, 200) us and (4, 1, 2) GB/s over 3 runs
awk '/^# ours/ { on = 1 } /^# mpi/ { on = 0 } on && $1 == 1048576' "$dir/p.dat" | grep -q "^1048576 200.0000 2.000000 3$" ||
  { echo "FAIL: the medians of ours at 1 MiB are not 200 us, 2 GB/s over 3 runs:"; cat "$dir/p.dat"; fail=1; }
grep -q "^# mpi" "$dir/p.dat" || { echo "FAIL: no mpi line"; fail=1; }
grep -q "2 line(s), 4 point(s)" <<<"$out" || { echo "FAIL: unexpected summary: $out"; fail=1; }

# a real run's JSON, with a label
"$collrun" -np 2 --timeout 60 "$perf" -b 1K -e 64K -f 4 -n 2 -w 1 --json "$dir/real.json" >"$dir/real.log" 2>&1 ||
  { echo "FAIL: allreduce_perf"; cat "$dir/real.log"; fail=1; }
out=$(/usr/bin/python3 "$plot" -o "$dir/real.png" --label "ours 2 ranks=$dir/real.json" 2>&1) || { echo "FAIL: $out"; fail=1; }
grep -q "1 line(s), 4 point(s) (ours 2 ranks)" <<<"$out" || { echo "FAIL: real run: $out"; fail=1; }

# bad input
echo "nothing here" >"$dir/empty.txt"
/usr/bin/python3 "$plot" -o "$dir/x.png" "$dir/empty.txt" 2>"$dir/err" && { echo "FAIL: no rows did not fail"; fail=1; }
grep -q "no benchmark rows" "$dir/err" || { echo "FAIL: no rows: $(cat "$dir/err")"; fail=1; }
/usr/bin/python3 "$plot" -o "$dir/x.png" "$dir/missing.txt" 2>"$dir/err" && { echo "FAIL: a missing file did not fail"; fail=1; }
grep -q "missing.txt: no such file" "$dir/err" || { echo "FAIL: missing file: $(cat "$dir/err")"; fail=1; }
/usr/bin/python3 "$plot" -o "$dir/x.png" --label nolabel "$dir/mpi-r1.txt" 2>"$dir/err" && { echo "FAIL: a bad --label did not fail"; fail=1; }
grep -q "want NAME=FILE" "$dir/err" || { echo "FAIL: bad label: $(cat "$dir/err")"; fail=1; }
[ "$fail" = 0 ] && echo "plot_perf: medians of rounds, a real run's JSON, and three kinds of bad input"
exit "$fail"
