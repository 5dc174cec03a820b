//! An AF_XDP socket with a UMEM of its own: the memory frames are received into and sent from,
//! registered with the kernel, and the four rings (fill, completion, receive, transmit).

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

use super::config::XdpCopyMode;
use super::ring::{Consumer, Producer};
use crate::port::PortError;

fn sys(what: &str) -> PortError {
    PortError::Sys {
        what: what.into(),
        source: nix::Error::last(),
    }
}

/// Frame memory shared with the kernel: `frames` chunks of `chunk` bytes.
pub(super) struct Umem {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: plain memory; each frame has one user at a time (the kernel, or the queue that owns
// it), handed over through the rings.
unsafe impl Send for Umem {}
// SAFETY: as above: `&Umem` gives no access on its own; frames are read and written by the one
// queue that owns them.
unsafe impl Sync for Umem {}

impl Umem {
    fn new(len: usize) -> Result<Umem, PortError> {
        // SAFETY: a new private anonymous mapping; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(sys("mapping an AF_XDP UMEM"));
        }
        Ok(Umem {
            base: NonNull::new(base.cast()).expect("mmap does not return null on success"),
            len,
        })
    }

    /// The `len` bytes at `addr`, which a ring handed to the caller.
    ///
    /// # Safety
    /// The frame holding `addr..addr + len` must be the caller's now (taken from the receive
    /// or completion ring, or never given to the kernel), and not borrowed elsewhere.
    #[allow(clippy::mut_from_ref)] // Frames change hands through the rings, not borrows.
    pub(super) unsafe fn bytes_mut(&self, addr: u64, len: usize) -> Option<&mut [u8]> {
        let end = (addr as usize).checked_add(len)?;
        if end > self.len {
            return None;
        }
        // SAFETY: in bounds (checked); exclusive per the caller's contract.
        Some(unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr().add(addr as usize), len) })
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped, after the socket that registered it closed
        // (`XskSocket` drops its descriptor first).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// An AF_XDP socket bound to one queue of an interface. Its descriptor closes before its UMEM
/// is unmapped (field order).
pub(super) struct XskSocket {
    fd: OwnedFd,
    /// The frames the rings refer to.
    pub(super) umem: Umem,
    /// Whether the kernel copies frames (as it does for veths) rather than sharing the UMEM
    /// with the driver.
    pub(super) copy: bool,
}

/// The socket's rings, split between its receive side (fill, receive) and its transmit side
/// (transmit, completion).
pub(super) struct Rings {
    pub(super) fill: Producer<u64>,
    pub(super) rx: Consumer<libc::xdp_desc>,
    pub(super) tx: Producer<libc::xdp_desc>,
    pub(super) completion: Consumer<u64>,
}

/// How a socket is made.
pub(super) struct SocketSpec {
    pub(super) ifindex: u32,
    pub(super) queue: u32,
    /// Frames in the UMEM: half for receiving, half for sending.
    pub(super) frames: u32,
    /// Bytes per frame (2048 or 4096).
    pub(super) chunk: u32,
    pub(super) copy: XdpCopyMode,
}

fn setsockopt<T>(fd: &OwnedFd, name: libc::c_int, value: &T, what: &str) -> Result<(), PortError> {
    // SAFETY: `value` is a live `T`, passed with its size, as `name` expects.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    match r {
        0 => Ok(()),
        _ => Err(sys(what)),
    }
}

impl XskSocket {
    /// A socket with its UMEM and rings, bound to `spec.queue` of `spec.ifindex`.
    pub(super) fn open(spec: &SocketSpec) -> Result<(XskSocket, Rings), PortError> {
        // SAFETY: plain socket(2); the descriptor is owned at once.
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(sys("opening an AF_XDP socket"));
        }
        // SAFETY: `raw` is a new descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let umem = Umem::new(spec.frames as usize * spec.chunk as usize)?;
        let reg = libc::xdp_umem_reg {
            addr: umem.base.as_ptr() as u64,
            len: umem.len as u64,
            chunk_size: spec.chunk,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(&fd, libc::XDP_UMEM_REG, &reg, "registering an AF_XDP UMEM")?;
        let ring = spec.frames / 2;
        for (name, what) in [
            (libc::XDP_UMEM_FILL_RING, "sizing the fill ring"),
            (libc::XDP_UMEM_COMPLETION_RING, "sizing the completion ring"),
            (libc::XDP_RX_RING, "sizing the receive ring"),
            (libc::XDP_TX_RING, "sizing the transmit ring"),
        ] {
            setsockopt(&fd, name, &ring, what)?;
        }
        // SAFETY: an all-zero `xdp_mmap_offsets` is valid; the kernel fills it.
        let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::xdp_mmap_offsets>() as libc::socklen_t;
        // SAFETY: `off` and `len` are live and describe `off`'s size.
        let r = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_XDP,
                libc::XDP_MMAP_OFFSETS,
                (&mut off as *mut libc::xdp_mmap_offsets).cast(),
                &mut len,
            )
        };
        if r != 0 {
            return Err(sys("reading the AF_XDP ring offsets"));
        }
        let b = fd.as_fd();
        let rings = Rings {
            fill: Producer::map(b, &off.fr, ring, libc::XDP_UMEM_PGOFF_FILL_RING as _)?,
            completion: Consumer::map(b, &off.cr, ring, libc::XDP_UMEM_PGOFF_COMPLETION_RING as _)?,
            rx: Consumer::map(b, &off.rx, ring, libc::XDP_PGOFF_RX_RING)?,
            tx: Producer::map(b, &off.tx, ring, libc::XDP_PGOFF_TX_RING)?,
        };
        let copy = bind(&fd, spec)?;
        Ok((XskSocket { fd, umem, copy }, rings))
    }

    /// The kernel's counters of the socket (drops on a full ring or an empty fill ring, bad
    /// descriptors).
    pub(super) fn statistics(&self) -> Option<libc::xdp_statistics> {
        // SAFETY: an all-zero `xdp_statistics` is valid; the kernel fills it.
        let mut s: libc::xdp_statistics = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::xdp_statistics>() as libc::socklen_t;
        // SAFETY: `s` and `len` are live and describe `s`'s size.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_XDP,
                libc::XDP_STATISTICS,
                (&mut s as *mut libc::xdp_statistics).cast(),
                &mut len,
            )
        };
        (r == 0).then_some(s)
    }

    /// Asks the kernel to send what the transmit ring holds (copy mode sends only when asked,
    /// and at most 32 frames per call): `Ok(true)` when the ring was drained, `Ok(false)` when
    /// frames remain (asked again later, or now by the caller).
    pub(super) fn kick_tx(&self) -> Result<bool, nix::Error> {
        // SAFETY: a zero-length send with no buffer; the kernel only looks at the ring.
        let r = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            )
        };
        match r {
            r if r >= 0 => Ok(true),
            _ => match nix::Error::last() {
                // More than one call's batch, or the device busy or out of room: the frames
                // stay on the ring.
                nix::Error::EAGAIN | nix::Error::EBUSY | nix::Error::ENOBUFS => Ok(false),
                e => Err(e),
            },
        }
    }

    /// Wakes the driver to refill from the fill ring (when it asks to be woken).
    pub(super) fn kick_rx(&self) {
        // SAFETY: a zero-length receive with no buffer; the kernel only looks at the rings.
        unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                std::ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
    }
}

impl AsRawFd for XskSocket {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }
}

/// Binds the socket to its queue, zero-copy when asked or when the driver can, in copy mode
/// otherwise; returns whether the kernel copies.
fn bind(fd: &OwnedFd, spec: &SocketSpec) -> Result<bool, PortError> {
    let attempt = |flags: u16| {
        let addr = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: flags | libc::XDP_USE_NEED_WAKEUP,
            sxdp_ifindex: spec.ifindex,
            sxdp_queue_id: spec.queue,
            sxdp_shared_umem_fd: 0,
        };
        // SAFETY: `addr` is a live `sockaddr_xdp`, passed with its size.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_xdp).cast(),
                std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
            )
        };
        match r {
            0 => Ok(()),
            _ => Err(nix::Error::last()),
        }
    };
    let what = |mode: &str, e| PortError::Sys {
        what: format!(
            "binding an AF_XDP socket to queue {} of interface {} ({mode})",
            spec.queue, spec.ifindex
        ),
        source: e,
    };
    match spec.copy {
        XdpCopyMode::Copy => attempt(libc::XDP_COPY)
            .map_err(|e| what("copy", e))
            .map(|_| true),
        XdpCopyMode::ZeroCopy => attempt(libc::XDP_ZEROCOPY)
            .map_err(|e| what("zero-copy", e))
            .map(|_| false),
        XdpCopyMode::Auto => match attempt(libc::XDP_ZEROCOPY) {
            Ok(()) => Ok(false),
            Err(_) => attempt(libc::XDP_COPY)
                .map_err(|e| what("copy", e))
                .map(|_| true),
        },
    }
}
