//! [`KernelInterface::adopt_tap`]: NSM's KERNEL mechanism over a TAP device. Quiver opens the
//! device in its own namespace as a port (its queues are file descriptors Quiver holds, with
//! virtio-net headers: see [`crate::tap`]); this moves the device into the connection's
//! namespace under the requested name and configures it there as a veth's far end would be.
//! Nothing is left in Quiver's namespace, and nothing outlives Quiver: the device is not
//! persistent, so it goes when its last descriptor closes (Quiver stops, or is killed).

use std::os::fd::{AsFd, AsRawFd};

use netlink_packet_route::link::LinkAttribute;
use nix::errno::Errno;

use super::config::{KernelInterfaceConfig, Plan, ALIAS_PREFIX};
use super::error::{netlink, KernelInterfaceError, Result};
use super::links::{delete_link, find_link, set_link};
use super::veth::configure_inside;
use super::KernelInterface;
use crate::netlink::Rtnl;
use crate::netns::NetNs;

impl KernelInterface {
    /// Moves the TAP device `tap` (in the calling thread's namespace, opened by Quiver's port)
    /// into `netns`, named `config.name` there, with `config`'s MTU, alias, addresses, routes,
    /// neighbours and policy routes (IPv4 and IPv6). `host_mac` is Quiver's address on the link
    /// (its port's): what the namespace's neighbours toward Quiver resolve to. On any error the
    /// device is deleted (the port's queues then see it gone).
    pub fn adopt_tap(
        netns: &NetNs,
        config: &KernelInterfaceConfig,
        tap: &str,
        host_mac: [u8; 6],
    ) -> Result<KernelInterface> {
        let plan = Plan::new(config)?;
        let tag = format!("{ALIAS_PREFIX}{}", config.connection_id);
        let mut host = Rtnl::open().map_err(netlink("open a netlink socket"))?;
        let mut inner = Rtnl::open_in(netns)?.map_err(netlink(format!(
            "open a netlink socket in {:?}",
            netns.path()
        )))?;
        if find_link(&mut inner, &config.name)?.is_some() {
            return Err(KernelInterfaceError::AlreadyExists(format!(
                "interface {} in {:?}",
                config.name,
                netns.path()
            )));
        }
        let host_index = find_link(&mut host, tap)?
            .ok_or_else(|| netlink(format!("find TAP {tap}"))(Errno::ENODEV))?
            .index;
        // Moved and renamed in one request: it never has the requested name here.
        let mut attrs = vec![
            LinkAttribute::NetNsFd(netns.as_fd().as_raw_fd()),
            LinkAttribute::IfName(config.name.clone()),
        ];
        if config.mtu != 0 {
            attrs.push(LinkAttribute::Mtu(config.mtu));
        }
        let moved = set_link(
            &mut host,
            host_index,
            &format!("move TAP {tap} into {:?} as {}", netns.path(), config.name),
            attrs,
            false,
        );
        if let Err(e) = moved {
            let _ = delete_link(&mut host, host_index);
            return Err(e);
        }
        let (index, mac, rules) = match configure_inside(&mut inner, netns, config, &plan, &tag) {
            Ok(v) => v,
            Err(e) => {
                if let Ok(Some(link)) = find_link(&mut inner, &config.name) {
                    let _ = delete_link(&mut inner, link.index);
                }
                return Err(e);
            }
        };
        tracing::info!(
            connection = %config.connection_id,
            tap,
            name = %config.name,
            netns = ?netns.path(),
            "kernel interface (TAP) created"
        );
        Ok(KernelInterface {
            connection_id: config.connection_id.clone(),
            host_name: tap.into(),
            host_index,
            host_mac,
            name: config.name.clone(),
            index,
            mac,
            netns: netns.clone(),
            rules,
            tap: true,
        })
    }
}
