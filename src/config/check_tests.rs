//! The tests of `check.rs`: what the file's checks accept and refuse, by key.

use std::net::{IpAddr, Ipv4Addr};

use crate::config::{Config, ConfigError};

/// The error `text` is refused with, and the key it names.
fn refused(text: &str) -> (String, String) {
    match Config::parse(text) {
        Err(e @ ConfigError::Value { .. }) => {
            let ConfigError::Value { key, .. } = &e else {
                unreachable!()
            };
            (key.clone(), e.to_string())
        }
        other => panic!("{text}\n→ {other:?}"),
    }
}

const PORTS: &str = r#"
[[port]]
name = "a"
type = "tap"
[[port]]
name = "b"
type = "memif"
role = "master"
socket = "@q"
"#;

#[test]
fn the_topology_is_typed_values() {
    let c = Config::parse(&format!(
        "{PORTS}[[xconnect]]\na = \"a\"\nb = \"b\"\n[[address]]\nport = \"a\"\nip = \"10.0.0.1/24\"\n\
         [[neighbor]]\nport = \"a\"\nip = \"10.0.0.2\"\nmac = \"02:00:00:00:00:02\"\n\
         [[route]]\nprefix = \"10.1.0.0/16\"\nvia = [\"10.0.0.2@a\", \"10.0.0.3@b\"]\n\
         [[address]]\nport = \"a\"\nip = \"2001:db8::1/64\"\n\
         [[neighbor]]\nport = \"a\"\nip = \"2001:db8::2\"\nmac = \"02:00:00:00:00:02\"\n\
         [[route]]\nprefix = \"2001:db8:1::/48\"\nvia = [\"fe80::2@a\"]\n"
    ))
    .unwrap();
    let t = c.topology().unwrap();
    assert_eq!(
        (t.xconnects[0].a.as_str(), t.xconnects[0].b.as_str()),
        ("a", "b")
    );
    assert_eq!(
        (t.addresses[0].ip, t.addresses[0].len),
        (Ipv4Addr::new(10, 0, 0, 1).into(), 24)
    );
    assert_eq!(
        (t.addresses[1].ip, t.addresses[1].len),
        ("2001:db8::1".parse().unwrap(), 64)
    );
    assert_eq!(t.neighbors[1].ip, "2001:db8::2".parse::<IpAddr>().unwrap());
    let r6 = &t.routes[1];
    assert_eq!((r6.prefix, r6.len), ("2001:db8:1::".parse().unwrap(), 48));
    assert_eq!(r6.via, vec![("fe80::2".parse().unwrap(), "a")]);
    assert_eq!(t.neighbors[0].mac, [2, 0, 0, 0, 0, 2]);
    let r = &t.routes[0];
    assert_eq!((r.prefix, r.len), (Ipv4Addr::new(10, 1, 0, 0).into(), 16));
    assert_eq!(
        r.via,
        vec![
            (Ipv4Addr::new(10, 0, 0, 2).into(), "a"),
            (Ipv4Addr::new(10, 0, 0, 3).into(), "b")
        ]
    );
}

#[test]
fn a_bad_address_prefix_or_mac_is_refused_at_load_by_its_key() {
    let cases = [
        (
            "[[route]]\nprefix = \"10.1.0.0/16\"\nvia = [\"10.0.0.1@a\"]\n\
             [[route]]\nprefix = \"10.2.0.0/16\"\n\
             [[route]]\nprefix = \"10.3.0.0/16\"\nvia = [\"10.0.0.2@a\", \"10.0.0.x@b\"]\n",
            "route[2].via[1]",
            "route[2].via[1]: \"10.0.0.x\" is not an IPv4 or IPv6 address",
        ),
        (
            "[[route]]\nprefix = \"10.1.0.0\"\n",
            "route[0].prefix",
            "route[0].prefix: \"10.1.0.0\" is not a prefix (a.b.c.d/len or x:y::z/len)",
        ),
        (
            "[[route]]\nprefix = \"2001:db8::/32\"\nvia = [\"10.0.0.1@a\"]\n",
            "route[0].via[0]",
            "route[0].via[0]: next hop 10.0.0.1 is not of the family of prefix 2001:db8::/32",
        ),
        (
            "[[address]]\nport = \"a\"\nip = \"2001:db8::1/130\"\n",
            "address[0].ip",
            "address[0].ip: \"2001:db8::1/130\": prefix length must be 0 to 128",
        ),
        (
            "[[route]]\nprefix = \"10.1.0.0/16\"\nvia = [\"10.0.0.1\"]\n",
            "route[0].via[0]",
            "route[0].via[0]: \"10.0.0.1\" is not address@port",
        ),
        (
            "[[address]]\nport = \"a\"\nip = \"10.0.0.1/40\"\n",
            "address[0].ip",
            "address[0].ip: \"10.0.0.1/40\": prefix length must be 0 to 32",
        ),
        (
            "[[neighbor]]\nport = \"a\"\nip = \"10.0.0.2\"\nmac = \"02:00:00:00:00\"\n",
            "neighbor[0].mac",
            "neighbor[0].mac: \"02:00:00:00:00\" is not a MAC address",
        ),
        (
            "[[neighbor]]\nport = \"a\"\nip = \"10.0.0.256\"\nmac = \"02:00:00:00:00:02\"\n",
            "neighbor[0].ip",
            "neighbor[0].ip: \"10.0.0.256\" is not an IPv4 or IPv6 address",
        ),
        (
            "[metrics]\nlisten = \"localhost\"\n",
            "metrics.listen",
            "metrics.listen: metrics listen address `localhost` is not IP:PORT (for example \
             127.0.0.1:9464)",
        ),
    ];
    for (text, key, message) in cases {
        let (k, m) = refused(&format!("{PORTS}{text}"));
        assert_eq!((k.as_str(), m.as_str()), (key, message), "{text}");
    }
}

#[test]
fn tables_and_vxlan_tunnels_are_checked_by_their_keys() {
    let ok = Config::parse(&format!(
        "{PORTS}[[address]]\nport = \"a\"\nip = \"192.0.2.1/24\"\n\
         [[vxlan]]\nname = \"vx\"\nlocal = \"192.0.2.1\"\nremote = \"192.0.2.2\"\nvni = 7\nrouted = true\n\
         [[table]]\nname = \"red\"\ninterfaces = [\"b\", \"vx\"]\n\
         [[address]]\nport = \"vx\"\nip = \"172.31.0.1/30\"\n\
         [[route]]\nprefix = \"10.0.0.0/8\"\ntable = \"red\"\nvia = [\"172.31.0.2@vx\"]\n"
    ))
    .unwrap();
    let t = ok.topology().unwrap();
    assert_eq!(t.vxlans[0].routed, Some(([2, 0x7e, 0, 0, 0, 7], 1450)));
    assert_eq!(t.tables[0].interfaces, ["b", "vx"]);
    assert_eq!(t.routes[0].table, Some("red"));
    let vx = |more: &str| {
        format!(
            "[[address]]\nport = \"a\"\nip = \"192.0.2.1/24\"\n\
             [[vxlan]]\nname = \"vx\"\nlocal = \"192.0.2.1\"\nremote = \"192.0.2.2\"\nvni = 7\n{more}"
        )
    };
    let cases = [
        (
            "[[table]]\nname = \"default\"\n".to_string(),
            "table[0].name",
        ),
        (
            "[[table]]\nname = \"red\"\ninterfaces = [\"a\"]\n\
             [[table]]\nname = \"blue\"\ninterfaces = [\"a\"]\n"
                .to_string(),
            "table[1].interfaces[0]",
        ),
        (
            "[[table]]\nname = \"red\"\ninterfaces = [\"z\"]\n".to_string(),
            "table[0].interfaces[0]",
        ),
        (
            "[[route]]\nprefix = \"10.0.0.0/8\"\ntable = \"green\"\n".to_string(),
            "route[0].table",
        ),
        (
            "[[table]]\nname = \"red\"\ninterfaces = [\"a\"]\n\
             [[route]]\nprefix = \"10.0.0.0/8\"\nvia = [\"10.0.0.2@a\"]\n"
                .to_string(),
            "route[0].via[0]",
        ),
        (
            "[[vxlan]]\nname = \"vx\"\nlocal = \"10.0.0.1\"\nremote = \"10.0.0.2\"\nvni = 1\n"
                .to_string(),
            "vxlan[0].local",
        ),
        (
            vx("").replace("192.0.2.2", "2001:db8::2"),
            "vxlan[0].remote",
        ),
        (vx("").replace("vni = 7", "vni = 16777216"), "vxlan[0].vni"),
        (vx("mac = \"02:00:00:00:00:01\"\n"), "vxlan[0].routed"),
        (vx("routed = true\nmtu = 100\n"), "vxlan[0].mtu"),
        (
            vx("").replace("name = \"vx\"", "name = \"a\""),
            "vxlan[0].name",
        ),
    ];
    for (text, key) in cases {
        let (k, m) = refused(&format!("{PORTS}{text}"));
        assert_eq!(k, key, "{text}: {m}");
    }
}

#[test]
fn a_bad_port_is_refused_at_load_by_its_key() {
    let cases = [
        ("[[port]]\nname = \"c\"\ntype = \"tap\"\nmac = \"02:zz:00:00:00:01\"\n", "port[2].mac"),
        ("[[port]]\nname = \"c\"\ntype = \"af_packet\"\ninterface = \"v\"\nmac = \"02:00:00:00:00:01\"\n", "port[2].mac"),
        ("[[port]]\nname = \"c\"\ntype = \"dpdk\"\ndevice = \"net_ring0\"\nmac = \"02:00:00:00:00:01\"\n", "port[2].mac"),
        ("[[port]]\nname = \"a\"\ntype = \"tap\"\n", "port[2].name"),
        ("[[port]]\nname = \"c\"\ntype = \"memif\"\nrole = \"slave\"\nsocket = \"@q\"\nring_size = 1000\n", "port[2].ring_size"),
        ("[[port]]\nname = \"c\"\ntype = \"memif\"\nrole = \"slave\"\nsocket = \"\"\n", "port[2].socket"),
        ("[[port]]\nname = \"c\"\ntype = \"memif\"\nrole = \"slave\"\nsocket = \"@q\"\nqueues = 0\n", "port[2].queues"),
        ("[[port]]\nname = \"c\"\ntype = \"memif\"\nrole = \"slave\"\nsocket = \"@q\"\nqueues = 257\n", "port[2].queues"),
        ("[[port]]\nname = \"c\"\ntype = \"af_packet\"\ninterface = \"v\"\nring_kb = 1000\n", "port[2].ring_kb"),
        ("[[port]]\nname = \"c\"\ntype = \"af_packet\"\ninterface = \"v\"\nring_kb = 32\n", "port[2].ring_kb"),
        ("[[port]]\nname = \"c\"\ntype = \"af_packet\"\ninterface = \"v\"\nring_kb = 131072\n", "port[2].ring_kb"),
        ("[[port]]\nname = \"c\"\ntype = \"af_xdp\"\ninterface = \"v\"\nframes = 1000\n", "port[2].frames"),
        ("[[port]]\nname = \"c\"\ntype = \"af_xdp\"\ninterface = \"v\"\nframes = 32\n", "port[2].frames"),
        ("[[port]]\nname = \"c\"\ntype = \"af_xdp\"\ninterface = \"v\"\nmac = \"02:00:00:00:00:01\"\n", "port[2].mac"),
    ];
    for (text, key) in cases {
        let (k, m) = refused(&format!("{PORTS}{text}"));
        assert_eq!(k, key, "{text}: {m}");
        assert!(m.starts_with(&format!("{key}: ")), "{m}");
    }
}

#[test]
fn a_name_the_file_does_not_define_is_refused_by_its_key() {
    let cases = [
        (
            "[[xconnect]]\na = \"a\"\nb = \"nosuch\"\n",
            "xconnect[0].b",
            "no port named \"nosuch\"",
        ),
        (
            "[[xconnect]]\na = \"b\"\nb = \"b\"\n",
            "xconnect[0].b",
            "\"b\" is cross-connected to itself",
        ),
        (
            "[[address]]\nport = \"nosuch\"\nip = \"10.0.0.1/24\"\n",
            "address[0].port",
            "no port named \"nosuch\"",
        ),
        (
            "[[neighbor]]\nport = \"nosuch\"\nip = \"10.0.0.2\"\nmac = \"02:00:00:00:00:02\"\n",
            "neighbor[0].port",
            "no port named \"nosuch\"",
        ),
        (
            "[[route]]\nprefix = \"10.1.0.0/16\"\nvia = [\"10.0.0.1@nosuch\"]\n",
            "route[0].via[0]",
            "no port or wireguard tunnel named \"nosuch\"",
        ),
    ];
    for (text, key, why) in cases {
        let (k, m) = refused(&format!("{PORTS}{text}"));
        assert_eq!(m, format!("{key}: {why}"), "{text}");
        assert_eq!(k, key);
    }
}

#[test]
fn wireguard_values_are_checked_at_load_and_routes_may_name_a_tunnel() {
    let tunnel = "[[wireguard]]\nname = \"wg0\"\nprivate_key = \"k\"\nlisten_port = 51820\n\
                  address = \"192.0.2.1\"\n[[wireguard.peers]]\npublic_key = \"p\"\n";
    let routed = format!(
        "{PORTS}{tunnel}endpoint = \"192.0.2.2:51820\"\nallowed_ips = [\"10.9.0.0/24\", \"10.8.0.1\"]\n\
         [[route]]\nprefix = \"10.9.0.0/24\"\nvia = [\"10.9.0.2@wg0\"]\n"
    );
    Config::parse(&routed).unwrap();
    // A tunnel in a table: the table's routes may go into it, another table's may not.
    let in_red = format!(
        "{PORTS}{tunnel}[[table]]\nname = \"red\"\ninterfaces = [\"wg0\"]\n\
         [[route]]\nprefix = \"10.9.0.0/24\"\ntable = \"red\"\nvia = [\"10.9.0.2@wg0\"]\n"
    );
    let t = Config::parse(&in_red).unwrap();
    assert_eq!(t.topology().unwrap().tables[0].interfaces, ["wg0"]);
    let (k, m) = refused(&in_red.replace("table = \"red\"\nvia", "via"));
    assert_eq!(k, "route[0].via[0]", "{m}");
    assert!(m.contains("\"wg0\" is in table \"red\""), "{m}");
    let cases = [
        (
            tunnel.replace("192.0.2.1", "192.0.2"),
            "wireguard[0].address",
        ),
        (tunnel.replace("51820", "0"), "wireguard[0].listen_port"),
        (tunnel.replace("\"wg0\"", "\"a\""), "wireguard[0].name"),
        (tunnel.replace("\"wg0\"", "\"w g\""), "wireguard[0].name"),
        (
            tunnel.replace("private_key = \"k\"\n", ""),
            "wireguard[0].private_key",
        ),
        (
            format!("{tunnel}endpoint = \"192.0.2.2\"\n"),
            "wireguard[0].peers[0].endpoint",
        ),
        (
            format!("{tunnel}endpoint = \"2001:db8::2:51820\"\n"),
            "wireguard[0].peers[0].endpoint",
        ),
        (
            format!("{tunnel}endpoint = \"[2001:db8::2]:51820\"\n"),
            "wireguard[0].peers[0].endpoint",
        ),
        (
            tunnel.replace("192.0.2.1", "2001:db8::1") + "endpoint = \"192.0.2.2:51820\"\n",
            "wireguard[0].peers[0].endpoint",
        ),
        (
            format!("{tunnel}allowed_ips = [\"10.9.0.0/24\", \"10.8.0/8\"]\n"),
            "wireguard[0].peers[0].allowed_ips[1]",
        ),
    ];
    for (text, key) in cases {
        let (k, m) = refused(&format!("{PORTS}{text}"));
        assert_eq!(k, key, "{text}: {m}");
    }
    // Over an IPv6 underlay: an IPv6 address, IPv6 endpoints in brackets.
    let six = tunnel.replace("192.0.2.1", "2001:db8::1")
        + "endpoint = \"[2001:db8::2]:51820\"\nallowed_ips = [\"10.9.0.0/24\", \"fd00:9::/64\"]\n";
    let cfg = Config::parse(&format!("{PORTS}{six}")).unwrap();
    assert_eq!(cfg.wireguard[0].address, "2001:db8::1");
    let (_, m) = refused(&format!(
        "{PORTS}{}endpoint = \"192.0.2.2:51820\"\n",
        tunnel.replace("192.0.2.1", "2001:db8::1")
    ));
    assert!(
        m.contains("not of the family of the tunnel's address 2001:db8::1"),
        "{m}"
    );
}
