#!/bin/bash
# SoftRoCE (rdma_rxe): an RDMA device over an Ethernet interface, so the ib transport's real-device
# tests and benchmarks run on a machine without an RDMA NIC.
# usage: bench/softroce.sh up [IFACE] | down | status      (env: RXE_NAME, default rxe0)
# up: loads rdma_rxe and adds RXE_NAME on IFACE (default: the default route's interface); down
# removes it; status shows the module, RDMA links and verbs devices. Needs root for up/down.
set -euo pipefail
RXE_NAME=${RXE_NAME:-rxe0}

die() { echo "softroce: $*" >&2; exit 2; }

# Whether this kernel can run SoftRoCE at all; otherwise explain what is missing and stop.
require_rxe() {
  [ -d /sys/module/rdma_rxe ] && return 0
  if command -v modprobe >/dev/null && modprobe rdma_rxe 2>/dev/null; then return 0; fi
  cat >&2 <<EOF
softroce: this kernel ($(uname -r)) has no SoftRoCE support: the rdma_rxe module is not loaded and
cannot be loaded here ($(command -v modprobe >/dev/null && echo "modprobe rdma_rxe failed" || echo "no modprobe")$([ -d "/lib/modules/$(uname -r)" ] || echo "; no /lib/modules/$(uname -r)")).
What to do:
  - on a distribution kernel: install its extra modules (Ubuntu: linux-modules-extra-$(uname -r);
    Debian ships rdma_rxe in linux-image-*), then run this again as root;
  - in a container or VM: load it on the host (modprobe rdma_rxe) and give the container
    access to /dev/infiniband (docker run --device=/dev/infiniband --cap-add=IPC_LOCK ...);
  - a custom kernel needs CONFIG_RDMA_RXE=m (and CONFIG_INFINIBAND, CONFIG_INFINIBAND_USER_ACCESS).
Userspace needs rdma-core and ibverbs-providers (librxe). Without a device, the ib transport's
real-device tests skip and its logic is tested on the verbs test double (tests/ib_double).
EOF
  exit 2
}

default_iface() {
  local dev
  dev=$(ip -o route show default 2>/dev/null | awk '{for (i = 1; i < NF; ++i) if ($i == "dev") { print $(i + 1); exit }}')
  if [ -z "$dev" ]; then
    dev=$(ip -o link show up 2>/dev/null | awk -F': ' '$2 != "lo" { sub(/@.*/, "", $2); print $2; exit }')
  fi
  echo "$dev"
}

cmd=${1:-status}
case "$cmd" in
  up)
    command -v rdma >/dev/null || die "the rdma tool (iproute2) is missing: apt-get install iproute2"
    iface=${2:-$(default_iface)}
    [ -n "$iface" ] || die "no interface given and none is up; usage: $0 up IFACE"
    ip link show "$iface" >/dev/null 2>&1 || die "no interface $iface (see ip link)"
    require_rxe
    if rdma link show "$RXE_NAME/1" >/dev/null 2>&1; then
      echo "softroce: $RXE_NAME already exists"
    else
      rdma link add "$RXE_NAME" type rxe netdev "$iface" ||
        die "rdma link add $RXE_NAME type rxe netdev $iface failed (root? interface up with an IP address?)"
      echo "softroce: $RXE_NAME added on $iface"
    fi
    rdma link show "$RXE_NAME/1" || true
    if command -v ibv_devices >/dev/null; then ibv_devices; fi
    echo "softroce: the ib transport will use it (COLL_NET=ib, or COLL_IB_HCA=$RXE_NAME to pick it)"
    ;;
  down)
    command -v rdma >/dev/null || die "the rdma tool (iproute2) is missing"
    if rdma link show "$RXE_NAME/1" >/dev/null 2>&1; then
      rdma link delete "$RXE_NAME"
      echo "softroce: $RXE_NAME removed"
    else
      echo "softroce: no $RXE_NAME"
    fi
    ;;
  status)
    if [ -d /sys/module/rdma_rxe ]; then echo "rdma_rxe: loaded"; else echo "rdma_rxe: not loaded (kernel $(uname -r))"; fi
    if command -v rdma >/dev/null; then
      links=$(rdma link show 2>/dev/null || true)
      echo "rdma links: ${links:-none}"
    fi
    if command -v ibv_devices >/dev/null; then (ibv_devices 2>&1 || true) | sed "s/^/  /"; fi
    ;;
  *)
    echo "usage: $0 up [IFACE] | down | status" >&2
    exit 1
    ;;
esac
