#!/bin/bash
# "Two hosts" on one machine: ranks in two network namespaces joined by a veth pair, over IPv4
# and IPv6. Checks host detection (2 hosts without COLL_HOSTID) and exact all-reduce results.
# usage: netns_two_hosts.sh COLLRUN MP_ALLREDUCE_CHECK      (root; exit 77 = skipped)
set -u
COLLRUN=${1:?usage: netns_two_hosts.sh COLLRUN MP_ALLREDUCE_CHECK}
CHECK=${2:?usage: netns_two_hosts.sh COLLRUN MP_ALLREDUCE_CHECK}

skip() {
  echo "=================================================================="
  echo "SKIP: netns_two_hosts: $* (needs root and 'ip netns'; not a failure)"
  echo "=================================================================="
  exit 77
}

NS_A=coll_a_$$
NS_B=coll_b_$$
VETH_A=cva$$   # interface names stay under 15 characters
VETH_B=cvb$$
cleanup() {
  ip netns del "$NS_A" 2>/dev/null
  ip netns del "$NS_B" 2>/dev/null  # deleting a namespace also removes its end of the veth
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
ip -n "$NS_A" addr add 198.18.7.1/24 dev "$VETH_A"
ip -n "$NS_B" addr add 198.18.7.2/24 dev "$VETH_B"
ip -n "$NS_A" addr add 2001:2::1/64 dev "$VETH_A" nodad
ip -n "$NS_B" addr add 2001:2::2/64 dev "$VETH_B" nodad
for ns in "$NS_A" "$NS_B"; do ip -n "$ns" link set lo up; done
ip -n "$NS_A" link set "$VETH_A" up
ip -n "$NS_B" link set "$VETH_B" up
set +e

unset COLL_HOSTID COLL_TRANSPORT COLL_ALGO
export COLL_DEBUG=INFO COLL_TIMEOUT=60 COLL_SOCKET_IFNAME=cv
failures=0
run() {  # run NAME NP FAMILY PLACEMENT [collrun options...]
  local name=$1 np=$2 family=$3 placement=$4
  shift 4
  local log
  log=$(mktemp)
  echo "---- $name: $np ranks over $family"
  if [ "$family" = IPv6 ]; then
    COLL_SOCKET_FAMILY=AF_INET6 "$COLLRUN" -np "$np" --netns "$placement" --timeout 120 "$@" "$CHECK" --quick >"$log" 2>&1
  else
    "$COLLRUN" -np "$np" --netns "$placement" --timeout 120 "$@" "$CHECK" --quick >"$log" 2>&1
  fi
  local rc=$?
  grep -v " INFO " "$log" | tail -n 30
  if [ $rc -ne 0 ]; then
    echo "FAIL: $name: collrun exited with $rc"
    grep " INFO " "$log" | tail -n 20
    failures=$((failures + 1))
  elif ! grep -Eq "topology: $np ranks on 2 hosts" "$log"; then
    echo "FAIL: $name: no 'topology: $np ranks on 2 hosts' line at COLL_DEBUG=INFO; host lines seen:"
    grep -E "topology:" "$log" | head -n 5
    failures=$((failures + 1))
  elif [ "$(grep -c ': OK: ' "$log")" -ne "$np" ]; then
    echo "FAIL: $name: not every rank reported OK"
    failures=$((failures + 1))
  else
    echo "PASS: $name"
  fi
  rm -f "$log"
}

run ipv4-2 2 IPv4 "$NS_A,$NS_B"
run ipv4-4 4 IPv4 "$NS_A,$NS_B"
# One namespace per rank, listed explicitly: an uneven split (two ranks in A, one in B).
run ipv4-3-uneven 3 IPv4 "$NS_A,$NS_A,$NS_B"
run ipv6-2 2 IPv6 "$NS_A,$NS_B" --rendezvous 2001:2::1
run ipv6-4 4 IPv6 "$NS_A,$NS_B" --rendezvous 2001:2::1

if [ $failures -ne 0 ]; then
  echo "netns_two_hosts: $failures run(s) failed"
  exit 1
fi
echo "netns_two_hosts: all runs passed"
exit 0
