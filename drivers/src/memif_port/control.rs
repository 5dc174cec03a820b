//! [`MemifControl`]: the one thread that serves every memif port's control socket.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;

use memif::{Interface, InterfaceConfig, Master, MasterConfig, Role, Slave, SocketAddress};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};

use super::config::MemifPortConfig;
use super::port::MemifPort;
use super::tx::{SharedTx, TxLane};
use crate::netns::{NetNs, NetNsId};
use crate::port::{LinkStatus, PortError};

enum Command {
    Add(Arc<MemifPort>, mpsc::Sender<Result<(), PortError>>),
    Remove(String, mpsc::Sender<bool>),
    Stop,
}

/// The control thread of every memif port: handshakes, reconnects, link state, and handing
/// queues to workers.
pub struct MemifControl {
    commands: mpsc::Sender<Command>,
    wake: Arc<EventFd>,
    thread: Option<JoinHandle<()>>,
    workers: usize,
    /// The ports added, by name.
    ports: Mutex<HashMap<String, Weak<MemifPort>>>,
}

impl MemifControl {
    /// Starts the control thread for ports used by `workers` workers (each port's queues are
    /// spread over them; see [`MemifPortConfig::queues`]).
    pub fn start(workers: usize) -> Result<MemifControl, PortError> {
        let wake = Arc::new(
            EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC).map_err(|e| {
                PortError::Sys {
                    what: "eventfd".into(),
                    source: e,
                }
            })?,
        );
        let (tx, rx) = mpsc::channel();
        let w = wake.clone();
        let thread = std::thread::Builder::new()
            .name("quiver-memif".into())
            .spawn(move || ControlLoop::new(rx, w).run())
            .map_err(|e| PortError::Device(format!("cannot start the memif thread: {e}")))?;
        Ok(MemifControl {
            commands: tx,
            wake,
            thread: Some(thread),
            workers: workers.max(1),
            ports: Mutex::new(HashMap::new()),
        })
    }

    fn send(&self, c: Command) {
        let _ = self.commands.send(c);
        let _ = self.wake.write(1);
    }

    /// Adds a port: a master starts listening (sharing the socket with other masters on the same
    /// address), a slave starts connecting. Its link comes up on its own.
    pub fn add_port(&self, config: MemifPortConfig) -> Result<Arc<MemifPort>, PortError> {
        if config.log2_ring_size > memif::ring::MAX_LOG2_RING_SIZE {
            return Err(PortError::Config(format!(
                "{}: log2 ring size {} is above 14",
                config.name, config.log2_ring_size
            )));
        }
        let port = Arc::new(MemifPort::new(config, self.workers));
        let (tx, rx) = mpsc::channel();
        self.send(Command::Add(port.clone(), tx));
        rx.recv()
            .map_err(|_| PortError::Device("the memif thread is gone".into()))??;
        self.registry()
            .insert(port.config.name.clone(), Arc::downgrade(&port));
        Ok(port)
    }

    /// The port called `name`, while it exists.
    pub fn port(&self, name: &str) -> Option<Arc<MemifPort>> {
        self.registry().get(name).and_then(Weak::upgrade)
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, HashMap<String, Weak<MemifPort>>> {
        self.ports.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Removes the port called `name` (disconnecting its peer). Returns whether it existed.
    pub fn remove_port(&self, name: &str) -> bool {
        self.registry().remove(name);
        let (tx, rx) = mpsc::channel();
        self.send(Command::Remove(name.into(), tx));
        rx.recv().unwrap_or(false)
    }
}

impl Drop for MemifControl {
    fn drop(&mut self) {
        self.send(Command::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A master socket: its address and the namespace it was bound in (`None`: Quiver's own).
/// Ports with the same key share one socket.
type MasterKey = (SocketAddress, Option<NetNsId>);

/// Where a port's interface lives on the control thread.
enum Endpoint {
    /// On the master listening on this socket, with this id.
    Master(MasterKey, u32),
    /// Its own slave.
    Slave(Box<Slave>),
}

struct Managed {
    port: Arc<MemifPort>,
    endpoint: Endpoint,
    view: LinkView,
}

/// What the workers were last given.
#[derive(Default)]
struct LinkView {
    /// The interface's `connects` count whose queues were handed out.
    handed: u64,
    up: bool,
}

struct ControlLoop {
    commands: mpsc::Receiver<Command>,
    wake: Arc<EventFd>,
    masters: Vec<(MasterKey, Master)>,
    ports: HashMap<String, Managed>,
}

impl ControlLoop {
    fn new(commands: mpsc::Receiver<Command>, wake: Arc<EventFd>) -> Self {
        ControlLoop {
            commands,
            wake,
            masters: Vec::new(),
            ports: HashMap::new(),
        }
    }

    fn run(mut self) {
        loop {
            while let Ok(c) = self.commands.try_recv() {
                match c {
                    Command::Add(port, reply) => {
                        let _ = reply.send(self.add(port));
                    }
                    Command::Remove(name, reply) => {
                        let _ = reply.send(self.remove(&name));
                    }
                    Command::Stop => return,
                }
            }
            self.step();
            self.wait();
        }
    }

    fn add(&mut self, port: Arc<MemifPort>) -> Result<(), PortError> {
        let cfg = port.config.clone();
        if self.ports.contains_key(&cfg.name) {
            return Err(PortError::Config(format!(
                "a memif port named {} exists",
                cfg.name
            )));
        }
        let mut icfg = InterfaceConfig::new(cfg.id);
        icfg.name = cfg.name.clone();
        icfg.mode = cfg.mode;
        icfg.secret = cfg.secret.clone();
        icfg.buffer_size = cfg.buffer_size;
        icfg.log2_ring_size = cfg.log2_ring_size;
        icfg.queue_pairs = cfg.queues;
        let bad = |e: memif::Error| PortError::Config(format!("{}: {e}", cfg.name));
        let endpoint = match cfg.role {
            Role::Master => {
                let key: MasterKey = (cfg.socket.clone(), cfg.netns.as_ref().map(NetNs::id));
                let k = match self.masters.iter().position(|(k, _)| *k == key) {
                    Some(k) => k,
                    None => {
                        // HELLO offers what the socket's interfaces take; each slave is held
                        // to its own interface's `queues`.
                        let mcfg = MasterConfig::default();
                        let master = match &cfg.netns {
                            None => Master::bind(cfg.socket.clone(), mcfg).map_err(bad)?,
                            Some(ns) => Master::from_listener(
                                ns.listen_memif(&cfg.socket)
                                    .map_err(|e| PortError::Config(format!("{}: {e}", cfg.name)))?,
                                cfg.socket.clone(),
                                mcfg,
                            ),
                        };
                        self.masters.push((key.clone(), master));
                        self.masters.len() - 1
                    }
                };
                self.masters[k].1.add_interface(icfg).map_err(bad)?;
                Endpoint::Master(key, cfg.id)
            }
            Role::Slave => {
                let mut slave = Slave::new(cfg.socket.clone(), icfg).map_err(bad)?;
                if let Some(ns) = cfg.netns.clone() {
                    // Every (re)connect from inside the namespace, where the master's socket is.
                    slave.set_connector(Box::new(move |addr| {
                        ns.run(|| memif::socket::ControlSocket::connect(addr))
                            .unwrap_or_else(|e| Err(memif::Error::Config(e.to_string())))
                    }));
                }
                Endpoint::Slave(Box::new(slave))
            }
        };
        tracing::info!(port = %cfg.name, role = ?cfg.role, socket = %cfg.socket, id = cfg.id,
            queues = cfg.queues, "memif port added");
        self.ports.insert(
            cfg.name.clone(),
            Managed {
                port,
                endpoint,
                view: LinkView::default(),
            },
        );
        Ok(())
    }

    fn remove(&mut self, name: &str) -> bool {
        let Some(m) = self.ports.remove(name) else {
            return false;
        };
        for w in &m.port.workers {
            w.hand_over(Vec::new(), None);
        }
        m.port.set_link(LinkStatus::Down("removed".into()));
        match m.endpoint {
            Endpoint::Master(key, id) => {
                if let Some(k) = self.masters.iter().position(|(x, _)| *x == key) {
                    self.masters[k].1.remove_interface(id, "interface removed");
                    if self.masters[k].1.is_empty() {
                        self.masters.remove(k);
                    }
                }
            }
            Endpoint::Slave(mut s) => s.disconnect("interface removed"),
        }
        true
    }

    /// Advances every handshake and hands out or withdraws queues on link changes.
    fn step(&mut self) {
        let ports = &mut self.ports;
        for (key, m) in &mut self.masters {
            // Queues go to the workers before the slave reads CONNECTED: it may transmit at
            // once, and the frames it sends to another port must find that port's queues.
            let up = m.poll_with(|iface| {
                let id = iface.id();
                let served =
                    |e: &Endpoint| matches!(e, Endpoint::Master(k, i) if k == key && *i == id);
                if let Some(managed) = ports.values_mut().find(|p| served(&p.endpoint)) {
                    sync(&managed.port, &mut managed.view, iface);
                }
            });
            if let Err(e) = up {
                tracing::warn!(socket = %m.address(), "memif master: {e}");
            }
        }
        let masters = &mut self.masters;
        for managed in self.ports.values_mut() {
            let iface = match &mut managed.endpoint {
                Endpoint::Master(key, id) => masters
                    .iter_mut()
                    .find(|(k, _)| k == key)
                    .and_then(|(_, m)| m.interface_mut(*id)),
                Endpoint::Slave(s) => {
                    if let Err(e) = s.poll() {
                        tracing::warn!(port = %managed.port.config.name, "memif slave: {e}");
                    }
                    Some(s.interface_mut())
                }
            };
            if let Some(iface) = iface {
                sync(&managed.port, &mut managed.view, iface);
            }
        }
    }

    /// Sleeps until a control socket or the command channel has something, or 50 ms pass (slaves
    /// retry connecting on a timer).
    fn wait(&self) {
        let mut fds: Vec<BorrowedFd<'_>> = vec![self.wake.as_fd()];
        for (_, m) in &self.masters {
            fds.extend(m.control_fds());
        }
        for managed in self.ports.values() {
            if let Endpoint::Slave(s) = &managed.endpoint {
                fds.extend(s.control_fd());
            }
        }
        let mut pfds: Vec<PollFd<'_>> = fds
            .into_iter()
            .map(|fd| PollFd::new(fd, PollFlags::POLLIN))
            .collect();
        let _ = nix::poll::poll(&mut pfds, PollTimeout::from(50u8));
        drop(pfds);
        let _ = self.wake.read();
    }
}

/// Brings a port's view in line with its interface: new connection → queues to the workers;
/// link lost → queues withdrawn.
fn sync(port: &MemifPort, view: &mut LinkView, iface: &mut Interface) {
    let counters = iface.counters();
    if iface.is_up() && counters.connects != view.handed {
        if let Some(q) = iface.detach_queues() {
            let workers = port.workers.len();
            let (nrx, ntx) = (q.rx.len(), q.tx.len());
            let rx = spread_rx(q.rx, workers);
            let tx = spread_tx(q.tx, workers);
            for ((w, rx), tx) in port.workers.iter().zip(rx).zip(tx) {
                w.hand_over(rx, tx);
            }
            view.handed = counters.connects;
            view.up = true;
            port.set_link(LinkStatus::Up);
            tracing::info!(port = %port.config.name, peer = iface.peer_name(), rx_queues = nrx,
                tx_queues = ntx, workers, shared_tx = ntx < workers, "memif link up");
        }
    } else if !iface.is_up() && view.up {
        for w in &port.workers {
            w.hand_over(Vec::new(), None);
        }
        view.up = false;
        let why = match iface.link() {
            memif::LinkState::Down(r) => r.clone(),
            memif::LinkState::Up => String::new(),
        };
        port.set_link(LinkStatus::Down(why));
    } else if !iface.is_up() {
        port.set_link(LinkStatus::Down(down_reason(iface)));
    }
    port.set_status(iface);
}

/// Why a link is down, with the last refusal when there was one since it last came up, so
/// `show memif` and `show interfaces` say why a peer cannot connect.
fn down_reason(iface: &Interface) -> String {
    let r = match iface.link() {
        memif::LinkState::Down(r) => r.clone(),
        memif::LinkState::Up => String::new(),
    };
    match iface.refusals().last() {
        Some(last) if r == "not connected" || r.is_empty() => {
            format!("not connected: last peer refused: {last}")
        }
        _ => r,
    }
}

/// Receive ring `i` goes to worker `i % workers`: each worker's rings, in order.
fn spread_rx(rings: Vec<memif::RxQueue>, workers: usize) -> Vec<Vec<memif::RxQueue>> {
    let mut out: Vec<Vec<memif::RxQueue>> = (0..workers).map(|_| Vec::new()).collect();
    for (i, r) in rings.into_iter().enumerate() {
        out[i % workers.max(1)].push(r);
    }
    out
}

/// Worker `w` sends on transmit queue `w % queues`: its own when no other worker maps to it,
/// shared otherwise (fewer queues than workers). Queues beyond the workers' count stay
/// unused, as in VPP.
fn spread_tx(queues: Vec<memif::TxQueue>, workers: usize) -> Vec<Option<TxLane>> {
    let n = queues.len();
    if n == 0 {
        return (0..workers).map(|_| None).collect();
    }
    let mut lanes: Vec<Option<TxLane>> = Vec::with_capacity(workers);
    let mut shared: Vec<Option<Arc<SharedTx>>> = (0..n).map(|_| None).collect();
    let mut own: Vec<Option<memif::TxQueue>> = queues.into_iter().map(Some).collect();
    for w in 0..workers {
        let q = w % n;
        let users = (0..workers).filter(|x| x % n == q).count();
        if users == 1 {
            lanes.push(own[q].take().map(TxLane::Own));
        } else {
            if shared[q].is_none() {
                shared[q] = own[q].take().map(|t| Arc::new(SharedTx::new(t)));
            }
            lanes.push(shared[q].clone().map(TxLane::Shared));
        }
    }
    lanes
}
