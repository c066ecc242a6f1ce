#!/bin/bash
# Each host's ranks in their GPUs' ring order, on the CUDA driver test double placed in a topology
# file: tests/topo/pcie_4gpu_2nic.xml has GPUs 03:00.0 and 03:01.0 under one PCIe switch and
# 13:00.0 and 13:01.0 under the other; ranks 0..3 drive 03:00.0, 13:00.0, 03:01.0, 13:01.0, so rank
# order would cross each switch's uplink four times and the ring order is 0 2 1 3. Rank 0 must log
# that order, and every All-Reduce algorithm (each renames its schedule to it), the compressed
# All-Reduce and an All-Gather (which keeps rank order) must be exact on device buffers. GPUs the
# file does not show: rank order, and no such line.
# usage: local_ring_order.sh COLLRUN BINDIR DOUBLE TOPO_XML
set -euo pipefail
collrun=$1 bin=$2 double=$3 xml=$4
export COLL_CUDA_DRIVER=$double COLL_CUDA_DOUBLE_DEVICES=4 COLL_TOPO_FILE=$xml
export COLL_TIMEOUT=${COLL_TIMEOUT:-30}
placed=0000:03:00.0,0000:13:00.0,0000:03:01.0,0000:13:01.0
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}

# run NAME ENV... -- PERF ARGS...: 4 ranks; exit 0 and no wrong element required.
run() {
  local name=$1 log=$out/$1.txt
  shift
  local envs=()
  while [ "$1" != -- ]; do
    envs+=("$1")
    shift
  done
  shift
  env "${envs[@]}" "$collrun" -np 4 --timeout 90 "$@" >"$log" 2>&1 || {
    cat "$log"
    fail "$name exited $?"
  }
  grep -q "Out of bounds values : 0 OK" "$log" || {
    cat "$log"
    fail "$name: wrong elements"
  }
}

order="this host's ranks in ring order (their GPUs' places in the node): 0 2 1 3"
for algo in ring tree recdoubling rabenseifner direct; do
  run "$algo" COLL_CUDA_DOUBLE_BUSIDS=$placed COLL_DEBUG=INFO COLL_ALGO=$algo -- \
    "$bin/allreduce_perf" -b 1K -e 256K -f 256 -G 1 -c 1 -n 2 -w 1
  grep -q "^\[0\] .*$order" "$out/$algo.txt" || {
    grep -E "topology|plan" "$out/$algo.txt" | head -n 20
    fail "$algo: rank 0 did not log the ring order 0 2 1 3"
  }
done
# One size: the double runs the quantization kernels on the CPU.
run compressed COLL_CUDA_DOUBLE_BUSIDS=$placed -- "$bin/allreduce_perf" -b 64K -e 64K -G 1 -c 1 -n 1 -w 1 --compress int4
run allgather COLL_CUDA_DOUBLE_BUSIDS=$placed -- "$bin/all_gather_perf" -b 1K -e 256K -f 256 -G 1 -c 1 -n 2 -w 1
run unplaced COLL_CUDA_DOUBLE_BUSIDS=0000:99:00.0,0000:99:01.0,0000:99:02.0,0000:99:03.0 COLL_DEBUG=INFO -- \
  "$bin/allreduce_perf" -b 8 -e 8 -G 1 -c 1 -n 1 -w 1
if grep -q "ring order" "$out/unplaced.txt"; then
  grep "ring order" "$out/unplaced.txt"
  fail "GPUs the topology file does not show were ordered"
fi
echo "PASS: local_ring_order (ring order 0 2 1 3 logged; every All-Reduce algorithm, compressed and All-Gather exact)"
