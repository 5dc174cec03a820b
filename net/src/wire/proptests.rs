//! Every view on arbitrary bytes: constructors refuse exactly what is too short (or, for ARP,
//! not IPv4 over Ethernet), and nothing a constructed view does panics, whatever its fields say.

use proptest::prelude::*;

use super::*;

/// Reads every field of every view `b` makes, and writes every field of every view of a copy.
fn exercise(b: &[u8]) {
    let mut w = b.to_vec();
    if let Ok(eth) = Ethernet::new_checked(b) {
        let _ = (eth.dst(), eth.src(), eth.is_group(), eth.ethertype());
        let _ = (eth.address_words(), eth.payload().len());
        let mut eth = Ethernet::new_checked(&mut w[..]).unwrap();
        eth.set_payload_ethertype(ETHERTYPE_IP6);
        eth.set_dst(&BROADCAST);
        eth.set_src(&[1; 6]);
        eth.set_ethertype(ETHERTYPE_VLAN);
        eth.set_payload_ethertype(ETHERTYPE_ARP);
        eth.payload_mut().fill(0);
    }
    if let Ok(tag) = Vlan::new_checked(b) {
        let _ = (tag.tci(), tag.vid(), tag.ethertype(), tag.payload().len());
        let mut tag = Vlan::new_checked(&mut w[..]).unwrap();
        tag.set_tci(u16::MAX);
        tag.set_ethertype(ETHERTYPE_IP4);
    }
    let _ = ethernet::write_header(&mut w, &[2; 6], &[3; 6], Some(7), ETHERTYPE_ARP);
    if let Ok(arp) = Arp::new_checked(b) {
        let _ = (arp.op(), arp.sender_mac(), arp.sender_ip());
        let _ = (arp.target_mac(), arp.target_ip());
    }
    if let Ok(mut arp) = Arp::init(&mut w[..]) {
        arp.set_op(arp::REPLY);
        arp.set_sender_mac(&[1; 6]);
        arp.set_sender_ip(1);
        arp.set_target_mac(&[2; 6]);
        arp.set_target_ip(2);
        assert_eq!(arp.op(), arp::REPLY);
    }
    if let Ok(ip) = Ipv4::new_checked(b) {
        let _ = (
            ip.version(),
            ip.ihl(),
            ip.header_len(),
            ip.is_plain(),
            ip.dscp_ecn(),
        );
        let _ = (
            ip.total_len(),
            ip.ident(),
            ip.flags_and_offset(),
            ip.dont_fragment(),
        );
        let _ = (
            ip.more_fragments(),
            ip.frag_offset(),
            ip.ttl(),
            ip.protocol(),
        );
        let _ = (
            ip.checksum(),
            ip.src(),
            ip.dst(),
            ip.words(),
            ip.checksum_ok(),
        );
        let _ = (ip.flow_hash(), ip.payload().len(), ip.header().len());
        let mut ip = Ipv4::new_checked(&mut w[..]).unwrap();
        ip.decrement_ttl();
        ip.fill_checksum();
        ip.payload_mut().fill(0);
        ip.set_dscp_ecn(1);
        ip.set_total_len(2);
        ip.set_flags_and_offset(3);
        ip.set_ttl(4);
        ip.set_protocol(5);
        ip.set_checksum(6);
        ip.set_src(7);
        ip.set_dst(8);
        ip.reset_header();
        ip.fill_checksum();
        assert!(ip.checksum_ok());
    }
    if let Ok(ip) = Ipv6::new_checked(b) {
        let _ = (
            ip.version(),
            ip.payload_len(),
            ip.total_len(),
            ip.next_header(),
        );
        let _ = (ip.hop_limit(), ipv6::is_link_scope(&ip.src()), ip.dst());
        let _ = ip.payload().len();
        let mut ip = Ipv6::new_checked(&mut w[..]).unwrap();
        ip.set_hop_limit(0);
        ip.payload_mut().fill(0);
    }
    if let Ok(icmp) = Icmp4::new_checked(b) {
        let _ = (
            icmp.msg_type(),
            icmp.code(),
            icmp.type_and_code(),
            icmp.checksum(),
        );
        let _ = (
            icmp.checksum_ok(),
            icmp.next_hop_mtu(),
            icmp.payload().len(),
        );
        let mut icmp = Icmp4::new_checked(&mut w[..]).unwrap();
        icmp.set_msg_type(icmp::DEST_UNREACHABLE);
        icmp.set_code(icmp::FRAG_NEEDED);
        icmp.set_rest_of_header(0);
        icmp.set_next_hop_mtu(1500);
        icmp.fill_checksum();
        assert!(icmp.checksum_ok());
    }
    if let Ok(udp) = Udp::new_checked(b) {
        let _ = (udp.src_port(), udp.dst_port(), udp.len(), udp.is_empty());
        let _ = (udp.checksum(), udp.payload().len());
        let mut udp = Udp::new_checked(&mut w[..]).unwrap();
        udp.set_src_port(1);
        udp.set_dst_port(2);
        udp.set_len(3);
        udp.set_checksum(4);
        udp.payload_mut().fill(0);
    }
    if let Ok(vx) = Vxlan::new_checked(b) {
        let _ = (vx.flags(), vx.has_vni(), vx.vni(), vx.payload().len());
        let mut vx = Vxlan::new_checked(&mut w[..]).unwrap();
        vx.set_flags(vxlan::FLAG_I);
        vx.set_vni(u32::MAX);
        vx.payload_mut().fill(0);
        assert_eq!(vx.vni(), 0xff_ffff);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn views_of_arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..96)) {
        exercise(&b);
        let len = b.len();
        prop_assert_eq!(Ethernet::new_checked(&b[..]).is_ok(), len >= ethernet::HEADER_LEN);
        prop_assert_eq!(Vlan::new_checked(&b[..]).is_ok(), len >= ethernet::TAG_LEN);
        prop_assert_eq!(Ipv4::new_checked(&b[..]).is_ok(), len >= ipv4::HEADER_LEN);
        prop_assert_eq!(Ipv6::new_checked(&b[..]).is_ok(), len >= ipv6::HEADER_LEN);
        prop_assert_eq!(Icmp4::new_checked(&b[..]).is_ok(), len >= icmp::HEADER_LEN);
        prop_assert_eq!(Udp::new_checked(&b[..]).is_ok(), len >= udp::HEADER_LEN);
        prop_assert_eq!(Vxlan::new_checked(&b[..]).is_ok(), len >= vxlan::HEADER_LEN);
        let arp = Arp::new_checked(&b[..]);
        if len < arp::LEN {
            prop_assert_eq!(arp, Err(WireError::Truncated));
        } else {
            prop_assert_eq!(arp.is_ok(), b[..6] == [0, 1, 8, 0, 6, 4]);
        }
    }

    #[test]
    fn views_of_headers_that_nearly_hold_never_panic(
        first in any::<u8>(),
        len in 0usize..64,
        fill in any::<u8>(),
    ) {
        // The header length nibble and first byte matter most: try each against every length.
        let mut b = vec![fill; len];
        if let Some(f) = b.first_mut() {
            *f = first;
        }
        exercise(&b);
        // An ARP packet's format, with whatever length.
        let mut a = vec![fill; len];
        for (x, f) in a.iter_mut().zip([0, 1, 8, 0, 6, 4]) {
            *x = f;
        }
        exercise(&a);
    }
}
