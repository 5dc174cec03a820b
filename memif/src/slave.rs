//! The slave (client) side: connects to a master, owns the shared memory, reconnects when the
//! master comes back.

use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::sys::eventfd::{EfdFlags, EventFd};

use crate::handshake::HandshakeError;
use crate::interface::{Connection, Interface, InterfaceConfig};
use crate::msg::{self, AddRegion, AddRing, FixedStr, Hello, Init, Msg, SECRET_LEN, VERSION};
use crate::queue::Queue;
use crate::region::{Region, MAX_REGION_SIZE};
use crate::ring::{ring_stride, Desc, Ring, Role, MAX_LOG2_RING_SIZE};
use crate::socket::{ControlSocket, SocketAddress};
use crate::Error;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Disconnected,
    AwaitHello,
    AwaitAck,
    AwaitConnected,
    Connected,
}

/// Which fd goes with a queued handshake message.
#[derive(Debug, Clone, Copy)]
enum FdRef {
    None,
    Region(usize),
    Rx(usize),
    Tx(usize),
}

/// How a slave opens its control connection (see [`Slave::set_connector`]).
pub type ConnectFn = dyn FnMut(&SocketAddress) -> Result<ControlSocket, Error> + Send + Sync;

/// The slave's connector: [`ControlSocket::connect`] unless replaced.
struct Connector(Option<Box<ConnectFn>>);

impl Connector {
    fn connect(&mut self, addr: &SocketAddress) -> Result<ControlSocket, Error> {
        match &mut self.0 {
            Some(f) => f(addr),
            None => ControlSocket::connect(addr),
        }
    }
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "custom"
        } else {
            "default"
        })
    }
}

/// A memif slave interface.
#[derive(Debug)]
pub struct Slave {
    addr: SocketAddress,
    connector: Connector,
    iface: Interface,
    state: State,
    sock: Option<ControlSocket>,
    building: Option<Connection>,
    outbox: VecDeque<(Msg, FdRef)>,
    retry_at: Instant,
    /// Delay between reconnection attempts.
    pub retry_interval: Duration,
}

impl Slave {
    /// Create a slave for `config` that connects to the master at `addr` (on the first
    /// [`Slave::poll`]).
    pub fn new(addr: SocketAddress, config: InterfaceConfig) -> Result<Slave, Error> {
        if config.log2_ring_size > MAX_LOG2_RING_SIZE {
            return Err(Error::Config("log2 ring size above 14".into()));
        }
        if config.queue_pairs == 0 || config.queue_pairs > 256 {
            return Err(Error::Config("queue pairs must be 1..=256".into()));
        }
        if config.buffer_size == 0 {
            return Err(Error::Config("zero buffer size".into()));
        }
        if config
            .secret
            .as_ref()
            .is_some_and(|s| s.len() >= SECRET_LEN)
        {
            return Err(Error::Config("secret longer than 23 bytes".into()));
        }
        Ok(Slave {
            addr,
            connector: Connector(None),
            iface: Interface::new(config, Role::Slave),
            state: State::Disconnected,
            sock: None,
            building: None,
            outbox: VecDeque::new(),
            retry_at: Instant::now(),
            retry_interval: Duration::from_millis(100),
        })
    }

    /// Replace how the control connection is opened (on every connect and reconnect) — for
    /// example with one that connects from inside another network namespace, where the
    /// master's abstract socket lives.
    pub fn set_connector(&mut self, connect: Box<ConnectFn>) {
        self.connector = Connector(Some(connect));
    }

    /// The interface (link state, counters).
    pub fn interface(&self) -> &Interface {
        &self.iface
    }

    /// The interface, for the data path.
    pub fn interface_mut(&mut self) -> &mut Interface {
        &mut self.iface
    }

    /// The control socket, when one is open (poll(2) it for readability, then call
    /// [`Slave::poll`]).
    pub fn control_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.sock.as_ref().map(|s| s.as_fd())
    }

    /// Do pending control work without blocking: (re)connect when due, advance the handshake,
    /// notice a disconnect.
    pub fn poll(&mut self) -> Result<(), Error> {
        if self.sock.is_none() {
            if Instant::now() < self.retry_at {
                return Ok(());
            }
            match self.connector.connect(&self.addr) {
                Ok(s) => {
                    self.sock = Some(s);
                    self.state = State::AwaitHello;
                }
                Err(e) => {
                    self.retry_at = Instant::now() + self.retry_interval;
                    if !self.iface.is_up() {
                        // Keep the last disconnect reason visible unless it was never connected.
                        if self.iface.counters().connects == 0 {
                            self.iface
                                .set_down(format!("connect to {}: {e}", self.addr));
                        }
                    }
                    return Ok(());
                }
            }
        }
        for _ in 0..16 {
            let Some(sock) = self.sock.as_ref() else {
                break;
            };
            let r = match sock.recv() {
                Ok(r) => r,
                Err(e) => {
                    self.teardown(format!("control socket error: {e}"), false);
                    break;
                }
            };
            let res = match r.into_message() {
                Ok(None) => break,
                Ok(Some((m, fd))) => {
                    drop(fd);
                    self.handle(m).map_err(|e| (e.to_string(), true))
                }
                Err(ending) => Err(ending),
            };
            if let Err((reason, tell)) = res {
                self.teardown(reason, tell);
                break;
            }
        }
        Ok(())
    }

    /// Disconnect (sending DISCONNECT with `reason`); the next [`Slave::poll`] after the retry
    /// interval reconnects.
    pub fn disconnect(&mut self, reason: &str) {
        self.teardown(reason.to_string(), true);
    }

    fn teardown(&mut self, reason: String, tell_peer: bool) {
        if let Some(s) = self.sock.take() {
            if tell_peer {
                let _ = s.send(&Msg::disconnect(1, &reason), None);
            }
        }
        self.building = None;
        self.outbox.clear();
        self.state = State::Disconnected;
        self.retry_at = Instant::now() + self.retry_interval;
        self.iface.set_down(reason);
    }

    fn handle(&mut self, m: Msg) -> Result<(), HandshakeError> {
        match (self.state, m) {
            (State::AwaitHello, Msg::Hello(h)) => {
                if h.min_version > VERSION || h.max_version < VERSION {
                    return Err(HandshakeError::VersionRange {
                        min: h.min_version,
                        max: h.max_version,
                    });
                }
                self.build(&h)?;
                self.state = State::AwaitAck;
                self.send_next()
            }
            (State::AwaitAck, Msg::Ack) => self.send_next(),
            (State::AwaitConnected, Msg::Connected(name)) => {
                let Some(c) = self.building.take() else {
                    return Err(HandshakeError::Internal("no connection"));
                };
                self.state = State::Connected;
                self.iface.set_up(c, name.to_string_lossy());
                Ok(())
            }
            (_, other) => Err(HandshakeError::Unexpected(other.msg_type())),
        }
    }

    fn send_next(&mut self) -> Result<(), HandshakeError> {
        let Some((m, fdref)) = self.outbox.pop_front() else {
            return Err(HandshakeError::Internal("handshake underflow"));
        };
        let (Some(sock), Some(c)) = (self.sock.as_ref(), self.building.as_ref()) else {
            return Err(HandshakeError::Internal("no socket"));
        };
        let fd = match fdref {
            FdRef::None => None,
            FdRef::Region(i) => c.shared.regions.get(i).map(|r| r.fd()),
            FdRef::Rx(i) => c.rx.get(i).map(|q| q.eventfd.as_fd()),
            FdRef::Tx(i) => c.tx.get(i).map(|q| q.eventfd.as_fd()),
        };
        sock.send(&m, fd).map_err(HandshakeError::Send)?;
        if matches!(m, Msg::Connect(_)) {
            self.state = State::AwaitConnected;
        }
        Ok(())
    }

    /// Create region 0 (rings, then buffers), the eventfds and the handshake messages.
    fn build(&mut self, h: &Hello) -> Result<(), HandshakeError> {
        let cfg = &self.iface.config;
        let n_s2m = usize::from(cfg.queue_pairs).min(usize::from(h.max_s2m_ring) + 1);
        let n_m2s = usize::from(cfg.queue_pairs).min(usize::from(h.max_m2s_ring) + 1);
        let log2 = cfg.log2_ring_size.min(h.max_log2_ring_size);
        let n = 1u64 << log2;
        let stride = ring_stride(log2);
        let nrings = (n_s2m + n_m2s) as u64;
        let bsize = u64::from(cfg.buffer_size);
        let rings_size = nrings * stride;
        let size = rings_size + nrings * n * bsize;
        let size = size.div_ceil(4096) * 4096;
        if size > MAX_REGION_SIZE || size > u64::from(u32::MAX) {
            return Err(HandshakeError::RegionTooLarge);
        }
        let region = Region::create(&format!("memif{}", cfg.id), size as usize)
            .map_err(HandshakeError::CreateRegion)?;
        let mut tx = Vec::new();
        let mut rx = Vec::new();
        for g in 0..(n_s2m + n_m2s) {
            let off = g as u64 * stride;
            let Some(ring) = Ring::new(&region, off, log2) else {
                return Err(HandshakeError::Internal("ring layout"));
            };
            let eventfd: OwnedFd =
                EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
                    .map_err(HandshakeError::Eventfd)?
                    .into();
            let buf_base = rings_size + g as u64 * n * bsize;
            let r = ring.at(&region);
            r.init();
            // Every descriptor names its buffer from the start, as libmemif and DPDK set them
            // up: a master learns the buffer size from them before anything is posted.
            for slot in 0..n {
                r.write_desc(
                    slot as u16,
                    Desc {
                        length: cfg.buffer_size,
                        offset: (buf_base + slot * bsize) as u32,
                        ..Desc::default()
                    },
                );
            }
            let q = Queue {
                ring,
                region: 0,
                eventfd,
                idx: 0,
                posted: 0,
                buf_base,
            };
            // M2S buffers are posted once CONNECTED arrives (see `Interface::set_up`).
            if g < n_s2m {
                tx.push(q);
            } else {
                rx.push(q);
            }
        }
        let mut out = VecDeque::new();
        out.push_back((
            Msg::Init(Init {
                version: VERSION,
                id: cfg.id,
                mode: cfg.mode.to_wire(),
                secret: FixedStr::new(cfg.secret.as_deref().unwrap_or("")),
                name: FixedStr::new(&cfg.name),
            }),
            FdRef::None,
        ));
        out.push_back((
            Msg::AddRegion(AddRegion { index: 0, size }),
            FdRef::Region(0),
        ));
        for (i, q) in tx.iter().enumerate() {
            out.push_back((
                Msg::AddRing(AddRing {
                    flags: msg::RING_FLAG_S2M,
                    index: i as u16,
                    region: 0,
                    offset: q.ring.offset() as u32,
                    log2_ring_size: log2,
                    private_hdr_size: 0,
                }),
                FdRef::Tx(i),
            ));
        }
        for (i, q) in rx.iter().enumerate() {
            out.push_back((
                Msg::AddRing(AddRing {
                    flags: 0,
                    index: i as u16,
                    region: 0,
                    offset: q.ring.offset() as u32,
                    log2_ring_size: log2,
                    private_hdr_size: 0,
                }),
                FdRef::Rx(i),
            ));
        }
        out.push_back((Msg::Connect(FixedStr::new(&cfg.name)), FdRef::None));
        self.building = Some(Connection::new(rx, tx, vec![region], cfg.buffer_size));
        self.outbox = out;
        Ok(())
    }
}

impl Drop for Slave {
    fn drop(&mut self) {
        if let Some(s) = self.sock.as_ref() {
            let _ = s.send(&Msg::disconnect(0, "slave shutting down"), None);
        }
    }
}
