//! Byte-exact input and expected output for every node, each drop reason, ARP, ping, ECMP,
//! cross-connects, VLANs, and full rings.

mod common;

use common::*;
use graph_nodes::{names, Forwarding, IfIndex, Path};

/// eth0 10.0.1.1/24 (host A 10.0.1.2), eth1 10.0.2.1/24 (host B 10.0.2.2), neighbours known.
fn routed() -> Rig {
    Rig::new(&[MAC0, MAC1], |f, p| {
        f.add_address(p[0], ip(10, 0, 1, 1), 24).unwrap();
        f.add_address(p[1], ip(10, 0, 2, 1), 24).unwrap();
        f.add_neighbor(p[0], ip(10, 0, 1, 2), HOST_A).unwrap();
        f.add_neighbor(p[1], ip(10, 0, 2, 2), HOST_B).unwrap();
    })
}

fn a_to_b(ttl: u8) -> Vec<u8> {
    eth(
        MAC0,
        HOST_A,
        0x0800,
        &ipv4(
            ip(10, 0, 1, 2),
            ip(10, 0, 2, 2),
            17,
            ttl,
            &udp(1000, 2000, b"hello, quiver"),
        ),
    )
}

/// eth0 10.0.1.1/24 and eth1 10.0.2.1/24, host B (10.0.2.2) known on eth1, host A not.
fn b_known(f: &mut Forwarding, p: &[IfIndex]) {
    f.add_address(p[0], ip(10, 0, 1, 1), 24).unwrap();
    f.add_address(p[1], ip(10, 0, 2, 1), 24).unwrap();
    f.add_neighbor(p[1], ip(10, 0, 2, 2), HOST_B).unwrap();
}

/// One path: `next_hop` on `interface`.
fn via(next_hop: u32, interface: IfIndex) -> [Path; 1] {
    [Path {
        next_hop,
        interface,
    }]
}

/// A broadcast ARP request from `mac` (`from`) for `target`.
fn arp_request(mac: [u8; 6], from: u32, target: u32) -> Vec<u8> {
    eth([0xff; 6], mac, 0x0806, &arp(1, mac, from, [0; 6], target))
}

/// An ARP reply from `mac` (`from`) to `to_mac` (`to`).
fn arp_reply(mac: [u8; 6], from: u32, to_mac: [u8; 6], to: u32) -> Vec<u8> {
    eth(to_mac, mac, 0x0806, &arp(2, mac, from, to_mac, to))
}

/// An IPv4 frame (protocol `proto`, TTL 64) from host A (10.0.1.2) to eth0's 10.0.1.1.
fn a_to_us(proto: u8, payload: &[u8]) -> Vec<u8> {
    eth(
        MAC0,
        HOST_A,
        0x0800,
        &ipv4(ip(10, 0, 1, 2), ip(10, 0, 1, 1), proto, 64, payload),
    )
}

#[test]
fn a_routed_packet_leaves_rewritten_byte_for_byte() {
    let mut r = routed();
    let mut input = a_to_b(64);
    input.extend_from_slice(&[0xee; 8]); // Ethernet padding, trimmed by ip4-input
    r.inject(0, &[input]);
    let mut want_ip = ipv4(
        ip(10, 0, 1, 2),
        ip(10, 0, 2, 2),
        17,
        63,
        &udp(1000, 2000, b"hello, quiver"),
    );
    fix_ip_checksum(&mut want_ip);
    assert_eq!(r.sent(1), vec![eth(HOST_B, MAC1, 0x0800, &want_ip)]);
    assert!(r.sent(0).is_empty());
    assert_eq!(r.total_errors(), 0);
    let rt = r.graph.handle().runtime();
    for node in [
        names::ETHERNET_INPUT,
        names::IP4_INPUT,
        names::IP4_LOOKUP,
        names::IP4_REWRITE,
        names::INTERFACE_OUTPUT,
    ] {
        assert_eq!(rt.node(node).unwrap().packets, 1, "{node}");
    }
    r.assert_no_leaks();
}

#[test]
fn ethernet_input_drops_name_their_reason() {
    let mut r = routed();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (vec![0u8; 13], "runt"),
        (eth(MAC0, HOST_A, 0x88cc, &[0; 40]), "unknown-ethertype"),
        (
            eth([0x02, 9, 9, 9, 9, 9], HOST_A, 0x0800, &[0; 40]),
            "not-for-us",
        ),
        (eth_vlan(MAC0, HOST_A, 99, 0x0800, &[0; 40]), "unknown-vlan"),
        (eth(MAC0, HOST_A, 0x8100, &[0; 2]), "runt"),
    ];
    for (frame, reason) in &cases {
        let before = r.error(names::ETHERNET_INPUT, reason);
        r.inject(0, std::slice::from_ref(frame));
        assert_eq!(
            r.error(names::ETHERNET_INPUT, reason),
            before + 1,
            "{reason}"
        );
    }
    assert!(r.sent(1).is_empty() && r.sent(0).is_empty());
    r.assert_no_leaks();
}

#[test]
fn ip4_input_drops_every_bad_header_with_its_reason() {
    let mut r = routed();
    let good = ipv4(
        ip(10, 0, 1, 2),
        ip(10, 0, 2, 2),
        17,
        64,
        &udp(1, 2, &[0; 10]),
    );
    let mut cases: Vec<(Vec<u8>, &str)> = Vec::new();
    let mut bad = |name: &'static str, f: &dyn Fn(&mut Vec<u8>), fix: bool| {
        let mut p = good.clone();
        f(&mut p);
        if fix {
            fix_ip_checksum(&mut p);
        }
        cases.push((p, name));
    };
    bad("too-short", &|p| p.truncate(19), false);
    bad("bad-version", &|p| p[0] = 0x65, true);
    bad("bad-ihl", &|p| p[0] = 0x44, true);
    bad("options", &|p| p[0] = 0x46, true);
    bad("bad-checksum", &|p| p[10] ^= 0xff, false);
    bad(
        "bad-length",
        &|p| p[2..4].copy_from_slice(&19u16.to_be_bytes()),
        true,
    );
    bad(
        "truncated",
        &|p| p[2..4].copy_from_slice(&200u16.to_be_bytes()),
        true,
    );
    bad(
        "fragment-offset-1",
        &|p| p[6..8].copy_from_slice(&1u16.to_be_bytes()),
        true,
    );
    bad(
        "bad-source",
        &|p| p[12..16].copy_from_slice(&[0, 0, 0, 0]),
        true,
    );
    bad(
        "bad-source",
        &|p| p[12..16].copy_from_slice(&[255; 4]),
        true,
    );
    bad(
        "bad-source",
        &|p| p[12..16].copy_from_slice(&[224, 0, 0, 1]),
        true,
    );
    for (p, reason) in cases {
        let before = r.error(names::IP4_INPUT, reason);
        r.inject(0, &[eth(MAC0, HOST_A, 0x0800, &p)]);
        assert_eq!(r.error(names::IP4_INPUT, reason), before + 1, "{reason}");
    }
    assert!(r.sent(1).is_empty(), "nothing bad was forwarded");
    // Fragments other than offset 1 pass.
    let mut frag = good.clone();
    frag[6..8].copy_from_slice(&185u16.to_be_bytes());
    fix_ip_checksum(&mut frag);
    r.inject(0, &[eth(MAC0, HOST_A, 0x0800, &frag)]);
    assert_eq!(r.sent(1).len(), 1);
    r.assert_no_leaks();
}

#[test]
fn ttl_mtu_and_missing_routes_are_counted_drops() {
    let mut r = Rig::new(&[MAC0, MAC1], |f, p| {
        b_known(f, p);
        f.add_drop_route(ip(203, 0, 113, 0), 24).unwrap();
    });
    r.inject(0, &[a_to_b(1)]);
    assert_eq!(r.error(names::IP4_REWRITE, "ttl-expired"), 1);
    r.inject(0, &[a_to_b(0)]);
    assert_eq!(r.error(names::IP4_REWRITE, "ttl-expired"), 2);
    let big = vec![0u8; 1600];
    let mut df = ipv4(ip(10, 0, 1, 2), ip(10, 0, 2, 2), 17, 64, &big);
    df[6] = 0x40;
    fix_ip_checksum(&mut df);
    r.inject(0, &[eth(MAC0, HOST_A, 0x0800, &df)]);
    assert_eq!(r.error(names::IP4_REWRITE, "fragmentation-needed"), 1);
    r.inject(
        0,
        &[eth(
            MAC0,
            HOST_A,
            0x0800,
            &ipv4(ip(10, 0, 1, 2), ip(10, 0, 2, 2), 17, 64, &big),
        )],
    );
    assert_eq!(r.error(names::IP4_REWRITE, "mtu-exceeded"), 1);
    r.inject(0, &[from_a(ip(192, 0, 2, 1))]);
    assert_eq!(r.error(names::IP4_LOOKUP, "no-route"), 1);
    r.inject(0, &[from_a(ip(203, 0, 113, 9))]);
    assert_eq!(r.error(names::IP4_LOOKUP, "blackhole"), 1);
    assert!(r.sent(1).is_empty());
    r.assert_no_leaks();
}

#[test]
fn arp_requests_for_our_address_are_answered_and_the_asker_learned() {
    let mut r = Rig::new(&[MAC0, MAC1], b_known);
    r.inject(0, &[arp_request(HOST_A, ip(10, 0, 1, 2), ip(10, 0, 1, 1))]);
    let reply = arp_reply(MAC0, ip(10, 0, 1, 1), HOST_A, ip(10, 0, 1, 2));
    assert_eq!(r.sent(0), vec![reply]);
    assert_eq!(r.error(names::ARP_INPUT, "requests-answered"), 1);
    // Not for us: dropped and counted.
    r.inject(0, &[arp_request(HOST_A, ip(10, 0, 1, 2), ip(10, 0, 1, 99))]);
    assert_eq!(r.error(names::ARP_INPUT, "not-for-us"), 1);
    r.inject(0, &[eth([0xff; 6], HOST_A, 0x0806, &[0, 1, 0x08])]);
    assert_eq!(r.error(names::ARP_INPUT, "malformed"), 1);
    // The asker is learned once the control side takes the events: B can now reach A.
    assert!(r.fwd.take_events() >= 1);
    r.commit();
    let b_to_a = eth(
        MAC1,
        HOST_B,
        0x0800,
        &ipv4(
            ip(10, 0, 2, 2),
            ip(10, 0, 1, 2),
            1,
            64,
            &icmp_echo(8, 1, 1, b"x"),
        ),
    );
    r.inject(1, &[b_to_a]);
    let out = r.sent(0);
    assert_eq!(out.len(), 1);
    assert_eq!(&out[0][..12], &[HOST_A, MAC0].concat()[..]);
    r.assert_no_leaks();
}

#[test]
fn an_unresolved_next_hop_is_asked_for_once_and_resolved_by_the_reply() {
    let mut r = Rig::new(&[MAC0, MAC1], |f, p| {
        f.add_address(p[0], ip(10, 0, 1, 1), 24).unwrap();
        f.add_address(p[1], ip(10, 0, 2, 1), 24).unwrap();
    });
    // Two packets to an unknown host on eth1's subnet: one ARP request (throttled), two drops.
    r.inject(0, &[a_to_b(64), a_to_b(64)]);
    let request = arp_request(MAC1, ip(10, 0, 2, 1), ip(10, 0, 2, 2));
    assert_eq!(r.sent(1), vec![request]);
    assert_eq!(r.error(names::IP4_ARP, "resolving"), 2);
    assert_eq!(r.error(names::IP4_ARP, "requests-sent"), 1);
    // The reply teaches us B's MAC; the next packet goes through.
    r.inject(
        1,
        &[arp_reply(HOST_B, ip(10, 0, 2, 2), MAC1, ip(10, 0, 2, 1))],
    );
    assert_eq!(r.error(names::ARP_INPUT, "replies"), 1);
    assert_eq!(r.fwd.take_events(), 1);
    r.commit();
    r.inject(0, &[a_to_b(64)]);
    let out = r.sent(1);
    assert_eq!(out.len(), 1);
    assert_eq!(&out[0][..6], &HOST_B);
    // A next hop reached through a static route is resolved the same way.
    let eth1 = r.ports[1].index;
    r.fwd
        .add_route(ip(198, 51, 100, 0), 24, &via(ip(10, 0, 2, 3), eth1))
        .unwrap();
    r.commit();
    r.inject(0, &[from_a(ip(198, 51, 100, 7))]);
    let req = arp_request(MAC1, ip(10, 0, 2, 1), ip(10, 0, 2, 3));
    assert_eq!(r.sent(1), vec![req]);
    r.assert_no_leaks();
}

#[test]
fn quiver_answers_ping() {
    let mut r = routed();
    let data = b"abcdefghijklmnopqrstuvwabcdefghi";
    r.inject(0, &[a_to_us(1, &icmp_echo(8, 0x77, 3, data))]);
    let mut reply_ip = ipv4(
        ip(10, 0, 1, 1),
        ip(10, 0, 1, 2),
        1,
        64,
        &icmp_echo(0, 0x77, 3, data),
    );
    reply_ip[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
    fix_ip_checksum(&mut reply_ip);
    assert_eq!(r.sent(0), vec![eth(HOST_A, MAC0, 0x0800, &reply_ip)]);
    assert_eq!(r.error(names::IP4_LOCAL, "echo-replies"), 1);
    // Other traffic for us is counted.
    r.inject(0, &[a_to_us(17, &udp(5, 53, b"q"))]);
    assert_eq!(r.error(names::IP4_LOCAL, "unknown-protocol"), 1);
    let mut bad = icmp_echo(8, 1, 1, b"zz");
    bad[2] ^= 1;
    r.inject(0, &[a_to_us(1, &bad)]);
    assert_eq!(r.error(names::IP4_LOCAL, "bad-icmp"), 1);
    r.inject(0, &[a_to_us(1, &icmp_echo(13, 1, 1, b""))]);
    assert_eq!(r.error(names::IP4_LOCAL, "icmp-not-echo"), 1);
    r.assert_no_leaks();
}

#[test]
fn l2_cross_connect_passes_frames_untouched_both_ways() {
    let mut r = Rig::new(&[MAC0, MAC1, MAC2], |f, p| {
        f.cross_connect(p[0], p[1]).unwrap();
    });
    let frames: Vec<Vec<u8>> = (0..300u16)
        .map(|i| {
            eth(
                [0x02, 7, 7, 7, 7, 7],
                HOST_A,
                0x88b5,
                &i.to_be_bytes().repeat(30),
            )
        })
        .collect();
    r.inject(0, &frames);
    assert_eq!(r.sent(1), frames, "every frame, in order, untouched");
    r.inject(1, &frames[..5]);
    assert_eq!(r.sent(0), frames[..5].to_vec());
    let (pkts, bytes) = r.xconnect.get(r.ports[0].index);
    assert_eq!(
        (pkts, bytes),
        (300, frames.iter().map(|f| f.len() as u64).sum())
    );
    // eth2 is not cross-connected: it stays L3, and with no routes at all IP is dropped.
    r.inject(
        2,
        &[eth(
            MAC2,
            HOST_A,
            0x0800,
            &ipv4(ip(10, 0, 1, 2), ip(10, 0, 2, 2), 17, 64, &[0; 8]),
        )],
    );
    assert_eq!(r.error(names::IP4_LOOKUP, "no-route"), 1);
    assert_eq!(
        r.fwd.cross_connect_of(r.ports[0].index),
        Some(r.ports[1].index)
    );
    r.fwd.disconnect(r.ports[0].index);
    assert_eq!(r.fwd.cross_connect_of(r.ports[0].index), None);
    assert_eq!(r.fwd.cross_connect_of(r.ports[1].index), None, "both ways");
    r.commit();
    r.inject(0, &frames[..1]);
    assert_eq!(
        r.error(names::ETHERNET_INPUT, "not-for-us"),
        1,
        "back in L3 mode"
    );
    r.assert_no_leaks();
}

#[test]
fn vlan_sub_interfaces_route_tagged_frames() {
    let mut r = Rig::new(&[MAC0, MAC1], |f, p| {
        let v100 = f.add_vlan(p[0], 100, "eth0.100").unwrap();
        let v200 = f.add_vlan(p[1], 200, "eth1.200").unwrap();
        f.add_address(v100, ip(10, 1, 0, 1), 24).unwrap();
        f.add_address(v200, ip(10, 2, 0, 1), 24).unwrap();
        f.add_neighbor(v200, ip(10, 2, 0, 2), HOST_B).unwrap();
    });
    let pkt = ipv4(
        ip(10, 1, 0, 2),
        ip(10, 2, 0, 2),
        17,
        9,
        &udp(1, 2, b"tagged"),
    );
    r.inject(0, &[eth_vlan(MAC0, HOST_A, 100, 0x0800, &pkt)]);
    let mut want = ipv4(
        ip(10, 1, 0, 2),
        ip(10, 2, 0, 2),
        17,
        8,
        &udp(1, 2, b"tagged"),
    );
    fix_ip_checksum(&mut want);
    assert_eq!(r.sent(1), vec![eth_vlan(HOST_B, MAC1, 200, 0x0800, &want)]);
    r.assert_no_leaks();
}

#[test]
fn ecmp_spreads_flows_and_keeps_each_flow_on_one_path() {
    let mut r = Rig::new(&[MAC0, MAC1], |f, p| {
        f.add_address(p[0], ip(10, 0, 1, 1), 24).unwrap();
        f.add_address(p[1], ip(10, 0, 2, 1), 24).unwrap();
        f.add_neighbor(p[1], ip(10, 0, 2, 2), HOST_A).unwrap();
        f.add_neighbor(p[1], ip(10, 0, 2, 3), HOST_B).unwrap();
        let paths = [
            Path {
                next_hop: ip(10, 0, 2, 2),
                interface: p[1],
            },
            Path {
                next_hop: ip(10, 0, 2, 3),
                interface: p[1],
            },
        ];
        f.add_route(ip(198, 51, 100, 0), 24, &paths).unwrap();
    });
    let flow = |port: u16| {
        eth(
            MAC0,
            HOST_A,
            0x0800,
            &ipv4(
                ip(10, 0, 1, 9),
                ip(198, 51, 100, 1),
                17,
                64,
                &udp(port, 80, b""),
            ),
        )
    };
    let frames: Vec<Vec<u8>> = (0..200).map(|i| flow(1000 + i)).collect();
    r.inject(0, &frames);
    r.inject(0, &frames);
    let out = r.sent(1);
    assert_eq!(out.len(), 400);
    let via_a = out.iter().filter(|f| f[..6] == HOST_A).count();
    assert!(
        (50..=150).contains(&(via_a / 2)),
        "both paths used: {via_a} of 400 via A"
    );
    for i in 0..200 {
        assert_eq!(
            out[i][..6],
            out[i + 200][..6],
            "flow {i} took one path both times"
        );
    }
    r.assert_no_leaks();
}

#[test]
fn a_full_transmit_ring_is_counted_and_frees_the_rest() {
    let mut r = Rig::with_tx(&[MAC0, MAC1], b_known, |i, q| {
        Box::new(if i == 1 { q.accepting(3) } else { q })
    });
    r.inject(0, &vec![a_to_b(64); 10]);
    assert_eq!(r.sent(1).len(), 3);
    assert_eq!(r.error(names::INTERFACE_OUTPUT, "tx-full"), 7);
    r.assert_no_leaks();
}

#[test]
fn removing_routes_and_interfaces_leaves_no_objects_behind() {
    let mut r = routed();
    let (adjs, lbs) = r.fwd.object_counts();
    let eth1 = r.ports[1].index;
    r.fwd
        .add_route(ip(198, 51, 100, 0), 24, &via(ip(10, 0, 2, 2), eth1))
        .unwrap();
    r.fwd
        .add_route(ip(198, 51, 101, 128), 25, &via(ip(10, 0, 2, 9), eth1))
        .unwrap();
    r.commit();
    assert!(r.fwd.route_count() > 6);
    assert!(r.fwd.remove_route(ip(198, 51, 100, 0), 24));
    assert!(r.fwd.remove_route(ip(198, 51, 101, 128), 25));
    assert!(!r.fwd.remove_route(ip(198, 51, 101, 128), 25));
    r.commit();
    assert_eq!(r.fwd.object_counts(), (adjs, lbs));
    r.fwd.remove_interface(eth1).unwrap();
    r.commit();
    r.inject(0, &[a_to_b(64)]);
    assert_eq!(
        r.error(names::IP4_LOOKUP, "no-route"),
        1,
        "eth1's subnet is gone"
    );
    r.assert_no_leaks();
}

/// Records what each commit publishes, and checks it at the moment of publication: every route
/// still in the FIB must resolve, in the new snapshot, to the adjacency it had (the FIB is
/// written only after the publish, so a slot emptied early would misroute packets).
struct Spy {
    checks: std::sync::Mutex<Vec<(u32, Option<u32>)>>,
}

impl graph_nodes::Publisher for Spy {
    fn publish(&self, state: graph_nodes::ForwardingState) {
        for (dst, want) in self.checks.lock().unwrap().iter() {
            let lb = state
                .fib
                .lookup(*dst)
                .expect("route still in the FIB during publish");
            let adj = state.load_balances[lb as usize].buckets[0];
            let got = state.adjacencies.get(adj.as_usize()).map(|a| a.next_hop);
            assert_eq!(
                got, *want,
                "in the window before the FIB write, {dst:#x} resolves as before"
            );
        }
    }
    fn synchronize(&self) {}
}

#[test]
fn a_deleted_or_replaced_route_resolves_as_before_until_the_fib_is_written() {
    let mut r = routed();
    let eth1 = r.ports[1].index;
    r.fwd
        .add_route(ip(198, 51, 100, 0), 24, &via(ip(10, 0, 2, 2), eth1))
        .unwrap();
    r.fwd
        .add_route(ip(203, 0, 113, 0), 24, &via(ip(10, 0, 2, 3), eth1))
        .unwrap();
    r.commit();
    let spy = Spy {
        checks: std::sync::Mutex::new(vec![
            (ip(198, 51, 100, 1), Some(ip(10, 0, 2, 2))),
            (ip(203, 0, 113, 1), Some(ip(10, 0, 2, 3))),
        ]),
    };
    // Delete one route and replace the other: while publishing, both still resolve as before.
    assert!(r.fwd.remove_route(ip(198, 51, 100, 0), 24));
    r.fwd
        .add_route(ip(203, 0, 113, 0), 24, &via(ip(10, 0, 2, 9), eth1))
        .unwrap();
    r.fwd.commit(&spy).unwrap();
    r.commit();
    r.inject(0, &[from_a(ip(198, 51, 100, 1))]);
    assert_eq!(
        r.error(names::IP4_LOOKUP, "no-route"),
        1,
        "deleted after the commit"
    );
    r.assert_no_leaks();
}

#[test]
fn removing_an_interface_takes_its_static_routes_so_a_new_one_does_not_inherit_them() {
    let mut r = routed();
    let eth1 = r.ports[1].index;
    r.fwd
        .add_route(ip(198, 51, 100, 0), 24, &via(ip(10, 0, 2, 2), eth1))
        .unwrap();
    r.commit();
    r.fwd.remove_interface(eth1).unwrap();
    r.commit();
    let reused = r.fwd.add_port("new", MAC2, 1500).unwrap();
    assert_eq!(reused, eth1, "the index is reused");
    r.commit();
    assert!(r
        .fwd
        .routes()
        .iter()
        .all(|x| x.prefix != ip(198, 51, 100, 0)));
    r.inject(0, &[from_a(ip(198, 51, 100, 1))]);
    assert_eq!(r.error(names::IP4_LOOKUP, "no-route"), 1);
    assert!(r.sent(1).is_empty());
    r.assert_no_leaks();
}

#[test]
fn a_route_the_fib_cannot_hold_is_withdrawn_and_reported() {
    let mut r = Rig::new(&[MAC0, MAC1], |f, p| {
        f.add_address(p[1], ip(10, 0, 2, 1), 24).unwrap();
        f.add_neighbor(p[1], ip(10, 0, 2, 2), HOST_B).unwrap();
    });
    let eth1 = r.ports[1].index;
    let via = via(ip(10, 0, 2, 2), eth1);
    // The rig's FIB has 1024 tbl8 groups and 10.0.2.0/24's host and local routes use one:
    // 1023 of 1025 host routes in distinct /24s fit.
    for k in 0..1025u32 {
        r.fwd.add_route(0x6400_0000 | k << 8 | 1, 32, &via).unwrap();
    }
    let err = r.fwd.commit(&r.published).unwrap_err();
    assert!(err.to_string().contains("no free tbl8 group"), "{err}");
    let held = r
        .fwd
        .routes()
        .iter()
        .filter(|x| x.len == 32 && x.prefix >> 24 == 100)
        .count();
    assert_eq!(
        held, 1023,
        "exactly the routes that did not fit are withdrawn"
    );
    r.commit();
    let frames: Vec<Vec<u8>> = (0..1025u32)
        .map(|k| from_a(0x6400_0000 | k << 8 | 1))
        .collect();
    r.inject(0, &frames);
    assert_eq!(r.sent(1).len(), 1023);
    assert_eq!(r.error(names::IP4_LOOKUP, "no-route"), 2);
    r.assert_no_leaks();
}
