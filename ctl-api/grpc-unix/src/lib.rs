//! gRPC on unix sockets, for servers and clients of any gRPC stack:
//!
//! - [`FdStream`]: file descriptors beside the bytes, as NSM's grpcfd passes them (see
//!   `specs/nsm.md`, "How a forwarder behaves"): each fd travels with `SCM_RIGHTS` on one byte
//!   of an ordinary write of the connection's own bytes (the gRPC stream, or the TLS records
//!   carrying it), so TLS and plaintext connections carry them alike. It receives the fds
//!   coming with what it reads (keyed by their file's (st_dev, st_ino) in [`ReceivedFds`]) and
//!   sends the fds queued in its [`FdSender`] with the next bytes it writes.
//! - [`InodeKey`]: the `inode://<dev>/<ino>` URL naming a passed file; a sender turns
//!   `file:///path` into one with [`FdSender::send_file`] or [`FdSender::rewrite_file_urls`].
//! - [`LenientAuthority`]: any `:authority` accepted on a unix socket (grpcio, grpc-java and
//!   grpcurl send the socket path, which hyper's h2 refuses).
//! - [`MessageLimit`]: a request over a server's size limit answered `RESOURCE_EXHAUSTED`.

mod authority;
mod inode;
mod limit;
mod stream;

pub use authority::{LenientAuthority, RewriteError, Rewriter, UNIX_AUTHORITY};
pub use inode::InodeKey;
pub use limit::MessageLimit;
pub use stream::{FdSender, FdStream, ReceivedFds, ReceivedFdsRef, MAX_RECEIVED_FDS};
