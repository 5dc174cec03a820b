//! A VLAN sub-interface in an L2 cross-connect (NSM's VLAN mechanism): frames tagged with its
//! VLAN on the parent port leave the peer untagged, the peer's frames leave the parent tagged,
//! byte for byte; other tags, untagged frames on the parent and frames over the MTU do not
//! cross.

mod common;

use common::*;
use graph_nodes::{names, IfIndex};

/// eth0 is the host NIC with sub-interface eth0.100 (MTU 1500, the parent's), cross-connected
/// to eth1 (the client's interface).
fn rig() -> (Rig, IfIndex) {
    let mut sub = None;
    let r = Rig::new(&[MAC0, MAC1], |f, p| {
        let v = f.add_vlan(p[0], 100, "eth0.100").unwrap();
        f.cross_connect(v, p[1]).unwrap();
        sub = Some(v);
    });
    (r, sub.unwrap())
}

fn payload(n: usize) -> Vec<u8> {
    ipv4(
        ip(172, 10, 0, 1),
        ip(172, 10, 0, 2),
        17,
        64,
        &udp(1000, 2000, &vec![0x5a; n]),
    )
}

#[test]
fn tagged_frames_of_the_vlan_leave_the_peer_untagged() {
    let (mut r, sub) = rig();
    let frames: Vec<Vec<u8>> = (0..5)
        .map(|i| eth_vlan(HOST_B, HOST_A, 100, 0x0800, &payload(10 + i)))
        .collect();
    r.inject(0, &frames);
    let want: Vec<Vec<u8>> = (0..5)
        .map(|i| eth(HOST_B, HOST_A, 0x0800, &payload(10 + i)))
        .collect();
    assert_eq!(r.sent(1), want);
    assert!(r.sent(0).is_empty());
    assert_eq!(r.xconnect.get(sub).0, 5, "counted as the sub-interface's");
    // ARP and other EtherTypes cross too: an L2 cross-connect carries any.
    let arp_req = arp(1, HOST_A, ip(172, 10, 0, 1), [0; 6], ip(172, 10, 0, 2));
    r.inject(0, &[eth_vlan([0xff; 6], HOST_A, 100, 0x0806, &arp_req)]);
    assert_eq!(r.sent(1), vec![eth([0xff; 6], HOST_A, 0x0806, &arp_req)]);
    assert_eq!(r.total_errors(), 0);
    r.assert_no_leaks();
}

#[test]
fn the_peers_frames_leave_the_parent_tagged() {
    let (mut r, _) = rig();
    let frames: Vec<Vec<u8>> = (0..3)
        .map(|i| eth(HOST_A, HOST_B, 0x0800, &payload(20 + i)))
        .collect();
    r.inject(1, &frames);
    let want: Vec<Vec<u8>> = (0..3)
        .map(|i| eth_vlan(HOST_A, HOST_B, 100, 0x0800, &payload(20 + i)))
        .collect();
    assert_eq!(r.sent(0), want);
    assert!(r.sent(1).is_empty());
    assert_eq!(r.total_errors(), 0);
    r.assert_no_leaks();
}

#[test]
fn other_tags_and_untagged_frames_on_the_parent_do_not_cross() {
    let (mut r, _) = rig();
    r.inject(
        0,
        &[
            eth_vlan(HOST_B, HOST_A, 200, 0x0800, &payload(10)),
            eth(HOST_B, HOST_A, 0x0800, &payload(10)),
        ],
    );
    assert!(r.sent(1).is_empty());
    assert!(r.sent(0).is_empty());
    assert_eq!(r.error(names::ETHERNET_INPUT, "unknown-vlan"), 1);
    assert_eq!(r.error(names::ETHERNET_INPUT, "not-for-us"), 1);
    r.assert_no_leaks();
}

#[test]
fn the_mtu_holds_both_ways_with_the_tag_on_top() {
    let (mut r, _) = rig();
    // 1500 bytes of IP fit: 1514 untagged, 1518 tagged.
    let fits = payload(1500 - 28);
    let over = payload(1501 - 28);
    r.inject(1, &[eth(HOST_A, HOST_B, 0x0800, &fits)]);
    assert_eq!(
        r.sent(0),
        vec![eth_vlan(HOST_A, HOST_B, 100, 0x0800, &fits)]
    );
    r.inject(0, &[eth_vlan(HOST_B, HOST_A, 100, 0x0800, &fits)]);
    assert_eq!(r.sent(1), vec![eth(HOST_B, HOST_A, 0x0800, &fits)]);
    r.inject(1, &[eth(HOST_A, HOST_B, 0x0800, &over)]);
    r.inject(0, &[eth_vlan(HOST_B, HOST_A, 100, 0x0800, &over)]);
    assert!(r.sent(0).is_empty() && r.sent(1).is_empty());
    assert_eq!(r.error(names::L2_XCONNECT, "mtu-exceeded"), 2);
    r.assert_no_leaks();
}

#[test]
fn a_removed_sub_interface_takes_its_cross_connect_along() {
    let (mut r, sub) = rig();
    r.fwd.remove_interface(sub).unwrap();
    r.commit();
    r.inject(0, &[eth_vlan(HOST_B, HOST_A, 100, 0x0800, &payload(10))]);
    r.inject(1, &[eth(HOST_A, HOST_B, 0x0800, &payload(10))]);
    assert!(r.sent(0).is_empty() && r.sent(1).is_empty());
    assert_eq!(r.error(names::ETHERNET_INPUT, "unknown-vlan"), 1);
    r.assert_no_leaks();
}
