//! How one memif port is set up.

use memif::{Mode, Role, SocketAddress};

use crate::netns::NetNs;

/// How one memif port is set up.
#[derive(Debug, Clone)]
pub struct MemifPortConfig {
    /// The port's name in Quiver.
    pub name: String,
    /// Master (listen) or slave (connect).
    pub role: Role,
    /// The control socket (`/path` or `@abstract`).
    pub socket: SocketAddress,
    /// The memif interface id on that socket.
    pub id: u32,
    /// Shared secret, if any.
    pub secret: Option<String>,
    /// ETHERNET or IP.
    pub mode: Mode,
    /// log2 of the ring size (slave: asked for).
    pub log2_ring_size: u8,
    /// Size of each memif buffer (slave) or largest descriptor accepted (master).
    pub buffer_size: u32,
    /// Queue pairs: a slave asks for this many (fewer if the master's HELLO offers fewer), a
    /// master accepts at most this many. Receive ring `i` is polled by worker `i % workers`;
    /// worker `w` sends on queue `w % queues`, shared by workers when there are fewer queues.
    pub queues: u16,
    /// The port's MAC address.
    pub mac: [u8; 6],
    /// The network namespace the control socket lives in (`None`: Quiver's own). A master
    /// binds its socket there (an abstract `@name` is then reachable from that namespace only);
    /// a slave connects, and reconnects, from there.
    pub netns: Option<NetNs>,
}

impl MemifPortConfig {
    /// A port called `name` on `socket` with interface `id`: ETHERNET mode, one queue pair
    /// (libmemif's and VPP's default), 1024-slot rings, 2048-byte buffers, no secret, a
    /// locally administered MAC derived from the id.
    pub fn new(name: &str, role: Role, socket: SocketAddress, id: u32) -> Self {
        let b = id.to_be_bytes();
        MemifPortConfig {
            name: name.into(),
            role,
            socket,
            id,
            secret: None,
            mode: Mode::Ethernet,
            log2_ring_size: 10,
            buffer_size: 2048,
            queues: 1,
            mac: [0x02, 0xfe, b[0], b[1], b[2], b[3]],
            netns: None,
        }
    }
}
