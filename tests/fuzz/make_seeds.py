#!/usr/bin/env python3
# Writes the seed corpora (corpus/<target>/): small valid and near-valid inputs for each fuzz
# target. Rerun after changing a wire format; libFuzzer finds the rest from these.
import os, struct

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")

def write(target, name, data):
    d = os.path.join(root, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)

def addr4(port, ip=(127, 0, 0, 1)):
    return bytes([4, 0]) + struct.pack("<H", port) + b"\0" * 4 + bytes(ip) + b"\0" * 12

def addr6(port, scope=0):
    return bytes([6, 0]) + struct.pack("<HI", port, scope) + b"\0" * 15 + b"\1"

# rank-table entry: address, hostHash, pid, netMask, machineHash, cpus, ringKey
def entry(a, host=0x1234, pid=42, mask=3, machine=0x5678, cpus=2, ring=-1):
    return a + struct.pack("<QIIQIi", host, pid, mask, machine, cpus, ring)

# bootstrap: [selector][nranks int32][nonce u64][payload]
def boot(sel, n, nonce, payload):
    return bytes([sel]) + struct.pack("<iQ", n, nonce) + payload
HELLO = 0x4C484C43
GROUPS_1 = struct.pack("<iiI", 1, 0, 0)  # registration v4's tail: groups, group, forwarded block count
for name, sel, n, p in [
    ("hello_message", 0, 4, struct.pack("<IIiII", HELLO, 1, 1, 5, 100)),
    ("hello_data", 0, 4, struct.pack("<IIiII", HELLO, 2, 3, 0x54430000, 0)),
    ("hello_table_root", 0, 4, struct.pack("<IIiII", HELLO, 3, -1, 0, 4 * 56)),
    ("hello_too_big", 0, 4, struct.pack("<IIiII", HELLO, 1, 1, 5, (16 << 20) + 1)),
    ("hello_bad_type", 0, 4, struct.pack("<IIiII", HELLO, 9, 1, 5, 0)),
    ("hello_truncated", 0, 4, struct.pack("<III", HELLO, 1, 1)),
    ("reg_ok", 1, -1, struct.pack("<IIiiQ", 0x47524C43, 4, 1, 4, 77) + entry(addr4(5000)) + GROUPS_1),
    ("reg_group", 1, 8, struct.pack("<IIiiQ", 0x47524C43, 4, 5, 8, 77) + entry(addr4(5000)) + struct.pack("<iiI", 2, 1, 0)),
    ("reg_forward", 1, 8, struct.pack("<IIiiQ", 0x47524C43, 4, 4, 8, 77) + entry(addr4(5000)) + struct.pack("<iiI", 2, 1, 4)),
    ("reg_wrong_group", 1, 8, struct.pack("<IIiiQ", 0x47524C43, 4, 5, 8, 77) + entry(addr4(5000)) + struct.pack("<iiI", 2, 0, 0)),
    ("reg_v6", 1, 4, struct.pack("<IIiiQ", 0x47524C43, 4, 3, 4, 77) + entry(addr6(6000, 2)) + GROUPS_1),
    ("reg_bad_rank", 1, 4, struct.pack("<IIiiQ", 0x47524C43, 4, 9, 4, 77) + entry(addr4(5000)) + GROUPS_1),
    ("reg_bad_family", 1, 4, struct.pack("<IIiiQ", 0x47524C43, 4, 1, 4, 77) + entry(b"\5" + addr4(1)[1:]) + GROUPS_1),
    ("table_2", 2, 0, entry(addr4(5000)) + entry(addr6(5001))),
    ("failed", 3, 4, struct.pack("<iI", 2, 17) + b"connection closed"),
    ("failed_long", 3, 4, struct.pack("<iI", 2, 5000) + b"x" * 40),
    ("waitfor", 4, 4, struct.pack("<IQiiIi", 1, 12, 3, 7, 250, -1) + b"\0" * 4),
    ("waitfor_bad_peer", 4, 4, struct.pack("<IQiiIi", 1, 12, 9, 7, 250, 5) + b"\0" * 4),
    ("table_port0", 2, 1, entry(addr4(0))),
    ("table_cpus_bound", 2, 1, entry(addr4(5000), cpus=(1 << 20) + 1)),
    ("table_ring_keys", 2, 0, entry(addr4(5000), ring=2) + entry(addr4(5001), ring=(1 << 16) + 1)),
]:
    write("bootstrap", name, boot(sel, n, 77, p))

# unique id: magic, version u16, flags, pad, address (24), secret (16), nonce (8), zeros to 128
def uid(flags, a, secret=bytes(range(16)), nonce=99):
    b = struct.pack("<IHBB", 0x44494C43, 2, flags, 0) + a + secret + struct.pack("<Q", nonce)
    return b + b"\0" * (128 - len(b))
write("unique_id", "v4_auth", uid(1, addr4(29500)))
write("unique_id", "v6_noauth", uid(0, addr6(29500, 1)))
write("unique_id", "bad_flags", uid(2, addr4(29500)))
write("unique_id", "port0", uid(1, addr4(0)))
write("unique_id", "short", uid(1, addr4(1))[:20])

# tcp hello: magic, version, streams, stripe log2
write("tcp_hello", "ok", struct.pack("<IIII", 0x636F5443, 1, 2, 19))
write("tcp_hello", "max", struct.pack("<IIII", 0x636F5443, 1, 64, 26))
write("tcp_hello", "too_many_streams", struct.pack("<IIII", 0x636F5443, 1, 65, 19))
write("tcp_hello", "short", struct.pack("<III", 0x636F5443, 1, 2))
# The same target parses the multi-rail messages: rails (magic, count, token, 8 addresses, 8 speeds) and the
# per-socket preamble (magic, index, streams, stripe log2, token).
def tcprails(n=2, port=5000, mbps=(25000, 10000)):
    b = struct.pack("<II", 0x6C695254, n) + bytes(range(16))
    for r in range(8):
        b += (addr4(port + r, (127, 0, 0, 1 + r)) if r < n else bytes(24))
    return b + b"".join(struct.pack("<I", mbps[r] if r < len(mbps) else 0) for r in range(8))
write("tcp_hello", "rails2", tcprails())
write("tcp_hello", "rails_noport", tcprails(port=0))
write("tcp_hello", "preamble", struct.pack("<IIII", 0x6D615254, 1, 4, 19) + bytes(range(16)))
write("tcp_hello", "preamble_bad_index", struct.pack("<IIII", 0x6D615254, 12, 4, 19) + bytes(range(16)))
# control records of a multi-rail connection: magic, type | flags << 8, rail, count, count x u64
def tcpctl(kind, rail, values, flags=0):
    return struct.pack("<IIII", 0x6C745443, kind | flags << 8, rail, len(values)) + b"".join(struct.pack("<Q", v) for v in values)
write("tcp_hello", "control_ack", tcpctl(1, 0, [1 << 20]))
write("tcp_hello", "control_lost", tcpctl(2, 1, [4096, 12288], flags=1))
write("tcp_hello", "control_switch", tcpctl(3, 1, [8192]))
write("tcp_hello", "control_bye", tcpctl(4, 0, []))
write("tcp_hello", "control_truncated", tcpctl(2, 1, [1, 2, 3])[:30])

# nccl_net, even first byte: message stream [groups-1][piece-1][n-1, (tag, size/17)*n ...] frames
def frame(tag, payload):
    return struct.pack("<IiQ", 0x4E434D31, tag, len(payload)) + payload
write("nccl_net", "stream_one", b"\0" + bytes([0, 63, 0, 1, 2]) + frame(1, b"x" * 20))
write("nccl_net", "stream_group", b"\0" + bytes([1, 3, 1, 0, 1, 1, 1, 2, 0, 3]) + frame(1, b"a" * 17) + frame(0, b"b" * 10) + frame(2, b""))
write("nccl_net", "stream_too_big", b"\0" + bytes([0, 7, 0, 1, 1]) + frame(1, b"y" * 40))
write("nccl_net", "stream_bad_magic", b"\0" + bytes([0, 7, 0, 1, 1]) + b"\xff" * 16)
# odd first byte: pair bootstrap control frames [wanted tag][tag u32, size u32, payload]...
def ctl(tag, payload):
    return struct.pack("<II", tag, len(payload)) + payload
write("nccl_net", "control_two", b"\1" + bytes([1]) + ctl(2, b"hello") + ctl(1, b"x" * 30))
write("nccl_net", "control_huge", b"\1" + bytes([0]) + struct.pack("<II", 0, 1 << 30))
write("nccl_net", "control_truncated", b"\1" + bytes([0]) + ctl(0, b"abc")[:9])

# config: [selector][text]
for i, (sel, text) in enumerate([
    (0, b"allreduce:ring,tree;allgather:^bruck"), (0, b"^tree"), (0, b"ring"), (0, b"allreduce:nosuch"),
    (1, b"eth,ib\neth0"), (1, b"^docker,lo\nlo"), (1, b"=eth0\neth0"), (2, b"AF_INET6"), (2, b"4"),
    (3, b"4K"), (3, b"2M"), (3, b"18446744073709551615G"), (4, b"node[01-04,07],gpu5"), (4, b"a[1-3]b[7-9]"),
    (5, b"00112233445566778899aabbccddeeff"), (5, b"some passphrase"), (6, b"\x10\x00" + b"4x4"),
    (6, b"\x1c\x00" + b"2x7x2"), (7, b"mlx5_0:1,mlx5_1"), (7, b"^=rxe0"), (8, b"127.0.0.1:5000"),
    (8, b"[::1]:80"), (9, b"node[1-3]"),
]):
    write("config", "seed%02d" % i, bytes([sel]) + text)

# ib_connect: [local is RoCE][header: 6 u32 (magic, version, qps, ringLog2, recvDepth, rails) and
# 2 u64 addresses][per rail: mtu, ethernet, lid, rate, 16-byte GID, 2 rkeys, 16 qpn + 16 psn]
def ibinfo(qps=1, ring=20, depth=64, mtu=3, eth=1, lid=0, qpn=0x11, rails=1):
    b = struct.pack("<6IQQ", 0x6F434249, 2, qps, ring, depth, rails, 0x10000, 0x20000)
    for _ in range(rails):
        b += struct.pack("<4I", mtu, eth, lid, 100000) + bytes(range(16)) + struct.pack("<II", 7, 8)
        b += struct.pack("<16I", *([qpn] * qps + [0] * (16 - qps))) + struct.pack("<16I", *([5] * 16))
    return b
write("ib_connect", "roce", b"\1" + ibinfo())
write("ib_connect", "ib", b"\0" + ibinfo(eth=0, lid=4, qps=4))
write("ib_connect", "bad_qpn", b"\1" + ibinfo(qpn=0x1000000))
write("ib_connect", "short", b"\1" + ibinfo()[:100])
write("ib_connect", "rails4", b"\1" + ibinfo(qps=2, rails=4))
# A lost-rail notice: magic, rail, switch position, 16 lane positions (u64).
write("ib_connect", "rail_notice", b"\5" + struct.pack("<IIQ", 0x4C494152, 1, 1 << 20) + struct.pack("<16Q", *range(16)))

# collCommShrink (fuzz_shrink): selector byte (0 request, 1 answer), nranks - 1 (16-bit), message.
# A request: header, the list, what the sender's subtree found (code, problems, text), then the
# rendezvous roots started there (count, then block and 128-byte id each).
def shrink_req(seq, n, count, digest, listed, code=0, problems=0, text=b"", roots=()):
    return struct.pack("<IIIIQI", 0x51524853, seq, n, count, digest, len(listed)) + b"".join(
        struct.pack("<i", x) for x in listed) + struct.pack("<III", code, problems, len(text)) + text + \
        struct.pack("<I", len(roots)) + b"".join(struct.pack("<I", g) + bytes(range(128)) for g in roots)
# An answer: magic, seq, code, new size, root count, text length, the roots' ids, the text.
def shrink_ans(seq, code, newn, text=b"", roots=1):
    return struct.pack("<IIIIII", 0x50524853, seq, code, newn, roots, len(text)) + bytes(range(128)) * roots + text
def shrink_seed(which, n, msg):
    return bytes([which]) + struct.pack("<H", n - 1) + msg
write("shrink", "req_two", shrink_seed(0, 8, shrink_req(0, 8, 2, 0x1234, [1, 5])))
write("shrink", "req_digest_only", shrink_seed(0, 8, shrink_req(3, 8, 2, 0x1234, [])))
write("shrink", "req_unsorted", shrink_seed(0, 8, shrink_req(0, 8, 2, 0x1234, [5, 1])))
write("shrink", "req_subtree_problem",
      shrink_seed(0, 8, shrink_req(0, 8, 1, 0x1234, [3], 5, 2, b"rank 5 passed different excludeRanks")))
write("shrink", "ans_ok", shrink_seed(1, 8, shrink_ans(0, 0, 6)))
write("shrink", "ans_two_roots", shrink_seed(1, 600, shrink_ans(0, 0, 300, roots=2)))
write("shrink", "req_roots", shrink_seed(0, 600, shrink_req(0, 600, 1, 0x1234, [3], roots=(0, 2))))
write("shrink", "ans_error", shrink_seed(1, 8, shrink_ans(1, 5, 0, b"rank 1 passed different excludeRanks", roots=0)))
write("shrink", "ans_truncated", shrink_seed(1, 8, shrink_ans(0, 0, 6)[:40]))
# collCommGrow's announcement (selector 2): magic, code, nranks, the 128-byte id, text length, 256 text bytes.
def grow_ann(code, n, text=b""):
    return struct.pack("<III", 0x57524743, code, n) + bytes(range(128)) + struct.pack("<I", len(text)) + \
        text + b"\0" * (256 - len(text))
write("shrink", "grow_ok", shrink_seed(2, 8, grow_ann(0, 6)))
write("shrink", "grow_refused", shrink_seed(2, 8, grow_ann(4, 6, b"rank 0's growId was not made here")))
write("shrink", "grow_long_text", shrink_seed(2, 8, grow_ann(4, 6, b"x" * 256)[:-1] + b"!"))

# ucx, even first byte (peer rank = byte >> 1): Hello {magic, version, rank, addressLength, ring,
# message} + worker address; odd: [1][DataHeader][length][ring log2][consumed][in flight][recvSeq]
def ucx_hello(rank, addr_len, ring=1 << 20, msg=1 << 16, extra=0):
    return bytes([rank << 1]) + struct.pack("<IIiIQQ", 0x636F5543, 1, rank, addr_len, ring, msg) + b"a" * (addr_len + extra)
write("ucx", "hello_ok", ucx_hello(3, 40))
write("ucx", "hello_len_mismatch", ucx_hello(3, 40, extra=1))
write("ucx", "hello_bad_ring", ucx_hello(3, 40, ring=100))
def ucx_data(seq, pos, ln, delivered, ring_log2, consumed, inflight, recvseq):
    return b"\1" + struct.pack("<IiQQQ", 0x55434461, 1, seq, pos, ln) + struct.pack("<Q", delivered) + \
        bytes([ring_log2]) + struct.pack("<QQQ", consumed, inflight, recvseq)
write("ucx", "data_ok", ucx_data(5, 8192, 1024, 1024, 8, 4096, 4096, 5))
write("ucx", "data_wraps", ucx_data(5, (1 << 20) - 10, 1024, 1024, 8, 1 << 20, 0, 5))
write("ucx", "data_overrun", ucx_data(6, 4096 + (1 << 20), 64, 64, 8, 4096, 0, 5))
write("ucx", "data_odd_ring", ucx_data(0, 0, 64, 64, 0x85, 0, 0, 0))

# fault tolerance (fuzz_failure): selector byte (0 FAILED notice, 1 wait-for answer, 2 a notice
# down a notice tree, 4 a heartbeat), nranks - 1 (16-bit), message. FAILED: rank int32, reason length u32, reason;
# answer: 32 bytes; relay: origin int32, inner tag u32, inner length u32, inner payload.
def fail_seed(which, n, msg):
    return bytes([which]) + struct.pack("<H", n - 1) + msg
REASON = b"connection closed"
write("failure", "failed_ok", fail_seed(0, 8, struct.pack("<iI", 3, len(REASON)) + REASON))
write("failure", "failed_bad_rank", fail_seed(0, 2, struct.pack("<iI", 5, len(REASON)) + REASON))
write("failure", "failed_truncated", fail_seed(0, 8, struct.pack("<iI", 3, 40) + REASON))
WAITFOR = struct.pack("<IQiiIiI", 1, 7, 2, 5, 10, -1, 0)
write("failure", "waitfor_ok", fail_seed(1, 4, WAITFOR))
write("failure", "waitfor_bad_peer", fail_seed(1, 2, WAITFOR))
write("failure", "waitfor_short", fail_seed(1, 4, WAITFOR[:20]))
FAILED_MSG = struct.pack("<iI", 3, len(REASON)) + REASON
write("failure", "relay_failed", fail_seed(2, 8, struct.pack("<iII", 5, 0x464c0001, len(FAILED_MSG)) + FAILED_MSG))
write("failure", "relay_revoked", fail_seed(2, 8, struct.pack("<iII", 1, 0x464c0002, 0)))
write("failure", "relay_cycle", fail_seed(2, 8, struct.pack("<iII", 1, 0x464c0004, 6) + b"0 -> 1"))
write("failure", "heartbeat_beat", fail_seed(4, 8, struct.pack("<I", 1)))
write("failure", "heartbeat_bad", fail_seed(4, 8, struct.pack("<I", 7)))
write("failure", "relay_bad_origin", fail_seed(2, 4, struct.pack("<iII", 9, 0x464c0002, 0)))
