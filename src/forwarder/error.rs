//! What a runtime change can fail with, what starting the forwarder can fail with, and what
//! an owner can own.

use std::net::IpAddr;

use dataplane::CommandError;
use drivers::PortError;
use graph_nodes::ForwardingError;

use super::dpdk_ports::DpdkStartError;
use super::open::OpenError;
use crate::config::ConfigError;

/// Why a runtime change was refused. Each variant maps to one gRPC status code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForwarderError {
    /// The named port, cross-connect, route, neighbour or address does not exist
    /// (`NOT_FOUND`).
    #[error("not found: {0}")]
    NotFound(String),
    /// A port of that name (or an object in the way) exists (`ALREADY_EXISTS`).
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// The request cannot work as given (`INVALID_ARGUMENT`).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The data path or a device could not do it now (`UNAVAILABLE`).
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// A bug or an exhausted table (`INTERNAL`).
    #[error("internal: {0}")]
    Internal(String),
}

impl From<CommandError> for ForwarderError {
    fn from(e: CommandError) -> Self {
        ForwarderError::Unavailable(e.to_string())
    }
}

impl From<ForwardingError> for ForwarderError {
    fn from(e: ForwardingError) -> Self {
        match e {
            ForwardingError::NoSuchInterface(_) | ForwardingError::NoSuchTable(_) => {
                ForwarderError::NotFound(e.to_string())
            }
            ForwardingError::NameTaken(_)
            | ForwardingError::DuplicateTunnel { .. }
            | ForwardingError::TableNameTaken(_) => ForwarderError::AlreadyExists(e.to_string()),
            ForwardingError::BadPrefixLength(_)
            | ForwardingError::NoPaths
            | ForwardingError::BadVni(_)
            | ForwardingError::BadAddress(_)
            | ForwardingError::OtherTable(_)
            | ForwardingError::TableInUse(_)
            | ForwardingError::TableTargeted { .. }
            | ForwardingError::NextTableSelf(_)
            | ForwardingError::NextTableChain { .. }
            | ForwardingError::HasAddresses(_)
            | ForwardingError::HasRoutes(_)
            | ForwardingError::WrongMode(_) => ForwarderError::InvalidArgument(e.to_string()),
            ForwardingError::TooManyInterfaces
            | ForwardingError::TooManyTables
            | ForwardingError::Lpm(_)
            | ForwardingError::Lpm6(_) => ForwarderError::Internal(e.to_string()),
        }
    }
}

/// Why [`Forwarder::start`](super::Forwarder::start) failed: what of `quiver.toml` could not
/// be set up, and the error underneath.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration does not check ([`Config::topology`](crate::config::Config::topology)).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// DPDK's EAL or mempool did not start.
    #[error(transparent)]
    Dpdk(#[from] DpdkStartError),
    /// The FIB could not be made.
    #[error(transparent)]
    Fib(ForwardingError),
    /// Two ports have the same name.
    #[error("two ports are named {name}")]
    DuplicatePort {
        /// The name.
        name: String,
    },
    /// A port did not open.
    #[error("port {name}: {source}")]
    OpenPort {
        /// The port.
        name: String,
        /// Why.
        #[source]
        source: OpenError,
    },
    /// A port opened but the forwarding state refused it as an interface.
    #[error("port {name}: {source}")]
    AddPort {
        /// The port.
        name: String,
        /// Why.
        #[source]
        source: ForwardingError,
    },
    /// A cross-connect, address, neighbour or route names a port that is not open.
    #[error("no port named `{name}`")]
    UnknownPort {
        /// The name.
        name: String,
    },
    /// A port cross-connected to itself.
    #[error("xconnect {port} to itself")]
    XconnectToItself {
        /// The port.
        port: String,
    },
    /// An `[[xconnect]]` was refused.
    #[error("{source}")]
    Xconnect {
        /// One port.
        a: String,
        /// The other.
        b: String,
        /// Why.
        #[source]
        source: ForwardingError,
    },
    /// An `[[address]]` was refused.
    #[error("address {ip}: {source}")]
    Address {
        /// The address as written (`10.0.0.1/24`).
        ip: String,
        /// Why.
        #[source]
        source: ForwardingError,
    },
    /// A `[[neighbor]]` was refused.
    #[error("neighbor {ip}: {source}")]
    Neighbor {
        /// The neighbour's address as written.
        ip: String,
        /// Why.
        #[source]
        source: ForwardingError,
    },
    /// A `[[route]]` without next hops (a drop route) was refused.
    #[error("{source}")]
    DropRoute {
        /// The prefix as written.
        prefix: String,
        /// Why.
        #[source]
        source: ForwardingError,
    },
    /// A `[[route]]` was refused.
    #[error("route {prefix}: {source}")]
    Route {
        /// The prefix as written.
        prefix: String,
        /// Why.
        #[source]
        source: ForwardingError,
    },
    /// The first commit of the forwarding state failed.
    #[error(transparent)]
    Commit(ForwardingError),
    /// The workers did not start.
    #[error(transparent)]
    Workers(#[from] dataplane::StartError),
    /// The configured cross-connects' cut-throughs could not be committed.
    #[error(transparent)]
    CutThroughs(ForwarderError),
    /// A `[[wireguard]]` tunnel was refused.
    #[error("{source}")]
    Wireguard {
        /// The tunnel.
        name: String,
        /// Why.
        #[source]
        source: ForwarderError,
    },
    /// A `[[vxlan]]` tunnel could not be made.
    #[error("vxlan {name}: {source}")]
    Vxlan {
        /// The tunnel's name.
        name: String,
        /// Why.
        #[source]
        source: ForwardingError,
    },
    /// A `[[table]]` could not be made, or a port put in it.
    #[error("table {name}: {source}")]
    Table {
        /// The table's name.
        name: String,
        /// Why.
        #[source]
        source: ForwardingError,
    },
    /// A `[[route]]` with a next table was refused.
    #[error("route {prefix}: {source}")]
    NextTableRoute {
        /// The prefix as written.
        prefix: String,
        /// Why.
        #[source]
        source: ForwarderError,
    },
    /// A `[[route]]` through a WireGuard tunnel was refused.
    #[error("route {prefix}: {source}")]
    WireguardRoute {
        /// The prefix as written.
        prefix: String,
        /// Why.
        #[source]
        source: ForwarderError,
    },
}

pub(super) fn port_error(name: &str, e: PortError) -> ForwarderError {
    let msg = format!("port {name}: {e}");
    match e {
        PortError::Config(_) => ForwarderError::InvalidArgument(msg),
        PortError::Sys {
            source: nix::Error::ENODEV,
            ..
        } => ForwarderError::NotFound(msg),
        PortError::Sys { .. } | PortError::Device(_) => ForwarderError::Unavailable(msg),
    }
}

/// Something the control plane made, as [`Forwarder::owned_by`](super::Forwarder::owned_by)
/// lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owned {
    /// A port, by name.
    Port(String),
    /// An L2 cross-connect between two ports (both ways).
    CrossConnect(String, String),
    /// An L3 cross-connect between two ports (both ways).
    L3CrossConnect(String, String),
    /// A route: prefix (masked) and length, of either family.
    Route(IpAddr, u8),
    /// A neighbour: port and address.
    Neighbor(String, IpAddr),
    /// An address of ours: port, address, prefix length.
    Address(String, IpAddr, u8),
    /// A VXLAN tunnel, by name.
    Tunnel(String),
    /// A VLAN sub-interface, by name.
    Vlan(String),
}

impl Owned {
    /// Whether this object involves port `name`.
    pub(super) fn uses_port(&self, name: &str) -> bool {
        match self {
            Owned::Port(p)
            | Owned::Tunnel(p)
            | Owned::Vlan(p)
            | Owned::Neighbor(p, _)
            | Owned::Address(p, _, _) => p == name,
            Owned::CrossConnect(a, b) | Owned::L3CrossConnect(a, b) => a == name || b == name,
            Owned::Route(..) => false,
        }
    }
}
