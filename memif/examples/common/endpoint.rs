//! What both examples need around the memif crate: one interface in either role behind one type,
//! link-change reporting, SIGINT/SIGTERM as a pollable fd, and argument parsers.

// Shared by both examples through `#[path]`; each uses most, not all, of it.
#![allow(dead_code)]

use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

use memif::{Interface, InterfaceConfig, Master, MasterConfig, Slave, SocketAddress};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

/// Which end of a memif connection to play.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RoleArg {
    /// Listen on the socket (DPDK: server).
    Master,
    /// Connect to the socket (DPDK: client); reconnects when the master goes away.
    Slave,
}

/// Delay between a slave's connection attempts.
const RETRY: Duration = Duration::from_millis(20);

/// A memif control endpoint: a master (serving one or more interface ids on its socket) or a
/// slave (one interface).
pub enum Endpoint {
    /// Listens; may serve several ids.
    Master(Master),
    /// Connects; one interface.
    Slave(Box<Slave>),
}

impl Endpoint {
    /// Listens on `addr` (master) or prepares to connect to it (slave) with interface `config`.
    pub fn open(
        role: RoleArg,
        addr: &SocketAddress,
        config: InterfaceConfig,
    ) -> Result<Endpoint, String> {
        match role {
            RoleArg::Master => {
                let mut m = Master::bind(addr.clone(), MasterConfig::default())
                    .map_err(|e| format!("listen on {addr}: {e}"))?;
                m.add_interface(config)
                    .map_err(|e| format!("interface on {addr}: {e}"))?;
                Ok(Endpoint::Master(m))
            }
            RoleArg::Slave => {
                let mut s = Slave::new(addr.clone(), config)
                    .map_err(|e| format!("slave for {addr}: {e}"))?;
                s.retry_interval = RETRY;
                Ok(Endpoint::Slave(Box::new(s)))
            }
        }
    }

    /// Serves one more interface id on this master's socket.
    pub fn add_master_interface(&mut self, config: InterfaceConfig) -> Result<(), String> {
        match self {
            Endpoint::Master(m) => m.add_interface(config).map_err(|e| e.to_string()),
            Endpoint::Slave(_) => Err("a slave has exactly one interface".into()),
        }
    }

    /// Whether this endpoint listens on `addr`.
    pub fn is_master_on(&self, addr: &SocketAddress) -> bool {
        matches!(self, Endpoint::Master(m) if m.address() == addr)
    }

    /// Does pending control work without blocking (accepts, handshakes, reconnects).
    pub fn poll(&mut self) {
        let r = match self {
            Endpoint::Master(m) => m.poll(),
            Endpoint::Slave(s) => s.poll(),
        };
        if let Err(e) = r {
            // Per-connection errors never reach here; a failing listener is worth a line.
            eprintln!("memif control: {e}");
        }
    }

    /// Interface `id` (a slave has only its own).
    pub fn interface(&self, id: u32) -> Option<&Interface> {
        match self {
            Endpoint::Master(m) => m.interface(id),
            Endpoint::Slave(s) => Some(s.interface()).filter(|i| i.id() == id),
        }
    }

    /// Interface `id`, for the data path.
    pub fn interface_mut(&mut self, id: u32) -> Option<&mut Interface> {
        match self {
            Endpoint::Master(m) => m.interface_mut(id),
            Endpoint::Slave(s) => Some(s.interface_mut()).filter(|i| i.id() == id),
        }
    }

    /// Whether interface `id` is connected.
    pub fn is_up(&self, id: u32) -> bool {
        self.interface(id).is_some_and(|i| i.is_up())
    }

    /// The control fds worth waking up for (none while a slave waits to retry).
    pub fn control_fds(&self) -> Vec<BorrowedFd<'_>> {
        match self {
            Endpoint::Master(m) => m.control_fds(),
            Endpoint::Slave(s) => s.control_fd().into_iter().collect(),
        }
    }

    /// Blocks until a control fd is readable or `timeout` passes, then does the control work.
    pub fn wait_and_poll(&mut self, timeout: Duration) {
        {
            let mut fds: Vec<PollFd<'_>> = self
                .control_fds()
                .into_iter()
                .map(|fd| PollFd::new(fd, PollFlags::POLLIN))
                .collect();
            block(&mut fds, timeout);
        }
        self.poll();
    }
}

/// poll(2) on `fds` for at most `timeout` (interrupted or failed waits simply return: callers
/// re-check their conditions).
pub fn block(fds: &mut [PollFd<'_>], timeout: Duration) {
    let ms = timeout.as_millis().min(60_000) as u16;
    if fds.is_empty() {
        std::thread::sleep(Duration::from_millis(u64::from(ms)));
        return;
    }
    let _ = nix::poll::poll(fds, PollTimeout::from(ms));
}

/// Prints link changes of one interface (on stdout, one line each, so that scripts and tests can
/// wait for `connected`).
pub struct LinkWatch {
    label: String,
    up: bool,
}

impl LinkWatch {
    /// Watches the interface called `label` in the messages.
    pub fn new(label: &str) -> LinkWatch {
        LinkWatch {
            label: label.to_string(),
            up: false,
        }
    }

    /// Reports a change since the last call; returns whether the link is up.
    pub fn update(&mut self, iface: Option<&Interface>) -> bool {
        let up = iface.is_some_and(|i| i.is_up());
        if up != self.up {
            self.up = up;
            match iface {
                Some(i) if up => println!("connected {} peer={}", self.label, i.peer_name()),
                Some(i) => println!("disconnected {}: {:?}", self.label, i.link()),
                None => println!("disconnected {}", self.label),
            }
        }
        up
    }
}

/// SIGINT and SIGTERM as a readable fd: they are blocked in the calling thread (and the threads
/// it starts afterwards) and queued on a non-blocking signalfd.
pub struct Stop {
    fd: SignalFd,
    seen: bool,
}

impl Stop {
    /// Blocks SIGINT and SIGTERM and opens the signalfd. Call before starting threads.
    pub fn install() -> Result<Stop, String> {
        let mut set = SigSet::empty();
        set.add(Signal::SIGINT);
        set.add(Signal::SIGTERM);
        set.thread_block()
            .map_err(|e| format!("block signals: {e}"))?;
        let fd = SignalFd::with_flags(&set, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
            .map_err(|e| format!("signalfd: {e}"))?;
        Ok(Stop { fd, seen: false })
    }

    /// Whether SIGINT or SIGTERM arrived (non-blocking; stays true once seen).
    pub fn requested(&mut self) -> bool {
        if !self.seen {
            self.seen = matches!(self.fd.read_signal(), Ok(Some(_)));
        }
        self.seen
    }

    /// The fd to poll for `POLLIN`.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Parses a duration: seconds (`2`, `0.5`) or with a unit (`250ms`, `2s`, `1m`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else {
        (s, 1.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (e.g. 10, 2.5s, 250ms, 1m)"))?;
    Duration::try_from_secs_f64(v * scale).map_err(|_| format!("`{s}`: out of range"))
}

/// Parses a memif socket: a path, or `@name` for a Linux abstract socket.
pub fn parse_socket(s: &str) -> Result<SocketAddress, String> {
    if s.is_empty() || s == "@" {
        return Err("empty socket address".into());
    }
    Ok(SocketAddress::parse(s))
}

/// Parses a ring size: a power of two from 2 to 16384; returns its log2.
pub fn parse_ring_size(s: &str) -> Result<u8, String> {
    let n: u32 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    if !n.is_power_of_two() || !(2..=16384).contains(&n) {
        return Err(format!("ring size {n} is not a power of two in 2..=16384"));
    }
    Ok(n.trailing_zeros() as u8)
}
