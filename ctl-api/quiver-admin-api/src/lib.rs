//! Quiver's admin API (`quiver.admin.Admin`): the gRPC service `quiver ctl` talks to over a
//! unix socket, and the client it uses.
//!
//! The service is written against [`AdminBackend`], a synchronous trait the daemon implements
//! for its forwarder; the async server runs every call on tokio's blocking pool
//! (`spawn_blocking`), so a call that waits for the data path never stalls the runtime. The
//! server checks the syntax of every request (prefixes, addresses, MACs, enumerations) and
//! hands the backend typed values; the backend decides the rest and reports refusals as
//! [`AdminError`], which becomes a gRPC status (`NOT_FOUND`, `INVALID_ARGUMENT`,
//! `ALREADY_EXISTS` …).
//!
//! - [`proto`]: the messages and stubs generated from `ctl-api/proto/quiver_admin.proto`;
//! - `backend`: [`AdminBackend`], [`AdminError`] and the typed requests; `parse`: the text
//!   forms of addresses; `requests`: each request checked into its typed form;
//! - `service`: the gRPC service over a backend; `socket`: the socket (directory created,
//!   stale socket replaced, live one refused, mode 0660); `peer`: who is served (root, the
//!   socket's owner and group, by the credentials the kernel recorded: [`PeerPolicy`]);
//!   `server`: the service on a tokio runtime of its own thread ([`AdminServer`]), with its
//!   message limits ([`MAX_REQUEST_SIZE`], [`MAX_REPLY_SIZE`]);
//! - `client`: a blocking client for the CLI ([`AdminClient`]).

mod backend;
mod client;
mod parse;
mod peer;
pub mod proto;
mod requests;
mod server;
mod service;
mod socket;

pub use backend::{
    AdminBackend, AdminError, AdminResult, AfPacketSpec, CaptureSpec, L3Peers, MemifSpec,
};
pub use client::{AdminClient, ClientError};
pub use parse::{format_mac, parse_ip, parse_ip4, parse_mac, parse_prefix};
pub use peer::{PeerCredentials, PeerPolicy};
pub use server::{serve, AdminServer, ServeError, StartError, MAX_REPLY_SIZE, MAX_REQUEST_SIZE};
pub use socket::{bind_socket, SocketError, SOCKET_MODE};
/// gRPC statuses, as the client sees refusals.
pub use tonic::{Code, Status};
