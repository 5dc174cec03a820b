//! AF_XDP ports: a kernel network interface through `AF_XDP` sockets and Quiver's XDP program.
//!
//! The port attaches the program (`drivers/bpf/xsk_redirect.c`) to the interface, and each worker
//! binds a socket of its own to one receive queue of the interface (worker `i`, queue `i`: a
//! multi-queue interface spreads flows, as a veth made with `numrxqueues` does). The program
//! redirects each frame to its queue's socket, or leaves it to the kernel (`XDP_PASS`) when no
//! socket is bound there. With [`AfXdpConfig::tunnel_ports`] it takes only UDP to those ports
//! and passes everything else, ARP included: a node's NIC stays the node's, and Quiver gets its
//! VXLAN and WireGuard traffic (a node uplink).
//!
//! Each socket has a UMEM of its own ([`AfXdpConfig::frames`] frames of 2 or 4 KiB: half to
//! receive into, half to send from) and its four rings; frames are copied between the UMEM and
//! Quiver's buffers, one copy each way (the kernel copies too on drivers without zero-copy, as
//! for veths; see [`XdpCopyMode`]). Nothing is allocated or locked per packet.
//!
//! The program is attached through a BPF link held by Quiver's process: it goes when the port
//! goes, and when Quiver dies however it dies, leaving the interface as it was.
//!
//! No offload metadata crosses an AF_XDP socket. A frame a local stack sent with its checksum
//! left for offload (a veth's default) arrives as it is, partial: the receive side recognises
//! that ([`dataplane::offload::infer_partial_checksum`], counted `rx-checksum-partial`) and
//! `offload-resolve` or an offloading egress finishes it. While the program is attached
//! natively to a veth, the kernel stops segmentation offload on the veth's peer, so no
//! super-frames come; in generic mode a super-frame larger than a UMEM frame cannot be
//! redirected and is dropped by the kernel (`xsk-rx-dropped`). Frames leave whole and
//! checksummed: the transmit side takes no offload work.
//!
//! Needs `CAP_NET_ADMIN` and `CAP_BPF` (or root), and a kernel with `CONFIG_XDP_SOCKETS`.

mod config;
mod program;
mod queue;
mod ring;
mod socket;

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::af_packet::netdev::NetDevice;
use crate::af_packet::{in_netns, port_stats, QueueCounters};
use crate::netns::NetNs;
use crate::port::{LinkStatus, Port, PortError, PortStats, QueuePair};
pub use config::{AfXdpConfig, XdpAttach, XdpCopyMode};
use program::XdpProgram;
use queue::{AfXdpRx, AfXdpTx};
use socket::{SocketSpec, XskSocket};

/// Room XDP keeps before each received frame in a UMEM chunk (`XDP_PACKET_HEADROOM`).
const XDP_HEADROOM: u32 = 256;

/// One worker's queue: its socket while its queue pair lives, and its counters.
struct QueueSlot {
    socket: Weak<XskSocket>,
    counters: Arc<QueueCounters>,
}

/// An open AF_XDP port.
pub struct AfXdpPort {
    device: NetDevice,
    ifindex: u32,
    mac: [u8; 6],
    chunk: u32,
    frames: u32,
    copy: XdpCopyMode,
    netns: Option<Arc<NetNs>>,
    program: Mutex<XdpProgram>,
    queues: Mutex<Vec<QueueSlot>>,
    /// In tunnel mode: the NIC is the kernel's too ([`Port::neighbours_from_kernel`]).
    shared: bool,
}

impl AfXdpPort {
    /// Attaches Quiver's XDP program to `config.interface` in Quiver's namespace.
    pub fn open(config: &AfXdpConfig) -> Result<AfXdpPort, PortError> {
        AfXdpPort::open_in(config, None)
    }

    /// Attaches Quiver's XDP program to `config.interface` in `netns` (Quiver's when `None`);
    /// the workers' sockets are made there too.
    pub fn open_in(
        config: &AfXdpConfig,
        netns: Option<Arc<NetNs>>,
    ) -> Result<AfXdpPort, PortError> {
        if config.queues == 0 {
            return Err(PortError::Config("a port needs at least one queue".into()));
        }
        if !config.frames.is_power_of_two() || config.frames < 64 {
            return Err(PortError::Config(format!(
                "AF_XDP frames per queue must be a power of two of at least 64, not {}",
                config.frames
            )));
        }
        let tunnel_ports = config.tunnel_ports.clone();
        let shared = !tunnel_ports.is_empty();
        let (interface, attach) = (config.interface.clone(), config.attach);
        let (device, program, ifindex) = in_netns(netns.as_deref(), move || {
            let device = NetDevice::open(&interface)?;
            let ifindex = device.index()? as u32;
            let program = XdpProgram::attach(&interface, ifindex, attach, &tunnel_ports)?;
            Ok((device, program, ifindex))
        })?;
        let mtu = device.mtu()?;
        // The longest frame: the MTU, an Ethernet header and a VLAN tag, after XDP's headroom.
        let need = mtu + 14 + 4 + XDP_HEADROOM;
        let chunk = match need {
            0..=2048 => 2048,
            2049..=4096 => 4096,
            _ => {
                return Err(PortError::Config(format!(
                    "{}: MTU {mtu} is too large for an AF_XDP frame (at most {})",
                    config.interface,
                    4096 - 18 - XDP_HEADROOM
                )))
            }
        };
        let mac = device.mac()?;
        tracing::debug!(
            port = config.interface,
            native = program.native,
            chunk,
            "AF_XDP program attached"
        );
        Ok(AfXdpPort {
            device,
            ifindex,
            mac,
            chunk,
            frames: config.frames,
            copy: config.copy,
            netns,
            program: Mutex::new(program),
            shared,
            queues: Mutex::new(
                (0..config.queues)
                    .map(|_| QueueSlot {
                        socket: Weak::new(),
                        counters: Arc::default(),
                    })
                    .collect(),
            ),
        })
    }

    /// Whether the program runs in the driver (native XDP) rather than the generic hook.
    pub fn native(&self) -> bool {
        self.lock_program().native
    }

    fn lock_program(&self) -> MutexGuard<'_, XdpProgram> {
        self.program.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn slots(&self) -> MutexGuard<'_, Vec<QueueSlot>> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Port for AfXdpPort {
    fn name(&self) -> &str {
        self.device.name()
    }

    fn mac(&self) -> [u8; 6] {
        self.mac
    }

    fn link(&self) -> LinkStatus {
        self.device.link()
    }

    fn neighbours_from_kernel(&self) -> bool {
        self.shared
    }

    /// Binds worker `worker`'s socket to receive queue `worker` of the interface and points the
    /// program at it. Fails while the queues a previous call gave are alive.
    fn queue_pair(&self, worker: usize) -> Result<QueuePair, PortError> {
        let mut slots = self.slots();
        let count = slots.len();
        let slot = slots.get_mut(worker).ok_or_else(|| {
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
        let spec = SocketSpec {
            ifindex: self.ifindex,
            queue: worker as u32,
            frames: self.frames,
            chunk: self.chunk,
            copy: self.copy,
        };
        let (socket, rings) = in_netns(self.netns.as_deref(), || XskSocket::open(&spec))?;
        let socket = Arc::new(socket);
        let half = self.frames / 2;
        let chunk = u64::from(self.chunk);
        let mut rx = AfXdpRx {
            socket: socket.clone(),
            fill: rings.fill,
            rx: rings.rx,
            counters: slot.counters.clone(),
            chunk,
        };
        rx.fill_all(half);
        let tx = AfXdpTx {
            socket: socket.clone(),
            tx: rings.tx,
            completion: rings.completion,
            counters: slot.counters.clone(),
            free: (half..self.frames).map(|i| u64::from(i) * chunk).collect(),
            chunk,
            failed: false,
            pending: false,
        };
        {
            use std::os::fd::AsRawFd;
            self.lock_program()
                .insert(worker as u32, socket.as_raw_fd())?;
        }
        slot.socket = Arc::downgrade(&socket);
        tracing::debug!(
            port = self.name(),
            worker,
            copy = socket.copy,
            "AF_XDP queue open"
        );
        Ok(QueuePair {
            rx: Box::new(rx),
            tx: Box::new(tx),
        })
    }

    fn rx_modes(&self) -> Vec<dataplane::RxMode> {
        self.slots().iter().map(|q| q.counters.rx_mode()).collect()
    }

    /// The queues' counters, and the kernel's drops of the live sockets: `xsk-rx-dropped`
    /// (no room in a frame, or a bad frame), `xsk-rx-ring-full` (Quiver did not keep up),
    /// `xsk-fill-ring-empty`, `xsk-invalid-descs`.
    fn stats(&self) -> PortStats {
        let slots = self.slots();
        let mut stats = port_stats(slots.iter().map(|q| &*q.counters));
        let mut kernel = [0u64; 4];
        for s in slots.iter().filter_map(|q| q.socket.upgrade()) {
            if let Some(k) = s.statistics() {
                kernel[0] += k.rx_dropped;
                kernel[1] += k.rx_ring_full;
                kernel[2] += k.rx_fill_ring_empty_descs;
                kernel[3] += k.rx_invalid_descs + k.tx_invalid_descs;
            }
        }
        stats.rx_dropped += kernel[0] + kernel[1];
        let names = [
            "xsk-rx-dropped",
            "xsk-rx-ring-full",
            "xsk-fill-ring-empty",
            "xsk-invalid-descs",
        ];
        stats
            .detail
            .extend(names.iter().zip(kernel).map(|(n, v)| (n.to_string(), v)));
        stats
    }
}
