#!/bin/bash
# Every collective over the UCX transport between "two hosts": ranks in two network namespaces
# joined by a veth pair, COLL_NET=ucx (UCX over its tcp transport), 2 and 4 ranks, exact results.
# usage: netns_ucx.sh COLLRUN MP_COLLECTIVES_CHECK      (root; exit 77 = skipped)
# collrun --netns remounts /sys in each rank's namespace (as `ip netns exec` does), so UCX's tcp
# transport, which lists interfaces from /sys/class/net, sees the namespace's veth.
set -u
COLLRUN=${1:?usage: netns_ucx.sh COLLRUN MP_COLLECTIVES_CHECK}
CHECK=${2:?usage: netns_ucx.sh COLLRUN MP_COLLECTIVES_CHECK}

skip() {
  echo "SKIP: netns_ucx: $* (needs root and 'ip netns'; not a failure)"
  exit 77
}

NS_A=ucx_a_$$
NS_B=ucx_b_$$
VETH_A=cua$$
VETH_B=cub$$
cleanup() {
  ip netns del "$NS_A" 2>/dev/null
  ip netns del "$NS_B" 2>/dev/null
  ip link del "$VETH_A" 2>/dev/null
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

[ "$(id -u)" = 0 ] || skip "not root"
command -v ip >/dev/null || skip "iproute2 (ip) not installed"
ip netns add "$NS_A" 2>/dev/null || skip "cannot create network namespaces"
ip netns add "$NS_B" || skip "cannot create a second namespace"
ip link add "$VETH_A" type veth peer name "$VETH_B" 2>/dev/null || skip "cannot create a veth pair"
set -e
ip link set "$VETH_A" netns "$NS_A"
ip link set "$VETH_B" netns "$NS_B"
ip -n "$NS_A" addr add 198.18.11.1/24 dev "$VETH_A"
ip -n "$NS_B" addr add 198.18.11.2/24 dev "$VETH_B"
for ns in "$NS_A" "$NS_B"; do ip -n "$ns" link set lo up; done
ip -n "$NS_A" link set "$VETH_A" up
ip -n "$NS_B" link set "$VETH_B" up
set +e

unset COLL_HOSTID COLL_TRANSPORT COLL_ALGO
export COLL_DEBUG=INFO COLL_TIMEOUT=60 COLL_SOCKET_IFNAME=cu COLL_NET=ucx COLL_UCX_TLS=tcp
failures=0
run() {  # run NAME NP PLACEMENT [check options...]
  local name=$1 np=$2 placement=$3
  shift 3
  local log
  log=$(mktemp)
  echo "---- $name: $np ranks, COLL_NET=ucx"
  "$COLLRUN" -np "$np" --netns "$placement" --timeout 200 "$CHECK" "$@" >"$log" 2>&1
  local rc=$?
  grep -v " INFO " "$log" | tail -n 30
  if [ $rc -ne 0 ]; then
    echo "FAIL: $name: collrun exited with $rc"
    grep " INFO " "$log" | tail -n 20
    failures=$((failures + 1))
  elif ! grep -Eq "topology: $np ranks on 2 hosts" "$log"; then
    echo "FAIL: $name: the ranks were not on 2 hosts"
    failures=$((failures + 1))
  elif ! grep -Eq "transport between hosts: ucx" "$log"; then
    echo "FAIL: $name: no 'transport between hosts: ucx' line"
    grep -E "transport between hosts" "$log" | head -n 3
    failures=$((failures + 1))
  elif [ "$(grep -c ': OK: ' "$log")" -ne "$np" ]; then
    echo "FAIL: $name: not every rank reported OK"
    failures=$((failures + 1))
  else
    echo "PASS: $name"
  fi
  rm -f "$log"
}

run ucx-2 2 "$NS_A,$NS_B"
run ucx-4 4 "$NS_A,$NS_B" --quick
run ucx-3-uneven 3 "$NS_A,$NS_A,$NS_B" --quick

if [ $failures -ne 0 ]; then
  echo "netns_ucx: $failures run(s) failed"
  exit 1
fi
echo "netns_ucx: all runs passed"
exit 0
