//! The stable connections' ends, each pair on a thread of its own: the MEMIF one's NSC (a memif
//! slave on the socket Quiver answered, in the client's namespace) and NSE (a memif master on
//! the endpoint's socket, in the endpoint's namespace), both our `memif` crate; the KERNEL
//! one's two AF_PACKET sockets on the interfaces Quiver made in those namespaces.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use memif::{InterfaceConfig, Master, MasterConfig, Slave, SocketAddress};
use nix::libc;

use super::flow::{frame, Checker, Flow, Pacer, ETHERTYPE};
use super::host::enter;

/// The MEMIF connection's ends: the master bound on `nse_socket` inside `nse_ns`, the slave
/// dialing `nsc_socket` from inside `nsc_ns` (again after each disconnect).
pub fn memif_peers(
    flow: Arc<Flow>,
    nse_ns: String,
    nse_socket: String,
    nsc_ns: String,
    nsc_socket: String,
) -> Result<(), String> {
    enter(&nse_ns)?;
    let mut nse = Master::bind(SocketAddress::parse(&nse_socket), MasterConfig::default())
        .map_err(|e| format!("memif master on {nse_socket}: {e}"))?;
    nse.add_interface(InterfaceConfig::new(0))
        .map_err(|e| e.to_string())?;
    // The slave's sockets are made (each time it dials) in the client's namespace.
    enter(&nsc_ns)?;
    let mut nsc = Slave::new(SocketAddress::parse(&nsc_socket), InterfaceConfig::new(0))
        .map_err(|e| e.to_string())?;
    nsc.retry_interval = Duration::from_millis(20);
    let mut checker = Checker::default();
    let mut pacer = Pacer::default();
    let mut scratch = Vec::with_capacity(64);
    while !flow.stop.load(Ordering::Relaxed) {
        let _ = nse.poll();
        let _ = nsc.poll();
        let up = nsc.interface().is_up() && nse.interface(0).is_some_and(|i| i.is_up());
        flow.up.store(up, Ordering::Relaxed);
        let mut busy = false;
        let next = flow.sent.load(Ordering::Relaxed);
        let n = if up { pacer.due(&flow, next, 64) } else { 0 };
        if n > 0 {
            scratch.clear();
            scratch.extend((next..next + n).map(frame));
            let refs: Vec<&[u8]> = scratch.iter().map(|f| &f[..]).collect();
            // A full ring takes fewer: the rest go again next pass (nothing is lost).
            let taken = nsc.interface_mut().tx_burst(0, &refs) as u64;
            flow.sent.store(next + taken, Ordering::Release);
            busy = true;
        }
        if let Some(iface) = nse.interface_mut(0) {
            let got = iface.rx_burst(0, 256, &mut |f: &[u8]| checker.check(&flow, f));
            busy |= got > 0;
        }
        checker.serve_excuse(&flow);
        if !busy {
            // Pacing only: a frame is due every 100 µs at 10k/s.
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    Ok(())
}

/// An AF_PACKET socket bound to one interface.
struct PacketSocket(OwnedFd);

impl PacketSocket {
    /// Bound to `ifname` in the calling thread's namespace, receiving `protocol` (0: nothing).
    fn open(ifname: &str, protocol: u16) -> Result<PacketSocket, String> {
        let name = CString::new(ifname).map_err(|e| e.to_string())?;
        // SAFETY: `name` is a valid NUL-terminated string for the call's duration.
        let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if index == 0 {
            return Err(format!("no interface {ifname}"));
        }
        let proto = i32::from(protocol.to_be());
        // SAFETY: plain socket(2); the result is checked before use.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                proto,
            )
        };
        if fd < 0 {
            return Err(format!(
                "AF_PACKET socket: {}",
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: `fd` was just returned by socket(2) and is owned by nothing else.
        let sock = PacketSocket(unsafe { OwnedFd::from_raw_fd(fd) });
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = protocol.to_be();
        sll.sll_ifindex = index as i32;
        // SAFETY: `sll` is a valid sockaddr_ll and the length passed is its size.
        let r = unsafe {
            libc::bind(
                sock.0.as_raw_fd(),
                std::ptr::addr_of!(sll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if r < 0 {
            return Err(format!(
                "bind to {ifname}: {}",
                std::io::Error::last_os_error()
            ));
        }
        let size: libc::c_int = 4 << 20;
        // SAFETY: the option value is a c_int and its size is passed; failure is harmless.
        unsafe {
            libc::setsockopt(
                sock.0.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                std::ptr::addr_of!(size).cast(),
                std::mem::size_of::<libc::c_int>() as u32,
            );
        }
        Ok(sock)
    }

    fn send(&self, f: &[u8]) -> std::io::Result<()> {
        // SAFETY: `f` is valid for `f.len()` bytes for the call's duration.
        let n = unsafe { libc::send(self.0.as_raw_fd(), f.as_ptr().cast(), f.len(), 0) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// One frame into `buf`: its length, `None` when there is none, an error when the
    /// interface went.
    fn recv(&self, buf: &mut [u8]) -> std::io::Result<Option<usize>> {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes for the call's duration.
        let n = unsafe {
            libc::recv(
                self.0.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            return match e.kind() {
                std::io::ErrorKind::WouldBlock => Ok(None),
                _ => Err(e),
            };
        }
        Ok(Some(n as usize))
    }
}

/// The KERNEL connection's ends: frames sent on `nsc_if` inside `nsc_ns`, received on `nse_if`
/// inside `nse_ns`. The sockets are opened again when the flow asks (Quiver made the
/// interfaces anew) or when one fails.
pub fn kernel_peers(
    flow: Arc<Flow>,
    nse_ns: String,
    nse_if: &'static str,
    nsc_ns: String,
    nsc_if: &'static str,
) -> Result<(), String> {
    let mut socks: Option<(PacketSocket, PacketSocket)> = None;
    let mut opened_for = u64::MAX;
    let mut checker = Checker::default();
    let mut pacer = Pacer::default();
    let mut buf = [0u8; 2048];
    while !flow.stop.load(Ordering::Relaxed) {
        let asked = flow.reopen.load(Ordering::SeqCst);
        if asked != opened_for {
            socks = None;
        }
        if socks.is_none() {
            let open = || -> Result<(PacketSocket, PacketSocket), String> {
                enter(&nse_ns)?;
                let rx = PacketSocket::open(nse_if, ETHERTYPE)?;
                enter(&nsc_ns)?;
                let tx = PacketSocket::open(nsc_if, 0)?;
                Ok((rx, tx))
            };
            match open() {
                Ok(s) => {
                    socks = Some(s);
                    opened_for = asked;
                }
                Err(_) => {
                    flow.up.store(false, Ordering::Relaxed);
                    // The interfaces are not there yet: ask again shortly.
                    std::thread::sleep(Duration::from_millis(50));
                    checker.serve_excuse(&flow);
                    continue;
                }
            }
        }
        flow.up.store(true, Ordering::Relaxed);
        let Some((rx, tx)) = socks.as_ref() else {
            continue;
        };
        let mut busy = false;
        let next = flow.sent.load(Ordering::Relaxed);
        let n = pacer.due(&flow, next, 32);
        let mut failed = false;
        for seq in next..next + n {
            match tx.send(&frame(seq)) {
                Ok(()) => flow.sent.store(seq + 1, Ordering::Release),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    flow.send_errors.fetch_add(1, Ordering::Relaxed);
                    failed = true;
                    break;
                }
            }
            busy = true;
        }
        for _ in 0..256 {
            match rx.recv(&mut buf) {
                Ok(Some(len)) => {
                    checker.check(&flow, &buf[..len]);
                    busy = true;
                }
                Ok(None) => break,
                Err(_) => {
                    failed = true;
                    break;
                }
            }
        }
        checker.serve_excuse(&flow);
        if failed {
            socks = None;
            opened_for = u64::MAX;
            flow.up.store(false, Ordering::Relaxed);
        }
        if !busy {
            // Pacing only: a frame is due every 500 µs at 2k/s.
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    Ok(())
}
