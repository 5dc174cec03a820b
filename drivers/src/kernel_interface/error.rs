//! [`KernelInterfaceError`], and the `Result` every step returns.

use nix::errno::Errno;

use crate::netns::NetNsError;

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
    /// A policy route that cannot be made.
    #[error("invalid policy {field} {value:?}: {reason}")]
    InvalidPolicy {
        /// The policy's field.
        field: &'static str,
        /// Its value.
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

pub(super) type Result<T, E = KernelInterfaceError> = std::result::Result<T, E>;

/// Maps the kernel's refusal of `op` to [`KernelInterfaceError::Netlink`].
pub(super) fn netlink(op: impl Into<String>) -> impl FnOnce(Errno) -> KernelInterfaceError {
    let op = op.into();
    move |source| KernelInterfaceError::Netlink { op, source }
}
