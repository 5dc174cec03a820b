//! What a runtime change can fail with, and what an owner can own.

use super::*;

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
            ForwardingError::NoSuchInterface(_) => ForwarderError::NotFound(e.to_string()),
            ForwardingError::NameTaken(_) | ForwardingError::DuplicateTunnel { .. } => {
                ForwarderError::AlreadyExists(e.to_string())
            }
            ForwardingError::BadPrefixLength(_)
            | ForwardingError::NoPaths
            | ForwardingError::BadVni(_)
            | ForwardingError::WrongMode(_) => ForwarderError::InvalidArgument(e.to_string()),
            ForwardingError::TooManyInterfaces | ForwardingError::Lpm(_) => {
                ForwarderError::Internal(e.to_string())
            }
        }
    }
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

/// Something the control plane made, as [`Forwarder::owned_by`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owned {
    /// A port, by name.
    Port(String),
    /// An L2 cross-connect between two ports (both ways).
    CrossConnect(String, String),
    /// An L3 cross-connect between two ports (both ways).
    L3CrossConnect(String, String),
    /// A route: prefix and length.
    Route(Ipv4Addr, u8),
    /// A neighbour: port and address.
    Neighbor(String, Ipv4Addr),
    /// An address of ours: port, address, prefix length.
    Address(String, Ipv4Addr, u8),
    /// A VXLAN tunnel, by name.
    Tunnel(String),
}

impl Owned {
    /// Whether this object involves port `name`.
    pub(super) fn uses_port(&self, name: &str) -> bool {
        match self {
            Owned::Port(p) | Owned::Tunnel(p) | Owned::Neighbor(p, _) | Owned::Address(p, _, _) => {
                p == name
            }
            Owned::CrossConnect(a, b) | Owned::L3CrossConnect(a, b) => a == name || b == name,
            Owned::Route(..) => false,
        }
    }
}
