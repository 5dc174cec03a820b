//! The master (server) side: one listening socket serving many interfaces by id.

use std::os::fd::OwnedFd;

use crate::handshake::HandshakeError;
use crate::interface::{Connection, Interface, InterfaceConfig};
use crate::msg::{
    self, AddRegion, AddRing, FixedStr, Hello, Init, Mode, Msg, NAME_LEN, SECRET_LEN, VERSION,
};
use crate::queue::Queue;
use crate::region::Region;
use crate::ring::{Ring, Role, COOKIE, MAX_LOG2_RING_SIZE};
use crate::socket::{ControlSocket, SocketAddress};
use crate::Error;

/// Master-wide limits advertised in HELLO.
#[derive(Debug, Clone)]
pub struct MasterConfig {
    /// Name sent in HELLO.
    pub name: String,
    /// Largest region index accepted.
    pub max_region: u16,
    /// Largest ring index accepted per direction.
    pub max_ring: u16,
    /// Largest log2 ring size accepted (≤ 14).
    pub max_log2_ring_size: u8,
    /// Refuse region memfds that are not sealed against shrinking (DPDK and libmemif seal
    /// theirs); an unsealed one could be truncated under our mapping and raise SIGBUS.
    pub require_sealed_regions: bool,
}

impl Default for MasterConfig {
    fn default() -> Self {
        MasterConfig {
            name: "quiver".into(),
            max_region: 255,
            max_ring: 255,
            max_log2_ring_size: MAX_LOG2_RING_SIZE,
            require_sealed_regions: true,
        }
    }
}

/// Messages handled per connection per [`Master::poll`] (bounds the work a flooding peer causes).
const MSGS_PER_POLL: usize = 16;
/// Connections accepted per [`Master::poll`].
const ACCEPTS_PER_POLL: usize = 16;

#[derive(Debug)]
struct PendingRing {
    ring: Ring,
    region: usize,
    eventfd: OwnedFd,
}

#[derive(Debug)]
struct Conn {
    sock: ControlSocket,
    /// Index into `Master::interfaces` once INIT was accepted.
    iface: Option<usize>,
    regions: Vec<Region>,
    s2m: Vec<PendingRing>,
    m2s: Vec<PendingRing>,
    connected: bool,
}

/// A memif master: listens on one control socket and serves the interfaces added to it.
#[derive(Debug)]
pub struct Master {
    listener: ControlSocket,
    addr: SocketAddress,
    config: MasterConfig,
    interfaces: Vec<Interface>,
    /// For each interface, whether a connection is bound to it.
    bound: Vec<bool>,
    conns: Vec<Conn>,
}

impl Master {
    /// Listen on `addr` (a leading `@` in [`SocketAddress::parse`] means abstract).
    pub fn bind(addr: SocketAddress, config: MasterConfig) -> Result<Master, Error> {
        let listener = ControlSocket::listen(&addr)?;
        Ok(Master::from_listener(listener, addr, config))
    }

    /// Serve on `listener`, a socket already bound and listening on `addr` (by
    /// [`ControlSocket::listen`]) — for example one made inside another network namespace,
    /// where an abstract name lives: a socket stays in the namespace it was created in.
    pub fn from_listener(
        listener: ControlSocket,
        addr: SocketAddress,
        config: MasterConfig,
    ) -> Master {
        Master {
            listener,
            addr,
            config,
            interfaces: Vec::new(),
            bound: Vec::new(),
            conns: Vec::new(),
        }
    }

    /// The address listened on.
    pub fn address(&self) -> &SocketAddress {
        &self.addr
    }

    /// Add an interface served on this socket. Ids must be unique.
    pub fn add_interface(&mut self, config: InterfaceConfig) -> Result<(), Error> {
        if self.interfaces.iter().any(|i| i.id() == config.id) {
            return Err(Error::Config(format!(
                "duplicate interface id {}",
                config.id
            )));
        }
        if config
            .secret
            .as_ref()
            .is_some_and(|s| s.len() >= SECRET_LEN)
        {
            return Err(Error::Config("secret longer than 23 bytes".into()));
        }
        if config.buffer_size == 0 {
            return Err(Error::Config("zero buffer size".into()));
        }
        self.interfaces.push(Interface::new(config, Role::Master));
        self.bound.push(false);
        Ok(())
    }

    /// Remove interface `id` (disconnecting it first, with `reason`, if connected). Returns
    /// whether it existed.
    pub fn remove_interface(&mut self, id: u32, reason: &str) -> bool {
        let Some(k) = self.interfaces.iter().position(|i| i.id() == id) else {
            return false;
        };
        self.disconnect(id, reason);
        self.interfaces.remove(k);
        self.bound.remove(k);
        // Connections still handshaking refer to interfaces by position.
        for c in &mut self.conns {
            match c.iface {
                Some(i) if i > k => c.iface = Some(i - 1),
                _ => {}
            }
        }
        true
    }

    /// Whether no interface is served (the socket may be closed).
    pub fn is_empty(&self) -> bool {
        self.interfaces.is_empty()
    }

    /// The interface with `id`.
    pub fn interface(&self, id: u32) -> Option<&Interface> {
        self.interfaces.iter().find(|i| i.id() == id)
    }

    /// The interface with `id`, for the data path.
    pub fn interface_mut(&mut self, id: u32) -> Option<&mut Interface> {
        self.interfaces.iter_mut().find(|i| i.id() == id)
    }

    /// All interfaces.
    pub fn interfaces(&self) -> &[Interface] {
        &self.interfaces
    }

    /// The control sockets to poll(2) for readability (the listener first), for event loops that
    /// want to call [`Master::poll`] only when something happened.
    pub fn control_fds(&self) -> Vec<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        let mut v = vec![self.listener.as_fd()];
        v.extend(self.conns.iter().map(|c| c.sock.as_fd()));
        v
    }

    /// Disconnect interface `id` (sending DISCONNECT with `reason` if connected).
    pub fn disconnect(&mut self, id: u32, reason: &str) {
        if let Some(k) = self.interfaces.iter().position(|i| i.id() == id) {
            if let Some(ci) = self.conns.iter().position(|c| c.iface == Some(k)) {
                self.drop_conn(ci, reason.to_string(), true);
            }
        }
    }

    /// Do all pending control work without blocking: accept connections, advance handshakes,
    /// notice disconnects. Errors on one connection only affect that connection.
    pub fn poll(&mut self) -> Result<(), Error> {
        self.poll_with(|_| {})
    }

    /// [`Master::poll`], calling `on_up` with each interface that comes up, after its queues
    /// exist and before the slave is told CONNECTED. An application that hands queues to other
    /// threads does it there: the slave may transmit, and expects its frames to be taken, as
    /// soon as it reads CONNECTED.
    pub fn poll_with(&mut self, mut on_up: impl FnMut(&mut Interface)) -> Result<(), Error> {
        for _ in 0..ACCEPTS_PER_POLL {
            let Some(sock) = self.listener.accept()? else {
                break;
            };
            let max_ring = self.hello_max_ring();
            let hello = Msg::Hello(Hello {
                name: FixedStr::new(&self.config.name),
                min_version: VERSION,
                max_version: VERSION,
                max_region: self.config.max_region,
                max_m2s_ring: max_ring,
                max_s2m_ring: max_ring,
                max_log2_ring_size: self.config.max_log2_ring_size.min(MAX_LOG2_RING_SIZE),
            });
            if sock.send(&hello, None).is_ok() {
                self.conns.push(Conn {
                    sock,
                    iface: None,
                    regions: Vec::new(),
                    s2m: Vec::new(),
                    m2s: Vec::new(),
                    connected: false,
                });
            }
        }
        let mut ci = 0;
        while ci < self.conns.len() {
            let mut dropped = false;
            for _ in 0..MSGS_PER_POLL {
                let r = match self.conns[ci].sock.recv() {
                    Ok(r) => r,
                    Err(e) => {
                        self.drop_conn(ci, format!("control socket error: {e}"), false);
                        dropped = true;
                        break;
                    }
                };
                let outcome = match r.into_message() {
                    Ok(None) => break,
                    Ok(Some((m, fd))) => {
                        let init_id = match &m {
                            Msg::Init(init) => Some(init.id),
                            _ => None,
                        };
                        self.handle(ci, m, fd, &mut on_up).map_err(|e| {
                            self.note_refusal(ci, init_id, &e);
                            (e.to_string(), true)
                        })
                    }
                    Err(ending) => Err(ending),
                };
                if let Err((reason, tell)) = outcome {
                    self.drop_conn(ci, reason, tell);
                    dropped = true;
                    break;
                }
            }
            if !dropped {
                ci += 1;
            }
        }
        Ok(())
    }

    /// The largest ring index HELLO offers: the socket's limit, or less when no interface on
    /// it takes that many queues (HELLO comes before INIT names the interface, so it is the
    /// largest of theirs; ADD_RING then holds each slave to its own interface's).
    fn hello_max_ring(&self) -> u16 {
        let most = self
            .interfaces
            .iter()
            .map(|i| i.config.queue_pairs.max(1) - 1)
            .max()
            .unwrap_or(self.config.max_ring);
        most.min(self.config.max_ring)
    }

    /// Records on the interface concerned (the one connection `ci` is bound to, or the one its
    /// INIT named) that the handshake refused the peer for `e`; logs it at INFO when it is
    /// news (another reason or another peer than last time), at DEBUG otherwise, so a peer
    /// retrying every few seconds does not fill the log.
    fn note_refusal(&mut self, ci: usize, init_id: Option<u32>, e: &HandshakeError) {
        let conn = &self.conns[ci];
        let k = conn
            .iface
            .or_else(|| init_id.and_then(|id| self.interfaces.iter().position(|i| i.id() == id)));
        let peer_pid = conn.sock.peer_pid();
        let Some(iface) = k.and_then(|k| self.interfaces.get_mut(k)) else {
            tracing::info!(socket = %self.addr, id = init_id, peer_pid, reason = %e,
                "memif master: refused a peer");
            return;
        };
        let refusal = crate::Refusal {
            kind: e.refusal_kind(),
            reason: e.to_string(),
            peer_pid,
            at: std::time::SystemTime::now(),
        };
        let id = iface.id();
        if iface.refuse(refusal) {
            tracing::info!(socket = %self.addr, id, peer_pid, reason = %e,
                "memif master: refused a peer");
        } else {
            tracing::debug!(socket = %self.addr, id, peer_pid, reason = %e,
                "memif master: refused a peer again");
        }
    }

    fn drop_conn(&mut self, ci: usize, reason: String, tell_peer: bool) {
        let conn = self.conns.remove(ci);
        tracing::debug!(%reason, "memif master: closing control connection");
        if tell_peer {
            let _ = conn.sock.send(&Msg::disconnect(1, &reason), None);
        }
        if let Some(k) = conn.iface {
            self.bound[k] = false;
            self.interfaces[k].set_down(reason);
        }
    }

    /// One message on control connection `ci` during the handshake: INIT, then ADD_REGION and
    /// ADD_RING, then CONNECT, each checked and acknowledged.
    fn handle(
        &mut self,
        ci: usize,
        m: Msg,
        fd: Option<OwnedFd>,
        on_up: &mut impl FnMut(&mut Interface),
    ) -> Result<(), HandshakeError> {
        let conn = &self.conns[ci];
        if conn.connected {
            return Err(HandshakeError::AfterConnect(m.msg_type()));
        }
        match (conn.iface, m) {
            (None, Msg::Init(init)) => self.on_init(ci, &init),
            (None, other) => Err(HandshakeError::ExpectedInit(other.msg_type())),
            (Some(_), Msg::AddRegion(ar)) => self.on_add_region(ci, &ar, fd),
            (Some(_), Msg::AddRing(ar)) => self.on_add_ring(ci, &ar, fd),
            (Some(k), Msg::Connect(name)) => self.on_connect(ci, k, &name, on_up),
            (Some(_), other) => Err(HandshakeError::Unexpected(other.msg_type())),
        }
    }

    /// INIT: binds connection `ci` to the interface it names, when the version, role, mode
    /// and secret agree and the interface is free.
    fn on_init(&mut self, ci: usize, init: &Init) -> Result<(), HandshakeError> {
        if init.version != VERSION {
            return Err(HandshakeError::Version(init.version));
        }
        let Some(k) = self.interfaces.iter().position(|i| i.id() == init.id) else {
            return Err(HandshakeError::UnknownInterface(init.id));
        };
        let iface = &self.interfaces[k];
        if iface.role() != Role::Master {
            return Err(HandshakeError::NotMaster);
        }
        if self.bound[k] {
            return Err(HandshakeError::AlreadyConnected);
        }
        if Mode::from_wire(init.mode) != Some(iface.config.mode) {
            return Err(HandshakeError::ModeMismatch);
        }
        if let Some(secret) = &iface.config.secret {
            if init.secret.as_bytes().is_empty() {
                return Err(HandshakeError::SecretRequired);
            }
            if !msg::secret_eq(&FixedStr::new(secret), &init.secret) {
                return Err(HandshakeError::IncorrectSecret);
            }
        }
        self.bound[k] = true;
        self.conns[ci].iface = Some(k);
        self.ack(ci)
    }

    /// ADD_REGION: maps the slave's next region (checked with fstat first).
    fn on_add_region(
        &mut self,
        ci: usize,
        ar: &AddRegion,
        fd: Option<OwnedFd>,
    ) -> Result<(), HandshakeError> {
        let conn = &mut self.conns[ci];
        let Some(fd) = fd else {
            return Err(HandshakeError::MissingRegionFd);
        };
        if usize::from(ar.index) != conn.regions.len() {
            return Err(HandshakeError::RegionIndex(ar.index));
        }
        if ar.index > self.config.max_region {
            return Err(HandshakeError::RegionIndexTooLarge(ar.index));
        }
        let region = if self.config.require_sealed_regions {
            Region::from_peer_sealed(fd, ar.size)
        } else {
            Region::from_peer(fd, ar.size)
        }
        .map_err(HandshakeError::Region)?;
        conn.regions.push(region);
        self.ack(ci)
    }

    /// ADD_RING: records the slave's next ring of one direction, inside a region it added.
    fn on_add_ring(
        &mut self,
        ci: usize,
        ar: &AddRing,
        fd: Option<OwnedFd>,
    ) -> Result<(), HandshakeError> {
        let conn = &mut self.conns[ci];
        let Some(eventfd) = fd else {
            return Err(HandshakeError::MissingRingEventfd);
        };
        let s2m = ar.flags & msg::RING_FLAG_S2M != 0;
        let list_len = if s2m { conn.s2m.len() } else { conn.m2s.len() };
        if usize::from(ar.index) != list_len {
            return Err(HandshakeError::RingIndex(ar.index));
        }
        if ar.index > self.config.max_ring {
            return Err(HandshakeError::RingIndexTooLarge(ar.index));
        }
        let queues = conn
            .iface
            .and_then(|k| self.interfaces.get(k))
            .map_or(u16::MAX, |i| i.config.queue_pairs);
        if ar.index >= queues {
            return Err(HandshakeError::TooManyQueues {
                index: ar.index,
                queues,
            });
        }
        if ar.private_hdr_size != 0 {
            return Err(HandshakeError::PrivateHeader);
        }
        if ar.log2_ring_size > self.config.max_log2_ring_size.min(MAX_LOG2_RING_SIZE) {
            return Err(HandshakeError::RingSizeTooLarge(ar.log2_ring_size));
        }
        let Some(region) = conn.regions.get(usize::from(ar.region)) else {
            return Err(HandshakeError::UnknownRegion(ar.region));
        };
        let Some(ring) = Ring::new(region, u64::from(ar.offset), ar.log2_ring_size) else {
            return Err(HandshakeError::RingOutsideRegion);
        };
        let pr = PendingRing {
            ring,
            region: usize::from(ar.region),
            eventfd,
        };
        if s2m {
            conn.s2m.push(pr);
        } else {
            conn.m2s.push(pr);
        }
        self.ack(ci)
    }

    /// CONNECT: checks every ring's cookie, brings interface `k` up with the connection (the
    /// application sees it in `on_up` before the slave is told CONNECTED).
    fn on_connect(
        &mut self,
        ci: usize,
        k: usize,
        name: &FixedStr<NAME_LEN>,
        on_up: &mut impl FnMut(&mut Interface),
    ) -> Result<(), HandshakeError> {
        let conn = &mut self.conns[ci];
        if conn.s2m.is_empty() || conn.m2s.is_empty() {
            return Err(HandshakeError::NoRings);
        }
        for pr in conn.s2m.iter().chain(conn.m2s.iter()) {
            let region = &conn.regions[pr.region];
            if pr.ring.at(region).cookie() != COOKIE {
                return Err(HandshakeError::BadCookie);
            }
        }
        let to_queue = |pr: PendingRing| Queue {
            ring: pr.ring,
            region: pr.region,
            eventfd: pr.eventfd,
            idx: 0,
            posted: 0,
            buf_base: 0,
        };
        let c = Connection::new(
            conn.s2m.drain(..).map(to_queue).collect(),
            conn.m2s.drain(..).map(to_queue).collect(),
            std::mem::take(&mut conn.regions),
            self.interfaces[k].config.buffer_size,
        );
        conn.connected = true;
        let iface = &mut self.interfaces[k];
        iface.set_up(c, name.to_string_lossy());
        on_up(iface);
        let ours = FixedStr::new(&iface.config.name);
        conn.sock
            .send(&Msg::Connected(ours), None)
            .map_err(|source| HandshakeError::SendReply {
                what: "CONNECTED",
                source,
            })
    }

    /// Acknowledges the last message on connection `ci`.
    fn ack(&self, ci: usize) -> Result<(), HandshakeError> {
        self.conns[ci]
            .sock
            .send(&Msg::Ack, None)
            .map_err(|source| HandshakeError::SendReply {
                what: "ACK",
                source,
            })
    }
}

impl Drop for Master {
    fn drop(&mut self) {
        for c in &self.conns {
            let _ = c
                .sock
                .send(&Msg::disconnect(0, "master shutting down"), None);
        }
        if let SocketAddress::Path(p) = &self.addr {
            let _ = std::fs::remove_file(p);
        }
    }
}
