#!/bin/bash
# collinfo --topo on this machine and on each node design of tests/topo (COLL_TOPO_FILE), checking
# the NIC each GPU gets and the ring; a file that does not parse fails with an error naming it.
# usage: collinfo_topo.sh COLLINFO FIXTURE_DIR
set -uo pipefail
collinfo=$1 dir=$2
fail=0
check() {  # check NAME OUTPUT PATTERN...
  local name=$1 out=$2
  shift 2
  for pattern in "$@"; do
    grep -qE -- "$pattern" <<<"$out" || { echo "FAIL $name: no line matches '$pattern'"; echo "$out"; fail=1; }
  done
}

out=$(env -u COLL_TOPO_FILE "$collinfo" --topo 2>&1) || { echo "FAIL: collinfo --topo on this machine: $out"; fail=1; }
check machine "$out" "^topology: this machine" "numa [0-9]+ socket"

out=$(COLL_TOPO_FILE=$dir/dgx_h100.xml "$collinfo" --topo 2>&1) || { echo "FAIL dgx: $out"; fail=1; }
check dgx "$out" "gpu 0 0000:18:00.0 numa 0 .* nvswitch x18" "gpu 3: NODE NODE NODE PIX SYS SYS SYS SYS  -> nic mlx5_3$" \
  "gpu 7: .* -> nic mlx5_7$" "ring \(one rank per GPU\): 0 1 2 3 4 5 6 7$"

out=$(COLL_TOPO_FILE=$dir/pcie_4gpu_2nic.xml "$collinfo" --topo 2>&1) || { echo "FAIL pcie: $out"; fail=1; }
check pcie "$out" "gpu 1: PIX PHB  -> nic mlx5_0$" "gpu 2: PHB PIX  -> nic mlx5_1$"

out=$(COLL_TOPO_FILE=$dir/cpu_2socket_2nic.xml "$collinfo" --topo 2>&1) || { echo "FAIL cpu: $out"; fail=1; }
check cpu "$out" "host rank on numa 0: nic mlx5_0 \(PHB\)" "host rank on numa 1: nic mlx5_1 \(PHB\)"

bad=$(mktemp --suffix=.xml)
trap 'rm -f "$bad"' EXIT
printf '<?xml version="1.0"?>\n<topology version="2.0"><object type="Machine"' >"$bad"
if out=$(COLL_TOPO_FILE=$bad "$collinfo" --topo 2>&1); then
  echo "FAIL: a truncated XML file was accepted: $out"; fail=1
fi
check bad_xml "$out" "$bad"
if out=$(COLL_TOPO_FILE=/nonexistent/node.xml "$collinfo" --topo 2>&1); then
  echo "FAIL: a missing file was accepted"; fail=1
fi
check missing "$out" "/nonexistent/node.xml"
[ "$fail" = 0 ] && echo "collinfo --topo: this machine, 3 node designs and 2 bad files as expected"
exit "$fail"
