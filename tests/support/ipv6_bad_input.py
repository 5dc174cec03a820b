"""Malformed IPv6 for tests/routed_ipv6_bad_input.rs, sent as a peer on Quiver's link would
send it, every frame built with scapy (an IPv6 and neighbour discovery implementation
independent of Quiver's).

  ipv6_bad_input.py IFACE HOST_MAC QUIVER_MAC HOST_IP QUIVER_IP FAR_IP CASE...
      sends each named CASE once out of IFACE (from HOST_MAC and HOST_IP to Quiver's MAC)
      and prints `sent CASE LENGTH` for each. The case `payload-length-shorter` (an echo
      request to QUIVER_IP with 32 bytes after the packet its payload length gives) waits for
      Quiver's echo reply and prints `reply FRAME_LENGTH PAYLOAD_LENGTH CHECKSUM` (CHECKSUM
      `ok` when the reply's ICMPv6 checksum verifies), or `reply none`.
"""
import sys
import threading

from scapy.all import (
    ICMPv6EchoReply,
    ICMPv6EchoRequest,
    ICMPv6ND_NA,
    ICMPv6ND_NS,
    ICMPv6NDOptDstLLAddr,
    ICMPv6NDOptSrcLLAddr,
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrHopByHop,
    UDP,
    AsyncSniffer,
    Ether,
    Raw,
    conf,
    in6_getnsma,
    inet_pton,
    inet_ntop,
    sendp,
    socket,
)

conf.verb = 0

ECHO_ID = 0x7161


def solicited_node(ip):
    """The solicited-node multicast group of `ip` (RFC 4291 2.7.1)."""
    return inet_ntop(socket.AF_INET6, in6_getnsma(inet_pton(socket.AF_INET6, ip)))


def cases(host_mac, host, quiver, far):
    """Each case's frame, by name: what Quiver must refuse (and why, in the test)."""
    to_far = IPv6(src=host, dst=far)
    nd = IPv6(src=host, dst=solicited_node(quiver), hlim=255)
    udp = UDP(sport=40000, dport=40001) / Raw(b"bad-input")
    wrong_sum = bytearray(bytes(IPv6(src=host, dst=quiver) / ICMPv6EchoRequest(id=ECHO_ID, seq=1, data=b"x" * 16)))
    wrong_sum[42] ^= 0xFF
    bad_nd_sum = bytearray(bytes(nd / ICMPv6ND_NS(tgt=quiver) / ICMPv6NDOptSrcLLAddr(lladdr=host_mac)))
    bad_nd_sum[43] ^= 0x01
    nine = to_far
    for _ in range(9):
        nine = nine / IPv6ExtHdrDestOpt()
    return {
        # ip6-input: 20 bytes of a 40-byte header.
        "truncated-header": Raw(bytes(to_far / udp)[:20]),
        "bad-version": IPv6(version=4, src=host, dst=far) / udp,
        "payload-length-longer": IPv6(src=host, dst=far, plen=200) / udp,
        "multicast-source": IPv6(src="ff02::1", dst=far) / udp,
        "nine-extension-headers": nine / udp,
        "hop-by-hop-not-first": to_far / IPv6ExtHdrDestOpt() / IPv6ExtHdrHopByHop() / udp,
        # A hop-by-hop header cut at 4 bytes, and one saying 40 bytes with 8 there.
        "extension-header-cut": IPv6(src=host, dst=far, nh=0) / Raw(bytes([17, 0, 1, 2])),
        "extension-header-past-packet": IPv6(src=host, dst=far, nh=0) / Raw(bytes([17, 4, 1, 4, 0, 0, 0, 0])),
        # ip6-rewrite: a link-local source is never forwarded off its link (RFC 4291 2.5.6).
        "link-local-source-routed": IPv6(src="fe80::a", dst=far) / udp,
        # ip6-nd (RFC 4861 7.1): options of length 0 or past the end, a multicast target,
        # duplicate address detection with a link-layer address, a routed message, a bad sum.
        "ns-option-length-zero": nd / ICMPv6ND_NS(tgt=quiver) / ICMPv6NDOptSrcLLAddr(lladdr=host_mac, len=0),
        "ns-option-past-end": nd / ICMPv6ND_NS(tgt=quiver) / ICMPv6NDOptSrcLLAddr(lladdr=host_mac, len=2),
        "na-option-length-zero": IPv6(src=host, dst=quiver, hlim=255)
        / ICMPv6ND_NA(tgt=host, R=0, S=1, O=1)
        / ICMPv6NDOptDstLLAddr(lladdr=host_mac, len=0),
        "ns-multicast-target": IPv6(src=host, dst=quiver, hlim=255) / ICMPv6ND_NS(tgt="ff02::1"),
        "dad-ns-with-link-layer-address": IPv6(src="::", dst=solicited_node(quiver), hlim=255)
        / ICMPv6ND_NS(tgt=quiver)
        / ICMPv6NDOptSrcLLAddr(lladdr=host_mac),
        "ns-hop-limit-64": IPv6(src=host, dst=solicited_node(quiver), hlim=64)
        / ICMPv6ND_NS(tgt=quiver)
        / ICMPv6NDOptSrcLLAddr(lladdr=host_mac),
        "ns-bad-checksum": Raw(bytes(bad_nd_sum)),
        # ip6-local: an echo request whose checksum does not verify.
        "echo-bad-checksum": Raw(bytes(wrong_sum)),
        # Answered: the packet is the payload length's, the 32 bytes after it are not.
        "payload-length-shorter": Raw(
            bytes(IPv6(src=host, dst=quiver) / ICMPv6EchoRequest(id=ECHO_ID, seq=2, data=b"y" * 16)) + b"z" * 32
        ),
    }


def reply_line(p):
    """`reply FRAME_LENGTH PAYLOAD_LENGTH CHECKSUM` for Quiver's echo reply `p`."""
    raw = bytes(p)
    ip = p[IPv6]
    icmp = p[ICMPv6EchoReply]
    given = icmp.cksum
    again = IPv6(bytes(ip))
    del again[ICMPv6EchoReply].cksum
    verifies = IPv6(bytes(again))[ICMPv6EchoReply].cksum == given
    return f"reply {len(raw)} {ip.plen} {'ok' if verifies else 'bad'}"


def main(iface, host_mac, quiver_mac, host, quiver, far, names):
    frames = cases(host_mac, host, quiver, far)
    ether = Ether(src=host_mac, dst=quiver_mac, type=0x86DD)
    for name in names:
        frame = ether / frames[name]
        if name != "payload-length-shorter":
            sendp(frame, iface=iface)
            print(f"sent {name} {len(frame)}", flush=True)
            continue
        listening = threading.Event()
        sniffer = AsyncSniffer(
            iface=iface,
            lfilter=lambda p: ICMPv6EchoReply in p and p[ICMPv6EchoReply].id == ECHO_ID and p[IPv6].src == quiver,
            count=1,
            timeout=10,
            started_callback=listening.set,
        )
        sniffer.start()
        listening.wait(10)
        sendp(frame, iface=iface)
        print(f"sent {name} {len(frame)}", flush=True)
        sniffer.join()
        got = sniffer.results or []
        print(reply_line(got[0]) if got else "reply none", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:7], sys.argv[7:])
