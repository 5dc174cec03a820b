//! A small synchronous route-netlink client: one request at a time, acknowledged, or one dump.
//! Messages are built and parsed by `netlink-packet-route`; the socket is ours (nix), so it can
//! be created inside another network namespace ([`Rtnl::open_in`]) and then used from any
//! thread — a netlink socket acts on the namespace it was created in.

use std::os::fd::{AsRawFd, OwnedFd};

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_route::RouteNetlinkMessage;
use nix::errno::Errno;
use nix::sys::socket::{
    bind, recv, socket, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType,
};

use crate::netns::{NetNs, NetNsError};

/// What a route-netlink message carries.
type Payload = NetlinkPayload<RouteNetlinkMessage>;

/// A route-netlink socket in one namespace.
pub(crate) struct Rtnl {
    fd: OwnedFd,
    seq: u32,
    buf: Vec<u8>,
}

impl Rtnl {
    /// A socket in the calling thread's namespace.
    pub(crate) fn open() -> Result<Rtnl, Errno> {
        Rtnl::open_with_groups(0)
    }

    /// A socket bound to the multicast `groups` (a bit mask; 0: none).
    fn open_with_groups(groups: u32) -> Result<Rtnl, Errno> {
        let fd = socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::NetlinkRoute,
        )?;
        bind(fd.as_raw_fd(), &NetlinkAddr::new(0, groups))?;
        // The kernel answers at once; a bound on the wait keeps a lost answer from hanging the
        // caller (it gets EAGAIN).
        nix::sys::socket::setsockopt(
            &fd,
            nix::sys::socket::sockopt::ReceiveTimeout,
            &nix::sys::time::TimeVal::new(5, 0),
        )?;
        Ok(Rtnl {
            fd,
            seq: 0,
            // Dumps come in datagrams of up to 32 KiB; more room costs nothing.
            buf: vec![0; 64 * 1024],
        })
    }

    /// A socket in the calling thread's namespace that receives the kernel's notifications of
    /// the multicast `groups` (a bit mask, `RTMGRP_*`); [`Rtnl::notifications`] waits at most
    /// `wait` for them.
    pub(crate) fn subscribe(groups: u32, wait: std::time::Duration) -> Result<Rtnl, Errno> {
        let mut rtnl = Rtnl::open_with_groups(groups)?;
        let wait =
            nix::sys::time::TimeVal::new(wait.as_secs() as i64, i64::from(wait.subsec_micros()));
        nix::sys::socket::setsockopt(&rtnl.fd, nix::sys::socket::sockopt::ReceiveTimeout, &wait)?;
        // A burst of changes (a whole neighbour table flushed) must not overflow the queue.
        let _ = nix::sys::socket::setsockopt(
            &rtnl.fd,
            nix::sys::socket::sockopt::RcvBufForce,
            &(4 << 20),
        );
        rtnl.buf.resize(256 * 1024, 0);
        Ok(rtnl)
    }

    /// The notifications of one datagram (empty when none came in the socket's wait).
    /// `ENOBUFS` says some were lost: the caller dumps the table again.
    pub(crate) fn notifications(&mut self) -> Result<Vec<RouteNetlinkMessage>, Errno> {
        let n = match recv(self.fd.as_raw_fd(), &mut self.buf, MsgFlags::empty()) {
            Ok(n) => n,
            Err(Errno::EINTR | Errno::EAGAIN) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        let mut off = 0;
        while off + 16 <= n {
            let raw = &self.buf[off..n];
            let len = u32::from_ne_bytes([raw[0], raw[1], raw[2], raw[3]]) as usize;
            if len < 16 || len > raw.len() {
                return Err(Errno::EBADMSG);
            }
            off += (len + 3) & !3;
            if let Ok(NetlinkMessage {
                payload: NetlinkPayload::InnerMessage(m),
                ..
            }) = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&raw[..len])
            {
                out.push(m);
            }
        }
        Ok(out)
    }

    /// A socket in `ns` (made on a thread inside it, used from here).
    pub(crate) fn open_in(ns: &NetNs) -> Result<Result<Rtnl, Errno>, NetNsError> {
        ns.run(Rtnl::open)
    }

    fn send(&mut self, message: RouteNetlinkMessage, flags: u16) -> Result<u32, Errno> {
        self.seq = self.seq.wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | flags;
        header.sequence_number = self.seq;
        let mut msg = NetlinkMessage::new(header, NetlinkPayload::from(message));
        msg.finalize();
        let mut bytes = vec![0; msg.buffer_len()];
        msg.serialize(&mut bytes);
        let to = NetlinkAddr::new(0, 0);
        loop {
            match nix::sys::socket::sendto(self.fd.as_raw_fd(), &bytes, &to, MsgFlags::empty()) {
                Ok(_) => return Ok(self.seq),
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Receives datagrams and hands each message with our sequence number to `each` (`None`:
    /// one this crate cannot parse, say an attribute of a newer kernel), until `each` says it
    /// has seen the last one (returns `Some`).
    fn receive<T>(
        &mut self,
        seq: u32,
        mut each: impl FnMut(Option<Payload>) -> Option<Result<T, Errno>>,
    ) -> Result<T, Errno> {
        loop {
            let n = match recv(self.fd.as_raw_fd(), &mut self.buf, MsgFlags::empty()) {
                Ok(n) => n,
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e),
            };
            let mut off = 0;
            while off + 16 <= n {
                let raw = &self.buf[off..n];
                let len = u32::from_ne_bytes([raw[0], raw[1], raw[2], raw[3]]) as usize;
                let their_seq = u32::from_ne_bytes([raw[8], raw[9], raw[10], raw[11]]);
                if len < 16 || len > raw.len() {
                    return Err(Errno::EBADMSG);
                }
                off += (len + 3) & !3;
                if their_seq != seq {
                    continue; // an answer to an earlier request we gave up on
                }
                let payload = match NetlinkMessage::<RouteNetlinkMessage>::deserialize(&raw[..len])
                {
                    Ok(m) => Some(m.payload),
                    Err(e) => {
                        tracing::debug!("netlink: a message that does not parse: {e}");
                        None
                    }
                };
                if let Some(done) = each(payload) {
                    return done;
                }
            }
        }
    }

    /// Sends `message` with `flags` (beyond REQUEST and ACK) and waits for the kernel's answer.
    pub(crate) fn request(
        &mut self,
        message: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<(), Errno> {
        let seq = self.send(message, flags | NLM_F_ACK)?;
        self.receive(seq, |payload| match payload {
            Some(NetlinkPayload::Error(e)) => Some(match e.code {
                None => Ok(()),
                Some(code) => Err(Errno::from_raw(-code.get())),
            }),
            Some(_) => None,
            None => Some(Err(Errno::EBADMSG)),
        })
    }

    /// Sends a request for one object (a link by name, say) and returns the answer (`None`
    /// if the kernel only acknowledged).
    pub(crate) fn get(
        &mut self,
        message: RouteNetlinkMessage,
    ) -> Result<Option<RouteNetlinkMessage>, Errno> {
        let seq = self.send(message, 0)?;
        self.receive(seq, |payload| match payload {
            Some(NetlinkPayload::InnerMessage(m)) => Some(Ok(Some(m))),
            Some(NetlinkPayload::Error(e)) => Some(match e.code {
                None => Ok(None),
                Some(code) => Err(Errno::from_raw(-code.get())),
            }),
            Some(_) => None,
            None => Some(Err(Errno::EBADMSG)),
        })
    }

    /// Sends a dump request and collects every answer.
    pub(crate) fn dump(
        &mut self,
        message: RouteNetlinkMessage,
    ) -> Result<Vec<RouteNetlinkMessage>, Errno> {
        let seq = self.send(message, NLM_F_DUMP)?;
        let mut out = Vec::new();
        self.receive(seq, |payload| match payload {
            Some(NetlinkPayload::InnerMessage(m)) => {
                out.push(m);
                None
            }
            Some(NetlinkPayload::Done(_)) => Some(Ok(())),
            Some(NetlinkPayload::Error(e)) => Some(match e.code {
                None => Ok(()),
                Some(code) => Err(Errno::from_raw(-code.get())),
            }),
            // An entry this crate cannot parse is left out of the dump.
            Some(_) | None => None,
        })?;
        Ok(out)
    }
}
