//! [`KernelInterface`]: the veth pair made for a connection, created whole or not at all (or a
//! TAP device moved into the namespace: `tap.rs`).

use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd};

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVeth, LinkAttribute, LinkInfo, LinkMessage,
};
use netlink_packet_route::neighbour::{NeighbourAddress, NeighbourAttribute, NeighbourMessage};
use netlink_packet_route::rule::RuleMessage;
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use nix::errno::Errno;

use super::config::{host_name_for, KernelInterfaceConfig, Plan, ALIAS_PREFIX};
use super::error::{netlink, KernelInterfaceError, Result};
use super::links::{add_neighbor, apply_ip_context, delete_link, find_link, set_link, FoundLink};
use super::owned::delete_for_connection;
use super::rules::{apply_policies, remove_orphan_rules, remove_rules};
use crate::netlink::Rtnl;
use crate::netns::NetNs;

/// A veth pair made for a connection (see the module docs).
#[derive(Debug, Clone)]
pub struct KernelInterface {
    pub(super) connection_id: String,
    pub(super) host_name: String,
    pub(super) host_index: u32,
    pub(super) host_mac: [u8; 6],
    pub(super) name: String,
    pub(super) index: u32,
    pub(super) mac: [u8; 6],
    pub(super) netns: NetNs,
    /// The policy rules made in the namespace (their tables' routes go with the interface).
    pub(super) rules: Vec<RuleMessage>,
    /// The interface is a TAP device Quiver's port holds (no veth end in Quiver's namespace).
    pub(super) tap: bool,
}

impl KernelInterface {
    /// Creates the veth pair for `config` with its far end in `netns` (see the module docs):
    /// Quiver's end ([`KernelInterface::host_name`]) in the calling thread's namespace, up,
    /// with IPv6 off; the other end named `config.name` in `netns`, up, with the addresses,
    /// routes (replacing any to the same prefix), permanent neighbours and policy routes (IPv4
    /// and IPv6). On any error nothing is left behind.
    pub fn create(netns: &NetNs, config: &KernelInterfaceConfig) -> Result<KernelInterface> {
        let plan = Plan::new(config)?;
        let host_name = host_name_for(&config.connection_id);
        let alias = format!("{ALIAS_PREFIX}{}", config.connection_id);
        let mut host = Rtnl::open().map_err(netlink("open a netlink socket"))?;
        let mut inner = Rtnl::open_in(netns)?.map_err(netlink(format!(
            "open a netlink socket in {:?}",
            netns.path()
        )))?;
        let pair = Pair {
            netns,
            config,
            host_name: &host_name,
            alias: &alias,
        };
        pair.ensure_absent(&mut host, &mut inner)?;
        pair.create_veth(&mut host)?;
        // From here on, a failure deletes the pair (either end takes the other with it).
        let (host_index, host_mac) = match pair.tag_host_end(&mut host) {
            Ok(v) => v,
            Err(e) => {
                if let Ok(Some(link)) = find_link(&mut host, &host_name) {
                    let _ = delete_link(&mut host, link.index);
                }
                return Err(e);
            }
        };
        let (index, mac, rules) = match pair.configure(&mut host, &mut inner, host_index, &plan) {
            Ok(v) => v,
            Err(e) => {
                let _ = delete_link(&mut host, host_index);
                return Err(e);
            }
        };
        tracing::info!(
            connection = %config.connection_id,
            host = %host_name,
            name = %config.name,
            netns = ?netns.path(),
            "kernel interface created"
        );
        Ok(KernelInterface {
            connection_id: config.connection_id.clone(),
            host_name,
            host_index,
            host_mac,
            name: config.name.clone(),
            index,
            mac,
            netns: netns.clone(),
            rules,
            tap: false,
        })
    }

    /// The owning connection.
    pub fn connection_id(&self) -> &str {
        &self.connection_id
    }

    /// Quiver's end, in Quiver's namespace: open it with
    /// [`AfPacketPort::open`](crate::af_packet::AfPacketPort::open).
    pub fn host_name(&self) -> &str {
        &self.host_name
    }

    /// Quiver's end's interface index.
    pub fn host_index(&self) -> u32 {
        self.host_index
    }

    /// Quiver's end's MAC address.
    pub fn host_mac(&self) -> [u8; 6] {
        self.host_mac
    }

    /// The interface's name in the namespace.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The interface's index in the namespace.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The interface's MAC address (the client's side).
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// The namespace the interface is in.
    pub fn netns(&self) -> &NetNs {
        &self.netns
    }

    /// Adds (or replaces) permanent neighbours (IPv4 or IPv6 address, MAC) on the interface,
    /// inside its namespace: for an L3 cross-connect, the addresses the namespace sends to
    /// through the interface resolve to Quiver's end ([`KernelInterface::host_mac`]), as
    /// nothing answers ARP or neighbour discovery for them. Stops at the first refusal.
    pub fn add_neighbors(&self, neighbors: &[(IpAddr, [u8; 6])]) -> Result<()> {
        if neighbors.is_empty() {
            return Ok(());
        }
        let mut rtnl = self.rtnl()?;
        for &(ip, mac) in neighbors {
            add_neighbor(&mut rtnl, self.index, ip, mac, &self.name)?;
        }
        Ok(())
    }

    /// Removes the neighbours `ips` from the interface, inside its namespace. One that is not
    /// there (or an interface gone already) is fine.
    pub fn remove_neighbors(&self, ips: &[IpAddr]) -> Result<()> {
        if ips.is_empty() {
            return Ok(());
        }
        let mut rtnl = self.rtnl()?;
        for &ip in ips {
            let mut msg = NeighbourMessage::default();
            let dst = match ip {
                IpAddr::V4(v4) => {
                    msg.header.family = AddressFamily::Inet;
                    NeighbourAddress::Inet(v4)
                }
                IpAddr::V6(v6) => {
                    msg.header.family = AddressFamily::Inet6;
                    NeighbourAddress::Inet6(v6)
                }
            };
            msg.header.ifindex = self.index;
            msg.attributes.push(NeighbourAttribute::Destination(dst));
            match rtnl.request(RouteNetlinkMessage::DelNeighbour(msg), 0) {
                Ok(()) | Err(Errno::ENOENT | Errno::ENODEV) => {}
                Err(e) => {
                    let op = format!("delete neighbour {ip} on {}", self.name);
                    return Err(netlink(op)(e));
                }
            }
        }
        Ok(())
    }

    /// A route-netlink socket in the interface's namespace.
    fn rtnl(&self) -> Result<Rtnl> {
        Rtnl::open_in(&self.netns)?.map_err(netlink(format!(
            "open a netlink socket in {:?}",
            self.netns.path()
        )))
    }

    /// Whether the interface is a TAP device (see [`KernelInterface::adopt_tap`]).
    pub fn is_tap(&self) -> bool {
        self.tap
    }

    /// Deletes the pair (both ends) and its policy rules; a TAP device is deleted inside its
    /// namespace. Already gone (the namespace died with its end) is fine.
    pub fn delete(self) -> Result<()> {
        let rtnl = self.rtnl();
        if let Ok(mut rtnl) = rtnl {
            // A namespace that is gone took its rules and interfaces with it.
            remove_rules(&mut rtnl, &self.rules);
            if self.tap {
                delete_link(&mut rtnl, self.index)
                    .map_err(netlink(format!("delete TAP {}", self.name)))?;
            }
        }
        if self.tap {
            return Ok(());
        }
        delete_for_connection(&self.connection_id).map(|_| ())
    }
}

/// A veth pair being created: the steps of [`KernelInterface::create`].
struct Pair<'a> {
    netns: &'a NetNs,
    config: &'a KernelInterfaceConfig,
    /// Quiver's end's name.
    host_name: &'a str,
    /// The alias Quiver's end carries (its ownership tag).
    alias: &'a str,
}

impl Pair<'_> {
    /// Fails when Quiver's end exists already, or the name is taken in the namespace.
    fn ensure_absent(&self, host: &mut Rtnl, inner: &mut Rtnl) -> Result<()> {
        let (config, host_name) = (self.config, self.host_name);
        if find_link(host, host_name)?.is_some() {
            return Err(KernelInterfaceError::AlreadyExists(format!(
                "interface {host_name} (connection {})",
                config.connection_id
            )));
        }
        if find_link(inner, &config.name)?.is_some() {
            return Err(KernelInterfaceError::AlreadyExists(format!(
                "interface {} in {:?}",
                config.name,
                self.netns.path()
            )));
        }
        Ok(())
    }

    /// Creates the pair: Quiver's end here, the other end directly inside the namespace under
    /// its requested name.
    fn create_veth(&self, host: &mut Rtnl) -> Result<()> {
        let (config, host_name) = (self.config, self.host_name);
        let mut peer = LinkMessage::default();
        peer.attributes
            .push(LinkAttribute::IfName(config.name.clone()));
        peer.attributes
            .push(LinkAttribute::NetNsFd(self.netns.as_fd().as_raw_fd()));
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(host_name.into()));
        if config.mtu != 0 {
            peer.attributes.push(LinkAttribute::Mtu(config.mtu));
            msg.attributes.push(LinkAttribute::Mtu(config.mtu));
        }
        msg.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Veth),
            LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer))),
        ]));
        host.request(RouteNetlinkMessage::NewLink(msg), NLM_F_CREATE | NLM_F_EXCL)
            .map_err(|e| match e {
                Errno::EEXIST => KernelInterfaceError::AlreadyExists(format!(
                    "interface {host_name} or {} in {:?}",
                    config.name,
                    self.netns.path()
                )),
                e => netlink(format!("create veth {host_name} / {}", config.name))(e),
            })
    }

    /// Finds Quiver's end and tags it (first, so that a crash from here on leaves an orphan
    /// `remove_orphans` finds); returns its index and MAC.
    fn tag_host_end(&self, host: &mut Rtnl) -> Result<(u32, [u8; 6])> {
        let host_name = self.host_name;
        let FoundLink { index, mac, .. } = find_link(host, host_name)?
            .ok_or_else(|| netlink(format!("find {host_name} after creating it"))(Errno::ENODEV))?;
        set_link(
            host,
            index,
            &format!("tag {host_name}"),
            vec![LinkAttribute::IfAlias(self.alias.into())],
            false,
        )?;
        Ok((index, mac))
    }

    /// Configures both ends: Quiver's without IPv6 or IPv4 forwarding, then up; the
    /// namespace's tagged, up (offloads left on), with `plan`'s IP context.
    /// Returns the namespace end's index and MAC, and the policy rules made.
    fn configure(
        &self,
        host: &mut Rtnl,
        inner: &mut Rtnl,
        host_index: u32,
        plan: &Plan,
    ) -> Result<(u32, [u8; 6], Vec<RuleMessage>)> {
        let (config, host_name, netns) = (self.config, self.host_name, self.netns);
        // No IPv6 on Quiver's end: the kernel would otherwise send its own router
        // solicitations and MLD reports out of it, into the cross-connect.
        let _ = std::fs::write(
            format!("/proc/sys/net/ipv6/conf/{host_name}/disable_ipv6"),
            "1",
        );
        // Nor IPv4 forwarding: frames sent to Quiver's MAC (an L3 cross-connect's) reach
        // the kernel's stack too, which must not route them on as well.
        let _ = std::fs::write(
            format!("/proc/sys/net/ipv4/conf/{host_name}/forwarding"),
            "0",
        );
        let (index, mac, rules) = configure_inside(inner, netns, config, plan, self.alias)?;
        if let Err(e) = set_link(
            host,
            host_index,
            &format!("set up {host_name}"),
            Vec::new(),
            true,
        ) {
            remove_rules(inner, &rules);
            return Err(e);
        }
        Ok((index, mac, rules))
    }
}

/// Configures the interface `config.name` inside `netns`: tagged with the config's alias (else
/// `tag`), up (offloads left on), IPv6 on when the plan has IPv6, with `plan`'s IP context and
/// policy routes. Returns its index and MAC, and the policy rules made.
pub(super) fn configure_inside(
    inner: &mut Rtnl,
    netns: &NetNs,
    config: &KernelInterfaceConfig,
    plan: &Plan,
    tag: &str,
) -> Result<(u32, [u8; 6], Vec<RuleMessage>)> {
    let FoundLink { index, mac, .. } = find_link(inner, &config.name)?.ok_or_else(|| {
        netlink(format!("find {} in {:?}", config.name, netns.path()))(Errno::ENODEV)
    })?;
    let alias = match config.alias.as_str() {
        "" => tag,
        own => own,
    };
    set_link(
        inner,
        index,
        &format!("tag and set up {}", config.name),
        vec![LinkAttribute::IfAlias(alias.into())],
        true,
    )?;
    if plan.has_ipv6() {
        // The namespace may default to IPv6 off on new interfaces; this one needs it.
        let name = config.name.clone();
        netns
            .run(move || {
                std::fs::write(format!("/proc/sys/net/ipv6/conf/{name}/disable_ipv6"), "0")
            })?
            .map_err(|e| {
                let op = format!("turn on IPv6 on {}", config.name);
                netlink(op)(Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))
            })?;
    }
    apply_ip_context(inner, index, plan, &config.name)?;
    // Rules a killed Quiver left here go first (their tables are free again).
    if let Err(e) = remove_orphan_rules(inner) {
        tracing::warn!(error = %e, netns = ?netns.path(), "cannot look for orphaned policy rules");
    }
    let rules = apply_policies(inner, index, &plan.policies, &config.name)?;
    Ok((index, mac, rules))
}
