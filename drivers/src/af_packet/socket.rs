//! One AF_PACKET socket of a port: created, configured and mapped in the order the kernel
//! requires, joined to the port's fanout group, and closed.
//!
//! The order matters:
//! 1. the socket is created with protocol 0, so it receives nothing yet;
//! 2. `PACKET_VERSION` and `PACKET_LOSS` (both refused once rings exist), the rings, the mapping;
//! 3. a filter that drops everything, then `bind` to the interface for every protocol;
//! 4. `PACKET_FANOUT`, which needs a bound socket: from then on the kernel spreads the
//!    interface's frames over the group's sockets by flow hash;
//! 5. the filter comes off. Between 3 and 4 the socket would otherwise get a copy of every frame
//!    that the group's other sockets also get: a port whose queues start under traffic would
//!    forward duplicates. Dropping instead loses a few frames at start-up, as a link coming up
//!    does.
//!
//! With `PACKET_VNET_HDR` (set before the rings, as the kernel requires) every frame in both
//! rings has a virtio-net header before it, and a second socket (`big`, bound to the interface
//! with protocol 0, so it receives nothing) sends the GSO super-frames that no transmit slot
//! holds: `sendmsg` on a socket with a transmit ring only ever sends the ring.

use std::mem::size_of;
use std::num::NonZeroUsize;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;

use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};
use std::io::IoSlice;

use nix::sys::socket::{send, sendmsg, socket, AddressFamily, MsgFlags, SockFlag, SockType};

use super::counters::{Counter, QueueCounters};
use super::ring::{RingLayout, RxRing, TxRing};
use crate::port::PortError;

/// What one socket is opened with.
#[derive(Debug, Clone)]
pub(crate) struct SocketConfig {
    /// The interface's index (in the opening thread's network namespace).
    pub ifindex: i32,
    /// The receive ring.
    pub rx: RingLayout,
    /// Milliseconds after which the kernel hands over a receive block that is not full.
    pub rx_retire_ms: u32,
    /// The transmit ring.
    pub tx: RingLayout,
    /// Receive frames addressed to any MAC.
    pub promiscuous: bool,
    /// Send straight to the driver, skipping the qdisc layer.
    pub qdisc_bypass: bool,
    /// A virtio-net header before every frame (`PACKET_VNET_HDR`): checksum and segmentation
    /// offload kept, not done by the kernel.
    pub vnet_hdr: bool,
}

/// Which fanout group the socket goes into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fanout {
    /// A new group, with an id the kernel picks.
    New,
    /// The group with this id (made by another socket of the same port).
    Join(u16),
}

fn sys(what: &str, source: nix::Error) -> PortError {
    PortError::Sys {
        what: what.into(),
        source,
    }
}

/// `setsockopt` with a plain C value.
fn set_option<T>(
    fd: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
    what: &str,
) -> Result<(), PortError> {
    // SAFETY: `value` points to a live `T` of `size_of::<T>()` bytes, which the kernel only
    // copies in; the descriptor is open.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(sys(what, nix::Error::last()));
    }
    Ok(())
}

/// `getsockopt` of an `int`.
fn get_int(
    fd: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
    what: &str,
) -> Result<i32, PortError> {
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are live and sized as `len` says; the kernel writes at most
    // `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&raw mut value).cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(sys(what, nix::Error::last()));
    }
    Ok(value)
}

/// The `PACKET_FANOUT` argument: the group id and, above it, the mode and flags.
fn fanout_arg(id: u16, flags: u32) -> libc::c_int {
    (id as u32 | (libc::PACKET_FANOUT_HASH | flags) << 16) as libc::c_int
}

/// An AF_PACKET socket with its two rings mapped.
pub(crate) struct PacketSocket {
    fd: OwnedFd,
    map: NonNull<u8>,
    map_len: usize,
    rx: RingLayout,
    tx: RingLayout,
    fanout_id: u16,
    counters: Arc<QueueCounters>,
    /// The socket that sends super-frames (with `vnet_hdr`).
    big: Option<OwnedFd>,
}

// SAFETY: the mapping pointer is only used to build the rings (each then used by one queue at a
// time, see `rx_ring`/`tx_ring`) and to unmap on drop; every other use is a system call on the
// descriptor, which the kernel serialises.
unsafe impl Send for PacketSocket {}
// SAFETY: as above: shared references only make system calls.
unsafe impl Sync for PacketSocket {}

impl PacketSocket {
    /// The socket's descriptor (readable when a receive block is ready: an idle queue waits
    /// on it, see `RxQueue::wake_fd`).
    pub(crate) fn raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.fd.as_raw_fd()
    }

    /// Opens a socket on `cfg.ifindex` in `fanout`'s group, counting into `counters`.
    pub(crate) fn open(
        cfg: &SocketConfig,
        fanout: Fanout,
        counters: Arc<QueueCounters>,
    ) -> Result<PacketSocket, PortError> {
        let fd = packet_socket()?;
        let sol = libc::SOL_PACKET;
        let v3 = libc::tpacket_versions::TPACKET_V3 as libc::c_int;
        set_option(
            &fd,
            sol,
            libc::PACKET_VERSION,
            &v3,
            "PACKET_VERSION TPACKET_V3",
        )?;
        // A slot the kernel cannot send is skipped rather than stopping the ring.
        set_option(&fd, sol, libc::PACKET_LOSS, &1, "PACKET_LOSS")?;
        let big = if cfg.vnet_hdr {
            set_option(&fd, sol, libc::PACKET_VNET_HDR, &1, "PACKET_VNET_HDR")?;
            Some(big_socket(cfg)?)
        } else {
            None
        };
        if cfg.qdisc_bypass {
            set_option(
                &fd,
                sol,
                libc::PACKET_QDISC_BYPASS,
                &1,
                "PACKET_QDISC_BYPASS",
            )?;
        }
        let rx_req = cfg.rx.request(cfg.rx_retire_ms);
        set_option(&fd, sol, libc::PACKET_RX_RING, &rx_req, "PACKET_RX_RING")?;
        let tx_req = cfg.tx.request(0);
        set_option(&fd, sol, libc::PACKET_TX_RING, &tx_req, "PACKET_TX_RING")?;
        // Let every transmit slot be in flight at once (best effort: needs CAP_NET_ADMIN).
        let sndbuf = cfg.tx.bytes().min(i32::MAX as usize) as libc::c_int;
        let _ = set_option(
            &fd,
            libc::SOL_SOCKET,
            libc::SO_SNDBUFFORCE,
            &sndbuf,
            "SO_SNDBUFFORCE",
        );

        let map_len = cfg.rx.bytes() + cfg.tx.bytes();
        let len =
            NonZeroUsize::new(map_len).ok_or_else(|| PortError::Config("empty rings".into()))?;
        // SAFETY: a fresh shared mapping of the socket's rings (receive first, then transmit, as
        // the kernel lays them out), at an address the kernel picks; nothing aliases it yet.
        let map = unsafe {
            mmap(
                None,
                len,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                &fd,
                0,
            )
        }
        .map_err(|e| sys("mmap of the packet rings", e))?
        .cast::<u8>();
        // From here on, dropping `socket` unmaps.
        let mut socket = PacketSocket {
            fd,
            map,
            map_len,
            rx: cfg.rx,
            tx: cfg.tx,
            fanout_id: 0,
            counters,
            big,
        };
        socket.attach(cfg, fanout)?;
        Ok(socket)
    }

    /// Steps 3 to 5 of the module docs, and promiscuous mode.
    fn attach(&mut self, cfg: &SocketConfig, fanout: Fanout) -> Result<(), PortError> {
        let fd = &self.fd;
        let mut drop_all = [libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: 0,
        }];
        let program = libc::sock_fprog {
            len: 1,
            filter: drop_all.as_mut_ptr(),
        };
        set_option(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            &program,
            "SO_ATTACH_FILTER",
        )?;

        // SAFETY: `sockaddr_ll` is plain integers and bytes; all zero is valid.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        addr.sll_ifindex = cfg.ifindex;
        // SAFETY: `addr` is a live `sockaddr_ll` and the length says so.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&raw const addr).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(sys(
                &format!("bind to interface index {}", cfg.ifindex),
                nix::Error::last(),
            ));
        }

        self.fanout_id = join_fanout(fd, fanout)?;

        if cfg.promiscuous {
            let mreq = libc::packet_mreq {
                mr_ifindex: cfg.ifindex,
                mr_type: libc::PACKET_MR_PROMISC as u16,
                mr_alen: 0,
                mr_address: [0; 8],
            };
            set_option(
                fd,
                libc::SOL_PACKET,
                libc::PACKET_ADD_MEMBERSHIP,
                &mreq,
                "PACKET_ADD_MEMBERSHIP promiscuous",
            )?;
        }
        set_option(
            fd,
            libc::SOL_SOCKET,
            libc::SO_DETACH_FILTER,
            &0,
            "SO_DETACH_FILTER",
        )
    }

    /// The fanout group this socket is in.
    pub(crate) fn fanout_id(&self) -> u16 {
        self.fanout_id
    }

    /// The counters of the queue this socket serves.
    pub(crate) fn counters(&self) -> &Arc<QueueCounters> {
        &self.counters
    }

    /// A walk over the receive ring.
    ///
    /// # Safety
    /// The ring must not outlive `self` (its owner keeps an `Arc` of the socket), and only one
    /// receive ring of a socket may exist.
    pub(crate) unsafe fn rx_ring(&self) -> RxRing {
        // SAFETY: the receive ring is the first `rx.bytes()` of the mapping, page aligned, shared
        // with the kernel only; the caller keeps the mapping alive and the ring unique; the
        // kernel starts every block as its own.
        unsafe { RxRing::new(self.map, self.rx) }.with_vnet_hdr(self.vnet_hdr())
    }

    /// A walk over the transmit ring.
    ///
    /// # Safety
    /// As for [`PacketSocket::rx_ring`].
    pub(crate) unsafe fn tx_ring(&self) -> TxRing {
        // SAFETY: the transmit ring follows the receive ring in the mapping (page aligned since
        // block sizes are page multiples); as for `rx_ring` otherwise; slots start available.
        unsafe { TxRing::new(self.map.add(self.rx.bytes()), self.tx) }
    }

    /// Asks the kernel to send every slot requested so far, without waiting.
    pub(crate) fn kick(&self) -> nix::Result<usize> {
        send(self.fd.as_raw_fd(), &[], MsgFlags::MSG_DONTWAIT)
    }

    /// Whether frames carry virtio-net headers.
    pub(crate) fn vnet_hdr(&self) -> bool {
        self.big.is_some()
    }

    /// Sends one frame, virtio-net header first, through the super-frame socket, without
    /// waiting (`EAGAIN` when the socket's buffer is full).
    pub(crate) fn send_big(&self, parts: &[IoSlice<'_>]) -> nix::Result<usize> {
        let fd = self.big.as_ref().ok_or(nix::Error::EOPNOTSUPP)?;
        sendmsg::<()>(fd.as_raw_fd(), parts, &[], MsgFlags::MSG_DONTWAIT, None)
    }

    /// Adds the kernel's receive drops since the last call to the queue's counters (reading them
    /// resets them).
    pub(crate) fn fold_kernel_stats(&self) {
        let mut st = libc::tpacket_stats_v3 {
            tp_packets: 0,
            tp_drops: 0,
            tp_freeze_q_cnt: 0,
        };
        let mut len = size_of::<libc::tpacket_stats_v3>() as libc::socklen_t;
        // SAFETY: `st` and `len` are live and sized as `len` says; the kernel writes at most that.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&raw mut st).cast(),
                &mut len,
            )
        };
        if r == 0 {
            self.counters
                .add_shared(Counter::KernelDrops, st.tp_drops as u64);
            self.counters
                .add_shared(Counter::KernelFreezes, st.tp_freeze_q_cnt as u64);
        }
    }
}

/// A fresh AF_PACKET socket that receives nothing yet.
fn packet_socket() -> Result<OwnedFd, PortError> {
    socket(
        AddressFamily::Packet,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    )
    .map_err(|e| {
        let hint = if e == nix::Error::EPERM {
            " (AF_PACKET needs CAP_NET_RAW)"
        } else {
            ""
        };
        sys(&format!("AF_PACKET socket{hint}"), e)
    })
}

/// The socket that sends super-frames: virtio-net headers, bound to the interface with
/// protocol 0 (it receives nothing). It never bypasses the qdisc layer, whatever the rings do:
/// that layer segments (and checksums) in software a super-frame the device cannot take whole,
/// where the bypass drops it.
fn big_socket(cfg: &SocketConfig) -> Result<OwnedFd, PortError> {
    let fd = packet_socket()?;
    set_option(
        &fd,
        libc::SOL_PACKET,
        libc::PACKET_VNET_HDR,
        &1,
        "PACKET_VNET_HDR",
    )?;
    // SAFETY: `sockaddr_ll` is plain integers and bytes; all zero is valid.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_ifindex = cfg.ifindex;
    // SAFETY: `addr` is a live `sockaddr_ll` and the length says so.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&raw const addr).cast(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(sys("bind the super-frame socket", nix::Error::last()));
    }
    Ok(fd)
}

/// Joins (or makes) the fanout group; returns its id. Hash mode without
/// `PACKET_FANOUT_FLAG_DEFRAG`: fragments of one datagram may land on different queues, which
/// only costs reordering between them, whereas defragmenting would make the kernel hold and
/// rebuild datagrams a forwarder passes on as they are. Frames the interface sends are left out
/// where the kernel can (Linux 6.9+), as `PACKET_IGNORE_OUTGOING` does for a lone socket.
fn join_fanout(fd: &OwnedFd, fanout: Fanout) -> Result<u16, PortError> {
    let (id, first) = match fanout {
        Fanout::New => (0, libc::PACKET_FANOUT_FLAG_UNIQUEID),
        Fanout::Join(id) => (id, 0),
    };
    let what = "PACKET_FANOUT";
    let with = fanout_arg(id, first | libc::PACKET_FANOUT_FLAG_IGNORE_OUTGOING);
    match set_option(fd, libc::SOL_PACKET, libc::PACKET_FANOUT, &with, what) {
        Ok(()) => {}
        Err(PortError::Sys {
            source: nix::Error::EINVAL,
            ..
        }) => {
            tracing::debug!("PACKET_FANOUT_FLAG_IGNORE_OUTGOING refused: an older kernel");
            set_option(
                fd,
                libc::SOL_PACKET,
                libc::PACKET_FANOUT,
                &fanout_arg(id, first),
                what,
            )?;
        }
        Err(e) => return Err(e),
    }
    match fanout {
        Fanout::Join(id) => Ok(id),
        Fanout::New => Ok(get_int(fd, libc::SOL_PACKET, libc::PACKET_FANOUT, what)? as u16),
    }
}

impl Drop for PacketSocket {
    fn drop(&mut self) {
        self.fold_kernel_stats();
        // SAFETY: the mapping made in `open`, of that length; the rings that pointed into it are
        // gone (each holds an `Arc` of this socket).
        if let Err(e) = unsafe { munmap(self.map.cast(), self.map_len) } {
            tracing::warn!(error = %e, "munmap of packet rings failed");
        }
    }
}
