//! Request validation: addresses, prefixes, MACs (see [`crate::addr`]), namespaces, interface
//! names, payloads and the connection context. Every check returns a `Status` that says which field is wrong, so a
//! bad request is refused before anything is built.

use std::net::IpAddr;
use std::path::PathBuf;

use nsm_proto::connectioncontext::{ConnectionContext, IpContext, PolicyRoute, Route};
use tonic::Status;

use crate::addr::{IpPrefix, MacError, PrefixError};
use crate::dataplane::{IpConfig, NeighborSpec, PolicySpec, RouteSpec};

/// The longest Linux interface name (IFNAMSIZ - 1).
pub const MAX_IFNAME: usize = 15;

/// What the connection carries (`Connection.payload`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// `ETHERNET` (also the default when empty): L2 cross-connect.
    Ethernet,
    /// `IP`: L3 cross-connect.
    Ip,
}

impl Payload {
    /// Its name in `Connection.payload` (and a network service's registration).
    pub fn as_str(self) -> &'static str {
        match self {
            Payload::Ethernet => "ETHERNET",
            Payload::Ip => "IP",
        }
    }
}

/// Parses `Connection.payload`.
pub fn payload(s: &str) -> Result<Payload, Status> {
    match s {
        "" | "ETHERNET" => Ok(Payload::Ethernet),
        "IP" => Ok(Payload::Ip),
        other => Err(Status::invalid_argument(format!(
            "connection.payload {other:?} is neither ETHERNET nor IP"
        ))),
    }
}

/// Resolves a mechanism's `inodeURL` to a namespace path. `file://` URLs must name an existing
/// file: a well-formed URL whose namespace does not exist is `NotFound`; a malformed or
/// unsupported URL is `InvalidArgument`.
pub fn netns_url(what: &str, url: &str) -> Result<PathBuf, Status> {
    if url.is_empty() {
        return Err(Status::invalid_argument(format!(
            "{what}: inodeURL is missing"
        )));
    }
    if url.starts_with("inode://") {
        return Err(Status::invalid_argument(format!(
            "{what}: inodeURL {url:?}: no file descriptor was passed for it (inode:// URLs \
             name fds passed beside the call on the NSM socket, grpcfd)"
        )));
    }
    let path = url.strip_prefix("file://").ok_or_else(|| {
        Status::invalid_argument(format!("{what}: inodeURL {url:?} is not a file:// URL"))
    })?;
    if !path.starts_with('/') {
        return Err(Status::invalid_argument(format!(
            "{what}: inodeURL {url:?} is not an absolute file:// URL"
        )));
    }
    let path = PathBuf::from(path);
    if !path.exists() {
        return Err(Status::not_found(format!(
            "{what}: network namespace {} does not exist",
            path.display()
        )));
    }
    Ok(path)
}

/// Checks a Linux interface name: 1 to 15 bytes, no `/`, whitespace, `:` or NUL, not `.`/`..`.
pub fn ifname(what: &str, name: &str) -> Result<(), Status> {
    let bad = |why: &str| {
        Err(Status::invalid_argument(format!(
            "{what}: interface name {name:?} {why}"
        )))
    };
    if name.is_empty() {
        return bad("is empty");
    }
    if name.len() > MAX_IFNAME {
        return bad("is longer than 15 bytes");
    }
    if name == "." || name == ".." {
        return bad("is not allowed");
    }
    if name
        .chars()
        .any(|c| c == '/' || c == ':' || c == '\0' || c.is_whitespace())
    {
        return bad("contains '/', ':', NUL or whitespace");
    }
    Ok(())
}

/// Parses an optional decimal MTU parameter (68..=65535).
pub fn mtu(what: &str, value: Option<&String>) -> Result<Option<u32>, Status> {
    let Some(v) = value.filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    match v.parse::<u32>() {
        Ok(m) if (68..=65535).contains(&m) => Ok(Some(m)),
        _ => Err(Status::invalid_argument(format!(
            "{what}: MTU {v:?} is not a number in 68..=65535"
        ))),
    }
}

/// Parses a VXLAN VNI (decimal, 24 bits).
pub fn vni(what: &str, value: &str) -> Result<u32, Status> {
    match value.parse::<u32>() {
        Ok(v) if v < 1 << 24 => Ok(v),
        _ => Err(Status::invalid_argument(format!(
            "{what}: vni {value:?} is not a decimal number below 2^24"
        ))),
    }
}

/// Parses an IP address field.
pub fn ip(what: &str, value: &str) -> Result<IpAddr, Status> {
    value
        .parse()
        .map_err(|_| Status::invalid_argument(format!("{what}: {value:?} is not an IP address")))
}

fn prefix(what: &str, value: &str) -> Result<IpPrefix, Status> {
    value
        .parse()
        .map_err(|e: PrefixError| Status::invalid_argument(format!("{what}: {e}")))
}

fn routes(what: &str, routes: &[Route]) -> Result<Vec<RouteSpec>, Status> {
    routes
        .iter()
        .map(|r| {
            let prefix = prefix(&format!("{what}.prefix"), &r.prefix)?;
            Ok(RouteSpec {
                prefix,
                via: match r.next_hop.as_str() {
                    "" => None,
                    h => {
                        let via = ip(&format!("{what}.nextHop"), h)?;
                        if via.is_ipv4() != prefix.addr.is_ipv4() {
                            return Err(Status::invalid_argument(format!(
                                "{what}.nextHop: {h:?} is not of the family of {:?}",
                                r.prefix
                            )));
                        }
                        Some(via)
                    }
                },
            })
        })
        .collect()
}

/// An IP protocol of a policy: a name (`tcp`, `udp`, `icmp`, `icmpv6`, `sctp`) or a number.
fn ip_proto(what: &str, value: &str) -> Result<Option<u8>, Status> {
    Ok(Some(match value.to_ascii_lowercase().as_str() {
        "" => return Ok(None),
        "icmp" => 1,
        "tcp" => 6,
        "udp" => 17,
        "icmpv6" | "ipv6-icmp" => 58,
        "sctp" => 132,
        n => n.parse().map_err(|_| {
            Status::invalid_argument(format!(
                "{what}: {value:?} is not a protocol name (tcp, udp, icmp, icmpv6, sctp) or number"
            ))
        })?,
    }))
}

/// A policy's port: "N" or "N-M", 1 to 65535.
fn port_range(what: &str, value: &str) -> Result<Option<(u16, u16)>, Status> {
    if value.is_empty() {
        return Ok(None);
    }
    let bad = || {
        Status::invalid_argument(format!(
            "{what}: {value:?} is not a port (N) or range (N-M) of 1 to 65535"
        ))
    };
    let (a, b) = value.split_once('-').unwrap_or((value, value));
    let a: u16 = a.trim().parse().map_err(|_| bad())?;
    let b: u16 = b.trim().parse().map_err(|_| bad())?;
    if a == 0 || a > b {
        return Err(bad());
    }
    Ok(Some((a, b)))
}

/// Checks `IPContext.policies`: each one's source prefix, protocol, ports and routes, of one
/// address family, and no two selecting the same traffic (their rules would collide).
fn policies(policies: &[PolicyRoute]) -> Result<Vec<PolicySpec>, Status> {
    let mut out: Vec<PolicySpec> = Vec::with_capacity(policies.len());
    for (i, p) in policies.iter().enumerate() {
        let what = format!("ip_context.policies[{i}]");
        let from = match p.from.as_str() {
            "" => None,
            f => Some(prefix(&format!("{what}.from"), f)?),
        };
        let routes = routes(&format!("{what}.routes"), &p.routes)?;
        let spec = PolicySpec {
            from,
            proto: ip_proto(&format!("{what}.proto"), &p.proto)?,
            src_port: port_range(&format!("{what}.src_port"), &p.src_port)?,
            dst_port: port_range(&format!("{what}.dst_port"), &p.dst_port)?,
            routes,
        };
        let v6 = spec.is_ipv6();
        if let Some(r) = spec.routes.iter().find(|r| r.prefix.addr.is_ipv6() != v6) {
            return Err(Status::invalid_argument(format!(
                "{what}.routes: {} is not of the policy's address family",
                r.prefix
            )));
        }
        if out.iter().any(|o| o.selector() == spec.selector()) {
            return Err(Status::invalid_argument(format!(
                "{what}: selects the same traffic as an earlier policy (their rules and \
                 tables would collide)"
            )));
        }
        out.push(spec);
    }
    Ok(out)
}

/// The checked IP context of a connection, split by side.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SidesIp {
    /// The client (NSC) side: `src_ip_addrs`, `src_routes`, `ip_neighbors`.
    pub client: IpConfig,
    /// The endpoint (NSE) side: `dst_ip_addrs`, `dst_routes`.
    pub endpoint: IpConfig,
}

impl SidesIp {
    /// The next hop toward the endpoint, for an L3 cross-connect: its first IPv4 address
    /// (Quiver resolves next hops with ARP), else its first.
    pub fn endpoint_hop(&self) -> Option<IpAddr> {
        hop(&self.endpoint.addresses)
    }

    /// The next hop toward the client: its first IPv4 address, else its first.
    pub fn client_hop(&self) -> Option<IpAddr> {
        hop(&self.client.addresses)
    }
}

fn hop(addresses: &[IpPrefix]) -> Option<IpAddr> {
    addresses
        .iter()
        .find(|p| p.addr.is_ipv4())
        .or(addresses.first())
        .map(|p| p.addr)
}

/// Checks every address, prefix, route and neighbour of `ctx` and splits them by side.
pub fn context(ctx: Option<&ConnectionContext>) -> Result<SidesIp, Status> {
    let Some(ipc) = ctx.and_then(|c| c.ip_context.as_ref()) else {
        return Ok(SidesIp::default());
    };
    ip_context(ipc)
}

fn ip_context(c: &IpContext) -> Result<SidesIp, Status> {
    let addrs = |what: &str, v: &[String]| -> Result<Vec<IpPrefix>, Status> {
        v.iter().map(|a| prefix(what, a)).collect()
    };
    for p in &c.excluded_prefixes {
        prefix("ip_context.excluded_prefixes", p)?;
    }
    for p in &c.extra_prefixes {
        prefix("ip_context.extra_prefixes", p)?;
    }
    let policies = policies(&c.policies)?;
    let neighbors = c
        .ip_neighbors
        .iter()
        .map(|n| {
            Ok(NeighborSpec {
                ip: ip("ip_context.ip_neighbors.ip", &n.ip)?,
                mac: n.hardware_address.parse().map_err(|e: MacError| {
                    Status::invalid_argument(format!(
                        "ip_context.ip_neighbors.hardware_address: {e}"
                    ))
                })?,
            })
        })
        .collect::<Result<Vec<_>, Status>>()?;
    let (client_addresses, endpoint_addresses) = (
        addrs("ip_context.src_ip_addrs", &c.src_ip_addrs)?,
        addrs("ip_context.dst_ip_addrs", &c.dst_ip_addrs)?,
    );
    let addresses_of = |v: &[IpPrefix]| v.iter().map(|p| p.addr).collect::<Vec<_>>();
    let (client_peers, endpoint_peers) = (
        addresses_of(&endpoint_addresses),
        addresses_of(&client_addresses),
    );
    Ok(SidesIp {
        client: IpConfig {
            peers: client_peers,
            addresses: client_addresses,
            routes: routes("ip_context.src_routes", &c.src_routes)?,
            neighbors,
            policies,
        },
        endpoint: IpConfig {
            peers: endpoint_peers,
            addresses: endpoint_addresses,
            routes: routes("ip_context.dst_routes", &c.dst_routes)?,
            neighbors: Vec::new(),
            policies: Vec::new(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nsm_proto::connectioncontext::IpNeighbor;
    use tonic::Code;

    #[test]
    fn interface_names() {
        assert!(ifname("x", "nsm-1").is_ok());
        assert!(ifname("x", "abcdefghijklmno").is_ok());
        for bad in ["", "abcdefghijklmnop", "a/b", "a b", ".", "a:1"] {
            assert_eq!(
                ifname("x", bad).unwrap_err().code(),
                Code::InvalidArgument,
                "{bad}"
            );
        }
    }

    #[test]
    fn namespaces() {
        assert_eq!(
            netns_url("x", "file:///proc/self/ns/net").unwrap(),
            PathBuf::from("/proc/self/ns/net")
        );
        assert_eq!(
            netns_url("x", "file:///nonexistent/ns").unwrap_err().code(),
            Code::NotFound
        );
        for bad in [
            "",
            "/proc/self/ns/net",
            "file://relative",
            "inode://3/4",
            "http://x",
        ] {
            assert_eq!(
                netns_url("x", bad).unwrap_err().code(),
                Code::InvalidArgument,
                "{bad}"
            );
        }
    }

    #[test]
    fn vni_and_mtu() {
        assert_eq!(vni("x", "16777215").unwrap(), 16_777_215);
        for bad in ["16777216", "-1", "x", ""] {
            assert!(vni("x", bad).is_err(), "{bad}");
        }
        assert_eq!(mtu("x", Some(&"1500".to_string())).unwrap(), Some(1500));
        assert_eq!(mtu("x", None).unwrap(), None);
        assert!(mtu("x", Some(&"9".to_string())).is_err());
    }

    #[test]
    fn context_splits_sides_and_refuses_bad_fields() {
        let good = IpContext {
            src_ip_addrs: vec!["172.16.0.2/31".into()],
            dst_ip_addrs: vec!["172.16.0.3/31".into()],
            src_routes: vec![Route {
                prefix: "10.0.0.0/8".into(),
                next_hop: "172.16.0.3".into(),
            }],
            ip_neighbors: vec![IpNeighbor {
                ip: "172.16.0.3".into(),
                hardware_address: "02:00:00:00:00:01".into(),
            }],
            ..Default::default()
        };
        let s = ip_context(&good).unwrap();
        assert_eq!(s.client_hop(), Some("172.16.0.2".parse().unwrap()));
        assert_eq!(s.endpoint_hop(), Some("172.16.0.3".parse().unwrap()));
        assert_eq!(s.client.routes.len(), 1);
        assert_eq!(s.client.neighbors.len(), 1);
        assert!(s.endpoint.routes.is_empty());
        assert_eq!(
            s.client.peers,
            vec!["172.16.0.3".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(
            s.endpoint.peers,
            vec!["172.16.0.2".parse::<IpAddr>().unwrap()]
        );
        // The cross-connect's next hop is an IPv4 address whatever the order.
        let mut dual = good.clone();
        dual.dst_ip_addrs = vec!["fd00::3/64".into(), "172.16.0.3/31".into()];
        let s = ip_context(&dual).unwrap();
        assert_eq!(s.endpoint_hop(), Some("172.16.0.3".parse().unwrap()));
        assert_eq!(s.client.peers.len(), 2);

        let mut bad = good.clone();
        bad.src_ip_addrs = vec!["172.16.0.2".into()];
        assert_eq!(ip_context(&bad).unwrap_err().code(), Code::InvalidArgument);
        let mut bad = good.clone();
        bad.dst_routes = vec![Route {
            prefix: "10.0.0.0/8".into(),
            next_hop: "nope".into(),
        }];
        assert_eq!(ip_context(&bad).unwrap_err().code(), Code::InvalidArgument);
        let mut bad = good;
        bad.ip_neighbors[0].hardware_address = "02:00".into();
        assert_eq!(ip_context(&bad).unwrap_err().code(), Code::InvalidArgument);
    }

    #[test]
    fn payloads() {
        assert_eq!(payload("").unwrap(), Payload::Ethernet);
        assert_eq!(payload("IP").unwrap(), Payload::Ip);
        assert_eq!(payload("ip").unwrap_err().code(), Code::InvalidArgument);
    }
}
