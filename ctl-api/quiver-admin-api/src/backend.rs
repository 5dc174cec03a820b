//! What the admin service asks of the daemon ([`AdminBackend`]), the typed requests the server
//! hands it, and how it refuses ([`AdminError`], one gRPC status code each).

use std::net::IpAddr;

use crate::proto as pb;

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
    /// Queue pairs (1 to 256).
    pub queues: u16,
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
    /// KiB of each queue's receive ring and of its transmit ring, as asked (`None`: the
    /// default); the backend checks it as it checks `ring_kb` in its configuration file.
    pub ring_kb: Option<u32>,
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

/// An L3 cross-connect's next hops: each peer's, an IPv4 one, an IPv6 one or both (each packet
/// goes toward the next hop of its family).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct L3Peers {
    /// Where packets received on `b` go, out of `a`.
    pub peer_a: Vec<IpAddr>,
    /// Where packets received on `a` go, out of `b`.
    pub peer_b: Vec<IpAddr>,
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
    fn add_route(
        &self,
        table: Option<&str>,
        prefix: IpAddr,
        len: u8,
        via: &[(IpAddr, String)],
    ) -> AdminResult<()>;
    /// Adds (or replaces) a next-table route to `prefix/len` of `table` (`None`: the default
    /// table): its packets are looked up again in table `next_table`.
    fn add_next_table_route(
        &self,
        table: Option<&str>,
        prefix: IpAddr,
        len: u8,
        next_table: &str,
    ) -> AdminResult<()>;
    /// Removes the route to `prefix/len` of `table` (`None`: the default table).
    fn delete_route(&self, table: Option<&str>, prefix: IpAddr, len: u8) -> AdminResult<()>;
    /// Every routing table with the interfaces in it.
    fn tables(&self) -> AdminResult<Vec<pb::RoutingTable>>;
    /// Adds routing table `name`.
    fn add_table(&self, name: &str) -> AdminResult<()>;
    /// Removes routing table `name` (no interface may be in it).
    fn delete_table(&self, name: &str) -> AdminResult<()>;
    /// Moves `interface` (without addresses) into `table`.
    fn set_interface_table(&self, interface: &str, table: &str) -> AdminResult<()>;
    /// Records that `ip` is at `mac` on `interface`.
    fn add_neighbor(&self, interface: &str, ip: IpAddr, mac: [u8; 6]) -> AdminResult<()>;
    /// Forgets neighbour `ip` on `interface`.
    fn delete_neighbor(&self, interface: &str, ip: IpAddr) -> AdminResult<()>;
    /// Adds an address of ours, `ip/len`, to `interface` (IPv4 or IPv6).
    fn add_address(&self, interface: &str, ip: IpAddr, len: u8) -> AdminResult<()>;
    /// Removes an address from `interface`.
    fn delete_address(&self, interface: &str, ip: IpAddr, len: u8) -> AdminResult<()>;
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

    /// Adds a WireGuard tunnel; returns its interface index. The request's syntax is checked
    /// (name, port); keys and addresses are the backend's to check.
    fn add_wireguard(&self, r: &pb::AddWireguardRequest) -> AdminResult<u32> {
        Err(AdminError::Unavailable(format!(
            "this quiver has no WireGuard ({})",
            r.name
        )))
    }

    /// `show wireguard`: WireGuard tunnels and their peers' counters.
    fn wireguard(&self) -> AdminResult<Vec<pb::WireguardTunnel>> {
        Ok(Vec::new())
    }
}
