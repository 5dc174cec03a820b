"""TRex STL profile: IPv4 routing through Quiver across many destination ranges.

Exercises ip4-lookup over a large FIB (load one with `quiver ctl` or the config in ../quiver/):
each stream walks the destinations of its own range at random, so lookups hit many /24s and
the cache-friendliness of the table is measured, not one hot entry.

    start -f pktgen-scripts/trex/ip4_routing.py -m 100% --port 0 1 -t size=64,ranges=16

Tunables: size (frame bytes incl. FCS, default 64), ranges (destination /8 ranges, default 16,
starting at 16.0.0.0 on port 0 and 48.0.0.0 on port 1), flows (source addresses, default 256),
latency_pps (default 0: off; else a latency stream of that many packets per second, group id =
port id, for latency at 10/50/90 % of PDR — see ../README.md).
"""

import argparse

from trex_stl_lib.api import (
    IP,
    UDP,
    Ether,
    STLFlowLatencyStats,
    STLPktBuilder,
    STLScVmRaw,
    STLStream,
    STLTXCont,
    STLVmFixIpv4,
    STLVmFlowVar,
    STLVmWrFlowVar,
)

FCS = 4
FIRST_RANGE = {0: 16, 1: 48}


def ip4(octet0, rest=0):
    return "%d.%d.%d.%d" % (octet0, (rest >> 16) & 0xFF, (rest >> 8) & 0xFF, rest & 0xFF)


class Ip4Routing:
    def streams(self, port_id, size, ranges, flows, latency_pps):
        base = FIRST_RANGE.get(port_id % 2, 16)
        src_base = 100 + port_id % 2
        streams = []
        for r in range(ranges):
            headers = Ether() / IP(src=ip4(src_base, 1), dst=ip4(base + r, 1), ttl=64) / UDP(sport=1024, dport=1024)
            pad = max(0, size - FCS - len(headers))
            vm = STLScVmRaw(
                [
                    STLVmFlowVar(name="dst", min_value=ip4(base + r, 0), max_value=ip4(base + r, 0xFFFFFF), size=4, op="random"),
                    STLVmFlowVar(name="src", min_value=ip4(src_base, 1), max_value=ip4(src_base, flows), size=4, op="inc"),
                    STLVmWrFlowVar(fv_name="dst", pkt_offset="IP.dst"),
                    STLVmWrFlowVar(fv_name="src", pkt_offset="IP.src"),
                    STLVmFixIpv4(offset="IP"),
                ]
            )
            pkt = STLPktBuilder(pkt=headers / (b"\x00" * pad), vm=vm)
            streams.append(STLStream(packet=pkt, mode=STLTXCont(percentage=100.0 / ranges)))
        if latency_pps > 0:
            # A constant-rate stream TRex timestamps: latency is read off it while the others
            # load Quiver at the rate being measured.
            headers = Ether() / IP(src=ip4(src_base, 1), dst=ip4(base, 1)) / UDP(sport=1025, dport=1025)
            pkt = STLPktBuilder(pkt=headers / (b"\x00" * max(0, size - FCS - len(headers))))
            streams.append(
                STLStream(
                    packet=pkt,
                    mode=STLTXCont(pps=latency_pps),
                    flow_stats=STLFlowLatencyStats(pg_id=port_id),
                )
            )
        return streams

    def get_streams(self, tunables=(), port_id=0, **kwargs):
        parser = argparse.ArgumentParser(prog="ip4_routing")
        parser.add_argument("--size", type=int, default=64)
        parser.add_argument("--ranges", type=int, default=16)
        parser.add_argument("--flows", type=int, default=256)
        parser.add_argument("--latency_pps", type=int, default=0)
        args = parser.parse_args(list(tunables))
        return self.streams(port_id, args.size, args.ranges, args.flows, args.latency_pps)


def register():
    return Ip4Routing()
