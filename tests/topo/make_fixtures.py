#!/usr/bin/env python3
"""Writes the hwloc v2 XML node topologies the topology tests load (tests/topo/*.xml).

Each describes a real node design; regenerate with `python3 tests/topo/make_fixtures.py` after a
change here. The format is lstopo's (`lstopo --of xml`): normal objects carry cpusets and nodesets,
I/O objects (bridges, PCI devices, OS devices) hang off the package their host bridge is local to.
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def bitmap(bits):
    """hwloc's bitmap text: 32-bit words, highest first, comma separated."""
    value = 0
    for b in bits:
        value |= 1 << b
    words = []
    while True:
        words.append(value & 0xFFFFFFFF)
        value >>= 32
        if value == 0:
            break
    return ",".join("0x%08x" % w for w in reversed(words))


class Xml:
    def __init__(self):
        self.lines = []
        self.gp = 0
        self.gpu_gps = []     # the GPUs' PCI devices, in order
        self.switch_gps = []  # the NVSwitches' PCI devices

    def gpi(self):
        self.gp += 1
        return self.gp

    def open(self, depth, attrs, close=False):
        text = " ".join('%s="%s"' % kv for kv in attrs)
        self.lines.append("  " * depth + "<object %s%s>" % (text, "/" if close else ""))

    def close(self, depth):
        self.lines.append("  " * depth + "</object>")

    def info(self, depth, name, value):
        self.lines.append("  " * depth + '<info name="%s" value="%s"/>' % (name, value))


def sets(cpus, nodes):
    c, n = bitmap(cpus), bitmap(nodes)
    return [("cpuset", c), ("complete_cpuset", c), ("nodeset", n), ("complete_nodeset", n)]


def pci_type(cls, vendor, device):
    return "%04x [%04x:%04x] [%04x:%04x] 00" % (cls, vendor, device, vendor, device)


def write(name, sockets, cores_per_socket, io, switch_links=None):
    """io[socket] is a list of host bridges; a host bridge is a list of trees, a tree is
    ('bridge', busid, [children]) or ('gpu', busid) or ('nic', busid, rdma, netdev, active)."""
    x = Xml()
    all_cpus = list(range(sockets * cores_per_socket))
    x.lines.append('<?xml version="1.0" encoding="UTF-8"?>')
    x.lines.append('<!DOCTYPE topology SYSTEM "hwloc2.dtd">')
    x.lines.append('<topology version="2.0">')
    root = [("type", "Machine"), ("os_index", "0")] + sets(all_cpus, range(sockets))
    root += [("allowed_cpuset", bitmap(all_cpus)), ("allowed_nodeset", bitmap(range(sockets))), ("gp_index", x.gpi())]
    x.open(1, root)
    x.info(2, "Backend", "Linux")
    x.info(2, "HostName", name)
    gpu_count = [0]
    for s in range(sockets):
        cpus = list(range(s * cores_per_socket, (s + 1) * cores_per_socket))
        x.open(2, [("type", "Package"), ("os_index", s)] + sets(cpus, [s]) + [("gp_index", x.gpi())])
        x.open(3, [("type", "NUMANode"), ("os_index", s)] + sets(cpus, [s]) +
               [("gp_index", x.gpi()), ("local_memory", 1 << 40)], close=True)
        for c in cpus:
            x.open(3, [("type", "Core"), ("os_index", c)] + sets([c], [s]) + [("gp_index", x.gpi())])
            x.open(4, [("type", "PU"), ("os_index", c)] + sets([c], [s]) + [("gp_index", x.gpi())], close=True)
            x.close(3)
        for hb, trees in enumerate(io[s]):
            buses = [t[1] for t in walk(trees)]
            lo = min(int(b.split(":")[1], 16) for b in buses) if buses else 0
            hi = max(int(b.split(":")[1], 16) for b in buses) if buses else 0
            x.open(3, [("type", "Bridge"), ("gp_index", x.gpi()), ("bridge_type", "0-1"), ("depth", 0),
                       ("bridge_pci", "0000:[%02x-%02x]" % (lo, hi))])
            for t in trees:
                emit(x, 4, t, 1, gpu_count)
            x.close(3)
        x.close(2)
    x.close(1)
    if switch_links:
        # hwloc's NVML backend's matrix (MB/s; 25 GB/s per NVLink): every GPU to every NVSwitch.
        objs = x.gpu_gps + x.switch_gps
        n = len(objs)
        values = [0] * (n * n)
        for g in range(len(x.gpu_gps)):
            for s, links in enumerate(switch_links):
                j = len(x.gpu_gps) + s
                values[g * n + j] = values[j * n + g] = links * 25000
        x.lines.append('  <distances2 type="PCIDev" nbobjs="%d" kind="9" name="NVLinkBandwidth" indexing="gp">' % n)
        x.lines.append('    <indexes length="%d">%s </indexes>' % (len(" ".join(map(str, objs))) + 1, " ".join(map(str, objs))))
        text = " ".join(map(str, values))
        x.lines.append('    <u64values length="%d">%s </u64values>' % (len(text) + 1, text))
        x.lines.append("  </distances2>")
    x.lines.append('  <support name="discovery.pu"/>')
    x.lines.append("</topology>")
    with open(os.path.join(HERE, name + ".xml"), "w") as f:
        f.write("\n".join(x.lines) + "\n")


def walk(trees):
    for t in trees:
        yield t
        if t[0] == "bridge":
            yield from walk(t[2])


def emit(x, depth, t, bridge_depth, gpu_count):
    kind, busid = t[0], t[1]
    if kind == "bridge":
        buses = [int(c[1].split(":")[1], 16) for c in walk(t[2])]
        x.open(depth, [("type", "Bridge"), ("gp_index", x.gpi()), ("bridge_type", "1-1"), ("depth", bridge_depth),
                       ("bridge_pci", "0000:[%02x-%02x]" % (min(buses), max(buses))), ("pci_busid", busid),
                       ("pci_type", pci_type(0x0604, 0x1000, 0xc030)), ("pci_link_speed", "31.507692")])
        for c in t[2]:
            emit(x, depth + 1, c, bridge_depth + 1, gpu_count)
        x.close(depth)
    elif kind == "nvswitch":
        gp = x.gpi()
        x.switch_gps.append(gp)
        x.open(depth, [("type", "PCIDev"), ("gp_index", gp), ("pci_busid", busid),
                       ("pci_type", pci_type(0x0680, 0x10DE, 0x22A3)), ("pci_link_speed", "0.250000")], close=True)
    elif kind == "gpu":
        gp = x.gpi()
        x.gpu_gps.append(gp)
        x.open(depth, [("type", "PCIDev"), ("gp_index", gp), ("pci_busid", busid),
                       ("pci_type", pci_type(0x0302, 0x10DE, 0x2330)), ("pci_link_speed", "63.015385")])
        # As hwloc's CUDA plugin names them.
        x.open(depth + 1, [("type", "OSDev"), ("gp_index", x.gpi()), ("name", "cuda%d" % gpu_count[0]),
                           ("subtype", "CUDA"), ("osdev_type", 5)], close=True)
        gpu_count[0] += 1
        x.close(depth)
    elif kind == "nic":
        rdma, netdev, active = t[2], t[3], t[4]
        x.open(depth, [("type", "PCIDev"), ("gp_index", x.gpi()), ("pci_busid", busid),
                       ("pci_type", pci_type(0x0207 if "ib" in netdev else 0x0200, 0x15B3, 0x1021)),
                       ("pci_link_speed", "63.015385")])
        x.open(depth + 1, [("type", "OSDev"), ("gp_index", x.gpi()), ("name", netdev), ("osdev_type", 2)])
        x.info(depth + 2, "Address", "00:00:00:00:00:00")
        x.close(depth + 1)
        x.open(depth + 1, [("type", "OSDev"), ("gp_index", x.gpi()), ("name", rdma), ("osdev_type", 3)])
        x.info(depth + 2, "NodeGUID", "b83f:d203:00a1:0000")
        x.info(depth + 2, "Port1State", "4" if active else "1")
        x.info(depth + 2, "Port1LID", "0x1")
        x.close(depth + 1)
        x.close(depth)


def switch(port_bus, up_bus, children):
    """A PCIe switch behind a root port: root port -> upstream port -> one downstream port per
    child."""
    downs = [("bridge", "0000:%02x:%02x.0" % (up_bus + 1, i), [c]) for i, c in enumerate(children)]
    return ("bridge", "0000:%02x:01.0" % port_bus, [("bridge", "0000:%02x:00.0" % up_bus, downs)])


# DGX H100-like: two sockets, four PCIe switches per socket, each with one GPU and one 400G NIC
# (mlx5_N, ibpN); all eight GPUs on NVSwitch (NVLink comes from NVML, not from hwloc's XML).
dgx_gpus = [0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB]
dgx = [[], []]
for i, bus in enumerate(dgx_gpus):
    root_bus = bus - 4
    dgx[i // 4].append([switch(root_bus, root_bus + 1, [
        ("gpu", "0000:%02x:00.0" % bus),
        ("nic", "0000:%02x:00.0" % (bus + 1), "mlx5_%d" % i, "ibp%ds0" % bus, True)])])
# The four NVSwitches are PCI devices too (class 0680), behind their own host bridge on socket 0.
dgx[0].append([("bridge", "0000:00:08.0", [("nvswitch", "0000:%02x:00.0" % (0x05 + i)) for i in range(4)])])
write("dgx_h100", 2, 56, dgx, switch_links=[5, 4, 4, 5])

# A 4-GPU PCIe workstation/server: one socket, two PCIe switches, each with two GPUs and one NIC.
pcie = [[[switch(0x00, 0x01, [("gpu", "0000:03:00.0"), ("gpu", "0000:03:01.0"),
                              ("nic", "0000:04:00.0", "mlx5_0", "ens1f0np0", True)]),
          switch(0x10, 0x11, [("gpu", "0000:13:00.0"), ("gpu", "0000:13:01.0"),
                              ("nic", "0000:14:00.0", "mlx5_1", "ens2f0np0", True)])]]]
# Bus numbers: the generator's downstream ports sit on up_bus+1; devices keep the given ids.
write("pcie_4gpu_2nic", 1, 32, pcie)

# A CPU-only node: two sockets, one RoCE NIC on each socket's host bridge.
cpu = [[[("bridge", "0000:00:02.0", [("nic", "0000:17:00.0", "mlx5_0", "ens3f0np0", True)])]],
       [[("bridge", "0000:80:02.0", [("nic", "0000:98:00.0", "mlx5_1", "ens5f0np0", True)])]]]
write("cpu_2socket_2nic", 2, 32, cpu)
