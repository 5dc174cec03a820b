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
    /// `[[table]]`s (names unique, their ports and WireGuard tunnels defined and in one table
    /// each).
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
                // A WireGuard tunnel's interface may be in a table too.
                if !tunnels.contains(p.as_str()) {
                    port(format!("table[{i}].interfaces[{j}]"), p)?;
                }
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
                if table_of.get(name).copied() != table {
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
#[path = "check_tests.rs"]
mod tests;
