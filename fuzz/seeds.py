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


# (h) ip6_input: records [selector][len][IPv6 packet] (fuzz/src/ip6.rs's ip6_frame: bit 0 the
# port, bits 1-2 the Ethernet destination (1: multicast, 3: VLAN 200), bit 3 the payload length
# set, bit 4 the checksum set, bit 7 eth2), as graph-nodes/tests/ip6_routed.rs sends them.
def a6(s):
    import ipaddress
    return ipaddress.IPv6Address(s).packed


def eui64(m):
    return bytes([0xFE, 0x80] + [0] * 6 + [m[0] ^ 2, m[1], m[2], 0xFF, 0xFE, m[3], m[4], m[5]])


def ip6p(src, dst, nxt, payload, hop=64):
    return bytes([0x60, 0, 0, 0]) + struct.pack("!HBB", len(payload), nxt, hop) + src + dst + payload


def l4sum(src, dst, proto, msg, at):
    m = bytearray(msg)
    m[at:at + 2] = b"\0\0"
    c = csum(src + dst + struct.pack("!I", len(m)) + bytes([0, 0, 0, proto]) + bytes(m))
    m[at:at + 2] = struct.pack("!H", c or (0xFFFF if proto == 17 else 0))
    return bytes(m)


def icmp6p(src, dst, msg, hop=64):
    return ip6p(src, dst, 58, l4sum(src, dst, 58, msg, 2), hop)


def nd_msg(t, flags, target, opt=None, mac=None):
    m = bytes([t, 0, 0, 0, flags, 0, 0, 0]) + target
    return m + bytes([opt, 1]) + mac if opt else m


H1, H2, US0, US1, US200 = a6("fd00:1::2"), a6("fd00:2::1"), a6("fd00:1::fe"), a6("fd00:2::fe"), a6("fd00:200::fe")
HOST_C = bytes([2, 0xCC, 0, 0, 0, 0x0C])
echo6 = bytes([128, 0, 0, 0, 0, 1, 0, 1]) + b"quiver"
udp6 = udp(4000, 5000, bytes(16))
FIX = 0x18
vx6 = udp(49152, 4789, bytes([8, 0, 0, 0, 0x65, 0x43, 0x21, 0]) + eth(HOST_C, HOST_A, 0x86DD, ip6p(H1, H2, 17, udp(1, 2, b"in"))))
ip6_seeds = {
    "routed": [(FIX, ip6p(H1, a6("fd00:99::9"), 17, udp6))],
    "ecmp": [(FIX, ip6p(H1, a6("fd00:98::%x" % i), 17, udp(4000 + i, 5000, bytes(8)))) for i in range(4)],
    "unresolved": [(FIX, ip6p(H1, a6("fd00:97::1"), 17, udp6))],
    "link_local_next_hop": [(FIX, ip6p(H1, a6("fd00:96::1"), 17, udp6))],
    "vlan_route_and_echo": [(FIX, ip6p(H1, a6("fd00:95::1"), 17, udp6)), (FIX | 6, icmp6p(a6("fd00:200::2"), US200, echo6))],
    "blackhole_and_no_route": [(FIX, ip6p(H1, a6("fd00:66::1"), 17, udp6)), (FIX, ip6p(H1, a6("fd00:42::1"), 17, udp6))],
    "echo_global": [(FIX, icmp6p(H1, US0, echo6))],
    "echo_link_local": [(FIX, icmp6p(a6("fe80::a"), eui64(MAC[0]), echo6))],
    "hop_limit_1": [(FIX, ip6p(H1, a6("fd00:99::9"), 17, udp6, hop=1))],
    "too_big": [(FIX, ip6p(H1, a6("fd00:99::9"), 17, udp(4000, 5000, bytes(1400))))],
    "ns_for_us": [(FIX | 3, icmp6p(a6("fd00:2::7"), a6("ff02::1:ff00:fe"), nd_msg(135, 0, US1, 1, HOST_C), hop=255))],
    "na_learned": [(FIX | 1, icmp6p(a6("fd00:2::5"), eui64(MAC[1]), nd_msg(136, 0x60, a6("fd00:2::5"), 2, HOST_C), hop=255))],
    "dad_and_rs": [(FIX | 3, icmp6p(bytes(16), a6("ff02::1:ff00:fe"), nd_msg(135, 0, US1), hop=255)),
                   (FIX | 3, icmp6p(a6("fe80::c"), a6("ff02::2"), bytes([133, 0, 0, 0, 0, 0, 0, 0]), hop=255))],
    "extension_headers": [(FIX, ip6p(H1, a6("fd00:99::9"), 0, bytes([60, 0, 1, 4, 0, 0, 0, 0]) + bytes([44, 0, 1, 4, 0, 0, 0, 0]) + bytes([17, 0, 0, 1, 0, 0, 0, 7]) + udp6)),
                          (FIX, icmp6p(H1, US0, echo6)[:6] + bytes([60, 64]) + icmp6p(H1, US0, echo6)[8:40] + bytes([58, 0, 1, 4, 0, 0, 0, 0]) + echo6)],
    "vlan_nd_and_link_local_echo": [(FIX | 6, icmp6p(a6("fd00:200::2"), a6("ff02::1:ff00:fe"), nd_msg(135, 0, US200, 1, HOST_A), hop=255)),
                                    (FIX | 6, icmp6p(a6("fe80::a"), eui64(MAC[0]), echo6))],
    "vxlan6_in": [(FIX | 1, ip6p(H2, US1, 17, vx6))],
    "vxlan6_out": [(FIX | 0x80, ip6p(H1, H2, 17, udp(7, 8, bytes(100))))],
}
for k, v in ip6_seeds.items():
    write("ip6_input", k, b"".join(bytes([s]) + struct.pack("!H", len(p)) + p for s, p in v))

# (i) nd: [sources/destinations/hop limit][checksum, target, type, code, hop-by-hop, port] +
# the ICMPv6 message (fuzz/fuzz_targets/nd.rs).
nd_seeds = {
    "ns_global": (0x02, 0, nd_msg(135, 0, US1, 1, HOST_C)),
    "ns_link_local": (0x09, 0, nd_msg(135, 0, eui64(MAC[1]), 1, HOST_C)),
    "ns_unicast": (0x1A, 0, nd_msg(135, 0, US1, 1, HOST_C)),
    "ns_dad": (0x00, 0, nd_msg(135, 0, US1)),
    "ns_hop_limit_64": (0x82, 0, nd_msg(135, 0, US1, 1, HOST_C)),
    "ns_option_length_0": (0x02, 0, nd_msg(135, 0, US1, 1, HOST_C)[:25] + b"\0" + HOST_C),
    "ns_multicast_target": (0x1A, 0, nd_msg(135, 0, a6("ff02::1"), 1, HOST_C)),
    "ns_on_eth0": (0x02, 0x86, nd_msg(135, 0, US0, 1, HOST_C)),
    "ns_hop_by_hop": (0x02, 0x40, nd_msg(135, 0, US1, 1, HOST_C)),
    "ns_bad_checksum": (0x02, 0x01, nd_msg(135, 0, US1, 1, HOST_C)),
    "na_solicited": (0x22, 0, nd_msg(136, 0x60, a6("fd00:2::7"), 2, HOST_C)),
    "na_to_all_nodes": (0x12, 0, nd_msg(136, 0x20, a6("fd00:2::7"), 2, HOST_C)),
    "router_solicitation": (0x11, 0, bytes([133, 0, 0, 0, 0, 0, 0, 0])),
    "routed": (0x3A, 0, nd_msg(135, 0, a6("fd00:2::7"), 1, HOST_C)),
}
for k, (s0, s1, m) in nd_seeds.items():
    write("nd", k, bytes([s0, s1]) + m)

# (j) wg6_input: as wg4_input (mode, counter lo, counter hi), bits 2-3 of the mode the outer
# UDP checksum (0: right, 2: zero, 3: wrong); the session's peer allows 10.9.0.0/24 and
# fd00:9::/64, eth1 has 10.0.1.0/24 and fd00:1::/64 (fuzz/src/wg6.rs).
inner_wg6 = ip6p(a6("fd00:9::5"), a6("fd00:1::2"), 17, l4sum(a6("fd00:9::5"), a6("fd00:1::2"), 17, udp(1, 2, b"hello"), 6))
for k, v in {
    "sealed_routed4": bytes([0, 0, 0]) + inner_wg,
    "sealed_routed6": bytes([0, 1, 0]) + inner_wg6,
    "keepalive": bytes([0, 2, 0]),
    "flipped": bytes([1, 5, 0]) + inner_wg6,
    "zero_checksum": bytes([8, 3, 0]) + inner_wg6,
    "wrong_checksum": bytes([12, 4, 0]) + inner_wg6,
    "initiation": bytes([2, 0, 0]) + bytes([1, 0, 0, 0]) + bytes(144),
    "unknown_index": bytes([2, 0, 0]) + bytes([4, 0, 0, 0, 0x99, 0, 0, 0]) + bytes(8 + 32),
}.items():
    write("wg6_input", k, v)

# (k) vxlan6_input: [selector] + VXLAN header + inner frame (fuzz/fuzz_targets/vxlan6_input.rs:
# bits 0-1 the source, bit 2 a port not VXLAN's, bits 3-4 the checksum: 0 right, 2 zero, 3 wrong).
vx6_inner = bytes([8, 0, 0, 0, 0x65, 0x43, 0x21, 0]) + eth(HOST_C, HOST_A, 0x86DD, ip6p(H1, H2, 17, udp(1, 2, b"in")))
for k, sel in {"decap": 0, "stranger": 3, "other_port": 4, "zero_checksum": 16, "wrong_checksum": 24}.items():
    write("vxlan6_input", k, bytes([sel]) + vx6_inner)
