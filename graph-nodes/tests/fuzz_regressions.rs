//! Inputs the fuzz targets (`fuzz/`) found mishandled, each kept as a regular test.

mod common;

use common::*;
use graph_nodes::names;

/// fuzz `packet_path`: an ARP request for our address with 1,666 bytes after it was answered
/// with all of them (1,708 bytes out of a 1,500-byte-MTU port, the requester's trailing bytes
/// echoed). The reply is now its headers, padded to the Ethernet minimum — also from a request
/// long enough to be chained over several buffers.
#[test]
fn an_arp_reply_carries_nothing_after_the_arp_packet() {
    let mut r = Rig::new(&[MAC0, MAC1], |f, p| {
        f.add_address(p[0], ip(10, 0, 1, 1), 24).unwrap();
    });
    let want = eth(
        HOST_A,
        MAC0,
        0x0806,
        &arp(2, MAC0, ip(10, 0, 1, 1), HOST_A, ip(10, 0, 1, 2)),
    );
    for trailing in [0usize, 18, 1666, 5000] {
        let mut req = eth(
            [0xff; 6],
            HOST_A,
            0x0806,
            &arp(1, HOST_A, ip(10, 0, 1, 2), [0; 6], ip(10, 0, 1, 1)),
        );
        req.extend((0..trailing).map(|i| i as u8 | 1));
        r.inject(0, &[req.clone()]);
        let sent = r.sent(0);
        assert_eq!(sent.len(), 1, "{trailing} trailing bytes: one reply");
        let reply = &sent[0];
        assert_eq!(reply.len(), req.len().min(60), "{trailing} trailing bytes");
        assert_eq!(&reply[..42], &want[..], "{trailing} trailing bytes");
    }
    assert_eq!(r.error(names::ARP_INPUT, "requests-answered"), 4);
    r.assert_no_leaks();
}

/// fuzz `packet_path`: a frame chained over two buffers (2,110 bytes) holding a 48-byte IPv4
/// packet left an L3 cross-connect whole (2,110 bytes out of a 1,500-byte-MTU port): ip4-input
/// trimmed what followed the packet only in single-buffer frames. Routed packets had the same
/// fault. Now the chain is cut to the packet, its spare buffers freed.
#[test]
fn a_chained_frame_is_cut_to_its_ipv4_packet() {
    let mut r = Rig::new(&[MAC0, MAC1, MAC2, MAC3], |f, p| {
        f.add_address(p[0], ip(10, 0, 1, 1), 24).unwrap();
        f.add_address(p[1], ip(10, 0, 2, 1), 24).unwrap();
        f.add_neighbor(p[1], ip(10, 0, 2, 2), HOST_B).unwrap();
        f.add_address(p[2], ip(172, 16, 5, 1), 24).unwrap();
        f.add_address(p[3], ip(172, 16, 6, 1), 24).unwrap();
        f.add_neighbor(p[3], ip(172, 16, 6, 2), HOST_B).unwrap();
        f.l3_cross_connect(p[2], p[3], ip(172, 16, 6, 2), ip(172, 16, 5, 2))
            .unwrap();
    });
    for (port, out, dst) in [(0, 1, ip(10, 0, 2, 2)), (2, 3, ip(8, 8, 8, 8))] {
        for trailing in [2048usize, 5000] {
            let packet = ipv4(ip(10, 0, 1, 2), dst, 17, 64, &udp(1, 2, &[7; 20]));
            let mac = [MAC0, MAC1, MAC2, MAC3][port];
            let mut frame = eth(mac, HOST_A, 0x0800, &packet);
            frame.extend((0..trailing).map(|i| i as u8));
            r.inject(port, &[frame]);
            let sent = r.sent(out);
            assert_eq!(sent.len(), 1, "port {port}, {trailing} trailing bytes");
            assert_eq!(
                sent[0].len(),
                14 + packet.len(),
                "port {port}, {trailing} trailing"
            );
            assert_eq!(&sent[0][..6], &HOST_B);
            assert_eq!(&sent[0][14 + 20..], &packet[20..], "the payload, untouched");
        }
    }
    r.assert_no_leaks();
}

/// The IPv6 side of the same fault: ip6-l3xc trimmed what followed the packet only in
/// single-buffer frames, so a chained frame with bytes after its IPv6 packet crossed the L3
/// cross-connect whole. Now cut to the packet.
#[test]
fn a_chained_ipv6_frame_is_cut_to_its_packet() {
    let mut r = Rig::new(&[MAC0, MAC1], |f, p| {
        f.add_address(p[1], ip(10, 0, 2, 1), 24).unwrap();
        f.add_neighbor(p[0], ip(10, 0, 1, 2), HOST_A).unwrap();
        f.add_neighbor(p[1], ip(10, 0, 2, 2), HOST_B).unwrap();
        f.l3_cross_connect(p[0], p[1], ip(10, 0, 2, 2), ip(10, 0, 1, 2))
            .unwrap();
    });
    let mut packet = vec![0x60, 0, 0, 0, 0, 8, 17, 64];
    packet.extend_from_slice(&[0xfd, 0, 0, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    packet.extend_from_slice(&[0xfd, 0, 0, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    packet.extend_from_slice(&udp(5000, 5001, &[]));
    for trailing in [0usize, 2048, 5000] {
        let mut frame = eth(MAC0, HOST_A, 0x86dd, &packet);
        frame.extend((0..trailing).map(|i| i as u8));
        r.inject(0, &[frame]);
        let sent = r.sent(1);
        assert_eq!(sent.len(), 1, "{trailing} trailing bytes");
        assert_eq!(
            sent[0].len(),
            14 + packet.len(),
            "{trailing} trailing bytes"
        );
        assert_eq!(&sent[0][..6], &HOST_B);
        assert_eq!(sent[0][14 + 7], 63, "hop limit decremented");
    }
    r.assert_no_leaks();
}

/// An IPv6 address from its text.
fn a6(s: &str) -> [u8; 16] {
    s.parse::<std::net::Ipv6Addr>().unwrap().octets()
}

/// A UDP-carrying IPv6 packet (the UDP bytes as they are: nothing checks them here).
fn ip6_udp(src: &str, dst: &str, hop: u8) -> Vec<u8> {
    let mut p = vec![0x60, 0, 0, 0, 0, 16, 17, hop];
    p.extend_from_slice(&a6(src));
    p.extend_from_slice(&a6(dst));
    p.extend_from_slice(&[0x9c, 0x40, 0x9c, 0x41, 0, 16, 0, 0]);
    p.extend_from_slice(&[7; 8]);
    p
}

/// fuzz `ip6_input` (its invariant that nothing from another's link-local source leaves by a
/// port other than the one it came in by): a packet from fe80::a received on eth0 for a
/// routed destination went out of eth1, though a router never forwards a link-local source
/// off its link (RFC 4291 2.5.6). Now `ip6-rewrite` drops it as `link-local-source`; back out
/// of its own link it still goes, and a global source crosses as before.
#[test]
fn a_link_local_source_stays_on_its_link() {
    let w = |s: &str| u128::from_be_bytes(a6(s));
    let mut r = Rig::new(&[MAC0, MAC1], |f, p| {
        f.add_address6(p[0], w("fd00:1::fe"), 64).unwrap();
        f.add_address6(p[1], w("fd00:2::fe"), 64).unwrap();
        f.add_neighbor6(p[0], w("fd00:1::2"), HOST_A).unwrap();
        f.add_neighbor6(p[1], w("fd00:2::1"), HOST_B).unwrap();
        let via = graph_nodes::forwarding::Path6 {
            next_hop: w("fd00:2::1"),
            interface: p[1],
        };
        f.add_route6(w("fd00:99::"), 48, &[via]).unwrap();
    });
    let off_link = ip6_udp("fe80::a", "fd00:99::9", 64);
    r.inject(0, &[eth(MAC0, HOST_A, 0x86dd, &off_link)]);
    assert!(
        r.sent(1).is_empty(),
        "a link-local source forwarded off its link"
    );
    assert_eq!(r.error(names::IP6_REWRITE, "link-local-source"), 1);
    // Hop limit 1 too: dropped, not answered (a link-local address has no route back).
    let dying = ip6_udp("fe80::a", "fd00:99::9", 1);
    r.inject(0, &[eth(MAC0, HOST_A, 0x86dd, &dying)]);
    assert!(r.sent(0).is_empty() && r.sent(1).is_empty());
    assert_eq!(r.error(names::IP6_REWRITE, "link-local-source"), 2);
    // On its own link: forwarded, its hop limit decremented.
    let on_link = ip6_udp("fe80::a", "fd00:1::2", 64);
    r.inject(0, &[eth(MAC0, HOST_A, 0x86dd, &on_link)]);
    let mut want = on_link.clone();
    want[7] = 63;
    assert_eq!(r.sent(0), vec![eth(HOST_A, MAC0, 0x86dd, &want)]);
    // A global source crosses.
    let global = ip6_udp("fd00:1::2", "fd00:99::9", 64);
    r.inject(0, &[eth(MAC0, HOST_A, 0x86dd, &global)]);
    assert_eq!(r.sent(1).len(), 1);
    assert_eq!(r.error(names::IP6_REWRITE, "link-local-source"), 2);
    r.assert_no_leaks();
}
