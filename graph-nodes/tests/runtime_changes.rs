//! What the data path does while the control side changes it: transmit queues detached from
//! `interface-output` (later packets for the interface are counted as `no-queue`, none sent)
//! and attached again, and L3 cross-connects (every IPv4 packet from one interface goes to the
//! other's next hop, whatever its destination, TTL decremented).

mod common;

use common::*;
use dataplane::harness::CaptureTx;
use graph_nodes::names;
use graph_nodes::nodes::InterfaceOutput;

#[test]
fn packets_for_a_detached_interface_are_counted_and_none_is_sent_until_it_is_attached_again() {
    let mut rig = Rig::new(&[MAC0, MAC1], |f, p| f.cross_connect(p[0], p[1]).unwrap());
    let frame = eth(HOST_B, HOST_A, 0x88b5, &[7; 50]);
    rig.inject(0, std::slice::from_ref(&frame));
    assert_eq!(rig.sent(1), vec![frame.clone()]);

    let index = rig.ports[1].index;
    let output = rig
        .graph
        .node_mut::<InterfaceOutput>(names::INTERFACE_OUTPUT)
        .unwrap();
    assert!(output.detach(index).is_some());
    assert!(!output.has_queue(index));
    rig.inject(0, &[frame.clone(), frame.clone(), frame.clone()]);
    assert!(rig.sent(1).is_empty());
    assert_eq!(rig.error("interface-output", "no-queue"), 3);
    rig.assert_no_leaks();

    let (tx, captured) = CaptureTx::new();
    let output = rig
        .graph
        .node_mut::<InterfaceOutput>(names::INTERFACE_OUTPUT)
        .unwrap();
    assert!(output.attach(index, Box::new(tx)).is_none());
    rig.inject(0, std::slice::from_ref(&frame));
    assert_eq!(*captured.lock().unwrap(), vec![frame]);
    assert_eq!(rig.error("interface-output", "no-queue"), 3);
    rig.assert_no_leaks();
}

/// eth0 and eth1 L3 cross-connected: host A behind eth0 (10.0.1.2), host B behind eth1
/// (10.0.2.2), no route at all.
fn l3xc(resolved: bool) -> Rig {
    Rig::new(&[MAC0, MAC1], |f, p| {
        f.add_address(p[1], ip(10, 0, 2, 1), 24).unwrap();
        if resolved {
            f.add_neighbor(p[0], ip(10, 0, 1, 2), HOST_A).unwrap();
            f.add_neighbor(p[1], ip(10, 0, 2, 2), HOST_B).unwrap();
        }
        f.l3_cross_connect(p[0], p[1], ip(10, 0, 2, 2), ip(10, 0, 1, 2))
            .unwrap();
    })
}

/// An Ethernet frame to `to` from `from` carrying an IPv4 packet (protocol 17) from `src` to
/// `dst` with `ttl` and `payload`.
fn ip_frame(to: [u8; 6], from: [u8; 6], src: u32, dst: u32, ttl: u8, payload: &[u8]) -> Vec<u8> {
    eth(to, from, 0x0800, &ipv4(src, dst, 17, ttl, payload))
}

/// Host A's address.
const A: u32 = u32::from_be_bytes([10, 0, 1, 2]);
/// 198.51.100.9: covered by no route.
const FAR: u32 = u32::from_be_bytes([198, 51, 100, 9]);

/// Host A's packet (TTL 64) to [`FAR`], as it reaches eth0.
fn a_to_far() -> Vec<u8> {
    ip_frame(MAC0, HOST_A, A, FAR, 64, &[1; 8])
}

#[test]
fn an_l3_cross_connect_sends_every_ip4_packet_to_the_peer_whatever_its_destination() {
    let mut rig = l3xc(true);
    rig.inject(0, &[a_to_far()]);
    let want = ip_frame(HOST_B, MAC1, A, FAR, 63, &[1; 8]);
    assert_eq!(rig.sent(1), vec![want]);
    // And back.
    rig.inject(1, &[ip_frame(MAC1, HOST_B, FAR, A, 9, &[2; 8])]);
    let want = ip_frame(HOST_A, MAC0, FAR, A, 8, &[2; 8]);
    assert_eq!(rig.sent(0), vec![want]);
    assert_eq!(rig.error("ip4-lookup", "no-route"), 0);
    // ip4-input's checks still apply.
    let mut bad = ipv4(A, FAR, 17, 64, &[1; 8]);
    bad[10] ^= 0xff;
    rig.inject(0, &[eth(MAC0, HOST_A, 0x0800, &bad)]);
    assert!(rig.sent(1).is_empty());
    assert_eq!(rig.error("ip4-input", "bad-checksum"), 1);

    // Disconnected: the FIB decides again (no route).
    let p0 = rig.ports[0].index;
    assert!(rig.fwd.l3_disconnect(p0));
    rig.commit();
    rig.inject(0, &[a_to_far()]);
    assert!(rig.sent(1).is_empty());
    assert_eq!(rig.error("ip4-lookup", "no-route"), 1);
    rig.assert_no_leaks();
}

#[test]
fn an_unresolved_l3_cross_connect_peer_is_asked_for_with_arp() {
    let mut rig = l3xc(false);
    rig.inject(0, &[a_to_far()]);
    let want = eth(
        [0xff; 6],
        MAC1,
        0x0806,
        &arp(1, MAC1, ip(10, 0, 2, 1), [0; 6], ip(10, 0, 2, 2)),
    );
    assert_eq!(rig.sent(1), vec![want]);
    assert_eq!(rig.error("ip4-arp", "resolving"), 1);
    rig.assert_no_leaks();
}
