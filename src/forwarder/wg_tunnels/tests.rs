//! Tunnels over either underlay family on a forwarder with one memif port (no root needed):
//! the address's family decides the MTU and what endpoints may be, refusals say why, and a
//! peer's handshake from a new IPv6 source moves its endpoint there (roaming), in what
//! `show wireguard` reports and in what the data path sends to.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use ::wireguard::{Device, PeerId, PresharedKey, PrivateKey};

use crate::config::{
    MemifMode, MemifRole, MemifSection, PortSection, WireguardPeerSection, WireguardSection,
};
use crate::control::owner::test_forwarder;
use crate::forwarder::{Forwarder, ForwarderError};

const PEER_KEY: &str = "YC5kWEPQ5pjNh3fhzRRLqNAQMvBPxoPwJcaX5Z7dbkM=";

/// A forwarder with memif port `up` holding 192.0.2.1/24 and 2001:db8:1::1/64 (the socket in a
/// directory of its own, removed by the caller).
fn forwarder(tag: &str) -> (Forwarder, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("quiver-wg6-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut f = test_forwarder();
    let port = PortSection::Memif(MemifSection {
        name: "up".into(),
        mac: None,
        mtu: 1500,
        role: MemifRole::Master,
        socket: dir.join("memif.sock").display().to_string(),
        id: 0,
        secret: None,
        mode: MemifMode::Ethernet,
        ring_size: 1024,
        buffer_size: 2048,
        queues: 1,
        netns: None,
    });
    f.add_port(&port, None).unwrap();
    f.add_address("up", "192.0.2.1".parse().unwrap(), 24, None)
        .unwrap();
    f.add_address("up", "2001:db8:1::1".parse().unwrap(), 64, None)
        .unwrap();
    (f, dir)
}

fn tunnel(name: &str, address: &str, endpoint: &str) -> WireguardSection {
    WireguardSection {
        name: name.into(),
        private_key: PrivateKey::random().to_base64(),
        listen_port: 51820,
        address: address.into(),
        peers: vec![WireguardPeerSection {
            public_key: PEER_KEY.into(),
            endpoint: endpoint.into(),
            allowed_ips: vec!["10.9.0.0/24".into(), "fd00:9::/64".into()],
            persistent_keepalive: 0,
        }],
        ..WireguardSection::default()
    }
}

fn refusal(f: &mut Forwarder, t: &WireguardSection) -> String {
    match f.add_wireguard(t, None) {
        Err(ForwarderError::InvalidArgument(m)) => m,
        other => panic!("{t:?}: {other:?}"),
    }
}

#[test]
fn a_tunnels_address_family_decides_its_mtu_and_its_peers_endpoints() {
    let (mut f, dir) = forwarder("family");
    let six = f
        .add_wireguard(
            &tunnel("wg6", "2001:db8:1::1", "[2001:db8:1::2]:51821"),
            None,
        )
        .unwrap();
    // The same port over the other family is another tunnel.
    let four = f
        .add_wireguard(&tunnel("wg4", "192.0.2.1", "192.0.2.2:51821"), None)
        .unwrap();
    let mtu = |f: &Forwarder, i: graph_nodes::IfIndex| {
        f.forwarding
            .interfaces()
            .find(|x| x.index == i)
            .unwrap()
            .mtu
    };
    assert_eq!((mtu(&f, six), mtu(&f, four)), (1420, 1440));
    let status = f.wireguard_status();
    assert_eq!(status[0].listen.to_string(), "[2001:db8:1::1]:51820");
    assert_eq!(
        status[0].peers[0].endpoint,
        Some("[2001:db8:1::2]:51821".parse().unwrap())
    );
    assert_eq!(status[1].listen.to_string(), "192.0.2.1:51820");

    for (address, endpoint, why) in [
        ("2001:db8:1::1", "192.0.2.2:51821", "is not of the family"),
        ("192.0.2.1", "[2001:db8:1::2]:51821", "is not of the family"),
        ("2001:db8:1::1", "[ff02::1]:51821", "not a unicast address"),
        ("2001:db8:1::1", "[fe80::2]:51821", "not a unicast address"),
        (
            "2001:db8:1::1",
            "[2001:db8:1::2]:0",
            "not a unicast address",
        ),
        (
            "2001:db8:1::1",
            "2001:db8:1::2:51821",
            "is not IPv4:PORT or [IPv6]:PORT",
        ),
        ("2001:db8:9::1", "", "not an address of Quiver's"),
        ("fe80::1", "", "not a unicast address beyond the link"),
        ("2001:db8:1", "", "is not an IPv4 or IPv6 address"),
    ] {
        let m = refusal(&mut f, &tunnel("wgx", address, endpoint));
        assert!(m.contains(why), "{address} {endpoint}: {m}");
    }
    // Where a tunnel listens already.
    match f.add_wireguard(&tunnel("wgy", "2001:db8:1::1", ""), None) {
        Err(e) => assert!(e.to_string().contains("[2001:db8:1::1]:51820"), "{e}"),
        Ok(_) => panic!("two tunnels on one address and port"),
    }
    assert_eq!(f.wireguard_status().len(), 2);
    f.remove_wireguard("wg6").unwrap();
    f.remove_wireguard("wg4").unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_handshake_from_a_new_ipv6_source_moves_the_peers_endpoint() {
    let (mut f, dir) = forwarder("roam");
    let ours = PrivateKey::random();
    let mut t = tunnel("wg6", "2001:db8:1::1", "[2001:db8:1::2]:51821");
    t.private_key = ours.to_base64();
    let peer_key = PrivateKey::from_base64(PEER_KEY).unwrap();
    t.peers[0].public_key = peer_key.public_key().to_base64();
    f.add_wireguard(&t, None).unwrap();
    // The peer, from an address it moved to, initiates.
    let mut peer = Device::new(peer_key);
    let us = peer.add_peer(ours.public_key(), PresharedKey::default(), None);
    let mut init = [0u8; 256];
    let n = peer.initiate(us, Instant::now(), &mut init).unwrap();
    let moved: SocketAddr = "[2001:db8:1::99]:40000".parse().unwrap();
    let e = &f.wireguard[0];
    let mut dg = graph_nodes::wireguard::WgDatagram::new(e.tunnel, moved);
    dg.bytes[..n].copy_from_slice(&init[..n]);
    dg.len = n as u16;
    e.shared.punts.push(dg).unwrap();
    // The tunnel's pass, with a queue of the test's own: the forwarder's output queue is
    // the workers' to drain (wg-control-input sends what is on it).
    let out = graph_nodes::wireguard::ArrayQueue::new(16);
    f.wireguard[0].run(&out);
    let reply = out.pop().expect("a handshake response");
    assert!(
        f.wireguard_housekeeping(),
        "the new session and endpoint are published"
    );
    // The response went to where the initiation came from, and so does the data path now.
    assert_eq!((reply.peer, reply.data()[0]), (moved, 2));
    assert_eq!(f.wireguard_status()[0].peers[0].endpoint, Some(moved));
    let tunnel = f
        .forwarding
        .wireguard_tunnel(f.wireguard[0].tunnel)
        .unwrap();
    assert_eq!(tunnel.local, "2001:db8:1::1".parse::<IpAddr>().unwrap());
    assert_eq!(tunnel.peers[0].endpoint, Some(moved));
    assert_eq!(f.wireguard[0].device.peer(PeerId(0)).endpoint, Some(moved));
    f.remove_wireguard("wg6").unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
