#!/bin/bash
# The include check catches what it is for: a copy of the tree passes, then the same copy with one
# planted upward include, one include across siblings and one include not spelled from the root
# fails, naming each file and line (and not the public header, which every layer may include).
# usage: planted_test.sh ROOT TABLE
set -euo pipefail
root=$1 table=$(realpath "$2") check=$(dirname "$0")/check_includes.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tar -C "$root" --exclude='bench/results' -cf - include src algorithms transports bench tests | tar -C "$tmp" -xf -
bash "$check" "$tmp" "$table" >/dev/null || { echo "FAIL: the unplanted copy does not pass"; exit 1; }

plant() {  # FILE INCLUDE: appends the include, prints the line number it landed on
  echo "#include \"$2\"" >>"$tmp/$1"
  wc -l <"$tmp/$1"
}
up=$(plant src/base/log.h src/comm/comm.h)
across=$(plant src/kernels/reduce.h src/topo/topology.h)
unrooted=$(plant algorithms/phases.h schedule/schedule.h)
public=$(plant src/base/status.h collective/collective.h)
rc=0
out=$(bash "$check" "$tmp" "$table") || rc=$?
echo "$out"
fail=0
expect() {
  if ! grep -qF -- "$1" <<<"$out"; then echo "FAIL: the check did not report: $1"; fail=1; fi
}
[ "$rc" = 1 ] || { echo "FAIL: the check exited $rc, not 1"; fail=1; }
expect "src/base/log.h:$up: #include \"src/comm/comm.h\": points up"
expect "src/kernels/reduce.h:$across: #include \"src/topo/topology.h\": points across"
if grep -qF "src/base/status.h:$public:" <<<"$out"; then
  echo "FAIL: the public header, included as its users spell it, was reported"; fail=1
fi
expect "algorithms/phases.h:$unrooted: #include \"schedule/schedule.h\": no such file"
[ "$fail" = 0 ] && echo "PASS: every planted include was reported with its file and line"
exit "$fail"
