//! The kernel's side of a node uplink against the real kernel: a "node" namespace whose NIC
//! (a veth) holds an address and a default gateway, and a "peer" namespace at its far end.
//! `find_uplink` finds the link, subnet, MTU and gateway; `NeighbourWatch` reports the
//! neighbour the kernel resolves when asked (`resolve`), and its removal. Both families: the
//! IPv6 uplink's gateway is the peer's link-local address, as a router's is.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use common::{system_ready, Netns};
use drivers::uplink::{find_uplink, resolve, Neighbour, NeighbourWatch};

/// The node's NIC and its peer, addressed: node 10.77.0.1/24 (gateway 10.77.0.254, which is
/// the peer's second address), peer 10.77.0.2/24.
fn node_and_peer() -> (Netns, Netns) {
    let node = Netns::new();
    let peer = Netns::new();
    common::run(&[
        "ip", "link", "add", "nic0", "netns", &node.name, "mtu", "1400", "type", "veth", "peer",
        "name", "nic0", "netns", &peer.name,
    ]);
    node.ip(&["addr", "add", "10.77.0.1/24", "dev", "nic0"]);
    node.ip(&["link", "set", "nic0", "up"]);
    node.ip(&[
        "route",
        "add",
        "default",
        "via",
        "10.77.0.254",
        "dev",
        "nic0",
    ]);
    peer.ip(&["addr", "add", "10.77.0.2/24", "dev", "nic0"]);
    peer.ip(&["addr", "add", "10.77.0.254/24", "dev", "nic0"]);
    peer.ip(&["link", "set", "nic0", "up"]);
    (node, peer)
}

/// The node's NIC and its peer over IPv6 (and no IPv4): node fd77::1/64 (gateway fe80::254,
/// the peer's second link-local address), peer fd77::2/64. Duplicate address detection is off
/// so that the addresses are usable at once.
fn node_and_peer6() -> (Netns, Netns) {
    let node = Netns::new();
    let peer = Netns::new();
    common::run(&[
        "ip", "link", "add", "nic0", "netns", &node.name, "mtu", "1400", "type", "veth", "peer",
        "name", "nic0", "netns", &peer.name,
    ]);
    for ns in [&node, &peer] {
        ns.sh("sysctl -qw net.ipv6.conf.nic0.disable_ipv6=0 net.ipv6.conf.nic0.accept_dad=0");
    }
    node.ip(&["addr", "add", "fd77::1/64", "dev", "nic0", "nodad"]);
    node.ip(&["link", "set", "nic0", "up"]);
    node.ip(&[
        "-6",
        "route",
        "add",
        "default",
        "via",
        "fe80::254",
        "dev",
        "nic0",
    ]);
    peer.ip(&["addr", "add", "fd77::2/64", "dev", "nic0", "nodad"]);
    peer.ip(&["addr", "add", "fe80::254/64", "dev", "nic0", "nodad"]);
    peer.ip(&["link", "set", "nic0", "up"]);
    (node, peer)
}

/// The MAC of `ns`'s nic0.
fn mac_of(ns: &Netns) -> [u8; 6] {
    let text = ns.sh("cat /sys/class/net/nic0/address");
    let text = String::from_utf8_lossy(&text.stdout).trim().to_string();
    let mac: Vec<u8> = text
        .split(':')
        .map(|b| u8::from_str_radix(b, 16).expect("hex"))
        .collect();
    mac.try_into().expect("six bytes")
}

/// Changes from `watch` until `want` is among them (at most 10 s).
fn wait_for_change(watch: &mut NeighbourWatch, want: Neighbour) -> Vec<Neighbour> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        let changes = watch.changes().expect("changes").expect("none lost");
        seen.extend(changes);
        if seen.contains(&want) {
            return seen;
        }
    }
    panic!("no {want:?} within 10 s; saw {seen:?}");
}

#[test]
fn finds_the_link_that_holds_an_address_with_its_subnet_mtu_and_gateway() {
    if !system_ready("finds_the_link_that_holds_an_address") {
        return;
    }
    let (node, _peer) = node_and_peer();
    let (found, missing) = node.run_in(|| {
        (
            find_uplink(Ipv4Addr::new(10, 77, 0, 1).into()).expect("netlink"),
            find_uplink(Ipv4Addr::new(10, 77, 0, 9).into()).expect("netlink"),
        )
    });
    let found = found.expect("nic0 holds 10.77.0.1");
    assert_eq!(found.interface, "nic0");
    assert_eq!(found.prefix_len, 24);
    assert_eq!(found.mtu, 1400);
    assert_eq!(found.gateway, Some(Ipv4Addr::new(10, 77, 0, 254).into()));
    assert_eq!(missing, None, "no link holds 10.77.0.9");
}

#[test]
fn finds_the_link_that_holds_an_ipv6_address_with_its_link_local_gateway() {
    if !system_ready("finds_the_link_that_holds_an_ipv6_address") {
        return;
    }
    let (node, _peer) = node_and_peer6();
    let ip = |t: &str| IpAddr::V6(t.parse::<Ipv6Addr>().expect("IPv6"));
    let (found, missing, v4) = node.run_in(move || {
        (
            find_uplink(ip("fd77::1")).expect("netlink"),
            find_uplink(ip("fd77::9")).expect("netlink"),
            find_uplink(Ipv4Addr::new(10, 77, 0, 1).into()).expect("netlink"),
        )
    });
    let found = found.expect("nic0 holds fd77::1");
    assert_eq!(found.interface, "nic0");
    assert_eq!(found.ip, ip("fd77::1"));
    assert_eq!(found.prefix_len, 64);
    assert_eq!(found.mtu, 1400);
    assert_eq!(found.gateway, Some(ip("fe80::254")));
    assert_eq!(missing, None, "no link holds fd77::9");
    assert_eq!(v4, None, "the node has no IPv4 address");
}

/// In `node`'s namespace: the uplink holding `ip` watched, its gateway `gw` asked of the
/// kernel (from a socket of its own, as a tunnel's creator asks), seen resolved at `mac` in a
/// change and in the table, then deleted and seen gone. Returns every change seen.
fn resolve_then_forget(node: &Netns, ip: IpAddr, gw: IpAddr, mac: [u8; 6]) -> Vec<Neighbour> {
    let node_name = node.name.clone();
    node.run_in(move || {
        let uplink = find_uplink(ip).expect("netlink").expect("nic0");
        let mut watch = NeighbourWatch::open(&uplink, Duration::from_millis(100)).expect("watch");
        assert!(
            !watch
                .table()
                .expect("table")
                .iter()
                .any(|n| matches!(n, Neighbour::At(ip, _) if *ip == gw)),
            "the gateway is not resolved before it is asked for"
        );
        resolve(uplink.index, gw).expect("resolve");
        let mut seen = wait_for_change(&mut watch, Neighbour::At(gw, mac));
        assert!(
            watch
                .table()
                .expect("table")
                .contains(&Neighbour::At(gw, mac)),
            "the table holds what the change said"
        );
        let gw_text = gw.to_string();
        common::run(&[
            "ip", "-n", &node_name, "neigh", "del", &gw_text, "dev", "nic0",
        ]);
        seen.extend(wait_for_change(&mut watch, Neighbour::Unknown(gw)));
        seen
    })
}

#[test]
fn the_watch_reports_what_the_kernel_resolves_when_asked_and_its_removal() {
    if !system_ready("the_watch_reports_what_the_kernel_resolves") {
        return;
    }
    let (node, peer) = node_and_peer();
    let gw = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 254));
    let seen = resolve_then_forget(&node, Ipv4Addr::new(10, 77, 0, 1).into(), gw, mac_of(&peer));
    // Nothing of another address was reported as this one.
    assert!(seen
        .iter()
        .all(|n| matches!(n, Neighbour::At(ip, _) | Neighbour::Unknown(ip) if *ip == gw)));
}

#[test]
fn the_ipv6_watch_reports_the_gateway_the_kernel_resolves_by_nd_and_its_removal() {
    if !system_ready("the_ipv6_watch_reports_the_gateway") {
        return;
    }
    let (node, peer) = node_and_peer6();
    let v6 = |t: &str| IpAddr::V6(t.parse::<Ipv6Addr>().expect("IPv6"));
    let seen = resolve_then_forget(&node, v6("fd77::1"), v6("fe80::254"), mac_of(&peer));
    // Only IPv6 neighbours of the link are reported (the peer's fd77::2 may be among them, as
    // the kernel learns it from the solicitation's exchange, but never an IPv4 one).
    assert!(seen.iter().all(|n| matches!(
        n,
        Neighbour::At(IpAddr::V6(_), _) | Neighbour::Unknown(IpAddr::V6(_))
    )));
}
