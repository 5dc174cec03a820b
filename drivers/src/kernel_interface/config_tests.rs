use super::*;
use crate::kernel_interface::route::masked;
use std::net::{IpAddr, Ipv4Addr};

#[test]
fn names_are_checked_like_the_kernel_does() {
    validate_name("eth1").unwrap();
    validate_name("nsm-123456789ab").unwrap();
    for bad in [
        "",
        "0123456789abcdef",
        ".",
        "..",
        "a/b",
        "a:b",
        "a b",
        "a\0",
    ] {
        assert!(
            matches!(
                validate_name(bad),
                Err(KernelInterfaceError::InvalidName { .. })
            ),
            "{bad:?}"
        );
    }
}

#[test]
fn host_names_are_short_stable_and_distinct() {
    let a = host_name_for("0b4b6a4a-5b8f-4d5e-9b3c-1f2e3d4c5b6a");
    assert_eq!(a.len(), MAX_NAME_LEN);
    validate_name(&a).unwrap();
    assert_eq!(a, host_name_for("0b4b6a4a-5b8f-4d5e-9b3c-1f2e3d4c5b6a"));
    assert_ne!(a, host_name_for("0b4b6a4a-5b8f-4d5e-9b3c-1f2e3d4c5b6b"));
}

#[test]
fn addresses_parse_or_say_why_not() {
    assert_eq!(
        parse_cidr("172.16.1.2/31").unwrap(),
        (IpAddr::V4(Ipv4Addr::new(172, 16, 1, 2)), 31)
    );
    assert_eq!(
        parse_cidr("fe80::1/64").unwrap(),
        ("fe80::1".parse().unwrap(), 64)
    );
    assert_eq!(
        parse_cidr("2001:db8::1/128").unwrap(),
        ("2001:db8::1".parse().unwrap(), 128)
    );
    for bad in [
        "172.16.1.2",
        "172.16.1.2/33",
        "172.16.1.2/",
        "172.16.1/24",
        "300.1.1.1/8",
        "10.0.0.1/+8",
        "fe80::1/129",
        "fe80::1",
        "fe80::g/64",
        "10.0.0.1/24/1",
    ] {
        assert!(
            matches!(
                parse_cidr(bad),
                Err(KernelInterfaceError::InvalidAddress { .. })
            ),
            "{bad}"
        );
    }
    assert_eq!(
        parse_mac("02:fe:0A:00:00:01").unwrap(),
        [2, 0xfe, 10, 0, 0, 1]
    );
    // One rule with quiver.toml and quiver ctl: a group may have one digit.
    assert_eq!(parse_mac("2:fe:a:0:0:1").unwrap(), [2, 0xfe, 10, 0, 0, 1]);
    for bad in [
        "02:fe:0a:00:00",
        "02:fe:0a:00:00:01:02",
        "02-fe-0a-00-00-01",
        "+2:fe:0a:00:00:01",
    ] {
        assert!(parse_mac(bad).is_err(), "{bad}");
    }
    let v4 = |a, b, c, d| IpAddr::V4(Ipv4Addr::new(a, b, c, d));
    assert_eq!(masked(v4(10, 1, 2, 3), 16), v4(10, 1, 0, 0));
    assert_eq!(masked(v4(10, 1, 2, 3), 0), v4(0, 0, 0, 0));
    assert_eq!(masked(v4(10, 1, 2, 3), 32), v4(10, 1, 2, 3));
    let v6 = |s: &str| s.parse::<IpAddr>().unwrap();
    assert_eq!(masked(v6("2001:db8:1:2::5"), 48), v6("2001:db8:1::"));
    assert_eq!(masked(v6("2001:db8::5"), 0), v6("::"));
    assert_eq!(masked(v6("2001:db8::5"), 128), v6("2001:db8::5"));
}

#[test]
fn a_config_is_checked_whole_before_anything_is_made() {
    let good = KernelInterfaceConfig {
        connection_id: "c1".into(),
        name: "nsm0".into(),
        mtu: 1450,
        addresses: vec!["10.0.0.1/24".into()],
        routes: vec![RouteConfig {
            prefix: "10.1.0.0/16".into(),
            next_hop: Some("10.0.0.2".into()),
        }],
        neighbors: vec![NeighborConfig {
            ip: "10.0.0.2".into(),
            mac: "02:00:00:00:00:02".into(),
        }],
        peer_addresses: vec!["10.0.0.2/24".into()],
        policies: vec![PolicyConfig {
            from: "10.0.0.0/24".into(),
            proto: "tcp".into(),
            dst_port: "6666".into(),
            routes: vec![RouteConfig {
                prefix: "10.9.0.0/16".into(),
                next_hop: Some("10.0.0.2".into()),
            }],
            ..PolicyConfig::default()
        }],
        alias: "client-c1".into(),
    };
    assert!(!Plan::new(&good).unwrap().has_ipv6());
    let mut c = good.clone();
    c.addresses.push("2001:db8::1/64".into());
    c.routes.push(RouteConfig {
        prefix: "2001:db8:1::/48".into(),
        next_hop: Some("2001:db8::2".into()),
    });
    assert!(Plan::new(&c).unwrap().has_ipv6(), "dual stack is one plan");
    let mut c = good.clone();
    c.routes[0].next_hop = Some("2001:db8::2".into());
    let e = Plan::new(&c).err().expect("a next hop of the wrong family");
    assert!(e.to_string().contains("family"), "{e}");
    let mut c = good.clone();
    c.alias = "a\nb".into();
    assert!(Plan::new(&c).is_err(), "an alias with a newline");
    let mut c = good.clone();
    c.policies[0].dst_port = "x".into();
    assert!(matches!(
        Plan::new(&c),
        Err(KernelInterfaceError::InvalidPolicy {
            field: "dst_port",
            ..
        })
    ));
    let mut c = good.clone();
    c.mtu = 67;
    assert!(matches!(
        Plan::new(&c),
        Err(KernelInterfaceError::InvalidMtu(67))
    ));
    let mut c = good.clone();
    c.connection_id.clear();
    assert!(matches!(
        Plan::new(&c),
        Err(KernelInterfaceError::InvalidConnectionId { .. })
    ));
    let mut c = good.clone();
    c.routes[0].next_hop = Some("10.0.0".into());
    assert!(matches!(
        Plan::new(&c),
        Err(KernelInterfaceError::InvalidAddress { .. })
    ));
    let mut c = good.clone();
    c.peer_addresses.push("10.0.0.300/32".into());
    assert!(matches!(
        Plan::new(&c),
        Err(KernelInterfaceError::InvalidAddress { .. })
    ));
    let mut c = good;
    c.neighbors[0].mac = "nope".into();
    assert!(matches!(
        Plan::new(&c),
        Err(KernelInterfaceError::InvalidAddress { .. })
    ));
}

fn v(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn cidrs(list: &[&str]) -> Vec<(IpAddr, u8)> {
    list.iter().map(|c| parse_cidr(c).unwrap()).collect()
}

/// NSM's IP context asks each side to be routed to the other side's addresses (the api's
/// GetDstIPRoutes / GetSrcIPRoutes, which sdk-kernel's `routes` adds through the interface):
/// a route to each peer address's prefix, unless one of the side's own prefixes holds it.
#[test]
fn each_side_is_routed_to_the_other_sides_addresses_its_own_prefixes_do_not_hold() {
    // deployments-k8s' apps/nse-kernel-pbr: the NSE's endpoint adds the policies' `from`
    // prefixes (172.16.2.201/24 twice, 2004::3/120) to the NSC's addresses; IPAM gave the
    // NSC 172.16.1.101/32 and the NSE 172.16.1.100/32.
    let nsc = cidrs(&[
        "172.16.1.101/32",
        "172.16.2.201/24",
        "172.16.2.201/24",
        "2004::3/120",
    ]);
    let nse = cidrs(&["172.16.1.100/32"]);
    assert_eq!(
        peer_routes(&nse, &nsc),
        vec![
            (v("172.16.1.101"), 32, None),
            (v("172.16.2.0"), 24, None),
            (v("2004::"), 120, None),
        ],
        "the NSE reaches every address of the NSC, each prefix once"
    );
    assert_eq!(
        peer_routes(&nsc, &nse),
        vec![(v("172.16.1.100"), 32, None)],
        "and the NSC the NSE's"
    );
    // Addresses in a shared subnet need nothing more: the subnet's own route reaches them.
    let a = cidrs(&["10.76.0.1/24", "fd00:76::1/64"]);
    let b = cidrs(&["10.76.0.2/24", "fd00:76::2/64"]);
    assert!(peer_routes(&a, &b).is_empty());
    assert!(peer_routes(&b, &a).is_empty());
    // Held by a prefix of the other family does not count; no peers, no routes.
    assert_eq!(
        peer_routes(&cidrs(&["0.0.0.0/0"]), &cidrs(&["fd00::2/128"])),
        vec![(v("fd00::2"), 128, None)]
    );
    assert!(peer_routes(&a, &[]).is_empty());
}

#[test]
fn the_plan_routes_the_peers_first_and_counts_their_family() {
    let config = KernelInterfaceConfig {
        connection_id: "c1".into(),
        name: "nsm0".into(),
        addresses: vec!["172.16.1.100/32".into()],
        routes: vec![RouteConfig {
            prefix: "172.16.1.101/32".into(),
            next_hop: None,
        }],
        peer_addresses: vec!["172.16.1.101/32".into(), "2004::3/120".into()],
        ..KernelInterfaceConfig::default()
    };
    let plan = Plan::new(&config).unwrap();
    assert_eq!(
        plan.peer_routes,
        vec![(v("172.16.1.101"), 32, None), (v("2004::"), 120, None)]
    );
    assert_eq!(plan.routes, vec![(v("172.16.1.101"), 32, None)]);
    assert!(
        plan.has_ipv6(),
        "a route to an IPv6 peer needs IPv6 on the interface"
    );
}
