//! Policies' rules and tables in a namespace, through netlink: free tables picked, rules added
//! and removed, and rules left behind by a Quiver that died found and removed (see `policy`).

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::route::{RouteAttribute, RouteMessage};
use netlink_packet_route::rule::{RuleAttribute, RuleMessage};
use netlink_packet_route::RouteNetlinkMessage;
use nix::errno::Errno;

use super::error::{netlink, Result};
use super::links::add_route;
use super::policy::{family, PlannedPolicy, RULE_PROTOCOL};
use crate::netlink::Rtnl;

/// The table a rule sends to.
fn rule_table(r: &RuleMessage) -> u32 {
    r.attributes
        .iter()
        .find_map(|a| match a {
            RuleAttribute::Table(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(u32::from(r.header.table))
}

/// Whether Quiver made the rule (it carries [`RULE_PROTOCOL`]).
fn is_ours(r: &RuleMessage) -> bool {
    r.attributes
        .iter()
        .any(|a| matches!(a, RuleAttribute::Protocol(p) if u8::from(*p) == RULE_PROTOCOL))
}

/// The rules of one family in the namespace.
fn rules_of(rtnl: &mut Rtnl, v6: bool) -> Result<Vec<RuleMessage>> {
    let mut rule = RuleMessage::default();
    rule.header.family = family(v6);
    Ok(rtnl
        .dump(RouteNetlinkMessage::GetRule(rule))
        .map_err(netlink("list rules"))?
        .into_iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewRule(r) => Some(r),
            _ => None,
        })
        .collect())
}

/// The tables that hold at least one route of one family.
fn tables_with_routes(rtnl: &mut Rtnl, v6: bool) -> Result<Vec<u32>> {
    let mut route = RouteMessage::default();
    route.header.address_family = family(v6);
    let routes = rtnl
        .dump(RouteNetlinkMessage::GetRoute(route))
        .map_err(netlink("list routes"))?;
    Ok(routes
        .into_iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewRoute(r) => Some(
                r.attributes
                    .iter()
                    .find_map(|a| match a {
                        RouteAttribute::Table(t) => Some(*t),
                        _ => None,
                    })
                    .unwrap_or(u32::from(r.header.table)),
            ),
            _ => None,
        })
        .collect())
}

/// Removes Quiver's rules (see [`RULE_PROTOCOL`]) whose table holds no route: their interface
/// is gone, so nothing removes them otherwise (a Quiver killed before its Close). Returns how
/// many it removed. Others' rules are left alone, and so are Quiver's whose table still routes
/// (a live interface's: every policy's table holds a route of the rule's family through it, a
/// default route when the policy has none).
pub(super) fn remove_orphan_rules(rtnl: &mut Rtnl) -> Result<usize> {
    let mut removed = 0;
    for v6 in [false, true] {
        let ours: Vec<RuleMessage> = rules_of(rtnl, v6)?.into_iter().filter(is_ours).collect();
        if ours.is_empty() {
            continue;
        }
        let routed = tables_with_routes(rtnl, v6)?;
        for rule in ours.iter().filter(|r| !routed.contains(&rule_table(r))) {
            match rtnl.request(RouteNetlinkMessage::DelRule(rule.clone()), 0) {
                Ok(()) => {
                    tracing::info!(table = rule_table(rule), "removed an orphaned policy rule");
                    removed += 1;
                }
                Err(Errno::ENOENT) => {}
                Err(e) => return Err(netlink("remove an orphaned policy rule")(e)),
            }
        }
    }
    Ok(removed)
}

/// Table ids no rule or route in the namespace uses, lowest first (1 to 252, then from 256).
fn free_tables(rtnl: &mut Rtnl, count: usize) -> Result<Vec<u32>> {
    let mut used = Vec::new();
    for v6 in [false, true] {
        let mut rule = RuleMessage::default();
        rule.header.family = family(v6);
        let rules = rtnl
            .dump(RouteNetlinkMessage::GetRule(rule))
            .map_err(netlink("list rules"))?;
        for m in rules {
            if let RouteNetlinkMessage::NewRule(r) = m {
                used.push(u32::from(r.header.table));
                used.extend(r.attributes.iter().filter_map(|a| match a {
                    RuleAttribute::Table(t) => Some(*t),
                    _ => None,
                }));
            }
        }
        let mut route = RouteMessage::default();
        route.header.address_family = family(v6);
        let routes = rtnl
            .dump(RouteNetlinkMessage::GetRoute(route))
            .map_err(netlink("list routes"))?;
        for m in routes {
            if let RouteNetlinkMessage::NewRoute(r) = m {
                used.push(u32::from(r.header.table));
                used.extend(r.attributes.iter().filter_map(|a| match a {
                    RouteAttribute::Table(t) => Some(*t),
                    _ => None,
                }));
            }
        }
    }
    Ok((1..253)
        .chain(256..)
        .filter(|t| !used.contains(t))
        .take(count)
        .collect())
}

/// Adds each policy's table (its routes through interface `index`) and then its rule; returns
/// the rules added, for [`remove_rules`]. On an error, the rules added so far are removed (the
/// routes go with the interface).
pub(super) fn apply_policies(
    rtnl: &mut Rtnl,
    index: u32,
    policies: &[PlannedPolicy],
    name: &str,
) -> Result<Vec<RuleMessage>> {
    if policies.is_empty() {
        return Ok(Vec::new());
    }
    let tables = free_tables(rtnl, policies.len())?;
    let mut added = Vec::with_capacity(policies.len());
    for (policy, &table) in policies.iter().zip(&tables) {
        let result = policy
            .routes()
            .iter()
            .try_for_each(|&route| add_route(rtnl, index, route, table, name))
            .and_then(|()| {
                let rule = policy.rule(table);
                rtnl.request(
                    RouteNetlinkMessage::NewRule(rule.clone()),
                    NLM_F_CREATE | NLM_F_EXCL,
                )
                .map_err(netlink(format!("add rule to table {table} for {name}")))?;
                Ok(rule)
            });
        match result {
            Ok(rule) => added.push(rule),
            Err(e) => {
                remove_rules(rtnl, &added);
                return Err(e);
            }
        }
    }
    Ok(added)
}

/// Removes `rules`; one already gone is fine, and so is any other refusal (logged).
pub(super) fn remove_rules(rtnl: &mut Rtnl, rules: &[RuleMessage]) {
    for rule in rules {
        match rtnl.request(RouteNetlinkMessage::DelRule(rule.clone()), 0) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(e) => tracing::warn!(error = %e, ?rule, "cannot remove a policy rule"),
        }
    }
}
