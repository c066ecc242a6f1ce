#!/bin/bash
# The *_perf benchmarks on device buffers against the CUDA driver test double (not a GPU): every
# collective with -G 1 and its data check (#wrong 0, counted on the device), the compressed
# All-Reduce (--compress, device residual), the default (device buffers where a device is present),
# --host, JSON's memory field, and the refusals (-g 2, --stream, -G 1 without a device).
# usage: perf_device.sh COLLRUN BINDIR DOUBLE
set -euo pipefail
collrun=$1 bin=$2 double=$3
export COLL_CUDA_DRIVER=$double COLL_CUDA_DOUBLE_DEVICES=1 COLL_TIMEOUT=${COLL_TIMEOUT:-30}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# run NAME NP ARGS...: runs and requires exit 0 and no wrong element.
run() {
  local name=$1 np=$2 log=$out/$1.txt
  shift 2
  "$collrun" -np "$np" --timeout 60 "$@" >"$log" 2>&1 || { cat "$log"; fail "$name exited $?"; }
  grep -q "Out of bounds values : 0 OK" "$log" || { cat "$log"; fail "$name: wrong elements"; }
}

run allreduce 2 "$bin/allreduce_perf" -b 8 -e 1M -f 32 -G 1 -c 1 -n 2 -w 1
grep -q "(device buffers)" "$out/allreduce.txt" || fail "allreduce: no device-buffer header"
grep -q "# check: on the device" "$out/allreduce.txt" || { cat "$out/allreduce.txt"; fail "check not on the device"; }
rows=$(grep -cE '^(\[[0-9]+\] )? +[0-9]+ ' "$out/allreduce.txt" || true)
[ "$rows" = 4 ] || { cat "$out/allreduce.txt"; fail "allreduce: $rows rows, expected 4 (8 B .. 256 KiB)"; }

for b in all_gather reduce_scatter broadcast reduce alltoall sendrecv gather scatter; do
  run "$b" 2 "$bin/${b}_perf" -b 8 -e 64K -f 64 -G 1 -c 1 -n 1 -w 1
done
run reduce_root 3 "$bin/reduce_perf" -b 1K -e 1K -r -1 -G 1 -n 1 -w 1
# Every type and op at one small size (1 rank ... 3 ranks exercise other plans).
run allreduce_types 3 "$bin/allreduce_perf" -b 1K -e 1K -d all -o all -G 1 -n 1 -w 1

# The compressed All-Reduce on device buffers (a device residual with :feedback), 2 and 3 ranks.
# (Small sizes: the double runs the quantization kernels on host threads, seconds per MiB.)
run compressed 2 "$bin/allreduce_perf" -b 1K -e 32K -f 32 -G 1 -c 1 -n 2 -w 1 --compress int4:feedback
grep -q "(device buffers)" "$out/compressed.txt" || fail "compressed: not device buffers"
run compressed_bf16 3 "$bin/allreduce_perf" -b 4K -e 4K -d bfloat16 -G 1 -c 1 -n 2 -w 1 --compress int4:128

# Default: the double has a device, so device buffers; --host keeps host memory.
run default 2 "$bin/allreduce_perf" -b 8 -e 8 -n 1 -w 1 --json "$out/default.json"
grep -q "(device buffers)" "$out/default.txt" || fail "default: not device buffers with a device present"
grep -q '"memory": "device"' "$out/default.json" || fail "JSON: no memory field"
run host 2 "$bin/allreduce_perf" -b 8 -e 64K -f 64 --host -n 1 -w 1 --json "$out/host.json"
grep -q "(host buffers)" "$out/host.txt" || fail "--host: not host buffers"
grep -q '"memory": "host"' "$out/host.json" || fail "JSON --host: memory is not host"

# Refusals: -g 2, --stream on device buffers, and -G 1 without a driver.
if "$collrun" -np 1 --timeout 30 "$bin/allreduce_perf" -G 1 --stream >"$out/stream.txt" 2>&1; then
  fail "--stream accepted on device buffers"
fi
grep -q "takes host buffers" "$out/stream.txt" || { cat "$out/stream.txt"; fail "--stream -G 1: no clear message"; }
if "$collrun" -np 1 --timeout 30 "$bin/allreduce_perf" -g 2 >"$out/g2.txt" 2>&1; then fail "-g 2 accepted"; fi
grep -q "one GPU per process" "$out/g2.txt" || { cat "$out/g2.txt"; fail "-g 2: no clear message"; }
if COLL_CUDA_DRIVER=/nonexistent/libcuda.so.1 "$collrun" -np 1 --timeout 30 "$bin/allreduce_perf" -G 1 \
  >"$out/nodev.txt" 2>&1; then fail "-G 1 accepted without a driver"; fi
grep -q "no CUDA device" "$out/nodev.txt" || { cat "$out/nodev.txt"; fail "-G 1: no clear message"; }
# Without a driver the default is host memory.
COLL_CUDA_DRIVER=/nonexistent/libcuda.so.1 run nodriver 2 "$bin/allreduce_perf" -b 8 -e 8 -n 1 -w 1
grep -q "(host buffers)" "$out/nodriver.txt" || fail "no driver: not host buffers"
echo "perf_device: every collective on device buffers (double), --host, -g 2 and -G 1 refusals OK"
