//! NSM's KERNEL mechanism: a veth pair whose one end is Quiver's (in Quiver's namespace, opened
//! as an AF_PACKET port) and whose other end is the client's interface, inside the client's
//! network namespace, with the addresses, routes and neighbours of the connection's IP context.
//! Everything is done over route netlink; no `ip` is spawned.
//!
//! - Quiver's end is named from the connection id ([`host_name_for`]: `qvk` and 12 hex digits
//!   of a hash, so the same id always gives the same name); the other end is created directly
//!   inside the target namespace under the requested name (it never exists under that name in
//!   Quiver's namespace, so it cannot clash with a host interface).
//! - Both ends carry the alias (`IFLA_IFALIAS`) `quiver:<connection-id>`: [`list_owned`] finds
//!   Quiver's interfaces by it, and [`remove_orphans`] deletes, at startup, those no live
//!   connection owns.
//! - The namespace end has transmit checksum offload turned off (which also turns off TSO):
//!   frames the client sends then reach Quiver complete, with checksums filled in and no larger
//!   than the MTU, which is what a userspace forwarder needs.
//! - A failure midway deletes what was created: a veth goes with either of its ends.
//!
//! [`KernelInterface`] is a record, not a guard: dropping it leaves the interface; call
//! [`KernelInterface::delete`] (or [`delete_for_connection`]) on Close.

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd};

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use nix::errno::Errno;

use crate::netlink::Rtnl;
use crate::netns::{NetNs, NetNsError};

/// Longest interface name Linux accepts (`IFNAMSIZ` - 1).
pub const MAX_NAME_LEN: usize = 15;

/// What Quiver's interfaces carry as their alias, before the connection id.
pub const ALIAS_PREFIX: &str = "quiver:";

/// Longest connection id that fits in an alias (`IFALIASZ` is 256 with its NUL).
pub const MAX_CONNECTION_ID_LEN: usize = 255 - ALIAS_PREFIX.len();

/// Why a kernel interface could not be created or removed. Each variant maps to one gRPC
/// status: `NamespaceNotFound` → NOT_FOUND (or INVALID_ARGUMENT), `Invalid*` →
/// INVALID_ARGUMENT, `AlreadyExists` → ALREADY_EXISTS, `Namespace` and `Netlink` → INTERNAL.
#[derive(Debug, thiserror::Error)]
pub enum KernelInterfaceError {
    /// The namespace does not exist or was not named properly.
    #[error("{0}")]
    NamespaceNotFound(#[source] NetNsError),
    /// The namespace exists but could not be entered (permissions, resources).
    #[error("{0}")]
    Namespace(#[source] NetNsError),
    /// The interface name is not one Linux accepts.
    #[error("invalid interface name {name:?}: {reason}")]
    InvalidName {
        /// The name.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The connection id cannot tag an interface.
    #[error("invalid connection id {id:?}: {reason}")]
    InvalidConnectionId {
        /// The id.
        id: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An address, prefix, next hop or MAC address that does not parse.
    #[error("invalid address {value:?}: {reason}")]
    InvalidAddress {
        /// The value.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An MTU a veth cannot have.
    #[error("invalid MTU {0}: a veth takes 68 to 65535")]
    InvalidMtu(u32),
    /// The interface (Quiver's end for this connection, or the name in the namespace) exists.
    #[error("{0} already exists")]
    AlreadyExists(String),
    /// The kernel refused a request.
    #[error("netlink: {op}: {source}")]
    Netlink {
        /// The request.
        op: String,
        /// The kernel's answer.
        #[source]
        source: Errno,
    },
}

impl From<NetNsError> for KernelInterfaceError {
    fn from(e: NetNsError) -> Self {
        if e.is_not_found() {
            KernelInterfaceError::NamespaceNotFound(e)
        } else {
            KernelInterfaceError::Namespace(e)
        }
    }
}

type Result<T, E = KernelInterfaceError> = std::result::Result<T, E>;

fn netlink(op: impl Into<String>) -> impl FnOnce(Errno) -> KernelInterfaceError {
    let op = op.into();
    move |source| KernelInterfaceError::Netlink { op, source }
}

/// A route in the namespace: to `prefix` ("a.b.c.d/len"), through `next_hop` ("a.b.c.d") or,
/// when `None` or empty, straight out of the interface.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RouteConfig {
    /// The destination, "a.b.c.d/len" (host bits are ignored, as NSM's Go side does).
    pub prefix: String,
    /// The gateway, if any.
    pub next_hop: Option<String>,
}

/// A static (permanent) neighbour in the namespace.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NeighborConfig {
    /// Its IPv4 address, "a.b.c.d".
    pub ip: String,
    /// Its MAC address, "aa:bb:cc:dd:ee:ff".
    pub mac: String,
}

/// What to create: NSM's KERNEL mechanism parameters and the connection's IP context, as the
/// strings NSM sends.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KernelInterfaceConfig {
    /// The owning connection (tags both ends; names Quiver's end).
    pub connection_id: String,
    /// The interface's name inside the namespace (1 to 15 bytes).
    pub name: String,
    /// MTU of both ends; 0 leaves the kernel's default (1500).
    pub mtu: u32,
    /// IPv4 addresses of the namespace end, "a.b.c.d/len".
    pub addresses: Vec<String>,
    /// Routes in the namespace, through this interface.
    pub routes: Vec<RouteConfig>,
    /// Static neighbours on this interface.
    pub neighbors: Vec<NeighborConfig>,
}

/// A veth pair made for a connection (see the module docs).
#[derive(Debug, Clone)]
pub struct KernelInterface {
    connection_id: String,
    host_name: String,
    host_index: u32,
    host_mac: [u8; 6],
    name: String,
    index: u32,
    mac: [u8; 6],
    netns: NetNs,
}

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

/// Checks `name` the way the kernel does (`dev_valid_name`): 1 to 15 bytes, not `.` or `..`,
/// no `/`, `:`, NUL or whitespace.
pub fn validate_name(name: &str) -> Result<()> {
    let bad = |reason| {
        Err(KernelInterfaceError::InvalidName {
            name: name.into(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_NAME_LEN {
        return bad("longer than 15 bytes");
    }
    if name == "." || name == ".." {
        return bad("`.` and `..` are not interface names");
    }
    if name
        .bytes()
        .any(|b| b == b'/' || b == b':' || b == 0 || b.is_ascii_whitespace())
    {
        return bad("contains '/', ':', NUL or whitespace");
    }
    Ok(())
}

fn validate_connection_id(id: &str) -> Result<()> {
    let bad = |reason| {
        Err(KernelInterfaceError::InvalidConnectionId {
            id: id.into(),
            reason,
        })
    };
    if id.is_empty() {
        return bad("empty");
    }
    if id.len() > MAX_CONNECTION_ID_LEN {
        return bad("too long for an interface alias");
    }
    if id.bytes().any(|b| b.is_ascii_control()) {
        return bad("contains control characters");
    }
    Ok(())
}

/// The name of Quiver's end of a connection's veth: `qvk` and the first 12 hex digits of the
/// id's 64-bit FNV-1a hash (15 bytes). The same id always gives the same name.
pub fn host_name_for(connection_id: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in connection_id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("qvk{:012x}", h >> 16)
}

fn invalid_address(value: &str, reason: &'static str) -> KernelInterfaceError {
    KernelInterfaceError::InvalidAddress {
        value: value.into(),
        reason,
    }
}

fn parse_ip(value: &str) -> Result<Ipv4Addr> {
    if value.contains(':') {
        return Err(invalid_address(value, "IPv6 is not supported yet"));
    }
    value
        .parse()
        .map_err(|_| invalid_address(value, "not an IPv4 address (a.b.c.d)"))
}

/// "a.b.c.d/len" → (address, len).
pub fn parse_cidr(value: &str) -> Result<(Ipv4Addr, u8)> {
    let Some((ip, len)) = value.split_once('/') else {
        return Err(invalid_address(value, "no prefix length (a.b.c.d/len)"));
    };
    let ip = parse_ip(ip).map_err(|_| {
        if ip.contains(':') {
            invalid_address(value, "IPv6 is not supported yet")
        } else {
            invalid_address(value, "not an IPv4 address (a.b.c.d/len)")
        }
    })?;
    if len.is_empty() || len.len() > 2 || !len.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid_address(value, "the prefix length is not a number"));
    }
    let len: u8 = len
        .parse()
        .map_err(|_| invalid_address(value, "the prefix length is not a number"))?;
    if len > 32 {
        return Err(invalid_address(value, "the prefix length is above 32"));
    }
    Ok((ip, len))
}

/// "aa:bb:cc:dd:ee:ff" → bytes.
pub fn parse_mac(value: &str) -> Result<[u8; 6]> {
    let bad = || invalid_address(value, "not a MAC address (aa:bb:cc:dd:ee:ff)");
    let mut mac = [0u8; 6];
    let mut parts = value.split(':');
    for byte in &mut mac {
        let p = parts.next().ok_or_else(bad)?;
        if p.len() != 2 {
            return Err(bad());
        }
        *byte = u8::from_str_radix(p, 16).map_err(|_| bad())?;
    }
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok(mac)
}

fn masked(ip: Ipv4Addr, len: u8) -> Ipv4Addr {
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    Ipv4Addr::from(u32::from(ip) & mask)
}

/// A config with every string parsed: what `create` applies.
struct Plan {
    addresses: Vec<(Ipv4Addr, u8)>,
    routes: Vec<(Ipv4Addr, u8, Option<Ipv4Addr>)>,
    neighbors: Vec<(Ipv4Addr, [u8; 6])>,
}

impl Plan {
    fn new(config: &KernelInterfaceConfig) -> Result<Plan> {
        validate_connection_id(&config.connection_id)?;
        validate_name(&config.name)?;
        if config.mtu != 0 && !(68..=65535).contains(&config.mtu) {
            return Err(KernelInterfaceError::InvalidMtu(config.mtu));
        }
        let addresses = config
            .addresses
            .iter()
            .map(|a| parse_cidr(a))
            .collect::<Result<_>>()?;
        let routes = config
            .routes
            .iter()
            .map(|r| {
                let (ip, len) = parse_cidr(&r.prefix)?;
                let via = match r.next_hop.as_deref() {
                    None | Some("") => None,
                    Some(v) => Some(parse_ip(v)?),
                };
                Ok((masked(ip, len), len, via))
            })
            .collect::<Result<_>>()?;
        let neighbors = config
            .neighbors
            .iter()
            .map(|n| Ok((parse_ip(&n.ip)?, parse_mac(&n.mac)?)))
            .collect::<Result<_>>()?;
        Ok(Plan {
            addresses,
            routes,
            neighbors,
        })
    }
}

/// A link as `find_link` finds it.
struct FoundLink {
    index: u32,
    mac: [u8; 6],
    alias: Option<String>,
}

/// The link called `name`, if there is one.
fn find_link(rtnl: &mut Rtnl, name: &str) -> Result<Option<FoundLink>> {
    let mut msg = LinkMessage::default();
    msg.attributes.push(LinkAttribute::IfName(name.into()));
    // A by-name GET answers with one message; a dump-shaped reader collects it.
    match rtnl.get(RouteNetlinkMessage::GetLink(msg)) {
        Ok(Some(RouteNetlinkMessage::NewLink(link))) => {
            let mut mac = [0u8; 6];
            let mut alias = None;
            for a in &link.attributes {
                match a {
                    LinkAttribute::Address(m) if m.len() == 6 => mac.copy_from_slice(m),
                    LinkAttribute::IfAlias(s) => alias = Some(s.clone()),
                    _ => {}
                }
            }
            Ok(Some(FoundLink {
                index: link.header.index,
                mac,
                alias,
            }))
        }
        Ok(_) | Err(Errno::ENODEV) => Ok(None),
        Err(e) => Err(netlink(format!("get link {name}"))(e)),
    }
}

fn set_link(
    rtnl: &mut Rtnl,
    index: u32,
    what: &str,
    attrs: Vec<LinkAttribute>,
    up: bool,
) -> Result<()> {
    let mut msg = LinkMessage::default();
    msg.header.index = index;
    if up {
        msg.header.flags = LinkFlags::Up;
        msg.header.change_mask = LinkFlags::Up;
    }
    msg.attributes = attrs;
    rtnl.request(RouteNetlinkMessage::SetLink(msg), 0)
        .map_err(netlink(what))
}

fn delete_link(rtnl: &mut Rtnl, index: u32) -> std::result::Result<bool, Errno> {
    let mut msg = LinkMessage::default();
    msg.header.index = index;
    match rtnl.request(RouteNetlinkMessage::DelLink(msg), 0) {
        Ok(()) => Ok(true),
        Err(Errno::ENODEV) => Ok(false),
        Err(e) => Err(e),
    }
}

impl KernelInterface {
    /// Creates the veth pair for `config` with its far end in `netns` (see the module docs):
    /// Quiver's end ([`KernelInterface::host_name`]) in the calling thread's namespace, up,
    /// with IPv6 off; the other end named `config.name` in `netns`, up, with the addresses,
    /// routes (replacing any to the same prefix) and permanent neighbours. On any error nothing
    /// is left behind.
    pub fn create(netns: &NetNs, config: &KernelInterfaceConfig) -> Result<KernelInterface> {
        let plan = Plan::new(config)?;
        let host_name = host_name_for(&config.connection_id);
        let alias = format!("{ALIAS_PREFIX}{}", config.connection_id);
        let mut host = Rtnl::open().map_err(netlink("open a netlink socket"))?;
        let mut inner = Rtnl::open_in(netns)?.map_err(netlink(format!(
            "open a netlink socket in {:?}",
            netns.path()
        )))?;
        if find_link(&mut host, &host_name)?.is_some() {
            return Err(KernelInterfaceError::AlreadyExists(format!(
                "interface {host_name} (connection {})",
                config.connection_id
            )));
        }
        if find_link(&mut inner, &config.name)?.is_some() {
            return Err(KernelInterfaceError::AlreadyExists(format!(
                "interface {} in {:?}",
                config.name,
                netns.path()
            )));
        }

        let mut peer = LinkMessage::default();
        peer.attributes
            .push(LinkAttribute::IfName(config.name.clone()));
        peer.attributes
            .push(LinkAttribute::NetNsFd(netns.as_fd().as_raw_fd()));
        let mut msg = LinkMessage::default();
        msg.attributes
            .push(LinkAttribute::IfName(host_name.clone()));
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
                    netns.path()
                )),
                e => netlink(format!("create veth {host_name} / {}", config.name))(e),
            })?;

        // From here on, a failure deletes the pair (either end takes the other with it).
        let made = (|| {
            let FoundLink {
                index: host_index,
                mac: host_mac,
                ..
            } = find_link(&mut host, &host_name)?.ok_or_else(|| {
                netlink(format!("find {host_name} after creating it"))(Errno::ENODEV)
            })?;
            // Tag first, so that a crash from here on leaves an orphan `remove_orphans` finds.
            set_link(
                &mut host,
                host_index,
                &format!("tag {host_name}"),
                vec![LinkAttribute::IfAlias(alias.clone())],
                false,
            )?;
            Ok((host_index, host_mac))
        })();
        let (host_index, host_mac) = match made {
            Ok(v) => v,
            Err(e) => {
                if let Ok(Some(link)) = find_link(&mut host, &host_name) {
                    let _ = delete_link(&mut host, link.index);
                }
                return Err(e);
            }
        };
        let configured = (|| {
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
            let FoundLink { index, mac, .. } =
                find_link(&mut inner, &config.name)?.ok_or_else(|| {
                    netlink(format!("find {} in {:?}", config.name, netns.path()))(Errno::ENODEV)
                })?;
            set_link(
                &mut inner,
                index,
                &format!("tag and set up {}", config.name),
                vec![LinkAttribute::IfAlias(alias.clone())],
                true,
            )?;
            let name = config.name.clone();
            netns
                .run(move || tx_checksum_off(&name))?
                .map_err(netlink(format!(
                    "turn off tx checksum offload on {}",
                    config.name
                )))?;
            apply_ip_context(&mut inner, index, &plan, &config.name)?;
            set_link(
                &mut host,
                host_index,
                &format!("set up {host_name}"),
                Vec::new(),
                true,
            )?;
            Ok((index, mac))
        })();
        match configured {
            Ok((index, mac)) => {
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
                })
            }
            Err(e) => {
                let _ = delete_link(&mut host, host_index);
                Err(e)
            }
        }
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

    /// Adds (or replaces) permanent neighbours (IPv4 address, MAC) on the interface, inside
    /// its namespace: for an L3 cross-connect, the addresses the namespace sends to through
    /// the interface resolve to Quiver's end ([`KernelInterface::host_mac`]), as nothing
    /// answers ARP for them. Stops at the first refusal.
    pub fn add_neighbors(&self, neighbors: &[(Ipv4Addr, [u8; 6])]) -> Result<()> {
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
    pub fn remove_neighbors(&self, ips: &[Ipv4Addr]) -> Result<()> {
        if ips.is_empty() {
            return Ok(());
        }
        let mut rtnl = self.rtnl()?;
        for &ip in ips {
            let mut msg = NeighbourMessage::default();
            msg.header.family = AddressFamily::Inet;
            msg.header.ifindex = self.index;
            msg.attributes
                .push(NeighbourAttribute::Destination(NeighbourAddress::Inet(ip)));
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

    /// Deletes the pair (both ends). Already gone (the namespace died with its end) is fine.
    pub fn delete(self) -> Result<()> {
        delete_for_connection(&self.connection_id).map(|_| ())
    }
}

/// Adds the addresses, then the routes (which may need them for their next hops), then the
/// neighbours, on interface `index` through `rtnl` (a socket in the interface's namespace).
fn apply_ip_context(rtnl: &mut Rtnl, index: u32, plan: &Plan, name: &str) -> Result<()> {
    for &(ip, len) in &plan.addresses {
        let mut msg = AddressMessage::default();
        msg.header.family = AddressFamily::Inet;
        msg.header.prefix_len = len;
        msg.header.index = index;
        msg.attributes.push(AddressAttribute::Local(ip.into()));
        msg.attributes.push(AddressAttribute::Address(ip.into()));
        if len < 31 {
            let host_bits = if len == 0 { u32::MAX } else { u32::MAX >> len };
            let broadcast = Ipv4Addr::from(u32::from(ip) | host_bits);
            msg.attributes.push(AddressAttribute::Broadcast(broadcast));
        }
        rtnl.request(
            RouteNetlinkMessage::NewAddress(msg),
            NLM_F_CREATE | NLM_F_REPLACE,
        )
        .map_err(netlink(format!("add address {ip}/{len} to {name}")))?;
    }
    for &(dst, len, via) in &plan.routes {
        let mut msg = RouteMessage::default();
        msg.header.address_family = AddressFamily::Inet;
        msg.header.destination_prefix_length = len;
        msg.header.table = libc::RT_TABLE_MAIN;
        msg.header.protocol = RouteProtocol::Static;
        msg.header.kind = RouteType::Unicast;
        msg.header.scope = if via.is_some() {
            RouteScope::Universe
        } else {
            RouteScope::Link
        };
        if len > 0 {
            msg.attributes
                .push(RouteAttribute::Destination(RouteAddress::Inet(dst)));
        }
        if let Some(gw) = via {
            msg.attributes
                .push(RouteAttribute::Gateway(RouteAddress::Inet(gw)));
        }
        msg.attributes.push(RouteAttribute::Oif(index));
        let what = match via {
            Some(gw) => format!("add route {dst}/{len} via {gw} dev {name}"),
            None => format!("add route {dst}/{len} dev {name}"),
        };
        rtnl.request(
            RouteNetlinkMessage::NewRoute(msg),
            NLM_F_CREATE | NLM_F_REPLACE,
        )
        .map_err(netlink(what))?;
    }
    for &(ip, mac) in &plan.neighbors {
        add_neighbor(rtnl, index, ip, mac, name)?;
    }
    Ok(())
}

/// Adds (or replaces) the permanent neighbour `ip` at `mac` on interface `index` (`name`).
fn add_neighbor(rtnl: &mut Rtnl, index: u32, ip: Ipv4Addr, mac: [u8; 6], name: &str) -> Result<()> {
    let mut msg = NeighbourMessage::default();
    msg.header.family = AddressFamily::Inet;
    msg.header.ifindex = index;
    msg.header.state = NeighbourState::Permanent;
    msg.header.kind = RouteType::Unicast;
    msg.attributes
        .push(NeighbourAttribute::Destination(NeighbourAddress::Inet(ip)));
    msg.attributes
        .push(NeighbourAttribute::LinkLayerAddress(mac.to_vec()));
    rtnl.request(
        RouteNetlinkMessage::NewNeighbour(msg),
        NLM_F_CREATE | NLM_F_REPLACE,
    )
    .map_err(netlink(format!("add neighbour {ip} on {name}")))
}

/// `struct ethtool_value` (linux/ethtool.h).
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// `ETHTOOL_STXCSUM`: set transmit checksum offload.
const ETHTOOL_STXCSUM: u32 = 0x17;

/// Turns off transmit checksum offload on `name` (in the calling thread's namespace); the
/// kernel then drops TSO too, so frames leave whole and checksummed.
fn tx_checksum_off(name: &str) -> std::result::Result<(), Errno> {
    use nix::sys::socket::{socket, AddressFamily as Af, SockFlag, SockType};
    let sock = socket(Af::Inet, SockType::Datagram, SockFlag::SOCK_CLOEXEC, None)?;
    let mut value = EthtoolValue {
        cmd: ETHTOOL_STXCSUM,
        data: 0,
    };
    let mut req = crate::af_packet::netdev::ifreq(name).ok_or(Errno::EINVAL)?;
    req.ifr_ifru.ifru_data = (&mut value as *mut EthtoolValue).cast();
    // SAFETY: SIOCETHTOOL reads the ifreq (a valid name) and the ethtool_value it points to,
    // both alive and exclusively ours for the call.
    let r = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL as _, &mut req) };
    if r < 0 {
        return Err(Errno::last());
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_like_the_kernel_does() {
        validate_name("eth1").unwrap();
        validate_name("nsm-123456789ab").unwrap();
        for bad in [
            "",
            "0123456789abcdef",
            ".",
            "..",
            "a/b",
            "a:b",
            "a b",
            "a\0",
        ] {
            assert!(
                matches!(
                    validate_name(bad),
                    Err(KernelInterfaceError::InvalidName { .. })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn host_names_are_short_stable_and_distinct() {
        let a = host_name_for("0b4b6a4a-5b8f-4d5e-9b3c-1f2e3d4c5b6a");
        assert_eq!(a.len(), MAX_NAME_LEN);
        validate_name(&a).unwrap();
        assert_eq!(a, host_name_for("0b4b6a4a-5b8f-4d5e-9b3c-1f2e3d4c5b6a"));
        assert_ne!(a, host_name_for("0b4b6a4a-5b8f-4d5e-9b3c-1f2e3d4c5b6b"));
    }

    #[test]
    fn addresses_parse_or_say_why_not() {
        assert_eq!(
            parse_cidr("172.16.1.2/31").unwrap(),
            (Ipv4Addr::new(172, 16, 1, 2), 31)
        );
        for bad in [
            "172.16.1.2",
            "172.16.1.2/33",
            "172.16.1.2/",
            "172.16.1/24",
            "300.1.1.1/8",
            "10.0.0.1/+8",
            "fe80::1/64",
            "10.0.0.1/24/1",
        ] {
            assert!(
                matches!(
                    parse_cidr(bad),
                    Err(KernelInterfaceError::InvalidAddress { .. })
                ),
                "{bad}"
            );
        }
        assert_eq!(
            parse_mac("02:fe:0A:00:00:01").unwrap(),
            [2, 0xfe, 10, 0, 0, 1]
        );
        for bad in [
            "02:fe:0a:00:00",
            "02:fe:0a:00:00:01:02",
            "02-fe-0a-00-00-01",
            "2:fe:a:0:0:1",
        ] {
            assert!(parse_mac(bad).is_err(), "{bad}");
        }
        assert_eq!(
            masked(Ipv4Addr::new(10, 1, 2, 3), 16),
            Ipv4Addr::new(10, 1, 0, 0)
        );
        assert_eq!(masked(Ipv4Addr::new(10, 1, 2, 3), 0), Ipv4Addr::UNSPECIFIED);
    }

    #[test]
    fn a_config_is_checked_whole_before_anything_is_made() {
        let good = KernelInterfaceConfig {
            connection_id: "c1".into(),
            name: "nsm0".into(),
            mtu: 1450,
            addresses: vec!["10.0.0.1/24".into()],
            routes: vec![RouteConfig {
                prefix: "10.1.0.0/16".into(),
                next_hop: Some("10.0.0.2".into()),
            }],
            neighbors: vec![NeighborConfig {
                ip: "10.0.0.2".into(),
                mac: "02:00:00:00:00:02".into(),
            }],
        };
        Plan::new(&good).unwrap();
        let mut c = good.clone();
        c.mtu = 67;
        assert!(matches!(
            Plan::new(&c),
            Err(KernelInterfaceError::InvalidMtu(67))
        ));
        let mut c = good.clone();
        c.connection_id.clear();
        assert!(matches!(
            Plan::new(&c),
            Err(KernelInterfaceError::InvalidConnectionId { .. })
        ));
        let mut c = good.clone();
        c.routes[0].next_hop = Some("10.0.0".into());
        assert!(matches!(
            Plan::new(&c),
            Err(KernelInterfaceError::InvalidAddress { .. })
        ));
        let mut c = good;
        c.neighbors[0].mac = "nope".into();
        assert!(matches!(
            Plan::new(&c),
            Err(KernelInterfaceError::InvalidAddress { .. })
        ));
    }
}
