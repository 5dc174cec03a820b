use std::net::{IpAddr, Ipv4Addr};

use quiver_admin_api::AdminBackend;

use super::*;
use crate::control::owner::ConfigOwner;

#[test]
fn the_backend_shows_what_it_changed_and_refuses_what_cannot_be() {
    let owner = ConfigOwner::start(
        crate::control::owner::test_forwarder(),
        std::time::Duration::from_millis(1),
    );
    let slot = ConnectionSlot::default();
    let admin = ForwarderAdmin::new(owner.control(), slot.clone());
    assert!(admin.interfaces().unwrap().is_empty());
    assert!(admin.fib().unwrap().is_empty());

    admin
        .add_route(None, Ipv4Addr::new(192, 0, 2, 0).into(), 24, &[])
        .unwrap();
    let fib = admin.fib().unwrap();
    assert_eq!(fib.len(), 1);
    assert_eq!(fib[0].prefix, "192.0.2.0/24");
    assert_eq!(fib[0].source, "static");
    assert_eq!(fib[0].paths[0].kind, "drop");
    assert_eq!(
        admin.add_route(
            None,
            Ipv4Addr::new(10, 0, 0, 0).into(),
            8,
            &[(Ipv4Addr::new(10, 0, 0, 1).into(), "nosuch".into())]
        ),
        Err(AdminError::NotFound("no port named `nosuch`".into()))
    );
    assert!(matches!(
        admin.delete_route(None, Ipv4Addr::new(10, 0, 0, 0).into(), 8),
        Err(AdminError::NotFound(_))
    ));
    admin
        .delete_route(None, Ipv4Addr::new(192, 0, 2, 0).into(), 24)
        .unwrap();
    assert!(admin.fib().unwrap().is_empty());
    assert!(matches!(
        admin.trace_add("nosuch", 1),
        Err(AdminError::NotFound(_))
    ));
    admin.trace_add(dataplane::PORT_INPUT, 1).unwrap();
    let rt = admin.runtime(true).unwrap();
    assert_eq!(rt.workers.len(), 1);
    assert_eq!(rt.workers[0].worker, Some(0));
    assert!(rt.workers[0]
        .nodes
        .iter()
        .any(|n| n.name == dataplane::PORT_INPUT && n.state == "polling"));
    let summed = admin.runtime(false).unwrap();
    assert_eq!(summed.workers[0].worker, None);

    assert!(admin.connections().unwrap().is_empty());
    slot.set(Box::new(|| {
        vec![pb::Connection {
            id: "c1".into(),
            ..Default::default()
        }]
    }));
    assert_eq!(admin.connections().unwrap()[0].id, "c1");

    drop(admin);
    owner.stop().unwrap().stop();
}

#[test]
fn ipv6_routes_show_beside_ipv4_and_mixed_families_are_refused() {
    let owner = ConfigOwner::start(
        crate::control::owner::test_forwarder(),
        std::time::Duration::from_millis(1),
    );
    let admin = ForwarderAdmin::new(owner.control(), ConnectionSlot::default());
    let v6: IpAddr = "2001:db8:1::".parse().unwrap();
    admin.add_route(None, v6, 48, &[]).unwrap();
    admin
        .add_route(None, Ipv4Addr::new(192, 0, 2, 0).into(), 24, &[])
        .unwrap();
    let fib = admin.fib().unwrap();
    let prefixes: Vec<&str> = fib.iter().map(|r| r.prefix.as_str()).collect();
    assert_eq!(prefixes, ["192.0.2.0/24", "2001:db8:1::/48"]);
    assert_eq!(fib[1].paths[0].kind, "drop");
    // A next hop of the other family, a prefix too long: refused, nothing changed.
    let refused = admin.add_route(
        None,
        "2001:db8:2::".parse().unwrap(),
        48,
        &[(Ipv4Addr::new(10, 0, 0, 1).into(), "nosuch".into())],
    );
    assert!(
        matches!(&refused, Err(AdminError::InvalidArgument(m)) if m.contains("is IPv4")),
        "{refused:?}"
    );
    assert!(matches!(
        admin.add_route(None, v6, 129, &[]),
        Err(AdminError::InvalidArgument(_))
    ));
    assert_eq!(admin.fib().unwrap().len(), 2);
    assert!(matches!(
        admin.delete_route(None, "2001:db8:3::".parse().unwrap(), 48),
        Err(AdminError::NotFound(_))
    ));
    admin.delete_route(None, v6, 48).unwrap();
    assert_eq!(admin.fib().unwrap().len(), 1);
    drop(admin);
    owner.stop().unwrap().stop();
}

#[test]
fn tables_are_added_listed_and_refused_with_a_reason() {
    let owner = ConfigOwner::start(
        crate::control::owner::test_forwarder(),
        std::time::Duration::from_millis(1),
    );
    let admin = ForwarderAdmin::new(owner.control(), ConnectionSlot::default());
    let names = |admin: &ForwarderAdmin| -> Vec<String> {
        admin
            .tables()
            .unwrap()
            .into_iter()
            .map(|t| t.name)
            .collect()
    };
    assert_eq!(names(&admin), ["default"]);
    admin.add_table("red").unwrap();
    assert!(matches!(
        admin.add_table("red"),
        Err(AdminError::AlreadyExists(_))
    ));
    assert!(matches!(
        admin.add_table("r d"),
        Err(AdminError::InvalidArgument(_))
    ));
    assert_eq!(names(&admin), ["default", "red"]);
    // A drop route in red shows with its table; the default table's stays apart.
    admin
        .add_route(Some("red"), Ipv4Addr::new(192, 0, 2, 0).into(), 24, &[])
        .unwrap();
    let fib = admin.fib().unwrap();
    assert_eq!(fib.len(), 1);
    assert_eq!(
        (fib[0].table.as_str(), fib[0].prefix.as_str()),
        ("red", "192.0.2.0/24")
    );
    assert!(matches!(
        admin.delete_route(None, Ipv4Addr::new(192, 0, 2, 0).into(), 24),
        Err(AdminError::NotFound(_))
    ));
    assert!(matches!(
        admin.add_route(Some("green"), Ipv4Addr::new(192, 0, 2, 0).into(), 24, &[]),
        Err(AdminError::NotFound(_))
    ));
    assert!(matches!(
        admin.set_interface_table("nosuch", "red"),
        Err(AdminError::NotFound(_))
    ));
    assert!(matches!(
        admin.delete_table("default"),
        Err(AdminError::InvalidArgument(_))
    ));
    admin.delete_table("red").unwrap();
    assert!(admin.fib().unwrap().is_empty(), "red's routes went with it");
    assert_eq!(names(&admin), ["default"]);
    drop(admin);
    owner.stop().unwrap().stop();
}

#[test]
fn wireguard_tunnels_are_refused_with_a_reason() {
    let owner = ConfigOwner::start(
        crate::control::owner::test_forwarder(),
        std::time::Duration::from_millis(1),
    );
    let admin = ForwarderAdmin::new(owner.control(), ConnectionSlot::default());
    assert!(admin.wireguard().unwrap().is_empty());
    let request = |key: &str, address: &str| pb::AddWireguardRequest {
        name: "wg0".into(),
        private_key: key.into(),
        listen_port: 51820,
        address: address.into(),
        ..Default::default()
    };
    let zero_key = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    let refused = |r: pb::AddWireguardRequest| match admin.add_wireguard(&r) {
        Err(AdminError::InvalidArgument(m)) => m,
        other => panic!("{other:?}"),
    };
    assert!(refused(request(zero_key, "192.0.2.1")).contains("not an address of Quiver's"));
    assert!(refused(request("not base64", "192.0.2.1")).starts_with("wireguard wg0:"));
    let mut both = request(zero_key, "192.0.2.1");
    both.private_key_file = "/nonexistent".into();
    assert!(refused(both).contains("one of private_key, private_key_file"));
    let mut big = request(zero_key, "192.0.2.1");
    big.underlay_mtu = 70_000;
    assert!(refused(big).contains("underlay_mtu"));
    assert!(admin.wireguard().unwrap().is_empty());
    assert!(admin.interfaces().unwrap().is_empty());
    drop(admin);
    owner.stop().unwrap().stop();
}

#[test]
fn af_packet_ring_sizes_are_checked_as_the_configuration_file_checks_ring_kb() {
    let owner = ConfigOwner::start(
        crate::control::owner::test_forwarder(),
        std::time::Duration::from_millis(1),
    );
    let admin = ForwarderAdmin::new(owner.control(), ConnectionSlot::default());
    let spec = |ring_kb: Option<u32>| quiver_admin_api::AfPacketSpec {
        name: "host0".into(),
        host_interface: "no-such-if0".into(),
        promiscuous: true,
        mtu: 1500,
        ring_kb,
    };
    // Refused before anything is opened: the interface named does not even exist.
    for bad in [0, 32, 1000, 131_072] {
        match admin.add_af_packet(&spec(Some(bad))) {
            Err(AdminError::InvalidArgument(m)) => assert_eq!(
                m,
                format!("ring_kb: {bad} must be a power of two from 64 to 65536")
            ),
            other => panic!("ring_kb {bad}: {other:?}"),
        }
    }
    assert!(admin.interfaces().unwrap().is_empty());
    // A valid size (and the default) gets as far as opening the interface, which fails.
    for ok in [None, Some(64), Some(65_536)] {
        match admin.add_af_packet(&spec(ok)) {
            Err(e) => assert!(!e.to_string().contains("ring_kb"), "ring_kb {ok:?}: {e}"),
            Ok(i) => panic!("ring_kb {ok:?}: a port on no-such-if0 was made ({i})"),
        }
    }
    assert!(admin.interfaces().unwrap().is_empty());
    drop(admin);
    owner.stop().unwrap().stop();
}
