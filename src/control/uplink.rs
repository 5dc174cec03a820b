//! The node uplink of NSM's tunnels: when the kernel holds the tunnel address (`NSM_TUNNEL_IP`
//! on the node's NIC, as in a Kubernetes node), Quiver shares that NIC with the node instead of
//! taking it. An AF_XDP port in tunnel mode takes only the datagrams of Quiver's tunnels (VXLAN's
//! port, NSM's WireGuard range); ARP, ping, the node's TCP and everything else stay the kernel's.
//!
//! The port gets the tunnel address and its subnet, and the kernel's default gateway when Quiver
//! has no default route. Next hops' MACs come from the kernel's neighbour table, mirrored into
//! Quiver's as it changes: Quiver never answers ARP on the node's NIC and never competes with the
//! kernel for it. A next hop a tunnel needs that the table lacks is asked of the kernel
//! (`NTF_USE`), and asked again every [`REFRESH`] so the kernel keeps confirming it.
//!
//! Either family: with an IPv6 tunnel address the kernel keeps neighbour discovery for the
//! node's address (solicitations are ICMPv6, which the XDP program leaves to it), Quiver mirrors
//! the kernel's IPv6 neighbour table and asks the kernel for the next hops it lacks; it sends
//! no solicitation of its own on the shared NIC (the port's neighbours are the kernel's).

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use drivers::uplink::{self, find_uplink, KernelUplink, Neighbour, NeighbourWatch, UplinkError};

use super::owner::{Change, Control};
use crate::config::{AfXdpSection, PortSection, XdpAttachKey, XdpCopyKey};
use crate::forwarder::ForwarderError;

/// The uplink port's name.
pub const UPLINK_PORT: &str = "uplink";
/// How long the watcher waits for a neighbour change before it looks at the tunnels again.
const POLL: Duration = Duration::from_millis(100);
/// How often the tunnels' next hops are asked of the kernel again while they are known.
const REFRESH: Duration = Duration::from_secs(20);
/// How long an unanswered next hop waits before it is asked again.
const RETRY: Duration = Duration::from_secs(1);
/// How often WireGuard tunnels' endpoints are read (from the owner, not the view).
const WG_EVERY: Duration = Duration::from_secs(1);
/// The largest MTU an AF_XDP port takes without multi-buffer frames.
const MAX_XDP_MTU: u32 = 3822;

/// Why the node uplink could not be attached.
#[derive(Debug, thiserror::Error)]
pub enum NodeUplinkError {
    /// The kernel's links could not be read, or its neighbour changes not watched.
    #[error(transparent)]
    Kernel(#[from] UplinkError),
    /// The forwarder refused the uplink port, its address or its default route.
    #[error("the uplink on {interface}: {source}")]
    Forwarder {
        /// The kernel interface.
        interface: String,
        /// Why.
        #[source]
        source: ForwarderError,
    },
    /// The kernel's neighbour table of the interface could not be read.
    #[error("the uplink on {interface}: {source}")]
    Neighbours {
        /// The kernel interface.
        interface: String,
        /// Why.
        #[source]
        source: UplinkError,
    },
    /// The thread mirroring the kernel's neighbours could not be started.
    #[error("the uplink's neighbour watch: {0}")]
    Thread(#[source] std::io::Error),
}

/// A running node uplink: the port, and the thread mirroring the kernel's neighbours into it.
/// Dropping it stops the thread; the port stays with the forwarder until it stops.
pub struct NodeUplink {
    /// The kernel link it is attached to.
    pub link: KernelUplink,
    next_hops: Arc<NextHops>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl NodeUplink {
    /// Attaches to the kernel link that holds `ip` in Quiver's namespace, taking UDP to
    /// `tunnel_ports`; `Ok(None)` when no link holds it. On error nothing is left.
    pub fn attach(
        control: &Control,
        ip: IpAddr,
        tunnel_ports: Vec<u16>,
    ) -> Result<Option<NodeUplink>, NodeUplinkError> {
        let Some(link) = find_uplink(ip)? else {
            return Ok(None);
        };
        // Subscribed before the port exists: no change falls between the table and the watch.
        let mut watch = NeighbourWatch::open(&link, POLL)?;
        let port = PortSection::AfXdp(AfXdpSection {
            name: UPLINK_PORT.into(),
            mac: None,
            mtu: link.mtu.min(MAX_XDP_MTU) as u16,
            interface: link.interface.clone(),
            netns: None,
            frames: 2048,
            copy: XdpCopyKey::default(),
            attach: XdpAttachKey::default(),
            tunnel_ports,
        });
        control
            .apply(Change::AddPort { port, owner: None })
            .map_err(|source| NodeUplinkError::Forwarder {
                interface: link.interface.clone(),
                source,
            })?;
        let next_hops = Arc::new(NextHops {
            link: link.clone(),
            known: Mutex::new(HashSet::new()),
            learned: Condvar::new(),
        });
        let mut mirror = Mirror {
            control: control.clone(),
            link: link.clone(),
            next_hops: next_hops.clone(),
            known: HashMap::new(),
            asked: HashMap::new(),
            wg_endpoints: Vec::new(),
            wg_read: None,
        };
        if let Err(e) = mirror.configure(&mut watch) {
            let _ = control.apply(Change::RemoveInterface {
                name: UPLINK_PORT.into(),
            });
            return Err(e);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("quiver-uplink".into())
            .spawn(move || mirror.run(&mut watch, &flag))
            .map_err(NodeUplinkError::Thread)?;
        Ok(Some(NodeUplink {
            link,
            next_hops,
            stop,
            thread: Some(thread),
        }))
    }
}

impl NodeUplink {
    /// What tunnels' creators use to have their next hop known before their first packet.
    pub fn next_hops(&self) -> Arc<NextHops> {
        self.next_hops.clone()
    }
}

/// The next hops the uplink's table holds, shared with the tunnels' creators: a tunnel's first
/// packet (a WireGuard handshake initiation, retried only 5 s later) must not wait for ARP.
pub struct NextHops {
    link: KernelUplink,
    known: Mutex<HashSet<IpAddr>>,
    learned: Condvar,
}

impl NextHops {
    /// The uplink's address (the tunnels' local address).
    pub fn ip(&self) -> IpAddr {
        self.link.ip
    }

    /// Makes sure Quiver's table has the next hop toward `remote`: asks the kernel to resolve
    /// it if it is not known, and waits at most `wait` for the answer to reach the data path.
    /// Returns whether it is known.
    pub fn prepare(&self, remote: IpAddr, wait: Duration) -> bool {
        let Some(hop) = self.link.next_hop(remote) else {
            return false;
        };
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        if known.contains(&hop) {
            return true;
        }
        if let Err(e) = uplink::resolve(self.link.index, hop) {
            tracing::warn!(error = %e, %hop, "node uplink: asking the kernel for a next hop");
            return false;
        }
        let (known, _) = self
            .learned
            .wait_timeout_while(known, wait, |k| !k.contains(&hop))
            .unwrap_or_else(|e| e.into_inner());
        known.contains(&hop)
    }

    fn set(&self, hop: IpAddr, known: bool) {
        let mut set = self.known.lock().unwrap_or_else(|e| e.into_inner());
        if known {
            set.insert(hop);
        } else {
            set.remove(&hop);
        }
        self.learned.notify_all();
    }
}

impl Drop for NodeUplink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The kernel's neighbours of the uplink, kept in Quiver's table.
struct Mirror {
    control: Control,
    link: KernelUplink,
    next_hops: Arc<NextHops>,
    /// What Quiver's table has for the uplink.
    known: HashMap<IpAddr, [u8; 6]>,
    /// When each next hop was last asked of the kernel.
    asked: HashMap<IpAddr, Instant>,
    /// WireGuard tunnels' endpoints (of the uplink's family), as last read.
    wg_endpoints: Vec<IpAddr>,
    wg_read: Option<Instant>,
}

impl Mirror {
    /// The address, the default route and the table as it is now.
    fn configure(&mut self, watch: &mut NeighbourWatch) -> Result<(), NodeUplinkError> {
        let refused = |source| NodeUplinkError::Forwarder {
            interface: self.link.interface.clone(),
            source,
        };
        let (ip, len) = (self.link.ip, self.link.prefix_len);
        self.apply(Change::AddAddress {
            port: UPLINK_PORT.into(),
            ip,
            len,
            owner: None,
        })
        .map_err(refused)?;
        if let Some(gw) = self.link.gateway {
            let has_default = self
                .control
                .inspect(move |f| f.has_default_route(ip.is_ipv6()))
                .map_err(refused)?;
            if !has_default {
                let any = match ip {
                    IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
                    IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
                };
                self.apply(Change::AddRoute {
                    prefix: any,
                    len: 0,
                    via: vec![(gw, UPLINK_PORT.into())],
                    owner: None,
                })
                .map_err(refused)?;
            }
        }
        let table = watch
            .table()
            .map_err(|source| NodeUplinkError::Neighbours {
                interface: self.link.interface.clone(),
                source,
            })?;
        self.reconcile(&table);
        Ok(())
    }

    fn apply(&self, change: Change) -> Result<(), ForwarderError> {
        self.control.apply(change).map(|_| ())
    }

    fn run(mut self, watch: &mut NeighbourWatch, stop: &AtomicBool) {
        tracing::info!(
            interface = %self.link.interface,
            ip = %self.link.ip,
            gateway = ?self.link.gateway,
            "node uplink: tunnels' datagrams to Quiver, the rest to the kernel; neighbours from \
             the kernel's table"
        );
        while !stop.load(Ordering::Relaxed) {
            match watch.changes() {
                Ok(Some(changes)) => changes.iter().for_each(|n| self.learn(*n)),
                Ok(None) => match watch.table() {
                    Ok(table) => self.reconcile(&table),
                    Err(e) => tracing::warn!(error = %e, "node uplink: reading the neighbours"),
                },
                Err(e) => {
                    tracing::warn!(error = %e, "node uplink: neighbour changes");
                    std::thread::sleep(POLL);
                }
            }
            self.ask_for_next_hops(watch);
        }
    }

    /// Makes Quiver's table what the kernel's `table` says.
    fn reconcile(&mut self, table: &[Neighbour]) {
        let present: Vec<IpAddr> = table
            .iter()
            .filter_map(|n| match n {
                Neighbour::At(ip, _) => Some(*ip),
                Neighbour::Unknown(_) => None,
            })
            .collect();
        let gone: Vec<IpAddr> = self
            .known
            .keys()
            .filter(|ip| !present.contains(ip))
            .copied()
            .collect();
        for ip in gone {
            self.learn(Neighbour::Unknown(ip));
        }
        table.iter().for_each(|n| self.learn(*n));
    }

    /// One neighbour's news, into Quiver's table.
    fn learn(&mut self, n: Neighbour) {
        let change = match n {
            Neighbour::At(ip, mac) if self.known.get(&ip) != Some(&mac) => {
                self.known.insert(ip, mac);
                Change::AddNeighbor {
                    port: UPLINK_PORT.into(),
                    ip,
                    mac,
                    owner: None,
                }
            }
            Neighbour::Unknown(ip) if self.known.remove(&ip).is_some() => Change::RemoveNeighbor {
                port: UPLINK_PORT.into(),
                ip,
            },
            _ => return,
        };
        match self.apply(change) {
            Ok(()) => match n {
                Neighbour::At(ip, _) => self.next_hops.set(ip, true),
                Neighbour::Unknown(ip) => self.next_hops.set(ip, false),
            },
            Err(e) => {
                tracing::warn!(error = %e, ?n, "node uplink: a neighbour the kernel reported")
            }
        }
    }

    /// Asks the kernel for the next hops of Quiver's tunnels: those it does not know after
    /// [`RETRY`], those it knows every [`REFRESH`].
    fn ask_for_next_hops(&mut self, watch: &mut NeighbourWatch) {
        let now = Instant::now();
        if self
            .wg_read
            .is_none_or(|t| now.duration_since(t) >= WG_EVERY)
        {
            self.wg_read = Some(now);
            if let Ok(status) = self.control.inspect(|f| f.wireguard_status()) {
                let v6 = self.link.ip.is_ipv6();
                self.wg_endpoints = status
                    .iter()
                    .flat_map(|t| t.peers.iter().filter_map(|p| Some(p.endpoint?.ip())))
                    .filter(|ip| ip.is_ipv6() == v6)
                    .collect();
            }
        }
        let view = self.control.view();
        let remotes = view
            .tunnels()
            .iter()
            .filter(|t| t.local == self.link.ip)
            .map(|t| t.remote)
            .chain(self.wg_endpoints.iter().copied());
        let mut hops: Vec<IpAddr> = remotes.filter_map(|r| self.link.next_hop(r)).collect();
        hops.sort_unstable();
        hops.dedup();
        for hop in hops {
            let wait = if self.known.contains_key(&hop) {
                REFRESH
            } else {
                RETRY
            };
            if self
                .asked
                .get(&hop)
                .is_some_and(|t| now.duration_since(*t) < wait)
            {
                continue;
            }
            self.asked.insert(hop, now);
            if let Err(e) = watch.resolve(hop) {
                tracing::warn!(error = %e, %hop, "node uplink: asking the kernel for a next hop");
            }
        }
        self.asked
            .retain(|_, t| now.duration_since(*t) < REFRESH + REFRESH);
    }
}
