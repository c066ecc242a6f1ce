#!/bin/bash
# Compressed vs uncompressed All-Reduce on an emulated cluster (bench/emucluster): NODES nodes x 1
# rank, RATE per node link, float32 SIZE. allreduce_perf --compress SPEC against the planner's own
# uncompressed choice (COLL_ALGO unset, --wire for its wire bytes), alternated ROUNDS times;
# medians of the out-of-place time; speedup = uncompressed time / compressed time; wire ratio =
# compressed wire bytes per call / uncompressed ones (both from collCommGetStats).
# Targets: speedup >= 5, wire ratio <= 0.14. Root.
# usage: bench/compare_compressed_emucluster.sh   (env: BUILD, ROUNDS=3, RATE=1gbit, NODES=4,
#        SIZE=64M, ITERS=4, WARMUP=2, SPEC=int4:64)
set -euo pipefail
ROUNDS=${ROUNDS:-3}
source "$(dirname "$0")/compare_lib.sh"
RATE=${RATE:-1gbit}
NODES=${NODES:-4}
SIZE=${SIZE:-64M}
ITERS=${ITERS:-4}
WARMUP=${WARMUP:-$LANES_WARMUP}  # see compare_lib.sh
SPEC=${SPEC:-int4:64}
EMU=$ROOT/bench/emucluster
need "$COLLRUN" "$PERF"
[ "$(id -u)" = 0 ] || { echo "needs root (bench/emucluster uses ip netns)" >&2; exit 2; }
export COLLRUN

bytes=$(numfmt --from=iec "$SIZE")
name=cmpcomp$$
emu_down_on_exit "$name"

out=$(results_dir compare_compressed_emucluster)
summary=$out/summary.txt
echo "compare_compressed_emucluster: allreduce_perf $SIZE float sum on $NODES nodes x 1 rank, $RATE links;" \
  "--compress $SPEC vs the planner's uncompressed choice, alternated $ROUNDS rounds; raw output in $out" | tee "$summary"
unset COLL_ALGO COLL_HOSTID COLL_TRANSPORT COLL_COMPRESS_MIN_BYTES
"$EMU" up "$name" "$NODES" --rate "$RATE" | tee "$out/links.txt"
"$EMU" status "$name" >>"$out/links.txt"
progress_start $((2 * ROUNDS))
for ((round = 1; round <= ROUNDS; ++round)); do
  for mode in plain compressed; do
    f=$out/$mode-r$round.txt
    extra=(--wire)
    [ $mode = plain ] || extra=(--compress "$SPEC")
    COLL_DEBUG=INFO "$EMU" run "$name" --timeout 900 -- \
      "$PERF" -b "$SIZE" -e "$SIZE" -d float -o sum -n "$ITERS" -w "$WARMUP" -c 0 "${extra[@]}" >"$f" 2>&1 ||
      echo "  $mode round $round FAILED (see $f)"
    progress "$(printf 'round %d %-10s %s us, wire %s B per rank and call' "$round" "$mode" \
      "$(column "$f" "$bytes" 6)" "$(column "$f" "$bytes" 14)")"
  done
done
"$EMU" down "$name"
# The planner's choice, as the INFO plan line names it.
algo=$(strip_prefix <"$out/plain-r1.txt" | grep -Eo "plan allreduce [0-9]+ x float32: [a-z_]+(\([^)]*\))?" |
  awk -v n=$((bytes / 4)) '$3 == n { print $NF }' | sort -u | tr '\n' ' ')
declare -A time wire
for mode in plain compressed; do
  time[$mode]=$(for f in "$out/$mode"-r*.txt; do column "$f" "$bytes" 6; done | median)
  wire[$mode]=$(for f in "$out/$mode"-r*.txt; do column "$f" "$bytes" 14; done | median)
  lo=$(for f in "$out/$mode"-r*.txt; do column "$f" "$bytes" 6; done | sort -g | head -n 1)
  hi=$(for f in "$out/$mode"-r*.txt; do column "$f" "$bytes" 6; done | sort -g | tail -n 1)
  printf '  %-10s median time %s us (min %s, max %s), wire %s B per rank and call\n' "$mode" "${time[$mode]}" "$lo" \
    "$hi" "${wire[$mode]}" | tee -a "$summary"
done
echo "  uncompressed algorithm chosen by the planner: ${algo:-unknown (no INFO plan line)}" | tee -a "$summary"
relerr=$(strip_prefix <"$out/compressed-r1.txt" | awk -v s="$bytes" '$1 == s { print $16; exit }')
echo "  compressed: wire $(column "$out/compressed-r1.txt" "$bytes" 15)% of an uncompressed ring's; relerr column $relerr (N/A with -c 0)" |
  tee -a "$summary"
speedup=$(ratio "${time[plain]}" "${time[compressed]}")
wratio=$(ratio "${wire[compressed]}" "${wire[plain]}")
v1=$(awk -v s="$speedup" 'BEGIN { print (s != "nan" && s >= 5) ? "meets" : "MISSES" }')
v2=$(awk -v w="$wratio" 'BEGIN { print (w != "nan" && w <= 0.14) ? "meets" : "MISSES" }')
echo "  speedup (uncompressed time / compressed time): $speedup ($v1 the target >= 5)" | tee -a "$summary"
echo "  wire ratio (compressed / uncompressed bytes): $wratio ($v2 the target <= 0.14)" | tee -a "$summary"
echo "summary in $summary"
