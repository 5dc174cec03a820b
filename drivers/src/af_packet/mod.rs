//! AF_PACKET ports: any kernel network interface (a veth, a NIC the kernel drives, a bridge
//! port) through `TPACKET_V3` rings mapped into Quiver.
//!
//! Each worker gets its own socket, made on the worker's thread by [`Port::queue_pair`]: a
//! receive ring of blocks and a transmit ring of slots, both in one mapping. The sockets of a port
//! form one `PACKET_FANOUT` group in hash mode, so the kernel spreads the interface's flows over
//! the workers and each frame reaches exactly one of them. Sockets bind to the interface by index,
//! put it in promiscuous mode (`PACKET_ADD_MEMBERSHIP`; the kernel undoes it when they close) and
//! send with `PACKET_QDISC_BYPASS`, straight to the driver.
//!
//! Receiving walks the ring without a system call and copies each frame into a Quiver buffer
//! (chaining when one is not enough, and putting back a VLAN tag the device stripped); sending
//! copies a burst into transmit slots and kicks the kernel once with
//! `sendto(MSG_DONTWAIT)`. Nothing is allocated per packet.
//!
//! Needs `CAP_NET_RAW`. Ports see interfaces in the network namespace of the thread that opens
//! them, and queues bind in the namespace of the worker that asks for them: keep both in one
//! namespace.
//!
//! Offloads (`AfPacketConfig::offload`, on by default): the sockets use `PACKET_VNET_HDR`, so
//! a frame a peer in the same host hands over with its checksum still to fill in, or as a GSO
//! super-frame (up to 64 KiB, chained over buffers), arrives with a virtio-net header that says
//! so; the work is kept on the buffer ([`dataplane::offload`]; a header that does not fit its
//! frame is dropped as `rx-bad-vnet-hdr`). On transmit the work is written back as the header
//! and the kernel finishes it (`TxQueue::accepts_offload`): a super-frame leaves as one frame,
//! through a second socket when no transmit slot holds it. Egresses that cannot take the work
//! get it done in software by `offload-resolve`. Without offloads, over-long GSO frames are
//! dropped (`rx-too-long`) and partial checksums only counted (`rx-checksum-partial`).

mod counters;
pub(crate) mod netdev;
mod queue;
mod ring;
mod socket;

pub(crate) use counters::{port_stats, Counter, QueueCounters};

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::netns::NetNs;
use crate::port::{LinkStatus, Port, PortError, PortStats, QueuePair};
use netdev::NetDevice;
use queue::{max_frame_len, AfPacketRx, AfPacketTx, GSO_MAX_FRAME};
use ring::{RingLayout, RX_BLOCK_OVERHEAD, TX_DATA_OFFSET, VNET_HDR};
use socket::{Fanout, PacketSocket, SocketConfig};

/// How an AF_PACKET port is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AfPacketConfig {
    /// The kernel interface's name.
    pub interface: String,
    /// Queue pairs: one per worker.
    pub queues: usize,
    /// Receive frames for any destination MAC (needed to cross-connect an interface).
    pub promiscuous: bool,
    /// Send straight to the driver, skipping the kernel's qdisc (and its shaping and
    /// accounting).
    pub qdisc_bypass: bool,
    /// Bytes per receive block: a power of two, at least a page (raised to hold the longest
    /// frame the interface carries).
    pub rx_block_size: usize,
    /// Bytes of each of a queue's two rings, receive and transmit: the kernel allocates and
    /// pins both for as long as the queue is open, so this is what an idle port costs. The
    /// receive ring holds as many blocks as fit (at least [`MIN_RX_BLOCKS`]), the transmit
    /// ring as many slots.
    pub ring_bytes: usize,
    /// Milliseconds after which the kernel hands over a receive block that is not full: the
    /// latency bound at low rates.
    pub rx_block_timeout_ms: u32,
    /// Keep checksum and segmentation offload (`PACKET_VNET_HDR`, see the module docs). The
    /// receive ring then holds the same bytes in blocks large enough for a 64 KiB frame
    /// (fewer blocks).
    pub offload: bool,
}

/// The default of [`AfPacketConfig::ring_bytes`]: 4 MiB each way per queue; with offloads, 32
/// receive blocks of 128 KiB (each holds a 64 KiB super-frame) and 2,048 transmit slots. At low
/// rates the kernel hands over a block per timeout (1 ms) however little it holds, so the block
/// count is how long a worker may be away before frames drop: 32 ms here. With 8 blocks (1 MiB)
/// the soak lost frames at 2,000 frames/s on a loaded machine.
pub const DEFAULT_RING_BYTES: usize = 4 << 20;

/// The fewest blocks a receive ring has, whatever [`AfPacketConfig::ring_bytes`] says: the
/// kernel fills one while Quiver reads the other.
pub const MIN_RX_BLOCKS: usize = 2;

impl AfPacketConfig {
    /// `queues` queue pairs on `interface`: promiscuous, bypassing the qdisc, with
    /// [`DEFAULT_RING_BYTES`] of receive ring and as much of transmit ring per queue.
    ///
    /// At low rates the kernel hands over a receive block per timeout (1 ms) however few frames
    /// it holds, so the block count is how long a worker may be away before the kernel drops;
    /// blocks are kept small (32 KiB, 128 KiB with offloads) so the ring holds several.
    pub fn new(interface: &str, queues: usize) -> AfPacketConfig {
        AfPacketConfig {
            interface: interface.into(),
            queues,
            promiscuous: true,
            qdisc_bypass: true,
            rx_block_size: 32 * 1024,
            ring_bytes: DEFAULT_RING_BYTES,
            rx_block_timeout_ms: 1,
            offload: true,
        }
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system; it has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// Ring layouts for a device of this MTU.
fn layouts(config: &AfPacketConfig, mtu: u32) -> Result<(RingLayout, RingLayout), PortError> {
    let page = page_size();
    let block = config.rx_block_size;
    if !block.is_power_of_two() || block < page {
        return Err(PortError::Config(format!(
            "receive block size {block} is not a power of two of at least a page ({page})"
        )));
    }
    if config.ring_bytes == 0 {
        return Err(PortError::Config("a port needs ring memory".into()));
    }
    // A block holds at least its descriptor and one whole frame with its header (a GSO
    // super-frame with offloads); the ring as many blocks as its bytes hold, at least two.
    let (pre, longest_frame) = if config.offload {
        (VNET_HDR, GSO_MAX_FRAME.max(max_frame_len(mtu)))
    } else {
        (0, max_frame_len(mtu))
    };
    let longest = RX_BLOCK_OVERHEAD + pre + longest_frame;
    let rx_block = block.max(longest.next_power_of_two());
    let rx = RingLayout {
        block_size: rx_block,
        block_count: (config.ring_bytes / rx_block).max(MIN_RX_BLOCKS),
        // The kernel's accounting unit for a V3 receive ring; frames are packed regardless.
        frame_size: 2048,
    };
    // A slot holds its header and the longest frame the device sends; a block several slots
    // (a GSO super-frame that fits no slot leaves through a second socket, see `queue`).
    let frame_size = (TX_DATA_OFFSET + pre + max_frame_len(mtu))
        .next_power_of_two()
        .max(2048);
    let tx_block = frame_size.max(page).max(64 * 1024);
    let tx = RingLayout {
        block_size: tx_block,
        block_count: (config.ring_bytes / tx_block).max(1),
        frame_size,
    };
    Ok((rx, tx))
}

/// A queue's counters, which outlive its socket, and the socket while a worker has it.
struct QueueSlot {
    counters: Arc<QueueCounters>,
    socket: Weak<PacketSocket>,
}

/// A kernel interface as a Quiver port, through AF_PACKET rings (see the module docs).
pub struct AfPacketPort {
    device: NetDevice,
    /// The namespace the interface lives in, when not Quiver's own.
    netns: Option<Arc<NetNs>>,
    ifindex: i32,
    mac: [u8; 6],
    mtu: u32,
    sockets: SocketConfig,
    queues: Mutex<Vec<QueueSlot>>,
}

impl AfPacketPort {
    /// Opens `config.interface`, which must exist and be Ethernet. Queues (and their sockets)
    /// are made by [`Port::queue_pair`].
    pub fn open(config: &AfPacketConfig) -> Result<AfPacketPort, PortError> {
        AfPacketPort::open_in(config, None)
    }

    /// Opens the port on `config.interface` of network namespace `netns` (`None`: Quiver's
    /// own): the interface's control socket and every queue's packet socket are made inside
    /// it, so they stay bound there whichever thread uses them.
    pub fn open_in(
        config: &AfPacketConfig,
        netns: Option<Arc<NetNs>>,
    ) -> Result<AfPacketPort, PortError> {
        if config.queues == 0 {
            return Err(PortError::Config("a port needs at least one queue".into()));
        }
        let device = in_netns(netns.as_deref(), || NetDevice::open(&config.interface))?;
        let ifindex = device.index()?;
        let mac = device.mac()?;
        let mtu = device.mtu()?;
        let (rx, tx) = layouts(config, mtu)?;
        Ok(AfPacketPort {
            device,
            netns,
            ifindex,
            mac,
            mtu,
            sockets: SocketConfig {
                ifindex,
                rx,
                rx_retire_ms: config.rx_block_timeout_ms,
                tx,
                promiscuous: config.promiscuous,
                qdisc_bypass: config.qdisc_bypass,
                vnet_hdr: config.offload,
            },
            queues: Mutex::new(
                (0..config.queues)
                    .map(|_| QueueSlot {
                        counters: Arc::default(),
                        socket: Weak::new(),
                    })
                    .collect(),
            ),
        })
    }

    /// The interface's index in its network namespace.
    pub fn ifindex(&self) -> i32 {
        self.ifindex
    }

    /// The interface's MTU when the port was opened.
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    fn slots(&self) -> MutexGuard<'_, Vec<QueueSlot>> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Runs `f` inside `netns` (on a short-lived thread there), or here when `None`.
pub(crate) fn in_netns<T: Send>(
    netns: Option<&NetNs>,
    f: impl FnOnce() -> Result<T, PortError> + Send,
) -> Result<T, PortError> {
    match netns {
        None => f(),
        Some(ns) => ns
            .run(f)
            .map_err(|e| PortError::Device(format!("network namespace: {e}")))?,
    }
}

impl Port for AfPacketPort {
    fn name(&self) -> &str {
        self.device.name()
    }

    fn mac(&self) -> [u8; 6] {
        self.mac
    }

    fn link(&self) -> LinkStatus {
        self.device.link()
    }

    /// Opens worker `worker`'s socket. Another call for the same worker fails while the queues
    /// it gave are alive; once they are dropped (their socket closes and leaves the fanout
    /// group), a new call makes a fresh socket that counts on from the old one's counters.
    fn queue_pair(&self, worker: usize) -> Result<QueuePair, PortError> {
        let mut slots = self.slots();
        let count = slots.len();
        let slot = slots.get(worker).ok_or_else(|| {
            PortError::Config(format!(
                "{}: no queue {worker}, the port was opened with {count}",
                self.name()
            ))
        })?;
        if slot.socket.strong_count() > 0 {
            return Err(PortError::Config(format!(
                "{}: queue {worker} is already in use",
                self.name()
            )));
        }
        let counters = slot.counters.clone();
        // Holding a member keeps the group alive while the new socket joins it.
        let member = slots.iter().find_map(|s| s.socket.upgrade());
        let fanout = member
            .as_ref()
            .map_or(Fanout::New, |m| Fanout::Join(m.fanout_id()));
        let socket = Arc::new(in_netns(self.netns.as_deref(), || {
            PacketSocket::open(&self.sockets, fanout, counters)
        })?);
        drop(member);
        slots[worker].socket = Arc::downgrade(&socket);
        tracing::debug!(
            port = self.name(),
            worker,
            fanout = socket.fanout_id(),
            "AF_PACKET queue open"
        );
        Ok(QueuePair {
            rx: Box::new(AfPacketRx::new(socket.clone(), max_frame_len(self.mtu))),
            tx: Box::new(AfPacketTx::new(socket, self.mtu)),
        })
    }

    /// Sums the queues' counters, with the kernel's receive-ring drops read from each open
    /// socket.
    fn stats(&self) -> PortStats {
        let slots = self.slots();
        for s in slots.iter() {
            if let Some(socket) = s.socket.upgrade() {
                socket.fold_kernel_stats();
            }
        }
        port_stats(slots.iter().map(|s| &*s.counters))
    }

    fn rx_modes(&self) -> Vec<dataplane::RxMode> {
        self.slots().iter().map(|s| s.counters.rx_mode()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_layouts_fit_the_mtu_and_whole_blocks() {
        let c = AfPacketConfig {
            offload: false,
            ..AfPacketConfig::new("x", 1)
        };
        let (rx, tx) = layouts(&c, 1500).unwrap();
        assert_eq!(rx.bytes(), DEFAULT_RING_BYTES);
        assert_eq!(rx.block_size, 32 * 1024);
        assert_eq!(rx.block_count, 128);
        let (big, _) = layouts(&c, 65535).unwrap();
        assert_eq!(big.block_size, 128 * 1024, "a 64 KiB frame fits a block");
        assert_eq!(tx.frame_size, 2048);
        assert_eq!(tx.bytes(), DEFAULT_RING_BYTES);
        assert!(tx.frames() >= 512 && tx.block_size % tx.frame_size == 0);
        let (_, jumbo) = layouts(&c, 9000).unwrap();
        assert_eq!(jumbo.frame_size, 16384);
        assert!(jumbo.frame_size - TX_DATA_OFFSET >= 9000 + 22);
        let bad = AfPacketConfig {
            rx_block_size: 3 * 4096,
            ..c.clone()
        };
        assert!(matches!(layouts(&bad, 1500), Err(PortError::Config(_))));
        let none = AfPacketConfig { ring_bytes: 0, ..c };
        assert!(matches!(layouts(&none, 1500), Err(PortError::Config(_))));
    }

    #[test]
    fn with_offloads_a_block_holds_a_super_frame_and_a_slot_its_header() {
        let c = AfPacketConfig::new("x", 1);
        assert!(c.offload, "on by default");
        let (rx, tx) = layouts(&c, 1500).unwrap();
        assert_eq!(rx.block_size, 128 * 1024);
        assert!(rx.block_size >= RX_BLOCK_OVERHEAD + VNET_HDR + GSO_MAX_FRAME);
        assert_eq!(rx.block_count, 32, "4 MiB in blocks of 128 KiB");
        assert_eq!(tx.frame_size, 2048);
        assert!(tx.frame_size - TX_DATA_OFFSET >= VNET_HDR + 1500 + 22);
        assert_eq!(tx.frames(), 2048, "eight vectors");
    }

    #[test]
    fn the_ring_is_as_large_as_asked_with_at_least_two_receive_blocks() {
        let c = AfPacketConfig::new("x", 1);
        let sized = |bytes: usize| {
            let (rx, tx) = layouts(
                &AfPacketConfig {
                    ring_bytes: bytes,
                    ..c.clone()
                },
                1500,
            )
            .unwrap();
            (rx.bytes(), tx.bytes())
        };
        assert_eq!(sized(8 << 20), (8 << 20, 8 << 20));
        assert_eq!(sized(256 << 10), (256 << 10, 256 << 10));
        assert_eq!(
            sized(64 << 10),
            (MIN_RX_BLOCKS * (128 << 10), 64 << 10),
            "a receive ring never has fewer than two blocks"
        );
    }

    #[test]
    fn opening_a_missing_interface_says_so() {
        let err = AfPacketPort::open(&AfPacketConfig::new("quiver-none0", 1))
            .err()
            .expect("no such interface");
        assert!(err.to_string().contains("no interface named"), "{err}");
        assert!(AfPacketPort::open(&AfPacketConfig::new("lo", 0)).is_err());
    }
}
