//! Quiver's admin API (`quiver.admin.Admin`): the gRPC service `quiver ctl` talks to over a
//! unix socket.
//!
//! The service is written against [`AdminBackend`], a synchronous trait the daemon implements
//! for its forwarder; the async server runs every call on tokio's blocking pool
//! (`spawn_blocking`), so a call that waits for the data path never stalls the runtime. The
//! server checks the syntax of every request (prefixes, addresses, MACs, enumerations) and
//! hands the backend typed values; the backend decides the rest and reports refusals as
//! [`AdminError`], which becomes a gRPC status (`NOT_FOUND`, `INVALID_ARGUMENT`,
//! `ALREADY_EXISTS` …).
//!
//! - [`server`]: the socket (directory created, stale socket replaced, live one refused, mode
//!   0660) and the service on a tokio runtime of its own thread;
//! - [`client`]: a blocking client for the CLI.

mod capture;
pub mod client;
pub mod server;

use std::net::Ipv4Addr;

use crate::proto::quiver_admin as pb;

pub use client::AdminClient;
pub use server::{bind_socket, AdminServer, SocketError};
/// gRPC statuses, as the client sees refusals.
pub use tonic::{Code, Status};

/// Why the backend refused a request; each variant is one gRPC status code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminError {
    /// No such interface, route, neighbour or cross-connect (`NOT_FOUND`).
    #[error("{0}")]
    NotFound(String),
    /// The request cannot work as given (`INVALID_ARGUMENT`).
    #[error("{0}")]
    InvalidArgument(String),
    /// It exists already (`ALREADY_EXISTS`).
    #[error("{0}")]
    AlreadyExists(String),
    /// The data path or a device could not do it now (`UNAVAILABLE`).
    #[error("{0}")]
    Unavailable(String),
    /// Anything else (`INTERNAL`).
    #[error("{0}")]
    Internal(String),
}

impl From<AdminError> for tonic::Status {
    fn from(e: AdminError) -> tonic::Status {
        match e {
            AdminError::NotFound(m) => tonic::Status::not_found(m),
            AdminError::InvalidArgument(m) => tonic::Status::invalid_argument(m),
            AdminError::AlreadyExists(m) => tonic::Status::already_exists(m),
            AdminError::Unavailable(m) => tonic::Status::unavailable(m),
            AdminError::Internal(m) => tonic::Status::internal(m),
        }
    }
}

/// What a backend method returns.
pub type AdminResult<T> = Result<T, AdminError>;

/// A memif port to add, as checked by the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemifSpec {
    /// The port's name.
    pub name: String,
    /// Master (listens) rather than slave (connects).
    pub master: bool,
    /// The control socket: a path, or `@name` for an abstract socket.
    pub socket: String,
    /// The interface id on that socket.
    pub id: u32,
    /// IP mode rather than ETHERNET.
    pub ip_mode: bool,
    /// Ring size in slots.
    pub ring_size: u32,
    /// memif buffer size in bytes.
    pub buffer_size: u32,
    /// Shared secret.
    pub secret: Option<String>,
    /// The port's MAC (default: derived from the id).
    pub mac: Option<[u8; 6]>,
    /// MTU.
    pub mtu: u16,
}

/// An AF_PACKET port to add, as checked by the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AfPacketSpec {
    /// The port's name.
    pub name: String,
    /// The kernel interface it opens.
    pub host_interface: String,
    /// Receive frames for any MAC.
    pub promiscuous: bool,
    /// MTU.
    pub mtu: u16,
}

/// A packet capture to start, as checked by the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureSpec {
    /// The port.
    pub interface: String,
    /// The pcap file (an absolute path).
    pub file: std::path::PathBuf,
    /// Received packets.
    pub rx: bool,
    /// Sent packets.
    pub tx: bool,
    /// Stop after this many packets (0: no limit).
    pub max_packets: u64,
    /// Keep the file at most this many bytes (0: no limit).
    pub max_bytes: u64,
    /// Bytes kept of each packet.
    pub snaplen: u32,
}

/// An L3 cross-connect's next hops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct L3Peers {
    /// Where packets received on `b` go, out of `a`.
    pub peer_a: Ipv4Addr,
    /// Where packets received on `a` go, out of `b`.
    pub peer_b: Ipv4Addr,
}

/// What the admin service asks of the daemon. Methods are synchronous and may block (for a
/// forwarding commit, say): the server calls them through `spawn_blocking`.
pub trait AdminBackend: Send + Sync + 'static {
    /// Every interface.
    fn interfaces(&self) -> AdminResult<Vec<pb::Interface>>;
    /// Runtime counters, per worker or summed (one entry).
    fn runtime(&self, per_worker: bool) -> AdminResult<pb::ShowRuntimeReply>;
    /// Every error counter, summed over workers.
    fn errors(&self) -> AdminResult<Vec<pb::ErrorCounter>>;
    /// Every route.
    fn fib(&self) -> AdminResult<Vec<pb::Route>>;
    /// Every neighbour.
    fn neighbors(&self) -> AdminResult<Vec<pb::Neighbor>>;
    /// Every cross-connect, each pair once.
    fn cross_connects(&self) -> AdminResult<Vec<pb::CrossConnect>>;
    /// Every memif port.
    fn memifs(&self) -> AdminResult<Vec<pb::Memif>>;
    /// NSM connections. None until the NSM service provides them.
    fn connections(&self) -> AdminResult<Vec<pb::Connection>> {
        Ok(Vec::new())
    }
    /// Traces the next `count` packets input node `node` produces.
    fn trace_add(&self, node: &str, count: u32) -> AdminResult<()>;
    /// The packets traced so far.
    fn trace_show(&self) -> AdminResult<Vec<pb::TracedPacket>>;
    /// Forgets trace records and stops tracing.
    fn trace_clear(&self) -> AdminResult<()>;
    /// Adds (or replaces) a route to `prefix/len` over (next hop, interface) pairs; none: drop.
    fn add_route(&self, prefix: Ipv4Addr, len: u8, via: &[(Ipv4Addr, String)]) -> AdminResult<()>;
    /// Removes the route to `prefix/len`.
    fn delete_route(&self, prefix: Ipv4Addr, len: u8) -> AdminResult<()>;
    /// Records that `ip` is at `mac` on `interface`.
    fn add_neighbor(&self, interface: &str, ip: Ipv4Addr, mac: [u8; 6]) -> AdminResult<()>;
    /// Forgets neighbour `ip` on `interface`.
    fn delete_neighbor(&self, interface: &str, ip: Ipv4Addr) -> AdminResult<()>;
    /// Cross-connects `a` and `b`: L2, or L3 toward `l3`'s peers.
    fn add_cross_connect(&self, a: &str, b: &str, l3: Option<L3Peers>) -> AdminResult<()>;
    /// Removes the cross-connect of `interface` (either end).
    fn delete_cross_connect(&self, interface: &str) -> AdminResult<()>;
    /// Adds a memif port; returns its interface index.
    fn add_memif(&self, spec: &MemifSpec) -> AdminResult<u32>;
    /// Adds an AF_PACKET port; returns its interface index.
    fn add_af_packet(&self, spec: &AfPacketSpec) -> AdminResult<u32>;
    /// Removes a port and everything that refers to it.
    fn delete_interface(&self, name: &str) -> AdminResult<()>;
    /// Zeroes the runtime and error counters.
    fn clear_counters(&self) -> AdminResult<()>;
    /// Starts a packet capture.
    fn capture_start(&self, spec: &CaptureSpec) -> AdminResult<pb::Capture> {
        let _ = spec;
        Err(AdminError::Unavailable(
            "this quiver does not capture".into(),
        ))
    }
    /// Stops the capture of `interface`.
    fn capture_stop(&self, interface: &str) -> AdminResult<pb::Capture> {
        Err(AdminError::NotFound(format!("no capture of `{interface}`")))
    }
    /// Every capture.
    fn captures(&self) -> AdminResult<Vec<pb::Capture>> {
        Ok(Vec::new())
    }
}

/// Parses `a.b.c.d`.
pub fn parse_ip(what: &str, s: &str) -> AdminResult<Ipv4Addr> {
    s.trim()
        .parse()
        .map_err(|_| AdminError::InvalidArgument(format!("{what} `{s}` is not an IPv4 address")))
}

/// Parses `a.b.c.d/len` (a bare address is a /32).
pub fn parse_prefix(s: &str) -> AdminResult<(Ipv4Addr, u8)> {
    let bad = || AdminError::InvalidArgument(format!("prefix `{s}` is not a.b.c.d/len (0-32)"));
    let (ip, len) = match s.trim().split_once('/') {
        Some((ip, len)) => (ip, len.parse::<u8>().map_err(|_| bad())?),
        None => (s.trim(), 32),
    };
    if len > 32 {
        return Err(bad());
    }
    Ok((ip.parse().map_err(|_| bad())?, len))
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> AdminResult<[u8; 6]> {
    let bad = || AdminError::InvalidArgument(format!("`{s}` is not a MAC address"));
    let parts: Vec<&str> = s.trim().split(':').collect();
    if parts.len() != 6 {
        return Err(bad());
    }
    let mut mac = [0u8; 6];
    for (m, p) in mac.iter_mut().zip(parts) {
        if p.is_empty() || p.len() > 2 {
            return Err(bad());
        }
        *m = u8::from_str_radix(p, 16).map_err(|_| bad())?;
    }
    Ok(mac)
}

/// Formats a MAC address as `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(m: [u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_addresses_and_macs_parse_or_are_refused_as_invalid_arguments() {
        assert_eq!(
            parse_prefix("10.1.0.0/16").unwrap(),
            (Ipv4Addr::new(10, 1, 0, 0), 16)
        );
        assert_eq!(
            parse_prefix("10.1.2.3").unwrap(),
            (Ipv4Addr::new(10, 1, 2, 3), 32)
        );
        for bad in ["10.1.0.0/33", "10.1.0/16", "x/8", "10.0.0.0/", ""] {
            assert!(
                matches!(parse_prefix(bad), Err(AdminError::InvalidArgument(_))),
                "{bad}"
            );
        }
        assert!(parse_ip("next hop", "10.0.0.256").is_err());
        let mac = parse_mac("02:FE:0:a:bb:cc").unwrap();
        assert_eq!(format_mac(mac), "02:fe:00:0a:bb:cc");
        for bad in ["02:fe:00:00:00", "02:fe:00:00:00:100", "02:fe:00:00:00:zz"] {
            assert!(parse_mac(bad).is_err(), "{bad}");
        }
        let status = tonic::Status::from(AdminError::NotFound("no port named `x`".into()));
        assert_eq!(status.code(), tonic::Code::NotFound);
        assert_eq!(status.message(), "no port named `x`");
    }
}
