//! Next-table routes: a route of one table whose packets are looked up again in another, in
//! both families; at most one extra lookup per packet (a second next-table route drops the
//! packet as `next-table-loop`); what configuration refuses.

mod common;

use common::*;
use graph_nodes::{names, ForwardingError, Path, TableId};

const HOST_C: [u8; 6] = [0x02, 0xcc, 0, 0, 0, 0x0c];

fn v6(s: &str) -> u128 {
    u128::from(s.parse::<std::net::Ipv6Addr>().unwrap())
}

/// eth0 (10.0.0.1/24, 2001:db8::1/64) and eth1 (10.0.1.1/24, 2001:db8:1::1/64, host B at
/// .2 and ::2) in the default table; eth2 (10.1.0.1/24, 2001:db8:100::1/64, host C at .2
/// and ::2) in `red`, and `blue` with no interface.
fn rig() -> (Rig, TableId, TableId) {
    let (mut red, mut blue) = (TableId::DEFAULT, TableId::DEFAULT);
    let r = Rig::new(&[MAC0, MAC1, MAC2], |f, p| {
        red = f.add_table("red").unwrap();
        blue = f.add_table("blue").unwrap();
        f.set_interface_table(p[2], red).unwrap();
        f.add_address(p[0], ip(10, 0, 0, 1), 24).unwrap();
        f.add_address(p[1], ip(10, 0, 1, 1), 24).unwrap();
        f.add_neighbor(p[1], ip(10, 0, 1, 2), HOST_B).unwrap();
        f.add_address(p[2], ip(10, 1, 0, 1), 24).unwrap();
        f.add_neighbor(p[2], ip(10, 1, 0, 2), HOST_C).unwrap();
        f.add_address6(p[0], v6("2001:db8::1"), 64).unwrap();
        f.add_address6(p[1], v6("2001:db8:1::1"), 64).unwrap();
        f.add_neighbor6(p[1], v6("2001:db8:1::2"), HOST_B).unwrap();
        f.add_address6(p[2], v6("2001:db8:100::1"), 64).unwrap();
        f.add_neighbor6(p[2], v6("2001:db8:100::2"), HOST_C)
            .unwrap();
    });
    (r, red, blue)
}

/// A UDP packet from `src` to `dst` as host `host` sends it to port MAC `port_mac`.
fn v4(port_mac: [u8; 6], host: [u8; 6], src: u32, dst: u32) -> Vec<u8> {
    let ip = ipv4(src, dst, 17, 64, &udp(1000, 2000, &[0; 8]));
    eth(port_mac, host, 0x0800, &ip)
}

fn v6_frame(port_mac: [u8; 6], host: [u8; 6], src: &str, dst: &str) -> Vec<u8> {
    eth(
        port_mac,
        host,
        0x86dd,
        &ipv6(src, dst, 64, &udp(1000, 2000, &[0; 8])),
    )
}

#[test]
fn a_next_table_route_looks_packets_up_again_in_the_table_it_names() {
    let (mut r, red, _) = rig();
    let from_red = v4(MAC2, HOST_C, ip(10, 1, 0, 2), ip(10, 0, 1, 2));
    let from_red6 = v6_frame(MAC2, HOST_C, "2001:db8:100::2", "2001:db8:1::2");
    // Without the route, red has no way to the default table's host.
    r.inject(2, &[from_red.clone(), from_red6.clone()]);
    assert!(r.sent(1).is_empty());
    assert_eq!(r.error(names::IP4_LOOKUP, "no-route"), 1);
    assert_eq!(r.error(names::IP6_LOOKUP, "no-route"), 1);

    r.fwd
        .add_next_table_route_in(red, 0, 0, TableId::DEFAULT)
        .unwrap();
    r.fwd
        .add_next_table_route6_in(red, 0, 0, TableId::DEFAULT)
        .unwrap();
    r.fwd
        .add_next_table_route_in(TableId::DEFAULT, ip(10, 1, 0, 0), 24, red)
        .unwrap();
    r.fwd
        .add_next_table_route6_in(TableId::DEFAULT, v6("2001:db8:100::"), 64, red)
        .unwrap();
    r.commit();
    r.inject(2, &[from_red, from_red6]);
    let out = r.sent(1);
    assert_eq!(
        out.len(),
        2,
        "both families out of the default table's port"
    );
    assert!(out.iter().all(|f| f[..6] == HOST_B && f[6..12] == MAC1));
    // The way back: the default table's route for red's subnet.
    r.inject(
        1,
        &[
            v4(MAC1, HOST_B, ip(10, 0, 1, 2), ip(10, 1, 0, 2)),
            v6_frame(MAC1, HOST_B, "2001:db8:1::2", "2001:db8:100::2"),
        ],
    );
    let back = r.sent(2);
    assert_eq!(back.len(), 2, "both families into red's port");
    assert!(back.iter().all(|f| f[..6] == HOST_C && f[6..12] == MAC2));
    // Red's own subnet stays red's: its connected route is longer than the default route.
    assert_eq!(r.error(names::IP4_LOOKUP, "no-route"), 1);
    assert_eq!(r.error(names::IP4_LOOKUP, "next-table-loop"), 0);

    // Removed: red has no route again.
    assert!(r.fwd.remove_route_in(red, 0, 0));
    r.commit();
    r.inject(2, &[v4(MAC2, HOST_C, ip(10, 1, 0, 2), ip(10, 0, 1, 2))]);
    assert!(r.sent(1).is_empty());
    assert_eq!(r.error(names::IP4_LOOKUP, "no-route"), 2);
    r.assert_no_leaks();
}

#[test]
fn a_packet_is_looked_up_again_at_most_once() {
    let (mut r, red, _) = rig();
    let via_b = [Path {
        next_hop: ip(10, 0, 1, 2),
        interface: r.ports[1].index,
    }];
    // Accepted: red's 10.5.0.0/16 ends in the default table's route through a port, which is
    // longer than the default table's 10.0.0.0/8 back to red.
    r.fwd.add_route(ip(10, 5, 0, 0), 16, &via_b).unwrap();
    r.fwd
        .add_next_table_route_in(red, ip(10, 5, 0, 0), 16, TableId::DEFAULT)
        .unwrap();
    r.fwd
        .add_next_table_route_in(TableId::DEFAULT, ip(10, 0, 0, 0), 8, red)
        .unwrap();
    r.commit();
    r.inject(2, &[v4(MAC2, HOST_C, ip(10, 1, 0, 2), ip(10, 5, 1, 1))]);
    assert_eq!(r.sent(1).len(), 1);

    // The default table's own route goes (not checked: removing a route never is), so red's
    // packets for 10.5.0.0/16 would go red → default → red: dropped at the second.
    assert!(r.fwd.remove_route(ip(10, 5, 0, 0), 16));
    r.commit();
    r.inject(2, &[v4(MAC2, HOST_C, ip(10, 1, 0, 2), ip(10, 5, 1, 1))]);
    assert!(r.sent(1).is_empty() && r.sent(2).is_empty());
    assert_eq!(r.error(names::IP4_LOOKUP, "next-table-loop"), 1);
    assert_eq!(r.error(names::IP4_LOOKUP, "no-route"), 0);
    r.assert_no_leaks();
}

#[test]
fn configuration_refuses_its_own_table_a_missing_one_and_loops() {
    let (mut r, red, blue) = rig();
    let f = &mut r.fwd;
    let routes = f.route_generation();
    assert_eq!(
        f.add_next_table_route_in(red, 0, 0, red),
        Err(ForwardingError::NextTableSelf("red".into()))
    );
    assert_eq!(
        f.add_next_table_route6_in(red, 0, 0, TableId(77)),
        Err(ForwardingError::NoSuchTable(77))
    );
    f.add_next_table_route_in(red, 0, 0, TableId::DEFAULT)
        .unwrap();
    // The default table's route for everything back to red: a loop, either way round.
    let e = f
        .add_next_table_route_in(TableId::DEFAULT, 0, 0, red)
        .unwrap_err();
    assert!(e.to_string().contains("loop"), "{e}");
    let e = f
        .add_next_table_route_in(TableId::DEFAULT, ip(10, 0, 0, 0), 8, red)
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("`red`'s route 0.0.0.0/0 leads back to `default` (a loop)"),
        "{e}"
    );
    // Blue's 10.0.0.0/8 to red, which sends it on to the default table: a chain.
    let e = f
        .add_next_table_route_in(blue, ip(10, 0, 0, 0), 8, red)
        .unwrap_err();
    assert!(e.to_string().contains("at most one"), "{e}");
    // A more specific next-table route inside: blue's 10.5.0.0/16 on to the default table
    // would take what red's 10.0.0.0/8 sends blue, either way round.
    f.add_next_table_route_in(blue, ip(10, 5, 0, 0), 16, TableId::DEFAULT)
        .unwrap();
    let e = f
        .add_next_table_route_in(red, ip(10, 0, 0, 0), 8, blue)
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("`blue`'s route 10.5.0.0/16 leads on"),
        "{e}"
    );
    assert!(f.remove_route_in(blue, ip(10, 5, 0, 0), 16));
    let e = f
        .add_next_table_route_in(TableId::DEFAULT, ip(10, 5, 0, 0), 16, blue)
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("`red`'s route 0.0.0.0/0 leads to `default`, which would send it on"),
        "{e}"
    );
    // The other way round: the default table's for red's subnet, red's connected route
    // holding it, is fine; red's own default route then still is.
    f.add_next_table_route_in(TableId::DEFAULT, ip(10, 1, 0, 0), 24, red)
        .unwrap();
    // IPv6: the same rule.
    f.add_next_table_route6_in(TableId::DEFAULT, 0, 0, red)
        .unwrap();
    let e = f
        .add_next_table_route6_in(red, 0, 0, TableId::DEFAULT)
        .unwrap_err();
    assert!(e.to_string().contains("(a loop)"), "{e}");
    // A table that next-table routes name stays until they go.
    let blue6 = v6("2001:db8:9::");
    f.add_next_table_route6_in(TableId::DEFAULT, blue6, 48, blue)
        .unwrap();
    assert_eq!(
        f.remove_table(blue),
        Err(ForwardingError::TableTargeted {
            table: "blue".into(),
            by: "default".into()
        })
    );
    assert!(f.route_generation() > routes);
    assert!(f.remove_route6_in(TableId::DEFAULT, blue6, 48));
    f.remove_table(blue).unwrap();
    r.commit();
    r.assert_no_leaks();
}
