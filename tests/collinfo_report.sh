#!/bin/bash
# collinfo's first-stop report: every section is there; a set knob is listed with its value (the
# job secret hidden); on the CUDA test double the driver, its version and each device's PCI id;
# without a driver the reason; --knobs lists every knob; a bad argument fails.
# usage: collinfo_report.sh COLLINFO CUDA_DOUBLE_LIBRARY
set -u
collinfo=$1 double=$2
fail=0
check() {  # check NAME OUTPUT PATTERN: fails the test when grep -E finds no PATTERN in OUTPUT
  if ! grep -qE -- "$3" <<<"$2"; then echo "FAIL: $1: no line matching '$3' in:"; echo "$2"; fail=1; fi
}
out=$(env -u COLL_CUDA_DRIVER COLL_STREAM_LANES=3 COLL_COMM_SECRET=do-not-print-me COLL_CUDA_DRIVER=/nonexistent/libcuda.so.1 \
  "$collinfo" 2>&1) || { echo "FAIL: collinfo exited $?"; echo "$out"; exit 1; }
for section in '^libcollective [0-9]+\.[0-9]+\.[0-9]+' '^  built with ' '^  hwloc ' '^Transports' '^  shm +built, available' \
  '^  tcp +built, available' '^        between hosts: ' '^  (ib|ucx) +(built|not built)' '^Kernels: reduction [a-z0-9]+, int4 quantization' \
  '^GPU:' '^Topology' '^Knobs set' '^Algorithms'; do
  check "section" "$out" "$section"
done
check "set knob" "$out" '^  COLL_STREAM_LANES +int +default=2 +value=3$'
check "hidden secret" "$out" '^  COLL_COMM_SECRET .*value=\(set, hidden\)$'
if grep -q "do-not-print-me" <<<"$out"; then echo "FAIL: collinfo printed the secret"; fail=1; fi
check "no driver" "$out" '^  CUDA driver: not loaded: .*/nonexistent/libcuda.so.1'
if grep -q "^  COLL_TIMEOUT " <<<"$out"; then echo "FAIL: an unset knob is listed among the set ones"; fail=1; fi

out=$(COLL_CUDA_DRIVER=$double COLL_CUDA_DOUBLE_DEVICES=2 "$collinfo" 2>&1) || { echo "FAIL: collinfo on the CUDA double"; fail=1; }
check "double driver" "$out" "^  CUDA driver: $double, CUDA [0-9]+\.[0-9]+, 2 device\(s\)"
check "double device 0" "$out" '^    device 0: PCI [0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9]$'
check "double device 1" "$out" '^    device 1: PCI '

out=$("$collinfo" --knobs 2>&1) || { echo "FAIL: collinfo --knobs"; fail=1; }
check "--knobs" "$out" '^  COLL_TIMEOUT +int +default=300'
check "--knobs doc" "$out" '^      Seconds any wait may last'
if "$collinfo" --no-such-flag >/dev/null 2>&1; then echo "FAIL: a bad argument did not fail"; fail=1; fi
[ "$fail" = 0 ] && echo "collinfo: every section, set knobs, the CUDA double's devices, no driver, --knobs, a bad argument"
exit "$fail"
