//! Checking a parsed `quiver.toml` whole, before anything is opened: every address, prefix,
//! MAC and next hop parses, every name a section refers to is defined, and what the ports'
//! drivers would refuse at start (a MAC they cannot set, a memif ring size) is refused here
//! instead. The first error names its key as the file writes it: `route[2].via[0]: "10.0.0.x"
//! is not an IPv4 or IPv6 address`. What it makes of the file's topology is a [`Topology`] of typed
//! values.

use std::collections::HashSet;
use std::net::IpAddr;

use super::values::{self, ValueError};
use super::vxlan::Vxlan;
use super::{
    AddressSection, Config, ConfigError, NeighborSection, PortSection, RouteSection, TableSection,
    XconnectSection,
};

/// The topology of `quiver.toml` as typed values: what [`Config::topology`] makes of the
/// file's strings once they are checked, and what the forwarder configures. Each entry keeps
/// its section, for messages in the file's own words.
#[derive(Debug, Default)]
pub struct Topology<'a> {
    /// `[[xconnect]]`s (both ports defined, not the same).
    pub xconnects: Vec<&'a XconnectSection>,
    /// `[[address]]`es.
    pub addresses: Vec<Address<'a>>,
    /// `[[neighbor]]`s.
    pub neighbors: Vec<Neighbor<'a>>,
    /// `[[route]]`s.
    pub routes: Vec<Route<'a>>,
    /// `[[table]]`s (names unique, their ports defined and in one table each).
    pub tables: Vec<&'a TableSection>,
    /// `[[vxlan]]` tunnels (made before the tables, which may hold them).
    pub vxlans: Vec<Vxlan<'a>>,
}

/// One `[[address]]`, parsed.
#[derive(Debug)]
pub struct Address<'a> {
    /// As written (its `port` is defined).
    pub section: &'a AddressSection,
    /// The address (IPv4 or IPv6).
    pub ip: IpAddr,
    /// Its prefix length.
    pub len: u8,
}

/// One `[[neighbor]]`, parsed.
#[derive(Debug)]
pub struct Neighbor<'a> {
    /// As written (its `port` is defined).
    pub section: &'a NeighborSection,
    /// The neighbour's address (IPv4: a static ARP entry; IPv6: a static neighbour
    /// discovery one).
    pub ip: IpAddr,
    /// Its MAC.
    pub mac: [u8; 6],
}

/// One `[[route]]`, parsed.
#[derive(Debug)]
pub struct Route<'a> {
    /// As written.
    pub section: &'a RouteSection,
    /// The destination prefix's address (IPv4 or IPv6).
    pub prefix: IpAddr,
    /// Its length.
    pub len: u8,
    /// The next hops: an address of the prefix's family and a port's or a WireGuard
    /// tunnel's name (defined).
    pub via: Vec<(IpAddr, &'a str)>,
    /// Its `[[table]]`, `None` for the default table.
    pub table: Option<&'a str>,
    /// The table a next-table route's packets are looked up in again (`default` included).
    pub next_table: Option<&'a str>,
}

/// Where a value is wrong: its key, and what is wrong with it.
fn at(key: String) -> impl FnOnce(ValueError) -> ConfigError {
    move |source| ConfigError::Value { key, source }
}

/// A refusal at `key`.
fn refused(key: String, why: impl Into<String>) -> ConfigError {
    ConfigError::Value {
        key,
        source: ValueError::Refused(why.into()),
    }
}

impl Config {
    /// Checks every value the file holds as a string and every name it refers to; the first
    /// problem found, named by its key.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        self.topology().map(drop)
    }

    /// The file's topology as typed values (see [`Topology`]), once every value is checked
    /// and every name it refers to is defined; else the first problem found, named by its key.
    pub fn topology(&self) -> Result<Topology<'_>, ConfigError> {
        self.check_metrics()?;
        let mut ports = self.check_ports()?;
        let tunnels = self.check_wireguard(&ports)?;
        // A tunnel's local address must be one of the file's; a bad one is named below.
        let addresses: Vec<IpAddr> = self
            .address
            .iter()
            .filter_map(|a| values::prefix(&a.ip).ok().map(|(ip, _)| ip))
            .collect();
        let taken: HashSet<&str> = ports.union(&tunnels).copied().collect();
        let vxlans = self.check_vxlan(&taken, &addresses)?;
        // A VXLAN tunnel stands wherever a port may.
        ports.extend(vxlans.iter().map(|v| v.section.name.as_str()));
        let port = |key: String, name: &str| {
            if ports.contains(name) {
                Ok(())
            } else {
                Err(at(key)(ValueError::Unknown {
                    what: "port",
                    name: name.to_string(),
                }))
            }
        };
        let mut t = Topology {
            vxlans,
            ..Topology::default()
        };
        for (i, x) in self.xconnect.iter().enumerate() {
            port(format!("xconnect[{i}].a"), &x.a)?;
            port(format!("xconnect[{i}].b"), &x.b)?;
            if x.a == x.b {
                return Err(at(format!("xconnect[{i}].b"))(ValueError::ToItself(
                    x.b.clone(),
                )));
            }
            t.xconnects.push(x);
        }
        for (i, a) in self.address.iter().enumerate() {
            port(format!("address[{i}].port"), &a.port)?;
            let (ip, len) = values::prefix(&a.ip).map_err(at(format!("address[{i}].ip")))?;
            t.addresses.push(Address {
                section: a,
                ip,
                len,
            });
        }
        for (i, n) in self.neighbor.iter().enumerate() {
            port(format!("neighbor[{i}].port"), &n.port)?;
            t.neighbors.push(Neighbor {
                section: n,
                ip: values::ip(&n.ip).map_err(at(format!("neighbor[{i}].ip")))?,
                mac: values::mac(&n.mac).map_err(at(format!("neighbor[{i}].mac")))?,
            });
        }
        // Each port's table (absent: the default table).
        let mut table_of: std::collections::HashMap<&str, &str> = Default::default();
        for (i, tab) in self.table.iter().enumerate() {
            if tab.name.trim().is_empty() || tab.name == crate::forwarder::DEFAULT_TABLE {
                return Err(refused(
                    format!("table[{i}].name"),
                    format!(
                        "{:?} cannot name a table (`default` is the default table's)",
                        tab.name
                    ),
                ));
            }
            if self.table[..i].iter().any(|u| u.name == tab.name) {
                return Err(at(format!("table[{i}].name"))(ValueError::Duplicate(
                    tab.name.clone(),
                )));
            }
            for (j, p) in tab.interfaces.iter().enumerate() {
                port(format!("table[{i}].interfaces[{j}]"), p)?;
                if let Some(other) = table_of.insert(p.as_str(), tab.name.as_str()) {
                    return Err(refused(
                        format!("table[{i}].interfaces[{j}]"),
                        format!("{p:?} is in table {other:?} already"),
                    ));
                }
            }
            t.tables.push(tab);
        }
        for (i, r) in self.route.iter().enumerate() {
            let (prefix, len) =
                values::prefix(&r.prefix).map_err(at(format!("route[{i}].prefix")))?;
            let table = r
                .table
                .as_deref()
                .filter(|t| *t != crate::forwarder::DEFAULT_TABLE);
            if let Some(t) = table {
                if !self.table.iter().any(|x| x.name == t) {
                    return Err(at(format!("route[{i}].table"))(ValueError::Unknown {
                        what: "table",
                        name: t.to_string(),
                    }));
                }
            }
            let next_table = super::next_table::check(i, r, table, &self.table)?;
            let mut via = Vec::new();
            for (j, v) in r.via.iter().enumerate() {
                let key = format!("route[{i}].via[{j}]");
                let (next_hop, name) = values::via(v).map_err(at(key.clone()))?;
                if next_hop.is_ipv4() != prefix.is_ipv4() {
                    return Err(at(key)(ValueError::Family {
                        prefix: r.prefix.clone(),
                        next_hop,
                    }));
                }
                if !ports.contains(name) && !tunnels.contains(name) {
                    return Err(at(key)(ValueError::Unknown {
                        what: "port or wireguard tunnel",
                        name: name.to_string(),
                    }));
                }
                if table_of.get(name).copied() != table && ports.contains(name) {
                    return Err(refused(
                        key,
                        format!(
                            "{name:?} is in table {:?}, the route in {:?}",
                            table_of.get(name).copied().unwrap_or("default"),
                            table.unwrap_or("default")
                        ),
                    ));
                }
                via.push((next_hop, name));
            }
            t.routes.push(Route {
                section: r,
                prefix,
                len,
                via,
                table,
                next_table,
            });
        }
        Ok(t)
    }

    /// `[metrics] listen`: empty, or `IP:PORT`.
    fn check_metrics(&self) -> Result<(), ConfigError> {
        let listen = &self.metrics.listen;
        if !listen.trim().is_empty() {
            values::listen_address(listen).map_err(at("metrics.listen".into()))?;
        }
        Ok(())
    }

    /// `[[port]]`: unique names, MACs, memif rings and sockets; the ports' names.
    fn check_ports(&self) -> Result<HashSet<&str>, ConfigError> {
        let mut names = HashSet::new();
        for (i, p) in self.port.iter().enumerate() {
            let common = p.common();
            if !names.insert(common.name) {
                return Err(at(format!("port[{i}].name"))(ValueError::Duplicate(
                    common.name.to_string(),
                )));
            }
            if let Some(mac) = common.mac {
                let key = format!("port[{i}].mac");
                match p {
                    PortSection::AfPacket(_) => {
                        return Err(refused(
                            key,
                            "an af_packet port uses its kernel interface's MAC",
                        ))
                    }
                    PortSection::AfXdp(_) => {
                        return Err(refused(
                            key,
                            "an af_xdp port uses its kernel interface's MAC",
                        ))
                    }
                    PortSection::Dpdk(_) => {
                        return Err(refused(key, "a dpdk port uses its device's MAC"))
                    }
                    PortSection::Memif(_) | PortSection::Tap(_) => {
                        values::mac(mac).map_err(at(key))?;
                    }
                }
            }
            if let PortSection::AfPacket(a) = p {
                let range = super::topology::AF_PACKET_RING_KB;
                if !a.ring_kb.is_power_of_two() || !range.contains(&a.ring_kb) {
                    return Err(refused(
                        format!("port[{i}].ring_kb"),
                        format!(
                            "{} must be a power of two from {} to {}",
                            a.ring_kb,
                            range.start(),
                            range.end()
                        ),
                    ));
                }
            }
            if let PortSection::AfXdp(x) = p {
                let range = super::topology::AF_XDP_FRAMES;
                if !x.frames.is_power_of_two() || !range.contains(&x.frames) {
                    return Err(refused(
                        format!("port[{i}].frames"),
                        format!(
                            "{} must be a power of two from {} to {}",
                            x.frames,
                            range.start(),
                            range.end()
                        ),
                    ));
                }
            }
            if let PortSection::Memif(m) = p {
                if !(1..=256).contains(&m.queues) {
                    return Err(refused(
                        format!("port[{i}].queues"),
                        format!("{} must be from 1 to 256", m.queues),
                    ));
                }
                if !m.ring_size.is_power_of_two() || !(2..=1 << 14).contains(&m.ring_size) {
                    return Err(refused(
                        format!("port[{i}].ring_size"),
                        format!("{} must be a power of two from 2 to 16384", m.ring_size),
                    ));
                }
                if m.socket.is_empty() {
                    return Err(refused(format!("port[{i}].socket"), "is empty"));
                }
            }
        }
        Ok(names)
    }

    /// `[[wireguard]]`: names (unique among ports and tunnels), one key source, the listen
    /// port, addresses, endpoints and allowed IPs; the tunnels' names. The keys themselves are
    /// read when the tunnel is made.
    fn check_wireguard(&self, ports: &HashSet<&str>) -> Result<HashSet<&str>, ConfigError> {
        let mut names = HashSet::new();
        for (i, w) in self.wireguard.iter().enumerate() {
            let key = |k: &str| format!("wireguard[{i}].{k}");
            let name = w.name.as_str();
            if name.is_empty() || name.len() > 64 || name.chars().any(char::is_whitespace) {
                return Err(refused(key("name"), "1 to 64 characters, no spaces"));
            }
            if ports.contains(name) || !names.insert(name) {
                return Err(at(key("name"))(ValueError::Duplicate(name.to_string())));
            }
            if w.private_key.is_empty() == w.private_key_file.is_empty() {
                return Err(refused(
                    key("private_key"),
                    "give one of private_key, private_key_file",
                ));
            }
            if w.listen_port == 0 {
                return Err(refused(key("listen_port"), "0 is not a port"));
            }
            // Exactly as the tunnel reads it (no spaces around): the underlay's family.
            let Ok(local) = w.address.parse::<IpAddr>() else {
                return Err(at(key("address"))(ValueError::NotIp(w.address.clone())));
            };
            for (j, p) in w.peers.iter().enumerate() {
                let peer = |k: &str| format!("wireguard[{i}].peers[{j}].{k}");
                if !p.endpoint.is_empty() {
                    let e = values::endpoint(&p.endpoint).map_err(at(peer("endpoint")))?;
                    if e.is_ipv6() != local.is_ipv6() {
                        return Err(refused(
                            peer("endpoint"),
                            format!("{e} is not of the family of the tunnel's address {local}"),
                        ));
                    }
                }
                for (k, a) in p.allowed_ips.iter().enumerate() {
                    values::allowed_ip(a).map_err(at(format!("{}[{k}]", peer("allowed_ips"))))?;
                }
            }
        }
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
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
}
