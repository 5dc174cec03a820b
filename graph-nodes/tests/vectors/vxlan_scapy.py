#!/usr/bin/python3
"""Builds VXLAN frames with scapy, independently of Quiver, for graph-nodes/tests/vxlan.rs.

Reads a JSON list of jobs on stdin, each
  {"eth_dst", "eth_src": "aa:bb:..", "ip_src", "ip_dst": "a.b.c.d", "sport", "dport", "vni": int,
   "inner": hex}
and writes a JSON list of the frames as hex: Ether / IP(id=0, ttl=64, no flags) /
UDP(checksum 0) / VXLAN(I flag, vni) / inner. A job with "ip6": true has IPv6 addresses and a
flow label "fl": Ether / IPv6(hlim=64, fl) / UDP (the checksum scapy computes) / VXLAN / inner.
"""
import json
import sys

from scapy.all import IP, UDP, Ether, IPv6, Raw
from scapy.layers.vxlan import VXLAN

out = []
for job in json.load(sys.stdin):
    if job.get("ip6"):
        outer = IPv6(src=job["ip_src"], dst=job["ip_dst"], hlim=64, fl=job["fl"]) / UDP(
            sport=job["sport"], dport=job["dport"]
        )
    else:
        outer = IP(src=job["ip_src"], dst=job["ip_dst"], id=0, ttl=64, flags=0) / UDP(
            sport=job["sport"], dport=job["dport"], chksum=0
        )
    frame = (
        Ether(dst=job["eth_dst"], src=job["eth_src"])
        / outer
        / VXLAN(flags=0x08, vni=job["vni"])
        / Raw(bytes.fromhex(job["inner"]))
    )
    out.append(bytes(frame).hex())
json.dump(out, sys.stdout)
