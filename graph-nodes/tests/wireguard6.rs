//! WireGuard over an IPv6 underlay on a hand-driven graph: `wg6-encrypt` seals what is routed
//! to a tunnel whose address is IPv6 into UDP/IPv6 to the peer's endpoint, byte for byte as
//! built here (the transport message sealed by the protocol crate with the same keys, the UDP
//! checksum by an independent sum over the pseudo-header); `ip6-local` hands UDP for the
//! tunnel's address and port to `wg6-decrypt`, which verifies the checksum and opens what the
//! peer sealed; every refusal is a named counter (a zero or wrong checksum, a UDP length other
//! than the payload's, the wrong port or address, an unknown receiver index, a spoofed inner
//! source), handshakes are punted with their IPv6 source, and the control side's datagrams
//! leave through `wg-control-input` in IPv6 with their checksum.

mod common;

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use common::*;
use graph_nodes::forwarding::Path6;
use graph_nodes::state::FastMap;
use graph_nodes::wireguard::{WgDatagram, WgPeer, WgReceiver, WgRecvSession, WgSendSession};
use graph_nodes::Path;
use wireguard::replay::ReplayWindow;
use wireguard::transport::{self, SendCounter, TransportKeys};

const OURS: &str = "2001:db8:1::1";
/// Another address of ours on the underlay port (no tunnel listens there).
const OTHER: &str = "2001:db8:1::7";
const PEER: &str = "2001:db8:1::2";
const OUR_PORT: u16 = 51820;
const PEER_PORT: u16 = 51821;
const OUR_INDEX: u32 = 0x1111;
const PEER_INDEX: u32 = 0x2222;

fn a(s: &str) -> [u8; 16] {
    s.parse::<Ipv6Addr>().unwrap().octets()
}

fn w(s: &str) -> u128 {
    u128::from_be_bytes(a(s))
}

fn peer_endpoint() -> SocketAddr {
    (PEER.parse::<Ipv6Addr>().unwrap(), PEER_PORT).into()
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

fn peer(send: Option<TransportKeys>) -> WgPeer {
    WgPeer {
        endpoint: Some(peer_endpoint()),
        allowed: vec![(ip(10, 9, 0, 0), 24)],
        allowed6: vec![(w("fd00:9::"), 32)],
        send: send.map(|keys| {
            Arc::new(WgSendSession {
                keys,
                counter: Arc::new(SendCounter::new()),
            })
        }),
    }
}

/// eth0: hosts (10.0.1.254/24 and fd00:1::fe/64, host A at 10.0.1.2 and fd00:1::2); eth1: the
/// IPv6 underlay (2001:db8:1::1/64 and ::7, the peer at ::2) and 192.0.2.1/24; wg0 on
/// [2001:db8:1::1]:51820 to the peer, allowed 10.9.0.0/24 and fd00:9::/32, both routed. With
/// `session`, keys are in place.
fn rig(session: bool) -> (Rig, u32, TransportKeys) {
    let (ours, theirs) = keys();
    let mut tunnel = 0;
    let mut rig = Rig::new(&[MAC0, MAC1], |f, p| {
        f.add_address(p[0], ip(10, 0, 1, 254), 24).unwrap();
        f.add_neighbor(p[0], ip(10, 0, 1, 2), HOST_A).unwrap();
        f.add_address6(p[0], w("fd00:1::fe"), 64).unwrap();
        f.add_neighbor6(p[0], w("fd00:1::2"), HOST_A).unwrap();
        f.add_address6(p[1], w(OURS), 64).unwrap();
        f.add_address6(p[1], w(OTHER), 64).unwrap();
        f.add_address(p[1], ip(192, 0, 2, 1), 24).unwrap();
        f.add_neighbor6(p[1], w(PEER), HOST_B).unwrap();
        let local = IpAddr::V6(OURS.parse().unwrap());
        let (wg, t) = f
            .add_wireguard_tunnel("wg0", local, OUR_PORT, vec![peer(None)], 1500)
            .unwrap();
        tunnel = t;
        let via = Path {
            next_hop: ip(10, 9, 0, 1),
            interface: wg,
        };
        f.add_route(ip(10, 9, 0, 0), 24, &[via]).unwrap();
        let via6 = Path6 {
            next_hop: w("fd00:9::1"),
            interface: wg,
        };
        f.add_route6(w("fd00:9::"), 32, &[via6]).unwrap();
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
        rig.fwd
            .set_wireguard_sessions(tunnel, vec![peer(Some(ours))], receivers)
            .unwrap();
        rig.commit();
    }
    (rig, tunnel, theirs)
}

/// A transport message sealed with `keys`: `inner` at `counter`.
fn sealed(keys: &TransportKeys, counter: u64, inner: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; transport::sealed_len(inner.len())];
    buf[16..16 + inner.len()].copy_from_slice(inner);
    let n = transport::seal(keys, counter, &mut buf, inner.len()).unwrap();
    buf.truncate(n);
    buf
}

/// UDP/IPv6 from `src` to `dst` carrying `msg`, its checksum by an independent sum over the
/// pseudo-header (RFC 8200 8.1) and the datagram, hop limit 64, flow label 0.
fn udp6(src: (&str, u16), dst: (&str, u16), msg: &[u8]) -> Vec<u8> {
    let mut u = udp(src.1, dst.1, msg);
    let mut over = Vec::new();
    over.extend_from_slice(&a(src.0));
    over.extend_from_slice(&a(dst.0));
    over.extend_from_slice(&(u.len() as u32).to_be_bytes());
    over.extend_from_slice(&[0, 0, 0, 17]);
    over.extend_from_slice(&u);
    let c = match inet_checksum(&over) {
        0 => 0xffff,
        c => c,
    };
    u[6..8].copy_from_slice(&c.to_be_bytes());
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&(u.len() as u16).to_be_bytes());
    p.extend_from_slice(&[17, 64]);
    p.extend_from_slice(&a(src.0));
    p.extend_from_slice(&a(dst.0));
    p.extend_from_slice(&u);
    p
}

/// `msg` from the peer's endpoint to ours, in Ethernet to eth1.
fn underlay(msg: &[u8]) -> Vec<u8> {
    eth(
        MAC1,
        HOST_B,
        0x86dd,
        &udp6((PEER, PEER_PORT), (OURS, OUR_PORT), msg),
    )
}

/// What leaves eth1 to the peer for `msg`.
fn to_peer(msg: &[u8]) -> Vec<u8> {
    eth(
        HOST_B,
        MAC1,
        0x86dd,
        &udp6((OURS, OUR_PORT), (PEER, PEER_PORT), msg),
    )
}

#[test]
fn routed_packets_of_both_families_leave_in_ipv6_byte_for_byte_and_replies_are_opened() {
    let (mut rig, _, theirs) = rig(true);
    let (ours, _) = keys();
    assert_eq!(
        rig.fwd.interface_by_name("wg0").unwrap().mtu,
        1420,
        "1500 less 80"
    );
    let inner = ipv4(
        ip(10, 0, 1, 2),
        ip(10, 9, 0, 5),
        17,
        64,
        &udp(1, 2, b"hello"),
    );
    let inner6 = ipv6("fd00:1::2", "fd00:9::5", 64, &[0xa5; 37]);
    rig.inject(
        0,
        &[
            eth(MAC0, HOST_A, 0x0800, &inner),
            eth(MAC0, HOST_A, 0x86dd, &inner6),
        ],
    );
    let mut routed = inner.clone();
    routed[8] -= 1;
    fix_ip_checksum(&mut routed);
    let mut routed6 = inner6.clone();
    routed6[7] -= 1;
    let sent = rig.sent(1);
    assert_eq!(sent.len(), 2, "errors: {}", rig.total_errors());
    assert_eq!(sent[0], to_peer(&sealed(&ours, 0, &routed)));
    assert_eq!(sent[1], to_peer(&sealed(&ours, 1, &routed6)));
    let mut msg = sent[1][14 + 48..].to_vec();
    let (counter, range) = transport::open(&theirs, &mut msg).unwrap();
    assert_eq!(counter, 1);
    assert_eq!(&msg[range.start..range.start + routed6.len()], &routed6[..]);
    assert_eq!(rig.error("wg4-encrypt", "no-tunnel"), 0);

    // The peer's replies, IPv4 and IPv6 inside, come out of eth0 to host A.
    let reply = ipv4(
        ip(10, 9, 0, 5),
        ip(10, 0, 1, 2),
        17,
        64,
        &udp(2, 1, b"world"),
    );
    let reply6 = ipv6("fd00:9::5", "fd00:1::2", 64, &[0x5a; 21]);
    rig.inject(
        1,
        &[
            underlay(&sealed(&theirs, 0, &reply)),
            underlay(&sealed(&theirs, 1, &reply6)),
        ],
    );
    let mut expect = reply.clone();
    expect[8] -= 1;
    fix_ip_checksum(&mut expect);
    let mut expect6 = reply6.clone();
    expect6[7] -= 1;
    assert_eq!(
        rig.sent(0),
        vec![
            eth(HOST_A, MAC0, 0x0800, &expect),
            eth(HOST_A, MAC0, 0x86dd, &expect6)
        ]
    );
    assert_eq!(rig.total_errors(), 0);
    rig.assert_no_leaks();
}

#[test]
fn a_packet_of_the_tunnels_full_mtu_is_padded_only_up_to_it_and_fills_the_underlay() {
    // 1420 is the tunnel's MTU over IPv6 and not a multiple of 16: padded to 1424, the
    // datagram would be 1504 bytes on a 1500-byte underlay (refused as too big).
    let (mut rig, _, theirs) = rig(true);
    let (ours, _) = keys();
    let inner6 = ipv6("fd00:1::2", "fd00:9::5", 64, &[0x3c; 1420 - 40]);
    rig.inject(0, &[eth(MAC0, HOST_A, 0x86dd, &inner6)]);
    let mut routed6 = inner6.clone();
    routed6[7] -= 1;
    let sent = rig.sent(1);
    assert_eq!(sent.len(), 1, "errors: {}", rig.total_errors());
    assert_eq!(sent[0].len(), 14 + 1500, "the underlay's MTU exactly");
    // The message: header, the packet with no padding (it is at the MTU already), tag.
    let mut buf = vec![0u8; 16 + routed6.len() + 16];
    buf[16..16 + routed6.len()].copy_from_slice(&routed6);
    let n = transport::seal_within(&ours, 0, &mut buf, routed6.len(), 1420).unwrap();
    assert_eq!(n, buf.len());
    assert_eq!(sent[0], to_peer(&buf));
    let mut msg = sent[0][14 + 48..].to_vec();
    let (_, range) = transport::open(&theirs, &mut msg).unwrap();
    assert_eq!(&msg[range], &routed6[..]);
    // One byte under: padded to the MTU, no further.
    let short = ipv6("fd00:1::2", "fd00:9::5", 64, &[0x3c; 1410 - 40]);
    rig.inject(0, &[eth(MAC0, HOST_A, 0x86dd, &short)]);
    assert_eq!(
        rig.sent(1)[0].len(),
        14 + 1500,
        "1410 padded to 1420, not 1424"
    );
    assert_eq!(rig.total_errors(), 0);
    rig.assert_no_leaks();
}

#[test]
fn bad_input_over_ipv6_is_counted_by_name() {
    let (mut rig, tunnel, theirs) = rig(true);
    let ok = ipv4(ip(10, 9, 0, 5), ip(10, 0, 1, 2), 17, 64, &[0; 8]);
    let good = underlay(&sealed(&theirs, 3, &ok));
    // The UDP checksum is at 14 + 40 + 6.
    let mut zero = underlay(&sealed(&theirs, 4, &ok));
    zero[60..62].copy_from_slice(&[0, 0]);
    let mut wrong = underlay(&sealed(&theirs, 5, &ok));
    wrong[61] ^= 0x10;
    // A byte of the message changed, the checksum not: the checksum catches it first.
    let mut corrupt = underlay(&sealed(&theirs, 6, &ok));
    *corrupt.last_mut().unwrap() ^= 1;
    // A UDP length shorter than the IPv6 payload (the checksum fixed for it does not matter:
    // the length is checked first).
    let mut short = underlay(&sealed(&theirs, 7, &ok));
    let l = u16::from_be_bytes([short[58], short[59]]) - 1;
    short[58..60].copy_from_slice(&l.to_be_bytes());
    let wrong_port = eth(
        MAC1,
        HOST_B,
        0x86dd,
        &udp6(
            (PEER, PEER_PORT),
            (OURS, OUR_PORT + 1),
            &sealed(&theirs, 8, &ok),
        ),
    );
    let other_address = eth(
        MAC1,
        HOST_B,
        0x86dd,
        &udp6(
            (PEER, PEER_PORT),
            (OTHER, OUR_PORT),
            &sealed(&theirs, 9, &ok),
        ),
    );
    // The tunnel's port on our IPv4 address: no tunnel over IPv4 listens there.
    let over_ipv4 = eth(
        MAC1,
        HOST_B,
        0x0800,
        &ipv4(
            ip(192, 0, 2, 2),
            ip(192, 0, 2, 1),
            17,
            64,
            &udp(PEER_PORT, OUR_PORT, &sealed(&theirs, 10, &ok)),
        ),
    );
    let mut unknown = sealed(&theirs, 11, &ok);
    unknown[4..8].copy_from_slice(&0xdead_u32.to_le_bytes());
    let spoofed = ipv4(ip(10, 8, 0, 5), ip(10, 0, 1, 2), 17, 64, &[0; 8]);
    let spoofed6 = ipv6("fd00:77::5", "fd00:1::2", 64, &[3; 8]);
    let mut handshake = vec![0u8; 148];
    handshake[0] = 1;
    rig.inject(
        1,
        &[
            good.clone(),
            good,
            zero,
            wrong,
            corrupt,
            short,
            wrong_port,
            other_address,
            over_ipv4,
            underlay(&unknown),
            underlay(&[4, 0, 0]),
            underlay(&[9, 0, 0, 0, 1, 2, 3, 4]),
            underlay(&sealed(&theirs, 12, &spoofed)),
            underlay(&sealed(&theirs, 13, &spoofed6)),
            underlay(&sealed(&theirs, 14, &[])),
            underlay(&handshake),
        ],
    );
    assert_eq!(rig.sent(0).len(), 1, "only the first good one");
    let e = |name| rig.error("wg6-decrypt", name);
    assert_eq!(e("replay"), 1);
    assert_eq!(e("zero-checksum"), 1);
    assert_eq!(e("bad-checksum"), 2);
    assert_eq!(e("bad-length"), 1);
    assert_eq!(e("unknown-index"), 1);
    assert_eq!(e("truncated"), 1);
    assert_eq!(e("unknown-type"), 1);
    assert_eq!(e("source-not-allowed"), 2);
    assert_eq!(e("keepalive"), 1);
    assert_eq!(e("punted"), 1);
    assert_eq!(e("bad-tag"), 0);
    assert_eq!(rig.error("ip6-local", "unknown-protocol"), 2);
    assert_eq!(rig.error("ip4-local", "unknown-protocol"), 1);
    for name in ["truncated", "replay", "punted"] {
        assert_eq!(rig.error("wg4-decrypt", name), 0, "{name}");
    }
    let shared = rig.fwd.wireguard_tunnel(tunnel).unwrap().shared.clone();
    let punted = shared.punts.pop().expect("the handshake was punted");
    assert_eq!(
        (punted.peer, punted.data()),
        (peer_endpoint(), &handshake[..])
    );
    rig.assert_no_leaks();
}

#[test]
fn the_control_sides_datagrams_leave_in_ipv6_with_their_checksum() {
    let (mut rig, tunnel, _) = rig(false);
    let inner = ipv4(ip(10, 0, 1, 2), ip(10, 9, 0, 5), 17, 64, &[0; 8]);
    rig.inject(0, &[eth(MAC0, HOST_A, 0x0800, &inner)]);
    assert!(rig.sent(1).is_empty());
    assert_eq!(rig.error("wg6-encrypt", "no-session"), 1);

    // A handshake initiation of the control side's, to the peer.
    let mut init = vec![0u8; 148];
    init[0] = 1;
    init[147] = 0x77;
    let mut dg = WgDatagram::new(tunnel, peer_endpoint());
    dg.bytes[..init.len()].copy_from_slice(&init);
    dg.len = init.len() as u16;
    rig.fwd.wireguard_output().push(dg).unwrap();
    // A cookie reply (64 bytes), and one to an IPv4 address: not of the tunnel's family.
    let mut cookie = vec![0u8; 64];
    cookie[0] = 3;
    cookie[63] = 0x33;
    let mut dg = WgDatagram::new(tunnel, peer_endpoint());
    dg.bytes[..cookie.len()].copy_from_slice(&cookie);
    dg.len = cookie.len() as u16;
    rig.fwd.wireguard_output().push(dg).unwrap();
    let mut dg = WgDatagram::new(tunnel, "192.0.2.2:51821".parse().unwrap());
    dg.len = 64;
    rig.fwd.wireguard_output().push(dg).unwrap();
    // A packet it decrypted itself, received on the tunnel.
    let reply = ipv6("fd00:9::5", "fd00:1::2", 64, &[7; 8]);
    let mut dg = WgDatagram::new(tunnel, peer_endpoint());
    dg.bytes[..reply.len()].copy_from_slice(&reply);
    dg.len = reply.len() as u16;
    dg.inner = true;
    rig.fwd.wireguard_output().push(dg).unwrap();
    rig.run();
    assert_eq!(rig.sent(1), vec![to_peer(&init), to_peer(&cookie)]);
    assert_eq!(rig.error("wg-control-input", "wrong-family"), 1);
    let mut expect = reply.clone();
    expect[7] -= 1;
    assert_eq!(rig.sent(0), vec![eth(HOST_A, MAC0, 0x86dd, &expect)]);
    rig.assert_no_leaks();
}

#[test]
fn a_tunnel_refuses_an_endpoint_of_the_other_family() {
    let mut v4_peer = peer(None);
    v4_peer.endpoint = Some("192.0.2.2:51821".parse().unwrap());
    let mut refused = None;
    let rig = Rig::new(&[MAC0, MAC1], |f, p| {
        f.add_address6(p[1], w(OURS), 64).unwrap();
        let local = IpAddr::V6(OURS.parse().unwrap());
        refused = Some(
            f.add_wireguard_tunnel("wg0", local, OUR_PORT, vec![v4_peer], 1500)
                .unwrap_err(),
        );
    });
    let refused = refused.unwrap().to_string();
    assert!(refused.contains("not of the family"), "{refused}");
    assert!(rig.fwd.interface_by_name("wg0").is_none());
}
