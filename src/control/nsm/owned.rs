//! The ports NSM's connections own, and what their kernel interfaces are made of: the tags
//! and aliases on a connection's veth, NSM's routes and policies as the kernel interface takes
//! them, its errors as NSM reports them, and ping sockets in a client's namespace.

use std::net::IpAddr;

use drivers::kernel_interface::{KernelInterface, KernelInterfaceError, PolicyConfig, RouteConfig};
use drivers::netns::NetNs;
use nsm_forwarder::dataplane::{PolicySpec, RouteSpec};
use nsm_forwarder::{BackendError, PortName};

/// One port made for a connection.
pub(super) struct OwnedPort {
    /// The connection that made it.
    pub(super) owner: String,
    /// The veth behind an AF_PACKET port.
    pub(super) kernel: Option<KernelInterface>,
    /// The neighbours inside the veth's namespace (unused for memif).
    pub(super) inside: InsideNeighbors,
    /// The link as last seen by the watcher: `Some(true)` once up.
    pub(super) seen_up: Option<bool>,
}

/// What an L3 cross-connect needs of a veth's IP context, and what it added in the namespace.
#[derive(Default)]
pub(super) struct InsideNeighbors {
    /// What the namespace reaches through the veth directly: the next hops of its routes and
    /// the other side's addresses (its first IPv4 one, the next hop, comes with the
    /// cross-connect too), each routed through the interface.
    pub(super) route_hops: Vec<IpAddr>,
    /// The neighbours the IP context asked for (put back when the cross-connect goes).
    pub(super) configured: Vec<(IpAddr, [u8; 6])>,
    /// The neighbours the L3 cross-connect added toward Quiver's end.
    pub(super) added: Vec<IpAddr>,
    /// The other port of the port's L3 cross-connect.
    pub(super) with: Option<String>,
}

/// An error of the kernel interface as NSM reports it.
pub(super) fn kernel_error(e: KernelInterfaceError) -> BackendError {
    let m = e.to_string();
    match e {
        KernelInterfaceError::NamespaceNotFound(_) => BackendError::NotFound(m),
        KernelInterfaceError::InvalidName { .. }
        | KernelInterfaceError::InvalidConnectionId { .. }
        | KernelInterfaceError::InvalidAddress { .. }
        | KernelInterfaceError::InvalidPolicy { .. }
        | KernelInterfaceError::InvalidMtu(_) => BackendError::InvalidArgument(m),
        KernelInterfaceError::AlreadyExists(_) => BackendError::AlreadyExists(m),
        KernelInterfaceError::Namespace(_) | KernelInterfaceError::Netlink { .. } => {
            BackendError::Failed(m)
        }
    }
}

/// Lets every group open unprivileged ICMP sockets in `netns` (`net.ipv4.ping_group_range`,
/// which allows no group in a new namespace), as cmd-forwarder-vpp does for KERNEL interfaces:
/// NSM's clients check the data path with such a ping and heal the connection when it fails.
/// Where `/proc/sys` is read-only (an unprivileged container) it says so and goes on.
pub(super) fn allow_ping_sockets(netns: &NetNs) {
    const RANGE: &str = "/proc/sys/net/ipv4/ping_group_range";
    let written = netns.run(|| std::fs::write(RANGE, "0 2147483647"));
    match written {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(
            netns = %netns.path().display(),
            error = %e,
            "cannot allow ping sockets ({RANGE}): NSM's liveness pings will fail there"
        ),
        Err(e) => tracing::warn!(error = %e, "cannot enter a namespace to allow ping sockets"),
    }
}

/// The tag of a connection's veth: one per side, so that a connection may have two.
pub(super) fn kernel_tag(owner: &str, port: &PortName) -> String {
    let side = if port.0.ends_with("-endpoint") {
        "endpoint"
    } else {
        "client"
    };
    format!("{owner}/{side}")
}

/// The alias NSM's tools expect on a connection's kernel interface (sdk-vpp's): `client-<id>`
/// on the client's, `server-<id>` on the endpoint's.
pub(super) fn nsm_alias(owner: &str, port: &PortName) -> String {
    let side = if port.0.ends_with("-endpoint") {
        "server"
    } else {
        "client"
    };
    format!("{side}-{owner}")
}

/// The connection a veth tag belongs to.
pub(super) fn tag_owner(tag: &str) -> &str {
    tag.rsplit_once('/').map_or(tag, |(o, _)| o)
}

/// A checked NSM policy route as the kernel interface takes it.
pub(super) fn policy_config(p: &PolicySpec) -> PolicyConfig {
    let ports = |r: Option<(u16, u16)>| r.map_or(String::new(), |(a, b)| format!("{a}-{b}"));
    PolicyConfig {
        from: p.from.map_or(String::new(), |f| f.to_string()),
        proto: p.proto.map_or(String::new(), |n| n.to_string()),
        src_port: ports(p.src_port),
        dst_port: ports(p.dst_port),
        routes: p.routes.iter().map(route_config).collect(),
    }
}

pub(super) fn route_config(r: &RouteSpec) -> RouteConfig {
    RouteConfig {
        prefix: r.prefix.to_string(),
        next_hop: r.via.map(|v| v.to_string()),
    }
}

pub(super) fn mtu16(mtu: Option<u32>) -> Result<u16, BackendError> {
    u16::try_from(mtu.unwrap_or(1500))
        .map_err(|_| BackendError::InvalidArgument(format!("MTU {mtu:?} is over 65535")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn veth_tags_name_the_side_and_the_owner() {
        let c = kernel_tag("abc", &PortName("nsm-abc-client".into()));
        let e = kernel_tag("abc", &PortName("nsm-abc-endpoint".into()));
        assert_eq!((c.as_str(), e.as_str()), ("abc/client", "abc/endpoint"));
        assert_eq!(tag_owner(&c), "abc");
        assert_eq!(tag_owner("plain"), "plain");
        assert_eq!(
            nsm_alias("abc", &PortName("nsm-abc-endpoint".into())),
            "server-abc"
        );
    }
}
