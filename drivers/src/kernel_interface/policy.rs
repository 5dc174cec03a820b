//! Policy routes (NSM's `IPContext.policies`): each policy is an `ip rule` selecting traffic by
//! source prefix, IP protocol and ports, which sends it to a routing table of its own holding
//! the policy's routes through the interface, or, for a policy without routes, a default route
//! through it (as sdk-kernel's `iprule` does); gateways are on-link. Tables are picked free in
//! the namespace (no rule or route uses them) when the interface is made; the rules are
//! removed with it.
//!
//! A rule outlives its interface when Quiver dies without removing it (SIGKILL, OOM): the
//! interface goes (a TAP with Quiver's descriptors, a veth when the next Quiver reaps it) and
//! its routes with it, but the rule stays. Quiver's rules carry [`RULE_PROTOCOL`], so the next
//! interface Quiver makes in that namespace (a healed connection's, say) first removes those of
//! its rules whose table has no route left (`rules::remove_orphan_rules`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use netlink_packet_route::route::RouteProtocol;
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleMessage, RulePortRange};
use netlink_packet_route::{AddressFamily, IpProtocol};

use super::error::{KernelInterfaceError, Result};
use super::route::{masked, parse_cidr, plan_route, PlannedRoute, RouteConfig};

/// The protocol of the rules Quiver makes (`ip rule` shows `proto 81`): how it tells its own
/// rules from others' (no routing daemon is registered with this number).
pub const RULE_PROTOCOL: u8 = 81;

/// One policy route, as the strings NSM sends (`PolicyRoute`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PolicyConfig {
    /// Source prefix the rule selects ("a.b.c.d/len" or "x::y/len"); empty selects any.
    pub from: String,
    /// IP protocol: a name (`tcp`, `udp`, `icmp`, `icmpv6`, `sctp`) or a number; empty is any.
    pub proto: String,
    /// Source port or range ("N" or "N-M"); empty is any.
    pub src_port: String,
    /// Destination port or range; empty is any.
    pub dst_port: String,
    /// The routes of the policy's table (through the interface); none: a default route
    /// through the interface (`0.0.0.0/0`, or `::/0` for an IPv6 policy).
    pub routes: Vec<RouteConfig>,
}

/// A policy with every string parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PlannedPolicy {
    /// IPv6 (else IPv4): of `from`, else of the routes.
    v6: bool,
    from: Option<(IpAddr, u8)>,
    proto: Option<u8>,
    src_port: Option<(u16, u16)>,
    dst_port: Option<(u16, u16)>,
    routes: Vec<PlannedRoute>,
}

fn invalid(field: &'static str, value: &str, reason: &'static str) -> KernelInterfaceError {
    KernelInterfaceError::InvalidPolicy {
        field,
        value: value.into(),
        reason,
    }
}

fn parse_proto(value: &str) -> Result<Option<u8>> {
    Ok(Some(match value.to_ascii_lowercase().as_str() {
        "" => return Ok(None),
        "icmp" => 1,
        "tcp" => 6,
        "udp" => 17,
        "icmpv6" | "ipv6-icmp" => 58,
        "sctp" => 132,
        n => n
            .parse()
            .map_err(|_| invalid("proto", value, "not a protocol name or number"))?,
    }))
}

fn parse_ports(field: &'static str, value: &str) -> Result<Option<(u16, u16)>> {
    if value.is_empty() {
        return Ok(None);
    }
    let bad = || invalid(field, value, "not a port (N) or range (N-M) of 1 to 65535");
    let (a, b) = value.split_once('-').unwrap_or((value, value));
    let a: u16 = a.trim().parse().map_err(|_| bad())?;
    let b: u16 = b.trim().parse().map_err(|_| bad())?;
    if a == 0 || a > b {
        return Err(bad());
    }
    Ok(Some((a, b)))
}

/// Checks `policies` whole: prefixes, protocols, ports, one family per policy, and no two
/// policies selecting the same traffic (they would need the same rule).
pub(super) fn plan(policies: &[PolicyConfig]) -> Result<Vec<PlannedPolicy>> {
    let mut out: Vec<PlannedPolicy> = Vec::with_capacity(policies.len());
    for p in policies {
        let from = match p.from.as_str() {
            "" => None,
            f => {
                let (ip, len) = parse_cidr(f)?;
                Some((masked(ip, len), len))
            }
        };
        let mut routes: Vec<PlannedRoute> =
            p.routes.iter().map(plan_route).collect::<Result<_>>()?;
        let v6 = match (from, routes.first()) {
            (Some((ip, _)), _) | (None, Some(&(ip, _, _))) => ip.is_ipv6(),
            (None, None) => false,
        };
        if routes.is_empty() {
            routes.push(default_route(v6));
        }
        if let Some(r) = routes.iter().find(|r| r.0.is_ipv6() != v6) {
            return Err(invalid(
                "routes",
                &format!("{}/{}", r.0, r.1),
                "a policy's routes and source are of one address family",
            ));
        }
        let planned = PlannedPolicy {
            v6,
            from,
            proto: parse_proto(&p.proto)?,
            src_port: parse_ports("src_port", &p.src_port)?,
            dst_port: parse_ports("dst_port", &p.dst_port)?,
            routes,
        };
        if out.iter().any(|o| o.selects_as(&planned)) {
            return Err(invalid(
                "from",
                &p.from,
                "two policies select the same traffic (their rules and tables would collide)",
            ));
        }
        out.push(planned);
    }
    Ok(out)
}

/// The route of a policy without routes: the default route of its family through the
/// interface. sdk-kernel's `iprule` gives such a policy `0.0.0.0/0` whatever its family; an
/// IPv6 rule looks up IPv6 routes only, so an IPv6 policy gets `::/0`.
fn default_route(v6: bool) -> PlannedRoute {
    let any = if v6 {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    } else {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    };
    (any, 0, None)
}

impl PlannedPolicy {
    /// Whether the policy is an IPv6 one.
    pub(super) fn is_ipv6(&self) -> bool {
        self.v6
    }

    /// The routes of its table.
    pub(super) fn routes(&self) -> &[PlannedRoute] {
        &self.routes
    }

    fn selects_as(&self, other: &PlannedPolicy) -> bool {
        (self.v6, self.from, self.proto, self.src_port, self.dst_port)
            == (
                other.v6,
                other.from,
                other.proto,
                other.src_port,
                other.dst_port,
            )
    }

    /// Its rule, sending what it selects to `table`.
    pub(super) fn rule(&self, table: u32) -> RuleMessage {
        let mut rule = RuleMessage::default();
        rule.header.family = family(self.v6);
        rule.header.action = RuleAction::ToTable;
        rule.header.table = u8::try_from(table).unwrap_or(0);
        if let Some((ip, len)) = self.from {
            rule.header.src_len = len;
            rule.attributes.push(RuleAttribute::Source(ip));
        }
        if let Some(p) = self.proto {
            rule.attributes
                .push(RuleAttribute::IpProtocol(IpProtocol::from(p)));
        }
        if let Some((start, end)) = self.src_port {
            rule.attributes
                .push(RuleAttribute::SourcePortRange(RulePortRange { start, end }));
        }
        if let Some((start, end)) = self.dst_port {
            rule.attributes
                .push(RuleAttribute::DestinationPortRange(RulePortRange {
                    start,
                    end,
                }));
        }
        rule.attributes.push(RuleAttribute::Table(table));
        rule.attributes
            .push(RuleAttribute::Protocol(RouteProtocol::Other(RULE_PROTOCOL)));
        rule
    }
}

pub(super) fn family(v6: bool) -> AddressFamily {
    if v6 {
        AddressFamily::Inet6
    } else {
        AddressFamily::Inet
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(from: &str, proto: &str, dst: &str, routes: &[(&str, &str)]) -> PolicyConfig {
        PolicyConfig {
            from: from.into(),
            proto: proto.into(),
            dst_port: dst.into(),
            routes: routes
                .iter()
                .map(|(p, via)| RouteConfig {
                    prefix: (*p).into(),
                    next_hop: Some((*via).into()).filter(|v: &String| !v.is_empty()),
                })
                .collect(),
            ..PolicyConfig::default()
        }
    }

    #[test]
    fn policies_parse_per_family() {
        let p = plan(&[
            policy(
                "172.16.2.0/24",
                "tcp",
                "6666",
                &[("172.16.3.0/24", "172.16.2.1")],
            ),
            policy(
                "2001:db8::1/64",
                "udp",
                "5000-5010",
                &[("2001:db8:1::/48", "")],
            ),
            policy("", "", "", &[]),
        ])
        .unwrap();
        assert!(!p[0].v6);
        assert_eq!(p[0].proto, Some(6));
        assert_eq!(p[0].dst_port, Some((6666, 6666)));
        assert!(p[1].v6);
        assert_eq!(p[1].from, Some(("2001:db8::".parse().unwrap(), 64)));
        assert_eq!(p[1].dst_port, Some((5000, 5010)));
        assert!(!p[2].v6);
        let rule = p[0].rule(300);
        assert_eq!(
            rule.header.table, 0,
            "a table above 255 goes in the attribute only"
        );
        assert!(rule.attributes.contains(&RuleAttribute::Table(300)));
    }

    /// sdk-kernel's `iprule`: "If policy doesn't contain any route - add default".
    #[test]
    fn a_policy_without_routes_gets_its_familys_default_route() {
        let p = plan(&[
            policy("172.16.2.201/24", "6", "", &[]),
            policy("", "17", "6666", &[]),
            policy("2004::3/120", "17", "5555", &[]),
            policy(
                "172.16.2.201/24",
                "6",
                "6666",
                &[("172.16.3.0/24", "172.16.2.200")],
            ),
        ])
        .unwrap();
        let any4: IpAddr = Ipv4Addr::UNSPECIFIED.into();
        let any6: IpAddr = Ipv6Addr::UNSPECIFIED.into();
        assert_eq!(p[0].routes(), [(any4, 0, None)]);
        assert_eq!(p[1].routes(), [(any4, 0, None)], "no source: IPv4");
        assert_eq!(
            p[2].routes(),
            [(any6, 0, None)],
            "an IPv6 rule's table: ::/0"
        );
        assert!(p[2].is_ipv6());
        assert_eq!(
            p[3].routes(),
            [(
                "172.16.3.0".parse().unwrap(),
                24,
                Some("172.16.2.200".parse().unwrap())
            )],
            "a policy with routes keeps them, and nothing else"
        );
    }

    #[test]
    fn bad_policies_name_their_field() {
        let cases = [
            (policy("10.0.0.0/33", "", "", &[]), "10.0.0.0/33"),
            (policy("", "bogus", "", &[]), "proto"),
            (policy("", "tcp", "0", &[]), "dst_port"),
            (policy("", "tcp", "9-3", &[]), "dst_port"),
            (policy("", "tcp", "70000", &[]), "dst_port"),
            (
                policy("10.0.0.0/8", "", "", &[("2001:db8::/32", "")]),
                "routes",
            ),
            (
                policy("", "", "", &[("10.1.0.0/16", "2001:db8::1")]),
                "next hop",
            ),
        ];
        for (p, says) in cases {
            let e = plan(std::slice::from_ref(&p)).unwrap_err().to_string();
            assert!(e.contains(says), "{p:?}: {e}");
        }
        let twice = policy("10.0.0.0/8", "tcp", "80", &[]);
        let e = plan(&[twice.clone(), twice]).unwrap_err().to_string();
        assert!(e.contains("same traffic"), "{e}");
    }
}
