#!/bin/bash
# NCCL net plugin point-to-point bandwidth vs the link: two namespaces joined by a veth; iperf3 -P S
# (S = COLL_NSOCKS_PERPEER, the plugin's TCP streams per connection) against the conformance
# driver's benchmark mode (tests/nccl_net/nccl_net_driver --bench: 2 processes, one per namespace,
# plugin API isend/irecv/test, SIZE messages, INFLIGHT requests in flight), both one direction for
# SECONDS, alternated ROUNDS times. Ratio = median plugin GB/s / median iperf3 GB/s. Needs root.
# usage: bench/compare_nccl_net_iperf.sh
#   env: BUILD, ROUNDS=5, SECONDS_PER_RUN=10, SIZE=4M, INFLIGHT=8, COLL_NSOCKS_PERPEER=2, VERSION (newest),
#        PIN=1 (sender on CPU 0, receiver on CPU 1 for both tools, as two hosts; PIN=0 lets them float)
set -euo pipefail
source "$(dirname "$0")/compare_lib.sh"
S=${COLL_NSOCKS_PERPEER:-2}
T=${SECONDS_PER_RUN:-10}
SIZE=${SIZE:-4M}
INFLIGHT=${INFLIGHT:-8}
DRIVER=$BUILD/tests/nccl_net/nccl_net_driver
PLUGIN_DIR=$BUILD/src/nccl_net
need "$DRIVER"
[ -f "$PLUGIN_DIR/libnccl-net-collective.so" ] || { echo "missing $PLUGIN_DIR/libnccl-net-collective.so" >&2; exit 2; }
command -v iperf3 >/dev/null || { echo "iperf3 not installed" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "needs root (ip netns)" >&2; exit 2; }
version_args=()
[ -n "${VERSION:-}" ] && version_args=(--version "$VERSION")
# Two hosts emulated on one machine: both programs spin or block differently, so where the kernel
# places them decides as much as the program does. Pinning sender and receiver apart (same CPUs for
# both tools) removes that noise and is closer to two hosts.
PIN=${PIN:-1}
iperf_client_pin=() iperf_server_pin=() driver_pin=()
if [ "$PIN" = 1 ] && [ "$(nproc)" -ge 2 ]; then
  iperf_client_pin=(-A 0) iperf_server_pin=(-A 1) driver_pin=(--cpus 0,1)
fi

netns_pair cnp 198.18.11

out=$(results_dir compare_nccl_net_iperf)
{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(uname -n), $(nproc) cores, $(uname -r)"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "driver: $DRIVER --bench $SIZE --inflight $INFLIGHT --seconds $T ${version_args[*]}"
  echo "plugin: $PLUGIN_DIR/libnccl-net-collective.so, COLL_NCCL_NET=tcp COLL_NSOCKS_PERPEER=$S"
  echo "iperf3: -c 198.18.11.2 -t $T -P $S ${iperf_client_pin[*]} (one direction, A -> B), server ${iperf_server_pin[*]}"
  echo "pinning: PIN=$PIN (driver ${driver_pin[*]})"
} >"$out/setup.txt"
echo "compare_nccl_net_iperf: iperf3 -P $S vs plugin isend/irecv $SIZE x $INFLIGHT in flight, tcp, $ROUNDS rounds; raw output in $out"
progress_start "$ROUNDS"
for ((round = 1; round <= ROUNDS; ++round)); do
  ip netns exec "$NS_B" iperf3 -s -1 -B 198.18.11.2 "${iperf_server_pin[@]}" >"$out/iperf-server-r$round.txt" 2>&1 &
  server=$!
  sleep 0.5
  ip netns exec "$NS_A" iperf3 -c 198.18.11.2 -t "$T" -P "$S" "${iperf_client_pin[@]}" -J >"$out/iperf-r$round.json" 2>&1 || true
  wait "$server" || true
  # Rank 0 (sender) in A, rank 1 (receiver, listener) in B: the driver enters each namespace itself.
  LD_LIBRARY_PATH=$PLUGIN_DIR NCCL_NET_PLUGIN=collective COLL_NCCL_NET=tcp COLL_SOCKET_IFNAME=cnp \
    COLL_NSOCKS_PERPEER=$S "$DRIVER" --bench "$SIZE" --inflight "$INFLIGHT" --seconds "$T" \
    --netns "$NS_A,$NS_B" "${driver_pin[@]}" --timeout 120 "${version_args[@]}" >"$out/plugin-r$round.txt" 2>&1 || true
  progress "round $round of $ROUNDS"
done

iperf_gbs() {
  python3 - "$1" <<'PY'
import json, sys
try:
    print("%.4f" % (json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"] / 8e9))
except Exception:
    print("nan")
PY
}
plugin_gbs() { sed -n 's/.*GBps=\([0-9.]*\).*/\1/p' "$1" | head -1; }
for f in "$out"/iperf-r*.json; do iperf_gbs "$f"; done >"$out/iperf-gbs.txt"
for f in "$out"/plugin-r*.txt; do v=$(plugin_gbs "$f"); echo "${v:-nan}"; done >"$out/plugin-gbs.txt"
ib=$(median <"$out/iperf-gbs.txt")
pb=$(median <"$out/plugin-gbs.txt")
r=$(ratio "$pb" "$ib")
verdict=$(awk -v r="$r" 'BEGIN { if (r == "nan") print "no result"; else if (r >= 0.90) print "meets the 90% target"; else print "BELOW the 90% target" }')
{
  echo "2 namespaces over a veth, one direction, median of $ROUNDS alternated rounds of $T s:"
  printf "  iperf3 -P %s:                                    %s GB/s  (rounds: %s)\n" "$S" "$ib" "$(paste -sd' ' "$out/iperf-gbs.txt")"
  printf "  plugin isend/irecv %s x %s in flight (tcp):     %s GB/s  (rounds: %s)\n" "$SIZE" "$INFLIGHT" "$pb" "$(paste -sd' ' "$out/plugin-gbs.txt")"
  printf "  ratio plugin/iperf3: %s (%s)\n" "$r" "$verdict"
  echo "  load after: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$out/summary.txt"
