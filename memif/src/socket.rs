//! The control channel: an `AF_UNIX` `SOCK_SEQPACKET` socket carrying one 128-byte message per
//! packet, with at most one file descriptor attached (`SCM_RIGHTS`).

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

use nix::errno::Errno;
use nix::sys::socket::{
    self, AddressFamily, Backlog, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag,
    SockType, UnixAddr,
};

use crate::msg::{Msg, MsgError, MSG_SIZE};
use crate::Error;

/// Where a control socket lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SocketAddress {
    /// A filesystem path.
    Path(PathBuf),
    /// A Linux abstract name (without the leading NUL).
    Abstract(Vec<u8>),
}

impl SocketAddress {
    /// Parse libmemif's spelling: a leading `@` means abstract (`@/tmp/x.sock` is the abstract
    /// name `/tmp/x.sock`, which is what DPDK's `socket=/tmp/x.sock,socket-abstract=yes` uses).
    pub fn parse(s: &str) -> SocketAddress {
        match s.strip_prefix('@') {
            Some(name) => SocketAddress::Abstract(name.as_bytes().to_vec()),
            None => SocketAddress::Path(PathBuf::from(s)),
        }
    }

    fn to_unix_addr(&self) -> Result<UnixAddr, Error> {
        match self {
            SocketAddress::Path(p) => Ok(UnixAddr::new(p.as_path())?),
            SocketAddress::Abstract(n) => Ok(UnixAddr::new_abstract(n)?),
        }
    }
}

impl std::fmt::Display for SocketAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SocketAddress::Path(p) => write!(f, "{}", p.display()),
            SocketAddress::Abstract(n) => write!(f, "@{}", String::from_utf8_lossy(n)),
        }
    }
}

/// Result of one non-blocking receive.
#[derive(Debug)]
pub enum Received {
    /// A valid message, with the first file descriptor attached to it (extra ones are closed).
    Msg(Msg, Option<OwnedFd>),
    /// Nothing to read right now.
    WouldBlock,
    /// The peer closed the connection.
    Closed,
    /// A packet that is not a valid message (wrong size or unknown type); its fds are closed.
    Invalid(MsgError),
}

/// Why a control connection ends: the reason, and whether to tell the peer with a DISCONNECT
/// (not when the peer closed or disconnected itself).
pub type Ending = (String, bool);

impl Received {
    /// The next message to handle (`Ok(None)`: nothing to read now), or why the connection
    /// ends. Master and slave share this so that both treat closes, garbage and DISCONNECT alike.
    pub fn into_message(self) -> Result<Option<(Msg, Option<OwnedFd>)>, Ending> {
        match self {
            Received::WouldBlock => Ok(None),
            Received::Closed => Err(("peer closed the control channel".to_string(), false)),
            Received::Invalid(e) => Err((format!("invalid message: {e}"), true)),
            Received::Msg(Msg::Disconnect(d), _) => Err((
                format!("peer disconnected: {}", d.reason.to_string_lossy()),
                false,
            )),
            Received::Msg(m, fd) => Ok(Some((m, fd))),
        }
    }
}

/// A connected or listening control socket (non-blocking, close-on-exec).
#[derive(Debug)]
pub struct ControlSocket {
    fd: OwnedFd,
}

fn new_socket() -> Result<OwnedFd, Error> {
    Ok(socket::socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    )?)
}

impl ControlSocket {
    /// Bind and listen on `addr`. A stale socket file at a filesystem path is removed first.
    pub fn listen(addr: &SocketAddress) -> Result<ControlSocket, Error> {
        if let SocketAddress::Path(p) = addr {
            use std::os::unix::fs::FileTypeExt;
            if let Ok(md) = std::fs::symlink_metadata(p) {
                if md.file_type().is_socket() {
                    let _ = std::fs::remove_file(p);
                }
            }
        }
        let fd = new_socket()?;
        socket::bind(fd.as_raw_fd(), &addr.to_unix_addr()?)?;
        socket::listen(&fd, Backlog::new(32).unwrap_or(Backlog::MAXCONN))?;
        Ok(ControlSocket { fd })
    }

    /// Connect to a listening master at `addr`.
    pub fn connect(addr: &SocketAddress) -> Result<ControlSocket, Error> {
        let fd = new_socket()?;
        socket::connect(fd.as_raw_fd(), &addr.to_unix_addr()?)?;
        Ok(ControlSocket { fd })
    }

    /// Accept one pending connection, if any.
    pub fn accept(&self) -> Result<Option<ControlSocket>, Error> {
        match socket::accept4(
            self.fd.as_raw_fd(),
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        ) {
            Ok(raw) => {
                // SAFETY: accept4 just returned this descriptor; nothing else owns it.
                let fd = unsafe { OwnedFd::from_raw_fd(raw) };
                Ok(Some(ControlSocket { fd }))
            }
            Err(Errno::EAGAIN) | Err(Errno::EINTR) | Err(Errno::ECONNABORTED) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The process id of the peer of a connected socket (`SO_PEERCRED`: the process that
    /// connected or listened), when the kernel tells it.
    pub fn peer_pid(&self) -> Option<i32> {
        socket::getsockopt(&self.fd, socket::sockopt::PeerCredentials)
            .ok()
            .map(|c| c.pid())
    }

    /// Send one message, optionally with one file descriptor.
    pub fn send(&self, msg: &Msg, fd: Option<BorrowedFd<'_>>) -> Result<(), Error> {
        self.send_raw(&msg.encode(), fd)
    }

    /// Send raw bytes as one packet (tests use it to send malformed messages).
    pub fn send_raw(&self, bytes: &[u8], fd: Option<BorrowedFd<'_>>) -> Result<(), Error> {
        let iov = [IoSlice::new(bytes)];
        let fds: [RawFd; 1] = [fd.map(|f| f.as_raw_fd()).unwrap_or(-1)];
        let cmsg = [ControlMessage::ScmRights(&fds)];
        let cmsgs: &[ControlMessage<'_>] = if fd.is_some() { &cmsg } else { &[] };
        loop {
            match socket::sendmsg::<UnixAddr>(
                self.fd.as_raw_fd(),
                &iov,
                cmsgs,
                MsgFlags::MSG_NOSIGNAL,
                None,
            ) {
                Ok(_) => return Ok(()),
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Receive one packet without blocking.
    pub fn recv(&self) -> Result<Received, Error> {
        // Larger than a message so that an oversized one shows up as such (or as MSG_TRUNC).
        let mut buf = [0u8; 2 * MSG_SIZE];
        let mut cmsg_space = nix::cmsg_space!([RawFd; 8]);
        let (len, truncated, fds) = loop {
            let mut iov = [IoSliceMut::new(&mut buf)];
            match socket::recvmsg::<UnixAddr>(
                self.fd.as_raw_fd(),
                &mut iov,
                Some(&mut cmsg_space),
                MsgFlags::MSG_CMSG_CLOEXEC | MsgFlags::MSG_DONTWAIT,
            ) {
                Ok(r) => {
                    let mut fds: Vec<OwnedFd> = Vec::new();
                    if let Ok(cmsgs) = r.cmsgs() {
                        for c in cmsgs {
                            if let ControlMessageOwned::ScmRights(raw) = c {
                                for fd in raw {
                                    // SAFETY: the kernel installed this descriptor for us in
                                    // this recvmsg; nothing else owns it.
                                    fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
                                }
                            }
                        }
                    }
                    let trunc = r.flags.contains(MsgFlags::MSG_TRUNC);
                    break (r.bytes, trunc, fds);
                }
                Err(Errno::EINTR) => continue,
                Err(Errno::EAGAIN) => return Ok(Received::WouldBlock),
                Err(Errno::ECONNRESET) => return Ok(Received::Closed),
                Err(e) => return Err(e.into()),
            }
        };
        if len == 0 && fds.is_empty() && !truncated {
            return Ok(Received::Closed);
        }
        if truncated {
            return Ok(Received::Invalid(MsgError::BadSize(len.max(buf.len() + 1))));
        }
        // Extra descriptors are dropped (closed) here; only the first is kept.
        let first = fds.into_iter().next();
        match Msg::decode(&buf[..len]) {
            Ok(m) => Ok(Received::Msg(m, first)),
            Err(e) => Ok(Received::Invalid(e)),
        }
    }

    /// Wait until the socket is readable or `timeout_ms` passes (for tests and blocking helpers).
    pub fn wait_readable(&self, timeout_ms: u16) -> Result<bool, Error> {
        use nix::poll::{PollFd, PollFlags, PollTimeout};
        let mut p = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
        match nix::poll::poll(&mut p, PollTimeout::from(timeout_ms)) {
            Ok(n) => Ok(n > 0),
            Err(Errno::EINTR) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

impl AsFd for ControlSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_addresses() {
        assert_eq!(
            SocketAddress::parse("@/tmp/memif/1/memif.socket"),
            SocketAddress::Abstract(b"/tmp/memif/1/memif.socket".to_vec())
        );
        assert_eq!(
            SocketAddress::parse("/run/x.sock"),
            SocketAddress::Path("/run/x.sock".into())
        );
    }

    fn pair(name: &str) -> (ControlSocket, ControlSocket, ControlSocket) {
        let addr = SocketAddress::Abstract(
            format!("quiver-memif-test-{}-{}", std::process::id(), name).into_bytes(),
        );
        let l = ControlSocket::listen(&addr).unwrap();
        let c = ControlSocket::connect(&addr).unwrap();
        l.wait_readable(5000).unwrap();
        let s = l.accept().unwrap().unwrap();
        (l, c, s)
    }

    #[test]
    fn extra_fds_are_closed() {
        let (_l, c, s) = pair("extrafds");
        let (rd, wr) = nix::unistd::pipe().unwrap();
        let efd = nix::sys::eventfd::EventFd::new().unwrap();
        let fds = [efd.as_fd().as_raw_fd(), wr.as_raw_fd(), wr.as_raw_fd()];
        let bytes = Msg::Ack.encode();
        let iov = [IoSlice::new(&bytes)];
        socket::sendmsg::<UnixAddr>(
            c.as_fd().as_raw_fd(),
            &iov,
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::empty(),
            None,
        )
        .unwrap();
        drop(wr);
        s.wait_readable(5000).unwrap();
        match s.recv().unwrap() {
            Received::Msg(Msg::Ack, Some(_first)) => {}
            r => panic!("{r:?}"),
        }
        // Every copy of the pipe's write end is closed: the read end sees EOF.
        let mut b = [0u8; 1];
        assert_eq!(nix::unistd::read(&rd, &mut b).unwrap(), 0);
    }

    #[test]
    fn message_with_fd_and_wrong_sizes() {
        let (_l, c, s) = pair("sock1");
        let efd = nix::sys::eventfd::EventFd::new().unwrap();
        c.send(&Msg::Ack, Some(efd.as_fd())).unwrap();
        s.wait_readable(5000).unwrap();
        match s.recv().unwrap() {
            Received::Msg(Msg::Ack, Some(_fd)) => {}
            r => panic!("{r:?}"),
        }
        c.send_raw(&[1u8; 100], None).unwrap();
        s.wait_readable(5000).unwrap();
        assert!(matches!(
            s.recv().unwrap(),
            Received::Invalid(MsgError::BadSize(100))
        ));
        c.send_raw(&[1u8; 1000], None).unwrap();
        s.wait_readable(5000).unwrap();
        assert!(matches!(
            s.recv().unwrap(),
            Received::Invalid(MsgError::BadSize(_))
        ));
        assert!(matches!(s.recv().unwrap(), Received::WouldBlock));
        drop(c);
        s.wait_readable(5000).unwrap();
        assert!(matches!(s.recv().unwrap(), Received::Closed));
    }
}
