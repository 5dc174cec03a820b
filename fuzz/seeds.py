#!/usr/bin/env python3
"""Writes the committed seeds of the byte-input fuzz targets (fuzz/corpus/<target>/) from the
frames and messages the crates' own tests use (graph-nodes/tests, dataplane's offload tests,
nsm-forwarder's Request tests, quiver.example.toml). Run from anywhere: python3 fuzz/seeds.py.
The structured targets (wireguard, memif_control, memif_descriptors: `arbitrary` inputs) keep
seeds minimised from a fuzzing run instead (see README.md)."""
import os, struct

HERE = os.path.dirname(os.path.abspath(__file__))
MAC = [bytes([2, 0, 0, 0, 0, i + 1]) for i in range(7)]
HOST_A = bytes([2, 0xaa, 0, 0, 0, 0x0a])
HOST_B = bytes([2, 0xbb, 0, 0, 0, 0x0b])
BCAST = b"\xff" * 6


def ip(a, b, c, d):
    return bytes([a, b, c, d])


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def ipv4(src, dst, proto, payload, ttl=64, flags=0):
    h = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 0x1234, flags, ttl, proto, 0, src, dst))
    h[10:12] = struct.pack("!H", csum(bytes(h)))
    return bytes(h) + payload


def udp(sp, dp, payload):
    return struct.pack("!HHHH", sp, dp, 8 + len(payload), 0) + payload


def tcp(sp, dp, seq, flags, payload, check=0):
    return struct.pack("!HHIIBBHHH", sp, dp, seq, 0, 0x50, flags, 0xFFFF, check, 0) + payload


def icmp_echo(kind, ident, seq, data):
    m = bytearray(struct.pack("!BBHHH", kind, 0, 0, ident, seq) + data)
    m[2:4] = struct.pack("!H", csum(bytes(m)))
    return bytes(m)


def eth(dst, src, et, payload):
    return dst + src + struct.pack("!H", et) + payload


def vlan(dst, src, tag, et, payload):
    return dst + src + struct.pack("!HHH", 0x8100, tag, et) + payload


def arp(op, sha, spa, tha, tpa):
    return struct.pack("!HHBBH", 1, 0x0800, 6, 4, op) + sha + spa + tha + tpa


def records(frames):
    return b"".join(bytes([p]) + struct.pack("!H", len(f)) + f for p, f in frames)


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


A = ip(10, 0, 1, 2)
inner = eth(HOST_A, bytes([2, 0xCC, 0, 0, 0, 1]), 0x0800, ipv4(ip(172, 16, 0, 1), ip(172, 16, 0, 2), 17, udp(3000, 53, bytes([1] * 40))))
ip6 = bytes([0x60, 0, 0, 0, 0, 16, 17, 64]) + bytes([0xFD, 0, 0, 0x77] + [0] * 11 + [1]) + bytes([0xFD, 0, 0, 0x77] + [0] * 11 + [2]) + udp(5000, 5001, bytes([6] * 8))

# (a) packet path: one or a few frames per seed, as graph-nodes' tests send them.
pp = {
    "ping_local": [(0, eth(MAC[0], HOST_A, 0x0800, ipv4(A, ip(10, 0, 1, 1), 1, icmp_echo(8, 7, 1, b"abcdefgh"))))],
    "routed": [(0, eth(MAC[0], HOST_A, 0x0800, ipv4(A, ip(10, 2, 0, 5), 17, udp(1000, 2000, bytes(8)))))],
    "ecmp": [(0, eth(MAC[0], HOST_A, 0x0800, ipv4(A, ip(10, 3, i, 9), 17, udp(1000 + i, 2000, bytes(8))))) for i in range(4)],
    "unresolved_arp": [(0, eth(MAC[0], HOST_A, 0x0800, ipv4(A, ip(10, 4, 0, 1), 6, tcp(1, 2, 3, 0x02, b""))))],
    "long_prefix_and_drop": [
        (1, eth(MAC[1], HOST_B, 0x0800, ipv4(ip(192, 168, 1, 2), ip(10, 5, 5, 17), 17, udp(1, 2, b"x")))),
        (1, eth(MAC[1], HOST_B, 0x0800, ipv4(ip(192, 168, 1, 2), ip(10, 66, 1, 1), 17, udp(1, 2, b"x")))),
    ],
    "ttl_expired": [(0, eth(MAC[0], HOST_A, 0x0800, ipv4(A, ip(10, 2, 0, 5), 17, udp(1, 2, bytes(8)), ttl=1)))],
    "too_big_df": [(0, eth(MAC[0], HOST_A, 0x0800, ipv4(A, ip(10, 2, 0, 5), 17, udp(1, 2, bytes(1600)), flags=0x4000)))],
    "arp_request": [(0, eth(BCAST, HOST_A, 0x0806, arp(1, HOST_A, A, bytes(6), ip(10, 0, 1, 1))))],
    "arp_reply_learn": [(5, eth(MAC[5], HOST_A, 0x0806, arp(2, HOST_A, ip(172, 16, 5, 2), MAC[5], ip(172, 16, 5, 1))))],
    "vlan100_ping": [(0, vlan(MAC[0], HOST_A, 100, 0x0800, ipv4(ip(10, 100, 0, 2), ip(10, 100, 0, 1), 1, icmp_echo(8, 1, 1, b"v"))))],
    "l2xc": [(3, eth(HOST_B, HOST_A, 0x88B5, bytes([7] * 100))), (4, eth(HOST_A, HOST_B, 0x0800, ipv4(A, ip(1, 2, 3, 4), 17, udp(1, 2, b""))))],
    "l3xc": [(5, eth(MAC[5], HOST_A, 0x0800, ipv4(ip(172, 16, 5, 2), ip(8, 8, 8, 8), 17, udp(1, 2, bytes(20))))),
             (6, eth(MAC[6], HOST_B, 0x86DD, ip6))],
    "vxlan_encap": [(2, inner), (2, eth(BCAST, bytes([2, 0xCC, 0, 0, 0, 1]), 0x0806, arp(1, bytes([2, 0xCC, 0, 0, 0, 1]), ip(172, 16, 0, 1), bytes(6), ip(172, 16, 0, 2))))],
}
for k, v in pp.items():
    write("packet_path", k, records(v))


# (b) vxlan4-input: [source selector, port selector] + VXLAN header + inner frame.
def vx(flags, vni, inner):
    return bytes([flags, 0, 0, 0]) + struct.pack("!I", vni << 8) + inner


for k, (sel, data) in {
    "ipv4_inner": (0, vx(0x08, 0x123456, inner)),
    "ipv6_inner": (0, vx(0x08, 0x123456, eth(HOST_A, bytes([2, 0xCC, 0, 0, 0, 1]), 0x86DD, ip6))),
    "bad_flags": (0, vx(0x00, 0x123456, inner)),
    "no_tunnel_vni": (0, vx(0x08, 0x123457, inner)),
    "no_tunnel_src": (2, vx(0x08, 0x123456, inner)),
    "short": (0, bytes([8, 0, 0, 0])),
}.items():
    write("vxlan_input", k, bytes([sel, 0]) + data)


# (e) NSM Requests, protobuf by hand.
def key(field, wt):
    return varint(field << 3 | wt)


def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def ld(field, payload):
    if isinstance(payload, str):
        payload = payload.encode()
    return key(field, 2) + varint(len(payload)) + payload


def vi(field, n):
    return key(field, 0) + varint(n)


def mapentry(field, k, v):
    return ld(field, ld(1, k) + ld(2, v))


def mechanism(cls, typ, params):
    return ld(1, cls) + ld(2, typ) + b"".join(mapentry(3, k, v) for k, v in params.items())


def segment(name, ident, token="tok", secs=None):
    s = ld(1, name) + ld(2, ident) + ld(3, token)
    if secs:
        s += ld(4, vi(1, secs))
    return s


def path(index, segs):
    return vi(1, index) + b"".join(ld(2, s) for s in segs)


def connection(ident, payload="", mech=None, ctx=None, segs=None, index=0, state=0, ns="ns"):
    c = ld(1, ident) + ld(2, ns)
    if mech:
        c += ld(3, mech)
    if ctx:
        c += ld(4, ctx)
    c += ld(6, path(index, segs or [segment("nsc", ident, secs=4102444800)]))
    if payload:
        c += ld(8, payload)
    if state:
        c += vi(9, state)
    return c


def request(conn, prefs):
    return ld(1, conn) + b"".join(ld(2, p) for p in prefs)


ipctx = (ld(1, "172.16.0.2/31") + ld(2, "172.16.0.3/31") + ld(5, ld(1, "10.0.0.0/8") + ld(2, "172.16.0.3"))
         + ld(8, ld(1, "172.16.0.3") + ld(2, "02:00:00:00:00:01"))
         + ld(11, ld(1, "172.16.0.0/24") + ld(2, "tcp") + ld(3, "80-90") + ld(5, ld(1, "10.9.0.0/16") + ld(2, "172.16.0.3"))))
ctx = ld(1, ipctx) + vi(5, 1500)
memif = mechanism("LOCAL", "MEMIF", {"inodeURL": "file:///proc/self/ns/net", "MTU": "1500"})
kernel = mechanism("LOCAL", "KERNEL", {"inodeURL": "file:///proc/self/ns/net", "name": "nsm-1"})
vxlan = mechanism("REMOTE", "VXLAN", {"src_ip": "192.0.2.9", "src_port": "4789", "vni": "42"})
uuid = "0f8e4c2a-1b3d-4e5f-8a9b-0c1d2e3f4a5b"
for k, v in {
    "memif_ethernet": request(connection(uuid), [memif]),
    "kernel_ip_context": request(connection(uuid, "IP", ctx=ctx), [kernel, memif]),
    "vxlan_remote": request(connection(uuid), [vxlan]),
    "refresh_with_own_segment": request(connection(uuid, mech=memif, segs=[segment("nsmgr", "x"), segment("nsc", uuid), segment("forwarder", "own-id")], index=1), [memif]),
    "reselect": request(connection(uuid, state=3), [kernel]),
    "bad_mechanism": request(connection(uuid), [mechanism("LOCAL", "SRIOV", {})]),
}.items():
    write("nsm_request", k, v)

# (f) quiver.toml: the example file and the configs of src/config's tests.
with open(os.path.join(HERE, "..", "quiver.example.toml"), "rb") as f:
    write("quiver_toml", "example", f.read())
write("quiver_toml", "sections", b'[dataplane]\ncores = [1]\nidle = "adaptive"\n[buffers]\ncount = 4096\ndata_size = 9216\nheadroom = 256\nhugepages = "never"\n[stats]\ninterval_secs = 2\n[demo]\nrate_pps = 1000\nframe_size = 1500\n')
write("quiver_toml", "ports", b'[[port]]\nname = "a"\ntype = "memif"\nrole = "master"\nsocket = "@quiver"\nid = 2\nmode = "ip"\nring_size = 2048\n[[port]]\nname = "b"\ntype = "af_packet"\ninterface = "veth0"\nmtu = 9000\n[[port]]\nname = "c"\ntype = "tap"\nmac = "02:00:00:00:00:01"\n[[xconnect]]\na = "a"\nb = "b"\n[[address]]\nport = "c"\nip = "10.0.0.1/24"\n[[route]]\nprefix = "10.1.0.0/16"\nvia = ["10.0.0.2"]\n[[neighbor]]\nport = "c"\nip = "10.0.0.2"\nmac = "02:00:00:00:00:02"\n')


# (g) virtio-net headers before TCP/UDP frames, as dataplane's offload tests make them.
def vnet(flags, gso, hdr_len, gso_size, start, off):
    return struct.pack("<BBHHHH", flags, gso, hdr_len, gso_size, start, off)


MACS = bytes([2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1])
def tcp4(payload, seq=1, flags=0x18, check=0x1420):
    return MACS + b"\x08\x00" + ipv4(ip(10, 0, 0, 1), ip(10, 0, 0, 2), 6, tcp(1234, 80, seq, flags, payload, check), flags=0x4000)


def udp4(payload):
    return MACS + b"\x08\x00" + ipv4(ip(10, 0, 0, 1), ip(10, 0, 0, 2), 17, udp(5000, 6000, payload))


def tcp6(payload):
    t = tcp(1234, 80, 9, 0x10, payload)
    return MACS + b"\x86\xdd" + bytes([0x60, 0, 0, 0]) + struct.pack("!HBB", len(t), 6, 64) + bytes([0xFD] + [0] * 14 + [1]) + bytes([0xFD] + [0] * 14 + [2]) + t


for k, (sel, hdr, frame) in {
    "csum_only": (0, vnet(1, 0, 54, 0, 34, 16), tcp4(b"hi!")),
    "gso_tcp4": (1, vnet(1, 1, 54, 100, 34, 16), tcp4(bytes(range(256)) * 2)),
    "gso_tcp4_ecn_chain": (2, vnet(1, 0x81, 54, 61, 34, 16), tcp4(bytes(range(200)), flags=0x99)),
    "gso_tcp6": (1, vnet(1, 4, 74, 200, 54, 16), tcp6(bytes(700))),
    "gso_udp": (0, vnet(1, 5, 42, 300, 34, 6), udp4(bytes(1000))),
    "data_valid": (0, vnet(2, 0, 0, 0, 0, 0), tcp4(b"x")),
}.items():
    write("virtio_offload", k, bytes([sel]) + hdr + frame)

# (b) wg4-input: [mode][counter lo][counter hi] + an inner packet (modes 0, 1: sealed with the
# session's keys) or a whole message (modes 2, 3: sent as it is), as graph-nodes/tests/wireguard.rs.
inner_wg = ipv4(ip(10, 9, 0, 5), ip(10, 0, 1, 2), 17, udp(1, 2, b"hello"))
for k, v in {
    "sealed_routed": bytes([0, 0, 0]) + inner_wg,
    "sealed_to_us": bytes([0, 1, 0]) + ipv4(ip(10, 9, 0, 5), ip(192, 168, 1, 1), 1, icmp_echo(8, 1, 1, b"wg")),
    "keepalive": bytes([0, 2, 0]),
    "flipped": bytes([1, 5, 0]) + inner_wg,
    "initiation": bytes([2, 0, 0]) + bytes([1, 0, 0, 0]) + bytes(144),
    "unknown_index": bytes([2, 0, 0]) + bytes([4, 0, 0, 0, 0x99, 0, 0, 0]) + bytes(8 + 32),
    "pending_index": bytes([2, 0, 0]) + bytes([4, 0, 0, 0, 0x33, 0x33, 0, 0]) + bytes(8 + 32),
}.items():
    write("wg4_input", k, v)
