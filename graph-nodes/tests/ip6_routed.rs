//! IPv6 routing on a hand-driven graph: `ip6-input` → `ip6-lookup` → `ip6-rewrite` →
//! `interface-output`, neighbour discovery both ways (`ip6-nd`, `ip6-nd-resolve`,
//! `ip6-nd-probe`), echo (`ip6-local`), ICMPv6 errors (`ip6-icmp-error`), and bad input counted
//! by name. Expected frames are built here, their checksums by an independent sum.

mod common;

use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

use common::*;
use graph_nodes::forwarding::Path6;

const HOST_C: [u8; 6] = [0x02, 0xcc, 0, 0, 0, 0x0c];

fn a(s: &str) -> [u8; 16] {
    s.parse::<Ipv6Addr>().unwrap().octets()
}

fn w(s: &str) -> u128 {
    u128::from_be_bytes(a(s))
}

/// The EUI-64 link-local address of `mac`, written out by hand (RFC 4291 appendix A).
fn ll(mac: [u8; 6]) -> [u8; 16] {
    [
        0xfe,
        0x80,
        0,
        0,
        0,
        0,
        0,
        0,
        mac[0] ^ 2,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ]
}

/// An IPv6 packet of `next` with `payload`.
fn ip6(src: [u8; 16], dst: [u8; 16], hop: u8, next: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    p.extend_from_slice(&[next, hop]);
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    p.extend_from_slice(payload);
    p
}

/// An ICMPv6 message `msg` (checksum field zero) in IPv6, its checksum filled by an independent
/// sum over the pseudo-header and the message.
fn icmp6(src: [u8; 16], dst: [u8; 16], hop: u8, msg: &[u8]) -> Vec<u8> {
    let mut sum_over = Vec::new();
    sum_over.extend_from_slice(&src);
    sum_over.extend_from_slice(&dst);
    sum_over.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    sum_over.extend_from_slice(&[0, 0, 0, 58]);
    sum_over.extend_from_slice(msg);
    let c = inet_checksum(&sum_over);
    let mut m = msg.to_vec();
    m[2..4].copy_from_slice(&c.to_be_bytes());
    ip6(src, dst, hop, 58, &m)
}

/// A neighbour solicitation (135) or advertisement (136) body for `target` with `flags` and a
/// link-layer option of kind `opt` carrying `mac`.
fn nd_msg(t: u8, flags: u8, target: [u8; 16], opt: u8, mac: [u8; 6]) -> Vec<u8> {
    let mut m = vec![t, 0, 0, 0, flags, 0, 0, 0];
    m.extend_from_slice(&target);
    m.extend_from_slice(&[opt, 1]);
    m.extend_from_slice(&mac);
    m
}

/// eth0: fd00:1::fe/64, host A fd00:1::2 (configured); eth1: fd00:2::fe/64, router B
/// fd00:2::1 (configured); fd00:99::/48 via B.
fn rig() -> Rig {
    Rig::new(&[MAC0, MAC1], |f, p| {
        f.add_address6(p[0], w("fd00:1::fe"), 64).unwrap();
        f.add_address6(p[1], w("fd00:2::fe"), 64).unwrap();
        f.add_neighbor6(p[0], w("fd00:1::2"), HOST_A).unwrap();
        f.add_neighbor6(p[1], w("fd00:2::1"), HOST_B).unwrap();
        let via = Path6 {
            next_hop: w("fd00:2::1"),
            interface: p[1],
        };
        f.add_route6(w("fd00:99::"), 48, &[via]).unwrap();
    })
}

#[test]
fn packets_are_routed_both_ways_with_their_hop_limit_decremented() {
    let mut rig = rig();
    let out = ip6(a("fd00:1::2"), a("fd00:99::9"), 64, 17, &[1; 30]);
    rig.inject(0, &[eth(MAC0, HOST_A, 0x86dd, &out)]);
    let mut want = out.clone();
    want[7] = 63;
    assert_eq!(rig.sent(1), vec![eth(HOST_B, MAC1, 0x86dd, &want)]);
    // Back, padded to Ethernet's minimum as a NIC delivers it: the padding does not go on.
    let back = ip6(a("fd00:99::9"), a("fd00:1::2"), 2, 17, &[2; 4]);
    let mut frame = eth(MAC1, HOST_B, 0x86dd, &back);
    frame.resize(64, 0);
    rig.inject(1, &[frame]);
    let mut want = back.clone();
    want[7] = 1;
    assert_eq!(rig.sent(0), vec![eth(HOST_A, MAC0, 0x86dd, &want)]);
    assert_eq!(rig.total_errors(), 0);
    // Both interfaces have link-local addresses now; no route is a drop by name.
    let eth0 = rig.fwd.interface_by_name("eth0").unwrap();
    assert_eq!(eth0.link_local, Some(u128::from_be_bytes(ll(MAC0))));
    rig.inject(
        0,
        &[eth(
            MAC0,
            HOST_A,
            0x86dd,
            &ip6(a("fd00:1::2"), a("fd00:42::1"), 64, 17, &[0; 8]),
        )],
    );
    assert_eq!(rig.error("ip6-lookup", "no-route"), 1);
    rig.assert_no_leaks();
}

#[test]
fn an_unresolved_neighbour_is_solicited_and_learned_from_its_advertisement() {
    let mut rig = rig();
    let to_c = ip6(a("fd00:1::2"), a("fd00:2::5"), 64, 17, &[3; 16]);
    rig.inject(0, &[eth(MAC0, HOST_A, 0x86dd, &to_c)]);
    // A multicast solicitation from eth1's link-local address to fd00:2::5's solicited-node
    // group, with eth1's MAC; the packet that needed it is dropped.
    let group = a("ff02::1:ff00:5");
    let ns = icmp6(
        ll(MAC1),
        group,
        255,
        &nd_msg(135, 0, a("fd00:2::5"), 1, MAC1),
    );
    assert_eq!(
        rig.sent(1),
        vec![eth([0x33, 0x33, 0xff, 0, 0, 5], MAC1, 0x86dd, &ns)]
    );
    assert_eq!(rig.error("ip6-nd-resolve", "resolving"), 1);
    // Asked again at once: throttled, not sent twice.
    rig.inject(0, &[eth(MAC0, HOST_A, 0x86dd, &to_c)]);
    assert!(rig.sent(1).is_empty());
    // C answers (solicited, override); the control side learns it and commits.
    let na = icmp6(
        a("fd00:2::5"),
        ll(MAC1),
        255,
        &nd_msg(136, 0x60, a("fd00:2::5"), 2, HOST_C),
    );
    rig.inject(1, &[eth(MAC1, HOST_C, 0x86dd, &na)]);
    assert_eq!(rig.error("ip6-nd", "advertisements"), 1);
    assert_eq!(rig.fwd.take_events(), 1);
    rig.commit();
    let n = rig.fwd.neighbors6(Instant::now());
    assert!(n.iter().any(|n| n.ip == w("fd00:2::5") && n.mac == HOST_C));
    rig.inject(0, &[eth(MAC0, HOST_A, 0x86dd, &to_c)]);
    let mut want = to_c.clone();
    want[7] = 63;
    assert_eq!(rig.sent(1), vec![eth(HOST_C, MAC1, 0x86dd, &want)]);
    rig.assert_no_leaks();
}

#[test]
fn on_a_nic_shared_with_the_kernel_no_solicitation_or_arp_request_is_sent() {
    // eth1 is a node uplink: its neighbours are the kernel's, mirrored by the control side.
    let mut rig = Rig::new(&[MAC0, MAC1], |f, p| {
        f.add_address6(p[0], w("fd00:1::fe"), 64).unwrap();
        f.add_address6(p[1], w("fd00:2::fe"), 64).unwrap();
        f.add_address(p[0], 0x0a00_0101, 24).unwrap();
        f.add_address(p[1], 0x0a00_0201, 24).unwrap();
        f.add_neighbor6(p[0], w("fd00:1::2"), HOST_A).unwrap();
        f.set_neighbours_from_kernel(p[1], true).unwrap();
    });
    let to_c = ip6(a("fd00:1::2"), a("fd00:2::5"), 64, 17, &[3; 16]);
    rig.inject(0, &[eth(MAC0, HOST_A, 0x86dd, &to_c)]);
    let to_c4 = ipv4(0x0a00_0102, 0x0a00_0205, 17, 64, &[4; 16]);
    rig.inject(0, &[eth(MAC0, HOST_A, 0x0800, &to_c4)]);
    assert!(
        rig.sent(1).is_empty(),
        "nothing is sent on the kernel's NIC"
    );
    assert_eq!(rig.error("ip6-nd-resolve", "resolving"), 1);
    assert_eq!(rig.error("ip6-nd-resolve", "solicitations-sent"), 0);
    assert_eq!(rig.error("ip4-arp", "resolving"), 1);
    assert_eq!(rig.error("ip4-arp", "requests-sent"), 0);
    // Once the kernel's table has it (the control side adds it), the packet goes.
    rig.fwd
        .add_neighbor6(rig.ports[1].index, w("fd00:2::5"), HOST_C)
        .unwrap();
    rig.commit();
    rig.inject(0, &[eth(MAC0, HOST_A, 0x86dd, &to_c)]);
    let mut want = to_c.clone();
    want[7] = 63;
    assert_eq!(rig.sent(1), vec![eth(HOST_C, MAC1, 0x86dd, &want)]);
    rig.assert_no_leaks();
}

#[test]
fn a_solicitation_for_our_address_is_answered_and_its_sender_learned() {
    let mut rig = rig();
    let ns = icmp6(
        a("fd00:2::7"),
        a("ff02::1:ff00:fe"),
        255,
        &nd_msg(135, 0, a("fd00:2::fe"), 1, HOST_C),
    );
    rig.inject(
        1,
        &[eth([0x33, 0x33, 0xff, 0, 0, 0xfe], HOST_C, 0x86dd, &ns)],
    );
    // Router, solicited, override; from the address asked for, to the asker, at its MAC.
    let na = icmp6(
        a("fd00:2::fe"),
        a("fd00:2::7"),
        255,
        &nd_msg(136, 0xe0, a("fd00:2::fe"), 2, MAC1),
    );
    assert_eq!(rig.sent(1), vec![eth(HOST_C, MAC1, 0x86dd, &na)]);
    assert_eq!(rig.error("ip6-nd", "solicitations-answered"), 1);
    assert_eq!(rig.fwd.take_events(), 1);
    rig.commit();
    // The sender is a neighbour now: packets for it go out at once.
    let to_c = ip6(a("fd00:1::2"), a("fd00:2::7"), 64, 17, &[4; 8]);
    rig.inject(0, &[eth(MAC0, HOST_A, 0x86dd, &to_c)]);
    assert_eq!(rig.sent(1).len(), 1);
    // For our link-local address too; for someone else's: not answered.
    let ns_ll = icmp6(
        a("fe80::7"),
        a("ff02::1:ff00:2"),
        255,
        &nd_msg(135, 0, ll(MAC1), 1, HOST_C),
    );
    let ns_other = icmp6(
        a("fd00:2::7"),
        a("ff02::1:ff00:33"),
        255,
        &nd_msg(135, 0, a("fd00:2::33"), 1, HOST_C),
    );
    rig.inject(
        1,
        &[
            eth([0x33, 0x33, 0xff, 0, 0, 2], HOST_C, 0x86dd, &ns_ll),
            eth([0x33, 0x33, 0xff, 0, 0, 0x33], HOST_C, 0x86dd, &ns_other),
        ],
    );
    let answered = rig.sent(1);
    assert_eq!(answered.len(), 1, "only our own address is answered");
    assert_eq!(
        &answered[0][22..38],
        &ll(MAC1)[..],
        "from the link-local address"
    );
    assert_eq!(rig.error("ip6-input", "multicast-not-ours"), 1);
    rig.assert_no_leaks();
}

#[test]
fn echo_requests_to_our_addresses_are_answered_globally_and_on_the_link() {
    let mut rig = rig();
    let echo = |src, dst, seq: u8| icmp6(src, dst, 64, &[128, 0, 0, 0, 0, 1, 0, seq, 9, 9]);
    rig.inject(
        0,
        &[eth(
            MAC0,
            HOST_A,
            0x86dd,
            &echo(a("fd00:1::2"), a("fd00:1::fe"), 1),
        )],
    );
    let reply = icmp6(
        a("fd00:1::fe"),
        a("fd00:1::2"),
        64,
        &[129, 0, 0, 0, 0, 1, 0, 1, 9, 9],
    );
    assert_eq!(rig.sent(0), vec![eth(HOST_A, MAC0, 0x86dd, &reply)]);
    // To our link-local address from A's: answered back on the link, not routed.
    rig.inject(
        0,
        &[eth(MAC0, HOST_A, 0x86dd, &echo(a("fe80::a"), ll(MAC0), 2))],
    );
    let reply = icmp6(
        ll(MAC0),
        a("fe80::a"),
        64,
        &[129, 0, 0, 0, 0, 1, 0, 2, 9, 9],
    );
    assert_eq!(rig.sent(0), vec![eth(HOST_A, MAC0, 0x86dd, &reply)]);
    assert_eq!(rig.error("ip6-local", "echo-replies"), 2);
    // A bad checksum is refused.
    let mut bad = echo(a("fd00:1::2"), a("fd00:1::fe"), 3);
    bad[44] ^= 0xff;
    rig.inject(0, &[eth(MAC0, HOST_A, 0x86dd, &bad)]);
    assert_eq!(rig.error("ip6-local", "bad-icmp"), 1);
    rig.assert_no_leaks();
}

#[test]
fn hop_limit_and_mtu_refusals_answer_the_source_with_icmpv6_errors() {
    let mut rig = Rig::new(&[MAC0, MAC1], |f, p| {
        f.add_address6(p[0], w("fd00:1::fe"), 64).unwrap();
        f.add_address6(p[1], w("fd00:2::fe"), 64).unwrap();
        f.add_neighbor6(p[0], w("fd00:1::2"), HOST_A).unwrap();
        f.add_neighbor6(p[1], w("fd00:2::1"), HOST_B).unwrap();
        f.set_mtu(p[1], 1280).unwrap();
        let via = Path6 {
            next_hop: w("fd00:2::1"),
            interface: p[1],
        };
        f.add_route6(w("fd00:99::"), 48, &[via]).unwrap();
    });
    // Hop limit 1: Time Exceeded (3/0) from eth0's address, the packet quoted whole.
    let dying = ip6(a("fd00:1::2"), a("fd00:99::9"), 1, 17, &[5; 20]);
    rig.inject(0, &[eth(MAC0, HOST_A, 0x86dd, &dying)]);
    let mut msg = vec![3, 0, 0, 0, 0, 0, 0, 0];
    msg.extend_from_slice(&dying);
    let te = icmp6(a("fd00:1::fe"), a("fd00:1::2"), 64, &msg);
    assert_eq!(rig.sent(0), vec![eth(HOST_A, MAC0, 0x86dd, &te)]);
    // Too long for eth1's 1280: Packet Too Big (2/0) with the MTU, quoting what fits 1280.
    let big = ip6(a("fd00:1::2"), a("fd00:99::9"), 64, 17, &[6; 1400]);
    rig.inject(0, &[eth(MAC0, HOST_A, 0x86dd, &big)]);
    let mut msg = vec![2, 0, 0, 0, 0, 0, 0x05, 0x00];
    msg.extend_from_slice(&big[..1280 - 48]);
    let ptb = icmp6(a("fd00:1::fe"), a("fd00:1::2"), 64, &msg);
    let got = rig.sent(0);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0], eth(HOST_A, MAC0, 0x86dd, &ptb));
    assert_eq!(got[0].len() - 14, 1280, "within the minimum MTU");
    assert!(rig.sent(1).is_empty());
    assert_eq!(rig.error("ip6-rewrite", "hop-limit-exceeded"), 1);
    assert_eq!(rig.error("ip6-rewrite", "packet-too-big"), 1);
    assert_eq!(rig.error("ip6-icmp-error", "sent"), 2);
    // No error about an ICMPv6 error.
    let mut msg = vec![1, 0, 0, 0, 0, 0, 0, 0];
    msg.extend_from_slice(&[0; 40]);
    let err_in_flight = icmp6(a("fd00:1::2"), a("fd00:99::9"), 1, &msg);
    rig.inject(0, &[eth(MAC0, HOST_A, 0x86dd, &err_in_flight)]);
    assert!(rig.sent(0).is_empty());
    assert_eq!(rig.error("ip6-icmp-error", "not-for-this"), 1);
    rig.assert_no_leaks();
}

#[test]
fn malformed_ipv6_and_neighbour_discovery_are_counted_by_name_and_forwarding_goes_on() {
    let mut rig = rig();
    let frame = |p: &[u8]| eth(MAC0, HOST_A, 0x86dd, p);
    let good = ip6(a("fd00:1::2"), a("fd00:99::9"), 64, 17, &[7; 8]);
    let mut bad_version = good.clone();
    bad_version[0] = 0x40;
    let mut lying = good.clone();
    lying[4..6].copy_from_slice(&200u16.to_be_bytes());
    let from_multicast = ip6(a("ff02::1"), a("fd00:99::9"), 64, 17, &[0; 8]);
    // Nine destination-options headers: one more than the bound.
    let chain: Vec<u8> = (0..9)
        .flat_map(|k| [if k < 8 { 60 } else { 17 }, 0, 0, 0, 0, 0, 0, 0])
        .collect();
    let past_bound = ip6(a("fd00:1::2"), a("fd00:99::9"), 64, 60, &chain);
    let ext_truncated = ip6(a("fd00:1::2"), a("fd00:99::9"), 64, 0, &[17, 4, 0, 0]);
    let other_multicast = ip6(a("fd00:1::2"), a("ff05::1"), 64, 17, &[0; 8]);
    let other_link_local = ip6(a("fe80::a"), a("fe80::99"), 64, 17, &[0; 8]);
    let routed_ns = icmp6(
        a("fd00:1::2"),
        a("ff02::1:ff00:fe"),
        64,
        &nd_msg(135, 0, a("fd00:1::fe"), 1, HOST_A),
    );
    let mut zero_option = nd_msg(135, 0, a("fd00:1::fe"), 1, HOST_A);
    zero_option[25] = 0;
    let zero_option = icmp6(a("fd00:1::2"), a("ff02::1:ff00:fe"), 255, &zero_option);
    let mut bad_sum = icmp6(
        a("fd00:1::2"),
        a("ff02::1:ff00:fe"),
        255,
        &nd_msg(135, 0, a("fd00:1::fe"), 1, HOST_A),
    );
    bad_sum[60] ^= 1;
    rig.inject(
        0,
        &[
            frame(&good[..20]),
            frame(&bad_version),
            frame(&lying),
            frame(&from_multicast),
            frame(&past_bound),
            frame(&ext_truncated),
            frame(&other_multicast),
            frame(&other_link_local),
            frame(&routed_ns),
            frame(&zero_option),
            frame(&bad_sum),
        ],
    );
    assert!(rig.sent(0).is_empty() && rig.sent(1).is_empty());
    for (node, name) in [
        ("ip6-input", "too-short"),
        ("ip6-input", "bad-version"),
        ("ip6-input", "truncated"),
        ("ip6-input", "bad-source"),
        ("ip6-input", "extension-headers-past-bound"),
        ("ip6-input", "extension-header-truncated"),
        ("ip6-input", "multicast-not-ours"),
        ("ip6-input", "link-local-not-ours"),
        ("ip6-nd", "bad-hop-limit"),
        ("ip6-nd", "malformed"),
        ("ip6-nd", "bad-checksum"),
    ] {
        assert_eq!(rig.error(node, name), 1, "{node} {name}");
    }
    assert_eq!(
        rig.fwd.take_events(),
        0,
        "nothing learned from what was refused"
    );
    // Forwarding goes on.
    rig.inject(0, &[frame(&good)]);
    assert_eq!(rig.sent(1).len(), 1);
    rig.assert_no_leaks();
}

#[test]
fn a_learned_neighbour_gone_stale_is_asked_by_a_unicast_solicitation_then_forgotten() {
    let mut rig = rig();
    let na = icmp6(
        a("fd00:2::5"),
        ll(MAC1),
        255,
        &nd_msg(136, 0x60, a("fd00:2::5"), 2, HOST_C),
    );
    rig.inject(1, &[eth(MAC1, HOST_C, 0x86dd, &na)]);
    rig.fwd.take_events();
    rig.commit();
    let later = Instant::now() + Duration::from_secs(31);
    assert_eq!(rig.fwd.age_neighbors6(later), (1, 0));
    rig.run();
    // Unicast: to C's MAC and address, from eth1's link-local one.
    let ns = icmp6(
        ll(MAC1),
        a("fd00:2::5"),
        255,
        &nd_msg(135, 0, a("fd00:2::5"), 1, MAC1),
    );
    assert_eq!(rig.sent(1), vec![eth(HOST_C, MAC1, 0x86dd, &ns)]);
    assert_eq!(rig.error("ip6-nd-probe", "solicitations-sent"), 1);
    // Two more a second apart, then it goes with its host route.
    assert_eq!(
        rig.fwd.age_neighbors6(later + Duration::from_secs(1)),
        (1, 0)
    );
    assert_eq!(
        rig.fwd.age_neighbors6(later + Duration::from_secs(2)),
        (1, 0)
    );
    assert_eq!(
        rig.fwd.age_neighbors6(later + Duration::from_secs(3)),
        (0, 1)
    );
    rig.commit();
    rig.run();
    assert_eq!(rig.sent(1).len(), 2, "the two later probes");
    let n = rig.fwd.neighbors6(later);
    assert!(!n.iter().any(|n| n.ip == w("fd00:2::5")));
    assert!(rig.fwd.routes6().iter().all(|r| r.prefix != w("fd00:2::5")));
    rig.assert_no_leaks();
}
