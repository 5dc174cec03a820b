//! NSM's recvfd on Quiver's server side (see [`grpc_unix`] for the transport): the
//! `inode://<dev>/<ino>` URLs in a Request's mechanism parameters become
//! `file:///proc/self/fd/<n>` of an fd the client passed on its connection, before the
//! Request is looked at; the answer carries the client's URLs back.
//!
//! An fd a connection uses moves from the transport connection's table into this one, under
//! the NSM connection's id: it stays open (and its `/proc/self/fd/<n>` path the same, across
//! refreshes) while the connection lives, and is closed once it is gone (Close, a failed
//! Request, expiry). Fds passed and never used close with their transport connection.
//!
//! Quiver's client side is the mirror image ([`HeldFds::resolve_answer`]): the endpoint's
//! answer names files by `inode://` and passes their fds on Quiver's channel to it; Core reads
//! the answer's mechanism with them resolved, holds them (a table of its own, by connection)
//! while the connection lives, and keeps the endpoint's own URLs for refresh and Close. An
//! endpoint socket the registry passes by fd is [`passed_socket_url`]'s.

mod held;
mod offer;
mod registry;
#[cfg(test)]
mod tests;

pub use held::{HeldFds, Resolved};
pub use offer::pass_offered_files;
pub use registry::{passed_socket_url, MAX_PASSED_SOCKETS};
