//! TAP ports: a `/dev/net/tun` device in TAP mode, which attaches Quiver to the host's own
//! network stack. What Quiver transmits, the kernel receives on the TAP interface; what the
//! kernel sends out of the TAP interface, Quiver receives.
//!
//! Quiver is the far end of that virtual link, so its port has its own MAC address (given, or a
//! random locally administered one), distinct from the kernel interface's
//! ([`TapPort::kernel_mac`]). With several workers the device is multi-queue
//! (`IFF_MULTI_QUEUE`): one file descriptor per worker, among which the kernel spreads flows.
//! Descriptors are non-blocking; each frame is one `readv` or `writev` (the TAP interface has no
//! batch call without vhost), written into or gathered from Quiver's buffers directly, without an
//! intermediate copy.
//!
//! With offloads ([`TapConfig::offloads`], the default) the device is opened with
//! `IFF_VNET_HDR` and told (`TUNSETOFFLOAD`) that Quiver takes partial checksums and TCP
//! segmentation (IPv4, IPv6, ECN): every frame comes and goes behind a virtio-net header, so the
//! kernel hands Quiver whole TCP super-frames (up to 64 KiB, chained across buffers) with their
//! checksums still to fill in, and takes them back the same way (the work kept as packet
//! metadata, [`dataplane::offload`]). A header that does not fit its frame is dropped and
//! counted (`rx-bad-vnet-hdr`).
//!
//! Needs `CAP_NET_ADMIN`. The device lives as long as the port (it is not persistent), in the
//! network namespace of the thread that opens the port, or in [`TapConfig::netns`] (opened
//! from a thread there: the descriptors work from anywhere, and the device never exists in
//! Quiver's own namespace).

use dataplane::BufferIndex;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::IoSliceMut;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};

use dataplane::offload::{Gso, Offload, VIRTIO_NET_HDR_LEN};
use dataplane::{RxMode, RxQueue, WorkerBuffers};
use nix::fcntl::{open, OFlag};
use nix::sys::stat::Mode;
use nix::sys::uio::readv;

use crate::af_packet::netdev::{ifreq, ifreq_name, NetDevice};
use crate::af_packet::{port_stats, Counter, QueueCounters};
use crate::port::{LinkStatus, Port, PortError, PortStats, QueuePair};

mod tx;

use tx::TapTx;

/// The longest frame a TAP device can hand over (its MTU is at most 65535).
const MAX_FRAME: usize = 65535 + 14 + 8;
/// What Quiver takes from the kernel with offloads on: partial checksums, TCP segmentation.
const OFFLOADS: libc::c_uint =
    libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6 | libc::TUN_F_TSO_ECN;

/// How a TAP port is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TapConfig {
    /// The device's name; empty lets the kernel pick (`tap0`, `tap1` …).
    pub name: String,
    /// Queue pairs: one per worker (more than one makes a multi-queue device).
    pub queues: usize,
    /// Quiver's MAC address on the link; `None` picks a random locally administered one.
    pub mac: Option<[u8; 6]>,
    /// Bring the kernel interface up (`IFF_UP`) when the port opens.
    pub up: bool,
    /// Frames carry virtio-net headers: checksum and segmentation offloads both ways (see the
    /// module docs).
    pub offloads: bool,
    /// The network namespace to create the device in (`None`: the caller's).
    pub netns: Option<std::sync::Arc<crate::netns::NetNs>>,
}

impl TapConfig {
    /// A device called `name` (empty: the kernel's choice) with `queues` queues, brought up,
    /// with a random MAC on Quiver's side.
    pub fn new(name: &str, queues: usize) -> TapConfig {
        TapConfig {
            name: name.into(),
            queues,
            mac: None,
            up: true,
            offloads: true,
            netns: None,
        }
    }
}

/// A random unicast, locally administered MAC address.
fn random_mac() -> [u8; 6] {
    // `RandomState` is seeded from the OS's random source.
    let mut h = RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    let r = h.finish().to_le_bytes();
    [(r[0] & 0xfe) | 0x02, r[1], r[2], r[3], r[4], r[5]]
}

fn sys(what: String, source: nix::Error) -> PortError {
    PortError::Sys { what, source }
}

/// Opens one queue of the TAP device `name` (empty: a new device named by the kernel); returns
/// the descriptor and the device's name.
fn open_queue(
    name: &str,
    multi_queue: bool,
    offloads: bool,
) -> Result<(OwnedFd, String), PortError> {
    let fd = open(
        "/dev/net/tun",
        OFlag::O_RDWR | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| sys("open /dev/net/tun".into(), e))?;
    let mut req = ifreq(name)
        .ok_or_else(|| PortError::Config(format!("`{name}` is not a valid interface name")))?;
    let mut flags = libc::IFF_TAP | libc::IFF_NO_PI;
    if multi_queue {
        flags |= libc::IFF_MULTI_QUEUE;
    }
    if offloads {
        flags |= libc::IFF_VNET_HDR;
    }
    req.ifr_ifru.ifru_flags = flags as libc::c_short;
    // SAFETY: TUNSETIFF reads and writes one `struct ifreq`, which `req` is; `fd` is open.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF as _, &mut req) };
    if r < 0 {
        let e = nix::Error::last();
        let why = match e {
            nix::Error::EPERM => " (needs CAP_NET_ADMIN)",
            nix::Error::EINVAL | nix::Error::EBUSY => {
                " (a device of that name exists and is not a TAP of this kind, or is in use)"
            }
            _ => "",
        };
        return Err(sys(format!("TUNSETIFF `{name}`{why}"), e));
    }
    if offloads {
        // SAFETY: TUNSETOFFLOAD takes its argument (the offload bits) by value; `fd` is open.
        let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETOFFLOAD as _, OFFLOADS) };
        if r < 0 {
            return Err(sys(format!("TUNSETOFFLOAD `{name}`"), nix::Error::last()));
        }
    }
    Ok((fd, ifreq_name(&req)))
}

/// A queue's descriptor and counters.
struct TapQueue {
    fd: Arc<OwnedFd>,
    counters: Arc<QueueCounters>,
}

/// A TAP device as a Quiver port (see the module docs).
pub struct TapPort {
    device: NetDevice,
    mac: [u8; 6],
    kernel_mac: [u8; 6],
    mtu: u32,
    offloads: bool,
    queues: Mutex<Vec<TapQueue>>,
}

impl TapPort {
    /// Creates (or attaches to) the TAP device and opens one descriptor per queue.
    pub fn open(config: &TapConfig) -> Result<TapPort, PortError> {
        if config.queues == 0 {
            return Err(PortError::Config("a port needs at least one queue".into()));
        }
        let multi_queue = config.queues > 1;
        let (queues, offloads) = (config.queues, config.offloads);
        let (fds, device) = crate::af_packet::in_netns(config.netns.as_deref(), || {
            let (first, name) = open_queue(&config.name, multi_queue, offloads)?;
            let mut fds = vec![first];
            for _ in 1..queues {
                fds.push(open_queue(&name, multi_queue, offloads)?.0);
            }
            Ok((fds, NetDevice::open(&name)?))
        })?;
        if config.up {
            device.set_up()?;
        }
        let kernel_mac = device.mac()?;
        let mtu = device.mtu()?;
        let mut mac = config.mac.unwrap_or_else(random_mac);
        while config.mac.is_none() && mac == kernel_mac {
            mac = random_mac();
        }
        Ok(TapPort {
            device,
            mac,
            kernel_mac,
            mtu,
            offloads: config.offloads,
            queues: Mutex::new(
                fds.into_iter()
                    .map(|fd| TapQueue {
                        fd: Arc::new(fd),
                        counters: Arc::default(),
                    })
                    .collect(),
            ),
        })
    }

    /// The kernel interface's MAC address (the host's end of the link).
    pub fn kernel_mac(&self) -> [u8; 6] {
        self.kernel_mac
    }

    /// The kernel interface's MTU when the port was opened.
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// Whether the device still exists, wherever it is: `TUNGETIFF` on a queue's descriptor
    /// fails once the device is gone.
    fn attached(&self) -> bool {
        let slots = self.slots();
        let Some(q) = slots.first() else {
            return false;
        };
        // SAFETY: an all-zero `ifreq` is valid (see `ifreq`); TUNGETIFF writes one into it.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        // SAFETY: TUNGETIFF writes one `struct ifreq`, which `req` is; the descriptor is open.
        let r = unsafe { libc::ioctl(q.fd.as_raw_fd(), libc::TUNGETIFF as _, &mut req) };
        r == 0
    }

    fn slots(&self) -> MutexGuard<'_, Vec<TapQueue>> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Port for TapPort {
    fn name(&self) -> &str {
        self.device.name()
    }

    fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// Up when the kernel interface is up and attached (a TAP has a carrier while a queue's
    /// descriptor is open). A device moved into another namespace (NSM's KERNEL mechanism) is
    /// no longer found here by name: it is up while it is still attached to Quiver's queues,
    /// down once it is gone (deleted, or its namespace with it).
    fn link(&self) -> LinkStatus {
        let here = self.device.link();
        if matches!(here, LinkStatus::Up) || self.device.index().is_ok() {
            return here;
        }
        match self.attached() {
            true => LinkStatus::Up,
            false => LinkStatus::Down(format!("the TAP device `{}` is gone", self.name())),
        }
    }

    /// Worker `worker`'s queue pair, sharing that queue's descriptor. Fails while the queues a
    /// previous call gave are alive.
    fn queue_pair(&self, worker: usize) -> Result<QueuePair, PortError> {
        let slots = self.slots();
        let q = slots.get(worker).ok_or_else(|| {
            PortError::Config(format!(
                "{}: no queue {worker}, the port was opened with {}",
                self.name(),
                slots.len()
            ))
        })?;
        if Arc::strong_count(&q.fd) > 1 {
            return Err(PortError::Config(format!(
                "{}: queue {worker} is already in use",
                self.name()
            )));
        }
        Ok(QueuePair {
            rx: Box::new(TapRx {
                fd: q.fd.clone(),
                counters: q.counters.clone(),
                overflow: vec![0; MAX_FRAME].into_boxed_slice(),
                vnet: self.offloads,
                failed: false,
            }),
            tx: Box::new(TapTx::new(q.fd.clone(), q.counters.clone(), self.offloads)),
        })
    }

    fn stats(&self) -> PortStats {
        port_stats(self.slots().iter().map(|q| &*q.counters))
    }

    fn rx_modes(&self) -> Vec<RxMode> {
        self.slots().iter().map(|q| q.counters.rx_mode()).collect()
    }
}

/// One worker's receive side of a TAP queue.
struct TapRx {
    fd: Arc<OwnedFd>,
    counters: Arc<QueueCounters>,
    /// Where a frame longer than one buffer spills, to be chained from.
    overflow: Box<[u8]>,
    /// Frames come behind a virtio-net header.
    vnet: bool,
    /// A read failed already (logged once).
    failed: bool,
}

/// Why no frame came out of a read.
enum ReadFailed {
    /// Nothing to read now.
    Empty,
    /// A frame was read but no buffer was left for its tail: it is lost.
    NoBuffer,
    /// A frame came with a virtio-net header that does not fit it: it is dropped.
    BadHeader,
    /// The read failed.
    Sys(nix::Error),
}

impl TapRx {
    /// Reads one frame into `bi`, chaining its tail when it is longer than a buffer; returns
    /// its length and the work its virtio-net header leaves. On failure `bi` may hold part of
    /// a chain: the caller frees it.
    fn read_one(
        &mut self,
        buffers: &mut WorkerBuffers,
        bi: BufferIndex,
    ) -> Result<(usize, Option<Offload>), ReadFailed> {
        let room = buffers.data_size();
        buffers.set_length(bi, room);
        let mut hdr = [0u8; VIRTIO_NET_HDR_LEN];
        let pre = if self.vnet { VIRTIO_NET_HDR_LEN } else { 0 };
        let n = {
            let mut iov = [
                IoSliceMut::new(&mut hdr[..pre]),
                IoSliceMut::new(buffers.data_mut(bi)),
                IoSliceMut::new(&mut self.overflow),
            ];
            match readv(&*self.fd, &mut iov) {
                Ok(n) if n < pre => return Err(ReadFailed::BadHeader),
                Ok(n) => n - pre,
                Err(nix::Error::EAGAIN) => return Err(ReadFailed::Empty),
                Err(e) => return Err(ReadFailed::Sys(e)),
            }
        };
        let offload = match self.vnet {
            true => Offload::from_virtio(&hdr, n).map_err(|_| ReadFailed::BadHeader)?,
            false => None,
        };
        if n <= room as usize {
            buffers.set_length(bi, n as u16);
            return Ok((n, offload));
        }
        let tail = buffers.alloc_one().ok_or(ReadFailed::NoBuffer)?;
        let written = buffers.write_packet(tail, &self.overflow[..n - room as usize]);
        buffers.chain_append(bi, tail);
        written.map_err(|_| ReadFailed::NoBuffer)?;
        Ok((n, offload))
    }
}

impl RxQueue for TapRx {
    fn receive(&mut self, buffers: &mut WorkerBuffers, out: &mut [BufferIndex]) -> usize {
        let (mut n, mut bytes, mut partial, mut gso) = (0, 0u64, 0u64, 0u64);
        while n < out.len() {
            let Some(bi) = buffers.alloc_one() else {
                self.counters.bump(Counter::RxBufferStalls, 1);
                break;
            };
            match self.read_one(buffers, bi) {
                Ok((len, offload)) => {
                    if let Some(o) = offload {
                        buffers.meta_mut(bi).set_offload(o);
                        partial += o.needs_csum() as u64;
                        gso += (o.gso != Gso::None) as u64;
                    }
                    out[n] = bi;
                    n += 1;
                    bytes += len as u64;
                    continue;
                }
                Err(ReadFailed::Empty) => {}
                Err(ReadFailed::BadHeader) => {
                    // The frame is consumed: drop it and read on.
                    self.counters.bump(Counter::RxBadVnetHdr, 1);
                    buffers.free_one(bi);
                    continue;
                }
                Err(ReadFailed::NoBuffer) => self.counters.bump(Counter::RxNoBuffer, 1),
                Err(ReadFailed::Sys(e)) => {
                    self.counters.bump(Counter::RxErrors, 1);
                    // Once: a device that is gone (its namespace deleted) fails every read
                    // until the port is removed; `rx-errors` counts each.
                    if !std::mem::replace(&mut self.failed, true) {
                        tracing::debug!(error = %e, "TAP read failed");
                    }
                }
            }
            buffers.free_one(bi);
            break;
        }
        if n > 0 {
            self.counters.bump(Counter::RxPackets, n as u64);
            self.counters.bump(Counter::RxBytes, bytes);
        }
        if partial > 0 {
            self.counters.bump(Counter::RxChecksumPartial, partial);
        }
        if gso > 0 {
            self.counters.bump(Counter::RxGso, gso);
        }
        n
    }

    fn wake_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.fd.as_raw_fd())
    }

    fn set_mode(&mut self, mode: RxMode) {
        self.counters.set_rx_mode(mode);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_macs_are_unicast_and_locally_administered() {
        for _ in 0..64 {
            let m = random_mac();
            assert_eq!(m[0] & 0x03, 0x02, "{m:02x?}");
        }
        assert_ne!(random_mac(), random_mac());
    }

    /// A TAP queue's receive side over one end of a datagram socket pair: what the test writes
    /// to the other end arrives as the kernel's frames would (one read, one frame).
    fn fake_rx() -> (TapRx, std::os::unix::net::UnixDatagram) {
        let (ours, theirs) = std::os::unix::net::UnixDatagram::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let rx = TapRx {
            fd: Arc::new(OwnedFd::from(ours)),
            counters: Arc::default(),
            overflow: vec![0; MAX_FRAME].into_boxed_slice(),
            vnet: true,
            failed: false,
        };
        (rx, theirs)
    }

    fn vnet(flags: u8, gso: u8, gso_size: u16, start: u16, offset: u16) -> [u8; 10] {
        let mut h = [0u8; 10];
        h[0] = flags;
        h[1] = gso;
        h[4..6].copy_from_slice(&gso_size.to_le_bytes());
        h[6..8].copy_from_slice(&start.to_le_bytes());
        h[8..10].copy_from_slice(&offset.to_le_bytes());
        h
    }

    #[test]
    fn virtio_headers_that_do_not_fit_their_frame_are_dropped_and_counted() {
        use dataplane::buffer::{BufferPool, BufferPoolConfig, HugepagePolicy};
        let pool = BufferPool::new(&BufferPoolConfig {
            buffers: 256,
            hugepages: HugepagePolicy::Never,
            ..Default::default()
        })
        .unwrap();
        let mut buffers = pool.worker_buffers();
        let (mut rx, kernel) = fake_rx();
        let frame = [0x45u8; 200];
        let good = [&vnet(1, 0, 0, 34, 16)[..], &frame].concat();
        for bad in [
            vnet(1, 0, 0, 190, 16),  // the checksum field past the frame's end
            vnet(1, 0, 0, 10, 16),   // the L4 header inside the Ethernet header
            vnet(0, 9, 1000, 0, 0),  // an unknown GSO type
            vnet(1, 1, 0, 34, 16),   // TCP segmentation of size 0
            vnet(1, 1, 1448, 34, 6), // TCP segmentation with UDP's checksum offset
        ] {
            kernel.send(&[&bad[..], &frame].concat()).unwrap();
        }
        kernel.send(&good).unwrap();
        kernel.send(&[0u8; 4]).unwrap(); // shorter than a header
        let mut out = [BufferIndex::NONE; 16];
        let n = rx.receive(&mut buffers, &mut out);
        assert_eq!(n, 1, "the good frame");
        assert_eq!(rx.counters.get(Counter::RxBadVnetHdr), 6);
        assert_eq!(rx.counters.get(Counter::RxChecksumPartial), 1);
        let o = buffers.meta(out[0]).offload().copied().expect("work kept");
        assert_eq!((o.csum_start, o.csum_offset), (34, 16));
        assert_eq!(buffers.data(out[0]), &frame[..]);
        buffers.free(&out[..n]);
        assert_eq!(rx.receive(&mut buffers, &mut out), 0, "nothing more");
    }

    #[test]
    fn a_queue_publishes_its_receive_mode_for_show_interfaces() {
        use dataplane::buffer::{BufferPool, BufferPoolConfig, HugepagePolicy};
        use dataplane::harness::PacketSink;
        use dataplane::{GraphBuilder, PortsInput, PORT_INPUT, SLEEP_AFTER};
        let pool = BufferPool::new(&BufferPoolConfig {
            buffers: 256,
            hugepages: HugepagePolicy::Never,
            ..Default::default()
        })
        .unwrap();
        let mut buffers = pool.worker_buffers();
        let (rx, kernel) = fake_rx();
        let counters = rx.counters.clone();
        counters.set_rx_mode(RxMode::Interrupt); // left over from an earlier queue
        let mut input = PortsInput::new(PORT_INPUT, "sink");
        assert!(input.attach(1, Box::new(rx)));
        assert_eq!(counters.rx_mode(), RxMode::Polling, "attached: polled");
        let mut b = GraphBuilder::<()>::new();
        b.add(input).add(PacketSink::new("sink"));
        let mut g = b.build().unwrap();
        for _ in 0..SLEEP_AFTER {
            g.run_pass(&mut buffers, &());
        }
        assert_eq!(counters.rx_mode(), RxMode::Interrupt, "idle: asleep");
        kernel
            .send(&[&[0u8; 10][..], &[0x45u8; 60]].concat())
            .unwrap();
        let mut passes = 0u64;
        while counters.get(Counter::RxPackets) == 0 {
            g.run_pass(&mut buffers, &());
            passes += 1;
            assert!(passes < 50_000_000, "never woken");
        }
        assert_eq!(counters.rx_mode(), RxMode::Polling, "woken by the frame");
    }

    #[test]
    fn a_port_needs_a_queue_and_a_valid_name() {
        assert!(matches!(
            TapPort::open(&TapConfig::new("tap0", 0)),
            Err(PortError::Config(_))
        ));
        assert!(TapPort::open(&TapConfig::new("no/slash", 1)).is_err());
    }
}
