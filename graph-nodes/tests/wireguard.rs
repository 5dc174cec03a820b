//! WireGuard's nodes on a hand-driven graph: `wg4-encrypt` seals what is routed to a tunnel
//! into UDP/IPv4 to the peer's endpoint (opened here with the peer's keys by the protocol
//! crate), `wg4-decrypt` opens what the peer sealed and routes the inner packet, every refusal
//! is a named counter, handshakes are punted, and the control side's datagrams leave through
//! `wg-control-input`; a tunnel in a table (VRF) has what it decrypts routed there.

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use common::*;
use graph_nodes::state::FastMap;
use graph_nodes::wireguard::{WgDatagram, WgPeer, WgReceiver, WgRecvSession, WgSendSession};
use graph_nodes::Path;
use wireguard::replay::ReplayWindow;
use wireguard::transport::{self, SendCounter, TransportKeys};

const OURS: u32 = 0xc000_0201; // 192.0.2.1
const PEER: u32 = 0xc000_0202; // 192.0.2.2
const OUR_PORT: u16 = 51820;
const PEER_PORT: u16 = 51821;
const OUR_INDEX: u32 = 0x1111;
/// fd00:9::/32, the peer's allowed IPv6 prefix.
const ALLOWED6: u128 = 0xfd00_0009 << 96;
const PEER_INDEX: u32 = 0x2222;

/// IPv4 `a:port`.
fn sa(a: u32, port: u16) -> SocketAddr {
    (Ipv4Addr::from(a), port).into()
}

/// Our keys and the peer's, mirrored.
fn keys() -> (TransportKeys, TransportKeys) {
    let now = Instant::now();
    let ours = TransportKeys {
        send: [7; 32],
        recv: [9; 32],
        local_index: OUR_INDEX,
        remote_index: PEER_INDEX,
        created: now,
        initiator: true,
    };
    let theirs = TransportKeys {
        send: [9; 32],
        recv: [7; 32],
        local_index: PEER_INDEX,
        remote_index: OUR_INDEX,
        created: now,
        initiator: false,
    };
    (ours, theirs)
}

/// eth0: hosts (10.0.1.254/24, host A at 10.0.1.2); eth1: the underlay (192.0.2.1/24, the peer
/// at .2); wg0 to the peer, allowed 10.9.0.0/24 and fd00:9::/32, routed. With `session`, keys are in place.
fn rig(session: bool) -> (Rig, u32, TransportKeys) {
    let (ours, theirs) = keys();
    let mut tunnel = 0;
    let mut rig = Rig::new(&[MAC0, MAC1], |f, p| {
        f.add_address(p[0], ip(10, 0, 1, 254), 24).unwrap();
        f.add_neighbor(p[0], ip(10, 0, 1, 2), HOST_A).unwrap();
        f.add_address(p[1], OURS, 24).unwrap();
        f.add_neighbor(p[1], PEER, HOST_B).unwrap();
        let peer = WgPeer {
            endpoint: Some(sa(PEER, PEER_PORT)),
            allowed: vec![(ip(10, 9, 0, 0), 24)],
            allowed6: vec![(ALLOWED6, 32)],
            send: None,
        };
        let (wg, t) = f
            .add_wireguard_tunnel(
                "wg0",
                Ipv4Addr::from(OURS).into(),
                OUR_PORT,
                vec![peer],
                1500,
            )
            .unwrap();
        tunnel = t;
        let via = Path {
            next_hop: ip(10, 9, 0, 1),
            interface: wg,
        };
        f.add_route(ip(10, 9, 0, 0), 24, &[via]).unwrap();
    });
    if session {
        let mut receivers = FastMap::default();
        receivers.insert(
            OUR_INDEX,
            WgReceiver::Session {
                peer: 0,
                session: Arc::new(WgRecvSession {
                    keys: ours.clone(),
                    window: Mutex::new(ReplayWindow::new()),
                }),
            },
        );
        let peer = WgPeer {
            endpoint: Some(sa(PEER, PEER_PORT)),
            allowed: vec![(ip(10, 9, 0, 0), 24)],
            allowed6: vec![(ALLOWED6, 32)],
            send: Some(Arc::new(WgSendSession {
                keys: ours,
                counter: Arc::new(SendCounter::new()),
            })),
        };
        rig.fwd
            .set_wireguard_sessions(tunnel, vec![peer], receivers)
            .unwrap();
        rig.commit();
    }
    (rig, tunnel, theirs)
}

/// A transport message from the peer, sealed with its keys: `inner` at `counter`.
fn from_peer(theirs: &TransportKeys, counter: u64, inner: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; transport::sealed_len(inner.len())];
    buf[16..16 + inner.len()].copy_from_slice(inner);
    let n = transport::seal(theirs, counter, &mut buf, inner.len()).unwrap();
    buf.truncate(n);
    buf
}

/// `msg` in UDP/IPv4 from the peer's endpoint to ours, in Ethernet to eth1.
fn underlay(msg: &[u8]) -> Vec<u8> {
    eth(
        MAC1,
        HOST_B,
        0x0800,
        &ipv4(PEER, OURS, 17, 64, &udp(PEER_PORT, OUR_PORT, msg)),
    )
}

#[test]
fn routed_packets_are_sealed_to_the_peer_and_its_messages_opened_and_routed() {
    let (mut rig, _, theirs) = rig(true);
    let inner = ipv4(
        ip(10, 0, 1, 2),
        ip(10, 9, 0, 5),
        17,
        64,
        &udp(1, 2, b"hello"),
    );
    rig.inject(0, &[eth(MAC0, HOST_A, 0x0800, &inner)]);
    let sent = rig.sent(1);
    assert_eq!(sent.len(), 1, "one message to the peer");
    let f = &sent[0];
    assert_eq!(&f[..6], &HOST_B);
    assert_eq!(&f[6..12], &MAC1);
    let outer = &f[14..];
    assert_eq!(inet_checksum(&outer[..20]), 0, "outer header checksum");
    assert_eq!(u32::from_be_bytes(outer[12..16].try_into().unwrap()), OURS);
    assert_eq!(u32::from_be_bytes(outer[16..20].try_into().unwrap()), PEER);
    assert_eq!(
        &outer[20..24],
        &[OUR_PORT.to_be_bytes(), PEER_PORT.to_be_bytes()].concat()[..]
    );
    let mut msg = outer[28..].to_vec();
    assert_eq!(msg.len(), transport::sealed_len(inner.len()));
    let (counter, range) = transport::open(&theirs, &mut msg).unwrap();
    assert_eq!(counter, 0);
    // Routed once on the way in: the TTL went down by one.
    let mut expect = inner.clone();
    expect[8] -= 1;
    fix_ip_checksum(&mut expect);
    assert_eq!(&msg[range.start..range.start + inner.len()], &expect[..]);
    assert!(msg[range.start + inner.len()..range.end]
        .iter()
        .all(|&b| b == 0));

    // The peer's reply comes out of eth0 to host A.
    let reply = ipv4(
        ip(10, 9, 0, 5),
        ip(10, 0, 1, 2),
        17,
        64,
        &udp(2, 1, b"world"),
    );
    rig.inject(1, &[underlay(&from_peer(&theirs, 0, &reply))]);
    let sent = rig.sent(0);
    assert_eq!(sent.len(), 1);
    let mut expect = reply.clone();
    expect[8] -= 1;
    fix_ip_checksum(&mut expect);
    assert_eq!(sent[0], eth(HOST_A, MAC0, 0x0800, &expect));
    assert_eq!(rig.total_errors(), 0);
    rig.assert_no_leaks();
}

#[test]
fn bad_input_is_counted_by_name() {
    let (mut rig, tunnel, theirs) = rig(true);
    let ok = ipv4(ip(10, 9, 0, 5), ip(10, 0, 1, 2), 17, 64, &[0; 8]);
    let first = from_peer(&theirs, 3, &ok);
    let mut forged = from_peer(&theirs, 4, &ok);
    *forged.last_mut().unwrap() ^= 1;
    let mut unknown = from_peer(&theirs, 5, &ok);
    unknown[4..8].copy_from_slice(&0xdead_u32.to_le_bytes());
    let spoofed = ipv4(ip(10, 8, 0, 5), ip(10, 0, 1, 2), 17, 64, &[0; 8]);
    let mut handshake = vec![0u8; 148];
    handshake[0] = 1;
    rig.inject(
        1,
        &[
            underlay(&first),
            underlay(&first),
            underlay(&forged),
            underlay(&unknown),
            underlay(&first[..20]),
            underlay(&[9, 0, 0, 0, 1, 2, 3, 4]),
            underlay(&from_peer(&theirs, 6, &spoofed)),
            underlay(&from_peer(&theirs, 7, b"not an IP packet at all")),
            underlay(&from_peer(&theirs, 8, &[])),
            underlay(&from_peer(&theirs, 9003, &ok)),
            underlay(&from_peer(&theirs, 10, &ok)),
            underlay(&handshake),
        ],
    );
    assert_eq!(rig.sent(0).len(), 2, "the first and the one 9000 ahead");
    let e = |name| rig.error("wg4-decrypt", name);
    // A duplicate, and one never seen but older than the window once 9003 was accepted.
    assert_eq!(e("replay"), 2);
    assert_eq!(e("bad-tag"), 1);
    assert_eq!(e("unknown-index"), 1);
    assert_eq!(e("truncated"), 1);
    assert_eq!(e("unknown-type"), 1);
    assert_eq!(e("source-not-allowed"), 1);
    assert_eq!(e("not-ip"), 1);
    assert_eq!(e("keepalive"), 1);
    assert_eq!(e("punted"), 1);
    let shared = rig.fwd.wireguard_tunnel(tunnel).unwrap().shared.clone();
    let punted = shared.punts.pop().expect("the handshake was punted");
    assert_eq!(
        (punted.peer, punted.data()),
        (sa(PEER, PEER_PORT), &handshake[..])
    );
    assert_eq!(shared.peers[0].replays.load(Ordering::Relaxed), 2);
    assert_eq!(shared.peers[0].bad_tags.load(Ordering::Relaxed), 1);
    rig.assert_no_leaks();
}

#[test]
fn without_a_session_packets_ask_for_a_handshake_and_the_control_side_sends_through_the_graph() {
    let (mut rig, tunnel, _) = rig(false);
    let inner = ipv4(ip(10, 0, 1, 2), ip(10, 9, 0, 5), 17, 64, &[0; 8]);
    rig.inject(0, &[eth(MAC0, HOST_A, 0x0800, &inner)]);
    assert!(rig.sent(1).is_empty());
    assert_eq!(rig.error("wg4-encrypt", "no-session"), 1);
    let shared = rig.fwd.wireguard_tunnel(tunnel).unwrap().shared.clone();
    assert!(shared.peers[0].want_handshake.load(Ordering::Relaxed));
    // Not in any peer's allowed IPs: no peer.
    let stray = ipv4(ip(10, 0, 1, 2), ip(10, 9, 1, 5), 17, 64, &[0; 8]);
    rig.fwd
        .add_route(
            ip(10, 9, 1, 0),
            24,
            &[Path {
                next_hop: 0,
                interface: rig.fwd.interface_by_name("wg0").unwrap().index,
            }],
        )
        .unwrap();
    rig.commit();
    rig.inject(0, &[eth(MAC0, HOST_A, 0x0800, &stray)]);
    assert_eq!(rig.error("wg4-encrypt", "no-peer"), 1);

    // A handshake message of the control side's, to the peer.
    let mut dg = WgDatagram::new(tunnel, sa(PEER, PEER_PORT));
    dg.bytes[..4].copy_from_slice(&[1, 0, 0, 0]);
    dg.len = 148;
    rig.fwd.wireguard_output().push(dg).unwrap();
    // A packet it decrypted itself, received on the tunnel.
    let mut dg = WgDatagram::new(tunnel, sa(PEER, PEER_PORT));
    let reply = ipv4(ip(10, 9, 0, 5), ip(10, 0, 1, 2), 17, 64, &[0; 8]);
    dg.bytes[..reply.len()].copy_from_slice(&reply);
    dg.len = reply.len() as u16;
    dg.inner = true;
    rig.fwd.wireguard_output().push(dg).unwrap();
    rig.run();
    let sent = rig.sent(1);
    assert_eq!(sent.len(), 1);
    let mut msg = vec![0u8; 148];
    msg[0] = 1;
    assert_eq!(
        sent[0],
        eth(HOST_B, MAC1, 0x0800, &{
            let mut p = ipv4(OURS, PEER, 17, 64, &udp(OUR_PORT, PEER_PORT, &msg));
            p[4..6].copy_from_slice(&[0, 0]);
            fix_ip_checksum(&mut p);
            p
        })
    );
    let mut expect = reply.clone();
    expect[8] -= 1;
    fix_ip_checksum(&mut expect);
    assert_eq!(rig.sent(0), vec![eth(HOST_A, MAC0, 0x0800, &expect)]);
    rig.assert_no_leaks();
}

#[test]
fn messages_of_a_session_the_control_side_has_not_confirmed_are_punted() {
    let (mut rig, tunnel, theirs) = rig(true);
    // A responder's session, not yet confirmed by the initiator's first message: the control
    // side opens it (and confirms it), not the data path.
    let mut peers = vec![rig.fwd.wireguard_tunnel(tunnel).unwrap().peers[0].clone()];
    peers[0].send = None;
    let mut receivers = FastMap::default();
    receivers.insert(OUR_INDEX, WgReceiver::Pending);
    rig.fwd
        .set_wireguard_sessions(tunnel, peers, receivers)
        .unwrap();
    rig.commit();
    let ok = ipv4(ip(10, 9, 0, 5), ip(10, 0, 1, 2), 17, 64, &[0; 8]);
    let msg = from_peer(&theirs, 0, &ok);
    rig.inject(1, &[underlay(&msg)]);
    assert!(rig.sent(0).is_empty());
    assert_eq!(rig.error("wg4-decrypt", "punted"), 1);
    let shared = rig.fwd.wireguard_tunnel(tunnel).unwrap().shared.clone();
    assert_eq!(shared.punts.pop().expect("punted").data(), &msg[..]);
    // A full queue is a counted drop, never a wait.
    for _ in 0..graph_nodes::wireguard::PUNT_QUEUE_LEN {
        shared
            .punts
            .push(WgDatagram::new(tunnel, sa(0, 0)))
            .unwrap();
    }
    rig.inject(1, &[underlay(&msg)]);
    assert_eq!(rig.error("wg4-decrypt", "punt-queue-full"), 1);
    while shared.punts.pop().is_some() {}
    rig.assert_no_leaks();
}

#[test]
fn an_l3_cross_connect_carries_ip_payload_through_a_tunnel_both_ways() {
    let (mut rig, _, theirs) = rig(true);
    let wg0 = rig.fwd.interface_by_name("wg0").unwrap().index;
    let eth0 = rig.ports[0].index;
    rig.fwd
        .l3_cross_connect(eth0, wg0, ip(10, 9, 0, 1), ip(10, 0, 1, 2))
        .unwrap();
    rig.commit();
    // Into the tunnel by the cross-connect, not the FIB (the destination must still be in the
    // peer's allowed IPs: cryptokey routing picks the peer).
    let out = ipv4(ip(10, 9, 0, 7), ip(10, 9, 0, 9), 17, 64, &[1; 8]);
    rig.inject(0, &[eth(MAC0, HOST_A, 0x0800, &out)]);
    let sent = rig.sent(1);
    assert_eq!(sent.len(), 1);
    let mut msg = sent[0][14 + 28..].to_vec();
    let (_, range) = transport::open(&theirs, &mut msg).unwrap();
    let mut expect = out.clone();
    expect[8] -= 1;
    fix_ip_checksum(&mut expect);
    assert_eq!(&msg[range.start..range.start + out.len()], &expect[..]);
    // And back: what the tunnel opens leaves by eth0 to host A, whatever its destination.
    let back = ipv4(ip(10, 9, 0, 5), ip(192, 168, 7, 7), 17, 64, &[2; 8]);
    rig.inject(1, &[underlay(&from_peer(&theirs, 0, &back))]);
    let mut expect = back.clone();
    expect[8] -= 1;
    fix_ip_checksum(&mut expect);
    assert_eq!(rig.sent(0), vec![eth(HOST_A, MAC0, 0x0800, &expect)]);
    assert_eq!(rig.total_errors(), 0);
    let runtime = rig.graph.handle().runtime();
    let packets = |node: &str| runtime.node(node).map_or(0, |n| n.packets);
    assert_eq!(
        (packets("ip4-l3xc"), packets("ip4-lookup")),
        (2, 2),
        "the inner packets by the cross-connect, only the two outer ones looked up"
    );
    rig.assert_no_leaks();
}

#[test]
fn an_l3_cross_connect_carries_ipv6_through_a_tunnel_both_ways() {
    let (mut rig, _, theirs) = rig(true);
    let wg0 = rig.fwd.interface_by_name("wg0").unwrap().index;
    let eth0 = rig.ports[0].index;
    rig.fwd
        .l3_cross_connect(eth0, wg0, ip(10, 9, 0, 1), ip(10, 0, 1, 2))
        .unwrap();
    rig.commit();
    // Into the tunnel: the peer whose allowed IPv6 prefixes hold the destination.
    let out = ipv6("fd00:9::7", "fd00:9::9", 64, &[1; 8]);
    rig.inject(0, &[eth(MAC0, HOST_A, 0x86dd, &out)]);
    let sent = rig.sent(1);
    assert_eq!(sent.len(), 1, "errors: {}", rig.total_errors());
    let mut msg = sent[0][14 + 28..].to_vec();
    let (_, range) = transport::open(&theirs, &mut msg).unwrap();
    let mut expect = out.clone();
    expect[7] -= 1;
    assert_eq!(&msg[range.start..range.start + out.len()], &expect[..]);
    assert!(msg[range.start + out.len()..range.end]
        .iter()
        .all(|&b| b == 0));
    // And back: the inner IPv6 packet leaves by eth0 to host A, hop limit decremented.
    let back = ipv6("fd00:9::5", "fd00:1::2", 64, &[2; 8]);
    rig.inject(1, &[underlay(&from_peer(&theirs, 0, &back))]);
    let mut expect = back.clone();
    expect[7] -= 1;
    assert_eq!(rig.sent(0), vec![eth(HOST_A, MAC0, 0x86dd, &expect)]);
    assert_eq!(rig.total_errors(), 0);
    // An inner IPv6 source outside the peer's allowed prefixes is refused; so is an IPv6
    // packet whose payload length runs past what was sealed.
    let spoofed = ipv6("fd00:77::5", "fd00:1::2", 64, &[3; 8]);
    let mut lying = ipv6("fd00:9::5", "fd00:1::2", 64, &[4; 8]);
    lying[4..6].copy_from_slice(&200u16.to_be_bytes());
    rig.inject(
        1,
        &[
            underlay(&from_peer(&theirs, 1, &spoofed)),
            underlay(&from_peer(&theirs, 2, &lying)),
        ],
    );
    assert!(rig.sent(0).is_empty());
    assert_eq!(rig.error("wg4-decrypt", "source-not-allowed"), 1);
    assert_eq!(rig.error("wg4-decrypt", "not-ip"), 1);
    // An IPv6 destination no peer's allowed IPs hold finds no peer.
    let nowhere = ipv6("fd00:9::7", "fd00:42::1", 64, &[5; 8]);
    rig.inject(0, &[eth(MAC0, HOST_A, 0x86dd, &nowhere)]);
    assert!(rig.sent(1).is_empty());
    assert_eq!(rig.error("wg4-encrypt", "no-peer"), 1);
    rig.assert_no_leaks();
}

#[test]
fn a_tunnel_in_a_table_routes_what_it_decrypts_there_and_takes_that_tables_routes() {
    let (mut rig, _, theirs) = rig(true);
    let wg = rig.fwd.interface_by_name("wg0").unwrap().index;
    let red = rig.fwd.add_table("red").unwrap();
    // Not while the default table's route goes through it.
    assert_eq!(
        rig.fwd.set_interface_table(wg, red),
        Err(graph_nodes::ForwardingError::HasRoutes(wg))
    );
    assert!(rig.fwd.remove_route(ip(10, 9, 0, 0), 24));
    rig.fwd.set_interface_table(wg, red).unwrap();
    let via = Path {
        next_hop: ip(10, 9, 0, 1),
        interface: wg,
    };
    rig.fwd
        .add_route_in(red, ip(10, 9, 0, 0), 24, &[via])
        .unwrap();
    rig.commit();
    // Decrypted, the peer's packet for host A is looked up in red, which has no route to it
    // (the default table's connected route is not red's).
    let reply = ipv4(ip(10, 9, 0, 5), ip(10, 0, 1, 2), 17, 64, &[0; 8]);
    rig.inject(1, &[underlay(&from_peer(&theirs, 0, &reply))]);
    assert!(rig.sent(0).is_empty());
    assert_eq!(rig.error(graph_nodes::names::IP4_LOOKUP, "no-route"), 1);
    // Host A's packet for the peer: the default table has no route either.
    let to_peer = ipv4(ip(10, 0, 1, 2), ip(10, 9, 0, 5), 17, 64, &[0; 8]);
    rig.inject(0, &[eth(MAC0, HOST_A, 0x0800, &to_peer)]);
    assert!(rig.sent(1).is_empty());
    assert_eq!(rig.error(graph_nodes::names::IP4_LOOKUP, "no-route"), 2);

    // Next-table routes both ways: red's packets into the default table, the default table's
    // for the peer's prefix into red, whose route goes into the tunnel.
    rig.fwd
        .add_next_table_route_in(red, 0, 0, graph_nodes::TableId::DEFAULT)
        .unwrap();
    rig.fwd
        .add_next_table_route_in(graph_nodes::TableId::DEFAULT, ip(10, 9, 0, 0), 24, red)
        .unwrap();
    rig.commit();
    rig.inject(1, &[underlay(&from_peer(&theirs, 1, &reply))]);
    assert_eq!(rig.sent(0).len(), 1, "to host A through the default table");
    rig.inject(0, &[eth(MAC0, HOST_A, 0x0800, &to_peer)]);
    assert_eq!(rig.sent(1).len(), 1, "sealed to the peer through red");
    assert_eq!(rig.error(graph_nodes::names::IP4_LOOKUP, "no-route"), 2);
    rig.assert_no_leaks();
}
