"""TRex STL profile: VXLAN toward Quiver's vxlan4-input (decapsulation) and plain frames for
its vxlan4-encap, on the two ports of one tunnel.

    start -f pktgen-scripts/trex/vxlan.py -m 100% --port 0 1 -t size=64,vni=100,tunnels=1

Port 0 (underlay side) sends outer Ethernet / IPv4 / UDP 4789 / VXLAN (I flag, VNI) / inner
Ethernet / IPv4 / UDP to Quiver's tunnel endpoint address; Quiver decapsulates and sends the inner
frame out of the tunnel's L2 side. Port 1 (L2 side) sends the inner frames, which Quiver
encapsulates toward port 0. `tunnels` spreads port 0's frames over VNIs vni..vni+tunnels-1 (one
tunnel each must exist in Quiver). `size` is the inner frame's size incl. FCS.
"""

import argparse

from trex_stl_lib.api import (
    IP,
    UDP,
    VXLAN,
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
UNDERLAY_REMOTE = "192.0.2.2"  # TRex port 0's address on the underlay
UNDERLAY_LOCAL = "192.0.2.1"  # Quiver's VTEP address
VXLAN_HEADER_OFFSET = 14 + 20 + 8  # outer Ethernet + IPv4 + UDP: where the VXLAN header starts


def inner(size):
    headers = Ether(src="02:00:00:00:10:01", dst="02:00:00:00:10:02") / IP(src="172.16.0.1", dst="172.16.0.2") / UDP(sport=1024, dport=1024)
    return headers / (b"\x00" * max(0, size - FCS - len(headers)))


class Vxlan:
    def get_streams(self, tunables=(), port_id=0, **kwargs):
        parser = argparse.ArgumentParser(prog="vxlan")
        parser.add_argument("--size", type=int, default=64)
        parser.add_argument("--vni", type=int, default=100)
        parser.add_argument("--tunnels", type=int, default=1)
        args = parser.parse_args(list(tunables))
        if port_id % 2 == 1:
            return [STLStream(packet=STLPktBuilder(pkt=inner(args.size)), mode=STLTXCont())]
        outer = (
            Ether(dst="02:00:00:00:00:01")
            / IP(src=UNDERLAY_REMOTE, dst=UNDERLAY_LOCAL, flags="DF")
            / UDP(sport=49152, dport=4789, chksum=0)
            / VXLAN(flags=0x08, vni=args.vni)
            / inner(args.size)
        )
        ops = [
            STLVmFlowVar(name="sport", min_value=49152, max_value=65535, size=2, op="random"),
            STLVmWrFlowVar(fv_name="sport", pkt_offset="UDP.sport"),
        ]
        if args.tunnels > 1:
            # The VNI is the 24 bits after the flags byte and 3 reserved bytes: write a 4-byte
            # value (vni << 8) over VNI + the last reserved byte.
            ops += [
                STLVmFlowVar(name="vni", min_value=args.vni << 8, max_value=(args.vni + args.tunnels - 1) << 8, size=4, op="inc", step=256),
                STLVmWrFlowVar(fv_name="vni", pkt_offset=VXLAN_HEADER_OFFSET + 4),
            ]
        ops.append(STLVmFixIpv4(offset="IP"))
        return [STLStream(packet=STLPktBuilder(pkt=outer, vm=STLScVmRaw(ops)), mode=STLTXCont())]


def register():
    return Vxlan()
