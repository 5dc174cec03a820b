"""TRex STL profile: L2 cross-connect through Quiver (port A ↔ port B, frames untouched).

    start -f pktgen-scripts/trex/l2_xconnect.py -m 100% --port 0 1 -t size=64,flows=1024

Quiver forwards every frame unchanged, so the destination MAC is TRex's other port; the
source/destination UDP ports vary so that RSS spreads the flows over Quiver's workers.
Tunables: size (frame bytes incl. FCS, default 64), flows (default 1024).
"""

import argparse

from trex_stl_lib.api import (
    IP,
    UDP,
    Ether,
    STLPktBuilder,
    STLScVmRaw,
    STLStream,
    STLTXCont,
    STLVmFixIpv4,
    STLVmFlowVar,
    STLVmWrFlowVar,
)

FCS = 4


class L2Xconnect:
    def get_streams(self, tunables=(), port_id=0, **kwargs):
        parser = argparse.ArgumentParser(prog="l2_xconnect")
        parser.add_argument("--size", type=int, default=64)
        parser.add_argument("--flows", type=int, default=1024)
        args = parser.parse_args(list(tunables))
        side = port_id % 2
        headers = (
            Ether(src="02:00:00:00:0%d:01" % side, dst="02:00:00:00:0%d:01" % (1 - side))
            / IP(src="10.%d.0.1" % side, dst="10.%d.0.1" % (1 - side))
            / UDP(sport=1024, dport=1024)
        )
        vm = STLScVmRaw(
            [
                STLVmFlowVar(name="port", min_value=1024, max_value=1024 + args.flows - 1, size=2, op="inc"),
                STLVmWrFlowVar(fv_name="port", pkt_offset="UDP.sport"),
                STLVmFixIpv4(offset="IP"),
            ]
        )
        pad = max(0, args.size - FCS - len(headers))
        pkt = STLPktBuilder(pkt=headers / (b"\x00" * pad), vm=vm)
        return [STLStream(packet=pkt, mode=STLTXCont())]


def register():
    return L2Xconnect()
