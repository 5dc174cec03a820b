"""TRex STL profile: IMIX (7:4:1 of 64, 594 and 1518 byte frames, incl. FCS) of routed IPv4/UDP.

    start -f pktgen-scripts/trex/imix.py -m 100% --port 0 1

Destinations vary over port 0 → 16.0.0.0/8 and port 1 → 48.0.0.0/8 like ip4_routing.py.
"""

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
MIX = ((64, 7), (594, 4), (1518, 1))


class Imix:
    def get_streams(self, tunables=(), port_id=0, **kwargs):
        first = 16 if port_id % 2 == 0 else 48
        streams = []
        for size, pps_weight in MIX:
            headers = Ether() / IP(src="100.0.0.1", dst="%d.0.0.1" % first) / UDP(sport=1024, dport=1024)
            vm = STLScVmRaw(
                [
                    STLVmFlowVar(name="dst", min_value="%d.0.0.0" % first, max_value="%d.255.255.255" % first, size=4, op="random"),
                    STLVmWrFlowVar(fv_name="dst", pkt_offset="IP.dst"),
                    STLVmFixIpv4(offset="IP"),
                ]
            )
            pkt = STLPktBuilder(pkt=headers / (b"\x00" * (size - FCS - len(headers))), vm=vm)
            streams.append(STLStream(packet=pkt, mode=STLTXCont(pps=pps_weight)))
        return streams


def register():
    return Imix()
