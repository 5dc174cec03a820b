//! What Quiver made, found again by its alias: [`list_owned`], [`remove_orphans`] at startup,
//! [`delete_for_connection`] on Close.

use std::collections::HashSet;

use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use netlink_packet_route::RouteNetlinkMessage;

use super::config::{host_name_for, ALIAS_PREFIX};
use super::error::{netlink, Result};
use super::links::{delete_link, find_link, FoundLink};
use crate::netlink::Rtnl;

/// An interface Quiver tagged, as [`list_owned`] finds it in Quiver's namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedInterface {
    /// Its name.
    pub name: String,
    /// Its index.
    pub index: u32,
    /// The connection that owns it (from its alias).
    pub connection_id: String,
}

/// The interfaces Quiver tagged in the calling thread's namespace (Quiver's ends of veths).
pub fn list_owned() -> Result<Vec<OwnedInterface>> {
    let mut rtnl = Rtnl::open().map_err(netlink("open a netlink socket"))?;
    list_owned_with(&mut rtnl)
}

fn list_owned_with(rtnl: &mut Rtnl) -> Result<Vec<OwnedInterface>> {
    let links = rtnl
        .dump(RouteNetlinkMessage::GetLink(LinkMessage::default()))
        .map_err(netlink("list links"))?;
    let mut owned = Vec::new();
    for m in links {
        let RouteNetlinkMessage::NewLink(link) = m else {
            continue;
        };
        let mut name = None;
        let mut id = None;
        for a in &link.attributes {
            match a {
                LinkAttribute::IfName(n) => name = Some(n.clone()),
                LinkAttribute::IfAlias(s) => id = s.strip_prefix(ALIAS_PREFIX).map(str::to_string),
                _ => {}
            }
        }
        if let (Some(name), Some(connection_id)) = (name, id) {
            owned.push(OwnedInterface {
                name,
                index: link.header.index,
                connection_id,
            });
        }
    }
    Ok(owned)
}

/// Deletes every Quiver-tagged interface of the calling thread's namespace whose connection is
/// not in `keep` (run at startup with the connections that survived). Returns what it deleted.
pub fn remove_orphans(keep: &HashSet<String>) -> Result<Vec<OwnedInterface>> {
    let mut rtnl = Rtnl::open().map_err(netlink("open a netlink socket"))?;
    let mut removed = Vec::new();
    for o in list_owned_with(&mut rtnl)? {
        if keep.contains(&o.connection_id) {
            continue;
        }
        // Gone already is fine: deleting one end of a veth removes the other.
        if delete_link(&mut rtnl, o.index).map_err(netlink(format!("delete {}", o.name)))? {
            tracing::info!(
                interface = %o.name,
                connection = %o.connection_id,
                "removed an orphaned interface"
            );
            removed.push(o);
        }
    }
    Ok(removed)
}

/// Deletes the veth of `connection_id` (found by its name and checked by its tag). Returns
/// whether there was one; an interface of that name not tagged for this connection is left
/// alone (and `false` returned).
pub fn delete_for_connection(connection_id: &str) -> Result<bool> {
    let mut rtnl = Rtnl::open().map_err(netlink("open a netlink socket"))?;
    let name = host_name_for(connection_id);
    let Some(FoundLink { index, alias, .. }) = find_link(&mut rtnl, &name)? else {
        return Ok(false);
    };
    if alias.as_deref().and_then(|a| a.strip_prefix(ALIAS_PREFIX)) != Some(connection_id) {
        return Ok(false);
    }
    delete_link(&mut rtnl, index).map_err(netlink(format!("delete {name}")))
}
