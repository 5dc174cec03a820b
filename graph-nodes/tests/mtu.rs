//! MTU rules in the graph: an L2 cross-connect drops a frame longer than the outgoing
//! interface's MTU (with its Ethernet header, an 802.1Q tag allowed on top) as `mtu-exceeded`;
//! an IPv4 packet too long for its next hop is dropped as `mtu-exceeded` without Don't
//! Fragment, and with it answered with ICMP "fragmentation needed" carrying the next hop's MTU,
//! back through an L3 cross-connect or through the FIB; no error about an ICMP error; errors
//! are rate-limited.

mod common;

use common::*;
use graph_nodes::forwarding::Path;

/// Host A's address (behind eth0) and an address no route covers.
const A: u32 = u32::from_be_bytes([10, 0, 1, 2]);
const FAR: u32 = u32::from_be_bytes([198, 51, 100, 9]);

/// An IPv4 packet of `total` bytes from `src` to `dst`, UDP, Don't Fragment as `df`.
fn packet(src: u32, dst: u32, total: usize, df: bool) -> Vec<u8> {
    let mut p = ipv4(src, dst, 17, 64, &vec![0x5a; total - 20]);
    if df {
        p[6] |= 0x40;
        fix_ip_checksum(&mut p);
    }
    p
}

/// Checks `frame` is ICMP "fragmentation needed" to host A at `to_mac` from `from_mac`,
/// sourced `from`, quoting `original`'s header and 8 bytes, announcing `mtu`.
fn assert_frag_needed(
    frame: &[u8],
    to_mac: [u8; 6],
    from_mac: [u8; 6],
    from: u32,
    original: &[u8],
    mtu: u16,
) {
    assert_eq!(&frame[..6], &to_mac);
    assert_eq!(&frame[6..12], &from_mac);
    assert_eq!(&frame[12..14], &[0x08, 0x00]);
    let ip = &frame[14..];
    assert_eq!(
        ip.len(),
        20 + 8 + 28,
        "IP + ICMP headers + quoted header and 8 bytes"
    );
    assert_eq!(inet_checksum(&ip[..20]), 0, "IP header checksum");
    assert_eq!(u16::from_be_bytes([ip[2], ip[3]]) as usize, ip.len());
    assert_eq!(ip[9], 1, "ICMP");
    assert_eq!(&ip[12..16], &from.to_be_bytes());
    assert_eq!(&ip[16..20], &A.to_be_bytes());
    let icmp = &ip[20..];
    assert_eq!(
        (icmp[0], icmp[1]),
        (3, 4),
        "destination unreachable, fragmentation needed"
    );
    assert_eq!(u16::from_be_bytes([icmp[6], icmp[7]]), mtu);
    assert_eq!(inet_checksum(icmp), 0, "ICMP checksum");
    assert_eq!(
        &icmp[8..],
        &original[..28],
        "the original header and 8 bytes"
    );
}

#[test]
fn an_l2_cross_connect_drops_frames_longer_than_the_peer_mtu() {
    let mut rig = Rig::new(&[MAC0, MAC1], |f, p| {
        f.cross_connect(p[0], p[1]).unwrap();
        f.set_mtu(p[1], 1400).unwrap();
    });
    let fits = eth(HOST_B, HOST_A, 0x0800, &packet(A, FAR, 1400, true));
    let tagged = eth_vlan(HOST_B, HOST_A, 7, 0x0800, &packet(A, FAR, 1400, true));
    let long = eth(HOST_B, HOST_A, 0x0800, &packet(A, FAR, 1401, true));
    rig.inject(0, &[fits.clone(), tagged.clone(), long]);
    assert_eq!(rig.sent(1), vec![fits, tagged]);
    assert_eq!(rig.error("l2-xconnect", "mtu-exceeded"), 1);
    // The other way the MTU is still 1500.
    let back = eth(HOST_A, HOST_B, 0x0800, &packet(FAR, A, 1500, false));
    rig.inject(1, std::slice::from_ref(&back));
    assert_eq!(rig.sent(0), vec![back]);
    rig.assert_no_leaks();
}

/// eth0 and eth1 L3 cross-connected, both next hops known, eth1's MTU 1400.
fn l3xc() -> Rig {
    Rig::new(&[MAC0, MAC1], |f, p| {
        f.add_address(p[1], ip(10, 0, 2, 1), 24).unwrap();
        f.add_neighbor(p[0], A, HOST_A).unwrap();
        f.add_neighbor(p[1], ip(10, 0, 2, 2), HOST_B).unwrap();
        f.l3_cross_connect(p[0], p[1], ip(10, 0, 2, 2), A).unwrap();
        f.set_mtu(p[1], 1400).unwrap();
    })
}

#[test]
fn a_dont_fragment_packet_too_long_for_an_l3_cross_connect_gets_icmp_back() {
    let mut rig = l3xc();
    let fits = packet(A, FAR, 1400, true);
    let df = packet(A, FAR, 1401, true);
    let no_df = packet(A, FAR, 1401, false);
    rig.inject(
        0,
        &[
            eth(MAC0, HOST_A, 0x0800, &fits),
            eth(MAC0, HOST_A, 0x0800, &df),
            eth(MAC0, HOST_A, 0x0800, &no_df),
        ],
    );
    assert_eq!(rig.sent(1).len(), 1, "only the packet that fits goes on");
    let back = rig.sent(0);
    assert_eq!(back.len(), 1, "one error, for the DF packet");
    // eth0 has no address: the error comes from the packet's destination.
    assert_frag_needed(&back[0], HOST_A, MAC0, FAR, &df, 1400);
    assert_eq!(rig.error("ip4-rewrite", "fragmentation-needed"), 1);
    assert_eq!(rig.error("ip4-rewrite", "mtu-exceeded"), 1);
    assert_eq!(rig.error("ip4-icmp-error", "sent"), 1);

    // No error about an ICMP error: a too-long "destination unreachable" is only dropped.
    let mut unreachable = vec![3, 1, 0, 0, 0, 0, 0, 0];
    unreachable.extend_from_slice(&[0; 1373]);
    let mut p = ipv4(A, FAR, 1, 64, &unreachable);
    p[6] |= 0x40;
    fix_ip_checksum(&mut p);
    rig.inject(0, &[eth(MAC0, HOST_A, 0x0800, &p)]);
    assert!(rig.sent(0).is_empty() && rig.sent(1).is_empty());
    assert_eq!(rig.error("ip4-icmp-error", "not-for-this"), 1);
    rig.assert_no_leaks();
}

#[test]
fn a_routed_packet_too_long_gets_icmp_from_the_receiving_interface() {
    let mut rig = Rig::new(&[MAC0, MAC1], |f, p| {
        f.add_address(p[0], ip(10, 0, 1, 1), 24).unwrap();
        f.add_address(p[1], ip(10, 0, 2, 1), 24).unwrap();
        f.add_neighbor(p[0], A, HOST_A).unwrap();
        f.add_neighbor(p[1], ip(10, 0, 2, 2), HOST_B).unwrap();
        f.add_route(
            FAR,
            32,
            &[Path {
                interface: p[1],
                next_hop: ip(10, 0, 2, 2),
            }],
        )
        .unwrap();
        f.set_mtu(p[1], 1280).unwrap();
    });
    let df = packet(A, FAR, 1300, true);
    rig.inject(0, &[eth(MAC0, HOST_A, 0x0800, &df)]);
    assert!(rig.sent(1).is_empty());
    let back = rig.sent(0);
    assert_eq!(back.len(), 1);
    assert_frag_needed(&back[0], HOST_A, MAC0, ip(10, 0, 1, 1), &df, 1280);
    rig.assert_no_leaks();
}

#[test]
fn icmp_errors_are_rate_limited() {
    let mut rig = l3xc();
    let df = eth(MAC0, HOST_A, 0x0800, &packet(A, FAR, 1401, true));
    rig.inject(0, &vec![df; 200]);
    let sent = rig.error("ip4-icmp-error", "sent");
    let limited = rig.error("ip4-icmp-error", "rate-limited");
    assert_eq!(sent + limited, 200);
    assert!(limited > 0, "200 at once is over the budget: {sent} sent");
    assert_eq!(rig.sent(0).len() as u64, sent);
    rig.assert_no_leaks();
}
