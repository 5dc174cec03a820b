//! [`KernelInterface::adopt_tap`]: NSM's KERNEL mechanism over a TAP device. Quiver opens the
//! device as a port from inside the connection's namespace, under the requested name (its
//! queues are file descriptors Quiver holds, with virtio-net headers: see [`crate::tap`]);
//! this configures it there as a veth's far end would be. Nothing is ever in Quiver's
//! namespace, nothing is moved (a move between namespaces costs the kernel ~20 ms), and nothing
//! outlives Quiver: the device is not persistent, so it goes when its last descriptor closes
//! (Quiver stops, or is killed).

use netlink_packet_route::link::LinkAttribute;

use super::config::{KernelInterfaceConfig, Plan, ALIAS_PREFIX};
use super::error::{netlink, KernelInterfaceError, Result};
use super::links::{delete_link, find_link, set_link};
use super::veth::configure_inside;
use super::KernelInterface;
use crate::netlink::Rtnl;
use crate::netns::NetNs;

impl KernelInterface {
    /// Fails with [`KernelInterfaceError::AlreadyExists`] when `netns` has an interface `name`.
    pub fn ensure_name_free(netns: &NetNs, name: &str) -> Result<()> {
        let mut inner = Rtnl::open_in(netns)?.map_err(netlink(format!(
            "open a netlink socket in {:?}",
            netns.path()
        )))?;
        match find_link(&mut inner, name)? {
            Some(_) => Err(KernelInterfaceError::AlreadyExists(format!(
                "interface {name} in {:?}",
                netns.path()
            ))),
            None => Ok(()),
        }
    }

    /// Configures the TAP device `config.name` that Quiver's port created in `netns`: the
    /// config's MTU, alias, addresses, routes, neighbours and policy routes (IPv4 and IPv6).
    /// `host_mac` is Quiver's address on the link (its port's): what the namespace's
    /// neighbours toward Quiver resolve to. On any error the device is deleted (the port's
    /// queues then see it gone).
    pub fn adopt_tap(
        netns: &NetNs,
        config: &KernelInterfaceConfig,
        host_mac: [u8; 6],
    ) -> Result<KernelInterface> {
        let plan = Plan::new(config)?;
        let tag = format!("{ALIAS_PREFIX}{}", config.connection_id);
        let mut inner = Rtnl::open_in(netns)?.map_err(netlink(format!(
            "open a netlink socket in {:?}",
            netns.path()
        )))?;
        let configured = (|| {
            if config.mtu != 0 {
                let link = find_link(&mut inner, &config.name)?.ok_or_else(|| {
                    netlink(format!("find TAP {}", config.name))(nix::errno::Errno::ENODEV)
                })?;
                set_link(
                    &mut inner,
                    link.index,
                    &format!("set the MTU of {}", config.name),
                    vec![LinkAttribute::Mtu(config.mtu)],
                    false,
                )?;
            }
            configure_inside(&mut inner, netns, config, &plan, &tag)
        })();
        let (index, mac, rules) = match configured {
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
            name = %config.name,
            netns = ?netns.path(),
            "kernel interface (TAP) configured"
        );
        Ok(KernelInterface {
            connection_id: config.connection_id.clone(),
            host_name: config.name.clone(),
            host_index: index,
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
