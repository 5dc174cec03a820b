//! An L3 cross-connect's next hops through the control side: each peer an IPv4 next hop, an
//! IPv6 one or both, applied as a `Change` (as NSM's IP payload and the admin API make them)
//! and listed back; what cannot be a peer refused by name, leaving nothing behind.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use quiver::control::owner::{Change, ConfigOwner};
use quiver::forwarder::{l3_peer, L3Peer};
use quiver::{ForwarderError, Owned};

use crate::support::{memif_master, socket, start};

fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

fn refused<T: std::fmt::Debug>(r: Result<T, ForwarderError>) -> String {
    match r {
        Err(ForwarderError::InvalidArgument(m)) => m,
        other => panic!("not refused as an invalid argument: {other:?}"),
    }
}

#[test]
fn l3_peers_of_either_family_cross_connect_and_what_is_not_a_peer_is_refused() {
    let (mut f, _pool) = start("");
    let sock = socket("l3peers", 0);
    let m0 = f.add_port(&memif_master("m0", &sock, 0), None).unwrap();
    let m1 = f.add_port(&memif_master("m1", &sock, 1), None).unwrap();
    let owner = ConfigOwner::start(f, Duration::from_millis(50));
    let control = owner.control();
    let xc = |peer_b: L3Peer, peer_a: L3Peer| Change::L3CrossConnect {
        a: "m0".into(),
        b: "m1".into(),
        peer_b,
        peer_a,
        owner: Some("c1".into()),
    };

    // Ethernet memifs have a link layer: a peer without a next hop cannot be reached.
    let m = refused(control.apply(xc(L3Peer::NONE, v6("fd00:1::2").into())));
    assert!(m.contains("needs a next hop (IPv4, IPv6 or both)"), "{m}");
    for (bad, why) in [
        (
            L3Peer::from(v6("ff02::1")),
            "ff02::1: not a unicast IPv6 address",
        ),
        (L3Peer::from(v6("fe80::2")), "fe80::2: link-local"),
        (
            L3Peer::from(Ipv4Addr::BROADCAST),
            "not a unicast IPv4 address",
        ),
    ] {
        let m = refused(control.apply(xc(bad, v6("fd00:1::2").into())));
        assert!(m.contains(why), "{bad}: {m}");
    }
    assert!(control.view().l3_cross_connect_of(m0).is_none());
    assert!(control.view().owned_by("c1").is_empty(), "nothing left");

    // IPv6 only each way (NSM_CIDR_PREFIX=2001:db8::/116).
    let (to_b, to_a) = (
        L3Peer::from(v6("2001:db8::")),
        L3Peer::from(v6("2001:db8::1")),
    );
    control.apply(xc(to_b, to_a)).unwrap();
    let view = control.view();
    assert_eq!(view.l3_cross_connect_of(m0), Some((m1, to_b)));
    assert_eq!(view.l3_cross_connect_of(m1), Some((m0, to_a)));
    assert_eq!(
        view.owned_by("c1"),
        vec![Owned::L3CrossConnect("m0".into(), "m1".into())]
    );
    control
        .apply(Change::Disconnect { port: "m1".into() })
        .unwrap();
    assert!(control.view().l3_cross_connect_of(m0).is_none());

    // Dual stack, from address lists as the admin API takes them, in either order.
    let list = |s: &[&str]| -> Vec<IpAddr> { s.iter().map(|a| a.parse().unwrap()).collect() };
    let to_b = l3_peer("peer_b", &list(&["2001:db8::", "172.16.1.100"])).unwrap();
    let to_a = l3_peer("peer_a", &list(&["172.16.1.101", "2001:db8::1"])).unwrap();
    assert_eq!(
        to_b,
        L3Peer {
            v4: Some(Ipv4Addr::new(172, 16, 1, 100)),
            v6: Some(v6("2001:db8::")),
        }
    );
    control.apply(xc(to_b, to_a)).unwrap();
    assert_eq!(control.view().l3_cross_connect_of(m1), Some((m0, to_a)));
    let m = refused(l3_peer("peer_b", &list(&["10.0.0.1", "10.0.0.2"])));
    assert!(m.contains("peer_b: two next hops of one family"), "{m}");
    let m = refused(l3_peer("peer_a", &list(&["fd00::1", "fd00::2"])));
    assert!(m.contains("peer_a: two next hops of one family"), "{m}");
    assert_eq!(l3_peer("p", &[]).unwrap(), L3Peer::NONE);
    owner.stop().unwrap().stop();
}
