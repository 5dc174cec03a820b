//! IPv6 through an L3 cross-connect (`ip6-l3xc`): every IPv6 packet received on a cross-connected
//! interface leaves by the peer's next hop with its hop limit decremented and the peer's L2
//! header (EtherType IPv6), both ways; an unresolved peer is asked for with ARP (the IPv4 side's
//! next hop is the same station); link-local and multicast packets stay on their link; an
//! interface that is not cross-connected routes no IPv6.

mod common;

use common::*;

const A: u32 = u32::from_be_bytes([10, 0, 1, 2]);

fn l3xc(resolved: bool) -> Rig {
    Rig::new(&[MAC0, MAC1], |f, p| {
        f.add_address(p[1], ip(10, 0, 2, 1), 24).unwrap();
        if resolved {
            f.add_neighbor(p[0], A, HOST_A).unwrap();
            f.add_neighbor(p[1], ip(10, 0, 2, 2), HOST_B).unwrap();
        }
        f.l3_cross_connect(p[0], p[1], ip(10, 0, 2, 2), A).unwrap();
    })
}

#[test]
fn ipv6_crosses_an_l3_cross_connect_both_ways_with_its_hop_limit_decremented() {
    let mut rig = l3xc(true);
    let out = ipv6("fd00:1::2", "fd00:99::9", 64, &[1; 30]);
    rig.inject(0, &[eth(MAC0, HOST_A, 0x86dd, &out)]);
    let want = eth(
        HOST_B,
        MAC1,
        0x86dd,
        &ipv6("fd00:1::2", "fd00:99::9", 63, &[1; 30]),
    );
    assert_eq!(rig.sent(1), vec![want]);
    let back = ipv6("fd00:99::9", "fd00:1::2", 2, &[2; 8]);
    // Padded to Ethernet's minimum, as a NIC delivers it: the padding does not go on.
    let mut frame = eth(MAC1, HOST_B, 0x86dd, &back);
    frame.resize(60.max(frame.len()), 0);
    rig.inject(1, &[frame]);
    let want = eth(
        HOST_A,
        MAC0,
        0x86dd,
        &ipv6("fd00:99::9", "fd00:1::2", 1, &[2; 8]),
    );
    assert_eq!(rig.sent(0), vec![want]);

    // What an L3 cross-connect does not carry: counted, not sent.
    rig.inject(
        0,
        &[
            eth(
                MAC0,
                HOST_A,
                0x86dd,
                &ipv6("fe80::1", "fd00:99::9", 64, &[0; 8]),
            ),
            eth(
                [0x33, 0x33, 0, 0, 0, 1],
                HOST_A,
                0x86dd,
                &ipv6("fd00:1::2", "ff02::1", 64, &[0; 8]),
            ),
            eth(
                MAC0,
                HOST_A,
                0x86dd,
                &ipv6("fd00:1::2", "fd00:99::9", 1, &[0; 8]),
            ),
            eth(
                MAC0,
                HOST_A,
                0x86dd,
                &ipv6("fd00:1::2", "fd00:99::9", 64, &[0; 1461]),
            ),
        ],
    );
    assert!(rig.sent(1).is_empty());
    // A link-local source is not carried off its link; all-nodes multicast is for this node
    // (ip6-input), which has nothing for UDP.
    assert_eq!(rig.error("ip6-l3xc", "link-local"), 1);
    assert_eq!(rig.error("ip6-local", "unknown-protocol"), 1);
    assert_eq!(rig.error("ip6-l3xc", "hop-limit-exceeded"), 1);
    assert_eq!(rig.error("ip6-l3xc", "mtu-exceeded"), 1);
    rig.assert_no_leaks();
}

#[test]
fn an_unresolved_peer_is_asked_for_with_arp_and_a_routed_interface_looks_ipv6_up() {
    let mut rig = l3xc(false);
    rig.inject(
        0,
        &[eth(
            MAC0,
            HOST_A,
            0x86dd,
            &ipv6("fd00:1::2", "fd00:99::9", 64, &[0; 8]),
        )],
    );
    let want = eth(
        [0xff; 6],
        MAC1,
        0x0806,
        &arp(1, MAC1, ip(10, 0, 2, 1), [0; 6], ip(10, 0, 2, 2)),
    );
    assert_eq!(rig.sent(1), vec![want]);
    assert_eq!(rig.error("ip4-arp", "resolving"), 1);

    let mut plain = Rig::new(&[MAC0, MAC1], |_, _| {});
    plain.inject(
        0,
        &[eth(
            MAC0,
            HOST_A,
            0x86dd,
            &ipv6("fd00:1::2", "fd00:99::9", 64, &[0; 8]),
        )],
    );
    // A routed interface looks IPv6 up: no route here.
    assert_eq!(plain.error("ip6-lookup", "no-route"), 1);
    rig.assert_no_leaks();
    plain.assert_no_leaks();
}

#[test]
fn ipv6_cross_connected_to_a_wireguard_interface_with_no_peer_for_it_is_counted_there() {
    // The packet reaches wg4-encrypt, which finds no peer whose allowed IPs hold it. The
    // tunnel's adjacency has no L2 header to give an EtherType (this once panicked).
    let mut rig = Rig::new(&[MAC0, MAC1], |f, p| {
        f.add_neighbor(p[0], A, HOST_A).unwrap();
        let (wg, _) = f
            .add_wireguard_tunnel(
                "wg0",
                std::net::Ipv4Addr::from(ip(192, 0, 2, 1)).into(),
                51820,
                vec![],
                1500,
            )
            .unwrap();
        f.l3_cross_connect(p[0], wg, ip(10, 9, 0, 1), A).unwrap();
    });
    rig.inject(
        0,
        &[eth(
            MAC0,
            HOST_A,
            0x86dd,
            &ipv6("fd00:1::2", "fd00:99::9", 64, &[0; 8]),
        )],
    );
    assert!(rig.sent(0).is_empty() && rig.sent(1).is_empty());
    assert_eq!(rig.error("wg4-encrypt", "no-peer"), 1);
    assert_eq!(rig.error("wg4-encrypt", "not-ip"), 0);
    rig.assert_no_leaks();
}
