#!/bin/bash
# TCP all-reduce vs the link: two namespaces joined by a veth; iperf3 --bidir -t 10 -P S
# (S = COLL_NSOCKS_PERPEER) against our 2-rank allreduce_perf at 64 MiB over tcp, alternated
# ROUNDS times. Ratio = our busbw / iperf3's per-direction throughput (for 2 ranks a ring moves
# the whole buffer each way, so busbw is bytes per second per direction). Needs root.
# usage: bench/compare_iperf_netns.sh      (env: BUILD, ROUNDS=5, COLL_NSOCKS_PERPEER=2, ITERS=20)
set -euo pipefail
source "$(dirname "$0")/compare_lib.sh"
S=${COLL_NSOCKS_PERPEER:-2}
ITERS=${ITERS:-20}
need "$COLLRUN" "$PERF"
command -v iperf3 >/dev/null || { echo "iperf3 not installed" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "needs root (ip netns)" >&2; exit 2; }

netns_pair cmp 198.18.9

out=$(results_dir compare_iperf_netns)
echo "compare_iperf_netns: iperf3 --bidir -P $S vs allreduce_perf 64 MiB tcp, $ROUNDS rounds; raw output in $out"
progress_start "$ROUNDS"
for ((round = 1; round <= ROUNDS; ++round)); do
  ip netns exec "$NS_B" iperf3 -s -1 -B 198.18.9.2 >"$out/iperf-server-r$round.txt" 2>&1 &
  server=$!
  sleep 0.5
  ip netns exec "$NS_A" iperf3 -c 198.18.9.2 --bidir -t 10 -P "$S" -J >"$out/iperf-r$round.json" 2>&1 || true
  wait "$server" || true
  COLL_TRANSPORT=tcp COLL_SOCKET_IFNAME=cmp COLL_NSOCKS_PERPEER=$S \
    "$COLLRUN" -np 2 --netns "$NS_A,$NS_B" --timeout 600 "$PERF" -b 64M -e 64M -d float -o sum -n "$ITERS" -w 5 -c 0 \
    >"$out/ours-r$round.txt" 2>&1
  progress "round $round of $ROUNDS"
done

# Per-direction throughput in GB/s: the mean of the two directions' received rates.
iperf_gbs() {
  python3 - "$1" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
    e = d["end"]
    up = e["sum_received"]["bits_per_second"]
    down = e.get("sum_received_bidir_reverse", e.get("sum_sent_bidir_reverse", {})).get("bits_per_second", up)
    print("%.4f" % ((up + down) / 2 / 8e9))
except Exception:
    print("nan")
PY
}
ib=$(for f in "$out"/iperf-r*.json; do iperf_gbs "$f"; done | median)
ob=$(for f in "$out"/ours-r*.txt; do column "$f" 67108864 8; done | median)
{
  echo "2 namespaces over a veth, median of $ROUNDS alternated rounds:"
  printf "  iperf3 --bidir -P %s per direction: %s GB/s\n" "$S" "$ib"
  printf "  allreduce_perf 64 MiB busbw (tcp):   %s GB/s\n" "$ob"
  printf "  ratio ours/iperf3: %s\n" "$(ratio "$ob" "$ib")"
} | tee "$out/summary.txt"
