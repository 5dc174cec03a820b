"""An 802.1Q station on the external network of tests/nsm_vlan.rs, built on scapy's Dot1Q
(an implementation of 802.1Q independent of Quiver's), for kernels without VLAN devices.

  nsm_vlan_station.py serve IFACE IP MAC VLAN
      answers ARP requests and ICMP echo requests for IP that arrive tagged with VLAN, with
      tagged replies; prints `ready` once it listens, then one line per frame it saw that was
      not tagged with VLAN (`untagged` or `vlan N`), so the test can see Quiver's tagging.
  nsm_vlan_station.py ping IFACE SRC_IP MAC VLAN DST_IP
      resolves DST_IP with an ARP request tagged with VLAN and sends it one echo request;
      prints `reply` or `none`.
"""
import sys

from scapy.all import ARP, ICMP, IP, Dot1Q, Ether, conf, sendp, sniff, srp1

conf.verb = 0


def serve(iface, ip, mac, vlan):
    def handle(p):
        if Ether not in p or p[Ether].src == mac:
            return
        if Dot1Q not in p:
            if p[Ether].type not in (0x86DD,):
                print("untagged", flush=True)
            return
        if p[Dot1Q].vlan != vlan:
            print(f"vlan {p[Dot1Q].vlan}", flush=True)
            return
        tag = Dot1Q(vlan=vlan)
        if ARP in p and p[ARP].op == 1 and p[ARP].pdst == ip:
            sendp(
                Ether(dst=p[Ether].src, src=mac)
                / tag
                / ARP(op=2, hwsrc=mac, psrc=ip, hwdst=p[ARP].hwsrc, pdst=p[ARP].psrc),
                iface=iface,
            )
        elif ICMP in p and p[ICMP].type == 8 and p[IP].dst == ip:
            sendp(
                Ether(dst=p[Ether].src, src=mac)
                / tag
                / IP(src=ip, dst=p[IP].src)
                / ICMP(type=0, id=p[ICMP].id, seq=p[ICMP].seq)
                / bytes(p[ICMP].payload),
                iface=iface,
            )

    sniff(
        iface=iface,
        prn=handle,
        store=0,
        started_callback=lambda: print("ready", flush=True),
    )


def ping(iface, src, mac, vlan, dst):
    tag = Dot1Q(vlan=vlan)
    who = srp1(
        Ether(dst="ff:ff:ff:ff:ff:ff", src=mac) / tag / ARP(op=1, hwsrc=mac, psrc=src, pdst=dst),
        iface=iface,
        timeout=1,
    )
    if who is None or ARP not in who:
        print("none", flush=True)
        return
    echo = srp1(
        Ether(dst=who[ARP].hwsrc, src=mac) / tag / IP(src=src, dst=dst) / ICMP(id=7, seq=1),
        iface=iface,
        timeout=1,
    )
    ok = echo is not None and ICMP in echo and echo[ICMP].type == 0
    print("reply" if ok else "none", flush=True)


if __name__ == "__main__":
    mode, iface = sys.argv[1], sys.argv[2]
    if mode == "serve":
        serve(iface, sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        ping(iface, sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6])
