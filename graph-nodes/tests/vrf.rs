//! Routing tables (VRFs): two tenants with the same addresses on one forwarder, each reaching
//! only its own hosts; routes of one table never used for another's packets; replies from
//! Quiver's own addresses looked up in the table of the interface the request came in on.

mod common;

use common::*;
use graph_nodes::{names, ForwardingError, Path, TableId};

const HOST_C: [u8; 6] = [0x02, 0xcc, 0, 0, 0, 0x0c];
const HOST_D: [u8; 6] = [0x02, 0xdd, 0, 0, 0, 0x0d];

fn v6(s: &str) -> u128 {
    u128::from(s.parse::<std::net::Ipv6Addr>().unwrap())
}

/// eth0 and eth1 in the default table, eth2 and eth3 in `red`, both tenants with 10.0.0.1/24
/// and 2001:db8::1/64 on their first port, 10.0.1.1/24 and 2001:db8:1::1/64 on their second,
/// a host 10.0.1.2 / 2001:db8:1::2 behind each second port (B in the default table, D in red);
/// the default table alone has 10.9.0.0/16 via its host.
fn rig() -> (Rig, TableId) {
    let mut red = TableId::DEFAULT;
    let r = Rig::new(&[MAC0, MAC1, MAC2, MAC3], |f, p| {
        red = f.add_table("red").unwrap();
        f.set_interface_table(p[2], red).unwrap();
        f.set_interface_table(p[3], red).unwrap();
        for (a, b, host) in [(p[0], p[1], HOST_B), (p[2], p[3], HOST_D)] {
            f.add_address(a, ip(10, 0, 0, 1), 24).unwrap();
            f.add_address(b, ip(10, 0, 1, 1), 24).unwrap();
            f.add_neighbor(b, ip(10, 0, 1, 2), host).unwrap();
            f.add_address6(a, v6("2001:db8::1"), 64).unwrap();
            f.add_address6(b, v6("2001:db8:1::1"), 64).unwrap();
            f.add_neighbor6(b, v6("2001:db8:1::2"), host).unwrap();
        }
        f.add_route(
            ip(10, 9, 0, 0),
            16,
            &[Path {
                next_hop: ip(10, 0, 1, 2),
                interface: p[1],
            }],
        )
        .unwrap();
    });
    (r, red)
}

/// A UDP packet from `src` (behind port `p`, MAC `host`) to `dst`, addressed to the port.
fn v4_to(port_mac: [u8; 6], host: [u8; 6], dst: u32) -> Vec<u8> {
    eth(
        port_mac,
        host,
        0x0800,
        &ipv4(ip(10, 0, 0, 2), dst, 17, 64, &udp(1000, 2000, &[0; 8])),
    )
}

fn v6_to(port_mac: [u8; 6], host: [u8; 6], dst: &str) -> Vec<u8> {
    eth(
        port_mac,
        host,
        0x86dd,
        &ipv6("2001:db8::2", dst, 64, &udp(1000, 2000, &[0; 8])),
    )
}

#[test]
fn each_tenant_reaches_only_its_own_hosts_in_both_families() {
    let (mut r, _) = rig();
    // Tenant one (default table) to its host B, tenant two (red) to its host D: the same
    // destination address, each to its own port and MAC.
    r.inject(0, &[v4_to(MAC0, HOST_A, ip(10, 0, 1, 2))]);
    r.inject(2, &[v4_to(MAC2, HOST_C, ip(10, 0, 1, 2))]);
    let (b, d) = (r.sent(1), r.sent(3));
    assert_eq!((b.len(), d.len()), (1, 1));
    assert_eq!(b[0][..6], HOST_B);
    assert_eq!(d[0][..6], HOST_D);
    assert_eq!(d[0][6..12], MAC3);
    r.inject(0, &[v6_to(MAC0, HOST_A, "2001:db8:1::2")]);
    r.inject(2, &[v6_to(MAC2, HOST_C, "2001:db8:1::2")]);
    let (b, d) = (r.sent(1), r.sent(3));
    assert_eq!((b.len(), d.len()), (1, 1));
    assert_eq!(b[0][..6], HOST_B);
    assert_eq!(d[0][..6], HOST_D);

    // The default table's route is not red's: red's packet for 10.9.1.1 has no route.
    r.inject(0, &[v4_to(MAC0, HOST_A, ip(10, 9, 1, 1))]);
    assert_eq!(r.sent(1).len(), 1);
    r.inject(2, &[v4_to(MAC2, HOST_C, ip(10, 9, 1, 1))]);
    assert!(r.sent(3).is_empty());
    assert_eq!(r.error(names::IP4_LOOKUP, "no-route"), 1);

    // Both tenants' packets received in one pass (one frame through ip4-lookup and
    // ip6-lookup): each looked up in its own table.
    for (port, mac, host) in [(0, MAC0, HOST_A), (2, MAC2, HOST_C)] {
        let mut rx = r.ports[port].rx.lock().unwrap();
        for _ in 0..8 {
            rx.push_back(v4_to(mac, host, ip(10, 0, 1, 2)));
            rx.push_back(v6_to(mac, host, "2001:db8:1::2"));
        }
    }
    r.run();
    let (b, d) = (r.sent(1), r.sent(3));
    assert_eq!((b.len(), d.len()), (16, 16));
    assert!(b.iter().all(|f| f[..6] == HOST_B));
    assert!(d.iter().all(|f| f[..6] == HOST_D));
    r.assert_no_leaks();
}

#[test]
fn quivers_replies_go_back_through_the_table_they_came_from() {
    let (mut r, _) = rig();
    // A ping of 10.0.0.1 from red's side is answered out of red's port, not the default's.
    let echo = icmp_echo(8, 7, 1, &[0x55; 16]);
    let ping = |port_mac, host| {
        eth(
            port_mac,
            host,
            0x0800,
            &ipv4(ip(10, 0, 0, 2), ip(10, 0, 0, 1), 1, 64, &echo),
        )
    };
    r.fwd
        .add_neighbor(r.ports[2].index, ip(10, 0, 0, 2), HOST_C)
        .unwrap();
    r.fwd
        .add_neighbor(r.ports[0].index, ip(10, 0, 0, 2), HOST_A)
        .unwrap();
    r.commit();
    r.inject(2, &[ping(MAC2, HOST_C)]);
    let replies = r.sent(2);
    assert_eq!(replies.len(), 1, "answered on red's port");
    assert_eq!(replies[0][..6], HOST_C);
    assert!(r.sent(0).is_empty());
    r.inject(0, &[ping(MAC0, HOST_A)]);
    assert_eq!(r.sent(0)[0][..6], HOST_A);
    r.assert_no_leaks();
}

#[test]
fn tables_are_kept_apart_by_the_control_side() {
    let (mut r, red) = rig();
    let p: Vec<_> = r.ports.iter().map(|p| p.index).collect();
    let f = &mut r.fwd;
    // A route in red through a default-table interface is refused.
    let refused = f.add_route_in(
        red,
        ip(10, 8, 0, 0),
        16,
        &[Path {
            next_hop: ip(10, 0, 1, 2),
            interface: p[1],
        }],
    );
    assert_eq!(refused, Err(ForwardingError::OtherTable(p[1])));
    // An interface with addresses does not move; a table with interfaces does not go.
    assert_eq!(
        f.set_interface_table(p[0], red),
        Err(ForwardingError::HasAddresses(p[0]))
    );
    assert!(matches!(
        f.remove_table(red),
        Err(ForwardingError::TableInUse(_))
    ));
    assert!(matches!(
        f.remove_table(TableId::DEFAULT),
        Err(ForwardingError::TableInUse(_))
    ));
    assert!(matches!(
        f.add_table("red"),
        Err(ForwardingError::TableNameTaken(_))
    ));
    assert_eq!(f.table_by_name("red"), Some(red));
    let names: Vec<String> = f.tables().into_iter().map(|(_, n)| n).collect();
    assert_eq!(names, ["default", "red"]);
    // Red's own routes are its own.
    let red_routes = f.routes_in(red).unwrap();
    assert!(red_routes
        .iter()
        .any(|x| x.prefix == ip(10, 0, 1, 2) && x.len == 32));
    assert!(!red_routes.iter().any(|x| x.prefix == ip(10, 9, 0, 0)));
    assert!(f.routes().iter().any(|x| x.prefix == ip(10, 9, 0, 0)));

    // Emptied of interfaces, red goes, its routes and their objects with it.
    let before = f.object_counts();
    for &i in &p[2..] {
        f.remove_interface(i).unwrap();
    }
    f.remove_table(red).unwrap();
    assert!(
        f.object_counts().1 < before.1,
        "red's load balances released"
    );
    assert_eq!(f.tables().len(), 1);
    r.commit();
    // With one table again, the frame goes the one-table way and still forwards.
    r.inject(0, &[v4_to(MAC0, HOST_A, ip(10, 9, 1, 1))]);
    assert_eq!(r.sent(1).len(), 1);
    r.assert_no_leaks();
}

/// A routed VXLAN tunnel in red (VNI 100, 172.31.0.1/30, its far end 172.31.0.2 at
/// `FAR_MAC`), over the default table's eth1 (192.168.1.1/24 → 192.168.1.2); red routes
/// 10.5.0.0/16 through it.
const FAR_MAC: [u8; 6] = [0x02, 0xfa, 0, 0, 0, 0x01];
const TUNNEL_MAC: [u8; 6] = [0x02, 0x7e, 0, 0, 0, 0x01];

fn routed_tunnel(r: &mut Rig, red: TableId) -> graph_nodes::IfIndex {
    let p: Vec<_> = r.ports.iter().map(|p| p.index).collect();
    let f = &mut r.fwd;
    f.add_address(p[1], ip(192, 168, 1, 1), 24).unwrap();
    f.add_neighbor(p[1], ip(192, 168, 1, 2), HOST_B).unwrap();
    let t = f
        .add_vxlan_tunnel("vx-red", ip(192, 168, 1, 1), ip(192, 168, 1, 2), 100, 4789)
        .unwrap();
    f.set_vxlan_routed(t, TUNNEL_MAC, 1450).unwrap();
    f.set_interface_table(t, red).unwrap();
    f.add_address(t, ip(172, 31, 0, 1), 30).unwrap();
    f.add_neighbor(t, ip(172, 31, 0, 2), FAR_MAC).unwrap();
    f.add_route_in(
        red,
        ip(10, 5, 0, 0),
        16,
        &[Path {
            next_hop: ip(172, 31, 0, 2),
            interface: t,
        }],
    )
    .unwrap();
    r.commit();
    t
}

#[test]
fn a_routed_vxlan_tunnel_carries_a_tables_traffic_over_the_default_tables_underlay() {
    let (mut r, red) = rig();
    routed_tunnel(&mut r, red);
    // Red's packet for 10.5.1.1 leaves eth1 inside VXLAN VNI 100, its inner frame from the
    // tunnel's MAC to the far end's; the default table has no such route.
    r.inject(2, &[v4_to(MAC2, HOST_C, ip(10, 5, 1, 1))]);
    let out = r.sent(1);
    assert_eq!(out.len(), 1);
    let o = &out[0];
    assert_eq!(
        (o[..6].to_vec(), o[23]),
        (HOST_B.to_vec(), 17),
        "to the underlay's next hop"
    );
    assert_eq!(o[46..50], [0, 0, 100, 0], "VNI 100");
    let inner = &o[50..];
    assert_eq!(
        (&inner[..6], &inner[6..12]),
        (&FAR_MAC[..], &TUNNEL_MAC[..])
    );
    assert_eq!(inner[14 + 8], 63, "routed once: TTL 64 → 63");
    r.inject(0, &[v4_to(MAC0, HOST_A, ip(10, 5, 1, 1))]);
    assert!(r.sent(1).is_empty());
    assert_eq!(r.error(names::IP4_LOOKUP, "no-route"), 1);

    // From the far end: a frame for red's host 10.0.0.2 comes out of red's eth2.
    r.fwd
        .add_neighbor(r.ports[2].index, ip(10, 0, 0, 2), HOST_C)
        .unwrap();
    r.commit();
    let inner = eth(
        TUNNEL_MAC,
        FAR_MAC,
        0x0800,
        &ipv4(
            ip(10, 5, 1, 1),
            ip(10, 0, 0, 2),
            17,
            64,
            &udp(1, 2, &[0; 8]),
        ),
    );
    let mut vx = vec![0x08, 0, 0, 0, 0, 0, 100, 0];
    vx.extend_from_slice(&inner);
    let outer = eth(
        MAC1,
        HOST_B,
        0x0800,
        &ipv4(
            ip(192, 168, 1, 2),
            ip(192, 168, 1, 1),
            17,
            64,
            &udp(50000, 4789, &vx),
        ),
    );
    r.inject(1, &[outer]);
    let got = r.sent(2);
    assert_eq!(got.len(), 1, "decapsulated and routed in red");
    assert_eq!(got[0][..6], HOST_C);
    assert!(r.sent(0).is_empty(), "never into the default table's twin");
    r.assert_no_leaks();
}
