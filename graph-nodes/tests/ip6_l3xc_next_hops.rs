//! An L3 cross-connect's next hops of each family (`L3Peer`): an IPv6-only peer gets IPv6 by
//! its own neighbour (configured, or found by neighbour discovery: a solicitation, then the
//! packets once the advertisement is learned) and IPv4 dropped by name; a dual-stack peer gets
//! each family by its own next hop; what cannot be a next hop is refused and leaves the
//! cross-connect there was. Expected frames are built here byte for byte.

mod common;

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Instant;

use common::*;
use graph_nodes::{ForwardingError, L3Peer};

const HOST_C: [u8; 6] = [0x02, 0xcc, 0, 0, 0, 0x0c];

fn a(s: &str) -> [u8; 16] {
    s.parse::<Ipv6Addr>().unwrap().octets()
}

fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

/// The EUI-64 link-local address of `mac`, written out by hand (RFC 4291 appendix A).
fn ll(mac: [u8; 6]) -> [u8; 16] {
    let mut x = [0u8; 16];
    x[..2].copy_from_slice(&[0xfe, 0x80]);
    x[8..].copy_from_slice(&[
        mac[0] ^ 2,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ]);
    x
}

/// ICMPv6 `msg` in IPv6 (hop limit 255), its checksum from an independent sum.
fn icmp6(src: [u8; 16], dst: [u8; 16], msg: &[u8]) -> Vec<u8> {
    let mut over = Vec::new();
    over.extend_from_slice(&src);
    over.extend_from_slice(&dst);
    over.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    over.extend_from_slice(&[0, 0, 0, 58]);
    over.extend_from_slice(msg);
    let mut m = msg.to_vec();
    m[2..4].copy_from_slice(&inet_checksum(&over).to_be_bytes());
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&(m.len() as u16).to_be_bytes());
    p.extend_from_slice(&[58, 255]);
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    p.extend_from_slice(&m);
    p
}

/// A neighbour solicitation (135) or advertisement (136) for `target`, `flags`, with a
/// link-layer option of kind `opt` carrying `mac`.
fn nd_msg(t: u8, flags: u8, target: [u8; 16], opt: u8, mac: [u8; 6]) -> Vec<u8> {
    let mut m = vec![t, 0, 0, 0, flags, 0, 0, 0];
    m.extend_from_slice(&target);
    m.extend_from_slice(&[opt, 1]);
    m.extend_from_slice(&mac);
    m
}

/// eth0 (fd00:1::fe/64) and eth1 (fd00:2::fe/64) L3 cross-connected toward `to_b` out of eth1
/// and `to_a` out of eth0; with `neighbours`, fd00:1::2 is host A and fd00:2::2 host B.
fn rig(to_b: L3Peer, to_a: L3Peer, neighbours: bool) -> Rig {
    Rig::new(&[MAC0, MAC1], |f, p| {
        f.add_address6(p[0], u128::from(v6("fd00:1::fe")), 64)
            .unwrap();
        f.add_address6(p[1], u128::from(v6("fd00:2::fe")), 64)
            .unwrap();
        if neighbours {
            f.add_neighbor6(p[0], u128::from(v6("fd00:1::2")), HOST_A)
                .unwrap();
            f.add_neighbor6(p[1], u128::from(v6("fd00:2::2")), HOST_B)
                .unwrap();
        }
        f.l3_cross_connect(p[0], p[1], to_b, to_a).unwrap();
    })
}

fn ipv6_only() -> (L3Peer, L3Peer) {
    (v6("fd00:2::2").into(), v6("fd00:1::2").into())
}

#[test]
fn an_ipv6_only_cross_connect_sends_ipv6_to_its_neighbours_and_drops_ipv4_by_name() {
    let (to_b, to_a) = ipv6_only();
    let mut rig = rig(to_b, to_a, true);
    // Destinations the FIB knows nothing of: the cross-connect, not a lookup, decides.
    let out = ipv6("2001:db8::1", "2001:db8::2", 64, &[1; 30]);
    rig.inject(0, &[eth(MAC0, HOST_A, 0x86dd, &out)]);
    let want = ipv6("2001:db8::1", "2001:db8::2", 63, &[1; 30]);
    assert_eq!(rig.sent(1), vec![eth(HOST_B, MAC1, 0x86dd, &want)]);
    let back = ipv6("2001:db8::2", "2001:db8::1", 9, &[2; 12]);
    rig.inject(1, &[eth(MAC1, HOST_B, 0x86dd, &back)]);
    let want = ipv6("2001:db8::2", "2001:db8::1", 8, &[2; 12]);
    assert_eq!(rig.sent(0), vec![eth(HOST_A, MAC0, 0x86dd, &want)]);
    assert_eq!(rig.total_errors(), 0);

    // IPv4 has no next hop either way: dropped by name, never sent.
    let v4 = ipv4(ip(172, 16, 1, 1), ip(172, 16, 1, 2), 17, 64, &[0; 8]);
    rig.inject(0, &[eth(MAC0, HOST_A, 0x0800, &v4)]);
    rig.inject(1, &[eth(MAC1, HOST_B, 0x0800, &v4)]);
    assert!(rig.sent(0).is_empty() && rig.sent(1).is_empty());
    assert_eq!(rig.error("ip4-l3xc", "no-next-hop"), 2);
    let eth0 = rig.fwd.interface_by_name("eth0").unwrap().index;
    let eth1 = rig.fwd.interface_by_name("eth1").unwrap().index;
    assert_eq!(rig.fwd.l3_cross_connect_of(eth0), Some((eth1, to_b)));
    assert_eq!(rig.fwd.l3_cross_connect_of(eth1), Some((eth0, to_a)));
    rig.assert_no_leaks();
}

#[test]
fn an_unresolved_ipv6_next_hop_is_solicited_and_its_packets_go_once_it_is_learned() {
    let (to_b, to_a) = ipv6_only();
    let mut rig = rig(to_b, to_a, false);
    let out = ipv6("2001:db8::1", "2001:db8::2", 64, &[3; 16]);
    rig.inject(0, &[eth(MAC0, HOST_A, 0x86dd, &out)]);
    // A multicast solicitation for fd00:2::2 from eth1's link-local address, not ARP.
    let ns = icmp6(
        ll(MAC1),
        a("ff02::1:ff00:2"),
        &nd_msg(135, 0, a("fd00:2::2"), 1, MAC1),
    );
    assert_eq!(
        rig.sent(1),
        vec![eth([0x33, 0x33, 0xff, 0, 0, 2], MAC1, 0x86dd, &ns)]
    );
    assert_eq!(rig.error("ip6-nd-resolve", "resolving"), 1);
    assert_eq!(rig.error("ip4-arp", "resolving"), 0);
    // The next hop answers (solicited, override); learned and committed, the packets go.
    let na = icmp6(
        a("fd00:2::2"),
        ll(MAC1),
        &nd_msg(136, 0x60, a("fd00:2::2"), 2, HOST_C),
    );
    rig.inject(1, &[eth(MAC1, HOST_C, 0x86dd, &na)]);
    assert_eq!(rig.fwd.take_events(), 1);
    rig.commit();
    assert!(rig
        .fwd
        .neighbors6(Instant::now())
        .iter()
        .any(|n| n.ip == u128::from(v6("fd00:2::2")) && n.mac == HOST_C));
    rig.inject(0, &[eth(MAC0, HOST_A, 0x86dd, &out)]);
    let want = ipv6("2001:db8::1", "2001:db8::2", 63, &[3; 16]);
    assert_eq!(rig.sent(1), vec![eth(HOST_C, MAC1, 0x86dd, &want)]);
    rig.assert_no_leaks();
}

#[test]
fn a_dual_stack_peer_gets_each_family_by_its_own_next_hop() {
    let to_b = L3Peer {
        v4: Some(Ipv4Addr::new(10, 0, 2, 2)),
        v6: Some(v6("fd00:2::2")),
    };
    let to_a = L3Peer {
        v4: Some(Ipv4Addr::new(10, 0, 1, 2)),
        v6: Some(v6("fd00:1::2")),
    };
    let mut rig = Rig::new(&[MAC0, MAC1], |f, p| {
        // B's IPv4 next hop is host B, its IPv6 one host C: two stations, told apart.
        f.add_neighbor(p[1], ip(10, 0, 2, 2), HOST_B).unwrap();
        f.add_neighbor6(p[1], u128::from(v6("fd00:2::2")), HOST_C)
            .unwrap();
        f.add_neighbor(p[0], ip(10, 0, 1, 2), HOST_A).unwrap();
        f.l3_cross_connect(p[0], p[1], to_b, to_a).unwrap();
    });
    let v4 = ipv4(ip(172, 16, 1, 1), ip(172, 16, 1, 2), 17, 64, &[4; 8]);
    let v6p = ipv6("2001:db8::1", "2001:db8::2", 64, &[6; 8]);
    rig.inject(
        0,
        &[
            eth(MAC0, HOST_A, 0x0800, &v4),
            eth(MAC0, HOST_A, 0x86dd, &v6p),
        ],
    );
    let mut want4 = v4.clone();
    want4[8] = 63;
    fix_ip_checksum(&mut want4);
    let want6 = ipv6("2001:db8::1", "2001:db8::2", 63, &[6; 8]);
    let mut sent = rig.sent(1);
    sent.sort();
    let mut want = vec![
        eth(HOST_B, MAC1, 0x0800, &want4),
        eth(HOST_C, MAC1, 0x86dd, &want6),
    ];
    want.sort();
    assert_eq!(sent, want);
    // Back toward A: IPv4 by its configured neighbour; IPv6's next hop is unresolved, and
    // eth0 has no IPv6 address to solicit it from: counted, not sent to A's IPv4 MAC.
    rig.inject(1, &[eth(MAC1, HOST_B, 0x86dd, &v6p)]);
    assert!(rig.sent(0).is_empty());
    assert_eq!(rig.error("ip6-nd-resolve", "no-source-address"), 1);
    rig.assert_no_leaks();
}

#[test]
fn what_cannot_be_a_next_hop_is_refused_and_the_cross_connect_there_was_stays() {
    let (to_b, to_a) = ipv6_only();
    let mut rig = rig(to_b, to_a, true);
    let eth0 = rig.fwd.interface_by_name("eth0").unwrap().index;
    let eth1 = rig.fwd.interface_by_name("eth1").unwrap().index;
    let bad: [(L3Peer, &str); 6] = [
        (L3Peer::NONE, "needs a next hop"),
        (Ipv4Addr::UNSPECIFIED.into(), "not a unicast IPv4"),
        (Ipv4Addr::new(224, 0, 0, 1).into(), "not a unicast IPv4"),
        (Ipv6Addr::UNSPECIFIED.into(), "not a unicast IPv6"),
        (v6("ff02::1").into(), "not a unicast IPv6"),
        (v6("fe80::1").into(), "link-local"),
    ];
    for (peer, why) in bad {
        match rig.fwd.l3_cross_connect(eth0, eth1, peer, to_a) {
            Err(ForwardingError::BadAddress(m)) => assert!(m.contains(why), "{peer}: {m}"),
            other => panic!("{peer}: {other:?}"),
        }
        assert_eq!(rig.fwd.l3_cross_connect_of(eth0), Some((eth1, to_b)));
    }
    rig.commit();
    let out = ipv6("2001:db8::1", "2001:db8::2", 64, &[1; 8]);
    rig.inject(0, &[eth(MAC0, HOST_A, 0x86dd, &out)]);
    assert_eq!(rig.sent(1).len(), 1, "still cross-connected");
    rig.assert_no_leaks();
}

#[test]
fn a_wireguard_side_needs_no_next_hop_and_takes_either_family() {
    // The tunnel's peer for the packet's destination is its next hop: none given is not
    // refused; both families reach wg4-encrypt (which has no peer for them here).
    let mut rig = Rig::new(&[MAC0, MAC1], |f, p| {
        let (wg, _) = f
            .add_wireguard_tunnel(
                "wg0",
                Ipv4Addr::new(192, 0, 2, 1).into(),
                51820,
                vec![],
                1500,
            )
            .unwrap();
        f.add_neighbor6(p[0], u128::from(v6("fd00:1::2")), HOST_A)
            .unwrap();
        f.l3_cross_connect(p[0], wg, L3Peer::NONE, v6("fd00:1::2"))
            .unwrap();
    });
    rig.inject(
        0,
        &[
            eth(
                MAC0,
                HOST_A,
                0x0800,
                &ipv4(ip(172, 16, 1, 1), ip(172, 16, 1, 2), 17, 64, &[0; 8]),
            ),
            eth(
                MAC0,
                HOST_A,
                0x86dd,
                &ipv6("2001:db8::1", "2001:db8::2", 64, &[0; 8]),
            ),
        ],
    );
    assert!(rig.sent(0).is_empty() && rig.sent(1).is_empty());
    assert_eq!(rig.error("wg4-encrypt", "no-peer"), 2);
    assert_eq!(rig.error("ip4-l3xc", "no-next-hop"), 0);
    rig.assert_no_leaks();
}
