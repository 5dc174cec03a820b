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
//! Needs `CAP_NET_ADMIN`. The device lives as long as the port (it is not persistent), in the
//! network namespace of the thread that opens the port.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};

use dataplane::{RxQueue, TxQueue, WorkerBuffers};
use nix::fcntl::{open, OFlag};
use nix::sys::stat::Mode;
use nix::sys::uio::{readv, writev};

use crate::af_packet::netdev::{ifreq, ifreq_name, NetDevice};
use crate::af_packet::{port_stats, Counter, QueueCounters};
use crate::port::{LinkStatus, Port, PortError, PortStats, QueuePair};

/// The longest frame a TAP device can hand over (its MTU is at most 65535).
const MAX_FRAME: usize = 65535 + 14 + 8;
/// Buffers one transmitted frame may span.
const MAX_SEGMENTS: usize = 16;

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
fn open_queue(name: &str, multi_queue: bool) -> Result<(OwnedFd, String), PortError> {
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
    queues: Mutex<Vec<TapQueue>>,
}

impl TapPort {
    /// Creates (or attaches to) the TAP device and opens one descriptor per queue.
    pub fn open(config: &TapConfig) -> Result<TapPort, PortError> {
        if config.queues == 0 {
            return Err(PortError::Config("a port needs at least one queue".into()));
        }
        let multi_queue = config.queues > 1;
        let (first, name) = open_queue(&config.name, multi_queue)?;
        let mut fds = vec![first];
        for _ in 1..config.queues {
            fds.push(open_queue(&name, multi_queue)?.0);
        }
        let device = NetDevice::open(&name)?;
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
    /// descriptor is open).
    fn link(&self) -> LinkStatus {
        self.device.link()
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
            }),
            tx: Box::new(TapTx {
                fd: q.fd.clone(),
                counters: q.counters.clone(),
            }),
        })
    }

    fn stats(&self) -> PortStats {
        port_stats(self.slots().iter().map(|q| &*q.counters))
    }
}

/// One worker's receive side of a TAP queue.
struct TapRx {
    fd: Arc<OwnedFd>,
    counters: Arc<QueueCounters>,
    /// Where a frame longer than one buffer spills, to be chained from.
    overflow: Box<[u8]>,
}

/// Why no frame came out of a read.
enum ReadFailed {
    /// Nothing to read now.
    Empty,
    /// A frame was read but no buffer was left for its tail: it is lost.
    NoBuffer,
    /// The read failed.
    Sys(nix::Error),
}

impl TapRx {
    /// Reads one frame into `bi`, chaining its tail when it is longer than a buffer; returns
    /// its length. On failure `bi` may hold part of a chain: the caller frees it.
    fn read_one(&mut self, buffers: &mut WorkerBuffers, bi: u32) -> Result<usize, ReadFailed> {
        let room = buffers.data_size();
        buffers.set_length(bi, room);
        let n = {
            let mut iov = [
                IoSliceMut::new(buffers.data_mut(bi)),
                IoSliceMut::new(&mut self.overflow),
            ];
            match readv(&*self.fd, &mut iov) {
                Ok(n) => n,
                Err(nix::Error::EAGAIN) => return Err(ReadFailed::Empty),
                Err(e) => return Err(ReadFailed::Sys(e)),
            }
        };
        if n <= room as usize {
            buffers.set_length(bi, n as u16);
            return Ok(n);
        }
        let tail = buffers.alloc_one().ok_or(ReadFailed::NoBuffer)?;
        let written = buffers.write_packet(tail, &self.overflow[..n - room as usize]);
        buffers.chain_append(bi, tail);
        written.map_err(|_| ReadFailed::NoBuffer)?;
        Ok(n)
    }
}

impl RxQueue for TapRx {
    fn receive(&mut self, buffers: &mut WorkerBuffers, out: &mut [u32]) -> usize {
        let (mut n, mut bytes) = (0, 0u64);
        while n < out.len() {
            let Some(bi) = buffers.alloc_one() else {
                self.counters.bump(Counter::RxBufferStalls, 1);
                break;
            };
            match self.read_one(buffers, bi) {
                Ok(len) => {
                    out[n] = bi;
                    n += 1;
                    bytes += len as u64;
                    continue;
                }
                Err(ReadFailed::Empty) => {}
                Err(ReadFailed::NoBuffer) => self.counters.bump(Counter::RxNoBuffer, 1),
                Err(ReadFailed::Sys(e)) => {
                    self.counters.bump(Counter::RxErrors, 1);
                    tracing::debug!(error = %e, "TAP read failed");
                }
            }
            buffers.free_one(bi);
            break;
        }
        if n > 0 {
            self.counters.bump(Counter::RxPackets, n as u64);
            self.counters.bump(Counter::RxBytes, bytes);
        }
        n
    }
}

/// One worker's transmit side of a TAP queue.
struct TapTx {
    fd: Arc<OwnedFd>,
    counters: Arc<QueueCounters>,
}

impl TxQueue for TapTx {
    fn transmit(&mut self, buffers: &mut WorkerBuffers, packets: &[u32]) -> usize {
        let (mut taken, mut sent, mut bytes) = (0, 0u64, 0u64);
        for &bi in packets {
            let mut iov = [IoSlice::new(&[]); MAX_SEGMENTS];
            let mut segments = 0;
            for segment in buffers.chain(bi) {
                if segments == MAX_SEGMENTS {
                    segments += 1;
                    break;
                }
                iov[segments] = IoSlice::new(buffers.data(segment));
                segments += 1;
            }
            if segments > MAX_SEGMENTS {
                self.counters.bump(Counter::TxTooLong, 1);
                taken += 1;
                continue;
            }
            match writev(&*self.fd, &iov[..segments]) {
                Ok(n) => {
                    sent += 1;
                    bytes += n as u64;
                }
                // The device's queue is full: the caller keeps the rest.
                Err(nix::Error::EAGAIN) => {
                    self.counters.bump(Counter::TxRingFull, 1);
                    break;
                }
                Err(nix::Error::EMSGSIZE) => self.counters.bump(Counter::TxTooLong, 1),
                Err(_) => self.counters.bump(Counter::TxErrors, 1),
            }
            taken += 1;
        }
        buffers.free(&packets[..taken]);
        if sent > 0 {
            self.counters.bump(Counter::TxPackets, sent);
            self.counters.bump(Counter::TxBytes, bytes);
        }
        taken
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

    #[test]
    fn a_port_needs_a_queue_and_a_valid_name() {
        assert!(matches!(
            TapPort::open(&TapConfig::new("tap0", 0)),
            Err(PortError::Config(_))
        ));
        assert!(TapPort::open(&TapConfig::new("no/slash", 1)).is_err());
    }
}
